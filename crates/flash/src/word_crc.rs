//! The CRC-32C of a buffer kept up to date as 4-byte words of it change, without reading the
//! rest: a DFTL write-back changes a few entries of a 4 KB translation page, whose CRC its OOB
//! record carries (issue #19: reading the whole page for it was a tenth of a GC-heavy run).
//!
//! CRC-32C (Castagnoli polynomial P, bit-reflected) is linear: for buffers of equal length,
//! `crc(a ⊕ d) = crc(a) ⊕ raw(d)`, where `raw` is the CRC without its initial and final
//! inversion. A buffer that is zero but for the word `w` at word index `i` has
//! `raw = W · x^(32 + 8m) mod P`, `m` being the bytes after the word. [`WordCrc`] keeps
//! `x^(8m) mod P` for every word index and multiplies carry-less (`pclmulqdq`, reduced by the
//! `crc32` instruction), or in software where those instructions are missing. The tests hold
//! it to `crc32c` of the whole buffer.

/// Castagnoli polynomial, bit-reflected, without its x^32 term.
const POLY: u32 = 0x82F6_3B78;
/// The polynomial 1 in the reflected representation (bit 31 is the coefficient of x^0).
const ONE: u32 = 1 << 31;

/// `v · x mod P`.
fn times_x(v: u32) -> u32 {
    (v >> 1) ^ if v & 1 != 0 { POLY } else { 0 }
}

/// `a · b mod P` (Horner's rule over `b`'s coefficients, highest degree first).
fn multiply(a: u32, b: u32) -> u32 {
    (0..32).fold(0, |r, k| times_x(r) ^ if b >> k & 1 != 0 { a } else { 0 })
}

/// `x^32 mod P`.
fn x32() -> u32 {
    (0..32).fold(ONE, |v, _| times_x(v))
}

/// The table of [`WordCrc`] for buffers of `len` bytes, computed once per length in a process
/// and shared: a design builds one at every format and recovery, and computing it (1,024
/// polynomial products for a 4 KB page) was a quarter of Möbius's recovery in a crash campaign.
fn powers(len: usize) -> std::sync::Arc<[u32]> {
    use std::sync::{Arc, Mutex, OnceLock};
    /// The tables computed so far, by buffer length.
    type Tables = Vec<(usize, Arc<[u32]>)>;
    static TABLES: OnceLock<Mutex<Tables>> = OnceLock::new();
    let tables = TABLES.get_or_init(Default::default);
    let mut tables = tables
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some((_, table)) = tables.iter().find(|(l, _)| *l == len) {
        return Arc::clone(table);
    }
    let words = len / 4;
    let x32 = x32();
    let after = |i: usize| len - 4 * i - 4;
    let mut shift = vec![0u32; words];
    // x^(8m) for m = bytes after word i; from the last word (m = len % 4) backwards.
    let mut power = (0..8 * (len % 4)).fold(ONE, |v, _| times_x(v));
    for i in (0..words).rev() {
        debug_assert_eq!(8 * after(i) % 32, 8 * (len % 4) % 32);
        shift[i] = power;
        power = multiply(power, x32);
    }
    let table: Arc<[u32]> = shift.into();
    tables.push((len, Arc::clone(&table)));
    table
}

/// Updates the CRC-32C of a buffer of a fixed length for changes of its aligned 4-byte words.
#[derive(Clone, Debug)]
pub struct WordCrc {
    /// Per word index `i`: `x^(8m) mod P`, `m` the bytes after the word ([`powers`]).
    shift: std::sync::Arc<[u32]>,
    x32: u32,
    hardware: bool,
}

impl WordCrc {
    /// For buffers of `len` bytes (words at `0, 4, 8, …`; a tail shorter than a word is not one).
    pub fn new(len: usize) -> WordCrc {
        let mut crc = WordCrc::software(len);
        #[cfg(target_arch = "x86_64")]
        {
            crc.hardware = std::arch::is_x86_feature_detected!("pclmulqdq")
                && std::arch::is_x86_feature_detected!("sse4.2");
        }
        crc
    }

    /// [`new`](Self::new) computing in software only (tests compare the two).
    pub fn software(len: usize) -> WordCrc {
        WordCrc {
            shift: powers(len),
            x32: x32(),
            hardware: false,
        }
    }

    /// How the CRC changes when word `i` (little-endian) changes by `xor` (old ⊕ new): the
    /// new CRC is the old one ⊕ this.
    #[inline]
    pub fn word_change(&self, i: usize, xor: u32) -> u32 {
        let shift = self.shift[i];
        #[cfg(target_arch = "x86_64")]
        if self.hardware {
            // SAFETY: `hardware` is set only where the CPU has both instructions.
            return unsafe { shifted_by_hardware(xor, shift) };
        }
        multiply(multiply(xor, shift), self.x32)
    }

    /// The buffer length's word count.
    pub fn words(&self) -> usize {
        self.shift.len()
    }

