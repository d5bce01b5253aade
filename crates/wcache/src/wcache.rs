//! The write-cached page-level FTL and its recovery.
//!
//! Writes land in the [`WriteCache`]; a write that finds the cache full evicts the least recently
//! used page, writing it back if dirty. `flush` writes back every dirty page and is acknowledged
//! when all those programs (and every earlier write-back) have ended. Write-backs go to whichever
//! chip is idle soonest, so they complete in no particular order — by design: this drive keeps no
//! order between writes, only the flush promise.
//!
//! OOB record (16 bytes, little-endian): `lpn u32 | seq u64 | crc32c(lpn..seq) u32`. `seq` grows
//! with every write-back; recovery scans every OOB and keeps, per LPN, the page with the largest
//! `seq` (a GC copy keeps its source's `seq`). GC erases a victim only after its copies and every
//! newer version of its stale pages are on flash ([`ftl::Space::collect`]), so a scan always finds
//! the newest flushed version.
//!
//! Trim: the trimmed page's flash copy stays live as a *tombstone* (owner with [`TOMB`] set) until
//! the LPN is written back again, so no older version of the page can resurface after a power cut
//! (after a cut the page reads as unwritten or its last data, as flush-only allows). A trimmed
//! page whose newest data is dirty in the cache is written back first and that copy becomes the
//! tombstone: without it the flash copy left as the tombstone was *older* than the last data,
//! and a cut after the next flush brought it back (found by the seed soak with trims, issue #22).

use crate::cache::{CachedPage, PageTags, WriteCache};
use flash::codec::{self, CorruptRecord};
use flash::{BlockId, ChipId, Content, Flash, Lpn, OpCause, PageState, Ppn};
use ftl::{
    check_range, media, BlockDevice, BlockPool, BlockState, ChipAllocation, Completion,
    DesignOptions, FtlError, GcPolicy, PageOutcome, Promise, RecoveryReport, Space, Validity,
};

/// OOB record bytes per page.
pub const OOB_BYTES: u32 = 16;
/// Owner bit of a tombstone (a trimmed page kept until its LPN is written back).
pub const TOMB: u32 = 1 << 31;
const HOST: usize = 0;
const GC: usize = 1;
const PARAMS: [&str; 6] = [
    "cache_mb",
    "op",
    "gc_free_blocks",
    "gc_policy",
    "summary_pages",
    "chip_allocation",
];

/// Encodes the OOB record of a data page.
pub fn encode_oob(lpn: u32, seq: u64) -> [u8; OOB_BYTES as usize] {
    let mut b = [0u8; OOB_BYTES as usize];
    b[0..4].copy_from_slice(&lpn.to_le_bytes());
    b[4..12].copy_from_slice(&seq.to_le_bytes());
    let crc = crc32c::crc32c(&b[0..12]);
    b[12..16].copy_from_slice(&crc.to_le_bytes());
    b
}

/// Version of the write-cached FTL's on-flash format (the OOB record above). The image header
/// records it (`DesignSpec::format_version`); bump it whenever the record changes.
pub const FORMAT_VERSION: u32 = 1;

/// Decodes an OOB record, `(lpn, seq)`; an error when it is short or its checksum fails.
pub fn decode_oob(b: &[u8]) -> Result<(u32, u64), CorruptRecord> {
    let mut r = codec::crc_sealed(b, 12)?;
    Ok((r.u32()?, r.u64()?))
}

/// GC's free-block mark by default: two per chip, and at least three [R]. GC runs once the
/// free blocks are below the mark and its copies take one more, so a cut can leave two fewer;
/// recovery takes the blocks left open up again, and GC then needs one free block for a
/// victim's copies that do not fit the rest of its open block. Two on one chip left none at a
/// cut, and the recovered device failed "device full" (soak seed 20264108, docs/optr.md).
pub fn default_gc_free_blocks(g: &flash::Geometry) -> u32 {
    (g.chips() * 2).max(3)
}

