//! On-flash formats of DFTL, each with its byte layout (all integers little-endian).
//!
//! **OOB record** (16 bytes, every page DFTL programs outside its reserved areas; format
//! version 2 — version 1 kept `kind` in its own 4-byte word, 20 bytes):
//! ```text
//! 0  kind  u8   1 = host data, 2 = translation page
//! 1  seq   56 bits (bytes 1..8; the u64 at 0 is `seq << 8 | kind`): global sequence number
//!               (data copies made by GC get a fresh one; translation copies keep theirs: a
//!               copy is still a snapshot as of its seq)
//! 8  id    u32  LPN (data) or translation virtual page number (translation)
//! 12 crc   u32  translation page: crc32c of its data area (a translation page fills its
//!               whole data area with entries, so its checksum lives here); data page: 0
//! ```
//! **Translation page**: `page_bytes / 4` entries, entry *i* = PPN of LPN `tvpn * entries + i`
//! (`u32::MAX` = unmapped).
//!
//! **Reservation page** (the block-reservation log): the blocks each chip will open next, written
//! before any of them is programmed, so recovery knows every block opened since a checkpoint:
//! ```text
//! 0  magic     [u8; 8] = "DFTLRESV"
//! 8  log_seq   u64     consecutive across the log
//! 16 chips     u32
//! 20 per chip: count u32, then count × block u32
//! .. crc32c    u32     of everything before it
//! ```
//! **Checkpoint payload** (spread over the pages of a checkpoint slot, then a seal page):
//! ```text
//! 0  magic        [u8; 8] = "DFTLCKPT"
//! 8  ckpt_seq     u64
//! 16 seq          u64   next sequence number at checkpoint time
//! 24 log_seq      u64   log_seq of the next reservation page
//! 32 log_block    u32   index in the log ring of the next reservation page
//! 36 log_page     u32
//! 40 tvpns        u32
//! 44 chips        u32
//! 48 n_open       u32
//! 52 gtd          tvpns × (ppn u32, seq u64)
//! .. reserved     per chip: count u32, count × block u32   (reserved, not yet opened)
//! .. open blocks  n_open × (block u32, next_page u32)       (pages from next_page on are newer)
//! .. blocks       u32
//! .. used bitmap  ceil(blocks / 8) bytes, bit b = block b was not free at checkpoint time
//! ```
//! **Seal page**: `"DFTLSEAL"`, ckpt_seq u64, payload_bytes u64, payload crc32c u32, crc32c u32
//! of the 28 bytes before it. A slot counts only if its seal and payload checksums hold.

use flash::codec::{self, CorruptRecord, Reader};
use flash::{BlockId, Ppn};

/// Version of DFTL's on-flash format: every record this module encodes. The image header records it
/// (`DesignSpec::format_version`); bump it whenever a record's layout or meaning changes.
pub const FORMAT_VERSION: u32 = 2;

pub const OOB_BYTES: u32 = 16;
/// Sequence numbers fit the record's 56 bits (2^56 programs: centuries at any program rate).
pub const SEQ_LIMIT: u64 = 1 << 56;
pub const KIND_DATA: u8 = 1;
pub const KIND_TRANSLATION: u8 = 2;
/// A translation page that has recorded a trim, written only with the media model on (whose
/// devices never go to an image file, so format 2 images never hold it; docs/reliability.md):
/// a recovery that finds it lost cannot rebuild it from data pages' records, since a trimmed
/// page's older versions may still be on flash while the trimmed one was erased.
pub const KIND_TRANSLATION_TRIMS: u8 = 3;

