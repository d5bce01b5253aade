//! Experiment 6 — crash campaign summary: the proof behind every number of the report.
//!
//! For every design in the build, a seeded campaign (`mobius crashtest`) on the `small` preset with
//! torn operations, judged against the design's own promise; the table reports instants tried,
//! images recovered, violations and recovery cost. Then the negative controls: designs that
//! promise less (or carry an injected bug) judged against the stronger promise must be caught —
//! a checker that never fails proves nothing.

use crate::claims::{Check, Claim, Tolerance};
use crate::number::fmt;
use crate::result::{ExperimentResult, Table};
use crate::Context;
use crashtest::second_life::run_campaign_with_lives;
use crashtest::{run_campaign, CampaignConfig};
use ftl::DesignOptions;

pub fn run(ctx: &Context) -> ExperimentResult {
    let points = if ctx.scale == crate::Scale::Quick {
        500
    } else {
        10_000
    };
    let mut out = Collected::default();
    let rows = design_campaigns(ctx, points, &mut out);
    let control_rows = control_campaigns(ctx, points, &mut out);
    ExperimentResult {
        id: "campaigns",
        title: "6. Crash campaign summary".into(),
        description: format!("Every design on the `small` preset, its default workload (3,000 requests after an 80 % fill), {points} crash instants with torn operations, judged against its own promise by `mobius crashtest` (see docs/crashtest.md)."),
        tables: vec![Table {
            caption: "Crash campaigns (seeded; reproduce with `mobius crashtest --ftl NAME --torn --crash-points N --seed S`)".into(),
            header: ["design", "promise", "crash points", "recovered", "violations", "recovery reads (mean)", "recovery ms (mean)"].map(String::from).to_vec(),
            rows,
        }, Table {
            caption: "Negative controls: weaker designs judged against a stronger promise, and a design with an injected recovery bug, must be caught (a fault that shows only after recovery, with second lives: a cut, recovery, more work, another cut)".into(),
            header: ["design", "what is wrong", "judged against", "crash points", "violations", "verdict"].map(String::from).to_vec(),
            rows: control_rows,
        }],
        figures: Vec::new(),
        claims: out.claims,
        data: serde_json::Value::Object(out.data),
        skipped: out.skipped,
        host: Some(flash::DeviceConfig::preset("small").expect("small preset").host),
        ran: crate::Ran::default(),
    }
}

/// What the campaigns give besides their table rows.
#[derive(Default)]
struct Collected {
    data: serde_json::Map<String, serde_json::Value>,
    skipped: Vec<String>,
    claims: Vec<Claim>,
}

/// A campaign of `d` on the `small` preset: its default workload (3,000 requests after an
/// 80 % fill), `points` torn crash instants, judged against `promise`.
fn campaign_config(
    ctx: &Context,
    d: &ftl::DesignSpec,
    options: DesignOptions,
    promise: ftl::Promise,
    points: usize,
) -> Result<CampaignConfig, workload::WorkloadError> {
    let mut workload = workload::WorkloadSpec::named(d.default_workload)?;
    workload.requests = 3000;
    workload.fill = ctx.unknowns.fill(0.8);
    let device = ctx.device("small").expect("small preset");
    Ok(CampaignConfig {
        design: d.clone(),
        options: ctx.unknowns.options(d, &device.geometry, options),
        device,
        workload,
        seed: ctx.seed,
        crash_points: points,
        torn: true,
        exhaustive: false,
        promise,
        threads: 2,
        tag_only: true,
    })
}

