//! Unit tests of the protocol and the in-crate crash campaign (PREAMBLE: crash testing inside
//! the crate). The campaign keeps a host-side model with ack/durable instants and checks, after
//! recovery from every sampled crash image: all-or-nothing per transaction, durable
//! transactions present, acknowledged normal writes present, host-aborted transactions absent,
//! a later overlapping transaction never without the earlier one, never foreign data.

use crate::format::{entries_per_page, NO_PPN, OOB_BYTES};
use crate::Mobius;
use flash::{Content, ContentTag, DeviceConfig, Flash, Lpn, OpCause, Store};
use ftl::{
    BlockDevice, DesignOptions, DwriteFlag, FtlError, PageOutcome, SwriteMode, Transactional,
    TxUuid,
};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

fn small() -> DeviceConfig {
    DeviceConfig::preset("small").unwrap()
}

fn fresh(o: &DesignOptions) -> Mobius {
    Mobius::format(Flash::in_memory(small(), OOB_BYTES, true), o).unwrap()
}

fn tag(lpn: u32, write: u64) -> Content {
    Content::Tag(ContentTag { lpn, write })
}

fn read1(d: &mut Mobius, lpn: u32, at: u64) -> Option<u64> {
    let mut out = Vec::new();
    d.read(Lpn(lpn), 1, at, &mut out).unwrap();
    match &out[0] {
        PageOutcome::Data(Content::Tag(t)) => {
            assert_eq!(t.lpn, lpn, "foreign data");
            Some(t.write)
        }
        PageOutcome::Unwritten => None,
        o => panic!("lpn {lpn}: {o:?}"),
    }
}

// ------------------------------------------------------------------ host model

#[derive(Clone, Copy, Debug, PartialEq)]
enum Owner {
    Normal { ack: u64 },
    Tx(usize),
}

#[derive(Clone, Debug, Default)]
struct TxRec {
    durable: Option<u64>,
    abort_ack: Option<u64>,
    aborted_arrival: Option<u64>,
    /// (lpn, index of its version in that lpn's list)
    pages: Vec<(u32, usize)>,
}

#[derive(Default)]
struct Model {
    versions: Vec<Vec<(u64, Owner)>>,
    txs: Vec<TxRec>,
}

impl Model {
    fn new(lpns: u32) -> Model {
        Model {
            versions: vec![Vec::new(); lpns as usize],
            txs: Vec::new(),
        }
    }
    fn version_index(&self, lpn: u32, write: Option<u64>) -> Result<isize, String> {
        match write {
            None => Ok(-1),
            Some(w) => self.versions[lpn as usize]
                .iter()
                .position(|v| v.0 == w)
                .map(|i| i as isize)
                .ok_or_else(|| format!("lpn {lpn}: foreign/inner write {w}")),
        }
    }

    /// Checks the state read back after a crash at `t`.
    fn check(&self, seen: &[Option<u64>], t: u64) -> Result<(), String> {
        let idx: Vec<isize> = (0..seen.len())
            .map(|l| self.version_index(l as u32, seen[l]))
            .collect::<Result<_, _>>()?;
        // Acked normal writes.
        for (l, vs) in self.versions.iter().enumerate() {
            for (i, v) in vs.iter().enumerate() {
                if let Owner::Normal { ack } = v.1 {
                    if ack <= t && idx[l] < i as isize {
                        return Err(format!(
                            "lpn {l}: acked write {} (ack {ack}) lost at {t}",
                            v.0
                        ));
                    }
                }
            }
        }
        let mut present = vec![false; self.txs.len()];
        let mut absent = vec![false; self.txs.len()];
        for (k, tx) in self.txs.iter().enumerate() {
            for &(l, i) in &tx.pages {
                match idx[l as usize].cmp(&(i as isize)) {
                    std::cmp::Ordering::Equal => present[k] = true,
                    std::cmp::Ordering::Less => absent[k] = true,
                    _ => {}
                }
            }
            if present[k] && absent[k] {
                let detail: Vec<String> = tx
                    .pages
                    .iter()
                    .map(|&(l, i)| {
                        let o = idx[l as usize];
                        format!("lpn {l} want {i} saw {o} {:?}", self.versions[l as usize])
                    })
                    .collect();
                return Err(format!(
                    "tx #{k} ({:?}) is partially present at {t}: {detail:?}",
                    (tx.durable, tx.abort_ack, tx.aborted_arrival)
                ));
            }
            if tx.abort_ack.is_some_and(|a| a <= t) && present[k] {
                return Err(format!("tx #{k} aborted (acked) but present at {t}"));
            }
            if tx.durable.is_some_and(|d| d <= t)
                && tx.abort_ack.is_none()
                && tx.aborted_arrival.is_none()
                && absent[k]
            {
                return Err(format!(
                    "tx #{k} durable at {:?} but lost at {t}",
                    tx.durable
                ));
            }
        }
        // Ordering: a later overlapping tx never survives without the earlier one.
        for (l, vs) in self.versions.iter().enumerate() {
            let txs: Vec<usize> = vs
                .iter()
                .filter_map(|v| match v.1 {
                    Owner::Tx(k) => Some(k),
                    _ => None,
                })
                .collect();
            for a in 0..txs.len() {
                for b in a + 1..txs.len() {
                    let (e, la) = (txs[a], txs[b]);
                    if self.txs[e].aborted_arrival.is_none() && present[la] && absent[e] {
                        return Err(format!(
                            "lpn {l}: tx #{la} survived without earlier overlapping tx #{e} at {t}"
                        ));
                    }
                }
            }
        }
        Ok(())
    }
}

// ------------------------------------------------------------------ workload

struct Run {
    model: Model,
    lpns: u32,
    end_ns: u64,
}

