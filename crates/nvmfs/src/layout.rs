//! The NVRAM layout of NVMFS (paper §III-E), written down once.
//!
//! All integers are little-endian and fixed width. The NVRAM file is divided into 4 KB pages:
//! ```text
//! page 0                superblock (below)
//! inode_table_at        inode_count x 128 B inodes, indexed by inode number (0 unused, 1 = root)
//! nvram_bitmap_at       1 bit per NVRAM data page (1 = used)
//! ssd_bitmap_at         1 bit per SSD block (1 = holds a valid copy)
//! page_records_at       32 B per NVRAM data page: LRU list, LRU stamp, owner, page_info
//! ssd_owners_at         8 B per SSD block: owning (inode, file block) — the extent info of §III-C
//! extent_flags_at       4 B per SSD extent: bit 0 = fragmented
//! redo_at               one page: the cleaning redo log ([R])
//! data_at               data_pages x 4 KB: file data, directory data, indirect blocks
//! ```
//! Superblock (page 0):
//! ```text
//!   0  magic            8  b"NVMFS\0\0\x01"
//!   8  format_version   u32 (= 1)
//!  12  page_bytes       u32 (= 4096)
//!  16  nvram_bytes      u64
//!  24  ssd_blocks       u64  (multiple of 128)
//!  32  inode_count      u32
//!  36  data_pages       u32
//!  40  inode_table_at   u32  (page numbers of each region)
//!  44  nvram_bitmap_at  u32
//!  48  ssd_bitmap_at    u32
//!  52  page_records_at  u32
//!  56  ssd_owners_at    u32
//!  60  extent_flags_at  u32
//!  64  redo_at          u32
//!  68  data_at          u32
//!  72  dirty_capacity   u32  (pages the dirty list may hold, [R])
//!  76  crc32c of bytes 0..76
//! 128  clean_unmount    u32  (1 after an orderly unmount; 0 while mounted)
//! 132  lists_state      u32  (0 consistent, 1 an LRU/page_info update is in progress)
//! ```

use crate::error::{NvmfsError, Result};
use flash::codec::{self, CorruptRecord, Reader};

pub const PAGE_BYTES: u64 = 4096;
pub const INODE_BYTES: u64 = 128;
pub const PAGE_RECORD_BYTES: u64 = 32;
pub const SSD_OWNER_BYTES: u64 = 8;
/// Blocks per SSD extent: 128 x 4 KB = 512 KB, the minimum flush unit (§III-C).
pub const EXTENT_BLOCKS: u64 = 128;
pub const ROOT_INO: u32 = 1;
/// Direct block pointers per inode.
pub const DIRECT_POINTERS: usize = 8;
/// Block pointers per indirect block.
pub const POINTERS_PER_BLOCK: u64 = PAGE_BYTES / 8;
pub const MAX_FILE_BLOCKS: u64 =
    DIRECT_POINTERS as u64 + POINTERS_PER_BLOCK + POINTERS_PER_BLOCK * POINTERS_PER_BLOCK;
/// The largest file, in bytes: every block a file's pointers can reach.
pub const MAX_FILE_BYTES: u64 = MAX_FILE_BLOCKS * PAGE_BYTES;

const MAGIC: [u8; 8] = *b"NVMFS\0\0\x01";
const FORMAT_VERSION: u32 = 1;
pub const SB_CLEAN_UNMOUNT: u64 = 128;
pub const SB_LISTS_STATE: u64 = 132;

pub fn get_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}
pub fn get_u64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}
pub fn put_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}
pub fn put_u64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

/// A 64-bit block address: NVRAM and SSD addresses are distinct (§III-A). 0 is a hole.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct BlockAddr(pub u64);

const NVRAM_TAG: u64 = 1 << 63;
const SSD_TAG: u64 = 1 << 62;
const TAG_MASK: u64 = NVRAM_TAG | SSD_TAG;

