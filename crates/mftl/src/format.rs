//! On-flash formats of Möbius (atom inode §III-C, §III-F; byte layouts our decisions [R]), written
//! down once.
//!
//! Every persisted integer is little-endian and fixed width; every record carries a crc32c.
//!
//! ## Data-page OOB record (24 B, every page Möbius programs)
//! | off | field | type |
//! |---|---|---|
//! | 0 | tx_id (static tx id, chain id, or 0) | u32 |
//! | 4 | lpn (or translation-page index) | u32 |
//! | 8 | next ppn (chains; `u32::MAX` = none) | u32 |
//! | 12 | seq (position in a chain) | u32 |
//! | 16 | kind ([`PageKind`]) | u8 |
//! | 17 | reserved | 3 B |
//! | 20 | crc32c of bytes 0..20 | u32 |
//!
//! ## Atom inode (one page in the ALA)
//! Tx-info block of 96 B at offset 0 ([R] layout: magic, ala_seq, tx_id, kind, flags,
//! n_items, n_commit_flags, part_index, part_count, commit_flags[8], uuid, head_ppn, chain_id at
//! 78, reserved, crc at 92), then the mapping items: 8 B `(lpn u32, ppn u32)` each, or for
//! [`InodeKind::GcReloc`] 12 B `(lpn, from, to)`. The crc covers the tx-info block (with the crc
//! field zeroed) and the items. A commit-flag entry with bit 31 set is an *abort mark*.
//!
//! ## Translation page / GTD chunk / GM seal
//! Header 16 B: magic u32, index u32, seq u32, crc u32 (of the whole page with crc zeroed); then
//! u32 entries.

use flash::codec::{self, CorruptRecord, Reader};
use flash::{Ppn, WordCrc, WordEdit};

/// Version of Möbius's on-flash format: every record this module encodes. The image header records it
/// (`DesignSpec::format_version`); bump it whenever a record's layout or meaning changes.
pub const FORMAT_VERSION: u32 = 1;

pub const OOB_BYTES: u32 = 24;
pub const NO_PPN: u32 = u32::MAX;
pub const TX_INFO_BYTES: usize = 96;
pub const MAX_FLAGS: usize = 8;
/// Bit that turns a commit-flag entry into an abort mark.
pub const ABORT_MARK: u32 = 1 << 31;

const INODE_MAGIC: u32 = 0x4D41_544F; // "OTAM"
const TP_MAGIC: u32 = 0x4D54_5250;
const GTD_MAGIC: u32 = 0x4D47_5444;
const SEAL_MAGIC: u32 = 0x4D53_4541;
pub const PAGE_HEADER: usize = 16;

fn get32(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(b[o..o + 4].try_into().unwrap())
}
fn put32(b: &mut [u8], o: usize, v: u32) {
    b[o..o + 4].copy_from_slice(&v.to_le_bytes());
}
fn get64(b: &[u8], o: usize) -> u64 {
    u64::from_le_bytes(b[o..o + 8].try_into().unwrap())
}
fn put64(b: &mut [u8], o: usize, v: u64) {
    b[o..o + 8].copy_from_slice(&v.to_le_bytes());
}

/// What a programmed page holds (OOB byte 16).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum PageKind {
    /// A page of a static transaction (tx_id = the transaction).
    Static = 1,
    /// A normal WRITE page in a chain (tx_id = chain id).
    Normal = 2,
    /// A dynamic-transaction page in a chain (tx_id = chain id = tx id).
    Dynamic = 3,
    Inode = 4,
    Translation = 5,
    GmGtd = 6,
    GmSeal = 7,
}

impl PageKind {
    fn from_u8(v: u8) -> Option<PageKind> {
        Some(match v {
            1 => PageKind::Static,
            2 => PageKind::Normal,
            3 => PageKind::Dynamic,
            4 => PageKind::Inode,
            5 => PageKind::Translation,
            6 => PageKind::GmGtd,
            7 => PageKind::GmSeal,
            _ => return None,
        })
    }
}

