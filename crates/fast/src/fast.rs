//! The FAST device: block-mapped data blocks, one sequential (SW) log block and a FIFO of fully
//! associative random (RW) log blocks, and the three merges (Lee et al., "A log buffer-based
//! flash translation layer using fully-associative sector translation", ACM TECS 6(3), 2007,
//! §3; docs/fast.md).
//!
//! A host page `lpn` belongs to logical block `lbn = lpn / pages_per_block` at offset
//! `off = lpn % pages_per_block`. A write goes
//! 1. **in place**, to page `off` of the logical block's data block, when that page can still be
//!    programmed (FAST's "no collision"; with NAND's in-order programming rule, `off` at or past
//!    the block's write pointer). A logical block written for the first time gets a data block;
//! 2. else, at offset 0, to a **new SW log block** for `lbn` (the current one is merged first);
//! 3. else, when the SW log block belongs to `lbn` and `off` is its next page, **appended to it**
//!    (a full SW log block is switch-merged at once);
//! 4. else to the **RW log**: appended to the current RW log block; when every RW log block is
//!    full the oldest is recycled: each logical block with a live page in it is full-merged.
//!
//! Merges: **switch** (a full SW log block becomes the data block; the old one is erased),
//! **partial** (the rest of a part-written SW log block is copied from the newest versions and
//! it becomes the data block), **full** (the newest version of each page of a logical block —
//! from its data block, the SW log block, the RW log blocks — is copied into a fresh block,
//! which becomes the data block; every block left without a live page is erased).
//!
//! Durability: a host write is acknowledged when its program ends; a block is erased only after
//! every program that superseded one of its pages has ended ([`Validity::invalidated_by_ns`]),
//! so a power cut never finds neither the old nor the new copy of an acknowledged page.
//! Recovery (`crate::recover`) rebuilds everything from the OOB records.

use crate::format::{Kind, PageOob, OOB_BYTES};
use crate::free::FreeBlocks;
use fixedbitset::FixedBitSet;
use flash::{BlockId, Content, Flash, Lpn, OpCause, Ppn};
use ftl::media::Source;
use ftl::{
    check_range, ArrivalClock, BlockDevice, Completion, DesignOptions, FtlError, PageOutcome,
    Promise, Validity,
};
use rustc_hash::FxHashMap;
use std::collections::VecDeque;

const PARAMS: [&str; 2] = ["op", "rw_log_blocks"];
/// Erased blocks kept back for merges: a full merge takes one before it frees the old data
/// block, and one more is kept so a new SW log block never waits for a merge to finish.
pub const RESERVE_BLOCKS: u32 = 2;
/// "No data block" in the block map.
pub(crate) const NO_BLOCK: BlockId = BlockId(u32::MAX);

/// Design parameters.
#[derive(Clone, Debug)]
pub struct Params {
    /// Share of the flash hidden from the host (the NVMFS paper's FAST: 10 %). The hidden blocks
    /// are the SW log block, the RW log blocks and [`RESERVE_BLOCKS`].
    pub op: f64,
    /// RW log blocks (default: every hidden block not otherwise used).
    pub rw_log_blocks: u32,
}

/// The layout the parameters give a device: exported logical blocks and RW log blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub logical_blocks: u32,
    pub rw_log_blocks: u32,
}

impl Params {
    pub fn parse(o: &DesignOptions, flash: &Flash) -> Result<(Params, Layout), FtlError> {
        o.check_known("fast", &PARAMS)?;
        let op: f64 = o.get("op", 0.10)?;
        if !(0.0..0.9).contains(&op) {
            return Err(FtlError::InvalidOption(format!(
                "op={op}: the hidden share must be within 0..0.9"
            )));
        }
        let blocks = flash.geometry().blocks();
        let logical_blocks = (blocks as f64 * (1.0 - op)).floor() as u32;
        let hidden = blocks - logical_blocks;
        // one SW log block, at least one RW log block, the merge reserve
        let most = hidden.saturating_sub(1 + RESERVE_BLOCKS);
        if most == 0 || logical_blocks == 0 {
            return Err(FtlError::InvalidOption(format!(
                "op={op} hides {hidden} of {blocks} blocks: FAST needs at least {} (one SW log block, one RW log block, {RESERVE_BLOCKS} for merges) and one to export",
                2 + RESERVE_BLOCKS
            )));
        }
        let rw_log_blocks: u32 = o.get("rw_log_blocks", most)?;
        if rw_log_blocks == 0 || rw_log_blocks > most {
            return Err(FtlError::InvalidOption(format!(
                "rw_log_blocks={rw_log_blocks}: must be within 1..={most} with op={op} on {blocks} blocks"
            )));
        }
        let layout = Layout {
            logical_blocks,
            rw_log_blocks,
        };
        Ok((Params { op, rw_log_blocks }, layout))
    }
}

