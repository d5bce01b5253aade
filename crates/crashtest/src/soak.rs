//! Soak: crash campaigns over many seeds, designs, workload shapes and geometries.
//!
//! A fixed seed is a regression guard, not a proof (issue #22: LightTx lost durable writes on 10
//! of 21 seeds while the tests' seeds passed). A soak runs one campaign per (design, seed) cell,
//! on all cores, and never stops at a failure. Each seed also chooses, deterministically, the
//! cell's [`Variant`] — a workload shape the design supports (txmix, random writes with flushes,
//! large transactions, abort-heavy, trim-heavy, dynamic transactions interleaved with other
//! requests), a queue depth, a fill, a geometry (one of
//! [`SOAK_GEOMETRIES`]: the `small` preset, wider, deeper, odd-sized, many-chipped and
//! short-blocked shapes), a flash timing, a run length ([`BASE_REQUESTS`] or, one seed in four,
//! [`LONG_REQUESTS`]) and, one seed in four, the design's over-provisioning turned down to the
//! lowest it accepts ([`LOW_OVER_PROVISIONING`]) — so one design bug does not hide behind one
//! workload shape or one device. Every failing cell prints the command that replays its first
//! violation exactly; [`shrink`] then reduces a failing cell to the smallest run that still
//! fails.

use crate::prefix::CutModel;
use crate::second_life::run_campaign_cut;
use crate::{replay_command, CampaignConfig, CampaignReport, PhaseTimes, Speed};
use flash::{DeviceConfig, Flash};
use ftl::{DesignOptions, DesignSpec, FtlError, OverProvisioningKnob, Promise, TxCapabilities};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use workload::WorkloadSpec;

/// Workload shapes a soak draws from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Shape {
    /// Every primitive the design offers (txmix).
    Txmix,
    /// Random writes with a flush every 16–128 writes.
    RandwriteFlush,
    /// Static transactions of 16–64 pages.
    LargeTx,
    /// Half the transactions aborted by the host.
    AbortHeavy,
    /// One request in five a trim.
    TrimHeavy,
    /// Dynamic transactions left open across other requests: while one is open, half or nine
    /// in ten of the requests are plain writes, static transactions, trims (5 or 10 % of all
    /// requests), flushes or (on designs that run several) more dynamic transactions.
    Interleaved,
}

impl Shape {
    /// Every shape, in the order a seed draws from (the order [`Shape::for_caps`] keeps).
    pub const ALL: [Shape; 6] = [
        Shape::RandwriteFlush,
        Shape::TrimHeavy,
        Shape::Txmix,
        Shape::LargeTx,
        Shape::AbortHeavy,
        Shape::Interleaved,
    ];

    /// The shape of this name ([`Shape::name`]).
    pub fn named(name: &str) -> Option<Shape> {
        Shape::ALL.into_iter().find(|s| s.name() == name)
    }

    pub fn name(self) -> &'static str {
        match self {
            Shape::Txmix => "txmix",
            Shape::RandwriteFlush => "randwrite-flush",
            Shape::LargeTx => "large-tx",
            Shape::AbortHeavy => "abort-heavy",
            Shape::TrimHeavy => "trim-heavy",
            Shape::Interleaved => "interleaved",
        }
    }

    /// Whether a design with these capabilities (`None`: no transactions) can run this shape.
    pub fn supported_by(self, caps: Option<TxCapabilities>) -> bool {
        match (self, caps) {
            (Shape::RandwriteFlush | Shape::TrimHeavy, _) => true,
            (_, None) => false,
            (Shape::Txmix, Some(_)) => true,
            (Shape::LargeTx, Some(c)) => c.static_tx && c.max_tx_pages >= 16,
            (Shape::AbortHeavy, Some(c)) => c.abort,
            (Shape::Interleaved, Some(c)) => c.dynamic_tx,
        }
    }

    /// The shapes a design with these capabilities supports, in the order of [`Shape::ALL`].
    pub fn for_caps(caps: Option<TxCapabilities>) -> Vec<Shape> {
        Shape::ALL
            .into_iter()
            .filter(|s| s.supported_by(caps))
            .collect()
    }
}

/// What one seed chose for one design.
#[derive(Clone, Debug)]
pub struct Variant {
    pub shape: Shape,
    pub workload: WorkloadSpec,
    pub device: DeviceConfig,
    /// The name of its geometry in [`SOAK_GEOMETRIES`] (`fixed`: the soak's given device).
    pub geometry: &'static str,
    /// The name of its flash timing in [`SOAK_TIMINGS`] (`fixed`: the soak's given device).
    pub timing: &'static str,
    /// The over-provisioning the cell turned its design down to (one of
    /// [`LOW_OVER_PROVISIONING`]; `None`: the design's default).
    pub over_provisioning: Option<&'static str>,
}

/// The flash timings a varying soak draws from, by the preset that has them: the `small`
/// preset's SLC (read 25 µs, program 200 µs, erase 1.5 ms) and the `jasmine` preset's MLC (50 µs,
/// 900 µs, 3 ms). The longer programs and erases keep more operations in flight at a crash
/// instant, change the order in which queued requests complete, and lengthen what depends on
/// the program time (Möbius's merge window, §IV-E).
pub const SOAK_TIMINGS: [(&str, &str); 2] = [("slc", "small"), ("mlc", "jasmine")];

/// A device shape a soak draws from: the `small` preset's timing, over-provisioning and host
/// with this geometry (channels, chips per channel, blocks per chip, pages per block).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SoakGeometry {
    pub name: &'static str,
    pub channels: u32,
    pub chips_per_channel: u32,
    pub blocks_per_chip: u32,
    pub pages_per_block: u32,
}

