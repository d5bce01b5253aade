//! OPTR's on-flash formats, written once (OPTR §3.1–§3.3; byte layouts [R]).
//!
//! **Page OOB record** (24 bytes, little-endian):
//! `kind u8 | flags u8 | pad u16 | wid u64 | size u32 | lpn u32 | crc32c(bytes 0..20) u32`.
//! `kind` tags the page type (data, summary, full-checkpoint L2P, seal, diff, records); `flags`
//! bit 0 marks a GC relocation (decision O3). wid 8 + size 4 + lpn 4 are the paper's 16 bytes.
//!
//! **Metadata page** (summary, L2P chunk, incremental diff, coalescing records, seal):
//! `magic [u8;4] | crc32c(bytes 8..24+len) u32 | generation u64 | aux u32 | count u32 | body`,
//! body entries fixed-width: summary entry 16 B (wid u64, size u32, lpn u32 — the OOB fields of
//! each page of the block, `aux` = next block of the stream), L2P entry 4 B (ppn; `aux` = chunk
//! index), diff entry 8 B (lpn u32, ppn u32), coalescing record 20 B (earlier u64, later u64,
//! size u32), seal: `latest_wid u64 | checkpoint_seq u64 | kind u8 | pad [u8;3] | ptr u32 ×
//! count` (the next free page of each (stream, chip) write stream).

use crate::cutpoint::Coalescing;
use flash::codec::{self, CorruptRecord, Reader};

/// Version of OPTR's on-flash format: every record this module encodes. The image header records it
/// (`DesignSpec::format_version`); bump it whenever a record's layout or meaning changes.
pub const FORMAT_VERSION: u32 = 1;

pub const OOB_BYTES: u32 = 24;
pub const HEADER_BYTES: usize = 24;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum PageKind {
    Data = 1,
    Summary = 2,
    FullL2p = 3,
    Seal = 4,
    Diff = 5,
    Records = 6,
}

impl PageKind {
    fn from_u8(v: u8) -> Option<PageKind> {
        Some(match v {
            1 => PageKind::Data,
            2 => PageKind::Summary,
            3 => PageKind::FullL2p,
            4 => PageKind::Seal,
            5 => PageKind::Diff,
            6 => PageKind::Records,
            _ => return None,
        })
    }
    fn magic(self) -> [u8; 4] {
        match self {
            PageKind::Data => *b"ODAT",
            PageKind::Summary => *b"OSUM",
            PageKind::FullL2p => *b"OL2P",
            PageKind::Seal => *b"OSEL",
            PageKind::Diff => *b"ODIF",
            PageKind::Records => *b"OREC",
        }
    }
}

/// The per-page OOB record (OPTR §3.1: wid, size, lpn in every page's spare area).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageOob {
    pub kind: PageKind,
    pub relocated: bool,
    pub wid: u64,
    pub size: u32,
    pub lpn: u32,
}

impl PageOob {
    pub fn encode(&self) -> [u8; OOB_BYTES as usize] {
        let mut b = [0u8; OOB_BYTES as usize];
        b[0] = self.kind as u8;
        b[1] = self.relocated as u8;
        b[4..12].copy_from_slice(&self.wid.to_le_bytes());
        b[12..16].copy_from_slice(&self.size.to_le_bytes());
        b[16..20].copy_from_slice(&self.lpn.to_le_bytes());
        let crc = crc32c::crc32c(&b[0..20]);
        b[20..24].copy_from_slice(&crc.to_le_bytes());
        b
    }
    /// An error when the record is blank, torn or foreign.
    pub fn decode(b: &[u8]) -> Result<PageOob, CorruptRecord> {
        let mut r = codec::crc_sealed(b, 20)?;
        let kind = r.kind("optr page kind", PageKind::from_u8)?;
        let relocated = r.u8()? & 1 != 0;
        r.skip(2)?;
        Ok(PageOob {
            kind,
            relocated,
            wid: r.u64()?,
            size: r.u32()?,
            lpn: r.u32()?,
        })
    }
}

/// A decoded metadata page.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MetaPage {
    pub kind: PageKind,
    pub generation: u64,
    pub aux: u32,
    pub count: u32,
    pub body: Vec<u8>,
}

impl MetaPage {
    pub fn encode(&self, page_bytes: usize) -> Box<[u8]> {
        assert!(
            HEADER_BYTES + self.body.len() <= page_bytes,
            "metadata page overflows"
        );
        let mut p = vec![0u8; page_bytes].into_boxed_slice();
        p[0..4].copy_from_slice(&self.kind.magic());
        p[8..16].copy_from_slice(&self.generation.to_le_bytes());
        p[16..20].copy_from_slice(&self.aux.to_le_bytes());
        p[20..24].copy_from_slice(&self.count.to_le_bytes());
        p[24..24 + self.body.len()].copy_from_slice(&self.body);
        let crc = crc32c::crc32c(&p[8..24 + self.body.len()]);
        p[4..8].copy_from_slice(&crc.to_le_bytes());
        p
    }

