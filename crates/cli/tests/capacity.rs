//! Every design holds the capacity it exports (issues #16, #19): after a 90 % sequential fill,
//! random single-page writes totalling twice the exported capacity complete on every geometry
//! the crash soak draws from (the small preset; 8 chips of 16 blocks and 32 chips of 12, where
//! open blocks are a large share of the device; one chip; non-power-of-two counts; 16-page
//! blocks). A design whose exported capacity ignores its open blocks or GC reserve fails here
//! with "device full". Another device (4 chips of 8,192 blocks, 4 GB) has a mapping tree
//! larger than a small device's GC reserve, and there the power cut and recovery after the run
//! are part of the check: a design must not run out of space while recovering either. The
//! transactional designs also write 4× their capacity in txmix requests on every soak
//! geometry, since transaction metadata (TxFlash TC's commit records) lives beside the data.
//! The jasmine-sized run is behind `MOBIUS_LONG=1`.

use std::process::Command;

/// Every design this build knows.
fn designs() -> Vec<&'static str> {
    lab::registry::all().iter().map(|d| d.name).collect()
}

/// The designs that promise atomic transactions (they run txmix), and so keep transaction
/// metadata (commit records, atom inodes, logs) live beside the data.
fn transactional() -> Vec<&'static str> {
    lab::registry::all()
        .iter()
        .filter(|d| d.promise == ftl::Promise::AtomicTransactions)
        .map(|d| d.name)
        .collect()
}

fn bench(args: &[&str]) -> Result<serde_json::Value, String> {
    bench_workload("randwrite", args)
}

fn bench_workload(workload: &str, args: &[&str]) -> Result<serde_json::Value, String> {
    let mut args = args.to_vec();
    if !args.contains(&"--recover") {
        args.push("--no-recovery");
    }
    args.retain(|&a| a != "--recover");
    let out = Command::new(env!("CARGO_BIN_EXE_mobius"))
        .arg("bench")
        .args(&args)
        .args(["--workload", workload, "--fill", "0.9", "--json"])
        .output()
        .expect("run mobius");
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    serde_json::from_slice(&out.stdout).map_err(|e| e.to_string())
}

fn writes_twice_its_capacity(design: &str, device: &[&str]) -> Result<(), String> {
    writes_its_capacity_over(design, "randwrite", 2, device)
}

/// `requests_per_page` × the exported capacity in requests of `workload` after a 90 % fill:
/// every request must complete, and the host must write at least twice the capacity.
fn writes_its_capacity_over(
    design: &str,
    workload: &str,
    requests_per_page: u64,
    device: &[&str],
) -> Result<(), String> {
    let mut probe = vec!["--ftl", design, "--requests", "1"];
    probe.extend_from_slice(device);
    let logical = bench(&probe)?["logical_pages"]
        .as_u64()
        .ok_or("no logical_pages")?;
    let requests = (requests_per_page * logical).to_string();
    let mut args = vec!["--ftl", design, "--requests", &requests];
    args.extend_from_slice(device);
    let run = bench_workload(workload, &args)?;
    let written = run["host_pages_written"].as_u64().unwrap_or(0);
    let enough = if workload == "randwrite" {
        written == 2 * logical
    } else {
        written >= 2 * logical
    };
    if !enough {
        return Err(format!(
            "wrote {} of {} pages",
            run["host_pages_written"],
            2 * logical
        ));
    }
    let wa = run["write_amplification"].as_f64().unwrap_or(0.0);
    if wa < 1.0 {
        return Err(format!(
            "write amplification {wa} below 1: programs are not counted"
        ));
    }
    Ok(())
}

fn soak_geometry_devices() -> Vec<Vec<String>> {
    crashtest::soak::SOAK_GEOMETRIES
        .iter()
        .map(|g| device_args(&g.device(), &ftl::DesignOptions::default()))
        .collect()
}

