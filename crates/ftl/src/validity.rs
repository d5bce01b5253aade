//! Which physical pages hold live data, who owns them, and a greedy GC index.
//!
//! `owner[ppn]` is an opaque 32-bit owner chosen by the design (usually the LPN; designs that
//! also keep translation pages in the pool tag those with a high bit). The greedy index keeps
//! `Full` blocks in buckets by valid count, so the emptiest block is found in O(pages per block)
//! instead of a scan of every block — the hot path of a 131,072-block device.
//! It also remembers, per block, when the newest program that invalidated one of its pages ends:
//! erasing the block before then could lose both the old and the new copy in a power cut.

use flash::{BlockId, Geometry, Ppn};

pub const NO_OWNER: u32 = u32::MAX;
const NIL: u32 = u32::MAX;

#[derive(Clone, Debug)]
pub struct Validity {
    geometry: Geometry,
    owner: Vec<u32>,
    valid: Vec<u32>,
    invalidated_by_ns: Vec<u64>,
    // greedy buckets: doubly linked lists of blocks per valid count
    in_index: Vec<bool>,
    prev: Vec<u32>,
    next: Vec<u32>,
    head: Vec<u32>,
}

impl Validity {
    pub fn new(geometry: &Geometry) -> Validity {
        let blocks = geometry.blocks() as usize;
        Validity {
            geometry: geometry.clone(),
            owner: vec![NO_OWNER; geometry.pages() as usize],
            valid: vec![0; blocks],
            invalidated_by_ns: vec![0; blocks],
            in_index: vec![false; blocks],
            prev: vec![NIL; blocks],
            next: vec![NIL; blocks],
            head: vec![NIL; geometry.pages_per_block as usize + 1],
        }
    }

    /// Heap bytes: the owner of every page, and the per-block counters and greedy index.
    pub fn memory(&self) -> [(&'static str, u64); 2] {
        use flash::vec_bytes;
        [
            ("page_owners", vec_bytes(&self.owner)),
            (
                "block_validity",
                vec_bytes(&self.valid)
                    + vec_bytes(&self.invalidated_by_ns)
                    + vec_bytes(&self.in_index)
                    + vec_bytes(&self.prev)
                    + vec_bytes(&self.next)
                    + vec_bytes(&self.head),
            ),
        ]
    }

    pub fn owner(&self, ppn: Ppn) -> Option<u32> {
        let o = self.owner[ppn.0 as usize];
        (o != NO_OWNER).then_some(o)
    }
    pub fn is_valid(&self, ppn: Ppn) -> bool {
        self.owner[ppn.0 as usize] != NO_OWNER
    }
    pub fn valid_count(&self, block: BlockId) -> u32 {
        self.valid[block.0 as usize]
    }
    /// End of the newest program that made a page of `block` stale.
    pub fn invalidated_by_ns(&self, block: BlockId) -> u64 {
        self.invalidated_by_ns[block.0 as usize]
    }

    /// Live pages of a block with their owners.
    pub fn valid_pages(&self, block: BlockId) -> impl Iterator<Item = (Ppn, u32)> + '_ {
        let first = self.geometry.first_page(block).0;
        (first..first + self.geometry.pages_per_block).filter_map(move |p| {
            let o = self.owner[p as usize];
            (o != NO_OWNER).then_some((Ppn(p), o))
        })
    }

    pub fn set_valid(&mut self, ppn: Ppn, owner: u32) {
        debug_assert_ne!(owner, NO_OWNER);
        let i = ppn.0 as usize;
        assert_eq!(self.owner[i], NO_OWNER, "{ppn} is already live");
        self.owner[i] = owner;
        let b = self.geometry.block_of(ppn);
        self.unlink(b);
        self.valid[b.0 as usize] += 1;
        self.relink(b);
    }

    /// Marks a page stale; `superseded_end_ns` is when the copy that replaces it is on flash.
    pub fn invalidate(&mut self, ppn: Ppn, superseded_end_ns: u64) {
        let i = ppn.0 as usize;
        assert_ne!(self.owner[i], NO_OWNER, "{ppn} is not live");
        self.owner[i] = NO_OWNER;
        let b = self.geometry.block_of(ppn);
        self.unlink(b);
        self.valid[b.0 as usize] -= 1;
        let t = &mut self.invalidated_by_ns[b.0 as usize];
        *t = (*t).max(superseded_end_ns);
        self.relink(b);
    }

