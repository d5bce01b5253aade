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
use std::time::Duration;

use crate::server::{Server, ServerError, SHUTDOWN_POLL};
use crate::NbdBackend;

/// How long a reply write may block on a client that stopped reading before the connection
/// is dropped.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(30);
/// How often the accept loops look at the shutdown flag.
pub const ACCEPT_POLL: Duration = Duration::from_millis(20);

/// Where to serve.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Listen {
    /// A TCP address such as `127.0.0.1:10809` (10809 is the NBD port).
    Tcp(String),
    /// A Unix socket path; a stale socket file there is replaced, and removed on exit.
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
trait SplitStream: Read + io::Write + Send + Sized {
    fn split(self) -> io::Result<(Self, Self)>;
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
}

impl SplitStream for UnixStream {
    fn split(self) -> io::Result<(Self, Self)> {
        self.set_nonblocking(false)?;
        self.set_read_timeout(Some(SHUTDOWN_POLL))?;
        self.set_write_timeout(Some(WRITE_TIMEOUT))?;
        let w = self.try_clone()?;
        Ok((self, w))
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

/// Binds a Unix socket at `path`, replacing a stale socket file (but nothing else).
pub fn bind_unix(path: &Path) -> io::Result<UnixListener> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => std::fs::remove_file(path)?,
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

    /// Binds `path` and serves until shutdown, then flushes the backend and removes the socket.
    pub fn serve_unix(&self, path: &Path) -> Result<(), ServerError> {
        let listener = bind_unix(path)?;
        let result = self.serve_unix_listener(listener);
        let _ = std::fs::remove_file(path);
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
            while !self.shutdown_flag().load(Ordering::Relaxed) {
                live.retain(|h: &std::thread::ScopedJoinHandle<'_, ()>| !h.is_finished());
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
                if live.len() >= max {
                    eprintln!("mobius-nbd: {max} connections already open; closing a new one");
                    continue;
                }
                next_id += 1;
                let id = next_id;
                live.push(scope.spawn(move || self.serve_accepted(id, stream)));
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
            stream
                .split()
                .map_err(ServerError::from)
                .and_then(|(r, w)| self.serve_connection(r, w))
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
}