/// The per-page OOB record ([R]: tx id 4 B, LPN 4 B, seq, next pointer).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageOob {
    pub tx_id: u32,
    pub lpn: u32,
    pub next: u32,
    pub seq: u32,
    pub kind: PageKind,
}

impl PageOob {
    pub fn encode(&self) -> [u8; OOB_BYTES as usize] {
        let mut b = [0u8; OOB_BYTES as usize];
        put32(&mut b, 0, self.tx_id);
        put32(&mut b, 4, self.lpn);
        put32(&mut b, 8, self.next);
        put32(&mut b, 12, self.seq);
        b[16] = self.kind as u8;
        let crc = crc32c::crc32c(&b[..20]);
        put32(&mut b, 20, crc);
        b
    }
    /// An error when the record is blank, torn or foreign.
    pub fn decode(b: &[u8]) -> Result<PageOob, CorruptRecord> {
        let mut r = codec::crc_sealed(b, 20)?;
        Ok(PageOob {
            tx_id: r.u32()?,
            lpn: r.u32()?,
            next: r.u32()?,
            seq: r.u32()?,
            kind: r.kind("mobius page kind", PageKind::from_u8)?,
        })
    }
}

/// Inode kinds (§III-C, §III-D, §IV-D; the recovery and GC kinds are ours [R]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum InodeKind {
    Static = 1,
    Dynamic = 2,
    NormalBatch = 3,
    DynAbort = 4,
    FlagOnly = 5,
    GcReloc = 6,
    RecoveryResolution = 7,
    /// Written by a recovery as the first inode after a hole in the ALA (a torn or blank inode
    /// with later ones programmed): `uuid` holds the index of the hole, so that a later scan
    /// that reaches the hole continues here instead of stopping (a striped ALA, §IV-C).
    HoleSkip = 8,
}

impl InodeKind {
    fn from_u8(v: u8) -> Option<InodeKind> {
        Some(match v {
            1 => InodeKind::Static,
            2 => InodeKind::Dynamic,
            3 => InodeKind::NormalBatch,
            4 => InodeKind::DynAbort,
            5 => InodeKind::FlagOnly,
            6 => InodeKind::GcReloc,
            7 => InodeKind::RecoveryResolution,
            8 => InodeKind::HoleSkip,
            _ => return None,
        })
    }
    /// Bytes per mapping item.
    pub fn item_bytes(self) -> usize {
        if self == InodeKind::GcReloc {
            12
        } else {
            8
        }
    }
}

pub const FLAG_MULTIPART: u8 = 1;

/// One atom inode (Möbius §III-C). `items` are `(lpn, ppn)`; `relocs` `(lpn, from, to)` for
/// GcReloc.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Inode {
    pub ala_seq: u64,
    pub tx_id: u32,
    pub kind: Option<InodeKind>,
    pub flags: u8,
    pub part_index: u16,
    pub part_count: u16,
    /// Commit flags (tx ids) and abort marks (`ABORT_MARK | tx_id`), at most 8.
    pub commit_flags: Vec<u32>,
    pub uuid: u128,
    /// Head of the chain (normal batch or dynamic tx) that is open or opens next (the Head List).
    pub head_ppn: u32,
    pub chain_id: u32,
    pub items: Vec<(u32, u32)>,
    pub relocs: Vec<(u32, u32, u32)>,
}

/// Mapping items one inode of `kind` holds on a `page_bytes` page (500 for 4 KB, Möbius §IV-E).
pub fn inode_capacity(page_bytes: u32, kind: InodeKind) -> usize {
    (page_bytes as usize - TX_INFO_BYTES) / kind.item_bytes()
}

impl Inode {
    pub fn kind(&self) -> InodeKind {
        self.kind.expect("inode kind set")
    }

