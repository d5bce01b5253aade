//! The OPTR device: write cache with wid/size tags, coalescing records, per-block summaries,
//! full (shadowed) and incremental checkpoints, constrained GC, internal flushes (OPTR §3.1–§3.4)
//! and the five-phase recovery (§3.5). Layout and scaling: docs/optr.md.

use crate::cutpoint::{algorithm1, first_incomplete, Coalescing};
use crate::format::*;
use flash::{BlockId, ChipId, Content, Flash, Lpn, OpCause, PageState, Ppn, ReadStatus};
use ftl::media::{self, Source, Unreadable};
use ftl::{
    check_range, BlockDevice, BlockPool, BlockState, ChipAllocation, Completion, DesignOptions,
    FtlError, PageOutcome, Promise, RecoveryReport, Validity,
};
use wcache::cache::{CachedPage, PageTags, WriteCache};

/// A metadata page read in recovery: its bytes if it read as data, and whether it read
/// uncorrectable.
type MetaRead = (Option<Box<[u8]>>, bool);

const HOST: usize = 0;
const GC: usize = 1;
const STREAMS: usize = 2;
const NONE: u32 = u32::MAX;
const PARAMS: [&str; 10] = [
    "cache_mb",
    "op",
    "full_ckpt_blocks",
    "inc_blocks",
    "diff_buffer_kb",
    "gc_batch",
    "flush_interval_ms",
    "gc_free_blocks",
    "gc_hysteresis_blocks",
    "chip_allocation",
];

/// Design parameters (paper values where the device is large enough; docs/optr.md).
#[derive(Clone, Debug)]
pub struct Params {
    pub cache_mb: f64,
    pub op: f64,
    pub full_blocks: u32,
    pub inc_blocks: u32,
    pub diff_entries: u32,
    pub gc_batch: u32,
    pub flush_interval_ns: u64,
    pub gc_free_blocks: u32,
    pub gc_hysteresis_blocks: u32,
    /// Which chip a host page goes to (`soonest-idle`, or `modulo` as the paper's SSD, §7).
    pub chip_allocation: ChipAllocation,
}

/// Where the reserved areas are: striped over the first blocks of each chip (decision O5).
#[derive(Clone, Debug)]
struct Layout {
    slots: [Vec<BlockId>; 2],
    inc: Vec<BlockId>,
    l2p_pages: u32,
    l2p_per_page: u32,
}

impl Layout {
    /// Page `k` of a full-checkpoint slot (striped so the slot's blocks program in parallel).
    fn slot_page(&self, g: &flash::Geometry, slot: usize, k: u32) -> Ppn {
        let n = self.slots[slot].len() as u32;
        g.ppn(self.slots[slot][(k % n) as usize], k / n)
    }
    fn inc_page(&self, g: &flash::Geometry, pos: u32) -> Ppn {
        g.ppn(
            self.inc[(pos / g.pages_per_block) as usize],
            pos % g.pages_per_block,
        )
    }
    fn is_reserved(&self, b: BlockId) -> bool {
        self.slots.iter().any(|s| s.contains(&b)) || self.inc.contains(&b)
    }
}

/// Extra page programs by cause (OPTR §7.1 overhead breakdown).
#[derive(Clone, Copy, Debug, Default)]
pub struct Overhead {
    pub incremental_checkpoint_pages: u64,
    pub record_pages: u64,
    pub full_checkpoint_pages: u64,
    pub internal_flush_pages: u64,
    pub summary_pages: u64,
}

pub struct Optr {
    flash: Flash,
    pool: BlockPool,
    validity: Validity,
    params: Params,
    layout: Layout,
    logical: u32,
    l2p: Vec<Ppn>,
    cache: WriteCache,
    next_wid: u64,
    seal_wid: u64,
    generation: u64,
    checkpoint_seq: u64,
    cur_slot: usize,
    epoch: u32,
    block_epoch: Vec<u32>,
    pending: Vec<Option<Ppn>>,
    summary: Vec<Vec<SummaryEntry>>,
    diff_dirty: Vec<bool>,
    diff_list: Vec<u32>,
    records: Vec<(Coalescing, u32)>,
    records_per_page: u32,
    inc_pos: u32,
    inc_last_end: u64,
    programs_end_ns: u64,
    last_internal_flush_ns: u64,
    overhead: Overhead,
    scratch: Vec<CachedPage>,
    coalesced: u64,
    gc_rounds: u64,
    /// Host pages `chip_allocation = modulo` could not place on their own chip.
    modulo_fallbacks: u64,
}

/// GC's free-block mark by default, for a write cache of `cache_mb`: two chains of one block
/// per stream and chip, the blocks the cache's internal flush takes, and two more.
///
/// GC needs room for the internal flush it starts with (the whole cache) and for the chains'
/// next blocks (one per stream and chip); the paper's device hardly notices (8 MB of 128 GB),
/// `small` does. A recovery seals every open stream block and links fresh ones (decision O2),
/// so a second crash reserve of one block per stream and chip keeps GC able to copy after it:
/// without it the recovered device could be left with no free block beyond the chains' and no
/// room to collect (found by second-life soaks).
pub fn default_gc_free_blocks(g: &flash::Geometry, cache_mb: f64) -> u32 {
    let cache_pages = ((cache_mb * 1048576.0) / g.page_bytes as f64).max(1.0) as u32;
    let chains = STREAMS as u32 * g.chips();
    2 * chains + cache_pages.div_ceil(g.pages_per_block - 1) + 2
}

impl Params {
    /// GC stops when this many blocks are free (or after `gc_batch` victims): the watermark plus
    /// `gc_hysteresis_blocks` (default one per chip), not a multiple of the watermark — on a small
    /// device every block kept free raises the utilisation of the rest and the copies GC makes.
    pub fn gc_target(&self) -> u32 {
        self.gc_free_blocks + self.gc_hysteresis_blocks
    }

    fn parse(o: &DesignOptions, flash: &Flash) -> Result<Params, FtlError> {
        o.check_known("optr", &PARAMS)?;
        let g = flash.geometry();
        let cache_mb: f64 = o.get("cache_mb", wcache::cache::default_cache_mb(g))?;
        let op: f64 = o.get("op", 0.07)?;
        let logical_guess = (g.pages() as f64 * (1.0 - op)) as u64;
        let per_l2p = entries_per_page(g.page_bytes, L2P_ENTRY, 0) as u64;
        let l2p_pages = logical_guess.div_ceil(per_l2p) as u32;
        let full_default = 2 * (l2p_pages + 1).div_ceil(g.pages_per_block);
        let inc_default = (g.blocks() / 64).clamp(2, 32);
        let inc_blocks: u32 = o.get("inc_blocks", inc_default)?;
        let inc_bytes = inc_blocks as u64 * g.block_bytes();
        let diff_kb_default = (256u64).min(inc_bytes / 32 / 1024).max(1);
        let diff_kb: u64 = o.get("diff_buffer_kb", diff_kb_default)?;
        Ok(Params {
            cache_mb,
            op,
            full_blocks: o.get("full_ckpt_blocks", full_default)?,
            inc_blocks,
            diff_entries: (diff_kb * 1024 / DIFF_ENTRY as u64).max(1) as u32,
            gc_batch: o.get("gc_batch", 16u32)?,
            flush_interval_ns: o.get("flush_interval_ms", 5000u64)? * 1_000_000,
            gc_free_blocks: o.get("gc_free_blocks", default_gc_free_blocks(g, cache_mb))?,
            gc_hysteresis_blocks: o.get("gc_hysteresis_blocks", g.chips())?,
            chip_allocation: o
                .get("chip_allocation", "soonest-idle".to_string())?
                .parse()?,
        })
    }
}

