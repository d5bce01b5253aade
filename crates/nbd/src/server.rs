//! The connection engine: handshake, then a reader thread and a writer thread per connection.
//!
//! ## Simulated time
//!
//! Sim time 0 is the moment [`Server::new`] ran. A request's simulated arrival time is
//!
//! ```text
//! arrival_i = max(arrival_{i-1}, wall-clock ns since server start, taken when its header was read)
//! ```
//!
//! computed under the backend lock, so the backend sees non-decreasing arrivals across all
//! connections. The formula is the same with and without pacing; what pacing changes is
//! when the reply leaves:
//!
//! - **pacing on**: the reply is held until wall-clock ns since start >= the completion time
//!   the backend returned. A slow simulated device therefore looks slow to the client, which
//!   throttles itself, and arrival times reflect a real closed loop.
//! - **pacing off**: the reply leaves as soon as the backend returns. If the simulated device is
//!   slower than the host, its completion times run ahead of wall-clock time and simulated
//!   queues grow; use pacing when the simulated latencies matter.
//!
//! ## Threads and bounds
//!
//! The calling thread reads requests and runs them against the backend in arrival order. Without
//! pacing it also sends each reply itself, in arrival order (no hand-off). With pacing a scoped
//! writer thread sends the replies. With pacing, replies leave in order of completion
//! time (ties in arrival order); NBD clients match replies by handle, so this is allowed.
//!
//! What one client can take is bounded (docs/nbd.md, "Limits"):
//! - **Memory.** Without pacing a connection holds one request buffer (at most 32 MiB, reused
//!   for write payloads and read data) and 256 KiB each way of socket buffering. With pacing
//!   every WRITE payload and every READ's data is counted against the connection's budget
//!   ([`ServerConfig::connection_buffer_bytes`]) from before it is read or run until its reply
//!   has left; a request that does not fit waits, and while it waits nothing more is read
//!   from that client: replies the client does not read stop the server reading its requests
//!   (back-pressure through TCP). At most [`PENDING_REPLIES_MAX`] replies wait in the writer.
//!   When a connection ends its buffers are freed and given back to the kernel
//!   ([`ServerConfig::release_memory`]).
//! - **Time.** The handshake (TLS included) must end within
//!   [`ServerConfig::handshake_timeout`] of the connection; a reply write waits at most
//!   [`crate::timeouts::WRITE_TIMEOUT`] for a client that stopped reading.
//! - **Connections.** At most [`ServerConfig::max_connections`] are served; the accept loops
//!   answer a further one with the greeting and NBD_REP_ERR_POLICY to its options (see
//!   [`Server::refuse_connection`]), then close it.

use std::collections::BinaryHeap;
use std::io::{self, Read, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TryRecvError};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::error::ServerError;
use crate::protocol::*;
use crate::timeouts::SHUTDOWN_POLL;
use crate::tls::{TlsConfig, TlsMode};
use crate::trace::{TraceRecord, TraceWriter};
use crate::NbdBackend;

/// Replies that may wait in the writer thread (pacing holds them).
pub const PENDING_REPLIES_MAX: usize = 1024;
/// Default of [`ServerConfig::connection_buffer_bytes`].
pub const CONNECTION_BUFFER_DEFAULT_BYTES: usize = 64 << 20;
/// Least [`ServerConfig::connection_buffer_bytes`]: the longest READ or WRITE must fit.
pub const CONNECTION_BUFFER_MIN_BYTES: usize = BLOCK_SIZE_MAX_BYTES as usize;
/// Default of [`ServerConfig::max_connections`].
pub const MAX_CONNECTIONS_DEFAULT: usize = 16;
/// Default of [`ServerConfig::handshake_timeout`] (qemu-nbd's default handshake limit).
pub const HANDSHAKE_TIMEOUT_DEFAULT: Duration = Duration::from_secs(10);
/// Connections beyond the limit answered with NBD_REP_ERR_POLICY at the same time; more are
/// closed right after the greeting.
pub const REFUSALS_MAX: usize = 4;
/// How long a refused connection may take to send its options before it is closed.
pub const REFUSAL_TIMEOUT: Duration = Duration::from_secs(2);
/// Options a client may send before the transmission phase.
pub const OPTIONS_PER_HANDSHAKE_MAX: u32 = 256;
/// After shutdown is requested, how long a half-received request may take to complete.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);
/// Capacity of the reader -> writer channel.
const REPLY_CHANNEL_CAPACITY: usize = 8;
/// Read and write buffers of a connection served without pacing.
const INLINE_BUFFER_BYTES: usize = 256 << 10;
/// Chunk used to discard an oversize write payload without holding it.
const DISCARD_CHUNK_BYTES: usize = 64 << 10;

/// Server settings.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Name listed by NBD_OPT_LIST. The empty name (the clients' default) is accepted too.
    pub export_name: String,
    /// Description listed by NBD_OPT_LIST and sent for NBD_INFO_DESCRIPTION.
    pub description: String,
    /// Hold each reply until wall-clock time since server start reaches its simulated
    /// completion time.
    pub pacing: bool,
    /// Connections served at once; the accept loops refuse more (greeting, then
    /// NBD_REP_ERR_POLICY to every option, then close).
    pub max_connections: usize,
    /// From connect to the end of the handshake (TLS included); a client slower than this is
    /// disconnected, so idle sockets cannot hold connection slots.
    pub handshake_timeout: Duration,
    /// Bytes of WRITE payloads and READ data one connection may hold at once (with pacing,
    /// replies waiting to leave); at least [`CONNECTION_BUFFER_MIN_BYTES`] (smaller values are
    /// raised to it).
    pub connection_buffer_bytes: usize,
    /// A read-only export: NBD_FLAG_READ_ONLY is set and WRITE, TRIM and WRITE_ZEROES get EPERM.
    pub read_only: bool,
    /// TLS (NBD_OPT_STARTTLS) on socket connections; `None`: STARTTLS is not offered.
    pub tls: Option<Arc<TlsConfig>>,
    /// Called when a connection has ended, to give the memory it freed back to the kernel.
    /// The default trims glibc's heap; a program with another global allocator passes that
    /// allocator's collect (`mobius serve`: mimalloc's `mi_collect`).
    pub release_memory: fn(),
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            export_name: "mobius".to_string(),
            description: "mobius emulated flash SSD".to_string(),
            pacing: false,
            max_connections: MAX_CONNECTIONS_DEFAULT,
            handshake_timeout: HANDSHAKE_TIMEOUT_DEFAULT,
            connection_buffer_bytes: CONNECTION_BUFFER_DEFAULT_BYTES,
            read_only: false,
            tls: None,
            release_memory: release_free_memory,
        }
    }
}

