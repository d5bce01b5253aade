//! On-flash layouts of TxFlash (TC): the per-page OOB record, the commit record page and the
//! per-block summary page. Every integer is little-endian and fixed width; every record carries a
//! crc32c so a torn or foreign page is never mistaken for metadata (TxFlash Figure 2; checksum and
//! kind bytes [R]).

/// Bytes of OOB each page uses (TxFlash Figure 2(a): LPN 8 + version 4 + tx id 4, plus kind/flag
/// bytes and a crc32c; the paper's 16-byte simulator checksum is replaced by the crc32c, see docs).
use flash::codec::{self, CorruptRecord, Reader};

/// Version of TxFlash traditional commit's on-flash format: every record this module encodes. The image header records it
/// (`DesignSpec::format_version`); bump it whenever a record's layout or meaning changes.
pub const FORMAT_VERSION: u32 = 1;

pub const OOB_BYTES: u32 = 24;

/// What a page holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// An intention record: host data of one logical page (TxFlash §4.1).
    Data = 1,
    /// A commit record page (TC, TxFlash §4.1).
    Commit = 2,
    /// The per-block summary page (TxFlash §4.1, "summary page").
    Summary = 3,
    /// An intention that unmaps the page (our trim; reads as unwritten).
    Tombstone = 4,
}

impl Kind {
    pub(crate) fn from_u8(v: u8) -> Option<Kind> {
        match v {
            1 => Some(Kind::Data),
            2 => Some(Kind::Commit),
            3 => Some(Kind::Summary),
            4 => Some(Kind::Tombstone),
            _ => None,
        }
    }
}

/// Flag bit: a single-page transaction, committed by its own intention (no commit record).
pub const FLAG_SINGLE: u8 = 1;

/// The OOB record of one page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Oob {
    pub kind: Kind,
    pub flags: u8,
    /// Logical page (intentions); 0 for commit and summary pages.
    pub lpn: u64,
    /// Version of the logical page (intentions).
    pub version: u32,
    /// Device transaction id (intentions and commit records).
    pub txid: u32,
}

impl Oob {
    pub fn single(&self) -> bool {
        self.flags & FLAG_SINGLE != 0
    }

    /// Layout: kind u8 | flags u8 | 0 u16 | lpn u64 | version u32 | txid u32 | crc32c u32.
    pub fn encode(&self, out: &mut [u8]) {
        assert!(out.len() >= OOB_BYTES as usize);
        out[0] = self.kind as u8;
        out[1] = self.flags;
        out[2..4].fill(0);
        out[4..12].copy_from_slice(&self.lpn.to_le_bytes());
        out[12..16].copy_from_slice(&self.version.to_le_bytes());
        out[16..20].copy_from_slice(&self.txid.to_le_bytes());
        let crc = crc32c::crc32c(&out[..20]);
        out[20..24].copy_from_slice(&crc.to_le_bytes());
    }

    /// An error when the record is blank, torn or foreign.
    pub fn decode(b: &[u8]) -> Result<Oob, CorruptRecord> {
        let mut r = codec::crc_sealed(b, 20)?;
        let kind = r.kind("txflash page kind", Kind::from_u8)?;
        let flags = r.u8()?;
        r.skip(2)?;
        Ok(Oob {
            kind,
            flags,
            lpn: r.u64()?,
            version: r.u32()?,
            txid: r.u32()?,
        })
    }
}

/// One summary entry: kind u8 | flags u8 | lpn u32 | version u32 | txid u32 (14 bytes; the LPN
/// is narrowed to 32 bits in the summary — a device has < 2^32 logical pages).
pub const ENTRY_BYTES: usize = 14;

/// An entry of a page never programmed (kind 0).
pub const EMPTY_ENTRY: [u8; ENTRY_BYTES] = [0; ENTRY_BYTES];

pub fn encode_entry(o: &Oob) -> [u8; ENTRY_BYTES] {
    let mut e = [0u8; ENTRY_BYTES];
    e[0] = o.kind as u8;
    e[1] = o.flags;
    e[2..6].copy_from_slice(&(o.lpn as u32).to_le_bytes());
    e[6..10].copy_from_slice(&o.version.to_le_bytes());
    e[10..14].copy_from_slice(&o.txid.to_le_bytes());
    e
}

pub fn decode_entry(e: &[u8]) -> Result<Oob, CorruptRecord> {
    let mut r = Reader::new(e);
    Ok(Oob {
        kind: r.kind("summary entry kind", Kind::from_u8)?,
        flags: r.u8()?,
        lpn: r.u32()? as u64,
        version: r.u32()?,
        txid: r.u32()?,
    })
}

const SUMMARY_MAGIC: u32 = 0x4D53_5854; // "TXSM"
const COMMIT_MAGIC: u32 = 0x5243_5854; // "TXCR"

