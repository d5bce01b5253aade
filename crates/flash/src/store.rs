//! Storage backends behind one trait: what is physically on the flash.
//!
//! A store keeps, per page, its state (erased, programmed, torn), its data and its OOB record;
//! per block, its erase count and whether an erase of it was interrupted. It enforces nothing:
//! the rules live in [`crate::Flash`]. Three backends:
//! - [`TagStore`]: host pages as content tags, metadata pages as bytes; paper-scale simulation.
//! - [`MemStore`]: every page as bytes, in memory; emulation of small devices.
//! - [`crate::file::FileStore`]: every page as bytes in a file that outlives the process.
//!
//! Only the first `oob_record_bytes` bytes of each spare area are kept: the bytes the design
//! using the device declares, so a 16 M-page device fits in memory.

use crate::codec::copy_padded;
use crate::content::{Content, ContentTag};
use crate::geometry::{BlockId, Geometry, Ppn, SLAB_BYTES};
use crate::media::MediaPlane;
use crate::memory::{fault_in, resident_vec, vec_bytes};
use crate::prefetch::DataHint;
use crate::squeeze::{OobSqueeze, SqueezedOob, MAX_SQUEEZED_RECORD};
use rustc_hash::FxHashMap;
use std::sync::Arc;

/// State of one physical page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum PageState {
    Erased = 0,
    Programmed = 1,
    /// A program interrupted by a power cut: reads fail ECC until the block is erased.
    Torn = 2,
}

impl PageState {
    pub fn from_u8(v: u8) -> PageState {
        match v {
            1 => PageState::Programmed,
            2 => PageState::Torn,
            _ => PageState::Erased,
        }
    }
}

/// Physical contents of the flash, with no rules attached.
pub trait Store: Send {
    fn geometry(&self) -> &Geometry;
    /// Bytes of each OOB area this store keeps.
    fn oob_record_bytes(&self) -> u32;
    /// `true` when host pages are kept as tags rather than bytes.
    fn tag_only(&self) -> bool;
    fn page_state(&self, ppn: Ppn) -> PageState;
    /// Data of a programmed page.
    fn data(&self, ppn: Ppn) -> Content;
    /// Copies bytes `at..at + out.len()` of a programmed page into `out` (a tag is expanded
    /// into its page image first, as [`data`](Self::data) would).
    fn data_bytes(&self, ppn: Ppn, at: usize, out: &mut [u8]) {
        image_range(&self.data(ppn), self.geometry().page_bytes, at, out);
    }
    /// The little-endian `u32` at bytes `at..at + 4` of a programmed page (an entry of a
    /// mapping page, read without copying the page).
    fn data_u32_le(&self, ppn: Ppn, at: usize) -> u32 {
        let mut entry = [0u8; 4];
        self.data_bytes(ppn, at, &mut entry);
        u32::from_le_bytes(entry)
    }
    /// Pages of `block` up to and including its last page that is not erased (0 if the whole
    /// block is erased): where its next program may go.
    fn written_extent(&self, block: BlockId) -> u32 {
        let g = self.geometry();
        (0..g.pages_per_block)
            .rev()
            .find(|&p| self.page_state(g.ppn(block, p)) != PageState::Erased)
            .map_or(0, |p| p + 1)
    }
    /// How many pages from `first` on, at most `max`, are programmed one after another (where
    /// a run of OOB reads stops: [`crate::Flash::read_oob_run`]).
    fn programmed_run(&self, first: Ppn, max: u32) -> u32 {
        (0..max)
            .take_while(|&k| self.page_state(Ppn(first.0 + k)) == PageState::Programmed)
            .count() as u32
    }
    /// Copies the OOB record of a programmed page into `out` (up to `out.len()` bytes).
    fn oob(&self, ppn: Ppn, out: &mut [u8]);
    fn write_page(&mut self, ppn: Ppn, content: &Content, oob: &[u8]);
    /// [`write_page`](Self::write_page) taking the content (a store that keeps buffers can
    /// keep this one instead of a copy).
    fn write_page_owned(&mut self, ppn: Ppn, content: Content, oob: &[u8]) {
        self.write_page(ppn, &content, oob)
    }
    fn set_torn(&mut self, ppn: Ppn);
    /// Programs at `to` (erased) the data `from` (programmed) holds, with `oob` as its record:
    /// a GC copy. A tag-only store shares a metadata page's bytes between the two pages (each
    /// page reads them as programmed; neither changes them) instead of copying them.
    fn copy_page(&mut self, from: Ppn, to: Ppn, oob: &[u8]) {
        let content = self.data(from);
        self.write_page_owned(to, content, oob)
    }
    /// The design will not read `ppn`'s data again (a superseded metadata page): a tag-only
    /// store may drop the bytes it keeps for it. Full-data stores keep them (they are the image).
    fn release_bytes(&mut self, _ppn: Ppn) {}
    /// [`release_bytes`](Self::release_bytes), handing the bytes over: a tag-only store gives
    /// a metadata page's buffer as it is (a translation page rewritten elsewhere needs no
    /// copy). `None` when the store keeps no buffer for `ppn` (the caller copies the page).
    fn take_bytes(&mut self, _ppn: Ppn) -> Option<Box<[u8]>> {
        None
    }
    /// The little-endian `u32` at byte `at` of `ppn`'s data if this store keeps it in memory, for
    /// a hint that needs a value to hint further: no I/O, no counters. `None` where reading it
    /// would touch a file (and could fail).
    fn data_u32_le_in_memory(&self, _ppn: Ppn, _at: usize) -> Option<u32> {
        None
    }
    /// A hint for reading `ppn`'s data at byte `at`, one step of the chain of loads that read
    /// takes ([`DataHint`]); each step needs the one before it in the cache.
    fn prefetch_data_at(&self, _ppn: Ppn, _at: usize, _step: DataHint) {}
    /// The design's rule for keeping its OOB records in fewer bytes ([`crate::squeeze`]): a
    /// tag-only store adopts it; stores that keep whole pages keep whole records.
    fn squeeze_oob(&mut self, _rule: Arc<dyn OobSqueeze>) {}
    /// Keeps OOB records whole from now on: a later [`squeeze_oob`](Self::squeeze_oob) is
    /// ignored (copies keep the choice). For crash campaigns: their devices are small, their
    /// recoveries read every record, and each crash image would be squeezed anew by the
    /// design's recovery; reads return the same bytes either way.
    fn keep_oob_whole(&mut self) {}
    /// Faults in the memory of the per-page arrays that are still mapped lazily (the whole OOB
    /// records, unless the design squeezed them; [`resident_vec`] makes the other arrays
    /// resident as they are allocated), contents unchanged. A benchmark calls it once the
    /// design is built, so that the kernel's zeroing of that memory is charged to construction
    /// instead of to the first program of each block in its measured phase.
    fn make_resident(&mut self) {}
    /// Erases every page of the block and counts one erase cycle.
    fn erase_block(&mut self, block: BlockId);
    fn set_erase_torn(&mut self, block: BlockId);
    fn erase_torn(&self, block: BlockId) -> bool;
    /// Every block's erase count, by block number.
    fn erase_counts(&self) -> &[u32];
    fn erase_count(&self, block: BlockId) -> u32 {
        self.erase_counts()[block.0 as usize]
    }
    /// Makes everything written so far durable (file backend); a no-op in memory.
    fn sync(&mut self) -> Result<(), crate::FlashError> {
        Ok(())
    }
    /// An in-memory copy of the current contents (crash images are built from copies).
    fn snapshot(&self) -> Box<dyn Store>;
    /// The I/O error that put the store in its failed, read-only state (file backend).
    fn failure(&self) -> Option<String> {
        None
    }
    /// I/O errors so far, reads included; a read that adds one did not get its data.
    fn io_errors(&self) -> u64 {
        0
    }
    /// Heap bytes this store allocated, per structure (allocated, not necessarily resident:
    /// zeroed arrays are faulted in on first touch).
    fn memory(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }
    /// The chips' state beyond data when the media model is on ([`MediaPlane`]).
    fn media(&self) -> Option<&MediaPlane> {
        None
    }
    fn media_mut(&mut self) -> Option<&mut MediaPlane> {
        None
    }
    /// Installs the media plane of freshly manufactured chips; `false` when this store cannot
    /// keep one (a file image).
    fn set_media(&mut self, _plane: MediaPlane) -> bool {
        false
    }
}

