//! The image-prefix cut: the crash users actually make (issue #68, item 7).
//!
//! Every command that holds an image says "kill -9 = power cut", but a power cut at a simulated
//! instant ([`crate::points`]) keeps the operations that *completed* by then, in flash completion
//! order. A killed process leaves something else: [`flash::FileStore`] writes each program and
//! erase through to the image file when the design issues it (`flash::oplog`), so the file holds
//! exactly the first N image writes **in issue order**, the last of them possibly torn — whatever
//! the simulated times. A design whose commit record and data sit on different chips is judged
//! against the order it issued them, not the order the chips would finish them.
//!
//! A cut here is `(N, torn)`: the first N image writes of the recorded run applied in issue
//! order and, with `torn`, write N + 1 torn. A request is *acknowledged* at the cut when the host
//! learnt the design's answer (its call returned, or its deferred completion was collected)
//! before write N + 1 was issued, and *arrived* when it was handed to the design before then
//! ([`lab::driver::LogPositions`]). The oracle is the same ([`crate::oracle::Model`]): it judges a
//! copy of the host log whose instants are replaced by these write counts ([`prefix_clock`]), at
//! "instant" N. What must be present is every acknowledged durable request; what may be present,
//! every request that arrived. The recovered device's clock starts after every write in the
//! image has completed.
//!
//! A cut point's `instant_ns` counts image writes under this model (its replay command says
//! `--cut-model prefix`, and `--replay-instant N` / `--first-cut N` then count writes too).

use crate::points::{CrashPoint, PointKind};
use crate::{record, CampaignConfig, CampaignError, CampaignReport, Recording};
use flash::{OpCause, OpKind, Store};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use workload::HostLog;

/// How a campaign cuts its crash images out of the recorded run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub enum CutModel {
    /// A power cut at a simulated instant: the operations completed by then (`flash::oplog`).
    #[default]
    Instant,
    /// A killed process: the first N image writes in issue order, the next one torn or not.
    Prefix,
}

/// A `--cut-model` that names no cut model.
#[derive(Debug, thiserror::Error)]
#[error("unknown cut model '{0}'; cut models: instant (a power cut at a simulated instant), prefix (a killed process: a prefix of the image writes in issue order)")]
pub struct UnknownCutModel(pub String);

impl CutModel {
    pub fn parse(name: &str) -> Result<CutModel, UnknownCutModel> {
        match name {
            "instant" => Ok(CutModel::Instant),
            "prefix" => Ok(CutModel::Prefix),
            _ => Err(UnknownCutModel(name.to_string())),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            CutModel::Instant => "instant",
            CutModel::Prefix => "prefix",
        }
    }

    /// What a replay command adds to name the model (nothing for the default).
    pub fn arg(self) -> &'static str {
        match self {
            CutModel::Instant => "",
            CutModel::Prefix => " --cut-model prefix",
        }
    }

    /// How a cut point is worded: `at T ns` or `after N image writes`.
    pub fn describe(self, p: u64) -> String {
        match self {
            CutModel::Instant => format!("at {p} ns"),
            CutModel::Prefix => format!("after {p} image writes"),
        }
    }
}

/// `host` with each record's instants replaced by image-write counts: arrival by the writes
/// issued before it was handed to the design, acknowledgement and durability by the writes
/// issued before the host learnt the answer (a request is durable once its answer is known:
/// by then every write it caused is in the file). `writes_before[k]` counts the image writes
/// among the first `k` logged operations.
pub fn prefix_clock(
    host: &HostLog,
    positions: &[lab::driver::LogPositions],
    writes_before: &[u64],
) -> HostLog {
    assert_eq!(
        host.records.len(),
        positions.len(),
        "every record is placed in the operation log"
    );
    let mut log = host.clone();
    for (r, p) in log.records.iter_mut().zip(positions) {
        let answered = writes_before[p.answered];
        r.arrival_ns = writes_before[p.arrival];
        r.ack_ns = r.ack_ns.map(|_| answered);
        r.durable_ns = r.durable_ns.map(|_| answered);
    }
    log
}

