//! Power-cut campaign for the write-cached designs (until the project-wide checker runs them).
//!
//! A seeded host writes runs of pages (high locality, so the cache coalesces) and optionally
//! flushes every `flush_every` writes; each page carries a unique write number in its
//! [`ContentTag`]. The flash op log is then cut at many instants (between op completions and, with
//! `tear`, in the middle of ops), each image is recovered with the design's `recover`, every
//! logical page is read back and two oracles judge the result:
//!
//! - **flush-only**: each page holds its last write before the last acknowledged flush or a later
//!   write of the same page (or stays unwritten if it had no write before that flush);
//! - **ordered** (OPTR §3): the state equals the state after some prefix of the write requests
//!   in arrival order, a prefix that includes every request received before the last acknowledged
//!   flush. Each request is then all-or-nothing by construction.

use flash::{Content, ContentTag, DeviceConfig, Flash, Lpn};
use ftl::device::{FormatFn, RecoverFn};
use ftl::{BlockDevice, DesignOptions, PageOutcome};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// What the campaign runs.
#[derive(Clone, Debug)]
pub struct Campaign {
    pub seed: u64,
    pub preset: &'static str,
    pub params: Vec<(String, String)>,
    pub requests: u32,
    /// Flush after this many writes (0 = never).
    pub flush_every: u32,
    /// Hot region (pages) and the share of requests that go there.
    pub hot_pages: u32,
    pub hot_share: f64,
    /// Largest request in pages (sizes are uniform in 1..=max).
    pub max_request_pages: u32,
    /// Crash images to check (spread over the op log).
    pub images: u32,
    pub tear: bool,
    /// Mean gap between a request's ack and the next arrival.
    pub think_ns: u64,
}

impl Campaign {
    pub fn small(seed: u64, flush_every: u32, tear: bool) -> Campaign {
        Campaign {
            seed,
            preset: "small",
            params: Vec::new(),
            requests: 3000,
            flush_every,
            hot_pages: 96,
            hot_share: 0.6,
            max_request_pages: 6,
            images: 200,
            tear,
            think_ns: 20_000,
        }
    }
    pub fn options(&self) -> DesignOptions {
        let mut o = DesignOptions::default();
        for (k, v) in &self.params {
            o = o.with(k, v);
        }
        o
    }
}

/// One host request as the host saw it.
#[derive(Clone, Copy, Debug)]
pub enum HostOp {
    Write {
        start: u32,
        pages: u32,
        /// Write number of the first page (the others follow).
        first_write: u64,
        arrival_ns: u64,
        ack_ns: u64,
    },
    Flush {
        arrival_ns: u64,
        ack_ns: u64,
    },
}

/// What the campaign found.
#[derive(Clone, Debug, Default)]
pub struct Outcome {
    pub images: u32,
    pub torn_images: u32,
    pub flush_violations: u32,
    pub prefix_violations: u32,
    pub first_flush_violation: Option<String>,
    pub first_prefix_violation: Option<String>,
    pub host_pages_written: u64,
    pub gc_erases: u64,
    pub recovery_reads_max: u64,
    pub recovery_ns_max: u64,
    /// The design's metrics at the end of the workload.
    pub metrics: Vec<(String, f64)>,
}

/// Runs the workload on a fresh device; returns the device and the host log.
pub fn run_workload(
    c: &Campaign,
    format: FormatFn,
    oob_bytes: u32,
) -> (Box<dyn BlockDevice>, Box<dyn flash::Store>, Vec<HostOp>) {
    let config = DeviceConfig::preset(c.preset).expect("preset");
    let mut flash = Flash::in_memory(config, oob_bytes, true);
    let base = flash.start_recording();
    let mut dev = format(flash, &c.options()).expect("format");
    let logical = dev.logical_pages();
    let mut rng = ChaCha8Rng::seed_from_u64(c.seed);
    let mut log = Vec::with_capacity(c.requests as usize * 2);
    let mut now = 0u64;
    let mut write_no = 1u64;
    let mut contents = Vec::new();
    for i in 0..c.requests {
        let pages = rng.random_range(1..=c.max_request_pages);
        let start = if rng.random_bool(c.hot_share) {
            rng.random_range(0..c.hot_pages.min(logical) - pages)
        } else {
            rng.random_range(0..logical - pages)
        };
        contents.clear();
        for k in 0..pages {
            contents.push(Content::Tag(ContentTag {
                lpn: start + k,
                write: write_no + k as u64,
            }));
        }
        let done = dev.write(Lpn(start), &contents, now).expect("write");
        log.push(HostOp::Write {
            start,
            pages,
            first_write: write_no,
            arrival_ns: now,
            ack_ns: done.ack_ns,
        });
        write_no += pages as u64;
        now = done.ack_ns + rng.random_range(0..=2 * c.think_ns);
        if c.flush_every > 0 && (i + 1) % c.flush_every == 0 {
            let f = dev.flush(now).expect("flush");
            log.push(HostOp::Flush {
                arrival_ns: now,
                ack_ns: f.ack_ns,
            });
            now = f.ack_ns + rng.random_range(0..=2 * c.think_ns);
        }
        if i % 256 == 0 {
            dev.check_invariants().expect("invariants");
        }
    }
    dev.check_invariants().expect("invariants");
    (dev, base, log)
}

