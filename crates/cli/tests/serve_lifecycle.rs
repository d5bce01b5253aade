//! `mobius serve` as a user meets it (issue #20): it prints the size it exports, `--trace`
//! loses no acknowledged request to a `kill -9`, an image opened as another design is refused
//! with a clear error, and `mobius info --ftl/--image` tell the same sizes and identity.

mod common;

use common::*;

fn mobius(args: &[&str]) -> (bool, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_mobius"))
        .args(args)
        .output()
        .expect("run mobius");
    let mut s = String::from_utf8_lossy(&out.stdout).into_owned();
    s.push_str(&String::from_utf8_lossy(&out.stderr));
    (out.status.success(), s)
}

#[test]
fn the_exported_size_is_printed_and_an_image_keeps_its_design() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let image = dir.join("dev.img");
    let mut server = Server::start(dir, "dftl", &image, "32M", &[]);
    assert!(server.stop());
    let log = std::fs::read_to_string(&server.log).unwrap();
    let (ok, info) = mobius(&["info", "--ftl", "dftl", "--size", "32M", "--json"]);
    assert!(ok, "{info}");
    let v: serde_json::Value = serde_json::from_str(&info).unwrap();
    let exported = v["design"]["exported_bytes"].as_u64().unwrap();
    assert!(exported > 0 && exported < 32 << 20, "{exported}");
    assert!(
        log.contains(&format!("exporting {exported} bytes")),
        "serve and info disagree on the exported size: {log}"
    );
    let (ok, header) = mobius(&["info", "--image", image.to_str().unwrap()]);
    assert!(ok && header.contains("design 'dftl'"), "{header}");
    // TxFlash keeps as many OOB bytes as Möbius; DFTL's image opened as anything else, or with
    // other parameters, must be refused before any recovery runs.
    for (ftl, extra) in [
        ("mobius", vec![]),
        ("dftl", vec!["--param", "oob_scan=off"]),
    ] {
        let mut args = vec!["serve", "--ftl", ftl, "--size", "32M", "--image"];
        args.push(image.to_str().unwrap());
        args.extend(["--socket", "/nonexistent/x.sock"]);
        args.extend(extra);
        let (ok, out) = mobius(&args);
        assert!(
            !ok && out.contains("was formatted by design 'dftl'"),
            "{out}"
        );
    }
    let (ok, out) = mobius(&["info", "--ftl", "nosuch"]);
    assert!(!ok && out.contains("unknown design"), "{out}");
}

#[test]
fn a_kill_9_loses_no_acknowledged_request_from_the_trace() {
    if skip("trace under kill -9", &["qemu-io"]) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let trace = dir.join("trace.txt");
    let mut server = Server::start(
        dir,
        "dftl",
        &dir.join("dev.img"),
        "32M",
        &["--trace", trace.to_str().unwrap()],
    );
    let mut args = vec!["-f".to_string(), "raw".into(), server.uri()];
    for i in 0..200u64 {
        args.push("-c".into());
        args.push(format!("write -P {} {} 4096", i % 200 + 1, i * 4096));
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    must("qemu-io", &args, 60);
    server.kill9();
    let text = std::fs::read_to_string(&trace).unwrap();
    let writes = text.lines().filter(|l| l.contains(" WRITE ")).count();
    assert_eq!(
        writes, 200,
        "acknowledged writes missing from the trace:\n{text}"
    );
}