/// Design parameters.
#[derive(Clone, Debug)]
pub struct Params {
    /// DRAM write cache in MB (OPTR §6.1: 8; [`crate::cache::default_cache_mb`]).
    pub cache_mb: f64,
    /// Over-provisioning share.
    pub op: f64,
    /// GC runs when fewer free blocks remain.
    pub gc_free_blocks: u32,
    pub gc_policy: GcPolicy,
    /// Write an LPN summary in the last page of every host block, as the OPTR paper expects a
    /// baseline to (§7: "We anticipate that baseline SSDs also do so"). Off by default; the
    /// OPTR comparison turns it on so both designs pay for summaries.
    pub summary_pages: bool,
    /// Which chip a written-back page goes to (`soonest-idle` or `modulo`, OPTR §7).
    pub chip_allocation: ChipAllocation,
}

impl Params {
    pub fn parse(o: &DesignOptions, flash: &Flash) -> Result<Params, FtlError> {
        o.check_known("wcache", &PARAMS)?;
        let g = flash.geometry();
        let policy: String = o.get("gc_policy", "greedy".to_string())?;
        Ok(Params {
            cache_mb: o.get("cache_mb", crate::cache::default_cache_mb(g))?,
            op: o.get("op", 0.07)?,
            gc_free_blocks: o.get("gc_free_blocks", default_gc_free_blocks(g))?,
            gc_policy: policy.parse()?,
            summary_pages: o.get("summary_pages", false)?,
            chip_allocation: o
                .get("chip_allocation", "soonest-idle".to_string())?
                .parse()?,
        })
    }
    pub fn cache_pages(&self, flash: &Flash) -> u32 {
        ((self.cache_mb * 1024.0 * 1024.0) / flash.geometry().page_bytes as f64).max(1.0) as u32
    }
}

/// Allocation streams: host write-backs and GC copies.
const STREAMS: usize = 2;

pub struct WCache {
    flash: Flash,
    space: Space,
    params: Params,
    logical: u32,
    l2p: Vec<Ppn>,
    /// Flash copy of a trimmed LPN kept as a tombstone.
    tomb: Vec<Ppn>,
    cache: WriteCache,
    seq: u64,
    /// Latest end of any write-back (what a flush waits for).
    programs_end_ns: u64,
    scratch: Vec<CachedPage>,
    coalesced: u64,
    cache_hits: u64,
    /// LPNs written so far into each chip's open host block (for its summary page).
    summary_lpns: Vec<Vec<u32>>,
    summaries: u64,
    /// Write-backs `chip_allocation = modulo` could not place on their own chip.
    modulo_fallbacks: u64,
}

/// Builds the design on an erased device.
pub fn format(flash: Flash, o: &DesignOptions) -> Result<Box<dyn BlockDevice>, FtlError> {
    Ok(Box::new(WCache::new(flash, o)?))
}

impl WCache {
    pub fn new(flash: Flash, o: &DesignOptions) -> Result<WCache, FtlError> {
        ftl::require_spare_area("wcache", OOB_BYTES, &flash)?;
        let params = Params::parse(o, &flash)?;
        let g = flash.geometry().clone();
        // Besides over-provisioning, keep back what the design needs free at all times: one open
        // block per stream and chip and GC's free-block target (as every other design does;
        // without them, writing the whole exported range left GC about 1 % of the flash it
        // could use, and random writes ran at write amplification 30.7 on `small`, issue #17).
        let working = ftl::working_blocks(&g, STREAMS, params.gc_free_blocks);
        let logical = ftl::logical_pages(&g, working, params.op);
        if logical == 0 {
            return Err(FtlError::InvalidOption(format!(
                "no logical pages left: {} blocks cannot keep {working} for open blocks and GC (lower gc_free_blocks)",
                g.blocks()
            )));
        }
        let pool = BlockPool::new(&g, STREAMS, |_| false);
        let space = Space::new(pool, Validity::new(&g), params.gc_policy, u32::MAX);
        let cache = WriteCache::new(params.cache_pages(&flash), logical);
        Ok(WCache {
            flash,
            space,
            params,
            logical,
            l2p: vec![Ppn::NONE; logical as usize],
            tomb: vec![Ppn::NONE; logical as usize],
            cache,
            seq: 1,
            programs_end_ns: 0,
            scratch: Vec::new(),
            coalesced: 0,
            cache_hits: 0,
            summary_lpns: vec![Vec::new(); g.chips() as usize],
            summaries: 0,
            modulo_fallbacks: 0,
        })
    }

