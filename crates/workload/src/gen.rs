//! The seeded request generator behind every workload.

use crate::error::WorkloadError;
use crate::op::HostOp;
use crate::spec::WorkloadSpec;
use flash::Lpn;
use ftl::{DwriteFlag, SwriteMode, TxCapabilities, TxUuid};
use rand::RngExt;
use rand_chacha::ChaCha8Rng;

/// Which phase a request belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Sequential fill to the target utilisation; not measured.
    Fill,
    /// The workload's own requests before the measured ones
    /// ([`WorkloadSpec::warmup_requests`]); not measured.
    Warmup,
    Measured,
}

/// What the generator may know about the device while choosing the next request.
pub struct View<'a> {
    pub now_ns: u64,
    /// Static transactions acknowledged or running whose durability instant is still ahead.
    pub inflight_static: &'a [(TxUuid, u64)],
}

struct Dynamic {
    uuid: TxUuid,
    remaining: u32,
    lpns: Vec<Lpn>,
}

pub struct Generator {
    spec: WorkloadSpec,
    range: u32,
    caps: Option<TxCapabilities>,
    fill_pages: u32,
    fill_cursor: u32,
    warmed: u64,
    measured: u64,
    writes_since_flush: u64,
    seq_cursor: u32,
    hot_base: u32,
    next_uuid: u64,
    dynamic: Vec<Dynamic>,
}

impl Generator {
    pub fn new(
        spec: &WorkloadSpec,
        logical_pages: u32,
        caps: Option<TxCapabilities>,
    ) -> Result<Generator, WorkloadError> {
        spec.validate(logical_pages)?;
        if spec.name == "txmix" && caps.is_none() {
            return Err(WorkloadError::NeedsTransactions(spec.name.clone()));
        }
        let range = spec.range(logical_pages);
        Ok(Generator {
            spec: spec.clone(),
            range,
            caps,
            fill_pages: (spec.fill * logical_pages as f64) as u32,
            fill_cursor: 0,
            warmed: 0,
            measured: 0,
            writes_since_flush: 0,
            seq_cursor: 0,
            hot_base: 0,
            next_uuid: 1,
            dynamic: Vec::new(),
        })
    }

    /// Transaction ids start at `first` (a run continuing an earlier one).
    pub fn start_uuids_at(&mut self, first: u64) {
        self.next_uuid = first;
    }

    /// Requests of the measured phase issued so far.
    pub fn measured(&self) -> u64 {
        self.measured
    }

    /// Whether [`next`](Self::next) ignores its view (every workload but txmix, whose
    /// transactions depend on what is in flight): the driver may then draw a request before
    /// the one ahead of it is issued, and the sequence is the same.
    pub fn ignores_view(&self) -> bool {
        self.spec.name != "txmix"
    }

    /// The next request, or `None` when the workload is over.
    pub fn next(&mut self, rng: &mut ChaCha8Rng, view: &View) -> Option<(HostOp, Phase)> {
        if self.fill_cursor < self.fill_pages {
            let count = (self.fill_pages - self.fill_cursor).min(64);
            let op = HostOp::Write {
                start: Lpn(self.fill_cursor),
                count,
            };
            self.fill_cursor += count;
            return Some((op, Phase::Fill));
        }
        let phase = if self.warmed < self.spec.warmup_requests {
            self.warmed += 1;
            Phase::Warmup
        } else if self.measured < self.spec.requests || !self.dynamic.is_empty() {
            self.measured += 1;
            Phase::Measured
        } else {
            return None;
        };
        let op = self.measured_op(rng, view);
        if matches!(op, HostOp::Write { .. } | HostOp::SWrite { .. }) {
            self.writes_since_flush += 1;
        }
        Some((op, phase))
    }

    fn random_start(&self, rng: &mut ChaCha8Rng, pages: u32) -> Lpn {
        Lpn(rng.random_range(0..=self.range - pages))
    }

    fn flush_due(&mut self) -> bool {
        if self.spec.flush_every > 0 && self.writes_since_flush >= self.spec.flush_every {
            self.writes_since_flush = 0;
            true
        } else {
            false
        }
    }

