//! Unit tests of the protocol and the in-crate crash campaign (PREAMBLE: crash testing inside
//! the crate). The campaign keeps a host-side model with ack/durable instants and checks, after
//! recovery from every sampled crash image: all-or-nothing per transaction, durable
//! transactions present, acknowledged normal writes present, host-aborted transactions absent,
//! a later overlapping transaction never without the earlier one, never foreign data.

use crate::format::OOB_BYTES;
use crate::Mobius;
use flash::{Content, ContentTag, DeviceConfig, Flash, Lpn, Store};
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

fn crash(d: Mobius, at: u64) -> Mobius {
    let mut f = Box::new(d).into_flash();
    let cfg = f.config().clone();
    let img = f.store().snapshot();
    let mut f2 = Flash::new(cfg, img);
    f2.start_clock_at(at);
    let _ = &mut f;
    Mobius::recover(f2, &DesignOptions::default()).unwrap().0
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
    let hot = (lpns / 8).max(16);
    for _ in 0..requests {
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
    let cfg = small();
    let mut d = Mobius::format(Flash::in_memory(cfg.clone(), OOB_BYTES, true), o).unwrap();
    let lpns = (d.logical_pages() * 9 / 10).min(3000);
    let base: Box<dyn Store> = d.flash_mut().start_recording();
    let run = workload(&mut d, seed, requests, lpns, large);
    let log = d.flash_mut().take_log().unwrap();
    let order = log.completion_order();
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0xC0FFEE);
    let mut checked = 0;
    for p in 0..points {
        let n = if p == 0 {
            order.len()
        } else {
            rng.random_range(0..=order.len())
        };
        let mut t = log.instant_after(&order, n);
        let tear = p % 2 == 1 && n < order.len();
        if tear {
            let op = &log.ops[order[n]];
            t = (op.span.start_ns + op.span.end_ns) / 2;
        }
        let img = log.image_at(base.as_ref(), t, tear);
        let mut f = Flash::new(cfg.clone(), img);
        f.start_clock_at(t);
        let (mut r, rep) = Mobius::recover(f, o).map_err(|e| format!("recovery at {t}: {e}"))?;
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
        (8, 2500, 1500)
    } else {
        (2, 900, 120)
    };
    let mut total = 0;
    for s in 0..seeds {
        total += campaign(100 + s, req, pts, &DesignOptions::default(), s % 2 == 1).unwrap();
    }
    eprintln!("mobius crash campaign: {total} crash points checked");
}

#[test]
fn injected_bugs_are_caught() {
    for bug in ["skip_verify", "flag_early"] {
        let o = DesignOptions::default().with("inject_bug", bug);
        let mut caught = false;
        for s in 0..6 {
            if campaign(7 + s, 500, 150, &o, false).is_err() {
                caught = true;
                break;
            }
        }
        assert!(caught, "inject_bug={bug} was not caught by the campaign");
    }
}

#[test]
#[ignore]
fn debug_live() {
    let mut d = fresh(&DesignOptions::default());
    let lpns = (d.logical_pages() * 9 / 10).min(3000);
    let run = workload(&mut d, 100, 900, lpns, false);
    let at = d.flash().idle_ns();
    let seen: Vec<Option<u64>> = (0..lpns).map(|l| read1(&mut d, l, at)).collect();
    eprintln!("live: {:?}", run.model.check(&seen, u64::MAX / 2));
    eprintln!(
        "2744 versions {:?} seen {:?}",
        run.model.versions[2744], seen[2744]
    );
    let d2 = crash(d, at);
    let mut d2 = d2;
    let seen: Vec<Option<u64>> = (0..lpns)
        .map(|l| read1(&mut d2, l, at + 100_000_000))
        .collect();
    eprintln!("recovered: {:?}", run.model.check(&seen, at));
}

#[test]
#[ignore]
fn debug_nospace() {
    let mut d = fresh(&DesignOptions::default());
    let lpns = (d.logical_pages() * 9 / 10).min(3000);
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        workload(&mut d, 101, 900, lpns, true)
    }));
    eprintln!(
        "free {} head {} tail {} pins {} txs {} metrics {:?}",
        d.space.pool.free_blocks(),
        d.head,
        d.tail,
        d.pins.iter().sum::<u32>(),
        d.txs.len(),
        d.metrics()
    );
    let full: Vec<(u32, u32, u32)> = d
        .space
        .pool
        .full_blocks()
        .map(|b| (b.0, d.space.validity.valid_count(b), d.pins[b.0 as usize]))
        .collect();
    eprintln!("full blocks (id, valid, pins): {full:?}");
    let _ = r;
}
