//! The checker proven both ways on every promise with tiny test-only designs: a correct
//! log-structured FTL that keeps durable-writes, ordered and atomic-transactions, and three
//! deliberately broken builds of it that must be caught under the promise they break while still
//! passing the weaker one they keep.
//!
//! `tinylog` writes every request (a plain write, a static transaction, or a whole dynamic
//! transaction at its REAR) as one run of pages round-robin over the chips' logs; each page's OOB
//! names its LPN, a global page sequence number, its request number and the request's page count.
//! The map lives only in RAM; recovery scans every chip's log and applies, in sequence order, the
//! pages of the requests found complete. Correct build: pages are programmed strictly one after
//! another (each `not_before` the previous end), so every crash image holds a prefix of pages.
//! Broken builds (`--param bug=...`):
//! - `forget_chip`: recovery skips chip 1 (acknowledged writes lost: breaks durable-writes);
//! - `no_commit`: recovery also applies incomplete requests (breaks request/transaction atomicity,
//!   keeps durable-writes because a request is acknowledged only when all its pages are on flash);
//! - `parallel`: pages are programmed on all chips in parallel (requests stay atomic thanks to the
//!   completeness rule, and pages go to the chip their LPN hashes to, so a later request can survive
//!   without an earlier one: breaks ordered and
//!   the Tx(A)/Tx(B) rule of atomic-transactions, keeps durable-writes).
//!
//! With `--param commit=record` a request is committed by a commit record instead of its page
//! count: its data pages go round-robin over every chip but the last, and a record naming the
//! request goes on the last chip once the data is on flash; recovery applies the pages of the
//! requests whose record it finds. `commit=record_first` is the negative control of the
//! image-prefix cut (`crashtest::prefix`): it *issues* the record before the data, scheduled to
//! start well after the data will have completed. Cut at simulated instants it is correct (a
//! record on flash means its data is); a killed process, whose image holds its writes in issue
//! order, can leave the record without its data.

use crashtest::{run_campaign, CampaignConfig, CampaignReport};
use flash::{Content, DeviceConfig, Flash, Lpn, OpCause, PageState, Ppn, ReadStatus};
use ftl::{
    BlockDevice, Completion, DesignOptions, DesignSpec, DwriteFlag, FtlError, PageOutcome, Promise,
    RecoveryReport, SwriteMode, Transactional, TxCapabilities, TxCompletion, TxUuid,
};
use workload::WorkloadSpec;

const LOGICAL: u32 = 256;
const OOB: usize = 14;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Bug {
    None,
    ForgetChip,
    NoCommit,
    Parallel,
    /// Recovery panics on some images (the checker must report them, not stop).
    PanicRecovery,
}

/// How a request is committed (`--param commit=...`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Commit {
    /// Complete when all its pages are found (each names the request's page count).
    Count,
    /// By a commit record, issued after the data.
    Record,
    /// By a commit record issued before the data (the prefix cut's negative control).
    RecordFirst,
}

/// The LPN field of a commit record's OOB.
const COMMIT_LPN: u32 = u32::MAX;

/// How long after a request's data starts its record is scheduled by `commit=record_first`:
/// far more than any request's pages take.
const RECORD_DELAY_NS: u64 = 100_000_000;

impl Commit {
    fn of(o: &DesignOptions) -> Result<Commit, FtlError> {
        Ok(match o.params.get("commit").map(String::as_str) {
            None | Some("count") => Commit::Count,
            Some("record") => Commit::Record,
            Some("record_first") => Commit::RecordFirst,
            Some(x) => return Err(FtlError::InvalidOption(format!("commit={x}"))),
        })
    }
}

impl Bug {
    fn of(o: &DesignOptions) -> Result<Bug, FtlError> {
        o.check_known("tinylog", &["bug", "commit"])?;
        Ok(match o.params.get("bug").map(String::as_str) {
            None | Some("none") => Bug::None,
            Some("forget_chip") => Bug::ForgetChip,
            Some("no_commit") => Bug::NoCommit,
            Some("parallel") => Bug::Parallel,
            Some("panic_recovery") => Bug::PanicRecovery,
            Some(x) => return Err(FtlError::InvalidOption(format!("bug={x}"))),
        })
    }
}