/// The geometries a varying soak draws from, one per seed. A crash proof counts only when it
/// holds across geometries: each shape below changes what runs in parallel, how often GC and
/// the designs' metadata areas wrap, or where the arithmetic on addresses stops being powers of
/// two. All are 16–48 MB, so a cell stays a few seconds.
pub const SOAK_GEOMETRIES: [SoakGeometry; 6] = [
    // The `small` preset as it is.
    SoakGeometry {
        name: "small",
        channels: 2,
        chips_per_channel: 2,
        blocks_per_chip: 32,
        pages_per_block: 32,
    },
    // The same 16 MB over twice the chips: operations complete out of order.
    SoakGeometry {
        name: "wide",
        channels: 4,
        chips_per_channel: 2,
        blocks_per_chip: 16,
        pages_per_block: 32,
    },
    // Every operation on one chip, in order; blocks twice as long.
    SoakGeometry {
        name: "one-chip",
        channels: 1,
        chips_per_channel: 1,
        blocks_per_chip: 64,
        pages_per_block: 64,
    },
    // No count a power of two: chips, blocks and pages found by division.
    SoakGeometry {
        name: "odd",
        channels: 3,
        chips_per_channel: 3,
        blocks_per_chip: 24,
        pages_per_block: 48,
    },
    // 32 chips of 12 blocks: open blocks and GC reserves take a large share of each chip.
    SoakGeometry {
        name: "many-chips",
        channels: 8,
        chips_per_channel: 4,
        blocks_per_chip: 12,
        pages_per_block: 32,
    },
    // The `small` preset in 16-page blocks: areas sized in blocks (Möbius's ALA ring, logs,
    // reserves) hold half as many pages, and GC frees fewer pages per victim (a probe on this
    // shape found Möbius full under large transactions; docs/mobius.md).
    SoakGeometry {
        name: "short-blocks",
        channels: 2,
        chips_per_channel: 2,
        blocks_per_chip: 64,
        pages_per_block: 16,
    },
];

impl SoakGeometry {
    /// Looks a shape up by name.
    pub fn named(name: &str) -> Option<SoakGeometry> {
        SOAK_GEOMETRIES.iter().copied().find(|g| g.name == name)
    }

    /// The `small` preset with this geometry.
    pub fn device(&self) -> DeviceConfig {
        let mut d = DeviceConfig::preset("small").expect("small preset");
        d.geometry.channels = self.channels;
        d.geometry.chips_per_channel = self.chips_per_channel;
        d.geometry.blocks_per_chip = self.blocks_per_chip;
        d.geometry.pages_per_block = self.pages_per_block;
        d
    }
}

/// The `small` preset spread over 8 chips (4 channels × 2) with half the blocks per chip: the
/// same 16 MB, twice the parallelism, so operations complete out of order across more chips.
pub fn wide_device() -> DeviceConfig {
    SoakGeometry::named("wide").expect("wide geometry").device()
}

/// Base run length of every cell (requests after the fill), as `mobius crashtest`.
pub const BASE_REQUESTS: u64 = 3000;

/// The run length one varying seed in four draws instead. Space a design keeps live beside the
/// data (TxFlash TC's commit records, logs, checkpoints) can take several times the device's
/// capacity in writes to outgrow its reserve: TC ran out of space after 4,800–9,200 txmix
/// requests at 90 % fill, which no 3,000-request cell reached (docs/txflash.md).
pub const LONG_REQUESTS: u64 = 20_000;

impl Variant {
    /// The variant `seed` chooses for a design with capabilities `caps`.
    /// Geometries `fits` turns down are not drawn (the design refuses the soak's own options
    /// there), unless it turns down every one.
    pub fn choose(
        seed: u64,
        caps: Option<TxCapabilities>,
        only: &[Shape],
        fits: &dyn Fn(&DeviceConfig) -> bool,
    ) -> Variant {
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5eed_50a4);
        let mut shapes = Shape::for_caps(caps);
        if !only.is_empty() {
            shapes.retain(|s| only.contains(s));
            assert!(!shapes.is_empty(), "no shape in {only:?} suits the design");
        }
        let shape = shapes[rng.random_range(0..shapes.len())];
        let mut geometries: Vec<SoakGeometry> = SOAK_GEOMETRIES
            .into_iter()
            .filter(|g| fits(&g.device()))
            .collect();
        if geometries.is_empty() {
            geometries = SOAK_GEOMETRIES.to_vec();
        }
        let geometry = geometries[rng.random_range(0..geometries.len())];
        let mut w = shape_workload(shape, caps, &mut rng);
        w.requests = BASE_REQUESTS;
        w.fill = [0.5, 0.8, 0.8, 0.9][rng.random_range(0..4)];
        w.queue_depth = [1, 4, 8, 16][rng.random_range(0..4)];
        // Drawn last, so a seed's shape, geometry, fill and queue depth are what they were
        // before timings were drawn.
        let (timing, preset) = SOAK_TIMINGS[rng.random_range(0..SOAK_TIMINGS.len())];
        // Drawn after the timing, for the same reason.
        if rng.random_range(0..4) == 0 {
            w.requests = LONG_REQUESTS;
        }
        let mut device = geometry.device();
        device.timing = DeviceConfig::preset(preset).expect("timing preset").timing;
        Variant {
            shape,
            workload: w,
            device,
            geometry: geometry.name,
            timing,
            over_provisioning: None,
        }
    }
}

