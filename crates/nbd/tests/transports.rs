//! The three transports and clean shutdown: TCP in-process, stdio and SIGTERM through the
//! example binary.

mod common;

use std::io::Read;
use std::net::{TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::*;
use nbd::protocol::*;
use nbd::{MemoryBackend, Server, ServerConfig};

fn example_binary() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let path = exe
        .parent()?
        .parent()?
        .join("examples")
        .join("nbd_mem_server");
    if path.is_file() {
        Some(path)
    } else {
        println!(
            "SKIP: example binary {} not built (plain `cargo test -p mobius-nbd` builds it)",
            path.display()
        );
        None
    }
}

/// Kills the child on drop if a test fails before it exits.
struct Reap(Child);
impl Drop for Reap {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

fn wait_exit(child: &mut Child, limit: Duration) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

#[test]
fn tcp_transport_serves_and_shutdown_flushes() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let server = Server::new(MemoryBackend::new(1 << 20), ServerConfig::default());
    let flag = server.shutdown_flag();
    let thread = std::thread::spawn(move || {
        let r = server.serve_tcp_listener(listener);
        (r, server)
    });
    let stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let (mut c, n) = Client::connect_on(Client { stream });
    assert_eq!(n.size, 1 << 20);
    assert_eq!(c.write(1, 512, &[5; 512], 0), 0);
    assert_eq!(c.read(2, 512, 512).unwrap(), vec![5; 512]);
    // Leave the connection idle and open: shutdown must still end it.
    let t = Instant::now();
    flag.store(true, Ordering::Relaxed);
    let (r, server) = thread.join().unwrap();
    r.unwrap();
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    assert_eq!(server.with_backend(|b| b.flush_count), 1);
    assert!(c.closed());
}

