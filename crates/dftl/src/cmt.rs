//! The cached mapping table (CMT): a bounded LRU of (LPN → PPN, dirty) entries over a dense slot
//! array with an intrusive doubly linked list — no allocation per access (DFTL §3).

use flash::Ppn;

const NIL: u32 = u32::MAX;

pub struct Cmt {
    capacity: u32,
    /// Slot of each LPN, or NIL.
    slot_of: Vec<u32>,
    lpn: Vec<u32>,
    ppn: Vec<Ppn>,
    dirty: Vec<bool>,
    /// LPNs per translation page, and the number of dirty entries of each translation page
    /// (a checkpoint finds the pages to write back in O(translation pages), not O(capacity)).
    per_tpage: u32,
    dirty_in: Vec<u32>,
    prev: Vec<u32>,
    next: Vec<u32>,
    /// Most recently used.
    head: u32,
    /// Least recently used.
    tail: u32,
    free: Vec<u32>,
    pub hits: u64,
    pub misses: u64,
}

impl Cmt {
    pub fn new(capacity: u32, logical_pages: u32, per_tpage: u32) -> Cmt {
        assert!(capacity >= 1 && per_tpage >= 1);
        let c = capacity as usize;
        Cmt {
            capacity,
            slot_of: vec![NIL; logical_pages as usize],
            lpn: vec![0; c],
            ppn: vec![Ppn::NONE; c],
            dirty: vec![false; c],
            per_tpage,
            dirty_in: vec![0; logical_pages.div_ceil(per_tpage) as usize],
            prev: vec![NIL; c],
            next: vec![NIL; c],
            head: NIL,
            tail: NIL,
            free: (0..capacity).rev().collect(),
            hits: 0,
            misses: 0,
        }
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
        let (p, n) = (self.prev[s as usize], self.next[s as usize]);
        if p != NIL {
            self.next[p as usize] = n
        } else {
            self.head = n
        }
        if n != NIL {
            self.prev[n as usize] = p
        } else {
            self.tail = p
        }
    }
    fn push_front(&mut self, s: u32) {
        self.prev[s as usize] = NIL;
        self.next[s as usize] = self.head;
        if self.head != NIL {
            self.prev[self.head as usize] = s;
        }
        self.head = s;
        if self.tail == NIL {
            self.tail = s;
        }
    }

    /// Sets slot `s`'s dirty flag, keeping the per-translation-page counts.
    fn set_dirty(&mut self, s: u32, dirty: bool) {
        let was = std::mem::replace(&mut self.dirty[s as usize], dirty);
        let t = (self.lpn[s as usize] / self.per_tpage) as usize;
        match (was, dirty) {
            (false, true) => self.dirty_in[t] += 1,
            (true, false) => self.dirty_in[t] -= 1,
            _ => {}
        }
    }

    /// Dirty entries of translation page `t`.
    pub fn dirty_in(&self, t: usize) -> u32 {
        self.dirty_in[t]
    }

    /// Translation pages with at least one dirty entry, in order.
    pub fn dirty_tvpns(&self) -> Vec<usize> {
        (0..self.dirty_in.len())
            .filter(|&t| self.dirty_in[t] > 0)
            .collect()
    }

    /// Looks an entry up, making it most recently used.
    pub fn get(&mut self, lpn: u32) -> Option<Ppn> {
        let s = self.slot_of[lpn as usize];
        if s == NIL {
            self.misses += 1;
            return None;
        }
        self.hits += 1;
        self.unlink(s);
        self.push_front(s);
        Some(self.ppn[s as usize])
    }

    /// Entry without touching recency or counters.
    pub fn peek(&self, lpn: u32) -> Option<(Ppn, bool)> {
        let s = self.slot_of[lpn as usize];
        (s != NIL).then(|| (self.ppn[s as usize], self.dirty[s as usize]))
    }

    /// Updates a cached entry (it must be cached).
    pub fn update(&mut self, lpn: u32, ppn: Ppn, dirty: bool) {
        let s = self.slot_of[lpn as usize];
        assert_ne!(s, NIL, "lpn {lpn} is not cached");
        self.ppn[s as usize] = ppn;
        if dirty {
            self.set_dirty(s, true);
        }
        self.unlink(s);
        self.push_front(s);
    }

    /// Inserts an entry (the CMT must not be full and the LPN not cached).
    pub fn insert(&mut self, lpn: u32, ppn: Ppn, dirty: bool) {
        assert!(!self.contains(lpn));
        let s = self
            .free
            .pop()
            .expect("insert into a full CMT: evict first");
        self.slot_of[lpn as usize] = s;
        self.lpn[s as usize] = lpn;
        self.ppn[s as usize] = ppn;
        self.dirty[s as usize] = false;
        self.set_dirty(s, dirty);
        self.push_front(s);
    }

    /// The least recently used entry: (lpn, ppn, dirty).
    pub fn lru(&self) -> Option<(u32, Ppn, bool)> {
        (self.tail != NIL).then(|| {
            let s = self.tail as usize;
            (self.lpn[s], self.ppn[s], self.dirty[s])
        })
    }

    pub fn remove(&mut self, lpn: u32) {
        let s = self.slot_of[lpn as usize];
        if s == NIL {
            return;
        }
        self.unlink(s);
        self.set_dirty(s, false);
        self.slot_of[lpn as usize] = NIL;
        self.free.push(s);
    }

    pub fn mark_clean(&mut self, lpn: u32) {
        let s = self.slot_of[lpn as usize];
        if s != NIL {
            self.set_dirty(s, false);
        }
    }

    /// Every dirty entry, in slot order.
    pub fn dirty_lpns(&self) -> Vec<u32> {
        let mut v: Vec<u32> = (0..self.capacity)
            .filter(|&s| self.dirty[s as usize] && self.slot_of[self.lpn[s as usize] as usize] == s)
            .map(|s| self.lpn[s as usize])
            .collect();
        v.sort_unstable();
        v
    }

    pub fn check_invariants(&self) -> Result<(), String> {
        let mut n = 0;
        let mut s = self.head;
        let mut dirty_in = vec![0u32; self.dirty_in.len()];
        while s != NIL {
            n += 1;
            if self.dirty[s as usize] {
                dirty_in[(self.lpn[s as usize] / self.per_tpage) as usize] += 1;
            }
            if self.slot_of[self.lpn[s as usize] as usize] != s {
                return Err(format!(
                    "CMT slot {s} is linked but its lpn points elsewhere"
                ));
            }
            if n > self.capacity {
                return Err("CMT list has a cycle".into());
            }
            s = self.next[s as usize];
        }
        if n != self.len() {
            return Err(format!(
                "CMT list holds {n} entries, counters say {}",
                self.len()
            ));
        }
        if dirty_in != self.dirty_in {
            return Err("CMT per-translation-page dirty counts disagree with the entries".into());
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
        c.mark_clean(3);
        assert!(c.dirty_lpns().is_empty());
        assert!(c.dirty_tvpns().is_empty());
        assert_eq!(c.get(2), None);
        assert_eq!((c.hits, c.misses), (1, 1));
        c.check_invariants().unwrap();
    }
}
