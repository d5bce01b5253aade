//! The cached mapping table (CMT): a bounded LRU of (LPN → PPN, dirty) entries (DFTL §3).
//!
//! Layout for the hot path: a dense slot array (one 16-byte slot per entry, so an access touches
//! one cache line plus its list neighbours), an intrusive doubly linked LRU list through the
//! slots, and an index `slot_of[lpn]` whose top bit marks the entry dirty. No allocation per
//! access. The dirty marks are also kept in a bitmap (one bit per LPN): a write-back finds the
//! dirty entries of its translation page in the page's span of the bitmap (128 bytes for a 4 KB
//! translation page, where the index's span is 4 KB) and stops once it has seen the page's dirty
//! count, while a request reads the mark where it reads the slot (the index entry it has just
//! looked up). A checkpoint finds the dirty pages from the per-page counts in O(translation pages).

use flash::Ppn;

const NIL: u32 = u32::MAX;
/// Top bit of a `slot_of` entry: the entry differs from its translation page on flash.
const DIRTY: u32 = 1 << 31;
/// Slots are numbered below this, so a slot with its dirty bit is never `NIL`.
pub const MAX_CAPACITY: u32 = DIRTY - 1;

#[derive(Clone, Copy, Debug)]
struct Slot {
    lpn: u32,
    ppn: Ppn,
    /// LRU neighbours (towards most / least recently used).
    prev: u32,
    next: u32,
}

const EMPTY: Slot = Slot {
    lpn: 0,
    ppn: Ppn::NONE,
    prev: NIL,
    next: NIL,
};

pub struct Cmt {
    capacity: u32,
    logical_pages: u32,
    /// Slot of each LPN (with `DIRTY` when dirty), or NIL.
    slot_of: Vec<u32>,
    /// One bit per LPN, the same as `DIRTY` in `slot_of`: the page's dirty entries in 128 bytes.
    dirty: Vec<u64>,
    /// Slots in use or once used: `slots.len()` grows to `capacity`, then stays.
    slots: Vec<Slot>,
    /// Most recently used.
    head: u32,
    /// Least recently used.
    tail: u32,
    /// Slots given back by `remove`, reused before `slots` grows.
    free: Vec<u32>,
    /// LPNs per translation page.
    per_tpage: u32,
    /// Per translation page: number of dirty entries.
    dirty_count: Vec<u32>,
    pub hits: u64,
    pub misses: u64,
}

impl Cmt {
    pub fn new(capacity: u32, logical_pages: u32, per_tpage: u32) -> Cmt {
        assert!((1..=MAX_CAPACITY).contains(&capacity) && per_tpage >= 1);
        let tpages = logical_pages.div_ceil(per_tpage) as usize;
        Cmt {
            capacity,
            logical_pages,
            slot_of: vec![NIL; logical_pages as usize],
            dirty: vec![0; (logical_pages as usize).div_ceil(64)],
            // Reserved whole (no copies as it grows); pages are touched only as slots are used.
            slots: Vec::with_capacity(capacity as usize),
            head: NIL,
            tail: NIL,
            free: Vec::new(),
            per_tpage,
            dirty_count: vec![0; tpages],
            hits: 0,
            misses: 0,
        }
    }