fn workload(d: &mut Mobius, seed: u64, requests: usize, lpns: u32, large: bool) -> Run {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut m = Model::new(lpns);
    let mut now = 1_000u64;
    let mut write = 1u64;
    let mut uuid = 1u64;
    let mut recent: Vec<(TxUuid, usize)> = Vec::new();
    let mut deferred: std::collections::HashMap<TxUuid, usize> = Default::default();
    let hot = (lpns / 8).max(16);
    for _ in 0..requests {
        for (u, c) in d.take_completions(now).unwrap() {
            let k = deferred
                .remove(&u)
                .expect("completion of a deferred SWRITE");
            if m.txs[k].abort_ack.is_none() {
                m.txs[k].durable = c.durable_ns;
            }
        }
        now += rng.random_range(0..150_000u64);
        // The host keeps at most ~2 ms of work queued.
        now = now.max(d.flash().idle_ns().saturating_sub(2_000_000));
        let r = rng.random_range(0..100u32);
        if r < 35 {
            let n = rng.random_range(1..5u32);
            let s = rng.random_range(0..lpns - n);
            let pages: Vec<Content> = (0..n).map(|i| tag(s + i, write + i as u64)).collect();
            let c = d.write(Lpn(s), &pages, now).unwrap();
            for i in 0..n {
                m.versions[(s + i) as usize]
                    .push((write + i as u64, Owner::Normal { ack: c.ack_ns }));
            }
            write += n as u64;
        } else if r < 75 || (large && r < 77) {
            let n = if r >= 75 {
                rng.random_range(100..d.max_tx_pages() as u32)
            } else {
                rng.random_range(2..12u32)
            };
            let mut set: Vec<u32> = Vec::new();
            while set.len() < n as usize {
                let l = if n > 100 {
                    rng.random_range(0..lpns)
                } else if rng.random_bool(0.5) {
                    rng.random_range(0..hot)
                } else {
                    rng.random_range(0..lpns)
                };
                if !set.contains(&l) {
                    set.push(l);
                }
            }
            let pages: Vec<(Lpn, Content)> = set
                .iter()
                .enumerate()
                .map(|(i, &l)| (Lpn(l), tag(l, write + i as u64)))
                .collect();
            let mode = if rng.random_bool(0.5) {
                SwriteMode::Sync
            } else {
                SwriteMode::Async
            };
            let u = TxUuid(uuid);
            uuid += 1;
            let c = d.swrite(u, &pages, mode, now).unwrap();
            let k = m.txs.len();
            if c.ack_ns == ftl::ACK_DEFERRED {
                assert!(
                    n < 10 && c.durable_ns.is_none(),
                    "only small txs are merged"
                );
                deferred.insert(u, k);
            }
            let mut rec = TxRec {
                durable: c.durable_ns,
                ..TxRec::default()
            };
            for (i, &l) in set.iter().enumerate() {
                m.versions[l as usize].push((write + i as u64, Owner::Tx(k)));
                rec.pages.push((l, m.versions[l as usize].len() - 1));
            }
            m.txs.push(rec);
            recent.push((u, k));
            write += n as u64;
        } else if r < 85 {
            if let Some(&(u, k)) = recent.iter().rev().nth(rng.random_range(0..3usize)) {
                match d.abort(u, now) {
                    Ok(c) => {
                        m.txs[k].abort_ack = Some(c.ack_ns);
                        m.txs[k].aborted_arrival = Some(now);
                    }
                    Err(FtlError::AlreadyCommitted(_)) | Err(FtlError::UnknownTx(_)) => {}
                    Err(e) => panic!("abort: {e}"),
                }
            }
        } else if r < 93 {
            let u = TxUuid(uuid);
            uuid += 1;
            let n = rng.random_range(1..6u32);
            let mut set: Vec<u32> = Vec::new();
            while set.len() < n as usize {
                let l = rng.random_range(0..hot);
                if !set.contains(&l) {
                    set.push(l);
                }
            }
            let abort = rng.random_bool(0.25);
            let k = m.txs.len();
            let mut rec = TxRec::default();
            for (i, &l) in set.iter().enumerate() {
                now += rng.random_range(0..50_000u64);
                let last = i + 1 == set.len() && !abort;
                let flag = match (i, last) {
                    (0, true) => DwriteFlag::Single,
                    (0, false) => DwriteFlag::Head,
                    (_, true) => DwriteFlag::Rear,
                    _ => DwriteFlag::Body,
                };
                let c = d.dwrite(u, Lpn(l), &tag(l, write), flag, now).unwrap();
                if last {
                    rec.durable = c.durable_ns;
                }
                m.versions[l as usize].push((write, Owner::Tx(k)));
                rec.pages.push((l, m.versions[l as usize].len() - 1));
                write += 1;
                // Misuse while it runs is refused.
                if !last && rng.random_bool(0.2) {
                    assert!(matches!(
                        d.write(Lpn(0), &[tag(0, 0)], now),
                        Err(FtlError::DynamicTxRunning(_))
                    ));
                }
            }
            if abort {
                now += 1000;
                let c = d.abort(TxUuid(0), now).unwrap();
                rec.abort_ack = Some(c.ack_ns);
                rec.aborted_arrival = Some(now);
            }
            m.txs.push(rec);
        } else {
            let mut out = Vec::new();
            let l = rng.random_range(0..lpns);
            if rng.random_bool(0.5) {
                d.sread(Lpn(l), 1, now, &mut out).unwrap();
            } else {
                d.read(Lpn(l), 1, now, &mut out).unwrap();
            }
        }
        d.check_invariants().unwrap();
    }
    for (u, c) in d.take_completions(u64::MAX).unwrap() {
        let k = deferred
            .remove(&u)
            .expect("completion of a deferred SWRITE");
        if m.txs[k].abort_ack.is_none() {
            m.txs[k].durable = c.durable_ns;
        }
    }
    assert!(deferred.is_empty(), "every deferred SWRITE completes");
    Run {
        model: m,
        lpns,
        end_ns: d.flash().idle_ns(),
    }
}

/// Runs a workload, then recovers from `points` crash instants (half of them torn) and checks.
fn campaign(
    seed: u64,
    requests: usize,
    points: usize,
    o: &DesignOptions,
    large: bool,
) -> Result<usize, String> {
    campaign_on(small(), seed, requests, points, o, large)
}

fn campaign_on(
    cfg: DeviceConfig,
    seed: u64,
    requests: usize,
    points: usize,
    o: &DesignOptions,
    large: bool,
) -> Result<usize, String> {
    let mut d = Mobius::format(Flash::in_memory(cfg.clone(), OOB_BYTES, true), o).unwrap();
    let lpns = (d.logical_pages() * 9 / 10).min(3000);
    let base: Box<dyn Store> = d.flash_mut().start_recording();
    let run = workload(&mut d, seed, requests, lpns, large);
    let log = d.flash_mut().take_log().unwrap();
    let order = log.completion_order();
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0xC0FFEE);
    let mut checked = 0;
    // Aimed points: merges (translation pages, GM records) and every erase.
    let aimed: Vec<usize> = order
        .iter()
        .enumerate()
        .filter(|(_, &i)| {
            let op = &log.ops[i];
            matches!(
                op.cause,
                OpCause::Mapping | OpCause::Checkpoint | OpCause::GcCopy
            ) || matches!(op.kind, flash::OpKind::Erase { .. })
        })
        .map(|(k, _)| k)
        .collect();
    for p in 0..points {
        let n = if p == 0 {
            order.len()
        } else if p % 4 == 2 && !aimed.is_empty() {
            aimed[rng.random_range(0..aimed.len())] + rng.random_range(0..2usize)
        } else {
            rng.random_range(0..=order.len())
        };
        let n = n.min(order.len());
        let mut t = log.instant_after(&order, n);
        let tear = p % 2 == 1 && n < order.len();
        if tear {
            let op = &log.ops[order[n]];
            t = (op.span.start_ns + op.span.end_ns) / 2;
        }
        let img = log.image_at(base.as_ref(), t, tear);
        let mut f = Flash::new(cfg.clone(), img);
        f.start_clock_at(t);
        let repeat = p % 8 == 3;
        let base2 = repeat.then(|| f.start_recording());
        let (mut r, mut rep) =
            Mobius::recover(f, o).map_err(|e| format!("recovery at {t}: {e}"))?;
        if let Some(base2) = base2 {
            // A second power cut in the middle of recovery's own writes (decision M20).
            let log2 = r.flash_mut().take_log().unwrap();
            let o2 = log2.completion_order();
            if !o2.is_empty() {
                let op = &log2.ops[o2[rng.random_range(0..o2.len())]];
                let t2 = (op.span.start_ns + op.span.end_ns) / 2;
                let mut f2 = Flash::new(cfg.clone(), log2.image_at(base2.as_ref(), t2, true));
                f2.start_clock_at(t2);
                let (r2, rep2) =
                    Mobius::recover(f2, o).map_err(|e| format!("second recovery at {t2}: {e}"))?;
                r = r2;
                rep = rep2;
            }
        }
        r.check_invariants()
            .map_err(|e| format!("after recovery at {t}: {e}"))?;
        let mut seen = Vec::with_capacity(run.lpns as usize);
        let mut out = Vec::new();
        let at = r.flash().idle_ns();
        r.read(Lpn(0), run.lpns, at, &mut out)
            .map_err(|e| e.to_string())?;
        for (l, o) in out.iter().enumerate() {
            seen.push(match o {
                PageOutcome::Data(Content::Tag(tg)) if tg.lpn == l as u32 => Some(tg.write),
                PageOutcome::Unwritten => None,
                o => return Err(format!("lpn {l}: {o:?} after crash at {t}")),
            });
        }
        run.model.check(&seen, t).map_err(|e| {
            format!(
                "seed {seed} crash at {t} (op {n}/{}, tear {tear}): {e}; recovery {rep:?}",
                order.len()
            )
        })?;
        checked += 1;
    }
    let _ = run.end_ns;
    Ok(checked)
}