fn shape_workload(
    shape: Shape,
    caps: Option<TxCapabilities>,
    rng: &mut ChaCha8Rng,
) -> WorkloadSpec {
    let named = |n: &str| WorkloadSpec::named(n).expect("known workload");
    match shape {
        Shape::Txmix => named("txmix"),
        Shape::RandwriteFlush => {
            let mut w = named("randwrite-flush");
            w.flush_every = [16, 64, 128][rng.random_range(0..3)];
            w
        }
        Shape::LargeTx => {
            let mut w = named("txmix");
            let max = caps.map_or(16, |c| c.max_tx_pages.min(64) as u32);
            w.request_pages = max;
            w.min_tx_pages = 16.min(max);
            w
        }
        Shape::AbortHeavy => {
            let mut w = named("txmix");
            w.abort_fraction = 0.5;
            w
        }
        Shape::TrimHeavy => {
            let mut w = named(if caps.is_some() {
                "txmix"
            } else {
                "randwrite-flush"
            });
            w.trim_fraction = 0.2;
            w
        }
        Shape::Interleaved => {
            // At 0.9 many transactions are open at once and hold most of the room for
            // transactions in flight (a TxFlash trim then went page by page: docs/txflash.md).
            let mut w = named("txmix");
            w.interleave_fraction = [0.5, 0.9][rng.random_range(0..2)];
            w.trim_fraction = [0.05, 0.1][rng.random_range(0..2)];
            w
        }
    }
}

/// The transactional capabilities of a design (formats it on a `small` tag-only device).
pub fn capabilities(design: &DesignSpec, options: &DesignOptions) -> Option<TxCapabilities> {
    let d = DeviceConfig::preset("small").expect("small preset");
    let mut dev = lab::device::fresh(design, &d, options, true).ok()?;
    dev.transactional().map(|t| t.capabilities())
}

/// What to soak.
#[derive(Clone)]
pub struct SoakConfig {
    pub designs: Vec<DesignSpec>,
    /// Judge every design against this promise instead of its own (negative controls).
    pub promise: Option<Promise>,
    pub options: DesignOptions,
    pub seeds: Vec<u64>,
    pub crash_points: usize,
    pub torn: bool,
    /// Cells run at once (each campaign on one thread).
    pub jobs: usize,
    /// Choose a variant per seed; `false` runs every cell on `fixed`.
    pub vary: bool,
    /// When varying, draw only from these shapes (empty: every shape the design supports).
    pub shapes: Vec<Shape>,
    /// The workload and device of each design's cells when `vary` is off, one per design in the
    /// order of `designs` (empty: each design's default workload on `small`, as `mobius
    /// crashtest`).
    pub fixed: Vec<(WorkloadSpec, DeviceConfig)>,
    /// Second lives per cell (see [`crate::second_life`]): cuts of life one after which the
    /// recovered device runs on and is cut again; each tries `crash_points / 4` instants.
    pub second_lives: usize,
    /// The media model every cell's device runs with, seeded by the cell's seed (`None`: off;
    /// [`crate::media`]).
    pub media: Option<flash::MediaConfig>,
    /// How every cell cuts its images: at simulated instants, or as a killed process leaves
    /// its image file ([`crate::prefix`]).
    pub cut: CutModel,
}

impl SoakConfig {
    /// A soak of `designs` over `seeds` in which each seed chooses its variant: the designs' own
    /// promises and options, every shape, 1,000 untorn crash points per cell, one job, no
    /// second lives.
    pub fn varying(designs: Vec<DesignSpec>, seeds: Vec<u64>) -> SoakConfig {
        SoakConfig {
            designs,
            promise: None,
            options: DesignOptions::default(),
            seeds,
            crash_points: 1000,
            torn: false,
            jobs: 1,
            vary: true,
            shapes: Vec::new(),
            fixed: Vec::new(),
            second_lives: 0,
            media: None,
            cut: CutModel::Instant,
        }
    }
}

/// One (design, seed) campaign.
#[derive(Clone, Debug, Serialize)]
pub struct CellResult {
    pub design: String,
    pub promise: String,
    pub seed: u64,
    pub shape: String,
    pub geometry: String,
    pub timing: String,
    /// Design parameters the soak chose for this seed (`k=v,...`; empty: the defaults).
    pub params: String,
    /// The over-provisioning the cell turned its design down to (`None`: the design's
    /// default).
    pub over_provisioning: Option<String>,
    pub queue_depth: u32,
    pub fill: f64,
    /// Requests after the fill.
    pub requests: u64,
    pub crash_points: usize,
    pub violations: usize,
    pub violating_points: usize,
    /// The first violation, with the command that replays it.
    pub first_violation: Option<String>,
    pub replay: Option<String>,
    /// The campaign could not run (counts as a failure).
    pub error: Option<String>,
    pub wall_s: f64,
    /// What the media did (media model on only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub media: Option<CellMedia>,
    /// The campaign's seconds per phase (wall clock).
    pub phases: PhaseTimes,
}

/// A cell's media figures ([`crate::media`]), or a sum of them.
#[derive(Clone, Debug, Default, Serialize)]
pub struct CellMedia {
    /// Reads of the recorded run the ECC could not correct, the re-reads it took, and blocks
    /// retired for failed programs or erases.
    pub uncorrectable_reads: u64,
    pub read_retries: u64,
    pub retired_blocks: u64,
    /// Crash images whose recovery stopped at metadata lost to the media.
    pub images_lost_to_media: usize,
    /// Reads after recovery that failed for a page whose version the media lost (accepted).
    pub errors_for_lost_pages: usize,
    /// Runs the media ended before their requests were done (judged shortened).
    pub runs_ended_by_media: usize,
}

