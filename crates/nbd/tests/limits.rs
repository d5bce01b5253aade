//! Issue 68 at the protocol level, against in-process servers: the handshake deadline, the
//! connection limit and how a refused client is answered, read-only exports, unaligned
//! requests from clients that never committed to the block sizes, and STARTTLS answers.
//! (Memory under clients that never read their replies, TLS with real clients and the hostile
//! soak run against `mobius serve` in crates/cli/tests/serve_limits.rs.)

mod common;

use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use nbd::protocol::*;
use nbd::tls::{TlsConfig, TlsMode};
use nbd::{ConnectionEnd, MemoryBackend, Server, ServerConfig, ServerError};

const SIZE: u64 = 1 << 20;

fn server(config: ServerConfig) -> Server<MemoryBackend> {
    Server::new(MemoryBackend::new(SIZE), config)
}

/// Runs `client` against one connection served by `serve_connection`.
fn session<T>(
    server: &Server<MemoryBackend>,
    client: impl FnOnce(UnixStream) -> T,
) -> (Result<ConnectionEnd, ServerError>, T) {
    let (ours, theirs) = UnixStream::pair().unwrap();
    theirs
        .set_read_timeout(Some(Duration::from_millis(20)))
        .unwrap();
    std::thread::scope(|s| {
        let handle = s.spawn(move || {
            let reader = theirs.try_clone().unwrap();
            server.serve_connection(reader, theirs)
        });
        let out = client(ours);
        (handle.join().unwrap(), out)
    })
}

/// Greets and enters transmission with NBD_OPT_EXPORT_NAME (no block sizes learnt).
fn export_name(c: &mut Client) -> u16 {
    c.greet(NBD_FLAG_C_FIXED_NEWSTYLE | NBD_FLAG_C_NO_ZEROES);
    c.send(&encode_option_header(NBD_OPT_EXPORT_NAME, 0));
    let reply = c.recv(10);
    assert_eq!(be_u64(&reply, 0), SIZE);
    be_u16(&reply, 8)
}