fn long() -> bool {
    std::env::var("MOBIUS_LONG").is_ok_and(|v| v == "1")
}

#[test]
fn crash_campaign_mixed_workload() {
    let (seeds, req, pts) = if long() {
        (12, 2500, 1500)
    } else {
        (4, 900, 100)
    };
    let mut total = 0;
    for s in 0..seeds {
        // Small-tx merging on (the default) and off, alternately.
        let o = if s % 4 < 2 {
            DesignOptions::default()
        } else {
            opts()
        };
        total += campaign(100 + s, req, pts, &o, s % 2 == 1).unwrap();
    }
    eprintln!("mobius crash campaign: {total} crash points checked");
}

/// Evicting Area of two translation pages (of four): lookups miss, pages are evicted and
/// reloaded (each reload asserts the evicted view was clean), merges and GC run, and every
/// crash image still recovers to a state the host model accepts.
#[test]
fn evicting_area_bounded_crash_campaign() {
    let o = DesignOptions::default().with("evicting_kb", "8");
    let (seeds, req, pts) = if long() {
        (2, 2500, 1000)
    } else {
        (1, 900, 80)
    };
    for s in 0..seeds {
        campaign(300 + s, req, pts, &o, s % 2 == 1).unwrap();
    }
    let mut d = fresh(&o);
    let lpns = (d.logical_pages() * 9 / 10).min(3000);
    let run = workload(&mut d, 301, 900, lpns, false);
    let m: std::collections::HashMap<String, f64> = d.metrics().into_iter().collect();
    assert!(
        m["tp_evictions"] > 0.0 && m["tp_misses"] > m["tp_evictions"] / 2.0,
        "{m:?}"
    );
    let at = d.flash().idle_ns();
    let seen: Vec<Option<u64>> = (0..lpns).map(|l| read1(&mut d, l, at)).collect();
    run.model.check(&seen, u64::MAX / 2).unwrap();
    assert!(d.tp_lru.len() <= d.evicting_tps);
}

/// §IV-E: small static txs share one atom inode; each SWRITE completes when the group closes
/// (at the merge window, or when a conflicting / non-small request arrives); the group commits
/// or aborts as one tx; a member aborted while the group is open leaves no trace.
#[test]
fn small_transactions_merge_into_one_inode() {
    let mut d = fresh(&DesignOptions::default());
    let window = d.cfg.merge_window_ns;
    assert!(d.cfg.merge_small && d.cfg.small_tx_pages == 10 && window > 0);
    let tail0 = d.tail;
    let mut acks = Vec::new();
    for k in 0..4u32 {
        let c = d
            .swrite(
                TxUuid(10 + k as u64),
                &tx_pages(&[3 * k, 3 * k + 1], 100 + k as u64),
                SwriteMode::Async,
                1000 + k as u64,
            )
            .unwrap();
        acks.push(c.ack_ns);
    }
    assert!(acks.iter().all(|&a| a == ftl::ACK_DEFERRED));
    assert!(
        d.take_completions(1010).unwrap().is_empty(),
        "window still open"
    );
    // Member 11 aborts while the group is open: acknowledged at once, nothing on flash.
    let a = d.abort(TxUuid(11), 1100).unwrap();
    assert_eq!(a.ack_ns, 1100);
    // A read does not close the group and does not see it (read committed).
    let mut out = Vec::new();
    d.read(Lpn(0), 1, 1200, &mut out).unwrap();
    assert_eq!(out[0], PageOutcome::Unwritten);
    let done = d.take_completions(1000 + window).unwrap();
    assert_eq!(done.len(), 4, "three members and the aborted one: {done:?}");
    let aborted = done.iter().find(|(u, _)| *u == TxUuid(11)).unwrap().1;
    assert_eq!(aborted.durable_ns, None);
    let members: Vec<ftl::TxCompletion> = done
        .iter()
        .filter(|(u, _)| *u != TxUuid(11))
        .map(|x| x.1)
        .collect();
    assert!(members
        .iter()
        .all(|c| c.ack_ns > 1000 + window - 1 && c.durable_ns.is_some()));
    // One inode (plus the batch/announcement inodes the protocol needs) for three txs.
    let inodes: Vec<_> = ala_inodes(&mut d)
        .into_iter()
        .filter(|i| i.ala_seq >= tail0 && i.kind() == crate::format::InodeKind::Static)
        .collect();
    assert_eq!(inodes.len(), 1);
    assert_eq!(inodes[0].items.len(), 6);
    let end = members.iter().map(|c| c.durable_ns.unwrap()).max().unwrap();
    for (k, want) in [(0u32, Some(100)), (3, None), (6, Some(102)), (9, Some(103))] {
        assert_eq!(read1(&mut d, k, end + 1), want, "lpn {k}");
    }
    // A conflicting small SWRITE closes the open group first; a large one closes it too.
    let t = end + 10;
    d.swrite(TxUuid(20), &tx_pages(&[50], 200), SwriteMode::Sync, t)
        .unwrap();
    d.swrite(TxUuid(21), &tx_pages(&[50], 201), SwriteMode::Sync, t + 1)
        .unwrap();
    assert_eq!(
        d.take_completions(t + 1).unwrap().len(),
        1,
        "conflict closed the first group"
    );
    let big: Vec<u32> = (100..120).collect();
    let c = d
        .swrite(TxUuid(22), &tx_pages(&big, 300), SwriteMode::Sync, t + 2)
        .unwrap();
    assert_ne!(c.ack_ns, ftl::ACK_DEFERRED);
    assert_eq!(d.take_completions(t + 2).unwrap().len(), 1);
    // Switch off: every SWRITE is acknowledged at once.
    let mut off = fresh(&opts());
    let c = off
        .swrite(TxUuid(1), &tx_pages(&[1, 2], 5), SwriteMode::Async, 1000)
        .unwrap();
    assert_ne!(c.ack_ns, ftl::ACK_DEFERRED);
}

