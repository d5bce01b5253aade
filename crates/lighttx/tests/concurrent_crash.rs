//! LightTx crash campaign with *concurrent* dynamic transactions (the shared `txmix` generator
//! keeps one dynamic transaction open at a time), interleaved plain writes and static
//! transactions, aborts, and GC at high utilisation. Its own oracle, per crash image:
//! - every page reads as unwritten or as a write the host issued to that page before the crash,
//!   from a plain write or a transaction that committed — never aborted or foreign data;
//! - a transaction with one page visible has all its pages visible (or newer writes over them);
//! - every write acknowledged durable before the crash is visible (or a newer one);
//! - a visible write implies every earlier transaction on that page is wholly visible.
//!
//! Also: recovery reads grow with the zone size.

use flash::{Content, ContentTag, DeviceConfig, Flash, Lpn, OpLog, Store};
use ftl::{
    BlockDevice, DesignOptions, DwriteFlag, FtlError, PageOutcome, SwriteMode, Transactional,
    TxUuid,
};
use lighttx::LightTx;
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

#[derive(Clone, Debug)]
struct TxModel {
    pages: Vec<(u32, u64)>,
    /// Commit acknowledgement (durable) time, if it committed.
    commit_ns: Option<u64>,
}

/// One write that took effect: (write id, arrival, tx index or None, plain-write ack).
type Effect = (u64, u64, Option<usize>, Option<u64>);

#[derive(Default)]
struct Model {
    /// Per LPN: the writes that took effect, in order.
    writes: Vec<Vec<Effect>>,
    txs: Vec<TxModel>,
}

fn tag(lpn: u32, w: u64) -> Content {
    Content::Tag(ContentTag { lpn, write: w })
}

struct Run {
    base: Box<dyn Store>,
    log: OpLog,
    model: Model,
    ready_ns: u64,
    logical: u32,
}

