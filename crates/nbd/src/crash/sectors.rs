//! Sectors: what the NBD crash campaign writes, how it logs it, and how it reads a recovered
//! device back for the crash checker's oracle.
//!
//! NBD requests are 512-byte aligned, not page aligned, so the campaign judges 512-byte
//! sectors: every sector it writes carries its own number and the number of the sector write
//! (a content tag at sector granularity), and the run is logged as a [`HostLog`] whose
//! "logical pages" are sectors. The crash checker's oracle ([`crashtest::oracle::Model`]) then
//! judges the sectors read back exactly as it judges pages: a sub-page write whose
//! read-modify-write lost a neighbour's sectors shows that neighbour's older version, and a
//! request that is atomic only in part shows some of its sectors new and some old.
//!
//! Zeros are ambiguous: a sector reads as zeros when it was never written, trimmed, or zeroed
//! by WRITE_ZEROES. [`SectorLog::seen`] reads them in one of three ways ([`Reading`]): as the
//! latest WRITE_ZEROES issued by the cut, as the least the image must hold, or as the shortest
//! prefix of the requests that explains the image leaves them. Where a WRITE_ZEROES is all or
//! nothing (a static transaction; any request under `ordered`), one read as present on some of
//! its sectors shows on its other zero sectors too, and one visibly absent from some of them is
//! read as absent. The campaign judges an image under every reading and counts a violation only
//! if all of them break the promise: each maps a sector to a write that could have left its
//! zeros, so none invents a violation, and a zeroing lost where older data shows is still
//! caught.

use crashtest::oracle::Seen;
use flash::{Content, ContentTag, Lpn};
use ftl::{PageOutcome, Promise, SwriteMode, TxUuid};
use std::collections::BTreeSet;
use workload::{HostLog, HostOp, HostRecord};

/// Bytes per sector: NBD's alignment.
pub const SECTOR_BYTES: u64 = 512;

const MAGIC: [u8; 8] = *b"mobiSECT";

/// One step of splitmix64: the filler of a sector's bytes.
fn splitmix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Writes the content of sector write `write` to sector `sector` into `out` (512 bytes): a
/// magic, the two numbers, and filler derived from them, so a sector holding bytes of two
/// writes, or of none, decodes as garbage.
pub fn encode(sector: u64, write: u64, out: &mut [u8]) {
    out[..8].copy_from_slice(&MAGIC);
    out[8..16].copy_from_slice(&sector.to_le_bytes());
    out[16..24].copy_from_slice(&write.to_le_bytes());
    let mut x = sector ^ write.rotate_left(29);
    for chunk in out[24..SECTOR_BYTES as usize].chunks_mut(8) {
        x = splitmix(x);
        chunk.copy_from_slice(&x.to_le_bytes()[..chunk.len()]);
    }
}

/// What one sector's bytes are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sector {
    Zero,
    Tagged { sector: u64, write: u64 },
    Garbage,
}

/// Decodes 512 bytes written by [`encode`] (or zeros).
pub fn decode(bytes: &[u8]) -> Sector {
    if bytes.iter().all(|&b| b == 0) {
        return Sector::Zero;
    }
    if bytes.len() != SECTOR_BYTES as usize || bytes[..8] != MAGIC {
        return Sector::Garbage;
    }
    let word = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
    let (sector, write) = (word(8), word(16));
    let mut expected = [0u8; SECTOR_BYTES as usize];
    encode(sector, write, &mut expected);
    if expected[..] == bytes[..] {
        Sector::Tagged { sector, write }
    } else {
        Sector::Garbage
    }
}

