//! The Möbius device (§III): static/dynamic transactions over atom inodes in the Atom Log
//! Area, DAG commit, chained normal writes, Resident Area + translation pages, merge and GC.
//!
//! Time model: every call issues its flash operations at once; ordering on flash is expressed
//! with `not_before`. The ALA is a serialized log (inode j+1 starts after inode j ended), so the
//! boot scan never meets a hole. See docs/mobius.md for every ordering argument.

use crate::config::{InjectBug, Layout, MobiusConfig};
use crate::format::*;
use flash::{BlockId, Content, Flash, Lpn, OpCause, PageState, Ppn, ReadStatus};
use ftl::{
    check_range, BlockDevice, Completion, DesignOptions, DwriteFlag, FtlError, PageOutcome,
    Promise, Space, SwriteMode, Transactional, TxCapabilities, TxCompletion, TxUuid, Validity,
};
use rustc_hash::{FxHashMap, FxHashSet};
use std::collections::VecDeque;

mod ala;
mod commit;
mod gc;
mod interface;
mod merge;
mod reads;
mod transactions;

/// Write streams (one open block per chip each). Static transaction pages are pre-allocated
/// and chain pages point at their successor before it is programmed, so each needs its own
/// stream; translation pages and GC copies are programmed as soon as they are allocated and
/// share one, which keeps the open blocks (12 on the 4-chip `small` preset) well below its
/// over-provisioning.
pub(crate) const S_STATIC: usize = 0;
pub(crate) const S_CHAIN: usize = 1;
pub(crate) const S_GC: usize = 2;
pub(crate) const S_MAP: usize = S_GC;
const STREAMS: usize = 3;

/// Validity owner bit for translation pages (LPNs stay below 2^31).
pub(crate) const TP_OWNER: u32 = 1 << 31;

