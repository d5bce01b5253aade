//! Experiment 6 — crash campaign summary: the proof behind every number of the report.
//!
//! For every design in the build, a seeded campaign (`mobius crashtest`) on the `small` preset with
//! torn operations, judged against the design's own promise; the table reports instants tried,
//! images recovered, violations and recovery cost.

use crate::report::{fmt, ExperimentResult, Table};
use crate::Context;
use crashtest::{run_campaign, CampaignConfig};
use ftl::DesignOptions;

pub fn run(ctx: &Context) -> ExperimentResult {
    let points = if ctx.scale == crate::Scale::Quick {
        500
    } else {
        10_000
    };
    let mut rows = Vec::new();
    let mut data = serde_json::Map::new();
    let mut skipped = Vec::new();
    let total = ctx.designs.len() as u64;
    for (i, d) in ctx.designs.iter().enumerate() {
        let mut workload = match workload::WorkloadSpec::named(d.default_workload) {
            Ok(w) => w,
            Err(e) => {
                skipped.push(format!("{}: {e}", d.name));
                continue;
            }
        };
        workload.requests = 3000;
        workload.fill = 0.8;
        let cfg = CampaignConfig {
            design: d.clone(),
            options: DesignOptions::default(),
            device: flash::DeviceConfig::preset("small").expect("small preset"),
            workload,
            seed: ctx.seed,
            crash_points: points,
            torn: true,
            exhaustive: false,
            promise: d.promise,
            threads: 2,
            tag_only: true,
        };
        match run_campaign(&cfg, &|_, _| {}) {
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
                data.insert(d.name.to_string(), r.to_json());
            }
            Err(e) => skipped.push(format!("{}: {e}", d.name)),
        }
        (ctx.progress)("campaigns", i as u64 + 1, total);
    }
    ExperimentResult {
        id: "campaigns",
        title: "6. Crash campaign summary".into(),
        description: format!("Every design on the `small` preset, its default workload (3,000 requests after an 80 % fill), {points} crash instants with torn operations, judged against its own promise by `mobius crashtest` (see docs/crashtest.md)."),
        tables: vec![Table {
            caption: "Crash campaigns (seeded; reproduce with `mobius crashtest --ftl NAME --torn --crash-points N --seed S`)".into(),
            header: ["design", "promise", "crash points", "recovered", "violations", "recovery reads (mean)", "recovery ms (mean)"].map(String::from).to_vec(),
            rows,
        }],
        figures: Vec::new(),
        claims: Vec::new(),
        data: serde_json::Value::Object(data),
        skipped,
    }
}
