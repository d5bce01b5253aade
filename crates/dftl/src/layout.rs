//! Where DFTL keeps its own metadata: two alternating checkpoint slots and the ring of blocks that
//! holds the block-reservation log. These blocks are outside the allocator's pool.

use crate::format::Checkpoint;
use flash::{BlockId, ChipId, Geometry, Ppn};

/// Fewest blocks of the reservation-log ring.
pub const LOG_BLOCKS_MIN: usize = 4;

/// Blocks of the reservation-log ring for a device: room for one reservation page per block
/// opening over a scan zone of 1/16 of the device (4 GB on `jasmine`, the top of the Möbius
/// recovery sweep) plus the three blocks the ring keeps in hand (`Dftl::log_nearly_full`).
/// At steady state GC keeps only a few blocks per chip free, so a reservation page covers only
/// about two block openings; a smaller ring would force checkpoints before `checkpoint_blocks`.
pub fn log_blocks(g: &Geometry) -> usize {
    LOG_BLOCKS_MIN.max((g.blocks() / 16).div_ceil(g.pages_per_block) as usize + 3)
}
/// Blocks each chip reserves ahead in one reservation page.
pub const RESERVE_AHEAD: usize = 8;

#[derive(Clone, Debug)]
pub struct Layout {
    pub slots: [Vec<BlockId>; 2],
    pub log: Vec<BlockId>,
    /// Payload pages of a checkpoint (the seal follows them).
    pub payload_pages: u32,
}

impl Layout {
    pub fn new(g: &Geometry, logical_pages: u32) -> Layout {
        let tvpns = logical_pages.div_ceil(g.page_bytes / 4);
        let chips = g.chips();
        // Worst case payload: header, GTD, RESERVE_AHEAD blocks per chip, three streams open per chip.
        let probe = Checkpoint {
            ckpt_seq: 0,
            seq: 0,
            log_seq: 0,
            log_block: 0,
            log_page: 0,
            gtd: vec![(Ppn(0), 0); tvpns as usize],
            reserved: vec![vec![BlockId(0); RESERVE_AHEAD]; chips as usize],
            open: vec![(BlockId(0), 0); 3 * chips as usize],
            used: Checkpoint::bitmap(g.blocks(), std::iter::empty()),
        };
        let payload_pages = (probe.encode().len() as u32).div_ceil(g.page_bytes);
        let slot_blocks = (payload_pages + 1).div_ceil(g.pages_per_block) as usize;
        // Take blocks chip-interleaved from the start of every chip: slot A, slot B, log ring.
        let mut order = (0..g.blocks_per_chip).flat_map(|k| (0..chips).map(move |c| (c, k)));
        let mut take = |n: usize| -> Vec<BlockId> {
            (0..n)
                .map(|_| {
                    let (c, k) = order.next().expect("device too small for DFTL metadata");
                    g.block(ChipId(c), k)
                })
                .collect()
        };
        let a = take(slot_blocks);
        let b = take(slot_blocks);
        let log = take(log_blocks(g));
        Layout {
            slots: [a, b],
            log,
            payload_pages,
        }
    }

    pub fn reserved_blocks(&self) -> impl Iterator<Item = BlockId> + '_ {
        self.slots[0]
            .iter()
            .chain(&self.slots[1])
            .chain(&self.log)
            .copied()
    }

    pub fn reserved_count(&self) -> u32 {
        (self.slots[0].len() + self.slots[1].len() + self.log.len()) as u32
    }

    /// The `i`-th page of checkpoint slot `slot`.
    pub fn slot_page(&self, g: &Geometry, slot: usize, i: u32) -> Ppn {
        g.ppn(
            self.slots[slot][(i / g.pages_per_block) as usize],
            i % g.pages_per_block,
        )
    }
}