    pub fn encode(&self, page_bytes: u32) -> Box<[u8]> {
        let kind = self.kind();
        assert!(
            self.commit_flags.len() <= MAX_FLAGS,
            "at most 8 commit flags"
        );
        let n = if kind == InodeKind::GcReloc {
            self.relocs.len()
        } else {
            self.items.len()
        };
        assert!(n <= inode_capacity(page_bytes, kind), "inode overflow");
        let mut b = vec![0u8; page_bytes as usize].into_boxed_slice();
        put32(&mut b, 0, INODE_MAGIC);
        put64(&mut b, 4, self.ala_seq);
        put32(&mut b, 12, self.tx_id);
        b[16] = kind as u8;
        b[17] = self.flags;
        b[18..20].copy_from_slice(&(n as u16).to_le_bytes());
        b[20] = self.commit_flags.len() as u8;
        b[22..24].copy_from_slice(&self.part_index.to_le_bytes());
        b[24..26].copy_from_slice(&self.part_count.to_le_bytes());
        for (i, f) in self.commit_flags.iter().enumerate() {
            put32(&mut b, 26 + 4 * i, *f);
        }
        b[58..74].copy_from_slice(&self.uuid.to_le_bytes());
        put32(&mut b, 74, self.head_ppn);
        put32(&mut b, 78, self.chain_id);
        let mut o = TX_INFO_BYTES;
        if kind == InodeKind::GcReloc {
            for &(l, f, t) in &self.relocs {
                put32(&mut b, o, l);
                put32(&mut b, o + 4, f);
                put32(&mut b, o + 8, t);
                o += 12;
            }
        } else {
            for &(l, p) in &self.items {
                put32(&mut b, o, l);
                put32(&mut b, o + 4, p);
                o += 8;
            }
        }
        let mut c = crc32c::crc32c(&b[..92]);
        c = crc32c::crc32c_append(c, &b[TX_INFO_BYTES..o]);
        put32(&mut b, 92, c);
        b
    }

    pub fn decode(b: &[u8]) -> Result<Inode, CorruptRecord> {
        let mut r = Reader::new(b);
        r.magic(&INODE_MAGIC.to_le_bytes(), "atom inode")?;
        r.bytes(TX_INFO_BYTES - 4)?;
        let kind = InodeKind::from_u8(b[16]).ok_or(CorruptRecord::UnknownKind {
            field: "inode kind",
            value: b[16] as u64,
        })?;
        let n = u16::from_le_bytes([b[18], b[19]]) as usize;
        let nf = b[20] as usize;
        codec::check_below("commit flags", nf as u64, MAX_FLAGS as u64 + 1)?;
        let items = r.bytes(n * kind.item_bytes())?;
        let computed = crc32c::crc32c_append(crc32c::crc32c(&b[..92]), items);
        let stored = get32(b, 92);
        if computed != stored {
            return Err(CorruptRecord::BadChecksum { stored, computed });
        }
        let mut ino = Inode {
            ala_seq: get64(b, 4),
            tx_id: get32(b, 12),
            kind: Some(kind),
            flags: b[17],
            part_index: u16::from_le_bytes([b[22], b[23]]),
            part_count: u16::from_le_bytes([b[24], b[25]]),
            commit_flags: (0..nf).map(|i| get32(b, 26 + 4 * i)).collect(),
            uuid: u128::from_le_bytes(b[58..74].try_into().unwrap()),
            head_ppn: get32(b, 74),
            chain_id: get32(b, 78),
            items: Vec::new(),
            relocs: Vec::new(),
        };
        let mut o = TX_INFO_BYTES;
        for _ in 0..n {
            if kind == InodeKind::GcReloc {
                ino.relocs
                    .push((get32(b, o), get32(b, o + 4), get32(b, o + 8)));
            } else {
                ino.items.push((get32(b, o), get32(b, o + 4)));
            }
            o += kind.item_bytes();
        }
        Ok(ino)
    }
}

/// Entries (u32) a header-prefixed page holds.
pub fn entries_per_page(page_bytes: u32) -> usize {
    (page_bytes as usize - PAGE_HEADER) / 4
}

