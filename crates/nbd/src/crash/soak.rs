//! Soak of NBD exports under power cuts: [`super::run`] campaigns over many seeds and designs.
//!
//! One campaign per (design, seed) cell, on all cores, never stopping at a failure. Each seed
//! chooses deterministically, for its design:
//!
//! - atomic requests (three seeds in four, on a design with static transactions) or plain
//!   requests, each judged against what it promises;
//! - a geometry and a flash timing of the FTL soak ([`ftl_soak::SOAK_GEOMETRIES`], [`ftl_soak::SOAK_TIMINGS`]) and
//!   one of the design's soak parameter sets, drawn as the FTL soak draws them;
//! - how aged the device is ([`FILLS`]);
//! - the run length ([`BASE_REQUESTS`] or, one seed in four, [`LONG_REQUESTS`]);
//! - one seed in four, the design's over-provisioning turned down to the lowest it accepts.
//!
//! A failing cell prints the command that replays its first violation.

use super::{NbdCrashConfig, NbdCrashReport};
use crashtest::soak::{self as ftl_soak, CellsReport, SoakCell};
use ftl::{DesignOptions, DesignSpec, Promise};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

/// Requests a cell runs after aging the device...
pub const BASE_REQUESTS: u64 = 600;
/// ...or, one seed in four, this many.
pub const LONG_REQUESTS: u64 = 2400;

/// Shares of the exported pages written before the requests run ([`NbdCrashConfig::fill`]).
pub const FILLS: [f64; 4] = [0.0, 0.5, 0.8, 0.95];

/// What to soak.
#[derive(Clone)]
pub struct NbdSoakConfig {
    pub designs: Vec<DesignSpec>,
    pub seeds: Vec<u64>,
    /// Options every cell runs with (a soak parameter set adds to them; given keys win).
    pub options: DesignOptions,
    pub crash_points: usize,
    pub torn: bool,
    pub jobs: usize,
    /// `Some(true)`: atomic requests on every cell (designs without static transactions are
    /// left out); `Some(false)`: plain requests; `None`: drawn.
    pub atomic_requests: Option<bool>,
    /// Judge against this promise (the negative controls).
    pub promise: Option<Promise>,
    /// Atomic requests read with plain reads (a negative control).
    pub plain_reads: bool,
    /// Second lives per cell ([`NbdCrashConfig::second_lives`]).
    pub second_lives: usize,
    /// How every cell cuts its images ([`NbdCrashConfig::cut`]).
    pub cut: crashtest::prefix::CutModel,
    /// The media model every cell's device runs with, seeded by the cell's seed (`None`: off;
    /// [`super::media`]), as the block soak's ([`ftl_soak::SoakConfig::media`]).
    pub media: Option<flash::MediaConfig>,
}

/// Whether `design` can export atomic requests (static transactions).
pub fn has_atomic_requests(design: &DesignSpec, options: &DesignOptions) -> bool {
    ftl_soak::capabilities(design, options).is_some_and(|c| c.static_tx)
}

/// What one seed chose for one design.
#[derive(Clone, Debug)]
pub struct Variant {
    pub atomic_requests: bool,
    /// The device, options and fill the seed drew ([`ftl_soak::draw_device`]).
    pub drawn: ftl_soak::DrawnDevice,
    pub requests: u64,
}

impl Variant {
    pub fn choose(cfg: &NbdSoakConfig, design: &DesignSpec, seed: u64) -> Variant {
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x0b1c_50a4);
        let atomic_drawn = rng.random_range(0..4) != 0;
        let can = has_atomic_requests(design, &cfg.options);
        let atomic_requests = cfg.atomic_requests.unwrap_or(atomic_drawn) && can;
        let drawn = ftl_soak::draw_device(&mut rng, design, &cfg.options, seed, &FILLS);
        Variant {
            atomic_requests,
            requests: match drawn.long {
                true => LONG_REQUESTS,
                false => BASE_REQUESTS,
            },
            drawn,
        }
    }

    pub fn campaign(&self, cfg: &NbdSoakConfig, design: &DesignSpec, seed: u64) -> NbdCrashConfig {
        let mut device = self.drawn.device.clone();
        if let Some(media) = &cfg.media {
            device.media = Some(media.clone());
        }
        NbdCrashConfig {
            design: design.clone(),
            device: crashtest::with_media_seed(device, seed),
            options: self.drawn.options.clone(),
            atomic_requests: self.atomic_requests,
            promise: cfg.promise,
            plain_reads: cfg.plain_reads,
            requests: self.requests,
            fill: self.drawn.fill,
            crash_points: cfg.crash_points,
            torn: cfg.torn,
            seed,
            only_at: None,
            second_lives: cfg.second_lives,
            first_cut: None,
            cut: cfg.cut,
        }
    }
}

/// One (design, seed) campaign.
#[derive(Clone, Debug, Serialize)]
pub struct NbdCell {
    pub design: String,
    pub seed: u64,
    pub atomic_requests: bool,
    pub promise: String,
    #[serde(flatten)]
    pub drawn: ftl_soak::DrawnColumns,
    pub requests: u64,
    pub report: Option<NbdCrashReport>,
    /// The command that replays the first violation (or reruns a campaign that failed).
    pub replay: Option<String>,
    /// The campaign could not run, or the export refused a request it must take (a failure).
    pub error: Option<String>,
    pub wall_s: f64,
}

