//! Experiment 3 — recovery time against scanning-zone size (Möbius §V-B, Fig. 11).
//!
//! For each zone size (0.5, 1, 2, 4 GB) and each design: a fresh 64 GB `jasmine` device, the
//! design configured so that the area its recovery scans is that zone (where the design has such a
//! knob), then that many bytes written as 32-page transactions (plain 32-page writes for DFTL),
//! then a power cut and the design's recovery on the image alone. Reported: simulated recovery
//! time and flash reads. The knob per design:
//! - DFTL: `checkpoint_blocks` — blocks opened between checkpoints, i.e. the post-checkpoint
//!   area its OOB scan covers; the writes stop when the blocks opened since the checkpoint
//!   (translation pages included) are a block per chip short of it, not after the zone's bytes;
//! - LightTx: `zone_blocks` — the available + unavailable zones its recovery scans;
//! - Möbius: none — recovery scans the active Atom Log Area (12 MB by default) whatever was written;
//! - Atomic-Write: none — it scans the log since the last mapping flush (one transaction);
//! - TxFlash: none — recovery reads every block's summary page (device-sized).

use crate::claims::{Check, Claim, Tolerance};
use crate::error::metric;
use crate::number::fmt;
use crate::result::{ExperimentResult, Figure, Table};
use crate::svg::{LineChart, Series};
use crate::Context;
use flash::{Flash, Lpn};
use ftl::{DesignOptions, SwriteMode};
use lab::driver::Driver;
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

pub const ZONES_GB: [f64; 4] = [0.5, 1.0, 2.0, 4.0];

struct Subject {
    label: &'static str,
    design: &'static str,
    /// Design parameter that sets the scanned zone, in blocks.
    zone_param: Option<&'static str>,
    /// A metric of blocks written into the zone so far, where the bytes written are not it.
    zone_metric: Option<&'static str>,
    transactional: bool,
}

const SUBJECTS: [Subject; 5] = [
    Subject {
        label: "Möbius (ALA)",
        design: "mobius",
        zone_param: None,
        zone_metric: None,
        transactional: true,
    },
    Subject {
        label: "LightTx (zones)",
        design: "lighttx",
        zone_param: Some("zone_blocks"),
        zone_metric: None,
        transactional: true,
    },
    Subject {
        label: "Atomic-Write",
        design: "atomic-write",
        zone_param: None,
        zone_metric: None,
        transactional: true,
    },
    Subject {
        label: "DFTL",
        design: "dftl",
        zone_param: Some("checkpoint_blocks"),
        zone_metric: Some("blocks_since_checkpoint"),
        transactional: false,
    },
    Subject {
        label: "TxFlash (BPCC)",
        design: "txflash-bpcc",
        zone_param: None,
        zone_metric: None,
        transactional: true,
    },
];

/// One recovery: the design's own "ready" time and reads, and the page-validity rebuild it
/// leaves until after ready (Möbius only; the others rebuild before they report ready).
struct Recovery {
    ms: f64,
    reads: u64,
    rebuild_ms: f64,
    rebuild_reads: u64,
}

/// The recovery after writing `zone_gb` on a fresh device; with `ala_full`, after committing
/// further transactions until Möbius's active ALA is one inode short of its merge threshold (the
/// worst case of its merge cycle: the longest ALA scan and the most unflagged inodes).
fn measure(
    ctx: &Context,
    s: &Subject,
    zone_gb: f64,
    ala_full: bool,
) -> crate::error::Result<Recovery> {
    measure_with(ctx, s, zone_gb, ala_full, DesignOptions::default())
}

/// Möbius's evaluation setting (§V: "We implement Möbius with 20MB active ALA size"); its
/// Resident Area must hold the active ALA's mappings, which 20 % of 64 MB does not (§IV-A gives
/// c = 20 % with the implementation section's 12 MB), so c is raised to 31 %.
pub const EVALUATION_PROFILE: [(&str, &str); 2] = [("active_ala_mb", "20"), ("c_percent", "31")];

fn measure_with(
    ctx: &Context,
    s: &Subject,
    zone_gb: f64,
    ala_full: bool,
    options: DesignOptions,
) -> crate::error::Result<Recovery> {
    let mut zone = write_zone(ctx, s, zone_gb, options)?;
    if ala_full {
        zone.fill_active_ala(1.0)?;
    }
    zone.recover_after_cut()
}

/// A device with a zone's worth of data written, behind the driver that wrote it (to write
/// more).
struct Zone {
    driver: Driver,
    spec: ftl::DesignSpec,
    options: DesignOptions,
    config: flash::DeviceConfig,
    /// How a transaction commits: SWRITE, or plain writes for a design without transactions.
    commit: Option<SwriteMode>,
    rng: ChaCha8Rng,
    t: u64,
}

