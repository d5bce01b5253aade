//! Power cuts under an NBD export (docs/nbd.md, "Power cuts under NBD requests"): the requests
//! NBD clients send, applied by [`FtlBackend`] (the export `mobius serve` runs, over the one
//! host layer) with the flash recording every operation; then, for seeded instants, the image a
//! power cut leaves, the design's recovery, and the crash checker's oracle on every 512-byte
//! sector.
//!
//! With atomic requests (`mobius serve --atomic-requests`) every write is a synchronous static
//! transaction: the export promises that each request is on the device whole or not at all,
//! and whole once acknowledged (atomic-transactions over the requests). Without, each design
//! promises what it promises for plain writes. Sub-page writes are the host's read-modify-write
//! inside one request, so the oracle also sees a write that lost or resurrected a neighbour's
//! sectors. The recorded run also checks that every READ returns, sector by sector, the last
//! write the export acknowledged or accepted before it.
//!
//! Before the requests run, the device is aged ([`NbdCrashConfig::fill`]) through the same
//! export, so garbage collection copies live pages while the requests run. With second lives
//! ([`NbdCrashConfig::second_lives`], `second_life.rs`) recovered exports serve requests again
//! and are cut again.
//!
//! With [`NbdCrashConfig::cut`] = [`CutModel::Prefix`] the cuts are those a killed `mobius serve`
//! leaves ([`crashtest::prefix`]): the first N image writes in issue order, the next one torn
//! with `torn`; a request counts as acknowledged when the export's call for it returned before
//! write N + 1 was issued (a server replies only after that), and the log the oracle judges is
//! on that clock. Instants (`--replay-instant`, `--first-cut`) then count image writes.
//!
//! With the flash's media model on (`--media`, [`media`]), a page can be lost to worn media: an
//! EIO for it is accepted, during the run and after recovery, exactly where the media lost the
//! version the sector must show; an older or a wrong version stays a violation.

pub mod media;
pub mod requests;
mod second_life;
pub mod sectors;
pub mod soak;

use crate::ftl_backend::{backend_error, FtlBackend};
use crate::NbdBackend;
use crashtest::oracle::Model;
use crashtest::points::{CrashPoint, ImageBuilder};
use crashtest::prefix::{CutModel, PrefixImages, PrefixRun};
use crashtest::second_life::FirstCut;
use flash::{DeviceConfig, Flash, Lpn};
use ftl::{DesignOptions, DesignSpec, FtlError, Promise};
use host::HostError;
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use requests::{Export, Request, Timed};
use sectors::{Outcome, Reading, Sector, SectorLog, ZeroIndex, SECTOR_BYTES};
use std::collections::{BTreeMap, BTreeSet};

/// One campaign.
#[derive(Clone)]
pub struct NbdCrashConfig {
    pub design: DesignSpec,
    pub device: DeviceConfig,
    pub options: DesignOptions,
    /// Each write one synchronous SWRITE (`mobius serve --atomic-requests`).
    pub atomic_requests: bool,
    /// Judge against this promise instead of the export's (negative controls). Atomic
    /// transactions on plain requests claims each request atomic: a host that believes it.
    pub promise: Option<Promise>,
    /// A negative control: atomic requests read with plain reads, not SREADs
    /// ([`FtlBackend::without_serializable_reads`]).
    pub plain_reads: bool,
    pub requests: u64,
    /// Share of the exported pages written (and flushed) before the requests run: once
    /// sequentially, then as many single pages again at random among them.
    pub fill: f64,
    pub crash_points: usize,
    pub torn: bool,
    pub seed: u64,
    /// Judge only a cut at this instant, torn or not (a violation's replay).
    pub only_at: Option<(u64, bool)>,
    /// Second lives (`crash/second_life.rs`): cuts of life one after which the recovered export
    /// serves a quarter of the requests more and is cut again (`crash_points / 4` cuts each).
    pub second_lives: usize,
    /// With [`Self::only_at`]: that cut is in the second life after this first cut.
    pub first_cut: Option<FirstCut>,
    /// How images are cut: at simulated instants, or as a killed server leaves its image.
    pub cut: CutModel,
}

impl NbdCrashConfig {
    /// What the export promises, or the promise the campaign was told to judge against.
    pub fn promise(&self) -> Promise {
        self.promise.unwrap_or(if self.atomic_requests {
            Promise::AtomicTransactions
        } else {
            self.design.promise
        })
    }