/// Bytes `at..at + out.len()` of `content`'s page image (pages of `page_bytes`).
fn image_range(content: &Content, page_bytes: u32, at: usize, out: &mut [u8]) {
    let mut page = vec![0u8; page_bytes as usize];
    content.copy_page_into(&mut page);
    out.copy_from_slice(&page[at..at + out.len()]);
}

/// Flips one bit in the data of every programmed page whose OOB record `pick` chooses, the
/// record kept: damage the ECC did not catch, for tests of what a design's recovery reports.
/// Returns how many pages it damaged.
pub fn flip_a_data_bit(store: &mut dyn Store, pick: impl Fn(&[u8]) -> bool) -> usize {
    let mut oob = vec![0u8; store.oob_record_bytes() as usize];
    let page_bytes = store.geometry().page_bytes as usize;
    let mut damaged = 0;
    for ppn in (0..store.geometry().pages()).map(Ppn) {
        if store.page_state(ppn) != PageState::Programmed {
            continue;
        }
        store.oob(ppn, &mut oob);
        if pick(&oob) {
            let mut page = store.data(ppn).to_page_bytes(page_bytes);
            page[page_bytes / 2] ^= 1;
            store.write_page_owned(ppn, Content::Bytes(page), &oob);
            damaged += 1;
        }
    }
    damaged
}

/// The fourth value of a page's 2 state bits: programmed, with bytes rather than a tag (the
/// tag-only store's metadata pages; reads as [`PageState::Programmed`]).
const HOLDS_BYTES: u8 = 3;

/// The state of every page in 2 bits (32 pages per word): 4 MB for a 16 M-page device.
#[derive(Clone)]
struct PageStates {
    words: Vec<u64>,
}

impl PageStates {
    fn new(pages: usize) -> PageStates {
        PageStates {
            words: resident_vec(pages.div_ceil(32), 0),
        }
    }
    fn get(&self, ppn: Ppn) -> PageState {
        match self.raw(ppn) {
            HOLDS_BYTES => PageState::Programmed,
            raw => PageState::from_u8(raw),
        }
    }
    fn set(&mut self, ppn: Ppn, state: PageState) {
        self.set_raw(ppn, state as u8);
    }
    /// The 2 bits of a page: a [`PageState`], or [`HOLDS_BYTES`].
    fn raw(&self, ppn: Ppn) -> u8 {
        let i = ppn.0 as usize;
        (self.words[i / 32] >> (2 * (i % 32)) & 3) as u8
    }
    fn set_raw(&mut self, ppn: Ppn, raw: u8) {
        let i = ppn.0 as usize;
        let shift = 2 * (i % 32);
        let word = &mut self.words[i / 32];
        *word = *word & !(3 << shift) | (raw as u64) << shift;
    }
    /// [`Store::programmed_run`] from the 2-bit states.
    fn programmed_run(&self, first: Ppn, max: u32) -> u32 {
        (0..max)
            .take_while(|&k| {
                let raw = self.raw(Ppn(first.0 + k));
                raw == PageState::Programmed as u8 || raw == HOLDS_BYTES
            })
            .count() as u32
    }
    /// Pages of `range` that are not erased, found a word (32 pages) at a time.
    fn not_erased(&self, range: std::ops::Range<usize>) -> impl Iterator<Item = usize> + '_ {
        let mut i = range.start;
        std::iter::from_fn(move || {
            while i < range.end {
                if i.is_multiple_of(32) && i + 32 <= range.end && self.words[i / 32] == 0 {
                    i += 32;
                    continue;
                }
                let at = i;
                i += 1;
                if self.raw(Ppn(at as u32)) != PageState::Erased as u8 {
                    return Some(at);
                }
            }
            None
        })
    }
    /// Marks pages `range` erased.
    fn erase(&mut self, range: std::ops::Range<usize>) {
        for i in range {
            self.set(Ppn(i as u32), PageState::Erased);
        }
    }
}

/// Shared per-page and per-block bookkeeping of the in-memory stores.
#[derive(Clone)]
struct Common {
    geometry: Geometry,
    oob_record_bytes: u32,
    states: PageStates,
    oob: Vec<u8>,
    erase_counts: Vec<u32>,
    erase_torn: Vec<bool>,
    /// The chips' state beyond data, when the media model is on.
    media: Option<Box<MediaPlane>>,
}

