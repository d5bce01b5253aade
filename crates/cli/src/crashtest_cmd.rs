//! `mobius crashtest`: recover every crash image of a seeded run and judge it against a promise.

use crate::bench::WorkloadArgs;
use crate::device_args::DeviceArgs;
use clap::Args;
use ftl::{DesignOptions, Promise};

#[derive(Args, Debug)]
pub struct CrashtestArgs {
    /// Design (`mobius info --list`).
    #[arg(long)]
    pub ftl: String,
    #[command(flatten)]
    pub device: DeviceArgs,
    #[command(flatten)]
    pub workload: WorkloadArgs,
    /// Design parameter, `--param key=value` (repeatable).
    #[arg(long = "param", value_name = "KEY=VALUE")]
    pub params: Vec<String>,
    /// Crash instants to try (ignored with --exhaustive).
    #[arg(long, default_value_t = 1000)]
    pub crash_points: usize,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Also tear the operations running at each crash instant.
    #[arg(long)]
    pub torn: bool,
    /// Every instant between consecutive flash operations (small runs only).
    #[arg(long)]
    pub exhaustive: bool,
    /// Judge against this promise instead of the design's own (negative controls).
    #[arg(long)]
    pub promise: Option<String>,
    /// Worker threads.
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
    /// Keep full page data instead of content tags.
    #[arg(long)]
    pub full_data: bool,
    /// Rebuild and judge only the image at this instant (from a violation's replay command).
    #[arg(long)]
    pub replay_instant: Option<u64>,
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: &CrashtestArgs) -> anyhow::Result<()> {
    let design = crate::designs::find(&args.ftl)?;
    let device = args.device.resolve()?;
    let mut workload = args.workload.resolve(design.default_workload)?;
    if args.workload.requests.is_none() {
        workload.requests = 3000;
    }
    if args.workload.fill.is_none() {
        workload.fill = 0.8;
    }
    let promise = match &args.promise {
        Some(p) => Promise::parse(p).map_err(anyhow::Error::msg)?,
        None => design.promise,
    };
    let cfg = crashtest::CampaignConfig {
        design,
        options: DesignOptions::from_pairs(&args.params)?,
        device,
        workload,
        seed: args.seed,
        crash_points: args.crash_points,
        torn: args.torn,
        exhaustive: args.exhaustive,
        promise,
        threads: args.threads,
        tag_only: !args.full_data,
    };
    if let Some(instant) = args.replay_instant {
        let v = crashtest::replay_one(&cfg, instant, args.torn).map_err(anyhow::Error::msg)?;
        for x in &v {
            println!(
                "violation at {} ns{}: lpn {:?}: {}",
                x.instant_ns,
                if x.torn { " (torn)" } else { "" },
                x.lpn,
                x.what
            );
        }
        if !v.is_empty() {
            anyhow::bail!("{} violations in the replayed image", v.len());
        }
        println!(
            "image at {instant} ns{} recovered and kept the {} promise",
            if args.torn { " (torn)" } else { "" },
            cfg.promise.name()
        );
        return Ok(());
    }
    let bar = crate::progress::bar(1, "crashtest");
    let report = crashtest::run_campaign(&cfg, &|d, t| {
        bar.set_length(t);
        bar.set_position(d);
    })
    .map_err(anyhow::Error::msg)?;
    bar.finish_and_clear();
    if args.json {
        println!("{}", serde_json::to_string(&report.to_json())?);
    } else {
        println!(
            "design            {} (judged as {})",
            report.ftl, report.promise
        );
        println!("run               {} workload, seed {}, {} host requests, {} flash operations recorded", report.workload, report.seed, report.host_requests, report.flash_ops_recorded);
        println!(
            "crash points      {} ({})",
            report.crash_points,
            report
                .points_by_kind
                .iter()
                .map(|(k, v)| format!("{k} {v}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
        println!("recovered         {}", report.recovered);
        println!(
            "violations        {} in {} images",
            report.violations.len(),
            report.violating_points
        );
        println!(
            "recovery reads    mean {:.1}, p50 {:.0}, max {:.0}",
            report.recovery_flash_reads.mean,
            report.recovery_flash_reads.p50,
            report.recovery_flash_reads.max
        );
        println!(
            "recovery time     mean {:.3} ms, p50 {:.3} ms, max {:.3} ms (simulated)",
            report.recovery_sim_ms.mean, report.recovery_sim_ms.p50, report.recovery_sim_ms.max
        );
        println!(
            "wall              {:.1} s ({:.0} crash points/s)",
            report.wall_s,
            report.crash_points as f64 / report.wall_s.max(1e-9)
        );
        for v in report.violations.iter().take(10) {
            println!(
                "  at {} ns{} lpn {:?}: {}\n    replay: {}",
                v.instant_ns,
                if v.torn { " (torn)" } else { "" },
                v.lpn,
                v.what,
                v.replay
            );
        }
    }
    if !report.violations.is_empty() {
        anyhow::bail!(
            "{} violations of the {} promise",
            report.violations.len(),
            report.promise
        );
    }
    Ok(())
}