    /// The log treats every write as one transaction: atomic requests, or a host told to
    /// believe plain requests atomic.
    fn logs_requests_atomic(&self) -> bool {
        self.atomic_requests || self.promise == Some(Promise::AtomicTransactions)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum NbdCrashError {
    #[error(transparent)]
    Design(#[from] FtlError),
    #[error(transparent)]
    Host(#[from] host::HostError),
    #[error("fill must lie in 0..=1, got {0}")]
    InvalidFill(f64),
    /// A request the export should have applied was refused, or one it must refuse was not.
    #[error("request {index} ({request:?}): {what}")]
    Request {
        index: usize,
        request: Request,
        what: String,
    },
    /// The media ended the recorded run: the flash wore out, or lost metadata the design cannot
    /// do without ([`crashtest::media::host_end_of_life`]).
    #[error("the media ended the recorded run: {0}")]
    EndOfLife(String),
}

/// What the campaign found.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct NbdCrashReport {
    pub promise: String,
    pub requests: usize,
    /// Writes refused as longer than the export takes (as they must be).
    pub refused_oversize: usize,
    /// Pages the host read to write back part of them.
    pub edge_reads: u64,
    pub crash_points: usize,
    pub points_by_kind: BTreeMap<String, usize>,
    /// Crash points whose image broke the promise.
    pub violations: usize,
    /// READs during the run that returned something else than the last write before them.
    pub read_mismatches: usize,
    pub first_read_mismatch: Option<String>,
    pub first_violation: Option<String>,
    /// Instant of the first violation, and whether it was torn (`--replay-instant`, `--torn`).
    pub first_violation_at: Option<(u64, bool)>,
    /// The first cut of the second life the first violation is in (`--first-cut`).
    pub first_violation_cut: Option<(u64, bool)>,
    /// Second lives run (their crash points and violations are counted with life one's).
    pub second_lives: usize,
    /// Blocks erased and pages copied by GC during the recorded run.
    pub run_erases: u64,
    pub run_gc_copies: u64,
    /// Images whose recovery stopped at a page of the design's metadata the ECC found lost
    /// while it ran (media model only; no violation: [`crashtest::media::lost_to_media`]).
    #[serde(skip_serializing_if = "is_zero")]
    pub lost_to_media: usize,
    /// Sectors read back after recovery as errors standing for versions the media lost
    /// (accepted, [`media`]).
    #[serde(skip_serializing_if = "is_zero")]
    pub errors_for_lost_sectors: usize,
    /// Requests the export refused with EIO during the runs for a page the media lost
    /// (accepted, [`media::lost_copy_holds`]).
    #[serde(skip_serializing_if = "is_zero")]
    pub refused_for_lost_pages: usize,
    /// The media model's part and wear and what the recorded run's media did (model on only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub media: Option<crashtest::media::MediaRun>,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl NbdCrashReport {
    pub fn failed(&self) -> bool {
        self.violations > 0 || self.read_mismatches > 0
    }
}

/// A recorded run: the image when recording began, the flash operations since, and the
/// requests as the oracle's host log over sectors.
struct Recording {
    base: Box<dyn flash::Store>,
    ops: flash::OpLog,
    /// The requests; under the prefix cut on its clock (image writes, [`crashtest::prefix`]).
    log: SectorLog,
    /// Each record of `log` placed in `ops`.
    positions: Vec<lab::driver::LogPositions>,
    logical_pages: u32,
    start_ns: u64,
    read_mismatches: Vec<String>,
    refused_oversize: usize,
    edge_reads: u64,
    /// Requests refused with EIO for a page the media lost.
    refused_for_lost_pages: usize,
    /// The run's media figures (media model on only).
    media: Option<flash::MediaStats>,
}

impl Recording {
    fn count_ops(&self, keep: impl Fn(&flash::LoggedOp) -> bool) -> u64 {
        self.ops.ops.iter().filter(|o| keep(o)).count() as u64
    }

    /// The report of the run, before any cut is judged.
    fn report(&self, cfg: &NbdCrashConfig) -> NbdCrashReport {
        NbdCrashReport {
            promise: cfg.promise().name().to_string(),
            requests: cfg.requests as usize,
            refused_oversize: self.refused_oversize,
            edge_reads: self.edge_reads,
            read_mismatches: self.read_mismatches.len(),
            first_read_mismatch: self.read_mismatches.first().cloned(),
            run_erases: self.count_ops(|o| matches!(o.kind, flash::OpKind::Erase { .. })),
            run_gc_copies: self.count_ops(|o| {
                o.cause == flash::OpCause::GcCopy && matches!(o.kind, flash::OpKind::Program { .. })
            }),
            refused_for_lost_pages: self.refused_for_lost_pages,
            media: self
                .media
                .clone()
                .and_then(|m| crashtest::media::MediaRun::new(&cfg.device, m)),
            ..NbdCrashReport::default()
        }
    }

    /// The crash checker's points over the run, or the one instant a replay names.
    fn points(&self, cfg: &NbdCrashConfig) -> Vec<CrashPoint> {
        match (cfg.only_at, cfg.cut) {
            (Some((instant_ns, torn)), _) => vec![CrashPoint {
                instant_ns,
                torn,
                kind: crashtest::points::PointKind::Spread,
            }],
            (None, CutModel::Instant) => crashtest::points::sample(
                &self.ops,
                &self.log.log,
                cfg.crash_points,
                cfg.torn,
                cfg.seed,
                self.start_ns,
            ),
            (None, CutModel::Prefix) => {
                let run = self.prefix_run();
                run.sample(cfg.crash_points, cfg.torn, cfg.seed, run.ready)
            }
        }
    }

    /// The run seen by the image-prefix cut.
    fn prefix_run(&self) -> PrefixRun<'_> {
        PrefixRun::of(&self.ops, &self.log.log, &self.positions, self.start_ns)
    }
}

/// A recorded run's images for ascending cuts, under the campaign's cut model: each image and
/// the instant its recovered device's clock starts at.
enum Images<'p, 'r> {
    Instant(ImageBuilder<'r>),
    Prefix(&'p PrefixRun<'r>, PrefixImages<'p, 'r>),
}

impl<'p, 'r> Images<'p, 'r> {
    /// Prefix cuts of `prefix` (the run of `rec`) when given, else instant cuts of `rec`.
    fn new(rec: &'r Recording, prefix: Option<&'p PrefixRun<'r>>) -> Images<'p, 'r> {
        match prefix {
            None => Images::Instant(ImageBuilder::new(rec.base.as_ref(), &rec.ops)),
            Some(run) => Images::Prefix(run, run.images(rec.base.as_ref())),
        }
    }

    fn image(&mut self, p: &CrashPoint) -> (Box<dyn flash::Store>, u64) {
        match self {
            Images::Instant(b) => (b.image_at(p.instant_ns, p.torn), p.instant_ns),
            Images::Prefix(run, images) => (
                images.image_after(p.instant_ns, p.torn),
                run.clock_after(p.instant_ns, p.torn),
            ),
        }
    }
}

impl NbdCrashReport {
    /// Counts the cut `p` of life one and what judging its image found.
    fn note_verdict(&mut self, p: &CrashPoint, verdict: &Verdict) {
        self.lost_to_media += verdict.lost_to_media as usize;
        self.errors_for_lost_sectors += verdict.errors_accepted;
        self.note(p, &verdict.broken);
    }

    /// Counts the cut `p` of life one and the rules its image broke.
    fn note(&mut self, p: &CrashPoint, broken: &[String]) {
        let kind = format!("{:?}{}", p.kind, if p.torn { "+torn" } else { "" });
        *self.points_by_kind.entry(kind.to_lowercase()).or_insert(0) += 1;
        self.crash_points += 1;
        if let Some(first) = broken.first() {
            self.violations += 1;
            if self.first_violation.is_none() {
                self.first_violation = Some(format!("{first} ({} in all)", broken.len()));
                self.first_violation_at = Some((p.instant_ns, p.torn));
            }
        }
    }

    /// Counts the cut `p` of the second life after `cut`.
    fn note_in_life(&mut self, p: &CrashPoint, cut: FirstCut, verdict: &Verdict) {
        self.lost_to_media += verdict.lost_to_media as usize;
        self.errors_for_lost_sectors += verdict.errors_accepted;
        let first_before = self.first_violation.is_some();
        let broken: Vec<String> = verdict
            .broken
            .iter()
            .map(|b| format!("second life after a cut at {} ns: {b}", cut.instant_ns))
            .collect();
        self.note(p, &broken);
        if !first_before && self.first_violation.is_some() {
            self.first_violation_cut = Some((cut.instant_ns, cut.torn));
        }
    }

    /// A second life whose recovered export failed a request it must take: a violation at its
    /// first cut, replayed by rerunning the campaign.
    fn note_life_failure(&mut self, cut: FirstCut, what: &str) {
        self.violations += 1;
        if self.first_violation.is_none() {
            self.first_violation = Some(format!(
                "second life after a cut at {} ns: {what}",
                cut.instant_ns
            ));
        }
    }

    fn note_read_mismatch(&mut self, what: String) {
        self.read_mismatches += 1;
        self.first_read_mismatch.get_or_insert(what);
    }
}

/// Records the run, then recovers and judges the image of each cut, then the second lives.
/// When the media ends the run asked for, the longest run of the same seed that fits in the
/// device's life is judged ([`crashtest::media::within_life`]).
pub fn run(cfg: &NbdCrashConfig) -> Result<NbdCrashReport, NbdCrashError> {
    let (cfg, rec, end_of_life) = record_within_life(cfg)?;
    let cfg = &cfg;
    let mut report = rec.report(cfg);
    if let Some(m) = report.media.as_mut() {
        m.end_of_life = end_of_life;
    }
    let judge = Judge::new(cfg, &rec);
    if let (Some(_), Some(cut)) = (cfg.only_at, cfg.first_cut) {
        second_life::judge_life(cfg, &judge, cut, None, &mut report);
        return Ok(report);
    }
    let points = rec.points(cfg);
    let prefix = (cfg.cut == CutModel::Prefix).then(|| rec.prefix_run());
    let mut images = Images::new(&rec, prefix.as_ref());
    for p in &points {
        let (image, clock) = images.image(p);
        report.note_verdict(p, &judge.point(image, clock, p.instant_ns));
    }
    if cfg.only_at.is_none() {
        second_life::run_lives(cfg, &judge, &points, &mut report);
    }
    Ok(report)
}

/// [`record`] of `cfg`, or of the same seed with fewer requests when the media ends the run
/// (the config recorded is returned with the recording).
fn record_within_life(
    cfg: &NbdCrashConfig,
) -> Result<
    (
        NbdCrashConfig,
        Recording,
        Option<crashtest::media::EndOfLife>,
    ),
    NbdCrashError,
> {
    let record_n = |requests| {
        let run = NbdCrashConfig {
            requests,
            ..cfg.clone()
        };
        record(&run).map(|rec| (run, rec))
    };
    let ended = |e: &NbdCrashError| match e {
        NbdCrashError::EndOfLife(what) => Some(what.clone()),
        _ => None,
    };
    let ((run, rec), eol) = crashtest::media::within_life(cfg.requests, record_n, ended)?;
    Ok((run, rec, eol))
}

/// What judging one image found: the rules it broke, or that recovery stopped at metadata
/// lost to the media, and the sectors read as errors that were accepted; with the media
/// model on, what a run going on from the image holds (errors settled to the versions they
/// stood for, [`media::settle`]).
#[derive(Default)]
struct Verdict {
    broken: Vec<String>,
    lost_to_media: bool,
    errors_accepted: usize,
    settled: Option<Vec<Option<Sector>>>,
}

impl Verdict {
    fn broken(what: String) -> Verdict {
        Verdict {
            broken: vec![what],
            ..Verdict::default()
        }
    }
}

/// What judging a cut of a recorded run needs: the run, the oracle's model of its log over
/// sectors, and where WRITE_ZEROES and trims touched each sector.
struct Judge<'a> {
    cfg: &'a NbdCrashConfig,
    rec: &'a Recording,
    model: Model<'a>,
    index: ZeroIndex,
}

impl<'a> Judge<'a> {
    fn new(cfg: &'a NbdCrashConfig, rec: &'a Recording) -> Judge<'a> {
        Judge {
            cfg,
            rec,
            model: Model::new(&rec.log.log),
            index: rec.log.zero_index(),
        }
    }

    /// What judging the image of a cut at `cut_ns` finds (the recovered device's clock starts
    /// there), judged as a cut at `t` (the same instant, or the first cut of a second life still
    /// recovering at `cut_ns`); a design that panics on it breaks a rule.
    fn point(&self, image: Box<dyn flash::Store>, cut_ns: u64, t: u64) -> Verdict {
        crashtest::quiet_panics::catch(|| self.image(image, cut_ns, t)).unwrap_or_else(|what| {
            Verdict::broken(format!("the design panicked on this image: {what}"))
        })
    }

    /// Recovers the design from `image` (cut at `cut_ns`), checks its invariants and capacity,
    /// reads every sector back and has the oracle judge them as a cut at `t`. A recovery that
    /// stops at metadata the ECC found lost while it ran breaks no rule ([`crashtest::media`]).
    fn image(&self, image: Box<dyn flash::Store>, cut_ns: u64, t: u64) -> Verdict {
        let (cfg, rec) = (self.cfg, self.rec);
        let mut flash = Flash::new(cfg.device.clone(), image);
        flash.start_clock_at(cut_ns);
        let (reopened, lost) =
            flash::media::error_log::watch(|| cfg.design.reopen(flash, &cfg.options));
        let mut dev = match reopened {
            Ok((dev, _)) => dev,
            Err(e) if crashtest::media::lost_to_media(&e, &lost) => {
                return Verdict {
                    lost_to_media: true,
                    ..Verdict::default()
                }
            }
            Err(e) => return Verdict::broken(format!("recovery failed: {e}")),
        };
        if let Err(e) = dev.check_invariants() {
            return Verdict::broken(format!("an invariant is broken after recovery: {e}"));
        }
        if dev.logical_pages() != rec.logical_pages {
            return Verdict::broken(format!(
                "recovered with {} logical pages, not {}",
                dev.logical_pages(),
                rec.logical_pages
            ));
        }
        let recovered_ns = dev.flash().idle_ns().max(cut_ns);
        match read_sectors(dev.as_mut(), recovered_ns) {
            Ok(read) => self.sectors(&read, t, dev.flash()),
            Err(e) => Verdict::broken(format!("reading the recovered device failed: {e}")),
        }
    }

    /// The oracle's verdict on the sectors read back from `flash`: the image breaks the promise
    /// only if it breaks it under every reading of its zeros. With the media model on, an error
    /// may stand for a lost version of its sector, zeros included ([`media::LostSectors::of`]);
    /// a sector reading as an error that breaks it under every reading is read again as zeros
    /// where a lost page held zeros for it ([`media::LostSectors::zeros_for_errors`]), until
    /// that changes nothing.
    fn sectors(&self, read: &[Option<Sector>], t: u64, flash: &Flash) -> Verdict {
        let lost = crashtest::media::on(&self.cfg.device).then(|| {
            let spp = flash.geometry().page_bytes as u64 / SECTOR_BYTES;
            media::LostSectors::of(flash, spp, (read, &self.index))
        });
        let mut read = std::borrow::Cow::Borrowed(read);
        loop {
            let (verdict, failing) = self.judge_readings(&read, t, lost.as_ref());
            let zeros = lost.as_ref().filter(|_| !verdict.broken.is_empty());
            match zeros.and_then(|l| l.zeros_for_errors(&read, &failing)) {
                Some(zeros) => read = std::borrow::Cow::Owned(zeros),
                None => return verdict,
            }
        }
    }

    /// The oracle's verdict on `read` under every reading of its zeros (kept if one reading
    /// keeps the promise), and the sectors every reading found broken.
    fn judge_readings(
        &self,
        read: &[Option<Sector>],
        t: u64,
        lost: Option<&media::LostSectors>,
    ) -> (Verdict, BTreeSet<usize>) {
        let mut broken = Vec::new();
        let mut failing = BTreeSet::new();
        for reading in Reading::ALL {
            let seen = self
                .rec
                .log
                .seen(&self.index, read, t, self.cfg.promise(), reading);
            let (v, settled) = self.judge_seen(&seen, t, lost, read);
            if v.is_empty() {
                let verdict = Verdict {
                    errors_accepted: read.iter().filter(|s| s.is_none()).count(),
                    settled,
                    ..Verdict::default()
                };
                return (verdict, failing);
            }
            let broken_here: BTreeSet<usize> = v
                .iter()
                .filter_map(|(s, _)| s.map(|s| s.0 as usize))
                .collect();
            failing = match reading {
                Reading::Latest => broken_here,
                _ => failing.intersection(&broken_here).copied().collect(),
            };
            if broken.is_empty() {
                broken = v;
            }
        }
        let broken = broken
            .into_iter()
            .map(|(sector, what)| match sector {
                Some(s) => format!("sector {}: {what}", s.0),
                None => what,
            })
            .collect();
        let verdict = Verdict {
            broken,
            ..Verdict::default()
        };
        (verdict, failing)
    }

    /// The rules `seen` (what `read` is, for the oracle) breaks at `t`; with the media's
    /// `lost` sectors, errors are accepted where a lost version stands for them, and `read` is
    /// returned settled ([`media::settle`]).
    fn judge_seen(
        &self,
        seen: &[crashtest::oracle::Seen],
        t: u64,
        lost: Option<&media::LostSectors>,
        read: &[Option<Sector>],
    ) -> (crashtest::oracle::Judged, Option<Vec<Option<Sector>>>) {
        let promise = self.cfg.promise();
        match lost {
            None => (self.model.judge(promise, t, seen), None),
            Some(lost) => {
                let (v, stood) = self.model.judge_settling(promise, t, seen, lost.versions());
                (v, Some(media::settle(read, &stood, &self.index)))
            }
        }
    }

    /// What the sectors `read` back after a cut judged at `t` hold for a run that goes on from
    /// them: with the media model on, each error the version it stood for; `None` if the image
    /// breaks the promise.
    fn settled(
        &self,
        read: &[Option<Sector>],
        t: u64,
        flash: &Flash,
    ) -> Option<Vec<Option<Sector>>> {
        if !crashtest::media::on(&self.cfg.device) {
            return Some(read.to_vec());
        }
        let verdict = self.sectors(read, t, flash);
        verdict
            .broken
            .is_empty()
            .then_some(verdict.settled)
            .flatten()
    }
}

/// Every sector of the device, page by page (`None`: an uncorrectable page), read from `at`
/// (when recovery is done).
fn read_sectors(dev: &mut dyn ftl::BlockDevice, at: u64) -> Result<Vec<Option<Sector>>, FtlError> {
    read_sectors_until(dev, at).map(|(sectors, _)| sectors)
}

/// [`read_sectors`], and when the last read was acknowledged.
fn read_sectors_until(
    dev: &mut dyn ftl::BlockDevice,
    mut at: u64,
) -> Result<(Vec<Option<Sector>>, u64), FtlError> {
    let pages = dev.logical_pages();
    let spp = (dev.flash().geometry().page_bytes as u64 / SECTOR_BYTES) as usize;
    let mut sectors = Vec::with_capacity(pages as usize * spp);
    let mut out = Vec::new();
    for first in (0..pages).step_by(64) {
        let n = 64.min(pages - first);
        at = at.max(dev.read(Lpn(first), n, at, &mut out)?.ack_ns);
        for page in &out {
            sectors.extend(sectors::page_sectors(page, spp));
        }
    }
    Ok((sectors, at))
}

/// What a READ must return for one sector: the last write accepted before it (`None`: zeros),
/// or zeros too once a trim took its page.
#[derive(Clone, Copy, Default)]
struct Expect {
    write: Option<u64>,
    trimmed: bool,
}

/// The recording run: the export, the log, and what each sector holds.
struct Run<'a> {
    cfg: &'a NbdCrashConfig,
    backend: FtlBackend,
    log: SectorLog,
    /// Each record of `log` placed in the flash operation log.
    positions: Vec<lab::driver::LogPositions>,
    expect: Vec<Expect>,
    /// The last request's arrival (before the host's clock is applied).
    arrival_ns: u64,
    last_ack_ns: u64,
    read_mismatches: Vec<String>,
    refused_oversize: usize,
    /// Requests refused with EIO for a page the media lost ([`Run::refused_for_lost_page`]).
    refused_for_lost_pages: usize,
    /// The host's error for the request being applied, if it was refused.
    refused_by: Option<HostError>,
}

