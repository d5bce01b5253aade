//! Power cuts at every completion instant (and mid-operation with tearing) of seeded random
//! workloads on `small` with GC, translation-page GC and checkpoints running. After each cut the
//! device is recovered from the image alone and every logical page is read back and checked
//! against the durable-writes promise:
//! - a page with an acknowledged write (ack ≤ T) reads that write's tag or the tag of a write to
//!   the same page issued after it (before T); after a trim following it, it may also read as
//!   unwritten;
//! - a page with no acknowledged write reads unwritten or one of its writes issued before T;
//! - never another page's tag, never garbage, never `Uncorrectable`.
//!
//! The negative control (`oob_scan=off`) must be caught breaking the promise.

use flash::{Content, ContentTag, DeviceConfig, Flash, Lpn, Store};
use ftl::{BlockDevice, DesignOptions, PageOutcome};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// One host operation on one page, as the model remembers it.
#[derive(Clone, Copy, Debug)]
enum Event {
    Write { write: u64, arrival: u64, ack: u64 },
    Trim { arrival: u64 },
}

struct Run {
    config: DeviceConfig,
    base: Box<dyn Store>,
    log: flash::OpLog,
    history: Vec<Vec<Event>>,
    logical_pages: u32,
    options: DesignOptions,
}

fn options(scan: bool) -> DesignOptions {
    DesignOptions::default()
        .with("cmt_entries", 48)
        .with("checkpoint_blocks", 12)
        .with("oob_scan", if scan { "on" } else { "off" })
}

/// A seeded workload: fill to ~90 %, then start recording and run random writes (1..8 pages),
/// reads, trims and flushes with overlapping arrivals.
fn run(seed: u64, ops: usize, scan: bool) -> Run {
    run_with(seed, ops, options(scan))
}

fn run_with(seed: u64, ops: usize, options: DesignOptions) -> Run {
    let config = DeviceConfig::preset("small").unwrap();
    let flash = Flash::in_memory(config.clone(), dftl::format::OOB_BYTES, true);
    let mut d = dftl::Dftl::format(flash, &options).unwrap();
    let n = d.logical_pages();
    let hot = n * 9 / 10;
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut history: Vec<Vec<Event>> = vec![Vec::new(); n as usize];
    let mut write = 0u64;
    let mut now = 0u64;
    let mut issue =
        |d: &mut dftl::Dftl, history: &mut Vec<Vec<Event>>, start: u32, k: u32, now: u64| {
            let pages: Vec<Content> = (0..k)
                .map(|i| {
                    write += 1;
                    Content::Tag(ContentTag {
                        lpn: start + i,
                        write,
                    })
                })
                .collect();
            let c = d.write(Lpn(start), &pages, now).unwrap();
            for (i, p) in pages.iter().enumerate() {
                let Content::Tag(t) = p else { unreachable!() };
                history[start as usize + i].push(Event::Write {
                    write: t.write,
                    arrival: now,
                    ack: c.ack_ns,
                });
            }
            c.ack_ns
        };
    for start in (0..hot).step_by(16) {
        now = issue(&mut d, &mut history, start, 16.min(hot - start), now);
    }
    // Overwrite a share so GC has live pages to copy when recording starts.
    for _ in 0..hot / 8 {
        let start = rng.random_range(0..hot - 8);
        now = issue(&mut d, &mut history, start, rng.random_range(1..=8), now);
    }
    // Drain first: the base image must not hold programs that end after recording starts.
    now = now.max(d.flash().idle_ns());
    let base = d.flash_mut().start_recording();
    let mut out = Vec::new();
    for _ in 0..ops {
        now += rng.random_range(0..400_000u64);
        match rng.random_range(0..100u32) {
            0..=74 => {
                let k = rng.random_range(1..=8);
                let start = rng.random_range(0..hot - k);
                issue(&mut d, &mut history, start, k, now);
            }
            75..=89 => {
                let k = rng.random_range(1..=8);
                let start = rng.random_range(0..n - k);
                d.read(Lpn(start), k, now, &mut out).unwrap();
            }
            90..=95 => {
                let start = rng.random_range(0..hot - 4);
                let k = rng.random_range(1..=4);
                d.trim(Lpn(start), k, now).unwrap();
                for l in start..start + k {
                    history[l as usize].push(Event::Trim { arrival: now });
                }
            }
            _ => {
                d.flush(now).unwrap();
            }
        }
        d.check_invariants().unwrap();
    }
    let m: std::collections::BTreeMap<String, f64> = d.metrics().into_iter().collect();
    assert!(
        m["checkpoints"] >= 3.0,
        "the run must cross checkpoints: {m:?}"
    );
    assert!(
        m["gc_copies"] > 0.0,
        "the run must copy live pages in GC: {m:?}"
    );
    let log = d.flash_mut().take_log().unwrap();
    Run {
        config,
        base,
        log,
        history,
        logical_pages: n,
        options,
    }
}