struct TinyLog {
    flash: Flash,
    bug: Bug,
    commit: Commit,
    map: Vec<Option<Ppn>>,
    /// Per chip: next page of its log.
    cursor: Vec<u32>,
    next_chip: u32,
    page_seq: u32,
    req_seq: u32,
    /// End of the latest program (the serial chain, and what a flush waits for).
    last_end: u64,
    dynamic: Option<(TxUuid, Vec<(Lpn, Content)>)>,
    committed: Vec<TxUuid>,
}

fn oob(lpn: Lpn, seq: u32, req: u32, count: u16) -> [u8; OOB] {
    let mut b = [0u8; OOB];
    b[0..4].copy_from_slice(&lpn.0.to_le_bytes());
    b[4..8].copy_from_slice(&seq.to_le_bytes());
    b[8..12].copy_from_slice(&req.to_le_bytes());
    b[12..14].copy_from_slice(&count.to_le_bytes());
    b
}

fn parse(b: &[u8; OOB]) -> (Lpn, u32, u32, u16) {
    let u = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
    (Lpn(u(0)), u(4), u(8), u16::from_le_bytes([b[12], b[13]]))
}

impl TinyLog {
    fn new(flash: Flash, (bug, commit): (Bug, Commit)) -> TinyLog {
        let chips = flash.geometry().chips() as usize;
        TinyLog {
            flash,
            bug,
            commit,
            map: vec![None; LOGICAL as usize],
            cursor: vec![0; chips],
            next_chip: 0,
            page_seq: 0,
            req_seq: 0,
            last_end: 0,
            dynamic: None,
            committed: Vec::new(),
        }
    }

    /// Programs one request; returns when its last page is on flash.
    fn program_request(&mut self, pages: &[(Lpn, Content)], arrival: u64) -> Result<u64, FtlError> {
        for (lpn, _) in pages {
            ftl::check_range(*lpn, 1, LOGICAL)?;
        }
        let g = self.flash.geometry().clone();
        let req = self.req_seq;
        self.req_seq += 1;
        let mut end = arrival;
        // Data chips: every chip, or with commit records every chip but the last (theirs).
        let data_chips = g.chips() - (self.commit != Commit::Count) as u32;
        let count = match self.commit {
            Commit::Count => pages.len() as u16,
            Commit::Record | Commit::RecordFirst => 0,
        };
        if self.commit == Commit::RecordFirst {
            let at = arrival.max(self.last_end) + RECORD_DELAY_NS;
            end = self.program_record(req, pages.len(), at)?;
        }
        for (lpn, content) in pages {
            // The broken parallel build places a page on the chip its LPN hashes to, so a later
            // request can land on an idle chip and finish before an earlier one.
            let chip = match self.bug {
                Bug::Parallel => lpn.0 % data_chips,
                _ => self.next_chip % data_chips,
            };
            self.next_chip = (chip + 1) % data_chips;
            if self.cursor[chip as usize] >= g.pages_per_chip() {
                return Err(FtlError::NoSpace);
            }
            let ppn = Ppn(chip * g.pages_per_chip() + self.cursor[chip as usize]);
            self.cursor[chip as usize] += 1;
            let not_before = match self.bug {
                Bug::Parallel => arrival,
                _ => arrival.max(self.last_end),
            };
            let o = oob(*lpn, self.page_seq, req, count);
            self.page_seq += 1;
            let span = self
                .flash
                .program(ppn, content, &o, not_before, OpCause::HostData)?;
            self.last_end = self.last_end.max(span.end_ns);
            end = end.max(span.end_ns);
            self.map[lpn.0 as usize] = Some(ppn);
        }
        if self.commit == Commit::Record {
            end = end.max(self.program_record(req, pages.len(), self.last_end)?);
        }
        Ok(end)
    }

