//! `mobius sql-bench`, `mobius sql` and `mobius crashtest --workload sqlite-*` from the command
//! line (issue #15): JSON keys, a database that outlives the process (and a kill -9), bad input.

use std::io::Write;
use std::process::{Command, Stdio};

#[path = "common/soak_runs.rs"]
mod soak_runs;
use soak_runs::{mobius, Soak};

#[test]
fn sql_bench_reports_the_issue_keys() {
    for (ftl, mode) in [
        ("mobius", "batch"),
        ("dftl", "journal"),
        ("optr", "ordered"),
    ] {
        let (ok, out, err) = mobius(&[
            "sql-bench",
            "--ftl",
            ftl,
            "--mode",
            mode,
            "--workload",
            "tpcb",
            "--transactions",
            "50",
            "--accounts",
            "500",
            "--json",
        ]);
        assert!(ok, "{ftl} {mode}: {err}");
        let j: serde_json::Value = serde_json::from_str(&out).unwrap();
        for key in [
            "ftl",
            "mode",
            "workload",
            "transactions",
            "tps_sim",
            "host_pages_written_per_tx",
            "flash_programs_per_tx",
            "flushes_per_tx",
            "journal_fallbacks",
            "write_amplification",
            "sim_seconds",
            "wall_seconds",
        ] {
            assert!(j.get(key).is_some(), "{ftl} {mode}: no {key} in {out}");
        }
        assert_eq!(j["transactions"], 50);
        assert!(j["tps_sim"].as_f64().unwrap() > 0.0);
    }
}

#[test]
fn sql_bench_records_its_measured_run_as_an_engine_trace() {
    let dir = tempfile::tempdir().unwrap();
    for (ftl, mode, atomic) in [("mobius", "batch", true), ("dftl", "journal", false)] {
        let path = dir.path().join(format!("{mode}.trace"));
        let (ok, _, err) = mobius(&[
            "sql-bench",
            "--ftl",
            ftl,
            "--mode",
            mode,
            "--workload",
            "tpcb",
            "--transactions",
            "40",
            "--accounts",
            "500",
            "--trace",
            path.to_str().unwrap(),
        ]);
        assert!(ok, "{ftl} {mode}: {err}");
        let bytes = std::fs::read(&path).unwrap();
        let t = lab::driver::durability::EngineTrace::read(mode, &bytes, 4096).unwrap();
        assert_eq!((t.engine_transactions, t.clients), (40, 1), "{mode}");
        assert_eq!(t.atomic_requests, atomic, "{mode}");
        let flushes = t
            .requests
            .iter()
            .filter(|r| r.op == trace::Op::Flush)
            .count();
        let fua = t.requests.iter().filter(|r| r.fua).count();
        if atomic {
            // Each tpcb commit is one SWRITE: one durability group, ending in FUA, no flush.
            assert_eq!((fua, flushes, t.grouped.txns.len()), (40, 0, 40), "{mode}");
        } else {
            // The rollback journal flushes several times per commit, never with FUA.
            assert!(fua == 0 && flushes >= 3 * 40, "{mode}: {flushes} flushes");
        }
    }
}

