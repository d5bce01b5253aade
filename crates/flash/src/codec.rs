//! The bounds-checked reader on-flash decoders use: every read is checked against the record's
//! length, and every failure is a typed [`CorruptRecord`] naming where and why. A decoder built
//! on it cannot index past its buffer, and a count read from a damaged record cannot size an
//! allocation beyond what the record's bytes could hold ([`Reader::capacity`]). Integers are
//! little-endian.
//!
//! Every on-flash decoder is built on it: each design's OOB record and metadata pages
//! (`crates/*/src/format.rs`, the write-cached FTL's OOB record in `crates/wcache`), content
//! tags, NVMFS's NVRAM layout, the SQLite VFS's directory page and the image file's header
//! (docs/crashtest.md, "Decoders against damaged images"). The format version is kept once per
//! image, in its header (docs/nbd.md, "Format versions").

/// Why a record is not what its decoder expects: torn, foreign or damaged.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CorruptRecord {
    #[error("the record ends at byte {len}: {need} bytes wanted at byte {at}")]
    Truncated { at: usize, need: usize, len: usize },
    #[error("no {expected} record here (magic {found:02x?})")]
    BadMagic {
        expected: &'static str,
        found: Vec<u8>,
    },
    #[error("checksum {stored:#010x} stored, {computed:#010x} computed")]
    BadChecksum { stored: u32, computed: u32 },
    #[error("{field} is {found}, {expected} expected")]
    Mismatch {
        field: &'static str,
        found: u64,
        expected: u64,
    },
    #[error("{field} {value} is none this format knows")]
    UnknownKind { field: &'static str, value: u64 },
    #[error("{field} = {value} is out of range (limit {limit})")]
    OutOfRange {
        field: &'static str,
        value: u64,
        limit: u64,
    },
}

/// Reads a record front to back.
#[derive(Clone, Debug)]
pub struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    #[inline]
    pub fn new(bytes: &'a [u8]) -> Reader<'a> {
        Reader { bytes, at: 0 }
    }

    /// Bytes read so far.
    #[inline]
    pub fn position(&self) -> usize {
        self.at
    }

    /// The next `n` bytes.
    #[inline]
    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8], CorruptRecord> {
        let truncated = CorruptRecord::Truncated {
            at: self.at,
            need: n,
            len: self.bytes.len(),
        };
        let end = self.at.checked_add(n).ok_or(truncated.clone())?;
        let b = self.bytes.get(self.at..end).ok_or(truncated)?;
        self.at = end;
        Ok(b)
    }

    #[inline]
    pub fn u8(&mut self) -> Result<u8, CorruptRecord> {
        Ok(self.bytes(1)?[0])
    }

    #[inline]
    pub fn u16(&mut self) -> Result<u16, CorruptRecord> {
        let b = self.bytes(2)?;
        Ok(u16::from_le_bytes(b.try_into().expect("2 bytes")))
    }

    /// Steps over `n` bytes of padding or fields this decoder does not use.
    pub fn skip(&mut self, n: usize) -> Result<(), CorruptRecord> {
        self.bytes(n).map(|_| ())
    }

    /// A one-byte kind the format names with `known` (`None` for a value it does not know).
    pub fn kind<T>(
        &mut self,
        field: &'static str,
        known: impl FnOnce(u8) -> Option<T>,
    ) -> Result<T, CorruptRecord> {
        let value = self.u8()?;
        known(value).ok_or(CorruptRecord::UnknownKind {
            field,
            value: value as u64,
        })
    }

    #[inline]
    pub fn u32(&mut self) -> Result<u32, CorruptRecord> {
        let b = self.bytes(4)?;
        Ok(u32::from_le_bytes(b.try_into().expect("4 bytes")))
    }

    #[inline]
    pub fn u64(&mut self) -> Result<u64, CorruptRecord> {
        let b = self.bytes(8)?;
        Ok(u64::from_le_bytes(b.try_into().expect("8 bytes")))
    }

    /// The record's magic, `expected`; `name` says what record it starts.
    pub fn magic(&mut self, expected: &[u8], name: &'static str) -> Result<(), CorruptRecord> {
        let found = self.bytes(expected.len())?;
        if found == expected {
            Ok(())
        } else {
            Err(CorruptRecord::BadMagic {
                expected: name,
                found: found.to_vec(),
            })
        }
    }

    /// A value read from the record that must be below `limit`.
    pub fn below(&mut self, field: &'static str, limit: u32) -> Result<u32, CorruptRecord> {
        let value = self.u32()?;
        check_below(field, value as u64, limit as u64)?;
        Ok(value)
    }

    /// Room for `count` items of `item_bytes` each, as far as the bytes left can hold them: a
    /// count read from a damaged record must not size an allocation (DFTL's checkpoint once
    /// asked for 48 GB on a 4 G count; crates/cli/tests/decoders_fuzz.rs).
    pub fn capacity(&self, count: u32, item_bytes: usize) -> usize {
        let left = self.bytes.len().saturating_sub(self.at);
        (count as usize).min(left / item_bytes.max(1))
    }
}