/// The `--preset`, `--set` and `--param` arguments a soak cell's replay command gives for
/// `device` and `options`.
fn device_args(device: &flash::DeviceConfig, options: &ftl::DesignOptions) -> Vec<String> {
    let mut args = vec!["--preset".to_string(), "small".to_string()];
    for set in crashtest::device_overrides(device) {
        args.extend(["--set".to_string(), set]);
    }
    for (k, v) in &options.params {
        args.extend(["--param".to_string(), format!("{k}={v}")]);
    }
    args
}

/// `design` on every soak geometry with its over-provisioning turned down to the lowest it
/// accepts there, through its own knob, as a soak cell that draws low over-provisioning runs
/// it: the device's arguments, and the value.
fn low_over_provisioning_devices(design: &ftl::DesignSpec) -> Vec<(Vec<String>, &'static str)> {
    let none = ftl::DesignOptions::default();
    crashtest::soak::SOAK_GEOMETRIES
        .iter()
        .map(|g| {
            let low = crashtest::soak::lowest_over_provisioning(design, &g.device(), &none, &none)
                .unwrap_or_else(|| {
                    panic!(
                        "{} takes no low over-provisioning on {}",
                        design.name, g.name
                    )
                });
            (device_args(&low.device, &low.options), low.value)
        })
        .collect()
}

fn every_design_on(device: &[&str]) {
    let failures: Vec<String> = designs()
        .into_iter()
        .filter_map(|d| {
            writes_twice_its_capacity(d, device)
                .err()
                .map(|e| format!("{d}: {e}"))
        })
        .collect();
    assert!(failures.is_empty(), "{device:?}:\n{}", failures.join("\n"));
}

/// Every geometry the crash soak draws from (`crashtest::soak::SOAK_GEOMETRIES`): the small
/// preset, a wide one, one chip of long blocks, non-power-of-two counts, 32 chips of 12
/// blocks each, and 16-page blocks. A soak cell that runs out of space fails as "device
/// full", so every design must hold its capacity on each of them.
#[test]
fn every_design_holds_its_exported_capacity_on_every_soak_geometry() {
    for device in soak_geometry_devices() {
        let device: Vec<&str> = device.iter().map(String::as_str).collect();
        every_design_on(&device);
    }
}

