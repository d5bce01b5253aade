//! The request surface traditional commit ([`crate::tc`]) and cyclic commit ([`crate::cyclic`])
//! share: TxFlash keeps one interface whatever the commit protocol (TxFlash §2: `WriteAtomic`,
//! `Abort`, plain reads and writes; a plain write is a one-page transaction). Each protocol
//! implements [`CommitProtocol`], the steps that differ; the block-device and transactional
//! requests are written once here and each design's trait impls call them.

use crate::format::Kind;
use flash::{Content, Lpn, OpCause, Ppn, ReadStatus};
use ftl::{
    check_range, BlockDevice, Completion, DwriteFlag, FtlError, PageOutcome, TxCapabilities,
    TxCompletion, TxUuid,
};
use rustc_hash::FxHashMap;

/// What a write to a page of an in-flight transaction does (TxFlash §2.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Isolation {
    /// Delay it (in simulated time) until the owner has committed.
    Wait,
    /// Refuse it with `FtlError::Conflict`.
    Refuse,
}

/// No pending transaction (the slot a new dynamic transaction isolates against).
pub(crate) const NO_SLOT: u32 = u32::MAX;

/// Largest OOB record of any TxFlash protocol (a read's OOB buffer).
const OOB_BUFFER: usize = 64;

/// Free blocks GC keeps in reserve by default (`gc_free_blocks`; TxFlash §5 gives no mark
/// [R]): two per chip, and two more.
pub fn default_gc_free_blocks(g: &flash::Geometry) -> u32 {
    2 * g.chips() + 2
}

/// The least `gc_free_blocks`: one victim's copies (a new GC block on each chip at most: the
/// allocator spreads them over the chips) and two more, since GC's copies take a free block
/// while the count is already below the mark and recovery closes the blocks a cut left open.
pub fn min_gc_free_blocks(g: &flash::Geometry) -> u32 {
    g.chips() + 2
}

/// `gc_free_blocks` of every protocol: GC runs while fewer blocks are free; the mark is also
/// kept below the exported capacity ([`hidden_pages`]).
pub(crate) fn gc_free_blocks(o: &ftl::DesignOptions, g: &flash::Geometry) -> Result<u32, FtlError> {
    ftl::gc_free_blocks(
        o,
        "txflash",
        default_gc_free_blocks(g),
        min_gc_free_blocks(g),
    )
}

/// Allocation streams (host pages, GC copies), each with an open block per chip.
pub(crate) const STREAMS: u32 = 2;

/// The longest transaction (`max_tx_bytes`, TxFlash §2.1: 4 MB by default) in pages. Left at
/// its default, it is at most 1/16 of the data pages, as Atomic-Write's: the device sets that
/// many pages aside for transactions in flight ([`hidden_pages`]), and 4 MB would hide a
/// quarter of a 16 MB device.
pub(crate) fn max_tx_pages(o: &ftl::DesignOptions, g: &flash::Geometry) -> Result<u32, FtlError> {
    let max_bytes: u64 = o.get("max_tx_bytes", crate::DEFAULT_MAX_TX_BYTES)?;
    let pages = (max_bytes / g.page_bytes as u64).max(1);
    if o.params.contains_key("max_tx_bytes") {
        return Ok(pages.min(u32::MAX as u64) as u32);
    }
    let data_pages = g.blocks() as u64 * (g.pages_per_block as u64 - 1);
    Ok(pages.min(data_pages / 16).max(1) as u32)
}

/// Data pages every protocol keeps below its exported capacity besides over-provisioning
/// (and TC's commit records): the GC reserve, an open block per stream and chip, and room for
/// `max_tx_pages` new pages of transactions in flight. Every protocol keeps a transaction's
/// previous versions live until it commits (TxFlash §3.2), so on a device whose exported
/// capacity is full, a transaction's new pages have only this room; without it the NBD crash
/// soak's longest-write test met "no space" at 128–512 pages on full, aged 16–48 MB devices.
/// The transactions in flight are held to it ([`check_room`]).
pub(crate) fn hidden_pages(g: &flash::Geometry, max_tx_pages: u32, gc_free_blocks: u32) -> u64 {
    let blocks = gc_free_blocks as u64 + STREAMS as u64 * g.chips() as u64;
    blocks * (g.pages_per_block as u64 - 1) + max_tx_pages as u64
}

