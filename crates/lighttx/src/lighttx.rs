//! LightTx (Lu et al., ICCD 2013, as the Möbius paper describes it, §II-C; docs/lighttx.md).
//!
//! - Dynamic write-only interface with concurrent transactions: DWRITE pages of different
//!   uuids interleave freely; SWRITE is offered as HEAD..REAR in one call.
//! - Every page carries its transaction id in the OOB (0 = plain write); a transaction commits
//!   when its commit record (a page naming the id) is on flash, programmed only after all the
//!   transaction's pages are.
//! - Mappings are persisted at commit: the dirty translation pages, GTD pages and the root (zone
//!   record) are rewritten — dozens of pages for a large transaction.
//! - Blocks are in four zones: *free* (erased), *available* (the window's blocks announced for
//!   writing: the root's window list and the blocks being written), *unavailable* (full blocks
//!   of the window) and *checkpointed* (blocks that left the window: all their transactions
//!   resolved and mapped by the tree). The window holds `zone_blocks` blocks; when its available
//!   part is used up it slides — checkpointed blocks leave, free blocks join — and the zone
//!   boundaries are rewritten.
//! - Recovery reads the root, the tree, then scans the unavailable and available zones only: a
//!   page counts if it is a plain write or its transaction's commit record was found.
//!
//! Isolation: LightTx leaves isolation to the host ("flexible"); here a write to an LPN that a
//! running transaction holds — by another transaction or a plain write — is refused with
//! [`FtlError::Conflict`] so that the per-LPN order of commits is the order of sequence numbers.

use atomic_write::engine::{Engine, EngineConfig, Scheme, Tx, WindowPolicy};
use atomic_write::format::CommitRecord;
use flash::{Content, Flash, Geometry, Lpn};
use ftl::{
    BlockDevice, Completion, DesignOptions, DwriteFlag, FtlError, PageOutcome, RecoveryReport,
    SwriteMode, Transactional, TxCapabilities, TxCompletion, TxUuid,
};

pub const PARAMS: [&str; 6] = [
    "over_provisioning",
    "zone_blocks",
    "zone_mb",
    "max_tx_pages",
    "gc_policy",
    "gc_free_blocks",
];

/// Engine configuration from `--param`s: `zone_blocks` or `zone_mb` (default 512 MB, at most a
/// quarter of the device), `over_provisioning` (0.2), `max_tx_pages` (1,024, at most 1/16 of the
/// device), `gc_policy` (greedy), `gc_free_blocks` (`engine::default_gc_free_blocks`).
pub fn config(o: &DesignOptions, g: &Geometry) -> Result<EngineConfig, FtlError> {
    o.check_known("lighttx", &PARAMS)?;
    let max_zone = g.blocks() / 4;
    let zone = match (o.params.get("zone_blocks"), o.params.get("zone_mb")) {
        (Some(_), Some(_)) => {
            return Err(FtlError::InvalidOption(
                "give zone_blocks or zone_mb, not both".into(),
            ))
        }
        (Some(_), None) => o.get("zone_blocks", 0u32)?,
        (None, given) => {
            let mb: f64 = o.get("zone_mb", 512.0)?;
            let blocks = (mb * 1024.0 * 1024.0 / g.block_bytes() as f64).round() as u32;
            if given.is_some() {
                blocks
            } else {
                blocks.min(max_zone)
            }
        }
    };
    if zone < g.chips() || zone > max_zone {
        return Err(FtlError::InvalidOption(format!(
            "zone of {zone} blocks: must be within {}..={max_zone} (one block per chip up to a quarter of the device)",
            g.chips()
        )));
    }
    EngineConfig::with_common_params(
        o,
        g,
        "lighttx",
        Scheme::CommitRecord,
        WindowPolicy::Zone(zone),
    )
}

pub struct LightTx {
    e: Engine,
}

impl LightTx {
    pub fn format(flash: Flash, o: &DesignOptions) -> Result<LightTx, FtlError> {
        let cfg = config(o, flash.geometry())?;
        Ok(LightTx {
            e: Engine::format(flash, cfg)?,
        })
    }

    pub fn recover(flash: Flash, o: &DesignOptions) -> Result<(LightTx, RecoveryReport), FtlError> {
        let cfg = config(o, flash.geometry())?;
        let (e, r) = Engine::recover(flash, cfg)?;
        Ok((LightTx { e }, r))
    }

    pub fn engine(&self) -> &Engine {
        &self.e
    }

    /// Reads as transaction `uuid` sees the device: its own pages, committed data elsewhere.
    pub fn tx_read(
        &mut self,
        uuid: TxUuid,
        start: Lpn,
        count: u32,
        arrival_ns: u64,
        out: &mut Vec<PageOutcome>,
    ) -> Result<Completion, FtlError> {
        let idx = self.e.tx_index(uuid).ok_or(FtlError::UnknownTx(uuid))?;
        self.e.read_view(Some(idx), start, count, arrival_ns, out)
    }

