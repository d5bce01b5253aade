//! `mobius crashtest --workload nbd`: power cuts under the requests NBD clients send an export
//! (docs/nbd.md, "Power cuts under NBD requests"): one campaign, the soak over seeds and
//! designs (`--seeds`, several designs), and its negative controls (`--controls`).

use crate::crash_args::CrashtestArgs;
use crashtest::second_life::FirstCut;
use crashtest::soak::SoakCell;
use ftl::{DesignOptions, DesignSpec, Promise};
use nbd::crash::soak::{self, NbdCell, NbdSoakConfig, NbdSoakReport};
use nbd::crash::{self, NbdCrashConfig, NbdCrashReport};

/// Whether `args` ask for an NBD campaign.
pub fn is_nbd(args: &CrashtestArgs) -> bool {
    args.workload.workload.as_deref() == Some("nbd")
}

pub fn run(args: &CrashtestArgs) -> anyhow::Result<()> {
    if args.controls {
        return controls(args);
    }
    if crashtest::options::is_soak(args) {
        return soak_cmd(args);
    }
    campaign(args)
}

/// Flags an NBD campaign would not use, as an error rather than silently. A soak draws the
/// device, the run and the fill; a single campaign takes them.
fn check_flags(args: &CrashtestArgs, soak: bool) -> anyhow::Result<()> {
    let taken: &[&str] = if soak {
        &["--workload"]
    } else {
        &["--workload", "--requests", "--fill"]
    };
    let mut unused = lab::flags_given([
        ("--shrink", args.shrink),
        ("--exhaustive", args.exhaustive),
        ("--fixed", args.fixed),
        ("--threads", args.threads.is_some()),
        ("--full-data", args.full_data),
        ("--mode", args.mode.is_some()),
        ("--synchronous", args.synchronous.is_some()),
        ("--tx", args.tx.is_some()),
    ]);
    unused.extend(
        args.workload
            .given()
            .into_iter()
            .filter(|f| !taken.contains(f)),
    );
    if soak {
        unused.extend(args.device.given());
        unused.extend(lab::flags_given([
            ("--replay-instant", args.replay_instant.is_some()),
            ("--first-cut", args.first_cut.is_some()),
        ]));
    } else {
        unused.extend(lab::flags_given([("--jobs", args.jobs.is_some())]));
    }
    if !unused.is_empty() {
        anyhow::bail!(
            "{} not used by an NBD {} (it always keeps full data; a soak draws the device, run \
             length and fill of each seed: replay a cell with its printed command)",
            unused.join(", "),
            if soak { "soak" } else { "campaign" }
        );
    }
    Ok(())
}

fn promise_arg(args: &CrashtestArgs) -> anyhow::Result<Option<Promise>> {
    Ok(args.promise.as_deref().map(Promise::parse).transpose()?)
}

/// `--atomic-requests` on a design without static transactions: refused, as `mobius serve`
/// refuses it.
fn check_atomic(design: &DesignSpec, args: &CrashtestArgs) -> anyhow::Result<()> {
    if args.plain_reads && !args.atomic_requests {
        anyhow::bail!("--plain-reads changes how atomic requests read: give --atomic-requests");
    }
    let options = DesignOptions::from_pairs(&args.params)?;
    if args.atomic_requests && !soak::has_atomic_requests(design, &options) {
        anyhow::bail!(
            "{} has no static transactions: it cannot export atomic requests",
            design.name
        );
    }
    Ok(())
}

/// `--first-cut`, which names the second life a `--replay-instant` is in.
fn first_cut(args: &CrashtestArgs) -> anyhow::Result<Option<FirstCut>> {
    let Some(text) = &args.first_cut else {
        return Ok(None);
    };
    if args.replay_instant.is_none() {
        anyhow::bail!("--first-cut names the second life of a --replay-instant: give both");
    }
    Ok(Some(FirstCut::parse(text)?))
}

/// One campaign (600 requests after an 80 % fill unless told otherwise).
fn campaign(args: &CrashtestArgs) -> anyhow::Result<()> {
    check_flags(args, false)?;
    let design = lab::registry::find(&args.ftl)?;
    check_atomic(&design, args)?;
    let seed = args.seed.unwrap_or(1);
    let device = crashtest::options::media_device(args, &design)?;
    let cfg = NbdCrashConfig {
        device: crashtest::with_media_seed(device, seed),
        design,
        options: DesignOptions::from_pairs(&args.params)?,
        atomic_requests: args.atomic_requests,
        promise: promise_arg(args)?,
        plain_reads: args.plain_reads,
        requests: args.workload.requests.unwrap_or(soak::BASE_REQUESTS),
        fill: args.workload.fill.unwrap_or(0.8),
        crash_points: args.crash_points,
        torn: args.torn,
        seed,
        only_at: args.replay_instant.map(|at| (at, args.torn)),
        second_lives: args.second_lives,
        first_cut: first_cut(args)?,
        cut: crashtest::options::cut_model(args)?,
    };
    let report = crash::run(&cfg)?;
    if args.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        print_campaign(&cfg, &report);
    }
    if report.failed() {
        anyhow::bail!(
            "{} crash points broke the {} promise, {} READs missed the last write; first: {}\n  replay: {}",
            report.violations,
            report.promise,
            report.read_mismatches,
            report
                .first_violation
                .as_deref()
                .or(report.first_read_mismatch.as_deref())
                .unwrap_or_default(),
            crash::replay_of(&cfg, &report)
        );
    }
    Ok(())
}

