//! `mobius crashtest --bench`: crash points per second per core of every design, end to end, on
//! a fixed seed set, beside another build's (the commit before) measured in the same run.
//!
//! Each campaign is its own process — `mobius crashtest --ftl D --seed S --crash-points N --torn
//! --threads 1 --json`, the design's default workload — so a figure is what a developer waits
//! for: recording, choosing points, every image recovered and judged. With `--vs OLD` the same
//! campaign of the other binary runs right after (then right before, alternately), so a drift in
//! the machine's speed touches both alike; their verdicts must agree (a difference is an error:
//! one of the two builds judges wrongly). Per core: one thread per campaign. The rate is given on
//! the wall clock and on the campaign process's CPU time (user + system): on a machine other
//! work shares, the CPU figure is the one that does not depend on the neighbours.
//! `tools/crash-bench REV` builds REV's binary and runs this against it.

use serde::Serialize;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// One campaign process's figures.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Timed {
    pub points: u64,
    pub wall_s: f64,
    pub cpu_s: f64,
    /// What the campaign judged: (points, recovered, violating points, violations).
    pub verdict: (u64, u64, u64, u64),
}

/// One design's campaigns, summed over the seeds.
#[derive(Clone, Debug, Default, Serialize)]
pub struct BenchRow {
    pub design: String,
    pub new: Timed,
    pub old: Option<Timed>,
}

impl BenchRow {
    fn rate(t: &Timed, cpu: bool) -> f64 {
        t.points as f64 / if cpu { t.cpu_s } else { t.wall_s }.max(1e-9)
    }
    /// (new, old, new / old) crash points per second per core, on the wall clock or CPU time.
    pub fn rates(&self, cpu: bool) -> (f64, Option<f64>, Option<f64>) {
        let new = Self::rate(&self.new, cpu);
        let old = self.old.as_ref().map(|o| Self::rate(o, cpu));
        (new, old, old.map(|o| new / o.max(1e-9)))
    }
}

/// CPU seconds (user + system) of this process's children that have ended, from
/// `/proc/self/stat` (clock ticks: 10 ms at the usual 100 Hz).
fn children_cpu_s() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    // Fields after the command name (which may hold spaces): cutime and cstime are the 16th
    // and 17th fields, the 14th and 15th after it.
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (ticks(13) + ticks(14)) / 100.0
}

/// Runs one campaign of `binary` and times it.
fn campaign(binary: &Path, design: &str, seed: u64, points: usize) -> anyhow::Result<Timed> {
    let cpu = children_cpu_s();
    let started = Instant::now();
    let out = std::process::Command::new(binary)
        .args(["crashtest", "--ftl", design, "--seed", &seed.to_string()])
        .args([
            "--crash-points",
            &points.to_string(),
            "--torn",
            "--threads",
            "1",
        ])
        .arg("--json")
        .stderr(std::process::Stdio::null())
        .output()?;
    let wall_s = started.elapsed().as_secs_f64();
    let cpu_s = children_cpu_s() - cpu;
    // A campaign that found violations exits with an error but still prints its report.
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).map_err(|e| {
        anyhow::anyhow!(
            "{} crashtest --ftl {design} --seed {seed}: no report ({e}; {})",
            binary.display(),
            out.status
        )
    })?;
    let n = |k: &str| v.get(k).and_then(|x| x.as_u64()).unwrap_or(0);
    Ok(Timed {
        points: n("crash_points"),
        wall_s,
        cpu_s,
        verdict: (
            n("crash_points"),
            n("recovered"),
            n("violating_points"),
            n("violations"),
        ),
    })
}

fn add(sum: &mut Timed, t: &Timed) {
    sum.points += t.points;
    sum.wall_s += t.wall_s;
    sum.cpu_s += t.cpu_s;
}

/// Every design's campaigns on `seeds`, this binary's and (with `old`) the other's, alternating
/// which goes first. Errors if the two builds judge a campaign differently.
pub fn measure(
    designs: &[String],
    seeds: &[u64],
    points: usize,
    old: Option<&PathBuf>,
) -> anyhow::Result<Vec<BenchRow>> {
    let new = std::env::current_exe()?;
    let mut rows = Vec::new();
    let mut turn = 0usize;
    for design in designs {
        let mut row = BenchRow {
            design: design.clone(),
            old: old.map(|_| Timed::default()),
            ..BenchRow::default()
        };
        for &seed in seeds {
            turn += 1;
            let Some(old_bin) = old else {
                add(&mut row.new, &campaign(&new, design, seed, points)?);
                continue;
            };
            let (a, b) = if turn.is_multiple_of(2) {
                let a = campaign(&new, design, seed, points)?;
                (a, campaign(old_bin, design, seed, points)?)
            } else {
                let b = campaign(old_bin, design, seed, points)?;
                (campaign(&new, design, seed, points)?, b)
            };
            if a.verdict != b.verdict {
                anyhow::bail!(
                    "{design} seed {seed}: this build judged (points, recovered, violating, violations) {:?}, {} {:?}",
                    a.verdict,
                    old_bin.display(),
                    b.verdict
                );
            }
            add(&mut row.new, &a);
            add(row.old.as_mut().expect("old figures"), &b);
        }
        eprintln!("{}", line(&row));
        rows.push(row);
    }
    Ok(rows)
}

/// A row of the table: wall-clock and CPU rates, the other build's and the ratio.
pub fn line(r: &BenchRow) -> String {
    let fmt = |cpu: bool| {
        let (new, old, ratio) = r.rates(cpu);
        match (old, ratio) {
            (Some(old), Some(ratio)) => format!("{new:>7.0} {old:>7.0} {ratio:>6.2}x"),
            _ => format!("{new:>7.0} {:>7} {:>7}", "-", "-"),
        }
    };
    format!(
        "{:<13} {:>6} {}   {}",
        r.design,
        r.new.points,
        fmt(false),
        fmt(true)
    )
}

/// The table's header.
pub const HEADER: &str = "design        points   wall: new     old  ratio    cpu: new     old  ratio   (crash points/s per core)";

/// `{designs: [{design, points, wall_points_per_s, cpu_points_per_s, old_..., ratio_...}]}`.
pub fn to_json(rows: &[BenchRow], seeds: &[u64], points: usize) -> serde_json::Value {
    let designs: Vec<serde_json::Value> = rows
        .iter()
        .map(|r| {
            let (wall, wall_old, wall_ratio) = r.rates(false);
            let (cpu, cpu_old, cpu_ratio) = r.rates(true);
            serde_json::json!({
                "design": r.design, "points": r.new.points,
                "wall_points_per_s": wall, "old_wall_points_per_s": wall_old, "wall_ratio": wall_ratio,
                "cpu_points_per_s": cpu, "old_cpu_points_per_s": cpu_old, "cpu_ratio": cpu_ratio,
            })
        })
        .collect();
    serde_json::json!({ "seeds": seeds, "crash_points": points, "designs": designs })
}
