//! TxFlash with the cyclic commit protocols (Prabhakaran et al., OSDI'08 §3.2–§3.4):
//! Simple Cyclic Commit (SCC, design `txflash-scc`) and Back Pointer Cyclic Commit (BPCC, design
//! `txflash-bpcc`).
//!
//! Every intention record carries a *next-link* (page, version) to another intention of its
//! transaction; the links of one transaction form a cycle, and a transaction is committed once all
//! its intentions are on flash — there is no commit record. A one-page transaction links to
//! itself. Every page starts at a virtual version 0 linked to itself (the initial metadata).
//!
//! - SCC keeps the SCC invariant (every version below one on flash is committed) by *erasing* the
//!   intentions of an aborted transaction before any of its pages is written again: their blocks
//!   are relocated and erased at once ([`TxFlashCyclic::erase_intentions`]), and writes to those
//!   pages wait for the erase. Recovery erases the uncommitted intentions it finds the same way.
//! - BPCC stores a *back pointer* (the page's last committed version) in every intention and
//!   leaves aborted intentions on flash; a later version straddles them. GC honours the straddle
//!   responsibility sets ([`srs`]): a superseded version is kept (copied by GC) while its set is
//!   not empty.
//!
//! Recovery ([`recovery`]) reads one summary page per full block (the open blocks page by page)
//! and classifies every page's highest version by the three cases ([`classify`]).

pub mod classify;
pub mod format;
mod recovery;
pub mod srs;

use crate::surface::Isolation;
use crate::surface::{self, CommitProtocol};
use flash::{BlockId, Content, Flash, Lpn, OpCause, Ppn};
use format::{CyclicOob, Kind, Protocol, Version, ENTRY_BYTES, MAX_OOB_BYTES};
use ftl::media::{self, Source};
use ftl::{
    check_range, BlockDevice, BlockPool, BlockState, Completion, DesignOptions, DwriteFlag,
    FtlError, GcPolicy, PageOutcome, Promise, Space, SwriteMode, Transactional, TxCapabilities,
    TxCompletion, TxUuid, Validity,
};
use rustc_hash::FxHashMap;
use srs::Srs;

const NONE: u32 = u32::MAX;
const HOST: usize = 0;
const GC: usize = 1;

/// Parameters (`--param`): see docs/txflash.md.
pub const PARAMS: &[&str] = &[
    "max_tx_bytes",
    "over_provisioning",
    "gc_policy",
    "gc_free_blocks",
    "wear_threshold",
    "isolation",
    "recovery_ns_per_record",
];

#[derive(Clone, Debug)]
pub struct Params {
    pub max_tx_pages: u32,
    pub over_provisioning: f64,
    pub gc_policy: GcPolicy,
    /// GC runs while fewer blocks are free (`surface::default_gc_free_blocks`, at least
    /// `surface::min_gc_free_blocks`).
    pub gc_free_blocks: u32,
    pub wear_threshold: u32,
    pub isolation: Isolation,
    /// Simulated CPU time per record recovery analyses (`summary_scan::charge_analysis`).
    pub recovery_ns_per_record: u64,
}

impl Params {
    pub fn parse(o: &DesignOptions, g: &flash::Geometry) -> Result<Params, FtlError> {
        o.check_known("txflash", PARAMS)?;
        let max_tx_pages = crate::surface::max_tx_pages(o, g)?;
        let over_provisioning: f64 = o.get("over_provisioning", 0.15)?;
        if !(0.0..0.9).contains(&over_provisioning) {
            return Err(FtlError::InvalidOption(
                "over_provisioning must be in [0, 0.9)".into(),
            ));
        }
        let gc_policy = match o.params.get("gc_policy") {
            None => GcPolicy::Greedy,
            Some(v) => v.parse()?,
        };
        let isolation = match o.params.get("isolation").map(String::as_str) {
            None | Some("wait") => Isolation::Wait,
            Some("refuse") => Isolation::Refuse,
            Some(v) => {
                return Err(FtlError::InvalidOption(format!(
                    "isolation={v}: expected wait or refuse"
                )))
            }
        };
        Ok(Params {
            max_tx_pages,
            over_provisioning,
            gc_policy,
            gc_free_blocks: crate::surface::gc_free_blocks(o, g)?,
            wear_threshold: o.get("wear_threshold", 64)?,
            isolation,
            recovery_ns_per_record: crate::summary_scan::recovery_ns_per_record(o)?,
        })
    }
}

