//! Full-data flash image in a file that outlives the process.
//!
//! Layout (all integers little-endian, fixed width):
//! ```text
//! offset 0     header, 4096 bytes:
//!   0   magic            8  b"MOBIUSFL"
//!   8   format_version   u32 (= 1)
//!   12  channels         u32
//!   16  chips_per_channel u32
//!   20  blocks_per_chip  u32
//!   24  pages_per_block  u32
//!   28  page_bytes       u32
//!   32  oob_bytes        u32
//!   36  oob_record_bytes u32
//!   40  crc32c of bytes 0..40
//! 4096         block table: per block u32 erase count, u32 flags (bit 0: erase torn)
//! then         page states: 1 byte per page (0 erased, 1 programmed, 2 torn)
//! then         OOB records: oob_record_bytes per page
//! then, 4096-aligned, data: page_bytes per page (sparse: erased pages are holes)
//! ```
//! A program writes the state byte "torn" first, then data and OOB, then "programmed": a process
//! killed in between leaves a page that fails ECC, exactly a torn program. An erase sets the
//! block's "erase torn" flag first and clears it last. Killing the process is thus a power cut at
//! the last completed step. State, OOB and block tables are also cached in memory.

use crate::content::Content;
use crate::error::FlashError;
use crate::geometry::{BlockId, Geometry, Ppn};
use crate::store::{PageState, Store};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

const MAGIC: [u8; 8] = *b"MOBIUSFL";
const FORMAT_VERSION: u32 = 1;
const HEADER_BYTES: u64 = 4096;
const FLAG_ERASE_TORN: u32 = 1;

/// File-backed full-data store.
pub struct FileStore {
    path: PathBuf,
    file: File,
    geometry: Geometry,
    oob_record_bytes: u32,
    states: Vec<u8>,
    oob: Vec<u8>,
    erase_counts: Vec<u32>,
    erase_torn: Vec<bool>,
    states_at: u64,
    oob_at: u64,
    data_at: u64,
}

fn layout(g: &Geometry, oob_record_bytes: u32) -> (u64, u64, u64, u64) {
    let blocks_at = HEADER_BYTES;
    let states_at = blocks_at + g.blocks() as u64 * 8;
    let oob_at = states_at + g.pages() as u64;
    let data_at = (oob_at + g.pages() as u64 * oob_record_bytes as u64).div_ceil(4096) * 4096;
    let end = data_at + g.pages() as u64 * g.page_bytes as u64;
    (states_at, oob_at, data_at, end)
}

fn encode_header(g: &Geometry, oob_record_bytes: u32) -> [u8; 44] {
    let mut h = [0u8; 44];
    h[0..8].copy_from_slice(&MAGIC);
    let fields = [
        FORMAT_VERSION,
        g.channels,
        g.chips_per_channel,
        g.blocks_per_chip,
        g.pages_per_block,
        g.page_bytes,
        g.oob_bytes,
        oob_record_bytes,
    ];
    for (i, v) in fields.iter().enumerate() {
        h[8 + 4 * i..12 + 4 * i].copy_from_slice(&v.to_le_bytes());
    }
    let crc = crc32c::crc32c(&h[0..40]);
    h[40..44].copy_from_slice(&crc.to_le_bytes());
    h
}

fn describe(g: &Geometry, oob_record_bytes: u32) -> String {
    format!(
        "{}ch x {}chips x {}blocks x {}pages x {}B (+{}B OOB, {}B kept)",
        g.channels,
        g.chips_per_channel,
        g.blocks_per_chip,
        g.pages_per_block,
        g.page_bytes,
        g.oob_bytes,
        oob_record_bytes
    )
}

