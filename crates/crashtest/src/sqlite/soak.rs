//! Soak of SQLite under power cuts: [`super`] campaigns over many seeds, designs,
//! commit paths, workloads and devices.
//!
//! A fixed seed is a regression guard, not a proof: the SQLite matrix of docs/sqlite.md runs
//! each (design, mode, workload) cell once, with one seed, on the `small` preset, on a fresh
//! device on which garbage collection never copies a page. A soak runs one campaign per
//! (design, seed) cell, on all cores, never stops at a failure, and lets each seed choose
//! deterministically, for its design:
//!
//! - the workload (kv, tpcb, tpcc);
//! - the commit path, one of the [`settings`] the design can run: the mode, `PRAGMA
//!   synchronous` (durable settings, and the weaker ones that promise only a prefix) and, in
//!   batch mode, static or dynamic transactions;
//! - a geometry and a flash timing of the FTL soak ([`crate::soak::SOAK_GEOMETRIES`],
//!   [`crate::soak::SOAK_TIMINGS`]) and one of the design's soak parameter sets;
//! - how aged the device is ([`FILLS`]: from fresh to 90 % of it written, so GC copies pages
//!   while the database commits);
//! - the run length ([`BASE_TRANSACTIONS`] or, one seed in four, [`LONG_TRANSACTIONS`]);
//! - one seed in four, the design's over-provisioning turned down to the lowest it accepts.
//!
//! With second lives ([`SqlSoakConfig::second_lives`]) each cell's recovered databases run on
//! and are cut again (`crash/second_life.rs`). A failing cell prints the command that replays its first violation exactly.

use super::{self as crash, CrashConfig, CrashReport};
use crate::soak::{self as ftl_soak, CellsReport, SoakCell};
use ftl::{DesignOptions, DesignSpec, Promise, TxCapabilities};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use sqlite::workload::{Scale, Workload};
use sqlite::{Mode, OpenOptions, TxKind};

/// Transactions a cell runs after the tables are loaded.
pub const BASE_TRANSACTIONS: u64 = 200;

/// The run length one seed in four draws instead: more of the WAL's checkpoints and of the
/// journal's extent reused, and more GC under an aged device.
pub const LONG_TRANSACTIONS: u64 = 800;

/// How much of the device a cell writes before formatting the database
/// ([`CrashConfig::fill`]).
pub const FILLS: [f64; 4] = [0.0, 0.5, 0.8, 0.9];

/// The fewest logical pages on which a cell runs TPC-C; on fewer it runs tpcb instead. Its load
/// is one transaction, which in WAL mode the WAL extent (a quarter of the logical pages) must
/// hold: it outgrew the 424 pages DFTL leaves it on `wide` (1,696 exported, SQLITE_FULL) and
/// fitted in 552.
pub const TPCC_MIN_LOGICAL_PAGES: u32 = 2400;

/// A commit path: how SQLite's commits reach the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Setting {
    pub mode: Mode,
    /// `PRAGMA synchronous`.
    pub synchronous: &'static str,
    pub tx_kind: TxKind,
}

impl Setting {
    const fn new(mode: Mode, synchronous: &'static str, tx_kind: TxKind) -> Setting {
        Setting {
            mode,
            synchronous,
            tx_kind,
        }
    }
}

/// The commit paths a design with these capabilities and this promise can run, each judged
/// against what it promises ([`sqlite::durability::durable_mode`]): every returned commit, or a prefix.
///
/// - every design: the rollback journal with EXTRA (durable) and FULL (a prefix: the journal's
///   deletion is not synced), WAL with FULL and EXTRA (durable) and NORMAL (a prefix);
/// - with static transactions: batch with FULL (durable) and NORMAL (a prefix); with dynamic
///   transactions and abort, batch as DWRITE chains too;
/// - on a device that keeps request order (OPTR): the ordered journal with EXTRA (durable) and
///   FULL (a prefix), and no barriers at all (a prefix).
pub fn settings(caps: Option<TxCapabilities>, promise: Promise) -> Vec<Setting> {
    use Mode::*;
    use TxKind::Static;
    let mut v = vec![
        Setting::new(Journal, "EXTRA", Static),
        Setting::new(Journal, "FULL", Static),
        Setting::new(Wal, "FULL", Static),
        Setting::new(Wal, "EXTRA", Static),
        Setting::new(Wal, "NORMAL", Static),
    ];
    if let Some(c) = caps.filter(|c| c.static_tx) {
        v.push(Setting::new(Batch, "FULL", Static));
        v.push(Setting::new(Batch, "NORMAL", Static));
        if c.dynamic_tx && c.abort {
            v.push(Setting::new(Batch, "FULL", TxKind::Dynamic));
        }
    }
    if promise == Promise::Ordered {
        v.push(Setting::new(Ordered, "EXTRA", Static));
        v.push(Setting::new(Ordered, "FULL", Static));
        v.push(Setting::new(NoBarrier, "FULL", Static));
    }
    v
}