/// Ages the device, starts the flash recording, and runs the requests.
fn record(cfg: &NbdCrashConfig) -> Result<Recording, NbdCrashError> {
    if !(0.0..=1.0).contains(&cfg.fill) {
        return Err(NbdCrashError::InvalidFill(cfg.fill));
    }
    let mut run = Run::new(cfg, open_export(cfg)?);
    run.age()?;
    let base = run.backend.device_mut().flash_mut().start_recording();
    let start_ns = run.last_ack_ns.max(run.backend.host().clock_ns());
    run.arrival_ns = start_ns;
    run.run_requests(cfg.requests, cfg.seed)?;
    Ok(run.into_recording(base, start_ns))
}

/// The design formatted on a full-data device behind the export `cfg` asks for.
fn open_export(cfg: &NbdCrashConfig) -> Result<FtlBackend, NbdCrashError> {
    let oob = cfg.design.oob_record(&cfg.device.geometry);
    let flash = Flash::in_memory(cfg.device.clone(), oob, false);
    let dev = cfg.design.build(flash, &cfg.options)?;
    let start_ns = dev.flash().idle_ns();
    open_backend(cfg, dev, start_ns, FIRST_UUID)
}

/// The export `cfg` asks for on `dev`, its clock at `start_ns`, atomic requests' transaction
/// ids from `first_uuid`.
fn open_backend(
    cfg: &NbdCrashConfig,
    dev: Box<dyn ftl::BlockDevice>,
    start_ns: u64,
    first_uuid: u64,
) -> Result<FtlBackend, NbdCrashError> {
    let mut backend = FtlBackend::new(dev, start_ns);
    if cfg.atomic_requests {
        backend = backend.with_atomic_requests_from(first_uuid)?;
    }
    if cfg.plain_reads {
        backend = backend.without_serializable_reads();
    }
    Ok(backend)
}