/// Builds the design on an erased device (writes the first full checkpoint).
pub fn format(flash: Flash, o: &DesignOptions) -> Result<Box<dyn BlockDevice>, FtlError> {
    let mut d = Optr::blank(flash, o)?;
    d.full_checkpoint(0)?;
    Ok(Box::new(d))
}

/// The fixed-size metadata pages must fit one flash page: a block's summary names each of its
/// other pages, and a checkpoint seal points at every stream's chain on every chip (§3.2,
/// §3.4). A geometry with small pages or many chips is refused here, not by a panic mid-run.
fn check_metadata_fits(g: &flash::Geometry) -> Result<(), FtlError> {
    let page = g.page_bytes as usize;
    let summary = HEADER_BYTES + (g.pages_per_block as usize - 1) * SUMMARY_ENTRY;
    let seal = HEADER_BYTES + SEAL_EXTRA + 4 * STREAMS * g.chips() as usize;
    if summary > page {
        return Err(FtlError::InvalidOption(format!(
            "optr: a block summary of {} entries needs {summary} bytes but a page holds {page}",
            g.pages_per_block - 1
        )));
    }
    if seal > page {
        return Err(FtlError::InvalidOption(format!(
            "optr: a checkpoint seal for {} chips needs {seal} bytes but a page holds {page}",
            g.chips()
        )));
    }
    Ok(())
}

impl Optr {
    fn blank(flash: Flash, o: &DesignOptions) -> Result<Optr, FtlError> {
        ftl::require_spare_area("optr", OOB_BYTES, &flash)?;
        let params = Params::parse(o, &flash)?;
        let g = flash.geometry().clone();
        let chips = g.chips();
        if params.full_blocks < 2 || params.full_blocks % 2 != 0 || params.inc_blocks < 1 {
            return Err(FtlError::InvalidOption(
                "full_ckpt_blocks must be even and >= 2, inc_blocks >= 1".into(),
            ));
        }
        check_metadata_fits(&g)?;
        let mut reserved = Vec::new();
        for k in 0..params.full_blocks + params.inc_blocks {
            reserved.push(g.block(ChipId(k % chips), k / chips));
        }
        let half = (params.full_blocks / 2) as usize;
        let data_blocks = g.blocks() - reserved.len() as u32;
        let per_block = g.pages_per_block - 1;
        let by_op = (data_blocks as f64 * per_block as f64 * (1.0 - params.op)) as u32;
        // GC's stop target plus the chains' pre-allocated next blocks stay out of the logical space
        let cap =
            data_blocks.saturating_sub(params.gc_target() + STREAMS as u32 * chips) * per_block;
        let logical = by_op.min(cap);
        let l2p_per_page = entries_per_page(g.page_bytes, L2P_ENTRY, 0);
        let layout = Layout {
            slots: [reserved[..half].to_vec(), reserved[half..2 * half].to_vec()],
            inc: reserved[2 * half..].to_vec(),
            l2p_pages: logical.div_ceil(l2p_per_page),
            l2p_per_page,
        };
        if logical == 0 {
            return Err(FtlError::InvalidOption(format!(
                "no logical pages left: {data_blocks} data blocks cannot keep {} free (lower cache_mb or gc_free_blocks)",
                params.gc_target() + STREAMS as u32 * chips
            )));
        }
        if (layout.l2p_pages + 1) > half as u32 * g.pages_per_block {
            return Err(FtlError::InvalidOption(format!(
                "a full checkpoint needs {} pages but a slot holds {}",
                layout.l2p_pages + 1,
                half as u32 * g.pages_per_block
            )));
        }
        let lay = layout.clone();
        let pool = BlockPool::new(&g, STREAMS, |b| lay.is_reserved(b));
        let cache_pages = ((params.cache_mb * 1048576.0) / g.page_bytes as f64).max(1.0) as u32;
        Ok(Optr {
            validity: Validity::new(&g),
            pool,
            layout,
            logical,
            l2p: vec![Ppn::NONE; logical as usize],
            cache: WriteCache::new(cache_pages, logical),
            next_wid: 1,
            seal_wid: 0,
            generation: 0,
            checkpoint_seq: 0,
            cur_slot: 1,
            epoch: 0,
            block_epoch: vec![0; g.blocks() as usize],
            pending: vec![None; STREAMS * chips as usize],
            summary: vec![
                vec![SummaryEntry::default(); per_block as usize];
                STREAMS * chips as usize
            ],
            diff_dirty: vec![false; logical as usize],
            diff_list: Vec::new(),
            records: Vec::new(),
            records_per_page: entries_per_page(g.page_bytes, RECORD_ENTRY, 0),
            inc_pos: 0,
            inc_last_end: 0,
            programs_end_ns: 0,
            last_internal_flush_ns: 0,
            overhead: Overhead::default(),
            scratch: Vec::new(),
            coalesced: 0,
            gc_rounds: 0,
            modulo_fallbacks: 0,
            params,
            flash,
        })
    }

    pub fn overhead(&self) -> Overhead {
        self.overhead
    }

    fn page_bytes(&self) -> usize {
        self.flash.geometry().page_bytes as usize
    }

    /// Next page of `stream` for `lpn`: with `chip_allocation = modulo` a host page goes to
    /// chip `lpn mod chips` while that chip's chain is linked; otherwise to the soonest-idle
    /// chip whose chain is linked (an open block or a block chosen by a summary or a seal):
    /// every post-checkpoint page stays reachable.
    fn alloc(&mut self, stream: usize, lpn: u32) -> Option<Ppn> {
        let chips = self.flash.geometry().chips();
        let own_chip = (stream == HOST && self.params.chip_allocation == ChipAllocation::Modulo)
            .then_some(lpn % chips);
        let chip = match own_chip {
            Some(c) if self.linked(stream, c) => c,
            Some(_) => {
                self.modulo_fallbacks += 1;
                self.soonest_linked(stream)?
            }
            None => self.soonest_linked(stream)?,
        };
        let slot = stream * chips as usize + chip as usize;
        match self.pending[slot].take() {
            Some(p) => Some(p),
            None => self.pool.allocate_on(stream, ChipId(chip)),
        }
    }

    /// Whether `stream`'s chain on chip `c` can take a page: an open block, or a block a
    /// summary or seal already links (a fresh block would be unlinked).
    fn linked(&self, stream: usize, c: u32) -> bool {
        let chips = self.flash.geometry().chips() as usize;
        self.pending[stream * chips + c as usize].is_some()
            || self.pool.open_block(stream, ChipId(c)).is_some()
    }

