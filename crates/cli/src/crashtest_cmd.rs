//! `mobius crashtest`: recover every crash image of a seeded run and judge it against a promise;
//! `--seeds N` soaks many seeds (and `--ftl all` every design), `--shrink` reduces a failing run,
//! `--controls` soaks the negative controls, which must be caught.

use crate::bench::WorkloadArgs;
use crate::device_args::DeviceArgs;
use clap::Args;
use crashtest::shrink::{shrink, Shrunk};
use crashtest::soak::{self, CellResult, Shape, SoakConfig, SoakReport};
use crashtest::{CampaignConfig, CampaignReport};
use ftl::{DesignOptions, DesignSpec, Promise};

#[derive(Args, Debug)]
pub struct CrashtestArgs {
    /// Design (`mobius info --list`); a soak also takes `all` or a comma-separated list.
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
    /// Seed (default 1); with --seeds, the first of N consecutive seeds (default: fresh random
    /// seeds, each printed).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Soak: run N seeds, each choosing its workload shape, queue depth, fill, geometry, flash
    /// timing, run length and (one seed in four) the lowest over-provisioning each design takes.
    #[arg(long)]
    pub seeds: Option<usize>,
    /// Soak: campaigns run at once (default: every core).
    #[arg(long)]
    pub jobs: Option<usize>,
    /// Soak: keep the given (or default) device and workload for every seed instead of varying
    /// (without --workload, each design runs its own default workload).
    #[arg(long)]
    pub fixed: bool,
    /// Reduce a failing run to the smallest that still fails, and print its replay command.
    #[arg(long)]
    pub shrink: bool,
    /// Soak the negative controls (known-bad configurations): each must be caught.
    #[arg(long)]
    pub controls: bool,
    /// Also tear the operations running at each crash instant.
    #[arg(long)]
    pub torn: bool,
    /// Every instant between consecutive flash operations (small runs only).
    #[arg(long)]
    pub exhaustive: bool,
    /// Judge against this promise instead of the design's own (negative controls).
    #[arg(long)]
    pub promise: Option<String>,
    /// Worker threads of a single campaign (default 2; a soak runs `--jobs` cells of one thread).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Keep full page data instead of content tags.
    #[arg(long)]
    pub full_data: bool,
    /// Rebuild and judge only the image at this instant (from a violation's replay command).
    #[arg(long)]
    pub replay_instant: Option<u64>,
    /// SQLite workloads (`--workload sqlite-tpcb|sqlite-kv|sqlite-tpcc`): batch, journal, wal,
    /// ordered, nobarrier [default: batch]; a SQLite soak (`--workload sqlite` or `--seeds`)
    /// draws only commit paths of this mode
    #[arg(long)]
    pub mode: Option<String>,
    /// SQLite workloads: PRAGMA synchronous (default EXTRA for journal/ordered, else FULL); a
    /// SQLite soak draws only commit paths with it
    #[arg(long)]
    pub synchronous: Option<String>,
    /// SQLite workloads: batch commits as static (SWRITE) or dynamic (DWRITE) transactions
    /// [default: static]; a SQLite soak draws only commit paths with it
    #[arg(long)]
    pub tx: Option<String>,
    /// Second lives: after each of N cuts of the run, the recovered device runs on (a quarter of
    /// the requests) and is cut again; cuts during that recovery are tried too.
    #[arg(long, default_value_t = 0)]
    pub second_lives: usize,
    /// NBD workload (`--workload nbd`): every write one synchronous transaction, as `mobius
    /// serve --atomic-requests` applies it; a soak runs only such exports.
    #[arg(long)]
    pub atomic_requests: bool,
    /// NBD workload with --atomic-requests: read with plain reads, not SREADs (a negative
    /// control: a read-modify-write can then put old sectors back).
    #[arg(long)]
    pub plain_reads: bool,
    /// With --replay-instant: the instant lies in the second life after this first cut
    /// (`NS` or `NS:torn`, from a violation's replay command).
    #[arg(long)]
    pub first_cut: Option<String>,
    /// Soak: draw only this workload shape (repeatable: txmix, randwrite-flush, large-tx,
    /// abort-heavy, trim-heavy, interleaved); designs that support none of them are left out.
    #[arg(long = "shape", value_name = "SHAPE")]
    pub shapes: Vec<String>,
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: &CrashtestArgs) -> anyhow::Result<()> {
    if crate::nbd_crash_cmd::is_nbd(args) {
        return crate::nbd_crash_cmd::run(args);
    }
    if args.atomic_requests || args.plain_reads {
        anyhow::bail!(
            "--atomic-requests and --plain-reads apply to the NBD workload (--workload nbd)"
        );
    }
    if let Some(w) = sqlite_workload(args) {
        if args.controls {
            return crate::sql_crash_cmd::crashtest_controls(args, w);
        }
        return match (w, is_soak(args)) {
            (Some(w), false) => crate::sql_crash_cmd::crashtest(args, w),
            (w, _) => crate::sql_crash_cmd::crashtest_soak(args, w),
        };
    }
    if args.controls {
        return run_controls(args);
    }
    if is_soak(args) {
        return run_soak_cmd(args);
    }
    let cfg = single_config(args, lab::registry::find(&args.ftl)?)?;
    if let Some(instant) = args.replay_instant {
        return match &args.first_cut {
            Some(cut) => replay_second_life(&cfg, cut, instant, args.torn),
            None => replay(&cfg, instant, args.torn),
        };
    }
    let bar = crate::progress::bar(1, "crashtest");
    let (report, lives) =
        crashtest::second_life::run_campaign_with_lives(&cfg, args.second_lives, &|d, t| {
            bar.set_length(t);
            bar.set_position(d);
        })?;
    bar.finish_and_clear();
    if args.json {
        let mut v = report.to_json();
        v["second_lives"] = serde_json::json!(lives);
        println!("{}", serde_json::to_string(&v)?);
    } else {
        print_report(&report);
        if lives > 0 {
            println!("second lives      {lives} (their crash points are counted above)");
        }
    }
    if report.violations.is_empty() {
        return Ok(());
    }
    if args.shrink {
        shrink_and_print(&cfg)?;
    }
    anyhow::bail!(
        "{} violations of the {} promise",
        report.violations.len(),
        report.promise
    )
}

