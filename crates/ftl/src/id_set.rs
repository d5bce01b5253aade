//! A set of 64-bit ids kept as ranges, for ids handed out mostly in order (transaction uuids):
//! a run of consecutive ids costs one entry however long it is. Möbius notes every uuid a
//! transaction has used, to refuse its reuse. In a hash set that grew by an entry per
//! transaction for as long as the device ran (9 bytes or more per transaction, without bound
//! under a long-running NBD server); as ranges, the workload's uuids take one entry.
//! Its speed is the hash set's within the machine's noise (docs/performance.md, thirteenth
//! round).

use std::collections::BTreeMap;

/// Disjoint, non-adjacent ranges of ids, each `first..=last`, keyed by `first`.
#[derive(Clone, Debug, Default)]
pub struct IdSet {
    ranges: BTreeMap<u64, u64>,
}

impl IdSet {
    pub fn new() -> IdSet {
        IdSet::default()
    }

    /// The range holding `id` or the nearest one below it, as `(first, last)`.
    fn at_or_below(&self, id: u64) -> Option<(u64, u64)> {
        self.ranges
            .range(..=id)
            .next_back()
            .map(|(&first, &last)| (first, last))
    }

    pub fn contains(&self, id: u64) -> bool {
        self.at_or_below(id).is_some_and(|(_, last)| id <= last)
    }

    /// Adds `id`; false if it was already in the set. A range ending just below `id` and one
    /// starting just above it are joined through it.
    pub fn insert(&mut self, id: u64) -> bool {
        let below = self.at_or_below(id);
        if below.is_some_and(|(_, last)| id <= last) {
            return false;
        }
        // `last < id` here, so `last + 1` cannot overflow; nothing starts above `u64::MAX`.
        let first = match below {
            Some((first, last)) if last + 1 == id => first,
            _ => id,
        };
        let above = id.checked_add(1).and_then(|next| self.ranges.remove(&next));
        self.ranges.insert(first, above.unwrap_or(id));
        true
    }

    /// Ranges kept (one per run of consecutive ids).
    pub fn ranges(&self) -> usize {
        self.ranges.len()
    }

    /// Heap bytes, roughly: a B-tree entry of two `u64` per range, with its share of a node.
    pub fn memory(&self) -> u64 {
        self.ranges.len() as u64 * 24
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{RngExt, SeedableRng};
    use rand_chacha::ChaCha8Rng;
    use std::collections::HashSet;

    /// Against a plain hash set: ids mostly in order with gaps, repeats and strays (as uuids
    /// come), and ids anywhere, including both ends of the range.
    #[test]
    fn the_set_holds_exactly_the_ids_inserted() {
        for seed in 0..8 {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let (mut set, mut model) = (IdSet::new(), HashSet::new());
            let mut next = rng.random_range(0..1_000u64);
            for _ in 0..20_000 {
                let id = match rng.random_range(0..10) {
                    0 => rng.random(),
                    1 => [0, 1, u64::MAX, u64::MAX - 1][rng.random_range(0..4)],
                    2 => next.saturating_sub(rng.random_range(0..50)),
                    3 => next + rng.random_range(1..5),
                    _ => {
                        next += 1;
                        next
                    }
                };
                assert_eq!(
                    set.insert(id),
                    model.insert(id),
                    "insert {id} (seed {seed})"
                );
                let probe = id.wrapping_add(rng.random_range(0..3)).wrapping_sub(1);
                assert_eq!(set.contains(probe), model.contains(&probe), "probe {probe}");
            }
            for &id in &model {
                assert!(set.contains(id), "{id} lost (seed {seed})");
            }
            // Ranges are disjoint and not adjacent (else two would have been joined).
            let mut prev: Option<u64> = None;
            for (&first, &last) in &set.ranges {
                assert!(first <= last);
                if let Some(p) = prev {
                    assert!(
                        p.checked_add(1).is_some_and(|q| q < first),
                        "{p} then {first}"
                    );
                }
                prev = Some(last);
            }
            let members: u64 = set.ranges.iter().map(|(f, l)| l - f + 1).sum();
            assert_eq!(members, model.len() as u64);
        }
    }

    #[test]
    fn ids_in_order_take_one_range() {
        let mut set = IdSet::new();
        for id in 1..=100_000 {
            assert!(set.insert(id));
        }
        assert_eq!(set.ranges(), 1);
        assert!(!set.insert(50_000));
        assert!(set.contains(1) && set.contains(100_000));
        assert!(!set.contains(0) && !set.contains(100_001));
        // A gap filled joins the two ranges around it.
        assert!(set.insert(100_002));
        assert_eq!(set.ranges(), 2);
        assert!(set.insert(100_001));
        assert_eq!(set.ranges(), 1);
    }
}