    /// Writes one cached page back to flash; returns the program's span.
    fn write_back(&mut self, page: &CachedPage, not_before: u64) -> Result<flash::Span, FtlError> {
        self.gc_if_needed(not_before)?;
        let ppn = self.allocate_host(page.lpn).ok_or(FtlError::NoSpace)?;
        let oob = encode_oob(page.lpn, self.seq);
        self.seq += 1;
        let span = self
            .flash
            .program(ppn, &page.content, &oob, not_before, OpCause::HostData)?;
        let i = page.lpn as usize;
        for old in [self.l2p[i], self.tomb[i]] {
            if !old.is_none() {
                self.space.validity.invalidate(old, span.end_ns);
            }
        }
        self.tomb[i] = Ppn::NONE;
        self.l2p[i] = ppn;
        self.space.validity.set_valid(ppn, page.lpn);
        self.programs_end_ns = self.programs_end_ns.max(span.end_ns);
        if self.params.summary_pages {
            self.summarise(ppn, page.lpn, span.end_ns)?;
        }
        Ok(span)
    }

    /// The page a write-back of `lpn` goes to, on the chip `chip_allocation` picks.
    fn allocate_host(&mut self, lpn: u32) -> Option<Ppn> {
        if self.params.chip_allocation == ChipAllocation::Modulo {
            let chip = ChipId(lpn % self.flash.geometry().chips());
            if let Some(ppn) = self.space.allocate_on(HOST, chip, &self.flash) {
                return Some(ppn);
            }
            self.modulo_fallbacks += 1;
        }
        self.space.allocate(HOST, &self.flash)
    }

    /// With `summary_pages`: notes the page's LPN and, when only the last page of its block is
    /// left, programs the block's summary there (OOB lpn = `u32::MAX`, seq 0: recovery skips it).
    fn summarise(&mut self, ppn: Ppn, lpn: u32, not_before: u64) -> Result<(), FtlError> {
        let g = self.flash.geometry();
        let (chip, off, ppb) = (g.chip_of(ppn), g.page_in_block(ppn), g.pages_per_block);
        let lpns = &mut self.summary_lpns[chip.0 as usize];
        if off == 0 {
            lpns.clear();
        }
        lpns.push(lpn);
        if off != ppb - 2 {
            return Ok(());
        }
        let sum = self
            .space
            .allocate_on(HOST, chip, &self.flash)
            .ok_or(FtlError::NoSpace)?;
        debug_assert_eq!(g.page_in_block(sum), ppb - 1);
        let mut bytes = vec![0u8; g.page_bytes as usize];
        for (k, l) in lpns.iter().enumerate() {
            bytes[4 * k..4 * k + 4].copy_from_slice(&l.to_le_bytes());
        }
        let oob = encode_oob(u32::MAX, 0);
        let span = self.flash.program(
            sum,
            &Content::Bytes(bytes.into_boxed_slice()),
            &oob,
            not_before,
            OpCause::Summary,
        )?;
        self.programs_end_ns = self.programs_end_ns.max(span.end_ns);
        self.summaries += 1;
        Ok(())
    }