/// Whether `kind` is a translation page's.
pub fn is_translation(kind: u8) -> bool {
    kind == KIND_TRANSLATION || kind == KIND_TRANSLATION_TRIMS
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OobRecord {
    pub kind: u8,
    pub id: u32,
    pub seq: u64,
    pub crc: u32,
}

impl OobRecord {
    pub fn encode(&self) -> [u8; OOB_BYTES as usize] {
        assert!(
            self.seq < SEQ_LIMIT,
            "sequence number {} past 56 bits",
            self.seq
        );
        let mut b = [0u8; OOB_BYTES as usize];
        b[0..8].copy_from_slice(&(self.seq << 8 | self.kind as u64).to_le_bytes());
        b[8..12].copy_from_slice(&self.id.to_le_bytes());
        b[12..16].copy_from_slice(&self.crc.to_le_bytes());
        b
    }
    /// An erased, foreign or unknown-kind record is an error (DFTL's OOB carries no checksum
    /// of its own: `crc` is the page's).
    pub fn decode(b: &[u8]) -> Result<OobRecord, CorruptRecord> {
        let mut r = Reader::new(b);
        let word = r.u64()?;
        let kind = (word & 0xff) as u8;
        if kind != KIND_DATA && !is_translation(kind) {
            return Err(CorruptRecord::UnknownKind {
                field: "dftl page kind",
                value: kind as u64,
            });
        }
        Ok(OobRecord {
            kind,
            seq: word >> 8,
            id: r.u32()?,
            crc: r.u32()?,
        })
    }
}

/// The owner a record names, as [`OobRecord::decode`] reads it: a data page's id, a translation
/// page's id with `translation` set, `None` for a record that does not decode. Only the kind and
/// the id are looked at (what an owner lookup needs: the invariant check's and recovery's).
pub fn owner_of_record(b: &[u8; OOB_BYTES as usize], translation: u32) -> Option<u32> {
    let kind = b[0];
    let id = u32::from_le_bytes([b[8], b[9], b[10], b[11]]);
    match kind {
        KIND_DATA => Some(id),
        k if is_translation(k) => Some(translation | id),
        _ => None,
    }
}

/// DFTL's record of a host data page is its kind, the page's LPN (the tag's), a zero checksum
/// and the sequence number: a tag-only device keeps only the sequence number
/// ([`flash::squeeze`]; issue #19). Translation pages' records are kept whole.
pub struct DataRecordSqueeze;

impl flash::OobSqueeze for DataRecordSqueeze {
    fn name(&self) -> &'static str {
        "dftl data record, format 2"
    }
    fn squeeze(&self, record: &[u8], tag: flash::ContentTag) -> Option<u64> {
        let r = OobRecord::decode(record).ok()?;
        (r.kind == KIND_DATA && r.id == tag.lpn && r.crc == 0).then_some(r.seq)
    }
    fn expand(&self, seq: u64, tag: flash::ContentTag, out: &mut [u8]) {
        let record = OobRecord {
            kind: KIND_DATA,
            id: tag.lpn,
            seq,
            crc: 0,
        }
        .encode();
        match <&mut [u8; OOB_BYTES as usize]>::try_from(&mut *out) {
            // The store's record is the whole record (the usual case): one 16-byte store.
            Ok(whole) => *whole = record,
            Err(_) => codec::copy_padded(&record, out),
        }
    }
}

pub fn encode_translation(entries: &[Ppn], page_bytes: usize) -> Box<[u8]> {
    assert!(
        entries.len() * 4 <= page_bytes,
        "more entries than a page holds"
    );
    let mut page = vec![0xFFu8; page_bytes].into_boxed_slice();
    for (out, p) in page.chunks_exact_mut(4).zip(entries) {
        out.copy_from_slice(&p.0.to_le_bytes());
    }
    page
}

/// Entry `i` of a translation page (entry `i` maps the page's `i`-th LPN).
pub fn translation_entry(page: &[u8], i: usize) -> Ppn {
    Ppn(u32::from_le_bytes(
        page[4 * i..4 * i + 4].try_into().expect("4 bytes"),
    ))
}

/// Sets entry `i` of a translation page.
pub fn set_translation_entry(page: &mut [u8], i: usize, ppn: Ppn) {
    page[4 * i..4 * i + 4].copy_from_slice(&ppn.0.to_le_bytes());
}

/// Checksum a translation page carries in its OOB record.
pub fn translation_crc(page: &[u8]) -> u32 {
    crc32c::crc32c(page)
}

