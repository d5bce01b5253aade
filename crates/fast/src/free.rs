//! Erased blocks waiting to be taken, per chip. FAST needs no page allocator: a data block is
//! written at its pages' own offsets and a log block front to back, so what it takes from the
//! pool is whole blocks — from the chip that is idle soonest, so that a merge's new block and
//! the host's next log block tend to land on different chips.

use flash::{BlockId, Flash, Geometry};
use std::collections::VecDeque;

#[derive(Clone, Debug)]
pub struct FreeBlocks {
    per_chip: Vec<VecDeque<BlockId>>,
    blocks_per_chip: u32,
}

impl FreeBlocks {
    pub fn empty(g: &Geometry) -> FreeBlocks {
        FreeBlocks {
            per_chip: vec![VecDeque::new(); g.chips() as usize],
            blocks_per_chip: g.blocks_per_chip,
        }
    }

    /// Returns an erased block.
    pub fn put(&mut self, block: BlockId) {
        self.per_chip[(block.0 / self.blocks_per_chip) as usize].push_back(block);
    }

    /// An erased block on the chip that is idle soonest (ties: the lowest chip).
    pub fn take(&mut self, flash: &Flash) -> Option<BlockId> {
        let chip = (0..self.per_chip.len())
            .filter(|&c| !self.per_chip[c].is_empty())
            .min_by_key(|&c| flash.chip_free_ns(c as u32))?;
        self.per_chip[chip].pop_front()
    }

    pub fn iter(&self) -> impl Iterator<Item = BlockId> + '_ {
        self.per_chip.iter().flatten().copied()
    }

    pub fn memory(&self) -> u64 {
        self.per_chip.iter().map(flash::deque_bytes).sum()
    }
}