/// A fresh `jasmine` device with `zone_gb` written as 32-page transactions (plain writes for a
/// design without them), the design's zone knob set to the zone.
fn write_zone(
    ctx: &Context,
    s: &Subject,
    zone_gb: f64,
    mut options: DesignOptions,
) -> crate::error::Result<Zone> {
    let spec = ctx.built(s.design)?.clone();
    let config = ctx.device("jasmine")?;
    let g = config.geometry.clone();
    let zone_bytes = (zone_gb * (1u64 << 30) as f64) as u64;
    let zone_blocks = zone_bytes / g.block_bytes();
    if let Some(p) = s.zone_param {
        options = options.with(p, zone_blocks);
    }
    // The options at this run's point of the table of unknowns, kept for the recovery.
    let options = ctx.unknowns.options(&spec, &g, options);
    let dev = lab::device::fresh(&spec, &config, &options, true)?;
    let mut zone = Zone {
        driver: Driver::over(dev, 0).writes_from(1),
        spec,
        options,
        config,
        commit: s.transactional.then_some(SwriteMode::Sync),
        rng: ChaCha8Rng::seed_from_u64(ctx.seed),
        t: 0,
    };
    // Stop one block short of the zone, so a design that checkpoints every zone has not yet done so.
    let pages = (zone_bytes / g.page_bytes as u64).saturating_sub(g.pages_per_block as u64);
    // DFTL: its checkpoint counts every block opened, translation pages included, so the data
    // alone would cross it early and leave a scan zone of a few hundred blocks. Stop instead when
    // the blocks opened since the checkpoint are one request's worth (a block per chip) short of
    // the zone.
    let zone_metric = s
        .zone_metric
        .map(|m| (m, zone_blocks.saturating_sub(g.chips() as u64)));
    let mut written = 0u64;
    while match zone_metric {
        Some((m, target)) => (metric(zone.driver.device(), m)? as u64) < target,
        None => written < pages,
    } {
        zone.commit_one()?;
        written += 32;
    }
    Ok(zone)
}

impl Zone {
    /// One more 32-page transaction at random places.
    fn commit_one(&mut self) -> crate::error::Result<()> {
        let lpns = random_lpns(&mut self.rng, self.driver.device().logical_pages());
        self.t = self.driver.commit(&lpns, self.commit, self.t)?.ack_ns;
        Ok(())
    }

    /// Möbius's active ALA fill against its merge threshold: (inodes, threshold).
    fn active_ala(&self) -> crate::error::Result<(f64, f64)> {
        // One metrics call: it scans the whole device.
        let m = self.driver.device().metrics();
        let get = |k: &str| {
            m.iter().find(|(n, _)| n == k).map(|x| x.1).ok_or_else(|| {
                crate::error::MeasureError::MissingMetric {
                    design: self.driver.device().design(),
                    metric: k.to_string(),
                }
            })
        };
        Ok((get("ala_active_inodes")?, get("ala_active_limit")?))
    }

    /// Commits until Möbius's active ALA is within two inodes of `fraction` of its merge
    /// threshold (1.0: one inode short of the merge, the worst point of the cycle).
    fn fill_active_ala(&mut self, fraction: f64) -> crate::error::Result<()> {
        loop {
            let (active, limit) = self.active_ala()?;
            let target = fraction * limit;
            if active + 2.0 > target {
                return Ok(());
            }
            // Metrics scan the whole device: look again only after half the room left, each
            // transaction appending at least one inode and at most two.
            for _ in 0..((target - active - 2.0) / 2.0).max(1.0) as u64 {
                self.commit_one()?;
            }
        }
    }

    /// Commits until Möbius's active ALA has just been merged (its fill dropped).
    fn start_merge_cycle(&mut self) -> crate::error::Result<()> {
        let (mut last, limit) = self.active_ala()?;
        loop {
            // Each transaction appends one or two inodes, so half the room left can be committed
            // before looking again without reaching the threshold; near it, one at a time.
            for _ in 0..((limit - last - 2.0) / 2.0).max(1.0) as u64 {
                self.commit_one()?;
            }
            let (active, _) = self.active_ala()?;
            if active < last {
                return Ok(());
            }
            last = active;
        }
    }

    /// The recovery of a copy of the device cut now (the device runs on).
    fn recover_copy(&self) -> crate::error::Result<Recovery> {
        let flash = self.driver.device().flash();
        let end = flash.idle_ns();
        let mut flash = Flash::new(self.config.clone(), flash.store().snapshot());
        flash.start_clock_at(end);
        recover_image(&self.spec, flash, &self.options)
    }

    /// The recovery of the device cut now.
    fn recover_after_cut(self) -> crate::error::Result<Recovery> {
        let end = self.driver.device().flash().idle_ns();
        let mut flash = self.driver.into_device().into_flash();
        flash.start_clock_at(end);
        recover_image(&self.spec, flash, &self.options)
    }
}

