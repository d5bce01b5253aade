//! `mobius compare --workers N` / `--scheduler ADDR` (issue #18): each experiment runs as one
//! Dask task and the report is assembled from the parts; it must equal the one-process run
//! byte for byte (report.md, results.json, every figure). `.ci/run` installs dask; where it is
//! missing the Dask test says so and skips.

use std::path::Path;
use std::process::Command;

fn mobius(args: &[&str], out: &Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_mobius"))
        .args(args)
        .arg("--out")
        .arg(out)
        .output()
        .expect("run mobius")
}

fn text(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr)
}

#[test]
fn experiments_as_dask_tasks_give_the_one_process_report() {
    let has_dask = Command::new("python3")
        .args(["-c", "import dask.distributed"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_dask {
        eprintln!("SKIP compare on Dask: python3 has no dask.distributed (.ci/run installs it)");
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let (serial, dask) = (dir.path().join("serial"), dir.path().join("dask"));
    let only = ["compare", "--only", "macro", "--only", "commit"];
    let a = mobius(&only, &serial);
    assert!(a.status.success(), "{}", text(&a));
    let b = mobius(&[&only[..], &["--workers", "2"]].concat(), &dask);
    assert!(b.status.success(), "{}", text(&b));
    assert!(text(&b).contains("compare: macro done"), "{}", text(&b));
    let summary = |o: &std::process::Output| {
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .find(|l| l.starts_with("sub-claims:"))
            .map(str::to_string)
    };
    assert_eq!(summary(&a), summary(&b));
    let mut files = 0;
    for f in std::fs::read_dir(&serial).expect("serial out") {
        let name = f.expect("entry").file_name();
        let one = std::fs::read(serial.join(&name)).expect("serial file");
        let two = std::fs::read(dask.join(&name)).unwrap_or_else(|_| panic!("{name:?} missing"));
        assert!(one == two, "{name:?} differs between the runs");
        files += 1;
    }
    assert!(files >= 5, "report, results and figures: {files} files");

    // The same through a scheduler's address (a separate cluster process, as on a real cluster).
    let mut cluster = Command::new("python3")
        .args(["-c", CLUSTER])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start a Dask cluster");
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(cluster.stdout.take().expect("stdout")),
        &mut line,
    )
    .expect("scheduler address");
    let by_address = dir.path().join("address");
    let c = mobius(
        &[&only[..], &["--scheduler", line.trim()]].concat(),
        &by_address,
    );
    let _ = cluster.kill();
    let _ = cluster.wait();
    assert!(c.status.success(), "{}", text(&c));
    for name in ["report.md", "results.json"] {
        let one = std::fs::read(serial.join(name)).expect("serial file");
        let two = std::fs::read(by_address.join(name)).expect("scheduler-run file");
        assert!(one == two, "{name} differs with --scheduler");
    }
}

/// A two-worker cluster that prints its scheduler's address and waits to be killed.
const CLUSTER: &str = r#"
import time
from dask.distributed import LocalCluster
if __name__ == "__main__":
    c = LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None, scheduler_port=0)
    print(c.scheduler_address, flush=True)
    time.sleep(600)
"#;

#[test]
fn bad_requests_are_refused_before_anything_runs() {
    let dir = tempfile::tempdir().expect("temp dir");
    let o = mobius(
        &["compare", "--only", "bogus", "--workers", "2"],
        dir.path(),
    );
    assert!(!o.status.success());
    assert!(
        text(&o).contains("unknown experiment 'bogus'"),
        "{}",
        text(&o)
    );
    let o = mobius(
        &["compare", "--only", "macro", "--workers", "0"],
        dir.path(),
    );
    assert!(!o.status.success());
    // Assembling where no task wrote its part names the missing experiment.
    let o = mobius(&["compare", "--assemble", "--only", "macro"], dir.path());
    assert!(!o.status.success());
    assert!(
        text(&o).contains("no output from experiment(s) macro"),
        "{}",
        text(&o)
    );
    // A part whose results.json carries a verdict no grader gives is refused, not counted.
    let part = dir.path().join("parts/macro");
    std::fs::create_dir_all(&part).expect("part dir");
    std::fs::write(part.join("report.md"), "# header\n\n## 2. macro\n").expect("report");
    std::fs::write(
        part.join("results.json"),
        r#"{"macro": {"claims": [{"verdict": "MAYBE"}]}}"#,
    )
    .expect("results");
    let o = mobius(&["compare", "--assemble", "--only", "macro"], dir.path());
    assert!(!o.status.success());
    assert!(text(&o).contains("verdict"), "{}", text(&o));
}
