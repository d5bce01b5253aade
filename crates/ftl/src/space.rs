//! [`Space`]: the allocator, page validity and garbage collection working together — the part
//! of a page-level FTL every design shares (greedy and cost-benefit GC, static wear leveling).
//!
//! GC copies every live page of a victim block to a fresh page of the GC stream (a read, then a
//! program that may start only after the read), lets the design rewrite the OOB record and update
//! its mapping through callbacks, and erases the victim only after (a) every copy is on flash and
//! (b) every newer version of the victim's stale pages is on flash — otherwise a power cut between
//! the erase and those programs would lose a page that was acknowledged.

use crate::alloc::{BlockPool, BlockState};
use crate::error::FtlError;
use crate::media;
use crate::validity::Validity;
use flash::{BlockId, Flash, OpCause, Ppn};

/// How GC chooses its victim.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GcPolicy {
    /// Fewest live pages.
    Greedy,
    /// Largest (1 − u) · age / (2u), u = utilisation of the block (Rosenblum & Ousterhout).
    CostBenefit,
}

/// A `gc_policy` parameter that names no policy is an invalid option.
impl std::str::FromStr for GcPolicy {
    type Err = crate::FtlError;
    fn from_str(s: &str) -> Result<Self, crate::FtlError> {
        match s {
            "greedy" => Ok(GcPolicy::Greedy),
            "cost-benefit" => Ok(GcPolicy::CostBenefit),
            _ => Err(crate::FtlError::InvalidOption(format!(
                "unknown GC policy '{s}' (greedy, cost-benefit)"
            ))),
        }
    }
}

/// One page moved by GC or wear leveling.
#[derive(Clone, Copy, Debug)]
pub struct Moved {
    pub owner: u32,
    pub from: Ppn,
    pub to: Ppn,
    /// When the copy is on flash.
    pub end_ns: u64,
}

#[derive(Clone, Debug)]
pub struct Space {
    pub pool: BlockPool,
    pub validity: Validity,
    pub policy: GcPolicy,
    /// Static wear leveling moves a cold block when max − min erase count exceeds this.
    pub wear_threshold: u32,
    /// Device erase count at the last wear check (designs with their own GC loop erase too).
    erases_at_wear_check: u64,
    /// [`collect`](Self::collect)'s lists, kept between calls (allocating them per victim held
    /// ~1 % of the GC run's samples).
    live_scratch: Vec<(Ppn, Option<u32>)>,
    moves_scratch: Vec<Moved>,
    oob_scratch: Vec<u8>,
}

/// Heap bytes of a block space per structure, named `space.<structure>` (for designs that keep
/// the validity and the pool without a [`Space`], too).
pub fn block_space_memory(validity: &Validity, pool: &BlockPool) -> Vec<(String, u64)> {
    let mut m: Vec<(String, u64)> = validity
        .memory()
        .iter()
        .map(|(name, bytes)| (format!("space.{name}"), *bytes))
        .collect();
    m.push(("space.block_pool".into(), pool.memory()));
    m
}

impl Space {
    /// Heap bytes per structure, named `space.<structure>`.
    pub fn memory(&self) -> Vec<(String, u64)> {
        block_space_memory(&self.validity, &self.pool)
    }

    pub fn new(
        pool: BlockPool,
        validity: Validity,
        policy: GcPolicy,
        wear_threshold: u32,
    ) -> Space {
        Space {
            pool,
            validity,
            policy,
            wear_threshold,
            erases_at_wear_check: 0,
            live_scratch: Vec::new(),
            moves_scratch: Vec::new(),
            oob_scratch: Vec::new(),
        }
    }

    /// Allocates the next page of `stream`; a block that becomes full joins the GC index.
    #[inline]
    pub fn allocate(&mut self, stream: usize, flash: &Flash) -> Option<Ppn> {
        let ppn = self.pool.allocate(stream, flash)?;
        self.note_if_full(flash.geometry().block_of(ppn));
        Some(ppn)
    }

