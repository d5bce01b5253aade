//! [`MediaPlane`]: what the chips remember beyond their data — when each page was programmed,
//! how often each block was read since its erase, which pages hold data written uncorrectable,
//! and the bad-block table (which physical block serves each block of the geometry, which are
//! spares, which are bad). It lives in the store, so a crash image built from the operation log
//! carries it as the chips would (docs/reliability.md, "Power cuts").

use super::config::MediaConfig;
use super::ecc::{mix, uniform};
use crate::error::ConfigError;
use crate::geometry::{BlockId, ChipId, Geometry, Ppn};
use serde::{Deserialize, Serialize};

/// What a physical block is used for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum BlockStatus {
    /// Serves a block of the geometry.
    InUse,
    /// Held for bad-block replacement and read reclaim (its contents are stale: it is erased
    /// when taken).
    Spare,
    /// Marked bad at the factory.
    FactoryBad,
    /// Failed a program or erase and was retired.
    Retired,
}

/// One write of the bad-block table: a block of the geometry moves to another physical block,
/// and the one it leaves is retired or becomes a spare.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BbtUpdate {
    /// (block of the geometry, the physical block that serves it from now on).
    pub map: Option<(BlockId, BlockId)>,
    /// A physical block retired.
    pub retire: Option<BlockId>,
    /// A physical block given back to the spares.
    pub spare: Option<BlockId>,
}

/// Physical state of the chips beyond data (see the module comment).
#[derive(Clone, Debug)]
pub struct MediaPlane {
    logical: Geometry,
    physical: Geometry,
    /// Physical block of each block of the geometry.
    map: Vec<u32>,
    status: Vec<BlockStatus>,
    /// Per physical page: device age in seconds when it was programmed.
    programmed_s: Vec<u32>,
    /// Time the device lay powered off after power cuts, which ages every page.
    age_offset_ns: u64,
    /// Per physical block: reads since its erase.
    reads: Vec<u32>,
    /// Per physical page: its data was written uncorrectable (or a test lost it).
    lost: Vec<u64>,
}

/// Domain separators of the plane's draws.
const FACTORY: u64 = 0xFAC7;

impl MediaPlane {
    /// The chips of a device of geometry `logical` built to `config`: `spare_blocks_per_chip`
    /// more blocks per chip, factory bad blocks drawn from the seed (at most half the spares of
    /// a chip; the part meets its datasheet), and each block of the geometry served by a good
    /// physical block in order.
    pub fn manufacture(
        logical: &Geometry,
        config: &MediaConfig,
    ) -> Result<MediaPlane, ConfigError> {
        config.validate()?;
        let physical = physical_geometry(logical, config);
        let (pbpc, bpc) = (physical.blocks_per_chip, logical.blocks_per_chip);
        let cap = config.spare_blocks_per_chip / 2;
        let mut status = vec![BlockStatus::Spare; physical.blocks() as usize];
        let mut map = Vec::with_capacity(logical.blocks() as usize);
        for chip in 0..physical.chips() {
            let first = chip * pbpc;
            let mut bad = 0;
            let mut good = Vec::with_capacity(pbpc as usize);
            for b in first..first + pbpc {
                let draw = uniform(mix(config.seed, &[FACTORY, b as u64]));
                if draw < config.factory_bad_fraction && bad < cap {
                    status[b as usize] = BlockStatus::FactoryBad;
                    bad += 1;
                } else {
                    good.push(b);
                }
            }
            for &b in &good[..bpc as usize] {
                status[b as usize] = BlockStatus::InUse;
                map.push(b);
            }
        }
        Ok(MediaPlane {
            logical: logical.clone(),
            map,
            status,
            programmed_s: vec![0; physical.pages() as usize],
            age_offset_ns: 0,
            reads: vec![0; physical.blocks() as usize],
            lost: vec![0; (physical.pages() as usize).div_ceil(64)],
            physical,
        })
    }

