//! The on-flash layout: one directory page and three fixed extents.
//!
//! ```text
//! LPN 0                  directory page (this module's codec)
//! LPN 1 ..               extent of the database file        (half of the rest)
//! ..                     extent of the rollback journal      (a quarter)
//! ..                     extent of the write-ahead log       (a quarter)
//! ```
//!
//! Each file is one contiguous extent fixed at format time, so a file's data never moves and
//! no allocation state has to be made crash-safe: only the file's *size* (and whether it exists)
//! changes, and that lives in the directory page. The directory page is written after the data
//! it describes (in the same device transaction in `batch` mode), so a size on flash never
//! covers data that did not reach flash before it (see `store.rs`).
//!
//! Directory page (little-endian): `magic "MOBIUSQL" | version u32 | page_bytes u32 |
//! generation u64 | next_uuid u64 | 3 × (start u32, pages u32, size u64, exists u8) | crc32c u32` over
//! everything before it. A page that is all zeros or unwritten is an unformatted device; any
//! other page that fails the checks is a corrupt or foreign image.

use crate::error::SqlError;
use flash::codec::{self, CorruptRecord, Reader};

/// The three files SQLite keeps for one database.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FileKind {
    Db = 0,
    Journal = 1,
    Wal = 2,
}

impl FileKind {
    pub const ALL: [FileKind; 3] = [FileKind::Db, FileKind::Journal, FileKind::Wal];

    /// The directory's fields of this file, as a damaged-directory error names them: (start
    /// of its extent, end of its extent, size).
    fn fields(self) -> (&'static str, &'static str, &'static str) {
        match self {
            FileKind::Db => (
                "database extent start",
                "database extent end",
                "database size",
            ),
            FileKind::Journal => ("journal extent start", "journal extent end", "journal size"),
            FileKind::Wal => ("wal extent start", "wal extent end", "wal size"),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            FileKind::Db => "database",
            FileKind::Journal => "journal",
            FileKind::Wal => "wal",
        }
    }
}

pub const MAGIC: &[u8; 8] = b"MOBIUSQL";
pub const VERSION: u32 = 1;
const ENTRY_BYTES: usize = 4 + 4 + 8 + 1;
const HEADER_BYTES: usize = 8 + 4 + 4 + 8 + 8;
const ENCODED_BYTES: usize = HEADER_BYTES + 3 * ENTRY_BYTES + 4;

/// One file's extent and size.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Extent {
    /// First logical page of the extent.
    pub start: u32,
    /// Pages in the extent: the file can never grow past `pages × page_bytes`.
    pub pages: u32,
    /// The file's size in bytes.
    pub size: u64,
    pub exists: bool,
}

/// The directory page's contents.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Directory {
    pub page_bytes: u32,
    /// Grows with every directory write; lets a reader see which write it holds.
    pub generation: u64,
    /// First device transaction id not yet handed out: ids are leased in blocks (see
    /// `store.rs`) so no id is used twice across power cuts — a design may still hold a
    /// committed transaction's id on flash.
    pub next_uuid: u64,
    pub files: [Extent; 3],
}

impl Directory {
    /// The layout for a device of `logical_pages` pages: half the pages after the directory
    /// for the database, a quarter each for the journal and the WAL. The main database exists
    /// from the start (empty); the others do not.
    pub fn new(logical_pages: u32, page_bytes: u32) -> Result<Directory, SqlError> {
        if logical_pages < 16 {
            return Err(SqlError::DeviceTooSmall { logical_pages });
        }
        if (page_bytes as usize) < ENCODED_BYTES || !(512..=65536).contains(&page_bytes) {
            return Err(SqlError::PageSize { page_bytes });
        }
        let rest = logical_pages - 1;
        let db = rest / 2;
        let journal = rest / 4;
        let wal = rest - db - journal;
        let extent = |start, pages, exists| Extent {
            start,
            pages,
            size: 0,
            exists,
        };
        Ok(Directory {
            page_bytes,
            generation: 0,
            next_uuid: 1,
            files: [
                extent(1, db, true),
                extent(1 + db, journal, false),
                extent(1 + db + journal, wal, false),
            ],
        })
    }

    pub fn file(&self, kind: FileKind) -> &Extent {
        &self.files[kind as usize]
    }

    pub fn file_mut(&mut self, kind: FileKind) -> &mut Extent {
        &mut self.files[kind as usize]
    }

    /// Largest size `kind` may reach, in bytes.
    pub fn capacity(&self, kind: FileKind) -> u64 {
        self.file(kind).pages as u64 * self.page_bytes as u64
    }

    pub fn encode(&self) -> Box<[u8]> {
        let mut page = vec![0u8; self.page_bytes as usize];
        page[0..8].copy_from_slice(MAGIC);
        page[8..12].copy_from_slice(&VERSION.to_le_bytes());
        page[12..16].copy_from_slice(&self.page_bytes.to_le_bytes());
        page[16..24].copy_from_slice(&self.generation.to_le_bytes());
        page[24..32].copy_from_slice(&self.next_uuid.to_le_bytes());
        for (i, f) in self.files.iter().enumerate() {
            let o = HEADER_BYTES + i * ENTRY_BYTES;
            page[o..o + 4].copy_from_slice(&f.start.to_le_bytes());
            page[o + 4..o + 8].copy_from_slice(&f.pages.to_le_bytes());
            page[o + 8..o + 16].copy_from_slice(&f.size.to_le_bytes());
            page[o + 16] = f.exists as u8;
        }
        let crc_at = ENCODED_BYTES - 4;
        let crc = crc32c::crc32c(&page[..crc_at]);
        page[crc_at..ENCODED_BYTES].copy_from_slice(&crc.to_le_bytes());
        page.into_boxed_slice()
    }

