//! The log engine Atomic-Write and LightTx share (Möbius §II-C; docs/atomic-write.md, docs/lighttx.md): a log-structured,
//! page-mapped FTL whose mapping is persisted as a copy-on-write tree (translation pages → GTD
//! pages → a root page in a two-block root ring), and whose log tail — the data pages written
//! since the tree last covered them — is found again after a power cut by scanning a bounded set
//! of blocks named in the root.
//!
//! The two designs differ in exactly the parts the papers differ in:
//! - how a transaction's commit is recognised in the log ([`Scheme`]): Atomic-Write's one-bit
//!   commit flag (pages carry 0, the last page 1) or LightTx's transaction id in every page's OOB
//!   plus a commit record;
//! - which blocks recovery scans ([`WindowPolicy`]): Atomic-Write re-persists the mapping and a
//!   fresh, small reservation at every commit ("scan zone fixed and small"); LightTx keeps a
//!   sliding window of `zone` blocks (available + unavailable zones) that only slides when its
//!   available part is used up, and recovery scans the whole window.
//!
//! Power-cut discipline (each rule is a `not_before` dependency):
//! - a root is programmed only after every data page it maps, every tree page it points to and
//!   every erase issued before it are on flash; the tree pages it supersedes are invalidated as
//!   of the root's end, so GC cannot erase them earlier;
//! - a block is erased by GC only after a root that no longer needs it;
//! - a transaction's closing page (Atomic-Write) or commit record (LightTx) starts only after all
//!   its pages (and GC copies of them) are on flash;
//! - a page written to an LPN after a commit starts after that commit is on flash (per-LPN
//!   barrier), so a later write never survives without the transaction it overwrote.

use crate::format::{
    decode_entries, encode_entries, OobRecord, Root, KIND_COMMIT, KIND_DATA, KIND_GTD, KIND_ROOT,
    KIND_TRANSLATION, KIND_ZONE, OOB_BYTES,
};
use flash::{BlockId, ChipId, Content, Flash, Geometry, Lpn, OpCause, PageState, Ppn, ReadStatus};
use ftl::media;
use ftl::{
    BlockPool, BlockState, Completion, FtlError, GcPolicy, PageOutcome, RecoveryReport, Space,
    TxUuid, Validity,
};
use rustc_hash::{FxHashMap, FxHashSet};

pub const STREAM_DATA: usize = 0;
pub const STREAM_GC: usize = 1;
pub const STREAM_MAP: usize = 2;
const STREAMS: usize = 3;
pub const NONE: u32 = u32::MAX;

const OWNER_MASK: u32 = 0xC000_0000;
const OWNER_TRANSLATION: u32 = 0x8000_0000;
const OWNER_GTD: u32 = 0x4000_0000;
const OWNER_COMMIT: u32 = 0xC000_0000;
/// Zone-record pieces share the commit-record tag space, told apart by bit 29.
const OWNER_ZONE: u32 = 0xE000_0000;

/// How a transaction's commit is recorded in the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scheme {
    /// Atomic-Write: one commit bit per page; 0 on every page of a transaction but the last.
    CommitBit,
    /// LightTx: transaction id in every page's OOB, a commit record page per transaction.
    CommitRecord,
}

/// Which free blocks may be opened between two roots, i.e. what recovery must scan.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WindowPolicy {
    /// Atomic-Write: every root reserves the next `n` free blocks of each chip.
    PerChip(u32),
    /// LightTx: a window of this many blocks (available + unavailable zones).
    Zone(u32),
}

#[derive(Clone, Debug)]
pub struct EngineConfig {
    pub design: &'static str,
    pub scheme: Scheme,
    pub window: WindowPolicy,
    pub over_provisioning: f64,
    pub max_tx_pages: u32,
    /// New pages all running transactions may hold at once ([`transaction_room`], at least
    /// `max_tx_pages`): their previous versions stay live until they commit.
    pub tx_room_pages: u32,
    pub gc_policy: GcPolicy,
    /// GC runs while fewer blocks are free ([`default_gc_free_blocks`], at least
    /// [`min_gc_free_blocks`]); the mark is also kept out of the exported capacity.
    pub gc_free_blocks: u32,
}

/// The block-device accessors of a design built on the [`Engine`] held in its field `e`
/// (Atomic-Write, LightTx), inside its `impl BlockDevice`: promise, capacity, flash,
/// invariants and memory.
#[macro_export]
macro_rules! engine_accessors {
    () => {
        fn promise(&self) -> ftl::Promise {
            ftl::Promise::AtomicTransactions
        }
        fn logical_pages(&self) -> u32 {
            self.e.logical_pages()
        }
        fn flash(&self) -> &flash::Flash {
            &self.e.flash
        }
        fn flash_mut(&mut self) -> &mut flash::Flash {
            &mut self.e.flash
        }
        fn into_flash(self: Box<Self>) -> flash::Flash {
            self.e.flash
        }
        fn check_invariants(&self) -> Result<(), ftl::InvariantViolation> {
            self.e.check_invariants()
        }
        fn memory(&self) -> Vec<(String, u64)> {
            let mut m = self.flash().memory();
            m.extend(self.e.memory());
            m
        }
    };
}

impl Engine {
    /// What a design on the engine offers; `concurrent`: more than one transaction at once.
    pub fn capabilities(&self, concurrent: bool) -> ftl::TxCapabilities {
        ftl::TxCapabilities {
            static_tx: true,
            async_swrite: false,
            dynamic_tx: true,
            concurrent_static: concurrent,
            concurrent_dynamic: concurrent,
            sread: true,
            abort: true,
            max_tx_pages: self.cfg.max_tx_pages as u64,
        }
    }
}

impl EngineConfig {
    /// The `--param`s both designs take, around the design's own window: `over_provisioning`
    /// (0.2), `max_tx_pages` (1,024 pages = 4 MB, at most 1/16 of the device and half the
    /// over-provisioned pages, [`transaction_room`]), `gc_policy` (greedy), `gc_free_blocks`
    /// ([`default_gc_free_blocks`], at least [`min_gc_free_blocks`]).
    pub fn with_common_params(
        o: &ftl::DesignOptions,
        g: &flash::Geometry,
        design: &'static str,
        scheme: Scheme,
        window: WindowPolicy,
    ) -> Result<EngineConfig, FtlError> {
        let op: f64 = o.get("over_provisioning", 0.2)?;
        if !(0.05..=0.9).contains(&op) {
            return Err(FtlError::InvalidOption(
                "over_provisioning must be within 0.05..=0.9".into(),
            ));
        }
        let own = default_gc_free_blocks(g);
        let mark = ftl::gc_free_blocks(o, design, own, min_gc_free_blocks(g))?;
        let room = transaction_room(g, op, mark).max(1);
        let cap = (g.pages() / 16).min(room);
        let max_tx: u32 = o.get("max_tx_pages", 1024u32.min(cap))?;
        if max_tx == 0 || max_tx > cap {
            return Err(FtlError::InvalidOption(format!(
                "max_tx_pages must be within 1..={cap} (at most 1/16 of the device, and half \
                 the over-provisioned pages: a transaction keeps its old versions live until it \
                 commits)"
            )));
        }
        let policy: GcPolicy = o.get::<String>("gc_policy", "greedy".into())?.parse()?;
        Ok(EngineConfig {
            design,
            scheme,
            window,
            over_provisioning: op,
            max_tx_pages: max_tx,
            tx_room_pages: room,
            gc_policy: policy,
            gc_free_blocks: mark,
        })
    }
}

/// A running transaction.
#[derive(Clone, Debug)]
pub struct Tx {
    pub uuid: TxUuid,
    /// LightTx on-flash id (0 for Atomic-Write, whose pages carry no id).
    pub id: u32,
    pub first_seq: u64,
    /// Pages written so far, in order (an LPN may repeat; the last one wins).
    pub pages: Vec<(u32, Ppn)>,
    /// When every page (and every GC copy of one) is on flash.
    pub end_ns: u64,
    pub dynamic: bool,
}

#[derive(Clone, Debug, Default)]
pub struct EngineStats {
    pub roots: u64,
    pub tree_pages: u64,
    pub commit_records: u64,
    pub gc_victims: u64,
    pub window_refreshes: u64,
    pub commits: u64,
    pub aborts: u64,
}

pub struct Engine {
    pub flash: Flash,
    pub cfg: EngineConfig,
    pub space: Space,
    ring: [BlockId; 2],
    ring_cur: usize,
    ring_next: u32,
    last_root_end: u64,
    root_seq: u64,
    meta_seq: u64,
    logical: u32,
    entries: u32,
    /// Committed mapping LPN → PPN (`NONE` = unmapped).
    pub map: Vec<u32>,
    tpage: Vec<u32>,
    tdirty: ftl::DirtySet,
    /// LPNs whose `map` entry changed since their translation page was last written (a page is
    /// rewritten from its previous copy with these entries: [`Engine::translation_page_bytes`]).
    /// Noting more than changed is harmless; every change must be noted.
    tchanged: Vec<u32>,
    /// crc32c of each translation page as this engine last wrote it (`None`: not written since
    /// start or recovery, so its next write encodes it whole).
    tcrc: Vec<Option<u32>>,
    /// Updates a page's crc as its words change.
    page_crc: flash::WordCrc,
    gpage: Vec<u32>,
    gdirty: ftl::DirtySet,
    old_tree: Vec<Ppn>,
    zone_pages: Vec<u32>,
    zone_dirty: bool,
    pub next_seq: u64,
    pub next_tx: u32,
    /// Highest data/commit sequence number programmed in each block since its erase (0 = none).
    max_seq: Vec<u64>,
    in_scan: Vec<bool>,
    scan_list: Vec<BlockId>,
    reserved: Vec<bool>,
    reserved_list: Vec<BlockId>,
    /// When the root that announced each block (listed it in its window) is on flash: recovery
    /// scans only the blocks a durable root names, so no page in the block may be programmed —
    /// and acknowledged — before that root.
    announced_ns: Vec<u64>,
    /// Blocks the window refresh of the root being written adds (their announcement ends with it).
    announcing: Vec<BlockId>,
    data_end_ns: u64,
    erase_end_ns: u64,
    /// No data page starts before this (Atomic-Write: after an abort's root).
    pub barrier_ns: u64,
    /// Per-LPN barrier: later pages of the LPN start after this commit end (sparse).
    lpn_barrier: FxHashMap<u32, u64>,
    /// Live LightTx commit records: ppn → seq (kept until the tail passes them).
    commits: FxHashMap<u32, u64>,
    pub txs: Vec<Tx>,
    /// Recently resolved uuids (to tell AlreadyCommitted from UnknownTx).
    pub committed_uuids: FxHashSet<u64>,
    pub stats: EngineStats,
    arrivals: ftl::ArrivalClock,
    /// GC victims whose live pages are copied, erased after the next root.
    gc_copied: Vec<BlockId>,
    /// When the last GC copy so far is on flash.
    gc_copies_end: u64,
}

