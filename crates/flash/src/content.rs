//! What a host data page holds.
//!
//! In tag-only mode a host page keeps a [`ContentTag`] — which logical page and which host write
//! produced it — instead of its bytes, as the VST simulator of the OPTR paper does (OPTR §5). In
//! full-data mode the same tag is expanded into a deterministic page image ([`ContentTag::fill`])
//! so the crash checker can tell, from bytes alone, which write a page came from and whether it is
//! intact ([`ContentTag::decode`]). Metadata pages (translation pages, atom inodes, checkpoints,
//! summaries) are always real bytes.

use crate::codec::{CorruptRecord, Reader};
use xxhash_rust::xxh3::xxh3_64;

/// Identity of one host page write: the logical page it was written to and the host-wide write
/// number (unique per page write; the host log maps it to its request, transaction and version).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ContentTag {
    pub lpn: u32,
    pub write: u64,
}

const TAG_MAGIC: [u8; 4] = *b"MTAG";

impl ContentTag {
    /// Writes this tag's page image: magic, lpn, write number, then a pattern seeded by both.
    pub fn fill(&self, page: &mut [u8]) {
        debug_assert!(page.len() >= 32);
        page[0..4].copy_from_slice(&TAG_MAGIC);
        page[4..8].copy_from_slice(&self.lpn.to_le_bytes());
        page[8..16].copy_from_slice(&self.write.to_le_bytes());
        let mut state = xxh3_64(&page[0..16]);
        for chunk in page[16..].chunks_mut(8) {
            let bytes = state.to_le_bytes();
            chunk.copy_from_slice(&bytes[..chunk.len()]);
            state = state
                .wrapping_mul(0x9E37_79B9_7F4A_7C15)
                .wrapping_add(0x632B_E59B_D9B4_E019);
        }
    }

    /// Recovers the tag from a page image made by [`fill`](Self::fill); an error if the page is
    /// not such an image or any byte differs (garbage, torn or foreign data).
    pub fn decode(page: &[u8]) -> Result<ContentTag, CorruptRecord> {
        let mut r = Reader::new(page);
        r.magic(&TAG_MAGIC, "content tag")?;
        let tag = ContentTag {
            lpn: r.u32()?,
            write: r.u64()?,
        };
        r.skip(32 - r.position())?;
        let mut expected = vec![0u8; page.len()];
        tag.fill(&mut expected);
        match expected.iter().zip(page).position(|(e, p)| e != p) {
            None => Ok(tag),
            Some(at) => Err(CorruptRecord::Mismatch {
                field: "byte of the tag's fill",
                found: at as u64,
                expected: page.len() as u64,
            }),
        }
    }

    /// Whether `page` may be a tag's image: it starts as one does. A page that does not cannot
    /// [`decode`](Self::decode), so a caller holding part of a page can skip the rest.
    pub fn may_be_image(page: &[u8]) -> bool {
        page.starts_with(&TAG_MAGIC)
    }

    pub fn to_bytes(&self, page_bytes: usize) -> Box<[u8]> {
        let mut page = vec![0u8; page_bytes].into_boxed_slice();
        self.fill(&mut page);
        page
    }
}

/// The contents of one page's data area.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Content {
    /// A host page represented by its tag (tag-only simulation; no bytes kept).
    Tag(ContentTag),
    /// Real bytes: metadata pages always, host pages in full-data mode.
    Bytes(Box<[u8]>),
}

impl Content {
    /// The tag this content carries, directly or decoded from a full page image.
    pub fn tag(&self) -> Option<ContentTag> {
        match self {
            Content::Tag(t) => Some(*t),
            Content::Bytes(b) => ContentTag::decode(b).ok(),
        }
    }

    /// The bytes of this content as a page of `page_bytes` (tags are expanded).
    pub fn to_page_bytes(&self, page_bytes: usize) -> Box<[u8]> {
        match self {
            Content::Tag(t) => t.to_bytes(page_bytes),
            // A whole page is copied as it is: no zeroing pass first.
            Content::Bytes(b) if b.len() == page_bytes => b.clone(),
            Content::Bytes(_) => {
                let mut page = vec![0u8; page_bytes].into_boxed_slice();
                self.copy_page_into(&mut page);
                page
            }
        }
    }

    /// Writes this content's page image into `page` (the page size is `page.len()`): tags are
    /// expanded, short byte contents are padded with zeros, longer ones cut.
    pub fn copy_page_into(&self, page: &mut [u8]) {
        match self {
            Content::Tag(t) => t.fill(page),
            Content::Bytes(b) => crate::codec::copy_padded(b, page),
        }
    }

    pub fn as_bytes(&self) -> Option<&[u8]> {
        match self {
            Content::Bytes(b) => Some(b),
            Content::Tag(_) => None,
        }
    }
}

/// What a page holds, in words for an error message: never the bytes themselves (a page is
/// thousands of them), at most their length and CRC32C, the checksum the designs' records keep.
impl std::fmt::Display for Content {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Content::Tag(t) => write!(f, "the content tag of lpn {} write {}", t.lpn, t.write),
            Content::Bytes(b) => match ContentTag::decode(b) {
                Ok(t) => write!(
                    f,
                    "{} bytes of the page image of lpn {} write {}",
                    b.len(),
                    t.lpn,
                    t.write
                ),
                Err(_) if b.iter().all(|&x| x == 0) => write!(f, "{} bytes, all zero", b.len()),
                Err(_) => write!(
                    f,
                    "{} bytes whose CRC32C is {:#010x}",
                    b.len(),
                    crc32c::crc32c(b)
                ),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_reads_as_a_phrase_without_its_bytes() {
        let tag = ContentTag { lpn: 7, write: 12 };
        assert_eq!(
            Content::Tag(tag).to_string(),
            "the content tag of lpn 7 write 12"
        );
        assert_eq!(
            Content::Bytes(tag.to_bytes(4096)).to_string(),
            "4096 bytes of the page image of lpn 7 write 12"
        );
        assert_eq!(
            Content::Bytes(vec![0; 4096].into()).to_string(),
            "4096 bytes, all zero"
        );
        let page: Box<[u8]> = (0..4096).map(|i| (i * 7 % 251) as u8).collect();
        let crc = crc32c::crc32c(&page);
        assert_eq!(
            Content::Bytes(page).to_string(),
            format!("4096 bytes whose CRC32C is {crc:#010x}")
        );
    }

    #[test]
    fn tag_round_trips_through_bytes() {
        let tag = ContentTag {
            lpn: 77,
            write: 123_456_789,
        };
        let page = tag.to_bytes(4096);
        assert_eq!(ContentTag::decode(&page).ok(), Some(tag));
        assert_eq!(Content::Bytes(page.clone()).tag(), Some(tag));
        let mut damaged = page.to_vec();
        damaged[4000] ^= 1;
        assert_eq!(ContentTag::decode(&damaged).ok(), None);
        assert_eq!(ContentTag::decode(&[0u8; 4096]).ok(), None);
        let other = ContentTag {
            lpn: 78,
            write: 123_456_789,
        }
        .to_bytes(4096);
        assert_ne!(page, other);
    }
}