/// Transaction ids of a campaign's atomic requests start here (a server uses the wall clock).
const FIRST_UUID: u64 = 1 << 20;

/// Pages per write of the aging pass's sequential part (at most a transaction).
const AGE_REQUEST_PAGES: u64 = 32;

impl<'a> Run<'a> {
    fn new(cfg: &'a NbdCrashConfig, backend: FtlBackend) -> Run<'a> {
        let sectors = backend.size_bytes() / SECTOR_BYTES;
        let start_ns = backend.host().clock_ns();
        Run {
            cfg,
            log: SectorLog::new(cfg.design.name, sectors as u32),
            positions: Vec::new(),
            expect: vec![Expect::default(); sectors as usize],
            backend,
            arrival_ns: start_ns,
            last_ack_ns: start_ns,
            read_mismatches: Vec::new(),
            refused_oversize: 0,
            refused_for_lost_pages: 0,
            refused_by: None,
        }
    }

    /// A second life's run: the log and the expected sectors start from the recovered
    /// device's baseline, the clock from when it was ready.
    fn continuing(mut self, log: SectorLog, expect: Vec<Expect>, ready_ns: u64) -> Run<'a> {
        // The baseline is known once recovery is done and the sectors are read.
        let ready = self.logged_ops();
        let at = lab::driver::LogPositions {
            arrival: ready,
            answered: ready,
        };
        self.positions = vec![at; log.log.records.len()];
        self.log = log;
        self.expect = expect;
        self.arrival_ns = self.arrival_ns.max(ready_ns);
        self.last_ack_ns = self.last_ack_ns.max(ready_ns);
        self
    }

