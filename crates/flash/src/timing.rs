//! The timing model: every chip and every channel has its own timeline.
//!
//! A read occupies its chip for tR and then its channel for the page transfer out; a program
//! occupies the channel for the transfer in and the chip for transfer + tPROG; an erase occupies
//! only the chip for tBERS (docs/presets.md, "Flash timing"). Operations on one chip are served in
//! the order they are issued (FIFO, no back-filling), so programs to one block keep their order;
//! operations on different chips overlap. A channel moves each transfer in the first free gap at or
//! after its chip is ready, so a chip with a long queue does not hold up the other chips on its
//! channel (a controller schedules each channel among the ready chips). Every operation also takes
//! a `not_before` time from its issuer: that is how an FTL states "this program may start only
//! after those finished" — the only ordering a crash respects.
//!
//! Times are plain integer nanoseconds of simulated time; nothing here reads a wall clock.

use serde::{Deserialize, Serialize};
use std::collections::VecDeque;

/// Latency parameters of one flash part and its bus.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Timing {
    /// Array read time tR.
    pub read_ns: u64,
    /// Page program time tPROG.
    pub program_ns: u64,
    /// Block erase time tBERS.
    pub erase_ns: u64,
    /// Channel (bus) transfer rate in MB/s (10^6 bytes per second).
    pub bus_mb_s: u64,
}

impl Timing {
    /// Time the channel needs to move `bytes` bytes.
    pub fn transfer_ns(&self, bytes: u64) -> u64 {
        // bytes / (MB/s) = bytes * 1000 / bus_mb_s ns
        (bytes * 1000).div_ceil(self.bus_mb_s.max(1))
    }

    pub fn validate(&self) -> Result<(), crate::ConfigError> {
        if self.bus_mb_s == 0 {
            return Err(crate::ConfigError::ZeroBusSpeed);
        }
        Ok(())
    }
}

/// Start and end of one scheduled operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Span {
    pub start_ns: u64,
    pub end_ns: u64,
}

/// Per-chip busy-until times and per-channel booked transfer intervals.
///
/// A chip serves its operations in issue order (FIFO, no back-filling). A channel, shared by
/// the chips on it, moves each page in the first gap of its timeline at or after the page is
/// ready (the controller's per-channel scheduler picks whichever chip is ready): a chip with a
/// long backlog books its transfer late without holding up an idle chip on the same channel.
#[derive(Clone, Debug)]
pub struct Timeline {
    chip_free_ns: Vec<u64>,
    channels: Vec<Bookings>,
    /// No operation starts before this instant ([`Timeline::raise_floor`]).
    floor_ns: u64,
}

/// Booked intervals of one shared resource (a channel, a host link's direction), sorted by
/// start, disjoint, adjacent intervals coalesced: each new booking takes the first gap long
/// enough at or after the instant it is ready.
///
/// A sorted deque rather than a tree: the set is small (pruned from the front as the resource's
/// users move on) and a booking lands near its end, so an insert near the back beats a tree's
/// node walks on the simulator's hottest path (docs/performance.md). The deque is split where
/// the last booking went, `left` holding the intervals before that place and `right` those
/// after it (last first), and a booking elsewhere moves the split to its place, searching from
/// the split outwards. A recovery that reads every page of one chip and then of the next books
/// the later chips' transfers between the first chip's, in rising order (its idle chips keep the
/// channel's list from being pruned): each went in by a search of the whole list and a move of
/// half of it, a quarter of a FAST crash campaign on 32 chips; now each moves the split past an
/// interval or two. With nothing after the split (the common case) this is a plain deque.
#[derive(Clone, Debug, Default)]
pub struct Bookings {
    /// The intervals before the split, in order.
    left: VecDeque<(u64, u64)>,
    /// The intervals after the split, in reverse order (the first one after it is last).
    right: Vec<(u64, u64)>,
}