    /// Forgets everything about an erased block.
    pub fn erased(&mut self, block: BlockId) {
        assert_eq!(
            self.valid[block.0 as usize], 0,
            "{block} still holds live pages"
        );
        self.invalidated_by_ns[block.0 as usize] = 0;
    }

    /// Puts a full block in the greedy index (call when the pool marks it full).
    pub fn index_block(&mut self, block: BlockId) {
        if !self.in_index[block.0 as usize] {
            self.in_index[block.0 as usize] = true;
            self.link(block);
        }
    }
    /// Takes a block out of the greedy index (victim chosen, or block reserved).
    pub fn unindex_block(&mut self, block: BlockId) {
        if self.in_index[block.0 as usize] {
            self.unlink(block);
            self.in_index[block.0 as usize] = false;
        }
    }
    pub fn is_indexed(&self, block: BlockId) -> bool {
        self.in_index[block.0 as usize]
    }

    /// Indexed block with the fewest live pages that satisfies `eligible`.
    pub fn greedy_victim(&self, mut eligible: impl FnMut(BlockId) -> bool) -> Option<BlockId> {
        for &h in &self.head {
            let mut b = h;
            while b != NIL {
                if eligible(BlockId(b)) {
                    return Some(BlockId(b));
                }
                b = self.next[b as usize];
            }
        }
        None
    }

    /// Indexed blocks (for cost-benefit and wear-leveling scans).
    pub fn indexed_blocks(&self) -> impl Iterator<Item = BlockId> + '_ {
        (0..self.in_index.len() as u32)
            .filter(|&b| self.in_index[b as usize])
            .map(BlockId)
    }

    fn link(&mut self, b: BlockId) {
        let c = self.valid[b.0 as usize] as usize;
        let h = self.head[c];
        self.prev[b.0 as usize] = NIL;
        self.next[b.0 as usize] = h;
        if h != NIL {
            self.prev[h as usize] = b.0;
        }
        self.head[c] = b.0;
    }
    fn unlink(&mut self, b: BlockId) {
        if !self.in_index[b.0 as usize] {
            return;
        }
        let (p, n) = (self.prev[b.0 as usize], self.next[b.0 as usize]);
        if p != NIL {
            self.next[p as usize] = n;
        } else {
            self.head[self.valid[b.0 as usize] as usize] = n;
        }
        if n != NIL {
            self.prev[n as usize] = p;
        }
    }
    fn relink(&mut self, b: BlockId) {
        if self.in_index[b.0 as usize] {
            self.link(b);
        }
    }

    /// Valid counts equal the number of owned pages of each block.
    pub fn check_invariants(&self) -> Result<(), crate::InvariantViolation> {
        for b in 0..self.geometry.blocks() {
            let n = self.valid_pages(BlockId(b)).count() as u32;
            if n != self.valid[b as usize] {
                return Err(crate::violation!(
                    "block {b}: valid count {} but {n} owned pages",
                    self.valid[b as usize]
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flash::DeviceConfig;

    #[test]
    fn greedy_index_tracks_the_emptiest_block() {
        let g = DeviceConfig::preset("small").unwrap().geometry;
        let mut v = Validity::new(&g);
        for b in 0..3u32 {
            for p in 0..g.pages_per_block {
                v.set_valid(g.ppn(BlockId(b), p), p);
            }
            v.index_block(BlockId(b));
        }
        v.invalidate(g.ppn(BlockId(1), 0), 10);
        v.invalidate(g.ppn(BlockId(1), 1), 20);
        v.invalidate(g.ppn(BlockId(2), 5), 5);
        assert_eq!(v.greedy_victim(|_| true), Some(BlockId(1)));
        assert_eq!(v.greedy_victim(|b| b != BlockId(1)), Some(BlockId(2)));
        assert_eq!(v.invalidated_by_ns(BlockId(1)), 20);
        v.unindex_block(BlockId(1));
        assert_eq!(v.greedy_victim(|_| true), Some(BlockId(2)));
        v.check_invariants().unwrap();
    }
}
