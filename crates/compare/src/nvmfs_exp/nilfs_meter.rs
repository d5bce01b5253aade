//! nilfs2's segment cleaning, counted from the blocks it writes (NVMFS §IV-D, Figs. 10–11).
//!
//! The paper compares NVMFS's recycled blocks and cleaning efficiency, "1 − moved valid blocks /
//! recycled blocks", with nilfs2's. nilfs2 reports neither: its cleaner daemon logs only which
//! segments it cleaned, to syslog. Both can be read exactly from what reaches the SSD, since
//! nilfs2 writes only whole logs, each beginning with a segment summary (`nilfs2_ondisk.h`,
//! `struct nilfs_segment_summary`):
//!
//! - a log the cleaner wrote carries `NILFS_SS_GC`; its blocks other than the summary and the
//!   super root are what the cleaner moved (the live blocks of the segments it cleaned, and the
//!   metadata blocks — DAT, segment usage — that moving them changed);
//! - a segment is written again only after the cleaner freed it, so the first log of a new
//!   segment sequence number in a segment written before is a recycled segment.
//!
//! Segments cleaned and not yet written again when the run ends are not counted (a lower bound).

use nvmfs::layout::{get_u32, get_u64};
use std::collections::HashMap;

/// `NILFS_SEGSUM_MAGIC`.
const SEGSUM_MAGIC: u32 = 0x1eaf_fa11;
/// `NILFS_SS_SR`: the log ends with a super root block.
const SS_SR: u16 = 0x0004;
/// `NILFS_SS_GC`: the log was written for the cleaner.
const SS_GC: u16 = 0x0010;
/// The fixed part of a segment summary (through `ss_cno`).
const HEADER_BYTES: usize = 64;

/// The fields of a segment summary that the count needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SegmentSummary {
    pub flags: u16,
    /// The segment's sequence number (every log of one segment write carries it).
    pub seq: u64,
    /// Blocks of the log, the summary's own included.
    pub nblocks: u32,
    /// Bytes of summary (header and file information), so `ceil(sumbytes / block)` blocks.
    pub sumbytes: u32,
}

impl SegmentSummary {
    /// The summary `block` begins with, if it is one: the magic, a header of the size this
    /// format has, and sizes that fit together (a log of at least its summary blocks).
    pub fn parse(block: &[u8]) -> Option<SegmentSummary> {
        if block.len() < HEADER_BYTES || get_u32(block, 8) != SEGSUM_MAGIC {
            return None;
        }
        let header = u16::from_le_bytes([block[12], block[13]]) as usize;
        let s = SegmentSummary {
            flags: u16::from_le_bytes([block[14], block[15]]),
            seq: get_u64(block, 16),
            nblocks: get_u32(block, 40),
            sumbytes: get_u32(block, 48),
        };
        let summary_blocks = s.summary_blocks(block.len() as u32);
        let sane = header == HEADER_BYTES
            && s.sumbytes as usize >= header
            && s.nblocks >= summary_blocks + u32::from(s.flags & SS_SR != 0);
        sane.then_some(s)
    }

    fn summary_blocks(&self, block_bytes: u32) -> u32 {
        self.sumbytes.div_ceil(block_bytes)
    }

    /// Blocks of the log that are neither summary nor super root.
    pub fn payload_blocks(&self, block_bytes: u32) -> u32 {
        self.nblocks - self.summary_blocks(block_bytes) - u32::from(self.flags & SS_SR != 0)
    }

    pub fn written_by_cleaner(&self) -> bool {
        self.flags & SS_GC != 0
    }
}

/// The cleaner's work as the logs nilfs2 writes show it.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct CleanerCounts {
    /// Segments written again after the cleaner freed them.
    pub recycled_segments: u64,
    /// Blocks in those segments (the paper's "recycled blocks").
    pub recycled_blocks: u64,
    /// Blocks of logs the cleaner wrote, summaries and super roots left out (the paper's
    /// "moved valid blocks").
    pub moved_blocks: u64,
    /// Logs the cleaner wrote.
    pub cleaner_logs: u64,
}

impl CleanerCounts {
    /// What happened from `before` to `self`.
    pub fn since(&self, before: &CleanerCounts) -> CleanerCounts {
        CleanerCounts {
            recycled_segments: self.recycled_segments - before.recycled_segments,
            recycled_blocks: self.recycled_blocks - before.recycled_blocks,
            moved_blocks: self.moved_blocks - before.moved_blocks,
            cleaner_logs: self.cleaner_logs - before.cleaner_logs,
        }
    }

    /// `1 − moved / recycled` (NVMFS §IV-D); `None` before anything was recycled.
    pub fn efficiency(&self) -> Option<f64> {
        (self.recycled_blocks > 0)
            .then(|| 1.0 - self.moved_blocks as f64 / self.recycled_blocks as f64)
    }
}

/// Watches the blocks written to a nilfs2 volume of `blocks_per_segment`-block segments
/// (`mkfs.nilfs2 -B`).
#[derive(Debug)]
pub struct CleanerMeter {
    blocks_per_segment: u64,
    /// The newest segment sequence number seen in each segment.
    seq_of_segment: HashMap<u64, u64>,
    counts: CleanerCounts,
}