    /// `n` requests drawn from `seed`, then a READ of the whole export.
    fn run_requests(&mut self, n: u64, seed: u64) -> Result<(), NbdCrashError> {
        let requests = requests::generate(&self.export_shape(), n, seed);
        for (i, timed) in requests.into_iter().enumerate() {
            self.apply(i, timed)?;
        }
        self.read_everything(n as usize)
    }

    /// What the request stream is drawn for: the export's size and longest write.
    fn export_shape(&self) -> Export {
        Export {
            capacity_bytes: self.backend.size_bytes(),
            page_bytes: self.page_bytes(),
            max_write_bytes: self.backend.max_payload_bytes() as u64,
            oversize: self.backend.host().max_write_pages().is_some(),
        }
    }

    /// Operations the flash has logged so far.
    fn logged_ops(&self) -> usize {
        self.backend.host().device().flash().logged_ops()
    }

    /// Powers the device off after the run: what the cuts are judged against.
    fn into_recording(self, base: Box<dyn flash::Store>, start_ns: u64) -> Recording {
        let logical_pages = self.backend.host().device().logical_pages();
        let edge_reads = self.backend.host_stats().edge_reads;
        let mut flash = self.backend.into_device().into_flash();
        let media = crashtest::media::on(&self.cfg.device).then(|| flash.stats().media.clone());
        let ops = flash.take_log().expect("recording was on");
        let mut log = self.log;
        if self.cfg.cut == CutModel::Prefix {
            log.log =
                crashtest::prefix::prefix_clock(&log.log, &self.positions, &ops.writes_before());
        }
        Recording {
            base,
            ops,
            log,
            positions: self.positions,
            logical_pages,
            start_ns,
            read_mismatches: self.read_mismatches,
            refused_oversize: self.refused_oversize,
            edge_reads,
            refused_for_lost_pages: self.refused_for_lost_pages,
            media,
        }
    }

