//! TxFlash with the Traditional Commit protocol (Prabhakaran et al., OSDI'08 §3.1, §4.1).
//!
//! Every new version of a logical page is an *intention record* (data + OOB {LPN, version,
//! tx id}). A transaction of more than one page commits when its *commit record* page is on
//! flash; the commit record is programmed only after every intention has ended (its
//! `not_before` is the last intention's end). A one-page transaction sets `FLAG_SINGLE` in its
//! OOB and needs no commit record. Recovery picks, per logical page, the highest version backed
//! by a commit record or the single-page flag. Commit records stay live until every page they
//! cover is obsolete (a newer committed version is on flash).
//!
//! The last page of every block is a summary page holding the OOB records of the block's other
//! pages (TxFlash §4.1), so recovery reads one page per full block and scans only the
//! blocks that were open, page by page.

use crate::format::{self, Kind, Oob, ENTRY_BYTES, OOB_BYTES};
use crate::surface::{self, CommitProtocol, Isolation};
use flash::{BlockId, Content, Flash, Lpn, OpCause, Ppn};
use ftl::media::{self, Source};
use ftl::{
    check_range, BlockDevice, BlockPool, BlockState, Completion, DesignOptions, DwriteFlag,
    FtlError, GcPolicy, PageOutcome, Promise, RecoveryReport, Space, SwriteMode, Transactional,
    TxCapabilities, TxCompletion, TxUuid, Validity,
};
use rustc_hash::FxHashMap;
use std::collections::BTreeMap;

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
    "commit_reserve",
    "recovery_ns_per_record",
];

#[derive(Clone, Debug)]
pub struct Params {
    pub max_tx_pages: u32,
    pub over_provisioning: f64,
    /// Fraction of the data pages hidden to hold live commit records.
    pub commit_reserve: f64,
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
        let commit_reserve: f64 = o.get("commit_reserve", 0.25)?;
        if !(0.0..0.5).contains(&commit_reserve) || over_provisioning + commit_reserve >= 0.9 {
            return Err(FtlError::InvalidOption(
                "commit_reserve must be in [0, 0.5) and leave 10 % of the device".into(),
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
            commit_reserve,
            gc_policy,
            gc_free_blocks: crate::surface::gc_free_blocks(o, g)?,
            wear_threshold: o.get("wear_threshold", 64)?,
            isolation,
            recovery_ns_per_record: crate::summary_scan::recovery_ns_per_record(o)?,
        })
    }
}

/// An intention of a transaction that has not committed yet.
#[derive(Clone, Debug)]
struct PendPage {
    lpn: Lpn,
    ppn: Ppn,
    end_ns: u64,
}

#[derive(Clone, Debug)]
struct Pending {
    uuid: TxUuid,
    txid: u32,
    pages: Vec<PendPage>,
    /// Earliest instant its intentions may start (isolation wait).
    start_ns: u64,
    dynamic: bool,
}

/// Owner records for pages that are not a committed version of a logical page.
#[derive(Clone, Copy, Debug)]
enum Rec {
    Free,
    Commit { txid: u32 },
    Pending { slot: u32, idx: u32 },
}

#[derive(Clone, Debug)]
struct CommitLive {
    ppn: Ppn,
    rec: u32,
    /// Committed pages of the tx that are still the current version.
    live: u32,
    /// When the newest superseding commit (or compaction copy) is on flash.
    obsolete_ns: u64,
    /// The pages the transaction wrote (those whose `map_tx` is still this tx are live).
    lpns: Box<[u32]>,
    /// When the commit record is on flash. A compaction copy commits its page on its own, so
    /// none may land before the record: a cut between them would show that page of the
    /// transaction and not the others.
    durable_ns: u64,
}

pub struct TxFlashTc {
    flash: Flash,
    space: Space,
    p: Params,
    logical: u32,
    ppb: u32,
    /// lpn -> ppn of the committed version (or NONE).
    map: Vec<u32>,
    /// lpn -> txid of the committed version when it has a commit record, else NONE.
    map_tx: Vec<u32>,
    /// lpn -> highest version ever used ([R]).
    version: Vec<u32>,
    /// lpn -> when the last transaction that wrote it is committed on flash.
    busy_until: Vec<u64>,
    /// lpn -> pending slot of the running dynamic transaction that holds it, else NONE.
    locked: Vec<u32>,
    next_txid: u32,
    /// Live commit records by tx id.
    commits: FxHashMap<u32, CommitLive>,
    /// Most live commit records kept before the oldest is compacted (`commit_reserve`).
    commit_budget: usize,
    /// No live commit record has a smaller tx id: the oldest record (ids are given in the
    /// order transactions open) is the first id from here that `commits` holds.
    oldest_commit: u32,
    recs: Vec<Rec>,
    free_recs: Vec<u32>,
    pending: Vec<Option<Pending>>,
    free_pending: Vec<u32>,
    by_uuid: FxHashMap<TxUuid, u32>,
    /// Transactions acknowledged at or after the latest arrival (uuid -> ack), for
    /// AlreadyCommitted / DuplicateTx answers.
    recent: FxHashMap<TxUuid, u64>,
    /// Summary entry of every page, written at program time.
    summ: Vec<[u8; ENTRY_BYTES]>,
    block_last_end: Vec<u64>,
    arrivals: ftl::ArrivalClock,
    commit_records: u64,
    txs: u64,
    gc_runs: u64,
    compactions: u64,
    compacted_pages: u64,
}

fn oob_bytes(g: &flash::Geometry) -> u32 {
    OOB_BYTES.min(g.oob_bytes)
}

pub fn spec() -> ftl::DesignSpec {
    ftl::DesignSpec {
        name: "txflash-tc",
        summary: "TxFlash, Traditional Commit: intention records + a commit record per multi-page transaction",
        promise: Promise::AtomicTransactions,
        oob_record_bytes: oob_bytes,
        format_version: format::FORMAT_VERSION,
        format: |flash, o| Ok(Box::new(TxFlashTc::format(flash, o)?)),
        recover: |flash, o| {
            let (d, r) = TxFlashTc::recover(flash, o)?;
            Ok((Box::new(d), r))
        },
        default_workload: "txmix",
        // Half the seeds soak a 1 % commit reserve, so that the oldest commit records are
        // compacted many times in a cell (the default reserve needs longer runs to reach it).
        soak_params: &[&[], &[("commit_reserve", "0.01")]],
        over_provisioning: ftl::OverProvisioningKnob::Param("over_provisioning"),
    }
}