    /// The linked chip of `stream` that is idle soonest.
    fn soonest_linked(&self, stream: usize) -> Option<u32> {
        let mut best: Option<(u64, u32)> = None;
        for c in 0..self.flash.geometry().chips() {
            if self.linked(stream, c) {
                let t = self.flash.chip_free_ns(c);
                if best.is_none_or(|(bt, _)| t < bt) {
                    best = Some((t, c));
                }
            }
        }
        best.map(|(_, c)| c)
    }

    #[allow(clippy::too_many_arguments)]
    fn program_data(
        &mut self,
        stream: usize,
        lpn: u32,
        content: Source<'_>,
        wid: u64,
        size: u32,
        relocated: bool,
        not_before: u64,
        cause: OpCause,
    ) -> Result<(Ppn, u64, u64), FtlError> {
        let Some(ppn) = self.alloc(stream, lpn) else {
            if std::env::var("OPTR_DEBUG").is_ok() {
                let chips = self.flash.geometry().chips();
                eprintln!(
                    "alloc({stream}) failed: free {} per chip {:?} epoch {} full {}",
                    self.pool.free_blocks(),
                    (0..chips)
                        .map(|c| self.pool.free_blocks_on(ChipId(c)))
                        .collect::<Vec<_>>(),
                    self.epoch,
                    self.pool.full_blocks().count()
                );
            }
            return Err(FtlError::NoSpace);
        };
        let oob = PageOob {
            kind: PageKind::Data,
            relocated,
            wid,
            size,
            lpn,
        }
        .encode();
        let span = content.program(&mut self.flash, ppn, &oob, not_before, cause)?;
        let g = self.flash.geometry();
        let (block, off, chip) = (g.block_of(ppn), g.page_in_block(ppn), g.chip_of(ppn));
        let ppb = g.pages_per_block;
        let chips = g.chips() as usize;
        self.block_epoch[block.0 as usize] = self.epoch;
        let slot = stream * chips + chip.0 as usize;
        self.summary[slot][off as usize] = SummaryEntry { wid, size, lpn };
        self.programs_end_ns = self.programs_end_ns.max(span.end_ns);
        if off == ppb - 2 {
            self.close_block(stream, chip, block, span.end_ns)?;
        }
        Ok((ppn, span.start_ns, span.end_ns))
    }

    /// Writes a full block's summary page, choosing the stream's next block first (§3.3 [R]).
    fn close_block(
        &mut self,
        stream: usize,
        chip: ChipId,
        block: BlockId,
        not_before: u64,
    ) -> Result<(), FtlError> {
        let chips = self.flash.geometry().chips() as usize;
        let sum_ppn = self
            .pool
            .allocate_on(stream, chip)
            .ok_or(FtlError::NoSpace)?;
        debug_assert_eq!(self.flash.geometry().block_of(sum_ppn), block);
        let slot = stream * chips + chip.0 as usize;
        // the next block: on the same chip, else on a chip where this stream's chain has
        // ended (the summary re-links that chip's chain), else none until the next checkpoint
        let target = if self.pool.free_blocks_on(chip) > 0 {
            Some(chip.0 as usize)
        } else {
            (0..chips).find(|&c| {
                self.pending[stream * chips + c].is_none()
                    && self.pool.open_block(stream, ChipId(c as u32)).is_none()
                    && self.pool.free_blocks_on(ChipId(c as u32)) > 0
            })
        };
        let next = match target {
            Some(c) => {
                let p = self
                    .pool
                    .allocate_on(stream, ChipId(c as u32))
                    .expect("a free block");
                self.pending[stream * chips + c] = Some(p);
                self.flash.geometry().block_of(p).0
            }
            None => NONE,
        };
        let page = encode_summary(&self.summary[slot], next, self.page_bytes());
        let oob = PageOob {
            kind: PageKind::Summary,
            relocated: false,
            wid: 0,
            size: 0,
            lpn: NONE,
        }
        .encode();
        let span = self.flash.program(
            sum_ppn,
            &Content::Bytes(page),
            &oob,
            not_before,
            OpCause::Summary,
        )?;
        self.overhead.summary_pages += 1;
        self.programs_end_ns = self.programs_end_ns.max(span.end_ns);
        self.summary[slot].fill(SummaryEntry::default());
        debug_assert_eq!(self.pool.state(block), BlockState::Full);
        self.validity.index_block(block);
        Ok(())
    }

    fn map(&mut self, lpn: u32, ppn: Ppn, end_ns: u64) {
        let i = lpn as usize;
        if !self.l2p[i].is_none() {
            self.validity.invalidate(self.l2p[i], end_ns);
        }
        self.l2p[i] = ppn;
        self.validity.set_valid(ppn, lpn);
        if !self.diff_dirty[i] {
            self.diff_dirty[i] = true;
            self.diff_list.push(lpn);
        }
    }

    fn write_back(&mut self, page: &CachedPage, not_before: u64) -> Result<u64, FtlError> {
        let (ppn, start, end) = self.program_data(
            HOST,
            page.lpn,
            Source::Data(&page.content),
            page.tags.wid,
            page.tags.size,
            false,
            not_before,
            OpCause::HostData,
        )?;
        self.map(page.lpn, ppn, end);
        Ok(start)
    }

    /// Appends one page to the incremental area, a strictly serial log.
    fn inc_append(
        &mut self,
        kind: PageKind,
        page: Box<[u8]>,
        not_before: u64,
        cause: OpCause,
    ) -> Result<u64, FtlError> {
        let g = self.flash.geometry().clone();
        assert!(
            self.inc_pos < self.layout.inc.len() as u32 * g.pages_per_block,
            "incremental area overflow"
        );
        let ppn = self.layout.inc_page(&g, self.inc_pos);
        let oob = PageOob {
            kind,
            relocated: false,
            wid: self.generation,
            size: 0,
            lpn: NONE,
        }
        .encode();
        let span = self.flash.program(
            ppn,
            &Content::Bytes(page),
            &oob,
            not_before.max(self.inc_last_end),
            cause,
        )?;
        self.inc_pos += 1;
        self.inc_last_end = span.end_ns;
        Ok(span.end_ns)
    }

    fn inc_room(&self) -> u32 {
        self.layout.inc.len() as u32 * self.flash.geometry().pages_per_block - self.inc_pos
    }

    fn record_pages_needed(&self) -> u32 {
        (self.records.len() as u32).div_ceil(self.records_per_page)
    }

    /// Programs buffered coalescing records (all, or only full pages).
    fn program_records(&mut self, now: u64, only_full: bool) -> Result<u64, FtlError> {
        let mut end = now;
        while !self.records.is_empty()
            && (!only_full || self.records.len() >= self.records_per_page as usize)
        {
            let n = self.records.len().min(self.records_per_page as usize);
            let page = encode_records(&self.records[..n], self.generation, self.page_bytes());
            self.records.drain(..n);
            end = end.max(self.inc_append(PageKind::Records, page, now, OpCause::Record)?);
            self.overhead.record_pages += 1;
        }
        Ok(end)
    }