    pub fn physical(&self) -> &Geometry {
        &self.physical
    }

    /// The physical block serving `block` of the geometry.
    #[inline]
    pub fn block(&self, block: BlockId) -> BlockId {
        BlockId(self.map[block.0 as usize])
    }

    /// The physical page of `ppn` of the geometry.
    #[inline]
    pub fn page(&self, ppn: Ppn) -> Ppn {
        let ppb = self.logical.pages_per_block;
        Ppn(self.map[(ppn.0 / ppb) as usize] * ppb + ppn.0 % ppb)
    }

    pub fn status(&self, physical: BlockId) -> BlockStatus {
        self.status[physical.0 as usize]
    }

    /// Physical blocks of `chip` in `status`, in order.
    pub fn blocks_in(
        &self,
        chip: ChipId,
        status: BlockStatus,
    ) -> impl Iterator<Item = BlockId> + '_ {
        let pbpc = self.physical.blocks_per_chip;
        (chip.0 * pbpc..(chip.0 + 1) * pbpc)
            .filter(move |&b| self.status[b as usize] == status)
            .map(BlockId)
    }

    /// Blocks of every chip in `status`.
    pub fn count(&self, status: BlockStatus) -> u32 {
        self.status.iter().filter(|&&s| s == status).count() as u32
    }

    /// Applies one write of the bad-block table.
    pub fn apply(&mut self, update: &BbtUpdate) {
        if let Some((block, to)) = update.map {
            self.map[block.0 as usize] = to.0;
            self.status[to.0 as usize] = BlockStatus::InUse;
        }
        if let Some(b) = update.retire {
            self.status[b.0 as usize] = BlockStatus::Retired;
        }
        if let Some(b) = update.spare {
            self.status[b.0 as usize] = BlockStatus::Spare;
        }
    }

    /// Device age in whole seconds at simulated instant `ns`.
    pub fn age_s(&self, ns: u64) -> u32 {
        ((ns + self.age_offset_ns) / 1_000_000_000).min(u32::MAX as u64) as u32
    }

    /// The device lay powered off for `ns`: every page ages by it.
    pub fn power_off(&mut self, ns: u64) {
        self.age_offset_ns += ns;
    }

    /// A physical page was programmed, its program ending at `end_ns`.
    pub fn programmed(&mut self, ppn: Ppn, end_ns: u64, lost: bool) {
        self.programmed_s[ppn.0 as usize] = self.age_s(end_ns);
        self.set_lost(ppn, lost);
    }

    /// Retention age in days of physical page `ppn` at instant `ns`.
    pub fn retention_days(&self, ppn: Ppn, ns: u64) -> f64 {
        let age = self
            .age_s(ns)
            .saturating_sub(self.programmed_s[ppn.0 as usize]);
        age as f64 / 86_400.0
    }

    /// A physical block was erased.
    pub fn erased(&mut self, block: BlockId) {
        self.reads[block.0 as usize] = 0;
        let ppb = self.physical.pages_per_block;
        for p in block.0 * ppb..(block.0 + 1) * ppb {
            self.set_lost(Ppn(p), false);
        }
    }

    /// Reads of physical block `block` since its erase.
    pub fn reads(&self, block: BlockId) -> u32 {
        self.reads[block.0 as usize]
    }

    /// `n` more reads of physical block `block`.
    pub fn read(&mut self, block: BlockId, n: u32) {
        let r = &mut self.reads[block.0 as usize];
        *r = r.saturating_add(n);
    }

    pub fn is_lost(&self, ppn: Ppn) -> bool {
        let i = ppn.0 as usize;
        self.lost[i / 64] >> (i % 64) & 1 != 0
    }

    pub fn set_lost(&mut self, ppn: Ppn, lost: bool) {
        let i = ppn.0 as usize;
        let bit = 1u64 << (i % 64);
        if lost {
            self.lost[i / 64] |= bit
        } else {
            self.lost[i / 64] &= !bit
        }
    }

    /// Heap bytes of the plane.
    pub fn memory(&self) -> u64 {
        use crate::memory::vec_bytes;
        vec_bytes(&self.map)
            + vec_bytes(&self.status)
            + vec_bytes(&self.programmed_s)
            + vec_bytes(&self.reads)
            + vec_bytes(&self.lost)
    }
}

