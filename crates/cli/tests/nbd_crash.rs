//! `mobius crashtest --workload nbd`: power cuts under the requests NBD clients send an export
//! (docs/nbd.md, "Power cuts under NBD requests"). The campaign's checks and the designs' own
//! regression guards are in crates/nbd/src/crash/tests.rs; here the command line: the soak, the
//! negative controls, a failing cell's printed replay, and refused flags.

#[path = "common/soak_runs.rs"]
mod soak_runs;
use soak_runs::{mobius, Soak};

/// A soak over two designs (atomic and plain exports drawn per seed), with a second life per
/// cell, passes.
#[test]
fn an_nbd_soak_passes_on_sound_exports() {
    let json = Soak {
        designs: "mobius,txflash-scc",
        workload: "nbd",
        cut_model: None,
        seeds: 2,
        seed: Some(5),
        second_lives: 1,
    }
    .passes();
    assert_eq!(json["cells"], 4, "{json}");
    // Each cell: 20 cuts of life one and 5 of its second life.
    assert_eq!(json["crash_points"], 4 * (20 + 5), "{json}");
}

/// Every export cut as a killed `mobius serve` leaves its image (`--cut-model prefix`), on a
/// fresh seed with a second life per cell: no violation.
#[test]
fn an_nbd_soak_of_killed_servers_passes_on_every_design() {
    let json = Soak {
        designs: "all",
        workload: "nbd",
        cut_model: Some("prefix"),
        seeds: 1,
        seed: None,
        second_lives: 1,
    }
    .passes();
    assert!(
        json["crash_points"].as_u64().expect("points") >= 100,
        "{json}"
    );
}

/// Both controls are caught, and a failing cell's printed replay command, run as it is, finds
/// the same first violation.
#[test]
fn the_controls_are_caught_and_a_failing_cell_replays() {
    let (ok, out, err) = mobius(&[
        "crashtest",
        "--workload",
        "nbd",
        "--controls",
        "--ftl",
        "all",
        "--seeds",
        "1",
        "--seed",
        "11",
        "--crash-points",
        "30",
        "--torn",
    ]);
    assert!(ok, "the controls were not caught: {out}{err}");
    assert_eq!(out.matches("caught on 1 of 1 seeds").count(), 4, "{out}");
    assert!(
        out.contains("inject_bug=stale_validity, 2 second lives"),
        "{out}"
    );
    let line = err
        .lines()
        .find(|l| {
            l.trim_start()
                .starts_with("replay: mobius crashtest --ftl dftl")
        })
        .unwrap_or_else(|| panic!("no replay line for the DFTL control: {err}"));
    let first = err
        .lines()
        .skip_while(|l| !l.starts_with("dftl"))
        .find_map(|l| l.trim_start().strip_prefix("first: "))
        .expect("the DFTL control's first violation");
    let replay: Vec<&str> = line.trim_start()["replay: mobius ".len()..]
        .split_whitespace()
        .collect();
    assert!(replay.contains(&"--replay-instant"), "{line}");
    let (ok, _, again) = mobius(&replay);
    assert!(!ok, "the replay passed: {line}");
    let what = first.split(" (").next().expect("a message");
    assert!(
        again.contains(what),
        "replay found another violation: {again}"
    );
}

#[test]
fn nbd_campaigns_refuse_flags_they_would_not_use() {
    let refused = [
        (
            vec!["--ftl", "dftl", "--workload", "nbd", "--atomic-requests"],
            "no static transactions",
        ),
        (
            vec!["--ftl", "dftl", "--workload", "nbd", "--mode", "batch"],
            "--mode",
        ),
        (
            vec![
                "--ftl",
                "dftl",
                "--workload",
                "nbd",
                "--seeds",
                "2",
                "--fill",
                "0.5",
            ],
            "--fill",
        ),
        (
            vec!["--ftl", "dftl", "--workload", "nbd", "--qd", "4"],
            "--qd",
        ),
        (
            vec!["--ftl", "dftl", "--workload", "nbd", "--first-cut", "5"],
            "--first-cut",
        ),
        (
            vec![
                "--ftl",
                "dftl",
                "--workload",
                "nbd",
                "--seeds",
                "2",
                "--first-cut",
                "5",
            ],
            "--first-cut",
        ),
        (
            vec!["--ftl", "mobius", "--atomic-requests"],
            "--workload nbd",
        ),
        (
            vec!["--ftl", "dftl", "--workload", "nbd", "--wear", "1"],
            "give --media PART",
        ),
        (
            vec![
                "--ftl",
                "dftl",
                "--workload",
                "nbd",
                "--controls",
                "--promise",
                "ordered",
            ],
            "--controls",
        ),
    ];
    for (args, says) in refused {
        let mut all = vec!["crashtest"];
        all.extend(&args);
        let (ok, _, err) = mobius(&all);
        assert!(!ok && err.contains(says), "{args:?}: {err}");
    }
}

/// Issue #69: an NBD campaign takes the block campaign's media flags, prints what the media
/// did, and its replay command carries them.
#[test]
fn an_nbd_campaign_runs_on_worn_media() {
    let args = [
        "crashtest",
        "--ftl",
        "dftl",
        "--workload",
        "nbd",
        "--media",
        "mlc",
        "--wear",
        "1",
        "--power-off-days",
        "300",
        "--requests",
        "100",
        "--crash-points",
        "12",
        "--torn",
    ];
    let (ok, out, err) = mobius(&args);
    assert!(ok, "{out}\n{err}");
    assert!(
        out.contains("media             mlc at 1 x rated wear"),
        "{out}"
    );
    assert!(out.contains("lost to media"), "{out}");
    assert!(out.contains("violations        0"), "{out}");
}