fn run(seed: u64, zone: u32, ops: usize, fill: f64) -> Run {
    let config = DeviceConfig::preset("small").unwrap();
    let mut flash = Flash::in_memory(config, atomic_write::format::OOB_BYTES, true);
    let base = flash.start_recording();
    let o = DesignOptions::default().with("zone_blocks", zone);
    let mut d = LightTx::format(flash, &o).unwrap();
    let n = d.logical_pages();
    let ready_ns = d.flash().idle_ns();
    let mut m = Model {
        writes: vec![Vec::new(); n as usize],
        txs: Vec::new(),
    };
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut w = 0u64;
    let mut t = ready_ns;
    let mut acks: Vec<u64> = Vec::new();
    let mut open: Vec<(TxUuid, usize, u32)> = Vec::new(); // uuid, tx index, pages left
    let mut next_uuid = 1u64;
    // Fill.
    let fill_pages = (fill * n as f64) as u32;
    let mut l = 0;
    while l < fill_pages {
        let k = 16.min(fill_pages - l);
        let pages: Vec<Content> = (0..k).map(|i| tag(l + i, w + i as u64)).collect();
        let c = d.write(Lpn(l), &pages, t).unwrap();
        for i in 0..k {
            m.writes[(l + i) as usize].push((w + i as u64, t, None, Some(c.ack_ns)));
        }
        w += k as u64;
        l += k;
        t = c.ack_ns;
    }
    for step in 0..ops {
        if acks.len() >= 4 {
            let oldest = acks.remove(0);
            t = t.max(oldest);
        }
        let lpn = rng.random_range(0..n);
        let choice = rng.random_range(0..10);
        let res: Result<u64, FtlError> = if choice < 3 && open.len() < 4 {
            // HEAD of a new dynamic transaction.
            let uuid = TxUuid(next_uuid);
            next_uuid += 1;
            let len = rng.random_range(2..8u32);
            d.dwrite(uuid, Lpn(lpn), &tag(lpn, w), DwriteFlag::Head, t)
                .map(|c| {
                    m.txs.push(TxModel {
                        pages: vec![(lpn, w)],
                        commit_ns: None,
                    });
                    open.push((uuid, m.txs.len() - 1, len - 1));
                    m.writes[lpn as usize].push((w, t, Some(m.txs.len() - 1), None));
                    c.ack_ns
                })
        } else if choice < 7 && !open.is_empty() {
            let k = rng.random_range(0..open.len());
            let (uuid, ti, left) = open[k];
            if rng.random_ratio(1, 8) {
                open.swap_remove(k);
                d.abort(uuid, t).map(|c| c.ack_ns)
            } else {
                let flag = if left == 1 {
                    DwriteFlag::Rear
                } else {
                    DwriteFlag::Body
                };
                let r = d.dwrite(uuid, Lpn(lpn), &tag(lpn, w), flag, t).map(|c| {
                    m.txs[ti].pages.push((lpn, w));
                    m.writes[lpn as usize].push((w, t, Some(ti), None));
                    if flag == DwriteFlag::Rear {
                        m.txs[ti].commit_ns = c.durable_ns;
                        open.swap_remove(k);
                    } else {
                        open[k].2 -= 1;
                    }
                    c.ack_ns
                });
                // A refused page aborts its transaction.
                if r.is_err() {
                    open.swap_remove(k);
                }
                r
            }
        } else if choice < 8 {
            let uuid = TxUuid(next_uuid);
            next_uuid += 1;
            let k = rng.random_range(1..6u32);
            let mut lpns: Vec<u32> = Vec::new();
            while lpns.len() < k as usize {
                let x = rng.random_range(0..n);
                if !lpns.contains(&x) {
                    lpns.push(x);
                }
            }
            let pages: Vec<(Lpn, Content)> = lpns
                .iter()
                .enumerate()
                .map(|(i, &x)| (Lpn(x), tag(x, w + i as u64)))
                .collect();
            let r = d.swrite(uuid, &pages, SwriteMode::Sync, t).map(|c| {
                m.txs.push(TxModel {
                    pages: lpns
                        .iter()
                        .enumerate()
                        .map(|(i, &x)| (x, w + i as u64))
                        .collect(),
                    commit_ns: c.durable_ns,
                });
                for (i, &x) in lpns.iter().enumerate() {
                    m.writes[x as usize].push((w + i as u64, t, Some(m.txs.len() - 1), None));
                }
                c.ack_ns
            });
            w += k as u64 - 1;
            r
        } else {
            d.write(Lpn(lpn), &[tag(lpn, w)], t).map(|c| {
                m.writes[lpn as usize].push((w, t, None, Some(c.ack_ns)));
                c.ack_ns
            })
        };
        w += 1;
        match res {
            Ok(ack) => acks.push(ack),
            Err(FtlError::Conflict { .. }) => {}
            Err(e) => panic!("step {step}: {e}"),
        }
        if step % 500 == 0 {
            d.check_invariants().unwrap();
        }
    }
    let log = d.flash_mut().take_log().unwrap();
    Run {
        base,
        log,
        model: m,
        ready_ns,
        logical: n,
    }
}

