//! The NVMFS core: files on NVRAM and SSD, the dirty/clean LRU lists, flushing to fresh 512 KB
//! SSD extents, segment cleaning, and mount-time recovery (paper §III).
//!
//! Every NVRAM store that matters is followed by `persist` ([R]); data reaches NVRAM
//! before any pointer to it. A test hook (`set_crash_after`) stops the file system right after
//! the k-th durable step (NVRAM persist point or SSD write), as if the process died there.

use crate::error::{NvmfsError, Result};
use crate::layout::*;
use crate::lru::Lru;
use crate::nvram::Nvram;
use flash::{Content, Lpn};
use ftl::{BlockDevice, PageOutcome, Promise};
use std::path::Path;

#[path = "recovery.rs"]
mod recovery;

/// Tunables; defaults are the paper's values (§III-B, §III-C; [R] where noted).
#[derive(Clone, Debug)]
pub struct NvmfsParams {
    /// Inodes in the inode table (used only by `create`).
    pub inode_count: u32,
    /// Share of NVRAM data pages the dirty list may hold ([R]; default all).
    pub dirty_share: f64,
    /// Flushing starts when the dirty list reaches this share of its capacity (paper: 80 %).
    pub flush_high: f64,
    /// ... and stops at this share (paper: 50 %).
    pub flush_low: f64,
    /// Cleaning needs allocated extents / ideal extents >= this ([R]).
    pub clean_fragmentation: f64,
    /// ... and free extents below this share of all extents ([R]).
    pub clean_free_share: f64,
    /// msync every persist point (machine-crash ordering) instead of a fence only.
    pub strict_persist: bool,
}

impl Default for NvmfsParams {
    fn default() -> Self {
        NvmfsParams {
            inode_count: 4096,
            dirty_share: 1.0,
            flush_high: 0.8,
            flush_low: 0.5,
            clean_fragmentation: 1.25,
            clean_free_share: 0.10,
            strict_persist: false,
        }
    }
}

/// Counters for the paper's measurements.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NvmfsStats {
    pub flush_rounds: u64,
    pub sync_flush_rounds: u64,
    pub flushed_pages: u64,
    pub ssd_pages_written: u64,
    pub ssd_pages_read: u64,
    pub evictions: u64,
    pub read_promotions: u64,
    pub cleaning_rounds: u64,
    /// Valid blocks moved to NVRAM by cleaning (including second copies dropped).
    pub cleaning_moved_blocks: u64,
    /// Blocks reclaimed by cleaning (128 per extent).
    pub cleaning_recycled_blocks: u64,
    /// Recovery at the last mount reset the LRU lists (§III-D).
    pub lists_reset_at_mount: bool,
    pub redo_replayed_at_mount: bool,
}

impl NvmfsStats {
    /// 1 - moved valid blocks / recycled blocks (§IV).
    pub fn cleaning_efficiency(&self) -> f64 {
        if self.cleaning_recycled_blocks == 0 {
            return 1.0;
        }
        1.0 - self.cleaning_moved_blocks as f64 / self.cleaning_recycled_blocks as f64
    }

    /// The counts since `earlier` (a snapshot of the same mount); the mount's flags as now.
    pub fn since(&self, earlier: &NvmfsStats) -> NvmfsStats {
        NvmfsStats {
            flush_rounds: self.flush_rounds - earlier.flush_rounds,
            sync_flush_rounds: self.sync_flush_rounds - earlier.sync_flush_rounds,
            flushed_pages: self.flushed_pages - earlier.flushed_pages,
            ssd_pages_written: self.ssd_pages_written - earlier.ssd_pages_written,
            ssd_pages_read: self.ssd_pages_read - earlier.ssd_pages_read,
            evictions: self.evictions - earlier.evictions,
            read_promotions: self.read_promotions - earlier.read_promotions,
            cleaning_rounds: self.cleaning_rounds - earlier.cleaning_rounds,
            cleaning_moved_blocks: self.cleaning_moved_blocks - earlier.cleaning_moved_blocks,
            cleaning_recycled_blocks: self.cleaning_recycled_blocks
                - earlier.cleaning_recycled_blocks,
            ..self.clone()
        }
    }
}

/// Where the process-death hook (`set_kill_point`) can fire: inside a flush round or a
/// cleaning round, at the instants §III-D reasons about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KillPoint {
    /// The extent is written to the SSD; no NVRAM metadata says so yet.
    FlushAfterSsdWrite,
    /// Half of the flushed pages' list / page_info records are updated.
    FlushMidMetadata,
    /// Cleaning copied the victim's valid blocks to NVRAM; the redo log is not committed.
    CleanBeforeCommit,
    /// The redo log is committed; no inode is repointed yet.
    CleanAfterCommit,
}

impl KillPoint {
    pub fn parse(s: &str) -> Option<KillPoint> {
        Some(match s {
            "flush-after-ssd-write" => KillPoint::FlushAfterSsdWrite,
            "flush-mid-metadata" => KillPoint::FlushMidMetadata,
            "clean-before-commit" => KillPoint::CleanBeforeCommit,
            "clean-after-commit" => KillPoint::CleanAfterCommit,
            _ => return None,
        })
    }
}

/// Space and inode counts for `statfs`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FsUsage {
    /// SSD blocks (4 KB) the file system manages: every file block ends up there.
    pub blocks: u64,
    /// SSD blocks holding no valid data.
    pub free_blocks: u64,
    pub inodes: u64,
    pub free_inodes: u64,
}

/// What `getattr` returns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attr {
    pub ino: u32,
    pub is_dir: bool,
    pub mode: u32,
    pub nlink: u32,
    pub size: u64,
    pub nvram_blocks: u32,
    pub ssd_blocks: u32,
    pub mtime_ns: u64,
    pub ctime_ns: u64,
    pub uid: u32,
    pub gid: u32,
}

const STAMP_MID: u64 = 1 << 62;
const INDIRECT_OWNER_BLOCK: u32 = u32::MAX;

pub struct Nvmfs {
    nv: Nvram,
    sb: Superblock,
    dev: Box<dyn BlockDevice>,
    now_ns: u64,
    lru: Lru,
    nv_free: Vec<u32>,
    inode_free: Vec<u32>,
    /// Valid SSD blocks per extent (mirror of the SSD bitmap).
    ext_valid: Vec<u32>,
    stamp_hi: u64,
    stamp_lo: u64,
    lists_depth: u32,
    params: NvmfsParams,
    stats: NvmfsStats,
    steps: u64,
    crash_after: Option<u64>,
    crashed: bool,
    reads: Vec<PageOutcome>,
    cold: Vec<u32>,
    clock: fn() -> u64,
    /// Process-death hook: SIGKILL ourselves the n-th time this point is reached.
    kill_point: Option<(KillPoint, u64)>,
    /// Open counts of files the caller has open (`open_file` / `close`).
    open: rustc_hash::FxHashMap<u32, u32>,
}

fn wall_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

impl Nvmfs {
    // ---------------------------------------------------------------- construction

    /// Formats a new file system: a fresh NVRAM file at `nvram_path` over `dev`.
    pub fn create(
        nvram_path: &Path,
        nvram_bytes: u64,
        dev: Box<dyn BlockDevice>,
        params: NvmfsParams,
    ) -> Result<Nvmfs> {
        let sb = Superblock::plan(
            nvram_bytes,
            dev.logical_pages() as u64,
            params.inode_count,
            params.dirty_share,
        )?;
        let mut nv = Nvram::create(nvram_path, sb.nvram_bytes, params.strict_persist)?;
        sb.encode(&mut nv.bytes_mut()[0..4096]);
        let root = Inode {
            mode: S_IFDIR | 0o755,
            nlink: 2,
            ..Default::default()
        };
        let at = (sb.inode_table_at as u64 * PAGE_BYTES + ROOT_INO as u64 * INODE_BYTES) as usize;
        root.encode(&mut nv.bytes_mut()[at..at + INODE_BYTES as usize]);
        put_u32(nv.bytes_mut(), SB_CLEAN_UNMOUNT as usize, 1);
        nv.persist_all()?;
        Self::open_with(nv, dev, params)
    }

    /// Mounts an existing file system, recovering from a crash if there was one (§III-D).
    pub fn open(
        nvram_path: &Path,
        dev: Box<dyn BlockDevice>,
        params: NvmfsParams,
    ) -> Result<Nvmfs> {
        let nv = Nvram::open(nvram_path, params.strict_persist)?;
        Self::open_with(nv, dev, params)
    }