fn print_campaign(cfg: &NbdCrashConfig, r: &NbdCrashReport) {
    println!(
        "export            {} ({} requests; judged as {})",
        cfg.design.name,
        if cfg.atomic_requests {
            "atomic"
        } else {
            "plain"
        },
        r.promise
    );
    println!(
        "run               {} NBD requests, seed {}, device {:.0} % aged; {} oversize writes refused, {} edge pages read",
        r.requests,
        cfg.seed,
        cfg.fill * 100.0,
        r.refused_oversize,
        r.edge_reads
    );
    let kinds: Vec<String> = r
        .points_by_kind
        .iter()
        .map(|(k, n)| format!("{k} {n}"))
        .collect();
    println!(
        "crash points      {} ({})",
        r.crash_points,
        kinds.join(", ")
    );
    println!(
        "during the run    {} erases, {} pages copied by GC",
        r.run_erases, r.run_gc_copies
    );
    if r.second_lives > 0 {
        println!(
            "second lives      {} (their crash points are counted above)",
            r.second_lives
        );
    }
    if let Some(m) = &r.media {
        print_media(r, m);
    }
    println!("READs missing     {}", r.read_mismatches);
    println!("violations        {}", r.violations);
}

/// The media model's lines of a campaign's report.
fn print_media(r: &NbdCrashReport, m: &crashtest::media::MediaRun) {
    let lost = format!(
        "{} images stopped at lost metadata, {} sectors read back as errors for lost versions, \
         {} requests refused with EIO for lost pages (accepted)",
        r.lost_to_media, r.errors_for_lost_sectors, r.refused_for_lost_pages
    );
    crate::crashtest_cmd::print_media_lines(m, &lost);
}

fn soak_config(args: &CrashtestArgs, designs: Vec<DesignSpec>) -> anyhow::Result<NbdSoakConfig> {
    check_flags(args, true)?;
    let media = media_config(args, &designs)?;
    Ok(NbdSoakConfig {
        designs,
        seeds: crashtest::options::soak_seeds(args),
        options: DesignOptions::from_pairs(&args.params)?,
        crash_points: args.crash_points,
        torn: args.torn,
        jobs: args
            .jobs
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get())),
        atomic_requests: args.atomic_requests.then_some(true),
        promise: promise_arg(args)?,
        plain_reads: args.plain_reads,
        second_lives: args.second_lives,
        cut: crashtest::options::cut_model(args)?,
        media,
    })
}

/// The media model `--media` asks for (the first design's device carries it; every cell
/// draws its own device and takes the model's settings).
fn media_config(
    args: &CrashtestArgs,
    designs: &[DesignSpec],
) -> anyhow::Result<Option<flash::MediaConfig>> {
    Ok(match designs.first() {
        Some(d) => crashtest::options::media_device(args, d)?.media,
        None => None,
    })
}

/// The soak over `--seeds` and the designs named; with `--atomic-requests` only atomic exports
/// (designs without static transactions are left out, with a line saying so).
fn soak_cmd(args: &CrashtestArgs) -> anyhow::Result<()> {
    if args.plain_reads && !args.atomic_requests {
        anyhow::bail!("--plain-reads changes how atomic requests read: give --atomic-requests");
    }
    let mut cfg = soak_config(args, lab::registry::named(&args.ftl)?)?;
    if args.atomic_requests {
        let (runs, left_out): (Vec<DesignSpec>, Vec<DesignSpec>) = cfg
            .designs
            .iter()
            .cloned()
            .partition(|d| soak::has_atomic_requests(d, &cfg.options));
        for d in left_out {
            eprintln!("crashtest: {} has no static transactions; left out", d.name);
        }
        cfg.designs = runs;
    }
    if cfg.designs.is_empty() {
        anyhow::bail!("no design named exports the requests asked for");
    }
    let report = soak::run_soak(&cfg, &print_cell);
    if args.json {
        println!("{}", serde_json::to_string(&report.to_json())?);
    } else {
        print_summary(&report);
    }
    let failing = report.failing().count();
    if failing > 0 {
        anyhow::bail!(
            "{failing} of {} NBD soak campaigns failed",
            report.cells.len()
        );
    }
    Ok(())
}