/// How a connection ended without error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnectionEnd {
    /// The client sent NBD_CMD_DISC.
    Disconnected,
    /// The client closed the stream at a request or option boundary.
    ClientClosed,
    /// The client sent NBD_OPT_ABORT during the handshake.
    Aborted,
    /// The shutdown flag was set.
    Shutdown,
}

/// What a connection negotiated for the transmission phase.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Negotiated {
    /// 512 when the client committed to the advertised block sizes (NBD_OPT_GO requesting
    /// NBD_INFO_BLOCK_SIZE), else 1: its requests may be unaligned.
    min_block_bytes: u32,
}

/// Where a connection's handshake stands, kept across a STARTTLS upgrade.
pub(crate) struct Handshake {
    no_zeroes: bool,
    options: u32,
    deadline: Instant,
    /// STARTTLS can be acknowledged: TLS is configured and the transport can carry it.
    can_upgrade: bool,
    tls_active: bool,
}

/// How option haggling ended.
pub(crate) enum Haggled {
    Transmit(Negotiated),
    End(ConnectionEnd),
    /// NBD_REP_ACK to NBD_OPT_STARTTLS was sent: the TLS handshake comes next.
    StartTls,
}

/// A transport that can carry TLS after NBD_OPT_STARTTLS (a socket; stdio cannot).
pub(crate) trait Upgrade {
    type Reader: Read;
    type Writer: Write + Send;
    fn upgrade(
        self,
        tls: &TlsConfig,
        deadline: Instant,
        shutdown: &AtomicBool,
    ) -> Result<(Self::Reader, Self::Writer), ServerError>;
}

/// No upgrade: a transport without TLS.
pub(crate) enum Plain {}

impl Upgrade for Plain {
    type Reader = io::Empty;
    type Writer = io::Sink;
    fn upgrade(
        self,
        _: &TlsConfig,
        _: Instant,
        _: &AtomicBool,
    ) -> Result<(io::Empty, io::Sink), ServerError> {
        match self {}
    }
}

struct DeviceState<B> {
    backend: B,
    last_arrival_ns: u64,
    trace: Option<TraceWriter>,
}

/// An NBD server for one backend. Every connection shares the backend through a mutex.
pub struct Server<B: NbdBackend> {
    config: ServerConfig,
    start: Instant,
    shutdown: Arc<AtomicBool>,
    /// Set by a simulated power cut: from then on no reply leaves, pending ones included (a
    /// device without power answers nothing); see [`Server::with_power_off_flag`].
    power_off: Arc<AtomicBool>,
    /// Set when a backend call panicked (the server then stops).
    panicked: AtomicBool,
    size_bytes: u64,
    preferred_block_bytes: u32,
    /// Advertised maximum payload: the backend's, at most 32 MiB, a multiple of the preferred.
    max_block_bytes: u32,
    transmission_flags: u16,
    device: Mutex<DeviceState<B>>,
}

/// One reply on its way to the writer thread.
struct Reply {
    /// Wall-clock ns since server start before which the reply must not leave (0 = at once).
    due_ns: u64,
    seq: u64,
    handle: u64,
    error: u32,
    data: Option<Vec<u8>>,
    /// Bytes of the connection's budget this reply holds until it has left.
    held: usize,
}

impl PartialEq for Reply {
    fn eq(&self, other: &Self) -> bool {
        (self.due_ns, self.seq) == (other.due_ns, other.seq)
    }
}
impl Eq for Reply {}
impl PartialOrd for Reply {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Reply {
    /// Reversed, so the max-heap pops the earliest (due, seq) first.
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (other.due_ns, other.seq).cmp(&(self.due_ns, self.seq))
    }
}

enum Fill {
    Full,
    /// Clean end of stream before the first byte.
    Eof,
    /// Shutdown requested before the first byte.
    Shutdown,
}

/// The preferred block size as advertised: a power of two in [512 B, 32 MiB].
fn advertised_preferred(backend_preferred: u32) -> u32 {
    let clamped = backend_preferred.clamp(BLOCK_SIZE_MIN_BYTES, BLOCK_SIZE_MAX_BYTES);
    // Round down to a power of two (the protocol requires one).
    1u32 << (31 - clamped.leading_zeros())
}

/// The maximum block size to advertise: the backend's limit within the protocol's, rounded
/// down to a multiple of the preferred size (NBD spec: "the maximum block size ... MUST be ...
/// an integer multiple of the minimum", and at least the preferred).
fn advertised_max(backend_max: u32, preferred: u32) -> u32 {
    let max = backend_max.min(BLOCK_SIZE_MAX_BYTES);
    (max / preferred * preferred).max(preferred)
}

/// The lock, poisoned or not: only for reports after serving (`with_backend`) and setup.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The bytes of WRITE payloads and READ data a paced connection holds: taken by the reader
/// before it reads a payload or runs a READ, given back when the payload was applied or the
/// reply has left. A `take` that does not fit waits, and the reader with it.
struct Budget {
    held: Mutex<usize>,
    freed: Condvar,
    max: usize,
}

impl Budget {
    fn new(max: usize) -> Budget {
        Budget {
            held: Mutex::new(0),
            freed: Condvar::new(),
            max,
        }
    }