fn encode_table(magic: u32, index: u32, seq: u32, entries: &[u32], page_bytes: u32) -> Box<[u8]> {
    let per = entries_per_page(page_bytes);
    assert!(entries.len() <= per);
    let mut b = vec![0u8; page_bytes as usize].into_boxed_slice();
    put32(&mut b, 0, magic);
    put32(&mut b, 4, index);
    put32(&mut b, 8, seq);
    let (used, unused) = b[PAGE_HEADER..PAGE_HEADER + 4 * per].split_at_mut(4 * entries.len());
    for (slot, e) in used.chunks_exact_mut(4).zip(entries) {
        slot.copy_from_slice(&e.to_le_bytes());
    }
    // Unused slots read as "no mapping".
    for slot in unused.chunks_exact_mut(4) {
        slot.copy_from_slice(&NO_PPN.to_le_bytes());
    }
    let c = crc32c::crc32c(&b);
    put32(&mut b, 12, c);
    b
}

/// Checks a table page's magic and crc (computed over the page with the crc field read as
/// zero, without copying it); returns its index and seq.
fn check_table(magic: u32, b: &[u8]) -> Result<(u32, u32), CorruptRecord> {
    let mut r = Reader::new(b);
    r.magic(&magic.to_le_bytes(), "Möbius table page")?;
    let (index, seq, stored) = (r.u32()?, r.u32()?, r.u32()?);
    let head = crc32c::crc32c_append(crc32c::crc32c(&b[..12]), &[0; 4]);
    codec::check_computed_crc(stored, crc32c::crc32c_append(head, &b[PAGE_HEADER..]))?;
    Ok((index, seq))
}

/// The entries of a table page [`check_table`] accepted.
fn table_entries(b: &[u8]) -> impl ExactSizeIterator<Item = u32> + '_ {
    b[PAGE_HEADER..]
        .chunks_exact(4)
        .map(|e| u32::from_le_bytes(e.try_into().expect("4 bytes")))
}

fn decode_table(magic: u32, b: &[u8]) -> Result<(u32, u32, Vec<u32>), CorruptRecord> {
    let (index, seq) = check_table(magic, b)?;
    Ok((index, seq, table_entries(b).collect()))
}

/// [`decode_tp`] into `out`, without an intermediate copy: the page's first `out.len()`
/// entries. Returns whether `out` already held them (a translation page reloaded after its
/// eviction must equal the view it was evicted from).
pub fn decode_tp_into(b: &[u8], out: &mut [u32]) -> Result<bool, CorruptRecord> {
    check_table(TP_MAGIC, b)?;
    let held = table_entries(b).len();
    if held < out.len() {
        return Err(CorruptRecord::OutOfRange {
            field: "entries wanted",
            value: out.len() as u64,
            limit: held as u64,
        });
    }
    let same = out.iter().zip(table_entries(b)).all(|(o, e)| *o == e);
    for (o, e) in out.iter_mut().zip(table_entries(b)) {
        *o = e;
    }
    Ok(same)
}

/// Translation page: PPNs of `entries_per_page` consecutive LPNs (DFTL-style, Möbius §III-F).
pub fn encode_tp(index: u32, seq: u32, entries: &[u32], page_bytes: u32) -> Box<[u8]> {
    encode_table(TP_MAGIC, index, seq, entries, page_bytes)
}
pub fn decode_tp(b: &[u8]) -> Result<(u32, u32, Vec<u32>), CorruptRecord> {
    decode_table(TP_MAGIC, b)
}
/// Rewrites a translation page encoded by [`encode_tp`] (or patched before), in its buffer: its seq
/// becomes `seq` and each `(i, ppn)` of `changes` sets entry `i`, the crc following word by word
/// ([`WordCrc`] for buffers of the page's length), without reading the rest of the page. The
/// result is the page [`encode_tp`] would give for the changed entries (tests hold it to that).
pub fn patch_tp(
    page: Box<[u8]>,
    crc: &WordCrc,
    seq: u32,
    changes: impl IntoIterator<Item = (usize, u32)>,
) -> Box<[u8]> {
    // The crc field (word 3) reads as zero to the crc and is never set through the edit.
    let stored = get32(&page, 12);
    let mut edit = WordEdit::new(page, stored, crc);
    edit.set(2, seq);
    for (i, ppn) in changes {
        edit.set(PAGE_HEADER / 4 + i, ppn);
    }
    let (mut page, c) = edit.finish();
    put32(&mut page, 12, c);
    page
}