/// What one seed chose for one design.
#[derive(Clone, Debug)]
pub struct Variant {
    pub workload: Workload,
    pub setting: Setting,
    /// The device, options and fill the seed drew ([`ftl_soak::draw_device`]).
    pub drawn: ftl_soak::DrawnDevice,
    pub transactions: u64,
}

/// What to soak.
#[derive(Clone)]
pub struct SqlSoakConfig {
    pub designs: Vec<DesignSpec>,
    pub seeds: Vec<u64>,
    /// Options every cell runs with (a soak parameter set adds to them; given keys win).
    pub options: DesignOptions,
    pub crash_points: usize,
    pub torn: bool,
    pub jobs: usize,
    /// Run only this workload (`None`: draw one).
    pub workload: Option<Workload>,
    /// Draw only among the commit paths this keeps.
    pub only: SettingFilter,
    /// Run every cell on this commit path instead of drawing one (the negative controls).
    pub setting: Option<Setting>,
    /// Second lives per cell ([`CrashConfig::second_lives`]).
    pub second_lives: usize,
    /// How every cell cuts its images ([`CrashConfig::cut`]).
    pub cut: crate::prefix::CutModel,
    /// The media model every cell's device runs with, seeded by the cell's seed (`None`: off;
    /// [`super::media`]).
    pub media: Option<flash::MediaConfig>,
}

/// The commit paths a soak was asked to draw from: each field given keeps only the settings
/// that match it.
#[derive(Clone, Debug, Default)]
pub struct SettingFilter {
    pub mode: Option<Mode>,
    pub synchronous: Option<String>,
    pub tx_kind: Option<TxKind>,
}

impl SettingFilter {
    pub fn keeps(&self, s: &Setting) -> bool {
        self.mode.is_none_or(|m| m == s.mode)
            && self
                .synchronous
                .as_deref()
                .is_none_or(|y| y.eq_ignore_ascii_case(s.synchronous))
            && self.tx_kind.is_none_or(|k| k == s.tx_kind)
    }
}

/// The commit paths a cell of `design` draws from: its [`settings`] the soak keeps (the
/// control's own, for a negative control). Empty when the design runs none of them.
pub fn settings_for(cfg: &SqlSoakConfig, design: &DesignSpec) -> Vec<Setting> {
    if let Some(s) = cfg.setting {
        return vec![s];
    }
    let caps = ftl_soak::capabilities(design, &cfg.options);
    let mut all = settings(caps, design.promise);
    all.retain(|s| cfg.only.keeps(s));
    all
}

impl Variant {
    /// The variant `seed` chooses for `design`; `None` when the design runs none of the
    /// commit paths the soak keeps ([`settings_for`]).
    pub fn choose(cfg: &SqlSoakConfig, design: &DesignSpec, seed: u64) -> Option<Variant> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5a1_50a4);
        let workloads = [Workload::Kv, Workload::Tpcb, Workload::Tpcc];
        let drawn = workloads[rng.random_range(0..workloads.len())];
        let workload = cfg.workload.unwrap_or(drawn);
        let settings = settings_for(cfg, design);
        if settings.is_empty() {
            return None;
        }
        let setting = settings[rng.random_range(0..settings.len())];
        let drawn = ftl_soak::draw_device(&mut rng, design, &cfg.options, seed, &FILLS);
        let mut variant = Variant {
            workload,
            setting,
            transactions: match drawn.long {
                true => LONG_TRANSACTIONS,
                false => BASE_TRANSACTIONS,
            },
            drawn,
        };
        if variant.workload == Workload::Tpcc && !variant.holds_tpcc(design) {
            variant.workload = Workload::Tpcb;
        }
        Some(variant)
    }

    /// Whether the design exports room for TPC-C's tables on this device
    /// ([`TPCC_MIN_LOGICAL_PAGES`]).
    fn holds_tpcc(&self, design: &DesignSpec) -> bool {
        let oob = design.oob_record(&self.drawn.device.geometry);
        let flash = flash::Flash::in_memory(self.drawn.device.clone(), oob, true);
        design
            .build(flash, &self.drawn.options)
            .is_ok_and(|dev| dev.logical_pages() >= TPCC_MIN_LOGICAL_PAGES)
    }

    /// The campaign of this variant.
    pub fn campaign(&self, cfg: &SqlSoakConfig, design: &DesignSpec, seed: u64) -> CrashConfig {
        let mut open = OpenOptions::new(self.setting.mode);
        open.synchronous = self.setting.synchronous.to_string();
        open.tx_kind = self.setting.tx_kind;
        open.seed = seed;
        let mut device = self.drawn.device.clone();
        if let Some(media) = &cfg.media {
            device.media = Some(media.clone());
            device = crate::with_media_seed(device, seed);
        }
        CrashConfig {
            design: design.clone(),
            device,
            options: self.drawn.options.clone(),
            open,
            workload: self.workload,
            scale: Scale::campaign(),
            transactions: self.transactions,
            crash_points: cfg.crash_points,
            torn: cfg.torn,
            seed,
            fill: self.drawn.fill,
            second_lives: cfg.second_lives,
            only_at: None,
            first_cut: None,
            cut: cfg.cut,
        }
    }
}