/// One intention of a transaction that has not committed yet.
#[derive(Clone, Debug)]
struct PendPage {
    id: Version,
    back: u32,
    next: Version,
    ppn: Ppn,
    end_ns: u64,
    /// When the erase of every earlier copy (moved by GC) ends.
    old_copies_gone_ns: u64,
}

/// A dynamic transaction's latest page, held in RAM until the next one names its next-link
/// (TxFlash §3.4).
#[derive(Clone, Debug)]
struct Held {
    id: Version,
    kind: Kind,
    back: u32,
    content: Content,
}

#[derive(Clone, Debug)]
struct Pending {
    uuid: TxUuid,
    pages: Vec<PendPage>,
    held: Option<Held>,
    /// First page of a dynamic transaction: the last one links back to it.
    first: Option<Version>,
    start_ns: u64,
    /// Every page of the transaction, written or held (locks and erase barriers).
    lpns: Vec<Lpn>,
}

/// Owners of live pages that are not a page's committed version.
#[derive(Clone, Copy, Debug)]
enum Rec {
    Free,
    Pending {
        slot: u32,
        idx: u32,
    },
    /// BPCC: a superseded version kept because its straddle responsibility set is not empty.
    Pinned {
        id: Version,
    },
}

#[derive(Clone, Copy, Debug)]
struct PinnedPage {
    ppn: Ppn,
    rec: u32,
    superseded_ns: u64,
}

pub struct TxFlashCyclic {
    protocol: Protocol,
    flash: Flash,
    space: Space,
    p: Params,
    logical: u32,
    ppb: u32,
    /// lpn → ppn of the committed version (NONE: the initial version 0).
    map: Vec<u32>,
    /// lpn → the committed version number (0 = initial).
    committed: Vec<u32>,
    /// lpn → highest version used in S ∪ R or allocated in RAM ([R]).
    version: Vec<u32>,
    /// lpn → earliest instant a new intention may start: the last commit on flash (isolation)
    /// and, for SCC, the erase of an aborted intention of the page's transaction.
    busy_until: Vec<u64>,
    /// lpn → pending slot of the running dynamic transaction that holds it.
    locked: Vec<u32>,
    recs: Vec<Rec>,
    free_recs: Vec<u32>,
    pending: Vec<Option<Pending>>,
    free_pending: Vec<u32>,
    by_uuid: FxHashMap<TxUuid, u32>,
    recent: FxHashMap<TxUuid, u64>,
    /// BPCC straddle responsibility sets.
    srs: Srs,
    pinned: FxHashMap<Version, PinnedPage>,
    /// Summary entry of every programmed page (also tells an erase which records it removes).
    summ: Vec<[u8; ENTRY_BYTES]>,
    block_last_end: Vec<u64>,
    arrivals: ftl::ArrivalClock,
    txs: u64,
    aborts: u64,
    gc_runs: u64,
    /// SCC: blocks erased to remove uncommitted intentions, and pages relocated for it.
    abort_erases: u64,
    abort_relocations: u64,
}

fn spec_for(protocol: Protocol) -> ftl::DesignSpec {
    match protocol {
        Protocol::Scc => ftl::DesignSpec {
            name: "txflash-scc",
            summary: "TxFlash, Simple Cyclic Commit: next-link cycles, aborted intentions erased",
            promise: Promise::AtomicTransactions,
            oob_record_bytes: |g| Protocol::Scc.oob_bytes().min(g.oob_bytes),
            format_version: format::FORMAT_VERSION,
            format: |flash, o| Ok(Box::new(TxFlashCyclic::format(flash, Protocol::Scc, o)?)),
            recover: |flash, o| {
                let (d, r) = TxFlashCyclic::recover(flash, Protocol::Scc, o)?;
                Ok((Box::new(d), r))
            },
            default_workload: "txmix",
            soak_params: &[],
            over_provisioning: ftl::OverProvisioningKnob::Param("over_provisioning"),
        },
        Protocol::Bpcc => ftl::DesignSpec {
            name: "txflash-bpcc",
            summary: "TxFlash, Back Pointer Cyclic Commit: next-links + back pointers, straddle responsibility sets",
            promise: Promise::AtomicTransactions,
            oob_record_bytes: |g| Protocol::Bpcc.oob_bytes().min(g.oob_bytes),
            format_version: format::FORMAT_VERSION,
            format: |flash, o| Ok(Box::new(TxFlashCyclic::format(flash, Protocol::Bpcc, o)?)),
            recover: |flash, o| {
                let (d, r) = TxFlashCyclic::recover(flash, Protocol::Bpcc, o)?;
                Ok((Box::new(d), r))
            },
            default_workload: "txmix",
            soak_params: &[],
            over_provisioning: ftl::OverProvisioningKnob::Param("over_provisioning"),
        },
    }
}