    /// Writes back every dirty page (and, with `records`, the record buffer); returns when all
    /// of it — and every earlier program — has ended.
    fn internal_flush(&mut self, now: u64, records: bool, internal: bool) -> Result<u64, FtlError> {
        // Records first: their page goes to the incremental log's fixed chip, and the write-backs
        // then pick other (idle sooner) chips instead of queueing behind it or in front of it.
        // Any order is safe: a lost record only makes recovery stop earlier (P + D < size).
        let mut end = now;
        if records {
            end = end.max(self.program_records(now, false)?);
        }
        let mut pages = std::mem::take(&mut self.scratch);
        self.cache.lend_dirty(&mut pages);
        let written = pages
            .iter()
            .try_for_each(|p| self.write_back(p, now).map(drop));
        if internal {
            self.overhead.internal_flush_pages += pages.len() as u64;
        }
        self.cache.return_contents(&mut pages);
        self.scratch = pages;
        written?;
        end = end.max(self.programs_end_ns);
        self.last_internal_flush_ns = now;
        Ok(end.max(self.inc_last_end))
    }

    /// Next free page of every (stream, chip) chain; links a fresh block where none is open.
    fn link_streams(&mut self) -> Vec<u32> {
        let chips = self.flash.geometry().chips() as usize;
        let mut ptrs = Vec::with_capacity(STREAMS * chips);
        for s in 0..STREAMS {
            for c in 0..chips {
                let slot = s * chips + c;
                let chip = ChipId(c as u32);
                let p = if let Some(p) = self.pending[slot] {
                    p.0
                } else if let Some((b, next)) = self.pool.open_block(s, chip) {
                    self.flash.geometry().ppn(b, next).0
                } else if self.pool.free_blocks_on(chip) > 0 {
                    let p = self.pool.allocate_on(s, chip).expect("free block");
                    self.pending[slot] = Some(p);
                    p.0
                } else {
                    NONE
                };
                ptrs.push(p);
            }
        }
        ptrs
    }

    fn sealed(&mut self) {
        self.seal_wid = self.next_wid - 1;
        self.checkpoint_seq += 1;
        self.epoch += 1;
        for &l in &self.diff_list {
            self.diff_dirty[l as usize] = false;
        }
        self.diff_list.clear();
    }

    /// Incremental checkpoint (the default, §3.3); a full one when the area is too full.
    fn checkpoint(&mut self, now: u64) -> Result<u64, FtlError> {
        let per = entries_per_page(self.flash.geometry().page_bytes, DIFF_ENTRY, 0) as usize;
        // the internal flush adds mapping changes, so size the checkpoint after it
        let flushed = self.internal_flush(now, false, true)?;
        let diff_pages = self.diff_list.len().div_ceil(per) as u32;
        if self.record_pages_needed() + diff_pages + 1 > self.inc_room() {
            return self.full_checkpoint(now);
        }
        let before = self.inc_pos;
        let end = flushed.max(self.program_records(now, false)?);
        let mut pairs = Vec::with_capacity(per);
        let list = std::mem::take(&mut self.diff_list);
        for chunk in list.chunks(per) {
            pairs.clear();
            pairs.extend(chunk.iter().map(|&l| (l, self.l2p[l as usize].0)));
            let page = encode_pairs(
                PageKind::Diff,
                &pairs,
                self.generation,
                0,
                self.page_bytes(),
            );
            self.inc_append(PageKind::Diff, page, end, OpCause::Checkpoint)?;
        }
        self.diff_list = list;
        let seal = Seal {
            generation: self.generation,
            latest_wid: self.next_wid - 1,
            checkpoint_seq: self.checkpoint_seq + 1,
            full: false,
            pointers: self.link_streams(),
        };
        let page = encode_seal(&seal, self.page_bytes());
        let seal_end = self.inc_append(PageKind::Seal, page, end, OpCause::Checkpoint)?;
        self.overhead.incremental_checkpoint_pages += (self.inc_pos - before) as u64;
        self.sealed();
        self.programs_end_ns = self.programs_end_ns.max(seal_end);
        Ok(seal_end)
    }

    /// Full checkpoint into the older slot (the newer stays as the shadow), then the
    /// incremental area is erased (§3.3).
    fn full_checkpoint(&mut self, now: u64) -> Result<u64, FtlError> {
        // buffered records only concern requests this checkpoint seals
        let end = self.internal_flush(now, false, true)?;
        self.records.clear();
        let g = self.flash.geometry().clone();
        let slot = 1 - self.cur_slot;
        let generation = self.generation + 1;
        for &b in &self.layout.slots[slot].clone() {
            self.flash.erase(b, now, OpCause::Checkpoint)?;
        }
        let mut last = end;
        let per = self.layout.l2p_per_page;
        let mut pairs = Vec::with_capacity(per as usize);
        for k in 0..self.layout.l2p_pages {
            pairs.clear();
            let lo = k * per;
            let hi = (lo + per).min(self.logical);
            pairs.extend((lo..hi).map(|l| (l, self.l2p[l as usize].0)));
            let page = encode_pairs(
                PageKind::FullL2p,
                &pairs,
                generation,
                k,
                g.page_bytes as usize,
            );
            let ppn = self.layout.slot_page(&g, slot, k);
            let oob = PageOob {
                kind: PageKind::FullL2p,
                relocated: false,
                wid: generation,
                size: 0,
                lpn: NONE,
            }
            .encode();
            let span =
                self.flash
                    .program(ppn, &Content::Bytes(page), &oob, end, OpCause::Checkpoint)?;
            last = last.max(span.end_ns);
        }
        let seal = Seal {
            generation,
            latest_wid: self.next_wid - 1,
            checkpoint_seq: self.checkpoint_seq + 1,
            full: true,
            pointers: self.link_streams(),
        };
        let ppn = self.layout.slot_page(&g, slot, self.layout.l2p_pages);
        let oob = PageOob {
            kind: PageKind::Seal,
            relocated: false,
            wid: generation,
            size: 0,
            lpn: NONE,
        }
        .encode();
        let span = self.flash.program(
            ppn,
            &Content::Bytes(encode_seal(&seal, g.page_bytes as usize)),
            &oob,
            last,
            OpCause::Checkpoint,
        )?;
        self.overhead.full_checkpoint_pages += self.layout.l2p_pages as u64 + 1;
        let seal_end = span.end_ns;
        let mut erased = seal_end;
        for &b in &self.layout.inc.clone() {
            erased = erased.max(self.flash.erase(b, seal_end, OpCause::Checkpoint)?.end_ns);
        }
        self.inc_pos = 0;
        self.inc_last_end = erased;
        self.generation = generation;
        self.cur_slot = slot;
        self.sealed();
        self.programs_end_ns = self.programs_end_ns.max(seal_end);
        Ok(seal_end)
    }