    fn page_bytes(&self) -> u64 {
        self.backend.host().page_bytes()
    }

    /// Writes the first [`NbdCrashConfig::fill`] of the pages once, in requests of up to
    /// [`AGE_REQUEST_PAGES`], then as many single pages again at random among them, and
    /// flushes: every block a mix of live and dead pages, so GC must copy during the run.
    fn age(&mut self) -> Result<(), NbdCrashError> {
        let page = self.page_bytes();
        let pages = ((self.backend.size_bytes() / page) as f64 * self.cfg.fill) as u64;
        let per_request = AGE_REQUEST_PAGES.min(self.backend.max_payload_bytes() as u64 / page);
        let mut requests: Vec<(u64, u64)> = (0..pages)
            .step_by(per_request.max(1) as usize)
            .map(|first| (first, per_request.min(pages - first)))
            .collect();
        let mut rng = ChaCha8Rng::seed_from_u64(self.cfg.seed ^ 0xa9ed_f111);
        requests.extend((0..pages).map(|_| (rng.random_range(0..pages), 1)));
        for (i, (first, n)) in requests.into_iter().enumerate() {
            let request = Request::Write {
                offset: first * page,
                len: n * page,
                fua: false,
            };
            self.arrival_ns = self.last_ack_ns;
            self.apply(i, Timed { gap_ns: 0, request })?;
        }
        if pages > 0 {
            self.arrival_ns = self.last_ack_ns;
            self.apply(
                0,
                Timed {
                    gap_ns: 0,
                    request: Request::Flush,
                },
            )?;
        }
        Ok(())
    }

    /// READs the whole export after the last request (checked as every READ is).
    fn read_everything(&mut self, index: usize) -> Result<(), NbdCrashError> {
        let (size, step) = (self.backend.size_bytes(), 1 << 20);
        for offset in (0..size).step_by(step as usize) {
            let request = Request::Read {
                offset,
                len: step.min(size - offset),
            };
            self.apply(index, Timed { gap_ns: 0, request })?;
        }
        Ok(())
    }

