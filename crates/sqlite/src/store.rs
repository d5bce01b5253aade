//! [`Store`]: SQLite's three files on one emulated device, and the mapping of file operations
//! to device requests. The VFS (`vfs.rs`) is only glue around this type.
//!
//! Host model: one SQLite connection issues one device request at a time; each request arrives
//! at the simulated instant the previous one was acknowledged, so the device clock is the
//! transaction's simulated latency. Writes go to a per-file write-back buffer, as they would to
//! an operating system's page cache; a sync (or a full buffer) submits the dirty pages as one
//! write request per run of consecutive pages. What a sync then does depends on the [`Mode`].

use crate::error::SqlError;
use crate::layout::{Directory, FileKind};
use flash::{Content, Lpn};
use ftl::{BlockDevice, DwriteFlag, FtlError, PageOutcome, Promise, SwriteMode, TxUuid};
use host::{Host, HostError};
use std::collections::BTreeMap;

/// How the database reaches the device: chosen per connection (see docs/sqlite.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum Mode {
    /// SQLite's batch atomic write: each commit is one device transaction, no journal.
    Batch,
    /// Rollback journal (`journal_mode=DELETE`); every sync is a device FLUSH.
    Journal,
    /// Write-ahead log (`journal_mode=WAL`); every sync is a device FLUSH.
    Wal,
    /// Rollback journal on a device that keeps request order (OPTR): syncs that only order
    /// writes become no-ops; the sync that makes a commit durable (the journal's deletion)
    /// flushes. OPTR §4's SQLite with `ffence`.
    Ordered,
    /// Rollback journal with every sync a no-op: consistency is left to the device's order,
    /// durability is eventual (OPTR Fig. 9's fastest mode).
    NoBarrier,
}

impl Mode {
    pub const ALL: [Mode; 5] = [
        Mode::Batch,
        Mode::Journal,
        Mode::Wal,
        Mode::Ordered,
        Mode::NoBarrier,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Mode::Batch => "batch",
            Mode::Journal => "journal",
            Mode::Wal => "wal",
            Mode::Ordered => "ordered",
            Mode::NoBarrier => "nobarrier",
        }
    }

    pub fn parse(s: &str) -> Result<Mode, SqlError> {
        Mode::ALL
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or_else(|| SqlError::UnknownMode(s.to_string()))
    }

    /// The `journal_mode` SQLite runs in.
    pub fn journal_mode(self) -> &'static str {
        match self {
            Mode::Wal => "WAL",
            _ => "DELETE",
        }
    }
}

/// How a `batch` commit reaches a design with transactions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum TxKind {
    /// One static transaction (SWRITE) with the whole write set at COMMIT_ATOMIC_WRITE.
    Static,
    /// A dynamic transaction (DWRITE chain) streamed as SQLite hands over each page;
    /// ROLLBACK_ATOMIC_WRITE becomes ABORT.
    Dynamic,
    /// NEGATIVE CONTROL ONLY: claims batch atomic writes but sends the batch as plain writes,
    /// one request per run of pages, with no transaction. A crash campaign must catch it.
    PlainWrites,
}

impl TxKind {
    /// The name `--tx` takes.
    pub fn name(self) -> &'static str {
        match self {
            TxKind::Static => "static",
            TxKind::Dynamic => "dynamic",
            TxKind::PlainWrites => "plain",
        }
    }

    pub fn parse(s: &str) -> Result<TxKind, SqlError> {
        [TxKind::Static, TxKind::Dynamic, TxKind::PlainWrites]
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| SqlError::UnknownTxKind(s.to_string()))
    }
}

/// Counters of what the database did to the device.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct StoreStats {
    pub write_requests: u64,
    pub host_pages_written: u64,
    pub read_requests: u64,
    pub host_pages_read: u64,
    pub flushes: u64,
    /// Flushes the VFS added so a file's new size never reaches flash before its data, on a
    /// device that only promises what a flush covers (included in `flushes`).
    pub ordering_flushes: u64,
    /// Syncs SQLite asked for that the mode turned into no flush.
    pub syncs_skipped: u64,
    pub directory_writes: u64,
    pub tx_committed: u64,
    pub tx_pages: u64,
    pub dwrites: u64,
    pub sreads: u64,
    pub aborts: u64,
    /// Batch commits the design refused (too big) or failed: SQLite fell back to its rollback
    /// journal.
    pub journal_fallbacks: u64,
    /// Batch commits SQLite rolled back itself.
    pub batch_rollbacks: u64,
}

