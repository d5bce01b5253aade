//! A trimmed page must not come back with an *older* write after a power cut (docs/lighttx.md,
//! "Replaying the tail over a root"). A transaction left running keeps the log tail behind
//! the roots written after it began, so recovery replays the plain writes made since. One of
//! them, overwritten and then trimmed, must not be replayed over the root's mapping once GC
//! erased the newer write: the host would read data it had replaced.

use flash::{DeviceConfig, Lpn};
use ftl::{DesignOptions, DwriteFlag, PageOutcome, TxUuid};
use lab::driver::{tag, Driver};
use workload::HostOp;

/// The run's requests, one page at a time and 10 µs apart, through the lab's request driver.
struct Paced {
    driver: Driver,
    now: u64,
    rng: u32,
}

impl Paced {
    /// The next request's arrival.
    fn next(&mut self) -> u64 {
        self.now += 10_000;
        self.now
    }

    /// A write of `lpn`: its write number.
    fn write(&mut self, lpn: u32) -> u64 {
        let write = self.driver.next_write();
        let at = self.next();
        self.driver.write(Lpn(lpn), 1, at).unwrap();
        write
    }

    /// `n` writes of pages drawn at random below `below`.
    fn random_writes(&mut self, n: u32, below: u32) {
        for _ in 0..n {
            self.rng = self.rng.wrapping_mul(1_103_515_245).wrapping_add(12_345);
            self.write((self.rng >> 8) % below);
        }
    }
}

#[test]
fn a_trimmed_page_does_not_come_back_older_than_its_last_write() {
    let spec = lighttx::spec();
    let options = DesignOptions::default();
    let device = DeviceConfig::preset("small").unwrap();
    let dev = lab::device::fresh(&spec, &device, &options, true).unwrap();
    let now = dev.flash().idle_ns();
    let logical = dev.logical_pages();
    let mut run = Paced {
        driver: Driver::over(dev, now),
        now,
        rng: 12_345,
    };
    let (half, target, held) = (logical / 2, logical - 1, logical - 2);
    // A dynamic transaction stays open for the whole run: the log tail stays at its HEAD.
    run.driver
        .dwrite(TxUuid(7), Lpn(held), DwriteFlag::Head, now)
        .unwrap();
    // The first write of the target, amid cold pages written once: its block stays nearly all
    // valid, so GC does not take it.
    for lpn in half..half + 128 {
        run.write(lpn);
    }
    let first = run.write(target);
    for lpn in half + 128..held {
        run.write(lpn);
    }
    // Random writes over the other half, the second write of the target among them, then a
    // trim of it; then enough random writes for GC to collect the second write's block.
    run.random_writes(2 * half, half);
    let second = run.write(target);
    let at = run.next();
    let trim = HostOp::Trim {
        start: Lpn(target),
        count: 1,
    };
    run.driver.issue(&trim, at).unwrap();
    run.random_writes(20 * half, half);
    let at = run.now.max(run.driver.device().flash().idle_ns());
    run.driver.flush(at).unwrap();
    // Power cut after the flush.
    let dev = run.driver.into_device();
    let (dev, _) = lab::device::cut_and_recover(&spec, dev, &options).unwrap();
    let now = dev.flash().idle_ns();
    let mut driver = Driver::over(dev, now);
    driver.read(Lpn(target), 1, now).unwrap();
    let got = driver.last_reads()[0].clone();
    let allowed = [
        PageOutcome::Unwritten,
        PageOutcome::Data(tag(Lpn(target), second)),
    ];
    assert!(
        allowed.contains(&got),
        "the trimmed page read {got:?} (its first write was {first}, its last {second})"
    );
}