impl CellMedia {
    fn of(r: &CampaignReport) -> Option<CellMedia> {
        let m = r.media.as_ref()?;
        Some(CellMedia {
            uncorrectable_reads: m.recorded.uncorrectable_reads,
            read_retries: m.recorded.read_retries,
            retired_blocks: m.recorded.retired_blocks,
            images_lost_to_media: r.lost_to_media,
            errors_for_lost_pages: r.errors_for_lost_pages,
            runs_ended_by_media: m.end_of_life.is_some() as usize,
        })
    }

    fn add(&mut self, o: &CellMedia) {
        self.uncorrectable_reads += o.uncorrectable_reads;
        self.read_retries += o.read_retries;
        self.retired_blocks += o.retired_blocks;
        self.images_lost_to_media += o.images_lost_to_media;
        self.errors_for_lost_pages += o.errors_for_lost_pages;
        self.runs_ended_by_media += o.runs_ended_by_media;
    }
}

impl CellResult {
    pub fn failed(&self) -> bool {
        self.violations > 0 || self.error.is_some()
    }
}

/// Every cell, in (design, seed) order whatever the job count.
#[derive(Clone, Debug, Serialize)]
pub struct SoakReport {
    pub cells: Vec<CellResult>,
    pub wall_s: f64,
    /// Cells run at once.
    pub jobs: usize,
    /// How the cells cut their images.
    pub cut: CutModel,
}

/// Per-design totals.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Totals {
    pub seeds: usize,
    pub failing_seeds: Vec<u64>,
    pub crash_points: usize,
    pub violations: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub media: Option<CellMedia>,
}

impl SoakReport {
    pub fn totals(&self) -> Totals {
        self.totals_of(|_| true)
    }

    pub fn totals_of(&self, keep: impl Fn(&CellResult) -> bool) -> Totals {
        let mut t = Totals::default();
        for c in self.cells.iter().filter(|c| keep(c)) {
            t.seeds += 1;
            t.crash_points += c.crash_points;
            t.violations += c.violations;
            if let Some(m) = &c.media {
                t.media.get_or_insert_with(CellMedia::default).add(m);
            }
            if c.failed() && !t.failing_seeds.contains(&c.seed) {
                t.failing_seeds.push(c.seed);
            }
        }
        t
    }

    pub fn designs(&self) -> Vec<String> {
        let mut v: Vec<String> = self.cells.iter().map(|c| c.design.clone()).collect();
        v.dedup();
        v
    }

    /// Crash points per second per job, and the cells' seconds per phase summed.
    pub fn speed(&self) -> Speed {
        let phases = self
            .cells
            .iter()
            .fold(PhaseTimes::default(), |sum, c| sum.plus(c.phases));
        let jobs = self.jobs.min(self.cells.len()).max(1);
        Speed::of(self.totals().crash_points, self.wall_s, jobs, phases)
    }

    /// `{seeds, failing_seeds, crash_points, violations, designs: {name: totals}, failures: [...]}`.
    pub fn to_json(&self) -> serde_json::Value {
        let t = self.totals();
        let designs: serde_json::Map<String, serde_json::Value> = self
            .designs()
            .into_iter()
            .map(|d| {
                let v = serde_json::to_value(self.totals_of(|c| c.design == d)).expect("totals");
                (d, v)
            })
            .collect();
        let failures: Vec<&CellResult> = self.cells.iter().filter(|c| c.failed()).collect();
        serde_json::json!({
            "seeds": t.seeds,
            "failing_seeds": t.failing_seeds,
            "crash_points": t.crash_points,
            "violations": t.violations,
            "designs": designs,
            "failures": failures,
            "wall_s": self.wall_s,
            "speed": self.speed(),
            "cut_model": self.cut.name(),
        })
    }
}

/// The campaign of one cell.
pub fn cell_config(cfg: &SoakConfig, design: &DesignSpec, seed: u64) -> (CampaignConfig, Variant) {
    let caps = capabilities(design, &cfg.options);
    let mut variant = if cfg.vary {
        // Only options the soak was given narrow the draw: a design that refused its own
        // defaults on a geometry must fail there, not be left out of it.
        let given = !cfg.options.params.is_empty();
        let fits = |device: &DeviceConfig| !given || !refuses(design, device, &cfg.options);
        Variant::choose(seed, caps, &cfg.shapes, &fits)
    } else {
        let given = cfg.designs.iter().position(|d| d.name == design.name);
        let fixed = given.and_then(|i| cfg.fixed.get(i)).cloned();
        let (workload, device) = fixed.unwrap_or_else(|| {
            let mut w = WorkloadSpec::named(design.default_workload).expect("default workload");
            w.requests = BASE_REQUESTS;
            w.fill = 0.8;
            (w, DeviceConfig::preset("small").expect("small preset"))
        });
        Variant {
            shape: if workload.name == "txmix" {
                Shape::Txmix
            } else {
                Shape::RandwriteFlush
            },
            workload,
            device,
            geometry: "fixed",
            timing: "fixed",
            over_provisioning: None,
        }
    };
    let mut options = soak_options(cfg, design, &variant.device, seed);
    if cfg.vary && draws_low_over_provisioning(seed) {
        if let Some(low) = lowest_over_provisioning(design, &variant.device, &options, &cfg.options)
        {
            variant.device = low.device;
            options = low.options;
            variant.over_provisioning = Some(low.value);
        }
    }
    if let Some(media) = &cfg.media {
        variant.device.media = Some(media.clone());
        variant.device = crate::with_media_seed(variant.device, seed);
    }
    let campaign = CampaignConfig {
        design: design.clone(),
        options,
        device: variant.device.clone(),
        workload: variant.workload.clone(),
        seed,
        crash_points: cfg.crash_points,
        torn: cfg.torn,
        exhaustive: false,
        promise: cfg.promise.unwrap_or(design.promise),
        threads: 1,
        tag_only: true,
    };
    (campaign, variant)
}