#[derive(Default)]
struct FileState {
    size: u64,
    exists: bool,
    /// Dirty pages not yet submitted, by page index in the file.
    dirty: BTreeMap<u32, Box<[u8]>>,
    /// Deleted by a directory write no flush has covered yet, on a device that only promises
    /// what a flush covers ([`Store::reuse_after_deletion`]).
    deletion_unflushed: bool,
}

/// A batch atomic write in progress on the database file.
struct Batch {
    uuid: TxUuid,
    size_before: u64,
    /// Dynamic: pages already sent as HEAD/BODY.
    sent: u32,
    /// Dynamic: the newest page, held back to be the REAR.
    held: Option<(Lpn, Box<[u8]>)>,
    /// Dynamic: the device refused (or failed) one of its pages, so SQLite rolls the batch
    /// back and commits it through its journal.
    refused: bool,
    /// The journal fallback is counted already (a failed COMMIT, which SQLite follows with a
    /// ROLLBACK of the batch).
    fallback_counted: bool,
}

/// Dirty pages a file may hold before they are written back without a sync (1 MiB of 4 KiB
/// pages), like an operating system's dirty-page limit.
const DIRTY_LIMIT_PAGES: usize = 256;

/// Transaction ids leased per directory write.
const UUID_LEASE: u64 = 1 << 16;

pub struct Store {
    /// The design behind the one host layer (its clock, fail-stop, errors and statistics).
    host: Host,
    mode: Mode,
    tx_kind: TxKind,
    page_bytes: usize,
    /// What the directory page on the device says.
    dir: Directory,
    files: [FileState; 3],
    batch: Option<Batch>,
    /// `PRAGMA synchronous` ≥ FULL: batch commits are synchronous SWRITEs.
    synchronous_full: bool,
    synchronous: String,
    now_ns: u64,
    next_uuid: u64,
    /// Writes submitted since the last flush.
    unflushed: bool,
    /// Latest durability instant of an asynchronous SWRITE.
    durable_ns: u64,
    /// After [`Store::cut_power`]: nothing more reaches the device.
    dead: bool,
    stats: StoreStats,
}

/// The device's transactional capabilities a mode needs.
fn check_mode(dev: &mut dyn BlockDevice, mode: Mode, tx_kind: TxKind) -> Result<(), SqlError> {
    let design = dev.design();
    let unsupported = |needs| SqlError::ModeUnsupported {
        mode: mode.name(),
        design,
        needs,
    };
    match mode {
        Mode::Batch if tx_kind == TxKind::PlainWrites => {}
        Mode::Batch => {
            let caps = dev
                .transactional()
                .map(|t| t.capabilities())
                .ok_or_else(|| unsupported("device transactions"))?;
            if !caps.static_tx {
                return Err(unsupported("static transactions"));
            }
            if tx_kind == TxKind::Dynamic && !(caps.dynamic_tx && caps.abort) {
                return Err(unsupported("dynamic transactions with abort"));
            }
        }
        Mode::Ordered if dev.promise() != Promise::Ordered => {
            return Err(unsupported("a device that keeps request order (OPTR)"));
        }
        _ => {}
    }
    Ok(())
}

fn lpn_of(dir: &Directory, kind: FileKind, page: u32) -> Lpn {
    Lpn(dir.file(kind).start + page)
}

impl Store {
    /// Writes a fresh directory (an empty database) on `dev` and makes it durable.
    pub fn format(
        mut dev: Box<dyn BlockDevice>,
        mode: Mode,
        tx_kind: TxKind,
    ) -> Result<Store, SqlError> {
        check_mode(dev.as_mut(), mode, tx_kind)?;
        let page_bytes = dev.flash().geometry().page_bytes;
        let dir = Directory::new(dev.logical_pages(), page_bytes)?;
        let start_ns = dev.flash().idle_ns();
        let mut store = Store::with(Host::new(dev, start_ns), mode, tx_kind, dir);
        store.lease_uuids()?;
        Ok(store)
    }

    /// Opens the database a device holds (after a power cut: after the design's recovery).
    pub fn open(
        mut dev: Box<dyn BlockDevice>,
        mode: Mode,
        tx_kind: TxKind,
    ) -> Result<Store, SqlError> {
        check_mode(dev.as_mut(), mode, tx_kind)?;
        let page_bytes = dev.flash().geometry().page_bytes;
        let logical_pages = dev.logical_pages();
        let start_ns = dev.flash().idle_ns();
        let mut host = Host::new(dev, start_ns);
        let mut out = Vec::new();
        let ack = host.read_pages(Lpn(0), 1, start_ns, &mut out)?;
        let page = match &out[0] {
            PageOutcome::Data(c) => c.to_page_bytes(page_bytes as usize),
            PageOutcome::Unwritten => return Err(SqlError::NotFormatted),
            PageOutcome::Uncorrectable => {
                crate::evidence::uncorrectable(0);
                return Err(SqlError::Uncorrectable(0));
            }
        };
        let dir =
            Directory::decode(&page, logical_pages, page_bytes)?.ok_or(SqlError::NotFormatted)?;
        let mut store = Store::with(host, mode, tx_kind, dir);
        store.now_ns = ack.ack_ns;
        store.lease_uuids()?;
        Ok(store)
    }