    /// Programs the commit record of request `req` of `pages` pages on the last chip, not
    /// before `not_before`; returns when it is on flash.
    fn program_record(&mut self, req: u32, pages: usize, not_before: u64) -> Result<u64, FtlError> {
        let g = self.flash.geometry().clone();
        let chip = g.chips() - 1;
        if self.cursor[chip as usize] >= g.pages_per_chip() {
            return Err(FtlError::NoSpace);
        }
        let ppn = Ppn(chip * g.pages_per_chip() + self.cursor[chip as usize]);
        self.cursor[chip as usize] += 1;
        let o = oob(Lpn(COMMIT_LPN), self.page_seq, req, pages as u16);
        self.page_seq += 1;
        let record = Content::Tag(flash::ContentTag {
            lpn: COMMIT_LPN,
            write: req as u64,
        });
        let span = self
            .flash
            .program(ppn, &record, &o, not_before, OpCause::TxMeta)?;
        Ok(span.end_ns)
    }
}

impl BlockDevice for TinyLog {
    fn design(&self) -> &'static str {
        "tinylog"
    }
    fn promise(&self) -> Promise {
        Promise::AtomicTransactions
    }
    fn logical_pages(&self) -> u32 {
        LOGICAL
    }
    fn write(
        &mut self,
        start: Lpn,
        pages: &[Content],
        arrival_ns: u64,
    ) -> Result<Completion, FtlError> {
        ftl::check_range(start, pages.len() as u64, LOGICAL)?;
        let run: Vec<(Lpn, Content)> = pages
            .iter()
            .enumerate()
            .map(|(i, c)| (Lpn(start.0 + i as u32), c.clone()))
            .collect();
        let ack_ns = self.program_request(&run, arrival_ns)?;
        Ok(Completion { arrival_ns, ack_ns })
    }
    fn read(
        &mut self,
        start: Lpn,
        count: u32,
        arrival_ns: u64,
        out: &mut Vec<PageOutcome>,
    ) -> Result<Completion, FtlError> {
        ftl::check_range(start, count as u64, LOGICAL)?;
        out.clear();
        let mut ack_ns = arrival_ns;
        let mut o = [0u8; OOB];
        for i in 0..count {
            out.push(match self.map[(start.0 + i) as usize] {
                None => PageOutcome::Unwritten,
                Some(p) => {
                    let (status, span) =
                        self.flash.read(p, &mut o, arrival_ns, OpCause::HostData)?;
                    ack_ns = ack_ns.max(span.end_ns);
                    match status {
                        ReadStatus::Data(c) => PageOutcome::Data(c),
                        ReadStatus::Erased => PageOutcome::Unwritten,
                        ReadStatus::Uncorrectable => PageOutcome::Uncorrectable,
                    }
                }
            });
        }
        Ok(Completion { arrival_ns, ack_ns })
    }
    fn flush(&mut self, arrival_ns: u64) -> Result<Completion, FtlError> {
        Ok(Completion {
            arrival_ns,
            ack_ns: arrival_ns.max(self.last_end),
        })
    }
    fn trim(&mut self, _: Lpn, _: u32, _: u64) -> Result<Completion, FtlError> {
        Err(FtlError::Unsupported("TRIM"))
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
    fn transactional(&mut self) -> Option<&mut dyn Transactional> {
        Some(self)
    }
}

