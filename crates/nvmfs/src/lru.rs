//! The dirty and clean LRU lists (§III-B, Fig. 2), in RAM as intrusive doubly linked lists over
//! NVRAM data page numbers. Their persistent form is the `list` and `stamp` of each page record
//! (see `layout::PageRecord`); `Nvmfs` writes both through on every change.

use crate::layout::PageList;

const NIL: u32 = u32::MAX;

/// Index of a list in the arrays below.
fn slot(list: PageList) -> usize {
    match list {
        PageList::Dirty => 0,
        PageList::Clean => 1,
        _ => panic!("{list:?} is not an LRU list"),
    }
}

pub struct Lru {
    prev: Vec<u32>,
    next: Vec<u32>,
    on: Vec<PageList>,
    /// Most recently used end.
    mru: [u32; 2],
    /// Least recently used end.
    lru: [u32; 2],
    len: [u32; 2],
}

impl Lru {
    pub fn new(pages: u32) -> Lru {
        Lru {
            prev: vec![NIL; pages as usize],
            next: vec![NIL; pages as usize],
            on: vec![PageList::Free; pages as usize],
            mru: [NIL; 2],
            lru: [NIL; 2],
            len: [0; 2],
        }
    }

    pub fn len(&self, list: PageList) -> u32 {
        self.len[slot(list)]
    }
    pub fn list_of(&self, page: u32) -> PageList {
        self.on[page as usize]
    }
    /// Marks a page that is on no LRU list (free or indirect).
    pub fn set_off_list(&mut self, page: u32, what: PageList) {
        assert!(matches!(what, PageList::Free | PageList::Indirect));
        if matches!(self.on[page as usize], PageList::Dirty | PageList::Clean) {
            self.remove(page);
        }
        self.on[page as usize] = what;
    }

    pub fn remove(&mut self, page: u32) {
        let s = slot(self.on[page as usize]);
        let (p, n) = (self.prev[page as usize], self.next[page as usize]);
        if p == NIL {
            self.mru[s] = n;
        } else {
            self.next[p as usize] = n;
        }
        if n == NIL {
            self.lru[s] = p;
        } else {
            self.prev[n as usize] = p;
        }
        self.prev[page as usize] = NIL;
        self.next[page as usize] = NIL;
        self.len[s] -= 1;
        self.on[page as usize] = PageList::Free;
    }

    /// Inserts at the MRU end of `list` (removing it from wherever it was).
    pub fn push_mru(&mut self, list: PageList, page: u32) {
        if matches!(self.on[page as usize], PageList::Dirty | PageList::Clean) {
            self.remove(page);
        }
        let s = slot(list);
        let old = self.mru[s];
        self.next[page as usize] = old;
        self.prev[page as usize] = NIL;
        if old == NIL {
            self.lru[s] = page;
        } else {
            self.prev[old as usize] = page;
        }
        self.mru[s] = page;
        self.len[s] += 1;
        self.on[page as usize] = list;
    }

    /// Inserts at the LRU end of `list` (flushed pages enter the clean list here, §III-B).
    pub fn push_lru(&mut self, list: PageList, page: u32) {
        if matches!(self.on[page as usize], PageList::Dirty | PageList::Clean) {
            self.remove(page);
        }
        let s = slot(list);
        let old = self.lru[s];
        self.prev[page as usize] = old;
        self.next[page as usize] = NIL;
        if old == NIL {
            self.mru[s] = page;
        } else {
            self.next[old as usize] = page;
        }
        self.lru[s] = page;
        self.len[s] += 1;
        self.on[page as usize] = list;
    }

    /// The least recently used page of `list`.
    pub fn lru_end(&self, list: PageList) -> Option<u32> {
        let p = self.lru[slot(list)];
        (p != NIL).then_some(p)
    }

    /// Up to `n` pages from the LRU end, coldest first.
    pub fn coldest(&self, list: PageList, n: usize, out: &mut Vec<u32>) {
        out.clear();
        let mut p = self.lru[slot(list)];
        while p != NIL && out.len() < n {
            out.push(p);
            p = self.prev[p as usize];
        }
    }

    /// Pages of `list` from MRU to LRU.
    pub fn iter(&self, list: PageList) -> impl Iterator<Item = u32> + '_ {
        let mut p = self.mru[slot(list)];
        std::iter::from_fn(move || {
            (p != NIL).then(|| {
                let cur = p;
                p = self.next[p as usize];
                cur
            })
        })
    }

    /// Links agree in both directions and lengths match.
    pub fn check(&self) -> Result<(), ftl::InvariantViolation> {
        for list in [PageList::Dirty, PageList::Clean] {
            let pages: Vec<u32> = self.iter(list).collect();
            if pages.len() as u32 != self.len(list) {
                return Err(ftl::violation!(
                    "{list:?} list walks {} pages, len says {}",
                    pages.len(),
                    self.len(list)
                ));
            }
            for w in pages.windows(2) {
                if self.prev[w[1] as usize] != w[0] {
                    return Err(ftl::violation!(
                        "{list:?} list: broken back link at page {}",
                        w[1]
                    ));
                }
            }
            if pages.iter().any(|&p| self.on[p as usize] != list) {
                return Err(ftl::violation!(
                    "{list:?} list holds a page marked otherwise"
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mru_lru_order_and_moves() {
        let mut l = Lru::new(8);
        for p in 0..4 {
            l.push_mru(PageList::Dirty, p);
        }
        assert_eq!(
            l.iter(PageList::Dirty).collect::<Vec<_>>(),
            vec![3, 2, 1, 0]
        );
        l.push_mru(PageList::Dirty, 0);
        assert_eq!(l.lru_end(PageList::Dirty), Some(1));
        l.push_lru(PageList::Clean, 1);
        l.push_lru(PageList::Clean, 2);
        assert_eq!(l.iter(PageList::Clean).collect::<Vec<_>>(), vec![1, 2]);
        assert_eq!(l.len(PageList::Dirty), 2);
        let mut out = Vec::new();
        l.coldest(PageList::Dirty, 5, &mut out);
        assert_eq!(out, vec![3, 0]);
        l.set_off_list(3, PageList::Free);
        assert_eq!(l.len(PageList::Dirty), 1);
        l.check().unwrap();
    }
}