    fn with(host: Host, mode: Mode, tx_kind: TxKind, dir: Directory) -> Store {
        let files = std::array::from_fn(|i| FileState {
            size: dir.files[i].size,
            exists: dir.files[i].exists,
            dirty: BTreeMap::new(),
            deletion_unflushed: false,
        });
        Store {
            now_ns: host.clock_ns(),
            page_bytes: dir.page_bytes as usize,
            host,
            mode,
            tx_kind,
            dir,
            files,
            batch: None,
            synchronous_full: true,
            synchronous: "full".into(),
            next_uuid: 0,
            unflushed: false,
            durable_ns: 0,
            dead: false,
            stats: StoreStats::default(),
        }
    }

    pub fn mode(&self) -> Mode {
        self.mode
    }
    pub fn page_bytes(&self) -> usize {
        self.page_bytes
    }
    pub fn stats(&self) -> &StoreStats {
        &self.stats
    }
    pub fn now_ns(&self) -> u64 {
        self.now_ns
    }
    pub fn device(&self) -> &dyn BlockDevice {
        self.host.device()
    }
    pub fn device_mut(&mut self) -> &mut dyn BlockDevice {
        self.host.device_mut()
    }
    pub fn directory(&self) -> &Directory {
        &self.dir
    }
    /// The device, with whatever was not yet written back dropped (a power cut's view).
    pub fn into_device(self) -> Box<dyn BlockDevice> {
        self.host.into_device()
    }

    /// `PRAGMA synchronous` as SQLite reports it through the VFS.
    pub fn set_synchronous(&mut self, level: &str) {
        let level = match level.trim().to_ascii_lowercase().as_str() {
            "0" | "off" => "off",
            "1" | "normal" => "normal",
            "3" | "extra" => "extra",
            _ => "full",
        };
        self.synchronous_full = matches!(level, "full" | "extra");
        self.synchronous = level.into();
    }

    pub fn synchronous_name(&self) -> &str {
        &self.synchronous
    }

    pub fn tx_kind(&self) -> TxKind {
        self.tx_kind
    }

    pub fn exists(&self, kind: FileKind) -> bool {
        self.files[kind as usize].exists
    }

    pub fn size(&self, kind: FileKind) -> u64 {
        self.files[kind as usize].size
    }

    pub fn create(&mut self, kind: FileKind) {
        self.files[kind as usize].exists = true;
    }

    // ------------------------------------------------------------ reads

    /// Reads `buf.len()` bytes at `offset`; returns false on a short read (the rest zeroed).
    pub fn read(&mut self, kind: FileKind, offset: u64, buf: &mut [u8]) -> Result<bool, SqlError> {
        let size = self.size(kind);
        let avail = size.saturating_sub(offset).min(buf.len() as u64) as usize;
        buf[avail..].fill(0);
        if avail == 0 {
            return Ok(buf.is_empty());
        }
        let pb = self.page_bytes as u64;
        let first = (offset / pb) as u32;
        let last = ((offset + avail as u64 - 1) / pb) as u32;
        let pages = self.fetch_pages(kind, first, last)?;
        for (i, page) in pages.iter().enumerate() {
            let page_start = (first as u64 + i as u64) * pb;
            let from = offset.max(page_start);
            let to = (offset + avail as u64).min(page_start + pb);
            buf[(from - offset) as usize..(to - offset) as usize]
                .copy_from_slice(&page[(from - page_start) as usize..(to - page_start) as usize]);
        }
        Ok(avail == buf.len())
    }