/// What `--json` prints for a single campaign, or for a soak (`seeds` given or `ftl` = `all`),
/// without printing: the library entry point of the Python package. SQLite and NBD workloads,
/// controls, replays and shrinking stay command-line only.
pub fn measure(args: &CrashtestArgs) -> anyhow::Result<serde_json::Value> {
    if is_soak(args) {
        let cfg = soak_config(args, lab::registry::named(&args.ftl)?)?;
        return Ok(soak::run_soak(&cfg, &|_| {}).to_json());
    }
    let cfg = single_config(args, lab::registry::find(&args.ftl)?)?;
    let (report, lives) =
        crashtest::second_life::run_campaign_with_lives(&cfg, args.second_lives, &|_, _| {})?;
    let mut v = report.to_json();
    v["second_lives"] = serde_json::json!(lives);
    Ok(v)
}

/// Share `part` of `parts` of the single campaign `args` describe (for running one campaign's
/// crash points on several workers; the recording is repeated by each, deterministic from the
/// seed), as JSON for [`merge_shares`].
pub fn measure_share(
    args: &CrashtestArgs,
    part: usize,
    parts: usize,
) -> anyhow::Result<serde_json::Value> {
    if parts == 0 || part >= parts {
        anyhow::bail!("share {part} of {parts} does not exist");
    }
    if is_soak(args) || args.second_lives > 0 {
        anyhow::bail!(
            "shares split one campaign: no --seeds, --ftl all, a design list or --second-lives"
        );
    }
    let cfg = single_config(args, lab::registry::find(&args.ftl)?)?;
    let rec = crashtest::record(&cfg)?;
    let share = crashtest::run_recorded_part(&cfg, &rec, part, parts, &|_, _| {});
    Ok(serde_json::to_value(share)?)
}