impl Common {
    fn new(geometry: &Geometry, oob_record_bytes: u32) -> Self {
        let pages = geometry.pages() as usize;
        Common {
            geometry: geometry.clone(),
            oob_record_bytes,
            states: PageStates::new(pages),
            oob: vec![0; pages * oob_record_bytes as usize],
            erase_counts: vec![0; geometry.blocks() as usize],
            erase_torn: vec![false; geometry.blocks() as usize],
            media: None,
        }
    }
    fn oob_range(&self, ppn: Ppn) -> std::ops::Range<usize> {
        let r = self.oob_record_bytes as usize;
        ppn.0 as usize * r..(ppn.0 as usize + 1) * r
    }
    fn copy_oob(&self, ppn: Ppn, out: &mut [u8]) {
        copy_padded(&self.oob[self.oob_range(ppn)], out);
    }
    fn put_oob(&mut self, ppn: Ppn, oob: &[u8]) {
        let range = self.oob_range(ppn);
        copy_padded(oob, &mut self.oob[range]);
    }
    fn make_resident(&mut self) {
        fault_in(&mut self.oob);
    }
    fn memory(&self) -> Vec<(&'static str, u64)> {
        let mut m = vec![
            ("page_state", vec_bytes(&self.states.words)),
            ("oob_records", vec_bytes(&self.oob)),
            (
                "block_counters",
                vec_bytes(&self.erase_counts) + vec_bytes(&self.erase_torn),
            ),
        ];
        if let Some(plane) = &self.media {
            m.push(("media_plane", plane.memory()));
        }
        m
    }
    /// [`Store::written_extent`] from the packed states.
    fn written_extent(&self, block: BlockId) -> u32 {
        let ppb = self.geometry.pages_per_block as usize;
        let first = block.0 as usize * ppb;
        self.states
            .not_erased(first..first + ppb)
            .last()
            .map_or(0, |p| (p - first + 1) as u32)
    }
    fn erase(&mut self, block: BlockId) -> std::ops::Range<usize> {
        let ppb = self.geometry.pages_per_block as usize;
        let first = block.0 as usize * ppb;
        self.states.erase(first..first + ppb);
        self.erase_counts[block.0 as usize] += 1;
        self.erase_torn[block.0 as usize] = false;
        first..first + ppb
    }
}

/// A metadata page's bytes without their trailing zeros (a reservation or checkpoint page is
/// mostly padding), and the length it was programmed with: it reads back whole.
#[derive(Clone, Default)]
struct KeptBytes {
    len: u32,
    kept: Box<[u8]>,
}

/// Length of `bytes` without its trailing zero bytes. Whole 32-byte blocks are tested at once
/// (a metadata page is often mostly padding: Möbius's inodes hold a few items in 4 KB, and a
/// byte-by-byte scan of them was 16 % of its txmix run).
fn used_len(bytes: &[u8]) -> usize {
    const BLOCK: usize = 32;
    let mut end = bytes.len();
    while end >= BLOCK && bytes[end - BLOCK..end].iter().fold(0u8, |a, &b| a | b) == 0 {
        end -= BLOCK;
    }
    bytes[..end]
        .iter()
        .rposition(|&b| b != 0)
        .map_or(0, |i| i + 1)
}

impl KeptBytes {
    /// The bytes programmed into a page of `page_bytes`: they read back as the whole page, as
    /// the file and full-page stores give them (shorter contents padded with zeros, longer ones
    /// cut). Before, a tag-only device gave back exactly what was programmed, so a design that
    /// checked a short record's CRC over the bytes it read passed every soak and failed on a
    /// file image (Atomic-Write's and LightTx's zone record, found by the PostgreSQL trials).
    fn new(bytes: Box<[u8]>, page_bytes: usize) -> KeptBytes {
        let mut bytes = bytes;
        if bytes.len() > page_bytes {
            bytes = bytes[..page_bytes].into();
        }
        let used = used_len(&bytes);
        let len = page_bytes as u32;
        // A page trimmed by little keeps its buffer (no copy: a DFTL write-back hands the same
        // buffer from page to page; a copy into fresh memory cost it ~15 % of a GC-heavy run);
        // one trimmed by more is copied into a buffer of its own size (kept in place, such
        // buffers kept their whole allocation: OPTR's peak RSS grew 88 MB that way).
        let kept = if bytes.len() - used <= bytes.len() / 8 {
            let mut kept = bytes.into_vec();
            kept.truncate(used);
            kept.into_boxed_slice()
        } else {
            bytes[..used].into()
        };
        KeptBytes { len, kept }
    }
    /// The bytes as programmed, reusing the kept buffer.
    fn into_whole(self) -> Box<[u8]> {
        let mut page = self.kept.into_vec();
        // Exactly the padding: the allocator then grows the buffer where it stands.
        page.reserve_exact(self.len as usize - page.len());
        page.resize(self.len as usize, 0);
        page.into_boxed_slice()
    }
    /// The bytes as programmed.
    fn whole(&self) -> Box<[u8]> {
        let mut page = Vec::with_capacity(self.len as usize);
        page.extend_from_slice(&self.kept);
        page.resize(self.len as usize, 0);
        page.into_boxed_slice()
    }
    /// The little-endian `u32` at bytes `at..at + 4`, zeros past what was programmed.
    fn u32_le(&self, at: usize) -> u32 {
        match self.kept.get(at..at + 4) {
            Some(entry) => u32::from_le_bytes(entry.try_into().expect("4 bytes")),
            None => {
                let mut entry = [0u8; 4];
                self.copy_range(at, &mut entry);
                u32::from_le_bytes(entry)
            }
        }
    }
    /// Bytes `at..at + out.len()` of the page, zeros past what was programmed.
    fn copy_range(&self, at: usize, out: &mut [u8]) {
        copy_padded(self.kept.get(at..).unwrap_or(&[]), out);
    }
}

/// The tag-only store's pages of bytes, in numbered slots. A page's slot number lives in its tag
/// LPN entry (unused by a page of bytes) and its state says it holds bytes ([`HOLDS_BYTES`]),
/// so reaching a metadata page searches no table (DFTL reads one at almost every request of a
/// 1 TB device). A GC copy of a page of bytes holds the same slot as the page it copies
/// ([`Store::copy_page`]): bytes once programmed never change, so the two pages share them
/// until one is erased (a 4 KB copy from cold memory per translation page moved was ~9 % of a
/// 256 GB DFTL run).
#[derive(Clone, Default)]
struct ByteSlots {
    slots: Vec<Slot>,
    free: Vec<u32>,
}

#[derive(Clone, Default)]
struct Slot {
    bytes: KeptBytes,
    /// Pages holding this slot (0 when free).
    holders: u32,
    /// The bytes start as a tag's image does ([`ContentTag::may_be_image`]), noted when they
    /// are put (in the cache then): a copy need not read them to know they are no tag.
    may_be_tag: bool,
}