    /// [`BlockPool::allocate_pending`]: a page of a batch that is programmed later.
    pub fn allocate_pending(
        &mut self,
        stream: usize,
        flash: &Flash,
        now_ns: u64,
        pending_ns: &mut [u64],
    ) -> Option<Ppn> {
        let t = &flash.config().timing;
        let cost = t.program_ns + t.transfer_ns(flash.geometry().page_bytes as u64);
        let ppn = self
            .pool
            .allocate_pending(stream, flash, now_ns, pending_ns, cost)?;
        self.note_if_full(flash.geometry().block_of(ppn));
        Some(ppn)
    }

    pub fn allocate_on(
        &mut self,
        stream: usize,
        chip: flash::ChipId,
        flash: &Flash,
    ) -> Option<Ppn> {
        let ppn = self.pool.allocate_on(stream, chip)?;
        self.note_if_full(flash.geometry().block_of(ppn));
        Some(ppn)
    }

    fn note_if_full(&mut self, block: BlockId) {
        if self.pool.state(block) == BlockState::Full {
            self.validity.index_block(block);
        }
    }

    /// Closes a stream's open blocks early (they become GC candidates).
    pub fn close_stream(&mut self, stream: usize, flash: &Flash) {
        let chips = flash.geometry().chips();
        let open: Vec<BlockId> = (0..chips)
            .filter_map(|c| {
                self.pool
                    .open_block(stream, flash::ChipId(c))
                    .map(|(b, _)| b)
            })
            .collect();
        self.pool.close_stream(stream);
        for b in open {
            self.validity.index_block(b);
        }
    }

    /// The victim GC would take now, among blocks `eligible` allows.
    pub fn pick_victim(
        &self,
        flash: &Flash,
        mut eligible: impl FnMut(BlockId) -> bool,
    ) -> Option<BlockId> {
        let ppb = flash.geometry().pages_per_block;
        match self.policy {
            GcPolicy::Greedy => self
                .validity
                .greedy_victim(|b| eligible(b) && self.validity.valid_count(b) < ppb),
            GcPolicy::CostBenefit => {
                let newest = self.pool.blocks_opened();
                self.validity
                    .indexed_blocks()
                    .filter(|&b| eligible(b) && self.validity.valid_count(b) < ppb)
                    .max_by(|&a, &b| {
                        let score = |blk: BlockId| {
                            let u = self.validity.valid_count(blk) as f64 / ppb as f64;
                            let age = (newest - self.pool.opened_at(blk)) as f64 + 1.0;
                            if u == 0.0 {
                                f64::INFINITY
                            } else {
                                (1.0 - u) * age / (2.0 * u)
                            }
                        };
                        score(a).total_cmp(&score(b)).then(b.0.cmp(&a.0))
                    })
            }
        }
    }