/// The record of a GC copy of live page `from` (of `owner`) rebuilt from the mapping, for
/// a page lost whole to the media: neither its data nor its spare area decodes
/// ([`media::record_of_read`]). A committed data page is `map`'s (the engine's copy-on-write
/// mapping tree, docs/atomic-write.md): its copy is durable only through the next root, written before the
/// victim is erased, so its record needs no sequence number — it takes 0, below every
/// root's tail (data sequence numbers start at 1), which the recovery's tail scan never
/// replays. Tree pages and zone-record pieces are named by the root or the GTD, so their
/// copies need only their kind and number. A page of a running transaction, or a LightTx
/// commit record, carries the sequence number or transaction id its commit rule reads at
/// recovery, which the engine keeps nowhere else: reported lost.
fn copy_record(map: &[u32], owner: u32, from: Ppn) -> Result<OobRecord, FtlError> {
    let id = owner & !OWNER_MASK;
    let kind = match owner & OWNER_MASK {
        0 if map[id as usize] == from.0 => KIND_DATA,
        OWNER_TRANSLATION => KIND_TRANSLATION,
        OWNER_GTD => KIND_GTD,
        _ if owner & OWNER_ZONE == OWNER_ZONE => KIND_ZONE,
        _ => {
            return Err(FtlError::MediaLoss {
                ppn: from,
                what: "the record of a running transaction's page or of a commit record".into(),
            })
        }
    };
    let id = if kind == KIND_ZONE {
        owner & !OWNER_ZONE
    } else {
        id
    };
    Ok(OobRecord {
        kind,
        id,
        ..OobRecord::default()
    })
}

/// Pages of the mapping tree (translation pages and the GTD pages that locate them).
fn tree_pages(g: &Geometry) -> u32 {
    let entries = g.page_bytes / 4;
    let tvpns = g.pages().div_ceil(entries);
    tvpns + tvpns.div_ceil(entries)
}

/// Blocks a root flush may need: every tree page written back at once (a random workload
/// dirties them all between two window refreshes, and the old tree pages stay live until the
/// new root is on flash), spread over chips, each of which may open one block more than its
/// share fills.
fn tree_room(g: &Geometry) -> u32 {
    let pages = tree_pages(g);
    pages.div_ceil(g.pages_per_block) + pages.min(g.chips())
}

/// Free blocks below which GC stops copying and erases the victims it has copied (after one
/// root): room for that root's tree pages, one victim's copies (a new block on each chip at
/// most) and two spare. The least `gc_free_blocks` ([`min_gc_free_blocks`]).
fn gc_floor(g: &Geometry) -> u32 {
    tree_room(g) + g.chips() + 2
}

/// Victims GC copies before one root makes all their moves durable and lets them be erased
/// (any root does: a window refresh too). One root per victim wrote back a tree page for
/// nearly every page moved once the tree outgrew a few pages (a 1 GB device reached write
/// amplification 200 and then ran out of space); a batch shares one write-back among many
/// victims. Twice the tree's blocks, so a full write-back costs at most half a block per victim.
fn gc_batch(g: &Geometry) -> u32 {
    2 * tree_pages(g).div_ceil(g.pages_per_block)
}

/// GC's free-block mark by default [R] (neither Atomic-Write's paper nor the Möbius paper
/// gives one): GC runs when fewer blocks than this are free, [`gc_floor`] and one batch of
/// victims above it.
pub fn default_gc_free_blocks(g: &Geometry) -> u32 {
    gc_floor(g) + gc_batch(g)
}

/// The least `gc_free_blocks`: [`gc_floor`], where GC flushes a root to erase the victims it
/// copied; below it a root's tree pages and a victim's copies may find no free block.
pub fn min_gc_free_blocks(g: &Geometry) -> u32 {
    gc_floor(g)
}

/// Half the pages the exported capacity leaves free at `over_provisioning`: a transaction
/// keeps the previous versions of its pages live until it commits, so on a device whose live
/// data fills the capacity its new pages must fit there, beside what GC copies (on one chip at
/// 5 %, 256-page transactions met "no space": found by the NBD crash soak's longest-write test).
fn transaction_room(g: &Geometry, over_provisioning: f64, gc_free_blocks: u32) -> u32 {
    let reserved = reserved_blocks(g, gc_free_blocks);
    let usable = g.blocks().saturating_sub(reserved) * g.pages_per_block;
    usable.saturating_sub(ftl::logical_pages(g, reserved, over_provisioning)) / 2
}

/// Blocks that never hold the host's data at steady state: the root ring, the free blocks GC
/// keeps in reserve and one open block per stream and chip. The exported capacity leaves them
/// out, so the over-provisioning is real space GC can reclaim: an engine that counted only the
/// ring exported more than a 8-chip, 16-block-per-chip device can hold at 80 % fill and ran out
/// of space (found by the seed soak on the `wide` geometry).
fn reserved_blocks(g: &Geometry, gc_free_blocks: u32) -> u32 {
    2 + ftl::working_blocks(g, STREAMS, gc_free_blocks)
}

/// What recovery's scan of the log tail found (step 3).
struct TailScan {
    /// The blocks scanned, each from its first page to read.
    blocks: Vec<(BlockId, u32)>,
    /// Data and commit records found, with where.
    found: Vec<(OobRecord, Ppn)>,
    block_used: Vec<bool>,
    /// Blocks whose first page was erased.
    known_free: Vec<bool>,
    in_scan_set: Vec<bool>,
    pages_read: u64,
    /// Zone-record pages read to learn the region.
    zone_reads: u64,
}

impl Engine {
    /// Heap bytes per structure: the block space and the page mapping with its translation
    /// pages' dirty state.
    pub fn memory(&self) -> Vec<(String, u64)> {
        use flash::vec_bytes;
        let mut m = self.space.memory();
        m.push((
            "engine.mapping".into(),
            vec_bytes(&self.map)
                + vec_bytes(&self.tpage)
                + self.tdirty.memory()
                + vec_bytes(&self.tchanged)
                + vec_bytes(&self.tcrc)
                + self.page_crc.memory()
                + vec_bytes(&self.gpage)
                + self.gdirty.memory()
                + vec_bytes(&self.old_tree),
        ));
        m
    }

    fn build(flash: Flash, cfg: EngineConfig) -> Result<Engine, FtlError> {
        let g = flash.geometry().clone();
        if g.chips() < 1 || g.blocks_per_chip < 8 {
            return Err(FtlError::InvalidOption(format!(
                "{}: device too small",
                cfg.design
            )));
        }
        ftl::require_spare_area(cfg.design, OOB_BYTES, &flash)?;
        let ring = if g.chips() > 1 {
            [g.block(ChipId(0), 0), g.block(ChipId(1), 0)]
        } else {
            [g.block(ChipId(0), 0), g.block(ChipId(0), 1)]
        };
        let pool = BlockPool::new(&g, STREAMS, |b| ring.contains(&b));
        let space = Space::new(pool, Validity::new(&g), cfg.gc_policy, 1000);
        let reserved = reserved_blocks(&g, cfg.gc_free_blocks);
        let logical = ftl::logical_pages(&g, reserved, cfg.over_provisioning);
        assert!(
            logical < OWNER_GTD,
            "LPNs must leave the owner tag bits free"
        );
        let entries = g.page_bytes / 4;
        let tvpns = logical.div_ceil(entries);
        let gtds = tvpns.div_ceil(entries);
        let blocks = g.blocks() as usize;
        // Worst-case root: every GTD pointer, the window, open blocks and a maximal transaction.
        let window_blocks = match cfg.window {
            WindowPolicy::PerChip(n) => n * g.chips(),
            WindowPolicy::Zone(z) => z + g.chips(),
        };
        let worst_scan = window_blocks
            + 2 * g.chips()
            + cfg.max_tx_pages.div_ceil(g.pages_per_block)
            + g.chips();
        let zone_pieces = (56 + 12 * worst_scan as usize).div_ceil(g.page_bytes as usize);
        let worst = 56 + 4 * gtds as usize + 4 * zone_pieces;
        if worst > g.page_bytes as usize {
            return Err(FtlError::InvalidOption(format!(
                "{}: the root page cannot hold the window and transaction limits ({worst} > {} bytes); lower the zone or max_tx_pages",
                cfg.design, g.page_bytes
            )));
        }
        Ok(Engine {
            ring,
            ring_cur: 0,
            ring_next: 0,
            last_root_end: 0,
            root_seq: 0,
            meta_seq: 1,
            logical,
            entries,
            map: vec![NONE; logical as usize],
            tpage: vec![NONE; tvpns as usize],
            tdirty: ftl::DirtySet::new(tvpns as usize),
            tchanged: Vec::new(),
            tcrc: vec![None; tvpns as usize],
            page_crc: flash::WordCrc::new(g.page_bytes as usize),
            gpage: vec![NONE; gtds as usize],
            gdirty: ftl::DirtySet::new(gtds as usize),
            old_tree: Vec::new(),
            zone_pages: Vec::new(),
            zone_dirty: true,
            next_seq: 1,
            next_tx: 1,
            max_seq: vec![0; blocks],
            in_scan: vec![false; blocks],
            scan_list: Vec::new(),
            reserved: vec![false; blocks],
            reserved_list: Vec::new(),
            announced_ns: vec![0; blocks],
            announcing: Vec::new(),
            data_end_ns: 0,
            erase_end_ns: 0,
            barrier_ns: 0,
            lpn_barrier: FxHashMap::default(),
            commits: FxHashMap::default(),
            txs: Vec::new(),
            committed_uuids: FxHashSet::default(),
            stats: EngineStats::default(),
            arrivals: ftl::ArrivalClock::starting_at(0),
            gc_copied: Vec::new(),
            gc_copies_end: 0,
            space,
            flash,
            cfg,
        })
    }

