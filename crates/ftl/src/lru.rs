//! A least-recently-used order over the indices `0..n` of a fixed table (translation pages,
//! cache slots), as an intrusive doubly linked list: touching, removing and taking the least
//! recent are O(1) with no allocation, at 8 bytes per index. (Möbius's Evicting Area kept it in
//! a `BTreeMap` keyed by a use stamp: an insert and a remove on every touch were ~7 % of its
//! txmix run; issue #19.)

const NIL: u32 = u32::MAX;

/// Indices in least-recently-used order; an index is on the list or not.
#[derive(Clone, Debug)]
pub struct IndexLru {
    prev: Vec<u32>,
    next: Vec<u32>,
    /// Least recently used end (`NIL` when empty).
    oldest: u32,
    /// Most recently used end.
    newest: u32,
    len: usize,
}

impl IndexLru {
    /// An empty order over indices `0..n`.
    pub fn new(n: usize) -> IndexLru {
        assert!(n < NIL as usize, "{n} indices do not fit u32 links");
        IndexLru {
            prev: vec![NIL; n],
            next: vec![NIL; n],
            oldest: NIL,
            newest: NIL,
            len: 0,
        }
    }

    /// Indices on the list.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether `i` is on the list.
    pub fn contains(&self, i: usize) -> bool {
        self.prev[i] != NIL || self.oldest == i as u32
    }

    /// Whether `i` is the most recently used index.
    pub fn is_newest(&self, i: usize) -> bool {
        self.newest == i as u32
    }

    /// Makes `i` the most recently used, putting it on the list if it was not.
    pub fn touch(&mut self, i: usize) {
        if self.is_newest(i) {
            return;
        }
        if self.contains(i) {
            self.unlink(i);
        }
        self.push_newest(i);
    }

    /// Takes `i` off the list (no-op if it is not on it).
    pub fn remove(&mut self, i: usize) {
        if self.contains(i) {
            self.unlink(i);
        }
    }

    /// Takes the least recently used index off the list.
    pub fn pop_oldest(&mut self) -> Option<usize> {
        let i = self.oldest;
        (i != NIL).then(|| {
            self.unlink(i as usize);
            i as usize
        })
    }

    /// The indices, least recently used first.
    pub fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        std::iter::successors((self.oldest != NIL).then_some(self.oldest), |&i| {
            let n = self.next[i as usize];
            (n != NIL).then_some(n)
        })
        .map(|i| i as usize)
    }

    /// Heap bytes (the links).
    pub fn memory(&self) -> u64 {
        (self.prev.capacity() + self.next.capacity()) as u64 * 4
    }

    fn push_newest(&mut self, i: usize) {
        self.prev[i] = self.newest;
        self.next[i] = NIL;
        match self.newest {
            NIL => self.oldest = i as u32,
            n => self.next[n as usize] = i as u32,
        }
        self.newest = i as u32;
        self.len += 1;
    }

    fn unlink(&mut self, i: usize) {
        let (p, n) = (self.prev[i], self.next[i]);
        match p {
            NIL => self.oldest = n,
            p => self.next[p as usize] = n,
        }
        match n {
            NIL => self.newest = p,
            n => self.prev[n as usize] = p,
        }
        self.prev[i] = NIL;
        self.next[i] = NIL;
        self.len -= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{RngExt, SeedableRng};

    /// The same operations on a plain list: the order must agree after every step.
    #[test]
    fn agrees_with_a_plain_list_under_random_operations() {
        let n = 40;
        let mut lru = IndexLru::new(n);
        let mut model: Vec<usize> = Vec::new();
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(19);
        for step in 0..20_000 {
            let i = rng.random_range(0..n);
            match rng.random_range(0..7) {
                0..=3 => {
                    lru.touch(i);
                    model.retain(|&m| m != i);
                    model.push(i);
                }
                4 => {
                    lru.remove(i);
                    model.retain(|&m| m != i);
                }
                _ => {
                    let want = (!model.is_empty()).then(|| model.remove(0));
                    assert_eq!(lru.pop_oldest(), want, "step {step}");
                }
            }
            assert_eq!(lru.iter().collect::<Vec<_>>(), model, "step {step}");
            assert_eq!(lru.len(), model.len());
            assert_eq!(lru.is_newest(i), model.last() == Some(&i));
            for j in 0..n {
                assert_eq!(
                    lru.contains(j),
                    model.contains(&j),
                    "step {step}, index {j}"
                );
            }
        }
    }

    #[test]
    fn an_empty_list_pops_nothing() {
        let mut lru = IndexLru::new(3);
        assert_eq!(lru.pop_oldest(), None);
        lru.touch(2);
        lru.touch(0);
        lru.touch(2);
        assert_eq!(lru.iter().collect::<Vec<_>>(), vec![0, 2]);
        assert_eq!(
            (lru.pop_oldest(), lru.pop_oldest(), lru.pop_oldest()),
            (Some(0), Some(2), None)
        );
        assert!(lru.is_empty() && !lru.contains(0) && !lru.contains(2));
    }
}
