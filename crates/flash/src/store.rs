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
//! using the device declares (SPEC.md §1.4), so a 16 M-page device fits in memory.

use crate::content::{Content, ContentTag};
use crate::geometry::{BlockId, Geometry, Ppn};
use rustc_hash::FxHashMap;

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
    /// Copies the OOB record of a programmed page into `out` (up to `out.len()` bytes).
    fn oob(&self, ppn: Ppn, out: &mut [u8]);
    fn write_page(&mut self, ppn: Ppn, content: &Content, oob: &[u8]);
    fn set_torn(&mut self, ppn: Ppn);
    /// Erases every page of the block and counts one erase cycle.
    fn erase_block(&mut self, block: BlockId);
    fn set_erase_torn(&mut self, block: BlockId);
    fn erase_torn(&self, block: BlockId) -> bool;
    fn erase_count(&self, block: BlockId) -> u32;
    /// Makes everything written so far durable (file backend); a no-op in memory.
    fn sync(&mut self) -> Result<(), crate::FlashError> {
        Ok(())
    }
    /// An in-memory copy of the current contents (crash images are built from copies).
    fn snapshot(&self) -> Box<dyn Store>;
}

/// Shared per-page and per-block bookkeeping of the in-memory stores.
#[derive(Clone)]
struct Common {
    geometry: Geometry,
    oob_record_bytes: u32,
    states: Vec<u8>,
    oob: Vec<u8>,
    erase_counts: Vec<u32>,
    erase_torn: Vec<bool>,
}

impl Common {
    fn new(geometry: &Geometry, oob_record_bytes: u32) -> Self {
        let pages = geometry.pages() as usize;
        Common {
            geometry: geometry.clone(),
            oob_record_bytes,
            states: vec![0; pages],
            oob: vec![0; pages * oob_record_bytes as usize],
            erase_counts: vec![0; geometry.blocks() as usize],
            erase_torn: vec![false; geometry.blocks() as usize],
        }
    }
    fn oob_range(&self, ppn: Ppn) -> std::ops::Range<usize> {
        let r = self.oob_record_bytes as usize;
        ppn.0 as usize * r..(ppn.0 as usize + 1) * r
    }
    fn copy_oob(&self, ppn: Ppn, out: &mut [u8]) {
        let src = &self.oob[self.oob_range(ppn)];
        let n = out.len().min(src.len());
        out[..n].copy_from_slice(&src[..n]);
        out[n..].fill(0);
    }
    fn put_oob(&mut self, ppn: Ppn, oob: &[u8]) {
        let range = self.oob_range(ppn);
        let dst = &mut self.oob[range];
        let n = oob.len().min(dst.len());
        dst[..n].copy_from_slice(&oob[..n]);
        dst[n..].fill(0);
    }
    fn erase(&mut self, block: BlockId) -> std::ops::Range<usize> {
        let ppb = self.geometry.pages_per_block as usize;
        let first = block.0 as usize * ppb;
        self.states[first..first + ppb].fill(0);
        self.erase_counts[block.0 as usize] += 1;
        self.erase_torn[block.0 as usize] = false;
        first..first + ppb
    }
}

/// Tag-only store for paper-scale simulation: a host page costs a 12-byte tag.
#[derive(Clone)]
pub struct TagStore {
    common: Common,
    tag_lpn: Vec<u32>,
    tag_write: Vec<u64>,
    /// Pages written with real bytes (metadata pages), keyed by PPN.
    bytes: FxHashMap<u32, Box<[u8]>>,
}

impl TagStore {
    pub fn new(geometry: &Geometry, oob_record_bytes: u32) -> Self {
        let pages = geometry.pages() as usize;
        TagStore {
            common: Common::new(geometry, oob_record_bytes),
            tag_lpn: vec![0; pages],
            tag_write: vec![0; pages],
            bytes: FxHashMap::default(),
        }
    }
}