    fn open_with(nv: Nvram, dev: Box<dyn BlockDevice>, params: NvmfsParams) -> Result<Nvmfs> {
        let sb = Superblock::decode(&nv.bytes()[0..4096])?;
        if nv.len() < sb.nvram_bytes {
            return Err(NvmfsError::Corrupt(format!(
                "NVRAM file holds {} bytes, the superblock says {}",
                nv.len(),
                sb.nvram_bytes
            )));
        }
        if (dev.logical_pages() as u64) < sb.ssd_blocks {
            return Err(NvmfsError::Corrupt(format!(
                "the SSD has {} blocks, the file system was made for {}",
                dev.logical_pages(),
                sb.ssd_blocks
            )));
        }
        let mut fs = Nvmfs {
            lru: Lru::new(sb.data_pages),
            ext_valid: vec![0; sb.extents() as usize],
            nv,
            dev,
            now_ns: 0,
            nv_free: Vec::new(),
            inode_free: Vec::new(),
            stamp_hi: STAMP_MID,
            stamp_lo: STAMP_MID - 1,
            lists_depth: 0,
            params,
            stats: NvmfsStats::default(),
            steps: 0,
            crash_after: None,
            crashed: false,
            reads: Vec::new(),
            cold: Vec::new(),
            clock: wall_ns,
            kill_point: None,
            open: Default::default(),
            sb,
        };
        fs.now_ns = fs.dev.flash().idle_ns();
        fs.recover()?;
        fs.maybe_flush()?;
        Ok(fs)
    }

    /// Orderly unmount: marks the image clean and hands back the SSD.
    pub fn unmount(mut self) -> Result<Box<dyn BlockDevice>> {
        self.live()?;
        let c = self.dev.flush(self.now_ns)?;
        self.now_ns = self.now_ns.max(c.ack_ns);
        put_u32(self.nv.bytes_mut(), SB_CLEAN_UNMOUNT as usize, 1);
        self.nv.persist_all()?;
        self.dev.flash_mut().sync()?;
        Ok(self.dev)
    }

    /// Process death: nothing more is written; the SSD's RAM state is dropped too.
    pub fn crash(self) -> flash::Flash {
        self.dev.into_flash()
    }

    /// Stops the file system right after `steps` more durable steps (test hook).
    pub fn set_crash_after(&mut self, steps: Option<u64>) {
        self.crash_after = steps.map(|s| self.steps + s);
    }
    pub fn steps(&self) -> u64 {
        self.steps
    }
    /// Test hook for real process death: the `nth` (1-based) time `point` is reached, the
    /// process sends itself SIGKILL (nothing after that instant reaches NVRAM or the SSD).
    pub fn set_kill_point(&mut self, point: Option<(KillPoint, u64)>) {
        self.kill_point = point;
    }
    fn reached(&mut self, point: KillPoint) {
        if let Some((p, n)) = self.kill_point {
            if p == point {
                if n <= 1 {
                    // SAFETY: plain syscalls on our own pid; SIGKILL cannot be caught.
                    unsafe {
                        libc::kill(libc::getpid(), libc::SIGKILL);
                    }
                    loop {
                        std::thread::park();
                    }
                }
                self.kill_point = Some((p, n - 1));
            }
        }
    }
    /// Space and inodes in use (for `statfs`).
    pub fn usage(&self) -> FsUsage {
        let valid: u64 = self.ext_valid.iter().map(|&v| v as u64).sum();
        FsUsage {
            blocks: self.sb.extents() * EXTENT_BLOCKS,
            free_blocks: self.sb.extents() * EXTENT_BLOCKS - valid,
            inodes: self.sb.inode_count.saturating_sub(1) as u64,
            free_inodes: self.inode_free.len() as u64,
        }
    }
    pub fn stats(&self) -> &NvmfsStats {
        &self.stats
    }
    pub fn params(&self) -> &NvmfsParams {
        &self.params
    }
    pub fn superblock(&self) -> &Superblock {
        &self.sb
    }
    pub fn device(&self) -> &dyn BlockDevice {
        self.dev.as_ref()
    }
    /// Simulated time of the SSD (ns).
    pub fn now_ns(&self) -> u64 {
        self.now_ns
    }
    /// Uses a fixed clock for file times (deterministic tests).
    pub fn set_clock(&mut self, clock: fn() -> u64) {
        self.clock = clock;
    }
    /// (dirty, clean, free, indirect) NVRAM data pages.
    pub fn list_lengths(&self) -> (u32, u32, u32, u32) {
        let d = self.lru.len(PageList::Dirty);
        let c = self.lru.len(PageList::Clean);
        let f = self.nv_free.len() as u32;
        (d, c, f, self.sb.data_pages - d - c - f)
    }
    /// Dirty pages from MRU to LRU.
    pub fn dirty_pages(&self) -> Vec<u32> {
        self.lru.iter(PageList::Dirty).collect()
    }
    pub fn clean_pages(&self) -> Vec<u32> {
        self.lru.iter(PageList::Clean).collect()
    }
    /// `page_info` of an NVRAM data page: where its second valid copy lives on SSD.
    pub fn page_info(&self, page: u32) -> Option<u64> {
        self.read_record(page).page_info.as_ssd()
    }
    /// Free SSD extents and allocated ones.
    pub fn extent_usage(&self) -> (u64, u64) {
        let free = self.ext_valid.iter().filter(|&&v| v == 0).count() as u64;
        (free, self.sb.extents() - free)
    }
    /// Allocated extents / ceil(valid blocks / 128) ([R]; 1.0 when nothing is on SSD).
    pub fn fragmentation_ratio(&self) -> f64 {
        let valid: u64 = self.ext_valid.iter().map(|&v| v as u64).sum();
        let (_, allocated) = self.extent_usage();
        if valid == 0 {
            return 1.0;
        }
        allocated as f64 / valid.div_ceil(EXTENT_BLOCKS) as f64
    }

    fn live(&self) -> Result<()> {
        if self.crashed {
            Err(NvmfsError::Crashed)
        } else {
            Ok(())
        }
    }

    // ---------------------------------------------------------------- NVRAM access

