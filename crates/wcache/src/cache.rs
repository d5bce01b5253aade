//! The DRAM write-back cache (OPTR §5.8: 8 MB, LRU) shared by `wcache` and `optr`.
//!
//! Each entry holds one logical page with the tags OPTR's coalescing tracking needs (§5.3): the
//! dirty flag, the wid of the request that wrote it and that request's size in pages. A write to a
//! page that is already dirty replaces it (write coalescing) and reports the tags it replaced, so
//! OPTR can log the coalescing record `<earlier, later>, size_earlier`.
//!
//! Slots live in a flat `Vec` with an intrusive doubly-linked LRU list and a dense per-LPN index:
//! no allocation per simulated page once the cache is warm.

use flash::Content;

const NIL: u32 = u32::MAX;

/// The paper's cache: 8 MB on its 128 GB device (OPTR §5.8).
pub const PAPER_CACHE_MB: f64 = 8.0;

/// Default cache size of both `wcache` and `optr` on a device: the paper's 8 MB, but at most
/// 1/64 of a smaller device (an 8 MB cache on the 16 MB `small` preset would hold half of it and
/// the baseline would barely touch flash). One rule for both designs, so a comparison on any
/// preset gives them the same cache.
pub fn default_cache_mb(g: &flash::Geometry) -> f64 {
    PAPER_CACHE_MB.min(g.capacity_bytes() as f64 / 64.0 / 1048576.0)
}

/// Tags of a cached page (OPTR §5.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageTags {
    /// Request that wrote the page.
    pub wid: u64,
    /// That request's size in pages.
    pub size: u32,
}

/// One page taken out of the cache (evicted) or written back (flushed).
#[derive(Clone, Debug)]
pub struct CachedPage {
    pub lpn: u32,
    pub content: Content,
    pub tags: PageTags,
    pub dirty: bool,
}

#[derive(Clone, Debug)]
struct Slot {
    lpn: u32,
    content: Content,
    tags: PageTags,
    dirty: bool,
    prev: u32,
    next: u32,
}

/// An LRU write-back cache of `capacity` pages over `logical_pages` logical pages.
#[derive(Clone, Debug)]
pub struct WriteCache {
    capacity: u32,
    slot_of: Vec<u32>,
    slots: Vec<Slot>,
    free: Vec<u32>,
    /// Most recently used.
    head: u32,
    /// Least recently used.
    tail: u32,
    dirty: u32,
}

impl WriteCache {
    pub fn new(capacity: u32, logical_pages: u32) -> WriteCache {
        assert!(capacity >= 1, "a write cache needs at least one page");
        WriteCache {
            capacity,
            slot_of: vec![NIL; logical_pages as usize],
            slots: Vec::with_capacity(capacity as usize),
            free: Vec::new(),
            head: NIL,
            tail: NIL,
            dirty: 0,
        }
    }

