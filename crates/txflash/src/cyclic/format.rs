//! On-flash layouts of the cyclic protocols (TxFlash §3.2–§3.3, Figure 2(b)/(c)):
//! the per-page OOB record with its next-link (and, for BPCC, its back pointer) and the
//! per-block summary page. Every integer is little-endian and fixed width; every record carries
//! a crc32c, so a torn or foreign page is never mistaken for an intention.
//!
//! OOB record (SCC 32 bytes, BPCC 36 bytes):
//!
//! | offset | field | bytes |
//! |---|---|---|
//! | 0 | kind (1 intention, 3 summary, 4 tombstone intention) | 1 |
//! | 1 | flags (0) | 1 |
//! | 2 | zero | 2 |
//! | 4 | lpn | 8 |
//! | 12 | version | 4 |
//! | 16 | next-link lpn | 8 |
//! | 24 | next-link version | 4 |
//! | 28 | back pointer (BPCC only) | 4 |
//! | 28 / 32 | crc32c of everything before | 4 |
//!
//! The paper gives 24 B (SCC) and 28 B (BPCC) of protocol metadata plus a 16 B simulator
//! checksum; we keep the protocol fields at exactly those sizes and use a 4-byte crc32c as the
//! checksum (§4.1; ours is smaller [R]).

pub use crate::format::Kind;

/// The kinds cyclic commit writes: no commit records (the cycle is the commit).
fn cyclic_kind(v: u8) -> Option<Kind> {
    Kind::from_u8(v).filter(|&k| k != Kind::Commit)
}
use flash::codec::{self, CorruptRecord, Reader};

/// Version of TxFlash cyclic commit's (SCC and BPCC) on-flash format: every record this module encodes. The image header records it
/// (`DesignSpec::format_version`); bump it whenever a record's layout or meaning changes.
pub const FORMAT_VERSION: u32 = 1;

/// Which cyclic protocol a record belongs to (decides whether the back pointer is stored).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// Simple Cyclic Commit (TxFlash §3.2).
    Scc,
    /// Back Pointer Cyclic Commit (TxFlash §3.3).
    Bpcc,
}

impl Protocol {
    /// OOB bytes of one record.
    pub const fn oob_bytes(self) -> u32 {
        match self {
            Protocol::Scc => 32,
            Protocol::Bpcc => 36,
        }
    }
}

/// Largest OOB record of the cyclic protocols.
pub const MAX_OOB_BYTES: usize = 36;

/// A page id plus version: "P_i" in the paper.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Version {
    pub lpn: u32,
    pub version: u32,
}

/// The OOB record of one page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CyclicOob {
    pub kind: Kind,
    pub lpn: u64,
    pub version: u32,
    /// The next-link: another intention of the same transaction (itself for a one-page tx).
    pub next_lpn: u64,
    pub next_version: u32,
    /// BPCC: version of the page's last committed version when this one was written (0 = the
    /// initial, virtual version). SCC records store no back pointer (read as 0).
    pub back: u32,
}

impl CyclicOob {
    pub fn summary() -> CyclicOob {
        CyclicOob {
            kind: Kind::Summary,
            lpn: 0,
            version: 0,
            next_lpn: 0,
            next_version: 0,
            back: 0,
        }
    }

    pub fn encode(&self, protocol: Protocol, out: &mut [u8]) {
        let n = protocol.oob_bytes() as usize;
        assert!(out.len() >= n);
        out[0] = self.kind as u8;
        out[1] = 0;
        out[2..4].fill(0);
        out[4..12].copy_from_slice(&self.lpn.to_le_bytes());
        out[12..16].copy_from_slice(&self.version.to_le_bytes());
        out[16..24].copy_from_slice(&self.next_lpn.to_le_bytes());
        out[24..28].copy_from_slice(&self.next_version.to_le_bytes());
        if protocol == Protocol::Bpcc {
            out[28..32].copy_from_slice(&self.back.to_le_bytes());
        } else {
            debug_assert_eq!(self.back, 0, "SCC records carry no back pointer");
        }
        let crc = crc32c::crc32c(&out[..n - 4]);
        out[n - 4..n].copy_from_slice(&crc.to_le_bytes());
    }

    /// An error when the record is blank, torn or foreign.
    pub fn decode(protocol: Protocol, b: &[u8]) -> Result<CyclicOob, CorruptRecord> {
        let mut r = codec::crc_sealed(b, protocol.oob_bytes() as usize - 4)?;
        let kind = r.kind("cyclic page kind", cyclic_kind)?;
        r.skip(3)?;
        Ok(CyclicOob {
            kind,
            lpn: r.u64()?,
            version: r.u32()?,
            next_lpn: r.u64()?,
            next_version: r.u32()?,
            back: if protocol == Protocol::Bpcc {
                r.u32()?
            } else {
                0
            },
        })
    }

    pub fn id(&self) -> Version {
        Version {
            lpn: self.lpn as u32,
            version: self.version,
        }
    }