pub fn spec_scc() -> ftl::DesignSpec {
    spec_for(Protocol::Scc)
}

pub fn spec_bpcc() -> ftl::DesignSpec {
    spec_for(Protocol::Bpcc)
}

impl TxFlashCyclic {
    fn empty(
        flash: Flash,
        protocol: Protocol,
        o: &DesignOptions,
    ) -> Result<TxFlashCyclic, FtlError> {
        let g = flash.geometry().clone();
        let p = Params::parse(o, &g)?;
        let name = match protocol {
            Protocol::Scc => "txflash-scc",
            Protocol::Bpcc => "txflash-bpcc",
        };
        ftl::require_spare_area(name, protocol.oob_bytes(), &flash)?;
        if g.pages_per_block < 4
            || format::summary_bytes(g.pages_per_block as usize - 1) > g.page_bytes as usize
        {
            return Err(FtlError::InvalidOption(
                "block summary does not fit in one page for this geometry".into(),
            ));
        }
        // Summary pages take one page per block; `over_provisioning` is GC headroom; at least
        // the GC reserve, an open block per stream and chip and the room for transactions in
        // flight stay hidden (`surface::hidden_pages`). No commit records: no reserve.
        let data_pages = g.blocks() as u64 * (g.pages_per_block as u64 - 1);
        let by_op = (data_pages as f64 * (1.0 - p.over_provisioning)) as u64;
        let spare = surface::hidden_pages(&g, p.max_tx_pages, p.gc_free_blocks);
        let logical = by_op.min(data_pages.saturating_sub(spare)) as u32;
        if logical == 0 {
            return Err(FtlError::InvalidOption(
                "no logical pages left after over-provisioning and the room for the longest transaction (max_tx_bytes)".into(),
            ));
        }
        let pool = BlockPool::new(&g, 2, |_| false);
        let space = Space::new(pool, Validity::new(&g), p.gc_policy, p.wear_threshold);
        let n = logical as usize;
        Ok(TxFlashCyclic {
            protocol,
            space,
            logical,
            ppb: g.pages_per_block,
            map: vec![NONE; n],
            committed: vec![0; n],
            version: vec![0; n],
            busy_until: vec![0; n],
            locked: vec![NONE; n],
            recs: Vec::new(),
            free_recs: Vec::new(),
            pending: Vec::new(),
            free_pending: Vec::new(),
            by_uuid: FxHashMap::default(),
            recent: FxHashMap::default(),
            srs: Srs::default(),
            pinned: FxHashMap::default(),
            summ: vec![format::EMPTY_ENTRY; g.pages() as usize],
            block_last_end: vec![0; g.blocks() as usize],
            arrivals: ftl::ArrivalClock::starting_at(flash.idle_ns()),
            txs: 0,
            aborts: 0,
            gc_runs: 0,
            abort_erases: 0,
            abort_relocations: 0,
            flash,
            p,
        })
    }

    /// A fresh device: every block erased, every page at its initial version 0 (virtual, so
    /// nothing is written — an absent page is a committed self-linked version 0 [R]).
    pub fn format(
        flash: Flash,
        protocol: Protocol,
        o: &DesignOptions,
    ) -> Result<TxFlashCyclic, FtlError> {
        TxFlashCyclic::empty(flash, protocol, o)
    }

    fn bpcc(&self) -> bool {
        self.protocol == Protocol::Bpcc
    }

    fn new_rec(&mut self, r: Rec) -> u32 {
        if let Some(i) = self.free_recs.pop() {
            self.recs[i as usize] = r;
            i
        } else {
            self.recs.push(r);
            self.recs.len() as u32 - 1
        }
    }

    fn free_rec(&mut self, i: u32) {
        self.recs[i as usize] = Rec::Free;
        self.free_recs.push(i);
    }