impl Store for TagStore {
    fn geometry(&self) -> &Geometry {
        &self.common.geometry
    }
    fn oob_record_bytes(&self) -> u32 {
        self.common.oob_record_bytes
    }
    fn tag_only(&self) -> bool {
        true
    }
    fn page_state(&self, ppn: Ppn) -> PageState {
        PageState::from_u8(self.common.states[ppn.0 as usize])
    }
    fn data(&self, ppn: Ppn) -> Content {
        match self.bytes.get(&ppn.0) {
            Some(b) => Content::Bytes(b.clone()),
            None => Content::Tag(ContentTag {
                lpn: self.tag_lpn[ppn.0 as usize],
                write: self.tag_write[ppn.0 as usize],
            }),
        }
    }
    fn oob(&self, ppn: Ppn, out: &mut [u8]) {
        self.common.copy_oob(ppn, out)
    }
    fn write_page(&mut self, ppn: Ppn, content: &Content, oob: &[u8]) {
        let i = ppn.0 as usize;
        match content {
            Content::Tag(t) => {
                self.tag_lpn[i] = t.lpn;
                self.tag_write[i] = t.write;
                self.bytes.remove(&ppn.0);
            }
            Content::Bytes(b) => {
                self.bytes.insert(ppn.0, b.clone());
            }
        }
        self.common.put_oob(ppn, oob);
        self.common.states[i] = PageState::Programmed as u8;
    }
    fn set_torn(&mut self, ppn: Ppn) {
        self.common.states[ppn.0 as usize] = PageState::Torn as u8;
        self.bytes.remove(&ppn.0);
    }
    fn erase_block(&mut self, block: BlockId) {
        let range = self.common.erase(block);
        if !self.bytes.is_empty() {
            for p in range {
                self.bytes.remove(&(p as u32));
            }
        }
    }
    fn set_erase_torn(&mut self, block: BlockId) {
        self.common.erase_torn[block.0 as usize] = true;
    }
    fn erase_torn(&self, block: BlockId) -> bool {
        self.common.erase_torn[block.0 as usize]
    }
    fn erase_count(&self, block: BlockId) -> u32 {
        self.common.erase_counts[block.0 as usize]
    }
    fn snapshot(&self) -> Box<dyn Store> {
        Box::new(self.clone())
    }
}

/// Full-data store in memory: every programmed page keeps its bytes.
#[derive(Clone)]
pub struct MemStore {
    common: Common,
    data: Vec<Option<Box<[u8]>>>,
}

impl MemStore {
    pub fn new(geometry: &Geometry, oob_record_bytes: u32) -> Self {
        MemStore {
            common: Common::new(geometry, oob_record_bytes),
            data: vec![None; geometry.pages() as usize],
        }
    }

    /// Sets a block's erase count (used when copying another store).
    pub fn set_erase_count(&mut self, block: BlockId, count: u32) {
        self.common.erase_counts[block.0 as usize] = count;
    }
}

impl Store for MemStore {
    fn geometry(&self) -> &Geometry {
        &self.common.geometry
    }
    fn oob_record_bytes(&self) -> u32 {
        self.common.oob_record_bytes
    }
    fn tag_only(&self) -> bool {
        false
    }
    fn page_state(&self, ppn: Ppn) -> PageState {
        PageState::from_u8(self.common.states[ppn.0 as usize])
    }
    fn data(&self, ppn: Ppn) -> Content {
        let page = self.data[ppn.0 as usize].clone().unwrap_or_else(|| {
            vec![0u8; self.common.geometry.page_bytes as usize].into_boxed_slice()
        });
        Content::Bytes(page)
    }
    fn oob(&self, ppn: Ppn, out: &mut [u8]) {
        self.common.copy_oob(ppn, out)
    }
    fn write_page(&mut self, ppn: Ppn, content: &Content, oob: &[u8]) {
        let page = content.to_page_bytes(self.common.geometry.page_bytes as usize);
        self.data[ppn.0 as usize] = Some(page);
        self.common.put_oob(ppn, oob);
        self.common.states[ppn.0 as usize] = PageState::Programmed as u8;
    }
    fn set_torn(&mut self, ppn: Ppn) {
        self.common.states[ppn.0 as usize] = PageState::Torn as u8;
        self.data[ppn.0 as usize] = None;
    }
    fn erase_block(&mut self, block: BlockId) {
        for p in self.common.erase(block) {
            self.data[p] = None;
        }
    }
    fn set_erase_torn(&mut self, block: BlockId) {
        self.common.erase_torn[block.0 as usize] = true;
    }
    fn erase_torn(&self, block: BlockId) -> bool {
        self.common.erase_torn[block.0 as usize]
    }
    fn erase_count(&self, block: BlockId) -> u32 {
        self.common.erase_counts[block.0 as usize]
    }
    fn snapshot(&self) -> Box<dyn Store> {
        Box::new(self.clone())
    }
}
