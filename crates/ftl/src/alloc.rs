//! Block allocator: free blocks per chip, one open block per (stream, chip).
//!
//! Streams separate data with different lifetimes (host data, GC copies, translation pages…);
//! each stream keeps an open block on every chip, and each page goes to the chip that will be
//! free soonest, so consecutive programs spread over chips and channels. Blocks a design keeps
//! for itself (checkpoint areas, the Atom Log Area…) are `Reserved` and never handed out here.

use flash::{BlockId, ChipId, Flash, Geometry, Ppn};
use std::collections::VecDeque;

/// Which chip a host page is written to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChipAllocation {
    /// The chip that is idle soonest (dynamic; the default).
    SoonestIdle,
    /// Chip `lpn mod chips`, as the OPTR paper's SSD does (§7: "allocates a logical page to a
    /// certain flash chip based on modulo"). A chip with no room left takes the page on the
    /// soonest-idle chip instead: GC is not per chip, so a chip can run out before the device
    /// does (counted; docs/optr.md).
    Modulo,
}

impl std::str::FromStr for ChipAllocation {
    type Err = crate::FtlError;
    fn from_str(s: &str) -> Result<Self, crate::FtlError> {
        match s {
            "soonest-idle" => Ok(ChipAllocation::SoonestIdle),
            "modulo" => Ok(ChipAllocation::Modulo),
            _ => Err(crate::FtlError::InvalidOption(format!(
                "unknown chip allocation '{s}' (soonest-idle, modulo)"
            ))),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockState {
    Free,
    /// Receiving pages for stream `0`.
    Open(u8),
    /// Fully programmed (or closed early); a GC candidate.
    Full,
    /// Owned by the design outside the pool.
    Reserved,
}

#[derive(Clone, Debug)]
pub struct BlockPool {
    geometry: Geometry,
    state: Vec<BlockState>,
    free: Vec<VecDeque<BlockId>>,
    /// open[stream][chip] = (block, next page).
    open: Vec<Vec<Option<(BlockId, u32)>>>,
    cursor: Vec<u32>,
    free_total: u32,
    /// Monotonic counter of blocks opened, per block the value when it was last opened
    /// (its age for cost-benefit GC and the order of post-checkpoint scans).
    opened_at: Vec<u64>,
    opened: u64,
    /// Per chip, the time `allocate_pending` chooses by (reused from call to call).
    pending_free_at: Vec<u64>,
    /// room[stream][chip]: the chip has an open block for the stream or a free block (kept in
    /// step with `open` and `free` by `refresh_room`; checked by `check_invariants`).
    room: Vec<Vec<bool>>,
    /// Bit `b % 8` of byte `b / 8`: block `b` is in use, neither free nor reserved (kept in step
    /// with `state` by `set_state`; checked by `check_invariants`). A checkpoint records it as it
    /// is: cheaper than walking every block's state (2 M blocks at 1 TB).
    in_use: Vec<u8>,
}

impl BlockPool {
    /// A pool over every block for which `reserved` is false; all start free (erased).
    pub fn new(
        geometry: &Geometry,
        streams: usize,
        reserved: impl Fn(BlockId) -> bool,
    ) -> BlockPool {
        assert!((1..256).contains(&streams));
        let chips = geometry.chips() as usize;
        let mut state = vec![BlockState::Free; geometry.blocks() as usize];
        let mut free = vec![VecDeque::new(); chips];
        let mut free_total = 0;
        for b in 0..geometry.blocks() {
            let block = BlockId(b);
            if reserved(block) {
                state[b as usize] = BlockState::Reserved;
            } else {
                free[geometry.chip_of_block(block).0 as usize].push_back(block);
                free_total += 1;
            }
        }
        let mut pool = BlockPool {
            geometry: geometry.clone(),
            state,
            free,
            open: vec![vec![None; chips]; streams],
            cursor: vec![0; streams],
            free_total,
            opened_at: vec![0; geometry.blocks() as usize],
            opened: 0,
            pending_free_at: vec![0; chips],
            room: vec![vec![true; chips]; streams],
            in_use: vec![0; geometry.blocks().div_ceil(8) as usize],
        };
        (0..chips).for_each(|c| pool.refresh_room(c));
        pool
    }

    /// Sets a block's state and its in-use bit.
    fn set_state(&mut self, block: BlockId, state: BlockState) {
        let b = block.0 as usize;
        self.state[b] = state;
        let used = !matches!(state, BlockState::Free | BlockState::Reserved);
        let (byte, bit) = (&mut self.in_use[b / 8], 1u8 << (b % 8));
        *byte = if used { *byte | bit } else { *byte & !bit };
    }

    /// Bit `b % 8` of byte `b / 8` set: block `b` is in use (neither free nor reserved), one bit
    /// per block in `blocks().div_ceil(8)` bytes.
    pub fn in_use_bitmap(&self) -> &[u8] {
        &self.in_use
    }

    /// Recomputes whether `chip` has room for each stream (after its queue or an open block
    /// changed).
    fn refresh_room(&mut self, chip: usize) {
        let queued = !self.free[chip].is_empty();
        for (room, open) in self.room.iter_mut().zip(&self.open) {
            room[chip] = queued || open[chip].is_some();
        }
    }

    /// Heap bytes: per-block state and age, the free queues, the open blocks and the chips with
    /// room.
    pub fn memory(&self) -> u64 {
        use flash::{deque_bytes, vec_bytes};
        let queues: u64 = self.free.iter().map(deque_bytes).sum();
        let open: u64 = self.open.iter().map(vec_bytes).sum();
        let room: u64 = self.room.iter().map(vec_bytes).sum();
        vec_bytes(&self.state)
            + vec_bytes(&self.opened_at)
            + queues
            + open
            + room
            + vec_bytes(&self.pending_free_at)
            + vec_bytes(&self.in_use)
    }

    pub fn blocks(&self) -> u32 {
        self.state.len() as u32
    }
    /// Blocks opened so far (the current "age" clock).
    pub fn blocks_opened(&self) -> u64 {
        self.opened
    }
    pub fn state(&self, block: BlockId) -> BlockState {
        self.state[block.0 as usize]
    }
    pub fn free_blocks(&self) -> u32 {
        self.free_total
    }
    pub fn free_blocks_on(&self, chip: ChipId) -> usize {
        self.free[chip.0 as usize].len()
    }
    /// Sequence number of the block's last opening (0 if never opened).
    pub fn opened_at(&self, block: BlockId) -> u64 {
        self.opened_at[block.0 as usize]
    }
    /// Blocks that are neither free nor reserved nor open: the GC candidates.
    pub fn full_blocks(&self) -> impl Iterator<Item = BlockId> + '_ {
        (0..self.state.len() as u32)
            .map(BlockId)
            .filter(|b| self.state[b.0 as usize] == BlockState::Full)
    }
    /// Free blocks of a chip in the order they will be handed out.
    pub fn free_queue(&self, chip: ChipId) -> impl Iterator<Item = BlockId> + '_ {
        self.free[chip.0 as usize].iter().copied()
    }
    /// Open block of `stream` on `chip`, with its next page.
    pub fn open_block(&self, stream: usize, chip: ChipId) -> Option<(BlockId, u32)> {
        self.open[stream][chip.0 as usize]
    }

    /// The chip with room for `stream` (an open block or a free one) whose time in `free_at`
    /// (one per chip) is least; ties go to the first at or after the stream's round-robin
    /// cursor. This runs for every page allocated, so it is one pass over the times from the
    /// cursor, chips without room counting as busy for ever (a chip runs out of free blocks
    /// only while GC is behind).
    fn soonest_chip(&self, stream: usize, free_at: &[u64]) -> Option<u32> {
        let room = &self.room[stream];
        first_least(free_at, self.cursor[stream] as usize, room).map(|c| c as u32)
    }

    /// The chip after `chip`, going round: a comparison, not a division (`%` held 14 % of an
    /// allocation's samples in the GC-heavy run; docs/performance.md, twelfth round).
    #[inline]
    fn chip_after(&self, chip: u32) -> u32 {
        let next = chip + 1;
        if next >= self.geometry.chips() {
            0
        } else {
            next
        }
    }

    /// Next page for `stream`, on the chip that will be idle soonest (ties: round robin).
    /// `None` when no chip has an open block with room or a free block.
    pub fn allocate(&mut self, stream: usize, flash: &Flash) -> Option<Ppn> {
        let chip = self.soonest_chip(stream, flash.chip_free_times())?;
        self.cursor[stream] = self.chip_after(chip);
        self.allocate_on(stream, ChipId(chip))
    }

    /// Like [`allocate`](Self::allocate), for pages allocated now and programmed together later
    /// (a static transaction's pre-allocated pages, a chain's next page): the chips' busy times
    /// do not yet show them, so `pending_ns[chip]` carries the work already assigned to each chip
    /// in this batch and grows by `cost_ns` on the chosen one; a chip idle before `now_ns`
    /// counts as idle at `now_ns`. Without it every page of a batch would land on the same
    /// (soonest idle) chip and be programmed one after another.
    pub fn allocate_pending(
        &mut self,
        stream: usize,
        flash: &Flash,
        now_ns: u64,
        pending_ns: &mut [u64],
        cost_ns: u64,
    ) -> Option<Ppn> {
        let chips = self.geometry.chips();
        assert_eq!(
            pending_ns.len(),
            chips as usize,
            "one pending entry per chip"
        );
        let mut free_at = std::mem::take(&mut self.pending_free_at);
        let times = flash.chip_free_times().iter().zip(pending_ns.iter());
        for (at, (&busy, &pending)) in free_at.iter_mut().zip(times) {
            *at = busy.max(now_ns) + pending;
        }
        let chip = self.soonest_chip(stream, &free_at);
        self.pending_free_at = free_at;
        let chip = chip?;
        self.cursor[stream] = self.chip_after(chip);
        pending_ns[chip as usize] += cost_ns;
        self.allocate_on(stream, ChipId(chip))
    }

    /// Next page for `stream` on a given chip.
    pub fn allocate_on(&mut self, stream: usize, chip: ChipId) -> Option<Ppn> {
        let ppb = self.geometry.pages_per_block;
        let opened = self.open[stream][chip.0 as usize].is_none();
        if opened {
            let block = self.take_free(chip, |q| q.pop_front())?;
            debug_assert_eq!(self.state[block.0 as usize], BlockState::Free);
            self.set_state(block, BlockState::Open(stream as u8));
            self.opened += 1;
            self.opened_at[block.0 as usize] = self.opened;
            self.open[stream][chip.0 as usize] = Some((block, 0));
        }
        let slot = &mut self.open[stream][chip.0 as usize];
        let (block, next) = slot.expect("open block was just ensured");
        let ppn = self.geometry.ppn(block, next);
        let filled = next + 1 == ppb;
        if filled {
            *slot = None;
            self.set_state(block, BlockState::Full);
        } else {
            *slot = Some((block, next + 1));
        }
        if opened || filled {
            self.refresh_room(chip.0 as usize);
        }
        Some(ppn)
    }

    /// Takes a specific free block out of the free queue and marks it open for `stream`
    /// (recovery uses it to re-adopt the blocks that were open before the power cut).
    pub fn adopt_open(&mut self, stream: usize, block: BlockId, next_page: u32) {
        let chip = self.geometry.chip_of_block(block);
        self.take_free(chip, |q| q.remove(q.iter().position(|&b| b == block)?));
        if let Some((old, _)) = self.open[stream][chip.0 as usize].take() {
            self.set_state(old, BlockState::Full);
        }
        self.opened += 1;
        self.opened_at[block.0 as usize] = self.opened;
        if next_page >= self.geometry.pages_per_block {
            self.set_state(block, BlockState::Full);
        } else {
            self.set_state(block, BlockState::Open(stream as u8));
            self.open[stream][chip.0 as usize] = Some((block, next_page));
        }
        self.refresh_room(chip.0 as usize);
    }

    /// Marks a free block full without opening it (recovery: a block found programmed).
    pub fn mark_full(&mut self, block: BlockId) {
        let chip = self.geometry.chip_of_block(block);
        self.take_free(chip, |q| q.remove(q.iter().position(|&b| b == block)?));
        for stream in self.open.iter_mut() {
            if stream[chip.0 as usize].is_some_and(|(b, _)| b == block) {
                stream[chip.0 as usize] = None;
            }
        }
        self.set_state(block, BlockState::Full);
        self.refresh_room(chip.0 as usize);
    }

    /// Closes every open block of `stream` (the rest of each block is skipped).
    pub fn close_stream(&mut self, stream: usize) {
        for chip in 0..self.open[stream].len() {
            if let Some((block, _)) = self.open[stream][chip].take() {
                self.set_state(block, BlockState::Full);
            }
        }
        (0..self.room[stream].len()).for_each(|c| self.refresh_room(c));
    }

    /// Returns an erased block to its chip's free queue.
    pub fn release(&mut self, block: BlockId) {
        let i = block.0 as usize;
        assert!(
            matches!(self.state[i], BlockState::Full),
            "only a full block can be released after erase (state {:?})",
            self.state[i]
        );
        self.set_state(block, BlockState::Free);
        let chip = self.geometry.chip_of_block(block).0 as usize;
        let q = &mut self.free[chip];
        let was_empty = q.is_empty();
        q.push_back(block);
        self.free_total += 1;
        if was_empty {
            self.refresh_room(chip);
        }
    }

    /// Takes a block out of `chip`'s free queue with `take` (which returns the block it took,
    /// if any), keeping the counts.
    fn take_free(
        &mut self,
        chip: ChipId,
        take: impl FnOnce(&mut VecDeque<BlockId>) -> Option<BlockId>,
    ) -> Option<BlockId> {
        let q = &mut self.free[chip.0 as usize];
        let block = take(q)?;
        self.free_total -= 1;
        if q.is_empty() {
            self.refresh_room(chip.0 as usize);
        }
        Some(block)
    }

    /// Invariant: free queues hold exactly the free blocks, each once.
    pub fn check_invariants(&self) -> Result<(), crate::InvariantViolation> {
        let mut seen = vec![false; self.state.len()];
        let mut n = 0;
        for q in &self.free {
            for b in q {
                if seen[b.0 as usize] || self.state[b.0 as usize] != BlockState::Free {
                    return Err(crate::violation!(
                        "{b} is queued as free twice or in state {:?}",
                        self.state[b.0 as usize]
                    ));
                }
                seen[b.0 as usize] = true;
                n += 1;
            }
        }
        for (stream, (room, open)) in self.room.iter().zip(&self.open).enumerate() {
            for (chip, q) in self.free.iter().enumerate() {
                let has = !q.is_empty() || open[chip].is_some();
                if room[chip] != has {
                    return Err(crate::violation!(
                        "chip {chip} has room for stream {stream}: {has}, noted as {}",
                        room[chip]
                    ));
                }
            }
        }
        if n != self.free_total {
            return Err(crate::violation!(
                "free count {} differs from queued {n}",
                self.free_total
            ));
        }
        for (b, &state) in self.state.iter().enumerate() {
            let used = !matches!(state, BlockState::Free | BlockState::Reserved);
            if (self.in_use[b / 8] >> (b % 8)) & 1 != used as u8 {
                return Err(crate::violation!(
                    "block {b} in state {state:?} has in-use bit {}",
                    !used
                ));
            }
        }
        let free_states = self
            .state
            .iter()
            .filter(|s| **s == BlockState::Free)
            .count() as u32;
        if free_states != n {
            return Err(crate::violation!(
                "{free_states} blocks are free but {n} are queued"
            ));
        }
        Ok(())
    }
}

/// Of the chips `admit` lets in, the one whose time is least, the first from `cursor` (going
/// round) among equals; `None` if none is let in. Two short passes: the least time over all
/// chips (a chip not let in counts as busy for ever; no branch per chip, no bounds check), then
/// the first chip from the cursor that is let in and has it. This runs for every page
/// allocated: one pass carrying the best so far took 1.4 times the instructions, and a bit mask
/// of the chips with the least time in place of the search 145 more per host write (twelfth
/// round, docs/performance.md).
fn first_least(times: &[u64], cursor: usize, admit: &[bool]) -> Option<usize> {
    let n = times.len().min(admit.len());
    let (times, admit) = (&times[..n], &admit[..n]);
    let least = times
        .iter()
        .zip(admit)
        .map(|(&time, &admitted)| if admitted { time } else { u64::MAX })
        .min()?;
    let cursor = cursor.min(n);
    let has_least = |c: &usize| admit[*c] && times[*c] == least;
    (cursor..n)
        .find(has_least)
        .or_else(|| (0..cursor).find(has_least))
}

/// Blocks a design needs free or open at all times, besides its fixed metadata areas: one
/// open block per write stream on every chip, plus the free blocks its GC keeps in reserve.
/// Every design passes this to [`logical_pages`] so the exported capacity is what the design
/// can hold at steady state: a design that exported more ran out of space on a wide
/// (8-chip, 16-block-per-chip) device at 80 % fill, and showed inflated write amplification
/// everywhere else, because its over-provisioning was partly spent on open blocks.
pub fn working_blocks(geometry: &Geometry, streams: usize, gc_free_blocks: u32) -> u32 {
    streams as u32 * geometry.chips() + gc_free_blocks
}

/// A design's GC free-block mark, the `gc_free_blocks` parameter (GC runs while fewer blocks are
/// free): `default` when absent (the design's own, derived from the geometry), refused below
/// `floor`, the fewest free blocks with which the design still recovers and makes progress.
pub fn gc_free_blocks(
    options: &crate::DesignOptions,
    design: &str,
    default: u32,
    floor: u32,
) -> Result<u32, crate::FtlError> {
    let mark: u32 = options.get("gc_free_blocks", default)?;
    if mark < floor {
        return Err(crate::FtlError::InvalidOption(format!(
            "gc_free_blocks={mark}: {design} needs at least {floor} free blocks to recover and make progress on this device (its default is {default})"
        )));
    }
    Ok(mark)
}

/// Host-visible logical pages for a device of `geometry` once `reserved_blocks` are set aside
/// and `over_provisioning` of the rest is hidden. At least two blocks per chip stay hidden so GC
/// always has somewhere to copy to.
pub fn logical_pages(geometry: &Geometry, reserved_blocks: u32, over_provisioning: f64) -> u32 {
    let usable =
        geometry.blocks().saturating_sub(reserved_blocks) as u64 * geometry.pages_per_block as u64;
    let by_op = (usable as f64 * (1.0 - over_provisioning)).floor() as u64;
    let min_spare = 2 * geometry.chips() as u64 * geometry.pages_per_block as u64;
    by_op.min(usable.saturating_sub(min_spare)) as u32
}

#[cfg(test)]
mod tests {
    use super::*;
    use flash::{Content, ContentTag, DeviceConfig, OpCause};