    /// Builds the engine on an erased device and writes its first root.
    pub fn format(flash: Flash, cfg: EngineConfig) -> Result<Engine, FtlError> {
        let mut e = Engine::build(flash, cfg)?;
        let now = e.flash.idle_ns();
        e.flush_root(now, true)?;
        Ok(e)
    }

    pub fn logical_pages(&self) -> u32 {
        self.logical
    }

    fn tvpn(&self, lpn: u32) -> usize {
        (lpn / self.entries) as usize
    }

    pub fn check_arrival(&mut self, arrival: u64) -> Result<(), FtlError> {
        self.arrivals.admit(arrival)?;
        Ok(())
    }

    pub fn check_lpn(&self, lpn: Lpn) -> Result<(), FtlError> {
        ftl::check_range(lpn, 1, self.logical)
    }

    // ------------------------------------------------------------ requests both designs serve alike

    /// A plain write, after the design's own checks: every page is a one-page transaction (its
    /// commit bit set), acknowledged when it is on flash.
    pub fn write_plain(
        &mut self,
        start: Lpn,
        pages: &[Content],
        arrival_ns: u64,
    ) -> Result<Completion, FtlError> {
        let mut ack = arrival_ns;
        for (i, c) in pages.iter().enumerate() {
            self.make_room(arrival_ns)?;
            let end = self.write_plain_page(start.0 + i as u32, c, 1, arrival_ns)?;
            ack = ack.max(end);
        }
        Ok(Completion {
            arrival_ns,
            ack_ns: ack,
        })
    }

    /// A flush waits for every page written so far: an acknowledged page is durable once it
    /// is on flash (the log scan finds it).
    pub fn flush_request(&mut self, arrival_ns: u64) -> Result<Completion, FtlError> {
        self.check_arrival(arrival_ns)?;
        Ok(Completion {
            arrival_ns,
            ack_ns: arrival_ns.max(self.data_end_ns()),
        })
    }

    /// Unmaps `count` pages from `start`, after the design's own checks (persisted with the
    /// next root).
    pub fn trim_pages(&mut self, start: Lpn, count: u32, arrival_ns: u64) -> Completion {
        for i in 0..count {
            self.trim_page(start.0 + i, arrival_ns);
        }
        Completion {
            arrival_ns,
            ack_ns: arrival_ns,
        }
    }

    /// Whether `pages` more new pages of transactions fit beside those of the running ones in
    /// the room the over-provisioning leaves them (`tx_room_pages`): else `TxRoomTaken`. A
    /// transaction keeps its pages' previous versions live until it commits, so on a full
    /// device several long ones at once met "no space" (LightTx, four of 256 pages on `small`).
    pub fn check_room(&self, pages: u64) -> Result<(), FtlError> {
        let in_flight: u64 = self.txs.iter().map(|t| t.pages.len() as u64).sum();
        ftl::check_tx_room(pages, in_flight, self.cfg.tx_room_pages as u64)
    }

    /// The page set of a static transaction: not empty, within `max_tx_pages` and the room
    /// the running transactions leave, inside the device, no page twice; `each` adds the
    /// design's own check of every page.
    pub fn check_static(
        &self,
        pages: &[(Lpn, Content)],
        mut each: impl FnMut(Lpn) -> Result<(), FtlError>,
    ) -> Result<(), FtlError> {
        if pages.is_empty() {
            return Err(FtlError::EmptyRequest);
        }
        let max = self.cfg.max_tx_pages as u64;
        if pages.len() as u64 > max {
            return Err(FtlError::TxTooLarge {
                pages: pages.len() as u64,
                max,
            });
        }
        self.check_room(pages.len() as u64)?;
        for (i, (l, _)) in pages.iter().enumerate() {
            self.check_lpn(*l)?;
            if pages[..i].iter().any(|(m, _)| m == l) {
                return Err(FtlError::DuplicatePage { lpn: *l });
            }
            each(*l)?;
        }
        Ok(())
    }

    /// Reads through the committed map, or through running transaction `tx`'s pages first.
    pub fn read_view(
        &mut self,
        tx: Option<usize>,
        start: Lpn,
        count: u32,
        arrival: u64,
        out: &mut Vec<PageOutcome>,
    ) -> Result<Completion, FtlError> {
        self.check_arrival(arrival)?;
        ftl::check_range(start, count as u64, self.logical_pages())?;
        out.clear();
        let mut ack = arrival;
        for i in 0..count {
            let lpn = start.0 + i;
            let own = tx.and_then(|k| {
                self.txs[k]
                    .pages
                    .iter()
                    .rev()
                    .find(|p| p.0 == lpn)
                    .map(|p| p.1 .0)
            });
            let ppn = own.unwrap_or(self.map[lpn as usize]);
            let (o, end) = self.read_ppn(ppn, arrival)?;
            out.push(o);
            ack = ack.max(end);
        }
        Ok(Completion {
            arrival_ns: arrival,
            ack_ns: ack,
        })
    }

    /// Oldest data sequence number not yet covered by the tree (the log tail starts here).
    pub fn tail_seq(&self) -> u64 {
        self.txs
            .iter()
            .map(|t| t.first_seq)
            .min()
            .unwrap_or(self.next_seq)
            .min(self.next_seq)
    }

    // ----- allocation and the window -------------------------------------------------------

    /// True when `stream` would have to open a block the current root does not announce.
    fn window_exhausted(&self, stream: usize) -> bool {
        let chips = self.flash.geometry().chips();
        (0..chips).any(|c| {
            let chip = ChipId(c);
            self.space.pool.open_block(stream, chip).is_none()
                && self
                    .space
                    .pool
                    .free_queue(chip)
                    .next()
                    .is_some_and(|b| !self.reserved[b.0 as usize])
        })
    }

    fn alloc(&mut self, stream: usize, now: u64) -> Result<Ppn, FtlError> {
        if stream != STREAM_MAP && self.window_exhausted(stream) {
            self.stats.window_refreshes += 1;
            self.flush_root(now, true)?;
        }
        let ppn = self
            .space
            .allocate(stream, &self.flash)
            .ok_or(FtlError::NoSpace)?;
        let g = self.flash.geometry();
        if g.page_in_block(ppn) == 0 {
            let b = g.block_of(ppn);
            self.reserved[b.0 as usize] = false;
            if stream != STREAM_MAP && !self.in_scan[b.0 as usize] {
                debug_assert!(
                    self.reserved_list.contains(&b),
                    "{b} opened for data without being announced in the root"
                );
                self.in_scan[b.0 as usize] = true;
                self.scan_list.push(b);
            }
        }
        Ok(ppn)
    }

    /// When the root announcing `ppn`'s block is on flash (a page of the log tail programmed
    /// earlier could survive a power cut that the root does not, and recovery would not look).
    fn announced(&self, ppn: Ppn) -> u64 {
        self.announced_ns[self.flash.geometry().block_of(ppn).0 as usize]
    }

    fn note_data(&mut self, ppn: Ppn, seq: u64, end_ns: u64) {
        let b = self.flash.geometry().block_of(ppn).0 as usize;
        self.max_seq[b] = self.max_seq[b].max(seq);
        self.data_end_ns = self.data_end_ns.max(end_ns);
    }

    /// Programs one host page at the log head. Returns (ppn, seq, end).
    pub fn program_data(
        &mut self,
        lpn: u32,
        content: &Content,
        flag: u8,
        tx: u32,
        not_before: u64,
    ) -> Result<(Ppn, u64, u64), FtlError> {
        let ppn = self.alloc(STREAM_DATA, not_before)?;
        let seq = self.next_seq;
        self.next_seq += 1;
        let oob = OobRecord {
            kind: KIND_DATA,
            flag,
            id: lpn,
            seq,
            tx,
            data_crc: 0,
        }
        .encode();
        let nb = not_before
            .max(self.barrier_ns)
            .max(self.lpn_barrier.get(&lpn).copied().unwrap_or(0))
            .max(self.announced(ppn));
        let span = self
            .flash
            .program(ppn, content, &oob, nb, OpCause::HostData)?;
        self.space.validity.set_valid(ppn, lpn);
        self.note_data(ppn, seq, span.end_ns);
        Ok((ppn, seq, span.end_ns))
    }

    /// Programs a LightTx commit record for transaction `tx` after `not_before`.
    pub fn program_commit(
        &mut self,
        rec: crate::format::CommitRecord,
        not_before: u64,
    ) -> Result<u64, FtlError> {
        let ppn = self.alloc(STREAM_DATA, not_before)?;
        let seq = self.next_seq;
        self.next_seq += 1;
        let bytes = rec.encode();
        let oob = OobRecord {
            kind: KIND_COMMIT,
            flag: 1,
            id: rec.tx,
            seq,
            tx: rec.tx,
            data_crc: crc32c::crc32c(&bytes),
        }
        .encode();
        let span = self.flash.program(
            ppn,
            &Content::Bytes(bytes),
            &oob,
            not_before.max(self.announced(ppn)),
            OpCause::TxMeta,
        )?;
        self.space.validity.set_valid(ppn, OWNER_COMMIT);
        self.commits.insert(ppn.0, seq);
        self.note_data(ppn, seq, span.end_ns);
        self.stats.commit_records += 1;
        Ok(span.end_ns)
    }

    // ----- the mapping tree and the root ---------------------------------------------------

    /// Writes a GTD page (or a translation page encoded whole).
    fn write_tree_page(
        &mut self,
        kind: u8,
        id: u32,
        bytes: Box<[u8]>,
        not_before: u64,
    ) -> Result<u64, FtlError> {
        let ppn = self.alloc(STREAM_MAP, not_before)?;
        let crc = crc32c::crc32c(&bytes);
        self.program_tree_page(ppn, kind, id, bytes, crc, not_before)
    }

    /// Writes translation page `t`, whose entries in `changed` (and no others) changed since
    /// its last copy. The place is allocated before the old copy's bytes are taken, so a
    /// failed allocation loses nothing.
    fn write_translation_page(
        &mut self,
        t: u32,
        changed: &[u32],
        not_before: u64,
    ) -> Result<u64, FtlError> {
        let ppn = self.alloc(STREAM_MAP, not_before)?;
        let (bytes, crc) = self.translation_page_bytes(t, changed)?;
        self.program_tree_page(ppn, KIND_TRANSLATION, t, bytes, crc, not_before)
    }

