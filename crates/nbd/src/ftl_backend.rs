//! [`FtlBackend`]: any design as an NBD export.
//!
//! Each NBD request becomes exactly one host request to the FTL (issue #7), so a design's request
//! atomicity (OPTR) is NBD request atomicity. Requests are 512-byte aligned, not page aligned
//! (or any byte range, from a client that never committed to the block sizes): a write that
//! covers part of a page reads the page first and writes it back whole, still as one request. FLUSH is the FTL's flush; FUA is the write followed by a flush. All of that is the
//! host layer's ([`host::Host`], docs/host.md); this file adds NBD's view of it.
//!
//! With [`FtlBackend::with_atomic_requests`] (`mobius serve --atomic-requests`), each WRITE up
//! to the advertised maximum is one static transaction (SWRITE, synchronous): a power cut never
//! leaves part of a request on the device, so software that writes pages larger than a flash
//! page (PostgreSQL's 8 KiB, InnoDB's 16 KiB) may stop writing them twice (docs/nbd.md).

use crate::{BackendError, NbdBackend};
use ftl::{BlockDevice, FtlError, Promise};
use host::{Host, HostError};

/// A design as an NBD export: a [`Host`] (the one host layer) with NBD's errors.
pub struct FtlBackend {
    host: Host,
}

/// The NBD reply for a host error (each errno the host names, in NBD's terms).
pub fn backend_error(e: HostError) -> BackendError {
    match &e {
        HostError::OutOfRange { .. } | HostError::Device(FtlError::LpnOutOfRange { .. }) => {
            BackendError::OutOfRange
        }
        HostError::Device(FtlError::NoSpace) => BackendError::NoSpace,
        HostError::TooLarge { .. } => BackendError::TooLarge(e.to_string()),
        _ if e.errno() == host::errno::EIO => BackendError::Io(e.to_string()),
        _ => BackendError::Invalid(e.to_string()),
    }
}

impl FtlBackend {
    pub fn new(dev: Box<dyn BlockDevice>, start_ns: u64) -> FtlBackend {
        FtlBackend {
            host: Host::new(dev, start_ns),
        }
    }

    /// Applies every write request as one device transaction (a synchronous SWRITE of at most
    /// the design's largest transaction, within NBD's 32 MiB). Refused for a design without
    /// static transactions (OPTR already applies each request atomically: its promise).
    /// Transaction ids start at the wall clock's nanoseconds when the server starts, so a
    /// server restarted on the same image (after a power cut) never reuses one: a design may
    /// still hold a committed id on flash. One id per request, far fewer than one per ns.
    pub fn with_atomic_requests(self) -> Result<FtlBackend, HostError> {
        let since_epoch = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64);
        self.with_atomic_requests_from(since_epoch)
    }

    /// [`FtlBackend::with_atomic_requests`] with transaction ids from `first_uuid` (a seeded
    /// crash campaign, which must not depend on the wall clock).
    pub fn with_atomic_requests_from(self, first_uuid: u64) -> Result<FtlBackend, HostError> {
        let nbd_max = crate::protocol::BLOCK_SIZE_MAX_BYTES as u64 / self.host.page_bytes();
        Ok(FtlBackend {
            host: self.host.with_atomic_writes(nbd_max, first_uuid)?,
        })
    }

    /// A negative control only ([`Host::without_serializable_reads`]).
    pub fn without_serializable_reads(self) -> FtlBackend {
        FtlBackend {
            host: self.host.without_serializable_reads(),
        }
    }

    pub fn into_device(self) -> Box<dyn BlockDevice> {
        self.host.into_device()
    }

    pub fn device_mut(&mut self) -> &mut dyn BlockDevice {
        self.host.device_mut()
    }

    /// What the host asked of the design so far.
    pub fn host_stats(&self) -> &host::HostStats {
        self.host.stats()
    }

    /// The host layer the export runs on (its clock, how it splits requests).
    pub fn host(&self) -> &Host {
        &self.host
    }

    /// The host layer, to apply requests as this export does ([`NbdBackend`]'s methods are
    /// its calls with the error mapped by [`backend_error`]) with the host's error kept: the
    /// crash campaign's media checks read which page an EIO was for.
    pub fn host_mut(&mut self) -> &mut Host {
        &mut self.host
    }
}

impl NbdBackend for FtlBackend {
    fn size_bytes(&self) -> u64 {
        self.host.capacity_bytes()
    }
    fn preferred_block_size(&self) -> u32 {
        self.host.page_bytes() as u32
    }
    /// NBD's 32 MiB, or less: the largest atomic request, or the design's longest write
    /// ([`host::Host::max_write_pages`]).
    fn max_payload_bytes(&self) -> u32 {
        let nbd_max = crate::protocol::BLOCK_SIZE_MAX_BYTES;
        match self.host.max_write_pages() {
            Some(pages) => (pages * self.host.page_bytes()).min(nbd_max as u64) as u32,
            None => nbd_max,
        }
    }
    /// NBD_FLAG_CAN_MULTI_CONN promises that a FLUSH (or FUA) on any connection covers the
    /// writes completed on every connection. Every connection shares this one backend, so that
    /// holds for every design, and a design whose promise is about single writes or flushes
    /// (flush-only, durable writes; transactions are not reachable over NBD, so their plain
    /// writes follow durable-writes) keeps it whichever connection a write came on. An
    /// `ordered` design (OPTR) does not: its prefix semantics follow arrival order, and a
    /// client spreading one stream over connections (nbdfuse does, at random) makes arrival
    /// order differ from the order the file system issued, so the promise would no longer say
    /// anything about the file system's writes.
    fn multi_conn_safe(&self) -> bool {
        self.host.device().promise() != Promise::Ordered
    }
    fn read(&mut self, offset: u64, buf: &mut [u8], arrival_ns: u64) -> Result<u64, BackendError> {
        self.host
            .read(offset, buf, arrival_ns)
            .map_err(backend_error)
    }
    fn write(
        &mut self,
        offset: u64,
        data: &[u8],
        fua: bool,
        arrival_ns: u64,
    ) -> Result<u64, BackendError> {
        self.host
            .write(offset, data, fua, arrival_ns)
            .map_err(backend_error)
    }
    fn flush(&mut self, arrival_ns: u64) -> Result<u64, BackendError> {
        self.host.flush(arrival_ns).map_err(backend_error)
    }
    fn trim(&mut self, offset: u64, len: u64, arrival_ns: u64) -> Result<u64, BackendError> {
        self.host
            .trim(offset, len, arrival_ns)
            .map_err(backend_error)
    }
    fn write_zeroes(
        &mut self,
        offset: u64,
        len: u64,
        fua: bool,
        arrival_ns: u64,
    ) -> Result<u64, BackendError> {
        self.host
            .write_zeroes(offset, len, fua, arrival_ns)
            .map_err(backend_error)
    }
}