pub fn run_cell(cfg: &NbdSoakConfig, design: &DesignSpec, seed: u64) -> NbdCell {
    let wall = std::time::Instant::now();
    let variant = Variant::choose(cfg, design, seed);
    let campaign = variant.campaign(cfg, design, seed);
    let mut cell = NbdCell {
        design: design.name.to_string(),
        seed,
        atomic_requests: variant.atomic_requests,
        promise: campaign.promise().name().to_string(),
        drawn: variant.drawn.columns(&cfg.options),
        requests: variant.requests,
        report: None,
        replay: None,
        error: None,
        wall_s: 0.0,
    };
    match super::run(&campaign) {
        Ok(r) => {
            cell.replay = r.failed().then(|| super::replay_of(&campaign, &r));
            cell.report = Some(r);
        }
        Err(e) => {
            cell.error = Some(e.to_string());
            cell.replay = Some(super::replay_command(&campaign, None, None));
        }
    }
    cell.wall_s = wall.elapsed().as_secs_f64();
    cell
}

/// Every cell, in (design, seed) order.
pub type NbdSoakReport = CellsReport<NbdCell>;

impl SoakCell for NbdCell {
    fn design(&self) -> &str {
        &self.design
    }
    fn failed(&self) -> bool {
        self.error.is_some() || self.report.as_ref().is_some_and(NbdCrashReport::failed)
    }
    fn crash_points(&self) -> usize {
        self.report.as_ref().map_or(0, |r| r.crash_points)
    }
    /// Cuts that broke the promise, and READs that missed the last write.
    fn violations(&self) -> usize {
        self.report
            .as_ref()
            .map_or(0, |r| r.violations + r.read_mismatches)
    }
    fn gc_copies(&self) -> u64 {
        self.report.as_ref().map_or(0, |r| r.run_gc_copies)
    }
}

/// Runs every (design, seed) cell on `cfg.jobs` threads; `progress` sees each as it finishes.
pub fn run_soak(cfg: &NbdSoakConfig, progress: &(dyn Fn(&NbdCell) + Sync)) -> NbdSoakReport {
    let run = |design: &DesignSpec, seed| run_cell(cfg, design, seed);
    CellsReport::run(&cfg.designs, &cfg.seeds, cfg.jobs, &run, progress)
}

/// The media model's negative control, as the block soak's ([`crashtest::media::control`]):
/// `cfg`'s soak with a controller that hands on data the ECC did not correct, its bits flipped,
/// instead of failing the read. Every export then hands wrong bytes to its client or its own
/// recovery, which the checker must catch. `None` with the media model off.
pub fn media_control(cfg: &NbdSoakConfig) -> Option<NbdSoakConfig> {
    let mut control = cfg.clone();
    control.media.as_mut()?.hand_uncorrectable = true;
    Some(control)
}

/// An export that does not keep the promise it is judged against, which a soak must catch.
pub struct NbdControl {
    pub design: &'static str,
    /// Design options of the control (an injected bug).
    pub params: &'static [(&'static str, &'static str)],
    pub atomic_requests: bool,
    /// Judged against this instead of what the export promises.
    pub promise: Option<Promise>,
    pub plain_reads: bool,
    /// Second lives the fault needs to show (0: life one's cuts show it).
    pub second_lives: usize,
    pub what: &'static str,
}

/// The negative controls of the NBD soak.
pub const CONTROLS: [NbdControl; 4] = [
    NbdControl {
        design: "dftl",
        params: &[],
        atomic_requests: false,
        promise: Some(Promise::AtomicTransactions),
        plain_reads: false,
        second_lives: 0,
        what: "plain requests believed atomic (unmodified databases without --atomic-requests)",
    },
    NbdControl {
        design: "wcache",
        params: &[],
        atomic_requests: false,
        promise: Some(Promise::DurableWrites),
        plain_reads: false,
        second_lives: 0,
        what: "a write-back cache believed to make every acknowledged write durable",
    },
    NbdControl {
        design: "mobius",
        params: &[],
        atomic_requests: true,
        promise: None,
        plain_reads: true,
        second_lives: 0,
        what:
            "atomic requests whose read-modify-write reads plainly, before earlier SWRITEs commit",
    },
    NbdControl {
        design: "mobius",
        params: &[("inject_bug", "stale_validity")],
        atomic_requests: true,
        promise: None,
        plain_reads: false,
        second_lives: 2,
        what: "a recovery that leaves translation-page mappings invalid: GC erases them later",
    },
];

impl NbdControl {
    /// `--promise` and `--plain-reads` as a replay command spells them.
    pub fn describe(&self) -> String {
        let mut d = if self.atomic_requests {
            "atomic requests"
        } else {
            "plain requests"
        }
        .to_string();
        if let Some(p) = self.promise {
            d.push_str(&format!(" judged as {}", p.name()));
        }
        if self.plain_reads {
            d.push_str(", plain reads");
        }
        for (k, v) in self.params {
            d.push_str(&format!(", {k}={v}"));
        }
        if self.second_lives > 0 {
            d.push_str(&format!(", {} second lives", self.second_lives));
        }
        d
    }
}
