//! The DFTL device: demand-cached page mapping (Gupta et al., ASPLOS '09, as the Möbius
//! paper §II describes it), made to survive power cuts the way a real DFTL SSD must.
//!
//! - Mapping: translation pages on flash (one per `page_bytes / 4` LPNs), located by the global
//!   translation directory (GTD, in RAM), cached entry by entry in the CMT (LRU). A dirty
//!   translation page is written back lazily, when one of its entries is evicted: all its dirty
//!   entries go together (read-modify-write).
//! - Every data page's OOB holds its LPN and a sequence number; translation pages hold their
//!   number and the sequence number at which they were written.
//! - Block reservations: before a block is opened its number is durable in the reservation log,
//!   so recovery knows exactly which blocks were opened since the last checkpoint.
//! - Checkpoints (every `checkpoint_blocks` blocks opened): all dirty translation pages written
//!   back, then GTD + reservations + open blocks in the older of two slots, sealed last.
//! - Recovery: newest sealed checkpoint, GTD, then the OOB of every page written in blocks opened
//!   since (the "scan zone"): a data page newer than the translation page covering it wins.
//!   Its cost grows with the scan zone, not the device.

use crate::cmt::Cmt;
use crate::format::{
    decode_translation, is_translation, translation_crc, Checkpoint, CheckpointView, OobRecord,
    Reservation, Seal, KIND_DATA, KIND_TRANSLATION, KIND_TRANSLATION_TRIMS, OOB_BYTES,
};
use crate::layout::{Layout, RESERVE_AHEAD};
use crate::mirror::{EntryRun, Mirror};
use crate::owners::CheckedOwners;
use flash::{
    BlockId, ChipId, Content, DataHint, Flash, Lpn, OpCause, PageState, Ppn, ReadStatus, WordCrc,
};
use ftl::media::{self, Unreadable};
use ftl::{
    check_range, BlockDevice, BlockPool, BlockState, Completion, DesignOptions, FtlError, GcPolicy,
    Moved, PageOutcome, Promise, RecoveryReport, Space, Validity,
};
use rustc_hash::FxHashMap;
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;

const STREAM_DATA: usize = 0;
const STREAM_GC: usize = 1;
const STREAM_MAP: usize = 2;
const STREAMS: usize = 3;
/// Owner tag of a translation page in the validity index.
const TRANSLATION: u32 = 1 << 31;

pub const PARAMS: [&str; 8] = [
    "cmt_entries",
    "dram_mb",
    "checkpoint_blocks",
    "oob_scan",
    "gc",
    "wear_threshold",
    "max_request_pages",
    "gc_free_blocks",
];

/// Bytes of one CMT entry in a real controller (LPN and PPN).
pub const CMT_ENTRY_BYTES: u64 = 8;

/// DFTL's parameters (`--param key=value`).
#[derive(Clone, Debug)]
pub struct DftlConfig {
    /// CMT capacity in entries (8 bytes each in a real controller).
    pub cmt_entries: u32,
    /// Blocks opened between checkpoints: the scan zone of recovery.
    pub checkpoint_blocks: u64,
    /// Negative control: `false` skips the post-checkpoint OOB scan at recovery.
    pub oob_scan: bool,
    pub gc: GcPolicy,
    pub wear_threshold: u32,
    pub max_request_pages: u32,
    /// GC runs while fewer blocks are free ([`default_gc_free_blocks`], at least
    /// [`min_gc_free_blocks`]); the mark is also kept out of the exported capacity.
    pub gc_free_blocks: u32,
}

/// Blocks a checkpoint may need at once: every dirty translation page the CMT can hold
/// (`cmt_entries`, at most one per translation page) written back, spread over the chips.
fn checkpoint_room(g: &flash::Geometry, cmt_entries: u32) -> u32 {
    let max_tvpns = g.pages().div_ceil(g.page_bytes / 4);
    cmt_entries.min(max_tvpns).div_ceil(g.pages_per_block) + g.chips()
}

/// GC's free-block mark by default [R] (DFTL does not give one): two blocks per chip and four
/// more, besides the room a checkpoint writing back every dirty translation page needs.
pub fn default_gc_free_blocks(g: &flash::Geometry, cmt_entries: u32) -> u32 {
    2 * g.chips() + 4 + checkpoint_room(g, cmt_entries)
}

/// The least `gc_free_blocks`: a checkpoint's room (recovery runs GC and then writes a
/// checkpoint, and GC's runs checkpoint as they go) and two more, since GC's copies take a free
/// block while the count is already below the mark.
pub fn min_gc_free_blocks(g: &flash::Geometry, cmt_entries: u32) -> u32 {
    checkpoint_room(g, cmt_entries) + 2
}

impl DftlConfig {
    pub fn from_options(o: &DesignOptions, g: &flash::Geometry) -> Result<DftlConfig, FtlError> {
        o.check_known("dftl", &PARAMS)?;
        // The controller DRAM the CMT may fill: by default the same 64 MB board DRAM Möbius's
        // Resident and Evicting Areas share (Möbius §V-A), so both designs map with equal RAM.
        // `dram_mb=2` is the 262,144-entry CMT of earlier versions.
        let dram_mb: f64 = o.get("dram_mb", 64.0)?;
        if !(dram_mb > 0.0 && dram_mb.is_finite()) {
            return Err(FtlError::InvalidOption(format!(
                "dram_mb={dram_mb}: must be positive"
            )));
        }
        let by_dram = ((dram_mb * 1048576.0) as u64 / CMT_ENTRY_BYTES)
            .min(crate::cmt::MAX_CAPACITY as u64) as u32;
        let mut cfg = DftlConfig {
            cmt_entries: o.get("cmt_entries", by_dram)?,
            checkpoint_blocks: o
                .get("checkpoint_blocks", (g.blocks() as u64 / 8).clamp(16, 1024))?,
            oob_scan: match o.get::<String>("oob_scan", "on".into())?.as_str() {
                "on" => true,
                "off" => false,
                v => {
                    return Err(FtlError::InvalidOption(format!(
                        "oob_scan={v}: use on or off"
                    )))
                }
            },
            gc: o.get::<String>("gc", "greedy".into())?.parse()?,
            wear_threshold: o.get("wear_threshold", 64u32)?,
            max_request_pages: o.get("max_request_pages", 8192u32)?,
            gc_free_blocks: 0,
        };
        if cfg.cmt_entries == 0 || cfg.checkpoint_blocks == 0 {
            return Err(FtlError::InvalidOption(
                "cmt_entries and checkpoint_blocks must be at least 1".into(),
            ));
        }
        if cfg.cmt_entries > crate::cmt::MAX_CAPACITY {
            return Err(FtlError::InvalidOption(format!(
                "cmt_entries={}: at most {}",
                cfg.cmt_entries,
                crate::cmt::MAX_CAPACITY
            )));
        }
        let cmt = cfg.cmt_entries;
        let (own, floor) = (default_gc_free_blocks(g, cmt), min_gc_free_blocks(g, cmt));
        cfg.gc_free_blocks = ftl::gc_free_blocks(o, "dftl", own, floor)?;
        Ok(cfg)
    }
}

pub struct Dftl {
    flash: Flash,
    cfg: DftlConfig,
    logical_pages: u32,
    per_tpage: u32,
    layout: Layout,
    /// What the newest translation pages say (read from flash), plus GC moves not yet in them.
    mirror: Mirror,
    /// Per tvpn: newest translation page and its sequence number.
    gtd: Vec<(Ppn, u64)>,
    /// Per tvpn: the checksum of the newest translation page (as its OOB record has it), so a
    /// write-back updates it from the entries it changes ([`flash::WordEdit`]).
    gtd_crc: Vec<u32>,
    /// Translation pages that have recorded a trim (media model on only; their records say
    /// so: [`KIND_TRANSLATION_TRIMS`]).
    tpage_trims: Vec<bool>,
    /// Checksum of a translation page not written yet (all entries `Ppn::NONE`).
    fresh_tpage_crc: u32,
    /// Powers for updating a translation page's checksum word by word.
    word_crc: WordCrc,
    /// Per tvpn: end of the newest data program its entries may point to.
    tvpn_data_end: Vec<u64>,
    cmt: Cmt,
    space: Space,
    seq: u64,
    /// Per block: end of the reservation page that made it openable.
    block_ready_ns: Vec<u64>,
    /// Per chip: reserved blocks not yet opened (the front of the chip's free queue).
    reserved: Vec<VecDeque<BlockId>>,
    /// (blocks opened, free blocks) when the reserved lists were last checked.
    reserve_checked: (u64, u32),
    log_block: u32,
    log_page: u32,
    log_seq: u64,
    log_pages_since_ckpt: u64,
    last_reservation_end: u64,
    last_seal_end: u64,
    in_checkpoint: bool,
    ckpt_seq: u64,
    ckpt_log: (u32, u32),
    opened_at_ckpt: u64,
    arrivals: ftl::ArrivalClock,
    /// The newest translation-page read (tvpn, page read, when its data is in DRAM): a miss on
    /// that page while the read is still in flight waits for it instead of reading the page a
    /// second time (a controller does not issue two reads of one page at once).
    tp_read_in_flight: Option<(usize, Ppn, u64)>,
    /// A collect's moves, the buffer kept between collects.
    gc_moves: Vec<Moved>,
    stats: Counters,
    /// Invariant checks so far, and from the second on the owners they read back from flash
    /// while those cannot change ([`CheckedOwners`]): a recording run checks after every request.
    checks: Cell<u64>,
    checked_owners: RefCell<Option<CheckedOwners>>,
}

#[derive(Default, Clone, Debug)]
struct Counters {
    translation_writes: u64,
    translation_reads: u64,
    checkpoints: u64,
    reservation_pages: u64,
    gc_runs: u64,
    gc_copies: u64,
    wear_moves: u64,
    /// Translation pages lost to the media and rebuilt while running.
    translation_rebuilds: u64,
}