    /// GC (§3.4): internal flush + checkpoint, relocate up to `gc_batch` greedy victims among
    /// blocks programmed before the latest checkpoint, checkpoint, then erase the victims.
    fn gc(&mut self, now: u64) -> Result<(), FtlError> {
        self.gc_rounds += 1;
        self.checkpoint(now)?;
        let g = self.flash.geometry().clone();
        let data_max = g.pages_per_block - 1;
        let target = self.params.gc_target();
        let mut victims = Vec::new();
        let mut oob = vec![0u8; OOB_BYTES as usize];
        while (victims.len() as u32) < self.params.gc_batch
            && self.pool.free_blocks() + (victims.len() as u32) < target
        {
            let (pool, epochs, epoch, validity) =
                (&self.pool, &self.block_epoch, self.epoch, &self.validity);
            let Some(v) = validity.greedy_victim(|b| {
                pool.state(b) == BlockState::Full
                    && epochs[b.0 as usize] < epoch
                    && validity.valid_count(b) < data_max
            }) else {
                break;
            };
            // victims are erased only after the batch's checkpoint: their copies must fit in
            // the free blocks left (one block per chip kept for the chains and the summaries)
            let room = self.pool.free_blocks().saturating_sub(g.chips()) * data_max;
            if self.validity.valid_count(v) > room {
                break;
            }
            self.validity.unindex_block(v);
            let live: Vec<(Ppn, u32)> = self.validity.valid_pages(v).collect();
            for (from, lpn) in live {
                let (status, read) = self.flash.read(from, &mut oob, now, OpCause::GcCopy)?;
                // A page lost to the media moves as a lost copy (docs/reliability.md).
                let cause = OpCause::GcCopy;
                // Its record's write id and size order recovery's replay (§3.1); OPTR keeps
                // neither per page in RAM.
                let kept = media::record_kept_nowhere_else(from, "OPTR's write id and size");
                let at = (read.end_ns, cause);
                let ready =
                    media::record_of_read(&mut self.flash, from, &status, &mut oob, at, kept)?;
                let o = PageOob::decode(&oob)
                    .ok()
                    .ok_or_else(|| FtlError::Corrupt(format!("OOB of {from}")))?;
                let source = Source::of_read(from, &status);
                let (to, _, end) =
                    self.program_data(GC, lpn, source, o.wid, o.size, true, ready, cause)?;
                self.map(lpn, to, end);
            }
            victims.push(v);
        }
        if victims.is_empty() {
            if std::env::var("OPTR_DEBUG").is_ok() {
                eprintln!(
                    "gc: no victim; free {} full {}",
                    self.pool.free_blocks(),
                    self.pool.full_blocks().count()
                );
            }
            return if self.pool.free_blocks() > 0 {
                Ok(())
            } else {
                Err(FtlError::NoSpace)
            };
        }
        let seal_end = self.checkpoint(now)?;
        for v in victims {
            let after = seal_end.max(self.validity.invalidated_by_ns(v));
            self.flash.erase(v, after, OpCause::GcCopy)?;
            self.validity.erased(v);
            self.pool.release(v);
        }
        Ok(())
    }

    /// Work due between requests: periodic internal flush, GC below the free-block watermark.
    fn maintain(&mut self, now: u64, pages: u32) -> Result<(), FtlError> {
        if now.saturating_sub(self.last_internal_flush_ns) >= self.params.flush_interval_ns {
            if self.record_pages_needed() > self.inc_room() {
                self.full_checkpoint(now)?;
            } else {
                self.internal_flush(now, true, true)?;
            }
        }
        let per_block = self.flash.geometry().pages_per_block - 1;
        let needed = self.params.gc_free_blocks + pages / per_block;
        // A round stops at `gc_batch` victims: another while the last one freed blocks.
        while self.pool.free_blocks() < needed {
            let before = self.pool.free_blocks();
            self.gc(now)?;
            if self.pool.free_blocks() <= before {
                break;
            }
        }
        Ok(())
    }

    /// The longest write OPTR takes. A request is applied whole, with no GC or checkpoint
    /// inside it (§3.3), so the flash it may write (the cache's write-backs) must already be
    /// free: GC runs before a request of `n` pages, round after round while a round frees
    /// blocks, until `n / (pages per block - 1)` blocks above its watermark are free, and a
    /// round stops at `gc_hysteresis_blocks` above it. (Longer requests met "no space" on an
    /// aged `small` device, found by the NBD crash soak.)
    fn max_request_pages(&self) -> u32 {
        let per_block = self.flash.geometry().pages_per_block - 1;
        self.params.gc_hysteresis_blocks.max(1) * per_block
    }
}

impl BlockDevice for Optr {
    fn design(&self) -> &'static str {
        "optr"
    }
    fn promise(&self) -> Promise {
        Promise::Ordered
    }
    fn logical_pages(&self) -> u32 {
        self.logical
    }
    fn max_write_pages(&self) -> Option<u32> {
        Some(self.max_request_pages())
    }

    /// One host request = one wid, size = its page count (request atomicity covers the run).
    fn write(
        &mut self,
        start: Lpn,
        pages: &[Content],
        arrival_ns: u64,
    ) -> Result<Completion, FtlError> {
        check_range(start, pages.len() as u64, self.logical)?;
        if pages.len() as u64 > self.max_request_pages() as u64 {
            return Err(FtlError::RequestTooLarge {
                pages: pages.len() as u64,
                max: self.max_request_pages() as u64,
            });
        }
        self.maintain(arrival_ns, pages.len() as u32)?;
        let wid = self.next_wid;
        self.next_wid += 1;
        let tags = PageTags {
            wid,
            size: pages.len() as u32,
        };
        let mut ack = arrival_ns;
        for (k, content) in pages.iter().enumerate() {
            let lpn = start.0 + k as u32;
            if self.cache.needs_eviction(lpn) {
                let page = self.cache.pop_lru().expect("full cache");
                if page.dirty {
                    ack = ack.max(self.write_back(&page, arrival_ns)?);
                }
                self.cache.recycle(page.content);
            }
            if let Some(earlier) = self.cache.insert_copy(lpn, content, tags) {
                debug_assert!(earlier.wid < wid);
                self.records.push((
                    Coalescing {
                        earlier: earlier.wid,
                        later: wid,
                    },
                    earlier.size,
                ));
                self.coalesced += 1;
            }
        }
        // between requests only: checkpoints never split a request
        if self.records.len() >= self.records_per_page as usize {
            if self.record_pages_needed() > self.inc_room() {
                self.full_checkpoint(arrival_ns)?;
            } else {
                self.program_records(arrival_ns, true)?;
            }
        }
        if self.diff_list.len() >= self.params.diff_entries as usize {
            self.checkpoint(arrival_ns)?;
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
        let end = if self.record_pages_needed() > self.inc_room() {
            self.full_checkpoint(arrival_ns)?
        } else {
            self.internal_flush(arrival_ns, true, false)?
        };
        Ok(Completion {
            arrival_ns,
            ack_ns: end.max(self.programs_end_ns),
        })
    }

    fn trim(&mut self, _: Lpn, _: u32, _: u64) -> Result<Completion, FtlError> {
        Err(FtlError::Unsupported("OPTR (as in the paper) has no trim"))
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
        self.pool.check_invariants()?;
        self.validity.check_invariants()?;
        self.cache.check_invariants()?;
        for (lpn, &p) in self.l2p.iter().enumerate() {
            if !p.is_none() && self.validity.owner(p) != Some(lpn as u32) {
                return Err(ftl::violation!(
                    "lpn {lpn} maps to {p} which it does not own"
                ));
            }
        }
        if self.seal_wid >= self.next_wid {
            return Err("seal wid ahead of the next wid".into());
        }
        Ok(())
    }

    fn memory(&self) -> Vec<(String, u64)> {
        let mut m = self.flash().memory();
        m.extend(ftl::space::block_space_memory(&self.validity, &self.pool));
        m.push(("optr.mapping".into(), flash::vec_bytes(&self.l2p)));
        m
    }

    fn metrics(&self) -> Vec<(String, f64)> {
        let o = self.overhead;
        vec![
            (
                "extra_incremental_checkpoint_pages".into(),
                o.incremental_checkpoint_pages as f64,
            ),
            ("extra_record_pages".into(), o.record_pages as f64),
            (
                "extra_full_checkpoint_pages".into(),
                o.full_checkpoint_pages as f64,
            ),
            (
                "extra_internal_flush_pages".into(),
                o.internal_flush_pages as f64,
            ),
            ("summary_pages".into(), o.summary_pages as f64),
            ("coalesced_pages".into(), self.coalesced as f64),
            ("gc_rounds".into(), self.gc_rounds as f64),
            // What a recovery would have to read now (OPTR §7.5's worst case is all at their
            // bounds): full checkpoints taken, the incremental area's pages in use and its
            // capacity, mapping changes not yet in a checkpoint.
            ("full_checkpoints".into(), self.generation as f64),
            ("incremental_area_pages".into(), self.inc_pos as f64),
            (
                "incremental_area_capacity".into(),
                (self.inc_pos + self.inc_room()) as f64,
            ),
            ("diff_entries".into(), self.diff_list.len() as f64),
            ("modulo_fallbacks".into(), self.modulo_fallbacks as f64),
        ]
    }
}

