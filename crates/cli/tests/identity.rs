//! Behaviour identity (the lab crate issue's rule for refactors): `tools/identity-check` runs
//! `mobius bench` and `mobius crashtest` on every design, `mobius replay` of two committed
//! traces on every design and three `mobius compare` experiments, at its small size, and
//! compares each normalised JSON output (wall-clock fields dropped) with the set kept in
//! `tests/identity-small/`. A refactor must leave every one the same; a modelling change
//! records the set again in its own commit (`tools/identity-check record
//! crates/cli/tests/identity-small --size small`) and says what moved and why.

use std::path::Path;
use std::process::Command;

#[test]
fn the_small_identity_set_is_unchanged() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = Command::new("python3")
        .arg(root.join("tools/identity-check"))
        .args([
            "check",
            "crates/cli/tests/identity-small",
            "--size",
            "small",
        ])
        .args(["--bin", env!("CARGO_BIN_EXE_mobius")])
        .current_dir(&root)
        .output()
        .expect("python3 runs tools/identity-check (.ci/setup installs it)");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let differ: Vec<&str> = stdout.lines().filter(|l| l.starts_with("DIFF")).collect();
    assert!(
        out.status.success(),
        "{} outputs differ from tests/identity-small:\n{}\n{}",
        differ.len(),
        differ.join("\n"),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The check can fail: an expected output with one figure changed is reported as a difference.
#[test]
fn a_changed_figure_is_reported() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let dir = tempfile_dir();
    let expected = root.join("crates/cli/tests/identity-small/bench-dftl.json");
    let mut value: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(expected).unwrap()).unwrap();
    value["flash_programs"] = serde_json::json!(value["flash_programs"].as_u64().unwrap() + 1);
    std::fs::write(dir.join("bench-dftl.json"), value.to_string()).unwrap();
    let out = Command::new("python3")
        .arg(root.join("tools/identity-check"))
        .args([
            "check-one",
            dir.to_str().unwrap(),
            "bench-dftl",
            "--size",
            "small",
        ])
        .args(["--bin", env!("CARGO_BIN_EXE_mobius")])
        .current_dir(&root)
        .output()
        .expect("python3 runs tools/identity-check");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "{stdout}");
    assert!(
        stdout.contains("DIFF bench-dftl: $.flash_programs"),
        "{stdout}"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

fn tempfile_dir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("identity-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