    /// Copies the live pages of `victim` to `stream` and erases it. `fresh_oob` may write a
    /// copy's whole OOB record itself (given the owner and the buffer; it returns true), or
    /// return false for the copy to carry the page's own record (then read with the page);
    /// `rebuild` writes the record of a live page (given its owner) whose data and spare area
    /// both failed to decode, from the design's mapping ([`media::record_of_live`]), or says why
    /// it cannot; `owner_lost` names the owner of a live page whose owner did not read back (a
    /// validity that reads owners from the spare area, which the media lost: issue #69) from
    /// the design's mapping, or says why it cannot; `on_move` updates the design's mapping;
    /// `erase_after_ns` adds a design-specific dependency for the erase (e.g. a mapping page
    /// that must be on flash first). Returns when the victim is erased.
    #[allow(clippy::too_many_arguments)]
    pub fn collect(
        &mut self,
        flash: &mut Flash,
        victim: BlockId,
        stream: usize,
        not_before: u64,
        cause: OpCause,
        mut fresh_oob: impl FnMut(u32, &mut [u8]) -> bool,
        mut rebuild: impl FnMut(u32, &mut [u8]) -> Result<(), FtlError>,
        mut owner_lost: impl FnMut(Ppn) -> Result<u32, FtlError>,
        mut on_move: impl FnMut(Moved),
        erase_after_ns: impl FnOnce(&[Moved]) -> u64,
    ) -> Result<u64, FtlError> {
        assert_eq!(
            self.pool.state(victim),
            BlockState::Full,
            "GC victim must be a full block"
        );
        self.validity.unindex_block(victim);
        let mut live = std::mem::take(&mut self.live_scratch);
        self.validity.live_owners_into(flash, victim, &mut live);
        let mut oob = std::mem::take(&mut self.oob_scratch);
        oob.clear();
        oob.resize(flash.oob_record_bytes() as usize, 0);
        let mut moves = std::mem::take(&mut self.moves_scratch);
        moves.clear();
        let mut last = not_before;
        for (i, &(from, owner)) in live.iter().enumerate() {
            // A metadata page's slot in a tag-only store, two copies ahead (its bytes are
            // shared, not read: `Flash::program_copy`).
            if let Some(&(ahead, _)) = live.get(i + 2) {
                flash.prefetch_data_at(ahead, 0, flash::DataHint::KeptBytes);
            }
            let owner = match owner {
                Some(owner) => owner,
                None => owner_lost(from)?,
            };
            // The copy's record: written afresh by the design, or the page's own, read with it.
            let fresh = fresh_oob(owner, &mut oob);
            let (state, read) = flash.sense(from, not_before, cause)?;
            let mut ready = read.end_ns;
            if !fresh {
                let rebuilt = |oob: &mut [u8]| rebuild(owner, oob);
                ready =
                    media::record_of_live(flash, (from, state), &mut oob, ready, cause, rebuilt)?;
            }
            // The data goes from page to page inside the device (a tag-only store shares a
            // metadata page's bytes): the read and the program are charged as ever. A page the
            // ECC found lost is copied lost (docs/reliability.md).
            let to = self.allocate(stream, flash).ok_or(FtlError::NoSpace)?;
            let span = media::copy_live(flash, (from, state), to, &oob, ready, cause)?;
            self.validity.set_valid(to, owner);
            self.validity.invalidate(from, span.end_ns);
            let m = Moved {
                owner,
                from,
                to,
                end_ns: span.end_ns,
            };
            on_move(m);
            moves.push(m);
            last = last.max(span.end_ns);
        }
        let after = last
            .max(self.validity.invalidated_by_ns(victim))
            .max(erase_after_ns(&moves));
        self.live_scratch = live;
        self.moves_scratch = moves;
        self.oob_scratch = oob;
        let erase = flash.erase(victim, after, cause)?;
        self.validity.erased(victim);
        self.pool.release(victim);
        Ok(erase.end_ns)
    }

    /// The `owner_lost` of a design whose validity keeps every live page's owner: a live page
    /// without one is damage.
    pub fn owner_kept(from: Ppn) -> Result<u32, FtlError> {
        Err(FtlError::Corrupt(format!(
            "live {from}: its owner does not read back"
        )))
    }

    /// A cold full block to move when wear is uneven beyond the threshold (checked every 64
    /// erases; the least-worn block comes from the validity's index by erase count).
    pub fn wear_victim(
        &mut self,
        flash: &Flash,
        eligible: impl FnMut(BlockId) -> bool,
    ) -> Option<BlockId> {
        let erases = flash.stats().total_erases();
        if erases < self.erases_at_wear_check + 64 {
            return None;
        }
        self.erases_at_wear_check = erases;
        let (min, max, _) = flash.wear_spread();
        if max - min <= self.wear_threshold {
            return None;
        }
        let counts = flash.erase_counts();
        self.validity
            .least_worn_indexed(counts, eligible)
            .filter(|&b| max - counts[b.0 as usize] > self.wear_threshold)
    }

    pub fn check_invariants(&self) -> Result<(), crate::InvariantViolation> {
        self.pool.check_invariants()?;
        self.validity.check_invariants()?;
        for b in 0..self.pool.blocks() {
            let block = BlockId(b);
            let state = self.pool.state(block);
            if state == BlockState::Free && self.validity.valid_count(block) != 0 {
                return Err(crate::violation!(
                    "free {block} holds {} live pages",
                    self.validity.valid_count(block)
                ));
            }
            if self.validity.is_indexed(block) && state != BlockState::Full {
                return Err(crate::violation!(
                    "{block} is a GC candidate but in state {state:?}"
                ));
            }
        }
        Ok(())
    }
}
