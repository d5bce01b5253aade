//! Experiment `lifetime` — how write amplification turns into lifetime (issue #69, item 4;
//! docs/reliability.md): every design on the same worn flash (the media model's TLC-like part,
//! every block already at its rated P/E cycles) and the same workload, run until the flash is
//! worn out (no spare block left to replace a failed one) or a fixed number of drive writes.
//! Reported per design: host writes reached (in drive writes), write amplification, uncorrectable
//! reads, retired blocks, read retries and the host writes before the first read the ECC could
//! not correct. Möbius's claim that it does not enlarge write amplification (§V-B, Fig. 10) is
//! graded as a lifetime: its host writes to end of life against Atomic-Write's and LightTx's.

use crate::claims::{Check, Claim, Tolerance};
use crate::number::fmt;
use crate::result::{ExperimentResult, Figure, Table};
use crate::svg::BarChart;
use crate::{Context, Scale};
use ftl::{BlockDevice, DesignOptions, DesignSpec, FtlError};
use std::collections::BTreeMap;
use workload::{WorkloadError, WorkloadSpec};

const TITLE: &str =
    "9. Lifetime on worn flash: write amplification as drive writes to end of life (Möbius §V-B as lifetime)";

/// The two workloads: transactions (every design with transactions) and plain writes with
/// flushes (every design).
const WORKLOADS: [&str; 2] = ["txmix", "randwrite-flush"];

struct Sizes {
    /// Blocks per chip of the `small` geometry (a smaller device wears out sooner).
    blocks_per_chip: u32,
    /// Requests per step; the run stops at the first step the flash does not finish.
    step_requests: u64,
    /// The fixed end: host writes of this many times the logical capacity.
    max_drive_writes: f64,
}

fn sizes(scale: Scale) -> Sizes {
    match scale {
        Scale::Quick => Sizes {
            blocks_per_chip: 24,
            step_requests: 500,
            max_drive_writes: 200.0,
        },
        Scale::Paper => Sizes {
            blocks_per_chip: 64,
            step_requests: 2000,
            max_drive_writes: 1000.0,
        },
    }
}

/// Wear every block has before the run, in multiples of the part's rated endurance: the
/// grown-bad hazard is already rising, so the spares run out within tens of drive writes.
const INITIAL_WEAR: f64 = 1.3;

/// Days the device sits idle, powered, between steps: the pages age (retention), so data left
/// unwritten for months reads with retries and, at last, beyond the ECC.
const IDLE_DAYS: u64 = 30;

/// What one design's run to end of life measured.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Life {
    pub design: String,
    pub workload: String,
    /// Host pages written in the steps the device finished.
    pub host_pages: u64,
    pub logical_pages: u32,
    pub drive_writes: f64,
    pub write_amplification: f64,
    /// Whether the run ended at the end of the flash's life (else at the fixed drive writes).
    pub worn_out: bool,
    /// What ended it (the device's error), if the flash did.
    pub ended_by: Option<String>,
    pub uncorrectable_reads: u64,
    pub retired_blocks: u64,
    pub read_retries: u64,
    pub retried_reads: u64,
    /// Blocks rewritten by read reclaim (their programs are in the write amplification).
    pub reclaimed_blocks: u64,
    /// Drive writes of host data programmed before the first uncorrectable read (`None`: none).
    pub drive_writes_before_first_lost_page: Option<f64>,
    /// Reads, programs and read retries by their cause (the causes that had any): where the
    /// write amplification and the retries come from.
    pub reads_by_cause: BTreeMap<&'static str, u64>,
    pub programs_by_cause: BTreeMap<&'static str, u64>,
    pub retries_by_cause: BTreeMap<&'static str, u64>,
}

/// The non-zero counts of `per_cause` by cause name.
fn by_cause(per_cause: &[u64]) -> BTreeMap<&'static str, u64> {
    flash::OpCause::ALL
        .iter()
        .zip(per_cause)
        .filter(|(_, &n)| n > 0)
        .map(|(c, &n)| (c.name(), n))
        .collect()
}

