//! The crash soak in CI (issue #22): every design against its own promise on fresh random seeds
//! each run (printed, so a failure replays exactly), each seed choosing its workload shape,
//! queue depth, fill and geometry, with two second lives per cell (a cut, recovery, more work,
//! a second cut), and under the image-prefix cut of a killed process; then the negative
//! controls, which must be caught. The long
//! soak (`mobius crashtest --ftl all --seeds 200 --crash-points 2000 --torn`) is documented in
//! docs/crashtest.md.

#[path = "common/soak_runs.rs"]
mod soak_runs;
use soak_runs::mobius;

#[test]
fn every_design_keeps_its_promise_on_fresh_seeds() {
    let (ok, stdout, stderr) = mobius(&[
        "crashtest",
        "--ftl",
        "all",
        "--seeds",
        "6",
        "--crash-points",
        "1000",
        "--torn",
        "--second-lives",
        "2",
        "--json",
    ]);
    let json = clean_soak(ok, &stdout, &stderr);
    assert_eq!(
        json["seeds"],
        6 * json["designs"].as_object().expect("designs").len()
    );
    assert!(json["crash_points"].as_u64().expect("points") > 1000);
}

/// Every design cut as a killed process leaves its image (`--cut-model prefix`: a prefix of its
/// image writes in issue order, the next one torn), second lives included, on fresh seeds.
#[test]
fn every_design_keeps_its_promise_when_killed_on_fresh_seeds() {
    let (ok, stdout, stderr) = mobius(&[
        "crashtest",
        "--ftl",
        "all",
        "--cut-model",
        "prefix",
        "--seeds",
        "2",
        "--crash-points",
        "600",
        "--torn",
        "--second-lives",
        "1",
        "--json",
    ]);
    let json = clean_soak(ok, &stdout, &stderr);
    assert_eq!(json["cut_model"], "prefix");
    assert_eq!(
        json["seeds"],
        2 * json["designs"].as_object().expect("designs").len()
    );
    assert!(json["crash_points"].as_u64().expect("points") > 1000);
}

/// The JSON of a soak that must have found nothing (its seeds and replays are printed first).
fn clean_soak(ok: bool, stdout: &str, stderr: &str) -> serde_json::Value {
    eprintln!("{stderr}");
    let json: serde_json::Value = serde_json::from_str(stdout).expect("soak JSON");
    assert!(
        ok,
        "soak failed (seeds and replay commands above): {}",
        json["failures"]
    );
    assert_eq!(json["violations"], 0);
    json
}

#[test]
fn the_negative_controls_are_caught_on_fresh_seeds() {
    let (ok, stdout, stderr) = mobius(&[
        "crashtest",
        "--ftl",
        "all",
        "--controls",
        "--seeds",
        "2",
        "--crash-points",
        "300",
        "--torn",
    ]);
    eprintln!("{stdout}{stderr}");
    assert!(
        ok,
        "a negative control was not caught: a soak that cannot fail proves nothing"
    );
    assert_eq!(stdout.matches("caught on").count(), 4);
    // The control only work after recovery exposes runs with second lives.
    assert!(stdout.contains("stale_validity") && stdout.contains("with 4 second lives"));
}

#[test]
fn a_soak_replays_from_its_seed_whatever_the_job_count() {
    let run = |jobs: &str| {
        let (_, stdout, _) = mobius(&[
            "crashtest",
            "--ftl",
            "dftl",
            "--seeds",
            "3",
            "--seed",
            "77",
            "--crash-points",
            "100",
            "--torn",
            "--jobs",
            jobs,
            "--json",
        ]);
        let mut v: serde_json::Value = serde_json::from_str(&stdout).expect("soak JSON");
        // Wall-clock figures: the time and the speed (points per second, time per phase).
        let o = v.as_object_mut().expect("object");
        o.remove("wall_s");
        o.remove("speed");
        v
    };
    assert_eq!(run("1"), run("2"));
}

#[test]
fn bad_soak_input_is_a_clear_error() {
    let (ok, _, stderr) = mobius(&["crashtest", "--ftl", "nosuch", "--seeds", "2"]);
    assert!(!ok && stderr.contains("unknown design"), "{stderr}");
    let (ok, _, stderr) = mobius(&["crashtest", "--ftl", "dftl,nosuch", "--seeds", "1"]);
    assert!(
        !ok && stderr.contains("unknown design 'nosuch'"),
        "{stderr}"
    );
}

