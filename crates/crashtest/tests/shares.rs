//! A campaign split into shares of its crash points (one per worker) merges back into exactly
//! the report of the whole campaign, violations included and in the same order.

use crashtest::prefix::CutModel;
use crashtest::{merge_parts, record, run_recorded, run_recorded_part, CampaignConfig};
use flash::DeviceConfig;
use ftl::{DesignOptions, Promise};
use workload::WorkloadSpec;

fn config(options: DesignOptions, promise: Promise) -> CampaignConfig {
    let design = dftl::spec();
    let mut workload = WorkloadSpec::named(design.default_workload).unwrap();
    workload.requests = 600;
    workload.fill = 0.5;
    CampaignConfig {
        promise,
        design,
        options,
        device: DeviceConfig::preset("small").unwrap(),
        workload,
        seed: 9,
        crash_points: 300,
        torn: true,
        exhaustive: false,
        threads: 2,
        tag_only: true,
    }
}

fn without_wall(mut v: serde_json::Value) -> serde_json::Value {
    let o = v.as_object_mut().unwrap();
    o.remove("wall_s");
    o.remove("crash_points_per_s");
    o.remove("speed");
    v
}

#[test]
fn shares_merge_into_the_whole_campaign() {
    // A passing campaign, and one with violations (DFTL without its OOB scan judged as
    // durable-writes), so that the order of violations is compared too.
    for cfg in [
        config(DesignOptions::default(), Promise::DurableWrites),
        config(
            DesignOptions::default().with("oob_scan", "off"),
            Promise::DurableWrites,
        ),
    ] {
        let rec = record(&cfg).unwrap();
        let whole = run_recorded(&cfg, &rec, std::time::Instant::now(), &|_, _| {});
        let mut parts: Vec<_> = (0..3)
            .map(|k| run_recorded_part(&cfg, &rec, CutModel::Instant, (k, 3), &|_, _| {}))
            .collect();
        parts.reverse(); // any order
        let merged = merge_parts(&cfg, parts, 0.0).unwrap();
        assert_eq!(
            without_wall(whole.to_json()),
            without_wall(merged.to_json()),
        );
        assert_eq!(merged.crash_points, 300);
        if cfg.options.params.contains_key("oob_scan") {
            assert!(
                !merged.violations.is_empty(),
                "the control must have violations to order"
            );
        }
    }
    let cfg = config(DesignOptions::default(), Promise::DurableWrites);
    let rec = record(&cfg).unwrap();
    let one = run_recorded_part(&cfg, &rec, CutModel::Instant, (0, 2), &|_, _| {});
    assert!(
        merge_parts(&cfg, vec![one], 0.0).is_err(),
        "a missing share is refused"
    );
}