    fn persist(&mut self, at: u64, len: u64) -> Result<()> {
        self.nv.persist(at, len)?;
        self.step()
    }
    fn step(&mut self) -> Result<()> {
        self.live()?;
        self.steps += 1;
        if self.crash_after.is_some_and(|k| self.steps >= k) {
            self.crashed = true;
            return Err(NvmfsError::Crashed);
        }
        Ok(())
    }
    fn get64(&self, at: u64) -> u64 {
        get_u64(self.nv.bytes(), at as usize)
    }
    fn set64(&mut self, at: u64, v: u64) -> Result<()> {
        put_u64(self.nv.bytes_mut(), at as usize, v);
        self.persist(at, 8)
    }
    fn set32(&mut self, at: u64, v: u32) -> Result<()> {
        put_u32(self.nv.bytes_mut(), at as usize, v);
        self.persist(at, 4)
    }
    fn inode_at(&self, ino: u32) -> u64 {
        self.sb.inode_table_at as u64 * PAGE_BYTES + ino as u64 * INODE_BYTES
    }
    fn data_at(&self, page: u32) -> u64 {
        (self.sb.data_at as u64 + page as u64) * PAGE_BYTES
    }
    fn record_at(&self, page: u32) -> u64 {
        self.sb.page_records_at as u64 * PAGE_BYTES + page as u64 * PAGE_RECORD_BYTES
    }
    fn owner_at(&self, lba: u64) -> u64 {
        self.sb.ssd_owners_at as u64 * PAGE_BYTES + lba * SSD_OWNER_BYTES
    }
    fn page(&self, page: u32) -> &[u8] {
        let at = self.data_at(page) as usize;
        &self.nv.bytes()[at..at + PAGE_BYTES as usize]
    }
    fn page_mut(&mut self, page: u32) -> &mut [u8] {
        let at = self.data_at(page) as usize;
        &mut self.nv.bytes_mut()[at..at + PAGE_BYTES as usize]
    }
    fn inode_slice(&mut self, ino: u32) -> &mut [u8] {
        let at = self.inode_at(ino) as usize;
        &mut self.nv.bytes_mut()[at..at + INODE_BYTES as usize]
    }
    fn read_inode(&self, ino: u32) -> Inode {
        let at = self.inode_at(ino) as usize;
        Inode::decode(&self.nv.bytes()[at..at + INODE_BYTES as usize])
            .expect("an inode slot is INODE_BYTES long")
    }
    fn write_inode(&mut self, ino: u32, inode: &Inode) -> Result<()> {
        let at = self.inode_at(ino);
        inode.encode(&mut self.nv.bytes_mut()[at as usize..(at + INODE_BYTES) as usize]);
        self.persist(at, INODE_BYTES)
    }
    fn read_record(&self, page: u32) -> PageRecord {
        let at = self.record_at(page) as usize;
        PageRecord::decode(&self.nv.bytes()[at..at + PAGE_RECORD_BYTES as usize])
            .unwrap_or(PageRecord::FREE)
    }
    fn write_record(&mut self, page: u32, r: &PageRecord) -> Result<()> {
        let at = self.record_at(page);
        r.encode(&mut self.nv.bytes_mut()[at as usize..(at + PAGE_RECORD_BYTES) as usize]);
        self.persist(at, PAGE_RECORD_BYTES)
    }
    fn bit(&self, region_page: u32, idx: u64) -> bool {
        let at = region_page as u64 * PAGE_BYTES + idx / 8;
        self.nv.bytes()[at as usize] & (1 << (idx % 8)) != 0
    }
    fn set_bit(&mut self, region_page: u32, idx: u64, on: bool) -> Result<()> {
        let at = region_page as u64 * PAGE_BYTES + idx / 8;
        let b = &mut self.nv.bytes_mut()[at as usize];
        if on {
            *b |= 1 << (idx % 8);
        } else {
            *b &= !(1 << (idx % 8));
        }
        self.persist(at, 1)
    }
    /// Brackets an update of the LRU lists / page_info (§III-D: a crash inside resets them).
    fn begin_lists(&mut self) -> Result<()> {
        self.lists_depth += 1;
        if self.lists_depth == 1 {
            self.set32(SB_LISTS_STATE, 1)?;
        }
        Ok(())
    }
    fn end_lists(&mut self) -> Result<()> {
        self.lists_depth -= 1;
        if self.lists_depth == 0 {
            self.set32(SB_LISTS_STATE, 0)?;
        }
        Ok(())
    }
    fn adjust_counts(&mut self, ino: u32, nvram: i64, ssd: i64) -> Result<()> {
        let at = self.inode_at(ino);
        let b = self.nv.bytes();
        let n = get_u32(b, at as usize + INODE_NVRAM_BLOCKS_AT) as i64 + nvram;
        let s = get_u32(b, at as usize + INODE_SSD_BLOCKS_AT) as i64 + ssd;
        debug_assert!(n >= 0 && s >= 0, "inode {ino} block counts went negative");
        put_u32(
            self.nv.bytes_mut(),
            at as usize + INODE_NVRAM_BLOCKS_AT,
            n.max(0) as u32,
        );
        put_u32(
            self.nv.bytes_mut(),
            at as usize + INODE_SSD_BLOCKS_AT,
            s.max(0) as u32,
        );
        self.persist(at + INODE_NVRAM_BLOCKS_AT as u64, 8)
    }
    fn next_mru_stamp(&mut self) -> u64 {
        self.stamp_hi += 1;
        self.stamp_hi
    }
    fn next_lru_stamp(&mut self) -> u64 {
        self.stamp_lo -= 1;
        self.stamp_lo
    }

    // ---------------------------------------------------------------- SSD access

    fn ssd_read(&mut self, lba: u64, out: &mut [u8]) -> Result<()> {
        let mut reads = std::mem::take(&mut self.reads);
        let c = self.dev.read(Lpn(lba as u32), 1, self.now_ns, &mut reads)?;
        self.now_ns = self.now_ns.max(c.ack_ns);
        self.stats.ssd_pages_read += 1;
        let r = match reads.first() {
            Some(PageOutcome::Data(Content::Bytes(b))) => {
                out.copy_from_slice(&b[..out.len()]);
                Ok(())
            }
            Some(PageOutcome::Data(Content::Tag(t))) => {
                t.fill(out);
                Ok(())
            }
            Some(PageOutcome::Unwritten) => {
                out.fill(0);
                Ok(())
            }
            _ => Err(NvmfsError::SsdUnreadable { lba }),
        };
        self.reads = reads;
        r
    }

    /// Releases one SSD block (its copy is no longer valid).
    fn release_ssd(&mut self, lba: u64) -> Result<()> {
        debug_assert!(
            self.bit(self.sb.ssd_bitmap_at, lba),
            "releasing free SSD block {lba}"
        );
        self.set_bit(self.sb.ssd_bitmap_at, lba, false)?;
        self.set64(self.owner_at(lba), 0)?;
        let e = (lba / EXTENT_BLOCKS) as usize;
        self.ext_valid[e] -= 1;
        let flags_at = self.sb.extent_flags_at as u64 * PAGE_BYTES + e as u64 * 4;
        self.set32(flags_at, (self.ext_valid[e] > 0) as u32)
    }

    fn claim_ssd(&mut self, lba: u64, ino: u32, block: u32) -> Result<()> {
        debug_assert!(
            !self.bit(self.sb.ssd_bitmap_at, lba),
            "SSD block {lba} claimed twice"
        );
        self.set_bit(self.sb.ssd_bitmap_at, lba, true)?;
        self.set64(self.owner_at(lba), ino as u64 | (block as u64) << 32)?;
        self.ext_valid[(lba / EXTENT_BLOCKS) as usize] += 1;
        Ok(())
    }

    fn ssd_owner(&self, lba: u64) -> (u32, u32) {
        let v = self.get64(self.owner_at(lba));
        (v as u32, (v >> 32) as u32)
    }

    // ---------------------------------------------------------------- block pointers

    /// Byte offset in NVRAM of the pointer to `block` of `ino`; with `create`, allocates the
    /// indirect blocks on the way (always on NVRAM, §III-E).
    fn slot(&mut self, ino: u32, block: u64, create: bool) -> Result<Option<u64>> {
        let inode_at = self.inode_at(ino);
        if block < DIRECT_POINTERS as u64 {
            return Ok(Some(inode_at + INODE_DIRECT_AT as u64 + 8 * block));
        }
        let b = block - DIRECT_POINTERS as u64;
        if b < POINTERS_PER_BLOCK {
            let Some(ind) = self.indirect(inode_at + INODE_INDIRECT_AT as u64, ino, create)? else {
                return Ok(None);
            };
            return Ok(Some(self.data_at(ind) + 8 * b));
        }
        let b = b - POINTERS_PER_BLOCK;
        if b >= POINTERS_PER_BLOCK * POINTERS_PER_BLOCK {
            return Err(NvmfsError::FileTooLarge {
                max_bytes: MAX_FILE_BYTES,
            });
        }
        let Some(dbl) = self.indirect(inode_at + INODE_DOUBLE_AT as u64, ino, create)? else {
            return Ok(None);
        };
        let l1 = self.data_at(dbl) + 8 * (b / POINTERS_PER_BLOCK);
        let Some(ind) = self.indirect(l1, ino, create)? else {
            return Ok(None);
        };
        Ok(Some(self.data_at(ind) + 8 * (b % POINTERS_PER_BLOCK)))
    }

    fn indirect(&mut self, ptr_at: u64, ino: u32, create: bool) -> Result<Option<u32>> {
        let a = BlockAddr(self.get64(ptr_at));
        if let Some(p) = a.as_nvram() {
            return Ok(Some(p));
        }
        assert!(a.is_hole(), "indirect pointer {a:?} is not on NVRAM");
        if !create {
            return Ok(None);
        }
        let p = self.alloc_page(true)?;
        self.page_mut(p).fill(0);
        self.persist(self.data_at(p), PAGE_BYTES)?;
        let rec = PageRecord {
            list: PageList::Indirect,
            owner_ino: ino,
            owner_block: INDIRECT_OWNER_BLOCK,
            stamp: 0,
            page_info: BlockAddr::HOLE,
        };
        self.write_record(p, &rec)?;
        self.lru.set_off_list(p, PageList::Indirect);
        self.set64(ptr_at, BlockAddr::nvram(p).0)?;
        Ok(Some(p))
    }

    // ---------------------------------------------------------------- NVRAM page allocation