/// Decodes a translation page into `out` after checking it against the crc of its OOB record;
/// `out` is left as it was when the page is damaged or too short for it.
pub fn decode_translation(page: &[u8], crc: u32, out: &mut [Ppn]) -> Result<(), CorruptRecord> {
    codec::check_crc(crc, page)?;
    let entries = Reader::new(page).bytes(4 * out.len())?;
    read_translation_entries(entries, out);
    Ok(())
}

/// The first `out.len()` entries of a translation page's bytes, into `out` (no checksum: for
/// a page already checked, or read after the flash read that a controller would check).
pub fn read_translation_entries(page: &[u8], out: &mut [Ppn]) {
    for (i, slot) in out.iter_mut().enumerate() {
        *slot = translation_entry(page, i);
    }
}

fn put_lists(out: &mut Vec<u8>, lists: &[Vec<BlockId>]) {
    for l in lists {
        out.extend((l.len() as u32).to_le_bytes());
        for b in l {
            out.extend(b.0.to_le_bytes());
        }
    }
}

fn get_lists(r: &mut Reader, chips: u32, blocks: u32) -> Result<Vec<Vec<BlockId>>, CorruptRecord> {
    let mut lists = Vec::with_capacity(r.capacity(chips, 4));
    for _ in 0..chips {
        let n = r.below("blocks in a list", blocks + 1)?;
        let mut l = Vec::with_capacity(r.capacity(n, 4));
        for _ in 0..n {
            l.push(BlockId(r.below("block", blocks)?));
        }
        lists.push(l);
    }
    Ok(lists)
}

/// One page of the block-reservation log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reservation {
    pub log_seq: u64,
    pub per_chip: Vec<Vec<BlockId>>,
}

impl Reservation {
    pub fn encode(&self, page_bytes: usize) -> Box<[u8]> {
        let mut out = Vec::with_capacity(page_bytes);
        out.extend(b"DFTLRESV");
        out.extend(self.log_seq.to_le_bytes());
        out.extend((self.per_chip.len() as u32).to_le_bytes());
        put_lists(&mut out, &self.per_chip);
        let crc = crc32c::crc32c(&out);
        out.extend(crc.to_le_bytes());
        assert!(out.len() <= page_bytes, "reservation page overflows");
        out.resize(page_bytes, 0);
        out.into_boxed_slice()
    }
    pub fn decode(page: &[u8], blocks: u32) -> Result<Reservation, CorruptRecord> {
        let mut r = Reader::new(page);
        r.magic(b"DFTLRESV", "reservation")?;
        let log_seq = r.u64()?;
        let chips = r.u32()?;
        let per_chip = get_lists(&mut r, chips, blocks)?;
        let end = r.position();
        codec::check_crc(r.u32()?, &page[..end])?;
        Ok(Reservation { log_seq, per_chip })
    }
}

/// Everything a checkpoint persists.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Checkpoint {
    pub ckpt_seq: u64,
    pub seq: u64,
    pub log_seq: u64,
    pub log_block: u32,
    pub log_page: u32,
    pub gtd: Vec<(Ppn, u64)>,
    pub reserved: Vec<Vec<BlockId>>,
    pub open: Vec<(BlockId, u32)>,
    /// Bit `b` set: block `b` held (or was receiving) pages at checkpoint time.
    pub used: Vec<u8>,
}

/// A checkpoint to encode that borrows the FTL's tables: the GTD (12 bytes per translation
/// page, 3 MB at 1 TB) and the block bitmap are the bulk of it and grow with the device, so
/// writing a checkpoint copies them once, into the encoded bytes. Same fields as
/// [`Checkpoint`].
pub struct CheckpointView<'a> {
    pub ckpt_seq: u64,
    pub seq: u64,
    pub log_seq: u64,
    pub log_block: u32,
    pub log_page: u32,
    pub gtd: &'a [(Ppn, u64)],
    pub reserved: &'a [Vec<BlockId>],
    pub open: &'a [(BlockId, u32)],
    pub used: &'a [u8],
}

