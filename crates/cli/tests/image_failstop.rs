//! Fail-stop on an I/O error of the image file (issue #20): the server runs under a file-size
//! limit (RLIMIT_FSIZE, through `prlimit`) that lets it write only the first half of its image,
//! so a program landing beyond it fails in the kernel (EFBIG), a real I/O error with no hook in
//! our code. From that write on, every write is refused with EIO (read-only failed state), the
//! data acknowledged before it still reads back, and after a restart without the limit the
//! recovered device holds every acknowledged write.

mod common;

use common::*;

const CHUNK: u64 = 256 << 10;

/// `qemu-io` on the server: true if every command succeeded.
fn qemu_io(server: &Server, commands: &[String]) -> (bool, String) {
    let mut args = vec!["-f".to_string(), "raw".to_string(), server.uri()];
    for c in commands {
        args.push("-c".into());
        args.push(c.clone());
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = run("qemu-io", &args, 60);
    let t = text(&out);
    let failed = !out.status.success()
        || t.contains("failed")
        || t.contains("error")
        || t.contains("Pattern verification");
    (!failed, t)
}

fn pattern(i: u64) -> u64 {
    i % 250 + 1
}

fn write(server: &Server, i: u64) -> (bool, String) {
    qemu_io(
        server,
        &[
            format!("write -P {} {} {CHUNK}", pattern(i), i * CHUNK),
            "flush".into(),
        ],
    )
}

fn verify(server: &Server, i: u64) -> (bool, String) {
    qemu_io(
        server,
        &[format!("read -P {} {} {CHUNK}", pattern(i), i * CHUNK)],
    )
}

/// Writes (each followed by a flush) until one fails: the slots acknowledged, and the index
/// of the failing write.
fn write_until_failure(server: &Server) -> (Vec<u64>, u64) {
    let mut acked = Vec::new();
    for i in 0..400u64 {
        let slot = i % 64;
        let (ok, out) = write(server, slot);
        if !ok {
            assert!(out.contains("Input/output error"), "not EIO: {out}");
            return (acked, i);
        }
        acked.retain(|&s| s != slot);
        acked.push(slot);
    }
    panic!("the file-size limit was never reached");
}

fn fail_stop(ftl: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let image = dir.join("dev.img");
    let mut server = Server::start(dir, ftl, &image, "32M", &[]);
    assert!(server.stop(), "format and clean stop");
    // The lowest limit (in tenths of the file) under which the design recovers and takes at
    // least one write before the error: a recovery that must write beyond the limit fails,
    // with a clear error, and so may the first write (then the next limit is tried).
    let len = std::fs::metadata(&image).unwrap().len();
    let mut tried = None;
    for tenths in 3..10 {
        let mut server = match Server::start_limited(dir, ftl, &image, "32M", len / 10 * tenths) {
            Ok(s) => s,
            Err(log) => {
                assert!(
                    log.contains("File too large"),
                    "{ftl}: unclear failure: {log}"
                );
                continue;
            }
        };
        let (acked, failed_at) = write_until_failure(&server);
        if failed_at > 0 {
            tried = Some((server, acked, failed_at));
            break;
        }
        server.kill9();
    }
    let (mut server, acked, failed_at) = tried.expect("no file-size limit let a write through");
    // Writes alone (no flush): a design with a RAM cache (wcache) could take them, but they
    // could never become durable, so the failed device refuses them too.
    for i in 0..3 {
        let cmd = format!("write -P 7 {} {CHUNK}", i * CHUNK);
        let (ok, out) = qemu_io(&server, &[cmd]);
        assert!(
            !ok,
            "{ftl}: a write after the image failed was accepted: {out}"
        );
        assert!(out.contains("Input/output error"), "not EIO: {out}");
    }
    for &slot in &acked {
        let (ok, out) = verify(&server, slot);
        assert!(
            ok,
            "{ftl}: acknowledged slot {slot} unreadable while failed: {out}"
        );
    }
    assert!(server.running(), "fail-stop stops writing, not serving");
    server.kill9();
    let server = Server::start(dir, ftl, &image, "32M", &[]);
    for &slot in &acked {
        let (ok, out) = verify(&server, slot);
        assert!(
            ok,
            "{ftl}: acknowledged slot {slot} lost after restart: {out}"
        );
    }
    let (ok, out) = write(&server, 0);
    assert!(
        ok,
        "writes work again after a restart without the limit: {out}"
    );
    eprintln!(
        "{ftl}: image failed at write {failed_at}; {} acknowledged slots intact",
        acked.len()
    );
}

#[test]
fn an_image_io_error_makes_the_device_read_only_and_loses_nothing_acknowledged() {
    if skip("image fail-stop", &["qemu-io", "prlimit"]) {
        return;
    }
    for ftl in ["dftl", "mobius", "wcache"] {
        fail_stop(ftl);
    }
}
