//! Device geometry and the physical address newtypes.
//!
//! A device is `channels × chips_per_channel` chips; each chip holds `blocks_per_chip` blocks of
//! `pages_per_block` pages; each page has a data area of `page_bytes` and a spare (OOB) area of
//! `oob_bytes` (docs/presets.md). Chips are numbered so that consecutive chips sit on different
//! channels (`channel = chip % channels`), which lets an allocator that round-robins over chips
//! stripe over channels first.
//!
//! Physical page number layout (dense, so page-indexed state is a flat `Vec`):
//! `ppn = (chip * blocks_per_chip + block_in_chip) * pages_per_block + page_in_block`.

use serde::{Deserialize, Serialize};

/// Bytes of one slab of page buffers in [`MemStore`](crate::MemStore) (and the largest page
/// size).
pub const SLAB_BYTES: usize = 2 << 20;

/// Physical page number: dense index over every page of the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Ppn(pub u32);

/// Global block index: `chip * blocks_per_chip + block_in_chip`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct BlockId(pub u32);

/// Chip (package/die) index.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ChipId(pub u32);

/// Logical page number, the host's address in units of one flash page.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Lpn(pub u32);

impl Ppn {
    /// Sentinel for "no physical page" in dense mapping tables.
    pub const NONE: Ppn = Ppn(u32::MAX);
    pub fn is_none(self) -> bool {
        self == Ppn::NONE
    }
}

impl Lpn {
    pub const NONE: Lpn = Lpn(u32::MAX);
}

impl std::fmt::Display for Ppn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ppn {}", self.0)
    }
}
impl std::fmt::Display for Lpn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "lpn {}", self.0)
    }
}
impl std::fmt::Display for BlockId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "block {}", self.0)
    }
}

/// Shape of the emulated device.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Geometry {
    pub channels: u32,
    pub chips_per_channel: u32,
    pub blocks_per_chip: u32,
    pub pages_per_block: u32,
    pub page_bytes: u32,
    pub oob_bytes: u32,
}

impl Geometry {
    #[inline]
    pub fn chips(&self) -> u32 {
        self.channels * self.chips_per_channel
    }
    #[inline]
    pub fn blocks(&self) -> u32 {
        self.chips() * self.blocks_per_chip
    }
    #[inline]
    pub fn pages(&self) -> u32 {
        self.blocks() * self.pages_per_block
    }
    #[inline]
    pub fn pages_per_chip(&self) -> u32 {
        self.blocks_per_chip * self.pages_per_block
    }
    pub fn capacity_bytes(&self) -> u64 {
        self.pages() as u64 * self.page_bytes as u64
    }
    pub fn block_bytes(&self) -> u64 {
        self.pages_per_block as u64 * self.page_bytes as u64
    }

    /// Checks that the geometry is usable and that every page has a 32-bit address.
    pub fn validate(&self) -> Result<(), crate::ConfigError> {
        let fields = [
            ("channels", self.channels),
            ("chips_per_channel", self.chips_per_channel),
            ("blocks_per_chip", self.blocks_per_chip),
            ("pages_per_block", self.pages_per_block),
            ("page_bytes", self.page_bytes),
        ];
        for (name, value) in fields {
            if value == 0 {
                return Err(crate::ConfigError::ZeroGeometryField(name));
            }
        }
        if self.page_bytes < 512
            || !self.page_bytes.is_power_of_two()
            || self.page_bytes as usize > SLAB_BYTES
        {
            return Err(crate::ConfigError::PageBytes {
                page_bytes: self.page_bytes,
                max: SLAB_BYTES,
            });
        }
        if self.pages_per_block > u16::MAX as u32 {
            return Err(crate::ConfigError::PagesPerBlock(self.pages_per_block));
        }
        let pages = self.channels as u64
            * self.chips_per_channel as u64
            * self.blocks_per_chip as u64
            * self.pages_per_block as u64;
        if pages >= u32::MAX as u64 {
            return Err(crate::ConfigError::TooManyPages(pages));
        }
        Ok(())
    }

    #[inline]
    pub fn block_of(&self, ppn: Ppn) -> BlockId {
        BlockId(ppn.0 / self.pages_per_block)
    }
    #[inline]
    pub fn page_in_block(&self, ppn: Ppn) -> u32 {
        ppn.0 % self.pages_per_block
    }
    #[inline]
    pub fn chip_of_block(&self, block: BlockId) -> ChipId {
        ChipId(block.0 / self.blocks_per_chip)
    }
    #[inline]
    pub fn chip_of(&self, ppn: Ppn) -> ChipId {
        self.chip_of_block(self.block_of(ppn))
    }
    #[inline]
    pub fn channel_of_chip(&self, chip: ChipId) -> u32 {
        chip.0 % self.channels
    }
    #[inline]
    pub fn first_page(&self, block: BlockId) -> Ppn {
        Ppn(block.0 * self.pages_per_block)
    }
    #[inline]
    pub fn ppn(&self, block: BlockId, page_in_block: u32) -> Ppn {
        debug_assert!(page_in_block < self.pages_per_block);
        Ppn(block.0 * self.pages_per_block + page_in_block)
    }
    #[inline]
    pub fn block(&self, chip: ChipId, block_in_chip: u32) -> BlockId {
        debug_assert!(block_in_chip < self.blocks_per_chip);
        BlockId(chip.0 * self.blocks_per_chip + block_in_chip)
    }
    #[inline]
    pub fn contains_ppn(&self, ppn: Ppn) -> bool {
        ppn.0 < self.pages()
    }
    #[inline]
    pub fn contains_block(&self, block: BlockId) -> bool {
        block.0 < self.blocks()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn geo() -> Geometry {
        Geometry {
            channels: 2,
            chips_per_channel: 2,
            blocks_per_chip: 8,
            pages_per_block: 16,
            page_bytes: 4096,
            oob_bytes: 64,
        }
    }

    #[test]
    fn address_round_trip() {
        let g = geo();
        for ppn in 0..g.pages() {
            let ppn = Ppn(ppn);
            let block = g.block_of(ppn);
            assert_eq!(g.ppn(block, g.page_in_block(ppn)), ppn);
            assert!(g.chip_of(ppn).0 < g.chips());
        }
        assert_eq!(g.channel_of_chip(ChipId(3)), 1);
        assert_eq!(g.capacity_bytes(), 4 * 8 * 16 * 4096);
    }

    #[test]
    fn validate_rejects_bad_shapes() {
        let mut g = geo();
        g.page_bytes = 1000;
        assert!(g.validate().is_err());
        let mut g = geo();
        g.channels = 0;
        assert!(g.validate().is_err());
        let mut g = geo();
        g.blocks_per_chip = u32::MAX / 4;
        assert!(g.validate().is_err());
        assert!(geo().validate().is_ok());
    }
}