    /// Programs one page and records its summary entry.
    fn program(
        &mut self,
        ppn: Ppn,
        content: Source<'_>,
        oob: &CyclicOob,
        not_before: u64,
        cause: OpCause,
    ) -> Result<u64, FtlError> {
        let mut b = [0u8; MAX_OOB_BYTES];
        oob.encode(self.protocol, &mut b);
        let n = self.protocol.oob_bytes() as usize;
        let span = content.program(&mut self.flash, ppn, &b[..n], not_before, cause)?;
        self.summ[ppn.0 as usize] = format::encode_entry(oob);
        let blk = self.flash.geometry().block_of(ppn).0 as usize;
        self.block_last_end[blk] = self.block_last_end[blk].max(span.end_ns);
        Ok(span.end_ns)
    }

    surface::summary_allocation!(CyclicOob::summary());

    /// Garbage collection (and static wear leveling) until enough blocks are free.
    fn gc_if_needed(&mut self, now: u64) -> Result<(), FtlError> {
        let mut rounds = 0;
        while self.space.pool.free_blocks() < self.reserve_blocks() {
            let ppb = self.ppb;
            let validity = &self.space.validity;
            let victim = self
                .space
                .pick_victim(&self.flash, |b| validity.valid_count(b) + 1 < ppb)
                .ok_or(FtlError::NoSpace)?;
            self.collect(victim, now, OpCause::GcCopy)?;
            rounds += 1;
            if rounds > self.space.pool.blocks() {
                return Err(FtlError::NoSpace);
            }
        }
        if let Some(v) = self.space.wear_victim(&self.flash, |_| true) {
            self.collect(v, now, OpCause::WearLevel)?;
        }
        Ok(())
    }

    /// Copies the live pages of `victim` (OOB verbatim: a copy is exactly as committed as its
    /// original, TxFlash §3.2 "SCC Garbage Collection") and erases it once every copy and every
    /// newer version of its stale pages is on flash. Returns the erase's end.
    fn collect(&mut self, victim: BlockId, now: u64, cause: OpCause) -> Result<u64, FtlError> {
        assert_eq!(self.space.pool.state(victim), BlockState::Full);
        self.gc_runs += 1;
        self.space.validity.unindex_block(victim);
        let live: Vec<(Ppn, u32)> = self.space.validity.valid_pages(victim).collect();
        let mut oob = [0u8; MAX_OOB_BYTES];
        let mut last = now;
        let mut moved_pending: Vec<(u32, u32)> = Vec::new();
        for (from, owner) in live {
            let (status, read) = self.flash.read(from, &mut oob, now, cause)?;
            // A page lost to the media moves as a lost copy (docs/reliability.md).
            // Its record's next-link (and BPCC's back pointer) is the cycle that commits it
            // (TxFlash §3.2, §3.3), kept nowhere else.
            let kept = media::record_kept_nowhere_else(from, "a cyclic commit's links");
            let at = (read.end_ns, cause);
            let ready = media::record_of_read(&mut self.flash, from, &status, &mut oob, at, kept)?;
            let rec = CyclicOob::decode(self.protocol, &oob)
                .ok()
                .ok_or_else(|| FtlError::Corrupt(format!("live {from} has a damaged OOB")))?;
            let to = self.alloc(GC)?;
            let end = self.program(to, Source::of_read(from, &status), &rec, ready, cause)?;
            self.space.validity.set_valid(to, owner);
            self.space.validity.invalidate(from, end);
            last = last.max(end);
            if owner < self.logical {
                debug_assert_eq!(self.map[owner as usize], from.0);
                self.map[owner as usize] = to.0;
            } else {
                match self.recs[(owner - self.logical) as usize] {
                    Rec::Pending { slot, idx } => {
                        let p = self.pending[slot as usize].as_mut().expect("pending");
                        let pp = &mut p.pages[idx as usize];
                        pp.ppn = to;
                        pp.end_ns = pp.end_ns.max(end);
                        moved_pending.push((slot, idx));
                    }
                    Rec::Pinned { id } => {
                        self.pinned.get_mut(&id).expect("pinned page").ppn = to;
                    }
                    Rec::Free => unreachable!("a free record owns no page"),
                }
            }
        }
        let after = last.max(self.space.validity.invalidated_by_ns(victim));
        let erase_end = self.flash.erase(victim, after, cause)?.end_ns;
        self.space.validity.erased(victim);
        self.space.pool.release(victim);
        self.block_last_end[victim.0 as usize] = 0;
        for (slot, idx) in moved_pending {
            let pp = &mut self.pending[slot as usize].as_mut().unwrap().pages[idx as usize];
            pp.old_copies_gone_ns = pp.old_copies_gone_ns.max(erase_end);
        }
        self.forget_block(victim, erase_end);
        Ok(erase_end)
    }