/// The worn device every design runs on.
fn device(ctx: &Context, sz: &Sizes) -> crate::error::Result<flash::DeviceConfig> {
    let d = ctx.device_slice("small", sz.blocks_per_chip)?;
    Ok(d.with_media("tlc", INITIAL_WEAR, ctx.seed)?)
}

/// Whether a run stopped at `e` because the flash reached its end of life (worn out, or
/// metadata the design cannot do without lost to the media).
fn end_of_life(e: &WorkloadError) -> Option<String> {
    match e {
        WorkloadError::Request {
            source: host::HostError::Device(d @ (FtlError::WornOut(_) | FtlError::MediaLoss { .. })),
            ..
        } => Some(d.to_string()),
        _ => None,
    }
}

/// Runs `spec` on the worn device with workload `name` in steps until the flash ends it or the
/// host has written `max_drive_writes` of the capacity.
pub fn live(
    (spec, options): (&DesignSpec, &DesignOptions),
    device: &flash::DeviceConfig,
    name: &str,
    (step_requests, max_drive_writes): (u64, f64),
    seed: u64,
) -> crate::error::Result<Life> {
    let mut dev: Box<dyn BlockDevice> = lab::device::fresh(spec, device, options, true)?;
    let logical = dev.logical_pages();
    let mut w = WorkloadSpec::named(name)?;
    w.requests = step_requests;
    w.fill = 0.8;
    let mut life = Life {
        design: spec.name.into(),
        workload: name.into(),
        logical_pages: logical,
        ..Life::default()
    };
    let mut step = 0u64;
    while (life.host_pages as f64) < max_drive_writes * logical as f64 {
        let idle = if step == 0 {
            0
        } else {
            IDLE_DAYS * 86_400 * 1_000_000_000
        };
        let start = dev.flash().idle_ns() + idle;
        match lab::driver::run(dev.as_mut(), &w, seed + step, start, false, &mut |_, _| {}) {
            Ok(r) => life.host_pages += r.stats.host_pages_written,
            Err(e) => match end_of_life(&e) {
                Some(why) => {
                    life.ended_by = Some(why);
                    break;
                }
                None => return Err(e.into()),
            },
        }
        w.fill = 0.0;
        step += 1;
    }
    let stats = dev.flash().stats();
    let m = &stats.media;
    life.worn_out = life.ended_by.is_some();
    life.drive_writes = life.host_pages as f64 / logical as f64;
    life.write_amplification =
        stats.total_programs() as f64 / stats.programs_for(flash::OpCause::HostData).max(1) as f64;
    life.uncorrectable_reads = m.uncorrectable_reads;
    life.retired_blocks = m.retired_blocks;
    life.read_retries = m.read_retries;
    life.retried_reads = m.retried_reads;
    life.reclaimed_blocks = m.reclaimed_blocks;
    life.reads_by_cause = by_cause(&stats.reads);
    life.programs_by_cause = by_cause(&stats.programs);
    life.retries_by_cause = by_cause(&m.retries_by_cause);
    life.drive_writes_before_first_lost_page = m
        .host_programs_before_first_uncorrectable
        .map(|p| p as f64 / logical as f64);
    Ok(life)
}