impl FileStore {
    /// Creates a new, fully erased image (any existing file at `path` is replaced).
    pub fn create(
        path: &Path,
        geometry: &Geometry,
        oob_record_bytes: u32,
    ) -> Result<Self, FlashError> {
        let (states_at, oob_at, data_at, end) = layout(geometry, oob_record_bytes);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)?;
        file.set_len(end)?;
        file.write_all_at(&encode_header(geometry, oob_record_bytes), 0)?;
        file.sync_all()?;
        Ok(FileStore {
            path: path.to_path_buf(),
            file,
            geometry: geometry.clone(),
            oob_record_bytes,
            states: vec![0; geometry.pages() as usize],
            oob: vec![0; geometry.pages() as usize * oob_record_bytes as usize],
            erase_counts: vec![0; geometry.blocks() as usize],
            erase_torn: vec![false; geometry.blocks() as usize],
            states_at,
            oob_at,
            data_at,
        })
    }

    /// Replaces the image at `path` with `image` (pages, torn states, erase counts): the flash
    /// as a simulated power cut left it (`mobius serve --power-cut-signal`). Written to a
    /// temporary file first and renamed over `path`, so a crash while writing leaves the old one.
    pub fn replace_with(path: &Path, image: &dyn Store) -> Result<(), FlashError> {
        let tmp = path.with_extension("cut-tmp");
        let g = image.geometry().clone();
        let mut out = FileStore::create(&tmp, &g, image.oob_record_bytes())?;
        let mut oob = vec![0u8; image.oob_record_bytes() as usize];
        for p in 0..g.pages() {
            let ppn = Ppn(p);
            match image.page_state(ppn) {
                PageState::Erased => {}
                PageState::Torn => out.set_torn(ppn),
                PageState::Programmed => {
                    image.oob(ppn, &mut oob);
                    out.write_page(ppn, &image.data(ppn), &oob);
                }
            }
        }
        for b in 0..g.blocks() {
            let block = BlockId(b);
            out.erase_counts[b as usize] = image.erase_count(block);
            out.erase_torn[b as usize] = image.erase_torn(block);
            out.put_block(block);
        }
        out.sync()?;
        drop(out);
        std::fs::rename(&tmp, path)?;
        Ok(())
    }

    /// Opens an existing image, checking that it was made for `geometry` and `oob_record_bytes`.
    pub fn open(
        path: &Path,
        geometry: &Geometry,
        oob_record_bytes: u32,
    ) -> Result<Self, FlashError> {
        let err = |reason: String| FlashError::Image {
            path: path.display().to_string(),
            reason,
        };
        let file = OpenOptions::new().read(true).write(true).open(path)?;
        let mut h = [0u8; 44];
        file.read_exact_at(&mut h, 0)
            .map_err(|_| err("too short to hold a header".into()))?;
        if h[0..8] != MAGIC {
            return Err(err("not a mobius flash image (bad magic)".into()));
        }
        let crc = u32::from_le_bytes(h[40..44].try_into().expect("4 bytes"));
        if crc != crc32c::crc32c(&h[0..40]) {
            return Err(err("header checksum mismatch (damaged header)".into()));
        }
        let field =
            |i: usize| u32::from_le_bytes(h[8 + 4 * i..12 + 4 * i].try_into().expect("4 bytes"));
        if field(0) != FORMAT_VERSION {
            return Err(err(format!(
                "format version {} is not the supported {FORMAT_VERSION}",
                field(0)
            )));
        }
        let found = Geometry {
            channels: field(1),
            chips_per_channel: field(2),
            blocks_per_chip: field(3),
            pages_per_block: field(4),
            page_bytes: field(5),
            oob_bytes: field(6),
        };
        if found != *geometry || field(7) != oob_record_bytes {
            return Err(FlashError::ImageGeometryMismatch {
                path: path.display().to_string(),
                found: describe(&found, field(7)),
                wanted: describe(geometry, oob_record_bytes),
            });
        }
        let (states_at, oob_at, data_at, end) = layout(geometry, oob_record_bytes);
        if file.metadata()?.len() < end {
            return Err(err(format!(
                "file is {} bytes, the geometry needs {end}",
                file.metadata()?.len()
            )));
        }
        let mut blocks = vec![0u8; geometry.blocks() as usize * 8];
        file.read_exact_at(&mut blocks, HEADER_BYTES)?;
        let mut states = vec![0u8; geometry.pages() as usize];
        file.read_exact_at(&mut states, states_at)?;
        let mut oob = vec![0u8; geometry.pages() as usize * oob_record_bytes as usize];
        file.read_exact_at(&mut oob, oob_at)?;
        let erase_counts = blocks
            .chunks(8)
            .map(|c| u32::from_le_bytes(c[0..4].try_into().expect("4")))
            .collect();
        let erase_torn = blocks
            .chunks(8)
            .map(|c| u32::from_le_bytes(c[4..8].try_into().expect("4")) & FLAG_ERASE_TORN != 0)
            .collect();
        if states.iter().any(|&s| s > 2) {
            return Err(err(
                "page state table holds values other than erased/programmed/torn".into(),
            ));
        }
        Ok(FileStore {
            path: path.to_path_buf(),
            file,
            geometry: geometry.clone(),
            oob_record_bytes,
            states,
            oob,
            erase_counts,
            erase_torn,
            states_at,
            oob_at,
            data_at,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn put_state(&mut self, ppn: Ppn, state: PageState) {
        self.states[ppn.0 as usize] = state as u8;
        self.io(self
            .file
            .write_all_at(&[state as u8], self.states_at + ppn.0 as u64));
    }

    fn put_block(&mut self, block: BlockId) {
        let mut rec = [0u8; 8];
        rec[0..4].copy_from_slice(&self.erase_counts[block.0 as usize].to_le_bytes());
        let flags = if self.erase_torn[block.0 as usize] {
            FLAG_ERASE_TORN
        } else {
            0
        };
        rec[4..8].copy_from_slice(&flags.to_le_bytes());
        self.io(self
            .file
            .write_all_at(&rec, HEADER_BYTES + block.0 as u64 * 8));
    }

    /// The store interface has no error path for writes (the in-memory stores cannot fail); a
    /// failing image file is unrecoverable for an emulated device, like a dead flash bus.
    fn io(&self, r: std::io::Result<()>) {
        if let Err(e) = r {
            panic!("flash image {} I/O failed: {e}", self.path.display());
        }
    }
}

impl Store for FileStore {
    fn geometry(&self) -> &Geometry {
        &self.geometry
    }
    fn oob_record_bytes(&self) -> u32 {
        self.oob_record_bytes
    }
    fn tag_only(&self) -> bool {
        false
    }
    fn page_state(&self, ppn: Ppn) -> PageState {
        PageState::from_u8(self.states[ppn.0 as usize])
    }
    fn data(&self, ppn: Ppn) -> Content {
        let mut page = vec![0u8; self.geometry.page_bytes as usize].into_boxed_slice();
        let at = self.data_at + ppn.0 as u64 * self.geometry.page_bytes as u64;
        self.io(self.file.read_exact_at(&mut page, at));
        Content::Bytes(page)
    }
    fn oob(&self, ppn: Ppn, out: &mut [u8]) {
        let r = self.oob_record_bytes as usize;
        let src = &self.oob[ppn.0 as usize * r..(ppn.0 as usize + 1) * r];
        let n = out.len().min(r);
        out[..n].copy_from_slice(&src[..n]);
        out[n..].fill(0);
    }
    fn write_page(&mut self, ppn: Ppn, content: &Content, oob: &[u8]) {
        self.put_state(ppn, PageState::Torn);
        let page = content.to_page_bytes(self.geometry.page_bytes as usize);
        self.io(self.file.write_all_at(
            &page,
            self.data_at + ppn.0 as u64 * self.geometry.page_bytes as u64,
        ));
        let r = self.oob_record_bytes as usize;
        let mut record = vec![0u8; r];
        let n = oob.len().min(r);
        record[..n].copy_from_slice(&oob[..n]);
        self.oob[ppn.0 as usize * r..(ppn.0 as usize + 1) * r].copy_from_slice(&record);
        self.io(self
            .file
            .write_all_at(&record, self.oob_at + ppn.0 as u64 * r as u64));
        self.put_state(ppn, PageState::Programmed);
    }
    fn set_torn(&mut self, ppn: Ppn) {
        self.put_state(ppn, PageState::Torn);
    }
    fn erase_block(&mut self, block: BlockId) {
        self.erase_torn[block.0 as usize] = true;
        self.put_block(block);
        let ppb = self.geometry.pages_per_block as usize;
        let first = block.0 as usize * ppb;
        self.states[first..first + ppb].fill(0);
        let zeros = vec![0u8; ppb];
        self.io(self
            .file
            .write_all_at(&zeros, self.states_at + first as u64));
        let bytes = self.geometry.block_bytes();
        let at = self.data_at + first as u64 * self.geometry.page_bytes as u64;
        // Release the data: erased pages are holes in a sparse file. Failure only costs space.
        // SAFETY: fallocate on a valid, open descriptor with in-range offsets.
        unsafe {
            libc::fallocate(
                self.file.as_raw_fd(),
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                at as libc::off_t,
                bytes as libc::off_t,
            );
        }
        self.erase_counts[block.0 as usize] += 1;
        self.erase_torn[block.0 as usize] = false;
        self.put_block(block);
    }
    fn set_erase_torn(&mut self, block: BlockId) {
        self.erase_torn[block.0 as usize] = true;
        self.put_block(block);
    }
    fn erase_torn(&self, block: BlockId) -> bool {
        self.erase_torn[block.0 as usize]
    }
    fn erase_count(&self, block: BlockId) -> u32 {
        self.erase_counts[block.0 as usize]
    }
    fn sync(&mut self) -> Result<(), FlashError> {
        self.file.sync_data()?;
        Ok(())
    }
    fn snapshot(&self) -> Box<dyn Store> {
        let mut mem = crate::store::MemStore::new(&self.geometry, self.oob_record_bytes);
        let mut oob = vec![0u8; self.oob_record_bytes as usize];
        for p in 0..self.geometry.pages() {
            let ppn = Ppn(p);
            match self.page_state(ppn) {
                PageState::Erased => {}
                PageState::Torn => mem.set_torn(ppn),
                PageState::Programmed => {
                    self.oob(ppn, &mut oob);
                    mem.write_page(ppn, &self.data(ppn), &oob);
                }
            }
        }
        for b in 0..self.geometry.blocks() {
            mem.set_erase_count(BlockId(b), self.erase_counts[b as usize]);
            if self.erase_torn[b as usize] {
                mem.set_erase_torn(BlockId(b));
            }
        }
        Box::new(mem)
    }
}