impl ByteSlots {
    fn put(&mut self, bytes: KeptBytes) -> u32 {
        let may_be_tag = ContentTag::may_be_image(&bytes.kept);
        let slot = Slot {
            bytes,
            holders: 1,
            may_be_tag,
        };
        match self.free.pop() {
            Some(free) => {
                self.slots[free as usize] = slot;
                free
            }
            None => {
                self.slots.push(slot);
                (self.slots.len() - 1) as u32
            }
        }
    }
    fn get(&self, slot: u32) -> &KeptBytes {
        &self.slots[slot as usize].bytes
    }
    fn may_be_tag(&self, slot: u32) -> bool {
        self.slots[slot as usize].may_be_tag
    }
    /// One more page holds `slot`.
    fn share(&mut self, slot: u32) {
        self.slots[slot as usize].holders += 1;
    }
    /// A page lets go of `slot`, handing its bytes over: the buffer itself when no other page
    /// holds it (the slot is then free), else a copy.
    fn take(&mut self, slot: u32) -> KeptBytes {
        let s = &mut self.slots[slot as usize];
        debug_assert!(s.holders > 0, "slot {slot} is free");
        s.holders -= 1;
        if s.holders > 0 {
            return s.bytes.clone();
        }
        self.free.push(slot);
        std::mem::take(&mut s.bytes)
    }
    /// A page lets go of `slot`; its bytes are dropped when no other page holds it.
    fn release(&mut self, slot: u32) {
        let s = &mut self.slots[slot as usize];
        debug_assert!(s.holders > 0, "slot {slot} is free");
        s.holders -= 1;
        if s.holders == 0 {
            s.bytes = KeptBytes::default();
            self.free.push(slot);
        }
    }
    /// Heap bytes: the kept bytes (once per slot, however many pages share it), the slots and
    /// the free list.
    fn memory(&self) -> u64 {
        let kept: u64 = self.slots.iter().map(|s| s.bytes.kept.len() as u64).sum();
        kept + vec_bytes(&self.slots) + vec_bytes(&self.free)
    }
}

/// Tag-only store for paper-scale simulation: a host page costs an 8-byte tag.
#[derive(Clone)]
pub struct TagStore {
    common: Common,
    tag_lpn: Vec<u32>,
    /// Low 32 bits of each page's write number.
    tag_write: Vec<u32>,
    /// High 32 bits of the write numbers that have them, by PPN: empty until a run has made
    /// 2^32 page writes, so a tag costs 8 bytes instead of 12 and stays exact beyond.
    tag_write_high: FxHashMap<u32, u32>,
    /// Pages written with real bytes (metadata pages); a page's slot is its `tag_lpn` entry.
    bytes: ByteSlots,
    /// OOB records as per-page offsets, once the design has installed its rule (the records
    /// then no longer live in `common.oob`).
    squeezed: Option<SqueezedOob>,
    /// Records stay whole whatever rule the design asks for ([`Store::keep_oob_whole`]).
    whole_oob: bool,
}

impl TagStore {
    pub fn new(geometry: &Geometry, oob_record_bytes: u32) -> Self {
        let pages = geometry.pages() as usize;
        TagStore {
            common: Common::new(geometry, oob_record_bytes),
            tag_lpn: resident_vec(pages, 0),
            tag_write: resident_vec(pages, 0),
            tag_write_high: FxHashMap::default(),
            bytes: ByteSlots::default(),
            squeezed: None,
            whole_oob: false,
        }
    }

    /// The tag a page holds, or `None` when it holds bytes.
    fn tag_of(&self, ppn: Ppn) -> Option<ContentTag> {
        (self.kept_bytes(ppn).is_none()).then(|| self.tag_in_arrays(ppn))
    }

    /// The bytes a page holds, if it holds bytes.
    fn kept_bytes(&self, ppn: Ppn) -> Option<&KeptBytes> {
        (self.common.states.raw(ppn) == HOLDS_BYTES)
            .then(|| self.bytes.get(self.tag_lpn[ppn.0 as usize]))
    }

    /// Drops a page's bytes, if it holds any (it reads as a meaningless tag until erased).
    fn drop_bytes(&mut self, ppn: Ppn) {
        if self.common.states.raw(ppn) == HOLDS_BYTES {
            self.bytes.release(self.tag_lpn[ppn.0 as usize]);
            self.common.states.set(ppn, PageState::Programmed);
        }
    }
    /// Takes a page's bytes out, if it holds any (it reads as a meaningless tag until erased).
    fn take_kept_bytes(&mut self, ppn: Ppn) -> Option<KeptBytes> {
        if self.common.states.raw(ppn) != HOLDS_BYTES {
            return None;
        }
        let kept = self.bytes.take(self.tag_lpn[ppn.0 as usize]);
        self.common.states.set(ppn, PageState::Programmed);
        Some(kept)
    }

    /// Keeps a page's OOB record: squeezed by the design's rule (which may rebuild it from the
    /// page's tag) or whole.
    fn put_record(&mut self, ppn: Ppn, oob: &[u8], tag: impl FnOnce() -> Option<ContentTag>) {
        if let Some(squeezed) = &mut self.squeezed {
            let mut record = [0u8; MAX_SQUEEZED_RECORD];
            let record = &mut record[..self.common.oob_record_bytes as usize];
            copy_padded(oob, record);
            squeezed.put(ppn, record, tag());
        } else {
            self.common.put_oob(ppn, oob);
        }
    }

    /// The tag arrays' entry for a page (its tag, if it was last programmed with one).
    fn tag_in_arrays(&self, ppn: Ppn) -> ContentTag {
        let high = if self.tag_write_high.is_empty() {
            0
        } else {
            self.tag_write_high.get(&ppn.0).copied().unwrap_or(0)
        };
        ContentTag {
            lpn: self.tag_lpn[ppn.0 as usize],
            write: (high as u64) << 32 | self.tag_write[ppn.0 as usize] as u64,
        }
    }

    /// The squeezed records, once the design has installed its rule.
    pub fn squeezed(&self) -> Option<&SqueezedOob> {
        self.squeezed.as_ref()
    }
}