    /// The records of an erased block leave S: BPCC members leave their sets (GC precedence).
    fn forget_block(&mut self, block: BlockId, erase_end: u64) {
        let first = self.flash.geometry().first_page(block).0 as usize;
        for k in first..first + self.ppb as usize {
            let e = std::mem::replace(&mut self.summ[k], format::EMPTY_ENTRY);
            if !self.bpcc() {
                continue;
            }
            let Some(r) = format::decode_entry(&e).ok() else {
                continue;
            };
            if r.kind == Kind::Summary {
                continue;
            }
            if let Some((holder, dep)) = self.srs.on_erased(r.id(), erase_end) {
                self.release_holder(holder, dep);
            }
        }
    }

    /// A straddler's set is empty: if superseded it becomes garbage (erasable from `dep`).
    fn release_holder(&mut self, holder: Version, dep: u64) {
        if let Some(pin) = self.pinned.remove(&holder) {
            self.space
                .validity
                .invalidate(pin.ppn, dep.max(pin.superseded_ns));
            self.free_rec(pin.rec);
        }
    }

    /// SCC (TxFlash §3.2 "Handling Uncommitted Intention Records"): erases the blocks holding
    /// `ppns` (already invalid), relocating their live pages first. Returns when the last erase
    /// ends (0 if nothing to do). Open blocks are closed first so no copy lands in a victim.
    fn erase_intentions(&mut self, ppns: &[Ppn], now: u64) -> Result<u64, FtlError> {
        let g = self.flash.geometry().clone();
        let mut blocks: Vec<BlockId> = ppns.iter().map(|&p| g.block_of(p)).collect();
        blocks.sort_unstable();
        blocks.dedup();
        for &b in &blocks {
            match self.space.pool.state(b) {
                BlockState::Open(_) => {
                    self.space.pool.mark_full(b);
                }
                BlockState::Full => {}
                s => unreachable!("an intention lies in a {s:?} block"),
            }
        }
        let mut end = 0;
        for b in blocks {
            self.abort_relocations += self.space.validity.valid_count(b) as u64;
            end = end.max(self.collect(b, now, OpCause::TxMeta)?);
            self.abort_erases += 1;
        }
        Ok(end)
    }

    fn check_lpn(&self, lpn: Lpn) -> Result<(), FtlError> {
        check_range(lpn, 1, self.logical)
    }

    fn open_pending(&mut self, uuid: TxUuid, start_ns: u64, dynamic: bool) -> u32 {
        let p = Pending {
            uuid,
            pages: Vec::new(),
            held: None,
            first: None,
            start_ns,
            lpns: Vec::new(),
        };
        let slot = if let Some(s) = self.free_pending.pop() {
            self.pending[s as usize] = Some(p);
            s
        } else {
            self.pending.push(Some(p));
            self.pending.len() as u32 - 1
        };
        if uuid.0 != 0 || dynamic {
            self.by_uuid.insert(uuid, slot);
        }
        slot
    }

    /// Gives `lpn` its next version (above everything in S ∪ R and RAM [R]) and, for
    /// BPCC, the back pointer to its last committed version.
    fn next_version(&mut self, lpn: Lpn) -> (Version, u32) {
        let i = lpn.0 as usize;
        self.version[i] += 1;
        let back = if self.bpcc() { self.committed[i] } else { 0 };
        (
            Version {
                lpn: lpn.0,
                version: self.version[i],
            },
            back,
        )
    }

    /// Programs one intention of pending transaction `slot`.
    #[allow(clippy::too_many_arguments)]
    fn write_intention(
        &mut self,
        slot: u32,
        id: Version,
        kind: Kind,
        back: u32,
        next: Version,
        content: &Content,
        not_before: u64,
    ) -> Result<u64, FtlError> {
        // SCC invariant (§3.2) on flash: a new version of P starts only once the transaction
        // of P's previous version is entirely on flash and every aborted intention of P's last
        // transaction is erased. (BPCC needs the first half for its Case I.)
        debug_assert!(
            not_before >= self.busy_until[id.lpn as usize],
            "intention of {id:?} would start before its page is free"
        );
        let oob = CyclicOob {
            kind,
            lpn: id.lpn as u64,
            version: id.version,
            next_lpn: next.lpn as u64,
            next_version: next.version,
            back,
        };
        let ppn = self.alloc(HOST)?;
        let end = self.program(
            ppn,
            Source::Data(content),
            &oob,
            not_before,
            OpCause::HostData,
        )?;
        let p = self.pending[slot as usize].as_mut().unwrap();
        let idx = p.pages.len() as u32;
        p.pages.push(PendPage {
            id,
            back,
            next,
            ppn,
            end_ns: end,
            old_copies_gone_ns: 0,
        });
        let rec = self.new_rec(Rec::Pending { slot, idx });
        self.space.validity.set_valid(ppn, self.logical + rec);
        Ok(end)
    }