/// What page `lpn` may read as after a cut at `at`: `Err(reason)` if `got` breaks the promise.
fn check_page(history: &[Event], lpn: u32, at: u64, got: &PageOutcome) -> Result<(), String> {
    // Index of the newest acknowledged write, if any.
    let acked = history
        .iter()
        .rposition(|e| matches!(e, Event::Write { ack, .. } if *ack <= at));
    let from = acked.unwrap_or(0);
    let trimmed_after = history[from..]
        .iter()
        .any(|e| matches!(e, Event::Trim { arrival } if *arrival < at));
    match got {
        PageOutcome::Unwritten => {
            if acked.is_some() && !trimmed_after {
                return Err(format!(
                    "lpn {lpn}: acknowledged write lost (reads unwritten)"
                ));
            }
            Ok(())
        }
        PageOutcome::Uncorrectable => Err(format!("lpn {lpn}: uncorrectable")),
        PageOutcome::Data(c) => {
            let Some(tag) = c.tag() else {
                return Err(format!("lpn {lpn}: garbage"));
            };
            if tag.lpn != lpn {
                return Err(format!("lpn {lpn}: returns data of lpn {}", tag.lpn));
            }
            let allowed = history[from..].iter().any(|e| {
                matches!(e, Event::Write { write, arrival, .. } if *write == tag.write && *arrival < at)
            });
            if allowed {
                Ok(())
            } else {
                Err(format!(
                    "lpn {lpn}: reads write {} but the newest acknowledged is {:?}",
                    tag.write,
                    acked.map(|i| history[i])
                ))
            }
        }
    }
}

/// Crash instants: every completion instant, plus the midpoint of every fourth mutating op (torn).
fn instants(log: &flash::OpLog) -> Vec<(u64, bool)> {
    let order = log.completion_order();
    let mut v: Vec<(u64, bool)> = (1..=order.len())
        .map(|n| (log.instant_after(&order, n), false))
        .collect();
    for (k, &i) in order.iter().enumerate() {
        if k % 4 == 0 {
            let s = log.ops[i].span;
            v.push(((s.start_ns + s.end_ns) / 2, true));
        }
    }
    v.sort_unstable();
    v.dedup();
    v
}

/// Recovers from every instant; returns (instants checked, violations, first few messages).
fn check_run(r: &Run) -> (usize, usize, Vec<String>) {
    let mut violations = 0;
    let mut messages = Vec::new();
    let list = instants(&r.log);
    let mut out = Vec::new();
    for &(at, tear) in &list {
        let image = r.log.image_at(r.base.as_ref(), at, tear);
        let mut flash = Flash::new(r.config.clone(), image);
        flash.start_clock_at(at);
        let (mut d, report) = match dftl::Dftl::recover(flash, &r.options) {
            Ok(x) => x,
            Err(e) => {
                violations += 1;
                if messages.len() < 5 {
                    messages.push(format!("cut at {at} (tear {tear}): recovery failed: {e}"));
                }
                continue;
            }
        };
        if let Err(e) = d.check_invariants() {
            violations += 1;
            messages.push(format!("cut at {at}: invariant after recovery: {e}"));
            continue;
        }
        let t = at + report.sim_ns;
        d.read(Lpn(0), r.logical_pages, t, &mut out).unwrap();
        let mut bad = 0;
        for (lpn, got) in out.iter().enumerate() {
            if let Err(m) = check_page(&r.history[lpn], lpn as u32, at, got) {
                bad += 1;
                if messages.len() < 5 {
                    messages.push(format!("cut at {at} (tear {tear}): {m}"));
                }
            }
        }
        if bad > 0 {
            violations += 1;
        }
        // The recovered device keeps working: write a page and read it back.
        let lpn = (at % r.logical_pages as u64) as u32;
        let tag = ContentTag {
            lpn,
            write: u64::MAX,
        };
        let t = d.write(Lpn(lpn), &[Content::Tag(tag)], t).unwrap().ack_ns;
        d.read(Lpn(lpn), 1, t, &mut out).unwrap();
        assert_eq!(out[0], PageOutcome::Data(Content::Tag(tag)));
        d.check_invariants().unwrap();
    }
    (list.len(), violations, messages)
}