/// The options of one cell: the soak's own, plus (when the soak varies its cells) one of the
/// design's [`DesignSpec::soak_params`] sets, chosen by the seed with a generator of its own so
/// that the shape and geometry a seed chooses do not depend on it. Keys the soak was given
/// explicitly win. A set the design refuses on the cell's `device` as an invalid option (Möbius's
/// ALA striped over four chips, on one chip) is not drawn there; the cell prints what it ran.
pub fn soak_options(
    cfg: &SoakConfig,
    design: &DesignSpec,
    device: &DeviceConfig,
    seed: u64,
) -> DesignOptions {
    if !cfg.vary || design.soak_params.is_empty() {
        return cfg.options.clone();
    }
    let with_set = |set: &[(&str, &str)]| {
        let mut options = cfg.options.clone();
        for (k, v) in set {
            if !cfg.options.params.contains_key(*k) {
                options = options.with(k, v);
            }
        }
        options
    };
    let sets: Vec<DesignOptions> = design
        .soak_params
        .iter()
        .map(|set| with_set(set))
        .filter(|options| !refuses(design, device, options))
        .collect();
    if sets.is_empty() {
        return cfg.options.clone();
    }
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x9a2a_5e75);
    sets[rng.random_range(0..sets.len())].clone()
}

/// The over-provisioning values a cell that turns it down tries, lowest first. It runs the
/// lowest its design accepts on the cell's device: FAST, for one, needs four hidden blocks.
/// Low over-provisioning is where a design's exported capacity leaves the least room for what
/// it keeps beside the data (TxFlash TC's commit records outgrew theirs, docs/txflash.md), and
/// every design has its own default, so the soak turns each one down through its own knob.
pub const LOW_OVER_PROVISIONING: [&str; 5] = ["0", "0.01", "0.02", "0.05", "0.1"];

/// Whether `seed` turns its cells' over-provisioning down: one seed in four, drawn with a
/// generator of its own, so that every other choice of a seed is what it was before.
pub fn draws_low_over_provisioning(seed: u64) -> bool {
    ChaCha8Rng::seed_from_u64(seed ^ 0x0b_0b0b_0b0b).random_range(0..4) == 0
}

/// What a seed of the SQLite or NBD soak draws for a cell's device ([`draw_device`]).
#[derive(Clone, Debug)]
pub struct DrawnDevice {
    /// Names in [`SOAK_GEOMETRIES`] and [`SOAK_TIMINGS`].
    pub geometry: &'static str,
    pub timing: &'static str,
    pub device: DeviceConfig,
    pub options: DesignOptions,
    /// The over-provisioning the design was turned down to (`None`: its default).
    pub over_provisioning: Option<&'static str>,
    /// How much of the device is written before the run, one of the soak's fills.
    pub fill: f64,
    /// The long run length was drawn (one seed in four).
    pub long: bool,
}

impl DrawnDevice {
    /// What a SQLite or NBD soak cell reports of this device: the names drawn, the parameters
    /// the design ran with beyond `given` ([`params_beyond`]), the over-provisioning, the fill.
    pub fn columns(&self, given: &DesignOptions) -> DrawnColumns {
        DrawnColumns {
            geometry: self.geometry.to_string(),
            timing: self.timing.to_string(),
            params: params_beyond(given, &self.options),
            over_provisioning: self.over_provisioning.map(str::to_string),
            fill: self.fill,
        }
    }
}

/// The columns of a SQLite or NBD soak cell that describe its drawn device
/// ([`DrawnDevice::columns`]; flattened into the cell's JSON).
#[derive(Clone, Debug, Serialize)]
pub struct DrawnColumns {
    pub geometry: String,
    pub timing: String,
    pub params: String,
    pub over_provisioning: Option<String>,
    pub fill: f64,
}

impl DrawnColumns {
    /// The end of a cell's progress line: ` op VALUE` when the over-provisioning was turned
    /// down, ` (k=v,...)` for the parameters beyond the given ones.
    pub fn suffix(&self) -> String {
        let op = self
            .over_provisioning
            .as_deref()
            .map_or(String::new(), |op| format!(" op {op}"));
        match self.params.is_empty() {
            true => op,
            false => format!("{op} ({})", self.params),
        }
    }
}

/// The device of a SQLite or NBD soak cell, drawn from `rng` after what the soak draws first:
/// a geometry and a flash timing of the FTL soak, one of `fills`, the long run one seed in four,
/// then the design's soak parameters and over-provisioning ([`seed_device_and_options`]).
pub fn draw_device(
    rng: &mut ChaCha8Rng,
    design: &DesignSpec,
    given: &DesignOptions,
    seed: u64,
    fills: &[f64],
) -> DrawnDevice {
    let geometry = SOAK_GEOMETRIES[rng.random_range(0..SOAK_GEOMETRIES.len())];
    let (timing, preset) = SOAK_TIMINGS[rng.random_range(0..SOAK_TIMINGS.len())];
    let fill = fills[rng.random_range(0..fills.len())];
    let long = rng.random_range(0..4) == 0;
    let mut device = geometry.device();
    device.timing = DeviceConfig::preset(preset).expect("timing preset").timing;
    let (device, options, over_provisioning) = seed_device_and_options(design, device, given, seed);
    DrawnDevice {
        geometry: geometry.name,
        timing,
        device,
        options,
        over_provisioning,
        fill,
        long,
    }
}