/// The design's recovery on `flash` alone: its ready time and reads, and the page-validity
/// rebuild it leaves until after ready.
fn recover_image(
    spec: &ftl::DesignSpec,
    flash: Flash,
    options: &DesignOptions,
) -> crate::error::Result<Recovery> {
    let (_dev, report) = spec
        .reopen(flash, options)
        .map_err(|e| crate::error::MeasureError::step("recovery", e))?;
    let detail = |k: &str| {
        report
            .details
            .iter()
            .find(|(n, _)| n == k)
            .map_or(0.0, |d| d.1)
    };
    Ok(Recovery {
        ms: report.sim_ns as f64 / 1e6,
        reads: report.flash_reads,
        rebuild_ms: detail("validity_rebuild_ms"),
        rebuild_reads: detail("validity_rebuild_reads") as u64,
    })
}

/// Möbius cut at `points` evenly spaced fills of its active ALA over one merge cycle (from just
/// after a merge to one inode short of the next), after `zone_gb` written: the recoveries, in
/// fill order. Each cut recovers a copy of the device (`recover_copy`; checked once against
/// the device itself: 61.538 + 410.052 ms at 4 GB both ways).
fn measure_merge_cycle(
    ctx: &Context,
    s: &Subject,
    zone_gb: f64,
    points: usize,
) -> crate::error::Result<Vec<Recovery>> {
    let mut zone = write_zone(ctx, s, zone_gb, DesignOptions::default())?;
    zone.start_merge_cycle()?;
    let mut cuts = Vec::with_capacity(points);
    for k in 1..=points {
        zone.fill_active_ala(k as f64 / points as f64)?;
        cuts.push(zone.recover_copy()?);
    }
    Ok(cuts)
}

/// 32 distinct random pages below `range` (one transaction of the experiment).
fn random_lpns(rng: &mut ChaCha8Rng, range: u32) -> Vec<Lpn> {
    let mut lpns: Vec<Lpn> = Vec::with_capacity(32);
    while lpns.len() < 32 {
        let l = Lpn(rng.random_range(0..range));
        if !lpns.contains(&l) {
            lpns.push(l);
        }
    }
    lpns
}

pub fn run(ctx: &Context) -> ExperimentResult {
    let mut skipped = Vec::new();
    let mut data = serde_json::Map::new();
    let mut series = Vec::new();
    let mut rows = Vec::new();
    let mut ms = vec![vec![f64::NAN; ZONES_GB.len()]; SUBJECTS.len()];
    // Ready with the page-validity rebuild counted, the way every other design counts it.
    let mut full = ms.clone();
    let mut rebuild_rows = Vec::new();
    let total = (SUBJECTS.len() * ZONES_GB.len()) as u64;
    let mut step = 0;
    for (i, s) in SUBJECTS.iter().enumerate() {
        if ctx.design(s.design).is_none() {
            skipped.push(format!("{}: design '{}' not built", s.label, s.design));
            step += ZONES_GB.len() as u64;
            continue;
        }
        let curve = measure_zones(ctx, s, &mut step, total, &mut skipped);
        let (row, rebuild_row) = curve.rows(s);
        rows.push(row);
        rebuild_rows.extend(rebuild_row);
        data.insert(s.label.into(), curve.to_json());
        series.push(Series {
            name: s.label.into(),
            points: ZONES_GB
                .iter()
                .copied()
                .zip(curve.ms.iter().copied())
                .collect(),
        });
        ms[i] = curve.ms;
        full[i] = curve.full;
    }
    rows.extend(rebuild_rows);
    let (worst, worst_eval) = if ctx.design(SUBJECTS[0].design).is_some() {
        (
            worst_case_row(ctx, &mut rows, &mut data, &mut skipped),
            evaluation_profile_row(ctx, &mut rows, &mut data, &mut skipped),
        )
    } else {
        (vec![f64::NAN; ZONES_GB.len()], f64::NAN)
    };
    let cycle_mean = if ctx.design(SUBJECTS[0].design).is_some() {
        merge_cycle_row(ctx, &mut rows, &mut data, &mut skipped)
    } else {
        f64::NAN
    };
    let mut claims = claims(&ms, &full, &worst, worst_eval, cycle_mean);
    let mut figures = vec![Figure {
        file: "fig11_recovery.svg".into(),
        caption: "Möbius Fig. 11 — recovery time vs scanning zone".into(),
        svg: LineChart {
            title: "Recovery time".into(),
            x_label: "scanning zone (GB)".into(),
            y_label: "recovery time (ms, log)".into(),
            log_x: false,
            log_y: true,
            series,
        }
        .to_svg(),
    }];
    let mut tables = vec![Table {
        caption: "Simulated recovery time (flash reads) after writing the zone".into(),
        header: std::iter::once("design".to_string())
            .chain(ZONES_GB.iter().map(|g| format!("{g} GB")))
            .collect(),
        rows,
    }];
    if ctx.design(SUBJECTS[0].design).is_some() && ctx.design(SUBJECTS[1].design).is_some() {
        let (figure, table, claim) =
            scanning_zone_report(ctx, &ms[1], &ms[3], &mut data, &mut skipped);
        figures.push(figure);
        tables.push(table);
        claims.push(claim);
    }
    ExperimentResult {
        id: "recovery",
        title: "3. Recovery time against scanning-zone size (Möbius Fig. 11)".into(),
        description: "Fresh 64 GB jasmine device per point; the zone's worth of data written as 32-page transactions, then a power cut and recovery. See `crates/compare/src/recovery.rs` for the knob each design exposes. The first figure keeps Möbius's active ALA at its default and charges its validity rebuild like for like; the second draws each design against its own scanning zone as §V-B defines it (Möbius: the active ALA, cut full).".into(),
        tables,
        figures,
        claims,
        data: serde_json::Value::Object(data),
        skipped,
        host: ctx.device("jasmine").ok().map(|c| c.host),
        ran: crate::Ran::default(),
    }
}

