//! `mobius crashtest --workload sqlite-*` (one campaign) and `--workload sqlite` (the soak and
//! its negative controls): power cuts under SQLite (docs/sqlite.md, "Power cuts").

use crate::crash_args::CrashtestArgs;
use crashtest::soak::SoakCell;
use crashtest::sqlite::soak::{self, SettingFilter, SqlCell, SqlSoakConfig, SqlSoakReport};
use crashtest::sqlite::{self as crash, CrashConfig, CrashReport};
use ftl::{DesignOptions, DesignSpec};
use sqlite::workload::{Scale, Workload};
use sqlite::{Mode, OpenOptions, TxKind};

/// `mobius crashtest --workload sqlite-tpcb|sqlite-kv|sqlite-tpcc`: power cuts under SQLite (docs/sqlite.md).
pub fn crashtest(args: &CrashtestArgs, workload: &str) -> anyhow::Result<()> {
    check_sqlite_flags(args, false)?;
    let design = lab::registry::find(&args.ftl)?;
    let mode = Mode::parse(args.mode.as_deref().unwrap_or("batch"))?;
    let synchronous = synchronous_arg(args)?
        .unwrap_or_else(|| sqlite::durability::durable_synchronous(mode).0.into());
    let seed = args.seed.unwrap_or(1);
    let mut open = OpenOptions::new(mode);
    open.synchronous = synchronous.to_uppercase();
    open.seed = seed;
    open.tx_kind = TxKind::parse(args.tx.as_deref().unwrap_or("static"))?;
    let device = crashtest::options::media_device(args, &design)?;
    let cfg = CrashConfig {
        device: crashtest::with_media_seed(device, seed),
        design,
        options: DesignOptions::from_pairs(&args.params)?,
        open,
        workload: Workload::parse(workload)?,
        scale: Scale::campaign(),
        transactions: args.workload.requests.unwrap_or(200),
        crash_points: args.crash_points,
        torn: args.torn,
        seed,
        fill: args.workload.fill.unwrap_or(0.0),
        second_lives: args.second_lives,
        only_at: args.replay_instant,
        first_cut: first_cut(args)?,
        cut: crashtest::options::cut_model(args)?,
    };
    let report = crash::run(&cfg)?;
    if args.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        print_campaign(&cfg, &report);
    }
    if let Some(why) = &report.first_violation {
        anyhow::bail!(
            "{} violations; first at {} ns: {why}\n  replay: {}",
            report.violations,
            report.first_violation_ns.unwrap_or(0),
            crash::replay_command(
                &cfg,
                report.first_violation_ns,
                report.first_violation_cut_ns
            )
        );
    }
    Ok(())
}

fn print_campaign(cfg: &CrashConfig, report: &CrashReport) {
    println!("design            {}", cfg.design.name);
    println!(
        "mode              {} (synchronous {}, {} transactions)",
        cfg.open.mode.name(),
        cfg.open.synchronous,
        cfg.open.tx_kind.name()
    );
    println!(
        "workload          sqlite-{}, {} transactions, seed {}, device {:.0} % aged",
        cfg.workload.name(),
        cfg.transactions,
        cfg.seed,
        cfg.fill * 100.0
    );
    println!(
        "crash points      {}{}{}",
        report.crash_points,
        if cfg.torn { " (torn)" } else { "" },
        match report.second_lives {
            0 => String::new(),
            n => format!(", the {n} second lives' included"),
        }
    );
    println!(
        "durability        {}",
        if report.durable_mode {
            "every returned commit must survive"
        } else {
            "a prefix of commits"
        }
    );
    println!(
        "recovered         {}..={} transactions; all commits present at {} points",
        report.min_recovered, report.max_recovered, report.all_commits_present
    );
    println!(
        "during the run    {} erases, {} pages copied by GC",
        report.run_erases, report.run_gc_copies
    );
    if let Some(m) = &report.media {
        let lost = format!(
            "{} images stopped at lost metadata, {} failed with I/O errors for lost pages (accepted), {} second lives ended",
            report.lost_to_media, report.errors_for_lost_pages, report.lives_ended_by_media
        );
        crate::crashtest_cmd::print_media_lines(m, &lost);
    }
    println!("violations        {}", report.violations);
}