    fn gc_if_needed(&mut self, now: u64) -> Result<(), FtlError> {
        let mut rounds = 0;
        while self.space.pool.free_blocks() < self.params.gc_free_blocks {
            rounds += 1;
            assert!(
                rounds <= self.flash.geometry().blocks(),
                "GC makes no progress"
            );
            let Some(victim) = self.space.pick_victim(&self.flash, |_| true) else {
                return if self.space.pool.free_blocks() > 0 {
                    Ok(())
                } else {
                    Err(FtlError::NoSpace)
                };
            };
            let (l2p, tomb, seq) = (&mut self.l2p, &mut self.tomb, &mut self.seq);
            self.space.collect(
                &mut self.flash,
                victim,
                GC,
                now,
                OpCause::GcCopy,
                |_, _| false,
                // A page lost whole: the copy is its LPN's newest version on flash (its data's
                // or its tombstone's), so a fresh `seq` keeps it newest at recovery.
                |owner, oob| {
                    let lpn = owner & !TOMB;
                    oob[..OOB_BYTES as usize].copy_from_slice(&encode_oob(lpn, *seq));
                    *seq += 1;
                    Ok(())
                },
                Space::owner_kept,
                |m| {
                    let lpn = (m.owner & !TOMB) as usize;
                    if m.owner & TOMB != 0 {
                        tomb[lpn] = m.to;
                    } else {
                        l2p[lpn] = m.to;
                    }
                },
                |_| 0,
            )?;
        }
        Ok(())
    }

    fn evict_one(&mut self, now: u64) -> Result<u64, FtlError> {
        let page = self.cache.pop_lru().expect("a full cache has an LRU page");
        let left = if page.dirty {
            // the host waits until the page has left the cache for the chip
            self.write_back(&page, now)?.start_ns
        } else {
            now
        };
        self.cache.recycle(page.content);
        Ok(left)
    }
}

impl BlockDevice for WCache {
    fn design(&self) -> &'static str {
        "wcache"
    }
    fn promise(&self) -> Promise {
        Promise::FlushOnly
    }
    fn logical_pages(&self) -> u32 {
        self.logical
    }

    fn write(
        &mut self,
        start: Lpn,
        pages: &[Content],
        arrival_ns: u64,
    ) -> Result<Completion, FtlError> {
        check_range(start, pages.len() as u64, self.logical)?;
        let mut ack = arrival_ns;
        for (k, content) in pages.iter().enumerate() {
            let lpn = start.0 + k as u32;
            if self.cache.needs_eviction(lpn) {
                ack = ack.max(self.evict_one(arrival_ns)?);
            }
            let tags = PageTags {
                wid: self.seq,
                size: pages.len() as u32,
            };
            if self.cache.insert_copy(lpn, content, tags).is_some() {
                self.coalesced += 1;
            }
        }
        Ok(Completion {
            arrival_ns,
            ack_ns: ack,
        })
    }

    fn read(
        &mut self,
        start: Lpn,
        count: u32,
        arrival_ns: u64,
        out: &mut Vec<PageOutcome>,
    ) -> Result<Completion, FtlError> {
        check_range(start, count as u64, self.logical)?;
        out.clear();
        let mut ack = arrival_ns;
        for lpn in start.0..start.0 + count {
            if let Some(c) = self.cache.get(lpn) {
                self.cache_hits += 1;
                out.push(PageOutcome::Data(c.clone()));
                continue;
            }
            let ppn = self.l2p[lpn as usize];
            if ppn.is_none() {
                out.push(PageOutcome::Unwritten);
                continue;
            }
            let (status, span) = self.flash.read_data(ppn, arrival_ns, OpCause::HostData)?;
            ack = ack.max(span.end_ns);
            out.push(PageOutcome::of_mapped_page(status));
        }
        Ok(Completion {
            arrival_ns,
            ack_ns: ack,
        })
    }

    fn flush(&mut self, arrival_ns: u64) -> Result<Completion, FtlError> {
        let mut pages = std::mem::take(&mut self.scratch);
        self.cache.lend_dirty(&mut pages);
        let written = pages
            .iter()
            .try_for_each(|page| self.write_back(page, arrival_ns).map(drop));
        self.cache.return_contents(&mut pages);
        self.scratch = pages;
        written?;
        Ok(Completion {
            arrival_ns,
            ack_ns: arrival_ns.max(self.programs_end_ns),
        })
    }

    fn trim(&mut self, start: Lpn, count: u32, arrival_ns: u64) -> Result<Completion, FtlError> {
        check_range(start, count as u64, self.logical)?;
        for lpn in start.0..start.0 + count {
            if let Some(page) = self.cache.remove(lpn).filter(|p| p.dirty) {
                self.write_back(&page, arrival_ns)?;
            }
            let i = lpn as usize;
            let ppn = std::mem::replace(&mut self.l2p[i], Ppn::NONE);
            if !ppn.is_none() {
                if !self.tomb[i].is_none() {
                    self.space.validity.invalidate(self.tomb[i], 0);
                }
                // keep the flash copy live as a tombstone (see module doc)
                self.space.validity.invalidate(ppn, 0);
                self.space.validity.set_valid(ppn, lpn | TOMB);
                self.tomb[i] = ppn;
            }
        }
        Ok(Completion {
            arrival_ns,
            ack_ns: arrival_ns,
        })
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
        self.space.check_invariants()?;
        self.cache.check_invariants()?;
        for (lpn, (&p, &t)) in self.l2p.iter().zip(&self.tomb).enumerate() {
            if !p.is_none() && self.space.validity.owner(p) != Some(lpn as u32) {
                return Err(ftl::violation!(
                    "lpn {lpn} maps to {p} which it does not own"
                ));
            }
            if !t.is_none() && self.space.validity.owner(t) != Some(lpn as u32 | TOMB) {
                return Err(ftl::violation!(
                    "tombstone of lpn {lpn} at {t} is not owned"
                ));
            }
        }
        Ok(())
    }

    fn memory(&self) -> Vec<(String, u64)> {
        let mut m = self.flash().memory();
        m.extend(self.space.memory());
        m
    }

    fn metrics(&self) -> Vec<(String, f64)> {
        vec![
            ("coalesced_pages".into(), self.coalesced as f64),
            ("cache_read_hits".into(), self.cache_hits as f64),
            ("cache_pages".into(), self.cache.capacity() as f64),
            ("summary_pages".into(), self.summaries as f64),
            ("modulo_fallbacks".into(), self.modulo_fallbacks as f64),
        ]
    }
}