impl BlockAddr {
    pub const HOLE: BlockAddr = BlockAddr(0);
    pub fn nvram(page: u32) -> BlockAddr {
        BlockAddr(NVRAM_TAG | page as u64)
    }
    pub fn ssd(lba: u64) -> BlockAddr {
        assert!(lba < SSD_TAG);
        BlockAddr(SSD_TAG | lba)
    }
    pub fn is_hole(self) -> bool {
        self.0 == 0
    }
    /// The NVRAM data page, when the block lives on NVRAM. A page number beyond 32 bits is
    /// no address [`nvram`](Self::nvram) makes: it is not taken for its low bits (a damaged
    /// pointer would then pass recovery as another page's).
    pub fn as_nvram(self) -> Option<u32> {
        let page = u32::try_from(self.0 & !TAG_MASK).ok()?;
        (self.0 & TAG_MASK == NVRAM_TAG).then_some(page)
    }
    /// The SSD block (logical page of the SSD), when the block lives on SSD.
    pub fn as_ssd(self) -> Option<u64> {
        (self.0 & TAG_MASK == SSD_TAG).then_some(self.0 & !TAG_MASK)
    }
    pub fn is_valid_encoding(self) -> bool {
        self.is_hole() || self.as_nvram().is_some() || self.as_ssd().is_some()
    }
}

/// Where every region starts, in NVRAM pages, and how big the file system is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Superblock {
    pub nvram_bytes: u64,
    pub ssd_blocks: u64,
    pub inode_count: u32,
    pub data_pages: u32,
    pub inode_table_at: u32,
    pub nvram_bitmap_at: u32,
    pub ssd_bitmap_at: u32,
    pub page_records_at: u32,
    pub ssd_owners_at: u32,
    pub extent_flags_at: u32,
    pub redo_at: u32,
    pub data_at: u32,
    pub dirty_capacity: u32,
}

fn pages_for(bytes: u64) -> u32 {
    bytes.div_ceil(PAGE_BYTES) as u32
}

impl Superblock {
    /// Plans the layout of an NVRAM of `nvram_bytes` over an SSD of `ssd_blocks` blocks.
    /// `dirty_share` is the fraction of data pages the dirty list may hold ([R]).
    pub fn plan(
        nvram_bytes: u64,
        ssd_blocks: u64,
        inode_count: u32,
        dirty_share: f64,
    ) -> Result<Superblock> {
        let ssd_blocks = ssd_blocks / EXTENT_BLOCKS * EXTENT_BLOCKS;
        if ssd_blocks == 0 {
            return Err(NvmfsError::InvalidArgument(
                "the SSD holds less than one 512 KB extent".into(),
            ));
        }
        if !(dirty_share > 0.0 && dirty_share <= 1.0) {
            return Err(NvmfsError::InvalidArgument(format!(
                "dirty share {dirty_share} is not in (0, 1]"
            )));
        }
        let total_pages = (nvram_bytes / PAGE_BYTES) as u32;
        let inode_table_at = 1;
        let nvram_bitmap_at = inode_table_at + pages_for(inode_count as u64 * INODE_BYTES);
        // Data pages and the per-page regions depend on each other: solve by bounding with
        // the whole NVRAM, then taking what remains.
        let bound = total_pages as u64;
        let ssd_bitmap_at = nvram_bitmap_at + pages_for(bound.div_ceil(8));
        let page_records_at = ssd_bitmap_at + pages_for(ssd_blocks.div_ceil(8));
        let ssd_owners_at = page_records_at + pages_for(bound * PAGE_RECORD_BYTES);
        let extent_flags_at = ssd_owners_at + pages_for(ssd_blocks * SSD_OWNER_BYTES);
        let redo_at = extent_flags_at + pages_for(ssd_blocks / EXTENT_BLOCKS * 4);
        let data_at = redo_at + 1;
        if total_pages < data_at + 16 {
            return Err(NvmfsError::InvalidArgument(format!(
                "NVRAM of {nvram_bytes} bytes leaves fewer than 16 data pages after {data_at} metadata pages"
            )));
        }
        let data_pages = total_pages - data_at;
        let dirty_capacity = ((data_pages as f64 * dirty_share) as u32).max(4);
        Ok(Superblock {
            nvram_bytes: total_pages as u64 * PAGE_BYTES,
            ssd_blocks,
            inode_count,
            data_pages,
            inode_table_at,
            nvram_bitmap_at,
            ssd_bitmap_at,
            page_records_at,
            ssd_owners_at,
            extent_flags_at,
            redo_at,
            data_at,
            dirty_capacity,
        })
    }

