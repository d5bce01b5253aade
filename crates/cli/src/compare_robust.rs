//! `mobius compare --robustness`: every experiment (but those `compare::robustness::EXCLUDED`)
//! re-run across the table of unknowns as cells on Dask, and the report assembled with each
//! graded sub-claim's robustness (docs/robustness.md).
//!
//! Two rounds of cells: the default cells first (the report's own runs; each records the
//! parameters that reach its experiment), then, for each experiment, those parameters one at a
//! time at their range's ends and the Latin-hypercube points. Each cell is one Dask task running
//! `mobius compare --only ID --unknowns SPEC --jobs 1`; finished cells are kept under
//! `OUT/robustness/cells/` and not run again.

use crate::compare_cmd::CompareArgs;
use compare::robustness::{self, Campaign, Cell, ExperimentCells, FailedCell, Outcome};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// What a cell's record holds (written by the Dask driver, `compare_dask.py`).
#[derive(serde::Deserialize)]
struct Record {
    cell: Cell,
    wall_s: f64,
    #[serde(default)]
    cpu_s: f64,
    error: Option<String>,
    claims: Vec<serde_json::Value>,
    consulted: Vec<String>,
}

pub fn run(args: &CompareArgs, scale: compare::Scale, ids: &[&str]) -> anyhow::Result<()> {
    crate::compare_cmd::dask_ready(args, "mobius compare --robustness")?;
    let regraded = robustness::experiments();
    for id in ids.iter().filter(|id| !regraded.contains(id)) {
        eprintln!("compare: {id} is not re-graded across the unknowns (docs/robustness.md)");
    }
    let ids: Vec<&str> = ids
        .iter()
        .copied()
        .filter(|id| regraded.contains(id))
        .collect();
    if ids.is_empty() {
        anyhow::bail!("no experiment to re-grade; known: {}", regraded.join(", "));
    }
    let vary: Option<BTreeSet<String>> = args.vary.as_ref().map(|v| {
        v.split(',')
            .map(|n| n.trim().to_string())
            .filter(|n| !n.is_empty())
            .collect()
    });
    for name in vary.iter().flatten() {
        if compare::unknowns::find(name).is_none() {
            anyhow::bail!("--vary: '{name}' is not in the table (mobius compare --list-unknowns)");
        }
    }
    let start = std::time::Instant::now();
    let defaults: Vec<Cell> = ids.iter().map(|id| Cell::default_of(id)).collect();
    eprintln!("compare: robustness: {} default cell(s)", defaults.len());
    let mut resumed = finished(&args.out, scale, args.seed, &defaults)?;
    run_cells(args, scale, &defaults, true)?;
    let records = load(&args.out, scale, args.seed, &defaults)?;
    let mut plan = Vec::new();
    let mut reach = BTreeMap::new();
    for (id, r) in ids.iter().zip(&records) {
        let Some(r) = r.as_ref().filter(|r| r.error.is_none()) else {
            anyhow::bail!("the default cell of {id} failed; see the log above");
        };
        let consulted: BTreeSet<String> = r
            .consulted
            .iter()
            .filter(|n| vary.as_ref().is_none_or(|v| v.contains(*n)))
            .cloned()
            .collect();
        plan.extend(robustness::plan(id, &consulted, args.samples, args.seed));
        reach.insert(id.to_string(), r.consulted.clone());
    }
    eprintln!(
        "compare: robustness: {} cell(s) across the unknowns ({} sampled points per experiment)",
        plan.len(),
        args.samples
    );
    resumed += finished(&args.out, scale, args.seed, &plan)?;
    run_cells(args, scale, &plan, false)?;
    let all: Vec<Cell> = defaults.iter().chain(&plan).cloned().collect();
    let records = load(&args.out, scale, args.seed, &all)?;
    let failed = failed_cells(&all, &records);
    if !failed.is_empty() {
        let labels: Vec<String> = failed
            .iter()
            .map(|f| format!("{} {}", f.experiment, f.label))
            .collect();
        eprintln!(
            "compare: {} cell(s) failed (their points grade nothing): {}",
            failed.len(),
            labels.join(", ")
        );
    }
    let outcomes: Vec<Outcome> = records
        .into_iter()
        .flatten()
        .map(|r| Outcome {
            cell: r.cell,
            claims: r.claims,
            wall_s: r.wall_s,
            cpu_s: r.cpu_s,
        })
        .collect();
    let campaign = Campaign {
        samples: args.samples,
        lhs_seed: args.seed,
        cells: all.len(),
        resumed,
        wall_s: start.elapsed().as_secs_f64(),
        experiments: ids
            .iter()
            .map(|id| {
                let mine = outcomes.iter().filter(|o| o.cell.experiment == *id);
                ExperimentCells {
                    experiment: id.to_string(),
                    consulted: reach[*id].clone(),
                    cells: mine.clone().count(),
                    cell_wall_s: mine.clone().map(|o| o.wall_s).sum(),
                    cell_cpu_s: mine.map(|o| o.cpu_s).sum(),
                }
            })
            .collect(),
        excluded: robustness::EXCLUDED
            .iter()
            .map(|(id, why)| (id.to_string(), why.to_string()))
            .collect(),
        failed,
    };
    let header = crate::compare_cmd::header(scale, args.seed, false);
    let (verdicts, missing) = robustness::assemble(&args.out, &header, &ids, &outcomes, &campaign)?;
    if !missing.is_empty() {
        anyhow::bail!("no default part of {}", missing.join(", "));
    }
    let cpu: f64 = outcomes.iter().map(|o| o.cpu_s).sum();
    println!(
        "compare: robustness campaign of {} cells ({} resumed from an earlier run) in {}; the cells took {} of CPU ({} per cell)",
        campaign.cells,
        campaign.resumed,
        compare::result::wall_time(campaign.wall_s),
        compare::result::wall_time(cpu),
        compare::result::wall_time(cpu / outcomes.len().max(1) as f64)
    );
    crate::compare_cmd::print_summary(&verdicts, &args.out);
    Ok(())
}

