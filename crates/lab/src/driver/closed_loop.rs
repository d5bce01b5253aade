//! The closed loop: a seeded workload ([`workload::Generator`]) against a design as a host with
//! `queue_depth` outstanding requests, in simulated time, through the [`Driver`], recording
//! every request in a [`HostLog`].
//!
//! Arrival model: the first `queue_depth` requests arrive at the start; each later request arrives
//! when the earliest outstanding request completes (arrivals never go back in time). A flush
//! covers every write that arrived before it.

use super::Driver;
use flash::{ContentTag, FlashStats};
use ftl::{BlockDevice, FtlError, PageOutcome, TxUuid};
use hdrhistogram::Histogram;
use host::HostError;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap, VecDeque};
use workload::{Generator, HostLog, HostOp, HostRecord, Phase, View, WorkloadError, WorkloadSpec};

/// Figures of the measured phase, in simulated time unless named `wall`.
#[derive(Clone, Debug)]
pub struct RunStats {
    pub requests: u64,
    pub host_pages_written: u64,
    pub host_pages_read: u64,
    pub transactions_committed: u64,
    pub errors: BTreeMap<String, u64>,
    /// Reads that returned a page of another logical page, or (for plain workloads) not the last
    /// write: functional errors.
    pub read_mismatches: u64,
    pub latency_ns: Histogram<u64>,
    pub start_ns: u64,
    pub end_ns: u64,
    /// Flash counters of the measured phase.
    pub flash: FlashStats,
    /// Wall seconds of the measured phase (from the end of the fill to the final flush).
    pub wall_s: f64,
    /// Heap bytes of the driver's expected contents (the last write to each page, kept only
    /// when the workload reads).
    pub expected_contents_bytes: u64,
}

impl RunStats {
    pub fn sim_seconds(&self) -> f64 {
        (self.end_ns.saturating_sub(self.start_ns)) as f64 / 1e9
    }
    pub fn write_amplification(&self) -> f64 {
        if self.host_pages_written == 0 {
            0.0
        } else {
            self.flash.total_programs() as f64 / self.host_pages_written as f64
        }
    }
}

pub struct RunResult {
    pub stats: RunStats,
    pub log: Option<HostLog>,
    /// When recording: each request of `log`, by index, placed in the flash operation log.
    pub positions: Option<Vec<LogPositions>>,
    /// Simulated instant at which the run ended (every acknowledged request done).
    pub end_ns: u64,
}

/// Where a request stands in the flash operation log: what a process killed after its N-th
/// image write had done about it (the image-prefix cut model, docs/crashtest.md). Counts are of
/// logged operations ([`flash::Flash::logged_ops`]), every kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LogPositions {
    /// Operations logged when the request was handed to the design.
    pub arrival: usize,
    /// Operations logged when the host learnt the design's answer: the call's return, or for an
    /// SWRITE answered with `ACK_DEFERRED` the collection of its completion. A process answers
    /// its client only after that.
    pub answered: usize,
}

/// The design behind the driver: every request of a run goes through the host layer (its clock,
/// its fail-stop, and in recording runs the design's invariants after every request).
type Device<'a> = Driver<&'a mut dyn BlockDevice>;

/// Where a run continues from: a device that already holds data (a second life after a power
/// cut and recovery). Write numbers and transaction ids start past the earlier run's, so that a
/// page's content tag names one write of one run.
#[derive(Clone, Debug, Default)]
pub struct Origin {
    /// Number of the first page write.
    pub first_write: u64,
    /// First transaction id.
    pub first_uuid: u64,
    /// Per LPN, the write number the device holds at the start (`u64::MAX`: unwritten); plain
    /// workloads check their reads against it.
    pub contents: Option<Vec<u64>>,
}

