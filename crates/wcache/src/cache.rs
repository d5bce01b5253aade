//! The DRAM write-back cache (OPTR §6.1: 8 MB, LRU) shared by `wcache` and `optr`.
//!
//! Each entry holds one logical page with the tags OPTR's coalescing tracking needs (§3.2): the
//! dirty flag, the wid of the request that wrote it and that request's size in pages. A write to a
//! page that is already dirty replaces it (write coalescing) and reports the tags it replaced, so
//! OPTR can log the coalescing record `<earlier, later>, size_earlier`.
//!
//! Slots live in a flat `Vec` with an intrusive doubly-linked LRU list and a dense per-LPN index:
//! no allocation per simulated page once the cache is warm.

use flash::Content;

const NIL: u32 = u32::MAX;
/// What a slot holds while its content is lent out by [`WriteCache::lend_dirty`].
const LENT: Content = Content::Tag(flash::ContentTag {
    lpn: u32::MAX,
    write: u64::MAX,
});

/// The paper's cache: 8 MB on its 128 GB device (OPTR §6.1).
pub const PAPER_CACHE_MB: f64 = 8.0;

/// Default cache size of both `wcache` and `optr` on a device: the paper's 8 MB, but at most
/// 1/64 of a smaller device (an 8 MB cache on the 16 MB `small` preset would hold half of it and
/// the baseline would barely touch flash). One rule for both designs, so a comparison on any
/// preset gives them the same cache.
pub fn default_cache_mb(g: &flash::Geometry) -> f64 {
    PAPER_CACHE_MB.min(g.capacity_bytes() as f64 / 64.0 / 1048576.0)
}

/// Tags of a cached page (OPTR §3.2).
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
    /// Page buffers of evicted pages, kept for [`Self::insert_copy`] (at most [`SPARE_MAX`]).
    spare: Vec<Box<[u8]>>,
}

/// Evicted page buffers kept for reuse.
const SPARE_MAX: usize = 64;

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
            spare: Vec::new(),
        }
    }

    /// Keeps the buffer of a page that left the cache for a later [`Self::insert_copy`].
    pub fn recycle(&mut self, content: Content) {
        if let Content::Bytes(buffer) = content {
            if self.spare.len() < SPARE_MAX {
                self.spare.push(buffer);
            }
        }
    }

    /// [`Self::insert`] of a copy of `content`, copied into a buffer the cache already owns
    /// (the page's own, or a recycled one) where it can: a write of a full cache then costs a
    /// copy, not an allocation and a free per page.
    pub fn insert_copy(&mut self, lpn: u32, content: &Content, tags: PageTags) -> Option<PageTags> {
        let owned = match content {
            Content::Tag(_) => content.clone(),
            Content::Bytes(bytes) => {
                let s = self.slot_of[lpn as usize];
                if s != NIL {
                    let old = std::mem::replace(&mut self.slots[s as usize].content, LENT);
                    self.recycle(old);
                }
                let pos = self.spare.iter().rposition(|b| b.len() == bytes.len());
                Content::Bytes(match pos {
                    Some(i) => {
                        let mut buffer = self.spare.swap_remove(i);
                        buffer.copy_from_slice(bytes);
                        buffer
                    }
                    None => bytes.clone(),
                })
            }
        };
        self.insert(lpn, owned, tags)
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
    ///
    /// The pages' contents are moved out, not copied (a flush of a full cache would otherwise
    /// allocate and copy every page); the cache must not be read or changed until
    /// [`Self::return_contents`] has put them back.
    pub fn lend_dirty(&mut self, out: &mut Vec<CachedPage>) {
        out.clear();
        for s in &mut self.slots {
            if s.dirty && s.lpn != u32::MAX {
                s.dirty = false;
                out.push(CachedPage {
                    lpn: s.lpn,
                    content: std::mem::replace(&mut s.content, LENT),
                    tags: s.tags,
                    dirty: true,
                });
            }
        }
        self.dirty = 0;
    }

    /// Puts back the contents [`Self::lend_dirty`] moved into `pages`, and empties `pages`.
    pub fn return_contents(&mut self, pages: &mut Vec<CachedPage>) {
        for page in pages.drain(..) {
            let s = self.slot_of[page.lpn as usize];
            assert_ne!(s, NIL, "lpn {} left the cache while lent", page.lpn);
            let slot = &mut self.slots[s as usize];
            debug_assert_eq!(slot.content, LENT, "lpn {} lent twice", page.lpn);
            slot.content = page.content;
        }
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
    pub fn check_invariants(&self) -> Result<(), ftl::InvariantViolation> {
        let mut n = 0u32;
        let mut s = self.head;
        let mut dirty = 0;
        while s != NIL {
            let slot = &self.slots[s as usize];
            if self.slot_of[slot.lpn as usize] != s {
                return Err(ftl::violation!(
                    "cache slot {s} (lpn {}) is not indexed",
                    slot.lpn
                ));
            }
            dirty += slot.dirty as u32;
            n += 1;
            if n > self.capacity {
                return Err("cache LRU list longer than the capacity".into());
            }
            s = slot.next;
        }
        if n != self.len() || dirty != self.dirty {
            return Err(ftl::violation!(
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
    fn insert_copy_reuses_buffers_and_keeps_contents_apart() {
        let bytes = |v: u8| Content::Bytes(vec![v; 64].into_boxed_slice());
        let t = |wid| PageTags { wid, size: 1 };
        let mut c = WriteCache::new(2, 10);
        assert_eq!(c.insert_copy(1, &bytes(1), t(1)), None);
        // A rewrite copies into the page's own buffer and still reports the coalescing.
        let before = c.get(1).unwrap().as_bytes().unwrap().as_ptr();
        assert_eq!(c.insert_copy(1, &bytes(2), t(2)), Some(t(1)));
        assert_eq!(c.get(1), Some(&bytes(2)));
        assert_eq!(c.get(1).unwrap().as_bytes().unwrap().as_ptr(), before);
        // An evicted page's buffer serves the next new page.
        c.insert_copy(2, &bytes(3), t(3));
        let lru = c.pop_lru().unwrap();
        assert_eq!((lru.lpn, &lru.content), (1, &bytes(2)));
        c.recycle(lru.content);
        c.insert_copy(5, &bytes(4), t(4));
        assert_eq!(c.get(5).unwrap().as_bytes().unwrap().as_ptr(), before);
        assert_eq!(c.get(5), Some(&bytes(4)));
        assert_eq!(c.get(2), Some(&bytes(3)));
        // Tags and odd sizes are plain inserts.
        c.pop_lru();
        let tag = Content::Tag(flash::ContentTag { lpn: 6, write: 9 });
        c.insert_copy(6, &tag, t(5));
        assert_eq!(c.get(6), Some(&tag));
        c.check_invariants().unwrap();
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
        c.lend_dirty(&mut out);
        assert_eq!(out.len(), 2);
        assert_eq!(c.dirty_pages(), 0);
        let lent: Vec<(u32, Content)> = out.iter().map(|p| (p.lpn, p.content.clone())).collect();
        c.return_contents(&mut out);
        assert!(out.is_empty());
        for (lpn, content) in lent {
            assert_eq!(c.get(lpn), Some(&content), "lpn {lpn} back in the cache");
        }
        c.lend_dirty(&mut out);
        assert!(out.is_empty(), "nothing dirty after a flush");
        // a rewrite of a clean page is not a coalescing
        assert_eq!(c.insert(3, page(3, 5), t(5)), None);
        c.check_invariants().unwrap();
        assert_eq!(c.remove(1).unwrap().lpn, 1);
        c.check_invariants().unwrap();
    }
}