/// One subject's recovery at every zone size (NaN where a measurement failed, named in
/// `skipped`).
struct ZoneCurve {
    ms: Vec<f64>,
    /// `ms` plus the page-validity rebuild.
    full: Vec<f64>,
    reads: Vec<u64>,
    /// (ms, reads) of the validity rebuild.
    rebuild: Vec<(f64, u64)>,
}

fn measure_zones(
    ctx: &Context,
    s: &Subject,
    step: &mut u64,
    total: u64,
    skipped: &mut Vec<String>,
) -> ZoneCurve {
    let mut curve = ZoneCurve {
        ms: Vec::new(),
        full: Vec::new(),
        reads: Vec::new(),
        rebuild: Vec::new(),
    };
    for &gb in ZONES_GB.iter() {
        match measure(ctx, s, gb, false) {
            Ok(r) => {
                curve.ms.push(r.ms);
                curve.full.push(r.ms + r.rebuild_ms);
                curve.reads.push(r.reads);
                curve.rebuild.push((r.rebuild_ms, r.rebuild_reads));
            }
            Err(e) => {
                skipped.push(format!("{} at {gb} GB: {e}", s.label));
                curve.ms.push(f64::NAN);
                curve.full.push(f64::NAN);
                curve.reads.push(0);
                curve.rebuild.push((f64::NAN, 0));
            }
        }
        *step += 1;
        (ctx.progress)("recovery", *step, total);
    }
    curve
}

impl ZoneCurve {
    /// The subject's table row, and a second one with the validity rebuild counted when the
    /// design has one.
    fn rows(&self, s: &Subject) -> (Vec<String>, Option<Vec<String>>) {
        let row = std::iter::once(s.label.to_string())
            .chain(
                self.ms
                    .iter()
                    .zip(&self.reads)
                    .map(|(t, r)| format!("{} ms ({r} reads)", fmt(*t))),
            )
            .collect();
        let rebuild_row = self.rebuild.iter().any(|r| r.1 > 0).then(|| {
            std::iter::once(format!("{} + validity rebuild", s.label))
                .chain(
                    self.full
                        .iter()
                        .zip(&self.reads)
                        .zip(&self.rebuild)
                        .map(|((t, r), b)| format!("{} ms ({} reads)", fmt(*t), r + b.1)),
                )
                .collect()
        });
        (row, rebuild_row)
    }

    fn to_json(&self) -> serde_json::Value {
        let rebuild_ms: Vec<f64> = self.rebuild.iter().map(|r| r.0).collect();
        serde_json::json!({ "zone_gb": ZONES_GB, "recovery_ms": self.ms, "flash_reads": self.reads,
            "validity_rebuild_ms": rebuild_ms, "recovery_with_rebuild_ms": self.full })
    }
}

/// Möbius at the worst point of its merge cycle (active ALA full), rebuild counted, at every
/// zone size: a row of the table; returns the times.
fn worst_case_row(
    ctx: &Context,
    rows: &mut Vec<Vec<String>>,
    data: &mut serde_json::Map<String, serde_json::Value>,
    skipped: &mut Vec<String>,
) -> Vec<f64> {
    let mut worst = vec![f64::NAN; ZONES_GB.len()];
    let mut cells = Vec::new();
    for (z, &gb) in ZONES_GB.iter().enumerate() {
        match measure(ctx, &SUBJECTS[0], gb, true) {
            Ok(r) => {
                worst[z] = r.ms + r.rebuild_ms;
                cells.push(format!(
                    "{} ms ({} reads)",
                    fmt(worst[z]),
                    r.reads + r.rebuild_reads
                ));
            }
            Err(e) => {
                skipped.push(format!("{} worst case at {gb} GB: {e}", SUBJECTS[0].label));
                cells.push("–".into());
            }
        }
    }
    rows.push(
        std::iter::once(format!(
            "{} + validity rebuild, active ALA full",
            SUBJECTS[0].label
        ))
        .chain(cells)
        .collect(),
    );
    data.insert(
        "Möbius worst case (active ALA full, rebuild counted)".into(),
        serde_json::json!({ "zone_gb": ZONES_GB, "recovery_with_rebuild_ms": worst }),
    );
    worst
}