    fn release_pending(&mut self, slot: u32) -> Pending {
        let p = self.pending[slot as usize].take().expect("pending slot");
        self.free_pending.push(slot);
        self.by_uuid.remove(&p.uuid);
        for l in &p.lpns {
            if self.locked[l.0 as usize] == slot {
                self.locked[l.0 as usize] = NONE;
            }
        }
        for pp in &p.pages {
            let owner = self
                .space
                .validity
                .owner(pp.ppn)
                .expect("pending page live");
            self.free_rec(owner - self.logical);
        }
        p
    }

    /// Commits pending transaction `slot` (every intention written): the transaction is
    /// committed when the last intention is on flash. Returns that instant (the ack).
    fn commit(&mut self, slot: u32) -> Result<u64, FtlError> {
        let p = self.release_pending(slot);
        assert!(!p.pages.is_empty() && p.held.is_none());
        let commit_end = p.pages.iter().map(|x| x.end_ns).max().unwrap();
        for pp in &p.pages {
            let i = pp.id.lpn as usize;
            debug_assert!(pp.id.version > self.committed[i]);
            debug_assert!(
                !self.bpcc() || pp.back == self.committed[i],
                "BPCC back pointer"
            );
            self.supersede(i, commit_end);
            // Ownership moves from the pending record to the logical page.
            self.space.validity.invalidate(pp.ppn, 0);
            self.space.validity.set_valid(pp.ppn, i as u32);
            self.map[i] = pp.ppn.0;
            self.committed[i] = pp.id.version;
            self.busy_until[i] = self.busy_until[i].max(commit_end);
            if self.bpcc() {
                for (h, dep) in self.srs.on_commit(pp.id, pp.back, commit_end) {
                    self.release_holder(h, dep);
                }
            }
        }
        self.txs += 1;
        Ok(commit_end)
    }

    /// The committed version of page `i` becomes obsolete once the commit at `commit_end` is on
    /// flash — unless (BPCC) its straddle responsibility set is not empty: then it is pinned.
    fn supersede(&mut self, i: usize, commit_end: u64) {
        let old = self.map[i];
        if old == NONE {
            return;
        }
        let id = Version {
            lpn: i as u32,
            version: self.committed[i],
        };
        if self.bpcc() && self.srs.holds(id) {
            let rec = self.new_rec(Rec::Pinned { id });
            self.space.validity.invalidate(Ppn(old), 0);
            self.space.validity.set_valid(Ppn(old), self.logical + rec);
            self.pinned.insert(
                id,
                PinnedPage {
                    ppn: Ppn(old),
                    rec,
                    superseded_ns: commit_end,
                },
            );
        } else {
            self.space.validity.invalidate(Ppn(old), commit_end);
        }
        self.map[i] = NONE;
    }

    /// Abort (TxFlash §2.2): the held page is dropped; the written intentions are erased (SCC)
    /// or left on flash as members of future straddle responsibility sets (BPCC). Returns when
    /// the pages may be written again.
    fn abort_slot(&mut self, slot: u32, now: u64) -> Result<u64, FtlError> {
        let p = self.release_pending(slot);
        self.aborts += 1;
        for pp in &p.pages {
            self.space.validity.invalidate(pp.ppn, 0);
        }
        let mut barrier = now;
        match self.protocol {
            Protocol::Scc => {
                let ppns: Vec<Ppn> = p.pages.iter().map(|x| x.ppn).collect();
                let gone = p
                    .pages
                    .iter()
                    .map(|x| x.old_copies_gone_ns)
                    .max()
                    .unwrap_or(0);
                if !ppns.is_empty() {
                    barrier = barrier.max(gone).max(self.erase_intentions(&ppns, now)?);
                }
            }
            Protocol::Bpcc => {
                for pp in &p.pages {
                    self.srs
                        .add_dangling(pp.id, pp.next, 1, pp.old_copies_gone_ns, None);
                }
            }
        }
        // Nothing of the transaction may be overtaken by a newer version before its erase (SCC)
        // or before its own programs end (both: a later straddler must land after them).
        let ends = p.pages.iter().map(|x| x.end_ns).max().unwrap_or(0);
        for l in &p.lpns {
            let b = &mut self.busy_until[l.0 as usize];
            *b = (*b).max(barrier).max(ends);
        }
        Ok(barrier)
    }