    /// Heap bytes: the per-LPN slot index, and the slots with their LRU list and dirty bits.
    pub fn memory(&self) -> [(&'static str, u64); 2] {
        use flash::vec_bytes;
        [
            ("cmt_index", vec_bytes(&self.slot_of)),
            (
                "cmt_slots",
                vec_bytes(&self.slots)
                    + vec_bytes(&self.free)
                    + vec_bytes(&self.dirty)
                    + vec_bytes(&self.dirty_count),
            ),
        ]
    }

    pub fn capacity(&self) -> u32 {
        self.capacity
    }
    pub fn len(&self) -> u32 {
        (self.slots.len() - self.free.len()) as u32
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn is_full(&self) -> bool {
        self.len() == self.capacity
    }
    pub fn contains(&self, lpn: u32) -> bool {
        self.slot_of[lpn as usize] != NIL
    }

    /// Slot of a cached LPN and whether it is dirty.
    fn entry(&self, lpn: u32) -> Option<(u32, bool)> {
        let v = self.slot_of[lpn as usize];
        (v != NIL).then_some((v & !DIRTY, v & DIRTY != 0))
    }
    fn is_dirty(&self, lpn: u32) -> bool {
        let v = self.slot_of[lpn as usize];
        v != NIL && v & DIRTY != 0
    }
    /// Sets or clears the entry's dirty mark, in the index and in the bitmap.
    fn set_dirty_bit(&mut self, lpn: u32, dirty: bool) {
        let v = &mut self.slot_of[lpn as usize];
        debug_assert_ne!(*v, NIL);
        let (word, bit) = (&mut self.dirty[lpn as usize / 64], 1u64 << (lpn % 64));
        if dirty {
            *v |= DIRTY;
            *word |= bit;
        } else {
            *v &= !DIRTY;
            *word &= !bit;
        }
    }

    fn unlink(&mut self, s: u32) {
        let Slot { prev, next, .. } = self.slots[s as usize];
        if prev != NIL {
            self.slots[prev as usize].next = next
        } else {
            self.head = next
        }
        if next != NIL {
            self.slots[next as usize].prev = prev
        } else {
            self.tail = prev
        }
    }
    fn push_front(&mut self, s: u32) {
        let head = self.head;
        let slot = &mut self.slots[s as usize];
        slot.prev = NIL;
        slot.next = head;
        if head != NIL {
            self.slots[head as usize].prev = s;
        }
        self.head = s;
        if self.tail == NIL {
            self.tail = s;
        }
    }
    fn touch(&mut self, s: u32) {
        if self.head != s {
            self.unlink(s);
            self.push_front(s);
        }
    }

    /// Makes a cached entry dirty (counted against its translation page).
    fn make_dirty(&mut self, lpn: u32) {
        if self.is_dirty(lpn) {
            return;
        }
        self.set_dirty_bit(lpn, true);
        self.dirty_count[(lpn / self.per_tpage) as usize] += 1;
    }

    /// Makes a cached entry clean without a write-back (it is being dropped).
    fn clear_dirty(&mut self, lpn: u32) {
        if !self.is_dirty(lpn) {
            return;
        }
        self.set_dirty_bit(lpn, false);
        self.dirty_count[(lpn / self.per_tpage) as usize] -= 1;
    }

    /// Dirty entries of translation page `t`.
    pub fn dirty_in(&self, t: usize) -> u32 {
        self.dirty_count[t]
    }

    /// Translation pages with at least one dirty entry, in order.
    pub fn dirty_tvpns(&self) -> Vec<usize> {
        (0..self.dirty_count.len())
            .filter(|&t| self.dirty_count[t] > 0)
            .collect()
    }

    /// Hands every dirty entry of translation page `t` to `f` (lpn, ppn) in LPN order and
    /// marks it clean: the batch of one write-back.
    pub fn take_dirty(&mut self, t: usize, mut f: impl FnMut(u32, Ppn)) {
        let lpns = self.page_lpns(t);
        let mut left = self.dirty_count[t];
        let mut word_start = lpns.start - lpns.start % 64;
        while word_start < lpns.end && left > 0 {
            // The page's bits in this word: a page need not start or end on a word.
            let low = lpns.start.saturating_sub(word_start);
            let high = (lpns.end - word_start).min(64);
            let in_page = (u64::MAX >> (64 - (high - low))) << low;
            let word = &mut self.dirty[word_start as usize / 64];
            let bits = *word & in_page;
            *word &= !in_page;
            for lpn in set_bits(word_start, bits) {
                let entry = &mut self.slot_of[lpn as usize];
                *entry &= !DIRTY;
                f(lpn, self.slots[*entry as usize].ppn);
                left -= 1;
            }
            word_start += 64;
        }
        debug_assert_eq!(left, 0, "page {t}'s dirty count exceeds its dirty entries");
        self.dirty_count[t] = 0;
    }

    /// The words of the dirty bitmap that hold translation page `t`'s bits.
    fn dirty_words(&self, t: usize) -> std::ops::Range<usize> {
        let lpns = self.page_lpns(t);
        lpns.start as usize / 64..(lpns.end as usize).div_ceil(64)
    }

    /// LPNs of translation page `t` (empty past the last page).
    fn page_lpns(&self, t: usize) -> std::ops::Range<u32> {
        let first = u32::try_from(t)
            .map_or(u32::MAX, |t| t.saturating_mul(self.per_tpage))
            .min(self.logical_pages);
        first..first.saturating_add(self.per_tpage).min(self.logical_pages)
    }

    /// Starts loading `lpn`'s index entry into the CPU cache (a hint; no effect on the state).
    /// The index is one entry per logical page, far larger than the cache, so a random write's
    /// lookup waits for memory: asked for when a request arrives, the load overlaps the work the
    /// host interface and the FTL do before the lookup.
    pub fn prefetch(&self, lpn: u32) {
        if let (Some(entry), Some(bits)) = (
            self.slot_of.get(lpn as usize),
            self.dirty.get(lpn as usize / 64),
        ) {
            flash::prefetch::read(entry);
            flash::prefetch::read(bits);
        }
    }

    /// The second step of a request's hints, after [`prefetch`](Self::prefetch): `lpn`'s slot,
    /// if it is cached. Returns whether it is.
    pub fn prefetch_slot(&self, lpn: u32) -> bool {
        let Some(slot) = self.hinted_slot(lpn) else {
            return false;
        };
        flash::prefetch::read(slot);
        true
    }

    /// `lpn`'s slot if it is cached, for a hint (an LPN past the device has none).
    fn hinted_slot(&self, lpn: u32) -> Option<&Slot> {
        let v = *self.slot_of.get(lpn as usize)?;
        (v != NIL).then(|| &self.slots[(v & !DIRTY) as usize])
    }

    /// The third step: the LRU neighbours of `lpn`'s slot, which making it most recently used
    /// relinks. Returns the cached entry's PPN (none if not cached).
    pub fn prefetch_neighbours(&self, lpn: u32) -> Option<Ppn> {
        let slot = self.hinted_slot(lpn)?;
        for n in [slot.prev, slot.next] {
            if let Some(neighbour) = self.slots.get(n as usize) {
                flash::prefetch::read(neighbour);
            }
        }
        Some(slot.ppn)
    }

    /// A hint for the next eviction: the index entry and dirty word of the least recently used
    /// entry (a miss evicts it, clearing both), and the slot of the entry before it, the LRU
    /// entry after that eviction (so the next hint finds it in the cache). Changes nothing.
    pub fn prefetch_eviction(&self) {
        let Some(slot) = self.slots.get(self.tail as usize) else {
            return;
        };
        flash::prefetch::read(&self.slot_of[slot.lpn as usize]);
        flash::prefetch::read(&self.dirty[slot.lpn as usize / 64]);
        if let Some(before) = self.slots.get(slot.prev as usize) {
            flash::prefetch::read(before);
        }
    }

    /// Hints for a write-back of translation page `t` that is `ahead` write-backs away (a
    /// checkpoint writes back one dirty page after another): at 3 its dirty bits, at 2 the
    /// index entries of its dirty LPNs, at 1 their slots (each step needs the one before it in
    /// the cache). Changes nothing.
    pub fn prefetch_write_back(&self, t: usize, ahead: usize) {
        if ahead >= 3 {
            if let Some(bits) = self.dirty.get(self.dirty_words(t)) {
                bits.chunks(8)
                    .for_each(|line| flash::prefetch::read(&line[0]));
            }
            return;
        }
        for lpn in self.dirty_lpns_in(t).map(|lpn| lpn as usize) {
            match ahead {
                2 => flash::prefetch::read(&self.slot_of[lpn]),
                _ => {
                    if let Some(slot) = self.slots.get((self.slot_of[lpn] & !DIRTY) as usize) {
                        flash::prefetch::read(slot);
                    }
                }
            }
        }
    }

    /// The dirty entries' LPNs of translation page `t`, in order (read from the bitmap; nothing
    /// changes).
    pub fn dirty_lpns_in(&self, t: usize) -> impl Iterator<Item = u32> + '_ {
        let lpns = self.page_lpns(t);
        let words = self.dirty_words(t);
        let bits = self.dirty.get(words.clone()).unwrap_or(&[]);
        words
            .zip(bits)
            .flat_map(move |(w, &word)| set_bits(w as u32 * 64, word))
            .filter(move |lpn| lpns.contains(lpn))
    }

    /// Looks an entry up, making it most recently used.
    pub fn get(&mut self, lpn: u32) -> Option<Ppn> {
        let Some((s, _)) = self.entry(lpn) else {
            self.misses += 1;
            return None;
        };
        self.hits += 1;
        self.touch(s);
        Some(self.slots[s as usize].ppn)
    }

    /// Entry without touching recency or counters.
    pub fn peek(&self, lpn: u32) -> Option<(Ppn, bool)> {
        self.entry(lpn)
            .map(|(s, dirty)| (self.slots[s as usize].ppn, dirty))
    }

    /// Updates a cached entry (it must be cached).
    pub fn update(&mut self, lpn: u32, ppn: Ppn, dirty: bool) {
        let (s, _) = self
            .entry(lpn)
            .unwrap_or_else(|| panic!("lpn {lpn} is not cached"));
        self.slots[s as usize].ppn = ppn;
        if dirty {
            self.make_dirty(lpn);
        }
        self.touch(s);
    }

    /// Inserts an entry (the CMT must not be full and the LPN not cached).
    pub fn insert(&mut self, lpn: u32, ppn: Ppn, dirty: bool) {
        assert!(!self.contains(lpn));
        assert!(!self.is_full(), "insert into a full CMT: evict first");
        let s = match self.free.pop() {
            Some(s) => s,
            None => {
                self.slots.push(EMPTY);
                self.slots.len() as u32 - 1
            }
        };
        self.slot_of[lpn as usize] = s;
        self.slots[s as usize] = Slot { lpn, ppn, ..EMPTY };
        if dirty {
            self.make_dirty(lpn);
        }
        self.push_front(s);
    }

    /// The least recently used entry: (lpn, ppn, dirty).
    pub fn lru(&self) -> Option<(u32, Ppn, bool)> {
        (self.tail != NIL).then(|| {
            let s = &self.slots[self.tail as usize];
            (s.lpn, s.ppn, self.is_dirty(s.lpn))
        })
    }

    /// Drops an entry (a dirty one loses its pending update: write it back first).
    pub fn remove(&mut self, lpn: u32) {
        let Some((s, _)) = self.entry(lpn) else {
            return;
        };
        self.clear_dirty(lpn);
        self.unlink(s);
        self.slot_of[lpn as usize] = NIL;
        self.free.push(s);
    }

    /// Every dirty entry's LPN, sorted (tests and invariant checks).
    pub fn dirty_lpns(&self) -> Vec<u32> {
        (0..self.logical_pages)
            .filter(|&lpn| self.entry(lpn).is_some_and(|(_, dirty)| dirty))
            .collect()
    }

    pub fn check_invariants(&self) -> Result<(), ftl::InvariantViolation> {
        let mut n = 0;
        let mut s = self.head;
        // Dirty entries per translation page, counted along the LRU list.
        let mut per_page = vec![0u32; self.dirty_count.len()];
        while s != NIL {
            n += 1;
            let slot = &self.slots[s as usize];
            let Some((_, is_dirty)) = self.entry(slot.lpn).filter(|&(at, _)| at == s) else {
                return Err(ftl::violation!(
                    "CMT slot {s} is linked but its lpn points elsewhere"
                ));
            };
            if n > self.capacity {
                return Err("CMT list has a cycle".into());
            }
            if is_dirty {
                per_page[(slot.lpn / self.per_tpage) as usize] += 1;
            }
            let in_bitmap = self.dirty[slot.lpn as usize / 64] >> (slot.lpn % 64) & 1 != 0;
            if in_bitmap != is_dirty {
                return Err(ftl::violation!(
                    "lpn {}: dirty in the index {is_dirty}, in the bitmap {in_bitmap}",
                    slot.lpn
                ));
            }
            s = slot.next;
        }
        if n != self.len() || n > self.capacity {
            return Err(ftl::violation!(
                "CMT list holds {n} entries, counters say {} (capacity {})",
                self.len(),
                self.capacity
            ));
        }
        for (t, (&count, &in_page)) in self.dirty_count.iter().zip(&per_page).enumerate() {
            if count != in_page {
                return Err(ftl::violation!(
                    "CMT says translation page {t} has {count} dirty entries, it has {in_page}"
                ));
            }
        }
        // Every dirty bit belongs to a cached entry (those were counted along the list).
        let bits: u64 = self.dirty.iter().map(|w| w.count_ones() as u64).sum();
        let linked: u64 = per_page.iter().map(|&n| n as u64).sum();
        if bits != linked {
            return Err(ftl::violation!(
                "{bits} LPNs are marked dirty but {linked} cached entries are"
            ));
        }
        Ok(())
    }
}

/// The LPNs whose bits are set in `bits`, the dirty bitmap's word that starts at `word_start`.
fn set_bits(word_start: u32, mut bits: u64) -> impl Iterator<Item = u32> {
    std::iter::from_fn(move || {
        (bits != 0).then(|| {
            let lpn = word_start + bits.trailing_zeros();
            bits &= bits - 1;
            lpn
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lru_order_and_dirty_tracking() {
        let mut c = Cmt::new(2, 10, 4);
        c.insert(1, Ppn(10), false);
        c.insert(2, Ppn(20), true);
        assert_eq!(c.lru(), Some((1, Ppn(10), false)));
        assert_eq!(c.get(1), Some(Ppn(10)));
        assert_eq!(c.lru(), Some((2, Ppn(20), true)));
        assert!(c.is_full());
        c.remove(2);
        c.insert(3, Ppn(30), true);
        assert_eq!(c.dirty_lpns(), vec![3]);
        assert_eq!(c.dirty_tvpns(), vec![0]);
        assert_eq!(c.dirty_in(0), 1);
        c.check_invariants().unwrap();
        let mut taken = Vec::new();
        c.take_dirty(0, |l, p| taken.push((l, p)));
        assert_eq!(taken, vec![(3, Ppn(30))]);
        assert!(c.dirty_lpns().is_empty());
        assert!(c.dirty_tvpns().is_empty());
        assert_eq!(c.get(2), None);
        assert_eq!((c.hits, c.misses), (1, 1));
        c.check_invariants().unwrap();
    }

    #[test]
    fn dirty_lists_follow_updates_and_removals() {
        let mut c = Cmt::new(8, 16, 4);
        for l in [0u32, 1, 2, 5, 6, 9] {
            c.insert(l, Ppn(l), l % 2 == 0);
        }
        c.update(1, Ppn(100), true);
        c.update(5, Ppn(105), true);
        assert_eq!(c.dirty_lpns(), vec![0, 1, 2, 5, 6]);
        assert_eq!(c.dirty_tvpns(), vec![0, 1]);
        // Dropping a dirty entry takes it off its page's dirty count.
        c.remove(1);
        assert_eq!(c.dirty_in(0), 2);
        c.check_invariants().unwrap();
        let mut taken = Vec::new();
        c.take_dirty(1, |l, p| taken.push((l, p)));
        taken.sort_unstable();
        assert_eq!(taken, vec![(5, Ppn(105)), (6, Ppn(6))]);
        assert_eq!(c.dirty_tvpns(), vec![0]);
        c.check_invariants().unwrap();
    }

    /// The invariant check is an oracle: it must fail on a CMT whose dirty bookkeeping lies.
    #[test]
    fn the_invariant_check_catches_wrong_dirty_bookkeeping() {
        let mut c = Cmt::new(4, 16, 4);
        c.insert(1, Ppn(1), true);
        c.insert(6, Ppn(6), false);
        c.check_invariants().unwrap();
        c.dirty_count[1] += 1;
        assert!(
            c.check_invariants().is_err(),
            "count on a page with no dirty entry"
        );
        c.dirty_count[1] -= 1;
        c.set_dirty_bit(1, false);
        assert!(
            c.check_invariants().is_err(),
            "dirty count without its dirty bit"
        );
        c.set_dirty_bit(1, true);
        c.check_invariants().unwrap();
        c.dirty[0] |= 1 << 9;
        assert!(
            c.check_invariants().is_err(),
            "a dirty bit for an LPN that is not cached"
        );
        c.dirty[0] &= !(1 << 9);
        c.check_invariants().unwrap();
        c.dirty[0] &= !(1 << 1);
        assert!(
            c.check_invariants().is_err(),
            "a dirty entry missing from the bitmap"
        );
        c.dirty[0] |= 1 << 1;
        c.check_invariants().unwrap();
        c.slot_of[6] = c.slot_of[1];
        assert!(
            c.check_invariants().is_err(),
            "an index entry pointing at another's slot"
        );
    }

    /// Against a plain map of (ppn, dirty) per LPN: a write-back hands over exactly its page's
    /// dirty entries, on pages wider than the scan's chunk, with evictions in between.
    #[test]
    fn take_dirty_matches_a_plain_map() {
        use rand::{RngExt, SeedableRng};
        let (lpns, per_tpage, capacity) = (600u32, 100u32, 200u32);
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
        let mut c = Cmt::new(capacity, lpns, per_tpage);
        let mut model: std::collections::BTreeMap<u32, (Ppn, bool)> = Default::default();
        for step in 0..20_000u32 {
            let lpn = rng.random_range(0..lpns);
            match rng.random_range(0..10) {
                0 => {
                    let t = rng.random_range(0..lpns / per_tpage) as usize;
                    // Hints at every distance, and past the last page: they change nothing.
                    for ahead in 1..=3 {
                        c.prefetch_write_back(t, ahead);
                        c.prefetch_write_back((lpns / per_tpage) as usize + ahead, ahead);
                    }
                    let mut got = Vec::new();
                    c.take_dirty(t, |l, p| got.push((l, p)));
                    let range = t as u32 * per_tpage..(t as u32 + 1) * per_tpage;
                    let want: Vec<_> = model
                        .range_mut(range)
                        .filter(|(_, e)| e.1)
                        .map(|(&l, e)| {
                            e.1 = false;
                            (l, e.0)
                        })
                        .collect();
                    assert_eq!(got, want, "step {step}");
                }
                1 => {
                    c.remove(lpn);
                    model.remove(&lpn);
                }
                _ => {
                    let dirty = rng.random_bool(0.5);
                    if c.contains(lpn) {
                        c.update(lpn, Ppn(step), dirty);
                        let e = model.get_mut(&lpn).unwrap();
                        *e = (Ppn(step), e.1 || dirty);
                    } else {
                        if c.is_full() {
                            let (victim, _, _) = c.lru().unwrap();
                            c.remove(victim);
                            model.remove(&victim);
                        }
                        c.insert(lpn, Ppn(step), dirty);
                        model.insert(lpn, (Ppn(step), dirty));
                    }
                }
            }
            assert_eq!(c.peek(lpn), model.get(&lpn).copied(), "step {step}");
        }
        c.check_invariants().unwrap();
    }
}