/// The paper's 20 MB active ALA (§V evaluation), at the worst point of its merge cycle, at the
/// largest zone: a row of the table; returns the time.
fn evaluation_profile_row(
    ctx: &Context,
    rows: &mut Vec<Vec<String>>,
    data: &mut serde_json::Map<String, serde_json::Value>,
    skipped: &mut Vec<String>,
) -> f64 {
    let mut worst_eval = f64::NAN;
    let gb = ZONES_GB[ZONES_GB.len() - 1];
    let o = EVALUATION_PROFILE
        .iter()
        .fold(DesignOptions::default(), |o, (k, v)| o.with(k, v));
    let label = format!(
        "{} with a 20 MB active ALA (§V evaluation), + validity rebuild, active ALA full",
        SUBJECTS[0].label
    );
    let cell = match measure_with(ctx, &SUBJECTS[0], gb, true, o) {
        Ok(r) => {
            worst_eval = r.ms + r.rebuild_ms;
            format!(
                "{} ms ({} reads)",
                fmt(worst_eval),
                r.reads + r.rebuild_reads
            )
        }
        Err(e) => {
            skipped.push(format!("{label} at {gb} GB: {e}"));
            "–".into()
        }
    };
    let mut row = vec![label; 1];
    row.extend(std::iter::repeat_n("–".to_string(), ZONES_GB.len() - 1));
    row.push(cell);
    rows.push(row);
    data.insert(
        "Möbius 20 MB active ALA worst case (rebuild counted)".into(),
        serde_json::json!({ "zone_gb": gb, "recovery_with_rebuild_ms": worst_eval,
            "params": EVALUATION_PROFILE.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>() }),
    );
    worst_eval
}

/// Möbius's scanning zone as §V-B defines it, "ALA is the scanning zone in Möbius": the active
/// ALA its recovery reads from the Active ALA Head to the first blank page (§IV-C). Sizes in MB:
/// the implementation's 12 MB (§IV-C), the evaluation's 20 MB (§V), and larger ones the 64 MB
/// board could not hold (their Resident Area needs more DRAM than it had) up to what this
/// device's ALA ring allows; 512 MB at the paper scale only.
fn ala_zones_mb(scale: crate::Scale) -> &'static [f64] {
    match scale {
        crate::Scale::Quick => &[12.0, 20.0, 128.0],
        crate::Scale::Paper => &[12.0, 20.0, 128.0, 512.0],
    }
}

/// LightTx's zones of the scanning-zone figure below the experiment's [`ZONES_GB`]: the
/// quick scale's largest ALA of [`ala_zones_mb`], so that both designs run at one zone size
/// (the paper scale's, 0.5 GB, is in [`ZONES_GB`]).
const EXTRA_LIGHTTX_ZONES_GB: [f64; 1] = [0.125];

/// Möbius's options for an active ALA of `mb`: the default below the 12.8 MB its 64 MB of DRAM
/// holds at c = 20 %, the paper's evaluation profile at 20 MB, else DRAM raised until c = 20 %
/// holds the worst-case Resident Area (decision M1) and a ring twice the active ALA.
fn ala_zone_options(mb: f64) -> DesignOptions {
    let o = DesignOptions::default().with("active_ala_mb", mb);
    if mb <= 12.0 {
        o
    } else if mb <= 20.0 {
        EVALUATION_PROFILE.iter().fold(o, |o, (k, v)| o.with(k, v))
    } else {
        o.with("dram_mb", (mb * 5.0).ceil().max(64.0))
            .with("ala_mb", (mb * 2.0).max(500.0))
    }
}

/// Möbius cut with its active ALA of `mb` full (the scan covers the whole zone), on a fresh
/// device written only by the transactions that filled it.
fn measure_ala_zone(ctx: &Context, mb: f64) -> crate::error::Result<Recovery> {
    let mut zone = write_zone(ctx, &SUBJECTS[0], 0.0, ala_zone_options(mb))?;
    zone.fill_active_ala(1.0)?;
    zone.recover_after_cut()
}

