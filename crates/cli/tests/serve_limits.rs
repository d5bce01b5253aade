//! `mobius serve` against careless and hostile clients (issue 68): memory stays bounded under
//! clients that never read their replies and comes back when they leave; the connection limit
//! and the handshake deadline with a real client; read-only exports; TLS with PSK and X.509
//! through nbdinfo, nbdcopy and qemu-img, wrong keys and foreign certificates refused; bad
//! options refused before the image is touched.

mod common;

use common::*;
use std::io::Write;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

fn tools(test: &str, tools: &[&str]) -> bool {
    for t in tools {
        if !have(t) {
            println!("SKIP {test}: `{t}` is not installed (.ci/setup installs it)");
            return false;
        }
    }
    true
}

fn trace_reads(trace: &Path) -> usize {
    std::fs::read_to_string(trace)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains(" READ "))
        .count()
}

/// Issue 68: a client that sends large READs and never reads the replies grew the server by
/// ~340 MB per connection under --pace, kept after it closed. Now each connection holds at
/// most its --connection-buffer (here 32 MiB: one 32 MiB READ) and is no longer read from
/// until its replies leave; the memory comes back when the clients close. Checked with and
/// without --pace, four such clients at once.
#[test]
fn memory_stays_bounded_under_clients_that_never_read_their_replies() {
    const CLIENTS: u64 = 4;
    const REQUESTS: u64 = 200;
    const READ: u32 = 32 << 20;
    let budget = 32u64 << 20;
    for pace in [true, false] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let trace = dir.join("trace.txt");
        let mut args = vec![
            "--connection-buffer",
            "32M",
            "--trace",
            trace.to_str().unwrap(),
        ];
        if pace {
            args.push("--pace");
        }
        let mut server = Server::start(dir, "dftl", &dir.join("dev.img"), "128M", &args);
        let pid = server.pid().unwrap();
        // A first client allocates what any connection does (thread stacks, buffers).
        drop(nbd_go(&server.socket, Duration::from_secs(30)).unwrap());
        std::thread::sleep(Duration::from_millis(300));
        let baseline = rss_bytes(pid);
        let hostile: Vec<UnixStream> = (0..CLIENTS)
            .map(|c| {
                let mut s = nbd_go(&server.socket, Duration::from_secs(30)).unwrap();
                for i in 0..REQUESTS {
                    s.write_all(&nbd_request(0, c << 32 | i, 0, READ)).unwrap();
                }
                s
            })
            .collect();
        // Watch the server while the clients sit on their unread replies (well inside the
        // 30 s a reply write may wait before the server drops a client).
        let mut peak = 0;
        for _ in 0..40 {
            std::thread::sleep(Duration::from_millis(200));
            peak = peak.max(rss_bytes(pid));
        }
        let reads = trace_reads(&trace);
        let grown = peak.saturating_sub(baseline);
        println!(
            "pace {pace}: baseline {} MiB, peak {} MiB (+{} MiB), {reads} of {} READs run",
            baseline >> 20,
            peak >> 20,
            grown >> 20,
            CLIENTS * REQUESTS
        );
        let slack = 64u64 << 20;
        assert!(
            reads as u64 <= CLIENTS * (budget / u64::from(READ)),
            "pace {pace}: {reads} READs of 32 MiB run for clients that read no reply: the server kept reading their requests"
        );
        assert!(
            grown <= CLIENTS * budget + slack,
            "pace {pace}: the server grew by {} MiB for {CLIENTS} clients that read no reply",
            grown >> 20
        );
        drop(hostile);
        let back = wait_for(60, || rss_bytes(pid) <= baseline + (32 << 20));
        assert!(
            back,
            "pace {pace}: memory not returned after the clients closed: {} MiB, baseline {} MiB",
            rss_bytes(pid) >> 20,
            baseline >> 20
        );
        assert!(server.running());
        assert!(server.stop(), "pace {pace}: clean shutdown");
    }
}

