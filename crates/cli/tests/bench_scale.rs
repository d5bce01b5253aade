//! `mobius bench-scale`: one `bench` process per size, a table of programs per wall second and
//! resident bytes per page, and the slowdown from the smallest size to the largest.

use std::process::Command;

#[test]
fn bench_scale_measures_every_size_in_its_own_process() {
    let out = Command::new(env!("CARGO_BIN_EXE_mobius"))
        .args([
            "bench-scale",
            "--preset",
            "small",
            "--sizes",
            "16M,64M",
            "--requests",
            "5000",
            "--json",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let points = v["points"].as_array().unwrap();
    assert_eq!(points.len(), 2);
    assert_eq!(points[0]["physical_pages"], 4096);
    assert_eq!(points[1]["physical_pages"], 16384);
    for p in points {
        assert!(p["programs_per_wall_s"].as_f64().unwrap() > 0.0);
        assert!(p["peak_rss_bytes"].as_u64().unwrap() > 0);
        assert!(p["flash_programs"].as_u64().unwrap() >= 5000);
    }
    assert!(v["slowdown_smallest_to_largest"].as_f64().unwrap() > 0.0);
}

#[test]
fn bench_scale_refuses_a_size_too_small_for_the_geometry() {
    let out = Command::new(env!("CARGO_BIN_EXE_mobius"))
        .args(["bench-scale", "--sizes", "1M"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("too small"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