/// A crash while a group is open loses the whole group (no member was acknowledged); a crash
/// after its inode is on flash keeps all of it.
#[test]
fn merged_group_is_atomic_across_a_crash() {
    let o = DesignOptions::default();
    let (mut d, base) = recording(&o);
    for k in 0..3u32 {
        d.swrite(
            TxUuid(1 + k as u64),
            &tx_pages(&[10 * k, 10 * k + 1, 10 * k + 2], 7 + k as u64),
            SwriteMode::Sync,
            1000 + k as u64,
        )
        .unwrap();
    }
    let done = d.take_completions(u64::MAX).unwrap();
    assert_eq!(done.len(), 3);
    let durable = done.iter().map(|x| x.1.durable_ns.unwrap()).max().unwrap();
    let (order, instants) = {
        let log = d.flash().log().unwrap();
        let order = log.completion_order();
        let instants: Vec<u64> = (0..=order.len())
            .map(|n| log.instant_after(&order, n))
            .collect();
        (order, instants)
    };
    assert!(!order.is_empty());
    for t in instants {
        let (mut r, _) = crash_at(&d, base.as_ref(), t, false, &o);
        let seen: Vec<Option<u64>> = [0u32, 1, 2, 10, 11, 12, 20, 21, 22]
            .iter()
            .map(|&l| {
                let at = r.flash().idle_ns();
                read1(&mut r, l, at)
            })
            .collect();
        let all = seen.iter().all(|x| x.is_some());
        let none = seen.iter().all(|x| x.is_none());
        assert!(all || none, "group torn at {t}: {seen:?}");
        if t >= durable {
            assert!(all, "durable group lost at {t}");
        }
    }
}

/// The merge rewrites translation pages from their previous copies; the invariant holding every
/// loaded page to the view catches a view entry the pages do not have (a change a merge missed).
#[test]
fn a_loaded_translation_page_that_differs_from_the_view_is_caught() {
    let mut d = fresh(&DesignOptions::default());
    let lpns = (d.logical_pages() * 9 / 10).min(3000);
    workload(&mut d, 77, 900, lpns, false);
    assert!(d.merges > 0, "merges rewrote translation pages");
    d.check_invariants().unwrap();
    let tp = (0..d.gtd.len())
        .find(|&t| d.tp_loaded[t] && d.gtd[t] != NO_PPN)
        .expect("a loaded translation page on flash");
    let per = entries_per_page(d.flash().geometry().page_bytes);
    d.base[tp * per] ^= 1;
    let err = d.check_invariants().unwrap_err();
    assert!(format!("{err}").contains("differs from the view"), "{err}");
}

/// A reload after eviction keeps the view instead of decoding the page again, so the invariant
/// holds evicted pages to their copies too: a view entry changed while its page was out of the
/// Evicting Area is caught, and so is one changed after the reload.
#[test]
fn an_evicted_translation_page_that_differs_from_the_view_is_caught() {
    let mut d = fresh(&DesignOptions::default().with("evicting_kb", "8"));
    let lpns = (d.logical_pages() * 9 / 10).min(3000);
    workload(&mut d, 78, 900, lpns, false);
    assert!(d.tp_evictions > 0, "the Evicting Area dropped pages");
    d.check_invariants().unwrap();
    let tp = (0..d.gtd.len())
        .find(|&t| d.tp_evicted[t] && !d.tp_loaded[t] && d.gtd[t] != NO_PPN)
        .expect("an evicted translation page on flash");
    let per = entries_per_page(d.flash().geometry().page_bytes);
    d.base[tp * per] ^= 1;
    let err = d.check_invariants().unwrap_err();
    assert!(format!("{err}").contains("differs from the view"), "{err}");
    // The reload is a flash read (time and counter) that leaves the view as it found it.
    let (reads, misses) = (d.flash().stats().total_reads(), d.tp_misses);
    let at = d.flash().idle_ns();
    let ready = d.load_tp(tp, at).unwrap();
    assert!(ready > at, "the reload took a read's time");
    assert_eq!(d.flash().stats().total_reads(), reads + 1);
    assert_eq!(d.tp_misses, misses + 1);
    assert!(d.tp_loaded[tp]);
    let err = d.check_invariants().unwrap_err();
    assert!(format!("{err}").contains("differs from the view"), "{err}");
    d.base[tp * per] ^= 1;
    d.check_invariants().unwrap();
}

#[test]
fn injected_bugs_are_caught() {
    for bug in ["skip_verify", "flag_early"] {
        // Unmerged: a merged group's data is on flash before any inode can flag it. Large
        // transactions, so that a transaction's data is still programming when the next inode
        // (which flags it early) is durable: with small ones on a channel model that lets idle
        // chips transfer, the data is done first and an early flag does no harm.
        let o = opts().with("inject_bug", bug);
        let mut caught = false;
        for s in 0..12 {
            if campaign(7 + s, 500, 400, &o, true).is_err() {
                caught = true;
                break;
            }
        }
        assert!(caught, "inject_bug={bug} was not caught by the campaign");
    }
}

// ------------------------------------------------------------------ pointed unit tests

/// The pointed tests look at one transaction's own inode: small-tx merging off.
fn opts() -> DesignOptions {
    DesignOptions::default().with("merge_small", "off")
}

fn recording(o: &DesignOptions) -> (Mobius, Box<dyn Store>) {
    let mut d = fresh(o);
    let b = d.flash_mut().start_recording();
    (d, b)
}

fn crash_at(
    d: &Mobius,
    base: &dyn Store,
    t: u64,
    tear: bool,
    o: &DesignOptions,
) -> (Mobius, ftl::RecoveryReport) {
    let img = d.flash().log().unwrap().image_at(base, t, tear);
    let mut f = Flash::new(d.flash().config().clone(), img);
    f.start_clock_at(t);
    let (r, rep) = Mobius::recover(f, o).unwrap();
    r.check_invariants().unwrap();
    (r, rep)
}

fn detail(rep: &ftl::RecoveryReport, key: &str) -> f64 {
    rep.details.iter().find(|(k, _)| k == key).unwrap().1
}

fn tx_pages(lpns: &[u32], write: u64) -> Vec<(Lpn, Content)> {
    lpns.iter()
        .enumerate()
        .map(|(i, &l)| (Lpn(l), tag(l, write + i as u64)))
        .collect()
}

/// All inodes of the active ALA of a live device.
fn ala_inodes(d: &mut Mobius) -> Vec<crate::format::Inode> {
    let mut v = Vec::new();
    let mut oob = [0u8; OOB_BYTES as usize];
    for idx in d.head..d.tail {
        let (_, ppn) = d.ala_ppn(idx);
        let (st, _) = d.flash.read(ppn, &mut oob, 0, OpCause::Recovery).unwrap();
        if let flash::ReadStatus::Data(Content::Bytes(b)) = st {
            if let Ok(i) = crate::format::Inode::decode(&b) {
                v.push(i);
            }
        }
    }
    v
}

#[test]
fn pointed_inode_is_committed_by_its_flag() {
    let o = opts();
    let (mut d, base) = recording(&o);
    let c = d
        .swrite(TxUuid(1), &tx_pages(&[1, 2, 3], 10), SwriteMode::Sync, 1000)
        .unwrap();
    let mut t = c.ack_ns;
    for k in 0..3u64 {
        t += 10;
        let c = d
            .swrite(
                TxUuid(10 + k),
                &tx_pages(&[100 + k as u32, 200 + k as u32], 100 + 10 * k),
                SwriteMode::Sync,
                t,
            )
            .unwrap();
        t = c.ack_ns;
    }
    let inodes = ala_inodes(&mut d);
    let id = inodes.iter().find(|i| i.uuid == 1).unwrap().tx_id;
    assert!(
        inodes.iter().any(|i| i.commit_flags.contains(&id)),
        "a later inode points to tx 1"
    );
    let (mut r, rep) = crash_at(&d, base.as_ref(), t, false, &o);
    assert_eq!(read1(&mut r, 2, u64::MAX / 4), Some(11));
    assert!(
        detail(&rep, "verify_reads") < 6.0,
        "pointed txs are not re-verified"
    );
}