/// A recorded run seen by the image-prefix cut: its image writes in issue order and its host
/// log on the write-count clock.
pub struct PrefixRun<'r> {
    /// The run's operations (shared by the worker threads, so not its whole recording).
    ops: &'r flash::OpLog,
    /// When the run's host started (the recovered device's clock never starts earlier).
    start_ns: u64,
    /// Indices into `ops.ops` of the image writes, in issue order.
    writes: Vec<usize>,
    /// `rec.host` on the write-count clock ([`prefix_clock`]).
    pub clocked: HostLog,
    /// Image writes issued before the host's first request (a format, or a second life's
    /// recovery): cuts before it are cuts of those.
    pub ready: u64,
    /// `ends[n]`: the latest simulated end among the first `n` writes.
    ends: Vec<u64>,
}

impl<'r> PrefixRun<'r> {
    pub fn new(rec: &'r Recording) -> PrefixRun<'r> {
        PrefixRun::of(&rec.ops, &rec.host, &rec.positions, rec.ready_ns)
    }

    /// The run of operations `ops` whose host log is `host`, each record placed in `ops` by
    /// `positions`; its host started at `start_ns`.
    pub fn of(
        ops: &'r flash::OpLog,
        host: &HostLog,
        positions: &[lab::driver::LogPositions],
        start_ns: u64,
    ) -> PrefixRun<'r> {
        let writes = ops.issue_order();
        let writes_before = ops.writes_before();
        let clocked = prefix_clock(host, positions, &writes_before);
        let ready = positions
            .first()
            .map_or(writes.len() as u64, |p| writes_before[p.arrival]);
        let mut ends = Vec::with_capacity(writes.len() + 1);
        ends.push(0);
        for &i in &writes {
            let last = *ends.last().expect("starts with 0");
            ends.push(last.max(ops.ops[i].span.end_ns));
        }
        PrefixRun {
            ops,
            start_ns,
            writes,
            clocked,
            ready,
            ends,
        }
    }

    /// Image writes of the whole run.
    pub fn writes(&self) -> u64 {
        self.writes.len() as u64
    }

    /// When the device recovered from cut `(n, torn)` starts its clock: once every write of the
    /// image (the torn one too) is over, and not before the run's own start.
    pub fn clock_after(&self, n: u64, torn: bool) -> u64 {
        let held = (n + torn as u64).min(self.writes());
        self.ends[held as usize].max(self.start_ns)
    }

    /// A builder of this run's images for ascending cuts, on `base` (the recording's).
    pub fn images(&self, base: &dyn Store) -> PrefixImages<'_, 'r> {
        PrefixImages {
            run: self,
            next: 0,
            working: base.snapshot(),
        }
    }

    /// `true` for a cut this run can make: at most every write, a torn one only before the
    /// last, none before `from`.
    fn valid(&self, n: u64, torn: bool, from: u64) -> bool {
        n >= from && n <= self.writes() && !(torn && n == self.writes())
    }

    /// Every cut from `from` on: after each write, and with `torn` each write torn.
    pub fn exhaustive(&self, torn: bool, from: u64) -> Vec<CrashPoint> {
        let point = |n: u64, torn: bool| CrashPoint {
            instant_ns: n,
            torn,
            kind: PointKind::Exhaustive,
        };
        let mut v: Vec<CrashPoint> = (from..=self.writes()).map(|n| point(n, false)).collect();
        if torn {
            v.extend((from..self.writes()).map(|n| point(n, true)));
        }
        v.sort();
        v
    }

