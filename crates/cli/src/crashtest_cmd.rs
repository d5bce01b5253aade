//! `mobius crashtest`: recover every crash image of a seeded run and judge it against a promise;
//! `--seeds N` soaks many seeds (and `--ftl all` every design), `--shrink` reduces a failing run,
//! `--controls` soaks the negative controls, which must be caught.

use crate::crash_args::CrashtestArgs;
use crashtest::options::{cut_model, is_soak, single_config, soak_config, sqlite_workload};
use crashtest::prefix::CutModel;
use crashtest::shrink::{shrink, Shrunk};
use crashtest::soak::{self, CellResult, SoakReport};
use crashtest::{CampaignConfig, CampaignReport};

pub fn run(args: &CrashtestArgs) -> anyhow::Result<()> {
    if args.bench {
        return run_bench(args);
    }
    let cut = cut_model(args)?;
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
            Some(first) => replay_second_life(&cfg, first, (instant, args.torn), cut),
            None => replay(&cfg, instant, args.torn, cut),
        };
    }
    let bar = crate::progress::bar(1, "crashtest");
    let (report, lives) =
        crashtest::second_life::run_campaign_cut(&cfg, args.second_lives, cut, &|d, t| {
            bar.set_length(t);
            bar.set_position(d);
        })?;
    bar.finish_and_clear();
    if args.json {
        let mut v = report.to_json();
        v["second_lives"] = serde_json::json!(lives);
        if cut != CutModel::Instant {
            v["cut_model"] = serde_json::json!(cut.name());
        }
        println!("{}", serde_json::to_string(&v)?);
    } else {
        print_report(&report, cut);
        if lives > 0 {
            println!("second lives      {lives} (their crash points are counted above)");
        }
    }
    if report.violations.is_empty() {
        return Ok(());
    }
    if args.shrink {
        shrink_and_print(&cfg, cut)?;
    }
    anyhow::bail!(
        "{} violations of the {} promise",
        report.violations.len(),
        report.promise
    )
}

/// Rebuilds and judges one image of the second life after `cut`.
fn replay_second_life(
    cfg: &CampaignConfig,
    first: &str,
    (instant, torn): (u64, bool),
    cut: CutModel,
) -> anyhow::Result<()> {
    let first = crashtest::second_life::FirstCut::parse(first)?;
    let rec = crashtest::record(cfg)?;
    let only = Some((instant, torn));
    let (_, v) = crashtest::second_life::judge_life(cfg, &rec, cut, first, 1, only);
    for x in &v {
        println!(
            "violation {}: lpn {:?}: {}",
            cut.describe(x.instant_ns),
            x.lpn,
            x.what
        );
    }
    if !v.is_empty() {
        anyhow::bail!("{} violations in the replayed second-life image", v.len());
    }
    println!(
        "second-life image {} recovered and kept the {} promise",
        cut.describe(instant),
        cfg.promise.name()
    );
    Ok(())
}

fn replay(cfg: &CampaignConfig, instant: u64, torn: bool, cut: CutModel) -> anyhow::Result<()> {
    let v = crashtest::replay_one(cfg, cut, instant, torn)?;
    for x in &v {
        println!(
            "violation {}{}: lpn {:?}: {}",
            cut.describe(x.instant_ns),
            if x.torn { " (torn)" } else { "" },
            x.lpn,
            x.what
        );
    }
    if !v.is_empty() {
        anyhow::bail!("{} violations in the replayed image", v.len());
    }
    println!(
        "image {}{} recovered and kept the {} promise",
        cut.describe(instant),
        if torn { " (torn)" } else { "" },
        cfg.promise.name()
    );
    Ok(())
}

fn print_report(report: &CampaignReport, cut: CutModel) {
    println!(
        "design            {} (judged as {})",
        report.ftl, report.promise
    );
    println!("cut model         {}", cut.name());
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
    println!("speed             {}", report.speed.line());
    for v in report.violations.iter().take(10) {
        println!(
            "  {}{} lpn {:?}: {}\n    replay: {}",
            cut.describe(v.instant_ns),
            if v.torn { " (torn)" } else { "" },
            v.lpn,
            v.what,
            v.replay
        );
    }
}

fn shrink_and_print(cfg: &CampaignConfig, cut: CutModel) -> anyhow::Result<Option<Shrunk>> {
    eprintln!("shrinking {} seed {} ...", cfg.design.name, cfg.seed);
    let s = shrink(cfg, cut, 80, &|step| eprintln!("  shrunk: {step}"))?;
    match &s {
        Some(s) => {
            let w = &s.config.workload;
            let g = &s.config.device.geometry;
            println!(
                "smallest failing run ({} campaigns tried): {} requests, fill {}, queue depth {}, {} pages per request, {}x{} chips x {} blocks",
                s.campaigns, w.requests, w.fill, w.queue_depth, w.request_pages, g.channels, g.chips_per_channel, g.blocks_per_chip
            );
            println!("  violation {}{}: {}", s.cut.describe(s.instant_ns), if s.torn { " (torn)" } else { "" }, s.violation);
            println!("  replay: {}", s.replay);
        }
        None => println!("shrink: the run did not fail again (sampled instants differ); keep the original replay"),
    }
    Ok(s)
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
    let lost = format!(
        "{} images stopped at lost metadata, {} reads failed for lost versions (accepted)",
        report.lost_to_media, report.errors_for_lost_pages
    );
    print_media_lines(m, &lost);
}

/// The media model's lines of any campaign's report (block devices, NBD): its part and what
/// the recorded run's media did, `lost` (what the checker accepted), and the end of the media's
/// life when it came.
pub(crate) fn print_media_lines(m: &crashtest::media::MediaRun, lost: &str) {
    let r = &m.recorded;
    println!(
        "media             {} at {} x rated wear, {} days off after each cut: {} uncorrectable reads, {} read retries, {} blocks retired in the run",
        m.part, m.wear, m.power_off_days, r.uncorrectable_reads, r.read_retries, r.retired_blocks
    );
    println!("lost to media     {lost}");
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
    println!("speed: {}", report.speed().line());
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
            shrink_and_print(&soak::cell_config(&cfg, &design, c.seed).0, cfg.cut)?;
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
                args.media.media.as_deref().unwrap_or("-"),
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

/// `--bench`: every design's crash points per second per core, beside `--vs`'s.
fn run_bench(args: &CrashtestArgs) -> anyhow::Result<()> {
    let designs: Vec<String> = lab::registry::named(&args.ftl)?
        .iter()
        .map(|d| d.name.to_string())
        .collect();
    let first = args.seed.unwrap_or(1);
    let seeds: Vec<u64> = (first..first + args.seeds.unwrap_or(3) as u64).collect();
    eprintln!("{}", crate::crash_bench::HEADER);
    let rows = crate::crash_bench::measure(&designs, &seeds, args.crash_points, args.vs.as_ref())?;
    if args.json {
        let v = crate::crash_bench::to_json(&rows, &seeds, args.crash_points);
        println!("{}", serde_json::to_string(&v)?);
    } else {
        println!("{}", crate::crash_bench::HEADER);
        for r in &rows {
            println!("{}", crate::crash_bench::line(r));
        }
    }
    Ok(())
}