/// The sectors of one logical page as read back: `sectors_per_page` entries.
pub fn page_sectors(outcome: &PageOutcome, sectors_per_page: usize) -> Vec<Option<Sector>> {
    match outcome {
        PageOutcome::Unwritten => vec![Some(Sector::Zero); sectors_per_page],
        PageOutcome::Uncorrectable => vec![None; sectors_per_page],
        PageOutcome::Data(Content::Bytes(b)) => b
            .chunks(SECTOR_BYTES as usize)
            .map(|s| Some(decode(s)))
            .collect(),
        // The campaign writes bytes only: a tag is not its data.
        PageOutcome::Data(Content::Tag(_)) => vec![Some(Sector::Garbage); sectors_per_page],
    }
}

/// How the campaign's run reached the device, as the crash checker's host log over sectors.
#[derive(Clone, Debug)]
pub struct SectorLog {
    pub log: HostLog,
    /// Per record: its writes are zeros (WRITE_ZEROES).
    zeroes: Vec<bool>,
}

/// The outcome of one request: its acknowledgement, or the error it was refused with.
pub type Outcome = Result<u64, String>;

impl SectorLog {
    pub fn new(design: &str, sectors: u32) -> SectorLog {
        SectorLog {
            log: HostLog {
                design: design.to_string(),
                logical_pages: sectors,
                records: Vec::new(),
                next_write: 0,
            },
            zeroes: Vec::new(),
        }
    }

    /// A second life's log, from what the recovered device showed after a cut of life one
    /// (`first`'s log): one single-sector write per sector holding data, with the write number
    /// it holds, then a flush, all acknowledged at `ready_ns`, when the host saw them (a
    /// sector that reads as zeros was never written, for this log). `holds` lists the
    /// (write, sector) pairs; the life's own writes are numbered after `first`'s.
    pub fn baseline(first: &SectorLog, holds: &mut [(u64, u64)], ready_ns: u64) -> SectorLog {
        holds.sort_unstable();
        let mut log = SectorLog::new(&first.log.design, first.log.logical_pages);
        let ok: Outcome = Ok(ready_ns);
        for &(write, sector) in holds.iter() {
            log.log.next_write = write;
            log.write(sector, 1, false, false, ready_ns, &ok);
        }
        log.log.next_write = first.log.next_write;
        log.flush(ready_ns, &ok);
        log
    }

    /// Whether record `i` is a WRITE_ZEROES (piece).
    pub fn is_zeroes(&self, i: usize) -> bool {
        self.zeroes[i]
    }

    /// The number the next sector written will carry.
    pub fn next_write(&self) -> u64 {
        self.log.next_write
    }

    /// Logs a write of `count` sectors from `first` (sector writes numbered from
    /// [`Self::next_write`]): a static transaction when `atomic` (a synchronous SWRITE: durable
    /// when acknowledged), else a plain write.
    pub fn write(
        &mut self,
        first: u64,
        count: u64,
        atomic: bool,
        zeroes: bool,
        arrival_ns: u64,
        outcome: &Outcome,
    ) {
        let op = if atomic {
            HostOp::SWrite {
                uuid: TxUuid(self.log.records.len() as u64 + 1),
                lpns: (first..first + count).map(|s| Lpn(s as u32)).collect(),
                mode: SwriteMode::Sync,
            }
        } else {
            HostOp::Write {
                start: Lpn(first as u32),
                count: count as u32,
            }
        };
        let next = self.log.next_write + count;
        self.push(op, arrival_ns, outcome, zeroes);
        self.log.next_write = next;
    }

    pub fn flush(&mut self, arrival_ns: u64, outcome: &Outcome) {
        self.push(HostOp::Flush, arrival_ns, outcome, false);
    }

    pub fn trim(&mut self, first: u64, count: u64, arrival_ns: u64, outcome: &Outcome) {
        let op = HostOp::Trim {
            start: Lpn(first as u32),
            count: count as u32,
        };
        self.push(op, arrival_ns, outcome, false);
    }

    pub fn read(&mut self, first: u64, count: u64, arrival_ns: u64, outcome: &Outcome) {
        let op = HostOp::Read {
            start: Lpn(first as u32),
            count: count as u32,
        };
        self.push(op, arrival_ns, outcome, false);
    }

