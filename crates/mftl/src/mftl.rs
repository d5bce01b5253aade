//! The Möbius device (§III): static/dynamic transactions over atom inodes in the Atom Log
//! Area, DAG commit, chained normal writes, Resident Area + translation pages, merge and GC.
//!
//! Time model: every call issues its flash operations at once; ordering on flash is expressed
//! with `not_before`. The ALA is a serialized log (inode j+1 starts after inode j ended), so the
//! boot scan never meets a hole. See docs/mobius.md for every ordering argument.

use crate::config::{InjectBug, Layout, MobiusConfig};
use crate::format::*;
use flash::{BlockId, Content, Flash, Lpn, OpCause, Ppn, ReadStatus};
use ftl::{
    check_range, BlockDevice, Completion, DesignOptions, DwriteFlag, FtlError, GcPolicy,
    PageOutcome, Promise, Space, SwriteMode, Transactional, TxCapabilities, TxCompletion, TxUuid,
    Validity,
};
use rustc_hash::{FxHashMap, FxHashSet};
use std::collections::VecDeque;

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

/// Free blocks below which GC runs: one per chip, so every chip can take a copy, plus two.
fn gc_low_blocks(g: &flash::Geometry) -> u32 {
    g.chips() + 2
}
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

/// Small static transactions merged into one atom inode (§IV-E): their data pages are on flash
/// (OOB tx id = the group's), the inode is written when the group closes.
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
    pub data_end: u64,
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
    pub(crate) tp_lru: std::collections::BTreeMap<u64, usize>,
    tp_stamp: Vec<u64>,
    lru_clock: u64,
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
    pub(crate) used_uuids: FxHashSet<TxUuid>,
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
        if flash.oob_record_bytes() < OOB_BYTES {
            return Err(FtlError::InvalidOption(format!(
                "mobius needs {OOB_BYTES} OOB bytes per page"
            )));
        }
        let mut cfg = MobiusConfig::from_options(&g, o)?;
        if !o.params.contains_key("merge_window_us") {
            cfg.merge_window_ns = flash.config().timing.program_ns;
        }
        let layout = Layout::new(&g, cfg.ala_blocks);
        let lay = layout.clone();
        let pool = ftl::BlockPool::new(&g, STREAMS, |b| lay.is_reserved(b));
        let space = Space::new(pool, Validity::new(&g), GcPolicy::Greedy, 64);
        // Besides the ALA and GM areas, one open block per stream and chip and GC's free-block
        // low-water mark never hold host data at steady state.
        let logical = ftl::logical_pages(
            &g,
            layout.reserved_count() + ftl::working_blocks(&g, STREAMS, gc_low_blocks(&g)),
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
            tp_lru: Default::default(),
            tp_stamp: vec![0; tps],
            lru_clock: 0,
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
            used_uuids: FxHashSet::default(),
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
            if self.tp_stamp[tp] != 0 && self.tp_stamp[tp] != self.lru_clock {
                self.touch_tp(tp);
            }
            return Ok(at);
        }
        let per = entries_per_page(self.flash.geometry().page_bytes);
        let start = tp * per;
        let end = (start + per).min(self.logical as usize);
        let mut end_ns = at;
        if self.gtd[tp] != NO_PPN {
            let mut oob = [0u8; OOB_BYTES as usize];
            let (st, span) = self
                .flash
                .read(Ppn(self.gtd[tp]), &mut oob, at, OpCause::Mapping)
                .map_err(err_flash)?;
            end_ns = span.end_ns;
            let ReadStatus::Data(Content::Bytes(b)) = st else {
                return Err(FtlError::Corrupt(format!(
                    "translation page {tp} unreadable"
                )));
            };
            let (_, _, e) = decode_tp(&b)
                .ok_or_else(|| FtlError::Corrupt(format!("translation page {tp} damaged")))?;
            if self.tp_stamp[tp] == u64::MAX {
                // Reloaded after eviction: the in-memory view must equal what is on flash.
                assert_eq!(
                    &self.base[start..end],
                    &e[..end - start],
                    "evicted translation page {tp} was dirty"
                );
            }
            self.base[start..end].copy_from_slice(&e[..end - start]);
            self.tp_misses += 1;
            self.touch_tp(tp);
        } else {
            self.base[start..end].iter_mut().for_each(|x| *x = NO_PPN);
        }
        self.tp_loaded[tp] = true;
        self.evict_tps();
        Ok(end_ns)
    }

    /// After recovery: page validity from the recovered mapping (every translation page read
    /// once, through the Evicting Area), then the GC index. Needed before any GC or merge.
    pub(crate) fn rebuild_validity(&mut self, at: u64) -> Result<(), FtlError> {
        for tp in 0..self.gtd.len() {
            if self.gtd[tp] != NO_PPN {
                self.load_tp(tp, at)?;
                self.space
                    .validity
                    .set_valid(Ppn(self.gtd[tp]), TP_OWNER | tp as u32);
            }
        }
        let g = self.flash.geometry().clone();
        for l in 0..self.logical {
            let p = self
                .resident
                .get(&l)
                .copied()
                .unwrap_or(self.base[l as usize]);
            if p != NO_PPN {
                if self.space.validity.is_valid(Ppn(p))
                    || self.layout.is_reserved(g.block_of(Ppn(p)))
                {
                    return Err(FtlError::Corrupt(format!(
                        "lpn {l} maps to {p}, already used"
                    )));
                }
                self.space.validity.set_valid(Ppn(p), l);
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
        if self.tp_stamp[tp] != 0 && self.tp_stamp[tp] != u64::MAX {
            self.tp_lru.remove(&self.tp_stamp[tp]);
        }
        self.lru_clock += 1;
        self.tp_stamp[tp] = self.lru_clock;
        self.tp_lru.insert(self.lru_clock, tp);
    }

    /// Drops least recently used translation pages beyond the Evicting Area's capacity (never
    /// inside a merge, whose folded pages are written at its end).
    pub(crate) fn evict_tps(&mut self) {
        if self.merging {
            return;
        }
        while self.tp_lru.len() > self.evicting_tps {
            let (_, tp) = self.tp_lru.pop_first().expect("non-empty LRU");
            self.tp_stamp[tp] = u64::MAX;
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

    // ---------------------------------------------------------------- ALA

    pub(crate) fn blank_inode(&self, kind: InodeKind) -> Inode {
        Inode {
            kind: Some(kind),
            part_count: 1,
            ..Inode::default()
        }
    }

    pub(crate) fn ala_ppn(&self, idx: u64) -> (usize, Ppn) {
        ala_place(
            self.flash.geometry(),
            &self.layout.ala,
            self.cfg.ala_stripe,
            idx,
        )
    }

    /// When the inode `ala_stripe` places back has ended (the next inode may start then).
    fn ala_window_end(&self) -> u64 {
        if self.ala_recent.len() < self.cfg.ala_stripe as usize {
            return 0;
        }
        self.ala_recent.front().copied().unwrap_or(0)
    }

    /// Inodes per ring slot: `ala_stripe` blocks.
    pub(crate) fn slot_pages(&self) -> u64 {
        self.cfg.ala_stripe as u64 * self.flash.geometry().pages_per_block as u64
    }

    /// Erases the blocks of ALA slot `slot` after `not_before`; returns the last end.
    fn erase_slot(&mut self, slot: usize, not_before: u64) -> Result<u64, FtlError> {
        let w = self.cfg.ala_stripe as usize;
        let mut end = not_before;
        for k in 0..w {
            let span = self
                .flash
                .erase(self.layout.ala[slot * w + k], not_before, OpCause::TxMeta)
                .map_err(err_flash)?;
            end = end.max(span.end_ns);
        }
        Ok(end)
    }

    /// Makes the ALA slot the tail enters programmable (erase stale, or merge when the ring is full).
    fn prepare_slot(&mut self, at: u64) -> Result<(), FtlError> {
        let ppb = self.slot_pages();
        if !self.tail.is_multiple_of(ppb) {
            return Ok(());
        }
        let (slot, _) = self.ala_ppn(self.tail);
        if self.slots[slot] == SlotState::InUse(self.tail) {
            // Prepared already for this very tail: an inode the merge below appends comes back
            // here before the tail moved (soak seed 9500176: taken for a full ring, it failed a
            // recovery with "device full").
            return Ok(());
        }
        for attempt in 0..2 {
            match self.slots[slot] {
                SlotState::Erased => break,
                SlotState::InUse(base) if base + ppb > self.head => {
                    if attempt == 1 {
                        return Err(FtlError::NoSpace);
                    }
                    // The ring is full: stall until the txs pinning the head have committed,
                    // then merge (decision M14).
                    let w = self
                        .txs
                        .iter()
                        .filter(|t| t.state == TxState::Pending)
                        .map(|t| t.commit_ns)
                        .max()
                        .unwrap_or(at)
                        .max(at);
                    self.advance(w)?;
                    self.merge(w, true)?;
                }
                _ => {
                    let end = self.erase_slot(slot, at.max(self.gm_end))?;
                    self.ala_last_end = self.ala_last_end.max(end);
                    self.slots[slot] = SlotState::Erased;
                    break;
                }
            }
        }
        if !matches!(self.slots[slot], SlotState::Erased) {
            return Err(FtlError::NoSpace);
        }
        self.slots[slot] = SlotState::InUse(self.tail);
        // Merge while this fresh block still has room for the inodes the merge itself appends
        // (GC relocation records): once the ring is full, a merge that needs GC cannot finish.
        let (next, _) = self.ala_ppn(self.tail + ppb);
        if !self.merging && matches!(self.slots[next], SlotState::InUse(b) if b + ppb > self.head) {
            self.merge(at, true)?;
        }
        Ok(())
    }

    /// Appends an inode to the ALA, attaching commit flags / abort marks (DAG commit, §III-C) and
    /// enforcing the S_max window (decision M3). Returns the inode's end.
    pub(crate) fn append_inode(&mut self, ino: Inode, not_before: u64) -> Result<u64, FtlError> {
        let mut wait = not_before;
        loop {
            let nb = wait.max(self.ala_window_end()).max(self.ready_ns);
            let room = MAX_FLAGS - ino.commit_flags.len();
            let (chosen, forced_left, stall) = self.choose_flags(nb, room);
            if forced_left == 0 {
                return self.program_inode(ino, nb, chosen);
            }
            if stall > nb {
                // A tx about to leave the S_max window is not on flash yet: stall (decision M3).
                wait = stall;
                continue;
            }
            // More forced flags than fit: a FlagOnly inode first.
            let fo = self.blank_inode(InodeKind::FlagOnly);
            let (c, _, _) = self.choose_flags(nb, MAX_FLAGS);
            self.program_inode(fo, nb, c)?;
        }
    }

    /// Picks up to `room` flags/marks for an inode starting at `start`. Returns (chosen tx
    /// indices, forced txs left unflagged, the instant the forced ones become flaggable).
    fn choose_flags(&self, start: u64, room: usize) -> (Vec<usize>, usize, u64) {
        let next_idx = self.tail;
        let mut blocked: FxHashSet<u32> = FxHashSet::default();
        let mut chosen = Vec::new();
        let mut forced_left = 0;
        let mut stall = start;
        let early = self.cfg.inject_bug == InjectBug::FlagEarly;
        for (i, t) in self.txs.iter().enumerate() {
            if t.resolved {
                continue;
            }
            let forced = t.first_inode + self.cfg.s_max as u64 <= next_idx;
            let ok = match t.state {
                TxState::Aborted => true,
                _ => {
                    (early || t.data_end <= start)
                        && !t.items.iter().any(|(l, _)| blocked.contains(l))
                }
            };
            if ok && chosen.len() < room {
                chosen.push(i);
                continue;
            }
            if forced {
                forced_left += 1;
                stall = stall.max(t.data_end);
            }
            if t.state != TxState::Aborted {
                blocked.extend(t.items.iter().map(|(l, _)| *l));
            }
        }
        (chosen, forced_left, stall)
    }

    fn program_inode(
        &mut self,
        mut ino: Inode,
        nb: u64,
        chosen: Vec<usize>,
    ) -> Result<u64, FtlError> {
        let chosen_ids: Vec<u32> = chosen.iter().map(|&i| self.txs[i].tx_id).collect();
        loop {
            let t = self.tail;
            self.prepare_slot(nb)?;
            if self.tail == t {
                break;
            }
        }
        // prepare_slot may have merged (and trimmed the tx table): find the txs again.
        let chosen: Vec<usize> = chosen_ids
            .iter()
            .filter_map(|id| self.txs.iter().position(|t| t.tx_id == *id))
            .filter(|&i| !self.txs[i].resolved)
            .collect();
        for &i in &chosen {
            let t = &self.txs[i];
            ino.commit_flags.push(if t.state == TxState::Aborted {
                ABORT_MARK | t.tx_id
            } else {
                t.tx_id
            });
        }
        let nb = nb.max(self.ala_window_end());
        if let Some((hole, head_ppn, chain_id)) = self.hole_marker.take() {
            // At the start of the slot after the hole (recovery rounded the tail up to it).
            let mut marker = self.blank_inode(InodeKind::HoleSkip);
            marker.uuid = hole as u128;
            marker.head_ppn = head_ppn;
            marker.chain_id = chain_id;
            self.write_inode_at_tail(marker, nb)?;
        }
        let nb = nb.max(self.ala_window_end());
        let span = self.write_inode_at_tail(ino, nb)?;
        if !self.announce_written {
            self.announce_written = true;
            self.announce_end = span.end_ns;
        }
        for &i in &chosen {
            self.txs[i].resolved = true;
            self.txs[i].resolved_end = span.end_ns;
            // Pages stay pinned until the tx is both flagged and settled in RAM.
            if self.txs[i].state != TxState::Pending {
                let items: Vec<u32> = self.txs[i].items.iter().map(|x| x.1).collect();
                for p in items {
                    self.unpin(p, span.end_ns);
                }
            }
        }
        Ok(span.end_ns)
    }

    /// Programs `ino` at the ALA tail (its slot prepared) and advances the tail. Returns its span,
    /// its end counted from when every earlier inode is durable too: recovery reads the ALA up
    /// to its first inode not on flash whole (§IV-C).
    fn write_inode_at_tail(&mut self, mut ino: Inode, nb: u64) -> Result<flash::Span, FtlError> {
        ino.ala_seq = self.tail;
        if ino.kind() != InodeKind::HoleSkip {
            ino.head_ppn = self.chain.as_ref().map_or(self.chain_next, |c| c.head);
            ino.chain_id = self.chain.as_ref().map_or(self.announced_id, |c| c.id);
        }
        let bytes = ino.encode(self.flash.geometry().page_bytes);
        let oob = PageOob {
            tx_id: ino.tx_id,
            lpn: 0,
            next: NO_PPN,
            seq: 0,
            kind: PageKind::Inode,
        }
        .encode();
        let (_, ppn) = self.ala_ppn(self.tail);
        let span = self
            .flash
            .program(ppn, &Content::Bytes(bytes), &oob, nb, OpCause::TxMeta)
            .map_err(err_flash)?;
        self.tail += 1;
        self.ala_last_end = self.ala_last_end.max(span.end_ns);
        self.ala_recent.push_back(span.end_ns);
        if self.ala_recent.len() > self.cfg.ala_stripe as usize {
            self.ala_recent.pop_front();
        }
        Ok(flash::Span {
            start_ns: span.start_ns,
            end_ns: self.ala_last_end,
        })
    }

    /// Drops resolved, settled txs from the front of the table.
    fn trim_txs(&mut self) {
        while self
            .txs
            .front()
            .is_some_and(|t| t.resolved && t.state != TxState::Pending)
        {
            let t = self.txs.pop_front().expect("front");
            if t.state == TxState::Installed {
                self.dropped_static_durable = self.dropped_static_durable.max(t.durable_ns);
            }
        }
    }

    // ---------------------------------------------------------------- RAM commit

    /// Installs, in arrival order, every static tx committed by `now` (§III-C, §III-G).
    pub(crate) fn advance(&mut self, now: u64) -> Result<(), FtlError> {
        let mut blocked: FxHashSet<u32> = FxHashSet::default();
        for i in 0..self.txs.len() {
            let t = &self.txs[i];
            if t.state != TxState::Pending {
                continue;
            }
            if t.commit_ns <= now && !t.items.iter().any(|(l, _)| blocked.contains(l)) {
                let items = t.items.clone();
                let durable = t.durable_ns;
                let sup = std::mem::take(&mut self.txs[i].superseded);
                let sup_dyn = std::mem::take(&mut self.txs[i].superseded_dyn);
                for (l, p) in items {
                    let dyn_undo = if sup_dyn.contains(&l) {
                        let c = self
                            .chain
                            .as_ref()
                            .expect("dynamic supersession needs the running tx");
                        Some(c.undo.iter().position(|u| u.0 == l).expect("undo entry"))
                    } else {
                        None
                    };
                    if sup.contains(&l) {
                        // A later normal write already took effect (it waited for us).
                        self.supersede(p, durable.max(now));
                    } else if let Some(k) = dyn_undo {
                        // The running dynamic tx wrote `l` after us: we become the value its
                        // ABORT restores (the earlier pre-image is superseded by us).
                        let u = &mut self.chain.as_mut().unwrap().undo[k];
                        let old = u.2;
                        u.1 = Some(p);
                        u.2 = p;
                        self.pin(p);
                        if old != NO_PPN {
                            self.unpin(old, now);
                            if self.space.validity.owner(Ppn(old)) == Some(l) {
                                self.supersede(old, durable.max(now));
                            }
                        }
                    } else {
                        self.remap(l, p, now, durable)?;
                    }
                }
                self.txs[i].state = TxState::Installed;
                if self.txs[i].resolved {
                    let at = self.txs[i].resolved_end;
                    let items: Vec<u32> = self.txs[i].items.iter().map(|x| x.1).collect();
                    for p in items {
                        self.unpin(p, at);
                    }
                }
                self.committed += 1;
            } else {
                let l: Vec<u32> = t.items.iter().map(|x| x.0).collect();
                blocked.extend(l);
            }
        }
        self.trim_txs();
        self.settle_deferred_victims(now)
    }

    /// A WRITE/DWRITE/TRIM of `lpn` takes effect after every pending static tx (it waits for
    /// them), so their later install must not overwrite it.
    fn supersede_pending(&mut self, lpn: u32, by_dynamic: bool) {
        for t in self.txs.iter_mut() {
            if t.state == TxState::Pending && t.items.iter().any(|x| x.0 == lpn) {
                if by_dynamic {
                    t.superseded_dyn.insert(lpn);
                } else {
                    t.superseded.insert(lpn);
                }
            }
        }
    }

    /// The dynamic tx ended: its supersessions of pending txs become final (REAR) or vanish
    /// (ABORT).
    fn settle_dynamic_supersessions(&mut self, committed: bool) {
        for t in self.txs.iter_mut() {
            let d = std::mem::take(&mut t.superseded_dyn);
            if committed {
                t.superseded.extend(d);
            }
        }
    }

    /// Latest commit instant of pending static txs (WRITE never overlaps them, §III-B).
    fn pending_static_end(&self) -> u64 {
        self.txs
            .iter()
            .filter(|t| t.state == TxState::Pending)
            .map(|t| t.commit_ns)
            .max()
            .unwrap_or(0)
    }

    /// When every static tx admitted so far and not aborted is recoverable: data *and* inode on
    /// flash. A dynamic tx's ring may close (and so commit at recovery, even without its inode)
    /// only after this: a static tx whose inode is still queued on the ALA chip would otherwise
    /// vanish in a crash that keeps the later dynamic tx (found by the long campaign, seed 11).
    /// Installed txs count too, and so do those already dropped from the table: an async tx is
    /// installed once its data is programmed, and flagged once a later inode is built, both
    /// possibly before its own inode is on flash (found by the second-life soak, seed 9500104).
    fn static_durable(&self) -> u64 {
        self.txs
            .iter()
            .filter(|t| t.state != TxState::Aborted)
            .map(|t| t.commit_ns.max(t.durable_ns))
            .max()
            .unwrap_or(0)
            .max(self.dropped_static_durable)
    }

    /// Every request's entry: arrival order, then the open group of small transactions is
    /// closed if its deadline passed, or at once when `close_group` (any request the group must
    /// be ordered before, i.e. all but READ, ABORT and another small SWRITE).
    fn arrive(&mut self, arrival: u64, close_group: bool) -> Result<u64, FtlError> {
        let now = self.check_arrival(arrival)?;
        self.settle_group(now, close_group)?;
        Ok(now)
    }

    /// Closes the open group when due by `now` (at its deadline) or when `force`d (at `now`).
    pub(crate) fn settle_group(&mut self, now: u64, force: bool) -> Result<(), FtlError> {
        let Some(g) = &self.group else {
            return Ok(());
        };
        if force || now >= g.deadline {
            let at = now.min(g.deadline);
            self.close_group(at)?;
        }
        Ok(())
    }

    /// Writes the group's atom inode (one transaction id for all members: they commit or abort
    /// together) and completes every member's SWRITE.
    fn close_group(&mut self, at: u64) -> Result<(), FtlError> {
        let g = self.group.take().expect("open group");
        let items: Vec<(u32, u32)> = g
            .members
            .iter()
            .flat_map(|m| m.items.iter().copied())
            .collect();
        if items.is_empty() {
            return Ok(()); // every member was aborted
        }
        debug_assert!(items.len() <= self.items_per_inode);
        self.close_normal(at)?;
        let first_inode = self.tail;
        let mut ino = self.blank_inode(InodeKind::Static);
        ino.tx_id = g.tx_id;
        ino.uuid = g.members[0].uuid.0 as u128;
        ino.items = items.clone();
        ino.part_index = 0;
        ino.part_count = 1;
        let inode_end = self.append_inode(ino, at)?;
        let data_end = g.members.iter().map(|m| m.data_end).max().unwrap_or(at);
        let (commit, durable) =
            self.order_after_earlier(&g.lpns, data_end, data_end.max(inode_end));
        self.txs.push_back(StaticTx {
            uuid: TxUuid(0),
            tx_id: g.tx_id,
            items,
            first_inode,
            data_end,
            commit_ns: commit,
            durable_ns: durable,
            state: TxState::Pending,
            resolved: false,
            resolved_end: 0,
            observed: false,
            superseded: FxHashSet::default(),
            superseded_dyn: FxHashSet::default(),
        });
        self.groups_closed += 1;
        for m in &g.members {
            let ack = match m.mode {
                SwriteMode::Sync => durable,
                SwriteMode::Async => inode_end,
            };
            self.deferred_done.push((
                m.uuid,
                TxCompletion {
                    arrival_ns: m.arrival,
                    ack_ns: ack,
                    durable_ns: Some(durable),
                },
            ));
        }
        self.maybe_merge(at)?;
        Ok(())
    }

    /// Ordering (§III-G): a tx writing `lpns` commits after every earlier overlapping tx that is
    /// still unsettled. Returns (commit, durable) from the tx's own instants.
    fn order_after_earlier(&self, lpns: &FxHashSet<u32>, commit: u64, durable: u64) -> (u64, u64) {
        let (mut commit, mut durable) = (commit, durable);
        for t in &self.txs {
            if t.state == TxState::Aborted || (t.state == TxState::Installed && t.resolved) {
                continue;
            }
            if t.items.iter().any(|(l, _)| lpns.contains(l)) {
                commit = commit.max(t.commit_ns);
                durable = durable.max(t.durable_ns);
            }
        }
        (commit, durable)
    }

    /// A small SWRITE joins the open group (or opens one): data pages now, inode at close.
    fn join_group(
        &mut self,
        uuid: TxUuid,
        pages: &[(Lpn, Content)],
        mode: SwriteMode,
        arrival: u64,
        now: u64,
    ) -> Result<TxCompletion, FtlError> {
        let conflicts = self.group.as_ref().is_some_and(|g| {
            pages.iter().any(|(l, _)| g.lpns.contains(&l.0))
                || g.members.iter().map(|m| m.items.len()).sum::<usize>() + pages.len()
                    > self.items_per_inode
        });
        if conflicts {
            self.close_group(now)?;
        }
        self.advance(now)?;
        self.close_normal(now)?;
        if self.group.is_none() {
            let tx_id = self.next_tx_id;
            self.next_tx_id += 1;
            self.group = Some(SmallGroup {
                tx_id,
                deadline: now.saturating_add(self.cfg.merge_window_ns),
                members: Vec::new(),
                lpns: FxHashSet::default(),
            });
        }
        self.used_uuids.insert(uuid);
        let tx_id = self.group.as_ref().unwrap().tx_id;
        let items = self.preallocate(pages, now)?;
        let data_end = self.program_static_pages(tx_id, pages, &items, now)?;
        let g = self.group.as_mut().expect("open group");
        g.lpns.extend(items.iter().map(|x| x.0));
        g.members.push(GroupMember {
            uuid,
            mode,
            arrival,
            items,
            data_end,
        });
        self.grouped_txs += 1;
        Ok(TxCompletion {
            arrival_ns: arrival,
            ack_ns: ftl::ACK_DEFERRED,
            durable_ns: None,
        })
    }

    /// Programs a static tx's data pages at their pre-allocated places; returns the last end.
    fn program_static_pages(
        &mut self,
        tx_id: u32,
        pages: &[(Lpn, Content)],
        items: &[(u32, u32)],
        now: u64,
    ) -> Result<u64, FtlError> {
        let mut data_end = now;
        for ((l, c), &(_, p)) in pages.iter().zip(items) {
            let oob = PageOob {
                tx_id,
                lpn: l.0,
                next: NO_PPN,
                seq: 0,
                kind: PageKind::Static,
            }
            .encode();
            let s = self
                .flash
                .program(Ppn(p), c, &oob, now, OpCause::HostData)
                .map_err(err_flash)?;
            data_end = data_end.max(s.end_ns);
            self.space.validity.set_valid(Ppn(p), l.0);
        }
        Ok(data_end)
    }

    /// ABORT of a member of the open group: its pages are dropped before anything on flash
    /// refers to them, so the abort needs no flash write.
    fn abort_group_member(&mut self, uuid: TxUuid, now: u64) -> Option<u64> {
        let g = self.group.as_mut()?;
        let k = g.members.iter().position(|m| m.uuid == uuid)?;
        let m = g.members.remove(k);
        g.lpns = g
            .members
            .iter()
            .flat_map(|m| m.items.iter().map(|x| x.0))
            .collect();
        for &(_, p) in &m.items {
            self.unpin(p, now);
            self.space.validity.invalidate(Ppn(p), now);
        }
        self.aborted += 1;
        self.deferred_done.push((
            uuid,
            TxCompletion {
                arrival_ns: m.arrival,
                ack_ns: now,
                durable_ns: None,
            },
        ));
        Some(now)
    }

    fn check_arrival(&mut self, arrival: u64) -> Result<u64, FtlError> {
        self.arrivals.admit(arrival)?;
        Ok(arrival.max(self.ready_ns))
    }

    // ---------------------------------------------------------------- chains

    /// Pre-allocates the next chain page and announces a new chain id (Head List entry).
    pub(crate) fn new_announcement(&mut self) -> Result<(), FtlError> {
        if self.chain_next == NO_PPN {
            self.chain_next = self.alloc(S_CHAIN)?;
            self.pin(self.chain_next);
        }
        self.announced_id = self.next_tx_id;
        self.next_tx_id += 1;
        self.announce_written = false;
        Ok(())
    }

    /// Pre-allocates a static tx's pages, spread over the chips (§III-C: written in
    /// parallel), and pins them.
    fn preallocate(
        &mut self,
        pages: &[(Lpn, Content)],
        now: u64,
    ) -> Result<Vec<(u32, u32)>, FtlError> {
        let mut pending = vec![0u64; self.flash.geometry().chips() as usize];
        let mut items = Vec::with_capacity(pages.len());
        for (l, _) in pages {
            self.gc_if_needed(now)?;
            let p = self
                .space
                .allocate_pending(S_STATIC, &self.flash, now, &mut pending)
                .ok_or(FtlError::NoSpace)?
                .0;
            self.pin(p);
            items.push((l.0, p));
        }
        Ok(items)
    }

    fn alloc(&mut self, stream: usize) -> Result<u32, FtlError> {
        self.space
            .allocate(stream, &self.flash)
            .map(|p| p.0)
            .ok_or(FtlError::NoSpace)
    }

    /// Programs one chain page at the pre-allocated slot; returns (ppn, end).
    fn chain_page(
        &mut self,
        lpn: u32,
        content: &Content,
        last: bool,
        nb: u64,
    ) -> Result<(u32, u64), FtlError> {
        let ppn = self.chain_next;
        let c = self.chain.as_ref().expect("open chain");
        let (id, kind, head, seq) = (c.id, c.kind, c.head, c.pages.len() as u32);
        let next = if last {
            head
        } else {
            // This page is not programmed yet: keep its successor off its chip.
            let g = self.flash.geometry();
            let mut pending = vec![0u64; g.chips() as usize];
            let t = &self.flash.config().timing;
            pending[g.chip_of_block(g.block_of(Ppn(ppn))).0 as usize] =
                t.program_ns + t.transfer_ns(g.page_bytes as u64);
            let n = self
                .space
                .allocate_pending(S_CHAIN, &self.flash, nb, &mut pending)
                .ok_or(FtlError::NoSpace)?
                .0;
            self.pin(n);
            n
        };
        let oob = PageOob {
            tx_id: id,
            lpn,
            next,
            seq,
            kind,
        }
        .encode();
        let span = self
            .flash
            .program(Ppn(ppn), content, &oob, nb, OpCause::HostData)
            .map_err(err_flash)?;
        self.chain_next = if last { NO_PPN } else { next };
        self.space.validity.set_valid(Ppn(ppn), lpn);
        let c = self.chain.as_mut().unwrap();
        c.pages.push((lpn, ppn));
        c.prefix_end = c.prefix_end.max(span.end_ns);
        Ok((ppn, span.end_ns))
    }

    fn open_chain(&mut self, kind: PageKind, uuid: TxUuid) {
        assert!(self.chain.is_none());
        self.chain = Some(Chain {
            id: self.announced_id,
            kind,
            uuid,
            head: self.chain_next,
            pages: Vec::new(),
            prefix_end: self.announce_end,
            undo: Vec::new(),
        });
    }

    /// Closes the open normal batch with a NormalBatch inode (§III-D).
    fn close_normal(&mut self, at: u64) -> Result<u64, FtlError> {
        let Some(c) = self.chain.as_ref() else {
            return Ok(at);
        };
        assert_eq!(c.kind, PageKind::Normal);
        let items = c.pages.clone();
        let nb = c.prefix_end;
        let c = self.chain.take().unwrap();
        self.new_announcement()?;
        let mut ino = self.blank_inode(InodeKind::NormalBatch);
        ino.tx_id = c.id;
        ino.items = items;
        let end = self.append_inode(ino, nb.max(at))?;
        for (_, p) in c.pages {
            self.unpin(p, end);
        }
        Ok(end)
    }

    // ---------------------------------------------------------------- GM, merge

    /// Writes a GM record (GTD chunks + seal) into the other GM block (decision M16).
    pub(crate) fn write_gm(&mut self, not_before: u64) -> Result<u64, FtlError> {
        let pb = self.flash.geometry().page_bytes;
        self.gm_seq += 1;
        let blk = self.layout.gm[(self.gm_seq % 2) as usize];
        let er = self
            .flash
            .erase(blk, not_before.max(self.gm_end), OpCause::Checkpoint)
            .map_err(err_flash)?;
        let per = entries_per_page(pb);
        let mut end = er.end_ns;
        let mut ppns = Vec::new();
        for (i, chunk) in self.gtd.chunks(per).enumerate() {
            let ppn = self.flash.geometry().ppn(blk, i as u32);
            let oob = PageOob {
                tx_id: 0,
                lpn: i as u32,
                next: NO_PPN,
                seq: self.gm_seq,
                kind: PageKind::GmGtd,
            }
            .encode();
            let s = self
                .flash
                .program(
                    ppn,
                    &Content::Bytes(encode_gtd(i as u32, self.gm_seq, chunk, pb)),
                    &oob,
                    er.end_ns,
                    OpCause::Checkpoint,
                )
                .map_err(err_flash)?;
            end = end.max(s.end_ns);
            ppns.push(ppn.0);
        }
        let (head_ppn, chain_id) = self
            .chain
            .as_ref()
            .map_or((self.chain_next, self.announced_id), |c| (c.head, c.id));
        let seal = GmSeal {
            gm_seq: self.gm_seq,
            ala_head: self.head,
            next_tx_id: self.next_tx_id,
            head_ppn,
            chain_id,
            gtd_ppns: ppns.clone(),
        };
        let ppn = self.flash.geometry().ppn(blk, ppns.len() as u32);
        let oob = PageOob {
            tx_id: 0,
            lpn: 0,
            next: NO_PPN,
            seq: self.gm_seq,
            kind: PageKind::GmSeal,
        }
        .encode();
        let s = self
            .flash
            .program(
                ppn,
                &Content::Bytes(seal.encode(pb)),
                &oob,
                end,
                OpCause::Checkpoint,
            )
            .map_err(err_flash)?;
        self.gm_end = s.end_ns;
        Ok(s.end_ns)
    }

    /// ALA merge (§III-F): Resident Area → translation pages, GM with the new head, erase stale
    /// ALA blocks. The head never passes the inode of a tx not yet installed (decision M15).
    pub(crate) fn merge(&mut self, at: u64, forced: bool) -> Result<(), FtlError> {
        if self.merging {
            return Ok(());
        }
        if !self.validity_ready {
            self.rebuild_validity(at)?;
        }
        self.merging = true;
        let r = self.merge_inner(at, forced);
        self.merging = false;
        self.evict_tps();
        r
    }

    fn merge_inner(&mut self, at: u64, forced: bool) -> Result<(), FtlError> {
        let mut new_head = self.tail;
        for t in &self.txs {
            if t.state == TxState::Pending {
                new_head = new_head.min(t.first_inode);
            }
        }
        if new_head <= self.head
            || (!forced && new_head - self.head < self.cfg.active_ala_pages / 4)
        {
            return Ok(());
        }
        self.merges += 1;
        // Uncommitted dynamic mappings stay out of the translation pages.
        let undo: FxHashMap<u32, u32> = self
            .chain
            .as_ref()
            .map(|c| c.undo.iter().rev().map(|&(l, _, old)| (l, old)).collect())
            .unwrap_or_default();
        let entries: Vec<(u32, u32)> = self.resident.iter().map(|(&l, &p)| (l, p)).collect();
        let mut dirty: Vec<usize> = Vec::new();
        let mut end = at;
        for (l, p) in entries {
            let tp = self.tp_of(l);
            end = end.max(self.load_tp(tp, at)?);
            self.base[l as usize] = *undo.get(&l).unwrap_or(&p);
            dirty.push(tp);
        }
        dirty.sort_unstable();
        dirty.dedup();
        // The translation pages name the folded pages: not on flash before those are.
        end = end.max(self.resident_durable_by);
        self.map_seq += 1;
        let mut tp_end = end;
        debug_assert!(self.superseded_tps.is_empty());
        for tp in dirty {
            // The translation pages come out of the GC reserve; collecting here would append
            // relocation inodes to a ring that may be nearly full.
            if self.space.pool.free_blocks() <= 1 {
                self.gc_if_needed(at)?;
            }
            tp_end = tp_end.max(self.write_translation_page(tp, end)?);
            self.merge_tp_end = tp_end;
        }
        self.head = new_head;
        let gm = self.write_gm(tp_end)?;
        self.release_merged_supersessions(gm);
        self.merge_tp_end = 0;
        for p in std::mem::take(&mut self.superseded_tps) {
            self.space.validity.invalidate(Ppn(p), gm);
            self.flash.release_bytes(Ppn(p));
        }
        let relocated: FxHashSet<u32> = std::mem::take(&mut self.merge_relocated)
            .into_iter()
            .collect();
        self.resident
            .retain(|l, _| undo.contains_key(l) || relocated.contains(l));
        // Stale ALA slots are erased in the background once the head is durable.
        let ppb = self.slot_pages();
        for s in 0..self.slots.len() {
            if let SlotState::InUse(b) = self.slots[s] {
                if b + ppb <= self.head {
                    self.erase_slot(s, gm)?;
                    self.slots[s] = SlotState::Erased;
                }
            }
        }
        Ok(())
    }

    /// Programs translation page `tp` from the mapping (after `not_before`) at a fresh place
    /// and points the GTD at it; the old copy is superseded once the merge's GM record is on
    /// flash. Returns the program's end.
    fn write_translation_page(&mut self, tp: usize, not_before: u64) -> Result<u64, FtlError> {
        let pb = self.flash.geometry().page_bytes;
        let per = entries_per_page(pb);
        let ppn = self.alloc(S_MAP)?;
        let s0 = tp * per;
        let s1 = (s0 + per).min(self.logical as usize);
        let bytes = encode_tp(tp as u32, self.map_seq, &self.base[s0..s1], pb);
        let oob = PageOob {
            tx_id: 0,
            lpn: tp as u32,
            next: NO_PPN,
            seq: self.map_seq,
            kind: PageKind::Translation,
        }
        .encode();
        let s = self
            .flash
            .program(
                Ppn(ppn),
                &Content::Bytes(bytes),
                &oob,
                not_before,
                OpCause::Mapping,
            )
            .map_err(err_flash)?;
        self.space
            .validity
            .set_valid(Ppn(ppn), TP_OWNER | tp as u32);
        if self.gtd[tp] != NO_PPN {
            self.superseded_tps.push(self.gtd[tp]);
        }
        self.gtd[tp] = ppn;
        self.touch_tp(tp);
        Ok(s.end_ns)
    }

    fn maybe_merge(&mut self, at: u64) -> Result<(), FtlError> {
        if self.tail - self.head > self.cfg.active_ala_pages {
            self.merge(at, false)?;
        }
        Ok(())
    }

    // ---------------------------------------------------------------- GC

    fn gc_eligible(&self, b: BlockId) -> bool {
        !self.layout.is_reserved(b) && self.pins[b.0 as usize] == 0
    }

    pub(crate) fn gc_if_needed(&mut self, at: u64) -> Result<(), FtlError> {
        if !self.validity_ready {
            self.rebuild_validity(at)?;
        }
        let low = gc_low_blocks(self.flash.geometry());
        let mut at = at;
        // The LPNs pending static txs rewrite, gathered only when a victim is to be chosen (most
        // calls find enough free blocks and return).
        let mut pending_set: Option<FxHashSet<u32>> = None;
        let mut rounds = 0;
        while self.space.pool.free_blocks() < low {
            rounds += 1;
            if rounds > 2 * self.space.pool.blocks() {
                return Err(FtlError::NoSpace);
            }
            let pending = pending_set.get_or_insert_with(|| self.pending_lpns());
            let clean = self.pick_gc_victim(pending);
            if let Some(v) = clean {
                self.collect(v, at, OpCause::GcCopy, pending)?;
                continue;
            }
            if !pending.is_empty() && !self.merging && !self.settling {
                // Every candidate holds a page a pending tx rewrites: stall until those txs
                // have committed (as a full ALA ring does, decision M14), then collect.
                at = self.pending_static_end().max(at);
                self.gc_stalls += 1;
                self.advance(at)?;
                pending_set = Some(self.pending_lpns());
                continue;
            }
            // Inside a merge (which must not install txs) take any victim: its moves of
            // pending-rewritten pages are deferred (see `collect`).
            match self.space.pick_victim(&self.flash, |b| self.gc_eligible(b)) {
                Some(v) => self.collect(v, at, OpCause::GcCopy, pending)?,
                // Blocks pinned by superseded pages awaiting a merge (deferred invalidation):
                // merge now, which makes them collectable.
                None if !self.merge_pending_invalid.is_empty() && !self.merging => {
                    self.merge(at, true)?;
                    if !self.merge_pending_invalid.is_empty() {
                        return Err(FtlError::NoSpace);
                    }
                }
                None if self.space.pool.free_blocks() == 0 => return Err(FtlError::NoSpace),
                None => return Ok(()),
            }
        }
        if let Some(v) = self
            .space
            .wear_victim(&self.flash, |b| self.pins[b.0 as usize] == 0)
        {
            // A cold block holding a page a pending tx rewrites waits for the next check.
            let pending = pending_set.get_or_insert_with(|| self.pending_lpns());
            if !self.layout.is_reserved(v) && !self.holds_pending(v, pending) {
                self.collect(v, at, OpCause::WearLevel, pending)?;
            }
        }
        Ok(())
    }

    /// The greedy victim among blocks holding no page a pending static tx rewrites.
    fn pick_gc_victim(&self, pending: &FxHashSet<u32>) -> Option<BlockId> {
        self.space.pick_victim(&self.flash, |b| {
            self.gc_eligible(b) && !self.holds_pending(b, pending)
        })
    }

    /// Whether block `b` holds a live data page of an LPN in `pending`.
    fn holds_pending(&self, b: BlockId, pending: &FxHashSet<u32>) -> bool {
        !pending.is_empty()
            && self
                .space
                .validity
                .valid_pages(b)
                .any(|(_, owner)| owner & TP_OWNER == 0 && pending.contains(&owner))
    }

    /// Moves a victim's live pages, logs the moves of data pages in a GcReloc inode and of
    /// translation pages in a GM record, then erases the victim after both (decision M12).
    ///
    /// A live page whose LPN a *pending* static tx rewrites is current in RAM but already
    /// superseded in ALA order (the tx's inode precedes any relocation logged now). Such a move is
    /// not logged yet and the victim is not erased: [`Mobius::settle_deferred_victims`] logs it
    /// once no pending tx covers the LPN and the copy is still the mapping (every such tx was
    /// aborted), or drops it (a tx installed its own page), and only then erases the victim.
    /// Logging it at once made recovery replay a stale relocation: its `from` page had been erased
    /// and reused by a later copy of the same LPN, which the merged translation page mapped, so
    /// `cur == from` held and a committed transaction lost that page to the older version (soak
    /// seed 9200065, large-tx shape; docs/mobius.md). `pending` is [`Mobius::pending_lpns`] as the
    /// caller computed it; GC creates no transaction, so it can only be a superset of the current
    /// one, which defers a move that [`Mobius::settle_deferred_victims`] then drops.
    pub(crate) fn collect(
        &mut self,
        victim: BlockId,
        at: u64,
        cause: OpCause,
        pending: &FxHashSet<u32>,
    ) -> Result<(), FtlError> {
        self.gc_runs += 1;
        self.space.validity.unindex_block(victim);
        let live: Vec<(Ppn, u32)> = self.space.validity.valid_pages(victim).collect();
        let mut oob = [0u8; OOB_BYTES as usize];
        let mut relocs = Vec::new();
        let mut deferred = Vec::new();
        let mut tp_moved = false;
        let mut last = at;
        for (from, owner) in live {
            if owner & TP_OWNER != 0 && self.gtd[(owner & !TP_OWNER) as usize] != from.0 {
                // A translation page the running merge has already replaced: not moved, but
                // the GM record written below (before the erase) points at its replacement.
                self.space.validity.invalidate(from, at);
                self.superseded_tps.retain(|&p| p != from.0);
                tp_moved = true;
                continue;
            }
            let (st, rd) = self
                .flash
                .read(from, &mut oob, at, cause)
                .map_err(err_flash)?;
            let ReadStatus::Data(content) = st else {
                return Err(FtlError::Corrupt(format!("live {from} unreadable")));
            };
            let to = self
                .space
                .allocate(S_GC, &self.flash)
                .ok_or(FtlError::NoSpace)?;
            let span = self
                .flash
                .program(to, &content, &oob, rd.end_ns, cause)
                .map_err(err_flash)?;
            last = last.max(span.end_ns);
            self.space.validity.invalidate(from, span.end_ns);
            self.space.validity.set_valid(to, owner);
            if owner & TP_OWNER != 0 {
                self.gtd[(owner & !TP_OWNER) as usize] = to.0;
                tp_moved = true;
            } else {
                let (cur, _) = self.lookup(owner, at)?;
                if cur != from.0 {
                    return Err(FtlError::Corrupt(format!(
                        "GC: live {from} is not the mapping of lpn {owner} ({cur})"
                    )));
                }
                self.resident.insert(owner, to.0);
                self.resident_durable_by = self.resident_durable_by.max(span.end_ns);
                if self.merging {
                    // The merge folded the Resident Area already; the new mapping stays
                    // Resident (its translation page may be written already, and the next
                    // merge folds it).
                    self.merge_relocated.push(owner);
                }
                if pending.contains(&owner) {
                    deferred.push((owner, from.0, to.0));
                } else {
                    relocs.push((owner, from.0, to.0));
                }
            }
        }
        let mut after = last
            .max(self.space.validity.invalidated_by_ns(victim))
            .max(self.unpinned_at[victim.0 as usize]);
        after = after.max(self.log_relocs(&relocs, last)?);
        if tp_moved {
            after = after.max(self.write_gm(last.max(self.merge_tp_end))?);
        }
        if !deferred.is_empty() {
            self.gc_deferred += 1;
            self.deferred_victims.push(DeferredVictim {
                block: victim,
                relocs: deferred,
                after,
                cause,
            });
            return Ok(());
        }
        self.erase_victim(victim, after, cause)
    }

    fn erase_victim(
        &mut self,
        victim: BlockId,
        after: u64,
        cause: OpCause,
    ) -> Result<(), FtlError> {
        self.flash.erase(victim, after, cause).map_err(err_flash)?;
        self.space.validity.erased(victim);
        self.space.pool.release(victim);
        self.unpinned_at[victim.0 as usize] = 0;
        Ok(())
    }

    /// Logs GC moves (lpn, from, to) in GcReloc inodes appended after `not_before`; returns
    /// when the last is on flash (`not_before` if there is none).
    fn log_relocs(&mut self, relocs: &[(u32, u32, u32)], not_before: u64) -> Result<u64, FtlError> {
        let cap = inode_capacity(self.flash.geometry().page_bytes, InodeKind::GcReloc);
        let mut end = not_before;
        for chunk in relocs.chunks(cap) {
            let mut ino = self.blank_inode(InodeKind::GcReloc);
            ino.relocs = chunk.to_vec();
            end = end.max(self.append_inode(ino, not_before)?);
        }
        Ok(end)
    }

    /// LPNs some pending static tx writes.
    pub(crate) fn pending_lpns(&self) -> FxHashSet<u32> {
        self.txs
            .iter()
            .filter(|t| t.state == TxState::Pending)
            .flat_map(|t| t.items.iter().map(|x| x.0))
            .collect()
    }

    /// Erases the deferred GC victims whose LPNs no pending tx covers any more, logging the
    /// moves that are still the mapping (see [`Mobius::collect`]).
    pub(crate) fn settle_deferred_victims(&mut self, at: u64) -> Result<(), FtlError> {
        if self.settling || self.deferred_victims.is_empty() {
            return Ok(());
        }
        self.settling = true;
        let r = self.settle_deferred_inner(at);
        self.settling = false;
        r
    }

    fn settle_deferred_inner(&mut self, at: u64) -> Result<(), FtlError> {
        let pending = self.pending_lpns();
        let (ready, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut self.deferred_victims)
            .into_iter()
            .partition(|v| v.relocs.iter().all(|r| !pending.contains(&r.0)));
        self.deferred_victims = waiting;
        for v in ready {
            let mut relocs = Vec::new();
            for &(l, from, to) in &v.relocs {
                if self.lookup(l, at)?.0 == to {
                    relocs.push((l, from, to));
                }
            }
            // A tx that installed its page over a copy invalidated the copy as of its own
            // durability: until then a power cut still needs the original in the victim.
            let mut after = v.after.max(self.space.validity.invalidated_by_ns(v.block));
            for &(_, _, to) in &v.relocs {
                let b = self.flash.geometry().block_of(Ppn(to));
                after = after.max(self.space.validity.invalidated_by_ns(b));
            }
            after = after.max(self.log_relocs(&relocs, at)?);
            self.erase_victim(v.block, after, v.cause)?;
        }
        Ok(())
    }

    // ---------------------------------------------------------------- static txs

    fn check_uuid(&self, uuid: TxUuid) -> Result<(), FtlError> {
        if uuid.0 == 0 {
            return Err(FtlError::ReservedTx(uuid));
        }
        if self.used_uuids.contains(&uuid) {
            return Err(FtlError::DuplicateTx(uuid));
        }
        if let Some(c) = &self.chain {
            if c.kind == PageKind::Dynamic {
                return Err(FtlError::DynamicTxRunning(c.uuid));
            }
        }
        Ok(())
    }

    /// Largest atomic transaction: `max_parts` inodes (decision M10), and at most half the spare
    /// (over-provisioned) pages, because every page of a pending tx coexists with the page it
    /// replaces until the tx settles.
    pub fn max_tx_pages(&self) -> u64 {
        let g = self.flash.geometry();
        let data_pages =
            (g.blocks() - self.layout.reserved_count()) as u64 * g.pages_per_block as u64;
        let spare = data_pages.saturating_sub(self.logical as u64) / 2;
        (self.items_per_inode as u64 * self.cfg.max_parts() as u64).min(spare)
    }

    fn do_swrite(
        &mut self,
        uuid: TxUuid,
        pages: &[(Lpn, Content)],
        mode: SwriteMode,
        arrival: u64,
    ) -> Result<TxCompletion, FtlError> {
        self.check_uuid(uuid)?;
        if pages.is_empty() {
            return Err(FtlError::EmptyRequest);
        }
        let max = self.max_tx_pages();
        if pages.len() as u64 > max {
            return Err(FtlError::TxTooLarge {
                pages: pages.len() as u64,
                max,
            });
        }
        let mut seen = FxHashSet::default();
        for (l, _) in pages {
            check_range(*l, 1, self.logical)?;
            if !seen.insert(l.0) {
                return Err(FtlError::DuplicatePage { lpn: *l });
            }
        }
        let small = self.cfg.merge_small && (pages.len() as u32) < self.cfg.small_tx_pages;
        let now = self.arrive(arrival, !small)?;
        if small {
            return self.join_group(uuid, pages, mode, arrival, now);
        }
        self.advance(now)?;
        self.close_normal(now)?;
        self.used_uuids.insert(uuid);
        let tx_id = self.next_tx_id;
        self.next_tx_id += 1;
        // Pre-allocate every page (spread over chips by the allocator, §III-C).
        let items = self.preallocate(pages, now)?;
        // Inode part(s) first (paper order), then the data pages in parallel.
        let parts: Vec<&[(u32, u32)]> = items.chunks(self.items_per_inode).collect();
        let first_inode = self.tail;
        let mut inode_end = now;
        let n = parts.len() as u16;
        for (k, part) in parts.iter().enumerate() {
            let mut ino = self.blank_inode(InodeKind::Static);
            ino.tx_id = tx_id;
            ino.uuid = uuid.0 as u128;
            ino.items = part.to_vec();
            ino.part_index = k as u16;
            ino.part_count = n;
            if n > 1 {
                ino.flags |= FLAG_MULTIPART;
            }
            inode_end = self.append_inode(ino, now)?;
        }
        let data_end = self.program_static_pages(tx_id, pages, &items, now)?;
        // Ordering (§III-G): after every earlier overlapping tx that is still unsettled.
        let (commit, durable) = self.order_after_earlier(&seen, data_end, data_end.max(inode_end));
        self.txs.push_back(StaticTx {
            uuid,
            tx_id,
            items,
            first_inode,
            data_end,
            commit_ns: commit,
            durable_ns: durable,
            state: TxState::Pending,
            resolved: false,
            resolved_end: 0,
            observed: false,
            superseded: FxHashSet::default(),
            superseded_dyn: FxHashSet::default(),
        });
        self.maybe_merge(now)?;
        let ack = match mode {
            SwriteMode::Sync => durable,
            SwriteMode::Async => inode_end,
        };
        Ok(TxCompletion {
            arrival_ns: arrival,
            ack_ns: ack,
            durable_ns: Some(durable),
        })
    }

    fn do_abort(&mut self, uuid: TxUuid, arrival: u64) -> Result<Completion, FtlError> {
        let now = self.arrive(arrival, false)?;
        if let Some(end) = self.abort_group_member(uuid, now) {
            return Ok(Completion {
                arrival_ns: arrival,
                ack_ns: end,
            });
        }
        if uuid.0 == 0
            || self
                .chain
                .as_ref()
                .is_some_and(|c| c.kind == PageKind::Dynamic && c.uuid == uuid)
        {
            return self.abort_dynamic(now, arrival);
        }
        self.advance(now)?;
        let Some(i) = self.txs.iter().position(|t| t.uuid == uuid) else {
            return Err(if self.used_uuids.contains(&uuid) {
                FtlError::AlreadyCommitted(uuid)
            } else {
                FtlError::UnknownTx(uuid)
            });
        };
        let t = &self.txs[i];
        if t.state == TxState::Aborted {
            return Err(FtlError::UnknownTx(uuid));
        }
        if t.state == TxState::Installed || t.data_end <= now || t.observed || t.resolved {
            return Err(FtlError::AlreadyCommitted(uuid));
        }
        // Later overlapping pending txs no longer wait for it.
        self.txs[i].state = TxState::Aborted;
        self.aborted += 1;
        let items = self.txs[i].items.clone();
        // A persistent abort mark (in a FlagOnly inode), acknowledged when on flash.
        let mut end = now;
        while !self.txs[i].resolved {
            let ino = self.blank_inode(InodeKind::FlagOnly);
            end = self.append_inode(ino, now)?;
        }
        for (_, p) in items {
            self.space.validity.invalidate(Ppn(p), end);
        }
        self.recompute_commit_times();
        self.advance(now)?;
        Ok(Completion {
            arrival_ns: arrival,
            ack_ns: end,
        })
    }

    /// After an abort, pending txs need not wait for the aborted one.
    fn recompute_commit_times(&mut self) {
        for i in 0..self.txs.len() {
            if self.txs[i].state != TxState::Pending {
                continue;
            }
            let mut c = self.txs[i].data_end;
            for j in 0..i {
                let (a, b) = (&self.txs[j], &self.txs[i]);
                if a.state == TxState::Pending
                    && a.items.iter().any(|x| b.items.iter().any(|y| y.0 == x.0))
                {
                    c = c.max(a.commit_ns);
                }
            }
            self.txs[i].commit_ns = c;
        }
    }

    // ---------------------------------------------------------------- dynamic txs

    fn do_dwrite(
        &mut self,
        uuid: TxUuid,
        lpn: Lpn,
        content: &Content,
        flag: DwriteFlag,
        arrival: u64,
    ) -> Result<TxCompletion, FtlError> {
        check_range(lpn, 1, self.logical)?;
        self.check_dwrite(uuid, flag)?;
        let now = self.arrive(arrival, true)?;
        self.advance(now)?;
        let mut nb = now;
        if matches!(flag, DwriteFlag::Head | DwriteFlag::Single) {
            // HEAD waits for every earlier static tx (decision M19) and closes the normal batch.
            // Every page of the dynamic tx starts after their data and inodes are on flash, so a
            // closed ring can never survive a crash that loses or rejects an earlier static tx.
            nb = nb.max(self.static_durable());
            self.dyn_not_before = nb;
            self.close_normal(now)?;
            self.used_uuids.insert(uuid);
            self.open_chain(PageKind::Dynamic, uuid);
        } else if self.chain.as_ref().unwrap().pages.len() + 1 > self.items_per_inode {
            return Err(FtlError::TxTooLarge {
                pages: self.items_per_inode as u64 + 1,
                max: self.items_per_inode as u64,
            });
        }
        self.gc_if_needed(now)?;
        let nb = nb.max(self.dyn_not_before);
        let last = matches!(flag, DwriteFlag::Rear | DwriteFlag::Single);
        self.supersede_pending(lpn.0, true);
        let (ppn, end) = self.chain_page(lpn.0, content, last, nb)?;
        // Per-page mapping update (§III-D) with an undo record; the old page stays pinned.
        let (old, _) = self.lookup(lpn.0, now)?;
        let prev_res = self.resident.insert(lpn.0, ppn);
        if old != NO_PPN {
            self.pin(old);
        }
        self.chain
            .as_mut()
            .unwrap()
            .undo
            .push((lpn.0, prev_res, old));
        if !last {
            return Ok(TxCompletion {
                arrival_ns: arrival,
                ack_ns: end,
                durable_ns: None,
            });
        }
        let end = self.commit_dynamic(uuid, now)?;
        Ok(TxCompletion {
            arrival_ns: arrival,
            ack_ns: end,
            durable_ns: Some(end),
        })
    }

    /// Whether DWRITE `flag` of `uuid` may run: HEAD/Single only with no dynamic tx running and
    /// a fresh, non-zero uuid; BODY/REAR only for the running one (one dynamic tx at a time,
    /// §III-G).
    fn check_dwrite(&self, uuid: TxUuid, flag: DwriteFlag) -> Result<(), FtlError> {
        let running = self
            .chain
            .as_ref()
            .filter(|c| c.kind == PageKind::Dynamic)
            .map(|c| c.uuid);
        match flag {
            DwriteFlag::Head | DwriteFlag::Single => {
                if let Some(r) = running {
                    return Err(FtlError::DynamicTxRunning(r));
                }
                if uuid.0 == 0 {
                    return Err(FtlError::ReservedTx(uuid));
                }
                if self.used_uuids.contains(&uuid) {
                    return Err(FtlError::DuplicateTx(uuid));
                }
            }
            DwriteFlag::Body | DwriteFlag::Rear => match running {
                None => return Err(FtlError::NoDynamicTx),
                Some(r) if r != uuid => return Err(FtlError::UnknownTx(uuid)),
                _ => {}
            },
        }
        Ok(())
    }

    /// REAR closed the ring of the running dynamic tx: its Dynamic inode is written (the ack is
    /// when it is on flash, returned), its pages unpinned and the pages it superseded (the
    /// pre-tx ones and pages rewritten inside the tx) invalidated from then on (§III-D).
    fn commit_dynamic(&mut self, uuid: TxUuid, now: u64) -> Result<u64, FtlError> {
        let c = self.chain.take().unwrap();
        self.settle_dynamic_supersessions(true);
        self.new_announcement()?;
        let mut ino = self.blank_inode(InodeKind::Dynamic);
        ino.tx_id = c.id;
        ino.uuid = uuid.0 as u128;
        ino.items = c.pages.clone();
        let end = self.append_inode(ino, c.prefix_end.max(now))?;
        self.resident_durable_by = self.resident_durable_by.max(end);
        for &(_, p) in &c.pages {
            self.unpin(p, end);
        }
        let mut last_of: FxHashMap<u32, u32> = FxHashMap::default();
        for &(l, p) in &c.pages {
            last_of.insert(l, p);
        }
        for &(l, _, old) in &c.undo {
            if old != NO_PPN {
                self.unpin(old, end);
            }
            let _ = l;
        }
        // Superseded pages: the pre-tx ones and pages rewritten inside the tx.
        let mut first_old: FxHashMap<u32, u32> = FxHashMap::default();
        for &(l, _, old) in &c.undo {
            first_old.entry(l).or_insert(old);
        }
        for &(l, p) in &c.pages {
            if last_of[&l] != p {
                self.supersede(p, end);
            }
        }
        for (l, old) in first_old {
            if old != NO_PPN && self.space.validity.owner(Ppn(old)) == Some(l) {
                self.supersede(old, end);
            }
        }
        self.committed += 1;
        self.maybe_merge(now)?;
        Ok(end)
    }

    fn abort_dynamic(&mut self, now: u64, arrival: u64) -> Result<Completion, FtlError> {
        let Some(c) = self.chain.as_ref().filter(|c| c.kind == PageKind::Dynamic) else {
            return Err(FtlError::NoDynamicTx);
        };
        let _ = c;
        let c = self.chain.take().unwrap();
        self.settle_dynamic_supersessions(false);
        for &(l, prev, _) in c.undo.iter().rev() {
            match prev {
                Some(p) => self.resident.insert(l, p),
                None => self.resident.remove(&l),
            };
        }
        self.new_announcement()?;
        let mut ino = self.blank_inode(InodeKind::DynAbort);
        ino.tx_id = c.id;
        let end = self.append_inode(ino, now)?;
        for &(_, p) in &c.pages {
            self.unpin(p, end);
            self.space.validity.invalidate(Ppn(p), end);
        }
        for &(_, _, old) in &c.undo {
            if old != NO_PPN {
                self.unpin(old, end);
            }
        }
        self.aborted += 1;
        Ok(Completion {
            arrival_ns: arrival,
            ack_ns: end,
        })
    }

    // ---------------------------------------------------------------- reads

    fn read_pages(
        &mut self,
        start: Lpn,
        count: u32,
        at: u64,
        overlay: bool,
        out: &mut Vec<PageOutcome>,
    ) -> Result<u64, FtlError> {
        out.clear();
        let mut ack = at;
        let mut oob = [0u8; OOB_BYTES as usize];
        for i in 0..count {
            let lpn = start.0 + i;
            let (mut ppn, t) = self.lookup(lpn, at)?;
            if overlay {
                for tx in &self.txs {
                    let dyn_wrote = self
                        .chain
                        .as_ref()
                        .is_some_and(|c| c.undo.iter().any(|u| u.0 == lpn));
                    if tx.state == TxState::Pending && !tx.superseded.contains(&lpn) && !dyn_wrote {
                        if let Some(&(_, p)) = tx.items.iter().find(|x| x.0 == lpn) {
                            ppn = p;
                        }
                    }
                }
            }
            if ppn == NO_PPN {
                out.push(PageOutcome::Unwritten);
                ack = ack.max(t);
                continue;
            }
            let (st, span) = self
                .flash
                .read(Ppn(ppn), &mut oob, t, OpCause::HostData)
                .map_err(err_flash)?;
            ack = ack.max(span.end_ns);
            out.push(match st {
                ReadStatus::Data(c) => PageOutcome::Data(c),
                _ => PageOutcome::Uncorrectable,
            });
        }
        Ok(ack)
    }

    /// Live pages on the data blocks (host data, pending transactions, translation pages).
    pub fn valid_pages(&self) -> u64 {
        (0..self.flash.geometry().blocks())
            .map(BlockId)
            .filter(|&b| !self.layout.is_reserved(b))
            .map(|b| self.space.validity.valid_count(b) as u64)
            .sum()
    }

    pub(crate) fn state_check(&self) -> Result<(), String> {
        self.space.check_invariants()?;
        if self.resident.len() as u64
            > self.cfg.active_ala_pages * self.items_per_inode as u64
                + self.flash.geometry().pages() as u64
        {
            return Err("Resident Area exceeds its bound".into());
        }
        for (l, p) in &self.resident {
            if *p != NO_PPN && self.space.validity.owner(Ppn(*p)) != Some(*l) {
                return Err(format!("lpn {l} maps to {p}, which is not live for it"));
            }
        }
        if self.tail < self.head {
            return Err("ALA tail behind head".into());
        }
        Ok(())
    }
}

impl BlockDevice for Mobius {
    fn design(&self) -> &'static str {
        "mobius"
    }
    fn promise(&self) -> Promise {
        Promise::AtomicTransactions
    }
    fn logical_pages(&self) -> u32 {
        self.logical
    }

    /// Normal WRITE (§III-D): chained pages, per-page mapping update; acked when the page and
    /// every earlier page of its chain are on flash (so the boot walk reaches it).
    fn write(
        &mut self,
        start: Lpn,
        pages: &[Content],
        arrival_ns: u64,
    ) -> Result<Completion, FtlError> {
        check_range(start, pages.len() as u64, self.logical)?;
        if let Some(c) = self.chain.as_ref().filter(|c| c.kind == PageKind::Dynamic) {
            return Err(FtlError::DynamicTxRunning(c.uuid));
        }
        let now = self.arrive(arrival_ns, true)?;
        self.advance(now)?;
        let nb = now.max(self.pending_static_end());
        let mut written = Vec::with_capacity(pages.len());
        let mut ack = now;
        for (i, c) in pages.iter().enumerate() {
            if self.chain.is_none() {
                if !self.announce_written {
                    let ino = self.blank_inode(InodeKind::FlagOnly);
                    self.append_inode(ino, now)?;
                }
                self.open_chain(PageKind::Normal, TxUuid(0));
            }
            self.gc_if_needed(now)?;
            let lpn = start.0 + i as u32;
            self.supersede_pending(lpn, false);
            let (ppn, _) = self.chain_page(lpn, c, false, nb)?;
            written.push((lpn, ppn));
            if self.chain.as_ref().unwrap().pages.len() >= self.items_per_inode {
                ack = ack
                    .max(self.chain.as_ref().unwrap().prefix_end)
                    .max(self.announce_end);
                for &(l, p) in &written {
                    self.remap(l, p, now, ack)?;
                }
                written.clear();
                self.close_normal(now)?;
            }
        }
        let ack = ack
            .max(self.chain.as_ref().map_or(now, |c| c.prefix_end))
            .max(self.announce_end);
        for &(l, p) in &written {
            self.remap(l, p, now, ack)?;
        }
        self.maybe_merge(now)?;
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
        let now = self.arrive(arrival_ns, false)?;
        self.advance(now)?;
        let ack = self.read_pages(start, count, now, false, out)?;
        Ok(Completion {
            arrival_ns,
            ack_ns: ack,
        })
    }

    fn flush(&mut self, arrival_ns: u64) -> Result<Completion, FtlError> {
        let now = self.arrive(arrival_ns, true)?;
        self.advance(now)?;
        // Every static tx sent before the flush, installed and dropped ones included.
        let mut ack = now.max(self.static_durable());
        if let Some(c) = &self.chain {
            if c.kind == PageKind::Normal {
                ack = ack.max(c.prefix_end).max(self.announce_end);
            }
        }
        Ok(Completion {
            arrival_ns,
            ack_ns: ack,
        })
    }

    /// TRIM persists as a NormalBatch inode of unmappings.
    fn trim(&mut self, start: Lpn, count: u32, arrival_ns: u64) -> Result<Completion, FtlError> {
        check_range(start, count as u64, self.logical)?;
        if let Some(c) = self.chain.as_ref().filter(|c| c.kind == PageKind::Dynamic) {
            return Err(FtlError::DynamicTxRunning(c.uuid));
        }
        let now = self.arrive(arrival_ns, true)?;
        self.advance(now)?;
        let nb = now.max(self.pending_static_end());
        let nb = nb.max(self.close_normal(now)?);
        let lpns: Vec<u32> = (start.0..start.0 + count).collect();
        let mut end = nb;
        for chunk in lpns.chunks(self.items_per_inode) {
            let mut ino = self.blank_inode(InodeKind::NormalBatch);
            ino.items = chunk.iter().map(|&l| (l, NO_PPN)).collect();
            end = self.append_inode(ino, nb)?;
        }
        for l in lpns {
            self.supersede_pending(l, false);
            self.remap(l, NO_PPN, now, end)?;
        }
        self.maybe_merge(now)?;
        Ok(Completion {
            arrival_ns,
            ack_ns: end,
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
    fn check_invariants(&self) -> Result<(), String> {
        self.state_check()
    }
    fn memory(&self) -> Vec<(String, u64)> {
        use flash::vec_bytes;
        let mut m = self.flash.memory();
        m.extend(self.space.memory());
        m.push((
            "mobius.mapping".into(),
            vec_bytes(&self.base)
                + vec_bytes(&self.tp_loaded)
                + vec_bytes(&self.tp_stamp)
                + vec_bytes(&self.gtd),
        ));
        // Resident Area: a hash table slot (key, value, control byte) per slot of capacity.
        m.push((
            "mobius.resident_area".into(),
            self.resident.capacity() as u64 * 9,
        ));
        m
    }

    fn metrics(&self) -> Vec<(String, f64)> {
        vec![
            ("tx_committed".into(), self.committed as f64),
            ("tx_aborted".into(), self.aborted as f64),
            ("ala_merges".into(), self.merges as f64),
            ("gc_runs".into(), self.gc_runs as f64),
            // Resident Area (c % of DRAM) + Evicting Area (the rest): the controller DRAM.
            (
                "mapping_ram_bytes".into(),
                (self.cfg.dram_bytes as f64 * self.cfg.c_percent / 100.0).round()
                    + self.cfg.evicting_bytes as f64,
            ),
            ("gc_stalls_for_pending_tx".into(), self.gc_stalls as f64),
            ("gc_victims_deferred".into(), self.gc_deferred as f64),
            ("ala_active_inodes".into(), (self.tail - self.head) as f64),
            ("ala_active_limit".into(), self.cfg.active_ala_pages as f64),
            ("resident_entries".into(), self.resident.len() as f64),
            ("tp_misses".into(), self.tp_misses as f64),
            ("merged_small_txs".into(), self.grouped_txs as f64),
            ("merged_inodes".into(), self.groups_closed as f64),
            ("tp_evictions".into(), self.tp_evictions as f64),
            ("valid_pages".into(), self.valid_pages() as f64),
            (
                "pinned_blocks".into(),
                self.pins.iter().filter(|&&p| p > 0).count() as f64,
            ),
        ]
    }
    fn transactional(&mut self) -> Option<&mut dyn Transactional> {
        Some(self)
    }
}

impl Transactional for Mobius {
    fn capabilities(&self) -> TxCapabilities {
        TxCapabilities {
            static_tx: true,
            async_swrite: true,
            dynamic_tx: true,
            concurrent_static: true,
            concurrent_dynamic: false,
            sread: true,
            abort: true,
            max_tx_pages: self.max_tx_pages(),
        }
    }
    fn swrite(
        &mut self,
        uuid: TxUuid,
        pages: &[(Lpn, Content)],
        mode: SwriteMode,
        arrival_ns: u64,
    ) -> Result<TxCompletion, FtlError> {
        self.do_swrite(uuid, pages, mode, arrival_ns)
    }
    fn dwrite(
        &mut self,
        uuid: TxUuid,
        lpn: Lpn,
        content: &Content,
        flag: DwriteFlag,
        arrival_ns: u64,
    ) -> Result<TxCompletion, FtlError> {
        self.do_dwrite(uuid, lpn, content, flag, arrival_ns)
    }
    fn abort(&mut self, uuid: TxUuid, arrival_ns: u64) -> Result<Completion, FtlError> {
        self.do_abort(uuid, arrival_ns)
    }
    /// Merged small transactions (§IV-E) complete when their group's inode is written.
    fn take_completions(&mut self, now_ns: u64) -> Result<Vec<(TxUuid, TxCompletion)>, FtlError> {
        let now = now_ns.max(self.arrivals.last());
        self.settle_group(now, false)?;
        Ok(std::mem::take(&mut self.deferred_done))
    }
    /// SREAD (§III-E): served once every static tx that arrived before it has committed.
    fn sread(
        &mut self,
        start: Lpn,
        count: u32,
        arrival_ns: u64,
        out: &mut Vec<PageOutcome>,
    ) -> Result<Completion, FtlError> {
        check_range(start, count as u64, self.logical)?;
        let now = self.arrive(arrival_ns, true)?;
        self.advance(now)?;
        let mut wait = now;
        for t in self.txs.iter_mut() {
            if t.state == TxState::Pending {
                wait = wait.max(t.commit_ns);
                t.observed = true;
            }
        }
        let ack = self.read_pages(start, count, wait, true, out)?;
        Ok(Completion {
            arrival_ns,
            ack_ns: ack,
        })
    }
}
