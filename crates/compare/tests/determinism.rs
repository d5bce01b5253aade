//! Simulated-time results are deterministic for a seed: two runs give identical results.json.

use compare::{run, write_report, Context, Scale};

#[test]
fn same_seed_same_results_json() {
    let designs = vec![dftl::spec()];
    let progress = |_: &str, _: u64, _: u64| {};
    let only = vec!["micro".to_string(), "campaigns".to_string()];
    let mut outputs = Vec::new();
    for _ in 0..2 {
        let ctx = Context {
            designs: designs.clone(),
            scale: Scale::Quick,
            seed: 3,
            progress: &progress,
            run_logs: None,
            cores: compare::Cores::serial(),
            unknowns: Default::default(),
        };
        let results = run(&ctx, &only).unwrap();
        let dir = tempfile::tempdir().unwrap();
        write_report(dir.path(), "# test", &results).unwrap();
        let mut json: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(dir.path().join("results.json")).unwrap(),
        )
        .unwrap();
        // Wall-clock figures are the only ones allowed to differ.
        if let Some(data) = json.pointer_mut("/campaigns/data") {
            for c in data.as_object_mut().unwrap().values_mut() {
                let o = c.as_object_mut().unwrap();
                o.remove("wall_s");
                o.remove("crash_points_per_s");
                o.remove("speed");
            }
        }
        // Each experiment's own wall time (`ran.wall_s`) too.
        for experiment in json.as_object_mut().unwrap().values_mut() {
            if let Some(ran) = experiment
                .pointer_mut("/ran")
                .and_then(|r| r.as_object_mut())
            {
                ran.remove("wall_s");
            }
        }
        assert!(dir.path().join("report.md").exists());
        assert!(dir.path().join("fig7_latency_random.svg").exists());
        outputs.push(json);
    }
    assert_eq!(outputs[0], outputs[1]);
    let dftl = outputs[0]
        .pointer("/micro/data/random~1DFTL (single)/latency_ms")
        .unwrap();
    assert!(
        dftl.as_array()
            .unwrap()
            .iter()
            .all(|v| v.as_f64().unwrap() > 0.0),
        "measured latencies: {dftl}"
    );
    assert_eq!(
        outputs[0]
            .pointer("/campaigns/data/dftl/violations")
            .unwrap(),
        0
    );
    // The negative control is caught.
    assert!(
        outputs[0]
            .pointer("/campaigns/data/control~1dftl (oob_scan=off)/violations")
            .and_then(|v| v.as_u64())
            .unwrap()
            > 0
    );
}