/// A soak chooses each seed's device and workload: a device or workload option given without
/// `--fixed`, or an option of single campaigns, is refused by name instead of ignored (a soak
/// asked for `--preset txflash` ran on its own 16 MB geometries and said nothing).
#[test]
fn a_soak_refuses_the_options_it_would_ignore() {
    for (extra, named) in [
        (&["--preset", "txflash"][..], "--preset"),
        (&["--set", "geometry.channels=8"][..], "--set"),
        (
            &["--requests", "200", "--fill", "0.5"][..],
            "--requests, --fill",
        ),
        (&["--workload", "randwrite"][..], "--workload"),
    ] {
        for ftl in ["dftl", "all"] {
            let args = [&["crashtest", "--ftl", ftl, "--seeds", "1"][..], extra].concat();
            let (ok, _, stderr) = mobius(&args);
            assert!(
                !ok && stderr.contains(named) && stderr.contains("--fixed"),
                "{args:?}: {stderr}"
            );
        }
    }
    for flag in [&["--exhaustive"][..], &["--full-data"], &["--threads", "4"]] {
        let (ok, _, stderr) = mobius(&[&["crashtest", "--ftl", "all"][..], flag].concat());
        let flag = flag[0];
        assert!(
            !ok && stderr.contains(flag) && stderr.contains("single campaign"),
            "{flag}: {stderr}"
        );
    }
    // With --fixed the soak runs on what was given.
    let (ok, stdout, stderr) = mobius(&[
        "crashtest",
        "--ftl",
        "dftl",
        "--seeds",
        "1",
        "--fixed",
        "--requests",
        "200",
        "--fill",
        "0.5",
        "--crash-points",
        "20",
        "--json",
    ]);
    let json = clean_soak(ok, &stdout, &stderr);
    assert_eq!(json["seeds"], 1);
}

/// A fixed soak of several designs runs each on its own default workload: it used to give every
/// design the first one's, so `mobius,dftl` ran DFTL on Möbius's transactions, which it cannot
/// serve, and failed every DFTL cell.
#[test]
fn a_fixed_soak_runs_each_design_on_its_own_workload() {
    let (ok, stdout, stderr) = mobius(&[
        "crashtest",
        "--ftl",
        "mobius,dftl",
        "--seeds",
        "1",
        "--fixed",
        "--crash-points",
        "20",
        "--json",
    ]);
    let json = clean_soak(ok, &stdout, &stderr);
    assert_eq!(json["designs"]["dftl"]["seeds"], 1);
    assert_eq!(json["designs"]["mobius"]["seeds"], 1);
    assert_eq!(json["failing_seeds"].as_array().map(Vec::len), Some(0));
}

/// Möbius with its ALA striped over four chips (the default on devices with room for it, e.g.
/// `jasmine`; `small` keeps one) on fresh seeds, with second lives: inodes programmed in parallel
/// must leave every acknowledged transaction recoverable, through a cut during recovery too.
#[test]
fn mobius_with_a_striped_ala_keeps_its_promise_on_fresh_seeds() {
    let (ok, stdout, stderr) = mobius(&[
        "crashtest",
        "--ftl",
        "mobius",
        "--param",
        "ala_stripe=4",
        "--seeds",
        "6",
        "--crash-points",
        "1000",
        "--torn",
        "--second-lives",
        "4",
        "--json",
    ]);
    clean_soak(ok, &stdout, &stderr);
}

/// `--ftl a,b` soaks those designs and no other.
#[test]
fn a_design_list_soaks_those_designs() {
    let (ok, stdout, stderr) = mobius(&[
        "crashtest",
        "--ftl",
        "dftl,wcache",
        "--seed",
        "11",
        "--crash-points",
        "20",
        "--json",
    ]);
    assert!(ok, "{stderr}");
    let json: serde_json::Value = serde_json::from_str(&stdout).expect("soak JSON");
    let names: Vec<&str> = json["designs"]
        .as_object()
        .expect("per-design results")
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(names, ["dftl", "wcache"]);
}