    /// Translation page `t`'s bytes and crc32c from the mapping. When this engine wrote its
    /// current copy, that copy's buffer is taken ([`Flash::take_page`]: a tag-only store hands
    /// it over, others and a recording device copy) and only the `changed` entries are
    /// rewritten, the crc following word by word ([`flash::WordCrc`]). Nothing reads the old
    /// copy afterwards: the root written next names the new one, allocations in the map stream
    /// collect no garbage, and [`Engine::after_root`] releases the old copy's bytes anyway.
    fn translation_page_bytes(
        &mut self,
        t: u32,
        changed: &[u32],
    ) -> Result<(Box<[u8]>, u32), FtlError> {
        let lo = (t * self.entries) as usize;
        let old = self.tpage[t as usize];
        let Some(crc) = self.tcrc[t as usize].filter(|_| old != NONE) else {
            let hi = (lo + self.entries as usize).min(self.logical as usize);
            let bytes = encode_entries(&self.map[lo..hi], self.flash.geometry().page_bytes);
            let crc = crc32c::crc32c(&bytes);
            return Ok((bytes, crc));
        };
        // Entry i of a translation page is its word i.
        let mut page = flash::WordEdit::new(self.flash.take_page(Ppn(old))?, crc, &self.page_crc);
        for &lpn in changed {
            page.set(lpn as usize - lo, self.map[lpn as usize]);
        }
        Ok(page.finish())
    }

    fn program_tree_page(
        &mut self,
        ppn: Ppn,
        kind: u8,
        id: u32,
        bytes: Box<[u8]>,
        crc: u32,
        not_before: u64,
    ) -> Result<u64, FtlError> {
        let oob = OobRecord {
            kind,
            flag: 0,
            id,
            seq: self.meta_seq,
            tx: 0,
            data_crc: crc,
        }
        .encode();
        self.meta_seq += 1;
        let span = self.flash.program_owned(
            ppn,
            Content::Bytes(bytes),
            &oob,
            not_before,
            OpCause::Mapping,
        )?;
        if kind == KIND_TRANSLATION {
            self.tcrc[id as usize] = Some(crc);
        }
        let (owner, slot) = if kind == KIND_TRANSLATION {
            self.gdirty.mark((id / self.entries) as usize);
            self.tdirty.clean(id as usize);
            (OWNER_TRANSLATION | id, &mut self.tpage[id as usize])
        } else {
            self.gdirty.clean(id as usize);
            (OWNER_GTD | id, &mut self.gpage[id as usize])
        };
        let old = std::mem::replace(slot, ppn.0);
        if old != NONE {
            self.old_tree.push(Ppn(old));
        }
        self.space.validity.set_valid(ppn, owner);
        self.stats.tree_pages += 1;
        Ok(span.end_ns)
    }

    /// Writes the translation pages `dirty` (increasing), whose changed LPNs are in `changed`
    /// (increasing); returns when the last is on flash.
    fn write_translation_pages(
        &mut self,
        dirty: &[u32],
        changed: &[u32],
        not_before: u64,
    ) -> Result<u64, FtlError> {
        let mut end = not_before;
        for &t in dirty {
            let lo = t * self.entries;
            let from = changed.partition_point(|&l| l < lo);
            let to = changed.partition_point(|&l| l < lo + self.entries);
            end = end.max(self.write_translation_page(t, &changed[from..to], not_before)?);
        }
        Ok(end)
    }

    /// Notes that `lpn`'s entry of `map` changed: its translation page is dirty.
    fn note_changed(&mut self, lpn: u32) {
        let t = self.tvpn(lpn);
        self.tdirty.mark(t);
        self.tchanged.push(lpn);
    }

    /// Persists the mapping (dirty translation pages, dirty GTD pages, then a root) and, when
    /// `slide` is set or the policy asks for it, a new window. Returns when the root is on flash.
    pub fn flush_root(&mut self, now: u64, slide: bool) -> Result<u64, FtlError> {
        // Every GC copy (tree pages too) is on flash before a root can name it.
        let nb = now
            .max(self.data_end_ns)
            .max(self.erase_end_ns)
            .max(self.gc_copies_end);
        let mut end = self.write_dirty_tree(nb)?;
        let tail = self.tail_seq();
        let refresh = slide || matches!(self.cfg.window, WindowPolicy::PerChip(_));
        if refresh {
            self.refresh_window(tail);
        }
        let (root, zone_end) = self.next_root(tail, refresh, nb)?;
        end = end.max(zone_end);
        self.root_seq += 1;
        let g = self.flash.geometry().clone();
        let bytes = root.encode(g.page_bytes).ok_or_else(|| {
            FtlError::InvalidOption(format!(
                "{}: root of {} bytes does not fit a page",
                self.cfg.design,
                root.encoded_len()
            ))
        })?;
        let root_end = self.program_root(bytes, end)?;
        self.after_root(root_end, tail)?;
        Ok(root_end)
    }

    /// Writes every dirty translation page, then every dirty GTD page (which name them), none
    /// before `not_before`; returns when the last is on flash.
    fn write_dirty_tree(&mut self, not_before: u64) -> Result<u64, FtlError> {
        let mut end = not_before;
        let dirty = self.tdirty.members();
        let mut changed = std::mem::take(&mut self.tchanged);
        changed.sort_unstable();
        changed.dedup();
        let written = self.write_translation_pages(&dirty, &changed, not_before);
        // Pages still dirty (not written: an error; or changed again meanwhile, which noted
        // those LPNs again) keep their notes.
        let per = self.entries;
        let tdirty = &self.tdirty;
        self.tchanged.extend(
            changed
                .into_iter()
                .filter(|&l| tdirty.is_dirty((l / per) as usize)),
        );
        end = end.max(written?);
        let dirty = self.gdirty.members();
        for gi in dirty {
            let lo = (gi * self.entries) as usize;
            let hi = (lo + self.entries as usize).min(self.tpage.len());
            let bytes = encode_entries(&self.tpage[lo..hi], self.flash.geometry().page_bytes);
            end = end.max(self.write_tree_page(KIND_GTD, gi, bytes, not_before)?);
        }
        Ok(end)
    }

    /// The next root: the GTD, the log tail and the scan region — in the root itself when it
    /// fits a page, else in a zone record the root names (written when the region changed).
    /// Returns the root and when any zone record written is on flash.
    fn next_root(
        &mut self,
        tail: u64,
        refresh: bool,
        not_before: u64,
    ) -> Result<(Root, u64), FtlError> {
        let g = self.flash.geometry().clone();
        let scan: Vec<(BlockId, u32)> = self
            .scan_list
            .iter()
            .map(|&b| {
                let from = match self.cfg.window {
                    WindowPolicy::PerChip(_) if self.max_seq[b.0 as usize] < tail => {
                        self.flash.write_pointer(b)
                    }
                    _ => 0,
                };
                (b, from)
            })
            .collect();
        let mut root = Root {
            root_seq: self.root_seq + 1,
            tail_seq: tail,
            next_seq: self.next_seq,
            next_tx: self.next_tx,
            gtd: self.gpage.iter().map(|&p| Ppn(p)).collect(),
            scan,
            window: self.reserved_list.clone(),
            zone: Vec::new(),
        };
        if refresh {
            self.zone_dirty = true;
        }
        let mut end = not_before;
        if root.encoded_len() > g.page_bytes as usize {
            // Too many blocks for one page: the scan region goes to a zone record.
            if self.zone_dirty || self.zone_pages.is_empty() {
                end = end.max(self.write_zone_record(&root, not_before)?);
            }
            root.scan.clear();
            root.window.clear();
            root.zone = self.zone_pages.iter().map(|&p| Ppn(p)).collect();
        } else if !self.zone_pages.is_empty() {
            for (k, p) in std::mem::take(&mut self.zone_pages).into_iter().enumerate() {
                debug_assert_eq!(
                    self.space.validity.owner(Ppn(p)),
                    Some(OWNER_ZONE | k as u32)
                );
                self.old_tree.push(Ppn(p));
            }
        }
        self.zone_dirty = false;
        Ok((root, end))
    }

    /// Once the root ending at `root_end` is on flash: the blocks it announced, the tree pages
    /// and commit records it superseded (invalid, their bytes released), the GC victims whose
    /// copies it names (erased).
    fn after_root(&mut self, root_end: u64, tail: u64) -> Result<(), FtlError> {
        for b in std::mem::take(&mut self.announcing) {
            self.announced_ns[b.0 as usize] = root_end;
        }
        for old in std::mem::take(&mut self.old_tree) {
            self.space.validity.invalidate(old, root_end);
            // The root just written names the new tree: recovery of this image reads the
            // newest intact root's tree only, so nothing reads the old page's bytes again.
            self.flash.release_bytes(old);
        }
        let stale: Vec<u32> = self
            .commits
            .iter()
            .filter(|&(_, &s)| s < tail)
            .map(|(&p, _)| p)
            .collect();
        for p in stale {
            self.commits.remove(&p);
            self.space.validity.invalidate(Ppn(p), root_end);
        }
        self.last_root_end = root_end;
        self.stats.roots += 1;
        self.erase_copied_victims(root_end)
    }

    /// Writes `root`'s scan and window as a zone record (page-sized pieces in the map stream).
    fn write_zone_record(&mut self, root: &Root, not_before: u64) -> Result<u64, FtlError> {
        let page = self.flash.geometry().page_bytes as usize;
        let list = Root {
            scan: root.scan.clone(),
            window: root.window.clone(),
            ..Root::default()
        };
        let bytes = list.encode(u32::MAX).expect("no size limit");
        let old = std::mem::take(&mut self.zone_pages);
        self.old_tree.extend(old.into_iter().map(Ppn));
        let mut end = not_before;
        for (k, chunk) in bytes.chunks(page).enumerate() {
            let ppn = self.alloc(STREAM_MAP, not_before)?;
            // The whole page, padded: a page reads back whole, so its CRC covers the page (the
            // last piece's CRC over its short bytes failed at recovery on a file image).
            let mut data = vec![0u8; page].into_boxed_slice();
            data[..chunk.len()].copy_from_slice(chunk);
            let oob = OobRecord {
                kind: KIND_ZONE,
                flag: 0,
                id: k as u32,
                seq: self.meta_seq,
                tx: 0,
                data_crc: crc32c::crc32c(&data),
            }
            .encode();
            self.meta_seq += 1;
            let span = self.flash.program(
                ppn,
                &Content::Bytes(data),
                &oob,
                not_before,
                OpCause::Checkpoint,
            )?;
            self.space.validity.set_valid(ppn, OWNER_ZONE | k as u32);
            self.zone_pages.push(ppn.0);
            self.stats.tree_pages += 1;
            end = end.max(span.end_ns);
        }
        Ok(end)
    }