    /// `n` distinct cuts from `from` on: a third spread evenly over the writes, the rest aimed
    /// at metadata writes, GC writes, between the writes of one request or transaction, and at
    /// acknowledgements (half of the aimed ones torn when `torn`), as [`crate::points::sample`]
    /// aims its instants.
    pub fn sample(&self, n: usize, torn: bool, seed: u64, from: u64) -> Vec<CrashPoint> {
        let from = from.min(self.writes());
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x9f1e_c0de);
        let targets = Targets::new(self, from);
        let mut out = Vec::with_capacity(n);
        let mut taken: rustc_hash::FxHashSet<(u64, bool)> = Default::default();
        let mut take = |p: CrashPoint, out: &mut Vec<CrashPoint>| {
            if self.valid(p.instant_ns, p.torn, from) && taken.insert((p.instant_ns, p.torn)) {
                out.push(p);
            }
        };
        let spread = n.div_ceil(3) as u64;
        let span = self.writes() - from;
        for k in 0..spread {
            let at = from + (k * (span + 1) / spread.max(1)).min(span);
            take(point(at, false, PointKind::Spread), &mut out);
        }
        let mut attempts = 0usize;
        while out.len() < n && attempts < 50 * n {
            attempts += 1;
            take(targets.aim(self.writes(), torn, &mut rng), &mut out);
        }
        out.sort();
        out
    }
}

fn point(instant_ns: u64, torn: bool, kind: PointKind) -> CrashPoint {
    CrashPoint {
        instant_ns,
        torn,
        kind,
    }
}

/// What the aimed cuts aim at, as write counts.
struct Targets {
    /// Places in write order of metadata writes (neither host data nor GC) and of GC writes.
    metadata: Vec<u64>,
    gc: Vec<u64>,
    /// Write counts at which successful requests were answered.
    acks: Vec<u64>,
    /// (arrival, answer) of multi-page requests and transactions.
    windows: Vec<(u64, u64)>,
}

impl Targets {
    fn new(run: &PrefixRun, from: u64) -> Targets {
        let (mut metadata, mut gc) = (Vec::new(), Vec::new());
        for (j, &i) in run.writes.iter().enumerate().skip(from as usize) {
            let op = &run.ops.ops[i];
            let copy = matches!(op.cause, OpCause::GcCopy | OpCause::WearLevel);
            if copy || matches!(op.kind, OpKind::Erase { .. }) {
                gc.push(j as u64);
            }
            if !copy && op.cause != OpCause::HostData {
                metadata.push(j as u64);
            }
        }
        let acks = run
            .clocked
            .records
            .iter()
            .filter(|r| r.succeeded())
            .filter_map(|r| r.ack_ns)
            .filter(|&a| a > from)
            .collect();
        Targets {
            metadata,
            gc,
            acks,
            windows: crate::points::transaction_windows(&run.clocked),
        }
    }

    /// One aimed cut of a run of `writes` writes.
    fn aim(&self, writes: u64, torn: bool, rng: &mut ChaCha8Rng) -> CrashPoint {
        let tear = torn && rng.random_bool(0.5);
        // Write j torn, or the cut just before or just after it.
        let at_write = |j: u64, kind: PointKind, rng: &mut ChaCha8Rng| match tear {
            true => point(j, true, kind),
            false => point(j + rng.random_range(0..2u64), false, kind),
        };
        match rng.random_range(0..4u32) {
            0 if !self.metadata.is_empty() => {
                let j = self.metadata[rng.random_range(0..self.metadata.len())];
                at_write(j, PointKind::Metadata, rng)
            }
            1 if !self.gc.is_empty() => {
                let j = self.gc[rng.random_range(0..self.gc.len())];
                at_write(j, PointKind::Gc, rng)
            }
            2 if !self.windows.is_empty() => {
                let (a, b) = self.windows[rng.random_range(0..self.windows.len())];
                point(rng.random_range(a..=b), tear, PointKind::Transaction)
            }
            _ if !self.acks.is_empty() => {
                // The request's last write torn, or the cut just before or at its answer.
                let a = self.acks[rng.random_range(0..self.acks.len())];
                match tear {
                    true => point(a - 1, true, PointKind::Acknowledgement),
                    false => point(
                        a - rng.random_range(0..2u64),
                        false,
                        PointKind::Acknowledgement,
                    ),
                }
            }
            _ => point(rng.random_range(0..=writes), tear, PointKind::Spread),
        }
    }
}

