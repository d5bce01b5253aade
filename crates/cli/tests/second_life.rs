//! Second lives (docs/crashtest.md): a cut, recovery, more work on the recovered device and a
//! second cut. The checker must catch what only shows after a recovery: OPTR with the GC reserve
//! it had before (no room for the blocks a recovery seals and links) fills up on the recovered
//! device; with today's reserve it keeps going.

use std::process::Command;

fn crashtest(extra: &[&str]) -> (bool, String) {
    let mut args = vec![
        "crashtest",
        "--ftl",
        "optr",
        "--preset",
        "small",
        "--workload",
        "randwrite-flush",
        "--requests",
        "3000",
        "--fill",
        "0.5",
        "--seed",
        "506",
        "--qd",
        "1",
        "--torn",
        "--crash-points",
        "200",
        "--second-lives",
        "4",
    ];
    args.extend_from_slice(extra);
    let out = Command::new(env!("CARGO_BIN_EXE_mobius"))
        .args(&args)
        .output()
        .expect("run mobius");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

#[test]
fn a_recovered_device_that_cannot_go_on_is_caught_and_replays() {
    let (ok, text) = crashtest(&["--param", "gc_free_blocks=13"]);
    assert!(!ok, "{text}");
    assert!(text.contains("second life after a cut at"), "{text}");
    assert!(text.contains("device full"), "{text}");
    // The printed replay command rebuilds exactly that second life.
    let replay = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("replay: "))
        .or_else(|| {
            text.lines()
                .find(|l| l.contains("--first-cut"))
                .and_then(|l| l.find("mobius crashtest").map(|i| &l[i..]))
        })
        .map(str::to_string);
    if let Some(cmd) = replay {
        let args: Vec<&str> = cmd.split_whitespace().skip(1).collect();
        let out = Command::new(env!("CARGO_BIN_EXE_mobius"))
            .args(&args)
            .output()
            .expect("replay");
        assert!(!out.status.success(), "replay of {cmd} passed");
    }
}

#[test]
fn optr_keeps_going_after_recovery_with_its_crash_reserve() {
    let (ok, text) = crashtest(&["--json"]);
    assert!(ok, "{text}");
    let json: serde_json::Value =
        serde_json::from_str(text.lines().next().expect("json line")).expect("json");
    assert_eq!(json["second_lives"], 4);
    assert_eq!(json["violations"], 0);
}