impl Transactional for TinyLog {
    fn capabilities(&self) -> TxCapabilities {
        TxCapabilities {
            static_tx: true,
            async_swrite: false,
            dynamic_tx: true,
            concurrent_static: true,
            concurrent_dynamic: false,
            sread: false,
            abort: true,
            max_tx_pages: 64,
        }
    }
    fn swrite(
        &mut self,
        uuid: TxUuid,
        pages: &[(Lpn, Content)],
        mode: SwriteMode,
        arrival_ns: u64,
    ) -> Result<TxCompletion, FtlError> {
        if mode == SwriteMode::Async {
            return Err(FtlError::Unsupported("async SWRITE"));
        }
        let end = self.program_request(pages, arrival_ns)?;
        self.committed.push(uuid);
        Ok(TxCompletion {
            arrival_ns,
            ack_ns: end,
            durable_ns: Some(end),
        })
    }
    fn dwrite(
        &mut self,
        uuid: TxUuid,
        lpn: Lpn,
        content: &Content,
        flag: DwriteFlag,
        arrival_ns: u64,
    ) -> Result<TxCompletion, FtlError> {
        ftl::check_range(lpn, 1, LOGICAL)?;
        match (&mut self.dynamic, flag) {
            (None, DwriteFlag::Head | DwriteFlag::Single) => {
                self.dynamic = Some((uuid, Vec::new()))
            }
            (Some((u, _)), _) if *u != uuid => return Err(FtlError::DynamicTxRunning(*u)),
            (Some(_), DwriteFlag::Body | DwriteFlag::Rear) => {}
            (Some((u, _)), _) => return Err(FtlError::DynamicTxRunning(*u)),
            (None, _) => return Err(FtlError::NoDynamicTx),
        }
        let (_, pages) = self.dynamic.as_mut().expect("opened above");
        pages.push((lpn, content.clone()));
        if matches!(flag, DwriteFlag::Head | DwriteFlag::Body) {
            return Ok(TxCompletion {
                arrival_ns,
                ack_ns: arrival_ns,
                durable_ns: None,
            });
        }
        let (_, pages) = self.dynamic.take().expect("opened above");
        let end = self.program_request(&pages, arrival_ns)?;
        self.committed.push(uuid);
        Ok(TxCompletion {
            arrival_ns,
            ack_ns: end,
            durable_ns: Some(end),
        })
    }
    fn abort(&mut self, uuid: TxUuid, arrival_ns: u64) -> Result<Completion, FtlError> {
        match &self.dynamic {
            Some((u, _)) if *u == uuid || uuid == TxUuid(0) => {
                self.dynamic = None;
                Ok(Completion {
                    arrival_ns,
                    ack_ns: arrival_ns,
                })
            }
            _ if self.committed.contains(&uuid) => Err(FtlError::AlreadyCommitted(uuid)),
            _ => Err(FtlError::UnknownTx(uuid)),
        }
    }
    fn sread(
        &mut self,
        _: Lpn,
        _: u32,
        _: u64,
        _: &mut Vec<PageOutcome>,
    ) -> Result<Completion, FtlError> {
        Err(FtlError::Unsupported("SREAD"))
    }
}

fn tiny_format(flash: Flash, o: &DesignOptions) -> Result<Box<dyn BlockDevice>, FtlError> {
    Ok(Box::new(TinyLog::new(flash, (Bug::of(o)?, Commit::of(o)?))))
}