    /// Pages `first..=last` of a file: buffered ones from RAM, the rest in one device read.
    fn fetch_pages(
        &mut self,
        kind: FileKind,
        first: u32,
        last: u32,
    ) -> Result<Vec<Box<[u8]>>, SqlError> {
        let missing = (first..=last).any(|p| self.buffered(kind, p).is_none());
        let mut from_device = Vec::new();
        if missing {
            let start = lpn_of(&self.dir, kind, first);
            let count = last - first + 1;
            let now = self.now_ns;
            let ack = if self.use_sread() {
                self.stats.sreads += 1;
                self.live_host()?
                    .sread(start, count, now, &mut from_device)?
            } else {
                self.live_host()?
                    .read_pages(start, count, now, &mut from_device)?
            };
            self.now_ns = ack.ack_ns;
            self.stats.read_requests += 1;
            self.stats.host_pages_read += count as u64;
        }
        (first..=last)
            .map(|p| match self.buffered(kind, p) {
                Some(b) => Ok(Box::from(b)),
                None => match &from_device[(p - first) as usize] {
                    PageOutcome::Data(c) => Ok(c.to_page_bytes(self.page_bytes)),
                    PageOutcome::Unwritten => Ok(vec![0u8; self.page_bytes].into_boxed_slice()),
                    PageOutcome::Uncorrectable => {
                        let lpn = lpn_of(&self.dir, kind, p).0;
                        crate::evidence::uncorrectable(lpn);
                        Err(SqlError::Uncorrectable(lpn))
                    }
                },
            })
            .collect()
    }

    /// Reads in `batch` mode go through SREAD where the design has it, so a read is ordered
    /// after every transaction that arrived before it (Möbius Table I).
    fn use_sread(&mut self) -> bool {
        self.mode == Mode::Batch
            && self.tx_kind != TxKind::PlainWrites
            && self.host.capabilities().is_some_and(|c| c.sread)
    }

    fn buffered(&self, kind: FileKind, page: u32) -> Option<&[u8]> {
        if let (FileKind::Db, Some(b)) = (kind, &self.batch) {
            if let Some((l, data)) = &b.held {
                if *l == lpn_of(&self.dir, kind, page) {
                    return Some(data);
                }
            }
        }
        self.files[kind as usize].dirty.get(&page).map(|b| &b[..])
    }

    // ------------------------------------------------------------ writes

    /// Writes `data` at `offset` into the file's buffer (growing the file).
    pub fn write(&mut self, kind: FileKind, offset: u64, data: &[u8]) -> Result<(), SqlError> {
        if data.is_empty() {
            return Ok(());
        }
        let end = offset + data.len() as u64;
        let capacity = self.dir.capacity(kind);
        if end > capacity {
            return Err(SqlError::FileFull {
                file: kind.name(),
                capacity,
            });
        }
        let pb = self.page_bytes as u64;
        let first = (offset / pb) as u32;
        let last = ((end - 1) / pb) as u32;
        for p in first..=last {
            let page_start = p as u64 * pb;
            let from = offset.max(page_start);
            let to = end.min(page_start + pb);
            let whole = from == page_start && to == page_start + pb;
            let mut page = if whole {
                vec![0u8; self.page_bytes].into_boxed_slice()
            } else {
                self.page_for_update(kind, p)?
            };
            page[(from - page_start) as usize..(to - page_start) as usize]
                .copy_from_slice(&data[(from - offset) as usize..(to - offset) as usize]);
            self.put_page(kind, p, page)?;
        }
        let f = &mut self.files[kind as usize];
        f.size = f.size.max(end);
        f.exists = true;
        if self.batch.is_none() && f.dirty.len() > DIRTY_LIMIT_PAGES {
            self.write_back(kind)?;
        }
        Ok(())
    }

    /// The current content of a page about to be partly overwritten.
    fn page_for_update(&mut self, kind: FileKind, p: u32) -> Result<Box<[u8]>, SqlError> {
        if let Some(b) = self.buffered(kind, p) {
            return Ok(Box::from(b));
        }
        if (p as u64 * self.page_bytes as u64) < self.size(kind) {
            return Ok(self.fetch_pages(kind, p, p)?.pop().expect("one page"));
        }
        Ok(vec![0u8; self.page_bytes].into_boxed_slice())
    }

    fn put_page(&mut self, kind: FileKind, p: u32, page: Box<[u8]>) -> Result<(), SqlError> {
        if kind == FileKind::Db && self.tx_kind == TxKind::Dynamic && self.batch.is_some() {
            return self.stream_page(lpn_of(&self.dir, kind, p), page);
        }
        self.files[kind as usize].dirty.insert(p, page);
        Ok(())
    }

    pub fn truncate(&mut self, kind: FileKind, size: u64) {
        let pb = self.page_bytes as u64;
        let f = &mut self.files[kind as usize];
        f.size = size;
        let keep = size.div_ceil(pb) as u32;
        f.dirty.retain(|&p, _| p < keep);
        if !size.is_multiple_of(pb) {
            if let Some(page) = f.dirty.get_mut(&(keep - 1)) {
                page[(size % pb) as usize..].fill(0);
            }
        }
    }

