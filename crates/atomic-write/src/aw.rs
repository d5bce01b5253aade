//! Atomic-Write (Ouyang et al., HPCA 2011, as the Möbius paper describes it, §II-C; docs/atomic-write.md).
//!
//! A log-structured FTL: every host page goes to the log head with a one-bit commit flag in its
//! OOB. Pages of a transaction carry 0 except the last, which carries 1 and is programmed only
//! after all the others are on flash; plain writes are one-page transactions (bit 1). At each
//! commit the dirty mappings are persisted (translation pages, GTD pages, root — the extra writes
//! the Möbius paper counts) together with a fresh, small reservation of blocks; recovery scans the
//! log tail since that root and drops trailing pages not closed by a bit-1 page.
//!
//! At most one transaction runs device-wide. A static transaction (`swrite`) is written whole in
//! one call, so static transactions are serialised in arrival order. While a dynamic transaction
//! is open, any other write — a second HEAD, an SWRITE, a plain write or a trim — is refused with
//! [`FtlError::DynamicTxRunning`]: an interleaved page would sit inside the open run of bit-0 pages
//! and the single bit could no longer tell whose run a bit-1 page closes. Reads inside the
//! transaction ([`AtomicWrite::tx_read`]) see the transaction's own pages; every other read sees
//! committed data.

use crate::engine::{Engine, EngineConfig, Scheme, Tx, WindowPolicy};
use flash::{Content, Flash, Geometry, Lpn};
use ftl::{
    BlockDevice, Completion, DesignOptions, DwriteFlag, FtlError, PageOutcome, RecoveryReport,
    SwriteMode, Transactional, TxCapabilities, TxCompletion, TxUuid,
};

pub const PARAMS: [&str; 5] = [
    "over_provisioning",
    "reserve_blocks",
    "max_tx_pages",
    "gc_policy",
    "gc_free_blocks",
];

/// Engine configuration from `--param`s: `over_provisioning` (0.2), `reserve_blocks` per chip
/// announced in each root (2), `max_tx_pages` (1,024 pages = 4 MB, at most 1/16 of the device),
/// `gc_policy` (greedy), `gc_free_blocks` (`engine::default_gc_free_blocks`).
pub fn config(o: &DesignOptions, g: &Geometry) -> Result<EngineConfig, FtlError> {
    o.check_known("atomic-write", &PARAMS)?;
    let reserve: u32 = o.get("reserve_blocks", 2)?;
    if reserve == 0 || reserve > g.blocks_per_chip / 4 {
        return Err(FtlError::InvalidOption(format!(
            "reserve_blocks must be within 1..={}",
            g.blocks_per_chip / 4
        )));
    }
    EngineConfig::with_common_params(
        o,
        g,
        "atomic-write",
        Scheme::CommitBit,
        WindowPolicy::PerChip(reserve),
    )
}

pub struct AtomicWrite {
    e: Engine,
}

impl AtomicWrite {
    pub fn format(flash: Flash, o: &DesignOptions) -> Result<AtomicWrite, FtlError> {
        let cfg = config(o, flash.geometry())?;
        Ok(AtomicWrite {
            e: Engine::format(flash, cfg)?,
        })
    }

    pub fn recover(
        flash: Flash,
        o: &DesignOptions,
    ) -> Result<(AtomicWrite, RecoveryReport), FtlError> {
        let cfg = config(o, flash.geometry())?;
        let (e, r) = Engine::recover(flash, cfg)?;
        Ok((AtomicWrite { e }, r))
    }

    pub fn engine(&self) -> &Engine {
        &self.e
    }

    fn running_dynamic(&self) -> Option<TxUuid> {
        self.e.txs.iter().find(|t| t.dynamic).map(|t| t.uuid)
    }