/// Fig. 11 against each design's own scanning zone (§V-B): Möbius's active ALA, LightTx's
/// available + unavailable zones, DFTL's post-checkpoint area. `lighttx` and `dftl` are the
/// experiment's curves at [`ZONES_GB`]. Returns the figure, its table and the claim.
fn scanning_zone_report(
    ctx: &Context,
    lighttx: &[f64],
    dftl: &[f64],
    data: &mut serde_json::Map<String, serde_json::Value>,
    skipped: &mut Vec<String>,
) -> (Figure, Table, Claim) {
    let ala = ala_zones_mb(ctx.scale);
    let mut mobius = Vec::new();
    for &mb in ala {
        match measure_ala_zone(ctx, mb) {
            Ok(r) => mobius.push((mb / 1024.0, r.ms, r.ms + r.rebuild_ms, r.reads)),
            Err(e) => skipped.push(format!("Möbius with a {mb} MB active ALA: {e}")),
        }
    }
    let mut light: Vec<(f64, f64)> = Vec::new();
    for gb in EXTRA_LIGHTTX_ZONES_GB {
        match measure(ctx, &SUBJECTS[1], gb, false) {
            Ok(r) => light.push((gb, r.ms)),
            Err(e) => skipped.push(format!("{} at {gb} GB: {e}", SUBJECTS[1].label)),
        }
    }
    light.extend(ZONES_GB.iter().copied().zip(lighttx.iter().copied()));
    let dftl: Vec<(f64, f64)> = ZONES_GB.iter().copied().zip(dftl.iter().copied()).collect();
    data.insert(
        "scanning zone".into(),
        serde_json::json!({
            "Möbius active ALA": { "zone_gb": mobius.iter().map(|m| m.0).collect::<Vec<_>>(),
                "recovery_ms": mobius.iter().map(|m| m.1).collect::<Vec<_>>(),
                "recovery_with_rebuild_ms": mobius.iter().map(|m| m.2).collect::<Vec<_>>(),
                "flash_reads": mobius.iter().map(|m| m.3).collect::<Vec<_>>() },
            "LightTx zones": { "zone_gb": light.iter().map(|l| l.0).collect::<Vec<_>>(),
                "recovery_ms": light.iter().map(|l| l.1).collect::<Vec<_>>() },
        }),
    );
    let claim = scanning_zone_claim(&mobius, &light);
    let series = vec![
        Series {
            name: "Möbius (active ALA)".into(),
            points: mobius.iter().map(|m| (m.0, m.1)).collect(),
        },
        Series {
            name: "Möbius (active ALA) + validity rebuild".into(),
            points: mobius.iter().map(|m| (m.0, m.2)).collect(),
        },
        Series {
            name: "LightTx (zones)".into(),
            points: light.clone(),
        },
        Series {
            name: "DFTL (since checkpoint)".into(),
            points: dftl,
        },
    ];
    let figure = Figure {
        file: "fig11_recovery_scanning_zone.svg".into(),
        caption: "Möbius Fig. 11 — recovery time against each design's scanning zone (§V-B: Möbius's active ALA, LightTx's zones)".into(),
        svg: LineChart {
            title: "Recovery time against the scanning zone".into(),
            x_label: "scanning zone (GB, log)".into(),
            y_label: "recovery time (ms, log)".into(),
            log_x: true,
            log_y: true,
            series,
        }
        .to_svg(),
    };
    let table = Table {
        caption: "Möbius's recovery against its scanning zone, the active ALA (cut with it full)"
            .into(),
        header: [
            "active ALA",
            "recovery (ms)",
            "+ validity rebuild (ms)",
            "flash reads",
        ]
        .map(String::from)
        .to_vec(),
        rows: mobius
            .iter()
            .map(|m| {
                vec![
                    format!("{} MB", fmt(m.0 * 1024.0)),
                    fmt(m.1),
                    fmt(m.2),
                    m.3.to_string(),
                ]
            })
            .collect(),
    };
    (figure, table, claim)
}

/// The 29× graded with each design at its own scanning zone of one size: LightTx's zones and
/// Möbius's active ALA both `zone` GB, the largest size both ran (`mobius`: (zone GB, ready ms,
/// with rebuild ms, reads); `lighttx`: (zone GB, ms)).
fn scanning_zone_claim(mobius: &[(f64, f64, f64, u64)], lighttx: &[(f64, f64)]) -> Claim {
    let common = mobius
        .iter()
        .filter_map(|m| lighttx.iter().find(|l| l.0 == m.0).map(|l| (m, l.1)))
        .max_by(|a, b| a.0 .0.total_cmp(&b.0 .0));
    let (zone, ready, full) = match common {
        Some((m, l)) => (m.0, l / m.1, l / m.2),
        None => (f64::NAN, f64::NAN, f64::NAN),
    };
    let at = format!("{} GB", fmt(zone));
    Claim::new("Möbius §V-B, Fig. 11 (each design's scanning zone)", "Möbius recovers 29 times faster than LightTx when the scanning zone size is 4 GB; ALA is the scanning zone in Möbius while Available Zone and Unavailable Zone is the scanning zones in LightTx")
        .check(Check::grade(format!("LightTx / Möbius recovery time, both scanning zones {at} (Möbius's active ALA, cut full)"), ready, Tolerance::AtLeast { min: 10.0 }))
        .check(Check::grade(format!("the same, like for like: Möbius charged its page-validity rebuild ({at})"), full, Tolerance::AtLeast { min: 10.0 }))
        .note("Graded at the largest size both designs ran, not at 4 GB: a 4 GB active ALA needs a Resident Area of 3.9 GB (c = 20 % of 19.5 GB of DRAM; the board had 64 MB) and does not fit this device's ALA ring (4 % of the blocks, a third of it active: 0.85 GB at most). Möbius's ALA holds one whole page per transaction, each read in full at recovery, where LightTx reads only the spare area of each page of its zones; at one zone size the comparison is of those reads. Above 20 MB the active ALA runs with DRAM raised until c = 20 % holds its worst-case Resident Area (decision M1) and a ring twice its size.")
}

/// Cuts over one merge cycle of Möbius's active ALA at the largest zone.
const CYCLE_CUTS: usize = 8;