    /// Sends one request to the export and logs it (every record it adds placed in the flash
    /// operation log: handed to the design before the request's first call, answered after its
    /// last, as a server replies).
    fn apply(&mut self, index: usize, timed: Timed) -> Result<(), NbdCrashError> {
        let arrival = self.logged_ops();
        let result = self.apply_unplaced(index, timed);
        let at = lab::driver::LogPositions {
            arrival,
            answered: self.logged_ops(),
        };
        let logged = self.log.log.records.len() - self.positions.len();
        self.positions.extend(std::iter::repeat_n(at, logged));
        result
    }

    /// [`Self::apply`] before its records are placed.
    fn apply_unplaced(&mut self, index: usize, timed: Timed) -> Result<(), NbdCrashError> {
        self.arrival_ns += timed.gap_ns;
        self.refused_by = None;
        // The host issues a request no earlier than its last call to the design.
        let at = self.arrival_ns.max(self.backend.host().clock_ns());
        let outcome = match &timed.request {
            Request::Write { offset, len, fua } => self.write(*offset, *len, *fua, at),
            Request::Zeroes { offset, len, fua } => self.zeroes(*offset, *len, *fua, at),
            Request::Trim { offset, len } => self.trim(*offset, *len, at),
            Request::Flush => {
                let result = self.backend.host_mut().flush(at);
                let outcome = self.answer(result);
                self.log.flush(at, &outcome);
                outcome
            }
            Request::Read { offset, len } => self.read(index, *offset, *len, at),
        };
        let must_refuse = self.must_refuse(&timed.request);
        match (outcome, must_refuse) {
            (Ok(ack), false) => {
                self.last_ack_ns = self.last_ack_ns.max(ack);
                Ok(())
            }
            (Err(e), true) if e.contains("too large") => {
                self.refused_oversize += 1;
                Ok(())
            }
            (Err(_), _) if self.refused_for_lost_page() => {
                self.refused_for_lost_pages += 1;
                Ok(())
            }
            (Err(e), _) if self.ended_by_media() => Err(NbdCrashError::EndOfLife(e)),
            (outcome, _) => Err(NbdCrashError::Request {
                index,
                request: timed.request,
                what: match outcome {
                    Ok(_) => "accepted, but it is larger than a transaction".into(),
                    Err(e) => format!("refused: {e}"),
                },
            }),
        }
    }

    /// The export's answer to a request the host layer answered `result`: the outcome its
    /// client sees (an error worded as the NBD reply's, [`backend_error`]), the host's error
    /// kept for the media checks.
    fn answer(&mut self, result: Result<u64, HostError>) -> Outcome {
        result.map_err(|e| {
            let reply = backend_error(e.clone()).to_string();
            self.refused_by = Some(e);
            reply
        })
    }

    /// Whether the request just refused was refused with EIO for a page a copy of which,
    /// holding what the page must hold now, the media lost ([`media::lost_copy_holds`]): the
    /// answer the export owes (media model on only).
    fn refused_for_lost_page(&self) -> bool {
        let Some(HostError::Uncorrectable { lpn }) = &self.refused_by else {
            return false;
        };
        let spp = self.page_bytes() / SECTOR_BYTES;
        let first = lpn.0 as u64 * spp;
        let flash = self.backend.host().device().flash();
        media::lost_copy_holds(flash, |page| {
            page.chunks(SECTOR_BYTES as usize)
                .enumerate()
                .all(|(i, b)| {
                    self.mismatch(first + i as u64, sectors::decode(b))
                        .is_none()
                })
        })
    }

    /// Whether the request just refused met the end of the media's life: the flash wore out or
    /// lost metadata the design cannot do without ([`crashtest::media::host_end_of_life`]).
    fn ended_by_media(&self) -> bool {
        let flash = self.backend.host().device().flash();
        crashtest::media::on(&self.cfg.device)
            && self
                .refused_by
                .as_ref()
                .is_some_and(|e| crashtest::media::host_end_of_life(e, flash))
    }

    /// A write that spans more pages than the export takes in one request (a transaction, or
    /// the design's longest write).
    fn must_refuse(&self, request: &Request) -> bool {
        let (Request::Write { offset, len, .. }, Some(max)) =
            (request, self.backend.host().max_write_pages())
        else {
            return false;
        };
        let page = self.page_bytes();
        (offset + len).div_ceil(page) - offset / page > max
    }

    fn write(&mut self, offset: u64, len: u64, fua: bool, at: u64) -> Outcome {
        let (first, count) = (offset / SECTOR_BYTES, len / SECTOR_BYTES);
        let w0 = self.log.next_write();
        let mut data = vec![0u8; len as usize];
        for (i, sector) in data.chunks_mut(SECTOR_BYTES as usize).enumerate() {
            sectors::encode(first + i as u64, w0 + i as u64, sector);
        }
        let result = self.backend.host_mut().write(offset, &data, fua, at);
        let outcome = self.answer(result);
        let atomic = self.cfg.logs_requests_atomic();
        self.log.write(first, count, atomic, false, at, &outcome);
        if outcome.is_ok() {
            for i in 0..count {
                self.expect[(first + i) as usize] = Expect {
                    write: Some(w0 + i),
                    trimmed: false,
                };
            }
        }
        self.fua_flush(fua, at, &outcome);
        outcome
    }

    /// Under plain requests FUA is a flush at the write's acknowledgement: logged as one, so a
    /// flush-only design must keep the write. (An atomic request is durable when acknowledged.)
    fn fua_flush(&mut self, fua: bool, at: u64, outcome: &Outcome) {
        if fua && !self.cfg.atomic_requests && outcome.is_ok() {
            self.log.flush(at, outcome);
        }
    }

