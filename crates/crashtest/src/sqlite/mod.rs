//! Power cuts under SQLite (issue #15 §3): run a SQL workload with the flash recording every
//! operation, then for each of N seeded instants build the flash image a power cut at that
//! instant leaves (operations running then torn, with `torn`), recover the design, open the
//! database and judge it:
//!
//! 1. `PRAGMA integrity_check` is `ok` and the workload's invariant holds;
//! 2. the database holds a *prefix* of the transactions: exactly the first k (kv: the first k
//!    keys inserted; tpcb: k history rows);
//! 3. in a durable mode, k is at least the number of commits that had returned by the instant.
//!    Durable modes: `batch` with `synchronous` FULL/EXTRA, `wal` with FULL/EXTRA, `journal` and
//!    `ordered` with EXTRA (with FULL SQLite does not sync the journal's deletion, so a cut just
//!    after a commit may roll it back: SQLite's documented behaviour, not a device fault).
//!    Other modes (`nobarrier`, NORMAL) promise only the prefix.
//!
//! With [`CrashConfig::cut`] = [`CutModel::Prefix`] the cuts are those a killed `mobius sql`
//! process leaves ([`crate::prefix`]): the first N image writes in issue order (the next torn
//! with `torn`), and a commit counts as returned at the cut when it returned before write N + 1
//! was issued. Instants (`--replay-instant`, `--first-cut`, the report's) then count writes.
//!
//! Before judging the database, the recovered design's own invariants must hold (as in the
//! crash checker). With [`CrashConfig::fill`] the device is aged first: that share of its logical
//! pages is written before the database is formatted, so the database's writes overwrite live
//! pages and garbage collection runs while the transactions commit (without it a campaign on a
//! fresh device cuts no GC at all: the database touches a few hundred of its pages).

use crate::prefix::CutModel;
use flash::{DeviceConfig, Flash};
use ftl::{DesignOptions, DesignSpec};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use sqlite::durability::durable_mode;
use sqlite::evidence;
use sqlite::workload::{self, Scale, Workload};
use sqlite::{Breach, Database, Mode, OpenOptions, SqlError, TxKind};
use std::collections::BTreeMap;

pub mod media;
mod second_life;
pub mod soak;

/// One campaign.
#[derive(Clone)]
pub struct CrashConfig {
    pub design: DesignSpec,
    pub device: DeviceConfig,
    pub options: DesignOptions,
    pub open: OpenOptions,
    pub workload: Workload,
    pub scale: Scale,
    pub transactions: u64,
    pub crash_points: usize,
    pub torn: bool,
    pub seed: u64,
    /// Share of the device's logical pages written (content tags, sequentially, then flushed)
    /// before the database is formatted: an aged device, on which the run's writes make GC
    /// work. 0: a fresh device.
    pub fill: f64,
    /// Second lives: after each of this many seeded cuts of the run, the recovered database
    /// runs on for a quarter of the transactions (SQLite's own recovery first) and is cut again
    /// at a quarter of the crash points ([`second_life`]).
    pub second_lives: usize,
    /// Judge only a cut at this instant (a violation's replay)...
    pub only_at: Option<u64>,
    /// ...in the second life after a first cut at this instant.
    pub first_cut: Option<u64>,
    /// How the images are cut: at simulated instants, or as a killed process leaves its image
    /// (instants then count image writes).
    pub cut: CutModel,
}