/// Builds a run's images for ascending cuts by applying its writes in issue order to one
/// working store.
pub struct PrefixImages<'p, 'r> {
    run: &'p PrefixRun<'r>,
    /// Writes applied to `working` so far.
    next: usize,
    working: Box<dyn Store>,
}

impl PrefixImages<'_, '_> {
    /// The image after the first `n` writes, the next one torn with `torn` (cuts must not
    /// decrease between calls).
    pub fn image_after(&mut self, n: u64, torn: bool) -> Box<dyn Store> {
        let ops = &self.run.ops.ops;
        let n = (n as usize).min(self.run.writes.len());
        assert!(n >= self.next, "cuts must not decrease");
        for &i in &self.run.writes[self.next..n] {
            ops[i].apply(self.working.as_mut());
        }
        self.next = n;
        let mut image = self.working.snapshot();
        if let (true, Some(&i)) = (torn, self.run.writes.get(n)) {
            ops[i].tear(image.as_mut());
        }
        image
    }
}

/// The command that replays one cut of a campaign under the prefix model.
pub fn replay_command(cfg: &CampaignConfig, n: u64, torn: bool) -> String {
    crate::replay_command(cfg, n, torn) + CutModel::Prefix.arg()
}

/// The cuts of a recorded run: every one with `exhaustive`, else a sample, none before the
/// formatted device was ready.
pub fn choose_points(cfg: &CampaignConfig, run: &PrefixRun) -> Vec<CrashPoint> {
    if cfg.exhaustive {
        run.exhaustive(cfg.torn, run.ready)
    } else {
        run.sample(cfg.crash_points, cfg.torn, cfg.seed, run.ready)
    }
}

/// Records the run and checks its prefix cuts: the whole campaign.
pub fn run_campaign(
    cfg: &CampaignConfig,
    progress: &(dyn Fn(u64, u64) + Sync),
) -> Result<CampaignReport, CampaignError> {
    let wall = std::time::Instant::now();
    let rec = record(cfg)?;
    Ok(crate::run_recorded_cut(
        cfg,
        &rec,
        wall,
        CutModel::Prefix,
        progress,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use lab::driver::LogPositions;
    use workload::{HostOp, HostRecord};

    fn write(index: u64, lpn: u32, first_write: u64) -> HostRecord {
        HostRecord {
            index,
            op: HostOp::Write {
                start: flash::Lpn(lpn),
                count: 1,
            },
            arrival_ns: 1_000 * index,
            ack_ns: Some(1_000 * index + 500),
            durable_ns: None,
            error: None,
            first_write,
        }
    }

    /// Instants become write counts: arrival by the writes issued before the call, the answer
    /// by the writes issued before it returned; a refused request stays unanswered.
    #[test]
    fn the_host_log_is_put_on_the_write_count_clock() {
        let mut refused = write(2, 3, 2);
        refused.ack_ns = None;
        refused.error = Some("no".into());
        let host = HostLog {
            design: "x".into(),
            logical_pages: 4,
            records: vec![write(0, 0, 0), write(1, 1, 1), refused],
            next_write: 3,
        };
        // Logged operations: 0 write, 1 read, 2 write, 3 write.
        let writes_before = [0, 1, 1, 2, 3];
        let at = |arrival, answered| LogPositions { arrival, answered };
        let clocked = prefix_clock(&host, &[at(0, 1), at(1, 4), at(4, 4)], &writes_before);
        let times: Vec<(u64, Option<u64>)> = clocked
            .records
            .iter()
            .map(|r| (r.arrival_ns, r.ack_ns))
            .collect();
        assert_eq!(times, vec![(0, Some(1)), (1, Some(3)), (3, None)]);
    }

    #[test]
    fn cut_models_are_named_and_unknown_names_refused() {
        for m in [CutModel::Instant, CutModel::Prefix] {
            assert_eq!(CutModel::parse(m.name()).unwrap(), m);
        }
        assert_eq!(CutModel::Prefix.arg(), " --cut-model prefix");
        let err = CutModel::parse("kill").unwrap_err().to_string();
        assert!(err.contains("instant") && err.contains("prefix"), "{err}");
    }
}