/// Flags the SQLite campaigns would not use, as an error rather than silently. A soak draws the
/// device and the run; a single campaign takes the device, `--requests` and `--fill`.
fn check_sqlite_flags(args: &CrashtestArgs, soak: bool) -> anyhow::Result<()> {
    // A single campaign takes `--requests` and `--fill`; a soak draws them.
    let taken: &[&str] = if soak {
        &["--workload"]
    } else {
        &["--workload", "--requests", "--fill"]
    };
    let mut unused = lab::flags_given([
        ("--shrink", args.shrink),
        ("--exhaustive", args.exhaustive),
        ("--fixed", args.fixed),
        ("--promise", args.promise.is_some()),
        ("--threads", args.threads.is_some()),
        ("--full-data", args.full_data),
    ]);
    unused.extend(
        args.workload
            .given()
            .into_iter()
            .filter(|f| !taken.contains(f)),
    );
    let prefix_cut = crashtest::options::cut_model(args)? != crashtest::prefix::CutModel::Instant;
    if args.media.media.is_some() && prefix_cut {
        // The media oracle orders versions by the flash's clock (docs/reliability.md).
        anyhow::bail!("--media judges cuts at instants: leave out --cut-model");
    }
    if soak {
        // A soak draws the device; the media model's fields may still be set.
        let media_only = args
            .device
            .overrides
            .iter()
            .all(|o| o.trim_start().starts_with("media."));
        unused.extend(
            args.device
                .given()
                .into_iter()
                .filter(|f| !(media_only && *f == "--set")),
        );
        unused.extend(lab::flags_given([
            ("--replay-instant", args.replay_instant.is_some()),
            ("--first-cut", args.first_cut.is_some()),
        ]));
    } else {
        unused.extend(lab::flags_given([("--jobs", args.jobs.is_some())]));
    }
    if !unused.is_empty() {
        anyhow::bail!(
            "{} not used by a SQLite {} (SQLite workloads always keep full data; a soak draws \
             the device, run length and fill of each seed: replay a cell with its printed command)",
            unused.join(", "),
            if soak { "soak" } else { "campaign" }
        );
    }
    Ok(())
}

/// The SQLite soak the flags describe, over `designs`.
fn sql_soak_config(
    args: &CrashtestArgs,
    workload: Option<&str>,
    designs: Vec<DesignSpec>,
) -> anyhow::Result<SqlSoakConfig> {
    check_sqlite_flags(args, true)?;
    let designs_first = designs.first().cloned();
    Ok(SqlSoakConfig {
        designs,
        seeds: crashtest::options::soak_seeds(args),
        options: DesignOptions::from_pairs(&args.params)?,
        crash_points: args.crash_points,
        torn: args.torn,
        jobs: args
            .jobs
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get())),
        workload: workload.map(Workload::parse).transpose()?,
        only: SettingFilter {
            mode: args.mode.as_deref().map(Mode::parse).transpose()?,
            synchronous: synchronous_arg(args)?,
            tx_kind: args.tx.as_deref().map(TxKind::parse).transpose()?,
        },
        setting: None,
        second_lives: args.second_lives,
        cut: crashtest::options::cut_model(args)?,
        media: match designs_first {
            Some(d) => crashtest::options::media_device(args, &d)?.media,
            None => None,
        },
    })
}

/// `--synchronous`, checked: one of SQLite's levels (an unknown one would reach SQLite's
/// PRAGMA, which quietly reads it as a level of its own).
fn synchronous_arg(args: &CrashtestArgs) -> anyhow::Result<Option<String>> {
    let Some(level) = &args.synchronous else {
        return Ok(None);
    };
    let upper = level.to_uppercase();
    if !["OFF", "NORMAL", "FULL", "EXTRA"].contains(&upper.as_str()) {
        anyhow::bail!("unknown --synchronous '{level}': off, normal, full or extra");
    }
    Ok(Some(upper))
}

/// `--first-cut NS`: the replayed instant lies in the second life after a cut at NS (both cuts
/// tear with `--torn`); it needs `--replay-instant`.
fn first_cut(args: &CrashtestArgs) -> anyhow::Result<Option<u64>> {
    let Some(text) = &args.first_cut else {
        return Ok(None);
    };
    if args.replay_instant.is_none() {
        anyhow::bail!("--first-cut replays one image: give --replay-instant too");
    }
    text.parse().map(Some).map_err(|_| {
        anyhow::anyhow!(
            "--first-cut '{text}': a SQLite campaign takes the first cut's instant in ns"
        )
    })
}

/// `mobius crashtest --workload sqlite --seeds N` (or `--workload sqlite-W` with `--seeds` or
/// several designs): the SQLite soak (docs/sqlite.md, "The soak"). Designs that run none of the
/// commit paths asked for (`--mode batch` on DFTL) are left out, with a line saying so.
pub fn crashtest_soak(args: &CrashtestArgs, workload: Option<&str>) -> anyhow::Result<()> {
    let mut cfg = sql_soak_config(args, workload, lab::registry::named(&args.ftl)?)?;
    let (runs, left_out): (Vec<DesignSpec>, Vec<DesignSpec>) = cfg
        .designs
        .iter()
        .cloned()
        .partition(|d| !soak::settings_for(&cfg, d).is_empty());
    for d in left_out {
        eprintln!(
            "crashtest: {} runs none of the commit paths asked for; left out",
            d.name
        );
    }
    cfg.designs = runs;
    if cfg.designs.is_empty() {
        anyhow::bail!("no design named runs the commit paths asked for");
    }
    let report = soak::run_soak(&cfg, &print_sql_cell);
    if args.json {
        println!("{}", serde_json::to_string(&report.to_json())?);
    } else {
        print_sql_summary(&report);
    }
    let failing = report.failing().count();
    if failing > 0 {
        anyhow::bail!(
            "{failing} of {} SQLite soak campaigns failed",
            report.cells.len()
        );
    }
    Ok(())
}