/// What the campaign found.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct CrashReport {
    pub crash_points: usize,
    pub violations: usize,
    /// Crash points at which the database held every transaction that had committed.
    pub all_commits_present: usize,
    /// Smallest and largest transactions found, over the points judged sound (both 0 when
    /// none was).
    pub min_recovered: u64,
    pub max_recovered: u64,
    pub durable_mode: bool,
    /// Blocks erased and pages copied by GC during the recorded run (the span the cuts fall
    /// in): whether the cuts could land in garbage collection at all.
    pub run_erases: u64,
    pub run_gc_copies: u64,
    /// Second lives run (their crash points and violations are counted above).
    pub second_lives: usize,
    /// Of the violations, those at cuts in a second life...
    pub second_life_violations: usize,
    /// ...and the first of them: (first cut, instant, what).
    pub first_second_life_violation: Option<(u64, u64, String)>,
    pub first_violation: Option<String>,
    /// Crash images whose recovery stopped at a page of the design's metadata the ECC found
    /// lost while it ran (media model only; no violation: [`crate::media::lost_to_media`]).
    #[serde(skip_serializing_if = "is_zero")]
    pub lost_to_media: usize,
    /// Crash images whose database failed with an I/O error for pages whose needed version the
    /// media lost (accepted: [`media`]).
    #[serde(skip_serializing_if = "is_zero")]
    pub errors_for_lost_pages: usize,
    /// Second lives the media ended (their first image lost, or a transaction of theirs failed
    /// for a page the media lost): their cuts are not judged.
    #[serde(skip_serializing_if = "is_zero")]
    pub lives_ended_by_media: usize,
    /// The media model's part, wear and what the recorded run's media did (model on only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub media: Option<crate::media::MediaRun>,
    /// Instant of the first violation, for `--replay-instant`...
    pub first_violation_ns: Option<u64>,
    /// ...and, when it lies in a second life, the first cut's (`--first-cut`).
    pub first_violation_cut_ns: Option<u64>,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// How a judged cut came out, when it kept the promise.
#[derive(Clone, Copy, Debug)]
enum Judged {
    /// The database held `k` transactions; `all`: every one committed by the cut.
    Recovered { k: u64, all: bool },
    /// The design's recovery stopped at metadata the media lost ([`crate::media`]).
    LostToMedia,
    /// The database failed with an I/O error for pages whose needed version the media lost.
    ErrorAccepted,
}

impl CrashReport {
    /// Counts the outcome of the cut at `at` (in the second life after `first_cut`).
    fn note(&mut self, outcome: Result<Judged, Breach>, at: u64, first_cut: Option<u64>) {
        self.crash_points += 1;
        match outcome {
            Ok(Judged::Recovered { k, all }) => {
                self.min_recovered = self.min_recovered.min(k);
                self.max_recovered = self.max_recovered.max(k);
                self.all_commits_present += all as usize;
            }
            Ok(Judged::LostToMedia) => self.lost_to_media += 1,
            Ok(Judged::ErrorAccepted) => self.errors_for_lost_pages += 1,
            Err(why) => {
                self.violations += 1;
                if let Some(cut) = first_cut {
                    self.second_life_violations += 1;
                    if self.first_second_life_violation.is_none() {
                        self.first_second_life_violation = Some((cut, at, why.to_string()));
                    }
                }
                if self.first_violation.is_none() {
                    self.first_violation = Some(why.to_string());
                    self.first_violation_ns = Some(at);
                    self.first_violation_cut_ns = first_cut;
                }
            }
        }
    }
}

/// A recorded run before the cuts: what each transaction was and when its commit returned.
struct Recording {
    base: Box<dyn flash::Store>,
    log: flash::OpLog,
    start_ns: u64,
    end_ns: u64,
    /// Commit acknowledgement instants of the writing transactions, in order.
    acked_ns: Vec<u64>,
    /// The same on the prefix cut's clock: image writes issued when each commit returned.
    acked_writes: Vec<u64>,
    cut: CutModel,
    /// kv: the key each transaction inserted.
    keys: Vec<i64>,
    /// What the database held when the run began.
    prior: Prior,
    /// The page versions the database wrote (media model only: the oracle's evidence)...
    versions: media::Versions,
    /// ...after those a cut before the run left possible (kept until `versions` is built).
    versions_before: BTreeMap<u32, Vec<u64>>,
    /// What the recorded run's media did (media model only).
    media: Option<flash::MediaStats>,
}

/// What the database held when a recorded run began: nothing for the first life; for a second
/// life, what the first cut left.
#[derive(Clone, Debug, Default)]
struct Prior {
    /// Transactions found.
    found: u64,
    /// kv: their keys, in insertion order.
    keys: Vec<i64>,
}

