//! `tools/full-device-probe` (docs/mobius.md, "A merge waits for pending transactions") against
//! stand-in binaries: it must fail on a design that fails a run, pass a typed refusal of a
//! configuration without counting it, and pass when every run completes. The real binary's
//! grid takes minutes, so CI checks the probe's verdicts here and the grid is run by hand.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A stand-in for `mobius` that prints `stderr` and exits with `code` when its arguments contain
/// `when`, and prints a JSON object otherwise.
fn stand_in(dir: &Path, when: &str, stderr: &str, code: i32) -> PathBuf {
    let path = dir.join("mobius");
    let script = format!(
        "#!/bin/sh\ncase \"$*\" in\n  *'{when}'*) echo '{stderr}' >&2; exit {code} ;;\nesac\necho '{{}}'\n"
    );
    std::fs::write(&path, script).expect("write the stand-in");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    path
}

/// Runs the probe over one seed with `binary`: (exit success, stdout).
fn probe(binary: &Path) -> (bool, String) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = Command::new(root.join("tools/full-device-probe"))
        .args(["7", "1"])
        .arg(binary)
        .current_dir(&root)
        .output()
        .expect("run tools/full-device-probe");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[test]
fn the_probe_fails_on_a_design_that_runs_out_of_space() {
    let dir = tempfile::tempdir().expect("temp dir");
    let full = "mobius: error: request 5121 (swrite-sync) failed: device full";
    let bin = stand_in(
        dir.path(),
        "--ftl mobius --set geometry.pages_per_block=16",
        full,
        1,
    );
    let (ok, out) = probe(&bin);
    assert!(!ok, "the probe passed a design that failed:\n{out}");
    // 2 over-provisioning values x 3 transaction sizes x 3 queue depths on 16-page blocks.
    assert_eq!(out.matches("FAIL bench").count(), 18, "{out}");
    assert!(out.contains("device full"), "{out}");
    assert!(out.contains("seed 7: 528 runs, 18 failed"), "{out}");
}

#[test]
fn a_typed_refusal_is_reported_but_not_counted() {
    let dir = tempfile::tempdir().expect("temp dir");
    let refused = "mobius: error: invalid option: fast: op hides fewer than four blocks";
    let bin = stand_in(dir.path(), "--ftl fast", refused, 1);
    let (ok, out) = probe(&bin);
    assert!(ok, "a refusal failed the probe:\n{out}");
    assert_eq!(out.matches("REFUSED bench").count(), 24, "{out}");
    assert!(out.contains("seed 7: 528 runs, 0 failed"), "{out}");
}

#[test]
fn the_probe_passes_when_every_run_completes() {
    let dir = tempfile::tempdir().expect("temp dir");
    let bin = stand_in(dir.path(), "no such argument", "", 1);
    let (ok, out) = probe(&bin);
    assert!(ok, "{out}");
    assert!(!out.contains("FAIL") && !out.contains("REFUSED"), "{out}");
}