/// `--shape` draws only the shapes it names, from the designs that support one of them (the
/// `interleaved` shape needs dynamic transactions); an unknown shape, a shape no design given
/// supports, and `--shape` with `--fixed` are clear errors.
#[test]
fn a_soak_draws_only_the_shapes_named() {
    let (ok, stdout, stderr) = mobius(&[
        "crashtest",
        "--ftl",
        "all",
        "--shape",
        "interleaved",
        "--seeds",
        "1",
        "--crash-points",
        "10",
    ]);
    assert!(ok, "{stdout}{stderr}");
    let out = format!("{stdout}{stderr}");
    let cells: Vec<&str> = out.lines().filter(|l| l.contains(" seed ")).collect();
    let mut designs: Vec<&str> = cells
        .iter()
        .map(|l| l.split_whitespace().next().unwrap())
        .collect();
    designs.sort();
    assert_eq!(
        designs,
        [
            "atomic-write",
            "lighttx",
            "mobius",
            "txflash-bpcc",
            "txflash-scc",
            "txflash-tc"
        ],
        "{stdout}"
    );
    assert!(
        cells.iter().all(|l| l.contains(" interleaved ")),
        "{stdout}"
    );
    for (args, says) in [
        (
            &["--ftl", "dftl", "--shape", "nosuch"][..],
            "unknown shape 'nosuch'",
        ),
        (
            &["--ftl", "dftl,wcache", "--shape", "interleaved"],
            "no design of dftl, wcache supports",
        ),
        (&["--ftl", "dftl", "--shape", "txmix", "--fixed"], "--shape"),
    ] {
        let (ok, _, stderr) = mobius(&[&["crashtest", "--seeds", "1"][..], args].concat());
        assert!(!ok && stderr.contains(says), "{args:?}: {stderr}");
    }
}

/// `--shape`'s help names the shapes by hand: it must name exactly `Shape::ALL`.
#[test]
fn the_shape_help_names_every_shape_a_soak_draws() {
    let (ok, stdout, _) = mobius(&["crashtest", "--help"]);
    assert!(ok);
    let from = stdout.find("--shape <SHAPE>").expect("--shape in the help");
    let help = &stdout[from..];
    let help = &help[..help[2..].find("\n      --").map_or(help.len(), |e| e + 2)];
    let named: Vec<&str> = help
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
        .filter(|w| crashtest::soak::Shape::named(w).is_some())
        .collect();
    let all: Vec<&str> = crashtest::soak::Shape::ALL
        .iter()
        .map(|s| s.name())
        .collect();
    let mut sorted = named.clone();
    sorted.sort();
    sorted.dedup();
    let mut expected = all.clone();
    expected.sort();
    assert_eq!(sorted, expected, "{help}");
}

/// `--bench` runs each campaign of both builds, prints their rates and ratio, and compares
/// their verdicts: a build that judges a campaign differently is an error, not a figure.
#[test]
fn the_bench_compares_two_builds_and_refuses_differing_verdicts() {
    let me = env!("CARGO_BIN_EXE_mobius");
    let bench = |vs: &str| {
        mobius(&[
            "crashtest",
            "--bench",
            "--ftl",
            "dftl",
            "--crash-points",
            "30",
            "--seeds",
            "1",
            "--vs",
            vs,
            "--json",
        ])
    };
    let (ok, stdout, stderr) = bench(me);
    assert!(ok, "{stderr}");
    let v: serde_json::Value = serde_json::from_str(&stdout).expect("bench JSON");
    let row = &v["designs"][0];
    assert_eq!(
        (row["design"].as_str(), row["points"].as_u64()),
        (Some("dftl"), Some(30))
    );
    for key in ["wall_points_per_s", "cpu_points_per_s", "wall_ratio"] {
        assert!(row[key].as_f64().is_some_and(|x| x > 0.0), "{key}: {row}");
    }
    // A "build" that reports a violation in the same campaign.
    let dir = tempfile::tempdir().expect("temp dir");
    let other = dir.path().join("mobius-other");
    std::fs::write(
        &other,
        "#!/bin/sh\necho '{\"crash_points\":30,\"recovered\":30,\"violating_points\":1,\"violations\":1}'\n",
    )
    .expect("script");
    std::process::Command::new("chmod")
        .arg("+x")
        .arg(&other)
        .status()
        .expect("chmod");
    let (ok, _, stderr) = bench(other.to_str().expect("path"));
    assert!(!ok && stderr.contains("judged"), "{stderr}");
}
