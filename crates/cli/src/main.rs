//! `mobius`: a transactional flash SSD built in software.
//!
//! Subcommands: `info` (device presets, designs), `bench` (a seeded workload in simulated time),
//! `compare` (the papers' experiments side by side).

use mobius_cli::{
    bench, bench_designs, bench_scale, compare_cmd, crashtest_cmd, info, nvmfs_cmd, replay, serve,
    sql_cmd,
};

use clap::{Parser, Subcommand};

/// mimalloc: the simulator allocates and frees small objects on its hot path (docs/performance.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser, Debug)]
#[command(
    name = "mobius",
    version,
    about = "A transactional flash SSD built in software: emulated NAND, Möbius and its peers, crash checking"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Geometry, capacity and timing of a device preset; `--list` the designs.
    Info(info::InfoArgs),
    /// Run a seeded workload on a design and report latency, bandwidth, IOPS, write amplification.
    Bench(bench::BenchArgs),
    /// The same benchmark on devices from 1 GB to 1 TB: programs per wall second and resident
    /// bytes per page at each size (each size in its own process).
    BenchScale(bench_scale::BenchScaleArgs),
    /// Every design on its own default workload against DFTL, in turn over rounds, each run in its
    /// own process: median programs per wall second and DFTL's over each (the goal: within 2×).
    BenchDesigns(bench_designs::BenchDesignsArgs),
    /// Recover every crash image of a seeded run and judge it against the design's promise.
    Crashtest(Box<mobius_cli::crash_args::CrashtestArgs>),
    /// Serve a design over NBD on a file-backed flash image (kill -9 = power cut; restart recovers).
    Serve(serve::ServeArgs),
    /// Replay a block trace (ours, blkparse, MSRC CSV; plain or gzip) on a design in simulated time.
    Replay(replay::ReplayArgs),
    /// Rerun the papers' experiments side by side: report.md, SVG figures, results.json.
    Compare(compare_cmd::CompareArgs),
    /// Mount NVMFS (NVRAM file + SSD flash image) with FUSE; SIGTERM/unmount flush and close.
    Nvmfs(nvmfs_cmd::NvmfsArgs),
    /// Run a SQL workload (kv, tpcb) through SQLite on a design, in simulated time.
    SqlBench(sql_cmd::SqlBenchArgs),
    /// A SQLite shell on a flash image (kill -9 = power cut; the next start recovers).
    Sql(sql_cmd::SqlArgs),
    /// A sweep on Dask (designs × presets × params × workloads × seeds) from a TOML spec; runs
    /// the Python package's `mobius.dask_sweep` (docs/python.md).
    Sweep(SweepArgs),
}

#[derive(clap::Args, Debug)]
struct SweepArgs {
    /// Sweep spec (TOML; docs/python.md).
    #[arg(long)]
    spec: std::path::PathBuf,
    /// Output directory: finished cells as a Parquet dataset under `cells/` (re-runs resume).
    #[arg(long)]
    out: std::path::PathBuf,
    /// Address of a Dask scheduler (tcp://HOST:PORT); default a LocalCluster, one worker per core.
    #[arg(long)]
    scheduler: Option<String>,
    /// LocalCluster workers (0 = run the cells in one process).
    #[arg(long)]
    workers: Option<usize>,
}

/// `mobius sweep`: hands the arguments to `python3 -m mobius.dask_sweep`.
fn sweep(a: &SweepArgs) -> anyhow::Result<()> {
    let mut cmd = std::process::Command::new("python3");
    cmd.args(["-m", "mobius.dask_sweep", "--spec"])
        .arg(&a.spec)
        .arg("--out")
        .arg(&a.out);
    if let Some(s) = &a.scheduler {
        cmd.args(["--scheduler", s]);
    }
    if let Some(w) = a.workers {
        cmd.args(["--workers", &w.to_string()]);
    }
    mobius_cli::python::require(
        "mobius.dask_sweep, dask.distributed",
        "mobius sweep",
        "pip install './python[sweep]'",
    )?;
    let status = cmd.status()?;
    if !status.success() {
        anyhow::bail!("the sweep failed ({status})");
    }
    Ok(())
}

fn main() {
    let cli = Cli::parse();
    let result = match &cli.command {
        Command::Info(a) => info::run(a),
        Command::Bench(a) => bench::run(a),
        Command::BenchScale(a) => bench_scale::run(a),
        Command::BenchDesigns(a) => bench_designs::run(a),
        Command::Compare(a) => compare_cmd::run(a),
        Command::Crashtest(a) => crashtest_cmd::run(a),
        Command::Serve(a) => serve::run(a),
        Command::Nvmfs(a) => nvmfs_cmd::run(a),
        Command::SqlBench(a) => sql_cmd::bench(a),
        Command::Sql(a) => sql_cmd::shell(a),
        Command::Replay(a) => replay::run(a),
        Command::Sweep(a) => sweep(a),
    };
    if let Err(e) = result {
        eprintln!("mobius: error: {e}");
        std::process::exit(1);
    }
}
