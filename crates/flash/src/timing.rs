//! The timing model: every chip and every channel has its own timeline.
//!
//! A read occupies its chip for tR and then its channel for the page transfer out; a program
//! occupies the channel for the transfer in and the chip for transfer + tPROG; an erase occupies
//! only the chip for tBERS (SPEC.md §1, issue "timing model"). Operations on one chip are served
//! in the order they are issued (FIFO, no back-filling), so programs to one block keep their
//! order; operations on different chips overlap. Every operation also takes a `not_before` time
//! from its issuer: that is how an FTL states "this program may start only after those finished"
//! — the only ordering a crash respects.
//!
//! Times are plain integer nanoseconds of simulated time; nothing here reads a wall clock.

use serde::{Deserialize, Serialize};

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

    pub fn validate(&self) -> Result<(), String> {
        if self.bus_mb_s == 0 {
            return Err("timing.bus_mb_s must be at least 1".into());
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

/// Per-chip and per-channel busy-until times.
#[derive(Clone, Debug)]
pub struct Timeline {
    chip_free_ns: Vec<u64>,
    channel_free_ns: Vec<u64>,
    channels: u32,
}

impl Timeline {
    pub fn new(chips: u32, channels: u32) -> Self {
        Timeline {
            chip_free_ns: vec![0; chips as usize],
            channel_free_ns: vec![0; channels as usize],
            channels,
        }
    }

    fn channel(&self, chip: u32) -> usize {
        (chip % self.channels) as usize
    }

    /// When `chip` finishes everything issued to it so far.
    pub fn chip_free_ns(&self, chip: u32) -> u64 {
        self.chip_free_ns[chip as usize]
    }

    /// When every chip is idle.
    pub fn all_idle_ns(&self) -> u64 {
        self.chip_free_ns.iter().copied().max().unwrap_or(0)
    }

    pub fn schedule_read(&mut self, chip: u32, not_before: u64, t: &Timing, bytes: u64) -> Span {
        let ch = self.channel(chip);
        let start = not_before.max(self.chip_free_ns[chip as usize]);
        let sensed = start + t.read_ns;
        let xfer_start = sensed.max(self.channel_free_ns[ch]);
        let end = xfer_start + t.transfer_ns(bytes);
        self.channel_free_ns[ch] = end;
        self.chip_free_ns[chip as usize] = end;
        Span {
            start_ns: start,
            end_ns: end,
        }
    }

    pub fn schedule_program(&mut self, chip: u32, not_before: u64, t: &Timing, bytes: u64) -> Span {
        let ch = self.channel(chip);
        let start = not_before
            .max(self.chip_free_ns[chip as usize])
            .max(self.channel_free_ns[ch]);
        let loaded = start + t.transfer_ns(bytes);
        let end = loaded + t.program_ns;
        self.channel_free_ns[ch] = loaded;
        self.chip_free_ns[chip as usize] = end;
        Span {
            start_ns: start,
            end_ns: end,
        }
    }

    pub fn schedule_erase(&mut self, chip: u32, not_before: u64, t: &Timing) -> Span {
        let start = not_before.max(self.chip_free_ns[chip as usize]);
        let end = start + t.erase_ns;
        self.chip_free_ns[chip as usize] = end;
        Span {
            start_ns: start,
            end_ns: end,
        }
    }

    /// Moves every timeline to at least `ns` (used when a device is reopened after recovery).
    pub fn advance_all_to(&mut self, ns: u64) {
        for t in self
            .chip_free_ns
            .iter_mut()
            .chain(self.channel_free_ns.iter_mut())
        {
            *t = (*t).max(ns);
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