/// The number of leading indices `i < n` for which `before(i)` holds (`before` holds for a
/// prefix of `0..n`), searched from the end: a doubling step back, then halving.
fn boundary_from_end(n: usize, before: impl Fn(usize) -> bool) -> usize {
    // `hi`: the smallest index known to be after the boundary.
    let (mut hi, mut step) = (n, 1);
    while hi > 0 && !before(hi - 1) {
        let lo = hi.saturating_sub(step);
        if before(lo) {
            // The boundary lies in lo + 1 ..= hi - 1.
            let (mut a, mut b) = (lo + 1, hi - 1);
            while a < b {
                let mid = a + (b - a) / 2;
                if before(mid) {
                    a = mid + 1;
                } else {
                    b = mid;
                }
            }
            return a;
        }
        hi = lo;
        step *= 2;
    }
    hi
}

impl Bookings {
    /// Books `length` ns in the first gap at or after `ready`; returns the transfer's start.
    pub fn book(&mut self, ready: u64, length: u64) -> u64 {
        if length == 0 {
            return ready;
        }
        // The common case, ready at or after every booking: it goes at `ready`, joining the last
        // interval if that ends exactly there (what the general search below finds too).
        if self.right.is_empty() {
            match self.left.back_mut() {
                Some(last) if ready == last.1 => {
                    last.1 = ready + length;
                    return ready;
                }
                Some(last) if ready < last.1 => {}
                _ => {
                    self.left.push_back((ready, ready + length));
                    return ready;
                }
            }
        }
        // The split goes before the first interval starting after `ready`; the one before it
        // may still cover `ready`.
        self.split_after(ready);
        let mut start = ready;
        if let Some(&(_, e)) = self.left.back() {
            start = start.max(e);
        }
        // Past every interval that leaves no gap of `length` before it. Each one passed starts
        // at or before `start` and the one stopped at after it, so the split ends before the
        // first interval starting after `start`: where the new one goes.
        while let Some(&(s, e)) = self.right.last() {
            if s >= start + length {
                break;
            }
            start = start.max(e);
            self.left.push_back((s, e));
            self.right.pop();
        }
        let end = start + length;
        // Coalesce with the interval ending exactly at `start` and the one starting at `end`.
        let joins_prev = self.left.back().is_some_and(|&(_, e)| e == start);
        let joins_next = self.right.last().is_some_and(|&(s, _)| s == end);
        match (joins_prev, joins_next, self.left.back_mut()) {
            (true, true, Some(prev)) => prev.1 = self.right.pop().map_or(end, |(_, e)| e),
            (true, false, Some(prev)) => prev.1 = end,
            (false, true, _) => {
                if let Some(next) = self.right.last_mut() {
                    next.0 = start;
                }
            }
            _ => self.left.push_back((start, end)),
        }
        start
    }

    /// Moves the split to just before the first interval that starts after `at`: every interval
    /// starting at or before `at` in `left`, every other one in `right`.
    fn split_after(&mut self, at: u64) {
        if self.left.back().is_some_and(|&(s, _)| s > at) {
            let left = &self.left;
            let keep = boundary_from_end(left.len(), |i| left[i].0 <= at);
            self.right.extend(self.left.drain(keep..).rev());
        } else if self.right.last().is_some_and(|&(s, _)| s <= at) {
            let right = &self.right;
            let stay = boundary_from_end(right.len(), |i| right[i].0 > at);
            self.left.extend(self.right.drain(stay..).rev());
        }
    }

    /// Forgets intervals that end at or before `floor`: no later transfer can start before it.
    pub fn prune(&mut self, floor: u64) {
        while self.left.front().is_some_and(|&(_, e)| e <= floor) {
            self.left.pop_front();
        }
        if self.left.is_empty() {
            while self.right.last().is_some_and(|&(_, e)| e <= floor) {
                self.right.pop();
            }
        }
    }

    /// Booked intervals.
    fn len(&self) -> usize {
        self.left.len() + self.right.len()
    }

    /// Every booked interval, in order.
    #[cfg(test)]
    fn intervals(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.left.iter().chain(self.right.iter().rev()).copied()
    }

    fn last_end(&self) -> u64 {
        self.right
            .first()
            .or(self.left.back())
            .map_or(0, |&(_, e)| e)
    }

    /// Forgets every interval but one, `(0, end)`.
    fn reset_to(&mut self, end: u64) {
        self.left.clear();
        self.right.clear();
        self.left.push_back((0, end));
    }
}

