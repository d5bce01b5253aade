//! Recovery (Möbius §III-C, §III-D, §IV-C; [R] where noted): GM → GTD → scan of the active ALA →
//! DAG commit resolution with read-and-verify of the last S_max inodes and the ordering cascade →
//! replay in ALA order → the newest Head List chain → a resolution inode before host I/O resumes.

use crate::config::InjectBug;
use crate::format::*;
use crate::mftl::{Mobius, SlotState, S_CHAIN};
use flash::{Content, Flash, OpCause, PageState, Ppn, ReadStatus};
use ftl::{DesignOptions, FtlError, RecoveryReport};
use rustc_hash::{FxHashMap, FxHashSet};

fn fe(e: flash::FlashError) -> FtlError {
    e.into()
}

struct Scan {
    inodes: Vec<Inode>,
    verify_reads: u64,
    chain_reads: u64,
    ala_pages: u64,
}

impl Mobius {
    /// Rebuilds Möbius from the flash image alone.
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
        let ReadStatus::Data(Content::Bytes(b)) = st else {
            return Ok(None);
        };
        Ok(Inode::decode(&b).filter(|ino| {
            ino.ala_seq == next && ino.kind == Some(InodeKind::HoleSkip) && ino.uuid == hole as u128
        }))
    }

    pub fn recover(flash: Flash, o: &DesignOptions) -> Result<(Mobius, RecoveryReport), FtlError> {
        let start = flash.idle_ns();
        let before = flash.stats().clone();
        let mut m = Mobius::empty(flash, o)?;
        let g = m.flash.geometry().clone();
        let ppb = g.pages_per_block as u64;
        // 1. Global metadata: the newest sealed record of the two slots.
        let mut best: Option<GmSeal> = None;
        let mut oob = [0u8; OOB_BYTES as usize];
        for blk in m.layout.gm {
            for p in 0..g.pages_per_block {
                let (st, _) = m
                    .flash
                    .read(g.ppn(blk, p), &mut oob, start, OpCause::Recovery)
                    .map_err(fe)?;
                match st {
                    ReadStatus::Erased => break,
                    ReadStatus::Data(Content::Bytes(b)) => {
                        if let Some(s) = GmSeal::decode(&b) {
                            if best.as_ref().is_none_or(|x| s.gm_seq > x.gm_seq) {
                                best = Some(s);
                            }
                        }
                    }
                    _ => {}
                }
            }
        }
        let seal = best.ok_or_else(|| FtlError::Corrupt("no global metadata record".into()))?;
        m.gm_seq = seal.gm_seq;
        m.head = seal.ala_head;
        let per = entries_per_page(g.page_bytes);
        for (i, &p) in seal.gtd_ppns.iter().enumerate() {
            let (st, _) = m
                .flash
                .read(Ppn(p), &mut oob, start, OpCause::Recovery)
                .map_err(fe)?;
            let ReadStatus::Data(Content::Bytes(b)) = st else {
                return Err(FtlError::Corrupt(format!("GTD chunk {i} unreadable")));
            };
            let (_, _, e) = decode_gtd(&b)
                .ok_or_else(|| FtlError::Corrupt(format!("GTD chunk {i} damaged")))?;
            let s0 = i * per;
            let s1 = (s0 + per).min(m.gtd.len());
            m.gtd[s0..s1].copy_from_slice(&e[..s1 - s0]);
        }
        // 2. Scan the active ALA to the first erased page.
        let mut scan = Scan {
            inodes: Vec::new(),
            verify_reads: 0,
            chain_reads: 0,
            ala_pages: 0,
        };
        let stripe = m.cfg.ala_stripe as u64;
        let slot_pages = m.slot_pages();
        let ring = m.layout.ala.len() as u64 * ppb;
        let mut idx = m.head;
        // `tail_clean`: the scan ended at a blank page with nothing programmed after it.
        let mut tail_clean = true;
        let mut round_up = false;
        // The hole this recovery leaves (the first inode not on flash whole), if any.
        let mut hole = None;
        while idx - m.head < ring {
            let (_, ppn) = m.ala_ppn(idx);
            let (st, _) = m
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
            let erased = matches!(st, ReadStatus::Erased);
            let whole = match st {
                ReadStatus::Data(Content::Bytes(b)) => {
                    Inode::decode(&b).filter(|ino| ino.ala_seq == idx)
                }
                _ => None,
            };
            if let Some(ino) = whole {
                scan.inodes.push(ino);
                idx += 1;
                continue;
            }
            if erased && m.ala_blank_after(idx, stripe, start, &mut scan.ala_pages)? {
                break; // a clean end
            }
            match m.skip_hole(idx, slot_pages, start, &mut scan.ala_pages)? {
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
        m.tail = idx;
        for s in 0..m.slots.len() {
            m.slots[s] = SlotState::Stale;
        }
        let mut b = m.head / slot_pages * slot_pages;
        while b < m.tail {
            let (slot, _) = m.ala_ppn(b);
            m.slots[slot] = SlotState::InUse(b);
            b += slot_pages;
        }
        m.ala_last_end = start;
        // 3-4. DAG commit resolution.
        // The S_max window counts inodes the device appended, not ALA indices: a hole a recovery
        // skipped (the rest of its slot) and the HoleSkip inode it wrote are not in it, or a
        // tx a first recovery verified would fall outside the window at the next one.
        let mut window_pos: Vec<u64> = Vec::with_capacity(scan.inodes.len());
        let mut n = 0u64;
        for ino in &scan.inodes {
            if ino.kind() != InodeKind::HoleSkip {
                n += 1;
            }
            window_pos.push(n);
        }
        let last_idx = n;
        let mut flags = FxHashSet::default();
        let mut marks = FxHashSet::default();
        let mut max_id = seal.next_tx_id.max(seal.chain_id);
        for ino in &scan.inodes {
            max_id = max_id.max(ino.tx_id).max(ino.chain_id);
            for &f in &ino.commit_flags {
                if f & ABORT_MARK != 0 {
                    marks.insert(f & !ABORT_MARK);
                } else {
                    flags.insert(f);
                }
            }
        }
        // Parts of each static tx.
        let mut parts: FxHashMap<u32, (u16, u16, u64)> = FxHashMap::default();
        for (ino, &pos) in scan.inodes.iter().zip(&window_pos) {
            if ino.kind() == InodeKind::Static {
                let e = parts.entry(ino.tx_id).or_insert((0, ino.part_count, pos));
                e.0 += 1;
            }
        }
        let mut committed: FxHashSet<u32> = FxHashSet::default();
        let mut verified: Vec<u32> = Vec::new();
        let mut rejected: Vec<u32> = Vec::new();
        let mut cascade: FxHashSet<u32> = FxHashSet::default();
        let mut decided: FxHashSet<u32> = FxHashSet::default();
        let s_max = m.cfg.s_max as u64;
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
                let good = m.cfg.inject_bug == InjectBug::SkipVerify || {
                    let mut good = true;
                    for &(l, p) in &all_items {
                        scan.verify_reads += 1;
                        let (st, _) = m
                            .flash
                            .read_oob(Ppn(p), &mut oob, start, OpCause::Recovery)
                            .map_err(fe)?;
                        let o = (st == PageState::Programmed)
                            .then(|| PageOob::decode(&oob))
                            .flatten();
                        if !o.is_some_and(|o| {
                            o.tx_id == id && o.lpn == l && o.kind == PageKind::Static
                        }) {
                            good = false;
                            break;
                        }
                    }
                    good
                };
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
        // 5. Replay committed mappings in ALA order (later wins).
        for k in 0..scan.inodes.len() {
            let kind = scan.inodes[k].kind();
            match kind {
                InodeKind::Static if !committed.contains(&scan.inodes[k].tx_id) => {}
                InodeKind::Static | InodeKind::NormalBatch | InodeKind::Dynamic => {
                    for &(l, p) in &scan.inodes[k].items {
                        m.resident.insert(l, p);
                    }
                }
                InodeKind::GcReloc => {
                    for &(l, from, to) in &scan.inodes[k].relocs.clone() {
                        let (cur, _) = m.lookup(l, start)?;
                        if cur == from {
                            m.resident.insert(l, to);
                        }
                    }
                }
                _ => {}
            }
        }
        // 6. The newest Head List chain.
        let (head, chain_id) = scan
            .inodes
            .last()
            .map_or((seal.head_ppn, seal.chain_id), |i| (i.head_ppn, i.chain_id));
        // The HoleSkip inode that will precede this recovery's first inode names the same
        // chain, so that a later recovery that finds only it derives what this one did.
        m.hole_marker = hole.map(|h| (h, head, chain_id));
        let mut chain_pages: Vec<(u32, u32)> = Vec::new();
        let mut chain_kind = None;
        let mut closed = false;
        if head != NO_PPN && g.contains_ppn(Ppn(head)) {
            let mut p = head;
            let mut pos = 0u32;
            while (pos as u64) < g.pages() as u64 {
                scan.chain_reads += 1;
                let (st, _) = m
                    .flash
                    .read_oob(Ppn(p), &mut oob, start, OpCause::Recovery)
                    .map_err(fe)?;
                let Some(o) = (st == PageState::Programmed)
                    .then(|| PageOob::decode(&oob))
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
                m.resident.insert(l, p);
            }
        }
        // 7. Block states from the write pointers (no reads). Page validity needs the whole
        // mapping, i.e. every translation page: it is rebuilt after the device is ready
        // (below), or before a merge that recovery's own inodes trigger.
        for b in 0..g.blocks() {
            let blk = flash::BlockId(b);
            if !m.layout.is_reserved(blk)
                && (m.flash.write_pointer(blk) > 0 || m.flash.block_erase_torn(blk))
            {
                m.space.pool.mark_full(blk);
            }
        }
        m.validity_ready = false;
        // 8-9. New ids, a fresh chain head, and the resolution inodes.
        m.next_tx_id = max_id + 1 + 1024;
        m.chain_next = m
            .space
            .allocate(S_CHAIN, &m.flash)
            .ok_or(FtlError::NoSpace)?
            .0;
        m.pin(m.chain_next);
        m.announced_id = m.next_tx_id;
        m.next_tx_id += 1;
        m.announce_written = false;
        if let Some(kind) = chain_result {
            for chunk in chain_pages.chunks(m.items_per_inode) {
                let mut ino = m.blank_inode(kind);
                ino.tx_id = chain_id;
                ino.items = chunk.to_vec();
                m.append_inode(ino, start)?;
            }
        }
        let mut res: Vec<u32> = verified.clone();
        res.extend(rejected.iter().map(|id| id | ABORT_MARK));
        let mut end;
        loop {
            let take = res.len().min(MAX_FLAGS);
            let mut ino = m.blank_inode(InodeKind::RecoveryResolution);
            ino.commit_flags = res.drain(..take).collect();
            end = m.append_inode(ino, start)?;
            if res.is_empty() {
                break;
            }
        }
        if !tail_clean {
            // The ALA now has a hole a later scan from this head would stop at: persist a head
            // past it (a merge writes the translation pages and a GM record) before the host
            // may write anything a later recovery must find.
            m.merge(end, true)?;
            end = end.max(m.gm_end);
        }
        m.ready_ns = end.max(m.flash.idle_ns());
        m.last_arrival = start;
        let mut r = RecoveryReport::measure(&m.flash, &before, start);
        // Background: page validity for GC, from every translation page, issued once the
        // device is ready (the reads occupy the chips after `ready_ns`, competing with the host).
        let bg = m.flash.stats().clone();
        let rebuild_reads = if m.validity_ready {
            0.0
        } else {
            m.rebuild_validity(m.ready_ns)?;
            m.flash.stats().since(&bg).total_reads() as f64
        };
        r.details = vec![
            ("ala_pages_scanned".into(), scan.ala_pages as f64),
            ("inodes".into(), scan.inodes.len() as f64),
            ("verify_reads".into(), scan.verify_reads as f64),
            ("chain_reads".into(), scan.chain_reads as f64),
            ("tx_verified".into(), verified.len() as f64),
            ("tx_rejected".into(), rejected.len() as f64),
            ("validity_rebuild_reads".into(), rebuild_reads),
            (
                "validity_rebuild_ms".into(),
                m.flash.idle_ns().saturating_sub(m.ready_ns) as f64 / 1e6,
            ),
        ];
        Ok((m, r))
    }
}