#[test]
fn every_acknowledged_write_survives_a_power_cut() {
    let mut total = 0;
    for seed in [1u64, 2, 3] {
        let r = run(seed, 260, true);
        let (n, violations, messages) = check_run(&r);
        assert_eq!(violations, 0, "seed {seed}: {messages:#?}");
        total += n;
    }
    eprintln!("crash instants checked: {total}");
    assert!(total >= 2000, "only {total} crash instants");
}

#[test]
fn without_the_oob_scan_acknowledged_writes_are_lost() {
    let r = run(7, 260, false);
    let (n, violations, _) = check_run(&r);
    eprintln!("negative control: {violations} of {n} cuts break the promise");
    assert!(violations > 0, "the checker must catch oob_scan=off");
}

/// Long campaign (`MOBIUS_LONG=1`, best with `--release`): many seeds over a grid of CMT sizes
/// and checkpoint intervals.
#[test]
fn long_power_cut_campaign() {
    if std::env::var("MOBIUS_LONG").is_err() {
        return;
    }
    let mut total = 0;
    for seed in 100..130u64 {
        let cmt = [16u32, 48, 512][(seed % 3) as usize];
        let ckpt = [3u32, 12, 40][((seed / 3) % 3) as usize];
        let o = DesignOptions::default()
            .with("cmt_entries", cmt)
            .with("checkpoint_blocks", ckpt);
        let r = run_with(seed, 400, o);
        let (n, violations, messages) = check_run(&r);
        assert_eq!(
            violations, 0,
            "seed {seed} cmt {cmt} checkpoint_blocks {ckpt}: {messages:#?}"
        );
        total += n;
    }
    eprintln!("long campaign: {total} crash instants checked");
}

/// Power cuts during recovery itself (while it writes back translation pages, its reservation
/// page and its new checkpoint): a second recovery must still keep the promise as of the first cut.
#[test]
fn a_power_cut_during_recovery_is_survived() {
    let r = run(5, 200, true);
    let first_cuts = instants(&r.log);
    let mut out = Vec::new();
    let mut checked = 0;
    for &(at, tear) in first_cuts.iter().step_by(29) {
        let image = r.log.image_at(r.base.as_ref(), at, tear);
        let mut flash = Flash::new(r.config.clone(), image);
        flash.start_clock_at(at);
        let base = flash.start_recording();
        let (mut d, _) = dftl::Dftl::recover(flash, &r.options).unwrap();
        let log = d.flash_mut().take_log().unwrap();
        for (at2, tear2) in instants(&log) {
            let image = log.image_at(base.as_ref(), at2, tear2);
            let mut flash = Flash::new(r.config.clone(), image);
            flash.start_clock_at(at2);
            let (mut d, report) = dftl::Dftl::recover(flash, &r.options)
                .unwrap_or_else(|e| panic!("cut at {at}, then at {at2} in recovery: {e}"));
            d.check_invariants().unwrap();
            d.read(Lpn(0), r.logical_pages, at2 + report.sim_ns, &mut out)
                .unwrap();
            for (lpn, got) in out.iter().enumerate() {
                if let Err(m) = check_page(&r.history[lpn], lpn as u32, at, got) {
                    panic!("cut at {at}, then at {at2} in recovery: {m}");
                }
            }
            checked += 1;
        }
    }
    eprintln!("cuts during recovery checked: {checked}");
    assert!(checked >= 200, "only {checked} cuts during recovery");
}