    fn refuse_held(&self, lpn: u32, by: Option<TxUuid>) -> Result<(), FtlError> {
        match self.e.holder(lpn) {
            Some(h) if Some(h) != by => Err(FtlError::Conflict {
                lpn: Lpn(lpn),
                holder: h,
            }),
            _ => Ok(()),
        }
    }

    /// Whether running transaction `idx` (`uuid`) may take one more page, `lpn`: not held by
    /// another transaction, within `max_tx_pages` and within the room the running
    /// transactions leave.
    fn accept_page(&self, idx: usize, uuid: TxUuid, lpn: Lpn) -> Result<(), FtlError> {
        self.refuse_held(lpn.0, Some(uuid))?;
        let max = self.e.cfg.max_tx_pages as u64;
        let n = self.e.txs[idx].pages.len() as u64 + 1;
        if n > max {
            return Err(FtlError::TxTooLarge { pages: n, max });
        }
        self.e.check_room(1)
    }

    fn start_tx(&mut self, uuid: TxUuid, dynamic: bool) -> Result<usize, FtlError> {
        if uuid.0 == 0 {
            return Err(FtlError::ReservedTx(uuid));
        }
        if self.e.committed_uuids.contains(&uuid.0) || self.e.tx_index(uuid).is_some() {
            return Err(FtlError::DuplicateTx(uuid));
        }
        let id = self.e.next_tx;
        self.e.next_tx += 1;
        self.e.txs.push(Tx {
            uuid,
            id,
            first_seq: self.e.next_seq,
            pages: Vec::new(),
            end_ns: 0,
            dynamic,
        });
        Ok(self.e.txs.len() - 1)
    }

    fn tx_page(
        &mut self,
        uuid: TxUuid,
        lpn: Lpn,
        c: &Content,
        arrival: u64,
    ) -> Result<u64, FtlError> {
        self.e.make_room(arrival)?;
        let idx = self.e.tx_index(uuid).ok_or(FtlError::UnknownTx(uuid))?;
        let id = self.e.txs[idx].id;
        let (ppn, _, end) = self.e.program_data(lpn.0, c, 0, id, arrival)?;
        let idx = self.e.tx_index(uuid).expect("still running");
        let tx = &mut self.e.txs[idx];
        tx.pages.push((lpn.0, ppn));
        tx.end_ns = tx.end_ns.max(end);
        Ok(end)
    }

    /// Commit record after every page, then the mapping persisted (translation pages, GTD, root).
    fn commit(&mut self, uuid: TxUuid, arrival: u64) -> Result<u64, FtlError> {
        self.e.make_room(arrival)?;
        let idx = self.e.tx_index(uuid).ok_or(FtlError::UnknownTx(uuid))?;
        let tx = &self.e.txs[idx];
        let rec = CommitRecord {
            tx: tx.id,
            pages: tx.pages.len() as u32,
            uuid: uuid.0,
        };
        let nb = arrival.max(tx.end_ns);
        let end = self.e.program_commit(rec, nb)?;
        // GC during the record's allocation may have moved pages: the record waited for the
        // pages as they were; copies keep the same content and sequence number.
        let idx = self.e.tx_index(uuid).expect("still running");
        debug_assert!(self.e.txs[idx].end_ns <= end);
        self.e.commit_apply(idx, end);
        self.e.flush_root(end, false)?;
        Ok(end)
    }

    fn abort_quietly(&mut self, uuid: TxUuid, now: u64) {
        if let Some(k) = self.e.tx_index(uuid) {
            self.e.abort_drop(k, now);
        }
    }
}

impl BlockDevice for LightTx {
    atomic_write::engine_accessors!();
    fn design(&self) -> &'static str {
        "lighttx"
    }
    fn write(
        &mut self,
        start: Lpn,
        pages: &[Content],
        arrival_ns: u64,
    ) -> Result<Completion, FtlError> {
        self.e.check_arrival(arrival_ns)?;
        ftl::check_range(start, pages.len() as u64, self.e.logical_pages())?;
        for i in 0..pages.len() as u32 {
            self.refuse_held(start.0 + i, None)?;
        }
        self.e.write_plain(start, pages, arrival_ns)
    }
    fn read(
        &mut self,
        start: Lpn,
        count: u32,
        arrival_ns: u64,
        out: &mut Vec<PageOutcome>,
    ) -> Result<Completion, FtlError> {
        self.e.read_view(None, start, count, arrival_ns, out)
    }
    fn flush(&mut self, arrival_ns: u64) -> Result<Completion, FtlError> {
        self.e.flush_request(arrival_ns)
    }
    fn trim(&mut self, start: Lpn, count: u32, arrival_ns: u64) -> Result<Completion, FtlError> {
        self.e.check_arrival(arrival_ns)?;
        ftl::check_range(start, count as u64, self.e.logical_pages())?;
        for i in 0..count {
            self.refuse_held(start.0 + i, None)?;
        }
        Ok(self.e.trim_pages(start, count, arrival_ns))
    }

    fn metrics(&self) -> Vec<(String, f64)> {
        let mut m = self.e.metrics();
        m.push(("running_tx".into(), self.e.txs.len() as f64));
        m
    }
    fn transactional(&mut self) -> Option<&mut dyn Transactional> {
        Some(self)
    }
}

