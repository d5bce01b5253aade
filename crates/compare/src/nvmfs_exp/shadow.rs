//! Designs that replay the SSD requests a file system sends, beside the SSD it runs on.
//!
//! - **The erase study's second FTL** (NVMFS §IV-C, Fig. 7): the paper captured each file
//!   system's block trace with blktrace and replayed it on a FAST and a page-level FTL. Here the
//!   SSD the file system runs on is the page-level FTL, and [`Shadowed`] hands every write, trim
//!   and flush it receives, in the same order, to a second design on its own in-memory flash of
//!   the same geometry and the same exported capacity: the same request stream as a trace
//!   replay, without storing the trace. Reads are not replayed to it (they change no flash state
//!   the study counts). It is given each request at the instant the primary was.
//! - **The service-time clock** (NVMFS §IV-D, Figs. 8–9; docs/nvmfs.md "Throughput"): the run's
//!   own design on a second flash, given every request, reads included, as a host that keeps
//!   [`Arrivals::ClosedLoop`]'s queue depth of requests outstanding would issue them: each one
//!   when the earliest outstanding one completes. Its simulated busy time is the SSD's service
//!   time for the file system's request stream, whatever the path that produced it (NVMFS
//!   in-process or over FUSE, a kernel file system over NBD with wall-clock arrivals, nilfs2 in
//!   an appliance): the same host model for every file system.
//!
//! A shadow keeps no data: each page it is given is a content tag (the designs' decisions depend
//! on addresses alone), so it costs a tag-only flash, not a second copy of the file system.
//!
//! The same tap shows every block written, with its bytes, to a nilfs2 cleaner meter
//! ([`super::nilfs_meter`]) when nilfs2 is the file system: Figs. 10–11 read from its logs.

use flash::{Content, DeviceConfig, Flash, FlashStats, Lpn};
use ftl::{BlockDevice, Completion, DesignOptions, DesignSpec, FtlError, PageOutcome, Promise};
use lab::driver::{Driver, Queue};
use std::sync::{Arc, Mutex};
use workload::HostOp;

use super::nilfs_meter::CleanerMeter;

/// When a shadow issues the requests it replays.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arrivals {
    /// At the instant the primary was given each one (the erase study: counts, not time).
    AsIssued,
    /// As a host keeping `queue_depth` requests outstanding: the first `queue_depth` at once,
    /// each later one when the earliest outstanding one completes (a flush is a request like the
    /// others, as in Linux's block layer). Reads are replayed too: they take the SSD's time.
    ClosedLoop { queue_depth: usize },
}

/// The second design, how it is given requests, its clock, and the first error it met (after
/// which it takes no more requests).
pub struct Shadow {
    /// The second design behind the request driver (its content tags count the pages written).
    driver: Driver,
    arrivals: Arrivals,
    error: Option<String>,
    requests: u64,
    /// The requests outstanding (closed loop).
    queue: Queue,
    /// The latest completion seen.
    end_ns: u64,
}

/// A shadow's state at the start of a measured phase ([`Shadow::mark`]).
#[derive(Clone, Debug)]
pub struct ShadowMark {
    stats: FlashStats,
    requests: u64,
    writes: u64,
    at_ns: u64,
}

/// What the shadow did between two instants.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ShadowRun {
    pub design: String,
    pub flash_programs: u64,
    /// Valid pages its merges (or GC) copied: the paper's erase cost.
    pub page_copies: u64,
    pub flash_erases: u64,
    /// Requests it was given, and the pages those wrote.
    pub requests: u64,
    pub pages_written: u64,
    /// Closed loop: the simulated time from the mark until every request it was given had
    /// completed and its flash was idle (the SSD's service time); `None` when it was given the
    /// primary's instants.
    pub service_ns: Option<u64>,
    /// Its design metrics at the end (FAST: switch, partial and full merges).
    pub metrics: Vec<(String, f64)>,
    /// Why its figures are missing, if it failed.
    pub error: Option<String>,
}

/// The shadow, shared by the device that replays onto it and the experiment that reads it.
#[derive(Clone)]
pub struct ShadowHandle(Arc<Mutex<Shadow>>);