fn tiny_recover(
    flash: Flash,
    o: &DesignOptions,
) -> Result<(Box<dyn BlockDevice>, RecoveryReport), FtlError> {
    let (bug, commit) = (Bug::of(o)?, Commit::of(o)?);
    let before = flash.stats().clone();
    let start = flash.idle_ns();
    let g = flash.geometry().clone();
    let mut dev = TinyLog::new(flash, (bug, commit));
    // (seq, req, count, lpn, ppn) of every page found.
    let mut found = Vec::new();
    let mut b = [0u8; OOB];
    for chip in 0..g.chips() {
        if bug == Bug::ForgetChip && chip == 1 {
            continue;
        }
        for k in 0..g.pages_per_chip() {
            let ppn = Ppn(chip * g.pages_per_chip() + k);
            let (state, _) = dev.flash.read_oob(ppn, &mut b, start, OpCause::Recovery)?;
            dev.cursor[chip as usize] = k + (state != PageState::Erased) as u32;
            if state != PageState::Programmed {
                break;
            }
            let (lpn, seq, req, count) = parse(&b);
            found.push((seq, req, count, lpn, ppn));
        }
    }
    found.sort_unstable();
    if bug == Bug::PanicRecovery && found.len() % 5 == 2 {
        panic!("tinylog: injected recovery panic on {} pages", found.len());
    }
    let mut pages_of_req: rustc_hash::FxHashMap<u32, u16> = Default::default();
    let mut recorded: rustc_hash::FxHashSet<u32> = Default::default();
    for f in &found {
        match f.3 .0 {
            COMMIT_LPN => recorded.insert(f.1),
            _ => {
                *pages_of_req.entry(f.1).or_default() += 1;
                true
            }
        };
    }
    let committed = |req: u32, count: u16| match commit {
        Commit::Count => pages_of_req[&req] == count,
        Commit::Record | Commit::RecordFirst => recorded.contains(&req),
    };
    for &(seq, req, count, lpn, ppn) in &found {
        if lpn.0 != COMMIT_LPN && (bug == Bug::NoCommit || committed(req, count)) {
            dev.map[lpn.0 as usize] = Some(ppn);
        }
        dev.page_seq = dev.page_seq.max(seq + 1);
        dev.req_seq = dev.req_seq.max(req + 1);
    }
    dev.last_end = dev.flash.idle_ns();
    let report = RecoveryReport::measure(&dev.flash, &before, start);
    Ok((Box::new(dev), report))
}

fn tiny_spec() -> DesignSpec {
    DesignSpec {
        name: "tinylog",
        summary: "test-only log-structured FTL with deliberately injectable bugs",
        promise: Promise::AtomicTransactions,
        oob_record_bytes: |_| OOB as u32,
        format_version: 1,
        format: tiny_format,
        recover: tiny_recover,
        default_workload: "txmix",
        soak_params: &[],
        // Its capacity ignores over-provisioning: a soak that turns the device's down changes
        // nothing here.
        over_provisioning: ftl::OverProvisioningKnob::Device,
    }
}

fn campaign(bug: &str, workload: &str, promise: Promise, seed: u64) -> CampaignReport {
    let cfg = config(
        DesignOptions::default().with("bug", bug),
        workload,
        promise,
        seed,
    );
    run_campaign(&cfg, &|_, _| {}).unwrap()
}

/// The campaign of `tinylog` with `options`, 600 torn points.
fn config(options: DesignOptions, workload: &str, promise: Promise, seed: u64) -> CampaignConfig {
    let bug = options.params.get("bug").cloned().unwrap_or_default();
    let mut w = WorkloadSpec::named(workload).unwrap();
    w.requests = 500;
    // Chips and channels serve their operations in issue order, so parallel programs reorder
    // only requests on disjoint channels: that build gets single-page plain writes.
    w.request_pages = if bug == "parallel" && workload != "txmix" {
        1
    } else {
        6
    };
    w.queue_depth = 4;
    if workload == "randwrite-flush" {
        w.flush_every = 16;
    }
    CampaignConfig {
        design: tiny_spec(),
        options,
        device: DeviceConfig::preset("small").unwrap(),
        workload: w,
        seed,
        crash_points: 600,
        torn: true,
        exhaustive: false,
        promise,
        threads: 2,
        tag_only: true,
    }
}

/// [`config`]'s campaign cut as a killed process leaves its image (`--cut-model prefix`).
fn killed(options: DesignOptions, workload: &str, promise: Promise, seed: u64) -> CampaignReport {
    let cfg = config(options, workload, promise, seed);
    crashtest::prefix::run_campaign(&cfg, &|_, _| {}).unwrap()
}

fn assert_clean(r: &CampaignReport) {
    assert!(r.crash_points >= 500, "{} crash points", r.crash_points);
    assert_eq!(r.recovered, r.crash_points);
    assert!(
        r.violations.is_empty(),
        "{} under {}: {:#?}",
        r.ftl,
        r.promise,
        &r.violations[..r.violations.len().min(3)]
    );
}