    /// Submits a file's dirty pages (one write request per run of consecutive pages), then
    /// the directory if the file's size changed.
    fn write_back(&mut self, kind: FileKind) -> Result<(), SqlError> {
        if !self.files[kind as usize].dirty.is_empty() {
            self.reuse_after_deletion(kind)?;
        }
        let dirty = std::mem::take(&mut self.files[kind as usize].dirty);
        let mut run: Vec<Content> = Vec::new();
        let mut run_start = 0u32;
        for (p, page) in dirty {
            if !run.is_empty() && p != run_start + run.len() as u32 {
                self.submit(kind, run_start, &mut run)?;
            }
            if run.is_empty() {
                run_start = p;
            }
            run.push(Content::Bytes(page));
        }
        self.submit(kind, run_start, &mut run)?;
        let f = &self.files[kind as usize];
        let on_flash = self.dir.file(kind);
        if (on_flash.size, on_flash.exists) != (f.size, f.exists) {
            self.write_directory_for(kind)?;
        }
        Ok(())
    }

    /// Whether the device promises only what a flush covers (the write-cached FTL): writes
    /// may then land in any order, and the VFS flushes where SQLite relies on one.
    fn flush_only(&self) -> bool {
        self.host.device().promise() == Promise::FlushOnly
    }

    /// A file's new size must not reach flash before the data it covers: a journal recreated
    /// after a delete reuses its extent, so a directory entry that lands first would expose the
    /// previous journal's pages, a valid hot journal SQLite would roll back (losing a commit
    /// that had returned; found by the long crash matrix on the write-cached FTL, seed 1061).
    /// Where an acknowledged write is on flash (durable-writes, atomic-transactions) or the
    /// device keeps request order (OPTR), writing the directory after the data is enough; a
    /// device that only promises what a flush covers may land them in any order, so the data
    /// is flushed first — what ext4's ordered mode does before it commits a size change.
    fn data_before_size(&mut self) -> Result<(), SqlError> {
        if self.unflushed && self.flush_only() {
            self.stats.ordering_flushes += 1;
            self.flush()?;
        }
        Ok(())
    }

    /// A file's extent must not be overwritten while its deletion may still be undone: a
    /// journal's extent is reused by the next journal, and with the deletion of the previous
    /// one not yet flushed (`synchronous=FULL` does not sync it) a cut could land the new
    /// journal's pages and lose the deletion, leaving a hot journal of mixed pages that SQLite
    /// rolls back only in part, undoing half of a commit (found by the SQLite soak on the
    /// write-cached FTL: "wrong # of entries in index", balances that disagree). A file system
    /// does not reuse a deleted file's blocks before the deletion commits; on a device that
    /// only promises what a flush covers, the deletion is flushed first.
    fn reuse_after_deletion(&mut self, kind: FileKind) -> Result<(), SqlError> {
        if self.files[kind as usize].deletion_unflushed {
            self.stats.ordering_flushes += 1;
            self.flush()?;
        }
        Ok(())
    }

    fn submit(
        &mut self,
        kind: FileKind,
        first: u32,
        run: &mut Vec<Content>,
    ) -> Result<(), SqlError> {
        if run.is_empty() {
            return Ok(());
        }
        let start = lpn_of(&self.dir, kind, first);
        // A design's longest write (OPTR applies a request whole, TxFlash as one transaction)
        // splits a long run into requests in order, as a file system's block layer does.
        let longest = self.host.max_write_pages().unwrap_or(u64::MAX) as usize;
        for (i, chunk) in run.chunks(longest.max(1)).enumerate() {
            let at = Lpn(start.0 + (i * longest) as u32);
            let now = self.now_ns;
            let ack = self.live_host()?.write_pages(at, chunk, now)?;
            let lpns = (at.0..).map(Lpn);
            crate::evidence::wrote(lpns.zip(chunk), self.page_bytes, now);
            self.now_ns = ack.ack_ns;
            self.stats.write_requests += 1;
            self.stats.host_pages_written += chunk.len() as u64;
        }
        self.unflushed = true;
        run.clear();
        Ok(())
    }

    /// Writes the directory with `kind`'s current size and existence; when that grows or creates
    /// the file, its data first reaches flash ([`Self::data_before_size`]).
    fn write_directory_for(&mut self, kind: FileKind) -> Result<(), SqlError> {
        let grows = {
            let (f, on_flash) = (&self.files[kind as usize], self.dir.file(kind));
            f.exists && (!on_flash.exists || f.size > on_flash.size)
        };
        if grows {
            self.data_before_size()?;
        }
        let f = &self.files[kind as usize];
        let e = self.dir.file_mut(kind);
        e.size = f.size;
        e.exists = f.exists;
        self.write_directory()
    }

