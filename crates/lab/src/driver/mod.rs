//! The request driver: the one place a simulation's requests reach a design.
//!
//! [`Driver`] holds a design behind the host layer ([`host::Host`]: its clock, fail-stop, check
//! mode, held completions) and gives every page a request writes its content tag, `ContentTag {
//! lpn, write }`, from one host-wide write number, so any page read back (after a power cut too)
//! names the request that wrote it; it numbers static transactions too. Every request is a
//! [`HostOp`], issued at its arrival by [`Driver::issue`].
//!
//! What decides the arrivals is a mode of the driver:
//! - [`closed_loop`]: a seeded workload generator with a queue depth of outstanding requests,
//!   recording the host log the crash checker judges (`mobius bench`, the crash campaigns);
//! - [`replay`]: a block trace at its own arrival times, or closed loop (`mobius replay`);
//! - sequences an experiment writes down itself (a fill, a compound write, a transaction after
//!   the previous one's acknowledgement), through [`Driver`]'s requests.

pub mod clients;
pub mod closed_loop;
pub mod durability;
pub mod replay;

pub use closed_loop::{run, run_from, LogPositions, Origin, RunResult, RunStats};

use flash::{Content, ContentTag, Lpn};
use ftl::{BlockDevice, DwriteFlag, PageOutcome, SwriteMode, TxCompletion, TxUuid};
use host::{DeviceHandle, Host, HostError};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use workload::HostOp;

/// What the design answered to one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Issued {
    /// When the host was told it is done; [`ftl::ACK_DEFERRED`] for an SWRITE the design holds
    /// back (its completion comes from [`Driver::take_completions`]).
    pub ack_ns: u64,
    /// For a request that ends a transaction (and a plain write: its acknowledgement): from
    /// when it survives any power cut.
    pub durable_ns: Option<u64>,
    /// The write number of the request's first page (its pages have consecutive numbers).
    pub first_write: u64,
}

/// The content tag of the page `lpn` written with write number `write`.
pub fn tag(lpn: Lpn, write: u64) -> Content {
    Content::Tag(ContentTag { lpn: lpn.0, write })
}

/// A design behind the host layer, with the host's write numbers and transaction ids. See the
/// module documentation.
pub struct Driver<D: DeviceHandle = Box<dyn BlockDevice>> {
    host: Host<D>,
    next_write: u64,
    next_uuid: u64,
    /// Buffers reused from request to request: a write's contents, a read's pages.
    pages: Vec<Content>,
    reads: Vec<PageOutcome>,
}

impl<D: DeviceHandle> Driver<D> {
    /// Requests to `host` (its clock, contents and check mode as it is set up); write numbers
    /// from 0 and transaction ids from 1.
    pub fn new(host: Host<D>) -> Driver<D> {
        Driver {
            host,
            next_write: 0,
            next_uuid: 1,
            pages: Vec::new(),
            reads: Vec::new(),
        }
    }

    /// Requests to `dev` through a tag-only host whose first request is at or after
    /// `start_ns`: what an experiment on a simulated device uses.
    pub fn over(dev: D, start_ns: u64) -> Driver<D> {
        Driver::new(Host::new(dev, start_ns).tag_only())
    }

    /// The first write number (a run that goes on from another's continues its numbers).
    pub fn writes_from(mut self, first_write: u64) -> Driver<D> {
        self.next_write = first_write;
        self
    }

    /// The first transaction id [`fresh_uuid`](Self::fresh_uuid) hands out.
    pub fn uuids_from(mut self, first_uuid: u64) -> Driver<D> {
        self.next_uuid = first_uuid;
        self
    }

    /// The write number the next page written gets.
    pub fn next_write(&self) -> u64 {
        self.next_write
    }

    /// A transaction id not handed out before.
    pub fn fresh_uuid(&mut self) -> TxUuid {
        let uuid = TxUuid(self.next_uuid);
        self.next_uuid += 1;
        uuid
    }

    pub fn host(&self) -> &Host<D> {
        &self.host
    }

    pub fn host_mut(&mut self) -> &mut Host<D> {
        &mut self.host
    }

    pub fn device(&self) -> &dyn BlockDevice {
        self.host.device()
    }

    pub fn device_mut(&mut self) -> &mut dyn BlockDevice {
        self.host.device_mut()
    }

    pub fn into_device(self) -> D {
        self.host.into_device()
    }

    /// The pages the last read or SREAD returned.
    pub fn last_reads(&self) -> &[PageOutcome] {
        &self.reads
    }

    /// Issues `op` arriving at `arrival_ns`. The pages it writes take the next write numbers
    /// whether the design takes the request or refuses it.
    pub fn issue(&mut self, op: &HostOp, arrival_ns: u64) -> Result<Issued, HostError> {
        let first_write = self.next_write;
        self.next_write += op.written_pages();
        self.reads.clear();
        let (ack_ns, durable_ns) = self.send(op, first_write, arrival_ns)?;
        Ok(Issued {
            ack_ns,
            durable_ns,
            first_write,
        })
    }