impl Store for TagStore {
    fn geometry(&self) -> &Geometry {
        &self.common.geometry
    }
    fn make_resident(&mut self) {
        self.common.make_resident();
    }
    fn oob_record_bytes(&self) -> u32 {
        self.common.oob_record_bytes
    }
    fn tag_only(&self) -> bool {
        true
    }
    fn page_state(&self, ppn: Ppn) -> PageState {
        self.common.states.get(ppn)
    }
    fn programmed_run(&self, first: Ppn, max: u32) -> u32 {
        self.common.states.programmed_run(first, max)
    }
    fn written_extent(&self, block: BlockId) -> u32 {
        self.common.written_extent(block)
    }
    fn data(&self, ppn: Ppn) -> Content {
        match self.tag_of(ppn) {
            Some(tag) => Content::Tag(tag),
            None => Content::Bytes(self.kept_bytes(ppn).expect("a page of bytes").whole()),
        }
    }
    fn data_u32_le(&self, ppn: Ppn, at: usize) -> u32 {
        match self.kept_bytes(ppn) {
            Some(b) => b.u32_le(at),
            None => {
                let mut entry = [0u8; 4];
                self.data_bytes(ppn, at, &mut entry);
                u32::from_le_bytes(entry)
            }
        }
    }
    fn data_u32_le_in_memory(&self, ppn: Ppn, at: usize) -> Option<u32> {
        Some(self.data_u32_le(ppn, at))
    }
    fn data_bytes(&self, ppn: Ppn, at: usize, out: &mut [u8]) {
        match self.kept_bytes(ppn) {
            // No copy of the page (a metadata page read entry by entry); bytes past what was
            // programmed read as zeros, as in `Content::copy_page_into`.
            Some(b) => b.copy_range(at, out),
            None => image_range(
                &Content::Tag(self.tag_in_arrays(ppn)),
                self.common.geometry.page_bytes,
                at,
                out,
            ),
        }
    }
    fn oob(&self, ppn: Ppn, out: &mut [u8]) {
        match &self.squeezed {
            Some(squeezed) => squeezed.get(ppn, || self.tag_in_arrays(ppn), out),
            None => self.common.copy_oob(ppn, out),
        }
    }
    fn write_page(&mut self, ppn: Ppn, content: &Content, oob: &[u8]) {
        // A tag is copied whole either way; bytes are copied once, here.
        self.write_page_owned(ppn, content.clone(), oob)
    }
    fn write_page_owned(&mut self, ppn: Ppn, content: Content, oob: &[u8]) {
        let i = ppn.0 as usize;
        self.put_record(ppn, oob, || content.tag());
        match content {
            Content::Tag(t) => {
                self.tag_lpn[i] = t.lpn;
                self.tag_write[i] = t.write as u32;
                let high = (t.write >> 32) as u32;
                if high != 0 {
                    self.tag_write_high.insert(ppn.0, high);
                } else if !self.tag_write_high.is_empty() {
                    self.tag_write_high.remove(&ppn.0);
                }
                // Only an erased page is programmed, and an erase drops the page's bytes.
                debug_assert!(self.kept_bytes(ppn).is_none(), "{ppn} still has bytes");
                self.common.states.set(ppn, PageState::Programmed);
            }
            Content::Bytes(b) => {
                let page_bytes = self.common.geometry.page_bytes as usize;
                self.tag_lpn[i] = self.bytes.put(KeptBytes::new(b, page_bytes));
                self.common.states.set_raw(ppn, HOLDS_BYTES);
            }
        }
    }
    fn copy_page(&mut self, from: Ppn, to: Ppn, oob: &[u8]) {
        let Some(kept) = self.kept_bytes(from) else {
            let tag = self.tag_in_arrays(from);
            return self.write_page_owned(to, Content::Tag(tag), oob);
        };
        // The tag the bytes carry, as `write_page_owned` would find it: only a page that
        // starts as a tag's image can be one.
        let slot = self.tag_lpn[from.0 as usize];
        let tag = self
            .bytes
            .may_be_tag(slot)
            .then(|| ContentTag::decode(&kept.whole()).ok())
            .flatten();
        self.put_record(to, oob, || tag);
        debug_assert!(self.kept_bytes(to).is_none(), "{to} still has bytes");
        self.bytes.share(slot);
        self.tag_lpn[to.0 as usize] = slot;
        self.common.states.set_raw(to, HOLDS_BYTES);
    }
    fn release_bytes(&mut self, ppn: Ppn) {
        self.drop_bytes(ppn);
    }
    fn take_bytes(&mut self, ppn: Ppn) -> Option<Box<[u8]>> {
        self.take_kept_bytes(ppn).map(KeptBytes::into_whole)
    }
    fn prefetch_data_at(&self, ppn: Ppn, at: usize, step: DataHint) {
        let i = ppn.0 as usize;
        let (Some(word), Some(entry)) = (self.common.states.words.get(i / 32), self.tag_lpn.get(i))
        else {
            return;
        };
        // Each step reads only what the step before it asked for.
        match step {
            DataHint::PageEntry => {
                crate::prefetch::read(word);
                crate::prefetch::read(entry);
            }
            DataHint::KeptBytes => {
                if let Some(kept) = self.kept_bytes(ppn) {
                    crate::prefetch::read(kept);
                }
            }
            DataHint::Bytes => {
                if let Some(byte) = self.kept_bytes(ppn).and_then(|kept| kept.kept.get(at)) {
                    crate::prefetch::read(byte);
                }
            }
        }
    }

    /// Keeps OOB records as `rule` squeezes them from now on ([`crate::squeeze`]), converting the
    /// records already on the device; a no-op if a rule of the same name is installed, or if the
    /// records are longer than a squeezed store rebuilds ([`MAX_SQUEEZED_RECORD`]: kept whole).
    fn squeeze_oob(&mut self, rule: Arc<dyn OobSqueeze>) {
        let same_rule = self.squeezed.as_ref().map(|s| s.rule_name()) == Some(rule.name());
        if same_rule
            || self.whole_oob
            || self.common.oob_record_bytes as usize > MAX_SQUEEZED_RECORD
        {
            return;
        }
        let record_bytes = self.common.oob_record_bytes;
        let mut squeezed = SqueezedOob::new(rule, &self.common.geometry, record_bytes);
        let mut record = vec![0u8; record_bytes as usize];
        let pages = 0..self.common.geometry.pages() as usize;
        for p in self.common.states.not_erased(pages) {
            let ppn = Ppn(p as u32);
            self.oob(ppn, &mut record);
            squeezed.put(ppn, &record, self.tag_of(ppn));
        }
        self.squeezed = Some(squeezed);
        self.common.oob = Vec::new();
    }

    fn keep_oob_whole(&mut self) {
        self.whole_oob = true;
    }