impl CheckpointView<'_> {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64 + self.gtd.len() * 12 + self.used.len());
        out.extend(b"DFTLCKPT");
        for v in [self.ckpt_seq, self.seq, self.log_seq] {
            out.extend(v.to_le_bytes());
        }
        for v in [
            self.log_block,
            self.log_page,
            self.gtd.len() as u32,
            self.reserved.len() as u32,
            self.open.len() as u32,
        ] {
            out.extend(v.to_le_bytes());
        }
        let at = out.len();
        out.resize(at + self.gtd.len() * 12, 0);
        for (entry, (p, s)) in out[at..].chunks_exact_mut(12).zip(self.gtd) {
            entry[..4].copy_from_slice(&p.0.to_le_bytes());
            entry[4..].copy_from_slice(&s.to_le_bytes());
        }
        put_lists(&mut out, self.reserved);
        for (b, n) in self.open {
            out.extend(b.0.to_le_bytes());
            out.extend(n.to_le_bytes());
        }
        out.extend((self.used.len() as u32 * 8).to_le_bytes());
        out.extend(self.used);
        out
    }
}

impl Checkpoint {
    /// Whether block `b` was in use (not free) at checkpoint time.
    pub fn was_used(&self, b: BlockId) -> bool {
        self.used
            .get((b.0 / 8) as usize)
            .is_some_and(|byte| byte & (1 << (b.0 % 8)) != 0)
    }

    /// A bitmap over `blocks` blocks with the bits of `used` set.
    pub fn bitmap(blocks: u32, used: impl Iterator<Item = BlockId>) -> Vec<u8> {
        let mut v = vec![0u8; blocks.div_ceil(8) as usize];
        for b in used {
            v[(b.0 / 8) as usize] |= 1 << (b.0 % 8);
        }
        v
    }

    pub fn encode(&self) -> Vec<u8> {
        self.view().encode()
    }

