//! `mobius bench-designs`: every design on its own default workload, against DFTL (issue #19
//! item 1: no design more than 2× slower than DFTL).
//!
//! Each run is its own `mobius bench --json` process, on the same preset, fill, request count,
//! warm-up and seed; only the design and its default workload differ. The designs run in
//! turn, round after round, so that a drift in the machine's speed touches every design alike,
//! and the table gives each design's median over the rounds.
//!
//! The default measures a steady state, as a drive is measured after preconditioning (SNIA
//! Solid State Storage Performance Test Specification): a million unmeasured requests after
//! the fill, so that the measured phase is not spent growing the simulator's heap (the kernel
//! zeroing memory first asked for; `bench` already makes the per-page arrays resident when it
//! builds the device). It also pauses before every run: on a virtual machine that reports freed
//! memory to its host, a run started right after another gets memory the other freed, not yet
//! reported, and runs faster than one started on an idle machine (docs/performance.md,
//! thirteenth round). Right after the fill (`--warmup-requests 0`) the figures still depend on
//! the run before, pause or not; in the steady state they did not (fourteenth round). Wall-clock
//! figures depend on the machine and on what else runs on it: run it alone for numbers to quote.

use crate::bench_scale::{median, BenchRun};
use clap::Args;

/// The design every other one is compared with.
pub const REFERENCE: &str = "dftl";

/// The goal: no design more than this many times slower than [`REFERENCE`].
pub const GOAL: f64 = 2.0;

#[derive(Args, Debug)]
pub struct BenchDesignsArgs {
    /// Designs, comma-separated (default: every design); DFTL is measured whether named or not.
    #[arg(long, value_delimiter = ',')]
    pub designs: Vec<String>,
    #[arg(long, default_value = "jasmine")]
    pub preset: String,
    /// Sequential fill before the warm-up.
    #[arg(long, default_value_t = 0.5)]
    pub fill: f64,
    /// Unmeasured requests between the fill and the measured ones (0: measure right after
    /// the fill).
    #[arg(long, default_value_t = 1_000_000)]
    pub warmup_requests: u64,
    /// Measured requests.
    #[arg(long, default_value_t = 300_000)]
    pub requests: u64,
    /// Rounds over the designs; each design's figure is its median.
    #[arg(long, default_value_t = 3)]
    pub rounds: u32,
    /// Seconds of idleness before each run (0: back to back).
    #[arg(long, default_value_t = 5.0)]
    pub pause_s: f64,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    #[arg(long)]
    pub json: bool,
}

/// One design's runs.
#[derive(Debug, Clone, serde::Serialize)]
pub struct DesignRow {
    pub design: String,
    pub workload: String,
    /// Page programs per wall second of the measured phase, one per round.
    pub programs_per_wall_s: Vec<f64>,
    pub median_programs_per_wall_s: f64,
    /// DFTL's median over this design's (1: as fast as DFTL; above [`GOAL`]: beyond the goal).
    pub slowdown_vs_reference: f64,
    pub write_amplification: f64,
    pub peak_rss_bytes: u64,
    /// Seconds building the device (per-page arrays made resident), outside the measured phase.
    pub build_wall_s: f64,
}

impl DesignRow {
    pub fn within_goal(&self) -> bool {
        self.slowdown_vs_reference <= GOAL
    }
}