    pub fn extents(&self) -> u64 {
        self.ssd_blocks / EXTENT_BLOCKS
    }

    pub fn encode(&self, b: &mut [u8]) {
        b[0..8].copy_from_slice(&MAGIC);
        put_u32(b, 8, FORMAT_VERSION);
        put_u32(b, 12, PAGE_BYTES as u32);
        put_u64(b, 16, self.nvram_bytes);
        put_u64(b, 24, self.ssd_blocks);
        let fields = [
            self.inode_count,
            self.data_pages,
            self.inode_table_at,
            self.nvram_bitmap_at,
            self.ssd_bitmap_at,
            self.page_records_at,
            self.ssd_owners_at,
            self.extent_flags_at,
            self.redo_at,
            self.data_at,
            self.dirty_capacity,
        ];
        for (i, v) in fields.iter().enumerate() {
            put_u32(b, 32 + 4 * i, *v);
        }
        let crc = crc32c::crc32c(&b[0..76]);
        put_u32(b, 76, crc);
    }

    /// Decodes and checks page 0: magic, checksum, format version and page size, then the
    /// regions: they must be exactly where [`plan`](Self::plan) puts them for the recorded
    /// sizes, so no offset read from a damaged image can point outside the NVRAM.
    pub fn decode(b: &[u8]) -> Result<Superblock> {
        Self::decode_record(b).map_err(|e| NvmfsError::Corrupt(format!("superblock: {e}")))
    }

    fn decode_record(b: &[u8]) -> std::result::Result<Superblock, CorruptRecord> {
        Reader::new(b).magic(&MAGIC, "NVMFS superblock")?;
        let mut r = codec::crc_sealed(b, 76)?;
        r.skip(MAGIC.len())?;
        let version = r.u32()?;
        codec::check_equal("format version", version as u64, FORMAT_VERSION as u64)?;
        codec::check_equal("page size", r.u32()? as u64, PAGE_BYTES)?;
        let nvram_bytes = r.u64()?;
        let ssd_blocks = r.u64()?;
        let mut f = [0u32; 11];
        for v in f.iter_mut() {
            *v = r.u32()?;
        }
        let sb = Superblock {
            nvram_bytes,
            ssd_blocks,
            inode_count: f[0],
            data_pages: f[1],
            inode_table_at: f[2],
            nvram_bitmap_at: f[3],
            ssd_bitmap_at: f[4],
            page_records_at: f[5],
            ssd_owners_at: f[6],
            extent_flags_at: f[7],
            redo_at: f[8],
            data_at: f[9],
            dirty_capacity: f[10],
        };
        sb.check_regions()?;
        Ok(sb)
    }

    /// The regions are where `plan` puts them for these sizes, and the dirty list fits.
    fn check_regions(&self) -> std::result::Result<(), CorruptRecord> {
        let planned = Superblock::plan(self.nvram_bytes, self.ssd_blocks, self.inode_count, 1.0)
            .map_err(|_| CorruptRecord::OutOfRange {
                field: "NVRAM size for its SSD and inode count",
                value: self.nvram_bytes,
                limit: 0,
            })?;
        let region = |s: &Superblock| {
            [
                s.nvram_bytes,
                s.ssd_blocks,
                s.data_pages as u64,
                s.inode_table_at as u64,
                s.nvram_bitmap_at as u64,
                s.ssd_bitmap_at as u64,
                s.page_records_at as u64,
                s.ssd_owners_at as u64,
                s.extent_flags_at as u64,
                s.redo_at as u64,
                s.data_at as u64,
            ]
        };
        const NAMES: [&str; 11] = [
            "nvram_bytes",
            "ssd_blocks",
            "data_pages",
            "inode_table_at",
            "nvram_bitmap_at",
            "ssd_bitmap_at",
            "page_records_at",
            "ssd_owners_at",
            "extent_flags_at",
            "redo_at",
            "data_at",
        ];
        for ((name, found), expected) in NAMES.iter().zip(region(self)).zip(region(&planned)) {
            codec::check_equal(name, found, expected)?;
        }
        codec::check_below(
            "dirty_capacity",
            self.dirty_capacity as u64,
            self.data_pages.max(4) as u64 + 1,
        )
    }
}