/// The SW log block: offsets `0..next` of logical block `lbn`, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SwLog {
    pub lbn: u32,
    pub block: BlockId,
    pub next: u32,
    /// When its last program so far ends.
    pub end_ns: u64,
}

/// Merges and copies so far (FAST §3.3; the NVMFS paper's erase cost is the copies).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MergeStats {
    pub switch: u64,
    pub partial: u64,
    pub full: u64,
    /// Valid pages copied by merges.
    pub copies: u64,
    /// RW log blocks recycled (each costs one full merge per logical block it held live pages of).
    pub rw_recycled: u64,
}

/// A merge copy programmed, not yet the newest version of its logical page ([`Fast::commit`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Copied {
    from: Ppn,
    to: Ppn,
    lpn: u32,
    end_ns: u64,
}

pub struct Fast {
    pub(crate) flash: Flash,
    pub(crate) params: Params,
    pub(crate) ppb: u32,
    pub(crate) logical: u32,
    /// Block map: the data block of each logical block ([`NO_BLOCK`] before its first write).
    pub(crate) data: Vec<BlockId>,
    pub(crate) sw: Option<SwLog>,
    /// Full RW log blocks, oldest first.
    pub(crate) rw: VecDeque<BlockId>,
    /// The RW log block being appended to, with its next page.
    pub(crate) frontier: Option<(BlockId, u32)>,
    /// Page map of the RW log: logical pages whose newest version is in an RW log block.
    pub(crate) log_map: FxHashMap<u32, Ppn>,
    /// Owner (LPN) of every page that holds the newest version of its logical page.
    pub(crate) validity: Validity,
    /// Logical pages trimmed since their last write (they read as unwritten).
    pub(crate) trimmed: FixedBitSet,
    pub(crate) free: FreeBlocks,
    /// Blocks an operation the flash refused left behind (worn out: an erase that could not be
    /// done, a merge's new block abandoned): no live page, never taken again.
    pub(crate) worn: Vec<BlockId>,
    /// Allocation generation of each block (written in its pages' OOB records).
    pub(crate) block_gen: Vec<u64>,
    /// Earliest instant a block's programs may start: a block taken from the pool waits until
    /// every merge issued before has copied its pages (see [`Fast::take_block`]).
    pub(crate) ready_ns: Vec<u64>,
    /// End of the last merge copy issued.
    pub(crate) merges_end_ns: u64,
    pub(crate) gen: u64,
    pub(crate) seq: u64,
    pub(crate) clock: ArrivalClock,
    /// Latest end of a host program (what a flush waits for).
    pub(crate) programs_end_ns: u64,
    pub(crate) merges: MergeStats,
}

/// Builds the design on an erased device.
pub fn format(flash: Flash, o: &DesignOptions) -> Result<Box<dyn BlockDevice>, FtlError> {
    let mut dev = Fast::empty(flash, o)?;
    for b in 0..dev.flash.geometry().blocks() {
        dev.free.put(BlockId(b));
    }
    Ok(Box::new(dev))
}

impl Fast {
    /// The design with no block in any role (not even free): [`format`] and recovery fill it.
    pub(crate) fn empty(flash: Flash, o: &DesignOptions) -> Result<Fast, FtlError> {
        ftl::require_spare_area("fast", OOB_BYTES, &flash)?;
        let (params, layout) = Params::parse(o, &flash)?;
        let g = flash.geometry().clone();
        let logical = layout.logical_blocks * g.pages_per_block;
        Ok(Fast {
            ppb: g.pages_per_block,
            logical,
            data: vec![NO_BLOCK; layout.logical_blocks as usize],
            sw: None,
            rw: VecDeque::new(),
            frontier: None,
            log_map: FxHashMap::default(),
            validity: Validity::new(&g),
            trimmed: FixedBitSet::with_capacity(logical as usize),
            free: FreeBlocks::empty(&g),
            worn: Vec::new(),
            block_gen: vec![0; g.blocks() as usize],
            ready_ns: vec![0; g.blocks() as usize],
            merges_end_ns: 0,
            gen: 0,
            seq: 1,
            clock: ArrivalClock::starting_at(flash.idle_ns()),
            programs_end_ns: 0,
            merges: MergeStats::default(),
            params,
            flash,
        })
    }