/// The geometry of the chips themselves: `spare_blocks_per_chip` more blocks on every chip.
pub fn physical_geometry(logical: &Geometry, config: &MediaConfig) -> Geometry {
    Geometry {
        blocks_per_chip: logical.blocks_per_chip + config.spare_blocks_per_chip,
        ..logical.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DeviceConfig;

    fn plane(seed: u64, factory_bad: f64) -> MediaPlane {
        let g = DeviceConfig::preset("small").unwrap().geometry;
        let mut c = MediaConfig::part("mlc", g.blocks_per_chip).unwrap();
        c.seed = seed;
        c.factory_bad_fraction = factory_bad;
        MediaPlane::manufacture(&g, &c).unwrap()
    }

    /// Every block of the geometry is served by a good block of its own chip, each once; the
    /// factory bad blocks are never used, at most half the spares of a chip are bad, and the
    /// same seed makes the same chips.
    #[test]
    fn manufacture_maps_every_block_to_a_good_block_of_its_chip() {
        for seed in 0..20 {
            let p = plane(seed, 0.2);
            let (l, ph) = (&p.logical, &p.physical);
            let mut seen = vec![false; ph.blocks() as usize];
            for b in 0..l.blocks() {
                let to = p.block(BlockId(b));
                assert_eq!(ph.chip_of_block(to), l.chip_of_block(BlockId(b)));
                assert_eq!(p.status(to), BlockStatus::InUse);
                assert!(!std::mem::replace(&mut seen[to.0 as usize], true));
            }
            for chip in 0..ph.chips() {
                let bad = p.blocks_in(ChipId(chip), BlockStatus::FactoryBad).count() as u32;
                let spares = p.blocks_in(ChipId(chip), BlockStatus::Spare).count() as u32;
                let all = ph.blocks_per_chip - l.blocks_per_chip;
                assert!(bad <= all / 2 && bad + spares == all);
            }
            assert_eq!(p.map, plane(seed, 0.2).map);
        }
        assert_eq!(plane(1, 0.0).count(BlockStatus::FactoryBad), 0);
        assert!((0..20).any(|s| plane(s, 0.2).count(BlockStatus::FactoryBad) > 0));
    }

    /// Pages age from their program, by power-off time too; an erase forgets reads and lost
    /// pages; a table write moves a block and retires the one it leaves.
    #[test]
    fn pages_age_and_erases_reset_the_block() {
        let mut p = plane(3, 0.0);
        let page = p.page(Ppn(5));
        p.programmed(page, 2_000_000_000, true);
        assert!(p.is_lost(page));
        assert_eq!(
            p.retention_days(page, 2_000_000_000 + 86_400_000_000_000),
            1.0
        );
        p.power_off(86_400_000_000_000);
        assert_eq!(p.retention_days(page, 2_000_000_000), 1.0);
        let block = p.physical.block_of(page);
        p.read(block, 3);
        assert_eq!(p.reads(block), 3);
        p.erased(block);
        assert_eq!((p.reads(block), p.is_lost(page)), (0, false));
        let spare = p.blocks_in(ChipId(0), BlockStatus::Spare).next().unwrap();
        let old = p.block(BlockId(0));
        p.apply(&BbtUpdate {
            map: Some((BlockId(0), spare)),
            retire: Some(old),
            spare: None,
        });
        assert_eq!(p.block(BlockId(0)), spare);
        assert_eq!(p.status(old), BlockStatus::Retired);
        assert_eq!(p.page(Ppn(1)).0, spare.0 * p.physical.pages_per_block + 1);
    }
}