    /// The checkpoint as a [`CheckpointView`] of its own tables.
    pub fn view(&self) -> CheckpointView<'_> {
        CheckpointView {
            ckpt_seq: self.ckpt_seq,
            seq: self.seq,
            log_seq: self.log_seq,
            log_block: self.log_block,
            log_page: self.log_page,
            gtd: &self.gtd,
            reserved: &self.reserved,
            open: &self.open,
            used: &self.used,
        }
    }

    pub fn decode(b: &[u8], blocks: u32) -> Result<Checkpoint, CorruptRecord> {
        let mut r = Reader::new(b);
        r.magic(b"DFTLCKPT", "checkpoint")?;
        let (ckpt_seq, seq, log_seq) = (r.u64()?, r.u64()?, r.u64()?);
        let (log_block, log_page, tvpns, chips, n_open) =
            (r.u32()?, r.u32()?, r.u32()?, r.u32()?, r.u32()?);
        let mut gtd = Vec::with_capacity(r.capacity(tvpns, 12));
        for _ in 0..tvpns {
            gtd.push((Ppn(r.u32()?), r.u64()?));
        }
        let reserved = get_lists(&mut r, chips, blocks)?;
        let mut open = Vec::with_capacity(r.capacity(n_open, 8));
        for _ in 0..n_open {
            let block = r.below("open block", blocks)?;
            open.push((BlockId(block), r.u32()?));
        }
        let bits = r.u32()?;
        let want = blocks.div_ceil(8) * 8;
        if bits != want {
            return Err(CorruptRecord::OutOfRange {
                field: "bitmap bits (must equal the device's blocks, rounded to bytes)",
                value: bits as u64,
                limit: want as u64,
            });
        }
        let used = r.bytes((bits / 8) as usize)?.to_vec();
        Ok(Checkpoint {
            ckpt_seq,
            seq,
            log_seq,
            log_block,
            log_page,
            gtd,
            reserved,
            open,
            used,
        })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Seal {
    pub ckpt_seq: u64,
    pub payload_bytes: u64,
    pub payload_crc: u32,
}

impl Seal {
    pub fn encode(&self, page_bytes: usize) -> Box<[u8]> {
        let mut out = Vec::with_capacity(page_bytes);
        out.extend(b"DFTLSEAL");
        out.extend(self.ckpt_seq.to_le_bytes());
        out.extend(self.payload_bytes.to_le_bytes());
        out.extend(self.payload_crc.to_le_bytes());
        let crc = crc32c::crc32c(&out);
        out.extend(crc.to_le_bytes());
        out.resize(page_bytes, 0);
        out.into_boxed_slice()
    }
    pub fn decode(page: &[u8]) -> Result<Seal, CorruptRecord> {
        let mut r = Reader::new(page);
        r.magic(b"DFTLSEAL", "seal")?;
        let (ckpt_seq, payload_bytes) = (r.u64()?, r.u64()?);
        let payload_crc = r.u32()?;
        codec::check_crc(r.u32()?, &page[..28])?;
        Ok(Seal {
            ckpt_seq,
            payload_bytes,
            payload_crc,
        })
    }
}

#[cfg(test)]
mod tests {

    /// The owner lookup agrees with the full decode on every kind byte, for any id.
    #[test]
    fn the_owner_of_a_record_is_the_decoded_ones() {
        for kind in 0..=u8::MAX {
            for id in [0u32, 7, 1 << 30, u32::MAX] {
                let mut b = [0u8; OOB_BYTES as usize];
                b[0..8].copy_from_slice(&(99u64 << 8 | kind as u64).to_le_bytes());
                b[8..12].copy_from_slice(&id.to_le_bytes());
                let decoded = OobRecord::decode(&b)
                    .ok()
                    .map(|r| match is_translation(r.kind) {
                        true => 1 << 31 | r.id,
                        false => r.id,
                    });
                assert_eq!(owner_of_record(&b, 1 << 31), decoded, "kind {kind} id {id}");
            }
        }
    }

    use super::*;

    /// A data page's record is its sequence number plus what the tag says; anything else
    /// (a translation page's record, another LPN, a checksum) has no squeezed form.
    #[test]
    fn data_records_squeeze_to_their_sequence_number() {
        use flash::{ContentTag, OobSqueeze};
        let rule = DataRecordSqueeze;
        let tag = ContentTag { lpn: 77, write: 3 };
        let data = |id, crc, kind| {
            OobRecord {
                kind,
                id,
                seq: 1 << 40,
                crc,
            }
            .encode()
        };
        assert_eq!(rule.squeeze(&data(77, 0, KIND_DATA), tag), Some(1 << 40));
        let mut out = [0u8; OOB_BYTES as usize];
        rule.expand(1 << 40, tag, &mut out);
        assert_eq!(out, data(77, 0, KIND_DATA));
        assert_eq!(rule.squeeze(&data(78, 0, KIND_DATA), tag), None);
        assert_eq!(rule.squeeze(&data(77, 5, KIND_DATA), tag), None);
        assert_eq!(rule.squeeze(&data(77, 0, KIND_TRANSLATION), tag), None);
        assert_eq!(rule.squeeze(&[0u8; OOB_BYTES as usize], tag), None);
    }

    #[test]
    fn oob_round_trip_and_rejects_blank() {
        let r = OobRecord {
            kind: KIND_DATA,
            id: 77,
            seq: 1 << 40,
            crc: 0xDEAD_BEEF,
        };
        assert_eq!(OobRecord::decode(&r.encode()).ok(), Some(r));
        assert_eq!(OobRecord::decode(&[0u8; OOB_BYTES as usize]).ok(), None);
        assert_eq!(
            OobRecord::decode(&r.encode()[..12]).ok(),
            None,
            "short record"
        );
    }

    #[test]
    fn translation_round_trip() {
        let e = vec![Ppn(3), Ppn::NONE, Ppn(1 << 20)];
        let page = encode_translation(&e, 4096);
        let mut out = vec![Ppn(0); 3];
        let crc = translation_crc(&page);
        assert_eq!(decode_translation(&page, crc, &mut out), Ok(()));
        assert_eq!(out, e);
        let mut damaged = page.to_vec();
        damaged[4095] ^= 4;
        assert!(matches!(
            decode_translation(&damaged, crc, &mut out),
            Err(CorruptRecord::BadChecksum { .. })
        ));
    }

    #[test]
    fn reservation_round_trip_and_crc() {
        let r = Reservation {
            log_seq: 9,
            per_chip: vec![vec![BlockId(1), BlockId(5)], vec![], vec![BlockId(7)]],
        };
        let mut page = r.encode(4096);
        assert_eq!(Reservation::decode(&page, 100), Ok(r.clone()));
        assert!(
            matches!(
                Reservation::decode(&page, 6),
                Err(CorruptRecord::OutOfRange {
                    field: "block",
                    value: 7,
                    limit: 6
                })
            ),
            "block ids beyond the device are rejected"
        );
        let mut damaged = page.clone();
        damaged[20] ^= 1;
        assert!(
            Reservation::decode(&damaged, 100).is_err(),
            "a damaged list is refused"
        );
        let crc_at = 8 + 8 + 4 + 3 * 4 + 3 * 4;
        page[crc_at] ^= 1;
        assert!(matches!(
            Reservation::decode(&page, 100),
            Err(CorruptRecord::BadChecksum { .. })
        ));
        page[0] ^= 1;
        assert!(matches!(
            Reservation::decode(&page, 100),
            Err(CorruptRecord::BadMagic {
                expected: "reservation",
                ..
            })
        ));
    }

    #[test]
    fn checkpoint_and_seal_round_trip() {
        let c = Checkpoint {
            ckpt_seq: 4,
            seq: 1000,
            log_seq: 12,
            log_block: 1,
            log_page: 3,
            gtd: vec![(Ppn(9), 5), (Ppn::NONE, 0)],
            reserved: vec![vec![BlockId(2)], vec![BlockId(3), BlockId(4)]],
            open: vec![(BlockId(8), 17)],
            used: Checkpoint::bitmap(64, [BlockId(8), BlockId(63)].into_iter()),
        };
        assert!(c.was_used(BlockId(63)) && c.was_used(BlockId(8)) && !c.was_used(BlockId(9)));
        let bytes = c.encode();
        assert_eq!(Checkpoint::decode(&bytes, 64), Ok(c));
        assert!(matches!(
            Checkpoint::decode(&bytes[..bytes.len() - 1], 64),
            Err(CorruptRecord::Truncated { .. })
        ));
        let s = Seal {
            ckpt_seq: 4,
            payload_bytes: bytes.len() as u64,
            payload_crc: crc32c::crc32c(&bytes),
        };
        let mut page = s.encode(4096);
        assert_eq!(Seal::decode(&page), Ok(s));
        page[9] ^= 0x80;
        assert!(matches!(
            Seal::decode(&page),
            Err(CorruptRecord::BadChecksum { .. })
        ));
    }

    /// Counts read from a damaged checkpoint size nothing: a page claiming 4 G translation
    /// pages is refused (truncated) instead of asking for 48 GB.
    #[test]
    fn a_huge_count_in_a_damaged_checkpoint_is_refused_without_allocating() {
        let c = Checkpoint {
            ckpt_seq: 1,
            seq: 2,
            log_seq: 3,
            log_block: 4,
            log_page: 5,
            gtd: vec![(Ppn(9), 5)],
            reserved: vec![vec![]],
            open: vec![],
            used: Checkpoint::bitmap(16, std::iter::empty()),
        };
        let mut page = c.encode();
        assert!(Checkpoint::decode(&page, 16).is_ok());
        // tvpns sits after the magic, three u64 and two u32.
        page[8 + 24 + 8..8 + 24 + 12].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(
            Checkpoint::decode(&page, 16),
            Err(CorruptRecord::Truncated { .. })
        ));
    }
}