impl Recording {
    /// Every transaction the database may hold after a cut of this run, in order: the prior
    /// ones, then the run's own.
    fn transactions(&self) -> u64 {
        self.prior.found + self.acked_ns.len() as u64
    }

    /// Those that had committed by `at`.
    fn committed_by(&self, at: u64) -> u64 {
        let acked = match self.cut {
            CutModel::Instant => &self.acked_ns,
            CutModel::Prefix => &self.acked_writes,
        };
        self.prior.found + acked.iter().take_while(|&&t| t <= at).count() as u64
    }

    /// The cuts of this run: its instants, or (prefix cut) its image-write counts.
    fn cut_range(&self) -> std::ops::RangeInclusive<u64> {
        match self.cut {
            CutModel::Instant => self.start_ns..=self.end_ns,
            CutModel::Prefix => 0..=self.log.issue_order().len() as u64,
        }
    }

    /// The image a cut at `at` leaves (the operation in flight torn with `torn`), and the
    /// instant the recovered device's clock starts at.
    fn image(&self, at: u64, torn: bool) -> (Box<dyn flash::Store>, u64) {
        match self.cut {
            CutModel::Instant => (self.log.image_at(self.base.as_ref(), at, torn), at),
            CutModel::Prefix => {
                let writes = self.log.issue_order();
                let held = (at as usize + torn as usize).min(writes.len());
                let clock = writes[..held]
                    .iter()
                    .map(|&i| self.log.ops[i].span.end_ns)
                    .fold(self.start_ns, u64::max);
                let image = self
                    .log
                    .image_after_writes(self.base.as_ref(), at as usize, torn);
                (image, clock)
            }
        }
    }

    /// kv: the keys of [`Self::transactions`], in insertion order.
    fn keys_in_order(&self) -> Vec<i64> {
        let mut keys = self.prior.keys.clone();
        keys.extend(&self.keys);
        keys
    }

    /// `n` seeded cuts over the run, its end among them.
    fn instants(&self, n: usize, seed: u64) -> Vec<u64> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut instants: Vec<u64> = (0..n.saturating_sub(1))
            .map(|_| rng.random_range(self.cut_range()))
            .collect();
        instants.push(*self.cut_range().end());
        instants
    }
}

pub fn run(cfg: &CrashConfig) -> Result<CrashReport, RunFailed> {
    let (rec, end_of_life) = record(cfg)?;
    let durable = durable_mode(cfg.open.mode, &cfg.open.synchronous);
    let mut report = CrashReport {
        durable_mode: durable,
        min_recovered: u64::MAX,
        run_erases: rec.erases(),
        run_gc_copies: rec.gc_copies(),
        media: crate::media::MediaRun::new(&cfg.device, rec.media_stats()).map(|mut m| {
            m.end_of_life = end_of_life;
            m
        }),
        ..CrashReport::default()
    };
    match (cfg.only_at, cfg.first_cut) {
        (Some(at), None) => report.note(judge(cfg, &rec, at, durable), at, None),
        (Some(at), Some(cut)) => match second_life::live(cfg, &rec, cut, durable) {
            Ok(Some(life)) => report.note(judge(cfg, &life, at, durable), at, Some(cut)),
            Ok(None) => report.lives_ended_by_media += 1,
            Err(why) => report.note(Err(why), cut, None),
        },
        (None, _) => {
            for at in rec.instants(cfg.crash_points, cfg.seed ^ 0x5eed_c0de) {
                report.note(judge(cfg, &rec, at, durable), at, None);
            }
            second_life::run_lives(cfg, &rec, &mut report);
        }
    }
    if report.violations == report.crash_points {
        report.min_recovered = 0;
    }
    Ok(report)
}

impl Recording {
    fn erases(&self) -> u64 {
        let erase = |op: &&flash::LoggedOp| matches!(op.kind, flash::OpKind::Erase { .. });
        self.log.ops.iter().filter(erase).count() as u64
    }