    /// A free NVRAM data page, marked used; evicts clean pages, then ([R]) flushes.
    fn alloc_page(&mut self, allow_flush: bool) -> Result<u32> {
        loop {
            if let Some(p) = self.nv_free.pop() {
                self.set_bit(self.sb.nvram_bitmap_at, p as u64, true)?;
                return Ok(p);
            }
            if let Some(c) = self.lru.lru_end(PageList::Clean) {
                self.evict(c)?;
                continue;
            }
            if allow_flush && self.flush_round()? {
                self.stats.sync_flush_rounds += 1;
                continue;
            }
            return Err(NvmfsError::NoSpace(
                "NVRAM is full of dirty pages and the SSD has no free extent",
            ));
        }
    }

    fn free_page(&mut self, p: u32) -> Result<()> {
        self.write_record(p, &PageRecord::FREE)?;
        self.set_bit(self.sb.nvram_bitmap_at, p as u64, false)?;
        self.lru.set_off_list(p, PageList::Free);
        self.nv_free.push(p);
        Ok(())
    }

    /// Replaces a clean page: the inode is repointed to the SSD copy, the page freed (§III-B).
    fn evict(&mut self, p: u32) -> Result<()> {
        let rec = self.read_record(p);
        let lba = rec
            .page_info
            .as_ssd()
            .expect("a clean page has an SSD copy");
        let slot = self
            .slot(rec.owner_ino, rec.owner_block as u64, false)?
            .expect("a clean page's owner has the pointer");
        assert_eq!(BlockAddr(self.get64(slot)), BlockAddr::nvram(p));
        self.begin_lists()?;
        self.set64(slot, BlockAddr::ssd(lba).0)?;
        self.adjust_counts(rec.owner_ino, -1, 1)?;
        self.free_page(p)?;
        self.end_lists()?;
        self.stats.evictions += 1;
        Ok(())
    }

    /// A write hit on an NVRAM page: dirty MRU; a clean page loses its SSD copy (§III-B).
    fn touch_write(&mut self, p: u32) -> Result<()> {
        let mut rec = self.read_record(p);
        self.begin_lists()?;
        if let Some(lba) = rec.page_info.as_ssd() {
            self.release_ssd(lba)?;
        }
        rec.list = PageList::Dirty;
        rec.stamp = self.next_mru_stamp();
        rec.page_info = BlockAddr::HOLE;
        self.write_record(p, &rec)?;
        self.lru.push_mru(PageList::Dirty, p);
        self.end_lists()
    }

    /// A read hit: MRU of its own list (§III-B).
    fn touch_read(&mut self, p: u32) -> Result<()> {
        let list = self.lru.list_of(p);
        let stamp = self.next_mru_stamp();
        self.begin_lists()?;
        self.set64(self.record_at(p) + 16, stamp)?;
        self.lru.push_mru(list, p);
        self.end_lists()
    }

    // ---------------------------------------------------------------- file data

    fn inode_checked(&self, ino: u32) -> Result<Inode> {
        if ino == 0 || ino >= self.sb.inode_count {
            return Err(NvmfsError::NotFound);
        }
        let i = self.read_inode(ino);
        if i.mode == 0 {
            return Err(NvmfsError::NotFound);
        }
        Ok(i)
    }

    /// Writes `data` at `offset` of a regular file.
    pub fn write(&mut self, ino: u32, offset: u64, data: &[u8]) -> Result<usize> {
        self.live()?;
        if self.inode_checked(ino)?.is_dir() {
            return Err(NvmfsError::IsDir);
        }
        self.write_inner(ino, offset, data)?;
        self.maybe_flush()?;
        Ok(data.len())
    }

    fn write_inner(&mut self, ino: u32, offset: u64, data: &[u8]) -> Result<()> {
        let end = offset + data.len() as u64;
        if end > MAX_FILE_BYTES {
            return Err(NvmfsError::FileTooLarge {
                max_bytes: MAX_FILE_BYTES,
            });
        }
        let mut pos = offset;
        while pos < end {
            let in_off = pos % PAGE_BYTES;
            let n = (PAGE_BYTES - in_off).min(end - pos);
            let from = (pos - offset) as usize;
            self.write_block(
                ino,
                pos / PAGE_BYTES,
                in_off,
                &data[from..from + n as usize],
            )?;
            pos += n;
        }
        let at = self.inode_at(ino);
        if end > self.get64(at + INODE_SIZE_AT as u64) {
            self.set64(at + INODE_SIZE_AT as u64, end)?;
        }
        let now = (self.clock)();
        self.set64(at + 24, now)?;
        Ok(())
    }

    fn write_block(&mut self, ino: u32, block: u64, in_off: u64, chunk: &[u8]) -> Result<()> {
        let slot = self.slot(ino, block, true)?.expect("created");
        let addr = BlockAddr(self.get64(slot));
        if let Some(p) = addr.as_nvram() {
            let at = self.data_at(p) + in_off;
            self.nv.bytes_mut()[at as usize..at as usize + chunk.len()].copy_from_slice(chunk);
            self.persist(at, chunk.len() as u64)?;
            return self.touch_write(p);
        }
        let p = self.alloc_page(true)?;
        if BlockAddr(self.get64(slot)) != addr {
            // Cleaning (run by a flush the allocation needed) moved this block meanwhile.
            self.free_page(p)?;
            return self.write_block(ino, block, in_off, chunk);
        }
        if chunk.len() as u64 != PAGE_BYTES {
            if let Some(lba) = addr.as_ssd() {
                let mut buf = [0u8; PAGE_BYTES as usize];
                self.ssd_read(lba, &mut buf)?;
                self.page_mut(p).copy_from_slice(&buf);
            } else {
                self.page_mut(p).fill(0);
            }
        }
        let at = self.data_at(p) + in_off;
        self.nv.bytes_mut()[at as usize..at as usize + chunk.len()].copy_from_slice(chunk);
        self.persist(self.data_at(p), PAGE_BYTES)?;
        self.begin_lists()?;
        let rec = PageRecord {
            list: PageList::Dirty,
            owner_ino: ino,
            owner_block: block as u32,
            stamp: self.next_mru_stamp(),
            page_info: BlockAddr::HOLE,
        };
        self.write_record(p, &rec)?;
        self.lru.push_mru(PageList::Dirty, p);
        self.set64(slot, BlockAddr::nvram(p).0)?;
        if let Some(lba) = addr.as_ssd() {
            self.adjust_counts(ino, 1, -1)?;
            self.release_ssd(lba)?;
        } else {
            self.adjust_counts(ino, 1, 0)?;
        }
        self.end_lists()
    }

    /// Reads up to `buf.len()` bytes at `offset`; returns the bytes read (short at EOF).
    pub fn read(&mut self, ino: u32, offset: u64, buf: &mut [u8]) -> Result<usize> {
        self.live()?;
        let inode = self.inode_checked(ino)?;
        let end = (offset + buf.len() as u64).min(inode.size);
        let mut pos = offset;
        while pos < end {
            let in_off = pos % PAGE_BYTES;
            let n = (PAGE_BYTES - in_off).min(end - pos);
            let from = (pos - offset) as usize;
            self.read_block(
                ino,
                pos / PAGE_BYTES,
                in_off,
                &mut buf[from..from + n as usize],
            )?;
            pos += n;
        }
        Ok(end.saturating_sub(offset) as usize)
    }

    fn read_block(&mut self, ino: u32, block: u64, in_off: u64, out: &mut [u8]) -> Result<()> {
        let Some(slot) = self.slot(ino, block, false)? else {
            out.fill(0);
            return Ok(());
        };
        let addr = BlockAddr(self.get64(slot));
        let p = if let Some(p) = addr.as_nvram() {
            self.touch_read(p)?;
            p
        } else if let Some(lba) = addr.as_ssd() {
            // [R]: a read miss copies the block to NVRAM at the clean MRU.
            let p = self.alloc_page(true)?;
            if BlockAddr(self.get64(slot)) != addr {
                self.free_page(p)?;
                return self.read_block(ino, block, in_off, out);
            }
            let mut buf = [0u8; PAGE_BYTES as usize];
            self.ssd_read(lba, &mut buf)?;
            self.page_mut(p).copy_from_slice(&buf);
            self.persist(self.data_at(p), PAGE_BYTES)?;
            self.begin_lists()?;
            let rec = PageRecord {
                list: PageList::Clean,
                owner_ino: ino,
                owner_block: block as u32,
                stamp: self.next_mru_stamp(),
                page_info: addr,
            };
            self.write_record(p, &rec)?;
            self.lru.push_mru(PageList::Clean, p);
            self.set64(slot, BlockAddr::nvram(p).0)?;
            self.adjust_counts(ino, 1, -1)?;
            self.end_lists()?;
            self.stats.read_promotions += 1;
            p
        } else {
            out.fill(0);
            return Ok(());
        };
        let at = in_off as usize;
        out.copy_from_slice(&self.page(p)[at..at + out.len()]);
        Ok(())
    }