    /// One request through the host layer; (ack, durable).
    fn send(
        &mut self,
        op: &HostOp,
        first_write: u64,
        arrival: u64,
    ) -> Result<(u64, Option<u64>), HostError> {
        let host = &mut self.host;
        match op {
            HostOp::Write { start, count } => {
                self.pages.clear();
                self.pages
                    .extend((0..*count).map(|i| tag(Lpn(start.0 + i), first_write + u64::from(i))));
                host.write_pages(*start, &self.pages, arrival)
                    .map(|c| (c.ack_ns, Some(c.ack_ns)))
            }
            HostOp::Read { start, count } => host
                .read_pages(*start, *count, arrival, &mut self.reads)
                .map(|c| (c.ack_ns, None)),
            HostOp::Flush => host.flush(arrival).map(|ack| (ack, None)),
            HostOp::Trim { start, count } => host
                .trim_pages(*start, *count, arrival)
                .map(|c| (c.ack_ns, None)),
            HostOp::SWrite { uuid, lpns, mode } => {
                let pages: Vec<(Lpn, Content)> = (first_write..)
                    .zip(lpns)
                    .map(|(write, &l)| (l, tag(l, write)))
                    .collect();
                host.swrite(*uuid, &pages, *mode, arrival)
                    .map(|c| (c.ack_ns, c.durable_ns))
            }
            HostOp::DWrite { uuid, lpn, flag } => host
                .dwrite(*uuid, *lpn, &tag(*lpn, first_write), *flag, arrival)
                .map(|c| (c.ack_ns, c.durable_ns)),
            HostOp::Abort { uuid } => host.abort(*uuid, arrival).map(|c| (c.ack_ns, None)),
            HostOp::SRead { start, count } => host
                .sread(*start, *count, arrival, &mut self.reads)
                .map(|c| (c.ack_ns, None)),
        }
    }

    /// A write of `count` pages from `start`; its acknowledgement.
    pub fn write(&mut self, start: Lpn, count: u32, at: u64) -> Result<u64, HostError> {
        Ok(self.issue(&HostOp::Write { start, count }, at)?.ack_ns)
    }

    /// A flush; its acknowledgement.
    pub fn flush(&mut self, at: u64) -> Result<u64, HostError> {
        Ok(self.issue(&HostOp::Flush, at)?.ack_ns)
    }

    /// A read of `count` pages from `start` (the pages: [`last_reads`](Self::last_reads)); its
    /// acknowledgement.
    pub fn read(&mut self, start: Lpn, count: u32, at: u64) -> Result<u64, HostError> {
        Ok(self.issue(&HostOp::Read { start, count }, at)?.ack_ns)
    }

    /// A static transaction of `lpns` under a fresh id: the id and what the design answered.
    pub fn swrite(
        &mut self,
        lpns: &[Lpn],
        mode: SwriteMode,
        at: u64,
    ) -> Result<(TxUuid, Issued), HostError> {
        let uuid = self.fresh_uuid();
        let op = HostOp::SWrite {
            uuid,
            lpns: lpns.to_vec(),
            mode,
        };
        Ok((uuid, self.issue(&op, at)?))
    }

    /// One page of the dynamic transaction `uuid`.
    pub fn dwrite(
        &mut self,
        uuid: TxUuid,
        lpn: Lpn,
        flag: DwriteFlag,
        at: u64,
    ) -> Result<Issued, HostError> {
        self.issue(&HostOp::DWrite { uuid, lpn, flag }, at)
    }

    /// Aborts the running transaction `uuid`; the acknowledgement.
    pub fn abort(&mut self, uuid: TxUuid, at: u64) -> Result<u64, HostError> {
        Ok(self.issue(&HostOp::Abort { uuid }, at)?.ack_ns)
    }

    /// Completions of SWRITEs the design held back, known by `now_ns` (`u64::MAX`: all).
    pub fn take_completions(
        &mut self,
        now_ns: u64,
    ) -> Result<Vec<(TxUuid, TxCompletion)>, HostError> {
        self.host.take_completions(now_ns)
    }

    /// Writes pages `0..pages` once, in requests of `chunk` pages, each arriving at the
    /// previous one's acknowledgement from `at`; the last acknowledgement.
    pub fn fill(&mut self, pages: u32, chunk: u32, at: u64) -> Result<u64, HostError> {
        let mut t = at;
        let mut lpn = 0;
        while lpn < pages {
            let n = chunk.min(pages - lpn);
            t = self.write(Lpn(lpn), n, t)?;
            lpn += n;
        }
        Ok(t)
    }
}