    fn write_directory(&mut self) -> Result<(), SqlError> {
        self.dir.generation += 1;
        let page = Content::Bytes(self.dir.encode());
        let now = self.now_ns;
        let ack = self
            .live_host()?
            .write_pages(Lpn(0), std::slice::from_ref(&page), now)?;
        crate::evidence::wrote([(Lpn(0), &page)], self.page_bytes, now);
        self.now_ns = ack.ack_ns;
        self.stats.write_requests += 1;
        self.stats.host_pages_written += 1;
        self.stats.directory_writes += 1;
        self.unflushed = true;
        Ok(())
    }

    fn flush(&mut self) -> Result<(), SqlError> {
        let now = self.now_ns;
        self.now_ns = self.live_host()?.flush(now)?;
        crate::evidence::flushed(self.now_ns);
        for f in &mut self.files {
            f.deletion_unflushed = false;
        }
        self.stats.flushes += 1;
        self.unflushed = false;
        Ok(())
    }

    // ------------------------------------------------------------ syncs

    /// SQLite's xSync: the file's data and size reach the device; whether the device is then
    /// flushed depends on the mode (see [`Mode`]).
    /// In `ordered` mode the database's sync is the durability sync (the journal's syncs only
    /// order the journal before the database, which the device's request order already does).
    pub fn sync(&mut self, kind: FileKind) -> Result<(), SqlError> {
        self.write_back(kind)?;
        self.barrier_or_flush(kind == FileKind::Db)
    }

    /// A sync that orders writes (`durability == false`) or makes a commit durable.
    fn barrier_or_flush(&mut self, durability: bool) -> Result<(), SqlError> {
        let flush = match self.mode {
            Mode::Batch | Mode::Journal | Mode::Wal => true,
            Mode::Ordered => durability,
            Mode::NoBarrier => false,
        };
        if flush && self.unflushed {
            self.flush()
        } else {
            self.stats.syncs_skipped += 1;
            Ok(())
        }
    }

    /// SQLite's xDelete: the file is gone (size 0, absent) once the directory says so. In
    /// `journal` mode deleting the journal is the commit point; `sync_dir` (SQLite passes it with
    /// `synchronous=EXTRA`) asks for the deletion to be durable.
    pub fn delete(&mut self, kind: FileKind, sync_dir: bool) -> Result<(), SqlError> {
        let f = &mut self.files[kind as usize];
        f.dirty.clear();
        f.size = 0;
        f.exists = false;
        let e = self.dir.file(kind);
        if e.exists || e.size != 0 {
            self.write_directory_for(kind)?;
            self.files[kind as usize].deletion_unflushed = self.flush_only();
        }
        if sync_dir {
            self.barrier_or_flush(true)?;
        }
        Ok(())
    }

    /// SQLite's xClose of a file: whatever is buffered is written back (no flush).
    pub fn close(&mut self, kind: FileKind) -> Result<(), SqlError> {
        if self.dead {
            return Ok(());
        }
        self.write_back(kind)
    }

    /// Writes back every file and flushes the device: a durable starting point (the crash
    /// campaigns take one after loading the tables).
    pub fn make_durable(&mut self) -> Result<(), SqlError> {
        for kind in FileKind::ALL {
            self.write_back(kind)?;
        }
        self.flush()
    }

    /// The host layer, for a request to the device: refused after [`Store::cut_power`], so that
    /// nothing SQLite does once the power is gone (the checkpoint and WAL deletion of closing
    /// the connection) reaches the device.
    fn live_host(&mut self) -> Result<&mut Host, SqlError> {
        if self.dead {
            return Err(SqlError::PoweredOff);
        }
        Ok(&mut self.host)
    }

    /// A power cut as the host sees it: buffered writes and an open batch are lost, and the
    /// connection's closing writes nothing more.
    pub fn cut_power(&mut self) {
        self.dead = true;
        self.batch = None;
        for f in &mut self.files {
            f.dirty.clear();
        }
    }

    /// The instant from which every asynchronous SWRITE so far survives a power cut.
    pub fn durable_ns(&self) -> u64 {
        self.durable_ns
    }

    // ------------------------------------------------------------ batch atomic writes

    /// Takes the next block of transaction ids: the directory on flash moves past them (and is
    /// flushed) before any is used, so ids are never reused after a power cut.
    fn lease_uuids(&mut self) -> Result<(), SqlError> {
        self.next_uuid = self.dir.next_uuid;
        self.dir.next_uuid += UUID_LEASE;
        self.write_directory()?;
        self.flush()
    }