    fn refresh_window(&mut self, tail: u64) {
        let g = self.flash.geometry().clone();
        // Blocks leave the scan set once full and wholly below the tail (checkpointed zone).
        let pool = &self.space.pool;
        let max_seq = &self.max_seq;
        let in_scan = &mut self.in_scan;
        self.scan_list.retain(|&b| {
            let keep = match pool.state(b) {
                BlockState::Open(s) => s as usize != STREAM_MAP,
                BlockState::Full => max_seq[b.0 as usize] >= tail,
                _ => false,
            };
            if !keep {
                in_scan[b.0 as usize] = false;
            }
            keep
        });
        let before: FxHashSet<BlockId> = self.reserved_list.iter().copied().collect();
        for b in self.reserved_list.drain(..) {
            self.reserved[b.0 as usize] = false;
        }
        let per_chip = match self.cfg.window {
            WindowPolicy::PerChip(n) => n.max(1),
            WindowPolicy::Zone(z) => {
                let left = z.saturating_sub(self.scan_list.len() as u32);
                left.div_ceil(g.chips()).max(1)
            }
        };
        for c in 0..g.chips() {
            let take: Vec<BlockId> = self
                .space
                .pool
                .free_queue(ChipId(c))
                .take(per_chip as usize)
                .collect();
            for b in take {
                self.reserved[b.0 as usize] = true;
                self.reserved_list.push(b);
                if !before.contains(&b) {
                    self.announcing.push(b);
                }
            }
        }
    }

    fn program_root(&mut self, bytes: Box<[u8]>, not_before: u64) -> Result<u64, FtlError> {
        let g = self.flash.geometry().clone();
        let mut nb = not_before;
        if self.ring_next >= g.pages_per_block {
            // The newest root lives in the current block; the other one holds only older roots.
            let other = 1 - self.ring_cur;
            let e = self.flash.erase(
                self.ring[other],
                self.last_root_end.max(nb),
                OpCause::Checkpoint,
            )?;
            self.ring_cur = other;
            self.ring_next = 0;
            nb = nb.max(e.end_ns);
        }
        let ppn = g.ppn(self.ring[self.ring_cur], self.ring_next);
        self.ring_next += 1;
        let oob = OobRecord {
            kind: KIND_ROOT,
            flag: 0,
            id: 0,
            seq: self.root_seq,
            tx: 0,
            data_crc: crc32c::crc32c(&bytes),
        }
        .encode();
        let span =
            self.flash
                .program(ppn, &Content::Bytes(bytes), &oob, nb, OpCause::Checkpoint)?;
        Ok(span.end_ns)
    }

    // ----- transactions --------------------------------------------------------------------

    pub fn tx_index(&self, uuid: TxUuid) -> Option<usize> {
        self.txs.iter().position(|t| t.uuid == uuid)
    }

    /// Which running transaction holds `lpn`, if any.
    pub fn holder(&self, lpn: u32) -> Option<TxUuid> {
        self.txs
            .iter()
            .find(|t| t.pages.iter().any(|&(l, _)| l == lpn))
            .map(|t| t.uuid)
    }

    /// Makes a transaction's pages the committed mapping; `commit_end` is when its commit is on
    /// flash. The transaction's LPNs get a barrier so later writes land after the commit.
    pub fn commit_apply(&mut self, idx: usize, commit_end: u64) {
        let tx = self.txs.swap_remove(idx);
        for &(lpn, ppn) in &tx.pages {
            let old = self.map[lpn as usize];
            if old != NONE && old != ppn.0 {
                self.space.validity.invalidate(Ppn(old), commit_end);
            }
            self.map[lpn as usize] = ppn.0;
            self.note_changed(lpn);
            self.lpn_barrier.insert(lpn, commit_end);
        }
        if self.lpn_barrier.len() > 1 << 16 {
            // Barriers already passed by every later arrival are no longer needed.
            let now = self.arrivals.last();
            self.lpn_barrier.retain(|_, &mut end| end > now);
        }
        self.committed_uuids.insert(tx.uuid.0);
        self.stats.commits += 1;
    }

    /// Drops a running transaction's pages.
    pub fn abort_drop(&mut self, idx: usize, now: u64) {
        let tx = self.txs.swap_remove(idx);
        for &(_, ppn) in &tx.pages {
            self.space.validity.invalidate(ppn, now);
        }
        self.stats.aborts += 1;
    }

    // ----- plain host operations -----------------------------------------------------------

    /// A committed (non-transactional) page write: mapped at once.
    pub fn write_plain_page(
        &mut self,
        lpn: u32,
        content: &Content,
        flag: u8,
        arrival: u64,
    ) -> Result<u64, FtlError> {
        let (ppn, _, end) = self.program_data(lpn, content, flag, 0, arrival)?;
        let old = std::mem::replace(&mut self.map[lpn as usize], ppn.0);
        if old != NONE {
            self.space.validity.invalidate(Ppn(old), end);
        }
        self.note_changed(lpn);
        Ok(end)
    }

    /// Reads the page at `ppn` (NONE = unwritten).
    pub fn read_ppn(&mut self, ppn: u32, not_before: u64) -> Result<(PageOutcome, u64), FtlError> {
        if ppn == NONE {
            return Ok((PageOutcome::Unwritten, not_before));
        }
        let mut oob = [0u8; OOB_BYTES as usize];
        let (st, span) = self
            .flash
            .read(Ppn(ppn), &mut oob, not_before, OpCause::HostData)?;
        let out = PageOutcome::of_mapped_page(st);
        Ok((out, span.end_ns))
    }

    /// Unmaps a committed page (RAM; persisted with the next root).
    pub fn trim_page(&mut self, lpn: u32, now: u64) {
        let old = std::mem::replace(&mut self.map[lpn as usize], NONE);
        if old != NONE {
            self.space.validity.invalidate(Ppn(old), now);
            self.note_changed(lpn);
        }
    }

    /// Instant at which every data page programmed so far is on flash.
    pub fn data_end_ns(&self) -> u64 {
        self.data_end_ns
    }

    // ----- garbage collection --------------------------------------------------------------

    /// Collects victims until enough blocks are free.
    pub fn make_room(&mut self, now: u64) -> Result<(), FtlError> {
        let g = self.flash.geometry().clone();
        let (floor, batch) = (gc_floor(&g), gc_batch(&g) as usize);
        let low = self.cfg.gc_free_blocks;
        let mut rounds = 0;
        while self.space.pool.free_blocks() < low {
            rounds += 1;
            if rounds > 2 * g.blocks() {
                return Err(FtlError::NoSpace);
            }
            let free = self.space.pool.free_blocks();
            let copied = self.gc_copied.len();
            if copied > 0 && (copied >= batch || free <= floor) {
                self.flush_root(now, false)?;
                continue;
            }
            match self.space.pick_victim(&self.flash, |_| true) {
                Some(victim) => self.collect(victim, now)?,
                None if copied > 0 => {
                    self.flush_root(now, false)?;
                }
                None => return Err(FtlError::NoSpace),
            }
        }
        Ok(())
    }

    /// Erases the victims whose live pages GC has copied, now that a root written after the
    /// copies (ending at `root_end`) maps their pages to the copies.
    fn erase_copied_victims(&mut self, root_end: u64) -> Result<(), FtlError> {
        for victim in std::mem::take(&mut self.gc_copied) {
            let nb = root_end.max(self.space.validity.invalidated_by_ns(victim));
            let e = self.flash.erase(victim, nb, OpCause::GcCopy)?;
            self.erase_end_ns = self.erase_end_ns.max(e.end_ns);
            self.space.validity.erased(victim);
            self.space.pool.release(victim);
            self.max_seq[victim.0 as usize] = 0;
            self.stats.gc_victims += 1;
        }
        Ok(())
    }

    fn collect(&mut self, victim: BlockId, now: u64) -> Result<(), FtlError> {
        assert_eq!(self.space.pool.state(victim), BlockState::Full);
        self.space.validity.unindex_block(victim);
        let live: Vec<(Ppn, u32)> = self.space.validity.valid_pages(victim).collect();
        let mut oob = [0u8; OOB_BYTES as usize];
        for (from, owner) in live {
            if self.space.validity.owner(from) != Some(owner) {
                continue; // superseded by a root written while this victim was being copied
            }
            let (status, read) = self.flash.read(from, &mut oob, now, OpCause::GcCopy)?;
            // A page lost to the media moves as a lost copy (docs/reliability.md).
            let cause = OpCause::GcCopy;
            let map = &self.map;
            let rebuild = |oob: &mut [u8]| -> Result<(), FtlError> {
                let rec = copy_record(map, owner, from)?;
                oob[..OOB_BYTES as usize].copy_from_slice(&rec.encode());
                Ok(())
            };
            let ready = media::record_of_read(
                &mut self.flash,
                from,
                &status,
                &mut oob,
                (read.end_ns, cause),
                rebuild,
            )?;
            let to = self.alloc(STREAM_GC, now)?;
            let span = media::copy_read(&mut self.flash, (from, status), to, &oob, ready, cause)?;
            if self.space.validity.owner(from) != Some(owner) {
                // The allocation wrote a root that made the page stale. The copy is still
                // programmed (and left dead): a skipped page would end recovery's block scan
                // early and hide the pages after it.
                continue;
            }
            self.space.validity.set_valid(to, owner);
            self.space.validity.invalidate(from, span.end_ns);
            let rec = OobRecord::decode(&oob).ok();
            if let Some(r) = rec.filter(|r| r.kind == KIND_DATA || r.kind == KIND_COMMIT) {
                self.note_data(to, r.seq, span.end_ns);
            }
            self.on_move(owner, from, to, span.end_ns);
            self.gc_copies_end = self.gc_copies_end.max(span.end_ns);
        }
        if self.in_scan[victim.0 as usize] {
            self.in_scan[victim.0 as usize] = false;
            self.scan_list.retain(|&b| b != victim);
        }
        // Erased after the next root (which writes back the moved mappings).
        self.gc_copied.push(victim);
        Ok(())
    }