    /// Takes `bytes` (at most `max`), waiting while they do not fit; `false` when `give_up`
    /// said so first (the connection is ending).
    fn take(&self, bytes: usize, give_up: impl Fn() -> bool) -> bool {
        debug_assert!(bytes <= self.max, "{bytes} > {}", self.max);
        let mut held = lock(&self.held);
        while *held + bytes > self.max {
            if give_up() {
                return false;
            }
            held = self
                .freed
                .wait_timeout(held, SHUTDOWN_POLL)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        *held += bytes;
        true
    }

    fn give(&self, bytes: usize) {
        if bytes > 0 {
            let mut held = lock(&self.held);
            *held -= bytes;
            self.freed.notify_all();
        }
    }
}

/// Gives glibc's free memory back to the kernel (the default [`ServerConfig::release_memory`]).
/// An allocator keeps what a thread freed for later, so the reply buffers of a connection that
/// ended would otherwise stay in the process (issue 68: ~340 MB per closed `--pace` connection).
pub fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks the allocator's own free lists.
    unsafe {
        libc::malloc_trim(0);
    }
}

impl<B: NbdBackend> Server<B> {
    /// Creates a server; sim time 0 is now.
    pub fn new(backend: B, mut config: ServerConfig) -> Self {
        let mut flags = NBD_FLAG_HAS_FLAGS | NBD_FLAG_SEND_FLUSH;
        if config.read_only {
            flags |= NBD_FLAG_READ_ONLY;
        } else {
            flags |= NBD_FLAG_SEND_FUA | NBD_FLAG_SEND_TRIM | NBD_FLAG_SEND_WRITE_ZEROES;
        }
        if backend.multi_conn_safe() {
            flags |= NBD_FLAG_CAN_MULTI_CONN;
        }
        config.connection_buffer_bytes = config
            .connection_buffer_bytes
            .max(CONNECTION_BUFFER_MIN_BYTES);
        config.max_connections = config.max_connections.max(1);
        Server {
            start: Instant::now(),
            shutdown: Arc::new(AtomicBool::new(false)),
            power_off: Arc::new(AtomicBool::new(false)),
            panicked: AtomicBool::new(false),
            size_bytes: backend.size_bytes(),
            preferred_block_bytes: advertised_preferred(backend.preferred_block_size()),
            max_block_bytes: advertised_max(
                backend.max_payload_bytes(),
                advertised_preferred(backend.preferred_block_size()),
            ),
            transmission_flags: flags,
            device: Mutex::new(DeviceState {
                backend,
                last_arrival_ns: 0,
                trace: None,
            }),
            config,
        }
    }

    /// Records every request handed to the backend (format in [`crate::trace`]).
    pub fn with_trace(self, trace: TraceWriter) -> Self {
        lock(&self.device).trace = Some(trace);
        self
    }

    /// Uses an existing flag (for example one already registered with signal handlers).
    pub fn with_shutdown_flag(mut self, flag: Arc<AtomicBool>) -> Self {
        self.shutdown = flag;
        self
    }

    /// A flag that, once set, means the device lost power: no reply is sent any more, not even
    /// one already computed and waiting for its due time (`--power-cut-signal`; a shutdown
    /// without it sends what is pending). Set the shutdown flag too so the server stops.
    pub fn with_power_off_flag(mut self, flag: Arc<AtomicBool>) -> Self {
        self.power_off = flag;
        self
    }

    fn powered_off(&self) -> bool {
        self.power_off.load(Ordering::SeqCst)
    }