/// Whether `pages` more new pages of transactions fit in the room the device sets aside
/// ([`hidden_pages`]) beside those of the transactions in flight: else `TxRoomTaken`.
pub(crate) fn check_room<P: CommitProtocol>(d: &P, pages: u64) -> Result<(), FtlError> {
    ftl::check_tx_room(pages, d.in_flight_pages(), d.max_tx() as u64)
}

/// What a TxFlash commit protocol does its own way.
pub(crate) trait CommitProtocol: BlockDevice {
    fn logical(&self) -> u32;
    /// Largest transaction in pages (`max_tx_bytes`).
    fn max_tx(&self) -> u32;
    /// The physical page `lpn` maps to, if any.
    fn mapped(&self, lpn: u32) -> Option<u32>;
    /// Bytes of OOB a host read fetches with each page.
    fn oob_len(&self) -> usize;
    /// Whether a page's OOB record marks it a trim's tombstone (it reads as unwritten).
    fn is_tombstone(&self, oob: &[u8]) -> bool;
    fn arrivals(&mut self) -> &mut ftl::ArrivalClock;
    /// The pending slot of the running dynamic transaction that holds `lpn`, else [`NO_SLOT`].
    fn lock_holder(&self, lpn: Lpn) -> u32;
    /// Until when a committed-but-not-yet-durable transaction keeps `lpn` busy.
    fn busy_until(&self, lpn: Lpn) -> u64;
    fn isolation(&self) -> Isolation;
    /// The id of pending transaction `slot`.
    fn slot_uuid(&self, slot: u32) -> TxUuid;
    /// Running transactions: id -> pending slot.
    fn running(&self) -> &FxHashMap<TxUuid, u32>;
    /// Recently committed transactions: id -> acknowledgement.
    fn recent(&mut self) -> &mut FxHashMap<TxUuid, u64>;
    /// One transaction of whole pages, committed before it returns its acknowledgement.
    fn write_atomic(
        &mut self,
        uuid: TxUuid,
        list: &[(Lpn, &Content)],
        kind: Kind,
        arrival: u64,
    ) -> Result<u64, FtlError>;
    /// Opens a pending transaction; its slot.
    fn open_slot(&mut self, uuid: TxUuid, start_ns: u64, dynamic: bool) -> u32;
    /// Whether pending transaction `slot` already has `lpn`, and how many pages it has.
    fn pending_pages(&self, slot: u32, lpn: Lpn) -> (bool, u64);
    /// Pages of every transaction in flight (written or held in RAM).
    fn in_flight_pages(&self) -> u64;
    /// Aborts pending transaction `slot`.
    fn abort_pending(&mut self, slot: u32, now: u64) -> Result<(), FtlError>;
    fn collect_if_needed(&mut self, now: u64) -> Result<(), FtlError>;
    /// One accepted page of a dynamic transaction; REAR commits it.
    #[allow(clippy::too_many_arguments)]
    fn dynamic_page(
        &mut self,
        slot: u32,
        uuid: TxUuid,
        lpn: Lpn,
        content: &Content,
        rear: bool,
        start: u64,
        arrival: u64,
    ) -> Result<TxCompletion, FtlError>;

    /// Admits a request (arrivals never go back in time) and forgets recently committed ids
    /// no request can name any more.
    fn admit(&mut self, arrival: u64) -> Result<(), FtlError> {
        self.arrivals().admit(arrival)?;
        self.recent().retain(|_, ack| *ack > arrival);
        Ok(())
    }

    /// Isolation (TxFlash §2.2) for pages of transaction `own` ([`NO_SLOT`] for a new one):
    /// pages of running dynamic transactions are refused (`Conflict`); overlap in time with a
    /// committed-but-not-yet-durable transaction (or an SCC erase) waits, or is refused with
    /// `isolation=refuse`. Returns the instant the intentions may start.
    fn isolate(
        &self,
        lpns: impl Iterator<Item = Lpn>,
        arrival: u64,
        own: u32,
    ) -> Result<u64, FtlError> {
        let mut start = arrival;
        for lpn in lpns {
            let holder = self.lock_holder(lpn);
            if holder != NO_SLOT && holder != own {
                let holder = self.slot_uuid(holder);
                return Err(FtlError::Conflict { lpn, holder });
            }
            let busy = self.busy_until(lpn);
            if busy > arrival && self.isolation() == Isolation::Refuse {
                return Err(FtlError::Conflict {
                    lpn,
                    holder: TxUuid(0),
                });
            }
            start = start.max(busy);
        }
        Ok(start)
    }
}