/// How many of `cells` an earlier run finished (a record without an error): they are not run
/// again, so this run's wall time does not include them.
fn finished(out: &Path, scale: compare::Scale, seed: u64, cells: &[Cell]) -> anyhow::Result<usize> {
    let records = load(out, scale, seed, cells)?;
    Ok(records
        .iter()
        .filter(|r| r.as_ref().is_some_and(|r| r.error.is_none()))
        .count())
}

/// The cells with no record or a failed one, each with the first line of its error.
fn failed_cells(cells: &[Cell], records: &[Option<Record>]) -> Vec<FailedCell> {
    cells
        .iter()
        .zip(records)
        .filter_map(|(c, r)| {
            let why = match r {
                None => "no record (the cell did not finish)".to_string(),
                Some(Record { error: Some(e), .. }) => e.lines().next().unwrap_or("").to_string(),
                Some(_) => return None,
            };
            Some(FailedCell {
                experiment: c.experiment.clone(),
                label: c.label.clone(),
                why,
            })
        })
        .collect()
}

/// Runs `cells` on Dask (those not already done), each written under OUT as it finishes.
fn run_cells(
    args: &CompareArgs,
    scale: compare::Scale,
    cells: &[Cell],
    part: bool,
) -> anyhow::Result<()> {
    if cells.is_empty() {
        return Ok(());
    }
    let exe = std::env::current_exe()?;
    let cells: Vec<serde_json::Value> = cells
        .iter()
        .map(|c| {
            serde_json::json!({
                "key": c.key(scale, args.seed),
                "experiment": c.experiment,
                "label": c.label,
                "spec": c.spec,
                "part": part,
            })
        })
        .collect();
    let job = serde_json::json!({
        "mobius": exe,
        "scale": args.scale,
        "seed": args.seed,
        "out": args.out,
        "scheduler": args.scheduler,
        "workers": args.workers,
        "cells": cells,
    });
    let status = crate::compare_cmd::run_python(crate::compare_cmd::DASK_DRIVER, &job)?;
    if !status.success() {
        anyhow::bail!("the Dask run of the cells failed ({status})");
    }
    Ok(())
}

/// The records of `cells` under `out` (`None` where a cell has none).
fn load(
    out: &Path,
    scale: compare::Scale,
    seed: u64,
    cells: &[Cell],
) -> anyhow::Result<Vec<Option<Record>>> {
    let dir = out.join("robustness").join("cells");
    cells
        .iter()
        .map(|c| {
            let path = dir.join(format!("{}.json", c.key(scale, seed)));
            let Ok(text) = std::fs::read_to_string(&path) else {
                return Ok(None);
            };
            let r: Record = serde_json::from_str(&text)
                .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
            anyhow::ensure!(r.cell == *c, "{}: another cell's record", path.display());
            Ok(Some(r))
        })
        .collect()
}

/// `--unknowns`: the point the run was at, the parameters the experiments consulted and what
/// the point made of the page size and GC mark, added to results.json (`unknowns`), which the
/// robustness campaign reads.
pub fn record_point(out: &Path, unknowns: &compare::unknowns::Overrides) -> anyhow::Result<()> {
    let path = out.join("results.json");
    let mut json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path)?)?;
    json["unknowns"] = serde_json::json!({
        "point": unknowns.point.spec(),
        "consulted": unknowns.consulted(),
        "applied": unknowns.applied(),
    });
    std::fs::write(&path, serde_json::to_string_pretty(&json)? + "\n")?;
    Ok(())
}