    /// WRITE_ZEROES, logged as the pieces the host splits it into (each its own request).
    fn zeroes(&mut self, offset: u64, len: u64, fua: bool, at: u64) -> Outcome {
        let pieces = self
            .backend
            .host()
            .zeroes_pieces(offset, len)
            .map_err(|e| e.to_string())?;
        let result = self.backend.host_mut().write_zeroes(offset, len, fua, at);
        let outcome = self.answer(result);
        let atomic = self.cfg.logs_requests_atomic();
        for (pos, n) in pieces {
            self.log.write(
                pos / SECTOR_BYTES,
                n / SECTOR_BYTES,
                atomic,
                true,
                at,
                &outcome,
            );
        }
        if outcome.is_ok() {
            let first = offset / SECTOR_BYTES;
            for s in first..first + len / SECTOR_BYTES {
                self.expect[s as usize] = Expect::default();
            }
        }
        self.fua_flush(fua, at, &outcome);
        outcome
    }

    /// TRIM of the whole pages inside the range; a design without trim ignores it (logged as
    /// refused, so it excuses nothing).
    fn trim(&mut self, offset: u64, len: u64, at: u64) -> Outcome {
        let ignored_before = self.backend.host_stats().trims_ignored;
        let result = self.backend.host_mut().trim(offset, len, at);
        let outcome = self.answer(result);
        let page = self.page_bytes();
        let (first_page, end_page) = (offset.div_ceil(page), (offset + len) / page);
        if end_page <= first_page {
            return outcome;
        }
        let spp = page / SECTOR_BYTES;
        let logged = match &outcome {
            Ok(_) if self.backend.host_stats().trims_ignored > ignored_before => {
                Err("ignored: the design has no trim".to_string())
            }
            other => other.clone(),
        };
        let (first, count) = (first_page * spp, (end_page - first_page) * spp);
        self.log.trim(first, count, at, &logged);
        if logged.is_ok() {
            for s in first..first + count {
                self.expect[s as usize].trimmed = true;
            }
        }
        outcome
    }

    /// READ, checked sector by sector against the last write before it.
    fn read(&mut self, index: usize, offset: u64, len: u64, at: u64) -> Outcome {
        let mut buf = vec![0u8; len as usize];
        let result = self.backend.host_mut().read(offset, &mut buf, at);
        let outcome = self.answer(result);
        let first = offset / SECTOR_BYTES;
        self.log.read(first, len / SECTOR_BYTES, at, &outcome);
        if outcome.is_ok() {
            for (i, bytes) in buf.chunks(SECTOR_BYTES as usize).enumerate() {
                let s = first + i as u64;
                if let Some(what) = self.mismatch(s, sectors::decode(bytes)) {
                    self.read_mismatches.push(format!(
                        "request {index}, READ at {at} ns: sector {s} {what}"
                    ));
                }
            }
        }
        outcome
    }

    /// Why `found` is not what sector `s` must read as now, if it is not.
    fn mismatch(&self, s: u64, found: Sector) -> Option<String> {
        let e = self.expect[s as usize];
        let ok = match found {
            Sector::Zero => e.write.is_none() || e.trimmed,
            Sector::Tagged { sector, write } => sector == s && Some(write) == e.write,
            Sector::Garbage => false,
        };
        (!ok).then(|| format!("read {found:?}, expected write {:?}", e.write))
    }
}

/// The command that replays `report`'s first violation, or reruns the campaign when it has
/// no instant (a second life whose export failed, a READ that missed).
pub fn replay_of(cfg: &NbdCrashConfig, report: &NbdCrashReport) -> String {
    let cut = report
        .first_violation_cut
        .map(|(instant_ns, torn)| FirstCut { instant_ns, torn });
    replay_command(cfg, report.first_violation_at, cut)
}

/// The `mobius crashtest` command that runs `cfg` again: with `at`, it rebuilds and judges
/// only the image of a cut then (a violation's replay), in the second life after `cut` if one
/// is given; without, the whole campaign.
pub fn replay_command(
    cfg: &NbdCrashConfig,
    at: Option<(u64, bool)>,
    cut: Option<FirstCut>,
) -> String {
    let mut c = crashtest::design_and_device_args(cfg.design.name, &cfg.device, &cfg.options);
    c.push_str(" --workload nbd");
    if cfg.atomic_requests {
        c.push_str(" --atomic-requests");
    }
    if let Some(p) = cfg.promise {
        c.push_str(&format!(" --promise {}", p.name()));
    }
    if cfg.plain_reads {
        c.push_str(" --plain-reads");
    }
    c.push_str(&format!(
        " --requests {} --fill {} --seed {}",
        cfg.requests, cfg.fill, cfg.seed
    ));
    c.push_str(cfg.cut.arg());
    match at {
        Some((t, torn)) => {
            if torn {
                c.push_str(" --torn");
            }
            c.push_str(&format!(" --replay-instant {t}"));
            if let Some(cut) = cut {
                c.push_str(&cut.arg());
            }
        }
        None => {
            if cfg.torn {
                c.push_str(" --torn");
            }
            c.push_str(&format!(" --crash-points {}", cfg.crash_points));
            if cfg.second_lives > 0 {
                c.push_str(&format!(" --second-lives {}", cfg.second_lives));
            }
        }
    }
    c
}

#[cfg(test)]
mod tests;
