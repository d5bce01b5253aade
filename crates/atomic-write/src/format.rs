//! On-flash formats of the log engine shared by Atomic-Write and LightTx (all integers
//! little-endian, every record checksummed with crc32c).
//!
//! **OOB record** (28 bytes, every page the engine programs):
//! ```text
//! 0  kind      u8   1 data, 2 translation page, 3 GTD page, 4 root, 5 commit record
//! 1  flag      u8   data page: Atomic-Write commit bit (1 = closes the pages before it)
//! 2  pad       [u8; 2]
//! 4  id        u32  LPN (data), tvpn (translation), GTD index (GTD), tx id (commit record)
//! 8  seq       u64  data and commit records: the log sequence number (GC copies keep it);
//!                   tree pages and roots: the metadata sequence number
//! 16 tx        u32  data page: LightTx transaction id (0 = plain write; Atomic-Write: always 0)
//! 20 data_crc  u32  crc32c of the data area (metadata pages; 0 for host pages)
//! 24 crc       u32  crc32c of bytes 0..24
//! ```
//! **Translation / GTD page**: `page_bytes / 4` entries, entry *i* = PPN (`u32::MAX` = none).
//!
//! **Root** (one page in the root ring; LightTx calls it the zone record):
//! ```text
//! 0  magic     [u8; 8] = "MOBLOGRT"
//! 8  root_seq  u64
//! 16 tail_seq  u64   data pages with seq >= tail_seq are not (all) in the tree: scan them
//! 24 next_seq  u64
//! 32 next_tx   u32
//! 36 n_gtd     u32
//! 40 n_scan    u32
//! 44 n_window  u32
//! 48 n_zone    u32
//! 52 gtd       n_gtd × ppn u32
//! .. scan      n_scan × (block u32, from_page u32)   blocks holding pages to scan
//! .. window    n_window × block u32                  free blocks that may be opened before the next root
//! .. zone      n_zone × ppn u32                      zone-record pages (see below)
//! .. crc32c    u32 of everything before
//! ```
//! When scan + window do not fit in one page (LightTx with a zone of thousands of blocks), they are
//! written as a **zone record**: a `Root` encoding holding only `scan` and `window`, cut into
//! page-sized pieces (OOB kind 6, id = piece index), and the root names the pieces in `zone`
//! (its own `scan` and `window` then empty). The record is rewritten only when the window changes.
//! **Commit record** (LightTx; a data-area page): `"MOBLTXCR"`, tx id u32, pages u32,
//! uuid u64, crc32c u32 of the 24 bytes before it.

use flash::codec::{self, CorruptRecord, Reader};
use flash::{BlockId, Ppn};

/// Version of the log engine's (Atomic-Write and LightTx) on-flash format: every record this module encodes. The image header records it
/// (`DesignSpec::format_version`); bump it whenever a record's layout or meaning changes.
pub const FORMAT_VERSION: u32 = 1;

pub const OOB_BYTES: u32 = 28;

pub const KIND_DATA: u8 = 1;
pub const KIND_TRANSLATION: u8 = 2;
pub const KIND_GTD: u8 = 3;
pub const KIND_ROOT: u8 = 4;
pub const KIND_COMMIT: u8 = 5;
pub const KIND_ZONE: u8 = 6;

/// The per-page record in the OOB area.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct OobRecord {
    pub kind: u8,
    pub flag: u8,
    pub id: u32,
    pub seq: u64,
    pub tx: u32,
    pub data_crc: u32,
}