/// Judges one recovered image; returns the first broken rule.
fn judge(m: &Model, t: u64, seen: &[Option<u64>]) -> Result<(), String> {
    // Position of the seen write in each LPN's write list.
    let mut pos = vec![None; seen.len()];
    for (lpn, s) in seen.iter().enumerate() {
        if let Some(w) = s {
            let i = m.writes[lpn].iter().position(|x| x.0 == *w).ok_or(format!(
                "lpn {lpn} holds write {w} the host never wrote there"
            ))?;
            let (_, arrival, tx, _) = m.writes[lpn][i];
            if arrival > t {
                return Err(format!(
                    "lpn {lpn} holds write {w} that arrived after the crash"
                ));
            }
            if let Some(ti) = tx {
                if m.txs[ti].commit_ns.is_none() {
                    return Err(format!("lpn {lpn} holds write {w} of uncommitted tx {ti}"));
                }
            }
            pos[lpn] = Some(i);
        }
    }
    let at_least = |lpn: u32, w: u64| -> bool {
        let i = m.writes[lpn as usize]
            .iter()
            .position(|x| x.0 == w)
            .unwrap();
        pos[lpn as usize].is_some_and(|p| p >= i)
    };
    for (ti, tx) in m.txs.iter().enumerate() {
        let visible = tx.pages.iter().any(|&(l, w)| seen[l as usize] == Some(w));
        let durable = tx.commit_ns.is_some_and(|c| c <= t);
        if visible || durable {
            for &(l, w) in &tx.pages {
                if !at_least(l, w) {
                    return Err(format!(
                        "tx {ti} (durable {durable}, visible {visible}) lost page lpn {l} write {w}"
                    ));
                }
            }
        }
    }
    for (lpn, ws) in m.writes.iter().enumerate() {
        for (i, &(w, _, tx, plain_ack)) in ws.iter().enumerate() {
            if plain_ack.is_some_and(|a| a <= t) && pos[lpn].is_none_or(|p| p < i) {
                return Err(format!("lpn {lpn}: acknowledged plain write {w} lost"));
            }
            if let (Some(ti), Some(p)) = (tx, pos[lpn]) {
                if i <= p && m.txs[ti].commit_ns.is_some() {
                    for &(l, w2) in &m.txs[ti].pages {
                        if !at_least(l, w2) {
                            return Err(format!(
                                "lpn {lpn} shows a write newer than tx {ti}, which is not wholly visible (lpn {l})"
                            ));
                        }
                    }
                }
            }
        }
    }
    Ok(())
}

fn crash_campaign(seed: u64, zone: u32, ops: usize, fill: f64, points: usize) -> usize {
    let r = run(seed, zone, ops, fill);
    let order = r.log.completion_order();
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5eed);
    let config = DeviceConfig::preset("small").unwrap();
    let o = DesignOptions::default().with("zone_blocks", zone);
    let mut checked = 0;
    for k in 0..points {
        let i = rng.random_range(0..order.len());
        let op = &r.log.ops[order[i]];
        let torn = k % 2 == 1;
        let t = if torn {
            op.span.start_ns + (op.span.end_ns - op.span.start_ns) / 2
        } else {
            op.span.end_ns
        };
        if t < r.ready_ns {
            continue;
        }
        let image = r.log.image_at(r.base.as_ref(), t, torn);
        let mut flash = Flash::new(config.clone(), image);
        flash.start_clock_at(t);
        let (mut d, _) = LightTx::recover(flash, &o)
            .unwrap_or_else(|e| panic!("seed {seed}: recovery at {t} (torn {torn}) failed: {e}"));
        d.check_invariants().unwrap();
        let mut out = Vec::new();
        let at = d.flash().idle_ns();
        d.read(Lpn(0), r.logical, at, &mut out).unwrap();
        let seen: Vec<Option<u64>> = out
            .iter()
            .enumerate()
            .map(|(lpn, o)| match o {
                PageOutcome::Unwritten => None,
                PageOutcome::Data(c) => {
                    let tg = c.tag().expect("tagged page");
                    assert_eq!(
                        tg.lpn, lpn as u32,
                        "foreign data at lpn {lpn} (crash at {t})"
                    );
                    Some(tg.write)
                }
                PageOutcome::Uncorrectable => panic!("lpn {lpn} uncorrectable after crash at {t}"),
            })
            .collect();
        if let Err(e) = judge(&r.model, t, &seen) {
            panic!("seed {seed} zone {zone}: crash at {t} (torn {torn}): {e}");
        }
        checked += 1;
    }
    checked
}

fn long() -> bool {
    std::env::var("MOBIUS_LONG").is_ok_and(|v| v == "1")
}

#[test]
fn concurrent_transactions_survive_crashes() {
    let n = crash_campaign(1, 16, 1500, 0.0, 150);
    assert!(n > 100);
}

#[test]
fn concurrent_transactions_at_high_utilisation_with_gc() {
    let n = crash_campaign(2, 12, 2500, 0.85, 150);
    assert!(n > 100);
}

#[test]
fn long_concurrent_campaigns() {
    if !long() {
        return;
    }
    for seed in 100..108 {
        crash_campaign(seed, 8 + (seed as u32 % 3) * 8, 12_000, 0.85, 1500);
    }
}