/// The report of the whole campaign from all its shares: the same as one process gives
/// (`wall_s` aside, which is `wall_s` here).
pub fn merge_shares(
    args: &CrashtestArgs,
    shares: Vec<serde_json::Value>,
    wall_s: f64,
) -> anyhow::Result<serde_json::Value> {
    let cfg = single_config(args, lab::registry::find(&args.ftl)?)?;
    let parts = shares
        .into_iter()
        .map(serde_json::from_value)
        .collect::<Result<Vec<crashtest::CampaignPart>, _>>()?;
    let report = crashtest::merge_parts(&cfg, parts, wall_s)?;
    let mut v = report.to_json();
    v["second_lives"] = serde_json::json!(0);
    Ok(v)
}

/// The campaign the flags describe (the CLI's defaults: 3,000 requests after an 80 % fill).
fn single_config(args: &CrashtestArgs, design: DesignSpec) -> anyhow::Result<CampaignConfig> {
    let device = args.device.resolve_for(&design)?;
    let mut workload = args.workload.resolve(design.default_workload)?;
    if args.workload.requests.is_none() {
        workload.requests = soak::BASE_REQUESTS;
    }
    if args.workload.fill.is_none() {
        workload.fill = 0.8;
    }
    let promise = match &args.promise {
        Some(p) => Promise::parse(p)?,
        None => design.promise,
    };
    let seed = args.seed.unwrap_or(1);
    Ok(CampaignConfig {
        design,
        options: DesignOptions::from_pairs(&args.params)?,
        device: crashtest::with_media_seed(device, seed),
        workload,
        seed,
        crash_points: args.crash_points,
        torn: args.torn,
        exhaustive: args.exhaustive,
        promise,
        threads: args.threads.unwrap_or(2),
        tag_only: !args.full_data,
    })
}

/// Rebuilds and judges one image of the second life after `cut`.
fn replay_second_life(
    cfg: &CampaignConfig,
    cut: &str,
    instant: u64,
    torn: bool,
) -> anyhow::Result<()> {
    let cut = crashtest::second_life::FirstCut::parse(cut)?;
    let rec = crashtest::record(cfg)?;
    let (_, v) = crashtest::second_life::judge_life(cfg, &rec, cut, 1, Some((instant, torn)));
    for x in &v {
        println!(
            "violation at {} ns: lpn {:?}: {}",
            x.instant_ns, x.lpn, x.what
        );
    }
    if !v.is_empty() {
        anyhow::bail!("{} violations in the replayed second-life image", v.len());
    }
    println!(
        "second-life image at {instant} ns recovered and kept the {} promise",
        cfg.promise.name()
    );
    Ok(())
}

fn replay(cfg: &CampaignConfig, instant: u64, torn: bool) -> anyhow::Result<()> {
    let v = crashtest::replay_one(cfg, instant, torn)?;
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
        if torn { " (torn)" } else { "" },
        cfg.promise.name()
    );
    Ok(())
}