/// A run of reads on one chip, issued back to back ([`Timeline::read_run`]).
#[derive(Clone, Copy, Debug)]
pub struct ReadRun {
    chip: u32,
    channel: usize,
    /// Where the next read of the run starts: the end of the one before it.
    next_start: u64,
    sense_ns: u64,
    transfer_ns: u64,
}

/// Bookings a channel keeps before [`Timeline::prune_channel`] looks for ones to forget.
const PRUNE_ABOVE: usize = 8;

impl Timeline {
    pub fn new(chips: u32, channels: u32) -> Self {
        Timeline {
            chip_free_ns: vec![0; chips as usize],
            channels: vec![Bookings::default(); channels.max(1) as usize],
            floor_ns: 0,
        }
    }

    /// The host's clock: every later operation is issued at or after `ns` (a host never
    /// issues a request in its past, and a design's operations start no earlier than the call
    /// that issues them; an operation asked to start earlier starts at `ns`). Channel bookings
    /// that end by then can go even while a chip on the channel sits idle with an old
    /// busy-until time (a chip without free blocks while GC is behind): without it such a chip
    /// held every later booking of its channel, hundreds of them (docs/performance.md, tenth
    /// round). Never lowers the floor.
    #[inline]
    pub fn raise_floor(&mut self, ns: u64) {
        self.floor_ns = self.floor_ns.max(ns);
    }

    fn channel(&self, chip: u32) -> usize {
        chip as usize % self.channels.len()
    }

    /// When `chip` finishes everything issued to it so far.
    #[inline]
    pub fn chip_free_ns(&self, chip: u32) -> u64 {
        self.chip_free_ns[chip as usize]
    }
    /// Every chip's busy-until time, by chip number.
    #[inline]
    pub fn chip_free_times(&self) -> &[u64] {
        &self.chip_free_ns
    }

    /// When every chip is idle.
    pub fn all_idle_ns(&self) -> u64 {
        self.chip_free_ns.iter().copied().max().unwrap_or(0)
    }

    /// Every later operation on a chip of channel `ch` starts at or after the least busy-until
    /// time of those chips and at or after the floor, so channel bookings ending before the
    /// later of the two can go. Forgetting them only saves work ([`Bookings::book`] finds the
    /// same gap with them), so a short list is left.
    fn prune_channel(&mut self, ch: usize) {
        if self.channels[ch].len() <= PRUNE_ABOVE {
            return;
        }
        let n = self.channels.len();
        let floor = self
            .chip_free_ns
            .iter()
            .skip(ch)
            .step_by(n)
            .copied()
            .min()
            .unwrap_or(0)
            .max(self.floor_ns);
        self.channels[ch].prune(floor);
    }

    /// When an operation on `chip` asked to start at `not_before` may start: after what the
    /// chip was given before it (FIFO) and not before the floor.
    #[inline]
    fn ready(&self, chip: u32, not_before: u64) -> u64 {
        not_before
            .max(self.floor_ns)
            .max(self.chip_free_ns[chip as usize])
    }

    pub fn schedule_read(&mut self, chip: u32, not_before: u64, t: &Timing, bytes: u64) -> Span {
        let ch = self.channel(chip);
        self.prune_channel(ch);
        let start = self.ready(chip, not_before);
        let sensed = start + t.read_ns;
        let length = t.transfer_ns(bytes);
        let end = self.channels[ch].book(sensed, length) + length;
        self.chip_free_ns[chip as usize] = end;
        Span {
            start_ns: start,
            end_ns: end,
        }
    }

    /// Starts a run of reads of `bytes` bytes each on `chip`, issued back to back at
    /// `not_before` (a recovery's scan of a block): [`schedule_run_read`](Self::schedule_run_read)
    /// then gives, read by read, the spans that as many [`schedule_read`](Self::schedule_read)
    /// calls give, with the channel, the transfer time and the pruning worked out once.
    /// Pruning once instead of before every read keeps a few more bookings, which only costs
    /// searching ([`Bookings::book`] finds the same gap with them).
    pub fn read_run(&mut self, chip: u32, not_before: u64, t: &Timing, bytes: u64) -> ReadRun {
        let channel = self.channel(chip);
        self.prune_channel(channel);
        ReadRun {
            chip,
            channel,
            next_start: self.ready(chip, not_before),
            sense_ns: t.read_ns,
            transfer_ns: t.transfer_ns(bytes),
        }
    }