    /// Decodes a page of `kind` whose body holds `count` entries of `entry_bytes` (plus `extra`).
    pub fn decode(
        p: &[u8],
        kind: PageKind,
        entry_bytes: usize,
        extra: usize,
    ) -> Result<MetaPage, CorruptRecord> {
        let mut r = Reader::new(p);
        r.magic(&kind.magic(), "OPTR metadata page")?;
        let stored = r.u32()?;
        let (generation, aux, count) = (r.u64()?, r.u32()?, r.u32()?);
        let len = extra.saturating_add((count as usize).saturating_mul(entry_bytes));
        let body = r.bytes(len)?;
        codec::check_crc(stored, &p[8..HEADER_BYTES + len])?;
        Ok(MetaPage {
            kind,
            generation,
            aux,
            count,
            body: body.to_vec(),
        })
    }
}

/// Entries per page of a metadata kind.
pub fn entries_per_page(page_bytes: u32, entry_bytes: usize, extra: usize) -> u32 {
    ((page_bytes as usize - HEADER_BYTES - extra) / entry_bytes) as u32
}

pub const SUMMARY_ENTRY: usize = 16;
pub const L2P_ENTRY: usize = 4;
pub const DIFF_ENTRY: usize = 8;
/// OPTR §3.2, §7.1: a coalescing record is 20 bytes.
pub const RECORD_ENTRY: usize = 20;
pub const SEAL_EXTRA: usize = 20;

/// One summary entry: the OOB fields of one page of the block (`wid == 0`: not a data page).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct SummaryEntry {
    pub wid: u64,
    pub size: u32,
    pub lpn: u32,
}

pub fn encode_summary(entries: &[SummaryEntry], next_block: u32, page_bytes: usize) -> Box<[u8]> {
    let mut body = Vec::with_capacity(entries.len() * SUMMARY_ENTRY);
    for e in entries {
        body.extend_from_slice(&e.wid.to_le_bytes());
        body.extend_from_slice(&e.size.to_le_bytes());
        body.extend_from_slice(&e.lpn.to_le_bytes());
    }
    MetaPage {
        kind: PageKind::Summary,
        generation: 0,
        aux: next_block,
        count: entries.len() as u32,
        body,
    }
    .encode(page_bytes)
}

pub fn decode_summary(p: &[u8]) -> Result<(Vec<SummaryEntry>, u32), CorruptRecord> {
    let m = MetaPage::decode(p, PageKind::Summary, SUMMARY_ENTRY, 0)?;
    let e = m
        .body
        .chunks_exact(SUMMARY_ENTRY)
        .map(|c| SummaryEntry {
            wid: u64::from_le_bytes(c[0..8].try_into().unwrap()),
            size: u32::from_le_bytes(c[8..12].try_into().unwrap()),
            lpn: u32::from_le_bytes(c[12..16].try_into().unwrap()),
        })
        .collect();
    Ok((e, m.aux))
}

/// A checkpoint seal (OPTR §3.3).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seal {
    pub generation: u64,
    pub latest_wid: u64,
    pub checkpoint_seq: u64,
    pub full: bool,
    /// Next free page of each write stream, `u32::MAX` for none.
    pub pointers: Vec<u32>,
}

pub fn encode_seal(s: &Seal, page_bytes: usize) -> Box<[u8]> {
    let mut body = Vec::with_capacity(SEAL_EXTRA + 4 * s.pointers.len());
    body.extend_from_slice(&s.latest_wid.to_le_bytes());
    body.extend_from_slice(&s.checkpoint_seq.to_le_bytes());
    body.extend_from_slice(&[s.full as u8, 0, 0, 0]);
    for p in &s.pointers {
        body.extend_from_slice(&p.to_le_bytes());
    }
    MetaPage {
        kind: PageKind::Seal,
        generation: s.generation,
        aux: 0,
        count: s.pointers.len() as u32,
        body,
    }
    .encode(page_bytes)
}

pub fn decode_seal(p: &[u8]) -> Result<Seal, CorruptRecord> {
    let m = MetaPage::decode(p, PageKind::Seal, 4, SEAL_EXTRA)?;
    let b = &m.body;
    Ok(Seal {
        generation: m.generation,
        latest_wid: u64::from_le_bytes(b[0..8].try_into().expect("8 bytes")),
        checkpoint_seq: u64::from_le_bytes(b[8..16].try_into().expect("8 bytes")),
        full: b[16] == 1,
        pointers: b[SEAL_EXTRA..]
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
            .collect(),
    })
}

