//! Experiment `optr` — OPTR's overhead against its write-cached baseline (OPTR §7, Figs. 12 and
//! 13; §7 recovery estimate).
//!
//! The paper's synthetic grid: random writes within a footprint of 1 MB / 80 MB / 1 GB (high /
//! medium / low locality) × requests of 16 KB / 1 MB / half-and-half (small / large / hybrid) ×
//! a flush every 1, 4, …, 16,384 writes. Each point runs the same seeded host sequence on `optr`
//! and on `wcache` (same cache size, [`wcache`'s default rule]) and reports
//! - throughput (host MB per simulated second, from the first measured write to the end of the
//!   final flush) and OPTR's overhead against the baseline (Fig. 13);
//! - OPTR's extra page programs by cause, as a share of the host pages written (Fig. 12): incremental
//!   checkpoints, coalescing records, full checkpoints, internal flushes (the user-data pages
//!   those flushes wrote), plus summary pages and GC copies of both designs;
//! - after the run, a power cut and OPTR's recovery: flash reads and simulated time, and the
//!   §7 worst-case estimate from the layout (reads × (tR + transfer)).
//!
//! Scales: `paper` runs on the `optr` preset (128 GB, 16 KB pages, 128-page blocks, 8 MB cache,
//! 32 + 32 reserved blocks) with no pre-fill (the footprints are < 1 % of the device, so GC
//! does not run, as it hardly does in the paper: §7.2 counts 0.2 % of blocks GC-constrained);
//! `quick` runs on the same geometry cut to 128 blocks per chip (4 GB: same page, block, chip
//! count, cache and reserved areas) after filling 90 % of the logical space, so GC runs in the
//! measured phase. `tiny` (for CI) is `small` with a 0.25 MB cache and a few points.

use crate::claims::{Check, Claim, Tolerance};
use crate::number::fmt;
use crate::optr_recovery::{WorstCase, WorstCaseRun};
use crate::result::{ExperimentResult, Figure, Table};
use crate::svg::{LineChart, Series};
use crate::{Context, Scale};
use flash::{DeviceConfig, Lpn, OpCause};
use ftl::{DesignOptions, DesignSpec};
use lab::driver::Driver;
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// The paper's flush intervals (writes between flushes).
pub const PAPER_FLUSH_EVERY: [u32; 8] = [1, 4, 16, 64, 256, 1024, 4096, 16384];