#[test]
fn unpointed_complete_inode_is_verified_and_committed() {
    let o = opts();
    let (mut d, base) = recording(&o);
    let c = d
        .swrite(
            TxUuid(1),
            &tx_pages(&[5, 6, 7, 8], 10),
            SwriteMode::Sync,
            1000,
        )
        .unwrap();
    assert_eq!(c.durable_ns, Some(c.ack_ns));
    let (mut r, rep) = crash_at(&d, base.as_ref(), c.ack_ns, false, &o);
    assert_eq!(detail(&rep, "tx_verified"), 1.0);
    assert_eq!(detail(&rep, "verify_reads"), 4.0);
    let at = r.flash().idle_ns();
    for (i, l) in [5, 6, 7, 8].iter().enumerate() {
        assert_eq!(read1(&mut r, *l, at), Some(10 + i as u64));
    }
    // Idempotent: the RecoveryResolution inode now points to it.
    let t = r.flash().idle_ns();
    let f = Box::new(r).into_flash();
    let mut f2 = Flash::new(f.config().clone(), f.store().snapshot());
    f2.start_clock_at(t);
    let (mut r2, rep2) = Mobius::recover(f2, &o).unwrap();
    assert_eq!(detail(&rep2, "verify_reads"), 0.0);
    assert_eq!(read1(&mut r2, 7, t + 10_000_000), Some(12));
}

#[test]
fn unpointed_incomplete_inode_is_aborted() {
    let o = opts();
    let (mut d, base) = recording(&o);
    d.write(Lpn(3), &[tag(3, 1)], 500).unwrap();
    let lpns: Vec<u32> = (0..12).collect();
    let c = d
        .swrite(TxUuid(1), &tx_pages(&lpns, 100), SwriteMode::Async, 1000)
        .unwrap();
    let durable = c.durable_ns.unwrap();
    assert!(durable > c.ack_ns, "data still in flight at the async ack");
    let (mut r, rep) = crash_at(&d, base.as_ref(), c.ack_ns, false, &o);
    assert_eq!(detail(&rep, "tx_rejected"), 1.0);
    let at = r.flash().idle_ns();
    assert_eq!(read1(&mut r, 3, at), Some(1), "pre-tx data");
    assert_eq!(read1(&mut r, 0, at), None);
    // After durable_ns it is always committed.
    let (mut r, _) = crash_at(&d, base.as_ref(), durable, false, &o);
    assert_eq!(read1(&mut r, 3, u64::MAX / 4), Some(103));
}

fn dyn_tx(
    d: &mut Mobius,
    uuid: u64,
    lpns: &[u32],
    write: u64,
    mut t: u64,
    rear: bool,
) -> (u64, Vec<u64>) {
    let mut acks = Vec::new();
    for (i, &l) in lpns.iter().enumerate() {
        let flag = match (i, i + 1 == lpns.len() && rear) {
            (0, true) => DwriteFlag::Single,
            (0, false) => DwriteFlag::Head,
            (_, true) => DwriteFlag::Rear,
            _ => DwriteFlag::Body,
        };
        let c = d
            .dwrite(TxUuid(uuid), Lpn(l), &tag(l, write + i as u64), flag, t)
            .unwrap();
        acks.push(c.ack_ns);
        t = c.ack_ns + 1;
    }
    (t, acks)
}

#[test]
fn dynamic_committed_unfinished_and_aborted() {
    let o = opts();
    // Committed: present after REAR; also when only the closed ring (no inode yet) is on flash.
    let (mut d, base) = recording(&o);
    d.write(Lpn(1), &[tag(1, 1)], 100).unwrap();
    let (_, acks) = dyn_tx(&mut d, 7, &[1, 2, 3], 10, 1000, true);
    let rear = *acks.last().unwrap();
    let (mut r, _) = crash_at(&d, base.as_ref(), rear, false, &o);
    assert_eq!(read1(&mut r, 1, u64::MAX / 4), Some(10));
    let (mut r, rep) = crash_at(&d, base.as_ref(), rear - 1, false, &o);
    assert!(detail(&rep, "chain_reads") >= 3.0);
    assert_eq!(
        read1(&mut r, 3, u64::MAX / 4),
        Some(12),
        "closed ring commits"
    );
    // Unfinished: HEAD + BODY, no REAR.
    let (mut d, base) = recording(&o);
    d.write(Lpn(1), &[tag(1, 1)], 100).unwrap();
    let (t, _) = dyn_tx(&mut d, 8, &[1, 2], 10, 1000, false);
    let mut out = Vec::new();
    d.read(Lpn(1), 1, t, &mut out).unwrap();
    assert_eq!(
        out[0],
        PageOutcome::Data(tag(1, 10)),
        "reads see the running tx"
    );
    let (mut r, _) = crash_at(&d, base.as_ref(), t, false, &o);
    let at = r.flash().idle_ns();
    assert_eq!(read1(&mut r, 1, at), Some(1));
    assert_eq!(read1(&mut r, 2, at), None);
    // Aborted: ABORT(0) restores the mapping at once and after a crash.
    let (mut d, base) = recording(&o);
    d.write(Lpn(1), &[tag(1, 1)], 100).unwrap();
    let (t, _) = dyn_tx(&mut d, 9, &[1, 2], 10, 1000, false);
    let a = d.abort(TxUuid(0), t).unwrap();
    assert_eq!(read1(&mut d, 1, a.ack_ns), Some(1));
    let (mut r, _) = crash_at(&d, base.as_ref(), a.ack_ns, false, &o);
    let at = r.flash().idle_ns();
    assert_eq!(read1(&mut r, 1, at), Some(1));
    assert_eq!(read1(&mut r, 2, at), None);
}

#[test]
fn s_max_bounds_how_long_a_tx_stays_unflagged() {
    let o = opts().with("s_max", 4);
    let mut d = fresh(&o);
    let mut t = 1000;
    for k in 0..40u64 {
        let n = 2 + (k % 7) as u32;
        let l: Vec<u32> = (0..n).map(|i| (k as u32 * 13 + i * 7) % 500).collect();
        let c = d
            .swrite(TxUuid(k + 1), &tx_pages(&l, k * 100), SwriteMode::Async, t)
            .unwrap();
        t = c.ack_ns + 1;
    }
    let inodes = ala_inodes(&mut d);
    let pending: Vec<u32> = d
        .txs
        .iter()
        .filter(|t| !t.resolved)
        .map(|t| t.tx_id)
        .collect();
    let mut checked = 0;
    for (i, ino) in inodes.iter().enumerate() {
        if ino.kind() != crate::format::InodeKind::Static || pending.contains(&ino.tx_id) {
            continue;
        }
        let j = inodes
            .iter()
            .position(|x| x.commit_flags.contains(&ino.tx_id))
            .expect("flagged");
        assert!(
            j > i && j - i <= 4,
            "tx {} at {i} flagged at {j}",
            ino.tx_id
        );
        checked += 1;
    }
    assert!(checked > 10);
}