/// What a varying soak's seed adds to the device it drew for `design`, the FTL soak's way (the
/// SQLite and NBD soaks call this): `given` plus one of the design's soak parameter sets
/// ([`soak_options`]) and, one seed in four, the lowest over-provisioning the design accepts
/// there ([`lowest_over_provisioning`]). The device and options to run, and the
/// over-provisioning value turned down to, if any.
pub fn seed_device_and_options(
    design: &DesignSpec,
    device: DeviceConfig,
    given: &DesignOptions,
    seed: u64,
) -> (DeviceConfig, DesignOptions, Option<&'static str>) {
    let mut cfg = SoakConfig::varying(vec![design.clone()], vec![seed]);
    cfg.options = given.clone();
    let options = soak_options(&cfg, design, &device, seed);
    if !draws_low_over_provisioning(seed) {
        return (device, options, None);
    }
    match lowest_over_provisioning(design, &device, &options, given) {
        Some(low) => (low.device, low.options, Some(low.value)),
        None => (device, options, None),
    }
}

/// A device and options with a design's over-provisioning turned down.
#[derive(Clone, Debug)]
pub struct LowOverProvisioning {
    pub device: DeviceConfig,
    pub options: DesignOptions,
    /// The value, one of [`LOW_OVER_PROVISIONING`].
    pub value: &'static str,
}

/// `device` and `options` with `design`'s over-provisioning set, through its own knob
/// ([`ftl::OverProvisioningKnob`]), to the lowest of [`LOW_OVER_PROVISIONING`] it accepts there.
/// `None` when the knob is a parameter in `given` (options the user set win), or when the
/// design accepts none of the values.
pub fn lowest_over_provisioning(
    design: &DesignSpec,
    device: &DeviceConfig,
    options: &DesignOptions,
    given: &DesignOptions,
) -> Option<LowOverProvisioning> {
    if let OverProvisioningKnob::Param(name) = design.over_provisioning {
        if given.params.contains_key(name) {
            return None;
        }
    }
    LOW_OVER_PROVISIONING.into_iter().find_map(|value| {
        let mut low = LowOverProvisioning {
            device: device.clone(),
            options: options.clone(),
            value,
        };
        match design.over_provisioning {
            OverProvisioningKnob::Device => {
                low.device.over_provisioning = value.parse().expect("a number");
                low.device.validate().ok()?;
            }
            OverProvisioningKnob::Param(name) => low.options = low.options.with(name, value),
        }
        (!refuses(design, &low.device, &low.options)).then_some(low)
    })
}

/// Whether `design` refuses `options` on `device` as an invalid option when it formats it.
pub fn refuses(design: &DesignSpec, device: &DeviceConfig, options: &DesignOptions) -> bool {
    let flash = Flash::in_memory(device.clone(), design.oob_record(&device.geometry), true);
    matches!(
        (design.format)(flash, options),
        Err(FtlError::InvalidOption(_))
    )
}

/// The design parameters a cell ran with (`ran`) beyond the soak's own (`given`): `k=v,...`
/// in key order; empty: none. Shared with the SQLite soak.
pub fn params_beyond(given: &DesignOptions, ran: &DesignOptions) -> String {
    // `params` is a BTreeMap: already in key order.
    ran.params
        .iter()
        .filter(|(k, _)| !given.params.contains_key(*k))
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

fn run_cell(cfg: &SoakConfig, design: &DesignSpec, seed: u64) -> CellResult {
    let (campaign, variant) = cell_config(cfg, design, seed);
    let wall = std::time::Instant::now();
    let mut cell = CellResult {
        design: design.name.to_string(),
        promise: campaign.promise.name().to_string(),
        seed,
        shape: variant.shape.name().to_string(),
        geometry: variant.geometry.to_string(),
        timing: variant.timing.to_string(),
        params: params_beyond(&cfg.options, &campaign.options),
        over_provisioning: variant.over_provisioning.map(str::to_string),
        queue_depth: variant.workload.queue_depth,
        fill: variant.workload.fill,
        requests: variant.workload.requests,
        crash_points: 0,
        violations: 0,
        violating_points: 0,
        first_violation: None,
        replay: None,
        error: None,
        wall_s: 0.0,
        media: None,
        phases: PhaseTimes::default(),
    };
    match run_campaign_cut(&campaign, cfg.second_lives, cfg.cut, &|_, _| {}) {
        Ok((r, _)) => note_report(&mut cell, &r, cfg.cut),
        Err(e) => {
            cell.error = Some(e.to_string());
            let replay = replay_command(&campaign, 0, campaign.torn) + cfg.cut.arg();
            cell.replay = Some(replay.replace(
                " --replay-instant 0",
                &format!(" --crash-points {}", campaign.crash_points),
            ));
        }
    }
    cell.wall_s = wall.elapsed().as_secs_f64();
    cell
}

fn note_report(cell: &mut CellResult, r: &CampaignReport, cut: CutModel) {
    cell.media = CellMedia::of(r);
    if let Some(eol) = r.media.as_ref().and_then(|m| m.end_of_life.as_ref()) {
        cell.requests = eol.requests_run;
    }
    cell.phases = r.speed.phases;
    cell.crash_points = r.crash_points;
    cell.violations = r.violations.len();
    cell.violating_points = r.violating_points;
    if let Some(v) = r.violations.first() {
        cell.first_violation = Some(format!(
            "{}{} lpn {:?}: {}",
            cut.describe(v.instant_ns),
            if v.torn { " (torn)" } else { "" },
            v.lpn,
            v.what
        ));
        cell.replay = Some(v.replay.clone());
    }
}

/// Runs every (design, seed) cell on `jobs` threads; `progress` sees each cell as it finishes.
pub fn run_soak(cfg: &SoakConfig, progress: &(dyn Fn(&CellResult) + Sync)) -> SoakReport {
    let wall = std::time::Instant::now();
    let cells: Vec<(usize, usize)> = (0..cfg.designs.len())
        .flat_map(|d| (0..cfg.seeds.len()).map(move |s| (d, s)))
        .collect();
    let run = |i: usize| {
        let (d, k) = cells[i];
        run_cell(cfg, &cfg.designs[d], cfg.seeds[k])
    };
    SoakReport {
        cells: run_parallel(cells.len(), cfg.jobs, &run, progress),
        wall_s: wall.elapsed().as_secs_f64(),
        jobs: cfg.jobs,
        cut: cfg.cut,
    }
}

/// `run(i)` for every `i` in `0..n`, on `jobs` threads taking the next index as each finishes
/// (cells differ in length); `progress` sees each result as it comes. The results are in index
/// order whatever the job count. Shared by every soak (the SQLite one too).
pub fn run_parallel<T: Send>(
    n: usize,
    jobs: usize,
    run: &(dyn Fn(usize) -> T + Sync),
    progress: &(dyn Fn(&T) + Sync),
) -> Vec<T> {
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<T>>> = Mutex::new((0..n).map(|_| None).collect());
    std::thread::scope(|s| {
        for _ in 0..jobs.max(1).min(n.max(1)) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    break;
                }
                let r = run(i);
                progress(&r);
                results.lock().expect("soak results")[i] = Some(r);
            });
        }
    });
    results
        .into_inner()
        .expect("soak results")
        .into_iter()
        .map(|r| r.expect("every cell ran"))
        .collect()
}