fn print_report(report: &CampaignReport) {
    println!(
        "design            {} (judged as {})",
        report.ftl, report.promise
    );
    println!(
        "run               {} workload, seed {}, {} host requests, {} flash operations recorded",
        report.workload, report.seed, report.host_requests, report.flash_ops_recorded
    );
    let kinds: Vec<String> = report
        .points_by_kind
        .iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect();
    println!(
        "crash points      {} ({})",
        report.crash_points,
        kinds.join(", ")
    );
    println!("recovered         {}", report.recovered);
    if let Some(m) = &report.media {
        print_media(report, m);
    }
    println!(
        "violations        {} in {} images",
        report.violations.len(),
        report.violating_points
    );
    let (r, m) = (&report.recovery_flash_reads, &report.recovery_sim_ms);
    println!(
        "recovery reads    mean {:.1}, p50 {:.0}, max {:.0}",
        r.mean, r.p50, r.max
    );
    println!(
        "recovery time     mean {:.3} ms, p50 {:.3} ms, max {:.3} ms (simulated)",
        m.mean, m.p50, m.max
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

fn shrink_and_print(cfg: &CampaignConfig) -> anyhow::Result<Option<Shrunk>> {
    eprintln!("shrinking {} seed {} ...", cfg.design.name, cfg.seed);
    let s = shrink(cfg, 80, &|step| eprintln!("  shrunk: {step}"))?;
    match &s {
        Some(s) => {
            let w = &s.config.workload;
            let g = &s.config.device.geometry;
            println!(
                "smallest failing run ({} campaigns tried): {} requests, fill {}, queue depth {}, {} pages per request, {}x{} chips x {} blocks",
                s.campaigns, w.requests, w.fill, w.queue_depth, w.request_pages, g.channels, g.chips_per_channel, g.blocks_per_chip
            );
            println!("  violation at {} ns{}: {}", s.instant_ns, if s.torn { " (torn)" } else { "" }, s.violation);
            println!("  replay: {}", s.replay);
        }
        None => println!("shrink: the run did not fail again (sampled instants differ); keep the original replay"),
    }
    Ok(s)
}

/// `--workload sqlite-W`: `Some(Some(W))`; `--workload sqlite` (a soak that draws the
/// workload): `Some(None)`; another workload: `None`.
fn sqlite_workload(args: &CrashtestArgs) -> Option<Option<&str>> {
    match args.workload.workload.as_deref()? {
        "sqlite" => Some(None),
        w => w.strip_prefix("sqlite-").map(Some),
    }
}

/// A soak: `--seeds`, or more than one design (`all`, or a comma-separated list).
pub(crate) fn is_soak(args: &CrashtestArgs) -> bool {
    args.seeds.is_some() || args.ftl == "all" || args.ftl.contains(',')
}

/// Options given to a soak that it would not use (the Python binding raises `ConfigError`).
#[derive(Debug)]
pub struct SoakOptionError(String);

impl std::fmt::Display for SoakOptionError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SoakOptionError {}

/// A soak's options that it would not use, as an error rather than silently: without
/// `--fixed` every seed chooses its own device and workload, and every cell runs tag-only on
/// sampled instants, whatever the command line says.
fn check_soak_options(args: &CrashtestArgs) -> Result<(), SoakOptionError> {
    if !args.fixed {
        let varied: Vec<&str> = [args.device.given(), args.workload.given()].concat();
        if !varied.is_empty() {
            return Err(SoakOptionError(format!(
                "a soak chooses the device and workload of each seed, so it would ignore {}: \
                 add --fixed to run every seed on them",
                varied.join(", ")
            )));
        }
    }
    if args.fixed && !args.shapes.is_empty() {
        return Err(SoakOptionError(
            "--shape chooses among the shapes a varying soak draws; --fixed runs the given \
             workload"
                .into(),
        ));
    }
    let single = crate::device_args::flags_given([
        ("--exhaustive", args.exhaustive),
        ("--full-data", args.full_data),
        ("--replay-instant", args.replay_instant.is_some()),
        ("--first-cut", args.first_cut.is_some()),
        ("--threads", args.threads.is_some()),
    ]);
    if !single.is_empty() {
        return Err(SoakOptionError(format!(
            "{} {} to a single campaign (one design, no --seeds), not to a soak",
            single.join(", "),
            if single.len() == 1 {
                "applies"
            } else {
                "apply"
            }
        )));
    }
    Ok(())
}

fn soak_config(args: &CrashtestArgs, designs: Vec<DesignSpec>) -> anyhow::Result<SoakConfig> {
    check_soak_options(args)?;
    let options = DesignOptions::from_pairs(&args.params)?;
    let (shapes, designs) = shapes_and_designs(&args.shapes, designs, &options)?;
    let seeds = soak_seeds(args);
    // Each design on its own default workload unless --workload names one for all of them
    // (the first design's would be a workload the others may not run).
    let fixed = match args.fixed {
        true => designs
            .iter()
            .map(|d| single_config(args, d.clone()).map(|c| (c.workload, c.device)))
            .collect::<anyhow::Result<Vec<_>>>()?,
        false => Vec::new(),
    };
    Ok(SoakConfig {
        designs,
        promise: args
            .promise
            .as_deref()
            .map(Promise::parse)
            .transpose()
            .map_err(anyhow::Error::msg)?,
        options,
        seeds,
        crash_points: args.crash_points,
        torn: args.torn,
        jobs: args
            .jobs
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get())),
        vary: !args.fixed,
        shapes,
        second_lives: args.second_lives,
        fixed,
        media: args.device.resolve()?.media,
    })
}