    /// A static transaction (`WriteAtomic`), also plain writes and trims: every intention is
    /// programmed at once with its next-link to the following page, the last to the first.
    fn write_atomic(
        &mut self,
        uuid: TxUuid,
        pages: &[(Lpn, &Content)],
        kind: Kind,
        arrival: u64,
    ) -> Result<u64, FtlError> {
        if pages.is_empty() {
            return Err(FtlError::EmptyRequest);
        }
        if pages.len() as u64 > self.p.max_tx_pages as u64 {
            return Err(FtlError::TxTooLarge {
                pages: pages.len() as u64,
                max: self.p.max_tx_pages as u64,
            });
        }
        surface::check_room(self, pages.len() as u64)?;
        for (k, (l, _)) in pages.iter().enumerate() {
            self.check_lpn(*l)?;
            if pages[..k].iter().any(|(m, _)| m == l) {
                return Err(FtlError::DuplicatePage { lpn: *l });
            }
        }
        let start = self.isolate(pages.iter().map(|x| x.0), arrival, NONE)?;
        self.gc_if_needed(arrival)?;
        let slot = self.open_pending(uuid, start, false);
        let ids: Vec<(Version, u32)> = pages.iter().map(|(l, _)| self.next_version(*l)).collect();
        self.pending[slot as usize].as_mut().unwrap().lpns = pages.iter().map(|x| x.0).collect();
        for (k, (_, c)) in pages.iter().enumerate() {
            let (id, back) = ids[k];
            let next = ids[(k + 1) % ids.len()].0;
            if let Err(e) = self.write_intention(slot, id, kind, back, next, c, start) {
                let _ = self.abort_slot(slot, arrival);
                return Err(e);
            }
        }
        self.commit(slot)
    }

    /// One accepted page of a dynamic transaction (§3.4): the held page is written with its
    /// next-link to this one; this one is held, or (REAR) written linking back to the first
    /// page and the transaction committed. A failed program (no space) aborts the transaction.
    #[allow(clippy::too_many_arguments)]
    fn dynamic_page(
        &mut self,
        slot: u32,
        uuid: TxUuid,
        lpn: Lpn,
        content: &Content,
        rear: bool,
        start: u64,
        arrival: u64,
    ) -> Result<TxCompletion, FtlError> {
        let (id, back) = self.next_version(lpn);
        self.locked[lpn.0 as usize] = slot;
        let p = self.pending[slot as usize].as_mut().unwrap();
        p.lpns.push(lpn);
        p.start_ns = p.start_ns.max(start);
        let nb = p.start_ns;
        if p.first.is_none() {
            p.first = Some(id);
        }
        let first = p.first.unwrap();
        // The held page now knows its next-link: write it.
        let mut ack = arrival;
        if let Some(h) = p.held.take() {
            match self.write_intention(slot, h.id, h.kind, h.back, id, &h.content, nb) {
                Ok(end) => ack = end,
                Err(e) => {
                    self.abort_slot(slot, arrival)?;
                    return Err(e);
                }
            }
        }
        if rear {
            if let Err(e) = self.write_intention(slot, id, Kind::Data, back, first, content, nb) {
                self.abort_slot(slot, arrival)?;
                return Err(e);
            }
            let ack = self.commit(slot)?;
            self.recent.insert(uuid, ack);
            return Ok(TxCompletion {
                arrival_ns: arrival,
                ack_ns: ack,
                durable_ns: Some(ack),
            });
        }
        self.pending[slot as usize].as_mut().unwrap().held = Some(Held {
            id,
            kind: Kind::Data,
            back,
            content: content.clone(),
        });
        Ok(TxCompletion {
            arrival_ns: arrival,
            ack_ns: ack,
            durable_ns: None,
        })
    }