/// The kind of a translation page's record: whether it has recorded a trim.
fn translation_kind(trims: bool) -> u8 {
    match trims {
        true => KIND_TRANSLATION_TRIMS,
        false => KIND_TRANSLATION,
    }
}

fn oob(kind: u8, id: u32, seq: u64, crc: u32) -> [u8; OOB_BYTES as usize] {
    OobRecord { kind, id, seq, crc }.encode()
}

/// The validity's owner of a live page, from its OOB record: a data page's LPN, or a
/// translation page's number with [`TRANSLATION`] (DFTL keeps one bit per page, not the owner).
fn owner_on_flash(flash: &Flash, ppn: Ppn) -> Option<u32> {
    crate::owners::owner_on_flash(flash, ppn, TRANSLATION)
}

impl Dftl {
    fn build(mut flash: Flash, cfg: DftlConfig) -> Dftl {
        flash.squeeze_oob(std::sync::Arc::new(crate::format::DataRecordSqueeze));
        let g = flash.geometry().clone();
        let layout = Layout::new(&g, g.pages());
        // Besides over-provisioning, keep back what the design itself needs free at all times:
        // one open block per stream and chip, and the GC low-water mark, which must leave room
        // for a checkpoint writing back every dirty translation page at once.
        let working = ftl::working_blocks(&g, STREAMS, cfg.gc_free_blocks);
        let logical_pages = ftl::logical_pages(
            &g,
            layout.reserved_count() + working,
            flash.config().over_provisioning,
        );
        let per_tpage = g.page_bytes / 4;
        let tvpns = logical_pages.div_ceil(per_tpage) as usize;
        let reserved_set: Vec<BlockId> = layout.reserved_blocks().collect();
        let pool = BlockPool::new(&g, STREAMS, |b| reserved_set.contains(&b));
        let validity = Validity::with_owners_on_flash(&g, owner_on_flash);
        let space = Space::new(pool, validity, cfg.gc, cfg.wear_threshold);
        let cmt = Cmt::new(
            cfg.cmt_entries.min(logical_pages.max(1)),
            logical_pages,
            per_tpage,
        );
        Dftl {
            cfg,
            logical_pages,
            per_tpage,
            layout,
            mirror: Mirror::new(tvpns, per_tpage),
            gtd: vec![(Ppn::NONE, 0); tvpns],
            gtd_crc: vec![0; tvpns],
            tpage_trims: vec![false; tvpns],
            fresh_tpage_crc: translation_crc(&vec![0xFF; g.page_bytes as usize]),
            word_crc: WordCrc::new(g.page_bytes as usize),
            tvpn_data_end: vec![0; tvpns],
            cmt,
            space,
            seq: 1,
            block_ready_ns: vec![0; g.blocks() as usize],
            reserved: vec![VecDeque::new(); g.chips() as usize],
            reserve_checked: (u64::MAX, u32::MAX),
            log_block: 0,
            log_page: 0,
            log_seq: 1,
            log_pages_since_ckpt: 0,
            last_reservation_end: 0,
            last_seal_end: 0,
            in_checkpoint: false,
            ckpt_seq: 0,
            ckpt_log: (0, 0),
            opened_at_ckpt: 0,
            arrivals: ftl::ArrivalClock::starting_at(0),
            tp_read_in_flight: None,
            gc_moves: Vec::new(),
            stats: Counters::default(),
            checks: Cell::new(0),
            checked_owners: RefCell::new(None),
            flash,
        }
    }

    /// DFTL on an erased device.
    pub fn format(flash: Flash, options: &DesignOptions) -> Result<Dftl, FtlError> {
        ftl::require_spare_area("dftl", OOB_BYTES, &flash)?;
        let cfg = DftlConfig::from_options(options, flash.geometry())?;
        let mut d = Dftl::build(flash, cfg);
        let now = d.flash.idle_ns();
        for b in d.layout.log.clone() {
            if d.flash.write_pointer(b) > 0 || d.flash.block_erase_torn(b) {
                d.flash.erase(b, now, OpCause::Checkpoint)?;
            }
        }
        d.reserve(now)?;
        d.checkpoint(now)?;
        Ok(d)
    }

    fn tvpn(&self, lpn: u32) -> usize {
        (lpn / self.per_tpage) as usize
    }

    fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    // ----- block reservations -------------------------------------------------------------

    /// Drops reserved blocks that the pool has opened since (they leave the free queue's front).
    fn sync_reserved(&mut self) {
        for q in self.reserved.iter_mut() {
            while q
                .front()
                .is_some_and(|&b| self.space.pool.state(b) != BlockState::Free)
            {
                q.pop_front();
            }
        }
    }

    /// Makes sure every chip has enough durably reserved blocks for the next allocations.
    /// Reserved lists only run short when a block is opened or the free pool changes, so the
    /// per-chip check runs only then (this is on every allocation's path).
    fn ensure_reserved(&mut self, now: u64) -> Result<(), FtlError> {
        let key = (
            self.space.pool.blocks_opened(),
            self.space.pool.free_blocks(),
        );
        if key == self.reserve_checked {
            return Ok(());
        }
        self.reserve_checked = key;
        self.sync_reserved();
        let chips = self.flash.geometry().chips();
        let short = (0..chips).any(|c| {
            let free = self.space.pool.free_blocks_on(ChipId(c));
            self.reserved[c as usize].len() < 3.min(free)
        });
        if short {
            self.reserve(now)?;
        }
        Ok(())
    }

    /// Writes a reservation page naming the next blocks of every chip's free queue.
    fn reserve(&mut self, now: u64) -> Result<(), FtlError> {
        let g = self.flash.geometry().clone();
        if self.log_page == g.pages_per_block {
            self.advance_log(now)?;
        }
        let per_chip: Vec<Vec<BlockId>> = (0..g.chips())
            .map(|c| {
                self.space
                    .pool
                    .free_queue(ChipId(c))
                    .take(RESERVE_AHEAD)
                    .collect()
            })
            .collect();
        let page = Reservation {
            log_seq: self.log_seq,
            per_chip: per_chip.clone(),
        }
        .encode(g.page_bytes as usize);
        let ppn = g.ppn(self.layout.log[self.log_block as usize], self.log_page);
        let span = self
            .flash
            .program(ppn, &Content::Bytes(page), &[], now, OpCause::Checkpoint)?;
        self.log_page += 1;
        self.log_seq += 1;
        self.log_pages_since_ckpt += 1;
        self.last_reservation_end = self.last_reservation_end.max(span.end_ns);
        self.stats.reservation_pages += 1;
        for (c, list) in per_chip.into_iter().enumerate() {
            for b in &list {
                if !self.reserved[c].contains(b) {
                    self.block_ready_ns[b.0 as usize] = span.end_ns;
                }
            }
            self.reserved[c] = list.into();
        }
        Ok(())
    }

    /// Moves the reservation log to its next ring block, erasing it. The block never holds pages
    /// the latest checkpoint needs: `maybe_checkpoint` checkpoints well before the log could wrap.
    fn advance_log(&mut self, now: u64) -> Result<(), FtlError> {
        let next = (self.log_block + 1) % self.layout.log.len() as u32;
        let ppb = self.flash.geometry().pages_per_block;
        if self.ckpt_log.0 == next && self.ckpt_log.1 < ppb && self.log_pages_since_ckpt > 0 {
            return Err(FtlError::Corrupt(
                "reservation log would overwrite pages the checkpoint needs".into(),
            ));
        }
        let block = self.layout.log[next as usize];
        // The previous seal must be on flash before older log pages go.
        self.flash
            .erase(block, now.max(self.last_seal_end), OpCause::Checkpoint)?;
        self.log_block = next;
        self.log_page = 0;
        Ok(())
    }

    /// Whether the reservation log is filling up since the last checkpoint.
    fn log_nearly_full(&self) -> bool {
        let ppb = self.flash.geometry().pages_per_block as u64;
        self.log_pages_since_ckpt + ppb >= (self.layout.log.len() as u64 - 2) * ppb
    }

    // ----- allocation and GC --------------------------------------------------------------

    fn allocate(&mut self, stream: usize, now: u64) -> Result<Ppn, FtlError> {
        self.ensure_reserved(now)?;
        self.space
            .allocate(stream, &self.flash)
            .ok_or(FtlError::NoSpace)
    }

    /// Takes a checkpoint when the scan zone is full or the reservation log is filling up.
    /// Called only between requests and GC runs, never between an allocation and its program.
    fn maybe_checkpoint(&mut self, now: u64) -> Result<(), FtlError> {
        if self.in_checkpoint {
            return Ok(());
        }
        if self.space.pool.blocks_opened() - self.opened_at_ckpt >= self.cfg.checkpoint_blocks
            || self.log_nearly_full()
        {
            self.checkpoint(now)?;
        }
        Ok(())
    }

    /// Frees blocks until the pool is above its low-water mark.
    fn gc_if_needed(&mut self, now: u64) -> Result<(), FtlError> {
        let mut guard = 0;
        while self.space.pool.free_blocks() < self.cfg.gc_free_blocks {
            guard += 1;
            if guard > 4 * self.flash.geometry().blocks() {
                return Err(FtlError::NoSpace);
            }
            let victim = self
                .space
                .pick_victim(&self.flash, |_| true)
                .ok_or(FtlError::NoSpace)?;
            self.collect(victim, now, OpCause::GcCopy)?;
            self.stats.gc_runs += 1;
            self.maybe_checkpoint(now)?;
        }
        if let Some(v) = self.space.wear_victim(&self.flash, |_| true) {
            self.collect(v, now, OpCause::WearLevel)?;
            self.stats.wear_moves += 1;
        }
        Ok(())
    }