    /// The next read of `run`. A chip serves its reads in issue order, so each starts where
    /// the one before it ended (that end is at or after the run's `not_before` and the floor,
    /// which is what [`schedule_read`](Self::schedule_read) would start it at).
    #[inline]
    pub fn schedule_run_read(&mut self, run: &mut ReadRun) -> Span {
        let start = run.next_start;
        let sensed = start + run.sense_ns;
        let end = self.channels[run.channel].book(sensed, run.transfer_ns) + run.transfer_ns;
        self.chip_free_ns[run.chip as usize] = end;
        run.next_start = end;
        Span {
            start_ns: start,
            end_ns: end,
        }
    }

    pub fn schedule_program(&mut self, chip: u32, not_before: u64, t: &Timing, bytes: u64) -> Span {
        let ch = self.channel(chip);
        self.prune_channel(ch);
        let ready = self.ready(chip, not_before);
        let length = t.transfer_ns(bytes);
        let start = self.channels[ch].book(ready, length);
        let end = start + length + t.program_ns;
        self.chip_free_ns[chip as usize] = end;
        Span {
            start_ns: start,
            end_ns: end,
        }
    }

    pub fn schedule_erase(&mut self, chip: u32, not_before: u64, t: &Timing) -> Span {
        let start = self.ready(chip, not_before);
        let end = start + t.erase_ns;
        self.chip_free_ns[chip as usize] = end;
        Span {
            start_ns: start,
            end_ns: end,
        }
    }