    /// Consistency of RAM state (tests call it after every step).
    pub fn check(&self) -> Result<(), ftl::InvariantViolation> {
        self.space.check_invariants()?;
        for (l, &ppn) in self.map.iter().enumerate() {
            if ppn != NONE && self.space.validity.owner(Ppn(ppn)) != Some(l as u32) {
                return Err(ftl::violation!(
                    "lpn {l} maps to {ppn} which it does not own"
                ));
            }
            if ppn == NONE && self.committed[l] != 0 {
                return Err(ftl::violation!(
                    "lpn {l}: committed version {} unmapped",
                    self.committed[l]
                ));
            }
            if self.committed[l] > self.version[l] {
                return Err(ftl::violation!(
                    "lpn {l}: committed above the high-water mark"
                ));
            }
        }
        self.srs.check()?;
        if !self.bpcc() && (!self.pinned.is_empty() || self.srs.dangling_count() != 0) {
            return Err("SCC keeps no straddle responsibility sets".into());
        }
        for (id, pin) in &self.pinned {
            if !self.srs.holds(*id) {
                return Err(ftl::violation!("{id:?} is pinned with an empty set"));
            }
            if self.space.validity.owner(pin.ppn) != Some(self.logical + pin.rec) {
                return Err(ftl::violation!("pinned {id:?} does not own its page"));
            }
        }
        for h in self.srs.holders() {
            let current = self.committed[h.lpn as usize] == h.version;
            if !current && !self.pinned.contains_key(&h) {
                return Err(ftl::violation!(
                    "holder {h:?} is neither current nor pinned"
                ));
            }
        }
        Ok(())
    }

    pub fn protocol(&self) -> Protocol {
        self.protocol
    }

    /// Pinned (superseded but still responsible) versions: BPCC GC precedence at work.
    pub fn pinned_versions(&self) -> usize {
        self.pinned.len()
    }
}

impl BlockDevice for TxFlashCyclic {
    fn design(&self) -> &'static str {
        match self.protocol {
            Protocol::Scc => "txflash-scc",
            Protocol::Bpcc => "txflash-bpcc",
        }
    }
    surface::block_requests!();
    fn metrics(&self) -> Vec<(String, f64)> {
        vec![
            ("transactions".into(), self.txs as f64),
            ("aborts".into(), self.aborts as f64),
            ("gc_blocks".into(), self.gc_runs as f64),
            ("abort_erases".into(), self.abort_erases as f64),
            ("abort_relocations".into(), self.abort_relocations as f64),
            ("pinned_versions".into(), self.pinned.len() as f64),
            ("srs_members".into(), self.srs.dangling_count() as f64),
        ]
    }
    fn transactional(&mut self) -> Option<&mut dyn Transactional> {
        Some(self)
    }
}

surface::transactional!(TxFlashCyclic);

/// Cyclic commit's own steps of the shared TxFlash surface.
impl CommitProtocol for TxFlashCyclic {
    surface::shared_state!();
    fn max_tx(&self) -> u32 {
        self.p.max_tx_pages
    }
    fn oob_len(&self) -> usize {
        MAX_OOB_BYTES
    }
    fn is_tombstone(&self, oob: &[u8]) -> bool {
        // The kind is the record's first byte: only a record that starts as a tombstone's can
        // be one, so the others (every page of a read) are not decoded and checked.
        oob.first() == Some(&(Kind::Tombstone as u8))
            && CyclicOob::decode(self.protocol, oob)
                .ok()
                .is_some_and(|r| r.kind == Kind::Tombstone)
    }
    fn write_atomic(
        &mut self,
        uuid: TxUuid,
        list: &[(Lpn, &Content)],
        kind: Kind,
        arrival: u64,
    ) -> Result<u64, FtlError> {
        TxFlashCyclic::write_atomic(self, uuid, list, kind, arrival)
    }
    fn pending_pages(&self, slot: u32, lpn: Lpn) -> (bool, u64) {
        let p = self.pending[slot as usize].as_ref().unwrap();
        (p.lpns.contains(&lpn), p.lpns.len() as u64)
    }
    fn in_flight_pages(&self) -> u64 {
        self.pending
            .iter()
            .flatten()
            .map(|p| p.lpns.len() as u64)
            .sum()
    }
    fn abort_pending(&mut self, slot: u32, now: u64) -> Result<(), FtlError> {
        self.abort_slot(slot, now).map(|_| ())
    }
    fn dynamic_page(
        &mut self,
        slot: u32,
        uuid: TxUuid,
        lpn: Lpn,
        content: &Content,
        rear: bool,
        start: u64,
        arrival: u64,
    ) -> Result<TxCompletion, FtlError> {
        TxFlashCyclic::dynamic_page(self, slot, uuid, lpn, content, rear, start, arrival)
    }
}

#[cfg(test)]
mod tests;