/// Coalescing records with the earlier request's size.
pub fn encode_records(recs: &[(Coalescing, u32)], generation: u64, page_bytes: usize) -> Box<[u8]> {
    let mut body = Vec::with_capacity(recs.len() * RECORD_ENTRY);
    for (r, size) in recs {
        body.extend_from_slice(&r.earlier.to_le_bytes());
        body.extend_from_slice(&r.later.to_le_bytes());
        body.extend_from_slice(&size.to_le_bytes());
    }
    MetaPage {
        kind: PageKind::Records,
        generation,
        aux: 0,
        count: recs.len() as u32,
        body,
    }
    .encode(page_bytes)
}

pub fn decode_records(p: &[u8]) -> Result<(u64, Vec<(Coalescing, u32)>), CorruptRecord> {
    let m = MetaPage::decode(p, PageKind::Records, RECORD_ENTRY, 0)?;
    let r = m
        .body
        .chunks_exact(RECORD_ENTRY)
        .map(|c| {
            (
                Coalescing {
                    earlier: u64::from_le_bytes(c[0..8].try_into().unwrap()),
                    later: u64::from_le_bytes(c[8..16].try_into().unwrap()),
                },
                u32::from_le_bytes(c[16..20].try_into().unwrap()),
            )
        })
        .collect();
    Ok((m.generation, r))
}

/// L2P differences (incremental checkpoint) or a full-checkpoint chunk of `(lpn, ppn)` pairs.
pub fn encode_pairs(
    kind: PageKind,
    pairs: &[(u32, u32)],
    generation: u64,
    aux: u32,
    page_bytes: usize,
) -> Box<[u8]> {
    let mut body = Vec::with_capacity(pairs.len() * 8);
    for (l, p) in pairs {
        if kind == PageKind::Diff {
            body.extend_from_slice(&l.to_le_bytes());
        }
        body.extend_from_slice(&p.to_le_bytes());
    }
    MetaPage {
        kind,
        generation,
        aux,
        count: pairs.len() as u32,
        body,
    }
    .encode(page_bytes)
}

/// Decodes a diff page (pairs) or an L2P chunk (lpn = aux·per_page + index).
pub fn decode_pairs(
    p: &[u8],
    kind: PageKind,
    per_page: u32,
) -> Result<(u64, Vec<(u32, u32)>), CorruptRecord> {
    let entry = if kind == PageKind::Diff {
        DIFF_ENTRY
    } else {
        L2P_ENTRY
    };
    let m = MetaPage::decode(p, kind, entry, 0)?;
    let pairs = m
        .body
        .chunks_exact(entry)
        .enumerate()
        .map(|(i, c)| {
            if kind == PageKind::Diff {
                (
                    u32::from_le_bytes(c[0..4].try_into().unwrap()),
                    u32::from_le_bytes(c[4..8].try_into().unwrap()),
                )
            } else {
                (
                    m.aux * per_page + i as u32,
                    u32::from_le_bytes(c[0..4].try_into().unwrap()),
                )
            }
        })
        .collect();
    Ok((m.generation, pairs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oob_round_trip() {
        let o = PageOob {
            kind: PageKind::Data,
            relocated: true,
            wid: 1 << 40,
            size: 7,
            lpn: 99,
        };
        let b = o.encode();
        assert_eq!(PageOob::decode(&b).ok(), Some(o));
        let mut bad = b;
        bad[5] ^= 1;
        assert_eq!(PageOob::decode(&bad).ok(), None);
    }

    #[test]
    fn summary_seal_records_pairs_round_trip() {
        let e = vec![
            SummaryEntry {
                wid: 5,
                size: 2,
                lpn: 3,
            },
            SummaryEntry::default(),
        ];
        assert_eq!(decode_summary(&encode_summary(&e, 17, 4096)), Ok((e, 17)));
        let s = Seal {
            generation: 3,
            latest_wid: 1234,
            checkpoint_seq: 9,
            full: true,
            pointers: vec![1, u32::MAX, 77],
        };
        assert_eq!(decode_seal(&encode_seal(&s, 4096)), Ok(s));
        let r = vec![(
            Coalescing {
                earlier: 4,
                later: 9,
            },
            3,
        )];
        assert_eq!(decode_records(&encode_records(&r, 2, 4096)), Ok((2, r)));
        // 20-byte records: about 800 per 16 KB page (OPTR §7.1)
        assert_eq!(entries_per_page(16384, RECORD_ENTRY, 0), 818);
        let d = vec![(1, 2), (3, 4)];
        assert_eq!(
            decode_pairs(
                &encode_pairs(PageKind::Diff, &d, 1, 0, 4096),
                PageKind::Diff,
                0
            ),
            Ok((1, d))
        );
        let f = vec![(2048, 5), (2049, u32::MAX)];
        let page = encode_pairs(PageKind::FullL2p, &f, 1, 2, 4096);
        assert_eq!(decode_pairs(&page, PageKind::FullL2p, 1024), Ok((1, f)));
        let mut torn = page.to_vec();
        torn[30] ^= 0xff;
        assert!(matches!(
            decode_pairs(&torn, PageKind::FullL2p, 1024),
            Err(CorruptRecord::BadChecksum { .. })
        ));
    }
}