/// File type bits of `Inode::mode` (POSIX values).
pub const S_IFMT: u32 = 0o170000;
pub const S_IFREG: u32 = 0o100000;
pub const S_IFDIR: u32 = 0o040000;
pub const S_IFLNK: u32 = 0o120000;

/// A fixed 128-byte inode (§III-E).
/// ```text
///   0 mode u32 (0 = free)   4 nlink u32        8 size u64
///  16 nvram_blocks u32     20 ssd_blocks u32   24 mtime_ns u64   32 ctime_ns u64
///  40 direct[8] u64 (BlockAddr)               104 single indirect u64 (NVRAM)
/// 112 double indirect u64 (NVRAM)             120 uid u32       124 gid u32
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Inode {
    pub mode: u32,
    pub nlink: u32,
    pub size: u64,
    pub nvram_blocks: u32,
    pub ssd_blocks: u32,
    pub mtime_ns: u64,
    pub ctime_ns: u64,
    pub direct: [BlockAddr; DIRECT_POINTERS],
    pub indirect: BlockAddr,
    pub double_indirect: BlockAddr,
    pub uid: u32,
    pub gid: u32,
}

pub const INODE_SIZE_AT: usize = 8;
pub const INODE_NVRAM_BLOCKS_AT: usize = 16;
pub const INODE_SSD_BLOCKS_AT: usize = 20;
pub const INODE_DIRECT_AT: usize = 40;
pub const INODE_INDIRECT_AT: usize = 104;
pub const INODE_DOUBLE_AT: usize = 112;

impl Inode {
    pub fn is_dir(&self) -> bool {
        self.mode & S_IFMT == S_IFDIR
    }
    pub fn encode(&self, b: &mut [u8]) {
        put_u32(b, 0, self.mode);
        put_u32(b, 4, self.nlink);
        put_u64(b, 8, self.size);
        put_u32(b, 16, self.nvram_blocks);
        put_u32(b, 20, self.ssd_blocks);
        put_u64(b, 24, self.mtime_ns);
        put_u64(b, 32, self.ctime_ns);
        for (i, a) in self.direct.iter().enumerate() {
            put_u64(b, 40 + 8 * i, a.0);
        }
        put_u64(b, 104, self.indirect.0);
        put_u64(b, 112, self.double_indirect.0);
        put_u32(b, 120, self.uid);
        put_u32(b, 124, self.gid);
    }
    pub fn decode(b: &[u8]) -> std::result::Result<Inode, CorruptRecord> {
        let mut r = Reader::new(b);
        let (mode, nlink, size) = (r.u32()?, r.u32()?, r.u64()?);
        let (nvram_blocks, ssd_blocks) = (r.u32()?, r.u32()?);
        let (mtime_ns, ctime_ns) = (r.u64()?, r.u64()?);
        let mut direct = [BlockAddr::HOLE; DIRECT_POINTERS];
        for a in direct.iter_mut() {
            *a = BlockAddr(r.u64()?);
        }
        Ok(Inode {
            mode,
            nlink,
            size,
            nvram_blocks,
            ssd_blocks,
            mtime_ns,
            ctime_ns,
            direct,
            indirect: BlockAddr(r.u64()?),
            double_indirect: BlockAddr(r.u64()?),
            uid: r.u32()?,
            gid: r.u32()?,
        })
    }
}