/// Runs `spec` on `dev`. `start_ns` is the instant the host starts (0 for a fresh device).
pub fn run(
    dev: &mut dyn BlockDevice,
    spec: &WorkloadSpec,
    seed: u64,
    start_ns: u64,
    record: bool,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<RunResult, WorkloadError> {
    run_from(
        dev,
        spec,
        seed,
        start_ns,
        record,
        &Origin::default(),
        progress,
    )
}

/// How many requests a workload that ignores the view is drawn ahead of the one served: each is
/// hinted to the design at every distance down to 1 (`BlockDevice::prefetch_mapping`), so a
/// design can walk a chain of dependent loads (index entry, slot, page) a step per request.
const LOOK_AHEAD: usize = 4;

/// [`run`] on a device that already holds data, from `origin`.
pub fn run_from(
    dev: &mut dyn BlockDevice,
    spec: &WorkloadSpec,
    seed: u64,
    start_ns: u64,
    record: bool,
    origin: &Origin,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<RunResult, WorkloadError> {
    let caps = dev.transactional().map(|t| t.capabilities());
    let mut generator = Generator::new(spec, dev.logical_pages(), caps)?;
    generator.start_uuids_at(origin.first_uuid.max(1));
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut run = Run::new(dev, spec, start_ns, record, origin);
    let host = host::Host::new(dev, run.start_ns)
        .tag_only()
        .checked(record);
    let dev = &mut Driver::new(host).writes_from(origin.first_write);
    // A workload whose requests do not depend on the view is drawn LOOK_AHEAD requests ahead,
    // so the design can load the next requests' mappings step by step while it serves this
    // one (the same sequence either way: nothing else draws from `rng`).
    let look_ahead = generator.ignores_view();
    let mut drawn: VecDeque<(HostOp, Phase)> = VecDeque::with_capacity(LOOK_AHEAD + 1);
    let mut exhausted = false;
    let mut measured = 0u64;
    loop {
        let arrival = run.next_arrival(dev)?;
        run.inflight_static
            .retain(|&(_, durable)| durable > arrival);
        let view = View {
            now_ns: arrival,
            inflight_static: &run.inflight_static,
        };
        while look_ahead && !exhausted && drawn.len() <= LOOK_AHEAD {
            match generator.next(&mut rng, &view) {
                Some(next) => drawn.push_back(next),
                None => exhausted = true,
            }
        }
        let Some((op, phase)) = drawn
            .pop_front()
            .or_else(|| generator.next(&mut rng, &view))
        else {
            break;
        };
        for (ahead, (next, _)) in (1..).zip(&drawn) {
            if let Some(start) = next.mapping_lookup() {
                dev.device().prefetch_mapping(start, ahead);
            }
        }
        if phase == Phase::Measured && run.measured_from.is_none() {
            run.start_measured(dev.device(), arrival);
        }
        run.issue_and_settle(dev, &mut generator, op, phase, arrival)?;
        if phase == Phase::Measured {
            measured += 1;
            // Every 4096 measured requests (the fill, which reports nothing, never calls it).
            if measured.is_multiple_of(4096) {
                progress(measured, spec.requests);
            }
        }
    }
    let result = run.finish(dev)?;
    progress(spec.requests, spec.requests);
    Ok(result)
}

/// The host's side of one run: the closed loop's queue, the requests the device holds, what the
/// measured phase has accumulated so far, and the log of every request when recording.
struct Run {
    record: bool,
    queue_depth: usize,
    /// Acknowledgement instants of the requests in the queue.
    outstanding: BinaryHeap<Reverse<u64>>,
    /// Static transactions acknowledged or running whose durability instant is still ahead.
    inflight_static: Vec<(TxUuid, u64)>,
    /// SWRITEs the device answered with ACK_DEFERRED (Möbius merging small transactions): they
    /// hold a queue slot until their completion arrives from `take_completions`.
    deferred: HashMap<TxUuid, Deferred>,
    /// The last write to each page, for checking reads: 8 bytes per logical page, kept only
    /// when the workload reads (and is not txmix, whose reads are checked for foreign data).
    expected: Vec<u64>,
    stats: RunStats,
    log: HostLog,
    /// Beside `log`, each record's place in the flash operation log.
    positions: Vec<LogPositions>,
    start_ns: u64,
    last_arrival: u64,
    end_ns: u64,
    issued: u64,
    /// Flash counters and instant at the start of the measured phase.
    measured_from: Option<(FlashStats, u64)>,
    /// Wall time of the measured phase: restarted when the fill is done.
    wall: std::time::Instant,
}

impl Run {
    fn new(
        dev: &dyn BlockDevice,
        spec: &WorkloadSpec,
        start_ns: u64,
        record: bool,
        origin: &Origin,
    ) -> Run {
        let logical_pages = dev.logical_pages();
        let expected: Vec<u64> = if spec.name != "txmix" && spec.issues_reads() {
            origin
                .contents
                .clone()
                .unwrap_or_else(|| vec![u64::MAX; logical_pages as usize])
        } else {
            Vec::new()
        };
        // The host starts once the device is ready (a fresh design may still be writing its
        // format).
        let start_ns = start_ns.max(dev.flash().idle_ns());
        let stats = RunStats {
            requests: 0,
            host_pages_written: 0,
            host_pages_read: 0,
            transactions_committed: 0,
            errors: BTreeMap::new(),
            read_mismatches: 0,
            latency_ns: Histogram::new_with_bounds(1, 3_600_000_000_000, 3)
                .expect("valid histogram bounds"),
            start_ns,
            end_ns: start_ns,
            flash: FlashStats::default(),
            wall_s: 0.0,
            expected_contents_bytes: flash::vec_bytes(&expected),
        };
        Run {
            record,
            queue_depth: spec.queue_depth as usize,
            outstanding: BinaryHeap::new(),
            inflight_static: Vec::new(),
            deferred: HashMap::new(),
            expected,
            stats,
            log: HostLog {
                design: dev.design().to_string(),
                logical_pages,
                ..HostLog::default()
            },
            positions: Vec::new(),
            start_ns,
            last_arrival: start_ns,
            end_ns: start_ns,
            issued: 0,
            measured_from: None,
            wall: std::time::Instant::now(),
        }
    }

    /// When the next request arrives: now while the queue has room, else when the earliest
    /// outstanding request completes (arrivals never go back in time).
    fn next_arrival(&mut self, dev: &mut Device) -> Result<u64, WorkloadError> {
        if self.outstanding.len() + self.deferred.len() < self.queue_depth {
            return Ok(self.last_arrival);
        }
        if !self.deferred.is_empty() {
            // The host waits for its earliest known completion; the device's timers (a
            // group's deadline) may fire before it.
            let horizon = self.outstanding.peek().map_or(u64::MAX, |r| r.0);
            self.drain_deferred(dev, horizon)?;
        }
        let earliest = self.outstanding.pop().map_or(self.last_arrival, |r| r.0);
        Ok(self.last_arrival.max(earliest))
    }

    /// The fill is done: the measured phase's counters, clocks and queue start afresh, once
    /// the device is idle.
    fn start_measured(&mut self, dev: &dyn BlockDevice, arrival: u64) {
        let t = dev.flash().idle_ns().max(arrival);
        self.measured_from = Some((dev.flash().stats().clone(), t));
        self.wall = std::time::Instant::now();
        self.outstanding.clear();
        self.last_arrival = t;
        self.stats.start_ns = t;
    }

    /// Issues one request, then settles what the device answered: the queue, the held
    /// requests, the measured figures, the read checks and (when recording) the design's
    /// invariants and the log.
    fn issue_and_settle(
        &mut self,
        dev: &mut Device,
        generator: &mut Generator,
        op: HostOp,
        phase: Phase,
        arrival: u64,
    ) -> Result<(), WorkloadError> {
        let arrival = arrival.max(self.last_arrival);
        self.last_arrival = arrival;
        self.issued += 1;
        let first_write = dev.next_write();
        let written = op.written_pages();
        let logged_before = dev.device().flash().logged_ops();
        let outcome = dev.issue(&op, arrival).map(|i| (i.ack_ns, i.durable_ns));
        let at = LogPositions {
            arrival: logged_before,
            answered: dev.device().flash().logged_ops(),
        };
        let held = matches!(outcome, Ok((ftl::ACK_DEFERRED, _)));
        let (ack, durable, error) = match outcome {
            Ok(_) if held => (None, None, None),
            Ok((ack, durable)) => (Some(ack), durable, None),
            // Recording runs check the design's invariants after every request (the host
            // layer's check mode): a broken one names the request that broke it.
            Err(HostError::Invariant { reason, .. }) => {
                return Err(WorkloadError::Invariant {
                    index: self.issued - 1,
                    op: op.kind(),
                    reason,
                })
            }
            Err(e) if e.is_fatal() => {
                return Err(WorkloadError::Request {
                    index: self.issued - 1,
                    op: op.kind(),
                    source: e,
                })
            }
            Err(e) => {
                forget_refused_dynamic(generator, &op, &e);
                (None, None, Some(e.to_string()))
            }
        };
        if let Some(ack) = ack {
            self.outstanding.push(Reverse(ack));
            self.end_ns = self.end_ns.max(ack);
            if let HostOp::SWrite { uuid, .. } = &op {
                self.inflight_static.push((*uuid, durable.unwrap_or(ack)));
            }
        }
        if held {
            self.hold(dev.device(), &op, arrival, phase, written)?;
        } else if phase == Phase::Measured {
            account(&mut self.stats, &op, arrival, ack, &error, written);
        }
        if ack.is_some() {
            self.check_reads(&op, dev.last_reads(), first_write);
        }
        if self.record {
            self.positions.push(at);
            self.log.records.push(HostRecord {
                index: self.log.records.len() as u64,
                op,
                arrival_ns: arrival,
                ack_ns: ack,
                durable_ns: durable,
                error,
                first_write,
            });
        }
        if !self.deferred.is_empty() {
            // Requests this one made the device close a group for (or expired timers).
            self.drain_deferred(dev, arrival)?;
        }
        Ok(())
    }

    /// An SWRITE the device answered with ACK_DEFERRED: it holds a queue slot until its
    /// completion arrives. Any other request answered so is the design's error.
    fn hold(
        &mut self,
        dev: &dyn BlockDevice,
        op: &HostOp,
        arrival: u64,
        phase: Phase,
        written: u64,
    ) -> Result<(), WorkloadError> {
        let HostOp::SWrite { uuid, .. } = op else {
            return Err(WorkloadError::DeferredAck {
                design: dev.design().to_string(),
                what: format!("answered ACK_DEFERRED to a {}", op.kind()),
            });
        };
        self.deferred.insert(
            *uuid,
            Deferred {
                op: op.clone(),
                arrival,
                measured: phase == Phase::Measured,
                written,
                record: self.log.records.len(),
            },
        );
        Ok(())
    }

    /// Plain workloads: every read returns the page's last write; txmix: no read returns
    /// another page's data or garbage.
    fn check_reads(&mut self, op: &HostOp, reads: &[PageOutcome], first_write: u64) {
        let mismatches = &mut self.stats.read_mismatches;
        if self.expected.is_empty() {
            check_foreign(op, reads, mismatches);
        } else {
            check_reads(op, reads, &mut self.expected, first_write, mismatches);
        }
    }

    /// Collects the completions the device has by `now` and settles their requests.
    fn drain_deferred(&mut self, dev: &mut Device, now: u64) -> Result<(), WorkloadError> {
        let completions = dev
            .take_completions(now)
            .map_err(WorkloadError::HeldTransactions)?;
        let answered = dev.device().flash().logged_ops();
        for (uuid, c) in completions {
            self.complete_deferred(uuid, c, answered)?;
        }
        Ok(())
    }

    fn complete_deferred(
        &mut self,
        uuid: TxUuid,
        c: ftl::TxCompletion,
        answered: usize,
    ) -> Result<(), WorkloadError> {
        let d = self
            .deferred
            .remove(&uuid)
            .ok_or(WorkloadError::UnheldCompletion(uuid))?;
        self.outstanding.push(Reverse(c.ack_ns));
        self.end_ns = self.end_ns.max(c.ack_ns);
        if let Some(durable) = c.durable_ns {
            self.inflight_static.push((uuid, durable));
        }
        if d.measured {
            account(
                &mut self.stats,
                &d.op,
                d.arrival,
                Some(c.ack_ns),
                &None,
                d.written,
            );
        }
        if self.record {
            let r = &mut self.log.records[d.record];
            r.ack_ns = Some(c.ack_ns);
            r.durable_ns = c.durable_ns;
            self.positions[d.record].answered = answered;
        }
        Ok(())
    }

    /// The final flush, the last held completions and checks, and the run's figures.
    fn finish(mut self, dev: &mut Device) -> Result<RunResult, WorkloadError> {
        let logged_before = dev.device().flash().logged_ops();
        let flush_ack = dev
            .flush(self.last_arrival)
            .map_err(WorkloadError::FinalFlush)?;
        let flushed = LogPositions {
            arrival: logged_before,
            answered: dev.device().flash().logged_ops(),
        };
        self.end_ns = self.end_ns.max(flush_ack);
        self.drain_deferred(dev, u64::MAX)?;
        let next_write = dev.next_write();
        let dev = dev.device();
        if let Some(u) = self.deferred.keys().next() {
            return Err(WorkloadError::NeverCompleted {
                design: dev.design().to_string(),
                uuid: *u,
            });
        }
        if self.record {
            self.positions.push(flushed);
            self.log.records.push(HostRecord {
                index: self.log.records.len() as u64,
                op: HostOp::Flush,
                arrival_ns: self.last_arrival,
                ack_ns: Some(flush_ack),
                durable_ns: None,
                error: None,
                first_write: next_write,
            });
        }
        self.log.next_write = next_write;
        let (before, _) = self
            .measured_from
            .unwrap_or_else(|| (FlashStats::default(), self.start_ns));
        let mut stats = self.stats;
        stats.flash = dev.flash().stats().since(&before);
        stats.end_ns = self.end_ns.max(stats.start_ns);
        stats.wall_s = self.wall.elapsed().as_secs_f64();
        Ok(RunResult {
            stats,
            log: self.record.then_some(self.log),
            positions: self.record.then_some(self.positions),
            end_ns: self.end_ns,
        })
    }
}

/// A DWRITE the device refused because its transaction is gone (or conflicts) ends that
/// transaction on the host's side too.
fn forget_refused_dynamic(generator: &mut Generator, op: &HostOp, e: &HostError) {
    if let (
        Some(
            FtlError::DynamicTxRunning(_)
            | FtlError::UnknownTx(_)
            | FtlError::Conflict { .. }
            | FtlError::TxRoomTaken { .. },
        ),
        HostOp::DWrite { uuid, .. },
    ) = (e.device_error(), op)
    {
        generator.forget_dynamic(*uuid);
    }
}

/// A request the device answered with `ACK_DEFERRED`.
struct Deferred {
    op: HostOp,
    arrival: u64,
    measured: bool,
    /// Pages it writes.
    written: u64,
    /// Its index in the host log (when recording).
    record: usize,
}

/// One key per kind of error: its text up to the first colon, numbers (tx ids, pages) masked as
/// `N`, then cut to 48 characters (cut after masking, so numbers of different lengths do not
/// split one kind into several keys).
fn error_kind(e: &str) -> String {
    let mut key = String::new();
    for ch in e.split(':').next().unwrap_or(e).chars() {
        if !ch.is_ascii_digit() {
            key.push(ch);
        } else if !key.ends_with('N') {
            key.push('N');
        }
    }
    key.chars().take(48).collect()
}

fn account(
    stats: &mut RunStats,
    op: &HostOp,
    arrival: u64,
    ack: Option<u64>,
    error: &Option<String>,
    written_pages: u64,
) {
    stats.requests += 1;
    if let Some(e) = error {
        *stats
            .errors
            .entry(format!("{}: {}", op.kind(), error_kind(e)))
            .or_insert(0) += 1;
        return;
    }
    let Some(ack) = ack else { return };
    let _ = stats.latency_ns.record((ack - arrival).max(1));
    stats.host_pages_written += written_pages;
    match op {
        HostOp::Read { count, .. } | HostOp::SRead { count, .. } => {
            stats.host_pages_read += *count as u64
        }
        HostOp::SWrite { .. } => stats.transactions_committed += 1,
        HostOp::DWrite {
            flag: ftl::DwriteFlag::Rear | ftl::DwriteFlag::Single,
            ..
        } => stats.transactions_committed += 1,
        _ => {}
    }
}

/// Plain workloads: every read returns exactly the last write to the page.
fn check_reads(
    op: &HostOp,
    reads: &[PageOutcome],
    expected: &mut [u64],
    first_write: u64,
    mismatches: &mut u64,
) {
    match op {
        HostOp::Write { start, count } => {
            for i in 0..*count {
                expected[(start.0 + i) as usize] = first_write + i as u64;
            }
        }
        HostOp::Trim { start, count } => {
            for i in 0..*count {
                expected[(start.0 + i) as usize] = u64::MAX;
            }
        }
        HostOp::Read { start, .. } | HostOp::SRead { start, .. } => {
            for (i, r) in reads.iter().enumerate() {
                let lpn = start.0 + i as u32;
                let want = expected[lpn as usize];
                let ok = match r {
                    PageOutcome::Data(c) => c.tag() == Some(ContentTag { lpn, write: want }),
                    PageOutcome::Unwritten => want == u64::MAX,
                    PageOutcome::Uncorrectable => false,
                };
                if !ok {
                    *mismatches += 1;
                }
            }
        }
        _ => {}
    }
}

/// Transactional workloads: reads never return another page's data or garbage.
fn check_foreign(op: &HostOp, reads: &[PageOutcome], mismatches: &mut u64) {
    if let HostOp::Read { start, .. } | HostOp::SRead { start, .. } = op {
        for (i, r) in reads.iter().enumerate() {
            let lpn = start.0 + i as u32;
            let ok = match r {
                PageOutcome::Data(c) => c.tag().is_some_and(|t| t.lpn == lpn),
                PageOutcome::Unwritten => true,
                PageOutcome::Uncorrectable => false,
            };
            if !ok {
                *mismatches += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flash::{Content, Flash, Lpn};
    use ftl::Completion;
    use std::sync::Mutex;

    /// Errors of one kind share a key whatever the lengths of the numbers in them.
    #[test]
    fn an_error_kind_does_not_depend_on_its_numbers() {
        let short = error_kind("lpn 7 is being written by running tx 3; retry after it commits");
        let long = error_kind("lpn 70123 is being written by running tx 31415; retry after it");
        assert_eq!(short, long);
        assert_eq!(short, "lpn N is being written by running tx N; retry af");
        assert_eq!(
            error_kind("tx 12 already committed: it can no longer be aborted"),
            "tx N already committed"
        );
    }

    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    enum Event {
        /// A hint for the request starting at this page, served after this many others.
        Hint(u32, usize),
        Write(u32),
    }

    /// A device that only records the hints and writes it is given (every write acknowledged
    /// on arrival).
    struct Recorder {
        flash: Flash,
        events: Mutex<Vec<Event>>,
    }

    impl BlockDevice for Recorder {
        fn design(&self) -> &'static str {
            "recorder"
        }
        fn promise(&self) -> ftl::Promise {
            ftl::Promise::FlushOnly
        }
        fn logical_pages(&self) -> u32 {
            2048
        }
        fn write(&mut self, start: Lpn, _: &[Content], at: u64) -> Result<Completion, FtlError> {
            self.events.lock().unwrap().push(Event::Write(start.0));
            Ok(Completion {
                arrival_ns: at,
                ack_ns: at + 1_000,
            })
        }
        fn read(
            &mut self,
            _: Lpn,
            _: u32,
            at: u64,
            _: &mut Vec<PageOutcome>,
        ) -> Result<Completion, FtlError> {
            unreachable!("randwrite does not read (at {at})")
        }
        fn flush(&mut self, at: u64) -> Result<Completion, FtlError> {
            Ok(Completion {
                arrival_ns: at,
                ack_ns: at,
            })
        }
        fn trim(&mut self, _: Lpn, _: u32, at: u64) -> Result<Completion, FtlError> {
            self.flush(at)
        }
        fn flash(&self) -> &Flash {
            &self.flash
        }
        fn flash_mut(&mut self) -> &mut Flash {
            &mut self.flash
        }
        fn into_flash(self: Box<Self>) -> Flash {
            self.flash
        }
        fn prefetch_mapping(&self, start: Lpn, ahead: usize) {
            self.events
                .lock()
                .unwrap()
                .push(Event::Hint(start.0, ahead));
        }
    }

    /// Warm-up requests reach the device but not the measured figures.
    #[test]
    fn warmup_requests_are_issued_and_not_counted() {
        let config = flash::DeviceConfig::preset("small").expect("small preset");
        let mut dev = Recorder {
            flash: Flash::in_memory(config, 16, true),
            events: Mutex::new(Vec::new()),
        };
        let mut spec = WorkloadSpec::named("randwrite").expect("randwrite");
        spec.requests = 100;
        spec.warmup_requests = 40;
        spec.fill = 0.0;
        let result = run(&mut dev, &spec, 7, 0, false, &mut |_, _| {}).expect("run");
        let events = dev.events.into_inner().unwrap();
        let writes = events
            .iter()
            .filter(|e| matches!(e, Event::Write(_)))
            .count();
        assert_eq!(writes, 140);
        assert_eq!(result.stats.requests, 100);
        assert_eq!(result.stats.host_pages_written, 100);
    }

    /// A workload that ignores the view is drawn `LOOK_AHEAD` requests ahead: the design hears
    /// of each request's first page at every distance from `LOOK_AHEAD` down to 0, one step per
    /// request served, and the requests are the sequence drawn without looking ahead.
    #[test]
    fn the_next_requests_are_hinted_step_by_step() {
        let config = flash::DeviceConfig::preset("small").expect("small preset");
        let mut dev = Recorder {
            flash: Flash::in_memory(config, 16, true),
            events: Mutex::new(Vec::new()),
        };
        let mut spec = WorkloadSpec::named("randwrite").expect("randwrite");
        spec.requests = 200;
        spec.fill = 0.0;
        run(&mut dev, &spec, 7, 0, false, &mut |_, _| {}).expect("run");
        let events = dev.events.into_inner().unwrap();
        let writes: Vec<u32> = events
            .iter()
            .filter_map(|e| match e {
                Event::Write(l) => Some(*l),
                _ => None,
            })
            .collect();
        // The same requests as the generator draws one at a time.
        let mut generator = Generator::new(&spec, 2048, None).expect("generator");
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let view = View {
            now_ns: 0,
            inflight_static: &[],
        };
        let drawn: Vec<u32> = std::iter::from_fn(|| generator.next(&mut rng, &view))
            .filter_map(|(op, _)| op.mapping_lookup().map(|l| l.0))
            .collect();
        assert_eq!(writes, drawn);
        assert_eq!(writes.len(), 200);
        // While request k waits (after request k - 1 is written, before it is), each of the
        // LOOK_AHEAD requests after it is hinted at its distance, and request k itself at 0 by
        // the host layer.
        let served: Vec<usize> = (0..events.len())
            .filter(|&i| matches!(events[i], Event::Write(_)))
            .collect();
        for k in 1..writes.len() {
            let between = &events[served[k - 1] + 1..served[k]];
            let last = (k + LOOK_AHEAD).min(writes.len() - 1);
            for (j, &lpn) in writes.iter().enumerate().take(last + 1).skip(k) {
                assert!(
                    between.contains(&Event::Hint(lpn, j - k)),
                    "request {j} was not hinted at distance {} while request {k} waited: \
                     {between:?}",
                    j - k
                );
            }
        }
    }
}