/// Every design judged against its own promise: one table row each.
fn design_campaigns(ctx: &Context, points: usize, out: &mut Collected) -> Vec<Vec<String>> {
    let mut rows = Vec::new();
    let total = ctx.designs.len() as u64;
    for (i, d) in ctx.designs.iter().enumerate() {
        let report = match campaign_config(ctx, d, DesignOptions::default(), d.promise, points) {
            Ok(cfg) => run_campaign(&cfg, &|_, _| {}).map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        match report {
            Ok(r) => {
                rows.push(vec![
                    d.name.to_string(),
                    r.promise.clone(),
                    r.crash_points.to_string(),
                    r.recovered.to_string(),
                    r.violations.len().to_string(),
                    fmt(r.recovery_flash_reads.mean),
                    fmt(r.recovery_sim_ms.mean),
                ]);
                out.claims.push(kept_claim(d.name, &r));
                out.data.insert(d.name.to_string(), r.to_json());
            }
            Err(e) => out.skipped.push(format!("{}: {e}", d.name)),
        }
        (ctx.progress)("campaigns", i as u64 + 1, total);
    }
    rows
}

/// The negative controls (`crashtest::soak::CONTROLS`): weaker designs judged against a
/// stronger promise, each of which must be caught.
fn control_campaigns(ctx: &Context, points: usize, out: &mut Collected) -> Vec<Vec<String>> {
    let mut rows = Vec::new();
    for crashtest::soak::Control {
        design: name,
        params,
        promise,
        what,
        second_lives,
        ..
    } in crashtest::soak::CONTROLS
    {
        let Some(d) = ctx.design(name) else {
            out.skipped
                .push(format!("control {name}: design not built"));
            continue;
        };
        let mut options = DesignOptions::default();
        for (k, v) in params {
            options = options.with(k, *v);
        }
        let Ok(cfg) = campaign_config(ctx, d, options, promise, points) else {
            continue;
        };
        let label = if params.is_empty() {
            name.to_string()
        } else {
            let p: Vec<String> = params.iter().map(|(k, v)| format!("{k}={v}")).collect();
            format!("{name} ({})", p.join(", "))
        };
        match run_campaign_with_lives(&cfg, second_lives, &|_, _| {}) {
            Ok((r, _)) => {
                let caught = !r.violations.is_empty();
                rows.push(vec![
                    label.clone(),
                    match second_lives {
                        0 => what.to_string(),
                        n => format!("{what} (judged with {n} second lives)"),
                    },
                    r.promise.clone(),
                    r.crash_points.to_string(),
                    r.violations.len().to_string(),
                    if caught { "caught" } else { "**not caught**" }.to_string(),
                ]);
                out.claims.push(caught_claim(&label, &r));
                out.data.insert(format!("control/{label}"), r.to_json());
            }
            Err(e) => out.skipped.push(format!("control {label}: {e}")),
        }
    }
    rows
}

/// A design's own campaign: every crash image keeps its promise.
fn kept_claim(design: &str, r: &crashtest::CampaignReport) -> Claim {
    Claim::new(
        "Crash campaign (the VST method of OPTR §5, docs/crashtest.md)",
        format!(
            "{design} keeps its {} promise in every crash image",
            r.promise
        ),
    )
    .check(Check::grade(
        format!("violations in {} torn crash images", r.crash_points),
        r.violations.len() as f64,
        Tolerance::AtMost { max: 0.0 },
    ))
    .check(Check::grade(
        "images not recovered",
        (r.crash_points - r.recovered) as f64,
        Tolerance::AtMost { max: 0.0 },
    ))
    .note(r.violations.first().map_or(String::new(), |v| {
        format!("first: {} — replay: `{}`", v.what, v.replay)
    }))
}

/// A negative control: a design that promises less, judged against more, must be caught.
fn caught_claim(label: &str, r: &crashtest::CampaignReport) -> Claim {
    Claim::new(
        "Crash checker negative control (a checker that never fails proves nothing)",
        format!("{label} judged against {} is caught", r.promise),
    )
    .check(Check::grade(
        format!("violations in {} crash images", r.crash_points),
        r.violations.len() as f64,
        Tolerance::AtLeast { min: 1.0 },
    ))
    .note(r.violations.first().map_or(String::new(), |v| {
        format!("first: {} — replay: `{}`", v.what, v.replay)
    }))
}

#[cfg(test)]
mod claim_tests {
    use super::*;
    use crate::claims::Verdict;

    fn report(violations: usize, recovered: usize) -> crashtest::CampaignReport {
        crashtest::CampaignReport {
            ftl: "x".into(),
            promise: "durable-writes".into(),
            preset: "small".into(),
            workload: "randwrite".into(),
            seed: 1,
            torn: true,
            crash_points: 10,
            recovered,
            lost_to_media: 0,
            errors_for_lost_pages: 0,
            media: None,
            violating_points: violations.min(1),
            violations: (0..violations)
                .map(|i| crashtest::Violation {
                    instant_ns: i as u64,
                    torn: false,
                    lpn: Some(1),
                    what: "lost".into(),
                    replay: "mobius crashtest ...".into(),
                })
                .collect(),
            points_by_kind: Default::default(),
            recovery_flash_reads: Default::default(),
            recovery_sim_ms: Default::default(),
            flash_ops_recorded: 0,
            host_requests: 0,
            wall_s: 0.0,
            speed: Default::default(),
        }
    }

    #[test]
    fn a_violation_fails_the_design_and_passes_the_control() {
        assert_eq!(kept_claim("x", &report(0, 10)).verdict(), Verdict::Pass);
        assert_eq!(kept_claim("x", &report(1, 10)).verdict(), Verdict::Fail);
        assert_eq!(kept_claim("x", &report(0, 9)).verdict(), Verdict::Fail);
        assert_eq!(caught_claim("x", &report(1, 10)).verdict(), Verdict::Pass);
        assert_eq!(caught_claim("x", &report(0, 10)).verdict(), Verdict::Fail);
    }
}