    /// Decodes a directory page of a device with `logical_pages` pages of `page_bytes`.
    /// `Ok(None)`: an unformatted (all-zero) page. Another magic, version or page size is
    /// [`SqlError::Foreign`]; a bad checksum or impossible extents [`SqlError::Corrupt`].
    pub fn decode(
        page: &[u8],
        logical_pages: u32,
        page_bytes: u32,
    ) -> Result<Option<Directory>, SqlError> {
        if page.iter().all(|&b| b == 0) {
            return Ok(None);
        }
        let mut r = Reader::new(page);
        r.magic(MAGIC, "mobius SQLite directory")
            .map_err(SqlError::Foreign)?;
        let mut r = codec::crc_sealed(page, ENCODED_BYTES - 4).map_err(SqlError::Corrupt)?;
        r.skip(MAGIC.len()).map_err(SqlError::Corrupt)?;
        let foreign = |field, found: u32, expected: u32| {
            codec::check_equal(field, found as u64, expected as u64).map_err(SqlError::Foreign)
        };
        foreign(
            "directory version",
            r.u32().map_err(SqlError::Corrupt)?,
            VERSION,
        )?;
        foreign("page size", r.u32().map_err(SqlError::Corrupt)?, page_bytes)?;
        let dir = Self::decode_body(&mut r, page_bytes).map_err(SqlError::Corrupt)?;
        dir.validate(logical_pages).map_err(SqlError::Corrupt)?;
        Ok(Some(dir))
    }

    /// The generation, next uuid and the three extents, after the version and page size.
    fn decode_body(r: &mut Reader, page_bytes: u32) -> Result<Directory, CorruptRecord> {
        let generation = r.u64()?;
        let next_uuid = r.u64()?;
        let mut files = [Extent::default(); 3];
        for f in files.iter_mut() {
            *f = Extent {
                start: r.u32()?,
                pages: r.u32()?,
                size: r.u64()?,
                exists: r.u8()? != 0,
            };
        }
        Ok(Directory {
            page_bytes,
            generation,
            next_uuid,
            files,
        })
    }

    /// Extents inside the device, after the directory, not overlapping; sizes within them.
    fn validate(&self, logical_pages: u32) -> Result<(), CorruptRecord> {
        let mut spans: Vec<(u64, u64)> = Vec::new();
        for (kind, f) in FileKind::ALL.iter().zip(&self.files) {
            let (start_field, end_field, size_field) = kind.fields();
            let end = f.start as u64 + f.pages as u64;
            codec::check_below(end_field, end, logical_pages as u64 + 1)?;
            if f.start == 0 {
                return Err(CorruptRecord::Mismatch {
                    field: start_field,
                    found: 0,
                    expected: 1,
                });
            }
            codec::check_below(size_field, f.size, self.capacity(*kind) + 1)?;
            if let Some(&(_, other_end)) = spans
                .iter()
                .find(|&&(s, e)| (f.start as u64) < e && s < end)
            {
                return Err(CorruptRecord::OutOfRange {
                    field: start_field,
                    value: f.start as u64,
                    limit: other_end,
                });
            }
            spans.push((f.start as u64, end));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_round_trips() {
        let mut d = Directory::new(1000, 4096).unwrap();
        d.generation = 7;
        d.next_uuid = 1 << 40;
        d.file_mut(FileKind::Journal).size = 12345;
        d.file_mut(FileKind::Journal).exists = true;
        let page = d.encode();
        assert_eq!(Directory::decode(&page, 1000, 4096).unwrap(), Some(d));
    }

    #[test]
    fn extents_split_the_device_without_overlap() {
        let d = Directory::new(1001, 4096).unwrap();
        let pages: u32 = d.files.iter().map(|f| f.pages).sum();
        assert_eq!(pages, 1000);
        assert_eq!(d.file(FileKind::Db).start, 1);
        assert_eq!(
            d.file(FileKind::Wal).start + d.file(FileKind::Wal).pages,
            1001
        );
    }

    #[test]
    fn zeros_are_unformatted_and_garbage_is_an_error() {
        assert_eq!(Directory::decode(&[0u8; 4096], 1000, 4096).unwrap(), None);
        assert!(matches!(
            Directory::decode(&[7u8; 4096], 1000, 4096),
            Err(SqlError::Foreign(_))
        ));
        let mut page = Directory::new(1000, 4096).unwrap().encode();
        page[40] ^= 1;
        assert!(matches!(
            Directory::decode(&page, 1000, 4096),
            Err(SqlError::Corrupt(_))
        ));
    }

    #[test]
    fn a_directory_for_another_device_is_refused() {
        let page = Directory::new(1000, 4096).unwrap().encode();
        assert!(matches!(
            Directory::decode(&page, 500, 4096),
            Err(SqlError::Corrupt(_))
        ));
        assert!(matches!(
            Directory::decode(&page, 1000, 8192),
            Err(SqlError::Foreign(_))
        ));
    }

    #[test]
    fn decoding_arbitrary_bytes_never_panics() {
        use rand::{RngExt, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
        let good = Directory::new(1000, 4096).unwrap().encode();
        for _ in 0..20_000 {
            let mut page = good.to_vec();
            for _ in 0..rng.random_range(1..8) {
                let i = rng.random_range(0..ENCODED_BYTES);
                page[i] = rng.random();
            }
            let _ = Directory::decode(&page, 1000, 4096);
        }
    }
}