    fn push(&mut self, op: HostOp, arrival_ns: u64, outcome: &Outcome, zeroes: bool) {
        self.log.records.push(HostRecord {
            index: self.log.records.len() as u64,
            op,
            arrival_ns,
            ack_ns: outcome.as_ref().ok().copied(),
            durable_ns: None,
            error: outcome.as_ref().err().cloned(),
            first_write: self.log.next_write,
        });
        self.zeroes.push(zeroes);
    }

    /// Per sector, the sector writes and the trims that succeeded, as record indices, in
    /// arrival order: what [`Self::seen`] reads zeros as.
    pub fn zero_index(&self) -> ZeroIndex {
        let sectors = self.log.logical_pages as usize;
        let mut index = ZeroIndex {
            writes: vec![Vec::new(); sectors],
            trims: vec![Vec::new(); sectors],
        };
        for (i, r) in self.log.records.iter().enumerate() {
            if !r.succeeded() {
                continue;
            }
            for (s, w) in r.writes() {
                index.writes[s.0 as usize].push((i, w, self.zeroes[i]));
            }
            if let HostOp::Trim { start, count } = r.op {
                for s in start.0..start.0 + count {
                    index.trims[s as usize].push(i);
                }
            }
        }
        index
    }

    /// What each sector read back (`None`: an uncorrectable page) is, for the oracle, after a
    /// cut at `t` judged under `promise`, zeros read as `reading` says (module doc).
    pub fn seen(
        &self,
        index: &ZeroIndex,
        read: &[Option<Sector>],
        t: u64,
        promise: Promise,
        reading: Reading,
    ) -> Vec<Seen> {
        if reading == Reading::Prefix {
            return self.prefix_reading(index, read, t);
        }
        let mut absent = BTreeSet::new();
        loop {
            let mut seen = self.seen_without(index, read, t, promise, reading, &absent);
            self.spread_present_zeroes(&mut seen, read, index, t, promise);
            let torn: Vec<usize> = self
                .zero_records_seen(&seen)
                .filter(|&i| self.is_atomic_unit(i, promise) && !self.whole(i, &seen, index, t))
                .collect();
            if torn.is_empty() {
                return seen;
            }
            absent.extend(torn);
        }
    }

    /// [`Self::seen`] with the WRITE_ZEROES records in `absent` taken as not applied.
    fn seen_without(
        &self,
        index: &ZeroIndex,
        read: &[Option<Sector>],
        t: u64,
        promise: Promise,
        reading: Reading,
        absent: &BTreeSet<usize>,
    ) -> Vec<Seen> {
        read.iter()
            .enumerate()
            .map(|(s, sector)| match *sector {
                None => Seen::Uncorrectable,
                Some(Sector::Garbage) => Seen::Garbage,
                Some(Sector::Tagged { sector, write }) if sector == s as u64 => Seen::Write(write),
                Some(Sector::Tagged { sector, write }) => Seen::Foreign(ContentTag {
                    lpn: sector as u32,
                    write,
                }),
                Some(Sector::Zero) => match reading {
                    Reading::Least => self.least_zeroing(index, s, t, promise, absent),
                    Reading::Latest | Reading::Prefix => self.latest_zeroing(index, s, t, absent),
                },
            })
            .collect()
    }

    /// Whether a trim of sector `s` issued by `t` came after record `i` (after nothing: any).
    fn trimmed_after(&self, index: &ZeroIndex, s: usize, i: Option<usize>, t: u64) -> bool {
        index.trims[s]
            .iter()
            .any(|&k| i.is_none_or(|i| k > i) && self.log.records[k].arrival_ns <= t)
    }