/// The shapes `--shape` names, and the designs that support at least one of them (all of
/// them when no shape is named).
fn shapes_and_designs(
    names: &[String],
    designs: Vec<DesignSpec>,
    options: &DesignOptions,
) -> anyhow::Result<(Vec<Shape>, Vec<DesignSpec>)> {
    let shapes = names
        .iter()
        .map(|n| {
            Shape::named(n).ok_or_else(|| {
                let known: Vec<&str> = Shape::ALL.iter().map(|s| s.name()).collect();
                anyhow::anyhow!("unknown shape '{n}'; shapes: {}", known.join(", "))
            })
        })
        .collect::<anyhow::Result<Vec<Shape>>>()?;
    if shapes.is_empty() {
        return Ok((shapes, designs));
    }
    let names: Vec<&str> = designs.iter().map(|d| d.name).collect();
    let suited: Vec<DesignSpec> = designs
        .into_iter()
        .filter(|d| {
            let caps = crashtest::soak::capabilities(d, options);
            shapes.iter().any(|s| s.supported_by(caps))
        })
        .collect();
    if suited.is_empty() {
        anyhow::bail!(
            "no design of {} supports the shape{} {}",
            names.join(", "),
            if shapes.len() == 1 { "" } else { "s" },
            shape_list(&shapes)
        );
    }
    Ok((shapes, suited))
}

fn shape_list(shapes: &[Shape]) -> String {
    shapes
        .iter()
        .map(|s| s.name())
        .collect::<Vec<_>>()
        .join(", ")
}

/// `--seeds N` consecutive seeds from `--seed`, or N fresh ones (printed) without it.
pub(crate) fn soak_seeds(args: &CrashtestArgs) -> Vec<u64> {
    let n = args.seeds.unwrap_or(1);
    match args.seed {
        Some(s) => (0..n as u64).map(|i| s + i).collect(),
        None => {
            let s = soak::fresh_seeds(n);
            eprintln!("crashtest: fresh seeds {s:?}");
            s
        }
    }
}

/// What a cell ran beyond its line's columns: the parameters and over-provisioning it drew.
fn cell_extras(c: &CellResult) -> String {
    let mut extras: Vec<String> = Vec::new();
    if !c.params.is_empty() {
        extras.push(c.params.clone());
    }
    if let Some(op) = &c.over_provisioning {
        extras.push(format!("over-provisioning {op}"));
    }
    if extras.is_empty() {
        String::new()
    } else {
        format!("  ({})", extras.join("; "))
    }
}

/// The media model's lines of a campaign's report.
fn print_media(report: &CampaignReport, m: &crashtest::media::MediaRun) {
    let r = &m.recorded;
    println!(
        "media             {} at {} x rated wear, {} days off after each cut: {} uncorrectable reads, {} read retries, {} blocks retired in the run",
        m.part, m.wear, m.power_off_days, r.uncorrectable_reads, r.read_retries, r.retired_blocks
    );
    println!(
        "lost to media     {} images stopped at lost metadata, {} reads failed for lost versions (accepted)",
        report.lost_to_media, report.errors_for_lost_pages
    );
    if let Some(e) = &m.end_of_life {
        println!(
            "end of life       the run of {} requests ended ({}); judged: {} requests",
            e.requests_asked, e.ended_by, e.requests_run
        );
    }
}