impl TxFlashTc {
    fn empty(flash: Flash, o: &DesignOptions) -> Result<TxFlashTc, FtlError> {
        let g = flash.geometry().clone();
        let p = Params::parse(o, &g)?;
        ftl::require_spare_area("txflash-tc", OOB_BYTES, &flash)?;
        if g.pages_per_block < 4
            || 12 + (g.pages_per_block as usize - 1) * ENTRY_BYTES + 4 > g.page_bytes as usize
        {
            return Err(FtlError::InvalidOption(
                "block summary does not fit in one page for this geometry".into(),
            ));
        }
        // Summary pages take one page per block; `commit_reserve` of the rest holds live commit
        // records (at most the budget, then the oldest is compacted), `over_provisioning` is
        // GC headroom; at least the GC reserve, an open block per stream and chip and the room
        // for transactions in flight (`surface::hidden_pages`) stay hidden besides the commit
        // records, one over budget (a commit made before the next compaction) included.
        let data_pages = g.blocks() as u64 * (g.pages_per_block as u64 - 1);
        let commit_budget = ((data_pages as f64 * p.commit_reserve) as u64).max(1);
        let by_op = (data_pages as f64 * (1.0 - p.over_provisioning - p.commit_reserve)) as u64;
        let spare = surface::hidden_pages(&g, p.max_tx_pages, p.gc_free_blocks);
        let logical = by_op.min(data_pages.saturating_sub(spare + commit_budget + 1)) as u32;
        if logical == 0 {
            return Err(FtlError::InvalidOption(
                "no logical pages left after over-provisioning, commit reserve and the room for the longest transaction (max_tx_bytes)".into(),
            ));
        }
        let pool = BlockPool::new(&g, 2, |_| false);
        let space = Space::new(pool, Validity::new(&g), p.gc_policy, p.wear_threshold);
        let n = logical as usize;
        Ok(TxFlashTc {
            space,
            logical,
            ppb: g.pages_per_block,
            map: vec![NONE; n],
            map_tx: vec![NONE; n],
            version: vec![0; n],
            busy_until: vec![0; n],
            locked: vec![NONE; n],
            next_txid: 1,
            commits: FxHashMap::default(),
            commit_budget: commit_budget as usize,
            oldest_commit: 0,
            recs: Vec::new(),
            free_recs: Vec::new(),
            pending: Vec::new(),
            free_pending: Vec::new(),
            by_uuid: FxHashMap::default(),
            recent: FxHashMap::default(),
            summ: vec![format::EMPTY_ENTRY; g.pages() as usize],
            block_last_end: vec![0; g.blocks() as usize],
            arrivals: ftl::ArrivalClock::starting_at(flash.idle_ns()),
            commit_records: 0,
            txs: 0,
            gc_runs: 0,
            compactions: 0,
            compacted_pages: 0,
            flash,
            p,
        })
    }

    /// A fresh device (every block erased).
    pub fn format(flash: Flash, o: &DesignOptions) -> Result<TxFlashTc, FtlError> {
        TxFlashTc::empty(flash, o)
    }