    /// What the recorded run's media did (zeros with the model off).
    fn media_stats(&self) -> flash::MediaStats {
        self.media.clone().unwrap_or_default()
    }

    fn gc_copies(&self) -> u64 {
        let copy = |op: &&flash::LoggedOp| {
            op.cause == flash::OpCause::GcCopy && matches!(op.kind, flash::OpKind::Program { .. })
        };
        self.log.ops.iter().filter(copy).count() as u64
    }
}

/// Why a recorded run (or a second life's) did not finish.
#[derive(Debug, thiserror::Error)]
pub enum RunFailed {
    #[error(transparent)]
    Sql(#[from] SqlError),
    /// The media ended it: the flash wore out, lost metadata the design cannot do without, or
    /// lost the version of a page a transaction needed ([`media`]); even the shortest run.
    #[error("the media ended the recorded run: {0}")]
    EndOfLife(String),
}

/// Builds the device (aged by [`CrashConfig::fill`]), loads the tables, then runs the
/// transactions with the flash recording. With the media model on, a run the media ends is
/// recorded again with half the transactions until one fits ([`crate::media::within_life`]);
/// the end of life met is returned beside it.
fn record(cfg: &CrashConfig) -> Result<(Recording, Option<crate::media::EndOfLife>), RunFailed> {
    let ended = |e: &RunFailed| match e {
        RunFailed::EndOfLife(why) => Some(why.clone()),
        RunFailed::Sql(_) => None,
    };
    crate::media::within_life(cfg.transactions, |n| record_once(cfg, n), ended)
}

/// [`record`] with `n` transactions.
fn record_once(cfg: &CrashConfig, n: u64) -> Result<Recording, RunFailed> {
    watched(cfg, || {
        let dev = lab::device::fresh(&cfg.design, &cfg.device, &cfg.options, false)
            .map_err(SqlError::from)?;
        let dev = age(dev, cfg.fill, cfg.seed)?;
        let db = Database::create(dev, &cfg.open)?;
        workload::setup(&db, cfg.workload, cfg.scale)?;
        let (base, start_ns) = db.with_store_mut(|s| -> Result<_, SqlError> {
            s.make_durable()?;
            let now = s.now_ns();
            Ok((s.device_mut().flash_mut().start_recording(), now))
        })?;
        let start = RunStart {
            base,
            start_ns,
            prior: Prior::default(),
            versions_before: BTreeMap::new(),
        };
        let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);
        record_run(cfg, db, start, n, &mut rng)
    })
}

/// Runs `f` (a recorded run) with the store's evidence watched when the media model is on,
/// and gives the recording the page versions it wrote.
fn watched(
    cfg: &CrashConfig,
    f: impl FnOnce() -> Result<Recording, RunFailed>,
) -> Result<Recording, RunFailed> {
    if !crate::media::on(&cfg.device) {
        return f();
    }
    let (rec, seen) = evidence::watch(f);
    let mut rec = rec?;
    rec.versions = media::Versions::new(std::mem::take(&mut rec.versions_before), &seen);
    Ok(rec)
}

/// Where a recorded run starts: the image when recording began, the instant, and what the
/// database held.
struct RunStart {
    base: Box<dyn flash::Store>,
    start_ns: u64,
    prior: Prior,
    /// The page versions a cut before this run left possible (media model only).
    versions_before: BTreeMap<u32, Vec<u64>>,
}

