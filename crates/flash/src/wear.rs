//! Erase counts summarised as they change: the spread static wear leveling checks every 64
//! erases in O(1) instead of a scan of every block (issue #19; with the search for the coldest
//! block reading the store's counts as one slice, `Store::erase_counts`, ~7.5 % → 3.2 % of a
//! GC-heavy 64 GB DFTL profile).

/// How many blocks have each erase count, with the minimum, maximum and sum kept up to date.
#[derive(Clone, Debug)]
pub struct WearCounts {
    /// `blocks_at[c]`: blocks erased exactly `c` times.
    blocks_at: Vec<u32>,
    min: u32,
    max: u32,
    sum: u64,
    blocks: u32,
}

impl WearCounts {
    /// The counts of blocks erased `counts` times each.
    pub fn new(counts: &[u32]) -> WearCounts {
        let mut w = WearCounts {
            blocks_at: Vec::new(),
            min: 0,
            max: 0,
            sum: 0,
            blocks: 0,
        };
        for &c in counts {
            w.add(c);
        }
        w.min = w.blocks_at.iter().position(|&n| n > 0).unwrap_or(0) as u32;
        w
    }

    fn add(&mut self, count: u32) {
        let c = count as usize;
        if self.blocks_at.len() <= c {
            self.blocks_at.resize(c + 1, 0);
        }
        self.blocks_at[c] += 1;
        self.max = self.max.max(count);
        self.sum += count as u64;
        self.blocks += 1;
    }

    /// A block's count went from `before` to `after`.
    pub fn changed(&mut self, before: u32, after: u32) {
        if before == after {
            return;
        }
        self.blocks_at[before as usize] -= 1;
        self.blocks -= 1;
        self.sum -= before as u64;
        self.add(after);
        if self.blocks_at[self.min as usize] == 0 || after < self.min {
            self.min = self.blocks_at.iter().position(|&n| n > 0).unwrap_or(0) as u32;
        }
        if self.blocks_at[self.max as usize] == 0 {
            self.max = self.blocks_at.iter().rposition(|&n| n > 0).unwrap_or(0) as u32;
        }
    }

    /// Heap bytes: the blocks per count.
    pub fn memory(&self) -> u64 {
        crate::memory::vec_bytes(&self.blocks_at)
    }

    /// (min, max, mean) erase count.
    pub fn spread(&self) -> (u32, u32, f64) {
        let mean = self.sum as f64 / self.blocks.max(1) as f64;
        (self.min, self.max, mean)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The summary equals a scan of the counts after every change, erases and rewinds alike.
    #[test]
    fn spread_matches_a_scan() {
        let mut counts = [3u32, 0, 7, 0, 2];
        let mut w = WearCounts::new(&counts);
        let mut rng = 7u64;
        for _ in 0..2000 {
            rng = rng
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let b = (rng >> 33) as usize % counts.len();
            let before = counts[b];
            // Mostly erases (+1), sometimes a count copied from another image.
            let after = if rng.is_multiple_of(10) {
                (rng >> 50) as u32 % 12
            } else {
                before + 1
            };
            counts[b] = after;
            w.changed(before, after);
            let (min, max, mean) = w.spread();
            assert_eq!(min, *counts.iter().min().unwrap());
            assert_eq!(max, *counts.iter().max().unwrap());
            let sum: u32 = counts.iter().sum();
            assert!((mean - sum as f64 / counts.len() as f64).abs() < 1e-9);
        }
    }
}