/// GTD chunk: translation-page PPNs.
pub fn encode_gtd(index: u32, seq: u32, entries: &[u32], page_bytes: u32) -> Box<[u8]> {
    encode_table(GTD_MAGIC, index, seq, entries, page_bytes)
}
pub fn decode_gtd(b: &[u8]) -> Result<(u32, u32, Vec<u32>), CorruptRecord> {
    decode_table(GTD_MAGIC, b)
}

/// Global metadata seal [R]: the last page of a GM record; names the GTD chunks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GmSeal {
    pub gm_seq: u32,
    /// Logical index of the active ALA head.
    pub ala_head: u64,
    /// Smallest tx/chain id not yet handed out when the record was written.
    pub next_tx_id: u32,
    /// Open (or next) chain announced at merge time.
    pub head_ppn: u32,
    pub chain_id: u32,
    pub gtd_ppns: Vec<u32>,
}

impl GmSeal {
    pub fn encode(&self, page_bytes: u32) -> Box<[u8]> {
        let mut e = vec![
            self.ala_head as u32,
            (self.ala_head >> 32) as u32,
            self.next_tx_id,
            self.head_ppn,
            self.chain_id,
            self.gtd_ppns.len() as u32,
        ];
        e.extend_from_slice(&self.gtd_ppns);
        encode_table(SEAL_MAGIC, 0, self.gm_seq, &e, page_bytes)
    }
    pub fn decode(b: &[u8]) -> Result<GmSeal, CorruptRecord> {
        let (_, seq, e) = decode_table(SEAL_MAGIC, b)?;
        if e.len() < 6 {
            return Err(CorruptRecord::Truncated {
                at: PAGE_HEADER + 4 * e.len(),
                need: 4 * (6 - e.len()),
                len: b.len(),
            });
        }
        let n = e[5] as usize;
        codec::check_below("GTD chunks in a seal", n as u64, (e.len() - 6 + 1) as u64)?;
        Ok(GmSeal {
            gm_seq: seq,
            ala_head: e[0] as u64 | (e[1] as u64) << 32,
            next_tx_id: e[2],
            head_ppn: e[3],
            chain_id: e[4],
            gtd_ppns: e[6..6 + n].to_vec(),
        })
    }
}