/// A transaction committed by [`Driver::commit`]: its id (none for plain writes) and its
/// acknowledgement ([`ftl::ACK_DEFERRED`] if the design holds it back).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Committed {
    pub uuid: Option<TxUuid>,
    pub ack_ns: u64,
}

impl<D: DeviceHandle> Driver<D> {
    /// Commits the pages `writes` as one transaction arriving at `at`, the way the design can:
    /// with `commit` = `Some(mode)`, one SWRITE of that mode where the design has static
    /// transactions (and the transaction has two pages or more), else a DWRITE chain sent back
    /// to back (every page arriving at `at`, so other clients' requests are still issued in
    /// time order); with `None`, one plain single-page write per page, all at `at` (no
    /// atomicity: the non-transactional reference). The acknowledgement is the last page's.
    pub fn commit(
        &mut self,
        writes: &[Lpn],
        commit: Option<SwriteMode>,
        at: u64,
    ) -> Result<Committed, HostError> {
        let Some(mode) = commit else {
            let mut end = at;
            for &l in writes {
                end = end.max(self.write(l, 1, at)?);
            }
            return Ok(Committed {
                uuid: None,
                ack_ns: end,
            });
        };
        let uuid = self.fresh_uuid();
        let caps =
            self.host
                .capabilities()
                .ok_or(HostError::Device(ftl::FtlError::Unsupported(
                    "transactions",
                )))?;
        let ack_ns = if caps.static_tx && writes.len() >= 2 {
            let op = HostOp::SWrite {
                uuid,
                lpns: writes.to_vec(),
                mode,
            };
            self.issue(&op, at)?.ack_ns
        } else {
            let mut t = at;
            for (i, &l) in writes.iter().enumerate() {
                let flag = dwrite_flag(i, writes.len());
                t = t.max(self.dwrite(uuid, l, flag, at)?.ack_ns);
            }
            t
        };
        Ok(Committed {
            uuid: Some(uuid),
            ack_ns,
        })
    }

    /// Plain writes of `pages` (each page its own content), all arriving at `at`, in runs of
    /// 64: a run of consecutive pages as one request, other pages one request each; then a
    /// flush at `at`. Returns the flush's acknowledgement.
    pub fn write_and_flush(&mut self, pages: &[Lpn], at: u64) -> Result<u64, HostError> {
        for chunk in pages.chunks(64) {
            let contiguous = chunk.windows(2).all(|w| w[1].0 == w[0].0 + 1);
            if contiguous {
                self.write(chunk[0], chunk.len() as u32, at)?;
            } else {
                for &l in chunk {
                    self.write(l, 1, at)?;
                }
            }
        }
        self.flush(at)
    }
}

/// A closed loop's outstanding requests: while `depth` of them are outstanding, the next one
/// arrives when the earliest completes (arrivals never go back in time).
#[derive(Clone, Debug)]
pub struct Queue {
    depth: usize,
    outstanding: BinaryHeap<Reverse<u64>>,
    clock_ns: u64,
}

impl Queue {
    /// A queue of `depth` (at least 1) whose first requests arrive at `start_ns`.
    pub fn new(depth: usize, start_ns: u64) -> Queue {
        Queue {
            depth: depth.max(1),
            outstanding: BinaryHeap::new(),
            clock_ns: start_ns,
        }
    }

    /// When the next request arrives: now while the queue has room, else when the earliest
    /// outstanding request completes.
    pub fn next_arrival(&mut self) -> u64 {
        if self.outstanding.len() >= self.depth {
            if let Some(Reverse(done)) = self.outstanding.pop() {
                self.clock_ns = self.clock_ns.max(done);
            }
        }
        self.clock_ns
    }

    /// The last arrival the queue handed out (or the instant it restarted at).
    pub fn clock_ns(&self) -> u64 {
        self.clock_ns
    }

    /// A request that arrived is acknowledged at `ack_ns`.
    pub fn completed(&mut self, ack_ns: u64) {
        self.outstanding.push(Reverse(ack_ns));
    }

    /// Forgets the outstanding requests: the next ones arrive from `ns` (a phase that starts
    /// once everything before it is done).
    pub fn restart_at(&mut self, ns: u64) {
        self.outstanding.clear();
        self.clock_ns = ns;
    }
}

/// Where a dynamic transaction of `len` pages puts its page `i`: HEAD, BODY…, REAR (a
/// one-page transaction is SINGLE).
pub fn dwrite_flag(i: usize, len: usize) -> DwriteFlag {
    match (i, len) {
        (_, 1) => DwriteFlag::Single,
        (0, _) => DwriteFlag::Head,
        (i, n) if i + 1 == n => DwriteFlag::Rear,
        _ => DwriteFlag::Body,
    }
}
