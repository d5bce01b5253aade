//! `mobius serve` as a user meets it (issue #20): it prints the size it exports, `--trace`
//! loses no acknowledged request to a `kill -9`, an image opened as another design is refused
//! with a clear error, and `mobius info --ftl/--image` tell the same sizes and identity.

mod common;

use common::*;

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

/// One process per image (issue 68): while `mobius serve` holds an image, `mobius sql` and a
/// second `mobius serve` on it are refused with an error naming the image and the server's
/// pid, and the image stays byte for byte as it was. Once the server stopped, it opens.
#[test]
fn a_second_process_on_a_held_image_is_refused_and_the_image_untouched() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let image = dir.join("dev.img");
    let image_arg = image.to_str().unwrap();
    let sql = |statement: &str| {
        mobius(&[
            "sql", "--ftl", "dftl", "--mode", "journal", "--size", "32M", "--image", image_arg,
            statement,
        ])
    };
    let (ok, out) = sql("CREATE TABLE t(x INTEGER)");
    assert!(ok, "{out}");
    let mut server = Server::start(dir, "dftl", &image, "32M", &[]);
    let pid = server.pid().expect("running");
    let before = std::fs::read(&image).unwrap();
    let refused = |out: &str| {
        assert!(
            out.contains(&format!("image {image_arg} is already open"))
                && out.contains(&format!("pid {pid}")),
            "not refused as held by pid {pid}: {out}"
        );
    };
    let (ok, out) = sql("INSERT INTO t VALUES (1)");
    assert!(!ok, "a second process opened a held image: {out}");
    refused(&out);
    let other = dir.join("other.sock");
    let (ok, out) = mobius(&[
        "serve",
        "--ftl",
        "dftl",
        "--size",
        "32M",
        "--image",
        image_arg,
        "--socket",
        other.to_str().unwrap(),
    ]);
    assert!(!ok, "a second server opened a held image: {out}");
    refused(&out);
    assert!(
        std::fs::read(&image).unwrap() == before,
        "a refused open changed the image"
    );
    assert!(server.running(), "the holder must be unharmed");
    assert!(server.stop());
    let (ok, out) = sql("SELECT count(*) FROM t");
    assert!(ok, "the image must open once its holder stopped: {out}");
    assert!(out.contains('0'), "{out}");
}