    /// 4 chips on 2 channels, 2 blocks of 2 pages each.
    fn tiny_flash() -> Flash {
        let mut config = DeviceConfig::preset("small").unwrap();
        config.geometry.channels = 2;
        config.geometry.chips_per_channel = 2;
        config.geometry.blocks_per_chip = 2;
        config.geometry.pages_per_block = 2;
        Flash::in_memory(config, 16, true)
    }

    /// `gc_free_blocks`: the default when absent, the value given at or above the floor, a
    /// typed error below it or when it is no number.
    #[test]
    fn the_gc_free_block_mark_takes_its_default_and_refuses_less_than_the_floor() {
        let o = |v: &str| crate::DesignOptions::default().with("gc_free_blocks", v);
        let mark = |o: &crate::DesignOptions| gc_free_blocks(o, "d", 10, 4);
        assert_eq!(mark(&crate::DesignOptions::default()).unwrap(), 10);
        assert_eq!(mark(&o("4")).unwrap(), 4);
        assert_eq!(mark(&o("40")).unwrap(), 40);
        for bad in ["3", "0", "-1", "many"] {
            assert!(
                matches!(mark(&o(bad)), Err(crate::FtlError::InvalidOption(_))),
                "gc_free_blocks={bad} passed"
            );
        }
    }