impl ShadowHandle {
    /// The shadow; a panic while it was held leaves it as it was (its counters stay readable).
    pub fn lock(&self) -> std::sync::MutexGuard<'_, Shadow> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Shadow {
    /// `spec` on a tag-only flash of `config`'s geometry, timing and host interface, exporting
    /// at least `logical_pages`: FAST's hidden share is set so that it exports the primary's
    /// capacity (rounded up to whole blocks) and keeps the rest of the same flash for its log
    /// blocks.
    pub fn build(
        spec: &DesignSpec,
        config: &DeviceConfig,
        logical_pages: u32,
        arrivals: Arrivals,
    ) -> Result<ShadowHandle, FtlError> {
        let g = &config.geometry;
        let options = if spec.name == "fast" {
            let blocks = logical_pages.div_ceil(g.pages_per_block);
            let op = (g.blocks() - blocks) as f64 / g.blocks() as f64 - 1e-9;
            DesignOptions::default().with("op", op)
        } else {
            DesignOptions::default()
        };
        let dev = lab::device::fresh(spec, config, &options, true)?;
        if dev.logical_pages() < logical_pages {
            return Err(FtlError::InvalidOption(format!(
                "{} exports {} pages, fewer than the {logical_pages} it must replay",
                spec.name,
                dev.logical_pages()
            )));
        }
        let depth = match arrivals {
            Arrivals::ClosedLoop { queue_depth } => queue_depth,
            Arrivals::AsIssued => 1,
        };
        Ok(ShadowHandle(Arc::new(Mutex::new(Shadow {
            driver: Driver::over(dev, 0).writes_from(1),
            arrivals,
            error: None,
            requests: 0,
            queue: Queue::new(depth, 0),
            end_ns: 0,
        }))))
    }

    /// Starts a measured phase: every request given so far completes first (the queue drains),
    /// and the phase's service time counts from then.
    pub fn mark(&mut self) -> ShadowMark {
        let at_ns = self.quiesced_ns();
        self.queue.restart_at(at_ns);
        ShadowMark {
            stats: self.driver.device().flash().stats().clone(),
            requests: self.requests,
            writes: self.writes(),
            at_ns,
        }
    }

    /// The shadow's work since `mark`.
    pub fn run_since(&self, mark: &ShadowMark) -> ShadowRun {
        let dev = self.driver.device();
        let d = dev.flash().stats().since(&mark.stats);
        let service_ns = match self.arrivals {
            Arrivals::AsIssued => None,
            Arrivals::ClosedLoop { .. } => Some(self.quiesced_ns() - mark.at_ns),
        };
        ShadowRun {
            design: dev.design().to_string(),
            flash_programs: d.total_programs(),
            page_copies: d.programs_for(flash::OpCause::GcCopy),
            flash_erases: d.total_erases(),
            requests: self.requests - mark.requests,
            pages_written: self.writes() - mark.writes,
            service_ns,
            metrics: dev.metrics(),
            error: self.error.clone(),
        }
    }

    /// When everything given so far is done: the latest completion, the flash idle.
    fn quiesced_ns(&self) -> u64 {
        self.end_ns
            .max(self.queue.clock_ns())
            .max(self.driver.device().flash().idle_ns())
    }

    /// Pages written so far (each got the next content tag, numbered from 1).
    fn writes(&self) -> u64 {
        self.driver.next_write() - 1
    }

    /// A closed-loop shadow (the service-time clock) keeps its outstanding requests and takes
    /// reads too.
    fn closed_loop(&self) -> bool {
        matches!(self.arrivals, Arrivals::ClosedLoop { .. })
    }

    /// The instant the next request is issued at, given the instant the primary got it.
    fn issue_at(&mut self, primary_ns: u64) -> u64 {
        match self.arrivals {
            Arrivals::AsIssued => primary_ns,
            Arrivals::ClosedLoop { .. } => self.queue.next_arrival(),
        }
    }

    /// Replays `op`, unless an earlier request failed (the shadow then takes no more).
    fn replay(&mut self, primary_ns: u64, op: HostOp) {
        if self.error.is_some() {
            return;
        }
        let at = self.issue_at(primary_ns);
        self.requests += 1;
        match self.driver.issue(&op, at) {
            Ok(issued) => {
                // A deferred acknowledgement (merged SWRITEs) never reaches a plain replay.
                let done = issued.ack_ns.max(at);
                self.end_ns = self.end_ns.max(done);
                if self.closed_loop() {
                    self.queue.completed(done);
                }
            }
            Err(e) => self.error = Some(e.to_string()),
        }
    }
}

/// A nilfs2 cleaner meter shared by the device that feeds it and the experiment that reads it.
#[derive(Clone)]
pub struct MeterHandle(Arc<Mutex<CleanerMeter>>);

impl MeterHandle {
    /// A meter for segments of `blocks_per_segment` blocks.
    pub fn new(blocks_per_segment: u32) -> MeterHandle {
        MeterHandle(Arc::new(Mutex::new(CleanerMeter::new(blocks_per_segment))))
    }