/// A GC victim whose erase waits for pending static txs (see [`Mobius::collect`]).
#[derive(Clone, Debug)]
pub(crate) struct DeferredVictim {
    block: BlockId,
    /// Moves not logged yet: (lpn, from, to).
    relocs: Vec<(u32, u32, u32)>,
    /// When the victim may be erased as far as its copies and invalidations go.
    after: u64,
    cause: OpCause,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TxState {
    /// Pages issued; mapping not yet installed in RAM.
    Pending,
    Installed,
    Aborted,
}

/// A static transaction until its commit flag / abort mark is on flash.
#[derive(Clone, Debug)]
pub(crate) struct StaticTx {
    pub uuid: TxUuid,
    pub tx_id: u32,
    pub items: Vec<(u32, u32)>,
    /// ALA index of its first inode part.
    pub first_inode: u64,
    pub data_end: u64,
    /// When it takes effect in RAM (after every earlier overlapping tx).
    pub commit_ns: u64,
    pub durable_ns: u64,
    pub state: TxState,
    /// Flag or abort mark programmed (RAM knows; on flash at `resolved_end`).
    pub resolved: bool,
    /// End of the inode carrying its flag or mark.
    pub resolved_end: u64,
    pub observed: bool,
    /// LPNs a later WRITE/DWRITE/TRIM rewrote while this tx was pending: not installed.
    pub superseded: FxHashSet<u32>,
    /// LPNs the running dynamic tx rewrote while this tx was pending (settled at REAR/ABORT).
    pub superseded_dyn: FxHashSet<u32>,
}

/// Small static transactions merged into one atom inode (§IV-E): their pages are pre-allocated
/// (OOB tx id = the group's) and their data held in RAM; when the group closes its inode is
/// written and then the data (§III-C, decision M21).
#[derive(Clone, Debug)]
pub(crate) struct SmallGroup {
    pub tx_id: u32,
    /// The group closes at the latest here (first member's arrival + merge window).
    pub deadline: u64,
    pub members: Vec<GroupMember>,
    pub lpns: FxHashSet<u32>,
}

#[derive(Clone, Debug)]
pub(crate) struct GroupMember {
    pub uuid: TxUuid,
    pub mode: SwriteMode,
    pub arrival: u64,
    pub items: Vec<(u32, u32)>,
    /// The data, in RAM until the group's inode is on flash (§IV-E: "the left of the
    /// transaction is still in RAM").
    pub pages: Vec<(Lpn, Content)>,
    /// Aborted while the group was open: not in the inode; its pre-allocated pages are
    /// programmed as dead pages at close (a block's pages are programmed in order).
    pub aborted: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SlotState {
    Erased,
    InUse(u64),
    Stale,
}

#[derive(Clone, Debug)]
pub(crate) struct Chain {
    pub id: u32,
    pub kind: PageKind,
    pub uuid: TxUuid,
    pub head: u32,
    pub pages: Vec<(u32, u32)>,
    /// Max end over all pages so far (acks of chain pages are monotone).
    pub prefix_end: u64,
    /// Dynamic: (lpn, previous resident entry, previous mapping) in write order.
    pub undo: Vec<(u32, Option<u32>, u32)>,
}

pub struct Mobius {
    pub(crate) flash: Flash,
    pub(crate) cfg: MobiusConfig,
    pub(crate) layout: Layout,
    pub(crate) space: Space,
    pub(crate) logical: u32,
    pub(crate) items_per_inode: usize,
    // Mapping: Resident Area over the translation-page view.
    pub(crate) resident: FxHashMap<u32, u32>,
    pub(crate) base: Vec<u32>,
    pub(crate) tp_loaded: Vec<bool>,
    /// Evicting Area (§III-F): cached translation pages, least recently used first out. A cached
    /// page is always clean (merges write every page they change), so eviction never writes.
    pub(crate) tp_lru: ftl::IndexLru,
    /// Translation pages evicted since they were last in the Evicting Area (a reload must find
    /// the view as it left it).
    pub(crate) tp_evicted: Vec<bool>,
    pub(crate) evicting_tps: usize,
    pub(crate) tp_misses: u64,
    pub(crate) tp_evictions: u64,
    /// LPNs GC relocated during a merge, after their translation page may have been written:
    /// they stay in the Resident Area (their GcReloc inode is past the new head).
    merge_relocated: Vec<u32>,
    /// GC victims holding a page whose LPN a pending static tx rewrites: see [`Mobius::collect`].
    deferred_victims: Vec<DeferredVictim>,
    settling: bool,
    /// Superseded pages waiting for the merge that folds their newer mapping (deferred
    /// invalidation, §IV-D): (ppn, instant the supersession is durable). Their blocks are pinned.
    merge_pending_invalid: Vec<(u32, u64)>,
    /// GC victims whose erase waited for pending txs, and GC stalls for them.
    pub(crate) gc_deferred: u64,
    gc_stalls: u64,
    pub(crate) gtd: Vec<u32>,
    pub(crate) map_seq: u32,
    // ALA.
    pub(crate) head: u64,
    pub(crate) tail: u64,
    pub(crate) ala_last_end: u64,
    /// End instants of the last `ala_stripe` inodes: inode `i` starts after inode
    /// `i - ala_stripe` ended, so at a cut every programmed inode lies within `ala_stripe` of the
    /// first blank one (recovery skips what lies beyond it).
    pub(crate) ala_recent: VecDeque<u64>,
    /// Set by a recovery that left a hole in the ALA (its index): the next inode programmed is
    /// preceded by a HoleSkip inode naming it, so that a later scan continues past the hole.
    /// (hole index, head of the chain and chain id the recovery found before the hole).
    pub(crate) hole_marker: Option<(u64, u32, u32)>,
    pub(crate) slots: Vec<SlotState>,
    pub(crate) gm_seq: u32,
    pub(crate) gm_end: u64,
    // Transactions.
    pub(crate) next_tx_id: u32,
    pub(crate) txs: VecDeque<StaticTx>,
    /// When the latest static tx dropped from `txs` (installed and flagged in RAM) is on flash:
    /// its inode and the inode carrying its flag may still be queued on the ALA chip.
    pub(crate) dropped_static_durable: u64,
    /// Every uuid a transaction has used since the device was built or recovered (reuse is
    /// refused): uuids come mostly in order, so kept as ranges.
    pub(crate) used_uuids: ftl::IdSet,
    // Chains (normal batches and dynamic txs) and the Head List announcement.
    pub(crate) chain: Option<Chain>,
    pub(crate) chain_next: u32,
    pub(crate) announced_id: u32,
    pub(crate) announce_end: u64,
    pub(crate) announce_written: bool,
    // GC protection (§IV-D).
    pub(crate) pins: Vec<u32>,
    pub(crate) unpinned_at: Vec<u64>,
    pub(crate) arrivals: ftl::ArrivalClock,
    pub(crate) ready_ns: u64,
    /// False between recovery and the rebuild of page validity from the translation pages.
    pub(crate) validity_ready: bool,
    // Metrics.
    pub(crate) committed: u64,
    pub(crate) aborted: u64,
    pub(crate) merges: u64,
    pub(crate) gc_runs: u64,
    pub(crate) merging: bool,
    /// Translation pages a running merge has replaced; they stay valid (the durable GM points
    /// at them) until the merge's GM record is on flash.
    superseded_tps: Vec<u32>,
    /// Updates a translation page's crc as its words change ([`patch_tp`]).
    pub(crate) page_crc: flash::WordCrc,
    /// Completion of the translation pages the running merge has written so far.
    merge_tp_end: u64,
    /// When every page the Resident Area maps is on flash: a merge folds the Resident Area into
    /// translation pages, which must not reach flash before the pages they name (a normal write
    /// or a GC copy is mapped before its program ends).
    pub(crate) resident_durable_by: u64,
    /// Pages of the running dynamic tx start after this instant.
    pub(crate) dyn_not_before: u64,
    /// The open group of merged small transactions, if any (§IV-E).
    pub(crate) group: Option<SmallGroup>,
    /// Completions of deferred SWRITEs, for `take_completions`.
    pub(crate) deferred_done: Vec<(TxUuid, TxCompletion)>,
    pub(crate) groups_closed: u64,
    pub(crate) grouped_txs: u64,
}

/// Where ALA inode `idx` lives: ring slot `(idx / slot pages) % slots`, and inside the slot page
/// `pos / stripe` of its block `pos % stripe`, so consecutive inodes go to consecutive chips
/// (the ring's blocks are laid out one chip after another).
pub(crate) fn ala_place(
    g: &flash::Geometry,
    ala: &[BlockId],
    stripe: u32,
    idx: u64,
) -> (usize, Ppn) {
    let w = stripe as u64;
    let slot_pages = w * g.pages_per_block as u64;
    let slots = ala.len() as u64 / w;
    let slot = ((idx / slot_pages) % slots) as usize;
    let pos = idx % slot_pages;
    let block = ala[slot * stripe as usize + (pos % w) as usize];
    (slot, g.ppn(block, (pos / w) as u32))
}

fn err_flash(e: flash::FlashError) -> FtlError {
    e.into()
}

impl Mobius {
    pub(crate) fn empty(flash: Flash, o: &DesignOptions) -> Result<Mobius, FtlError> {
        let g = flash.geometry().clone();
        ftl::require_spare_area("mobius", OOB_BYTES, &flash)?;
        let mut cfg = MobiusConfig::from_options(&g, o)?;
        if !o.params.contains_key("merge_window_us") {
            cfg.merge_window_ns = flash.config().timing.program_ns;
        }
        let layout = Layout::new(&g, cfg.ala_blocks);
        let lay = layout.clone();
        let pool = ftl::BlockPool::new(&g, STREAMS, |b| lay.is_reserved(b));
        let space = Space::new(pool, Validity::new(&g), cfg.gc_policy, 64);
        // Besides the ALA and GM areas, one open block per stream and chip and GC's free-block
        // low-water mark never hold host data at steady state.
        let logical = ftl::logical_pages(
            &g,
            layout.reserved_count() + ftl::working_blocks(&g, STREAMS, cfg.gc_free_blocks),
            flash.config().over_provisioning,
        )
        .min(TP_OWNER - 1);
        let per_tp = entries_per_page(g.page_bytes) as u32;
        let tps = logical.div_ceil(per_tp) as usize;
        if tps.div_ceil(entries_per_page(g.page_bytes)) + 1 > g.pages_per_block as usize {
            return Err(FtlError::InvalidOption(
                "GTD does not fit one GM block".into(),
            ));
        }
        Ok(Mobius {
            items_per_inode: inode_capacity(g.page_bytes, InodeKind::Static),
            slots: vec![SlotState::Erased; layout.ala.len() / cfg.ala_stripe as usize],
            ala_recent: VecDeque::new(),
            hole_marker: None,
            pins: vec![0; g.blocks() as usize],
            unpinned_at: vec![0; g.blocks() as usize],
            base: vec![NO_PPN; logical as usize],
            tp_loaded: vec![false; tps],
            tp_lru: ftl::IndexLru::new(tps),
            tp_evicted: vec![false; tps],
            evicting_tps: (cfg.evicting_bytes / g.page_bytes as u64).max(2) as usize,
            tp_misses: 0,
            tp_evictions: 0,
            merge_relocated: Vec::new(),
            deferred_victims: Vec::new(),
            settling: false,
            gc_deferred: 0,
            gc_stalls: 0,
            merge_pending_invalid: Vec::new(),
            gtd: vec![NO_PPN; tps],
            flash,
            cfg,
            layout,
            space,
            logical,
            resident: FxHashMap::default(),
            map_seq: 0,
            head: 0,
            tail: 0,
            ala_last_end: 0,
            gm_seq: 0,
            gm_end: 0,
            next_tx_id: 1,
            txs: VecDeque::new(),
            dropped_static_durable: 0,
            used_uuids: ftl::IdSet::new(),
            chain: None,
            chain_next: NO_PPN,
            announced_id: 0,
            announce_end: 0,
            announce_written: false,
            arrivals: ftl::ArrivalClock::starting_at(0),
            ready_ns: 0,
            validity_ready: true,
            committed: 0,
            aborted: 0,
            merges: 0,
            gc_runs: 0,
            merging: false,
            superseded_tps: Vec::new(),
            page_crc: flash::WordCrc::new(g.page_bytes as usize),
            merge_tp_end: 0,
            resident_durable_by: 0,
            dyn_not_before: 0,
            group: None,
            deferred_done: Vec::new(),
            groups_closed: 0,
            grouped_txs: 0,
        })
    }

