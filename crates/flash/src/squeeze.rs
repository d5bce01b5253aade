//! OOB records in fewer bytes on a tag-only device (issue #19: a 64 GB device's state in
//! 512 MB, about 32 bytes per page).
//!
//! A design's OOB record for a host data page mostly repeats what the page's content tag already
//! says (the LPN) or what follows from the record itself (a checksum, a constant kind byte); what
//! is left is usually one number that grows with every program, such as a sequence number. A
//! design that can say so implements [`OobSqueeze`]; the tag-only store then keeps, per page, only
//! that number's distance from the first such number of the page's block, in 2 bytes, instead of
//! the whole record (16 bytes for DFTL); a block where a distance does not fit keeps its numbers
//! whole. Nothing about the record is lost or trusted: the store rebuilds the record with
//! [`OobSqueeze::expand`] when it is written and keeps it whole, aside, whenever the rebuilt bytes
//! differ in any way or the page holds bytes rather than a tag. A read returns exactly the bytes
//! that were programmed.

use crate::content::ContentTag;
use crate::geometry::{BlockId, Geometry, Ppn};
use crate::memory::vec_bytes;
use rustc_hash::FxHashMap;
use std::sync::Arc;

/// A design's rule for telling its OOB record of a host page from the page's tag plus one number.
pub trait OobSqueeze: Send + Sync {
    /// Names the rule: a store already squeezed by a rule of the same name is left as it is.
    fn name(&self) -> &'static str;
    /// The number that, with `tag`, rebuilds `record` (the record as the store keeps it: the
    /// store's `oob_record_bytes`, zero-padded); `None` when the record has no such form.
    fn squeeze(&self, record: &[u8], tag: ContentTag) -> Option<u64>;
    /// Writes into `out` the record that `number` and `tag` stand for.
    fn expand(&self, number: u64, tag: ContentTag, out: &mut [u8]);
}

/// Per-page offset meaning "not a number from the block's base": the record is kept aside
/// whole, or the block keeps full numbers (it is wide).
const NOT_AN_OFFSET: u16 = u16::MAX;
/// Per-block base meaning "no squeezed record in the block since its erase".
const NO_BASE: u64 = u64::MAX;
/// Per-block base meaning "the block is wide: its numbers are in `wide`".
const WIDE: u64 = u64::MAX - 1;
/// A wide block's entry for a page whose record is kept aside.
const NO_NUMBER: u64 = u64::MAX;
/// Largest record a squeezed store handles (rebuilt on the stack).
pub const MAX_SQUEEZED_RECORD: usize = 64;

/// `a == b`, with the common 16-byte record compared as one word (no call to memcmp on the
/// path of every program).
fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    match (<[u8; 16]>::try_from(a), <[u8; 16]>::try_from(b)) {
        (Ok(a), Ok(b)) => u128::from_ne_bytes(a) == u128::from_ne_bytes(b),
        _ => a == b,
    }
}

/// The OOB records of a tag-only store kept as per-page offsets (see the module doc).
///
/// A page's number is kept as its distance from the first number programmed in its block since
/// the erase, in 2 bytes: a block is programmed over a short stretch of the run, so its numbers
/// are close together. A block where one does not fit becomes *wide*: its pages' numbers are kept
/// whole (8 bytes each) until it is erased. Records with no squeezed form are kept whole, aside,
/// in a table per block.
#[derive(Clone)]
pub struct SqueezedOob {
    rule: Arc<dyn OobSqueeze>,
    record_bytes: usize,
    pages_per_block: usize,
    /// Per page: the number's distance from its block's base, or [`NOT_AN_OFFSET`].
    offset: Vec<u16>,
    /// Per block: the number of the first squeezed record programmed since the erase.
    base: Vec<u64>,
    /// Wide blocks: every page's number, [`NO_NUMBER`] where the record is aside or absent.
    wide: FxHashMap<u32, Box<[u64]>>,
    /// Per block with records kept whole: those records.
    aside: FxHashMap<u32, AsideBlock>,
}