/// Five-phase recovery (§3.5), each phase a named step below.
pub fn recover(
    flash: Flash,
    o: &DesignOptions,
) -> Result<(Box<dyn BlockDevice>, RecoveryReport), FtlError> {
    let before = flash.stats().clone();
    let start = flash.idle_ns();
    let mut d = Optr::blank(flash, o)?;
    let (mut seal, have_full) = d.load_full_checkpoint(start)?;
    let mut records = Vec::new();
    if have_full {
        records = d.apply_incremental_checkpoints(&mut seal, start)?;
    }
    let generation = seal.generation;
    let mut pages = d.walk_streams(&seal, start)?;
    pages.retain(|p| p.0 > seal.latest_wid && p.2 < d.logical);
    records.retain(|r| r.0.earlier > seal.latest_wid);
    // Phase 4: the optimal recovery point.
    let counted: Vec<(u64, u32)> = pages.iter().map(|p| (p.0, p.1)).collect();
    let wid_inc = first_incomplete(seal.latest_wid, &counted, &records);
    let coalescing: Vec<Coalescing> = records.iter().map(|r| r.0).collect();
    let bound = algorithm1(wid_inc, &coalescing);
    d.apply_below(&mut pages, bound);
    let max_seen = pages
        .iter()
        .map(|p| p.0)
        .chain(records.iter().map(|r| r.0.later))
        .max()
        .unwrap_or(0);
    d.next_wid = seal.latest_wid.max(max_seen) + 1;
    d.seal_wid = seal.latest_wid;
    d.generation = generation;
    d.rebuild_space()?;
    // Crash after recovery (decision O2): seal what was recovered with fresh stream blocks.
    let now = d.flash.idle_ns();
    d.inc_last_end = now;
    d.full_checkpoint(now)?;
    let mut report = RecoveryReport::measure(&d.flash, &before, start);
    report.details = vec![
        ("post_checkpoint_pages".into(), pages.len() as f64),
        ("coalescing_records".into(), records.len() as f64),
        ("recovered_below_wid".into(), bound as f64),
    ];
    Ok((Box::new(d), report))
}

/// A page found by recovery's stream walk: (wid, request size, lpn, where).
type FoundPage = (u64, u32, u32, Ppn);

/// What recovery finds in one full-checkpoint slot (§3.3: the newest full checkpoint and its
/// shadow alternate between two slots).
struct SlotScan {
    slot: usize,
    seal_ppn: Ppn,
    /// The seal, if its page reads and holds a full checkpoint's seal.
    seal: Option<Seal>,
    /// The seal page holds something that does not read: torn by a cut, or lost to the media.
    seal_unreadable: bool,
    /// The generation the seal's spare area names when its data did not read: programmed
    /// whole, lost to the media.
    lost_seal: Option<u64>,
    /// The newest generation the slot's pages show: the last full checkpoint begun in it.
    generation: Option<u64>,
}

impl Optr {
    /// A metadata page's bytes, if it reads back as data, and whether it read uncorrectable.
    fn read_meta_bytes(
        &mut self,
        ppn: Ppn,
        oob: &mut [u8],
        start: u64,
    ) -> Result<MetaRead, FtlError> {
        let (st, _) = self.flash.read(ppn, oob, start, OpCause::Recovery)?;
        Ok(match st {
            ReadStatus::Data(Content::Bytes(b)) => (Some(b), false),
            st => (None, st == ReadStatus::Uncorrectable),
        })
    }

    /// A metadata page that did not read: torn by the cut, or — lost to the media (`lost`: the
    /// evidence says it was programmed whole) — `what`, kept nowhere else (docs/reliability.md).
    fn not_lost(ppn: Ppn, what: &str, lost: bool) -> Result<(), FtlError> {
        match lost {
            true => Err(FtlError::MediaLoss {
                ppn,
                what: what.into(),
            }),
            false => Ok(()),
        }
    }

    /// Whether a stream block's summary (its last page), which read uncorrectable, is lost to
    /// the media: its spare area decodes ([`media::classify`]), or — nothing of it decodes, and
    /// no later page of its block exists to say its program ended — the simulator's knowledge
    /// ([`media::undecided_lost`], left open).
    fn summary_lost(&mut self, ppn: Ppn, start: u64) -> Result<bool, FtlError> {
        let mut oob = vec![0u8; OOB_BYTES as usize];
        Ok(
            match media::classify(&mut self.flash, ppn, &mut oob, start, OpCause::Recovery)?.0 {
                Unreadable::Lost => true,
                Unreadable::Torn => media::undecided_lost(&self.flash, ppn),
            },
        )
    }

    /// The generation a metadata page that did not read belonged to, read from its spare
    /// area if it is lost to the media (a torn page has none), with the page: every page the
    /// checkpoints write carries its generation in its record.
    fn lost_generation(&mut self, ppn: Ppn, start: u64) -> Result<Option<(u64, Ppn)>, FtlError> {
        let mut oob = vec![0u8; OOB_BYTES as usize];
        match media::classify(&mut self.flash, ppn, &mut oob, start, OpCause::Recovery)? {
            (Unreadable::Lost, _) => Ok(PageOob::decode(&oob).ok().map(|o| (o.wid, ppn))),
            (Unreadable::Torn, _) => Ok(None),
        }
    }

