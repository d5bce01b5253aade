//! Möbius: garbage collection (§IV-D): victims, copies, and what a copy must keep (pending
//! transactions, pins; docs/mobius.md, "Mapping, merge, GC").

use super::*;

impl Mobius {
    // ---------------------------------------------------------------- GC

    pub(super) fn gc_eligible(&self, b: BlockId) -> bool {
        !self.layout.is_reserved(b) && self.pins[b.0 as usize] == 0
    }

    pub(crate) fn gc_if_needed(&mut self, at: u64) -> Result<(), FtlError> {
        let pending_set = self.collect_until(at, self.cfg.gc_free_blocks)?;
        self.level_wear(at, pending_set)
    }

    /// Collects victims until `target` blocks are free. Returns the pending LPNs if it gathered
    /// them.
    pub(super) fn collect_until(
        &mut self,
        at: u64,
        target: u32,
    ) -> Result<Option<FxHashSet<u32>>, FtlError> {
        if !self.validity_ready {
            self.rebuild_validity(at)?;
        }
        let mut at = at;
        // The LPNs pending static txs rewrite, gathered only when a victim is to be chosen (most
        // calls find enough free blocks and return).
        let mut pending_set: Option<FxHashSet<u32>> = None;
        let mut rounds = 0;
        while self.space.pool.free_blocks() < target {
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
                None => return Ok(pending_set),
            }
        }
        Ok(pending_set)
    }

    /// Moves a cold block's pages (wear levelling) when the GC policy names one.
    fn level_wear(
        &mut self,
        at: u64,
        mut pending_set: Option<FxHashSet<u32>>,
    ) -> Result<(), FtlError> {
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
    pub(super) fn pick_gc_victim(&self, pending: &FxHashSet<u32>) -> Option<BlockId> {
        self.space.pick_victim(&self.flash, |b| {
            self.gc_eligible(b) && !self.holds_pending(b, pending)
        })
    }

    /// Whether block `b` holds a live data page of an LPN in `pending`.
    pub(super) fn holds_pending(&self, b: BlockId, pending: &FxHashSet<u32>) -> bool {
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
            // A page lost to the media moves as a lost copy (docs/reliability.md).
            let rebuild = |oob: &mut [u8]| -> Result<(), FtlError> {
                oob.copy_from_slice(&copy_record(owner));
                Ok(())
            };
            let read = (rd.end_ns, cause);
            let ready =
                ftl::media::record_of_read(&mut self.flash, from, &st, &mut oob, read, rebuild)?;
            let to = self
                .space
                .allocate(S_GC, &self.flash)
                .ok_or(FtlError::NoSpace)?;
            let span = ftl::media::copy_read(&mut self.flash, (from, st), to, &oob, ready, cause)?;
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

    pub(super) fn erase_victim(
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
    pub(super) fn log_relocs(
        &mut self,
        relocs: &[(u32, u32, u32)],
        not_before: u64,
    ) -> Result<u64, FtlError> {
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

    pub(super) fn settle_deferred_inner(&mut self, at: u64) -> Result<(), FtlError> {
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
}

/// The record of a GC copy of live page `owner` (an LPN, or a translation page's number with
/// [`TP_OWNER`]) rebuilt from the mapping, for a page lost whole to the media: neither its data
/// nor its spare area decodes ([`ftl::media::record_of_read`]). Möbius's recovery never reads a
/// GC copy's record: it maps a moved data page from the GC relocation inode logged before the
/// victim is erased (§IV-D), a moved translation page from the GTD of the GM record written
/// before it (§III-F), and its static-transaction check and Head List walk read only the
/// pages their inode or chain names, which a copy never is. So the copy names its page (kind
/// and LPN or translation page number) and no transaction (`tx_id` 0, never a transaction's:
/// ids start at 1).
fn copy_record(owner: u32) -> [u8; OOB_BYTES as usize] {
    let (kind, lpn) = if owner & TP_OWNER != 0 {
        (PageKind::Translation, owner & !TP_OWNER)
    } else {
        (PageKind::Normal, owner)
    };
    PageOob {
        tx_id: 0,
        lpn,
        next: NO_PPN,
        seq: 0,
        kind,
    }
    .encode()
}