    // ---------------------------------------------------------------- flushing (§III-B, §III-C)

    /// Flushes while the dirty list is above the high watermark, down to the low one.
    fn maybe_flush(&mut self) -> Result<()> {
        let cap = self.sb.dirty_capacity as f64;
        let high = (cap * self.params.flush_high).ceil() as u32;
        let low = (cap * self.params.flush_low).floor() as u32;
        if self.lru.len(PageList::Dirty) < high {
            return Ok(());
        }
        while self.lru.len(PageList::Dirty) > low {
            if !self.flush_round()? {
                break;
            }
        }
        Ok(())
    }

    /// Flushing watermarks in pages: (start at, stop at).
    pub fn flush_watermarks(&self) -> (u32, u32) {
        let cap = self.sb.dirty_capacity as f64;
        (
            (cap * self.params.flush_high).ceil() as u32,
            (cap * self.params.flush_low).floor() as u32,
        )
    }

    fn free_extent(&self) -> Option<u64> {
        self.ext_valid
            .iter()
            .position(|&v| v == 0)
            .map(|e| e as u64)
    }

    /// One flush round: up to 128 of the coldest dirty pages, in one write, to a fresh extent;
    /// they become clean at the clean LRU end and stay readable from NVRAM. `false` when there
    /// was nothing to flush or no extent could be had.
    pub fn flush_round(&mut self) -> Result<bool> {
        self.live()?;
        let mut cold = std::mem::take(&mut self.cold);
        self.lru
            .coldest(PageList::Dirty, EXTENT_BLOCKS as usize, &mut cold);
        if cold.is_empty() {
            self.cold = cold;
            return Ok(false);
        }
        let extent = match self.free_extent() {
            Some(e) => e,
            None => {
                self.cold = cold;
                if !self.clean_round()? {
                    return Ok(false);
                }
                return self.flush_round();
            }
        };
        let pages: Vec<Content> = cold
            .iter()
            .map(|&p| Content::Bytes(self.page(p).to_vec().into_boxed_slice()))
            .collect();
        let start = extent * EXTENT_BLOCKS;
        let c = self.dev.write(Lpn(start as u32), &pages, self.now_ns)?;
        self.now_ns = self.now_ns.max(c.ack_ns);
        if self.dev.promise() != Promise::DurableWrites {
            let c = self.dev.flush(self.now_ns)?;
            self.now_ns = self.now_ns.max(c.ack_ns);
        }
        self.step()?;
        self.reached(KillPoint::FlushAfterSsdWrite);
        // Metadata: page_info, SSD bitmap and owners, clean list. Inodes stay on NVRAM.
        self.begin_lists()?;
        for (i, &p) in cold.iter().enumerate().rev() {
            if i == cold.len() / 2 {
                self.reached(KillPoint::FlushMidMetadata);
            }
            let lba = start + i as u64;
            let mut rec = self.read_record(p);
            self.claim_ssd(lba, rec.owner_ino, rec.owner_block)?;
            rec.list = PageList::Clean;
            rec.stamp = self.next_lru_stamp();
            rec.page_info = BlockAddr::ssd(lba);
            self.write_record(p, &rec)?;
            self.lru.push_lru(PageList::Clean, p);
        }
        let flags_at = self.sb.extent_flags_at as u64 * PAGE_BYTES + extent * 4;
        self.set32(flags_at, (cold.len() as u64 != EXTENT_BLOCKS) as u32)?;
        self.end_lists()?;
        self.stats.flush_rounds += 1;
        self.stats.flushed_pages += cold.len() as u64;
        self.stats.ssd_pages_written += cold.len() as u64;
        self.cold = cold;
        self.maybe_clean()?;
        Ok(true)
    }

    // ---------------------------------------------------------------- cleaning (§III-C, §III-D)

    /// Both conditions of §III-C hold ([R]).
    pub fn cleaning_due(&self) -> bool {
        let (free, _) = self.extent_usage();
        let few_free = (free as f64) < self.params.clean_free_share * self.sb.extents() as f64;
        few_free && self.fragmentation_ratio() >= self.params.clean_fragmentation
    }

    fn maybe_clean(&mut self) -> Result<()> {
        let mut rounds = 0;
        while self.cleaning_due() && rounds < self.sb.extents() {
            if !self.clean_round()? {
                break;
            }
            rounds += 1;
        }
        Ok(())
    }

    /// One cleaning round: the allocated extent with the fewest valid blocks; its valid blocks
    /// move to NVRAM (dirty LRU end), then inode repointing and the extent's release commit as
    /// one transaction through the redo log ([R]). The callers decide when a round is due (the
    /// cleaning thresholds); a round itself consults none. `false` when there is nothing to
    /// clean or not enough NVRAM.
    pub fn clean_round(&mut self) -> Result<bool> {
        self.live()?;
        let Some(extent) = (0..self.sb.extents())
            .filter(|&e| {
                self.ext_valid[e as usize] > 0 && self.ext_valid[e as usize] < EXTENT_BLOCKS as u32
            })
            .min_by_key(|&e| self.ext_valid[e as usize])
        else {
            return Ok(false);
        };
        let start = extent * EXTENT_BLOCKS;
        let clean_ok = self.lru.len(PageList::Clean) as usize + self.nv_free.len();
        if self.blocks_to_migrate(extent)? > clean_ok {
            return Ok(false);
        }
        // Every NVRAM page the round needs is allocated before any entry is recorded: an
        // allocation may evict a clean page whose SSD copy is in this very extent (its block
        // then needs migrating too, and the evicted page must not appear in the log). Each
        // pass allocates or stops; the need never exceeds the extent's 128 blocks.
        let mut pages: Vec<u32> = Vec::new();
        while pages.len() < self.blocks_to_migrate(extent)? {
            match self.alloc_page(false) {
                Ok(p) => pages.push(p),
                Err(NvmfsError::NoSpace(_)) => {
                    for p in pages {
                        self.free_page(p)?;
                    }
                    return Ok(false);
                }
                Err(e) => return Err(e),
            }
        }
        let mut entries = Vec::new();
        for lba in start..start + EXTENT_BLOCKS {
            if !self.bit(self.sb.ssd_bitmap_at, lba) {
                continue;
            }
            let (ino, block) = self.ssd_owner(lba);
            let slot = self
                .slot(ino, block as u64, false)?
                .expect("owner pointer exists");
            let cur = BlockAddr(self.get64(slot));
            if cur.as_ssd() == Some(lba) {
                // Migrate: the data goes to a fresh NVRAM page; the inode still points to SSD.
                let p = pages.pop().expect("allocated above");
                let mut buf = [0u8; PAGE_BYTES as usize];
                self.ssd_read(lba, &mut buf)?;
                self.page_mut(p).copy_from_slice(&buf);
                self.persist(self.data_at(p), PAGE_BYTES)?;
                entries.push(RedoEntry {
                    ino,
                    block,
                    new_addr: BlockAddr::nvram(p),
                });
            } else if let Some(q) = cur.as_nvram() {
                debug_assert_eq!(self.read_record(q).page_info, BlockAddr::ssd(lba));
                entries.push(RedoEntry {
                    ino,
                    block,
                    new_addr: cur,
                });
            }
        }
        debug_assert!(pages.is_empty(), "every allocated page was used");
        for p in pages {
            self.free_page(p)?;
        }
        let log = RedoLog { extent, entries };
        let redo_at = self.sb.redo_at as u64 * PAGE_BYTES;
        log.encode_body(
            &mut self.nv.bytes_mut()[redo_at as usize..(redo_at + PAGE_BYTES) as usize],
        );
        self.persist(redo_at, PAGE_BYTES)?;
        self.reached(KillPoint::CleanBeforeCommit);
        self.set32(redo_at, 1)?; // commit point
        self.reached(KillPoint::CleanAfterCommit);
        self.apply_redo(&log)?;
        self.set32(redo_at, 0)?;
        self.stats.cleaning_rounds += 1;
        self.stats.cleaning_moved_blocks += log.entries.len() as u64;
        self.stats.cleaning_recycled_blocks += EXTENT_BLOCKS;
        Ok(true)
    }