fn done(arrival: u64, ack: u64) -> Completion {
    Completion {
        arrival_ns: arrival,
        ack_ns: ack,
    }
}

fn committed(arrival: u64, ack: u64) -> TxCompletion {
    TxCompletion {
        arrival_ns: arrival,
        ack_ns: ack,
        durable_ns: Some(ack),
    }
}

/// A plain write is a transaction: one page = a one-page transaction, several = one
/// WriteAtomic.
pub(crate) fn write<P: CommitProtocol>(
    d: &mut P,
    start: Lpn,
    pages: &[Content],
    arrival: u64,
) -> Result<Completion, FtlError> {
    d.admit(arrival)?;
    check_range(start, pages.len() as u64, d.logical())?;
    let list: Vec<(Lpn, &Content)> = pages
        .iter()
        .enumerate()
        .map(|(k, c)| (Lpn(start.0 + k as u32), c))
        .collect();
    let ack = d.write_atomic(TxUuid(0), &list, Kind::Data, arrival)?;
    Ok(done(arrival, ack))
}

/// Reads the committed version of each page; a tombstone reads as unwritten.
pub(crate) fn read<P: CommitProtocol>(
    d: &mut P,
    start: Lpn,
    count: u32,
    arrival: u64,
    out: &mut Vec<PageOutcome>,
) -> Result<Completion, FtlError> {
    d.admit(arrival)?;
    check_range(start, count as u64, d.logical())?;
    out.clear();
    let mut ack = arrival;
    let mut buffer = [0u8; OOB_BUFFER];
    let oob = &mut buffer[..d.oob_len()];
    for k in 0..count {
        let Some(ppn) = d.mapped(start.0 + k) else {
            out.push(PageOutcome::Unwritten);
            continue;
        };
        let (status, span) = d
            .flash_mut()
            .read(Ppn(ppn), oob, arrival, OpCause::HostData)?;
        ack = ack.max(span.end_ns);
        out.push(match status {
            ReadStatus::Data(_) if d.is_tombstone(oob) => PageOutcome::Unwritten,
            ReadStatus::Uncorrectable => {
                let (trimmed, end) = lost_tombstone(d, Ppn(ppn), oob, span.end_ns)?;
                ack = ack.max(end);
                match trimmed {
                    true => PageOutcome::Unwritten,
                    false => PageOutcome::Uncorrectable,
                }
            }
            status => PageOutcome::of_mapped_page(status),
        });
    }
    Ok(done(arrival, ack))
}

/// Whether `ppn`, which read uncorrectable, is a trim's tombstone the media lost: its data
/// (which holds nothing) failed ECC, but its spare area, a codeword of its own, still reads its
/// record (a charged read of the OOB into `oob`, [`ftl::media::classify`]), and the record says
/// tombstone. The page then reads as unwritten, as the trim made it; a lost data page still
/// reads as an error. Returns when the answer is known (with the media model off nothing is
/// read: a page that reads uncorrectable is torn).
fn lost_tombstone<P: CommitProtocol>(
    d: &mut P,
    ppn: Ppn,
    oob: &mut [u8],
    read_end: u64,
) -> Result<(bool, u64), FtlError> {
    let (verdict, span) =
        ftl::media::classify(d.flash_mut(), ppn, oob, read_end, OpCause::HostData)?;
    let lost = verdict == ftl::media::Unreadable::Lost;
    Ok((lost && d.is_tombstone(oob), span.end_ns))
}

/// Every acknowledged transaction is already durable.
pub(crate) fn flush<P: CommitProtocol>(d: &mut P, arrival: u64) -> Result<Completion, FtlError> {
    d.admit(arrival)?;
    Ok(done(arrival, arrival))
}