/// Runs `n` transactions of the workload on `db` (its flash recording since `start`), then
/// cuts the power: the recorded run, with the instants the commits returned, (kv) the keys
/// they inserted, and its end (the last flash operation or acknowledgement).
fn record_run(
    cfg: &CrashConfig,
    db: Database,
    start: RunStart,
    n: u64,
    rng: &mut ChaCha8Rng,
) -> Result<Recording, RunFailed> {
    let mut acked_ns = Vec::new();
    let mut acked_ops = Vec::new();
    let mut keys = Vec::new();
    for _ in 0..n {
        let done = start.prior.found + acked_ns.len() as u64;
        let step = match workload::transaction(&db, cfg.workload, cfg.scale, done, rng) {
            Ok(step) => step,
            Err(e) => return Err(failed_run(cfg, &db, &start.versions_before, e)),
        };
        keys.extend(step.key);
        if step.wrote {
            acked_ns.push(db.now_ns());
            acked_ops.push(db.with_store(|s| s.device().flash().logged_ops()));
        }
    }
    let mut flash = db.cut_power().into_flash();
    let end_ns = flash
        .idle_ns()
        .max(acked_ns.last().copied().unwrap_or(start.start_ns));
    let media = crate::media::on(&cfg.device).then(|| flash.stats().media.clone());
    let log = flash.take_log().expect("recording was on");
    let writes_before = log.writes_before();
    Ok(Recording {
        base: start.base,
        log,
        start_ns: start.start_ns,
        end_ns,
        acked_ns,
        acked_writes: acked_ops.into_iter().map(|k| writes_before[k]).collect(),
        cut: cfg.cut,
        keys,
        prior: start.prior,
        versions: media::Versions::default(),
        versions_before: start.versions_before,
        media,
    })
}

/// What a transaction's failure `e` on `db` is: the end of the media's life when the flash
/// wore out or lost metadata the design cannot do without, or when every page the store read
/// as uncorrectable had its newest version lost to the media ([`media`]); else the failure.
fn failed_run(
    cfg: &CrashConfig,
    db: &Database,
    before: &BTreeMap<u32, Vec<u64>>,
    e: SqlError,
) -> RunFailed {
    if !crate::media::on(&cfg.device) {
        return RunFailed::Sql(e);
    }
    let seen = evidence::so_far();
    let ended = db.with_store(|s| {
        let flash = s.device().flash();
        let device = match &e {
            SqlError::Device(h) => Some(h),
            _ => None,
        };
        if let Some(h) = device
            .into_iter()
            .chain(&seen.device_errors)
            .find(|h| crate::media::host_end_of_life(h, flash))
        {
            return Some(h.to_string());
        }
        if seen.uncorrectable.is_empty() {
            return None;
        }
        let versions = media::Versions::new(before.clone(), &seen);
        let lost = media::lost_hashes(flash);
        match media::unaccepted(&seen.uncorrectable, &lost, |l| versions.needed_now(l)) {
            None => Some(format!(
                "logical page {} read uncorrectable: its version lost to the media",
                seen.uncorrectable[0]
            )),
            Some(_) => None,
        }
    });
    match ended {
        Some(why) => RunFailed::EndOfLife(why),
        None => RunFailed::Sql(e),
    }
}
/// Ages `dev`: writes the first `fill` of its logical pages once, in requests of
/// [`AGE_REQUEST_PAGES`], then as many single pages again at random among them (seeded), and
/// flushes. The random pass leaves every block a mix of live and dead pages, as on a device
/// that held other data, so GC must copy live pages while the database's transactions commit
/// (after the sequential pass alone its victims were the database's own dead blocks, with
/// nothing to copy).
fn age(
    dev: Box<dyn ftl::BlockDevice>,
    fill: f64,
    seed: u64,
) -> Result<Box<dyn ftl::BlockDevice>, SqlError> {
    if !(0.0..=1.0).contains(&fill) {
        return Err(SqlError::InvalidFill(fill));
    }
    let pages = (dev.logical_pages() as f64 * fill) as u64;
    if pages == 0 {
        return Ok(dev);
    }
    let start_ns = dev.flash().idle_ns();
    let mut driver = lab::driver::Driver::over(dev, start_ns);
    let mut at = driver.fill(pages as u32, AGE_REQUEST_PAGES, start_ns)?;
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0xa9ed_f111);
    for _ in 0..pages {
        let page = rng.random_range(0..pages);
        at = driver.write(flash::Lpn(page as u32), 1, at)?;
    }
    driver.flush(at)?;
    Ok(driver.into_device())
}

