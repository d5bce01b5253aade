//! Full-data flash image in a file that outlives the process.
//!
//! Layout (all integers little-endian, fixed width):
//! ```text
//! offset 0     header, 4096 bytes:
//!   0   magic            8  b"MOBIUSFL"
//!   8   format_version   u32 (= 3), the layout of this file
//!   12  channels         u32
//!   16  chips_per_channel u32
//!   20  blocks_per_chip  u32
//!   24  pages_per_block  u32
//!   28  page_bytes       u32
//!   32  oob_bytes        u32
//!   36  oob_record_bytes u32
//!   40  design           32 bytes, the name of the design that formatted it, zero-padded
//!   72  params_hash      u64, a hash of the design parameters it was formatted with
//!   80  design_format    u32, the version of the design's on-flash format (its records)
//!   84  crc32c of bytes 0..84
//! 4096         block table: per block u32 erase count, u32 flags (bit 0: erase torn)
//! then         page states: 1 byte per page (0 erased, 1 programmed, 2 torn)
//! then         OOB records: oob_record_bytes per page
//! then, 4096-aligned, data: page_bytes per page (sparse: erased pages are holes)
//! ```
//! A program writes the state byte "torn" first, then data and OOB, then "programmed": a process
//! killed in between leaves a page that fails ECC, exactly a torn program. An erase sets the
//! block's "erase torn" flag first and clears it last. Killing the process is thus a power cut at
//! the last completed step. State, OOB and block tables are also cached in memory.
//!
//! One process per image: the file is held under an exclusive lock while it is open
//! ([`crate::image_lock`]); a second open, in this process or another, is refused untouched.
//!
//! Fail-stop: an I/O error on the file (a full disk, a dying one, a file-size limit) never
//! panics. The first one is recorded; from then on the store writes nothing more, so the image
//! keeps exactly what was on it when the error happened, and [`crate::Flash`] refuses every later
//! program and erase with [`FlashError::ImageFailed`]: the device is read-only until restarted.

use crate::codec::{self, CorruptRecord, Reader};
use crate::content::Content;
use crate::error::FlashError;
use crate::geometry::{BlockId, Geometry, Ppn};
use crate::image_lock::lock_exclusive;
use crate::store::{PageState, Store};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

const MAGIC: [u8; 8] = *b"MOBIUSFL";
const FORMAT_VERSION: u32 = 3;
const HEADER_BYTES: u64 = 4096;
const HEADER_USED: usize = 88;
const DESIGN_NAME_BYTES: usize = 32;
const FLAG_ERASE_TORN: u32 = 1;

/// Which design formatted an image, and with which parameters. Opening an image as another
/// design (or with other parameters) would run the wrong recovery on it, so it is refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageIdentity {
    /// The design's name (at most 32 bytes).
    pub design: String,
    /// The version of the design's on-flash format: its records cannot be read by a build
    /// with another.
    pub format_version: u32,
    /// A hash of the design parameters the image was formatted with.
    pub params_hash: u64,
}

impl std::fmt::Display for ImageIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "design '{}' (on-flash format {}, parameters #{:016x})",
            self.design, self.format_version, self.params_hash
        )
    }
}

/// What an image's header says about it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageHeader {
    pub geometry: Geometry,
    pub oob_record_bytes: u32,
    pub identity: ImageIdentity,
}