    fn collect(&mut self, victim: BlockId, now: u64, cause: OpCause) -> Result<(), FtlError> {
        self.ensure_reserved(now)?;
        let mut moves = std::mem::take(&mut self.gc_moves);
        moves.clear();
        let mut seq = self.seq;
        // Copies may land in blocks reserved just now: the victim goes only after that is durable.
        let reservation_end = self.last_reservation_end;
        let Dftl {
            space,
            flash,
            gtd,
            gtd_crc,
            tpage_trims,
            ..
        } = self;
        let collected = space.collect(
            flash,
            victim,
            STREAM_GC,
            now,
            cause,
            |owner, oob_buf| {
                // A translation page's copy keeps its record (sequence number and checksum).
                if owner & TRANSLATION != 0 {
                    return false;
                }
                // A data copy is the current version as of now: fresh sequence number.
                seq += 1;
                let (record, tail) = oob_buf.split_at_mut(OOB_BYTES as usize);
                record.copy_from_slice(&oob(KIND_DATA, owner, seq, 0));
                tail.fill(0);
                true
            },
            // A translation page lost whole: its record is the GTD's (number, sequence number,
            // checksum, whether it recorded trims), all kept in RAM.
            |owner, oob_buf| {
                let t = (owner & !TRANSLATION) as usize;
                let kind = translation_kind(tpage_trims[t]);
                let record = oob(kind, t as u32, gtd[t].1, gtd_crc[t]);
                oob_buf[..OOB_BYTES as usize].copy_from_slice(&record);
                Ok(())
            },
            // A live page whose spare area the media lost names no owner (DFTL reads owners
            // from OOB records, issue #19): a translation page's is its GTD entry; a data page's
            // only the reverse of the mapping, which DFTL does not keep: reported lost (#69).
            |from| match gtd.iter().position(|&(p, _)| p == from) {
                Some(t) => Ok(TRANSLATION | t as u32),
                None => Err(FtlError::MediaLoss {
                    ppn: from,
                    what: "the owner of a live data page (its spare area)".into(),
                }),
            },
            |m| moves.push(m),
            |_| reservation_end,
        );
        self.seq = seq;
        // Moved data pages: the new mapping goes into the CMT as a dirty entry, written back
        // lazily with the rest of its translation page (DFTL's batch update). Until then the copy
        // is found by recovery's scan: it carries a fresh sequence number in a scanned block.
        for (i, m) in moves.iter().enumerate() {
            self.prefetch_moves(&moves[i + 1..]);
            if m.owner & TRANSLATION != 0 {
                let t = (m.owner & !TRANSLATION) as usize;
                self.gtd[t].0 = m.to;
                continue;
            }
            let lpn = m.owner;
            let t = self.tvpn(lpn);
            self.tvpn_data_end[t] = self.tvpn_data_end[t].max(m.end_ns);
            self.stats.gc_copies += 1;
            if self.cmt.contains(lpn) {
                self.cmt.update(lpn, m.to, true);
            } else {
                // Not cached: the mirror notes the move, so whichever write-back of the
                // translation page comes next carries it.
                self.mirror.note_move(lpn, m.to);
            }
        }
        self.gc_moves = moves;
        // A collect that failed after copies (the victim's erase on a worn-out device) still
        // moved what it copied: the mapping follows them first.
        collected.map(|_| ())
    }

    /// Hints for the mapping updates of the moves after the current one (a collected block's
    /// live pages belong to LPNs scattered over the CMT's index and the pending-move lists):
    /// step by step, the index entry and the list's header, then the slot or the list's end,
    /// then the slot's LRU neighbours.
    fn prefetch_moves(&self, next: &[Moved]) {
        // A move's update is short: the steps are several moves apart.
        for (ahead, m) in (1..=8).zip(next) {
            if m.owner & TRANSLATION != 0 {
                continue;
            }
            let lpn = m.owner;
            match ahead {
                8 => {
                    self.cmt.prefetch(lpn);
                    self.mirror.prefetch(self.tvpn(lpn), true);
                }
                // Not cached: the move is noted at the end of the page's list.
                4 if !self.cmt.prefetch_slot(lpn) => {
                    self.mirror.prefetch(self.tvpn(lpn), false);
                }
                2 => {
                    self.cmt.prefetch_neighbours(lpn);
                }
                _ => {}
            }
        }
    }

    // ----- mapping ------------------------------------------------------------------------

    /// Writes translation page `t`: the old page with the mirror's pending moves and the CMT's
    /// dirty entries (which become clean). Returns the program's end.
    fn write_translation(&mut self, t: usize, now: u64, cause: OpCause) -> Result<u64, FtlError> {
        let mut old = self.gtd[t].0;
        let mut not_before = now.max(self.tvpn_data_end[t]);
        if !old.is_none() {
            // Read-modify-write of the old translation page.
            let (state, read) = self.flash.sense(old, now, cause)?;
            not_before = not_before.max(read.end_ns);
            self.stats.translation_reads += 1;
            // Named by the GTD, written after it: programmed whole.
            if state == PageState::Torn && media::whole_page_lost(&self.flash) {
                not_before = not_before.max(self.rebuild_translation(t, read.end_ns)?);
                old = Ppn::NONE;
            }
        }
        let ppn = self.allocate(STREAM_MAP, now)?;
        let not_before =
            not_before.max(self.block_ready_ns[self.flash.geometry().block_of(ppn).0 as usize]);
        // The old page's bytes become the new page's (it is superseded: no copy kept). Taken
        // only now, so an allocation that fails loses nothing; taking fails only on an image I/O
        // error, which leaves the image read-only (no program can follow the page allocated).
        let mut page = self.mirror.take_for_write_back(
            &mut self.flash,
            t,
            (old, self.gtd_crc[t]),
            self.fresh_tpage_crc,
            &self.word_crc,
        )?;
        let per = self.per_tpage;
        self.cmt
            .take_dirty(t, |lpn, ppn| page.set((lpn % per) as usize, ppn.0));
        debug_assert_eq!(self.cmt.dirty_in(t), 0);
        let (page, crc) = page.finish();
        debug_assert_eq!(crc, translation_crc(&page));
        let seq = self.next_seq();
        let span = self.flash.program_owned(
            ppn,
            Content::Bytes(page),
            &oob(self.translation_kind(t), t as u32, seq, crc),
            not_before,
            cause,
        )?;
        if !old.is_none() {
            self.space.validity.invalidate(old, span.end_ns);
        }
        self.space.validity.set_valid(ppn, TRANSLATION | t as u32);
        self.gtd[t] = (ppn, seq);
        self.gtd_crc[t] = crc;
        self.stats.translation_writes += 1;
        Ok(span.end_ns)
    }

    /// Invariant: the checksum kept for translation page `t` (at `ppn`) is the one its OOB
    /// record carries, and that of its bytes.
    fn check_translation_crc(&self, t: usize, ppn: Ppn) -> Result<(), ftl::InvariantViolation> {
        let mut record = [0u8; OOB_BYTES as usize];
        self.flash.oob_record(ppn, &mut record);
        let in_oob = OobRecord::decode(&record).map(|r| r.crc).ok();
        let of_bytes = self.flash.peek_page(ppn).map(|p| translation_crc(&p)).ok();
        let kept = self.gtd_crc[t];
        if in_oob != Some(kept) || of_bytes != Some(kept) {
            return Err(ftl::violation!(
                "translation page {t} at {ppn}: checksum kept {kept:#x}, OOB {in_oob:x?}, bytes {of_bytes:x?}"
            ));
        }
        Ok(())
    }

    /// Hints for a run of write-backs (a checkpoint's), given the pages that follow the current
    /// one: each write-back reaches its old page's buffer through the store, reads a few CMT
    /// slots and its pending moves, and rewrites the page's words at the entries that changed,
    /// all far from the cache. Asked for step by step over the next write-backs (each step
    /// needs the one before it loaded), the loads overlap the current one. The steps are two
    /// write-backs apart: on a large device most pages carry one or two changes, and a single
    /// write-back was too short for a step's loads to arrive (docs/performance.md).
    fn prefetch_write_backs(&self, next: &[usize]) {
        const SPACING: usize = 2;
        let spaced = next.iter().skip(SPACING - 1).step_by(SPACING);
        for (step, &t) in (1..=3).zip(spaced) {
            let tpage = self.gtd[t].0;
            self.cmt.prefetch_write_back(t, step);
            match step {
                3 => {
                    self.mirror.prefetch(t, true);
                    if !tpage.is_none() {
                        self.flash.prefetch_data_at(tpage, 0, DataHint::PageEntry);
                    }
                }
                2 => {
                    self.mirror.prefetch(t, false);
                    if !tpage.is_none() {
                        self.flash.prefetch_data_at(tpage, 0, DataHint::KeptBytes);
                    }
                }
                _ if !tpage.is_none() => {
                    let per = self.per_tpage;
                    for lpn in self.cmt.dirty_lpns_in(t).chain(self.mirror.pending_lpns(t)) {
                        let at = (lpn % per) as usize * 4;
                        self.flash.prefetch_data_at(tpage, at, DataHint::Bytes);
                    }
                }
                _ => {}
            }
        }
    }

    /// Makes room in the CMT, writing back the victim's translation page if dirty. Returns
    /// whether it wrote one back.
    fn make_room(&mut self, now: u64) -> Result<bool, FtlError> {
        if !self.cmt.is_full() {
            return Ok(false);
        }
        let (lpn, _, dirty) = self.cmt.lru().expect("full CMT has an LRU entry");
        if dirty {
            let t = self.tvpn(lpn);
            self.write_translation(t, now, OpCause::Mapping)?;
        }
        self.cmt.remove(lpn);
        Ok(dirty)
    }