/// A record of `body` bytes followed by the crc32c of those bytes (the per-page OOB records):
/// a reader over the body once the length and the checksum hold.
pub fn crc_sealed(record: &[u8], body: usize) -> Result<Reader<'_>, CorruptRecord> {
    let mut tail = Reader::new(record);
    tail.skip(body)?;
    let stored = tail.u32()?;
    check_crc(stored, &record[..body])?;
    Ok(Reader::new(&record[..body]))
}

/// A field that must hold one value (a format version, a page size, a state word).
pub fn check_equal(field: &'static str, found: u64, expected: u64) -> Result<(), CorruptRecord> {
    if found == expected {
        Ok(())
    } else {
        Err(CorruptRecord::Mismatch {
            field,
            found,
            expected,
        })
    }
}

/// `value` must be below `limit`.
pub fn check_below(field: &'static str, value: u64, limit: u64) -> Result<(), CorruptRecord> {
    if value < limit {
        Ok(())
    } else {
        Err(CorruptRecord::OutOfRange {
            field,
            value,
            limit,
        })
    }
}

/// Copies `src` into `dst` as a fixed-size field: a shorter `src` is padded with zeros, a
/// longer one cut (a page image, an OOB record of the size a store keeps).
#[inline]
pub fn copy_padded(src: &[u8], dst: &mut [u8]) {
    let n = src.len().min(dst.len());
    copy_short(&src[..n], &mut dst[..n]);
    // Not a call to `memset` for nothing: a record read into a buffer of its own length (every
    // OOB read of a recovery's scan and of the invariant checks) has no padding.
    if dst.len() > n {
        dst[n..].fill(0);
    }
}

/// `dst.copy_from_slice(src)` without a call to `memcpy` for up to 64 bytes (an OOB record, read
/// at every page of a recovery's scan and of a read): copies of fixed sizes, overlapping where
/// the length is not one of them.
#[inline]
fn copy_short(src: &[u8], dst: &mut [u8]) {
    let n = src.len();
    debug_assert_eq!(n, dst.len());
    let mut chunk = |at: usize, len: usize| dst[at..at + len].copy_from_slice(&src[at..at + len]);
    match n {
        0..=7 => {
            for i in 0..n {
                chunk(i, 1);
            }
        }
        8..=15 => {
            chunk(0, 8);
            chunk(n - 8, 8);
        }
        16..=32 => {
            chunk(0, 16);
            chunk(n - 16, 16);
        }
        33..=64 => {
            chunk(0, 32);
            chunk(n - 32, 32);
        }
        _ => dst.copy_from_slice(src),
    }
}

/// The crc32c stored after a record must be the crc32c of its bytes `covered`.
pub fn check_crc(stored: u32, covered: &[u8]) -> Result<(), CorruptRecord> {
    check_computed_crc(stored, crc32c(covered))
}

/// The crc32c of `bytes`, as the `crc32c` crate computes it, with the `crc32` instruction 8
/// bytes at a time where the buffer is short: the crate prepares for long buffers first, which
/// for the 12-byte body of an OOB record was two thirds of the checksum's time (7 % of a crash
/// campaign on the write-cached FTL, whose recovery checks every page's record).
pub fn crc32c(bytes: &[u8]) -> u32 {
    #[cfg(target_arch = "x86_64")]
    if bytes.len() <= SHORT_CRC && std::arch::is_x86_feature_detected!("sse4.2") {
        // SAFETY: the CPU has SSE4.2 (checked just above), all the function needs.
        return unsafe { short_crc32c_sse42(bytes) };
    }
    ::crc32c::crc32c(bytes)
}

/// Buffers up to this long take [`crc32c`]'s short path.
const SHORT_CRC: usize = 64;

/// [`crc32c`] of a short buffer: 8 bytes per instruction, then 4, then one at a time.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.2")]
unsafe fn short_crc32c_sse42(bytes: &[u8]) -> u32 {
    use std::arch::x86_64::{_mm_crc32_u32, _mm_crc32_u64, _mm_crc32_u8};
    let mut words = bytes.chunks_exact(8);
    let mut crc = u64::from(u32::MAX);
    for w in &mut words {
        crc = _mm_crc32_u64(crc, u64::from_le_bytes(w.try_into().expect("8 bytes")));
    }
    let mut crc = crc as u32;
    let mut rest = words.remainder();
    if rest.len() >= 4 {
        crc = _mm_crc32_u32(
            crc,
            u32::from_le_bytes(rest[..4].try_into().expect("4 bytes")),
        );
        rest = &rest[4..];
    }
    for &b in rest {
        crc = _mm_crc32_u8(crc, b);
    }
    !crc
}