    pub(crate) fn ppn(&self, block: BlockId, off: u32) -> Ppn {
        self.flash.geometry().ppn(block, off)
    }

    /// Where the newest version of `lpn` is: the RW log's page map, then the SW log block when
    /// it holds the offset, then the data block's page if it is live.
    pub(crate) fn locate(&self, lpn: u32) -> Option<Ppn> {
        if let Some(&p) = self.log_map.get(&lpn) {
            return Some(p);
        }
        let (lbn, off) = (lpn / self.ppb, lpn % self.ppb);
        if let Some(sw) = self.sw.filter(|s| s.lbn == lbn && off < s.next) {
            return Some(self.ppn(sw.block, off));
        }
        let d = self.data[lbn as usize];
        let p = (d != NO_BLOCK).then(|| self.ppn(d, off))?;
        self.validity.is_valid(p).then_some(p)
    }

    /// An erased block for a new role, stamped with a new generation. Its programs wait for
    /// every merge issued so far to finish copying, so that at any instant at most one merge
    /// is part-way and a power cut never finds more blocks holding needed versions than the
    /// pool can spare: recovery then always has a free block to repair with (docs/fast.md).
    pub(crate) fn take_block(&mut self) -> Result<BlockId, FtlError> {
        let block = self.free.take(&self.flash).ok_or(FtlError::NoSpace)?;
        self.stamp(block);
        Ok(block)
    }

    fn stamp(&mut self, block: BlockId) {
        self.gen += 1;
        self.block_gen[block.0 as usize] = self.gen;
        self.ready_ns[block.0 as usize] = self.merges_end_ns;
    }

    /// When a merge issued at `now` may start: after every earlier merge's copies.
    fn merge_start(&self, now: u64) -> u64 {
        now.max(self.merges_end_ns)
    }