fn print_cell(c: &CellResult) {
    let status = match (&c.error, c.violations) {
        (Some(e), _) => format!("ERROR {e}"),
        (None, 0) => "ok".to_string(),
        (None, v) => format!("FAIL {v} violations in {} images", c.violating_points),
    };
    eprintln!(
        "{:<13} seed {:<20} {:<15} {:<10} {:<5} qd {:<2} fill {:<4} {:>5} req {:>5} points  {status}{}",
        c.design,
        c.seed,
        c.shape,
        c.geometry,
        c.timing,
        c.queue_depth,
        c.fill,
        c.requests,
        c.crash_points,
        cell_extras(c)
    );
    if c.failed() {
        if let Some(v) = &c.first_violation {
            eprintln!("    first: {v}");
        }
        if let Some(r) = &c.replay {
            eprintln!("    replay: {r}");
        }
    }
}

fn print_summary(report: &SoakReport) {
    println!(
        "{:<13} {:>6} {:>8} {:>12} {:>11}",
        "design", "seeds", "failing", "crash points", "violations"
    );
    for d in report.designs() {
        let t = report.totals_of(|c| c.design == d);
        println!(
            "{:<13} {:>6} {:>8} {:>12} {:>11}",
            d,
            t.seeds,
            t.failing_seeds.len(),
            t.crash_points,
            t.violations
        );
    }
    let t = report.totals();
    println!(
        "{:<13} {:>6} {:>8} {:>12} {:>11}   ({:.0} s)",
        "all",
        t.seeds,
        t.failing_seeds.len(),
        t.crash_points,
        t.violations,
        report.wall_s
    );
    if t.media.is_some() {
        print_media_summary(report);
    }
    for c in report.cells.iter().filter(|c| c.failed()) {
        let what = match &c.error {
            Some(e) => format!("could not run: {e}"),
            None => format!("{} violations", c.violations),
        };
        println!(
            "FAIL {} seed {}: {what}; replay: {}",
            c.design,
            c.seed,
            c.replay.as_deref().unwrap_or("-")
        );
    }
}

/// A soak's media figures per design ([`crashtest::soak::CellMedia`]).
fn print_media_summary(report: &SoakReport) {
    println!(
        "{:<13} {:>13} {:>12} {:>8} {:>14} {:>13} {:>10}",
        "media",
        "uncorrectable",
        "read retries",
        "retired",
        "lost metadata",
        "errors taken",
        "runs ended"
    );
    let names = report.designs();
    let rows = names
        .iter()
        .map(|d| (d.as_str(), report.totals_of(|c| &c.design == d)));
    for (name, t) in rows.chain([("all", report.totals())]) {
        let m = t.media.unwrap_or_default();
        println!(
            "{:<13} {:>13} {:>12} {:>8} {:>14} {:>13} {:>10}",
            name,
            m.uncorrectable_reads,
            m.read_retries,
            m.retired_blocks,
            m.images_lost_to_media,
            m.errors_for_lost_pages,
            m.runs_ended_by_media
        );
    }
}

fn run_soak_cmd(args: &CrashtestArgs) -> anyhow::Result<()> {
    let cfg = soak_config(args, lab::registry::named(&args.ftl)?)?;
    let report = soak::run_soak(&cfg, &print_cell);
    if args.json {
        println!("{}", serde_json::to_string(&report.to_json())?);
    } else {
        print_summary(&report);
    }
    let failing: Vec<&CellResult> = report.cells.iter().filter(|c| c.failed()).collect();
    if args.shrink {
        for c in &failing {
            let design = lab::registry::find(&c.design)?;
            shrink_and_print(&soak::cell_config(&cfg, &design, c.seed).0)?;
        }
    }
    if !failing.is_empty() {
        anyhow::bail!(
            "{} of {} soak campaigns failed",
            failing.len(),
            report.cells.len()
        );
    }
    Ok(())
}