#[test]
fn the_connection_limit_and_the_handshake_deadline_with_a_real_client() {
    if !tools("connection limit", &["nbdinfo"]) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let image = dir.join("dev.img");
    let mut server = Server::start(
        dir,
        "dftl",
        &image,
        "32M",
        &["--max-connections", "2", "--handshake-timeout", "600"],
    );
    let uri = server.uri();
    let idle: Vec<UnixStream> = (0..2)
        .map(|_| UnixStream::connect(&server.socket).unwrap())
        .collect();
    let out = run("nbdinfo", &[&uri], 60);
    assert!(
        !out.status.success(),
        "served beyond --max-connections: {}",
        text(&out)
    );
    let log = std::fs::read_to_string(&server.log).unwrap();
    assert!(log.contains("2 connections already open"), "{log}");
    drop(idle);
    assert!(
        wait_for(60, || run("nbdinfo", &[&uri], 60).status.success()),
        "a freed slot must let nbdinfo in"
    );
    assert!(server.stop());
    // Sixteen idle sockets (issue 68) are cut at the handshake deadline: nbdinfo gets in while
    // they stay open.
    let mut server = Server::start(dir, "dftl", &image, "32M", &["--handshake-timeout", "1"]);
    let idle: Vec<UnixStream> = (0..16)
        .map(|_| UnixStream::connect(&server.socket).unwrap())
        .collect();
    assert!(
        wait_for(60, || run("nbdinfo", &[&server.uri()], 60).status.success()),
        "idle sockets locked nbdinfo out"
    );
    drop(idle);
    assert!(server.stop());
}

#[test]
fn bad_server_options_are_refused_before_the_image_is_touched() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let image = dir.join("dev.img");
    let psk = dir.join("bad.psk");
    std::fs::write(&psk, "alice:0g\n").unwrap();
    let socket = dir.join("s.sock");
    let base = [
        "serve",
        "--ftl",
        "dftl",
        "--size",
        "32M",
        "--image",
        image.to_str().unwrap(),
        "--socket",
        socket.to_str().unwrap(),
    ];
    for (extra, says) in [
        (vec!["--connection-buffer", "1M"], "at least 32 MiB"),
        (vec!["--connection-buffer", "lots"], "expected a number"),
        (vec!["--handshake-timeout", "0"], "--handshake-timeout"),
        (vec!["--max-connections", "0"], "max-connections"),
        (
            vec!["--tls"],
            "needs --tls-psk FILE or --tls-certificates DIR",
        ),
        (vec!["--tls-psk", psk.to_str().unwrap()], "need --tls"),
        (
            vec!["--tls=require", "--tls-psk", psk.to_str().unwrap()],
            "line 1: the key is not hex",
        ),
        (
            vec!["--tls", "--tls-certificates", dir.to_str().unwrap()],
            "server-cert.pem",
        ),
    ] {
        let mut args = base.to_vec();
        args.extend(extra.iter());
        let (ok, out) = mobius(&args);
        assert!(!ok && out.contains(says), "{extra:?}: {out}");
        assert!(
            !image.exists(),
            "{extra:?} created the image before refusing"
        );
    }
}

#[test]
fn a_read_only_export_refuses_writes_from_real_clients() {
    if !tools("read-only", &["nbdinfo", "qemu-io"]) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let image = dir.join("dev.img");
    let mut server = Server::start(dir, "dftl", &image, "32M", &[]);
    must(
        "qemu-io",
        &["-f", "raw", &server.uri(), "-c", "write -P 0x5a 0 64k"],
        60,
    );
    assert!(server.stop());
    let mut server = Server::start(dir, "dftl", &image, "32M", &["--read-only"]);
    let uri = server.uri();
    let info = must("nbdinfo", &[&uri], 60);
    assert!(
        String::from_utf8_lossy(&info.stdout).contains("is_read_only: true"),
        "{}",
        text(&info)
    );
    let write = run(
        "qemu-io",
        &["-f", "raw", &uri, "-c", "write -P 0x11 0 4k"],
        60,
    );
    let said = text(&write);
    assert!(
        !write.status.success()
            || said.contains("Operation not permitted")
            || said.contains("read-only"),
        "a write to a read-only export went through: {said}"
    );
    must(
        "qemu-io",
        &["-r", "-f", "raw", &uri, "-c", "read -P 0x5a 0 64k"],
        60,
    );
    assert!(server.stop());
}