/// Trim writes tombstone intentions, committed like a write (atomically per `max_tx_bytes`
/// chunk), so a trim survives like a write and an older version can never reappear.
pub(crate) fn trim<P: CommitProtocol>(
    d: &mut P,
    start: Lpn,
    count: u32,
    arrival: u64,
) -> Result<Completion, FtlError> {
    d.admit(arrival)?;
    check_range(start, count as u64, d.logical())?;
    let tomb = Content::Bytes(vec![0u8; 8].into_boxed_slice());
    // A refused trim changes nothing: a page a running transaction holds refuses the whole
    // trim before any chunk is written, whether or not the page was mapped before (a trim may
    // not slip in under a running transaction's write). Each chunk then passes the same check,
    // and the room check too, since the chunks before it committed at once.
    d.isolate((start.0..start.0 + count).map(Lpn), arrival, NO_SLOT)?;
    let lpns: Vec<Lpn> = (start.0..start.0 + count)
        .map(Lpn)
        .filter(|l| d.mapped(l.0).is_some())
        .collect();
    // Chunks of what the room for transactions leaves beside those in flight (a trim is not
    // atomic; each chunk's tombstones are one transaction).
    let chunk_pages = (d.max_tx() as u64)
        .saturating_sub(d.in_flight_pages())
        .max(1);
    let mut ack = arrival;
    for chunk in lpns.chunks(chunk_pages as usize) {
        let list: Vec<(Lpn, &Content)> = chunk.iter().map(|&l| (l, &tomb)).collect();
        ack = ack.max(d.write_atomic(TxUuid(0), &list, Kind::Tombstone, arrival)?);
    }
    Ok(done(arrival, ack))
}

pub(crate) fn capabilities(max_tx_pages: u32) -> TxCapabilities {
    TxCapabilities {
        static_tx: true,
        async_swrite: false,
        dynamic_tx: true,
        concurrent_static: true,
        concurrent_dynamic: true,
        sread: false,
        abort: true,
        max_tx_pages: max_tx_pages as u64,
    }
}

/// A transaction id not in use: neither running nor recently committed, and not 0.
fn fresh_uuid<P: CommitProtocol>(d: &mut P, uuid: TxUuid) -> Result<(), FtlError> {
    if uuid.0 == 0 {
        return Err(FtlError::ReservedTx(uuid));
    }
    if d.running().contains_key(&uuid) || d.recent().contains_key(&uuid) {
        return Err(FtlError::DuplicateTx(uuid));
    }
    Ok(())
}

/// WriteAtomic (TxFlash §2.1), acknowledged on commit.
pub(crate) fn swrite<P: CommitProtocol>(
    d: &mut P,
    uuid: TxUuid,
    pages: &[(Lpn, Content)],
    mode: ftl::SwriteMode,
    arrival: u64,
) -> Result<TxCompletion, FtlError> {
    d.admit(arrival)?;
    if mode == ftl::SwriteMode::Async {
        return Err(FtlError::Unsupported(
            "asynchronous SWRITE (TxFlash acknowledges on commit)",
        ));
    }
    fresh_uuid(d, uuid)?;
    let list: Vec<(Lpn, &Content)> = pages.iter().map(|(l, c)| (*l, c)).collect();
    let ack = d.write_atomic(uuid, &list, Kind::Data, arrival)?;
    d.recent().insert(uuid, ack);
    Ok(committed(arrival, ack))
}

/// One page of a dynamic transaction. The pages of a running dynamic transaction are locked:
/// other writes to them get `Conflict`. A page that is refused (conflict, duplicate page, too
/// large, no space) aborts its whole transaction.
pub(crate) fn dwrite<P: CommitProtocol>(
    d: &mut P,
    uuid: TxUuid,
    lpn: Lpn,
    content: &Content,
    flag: DwriteFlag,
    arrival: u64,
) -> Result<TxCompletion, FtlError> {
    d.admit(arrival)?;
    check_range(lpn, 1, d.logical())?;
    if uuid.0 == 0 {
        return Err(FtlError::ReservedTx(uuid));
    }
    let slot = match flag {
        DwriteFlag::Single => {
            fresh_uuid(d, uuid)?;
            let ack = d.write_atomic(uuid, &[(lpn, content)], Kind::Data, arrival)?;
            d.recent().insert(uuid, ack);
            return Ok(committed(arrival, ack));
        }
        DwriteFlag::Head => {
            fresh_uuid(d, uuid)?;
            let start = d.isolate(std::iter::once(lpn), arrival, NO_SLOT)?;
            d.open_slot(uuid, start, true)
        }
        DwriteFlag::Body | DwriteFlag::Rear => {
            *d.running().get(&uuid).ok_or(FtlError::UnknownTx(uuid))?
        }
    };
    let start = match accept_page(d, slot, lpn, arrival) {
        Ok(start) => start,
        Err(e) => {
            d.abort_pending(slot, arrival)?;
            return Err(e);
        }
    };
    let rear = flag == DwriteFlag::Rear;
    d.dynamic_page(slot, uuid, lpn, content, rear, start, arrival)
}