impl OobRecord {
    pub fn encode(&self) -> [u8; OOB_BYTES as usize] {
        let mut b = [0u8; OOB_BYTES as usize];
        b[0] = self.kind;
        b[1] = self.flag;
        b[4..8].copy_from_slice(&self.id.to_le_bytes());
        b[8..16].copy_from_slice(&self.seq.to_le_bytes());
        b[16..20].copy_from_slice(&self.tx.to_le_bytes());
        b[20..24].copy_from_slice(&self.data_crc.to_le_bytes());
        let crc = crc32c::crc32c(&b[..24]);
        b[24..28].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// An error for a short record, a checksum mismatch or an unknown kind.
    pub fn decode(b: &[u8]) -> Result<OobRecord, CorruptRecord> {
        let mut r = codec::crc_sealed(b, 24)?;
        let kind = r.kind("log page kind", |k| {
            (KIND_DATA..=KIND_ZONE).contains(&k).then_some(k)
        })?;
        let flag = r.u8()?;
        r.skip(2)?;
        Ok(OobRecord {
            kind,
            flag,
            id: r.u32()?,
            seq: r.u64()?,
            tx: r.u32()?,
            data_crc: r.u32()?,
        })
    }
}

/// Encodes a translation or GTD page: every entry as a u32, padded with `u32::MAX`.
pub fn encode_entries(entries: &[u32], page_bytes: u32) -> Box<[u8]> {
    let n = (page_bytes / 4) as usize;
    assert!(entries.len() <= n, "too many entries for one page");
    let mut b = vec![0xFFu8; page_bytes as usize].into_boxed_slice();
    for (slot, e) in b.chunks_exact_mut(4).zip(entries) {
        slot.copy_from_slice(&e.to_le_bytes());
    }
    b
}

pub fn decode_entries(b: &[u8]) -> Vec<u32> {
    b.chunks_exact(4)
        .map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes")))
        .collect()
}

const ROOT_MAGIC: [u8; 8] = *b"MOBLOGRT";
const ROOT_HEADER: usize = 52;

/// The root of the mapping tree plus the scan region of the log tail (§ module doc).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Root {
    pub root_seq: u64,
    pub tail_seq: u64,
    pub next_seq: u64,
    pub next_tx: u32,
    pub gtd: Vec<Ppn>,
    pub scan: Vec<(BlockId, u32)>,
    pub window: Vec<BlockId>,
    pub zone: Vec<Ppn>,
}

impl Root {
    pub fn encoded_len(&self) -> usize {
        ROOT_HEADER
            + 4 * self.gtd.len()
            + 8 * self.scan.len()
            + 4 * self.window.len()
            + 4 * self.zone.len()
            + 4
    }

    /// `None` when the root does not fit in a page of `page_bytes`.
    pub fn encode(&self, page_bytes: u32) -> Option<Box<[u8]>> {
        if self.encoded_len() > page_bytes as usize {
            return None;
        }
        let mut b = Vec::with_capacity(self.encoded_len());
        b.extend_from_slice(&ROOT_MAGIC);
        b.extend_from_slice(&self.root_seq.to_le_bytes());
        b.extend_from_slice(&self.tail_seq.to_le_bytes());
        b.extend_from_slice(&self.next_seq.to_le_bytes());
        b.extend_from_slice(&self.next_tx.to_le_bytes());
        b.extend_from_slice(&(self.gtd.len() as u32).to_le_bytes());
        b.extend_from_slice(&(self.scan.len() as u32).to_le_bytes());
        b.extend_from_slice(&(self.window.len() as u32).to_le_bytes());
        b.extend_from_slice(&(self.zone.len() as u32).to_le_bytes());
        for p in &self.gtd {
            b.extend_from_slice(&p.0.to_le_bytes());
        }
        for (blk, from) in &self.scan {
            b.extend_from_slice(&blk.0.to_le_bytes());
            b.extend_from_slice(&from.to_le_bytes());
        }
        for blk in &self.window {
            b.extend_from_slice(&blk.0.to_le_bytes());
        }
        for p in &self.zone {
            b.extend_from_slice(&p.0.to_le_bytes());
        }
        let crc = crc32c::crc32c(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        Some(b.into_boxed_slice())
    }

    pub fn decode(b: &[u8]) -> Result<Root, CorruptRecord> {
        let mut r = Reader::new(b);
        r.magic(&ROOT_MAGIC, "root")?;
        let (root_seq, tail_seq, next_seq) = (r.u64()?, r.u64()?, r.u64()?);
        let next_tx = r.u32()?;
        let (n_gtd, n_scan, n_window, n_zone) = (r.u32()?, r.u32()?, r.u32()?, r.u32()?);
        let mut gtd = Vec::with_capacity(r.capacity(n_gtd, 4));
        for _ in 0..n_gtd {
            gtd.push(Ppn(r.u32()?));
        }
        let mut scan = Vec::with_capacity(r.capacity(n_scan, 8));
        for _ in 0..n_scan {
            scan.push((BlockId(r.u32()?), r.u32()?));
        }
        let mut window = Vec::with_capacity(r.capacity(n_window, 4));
        for _ in 0..n_window {
            window.push(BlockId(r.u32()?));
        }
        let mut zone = Vec::with_capacity(r.capacity(n_zone, 4));
        for _ in 0..n_zone {
            zone.push(Ppn(r.u32()?));
        }
        let len = r.position();
        codec::check_crc(r.u32()?, &b[..len])?;
        Ok(Root {
            root_seq,
            tail_seq,
            next_seq,
            next_tx,
            gtd,
            scan,
            window,
            zone,
        })
    }
}

const COMMIT_MAGIC: [u8; 8] = *b"MOBLTXCR";

/// LightTx commit record: transaction `tx` (of `pages` pages, host `uuid`) committed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CommitRecord {
    pub tx: u32,
    pub pages: u32,
    pub uuid: u64,
}