    /// Valid blocks of `extent` whose inode points at the SSD copy (they need an NVRAM page).
    fn blocks_to_migrate(&mut self, extent: u64) -> Result<usize> {
        let start = extent * EXTENT_BLOCKS;
        let mut need = 0;
        for lba in start..start + EXTENT_BLOCKS {
            if self.bit(self.sb.ssd_bitmap_at, lba) {
                let (ino, block) = self.ssd_owner(lba);
                let slot = self
                    .slot(ino, block as u64, false)?
                    .expect("owner pointer exists");
                if BlockAddr(self.get64(slot)).as_ssd() == Some(lba) {
                    need += 1;
                }
            }
        }
        Ok(need)
    }

    /// Applies a committed cleaning transaction at run time (idempotent).
    fn apply_redo(&mut self, log: &RedoLog) -> Result<()> {
        self.begin_lists()?;
        for e in &log.entries {
            let slot = self
                .slot(e.ino, e.block as u64, false)?
                .expect("owner pointer exists");
            let old = BlockAddr(self.get64(slot));
            let p = e
                .new_addr
                .as_nvram()
                .expect("cleaning moves blocks to NVRAM");
            let rec = PageRecord {
                list: PageList::Dirty,
                owner_ino: e.ino,
                owner_block: e.block,
                stamp: self.next_lru_stamp(),
                page_info: BlockAddr::HOLE,
            };
            self.write_record(p, &rec)?;
            self.lru.push_lru(PageList::Dirty, p);
            if old != e.new_addr {
                self.set64(slot, e.new_addr.0)?;
                self.adjust_counts(e.ino, 1, -1)?;
            }
        }
        let start = log.extent * EXTENT_BLOCKS;
        let moved: rustc_hash::FxHashSet<(u32, u32)> =
            log.entries.iter().map(|e| (e.ino, e.block)).collect();
        for lba in start..start + EXTENT_BLOCKS {
            if self.bit(self.sb.ssd_bitmap_at, lba) && moved.contains(&self.ssd_owner(lba)) {
                self.release_ssd(lba)?;
            }
        }
        self.end_lists()
    }

    // ---------------------------------------------------------------- mount-time recovery

    /// Rebuilds the RAM state from NVRAM (and the SSD for directories): replays a committed
    /// cleaning transaction, walks the namespace from the root, frees unreachable inodes and
    /// unreferenced blocks, and loads the LRU lists — or, when a crash interrupted an LRU /
    /// page_info update, resets them: NVRAM pages referenced by inodes go to the dirty list,
    /// the clean list is empty (§III-D).
    fn recover(&mut self) -> Result<()> {
        recovery::recover(self)
    }

    // ---------------------------------------------------------------- namespace

    /// Attributes of an inode.
    pub fn getattr(&self, ino: u32) -> Result<Attr> {
        self.live()?;
        let i = self.inode_checked(ino)?;
        Ok(Attr {
            ino,
            is_dir: i.is_dir(),
            mode: i.mode,
            nlink: i.nlink,
            size: i.size,
            nvram_blocks: i.nvram_blocks,
            ssd_blocks: i.ssd_blocks,
            mtime_ns: i.mtime_ns,
            ctime_ns: i.ctime_ns,
            uid: i.uid,
            gid: i.gid,
        })
    }

    /// Sets mode bits (file type kept), owner, and modification time.
    pub fn setattr(
        &mut self,
        ino: u32,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        mtime_ns: Option<u64>,
    ) -> Result<Attr> {
        self.live()?;
        let mut i = self.inode_checked(ino)?;
        if let Some(m) = mode {
            i.mode = (i.mode & S_IFMT) | (m & !S_IFMT);
        }
        if let Some(u) = uid {
            i.uid = u;
        }
        if let Some(g) = gid {
            i.gid = g;
        }
        if let Some(t) = mtime_ns {
            i.mtime_ns = t;
        }
        i.ctime_ns = (self.clock)();
        self.write_inode(ino, &i)?;
        self.getattr(ino)
    }

    fn dir_entries(&mut self, dir: u32) -> Result<Vec<(u64, DirEntry)>> {
        let size = self.inode_checked(dir)?.size;
        let mut buf = vec![0u8; size as usize];
        let n = self.read(dir, 0, &mut buf)?;
        Ok(buf[..n]
            .chunks_exact(DIRENT_BYTES as usize)
            .enumerate()
            .filter_map(|(i, c)| DirEntry::decode(c).ok().flatten().map(|e| (i as u64, e)))
            .collect())
    }

    fn check_name(name: &[u8]) -> Result<()> {
        if name.len() > NAME_MAX {
            return Err(NvmfsError::NameTooLong { max: NAME_MAX });
        }
        if name.is_empty() || name.contains(&b'/') || name == b"." || name == b".." {
            return Err(NvmfsError::InvalidArgument(format!(
                "bad name {:?}",
                String::from_utf8_lossy(name)
            )));
        }
        Ok(())
    }

    fn dir_checked(&self, dir: u32) -> Result<()> {
        if !self.inode_checked(dir)?.is_dir() {
            return Err(NvmfsError::NotDir);
        }
        Ok(())
    }

    /// The inode of `name` in `dir`.
    pub fn lookup(&mut self, dir: u32, name: &[u8]) -> Result<u32> {
        self.live()?;
        self.dir_checked(dir)?;
        self.find(dir, name)?
            .map(|(_, e)| e.ino)
            .ok_or(NvmfsError::NotFound)
    }

    fn find(&mut self, dir: u32, name: &[u8]) -> Result<Option<(u64, DirEntry)>> {
        Ok(self
            .dir_entries(dir)?
            .into_iter()
            .find(|(_, e)| e.name == name))
    }

    /// Entries of a directory (without "." and "..").
    pub fn readdir(&mut self, dir: u32) -> Result<Vec<DirEntry>> {
        self.live()?;
        self.dir_checked(dir)?;
        Ok(self.dir_entries(dir)?.into_iter().map(|(_, e)| e).collect())
    }

    fn alloc_inode(&mut self) -> Result<u32> {
        self.inode_free
            .pop()
            .ok_or(NvmfsError::NoSpace("inode table full"))
    }

    fn add_entry(&mut self, dir: u32, entry: &DirEntry) -> Result<()> {
        let size = self.inode_checked(dir)?.size;
        let mut buf = vec![0u8; size as usize];
        self.read(dir, 0, &mut buf)?;
        let slot = buf
            .chunks_exact(DIRENT_BYTES as usize)
            .position(|c| get_u32(c, 0) == 0)
            .map_or(size / DIRENT_BYTES, |s| s as u64);
        let mut b = [0u8; DIRENT_BYTES as usize];
        entry.encode(&mut b);
        // The entry's name first, its inode number (the commit) last.
        self.write_inner(dir, slot * DIRENT_BYTES + 4, &b[4..])?;
        self.write_inner(dir, slot * DIRENT_BYTES, &b[..4])
    }

    fn create_node(
        &mut self,
        dir: u32,
        name: &[u8],
        mode: u32,
        uid: u32,
        gid: u32,
    ) -> Result<Attr> {
        self.live()?;
        Self::check_name(name)?;
        self.dir_checked(dir)?;
        if self.find(dir, name)?.is_some() {
            return Err(NvmfsError::Exists);
        }
        let ino = self.alloc_inode()?;
        let is_dir = mode & S_IFMT == S_IFDIR;
        let now = (self.clock)();
        let inode = Inode {
            mode,
            nlink: if is_dir { 2 } else { 1 },
            mtime_ns: now,
            ctime_ns: now,
            uid,
            gid,
            ..Default::default()
        };
        self.write_inode(ino, &inode)?;
        let r = self.add_entry(
            dir,
            &DirEntry {
                ino,
                kind_dir: is_dir,
                name: name.to_vec(),
            },
        );
        if let Err(e) = r {
            if !self.crashed {
                self.write_inode(ino, &Inode::default())?;
                self.inode_free.push(ino);
            }
            return Err(e);
        }
        if is_dir {
            self.bump_nlink(dir, 1)?;
        }
        self.maybe_flush()?;
        self.getattr(ino)
    }