/// Whether transaction `slot` may take `lpn`: not twice, within the largest transaction,
/// isolated, with room on flash. When its intention may start.
fn accept_page<P: CommitProtocol>(
    d: &mut P,
    slot: u32,
    lpn: Lpn,
    arrival: u64,
) -> Result<u64, FtlError> {
    let (has, pages) = d.pending_pages(slot, lpn);
    if has {
        return Err(FtlError::DuplicatePage { lpn });
    }
    let max = d.max_tx() as u64;
    if pages >= max {
        return Err(FtlError::TxTooLarge {
            pages: pages + 1,
            max,
        });
    }
    check_room(d, 1)?;
    let start = d.isolate(std::iter::once(lpn), arrival, slot)?;
    d.collect_if_needed(arrival)?;
    Ok(start)
}

/// Abort (TxFlash §2.1); `TxUuid(0)` names the one running dynamic transaction.
pub(crate) fn abort<P: CommitProtocol>(
    d: &mut P,
    uuid: TxUuid,
    arrival: u64,
) -> Result<Completion, FtlError> {
    d.admit(arrival)?;
    let slot = if uuid.0 == 0 {
        let dynamic: Vec<u32> = d.running().values().copied().collect();
        match dynamic.as_slice() {
            [s] => *s,
            [] => return Err(FtlError::NoDynamicTx),
            _ => return Err(FtlError::UnknownTx(uuid)),
        }
    } else if let Some(&s) = d.running().get(&uuid) {
        s
    } else if d.recent().contains_key(&uuid) {
        return Err(FtlError::AlreadyCommitted(uuid));
    } else {
        return Err(FtlError::UnknownTx(uuid));
    };
    d.abort_pending(slot, arrival)?;
    Ok(done(arrival, arrival))
}

/// TxFlash leaves reads inside a transaction out of scope.
pub(crate) fn sread() -> Result<Completion, FtlError> {
    Err(FtlError::Unsupported(
        "serializable read (TxFlash leaves read-inside-transaction out of scope)",
    ))
}

/// The block-device requests of a [`CommitProtocol`] and the accessors both protocols share
/// (their promise, flash, invariants and memory), inside its `impl BlockDevice`.
macro_rules! block_requests {
    () => {
        fn promise(&self) -> Promise {
            Promise::AtomicTransactions
        }
        fn logical_pages(&self) -> u32 {
            self.logical
        }
        /// A plain write is one transaction: no longer than the largest.
        fn max_write_pages(&self) -> Option<u32> {
            Some($crate::surface::CommitProtocol::max_tx(self))
        }
        fn flash(&self) -> &Flash {
            &self.flash
        }
        fn flash_mut(&mut self) -> &mut Flash {
            &mut self.flash
        }
        fn into_flash(self: Box<Self>) -> Flash {
            self.flash
        }
        fn check_invariants(&self) -> Result<(), ftl::InvariantViolation> {
            self.check()
        }
        fn memory(&self) -> Vec<(String, u64)> {
            let mut m = self.flash().memory();
            m.extend(self.space.memory());
            m
        }
        fn write(
            &mut self,
            start: Lpn,
            pages: &[Content],
            arrival: u64,
        ) -> Result<Completion, FtlError> {
            surface::write(self, start, pages, arrival)
        }
        fn read(
            &mut self,
            start: Lpn,
            count: u32,
            arrival: u64,
            out: &mut Vec<PageOutcome>,
        ) -> Result<Completion, FtlError> {
            surface::read(self, start, count, arrival, out)
        }
        fn flush(&mut self, arrival: u64) -> Result<Completion, FtlError> {
            surface::flush(self, arrival)
        }
        fn trim(&mut self, start: Lpn, count: u32, arrival: u64) -> Result<Completion, FtlError> {
            surface::trim(self, start, count, arrival)
        }
    };
}