/// What one grid run covers.
#[derive(Clone, Debug)]
pub struct Grid {
    pub device: DeviceConfig,
    /// (name, footprint in bytes).
    pub localities: Vec<(&'static str, u64)>,
    /// (name, small request bytes, large request bytes): a request is small or large with
    /// probability 1/2 each (equal sizes = one size).
    pub sizes: Vec<(&'static str, u64, u64)>,
    pub flush_every: Vec<u32>,
    /// Host bytes written per point in the measured phase.
    pub host_bytes: u64,
    /// Share of the common logical space written sequentially (and flushed) before measuring.
    pub fill: f64,
    /// Design parameters given to both designs (e.g. `cache_mb`).
    pub params: Vec<(String, String)>,
    /// Parameters for the baseline only: by default its summary pages (§7: the paper expects
    /// baseline SSDs to write them too), so neither design is charged alone for them.
    pub baseline_params: Vec<(String, String)>,
    /// Parameters for OPTR only.
    pub optr_params: Vec<(String, String)>,
}

const MB: u64 = 1 << 20;

impl Grid {
    fn paper_shape(device: DeviceConfig, host_bytes: u64, fill: f64) -> Grid {
        Grid {
            device,
            localities: vec![("high", MB), ("medium", 80 * MB), ("low", 1024 * MB)],
            sizes: vec![
                ("small", 16 << 10, 16 << 10),
                ("large", MB, MB),
                ("hybrid", 16 << 10, MB),
            ],
            flush_every: PAPER_FLUSH_EVERY.to_vec(),
            host_bytes,
            fill,
            params: Vec::new(),
            baseline_params: vec![("summary_pages".into(), "true".into())],
            optr_params: Vec::new(),
        }
    }
    /// The paper's device (`optr` preset, 128 GB), 4 GB written per point.
    /// Both designs allocate chips statically (`lpn mod chips`), as the paper's SSD does (§7);
    /// GC hardly runs at this scale, so no chip runs out and the rule holds for every page
    /// (docs/optr.md, "Chip allocation").
    pub fn paper() -> crate::error::Result<Grid> {
        let mut grid = Grid::paper_shape(DeviceConfig::preset("optr")?, 4 << 30, 0.0);
        grid.params
            .push(("chip_allocation".into(), "modulo".into()));
        Ok(grid)
    }
    /// The paper's geometry cut to 128 blocks per chip (4 GB), 90 % filled, 1 GB per point.
    /// Chips are allocated by idleness: GC runs here, and without per-chip GC a static
    /// allocation would not hold (docs/optr.md, "Chip allocation").
    pub fn quick() -> crate::error::Result<Grid> {
        Ok(Grid::paper_shape(
            lab::device::preset_slice("optr", 128)?,
            1 << 30,
            0.9,
        ))
    }
    /// A CI-sized grid on `small` (16 MB, 4 KB pages): footprints 256 KB / 4 MB / 12 MB, requests
    /// of 1 and 16 pages, three flush intervals.
    /// The host interface is the `optr` preset's (SATA 3.0): our designs acknowledge a cached
    /// write at once, so without a link a workload that stays in the cache runs at an unbounded
    /// rate and any flash work at all looks like a huge ratio.
    pub fn tiny() -> crate::error::Result<Grid> {
        let mut device = DeviceConfig::preset("small")?;
        device.host = DeviceConfig::preset("optr")?.host;
        Ok(Grid {
            device,
            localities: vec![("high", MB / 4), ("medium", 4 * MB), ("low", 10 * MB)],
            sizes: vec![
                ("small", 4 << 10, 4 << 10),
                ("large", 64 << 10, 64 << 10),
                ("hybrid", 4 << 10, 64 << 10),
            ],
            flush_every: vec![1, 64, 1024],
            host_bytes: 40 * MB,
            fill: 0.5,
            params: Vec::new(),
            baseline_params: vec![("summary_pages".into(), "true".into())],
            optr_params: Vec::new(),
        })
    }
    pub fn for_scale(scale: Scale) -> crate::error::Result<Grid> {
        match scale {
            Scale::Quick => Grid::quick(),
            Scale::Paper => Grid::paper(),
        }
    }
    /// The grid at `ctx`'s point of the table of unknowns: its device, its fill, and each
    /// design's parameters (after the grid's own, so that they win).
    fn at_point(mut self, ctx: &Context, optr: &DesignSpec, baseline: &DesignSpec) -> Grid {
        self.device = ctx.unknowns.device(self.device);
        self.fill = ctx.unknowns.fill(self.fill);
        let g = self.device.geometry.clone();
        let extra = |spec| {
            ctx.unknowns
                .options(spec, &g, DesignOptions::default())
                .params
        };
        self.optr_params.extend(extra(optr));
        self.baseline_params.extend(extra(baseline));
        self
    }
    fn options(&self, spec: &DesignSpec) -> DesignOptions {
        let mut o = DesignOptions::default();
        for (k, v) in &self.params {
            o = o.with(k, v);
        }
        let own = if spec.name == "optr" {
            &self.optr_params
        } else {
            &self.baseline_params
        };
        for (k, v) in own {
            o = o.with(k, v);
        }
        o
    }
}

/// One design's run of one point.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Run {
    pub host_pages: u64,
    pub programs: u64,
    pub host_data_programs: u64,
    pub gc_copies: u64,
    pub summary_pages: u64,
    pub checkpoint_programs: u64,
    pub record_programs: u64,
    pub erases: u64,
    pub sim_s: f64,
    pub mb_s: f64,
    /// The design's own metrics (OPTR: extra pages by cause).
    pub metrics: Vec<(String, f64)>,
    pub recovery_reads: u64,
    pub recovery_ms: f64,
}

impl Run {
    pub fn metric(&self, key: &str) -> f64 {
        self.metrics
            .iter()
            .find(|(k, _)| k == key)
            .map_or(0.0, |x| x.1)
    }
    /// A cause's pages as a percentage of the host pages written (the user data; a design's
    /// own program count would make a workload that stays in the cache look enormous).
    pub fn pct(&self, pages: f64) -> f64 {
        100.0 * pages / (self.host_pages.max(1) as f64)
    }
}

/// One point of the grid, both designs.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Point {
    pub locality: &'static str,
    pub size: &'static str,
    pub flush_every: u32,
    pub wcache: Run,
    pub optr: Run,
}

impl Point {
    /// OPTR's throughput overhead against the baseline, in percent (negative: OPTR faster).
    pub fn overhead_pct(&self) -> f64 {
        100.0 * (self.wcache.mb_s - self.optr.mb_s) / self.wcache.mb_s.max(1e-12)
    }
    /// OPTR's extra programs against the baseline, in percent of the baseline's.
    pub fn extra_programs_pct(&self) -> f64 {
        100.0 * (self.optr.programs as f64 - self.wcache.programs as f64)
            / (self.wcache.programs.max(1) as f64)
    }
}

