//! FAST's on-flash record: one OOB record per programmed page.
//!
//! `kind u8 | pad [u8; 3] | lpn u32 | seq u64 | gen u64 | crc32c(bytes 0..24) u32` (28 bytes,
//! little-endian). `kind` names the role of the block the page was written into (a data block,
//! the sequential log block or a random log block); `seq` numbers host writes (a merge copy keeps
//! its source's `seq`, so the newest surviving version of a page is the one with the largest
//! `seq`); `gen` numbers block allocations (every page of a block carries the block's `gen`, so
//! recovery can tell a merge's new data block from the one it replaces and order the random log
//! blocks oldest first).

use flash::codec::{self, CorruptRecord};

/// OOB record bytes per page.
pub const OOB_BYTES: u32 = 28;

/// Version of FAST's on-flash format (the record above). The image header records it
/// (`DesignSpec::format_version`); bump it whenever the record changes.
pub const FORMAT_VERSION: u32 = 1;

/// The role of the block a page was programmed into.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// A data block (block-mapped: page `i` holds offset `i` of its logical block), written in
    /// place or by a merge.
    Data = 1,
    /// The sequential-write (SW) log block: offsets 0, 1, 2… of one logical block, in order.
    Sw = 2,
    /// A random-write (RW) log block: any page of any logical block, appended.
    Rw = 3,
}

impl Kind {
    fn from_u8(v: u8) -> Option<Kind> {
        match v {
            1 => Some(Kind::Data),
            2 => Some(Kind::Sw),
            3 => Some(Kind::Rw),
            _ => None,
        }
    }
}

/// One page's OOB record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageOob {
    pub kind: Kind,
    pub lpn: u32,
    pub seq: u64,
    pub gen: u64,
}

impl PageOob {
    pub fn encode(&self) -> [u8; OOB_BYTES as usize] {
        let mut b = [0u8; OOB_BYTES as usize];
        b[0] = self.kind as u8;
        b[4..8].copy_from_slice(&self.lpn.to_le_bytes());
        b[8..16].copy_from_slice(&self.seq.to_le_bytes());
        b[16..24].copy_from_slice(&self.gen.to_le_bytes());
        let crc = crc32c::crc32c(&b[0..24]);
        b[24..28].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// An error when the record is short, torn or foreign.
    pub fn decode(b: &[u8]) -> Result<PageOob, CorruptRecord> {
        let mut r = codec::crc_sealed(b, 24)?;
        let kind = r.kind("fast block kind", Kind::from_u8)?;
        r.skip(3)?;
        Ok(PageOob {
            kind,
            lpn: r.u32()?,
            seq: r.u64()?,
            gen: r.u64()?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_round_trips_and_a_flipped_bit_is_refused() {
        let rec = PageOob {
            kind: Kind::Sw,
            lpn: 77,
            seq: 1 << 40,
            gen: 9,
        };
        let mut b = rec.encode();
        assert_eq!(PageOob::decode(&b), Ok(rec));
        b[5] ^= 1;
        assert!(matches!(
            PageOob::decode(&b),
            Err(CorruptRecord::BadChecksum { .. })
        ));
        assert!(PageOob::decode(&b[..20]).is_err());
        assert!(PageOob::decode(&[0u8; 28]).is_err());
    }
}
