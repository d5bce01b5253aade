//! Choosing crash instants and building the flash image at each, incrementally.
//!
//! A crash instant T keeps the operations that ended by T, tears (when asked) the one running on
//! each chip at T, and drops the rest (`flash::oplog`). Instants come from the recorded run:
//! spread evenly over the completions, aimed at dangerous moments (metadata programs — mapping,
//! transaction metadata, checkpoints, summaries, records —, GC copies and erases, host
//! acknowledgements of flushes and commits), and in the middle of operations for tearing.

use flash::{LoggedOp, OpCause, OpKind, OpLog, Store};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use workload::HostLog;

/// Why a crash instant was chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
pub enum PointKind {
    Spread,
    Metadata,
    Gc,
    Acknowledgement,
    /// Between the flash operations of one multi-page request or transaction.
    Transaction,
    Exhaustive,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct CrashPoint {
    pub instant_ns: u64,
    pub torn: bool,
    pub kind: PointKind,
}

/// Every instant right after a completion; with `torn` also, for every interval between two
/// completions, the instant just before the later one with everything in flight torn, and the
/// middle of every mutating op.
pub fn exhaustive(log: &OpLog, torn: bool) -> Vec<CrashPoint> {
    let mut v: Vec<CrashPoint> = log
        .completion_order()
        .iter()
        .map(|&i| CrashPoint {
            instant_ns: log.ops[i].span.end_ns,
            torn: false,
            kind: PointKind::Exhaustive,
        })
        .collect();
    v.push(CrashPoint {
        instant_ns: 0,
        torn: false,
        kind: PointKind::Exhaustive,
    });
    if torn {
        v.extend(log.ops.iter().filter(|o| o.mutates()).flat_map(|o| {
            [mid(o), o.span.end_ns.saturating_sub(1)].map(|at| CrashPoint {
                instant_ns: at,
                torn: true,
                kind: PointKind::Exhaustive,
            })
        }));
    }
    v.sort();
    v.dedup_by_key(|p| (p.instant_ns, p.torn));
    v
}

fn mid(o: &LoggedOp) -> u64 {
    o.span.start_ns + (o.span.end_ns - o.span.start_ns) / 2
}

/// `n` distinct instants at or after `from_ns` (when the formatted device was ready): a third
/// spread evenly over the completions, the rest aimed at dangerous moments, half of the aimed ones
/// torn when `torn`. Fewer only if the run has fewer distinct instants to offer.
pub fn sample(
    log: &OpLog,
    host: &HostLog,
    n: usize,
    torn: bool,
    seed: u64,
    from_ns: u64,
) -> Vec<CrashPoint> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5eed_c4a5);
    let mut order = log.completion_order();
    order.retain(|&i| log.ops[i].span.end_ns >= from_ns);
    if n == 0 {
        return Vec::new();
    }
    if order.is_empty() {
        return vec![CrashPoint {
            instant_ns: from_ns,
            torn: false,
            kind: PointKind::Spread,
        }];
    }
    let targets = Targets::new(log, host, order, from_ns);
    let mut out = Vec::with_capacity(n);
    let mut taken: rustc_hash::FxHashSet<(u64, bool)> = Default::default();
    // A third spread evenly over the completions, untorn.
    let spread = n.div_ceil(3);
    for k in 0..spread {
        let order = &targets.order;
        let i = order[(k * order.len() / spread).min(order.len() - 1)];
        let p = CrashPoint {
            instant_ns: log.ops[i].span.end_ns,
            torn: false,
            kind: PointKind::Spread,
        };
        if taken.insert((p.instant_ns, p.torn)) {
            out.push(p);
        }
    }
    // The rest aimed at the moments a design is most likely to get wrong.
    let mut attempts = 0usize;
    while out.len() < n && attempts < 50 * n {
        attempts += 1;
        let p = targets.aim(log, torn, &mut rng);
        if p.instant_ns >= from_ns && taken.insert((p.instant_ns, p.torn)) {
            out.push(p);
        }
    }
    out.sort();
    out
}