/// Runs one point on one design: fill, measured phase, final flush, power cut and recovery.
fn run_design(
    spec: &DesignSpec,
    grid: &Grid,
    range: u32,
    shape: (u64, (u64, u64), u32),
    seed: u64,
    recover: bool,
) -> crate::error::Result<Run> {
    let (footprint, (small, large), flush_every) = shape;
    let g = &grid.device.geometry;
    let page = g.page_bytes as u64;
    let options = grid.options(spec);
    let dev = lab::device::fresh(spec, &grid.device, &options, true)?;
    let e = |e: host::HostError| crate::error::MeasureError::step(spec.name, e);
    let mut driver = Driver::over(dev, 0).writes_from(1);
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let fill_pages = (grid.fill * range as f64) as u32;
    let mut now = driver.fill(fill_pages, g.pages_per_block, 0).map_err(e)?;
    now = driver.flush(now).map_err(e)?;
    let before = driver.device().flash().stats().clone();
    let metrics_before = driver.device().metrics();
    let start_ns = now;
    let region = ((footprint / page) as u32).clamp(1, range);
    let (mut written, mut writes) = (0u64, 0u32);
    while written * page < grid.host_bytes {
        let bytes = if rng.random_bool(0.5) { small } else { large };
        let pages = ((bytes / page) as u32).clamp(1, region);
        let start = rng.random_range(0..=region - pages);
        now = driver.write(Lpn(start), pages, now).map_err(e)?;
        written += pages as u64;
        writes += 1;
        if writes.is_multiple_of(flush_every) {
            now = driver.flush(now).map_err(e)?;
        }
    }
    now = driver.flush(now).map_err(e)?;
    let dev = driver.into_device();
    let s = dev.flash().stats().since(&before);
    let sim_s = (now - start_ns) as f64 / 1e9;
    let mut run = Run {
        host_pages: written,
        programs: s.total_programs(),
        host_data_programs: s.programs_for(OpCause::HostData),
        gc_copies: s.programs_for(OpCause::GcCopy),
        summary_pages: s.programs_for(OpCause::Summary),
        checkpoint_programs: s.programs_for(OpCause::Checkpoint),
        record_programs: s.programs_for(OpCause::Record),
        erases: s.total_erases(),
        sim_s,
        mb_s: (written * page) as f64 / 1e6 / sim_s.max(1e-12),
        // counters of the measured phase only (the fill has its own checkpoints)
        metrics: dev
            .metrics()
            .into_iter()
            .map(|(k, v)| {
                let v0 = metrics_before
                    .iter()
                    .find(|(k0, _)| *k0 == k)
                    .map_or(0.0, |x| x.1);
                (k, v - v0)
            })
            .collect(),
        ..Run::default()
    };
    if recover {
        let mut flash = dev.into_flash();
        flash.start_clock_at(now);
        let (_, report) = spec
            .reopen(flash, &options)
            .map_err(|e| crate::error::MeasureError::step(spec.name, e))?;
        run.recovery_reads = report.flash_reads;
        run.recovery_ms = report.sim_ns as f64 / 1e6;
    }
    Ok(run)
}

