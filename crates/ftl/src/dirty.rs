//! Which entries of a fixed table are dirty (translation pages waiting to be written), kept so
//! that finding them costs the dirty ones, not the table: a flag per index and a list of the
//! indices marked since the last look. (Atomic-Write's log engine scanned its 16,384 flags on
//! every root it wrote, once per transaction: 30 % of its txmix run; issue #19.)

/// Dirty flags over indices `0..n`, with the marked indices listed.
#[derive(Clone, Debug)]
pub struct DirtySet {
    flag: Vec<bool>,
    /// Every dirty index, and possibly indices cleaned since they were listed (dropped at the
    /// next [`members`](Self::members)).
    listed: Vec<u32>,
}

impl DirtySet {
    /// No index dirty, over `0..n`.
    pub fn new(n: usize) -> DirtySet {
        assert!(n <= u32::MAX as usize, "{n} indices do not fit u32");
        DirtySet {
            flag: vec![false; n],
            listed: Vec::new(),
        }
    }

    pub fn is_dirty(&self, i: usize) -> bool {
        self.flag[i]
    }

    pub fn mark(&mut self, i: usize) {
        if !self.flag[i] {
            self.flag[i] = true;
            self.listed.push(i as u32);
        }
    }

    pub fn clean(&mut self, i: usize) {
        self.flag[i] = false;
    }

    /// The dirty indices in increasing order (what a scan of the flags would give), cost
    /// O(k log k) in the indices listed.
    pub fn members(&mut self) -> Vec<u32> {
        let flag = &self.flag;
        self.listed.retain(|&i| flag[i as usize]);
        self.listed.sort_unstable();
        self.listed.dedup();
        self.listed.clone()
    }

    /// Heap bytes (the flags and the list).
    pub fn memory(&self) -> u64 {
        self.flag.capacity() as u64 + self.listed.capacity() as u64 * 4
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{RngExt, SeedableRng};

    /// Random marks and cleans, with `members` between them: always the scan of the flags.
    #[test]
    fn members_are_the_scan_of_the_flags() {
        let n = 50;
        let mut set = DirtySet::new(n);
        let mut model = vec![false; n];
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(19);
        for step in 0..20_000 {
            let i = rng.random_range(0..n);
            match rng.random_range(0..5) {
                0 | 1 => {
                    set.mark(i);
                    model[i] = true;
                }
                2 | 3 => {
                    set.clean(i);
                    model[i] = false;
                }
                _ => {
                    let scan: Vec<u32> = (0..n as u32).filter(|&j| model[j as usize]).collect();
                    assert_eq!(set.members(), scan, "step {step}");
                }
            }
            assert_eq!(set.is_dirty(i), model[i]);
        }
        // The list does not grow past the marks still standing plus those since the last look.
        set.members();
        assert!(set.listed.len() <= n);
    }
}