#[test]
fn recovery_reads_grow_with_the_zone() {
    let mut reads = Vec::new();
    for zone in [8u32, 16, 32] {
        let config = DeviceConfig::preset("small").unwrap();
        let flash = Flash::in_memory(config, atomic_write::format::OOB_BYTES, true);
        let o = DesignOptions::default().with("zone_blocks", zone);
        let mut d = LightTx::format(flash, &o).unwrap();
        let mut t = d.flash().idle_ns();
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let n = d.logical_pages();
        // A zone's worth (less one block per chip) of 8-page transactions, as Möbius §V-D does.
        for i in 0..((zone as u64 - 4) * 32 / 8) {
            let mut lpns: Vec<u32> = Vec::new();
            while lpns.len() < 8 {
                let x = rng.random_range(0..n);
                if !lpns.contains(&x) {
                    lpns.push(x);
                }
            }
            let pages: Vec<(Lpn, Content)> = lpns.iter().map(|&x| (Lpn(x), tag(x, i))).collect();
            t = d
                .swrite(TxUuid(i + 1), &pages, SwriteMode::Sync, t)
                .unwrap()
                .ack_ns;
        }
        let end = d.flash().idle_ns();
        let mut flash = Box::new(d).into_flash();
        flash.start_clock_at(end);
        let (_, rep) = LightTx::recover(flash, &o).unwrap();
        let scanned = rep
            .details
            .iter()
            .find(|(k, _)| k == "scan_pages_read")
            .unwrap()
            .1;
        eprintln!(
            "zone {zone}: {} reads, {} scanned, {} ms",
            rep.flash_reads,
            scanned,
            rep.sim_ns as f64 / 1e6
        );
        reads.push((rep.flash_reads, rep.sim_ns));
    }
    assert!(
        reads[0].0 < reads[1].0 && reads[1].0 < reads[2].0,
        "{reads:?}"
    );
    // No assertion on the time here: on `small` the scan's reads run on four chips in parallel
    // and the blocks recovery erases (12 at zone 8, none at zone 32 with this stream) weigh more
    // than them. The time against the zone is graded on `jasmine` by `mobius compare` (Fig. 11).
}

/// The Möbius §V-D sweep on the 64 GB `jasmine` device (0.5 and 1 GB zones): recovery reads
/// and time grow with the zone. Slow in debug builds: MOBIUS_LONG=1 (use --release).
#[test]
fn jasmine_zone_sweep() {
    if !long() {
        return;
    }
    let config = DeviceConfig::preset("jasmine").unwrap();
    let g = config.geometry.clone();
    let mut last = (0u64, 0u64);
    for gb in [0.5f64, 1.0] {
        let zone = ((gb * (1u64 << 30) as f64) as u64 / g.block_bytes()) as u32;
        let flash = Flash::in_memory(config.clone(), atomic_write::format::OOB_BYTES, true);
        let o = DesignOptions::default().with("zone_blocks", zone);
        let mut d = LightTx::format(flash, &o).unwrap();
        let n = d.logical_pages();
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let pages = (zone as u64 - 16) * g.pages_per_block as u64;
        let mut t = d.flash().idle_ns();
        for i in 0..pages / 32 {
            let lpns: Vec<u32> = (0..32).map(|_| rng.random_range(0..n)).collect();
            let mut uniq = lpns.clone();
            uniq.sort_unstable();
            uniq.dedup();
            let p: Vec<(Lpn, Content)> = uniq.iter().map(|&x| (Lpn(x), tag(x, i))).collect();
            t = d
                .swrite(TxUuid(i + 1), &p, SwriteMode::Sync, t)
                .unwrap()
                .ack_ns;
        }
        let end = d.flash().idle_ns();
        let mut flash = Box::new(d).into_flash();
        flash.start_clock_at(end);
        let (_, rep) = LightTx::recover(flash, &o).unwrap();
        eprintln!(
            "jasmine zone {gb} GB ({zone} blocks): {} reads, {:.1} ms, details {:?}",
            rep.flash_reads,
            rep.sim_ns as f64 / 1e6,
            rep.details
        );
        assert!(rep.flash_reads > last.0 && rep.sim_ns > last.1);
        last = (rep.flash_reads, rep.sim_ns);
    }
}
