//! `mobius compare`: the papers' experiments side by side, with figures and a report.

use crate::compare_progress::Progress;
use clap::Args;

#[derive(Args, Debug)]
pub struct CompareArgs {
    /// quick (minutes on 2 cores) or paper (the papers' device sizes and run lengths).
    #[arg(long, default_value = "quick")]
    pub scale: String,
    /// Output directory for report.md, the SVG figures and results.json.
    #[arg(long, default_value = "out/compare")]
    pub out: std::path::PathBuf,
    /// Run only this experiment (repeatable): micro, macro, recovery, ...
    #[arg(long)]
    pub only: Vec<String>,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Run each experiment as one task on this Dask scheduler (tcp://HOST:PORT) and assemble
    /// the report from their outputs; every worker must run this `mobius` binary at the same path.
    #[arg(long)]
    pub scheduler: Option<String>,
    /// Run the experiments as tasks on a local Dask cluster of this many worker processes
    /// (without --scheduler; default: run them in this process, one after another).
    #[arg(long)]
    pub workers: Option<usize>,
    /// Reuse the runs a long experiment logged in OUT (today the NVMFS experiment's
    /// `nvmfs-runs.jsonl`) when an earlier invocation of this same binary, with the same seed
    /// and scale, measured them: a paper-scale campaign of hours resumes where it was stopped.
    /// The report says how many runs were taken from the log.
    #[arg(long)]
    pub resume: bool,
    /// Run the experiments, and the independent runs inside them, as tasks on this many cores
    /// (default: every core of the machine; 1 runs them one after another). The figures are the
    /// same either way; only the wall times differ.
    #[arg(long)]
    pub jobs: Option<usize>,
    /// Internal: assemble OUT/report.md and results.json from OUT/parts/<experiment>/.
    #[arg(long, hide = true)]
    pub assemble: bool,
    /// Run at this point of the table of unknowns (`name=value,...`, e.g.
    /// `program=2,clients=1`; the rest at their defaults; `--list-unknowns` prints the table):
    /// results.json then also records the point and the parameters each experiment consulted.
    #[arg(long, value_name = "SPEC")]
    pub unknowns: Option<String>,
    /// Re-grade every claim across the table of unknowns (docs/robustness.md): each experiment
    /// but NVMFS's and optr-sqlite's as cells on Dask (`--workers N`, default every core, or
    /// `--scheduler ADDR`), resumable; each graded sub-claim gets its robustness.
    #[arg(long)]
    pub robustness: bool,
    /// Latin-hypercube points per experiment of `--robustness` (besides the one-at-a-time ends).
    #[arg(long, default_value_t = 40)]
    pub samples: usize,
    /// Vary only these parameters of the table in `--robustness` (comma-separated; default:
    /// every parameter that reaches each experiment; empty: none, only the default cells).
    #[arg(long, value_name = "NAMES")]
    pub vary: Option<String>,
    /// Print the table of unknowns (Markdown) and exit.
    #[arg(long)]
    pub list_unknowns: bool,
}

/// The Dask driver of `--scheduler` / `--workers`: one task per experiment, each running
/// `mobius compare --only ID` into a temporary directory and handing back its files.
pub(crate) const DASK_DRIVER: &str = include_str!("compare_dask.py");

pub fn run(args: &CompareArgs) -> anyhow::Result<()> {
    let scale = compare::Scale::parse(&args.scale)?;
    let known: Vec<&str> = compare::experiments().iter().map(|e| e.id).collect();
    for o in &args.only {
        if !known.contains(&o.as_str()) {
            anyhow::bail!("unknown experiment '{o}'; known: {}", known.join(", "));
        }
    }
    let ids: Vec<&str> = known
        .iter()
        .copied()
        .filter(|id| args.only.is_empty() || args.only.iter().any(|o| o == id))
        .collect();
    if args.list_unknowns {
        print!("{}", compare::robustness::table_md());
        return Ok(());
    }
    if args.robustness {
        return crate::compare_robust::run(args, scale, &ids);
    }
    if args.assemble {
        return assemble(args, scale, &ids);
    }
    let point = compare::unknowns::Point::parse(args.unknowns.as_deref().unwrap_or(""))?;
    anyhow::ensure!(
        !(args.resume && args.unknowns.is_some()),
        "--resume takes runs logged at the defaults: not with --unknowns"
    );
    if args.scheduler.is_some() || args.workers.is_some() {
        anyhow::ensure!(
            args.unknowns.is_none(),
            "--unknowns runs in one process: drop --workers/--scheduler (--robustness runs points on Dask)"
        );
        return run_on_dask(args, scale, &ids);
    }
    if args.jobs == Some(0) {
        anyhow::bail!("--jobs must be at least 1");
    }
    let cores = args
        .jobs
        .map_or_else(compare::Cores::all, compare::Cores::new);
    std::fs::create_dir_all(&args.out)?;
    let progress = Progress::new(ids.len() as u64);
    progress.line(&format!(
        "compare: {} experiment(s) at the {} scale as tasks on {} core(s): {}; report in {}",
        ids.len(),
        scale.name(),
        cores.count(),
        ids.join(", "),
        args.out.display()
    ));
    let advanced = |id: &str, done: u64, total: u64| progress.advanced(id, done, total);
    let ctx = compare::Context {
        designs: lab::registry::all(),
        scale,
        seed: args.seed,
        progress: &advanced,
        run_logs: Some(compare::RunLogs {
            dir: args.out.clone(),
            resume: args.resume,
        }),
        cores,
        unknowns: compare::unknowns::Overrides::at(point),
    };
    let observe = |e: compare::Event| match e {
        compare::Event::Started { id } => progress.started(id),
        compare::Event::Finished { result } => {
            let verdicts = tally(
                result
                    .claims
                    .iter()
                    .flat_map(|c| &c.checks)
                    .map(|k| k.verdict),
            );
            progress.finished(result.id, result.ran.wall_s, &format!(": {verdicts}"));
        }
    };
    let (stop, stopped) = std::sync::mpsc::channel();
    let results = std::thread::scope(|s| {
        s.spawn(|| progress.heartbeat(stopped));
        let results = compare::run_observed(&ctx, &args.only, &observe);
        drop(stop);
        results
    })?;
    progress.done();
    let wall = progress.elapsed().as_secs_f64();
    let header = header(scale, args.seed, args.resume);
    compare::write_report(&args.out, &header, &results)?;
    if args.unknowns.is_some() {
        crate::compare_robust::record_point(&args.out, &ctx.unknowns)?;
    }
    for r in &results {
        for s in &r.skipped {
            eprintln!("compare: {}: skipped {s}", r.id);
        }
    }
    closing(&results, ctx.cores.count(), wall);
    let checks: Vec<compare::Verdict> = results
        .iter()
        .flat_map(|r| &r.claims)
        .flat_map(|c| c.checks.iter().map(|k| k.verdict))
        .collect();
    print_summary(&checks, &args.out);
    Ok(())
}

/// Sub-claims by verdict: `8 PASS, 2 FAIL, 0 NOT-REPRODUCED, 1 by construction`.
fn tally(verdicts: impl Iterator<Item = compare::Verdict>) -> String {
    let mut n = [0usize; 4];
    for v in verdicts {
        n[match v {
            compare::Verdict::Pass => 0,
            compare::Verdict::Fail => 1,
            compare::Verdict::NotReproduced => 2,
            compare::Verdict::ByConstruction => 3,
        }] += 1;
    }
    format!(
        "{} PASS, {} FAIL, {} NOT-REPRODUCED, {} by construction",
        n[0], n[1], n[2], n[3]
    )
}

/// The closing summary: wall time, totals per paper, what was left to the paper scale.
fn closing(results: &[compare::ExperimentResult], cores: usize, wall_s: f64) {
    println!(
        "compare: {} experiment(s) in {} on {cores} core(s)",
        results.len(),
        compare::result::wall_time(wall_s)
    );
    let board = compare::summary::of_results(results);
    for (paper, claims, sub) in compare::summary::per_paper(&board) {
        println!("  {}", compare::summary::paper_line(&paper, &claims, &sub));
    }
    for r in results {
        if let (false, Some(rest)) = (r.ran.moved_to_paper.is_empty(), &r.ran.rest) {
            println!(
                "  {}: left to the paper scale: {} (`{rest}`)",
                r.id,
                r.ran.moved_to_paper.join("; ")
            );
        }
    }
}

/// The report's opening. With `--resume` a long experiment may take runs from its run log
/// (measured by an earlier invocation): the header says so, and the section says how many.
pub(crate) fn header(scale: compare::Scale, seed: u64, resume: bool) -> String {
    let names: Vec<&str> = lab::registry::all().iter().map(|d| d.name).collect();
    let measured = if resume {
        "Every number below was measured by this binary: in this run, or (`--resume`) taken from a run log an earlier invocation with the same settings wrote, as each section's description says"
    } else {
        "Every number below was measured in this run"
    };
    format!(
        "# mobius compare — the papers' experiments, side by side\n\nScale `{}`, seed {}. Designs built: {}. {measured} (simulated time unless stated); the papers' values are quoted as the papers'. Reproduce with `mobius compare --scale {} --seed {}`.",
        scale.name(), seed, names.join(", "), scale.name(), seed
    )
}

/// The summary line.
pub(crate) fn print_summary(verdicts: &[compare::Verdict], out: &std::path::Path) {
    let count = |v: compare::Verdict| verdicts.iter().filter(|k| **k == v).count();
    println!(
        "sub-claims: {} PASS, {} FAIL, {} NOT-REPRODUCED, {} by construction",
        count(compare::Verdict::Pass),
        count(compare::Verdict::Fail),
        count(compare::Verdict::NotReproduced),
        count(compare::Verdict::ByConstruction)
    );
    println!(
        "wrote {} (and report.html, results.json)",
        out.join("report.md").display()
    );
}

/// `--assemble`: the report from the parts the Dask tasks wrote.
fn assemble(args: &CompareArgs, scale: compare::Scale, ids: &[&str]) -> anyhow::Result<()> {
    let (verdicts, missing) =
        compare::assemble_report(&args.out, &header(scale, args.seed, args.resume), ids)?;
    if !missing.is_empty() {
        anyhow::bail!(
            "no output from experiment(s) {} under {}",
            missing.join(", "),
            args.out.join("parts").display()
        );
    }
    print_summary(&verdicts, &args.out);
    Ok(())
}

/// Dask is installed for `what`, and `--workers` is not 0.
pub(crate) fn dask_ready(args: &CompareArgs, what: &str) -> anyhow::Result<()> {
    crate::python::require("dask.distributed", what, "pip install 'dask[distributed]'")?;
    if args.workers == Some(0) {
        anyhow::bail!("--workers must be at least 1");
    }
    Ok(())
}

/// `--scheduler` / `--workers`: each experiment one Dask task, then `--assemble`.
fn run_on_dask(args: &CompareArgs, scale: compare::Scale, ids: &[&str]) -> anyhow::Result<()> {
    dask_ready(args, "mobius compare --scheduler/--workers")?;
    let exe = std::env::current_exe()?;
    let job = serde_json::json!({
        "mobius": exe,
        "scale": args.scale,
        "seed": args.seed,
        "experiments": ids,
        "out": args.out,
        "scheduler": args.scheduler,
        "workers": args.workers,
    });
    let status = run_python(DASK_DRIVER, &job)?;
    if !status.success() {
        anyhow::bail!("the Dask run of the experiments failed ({status})");
    }
    assemble(args, scale, ids)
}

/// Runs `python3 -c script` with `job` as JSON on its standard input. Not on its command line:
/// Linux refuses one argument above 128 KiB (`MAX_ARG_STRLEN`, E2BIG), which a robustness
/// campaign's list of cells passes (the full quick campaign's 626 cells did).
pub(crate) fn run_python(
    script: &str,
    job: &serde_json::Value,
) -> std::io::Result<std::process::ExitStatus> {
    use std::io::Write;
    let mut child = std::process::Command::new("python3")
        .args(["-c", script])
        .stdin(std::process::Stdio::piped())
        .spawn()?;
    let mut stdin = child.stdin.take().expect("stdin was piped");
    let written = stdin.write_all(job.to_string().as_bytes());
    drop(stdin);
    let status = child.wait()?;
    // A driver that died before reading its job (a broken pipe) is told by its exit status.
    if status.success() {
        written?;
    }
    Ok(status)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_larger_than_one_command_line_argument_reaches_python_whole() {
        let cells: Vec<String> = (0..5_000).map(|i| format!("{i:0>100}")).collect();
        let job = serde_json::json!({ "cells": cells });
        assert!(
            job.to_string().len() > 128 * 1024 * 3,
            "above MAX_ARG_STRLEN"
        );
        let script = "import json, sys\njob = json.load(sys.stdin)\n\
                      sys.exit(0 if len(job['cells']) == 5000 and job['cells'][4999].endswith('4999') else 3)";
        let status = run_python(script, &job).expect("python3 runs");
        assert!(status.success(), "{status}");
        let refused = serde_json::json!({ "cells": ["only one"] });
        assert!(
            !run_python(script, &refused).unwrap().success(),
            "the check can fail"
        );
        let died = run_python("import sys\nsys.exit(4)", &job).expect("told by its exit status");
        assert_eq!(died.code(), Some(4), "a driver that never read its job");
    }

    #[test]
    fn the_header_says_when_runs_may_come_from_a_run_log() {
        let fresh = header(compare::Scale::Quick, 1, false);
        assert!(fresh.contains("Every number below was measured in this run"));
        assert!(!fresh.contains("--resume"));
        let resumed = header(compare::Scale::Quick, 1, true);
        assert!(!resumed.contains("measured in this run ("));
        assert!(resumed.contains("run log"), "{resumed}");
    }
}