impl Transactional for LightTx {
    fn capabilities(&self) -> TxCapabilities {
        self.e.capabilities(true)
    }

    /// HEAD..REAR in one call; `Async` is served as `Sync`.
    fn swrite(
        &mut self,
        uuid: TxUuid,
        pages: &[(Lpn, Content)],
        _mode: SwriteMode,
        arrival_ns: u64,
    ) -> Result<TxCompletion, FtlError> {
        self.e.check_arrival(arrival_ns)?;
        self.e
            .check_static(pages, |l| self.refuse_held(l.0, Some(uuid)))?;
        self.start_tx(uuid, false)?;
        let run = |me: &mut Self| -> Result<u64, FtlError> {
            for (lpn, c) in pages {
                me.tx_page(uuid, *lpn, c, arrival_ns)?;
            }
            me.commit(uuid, arrival_ns)
        };
        match run(self) {
            Ok(end) => Ok(TxCompletion {
                arrival_ns,
                ack_ns: end,
                durable_ns: Some(end),
            }),
            Err(err) => {
                self.abort_quietly(uuid, arrival_ns);
                Err(err)
            }
        }
    }

    fn dwrite(
        &mut self,
        uuid: TxUuid,
        lpn: Lpn,
        content: &Content,
        flag: DwriteFlag,
        arrival_ns: u64,
    ) -> Result<TxCompletion, FtlError> {
        self.e.check_arrival(arrival_ns)?;
        self.e.check_lpn(lpn)?;
        if uuid.0 == 0 {
            return Err(FtlError::ReservedTx(uuid));
        }
        match flag {
            DwriteFlag::Head | DwriteFlag::Single => {
                if self.e.committed_uuids.contains(&uuid.0) || self.e.tx_index(uuid).is_some() {
                    return Err(FtlError::DuplicateTx(uuid));
                }
                self.refuse_held(lpn.0, Some(uuid))?;
                self.e.check_room(1)?;
                self.start_tx(uuid, true)?;
            }
            DwriteFlag::Body | DwriteFlag::Rear => {
                let idx = self.e.tx_index(uuid).ok_or(FtlError::UnknownTx(uuid))?;
                // A refused page aborts its transaction (as on TxFlash): the host takes the
                // transaction as ended, and the pages and room it holds return to the others.
                if let Err(e) = self.accept_page(idx, uuid, lpn) {
                    self.abort_quietly(uuid, arrival_ns);
                    return Err(e);
                }
            }
        }
        let close = matches!(flag, DwriteFlag::Rear | DwriteFlag::Single);
        let r = self
            .tx_page(uuid, lpn, content, arrival_ns)
            .and_then(|end| {
                if close {
                    self.commit(uuid, arrival_ns)
                } else {
                    Ok(end)
                }
            });
        match r {
            Ok(end) => Ok(TxCompletion {
                arrival_ns,
                ack_ns: end,
                durable_ns: close.then_some(end),
            }),
            Err(err) => {
                if flag == DwriteFlag::Single {
                    self.abort_quietly(uuid, arrival_ns);
                }
                Err(err)
            }
        }
    }

    /// Drops the transaction in RAM: without a commit record its pages never count.
    /// `TxUuid(0)` aborts the running dynamic transaction when exactly one is open.
    fn abort(&mut self, uuid: TxUuid, arrival_ns: u64) -> Result<Completion, FtlError> {
        self.e.check_arrival(arrival_ns)?;
        let uuid = if uuid.0 == 0 {
            let mut dynamic = self.e.txs.iter().filter(|t| t.dynamic);
            match (dynamic.next(), dynamic.next()) {
                (None, _) => return Err(FtlError::NoDynamicTx),
                (Some(t), None) => t.uuid,
                (Some(_), Some(_)) => return Err(FtlError::UnknownTx(uuid)),
            }
        } else {
            uuid
        };
        let Some(idx) = self.e.tx_index(uuid) else {
            return Err(if self.e.committed_uuids.contains(&uuid.0) {
                FtlError::AlreadyCommitted(uuid)
            } else {
                FtlError::UnknownTx(uuid)
            });
        };
        self.e.abort_drop(idx, arrival_ns);
        Ok(Completion {
            arrival_ns,
            ack_ns: arrival_ns,
        })
    }

    fn sread(
        &mut self,
        start: Lpn,
        count: u32,
        arrival_ns: u64,
        out: &mut Vec<PageOutcome>,
    ) -> Result<Completion, FtlError> {
        self.e.read_view(None, start, count, arrival_ns, out)
    }
}