/// Pages per write request of [`age`]'s sequential pass.
const AGE_REQUEST_PAGES: u32 = 32;

/// Recovers the image of a cut at `at` and judges the database ([`Judged`]).
fn judge(cfg: &CrashConfig, rec: &Recording, at: u64, durable: bool) -> Result<Judged, Breach> {
    let Some(dev) = recover_device(cfg, rec, at)? else {
        return Ok(Judged::LostToMedia);
    };
    match check_database(cfg, rec, dev, at, durable)? {
        Ok((_, k)) => Ok(Judged::Recovered {
            k,
            all: k >= rec.committed_by(at),
        }),
        Err(judged) => Ok(judged),
    }
}

/// The design recovered from the image of a cut of `rec` at `at`, its invariants checked;
/// `None` when its recovery stopped at metadata the ECC found lost while it ran (media model
/// only: [`crate::media::lost_to_media`]).
fn recover_device(
    cfg: &CrashConfig,
    rec: &Recording,
    at: u64,
) -> Result<Option<Box<dyn ftl::BlockDevice>>, Breach> {
    let (image, clock) = rec.image(at, cfg.torn);
    let mut flash = Flash::new(cfg.device.clone(), image);
    flash.start_clock_at(clock);
    let (reopened, lost) =
        flash::media::error_log::watch(|| cfg.design.reopen(flash, &cfg.options));
    let dev = match reopened {
        Ok((dev, _)) => dev,
        Err(e) if crate::media::lost_to_media(&e, &lost) => return Ok(None),
        Err(e) => return Err(Breach::Recovery(e)),
    };
    dev.check_invariants().map_err(Breach::Invariant)?;
    Ok(Some(dev))
}

/// [`check_plain`], and with the media model on the oracle's rules ([`media`]): a check that
/// failed because the device met the end of its life while SQLite opened or read the database
/// (worn out, or `MediaLoss` naming a page the ECC found lost meanwhile: the design's GC met a
/// live page whose record it cannot do without) is `Err(`[`Judged::LostToMedia`]`)`; one
/// that failed while the store read pages as uncorrectable is `Err(`[`Judged::ErrorAccepted`]`)`
/// when the media lost, for each, a version the database may hold there after the cut at `at`
/// (or one it wrote since), else a violation, [`Breach::NotLost`] naming the page.
fn check_database(
    cfg: &CrashConfig,
    rec: &Recording,
    dev: Box<dyn ftl::BlockDevice>,
    at: u64,
    durable: bool,
) -> Result<Result<(Database, u64), Judged>, Breach> {
    if !crate::media::on(&cfg.device) {
        return check_plain(cfg, rec, dev, at, durable).map(Ok);
    }
    let mut lost = media::lost_hashes(dev.flash());
    let page_bytes = dev.flash().geometry().page_bytes as usize;
    let (((checked, found), found_ppns), seen) = evidence::watch(|| {
        flash::media::error_log::watch(|| {
            flash::media::error_log::watch_contents(|| check_plain(cfg, rec, dev, at, durable))
        })
    });
    // Pages the check's own reads found lost (read disturb and time age them further).
    lost.extend(found.iter().map(|c| evidence::page_hash(c, page_bytes)));
    let breach = match checked {
        Ok(x) => return Ok(Ok(x)),
        Err(b) => b,
    };
    let direct = match &breach {
        Breach::DoesNotOpen(SqlError::Device(h)) => Some(h),
        _ => None,
    };
    let ended =
        |h: &host::HostError| crate::media::host_end_of_life_by(h, |p| found_ppns.contains(&p));
    if direct.into_iter().chain(&seen.device_errors).any(ended) {
        return Ok(Err(Judged::LostToMedia));
    }
    if seen.uncorrectable.is_empty() {
        return Err(breach);
    }
    let needed = |l: u32| {
        let mut v = rec.versions.allowed(l, at);
        v.extend(seen.writes.iter().filter(|w| w.lpn == l).map(|w| w.hash));
        v
    };
    match media::unaccepted(&seen.uncorrectable, &lost, needed) {
        None => Ok(Err(Judged::ErrorAccepted)),
        Some(lpn) => Err(Breach::NotLost { lpn }),
    }
}