    /// SQLITE_FCNTL_BEGIN_ATOMIC_WRITE on the database file.
    pub fn begin_atomic(&mut self) -> Result<(), SqlError> {
        if self.tx_kind == TxKind::Dynamic {
            // Pages written outside a batch (after a journal fallback) go out before it.
            self.write_back(FileKind::Db)?;
        }
        if self.next_uuid == self.dir.next_uuid {
            self.lease_uuids()?;
        }
        let uuid = TxUuid(self.next_uuid);
        self.next_uuid += 1;
        self.batch = Some(Batch {
            uuid,
            size_before: self.size(FileKind::Db),
            sent: 0,
            held: None,
            refused: false,
            fallback_counted: false,
        });
        Ok(())
    }

    /// SQLITE_FCNTL_COMMIT_ATOMIC_WRITE: the batch becomes one device transaction, with the
    /// directory page in it when the database grew. `Err(Refused)`: the design cannot keep
    /// a transaction this large atomic; nothing reached the device and SQLite falls back to
    /// its rollback journal.
    pub fn commit_atomic(&mut self) -> Result<CommitOutcome, SqlError> {
        let Some(batch) = self.batch.take() else {
            return Ok(CommitOutcome::Committed);
        };
        let size_before = batch.size_before;
        let outcome = match self.tx_kind {
            TxKind::Static => self.commit_static(batch),
            TxKind::Dynamic => self.commit_dynamic(batch),
            TxKind::PlainWrites => self.commit_plain(),
        };
        if outcome.is_err() {
            // SQLite answers a failed commit by writing its journal and committing the
            // ordinary way, as it does a refused one: the file is back to its size before.
            self.files[FileKind::Db as usize].size = size_before;
            self.stats.journal_fallbacks += 1;
            if let Some(b) = self.batch.as_mut() {
                b.fallback_counted = true;
            }
        }
        outcome
    }

    /// The write set of a batch: the database's buffered pages and, if its size changed, the
    /// directory page.
    fn batch_pages(&mut self) -> Vec<(Lpn, Content)> {
        let dirty = std::mem::take(&mut self.files[FileKind::Db as usize].dirty);
        let mut pages: Vec<(Lpn, Content)> = dirty
            .into_iter()
            .map(|(p, b)| (lpn_of(&self.dir, FileKind::Db, p), Content::Bytes(b)))
            .collect();
        if self.dir.file(FileKind::Db).size != self.size(FileKind::Db) {
            let mut dir = self.dir.clone();
            dir.file_mut(FileKind::Db).size = self.size(FileKind::Db);
            dir.generation += 1;
            pages.push((Lpn(0), Content::Bytes(dir.encode())));
        }
        pages
    }

    fn commit_static(&mut self, batch: Batch) -> Result<CommitOutcome, SqlError> {
        let pages = self.batch_pages();
        if pages.is_empty() {
            return Ok(CommitOutcome::Committed);
        }
        let caps = self.host.capabilities().unwrap_or_default();
        if pages.len() as u64 > caps.max_tx_pages {
            return Ok(self.refuse(batch));
        }
        // NORMAL asks for no durability at the commit: an asynchronous SWRITE where the design
        // offers one (Möbius); elsewhere a synchronous one, which keeps more. (TxFlash refuses
        // an asynchronous SWRITE; sending one made every NORMAL commit fall back to SQLite's
        // journal, at NORMAL, which the SQLite soak caught corrupting the database.)
        let mode = if self.synchronous_full || !caps.async_swrite {
            SwriteMode::Sync
        } else {
            SwriteMode::Async
        };
        let n = pages.len() as u64;
        // Möbius holds small SWRITEs back to merge them (§IV-E): the host waits for its group.
        let now = self.now_ns;
        let done = match self
            .live_host()?
            .swrite_acknowledged(batch.uuid, &pages, mode, now)
        {
            Err(HostError::Device(
                FtlError::TxTooLarge { .. }
                | FtlError::TxRoomTaken { .. }
                | FtlError::TxTooSmall { .. }
                | FtlError::RequestTooLarge { .. },
            )) => return Ok(self.refuse(batch)),
            r => r?,
        };
        let written = pages.iter().map(|(l, c)| (*l, c));
        crate::evidence::wrote(written, self.page_bytes, now);
        self.now_ns = done.ack_ns;
        self.durable_ns = self.durable_ns.max(done.durable_ns.unwrap_or(done.ack_ns));
        self.committed(n);
        Ok(CommitOutcome::Committed)
    }

    /// The negative control's commit: the batch's pages as ordinary writes, directory last.
    fn commit_plain(&mut self) -> Result<CommitOutcome, SqlError> {
        self.write_back(FileKind::Db)?;
        Ok(CommitOutcome::Committed)
    }

    fn committed(&mut self, pages: u64) {
        let size = self.size(FileKind::Db);
        self.dir.file_mut(FileKind::Db).size = size;
        if pages > 0 {
            self.dir.generation += 1;
        }
        self.stats.tx_committed += 1;
        self.stats.tx_pages += pages;
    }