    /// [`Reading::Latest`] of a sector that reads as zeros.
    fn latest_zeroing(
        &self,
        index: &ZeroIndex,
        s: usize,
        t: u64,
        absent: &BTreeSet<usize>,
    ) -> Seen {
        let arrived = |i: usize| self.log.records[i].arrival_ns <= t;
        let zeroed = index.writes[s]
            .iter()
            .rev()
            .find(|&&(i, _, zero)| zero && arrived(i) && !absent.contains(&i));
        match zeroed {
            Some(&(i, w, _)) if !self.trimmed_after(index, s, Some(i), t) => Seen::Write(w),
            _ => Seen::Unwritten,
        }
    }

    /// [`Reading::Prefix`]: the shortest prefix of the requests that the sectors holding data
    /// and the flushes require, raised until every sector that reads as zeros holds a
    /// WRITE_ZEROES (or nothing) in it; each of those sectors is read as what that prefix left.
    fn prefix_reading(&self, index: &ZeroIndex, read: &[Option<Sector>], t: u64) -> Vec<Seen> {
        let none = BTreeSet::new();
        let mut seen = self.seen_without(index, read, t, Promise::Ordered, Reading::Latest, &none);
        let zero = |s: usize| read[s] == Some(Sector::Zero);
        let mut prefix = self.flushed_prefix(t);
        for (s, x) in seen.iter().enumerate() {
            if let (false, Seen::Write(w)) = (zero(s), x) {
                let i = self.log.record_of_write(*w).map(|r| r.index as usize);
                prefix = prefix.max(i);
            }
        }
        let zeros: Vec<usize> = (0..read.len()).filter(|&s| zero(s)).collect();
        loop {
            let raised = zeros
                .iter()
                .filter_map(|&s| self.zeroing_needed(index, s, prefix, t))
                .max();
            if raised.is_none_or(|r| Some(r) <= prefix) {
                break;
            }
            prefix = raised;
        }
        for s in zeros {
            seen[s] = match Self::last_within(index, s, prefix) {
                Some(&(_, w, true)) => Seen::Write(w),
                _ => Seen::Unwritten,
            };
        }
        seen
    }

    /// The last write of sector `s` among the requests up to `prefix`.
    fn last_within(
        index: &ZeroIndex,
        s: usize,
        prefix: Option<usize>,
    ) -> Option<&(usize, u64, bool)> {
        index.writes[s]
            .iter()
            .rev()
            .find(|(i, _, _)| prefix.is_some_and(|p| *i <= p))
    }

    /// For a sector reading as zeros whose last write up to `prefix` holds data: the first
    /// WRITE_ZEROES of it after `prefix` issued by `t` (the prefix must reach it).
    fn zeroing_needed(
        &self,
        index: &ZeroIndex,
        s: usize,
        prefix: Option<usize>,
        t: u64,
    ) -> Option<usize> {
        let holds_data = Self::last_within(index, s, prefix).is_some_and(|&(_, _, zero)| !zero);
        if !holds_data {
            return None;
        }
        index.writes[s]
            .iter()
            .find(|&&(i, _, zero)| {
                zero && prefix.is_none_or(|p| i > p) && self.log.records[i].arrival_ns <= t
            })
            .map(|&(i, _, _)| i)
    }

    /// The last write request sent before the latest flush acknowledged by `t`: every prefix
    /// the image may show reaches it.
    fn flushed_prefix(&self, t: u64) -> Option<usize> {
        let records = &self.log.records;
        let flush = records
            .iter()
            .rposition(|r| matches!(r.op, HostOp::Flush) && r.ack_ns.is_some_and(|a| a <= t))?;
        records[..flush]
            .iter()
            .rposition(|r| r.succeeded() && r.op.written_pages() > 0)
    }

    /// Whether record `i` must have survived a cut at `t` under `promise`: acknowledged, or
    /// under `ordered` and `flush-only` sent before a flush acknowledged by `t`.
    fn must_survive(&self, i: usize, t: u64, promise: Promise) -> bool {
        match promise {
            Promise::Ordered | Promise::FlushOnly => {
                let flushed = |r: &&HostRecord| {
                    matches!(r.op, HostOp::Flush) && r.ack_ns.is_some_and(|a| a <= t)
                };
                self.log.records[i + 1..].iter().any(|r| flushed(&r))
            }
            Promise::DurableWrites | Promise::AtomicTransactions => {
                self.log.records[i].ack_ns.is_some_and(|a| a <= t)
            }
        }
    }