    /// Formats an erased device: GM record, then a first inode announcing the first chain head.
    pub fn format(flash: Flash, o: &DesignOptions) -> Result<Mobius, FtlError> {
        let mut m = Mobius::empty(flash, o)?;
        m.tp_loaded.iter_mut().for_each(|l| *l = true);
        m.new_announcement()?;
        m.write_gm(0)?;
        let ino = m.blank_inode(InodeKind::RecoveryResolution);
        m.append_inode(ino, 0)?;
        Ok(m)
    }

    pub fn config(&self) -> &MobiusConfig {
        &self.cfg
    }

    // ---------------------------------------------------------------- pins

    pub(crate) fn pin(&mut self, ppn: u32) {
        let b = self.flash.geometry().block_of(Ppn(ppn));
        self.pins[b.0 as usize] += 1;
    }
    pub(crate) fn unpin(&mut self, ppn: u32, at_ns: u64) {
        let b = self.flash.geometry().block_of(Ppn(ppn)).0 as usize;
        assert!(self.pins[b] > 0, "unbalanced pin");
        self.pins[b] -= 1;
        self.unpinned_at[b] = self.unpinned_at[b].max(at_ns);
    }

    // ---------------------------------------------------------------- mapping

    pub(crate) fn tp_of(&self, lpn: u32) -> usize {
        lpn as usize / entries_per_page(self.flash.geometry().page_bytes)
    }

