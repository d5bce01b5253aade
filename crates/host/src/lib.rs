//! The one host layer (issue #20): where host requests meet a design.
//!
//! Every front end reaches a design through a [`Host`]: trace replay, the NBD server
//! (`mobius serve`), the NVMFS experiment's export of the kernel file systems, the workload
//! driver and the SQLite VFS's store. What a host interface does around an FTL is written here
//! once (docs/host.md):
//!
//! - **The clock**: calls to the design never go back in time (the contract of
//!   [`ftl::BlockDevice`]); a request arriving "earlier" than the last call is issued at it.
//! - **Byte requests**: range checks against the exported capacity; a write that covers part of
//!   a page reads that edge page first and writes it back whole, still as one device request
//!   (read-modify-write); trims and write-zeroes longer than one request are split at
//!   [`SPLIT_PAGES`]-page boundaries; a trim on a design without trim is ignored (and counted);
//!   FUA is the write followed by a flush at its acknowledgement; a flush also syncs the image.
//! - **Transactions**: SWRITE, DWRITE, ABORT and SREAD pass through with the same clock and
//!   statistics; [`Host::swrite_acknowledged`] waits for a completion the device held back
//!   ([`ftl::ACK_DEFERRED`], Möbius's merged SWRITEs); with [`Host::with_atomic_writes`] every
//!   byte write is one synchronous SWRITE (`mobius serve --atomic-requests`).
//! - **Fail-stop**: after an I/O error on the image, every request that would change the device
//!   fails with [`HostError::Failed`] (EIO), even one a design could take into its RAM.
//! - **Errors**: typed ([`HostError`]), each with its errno ([`HostError::errno`]) and whether it
//!   must stop a simulation ([`HostError::is_fatal`]).
//! - **Statistics** ([`HostStats`]) and, in check mode ([`Host::checked`]), the design's
//!   invariants after every request.
//!
//! Contents are real bytes, or (tag-only simulation, [`Host::tag_only`]) content tags: a tag
//! write gives each page a fresh tag, and the edge reads of a sub-page write are still issued
//! (they cost what they cost) but nothing is merged.

mod bytes;
mod error;
mod pages;
mod stats;

pub use error::{errno, HostError};
pub use stats::HostStats;

use flash::{Content, Lpn};
use ftl::{BlockDevice, PageOutcome, TxUuid};

/// Pages per device request when a trim or write-zeroes is split.
pub const SPLIT_PAGES: u64 = 1024;

/// Staging pages kept between byte writes (1 MiB of 4 KiB pages; bigger writes allocate).
const STAGING_KEEP_PAGES: usize = 256;

/// How a [`Host`] holds its design: owned (a server, a store) or borrowed (a replay).
pub trait DeviceHandle {
    fn dev(&self) -> &dyn BlockDevice;
    fn dev_mut(&mut self) -> &mut dyn BlockDevice;
}

impl DeviceHandle for Box<dyn BlockDevice> {
    fn dev(&self) -> &dyn BlockDevice {
        self.as_ref()
    }
    fn dev_mut(&mut self) -> &mut dyn BlockDevice {
        self.as_mut()
    }
}

impl<'a> DeviceHandle for &'a mut (dyn BlockDevice + 'a) {
    fn dev(&self) -> &dyn BlockDevice {
        &**self
    }
    fn dev_mut(&mut self) -> &mut dyn BlockDevice {
        &mut **self
    }
}

/// What a byte write puts in its pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Contents {
    Bytes,
    /// Tag-only: fresh content tags, numbered by the host.
    Tags,
}

/// `--atomic-requests`: every byte write is one synchronous SWRITE.
#[derive(Clone, Copy, Debug)]
struct AtomicWrites {
    /// Largest write in pages (the design's `max_tx_pages`, within the caller's bound).
    max_pages: u64,
    /// Reads are SREADs where the design has them: a read is served after every transaction
    /// that arrived before it committed, so a client never reads around its own write.
    sread: bool,
    next_uuid: u64,
}

/// A design behind the host interface. See the crate documentation.
pub struct Host<D: DeviceHandle = Box<dyn BlockDevice>> {
    dev: D,
    page_bytes: u64,
    /// The last instant handed to the design: calls never go back in time.
    clock_ns: u64,
    contents: Contents,
    check: bool,
    atomic: Option<AtomicWrites>,
    /// Write number of the next content tag (tag-only writes).
    next_tag_write: u64,
    /// Read results, reused from request to request.
    scratch: Vec<PageOutcome>,
    /// Page buffers a byte write is staged in, reused (a fresh allocation per page costs more
    /// than the copy into it).
    staging: Vec<Content>,
    /// A WRITE_ZEROES's tail page, read before its first piece is written (lpn, what it read,
    /// when), for its last piece ([`Host::write_zeroes`]).
    tail_read: Option<(u64, PageOutcome, u64)>,
    stats: HostStats,
}

impl<D: DeviceHandle> Host<D> {
    /// A host whose first request is at or after `start_ns`; contents are bytes.
    pub fn new(dev: D, start_ns: u64) -> Host<D> {
        let page_bytes = u64::from(dev.dev().flash().geometry().page_bytes);
        Host {
            dev,
            page_bytes,
            clock_ns: start_ns,
            contents: Contents::Bytes,
            check: false,
            atomic: None,
            next_tag_write: 1,
            scratch: Vec::new(),
            staging: Vec::new(),
            tail_read: None,
            stats: HostStats::default(),
        }
    }

    /// Tag-only contents: byte writes carry fresh content tags and reads are not copied out.
    pub fn tag_only(mut self) -> Host<D> {
        self.contents = Contents::Tags;
        self
    }