    /// Recovery phase 1: the newest full checkpoint whose seal and every L2P chunk are intact,
    /// loaded into the L2P table. Returns its seal (an empty one if there is none) and whether
    /// there was one.
    fn load_full_checkpoint(&mut self, start: u64) -> Result<(Seal, bool), FtlError> {
        let g = self.flash.geometry().clone();
        let mut oob = vec![0u8; OOB_BYTES as usize];
        let mut scans = [self.scan_seal(0, start)?, self.scan_seal(1, start)?];
        for scan in scans.iter_mut() {
            self.scan_chunks(scan, start)?;
        }
        let Some((slot, s)) = self.choose_checkpoint(&scans, start)? else {
            let empty = Seal {
                generation: 0,
                latest_wid: 0,
                checkpoint_seq: 0,
                full: true,
                pointers: Vec::new(),
            };
            return Ok((empty, false));
        };
        for k in 0..self.layout.l2p_pages {
            let ppn = self.layout.slot_page(&g, slot, k);
            let (b, uncorrectable) = self.read_meta_bytes(ppn, &mut oob, start)?;
            let Some((gen, pairs)) =
                b.and_then(|b| decode_pairs(&b, PageKind::FullL2p, self.layout.l2p_per_page).ok())
            else {
                // Under its checkpoint's seal, written after it: programmed whole.
                let lost = uncorrectable && media::whole_page_lost(&self.flash);
                Self::not_lost(ppn, "a chunk of OPTR's full checkpoint", lost)?;
                return Err(FtlError::Corrupt(format!(
                    "full checkpoint chunk {k} unreadable"
                )));
            };
            if gen != s.generation {
                return Err(FtlError::Corrupt(format!(
                    "full checkpoint chunk {k} of generation {gen}"
                )));
            }
            for (l, p) in pairs {
                if l < self.logical {
                    self.l2p[l as usize] = Ppn(p);
                }
            }
        }
        self.cur_slot = slot;
        Ok((s, true))
    }

    /// What recovery finds in the seal page of full-checkpoint slot `slot`: its seal, or —
    /// when it does not read — the generation its spare area names (a page lost to the media).
    fn scan_seal(&mut self, slot: usize, start: u64) -> Result<SlotScan, FtlError> {
        let g = self.flash.geometry().clone();
        let mut oob = vec![0u8; OOB_BYTES as usize];
        let seal_ppn = self.layout.slot_page(&g, slot, self.layout.l2p_pages);
        let (status, _) = self
            .flash
            .read(seal_ppn, &mut oob, start, OpCause::Recovery)?;
        let seal = match &status {
            ReadStatus::Data(Content::Bytes(b)) => decode_seal(b).ok().filter(|s| s.full),
            _ => None,
        };
        let lost_seal = match status {
            ReadStatus::Data(_) => None,
            _ => self.lost_generation(seal_ppn, start)?.map(|(gen, _)| gen),
        };
        Ok(SlotScan {
            slot,
            seal_ppn,
            generation: seal.as_ref().map(|s| s.generation).max(lost_seal),
            seal,
            seal_unreadable: status == ReadStatus::Uncorrectable,
            lost_seal,
        })
    }