fn print_cell(c: &NbdCell) {
    let status = match (&c.error, &c.report) {
        (Some(e), _) => format!("ERROR {e}"),
        (None, Some(r)) if r.failed() => format!(
            "FAIL {} violations, {} READs missed",
            r.violations, r.read_mismatches
        ),
        (None, Some(r)) if r.media.is_some() => format!(
            "ok  gc copies {}; lost to media: {} images, {} sectors read as errors, {} requests refused (accepted)",
            r.run_gc_copies, r.lost_to_media, r.errors_for_lost_sectors, r.refused_for_lost_pages
        ),
        (None, Some(r)) => format!("ok  gc copies {}", r.run_gc_copies),
        (None, None) => "not run".to_string(),
    };
    let suffix = c.drawn.suffix();
    eprintln!(
        "{:<13} seed {:<20} {:<6} {:<10} {:<4} fill {:<4} {:>5} req {:>5} points{suffix}  {status}",
        c.design,
        c.seed,
        if c.atomic_requests { "atomic" } else { "plain" },
        c.drawn.geometry,
        c.drawn.timing,
        c.drawn.fill,
        c.requests,
        c.crash_points(),
    );
    if c.failed() {
        let first = c.report.as_ref().and_then(|r| {
            r.first_violation
                .as_deref()
                .or(r.first_read_mismatch.as_deref())
        });
        if let Some(v) = first {
            eprintln!("    first: {v}");
        }
        if let Some(r) = &c.replay {
            eprintln!("    replay: {r}");
        }
    }
}

fn print_summary(report: &NbdSoakReport) {
    let atomic = |c: &NbdCell| c.atomic_requests;
    crate::crash_summary::print_cells_summary(report, Some(("atomic", &atomic)));
}

/// `--controls`: each control over the seeds (its design, requests, promise and reads); each
/// must be caught on at least half of them.
fn controls(args: &CrashtestArgs) -> anyhow::Result<()> {
    if args.promise.is_some() || args.atomic_requests || args.plain_reads {
        anyhow::bail!("--controls sets the promise and the requests of each control itself");
    }
    let mut weak = Vec::new();
    let mut all = Vec::new();
    for control in soak::CONTROLS {
        let mut cfg = soak_config(args, vec![lab::registry::find(control.design)?])?;
        cfg.atomic_requests = Some(control.atomic_requests);
        cfg.promise = control.promise;
        cfg.plain_reads = control.plain_reads;
        cfg.second_lives = cfg.second_lives.max(control.second_lives);
        for (k, v) in control.params {
            cfg.options = cfg.options.with(k, v);
        }
        let report = soak::run_soak(&cfg, &print_cell);
        if let Some(c) = report.cells.iter().find(|c| c.error.is_some()) {
            anyhow::bail!(
                "control {} could not run on seed {}: {}",
                control.design,
                c.seed,
                c.error.as_deref().unwrap_or_default()
            );
        }
        let caught = report.cells.iter().filter(|c| c.violations() > 0).count();
        println!(
            "control {} ({}): caught on {caught} of {} seeds ({})",
            control.design,
            control.describe(),
            report.cells.len(),
            control.what
        );
        if caught * 2 < report.cells.len() {
            weak.push(control.design);
        }
        all.push(serde_json::json!({"design": control.design, "control": control.describe(), "caught_seeds": caught, "seeds": report.cells.len()}));
    }
    let designs = lab::registry::named(&args.ftl)?;
    if let Some(cfg) = soak::media_control(&soak_config(args, designs)?) {
        let report = soak::run_soak(&cfg, &print_cell);
        for name in report.designs() {
            let cells = report.cells.iter().filter(|c| c.design == name);
            let seeds = cells.clone().count();
            let caught = cells.filter(|c| c.violations() > 0).count();
            println!(
                "control {name} on {} media handing on uncorrected data: caught on {caught} of {seeds} seeds",
                args.media.media.as_deref().unwrap_or("-"),
            );
            if caught * 2 < seeds {
                weak.push("media");
            }
            all.push(serde_json::json!({"design": name, "media": "hand_uncorrectable", "caught_seeds": caught, "seeds": seeds}));
        }
    }
    if args.json {
        println!("{}", serde_json::json!({ "controls": all }));
    }
    if !weak.is_empty() {
        anyhow::bail!("NBD negative controls caught on fewer than half their seeds: {weak:?}");
    }
    Ok(())
}