    /// Set it to make the accept loops and connections wind down; see
    /// [`crate::install_signal_handlers`].
    pub fn shutdown_flag(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.shutdown)
    }

    pub fn config(&self) -> &ServerConfig {
        &self.config
    }

    /// Transmission flags sent to clients.
    pub fn transmission_flags(&self) -> u16 {
        self.transmission_flags
    }

    /// Runs `f` on the backend under the lock (for tests and for the caller's reports).
    pub fn with_backend<R>(&self, f: impl FnOnce(&mut B) -> R) -> R {
        f(&mut lock(&self.device).backend)
    }

    /// Takes the backend back, for example to save the device state after serving; refused
    /// when a backend call panicked (its state is unknown: do not flush or save it).
    pub fn into_backend(self) -> Result<B, ServerError> {
        self.device
            .into_inner()
            .map(|d| d.backend)
            .map_err(|_| ServerError::BackendPanicked)
    }

    /// The device under its lock for serving. A poisoned lock means a backend call panicked
    /// with it held: the server stops (every connection sees the shutdown flag) instead of
    /// serving from a state nobody can vouch for.
    fn device(&self) -> Result<MutexGuard<'_, DeviceState<B>>, ServerError> {
        self.device.lock().map_err(|_| {
            self.stop_after_panic();
            ServerError::BackendPanicked
        })
    }

    /// Stops every connection after a backend panic.
    pub(crate) fn stop_after_panic(&self) {
        self.panicked.store(true, Ordering::SeqCst);
        self.shutdown.store(true, Ordering::SeqCst);
    }

    /// `true` once a backend call has panicked.
    pub fn backend_panicked(&self) -> bool {
        self.panicked.load(Ordering::SeqCst)
    }

    pub(crate) fn is_shutting_down(&self) -> bool {
        self.shutdown.load(Ordering::Relaxed)
    }

    /// Nanoseconds since the server started: the clock request arrivals are taken from.
    pub fn elapsed_ns(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// Flushes the backend and the trace. Every `serve_*` entry point calls this before it
    /// returns.
    pub fn flush_backend(&self) -> Result<(), ServerError> {
        let now_ns = self.elapsed_ns();
        let mut dev = self.device()?;
        let arrival = dev.last_arrival_ns.max(now_ns);
        dev.last_arrival_ns = arrival;
        if let Some(trace) = dev.trace.as_mut() {
            trace.flush()?;
        }
        dev.backend
            .flush(arrival)
            .map(|_| ())
            .map_err(ServerError::FinalFlush)
    }

    fn flush_trace(&self) {
        let Ok(mut dev) = self.device() else { return };
        if let Some(trace) = dev.trace.as_mut() {
            if let Err(e) = trace.flush() {
                eprintln!("mobius-nbd: flushing the trace failed: {e}");
            }
        }
    }

    /// Serves one connection over a pair of stream halves until the client disconnects, a
    /// protocol error occurs, or shutdown is requested. Does not flush the backend (the
    /// `serve_*` entry points do, once, when the server stops). NBD_OPT_STARTTLS is not
    /// acknowledged on such a connection (the socket transports upgrade theirs).
    ///
    /// `reader` may return `WouldBlock`/`TimedOut` errors (a socket read timeout); they are
    /// used to look at the shutdown flag and the handshake deadline and are otherwise retried.
    pub fn serve_connection<R: Read, W: Write + Send>(
        &self,
        reader: R,
        writer: W,
    ) -> Result<ConnectionEnd, ServerError> {
        self.serve_upgradable(reader, writer, None::<Plain>)
    }

    /// [`Self::serve_connection`] on a transport that can switch to TLS after STARTTLS.
    pub(crate) fn serve_upgradable<R: Read, W: Write + Send, U: Upgrade>(
        &self,
        mut reader: R,
        mut writer: W,
        upgrade: Option<U>,
    ) -> Result<ConnectionEnd, ServerError> {
        let deadline = Instant::now() + self.config.handshake_timeout;
        let can_upgrade = upgrade.is_some() && self.config.tls.is_some();
        let result = (|| {
            let mut hs = match self.greet(&mut reader, &mut writer, deadline, can_upgrade)? {
                Ok(hs) => hs,
                Err(end) => return Ok(end),
            };
            match self.negotiate(&mut hs, &mut reader, &mut writer)? {
                Haggled::Transmit(n) => return self.transmission(reader, writer, n),
                Haggled::End(end) => return Ok(end),
                Haggled::StartTls => {}
            }
            drop((reader, writer));
            let (Some(upgrade), Some(tls)) = (upgrade, self.config.tls.as_deref()) else {
                return Err(io::Error::other("STARTTLS acknowledged without TLS").into());
            };
            let (mut reader, mut writer) = upgrade.upgrade(tls, deadline, &self.shutdown)?;
            hs.tls_active = true;
            match self.negotiate(&mut hs, &mut reader, &mut writer)? {
                Haggled::Transmit(n) => self.transmission(reader, writer, n),
                Haggled::End(end) => Ok(end),
                Haggled::StartTls => Err(io::Error::other("a second STARTTLS acknowledged").into()),
            }
        })();
        self.flush_trace();
        (self.config.release_memory)();
        result
    }

    // ---- Reading with shutdown checks ---------------------------------------------------------

    /// Fills `buf`. `boundary` says a clean EOF or a shutdown before the first byte is a normal
    /// end rather than a truncation. Past `deadline` (the handshake's) the read fails with
    /// [`ServerError::HandshakeTimeout`].
    fn read_full(
        &self,
        reader: &mut impl Read,
        buf: &mut [u8],
        boundary: bool,
        context: &'static str,
        deadline: Option<Instant>,
    ) -> Result<Fill, ServerError> {
        let mut got = 0;
        let mut grace_deadline: Option<Instant> = None;
        while got < buf.len() {
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(ServerError::HandshakeTimeout);
            }
            match reader.read(&mut buf[got..]) {
                Ok(0) if got == 0 && boundary => return Ok(Fill::Eof),
                Ok(0) => return Err(ProtocolError::Truncated { context }.into()),
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    if !self.is_shutting_down() {
                        continue;
                    }
                    if got == 0 && boundary {
                        return Ok(Fill::Shutdown);
                    }
                    let grace =
                        *grace_deadline.get_or_insert_with(|| Instant::now() + SHUTDOWN_GRACE);
                    if Instant::now() >= grace {
                        return Err(ProtocolError::Truncated { context }.into());
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                    return Err(ProtocolError::Truncated { context }.into())
                }
                Err(e) => return Err(e.into()),
            }
        }
        Ok(Fill::Full)
    }

    /// Reads and drops `len` bytes, holding at most one chunk.
    fn discard(&self, reader: &mut impl Read, len: u64) -> Result<(), ServerError> {
        let mut chunk = vec![0u8; DISCARD_CHUNK_BYTES.min(len as usize)];
        let mut left = len;
        while left > 0 {
            let n = (chunk.len() as u64).min(left) as usize;
            self.read_full(
                reader,
                &mut chunk[..n],
                false,
                "an oversize write payload",
                None,
            )?;
            left -= n as u64;
        }
        Ok(())
    }

    // ---- Handshake ---------------------------------------------------------------------------

    /// Sends the greeting and reads the client flags: the handshake state, or how the client
    /// left.
    fn greet(
        &self,
        reader: &mut impl Read,
        writer: &mut impl Write,
        deadline: Instant,
        can_upgrade: bool,
    ) -> Result<Result<Handshake, ConnectionEnd>, ServerError> {
        writer.write_all(&encode_greeting())?;
        writer.flush()?;
        let mut flag_bytes = [0u8; 4];
        match self.read_full(
            reader,
            &mut flag_bytes,
            true,
            "the client flags",
            Some(deadline),
        )? {
            Fill::Full => {}
            Fill::Eof => return Ok(Err(ConnectionEnd::ClientClosed)),
            Fill::Shutdown => return Ok(Err(ConnectionEnd::Shutdown)),
        }
        let client = parse_client_flags(&flag_bytes)?;
        Ok(Ok(Handshake {
            no_zeroes: client.no_zeroes,
            options: 0,
            deadline,
            can_upgrade,
            tls_active: false,
        }))
    }

    /// Reads and answers options until one ends the haggling.
    fn negotiate(
        &self,
        hs: &mut Handshake,
        reader: &mut impl Read,
        writer: &mut impl Write,
    ) -> Result<Haggled, ServerError> {
        while hs.options < OPTIONS_PER_HANDSHAKE_MAX {
            hs.options += 1;
            let Some((option, data)) = self.read_option(reader, hs.deadline)? else {
                return Ok(Haggled::End(if self.is_shutting_down() {
                    ConnectionEnd::Shutdown
                } else {
                    ConnectionEnd::ClientClosed
                }));
            };
            let outcome = self.answer_option(writer, option, &data, hs)?;
            writer.flush()?;
            if let Some(outcome) = outcome {
                return Ok(outcome);
            }
        }
        Err(ProtocolError::TooManyOptions {
            max: OPTIONS_PER_HANDSHAKE_MAX,
        }
        .into())
    }

    /// One option header and its data; `None` when the client left (or shutdown came) at the
    /// option boundary.
    fn read_option(
        &self,
        reader: &mut impl Read,
        deadline: Instant,
    ) -> Result<Option<(u32, Vec<u8>)>, ServerError> {
        let mut header_bytes = [0u8; OPTION_HEADER_BYTES];
        match self.read_full(
            reader,
            &mut header_bytes,
            true,
            "an option header",
            Some(deadline),
        )? {
            Fill::Full => {}
            Fill::Eof | Fill::Shutdown => return Ok(None),
        }
        let header = parse_option_header(&header_bytes)?;
        if header.length > OPTION_DATA_MAX_BYTES {
            return Err(ProtocolError::OptionTooLong {
                option: header.option,
                length: header.length,
                max: OPTION_DATA_MAX_BYTES,
            }
            .into());
        }
        let mut data = vec![0u8; header.length as usize];
        self.read_full(reader, &mut data, false, "option data", Some(deadline))?;
        Ok(Some((header.option, data)))
    }

    fn export_known(&self, name: &[u8]) -> bool {
        name.is_empty() || name == self.config.export_name.as_bytes()
    }

    /// Answers one option. `Some` ends the haggling.
    fn answer_option(
        &self,
        w: &mut impl Write,
        option: u32,
        data: &[u8],
        hs: &Handshake,
    ) -> Result<Option<Haggled>, ServerError> {
        let tls_required = self
            .config
            .tls
            .as_ref()
            .is_some_and(|t| t.mode == TlsMode::Require)
            && !hs.tls_active;
        match option {
            NBD_OPT_ABORT => {
                // The client may already have closed; an error here changes nothing.
                let _ = w.write_all(&encode_option_reply(option, NBD_REP_ACK, &[]));
                Ok(Some(Haggled::End(ConnectionEnd::Aborted)))
            }
            NBD_OPT_STARTTLS => self.answer_starttls(w, data, hs),
            NBD_OPT_EXPORT_NAME if tls_required => Err(ProtocolError::TlsRequired.into()),
            _ if tls_required => {
                let msg = "this server requires TLS: send NBD_OPT_STARTTLS first";
                w.write_all(&encode_option_reply(
                    option,
                    NBD_REP_ERR_TLS_REQD,
                    msg.as_bytes(),
                ))?;
                Ok(None)
            }
            NBD_OPT_EXPORT_NAME => {
                if !self.export_known(data) {
                    return Err(ProtocolError::UnknownExport {
                        name: String::from_utf8_lossy(data).into_owned(),
                    }
                    .into());
                }
                let reply = encode_export_name_reply(
                    self.size_bytes,
                    self.transmission_flags,
                    hs.no_zeroes,
                );
                w.write_all(&reply)?;
                // The client never learnt the block sizes: any byte range is served.
                Ok(Some(Haggled::Transmit(Negotiated { min_block_bytes: 1 })))
            }
            NBD_OPT_LIST => {
                if !data.is_empty() {
                    let msg = OptionDataError::ListWithData {
                        length: data.len() as u32,
                    };
                    w.write_all(&encode_option_reply(
                        option,
                        NBD_REP_ERR_INVALID,
                        msg.to_string().as_bytes(),
                    ))?;
                    return Ok(None);
                }
                let server = encode_rep_server(
                    self.config.export_name.as_bytes(),
                    self.config.description.as_bytes(),
                );
                w.write_all(&encode_option_reply(option, NBD_REP_SERVER, &server))?;
                w.write_all(&encode_option_reply(option, NBD_REP_ACK, &[]))?;
                Ok(None)
            }
            NBD_OPT_INFO | NBD_OPT_GO => self.answer_info(w, option, data),
            _ => {
                let msg = format!("option {option} is not supported by this server");
                w.write_all(&encode_option_reply(
                    option,
                    NBD_REP_ERR_UNSUP,
                    msg.as_bytes(),
                ))?;
                Ok(None)
            }
        }
    }

    /// NBD_OPT_STARTTLS: ACK when TLS is configured and the transport can carry it, once.
    fn answer_starttls(
        &self,
        w: &mut impl Write,
        data: &[u8],
        hs: &Handshake,
    ) -> Result<Option<Haggled>, ServerError> {
        let option = NBD_OPT_STARTTLS;
        let (reply, msg) = if self.config.tls.is_none() {
            (
                NBD_REP_ERR_UNSUP,
                "this server does not offer TLS (mobius serve --tls)",
            )
        } else if hs.tls_active {
            (NBD_REP_ERR_INVALID, "TLS is already active")
        } else if !data.is_empty() {
            (NBD_REP_ERR_INVALID, "NBD_OPT_STARTTLS carries no data")
        } else if !hs.can_upgrade {
            (NBD_REP_ERR_POLICY, "TLS is not available on this transport")
        } else {
            w.write_all(&encode_option_reply(option, NBD_REP_ACK, &[]))?;
            return Ok(Some(Haggled::StartTls));
        };
        w.write_all(&encode_option_reply(option, reply, msg.as_bytes()))?;
        Ok(None)
    }

    fn answer_info(
        &self,
        w: &mut impl Write,
        option: u32,
        data: &[u8],
    ) -> Result<Option<Haggled>, ServerError> {
        let request = match parse_info_request(data) {
            Ok(r) => r,
            Err(e) => {
                let reply =
                    encode_option_reply(option, NBD_REP_ERR_INVALID, e.to_string().as_bytes());
                w.write_all(&reply)?;
                return Ok(None);
            }
        };
        if !self.export_known(&request.name) {
            let msg = format!(
                "unknown export {:?}; this server exports {:?}",
                String::from_utf8_lossy(&request.name),
                self.config.export_name
            );
            w.write_all(&encode_option_reply(
                option,
                NBD_REP_ERR_UNKNOWN,
                msg.as_bytes(),
            ))?;
            return Ok(None);
        }
        let export = encode_info_export(self.size_bytes, self.transmission_flags);
        w.write_all(&encode_option_reply(option, NBD_REP_INFO, &export))?;
        let block = encode_info_block_size(
            BLOCK_SIZE_MIN_BYTES,
            self.preferred_block_bytes,
            self.max_block_bytes,
        );
        w.write_all(&encode_option_reply(option, NBD_REP_INFO, &block))?;
        if request.requested.contains(&NBD_INFO_NAME) {
            let name = encode_info_string(NBD_INFO_NAME, self.config.export_name.as_bytes());
            w.write_all(&encode_option_reply(option, NBD_REP_INFO, &name))?;
        }
        if request.requested.contains(&NBD_INFO_DESCRIPTION) && !self.config.description.is_empty()
        {
            let d = encode_info_string(NBD_INFO_DESCRIPTION, self.config.description.as_bytes());
            w.write_all(&encode_option_reply(option, NBD_REP_INFO, &d))?;
        }
        w.write_all(&encode_option_reply(option, NBD_REP_ACK, &[]))?;
        if option != NBD_OPT_GO {
            return Ok(None);
        }
        // Only a GO that asked for the block sizes commits the client to them (proto.md,
        // NBD_INFO_BLOCK_SIZE); any other client may send unaligned requests.
        let committed = request.requested.contains(&NBD_INFO_BLOCK_SIZE);
        Ok(Some(Haggled::Transmit(Negotiated {
            min_block_bytes: if committed { BLOCK_SIZE_MIN_BYTES } else { 1 },
        })))
    }

    /// A connection over the limit: the greeting, then NBD_REP_ERR_POLICY (naming the limit)
    /// to every option until the client aborts, leaves, or [`REFUSAL_TIMEOUT`] passes;
    /// NBD_OPT_EXPORT_NAME, which cannot be refused with an error, closes it at once.
    pub(crate) fn refuse_connection(&self, reader: &mut impl Read, writer: &mut impl Write) {
        let deadline = Instant::now() + REFUSAL_TIMEOUT;
        let mut refuse = || -> Result<(), ServerError> {
            let Ok(mut hs) = self.greet(reader, writer, deadline, false)? else {
                return Ok(());
            };
            while hs.options < OPTIONS_PER_HANDSHAKE_MAX {
                hs.options += 1;
                let Some((option, _)) = self.read_option(reader, deadline)? else {
                    return Ok(());
                };
                if option == NBD_OPT_EXPORT_NAME {
                    return Ok(());
                }
                let (reply, msg) = if option == NBD_OPT_ABORT {
                    (NBD_REP_ACK, String::new())
                } else {
                    let max = self.config.max_connections;
                    (
                        NBD_REP_ERR_POLICY,
                        format!("server busy: {max} connections are open, the most it serves (--max-connections); try again later"),
                    )
                };
                writer.write_all(&encode_option_reply(option, reply, msg.as_bytes()))?;
                writer.flush()?;
                if option == NBD_OPT_ABORT {
                    return Ok(());
                }
            }
            Ok(())
        };
        let _ = refuse();
    }

    // ---- Transmission ------------------------------------------------------------------------

    fn limits(&self, negotiated: Negotiated) -> RequestLimits {
        RequestLimits {
            export_bytes: self.size_bytes,
            min_block_bytes: negotiated.min_block_bytes,
            read_only: self.config.read_only,
        }
    }

    fn transmission<R: Read, W: Write + Send>(
        &self,
        mut reader: R,
        writer: W,
        negotiated: Negotiated,
    ) -> Result<ConnectionEnd, ServerError> {
        let limits = self.limits(negotiated);
        if !self.config.pacing {
            return self.transmission_inline(reader, writer, &limits);
        }
        let writer_failed = AtomicBool::new(false);
        let budget = Budget::new(self.config.connection_buffer_bytes);
        let (tx, rx) = mpsc::sync_channel::<Reply>(REPLY_CHANNEL_CAPACITY);
        std::thread::scope(|scope| {
            let writer_thread = scope.spawn(|| {
                let result = self.write_replies(writer, rx, &budget);
                if result.is_err() {
                    writer_failed.store(true, Ordering::Relaxed);
                }
                result
            });
            let read_result = self.read_requests(&mut reader, tx, &writer_failed, &budget, &limits);
            // `tx` was moved into `read_requests` and is dropped by now, so the writer drains
            // what is pending and ends.
            let write_result = writer_thread
                .join()
                .unwrap_or_else(|_| Err(io::Error::other("reply writer thread panicked")));
            match (read_result, write_result) {
                (Err(e), _) => Err(e),
                (Ok(_), Err(e)) => Err(e.into()),
                (Ok(end), Ok(())) => Ok(end),
            }
        })
    }

    /// Without pacing every reply is due at once, so the thread that reads a request also sends
    /// its reply: no hand-off to a writer thread (two context switches per request). Requests
    /// are read through a buffer and replies are flushed when no complete request header is
    /// already waiting, so a busy pipeline costs a few large syscalls rather than many small
    /// ones. Replies leave in arrival order.
    fn transmission_inline<R: Read, W: Write>(
        &self,
        reader: R,
        writer: W,
        limits: &RequestLimits,
    ) -> Result<ConnectionEnd, ServerError> {
        let mut reader = io::BufReader::with_capacity(INLINE_BUFFER_BYTES, reader);
        let mut writer = io::BufWriter::with_capacity(INLINE_BUFFER_BYTES, writer);
        let result = self.serve_inline(&mut reader, &mut writer, limits);
        if self.powered_off() {
            // Buffered replies die with the device (dropping the BufWriter would send them).
            drop(writer.into_parts());
            return result;
        }
        // Replies already answered go out even when the connection ends on an error.
        let flushed = writer.flush();
        match (result, flushed) {
            (Err(e), _) => Err(e),
            (Ok(_), Err(e)) => Err(e.into()),
            (Ok(end), Ok(())) => Ok(end),
        }
    }

    fn serve_inline<R: Read, W: Write>(
        &self,
        reader: &mut io::BufReader<R>,
        writer: &mut W,
        limits: &RequestLimits,
    ) -> Result<ConnectionEnd, ServerError> {
        let mut seq: u64 = 0;
        // One buffer per connection, for write payloads and read data alike (a fresh 128 KiB+
        // allocation per request costs page faults and zeroing): at most 32 MiB.
        let mut buf: Vec<u8> = Vec::new();
        loop {
            if self.is_shutting_down() {
                return Ok(ConnectionEnd::Shutdown);
            }
            if reader.buffer().len() < REQUEST_BYTES {
                writer.flush()?;
            }
            let mut header = [0u8; REQUEST_BYTES];
            match self.read_full(reader, &mut header, true, "a request header", None)? {
                Fill::Full => {}
                Fill::Eof => return Ok(ConnectionEnd::ClientClosed),
                Fill::Shutdown => return Ok(ConnectionEnd::Shutdown),
            }
            let header_ns = self.elapsed_ns();
            let request = parse_request(&header)?;
            let has_payload = self.read_payload_into(reader, &request, &mut buf)?;
            seq += 1;
            if request.command == Command::Disc {
                self.record_disc(&request, header_ns);
                return Ok(ConnectionEnd::Disconnected);
            }
            let reply = self.execute(&request, limits, has_payload, &mut buf, header_ns, seq);
            if self.powered_off() {
                return Ok(ConnectionEnd::Shutdown);
            }
            writer.write_all(&encode_simple_reply(reply.error, reply.handle))?;
            if reply.error == 0 && request.command == Command::Read {
                writer.write_all(&buf)?;
            }
        }
    }

    fn read_requests(
        &self,
        reader: &mut impl Read,
        tx: SyncSender<Reply>,
        writer_failed: &AtomicBool,
        budget: &Budget,
        limits: &RequestLimits,
    ) -> Result<ConnectionEnd, ServerError> {
        let mut seq: u64 = 0;
        let give_up = || writer_failed.load(Ordering::Relaxed) || self.is_shutting_down();
        loop {
            if writer_failed.load(Ordering::Relaxed) {
                // The writer's error is what gets reported.
                return Ok(ConnectionEnd::ClientClosed);
            }
            if self.is_shutting_down() {
                return Ok(ConnectionEnd::Shutdown);
            }
            let mut header = [0u8; REQUEST_BYTES];
            match self.read_full(reader, &mut header, true, "a request header", None)? {
                Fill::Full => {}
                Fill::Eof => return Ok(ConnectionEnd::ClientClosed),
                Fill::Shutdown => return Ok(ConnectionEnd::Shutdown),
            }
            let header_ns = self.elapsed_ns();
            let request = parse_request(&header)?;
            // The bytes this request holds: its payload, or the data of a READ that will run.
            let held = match request.command {
                Command::Read if check_request(&request, limits).is_ok() => request.length,
                _ if request.payload_bytes() <= BLOCK_SIZE_MAX_BYTES => request.payload_bytes(),
                _ => 0,
            } as usize;
            if !budget.take(held, give_up) {
                continue;
            }
            let mut buf = Vec::new();
            let has_payload = self.read_payload_into(reader, &request, &mut buf)?;
            seq += 1;
            if request.command == Command::Disc {
                // No reply; the writer sends what is pending and the connection closes.
                self.record_disc(&request, header_ns);
                return Ok(ConnectionEnd::Disconnected);
            }
            let mut reply = self.execute(&request, limits, has_payload, &mut buf, header_ns, seq);
            if reply.error == 0 && request.command == Command::Read {
                reply.data = Some(buf);
                reply.held = held;
            } else {
                drop(buf);
                budget.give(held);
            }
            if tx.send(reply).is_err() {
                return Ok(ConnectionEnd::ClientClosed);
            }
        }
    }

    /// Reads a WRITE payload into `buf`; false when there is no payload to use. An oversize one
    /// is discarded chunk by chunk (never held); [`check_request`] then refuses the request
    /// with EINVAL.
    fn read_payload_into(
        &self,
        reader: &mut impl Read,
        request: &Request,
        buf: &mut Vec<u8>,
    ) -> Result<bool, ServerError> {
        let len = request.payload_bytes();
        if len == 0 {
            return Ok(false);
        }
        if len > BLOCK_SIZE_MAX_BYTES {
            self.discard(reader, u64::from(len))?;
            return Ok(false);
        }
        buf.resize(len as usize, 0);
        self.read_full(reader, buf, false, "a write payload", None)?;
        Ok(true)
    }

    fn record_disc(&self, request: &Request, header_ns: u64) {
        let Ok(mut dev) = self.device() else { return };
        let arrival = dev.last_arrival_ns.max(header_ns);
        dev.last_arrival_ns = arrival;
        if let Some(record) = crate::trace::record_of(request, arrival) {
            Self::trace(&mut dev, &record);
        }
    }

    fn trace(dev: &mut DeviceState<B>, record: &TraceRecord) {
        if let Some(trace) = dev.trace.as_mut() {
            if let Err(e) = trace.record(record) {
                eprintln!("mobius-nbd: trace write failed, tracing stops: {e}");
                dev.trace = None;
            }
        }
    }

    /// Validates and runs one request; returns the reply to send. `buf` holds the WRITE
    /// payload (`has_payload`), and receives a READ's data (its reply then carries `buf`).
    fn execute(
        &self,
        request: &Request,
        limits: &RequestLimits,
        has_payload: bool,
        buf: &mut Vec<u8>,
        header_ns: u64,
        seq: u64,
    ) -> Reply {
        let mut reply = Reply {
            due_ns: 0,
            seq,
            handle: request.handle,
            error: 0,
            data: None,
            held: 0,
        };
        if let Err(errno) = check_request(request, limits) {
            reply.error = errno.code();
            return reply;
        }
        let Ok(mut dev) = self.device() else {
            reply.error = Errno::Io.code();
            return reply;
        };
        let arrival = dev.last_arrival_ns.max(header_ns);
        dev.last_arrival_ns = arrival;
        if let Some(record) = crate::trace::record_of(request, arrival) {
            Self::trace(&mut dev, &record);
        }
        let (offset, len, fua) = (request.offset, u64::from(request.length), request.fua());
        let backend = &mut dev.backend;
        let result = match request.command {
            Command::Read => {
                buf.clear();
                buf.resize(request.length as usize, 0);
                backend.read(offset, buf, arrival)
            }
            Command::Write if has_payload => {
                debug_assert_eq!(buf.len() as u64, len);
                backend.write(offset, buf, fua, arrival)
            }
            Command::Flush => backend.flush(arrival),
            Command::Trim => backend.trim(offset, len, arrival),
            Command::WriteZeroes => backend.write_zeroes(offset, len, fua, arrival),
            Command::Write | Command::Disc | Command::Unsupported(_) | Command::Unknown(_) => {
                unreachable!("refused by check_request or handled by the reader")
            }
        };
        drop(dev);
        match result {
            Ok(completion_ns) => {
                if self.config.pacing {
                    reply.due_ns = completion_ns.max(arrival);
                }
            }
            Err(e) => reply.error = e.errno().code(),
        }
        reply
    }

    /// The writer thread: sends replies when they are due, batching flushes, and gives each
    /// reply's bytes back to the connection's budget once it has left.
    fn write_replies<W: Write>(
        &self,
        mut writer: W,
        rx: Receiver<Reply>,
        budget: &Budget,
    ) -> io::Result<()> {
        let mut pending: BinaryHeap<Reply> = BinaryHeap::new();
        let mut disconnected = false;
        let room = |pending: &BinaryHeap<Reply>| pending.len() < PENDING_REPLIES_MAX;
        loop {
            if self.powered_off() {
                // Pending replies die with the device.
                return Ok(());
            }
            // 1. Take everything that is ready without blocking.
            while !disconnected && room(&pending) {
                match rx.try_recv() {
                    Ok(r) => pending.push(r),
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => disconnected = true,
                }
            }
            // 2. Send every reply that is due.
            let now_ns = self.elapsed_ns();
            let hurry = self.is_shutting_down();
            let mut wrote = false;
            while pending.peek().is_some_and(|r| hurry || r.due_ns <= now_ns) {
                if self.powered_off() {
                    return Ok(());
                }
                let r = pending.pop().expect("peeked");
                writer.write_all(&encode_simple_reply(r.error, r.handle))?;
                if let Some(data) = &r.data {
                    writer.write_all(data)?;
                }
                budget.give(r.held);
                wrote = true;
            }
            if wrote {
                writer.flush()?;
                continue;
            }
            if pending.is_empty() && disconnected {
                return Ok(());
            }
            // 3. Wait for the next reply or for the earliest pending one to fall due.
            let wait = pending
                .peek()
                .map(|r| Duration::from_nanos(r.due_ns.saturating_sub(now_ns)).min(SHUTDOWN_POLL));
            match wait {
                None => match rx.recv() {
                    Ok(r) => pending.push(r),
                    Err(_) => disconnected = true,
                },
                Some(wait) if !disconnected && room(&pending) => match rx.recv_timeout(wait) {
                    Ok(r) => pending.push(r),
                    Err(RecvTimeoutError::Timeout) => {}
                    Err(RecvTimeoutError::Disconnected) => disconnected = true,
                },
                Some(wait) => std::thread::sleep(wait),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_advertised_maximum_is_the_backends_within_the_protocols() {
        assert_eq!(advertised_max(u32::MAX, 4096), BLOCK_SIZE_MAX_BYTES);
        assert_eq!(advertised_max(1 << 20, 4096), 1 << 20);
        assert_eq!(advertised_max(4096 * 63 + 100, 4096), 4096 * 63);
        assert_eq!(advertised_max(100, 4096), 4096);
    }

    #[test]
    fn preferred_block_size_is_clamped_to_a_power_of_two() {
        assert_eq!(advertised_preferred(0), 512);
        assert_eq!(advertised_preferred(4096), 4096);
        assert_eq!(advertised_preferred(6000), 4096);
        assert_eq!(advertised_preferred(u32::MAX), 32 << 20);
    }

    #[test]
    fn reply_heap_pops_earliest_due_then_arrival_order() {
        let r = |due_ns, seq| Reply {
            due_ns,
            seq,
            handle: seq,
            error: 0,
            data: None,
            held: 0,
        };
        let mut heap: BinaryHeap<Reply> = [r(50, 1), r(10, 2), r(10, 3), r(0, 4)]
            .into_iter()
            .collect();
        let order: Vec<u64> = std::iter::from_fn(|| heap.pop().map(|r| r.seq)).collect();
        assert_eq!(order, vec![4, 2, 3, 1]);
    }
}
