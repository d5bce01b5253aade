//! The greedy index's blocks ordered by erase count, for static wear levelling.
//!
//! Wear levelling moves the least-worn full block when wear is uneven (docs/performance.md,
//! "Wear levelling without a scan"). Scanning every block for it cost 3 % of the 64 GB GC run
//! (131,072 blocks, every 64 erases); this index answers from an ordered set instead.
//!
//! A block's erase count is not known when the pool marks it full (the validity does not see
//! the device), so a newly indexed block waits in `pending` and enters the ordered set at the
//! next query, keyed by its erase count then. Erase counts only grow and a block is erased only
//! after it leaves the index, so the key stays its count; should a design ever erase a block
//! that is still indexed, its key is too low, the walk in key order reaches it before any block
//! it could wrongly precede, sees the count differ, and rebuilds the set from the counts. So
//! the answer is always what a scan of every block gives.

use std::collections::BTreeSet;

use flash::BlockId;

const NOT_KEYED: u32 = u32::MAX;
/// In `pending`, not keyed yet (each block is there at most once, so `pending` stays within
/// the number of blocks however long no query comes).
const PENDING: u32 = u32::MAX - 1;

#[derive(Clone, Debug)]
pub struct WearIndex {
    /// `(erase count when keyed, block)` of every indexed block keyed so far.
    by_count: BTreeSet<(u32, u32)>,
    /// The key a block holds in `by_count`, else `PENDING` or `NOT_KEYED`.
    key: Vec<u32>,
    /// Blocks indexed since the last query (some may have left the index again).
    pending: Vec<u32>,
}

impl WearIndex {
    pub fn new(blocks: usize) -> WearIndex {
        WearIndex {
            by_count: BTreeSet::new(),
            key: vec![NOT_KEYED; blocks],
            pending: Vec::new(),
        }
    }

    pub fn clear(&mut self) {
        self.by_count.clear();
        self.key.fill(NOT_KEYED);
        self.pending.clear();
    }

    /// `block` entered the greedy index.
    pub fn indexed(&mut self, block: BlockId) {
        let key = &mut self.key[block.0 as usize];
        if *key == NOT_KEYED {
            *key = PENDING;
            self.pending.push(block.0);
        }
    }

    /// `block` left the greedy index (a pending block stays pending: the next query drops it).
    pub fn unindexed(&mut self, block: BlockId) {
        let key = &mut self.key[block.0 as usize];
        if *key < PENDING {
            self.by_count.remove(&(*key, block.0));
            *key = NOT_KEYED;
        }
    }

    /// The indexed (per `in_index`), `eligible` block with the fewest erases in `counts`, the
    /// lowest-numbered of equals.
    pub fn least_worn(
        &mut self,
        in_index: &[bool],
        counts: &[u32],
        mut eligible: impl FnMut(BlockId) -> bool,
    ) -> Option<BlockId> {
        self.key_pending(in_index, counts);
        for &(k, b) in &self.by_count {
            if counts[b as usize] != k {
                self.rebuild(in_index, counts);
                return self.least_worn(in_index, counts, eligible);
            }
            if eligible(BlockId(b)) {
                return Some(BlockId(b));
            }
        }
        None
    }

    fn key_pending(&mut self, in_index: &[bool], counts: &[u32]) {
        for b in self.pending.drain(..) {
            let i = b as usize;
            debug_assert_eq!(self.key[i], PENDING);
            match in_index[i] {
                true => {
                    assert!(counts[i] < PENDING, "block {b}: erase count {}", counts[i]);
                    self.key[i] = counts[i];
                    self.by_count.insert((counts[i], b));
                }
                false => self.key[i] = NOT_KEYED,
            }
        }
    }

    fn rebuild(&mut self, in_index: &[bool], counts: &[u32]) {
        self.clear();
        for b in (0..in_index.len() as u32).filter(|&b| in_index[b as usize]) {
            self.indexed(BlockId(b));
        }
        self.key_pending(in_index, counts);
    }