/// What recovery's scan found in one block.
#[derive(Clone, Default)]
struct ScannedBlock {
    /// Programmed (or torn) pages before the first erased one.
    end: u32,
    /// A torn page, or a torn erase: the block is not written again before it is erased.
    torn: bool,
}

/// Rebuilds the mapping by scanning every page's OOB (newest `seq` per LPN wins), then the block
/// pool: the blocks that were open at the power cut are taken up again where their writes
/// stopped, so the room they had is not lost (`adopt_blocks_left_open`).
pub fn recover(
    flash: Flash,
    o: &DesignOptions,
) -> Result<(Box<dyn BlockDevice>, RecoveryReport), FtlError> {
    let before = flash.stats().clone();
    let start = flash.idle_ns();
    let mut dev = WCache::new(flash, o)?;
    let (blocks, best, max_seq) = dev.scan_blocks(start)?;
    for (lpn, &(_, ppn)) in best.iter().enumerate() {
        if !ppn.is_none() {
            dev.l2p[lpn] = ppn;
            dev.space.validity.set_valid(ppn, lpn as u32);
        }
    }
    dev.adopt_blocks_left_open(&blocks);
    debug_assert!(dev
        .space
        .pool
        .full_blocks()
        .all(|b| dev.space.pool.state(b) == BlockState::Full));
    dev.seq = max_seq + 1;
    let report = RecoveryReport::measure(&dev.flash, &before, start);
    Ok((Box::new(dev), report))
}

