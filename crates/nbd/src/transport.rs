//! Transports: TCP, Unix socket, stdin/stdout. All three hand a pair of `Read`/`Write` halves
//! to [`Server::serve_connection`]; this module only accepts, sets timeouts and shuts down.
//!
//! Stdio serves exactly one connection (as `nbdfuse MNT --command mobius serve --stdio` and
//! `nbdkit`-style `--run` setups expect) and then returns. Nothing else in the process may
//! write to stdout while it runs: stdout *is* the NBD stream.

use std::fs::File;
use std::io::{self, Read};
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::ServerError;
use crate::server::{Server, Upgrade, REFUSALS_MAX};
use crate::timeouts::{SHUTDOWN_POLL, WRITE_TIMEOUT};
use crate::tls::{TlsConfig, TlsHalf};
use crate::NbdBackend;

/// How often the accept loops look at the shutdown flag.
pub const ACCEPT_POLL: Duration = Duration::from_millis(20);

/// Where to serve.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Listen {
    /// A TCP address such as `127.0.0.1:10809` (10809 is the NBD port).
    Tcp(String),
    /// A Unix socket path: refused when a live server listens there, a stale socket file there
    /// is replaced; the server removes at exit the socket it created (and no other).
    Unix(PathBuf),
    /// One connection on stdin/stdout.
    Stdio,
}

/// Sets `flag` on SIGINT and SIGTERM. A second signal while the flag is already set exits
/// the process at once (status 1), so a stuck shutdown can still be interrupted.
pub fn install_signal_handlers(flag: &Arc<AtomicBool>) -> io::Result<()> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    for signal in [SIGINT, SIGTERM] {
        // Order matters: the conditional exit must be registered first so that it sees the
        // flag as it was before this signal set it.
        signal_hook::flag::register_conditional_shutdown(signal, 1, Arc::clone(flag))?;
        signal_hook::flag::register(signal, Arc::clone(flag))?;
    }
    Ok(())
}

/// A stream whose halves can be split, for the accept loops.
trait SplitStream: Read + io::Write + AsRawFd + Send + Sized {
    fn split(self) -> io::Result<(Self, Self)>;
    fn duplicate(&self) -> io::Result<Self>;
}

/// A socket that switches to TLS after NBD_OPT_STARTTLS.
struct SocketUpgrade<S>(S);

impl<S: SplitStream> Upgrade for SocketUpgrade<S> {
    type Reader = TlsHalf<S>;
    type Writer = TlsHalf<S>;
    fn upgrade(
        self,
        tls: &TlsConfig,
        deadline: Instant,
        shutdown: &AtomicBool,
    ) -> Result<(TlsHalf<S>, TlsHalf<S>), ServerError> {
        tls.accept(self.0, deadline, shutdown)
    }
}

impl SplitStream for TcpStream {
    fn split(self) -> io::Result<(Self, Self)> {
        self.set_nonblocking(false)?;
        self.set_nodelay(true)?;
        self.set_read_timeout(Some(SHUTDOWN_POLL))?;
        self.set_write_timeout(Some(WRITE_TIMEOUT))?;
        let w = self.try_clone()?;
        Ok((self, w))
    }
    fn duplicate(&self) -> io::Result<Self> {
        self.try_clone()
    }
}

impl SplitStream for UnixStream {
    fn split(self) -> io::Result<(Self, Self)> {
        self.set_nonblocking(false)?;
        self.set_read_timeout(Some(SHUTDOWN_POLL))?;
        self.set_write_timeout(Some(WRITE_TIMEOUT))?;
        let w = self.try_clone()?;
        Ok((self, w))
    }
    fn duplicate(&self) -> io::Result<Self> {
        self.try_clone()
    }
}

trait Acceptor {
    type Stream: SplitStream;
    fn accept_stream(&self) -> io::Result<Self::Stream>;
    fn set_nonblocking(&self, nonblocking: bool) -> io::Result<()>;
}

impl Acceptor for TcpListener {
    type Stream = TcpStream;
    fn accept_stream(&self) -> io::Result<TcpStream> {
        self.accept().map(|(s, _)| s)
    }
    fn set_nonblocking(&self, nonblocking: bool) -> io::Result<()> {
        TcpListener::set_nonblocking(self, nonblocking)
    }
}

impl Acceptor for UnixListener {
    type Stream = UnixStream;
    fn accept_stream(&self) -> io::Result<UnixStream> {
        self.accept().map(|(s, _)| s)
    }
    fn set_nonblocking(&self, nonblocking: bool) -> io::Result<()> {
        UnixListener::set_nonblocking(self, nonblocking)
    }
}