/// The row of Möbius cut at [`CYCLE_CUTS`] points of one merge cycle at the largest zone (rebuild
/// counted): mean, and the range. Returns the mean (NaN if it could not be measured).
fn merge_cycle_row(
    ctx: &Context,
    rows: &mut Vec<Vec<String>>,
    data: &mut serde_json::Map<String, serde_json::Value>,
    skipped: &mut Vec<String>,
) -> f64 {
    let gb = ZONES_GB[ZONES_GB.len() - 1];
    let label = format!(
        "{} + validity rebuild, mean over one merge cycle ({CYCLE_CUTS} cuts, min … max)",
        SUBJECTS[0].label
    );
    let (cell, mean) = match measure_merge_cycle(ctx, &SUBJECTS[0], gb, CYCLE_CUTS) {
        Ok(cuts) => {
            let with: Vec<f64> = cuts.iter().map(|r| r.ms + r.rebuild_ms).collect();
            let mean = with.iter().sum::<f64>() / with.len() as f64;
            let (lo, hi) = with
                .iter()
                .fold((f64::MAX, f64::MIN), |(a, b), &x| (a.min(x), b.max(x)));
            data.insert(
                "Möbius over one merge cycle (rebuild counted)".into(),
                serde_json::json!({ "zone_gb": gb, "recovery_with_rebuild_ms": with,
                    "mean_ms": mean }),
            );
            (
                format!("{} ms ({} … {})", fmt(mean), fmt(lo), fmt(hi)),
                mean,
            )
        }
        Err(e) => {
            skipped.push(format!("{label} at {gb} GB: {e}"));
            ("–".into(), f64::NAN)
        }
    };
    let mut row = vec![label];
    row.extend(std::iter::repeat_n("–".to_string(), ZONES_GB.len() - 1));
    row.push(cell);
    rows.push(row);
    mean
}

/// The paper's Fig. 11 claim graded on `ms[subject][zone]` (simulated ms; subjects in
/// [`SUBJECTS`] order, zones in [`ZONES_GB`] order) and on `full`, the same with the page-validity
/// rebuild a design leaves until after its ready instant counted (Möbius; the others count it).
///
/// Tolerances: the paper reports 29× at a 4 GB zone; we require at least 10× (the order of
/// magnitude, since the prototype's recovery also paid CPU time we do not model), and the shape
/// the ratio comes from: LightTx's time grows with its zone (4 GB at least 4× the 0.5 GB time)
/// while Möbius's, which scans only its Atom Log Area, does not (within ± 25 %).
fn claims(
    ms: &[Vec<f64>],
    full: &[Vec<f64>],
    worst: &[f64],
    worst_eval: f64,
    cycle_mean: f64,
) -> Vec<Claim> {
    let last = ZONES_GB.len() - 1;
    let (m, l) = (&ms[0], &ms[1]);
    let (mf, lf) = (&full[0], &full[1]);
    vec![Claim::new("Möbius §V-B, Fig. 11", "Möbius recovers 29 times faster than LightTx when the scanning zone is 4 GB")
        .check(Check::grade("LightTx / Möbius recovery time at 4 GB", l[last] / m[last], Tolerance::AtLeast { min: 10.0 }))
        .check(Check::grade("the same, like for like: Möbius charged its page-validity rebuild", lf[last] / mf[last], Tolerance::AtLeast { min: 10.0 }))
        .check(Check::grade("the same, like for like, Möbius averaged over its merge cycle", lf[last] / cycle_mean, Tolerance::AtLeast { min: 10.0 }))
        .check(Check::grade("the same, like for like, Möbius cut with its active ALA full (worst of its merge cycle)", lf[last] / worst[last], Tolerance::AtLeast { min: 10.0 }))
        .check(Check::grade("the same, like for like, worst point, with the paper's 20 MB active ALA (c = 31 %)", lf[last] / worst_eval, Tolerance::AtLeast { min: 10.0 }))
        .check(Check::grade("LightTx recovery 4 GB / 0.5 GB", l[last] / l[0], Tolerance::AtLeast { min: 4.0 }))
        .check(Check::grade("Möbius recovery 4 GB / 0.5 GB, each cut at the same point of its merge cycle (active ALA full, rebuild counted)", worst[last] / worst[0], Tolerance::Within { target: 1.0, rel: 0.25 }))
        .note(format!("Simulated flash reads only (tR + transfer per page, chips in parallel); the prototype's recovery also paid ARM7 CPU time, which we do not model. Möbius reports ready before rebuilding page validity for GC (one read per translation page, after ready); LightTx and the others read their whole mapping before ready, so the second line charges Möbius that rebuild. Möbius's own time depends on how full its active ALA is at the cut (where in the merge cycle), not on the zone, so its growth with the zone is graded with every cut at the same point of that cycle; cut wherever the writes end, its ready time at 4 GB / 0.5 GB is {:.3}.", m[last] / m[0]))]
}

#[cfg(test)]
mod claim_tests {
    use super::*;
    use crate::claims::Verdict;