    /// Loads a translation page into the view (a CMT miss). Returns when it is usable.
    pub(crate) fn load_tp(&mut self, tp: usize, at: u64) -> Result<u64, FtlError> {
        if self.tp_loaded[tp] {
            if self.tp_lru.contains(tp) {
                self.touch_tp(tp);
            }
            return Ok(at);
        }
        let per = entries_per_page(self.flash.geometry().page_bytes);
        let start = tp * per;
        let end = (start + per).min(self.logical as usize);
        let end_ns = if self.gtd[tp] == NO_PPN {
            self.base[start..end].iter_mut().for_each(|x| *x = NO_PPN);
            at
        } else {
            let end_ns = if self.tp_evicted[tp] {
                self.reread_evicted_tp(tp, at)?
            } else {
                self.read_tp_into_view(tp, start..end, at)?
            };
            self.tp_misses += 1;
            self.touch_tp(tp);
            end_ns
        };
        self.tp_loaded[tp] = true;
        self.evict_tps();
        Ok(end_ns)
    }

    /// Reads translation page `tp` from flash into the view (its first load since recovery).
    fn read_tp_into_view(
        &mut self,
        tp: usize,
        entries: std::ops::Range<usize>,
        at: u64,
    ) -> Result<u64, FtlError> {
        let mut oob = [0u8; OOB_BYTES as usize];
        let (st, span) = self
            .flash
            .read(Ppn(self.gtd[tp]), &mut oob, at, OpCause::Mapping)
            .map_err(err_flash)?;
        let ReadStatus::Data(Content::Bytes(b)) = st else {
            return Err(self.tp_unreadable(tp, &st));
        };
        decode_tp_into(&b, &mut self.base[entries])
            .map_err(|e| FtlError::Corrupt(format!("translation page {tp} damaged: {e}")))?;
        Ok(span.end_ns)
    }