/// Soaks every negative control; each must be caught on at least half its seeds.
fn run_controls(args: &CrashtestArgs) -> anyhow::Result<()> {
    let mut weak = Vec::new();
    let mut all = Vec::new();
    for soak::Control {
        design: name,
        params,
        promise,
        what,
        shapes,
        second_lives,
    } in soak::CONTROLS
    {
        let mut cfg = soak_config(args, vec![lab::registry::find(name)?])?;
        cfg.promise = Some(promise);
        cfg.shapes = shapes.to_vec();
        cfg.second_lives = cfg.second_lives.max(second_lives);
        for (k, v) in params {
            cfg.options = cfg.options.with(k, v);
        }
        let report = soak::run_soak(&cfg, &|_| {});
        let t = report.totals();
        println!(
            "control {name} {params:?} judged as {}{}: caught on {} of {} seeds ({what})",
            promise.name(),
            match cfg.second_lives {
                0 => String::new(),
                n => format!(" with {n} second lives"),
            },
            t.failing_seeds.len(),
            t.seeds
        );
        if t.failing_seeds.len() * 2 < t.seeds {
            weak.push(name);
        }
        all.push(serde_json::json!({"design": name, "params": params, "promise": promise.name(), "second_lives": cfg.second_lives, "caught_seeds": t.failing_seeds.len(), "seeds": t.seeds}));
    }
    let designs = lab::registry::named(&args.ftl)?;
    if let Some(cfg) = crashtest::media::control(&soak_config(args, designs)?) {
        let report = soak::run_soak(&cfg, &|_| {});
        for name in report.designs() {
            let t = report.totals_of(|c| c.design == name);
            println!(
                "control {name} on {} media handing on uncorrected data: caught on {} of {} seeds",
                args.device.media.as_deref().unwrap_or("-"),
                t.failing_seeds.len(),
                t.seeds
            );
            if t.failing_seeds.len() * 2 < t.seeds {
                weak.push("media");
            }
            all.push(serde_json::json!({"design": name, "media": "hand_uncorrectable", "caught_seeds": t.failing_seeds.len(), "seeds": t.seeds}));
        }
    }
    if args.json {
        println!("{}", serde_json::json!({ "controls": all }));
    }
    if !weak.is_empty() {
        anyhow::bail!("negative controls caught on fewer than half their seeds: {weak:?}");
    }
    Ok(())
}

/// An extra column of a soak's summary table: its header and the cells it counts.
pub(crate) type CountedColumn<'a, C> = (&'a str, &'a dyn Fn(&C) -> bool);

/// The per-design table and the total line of a soak of real-software campaigns (SQLite, NBD
/// requests), with an extra column if `counted` names one.
pub(crate) fn print_cells_summary<C: soak::SoakCell>(
    report: &soak::CellsReport<C>,
    counted: Option<CountedColumn<C>>,
) {
    let header = counted.map_or(String::new(), |(h, _)| format!(" {h:>7}"));
    println!("design         cells{header}  failing  crash points  violations");
    for d in report.designs() {
        let cells: Vec<&C> = report.cells.iter().filter(|c| c.design() == d).collect();
        let extra = counted.map_or(String::new(), |(_, keep)| {
            format!(" {:>7}", cells.iter().filter(|c| keep(c)).count())
        });
        println!(
            "{d:<13} {:>6}{extra} {:>8} {:>13} {:>11}",
            cells.len(),
            cells.iter().filter(|c| c.failed()).count(),
            cells.iter().map(|c| c.crash_points()).sum::<usize>(),
            cells.iter().map(|c| c.violations()).sum::<usize>()
        );
    }
    println!(
        "total: {} cells, {} crash points, {} violations; GC copied pages during the run in {} cells; {:.0} s",
        report.cells.len(),
        report.crash_points(),
        report.violations(),
        report.cells_with_gc_copies(),
        report.wall_s
    );
}