/// The transactional interface of a [`CommitProtocol`] (TxFlash §2.1: WriteAtomic and Abort,
/// and dynamic transactions, §3.4).
macro_rules! transactional {
    ($design:ty) => {
        impl Transactional for $design {
            fn capabilities(&self) -> TxCapabilities {
                surface::capabilities(CommitProtocol::max_tx(self))
            }
            fn swrite(
                &mut self,
                uuid: TxUuid,
                pages: &[(Lpn, Content)],
                mode: SwriteMode,
                arrival: u64,
            ) -> Result<TxCompletion, FtlError> {
                surface::swrite(self, uuid, pages, mode, arrival)
            }
            fn dwrite(
                &mut self,
                uuid: TxUuid,
                lpn: Lpn,
                content: &Content,
                flag: DwriteFlag,
                arrival: u64,
            ) -> Result<TxCompletion, FtlError> {
                surface::dwrite(self, uuid, lpn, content, flag, arrival)
            }
            fn abort(&mut self, uuid: TxUuid, arrival: u64) -> Result<Completion, FtlError> {
                surface::abort(self, uuid, arrival)
            }
            fn sread(
                &mut self,
                _start: Lpn,
                _count: u32,
                _arrival: u64,
                _out: &mut Vec<PageOutcome>,
            ) -> Result<Completion, FtlError> {
                surface::sread()
            }
        }
    };
}

/// The parts of a [`CommitProtocol`] both protocols keep in fields of the same names, inside
/// its `impl CommitProtocol`.
macro_rules! shared_state {
    () => {
        fn logical(&self) -> u32 {
            self.logical
        }
        fn mapped(&self, lpn: u32) -> Option<u32> {
            Some(self.map[lpn as usize]).filter(|&p| p != NONE)
        }
        fn arrivals(&mut self) -> &mut ftl::ArrivalClock {
            &mut self.arrivals
        }
        fn lock_holder(&self, lpn: Lpn) -> u32 {
            self.locked[lpn.0 as usize]
        }
        fn busy_until(&self, lpn: Lpn) -> u64 {
            self.busy_until[lpn.0 as usize]
        }
        fn isolation(&self) -> Isolation {
            self.p.isolation
        }
        fn slot_uuid(&self, slot: u32) -> TxUuid {
            self.pending[slot as usize].as_ref().unwrap().uuid
        }
        fn running(&self) -> &FxHashMap<TxUuid, u32> {
            &self.by_uuid
        }
        fn recent(&mut self) -> &mut FxHashMap<TxUuid, u64> {
            &mut self.recent
        }
        fn open_slot(&mut self, uuid: TxUuid, start_ns: u64, dynamic: bool) -> u32 {
            self.open_pending(uuid, start_ns, dynamic)
        }
        fn collect_if_needed(&mut self, now: u64) -> Result<(), FtlError> {
            self.gc_if_needed(now)
        }
    };
}

/// Page allocation with summary pages, inside each protocol's `impl`: the next page of
/// `stream`, and when a block's last page comes up, the summary of the block's entries written
/// there first (with the protocol's summary OOB record `$summary_oob`), after every page of the
/// block (TxFlash §4.1, "summary page": recovery reads one page per full block). Also the
/// free blocks GC keeps in reserve.
macro_rules! summary_allocation {
    ($summary_oob:expr) => {
        /// Next page of `stream`; writes the summary page when the block's last page comes up.
        fn alloc(&mut self, stream: usize) -> Result<Ppn, FtlError> {
            if stream == HOST {
                self.gc_if_needed(self.arrivals.last())?;
            }
            loop {
                let ppn = self
                    .space
                    .allocate(stream, &self.flash)
                    .ok_or(FtlError::NoSpace)?;
                let g = self.flash.geometry();
                if g.page_in_block(ppn) + 1 < self.ppb {
                    return Ok(ppn);
                }
                let block = g.block_of(ppn);
                let first = g.first_page(block).0 as usize;
                let page = format::encode_summary(
                    block.0,
                    &self.summ[first..first + self.ppb as usize - 1],
                    g.page_bytes as usize,
                );
                let nb = self.block_last_end[block.0 as usize];
                let oob = $summary_oob;
                self.program(
                    ppn,
                    ftl::media::Source::Data(&Content::Bytes(page)),
                    &oob,
                    nb,
                    OpCause::Summary,
                )?;
            }
        }

        fn reserve_blocks(&self) -> u32 {
            self.p.gc_free_blocks
        }
    };
}

pub(crate) use {block_requests, shared_state, summary_allocation, transactional};