    /// Current mapping of `lpn`, loading it into the CMT (a translation-page read on a miss).
    /// Returns (ppn, instant the mapping is known). A read request passes its run of entries
    /// ([`Mirror::get_in_run`]), dropped here at any write-back or rebuild of a translation
    /// page.
    fn lookup(
        &mut self,
        lpn: u32,
        now: u64,
        loaded: &mut Option<(usize, u64)>,
        mut run: Option<&mut EntryRun>,
    ) -> Result<(Ppn, u64), FtlError> {
        if let Some(p) = self.cmt.get(lpn) {
            return Ok((p, now));
        }
        let t = self.tvpn(lpn);
        let mut ready = now;
        let tpage = self.gtd[t].0;
        if !tpage.is_none() {
            match (*loaded, self.tp_read_in_flight) {
                (Some((lt, end)), _) if lt == t => ready = end,
                (_, Some((ft, fp, end))) if ft == t && fp == tpage && end > now => {
                    ready = end;
                    *loaded = Some((t, ready));
                }
                _ => {
                    let (state, span) = self.flash.sense(tpage, now, OpCause::Mapping)?;
                    self.stats.translation_reads += 1;
                    ready = span.end_ns;
                    // Named by the GTD, written after it: programmed whole.
                    if state == PageState::Torn && media::whole_page_lost(&self.flash) {
                        ready = self.rebuild_translation(t, ready)?;
                        if let Some(r) = run.as_mut() {
                            r.clear();
                        }
                    }
                    *loaded = Some((t, ready));
                    self.tp_read_in_flight = Some((t, self.gtd[t].0, ready));
                }
            }
        }
        let wrote_back = self.make_room(now)?;
        // make_room may have written translation page t back: read the newest one.
        let tpage = self.gtd[t].0;
        let p = match run {
            Some(run) => {
                if wrote_back {
                    run.clear();
                }
                self.mirror.get_in_run(&self.flash, tpage, lpn, run)?
            }
            None => self.mirror.get(&self.flash, tpage, lpn)?,
        };
        self.cmt.insert(lpn, p, false);
        Ok((p, ready))
    }

    fn check_arrival(&mut self, arrival: u64) -> Result<(), FtlError> {
        self.arrivals.admit(arrival)?;
        Ok(())
    }

    fn check_request(&self, start: Lpn, count: u64) -> Result<(), FtlError> {
        check_range(start, count, self.logical_pages)?;
        if count > self.cfg.max_request_pages as u64 {
            return Err(FtlError::RequestTooLarge {
                pages: count,
                max: self.cfg.max_request_pages as u64,
            });
        }
        Ok(())
    }

    // ----- checkpoints --------------------------------------------------------------------

    fn checkpoint(&mut self, now: u64) -> Result<u64, FtlError> {
        self.in_checkpoint = true;
        let r = self.checkpoint_inner(now);
        self.in_checkpoint = false;
        r
    }

    /// Writes back every dirty translation page, then GTD + reservations + open blocks into the
    /// older slot, sealed last. The log position recorded is where the next reservation page
    /// will go, taken together with its sequence number once the write-backs are done.
    fn checkpoint_inner(&mut self, now: u64) -> Result<u64, FtlError> {
        let mut after = now;
        let mut dirty: Vec<usize> = self.cmt.dirty_tvpns();
        dirty.extend(self.mirror.pending_tvpns());
        dirty.sort_unstable();
        dirty.dedup();
        for (i, &t) in dirty.iter().enumerate() {
            self.prefetch_write_backs(&dirty[i + 1..]);
            after = after.max(self.write_translation(t, now, OpCause::Checkpoint)?);
        }
        // Everything the GTD points to must be on flash before the seal.
        after = after.max(self.flash.idle_ns());
        self.sync_reserved();
        let log_pos = (self.log_block, self.log_page);
        let g = self.flash.geometry().clone();
        let open: Vec<(BlockId, u32)> = (0..STREAMS)
            .flat_map(|s| (0..g.chips()).map(move |c| (s, c)))
            .filter_map(|(s, c)| self.space.pool.open_block(s, ChipId(c)))
            .collect();
        self.ckpt_seq += 1;
        let reserved: Vec<Vec<BlockId>> = self
            .reserved
            .iter()
            .map(|q| q.iter().copied().collect())
            .collect();
        let ck = CheckpointView {
            ckpt_seq: self.ckpt_seq,
            seq: self.seq + 1,
            log_seq: self.log_seq,
            log_block: log_pos.0,
            log_page: log_pos.1,
            gtd: &self.gtd,
            reserved: &reserved,
            open: &open,
            used: self.space.pool.in_use_bitmap(),
        };
        let payload = ck.encode();
        let slot = (self.ckpt_seq % 2) as usize;
        // The other slot's seal (the checkpoint recovery would use now) is on flash by `after`.
        let erase_from = after;
        for b in self.layout.slots[slot].clone() {
            after = after.max(self.flash.erase(b, erase_from, OpCause::Checkpoint)?.end_ns);
        }
        let pb = g.page_bytes as usize;
        let mut last = after;
        for (i, chunk) in payload.chunks(pb).enumerate() {
            let ppn = self.layout.slot_page(&g, slot, i as u32);
            last = last.max(
                self.flash
                    .program(
                        ppn,
                        &Content::Bytes(chunk.into()),
                        &[],
                        after,
                        OpCause::Checkpoint,
                    )?
                    .end_ns,
            );
        }
        let seal = Seal {
            ckpt_seq: self.ckpt_seq,
            payload_bytes: payload.len() as u64,
            payload_crc: crc32c::crc32c(&payload),
        };
        let seal_ppn = self.layout.slot_page(&g, slot, self.layout.payload_pages);
        let end = self
            .flash
            .program(
                seal_ppn,
                &Content::Bytes(seal.encode(pb)),
                &[],
                last,
                OpCause::Checkpoint,
            )?
            .end_ns;
        self.ckpt_log = log_pos;
        self.log_pages_since_ckpt = 0;
        self.last_seal_end = end;
        self.opened_at_ckpt = self.space.pool.blocks_opened();
        self.stats.checkpoints += 1;
        Ok(end)
    }
}