/// [`check_crc`] for a crc32c the caller computed (over bytes not contiguous in memory).
pub fn check_computed_crc(stored: u32, computed: u32) -> Result<(), CorruptRecord> {
    if stored == computed {
        Ok(())
    } else {
        Err(CorruptRecord::BadChecksum { stored, computed })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every length from empty to past the short copies, into fields shorter, equal and longer.
    /// The short path gives the crate's crc32c at every length, on either side of its limit.
    #[test]
    fn the_short_crc_is_the_crates_crc() {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for n in 0..=SHORT_CRC + 9 {
            let bytes: Vec<u8> = (0..n)
                .map(|_| {
                    x = x
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    (x >> 56) as u8
                })
                .collect();
            assert_eq!(crc32c(&bytes), ::crc32c::crc32c(&bytes), "{n} bytes");
        }
        assert!(check_crc(::crc32c::crc32c(b"record"), b"record").is_ok());
        assert!(check_crc(::crc32c::crc32c(b"record") ^ 1, b"record").is_err());
    }

    #[test]
    fn copy_padded_copies_and_pads_every_length() {
        for n in 0..80usize {
            let src: Vec<u8> = (0..n).map(|i| i as u8 ^ 0x5a).collect();
            for len in [n.saturating_sub(3), n, n + 5] {
                let mut dst = vec![0xffu8; len];
                copy_padded(&src, &mut dst);
                let m = n.min(len);
                assert_eq!(dst[..m], src[..m], "{n} into {len}");
                assert!(dst[m..].iter().all(|&b| b == 0), "{n} into {len}");
            }
        }
    }

    #[test]
    fn every_read_past_the_end_is_a_typed_error() {
        let mut r = Reader::new(&[1, 0, 0, 0, 2, 0]);
        assert_eq!(r.u32(), Ok(1));
        assert_eq!(
            r.u32(),
            Err(CorruptRecord::Truncated {
                at: 4,
                need: 4,
                len: 6
            })
        );
        assert_eq!(r.position(), 4, "a failed read consumes nothing");
        assert!(r.bytes(usize::MAX).is_err(), "no overflow on a huge length");
    }

    #[test]
    fn magic_range_and_checksum_failures_say_what_is_wrong() {
        let mut r = Reader::new(b"DFTLXXXX\x09\0\0\0");
        assert!(matches!(
            r.magic(b"DFTLSEAL", "seal"),
            Err(CorruptRecord::BadMagic {
                expected: "seal",
                ..
            })
        ));
        let mut r = Reader::new(&[9, 0, 0, 0]);
        assert_eq!(
            r.below("block", 9),
            Err(CorruptRecord::OutOfRange {
                field: "block",
                value: 9,
                limit: 9
            })
        );
        assert!(check_crc(crc32c::crc32c(b"abc"), b"abc").is_ok());
        assert!(matches!(
            check_crc(0, b"abc"),
            Err(CorruptRecord::BadChecksum { stored: 0, .. })
        ));
    }

    #[test]
    fn a_crc_sealed_record_is_read_only_when_whole_and_intact() {
        let mut rec = vec![7u8, 1, 0, 0];
        rec.extend(crc32c::crc32c(&rec).to_le_bytes());
        let mut r = crc_sealed(&rec, 4).expect("intact");
        assert_eq!(r.kind("kind", |k| (k == 7).then_some("seven")), Ok("seven"));
        assert_eq!(r.u8(), Ok(1));
        assert_eq!(r.u16(), Ok(0));
        assert!(
            r.u8().is_err(),
            "the reader ends at the body, not at the checksum"
        );
        assert!(matches!(
            crc_sealed(&rec[..7], 4),
            Err(CorruptRecord::Truncated { .. })
        ));
        rec[1] ^= 1;
        assert!(matches!(
            crc_sealed(&rec, 4),
            Err(CorruptRecord::BadChecksum { .. })
        ));
        let mut r = Reader::new(&[9]);
        assert_eq!(
            r.kind("kind", |k| (k == 7).then_some(())),
            Err(CorruptRecord::UnknownKind {
                field: "kind",
                value: 9
            })
        );
    }

    #[test]
    fn a_damaged_count_cannot_size_an_allocation() {
        let r = Reader::new(&[0u8; 40]);
        assert_eq!(r.capacity(u32::MAX, 8), 5);
        assert_eq!(r.capacity(3, 8), 3);
    }
}