    fn on_move(&mut self, owner: u32, from: Ppn, to: Ppn, end: u64) {
        let id = owner & !OWNER_MASK;
        match owner & OWNER_MASK {
            0 => {
                if self.map[id as usize] == from.0 {
                    self.map[id as usize] = to.0;
                    self.note_changed(id);
                    return;
                }
                for tx in &mut self.txs {
                    if let Some(p) = tx.pages.iter_mut().find(|p| p.1 == from) {
                        p.1 = to;
                        tx.end_ns = tx.end_ns.max(end);
                        return;
                    }
                }
                panic!("GC moved {from} (lpn {id}) that nothing maps");
            }
            OWNER_TRANSLATION => {
                debug_assert_eq!(self.tpage[id as usize], from.0);
                self.tpage[id as usize] = to.0;
                self.gdirty.mark((id / self.entries) as usize);
            }
            OWNER_GTD => {
                debug_assert_eq!(self.gpage[id as usize], from.0);
                self.gpage[id as usize] = to.0;
            }
            _ if owner & OWNER_ZONE == OWNER_ZONE => {
                let k = (owner & !OWNER_ZONE) as usize;
                debug_assert_eq!(self.zone_pages[k], from.0);
                self.zone_pages[k] = to.0;
            }
            _ => {
                let seq = self.commits.remove(&from.0).expect("live commit record");
                self.commits.insert(to.0, seq);
            }
        }
    }

    // ----- invariants and metrics ----------------------------------------------------------

    pub fn check_invariants(&self) -> Result<(), ftl::InvariantViolation> {
        self.space.check_invariants()?;
        let v = &self.space.validity;
        for (lpn, &p) in self.map.iter().enumerate() {
            if p != NONE && v.owner(Ppn(p)) != Some(lpn as u32) {
                return Err(ftl::violation!(
                    "lpn {lpn} maps to {p} whose owner is {:?}",
                    v.owner(Ppn(p))
                ));
            }
        }
        for (t, &p) in self.tpage.iter().enumerate() {
            if p != NONE && v.owner(Ppn(p)) != Some(OWNER_TRANSLATION | t as u32) {
                return Err(ftl::violation!("translation page {t} at {p} is not live"));
            }
        }
        self.check_written_translation_pages()?;
        for tx in &self.txs {
            for &(lpn, p) in &tx.pages {
                if v.owner(p) != Some(lpn) {
                    return Err(ftl::violation!(
                        "{} page {p} (lpn {lpn}) is not live",
                        tx.uuid
                    ));
                }
            }
        }
        for &b in &self.scan_list {
            if !self.in_scan[b.0 as usize] {
                return Err(ftl::violation!("{b} listed for scanning but not flagged"));
            }
        }
        if self.txs.len() > 1 && self.cfg.scheme == Scheme::CommitBit {
            return Err("Atomic-Write runs at most one transaction".into());
        }
        Ok(())
    }

    /// A clean translation page this engine wrote holds what the mapping says, with the crc
    /// kept for it: what rewriting pages from their previous copies relies on (every change of
    /// `map` noted).
    fn check_written_translation_pages(&self) -> Result<(), ftl::InvariantViolation> {
        let page_bytes = self.flash.geometry().page_bytes;
        for (t, (&p, crc)) in self.tpage.iter().zip(&self.tcrc).enumerate() {
            let Some(crc) = *crc else { continue };
            if p == NONE || self.tdirty.is_dirty(t) {
                continue;
            }
            let bytes = self
                .flash
                .peek_page(Ppn(p))
                .map_err(|e| ftl::violation!("translation page {t} at {p}: {e}"))?;
            let lo = t * self.entries as usize;
            let hi = (lo + self.entries as usize).min(self.logical as usize);
            if *bytes != *encode_entries(&self.map[lo..hi], page_bytes) {
                return Err(ftl::violation!(
                    "clean translation page {t} at {p} differs from the mapping"
                ));
            }
            if crc32c::crc32c(&bytes) != crc {
                return Err(ftl::violation!(
                    "translation page {t} at {p}: crc kept wrong"
                ));
            }
        }
        Ok(())
    }

    pub fn metrics(&self) -> Vec<(String, f64)> {
        let s = &self.stats;
        vec![
            // The whole page map is RAM-resident (4 B per logical page), plus the tree's PPNs.
            (
                "mapping_ram_bytes".into(),
                (4 * (self.map.len() + self.tpage.len() + self.gpage.len())) as f64,
            ),
            ("roots_written".into(), s.roots as f64),
            ("tree_pages_written".into(), s.tree_pages as f64),
            ("commit_records_written".into(), s.commit_records as f64),
            ("gc_victims".into(), s.gc_victims as f64),
            ("window_refreshes".into(), s.window_refreshes as f64),
            ("tx_committed".into(), s.commits as f64),
            ("tx_aborted".into(), s.aborts as f64),
            ("scan_blocks".into(), self.scan_list.len() as f64),
            ("window_free_blocks".into(), self.reserved_list.len() as f64),
            ("zone_record_pages".into(), self.zone_pages.len() as f64),
        ]
    }

    // ----- recovery ------------------------------------------------------------------------

    /// Rebuilds the engine from flash alone: newest valid root, the tree it points to, then the
    /// log tail found in the root's scan blocks and window, resolved by the design's scheme.
    pub fn recover(flash: Flash, cfg: EngineConfig) -> Result<(Engine, RecoveryReport), FtlError> {
        let start = flash.idle_ns();
        let before = flash.stats().clone();
        let mut e = Engine::build(flash, cfg)?;
        let mut t = start;
        let (root, ring_pages_read) = e.read_root_ring(start, &mut t)?;
        let (tree_reads, t_map) = e.load_tree(&root, &mut t)?;
        let mut scan = e.scan_tail_region(&root, t_map, &mut t)?;
        let (tail_pages, applied) = e.resolve_tail(&root, &mut scan.found);
        let unknown_empty = e.rebuild_validity(&mut scan)?;
        let erased = e.erase_unneeded(unknown_empty, t)?;
        e.last_root_end = t;
        let root_end = e.flush_root(t, true)?;
        e.barrier_ns = root_end;
        e.make_room(root_end)?;
        e.arrivals = ftl::ArrivalClock::starting_at(0);
        let mut report = RecoveryReport::measure(&e.flash, &before, start);
        report.details = vec![
            ("ring_pages_read".into(), ring_pages_read as f64),
            (
                "tree_pages_read".into(),
                (tree_reads + scan.zone_reads) as f64,
            ),
            ("scan_blocks".into(), scan.blocks.len() as f64),
            ("scan_pages_read".into(), scan.pages_read as f64),
            ("tail_pages_found".into(), tail_pages as f64),
            ("tail_pages_applied".into(), applied as f64),
            ("blocks_erased".into(), erased as f64),
        ];
        Ok((e, report))
    }

    /// Recovery step 1: the newest root in the root ring whose page decodes (the ring is read
    /// OOB by OOB to find the roots and how far each block is written). Advances `t`; returns
    /// the root and the ring's OOB reads.
    fn read_root_ring(&mut self, start: u64, t: &mut u64) -> Result<(Root, u64), FtlError> {
        let g = self.flash.geometry().clone();
        let reads_before = self.flash.stats().total_reads();
        let mut oob = [0u8; OOB_BYTES as usize];
        let mut roots = Vec::new();
        let mut used = [0u32; 2];
        for (i, &b) in self.ring.iter().enumerate() {
            for p in 0..g.pages_per_block {
                let ppn = g.ppn(b, p);
                let (st, span) = self
                    .flash
                    .read_oob(ppn, &mut oob, start, OpCause::Recovery)?;
                *t = (*t).max(span.end_ns);
                match st {
                    PageState::Erased => break,
                    PageState::Torn => used[i] = p + 1,
                    PageState::Programmed => {
                        used[i] = p + 1;
                        if let Some(r) =
                            OobRecord::decode(&oob).ok().filter(|r| r.kind == KIND_ROOT)
                        {
                            roots.push((r.seq, ppn, i));
                        }
                    }
                }
            }
        }
        let ring_reads = self.flash.stats().total_reads() - reads_before;
        roots.sort_by_key(|r| std::cmp::Reverse(r.0));
        let mut found = None;
        for &(seq, ppn, i) in &roots {
            let (st, span) = self.flash.read(ppn, &mut oob, *t, OpCause::Recovery)?;
            *t = (*t).max(span.end_ns);
            // A torn root was never in force; one lost to the media was the newest, and the
            // older roots name a tree GC may have taken apart since.
            // Its record decoded in the ring's scan: programmed whole.
            let lost = media::whole_page_lost(&self.flash);
            Self::not_lost(ppn, &st, "the newest root", lost)?;
            if let ReadStatus::Data(Content::Bytes(b)) = st {
                if let Some(r) = Root::decode(&b).ok().filter(|r| r.root_seq == seq) {
                    found = Some((r, i));
                    break;
                }
            }
        }
        let (root, ring_i) =
            found.ok_or_else(|| FtlError::Corrupt("no valid root in the root ring".into()))?;
        self.ring_cur = ring_i;
        self.ring_next = used[ring_i];
        self.root_seq = root.root_seq;
        if root.gtd.len() != self.gpage.len() {
            return Err(FtlError::Corrupt(format!(
                "root names {} GTD pages, this geometry needs {}",
                root.gtd.len(),
                self.gpage.len()
            )));
        }
        Ok((root, ring_reads))
    }

    /// Recovery step 2: the mapping tree the root names (GTD pages, then translation pages).
    /// Returns the pages read and the instant the translation pages were issued at.
    fn load_tree(&mut self, root: &Root, t: &mut u64) -> Result<(u64, u64), FtlError> {
        let mut tree_reads = 0u64;
        let t_tree = *t;
        // Each translation page's next write encodes it whole (no crc kept from before).
        self.tcrc.iter_mut().for_each(|c| *c = None);
        self.tchanged.clear();
        for (gi, p) in root.gtd.iter().enumerate() {
            self.gpage[gi] = p.0;
            if p.0 == NONE {
                continue;
            }
            let entries = self.read_meta(*p, KIND_GTD, t_tree, t)?;
            tree_reads += 1;
            let lo = gi * self.entries as usize;
            for (k, &tp) in entries.iter().enumerate() {
                if lo + k < self.tpage.len() {
                    self.tpage[lo + k] = tp;
                }
            }
        }
        let t_map = *t;
        for tv in 0..self.tpage.len() {
            let p = self.tpage[tv];
            if p == NONE {
                continue;
            }
            let entries = self.read_meta(Ppn(p), KIND_TRANSLATION, t_map, t)?;
            tree_reads += 1;
            let lo = tv * self.entries as usize;
            for (k, &dp) in entries.iter().enumerate() {
                if lo + k < self.map.len() {
                    self.map[lo + k] = dp;
                }
            }
        }
        Ok((tree_reads, t_map))
    }