/// The records of one block kept whole, page by page.
#[derive(Clone)]
struct AsideBlock {
    /// One bit per page of the block: its record is here.
    present: Box<[u64]>,
    records: Box<[u8]>,
}

impl AsideBlock {
    fn new(pages_per_block: usize, record_bytes: usize) -> AsideBlock {
        AsideBlock {
            present: vec![0; pages_per_block.div_ceil(64)].into_boxed_slice(),
            records: vec![0; pages_per_block * record_bytes].into_boxed_slice(),
        }
    }
    fn has(&self, page: usize) -> bool {
        self.present[page / 64] >> (page % 64) & 1 != 0
    }
    fn put(&mut self, page: usize, record: &[u8]) {
        let at = page * record.len();
        self.records[at..at + record.len()].copy_from_slice(record);
        self.present[page / 64] |= 1 << (page % 64);
    }
    fn get(&self, page: usize, out: &mut [u8]) {
        let at = page * out.len();
        out.copy_from_slice(&self.records[at..at + out.len()]);
    }
    fn count(&self) -> usize {
        self.present.iter().map(|w| w.count_ones() as usize).sum()
    }
}

impl SqueezedOob {
    pub fn new(rule: Arc<dyn OobSqueeze>, geometry: &Geometry, record_bytes: u32) -> Self {
        assert!(
            record_bytes as usize <= MAX_SQUEEZED_RECORD,
            "an OOB record of {record_bytes} bytes is too large to squeeze"
        );
        SqueezedOob {
            rule,
            record_bytes: record_bytes as usize,
            pages_per_block: geometry.pages_per_block as usize,
            offset: vec![NOT_AN_OFFSET; geometry.pages() as usize],
            base: vec![NO_BASE; geometry.blocks() as usize],
            wide: FxHashMap::default(),
            aside: FxHashMap::default(),
        }
    }