#[test]
fn a_client_silent_after_the_greeting_is_cut_at_the_handshake_deadline() {
    let s = server(ServerConfig {
        handshake_timeout: Duration::from_millis(300),
        ..ServerConfig::default()
    });
    // Silent after the greeting; then one that trickles a valid handshake too slowly (a byte
    // every 50 ms never lets a read time out, so only the overall deadline can end it).
    let (end, closed) = session(&s, |sock| {
        let mut c = Client::new(sock);
        c.recv(18);
        c.closed()
    });
    assert!(closed, "the server must close a client that never answers");
    assert!(matches!(end, Err(ServerError::HandshakeTimeout)), "{end:?}");
    let (end, _) = session(&s, |sock| {
        let mut c = Client::new(sock);
        c.recv(18);
        let mut bytes = 3u32.to_be_bytes().to_vec();
        bytes.extend_from_slice(&go_option(NBD_OPT_LIST, b"", &[])[..16]);
        for b in bytes {
            if std::io::Write::write_all(&mut c.stream, &[b]).is_err() {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    });
    assert!(matches!(end, Err(ServerError::HandshakeTimeout)), "{end:?}");
    // A client that finishes in time is served; the deadline does not reach transmission.
    let (end, _) = session(&s, |sock| {
        let (mut c, _) = Client::connect(sock);
        std::thread::sleep(Duration::from_millis(500));
        assert_eq!(c.read(1, 0, 512), Ok(vec![0; 512]));
        c.disconnect();
    });
    assert_eq!(end.unwrap(), ConnectionEnd::Disconnected);
}

/// A Unix-socket server with `config`, on a thread; stopped when dropped.
struct Serving {
    socket: std::path::PathBuf,
    flag: Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    _dir: tempfile::TempDir,
}

impl Serving {
    fn start(config: ServerConfig) -> Serving {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("nbd.sock");
        let listener = UnixListener::bind(&socket).unwrap();
        let s = server(config);
        let flag = s.shutdown_flag();
        let thread = std::thread::spawn(move || s.serve_unix_listener(listener).unwrap());
        Serving {
            socket,
            flag,
            thread: Some(thread),
            _dir: dir,
        }
    }

    fn client(&self) -> Client {
        Client::new(UnixStream::connect(&self.socket).unwrap())
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        self.flag.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Greets and sends GO without panicking: `None` when the server refused or closed.
fn try_go(socket: &Path) -> Option<Client> {
    use std::io::{Read, Write};
    let mut s = UnixStream::connect(socket).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    let mut greeting = [0u8; 18];
    s.read_exact(&mut greeting).ok()?;
    s.write_all(&3u32.to_be_bytes()).ok()?;
    s.write_all(&go_option(NBD_OPT_GO, b"", &[NBD_INFO_BLOCK_SIZE]))
        .ok()?;
    loop {
        let mut h = [0u8; 20];
        s.read_exact(&mut h).ok()?;
        let mut data = vec![0u8; be_u32(&h, 16) as usize];
        s.read_exact(&mut data).ok()?;
        match be_u32(&h, 12) {
            NBD_REP_ACK => return Some(Client { stream: s }),
            NBD_REP_INFO => {}
            _ => return None,
        }
    }
}

/// Waits (at most a minute) until `ready`.
fn eventually(mut ready: impl FnMut() -> bool) -> bool {
    for _ in 0..1200 {
        if ready() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

#[test]
fn connections_over_the_limit_are_refused_with_an_nbd_error_naming_it() {
    let serving = Serving::start(ServerConfig {
        max_connections: 2,
        handshake_timeout: Duration::from_secs(600),
        ..ServerConfig::default()
    });
    // Two clients hold both slots (one idle in the handshake, one in transmission).
    let mut idle = serving.client();
    idle.recv(18);
    let (mut busy, _) = Client::connect_on(serving.client());
    // A third is greeted, then every option is refused with a message, ABORT acknowledged.
    let mut third = serving.client();
    third.greet(NBD_FLAG_C_FIXED_NEWSTYLE | NBD_FLAG_C_NO_ZEROES);
    for _ in 0..2 {
        let refused = third.go(NBD_OPT_GO, b"").unwrap_err();
        assert_eq!(refused.reply_type, NBD_REP_ERR_POLICY);
        let text = String::from_utf8_lossy(&refused.data).into_owned();
        assert!(text.contains("--max-connections"), "{text}");
    }
    third.send(&encode_option_header(NBD_OPT_ABORT, 0));
    assert_eq!(third.option_reply().reply_type, NBD_REP_ACK);
    assert!(third.closed());
    // EXPORT_NAME cannot be answered with an error: the connection just closes.
    let mut fourth = serving.client();
    fourth.greet(NBD_FLAG_C_FIXED_NEWSTYLE | NBD_FLAG_C_NO_ZEROES);
    fourth.send(&encode_option_header(NBD_OPT_EXPORT_NAME, 0));
    assert!(fourth.closed());
    // The clients holding the slots were not disturbed; once one leaves, a new client gets in.
    assert_eq!(busy.write(1, 0, &[7; 512], 0), 0);
    drop(idle);
    assert!(
        eventually(
            || try_go(&serving.socket).is_some_and(|mut c| c.read(2, 0, 512) == Ok(vec![7; 512]))
        ),
        "a freed slot must let a new client in"
    );
}

#[test]
fn idle_sockets_cannot_lock_clients_out_for_longer_than_the_handshake_deadline() {
    let serving = Serving::start(ServerConfig {
        max_connections: 4,
        handshake_timeout: Duration::from_millis(500),
        ..ServerConfig::default()
    });
    let idle: Vec<UnixStream> = (0..8)
        .map(|_| UnixStream::connect(&serving.socket).unwrap())
        .collect();
    // The idle ones are cut at their deadline and a real client gets in while they stay open.
    assert!(
        eventually(|| try_go(&serving.socket).is_some()),
        "idle sockets kept a client out"
    );
    drop(idle);
}

#[test]
fn a_read_only_export_says_so_and_refuses_every_change_with_eperm() {
    let s = server(ServerConfig {
        read_only: true,
        ..ServerConfig::default()
    });
    s.with_backend(|b| b.image_mut()[..512].fill(9));
    let (end, flags) = session(&s, |sock| {
        let (mut c, n) = Client::connect(sock);
        let eperm = Errno::Perm.code();
        assert_eq!(c.write(1, 0, &[1; 512], 0), eperm);
        assert_eq!(c.simple(NBD_CMD_TRIM, 0, 2, 0, 512), eperm);
        assert_eq!(c.simple(NBD_CMD_WRITE_ZEROES, 0, 3, 0, 512), eperm);
        assert_eq!(c.write(4, SIZE, &[1; 512], 0), eperm, "EPERM before ENOSPC");
        assert_eq!(c.read(5, 0, 512), Ok(vec![9; 512]));
        assert_eq!(c.simple(NBD_CMD_FLUSH, 0, 6, 0, 0), 0);
        c.disconnect();
        n.flags
    });
    assert_eq!(end.unwrap(), ConnectionEnd::Disconnected);
    assert_ne!(flags & NBD_FLAG_READ_ONLY, 0);
    assert_eq!(
        flags & (NBD_FLAG_SEND_TRIM | NBD_FLAG_SEND_WRITE_ZEROES | NBD_FLAG_SEND_FUA),
        0
    );
    assert!(s.with_backend(|b| b.image()[..512].iter().all(|&x| x == 9)));
    // Writable by default.
    let (_, flags) = session(&server(ServerConfig::default()), |sock| {
        let (mut c, n) = Client::connect(sock);
        c.disconnect();
        n.flags
    });
    assert_eq!(flags & NBD_FLAG_READ_ONLY, 0);
}

/// Issue 68: a client that negotiated with NBD_OPT_EXPORT_NAME (or GO without asking for the
/// block sizes) never committed to 512-byte alignment, and its unaligned requests are served;
/// one whose GO asked for NBD_INFO_BLOCK_SIZE keeps getting EINVAL.
#[test]
fn unaligned_requests_are_served_to_clients_that_never_learnt_the_block_size() {
    let s = server(ServerConfig::default());
    let (end, _) = session(&s, |sock| {
        let mut c = Client::new(sock);
        export_name(&mut c);
        assert_eq!(c.write(1, 1000, b"abc", 0), 0);
        assert_eq!(c.read(2, 999, 5), Ok(vec![0, b'a', b'b', b'c', 0]));
        assert_eq!(c.simple(NBD_CMD_WRITE_ZEROES, 0, 3, 1001, 1), 0);
        assert_eq!(c.read(4, 1000, 3), Ok(b"a\0c".to_vec()));
        assert_eq!(c.simple(NBD_CMD_TRIM, 0, 5, 7, 3), 0);
        assert_eq!(
            c.read(6, SIZE - 1, 2),
            Err(Errno::Inval.code()),
            "range still checked"
        );
        c.disconnect();
    });
    assert_eq!(end.unwrap(), ConnectionEnd::Disconnected);
    let (_, _) = session(&s, |sock| {
        let mut c = Client::new(sock);
        c.greet(3);
        c.send(&go_option(NBD_OPT_GO, b"", &[]));
        while c.option_reply().reply_type != NBD_REP_ACK {}
        assert_eq!(c.read(1, 999, 5), Ok(vec![0, b'a', 0, b'c', 0]));
        c.disconnect();
    });
    let (_, _) = session(&s, |sock| {
        // `connect` sends GO asking for NBD_INFO_BLOCK_SIZE.
        let (mut c, n) = Client::connect(sock);
        assert_eq!(n.block_sizes.map(|b| b.0), Some(512));
        assert_eq!(c.read(1, 999, 5), Err(Errno::Inval.code()));
        assert_eq!(c.write(2, 0, &[1; 100], 0), Errno::Inval.code());
        c.disconnect();
    });
}

fn psk_file(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("keys.psk");
    std::fs::write(&path, "alice:000102030405060708090a0b0c0d0e0f\n").unwrap();
    path
}

#[test]
fn starttls_is_answered_as_the_protocol_says() {
    // Without TLS: not supported, and the handshake goes on.
    let (end, _) = session(&server(ServerConfig::default()), |sock| {
        let mut c = Client::new(sock);
        c.greet(3);
        c.send(&encode_option_header(NBD_OPT_STARTTLS, 0));
        assert_eq!(c.option_reply().reply_type, NBD_REP_ERR_UNSUP);
        assert!(c.go(NBD_OPT_GO, b"").is_ok());
        c.disconnect();
    });
    assert_eq!(end.unwrap(), ConnectionEnd::Disconnected);
    // TLS required: every option but STARTTLS and ABORT gets NBD_REP_ERR_TLS_REQD; STARTTLS on
    // a transport that cannot carry TLS (a stream pair here, stdio for the binary) gets
    // NBD_REP_ERR_POLICY; NBD_OPT_EXPORT_NAME closes the connection.
    let dir = tempfile::tempdir().unwrap();
    let tls = TlsConfig::psk(TlsMode::Require, &psk_file(dir.path())).unwrap();
    let required = server(ServerConfig {
        tls: Some(Arc::new(tls)),
        ..ServerConfig::default()
    });
    let (end, _) = session(&required, |sock| {
        let mut c = Client::new(sock);
        c.greet(3);
        for option in [
            NBD_OPT_GO,
            NBD_OPT_INFO,
            NBD_OPT_LIST,
            NBD_OPT_STRUCTURED_REPLY,
        ] {
            c.send(&go_option(option, b"", &[]));
            let r = c.option_reply();
            assert_eq!((r.option, r.reply_type), (option, NBD_REP_ERR_TLS_REQD));
        }
        c.send(&encode_option_header(NBD_OPT_STARTTLS, 0));
        assert_eq!(c.option_reply().reply_type, NBD_REP_ERR_POLICY);
        c.send(&encode_option_header(NBD_OPT_EXPORT_NAME, 0));
        assert!(c.closed());
    });
    assert!(
        matches!(end, Err(ServerError::Protocol(ProtocolError::TlsRequired))),
        "{end:?}"
    );
}