    fn refuse(&mut self, batch: Batch) -> CommitOutcome {
        self.files[FileKind::Db as usize].size = batch.size_before;
        self.stats.journal_fallbacks += 1;
        CommitOutcome::Refused
    }

    /// SQLITE_FCNTL_ROLLBACK_ATOMIC_WRITE: nothing of the batch survives. A static batch never
    /// reached the device; a dynamic one is aborted (ABORT). A dynamic batch the device refused
    /// a page of is a journal fallback: SQLite commits it through its journal next. LightTx and
    /// TxFlash abort a transaction when they refuse one of its pages, so there the ABORT finds
    /// none (`UnknownTx`); Möbius and Atomic-Write keep it running until the ABORT.
    pub fn rollback_atomic(&mut self) -> Result<(), SqlError> {
        let Some(batch) = self.batch.take() else {
            return Ok(());
        };
        self.files[FileKind::Db as usize].dirty.clear();
        self.files[FileKind::Db as usize].size = batch.size_before;
        self.stats.batch_rollbacks += 1;
        if batch.refused && !batch.fallback_counted {
            self.stats.journal_fallbacks += 1;
        }
        if batch.sent > 0 {
            let now = self.now_ns;
            match self.live_host()?.abort(batch.uuid, now) {
                Ok(done) => {
                    self.now_ns = done.ack_ns;
                    self.stats.aborts += 1;
                }
                Err(HostError::Device(FtlError::UnknownTx(_))) if batch.refused => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    // ------------------------------------------------------------ dynamic transactions

    /// Sends the page held back as HEAD (first) or BODY and holds `page` back in its place:
    /// the last page of the batch is only known at COMMIT, where it goes out as REAR.
    fn stream_page(&mut self, lpn: Lpn, page: Box<[u8]>) -> Result<(), SqlError> {
        let batch = self.batch.as_mut().expect("streaming inside a batch");
        match batch.held.take() {
            Some((l, _)) if l == lpn => batch.held = Some((l, page)),
            Some((l, prev)) => {
                batch.held = Some((lpn, page));
                let flag = if batch.sent == 0 {
                    DwriteFlag::Head
                } else {
                    DwriteFlag::Body
                };
                self.send_dwrite(l, prev, flag)?;
            }
            None => batch.held = Some((lpn, page)),
        }
        Ok(())
    }

    fn send_dwrite(&mut self, lpn: Lpn, page: Box<[u8]>, flag: DwriteFlag) -> Result<(), SqlError> {
        let batch = self.batch.as_mut().expect("inside a batch");
        let uuid = batch.uuid;
        batch.sent += 1;
        let now = self.now_ns;
        let content = Content::Bytes(page);
        let done = self.live_host()?.dwrite(uuid, lpn, &content, flag, now);
        let done = done.inspect_err(|_| {
            if let Some(b) = self.batch.as_mut() {
                b.refused = true;
            }
        })?;
        crate::evidence::wrote([(lpn, &content)], self.page_bytes, now);
        self.now_ns = done.ack_ns;
        self.stats.dwrites += 1;
        Ok(())
    }

    fn commit_dynamic(&mut self, mut batch: Batch) -> Result<CommitOutcome, SqlError> {
        let size_changed = self.dir.file(FileKind::Db).size != self.size(FileKind::Db);
        let mut tail: Vec<(Lpn, Box<[u8]>)> = batch.held.take().into_iter().collect();
        if size_changed {
            let mut dir = self.dir.clone();
            dir.file_mut(FileKind::Db).size = self.size(FileKind::Db);
            dir.generation += 1;
            tail.push((Lpn(0), dir.encode()));
        }
        let n = batch.sent as u64 + tail.len() as u64;
        if n == 0 {
            return Ok(CommitOutcome::Committed);
        }
        let last = tail.len() - 1;
        self.batch = Some(batch);
        for (i, (lpn, page)) in tail.into_iter().enumerate() {
            let first = self.batch.as_ref().expect("batch").sent == 0;
            let flag = match (first, i == last) {
                (true, true) => DwriteFlag::Single,
                (true, false) => DwriteFlag::Head,
                (false, false) => DwriteFlag::Body,
                (false, true) => DwriteFlag::Rear,
            };
            self.send_dwrite(lpn, page, flag)?;
        }
        self.batch = None;
        self.committed(n);
        Ok(CommitOutcome::Committed)
    }
}

/// What a batch commit came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommitOutcome {
    Committed,
    /// The design refused the transaction (too large): SQLite must use its journal.
    Refused,
}