    /// The meter; a panic while it was held leaves it as it was (its counts stay readable).
    pub fn lock(&self) -> std::sync::MutexGuard<'_, CleanerMeter> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The primary device, with every request replayed on its shadows (writes, trims and flushes on
/// each, reads on those that take them) and the blocks written shown to a nilfs2 cleaner meter
/// (either may be absent).
pub struct Shadowed {
    primary: Box<dyn BlockDevice>,
    shadows: Vec<ShadowHandle>,
    meter: Option<MeterHandle>,
}

impl Shadowed {
    pub fn new(primary: Box<dyn BlockDevice>, shadow: ShadowHandle) -> Shadowed {
        Shadowed::tapped(primary, vec![shadow], None)
    }

    pub fn tapped(
        primary: Box<dyn BlockDevice>,
        shadows: Vec<ShadowHandle>,
        meter: Option<MeterHandle>,
    ) -> Shadowed {
        Shadowed {
            primary,
            shadows,
            meter,
        }
    }
}

impl BlockDevice for Shadowed {
    fn design(&self) -> &'static str {
        self.primary.design()
    }
    fn promise(&self) -> Promise {
        self.primary.promise()
    }
    fn logical_pages(&self) -> u32 {
        self.primary.logical_pages()
    }

    fn write(
        &mut self,
        start: Lpn,
        pages: &[Content],
        arrival_ns: u64,
    ) -> Result<Completion, FtlError> {
        let done = self.primary.write(start, pages, arrival_ns)?;
        if let Some(meter) = &self.meter {
            let mut meter = meter.lock();
            for (k, page) in pages.iter().enumerate() {
                if let Content::Bytes(bytes) = page {
                    meter.observe(start.0 as u64 + k as u64, bytes);
                }
            }
        }
        let count = pages.len() as u32;
        for shadow in &self.shadows {
            shadow
                .lock()
                .replay(arrival_ns, HostOp::Write { start, count });
        }
        Ok(done)
    }

    fn read(
        &mut self,
        start: Lpn,
        count: u32,
        arrival_ns: u64,
        out: &mut Vec<PageOutcome>,
    ) -> Result<Completion, FtlError> {
        let done = self.primary.read(start, count, arrival_ns, out)?;
        for shadow in &self.shadows {
            let mut shadow = shadow.lock();
            if shadow.closed_loop() {
                shadow.replay(arrival_ns, HostOp::Read { start, count });
            }
        }
        Ok(done)
    }

    fn flush(&mut self, arrival_ns: u64) -> Result<Completion, FtlError> {
        let done = self.primary.flush(arrival_ns)?;
        for shadow in &self.shadows {
            shadow.lock().replay(arrival_ns, HostOp::Flush);
        }
        Ok(done)
    }

    fn trim(&mut self, start: Lpn, count: u32, arrival_ns: u64) -> Result<Completion, FtlError> {
        let done = self.primary.trim(start, count, arrival_ns)?;
        for shadow in &self.shadows {
            shadow
                .lock()
                .replay(arrival_ns, HostOp::Trim { start, count });
        }
        Ok(done)
    }