impl WCache {
    /// Recovery step: reads every programmed page's OOB. Returns what each block holds, the
    /// newest `(seq, page)` of every LPN, and the largest `seq` seen.
    #[allow(clippy::type_complexity)]
    fn scan_blocks(
        &mut self,
        start: u64,
    ) -> Result<(Vec<ScannedBlock>, Vec<(u64, Ppn)>, u64), FtlError> {
        let g = self.flash.geometry().clone();
        let mut blocks = vec![ScannedBlock::default(); g.blocks() as usize];
        let mut best: Vec<(u64, Ppn)> = vec![(0, Ppn::NONE); self.logical as usize];
        let mut records: Vec<[u8; OOB_BYTES as usize]> =
            Vec::with_capacity(g.pages_per_block as usize);
        let mut max_seq = 0;
        for (b, scanned) in blocks.iter_mut().enumerate() {
            let block = BlockId(b as u32);
            scanned.torn = self.flash.block_erase_torn(block);
            let mut from = 0;
            // Runs of programmed pages, each ended by a torn page (read on past it) or an
            // erased one (the block's written part ends there).
            while from < g.pages_per_block {
                let run =
                    self.flash
                        .read_oob_run(block, from, &mut records, start, OpCause::Recovery)?;
                for (k, record) in records.iter().enumerate() {
                    let Ok((lpn, seq)) = decode_oob(record) else {
                        continue;
                    };
                    max_seq = max_seq.max(seq);
                    if lpn < self.logical && seq >= best[lpn as usize].0 {
                        best[lpn as usize] = (seq, g.ppn(block, from + k as u32));
                    }
                }
                scanned.end = from + run.programmed;
                match run.stopped_at {
                    None | Some((_, PageState::Erased)) => break,
                    // A record that does not read: a torn program's, or — its page lost to the
                    // media whole — one whose version no other page names.
                    Some((ppn, _)) if media::undecided_lost(&self.flash, ppn) => {
                        return Err(FtlError::MediaLoss {
                            ppn,
                            what: "the OOB record of a page".into(),
                        })
                    }
                    Some(_) => scanned.torn = true,
                }
                from = scanned.end + 1;
                scanned.end = from;
            }
        }
        Ok((blocks, best, max_seq))
    }

    /// Recovery step: every block the scan found written becomes full and a GC candidate, except
    /// those left part-written by the cut (a written prefix, no torn page), which are taken up
    /// again where their writes stopped: on each chip the first for GC's copies, the next for
    /// write-backs. Closing them instead loses their room until GC erases them, and GC needs
    /// room to erase anything: a one-chip device cut while its last free block was open
    /// recovered with no free block and no open one, and a write-back in its second life failed
    /// "device full" (the crash soak's `one-chip` geometry, seed 20262037).
    fn adopt_blocks_left_open(&mut self, blocks: &[ScannedBlock]) {
        let g = self.flash.geometry().clone();
        let mut adopted = vec![0usize; g.chips() as usize];
        for (b, scanned) in blocks.iter().enumerate() {
            let block = BlockId(b as u32);
            let chip = g.chip_of_block(block).0 as usize;
            // Written up to `end` and erased after it (the flash's write pointer agrees).
            let part_written = scanned.end > 0
                && scanned.end < g.pages_per_block
                && self.flash.write_pointer(block) == scanned.end;
            let stream = [GC, HOST].get(adopted[chip]).copied();
            match stream {
                Some(stream) if part_written && !scanned.torn => {
                    self.space.pool.adopt_open(stream, block, scanned.end);
                    if stream == HOST {
                        self.summary_lpns[chip] = self.lpns_written(block, scanned.end);
                    }
                    adopted[chip] += 1;
                }
                _ if scanned.end > 0 || scanned.torn => {
                    self.space.pool.mark_full(block);
                    self.space.validity.index_block(block);
                }
                _ => {}
            }
        }
    }

    /// The LPNs the first `end` pages of `block` hold (`u32::MAX`: none), for the summary page
    /// of a host block taken up again (the scan has already read, and charged, their records).
    fn lpns_written(&self, block: BlockId, end: u32) -> Vec<u32> {
        let g = self.flash.geometry();
        let mut oob = [0u8; OOB_BYTES as usize];
        (0..end)
            .map(|p| {
                let read = self.flash.peek_oob(g.ppn(block, p), &mut oob);
                match (read, decode_oob(&oob)) {
                    (Ok(()), Ok((lpn, _))) => lpn,
                    _ => u32::MAX,
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests;