    pub fn next(&self) -> Version {
        Version {
            lpn: self.next_lpn.min(u32::MAX as u64) as u32,
            version: self.next_version,
        }
    }
}

/// One summary entry: kind u8 | lpn u32 | version u32 | next lpn u32 | next version u32 |
/// back u32 (21 bytes; LPNs narrowed to 32 bits — a device has < 2^32 logical pages).
pub const ENTRY_BYTES: usize = 21;

/// The entry of a page never programmed (kind 0).
pub const EMPTY_ENTRY: [u8; ENTRY_BYTES] = [0; ENTRY_BYTES];

pub fn encode_entry(o: &CyclicOob) -> [u8; ENTRY_BYTES] {
    let mut e = [0u8; ENTRY_BYTES];
    e[0] = o.kind as u8;
    e[1..5].copy_from_slice(&(o.lpn as u32).to_le_bytes());
    e[5..9].copy_from_slice(&o.version.to_le_bytes());
    e[9..13].copy_from_slice(&(o.next_lpn as u32).to_le_bytes());
    e[13..17].copy_from_slice(&o.next_version.to_le_bytes());
    e[17..21].copy_from_slice(&o.back.to_le_bytes());
    e
}

pub fn decode_entry(e: &[u8]) -> Result<CyclicOob, CorruptRecord> {
    let mut r = Reader::new(e);
    Ok(CyclicOob {
        kind: r.kind("summary entry kind", cyclic_kind)?,
        lpn: r.u32()? as u64,
        version: r.u32()?,
        next_lpn: r.u32()? as u64,
        next_version: r.u32()?,
        back: r.u32()?,
    })
}

const SUMMARY_MAGIC: u32 = 0x4D53_4354; // "TCSM"

/// Bytes of a summary page of `entries` entries.
pub const fn summary_bytes(entries: usize) -> usize {
    12 + entries * ENTRY_BYTES + 4
}

/// Summary page: magic u32 | block u32 | count u32 | count × entry | crc32c u32 over all before.
pub fn encode_summary(block: u32, entries: &[[u8; ENTRY_BYTES]], page_bytes: usize) -> Box<[u8]> {
    let len = summary_bytes(entries.len());
    assert!(len <= page_bytes, "summary does not fit a page");
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

/// Entries of a summary page of `block`; `None` if damaged or of another block.
pub fn decode_summary(b: &[u8], block: u32) -> Result<Vec<Option<CyclicOob>>, CorruptRecord> {
    crate::format::decode_summary_of(b, block, SUMMARY_MAGIC, ENTRY_BYTES, decode_entry)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(i: u32) -> CyclicOob {
        CyclicOob {
            kind: if i.is_multiple_of(5) {
                Kind::Tombstone
            } else {
                Kind::Data
            },
            lpn: i as u64 * 3,
            version: i + 1,
            next_lpn: i as u64 * 7,
            next_version: i + 2,
            back: i / 2,
        }
    }

    #[test]
    fn oob_round_trip_for_both_protocols_and_damage() {
        for p in [Protocol::Scc, Protocol::Bpcc] {
            let mut o = rec(9);
            if p == Protocol::Scc {
                o.back = 0;
            }
            let mut b = [0u8; MAX_OOB_BYTES];
            o.encode(p, &mut b);
            assert_eq!(CyclicOob::decode(p, &b).ok(), Some(o));
            b[13] ^= 1;
            assert_eq!(CyclicOob::decode(p, &b).ok(), None);
            assert_eq!(CyclicOob::decode(p, &[0u8; MAX_OOB_BYTES]).ok(), None);
            assert_eq!(CyclicOob::decode(p, &[0xffu8; MAX_OOB_BYTES]).ok(), None);
            assert_eq!(CyclicOob::decode(p, &[0u8; 8]).ok(), None, "short record");
        }
        // A BPCC record is not an SCC record (the checksum covers a different length).
        let mut b = [0u8; MAX_OOB_BYTES];
        rec(3).encode(Protocol::Bpcc, &mut b);
        assert_eq!(CyclicOob::decode(Protocol::Scc, &b).ok(), None);
    }

    #[test]
    fn summary_round_trip_and_damage() {
        let mut entries: Vec<_> = (0..63).map(|i| encode_entry(&rec(i))).collect();
        entries[4] = EMPTY_ENTRY;
        let page = encode_summary(11, &entries, 4096);
        let back = decode_summary(&page, 11).unwrap();
        assert_eq!(back.len(), 63);
        for (i, e) in back.iter().enumerate() {
            if i == 4 {
                assert_eq!(*e, None);
            } else {
                assert_eq!(*e, Some(rec(i as u32)));
            }
        }
        assert!(
            decode_summary(&page, 10).is_err(),
            "summary of another block"
        );
        let mut bad = page.to_vec();
        bad[30] ^= 8;
        assert!(decode_summary(&bad, 11).is_err());
        assert!(decode_summary(&page[..20], 11).is_err(), "truncated");
        assert!(
            summary_bytes(127) <= 4096,
            "a 128-page block's summary fits 4 KB"
        );
    }
}
