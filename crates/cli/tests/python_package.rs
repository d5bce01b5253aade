//! The Python package (`python/`, docs/python.md): builds the wheel with maturin, installs it in
//! a fresh virtual environment and runs its pytest suite (API round trip, typed exceptions,
//! determinism across processes, Dask sweeps equal to serial ones, resume). `.ci/run` installs
//! maturin, pytest, dask, pandas, pyarrow and matplotlib; where they are missing the test says so and skips.

use std::path::{Path, PathBuf};
use std::process::Command;

fn python_has(module: &str) -> bool {
    Command::new("python3")
        .args(["-c", &format!("import {module}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

fn run(cmd: &mut Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_python_package_builds_and_its_tests_pass() {
    let missing: Vec<&str> = [
        "maturin",
        "pytest",
        "dask.distributed",
        "pandas",
        "pyarrow",
        "matplotlib",
    ]
    .into_iter()
    .filter(|m| !python_has(m))
    .collect();
    if !missing.is_empty() {
        eprintln!(
            "SKIP python package: python3 modules missing: {missing:?} (.ci/run installs them)"
        );
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let work = tempfile::tempdir().expect("temp dir");
    let wheels = work.path().join("wheels");
    let target: PathBuf = root.join("target/python");
    run(Command::new("python3")
        .args(["-m", "maturin", "build", "--release", "--quiet", "-o"])
        .arg(&wheels)
        .arg("-m")
        .arg(root.join("python/Cargo.toml"))
        .env("CARGO_TARGET_DIR", &target));
    let venv = work.path().join("venv");
    run(Command::new("python3")
        .args(["-m", "venv", "--system-site-packages"])
        .arg(&venv));
    let wheel = std::fs::read_dir(&wheels)
        .expect("wheel dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|x| x == "whl"))
        .expect("maturin built a wheel");
    run(Command::new(venv.join("bin/pip"))
        .args(["install", "--quiet", "--no-deps", "--force-reinstall"])
        .arg(&wheel));
    // From the temp dir, so that `python/mobius` (without its native module) is not imported.
    run(Command::new(venv.join("bin/python"))
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider"])
        .arg(root.join("python/tests"))
        .env("MOBIUS_BIN", env!("CARGO_BIN_EXE_mobius"))
        .current_dir(work.path()));
}