pub fn run(ctx: &Context) -> ExperimentResult {
    let sz = sizes(ctx.scale);
    let device = device(ctx, &sz).expect("the small preset takes the tlc part");
    let mut skipped = Vec::new();
    let runs: Vec<(&DesignSpec, &str)> = WORKLOADS
        .iter()
        .flat_map(|&w| ctx.designs.iter().map(move |d| (d, w)))
        .collect();
    let total = runs.len() as u64;
    let mut lives = Vec::new();
    for (k, (spec, w)) in runs.into_iter().enumerate() {
        let ends = (sz.step_requests, sz.max_drive_writes);
        // The design's options at the run's point of the unknowns (mapping RAM, GC policy and
        // threshold, ...), as every other experiment formats its designs (`Context::fresh`).
        let options = ctx
            .unknowns
            .options(spec, &device.geometry, DesignOptions::default());
        match live((spec, &options), &device, w, ends, ctx.seed) {
            Ok(l) => lives.push(l),
            // Transactions on a design without them: not a run of this workload.
            Err(crate::error::MeasureError::Workload(WorkloadError::NeedsTransactions(_))) => {}
            Err(e) => skipped.push(format!("{} on {w}: {e}", spec.name)),
        }
        (ctx.progress)("lifetime", k as u64 + 1, total);
    }
    let m = measured(&lives);
    ExperimentResult {
        id: "lifetime",
        title: TITLE.into(),
        description: format!(
            "The small geometry at {} blocks per chip with the media model's TLC-like part \
             (rated 1,000 P/E cycles, docs/reliability.md), every block at {INITIAL_WEAR}× its \
             rated cycles before the run, media seed {}. Each design runs its workload in steps \
             of {} requests (fill 80 % first) until the flash is worn out (no spare block left \
             to replace a failed one, or metadata the design cannot do without lost) or the \
             host has written {} times the logical capacity; the device sits idle {IDLE_DAYS} \
             days between steps (its pages age). Host writes count the steps the device \
             finished.",
            sz.blocks_per_chip, ctx.seed, sz.step_requests, sz.max_drive_writes
        ),
        tables: vec![table(&lives)],
        figures: vec![figure(&lives)],
        claims: claims(&m),
        data: serde_json::to_value(&lives).unwrap_or_default(),
        skipped,
        host: Some(device.host),
        ran: crate::Ran::default(),
    }
}

fn table(lives: &[Life]) -> Table {
    let opt = |v: Option<f64>| v.map_or("—".into(), fmt);
    let rows = lives
        .iter()
        .map(|l| {
            vec![
                l.workload.clone(),
                l.design.clone(),
                fmt(l.drive_writes),
                ended(l),
                fmt(l.write_amplification),
                l.retired_blocks.to_string(),
                l.uncorrectable_reads.to_string(),
                format!("{} ({} reads)", l.read_retries, l.retried_reads),
                l.reclaimed_blocks.to_string(),
                opt(l.drive_writes_before_first_lost_page),
            ]
        })
        .collect();
    Table {
        caption: "Per design: host writes to the end of the run, in drive writes".into(),
        header: [
            "workload",
            "design",
            "drive writes",
            "ended",
            "WA",
            "retired blocks",
            "uncorrectable reads",
            "read retries",
            "blocks reclaimed",
            "drive writes before first lost page",
        ]
        .map(String::from)
        .to_vec(),
        rows,
    }
}

/// How a run ended, in a table cell: the flash out of spares, metadata lost, or the fixed end.
fn ended(l: &Life) -> String {
    match &l.ended_by {
        None => "fixed end".into(),
        Some(e) if e.contains("worn out") => "worn out".into(),
        Some(e) => format!("lost: {e}"),
    }
}

fn figure(lives: &[Life]) -> Figure {
    let mut categories: Vec<String> = Vec::new();
    for l in lives {
        if !categories.contains(&l.design) {
            categories.push(l.design.clone());
        }
    }
    let values = WORKLOADS
        .iter()
        .map(|w| {
            categories
                .iter()
                .map(|d| {
                    lives
                        .iter()
                        .find(|l| &l.design == d && l.workload == *w)
                        .map_or(0.0, |l| l.drive_writes)
                })
                .collect()
        })
        .collect();
    Figure {
        file: "lifetime.svg".into(),
        caption: "Drive writes each design reached on the same worn flash before it wore out (0: not run on that workload)".into(),
        svg: BarChart {
            title: "Lifetime: host drive writes to end of life".into(),
            y_label: "drive writes".into(),
            categories,
            series: WORKLOADS.iter().map(|w| w.to_string()).collect(),
            values,
        }
        .to_svg(),
    }
}