#[test]
fn tx_a_tx_b_ordering_survives_every_crash() {
    // Tx(A) = {A, B, C}, Tx(B) = {D, E, C} (the paper's example), A before B, both async.
    let o = opts();
    let (mut d, base) = recording(&o);
    let a_pages: Vec<u32> = (0..20).chain([500]).collect(); // slow A
    let ca = d
        .swrite(
            TxUuid(1),
            &tx_pages(&a_pages, 1000),
            SwriteMode::Async,
            1000,
        )
        .unwrap();
    let cb = d
        .swrite(
            TxUuid(2),
            &tx_pages(&[600, 601, 500], 2000),
            SwriteMode::Async,
            1001,
        )
        .unwrap();
    assert!(cb.durable_ns >= ca.durable_ns, "B is not durable before A");
    let log = d.flash().log().unwrap();
    let order = log.completion_order();
    let end = cb.durable_ns.unwrap().max(ca.durable_ns.unwrap());
    let mut checked = 0;
    for n in 0..=order.len() {
        let t = log.instant_after(&order, n);
        if t > end + 1 {
            break;
        }
        let (mut r, _) = crash_at(&d, base.as_ref(), t, false, &o);
        let at = r.flash().idle_ns();
        let b = read1(&mut r, 600, at) == Some(2000);
        let a = read1(&mut r, 0, at) == Some(1000);
        assert!(!b || a, "Tx(B) survived without Tx(A) at {t}");
        if t >= ca.durable_ns.unwrap() {
            assert!(a);
        }
        assert_eq!(
            read1(&mut r, 500, at),
            if b {
                Some(2002)
            } else if a {
                Some(1020)
            } else {
                None
            }
        );
        checked += 1;
    }
    assert!(checked > 5);
}

#[test]
fn acknowledged_abort_survives_crash() {
    let o = opts();
    let (mut d, base) = recording(&o);
    let lpns: Vec<u32> = (0..12).collect();
    let c = d
        .swrite(TxUuid(1), &tx_pages(&lpns, 100), SwriteMode::Async, 1000)
        .unwrap();
    let a = d.abort(TxUuid(1), c.ack_ns).unwrap();
    assert!(a.ack_ns < c.durable_ns.unwrap() || a.ack_ns >= c.ack_ns);
    assert!(
        d.abort(TxUuid(1), a.ack_ns).is_err(),
        "a second abort is refused"
    );
    let end = d.flash().idle_ns();
    for t in [a.ack_ns, c.durable_ns.unwrap(), end] {
        let t = t.max(a.ack_ns);
        let (mut r, _) = crash_at(&d, base.as_ref(), t, false, &o);
        assert_eq!(
            read1(&mut r, 4, u64::MAX / 4),
            None,
            "aborted tx present at {t}"
        );
    }
    // Abort after every page is on flash: too late.
    let c = d
        .swrite(TxUuid(2), &tx_pages(&[1, 2], 500), SwriteMode::Sync, end)
        .unwrap();
    assert_eq!(
        d.abort(TxUuid(2), c.ack_ns + 1),
        Err(FtlError::AlreadyCommitted(TxUuid(2)))
    );
}

#[test]
fn multipart_transactions_are_atomic() {
    let cfg = small()
        .with_overrides(None, &["geometry.page_bytes=1024".into()])
        .unwrap();
    let o = opts();
    let mut d = Mobius::format(Flash::in_memory(cfg.clone(), OOB_BYTES, true), &o).unwrap();
    assert!(
        d.max_tx_pages() > d.items_per_inode as u64,
        "multipart possible"
    );
    let base = d.flash_mut().start_recording();
    let n = (d.items_per_inode as u32) * 2 + 10;
    let lpns: Vec<u32> = (0..n).collect();
    let c = d
        .swrite(TxUuid(1), &tx_pages(&lpns, 1), SwriteMode::Async, 1000)
        .unwrap();
    let inodes = ala_inodes(&mut d);
    assert_eq!(inodes.iter().filter(|i| i.uuid == 1).count(), 3);
    let too = d.max_tx_pages() + 1;
    let big: Vec<u32> = (0..too as u32).collect();
    assert!(matches!(
        d.swrite(TxUuid(2), &tx_pages(&big, 1), SwriteMode::Sync, c.ack_ns),
        Err(FtlError::TxTooLarge { .. })
    ));
    let log = d.flash().log().unwrap();
    let order = log.completion_order();
    for k in 0..=order.len() {
        let t = log.instant_after(&order, k);
        for tear in [false, true] {
            let t = if tear { t + 1 } else { t };
            let (mut r, _) = crash_at(&d, base.as_ref(), t, tear, &o);
            let at = r.flash().idle_ns();
            let first = read1(&mut r, 0, at);
            for l in (0..n).step_by(17) {
                assert_eq!(
                    read1(&mut r, l, at).is_some(),
                    first.is_some(),
                    "partial multipart tx at {t}"
                );
            }
            if t >= c.durable_ns.unwrap() {
                assert!(first.is_some());
            }
        }
    }
}

#[test]
fn misuse_is_a_typed_error() {
    let mut d = fresh(&opts());
    let lp = d.logical_pages();
    let t = 1000;
    assert_eq!(
        d.dwrite(TxUuid(1), Lpn(1), &tag(1, 1), DwriteFlag::Body, t),
        Err(FtlError::NoDynamicTx)
    );
    assert_eq!(
        d.swrite(TxUuid(0), &tx_pages(&[1], 1), SwriteMode::Sync, t),
        Err(FtlError::ReservedTx(TxUuid(0)))
    );
    assert_eq!(
        d.swrite(TxUuid(3), &[], SwriteMode::Sync, t),
        Err(FtlError::EmptyRequest)
    );
    assert!(matches!(
        d.swrite(TxUuid(3), &tx_pages(&[lp], 1), SwriteMode::Sync, t),
        Err(FtlError::LpnOutOfRange { .. })
    ));
    assert!(matches!(
        d.swrite(TxUuid(3), &tx_pages(&[4, 4], 1), SwriteMode::Sync, t),
        Err(FtlError::DuplicatePage { .. })
    ));
    assert_eq!(d.abort(TxUuid(77), t), Err(FtlError::UnknownTx(TxUuid(77))));
    d.swrite(TxUuid(3), &tx_pages(&[4, 5], 1), SwriteMode::Sync, t)
        .unwrap();
    assert_eq!(
        d.swrite(TxUuid(3), &tx_pages(&[6], 1), SwriteMode::Sync, t),
        Err(FtlError::DuplicateTx(TxUuid(3)))
    );
    d.dwrite(TxUuid(5), Lpn(1), &tag(1, 1), DwriteFlag::Head, t)
        .unwrap();
    assert_eq!(
        d.dwrite(TxUuid(6), Lpn(1), &tag(1, 1), DwriteFlag::Head, t),
        Err(FtlError::DynamicTxRunning(TxUuid(5)))
    );
    assert_eq!(
        d.dwrite(TxUuid(6), Lpn(1), &tag(1, 1), DwriteFlag::Body, t),
        Err(FtlError::UnknownTx(TxUuid(6)))
    );
    assert_eq!(
        d.write(Lpn(9), &[tag(9, 1)], t),
        Err(FtlError::DynamicTxRunning(TxUuid(5)))
    );
    assert_eq!(
        d.swrite(TxUuid(8), &tx_pages(&[9], 1), SwriteMode::Sync, t),
        Err(FtlError::DynamicTxRunning(TxUuid(5)))
    );
    assert!(matches!(
        d.dwrite(TxUuid(5), Lpn(lp), &tag(1, 1), DwriteFlag::Body, t),
        Err(FtlError::LpnOutOfRange { .. })
    ));
    d.dwrite(TxUuid(5), Lpn(2), &tag(2, 1), DwriteFlag::Rear, t)
        .unwrap();
    assert_eq!(
        d.dwrite(TxUuid(5), Lpn(1), &tag(1, 1), DwriteFlag::Head, t),
        Err(FtlError::DuplicateTx(TxUuid(5)))
    );
    assert_eq!(d.abort(TxUuid(0), t), Err(FtlError::NoDynamicTx));
    assert!(matches!(
        d.write(Lpn(0), &[tag(0, 1)], t - 1),
        Err(FtlError::TimeWentBackwards { .. })
    ));
}