    /// [`Reading::Least`] of a sector that reads as zeros.
    fn least_zeroing(
        &self,
        index: &ZeroIndex,
        s: usize,
        t: u64,
        promise: Promise,
        absent: &BTreeSet<usize>,
    ) -> Seen {
        let issued: Vec<&(usize, u64, bool)> = index.writes[s]
            .iter()
            .filter(|(i, _, _)| self.log.records[*i].arrival_ns <= t)
            .collect();
        let required = issued
            .iter()
            .rposition(|(i, _, _)| self.must_survive(*i, t, promise));
        let Some(k) = required else {
            return Seen::Unwritten;
        };
        if self.trimmed_after(index, s, Some(issued[k].0), t) {
            return Seen::Unwritten;
        }
        issued[k..]
            .iter()
            .find(|(i, _, zero)| *zero && !absent.contains(i))
            .map_or(Seen::Unwritten, |&&(_, w, _)| Seen::Write(w))
    }

    /// Where a WRITE_ZEROES that is all or nothing is read as present, its other sectors that
    /// read as zeros show it too (rather than an older zeroing, or never written), until no
    /// sector changes.
    fn spread_present_zeroes(
        &self,
        seen: &mut [Seen],
        read: &[Option<Sector>],
        index: &ZeroIndex,
        t: u64,
        promise: Promise,
    ) {
        loop {
            let present: Vec<usize> = self
                .zero_records_seen(seen)
                .filter(|&i| self.is_atomic_unit(i, promise))
                .collect();
            let mut changed = false;
            for i in present {
                for (s, w) in self.log.records[i].writes() {
                    let s = s.0 as usize;
                    let older = match seen[s] {
                        Seen::Write(x) => x < w,
                        Seen::Unwritten => !self.trimmed_after(index, s, Some(i), t),
                        _ => false,
                    };
                    if older && read[s] == Some(Sector::Zero) {
                        seen[s] = Seen::Write(w);
                        changed = true;
                    }
                }
            }
            if !changed {
                return;
            }
        }
    }

    /// Whether record `i` is all or nothing under `promise`: every request under `ordered`,
    /// a static transaction under `atomic-transactions` (plain writes are per sector there).
    fn is_atomic_unit(&self, i: usize, promise: Promise) -> bool {
        match promise {
            Promise::Ordered => true,
            Promise::AtomicTransactions => {
                matches!(self.log.records[i].op, HostOp::SWrite { .. })
            }
            Promise::DurableWrites | Promise::FlushOnly => false,
        }
    }

    /// The WRITE_ZEROES records some sector is read as.
    fn zero_records_seen<'a>(&'a self, seen: &'a [Seen]) -> impl Iterator<Item = usize> + 'a {
        let records: BTreeSet<usize> = seen
            .iter()
            .filter_map(|s| match *s {
                Seen::Write(w) => self.log.record_of_write(w).map(|r| r.index as usize),
                _ => None,
            })
            .filter(|&i| self.zeroes[i])
            .collect();
        records.into_iter()
    }

    /// Every sector of record `i` shows its write or a later one, or reads as never written
    /// after a later trim issued by `t`, or reads as an error (which may stand for the record's
    /// zeros on worn media; the oracle judges the error itself against what the media lost,
    /// and an error is a violation wherever the media lost nothing).
    fn whole(&self, i: usize, seen: &[Seen], index: &ZeroIndex, t: u64) -> bool {
        let r = &self.log.records[i];
        let trimmed_since = |s: usize| self.trimmed_after(index, s, Some(i), t);
        r.writes().all(|(s, _)| match seen[s.0 as usize] {
            Seen::Write(w) => w >= r.first_write,
            Seen::Unwritten => trimmed_since(s.0 as usize),
            Seen::Uncorrectable => true,
            _ => false,
        })
    }
}