/// Which list an NVRAM data page is on (§III-B).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum PageList {
    Free = 0,
    Dirty = 1,
    Clean = 2,
    /// An indirect block: metadata, always on NVRAM, never on an LRU list.
    Indirect = 3,
}

impl PageList {
    pub fn from_u8(v: u8) -> Option<PageList> {
        Some(match v {
            0 => PageList::Free,
            1 => PageList::Dirty,
            2 => PageList::Clean,
            3 => PageList::Indirect,
            _ => return None,
        })
    }
}

/// Per NVRAM data page record (32 B): the persistent LRU lists and `page_info` (§III-B).
/// ```text
///  0 list u8   1..4 reserved   4 owner_ino u32   8 owner_block u32   12 reserved u32
/// 16 stamp u64 (LRU order within the list: larger = more recently used)
/// 24 page_info u64 (BlockAddr of the second valid copy on SSD, 0 = none)
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageRecord {
    pub list: PageList,
    pub owner_ino: u32,
    pub owner_block: u32,
    pub stamp: u64,
    pub page_info: BlockAddr,
}

impl PageRecord {
    pub const FREE: PageRecord = PageRecord {
        list: PageList::Free,
        owner_ino: 0,
        owner_block: 0,
        stamp: 0,
        page_info: BlockAddr::HOLE,
    };
    pub fn encode(&self, b: &mut [u8]) {
        b[0] = self.list as u8;
        b[1..4].fill(0);
        put_u32(b, 4, self.owner_ino);
        put_u32(b, 8, self.owner_block);
        put_u32(b, 12, 0);
        put_u64(b, 16, self.stamp);
        put_u64(b, 24, self.page_info.0);
    }
    pub fn decode(b: &[u8]) -> std::result::Result<PageRecord, CorruptRecord> {
        let mut r = Reader::new(b);
        let list = r.kind("page list", PageList::from_u8)?;
        r.skip(3)?;
        let (owner_ino, owner_block) = (r.u32()?, r.u32()?);
        r.skip(4)?;
        Ok(PageRecord {
            list,
            owner_ino,
            owner_block,
            stamp: r.u64()?,
            page_info: BlockAddr(r.u64()?),
        })
    }
}

/// A directory entry (128 B) inside a directory file (directories are ordinary files, §III-E).
/// ```text
///  0 ino u32 (0 = empty slot)   4 name_len u16   6 kind u8 (1 file, 2 dir)   7 reserved
///  8 name [120]
/// ```
pub const DIRENT_BYTES: u64 = 128;
pub const NAME_MAX: usize = 120;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirEntry {
    pub ino: u32,
    pub kind_dir: bool,
    pub name: Vec<u8>,
}

impl DirEntry {
    pub fn encode(&self, b: &mut [u8]) {
        assert!(self.name.len() <= NAME_MAX);
        put_u32(b, 0, self.ino);
        b[4..6].copy_from_slice(&(self.name.len() as u16).to_le_bytes());
        b[6] = if self.kind_dir { 2 } else { 1 };
        b[7] = 0;
        b[8..8 + self.name.len()].copy_from_slice(&self.name);
        b[8 + self.name.len()..128].fill(0);
    }
    /// `Ok(None)` for an empty slot; an error for a name longer than a slot holds.
    pub fn decode(b: &[u8]) -> std::result::Result<Option<DirEntry>, CorruptRecord> {
        let mut r = Reader::new(b);
        let ino = r.u32()?;
        if ino == 0 {
            return Ok(None);
        }
        let len = r.u16()?;
        codec::check_below("name length", len as u64, NAME_MAX as u64 + 1)?;
        let kind_dir = r.u8()? == 2;
        r.skip(1)?;
        Ok(Some(DirEntry {
            ino,
            kind_dir,
            name: r.bytes(len as usize)?.to_vec(),
        }))
    }
}