#[test]
fn stdio_transport_over_pipes() {
    let Some(bin) = example_binary() else {
        return;
    };
    let mut child = Command::new(&bin)
        .args(["--stdio", "--size", "65536"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pipes = ChildPipes {
        stdin: child.stdin.take().unwrap(),
        stdout: child.stdout.take().unwrap(),
    };
    let mut reap = Reap(child);
    let (mut c, n) = Client::connect_on(Client { stream: pipes });
    assert_eq!(n.size, 65536);
    assert_eq!(c.write(1, 0, &[9; 4096], NBD_CMD_FLAG_FUA), 0);
    assert_eq!(c.read(2, 0, 4096).unwrap(), vec![9; 4096]);
    assert_eq!(c.read(3, 65536, 512), Err(Errno::Inval.code()));
    c.disconnect();
    drop(c);
    let status = wait_exit(&mut reap.0, Duration::from_secs(10)).expect("server exits after DISC");
    let mut err = String::new();
    reap.0
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(status.success(), "{status}: {err}");
    assert!(err.contains("backend flushed"), "{err}");
}

#[test]
fn sigterm_stops_the_server_cleanly_with_a_client_connected() {
    let Some(bin) = example_binary() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("s.sock");
    let trace = dir.path().join("trace.txt");
    let child = Command::new(&bin)
        .arg("--unix")
        .arg(&socket)
        .arg("--trace")
        .arg(&trace)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut reap = Reap(child);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !socket.exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let (mut c, _) = Client::connect(UnixStream::connect(&socket).unwrap());
    assert_eq!(c.write(1, 0, &[1; 512], 0), 0);
    let status = Command::new("kill")
        .args(["-TERM", &reap.0.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let status = wait_exit(&mut reap.0, Duration::from_secs(5)).expect("SIGTERM stops the server");
    let mut err = String::new();
    reap.0
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(status.success(), "{status}: {err}");
    assert!(
        err.contains("stopped cleanly, backend flushed (1 flushes)"),
        "{err}"
    );
    assert!(!socket.exists(), "the socket file is removed on exit");
    let records = trace::line::read_trace(std::fs::read(&trace).unwrap().as_slice()).unwrap();
    assert_eq!(records.len(), 1);
    assert_eq!(
        records[0].to_string().split_once(' ').unwrap().1,
        "WRITE 0 512 -"
    );
    assert!(c.closed());
}

/// A memory backend whose write at offset 0 panics (a bug in a design, for example).
struct PanicsOnWriteAtZero(MemoryBackend);

impl nbd::NbdBackend for PanicsOnWriteAtZero {
    fn size_bytes(&self) -> u64 {
        self.0.size_bytes()
    }
    fn preferred_block_size(&self) -> u32 {
        self.0.preferred_block_size()
    }
    fn multi_conn_safe(&self) -> bool {
        true
    }
    fn read(&mut self, offset: u64, buf: &mut [u8], at: u64) -> Result<u64, nbd::BackendError> {
        self.0.read(offset, buf, at)
    }
    fn write(
        &mut self,
        offset: u64,
        data: &[u8],
        fua: bool,
        at: u64,
    ) -> Result<u64, nbd::BackendError> {
        assert_ne!(offset, 0, "injected backend bug");
        self.0.write(offset, data, fua, at)
    }
    fn flush(&mut self, at: u64) -> Result<u64, nbd::BackendError> {
        self.0.flush(at)
    }
    fn trim(&mut self, offset: u64, len: u64, at: u64) -> Result<u64, nbd::BackendError> {
        self.0.trim(offset, len, at)
    }
    fn write_zeroes(
        &mut self,
        offset: u64,
        len: u64,
        fua: bool,
        at: u64,
    ) -> Result<u64, nbd::BackendError> {
        self.0.write_zeroes(offset, len, fua, at)
    }
}

#[test]
fn a_backend_panic_stops_the_whole_server_unflushed() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let config = ServerConfig {
        max_connections: 4,
        ..ServerConfig::default()
    };
    let server = Server::new(PanicsOnWriteAtZero(MemoryBackend::new(1 << 20)), config);
    let thread = std::thread::spawn(move || (server.serve_tcp_listener(listener), server));
    let connect = || {
        let stream = TcpStream::connect(addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        Client::connect_on(Client { stream }).0
    };
    let mut healthy = connect();
    assert_eq!(healthy.write(1, 4096, &[7; 512], 0), 0);
    let mut doomed = connect();
    doomed.send(&request(NBD_CMD_WRITE, 0, 2, 0, 512));
    doomed.send(&[9; 512]);
    // The panicking connection gets no reply; the healthy one is served no more.
    let (r, server) = thread.join().unwrap();
    assert!(matches!(r, Err(nbd::ServerError::BackendPanicked)), "{r:?}");
    assert!(server.backend_panicked());
    assert!(doomed.closed());
    assert!(
        healthy.closed(),
        "a connection went on serving after a backend panic"
    );
    assert_eq!(
        server.with_backend(|b| b.0.flush_count),
        0,
        "flushed after a panic"
    );
    assert!(server.into_backend().is_err());
}

/// A Unix-socket server on its own thread; `stop` sets its shutdown flag and returns the
/// result of `serve_unix`.
struct UnixServing {
    flag: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<Result<(), nbd::ServerError>>,
}

impl UnixServing {
    fn start(path: &std::path::Path) -> UnixServing {
        let server = Server::new(MemoryBackend::new(1 << 20), ServerConfig::default());
        let flag = server.shutdown_flag();
        let path = path.to_path_buf();
        let thread = std::thread::spawn(move || server.serve_unix(&path));
        UnixServing { flag, thread }
    }

    fn stop(self) -> Result<(), nbd::ServerError> {
        self.flag.store(true, Ordering::Relaxed);
        self.thread.join().unwrap()
    }
}

fn wait_until(mut ready: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if ready() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    false
}

fn serves(path: &std::path::Path) -> bool {
    UnixStream::connect(path).is_ok_and(|s| {
        let (mut c, n) = Client::connect(s);
        let ok = n.size == 1 << 20 && c.read(1, 0, 512).is_ok();
        c.disconnect();
        ok
    })
}

/// Issue 68: a second server on a `--socket` path a live server holds is refused (the first
/// keeps serving); a stale socket file nobody listens on is replaced; a server removes at exit
/// only the socket it created, never one another server has bound at that path since.
#[test]
fn a_unix_socket_path_is_taken_only_from_nobody() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nbd.sock");
    let first = UnixServing::start(&path);
    assert!(
        wait_until(|| serves(&path)),
        "the first server never came up"
    );
    let second = UnixServing::start(&path);
    if !wait_until(|| second.thread.is_finished()) {
        second.stop().unwrap();
        panic!("a second server took over the socket of a live one");
    }
    let refused = second.thread.join().unwrap().unwrap_err();
    assert!(
        refused.to_string().contains("socket of a running server"),
        "{refused}"
    );
    assert!(
        serves(&path),
        "the refused server must leave the live one serving"
    );

    // The first server's socket replaced behind its back (by hand), then a third server on
    // the path: the first one's exit must not remove the third one's socket.
    std::fs::remove_file(&path).unwrap();
    let third = UnixServing::start(&path);
    assert!(
        wait_until(|| serves(&path)),
        "the third server never came up"
    );
    first.stop().unwrap();
    assert!(
        path.exists(),
        "the first server removed a socket it did not create"
    );
    assert!(serves(&path), "the third server must still serve");
    third.stop().unwrap();
    assert!(!path.exists(), "a server removes its own socket at exit");

    // A stale socket file (its listener gone, nobody listening) is replaced.
    drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
    assert!(path.exists());
    let fourth = UnixServing::start(&path);
    assert!(
        wait_until(|| serves(&path)),
        "a stale socket file was not replaced"
    );
    fourth.stop().unwrap();
}