    pub fn capacity(&self) -> u32 {
        self.capacity
    }
    pub fn len(&self) -> u32 {
        self.slots.len() as u32 - self.free.len() as u32
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn dirty_pages(&self) -> u32 {
        self.dirty
    }
    pub fn contains(&self, lpn: u32) -> bool {
        self.slot_of[lpn as usize] != NIL
    }
    /// `true` when inserting `lpn` needs an eviction first.
    pub fn needs_eviction(&self, lpn: u32) -> bool {
        !self.contains(lpn) && self.len() >= self.capacity
    }

    /// The cached content of `lpn` (a read hit refreshes its LRU position).
    pub fn get(&mut self, lpn: u32) -> Option<&Content> {
        let s = self.slot_of[lpn as usize];
        if s == NIL {
            return None;
        }
        self.unlink(s);
        self.push_front(s);
        Some(&self.slots[s as usize].content)
    }

    /// Tags of a dirty cached page.
    pub fn dirty_tags(&self, lpn: u32) -> Option<PageTags> {
        let s = self.slot_of[lpn as usize];
        (s != NIL && self.slots[s as usize].dirty).then(|| self.slots[s as usize].tags)
    }

    /// Stores a dirty page. Returns the tags of the dirty page it replaced (a coalesced write),
    /// `None` if the page was absent or clean. The caller must have made room
    /// ([`needs_eviction`](Self::needs_eviction)).
    pub fn insert(&mut self, lpn: u32, content: Content, tags: PageTags) -> Option<PageTags> {
        let s = self.slot_of[lpn as usize];
        if s != NIL {
            let slot = &mut self.slots[s as usize];
            let replaced = slot.dirty.then_some(slot.tags);
            if !slot.dirty {
                self.dirty += 1;
            }
            slot.content = content;
            slot.tags = tags;
            slot.dirty = true;
            self.unlink(s);
            self.push_front(s);
            return replaced;
        }
        assert!(self.len() < self.capacity, "cache full: evict first");
        let slot = Slot {
            lpn,
            content,
            tags,
            dirty: true,
            prev: NIL,
            next: NIL,
        };
        let s = match self.free.pop() {
            Some(s) => {
                self.slots[s as usize] = slot;
                s
            }
            None => {
                self.slots.push(slot);
                self.slots.len() as u32 - 1
            }
        };
        self.slot_of[lpn as usize] = s;
        self.dirty += 1;
        self.push_front(s);
        None
    }

    /// Removes and returns the least recently used page.
    pub fn pop_lru(&mut self) -> Option<CachedPage> {
        let s = self.tail;
        if s == NIL {
            return None;
        }
        Some(self.take(s))
    }

    /// Removes `lpn` (trim).
    pub fn remove(&mut self, lpn: u32) -> Option<CachedPage> {
        let s = self.slot_of[lpn as usize];
        (s != NIL).then(|| self.take(s))
    }

    /// Every dirty page, marked clean (they stay cached). Order: slot order, which is neither
    /// arrival nor LPN order — a consumer drive gives no ordering guarantee.
    pub fn clean_all(&mut self, out: &mut Vec<CachedPage>) {
        out.clear();
        for s in &mut self.slots {
            if s.dirty && s.lpn != u32::MAX {
                s.dirty = false;
                out.push(CachedPage {
                    lpn: s.lpn,
                    content: s.content.clone(),
                    tags: s.tags,
                    dirty: true,
                });
            }
        }
        self.dirty = 0;
    }

    fn take(&mut self, s: u32) -> CachedPage {
        self.unlink(s);
        let slot = &mut self.slots[s as usize];
        let page = CachedPage {
            lpn: slot.lpn,
            content: std::mem::replace(
                &mut slot.content,
                Content::Tag(flash::ContentTag { lpn: 0, write: 0 }),
            ),
            tags: slot.tags,
            dirty: slot.dirty,
        };
        if slot.dirty {
            self.dirty -= 1;
        }
        self.slot_of[slot.lpn as usize] = NIL;
        slot.lpn = u32::MAX;
        slot.dirty = false;
        self.free.push(s);
        page
    }

    fn unlink(&mut self, s: u32) {
        let (p, n) = (self.slots[s as usize].prev, self.slots[s as usize].next);
        if p != NIL {
            self.slots[p as usize].next = n;
        } else if self.head == s {
            self.head = n;
        }
        if n != NIL {
            self.slots[n as usize].prev = p;
        } else if self.tail == s {
            self.tail = p;
        }
        self.slots[s as usize].prev = NIL;
        self.slots[s as usize].next = NIL;
    }

    fn push_front(&mut self, s: u32) {
        self.slots[s as usize].prev = NIL;
        self.slots[s as usize].next = self.head;
        if self.head != NIL {
            self.slots[self.head as usize].prev = s;
        }
        self.head = s;
        if self.tail == NIL {
            self.tail = s;
        }
    }

    /// Index and list agree; dirty count matches.
    pub fn check_invariants(&self) -> Result<(), String> {
        let mut n = 0u32;
        let mut s = self.head;
        let mut dirty = 0;
        while s != NIL {
            let slot = &self.slots[s as usize];
            if self.slot_of[slot.lpn as usize] != s {
                return Err(format!("cache slot {s} (lpn {}) is not indexed", slot.lpn));
            }
            dirty += slot.dirty as u32;
            n += 1;
            if n > self.capacity {
                return Err("cache LRU list longer than the capacity".into());
            }
            s = slot.next;
        }
        if n != self.len() || dirty != self.dirty {
            return Err(format!(
                "cache list holds {n} pages ({dirty} dirty), counters say {} ({})",
                self.len(),
                self.dirty
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flash::ContentTag;

    fn page(lpn: u32, write: u64) -> Content {
        Content::Tag(ContentTag { lpn, write })
    }

    #[test]
    fn lru_eviction_and_coalescing() {
        let mut c = WriteCache::new(2, 10);
        let t = |wid| PageTags { wid, size: 1 };
        assert_eq!(c.insert(1, page(1, 1), t(1)), None);
        assert_eq!(c.insert(2, page(2, 2), t(2)), None);
        assert!(c.needs_eviction(3));
        // rewrite of a dirty page coalesces and reports the earlier tags
        assert_eq!(c.insert(1, page(1, 3), t(3)), Some(t(1)));
        let lru = c.pop_lru().unwrap();
        assert_eq!(lru.lpn, 2);
        c.insert(3, page(3, 4), t(4));
        let mut out = Vec::new();
        c.clean_all(&mut out);
        assert_eq!(out.len(), 2);
        assert_eq!(c.dirty_pages(), 0);
        // a rewrite of a clean page is not a coalescing
        assert_eq!(c.insert(3, page(3, 5), t(5)), None);
        c.check_invariants().unwrap();
        assert_eq!(c.remove(1).unwrap().lpn, 1);
        c.check_invariants().unwrap();
    }
}