/// Transactions keep their metadata live beside the data. TxFlash TC's commit records, each
/// live until every page it covers is overwritten, outgrew its reserve here: "device full"
/// after 4,800–5,200 txmix requests on the wide geometry and 9,000–9,200 on 32 chips, until
/// the oldest records over budget were compacted (docs/txflash.md).
#[test]
fn every_transactional_design_holds_its_capacity_under_transactions_on_every_soak_geometry() {
    let designs = transactional();
    assert!(
        designs.contains(&"txflash-tc") && designs.len() >= 6,
        "{designs:?}"
    );
    let mut failures = Vec::new();
    for device in soak_geometry_devices() {
        let device: Vec<&str> = device.iter().map(String::as_str).collect();
        for &d in &designs {
            if let Err(e) = writes_its_capacity_over(d, "txmix", 4, &device) {
                failures.push(format!("{d} on {device:?}: {e}"));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Over-provisioning is the headroom a design's exported capacity leaves for GC and for what
/// it keeps beside the data; each design has its own default and knob. Turned down to the
/// lowest each accepts (0 for most; `crashtest::soak::LOW_OVER_PROVISIONING`), every design
/// must still write twice its capacity at random on every soak geometry, and every
/// transactional design four times it in txmix requests. A design whose capacity counted on
/// its default headroom fails here with "device full".
#[test]
fn every_design_holds_its_capacity_with_its_over_provisioning_turned_down() {
    let mut failures = Vec::new();
    for design in &lab::registry::all() {
        for (device, op) in low_over_provisioning_devices(design) {
            let device: Vec<&str> = device.iter().map(String::as_str).collect();
            let mut runs = vec![("randwrite", 2)];
            if design.promise == ftl::Promise::AtomicTransactions {
                runs.push(("txmix", 4));
            }
            for (workload, per_page) in runs {
                if let Err(e) = writes_its_capacity_over(design.name, workload, per_page, &device) {
                    failures.push(format!(
                        "{} at {op} on {device:?}, {workload}: {e}",
                        design.name
                    ));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Each design's knob reaches it: turned down, every design exports more pages than with its
/// default. A knob naming a parameter the design ignored, or a device setting it did not read,
/// would leave the capacity test above at the default. The device is the small preset with 256
/// blocks per chip, where over-provisioning and not the designs' floors of hidden blocks per
/// chip sets the capacity (on `small` itself wcache's default 7 % hides no more than its floor).
#[test]
fn turning_over_provisioning_down_exports_more_pages_on_every_design() {
    let none = ftl::DesignOptions::default();
    let mut small = flash::DeviceConfig::preset("small").expect("small preset");
    small.geometry.blocks_per_chip = 256;
    let logical = |name: &str, device: &[String]| -> u64 {
        let mut args = vec!["--ftl", name, "--requests", "1"];
        args.extend(device.iter().map(String::as_str));
        bench(&args).expect("bench runs")["logical_pages"]
            .as_u64()
            .expect("logical_pages")
    };
    for design in &lab::registry::all() {
        let low = crashtest::soak::lowest_over_provisioning(design, &small, &none, &none)
            .expect("a low over-provisioning");
        if design.name == "fast" {
            // FAST refuses 0, 1 % and 2 % here (fewer than its four hidden blocks on `small`);
            // the search goes on to the first value it takes.
            let small = flash::DeviceConfig::preset("small").expect("small preset");
            let on_small = crashtest::soak::lowest_over_provisioning(design, &small, &none, &none);
            assert_eq!(on_small.map(|l| l.value), Some("0.05"));
        }
        let given = ftl::DesignOptions::default().with("op", "0.3");
        if design.over_provisioning == ftl::OverProvisioningKnob::Param("op") {
            assert!(
                crashtest::soak::lowest_over_provisioning(design, &small, &given, &given).is_none(),
                "{}: a given over-provisioning was turned down",
                design.name
            );
        }
        let default = logical(design.name, &device_args(&small, &none));
        let turned_down = logical(design.name, &device_args(&low.device, &low.options));
        assert!(
            turned_down > default,
            "{}: {turned_down} pages at over-provisioning {}, {default} by default",
            design.name,
            low.value
        );
    }
}

/// Found by issue #19's jasmine run, reproduced here at 4 GB: DFTL's recovery wrote back every
/// dirty translation page before running GC and found no free block; Atomic-Write and LightTx
/// wrote a root (and with it a tree page per page moved) for every GC victim, reached write
/// amplification 200 on 1 GB and ran out of space on 4 GB.
#[test]
fn every_design_holds_its_exported_capacity_and_recovers_with_a_large_mapping_tree() {
    every_design_on(&[
        "--preset",
        "small",
        "--set",
        "geometry.blocks_per_chip=8192",
        "--recover",
    ]);
}

#[test]
fn every_design_holds_its_exported_capacity_on_jasmine() {
    if std::env::var_os("MOBIUS_LONG").is_none() {
        eprintln!("jasmine capacity run skipped: set MOBIUS_LONG=1");
        return;
    }
    every_design_on(&["--preset", "jasmine", "--recover"]);
}

#[test]
fn the_capacity_check_fails_on_a_design_that_cannot_hold_it() {
    // Negative control: the write-cached FTL with no GC reserve and no over-provisioning
    // exports every block; writing twice that must fail with "device full", and the check
    // must report it rather than pass.
    let err = writes_twice_its_capacity(
        "wcache",
        &[
            "--preset",
            "small",
            "--param",
            "op=0",
            "--param",
            "gc_free_blocks=0",
        ],
    );
    assert!(
        err.is_err(),
        "an over-exported device passed the capacity check"
    );
}

#[test]
fn bench_reports_exported_capacity_and_peak_memory() {
    let j = bench(&["--ftl", "dftl", "--requests", "100"]).unwrap();
    let logical = j["logical_pages"].as_u64().unwrap();
    let physical = j["physical_pages"].as_u64().unwrap();
    assert!(logical > 0 && logical < physical, "{logical} of {physical}");
    assert!(
        j["peak_rss_bytes"].as_u64().unwrap() > 1 << 20,
        "{}",
        j["peak_rss_bytes"]
    );
}