/// File-backed full-data store.
pub struct FileStore {
    path: PathBuf,
    /// The first I/O error on the file; once set, nothing more is written.
    failure: std::sync::OnceLock<String>,
    /// Every I/O error so far (reads included).
    io_errors: std::sync::atomic::AtomicU64,
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

fn encode_header(g: &Geometry, oob_record_bytes: u32, id: &ImageIdentity) -> [u8; HEADER_USED] {
    let mut h = [0u8; HEADER_USED];
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
    let name = id.design.as_bytes();
    h[40..40 + name.len()].copy_from_slice(name);
    h[72..80].copy_from_slice(&id.params_hash.to_le_bytes());
    h[80..84].copy_from_slice(&id.format_version.to_le_bytes());
    let crc = crc32c::crc32c(&h[0..84]);
    h[84..88].copy_from_slice(&crc.to_le_bytes());
    h
}

/// Decodes a header; every failure is a typed error naming what is wrong.
fn decode_header(h: &[u8], path: &Path) -> Result<ImageHeader, FlashError> {
    let err = |reason: String| FlashError::Image {
        path: path.display().to_string(),
        reason,
    };
    let mut r = Reader::new(h);
    r.magic(&MAGIC, "mobius flash image")
        .map_err(|e| err(format!("not a mobius flash image: {e}")))?;
    let version = r.u32().map_err(|e| err(e.to_string()))?;
    if version != FORMAT_VERSION {
        return Err(err(format!(
            "format version {version} is not the supported {FORMAT_VERSION} (an image made \
             before images recorded their design and its on-flash format version must be re-created)"
        )));
    }
    let mut r =
        codec::crc_sealed(h, HEADER_USED - 4).map_err(|e| err(format!("damaged header: {e}")))?;
    r.skip(12).expect("the header is HEADER_USED bytes");
    decode_header_fields(&mut r).map_err(|e| err(e.to_string()))
}

/// The geometry, OOB record size and identity, after the magic and the file format version.
fn decode_header_fields(r: &mut Reader) -> Result<ImageHeader, ImageHeaderError> {
    let geometry = Geometry {
        channels: r.u32()?,
        chips_per_channel: r.u32()?,
        blocks_per_chip: r.u32()?,
        pages_per_block: r.u32()?,
        page_bytes: r.u32()?,
        oob_bytes: r.u32()?,
    };
    geometry.validate().map_err(ImageHeaderError::Geometry)?;
    let oob_record_bytes = r.u32()?;
    let name = r.bytes(DESIGN_NAME_BYTES)?;
    let len = name
        .iter()
        .position(|&b| b == 0)
        .unwrap_or(DESIGN_NAME_BYTES);
    let design = std::str::from_utf8(&name[..len])
        .map_err(|_| ImageHeaderError::DesignName)?
        .to_string();
    let params_hash = r.u64()?;
    Ok(ImageHeader {
        geometry,
        oob_record_bytes,
        identity: ImageIdentity {
            design,
            format_version: r.u32()?,
            params_hash,
        },
    })
}

/// What is wrong with a header whose checksum holds.
#[derive(Debug, thiserror::Error)]
enum ImageHeaderError {
    #[error(transparent)]
    Record(#[from] CorruptRecord),
    #[error("header geometry is impossible: {0}")]
    Geometry(crate::ConfigError),
    #[error("design name is not UTF-8")]
    DesignName,
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
    /// Creates a new, fully erased image (any existing file at `path` is replaced), recording
    /// the design and parameters that will format it. Refused with
    /// [`FlashError::ImageLocked`] (the file untouched) when another process holds `path`.
    pub fn create(
        path: &Path,
        geometry: &Geometry,
        oob_record_bytes: u32,
        identity: &ImageIdentity,
    ) -> Result<Self, FlashError> {
        if identity.design.len() > DESIGN_NAME_BYTES || identity.design.contains('\0') {
            return Err(FlashError::Image {
                path: path.display().to_string(),
                reason: format!(
                    "design name '{}' does not fit the header ({DESIGN_NAME_BYTES} bytes)",
                    identity.design
                ),
            });
        }
        let (_, _, _, end) = layout(geometry, oob_record_bytes);
        // Locked before it is emptied: an image another process holds is refused untouched.
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)?;
        lock_exclusive(&file, path)?;
        file.set_len(0)?;
        file.set_len(end)?;
        file.write_all_at(&encode_header(geometry, oob_record_bytes, identity), 0)?;
        file.sync_all()?;
        let pages = geometry.pages() as usize;
        Ok(Self::assemble(
            path,
            file,
            geometry,
            oob_record_bytes,
            (vec![0; pages], vec![0; pages * oob_record_bytes as usize]),
            vec![0u64; geometry.blocks() as usize],
        ))
    }