    /// Heap bytes (the table of powers).
    pub fn memory(&self) -> u64 {
        self.shift.len() as u64 * 4
    }
}

/// A buffer being rewritten word by word with its CRC-32C kept up to date from the changed
/// words alone ([`WordCrc`]): a metadata page rewritten from its previous copy (DFTL's
/// translation-page write-back, Möbius's merge, the log engine's tree pages). Which bytes the
/// CRC covers is the caller's: a word the CRC reads as zero (a checksum field inside the buffer)
/// must not be set through the edit.
pub struct WordEdit<'a> {
    bytes: Box<[u8]>,
    crc: u32,
    words: &'a WordCrc,
}

impl<'a> WordEdit<'a> {
    /// Edits `bytes`, whose CRC is `crc`; `words` is for buffers of their length.
    pub fn new(bytes: Box<[u8]>, crc: u32, words: &'a WordCrc) -> WordEdit<'a> {
        debug_assert_eq!(bytes.len() / 4, words.words());
        WordEdit { bytes, crc, words }
    }
    /// Word `i` (little-endian).
    pub fn word(&self, i: usize) -> u32 {
        u32::from_le_bytes(self.bytes[4 * i..4 * i + 4].try_into().expect("4 bytes"))
    }
    /// Sets word `i` (little-endian) to `value`.
    pub fn set(&mut self, i: usize, value: u32) {
        let before = self.word(i);
        if before != value {
            self.bytes[4 * i..4 * i + 4].copy_from_slice(&value.to_le_bytes());
            self.crc ^= self.words.word_change(i, before ^ value);
        }
    }
    /// The buffer and its CRC.
    pub fn finish(self) -> (Box<[u8]>, u32) {
        (self.bytes, self.crc)
    }
}

/// `w · k · x^32 mod P`: the carry-less product of two reflected 32-bit polynomials is the
/// integer product shifted left by one in 64-bit reflected form, and `crc32` of a 64-bit word
/// from zero is that word times x^32, reduced.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "pclmulqdq,sse4.2")]
unsafe fn shifted_by_hardware(w: u32, k: u32) -> u32 {
    use std::arch::x86_64::{
        _mm_clmulepi64_si128, _mm_crc32_u64, _mm_cvtsi128_si64, _mm_cvtsi32_si128,
    };
    let product = _mm_clmulepi64_si128(_mm_cvtsi32_si128(w as i32), _mm_cvtsi32_si128(k as i32), 0);
    _mm_crc32_u64(0, (_mm_cvtsi128_si64(product) as u64) << 1) as u32
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{RngExt, SeedableRng};

    /// Word by word, the kept CRC equals crc32c of the whole buffer, in hardware and in
    /// software, at page sizes and at lengths with a tail.
    #[test]
    fn the_kept_crc_is_the_crc_of_the_buffer() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(19);
        for len in [4usize, 8, 100, 103, 512, 2048, 4096] {
            for words in [WordCrc::new(len), WordCrc::software(len)] {
                let mut buffer: Vec<u8> = (0..len).map(|_| rng.random()).collect();
                let mut crc = crc32c::crc32c(&buffer);
                for _ in 0..200 {
                    let i = rng.random_range(0..words.words());
                    let old = u32::from_le_bytes(buffer[4 * i..4 * i + 4].try_into().unwrap());
                    let new: u32 = rng.random();
                    buffer[4 * i..4 * i + 4].copy_from_slice(&new.to_le_bytes());
                    crc ^= words.word_change(i, old ^ new);
                    assert_eq!(crc, crc32c::crc32c(&buffer), "len {len} word {i}");
                }
            }
        }
    }

    /// An edit keeps the CRC of the buffer it hands back, whatever words it set, and a word set
    /// to its own value changes nothing.
    #[test]
    fn an_edit_keeps_the_crc_of_its_buffer() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(23);
        let words = WordCrc::new(4096);
        let bytes: Box<[u8]> = (0..4096).map(|_| rng.random()).collect();
        let mut edit = WordEdit::new(bytes.clone(), crc32c::crc32c(&bytes), &words);
        for _ in 0..100 {
            let (i, value) = (rng.random_range(0..words.words()), rng.random());
            edit.set(i, value);
            assert_eq!(edit.word(i), value);
        }
        let same = edit.word(7);
        edit.set(7, same);
        let (bytes, crc) = edit.finish();
        assert_eq!(crc, crc32c::crc32c(&bytes));
    }

    /// The check above can fail: a change credited to the wrong word gives the wrong CRC.
    #[test]
    fn a_change_at_the_wrong_word_is_caught() {
        let words = WordCrc::new(4096);
        let mut buffer = vec![0u8; 4096];
        let crc = crc32c::crc32c(&buffer);
        buffer[40] = 1;
        assert_eq!(crc ^ words.word_change(10, 1), crc32c::crc32c(&buffer));
        assert_ne!(crc ^ words.word_change(11, 1), crc32c::crc32c(&buffer));
        assert_eq!(words.word_change(10, 0), 0, "no change, no difference");
    }
}
