//! # mobius-nbd: an NBD server for the emulated SSD
//!
//! Serves any [`NbdBackend`] to standard NBD clients (qemu-io, qemu-img, nbdinfo, nbdcopy,
//! nbdfuse, the kernel's nbd-client) over TCP, a Unix socket, or stdin/stdout.
//!
//! What the server speaks, in one place:
//! - **Handshake**: fixed newstyle only. Options NBD_OPT_GO, NBD_OPT_INFO, NBD_OPT_EXPORT_NAME,
//!   NBD_OPT_LIST, NBD_OPT_ABORT, and NBD_OPT_STARTTLS when TLS is configured ([`tls`]); every
//!   other option (STRUCTURED_REPLY, meta contexts, ...) is answered NBD_REP_ERR_UNSUP, so
//!   clients fall back to simple replies. The handshake must end within a deadline.
//!   GO/INFO always carry NBD_INFO_EXPORT and NBD_INFO_BLOCK_SIZE (minimum 512, preferred = the
//!   backend's [`NbdBackend::preferred_block_size`], maximum 32 MiB).
//! - **Transmission flags**: HAS_FLAGS, SEND_FLUSH, SEND_FUA, SEND_TRIM, SEND_WRITE_ZEROES (or
//!   READ_ONLY instead of the last three on a read-only export, where changes get EPERM), and
//!   CAN_MULTI_CONN only when [`NbdBackend::multi_conn_safe`] says so.
//! - **Commands**: READ, WRITE, FLUSH, TRIM, WRITE_ZEROES, DISC. Requests must be non-empty,
//!   512-byte aligned in offset and length when the client committed to the block sizes (GO
//!   asking for NBD_INFO_BLOCK_SIZE; others may send any byte range, as the protocol asks),
//!   and READ/WRITE at most 32 MiB, else EINVAL
//!   (writes past the end get ENOSPC, as the protocol recommends). TRIM and WRITE_ZEROES carry
//!   no payload and may have any length the wire allows (< 4 GiB): backends split them. CACHE, BLOCK_STATUS and RESIZE get ENOTSUP,
//!   unknown commands and flags EINVAL. Backend errors map as [`BackendError::errno`] says.
//! - **Pipelining**: clients may keep many requests in flight; per connection, one thread reads
//!   them (buffered) and runs them against the backend in arrival order. Without pacing that
//!   thread sends each reply too, batching the flushes; with pacing another thread holds the
//!   replies and sends them in completion order rather than arrival order (NBD matches replies
//!   by handle).
//! - **Simulated time**: see [`server`] for how arrival times are assigned and how pacing holds
//!   replies until their simulated completion time.
//! - **Tracing**: every request handed to the backend is recorded as one text line; the format
//!   is documented in `trace::line`.
//! - **Shutdown**: [`Server::shutdown_flag`] is checked by the accept loops and between requests;
//!   [`install_signal_handlers`] sets it on SIGINT/SIGTERM. Every `serve_*` entry point flushes
//!   the backend before it returns.
//! - **Hostile input**: a bad magic, an oversize option, a truncated request or a client that
//!   vanishes ends the connection with a [`ServerError`]; nothing panics, and a write whose
//!   payload is cut short never reaches the backend.

pub mod crash;
pub mod error;
pub mod export;
pub mod ftl_backend;
pub mod memory;
pub mod protocol;
pub mod server;
pub mod timeouts;
pub mod tls;
pub mod trace;
pub mod transport;

pub use crate::trace::{TraceFlags, TraceOp, TraceRecord, TraceWriter};
pub use error::ServerError;
pub use export::{ssd_server, SsdServer};
pub use memory::MemoryBackend;
pub use protocol::{Errno, ProtocolError};
pub use server::{ConnectionEnd, Server, ServerConfig};
pub use transport::{install_signal_handlers, Listen};

use thiserror::Error;

/// Simulated time in nanoseconds since server start (sim time 0 = [`Server::new`]).
pub type SimTimeNs = u64;

/// Why a backend refused a request. Each variant maps to one NBD error value.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum BackendError {
    /// The range lies (partly) outside the device. The server checks ranges before calling
    /// the backend, so this only fires if the backend's notion of size is stricter.
    #[error("request lies outside the device")]
    OutOfRange,
    /// The device has no free space left for the write (ENOSPC to the client).
    #[error("no space left on the device")]
    NoSpace,
    /// An uncorrectable page or another media error (EIO to the client).
    #[error("I/O error: {0}")]
    Io(String),
    /// The backend rejects the request's shape (EINVAL to the client).
    #[error("invalid request: {0}")]
    Invalid(String),
    /// The request is larger than the backend can apply as one unit, e.g. a write beyond the
    /// advertised maximum under atomic requests (EOVERFLOW to the client).
    #[error("request too large: {0}")]
    TooLarge(String),
}

impl BackendError {
    /// The NBD error value the client sees.
    pub fn errno(&self) -> Errno {
        match self {
            BackendError::OutOfRange | BackendError::Invalid(_) => Errno::Inval,
            BackendError::NoSpace => Errno::NoSpc,
            BackendError::Io(_) => Errno::Io,
            BackendError::TooLarge(_) => Errno::Overflow,
        }
    }
}

/// A block device as the NBD server sees it. The FTL adapter implements this.
///
/// The server calls these methods from one thread at a time (they sit behind a mutex shared
/// by all connections), in the order requests arrived, with offsets and lengths already checked:
/// non-empty, inside `size_bytes()`, and at most 32 MiB for `read`/`write`; 512-byte aligned
/// unless the client never committed to the block sizes (then any byte range: a backend
/// must serve byte offsets, as [`host::Host`] does with read-modify-write)
/// (`trim` and `write_zeroes` may be up to 4 GiB - 512: split them if the device needs to).
///
/// Each request method gets the request's simulated arrival time in nanoseconds and returns
/// its simulated completion time in nanoseconds (which should be >= the arrival time; the
/// server clamps it if not).
pub trait NbdBackend: Send {
    /// Exported size in bytes (should be a multiple of 512; a tail shorter than 512 bytes is
    /// unreachable because requests must be 512-byte aligned).
    fn size_bytes(&self) -> u64;
    /// The block size clients should prefer (the flash page size). Clamped to a power of two
    /// between 512 bytes and 32 MiB when advertised.
    fn preferred_block_size(&self) -> u32;
    /// Largest read or write payload the backend accepts, advertised as the maximum block size
    /// (NBD_INFO_BLOCK_SIZE); the server's own limit is 32 MiB.
    fn max_payload_bytes(&self) -> u32 {
        protocol::BLOCK_SIZE_MAX_BYTES
    }
    /// Whether several connections may safely share the device (NBD_FLAG_CAN_MULTI_CONN:
    /// a FLUSH on one connection makes every completed write on every connection durable).
    fn multi_conn_safe(&self) -> bool;
    fn read(&mut self, offset: u64, buf: &mut [u8], arrival_ns: u64) -> Result<u64, BackendError>;
    fn write(
        &mut self,
        offset: u64,
        data: &[u8],
        fua: bool,
        arrival_ns: u64,
    ) -> Result<u64, BackendError>;
    fn flush(&mut self, arrival_ns: u64) -> Result<u64, BackendError>;
    fn trim(&mut self, offset: u64, len: u64, arrival_ns: u64) -> Result<u64, BackendError>;
    fn write_zeroes(
        &mut self,
        offset: u64,
        len: u64,
        fua: bool,
        arrival_ns: u64,
    ) -> Result<u64, BackendError>;
}