    /// Creates a regular file.
    pub fn create_file(
        &mut self,
        dir: u32,
        name: &[u8],
        perm: u32,
        uid: u32,
        gid: u32,
    ) -> Result<Attr> {
        self.create_node(dir, name, S_IFREG | (perm & 0o7777), uid, gid)
    }

    /// Creates a symbolic link to `target` (stored as the link's data, at most one page).
    pub fn symlink(
        &mut self,
        dir: u32,
        name: &[u8],
        target: &[u8],
        uid: u32,
        gid: u32,
    ) -> Result<Attr> {
        if target.is_empty() || target.len() as u64 > PAGE_BYTES {
            return Err(NvmfsError::NameTooLong {
                max: PAGE_BYTES as usize,
            });
        }
        let a = self.create_node(dir, name, S_IFLNK | 0o777, uid, gid)?;
        self.write_inner(a.ino, 0, target)?;
        self.maybe_flush()?;
        self.getattr(a.ino)
    }

    /// The target of a symbolic link.
    pub fn readlink(&mut self, ino: u32) -> Result<Vec<u8>> {
        self.live()?;
        let i = self.inode_checked(ino)?;
        if i.mode & S_IFMT != S_IFLNK {
            return Err(NvmfsError::InvalidArgument("not a symbolic link".into()));
        }
        let mut buf = vec![0u8; i.size as usize];
        let n = self.read(ino, 0, &mut buf)?;
        buf.truncate(n);
        Ok(buf)
    }

    /// A new name `new_dir/new_name` for the file `ino` (hard link). The link count goes up
    /// before the entry appears: a crash between leaves a count one too high (the file then
    /// outlives its names), never one too low.
    pub fn link(&mut self, ino: u32, new_dir: u32, new_name: &[u8]) -> Result<Attr> {
        self.live()?;
        Self::check_name(new_name)?;
        self.dir_checked(new_dir)?;
        let i = self.inode_checked(ino)?;
        if i.is_dir() {
            return Err(NvmfsError::NotPermitted("hard links to directories"));
        }
        if i.nlink == 0 {
            return Err(NvmfsError::NotFound);
        }
        if self.find(new_dir, new_name)?.is_some() {
            return Err(NvmfsError::Exists);
        }
        self.bump_nlink(ino, 1)?;
        let r = self.add_entry(
            new_dir,
            &DirEntry {
                ino,
                kind_dir: false,
                name: new_name.to_vec(),
            },
        );
        if let Err(e) = r {
            if !self.crashed {
                self.bump_nlink(ino, -1)?;
            }
            return Err(e);
        }
        self.maybe_flush()?;
        self.getattr(ino)
    }

    /// Creates a directory.
    pub fn mkdir(&mut self, dir: u32, name: &[u8], perm: u32, uid: u32, gid: u32) -> Result<Attr> {
        self.create_node(dir, name, S_IFDIR | (perm & 0o7777), uid, gid)
    }

    fn bump_nlink(&mut self, ino: u32, delta: i64) -> Result<()> {
        let at = self.inode_at(ino) + 4;
        let n = get_u32(self.nv.bytes(), at as usize) as i64 + delta;
        self.set32(at, n.max(0) as u32)
    }

    fn drop_link(&mut self, ino: u32) -> Result<()> {
        let i = self.read_inode(ino);
        let left = if i.is_dir() {
            0
        } else {
            i.nlink.saturating_sub(1)
        };
        if left > 0 || (!i.is_dir() && self.open.contains_key(&ino)) {
            // Still open: the file lives on, nameless, until its last close (`close`); a crash
            // meanwhile leaves it unreachable and mount frees it.
            return self.set32(self.inode_at(ino) + 4, left);
        }
        self.free_inode(ino)
    }

    fn free_inode(&mut self, ino: u32) -> Result<()> {
        self.truncate_blocks(ino, 0)?;
        self.write_inode(ino, &Inode::default())?;
        self.inode_free.push(ino);
        Ok(())
    }

    /// The caller opened `ino` (counted): unlinking its last name keeps the file until `close`.
    pub fn open_file(&mut self, ino: u32) -> Result<()> {
        self.live()?;
        self.inode_checked(ino)?;
        *self.open.entry(ino).or_insert(0) += 1;
        Ok(())
    }

    /// The caller closed `ino`; the last close of a file without a name frees it.
    pub fn close(&mut self, ino: u32) -> Result<()> {
        self.live()?;
        let Some(n) = self.open.get_mut(&ino) else {
            return Ok(());
        };
        *n -= 1;
        if *n > 0 {
            return Ok(());
        }
        self.open.remove(&ino);
        let i = self.inode_checked(ino)?;
        if i.nlink == 0 && !i.is_dir() {
            self.free_inode(ino)?;
        }
        Ok(())
    }

    fn remove_entry(&mut self, dir: u32, slot: u64) -> Result<()> {
        self.write_inner(dir, slot * DIRENT_BYTES, &[0u8; 4])
    }

    /// Removes a file name (and the file with its last link).
    pub fn unlink(&mut self, dir: u32, name: &[u8]) -> Result<()> {
        self.live()?;
        self.dir_checked(dir)?;
        let (slot, e) = self.find(dir, name)?.ok_or(NvmfsError::NotFound)?;
        if self.read_inode(e.ino).is_dir() {
            return Err(NvmfsError::IsDir);
        }
        self.remove_entry(dir, slot)?;
        self.drop_link(e.ino)
    }

    /// Removes an empty directory.
    pub fn rmdir(&mut self, dir: u32, name: &[u8]) -> Result<()> {
        self.live()?;
        self.dir_checked(dir)?;
        let (slot, e) = self.find(dir, name)?.ok_or(NvmfsError::NotFound)?;
        if !self.read_inode(e.ino).is_dir() {
            return Err(NvmfsError::NotDir);
        }
        if !self.dir_entries(e.ino)?.is_empty() {
            return Err(NvmfsError::NotEmpty);
        }
        self.remove_entry(dir, slot)?;
        self.drop_link(e.ino)?;
        self.bump_nlink(dir, -1)
    }

    /// Renames `dir/name` to `new_dir/new_name`, replacing a target of the same kind.
    pub fn rename(&mut self, dir: u32, name: &[u8], new_dir: u32, new_name: &[u8]) -> Result<()> {
        self.live()?;
        Self::check_name(new_name)?;
        self.dir_checked(dir)?;
        self.dir_checked(new_dir)?;
        let (slot, e) = self.find(dir, name)?.ok_or(NvmfsError::NotFound)?;
        if dir == new_dir && name == new_name {
            return Ok(());
        }
        let moving_dir = self.read_inode(e.ino).is_dir();
        if moving_dir && self.is_ancestor(e.ino, new_dir)? {
            return Err(NvmfsError::InvalidArgument(
                "cannot move a directory into itself".into(),
            ));
        }
        match self.find(new_dir, new_name)? {
            Some((tslot, t)) => {
                let target_dir = self.read_inode(t.ino).is_dir();
                if target_dir && !moving_dir {
                    return Err(NvmfsError::IsDir);
                }
                if !target_dir && moving_dir {
                    return Err(NvmfsError::NotDir);
                }
                if target_dir && !self.dir_entries(t.ino)?.is_empty() {
                    return Err(NvmfsError::NotEmpty);
                }
                // Repoint the target entry in place (one 4-byte store), then drop the old.
                let mut b = [0u8; DIRENT_BYTES as usize];
                DirEntry {
                    ino: e.ino,
                    kind_dir: moving_dir,
                    name: new_name.to_vec(),
                }
                .encode(&mut b);
                self.write_inner(new_dir, tslot * DIRENT_BYTES + 6, &b[6..7])?;
                self.write_inner(new_dir, tslot * DIRENT_BYTES, &b[..4])?;
                self.remove_entry(dir, slot)?;
                self.drop_link(t.ino)?;
                if target_dir {
                    self.bump_nlink(new_dir, -1)?;
                }
            }
            None => {
                self.add_entry(
                    new_dir,
                    &DirEntry {
                        ino: e.ino,
                        kind_dir: moving_dir,
                        name: new_name.to_vec(),
                    },
                )?;
                self.remove_entry(dir, slot)?;
            }
        }
        if moving_dir && dir != new_dir {
            self.bump_nlink(dir, -1)?;
            self.bump_nlink(new_dir, 1)?;
        }
        self.maybe_flush()
    }

