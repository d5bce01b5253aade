//! Möbius: the RAM commit of transactions (the DAG commit, §III-C) and chained normal writes
//! and dynamic transactions (the Head List, §III-D).

use super::*;

impl Mobius {
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
    pub(super) fn supersede_pending(&mut self, lpn: u32, by_dynamic: bool) {
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
    pub(super) fn settle_dynamic_supersessions(&mut self, committed: bool) {
        for t in self.txs.iter_mut() {
            let d = std::mem::take(&mut t.superseded_dyn);
            if committed {
                t.superseded.extend(d);
            }
        }
    }

    /// Latest commit instant of pending static txs (WRITE never overlaps them, §III-B).
    pub(super) fn pending_static_end(&self) -> u64 {
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
    pub(super) fn static_durable(&self) -> u64 {
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
    pub(super) fn arrive(&mut self, arrival: u64, close_group: bool) -> Result<u64, FtlError> {
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
    /// together), then the members' data held in RAM (§III-C: "After writing atom inode ...
    /// Möbius will write the data", decision M21), and completes every member's SWRITE.
    pub(super) fn close_group(&mut self, at: u64) -> Result<(), FtlError> {
        let g = self.group.take().expect("open group");
        let live = || g.members.iter().filter(|m| !m.aborted);
        let items: Vec<(u32, u32)> = live().flat_map(|m| m.items.iter().copied()).collect();
        if items.is_empty() {
            // Every member was aborted: their pages go to flash dead.
            self.program_group_data(&g, at)?;
            return Ok(());
        }
        debug_assert!(items.len() <= self.items_per_inode);
        self.close_normal(at)?;
        let first_inode = self.tail;
        let mut ino = self.blank_inode(InodeKind::Static);
        ino.tx_id = g.tx_id;
        ino.uuid = live().next().expect("a live member").uuid.0 as u128;
        ino.items = items.clone();
        ino.part_index = 0;
        ino.part_count = 1;
        let inode_end = self.append_inode(ino, at)?;
        let data_end = self.program_group_data(&g, inode_end)?;
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
        for m in live() {
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

    /// Programs the group's data from `start`, every member in pre-allocation order (a block's
    /// pages are programmed in order); an aborted member's pages are dead at once. Returns the
    /// last end of a live member's page (`start` if none).
    fn program_group_data(&mut self, g: &SmallGroup, start: u64) -> Result<u64, FtlError> {
        let mut data_end = start;
        for m in &g.members {
            let end = self.program_static_pages(g.tx_id, &m.pages, &m.items, start)?;
            if !m.aborted {
                data_end = data_end.max(end);
                continue;
            }
            for &(_, p) in &m.items {
                self.unpin(p, end);
                self.space.validity.invalidate(Ppn(p), end);
            }
        }
        Ok(data_end)
    }

    /// Ordering (§III-G): a tx writing `lpns` commits after every earlier overlapping tx that is
    /// still unsettled. Returns (commit, durable) from the tx's own instants.
    pub(super) fn order_after_earlier(
        &self,
        lpns: &FxHashSet<u32>,
        commit: u64,
        durable: u64,
    ) -> (u64, u64) {
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

    /// A small SWRITE joins the open group (or opens one): its pages pre-allocated now, its data
    /// held in RAM until the group's inode is on flash (written at close).
    pub(super) fn join_group(
        &mut self,
        uuid: TxUuid,
        pages: &[(Lpn, Content)],
        mode: SwriteMode,
        arrival: u64,
        now: u64,
    ) -> Result<TxCompletion, FtlError> {
        let conflicts = self.group.as_ref().is_some_and(|g| {
            let held: usize = g
                .members
                .iter()
                .filter(|m| !m.aborted)
                .map(|m| m.items.len())
                .sum();
            pages.iter().any(|(l, _)| g.lpns.contains(&l.0))
                || held + pages.len() > self.items_per_inode
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
        self.used_uuids.insert(uuid.0);
        let items = self.preallocate(pages, now)?;
        let g = self.group.as_mut().expect("open group");
        g.lpns.extend(items.iter().map(|x| x.0));
        g.members.push(GroupMember {
            uuid,
            mode,
            arrival,
            items,
            pages: pages.to_vec(),
            aborted: false,
        });
        self.grouped_txs += 1;
        Ok(TxCompletion {
            arrival_ns: arrival,
            ack_ns: ftl::ACK_DEFERRED,
            durable_ns: None,
        })
    }

    /// Programs a static tx's data pages at their pre-allocated places; returns the last end.
    pub(super) fn program_static_pages(
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

    /// ABORT of a member of the open group: its data is dropped before anything on flash refers
    /// to it, so the abort needs no flash write of its own (its pre-allocated pages are
    /// programmed dead when the group closes, `program_group_data`).
    pub(super) fn abort_group_member(&mut self, uuid: TxUuid, now: u64) -> Option<u64> {
        let g = self.group.as_mut()?;
        let m = g
            .members
            .iter_mut()
            .find(|m| m.uuid == uuid && !m.aborted)?;
        m.aborted = true;
        let arrival = m.arrival;
        g.lpns = g
            .members
            .iter()
            .filter(|m| !m.aborted)
            .flat_map(|m| m.items.iter().map(|x| x.0))
            .collect();
        self.aborted += 1;
        self.deferred_done.push((
            uuid,
            TxCompletion {
                arrival_ns: arrival,
                ack_ns: now,
                durable_ns: None,
            },
        ));
        Some(now)
    }

    pub(super) fn check_arrival(&mut self, arrival: u64) -> Result<u64, FtlError> {
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
    pub(super) fn preallocate(
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

    pub(super) fn alloc(&mut self, stream: usize) -> Result<u32, FtlError> {
        self.space
            .allocate(stream, &self.flash)
            .map(|p| p.0)
            .ok_or(FtlError::NoSpace)
    }

    /// Programs one chain page at the pre-allocated slot; returns (ppn, end).
    pub(super) fn chain_page(
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

    pub(super) fn open_chain(&mut self, kind: PageKind, uuid: TxUuid) {
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
    pub(super) fn close_normal(&mut self, at: u64) -> Result<u64, FtlError> {
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
}