    fn set_torn(&mut self, ppn: Ppn) {
        self.drop_bytes(ppn);
        self.common.states.set(ppn, PageState::Torn);
    }
    fn erase_block(&mut self, block: BlockId) {
        let first = self.common.geometry.first_page(block).0;
        for p in first..first + self.common.geometry.pages_per_block {
            self.drop_bytes(Ppn(p));
        }
        let range = self.common.erase(block);
        if let Some(squeezed) = &mut self.squeezed {
            squeezed.erase(block);
        }
        if !self.tag_write_high.is_empty() {
            for p in range {
                self.tag_write_high.remove(&(p as u32));
            }
        }
    }
    fn set_erase_torn(&mut self, block: BlockId) {
        self.common.erase_torn[block.0 as usize] = true;
    }
    fn erase_torn(&self, block: BlockId) -> bool {
        self.common.erase_torn[block.0 as usize]
    }
    fn erase_counts(&self) -> &[u32] {
        &self.common.erase_counts
    }
    fn media(&self) -> Option<&MediaPlane> {
        self.common.media.as_deref()
    }
    fn media_mut(&mut self) -> Option<&mut MediaPlane> {
        self.common.media.as_deref_mut()
    }
    fn set_media(&mut self, plane: MediaPlane) -> bool {
        self.common.media = Some(Box::new(plane));
        true
    }
    fn snapshot(&self) -> Box<dyn Store> {
        Box::new(self.clone())
    }
    fn memory(&self) -> Vec<(&'static str, u64)> {
        let mut m = self.common.memory();
        if let Some(squeezed) = &self.squeezed {
            m.retain(|(name, _)| *name != "oob_records");
            m.push(("oob_records", squeezed.memory()));
        }
        let high = self.tag_write_high.capacity() as u64 * 9;
        m.push((
            "content_tags",
            vec_bytes(&self.tag_lpn) + vec_bytes(&self.tag_write) + high,
        ));
        m.push(("metadata_pages", self.bytes.memory()));
        m
    }
}

/// Full-data store in memory: every programmed page keeps its bytes.
///
/// Page buffers live in slabs of [`SLAB_BYTES`] (consecutive PPNs), each allocated zeroed on the
/// first program of one of its pages and kept from then on: the page state, not the buffer,
/// says whether a page's bytes are live, and a later program copies into the same place. A
/// log-structured FTL programs every physical page of the device before it reuses one, so a
/// busy device (an NBD export under fio) would otherwise pay an allocation, heap growth and page
/// faults per page program, then a free at the erase; with slabs it pays one zeroed allocation
/// (its pages faulted in lazily) per 2 MiB, and nothing once the device has been written over.
/// Untouched parts of the device cost no memory; snapshots copy only allocated slabs.
#[derive(Clone)]
pub struct MemStore {
    common: Common,
    page_bytes: usize,
    pages_per_slab: usize,
    slabs: Vec<Option<Box<[u8]>>>,
}

impl MemStore {
    pub fn new(geometry: &Geometry, oob_record_bytes: u32) -> Self {
        let page_bytes = geometry.page_bytes as usize;
        assert!(
            (1..=SLAB_BYTES).contains(&page_bytes),
            "page size {page_bytes} does not fit a slab"
        );
        let pages_per_slab = SLAB_BYTES / page_bytes;
        let slabs = (geometry.pages() as usize).div_ceil(pages_per_slab);
        MemStore {
            common: Common::new(geometry, oob_record_bytes),
            page_bytes,
            pages_per_slab,
            slabs: vec![None; slabs],
        }
    }

    /// Sets a block's erase count (used when copying another store).
    pub fn set_erase_count(&mut self, block: BlockId, count: u32) {
        self.common.erase_counts[block.0 as usize] = count;
    }

    /// Bytes of page buffers allocated so far (slabs some page of which was programmed).
    pub fn allocated_bytes(&self) -> u64 {
        self.slabs
            .iter()
            .flatten()
            .map(|slab| slab.len() as u64)
            .sum()
    }

    fn slot(&self, ppn: Ppn) -> (usize, std::ops::Range<usize>) {
        let i = ppn.0 as usize;
        let at = (i % self.pages_per_slab) * self.page_bytes;
        (i / self.pages_per_slab, at..at + self.page_bytes)
    }

    /// The buffer of a page, if its slab is allocated (its bytes are live only if programmed).
    fn buffer(&self, ppn: Ppn) -> Option<&[u8]> {
        let (slab, range) = self.slot(ppn);
        self.slabs[slab].as_deref().map(|bytes| &bytes[range])
    }

    /// The buffer of a page, allocating its slab (zeroed) on first use.
    fn buffer_mut(&mut self, ppn: Ppn) -> &mut [u8] {
        let (slab, range) = self.slot(ppn);
        let zeroed = || vec![0u8; SLAB_BYTES].into_boxed_slice();
        &mut self.slabs[slab].get_or_insert_with(zeroed)[range]
    }
}