/// The cleaning redo log ([R]), one page at `redo_at`:
/// ```text
///  0 state u32 (0 empty, 1 committed)   4 count u32   8 extent u64
/// 16 crc32c of bytes 20..20+16*count, then of bytes 0..16   (u32)
/// 20 entries: count x { ino u32, block u32, new_addr u64 }
/// ```
/// A committed log is applied idempotently at mount: every entry repoints (ino, block) to
/// `new_addr`, then every SSD block of `extent` is released.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RedoLog {
    pub extent: u64,
    pub entries: Vec<RedoEntry>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RedoEntry {
    pub ino: u32,
    pub block: u32,
    pub new_addr: BlockAddr,
}

pub const REDO_MAX_ENTRIES: usize = EXTENT_BLOCKS as usize;
pub const REDO_STATE_AT: usize = 0;

impl RedoLog {
    fn crc(b: &[u8], count: usize) -> u32 {
        let body = crc32c::crc32c(&b[20..20 + 16 * count]);
        crc32c::crc32c_append(body, &b[4..16])
    }
    /// Writes everything but the state word (the commit point is written separately, last).
    pub fn encode_body(&self, b: &mut [u8]) {
        assert!(self.entries.len() <= REDO_MAX_ENTRIES);
        put_u32(b, 4, self.entries.len() as u32);
        put_u64(b, 8, self.extent);
        for (i, e) in self.entries.iter().enumerate() {
            let at = 20 + 16 * i;
            put_u32(b, at, e.ino);
            put_u32(b, at + 4, e.block);
            put_u64(b, at + 8, e.new_addr.0);
        }
        let crc = Self::crc(b, self.entries.len());
        put_u32(b, 16, crc);
    }
    /// The committed log; an error when the log is empty (its state word is not "committed")
    /// or was never committed intact.
    pub fn decode(b: &[u8]) -> std::result::Result<RedoLog, CorruptRecord> {
        let mut r = Reader::new(b);
        codec::check_equal("redo log state", r.u32()? as u64, 1)?;
        let count = r.below("redo log count", REDO_MAX_ENTRIES as u32 + 1)? as usize;
        let extent = r.u64()?;
        let stored = r.u32()?;
        let mut entries = Vec::with_capacity(count);
        for _ in 0..count {
            entries.push(RedoEntry {
                ino: r.u32()?,
                block: r.u32()?,
                new_addr: BlockAddr(r.u64()?),
            });
        }
        let computed = Self::crc(b, count);
        if stored != computed {
            return Err(CorruptRecord::BadChecksum { stored, computed });
        }
        Ok(RedoLog { extent, entries })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn superblock_round_trip_and_checksum() {
        let sb = Superblock::plan(64 << 20, 3500, 1024, 1.0).unwrap();
        assert_eq!(sb.ssd_blocks, 3456);
        assert!(sb.data_at > sb.redo_at && sb.redo_at > sb.extent_flags_at);
        let mut b = vec![0u8; 4096];
        sb.encode(&mut b);
        assert_eq!(Superblock::decode(&b).unwrap(), sb);
        b[20] ^= 1;
        assert!(matches!(
            Superblock::decode(&b),
            Err(NvmfsError::Corrupt(_))
        ));
    }

    /// A region offset the checksum covers but `plan` would not give (a damaged image whose
    /// checksum was rewritten, or a foreign writer) is refused before anything indexes by it.
    #[test]
    fn a_region_outside_the_plan_is_refused() {
        let sb = Superblock::plan(64 << 20, 3500, 1024, 0.5).unwrap();
        let mut b = vec![0u8; 4096];
        sb.encode(&mut b);
        assert_eq!(
            Superblock::decode(&b).unwrap(),
            sb,
            "a dirty share below 1 decodes"
        );
        let mut far = sb.clone();
        far.page_records_at = u32::MAX - 8;
        far.encode(&mut b);
        let err = Superblock::decode(&b).unwrap_err().to_string();
        assert!(err.contains("page_records_at"), "{err}");
        let mut v2 = vec![0u8; 4096];
        sb.encode(&mut v2);
        put_u32(&mut v2, 8, 2);
        let crc = crc32c::crc32c(&v2[0..76]);
        put_u32(&mut v2, 76, crc);
        let err = Superblock::decode(&v2).unwrap_err().to_string();
        assert!(err.contains("format version is 2, 1 expected"), "{err}");
    }

    #[test]
    fn inode_is_128_bytes_and_round_trips() {
        let mut i = Inode {
            mode: S_IFREG | 0o644,
            nlink: 1,
            size: 123_456_789,
            nvram_blocks: 7,
            ssd_blocks: 9,
            mtime_ns: 11,
            ctime_ns: 12,
            indirect: BlockAddr::nvram(5),
            double_indirect: BlockAddr::nvram(6),
            uid: 1000,
            gid: 100,
            ..Default::default()
        };
        i.direct[0] = BlockAddr::ssd(77);
        i.direct[7] = BlockAddr::nvram(3);
        let mut b = [0u8; INODE_BYTES as usize];
        i.encode(&mut b);
        assert_eq!(Inode::decode(&b), Ok(i));
        assert_eq!(get_u64(&b, INODE_DIRECT_AT), BlockAddr::ssd(77).0);
        assert_eq!(get_u64(&b, INODE_SIZE_AT), 123_456_789);
    }

    #[test]
    fn addresses_are_distinct() {
        let n = BlockAddr::nvram(42);
        let s = BlockAddr::ssd(42);
        assert_ne!(n, s);
        assert_eq!(n.as_nvram(), Some(42));
        assert_eq!(n.as_ssd(), None);
        assert_eq!(s.as_ssd(), Some(42));
        assert_eq!(s.as_nvram(), None);
        assert!(BlockAddr::HOLE.is_hole() && BlockAddr::HOLE.is_valid_encoding());
        assert!(!BlockAddr(3).is_valid_encoding());
        // A bit set above an NVRAM page's 32 bits: no address, not page 42.
        let damaged = BlockAddr(n.0 | 1 << 46);
        assert_eq!(damaged.as_nvram(), None);
        assert!(!damaged.is_valid_encoding());
    }

    #[test]
    fn page_record_round_trip() {
        let r = PageRecord {
            list: PageList::Clean,
            owner_ino: 9,
            owner_block: 513,
            stamp: 1 << 40,
            page_info: BlockAddr::ssd(1000),
        };
        let mut b = [0u8; PAGE_RECORD_BYTES as usize];
        r.encode(&mut b);
        assert_eq!(PageRecord::decode(&b), Ok(r));
        b[0] = 9;
        assert!(matches!(
            PageRecord::decode(&b),
            Err(CorruptRecord::UnknownKind { value: 9, .. })
        ));
    }

    #[test]
    fn dirent_round_trip() {
        let e = DirEntry {
            ino: 17,
            kind_dir: true,
            name: b"hello.txt".to_vec(),
        };
        let mut b = [0xffu8; DIRENT_BYTES as usize];
        e.encode(&mut b);
        assert_eq!(DirEntry::decode(&b), Ok(Some(e)));
        b[4] = 121;
        assert!(DirEntry::decode(&b).is_err(), "a name longer than a slot");
        assert_eq!(DirEntry::decode(&[0u8; 128]), Ok(None));
    }

    #[test]
    fn redo_log_round_trip_commit_and_damage() {
        let log = RedoLog {
            extent: 3,
            entries: vec![
                RedoEntry {
                    ino: 2,
                    block: 0,
                    new_addr: BlockAddr::nvram(1),
                },
                RedoEntry {
                    ino: 5,
                    block: 600,
                    new_addr: BlockAddr::nvram(2),
                },
            ],
        };
        let mut b = vec![0u8; 4096];
        log.encode_body(&mut b);
        assert!(RedoLog::decode(&b).is_err(), "not committed yet");
        put_u32(&mut b, REDO_STATE_AT, 1);
        assert_eq!(RedoLog::decode(&b), Ok(log));
        b[30] ^= 1;
        assert!(matches!(
            RedoLog::decode(&b),
            Err(CorruptRecord::BadChecksum { .. })
        ));
    }
}
