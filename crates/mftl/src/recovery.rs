//! Recovery (Möbius §III-C, §III-D, §IV-C; [R] where noted): GM → GTD → scan of the active ALA →
//! DAG commit resolution with read-and-verify of the last S_max inodes and the ordering cascade →
//! replay in ALA order → the newest Head List chain → a resolution inode before host I/O resumes.

use crate::config::InjectBug;
use crate::format::*;
use crate::mftl::{Mobius, SlotState, S_CHAIN};
use flash::{Content, Flash, OpCause, PageState, Ppn, ReadStatus};
use ftl::media::{self, Unreadable};
use ftl::{DesignOptions, FtlError, RecoveryReport};
use rustc_hash::{FxHashMap, FxHashSet};

fn fe(e: flash::FlashError) -> FtlError {
    e.into()
}

/// What the ALA scan found (step 2) and what the later steps read from flash.
struct Scan {
    inodes: Vec<Inode>,
    verify_reads: u64,
    chain_reads: u64,
    ala_pages: u64,
    /// The scan ended at a blank page with nothing programmed after it.
    tail_clean: bool,
    /// The hole this recovery leaves (the first inode not on flash whole), if any.
    hole: Option<u64>,
}

/// The outcome of DAG commit resolution (steps 3–4).
struct Resolution {
    committed: FxHashSet<u32>,
    /// Unflagged transactions read and found whole: flagged by the resolution inode.
    verified: Vec<u32>,
    /// Transactions given up: marked aborted by the resolution inode.
    rejected: Vec<u32>,
    /// The largest transaction or chain id seen (new ids start above it).
    max_id: u32,
}

/// The newest Head List chain (step 6): its id, its pages (lpn, ppn) and what it resolves to.
struct ChainFound {
    id: u32,
    pages: Vec<(u32, u32)>,
    result: Option<InodeKind>,
}