impl Store for MemStore {
    fn geometry(&self) -> &Geometry {
        &self.common.geometry
    }
    fn make_resident(&mut self) {
        self.common.make_resident();
    }
    fn oob_record_bytes(&self) -> u32 {
        self.common.oob_record_bytes
    }
    fn tag_only(&self) -> bool {
        false
    }
    fn page_state(&self, ppn: Ppn) -> PageState {
        self.common.states.get(ppn)
    }
    fn programmed_run(&self, first: Ppn, max: u32) -> u32 {
        self.common.states.programmed_run(first, max)
    }
    fn written_extent(&self, block: BlockId) -> u32 {
        self.common.written_extent(block)
    }
    fn data(&self, ppn: Ppn) -> Content {
        let page = match (self.buffer(ppn), self.page_state(ppn)) {
            (Some(bytes), PageState::Programmed) => Box::from(bytes),
            _ => vec![0u8; self.page_bytes].into_boxed_slice(),
        };
        Content::Bytes(page)
    }
    fn data_bytes(&self, ppn: Ppn, at: usize, out: &mut [u8]) {
        match (self.buffer(ppn), self.page_state(ppn)) {
            (Some(bytes), PageState::Programmed) => out.copy_from_slice(&bytes[at..at + out.len()]),
            _ => out.fill(0),
        }
    }
    fn data_u32_le_in_memory(&self, ppn: Ppn, at: usize) -> Option<u32> {
        Some(self.data_u32_le(ppn, at))
    }
    fn oob(&self, ppn: Ppn, out: &mut [u8]) {
        self.common.copy_oob(ppn, out)
    }
    fn write_page(&mut self, ppn: Ppn, content: &Content, oob: &[u8]) {
        content.copy_page_into(self.buffer_mut(ppn));
        self.common.put_oob(ppn, oob);
        self.common.states.set(ppn, PageState::Programmed);
    }
    fn set_torn(&mut self, ppn: Ppn) {
        // The buffer stays for the page's next program; a torn page's bytes are never read.
        self.common.states.set(ppn, PageState::Torn);
    }
    fn erase_block(&mut self, block: BlockId) {
        // Buffers stay allocated: the erased state hides their old bytes (see the type's doc).
        self.common.erase(block);
    }
    fn set_erase_torn(&mut self, block: BlockId) {
        self.common.erase_torn[block.0 as usize] = true;
    }
    fn erase_torn(&self, block: BlockId) -> bool {
        self.common.erase_torn[block.0 as usize]
    }
    fn erase_counts(&self) -> &[u32] {
        &self.common.erase_counts
    }
    fn media(&self) -> Option<&MediaPlane> {
        self.common.media.as_deref()
    }
    fn media_mut(&mut self) -> Option<&mut MediaPlane> {
        self.common.media.as_deref_mut()
    }
    fn set_media(&mut self, plane: MediaPlane) -> bool {
        self.common.media = Some(Box::new(plane));
        true
    }
    fn snapshot(&self) -> Box<dyn Store> {
        Box::new(self.clone())
    }
    fn memory(&self) -> Vec<(&'static str, u64)> {
        let mut m = self.common.memory();
        m.push((
            "page_slabs",
            self.allocated_bytes() + vec_bytes(&self.slabs),
        ));
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DeviceConfig;

    fn mem_store() -> MemStore {
        let geometry = DeviceConfig::preset("small").unwrap().geometry;
        MemStore::new(&geometry, 16)
    }

    /// Faulting the records in rewrites one byte of every memory page with what it holds: the
    /// records, including those on the bytes it writes, read back unchanged.
    #[test]
    fn make_resident_leaves_every_record_as_it_was() {
        let geometry = DeviceConfig::preset("small").unwrap().geometry;
        let stores: Vec<Box<dyn Store>> = vec![
            Box::new(TagStore::new(&geometry, 16)),
            Box::new(MemStore::new(&geometry, 16)),
        ];
        // Pages spread over the device, and pages 0, 256 and 512, whose 16-byte records start
        // 4 KB pages of the array: the bytes the touch rewrites.
        let pages: Vec<u32> = (0..geometry.pages())
            .step_by(97)
            .chain([0, 256, 512])
            .collect();
        let record = |p: u32| -> Vec<u8> { (0..16).map(|i| (p as u8) ^ (i * 31) | 1).collect() };
        for mut store in stores {
            for &p in &pages {
                let tag = ContentTag {
                    lpn: p,
                    write: p as u64 + 1,
                };
                store.write_page(Ppn(p), &Content::Tag(tag), &record(p));
            }
            store.make_resident();
            for &p in &pages {
                let mut oob = [0u8; 16];
                store.oob(Ppn(p), &mut oob);
                assert_eq!(oob.to_vec(), record(p), "page {p}");
                assert_eq!(store.page_state(Ppn(p)), PageState::Programmed);
            }
            let mut oob = [0xffu8; 16];
            store.oob(Ppn(1), &mut oob);
            assert_eq!(oob, [0u8; 16], "an unwritten page's record stays zero");
        }
    }

    #[test]
    fn used_len_matches_a_byte_by_byte_scan() {
        let plain = |b: &[u8]| b.iter().rposition(|&x| x != 0).map_or(0, |i| i + 1);
        let mut rng = 0x9e37_79b9_u64;
        for len in [0usize, 1, 31, 32, 33, 63, 64, 65, 100, 4096] {
            for _ in 0..64 {
                let mut b = vec![0u8; len];
                // A few non-zero bytes anywhere, sometimes none.
                for _ in 0..(rng % 4) {
                    rng = rng
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    if len > 0 {
                        b[(rng >> 33) as usize % len] = (rng >> 20) as u8 | 1;
                    }
                }
                rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1);
                assert_eq!(used_len(&b), plain(&b), "len {len}: {b:?}");
            }
        }
    }