/// Binds a Unix socket at `path`. A socket file already there is probed first: if a server
/// listens on it the path is live and refused ([`io::ErrorKind::AddrInUse`]); if nobody does
/// (a server that died without removing it) it is stale and replaced. Anything else is refused.
pub fn bind_unix(path: &Path) -> io::Result<UnixListener> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => {
            if someone_listens(path)? {
                return Err(io::Error::new(
                    io::ErrorKind::AddrInUse,
                    format!(
                        "{} is the socket of a running server; refusing to take it over \
                         (stop that server or choose another path)",
                        path.display()
                    ),
                ));
            }
            std::fs::remove_file(path)?
        }
        Ok(_) => {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!(
                    "{} exists and is not a socket; refusing to replace it",
                    path.display()
                ),
            ))
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    UnixListener::bind(path)
}

/// Whether a server accepts connections on the socket file `path`: a non-blocking connect
/// succeeds, or finds its backlog full (EAGAIN), when one listens; ECONNREFUSED when none does.
fn someone_listens(path: &Path) -> io::Result<bool> {
    use std::os::unix::ffi::OsStrExt;
    let bytes = path.as_os_str().as_bytes();
    // SAFETY: sockaddr_un is plain old data; all-zero is a valid value.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    if bytes.len() >= addr.sun_path.len() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("socket path {} is too long", path.display()),
        ));
    }
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (dst, src) in addr.sun_path.iter_mut().zip(bytes) {
        *dst = *src as libc::c_char;
    }
    // SAFETY: a fresh socket; closed by the OwnedFd below.
    let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_NONBLOCK, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a valid descriptor this function owns.
    let _owned = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    let len = std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t;
    // SAFETY: `addr` is a valid sockaddr_un of `len` bytes for the duration of the call.
    let r = unsafe { libc::connect(fd, std::ptr::addr_of!(addr).cast(), len) };
    if r == 0 {
        return Ok(true);
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EAGAIN) | Some(libc::EINPROGRESS) => Ok(true),
        Some(libc::ECONNREFUSED) | Some(libc::ENOENT) => Ok(false),
        _ => Err(e),
    }
}

/// The identity (device, inode) of the socket file a server bound, so that it removes at exit
/// only the socket it created, never one another server put at the same path since.
fn socket_identity(path: &Path) -> io::Result<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(path).map(|m| (m.dev(), m.ino()))
}

/// Removes `path` if it is still the socket file `identity` names.
fn remove_own_socket(path: &Path, identity: (u64, u64)) {
    if socket_identity(path).is_ok_and(|now| now == identity) {
        let _ = std::fs::remove_file(path);
    }
}

/// stdin read with `poll(2)` so a blocked read wakes up to look at the shutdown flag.
/// Reads the file descriptor directly: `std::io::Stdin` buffers, and buffered bytes would be
/// invisible to `poll`.
struct PolledStdin {
    file: File,
}

impl Read for PolledStdin {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let mut pfd = libc::pollfd {
            fd: self.file.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let timeout_ms = SHUTDOWN_POLL.as_millis() as libc::c_int;
        // SAFETY: `pfd` is a valid pollfd for the duration of the call and nfds is 1.
        let ready = unsafe { libc::poll(&mut pfd, 1, timeout_ms) };
        if ready < 0 {
            return Err(io::Error::last_os_error());
        }
        if ready == 0 {
            return Err(io::ErrorKind::TimedOut.into());
        }
        // Readable, hung up or in error: read() reports which.
        self.file.read(buf)
    }
}

impl<B: NbdBackend> Server<B> {
    /// Serves according to `listen` until shutdown (or, for stdio, until the one connection
    /// ends), then flushes the backend.
    pub fn serve(&self, listen: &Listen) -> Result<(), ServerError> {
        match listen {
            Listen::Tcp(addr) => self.serve_tcp(addr),
            Listen::Unix(path) => self.serve_unix(path),
            Listen::Stdio => self.serve_stdio(),
        }
    }

    /// Binds `addr` and serves until shutdown, then flushes the backend.
    pub fn serve_tcp(&self, addr: impl ToSocketAddrs) -> Result<(), ServerError> {
        let listener = TcpListener::bind(addr)?;
        self.serve_tcp_listener(listener)
    }