/// Summary page: magic u32 | block u32 | count u32 | count × entry | crc32c u32 over all before.
pub fn encode_summary(block: u32, entries: &[[u8; ENTRY_BYTES]], page_bytes: usize) -> Box<[u8]> {
    let len = 12 + entries.len() * ENTRY_BYTES + 4;
    assert!(
        len <= page_bytes,
        "summary of {} entries does not fit a page",
        entries.len()
    );
    let mut b = vec![0u8; len];
    b[0..4].copy_from_slice(&SUMMARY_MAGIC.to_le_bytes());
    b[4..8].copy_from_slice(&block.to_le_bytes());
    b[8..12].copy_from_slice(&(entries.len() as u32).to_le_bytes());
    for (i, e) in entries.iter().enumerate() {
        b[12 + i * ENTRY_BYTES..12 + (i + 1) * ENTRY_BYTES].copy_from_slice(e);
    }
    let crc = crc32c::crc32c(&b[..len - 4]);
    b[len - 4..].copy_from_slice(&crc.to_le_bytes());
    b.into_boxed_slice()
}

/// Entries of a summary page of `block`, `None` if damaged or of another block.
pub fn decode_summary(b: &[u8], block: u32) -> Result<Vec<Option<Oob>>, CorruptRecord> {
    decode_summary_of(b, block, SUMMARY_MAGIC, ENTRY_BYTES, decode_entry)
}

/// A summary page of any TxFlash protocol (`magic u32 | block u32 | count u32 | count ×
/// entry | crc32c u32`): the summary of `block`, one entry per page, each decoded by `entry`
/// (`None` for a page it does not describe).
pub fn decode_summary_of<R>(
    b: &[u8],
    block: u32,
    magic: u32,
    entry_bytes: usize,
    entry: impl Fn(&[u8]) -> Result<R, CorruptRecord>,
) -> Result<Vec<Option<R>>, CorruptRecord> {
    let mut r = Reader::new(b);
    r.magic(&magic.to_le_bytes(), "summary page")?;
    codec::check_equal("summary page's block", r.u32()? as u64, block as u64)?;
    let n = r.u32()? as usize;
    let entries = r.bytes(n.saturating_mul(entry_bytes))?;
    let end = r.position();
    codec::check_crc(r.u32()?, &b[..end])?;
    Ok(entries
        .chunks_exact(entry_bytes)
        .map(|e| entry(e).ok())
        .collect())
}

/// Commit record page: magic u32 | txid u32 | pages u32 | crc32c u32 (TxFlash §4.1: it fills a
/// whole page on flash; the rest of the page is left zero).
pub fn encode_commit(txid: u32, pages: u32) -> Box<[u8]> {
    let mut b = vec![0u8; 16];
    b[0..4].copy_from_slice(&COMMIT_MAGIC.to_le_bytes());
    b[4..8].copy_from_slice(&txid.to_le_bytes());
    b[8..12].copy_from_slice(&pages.to_le_bytes());
    let crc = crc32c::crc32c(&b[..12]);
    b[12..16].copy_from_slice(&crc.to_le_bytes());
    b.into_boxed_slice()
}

/// `(txid, pages)` of a commit record page.
pub fn decode_commit(b: &[u8]) -> Result<(u32, u32), CorruptRecord> {
    let mut r = Reader::new(b);
    r.magic(&COMMIT_MAGIC.to_le_bytes(), "commit record")?;
    let (txid, pages) = (r.u32()?, r.u32()?);
    codec::check_crc(r.u32()?, &b[..12])?;
    Ok((txid, pages))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oob_round_trip_and_damage() {
        let o = Oob {
            kind: Kind::Data,
            flags: FLAG_SINGLE,
            lpn: 0x1234_5678_9abc,
            version: 77,
            txid: 0xdead_beef,
        };
        let mut b = [0u8; OOB_BYTES as usize];
        o.encode(&mut b);
        assert_eq!(Oob::decode(&b).ok(), Some(o));
        assert!(Oob::decode(&b).ok().unwrap().single());
        b[13] ^= 1;
        assert_eq!(Oob::decode(&b).ok(), None);
        assert_eq!(Oob::decode(&[0u8; 24]).ok(), None);
        assert_eq!(Oob::decode(&[0xffu8; 24]).ok(), None);
    }

    #[test]
    fn summary_round_trip() {
        let mk = |i: u32| Oob {
            kind: if i.is_multiple_of(3) {
                Kind::Commit
            } else {
                Kind::Data
            },
            flags: (i % 2) as u8,
            lpn: i as u64 * 3,
            version: i + 1,
            txid: i * 7,
        };
        let mut entries: Vec<_> = (0..31).map(|i| encode_entry(&mk(i))).collect();
        entries[5] = EMPTY_ENTRY;
        let page = encode_summary(9, &entries, 4096);
        let back = decode_summary(&page, 9).unwrap();
        assert_eq!(back.len(), 31);
        for (i, e) in back.iter().enumerate() {
            if i == 5 {
                assert_eq!(*e, None);
            } else {
                assert_eq!(*e, Some(mk(i as u32)));
            }
        }
        assert!(
            decode_summary(&page, 8).is_err(),
            "summary of another block"
        );
        let mut bad = page.to_vec();
        bad[20] ^= 4;
        assert!(matches!(
            decode_summary(&bad, 9),
            Err(CorruptRecord::BadChecksum { .. })
        ));
    }

    #[test]
    fn commit_round_trip() {
        let c = encode_commit(42, 17);
        assert_eq!(decode_commit(&c), Ok((42, 17)));
        let mut bad = c.to_vec();
        bad[5] ^= 1;
        assert!(decode_commit(&bad).is_err());
        assert!(matches!(
            decode_commit(&[0u8; 16]),
            Err(CorruptRecord::BadMagic { .. })
        ));
    }
}