    /// Check mode: the design's invariants are checked after every request, and a broken one
    /// fails that request with [`HostError::Invariant`].
    pub fn checked(mut self, on: bool) -> Host<D> {
        self.check = on;
        self
    }

    /// Every byte write becomes one synchronous SWRITE of at most `max_pages` pages (and of at
    /// most the design's largest transaction); reads become SREADs where the design has them.
    /// Transaction ids start at `first_uuid`: a server restarted on an image must not reuse an
    /// id the design may still hold on flash.
    pub fn with_atomic_writes(
        mut self,
        max_pages: u64,
        first_uuid: u64,
    ) -> Result<Host<D>, HostError> {
        let design = self.device().design();
        let caps =
            self.capabilities()
                .filter(|c| c.static_tx)
                .ok_or(HostError::NoTransactions {
                    needs: "atomic writes",
                    design,
                })?;
        self.atomic = Some(AtomicWrites {
            max_pages: caps.max_tx_pages.min(max_pages).max(1),
            sread: caps.sread,
            next_uuid: first_uuid.max(1),
        });
        Ok(self)
    }

    /// A negative control only: atomic writes whose reads (and read-modify-write edge reads)
    /// are plain reads, not SREADs. On Möbius a plain read arriving before an earlier SWRITE
    /// committed returns the old pages, so a sub-page write then puts old sectors back; the
    /// NBD crash campaign must catch it (docs/nbd.md).
    pub fn without_serializable_reads(mut self) -> Host<D> {
        if let Some(atomic) = self.atomic.as_mut() {
            atomic.sread = false;
        }
        self
    }

    pub fn device(&self) -> &dyn BlockDevice {
        self.dev.dev()
    }

    pub fn device_mut(&mut self) -> &mut dyn BlockDevice {
        self.dev.dev_mut()
    }

    pub fn into_device(self) -> D {
        self.dev
    }

    pub fn page_bytes(&self) -> u64 {
        self.page_bytes
    }

    /// The exported capacity in bytes.
    pub fn capacity_bytes(&self) -> u64 {
        u64::from(self.device().logical_pages()) * self.page_bytes
    }

    /// The last instant handed to the design.
    pub fn clock_ns(&self) -> u64 {
        self.clock_ns
    }

    pub fn stats(&self) -> &HostStats {
        &self.stats
    }

    /// With atomic writes: the largest byte write, in pages.
    pub fn atomic_max_pages(&self) -> Option<u64> {
        self.atomic.map(|a| a.max_pages)
    }

    /// The largest byte write, in pages, if there is one: the design's longest write
    /// ([`BlockDevice::max_write_pages`]) and, with atomic writes, the transaction limit. A
    /// longer write is refused with [`HostError::TooLarge`], never split.
    pub fn max_write_pages(&self) -> Option<u64> {
        let device = self.device().max_write_pages().map(u64::from);
        match (self.atomic_max_pages(), device) {
            (Some(a), Some(d)) => Some(a.min(d)),
            (a, d) => a.or(d),
        }
    }

    /// The instant a request arriving at `arrival_ns` is handed to the design.
    fn at(&mut self, arrival_ns: u64) -> u64 {
        self.clock_ns = self.clock_ns.max(arrival_ns);
        // The flash's timing model may forget what ends before the host's clock.
        let clock = self.clock_ns;
        self.device_mut().flash_mut().raise_time_floor(clock);
        clock
    }

    /// Fail-stop: after an I/O error on the image nothing may change the device.
    fn writable(&self) -> Result<(), HostError> {
        match self.device().flash().failure() {
            Some(reason) => Err(HostError::Failed { reason }),
            None => Ok(()),
        }
    }

    /// A request that may change the device: refused after an image failure (fail-stop),
    /// issued at the host's clock, then (check mode) followed by the invariants.
    fn modify<T>(
        &mut self,
        arrival_ns: u64,
        request: impl FnOnce(&mut Self, u64) -> Result<T, HostError>,
    ) -> Result<T, HostError> {
        let result = self.writable().and_then(|()| {
            let at = self.at(arrival_ns);
            request(self, at)
        });
        self.finish(result)
    }

    /// Ends a request: in check mode a broken invariant replaces its result.
    fn finish<T>(&mut self, result: Result<T, HostError>) -> Result<T, HostError> {
        if self.check {
            if let Err(reason) = self.device().check_invariants() {
                let design = self.device().design();
                return Err(HostError::Invariant { design, reason });
            }
        }
        result
    }

    /// The logical pages covering bytes `[offset, offset + len)`.
    pub fn span(&self, offset: u64, len: u64) -> Result<(Lpn, u32), HostError> {
        let capacity_bytes = self.capacity_bytes();
        let out_of_range = HostError::OutOfRange {
            offset,
            len,
            capacity_bytes,
        };
        let end = offset.checked_add(len).ok_or(out_of_range.clone())?;
        if end > capacity_bytes {
            return Err(out_of_range);
        }
        let first = offset / self.page_bytes;
        let last = end.div_ceil(self.page_bytes);
        Ok((Lpn(first as u32), (last - first) as u32))
    }

    /// A fresh content tag for `lpn` (tag-only writes).
    fn fresh_tag(&mut self, lpn: u32) -> Content {
        let write = self.next_tag_write;
        self.next_tag_write += 1;
        Content::Tag(flash::ContentTag { lpn, write })
    }

    /// The next transaction id of atomic writes.
    fn next_atomic_uuid(&mut self) -> TxUuid {
        let atomic = self.atomic.as_mut().expect("atomic writes on");
        let uuid = TxUuid(atomic.next_uuid);
        atomic.next_uuid += 1;
        uuid
    }
}

#[cfg(test)]
mod tests;