/// Reads every logical page: `Some(write number)` or `None` (unwritten).
pub fn read_all(dev: &mut dyn BlockDevice, now: u64) -> Result<Vec<Option<u64>>, String> {
    let logical = dev.logical_pages();
    let mut out = Vec::new();
    let mut state = Vec::with_capacity(logical as usize);
    let mut lpn = 0;
    while lpn < logical {
        let n = 64.min(logical - lpn);
        dev.read(Lpn(lpn), n, now, &mut out)
            .map_err(|e| format!("read: {e}"))?;
        for (k, o) in out.iter().enumerate() {
            match o {
                PageOutcome::Unwritten => state.push(None),
                PageOutcome::Uncorrectable => {
                    return Err(format!("lpn {} uncorrectable", lpn + k as u32))
                }
                PageOutcome::Data(c) => {
                    let t = c.tag().ok_or("page without a tag")?;
                    if t.lpn != lpn + k as u32 {
                        return Err(format!(
                            "lpn {} holds data of lpn {}",
                            lpn + k as u32,
                            t.lpn
                        ));
                    }
                    state.push(Some(t.write));
                }
            }
        }
        lpn += n;
    }
    Ok(state)
}

/// Index (exclusive) of the write requests received before the last flush acknowledged by `t`.
fn flushed_writes(log: &[HostOp], t: u64) -> usize {
    let mut writes = 0;
    let mut flushed = 0;
    for op in log {
        match *op {
            HostOp::Write { .. } => writes += 1,
            HostOp::Flush { ack_ns, .. } => {
                if ack_ns <= t {
                    flushed = writes;
                }
            }
        }
    }
    flushed
}

fn writes(log: &[HostOp]) -> impl Iterator<Item = (u32, u32, u64, u64)> + '_ {
    log.iter().filter_map(|op| match *op {
        HostOp::Write {
            start,
            pages,
            first_write,
            arrival_ns,
            ..
        } => Some((start, pages, first_write, arrival_ns)),
        _ => None,
    })
}

/// What an oracle found wrong with a recovered image.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum OracleBreach {
    #[error("lpn {lpn} holds {got:?}; durable {durable:?}, later {later:?}")]
    NotFlushOnly {
        lpn: usize,
        got: Option<u64>,
        durable: Option<u64>,
        later: Vec<u64>,
    },
    #[error("no prefix of the write requests (at least {flushed}, the flushed ones) matches")]
    NoPrefix { flushed: usize },
}

/// Flush-only oracle; `Err` names the first offending page.
pub fn check_flush_only(log: &[HostOp], t: u64, state: &[Option<u64>]) -> Result<(), OracleBreach> {
    let flushed = flushed_writes(log, t);
    // per page: last write before the flush, and the set of later writes (arrived by t)
    let mut durable: Vec<Option<u64>> = vec![None; state.len()];
    let mut later: Vec<Vec<u64>> = vec![Vec::new(); state.len()];
    for (i, (start, pages, first, arrival)) in writes(log).enumerate() {
        for k in 0..pages {
            let lpn = (start + k) as usize;
            if i < flushed {
                durable[lpn] = Some(first + k as u64);
                later[lpn].clear();
            } else if arrival <= t {
                later[lpn].push(first + k as u64);
            }
        }
    }
    for (lpn, &got) in state.iter().enumerate() {
        let ok = got == durable[lpn] || got.is_some_and(|w| later[lpn].contains(&w));
        if !ok {
            return Err(OracleBreach::NotFlushOnly {
                lpn,
                got,
                durable: durable[lpn],
                later: later[lpn].clone(),
            });
        }
    }
    Ok(())
}