/// Per sector: the writes (record, write, zeros?) and trims (record) that succeeded, in
/// arrival order.
pub struct ZeroIndex {
    writes: Vec<Vec<(usize, u64, bool)>>,
    trims: Vec<Vec<usize>>,
}

impl ZeroIndex {
    /// The WRITE_ZEROES writes of sector `s`: the versions of it that hold zeros.
    pub fn zeroings(&self, s: usize) -> impl Iterator<Item = u64> + '_ {
        self.writes[s].iter().filter(|w| w.2).map(|w| w.1)
    }
}

/// Which of the writes a sector reading as zeros could show it is taken to show. Zeros do not
/// say which WRITE_ZEROES wrote them, so an image is judged under each reading in
/// [`Reading::ALL`] and breaks the promise only if it breaks it under all of them. Each maps a
/// sector to a write that could have left its zeros, so none invents a violation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reading {
    /// The latest WRITE_ZEROES issued by the cut (unless a trim issued by then came after it),
    /// else never written: right for promises that judge each sector alone, where any later
    /// version may show.
    Latest,
    /// The least the image must hold: never written if no write of the sector had to survive
    /// the cut (acknowledged; flushed under `ordered` and `flush-only`), or a trim came after
    /// the last that had, else the first WRITE_ZEROES from that write on. Claims the fewest requests present, so the fewest earlier
    /// requests must be too (`atomic-transactions`' order rule, `ordered`'s prefix).
    Least,
    /// What the shortest prefix of the requests that explains the image left (`ordered`'s
    /// reading: a WRITE_ZEROES inside the prefix shows wherever no later request of the prefix
    /// wrote, one outside it nowhere).
    Prefix,
}

impl Reading {
    pub const ALL: [Reading; 3] = [Reading::Latest, Reading::Least, Reading::Prefix];
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sector_decodes_to_what_was_encoded_and_a_mix_of_two_is_garbage() {
        let (mut a, mut b) = ([0u8; 512], [0u8; 512]);
        encode(7, 42, &mut a);
        encode(7, 43, &mut b);
        assert_eq!(
            decode(&a),
            Sector::Tagged {
                sector: 7,
                write: 42
            }
        );
        assert_eq!(decode(&[0u8; 512]), Sector::Zero);
        let mut mixed = a;
        mixed[256..].copy_from_slice(&b[256..]);
        assert_eq!(decode(&mixed), Sector::Garbage);
        let mut flipped = a;
        flipped[300] ^= 1;
        assert_eq!(decode(&flipped), Sector::Garbage);
    }

    /// A log of three requests over sectors 0..4: a write of 0..4 (acknowledged at 10), a
    /// WRITE_ZEROES of 2..4 (arrived at 20, acknowledged at 30), both atomic.
    fn log_with_zeroes() -> SectorLog {
        let mut log = SectorLog::new("test", 4);
        log.write(0, 4, true, false, 0, &Ok(10));
        log.write(2, 2, true, true, 20, &Ok(30));
        log
    }