    fn measured_op(&mut self, rng: &mut ChaCha8Rng, view: &View) -> HostOp {
        if self.spec.name != "txmix" && self.flush_due() {
            return HostOp::Flush;
        }
        if let Some(trim) = self.maybe_trim(rng) {
            return trim;
        }
        let pages = self.spec.request_pages;
        match self.spec.name.as_str() {
            "seqwrite" => {
                if self.seq_cursor + pages > self.range {
                    self.seq_cursor = 0;
                }
                let start = Lpn(self.seq_cursor);
                self.seq_cursor += pages;
                HostOp::Write {
                    start,
                    count: pages,
                }
            }
            "randrw" => {
                let start = self.random_start(rng, pages);
                if rng.random_bool(self.spec.read_fraction) {
                    HostOp::Read {
                        start,
                        count: pages,
                    }
                } else {
                    HostOp::Write {
                        start,
                        count: pages,
                    }
                }
            }
            "locality" => {
                let window = self.spec.locality_pages.clamp(pages, self.range);
                if rng.random_ratio(1, 256) {
                    self.hot_base = rng.random_range(0..=self.range - window);
                }
                let start = self.hot_base + rng.random_range(0..=window - pages);
                HostOp::Write {
                    start: Lpn(start),
                    count: pages,
                }
            }
            "txmix" => self.txmix_op(rng, view),
            _ => HostOp::Write {
                start: self.random_start(rng, pages),
                count: pages,
            },
        }
    }

    /// A trim of 1–8 pages with probability `trim_fraction` (not while a dynamic transaction
    /// of this generator is open, unless the workload interleaves: designs that allow one at a
    /// time would refuse it).
    fn maybe_trim(&mut self, rng: &mut ChaCha8Rng) -> Option<HostOp> {
        let eligible = self.spec.trim_fraction > 0.0
            && (self.dynamic.is_empty() || self.spec.interleave_fraction > 0.0)
            && !matches!(self.spec.name.as_str(), "seqwrite" | "locality");
        if !eligible || !rng.random_bool(self.spec.trim_fraction) {
            return None;
        }
        let count = rng.random_range(1..=8u32.min(self.range));
        Some(HostOp::Trim {
            start: self.random_start(rng, count),
            count,
        })
    }

    fn distinct_lpns(&self, rng: &mut ChaCha8Rng, n: u32, hot: bool) -> Vec<Lpn> {
        let span = if hot {
            self.range.min(64).max(n)
        } else {
            self.range
        };
        let mut out: Vec<Lpn> = Vec::with_capacity(n as usize);
        while out.len() < n as usize {
            let l = Lpn(rng.random_range(0..span));
            if !out.contains(&l) {
                out.push(l);
            }
        }
        out
    }

    fn txmix_op(&mut self, rng: &mut ChaCha8Rng, view: &View) -> HostOp {
        let caps = self.caps.expect("txmix requires capabilities");
        // While dynamic transactions are open, some requests may be others (`interleave_fraction`;
        // not once the run is over and they are only being finished).
        let interleave = !self.dynamic.is_empty()
            && self.spec.interleave_fraction > 0.0
            && self.measured <= self.spec.requests
            && rng.random_bool(self.spec.interleave_fraction);
        // An open dynamic transaction continues (reads may interleave).
        if !interleave
            && !self.dynamic.is_empty()
            && !rng.random_bool(self.spec.read_fraction / 2.0)
        {
            return self.continue_any_dynamic(rng, caps);
        }
        if rng.random_bool(self.spec.read_fraction) {
            let count = rng.random_range(1..=4u32.min(self.range));
            let start = self.random_start(rng, count);
            return if caps.sread && self.dynamic.is_empty() && rng.random_bool(0.5) {
                HostOp::SRead { start, count }
            } else {
                HostOp::Read { start, count }
            };
        }
        if !interleave && !self.dynamic.is_empty() {
            return self.continue_any_dynamic(rng, caps);
        }
        if self.flush_due() {
            return HostOp::Flush;
        }
        if caps.abort
            && !view.inflight_static.is_empty()
            && rng.random_bool(self.spec.abort_fraction)
        {
            let (uuid, _) = view.inflight_static[rng.random_range(0..view.inflight_static.len())];
            return HostOp::Abort { uuid };
        }
        let max_pages = self
            .spec
            .request_pages
            .min(caps.max_tx_pages.max(1) as u32)
            .min(self.range)
            .max(1);
        let min_pages = self.spec.min_tx_pages.min(max_pages);
        let mut choices: Vec<(u32, u8)> = vec![(2, 0)];
        if caps.static_tx {
            choices.push((4, 1));
            if caps.async_swrite {
                choices.push((3, 2));
            }
        }
        if caps.dynamic_tx {
            choices.push((2, 3));
        }
        let total: u32 = choices.iter().map(|c| c.0).sum();
        let mut pick = rng.random_range(0..total);
        let kind = choices.iter().find(|c| {
            if pick < c.0 {
                true
            } else {
                pick -= c.0;
                false
            }
        });
        match kind.map(|c| c.1).unwrap_or(0) {
            1 | 2 => {
                let n = rng.random_range(min_pages.max(1)..=max_pages.max(min_pages.max(1)));
                let hot = rng.random_bool(0.3);
                let lpns = self.distinct_lpns(rng, n, hot);
                let mode = if kind.map(|c| c.1) == Some(2) {
                    SwriteMode::Async
                } else {
                    SwriteMode::Sync
                };
                let uuid = self.fresh_uuid();
                HostOp::SWrite { uuid, lpns, mode }
            }
            // One dynamic transaction at a time: the open one continues.
            3 if !self.dynamic.is_empty() && !caps.concurrent_dynamic => {
                self.continue_any_dynamic(rng, caps)
            }
            3 => {
                let n = rng.random_range(1..=max_pages);
                let hot = rng.random_bool(0.3);
                let lpns = self.distinct_lpns(rng, n, hot);
                let uuid = self.fresh_uuid();
                self.dynamic.push(Dynamic {
                    uuid,
                    remaining: n,
                    lpns,
                });
                let i = self.dynamic.len() - 1;
                self.continue_dynamic(rng, i, caps)
            }
            _ => {
                let count = rng.random_range(1..=4u32.min(self.range));
                HostOp::Write {
                    start: self.random_start(rng, count),
                    count,
                }
            }
        }
    }