    /// The region the log tail may occupy: in the root, or in the zone record it names.
    fn tail_region(
        &mut self,
        root: &Root,
        t_map: u64,
        t: &mut u64,
    ) -> Result<(Root, u64), FtlError> {
        let mut region = root.clone();
        let mut reads = 0;
        if !root.zone.is_empty() {
            let mut bytes = Vec::new();
            for (k, &p) in root.zone.iter().enumerate() {
                let mut oob = [0u8; OOB_BYTES as usize];
                let (st, span) = self.flash.read(p, &mut oob, t_map, OpCause::Recovery)?;
                *t = (*t).max(span.end_ns);
                reads += 1;
                let rec = OobRecord::decode(&oob)
                    .ok()
                    .filter(|r| r.kind == KIND_ZONE && r.id == k as u32);
                match (st, rec) {
                    (ReadStatus::Data(Content::Bytes(b)), Some(r))
                        if crc32c::crc32c(&b) == r.data_crc =>
                    {
                        bytes.extend_from_slice(&b)
                    }
                    (st, rec) => {
                        // Named by the root, written after it: programmed whole.
                        let lost = media::whole_page_lost(&self.flash);
                        Self::not_lost(p, &st, "a piece of the zone record", lost)?;
                        let what = match (st, rec) {
                            (ReadStatus::Data(_), Some(_)) => "its data fails its CRC",
                            (ReadStatus::Data(_), None) => "its OOB is not that piece's",
                            (ReadStatus::Erased, _) => "erased",
                            (ReadStatus::Uncorrectable, _) => "uncorrectable",
                        };
                        return Err(FtlError::Corrupt(format!(
                            "zone record piece {k} at {p} is unreadable: {what}"
                        )));
                    }
                }
                self.space.validity.set_valid(p, OWNER_ZONE | k as u32);
                self.zone_pages.push(p.0);
            }
            let list = Root::decode(&bytes)
                .map_err(|e| FtlError::Corrupt(format!("zone record does not decode: {e}")))?;
            region.scan = list.scan;
            region.window = list.window;
        }
        Ok((region, reads))
    }

    /// Recovery step 3: the OOB scan of the tail region, block by block up to the first erased
    /// page, collecting data and commit records and which blocks are in use or seen empty.
    fn scan_tail_region(
        &mut self,
        root: &Root,
        t_map: u64,
        t: &mut u64,
    ) -> Result<TailScan, FtlError> {
        let g = self.flash.geometry().clone();
        let (region, zone_reads) = self.tail_region(root, t_map, t)?;
        let mut oob = [0u8; OOB_BYTES as usize];
        let mut scan = TailScan {
            blocks: region.scan.clone(),
            found: Vec::new(),
            block_used: vec![false; g.blocks() as usize],
            known_free: vec![false; g.blocks() as usize],
            in_scan_set: vec![false; g.blocks() as usize],
            pages_read: 0,
            zone_reads,
        };
        scan.blocks.extend(region.window.iter().map(|&b| (b, 0)));
        let t_scan = *t;
        for &(b, from) in &scan.blocks {
            if !g.contains_block(b) || self.ring.contains(&b) {
                return Err(FtlError::Corrupt(format!("root names impossible {b}")));
            }
            scan.in_scan_set[b.0 as usize] = true;
            if from > 0 {
                scan.block_used[b.0 as usize] = true;
            }
            for p in from..g.pages_per_block {
                let ppn = g.ppn(b, p);
                let (st, span) = self
                    .flash
                    .read_oob(ppn, &mut oob, t_scan, OpCause::Recovery)?;
                scan.pages_read += 1;
                *t = (*t).max(span.end_ns);
                match st {
                    PageState::Erased => {
                        if p == 0 {
                            scan.known_free[b.0 as usize] = true;
                        }
                        break;
                    }
                    PageState::Torn => {
                        let lost = media::undecided_lost(&self.flash, ppn);
                        Self::not_lost(
                            ppn,
                            &ReadStatus::Uncorrectable,
                            "a page's OOB record",
                            lost,
                        )?;
                        scan.block_used[b.0 as usize] = true
                    }
                    PageState::Programmed => {
                        scan.block_used[b.0 as usize] = true;
                        if let Ok(r) = OobRecord::decode(&oob) {
                            if r.kind == KIND_DATA || r.kind == KIND_COMMIT {
                                let bi = b.0 as usize;
                                self.max_seq[bi] = self.max_seq[bi].max(r.seq);
                                scan.found.push((r, ppn));
                            }
                        }
                    }
                }
            }
        }
        Ok(scan)
    }

    /// Recovery step 4: the tail resolved by the scheme's commit rule and applied to the map.
    /// Returns (tail pages found, pages applied).
    fn resolve_tail(&mut self, root: &Root, scanned: &mut [(OobRecord, Ppn)]) -> (usize, usize) {
        let tail = root.tail_seq;
        let mut next_seq = root.next_seq;
        let mut next_tx = root.next_tx;
        for (r, _) in scanned.iter() {
            next_seq = next_seq.max(r.seq + 1);
            next_tx = next_tx.max(r.tx.saturating_add(1));
        }
        let applied = resolve(self.cfg.scheme, tail, root.next_seq, scanned, self.logical);
        let tail_pages = scanned.iter().filter(|(r, _)| r.seq >= tail).count();
        for &(lpn, ppn) in &applied {
            self.map[lpn as usize] = ppn.0;
            self.note_changed(lpn);
        }
        self.next_seq = next_seq;
        self.next_tx = next_tx;
        (tail_pages, applied.len())
    }

    /// Recovery step 5: page validity from the map and the tree, and block states. Free blocks
    /// are not recorded: any block not seen erased in the scan is taken as used. Returns the
    /// used blocks nothing can need (outside the scan set, no live page).
    fn rebuild_validity(&mut self, scan: &mut TailScan) -> Result<Vec<BlockId>, FtlError> {
        let g = self.flash.geometry().clone();
        let block_used = &mut scan.block_used;
        for (lpn, &p) in self.map.iter().enumerate() {
            if p != NONE {
                self.space
                    .validity
                    .set_recovered_valid(&self.flash, Ppn(p), lpn as u32)
                    .map_err(|e| e.in_context(format_args!("lpn {lpn}")))?;
                block_used[g.block_of(Ppn(p)).0 as usize] = true;
            }
        }
        for (tv, &p) in self.tpage.iter().enumerate() {
            if p != NONE {
                self.space.validity.set_recovered_valid(
                    &self.flash,
                    Ppn(p),
                    OWNER_TRANSLATION | tv as u32,
                )?;
                block_used[g.block_of(Ppn(p)).0 as usize] = true;
            }
        }
        for (gi, &p) in self.gpage.iter().enumerate() {
            if p != NONE {
                self.space.validity.set_recovered_valid(
                    &self.flash,
                    Ppn(p),
                    OWNER_GTD | gi as u32,
                )?;
                block_used[g.block_of(Ppn(p)).0 as usize] = true;
            }
        }
        for &p in &self.zone_pages {
            block_used[g.block_of(Ppn(p)).0 as usize] = true;
        }
        let mut unknown_empty = Vec::new();
        for b in 0..g.blocks() {
            let blk = BlockId(b);
            if self.ring.contains(&blk) || (scan.known_free[b as usize] && !block_used[b as usize])
            {
                continue;
            }
            self.space.pool.mark_full(blk);
            self.space.validity.index_block(blk);
            if !scan.in_scan_set[b as usize] && self.space.validity.valid_count(blk) == 0 {
                unknown_empty.push(blk);
            }
        }
        Ok(unknown_empty)
    }

    /// Recovery step 6: room for the recovery root: erases blocks nothing can need, spread over
    /// the chips, up to GC's low-water mark. Returns how many.
    fn erase_unneeded(&mut self, mut unknown_empty: Vec<BlockId>, t: u64) -> Result<u64, FtlError> {
        let g = self.flash.geometry().clone();
        unknown_empty.sort_by_key(|b| (b.0 % g.chips(), b.0));
        let low = self.cfg.gc_free_blocks as usize;
        let mut erased = 0u64;
        let mut per_chip = vec![0usize; g.chips() as usize];
        for b in unknown_empty {
            if self.space.pool.free_blocks() as usize >= low {
                break;
            }
            let c = g.chip_of_block(b).0 as usize;
            if per_chip[c] * g.chips() as usize > low {
                continue;
            }
            per_chip[c] += 1;
            self.space.validity.unindex_block(b);
            let span = self.flash.erase(b, t, OpCause::Recovery)?;
            self.erase_end_ns = self.erase_end_ns.max(span.end_ns);
            self.space.validity.erased(b);
            self.space.pool.release(b);
            self.max_seq[b.0 as usize] = 0;
            erased += 1;
        }
        Ok(erased)
    }

    fn read_meta(
        &mut self,
        ppn: Ppn,
        kind: u8,
        not_before: u64,
        t: &mut u64,
    ) -> Result<Vec<u32>, FtlError> {
        let mut oob = [0u8; OOB_BYTES as usize];
        let (st, span) = self
            .flash
            .read(ppn, &mut oob, not_before, OpCause::Recovery)?;
        *t = (*t).max(span.end_ns);
        let rec = OobRecord::decode(&oob).ok().filter(|r| r.kind == kind);
        match (st, rec) {
            (ReadStatus::Data(Content::Bytes(b)), Some(r)) if crc32c::crc32c(&b) == r.data_crc => {
                Ok(decode_entries(&b))
            }
            (st, rec) => {
                // Named by the root or a GTD page, written after it: programmed whole.
                let lost = media::whole_page_lost(&self.flash);
                Self::not_lost(ppn, &st, "a page of the mapping tree", lost)?;
                let found = match rec {
                    Some(r) => format!(
                        "its OOB record expects data whose CRC32C is {:#010x}",
                        r.data_crc
                    ),
                    None => "its OOB record is not of that kind".into(),
                };
                Err(FtlError::Corrupt(format!(
                    "tree page {ppn} (kind {kind}) named by the root is unreadable: {found}, and \
                     it reads back {st}"
                )))
            }
        }
    }