fn assert_caught(r: &CampaignReport, rule: &str) {
    assert!(
        !r.violations.is_empty(),
        "a broken build passed {} — the checker proved nothing",
        r.promise
    );
    assert!(
        r.violations.iter().any(|v| v.what.contains(rule)),
        "expected a violation mentioning '{rule}', got {:#?}",
        &r.violations[..r.violations.len().min(3)]
    );
    assert!(r.violations[0].replay.contains("--param bug="));
}

#[test]
fn the_correct_build_keeps_every_promise() {
    for (workload, promise) in [
        ("txmix", Promise::AtomicTransactions),
        ("randwrite-flush", Promise::Ordered),
        ("randwrite-flush", Promise::DurableWrites),
        ("randwrite-flush", Promise::FlushOnly),
        ("txmix", Promise::DurableWrites),
    ] {
        assert_clean(&campaign("none", workload, promise, 1));
    }
}

#[test]
fn forgetting_a_chip_is_caught_under_durable_writes_and_flush_only() {
    assert_caught(
        &campaign("forget_chip", "randwrite-flush", Promise::DurableWrites, 2),
        "must have survived",
    );
    assert_caught(
        &campaign("forget_chip", "randwrite-flush", Promise::FlushOnly, 2),
        "must have survived",
    );
}

#[test]
fn applying_incomplete_requests_keeps_durable_writes_but_breaks_atomicity() {
    assert_clean(&campaign(
        "no_commit",
        "randwrite-flush",
        Promise::DurableWrites,
        3,
    ));
    assert_caught(
        &campaign("no_commit", "txmix", Promise::AtomicTransactions, 3),
        "all or nothing",
    );
    assert_caught(
        &campaign("no_commit", "randwrite-flush", Promise::Ordered, 3),
        "prefix",
    );
}

#[test]
fn parallel_programs_keep_durable_writes_but_break_ordering() {
    assert_clean(&campaign(
        "parallel",
        "randwrite-flush",
        Promise::DurableWrites,
        4,
    ));
    assert_clean(&campaign("parallel", "txmix", Promise::DurableWrites, 4));
    assert_caught(
        &campaign("parallel", "randwrite-flush", Promise::Ordered, 4),
        "prefix",
    );
    assert_caught(
        &campaign("parallel", "txmix", Promise::AtomicTransactions, 4),
        "without the earlier",
    );
}

/// A design that panics in recovery on some images: each such image is a violation with its
/// replay command, and the campaign still checks every other image (it is not aborted).
#[test]
fn a_design_that_panics_in_recovery_is_reported_not_fatal() {
    let r = campaign(
        "panic_recovery",
        "randwrite-flush",
        Promise::DurableWrites,
        3,
    );
    assert!(r.crash_points >= 500, "{} crash points", r.crash_points);
    let panics = r
        .violations
        .iter()
        .filter(|v| v.what.contains("the design panicked on this image"))
        .count();
    assert!(
        panics > 0,
        "no image made recovery panic: the test proves nothing"
    );
    assert!(
        r.recovered + panics == r.crash_points,
        "every other image was checked"
    );
    assert!(r.violations[0]
        .replay
        .contains("--param bug=panic_recovery"));
    // The panic is reported in the violation, with where it happened (not on the terminal).
    let first = r
        .violations
        .iter()
        .find(|v| v.what.contains("the design panicked on this image"))
        .expect("a panic");
    assert!(
        first.what.contains("tiny_designs.rs:"),
        "no location in {:?}",
        first.what
    );
}