/// Opens the database on a device recovered from a cut of `rec` at `at` (SQLite's own
/// recovery runs here) and checks it: integrity and the workload's invariant, a prefix of the
/// transactions (kv: the very keys), no more than ran, and in a durable mode every commit that
/// had returned. The open database and the transactions it holds.
fn check_plain(
    cfg: &CrashConfig,
    rec: &Recording,
    dev: Box<dyn ftl::BlockDevice>,
    at: u64,
    durable: bool,
) -> Result<(Database, u64), Breach> {
    let db = Database::open(dev, &cfg.open).map_err(Breach::DoesNotOpen)?;
    workload::check_invariant(&db, cfg.workload)?;
    let k = workload::committed_count(&db, cfg.workload).map_err(Breach::DoesNotOpen)?;
    if cfg.workload == Workload::Kv {
        let keys = rec.keys_in_order();
        check_key_prefix(&db, &keys[..(k as usize).min(keys.len())])?;
    }
    if k > rec.transactions() {
        return Err(Breach::MoreThanRan {
            found: k,
            ran: rec.transactions(),
        });
    }
    let committed = rec.committed_by(at);
    if durable && k < committed {
        return Err(Breach::LostCommits {
            committed,
            at_ns: at,
            found: k,
        });
    }
    Ok((db, k))
}
/// The `mobius crashtest` command that runs `cfg` again: with `instant`, it rebuilds and judges
/// only the image of a cut then (a violation's replay); without, the whole campaign. The device
/// is spelt out as `--set` overrides of its preset, and every design parameter is given.
pub fn replay_command(cfg: &CrashConfig, instant: Option<u64>, first_cut: Option<u64>) -> String {
    let mut c = crate::design_and_device_args(cfg.design.name, &cfg.device, &cfg.options);
    c.push_str(&format!(
        " --workload sqlite-{} --mode {} --synchronous {} --tx {} --requests {} --fill {} --seed {}",
        cfg.workload.name(),
        cfg.open.mode.name(),
        cfg.open.synchronous,
        cfg.open.tx_kind.name(),
        cfg.transactions,
        cfg.fill,
        cfg.seed
    ));
    if cfg.torn {
        c.push_str(" --torn");
    }
    c.push_str(cfg.cut.arg());
    match (instant, first_cut) {
        (Some(at), Some(cut)) => c.push_str(&format!(" --first-cut {cut} --replay-instant {at}")),
        (Some(at), None) => c.push_str(&format!(" --replay-instant {at}")),
        (None, _) => c.push_str(&format!(
            " --crash-points {} --second-lives {}",
            cfg.crash_points, cfg.second_lives
        )),
    }
    c
}

/// The keys present are exactly the first k inserted: no gap, no later key.
fn check_key_prefix(db: &Database, expected: &[i64]) -> Result<(), Breach> {
    const KEYS: &str = "SELECT k FROM kv ORDER BY k";
    let mut stmt = db.conn().prepare(KEYS).map_err(Breach::query(KEYS))?;
    let mut present: Vec<i64> = stmt
        .query_map([], |r| r.get(0))
        .map_err(Breach::query(KEYS))?
        .collect::<Result<_, _>>()
        .map_err(Breach::query(KEYS))?;
    let mut want = expected.to_vec();
    want.sort_unstable();
    want.dedup();
    present.dedup();
    if present != want {
        return Err(Breach::KeyGap {
            present: present.len(),
            expected: expected.len(),
        });
    }
    Ok(())
}

/// Campaign settings for a negative control that must fail: batch mode on a design without
/// transactions (writes go out one by one).
pub fn plain_writes(mut open: OpenOptions) -> OpenOptions {
    open.mode = Mode::Batch;
    open.tx_kind = TxKind::PlainWrites;
    open
}