#[test]
fn parameters_follow_the_paper_and_are_validated() {
    let g = DeviceConfig::preset("jasmine").unwrap().geometry;
    let c = crate::MobiusConfig::from_options(&g, &opts()).unwrap();
    assert_eq!((c.s_max, c.active_ala_pages, c.c_percent), (16, 3072, 20.0));
    assert_eq!(c.ala_blocks, 992); // 1,000 blocks in whole slots of 16 (one per chip)
    assert_eq!(c.ala_stripe, 16);
    let twenty = opts().with("active_ala_mb", 20);
    assert!(matches!(
        crate::MobiusConfig::from_options(&g, &twenty),
        Err(FtlError::InvalidOption(_))
    ));
    assert!(crate::MobiusConfig::from_options(&g, &twenty.with("c_percent", 31)).is_ok());
    assert!(matches!(
        crate::MobiusConfig::from_options(&g, &opts().with("s_maxx", 3)),
        Err(FtlError::InvalidOption(_))
    ));
}

#[test]
fn sread_waits_for_earlier_static_txs() {
    let mut d = fresh(&opts());
    let lpns: Vec<u32> = (0..12).collect();
    let c = d
        .swrite(TxUuid(1), &tx_pages(&lpns, 100), SwriteMode::Async, 1000)
        .unwrap();
    let mut out = Vec::new();
    let r = d.read(Lpn(11), 1, c.ack_ns, &mut out).unwrap();
    assert!(r.ack_ns < c.durable_ns.unwrap());
    assert_eq!(out[0], PageOutcome::Unwritten, "READ is read-committed");
    let s = d.sread(Lpn(11), 1, c.ack_ns, &mut out).unwrap();
    assert!(s.ack_ns >= c.durable_ns.unwrap());
    assert_eq!(out[0], PageOutcome::Data(tag(11, 111)));
    assert_eq!(
        d.abort(TxUuid(1), c.ack_ns + 1),
        Err(FtlError::AlreadyCommitted(TxUuid(1)))
    );
}

/// Multipart transactions (1 KB pages, so ~120 items per inode) crossing ALA merges and GC:
/// this is the campaign that found GC relocating a translation page a running merge had
/// already replaced (fixed by `superseded_tps`).
#[test]
fn multipart_crash_campaign() {
    let cfg = small()
        .with_overrides(None, &["geometry.page_bytes=1024".into()])
        .unwrap();
    let pts = if long() { 1500 } else { 80 };
    let n = campaign_on(cfg, 42, if long() { 2000 } else { 600 }, pts, &opts(), true).unwrap();
    eprintln!("multipart campaign: {n} crash points");
}

/// A cut that tears the atom inode at the first page of an ALA block leaves the tail unclean:
/// recovery moves the tail to the next block. What is written after that recovery must survive
/// a second power cut (the next scan must not stop at the torn page).
#[test]
fn writes_after_recovering_a_torn_block_start_inode_survive_a_second_cut() {
    let o = opts();
    let (mut d, base) = recording(&o);
    let ppb = d.flash().geometry().pages_per_block as u64;
    let mut t = 1_000;
    let mut write = 10;
    let (torn_at, idx) = loop {
        let idx = d.tail;
        let c = d
            .swrite(
                TxUuid(write),
                &tx_pages(&[1, 2, 3], write),
                SwriteMode::Sync,
                t,
            )
            .unwrap();
        write += 3;
        t = c.ack_ns + 10;
        if idx % ppb == 0 && idx > 0 {
            let (_, ppn) = d.ala_ppn(idx);
            let op = d
                .flash()
                .log()
                .unwrap()
                .ops
                .iter()
                .rev()
                .find(|op| matches!(op.kind, flash::OpKind::Program { ppn: p, .. } if p == ppn))
                .expect("the inode program is logged")
                .clone();
            break ((op.span.start_ns + op.span.end_ns) / 2, idx);
        }
        assert!(write < 100_000, "no inode at a block start");
    };
    let (mut r, _) = crash_at(&d, base.as_ref(), torn_at, true, &o);
    assert!(r.tail > idx, "the torn block start is left behind");
    let now = r.flash().idle_ns() + 10;
    let c = r
        .swrite(
            TxUuid(1 << 40),
            &tx_pages(&[50, 51], 7_000_000),
            SwriteMode::Sync,
            now,
        )
        .unwrap();
    // Second cut after everything finished.
    let end = r.flash().idle_ns().max(c.ack_ns) + 1;
    let img = Box::new(r).into_flash().store().snapshot();
    let mut f = Flash::new(small(), img);
    f.start_clock_at(end);
    let (mut again, _) = Mobius::recover(f, &o).unwrap();
    again.check_invariants().unwrap();
    let at = again.flash().idle_ns();
    assert_eq!(
        read1(&mut again, 50, at),
        Some(7_000_000),
        "acknowledged tx lost"
    );
    assert_eq!(read1(&mut again, 51, at), Some(7_000_001));
}

/// §IV-B: an asynchronous SWRITE returns once its atom inode is on flash; its data pages follow.
/// A cut after the acknowledgement but before the data is durable is a "false positive" the
/// paper accepts: recovery finds the inode, fails to verify the data and aborts the transaction,
/// which is allowed (the acknowledgement promised atomicity, durability only at `durable_ns`).
/// The crash oracle agrees: the same image judged by `crashtest` is not a violation.
#[test]
fn an_async_swrite_cut_between_its_inode_and_its_data_is_aborted_whole() {
    let o = opts();
    let (mut d, base) = recording(&o);
    let before = d
        .swrite(TxUuid(1), &tx_pages(&[1, 2], 10), SwriteMode::Sync, 1000)
        .unwrap();
    let lpns: Vec<u32> = (20..36).collect();
    let c = d
        .swrite(
            TxUuid(2),
            &tx_pages(&lpns, 100),
            SwriteMode::Async,
            before.ack_ns + 10,
        )
        .unwrap();
    let durable = c.durable_ns.unwrap();
    assert!(
        c.ack_ns < durable,
        "async: acknowledged before the data is durable"
    );
    // The cut: the inode is on flash (acknowledged), the data is not all there yet.
    let (mut r, _) = crash_at(&d, base.as_ref(), c.ack_ns, false, &o);
    let at = r.flash().idle_ns();
    let seen: Vec<Option<u64>> = lpns.iter().map(|&l| read1(&mut r, l, at)).collect();
    // Some data pages were on flash, not all: the whole transaction is aborted (the false
    // positive), none of its pages shows.
    assert!(
        seen.iter().all(|s| s.is_none()),
        "a half transaction: {seen:?}"
    );
    assert_eq!(
        read1(&mut r, 1, at),
        Some(10),
        "the earlier synchronous tx survives"
    );
    // After `durable_ns` it must survive.
    let (mut r, _) = crash_at(&d, base.as_ref(), durable, false, &o);
    let at = r.flash().idle_ns();
    assert_eq!(read1(&mut r, 20, at), Some(100));
    assert_eq!(read1(&mut r, 35, at), Some(115));
}