    /// Reads translation page `tp` again after the Evicting Area dropped it: the read is
    /// charged in full ([`Flash::sense`]: the same time, counters and recorded operation as a
    /// read), but its entries are not copied or decoded again, because the view still holds
    /// them. A cached page is clean (a merge loads every page it changes and writes it), an
    /// evicted page's entries are left alone, and `check_translation_view` holds every loaded
    /// or evicted page's copy on flash to the view. (DFTL likewise charges a read and keeps its
    /// entries in a RAM mirror.)
    fn reread_evicted_tp(&mut self, tp: usize, at: u64) -> Result<u64, FtlError> {
        let (state, span) = self
            .flash
            .sense(Ppn(self.gtd[tp]), at, OpCause::Mapping)
            .map_err(err_flash)?;
        if state != PageState::Programmed {
            let st = match state {
                PageState::Erased => ReadStatus::Erased,
                _ => ReadStatus::Uncorrectable,
            };
            return Err(self.tp_unreadable(tp, &st));
        }
        Ok(span.end_ns)
    }

    /// After recovery: page validity from the recovered mapping (every translation page read
    /// once, through the Evicting Area), then the GC index. Needed before any GC or merge.
    pub(crate) fn rebuild_validity(&mut self, at: u64) -> Result<(), FtlError> {
        self.rebuild_validity_from(at, false)
    }

    /// [`Self::rebuild_validity`]; with `resident_only` (the injected `stale_validity` bug,
    /// in the rebuild that ends recovery) the pages translation pages map are left invalid.
    pub(crate) fn rebuild_validity_from(
        &mut self,
        at: u64,
        resident_only: bool,
    ) -> Result<(), FtlError> {
        for tp in 0..self.gtd.len() {
            if self.gtd[tp] != NO_PPN {
                self.load_tp(tp, at)?;
                self.space.validity.set_recovered_valid(
                    &self.flash,
                    Ppn(self.gtd[tp]),
                    TP_OWNER | tp as u32,
                )?;
            }
        }
        let g = self.flash.geometry().clone();
        for l in 0..self.logical {
            let resident = self.resident.get(&l).copied();
            if resident_only && resident.is_none() {
                continue;
            }
            let p = resident.unwrap_or(self.base[l as usize]);
            if p != NO_PPN {
                self.space
                    .validity
                    .set_recovered_valid(&self.flash, Ppn(p), l)
                    .map_err(|e| e.in_context(format_args!("lpn {l}")))?;
                if self.layout.is_reserved(g.block_of(Ppn(p))) {
                    return Err(FtlError::Corrupt(format!(
                        "lpn {l} maps to {p}, in a reserved block"
                    )));
                }
            }
        }
        for b in self.space.pool.full_blocks().collect::<Vec<_>>() {
            self.space.validity.index_block(b);
        }
        self.validity_ready = true;
        Ok(())
    }