    /// With the media model on, where a seal that does not read may be torn or lost: the
    /// newest generation the first chunk of each of the slot's blocks names in its record (the
    /// slot's chunks are striped over its blocks and programmed together, before its seal).
    fn scan_chunks(&mut self, scan: &mut SlotScan, start: u64) -> Result<(), FtlError> {
        if scan.seal.is_some() || self.flash.config().media.is_none() {
            return Ok(());
        }
        let g = self.flash.geometry().clone();
        let mut oob = vec![0u8; OOB_BYTES as usize];
        let slot = scan.slot;
        let firsts = (self.layout.slots[slot].len() as u32).min(self.layout.l2p_pages);
        for k in 0..firsts {
            let ppn = self.layout.slot_page(&g, slot, k);
            let (state, _) = self
                .flash
                .read_oob(ppn, &mut oob, start, OpCause::Recovery)?;
            match PageOob::decode(&oob) {
                Ok(po) if state == PageState::Programmed && po.kind == PageKind::FullL2p => {
                    scan.generation = scan.generation.max(Some(po.wid))
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// The full checkpoint recovery starts from (§3.3): the newest one begun, if it is sealed;
    /// else its shadow, the one before it in the other slot — the newest was cut before its
    /// seal was whole. Format seals the first full checkpoint before the device is ready, and a
    /// new one is begun only in the slot of the older, so one of the two was sealed: a seal
    /// that does not read where no sealed one does is lost to the media, not torn; so is the
    /// newest seal when the incremental area (cleared only after a full checkpoint's seal)
    /// holds pages of its generation. Either loss takes the device's mapping with it
    /// ([`FtlError::MediaLoss`]), never an older or an empty one in its place
    /// (docs/reliability.md).
    fn choose_checkpoint(
        &mut self,
        scans: &[SlotScan; 2],
        start: u64,
    ) -> Result<Option<(usize, Seal)>, FtlError> {
        let best = scans
            .iter()
            .filter_map(|s| s.seal.clone().map(|seal| (s.slot, seal)))
            .max_by_key(|(_, s)| s.generation);
        let Some(newest) = scans.iter().filter_map(|s| s.generation).max() else {
            return Ok(best);
        };
        if best.as_ref().is_some_and(|(_, s)| s.generation == newest) {
            return Ok(best);
        }
        let begun = scans
            .iter()
            .find(|s| s.generation == Some(newest))
            .expect("a slot shows the newest generation");
        let shadow = &scans[1 - begun.slot];
        let lost = |scan: &SlotScan, what: String| FtlError::MediaLoss {
            ppn: scan.seal_ppn,
            what,
        };
        let sealed = begun.lost_seal == Some(newest)
            || (begun.seal_unreadable && self.incremental_area_shows(newest, start)?);
        match best {
            _ if sealed => Err(lost(
                begun,
                format!("the seal of OPTR's newest full checkpoint ({newest})"),
            )),
            Some(best) => Ok(Some(best)),
            None if shadow.seal_unreadable => Err(lost(
                shadow,
                format!("the seal of OPTR's full checkpoint before the unsealed {newest}"),
            )),
            None if begun.seal_unreadable => Err(lost(
                begun,
                format!("the seal of OPTR's only full checkpoint ({newest})"),
            )),
            None => Err(FtlError::Corrupt(format!(
                "OPTR's full checkpoint {newest} is unsealed and no sealed one is left"
            ))),
        }
    }

    /// Whether the incremental area's first page belongs to `generation` (read, or named by the
    /// spare area of a page lost to the media).
    fn incremental_area_shows(&mut self, generation: u64, start: u64) -> Result<bool, FtlError> {
        let g = self.flash.geometry().clone();
        let first = self.layout.inc_page(&g, 0);
        Ok(self.page_generation(first, start)? == Some(generation))
    }

    /// The generation (the `wid` of its record) of checkpoint-area page `ppn`: read, or from
    /// the spare area of a page lost to the media; `None` for an erased or torn page.
    fn page_generation(&mut self, ppn: Ppn, start: u64) -> Result<Option<u64>, FtlError> {
        let mut oob = vec![0u8; OOB_BYTES as usize];
        let (status, _) = self.flash.read(ppn, &mut oob, start, OpCause::Recovery)?;
        Ok(match status {
            ReadStatus::Data(_) => PageOob::decode(&oob).ok().map(|o| o.wid),
            ReadStatus::Erased => None,
            ReadStatus::Uncorrectable => self.lost_generation(ppn, start)?.map(|(gen, _)| gen),
        })
    }

    /// Recovery phase 2: the incremental checkpoints of the same generation, in log order: each
    /// sealed diff applied (the seal it ends with becomes `seal`), coalescing records collected.
    fn apply_incremental_checkpoints(
        &mut self,
        seal: &mut Seal,
        start: u64,
    ) -> Result<Vec<(Coalescing, u32)>, FtlError> {
        let g = self.flash.geometry().clone();
        let mut oob = vec![0u8; OOB_BYTES as usize];
        let mut pending_diff: Vec<(u32, u32)> = Vec::new();
        let mut records: Vec<(Coalescing, u32)> = Vec::new();
        let cap = self.layout.inc.len() as u32 * g.pages_per_block;
        for pos in 0..cap {
            let ppn = self.layout.inc_page(&g, pos);
            let (status, _) = self.flash.read(ppn, &mut oob, start, OpCause::Recovery)?;
            let b = match status {
                ReadStatus::Data(Content::Bytes(b)) => b,
                // Lost to the media, a page of this generation takes its diff or seal with it.
                status if self.incremental_page_lost(pos, &status, seal.generation, start)? => {
                    return Err(FtlError::MediaLoss {
                        ppn,
                        what: "a page of OPTR's incremental checkpoints".into(),
                    });
                }
                _ => break,
            };
            let Some(po) = PageOob::decode(&oob).ok() else {
                break;
            };
            if po.wid != seal.generation {
                break;
            }
            match po.kind {
                PageKind::Diff => {
                    let Ok((_, pairs)) = decode_pairs(&b, PageKind::Diff, 0) else {
                        break;
                    };
                    pending_diff.extend(pairs);
                }
                PageKind::Seal => {
                    let Ok(s) = decode_seal(&b) else { break };
                    for (l, p) in pending_diff.drain(..) {
                        if l < self.logical {
                            self.l2p[l as usize] = Ppn(p);
                        }
                    }
                    *seal = s;
                }
                PageKind::Records => {
                    let Ok((_, r)) = decode_records(&b) else {
                        break;
                    };
                    records.extend(r);
                }
                _ => break,
            }
        }
        Ok(records)
    }

    /// Whether the page at `pos` of the incremental area, which read as `status`, is a page of
    /// `generation` lost to the media rather than the log's end: its spare area names the
    /// generation, or — the area being a strictly serial log (§3.3), whose page torn by a cut
    /// is its last — the page after it does.
    fn incremental_page_lost(
        &mut self,
        pos: u32,
        status: &ReadStatus,
        generation: u64,
        start: u64,
    ) -> Result<bool, FtlError> {
        let g = self.flash.geometry().clone();
        let ppn = self.layout.inc_page(&g, pos);
        if let Some((gen, _)) = self.lost_generation(ppn, start)? {
            return Ok(gen == generation);
        }
        let cap = self.layout.inc.len() as u32 * g.pages_per_block;
        let media = self.flash.config().media.is_some();
        if !media || *status != ReadStatus::Uncorrectable || pos + 1 >= cap {
            return Ok(false);
        }
        let next = self.layout.inc_page(&g, pos + 1);
        Ok(self.page_generation(next, start)? == Some(generation))
    }

    /// Recovery phase 3: every stream walked from its sealed pointer, block by block (a block's
    /// summary if present, else OOBs up to the first page not programmed).
    fn walk_streams(&mut self, seal: &Seal, start: u64) -> Result<Vec<FoundPage>, FtlError> {
        let g = self.flash.geometry().clone();
        let mut oob = vec![0u8; OOB_BYTES as usize];
        let mut pages: Vec<FoundPage> = Vec::new();
        let data_max = g.pages_per_block - 1;
        for &p in &seal.pointers {
            let mut at = p;
            let mut hops = 0;
            while at != NONE && hops <= g.blocks() {
                hops += 1;
                let block = g.block_of(Ppn(at));
                let off = g.page_in_block(Ppn(at));
                let summary = g.ppn(block, data_max);
                let (b, uncorrectable) = self.read_meta_bytes(summary, &mut oob, start)?;
                let sum = b.and_then(|b| decode_summary(&b).ok());
                // A summary lost to the media takes the stream's link to its next block with it.
                if sum.is_none() && uncorrectable {
                    let lost = self.summary_lost(summary, start)?;
                    let what = "the summary of an OPTR stream block, which links the next block";
                    Self::not_lost(summary, what, lost)?;
                }
                if let Some((entries, next)) = sum {
                    for o in off..data_max {
                        let e = entries[o as usize];
                        pages.push((e.wid, e.size, e.lpn, g.ppn(block, o)));
                    }
                    at = if next == NONE {
                        NONE
                    } else {
                        g.first_page(BlockId(next)).0
                    };
                    continue;
                }
                for o in off..data_max {
                    let ppn = g.ppn(block, o);
                    let (st, _) = self
                        .flash
                        .read_oob(ppn, &mut oob, start, OpCause::Recovery)?;
                    if st == PageState::Torn {
                        let lost = media::undecided_lost(&self.flash, ppn);
                        let what = "the OOB record of an OPTR page in a block without its summary";
                        Self::not_lost(ppn, what, lost)?;
                    }
                    if st != PageState::Programmed {
                        break;
                    }
                    match PageOob::decode(&oob).ok() {
                        Some(po) if po.kind == PageKind::Data && !po.relocated => {
                            pages.push((po.wid, po.size, po.lpn, ppn))
                        }
                        _ => break,
                    }
                }
                break;
            }
        }
        Ok(pages)
    }

    /// Recovery phase 5: the pages of requests below `bound` applied in wid order.
    fn apply_below(&mut self, pages: &mut [FoundPage], bound: u64) {
        pages.sort_by_key(|p| p.0);
        for &(wid, _, lpn, ppn) in pages.iter() {
            if wid < bound && lpn < self.logical {
                self.l2p[lpn as usize] = ppn;
            }
        }
    }

    /// After recovery: page validity from the L2P table and every written block full.
    fn rebuild_space(&mut self) -> Result<(), FtlError> {
        let g = self.flash.geometry().clone();
        for (lpn, &p) in self.l2p.iter().enumerate() {
            if !p.is_none() {
                self.validity
                    .set_recovered_valid(&self.flash, p, lpn as u32)
                    .map_err(|e| e.in_context(format_args!("lpn {lpn}")))?;
                if self.layout.is_reserved(g.block_of(p)) {
                    return Err(FtlError::Corrupt(format!(
                        "lpn {lpn} maps into a reserved block"
                    )));
                }
            }
        }
        for b in 0..g.blocks() {
            let block = BlockId(b);
            if !self.layout.is_reserved(block)
                && (self.flash.write_pointer(block) > 0 || self.flash.block_erase_torn(block))
            {
                self.pool.mark_full(block);
                self.validity.index_block(block);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