    fn max_tx_pages(&self) -> u32 {
        self.p.max_tx_pages
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

    fn owner_of_rec(&self, rec: u32) -> u32 {
        self.logical + rec
    }

    /// Programs one page and records its summary entry.
    fn program(
        &mut self,
        ppn: Ppn,
        content: Source<'_>,
        oob: &Oob,
        not_before: u64,
        cause: OpCause,
    ) -> Result<u64, FtlError> {
        let mut b = [0u8; OOB_BYTES as usize];
        oob.encode(&mut b);
        let span = content.program(&mut self.flash, ppn, &b, not_before, cause)?;
        self.summ[ppn.0 as usize] = format::encode_entry(oob);
        let blk = self.flash.geometry().block_of(ppn).0 as usize;
        self.block_last_end[blk] = self.block_last_end[blk].max(span.end_ns);
        Ok(span.end_ns)
    }

    surface::summary_allocation!(Oob {
        kind: Kind::Summary,
        flags: 0,
        lpn: 0,
        version: 0,
        txid: 0,
    });

    /// Before a host page is allocated: commit records over budget compacted, then garbage
    /// collection (and static wear leveling) until enough blocks are free.
    fn gc_if_needed(&mut self, now: u64) -> Result<(), FtlError> {
        self.compact_commit_records(now)?;
        self.collect_until_reserve(now)
    }

    /// Garbage collection (and static wear leveling) until enough blocks are free.
    fn collect_until_reserve(&mut self, now: u64) -> Result<(), FtlError> {
        let mut rounds = 0;
        while self.space.pool.free_blocks() < self.reserve_blocks() {
            // A victim must free at least one page (full blocks hold ppb − 1 data pages).
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

    /// Copies the live pages of `victim` (OOB verbatim: same LPN, version and tx id, so a copy
    /// is exactly as committed as its original) and erases it once every copy and every newer
    /// version of its stale pages is on flash.
    fn collect(&mut self, victim: BlockId, now: u64, cause: OpCause) -> Result<(), FtlError> {
        assert_eq!(self.space.pool.state(victim), BlockState::Full);
        self.gc_runs += 1;
        self.space.validity.unindex_block(victim);
        let live: Vec<(Ppn, u32)> = self.space.validity.valid_pages(victim).collect();
        let mut last = now;
        for (from, owner) in live {
            let (to, end) = self.copy_live(from, 0, now, cause)?;
            self.space.validity.set_valid(to, owner);
            self.space.validity.invalidate(from, end);
            last = last.max(end);
            if owner < self.logical {
                debug_assert_eq!(self.map[owner as usize], from.0);
                self.map[owner as usize] = to.0;
            } else {
                match self.recs[(owner - self.logical) as usize] {
                    Rec::Commit { txid } => {
                        self.commits.get_mut(&txid).expect("live commit").ppn = to;
                    }
                    Rec::Pending { slot, idx } => {
                        let p = self.pending[slot as usize].as_mut().expect("pending");
                        let pp = &mut p.pages[idx as usize];
                        pp.ppn = to;
                        pp.end_ns = pp.end_ns.max(end);
                    }
                    Rec::Free => unreachable!("a free record owns no page"),
                }
            }
        }
        let after = last.max(self.space.validity.invalidated_by_ns(victim));
        self.flash.erase(victim, after, cause)?;
        self.space.validity.erased(victim);
        self.space.pool.release(victim);
        self.block_last_end[victim.0 as usize] = 0;
        Ok(())
    }

    /// Keeps the live commit records within the budget `commit_reserve` sets, oldest first
    /// ([R], docs/txflash.md "Commit-record compaction"). A commit record stays live while any
    /// page it covers is current (§4.1), so without a bound they could outgrow any reserve and
    /// the device would refuse writes inside its exported capacity. Traditional commit bounds
    /// its log by checkpointing committed intentions and truncating the log tail (§3.1); TC in
    /// TxFlash has no log, so the tail's analogue is the oldest live commit record.
    fn compact_commit_records(&mut self, now: u64) -> Result<(), FtlError> {
        while self.commits.len() > self.commit_budget {
            while !self.commits.contains_key(&self.oldest_commit) {
                self.oldest_commit += 1;
            }
            let txid = self.oldest_commit;
            self.compact(txid, now)?;
            debug_assert!(!self.commits.contains_key(&txid), "tx {txid} still live");
        }
        Ok(())
    }

    /// Rewrites every current page of committed transaction `txid` as a single-page version
    /// (same LPN, version and tx id, `FLAG_SINGLE` set: committed on its own), then releases
    /// the commit record, erasable only after every copy is on flash. Before the record is
    /// erased recovery may find both versions; either is the committed content. The copies
    /// start after the record is on flash: a transaction that committed late (a dynamic one
    /// opened before younger ones) is the oldest at once and may be compacted before its
    /// record lands.
    fn compact(&mut self, txid: u32, now: u64) -> Result<(), FtlError> {
        self.compactions += 1;
        let lpns = self.commits[&txid].lpns.clone();
        let now = now.max(self.commits[&txid].durable_ns);
        for lpn in lpns.iter().map(|&l| l as usize) {
            if self.map_tx[lpn] != txid {
                continue;
            }
            self.collect_until_reserve(now)?;
            let from = Ppn(self.map[lpn]);
            let (to, end) = self.copy_live(from, format::FLAG_SINGLE, now, OpCause::TxMeta)?;
            self.compacted_pages += 1;
            self.space.validity.invalidate(from, end);
            self.space.validity.set_valid(to, lpn as u32);
            self.map[lpn] = to.0;
            self.map_tx[lpn] = NONE;
            self.release_commit_page(txid, end);
        }
        Ok(())
    }

    /// One page of `txid` is no longer its current committed version (superseded at, or
    /// copied by, `obsolete_ns`); the commit record dies with its last live page.
    fn release_commit_page(&mut self, txid: u32, obsolete_ns: u64) {
        let c = self
            .commits
            .get_mut(&txid)
            .expect("commit of a mapped page");
        c.live -= 1;
        c.obsolete_ns = c.obsolete_ns.max(obsolete_ns);
        if c.live == 0 {
            let c = self.commits.remove(&txid).unwrap();
            self.space.validity.invalidate(c.ppn, c.obsolete_ns);
            self.free_rec(c.rec);
        }
    }

    /// Reads live page `from` and programs it on GC's stream with its OOB record as it is, but
    /// for `extra_flags`. Returns the copy and when its program ends.
    fn copy_live(
        &mut self,
        from: Ppn,
        extra_flags: u8,
        now: u64,
        cause: OpCause,
    ) -> Result<(Ppn, u64), FtlError> {
        let mut oob = [0u8; OOB_BYTES as usize];
        let (status, read) = self.flash.read(from, &mut oob, now, cause)?;
        // A page lost to the media moves as a lost copy (docs/reliability.md).
        // Its record's version picks the newest committed one at recovery (TxFlash §3.1); TC keeps
        // only each page's highest version used, not its committed one.
        let kept = media::record_kept_nowhere_else(from, "TxFlash's version and tx id");
        let at = (read.end_ns, cause);
        let ready = media::record_of_read(&mut self.flash, from, &status, &mut oob, at, kept)?;
        let mut rec = Oob::decode(&oob)
            .ok()
            .ok_or_else(|| FtlError::Corrupt(format!("live {from} has a damaged OOB")))?;
        rec.flags |= extra_flags;
        let to = self.alloc(GC)?;
        let end = self.program(to, Source::of_read(from, &status), &rec, ready, cause)?;
        Ok((to, end))
    }

    fn check_lpn(&self, lpn: Lpn) -> Result<(), FtlError> {
        check_range(lpn, 1, self.logical)
    }

    fn open_pending(&mut self, uuid: TxUuid, start_ns: u64, dynamic: bool) -> u32 {
        let p = Pending {
            uuid,
            txid: self.next_txid,
            pages: Vec::new(),
            start_ns,
            dynamic,
        };
        self.next_txid += 1;
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

    /// Writes one intention of pending transaction `slot`.
    fn write_intention(
        &mut self,
        slot: u32,
        lpn: Lpn,
        content: &Content,
        kind: Kind,
        single: bool,
        not_before: u64,
    ) -> Result<(), FtlError> {
        let txid = self.pending[slot as usize].as_ref().unwrap().txid;
        let i = lpn.0 as usize;
        self.version[i] += 1;
        let oob = Oob {
            kind,
            flags: if single { format::FLAG_SINGLE } else { 0 },
            lpn: lpn.0 as u64,
            version: self.version[i],
            txid,
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
            lpn,
            ppn,
            end_ns: end,
        });
        let rec = self.new_rec(Rec::Pending { slot, idx });
        let owner = self.owner_of_rec(rec);
        self.space.validity.set_valid(ppn, owner);
        Ok(())
    }

    fn release_pending_recs(&mut self, slot: u32) -> Pending {
        let p = self.pending[slot as usize].take().expect("pending slot");
        self.free_pending.push(slot);
        self.by_uuid.remove(&p.uuid);
        for pp in &p.pages {
            if self.locked[pp.lpn.0 as usize] == slot {
                self.locked[pp.lpn.0 as usize] = NONE;
            }
            let owner = self
                .space
                .validity
                .owner(pp.ppn)
                .expect("pending page live");
            let rec = owner - self.logical;
            self.free_rec(rec);
        }
        p
    }

    /// Commits pending transaction `slot`: the commit record (multi-page) after every
    /// intention, then the mapping. Returns the commit instant (the ack).
    fn commit(&mut self, slot: u32) -> Result<u64, FtlError> {
        let n = self.pending[slot as usize].as_ref().unwrap().pages.len();
        assert!(n >= 1);
        let single = n == 1
            && !self.pending[slot as usize]
                .as_ref()
                .unwrap()
                .dynamic_multi();
        let (txid, intentions_end, start) = {
            let p = self.pending[slot as usize].as_ref().unwrap();
            (
                p.txid,
                p.pages.iter().map(|x| x.end_ns).max().unwrap(),
                p.start_ns,
            )
        };
        let mut commit_end = intentions_end;
        let mut commit_rec = None;
        if !single {
            let ppn = self.alloc(HOST)?;
            let oob = Oob {
                kind: Kind::Commit,
                flags: 0,
                lpn: 0,
                version: 0,
                txid,
            };
            let page = Content::Bytes(format::encode_commit(txid, n as u32));
            commit_end = self.program(
                ppn,
                Source::Data(&page),
                &oob,
                intentions_end.max(start),
                OpCause::TxMeta,
            )?;
            self.commit_records += 1;
            let rec = self.new_rec(Rec::Commit { txid });
            self.space.validity.set_valid(ppn, self.logical + rec);
            commit_rec = Some((ppn, rec));
        }
        let p = self.release_pending_recs(slot);
        if let Some((ppn, rec)) = commit_rec {
            // A dynamic transaction may commit after younger ones were compacted.
            self.oldest_commit = self.oldest_commit.min(txid);
            self.commits.insert(
                txid,
                CommitLive {
                    ppn,
                    rec,
                    live: n as u32,
                    obsolete_ns: 0,
                    lpns: p.pages.iter().map(|x| x.lpn.0).collect(),
                    durable_ns: commit_end,
                },
            );
        }
        for pp in &p.pages {
            let i = pp.lpn.0 as usize;
            self.supersede(i, commit_end);
            // Ownership moves from the pending record to the logical page.
            self.space.validity.invalidate(pp.ppn, 0);
            self.space.validity.set_valid(pp.ppn, i as u32);
            self.map[i] = pp.ppn.0;
            self.map_tx[i] = if single { NONE } else { txid };
            self.busy_until[i] = self.busy_until[i].max(commit_end);
        }
        self.txs += 1;
        Ok(commit_end)
    }

    /// The committed version of `lpn` becomes obsolete once the commit at `commit_end` is on
    /// flash; its commit record dies with its last live page.
    fn supersede(&mut self, i: usize, commit_end: u64) {
        let old = self.map[i];
        if old == NONE {
            return;
        }
        self.space.validity.invalidate(Ppn(old), commit_end);
        let t = self.map_tx[i];
        if t != NONE {
            self.release_commit_page(t, commit_end);
        }
        self.map[i] = NONE;
        self.map_tx[i] = NONE;
    }

    fn abort_slot(&mut self, slot: u32) {
        let p = self.release_pending_recs(slot);
        // Aborted intentions are left on flash without a commit record (TC): garbage at once.
        for pp in &p.pages {
            self.space.validity.invalidate(pp.ppn, 0);
        }
    }

    /// A static transaction (`WriteAtomic`), also used for plain writes and trims.
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
        if pages.len() as u64 > self.max_tx_pages() as u64 {
            return Err(FtlError::TxTooLarge {
                pages: pages.len() as u64,
                max: self.max_tx_pages() as u64,
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
        let single = pages.len() == 1;
        for (l, c) in pages {
            if let Err(e) = self.write_intention(slot, *l, c, kind, single, start) {
                self.abort_slot(slot);
                return Err(e);
            }
        }
        self.commit(slot)
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
        }
        let mut live: FxHashMap<u32, u32> = FxHashMap::default();
        for &t in &self.map_tx {
            if t != NONE {
                *live.entry(t).or_default() += 1;
            }
        }
        for (t, c) in &self.commits {
            if live.get(t).copied().unwrap_or(0) != c.live {
                return Err(ftl::violation!(
                    "commit of tx {t}: live {} vs mapped",
                    c.live
                ));
            }
            if self.space.validity.owner(c.ppn) != Some(self.logical + c.rec) {
                return Err(ftl::violation!("commit record of tx {t} is not live"));
            }
            if *t < self.oldest_commit {
                return Err(ftl::violation!(
                    "commit record of tx {t} is older than the oldest, {}",
                    self.oldest_commit
                ));
            }
        }
        if live.len() != self.commits.len() {
            return Err("a mapped page's commit record is missing".into());
        }
        Ok(())
    }

    /// Rebuilds the device from flash alone (TxFlash §3.1; [R] where noted): every block read
    /// through its summary page (or page by page when open), then the committed versions.
    pub fn recover(
        mut flash: Flash,
        o: &DesignOptions,
    ) -> Result<(TxFlashTc, RecoveryReport), FtlError> {
        let before = flash.stats().clone();
        let start = flash.idle_ns();
        let scan = crate::summary_scan::scan_blocks(
            &mut flash,
            start,
            &crate::summary_scan::RecordFormat {
                oob_bytes: OOB_BYTES as usize,
                decode_oob: &Oob::decode,
                is_summary: &|r: &Oob| r.kind == Kind::Summary,
                decode_summary: &format::decode_summary,
                keep: &|_: &Oob| true,
            },
        )?;
        let mut dev = TxFlashTc::empty(flash, o)?;
        let (commit_at, max_txid) = committed_transactions(&scan.found);
        let best = dev.newest_committed_versions(&scan.found, &commit_at);
        dev.install_recovered(&scan.used, &best, &commit_at);
        dev.next_txid = max_txid + 1;
        // TC analyses every record it found: commit records to learn which transactions
        // committed, every intention to find each page's newest committed version.
        let analysed = scan.found.len() as u64;
        let analysis_ns = crate::summary_scan::charge_analysis(
            &mut dev.flash,
            analysed,
            dev.p.recovery_ns_per_record,
        );
        dev.arrivals = ftl::ArrivalClock::starting_at(dev.flash.idle_ns());
        let mut report = RecoveryReport::measure(&dev.flash, &before, start);
        report
            .details
            .push(("summary_pages_read".into(), scan.summaries as f64));
        report
            .details
            .push(("pages_scanned".into(), scan.scanned as f64));
        report
            .details
            .push(("records_found".into(), scan.found.len() as f64));
        report
            .details
            .push(("records_analysed".into(), analysed as f64));
        report
            .details
            .push(("analysis_ms".into(), analysis_ns as f64 / 1e6));
        Ok((dev, report))
    }

    /// Per page, the highest committed version (lowest PPN among duplicates): (version, ppn,
    /// transaction or NONE for a single-page write). Raises the version high-water marks.
    fn newest_committed_versions(
        &mut self,
        found: &[(Ppn, Oob)],
        commit_at: &FxHashMap<u32, Ppn>,
    ) -> Vec<(u32, u32, u32)> {
        let logical = self.logical as u64;
        let mut best: Vec<(u32, u32, u32)> = vec![(0, NONE, NONE); self.logical as usize];
        for (ppn, r) in found {
            if !matches!(r.kind, Kind::Data | Kind::Tombstone) || r.lpn >= logical {
                continue;
            }
            let i = r.lpn as usize;
            self.version[i] = self.version[i].max(r.version);
            let committed = r.single() || commit_at.contains_key(&r.txid);
            if !committed {
                continue;
            }
            let (v, p, _) = best[i];
            if p == NONE || r.version > v || (r.version == v && ppn.0 < p) {
                best[i] = (r.version, ppn.0, if r.single() { NONE } else { r.txid });
            }
        }
        best
    }

    /// The recovered mapping, its commit records (live while a page they cover is) and the
    /// block states.
    fn install_recovered(
        &mut self,
        used: &[bool],
        best: &[(u32, u32, u32)],
        commit_at: &FxHashMap<u32, Ppn>,
    ) {
        let blocks = self.flash.geometry().blocks();
        for b in 0..blocks {
            if used[b as usize] {
                self.space.pool.mark_full(BlockId(b));
            }
        }
        // The current pages of each committed transaction, in LPN order.
        let mut live: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
        for (i, &(_, p, t)) in best.iter().enumerate() {
            if p == NONE {
                continue;
            }
            self.map[i] = p;
            self.map_tx[i] = t;
            self.space.validity.set_valid(Ppn(p), i as u32);
            if t != NONE {
                live.entry(t).or_default().push(i as u32);
            }
        }
        for (t, lpns) in live {
            let ppn = commit_at[&t];
            let rec = self.new_rec(Rec::Commit { txid: t });
            self.space.validity.set_valid(ppn, self.logical + rec);
            self.commits.insert(
                t,
                CommitLive {
                    ppn,
                    rec,
                    live: lpns.len() as u32,
                    obsolete_ns: 0,
                    lpns: lpns.into_boxed_slice(),
                    durable_ns: 0,
                },
            );
        }
        self.oldest_commit = self.commits.keys().min().copied().unwrap_or(0);
        for b in 0..blocks {
            if used[b as usize] {
                self.space.validity.index_block(BlockId(b));
            }
        }
    }
}

/// Committed transactions: those with a commit record on flash, at its lowest PPN among
/// duplicates after a GC crash ([R], docs/txflash.md "Recovery"); and the largest id seen.
fn committed_transactions(found: &[(Ppn, Oob)]) -> (FxHashMap<u32, Ppn>, u32) {
    let mut commit_at: FxHashMap<u32, Ppn> = FxHashMap::default();
    let mut max_txid = 0u32;
    for (ppn, r) in found {
        max_txid = max_txid.max(r.txid);
        if r.kind == Kind::Commit {
            let e = commit_at.entry(r.txid).or_insert(*ppn);
            if ppn.0 < e.0 {
                *e = *ppn;
            }
        }
    }
    (commit_at, max_txid)
}

impl Pending {
    /// A dynamic transaction opened with HEAD is multi-page even if it ends after one page
    /// (its intention was written without the single-page flag).
    fn dynamic_multi(&self) -> bool {
        self.dynamic
    }
}

impl BlockDevice for TxFlashTc {
    fn design(&self) -> &'static str {
        "txflash-tc"
    }
    surface::block_requests!();
    fn metrics(&self) -> Vec<(String, f64)> {
        vec![
            ("transactions".into(), self.txs as f64),
            ("commit_records".into(), self.commit_records as f64),
            ("gc_blocks".into(), self.gc_runs as f64),
            ("live_commit_records".into(), self.commits.len() as f64),
            ("commit_compactions".into(), self.compactions as f64),
            ("compacted_pages".into(), self.compacted_pages as f64),
        ]
    }
    fn transactional(&mut self) -> Option<&mut dyn Transactional> {
        Some(self)
    }
}

surface::transactional!(TxFlashTc);

/// Traditional commit's own steps of the shared TxFlash surface.
impl CommitProtocol for TxFlashTc {
    surface::shared_state!();
    fn max_tx(&self) -> u32 {
        self.max_tx_pages()
    }
    fn oob_len(&self) -> usize {
        OOB_BYTES as usize
    }
    fn is_tombstone(&self, oob: &[u8]) -> bool {
        // The kind is the record's first byte: only a record that starts as a tombstone's can
        // be one, so the others (every page of a read) are not decoded and checked.
        oob.first() == Some(&(Kind::Tombstone as u8))
            && Oob::decode(oob)
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
        TxFlashTc::write_atomic(self, uuid, list, kind, arrival)
    }
    fn pending_pages(&self, slot: u32, lpn: Lpn) -> (bool, u64) {
        let p = self.pending[slot as usize].as_ref().unwrap();
        (p.pages.iter().any(|x| x.lpn == lpn), p.pages.len() as u64)
    }
    fn in_flight_pages(&self) -> u64 {
        self.pending
            .iter()
            .flatten()
            .map(|p| p.pages.len() as u64)
            .sum()
    }
    fn abort_pending(&mut self, slot: u32, _now: u64) -> Result<(), FtlError> {
        self.abort_slot(slot);
        Ok(())
    }
    /// TC needs no next-link, so nothing is held back: the page is written as an intention at
    /// once, and REAR writes the commit record.
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
        let nb = start.max(self.pending[slot as usize].as_ref().unwrap().start_ns);
        self.write_intention(slot, lpn, content, Kind::Data, false, nb)?;
        self.locked[lpn.0 as usize] = slot;
        let end = self.pending[slot as usize]
            .as_ref()
            .unwrap()
            .pages
            .last()
            .unwrap()
            .end_ns;
        if rear {
            let ack = self.commit(slot)?;
            self.recent.insert(uuid, ack);
            return Ok(TxCompletion {
                arrival_ns: arrival,
                ack_ns: ack,
                durable_ns: Some(ack),
            });
        }
        Ok(TxCompletion {
            arrival_ns: arrival,
            ack_ns: end,
            durable_ns: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flash::{ContentTag, DeviceConfig};

    fn dev(o: DesignOptions) -> TxFlashTc {
        let flash = Flash::in_memory(DeviceConfig::preset("small").unwrap(), OOB_BYTES, true);
        TxFlashTc::format(flash, &o).unwrap()
    }

    fn tag(lpn: u32, write: u64) -> Content {
        Content::Tag(ContentTag { lpn, write })
    }

    fn read1(d: &mut TxFlashTc, lpn: u32, at: u64) -> PageOutcome {
        let mut out = Vec::new();
        d.read(Lpn(lpn), 1, at, &mut out).unwrap();
        out.pop().unwrap()
    }

    #[test]
    fn misuse_is_typed() {
        let mut d = dev(DesignOptions::default());
        let n = d.logical_pages();
        let c = tag(0, 1);
        assert!(matches!(
            d.swrite(TxUuid(1), &[], SwriteMode::Sync, 0),
            Err(FtlError::EmptyRequest)
        ));
        assert!(matches!(
            d.swrite(TxUuid(1), &[(Lpn(n), c.clone())], SwriteMode::Sync, 0),
            Err(FtlError::LpnOutOfRange { .. })
        ));
        assert!(matches!(
            d.swrite(TxUuid(1), &[(Lpn(0), c.clone())], SwriteMode::Async, 0),
            Err(FtlError::Unsupported(_))
        ));
        assert!(matches!(
            d.swrite(
                TxUuid(1),
                &[(Lpn(0), c.clone()), (Lpn(0), c.clone())],
                SwriteMode::Sync,
                0
            ),
            Err(FtlError::DuplicatePage { .. })
        ));
        let big: Vec<(Lpn, Content)> = (0..5).map(|i| (Lpn(i), tag(i, 1))).collect();
        let mut small = dev(DesignOptions::default().with("max_tx_bytes", 4 * 4096));
        assert!(matches!(
            small.swrite(TxUuid(1), &big, SwriteMode::Sync, 0),
            Err(FtlError::TxTooLarge { pages: 5, max: 4 })
        ));
        assert!(matches!(d.abort(TxUuid(9), 0), Err(FtlError::UnknownTx(_))));
        d.dwrite(TxUuid(7), Lpn(3), &c, DwriteFlag::Head, 0)
            .unwrap();
        assert!(matches!(
            d.dwrite(TxUuid(7), Lpn(4), &c, DwriteFlag::Head, 0),
            Err(FtlError::DuplicateTx(_))
        ));
        assert!(matches!(
            d.dwrite(TxUuid(8), Lpn(4), &c, DwriteFlag::Body, 0),
            Err(FtlError::UnknownTx(_))
        ));
        let ack = d
            .swrite(TxUuid(2), &[(Lpn(9), c.clone())], SwriteMode::Sync, 0)
            .unwrap()
            .ack_ns;
        assert!(matches!(
            d.swrite(TxUuid(2), &[(Lpn(10), c.clone())], SwriteMode::Sync, 1),
            Err(FtlError::DuplicateTx(_))
        ));
        assert!(matches!(
            d.abort(TxUuid(2), 1),
            Err(FtlError::AlreadyCommitted(_))
        ));
        assert!(ack > 0);
        assert!(matches!(
            DesignOptions::default()
                .with("isolaton", "wait")
                .check_known("txflash", PARAMS),
            Err(FtlError::InvalidOption(_))
        ));
        d.check().unwrap();
    }

    #[test]
    fn pages_of_a_running_dynamic_tx_conflict_and_abort_releases_them() {
        let mut d = dev(DesignOptions::default());
        d.dwrite(TxUuid(1), Lpn(5), &tag(5, 1), DwriteFlag::Head, 0)
            .unwrap();
        let e = d.write(Lpn(5), &[tag(5, 2)], 10).unwrap_err();
        assert_eq!(
            e,
            FtlError::Conflict {
                lpn: Lpn(5),
                holder: TxUuid(1)
            }
        );
        // Uncommitted data is not visible.
        assert_eq!(read1(&mut d, 5, 20), PageOutcome::Unwritten);
        // A refused page aborts its own transaction (and releases its locks).
        d.dwrite(TxUuid(2), Lpn(6), &tag(6, 1), DwriteFlag::Head, 21)
            .unwrap();
        assert!(matches!(
            d.dwrite(TxUuid(2), Lpn(5), &tag(5, 9), DwriteFlag::Body, 22),
            Err(FtlError::Conflict { .. })
        ));
        assert!(matches!(
            d.abort(TxUuid(2), 23),
            Err(FtlError::UnknownTx(_))
        ));
        d.write(Lpn(6), &[tag(6, 2)], 24).unwrap();
        d.abort(TxUuid(1), 30).unwrap();
        d.write(Lpn(5), &[tag(5, 3)], 40).unwrap();
        assert_eq!(read1(&mut d, 5, 50_000_000), PageOutcome::Data(tag(5, 3)));
        d.check().unwrap();
    }

    #[test]
    fn overlapping_transactions_wait_or_are_refused() {
        let mut d = dev(DesignOptions::default());
        let a = d
            .swrite(
                TxUuid(1),
                &[(Lpn(1), tag(1, 1)), (Lpn(2), tag(2, 1))],
                SwriteMode::Sync,
                0,
            )
            .unwrap();
        // B arrives before A's commit is on flash: its intention starts after A's commit.
        let b = d.write(Lpn(2), &[tag(2, 2)], 1).unwrap();
        assert!(
            b.ack_ns > a.ack_ns,
            "B must commit after A ({b:?} vs {a:?})"
        );
        let mut r = dev(DesignOptions::default().with("isolation", "refuse"));
        r.swrite(
            TxUuid(1),
            &[(Lpn(1), tag(1, 1)), (Lpn(2), tag(2, 1))],
            SwriteMode::Sync,
            0,
        )
        .unwrap();
        assert!(matches!(
            r.write(Lpn(2), &[tag(2, 2)], 1),
            Err(FtlError::Conflict { lpn: Lpn(2), .. })
        ));
        // A non-overlapping write proceeds at once.
        let c = r.write(Lpn(7), &[tag(7, 1)], 2).unwrap();
        assert!(c.ack_ns < a.ack_ns + 1_000_000);
    }

    #[test]
    fn commit_records_live_until_every_covered_page_is_obsolete() {
        let mut d = dev(DesignOptions::default());
        d.swrite(
            TxUuid(1),
            &[(Lpn(1), tag(1, 1)), (Lpn(2), tag(2, 1))],
            SwriteMode::Sync,
            0,
        )
        .unwrap();
        assert_eq!(d.commits.len(), 1);
        d.write(Lpn(1), &[tag(1, 2)], 10).unwrap();
        assert_eq!(d.commits.len(), 1, "page 2 still needs the commit record");
        d.write(Lpn(2), &[tag(2, 2)], 20).unwrap();
        assert_eq!(
            d.commits.len(),
            0,
            "single-page writes need no commit record"
        );
        d.check().unwrap();
    }

    /// Two-page transactions whose second page is never overwritten keep one commit record
    /// live each; past the budget the oldest is compacted, so the records stay within it and
    /// the device keeps accepting writes. Every page reads back its newest content, before and
    /// after a power cut.
    #[test]
    fn live_commit_records_stay_within_the_budget_by_compacting_the_oldest() {
        let o = DesignOptions::default().with("commit_reserve", "0.01");
        let mut d = dev(o.clone());
        let budget = d.commit_budget;
        let half = d.logical_pages() / 2;
        let mut newest = vec![None; d.logical_pages() as usize];
        let mut t = 0;
        for i in 0..4 * half as u64 {
            t += 1000;
            let (a, b) = (
                (i % half as u64) as u32,
                half + (i * 7 % half as u64) as u32,
            );
            let pages = [(Lpn(a), tag(a, i)), (Lpn(b), tag(b, i))];
            d.swrite(TxUuid(i + 1), &pages, SwriteMode::Sync, t)
                .unwrap();
            newest[a as usize] = Some(i);
            newest[b as usize] = Some(i);
            assert!(
                d.commits.len() <= budget + 1,
                "{} live records",
                d.commits.len()
            );
            if i % 97 == 0 {
                d.check().unwrap();
            }
        }
        assert!(d.compactions > 0 && d.compacted_pages > 0);
        d.check().unwrap();
        let expect = |d: &mut TxFlashTc| {
            let at = d.arrivals.last() + 1;
            for (l, w) in newest.iter().enumerate() {
                let want = w.map_or(PageOutcome::Unwritten, |w| {
                    PageOutcome::Data(tag(l as u32, w))
                });
                assert_eq!(read1(d, l as u32, at + l as u64), want, "lpn {l}");
            }
        };
        expect(&mut d);
        let mut flash = Box::new(d).into_flash();
        flash.start_clock_at(flash.idle_ns() + 1);
        let (mut r, _) = TxFlashTc::recover(flash, &o).unwrap();
        r.check().unwrap();
        expect(&mut r);
    }

    /// A dynamic transaction opened before many others commits after the oldest records
    /// were compacted past its id: it becomes the oldest, and is compacted in turn.
    #[test]
    fn a_dynamic_transaction_that_commits_late_is_compacted_in_turn() {
        let mut d = dev(DesignOptions::default().with("commit_reserve", "0.01"));
        let half = d.logical_pages() / 2;
        let late = TxUuid(1_000_000);
        d.dwrite(late, Lpn(half), &tag(half, 0), DwriteFlag::Head, 0)
            .unwrap();
        d.dwrite(late, Lpn(half + 1), &tag(half + 1, 0), DwriteFlag::Body, 1)
            .unwrap();
        let mut t = 1000;
        let write_pairs = |d: &mut TxFlashTc, from: u64, n: u64, t: &mut u64| {
            for i in from..from + n {
                *t += 1000;
                let a = (i % (half as u64 - 2)) as u32;
                let pages = [(Lpn(a), tag(a, i)), (Lpn(a + 1), tag(a + 1, i))];
                d.swrite(TxUuid(i + 1), &pages, SwriteMode::Sync, *t)
                    .unwrap();
            }
        };
        write_pairs(&mut d, 1, 200, &mut t);
        assert!(d.compactions > 0);
        let late_id = d.by_uuid[&late];
        let late_txid = d.pending[late_id as usize].as_ref().unwrap().txid;
        assert!(
            d.oldest_commit > late_txid,
            "younger records were compacted first"
        );
        d.dwrite(
            late,
            Lpn(half + 2),
            &tag(half + 2, 0),
            DwriteFlag::Rear,
            t + 1,
        )
        .unwrap();
        assert_eq!(d.oldest_commit, late_txid);
        d.check().unwrap();
        write_pairs(&mut d, 201, 100, &mut t);
        assert!(!d.commits.contains_key(&late_txid), "compacted in turn");
        d.check().unwrap();
        let at = d.arrivals.last() + 1;
        for (k, l) in (half..half + 3).enumerate() {
            assert_eq!(
                read1(&mut d, l, at + k as u64),
                PageOutcome::Data(tag(l, 0))
            );
        }
    }

    /// The late transaction of the test above is compacted by the writes that follow its REAR
    /// at once, while its commit record is still being programmed. Cut at every instant up to
    /// well after the record, the device must show the transaction whole or not at all: a
    /// compaction copy (committed on its own) that landed before the record showed one page of
    /// it (found by the soaks' `interleaved` shape, docs/txflash.md).
    #[test]
    fn a_late_transaction_compacted_at_once_is_all_or_nothing_at_every_cut() {
        let o = DesignOptions::default().with("commit_reserve", "0.01");
        // The `small` preset over 8 chips: the copies and the record go to different chips.
        let mut device = DeviceConfig::preset("small").unwrap();
        device.geometry.channels = 4;
        device.geometry.blocks_per_chip = 16;
        let mut flash = Flash::in_memory(device.clone(), OOB_BYTES, true);
        let base = flash.start_recording();
        let mut d = TxFlashTc::format(flash, &o).unwrap();
        let half = d.logical_pages() / 2;
        let late = TxUuid(1_000_000);
        let mut t = d.flash.idle_ns();
        for (k, flag) in [DwriteFlag::Head, DwriteFlag::Body].into_iter().enumerate() {
            let l = half + k as u32;
            d.dwrite(late, Lpn(l), &tag(l, 0), flag, t).unwrap();
        }
        // Two-page transaction `i` at `t`.
        let pair = |d: &mut TxFlashTc, i: u64, t: u64| {
            let a = (i % (half as u64 - 2)) as u32;
            let pages = [(Lpn(a), tag(a, i)), (Lpn(a + 1), tag(a + 1, i))];
            d.swrite(TxUuid(i + 1), &pages, SwriteMode::Sync, t)
                .unwrap();
        };
        // Transactions 1 ms apart (the chips idle between them), then the REAR, and the next
        // ones right behind it.
        for i in 1..=200u64 {
            t += 1_000_000;
            pair(&mut d, i, t);
        }
        t += 1_000_000;
        let rear = t;
        let late_txid = d.pending[d.by_uuid[&late] as usize].as_ref().unwrap().txid;
        let done = d
            .dwrite(
                late,
                Lpn(half + 2),
                &tag(half + 2, 0),
                DwriteFlag::Rear,
                rear,
            )
            .unwrap();
        for i in 201..=220u64 {
            t += 1000;
            pair(&mut d, i, t);
        }
        assert!(
            !d.commits.contains_key(&late_txid),
            "the late one compacted"
        );
        let log = d.flash.take_log().unwrap();
        let mut instants: Vec<u64> = log
            .ops
            .iter()
            .map(|op| op.span.end_ns)
            .filter(|&e| e >= rear && e <= done.ack_ns + 2_000_000)
            .collect();
        instants.sort_unstable();
        instants.dedup();
        assert!(instants.len() > 10);
        for at in instants {
            let image = log.image_at(base.as_ref(), at, false);
            let mut flash = Flash::new(device.clone(), image);
            flash.start_clock_at(at + 1);
            let (mut r, _) = TxFlashTc::recover(flash, &o).unwrap();
            let now = r.flash.idle_ns();
            let shown: Vec<bool> = (half..half + 3)
                .map(|l| read1(&mut r, l, now) == PageOutcome::Data(tag(l, 0)))
                .collect();
            assert!(
                shown.iter().all(|s| *s) || shown.iter().all(|s| !*s),
                "cut at {at}: the late transaction's pages shown {shown:?} (commit acknowledged at {})",
                done.ack_ns
            );
        }
    }

    #[test]
    fn recovery_reads_summaries_and_keeps_only_committed_transactions() {
        let mut d = dev(DesignOptions::default());
        let mut t = 0;
        for i in 0..600u32 {
            t += 1000;
            let l = i % 200;
            d.swrite(
                TxUuid(i as u64 + 1),
                &[
                    (Lpn(l), tag(l, i as u64)),
                    (Lpn(l + 200), tag(l + 200, i as u64)),
                ],
                SwriteMode::Sync,
                t,
            )
            .unwrap();
        }
        // A dynamic transaction left open at the power cut must vanish.
        t += 1000;
        d.dwrite(TxUuid(9999), Lpn(0), &tag(0, 7777), DwriteFlag::Head, t)
            .unwrap();
        d.dwrite(TxUuid(9999), Lpn(1), &tag(1, 7777), DwriteFlag::Body, t + 1)
            .unwrap();
        let mut flash = Box::new(d).into_flash();
        let at = flash.idle_ns() + 1;
        flash.start_clock_at(at);
        let full_blocks = (0..flash.geometry().blocks())
            .filter(|&b| flash.write_pointer(BlockId(b)) == flash.geometry().pages_per_block)
            .count();
        let (mut r, report) = TxFlashTc::recover(flash, &DesignOptions::default()).unwrap();
        r.check().unwrap();
        let summaries = report.details[0].1 as usize;
        assert_eq!(summaries, full_blocks);
        assert!(report.flash_reads < 3 * 128 + 4 * 32, "{report:?}");
        assert!(report.sim_ns > 0);
        for l in 0..200u32 {
            let last = (400 + l) as u64; // i = 400 + l is the last tx writing l (i % 200 == l)
            assert_eq!(
                read1(&mut r, l, u64::MAX / 2),
                PageOutcome::Data(tag(l, last))
            );
            assert_eq!(
                read1(&mut r, l + 200, u64::MAX / 2),
                PageOutcome::Data(tag(l + 200, last))
            );
        }
        // Versions continue above everything on flash ([R]).
        assert!(r.version[0] >= 4);
    }

    #[test]
    fn trim_is_persistent() {
        let mut d = dev(DesignOptions::default());
        d.write(Lpn(3), &[tag(3, 1), tag(4, 1)], 0).unwrap();
        d.trim(Lpn(3), 1, 10).unwrap();
        assert_eq!(read1(&mut d, 3, 20), PageOutcome::Unwritten);
        let mut flash = Box::new(d).into_flash();
        let at = flash.idle_ns() + 1;
        flash.start_clock_at(at);
        let (mut r, _) = TxFlashTc::recover(flash, &DesignOptions::default()).unwrap();
        let t = r.flash().idle_ns();
        assert_eq!(read1(&mut r, 3, t), PageOutcome::Unwritten);
        assert_eq!(read1(&mut r, 4, t + 1), PageOutcome::Data(tag(4, 1)));
    }
}