    /// Marks a translation page most recently used in the Evicting Area.
    fn touch_tp(&mut self, tp: usize) {
        self.tp_lru.touch(tp);
        self.tp_evicted[tp] = false;
    }

    /// Drops least recently used translation pages beyond the Evicting Area's capacity (never
    /// inside a merge, whose folded pages are written at its end).
    pub(crate) fn evict_tps(&mut self) {
        if self.merging {
            return;
        }
        while self.tp_lru.len() > self.evicting_tps {
            let tp = self.tp_lru.pop_oldest().expect("non-empty LRU");
            self.tp_evicted[tp] = true;
            self.tp_loaded[tp] = false;
            self.tp_evictions += 1;
        }
    }

    /// Current mapping of `lpn` (Resident first, then the translation view).
    pub(crate) fn lookup(&mut self, lpn: u32, at: u64) -> Result<(u32, u64), FtlError> {
        if let Some(&p) = self.resident.get(&lpn) {
            return Ok((p, at));
        }
        let t = self.load_tp(self.tp_of(lpn), at)?;
        Ok((self.base[lpn as usize], t))
    }

    /// Points `lpn` at `ppn`; the superseded page becomes invalid once `durable_ns` passed.
    fn remap(&mut self, lpn: u32, ppn: u32, at: u64, durable_ns: u64) -> Result<(), FtlError> {
        let (old, _) = self.lookup(lpn, at)?;
        self.resident.insert(lpn, ppn);
        self.resident_durable_by = self.resident_durable_by.max(durable_ns);
        if old != NO_PPN && old != ppn && self.space.validity.owner(Ppn(old)) == Some(lpn) {
            self.supersede(old, durable_ns);
        }
        Ok(())
    }

    /// `ppn` no longer holds its LPN's mapping as of `durable_ns`: invalid now, or with
    /// deferred invalidation (§IV-D) pinned until the merge that folds the newer mapping.
    fn supersede(&mut self, ppn: u32, durable_ns: u64) {
        if self.cfg.deferred_invalidation {
            self.pin(ppn);
            self.merge_pending_invalid.push((ppn, durable_ns));
        } else {
            self.space.validity.invalidate(Ppn(ppn), durable_ns);
        }
    }

    /// After a merge whose GM record ends at `gm`: the superseded pages it folded become invalid.
    fn release_merged_supersessions(&mut self, gm: u64) {
        for (p, at) in std::mem::take(&mut self.merge_pending_invalid) {
            self.space.validity.invalidate(Ppn(p), at.max(gm));
            self.unpin(p, gm);
        }
    }
}

impl Mobius {
    /// Translation page `tp` did not read (it reads back `st`): lost to worn media when
    /// uncorrectable — the GTD names it, so it was programmed whole (Möbius keeps no other copy
    /// of the mapping it holds; docs/reliability.md) — else damaged.
    fn tp_unreadable(&self, tp: usize, st: &ReadStatus) -> FtlError {
        let ppn = Ppn(self.gtd[tp]);
        match *st == ReadStatus::Uncorrectable && ftl::media::whole_page_lost(&self.flash) {
            true => FtlError::MediaLoss {
                ppn,
                what: format!("Möbius translation page {tp}"),
            },
            false => FtlError::Corrupt(format!(
                "translation page {tp} at ppn {ppn} unreadable: it reads back {st}",
                ppn = self.gtd[tp]
            )),
        }
    }
}