/// One (design, seed) campaign.
#[derive(Clone, Debug, Serialize)]
pub struct SqlCell {
    pub design: String,
    pub seed: u64,
    pub workload: String,
    pub mode: String,
    pub synchronous: String,
    pub tx: String,
    /// Every returned commit must survive (`false`: a prefix of the commits).
    pub durable: bool,
    #[serde(flatten)]
    pub drawn: ftl_soak::DrawnColumns,
    pub transactions: u64,
    pub report: Option<CrashReport>,
    /// The command that replays the first violation (or reruns a campaign that could not run).
    pub replay: Option<String>,
    /// The campaign could not run (counts as a failure).
    pub error: Option<String>,
    pub wall_s: f64,
}

/// Runs one cell. A design that runs none of the soak's commit paths must be left out of it
/// first ([`settings_for`]).
pub fn run_cell(cfg: &SqlSoakConfig, design: &DesignSpec, seed: u64) -> SqlCell {
    let wall = std::time::Instant::now();
    let variant = Variant::choose(cfg, design, seed).expect("the design runs a commit path");
    let campaign = variant.campaign(cfg, design, seed);
    let mut cell = SqlCell {
        design: design.name.to_string(),
        seed,
        workload: variant.workload.name().to_string(),
        mode: variant.setting.mode.name().to_string(),
        synchronous: variant.setting.synchronous.to_string(),
        tx: variant.setting.tx_kind.name().to_string(),
        durable: sqlite::durability::durable_mode(
            variant.setting.mode,
            variant.setting.synchronous,
        ),
        drawn: variant.drawn.columns(&cfg.options),
        transactions: variant.transactions,
        report: None,
        replay: None,
        error: None,
        wall_s: 0.0,
    };
    match crash::run(&campaign) {
        Ok(r) => {
            cell.replay = r
                .first_violation_ns
                .map(|at| crash::replay_command(&campaign, Some(at), r.first_violation_cut_ns));
            cell.report = Some(r);
        }
        Err(e) => {
            cell.error = Some(e.to_string());
            cell.replay = Some(crash::replay_command(&campaign, None, None));
        }
    }
    cell.wall_s = wall.elapsed().as_secs_f64();
    cell
}

/// Every cell, in (design, seed) order.
pub type SqlSoakReport = CellsReport<SqlCell>;

impl SoakCell for SqlCell {
    fn design(&self) -> &str {
        &self.design
    }
    fn failed(&self) -> bool {
        self.error.is_some() || self.report.as_ref().is_some_and(|r| r.violations > 0)
    }
    fn crash_points(&self) -> usize {
        self.report.as_ref().map_or(0, |r| r.crash_points)
    }
    fn violations(&self) -> usize {
        self.report.as_ref().map_or(0, |r| r.violations)
    }
    fn gc_copies(&self) -> u64 {
        self.report.as_ref().map_or(0, |r| r.run_gc_copies)
    }
}

/// Runs every (design, seed) cell on `cfg.jobs` threads; `progress` sees each as it finishes.
pub fn run_soak(cfg: &SqlSoakConfig, progress: &(dyn Fn(&SqlCell) + Sync)) -> SqlSoakReport {
    let run = |design: &DesignSpec, seed| run_cell(cfg, design, seed);
    CellsReport::run(&cfg.designs, &cfg.seeds, cfg.jobs, &run, progress)
}

/// A commit path that does not keep its promise on a design, which a soak must catch.
pub struct SqlControl {
    pub design: &'static str,
    pub setting: Setting,
    pub what: &'static str,
}

