//! The cached mapping table (CMT): a bounded LRU of (LPN → PPN, dirty) entries (DFTL §3).
//!
//! Layout for the hot path: a dense slot array (one 24-byte slot per entry, so an access touches
//! one cache line plus its list neighbours), an intrusive doubly linked LRU list through the
//! slots, and an index `slot_of[lpn]`. No allocation per access. Dirty entries are also chained
//! per translation page (singly linked), so a write-back finds the dirty entries of its page in
//! O(dirty entries) and a checkpoint finds the dirty pages in O(translation pages).

use flash::Ppn;

const NIL: u32 = u32::MAX;

#[derive(Clone, Copy, Debug)]
struct Slot {
    lpn: u32,
    ppn: Ppn,
    /// LRU neighbours (towards most / least recently used).
    prev: u32,
    next: u32,
    /// Next dirty slot of the same translation page, when dirty.
    dirty_next: u32,
    dirty: bool,
}

const EMPTY: Slot = Slot {
    lpn: 0,
    ppn: Ppn::NONE,
    prev: NIL,
    next: NIL,
    dirty_next: NIL,
    dirty: false,
};

pub struct Cmt {
    capacity: u32,
    /// Slot of each LPN, or NIL.
    slot_of: Vec<u32>,
    slots: Vec<Slot>,
    /// Most recently used.
    head: u32,
    /// Least recently used.
    tail: u32,
    free: Vec<u32>,
    /// LPNs per translation page.
    per_tpage: u32,
    /// Per translation page: first dirty slot and number of dirty entries.
    dirty_head: Vec<u32>,
    dirty_count: Vec<u32>,
    pub hits: u64,
    pub misses: u64,
}

impl Cmt {
    pub fn new(capacity: u32, logical_pages: u32, per_tpage: u32) -> Cmt {
        assert!(capacity >= 1 && per_tpage >= 1);
        let tpages = logical_pages.div_ceil(per_tpage) as usize;
        Cmt {
            capacity,
            slot_of: vec![NIL; logical_pages as usize],
            slots: vec![EMPTY; capacity as usize],
            head: NIL,
            tail: NIL,
            free: (0..capacity).rev().collect(),
            per_tpage,
            dirty_head: vec![NIL; tpages],
            dirty_count: vec![0; tpages],
            hits: 0,
            misses: 0,
        }
    }