impl CommitRecord {
    pub fn encode(&self) -> Box<[u8]> {
        let mut b = Vec::with_capacity(28);
        b.extend_from_slice(&COMMIT_MAGIC);
        b.extend_from_slice(&self.tx.to_le_bytes());
        b.extend_from_slice(&self.pages.to_le_bytes());
        b.extend_from_slice(&self.uuid.to_le_bytes());
        let crc = crc32c::crc32c(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        b.into_boxed_slice()
    }

    pub fn decode(b: &[u8]) -> Result<CommitRecord, CorruptRecord> {
        let mut r = Reader::new(b);
        r.magic(&COMMIT_MAGIC, "commit record")?;
        let (tx, pages, uuid) = (r.u32()?, r.u32()?, r.u64()?);
        codec::check_crc(r.u32()?, &b[..24])?;
        Ok(CommitRecord { tx, pages, uuid })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oob_round_trips_and_rejects_damage() {
        let r = OobRecord {
            kind: KIND_DATA,
            flag: 1,
            id: 77,
            seq: 1 << 40,
            tx: 9,
            data_crc: 0xdead_beef,
        };
        let mut b = r.encode();
        assert_eq!(OobRecord::decode(&b).ok(), Some(r));
        b[9] ^= 1;
        assert_eq!(OobRecord::decode(&b).ok(), None);
        assert_eq!(OobRecord::decode(&[0u8; 28]).ok(), None);
    }

    #[test]
    fn entries_round_trip() {
        let e = vec![1, 2, u32::MAX, 7];
        let b = encode_entries(&e, 64);
        let d = decode_entries(&b);
        assert_eq!(&d[..4], &e[..]);
        assert!(d[4..].iter().all(|&x| x == u32::MAX));
    }

    #[test]
    fn root_round_trips_and_rejects_damage() {
        let r = Root {
            root_seq: 5,
            tail_seq: 100,
            next_seq: 120,
            next_tx: 3,
            gtd: vec![Ppn(10), Ppn(11)],
            scan: vec![(BlockId(4), 0), (BlockId(9), 17)],
            window: vec![BlockId(20), BlockId(21), BlockId(22)],
            zone: vec![Ppn(3)],
        };
        let mut b = r.encode(4096).unwrap().to_vec();
        assert_eq!(Root::decode(&b), Ok(r.clone()));
        b.resize(4096, 0xFF);
        assert_eq!(Root::decode(&b), Ok(r.clone()));
        let mut damaged = b.clone();
        damaged[50] ^= 4;
        assert!(
            Root::decode(&damaged).is_err(),
            "a damaged count is refused"
        );
        b[52] ^= 4;
        assert!(matches!(
            Root::decode(&b),
            Err(CorruptRecord::BadChecksum { .. })
        ));
        assert!(r.encode(32).is_none());
    }

    #[test]
    fn commit_record_round_trips() {
        let c = CommitRecord {
            tx: 42,
            pages: 17,
            uuid: 99,
        };
        let mut b = c.encode().to_vec();
        assert_eq!(CommitRecord::decode(&b), Ok(c));
        b[10] ^= 1;
        assert!(CommitRecord::decode(&b).is_err());
    }
}