/// The negative controls of the SQLite soak.
pub const CONTROLS: [SqlControl; 2] = [
    SqlControl {
        design: "dftl",
        setting: Setting::new(Mode::Batch, "FULL", TxKind::PlainWrites),
        what: "batch commits sent as plain writes: SQLite believes the device atomic, it is not",
    },
    SqlControl {
        design: "wcache",
        setting: Setting::new(Mode::NoBarrier, "FULL", TxKind::Static),
        what: "no barriers on a write-back cache that keeps no order",
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    fn caps(static_tx: bool, dynamic_tx: bool, abort: bool) -> TxCapabilities {
        TxCapabilities {
            static_tx,
            dynamic_tx,
            abort,
            ..TxCapabilities::default()
        }
    }

    #[test]
    fn each_design_class_gets_the_commit_paths_it_can_run() {
        let plain = settings(None, Promise::DurableWrites);
        assert!(plain
            .iter()
            .all(|s| matches!(s.mode, Mode::Journal | Mode::Wal)));
        let ordered = settings(None, Promise::Ordered);
        assert!(ordered.iter().any(|s| s.mode == Mode::Ordered));
        assert!(ordered.iter().any(|s| s.mode == Mode::NoBarrier));
        let static_only = settings(Some(caps(true, false, false)), Promise::AtomicTransactions);
        assert!(static_only.iter().any(|s| s.mode == Mode::Batch));
        assert!(!static_only.iter().any(|s| s.tx_kind == TxKind::Dynamic));
        let full = settings(Some(caps(true, true, true)), Promise::AtomicTransactions);
        assert!(full.iter().any(|s| s.tx_kind == TxKind::Dynamic));
        assert!(full.iter().all(|s| s.tx_kind != TxKind::PlainWrites));
        // Both promises are judged: some settings promise every commit, some a prefix only.
        let durable = full
            .iter()
            .filter(|s| sqlite::durability::durable_mode(s.mode, s.synchronous))
            .count();
        assert!(durable > 0 && durable < full.len(), "{full:?}");
    }

    /// Möbius: static and dynamic transactions, abort.
    fn test_design() -> DesignSpec {
        mftl::spec()
    }

    fn soak_of(design: DesignSpec) -> SqlSoakConfig {
        SqlSoakConfig {
            designs: vec![design],
            seeds: Vec::new(),
            options: DesignOptions::default(),
            crash_points: 1,
            torn: false,
            jobs: 1,
            workload: None,
            only: SettingFilter::default(),
            setting: None,
            second_lives: 0,
            cut: crate::prefix::CutModel::Instant,
            media: None,
        }
    }

    /// Over 300 seeds a design with every primitive draws each of its commit paths, each
    /// workload, geometry, timing and fill, both run lengths and the low over-provisioning;
    /// the same seed draws the same variant.
    #[test]
    fn seeds_draw_every_commit_path_workload_and_device() {
        let design = test_design();
        let cfg = soak_of(design.clone());
        let mut seen = std::collections::BTreeSet::new();
        for seed in 0..300 {
            let v = Variant::choose(&cfg, &design, seed).expect("a commit path");
            let again = Variant::choose(&cfg, &design, seed).expect("a commit path");
            assert_eq!(format!("{v:?}"), format!("{again:?}"), "seed {seed}");
            seen.insert(format!("setting {:?}", v.setting));
            seen.insert(format!("workload {:?}", v.workload));
            seen.insert(format!("geometry {}", v.drawn.geometry));
            seen.insert(format!("timing {}", v.drawn.timing));
            seen.insert(format!("fill {}", v.drawn.fill));
            seen.insert(format!("transactions {}", v.transactions));
            seen.insert(format!("low op {}", v.drawn.over_provisioning.is_some()));
        }
        let caps = ftl_soak::capabilities(&design, &DesignOptions::default());
        let expected = settings(caps, design.promise).len()
            + 3
            + ftl_soak::SOAK_GEOMETRIES.len()
            + ftl_soak::SOAK_TIMINGS.len()
            + FILLS.len()
            + 2
            + 2;
        assert_eq!(seen.len(), expected, "{seen:#?}");
    }

    /// A filter keeps only the commit paths it names, and a control's own path replaces them.
    #[test]
    fn a_filter_and_a_control_narrow_the_commit_paths() {
        let design = test_design();
        let mut cfg = soak_of(design.clone());
        cfg.only.mode = Some(Mode::Wal);
        cfg.only.synchronous = Some("normal".into());
        let kept = settings_for(&cfg, &design);
        assert_eq!(
            kept,
            vec![Setting::new(Mode::Wal, "NORMAL", TxKind::Static)]
        );
        cfg.only.mode = Some(Mode::Ordered);
        assert!(
            settings_for(&cfg, &design).is_empty(),
            "not an ordered design"
        );
        assert!(Variant::choose(&cfg, &design, 1).is_none());
        cfg.setting = Some(CONTROLS[0].setting);
        assert_eq!(settings_for(&cfg, &design), vec![CONTROLS[0].setting]);
    }
}