/// The figures the claim is graded on (NaN: not measured).
#[derive(Clone, Copy, Debug)]
pub struct Measured {
    /// Drive writes to end of life on the transaction workload.
    pub mobius: f64,
    pub atomic_write: f64,
    pub lighttx: f64,
    /// Whether each of the three runs ended at the flash's end of life (a run that reached the
    /// fixed end measured no lifetime).
    pub all_worn_out: bool,
}

fn measured(lives: &[Life]) -> Measured {
    let of = |d: &str| {
        lives
            .iter()
            .find(|l| l.design == d && l.workload == "txmix")
    };
    let dw = |d: &str| of(d).map_or(f64::NAN, |l| l.drive_writes);
    Measured {
        mobius: dw("mobius"),
        atomic_write: dw("atomic-write"),
        lighttx: dw("lighttx"),
        all_worn_out: ["mobius", "atomic-write", "lighttx"]
            .iter()
            .all(|d| of(d).is_some_and(|l| l.worn_out)),
    }
}

/// Möbius's WA claim as a lifetime (tolerances: docs/claims.md).
pub fn claims(m: &Measured) -> Vec<Claim> {
    let claim = Claim::new(
        "Möbius §V-B, Fig. 10 (as lifetime)",
        "Möbius does not enlarge write amplification compared with the other methods, and is better than LightTx",
    );
    let note = "On worn flash the host writes a design reaches before the spares run out go as the inverse of its write amplification; grown bad blocks are drawn per erase, so equal WA gives lifetimes a few per cent apart (the 0.95 bound).";
    if !m.all_worn_out {
        let why =
            "a run reached the fixed drive writes before the flash wore out: no lifetime measured";
        return vec![claim
            .check(Check::not_reproduced(
                "Möbius / Atomic-Write drive writes to end of life (txmix)",
                why,
            ))
            .check(Check::not_reproduced(
                "Möbius / LightTx drive writes to end of life (txmix)",
                why,
            ))
            .note(note)];
    }
    vec![claim
        .check(Check::grade(
            "Möbius / Atomic-Write drive writes to end of life (txmix)",
            m.mobius / m.atomic_write,
            Tolerance::AtLeast { min: 0.95 },
        ))
        .check(Check::grade(
            "Möbius / LightTx drive writes to end of life (txmix)",
            m.mobius / m.lighttx,
            Tolerance::AtLeast { min: 1.0 },
        ))
        .note(note)]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::claims::Verdict;

    fn good() -> Measured {
        Measured {
            mobius: 12.0,
            atomic_write: 11.5,
            lighttx: 9.0,
            all_worn_out: true,
        }
    }

    #[test]
    fn the_claim_passes_on_lifetimes_like_the_papers_wa() {
        assert_eq!(claims(&good())[0].verdict(), Verdict::Pass);
    }

    /// A shorter Möbius life than Atomic-Write's or LightTx's fails; runs that never wore out
    /// grade nothing.
    #[test]
    fn the_claim_fails_on_a_shorter_life_and_grades_nothing_without_one() {
        let mut m = good();
        m.mobius = 10.0;
        assert_eq!(claims(&m)[0].verdict(), Verdict::Fail);
        let mut m = good();
        m.lighttx = 13.0;
        assert_eq!(claims(&m)[0].verdict(), Verdict::Fail);
        let mut m = good();
        m.all_worn_out = false;
        assert_eq!(claims(&m)[0].verdict(), Verdict::NotReproduced);
        let mut m = good();
        m.atomic_write = f64::NAN;
        assert_ne!(claims(&m)[0].verdict(), Verdict::Pass);
    }
}
