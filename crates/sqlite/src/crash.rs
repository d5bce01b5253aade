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
//! Before judging the database, the recovered design's own invariants must hold (as in the
//! crash checker). With [`CrashConfig::fill`] the device is aged first: that share of its logical
//! pages is written before the database is formatted, so the database's writes overwrite live
//! pages and garbage collection runs while the transactions commit (without it a campaign on a
//! fresh device cuts no GC at all: the database touches a few hundred of its pages).

use crate::error::{Breach, SqlError};
use crate::store::{Mode, TxKind};
use crate::workload::{self, Scale, Workload};
use crate::{Database, OpenOptions};
use flash::{DeviceConfig, Flash};
use ftl::{DesignOptions, DesignSpec};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

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
    /// Judge only a cut at this instant (a violation's replay).
    pub only_at: Option<u64>,
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
    pub first_violation: Option<String>,
    /// Instant of the first violation, for `--replay-instant`.
    pub first_violation_ns: Option<u64>,
}

/// The run before the cuts: what each transaction was and when its commit returned.
struct Recording {
    base: Box<dyn flash::Store>,
    log: flash::OpLog,
    start_ns: u64,
    end_ns: u64,
    /// Commit acknowledgement instants of the writing transactions, in order.
    acked_ns: Vec<u64>,
    /// kv: the key each transaction inserted.
    keys: Vec<i64>,
}

/// Whether a commit that returned is promised to survive (see the module doc).
pub fn durable_mode(mode: Mode, synchronous: &str) -> bool {
    let s = synchronous.to_ascii_lowercase();
    match mode {
        Mode::Batch | Mode::Wal => s == "full" || s == "extra",
        Mode::Journal | Mode::Ordered => s == "extra",
        Mode::NoBarrier => false,
    }
}

pub fn run(cfg: &CrashConfig) -> Result<CrashReport, SqlError> {
    let rec = record(cfg)?;
    let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed ^ 0x5eed_c0de);
    let mut instants: Vec<u64> = (0..cfg.crash_points.saturating_sub(1))
        .map(|_| rng.random_range(rec.start_ns..=rec.end_ns))
        .collect();
    instants.push(rec.end_ns);
    if let Some(at) = cfg.only_at {
        instants = vec![at];
    }
    let mut report = CrashReport {
        durable_mode: durable_mode(cfg.open.mode, &cfg.open.synchronous),
        min_recovered: u64::MAX,
        run_erases: rec.erases(),
        run_gc_copies: rec.gc_copies(),
        ..CrashReport::default()
    };
    for at in instants {
        report.crash_points += 1;
        match judge(cfg, &rec, at, report.durable_mode) {
            Ok((k, all)) => {
                report.min_recovered = report.min_recovered.min(k);
                report.max_recovered = report.max_recovered.max(k);
                report.all_commits_present += all as usize;
            }
            Err(why) => {
                report.violations += 1;
                if report.first_violation.is_none() {
                    report.first_violation = Some(why.to_string());
                    report.first_violation_ns = Some(at);
                }
            }
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

    fn gc_copies(&self) -> u64 {
        let copy = |op: &&flash::LoggedOp| {
            op.cause == flash::OpCause::GcCopy && matches!(op.kind, flash::OpKind::Program { .. })
        };
        self.log.ops.iter().filter(copy).count() as u64
    }
}

/// Builds the device (aged by [`CrashConfig::fill`]), loads the tables, then runs the
/// transactions with the flash recording.
fn record(cfg: &CrashConfig) -> Result<Recording, SqlError> {
    let oob = (cfg.design.oob_record_bytes)(&cfg.device.geometry);
    let dev = cfg.design.build(
        Flash::in_memory(cfg.device.clone(), oob, false),
        &cfg.options,
    )?;
    let dev = age(dev, cfg.fill, cfg.seed)?;
    let db = Database::create(dev, &cfg.open)?;
    workload::setup(&db, cfg.workload, cfg.scale)?;
    let (base, start_ns) = db.with_store_mut(|s| -> Result<_, SqlError> {
        s.make_durable()?;
        let now = s.now_ns();
        Ok((s.device_mut().flash_mut().start_recording(), now))
    })?;
    let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);
    let mut acked_ns = Vec::new();
    let mut keys = Vec::new();
    for _ in 0..cfg.transactions {
        let step = workload::transaction(
            &db,
            cfg.workload,
            cfg.scale,
            acked_ns.len() as u64,
            &mut rng,
        )?;
        keys.extend(step.key);
        if step.wrote {
            acked_ns.push(db.now_ns());
        }
    }
    let dev = db.cut_power();
    let mut flash = dev.into_flash();
    let end_ns = flash
        .idle_ns()
        .max(acked_ns.last().copied().unwrap_or(start_ns));
    let log = flash.take_log().expect("recording was on");
    Ok(Recording {
        base,
        log,
        start_ns,
        end_ns,
        acked_ns,
        keys,
    })
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
    let mut host = host::Host::new(dev, start_ns).tag_only();
    let page_bytes = host.page_bytes();
    let mut at = start_ns;
    for first in (0..pages).step_by(AGE_REQUEST_PAGES as usize) {
        let n = AGE_REQUEST_PAGES.min(pages - first);
        at = host.write_tags(first * page_bytes, n * page_bytes, false, at)?;
    }
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0xa9ed_f111);
    for _ in 0..pages {
        let page = rng.random_range(0..pages);
        at = host.write_tags(page * page_bytes, page_bytes, false, at)?;
    }
    host.flush(at)?;
    Ok(host.into_device())
}