    #[test]
    fn zeros_read_as_the_latest_zeroing_issued_by_the_cut() {
        let log = log_with_zeroes();
        let index = log.zero_index();
        let zero = Some(Sector::Zero);
        let tagged = |s: u64| {
            Some(Sector::Tagged {
                sector: s,
                write: s,
            })
        };
        let read = [tagged(0), tagged(1), zero, zero];
        let p = Promise::AtomicTransactions;
        // After the zeroing arrived, zeros are it (sector writes 4 and 5).
        assert_eq!(
            log.seen(&index, &read, 25, p, Reading::Latest),
            vec![
                Seen::Write(0),
                Seen::Write(1),
                Seen::Write(4),
                Seen::Write(5)
            ]
        );
        // Before it arrived they can only be never written.
        assert_eq!(
            log.seen(&index, &read, 15, p, Reading::Latest)[2],
            Seen::Unwritten
        );
        // Half zeroed, half the write: the zeroing is torn, so read as absent.
        let torn = [tagged(0), tagged(1), zero, tagged(3)];
        assert_eq!(
            log.seen(&index, &torn, 25, p, Reading::Latest)[2],
            Seen::Unwritten
        );
        // Without request atomicity each sector stands alone.
        assert_eq!(
            log.seen(&index, &torn, 25, Promise::DurableWrites, Reading::Latest)[2],
            Seen::Write(4)
        );
    }

    /// The oracle, fed the sector log, catches a lost zeroing and a torn request.
    #[test]
    fn the_oracle_judges_sectors_and_catches_a_torn_request_and_a_lost_zeroing() {
        let log = log_with_zeroes();
        let index = log.zero_index();
        let model = crashtest::oracle::Model::new(&log.log);
        let tagged = |s: u64| {
            Some(Sector::Tagged {
                sector: s,
                write: s,
            })
        };
        let zero = Some(Sector::Zero);
        let p = Promise::AtomicTransactions;
        let judge = |read: &[Option<Sector>], t| {
            model.judge(p, t, &log.seen(&index, read, t, p, Reading::Latest))
        };
        assert!(judge(&[tagged(0), tagged(1), zero, zero], 40).is_empty());
        assert!(judge(&[tagged(0), tagged(1), tagged(2), tagged(3)], 25).is_empty());
        // The zeroing was acknowledged at 30: the write's sectors 2..4 must not be back.
        assert!(!judge(&[tagged(0), tagged(1), tagged(2), tagged(3)], 40).is_empty());
        // The first write, acknowledged at 10, torn: half of it never written.
        assert!(!judge(&[tagged(0), zero, zero, zero], 15).is_empty());
        assert!(!judge(&[tagged(0), tagged(1), None, zero], 40).is_empty());
    }

    /// Under `ordered`, zeros where two zeroings could show are read as the prefix the sector
    /// holding data requires leaves them: the least reading (the flushed zeroing) breaks the
    /// prefix, the prefix reading explains the image, so it is not a violation.
    #[test]
    fn under_ordered_zeros_are_read_as_the_prefix_leaves_them() {
        let mut log = SectorLog::new("test", 2);
        log.write(0, 1, false, true, 0, &Ok(5)); // r0: zeros on sector 0, write 0
        log.flush(6, &Ok(8)); // r1
        log.write(0, 1, false, true, 10, &Ok(15)); // r2: zeros on sector 0, write 1
        log.write(1, 1, false, false, 16, &Ok(18)); // r3: data on sector 1, write 2
        let index = log.zero_index();
        let model = crashtest::oracle::Model::new(&log.log);
        let read = [
            Some(Sector::Zero),
            Some(Sector::Tagged {
                sector: 1,
                write: 2,
            }),
        ];
        let p = Promise::Ordered;
        let seen = |reading| log.seen(&index, &read, 30, p, reading);
        assert_eq!(seen(Reading::Least)[0], Seen::Write(0));
        assert_eq!(seen(Reading::Prefix)[0], Seen::Write(1));
        assert!(!model.judge(p, 30, &seen(Reading::Least)).is_empty());
        assert!(model.judge(p, 30, &seen(Reading::Prefix)).is_empty());
        // Data that no prefix explains is still a violation under every reading.
        let lost = [
            Some(Sector::Zero),
            Some(Sector::Tagged {
                sector: 1,
                write: 9,
            }),
        ];
        for reading in Reading::ALL {
            let v = model.judge(p, 30, &log.seen(&index, &lost, 30, p, reading));
            assert!(!v.is_empty(), "{reading:?}");
        }
    }
}