    /// Serves an already bound listener (lets callers bind port 0 and read the port first).
    pub fn serve_tcp_listener(&self, listener: TcpListener) -> Result<(), ServerError> {
        self.accept_loop(&listener)
    }

    /// Binds `path` (refused when a live server holds it, see [`bind_unix`]) and serves until
    /// shutdown, then flushes the backend and removes the socket if the path still names the
    /// one it bound.
    pub fn serve_unix(&self, path: &Path) -> Result<(), ServerError> {
        let listener = bind_unix(path)?;
        let identity = socket_identity(path)?;
        let result = self.serve_unix_listener(listener);
        remove_own_socket(path, identity);
        result
    }

    /// Serves an already bound Unix listener until shutdown, then flushes the backend.
    pub fn serve_unix_listener(&self, listener: UnixListener) -> Result<(), ServerError> {
        self.accept_loop(&listener)
    }

    /// Serves one connection on stdin/stdout, then flushes the backend.
    pub fn serve_stdio(&self) -> Result<(), ServerError> {
        let stdin = File::from(io::stdin().as_fd().try_clone_to_owned()?);
        let stdout = File::from(io::stdout().as_fd().try_clone_to_owned()?);
        let result = self.serve_connection(PolledStdin { file: stdin }, stdout);
        let flushed = self.flush_backend();
        result?;
        flushed
    }

    fn accept_loop<A: Acceptor + Sync>(&self, listener: &A) -> Result<(), ServerError> {
        listener.set_nonblocking(true)?;
        let max = self.config().max_connections.max(1);
        let mut next_id: u64 = 0;
        std::thread::scope(|scope| {
            let mut live = Vec::new();
            let mut refusing = Vec::new();
            while !self.shutdown_flag().load(Ordering::Relaxed) {
                let serving = live.len();
                live.retain(|h: &std::thread::ScopedJoinHandle<'_, ()>| !h.is_finished());
                if serving > 0 && live.is_empty() {
                    // The last connection's thread has exited: what other threads freed of
                    // its memory after it collected is returned now, from the accept loop's
                    // thread (`mobius serve`'s main thread, where mimalloc also reclaims the
                    // heaps of exited threads). Seen under load: 127 MiB still held 60 s
                    // after four clients closed (serve_limits).
                    (self.config().release_memory)();
                }
                refusing.retain(|h: &std::thread::ScopedJoinHandle<'_, ()>| !h.is_finished());
                let stream = match listener.accept_stream() {
                    Ok(s) => s,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        std::thread::sleep(ACCEPT_POLL);
                        continue;
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => {
                        // EMFILE, ECONNABORTED, ...: transient for a server; do not spin.
                        eprintln!("mobius-nbd: accept failed: {e}");
                        std::thread::sleep(ACCEPT_POLL);
                        continue;
                    }
                };
                next_id += 1;
                let id = next_id;
                if live.len() < max {
                    live.push(scope.spawn(move || self.serve_accepted(id, stream)));
                } else if refusing.len() < REFUSALS_MAX {
                    eprintln!(
                        "mobius-nbd: {max} connections already open; refusing connection {id}"
                    );
                    refusing.push(scope.spawn(move || self.refuse_accepted(stream)));
                } else {
                    // Too many refusals under way: the greeting, then close (the socket is
                    // fresh, so 18 bytes never block).
                    let mut stream = stream;
                    let _ = io::Write::write_all(&mut stream, &crate::protocol::encode_greeting());
                }
            }
        });
        if self.backend_panicked() {
            return Err(ServerError::BackendPanicked);
        }
        self.flush_backend()
    }

    /// One accepted connection on its own thread. A panic in it (a backend call) stops the
    /// whole server: no connection goes on serving from a state left half-changed.
    fn serve_accepted<S: SplitStream>(&self, id: u64, stream: S) {
        let served = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let upgrade = match self.config().tls {
                Some(_) => Some(SocketUpgrade(stream.duplicate()?)),
                None => None,
            };
            let (r, w) = stream.split()?;
            self.serve_upgradable(r, w, upgrade)
        }));
        match served {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => eprintln!("mobius-nbd: connection {id}: {e}"),
            Err(_) => {
                eprintln!("mobius-nbd: connection {id} panicked; stopping the server");
                self.stop_after_panic();
            }
        }
    }

    /// A connection over `max_connections`: refused with NBD errors, then closed.
    fn refuse_accepted<S: SplitStream>(&self, stream: S) {
        if let Ok((mut r, mut w)) = stream.split() {
            self.refuse_connection(&mut r, &mut w);
        }
    }
}