    fn table(mobius: [f64; 4], lighttx: [f64; 4]) -> Vec<Vec<f64>> {
        let n = [f64::NAN; 4];
        [mobius, lighttx, n, n, n]
            .iter()
            .map(|r| r.to_vec())
            .collect()
    }

    /// Graded with no rebuild left out of Möbius's time.
    fn verdict(mobius: [f64; 4], lighttx: [f64; 4]) -> Verdict {
        let ms = table(mobius, lighttx);
        claims(&ms, &ms, &mobius, mobius[3], mobius[3])[0].verdict()
    }

    #[test]
    fn a_ratio_that_holds_only_without_the_rebuild_fails() {
        let lighttx = [70.0, 140.0, 290.0, 580.0];
        let ready = table([20.0; 4], lighttx);
        let with_rebuild = table([100.0; 4], lighttx);
        assert_eq!(
            claims(&ready, &with_rebuild, &[20.0; 4], 20.0, 20.0)[0].verdict(),
            Verdict::Fail
        );
        assert_eq!(
            claims(&ready, &ready, &[20.0; 4], 20.0, 20.0)[0].verdict(),
            Verdict::Pass
        );
        // Fast at the end of the zone, too slow with a full active ALA.
        assert_eq!(
            claims(&ready, &ready, &[100.0; 4], 20.0, 20.0)[0].verdict(),
            Verdict::Fail
        );
        // Fast at the end of the zone, too slow on average over the merge cycle.
        assert_eq!(
            claims(&ready, &ready, &[20.0; 4], 20.0, 100.0)[0].verdict(),
            Verdict::Fail
        );
        // Fast with the implementation's 12 MB active ALA, too slow with the evaluation's 20 MB.
        assert_eq!(
            claims(&ready, &ready, &[20.0; 4], 100.0, 20.0)[0].verdict(),
            Verdict::Fail
        );
    }

    /// Möbius's ready time swings with where in its merge cycle the cut falls; its growth with
    /// the zone is graded at one point of that cycle (active ALA full).
    #[test]
    fn the_zone_ratio_of_mobius_is_graded_at_one_point_of_its_merge_cycle() {
        let lighttx = [70.0, 140.0, 290.0, 580.0];
        let ready = table([20.0, 40.0, 20.0, 40.0], lighttx);
        let full = table([100.0, 120.0, 100.0, 120.0], [2000.0; 4]);
        let zone_check =
            |worst: &[f64]| claims(&ready, &full, worst, 30.0, 30.0)[0].checks[6].verdict;
        assert_eq!(zone_check(&[50.0, 50.0, 51.0, 52.0]), Verdict::Pass);
        assert_eq!(zone_check(&[50.0, 70.0, 90.0, 110.0]), Verdict::Fail);
    }

    #[test]
    fn the_scanning_zone_claim_compares_the_largest_zone_both_ran() {
        let lighttx = [(0.125, 400.0), (0.5, 700.0), (4.0, 2000.0)];
        // Möbius at 12 MB and 128 MB of active ALA: 20 and 30 ms ready, +400 ms rebuild.
        let mobius = [(12.0 / 1024.0, 20.0, 420.0, 10), (0.125, 30.0, 430.0, 20)];
        let c = scanning_zone_claim(&mobius, &lighttx);
        assert_eq!(c.checks[0].measured, Some(400.0 / 30.0));
        assert_eq!(c.checks[0].verdict, Verdict::Pass);
        assert_eq!(c.checks[1].verdict, Verdict::Fail, "rebuild charged: 0.93×");
        assert_eq!(c.verdict(), Verdict::Fail);
        let slow = [(0.125, 300.0, 700.0, 20)];
        assert_eq!(
            scanning_zone_claim(&slow, &lighttx).checks[0].verdict,
            Verdict::Fail
        );
        assert_eq!(
            scanning_zone_claim(&mobius[..1], &lighttx).verdict(),
            Verdict::NotReproduced,
            "no zone size in common"
        );
    }

    #[test]
    fn paper_like_numbers_pass() {
        assert_eq!(
            verdict([20.0; 4], [70.0, 140.0, 290.0, 580.0]),
            Verdict::Pass
        );
    }

    #[test]
    fn numbers_that_contradict_the_paper_fail() {
        // Faster, but not by an order of magnitude.
        assert_eq!(
            verdict([100.0; 4], [70.0, 140.0, 290.0, 580.0]),
            Verdict::Fail
        );
        // Möbius grows with the zone like LightTx.
        assert_eq!(
            verdict([2.0, 4.0, 8.0, 16.0], [70.0, 140.0, 290.0, 580.0]),
            Verdict::Fail
        );
        // LightTx flat.
        assert_eq!(
            verdict([20.0; 4], [500.0, 520.0, 540.0, 580.0]),
            Verdict::Fail
        );
        assert_eq!(
            verdict([f64::NAN; 4], [70.0, 140.0, 290.0, 580.0]),
            Verdict::NotReproduced
        );
    }
}