    pub fn capacity(&self) -> u32 {
        self.capacity
    }
    pub fn len(&self) -> u32 {
        self.capacity - self.free.len() as u32
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn is_full(&self) -> bool {
        self.free.is_empty()
    }
    pub fn contains(&self, lpn: u32) -> bool {
        self.slot_of[lpn as usize] != NIL
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

    /// Makes slot `s` dirty (chaining it to its translation page's dirty list).
    fn make_dirty(&mut self, s: u32) {
        let slot = &mut self.slots[s as usize];
        if slot.dirty {
            return;
        }
        let t = (slot.lpn / self.per_tpage) as usize;
        slot.dirty = true;
        slot.dirty_next = self.dirty_head[t];
        self.dirty_head[t] = s;
        self.dirty_count[t] += 1;
    }

    /// Takes slot `s` off its page's dirty list (O(dirty entries of that page); only used when
    /// a dirty entry is dropped without a write-back).
    fn unchain_dirty(&mut self, s: u32) {
        if !self.slots[s as usize].dirty {
            return;
        }
        let t = (self.slots[s as usize].lpn / self.per_tpage) as usize;
        let next = self.slots[s as usize].dirty_next;
        if self.dirty_head[t] == s {
            self.dirty_head[t] = next;
        } else {
            let mut p = self.dirty_head[t];
            while self.slots[p as usize].dirty_next != s {
                p = self.slots[p as usize].dirty_next;
                assert_ne!(p, NIL, "dirty slot {s} missing from its page's list");
            }
            self.slots[p as usize].dirty_next = next;
        }
        self.slots[s as usize].dirty = false;
        self.slots[s as usize].dirty_next = NIL;
        self.dirty_count[t] -= 1;
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

    /// Hands every dirty entry of translation page `t` to `f` (lpn, ppn) and marks it clean:
    /// the batch of one write-back.
    pub fn take_dirty(&mut self, t: usize, mut f: impl FnMut(u32, Ppn)) {
        let mut s = std::mem::replace(&mut self.dirty_head[t], NIL);
        while s != NIL {
            let slot = &mut self.slots[s as usize];
            debug_assert!(slot.dirty && (slot.lpn / self.per_tpage) as usize == t);
            f(slot.lpn, slot.ppn);
            slot.dirty = false;
            s = std::mem::replace(&mut slot.dirty_next, NIL);
        }
        self.dirty_count[t] = 0;
    }

    /// Looks an entry up, making it most recently used.
    pub fn get(&mut self, lpn: u32) -> Option<Ppn> {
        let s = self.slot_of[lpn as usize];
        if s == NIL {
            self.misses += 1;
            return None;
        }
        self.hits += 1;
        self.touch(s);
        Some(self.slots[s as usize].ppn)
    }

    /// Entry without touching recency or counters.
    pub fn peek(&self, lpn: u32) -> Option<(Ppn, bool)> {
        let s = self.slot_of[lpn as usize];
        (s != NIL).then(|| (self.slots[s as usize].ppn, self.slots[s as usize].dirty))
    }

    /// Updates a cached entry (it must be cached).
    pub fn update(&mut self, lpn: u32, ppn: Ppn, dirty: bool) {
        let s = self.slot_of[lpn as usize];
        assert_ne!(s, NIL, "lpn {lpn} is not cached");
        self.slots[s as usize].ppn = ppn;
        if dirty {
            self.make_dirty(s);
        }
        self.touch(s);
    }

    /// Inserts an entry (the CMT must not be full and the LPN not cached).
    pub fn insert(&mut self, lpn: u32, ppn: Ppn, dirty: bool) {
        assert!(!self.contains(lpn));
        let s = self
            .free
            .pop()
            .expect("insert into a full CMT: evict first");
        self.slot_of[lpn as usize] = s;
        self.slots[s as usize] = Slot { lpn, ppn, ..EMPTY };
        if dirty {
            self.make_dirty(s);
        }
        self.push_front(s);
    }

    /// The least recently used entry: (lpn, ppn, dirty).
    pub fn lru(&self) -> Option<(u32, Ppn, bool)> {
        (self.tail != NIL).then(|| {
            let s = &self.slots[self.tail as usize];
            (s.lpn, s.ppn, s.dirty)
        })
    }

    /// Drops an entry (a dirty one loses its pending update: write it back first).
    pub fn remove(&mut self, lpn: u32) {
        let s = self.slot_of[lpn as usize];
        if s == NIL {
            return;
        }
        self.unchain_dirty(s);
        self.unlink(s);
        self.slot_of[lpn as usize] = NIL;
        self.free.push(s);
    }

    /// Every dirty entry's LPN, sorted (tests and invariant checks).
    pub fn dirty_lpns(&self) -> Vec<u32> {
        let mut v: Vec<u32> = (0..self.dirty_head.len())
            .flat_map(|t| {
                std::iter::successors(Some(self.dirty_head[t]).filter(|&s| s != NIL), |&s| {
                    Some(self.slots[s as usize].dirty_next).filter(|&n| n != NIL)
                })
            })
            .map(|s| self.slots[s as usize].lpn)
            .collect();
        v.sort_unstable();
        v
    }

    pub fn check_invariants(&self) -> Result<(), String> {
        let mut n = 0;
        let mut s = self.head;
        let mut dirty = Vec::new();
        while s != NIL {
            n += 1;
            let slot = &self.slots[s as usize];
            if self.slot_of[slot.lpn as usize] != s {
                return Err(format!(
                    "CMT slot {s} is linked but its lpn points elsewhere"
                ));
            }
            if n > self.capacity {
                return Err("CMT list has a cycle".into());
            }
            if slot.dirty {
                dirty.push(slot.lpn);
            }
            s = slot.next;
        }
        if n != self.len() || n > self.capacity {
            return Err(format!(
                "CMT list holds {n} entries, counters say {} (capacity {})",
                self.len(),
                self.capacity
            ));
        }
        dirty.sort_unstable();
        if dirty != self.dirty_lpns() {
            return Err("CMT per-translation-page dirty lists disagree with the entries".into());
        }
        let counted: u32 = self.dirty_count.iter().sum();
        if counted as usize != dirty.len() {
            return Err(format!(
                "CMT dirty counts sum to {counted}, {} entries are dirty",
                dirty.len()
            ));
        }
        Ok(())
    }
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
        // Dropping a dirty entry unchains it from the middle of its page's list.
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
}