fn print_sql_cell(c: &SqlCell) {
    let status = match (&c.error, &c.report) {
        (Some(e), _) => format!("ERROR {e}"),
        (None, Some(r)) if r.violations > 0 => format!("FAIL {} violations", r.violations),
        (None, Some(r)) if r.media.is_some() => format!(
            "ok  gc copies {}; lost to media: {} images, {} I/O errors for lost pages (accepted), {} lives ended{}",
            r.run_gc_copies,
            r.lost_to_media,
            r.errors_for_lost_pages,
            r.lives_ended_by_media,
            match r.media.as_ref().and_then(|m| m.end_of_life.as_ref()) {
                Some(e) => format!("; run cut to {} of {} transactions ({})", e.requests_run, e.requests_asked, e.ended_by),
                None => String::new(),
            }
        ),
        (None, Some(r)) => format!("ok  gc copies {}", r.run_gc_copies),
        (None, None) => "not run".to_string(),
    };
    let suffix = c.drawn.suffix();
    eprintln!(
        "{:<13} seed {:<20} {:<5} {:<9} {:<6} {:<7} {:<10} {:<4} fill {:<3} {:>4} tx {:>5} points{suffix}  {status}",
        c.design,
        c.seed,
        c.workload,
        c.mode,
        c.synchronous,
        c.tx,
        c.drawn.geometry,
        c.drawn.timing,
        c.drawn.fill,
        c.transactions,
        c.crash_points(),
    );
    if c.failed() {
        let first = c.report.as_ref().and_then(|r| r.first_violation.as_deref());
        if let Some(v) = first {
            eprintln!("    first: {v}");
        }
        if let Some(r) = &c.replay {
            eprintln!("    replay: {r}");
        }
    }
}

fn print_sql_summary(report: &SqlSoakReport) {
    crate::crash_summary::print_cells_summary(report, None);
}

/// `mobius crashtest --workload sqlite --controls`: the SQLite soak's negative controls, each
/// on its design and commit path over the seeds; each must be caught on at least half of them.
pub fn crashtest_controls(args: &CrashtestArgs, workload: Option<&str>) -> anyhow::Result<()> {
    let mut weak: Vec<&str> = Vec::new();
    let mut all = Vec::new();
    for control in soak::CONTROLS {
        let design = lab::registry::find(control.design)?;
        let mut cfg = sql_soak_config(args, workload, vec![design])?;
        cfg.setting = Some(control.setting);
        let report = soak::run_soak(&cfg, &print_sql_cell);
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
            "control {} {} {} {}: caught on {caught} of {} seeds ({})",
            control.design,
            control.setting.mode.name(),
            control.setting.synchronous,
            control.setting.tx_kind.name(),
            report.cells.len(),
            control.what
        );
        if caught * 2 < report.cells.len() {
            weak.push(control.design);
        }
        all.push(serde_json::json!({"design": control.design, "mode": control.setting.mode.name(), "tx": control.setting.tx_kind.name(), "caught_seeds": caught, "seeds": report.cells.len()}));
    }
    media_control(args, workload, &mut weak, &mut all)?;
    if args.json {
        println!("{}", serde_json::json!({ "controls": all }));
    }
    if !weak.is_empty() {
        anyhow::bail!("SQLite negative controls caught on fewer than half their seeds: {weak:?}");
    }
    Ok(())
}

/// With `--media`: the media model's negative control under SQLite, every design named behind
/// a controller that hands on the uncorrected bits instead of failing the read
/// (`hand_uncorrectable`, the block campaign's switch: [`crashtest::media::control`]); each
/// must be caught on at least half its seeds.
fn media_control(
    args: &CrashtestArgs,
    workload: Option<&str>,
    weak: &mut Vec<&str>,
    all: &mut Vec<serde_json::Value>,
) -> anyhow::Result<()> {
    let mut cfg = sql_soak_config(args, workload, lab::registry::named(&args.ftl)?)?;
    let Some(media) = cfg.media.as_mut() else {
        return Ok(());
    };
    media.hand_uncorrectable = true;
    let designs = std::mem::take(&mut cfg.designs);
    cfg.designs = designs
        .into_iter()
        .filter(|d| !soak::settings_for(&cfg, d).is_empty())
        .collect();
    let report = soak::run_soak(&cfg, &print_sql_cell);
    for d in &cfg.designs {
        let cells: Vec<&SqlCell> = report.cells.iter().filter(|c| c.design == d.name).collect();
        // Caught: a cut judged a violation, or the recorded run itself failed (SQLite met the
        // wrong bytes while the power was on: a corrupt database, never the media's end).
        let judged = cells.iter().filter(|c| c.violations() > 0).count();
        let caught = cells.iter().filter(|c| c.failed()).count();
        println!(
            "control {} on {} media handing on uncorrected data: caught on {caught} of {} seeds ({judged} by judged cuts, {} by the run failing)",
            d.name,
            args.media.media.as_deref().unwrap_or("-"),
            cells.len(),
            caught - judged
        );
        if caught * 2 < cells.len() {
            weak.push(d.name);
        }
        all.push(serde_json::json!({"design": d.name, "media": "hand_uncorrectable", "caught_seeds": caught, "seeds": cells.len()}));
    }
    Ok(())
}
