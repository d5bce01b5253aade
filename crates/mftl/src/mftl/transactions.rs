//! Möbius: static transactions (SWRITE, §III-C; small ones merged, §IV-E), dynamic ones
//! (DWRITE, §III-D) and ABORT.

use super::*;

impl Mobius {
    // ---------------------------------------------------------------- static txs

    pub(super) fn check_uuid(&self, uuid: TxUuid) -> Result<(), FtlError> {
        if uuid.0 == 0 {
            return Err(FtlError::ReservedTx(uuid));
        }
        if self.used_uuids.contains(uuid.0) {
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

    pub(super) fn do_swrite(
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
        self.used_uuids.insert(uuid.0);
        let tx_id = self.next_tx_id;
        self.next_tx_id += 1;
        // Pre-allocate every page (spread over chips by the allocator, §III-C).
        let items = self.preallocate(pages, now)?;
        // Inode part(s) first, then the data pages (in parallel over the chips) once the inode
        // is on flash: §III-C "After writing atom inode ..., Möbius will write the data to the
        // assigned physical addresses"; an async SWRITE returns then, "the left of the
        // transaction is still in RAM" (§IV-E). Decision M21.
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
        let data_end = self.program_static_pages(tx_id, pages, &items, inode_end)?;
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

    pub(super) fn do_abort(&mut self, uuid: TxUuid, arrival: u64) -> Result<Completion, FtlError> {
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
            return Err(if self.used_uuids.contains(uuid.0) {
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
        // A persistent abort mark (in a FlagOnly inode), acknowledged when on flash. Appending
        // may merge and trim the tx table, so the tx is found again by its uuid each time.
        let mut end = now;
        while self.txs.iter().any(|t| t.uuid == uuid && !t.resolved) {
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
    pub(super) fn recompute_commit_times(&mut self) {
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

    pub(super) fn do_dwrite(
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
            self.used_uuids.insert(uuid.0);
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
    pub(super) fn check_dwrite(&self, uuid: TxUuid, flag: DwriteFlag) -> Result<(), FtlError> {
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
                if self.used_uuids.contains(uuid.0) {
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
    pub(super) fn commit_dynamic(&mut self, uuid: TxUuid, now: u64) -> Result<u64, FtlError> {
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

    pub(super) fn abort_dynamic(&mut self, now: u64, arrival: u64) -> Result<Completion, FtlError> {
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
}