    /// The store over an open file and the tables read from (or made for) it. `blocks` packs
    /// each block's erase count (low 32 bits) and flags (high 32 bits).
    fn assemble(
        path: &Path,
        file: File,
        geometry: &Geometry,
        oob_record_bytes: u32,
        (states, oob): (Vec<u8>, Vec<u8>),
        blocks: Vec<u64>,
    ) -> Self {
        let (states_at, oob_at, data_at, _) = layout(geometry, oob_record_bytes);
        FileStore {
            path: path.to_path_buf(),
            failure: std::sync::OnceLock::new(),
            io_errors: std::sync::atomic::AtomicU64::new(0),
            file,
            geometry: geometry.clone(),
            oob_record_bytes,
            states,
            oob,
            erase_counts: blocks.iter().map(|&b| b as u32).collect(),
            erase_torn: blocks
                .iter()
                .map(|&b| (b >> 32) as u32 & FLAG_ERASE_TORN != 0)
                .collect(),
            states_at,
            oob_at,
            data_at,
        }
    }

    /// Replaces the image at `path` with `image` (pages, torn states, erase counts): the flash
    /// as a simulated power cut left it (`mobius serve --power-cut-signal`). Written to a
    /// temporary file first and renamed over `path`, so a crash while writing leaves the old one.
    pub fn replace_with(
        path: &Path,
        image: &dyn Store,
        identity: &ImageIdentity,
    ) -> Result<(), FlashError> {
        // Held over the rename, so an image another process has open is never replaced.
        let held = match OpenOptions::new().read(true).write(true).open(path) {
            Ok(file) => {
                lock_exclusive(&file, path)?;
                Some(file)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(e.into()),
        };
        let tmp = path.with_extension("cut-tmp");
        let g = image.geometry().clone();
        let mut out = FileStore::create(&tmp, &g, image.oob_record_bytes(), identity)?;
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
        if let Some(reason) = out.failure() {
            return Err(out.failed_error(reason));
        }
        drop(out);
        std::fs::rename(&tmp, path)?;
        drop(held);
        Ok(())
    }

    /// Reads and checks an image's header without opening the image (`mobius info --image`;
    /// it takes no lock, so it also reads an image another process holds).
    pub fn read_header(path: &Path) -> Result<ImageHeader, FlashError> {
        Self::header_of(&File::open(path)?, path)
    }

    fn header_of(file: &File, path: &Path) -> Result<ImageHeader, FlashError> {
        let mut h = vec![0u8; HEADER_USED];
        let n = read_up_to(file, &mut h)?;
        h.truncate(n);
        decode_header(&h, path)
    }

    /// Decodes an image header from its first bytes (the decoder fuzz table's entry point).
    pub fn decode_header(bytes: &[u8]) -> Result<ImageHeader, FlashError> {
        decode_header(bytes, Path::new("<header bytes>"))
    }

    /// Bytes of the header that carry fields (the rest of its 4096 bytes are zero).
    pub const HEADER_FIELD_BYTES: usize = HEADER_USED;

    /// Opens an existing image, checking that it was made for `geometry`, `oob_record_bytes`
    /// and by the design and parameters `identity` names. The image's exclusive lock is taken
    /// first ([`crate::image_lock`]): an image another process holds is refused with
    /// [`FlashError::ImageLocked`] before a byte of it is read.
    pub fn open(
        path: &Path,
        geometry: &Geometry,
        oob_record_bytes: u32,
        identity: &ImageIdentity,
    ) -> Result<Self, FlashError> {
        let err = |reason: String| FlashError::Image {
            path: path.display().to_string(),
            reason,
        };
        let file = OpenOptions::new().read(true).write(true).open(path)?;
        lock_exclusive(&file, path)?;
        let header = Self::header_of(&file, path)?;
        if header.identity != *identity {
            return Err(FlashError::ImageForeign {
                path: path.display().to_string(),
                found: header.identity.to_string(),
                wanted: identity.to_string(),
            });
        }
        if header.geometry != *geometry || header.oob_record_bytes != oob_record_bytes {
            return Err(FlashError::ImageGeometryMismatch {
                path: path.display().to_string(),
                found: describe(&header.geometry, header.oob_record_bytes),
                wanted: describe(geometry, oob_record_bytes),
            });
        }
        let (states_at, oob_at, _, end) = layout(geometry, oob_record_bytes);
        let len = file.metadata()?.len();
        if len < end {
            return Err(err(format!(
                "file is {len} bytes, the geometry needs {end}"
            )));
        }
        let mut blocks = vec![0u8; geometry.blocks() as usize * 8];
        file.read_exact_at(&mut blocks, HEADER_BYTES)?;
        let mut states = vec![0u8; geometry.pages() as usize];
        file.read_exact_at(&mut states, states_at)?;
        let mut oob = vec![0u8; geometry.pages() as usize * oob_record_bytes as usize];
        file.read_exact_at(&mut oob, oob_at)?;
        if states.iter().any(|&s| s > 2) {
            return Err(err(
                "page state table holds values other than erased/programmed/torn".into(),
            ));
        }
        let blocks = blocks
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
            .collect();
        Ok(Self::assemble(
            path,
            file,
            geometry,
            oob_record_bytes,
            (states, oob),
            blocks,
        ))
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

    /// Records an I/O error: the first one puts the store in its failed, read-only state.
    fn io(&self, r: std::io::Result<()>) {
        if let Err(e) = r {
            self.io_errors
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let _ = self
                .failure
                .set(format!("I/O error on {}: {e}", self.path.display()));
        }
    }

    fn failed(&self) -> bool {
        self.failure.get().is_some()
    }

    fn failed_error(&self, reason: String) -> FlashError {
        FlashError::ImageFailed { reason }
    }
}

/// Reads up to `buf.len()` bytes from the start of `file`; returns how many there were.
fn read_up_to(file: &File, buf: &mut [u8]) -> Result<usize, FlashError> {
    let mut n = 0;
    while n < buf.len() {
        match file.read_at(&mut buf[n..], n as u64)? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
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
    fn data_bytes(&self, ppn: Ppn, at: usize, out: &mut [u8]) {
        // Only the bytes asked for (DFTL reads one entry of a translation page per miss).
        let page_at = self.data_at + ppn.0 as u64 * self.geometry.page_bytes as u64;
        self.io(self.file.read_exact_at(out, page_at + at as u64));
    }
    fn oob(&self, ppn: Ppn, out: &mut [u8]) {
        let r = self.oob_record_bytes as usize;
        crate::codec::copy_padded(&self.oob[ppn.0 as usize * r..(ppn.0 as usize + 1) * r], out);
    }
    fn write_page(&mut self, ppn: Ppn, content: &Content, oob: &[u8]) {
        if self.failed() {
            return;
        }
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
        if self.failed() {
            // A program the file did not take reads as torn, as after a power cut.
            self.states[ppn.0 as usize] = PageState::Torn as u8;
            return;
        }
        self.put_state(ppn, PageState::Programmed);
    }
    fn set_torn(&mut self, ppn: Ppn) {
        if !self.failed() {
            self.put_state(ppn, PageState::Torn);
        }
    }
    fn erase_block(&mut self, block: BlockId) {
        if self.failed() {
            return;
        }
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
        if !self.failed() {
            self.erase_torn[block.0 as usize] = true;
            self.put_block(block);
        }
    }
    fn erase_torn(&self, block: BlockId) -> bool {
        self.erase_torn[block.0 as usize]
    }
    fn erase_counts(&self) -> &[u32] {
        &self.erase_counts
    }
    fn sync(&mut self) -> Result<(), FlashError> {
        if let Some(reason) = self.failure() {
            return Err(self.failed_error(reason));
        }
        self.io(self.file.sync_data());
        match self.failure() {
            Some(reason) => Err(self.failed_error(reason)),
            None => Ok(()),
        }
    }
    fn failure(&self) -> Option<String> {
        self.failure.get().cloned()
    }
    fn io_errors(&self) -> u64 {
        self.io_errors.load(std::sync::atomic::Ordering::Relaxed)
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
