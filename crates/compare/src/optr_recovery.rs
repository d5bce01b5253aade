//! OPTR §7.5's worst-case recovery, measured rather than estimated.
//!
//! The paper cannot measure recovery on its OpenSSD and estimates the worst case instead: a full
//! checkpoint (2,048 pages on 128 GB), the whole 64 MB area of incremental checkpoints and
//! coalescing records (4,096 pages), the summary pages a full 256 KB diff buffer reaches (256) and
//! the pages of every chip's partially written block (4,096): 10,496 reads × 100 µs ≈ 1 s.
//!
//! Here the device is driven into that state and then recovered for real: random one-page
//! writes over the whole logical space, a flush every `flush_every` writes (or none), until the first
//! request whose checkpoint would not fit the incremental area (the area is then as full as it
//! gets and a full checkpoint follows; the diff buffer is as full as the checkpoints that filled
//! the area left it: a full buffer's, or GC's, which come more often once GC runs). A second run of the same seeded
//! sequence stops one request before it, cuts the power and runs OPTR's recovery, whose flash
//! reads and simulated time are the figures (the simulator's parallel timing: reads on different
//! chips overlap, which the paper's estimate rules out). Deterministic from the seed.

use crate::error::metric;
use crate::error::{MeasureError, Result};
use flash::{DeviceConfig, Lpn, OpCause};
use ftl::{BlockDevice, DesignOptions, DesignSpec};
use lab::driver::Driver;
use rand::RngExt;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

/// What the recovery at the worst point read and cost, and the state it started from.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct WorstCase {
    /// Requests (writes and their flushes) before the cut.
    pub requests: u64,
    pub incremental_area_pages: u64,
    pub incremental_area_capacity: u64,
    pub diff_entries: u64,
    pub recovery_reads: u64,
    pub recovery_ms: f64,
}

/// The workload that drives OPTR to its recovery bounds.
#[derive(Clone, Debug)]
pub struct WorstCaseRun {
    pub device: DeviceConfig,
    pub options: DesignOptions,
    /// A host flush every this many writes (`None`: never). Flushes write coalescing records
    /// into the incremental area; without them it fills with diff pages and seals only.
    pub flush_every: Option<u32>,
    /// Gives up (an error) if no full checkpoint came after this many writes.
    pub max_writes: u64,
    pub seed: u64,
}

/// Where a run of the workload stops.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stop {
    /// Right after the request that caused the first full checkpoint since format.
    AtFirstFullCheckpoint,
    /// After this many requests.
    After(u64),
}

impl WorstCaseRun {
    /// Finds the worst point, then recovers from a power cut there.
    pub fn measure(&self, optr: &DesignSpec) -> Result<WorstCase> {
        let (_, trigger) = self.drive(optr, Stop::AtFirstFullCheckpoint)?;
        self.recover_after(optr, trigger - 1)
    }

    /// A power cut after `requests` requests of the sequence, and the recovery from it.
    pub fn recover_after(&self, optr: &DesignSpec, requests: u64) -> Result<WorstCase> {
        let (dev, requests) = self.drive(optr, Stop::After(requests))?;
        let mut at = state_of(dev.as_ref())?;
        at.requests = requests;
        let now = dev.flash().idle_ns();
        let mut flash = dev.into_flash();
        flash.start_clock_at(now);
        let (_, report) = optr
            .reopen(flash, &self.options)
            .map_err(|e| MeasureError::step("recovery at the worst point", e))?;
        at.recovery_reads = report.flash_reads;
        at.recovery_ms = report.sim_ns as f64 / 1e6;
        Ok(at)
    }