#[test]
fn bad_sql_input_is_a_clear_error() {
    let cases: [(&[&str], &str); 4] = [
        (
            &["sql-bench", "--ftl", "dftl", "--mode", "batch"],
            "does not offer it",
        ),
        (
            &["sql-bench", "--ftl", "mobius", "--mode", "fast"],
            "unknown mode",
        ),
        (
            &["sql-bench", "--ftl", "mobius", "--workload", "tpcx"],
            "unknown workload",
        ),
        (
            &["sql-bench", "--ftl", "mobius", "--mode", "ordered"],
            "does not offer it",
        ),
    ];
    for (args, want) in cases {
        let (ok, _, err) = mobius(args);
        assert!(!ok, "{args:?} succeeded");
        assert!(err.contains(want), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}

#[test]
fn a_database_on_an_image_outlives_the_process_and_a_kill() {
    let dir = tempfile::tempdir().unwrap();
    let image = dir.path().join("db.img");
    let image = image.to_str().unwrap();
    let (ok, _, err) = mobius(&[
        "sql",
        "--ftl",
        "mobius",
        "--image",
        image,
        "CREATE TABLE t(x INTEGER)",
        "INSERT INTO t VALUES (42)",
    ]);
    assert!(ok, "{err}");
    let (ok, out, err) = mobius(&[
        "sql",
        "--ftl",
        "mobius",
        "--image",
        image,
        "SELECT x FROM t",
    ]);
    assert!(ok, "{err}");
    assert_eq!(out.trim(), "42");

    // kill -9 while statements stream in: the next start recovers and the database is whole.
    let mut child = Command::new(env!("CARGO_BIN_EXE_mobius"))
        .args(["sql", "--ftl", "mobius", "--image", image])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    for i in 0..2000 {
        if writeln!(stdin, "INSERT INTO t VALUES ({i});").is_err() {
            break;
        }
    }
    std::thread::sleep(std::time::Duration::from_millis(50));
    child.kill().unwrap();
    child.wait().unwrap();
    let (ok, out, err) = mobius(&[
        "sql",
        "--ftl",
        "mobius",
        "--image",
        image,
        "PRAGMA integrity_check",
        "SELECT count(*) >= 1 FROM t",
    ]);
    assert!(ok, "{err}");
    assert_eq!(out.lines().collect::<Vec<_>>(), ["ok", "1"]);
}

/// `mobius` with `input` on standard input.
fn mobius_stdin(args: &[&str], input: &str) -> (bool, String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_mobius"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run mobius");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Issue #67: every statement runs, as in the `sqlite3` shell: several in one argument or on
/// one line, one across lines; the first failure stops the run with a non-zero status and an
/// error naming it, and nothing after it runs. The status lines say `mobius sql`.
#[test]
fn the_shell_runs_every_statement_and_stops_at_the_first_failure() {
    let dir = tempfile::tempdir().unwrap();
    let image = dir.path().join("db.img");
    let image = image.to_str().unwrap();
    let sql = ["sql", "--ftl", "mobius", "--image", image];
    let with = |extra: &[&'static str]| [&sql[..], extra].concat();
    let (ok, out, err) = mobius(&with(&[
        "CREATE TABLE t(x INTEGER UNIQUE); INSERT INTO t VALUES (1); INSERT INTO t VALUES (2)",
        "SELECT count(*) FROM t; SELECT max(x) FROM t;",
    ]));
    assert!(ok, "{err}");
    assert_eq!(out, "2\n2\n");
    assert!(
        err.contains("mobius sql: formatted mobius on new image"),
        "{err}"
    );
    assert!(!err.contains("mobius serve"), "{err}");

    let input =
        "INSERT INTO t VALUES (3); INSERT INTO t\n  VALUES (4);\nSELECT group_concat(x) FROM t;\n";
    let (ok, out, err) = mobius_stdin(&sql, input);
    assert!(ok, "{err}");
    assert_eq!(out, "1,2,3,4\n");
    assert!(err.contains("mobius sql: recovered mobius from"), "{err}");
    assert!(!err.contains("mobius serve"), "{err}");

    let input = "INSERT INTO t VALUES (5);\nSELECT count(*) FROM t; INSERT INTO t VALUES (1);\nINSERT INTO t VALUES (6);\n";
    let (ok, out, err) = mobius_stdin(&sql, input);
    assert!(!ok, "a failing statement exited 0: {err}");
    assert_eq!(out, "5\n", "the statements before the failing one ran");
    assert!(
        err.contains(
            "statement 3 (line 2: INSERT INTO t VALUES (1);) failed: UNIQUE constraint failed: t.x"
        ),
        "{err}"
    );
    let (ok, out, err) = mobius(&with(&["SELECT 1; SELEC 2;", "INSERT INTO t VALUES (7)"]));
    assert!(!ok, "{err}");
    assert_eq!(out, "1\n");
    assert!(
        err.contains(r#"statement 2 (argument 1: SELEC 2;) failed: near "SELEC": syntax error"#),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
    let (ok, out, err) = mobius(&with(&["SELECT group_concat(x) FROM t"]));
    assert!(ok, "{err}");
    assert_eq!(out, "1,2,3,4,5\n", "a statement after a failure ran");
}

/// Issue #67: the shell's default `synchronous` loses no acknowledged commit in its mode:
/// EXTRA where FULL is not (OPTR in ordered mode, DFTL with a rollback journal), FULL in batch
/// mode; it says so at start, and `--synchronous` overrides it with a warning.
#[test]
fn the_shells_default_synchronous_keeps_acknowledged_commits() {
    let dir = tempfile::tempdir().unwrap();
    for (ftl, mode, level, pragma) in [
        ("optr", "ordered", "EXTRA", "3"),
        ("dftl", "journal", "EXTRA", "3"),
        ("mobius", "batch", "FULL", "2"),
    ] {
        let image = dir.path().join(format!("{ftl}.img"));
        let image = image.to_str().unwrap();
        let args = ["sql", "--ftl", ftl, "--mode", mode, "--image", image];
        let (ok, out, err) = mobius(&[&args[..], &["PRAGMA synchronous"]].concat());
        assert!(ok, "{err}");
        assert_eq!(out.trim(), pragma, "{ftl} {mode}: {err}");
        let line = format!("mobius sql: synchronous={level}, {mode} mode's default: ");
        assert!(err.contains(&line), "{ftl} {mode}: {err}");
        if level == "EXTRA" {
            assert!(err.contains("syncs only with EXTRA"), "{err}");
        }
    }
    let image = dir.path().join("optr.img");
    let args = ["sql", "--ftl", "optr", "--mode", "ordered", "--image"];
    let (ok, out, err) = mobius(
        &[
            &args[..],
            &[
                image.to_str().unwrap(),
                "--synchronous",
                "full",
                "PRAGMA synchronous",
            ],
        ]
        .concat(),
    );
    assert!(ok, "{err}");
    assert_eq!(out.trim(), "2");
    assert!(
        err.contains(
            "synchronous=FULL (--synchronous): ordered mode may lose acknowledged commits"
        ),
        "{err}"
    );
}

#[test]
fn a_foreign_image_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let image = dir.path().join("raw.img");
    let image = image.to_str().unwrap();
    // A device that holds something else at page 0 (a plain write through the NBD-less CLI is
    // not available, so format a database with another page layout: an image of another design).
    let (ok, _, err) = mobius(&[
        "sql", "--ftl", "dftl", "--mode", "journal", "--image", image, "SELECT 1",
    ]);
    assert!(ok, "{err}");
    let (ok, _, err) = mobius(&["sql", "--ftl", "mobius", "--image", image, "SELECT 1"]);
    assert!(!ok, "a DFTL image opened as Möbius");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn sqlite_crash_campaigns_run_from_the_command_line() {
    let (ok, out, err) = mobius(&[
        "crashtest",
        "--ftl",
        "mobius",
        "--workload",
        "sqlite-tpcb",
        "--mode",
        "batch",
        "--requests",
        "40",
        "--crash-points",
        "30",
        "--torn",
        "--json",
    ]);
    assert!(ok, "{err}");
    let j: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(j["violations"], 0);
    let (ok, _, err) = mobius(&[
        "crashtest",
        "--ftl",
        "dftl",
        "--workload",
        "sqlite-tpcb",
        "--mode",
        "batch",
        "--tx",
        "plain",
        "--requests",
        "100",
        "--crash-points",
        "200",
        "--torn",
    ]);
    assert!(!ok, "the negative control passed");
    assert!(err.contains("replay: mobius crashtest"), "{err}");
}

/// The SQLite soak from the command line: every design, seeds drawing their own device and
/// commit path, zero violations; the cells' GC copies show the aged devices made GC work.
#[test]
fn the_sqlite_soak_runs_every_design_over_seeds() {
    let j = Soak {
        designs: "all",
        workload: "sqlite",
        cut_model: None,
        seeds: 2,
        seed: Some(20261),
        second_lives: 0,
    }
    .passes();
    assert_eq!(j["cells"], 20, "ten designs, two seeds");
    assert!(j["cells_with_gc_copies"].as_u64().unwrap() > 0, "{j}");
}

/// The SQLite soak cut as a killed `mobius sql` leaves its image (`--cut-model prefix`): every
/// design, a fresh seed, a second life per cell, zero violations.
#[test]
fn the_sqlite_soak_of_killed_processes_runs_every_design() {
    let j = Soak {
        designs: "all",
        workload: "sqlite",
        cut_model: Some("prefix"),
        seeds: 1,
        seed: None,
        second_lives: 1,
    }
    .passes();
    assert_eq!(j["cells"], 10, "ten designs, one seed");
}

/// A failing soak cell prints a replay command, and that command, run as it is, finds the same
/// violation: the device, parameters, fill and commit path are all spelt out.
#[test]
fn a_failing_sqlite_soak_cell_replays_from_its_printed_command() {
    let (ok, _, err) = mobius(&[
        "crashtest",
        "--ftl",
        "all",
        "--workload",
        "sqlite",
        "--controls",
        "--seeds",
        "1",
        "--seed",
        "7101",
        "--crash-points",
        "60",
        "--torn",
    ]);
    assert!(ok, "the controls were not caught: {err}");
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
    assert!(
        replay.contains(&"--fill") && replay.contains(&"--set"),
        "{line}"
    );
    let (ok, _, again) = mobius(&replay);
    assert!(!ok, "the replay passed: {line}");
    assert!(
        again.contains(first),
        "replay found another violation: {again}"
    );
}

#[test]
fn sqlite_campaigns_refuse_flags_they_would_not_use() {
    let cases: [(&[&str], &str); 6] = [
        (
            &[
                "--workload",
                "sqlite",
                "--seeds",
                "1",
                "--synchronous",
                "bogus",
            ],
            "unknown --synchronous 'bogus'",
        ),
        (
            &[
                "--workload",
                "sqlite",
                "--seeds",
                "1",
                "--preset",
                "jasmine",
            ],
            "--preset not used by a SQLite soak",
        ),
        (
            &["--workload", "sqlite-kv", "--shrink"],
            "--shrink not used by a SQLite campaign",
        ),
        (
            &["--workload", "sqlite-kv", "--first-cut", "5"],
            "give --replay-instant too",
        ),
        (
            &["--workload", "sqlite-kv", "--fill", "1.5"],
            "fill 1.5 is not a share",
        ),
        (
            &["--workload", "sqlite", "--seeds", "1", "--mode", "ordered"],
            "no design named runs the commit paths asked for",
        ),
    ];
    for (args, expected) in cases {
        let ftl = if args.contains(&"ordered") {
            "dftl"
        } else {
            "mobius"
        };
        let mut all = vec!["crashtest", "--ftl", ftl];
        all.extend_from_slice(args);
        let (ok, _, err) = mobius(&all);
        assert!(!ok, "{all:?} passed");
        assert!(err.contains(expected), "{all:?}: {err}");
        assert!(!err.contains("panicked"), "{all:?}: {err}");
    }
}