/// A cell of a soak of campaigns that run real software (SQLite, NBD requests): what its
/// report counts.
pub trait SoakCell: Serialize + Send {
    fn design(&self) -> &str;
    /// The campaign broke its promise, or could not run.
    fn failed(&self) -> bool;
    fn crash_points(&self) -> usize;
    fn violations(&self) -> usize;
    /// Pages GC copied during the recorded run (whether cuts could land in GC at all).
    fn gc_copies(&self) -> u64;
}

/// Every cell of such a soak, in (design, seed) order.
#[derive(Clone, Debug, Serialize)]
pub struct CellsReport<C> {
    pub cells: Vec<C>,
    pub wall_s: f64,
}

impl<C: SoakCell> CellsReport<C> {
    /// Runs `run(design, seed)` for every design and seed on `jobs` threads; `progress` sees
    /// each cell as it finishes.
    pub fn run(
        designs: &[DesignSpec],
        seeds: &[u64],
        jobs: usize,
        run: &(dyn Fn(&DesignSpec, u64) -> C + Sync),
        progress: &(dyn Fn(&C) + Sync),
    ) -> CellsReport<C> {
        let wall = std::time::Instant::now();
        let n = seeds.len();
        let cell = |i: usize| run(&designs[i / n], seeds[i % n]);
        CellsReport {
            cells: run_parallel(designs.len() * n, jobs, &cell, progress),
            wall_s: wall.elapsed().as_secs_f64(),
        }
    }

    pub fn failing(&self) -> impl Iterator<Item = &C> {
        self.cells.iter().filter(|c| c.failed())
    }

    pub fn crash_points(&self) -> usize {
        self.cells.iter().map(C::crash_points).sum()
    }

    pub fn violations(&self) -> usize {
        self.cells.iter().map(C::violations).sum()
    }

    pub fn cells_with_gc_copies(&self) -> usize {
        self.cells.iter().filter(|c| c.gc_copies() > 0).count()
    }

    /// The designs, in the order their cells came.
    pub fn designs(&self) -> Vec<&str> {
        let mut designs: Vec<&str> = self.cells.iter().map(C::design).collect();
        designs.dedup();
        designs
    }

    /// `{cells, crash_points, violations, cells_with_gc_copies, failures: [...], wall_s}`.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "cells": self.cells.len(),
            "crash_points": self.crash_points(),
            "violations": self.violations(),
            "cells_with_gc_copies": self.cells_with_gc_copies(),
            "failures": self.failing().collect::<Vec<_>>(),
            "wall_s": self.wall_s,
        })
    }
}

/// `n` seeds that differ from run to run (from the process's hash-map randomness), for soaks
/// that must not always try the same seeds. Print them: each reproduces exactly.
pub fn fresh_seeds(n: usize) -> Vec<u64> {
    use std::hash::{BuildHasher, Hasher};
    let state = std::collections::hash_map::RandomState::new();
    (0..n)
        .map(|i| {
            let mut h = state.build_hasher();
            h.write_usize(i);
            h.write_u128(
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos()),
            );
            h.finish() >> 16
        })
        .collect()
}

/// A known-bad configuration a soak must catch. A soak that cannot fail proves nothing.
pub struct Control {
    pub design: &'static str,
    pub params: &'static [(&'static str, &'static str)],
    /// The promise it is judged against (one it does not keep).
    pub promise: Promise,
    /// What is wrong with it.
    pub what: &'static str,
    /// The shapes that exercise the fault (empty: every shape the design supports). A fault in
    /// transaction commit cannot show on a workload without transactions.
    pub shapes: &'static [Shape],
    /// Second lives the fault needs to show (0: life one's images show it). A fault that only
    /// work after recovery exposes is a control that only second lives reach.
    pub second_lives: usize,
}