    #[test]
    fn mem_store_reuses_a_page_buffer_without_leaking_old_bytes() {
        let mut store = mem_store();
        let page_bytes = store.geometry().page_bytes as usize;
        let ppb = store.geometry().pages_per_block;
        let ppn = Ppn(3);
        let block = store.geometry().block_of(ppn);
        store.write_page(
            ppn,
            &Content::Bytes(vec![0xaa; page_bytes].into()),
            &[1; 16],
        );
        store.erase_block(block);
        assert_eq!(store.page_state(ppn), PageState::Erased);
        assert_eq!(store.erase_count(block), 1);
        // An erased page reads as zeros even though its buffer is kept.
        assert_eq!(
            store.data(ppn).as_bytes().unwrap(),
            vec![0u8; page_bytes].as_slice()
        );
        // A short program into the reused buffer is zero-padded, not mixed with the old bytes.
        store.write_page(ppn, &Content::Bytes(vec![0x55; 100].into()), &[2; 4]);
        let data = store.data(ppn);
        let bytes = data.as_bytes().unwrap();
        assert!(bytes[..100].iter().all(|b| *b == 0x55));
        assert!(bytes[100..].iter().all(|b| *b == 0));
        let mut oob = [0u8; 16];
        store.oob(ppn, &mut oob);
        assert_eq!(oob, [2, 2, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        // A tag is expanded into the reused buffer.
        let tag = ContentTag { lpn: 9, write: 41 };
        let other = Ppn(ppn.0 + ppb);
        store.write_page(other, &Content::Bytes(vec![7; page_bytes].into()), &[]);
        store.erase_block(store.geometry().block_of(other));
        store.write_page(other, &Content::Tag(tag), &[]);
        assert_eq!(store.data(other).tag(), Some(tag));
    }

    #[test]
    fn mem_store_allocates_slabs_lazily_and_snapshots_copy_them() {
        let mut store = mem_store();
        assert_eq!(store.allocated_bytes(), 0);
        let page_bytes = store.geometry().page_bytes as usize;
        let (kept, erased, torn) = (Ppn(0), Ppn(store.geometry().pages_per_block), Ppn(1));
        for ppn in [kept, erased, torn] {
            store.write_page(ppn, &Content::Bytes(vec![0x11; page_bytes].into()), &[]);
        }
        let one_slab = store.allocated_bytes();
        assert!(one_slab > 0 && one_slab <= SLAB_BYTES as u64);
        // A page far away gets its own slab; the pages in between cost nothing.
        let far = Ppn(store.geometry().pages() - 1);
        store.write_page(far, &Content::Bytes(vec![0x22; page_bytes].into()), &[]);
        assert_eq!(store.allocated_bytes(), 2 * one_slab);
        store.erase_block(store.geometry().block_of(erased));
        store.set_torn(torn);
        let snapshot = store.clone();
        assert_eq!(snapshot.allocated_bytes(), store.allocated_bytes());
        assert_eq!(snapshot.data(kept), store.data(kept));
        assert_eq!(snapshot.data(far).as_bytes().unwrap()[0], 0x22);
        assert_eq!(snapshot.page_state(erased), PageState::Erased);
        assert_eq!(
            snapshot.data(erased).as_bytes().unwrap(),
            vec![0u8; page_bytes].as_slice()
        );
        assert_eq!(snapshot.page_state(torn), PageState::Torn);
        // Writing the copy leaves the original alone.
        let mut copy = snapshot;
        copy.erase_block(store.geometry().block_of(kept));
        copy.write_page(kept, &Content::Bytes(vec![0x33; page_bytes].into()), &[]);
        assert_eq!(store.data(kept).as_bytes().unwrap()[0], 0x11);
    }

    /// A metadata page is kept without its trailing zeros and reads back as the whole page, as
    /// the full-page store gives it: by range, all zeros included, and a short program padded
    /// to the page (a design that read back exactly what it programmed passed every tag-only
    /// soak and failed on a file image).
    #[test]
    fn metadata_pages_read_back_whole_without_their_padding() {
        let geometry = DeviceConfig::preset("small").unwrap().geometry;
        let page_bytes = geometry.page_bytes as usize;
        let mut store = TagStore::new(&geometry, 16);
        let mut whole_pages = MemStore::new(&geometry, 16);
        let mut padded = vec![0u8; page_bytes];
        padded[..5].copy_from_slice(&[1, 0, 2, 0, 3]);
        let pages: [Vec<u8>; 4] = [
            padded.clone(),
            vec![0u8; page_bytes],
            vec![9, 0, 0],
            (0..page_bytes).map(|i| (i % 251) as u8 + 1).collect(),
        ];
        for (p, bytes) in pages.iter().enumerate() {
            let content = Content::Bytes(bytes.clone().into());
            store.write_page(Ppn(p as u32), &content, &[]);
            whole_pages.write_page(Ppn(p as u32), &content, &[]);
        }
        let pages = pages.map(|mut bytes| {
            bytes.resize(page_bytes, 0);
            bytes
        });
        for (p, bytes) in pages.iter().enumerate() {
            let ppn = Ppn(p as u32);
            assert_eq!(
                store.data(ppn).as_bytes().unwrap(),
                bytes.as_slice(),
                "page {p}"
            );
            assert_eq!(store.data(ppn), whole_pages.data(ppn), "page {p}");
            let mut range = [7u8; 6];
            store.data_bytes(ppn, 2, &mut range[..bytes.len().min(8) - 2]);
            assert_eq!(
                range[..bytes.len().min(8) - 2],
                bytes[2..bytes.len().min(8)]
            );
        }
        let kept = store.kept_bytes(Ppn(0)).unwrap().kept.len();
        assert_eq!(kept, 5, "the padding is not kept");
        assert_eq!(store.kept_bytes(Ppn(1)).unwrap().kept.len(), 0);
        // Taking a page hands over the whole page, padding restored, and frees its
        // slot for the next page of bytes; the page then holds no bytes (as when released).
        for (p, bytes) in pages.iter().enumerate() {
            let ppn = Ppn(p as u32);
            assert_eq!(store.take_bytes(ppn).as_deref(), Some(bytes.as_slice()));
            assert!(store.kept_bytes(ppn).is_none() && store.take_bytes(ppn).is_none());
            assert_eq!(store.page_state(ppn), PageState::Programmed);
        }
        assert_eq!(
            store.bytes.free.len(),
            pages.len(),
            "every slot is free again"
        );
        store.write_page(Ppn(8), &Content::Bytes(vec![4, 5].into()), &[]);
        let page = store.data(Ppn(8));
        let page = page.as_bytes().unwrap();
        assert!(
            page.len() == page_bytes && page[..2] == [4, 5] && page[2..].iter().all(|&b| b == 0)
        );
        assert_eq!(
            store.take_bytes(Ppn(9)),
            None,
            "an erased page has no bytes"
        );
    }

    /// The packed states' extent of a block and their scan of the pages not erased agree with a
    /// page-by-page look, over programs, torn pages and erases at random.
    #[test]
    fn written_extents_match_a_page_by_page_scan() {
        let geometry = DeviceConfig::preset("small").unwrap().geometry;
        let ppb = geometry.pages_per_block;
        let mut store = TagStore::new(&geometry, 16);
        let mut rng = 99u64;
        for _ in 0..3000 {
            rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1);
            let block = BlockId((rng >> 40) as u32 % 12);
            let page = (rng >> 20) as u32 % ppb;
            let ppn = geometry.ppn(block, page);
            let erased = store.page_state(ppn) == PageState::Erased;
            match rng % 7 {
                0 => store.erase_block(block),
                1 => store.set_torn(ppn),
                // A store is programmed only where the device allows: erased pages.
                _ if !erased => {}
                2 => store.write_page(ppn, &Content::Bytes(vec![1; 8].into()), &[]),
                _ => store.write_page(ppn, &Content::Tag(ContentTag { lpn: 1, write: 2 }), &[]),
            }
        }
        let naive = |b: BlockId| {
            (0..ppb)
                .rev()
                .find(|&p| store.page_state(geometry.ppn(b, p)) != PageState::Erased)
                .map_or(0, |p| p + 1)
        };
        let mut seen = 0;
        for b in 0..geometry.blocks() {
            assert_eq!(
                store.written_extent(BlockId(b)),
                naive(BlockId(b)),
                "block {b}"
            );
            seen += store.written_extent(BlockId(b));
        }
        assert!(seen > 0);
        let all = 0..geometry.pages() as usize;
        let listed: Vec<usize> = store.common.states.not_erased(all.clone()).collect();
        let expected: Vec<usize> = all
            .filter(|&p| store.page_state(Ppn(p as u32)) != PageState::Erased)
            .collect();
        assert_eq!(listed, expected);
    }

    /// A tag keeps 32 bits of its write number in the per-page array; larger write numbers
    /// (a run past 2^32 page writes) keep their high half aside and still read back exactly,
    /// until the page is programmed again or its block erased.
    #[test]
    fn write_numbers_past_32_bits_read_back_exactly() {
        let geometry = DeviceConfig::preset("small").unwrap().geometry;
        let mut store = TagStore::new(&geometry, 16);
        let tag = |lpn, write| Content::Tag(ContentTag { lpn, write });
        let big = (7u64 << 32) | 5;
        store.write_page(Ppn(0), &tag(1, big), &[]);
        store.write_page(Ppn(1), &tag(2, 5), &[]);
        assert_eq!(store.data(Ppn(0)).tag().unwrap().write, big);
        assert_eq!(store.data(Ppn(1)).tag().unwrap().write, 5);
        store.erase_block(BlockId(0));
        store.write_page(Ppn(0), &tag(1, 9), &[]);
        assert_eq!(store.data(Ppn(0)).tag().unwrap().write, 9);
        let next_block = geometry.first_page(BlockId(1));
        store.write_page(next_block, &tag(3, u64::MAX), &[]);
        assert_eq!(store.data(next_block).tag().unwrap().write, u64::MAX);
    }
}