    /// Whether `ancestor` is `dir` or one of its ancestors (walks down from `ancestor`).
    fn is_ancestor(&mut self, ancestor: u32, dir: u32) -> Result<bool> {
        if ancestor == dir {
            return Ok(true);
        }
        let mut stack = vec![ancestor];
        while let Some(d) = stack.pop() {
            for e in self.dir_entries(d)? {
                if e.1.kind_dir {
                    if e.1.ino == dir {
                        return Ok(true);
                    }
                    stack.push(e.1.ino);
                }
            }
        }
        Ok(false)
    }

    /// Sets the size of a regular file (shrinking frees blocks; growing leaves a hole).
    pub fn truncate(&mut self, ino: u32, size: u64) -> Result<()> {
        self.live()?;
        let i = self.inode_checked(ino)?;
        if i.is_dir() {
            return Err(NvmfsError::IsDir);
        }
        if size > MAX_FILE_BYTES {
            return Err(NvmfsError::FileTooLarge {
                max_bytes: MAX_FILE_BYTES,
            });
        }
        if size < i.size && !size.is_multiple_of(PAGE_BYTES) {
            // Zero the tail of the last kept block, so a later extension reads zeros.
            let tail = PAGE_BYTES - size % PAGE_BYTES;
            let block = size / PAGE_BYTES;
            let zeros = vec![0u8; tail as usize];
            if let Some(slot) = self.slot(ino, block, false)? {
                if !BlockAddr(self.get64(slot)).is_hole() {
                    self.write_block(ino, block, size % PAGE_BYTES, &zeros)?;
                }
            }
        }
        let at = self.inode_at(ino);
        self.set64(at + INODE_SIZE_AT as u64, size)?;
        if size < i.size {
            self.truncate_blocks(ino, size.div_ceil(PAGE_BYTES))?;
        }
        let now = (self.clock)();
        self.set64(at + 24, now)?;
        self.maybe_flush()
    }

    /// Frees every block at or beyond `keep` blocks, and indirect blocks no longer needed.
    fn truncate_blocks(&mut self, ino: u32, keep: u64) -> Result<()> {
        let mut blocks = Vec::new();
        recovery::for_each_block(self, ino, |b, slot, a| blocks.push((b, slot, a)));
        for (b, slot, a) in blocks {
            if b < keep {
                continue;
            }
            self.set64(slot, 0)?;
            if let Some(p) = a.as_nvram() {
                let rec = self.read_record(p);
                self.begin_lists()?;
                if let Some(lba) = rec.page_info.as_ssd() {
                    self.release_ssd(lba)?;
                }
                self.free_page(p)?;
                self.end_lists()?;
                self.adjust_counts(ino, -1, 0)?;
            } else if let Some(lba) = a.as_ssd() {
                self.release_ssd(lba)?;
                self.adjust_counts(ino, 0, -1)?;
            }
        }
        let inode_at = self.inode_at(ino);
        let single = inode_at + INODE_INDIRECT_AT as u64;
        if keep <= DIRECT_POINTERS as u64 {
            self.free_indirect(single)?;
        }
        let dbl_at = inode_at + INODE_DOUBLE_AT as u64;
        if let Some(dbl) = BlockAddr(self.get64(dbl_at)).as_nvram() {
            let first = DIRECT_POINTERS as u64 + POINTERS_PER_BLOCK;
            for k in 0..POINTERS_PER_BLOCK {
                // Indirect block k covers [first + k*512, first + (k+1)*512).
                if keep <= first + k * POINTERS_PER_BLOCK {
                    self.free_indirect(self.data_at(dbl) + 8 * k)?;
                }
            }
            if keep <= first {
                self.free_indirect(dbl_at)?;
            }
        }
        Ok(())
    }

    fn free_indirect(&mut self, ptr_at: u64) -> Result<()> {
        if let Some(p) = BlockAddr(self.get64(ptr_at)).as_nvram() {
            self.set64(ptr_at, 0)?;
            self.free_page(p)?;
        }
        Ok(())
    }

    /// fsync: NVRAM is persistent and updated in place, so this is a full persist barrier.
    pub fn fsync(&mut self, ino: u32) -> Result<()> {
        self.live()?;
        self.inode_checked(ino)?;
        self.nv.persist_all()?;
        self.step()
    }

    /// Resolves an absolute path ("/a/b").
    pub fn resolve(&mut self, path: &str) -> Result<u32> {
        let mut ino = ROOT_INO;
        for part in path.split('/').filter(|p| !p.is_empty()) {
            ino = self.lookup(ino, part.as_bytes())?;
        }
        Ok(ino)
    }

    // ---------------------------------------------------------------- invariants

    /// Lists cover the NVRAM data pages; every listed page is pointed at by its owner; clean
    /// pages have a valid SSD copy and dirty pages none; per-extent counts match the bitmap.
    pub fn check_invariants(&mut self) -> std::result::Result<(), ftl::InvariantViolation> {
        self.lru.check()?;
        let (d, c, f, ind) = self.list_lengths();
        if d + c + f + ind != self.sb.data_pages {
            return Err("list lengths do not add up to the NVRAM data pages".into());
        }
        if d > self.sb.dirty_capacity {
            return Err(ftl::violation!(
                "dirty list {d} exceeds its capacity {}",
                self.sb.dirty_capacity
            ));
        }
        for p in 0..self.sb.data_pages {
            let rec = self.read_record(p);
            let list = self.lru.list_of(p);
            if rec.list != list {
                return Err(ftl::violation!(
                    "page {p}: record says {:?}, RAM says {list:?}",
                    rec.list
                ));
            }
            if self.bit(self.sb.nvram_bitmap_at, p as u64) != (list != PageList::Free) {
                return Err(ftl::violation!(
                    "page {p}: bitmap disagrees with list {list:?}"
                ));
            }
            match list {
                PageList::Dirty | PageList::Clean => {
                    let slot = self
                        .slot(rec.owner_ino, rec.owner_block as u64, false)
                        .map_err(|e| {
                            ftl::violation!("page {p}: its owner's pointer is unreadable: {e}")
                        })?
                        .ok_or(ftl::violation!("page {p}: owner has no pointer"))?;
                    if BlockAddr(self.get64(slot)) != BlockAddr::nvram(p) {
                        return Err(ftl::violation!("page {p}: owner does not point to it"));
                    }
                    let info = rec.page_info.as_ssd();
                    if (list == PageList::Clean) != info.is_some() {
                        return Err(ftl::violation!(
                            "page {p} on {list:?} with page_info {info:?}"
                        ));
                    }
                    if let Some(lba) = info {
                        if !self.bit(self.sb.ssd_bitmap_at, lba)
                            || self.ssd_owner(lba) != (rec.owner_ino, rec.owner_block)
                        {
                            return Err(ftl::violation!("page {p}: SSD copy {lba} not owned"));
                        }
                    }
                }
                _ => {}
            }
        }
        // Inode → page direction: every NVRAM pointer of a live inode names a page whose record
        // says that inode and block own it (no page is pointed at twice).
        for ino in 1..self.sb.inode_count {
            if self.read_inode(ino).mode == 0 {
                continue;
            }
            let mut bad = None;
            recovery::for_each_block(self, ino, |b, _, a| {
                if let Some(p) = a.as_nvram() {
                    let rec = self.read_record(p);
                    if bad.is_none() && (rec.owner_ino, rec.owner_block as u64) != (ino, b) {
                        bad = Some(ftl::violation!(
                            "inode {ino} block {b} points to page {p}, owned by ({}, {})",
                            rec.owner_ino,
                            rec.owner_block
                        ));
                    }
                }
            });
            if let Some(m) = bad {
                return Err(m);
            }
        }
        for e in 0..self.sb.extents() {
            let n = (e * EXTENT_BLOCKS..(e + 1) * EXTENT_BLOCKS)
                .filter(|&l| self.bit(self.sb.ssd_bitmap_at, l))
                .count() as u32;
            if n != self.ext_valid[e as usize] {
                return Err(ftl::violation!(
                    "extent {e}: {n} valid blocks, count says {}",
                    self.ext_valid[e as usize]
                ));
            }
        }
        self.dev.check_invariants()
    }
}