    /// The index agrees with the greedy index's membership: a keyed block is indexed and in
    /// the ordered set under its key, the set holds nothing else, and every block waiting in
    /// `pending` is marked pending once.
    pub fn check_invariants(&self, in_index: &[bool]) -> Result<(), crate::InvariantViolation> {
        let mut keyed = 0;
        for (b, &key) in self.key.iter().enumerate() {
            if key >= PENDING {
                continue;
            }
            keyed += 1;
            if !in_index[b] || !self.by_count.contains(&(key, b as u32)) {
                return Err(crate::violation!(
                    "wear index: block {b} keyed {key} but indexed {} / in the set {}",
                    in_index[b],
                    self.by_count.contains(&(key, b as u32))
                ));
            }
        }
        if keyed != self.by_count.len() {
            return Err(crate::violation!(
                "wear index: {keyed} blocks keyed, {} in the set",
                self.by_count.len()
            ));
        }
        let marked = self.key.iter().filter(|&&k| k == PENDING).count();
        if marked != self.pending.len()
            || self
                .pending
                .iter()
                .any(|&b| self.key[b as usize] != PENDING)
        {
            return Err(crate::violation!(
                "wear index: {} blocks pending, {marked} marked pending",
                self.pending.len()
            ));
        }
        Ok(())
    }

    /// Heap bytes (a B-tree entry is 8 bytes of key plus its share of a node).
    pub fn memory(&self) -> u64 {
        flash::vec_bytes(&self.key)
            + self.pending.capacity() as u64 * 4
            + self.by_count.len() as u64 * 12
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{RngExt, SeedableRng};

    fn plain(
        in_index: &[bool],
        counts: &[u32],
        eligible: impl Fn(BlockId) -> bool,
    ) -> Option<BlockId> {
        (0..in_index.len() as u32)
            .map(BlockId)
            .filter(|&b| in_index[b.0 as usize] && eligible(b))
            .min_by_key(|&b| (counts[b.0 as usize], b.0))
    }

    /// Under random indexing, unindexing and erases of unindexed blocks, the index answers what
    /// a scan of every block does, eligibility and ties included.
    #[test]
    fn the_index_answers_what_a_scan_does() {
        let blocks = 300;
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
        let mut w = WearIndex::new(blocks);
        let mut in_index = vec![false; blocks];
        let mut counts = vec![0u32; blocks];
        for _ in 0..5_000 {
            let b = rng.random_range(0..blocks);
            match (in_index[b], rng.random_range(0..3)) {
                (false, 0) => counts[b] += 1, // erased while out of the index
                (false, _) => {
                    in_index[b] = true;
                    w.indexed(BlockId(b as u32));
                }
                (true, _) => {
                    in_index[b] = false;
                    w.unindexed(BlockId(b as u32));
                }
            }
            assert!(w.pending.len() <= blocks);
            w.check_invariants(&in_index).unwrap();
            if rng.random_bool(0.2) {
                let banned = rng.random_range(0..7u32);
                let eligible = |x: BlockId| x.0 % 7 != banned;
                assert_eq!(
                    w.least_worn(&in_index, &counts, eligible),
                    plain(&in_index, &counts, eligible)
                );
            }
        }
    }

    /// A block erased while still indexed (no design does this today) leaves a stale key: the
    /// walk meets it first, rebuilds, and still answers what a scan does.
    #[test]
    fn an_erase_while_indexed_is_caught_and_the_answer_stays_right() {
        let blocks = 4;
        let mut w = WearIndex::new(blocks);
        let in_index = vec![true; blocks];
        let mut counts = vec![3, 2, 5, 4];
        for b in 0..blocks as u32 {
            w.indexed(BlockId(b));
        }
        assert_eq!(w.least_worn(&in_index, &counts, |_| true), Some(BlockId(1)));
        counts[1] = 9; // block 1 erased six times without leaving the index
        assert_eq!(w.least_worn(&in_index, &counts, |_| true), Some(BlockId(0)));
        assert_eq!(
            w.least_worn(&in_index, &counts, |b| b.0 != 0),
            plain(&in_index, &counts, |b| b.0 != 0)
        );
    }

    /// The invariant check fails on an index that disagrees with the greedy index: a keyed
    /// block that is not indexed, a set entry with no key, a pending block marked twice.
    #[test]
    fn the_invariant_check_fails_on_a_broken_index() {
        let mut in_index = vec![true; 3];
        let mut w = WearIndex::new(3);
        for b in 0..3 {
            w.indexed(BlockId(b));
        }
        w.least_worn(&in_index, &[1, 2, 3], |_| true);
        w.check_invariants(&in_index).unwrap();
        in_index[1] = false; // left the greedy index without telling the wear index
        assert!(w.check_invariants(&in_index).is_err());
        in_index[1] = true;
        let mut stray = w.clone();
        stray.by_count.insert((0, 2)); // an entry with no key
        assert!(stray.check_invariants(&in_index).is_err());
        let mut twice = w.clone();
        twice.unindexed(BlockId(0));
        twice.indexed(BlockId(0));
        twice.pending.push(0); // pending twice
        assert!(twice.check_invariants(&in_index).is_err());
    }
}