pub fn run(args: &BenchDesignsArgs) -> anyhow::Result<()> {
    let designs = design_names(&args.designs)?;
    if args.rounds == 0 {
        anyhow::bail!("--rounds must be at least 1");
    }
    if !(args.pause_s.is_finite() && args.pause_s >= 0.0) {
        anyhow::bail!("--pause-s must be a number >= 0, not {}", args.pause_s);
    }
    let mut runs: Vec<(String, serde_json::Value)> = Vec::new();
    for round in 1..=args.rounds {
        for design in &designs {
            std::thread::sleep(std::time::Duration::from_secs_f64(args.pause_s));
            let v = measure(args, design)?;
            if !args.json {
                eprintln!(
                    "round {round}/{}: {design} {:.3} M programs/s",
                    args.rounds,
                    v["sim_page_programs_per_s"].as_f64().unwrap_or(0.0) / 1e6
                );
            }
            runs.push((design.clone(), v));
        }
    }
    let rows = table(&designs, &runs)?;
    if args.json {
        let out = serde_json::json!({
            "preset": args.preset, "fill": args.fill, "requests": args.requests,
            "warmup_requests": args.warmup_requests, "rounds": args.rounds,
            "pause_s": args.pause_s, "seed": args.seed, "reference": REFERENCE, "goal": GOAL,
            "all_within_goal": rows.iter().all(DesignRow::within_goal), "designs": rows,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        print_table(&rows);
    }
    Ok(())
}

/// The designs to run: those named (checked), or every design; DFTL first either way.
fn design_names(named: &[String]) -> anyhow::Result<Vec<String>> {
    let mut names: Vec<String> = if named.is_empty() {
        lab::registry::all()
            .iter()
            .map(|d| d.name.to_string())
            .collect()
    } else {
        for n in named {
            lab::registry::find(n)?;
        }
        named.to_vec()
    };
    names.retain(|n| n != REFERENCE);
    names.insert(0, REFERENCE.to_string());
    Ok(names)
}

fn measure(args: &BenchDesignsArgs, design: &str) -> anyhow::Result<serde_json::Value> {
    BenchRun {
        ftl: design,
        preset: &args.preset,
        fill: args.fill,
        requests: args.requests,
        warmup_requests: args.warmup_requests,
        seed: args.seed,
        extra: Vec::new(),
    }
    .json(design)
}

/// Each design's row from its runs' `bench --json` (`runs` in any order; `designs` gives the
/// rows' order and must include [`REFERENCE`]).
pub fn table(
    designs: &[String],
    runs: &[(String, serde_json::Value)],
) -> anyhow::Result<Vec<DesignRow>> {
    let mut rows = Vec::new();
    for design in designs {
        rows.push(row_of(design, runs)?);
    }
    let reference = rows
        .iter()
        .find(|r| r.design == REFERENCE)
        .map(|r| r.median_programs_per_wall_s)
        .ok_or_else(|| anyhow::anyhow!("no {REFERENCE} runs to compare with"))?;
    for r in &mut rows {
        r.slowdown_vs_reference = reference / r.median_programs_per_wall_s.max(1e-9);
    }
    Ok(rows)
}

fn row_of(design: &str, runs: &[(String, serde_json::Value)]) -> anyhow::Result<DesignRow> {
    let mine: Vec<&serde_json::Value> = runs
        .iter()
        .filter(|(d, _)| d == design)
        .map(|(_, v)| v)
        .collect();
    let num = |v: &serde_json::Value, k: &str| {
        v.get(k)
            .and_then(|x| x.as_f64())
            .ok_or_else(|| anyhow::anyhow!("bench --json of {design} has no number '{k}'"))
    };
    let last = *mine
        .last()
        .ok_or_else(|| anyhow::anyhow!("no runs of {design}"))?;
    // One figure from every run of the design.
    let each = |k: &str| {
        mine.iter()
            .map(|v| num(v, k))
            .collect::<anyhow::Result<Vec<f64>>>()
    };
    let per_s = each("sim_page_programs_per_s")?;
    let peak_rss = each("peak_rss_bytes")?;
    let builds = each("build_wall_s")?;
    Ok(DesignRow {
        design: design.to_string(),
        workload: last
            .get("workload")
            .and_then(|w| w.as_str())
            .unwrap_or("?")
            .to_string(),
        median_programs_per_wall_s: median(per_s.clone()),
        programs_per_wall_s: per_s,
        slowdown_vs_reference: f64::NAN,
        write_amplification: num(last, "write_amplification")?,
        peak_rss_bytes: peak_rss.iter().cloned().fold(0.0, f64::max) as u64,
        build_wall_s: median(builds),
    })
}

fn print_table(rows: &[DesignRow]) {
    println!(
        "{:<14} {:<16} {:>10} {:>9} {:>6} {:>8} {:>8}  runs (M progs/s)",
        "design", "workload", "M progs/s", "DFTL/it", "WA", "RSS MB", "build s"
    );
    for r in rows {
        let runs: Vec<String> = r
            .programs_per_wall_s
            .iter()
            .map(|x| format!("{:.3}", x / 1e6))
            .collect();
        println!(
            "{:<14} {:<16} {:>10.3} {:>8.2}{} {:>6.2} {:>8.0} {:>8.2}  {}",
            r.design,
            r.workload,
            r.median_programs_per_wall_s / 1e6,
            r.slowdown_vs_reference,
            if r.within_goal() { ' ' } else { '!' },
            r.write_amplification,
            r.peak_rss_bytes as f64 / 1e6,
            r.build_wall_s,
            runs.join(" ")
        );
    }
    let beyond: Vec<&str> = rows
        .iter()
        .filter(|r| !r.within_goal())
        .map(|r| r.design.as_str())
        .collect();
    println!("(M progs/s: median page programs per wall second of the measured phase; DFTL/it: DFTL's median over the design's)");
    if beyond.is_empty() {
        println!("every design within {GOAL}x of {REFERENCE}");
    } else {
        println!("beyond the {GOAL}x goal (marked !): {}", beyond.join(", "));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_of(design: &str, per_s: f64) -> (String, serde_json::Value) {
        let v = serde_json::json!({
            "workload": "randwrite", "sim_page_programs_per_s": per_s,
            "write_amplification": 1.5, "peak_rss_bytes": 1e8, "build_wall_s": 0.5,
        });
        (design.to_string(), v)
    }

    fn names(n: &[&str]) -> Vec<String> {
        n.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_design_more_than_twice_slower_than_dftl_is_beyond_the_goal() {
        let runs = [
            run_of("dftl", 2e6),
            run_of("mobius", 1.2e6),
            run_of("fast", 0.9e6),
            run_of("dftl", 2.4e6),
            run_of("mobius", 1.1e6),
            run_of("fast", 1.0e6),
            run_of("dftl", 2.2e6),
            run_of("mobius", 1.0e6),
            run_of("fast", 1.3e6),
        ];
        let rows = table(&names(&["dftl", "mobius", "fast"]), &runs).unwrap();
        assert_eq!(rows[0].median_programs_per_wall_s, 2.2e6);
        assert_eq!(rows[0].slowdown_vs_reference, 1.0);
        assert!((rows[1].slowdown_vs_reference - 2.0).abs() < 1e-12);
        assert!(rows[1].within_goal(), "exactly 2x is within");
        assert!((rows[2].slowdown_vs_reference - 2.2).abs() < 1e-12);
        assert!(!rows[2].within_goal(), "2.2x is beyond");
        assert_eq!(rows[2].programs_per_wall_s, vec![0.9e6, 1.0e6, 1.3e6]);
    }

    #[test]
    fn a_table_without_dftl_or_a_figure_is_an_error() {
        let e = table(&names(&["mobius"]), &[run_of("mobius", 1e6)]).unwrap_err();
        assert!(e.to_string().contains("no dftl runs"), "{e}");
        let e = table(&names(&["dftl", "mobius"]), &[run_of("dftl", 1e6)]).unwrap_err();
        assert!(e.to_string().contains("no runs of mobius"), "{e}");
        let bad = (
            "dftl".to_string(),
            serde_json::json!({"workload": "randwrite"}),
        );
        let e = table(&names(&["dftl"]), &[bad]).unwrap_err();
        assert!(e.to_string().contains("sim_page_programs_per_s"), "{e}");
    }

    #[test]
    fn dftl_is_always_measured_first_and_unknown_designs_are_refused() {
        assert_eq!(
            design_names(&names(&["mobius", "dftl"])).unwrap(),
            names(&["dftl", "mobius"])
        );
        let all = design_names(&[]).unwrap();
        assert_eq!(all[0], "dftl");
        assert_eq!(all.len(), lab::registry::all().len());
        let e = design_names(&names(&["nope"])).unwrap_err();
        assert!(e.to_string().contains("unknown design 'nope'"), "{e}");
    }
}
