//! Möbius: the Atom Log Area (§III-C, §III-F, §IV-C): atom inodes appended to a serialized
//! log, their pages and commit flags (docs/mobius.md, "On-flash formats").

use super::*;

impl Mobius {
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
    pub(super) fn ala_window_end(&self) -> u64 {
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
    pub(super) fn erase_slot(&mut self, slot: usize, not_before: u64) -> Result<u64, FtlError> {
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
    pub(super) fn prepare_slot(&mut self, at: u64) -> Result<(), FtlError> {
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
                    self.merge_after_pending(at)?;
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
        // It stalls for pending txs first, as a full ring does: merged around them, the head
        // could stop short of the next slot and the ring fill.
        let (next, _) = self.ala_ppn(self.tail + ppb);
        if !self.merging && matches!(self.slots[next], SlotState::InUse(b) if b + ppb > self.head) {
            self.merge_after_pending(at)?;
        }
        Ok(())
    }

    /// Stalls until every pending static tx has committed, then merges (decision M14). A merge
    /// must not install txs, so one merged around pending txs keeps the head at the first of
    /// their inodes (decision M15) and, when GC runs inside it, defers every victim holding a
    /// page they rewrite without freeing it. With large txs on a nearly full device those
    /// victims are most blocks: the free blocks ran out inside the merge, or the head stayed
    /// put until the ring was full and the merge's own relocation inode had nowhere to go
    /// (docs/mobius.md, "A merge waits for pending transactions").
    pub(super) fn merge_after_pending(&mut self, at: u64) -> Result<(), FtlError> {
        let w = self.pending_static_end().max(at);
        self.advance(w)?;
        self.merge(w, true)
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
    pub(super) fn choose_flags(&self, start: u64, room: usize) -> (Vec<usize>, usize, u64) {
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

    pub(super) fn program_inode(
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
    pub(super) fn write_inode_at_tail(
        &mut self,
        mut ino: Inode,
        nb: u64,
    ) -> Result<flash::Span, FtlError> {
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
            .program_owned(ppn, Content::Bytes(bytes), &oob, nb, OpCause::TxMeta)
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
    pub(super) fn trim_txs(&mut self) {
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
}