    /// A page recovery read as `st` that did not read: torn by the cut, or — lost to the media
    /// (`lost`: the evidence says it was programmed whole) — `what`, which the engine keeps no
    /// other copy of: the device is lost with it (docs/reliability.md).
    fn not_lost(ppn: Ppn, st: &ReadStatus, what: &str, lost: bool) -> Result<(), FtlError> {
        if *st == ReadStatus::Uncorrectable && lost {
            return Err(FtlError::MediaLoss {
                ppn,
                what: what.into(),
            });
        }
        Ok(())
    }
}

/// Decides which tail pages (seq >= tail) become the mapping, returned in sequence order
/// (later entries override earlier ones).
///
/// - [`Scheme::CommitBit`]: walk the tail in sequence order; pages with bit 0 wait; a bit-1
///   page whose sequence number continues the waiting run without a gap closes the run and
///   every page in it is applied; a gap or the end of the log drops the waiting run (Ouyang et
///   al.: trailing pages not closed by a bit-1 page belong to an unfinished atomic write).
/// - [`Scheme::CommitRecord`]: a page counts if it is a plain write (tx 0) or its transaction
///   has a commit record in the scanned region — and only if the root's tree does not already
///   hold it: everything below the root's `covered` (its `next_seq`) is in the tree except the
///   transactions still running when the root was written, which committed later (a commit
///   record at or above `covered`). A transaction running across the root keeps the tail below
///   `covered`; replaying the plain writes and earlier transactions of that stretch over the tree
///   would undo what the tree holds after them — a trim, whose newer write GC may have erased
///   since, would bring back an older one (docs/lighttx.md, "Replaying the tail over a root").
pub fn resolve(
    scheme: Scheme,
    tail: u64,
    covered: u64,
    scanned: &mut [(OobRecord, Ppn)],
    logical: u32,
) -> Vec<(u32, Ppn)> {
    scanned.sort_by_key(|(r, p)| (r.seq, p.0));
    let mut out = Vec::new();
    match scheme {
        Scheme::CommitBit => {
            let mut pending: Vec<(u32, Ppn)> = Vec::new();
            let mut last: Option<u64> = None;
            for &(r, p) in scanned.iter() {
                if r.kind != KIND_DATA || r.seq < tail || r.id >= logical {
                    continue;
                }
                if last == Some(r.seq) {
                    continue; // a GC copy of the same page
                }
                if last.is_some_and(|l| r.seq != l + 1) {
                    pending.clear();
                }
                last = Some(r.seq);
                pending.push((r.id, p));
                if r.flag == 1 {
                    out.append(&mut pending);
                }
            }
        }
        Scheme::CommitRecord => {
            // Transactions committed after the root was written.
            let committed: FxHashSet<u32> = scanned
                .iter()
                .filter(|(r, _)| r.kind == KIND_COMMIT && r.seq >= covered)
                .map(|(r, _)| r.id)
                .collect();
            let mut last: Option<u64> = None;
            for &(r, p) in scanned.iter() {
                if r.kind != KIND_DATA || r.seq < tail || r.id >= logical {
                    continue;
                }
                if last == Some(r.seq) {
                    continue;
                }
                last = Some(r.seq);
                if (r.tx == 0 && r.seq >= covered) || committed.contains(&r.tx) {
                    out.push((r.id, p));
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(seq: u64, lpn: u32, flag: u8, tx: u32) -> (OobRecord, Ppn) {
        (
            OobRecord {
                kind: KIND_DATA,
                flag,
                id: lpn,
                seq,
                tx,
                data_crc: 0,
            },
            Ppn(seq as u32 + 1000),
        )
    }

    #[test]
    fn commit_bit_walk_keeps_closed_runs_and_drops_the_rest() {
        // plain 10; tx 11,12 closed by 13; gap at 14; tx 15,16 unclosed.
        let mut s = vec![
            rec(16, 6, 0, 0),
            rec(10, 1, 1, 0),
            rec(12, 3, 0, 0),
            rec(11, 2, 0, 0),
            rec(13, 4, 1, 0),
            rec(15, 5, 0, 0),
            rec(12, 3, 0, 0), // GC copy
            rec(9, 9, 1, 0),  // below the tail
        ];
        let out = resolve(Scheme::CommitBit, 10, 10, &mut s, 100);
        let lpns: Vec<u32> = out.iter().map(|x| x.0).collect();
        assert_eq!(lpns, vec![1, 2, 3, 4]);
        // A bit-1 page after a gap does not close the run before the gap.
        let mut s = vec![rec(20, 1, 0, 0), rec(22, 2, 1, 0)];
        let out = resolve(Scheme::CommitBit, 20, 20, &mut s, 100);
        assert_eq!(out.iter().map(|x| x.0).collect::<Vec<_>>(), vec![2]);
    }

    #[test]
    fn commit_record_filter_needs_the_record() {
        let mut s = vec![rec(10, 1, 0, 7), rec(11, 2, 0, 8), rec(12, 3, 0, 0)];
        s.push((
            OobRecord {
                kind: KIND_COMMIT,
                flag: 1,
                id: 7,
                seq: 13,
                tx: 7,
                data_crc: 0,
            },
            Ppn(5),
        ));
        let out = resolve(Scheme::CommitRecord, 10, 10, &mut s, 100);
        assert_eq!(out.iter().map(|x| x.0).collect::<Vec<_>>(), vec![1, 3]);
    }

    fn commit(tx: u32, seq: u64) -> (OobRecord, Ppn) {
        let rec = OobRecord {
            kind: KIND_COMMIT,
            flag: 1,
            id: tx,
            seq,
            tx,
            data_crc: 0,
        };
        (rec, Ppn(seq as u32 + 1000))
    }

    /// Below the root's `next_seq` the tree already holds every plain write and every
    /// transaction committed before the root: only transactions committed after it, and what
    /// came after the root, are replayed.
    #[test]
    fn commit_record_replay_skips_what_the_root_already_holds() {
        let mut s = vec![
            rec(10, 1, 0, 0), // plain, before the root
            rec(11, 2, 0, 7), // tx 7, committed before the root
            commit(7, 12),
            rec(13, 3, 0, 8), // tx 8, running at the root, committed after it
            commit(8, 15),
            rec(16, 4, 0, 0), // plain, after the root
        ];
        let out = resolve(Scheme::CommitRecord, 10, 14, &mut s, 100);
        assert_eq!(out.iter().map(|x| x.0).collect::<Vec<_>>(), vec![3, 4]);
    }

    /// An engine on the `small` preset, tag-only.
    fn small_engine(design: &'static str, scheme: Scheme, window: WindowPolicy) -> Engine {
        let device = flash::DeviceConfig::preset("small").expect("small preset");
        let cfg = EngineConfig {
            design,
            scheme,
            window,
            over_provisioning: 0.2,
            max_tx_pages: 64,
            tx_room_pages: 64,
            gc_policy: GcPolicy::Greedy,
            gc_free_blocks: default_gc_free_blocks(&device.geometry),
        };
        let flash = Flash::in_memory(device, OOB_BYTES, true);
        Engine::format(flash, cfg).expect("format")
    }

    /// Translation pages rewritten from their previous copies (only the noted entries changed)
    /// stay the pages the mapping encodes whole, through GC and many roots; the invariant that
    /// says so fails when a change of the mapping goes unnoted.
    #[test]
    fn patched_translation_pages_hold_the_mapping_and_an_unnoted_change_is_caught() {
        let mut e = small_engine("atomic-write", Scheme::CommitBit, WindowPolicy::PerChip(2));
        let mut now = e.flash.idle_ns();
        let n = e.logical_pages();
        for i in 0..30_000u32 {
            let lpn = (i.wrapping_mul(2_654_435_761) >> 7) % n;
            let content = Content::Tag(flash::ContentTag {
                lpn,
                write: i as u64 + 1,
            });
            let done = e.write_plain(Lpn(lpn), &[content], now).expect("write");
            now = done.ack_ns;
            if i % 97 == 0 {
                now = e.flush_root(now, false).expect("root");
                e.check_invariants().expect("invariants");
            }
        }
        now = e.flush_root(now, false).expect("root");
        e.check_invariants().expect("invariants");
        assert!(
            e.tcrc.iter().filter(|c| c.is_some()).count() > 1,
            "pages were written"
        );
        // Negative 1: a mapping change nobody noted leaves a clean page that disagrees.
        let lpn = (0..n)
            .find(|&l| e.map[l as usize] != NONE)
            .expect("a mapped page");
        e.map[lpn as usize] ^= 1;
        assert!(e.check_written_translation_pages().is_err());
        e.map[lpn as usize] ^= 1;
        e.check_written_translation_pages().expect("restored");
        // Negative 2: the page marked dirty but the LPN not noted: its rewrite misses the entry.
        e.map[lpn as usize] ^= 1;
        let t = e.tvpn(lpn);
        e.tdirty.mark(t);
        e.flush_root(now, false).expect("root");
        assert!(e.check_written_translation_pages().is_err());
    }

    /// Every page programmed into a block must end after the root that announced the block:
    /// recovery scans only what a durable root names (the LightTx durable-write loss of issue
    /// #22). Plain writes on a LightTx engine with a small zone slide the window many times.
    #[test]
    fn pages_in_a_newly_announced_block_end_after_its_root() {
        let mut e = small_engine("lighttx", Scheme::CommitRecord, WindowPolicy::Zone(4));
        let g = e.flash.geometry().clone();
        let mut checked = 0;
        let mut now = e.flash.idle_ns();
        for i in 0..20_000u32 {
            let lpn = (i * 7919) % e.logical_pages();
            e.make_room(now).expect("room");
            let content = Content::Tag(flash::ContentTag {
                lpn,
                write: i as u64,
            });
            // Eight writes outstanding, as a host at queue depth 8.
            let (ppn, _, end) = e.program_data(lpn, &content, 1, 0, now).expect("program");
            if i % 8 == 7 {
                now = end;
            }
            assert!(
                end >= e.announced(ppn),
                "page {ppn} ended at {end}, before its block's announcing root ({})",
                e.announced(ppn)
            );
            if g.page_in_block(ppn) == 0 && e.announced(ppn) > 0 {
                checked += 1;
            }
            let old = std::mem::replace(&mut e.map[lpn as usize], ppn.0);
            if old != NONE {
                e.space.validity.invalidate(Ppn(old), end);
            }
        }
        assert!(
            e.stats.window_refreshes > 10 && checked > 10,
            "the window must slide and new blocks open"
        );
    }
}