    /// Moves every timeline to at least `ns` (used when a device is reopened after recovery).
    pub fn advance_all_to(&mut self, ns: u64) {
        for t in self.chip_free_ns.iter_mut() {
            *t = (*t).max(ns);
        }
        for c in self.channels.iter_mut() {
            let last = c.last_end();
            c.reset_to(last.max(ns));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timing() -> Timing {
        Timing {
            read_ns: 50_000,
            program_ns: 500_000,
            erase_ns: 2_000_000,
            bus_mb_s: 40,
        }
    }

    #[test]
    fn transfer_of_a_4k_page_at_40mb_s() {
        assert_eq!(timing().transfer_ns(4096), 102_400);
    }

    #[test]
    fn a_backlogged_chip_does_not_hold_up_an_idle_chip_on_its_channel() {
        let t = timing();
        let xfer = t.transfer_ns(4096);
        let mut tl = Timeline::new(2, 1); // two chips on one channel
        let first = tl.schedule_program(0, 0, &t, 4096);
        let queued = tl.schedule_program(0, 0, &t, 4096); // waits for chip 0: transfer ~tPROG later
        assert_eq!(queued.start_ns, first.end_ns);
        // Chip 1 is idle: its transfer goes in the channel's gap right after the first one, not
        // after chip 0's queued transfer.
        let idle = tl.schedule_program(1, 0, &t, 4096);
        assert_eq!(idle.start_ns, xfer);
        assert_eq!(idle.end_ns, 2 * xfer + t.program_ns);
        // A transfer that does not fit in a gap goes after the busy interval it would overlap.
        let read = tl.schedule_read(1, 0, &t, 4096);
        assert!(read.start_ns >= idle.end_ns);
        assert_eq!(read.end_ns, read.start_ns + t.read_ns + xfer);
        // No two transfers on the channel overlap.
        let mut spans = [
            (first.start_ns, first.start_ns + xfer),
            (queued.start_ns, queued.start_ns + xfer),
            (idle.start_ns, idle.start_ns + xfer),
            (read.end_ns - xfer, read.end_ns),
        ];
        spans.sort();
        assert!(spans.windows(2).all(|w| w[0].1 <= w[1].0), "{spans:?}");
    }

    /// The search from the end finds the boundary a plain scan finds, at every length and place.
    #[test]
    fn the_boundary_searched_from_the_end_is_the_partition_point() {
        for n in 0..70usize {
            for boundary in 0..=n {
                let found = boundary_from_end(n, |i| {
                    assert!(i < n, "index {i} of {n}");
                    i < boundary
                });
                assert_eq!(found, boundary, "n {n}");
            }
        }
    }

    /// Bookings made out of order, far from the last one and back, against a bitmap of busy
    /// nanoseconds: thousands of intervals, so the split travels far in both directions.
    #[test]
    fn bookings_far_from_the_split_take_the_first_free_gap() {
        let mut c = Bookings::default();
        let mut busy = vec![false; 1 << 17];
        let mut rng = 7u64;
        for k in 0..6000u64 {
            rng = rng
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            // Rising runs (a chip read after read) interleaved with jumps back and forth.
            let ready = if k % 50 < 40 {
                (k * 17) % 90_000
            } else {
                (rng >> 20) % 100_000
            };
            let length = 1 + (rng >> 50) % 9;
            let expected = (ready..)
                .find(|&t| (t..t + length).all(|n| !busy[n as usize]))
                .unwrap();
            assert_eq!(c.book(ready, length), expected, "booking {k}");
            (expected..expected + length).for_each(|n| busy[n as usize] = true);
        }
        let v: Vec<_> = c.intervals().collect();
        assert!(v.windows(2).all(|w| w[0].1 < w[1].0));
        assert!(v.len() > 1000, "{} intervals", v.len());
    }

    #[test]
    fn a_transfer_fills_the_first_gap_that_is_long_enough() {
        let mut c = Bookings::default();
        assert_eq!(c.book(0, 10), 0);
        assert_eq!(c.book(30, 10), 30);
        assert_eq!(c.book(0, 25), 40, "the 10..30 gap is too short");
        assert_eq!(c.book(0, 20), 10, "exactly fits 10..30");
        assert_eq!(c.len(), 1, "adjacent bookings coalesce: {c:?}");
        assert_eq!(c.book(5, 1), 65);
        c.prune(64);
        assert_eq!(c.len(), 1);
        c.prune(66);
        assert_eq!(c.len(), 0);
    }

    proptest::proptest! {
        /// Bookings against the plainest model: a bitmap of busy nanoseconds. Every booking
        /// takes the earliest start at or after `ready` whose `length` ns are all free, the
        /// stored intervals stay sorted, disjoint and coalesced, and pruning forgets only
        /// intervals that end at or before the floor.
        #[test]
        fn bookings_take_the_first_free_gap(
            ops in proptest::collection::vec((0u64..400, 1u64..40, 0u8..8), 1..120)
        ) {
            let mut c = Bookings::default();
            let mut busy = vec![false; 8192];
            let mut floor = 0u64;
            for (ready, length, prune) in ops {
                let ready = ready.max(floor);
                let expected = (ready..)
                    .find(|&t| (t..t + length).all(|n| !busy[n as usize]))
                    .unwrap();
                let got = c.book(ready, length);
                proptest::prop_assert_eq!(got, expected);
                for n in got..got + length {
                    busy[n as usize] = true;
                }
                let v: Vec<_> = c.intervals().collect();
                proptest::prop_assert!(v.iter().all(|&(s, e)| s < e));
                proptest::prop_assert!(v.windows(2).all(|w| w[0].1 < w[1].0), "{:?}", v);
                if prune == 0 {
                    floor = ready;
                    c.prune(floor);
                    proptest::prop_assert!(c.intervals().all(|(_, e)| e > floor));
                }
            }
        }
    }

    proptest::proptest! {
        /// A whole timeline (which prunes its channels only when their lists grow, by its chips'
        /// times and by the host's floor, books at the end without a search when it can, and
        /// sets a run of reads up once, `read_run`) against a model with no shortcuts: chips
        /// in FIFO order, nothing starting before the floor, each channel a bitmap of busy
        /// nanoseconds that forgets nothing.
        #[test]
        fn a_timeline_matches_its_model(
            ops in proptest::collection::vec((0u32..4, 0u64..300, 0u8..5), 1..200)
        ) {
            let t = Timing { read_ns: 7, program_ns: 20, erase_ns: 30, bus_mb_s: 1000 };
            let (chips, channels, bytes) = (4usize, 2usize, 5u64);
            let length = t.transfer_ns(bytes);
            let mut tl = Timeline::new(chips as u32, channels as u32);
            let mut chip_free = vec![0u64; chips];
            let mut bus = vec![vec![false; 1 << 17]; channels];
            let book = |bus: &mut Vec<bool>, ready: u64| {
                let start = (ready..)
                    .find(|&s| (s..s + length).all(|n| !bus[n as usize]))
                    .unwrap();
                (start..start + length).for_each(|n| bus[n as usize] = true);
                start
            };
            let mut floor = 0u64;
            for (chip, not_before, kind) in ops {
                if kind == 3 {
                    // The host's clock: an idle chip's old busy-until time no longer holds
                    // its channel's bookings.
                    floor = floor.max(not_before);
                    tl.raise_floor(not_before);
                    continue;
                }
                let c = chip as usize;
                let ready = not_before.max(floor).max(chip_free[c]);
                // Kind 4: a run of reads on the chip, as a recovery's scan issues them.
                let reads = if kind == 4 { 1 + not_before % 24 } else { 1 };
                let mut expected = Vec::new();
                for _ in 0..reads {
                    let ready = expected.last().map_or(ready, |s: &Span| s.end_ns);
                    expected.push(match kind {
                        0 => {
                            let start = book(&mut bus[c % channels], ready);
                            Span { start_ns: start, end_ns: start + length + t.program_ns }
                        }
                        1 | 4 => {
                            let end = book(&mut bus[c % channels], ready + t.read_ns) + length;
                            Span { start_ns: ready, end_ns: end }
                        }
                        _ => Span { start_ns: ready, end_ns: ready + t.erase_ns },
                    });
                }
                let got = match kind {
                    0 => vec![tl.schedule_program(chip, not_before, &t, bytes)],
                    1 => vec![tl.schedule_read(chip, not_before, &t, bytes)],
                    4 => {
                        let mut run = tl.read_run(chip, not_before, &t, bytes);
                        (0..reads).map(|_| tl.schedule_run_read(&mut run)).collect()
                    }
                    _ => vec![tl.schedule_erase(chip, not_before, &t)],
                };
                proptest::prop_assert_eq!(&got, &expected);
                chip_free[c] = expected.last().unwrap().end_ns;
            }
        }
    }

    proptest::proptest! {
        /// Chips reading page after page (each read sensed, then booked, the next one sensed
        /// once it is out) on one resource, against a bitmap of busy nanoseconds: every
        /// booking takes the first free gap (a second chip's transfers go in the first one's
        /// gaps and join its intervals), the intervals stay sorted and apart, and pruning
        /// forgets only what ends by the floor.
        #[test]
        fn runs_of_bookings_take_the_first_free_gap(
            ops in proptest::collection::vec(
                (0usize..3, 0u64..2000, 1u64..30, (1u64..12, 1u64..12), 0u8..6),
                1..60,
            )
        ) {
            let mut c = Bookings::default();
            let mut busy = vec![false; 1 << 16];
            let (mut chip_free, mut floor) = ([0u64; 3], 0u64);
            for (chip, not_before, reads, (sense, length), prune) in ops {
                for _ in 0..reads {
                    let ready = chip_free[chip].max(not_before).max(floor) + sense;
                    let expected = (ready..)
                        .find(|&t| (t..t + length).all(|n| !busy[n as usize]))
                        .unwrap();
                    proptest::prop_assert_eq!(c.book(ready, length), expected);
                    (expected..expected + length).for_each(|n| busy[n as usize] = true);
                    chip_free[chip] = expected + length;
                }
                let v: Vec<_> = c.intervals().collect();
                proptest::prop_assert!(v.windows(2).all(|w| w[0].1 < w[1].0), "{:?}", v);
                if prune == 0 {
                    floor = *chip_free.iter().min().unwrap();
                    c.prune(floor);
                    proptest::prop_assert!(c.intervals().all(|(_, e)| e > floor));
                }
            }
        }
    }

    proptest::proptest! {
        /// A run of reads gives the spans that one `schedule_read` per read gives, and leaves
        /// the timeline booking later operations alike, whatever the channels held before
        /// (other chips' programs and reads, a raised floor).
        #[test]
        fn a_run_of_reads_is_the_reads_one_by_one(
            before in proptest::collection::vec((0u32..4, 0u64..400, 0u8..3), 0..60),
            (chip, not_before, count) in (0u32..4, 0u64..600, 0u32..40),
            after in proptest::collection::vec((0u32..4, 0u64..900, 0u8..3), 0..20),
        ) {
            let t = Timing { read_ns: 7, program_ns: 20, erase_ns: 30, bus_mb_s: 1000 };
            let mut one = Timeline::new(4, 2);
            let issue = |tl: &mut Timeline, (chip, at, kind): (u32, u64, u8)| match kind {
                0 => tl.schedule_program(chip, at, &t, 5),
                1 => tl.schedule_read(chip, at, &t, 5),
                _ => { tl.raise_floor(at / 2); tl.schedule_erase(chip, at, &t) }
            };
            for &op in &before {
                issue(&mut one, op);
            }
            let mut run_tl = one.clone();
            let singles: Vec<Span> =
                (0..count).map(|_| one.schedule_read(chip, not_before, &t, 3)).collect();
            let mut run = run_tl.read_run(chip, not_before, &t, 3);
            let runs: Vec<Span> = (0..count).map(|_| run_tl.schedule_run_read(&mut run)).collect();
            proptest::prop_assert_eq!(&singles, &runs);
            proptest::prop_assert_eq!(one.chip_free_times(), run_tl.chip_free_times());
            for &op in &after {
                proptest::prop_assert_eq!(issue(&mut one, op), issue(&mut run_tl, op));
            }
        }
    }

    #[test]
    fn nothing_starts_before_the_floor_and_an_idle_chip_does_not_hold_its_channel() {
        let t = timing();
        let xfer = t.transfer_ns(4096);
        let mut tl = Timeline::new(2, 1); // chip 1 stays idle at 0 throughout
        for _ in 0..4 * PRUNE_ABOVE {
            tl.schedule_program(0, 0, &t, 4096);
        }
        let held = tl.channels[0].len();
        assert!(
            held > PRUNE_ABOVE,
            "chip 1's time 0 keeps every booking: {held}"
        );
        let floor = tl.chip_free_ns(0) - t.program_ns;
        tl.raise_floor(floor);
        // Never lowered.
        tl.raise_floor(floor / 2);
        // Chip 1 still idle at 0: the next booking on the channel forgets every one that ended
        // by the floor.
        tl.schedule_program(0, 0, &t, 4096);
        assert!(
            tl.channels[0].intervals().all(|(_, e)| e > floor),
            "bookings that ended by the floor were forgotten: {:?}",
            tl.channels[0]
        );
        let late = tl.schedule_program(1, 0, &t, 4096);
        assert_eq!(late.start_ns, floor, "asked for 0, starts at the floor");
        let e = tl.schedule_erase(1, 0, &t);
        assert_eq!(e.start_ns, late.end_ns);
        let r = tl.schedule_read(0, 0, &t, 4096);
        assert!(r.start_ns >= floor && r.end_ns >= r.start_ns + t.read_ns + xfer);
    }

    #[test]
    fn chips_overlap_and_one_chip_serialises() {
        let t = timing();
        let mut tl = Timeline::new(4, 2);
        let a = tl.schedule_program(0, 0, &t, 4096);
        let b = tl.schedule_program(1, 0, &t, 4096); // other channel: fully parallel
        assert_eq!(a, b);
        let c = tl.schedule_program(2, 0, &t, 4096); // same channel as chip 0: waits for the bus only
        assert_eq!(c.start_ns, a.start_ns + t.transfer_ns(4096));
        assert!(c.end_ns < a.end_ns + t.program_ns);
        let d = tl.schedule_program(0, 0, &t, 4096); // same chip: after a
        assert!(d.start_ns >= a.end_ns);
        let e = tl.schedule_erase(3, 10, &t);
        assert_eq!(
            e,
            Span {
                start_ns: 10,
                end_ns: 10 + t.erase_ns
            }
        );
        let r = tl.schedule_read(1, 0, &t, 4096);
        assert!(r.start_ns >= b.end_ns);
        assert_eq!(
            tl.all_idle_ns(),
            [a, b, c, d, e, r].iter().map(|s| s.end_ns).max().unwrap()
        );
    }
}