/// GC inside a merge may have to take a block holding a page that a pending static tx rewrites.
/// That move is not logged and the victim is not erased until the tx resolves: the move is
/// dropped if the tx installed its own page, logged if the tx was aborted (then the copy is the
/// mapping). Either way the device and its recovery show the right version.
#[test]
fn a_gc_move_under_a_pending_tx_waits_for_the_tx() {
    for abort in [false, true] {
        let o = opts();
        let (mut d, base) = recording(&o);
        let mut t = 1000;
        // Enough pages that lpn 5's block (written first) is full.
        for i in 0..400u32 {
            t = d.write(Lpn(i), &[tag(i, i as u64 + 1)], t).unwrap().ack_ns + 10;
        }
        let (old, _) = d.lookup(5, t).unwrap();
        let victim = d.flash.geometry().block_of(flash::Ppn(old));
        assert_eq!(d.space.pool.state(victim), ftl::BlockState::Full);
        // Leave lpn 5 the victim's only live page: a relocation inode for the others could
        // carry the pending tx's commit flag, and the tx could no longer be aborted.
        let others: Vec<u32> = d
            .space
            .validity
            .valid_pages(victim)
            .map(|(_, l)| l)
            .filter(|&l| l != 5)
            .collect();
        for l in others {
            t = d
                .write(Lpn(l), &[tag(l, 1000 + l as u64)], t)
                .unwrap()
                .ack_ns
                + 10;
        }
        let c = d
            .swrite(TxUuid(7), &tx_pages(&[5], 500), SwriteMode::Async, t)
            .unwrap();
        let pending = d.pending_lpns();
        d.collect(victim, t, OpCause::GcCopy, &pending).unwrap();
        assert_eq!(d.gc_deferred, 1, "abort {abort}");
        assert!(
            d.flash.write_pointer(victim) > 0,
            "erased under a pending tx"
        );
        let end = if abort {
            d.abort(TxUuid(7), t).unwrap().ack_ns
        } else {
            let durable = c.durable_ns.unwrap();
            d.advance(durable).unwrap();
            durable
        };
        assert_eq!(
            d.flash.write_pointer(victim),
            0,
            "victim erased once the tx resolved"
        );
        let relocs_of_5 = ala_inodes(&mut d)
            .iter()
            .flat_map(|i| i.relocs.clone())
            .filter(|r| r.0 == 5)
            .count();
        assert_eq!(relocs_of_5, usize::from(abort), "abort {abort}");
        let want = if abort { Some(6) } else { Some(500) };
        assert_eq!(read1(&mut d, 5, end + 10), want, "abort {abort}");
        let cut = d.flash().idle_ns() + 10;
        let (mut r, _) = crash_at(&d, base.as_ref(), cut, false, &o);
        let at = r.flash().idle_ns();
        assert_eq!(read1(&mut r, 5, at), want, "after recovery, abort {abort}");
        for l in 0..400 {
            assert_eq!(
                read1(&mut r, l, at),
                read1(&mut d, l, at),
                "lpn {l}, abort {abort}"
            );
        }
    }
}

/// Deferred invalidation (§IV-D, `deferred_invalidation=on`): a superseded page stays valid and
/// its block pinned (GC cannot take it) until a merge folds the newer mapping; without the
/// option it is invalid at once.
#[test]
fn deferred_invalidation_holds_a_superseded_page_until_the_merge() {
    for deferred in [false, true] {
        let o = opts().with("deferred_invalidation", if deferred { "on" } else { "off" });
        let mut d = fresh(&o);
        let t = d.write(Lpn(5), &[tag(5, 1)], 1000).unwrap().ack_ns + 10;
        let (first, _) = d.lookup(5, t).unwrap();
        let block = d.flash.geometry().block_of(flash::Ppn(first));
        let pins_before = d.pins[block.0 as usize];
        let t = d.write(Lpn(5), &[tag(5, 2)], t).unwrap().ack_ns + 10;
        let still_valid = d.space.validity.owner(flash::Ppn(first)) == Some(5);
        assert_eq!(
            still_valid, deferred,
            "deferred {deferred}: before the merge"
        );
        assert_eq!(
            d.pins[block.0 as usize] > pins_before,
            deferred,
            "deferred {deferred}: the block is pinned until the merge"
        );
        d.merge(t, true).unwrap();
        assert_eq!(
            d.space.validity.owner(flash::Ppn(first)),
            None,
            "after the merge"
        );
        assert_eq!(read1(&mut d, 5, t + 10), Some(2));
    }
    assert!(matches!(
        Mobius::format(
            Flash::in_memory(small(), OOB_BYTES, true),
            &opts().with("deferred_invalidation", "maybe")
        ),
        Err(FtlError::InvalidOption(_))
    ));
}

/// A 90 % fill, then twice the capacity in single-page writes, nine in ten to a tenth of the
/// pages: the device and the last write of every page.
fn skewed_run(o: &DesignOptions) -> (Mobius, Vec<u64>) {
    let mut d = fresh(o);
    let logical = d.logical_pages();
    let (hot, filled) = (logical / 10, logical * 9 / 10);
    let mut last = vec![0; filled as usize];
    let mut rng = ChaCha8Rng::seed_from_u64(66);
    let mut at = 0;
    for n in 0..(filled + 2 * logical) as u64 {
        let lpn = match n < filled as u64 {
            true => n as u32,
            false if rng.random_range(0..10) < 9 => rng.random_range(0..hot),
            false => rng.random_range(0..filled),
        };
        at = d.write(Lpn(lpn), &[tag(lpn, n)], at).unwrap().ack_ns;
        last[lpn as usize] = n;
    }
    (d, last)
}

/// §IV-D: "Except ALA, garbage collection scheme is the same as DFTL", so Möbius takes DFTL's
/// victim policies. On a skewed workload cost-benefit copies other pages than greedy, both keep
/// every page's last write, recovery rebuilds the policy it is given, and a policy that does
/// not exist is a typed error.
#[test]
fn gc_takes_the_victim_policy_it_is_given() {
    let policy = |p: &str| DesignOptions::default().with("gc_policy", p);
    let copies = |d: &Mobius| d.flash().stats().programs_for(OpCause::GcCopy);
    let (mut greedy, last) = skewed_run(&policy("greedy"));
    let o = policy("cost-benefit");
    let (mut cb, cb_last) = skewed_run(&o);
    assert_eq!(last, cb_last, "both ran the same requests");
    assert_eq!(greedy.space.policy, ftl::GcPolicy::Greedy);
    assert_eq!(cb.space.policy, ftl::GcPolicy::CostBenefit);
    assert!(copies(&greedy) > 0, "GC copied nothing");
    assert_ne!(copies(&greedy), copies(&cb));
    let at = cb.flash().idle_ns().max(greedy.flash().idle_ns());
    for (lpn, &n) in last.iter().enumerate() {
        for d in [&mut greedy, &mut cb] {
            assert_eq!(read1(d, lpn as u32, at), Some(n), "lpn {lpn}");
        }
    }
    let end = cb.flash().idle_ns();
    let mut flash = Box::new(cb).into_flash();
    flash.start_clock_at(end);
    let (back, _) = Mobius::recover(flash, &o).unwrap();
    assert_eq!(back.space.policy, ftl::GcPolicy::CostBenefit);
    let g = small().geometry;
    assert!(matches!(
        crate::MobiusConfig::from_options(&g, &policy("oldest")),
        Err(FtlError::InvalidOption(_))
    ));
}