/// What the aimed crash points aim at, from the operation log and the host log.
struct Targets<'a> {
    /// Operations in completion order (from the instant sampled from on).
    order: Vec<usize>,
    /// Their completion instants, in that order.
    ends: Vec<u64>,
    /// Programs and erases of metadata (neither host data nor GC).
    metadata: Vec<&'a LoggedOp>,
    /// GC and wear-levelling copies, and every erase.
    gc: Vec<&'a LoggedOp>,
    /// Acknowledgement and durability instants of the requests that succeeded.
    acks: Vec<u64>,
    /// Windows of multi-page requests and transactions ([`transaction_windows`]).
    windows: Vec<(u64, u64)>,
}

impl<'a> Targets<'a> {
    fn new(log: &'a OpLog, host: &HostLog, order: Vec<usize>, from_ns: u64) -> Targets<'a> {
        let mutating_after = |o: &&LoggedOp| o.mutates() && o.span.end_ns > from_ns;
        let metadata = log
            .ops
            .iter()
            .filter(mutating_after)
            .filter(|o| {
                !matches!(
                    o.cause,
                    OpCause::HostData | OpCause::GcCopy | OpCause::WearLevel
                )
            })
            .collect();
        let gc = log
            .ops
            .iter()
            .filter(mutating_after)
            .filter(|o| {
                matches!(o.cause, OpCause::GcCopy | OpCause::WearLevel)
                    || matches!(o.kind, OpKind::Erase { .. })
            })
            .collect();
        let acks = host
            .records
            .iter()
            .filter(|r| r.succeeded())
            .flat_map(|r| [r.ack_ns, r.durable_ns])
            .flatten()
            .filter(|&a| a > from_ns)
            .collect();
        let ends = order.iter().map(|&i| log.ops[i].span.end_ns).collect();
        Targets {
            order,
            ends,
            metadata,
            gc,
            acks,
            windows: transaction_windows(host),
        }
    }

    /// One aimed point: at a metadata operation, a GC operation, inside a transaction's
    /// window, at an acknowledgement, or at any completion — torn half the time when `torn`.
    fn aim(&self, log: &OpLog, torn: bool, rng: &mut ChaCha8Rng) -> CrashPoint {
        let tear = torn && rng.random_bool(0.5);
        let pick = rng.random_range(0..4u32);
        match pick {
            0 if !self.metadata.is_empty() => aimed(
                self.metadata[rng.random_range(0..self.metadata.len())],
                tear,
                PointKind::Metadata,
                rng,
            ),
            1 if !self.gc.is_empty() => aimed(
                self.gc[rng.random_range(0..self.gc.len())],
                tear,
                PointKind::Gc,
                rng,
            ),
            2 if !self.windows.is_empty() => self.inside_window(tear, rng),
            _ if !self.acks.is_empty() => {
                let a = self.acks[rng.random_range(0..self.acks.len())];
                // Just before or at an acknowledgement.
                let at = if rng.random_bool(0.5) {
                    a.saturating_sub(1)
                } else {
                    a
                };
                CrashPoint {
                    instant_ns: at,
                    torn: tear,
                    kind: PointKind::Acknowledgement,
                }
            }
            _ => {
                let i = self.order[rng.random_range(0..self.order.len())];
                aimed(&log.ops[i], tear, PointKind::Spread, rng)
            }
        }
    }

    /// A completion inside the window of one multi-page request or transaction: the crash
    /// lands between its pages (tearing the op that was about to complete).
    fn inside_window(&self, tear: bool, rng: &mut ChaCha8Rng) -> CrashPoint {
        let (from, to) = self.windows[rng.random_range(0..self.windows.len())];
        let lo = self.ends.partition_point(|&e| e <= from);
        let hi = self.ends.partition_point(|&e| e <= to);
        let at = if hi > lo {
            self.ends[rng.random_range(lo..hi)]
        } else {
            from + (to - from) / 2
        };
        CrashPoint {
            instant_ns: if tear { at.saturating_sub(1) } else { at },
            torn: tear,
            kind: PointKind::Transaction,
        }
    }
}

/// (arrival, durable-or-ack) of every multi-page write or static transaction, and (HEAD arrival,
/// REAR durable-or-ack) of every dynamic transaction.
pub(crate) fn transaction_windows(host: &HostLog) -> Vec<(u64, u64)> {
    use workload::HostOp;
    let mut out = Vec::new();
    let mut heads: rustc_hash::FxHashMap<u64, u64> = Default::default();
    for r in host.records.iter().filter(|r| r.succeeded()) {
        let end = r.durable_ns.or(r.ack_ns).unwrap_or(r.arrival_ns);
        match &r.op {
            HostOp::Write { count, .. } if *count > 1 => out.push((r.arrival_ns, end)),
            HostOp::SWrite { .. } => out.push((r.arrival_ns, end)),
            HostOp::DWrite { uuid, flag, .. } => {
                let head = *heads.entry(uuid.0).or_insert(r.arrival_ns);
                if matches!(flag, ftl::DwriteFlag::Rear | ftl::DwriteFlag::Single) {
                    out.push((head, end));
                    heads.remove(&uuid.0);
                }
            }
            _ => {}
        }
    }
    out.retain(|&(a, b)| b > a);
    out
}

fn aimed(o: &LoggedOp, tear: bool, kind: PointKind, rng: &mut ChaCha8Rng) -> CrashPoint {
    if tear {
        let len = (o.span.end_ns - o.span.start_ns).max(2);
        CrashPoint {
            instant_ns: o.span.start_ns + 1 + rng.random_range(0..len - 1),
            torn: true,
            kind,
        }
    } else if rng.random_bool(0.5) {
        CrashPoint {
            instant_ns: o.span.end_ns,
            torn: false,
            kind,
        }
    } else {
        CrashPoint {
            instant_ns: o.span.end_ns.saturating_sub(1),
            torn: false,
            kind,
        }
    }
}

/// Builds images for ascending instants by applying completed operations to one working store.
pub struct ImageBuilder<'a> {
    log: &'a OpLog,
    order: Vec<usize>,
    next: usize,
    working: Box<dyn Store>,
    /// Per chip: mutating ops in issue order (their spans are disjoint and ascending).
    per_chip: Vec<Vec<usize>>,
    chip_cursor: Vec<usize>,
}