    fn chip_of_next(pool: &mut BlockPool, flash: &Flash) -> Option<u32> {
        let ppn = pool.allocate(0, flash)?;
        pool.check_invariants().unwrap();
        Some(flash.geometry().chip_of(ppn).0)
    }

    #[test]
    fn first_least_matches_a_plain_search() {
        use rand::{RngExt, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
        for _ in 0..20_000 {
            // Few chips, about 64, and many.
            let n = match rng.random_range(0..3) {
                0 => rng.random_range(1..20usize),
                1 => rng.random_range(60..70usize),
                _ => rng.random_range(1..130usize),
            };
            // Few distinct times, so ties are common; some chips busy for ever.
            let times: Vec<u64> = (0..n)
                .map(|_| match rng.random_range(0..5) {
                    0 => u64::MAX,
                    k => k,
                })
                .collect();
            let admitted: Vec<bool> = (0..n).map(|_| rng.random_range(0..4) != 0).collect();
            let cursor = rng.random_range(0..n + 1);
            let order: Vec<usize> = (cursor.min(n)..n).chain(0..cursor.min(n)).collect();
            let least = order
                .iter()
                .filter(|&&c| admitted[c])
                .map(|&c| times[c])
                .min();
            let want = least.and_then(|t| {
                order
                    .iter()
                    .copied()
                    .find(|&c| admitted[c] && times[c] == t)
            });
            assert_eq!(
                first_least(&times, cursor, &admitted),
                want,
                "times {times:?} admitted {admitted:?} cursor {cursor}"
            );
        }
    }

    #[test]
    fn allocation_takes_the_soonest_idle_chip_and_skips_chips_without_room() {
        let mut flash = tiny_flash();
        let geometry = flash.geometry().clone();
        let mut pool = BlockPool::new(&geometry, 1, |_| false);
        let idle: Vec<_> = (0..4).map(|_| chip_of_next(&mut pool, &flash)).collect();
        assert_eq!(
            idle,
            [Some(0), Some(1), Some(2), Some(3)],
            "ties: round robin"
        );
        // Chip 0 becomes busy: the idle chips come first, from the cursor (back at chip 0).
        let tag = Content::Tag(ContentTag { lpn: 0, write: 0 });
        let first = geometry.ppn(geometry.block(ChipId(0), 0), 0);
        flash
            .program(first, &tag, &[], 0, OpCause::HostData)
            .unwrap();
        let next: Vec<_> = (0..3).map(|_| chip_of_next(&mut pool, &flash)).collect();
        assert_eq!(next, [Some(1), Some(2), Some(3)]);
        // The other 9 pages, then nothing: every chip's blocks are open-and-full or gone.
        let rest: Vec<_> = std::iter::from_fn(|| chip_of_next(&mut pool, &flash)).collect();
        assert_eq!(rest.len(), 9);
        assert_eq!(pool.free_blocks(), 0);
        // A block released on chip 2 is the only room left.
        pool.release(geometry.block(ChipId(2), 0));
        pool.check_invariants().unwrap();
        assert_eq!(chip_of_next(&mut pool, &flash), Some(2));
        assert_eq!(chip_of_next(&mut pool, &flash), Some(2));
        assert_eq!(chip_of_next(&mut pool, &flash), None);
    }

    /// Six chips on two channels, two pages per block: blocks fill, and chips run out of room,
    /// within a few operations.
    fn churn_config(blocks_per_chip: u32) -> DeviceConfig {
        let mut config = DeviceConfig::preset("small").unwrap();
        config.geometry.channels = 2;
        config.geometry.chips_per_channel = 3;
        config.geometry.blocks_per_chip = blocks_per_chip;
        config.geometry.pages_per_block = 2;
        config
    }

    /// Against the rule written plainly: each allocation goes to the chip with room whose time
    /// is least, ties to the first from the stream's cursor, over random times, two streams,
    /// blocks filling, released and closed.
    #[test]
    fn the_chip_choice_matches_the_rule_under_random_churn() {
        use rand::{RngExt, SeedableRng};
        let flash = Flash::in_memory(churn_config(3), 16, true);
        let geometry = flash.geometry().clone();
        let chips = geometry.chips() as usize;
        let mut pool = BlockPool::new(&geometry, 2, |_| false);
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        let mut cursor = [0usize; 2];
        for step in 0..5_000 {
            let stream = rng.random_range(0..2);
            match rng.random_range(0..10) {
                0 => {
                    let full: Vec<_> = (0..geometry.blocks())
                        .map(BlockId)
                        .filter(|&b| pool.state(b) == BlockState::Full)
                        .collect();
                    if let Some(&b) = full.get(rng.random_range(0..full.len().max(1))) {
                        pool.release(b);
                    }
                }
                1 => pool.close_stream(stream),
                _ => {
                    // Few distinct times, so ties are common.
                    let mut pending: Vec<u64> =
                        (0..chips).map(|_| rng.random_range(0..3)).collect();
                    let times = pending.clone();
                    let room = |c: usize| {
                        pool.open_block(stream, ChipId(c as u32)).is_some()
                            || pool.free_blocks_on(ChipId(c as u32)) > 0
                    };
                    let want = (0..chips)
                        .filter(|&c| room(c))
                        .min_by_key(|&c| (times[c], (c + chips - cursor[stream]) % chips));
                    let got = pool
                        .allocate_pending(stream, &flash, 0, &mut pending, 1)
                        .map(|ppn| geometry.chip_of(ppn).0 as usize);
                    assert_eq!(got, want, "step {step}");
                    if let Some(c) = got {
                        cursor[stream] = (c + 1) % chips;
                    }
                }
            }
            pool.check_invariants().unwrap();
        }
    }

    /// The in-use bitmap a checkpoint records, kept on every state change, equals one computed
    /// from the blocks' states (reserved blocks, adoption and marking as recovery does them,
    /// opening, filling, closing, release).
    #[test]
    fn the_in_use_bitmap_follows_every_state_change() {
        use rand::{RngExt, SeedableRng};
        let geometry = churn_config(13).geometry;
        let mut pool = BlockPool::new(&geometry, 2, |b| b.0 % 7 == 3);
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(9);
        let in_state = |pool: &BlockPool, pick: fn(BlockState) -> bool| -> Vec<BlockId> {
            (0..geometry.blocks())
                .map(BlockId)
                .filter(|&b| pick(pool.state(b)))
                .collect()
        };
        for step in 0..4_000 {
            let stream = rng.random_range(0..2);
            let chip = ChipId(rng.random_range(0..geometry.chips()));
            match rng.random_range(0..12) {
                0 => {
                    let full = in_state(&pool, |s| s == BlockState::Full);
                    if let Some(&b) = full.get(rng.random_range(0..full.len().max(1))) {
                        pool.release(b);
                    }
                }
                1 => pool.close_stream(stream),
                2 | 3 => {
                    let free = in_state(&pool, |s| s == BlockState::Free);
                    if let Some(&b) = free.get(rng.random_range(0..free.len().max(1))) {
                        match rng.random_range(0..2) {
                            0 => pool.mark_full(b),
                            _ => pool.adopt_open(stream, b, rng.random_range(0..3)),
                        }
                    }
                }
                _ => {
                    let _ = pool.allocate_on(stream, chip);
                }
            }
            let used = in_state(&pool, |s| {
                !matches!(s, BlockState::Free | BlockState::Reserved)
            });
            let want = bitmap(geometry.blocks(), &used);
            assert_eq!(pool.in_use_bitmap(), want, "step {step}");
            pool.check_invariants().unwrap();
        }
        pool.in_use[0] ^= 1 << 3;
        let err = pool.check_invariants().unwrap_err();
        assert!(
            err.to_string().contains("block 3 in state Reserved"),
            "{err}"
        );
    }

    fn bitmap(blocks: u32, used: &[BlockId]) -> Vec<u8> {
        let mut v = vec![0u8; blocks.div_ceil(8) as usize];
        for b in used {
            v[(b.0 / 8) as usize] |= 1 << (b.0 % 8);
        }
        v
    }

    #[test]
    fn the_invariant_check_catches_a_wrong_note_of_room() {
        let flash = tiny_flash();
        let mut pool = BlockPool::new(flash.geometry(), 2, |_| false);
        pool.check_invariants().unwrap();
        pool.room[1][0] = false;
        let err = pool.check_invariants().unwrap_err();
        assert!(err.to_string().contains("has room for stream 1"), "{err}");
    }
}