    fn refuse_if_dynamic(&self) -> Result<(), FtlError> {
        match self.running_dynamic() {
            Some(u) => Err(FtlError::DynamicTxRunning(u)),
            None => Ok(()),
        }
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

    fn start_tx(&mut self, uuid: TxUuid, dynamic: bool) -> Result<usize, FtlError> {
        if uuid.0 == 0 {
            return Err(FtlError::ReservedTx(uuid));
        }
        if self.e.committed_uuids.contains(&uuid.0) {
            return Err(FtlError::DuplicateTx(uuid));
        }
        if let Some(t) = self.e.txs.first() {
            return Err(if t.uuid == uuid {
                FtlError::DuplicateTx(uuid)
            } else {
                FtlError::DynamicTxRunning(t.uuid)
            });
        }
        self.e.txs.push(Tx {
            uuid,
            id: 0,
            first_seq: self.e.next_seq,
            pages: Vec::new(),
            end_ns: 0,
            dynamic,
        });
        Ok(self.e.txs.len() - 1)
    }

    /// Writes one page of the running transaction; `close` writes it with bit 1 after every
    /// earlier page is on flash and commits. Returns the page's end.
    fn tx_page(
        &mut self,
        idx: usize,
        lpn: Lpn,
        content: &Content,
        close: bool,
        arrival: u64,
    ) -> Result<u64, FtlError> {
        self.e.make_room(arrival)?;
        let nb = if close {
            arrival.max(self.e.txs[idx].end_ns)
        } else {
            arrival
        };
        let (ppn, _, end) = self
            .e
            .program_data(lpn.0, content, u8::from(close), 0, nb)?;
        let tx = &mut self.e.txs[idx];
        tx.pages.push((lpn.0, ppn));
        tx.end_ns = tx.end_ns.max(end);
        if close {
            self.e.commit_apply(idx, end);
            // Mapping persisted at commit (in the background: the bit-1 page already commits).
            self.e.flush_root(end, false)?;
        }
        Ok(end)
    }
}

impl BlockDevice for AtomicWrite {
    crate::engine_accessors!();
    fn design(&self) -> &'static str {
        "atomic-write"
    }
    fn write(
        &mut self,
        start: Lpn,
        pages: &[Content],
        arrival_ns: u64,
    ) -> Result<Completion, FtlError> {
        self.e.check_arrival(arrival_ns)?;
        ftl::check_range(start, pages.len() as u64, self.e.logical_pages())?;
        self.refuse_if_dynamic()?;
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
        self.refuse_if_dynamic()?;
        Ok(self.e.trim_pages(start, count, arrival_ns))
    }

    fn metrics(&self) -> Vec<(String, f64)> {
        self.e.metrics()
    }
    fn transactional(&mut self) -> Option<&mut dyn Transactional> {
        Some(self)
    }
}

impl Transactional for AtomicWrite {
    fn capabilities(&self) -> TxCapabilities {
        self.e.capabilities(false)
    }

    /// A static transaction; `Async` is served as `Sync` (Atomic-Write has no asynchronous mode).
    fn swrite(
        &mut self,
        uuid: TxUuid,
        pages: &[(Lpn, Content)],
        _mode: SwriteMode,
        arrival_ns: u64,
    ) -> Result<TxCompletion, FtlError> {
        self.e.check_arrival(arrival_ns)?;
        self.e.check_static(pages, |_| Ok(()))?;
        let idx = self.start_tx(uuid, false)?;
        let mut end = arrival_ns;
        for (i, (lpn, c)) in pages.iter().enumerate() {
            let close = i + 1 == pages.len();
            match self.tx_page(idx, *lpn, c, close, arrival_ns) {
                Ok(t) => end = end.max(t),
                Err(err) => {
                    if let Some(k) = self.e.tx_index(uuid) {
                        self.e.abort_drop(k, arrival_ns);
                    }
                    return Err(err);
                }
            }
        }
        Ok(TxCompletion {
            arrival_ns,
            ack_ns: end,
            durable_ns: Some(end),
        })
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
        let idx = match flag {
            DwriteFlag::Head | DwriteFlag::Single => self.start_tx(uuid, true)?,
            DwriteFlag::Body | DwriteFlag::Rear => {
                self.e.tx_index(uuid).ok_or(FtlError::UnknownTx(uuid))?
            }
        };
        let max = self.e.cfg.max_tx_pages as u64;
        if self.e.txs[idx].pages.len() as u64 + 1 > max {
            return Err(FtlError::TxTooLarge {
                pages: self.e.txs[idx].pages.len() as u64 + 1,
                max,
            });
        }
        let close = matches!(flag, DwriteFlag::Rear | DwriteFlag::Single);
        let end = match self.tx_page(idx, lpn, content, close, arrival_ns) {
            Ok(t) => t,
            Err(err) => {
                if flag == DwriteFlag::Single {
                    if let Some(k) = self.e.tx_index(uuid) {
                        self.e.abort_drop(k, arrival_ns);
                    }
                }
                return Err(err);
            }
        };
        Ok(TxCompletion {
            arrival_ns,
            ack_ns: end,
            durable_ns: close.then_some(end),
        })
    }

    /// Drops the running transaction and writes a root whose tail starts after its pages, so
    /// that no later bit-1 page can ever be read as closing them; later pages wait for it.
    fn abort(&mut self, uuid: TxUuid, arrival_ns: u64) -> Result<Completion, FtlError> {
        self.e.check_arrival(arrival_ns)?;
        let uuid = if uuid.0 == 0 {
            self.running_dynamic().ok_or(FtlError::NoDynamicTx)?
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
        let end = self.e.flush_root(arrival_ns, false)?;
        self.e.barrier_ns = self.e.barrier_ns.max(end);
        Ok(Completion {
            arrival_ns,
            ack_ns: end,
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