    fn fresh_uuid(&mut self) -> TxUuid {
        let u = TxUuid(self.next_uuid);
        self.next_uuid += 1;
        u
    }

    /// The next request of an open dynamic transaction drawn at random.
    fn continue_any_dynamic(&mut self, rng: &mut ChaCha8Rng, caps: TxCapabilities) -> HostOp {
        let i = rng.random_range(0..self.dynamic.len());
        self.continue_dynamic(rng, i, caps)
    }

    fn continue_dynamic(&mut self, rng: &mut ChaCha8Rng, i: usize, caps: TxCapabilities) -> HostOp {
        let d = &mut self.dynamic[i];
        let total = d.lpns.len() as u32;
        let written = total - d.remaining;
        // Abort part-way through, sometimes.
        if caps.abort && written > 0 && rng.random_bool(self.spec.abort_fraction / 2.0) {
            let uuid = d.uuid;
            self.dynamic.swap_remove(i);
            return HostOp::Abort { uuid };
        }
        let lpn = d.lpns[written as usize];
        d.remaining -= 1;
        let flag = match (written, d.remaining) {
            (0, 0) => DwriteFlag::Single,
            (0, _) => DwriteFlag::Head,
            (_, 0) => DwriteFlag::Rear,
            _ => DwriteFlag::Body,
        };
        let uuid = d.uuid;
        if d.remaining == 0 {
            self.dynamic.swap_remove(i);
        }
        HostOp::DWrite { uuid, lpn, flag }
    }

    /// Called when a dynamic page was refused: the transaction is dropped from the generator.
    pub fn forget_dynamic(&mut self, uuid: TxUuid) {
        self.dynamic.retain(|d| d.uuid != uuid);
    }