    /// Runs the seeded sequence until `stop`; returns the device and the requests issued.
    fn drive(&self, optr: &DesignSpec, stop: Stop) -> Result<(Box<dyn BlockDevice>, u64)> {
        let dev = lab::device::fresh(optr, &self.device, &self.options, true)?;
        let logical = dev.logical_pages();
        let full_at_start = metric(dev.as_ref(), "full_checkpoints")?;
        // A full checkpoint programs checkpoint pages: the metrics (a vector of named figures)
        // are read only after a request that programmed some, not after every request.
        let checkpoint_pages =
            |dev: &dyn BlockDevice| dev.flash().stats().programs_for(OpCause::Checkpoint);
        let mut checkpoint_pages_seen = checkpoint_pages(dev.as_ref());
        let mut driver = Driver::over(dev, 0).writes_from(1);
        let mut rng = ChaCha8Rng::seed_from_u64(self.seed);
        let mut now = 0u64;
        let e = |e: host::HostError| MeasureError::step("worst-case workload", e);
        for request in 1..=self.max_writes {
            if stop == Stop::After(request - 1) {
                return Ok((driver.into_device(), request - 1));
            }
            let lpn = rng.random_range(0..logical);
            now = driver.write(Lpn(lpn), 1, now).map_err(e)?;
            if self
                .flush_every
                .is_some_and(|f| request.is_multiple_of(f as u64))
            {
                now = driver.flush(now).map_err(e)?;
            }
            if stop == Stop::AtFirstFullCheckpoint {
                let programmed = checkpoint_pages(driver.device());
                if programmed != checkpoint_pages_seen
                    && metric(driver.device(), "full_checkpoints")? > full_at_start
                {
                    return Ok((driver.into_device(), request));
                }
                checkpoint_pages_seen = programmed;
            }
        }
        Err(MeasureError::Precondition(format!(
            "{stop:?} not reached within {} writes",
            self.max_writes
        )))
    }
}

fn state_of(dev: &dyn BlockDevice) -> Result<WorstCase> {
    Ok(WorstCase {
        incremental_area_pages: metric(dev, "incremental_area_pages")? as u64,
        incremental_area_capacity: metric(dev, "incremental_area_capacity")? as u64,
        diff_entries: metric(dev, "diff_entries")? as u64,
        ..WorstCase::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run() -> WorstCaseRun {
        WorstCaseRun {
            device: DeviceConfig::preset("small").unwrap(),
            options: DesignOptions::default(),
            flush_every: Some(16),
            max_writes: 2_000_000,
            seed: 7,
        }
    }

    /// The cut comes when the incremental area is as full as it gets, and recovery then reads
    /// the whole area; a cut halfway there reads less (the measurement can tell the worst point
    /// from another).
    #[test]
    fn the_worst_point_fills_the_area_and_costs_the_most_reads() {
        let optr = optr::spec();
        let r = run();
        let worst = r.measure(&optr).unwrap();
        eprintln!("{worst:?}");
        assert!(
            worst.incremental_area_pages * 10 >= worst.incremental_area_capacity * 9,
            "{worst:?}"
        );
        assert!(
            worst.recovery_reads >= worst.incremental_area_pages,
            "{worst:?}"
        );
        let halfway = r.recover_after(&optr, worst.requests / 2).unwrap();
        assert!(
            halfway.recovery_reads < worst.recovery_reads,
            "{halfway:?} vs {worst:?}"
        );
        assert!(
            halfway.recovery_ms < worst.recovery_ms,
            "{halfway:?} vs {worst:?}"
        );
        assert_eq!(
            r.measure(&optr).unwrap(),
            worst,
            "deterministic from the seed"
        );
    }

    /// The paper's 128 GB device (`optr` preset): `cargo test --release -p mobius-compare
    /// paper_scale_worst_case -- --ignored --nocapture` (a few minutes).
    #[test]
    #[ignore]
    fn paper_scale_worst_case() {
        for flush_every in [None, Some(16)] {
            let r = WorstCaseRun {
                device: DeviceConfig::preset("optr").unwrap(),
                // as the paper-scale grid (`Grid::paper`)
                options: DesignOptions::default().with("chip_allocation", "modulo"),
                flush_every,
                max_writes: 40_000_000,
                ..run()
            };
            eprintln!("{flush_every:?}: {:?}", r.measure(&optr::spec()).unwrap());
        }
    }
}