impl CleanerMeter {
    pub fn new(blocks_per_segment: u32) -> CleanerMeter {
        assert!(blocks_per_segment > 0);
        CleanerMeter {
            blocks_per_segment: blocks_per_segment as u64,
            seq_of_segment: HashMap::new(),
            counts: CleanerCounts::default(),
        }
    }

    /// File-system block `block` was written with `bytes`.
    pub fn observe(&mut self, block: u64, bytes: &[u8]) {
        let Some(s) = SegmentSummary::parse(bytes) else {
            return;
        };
        let segment = block / self.blocks_per_segment;
        match self.seq_of_segment.insert(segment, s.seq) {
            Some(old) if old != s.seq => {
                self.counts.recycled_segments += 1;
                self.counts.recycled_blocks += self.blocks_per_segment;
            }
            _ => {}
        }
        if s.written_by_cleaner() {
            self.counts.cleaner_logs += 1;
            self.counts.moved_blocks += s.payload_blocks(bytes.len() as u32) as u64;
        }
    }

    pub fn counts(&self) -> CleanerCounts {
        self.counts.clone()
    }
}

/// A 4 KB block holding a segment summary with these fields (tests).
#[cfg(test)]
pub(crate) fn summary_block(flags: u16, seq: u64, nblocks: u32, sumbytes: u32) -> Vec<u8> {
    tests::summary(flags, seq, nblocks, sumbytes)
}

#[cfg(test)]
pub(crate) const GC_LOG_FLAGS: u16 = SS_GC | SS_SR;

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn summary(flags: u16, seq: u64, nblocks: u32, sumbytes: u32) -> Vec<u8> {
        let mut b = vec![0u8; 4096];
        b[8..12].copy_from_slice(&SEGSUM_MAGIC.to_le_bytes());
        b[12..14].copy_from_slice(&(HEADER_BYTES as u16).to_le_bytes());
        b[14..16].copy_from_slice(&flags.to_le_bytes());
        b[16..24].copy_from_slice(&seq.to_le_bytes());
        b[40..44].copy_from_slice(&nblocks.to_le_bytes());
        b[48..52].copy_from_slice(&sumbytes.to_le_bytes());
        b
    }

    /// A summary parses with its fields; data, a wrong magic, a header of another size and a
    /// log shorter than its own summary and super root do not.
    #[test]
    fn only_a_consistent_summary_parses() {
        let s = SegmentSummary::parse(&summary(SS_GC | SS_SR, 7, 40, 5000)).unwrap();
        assert_eq!((s.seq, s.nblocks, s.sumbytes), (7, 40, 5000));
        assert!(s.written_by_cleaner());
        assert_eq!(s.payload_blocks(4096), 40 - 2 - 1);
        assert_eq!(SegmentSummary::parse(&[0x5a; 4096]), None);
        let mut wrong_magic = summary(0, 7, 40, 100);
        wrong_magic[8] ^= 1;
        assert_eq!(SegmentSummary::parse(&wrong_magic), None);
        let mut other_header = summary(0, 7, 40, 100);
        other_header[12] = 48;
        assert_eq!(SegmentSummary::parse(&other_header), None);
        assert_eq!(SegmentSummary::parse(&summary(SS_SR, 7, 1, 100)), None);
        assert_eq!(SegmentSummary::parse(&summary(0, 7, 0, 100)), None);
        assert_eq!(SegmentSummary::parse(&summary(0, 7, 1, 100)[..32]), None);
    }

    /// Moved blocks come from the cleaner's logs only; a segment counts as recycled when a
    /// new sequence number is written into it, not at its first write or at a second log of
    /// the same segment write.
    #[test]
    fn the_meter_counts_cleaner_logs_and_reused_segments() {
        let mut m = CleanerMeter::new(256);
        m.observe(0, &summary(SS_SR, 1, 10, 200)); // segment 0, first write
        m.observe(10, &summary(0, 1, 20, 200)); // segment 0, same write, a second log
        m.observe(256, &summary(SS_GC | SS_SR, 2, 50, 4097)); // segment 1: cleaner's log
        m.observe(300, &[7u8; 4096]); // data
        assert_eq!(
            m.counts(),
            CleanerCounts {
                recycled_segments: 0,
                recycled_blocks: 0,
                moved_blocks: 50 - 2 - 1,
                cleaner_logs: 1,
            }
        );
        let before = m.counts();
        m.observe(3, &summary(0, 9, 12, 100)); // segment 0 again, after cleaning
        let d = m.counts().since(&before);
        assert_eq!(
            (d.recycled_segments, d.recycled_blocks, d.moved_blocks),
            (1, 256, 0)
        );
        let e = m.counts().efficiency().unwrap();
        assert!((e - (1.0 - 47.0 / 256.0)).abs() < 1e-12, "{e}");
        assert_eq!(CleanerCounts::default().efficiency(), None);
    }
}
