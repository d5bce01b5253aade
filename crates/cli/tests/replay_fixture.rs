//! `mobius replay` on the committed ext4 trace (fixtures/ext4-small-files.trace.gz, recorded by
//! fixtures/record-ext4-trace.sh) and on small traces of the other two formats, through the
//! real binary.

use std::path::{Path, PathBuf};
use std::process::Command;

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/ext4-small-files.trace.gz")
}

fn replay(args: &[&str]) -> (bool, serde_json::Value, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_mobius"))
        .arg("replay")
        .args(args)
        .output()
        .expect("run mobius");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let json = serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
    (out.status.success(), json, stderr)
}

#[test]
fn the_ext4_fixture_loads_and_splits_into_flush_groups() {
    let (format, reqs) = trace::load(fixture(), None).unwrap();
    assert_eq!(format, trace::Format::Ours);
    assert!(reqs.len() > 500, "{} requests", reqs.len());
    assert_eq!(reqs[0].arrival_ns, 0);
    assert!(reqs.windows(2).all(|w| w[0].arrival_ns <= w[1].arrival_ns));
    let flushes = reqs.iter().filter(|r| r.op == trace::Op::Flush).count();
    assert!(flushes > 50, "ext4 with barriers flushes often: {flushes}");
    let groups = trace::split_at_flushes(&reqs);
    assert!(groups.len() > 50);
    let writes = reqs.iter().filter(|r| r.op.modifies()).count();
    assert_eq!(groups.iter().map(Vec::len).sum::<usize>(), writes);
    // mkfs discards the whole device in one request longer than 32 MiB.
    assert!(reqs
        .iter()
        .any(|r| r.op == trace::Op::Trim && r.length_bytes > 32 << 20));
}

#[test]
fn the_ext4_fixture_replays_on_every_design() {
    let path = fixture();
    let path = path.to_str().unwrap();
    for ftl in [
        "dftl",
        "wcache",
        "optr",
        "mobius",
        "atomic-write",
        "lighttx",
        "txflash-tc",
    ] {
        let (ok, json, stderr) = replay(&["--ftl", ftl, "--size", "512M", path, "--json"]);
        assert!(ok, "{ftl}: {stderr}");
        assert_eq!(json["ftl"], ftl);
        assert_eq!(json["format"], "ours");
        let requests = json["requests"].as_u64().unwrap();
        assert!(requests > 500, "{ftl}: {requests}");
        assert!(json["host_pages_written"].as_u64().unwrap() > 1000, "{ftl}");
        assert!(json["flash_programs"].as_u64().unwrap() > 0, "{ftl}");
        assert!(json["latency_us"]["p99"].as_f64().unwrap() > 0.0, "{ftl}");
        assert!(json["bandwidth_mb_s"].as_f64().unwrap() > 0.0, "{ftl}");
        assert_eq!(json["errors"], serde_json::json!({}), "{ftl}");
    }
}

#[test]
fn blkparse_and_msrc_files_replay_and_bad_lines_name_their_line() {
    let dir = tempfile::tempdir().unwrap();
    let blk = dir.path().join("t.blkparse");
    std::fs::write(
        &blk,
        "  8,0    0    1   0.000000000  10  Q  WS 2048 + 8 [dd]\n  \
         8,0    0    2   0.000100000  10  Q FWFS 4096 + 8 [jbd2]\n  \
         8,0    0    3   0.000200000  10  Q   R 2048 + 8 [cat]\nCPU0 (8,0):\n Reads Queued: 1\n",
    )
    .unwrap();
    let msrc = dir.path().join("t.csv");
    std::fs::write(
        &msrc,
        "128166372003061629,hm,1,Write,8192,4096,74186\n128166372003071629,hm,1,Read,8192,4096,100\n",
    )
    .unwrap();
    for (path, format, requests) in [(&blk, "blkparse", 4), (&msrc, "msrc", 2)] {
        let p = path.to_str().unwrap();
        let (ok, json, stderr) = replay(&["--ftl", "dftl", p, "--format", format, "--json"]);
        assert!(ok, "{format}: {stderr}");
        assert_eq!(json["requests"].as_u64(), Some(requests), "{format}");
        // Detected without --format, and closed-loop timing works.
        let (ok, json, stderr) = replay(&["--ftl", "optr", p, "--qd", "4", "--json"]);
        assert!(ok, "{format}: {stderr}");
        assert_eq!(json["format"], format);
        assert_eq!(json["timing"], "qd4");
    }
    let bad = dir.path().join("bad.csv");
    std::fs::write(&bad, "1,h,0,Write,0,4096,1\n2,h,0,Write,zero,4096,1\n").unwrap();
    let (ok, _, stderr) = replay(&["--ftl", "dftl", bad.to_str().unwrap()]);
    assert!(!ok);
    assert!(stderr.contains("line 2"), "{stderr}");
    let (ok, _, stderr) = replay(&["--ftl", "dftl", "--format", "tar", bad.to_str().unwrap()]);
    assert!(!ok && stderr.contains("unknown trace format"), "{stderr}");
}