impl Mobius {
    /// True when the `stripe - 1` ALA pages after the blank page `idx` are blank too.
    fn ala_blank_after(
        &mut self,
        idx: u64,
        stripe: u64,
        at: u64,
        reads: &mut u64,
    ) -> Result<bool, FtlError> {
        let mut oob = [0u8; OOB_BYTES as usize];
        for k in 1..stripe {
            let (_, ppn) = self.ala_ppn(idx + k);
            *reads += 1;
            let (st, _) = self
                .flash
                .read_oob(ppn, &mut oob, at, OpCause::Recovery)
                .map_err(fe)?;
            if st != PageState::Erased {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// At a hole at ALA index `hole`: the HoleSkip inode an earlier recovery wrote at the start
    /// of the next slot, naming this hole, if it is on flash whole.
    fn skip_hole(
        &mut self,
        hole: u64,
        slot_pages: u64,
        at: u64,
        reads: &mut u64,
    ) -> Result<Option<Inode>, FtlError> {
        let next = hole.div_ceil(slot_pages) * slot_pages;
        if next == hole {
            return Ok(None);
        }
        let mut oob = [0u8; OOB_BYTES as usize];
        let (_, ppn) = self.ala_ppn(next);
        *reads += 1;
        let (st, _) = self
            .flash
            .read(ppn, &mut oob, at, OpCause::Recovery)
            .map_err(fe)?;
        if st == ReadStatus::Uncorrectable {
            self.lost_inode(ppn, at)?;
        }
        let ReadStatus::Data(Content::Bytes(b)) = st else {
            return Ok(None);
        };
        Ok(Inode::decode(&b).ok().filter(|ino| {
            ino.ala_seq == next && ino.kind == Some(InodeKind::HoleSkip) && ino.uuid == hole as u128
        }))
    }

    /// An ALA page that did not read: torn (the cut's hole, handled by the scan) or lost to the
    /// media whole (its spare area reads), which takes the inode's transaction with it — the
    /// mapping updates it holds are kept nowhere else.
    fn lost_inode(&mut self, ppn: Ppn, at: u64) -> Result<(), FtlError> {
        let mut oob = [0u8; OOB_BYTES as usize];
        match media::classify(&mut self.flash, ppn, &mut oob, at, OpCause::Recovery)?.0 {
            Unreadable::Torn => Ok(()),
            Unreadable::Lost => Err(FtlError::MediaLoss {
                ppn,
                what: "a Möbius atom inode".into(),
            }),
        }
    }

    /// A spare area read as `st` that did not read: torn (a program the cut interrupted), or —
    /// its page lost to the media whole — a record recovery needs and no other copy holds
    /// ([`media::undecided_lost`], left to the simulator's knowledge). A static transaction's data
    /// is programmed after its inode (decision M21), so a cut may tear it (the transaction is
    /// then not committed).
    fn spare_not_lost(&mut self, ppn: Ppn, st: PageState, what: &str) -> Result<(), FtlError> {
        if st == PageState::Torn && media::undecided_lost(&self.flash, ppn) {
            return Err(FtlError::MediaLoss {
                ppn,
                what: what.into(),
            });
        }
        Ok(())
    }

    /// Rebuilds Möbius from the flash image alone, in the named steps below.
    pub fn recover(flash: Flash, o: &DesignOptions) -> Result<(Mobius, RecoveryReport), FtlError> {
        let start = flash.idle_ns();
        let before = flash.stats().clone();
        let mut m = Mobius::empty(flash, o)?;
        let seal = m.read_global_metadata(start)?;
        let mut scan = m.scan_ala(start)?;
        let res = m.resolve_transactions(&seal, &mut scan, start)?;
        m.replay_mappings(&scan, &res.committed, start)?;
        let chain = m.walk_newest_chain(&seal, &mut scan, start)?;
        m.mark_written_blocks();
        let end = m.write_resolution(&scan, &res, &chain, start)?;
        m.ready_ns = end.max(m.flash.idle_ns());
        m.arrivals = ftl::ArrivalClock::starting_at(start);
        let mut r = RecoveryReport::measure(&m.flash, &before, start);
        // Background: page validity for GC, from every translation page, issued once the
        // device is ready (the reads occupy the chips after `ready_ns`, competing with the host).
        let bg = m.flash.stats().clone();
        let rebuild_reads = if m.validity_ready {
            0.0
        } else {
            let stale = m.cfg.inject_bug == InjectBug::StaleValidity;
            m.rebuild_validity_from(m.ready_ns, stale)?;
            m.flash.stats().since(&bg).total_reads() as f64
        };
        r.details = vec![
            ("ala_pages_scanned".into(), scan.ala_pages as f64),
            ("inodes".into(), scan.inodes.len() as f64),
            ("verify_reads".into(), scan.verify_reads as f64),
            ("chain_reads".into(), scan.chain_reads as f64),
            ("tx_verified".into(), res.verified.len() as f64),
            ("tx_rejected".into(), res.rejected.len() as f64),
            ("validity_rebuild_reads".into(), rebuild_reads),
            (
                "validity_rebuild_ms".into(),
                m.flash.idle_ns().saturating_sub(m.ready_ns) as f64 / 1e6,
            ),
        ];
        Ok((m, r))
    }

    /// Step 1: the newest sealed GM record of the two slots, then the GTD it names.
    fn read_global_metadata(&mut self, start: u64) -> Result<GmSeal, FtlError> {
        let g = self.flash.geometry().clone();
        let mut oob = [0u8; OOB_BYTES as usize];
        let mut best: Option<GmSeal> = None;
        let mut lost_seal: Option<(Ppn, u32)> = None;
        for blk in self.layout.gm {
            for p in 0..g.pages_per_block {
                let ppn = g.ppn(blk, p);
                let (st, _) = self
                    .flash
                    .read(ppn, &mut oob, start, OpCause::Recovery)
                    .map_err(fe)?;
                match st {
                    ReadStatus::Erased => break,
                    ReadStatus::Data(Content::Bytes(b)) => {
                        if let Ok(s) = GmSeal::decode(&b) {
                            if best.as_ref().is_none_or(|x| s.gm_seq > x.gm_seq) {
                                best = Some(s);
                            }
                        }
                    }
                    ReadStatus::Uncorrectable => {
                        let (how, _) = media::classify(
                            &mut self.flash,
                            ppn,
                            &mut oob,
                            start,
                            OpCause::Recovery,
                        )?;
                        // A seal lost whole names its record's number in its spare area.
                        let seq = match (how, PageOob::decode(&oob)) {
                            (Unreadable::Lost, Ok(r)) if r.kind == PageKind::GmSeal => Some(r.seq),
                            _ => None,
                        };
                        if let Some(seq) = seq.filter(|&q| lost_seal.is_none_or(|(_, s)| q > s)) {
                            lost_seal = Some((ppn, seq));
                        }
                    }
                    _ => {}
                }
            }
        }
        // The newest GM record lost: the older one names translation pages and an ALA head that
        // merges since may have moved past.
        let newest = best.as_ref().map_or(0, |b| b.gm_seq);
        if let Some((ppn, seq)) = lost_seal.filter(|&(_, seq)| seq > newest || best.is_none()) {
            return Err(FtlError::MediaLoss {
                ppn,
                what: format!("the seal of Möbius's newest GM record ({seq})"),
            });
        }
        let seal = best.ok_or_else(|| FtlError::Corrupt("no global metadata record".into()))?;
        self.gm_seq = seal.gm_seq;
        self.head = seal.ala_head;
        let per = entries_per_page(g.page_bytes);
        for (i, &p) in seal.gtd_ppns.iter().enumerate() {
            let (st, _) = self
                .flash
                .read(Ppn(p), &mut oob, start, OpCause::Recovery)
                .map_err(fe)?;
            let ReadStatus::Data(Content::Bytes(b)) = st else {
                // Named by the seal, written after it: programmed whole.
                if st == ReadStatus::Uncorrectable && media::whole_page_lost(&self.flash) {
                    return Err(FtlError::MediaLoss {
                        ppn: Ppn(p),
                        what: format!("GTD chunk {i} of Möbius's GM record"),
                    });
                }
                return Err(FtlError::Corrupt(format!(
                    "GTD chunk {i} at ppn {p} unreadable: it reads back {st}"
                )));
            };
            let (_, _, e) = decode_gtd(&b)
                .map_err(|e| FtlError::Corrupt(format!("GTD chunk {i} damaged: {e}")))?;
            let s0 = i * per;
            let s1 = (s0 + per).min(self.gtd.len());
            self.gtd[s0..s1].copy_from_slice(&e[..s1 - s0]);
        }
        Ok(seal)
    }

    /// Step 2: the active ALA from the head to its first inode not on flash whole (skipping a
    /// hole an earlier recovery marked), then the tail and the ring's slots.
    fn scan_ala(&mut self, start: u64) -> Result<Scan, FtlError> {
        let ppb = self.flash.geometry().pages_per_block as u64;
        let mut oob = [0u8; OOB_BYTES as usize];
        let mut scan = Scan {
            inodes: Vec::new(),
            verify_reads: 0,
            chain_reads: 0,
            ala_pages: 0,
            tail_clean: true,
            hole: None,
        };
        let stripe = self.cfg.ala_stripe as u64;
        let slot_pages = self.slot_pages();
        let ring = self.layout.ala.len() as u64 * ppb;
        let mut idx = self.head;
        // `tail_clean`: the scan ended at a blank page with nothing programmed after it.
        let mut tail_clean = true;
        let mut round_up = false;
        // The hole this recovery leaves (the first inode not on flash whole), if any.
        let mut hole = None;
        while idx - self.head < ring {
            let (_, ppn) = self.ala_ppn(idx);
            let (st, _) = self
                .flash
                .read(ppn, &mut oob, start, OpCause::Recovery)
                .map_err(fe)?;
            scan.ala_pages += 1;
            // The scan ends at the first inode not on flash whole: blank, or torn (in flight at
            // the cut). Up to `stripe - 1` later inodes may have been programmed in parallel:
            // never acknowledged (their prefix was not durable), they are ignored. A torn page
            // or ignored inodes leave a hole: recovery writes on from the next slot (erased
            // first), beginning with a HoleSkip inode that names the hole, so that a later scan
            // reaching the same hole continues there (`skip_hole`); it also merges (below) to
            // move the head past the hole.
            if st == ReadStatus::Uncorrectable {
                self.lost_inode(ppn, start)?;
            }
            let erased = matches!(st, ReadStatus::Erased);
            let whole = match st {
                ReadStatus::Data(Content::Bytes(b)) => {
                    Inode::decode(&b).ok().filter(|ino| ino.ala_seq == idx)
                }
                _ => None,
            };
            if let Some(ino) = whole {
                scan.inodes.push(ino);
                idx += 1;
                continue;
            }
            if erased && self.ala_blank_after(idx, stripe, start, &mut scan.ala_pages)? {
                break; // a clean end
            }
            match self.skip_hole(idx, slot_pages, start, &mut scan.ala_pages)? {
                Some(marker) => {
                    idx = marker.ala_seq + 1;
                    scan.inodes.push(marker);
                }
                None => {
                    (tail_clean, round_up, hole) = (false, true, Some(idx));
                    break;
                }
            }
        }
        if round_up {
            idx = idx.div_ceil(slot_pages) * slot_pages;
        }
        self.tail = idx;
        for s in 0..self.slots.len() {
            self.slots[s] = SlotState::Stale;
        }
        let mut b = self.head / slot_pages * slot_pages;
        while b < self.tail {
            let (slot, _) = self.ala_ppn(b);
            self.slots[slot] = SlotState::InUse(b);
            b += slot_pages;
        }
        self.ala_last_end = start;
        scan.tail_clean = tail_clean;
        scan.hole = hole;
        Ok(scan)
    }

    /// Steps 3–4, DAG commit resolution (§III-C): flagged transactions commit, marked ones
    /// abort, unflagged ones inside the S_max window are read and verified, and the ordering
    /// cascade rejects every later unflagged transaction that overlaps a rejected one.
    fn resolve_transactions(
        &mut self,
        seal: &GmSeal,
        scan: &mut Scan,
        start: u64,
    ) -> Result<Resolution, FtlError> {
        let (window_pos, last_idx) = window_positions(&scan.inodes);
        let (flags, marks, max_id) = commit_records(seal, &scan.inodes);
        let parts = static_parts(&scan.inodes, &window_pos);
        let mut committed: FxHashSet<u32> = FxHashSet::default();
        let mut verified: Vec<u32> = Vec::new();
        let mut rejected: Vec<u32> = Vec::new();
        let mut cascade: FxHashSet<u32> = FxHashSet::default();
        let mut decided: FxHashSet<u32> = FxHashSet::default();
        let s_max = self.cfg.s_max as u64;
        for k in 0..scan.inodes.len() {
            let ino = &scan.inodes[k];
            if ino.kind() != InodeKind::Static || !decided.insert(ino.tx_id) {
                continue;
            }
            let id = ino.tx_id;
            let all_items: Vec<(u32, u32)> = scan.inodes[k..]
                .iter()
                .filter(|i| i.kind() == InodeKind::Static && i.tx_id == id)
                .flat_map(|i| i.items.iter().copied())
                .collect();
            let (seen, count, first) = parts[&id];
            let ok = if marks.contains(&id) {
                false
            } else if flags.contains(&id) {
                true
            } else if seen != count
                || first + s_max <= last_idx
                || all_items.iter().any(|(l, _)| cascade.contains(l))
            {
                cascade.extend(all_items.iter().map(|x| x.0));
                rejected.push(id);
                false
            } else {
                let good = self.cfg.inject_bug == InjectBug::SkipVerify
                    || self.read_and_verify(id, &all_items, start, &mut scan.verify_reads)?;
                if good {
                    verified.push(id);
                } else {
                    cascade.extend(all_items.iter().map(|x| x.0));
                    rejected.push(id);
                }
                good
            };
            if ok {
                committed.insert(id);
            }
        }
        Ok(Resolution {
            committed,
            verified,
            rejected,
            max_id,
        })
    }

    /// Read-and-verify (§III-C): transaction `id` committed iff every page it maps is programmed
    /// and its OOB names this transaction and the mapped LPN ([R]: the LPN too). Stops at the
    /// first page that does not.
    fn read_and_verify(
        &mut self,
        id: u32,
        items: &[(u32, u32)],
        start: u64,
        reads: &mut u64,
    ) -> Result<bool, FtlError> {
        let mut oob = [0u8; OOB_BYTES as usize];
        for &(l, p) in items {
            *reads += 1;
            let (st, _) = self
                .flash
                .read_oob(Ppn(p), &mut oob, start, OpCause::Recovery)
                .map_err(fe)?;
            self.spare_not_lost(Ppn(p), st, "the OOB record of a transaction's page")?;
            let o = (st == PageState::Programmed)
                .then(|| PageOob::decode(&oob).ok())
                .flatten();
            if !o.is_some_and(|o| o.tx_id == id && o.lpn == l && o.kind == PageKind::Static) {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Step 5: committed mappings replayed in ALA order (later wins), relocations only where the
    /// mapping still names their source.
    fn replay_mappings(
        &mut self,
        scan: &Scan,
        committed: &FxHashSet<u32>,
        start: u64,
    ) -> Result<(), FtlError> {
        for k in 0..scan.inodes.len() {
            let kind = scan.inodes[k].kind();
            match kind {
                InodeKind::Static if !committed.contains(&scan.inodes[k].tx_id) => {}
                InodeKind::Static | InodeKind::NormalBatch | InodeKind::Dynamic => {
                    for &(l, p) in &scan.inodes[k].items {
                        self.resident.insert(l, p);
                    }
                }
                InodeKind::GcReloc => {
                    for &(l, from, to) in &scan.inodes[k].relocs.clone() {
                        let (cur, _) = self.lookup(l, start)?;
                        if cur == from {
                            self.resident.insert(l, to);
                        }
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Step 6: the newest Head List chain, walked from the head the last inode (or the seal)
    /// announces; a normal-write chain is adopted page by page, a dynamic one only if closed.
    fn walk_newest_chain(
        &mut self,
        seal: &GmSeal,
        scan: &mut Scan,
        start: u64,
    ) -> Result<ChainFound, FtlError> {
        let g = self.flash.geometry().clone();
        let hole = scan.hole;
        let mut oob = [0u8; OOB_BYTES as usize];
        let (head, chain_id) = scan
            .inodes
            .last()
            .map_or((seal.head_ppn, seal.chain_id), |i| (i.head_ppn, i.chain_id));
        // The HoleSkip inode that will precede this recovery's first inode names the same
        // chain, so that a later recovery that finds only it derives what this one did.
        self.hole_marker = hole.map(|h| (h, head, chain_id));
        let mut chain_pages: Vec<(u32, u32)> = Vec::new();
        let mut chain_kind = None;
        let mut closed = false;
        if head != NO_PPN && g.contains_ppn(Ppn(head)) {
            let mut p = head;
            let mut pos = 0u32;
            while (pos as u64) < g.pages() as u64 {
                scan.chain_reads += 1;
                let (st, _) = self
                    .flash
                    .read_oob(Ppn(p), &mut oob, start, OpCause::Recovery)
                    .map_err(fe)?;
                self.spare_not_lost(Ppn(p), st, "the OOB record of a Head List page")?;
                let Some(o) = (st == PageState::Programmed)
                    .then(|| PageOob::decode(&oob).ok())
                    .flatten()
                else {
                    break;
                };
                if o.tx_id != chain_id
                    || o.seq != pos
                    || !matches!(o.kind, PageKind::Normal | PageKind::Dynamic)
                    || chain_kind.is_some_and(|k| k != o.kind)
                {
                    break;
                }
                chain_kind = Some(o.kind);
                chain_pages.push((o.lpn, p));
                if o.next == head {
                    closed = true;
                    break;
                }
                if o.next == NO_PPN || !g.contains_ppn(Ppn(o.next)) {
                    break;
                }
                p = o.next;
                pos += 1;
            }
        }
        let chain_result = match chain_kind {
            Some(PageKind::Normal) => Some(InodeKind::NormalBatch),
            Some(PageKind::Dynamic) if closed => Some(InodeKind::Dynamic),
            _ => None,
        };
        if chain_result.is_some() {
            for &(l, p) in &chain_pages {
                self.resident.insert(l, p);
            }
        }
        Ok(ChainFound {
            id: chain_id,
            pages: chain_pages,
            result: chain_result,
        })
    }

    /// Step 7: block states from the write pointers (no reads).
    fn mark_written_blocks(&mut self) {
        let g = self.flash.geometry().clone();
        // Page validity needs the whole
        // mapping, i.e. every translation page: it is rebuilt after the device is ready
        // (below), or before a merge that recovery's own inodes trigger.
        for b in 0..g.blocks() {
            let blk = flash::BlockId(b);
            if !self.layout.is_reserved(blk)
                && (self.flash.write_pointer(blk) > 0 || self.flash.block_erase_torn(blk))
            {
                self.space.pool.mark_full(blk);
            }
        }
        self.validity_ready = false;
    }

    /// Steps 8–9: fresh ids and chain head, the adopted chain's inode, then resolution inodes
    /// (flags for verified transactions, marks for rejected ones) so that a repeated crash does
    /// not verify again; after a hole, a merge that moves the head past it. Returns when the
    /// last of them is on flash.
    fn write_resolution(
        &mut self,
        scan: &Scan,
        res: &Resolution,
        chain: &ChainFound,
        start: u64,
    ) -> Result<u64, FtlError> {
        self.next_tx_id = res.max_id + 1 + 1024;
        self.chain_next = self
            .space
            .allocate(S_CHAIN, &self.flash)
            .ok_or(FtlError::NoSpace)?
            .0;
        self.pin(self.chain_next);
        self.announced_id = self.next_tx_id;
        self.next_tx_id += 1;
        self.announce_written = false;
        if let Some(kind) = chain.result {
            for chunk in chain.pages.chunks(self.items_per_inode) {
                let mut ino = self.blank_inode(kind);
                ino.tx_id = chain.id;
                ino.items = chunk.to_vec();
                self.append_inode(ino, start)?;
            }
        }
        let mut flags: Vec<u32> = res.verified.clone();
        flags.extend(res.rejected.iter().map(|id| id | ABORT_MARK));
        let mut end;
        loop {
            let take = flags.len().min(MAX_FLAGS);
            let mut ino = self.blank_inode(InodeKind::RecoveryResolution);
            ino.commit_flags = flags.drain(..take).collect();
            end = self.append_inode(ino, start)?;
            if flags.is_empty() {
                break;
            }
        }
        if !scan.tail_clean {
            // The ALA now has a hole a later scan from this head would stop at: persist a head
            // past it (a merge writes the translation pages and a GM record) before the host
            // may write anything a later recovery must find.
            self.merge(end, true)?;
            end = end.max(self.gm_end);
        }
        Ok(end)
    }
}

/// Each inode's position in the S_max window, and the window's last position. The window counts
/// inodes the device appended, not ALA indices: a hole a recovery skipped (the rest of its slot)
/// and the HoleSkip inode it wrote are not in it, or a tx a first recovery verified would fall
/// outside the window at the next one.
fn window_positions(inodes: &[Inode]) -> (Vec<u64>, u64) {
    let mut window_pos: Vec<u64> = Vec::with_capacity(inodes.len());
    let mut n = 0u64;
    for ino in inodes {
        if ino.kind() != InodeKind::HoleSkip {
            n += 1;
        }
        window_pos.push(n);
    }
    (window_pos, n)
}

/// The commit flags and abort marks the scanned inodes carry (§III-C), and the largest
/// transaction or chain id seen (the seal's included).
fn commit_records(seal: &GmSeal, inodes: &[Inode]) -> (FxHashSet<u32>, FxHashSet<u32>, u32) {
    let mut flags = FxHashSet::default();
    let mut marks = FxHashSet::default();
    let mut max_id = seal.next_tx_id.max(seal.chain_id);
    for ino in inodes {
        max_id = max_id.max(ino.tx_id).max(ino.chain_id);
        for &f in &ino.commit_flags {
            if f & ABORT_MARK != 0 {
                marks.insert(f & !ABORT_MARK);
            } else {
                flags.insert(f);
            }
        }
    }
    (flags, marks, max_id)
}

/// Per static transaction: (parts found, parts it has, window position of its first part).
fn static_parts(inodes: &[Inode], window_pos: &[u64]) -> FxHashMap<u32, (u16, u16, u64)> {
    let mut parts: FxHashMap<u32, (u16, u16, u64)> = FxHashMap::default();
    for (ino, &pos) in inodes.iter().zip(window_pos) {
        if ino.kind() == InodeKind::Static {
            let e = parts.entry(ino.tx_id).or_insert((0, ino.part_count, pos));
            e.0 += 1;
        }
    }
    parts
}
