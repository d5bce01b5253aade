//! `mobius compare --workers N` / `--scheduler ADDR` (issue #18): each experiment runs as one
//! Dask task and the report is assembled from the parts; it must equal the one-process run
//! byte for byte (report.md, report.html, results.json, every figure) but for the wall time
//! each experiment took. `.ci/run` installs dask; where it is missing the Dask test says so and
//! skips.

use std::path::Path;
use std::process::Command;

#[path = "common/compare_runs.rs"]
mod compare_runs;
use compare_runs::{mask_wall_times, mobius, text};

#[test]
fn experiments_as_dask_tasks_give_the_one_process_report() {
    if !compare_runs::has_dask() {
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
        if name == "nvmfs-runs.jsonl" {
            continue;
        }
        let one = without_wall_times(&serial.join(&name));
        let two = without_wall_times(&dask.join(&name));
        assert!(one == two, "{name:?} differs between the runs");
        files += 1;
    }
    assert!(files >= 6, "reports, results and figures: {files} files");

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
    for name in ["report.md", "report.html", "results.json"] {
        let one = without_wall_times(&serial.join(name));
        let two = without_wall_times(&by_address.join(name));
        assert!(one == two, "{name} differs with --scheduler");
    }
}

/// A file of the report with the wall times masked: in results.json every `wall_s` dropped, in
/// report.md and report.html every printed wall time (`12.3 s`, `3 min 05 s`).
fn without_wall_times(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_else(|_| panic!("{path:?} missing"));
    if path.extension().is_some_and(|x| x == "json") {
        let mut v: serde_json::Value = serde_json::from_str(&text).expect("json");
        for entry in v.as_object_mut().into_iter().flat_map(|m| m.values_mut()) {
            if let Some(ran) = entry.get_mut("ran").and_then(|r| r.as_object_mut()) {
                ran.remove("wall_s");
            }
        }
        return v.to_string();
    }
    mask_wall_times(&text)
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