/// Ordered (prefix) oracle: returns the longest matching prefix, or `Err`.
pub fn check_prefix(log: &[HostOp], t: u64, state: &[Option<u64>]) -> Result<usize, OracleBreach> {
    let flushed = flushed_writes(log, t);
    let mut cur: Vec<Option<u64>> = vec![None; state.len()];
    let mut mismatches = state.iter().filter(|s| s.is_some()).count();
    let mut best = None;
    if mismatches == 0 && flushed == 0 {
        best = Some(0);
    }
    for (i, (start, pages, first, arrival)) in writes(log).enumerate() {
        if arrival > t {
            break;
        }
        for k in 0..pages {
            let lpn = (start + k) as usize;
            let before = cur[lpn] == state[lpn];
            cur[lpn] = Some(first + k as u64);
            let after = cur[lpn] == state[lpn];
            match (before, after) {
                (true, false) => mismatches += 1,
                (false, true) => mismatches -= 1,
                _ => {}
            }
        }
        if mismatches == 0 && i + 1 >= flushed {
            best = Some(i + 1);
        }
    }
    best.ok_or(OracleBreach::NoPrefix { flushed })
}

/// Cuts the op log at `c.images` instants, recovers each image and checks both oracles.
pub fn run_campaign(c: &Campaign, format: FormatFn, recover: RecoverFn, oob_bytes: u32) -> Outcome {
    let (mut dev, base, log) = run_workload(c, format, oob_bytes);
    let config = dev.flash().config().clone();
    let mut outcome = Outcome {
        host_pages_written: writes(&log).map(|w| w.1 as u64).sum(),
        gc_erases: dev.flash().stats().total_erases(),
        metrics: dev.metrics(),
        ..Outcome::default()
    };
    let oplog = dev.flash_mut().take_log().expect("recording was on");
    let order = oplog.completion_order();
    let mut rng = ChaCha8Rng::seed_from_u64(c.seed ^ 0x5eed);
    for n in 0..c.images {
        let idx = ((n as u64 + 1) * order.len() as u64 / c.images as u64) as usize;
        let (t, tear) = if c.tear && n % 2 == 1 {
            // in the middle of an op: the op running then is torn
            let op = &oplog.ops[order[idx.saturating_sub(1).min(order.len() - 1)]];
            let len = op.span.end_ns - op.span.start_ns;
            (op.span.start_ns + rng.random_range(0..len.max(1)), true)
        } else {
            (oplog.instant_after(&order, idx), false)
        };
        let image = oplog.image_at(base.as_ref(), t, tear);
        let mut flash = Flash::new(config.clone(), image);
        flash.start_clock_at(t);
        outcome.images += 1;
        outcome.torn_images += tear as u32;
        let (mut rec, report) = match recover(flash, &c.options()) {
            Ok(r) => r,
            Err(e) => {
                outcome.flush_violations += 1;
                outcome.prefix_violations += 1;
                let msg = format!("image {n} (t={t}, tear={tear}): recovery failed: {e}");
                outcome.first_flush_violation.get_or_insert(msg.clone());
                outcome.first_prefix_violation.get_or_insert(msg);
                continue;
            }
        };
        outcome.recovery_reads_max = outcome.recovery_reads_max.max(report.flash_reads);
        outcome.recovery_ns_max = outcome.recovery_ns_max.max(report.sim_ns);
        if let Err(e) = rec.check_invariants() {
            panic!("image {n}: invariants after recovery: {e}");
        }
        let ready = rec.flash().idle_ns();
        let state = match read_all(rec.as_mut(), ready) {
            Ok(s) => s,
            Err(e) => {
                outcome.flush_violations += 1;
                outcome.prefix_violations += 1;
                let msg = format!("image {n} (t={t}): {e}");
                outcome.first_flush_violation.get_or_insert(msg.clone());
                outcome.first_prefix_violation.get_or_insert(msg);
                continue;
            }
        };
        if let Err(e) = check_flush_only(&log, t, &state) {
            outcome.flush_violations += 1;
            outcome
                .first_flush_violation
                .get_or_insert(format!("image {n} (t={t}, tear={tear}): {e}"));
        }
        if let Err(e) = check_prefix(&log, t, &state) {
            outcome.prefix_violations += 1;
            outcome
                .first_prefix_violation
                .get_or_insert(format!("image {n} (t={t}, tear={tear}): {e}"));
        }
    }
    outcome
}