/// The negative controls every soak runs.
pub const CONTROLS: [Control; 4] = [
    Control {
        design: "wcache",
        params: &[],
        promise: Promise::Ordered,
        what: "write-back cache, flush-only: no prefix semantics",
        shapes: &[],
        second_lives: 0,
    },
    Control {
        design: "dftl",
        params: &[("oob_scan", "off")],
        promise: Promise::DurableWrites,
        what: "DFTL that forgets the writes after its last checkpoint",
        shapes: &[],
        second_lives: 0,
    },
    Control {
        design: "mobius",
        params: &[("inject_bug", "skip_verify"), ("merge_small", "off")],
        promise: Promise::AtomicTransactions,
        what: "Möbius committing unflagged inodes without reading their pages",
        shapes: &[Shape::Txmix, Shape::LargeTx, Shape::AbortHeavy],
        second_lives: 0,
    },
    Control {
        design: "mobius",
        params: &[("inject_bug", "stale_validity")],
        promise: Promise::AtomicTransactions,
        what:
            "Möbius whose recovery leaves translation-page mappings invalid: GC erases them later",
        // Random single-page writes with flushes rarely bring a second life's GC to the pages
        // the translation pages map (caught on 2 of 4 such seeds, docs/crashtest.md).
        shapes: &[
            Shape::Txmix,
            Shape::LargeTx,
            Shape::AbortHeavy,
            Shape::TrimHeavy,
        ],
        second_lives: 4,
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    /// Every shape is found by its name, and a design is offered only shapes of the list.
    #[test]
    fn shapes_are_named_and_offered_from_the_list() {
        for shape in Shape::ALL {
            assert_eq!(Shape::named(shape.name()), Some(shape));
        }
        assert_eq!(Shape::named("nosuch"), None);
        let all = TxCapabilities {
            static_tx: true,
            dynamic_tx: true,
            abort: true,
            max_tx_pages: 64,
            ..TxCapabilities::default()
        };
        assert_eq!(Shape::for_caps(Some(all)), Shape::ALL);
        assert!(!Shape::for_caps(None).contains(&Shape::Interleaved));
    }

    #[test]
    fn seeds_draw_every_geometry_and_timing_and_each_builds_its_own_device() {
        let mut drawn = std::collections::BTreeSet::new();
        let mut timings = std::collections::BTreeSet::new();
        for seed in 0..400 {
            let v = Variant::choose(seed, None, &[], &|_| true);
            let g = SoakGeometry::named(v.geometry).expect("a named geometry");
            assert_eq!(
                v.device.geometry,
                g.device().geometry,
                "seed {seed} drew {}",
                g.name
            );
            let again = Variant::choose(seed, None, &[], &|_| true);
            assert_eq!((again.geometry, again.timing), (v.geometry, v.timing));
            let (_, preset) = SOAK_TIMINGS
                .into_iter()
                .find(|(name, _)| *name == v.timing)
                .expect("a named timing");
            let timing = DeviceConfig::preset(preset).expect("preset").timing;
            assert_eq!(v.device.timing, timing, "seed {seed} drew {}", v.timing);
            drawn.insert(v.geometry);
            timings.insert(v.timing);
        }
        let all: std::collections::BTreeSet<_> = SOAK_GEOMETRIES.iter().map(|g| g.name).collect();
        assert_eq!(drawn, all, "400 seeds left a geometry out");
        let all: std::collections::BTreeSet<_> = SOAK_TIMINGS.iter().map(|t| t.0).collect();
        assert_eq!(timings, all, "400 seeds left a timing out");
        assert_ne!(
            DeviceConfig::preset("small").expect("small").timing,
            DeviceConfig::preset("jasmine").expect("jasmine").timing,
            "the two timings differ"
        );
    }

    /// One seed in four runs the long cell; the others keep the base length.
    #[test]
    fn one_seed_in_four_draws_the_long_run() {
        let long = (0..400)
            .map(|seed| Variant::choose(seed, None, &[], &|_| true))
            .filter(|v| {
                assert!([BASE_REQUESTS, LONG_REQUESTS].contains(&v.workload.requests));
                v.workload.requests == LONG_REQUESTS
            })
            .count();
        assert!(
            (70..=130).contains(&long),
            "{long} of 400 seeds drew the long run"
        );
    }

    /// One seed in four turns its cells' over-provisioning down, with a generator of its own.
    #[test]
    fn one_seed_in_four_turns_over_provisioning_down() {
        let low = (0..400)
            .filter(|&seed| draws_low_over_provisioning(seed))
            .count();
        assert!(
            (70..=130).contains(&low),
            "{low} of 400 seeds turned it down"
        );
    }

    /// A failing cell's replay command rebuilds its device from `--set` overrides of the
    /// `small` preset, timing included.
    #[test]
    fn a_drawn_device_is_spelt_out_in_full_by_its_overrides() {
        let v = (0..)
            .map(|seed| Variant::choose(seed, None, &[], &|_| true))
            .find(|v| v.timing == "mlc" && v.geometry == "odd")
            .expect("some seed draws odd on MLC");
        let mut rebuilt = DeviceConfig::preset("small").expect("small preset");
        let sets = crate::device_overrides(&v.device);
        rebuilt = rebuilt
            .with_overrides(None, &sets)
            .expect("overrides apply");
        assert_eq!(rebuilt, v.device, "{sets:?}");
        assert!(
            sets.contains(&"timing.program_ns=900000".to_string()),
            "{sets:?}"
        );
    }

    #[test]
    fn the_small_geometry_is_the_small_preset() {
        let preset = DeviceConfig::preset("small").expect("small preset");
        let small = SoakGeometry::named("small").expect("small").device();
        assert_eq!(small.geometry, preset.geometry);
    }
}
