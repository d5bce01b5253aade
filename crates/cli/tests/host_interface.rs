//! The host interface is applied by every tool through `DesignSpec::build` (issue #16): a design
//! run by `mobius bench` is capped by the preset's link, whatever the design.

use std::process::Command;

fn bench(ftl: &str, extra: &[&str]) -> serde_json::Value {
    let mut args = vec![
        "bench",
        "--ftl",
        ftl,
        "--preset",
        "small",
        "--workload",
        "seqwrite",
        "--requests",
        "300",
        "--no-recovery",
        "--json",
    ];
    args.extend_from_slice(extra);
    let out = Command::new(env!("CARGO_BIN_EXE_mobius"))
        .args(&args)
        .output()
        .expect("run mobius");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("json")
}

#[test]
fn every_design_is_capped_by_the_link_of_its_device() {
    for ftl in ["dftl", "mobius", "wcache", "txflash-bpcc"] {
        let ideal = bench(ftl, &[]);
        let linked = bench(ftl, &["--set", "host.link_mb_s=20"]);
        let (free, capped) = (
            ideal["bandwidth_mb_s"].as_f64().unwrap(),
            linked["bandwidth_mb_s"].as_f64().unwrap(),
        );
        assert!(free > 25.0, "{ftl}: {free} MB/s without a link");
        assert!(capped <= 20.0, "{ftl}: {capped} MB/s over a 20 MB/s link");
        assert!(
            capped > 15.0,
            "{ftl}: {capped} MB/s: the link should be the bottleneck"
        );
        // One command per request; no host model at all on the ideal `small` preset.
        assert_eq!(linked["host_commands"].as_f64(), Some(301.0), "{ftl}");
        assert!(ideal.get("host_commands").is_none(), "{ftl}");
    }
}

#[test]
fn an_unknown_host_field_is_a_clear_error() {
    let out = Command::new(env!("CARGO_BIN_EXE_mobius"))
        .args(["info", "--preset", "jasmine", "--set", "host.speed=3"])
        .output()
        .expect("run mobius");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("host.speed"), "{err}");
}

/// `bench --json`'s per-structure memory reaches every design through the host-interface
/// wrapper: the flash arrays and the design's own block space are both reported, and the total
/// is their sum.
#[test]
fn every_design_reports_its_memory_per_structure() {
    for spec in lab::registry::all() {
        let ftl = spec.name;
        let out = bench(ftl, &["--set", "host.link_mb_s=20"]);
        let memory = out["memory"].as_object().expect("memory map");
        for key in ["flash.page_state", "flash.oob_records", "space.page_owners"] {
            let bytes = memory.get(key).and_then(|v| v.as_u64());
            assert!(bytes.is_some_and(|b| b > 0), "{ftl}: {key} = {bytes:?}");
        }
        let sum: u64 = memory.values().map(|v| v.as_u64().unwrap()).sum();
        assert_eq!(out["memory_allocated_bytes"].as_u64(), Some(sum), "{ftl}");
    }
}

/// `bench --peer` plays the same requests on the in-process peer and reports the ratio.
#[test]
fn bench_peer_reports_the_ratio_to_the_peer() {
    let out = bench("dftl", &["--peer"]);
    let peer = out["peer_page_programs_per_s"].as_f64().unwrap();
    let ratio = out["speed_vs_peer"].as_f64().unwrap();
    let sim = out["sim_page_programs_per_s"].as_f64().unwrap();
    assert!(peer > 0.0 && ratio > 0.0);
    assert!((ratio - sim / peer).abs() <= 1e-9 * ratio.max(1.0), "{out}");
    // seqwrite from empty: the peer programs each host page once.
    assert_eq!(out["peer_write_amplification"].as_f64(), Some(1.0));
    let txmix = Command::new(env!("CARGO_BIN_EXE_mobius"))
        .args([
            "bench",
            "--ftl",
            "mobius",
            "--preset",
            "small",
            "--workload",
            "txmix",
        ])
        .args(["--requests", "100", "--no-recovery", "--peer"])
        .output()
        .unwrap();
    assert!(!txmix.status.success());
    assert!(String::from_utf8_lossy(&txmix.stderr).contains("plain workloads"));
}