/// Pages per write request of [`age`]'s sequential pass.
const AGE_REQUEST_PAGES: u64 = 32;

/// Recovers the image of a cut at `at` and judges the database. `Ok((k, all))`: k
/// transactions found, `all` when every transaction committed by `at` was among them.
fn judge(
    cfg: &CrashConfig,
    rec: &Recording,
    at: u64,
    durable: bool,
) -> Result<(u64, bool), Breach> {
    let image = rec.log.image_at(rec.base.as_ref(), at, cfg.torn);
    let mut flash = Flash::new(cfg.device.clone(), image);
    flash.start_clock_at(at);
    let (dev, _) = cfg
        .design
        .reopen(flash, &cfg.options)
        .map_err(Breach::Recovery)?;
    dev.check_invariants().map_err(Breach::Invariant)?;
    let db = Database::open(dev, &cfg.open).map_err(Breach::DoesNotOpen)?;
    workload::check_invariant(&db, cfg.workload)?;
    let k = workload::committed_count(&db, cfg.workload).map_err(Breach::DoesNotOpen)?;
    if cfg.workload == Workload::Kv {
        check_key_prefix(&db, &rec.keys[..(k as usize).min(rec.keys.len())])?;
    }
    let committed = rec.acked_ns.iter().take_while(|&&t| t <= at).count() as u64;
    if k > rec.acked_ns.len() as u64 {
        return Err(Breach::MoreThanRan {
            found: k,
            ran: rec.acked_ns.len() as u64,
        });
    }
    if durable && k < committed {
        return Err(Breach::LostCommits {
            committed,
            at_ns: at,
            found: k,
        });
    }
    Ok((k, k >= committed))
}

/// The `mobius crashtest` command that runs `cfg` again: with `instant`, it rebuilds and judges
/// only the image of a cut then (a violation's replay); without, the whole campaign. The device
/// is spelt out as `--set` overrides of its preset, and every design parameter is given.
pub fn replay_command(cfg: &CrashConfig, instant: Option<u64>) -> String {
    let mut c = format!(
        "mobius crashtest --ftl {} --preset {}",
        cfg.design.name, cfg.device.preset
    );
    for set in crashtest::device_overrides(&cfg.device) {
        c.push_str(&format!(" --set {set}"));
    }
    for (k, v) in &cfg.options.params {
        c.push_str(&format!(" --param {k}={v}"));
    }
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
    match instant {
        Some(at) => c.push_str(&format!(" --replay-instant {at}")),
        None => c.push_str(&format!(" --crash-points {}", cfg.crash_points)),
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