/// A PSK file in psktool's format.
fn psk_file(path: &Path, identity: &str) -> PathBuf {
    let key: String = (0..32).map(|_| format!("{:02x}", rand_byte())).collect();
    std::fs::write(path, format!("{identity}:{key}\n")).unwrap();
    path.to_path_buf()
}

fn rand_byte() -> u8 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(
        std::time::SystemTime::now()
            .elapsed()
            .map_or(0, |d| d.as_nanos() as u64),
    );
    h.finish() as u8
}

fn psk_uri(socket: &Path, identity: &str, keys: &Path) -> String {
    format!(
        "nbds+unix://{identity}@/?socket={}&tls-psk-file={}",
        socket.display(),
        keys.display()
    )
}

#[test]
fn tls_with_pre_shared_keys_through_real_clients() {
    if !tools("TLS PSK", &["nbdinfo", "nbdcopy", "qemu-img"]) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let keys = psk_file(&dir.join("keys.psk"), "alice");
    let mut server = Server::start(
        dir,
        "dftl",
        &dir.join("dev.img"),
        "32M",
        &["--tls=require", "--tls-psk", keys.to_str().unwrap()],
    );
    let uri = psk_uri(&server.socket, "alice", &keys);
    let info = must("nbdinfo", &[&uri], 60);
    assert!(
        String::from_utf8_lossy(&info.stdout).contains("with TLS"),
        "{}",
        text(&info)
    );
    // nbdcopy a random file in and back out, over TLS.
    let data: Vec<u8> = (0..(4u32 << 20))
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let src = dir.join("src.bin");
    std::fs::write(&src, &data).unwrap();
    must("nbdcopy", &[src.to_str().unwrap(), &uri], 120);
    let back = dir.join("back.bin");
    std::fs::write(&back, []).unwrap();
    must("nbdcopy", &[&uri, back.to_str().unwrap()], 120);
    assert!(
        std::fs::read(&back).unwrap()[..data.len()] == data[..],
        "nbdcopy over TLS lost data"
    );
    // qemu-img with its PSK credentials (a directory holding keys.psk).
    let qdir = dir.join("qemu");
    std::fs::create_dir(&qdir).unwrap();
    std::fs::copy(&keys, qdir.join("keys.psk")).unwrap();
    let object = format!(
        "tls-creds-psk,id=tls0,endpoint=client,dir={},username=alice",
        qdir.display()
    );
    let opts = format!("driver=nbd,path={},tls-creds=tls0", server.socket.display());
    let out = must(
        "qemu-img",
        &["info", "--object", &object, "--image-opts", &opts],
        60,
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("virtual size"),
        "{}",
        text(&out)
    );
    // A wrong key, an unknown identity and a plaintext client are all refused.
    let wrong = psk_file(&dir.join("wrong.psk"), "alice");
    let stranger = psk_file(&dir.join("bob.psk"), "bob");
    for bad in [
        psk_uri(&server.socket, "alice", &wrong),
        psk_uri(&server.socket, "bob", &stranger),
        server.uri(),
    ] {
        let out = run("nbdinfo", &[&bad], 60);
        assert!(!out.status.success(), "{bad} was served: {}", text(&out));
    }
    let log = std::fs::read_to_string(&server.log).unwrap();
    assert!(log.contains("TLS handshake failed"), "{log}");
    assert!(
        run("nbdinfo", &[&uri], 60).status.success(),
        "the right key still works"
    );
    assert!(server.stop());
}