/// A soak gives each seed one of the parameter sets a design names (chosen by the seed alone),
/// never overrides a parameter it was given, and leaves a fixed soak alone.
#[test]
fn a_soak_varies_the_parameter_sets_a_design_names() {
    use crashtest::soak::{soak_options, SoakConfig};
    let mut spec = tiny_spec();
    spec.soak_params = &[&[], &[("bug", "none")]];
    let mut cfg = SoakConfig::varying(vec![spec.clone()], (0..40).collect());
    let small = DeviceConfig::preset("small").expect("small preset");
    let bug = |cfg: &SoakConfig, seed: u64| {
        soak_options(cfg, &spec, &small, seed)
            .params
            .get("bug")
            .cloned()
    };
    let chosen: Vec<Option<String>> = (0..40).map(|s| bug(&cfg, s)).collect();
    assert!(chosen.iter().any(|c| c.is_none()), "{chosen:?}");
    assert!(
        chosen.iter().any(|c| c.as_deref() == Some("none")),
        "{chosen:?}"
    );
    assert_eq!(chosen, (0..40).map(|s| bug(&cfg, s)).collect::<Vec<_>>());
    cfg.options = DesignOptions::default().with("bug", "forget_chip");
    assert!((0..40).all(|s| bug(&cfg, s).as_deref() == Some("forget_chip")));
    cfg.options = DesignOptions::default();
    cfg.vary = false;
    assert!((0..40).all(|s| bug(&cfg, s).is_none()));
}

/// Killed processes (the image-prefix cut): the correct build keeps its promises, with a page
/// count or a commit record written after the data; so does the build whose pages complete out
/// of order, since its image file receives them in the order it issued them.
#[test]
fn the_correct_builds_keep_their_promises_when_killed() {
    let count = DesignOptions::default();
    let record = DesignOptions::default().with("commit", "record");
    for (options, workload, promise) in [
        (&count, "txmix", Promise::AtomicTransactions),
        (&count, "randwrite-flush", Promise::Ordered),
        (&record, "txmix", Promise::AtomicTransactions),
        (&record, "randwrite-flush", Promise::Ordered),
    ] {
        let r = killed(options.clone(), workload, promise, 5);
        assert_clean(&r);
        assert!(r.violations.is_empty());
    }
    assert_clean(&campaign_with(
        &record,
        "txmix",
        Promise::AtomicTransactions,
        5,
    ));
    let parallel = DesignOptions::default().with("bug", "parallel");
    assert_clean(&killed(parallel, "randwrite-flush", Promise::Ordered, 4));
}

fn campaign_with(
    options: &DesignOptions,
    workload: &str,
    promise: Promise,
    seed: u64,
) -> CampaignReport {
    run_campaign(
        &config(options.clone(), workload, promise, seed),
        &|_, _| {},
    )
    .unwrap()
}

/// The negative control of the image-prefix cut: a commit record issued before its data (and
/// scheduled after it) passes every simulated instant, and a killed process's image shows a
/// committed transaction with only part of its pages: caught, with a replay of that cut.
#[test]
fn a_commit_record_written_before_its_data_is_caught_only_when_killed() {
    let first = DesignOptions::default().with("commit", "record_first");
    for seed in [6, 7] {
        let instants = campaign_with(&first, "txmix", Promise::AtomicTransactions, seed);
        assert_clean(&instants);
        let r = killed(first.clone(), "txmix", Promise::AtomicTransactions, seed);
        eprintln!(
            "commit=record_first seed {seed}: instants {} points, {} violating; prefix cuts {} \
             points, {} violating",
            instants.crash_points, instants.violating_points, r.crash_points, r.violating_points
        );
        assert!(
            r.violations
                .iter()
                .any(|v| v.what.contains("all or nothing")),
            "a commit record before its data passed the prefix cut: {:#?}",
            &r.violations[..r.violations.len().min(3)]
        );
        let v = &r.violations[0];
        assert!(v.replay.contains("--cut-model prefix"), "{}", v.replay);
        // The replay rebuilds exactly that image and finds it again.
        let cfg = config(first.clone(), "txmix", Promise::AtomicTransactions, seed);
        let again = crashtest::replay_one(
            &cfg,
            crashtest::prefix::CutModel::Prefix,
            v.instant_ns,
            v.torn,
        )
        .unwrap();
        assert!(!again.is_empty(), "the replayed cut passed");
    }
}