impl BlockDevice for Dftl {
    fn design(&self) -> &'static str {
        "dftl"
    }
    fn promise(&self) -> Promise {
        Promise::DurableWrites
    }
    fn logical_pages(&self) -> u32 {
        self.logical_pages
    }
    fn max_write_pages(&self) -> Option<u32> {
        Some(self.cfg.max_request_pages)
    }

    /// A request's lookup is a chain of dependent loads, each a cache miss on a large device:
    /// the CMT's index entry, then the slot (cached) or the translation page's place in the
    /// store and its bytes (not cached), then the page the write supersedes. Hinted a step per
    /// request served ([`BlockDevice::prefetch_mapping`]), each load has a request's work to
    /// arrive in.
    fn prefetch_mapping(&self, start: Lpn, ahead: usize) {
        let lpn = start.0;
        if lpn >= self.logical_pages {
            return;
        }
        let t = self.tvpn(lpn);
        let tpage = self.gtd[t].0;
        let at = (lpn % self.per_tpage) as usize * 4;
        match ahead {
            0 => {
                if !self.cmt.contains(lpn) {
                    if let Some(old) = self.mirror.hint_get(&self.flash, tpage, lpn) {
                        if !old.is_none() {
                            self.space.validity.prefetch_invalidate(old, true);
                        }
                    }
                }
            }
            1 => {
                self.cmt.prefetch_eviction();
                match self.cmt.peek(lpn) {
                    Some((old, _)) if !old.is_none() => {
                        self.space.validity.prefetch_invalidate(old, false)
                    }
                    Some(_) => {}
                    None if !tpage.is_none() => {
                        self.flash.prefetch_data_at(tpage, at, DataHint::Bytes)
                    }
                    None => {}
                }
            }
            2 => match self.cmt.prefetch_neighbours(lpn) {
                Some(old) if !old.is_none() => self.space.validity.prefetch_invalidate(old, true),
                Some(_) => {}
                None => {
                    self.mirror.prefetch(t, false);
                    if !tpage.is_none() {
                        self.flash.prefetch_data_at(tpage, at, DataHint::KeptBytes);
                    }
                }
            },
            3 => {
                if !self.cmt.prefetch_slot(lpn) && !tpage.is_none() {
                    self.flash.prefetch_data_at(tpage, at, DataHint::PageEntry);
                }
            }
            _ => {
                self.cmt.prefetch(lpn);
                flash::prefetch::read(&self.gtd[t]);
                self.mirror.prefetch(t, true);
            }
        }
    }

    fn write(
        &mut self,
        start: Lpn,
        pages: &[Content],
        arrival_ns: u64,
    ) -> Result<Completion, FtlError> {
        self.check_request(start, pages.len() as u64)?;
        self.check_arrival(arrival_ns)?;
        let now = arrival_ns;
        self.gc_if_needed(now)?;
        self.maybe_checkpoint(now)?;
        let mut ack = now;
        let mut loaded = None;
        for (i, content) in pages.iter().enumerate() {
            // A request longer than the free blocks GC left before it collects as it goes:
            // the device must take any write inside the capacity it exports.
            if i > 0 && self.space.pool.free_blocks() < self.cfg.gc_free_blocks {
                self.gc_if_needed(now)?;
                self.maybe_checkpoint(now)?;
            }
            let lpn = start.0 + i as u32;
            let (old, known) = self.lookup(lpn, now, &mut loaded, None)?;
            let ppn = self.allocate(STREAM_DATA, now)?;
            let ready =
                known.max(self.block_ready_ns[self.flash.geometry().block_of(ppn).0 as usize]);
            let seq = self.next_seq();
            let span = self.flash.program(
                ppn,
                content,
                &oob(KIND_DATA, lpn, seq, 0),
                ready,
                OpCause::HostData,
            )?;
            if !old.is_none() {
                self.space.validity.invalidate(old, span.end_ns);
            }
            self.space.validity.set_valid(ppn, lpn);
            self.cmt.update(lpn, ppn, true);
            let t = self.tvpn(lpn);
            self.tvpn_data_end[t] = self.tvpn_data_end[t].max(span.end_ns);
            ack = ack.max(span.end_ns);
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
        self.check_request(start, count as u64)?;
        self.check_arrival(arrival_ns)?;
        out.clear();
        self.maybe_checkpoint(arrival_ns)?;
        let mut ack = arrival_ns;
        let mut loaded = None;
        let mut run = EntryRun::new((start.0 + count).saturating_sub(1));
        for i in 0..count {
            let lpn = start.0 + i;
            let (ppn, known) = self.lookup(lpn, arrival_ns, &mut loaded, Some(&mut run))?;
            if ppn.is_none() {
                out.push(PageOutcome::Unwritten);
                ack = ack.max(known);
                continue;
            }
            let (status, span) = self.flash.read_data(ppn, known, OpCause::HostData)?;
            ack = ack.max(span.end_ns);
            out.push(PageOutcome::of_mapped_page(status));
        }
        Ok(Completion {
            arrival_ns,
            ack_ns: ack,
        })
    }

    /// Writes are durable when acknowledged (the OOB scan finds them), so a flush only waits for
    /// the device to drain.
    fn flush(&mut self, arrival_ns: u64) -> Result<Completion, FtlError> {
        self.check_arrival(arrival_ns)?;
        Ok(Completion {
            arrival_ns,
            ack_ns: arrival_ns.max(self.flash.idle_ns()),
        })
    }

    /// Unmaps pages. The covering translation pages are written back at once and the trimmed
    /// pages become erasable only when those are on flash: otherwise GC could erase (and reuse)
    /// a trimmed page while the persisted mapping still points to it, and a power cut would
    /// resurrect a mapping to an erased page or to another page's data. After a power cut a
    /// trimmed page reads as unwritten once the trim is acknowledged; before that it may read as
    /// its old data (allowed by `BlockDevice::trim`).
    fn trim(&mut self, start: Lpn, count: u32, arrival_ns: u64) -> Result<Completion, FtlError> {
        self.check_request(start, count as u64)?;
        self.check_arrival(arrival_ns)?;
        self.gc_if_needed(arrival_ns)?;
        self.maybe_checkpoint(arrival_ns)?;
        let mut loaded = None;
        let mut ack = arrival_ns;
        let mut stale: Vec<Ppn> = Vec::new();
        let mut tvpns: Vec<usize> = Vec::new();
        for i in 0..count {
            let lpn = start.0 + i;
            let (old, known) = self.lookup(lpn, arrival_ns, &mut loaded, None)?;
            ack = ack.max(known);
            if !old.is_none() {
                self.cmt.update(lpn, Ppn::NONE, true);
                stale.push(old);
                tvpns.push(self.tvpn(lpn));
            }
        }
        tvpns.dedup();
        if self.flash.config().media.is_some() {
            for &t in &tvpns {
                self.tpage_trims[t] = true;
            }
        }
        for t in tvpns {
            ack = ack.max(self.write_translation(t, arrival_ns, OpCause::Mapping)?);
        }
        for old in stale {
            self.space.validity.invalidate(old, ack);
        }
        Ok(Completion {
            arrival_ns,
            ack_ns: ack,
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
        self.cmt.check_invariants()?;
        let mut kept = self.checked_owners.borrow_mut();
        if kept.is_none() && self.checks.get() > 0 {
            *kept = Some(CheckedOwners::new(&self.flash, TRANSLATION));
        }
        self.checks.set(self.checks.get() + 1);
        if let Some(k) = kept.as_mut() {
            k.refresh(&self.flash);
        }
        // The validity's owner of a page (`Validity::owner_on`), kept from earlier checks
        // where it cannot have changed.
        let mut owner_on = |ppn: Ppn| match (self.space.validity.is_valid(ppn), kept.as_mut()) {
            (false, _) => None,
            (true, Some(k)) => k.owner(&self.flash, ppn),
            (true, None) => crate::owners::owner_in_store(&self.flash, ppn, TRANSLATION),
        };
        // Forward map → owners; together with the count below, owners → forward map too (every
        // live page is the current location of exactly one LPN or translation page).
        let mut mapped = 0u64;
        let mut entries = vec![Ppn::NONE; self.per_tpage as usize];
        for (t, &(tpage, _)) in self.gtd.iter().enumerate() {
            self.mirror
                .entries(&self.flash, t, tpage, &mut entries)
                .map_err(|e| ftl::violation!("translation page {t} at {tpage}: {e}"))?;
            let first = t as u32 * self.per_tpage;
            let lpns = first..(first + self.per_tpage).min(self.logical_pages);
            for (lpn, &flash_says) in lpns.zip(&entries) {
                let ppn = self.cmt.peek(lpn).map_or(flash_says, |(p, _)| p);
                if ppn.is_none() {
                    continue;
                }
                mapped += 1;
                let owner = owner_on(ppn);
                if owner != Some(lpn) {
                    return Err(ftl::violation!(
                        "lpn {lpn} maps to {ppn} but that page's owner is {owner:?}"
                    ));
                }
            }
        }
        for (t, (ppn, _)) in self.gtd.iter().enumerate() {
            if ppn.is_none() {
                continue;
            }
            if owner_on(*ppn) != Some(TRANSLATION | t as u32) {
                return Err(ftl::violation!(
                    "translation page {t} at {ppn} is not owned by it"
                ));
            }
            self.check_translation_crc(t, *ppn)?;
            mapped += 1;
        }
        let live: u64 = (0..self.flash.geometry().blocks())
            .map(|b| u64::from(self.space.validity.valid_count(BlockId(b))))
            .sum();
        if live != mapped {
            return Err(ftl::violation!(
                "{live} live pages but {mapped} mapped LPNs and translation pages"
            ));
        }
        Ok(())
    }

    fn memory(&self) -> Vec<(String, u64)> {
        use flash::vec_bytes;
        let mut m = self.flash.memory();
        m.extend(self.space.memory());
        m.extend(
            self.cmt
                .memory()
                .iter()
                .map(|(name, bytes)| (format!("dftl.{name}"), *bytes)),
        );
        m.push(("dftl.pending_moves".into(), self.mirror.memory()));
        if let Some(kept) = self.checked_owners.borrow().as_ref() {
            m.push(("dftl.checked_owners".into(), kept.memory()));
        }
        let reserved: u64 = self.reserved.iter().map(flash::deque_bytes).sum();
        m.push((
            "dftl.directory".into(),
            vec_bytes(&self.gtd)
                + vec_bytes(&self.gtd_crc)
                + self.word_crc.memory()
                + vec_bytes(&self.tvpn_data_end)
                + vec_bytes(&self.block_ready_ns)
                + reserved,
        ));
        m
    }

    fn metrics(&self) -> Vec<(String, f64)> {
        let s = &self.stats;
        let lookups = (self.cmt.hits + self.cmt.misses).max(1) as f64;
        let mut m = vec![
            ("cmt_hit_ratio".into(), self.cmt.hits as f64 / lookups),
            (
                "mapping_ram_bytes".into(),
                (self.cmt.capacity() as u64 * CMT_ENTRY_BYTES) as f64,
            ),
            (
                "translation_page_writes".into(),
                s.translation_writes as f64,
            ),
            ("translation_page_reads".into(), s.translation_reads as f64),
            ("checkpoints".into(), s.checkpoints as f64),
            (
                "blocks_opened".into(),
                self.space.pool.blocks_opened() as f64,
            ),
            (
                "blocks_since_checkpoint".into(),
                (self.space.pool.blocks_opened() - self.opened_at_ckpt) as f64,
            ),
            ("reservation_pages".into(), s.reservation_pages as f64),
            ("gc_runs".into(), s.gc_runs as f64),
            ("gc_copies".into(), s.gc_copies as f64),
            ("wear_level_moves".into(), s.wear_moves as f64),
        ];
        // Only with the media model on can a translation page be lost.
        if s.translation_rebuilds > 0 {
            m.push((
                "translation_page_rebuilds".into(),
                s.translation_rebuilds as f64,
            ));
        }
        m
    }
}

// ----- recovery -------------------------------------------------------------------------------

/// Blocks to scan (each from a first page), and where the reservation log ends: block index in
/// the ring, page, next log sequence number.
type LogTail = (Vec<(BlockId, u32)>, u32, u32, u64);

/// What the scan of one page's OOB found.
struct Found {
    data: FxHashMap<u32, (u64, Ppn)>,
    translation: FxHashMap<u32, (u64, Ppn)>,
    max_seq: u64,
    pages: u64,
    blocks: u64,
    /// Per scanned block: the first page that is not programmed (`pages_per_block` if none)
    /// and whether that page is torn (then the block must be erased before reuse).
    ends: Vec<(BlockId, u32, bool)>,
}

impl Found {
    fn empty() -> Found {
        Found {
            data: FxHashMap::default(),
            translation: FxHashMap::default(),
            max_seq: 0,
            pages: 0,
            blocks: 0,
            ends: Vec::new(),
        }
    }
}

impl Dftl {
    fn read_checkpoint(
        flash: &mut Flash,
        layout: &Layout,
        start: u64,
    ) -> Result<Option<Checkpoint>, FtlError> {
        let g = flash.geometry().clone();
        let mut best: Option<(Seal, usize)> = None;
        let mut lost_seal = None;
        let mut oob_buf = [0u8; OOB_BYTES as usize];
        for slot in 0..2 {
            let ppn = layout.slot_page(&g, slot, layout.payload_pages);
            match flash.read(ppn, &mut oob_buf, start, OpCause::Recovery)? {
                (ReadStatus::Data(c), _) => {
                    if let Some(seal) = c.as_bytes().and_then(|b| Seal::decode(b).ok()) {
                        if best.is_none_or(|(b, _)| seal.ckpt_seq > b.ckpt_seq) {
                            best = Some((seal, slot));
                        }
                    }
                }
                (ReadStatus::Uncorrectable, _) => {
                    let oob = &mut oob_buf;
                    if let (Unreadable::Lost, _) =
                        media::classify(flash, ppn, oob, start, OpCause::Recovery)?
                    {
                        lost_seal = Some((slot, ppn));
                    }
                }
                (ReadStatus::Erased, _) => {}
            }
        }
        // A seal lost to the media whole: its checkpoint may be the newest, and then the other
        // is stale (its log tail and translation pages may be gone). Its payload's first page
        // says which it was.
        if let Some((slot, ppn)) = lost_seal {
            let newer_than = best.map(|(b, _)| b.ckpt_seq);
            if Dftl::lost_seal_may_be_newest(flash, layout, slot, newer_than, start)? {
                return Err(FtlError::MediaLoss {
                    ppn,
                    what: "the seal of DFTL's newest checkpoint".into(),
                });
            }
        }
        // Newest slot first; fall back to the other if its payload does not check out.
        let mut order: Vec<(Seal, usize)> = best.into_iter().collect();
        if let Some((_, s)) = order.first().copied() {
            let other = 1 - s;
            let ppn = layout.slot_page(&g, other, layout.payload_pages);
            if let (ReadStatus::Data(c), _) =
                flash.read(ppn, &mut oob_buf, start, OpCause::Recovery)?
            {
                if let Some(seal) = c.as_bytes().and_then(|b| Seal::decode(b).ok()) {
                    order.push((seal, other));
                }
            }
        }
        for (seal, slot) in order {
            let pages = seal.payload_bytes.div_ceil(g.page_bytes as u64) as u32;
            if pages > layout.payload_pages {
                continue;
            }
            let mut payload = Vec::with_capacity(seal.payload_bytes as usize);
            let mut ok = true;
            for i in 0..pages {
                let ppn = layout.slot_page(&g, slot, i);
                match flash.read(ppn, &mut oob_buf, start, OpCause::Recovery)? {
                    (ReadStatus::Data(c), _) => {
                        payload.extend_from_slice(c.as_bytes().unwrap_or(&[]))
                    }
                    // Under a seal the payload was whole: a page of it lost to the media takes
                    // the checkpoint with it, and the older one is stale if this is the newest.
                    (ReadStatus::Uncorrectable, _) if media::whole_page_lost(flash) => {
                        return Err(FtlError::MediaLoss {
                            ppn,
                            what: format!("page {i} of DFTL checkpoint {}", seal.ckpt_seq),
                        })
                    }
                    _ => {
                        ok = false;
                        break;
                    }
                }
            }
            payload.truncate(seal.payload_bytes as usize);
            if ok && crc32c::crc32c(&payload) == seal.payload_crc {
                if let Ok(ck) = Checkpoint::decode(&payload, g.blocks()) {
                    if ck.ckpt_seq == seal.ckpt_seq {
                        return Ok(Some(ck));
                    }
                }
            }
        }
        Ok(None)
    }

    /// Whether the seal lost in `slot` may be the newer checkpoint's (the other slot's newest
    /// readable seal is `other`'s): its payload's first page, written before it, names its
    /// checkpoint number; unreadable, it may be.
    fn lost_seal_may_be_newest(
        flash: &mut Flash,
        layout: &Layout,
        slot: usize,
        other: Option<u64>,
        start: u64,
    ) -> Result<bool, FtlError> {
        let Some(other) = other else {
            return Ok(true);
        };
        let g = flash.geometry().clone();
        let mut oob_buf = [0u8; OOB_BYTES as usize];
        let first = layout.slot_page(&g, slot, 0);
        let (status, _) = flash.read(first, &mut oob_buf, start, OpCause::Recovery)?;
        let seq = match &status {
            ReadStatus::Data(c) => c
                .as_bytes()
                .filter(|b| b.len() >= 16 && b.starts_with(b"DFTLCKPT"))
                .map(|b| u64::from_le_bytes(b[8..16].try_into().expect("8 bytes"))),
            _ => None,
        };
        Ok(seq.is_none_or(|seq| seq > other))
    }

    /// Blocks opened since the checkpoint, as the reservation log lists them.
    fn scan_list(
        flash: &mut Flash,
        layout: &Layout,
        ck: &Checkpoint,
        start: u64,
    ) -> Result<LogTail, FtlError> {
        let g = flash.geometry().clone();
        let mut list: Vec<(BlockId, u32)> = ck.open.clone();
        list.extend(ck.reserved.iter().flatten().map(|&b| (b, 0)));
        let (mut lb, mut lp, mut seq) = (ck.log_block, ck.log_page, ck.log_seq);
        let mut oob_buf = [0u8; OOB_BYTES as usize];
        let ring = layout.log.len() as u32;
        for _ in 0..ring * g.pages_per_block {
            // The next page of the log; a position at a block's end moves on only if the next
            // block really continues the log (otherwise it is a stale, unerased ring block).
            let (nb, np) = if lp == g.pages_per_block {
                ((lb + 1) % ring, 0)
            } else {
                (lb, lp)
            };
            let ppn = g.ppn(layout.log[nb as usize], np);
            let c = match flash.read(ppn, &mut oob_buf, start, OpCause::Recovery)? {
                (ReadStatus::Data(c), _) => c,
                // A reservation page lost to the media: the blocks it named may hold data
                // written since the checkpoint, and nothing else names them.
                (ReadStatus::Uncorrectable, _)
                    if media::classify(flash, ppn, &mut oob_buf, start, OpCause::Recovery)?.0
                        == Unreadable::Lost =>
                {
                    return Err(FtlError::MediaLoss {
                        ppn,
                        what: "a page of DFTL's block-reservation log".into(),
                    })
                }
                (ReadStatus::Uncorrectable, _) => {
                    // A torn reservation page: its blocks were never opened (programs into them
                    // wait for it), and its sequence number was never used. A recovery from that
                    // cut wrote the log on after it with that number, so the log is followed past
                    // it: stopping here would hide the blocks that recovery (and the run after
                    // it) opened whenever its own checkpoint did not become durable (soak seed
                    // 9500145: its GC had erased a block the older checkpoint still named, whose
                    // translation page it had copied into a block only that page reserved).
                    lb = nb;
                    lp = np + 1;
                    continue;
                }
                (ReadStatus::Erased, _) => break,
            };
            let Some(r) = c
                .as_bytes()
                .and_then(|b| Reservation::decode(b, g.blocks()).ok())
            else {
                break;
            };
            if r.log_seq != seq {
                break;
            }
            list.extend(r.per_chip.iter().flatten().map(|&b| (b, 0)));
            seq += 1;
            lb = nb;
            lp = np + 1;
        }
        // The next log page must be erased; if the tail is followed by anything else (a stale
        // ring block), the log moves on to a fresh block.
        if lp < g.pages_per_block {
            let (state, _) = flash.read_oob(
                g.ppn(layout.log[lb as usize], lp),
                &mut oob_buf,
                start,
                OpCause::Recovery,
            )?;
            if state != PageState::Erased {
                lp = g.pages_per_block;
            }
        }
        let mut seen = FxHashMap::default();
        list.retain(|(b, from)| {
            let e = seen.entry(b.0).or_insert(u32::MAX);
            let keep = *e == u32::MAX;
            *e = (*e).min(*from);
            keep
        });
        for (b, from) in list.iter_mut() {
            *from = seen[&b.0];
        }
        Ok((list, lb, lp, seq))
    }

    fn scan(flash: &mut Flash, list: &[(BlockId, u32)], start: u64) -> Result<Found, FtlError> {
        let g = flash.geometry().clone();
        let mut found = Found::empty();
        let mut records: Vec<[u8; OOB_BYTES as usize]> = Vec::new();
        for &(block, from) in list {
            found.blocks += 1;
            let run = flash.read_oob_run(block, from, &mut records, start, OpCause::Recovery)?;
            found.pages += u64::from(run.programmed) + u64::from(run.stopped_at.is_some());
            for (k, record) in records.iter().enumerate() {
                let ppn = g.ppn(block, from + k as u32);
                Dftl::note_scanned(&mut found, record, ppn);
            }
            let end = match run.stopped_at {
                None => (block, g.pages_per_block, false),
                Some((ppn, state)) => {
                    if state == PageState::Torn {
                        Dftl::check_torn_is_last(flash, ppn, start)?;
                    }
                    (block, g.page_in_block(ppn), state == PageState::Torn)
                }
            };
            found.ends.push(end);
        }
        Ok(found)
    }

    /// The scan's note of the programmed page `ppn` whose OOB record is `record`: the newest
    /// page of its data or translation page so far, and the largest sequence number.
    fn note_scanned(found: &mut Found, record: &[u8], ppn: Ppn) {
        let Ok(r) = OobRecord::decode(record) else {
            return;
        };
        found.max_seq = found.max_seq.max(r.seq);
        let map = if r.kind == KIND_DATA {
            &mut found.data
        } else {
            &mut found.translation
        };
        let e = map.entry(r.id).or_insert((0, Ppn::NONE));
        if r.seq >= e.0 {
            *e = (r.seq, ppn);
        }
    }

    /// A page whose spare area does not read is torn only if it is the last one programmed in
    /// its block (a cut tears the program in flight; nothing follows it) or its block's erase
    /// was cut (every page reads torn): one followed by a programmed page is a page lost to the
    /// media whole, whose record — which logical page it held, how new — no other copy keeps.
    fn check_torn_is_last(flash: &mut Flash, ppn: Ppn, start: u64) -> Result<(), FtlError> {
        let g = flash.geometry().clone();
        // With the media model off nothing is lost: no read.
        if flash.config().media.is_none() || g.page_in_block(ppn) + 1 == g.pages_per_block {
            return Ok(());
        }
        let mut buf = [0u8; OOB_BYTES as usize];
        let next = Ppn(ppn.0 + 1);
        match flash.read_oob(next, &mut buf, start, OpCause::Recovery)?.0 {
            PageState::Programmed => Err(FtlError::MediaLoss {
                ppn,
                what: "the OOB record of a DFTL page".into(),
            }),
            // Erased: the frontier; torn too: a block whose erase was cut.
            _ => Ok(()),
        }
    }

    /// Rebuilds DFTL from the flash alone (the clock is at the power-cut instant).
    pub fn recover(
        mut flash: Flash,
        options: &DesignOptions,
    ) -> Result<(Dftl, RecoveryReport), FtlError> {
        ftl::require_spare_area("dftl", OOB_BYTES, &flash)?;
        let cfg = DftlConfig::from_options(options, flash.geometry())?;
        let start = flash.idle_ns();
        let before = flash.stats().clone();
        let g = flash.geometry().clone();
        let layout = Layout::new(&g, g.pages());
        let ck = Dftl::read_checkpoint(&mut flash, &layout, start)?.ok_or_else(|| {
            FtlError::Corrupt(
                "no valid DFTL checkpoint on the device (not formatted for dftl?)".into(),
            )
        })?;
        let (list, log_block, log_page, log_seq) =
            Dftl::scan_list(&mut flash, &layout, &ck, start)?;

        let found = if cfg.oob_scan {
            Dftl::scan(&mut flash, &list, start)?
        } else {
            Found::empty()
        };
        let mut d = Dftl::build(flash, cfg);
        d.adopt_directory(&ck, &found)?;
        // Read every translation page the directory names (charged to recovery): the mapping
        // they hold is needed to rebuild the per-block valid counts GC relies on. Cost: one page
        // read per translation page (logical pages / (page_bytes / 4)), constant in the scan zone.
        let (translation_reads, lost) = d.load_translation_pages(start)?;
        let rebuild_scanned = d.rebuild_lost_translation(&lost, start)?;
        d.replay_scanned_data(&found);
        d.seq = ck.seq.max(found.max_seq) + 1;
        d.ckpt_seq = ck.ckpt_seq;
        d.log_block = log_block;
        d.log_page = log_page;
        d.log_seq = log_seq;
        d.ckpt_log = (ck.log_block, ck.log_page);
        d.log_pages_since_ckpt = log_seq - ck.log_seq;
        d.rebuild_space(&ck, &list, &found)?;
        let now = d.flash.idle_ns();
        d.arrivals = ftl::ArrivalClock::starting_at(start);
        // Persist what the scan found, then a fresh checkpoint, before serving. The translation
        // pages to write back may need more blocks than are free: blocks GC erased after the
        // checkpoint come back as full blocks with nothing valid, so GC runs first (the
        // write-back is left to the checkpoint through the mirror's pending moves, exactly as
        // after a GC move).
        d.reserve(now)?;
        d.gc_if_needed(now)?;
        d.checkpoint(now)?;
        let mut report = RecoveryReport::measure(&d.flash, &before, start);
        report.details = vec![
            ("blocks_scanned".into(), found.blocks as f64),
            ("pages_scanned".into(), found.pages as f64),
            ("scan_list_blocks".into(), list.len() as f64),
            ("translation_pages_read".into(), translation_reads as f64),
            ("checkpoint_blocks".into(), d.cfg.checkpoint_blocks as f64),
        ];
        // The media model's figures: only where it is on (docs/reliability.md).
        if d.flash.config().media.is_some() {
            report.details.extend([
                ("lost_translation_pages".into(), lost.len() as f64),
                ("rebuild_pages_scanned".into(), rebuild_scanned as f64),
            ]);
        }
        Ok((d, report))
    }

    /// Recovery step: the checkpoint's translation directory, each entry replaced by a newer
    /// translation page the OOB scan found.
    fn adopt_directory(&mut self, ck: &Checkpoint, found: &Found) -> Result<(), FtlError> {
        if ck.gtd.len() != self.gtd.len() {
            return Err(FtlError::Corrupt(format!(
                "checkpoint has {} translation pages, this geometry {}",
                ck.gtd.len(),
                self.gtd.len()
            )));
        }
        self.gtd = ck.gtd.clone();
        for (&t, &(seq, ppn)) in &found.translation {
            if (t as usize) < self.gtd.len() && seq >= self.gtd[t as usize].1 {
                self.gtd[t as usize] = (ppn, seq);
            }
        }
        Ok(())
    }

    /// Recovery step: data pages the OOB scan found newer than their translation page go into
    /// the mapping as moves the translation page does not carry yet (the checkpoint after
    /// recovery writes them back).
    fn replay_scanned_data(&mut self, found: &Found) {
        for (&lpn, &(seq, ppn)) in &found.data {
            if lpn >= self.logical_pages {
                continue;
            }
            let t = self.tvpn(lpn);
            if seq > self.gtd[t].1 {
                self.mirror.note_move(lpn, ppn);
            }
        }
    }

    /// Reads the translation page of every tvpn, checking each against the crc in its OOB
    /// record (the mapping is read from these pages from now on). Returns the number of pages
    /// read.
    fn load_translation_pages(&mut self, start: u64) -> Result<(u64, Vec<usize>), FtlError> {
        let per = self.per_tpage as usize;
        let mut entries = vec![Ppn::NONE; per];
        let mut oob_buf = [0u8; OOB_BYTES as usize];
        let mut reads = 0;
        let mut lost = Vec::new();
        for t in 0..self.gtd.len() {
            let ppn = self.gtd[t].0;
            if ppn.is_none() {
                continue;
            }
            let (status, _) = self
                .flash
                .read(ppn, &mut oob_buf, start, OpCause::Recovery)?;
            reads += 1;
            let first = t * per;
            let last = (first + per).min(self.logical_pages as usize);
            // What is wrong with the page, if anything: what it holds, never its bytes.
            let damage = match (&status, OobRecord::decode(&oob_buf)) {
                (ReadStatus::Data(c), Ok(r)) if is_translation(r.kind) => {
                    self.gtd_crc[t] = r.crc;
                    self.tpage_trims[t] = r.kind == KIND_TRANSLATION_TRIMS;
                    match c.as_bytes() {
                        Some(b) => decode_translation(b, r.crc, &mut entries[..last - first])
                            .err()
                            .map(|e| format!("it holds {c} ({e})")),
                        None => Some(format!("it holds {c}, not a translation page's bytes")),
                    }
                }
                // Lost to the media: rebuilt from every data page's OOB record once all are
                // read ([`rebuild_lost_translation`]).
                // Named by the checkpoint or found by its record: programmed whole.
                (ReadStatus::Uncorrectable, _) if media::whole_page_lost(&self.flash) => {
                    self.lost_translation_rebuildable(t, ppn, start)?;
                    lost.push(t);
                    continue;
                }
                (ReadStatus::Data(c), Ok(r)) => Some(format!(
                    "its OOB record is of kind {}, not {KIND_TRANSLATION} (translation), and it holds {c}",
                    r.kind
                )),
                (ReadStatus::Data(c), Err(e)) => Some(format!(
                    "its OOB record does not decode ({e}), and it holds {c}"
                )),
                (status, _) => Some(format!("it is {status}")),
            };
            if let Some(why) = damage {
                return Err(FtlError::Corrupt(format!(
                    "translation page {t} at {ppn} does not read back intact: {why}"
                )));
            }
        }
        Ok((reads, lost))
    }

    /// The kind of translation page `t`'s record: whether it has recorded a trim.
    fn translation_kind(&self, t: usize) -> u8 {
        translation_kind(self.tpage_trims[t])
    }

    /// Translation page `t`, lost to the media at `ppn`, can be rebuilt from data pages'
    /// records unless it recorded a trim (its spare area, which still reads, says so): a
    /// trimmed LPN's newest version may be erased while an older one is still on flash, and
    /// the rebuild would bring that older version back. Then the page is lost with what it
    /// maps.
    fn lost_translation_rebuildable(
        &mut self,
        t: usize,
        ppn: Ppn,
        start: u64,
    ) -> Result<(), FtlError> {
        let mut buf = [0u8; OOB_BYTES as usize];
        media::classify(&mut self.flash, ppn, &mut buf, start, OpCause::Recovery)?;
        match OobRecord::decode(&buf) {
            Ok(r) if r.kind == KIND_TRANSLATION => Ok(()),
            _ => Err(FtlError::MediaLoss {
                ppn,
                what: format!("DFTL translation page {t}, which recorded trims"),
            }),
        }
    }

    /// Recovery step: translation pages lost to the media, rebuilt from the OOB record of every
    /// data page on the device (DFTL's redundancy: each names its LPN and sequence number). Per
    /// LPN of a lost page, the newest data page found becomes a pending move of an empty page,
    /// written back by the checkpoint that ends recovery. Only pages that never recorded a trim
    /// are rebuilt ([`Dftl::lost_translation_rebuildable`]): for the others the newest data page
    /// found may be older than a trimmed version GC erased. Returns the pages scanned.
    fn rebuild_lost_translation(&mut self, lost: &[usize], start: u64) -> Result<u64, FtlError> {
        if lost.is_empty() {
            return Ok(0);
        }
        let per = self.per_tpage;
        let g = self.flash.geometry().clone();
        let reserved: Vec<BlockId> = self.layout.reserved_blocks().collect();
        let mut newest: FxHashMap<u32, (u64, Ppn)> = FxHashMap::default();
        let mut buf = [0u8; OOB_BYTES as usize];
        let mut pages = 0;
        for block in (0..g.blocks())
            .map(BlockId)
            .filter(|b| !reserved.contains(b))
        {
            for p in 0..g.pages_per_block {
                let ppn = g.ppn(block, p);
                let (state, _) = self
                    .flash
                    .read_oob(ppn, &mut buf, start, OpCause::Recovery)?;
                pages += 1;
                match state {
                    PageState::Erased => break,
                    PageState::Torn => {
                        Dftl::check_torn_is_last(&mut self.flash, ppn, start)?;
                        break;
                    }
                    PageState::Programmed => {}
                }
                let Ok(r) = OobRecord::decode(&buf) else {
                    continue;
                };
                if r.kind == KIND_DATA && lost.contains(&((r.id / per) as usize)) {
                    let e = newest.entry(r.id).or_insert((0, Ppn::NONE));
                    if r.seq >= e.0 {
                        *e = (r.seq, ppn);
                    }
                }
            }
        }
        for &t in lost {
            self.gtd[t].0 = Ppn::NONE;
        }
        let mut moves: Vec<(u32, (u64, Ppn))> = newest.into_iter().collect();
        moves.sort_unstable();
        for (lpn, (seq, ppn)) in moves {
            if lpn < self.logical_pages {
                let t = self.tvpn(lpn);
                self.gtd[t].1 = self.gtd[t].1.max(seq);
                self.mirror.note_move(lpn, ppn);
            }
        }
        Ok(pages)
    }

    /// Translation page `t` found lost to the media while running: rebuilt from the pages GC
    /// knows are live (the validity in RAM; each live page's OOB record names its owner, one
    /// charged OOB read each): every LPN of `t` with a live page gets it as a pending move of
    /// an empty page, which the next write-back programs. Returns when the reads are done.
    fn rebuild_translation(&mut self, t: usize, now: u64) -> Result<u64, FtlError> {
        let old = self.gtd[t].0;
        let g = self.flash.geometry().clone();
        let per = self.per_tpage;
        let mut buf = [0u8; OOB_BYTES as usize];
        let mut ready = now;
        for ppn in (0..g.pages()).map(Ppn) {
            if !self.space.validity.is_valid(ppn) {
                continue;
            }
            let (_, span) = self.flash.read_oob(ppn, &mut buf, now, OpCause::Mapping)?;
            ready = ready.max(span.end_ns);
            match OobRecord::decode(&buf) {
                Ok(r) if r.kind == KIND_DATA && (r.id / per) as usize == t => {
                    self.mirror.note_move(r.id, ppn)
                }
                _ => {}
            }
        }
        self.space.validity.invalidate(old, now);
        self.gtd[t].0 = Ppn::NONE;
        self.stats.translation_rebuilds += 1;
        Ok(ready)
    }

    /// Rebuilds allocator and validity without reading the device: block states come from the
    /// checkpoint's used-block bitmap, corrected by what the scan found in the blocks opened
    /// since; valid counts from the recovered mapping (every LPN and every translation page).
    /// A block in use at the checkpoint and not opened since is taken as full even if GC erased
    /// it after the checkpoint (its valid count is then 0 and GC erases it again before reuse).
    fn rebuild_space(
        &mut self,
        ck: &Checkpoint,
        list: &[(BlockId, u32)],
        found: &Found,
    ) -> Result<(), FtlError> {
        let (pool, in_list) = self.rebuild_pool(ck, list, found);
        self.rebuild_validity(ck, &in_list, &pool)?;
        self.space.pool = pool;
        let chips = self.flash.geometry().chips() as usize;
        self.reserved = vec![VecDeque::new(); chips];
        self.reserve_checked = (u64::MAX, u32::MAX);
        Ok(())
    }

    /// Recovery step of [`rebuild_space`](Self::rebuild_space): block states; also says which
    /// blocks are in the scan list.
    fn rebuild_pool(
        &self,
        ck: &Checkpoint,
        list: &[(BlockId, u32)],
        found: &Found,
    ) -> (BlockPool, Vec<bool>) {
        let g = self.flash.geometry();
        let reserved: Vec<BlockId> = self.layout.reserved_blocks().collect();
        let mut pool = BlockPool::new(g, STREAMS, |b| reserved.contains(&b));
        let mut in_list = vec![false; g.blocks() as usize];
        for &(b, _) in list {
            in_list[b.0 as usize] = true;
        }
        for b in 0..g.blocks() {
            let block = BlockId(b);
            if pool.state(block) != BlockState::Reserved
                && ck.was_used(block)
                && !in_list[b as usize]
            {
                pool.mark_full(block);
            }
        }
        if self.cfg.oob_scan {
            for &(block, end, torn) in &found.ends {
                if end > 0 || torn {
                    pool.mark_full(block);
                }
            }
        } else {
            // Negative control: nothing is known about the blocks opened since the checkpoint.
            for &(block, _) in list {
                pool.mark_full(block);
            }
        }
        (pool, in_list)
    }

    /// Recovery step of [`rebuild_space`](Self::rebuild_space): every mapped page and every
    /// translation page live, full blocks indexed for GC.
    fn rebuild_validity(
        &mut self,
        ck: &Checkpoint,
        in_list: &[bool],
        pool: &BlockPool,
    ) -> Result<(), FtlError> {
        let g = self.flash.geometry().clone();
        // The validity DFTL was built with, emptied (no second per-page array meanwhile).
        let validity = &mut self.space.validity;
        validity.clear();
        // The owners recovery checks here are those the invariant check reads again: kept for
        // it when the device will be checked ([`Flash::expect_invariant_checks`]).
        let mut kept = self
            .flash
            .invariant_checks_expected()
            .then(|| CheckedOwners::new(&self.flash, TRANSLATION));
        let mut entries = vec![Ppn::NONE; self.per_tpage as usize];
        for (t, &(tpage, _)) in self.gtd.iter().enumerate() {
            self.mirror.entries(&self.flash, t, tpage, &mut entries)?;
            let first = t * self.per_tpage as usize;
            let last = (first + self.per_tpage as usize).min(self.logical_pages as usize);
            for (lpn, &ppn) in (first..last).zip(&entries) {
                if ppn.is_none() {
                    continue;
                }
                // The rebuilt mapping checked against the flash (no flash operation; see
                // `set_recovered_valid`), with what the recovery knew of the block.
                validity
                    .set_recovered_valid(&self.flash, ppn, lpn as u32)
                    .map_err(|e| {
                        let block = g.block_of(ppn);
                        e.in_context(format_args!(
                            "lpn {lpn} recovered to an unusable page (in scan list {:?}, used at \
                             checkpoint {})",
                            in_list.get(block.0 as usize),
                            g.contains_ppn(ppn) && ck.was_used(block)
                        ))
                    })?;
                if let Some(k) = kept.as_mut() {
                    k.keep_recovered(&self.flash, ppn, lpn as u32);
                }
            }
        }
        for (t, &(ppn, _)) in self.gtd.iter().enumerate() {
            if !ppn.is_none() {
                validity.set_recovered_valid(&self.flash, ppn, TRANSLATION | t as u32)?;
                if let Some(k) = kept.as_mut() {
                    k.keep_recovered(&self.flash, ppn, TRANSLATION | t as u32);
                }
            }
        }
        *self.checked_owners.get_mut() = kept;
        for b in 0..g.blocks() {
            if pool.state(BlockId(b)) == BlockState::Full {
                validity.index_block(BlockId(b));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flash::{ContentTag, DeviceConfig};

    /// The invariant check reads each mapped page's owner back from its OOB record (DFTL keeps
    /// one bit per page): a mapping that points at another LPN's page is caught.
    #[test]
    fn the_invariant_check_catches_a_mapping_to_another_lpns_page() {
        let flash = Flash::in_memory(DeviceConfig::preset("small").unwrap(), OOB_BYTES, true);
        let mut d = Dftl::format(flash, &DesignOptions::default()).unwrap();
        let tag = |lpn| Content::Tag(ContentTag { lpn, write: 1 });
        d.write(Lpn(0), &[tag(0), tag(1)], 0).unwrap();
        d.check_invariants().unwrap();
        let (page_of_1, _) = d.cmt.peek(1).unwrap();
        d.cmt.update(0, page_of_1, true);
        let e = d.check_invariants().unwrap_err().to_string();
        assert!(e.contains("lpn 0 maps to") && e.contains("Some(1)"), "{e}");
        // The same with the owners earlier checks kept ([`CheckedOwners`]).
        let flash = Flash::in_memory(DeviceConfig::preset("small").unwrap(), OOB_BYTES, true);
        let mut d = Dftl::format(flash, &DesignOptions::default()).unwrap();
        d.write(Lpn(0), &[tag(0), tag(1)], 0).unwrap();
        d.check_invariants().unwrap();
        d.check_invariants().unwrap();
        assert!(
            d.checked_owners.borrow().is_some(),
            "a second check keeps owners"
        );
        let (page_of_1, _) = d.cmt.peek(1).unwrap();
        d.cmt.update(0, page_of_1, true);
        let e = d.check_invariants().unwrap_err().to_string();
        assert!(e.contains("lpn 0 maps to") && e.contains("Some(1)"), "{e}");
        // The same on a device recovered for a check, which keeps recovery's owners; one that
        // is not to be checked keeps none.
        for expected in [false, true] {
            let flash = Flash::in_memory(DeviceConfig::preset("small").unwrap(), OOB_BYTES, true);
            let mut d = Dftl::format(flash, &DesignOptions::default()).unwrap();
            d.write(Lpn(0), &[tag(0), tag(1)], 0).unwrap();
            let mut flash = d.flash;
            if expected {
                flash.expect_invariant_checks();
            }
            let (mut d, _) = Dftl::recover(flash, &DesignOptions::default()).unwrap();
            assert_eq!(d.checked_owners.borrow().is_some(), expected);
            d.check_invariants().unwrap();
            let now = d.flash.idle_ns();
            let (page_of_1, _) = d.lookup(1, now, &mut None, None).unwrap();
            d.lookup(0, now, &mut None, None).unwrap();
            d.cmt.update(0, page_of_1, true);
            let e = d.check_invariants().unwrap_err().to_string();
            assert!(e.contains("lpn 0 maps to") && e.contains("Some(1)"), "{e}");
        }
    }

    /// Write-backs keep each translation page's checksum from the entries they change; the
    /// invariant check compares it with the page's OOB record and bytes, and fails on a wrong one.
    #[test]
    fn kept_translation_checksums_match_the_pages() {
        let flash = Flash::in_memory(DeviceConfig::preset("small").unwrap(), OOB_BYTES, true);
        let mut d = Dftl::format(flash, &DesignOptions::default()).unwrap();
        let tag = |lpn| Content::Tag(ContentTag { lpn, write: 1 });
        for round in 0..3u32 {
            for lpn in (round..2_000).step_by(7) {
                d.write(Lpn(lpn), &[tag(lpn)], 0).unwrap();
            }
            d.checkpoint(0).unwrap();
            d.check_invariants().unwrap();
        }
        let t = d.gtd.iter().position(|(p, _)| !p.is_none()).unwrap();
        d.gtd_crc[t] ^= 1;
        let e = d.check_invariants().unwrap_err().to_string();
        assert!(e.contains("checksum kept"), "{e}");
    }
}