/// `openssl` commands making a CA, a server certificate for localhost and a client
/// certificate, laid out as nbdkit, qemu and libnbd read them.
fn make_pki(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    let root = dir.join(name);
    let (server, client) = (root.join("server"), root.join("client"));
    std::fs::create_dir_all(&server).unwrap();
    std::fs::create_dir_all(&client).unwrap();
    let p = |f: &str| root.join(f).to_str().unwrap().to_string();
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    let mut ca = vec!["req", "-x509"];
    ca.extend(ec);
    let (ca_key, ca_cert) = (p("ca-key.pem"), p("ca-cert.pem"));
    ca.extend([
        "-keyout",
        &ca_key,
        "-out",
        &ca_cert,
        "-days",
        "2",
        "-subj",
        "/CN=mobius-test-ca",
    ]);
    must("openssl", &ca, 60);
    std::fs::write(
        root.join("server.ext"),
        "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    std::fs::write(root.join("client.ext"), "extendedKeyUsage=clientAuth\n").unwrap();
    for (who, out_dir) in [("server", &server), ("client", &client)] {
        let key = out_dir
            .join(format!("{who}-key.pem"))
            .to_str()
            .unwrap()
            .to_string();
        let cert = out_dir
            .join(format!("{who}-cert.pem"))
            .to_str()
            .unwrap()
            .to_string();
        let csr = p(&format!("{who}.csr"));
        let subject = format!(
            "/CN={}",
            if who == "server" {
                "localhost"
            } else {
                "client"
            }
        );
        let mut req = vec!["req"];
        req.extend(ec);
        req.extend(["-keyout", &key, "-out", &csr, "-subj", &subject]);
        must("openssl", &req, 60);
        let ext = p(&format!("{who}.ext"));
        must(
            "openssl",
            &[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                &ca_cert,
                "-CAkey",
                &ca_key,
                "-CAcreateserial",
                "-out",
                &cert,
                "-days",
                "2",
                "-extfile",
                &ext,
            ],
            60,
        );
        std::fs::copy(&ca_cert, out_dir.join("ca-cert.pem")).unwrap();
    }
    (server, client)
}

#[test]
fn tls_with_x509_certificates_through_real_clients() {
    if !tools("TLS X.509", &["nbdinfo", "qemu-img", "openssl"]) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (server_pki, client_pki) = make_pki(dir, "pki");
    let (_, foreign_pki) = make_pki(dir, "foreign");
    let mut server = Server::start(
        dir,
        "dftl",
        &dir.join("dev.img"),
        "32M",
        &[
            "--tls",
            "--tls-certificates",
            server_pki.to_str().unwrap(),
            "--tls-verify-peer",
        ],
    );
    let cert_uri = |pki: &Path| {
        format!(
            "nbds+unix:///?socket={}&tls-certificates={}",
            server.socket.display(),
            pki.display()
        )
    };
    let info = must("nbdinfo", &[&cert_uri(&client_pki)], 60);
    assert!(
        String::from_utf8_lossy(&info.stdout).contains("with TLS"),
        "{}",
        text(&info)
    );
    let object = format!(
        "tls-creds-x509,id=tls0,endpoint=client,dir={}",
        client_pki.display()
    );
    let opts = format!(
        "driver=nbd,path={},tls-creds=tls0,tls-hostname=localhost",
        server.socket.display()
    );
    must(
        "qemu-img",
        &["info", "--object", &object, "--image-opts", &opts],
        60,
    );
    // A client certificate from another CA is refused (and that client refuses the server's);
    // so is a client without a certificate, since --tls-verify-peer asks for one.
    let bare = dir.join("bare");
    std::fs::create_dir(&bare).unwrap();
    std::fs::copy(client_pki.join("ca-cert.pem"), bare.join("ca-cert.pem")).unwrap();
    for bad in [&foreign_pki, &bare] {
        let out = run("nbdinfo", &[&cert_uri(bad)], 60);
        assert!(
            !out.status.success(),
            "{} was served: {}",
            bad.display(),
            text(&out)
        );
    }
    // --tls (not require) still serves a plaintext client.
    let plain = must("nbdinfo", &[&server.uri()], 60);
    assert!(
        String::from_utf8_lossy(&plain.stdout).contains("without TLS"),
        "{}",
        text(&plain)
    );
    assert!(server.stop());
}
