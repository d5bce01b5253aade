//! Möbius: the global mapping and the ALA merge: Resident Area, translation pages, merge
//! cycles (docs/mobius.md, "Mapping, merge, GC").

use super::*;

impl Mobius {
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
                .program_owned(
                    ppn,
                    Content::Bytes(encode_gtd(i as u32, self.gm_seq, chunk, pb)),
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
            .program_owned(
                ppn,
                Content::Bytes(seal.encode(pb)),
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

    pub(super) fn merge_inner(&mut self, at: u64, forced: bool) -> Result<(), FtlError> {
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
        // In LPN order: each translation page is loaded once, its changed entries are adjacent,
        // and the order of the loads (their timing, the Evicting Area's order after them) does
        // not depend on the hash table's layout.
        let mut entries: Vec<(u32, u32)> = self.resident.iter().map(|(&l, &p)| (l, p)).collect();
        entries.sort_unstable();
        let mut end = at;
        for &(l, p) in &entries {
            end = end.max(self.load_tp(self.tp_of(l), at)?);
            self.base[l as usize] = undo.get(&l).copied().unwrap_or(p);
        }
        let changed: Vec<u32> = entries.into_iter().map(|(l, _)| l).collect();
        // The translation pages name the folded pages: not on flash before those are.
        end = end.max(self.resident_durable_by);
        self.map_seq += 1;
        let mut tp_end = end;
        debug_assert!(self.superseded_tps.is_empty());
        let per = entries_per_page(self.flash.geometry().page_bytes) as u32;
        for lpns in changed.chunk_by(|a, b| a / per == b / per) {
            // The translation pages come out of the GC reserve; collecting here appends
            // relocation inodes to a ring that may be nearly full, so only the one block the
            // next pages need is collected here, not the whole reserve: on a nearly full device
            // each victim frees a few pages, and a burst of them filled the ring before the
            // merge could move its head.
            if self.space.pool.free_blocks() <= 1 {
                self.collect_until(at, 2)?;
            }
            let tp = self.tp_of(lpns[0]);
            tp_end = tp_end.max(self.write_translation_page(tp, lpns, end)?);
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
    /// flash. `changed` holds the LPNs whose entries changed since the old copy was written
    /// (every other entry is as it was: the view changes only in merges, and a merge writes
    /// every page it changes). Returns the program's end.
    pub(super) fn write_translation_page(
        &mut self,
        tp: usize,
        changed: &[u32],
        not_before: u64,
    ) -> Result<u64, FtlError> {
        let ppn = self.alloc(S_MAP)?;
        let bytes = self.translation_page_bytes(tp, changed)?;
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
            .program_owned(
                Ppn(ppn),
                Content::Bytes(bytes),
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

    /// The bytes of translation page `tp` as the view holds it. With a copy on flash, that
    /// copy's buffer is taken ([`Flash::take_page`]: a tag-only store hands it over, others
    /// copy) and only the `changed` entries and the seq are rewritten ([`patch_tp`], 4 KB
    /// neither copied nor checksummed again). Nothing reads the old copy after this: the GTD
    /// points at the new one, GC drops a translation page the merge has replaced, and a
    /// recording device (crash campaigns) keeps every page's bytes.
    fn translation_page_bytes(
        &mut self,
        tp: usize,
        changed: &[u32],
    ) -> Result<Box<[u8]>, FtlError> {
        let per = entries_per_page(self.flash.geometry().page_bytes);
        let s0 = tp * per;
        if self.gtd[tp] == NO_PPN {
            let s1 = (s0 + per).min(self.logical as usize);
            let pb = self.flash.geometry().page_bytes;
            return Ok(encode_tp(tp as u32, self.map_seq, &self.base[s0..s1], pb));
        }
        let page = self.flash.take_page(Ppn(self.gtd[tp])).map_err(err_flash)?;
        let base = &self.base;
        let changes = changed.iter().map(|&l| (l as usize - s0, base[l as usize]));
        Ok(patch_tp(page, &self.page_crc, self.map_seq, changes))
    }

    pub(super) fn maybe_merge(&mut self, at: u64) -> Result<(), FtlError> {
        if self.tail - self.head > self.cfg.active_ala_pages {
            self.merge(at, false)?;
        }
        Ok(())
    }
}