    pub fn rule_name(&self) -> &'static str {
        self.rule.name()
    }

    /// Keeps `record` (already `record_bytes` long) of a page holding `tag`, or of a page holding
    /// bytes when `tag` is `None`.
    pub fn put(&mut self, ppn: Ppn, record: &[u8], tag: Option<ContentTag>) {
        debug_assert_eq!(record.len(), self.record_bytes);
        let (block, page) = self.place(ppn);
        let number = tag
            .and_then(|tag| self.rebuildable(record, tag))
            .filter(|&n| n < WIDE);
        let Some(number) = number else {
            self.keep_aside(ppn, record);
            return;
        };
        // A page is programmed only once between erases, and an erase drops the block's records
        // kept aside: none can be left for this page (and a read looks at numbers first).
        if self.base[block] == NO_BASE {
            self.base[block] = number;
        }
        let fits = number
            .checked_sub(self.base[block])
            .filter(|&d| d < NOT_AN_OFFSET as u64);
        match (self.base[block] == WIDE, fits) {
            (true, _) => self.wide_numbers(block)[page] = number,
            (false, Some(distance)) => self.offset[ppn.0 as usize] = distance as u16,
            (false, None) => {
                self.widen(block);
                self.wide_numbers(block)[page] = number;
            }
        }
    }

    /// (block, page within the block) of `ppn`.
    fn place(&self, ppn: Ppn) -> (usize, usize) {
        let i = ppn.0 as usize;
        (i / self.pages_per_block, i % self.pages_per_block)
    }

    /// The number that rebuilds `record` exactly, if the rule gives one.
    fn rebuildable(&self, record: &[u8], tag: ContentTag) -> Option<u64> {
        let number = self.rule.squeeze(record, tag)?;
        let mut rebuilt = [0u8; MAX_SQUEEZED_RECORD];
        self.rule
            .expand(number, tag, &mut rebuilt[..self.record_bytes]);
        same_bytes(&rebuilt[..self.record_bytes], record).then_some(number)
    }

    /// Makes `block` keep full numbers: those of its pages so far, from their offsets.
    fn widen(&mut self, block: usize) {
        let first = block * self.pages_per_block;
        let base = self.base[block];
        let numbers: Box<[u64]> = self.offset[first..first + self.pages_per_block]
            .iter()
            .map(|&d| match d {
                NOT_AN_OFFSET => NO_NUMBER,
                d => base + d as u64,
            })
            .collect();
        self.wide.insert(block as u32, numbers);
        self.base[block] = WIDE;
        self.offset[first..first + self.pages_per_block].fill(NOT_AN_OFFSET);
    }

    fn wide_numbers(&mut self, block: usize) -> &mut [u64] {
        self.wide.get_mut(&(block as u32)).expect("a wide block")
    }

    fn keep_aside(&mut self, ppn: Ppn, record: &[u8]) {
        let (block, page) = self.place(ppn);
        self.offset[ppn.0 as usize] = NOT_AN_OFFSET;
        if self.base[block] == WIDE {
            self.wide_numbers(block)[page] = NO_NUMBER;
        }
        let (pages, bytes) = (self.pages_per_block, self.record_bytes);
        self.aside
            .entry(block as u32)
            .or_insert_with(|| AsideBlock::new(pages, bytes))
            .put(page, record);
    }

    /// Copies the record of a programmed page into `out`; `tag` gives the page's tag, and is
    /// asked only for a page that was programmed with one (a number is kept only for those).
    pub fn get(&self, ppn: Ppn, tag: impl FnOnce() -> ContentTag, out: &mut [u8]) {
        let mut record = [0u8; MAX_SQUEEZED_RECORD];
        let record = &mut record[..self.record_bytes];
        let (block, page) = self.place(ppn);
        let number = match (self.base[block], self.offset[ppn.0 as usize]) {
            (WIDE, _) => Some(self.wide[&(block as u32)][page]).filter(|&n| n != NO_NUMBER),
            (_, NOT_AN_OFFSET) => None,
            (base, d) => Some(base + d as u64),
        };
        match number {
            Some(number) => self.rule.expand(number, tag(), record),
            None => {
                if let Some(table) = self.aside.get(&(block as u32)).filter(|t| t.has(page)) {
                    table.get(page, record);
                }
            }
        }
        crate::codec::copy_padded(record, out);
    }

    /// Forgets the records of an erased block.
    pub fn erase(&mut self, block: BlockId) {
        let first = block.0 as usize * self.pages_per_block;
        self.base[block.0 as usize] = NO_BASE;
        self.wide.remove(&block.0);
        self.aside.remove(&block.0);
        self.offset[first..first + self.pages_per_block].fill(NOT_AN_OFFSET);
    }

    /// Heap bytes: the per-page offsets and per-block bases, the wide blocks' numbers and the
    /// records kept aside.
    pub fn memory(&self) -> u64 {
        let slot = |entry: usize| entry as u64 + 1 + 4;
        let wide = self.wide.capacity() as u64 * slot(std::mem::size_of::<Box<[u64]>>())
            + (self.wide.len() * self.pages_per_block * 8) as u64;
        let per_aside_block =
            self.pages_per_block.div_ceil(64) * 8 + self.pages_per_block * self.record_bytes;
        let aside = self.aside.capacity() as u64 * slot(std::mem::size_of::<AsideBlock>())
            + (self.aside.len() * per_aside_block) as u64;
        vec_bytes(&self.offset) + vec_bytes(&self.base) + wide + aside
    }

    /// Records kept whole (pages holding bytes, or records the rule could not rebuild).
    pub fn aside_count(&self) -> usize {
        self.aside.values().map(AsideBlock::count).sum()
    }

    /// Blocks whose numbers did not fit 2-byte offsets.
    pub fn wide_blocks(&self) -> usize {
        self.wide.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::content::Content;
    use crate::store::{PageState, Store, TagStore};
    use crate::DeviceConfig;

    /// A record of 16 bytes: a number in bytes 0..8, the tag's LPN in 8..12, zeros after.
    struct NumberAndLpn {
        /// A lying rule: `expand` writes a different LPN than `squeeze` checked.
        lies: bool,
    }

    fn record(number: u64, lpn: u32, tail: u32) -> [u8; 16] {
        let mut r = [0u8; 16];
        r[0..8].copy_from_slice(&number.to_le_bytes());
        r[8..12].copy_from_slice(&lpn.to_le_bytes());
        r[12..16].copy_from_slice(&tail.to_le_bytes());
        r
    }

    impl OobSqueeze for NumberAndLpn {
        fn name(&self) -> &'static str {
            if self.lies {
                "test rule that lies"
            } else {
                "test rule"
            }
        }
        fn squeeze(&self, r: &[u8], tag: ContentTag) -> Option<u64> {
            let lpn = u32::from_le_bytes(r[8..12].try_into().unwrap());
            let tail = u32::from_le_bytes(r[12..16].try_into().unwrap());
            (lpn == tag.lpn && tail == 0).then(|| u64::from_le_bytes(r[0..8].try_into().unwrap()))
        }
        fn expand(&self, number: u64, tag: ContentTag, out: &mut [u8]) {
            let lpn = if self.lies { tag.lpn ^ 1 } else { tag.lpn };
            out.copy_from_slice(&record(number, lpn, 0));
        }
    }

    fn stores(lies: bool) -> (TagStore, TagStore) {
        let geometry = DeviceConfig::preset("small").unwrap().geometry;
        let whole = TagStore::new(&geometry, 16);
        let mut squeezed = whole.clone();
        squeezed.squeeze_oob(Arc::new(NumberAndLpn { lies }));
        (whole, squeezed)
    }

    fn oob_of(store: &TagStore, ppn: Ppn) -> [u8; 16] {
        let mut out = [0u8; 16];
        store.oob(ppn, &mut out);
        out
    }

    /// Every record reads back byte for byte as programmed, whichever way the squeezed store
    /// kept it: rebuilt from a number near the block's base, a number far below or above it, a
    /// record whose LPN is not the tag's, a non-zero tail, a page of bytes, a short record; and
    /// erases forget them. A rule whose `expand` does not rebuild what it squeezed (the negative
    /// control) costs memory, never bytes: its records all go aside.
    #[test]
    fn squeezed_records_read_back_exactly() {
        for lies in [false, true] {
            let (mut whole, mut squeezed) = stores(lies);
            let g = whole.geometry().clone();
            let mut rng = 0x1234_5678u64;
            let mut next = || {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                rng
            };
            let mut number = 1u64 << 40;
            for round in 0..3u32 {
                for b in 0..8u32 {
                    let block = BlockId(b);
                    if round > 0 {
                        whole.erase_block(block);
                        squeezed.erase_block(block);
                    }
                    for p in 0..g.pages_per_block {
                        let ppn = g.ppn(block, p);
                        let lpn = next() as u32 % 1000;
                        let tag = ContentTag { lpn, write: next() };
                        number += 1 + next() % 3;
                        // Blocks 4..8 also get numbers far from their base (they go wide).
                        let far = b >= 4;
                        let (content, rec): (Content, Vec<u8>) = match next() % 8 {
                            0 => (
                                Content::Bytes(vec![7u8; 64].into()),
                                record(number, lpn, 9).to_vec(),
                            ),
                            1 => (Content::Tag(tag), record(number, lpn + 1, 0).to_vec()),
                            2 => (Content::Tag(tag), record(number, lpn, 3).to_vec()),
                            3 if far => (
                                Content::Tag(tag),
                                record(number - (3 << 31), lpn, 0).to_vec(),
                            ),
                            4 if far => (
                                Content::Tag(tag),
                                record(number + (5 << 31), lpn, 0).to_vec(),
                            ),
                            5 => (Content::Tag(tag), record(number, lpn, 0)[..10].to_vec()),
                            _ => (Content::Tag(tag), record(number, lpn, 0).to_vec()),
                        };
                        whole.write_page(ppn, &content, &rec);
                        squeezed.write_page(ppn, &content, &rec);
                    }
                }
                for p in 0..8 * g.pages_per_block {
                    let ppn = Ppn(p);
                    assert_eq!(squeezed.page_state(ppn), PageState::Programmed);
                    assert_eq!(
                        oob_of(&squeezed, ppn),
                        oob_of(&whole, ppn),
                        "{ppn}, lies {lies}"
                    );
                    assert_eq!(squeezed.data(ppn), whole.data(ppn));
                }
            }
            let kept = squeezed.squeezed().unwrap();
            let aside = kept.aside_count();
            let pages = 8 * g.pages_per_block as usize;
            if lies {
                assert_eq!(aside, pages, "a lying rule keeps every record aside");
                assert_eq!(kept.wide_blocks(), 0);
            } else {
                // About 3 records in 8 do not fit the rule; far numbers make blocks 4..8 wide.
                assert!(
                    aside > pages / 4 && aside < pages / 2,
                    "{aside} of {pages} aside"
                );
                assert_eq!(kept.wide_blocks(), 4);
            }
            // An erase forgets the block's records, the aside ones too.
            squeezed.erase_block(BlockId(0));
            squeezed.erase_block(BlockId(7));
            let kept = squeezed.squeezed().unwrap();
            assert!(kept.aside_count() < aside);
            assert_eq!(kept.wide_blocks(), if lies { 0 } else { 3 });
        }
    }

    /// A store that already holds pages converts them when the rule is installed, and a
    /// snapshot keeps the squeezed form.
    #[test]
    fn installing_the_rule_converts_what_is_there() {
        let geometry = DeviceConfig::preset("small").unwrap().geometry;
        let mut store = TagStore::new(&geometry, 16);
        let tag = |lpn| ContentTag { lpn, write: 5 };
        for p in 0..40u32 {
            store.write_page(Ppn(p), &Content::Tag(tag(p)), &record(100 + p as u64, p, 0));
        }
        store.write_page(
            Ppn(40),
            &Content::Bytes(vec![1; 8].into()),
            &record(3, 3, 3),
        );
        store.set_torn(Ppn(39));
        let before: Vec<_> = (0..41).map(|p| oob_of(&store, Ppn(p))).collect();
        store.squeeze_oob(Arc::new(NumberAndLpn { lies: false }));
        let kept = store.squeezed().unwrap();
        assert_eq!(
            kept.aside_count(),
            1,
            "only the page of bytes is kept whole"
        );
        let copy = store.snapshot();
        for p in 0..41u32 {
            let mut out = [0u8; 16];
            copy.oob(Ppn(p), &mut out);
            assert_eq!(out, before[p as usize], "page {p}");
        }
        assert_eq!(copy.page_state(Ppn(39)), PageState::Torn);
    }

    /// A store told to keep its records whole ignores the rule, and its copies do too; the
    /// records read back as programmed.
    #[test]
    fn a_store_keeping_records_whole_ignores_the_rule() {
        let geometry = DeviceConfig::preset("small").unwrap().geometry;
        let mut store = TagStore::new(&geometry, 16);
        store.keep_oob_whole();
        let tag = |lpn| ContentTag { lpn, write: 5 };
        for p in 0..8u32 {
            store.write_page(Ppn(p), &Content::Tag(tag(p)), &record(100 + p as u64, p, 0));
        }
        let mut copy = store.clone();
        store.squeeze_oob(Arc::new(NumberAndLpn { lies: false }));
        copy.squeeze_oob(Arc::new(NumberAndLpn { lies: false }));
        assert!(store.squeezed().is_none() && copy.squeezed().is_none());
        for p in 0..8u32 {
            assert_eq!(oob_of(&store, Ppn(p)), record(100 + p as u64, p, 0));
            assert_eq!(oob_of(&copy, Ppn(p)), record(100 + p as u64, p, 0));
        }
        let mut plain = TagStore::new(&geometry, 16);
        plain.squeeze_oob(Arc::new(NumberAndLpn { lies: false }));
        assert!(plain.squeezed().is_some(), "a plain store adopts the rule");
    }
}
