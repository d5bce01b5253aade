//! A trimmed page must not come back with an *older* write after a power cut (docs/lighttx.md,
//! "Replaying the tail over a root"). A transaction left running keeps the log tail behind
//! the roots written after it began, so recovery replays the plain writes made since. One of
//! them, overwritten and then trimmed, must not be replayed over the root's mapping once GC
//! erased the newer write: the host would read data it had replaced.

use flash::{Content, ContentTag, DeviceConfig, Flash, Lpn};
use ftl::{BlockDevice, DesignOptions, DwriteFlag, PageOutcome, Transactional, TxUuid};
use lighttx::LightTx;

fn tag(lpn: u32, write: u64) -> Content {
    Content::Tag(ContentTag { lpn, write })
}

/// A host writing one page at a time, 10 µs apart.
struct Host {
    dev: LightTx,
    now: u64,
    write: u64,
    rng: u32,
}

impl Host {
    fn write(&mut self, lpn: u32) -> u64 {
        self.write += 1;
        self.now += 10_000;
        self.dev
            .write(Lpn(lpn), &[tag(lpn, self.write)], self.now)
            .unwrap();
        self.write
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
    let device = DeviceConfig::preset("small").unwrap();
    let flash = Flash::in_memory(device, atomic_write::format::OOB_BYTES, true);
    let dev = LightTx::format(flash, &DesignOptions::default()).unwrap();
    let now = dev.flash().idle_ns();
    let mut h = Host {
        dev,
        now,
        write: 0,
        rng: 12_345,
    };
    let logical = h.dev.logical_pages();
    let (half, target, held) = (logical / 2, logical - 1, logical - 2);
    // A dynamic transaction stays open for the whole run: the log tail stays at its HEAD.
    h.dev
        .dwrite(TxUuid(7), Lpn(held), &tag(held, 0), DwriteFlag::Head, now)
        .unwrap();
    // The first write of the target, amid cold pages written once: its block stays nearly all
    // valid, so GC does not take it.
    for lpn in half..half + 128 {
        h.write(lpn);
    }
    let first = h.write(target);
    for lpn in half + 128..held {
        h.write(lpn);
    }
    // Random writes over the other half, the second write of the target among them, then a
    // trim of it; then enough random writes for GC to collect the second write's block.
    h.random_writes(2 * half, half);
    let second = h.write(target);
    h.now += 10_000;
    h.dev.trim(Lpn(target), 1, h.now).unwrap();
    h.random_writes(20 * half, half);
    let at = h.now.max(h.dev.flash().idle_ns());
    h.dev.flush(at).unwrap();
    // Power cut after the flush.
    let mut flash = Box::new(h.dev).into_flash();
    let at = flash.idle_ns().max(at) + 1;
    flash.start_clock_at(at);
    let (mut dev, _) = LightTx::recover(flash, &DesignOptions::default()).unwrap();
    let mut out = Vec::new();
    let now = at.max(dev.flash().idle_ns());
    dev.read(Lpn(target), 1, now, &mut out).unwrap();
    let allowed = [
        PageOutcome::Unwritten,
        PageOutcome::Data(tag(target, second)),
    ];
    assert!(
        allowed.contains(&out[0]),
        "the trimmed page read {:?} (its first write was {first}, its last {second})",
        out[0]
    );
}