    /// Programs a version of `lpn` (host data or a merge copy keeping its `seq`) into `ppn` of a
    /// block in role `kind`, and makes it the newest: `old`, the version it replaces, is
    /// invalidated as of this program's end.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn place(
        &mut self,
        ppn: Ppn,
        kind: Kind,
        (lpn, seq): (u32, u64),
        old: Option<Ppn>,
        content: Source<'_>,
        not_before: u64,
        cause: OpCause,
    ) -> Result<u64, FtlError> {
        let end = self.program_version(ppn, kind, (lpn, seq), content, not_before, cause)?;
        self.make_newest(ppn, kind, lpn, old, end);
        Ok(end)
    }

    /// Programs a version of `lpn` into `ppn` of a block in role `kind` (the maps unchanged).
    fn program_version(
        &mut self,
        ppn: Ppn,
        kind: Kind,
        (lpn, seq): (u32, u64),
        content: Source<'_>,
        not_before: u64,
        cause: OpCause,
    ) -> Result<u64, FtlError> {
        let block = self.flash.geometry().block_of(ppn);
        let oob = PageOob {
            kind,
            lpn,
            seq,
            gen: self.block_gen[block.0 as usize],
        };
        let not_before = not_before.max(self.ready_ns[block.0 as usize]);
        let span = content.program(&mut self.flash, ppn, &oob.encode(), not_before, cause)?;
        Ok(span.end_ns)
    }

    /// Makes the version of `lpn` at `ppn` (in role `kind`, programmed by `end_ns`) the newest:
    /// `old`, the version it replaces, is invalidated as of `end_ns`.
    fn make_newest(&mut self, ppn: Ppn, kind: Kind, lpn: u32, old: Option<Ppn>, end_ns: u64) {
        if let Some(old) = old {
            self.validity.invalidate(old, end_ns);
        }
        self.validity.set_valid(ppn, lpn);
        if kind == Kind::Rw {
            self.log_map.insert(lpn, ppn);
        } else {
            self.log_map.remove(&lpn);
        }
    }

    /// Makes a merge's copies the newest versions, once all of them are programmed: a merge the
    /// flash stops part-way (worn out) changes no map, and its sources keep serving reads.
    fn commit(&mut self, copies: &[Copied]) {
        for c in copies {
            self.make_newest(c.to, Kind::Data, c.lpn, Some(c.from), c.end_ns);
        }
    }

    /// Gives up `block`, taken for a merge the flash stopped: back to the pool while nothing
    /// was programmed on it, else set aside with the worn blocks.
    fn abandon(&mut self, block: BlockId) {
        if self.flash.write_pointer(block) == 0 && !self.flash.block_erase_torn(block) {
            self.free.put(block);
        } else {
            self.worn.push(block);
        }
    }

    /// Copies the newest version of `lpn` (at `src`) into `ppn`, a page of the block becoming
    /// its data block, with its `seq`; the copy becomes the newest version when the merge
    /// commits ([`Fast::commit`]).
    pub(crate) fn copy(
        &mut self,
        src: Ppn,
        ppn: Ppn,
        lpn: u32,
        now: u64,
        cause: OpCause,
    ) -> Result<Copied, FtlError> {
        let mut oob = [0u8; OOB_BYTES as usize];
        let (status, span) = self.flash.read(src, &mut oob, now, cause)?;
        // A version lost to the media is copied lost: its record still reads (docs/reliability.md).
        // Lost whole, its record's sequence number (which version is newest at recovery) is
        // kept nowhere else.
        let kept = ftl::media::record_kept_nowhere_else(src, "FAST's version sequence number");
        let at = (span.end_ns, cause);
        let ready = ftl::media::record_of_read(&mut self.flash, src, &status, &mut oob, at, kept)
            .map_err(|e| {
            e.in_context(format_args!("{src}, the newest version of lpn {lpn}"))
        })?;
        let rec = PageOob::decode(&oob)
            .map_err(|e| FtlError::Corrupt(format!("{src} (lpn {lpn}): {e}")))?;
        self.merges.copies += 1;
        let source = Source::of_read(src, &status);
        let end = self.program_version(ppn, Kind::Data, (lpn, rec.seq), source, ready, cause)?;
        self.merges_end_ns = self.merges_end_ns.max(end);
        Ok(Copied {
            from: src,
            to: ppn,
            lpn,
            end_ns: end,
        })
    }

    /// Erases a block that holds no newest version, once everything that superseded its pages
    /// is on flash, and returns it to the pool.
    pub(crate) fn release(
        &mut self,
        block: BlockId,
        now: u64,
        cause: OpCause,
    ) -> Result<(), FtlError> {
        self.erase(block, now, cause)?;
        self.free.put(block);
        Ok(())
    }

    pub(crate) fn erase(
        &mut self,
        block: BlockId,
        now: u64,
        cause: OpCause,
    ) -> Result<(), FtlError> {
        debug_assert_eq!(
            self.validity.valid_count(block),
            0,
            "{block} holds live pages"
        );
        let after = now.max(self.validity.invalidated_by_ns(block));
        if let Err(e) = self.flash.erase(block, after, cause) {
            self.worn.push(block);
            return Err(e.into());
        }
        self.validity.erased(block);
        Ok(())
    }

    /// One host page (FAST §3.2: data block if no collision, else the SW or an RW log block).
    fn write_page(&mut self, lpn: u32, content: &Content, now: u64) -> Result<u64, FtlError> {
        self.trimmed.set(lpn as usize, false);
        let (lbn, off) = (lpn / self.ppb, lpn % self.ppb);
        let seq = self.seq;
        self.seq += 1;
        let mut data = self.data[lbn as usize];
        if data == NO_BLOCK {
            data = self.take_block()?;
            self.data[lbn as usize] = data;
        }
        let host = OpCause::HostData;
        if off >= self.flash.write_pointer(data) {
            let ppn = self.ppn(data, off);
            let old = self.locate(lpn);
            return self.place(
                ppn,
                Kind::Data,
                (lpn, seq),
                old,
                Source::Data(content),
                now,
                host,
            );
        }
        if off == 0 {
            self.close_sw(now)?;
            let block = self.take_block()?;
            self.sw = Some(SwLog {
                lbn,
                block,
                next: 0,
                end_ns: 0,
            });
        }
        if let Some(sw) = self.sw.filter(|s| s.lbn == lbn && s.next == off) {
            let ppn = self.ppn(sw.block, off);
            let old = self.locate(lpn);
            let end = self.place(
                ppn,
                Kind::Sw,
                (lpn, seq),
                old,
                Source::Data(content),
                now,
                host,
            )?;
            let next = off + 1;
            self.sw = Some(SwLog {
                next,
                end_ns: sw.end_ns.max(end),
                ..sw
            });
            if next == self.ppb {
                self.close_sw(end)?;
            }
            return Ok(end);
        }
        let ppn = self.rw_page(now)?;
        let old = self.locate(lpn);
        self.place(
            ppn,
            Kind::Rw,
            (lpn, seq),
            old,
            Source::Data(content),
            now,
            host,
        )
    }

    /// Merges the SW log block into its logical block: a switch when it is full, else a partial
    /// merge (the offsets it lacks are copied in, newest version first).
    pub(crate) fn close_sw(&mut self, now: u64) -> Result<(), FtlError> {
        let Some(sw) = self.sw.take() else {
            return Ok(());
        };
        // The next block a merge or the SW log takes waits for this one's programs, as for a
        // merge's copies: a cut then finds at most one SW log block part-written. A long
        // sequential write had left three logical blocks each in two blocks with none free,
        // and recovery had nothing to repair with (found by the NBD crash soak; docs/fast.md).
        self.merges_end_ns = self.merges_end_ns.max(sw.end_ns);
        if sw.next == self.ppb {
            self.merges.switch += 1;
        } else {
            self.merges.partial += 1;
        }
        let start = self.merge_start(now);
        let mut copies = Vec::new();
        for off in sw.next..self.ppb {
            let lpn = sw.lbn * self.ppb + off;
            if let Some(src) = self.locate(lpn) {
                let to = self.ppn(sw.block, off);
                match self.copy(src, to, lpn, start, OpCause::GcCopy) {
                    Ok(c) => copies.push(c),
                    Err(e) => {
                        self.sw = Some(sw);
                        return Err(e);
                    }
                }
            }
        }
        self.commit(&copies);
        let old = std::mem::replace(&mut self.data[sw.lbn as usize], sw.block);
        assert_ne!(old, NO_BLOCK, "an SW log block always has a data block");
        self.release(old, now, OpCause::GcCopy)
    }

    /// The next RW log page: the current RW log block, a fresh one while there are fewer than
    /// `rw_log_blocks`, else the oldest, recycled.
    fn rw_page(&mut self, now: u64) -> Result<Ppn, FtlError> {
        if let Some((block, next)) = self.frontier {
            if next < self.ppb {
                self.frontier = Some((block, next + 1));
                return Ok(self.ppn(block, next));
            }
            self.rw.push_back(block);
            self.frontier = None;
        }
        let block = if (self.rw.len() as u32) < self.params.rw_log_blocks {
            self.take_block()?
        } else {
            self.recycle_oldest_log(now)?
        };
        self.frontier = Some((block, 1));
        Ok(self.ppn(block, 0))
    }

    /// FAST's RW log merge: every logical block with a live page in the oldest RW log block is
    /// full-merged; the block, left without live pages, is erased and reused.
    pub(crate) fn recycle_oldest_log(&mut self, now: u64) -> Result<BlockId, FtlError> {
        let victim = self.rw.pop_front().expect("a full RW log exists");
        let mut lbns: Vec<u32> = self
            .validity
            .valid_pages(victim)
            .map(|(_, lpn)| lpn / self.ppb)
            .collect();
        lbns.sort_unstable();
        lbns.dedup();
        for lbn in lbns {
            if let Err(e) = self.full_merge(lbn, now, OpCause::GcCopy) {
                self.rw.push_front(victim);
                return Err(e);
            }
        }
        self.merges.rw_recycled += 1;
        self.erase(victim, now, OpCause::GcCopy)?;
        self.stamp(victim);
        Ok(victim)
    }

    /// Copies the newest version of every page of `lbn` into a fresh block, which becomes its
    /// data block; the old data block (and the SW log block, if it was `lbn`'s) are erased.
    pub(crate) fn full_merge(
        &mut self,
        lbn: u32,
        now: u64,
        cause: OpCause,
    ) -> Result<(), FtlError> {
        let sources: Vec<Option<Ppn>> = (0..self.ppb)
            .map(|off| self.locate(lbn * self.ppb + off))
            .collect();
        self.merge_from(lbn, &sources, now, cause)
    }

    /// A full merge of `lbn` from the given newest versions (recovery passes what its scan
    /// found); every block of `lbn` left without a live page is erased.
    pub(crate) fn merge_from(
        &mut self,
        lbn: u32,
        sources: &[Option<Ppn>],
        now: u64,
        cause: OpCause,
    ) -> Result<(), FtlError> {
        let target = self.take_block()?;
        let start = self.merge_start(now);
        let mut copies = Vec::with_capacity(sources.len());
        for (off, src) in sources.iter().enumerate() {
            if let Some(src) = *src {
                let lpn = lbn * self.ppb + off as u32;
                let to = self.ppn(target, off as u32);
                match self.copy(src, to, lpn, start, cause) {
                    Ok(c) => copies.push(c),
                    Err(e) => {
                        self.abandon(target);
                        return Err(e);
                    }
                }
            }
        }
        self.commit(&copies);
        self.merges.full += 1;
        let old = std::mem::replace(&mut self.data[lbn as usize], target);
        let sw = self.sw.filter(|s| s.lbn == lbn).map(|s| s.block);
        if sw.is_some() {
            self.sw = None;
        }
        // Both are released even if the flash refuses the first: each keeps a role.
        let mut released = Ok(());
        for block in sw.into_iter().chain((old != NO_BLOCK).then_some(old)) {
            let r = self.release(block, now, cause);
            released = released.and(r);
        }
        released
    }

    /// The controller RAM FAST's maps need (FAST §3: a block map and a page map of the log
    /// blocks only): 4 bytes per logical block, 8 per RW log page (logical page and physical
    /// page), the SW log block's owner and fill. What `mapping_ram_bytes` reports, as the other
    /// designs report theirs; the simulator's own structures (`memory`) are larger.
    pub fn mapping_ram_bytes(&self) -> u64 {
        let log_pages = self.params.rw_log_blocks as u64 * self.ppb as u64;
        self.data.len() as u64 * 4 + log_pages * 8 + 8
    }

    /// How many roles each block has (data block, SW log block, RW log block, free, worn): one in
    /// a consistent state (the invariant check), none for a block recovery has yet to place.
    pub(crate) fn roles(&self) -> Vec<u8> {
        let mut role = vec![0u8; self.flash.geometry().blocks() as usize];
        let data = self.data.iter().copied().filter(|&d| d != NO_BLOCK);
        let logs = self.rw.iter().copied().chain(self.frontier.map(|f| f.0));
        let sw = self.sw.map(|s| s.block);
        let worn = self.worn.iter().copied();
        for b in data
            .chain(logs)
            .chain(sw)
            .chain(self.free.iter())
            .chain(worn)
        {
            role[b.0 as usize] += 1;
        }
        role
    }
}