/// Functional stress (no crash): writes `capacity_multiple` times the device capacity (all its pages) with a
/// flush every `flush_every` writes, reads everything back against a model; returns read errors.
pub fn stress(
    format: FormatFn,
    oob_bytes: u32,
    params: &[(&str, &str)],
    capacity_multiple: u64,
    seed: u64,
) -> (u64, Box<dyn BlockDevice>) {
    let config = DeviceConfig::preset("small").expect("preset");
    let flash = Flash::in_memory(config, oob_bytes, true);
    let mut o = DesignOptions::default();
    for (k, v) in params {
        o = o.with(k, v);
    }
    let mut dev = format(flash, &o).expect("format");
    let logical = dev.logical_pages();
    let mut model: Vec<Option<u64>> = vec![None; logical as usize];
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    // multiples of the raw device (every page, spare and reserved blocks included)
    let target = capacity_multiple * dev.flash().geometry().pages() as u64;
    let (mut written, mut now, mut write_no, mut n) = (0u64, 0u64, 1u64, 0u64);
    let mut contents = Vec::new();
    while written < target {
        let pages = rng.random_range(1..=8u32);
        let start = if rng.random_bool(0.5) {
            rng.random_range(0..256 - pages)
        } else {
            rng.random_range(0..logical - pages)
        };
        contents.clear();
        for k in 0..pages {
            contents.push(Content::Tag(ContentTag {
                lpn: start + k,
                write: write_no,
            }));
            model[(start + k) as usize] = Some(write_no);
            write_no += 1;
        }
        now = dev.write(Lpn(start), &contents, now).expect("write").ack_ns + 1_000;
        written += pages as u64;
        n += 1;
        if n % 100 == 0 {
            now = dev.flush(now).expect("flush").ack_ns;
        }
        if n % 4096 == 0 {
            dev.check_invariants().expect("invariants");
        }
    }
    let state = read_all(dev.as_mut(), now).expect("read back");
    let errors = state.iter().zip(&model).filter(|(a, b)| a != b).count() as u64;
    (errors, dev)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(start: u32, pages: u32, first_write: u64, t: u64) -> HostOp {
        HostOp::Write {
            start,
            pages,
            first_write,
            arrival_ns: t,
            ack_ns: t,
        }
    }

    /// The oracles accept exactly the states they should (positive and negative cases).
    #[test]
    fn oracles_on_a_hand_built_log() {
        // writes: A = lpns 0,1 (writes 1,2); B = lpn 1 (write 3); flush acked at 30; C = lpn 2 (4)
        let log = [
            w(0, 2, 1, 10),
            w(1, 1, 3, 20),
            HostOp::Flush {
                arrival_ns: 25,
                ack_ns: 30,
            },
            w(2, 1, 4, 40),
        ];
        let (none, some) = (None, Some);
        // before the flush is acked, an empty device is a valid prefix
        assert_eq!(check_prefix(&log, 29, &[none, none, none, none]), Ok(0));
        // A half done is not a prefix (request atomicity), but is flush-only-valid
        assert!(check_prefix(&log, 29, &[some(1), none, none, none]).is_err());
        assert!(check_flush_only(&log, 29, &[some(1), none, none, none]).is_ok());
        // B without A violates prefix
        assert!(check_prefix(&log, 29, &[none, some(3), none, none]).is_err());
        // after the flush: A and B must be there; C optional
        assert_eq!(
            check_prefix(&log, 50, &[some(1), some(3), none, none]),
            Ok(2)
        );
        assert_eq!(
            check_prefix(&log, 50, &[some(1), some(3), some(4), none]),
            Ok(3)
        );
        assert!(check_prefix(&log, 50, &[some(1), some(2), none, none]).is_err());
        assert!(check_flush_only(&log, 50, &[some(1), some(2), none, none]).is_err());
        assert!(check_flush_only(&log, 50, &[some(1), some(3), some(4), none]).is_ok());
        // a write that arrived after the crash cannot be there
        assert!(check_flush_only(&log, 35, &[some(1), some(3), some(4), none]).is_err());
    }
}