pub fn ppn_or_none(p: u32) -> Ppn {
    Ppn(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oob_round_trip_and_crc() {
        let o = PageOob {
            tx_id: 7,
            lpn: 99,
            next: 1234,
            seq: 3,
            kind: PageKind::Dynamic,
        };
        let mut b = o.encode();
        assert_eq!(PageOob::decode(&b).ok(), Some(o));
        b[5] ^= 1;
        assert_eq!(PageOob::decode(&b).ok(), None);
    }

    #[test]
    fn inode_round_trip_capacity_and_crc() {
        assert_eq!(inode_capacity(4096, InodeKind::Static), 500);
        assert_eq!(inode_capacity(8192, InodeKind::Static), 1012);
        let ino = Inode {
            ala_seq: 1 << 40,
            tx_id: 42,
            kind: Some(InodeKind::Static),
            flags: FLAG_MULTIPART,
            part_index: 1,
            part_count: 3,
            commit_flags: vec![1, 2, ABORT_MARK | 3, 4, 5, 6, 7, 8],
            uuid: 0xDEAD_BEEF_u128 << 64 | 5,
            head_ppn: 77,
            chain_id: 9,
            items: (0..500).map(|i| (i, i * 3)).collect(),
            relocs: vec![],
        };
        let mut b = ino.encode(4096);
        assert_eq!(Inode::decode(&b), Ok(ino.clone()));
        b[200] ^= 0x10;
        assert!(Inode::decode(&b).is_err());
        let r = Inode {
            kind: Some(InodeKind::GcReloc),
            items: vec![],
            relocs: vec![(1, 2, 3), (4, 5, 6)],
            commit_flags: vec![],
            ..ino
        };
        assert_eq!(Inode::decode(&r.encode(4096)), Ok(r));
    }

    #[test]
    fn tables_and_seal_round_trip() {
        let e: Vec<u32> = (0..10).collect();
        let b = encode_tp(3, 8, &e, 4096);
        let (i, s, got) = decode_tp(&b).unwrap();
        assert_eq!((i, s), (3, 8));
        assert_eq!(&got[..10], &e[..]);
        assert_eq!(got[10], NO_PPN);
        assert!(
            matches!(decode_gtd(&b), Err(CorruptRecord::BadMagic { .. })),
            "magic separates page types"
        );
        let mut bad = b.to_vec();
        bad[100] ^= 1;
        assert!(matches!(
            decode_tp(&bad),
            Err(CorruptRecord::BadChecksum { .. })
        ));
        let g = encode_gtd(0, 1, &e, 4096);
        assert_eq!(decode_gtd(&g).unwrap().2[..10], e[..]);
        let seal = GmSeal {
            gm_seq: 5,
            ala_head: (3 << 32) + 17,
            next_tx_id: 100,
            head_ppn: 55,
            chain_id: 99,
            gtd_ppns: vec![10, 11],
        };
        assert_eq!(GmSeal::decode(&seal.encode(4096)), Ok(seal));
    }

    #[test]
    fn table_crc_is_of_the_page_with_its_crc_field_zeroed() {
        let e: Vec<u32> = (0..10).map(|i| i * 7 + 1).collect();
        let b = encode_tp(3, 8, &e, 4096);
        let mut zeroed = b.to_vec();
        zeroed[12..16].fill(0);
        assert_eq!(get32(&b, 12), crc32c::crc32c(&zeroed));
        // A damaged crc field itself is caught as well as a damaged entry or header.
        for at in [0, 5, 13, 16, 4095] {
            let mut bad = b.to_vec();
            bad[at] ^= 0x10;
            assert!(decode_tp(&bad).is_err(), "byte {at} flipped");
        }
    }

    #[test]
    fn a_patched_translation_page_is_the_page_encoded_whole() {
        let per = entries_per_page(4096);
        for crc in [WordCrc::new(4096), WordCrc::software(4096)] {
            let mut view: Vec<u32> = (0..per as u32 - 3).map(|i| i * 13 + 5).collect();
            let mut page = encode_tp(7, 1, &view, 4096);
            for (seq, changed) in [
                (2u32, vec![0usize, 1, 500]),
                (3, vec![per - 4]),
                (4, vec![]),
            ] {
                for &i in &changed {
                    view[i] = view[i].wrapping_mul(31) ^ seq;
                }
                page = patch_tp(page, &crc, seq, changed.iter().map(|&i| (i, view[i])));
                assert_eq!(page, encode_tp(7, seq, &view, 4096), "seq {seq}");
                assert!(decode_tp(&page).is_ok());
            }
            // The negative: a change left out of the patch gives a page that differs.
            view[9] ^= 1;
            page = patch_tp(page, &crc, 5, []);
            assert_ne!(page, encode_tp(7, 5, &view, 4096));
        }
    }

    #[test]
    fn decode_tp_into_matches_decode_tp_and_reports_a_changed_view() {
        let e: Vec<u32> = (0..10).map(|i| i * 7 + 1).collect();
        let b = encode_tp(3, 8, &e, 4096);
        let (_, _, whole) = decode_tp(&b).unwrap();
        let mut view = vec![0u32; 12];
        assert_eq!(decode_tp_into(&b, &mut view), Ok(false), "view was stale");
        assert_eq!(view, whole[..12]);
        assert_eq!(decode_tp_into(&b, &mut view), Ok(true), "view now equal");
        // A damaged page leaves the view as it was.
        let mut bad = b.to_vec();
        bad[20] ^= 1;
        let before = view.clone();
        assert!(matches!(
            decode_tp_into(&bad, &mut view),
            Err(CorruptRecord::BadChecksum { .. })
        ));
        assert_eq!(view, before);
        // More entries than a page holds: a typed error, not a short copy.
        let mut too_many = vec![0u32; entries_per_page(4096) + 1];
        assert!(matches!(
            decode_tp_into(&b, &mut too_many),
            Err(CorruptRecord::OutOfRange { .. })
        ));
        // Too short to hold a header.
        assert!(decode_tp_into(&b[..10], &mut view).is_err());
    }
}