impl BlockDevice for Fast {
    fn design(&self) -> &'static str {
        "fast"
    }
    fn promise(&self) -> Promise {
        Promise::DurableWrites
    }
    fn logical_pages(&self) -> u32 {
        self.logical
    }

    fn write(
        &mut self,
        start: Lpn,
        pages: &[Content],
        arrival_ns: u64,
    ) -> Result<Completion, FtlError> {
        check_range(start, pages.len() as u64, self.logical)?;
        self.clock.admit(arrival_ns)?;
        let mut ack = arrival_ns;
        for (k, content) in pages.iter().enumerate() {
            let end = self.write_page(start.0 + k as u32, content, arrival_ns)?;
            ack = ack.max(end);
        }
        self.programs_end_ns = self.programs_end_ns.max(ack);
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
        self.clock.admit(arrival_ns)?;
        out.clear();
        let mut ack = arrival_ns;
        let mut oob = [0u8; OOB_BYTES as usize];
        for lpn in start.0..start.0 + count {
            let found = if self.trimmed.contains(lpn as usize) {
                None
            } else {
                self.locate(lpn)
            };
            let Some(ppn) = found else {
                out.push(PageOutcome::Unwritten);
                continue;
            };
            let (status, span) = self
                .flash
                .read(ppn, &mut oob, arrival_ns, OpCause::HostData)?;
            ack = ack.max(span.end_ns);
            out.push(PageOutcome::of_mapped_page(status));
        }
        Ok(Completion {
            arrival_ns,
            ack_ns: ack,
        })
    }

    /// Every write is on flash when acknowledged: a flush waits for the writes still in flight.
    fn flush(&mut self, arrival_ns: u64) -> Result<Completion, FtlError> {
        self.clock.admit(arrival_ns)?;
        Ok(Completion {
            arrival_ns,
            ack_ns: arrival_ns.max(self.programs_end_ns),
        })
    }

    /// FAST has no trim (2007): a trimmed page reads as unwritten until written again, and its
    /// flash copy is kept — merged like a live page — so that no older version can come back
    /// after a power cut (after a cut it reads as its last data, as durable-writes allows).
    fn trim(&mut self, start: Lpn, count: u32, arrival_ns: u64) -> Result<Completion, FtlError> {
        check_range(start, count as u64, self.logical)?;
        self.clock.admit(arrival_ns)?;
        for lpn in start.0..start.0 + count {
            self.trimmed.insert(lpn as usize);
        }
        Ok(Completion {
            arrival_ns,
            ack_ns: arrival_ns,
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
        self.validity.check_invariants()?;
        let roles = self.roles();
        if let Some(b) = roles.iter().position(|&r| r != 1) {
            return Err(ftl::violation!("block {b} has {} roles", roles[b]));
        }
        let mut live = 0u64;
        for lpn in 0..self.logical {
            if let Some(p) = self.locate(lpn) {
                if self.validity.owner(p) != Some(lpn) {
                    return Err(ftl::violation!(
                        "lpn {lpn} resolves to {p}, which it does not own"
                    ));
                }
                live += 1;
            }
        }
        let owned: u64 = (0..self.flash.geometry().blocks())
            .map(|b| self.validity.valid_count(BlockId(b)) as u64)
            .sum();
        if owned != live {
            return Err(ftl::violation!(
                "{owned} live pages on flash but {live} logical pages resolve to one"
            ));
        }
        if let Some(sw) = self.sw {
            if self.data[sw.lbn as usize] == NO_BLOCK {
                return Err(ftl::violation!(
                    "SW log block of lbn {} has no data block",
                    sw.lbn
                ));
            }
        }
        for b in self.free.iter() {
            if self.flash.write_pointer(b) != 0 || self.validity.valid_count(b) != 0 {
                return Err(ftl::violation!("free {b} is not erased"));
            }
        }
        if let Some(b) = self
            .worn
            .iter()
            .find(|&&b| self.validity.valid_count(b) != 0)
        {
            return Err(ftl::violation!("worn {b} holds live pages"));
        }
        Ok(())
    }

    fn metrics(&self) -> Vec<(String, f64)> {
        let m = self.merges;
        vec![
            ("switch_merges".into(), m.switch as f64),
            ("partial_merges".into(), m.partial as f64),
            ("full_merges".into(), m.full as f64),
            ("merge_copies".into(), m.copies as f64),
            ("rw_logs_recycled".into(), m.rw_recycled as f64),
            ("rw_log_blocks".into(), self.params.rw_log_blocks as f64),
            ("mapping_ram_bytes".into(), self.mapping_ram_bytes() as f64),
            ("log_map_entries".into(), self.log_map.len() as f64),
        ]
    }

    fn memory(&self) -> Vec<(String, u64)> {
        let mut m = self.flash.memory();
        let map_entry = (std::mem::size_of::<(u32, Ppn)>() + 1) as u64;
        m.push(("fast.block_map".into(), flash::vec_bytes(&self.data)));
        m.push((
            "fast.log_page_map".into(),
            self.log_map.capacity() as u64 * map_entry,
        ));
        for (name, bytes) in self.validity.memory() {
            m.push((format!("space.{name}"), bytes));
        }
        m.push((
            "fast.blocks".into(),
            flash::vec_bytes(&self.block_gen)
                + flash::vec_bytes(&self.worn)
                + self.free.memory()
                + self.trimmed.len() as u64 / 8,
        ));
        m
    }
}
