//! Möbius behind the block-device and transactional interfaces (Table I): each request's
//! checks, then the section that serves it.

use super::*;

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
            self.open_normal_chain(now)?;
            match self.gc_if_needed(now) {
                // The open chain's pages keep their old versions live until it closes: on a
                // full device (a long write at the lowest over-provisioning) GC may find no
                // victim until it does. Close it and collect again.
                Err(FtlError::NoSpace) if !written.is_empty() => {
                    self.close_written(&mut written, now, &mut ack)?;
                    self.open_normal_chain(now)?;
                    self.gc_if_needed(now)?;
                }
                other => other?,
            }
            let lpn = start.0 + i as u32;
            self.supersede_pending(lpn, false);
            let (ppn, _) = self.chain_page(lpn, c, false, nb)?;
            written.push((lpn, ppn));
            if self.chain.as_ref().unwrap().pages.len() >= self.items_per_inode {
                self.close_written(&mut written, now, &mut ack)?;
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
    fn check_invariants(&self) -> Result<(), ftl::InvariantViolation> {
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
                + vec_bytes(&self.tp_evicted)
                + self.tp_lru.memory()
                + vec_bytes(&self.gtd),
        ));
        // Resident Area: a hash table slot (key, value, control byte) per slot of capacity.
        m.push((
            "mobius.resident_area".into(),
            self.resident.capacity() as u64 * 9,
        ));
        m.push(("mobius.used_uuids".into(), self.used_uuids.memory()));
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

impl Mobius {
    /// Opens a normal chain if none is open (announcing normal writes first, §III-D).
    fn open_normal_chain(&mut self, now: u64) -> Result<(), FtlError> {
        if self.chain.is_none() {
            if !self.announce_written {
                let ino = self.blank_inode(InodeKind::FlagOnly);
                self.append_inode(ino, now)?;
            }
            self.open_chain(PageKind::Normal, TxUuid(0));
        }
        Ok(())
    }

    /// Closes the open normal chain: its pages are mapped (their old versions invalidated)
    /// once the chain up to them and the announce are on flash, which `ack` waits for.
    fn close_written(
        &mut self,
        written: &mut Vec<(u32, u32)>,
        now: u64,
        ack: &mut u64,
    ) -> Result<(), FtlError> {
        let chain_end = self.chain.as_ref().expect("an open chain").prefix_end;
        *ack = (*ack).max(chain_end).max(self.announce_end);
        for &(l, p) in written.iter() {
            self.remap(l, p, now, *ack)?;
        }
        written.clear();
        self.close_normal(now).map(|_| ())
    }
}