/// Runs every point of `grid` on both designs (same seed per point).
pub fn run_grid(
    optr: &DesignSpec,
    wcache: &DesignSpec,
    grid: &Grid,
    seed: u64,
    progress: &dyn Fn(u64, u64),
) -> crate::error::Result<Vec<Point>> {
    let logical = |spec: &DesignSpec| -> crate::error::Result<u32> {
        Ok(lab::device::fresh(spec, &grid.device, &grid.options(spec), true)?.logical_pages())
    };
    // same address range for both (OPTR keeps a few more blocks for itself)
    let range = logical(optr)?.min(logical(wcache)?);
    let total = (grid.localities.len() * grid.sizes.len() * grid.flush_every.len()) as u64;
    let mut points = Vec::with_capacity(total as usize);
    for &(locality, footprint) in &grid.localities {
        for &(size, small, large) in &grid.sizes {
            for &flush_every in &grid.flush_every {
                let shape = (footprint, (small, large), flush_every);
                let s = seed ^ (points.len() as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
                let w = run_design(wcache, grid, range, shape, s, false)?;
                let o = run_design(optr, grid, range, shape, s, true)?;
                points.push(Point {
                    locality,
                    size,
                    flush_every,
                    wcache: w,
                    optr: o,
                });
                progress(points.len() as u64, total);
            }
        }
    }
    Ok(points)
}

/// OPTR §7's worst-case recovery estimate from the layout, in (reads, seconds): both seals, a
/// full checkpoint, the whole incremental area, the summaries of every block a full diff buffer
/// can reach plus every open block's OOBs, each read at tR + transfer, one after another.
pub fn recovery_estimate(grid: &Grid) -> (u64, f64) {
    let g = &grid.device.geometry;
    let t = &grid.device.timing;
    let logical = (g.pages() as f64 * (1.0 - 0.07)) as u64;
    let l2p_pages = (logical * 4).div_ceil(g.page_bytes as u64);
    let inc_blocks = (g.blocks() / 64).clamp(2, 32) as u64;
    let inc_pages = inc_blocks * g.pages_per_block as u64;
    let diff_entries = (256u64 << 10).min(inc_pages * g.page_bytes as u64 / 32) / 8;
    let streams = 2 * g.chips() as u64;
    let summaries = diff_entries.div_ceil(g.pages_per_block as u64 - 1) + streams;
    let open_oobs = streams * (g.pages_per_block as u64 - 1);
    let reads = 2 + l2p_pages + inc_pages + summaries + open_oobs;
    let transfer_ns = g.page_bytes as f64 / (t.bus_mb_s as f64 * 1e6) * 1e9;
    (reads, reads as f64 * (t.read_ns as f64 + transfer_ns) / 1e9)
}

fn table(points: &[Point]) -> Table {
    let header = [
        "locality",
        "size",
        "flush every",
        "wcache MB/s",
        "optr MB/s",
        "overhead",
        "extra programs",
        "inc ckpt",
        "records",
        "full ckpt",
        "internal flush",
        "summaries",
        "GC copies w/o",
    ];
    let rows = points
        .iter()
        .map(|p| {
            let o = &p.optr;
            let pct = |k: &str| format!("{} %", fmt(o.pct(o.metric(k))));
            vec![
                p.locality.to_string(),
                p.size.to_string(),
                p.flush_every.to_string(),
                fmt(p.wcache.mb_s),
                fmt(o.mb_s),
                format!("{} %", fmt(p.overhead_pct())),
                format!("{} %", fmt(p.extra_programs_pct())),
                pct("extra_incremental_checkpoint_pages"),
                pct("extra_record_pages"),
                pct("extra_full_checkpoint_pages"),
                pct("extra_internal_flush_pages"),
                format!("{} %", fmt(o.pct(o.summary_pages as f64))),
                format!("{}/{}", p.wcache.gc_copies, o.gc_copies),
            ]
        })
        .collect();
    Table {
        caption: "OPTR vs wcache on the synthetic grid (OPTR Figs. 12-13); cause columns are OPTR's extra pages as % of the host pages written".into(),
        header: header.iter().map(|s| s.to_string()).collect(),
        rows,
    }
}

fn figure(points: &[Point], locality: &str) -> Figure {
    let mut series = Vec::new();
    for size in ["small", "large", "hybrid"] {
        for (design, pick) in [("wcache", false), ("optr", true)] {
            let pts = points
                .iter()
                .filter(|p| p.locality == locality && p.size == size)
                .map(|p| {
                    let r = if pick { &p.optr } else { &p.wcache };
                    (p.flush_every as f64, r.mb_s)
                })
                .collect::<Vec<_>>();
            if !pts.is_empty() {
                series.push(Series {
                    name: format!("{locality}-{size} {design}"),
                    points: pts,
                });
            }
        }
    }
    Figure {
        file: format!("optr_fig13_{locality}.svg"),
        caption: format!("OPTR Fig. 13 ({locality} locality) — throughput vs flush interval"),
        svg: LineChart {
            title: format!("Throughput, {locality} locality"),
            x_label: "flush interval (writes, log)".into(),
            y_label: "MB/s".into(),
            log_x: true,
            log_y: false,
            series,
        }
        .to_svg(),
    }
}

/// Summary numbers of a grid: (mean overhead %, max overhead %, max inc-ckpt share %,
/// max internal-flush share %, max recovery reads, max recovery ms).
pub fn summary(points: &[Point]) -> [f64; 6] {
    let n = points.len().max(1) as f64;
    let mean = points.iter().map(Point::overhead_pct).sum::<f64>() / n;
    let max_of = |f: &dyn Fn(&Point) -> f64| points.iter().map(f).fold(f64::MIN, f64::max);
    [
        mean,
        max_of(&|p| p.overhead_pct()),
        max_of(&|p| {
            p.optr
                .pct(p.optr.metric("extra_incremental_checkpoint_pages"))
        }),
        max_of(&|p| p.optr.pct(p.optr.metric("extra_internal_flush_pages"))),
        max_of(&|p| p.optr.recovery_reads as f64),
        max_of(&|p| p.optr.recovery_ms),
    ]
}

/// How many one-page writes, per physical page of the device, the worst-case run may issue
/// before it gives up waiting for the incremental area to overflow. The writes it takes grow
/// with over-provisioning (fewer logical pages, so fewer distinct diff entries per write):
/// measured on the quick grid's 4 GB device, seed 1, no flushes / a flush every 16 writes,
/// 2.9 / 3.0 × the pages at the default 7 %, 3.7 / 4.0 × at 20 % and 4.1 / 4.5 × at 25 % (the
/// table of unknowns' upper end). The bound was 4 × until 2026-12-07: the robustness campaign's
/// points above ~18 % over-provisioning, and its GC threshold's low end, failed on it.
const WORST_CASE_WRITES_PER_PAGE: u64 = 16;

/// OPTR §7.5's worst case, measured on the grid's device (`optr_recovery`): random one-page
/// writes until the incremental area overflows, with a flush every 16 writes (the area fills
/// with coalescing records too) and with none (diff pages and seals only). Labelled by cadence.
pub fn worst_cases(
    optr: &DesignSpec,
    grid: &Grid,
    seed: u64,
) -> crate::error::Result<Vec<(String, WorstCase)>> {
    let mut out = Vec::new();
    for flush_every in [None, Some(16)] {
        let run = WorstCaseRun {
            device: grid.device.clone(),
            options: grid.options(optr),
            flush_every,
            max_writes: WORST_CASE_WRITES_PER_PAGE * grid.device.geometry.pages() as u64,
            seed,
        };
        let label = flush_every.map_or("no flushes".to_string(), |f| {
            format!("a flush every {f} writes")
        });
        out.push((label, run.measure(optr)?));
    }
    Ok(out)
}

fn worst_case_table(worst: &[(String, WorstCase)]) -> Table {
    let header = [
        "workload",
        "requests before the cut",
        "incremental area pages",
        "diff entries",
        "recovery reads",
        "recovery ms (simulated)",
    ];
    Table {
        caption: "OPTR §7.5's worst case, measured: a power cut just before the incremental area overflows, then OPTR's recovery".into(),
        header: header.iter().map(|s| s.to_string()).collect(),
        rows: worst
            .iter()
            .map(|(label, w)| {
                vec![
                    label.clone(),
                    w.requests.to_string(),
                    format!("{} of {}", w.incremental_area_pages, w.incremental_area_capacity),
                    w.diff_entries.to_string(),
                    w.recovery_reads.to_string(),
                    fmt(w.recovery_ms),
                ]
            })
            .collect(),
    }
}

fn claims(
    points: &[Point],
    worst: &[(String, WorstCase)],
    grid: &Grid,
    scale: Scale,
) -> Vec<Claim> {
    let [mean, max, inc, iflush, reads, ms] = summary(points);
    let worst = worst
        .iter()
        .max_by(|a, b| a.1.recovery_ms.total_cmp(&b.1.recovery_ms))
        .cloned();
    let (est_reads, est_s) = recovery_estimate(grid);
    let device = if scale == Scale::Paper {
        "the paper's 128 GB device"
    } else {
        "the paper's geometry cut to 4 GB, 90 % filled (GC runs)"
    };
    graded_claims(&OptrSummary {
        mean_overhead_pct: mean,
        max_overhead_pct: max,
        incremental_checkpoint_pct: inc,
        internal_flush_pct: iflush,
        recovery_reads: reads,
        recovery_ms: ms,
        worst,
        paper_scale: scale == Scale::Paper,
        layout_estimate: (est_reads, est_s),
        device,
        points: points.len(),
    })
}

/// The grid's figures the claims are graded on.
struct OptrSummary {
    mean_overhead_pct: f64,
    max_overhead_pct: f64,
    incremental_checkpoint_pct: f64,
    internal_flush_pct: f64,
    /// The largest recovery measured after a grid point (power cut after its final flush).
    recovery_reads: f64,
    recovery_ms: f64,
    /// The measured worst case (`optr_recovery`) with the largest recovery time, and its
    /// workload.
    worst: Option<(String, WorstCase)>,
    /// Whether the grid ran on the paper's 128 GB device.
    paper_scale: bool,
    /// (reads, seconds) of the layout's analytic worst case: shown, never graded.
    layout_estimate: (u64, f64),
    device: &'static str,
    points: usize,
}

/// The recovery-time sub-claim: at most 1 s + 15 % on 128 GB, measured at the worst point the
/// device reaches (`optr_recovery`); not graded at the quick scale, nor where that worst case
/// was not measured (never graded on a missing number).
fn recovery_check(s: &OptrSummary) -> Check {
    let Some((worst_label, worst)) = s.worst.clone() else {
        return Check::not_reproduced(
            "recovery time at the measured worst case",
            "OPTR §7.5's worst case was not measured at this point (the experiment's skipped line says why)",
        );
    };
    if s.paper_scale {
        Check::grade(
            format!(
                "recovery time at the measured worst case, {worst_label} ({} reads; ms, simulated)",
                worst.recovery_reads
            ),
            worst.recovery_ms,
            Tolerance::AtMost { max: 1150.0 },
        )
    } else {
        Check::not_reproduced(
            format!("recovery on 128 GB (quick scale: measured worst case {} reads, {} ms on 4 GB, {worst_label})", worst.recovery_reads, fmt(worst.recovery_ms)),
            "the claim is about the paper's 128 GB device: run `mobius compare --scale paper --only optr`",
        )
    }
}

/// OPTR §7's claims, graded. Tolerances: mean overhead below 2 % and at most 11.1 % + 15 %
/// (Fig. 13); incremental checkpoints below 0.075 % of programs (Fig. 12a); internal flushes at
/// most 17 % + 15 % of programs (Fig. 12d); recovery time as [`recovery_check`].
fn graded_claims(s: &OptrSummary) -> Vec<Claim> {
    vec![
        Claim::new("OPTR §7, Fig. 13", "OPTR incurs less than 2 % throughput overhead on average and up to 11.1 %")
            .check(Check::grade(format!("mean throughput overhead over {} points (%)", s.points), s.mean_overhead_pct, Tolerance::Below { bound: 2.0 }))
            .check(Check::grade("largest throughput overhead (%)", s.max_overhead_pct, Tolerance::AtMost { max: 11.1 * 1.15 }))
            .note(format!("{}. Both designs run the same host sequence with the same 8 MB LRU cache; throughput is host MB over simulated time up to the end of the final flush. The baseline writes summary pages too (§7), as OPTR does.", s.device)),
        Claim::new("OPTR §7, Fig. 12a", "incremental checkpoints take less than 0.075 % of page programs")
            .check(Check::grade("largest share of programs that are incremental checkpoints (%)", s.incremental_checkpoint_pct, Tolerance::Below { bound: 0.075 })),
        Claim::new("OPTR §7, Fig. 12d", "internal flushes: less than 4 % of programs at a flush every 4 writes, up to 17 % at 64")
            .check(Check::grade("largest share of programs written by internal flushes (%)", s.internal_flush_pct, Tolerance::AtMost { max: 17.0 * 1.15 }))
            .note("Counted as in the paper: pages an internal flush wrote back, which the baseline would mostly write later anyway."),
        Claim::new("OPTR §7, recovery time", "worst case 10,496 reads × 100 µs ≈ 1 s on 128 GB")
            .check(recovery_check(s))
            .note(format!("Measured: a power cut just before the incremental area overflows (it is then as full as it gets; the table beside gives the diff entries pending at the cut, fewer than a full buffer where GC's checkpoints, not a full diff buffer, fill the area), then OPTR's recovery with the simulator's timing, where reads on different chips overlap (the paper's estimate assumes none). After the grid's points (a cut after the final flush) recovery took at most {} reads, {} ms. For reference, not graded: the layout's analytic worst case on this device is {} reads ≈ {} s (both seals + a full checkpoint + the whole incremental area + the summaries a full diff buffer reaches + every open block's OOBs, read one after another).", fmt(s.recovery_reads), fmt(s.recovery_ms), s.layout_estimate.0, fmt(s.layout_estimate.1))),
    ]
}

/// Experiment entry point (`mobius compare --only optr`).
pub fn run(ctx: &Context) -> ExperimentResult {
    const TITLE: &str = "5. OPTR overhead against its write-cached baseline (OPTR Figs. 12-13, §7)";
    let (Some(optr), Some(wcache)) = (ctx.design("optr"), ctx.design("wcache")) else {
        return ExperimentResult::failed("optr", TITLE, "optr or wcache not built".into());
    };
    let grid = match Grid::for_scale(ctx.scale) {
        Ok(g) => g.at_point(ctx, optr, wcache),
        Err(e) => return ExperimentResult::failed("optr", TITLE, e.to_string()),
    };
    let points = match run_grid(optr, wcache, &grid, ctx.seed, &|d, t| {
        (ctx.progress)("optr", d, t)
    }) {
        Ok(p) => p,
        Err(e) => return ExperimentResult::failed("optr", TITLE, e.to_string()),
    };
    let (est_reads, est_s) = recovery_estimate(&grid);
    // The grid's claims do not need the worst case: without it, only the recovery claim is
    // left ungraded (`graded_claims`), and the reason is shown.
    let (worst, skipped) = match worst_cases(optr, &grid, ctx.seed) {
        Ok(w) => (w, Vec::new()),
        Err(e) => (Vec::new(), vec![format!("OPTR §7.5's worst case: {e}")]),
    };
    ExperimentResult {
        id: "optr",
        title: TITLE.into(),
        description: format!(
            "Random writes within a 1 MB / 80 MB / 1 GB footprint, 16 KB / 1 MB / half-and-half requests, a flush every 1 … 16,384 writes, {} MB per point, on `{}` ({} blocks per chip), fill {} %. Same seed for both designs at each point.",
            grid.host_bytes >> 20,
            grid.device.preset,
            grid.device.geometry.blocks_per_chip,
            grid.fill * 100.0
        ),
        tables: vec![table(&points), worst_case_table(&worst)],
        figures: ["high", "medium", "low"].iter().map(|l| figure(&points, l)).collect(),
        claims: claims(&points, &worst, &grid, ctx.scale),
        data: serde_json::json!({
            "points": points,
            "recovery_estimate": { "reads": est_reads, "seconds": est_s },
            "worst_case_recovery": worst,
        }),
        skipped,
        host: Some(grid.device.host),
        ran: crate::Ran::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The CI-sized grid: every point runs on both designs, OPTR writes each extra kind of
    /// page somewhere, and its recovery after every point reads something.
    #[test]
    fn tiny_grid_runs_and_counts_causes() {
        let grid = Grid::tiny().unwrap();
        let points = run_grid(&optr::spec(), &wcache::spec(), &grid, 5, &|_, _| {}).unwrap();
        assert_eq!(points.len(), 27);
        let any = |k: &str| points.iter().any(|p| p.optr.metric(k) > 0.0);
        assert!(any("extra_incremental_checkpoint_pages"));
        assert!(any("extra_record_pages"));
        assert!(any("extra_full_checkpoint_pages"));
        assert!(any("extra_internal_flush_pages"));
        for p in &points {
            assert_eq!(p.optr.host_pages, p.wcache.host_pages);
            assert!(p.optr.mb_s > 0.0 && p.wcache.mb_s > 0.0);
            assert!(p.optr.recovery_reads > 0);
        }
        assert!(points.iter().any(|p| p.optr.gc_copies > 0), "GC must run");
        for p in &points {
            eprintln!(
                "{} {} {}: wcache {:.1} MB/s optr {:.1} MB/s overhead {:.1} % programs {:+.1} % gc {}/{}",
                p.locality,
                p.size,
                p.flush_every,
                p.wcache.mb_s,
                p.optr.mb_s,
                p.overhead_pct(),
                p.extra_programs_pct(),
                p.wcache.gc_copies,
                p.optr.gc_copies
            );
        }
    }
}

#[cfg(test)]
mod claim_tests {
    use super::*;
    use crate::claims::Verdict;

    fn paper() -> OptrSummary {
        OptrSummary {
            mean_overhead_pct: 1.5,
            max_overhead_pct: 11.0,
            incremental_checkpoint_pct: 0.05,
            internal_flush_pct: 16.0,
            recovery_reads: 8_000.0,
            recovery_ms: 400.0,
            worst: Some((
                "no flushes".into(),
                WorstCase {
                    recovery_reads: 10_496,
                    recovery_ms: 1_000.0,
                    ..WorstCase::default()
                },
            )),
            paper_scale: true,
            layout_estimate: (10_496, 1.05),
            device: "test",
            points: 27,
        }
    }

    fn verdicts(s: &OptrSummary) -> Vec<Verdict> {
        graded_claims(s).iter().map(|c| c.verdict()).collect()
    }

    #[test]
    fn paper_like_numbers_pass() {
        assert_eq!(verdicts(&paper()), vec![Verdict::Pass; 4]);
    }

    #[test]
    fn numbers_that_contradict_the_paper_fail() {
        let bad = [
            OptrSummary {
                mean_overhead_pct: 2.5,
                ..paper()
            },
            OptrSummary {
                incremental_checkpoint_pct: 0.1,
                ..paper()
            },
            OptrSummary {
                internal_flush_pct: 21.1,
                ..paper()
            },
            OptrSummary {
                worst: Some((
                    "no flushes".into(),
                    WorstCase {
                        recovery_reads: 12_000,
                        recovery_ms: 1_900.0,
                        ..WorstCase::default()
                    },
                )),
                ..paper()
            },
        ];
        for (i, s) in bad.iter().enumerate() {
            assert_eq!(verdicts(s)[i], Verdict::Fail, "claim {i}");
        }
        let quick = OptrSummary {
            paper_scale: false,
            ..paper()
        };
        assert_eq!(verdicts(&quick)[3], Verdict::NotReproduced);
    }

    /// A point where the worst case was not measured grades the grid's claims and leaves the
    /// recovery claim ungraded, at either scale: never a verdict on a number not measured.
    #[test]
    fn without_the_worst_case_recovery_is_not_graded() {
        for paper_scale in [true, false] {
            let s = OptrSummary {
                worst: None,
                paper_scale,
                ..paper()
            };
            let v = verdicts(&s);
            assert_eq!(v[..3], [Verdict::Pass; 3]);
            assert_eq!(v[3], Verdict::NotReproduced, "paper scale {paper_scale}");
        }
    }

    /// The worst-case run reaches its full checkpoint within its bound at the table of
    /// unknowns' highest over-provisioning (25 %), where the writes it needs are most: at 4 ×
    /// the pages it did not (the robustness campaign of 2026-12-07).
    #[test]
    fn the_worst_case_is_reached_at_the_highest_over_provisioning() {
        let grid = Grid::quick().unwrap();
        let optr = optr::spec();
        let options = grid.options(&optr).with("op", "0.25");
        let pages = grid.device.geometry.pages() as u64;
        let run = |max_writes| crate::optr_recovery::WorstCaseRun {
            device: grid.device.clone(),
            options: options.clone(),
            flush_every: Some(16),
            max_writes,
            seed: 1,
        };
        let w = run(WORST_CASE_WRITES_PER_PAGE * pages)
            .measure(&optr)
            .unwrap();
        assert!(w.requests > 4 * pages, "{} requests", w.requests);
        assert!(run(4 * pages).measure(&optr).is_err());
    }
}

#[cfg(test)]
mod probe {
    use super::*;

    /// OPTR §7's static modulo chip allocation against our soonest-idle default, on the whole
    /// grid of `SCALE` (quick or paper; `HOST_MB` host megabytes per point instead of the
    /// grid's): `cargo test --release -p mobius-compare chip_allocation_grid -- --ignored
    /// --nocapture` (docs/optr.md).
    #[test]
    #[ignore]
    fn chip_allocation_grid() {
        let paper = std::env::var("SCALE").is_ok_and(|s| s == "paper");
        for allocation in ["soonest-idle", "modulo"] {
            let mut grid = if paper { Grid::paper() } else { Grid::quick() }.unwrap();
            if let Some(mb) = std::env::var("HOST_MB")
                .ok()
                .and_then(|v| v.parse::<u64>().ok())
            {
                grid.host_bytes = mb * MB;
            }
            grid.params.retain(|(k, _)| k != "chip_allocation");
            grid.params
                .push(("chip_allocation".into(), allocation.into()));
            let p = run_grid(&optr::spec(), &wcache::spec(), &grid, 5, &|_, _| {}).unwrap();
            let [mean, max, inc, iflush, reads, ms] = summary(&p);
            let fallbacks = |pick: fn(&Point) -> &Run| {
                p.iter()
                    .map(|x| pick(x).metric("modulo_fallbacks"))
                    .sum::<f64>()
            };
            let mb = |pick: fn(&Point) -> &Run| {
                p.iter().map(|x| pick(x).mb_s).sum::<f64>() / p.len() as f64
            };
            eprintln!(
                "{allocation}: overhead mean {mean:.2} % max {max:.2} %, inc {inc:.4} %, internal flush {iflush:.2} %, recovery {reads} reads {ms:.1} ms; mean MB/s wcache {:.1} optr {:.1}; fallbacks wcache {} optr {}",
                mb(|x| &x.wcache), mb(|x| &x.optr), fallbacks(|x| &x.wcache), fallbacks(|x| &x.optr)
            );
        }
    }
    #[test]
    #[ignore]
    fn probe_point() {
        let mut grid = Grid::quick().unwrap();
        let env = |k: &str| std::env::var(k).ok();
        if let Some(f) = env("FILL") {
            grid.fill = f.parse().unwrap();
        }
        let loc = env("LOC").map_or(1024, |v| v.parse().unwrap());
        grid.localities = vec![("probe", loc * MB)];
        grid.sizes = vec![("small", 16 << 10, 16 << 10)];
        grid.flush_every = vec![env("FE").map_or(64, |v| v.parse().unwrap())];
        grid.host_bytes = 1024 * MB;
        if let Some(p) = env("OPTR_P") {
            let (k, v) = p.split_once('=').unwrap();
            grid.optr_params.push((k.into(), v.into()));
        }
        if let Some(p) = env("BASE_P") {
            let (k, v) = p.split_once('=').unwrap();
            grid.baseline_params.push((k.into(), v.into()));
        }
        let p = run_grid(&optr::spec(), &wcache::spec(), &grid, 5, &|_, _| {}).unwrap();
        eprintln!("{:#?}", p[0]);
        eprintln!("overhead {}", p[0].overhead_pct());
    }
}