    /// Whether the generator may open more than one dynamic transaction at once.
    pub fn allows_concurrent_dynamic(&self) -> bool {
        self.caps.is_some_and(|c| c.concurrent_dynamic)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::WORKLOAD_NAMES;
    use rand::SeedableRng;

    /// The warm-up is the head of the same request stream, marked unmeasured: the fill, then
    /// `warmup_requests` of the workload's own requests, then `requests` measured ones, and the
    /// requests are those a run without a warm-up of `warmup + requests` would issue.
    #[test]
    fn the_warmup_is_the_head_of_the_stream_and_not_measured() {
        let view = View {
            now_ns: 0,
            inflight_static: &[],
        };
        let stream = |warmup: u64, requests: u64| {
            let mut spec = WorkloadSpec::named("randrw").unwrap();
            spec.fill = 0.25;
            spec.warmup_requests = warmup;
            spec.requests = requests;
            let mut generator = Generator::new(&spec, 1024, None).unwrap();
            let mut rng = ChaCha8Rng::seed_from_u64(3);
            std::iter::from_fn(|| generator.next(&mut rng, &view)).collect::<Vec<_>>()
        };
        let warmed = stream(30, 50);
        let plain = stream(0, 80);
        let phases: Vec<Phase> = warmed.iter().map(|(_, p)| *p).collect();
        let fills = phases.iter().take_while(|p| **p == Phase::Fill).count();
        assert_eq!(fills, 4, "256 pages filled 64 at a time");
        assert!(phases[fills..fills + 30]
            .iter()
            .all(|p| *p == Phase::Warmup));
        assert!(phases[fills + 30..].iter().all(|p| *p == Phase::Measured));
        assert_eq!(phases.len(), fills + 80);
        let ops = |s: &[(HostOp, Phase)]| s.iter().map(|(op, _)| op.clone()).collect::<Vec<_>>();
        assert_eq!(ops(&warmed), ops(&plain));
    }

    /// A design offering every primitive, with or without concurrent dynamic transactions.
    fn every_capability(concurrent_dynamic: bool) -> TxCapabilities {
        TxCapabilities {
            static_tx: true,
            async_swrite: true,
            dynamic_tx: true,
            concurrent_static: true,
            concurrent_dynamic,
            sread: true,
            abort: true,
            max_tx_pages: 64,
        }
    }

    /// The driver keeps expected contents only when `issues_reads` says so: a workload that
    /// reads without saying it would have its reads go unchecked.
    #[test]
    fn a_workload_reads_only_if_its_spec_says_it_may() {
        let caps = every_capability(true);
        for name in WORKLOAD_NAMES {
            for trim_fraction in [0.0, 0.2] {
                let mut spec = WorkloadSpec::named(name).unwrap();
                spec.trim_fraction = trim_fraction;
                let mut g = Generator::new(&spec, 4096, Some(caps)).unwrap();
                let mut rng = ChaCha8Rng::seed_from_u64(7);
                let view = View {
                    now_ns: 0,
                    inflight_static: &[],
                };
                let reads = (0..5_000)
                    .filter_map(|_| g.next(&mut rng, &view))
                    .filter(|(op, _)| matches!(op, HostOp::Read { .. } | HostOp::SRead { .. }))
                    .count();
                assert_eq!(reads > 0, spec.issues_reads(), "{name}: {reads} reads");
            }
        }
    }

    /// Requests issued while a dynamic transaction of the stream is open (after its HEAD, before
    /// its REAR or ABORT), by kind, and the most dynamic transactions open at once.
    fn while_open(interleave: f64, concurrent: bool) -> (Vec<&'static str>, usize) {
        let caps = every_capability(concurrent);
        let mut spec = WorkloadSpec::named("txmix").unwrap();
        spec.requests = 5_000;
        spec.trim_fraction = 0.05;
        spec.interleave_fraction = interleave;
        let mut g = Generator::new(&spec, 4096, Some(caps)).unwrap();
        let mut rng = ChaCha8Rng::seed_from_u64(11);
        let view = View {
            now_ns: 0,
            inflight_static: &[],
        };
        let (mut open, mut kinds, mut most) = (Vec::new(), Vec::new(), 0);
        while let Some((op, _)) = g.next(&mut rng, &view) {
            match op {
                HostOp::DWrite { uuid, flag, .. } => match flag {
                    DwriteFlag::Head => open.push(uuid),
                    DwriteFlag::Rear => open.retain(|u| *u != uuid),
                    _ => {}
                },
                HostOp::Abort { uuid } => open.retain(|u| *u != uuid),
                other if !open.is_empty() => kinds.push(other.kind()),
                _ => {}
            }
            most = most.max(open.len());
        }
        (kinds, most)
    }

    /// Without interleaving a dynamic transaction runs to its end with only reads in between
    /// (what the soaks drew until 2026-11-30); with it, writes, static transactions, trims and
    /// (where the design runs several) more dynamic transactions come in between.
    #[test]
    fn an_open_dynamic_transaction_is_interleaved_only_when_asked() {
        let (kinds, most) = while_open(0.0, true);
        assert!(kinds.iter().all(|k| k.ends_with("read")), "{kinds:?}");
        assert_eq!(most, 1);
        let (kinds, most) = while_open(0.5, true);
        for kind in ["write", "swrite-sync", "trim"] {
            assert!(kinds.contains(&kind), "no {kind} while open: {kinds:?}");
        }
        assert!(most > 1, "never two dynamic transactions open at once");
        let (_, most) = while_open(0.5, false);
        assert_eq!(most, 1);
    }
}