    fn flash(&self) -> &Flash {
        self.primary.flash()
    }
    fn flash_mut(&mut self) -> &mut Flash {
        self.primary.flash_mut()
    }
    fn into_flash(self: Box<Self>) -> Flash {
        self.primary.into_flash()
    }
    fn prefetch_mapping(&self, start: Lpn, ahead: usize) {
        self.primary.prefetch_mapping(start, ahead)
    }
    fn check_invariants(&self) -> Result<(), ftl::InvariantViolation> {
        self.primary.check_invariants()
    }
    fn metrics(&self) -> Vec<(String, f64)> {
        self.primary.metrics()
    }
    fn memory(&self) -> Vec<(String, u64)> {
        self.primary.memory()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// DFTL on the `small` preset's tag-only flash, with its spec and configuration.
    fn dftl_on_small() -> (Box<dyn BlockDevice>, DesignSpec, DeviceConfig) {
        let cfg = DeviceConfig::preset("small").unwrap();
        let spec = dftl::spec();
        let flash = Flash::in_memory(cfg.clone(), spec.oob_record(&cfg.geometry), true);
        let primary = spec.build(flash, &DesignOptions::default()).unwrap();
        (primary, spec, cfg)
    }

    #[test]
    fn the_shadow_replays_writes_trims_and_flushes_and_must_cover_the_primary() {
        let (primary, spec, cfg) = dftl_on_small();
        let logical = primary.logical_pages();
        let shadow = Shadow::build(&spec, &cfg, logical, Arrivals::AsIssued).unwrap();
        let before = shadow.lock().mark();
        let mut dev = Shadowed::new(primary, shadow.clone());
        let page = Content::Bytes(vec![7u8; 4096].into_boxed_slice());
        for i in 0..100 {
            dev.write(Lpn(i), std::slice::from_ref(&page), 1_000 * i as u64)
                .unwrap();
        }
        dev.trim(Lpn(0), 10, 200_000).unwrap();
        dev.flush(300_000).unwrap();
        let run = shadow.lock().run_since(&before);
        assert_eq!(run.design, "dftl");
        assert!(run.flash_programs >= 100, "{run:?}");
        assert_eq!(run.error, None);
        assert_eq!((run.requests, run.service_ns), (102, None));
        // a shadow too small to replay the primary's range is refused
        assert!(Shadow::build(&spec, &cfg, logical + 1, Arrivals::AsIssued).is_err());
    }

    /// The service-time clock's figure for `writes` one-page writes (each followed by a read of
    /// the same page), at `queue_depth`, the primary given them `spacing_ns` apart.
    fn service_of(writes: u32, queue_depth: usize, spacing_ns: u64) -> ShadowRun {
        let (primary, spec, cfg) = dftl_on_small();
        let logical = primary.logical_pages();
        let clock = Shadow::build(&spec, &cfg, logical, Arrivals::ClosedLoop { queue_depth });
        let clock = clock.unwrap();
        let mut dev = Shadowed::new(primary, clock.clone());
        let page = Content::Bytes(vec![7u8; 4096].into_boxed_slice());
        dev.write(Lpn(logical - 1), std::slice::from_ref(&page), 0)
            .unwrap();
        let mark = clock.lock().mark();
        let mut out = Vec::new();
        for i in 0..writes {
            let at = spacing_ns * (i as u64 + 1);
            dev.write(Lpn(i * 7), std::slice::from_ref(&page), at)
                .unwrap();
            dev.read(Lpn(i * 7), 1, at, &mut out).unwrap();
        }
        let run = clock.lock().run_since(&mark);
        assert_eq!(run.error, None);
        run
    }

    /// The clock replays reads too, and its time is the SSD's alone: it does not depend on the
    /// instants the primary was given (wall-clock arrivals over NBD, NVMFS's own clock), and it
    /// falls when more requests are kept outstanding (the flash's chips work in parallel).
    #[test]
    fn the_service_clock_times_the_requests_as_a_closed_loop_host_would_issue_them() {
        let program_ns = DeviceConfig::preset("small").unwrap().timing.program_ns;
        let serial = service_of(64, 1, 1_000);
        assert_eq!(serial.requests, 128);
        let serial_ns = serial.service_ns.unwrap();
        // one at a time: every program waits for the one before
        assert!(serial_ns >= 64 * program_ns, "{serial:?}");
        // the primary's instants do not matter, not even a second apart
        assert_eq!(service_of(64, 1, 1_000_000_000).service_ns, Some(serial_ns));
        let deep = service_of(64, 32, 1_000).service_ns.unwrap();
        assert!(
            deep * 2 < serial_ns,
            "qd32 {deep} ns against qd1 {serial_ns} ns"
        );
        assert_eq!(service_of(64, 32, 77).service_ns, Some(deep));
    }

    /// A tapped device shows every page it is given to the nilfs2 cleaner meter, with its
    /// block number, and needs no shadow design for it.
    #[test]
    fn the_meter_sees_each_written_block() {
        use crate::nvmfs_exp::nilfs_meter::{summary_block, GC_LOG_FLAGS};
        let (primary, _, _) = dftl_on_small();
        let meter = MeterHandle::new(16);
        let mut dev = Shadowed::tapped(primary, Vec::new(), Some(meter.clone()));
        let data = Content::Bytes(vec![3u8; 4096].into_boxed_slice());
        let log = |seq| Content::Bytes(summary_block(GC_LOG_FLAGS, seq, 10, 100).into());
        dev.write(Lpn(16), &[data.clone(), log(1), data.clone()], 0)
            .unwrap();
        dev.write(Lpn(17), &[log(2)], 1_000).unwrap(); // segment 1 again, a new sequence
        let c = meter.lock().counts();
        assert_eq!((c.cleaner_logs, c.moved_blocks), (2, 2 * (10 - 1 - 1)));
        assert_eq!((c.recycled_segments, c.recycled_blocks), (1, 16));
    }
}