impl<'a> ImageBuilder<'a> {
    pub fn new(base: &dyn Store, log: &'a OpLog) -> ImageBuilder<'a> {
        let g = base.geometry().clone();
        let mut per_chip = vec![Vec::new(); g.chips() as usize];
        for (i, o) in log.ops.iter().enumerate() {
            let chip = match &o.kind {
                OpKind::Program { ppn, .. } => g.chip_of(*ppn),
                OpKind::Erase { block } => g.chip_of_block(*block),
                _ => continue,
            };
            per_chip[chip.0 as usize].push(i);
        }
        ImageBuilder {
            log,
            order: log.completion_order(),
            next: 0,
            working: base.snapshot(),
            per_chip,
            chip_cursor: vec![0; g.chips() as usize],
        }
    }

    /// The image at `instant` (instants must not decrease between calls).
    pub fn image_at(&mut self, instant: u64, torn: bool) -> Box<dyn Store> {
        while self.next < self.order.len()
            && self.log.ops[self.order[self.next]].span.end_ns <= instant
        {
            self.log.ops[self.order[self.next]].apply(self.working.as_mut());
            self.next += 1;
        }
        let mut image = self.working.snapshot();
        if torn {
            for (chip, ops) in self.per_chip.iter().enumerate() {
                let cur = &mut self.chip_cursor[chip];
                while *cur < ops.len() && self.log.ops[ops[*cur]].span.end_ns <= instant {
                    *cur += 1;
                }
                if let Some(&i) = ops.get(*cur) {
                    if self.log.ops[i].in_flight_at(instant) {
                        self.log.ops[i].tear(image.as_mut());
                    }
                }
            }
        }
        image
    }
}
