//! Simulation speed of DFTL: random 4 KB writes at ~90 % utilisation on a tag-only device, in
//! flash page programs simulated per wall-clock second (one thread).
//!
//! ```text
//! cargo run --release -p mobius-dftl --example speed -- [preset] [random_writes] [cmt_entries]
//! ```
//! Defaults: `jasmine` (64 GB, 16 M pages), 8 M random page writes, DFTL's default CMT. The device is first
//! filled to 90 % with sequential 256-page requests (timed separately), then overwritten at
//! random so GC, translation-page write-backs and checkpoints all run.

use flash::{Content, ContentTag, DeviceConfig, Flash, Lpn};
use ftl::{BlockDevice, DesignOptions};
use std::time::Instant;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let preset = args.get(1).map_or("jasmine", |s| s.as_str());
    let writes: u64 = args
        .get(2)
        .map_or(8_000_000, |s| s.parse().expect("writes"));
    let mut options = DesignOptions::default();
    if let Some(c) = args.get(3) {
        options = options.with("cmt_entries", c);
    }
    let config = DeviceConfig::preset(preset).expect("preset");
    let flash = Flash::in_memory(config, dftl::format::OOB_BYTES, true);
    let mut d = dftl::Dftl::format(flash, &options).expect("format");
    let n = d.logical_pages();
    let hot = (n as u64 * 9 / 10) as u32;
    println!("{preset}: {n} logical pages, filling {hot}");

    let wall = Instant::now();
    let mut t = 0u64;
    let mut w = 0u64;
    let mut pages: Vec<Content> = Vec::with_capacity(256);
    let mut start = 0;
    while start < hot {
        let k = 256.min(hot - start);
        pages.clear();
        pages.extend((0..k).map(|i| {
            w += 1;
            Content::Tag(ContentTag {
                lpn: start + i,
                write: w,
            })
        }));
        t = d.write(Lpn(start), &pages, t).expect("fill").ack_ns;
        start += k;
    }
    let fill_s = wall.elapsed().as_secs_f64();
    let programs_before = d.flash().stats().total_programs();
    println!(
        "fill: {programs_before} programs in {fill_s:.1} s ({:.2} M programs/s)",
        programs_before as f64 / fill_s / 1e6
    );

    let wall = Instant::now();
    let cpu = cpu_ns();
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut page = [Content::Tag(ContentTag { lpn: 0, write: 0 })];
    for _ in 0..writes {
        // xorshift: the example keeps its own tiny generator so the hot loop is the FTL's.
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let lpn = (x % hot as u64) as u32;
        w += 1;
        page[0] = Content::Tag(ContentTag { lpn, write: w });
        // Queue depth ~16: arrivals run ahead of completions by a bounded window.
        t = d
            .write(Lpn(lpn), &page, t)
            .expect("write")
            .arrival_ns_next(t);
    }
    let s = wall.elapsed().as_secs_f64();
    let cpu_s = cpu_ns().zip(cpu).map(|(b, a)| (b - a) as f64 / 1e9);
    let stats = d.flash().stats().clone();
    let programs = stats.total_programs() - programs_before;
    println!(
        "random: {writes} host writes, {programs} flash programs in {s:.1} s wall: {:.2} M programs/s",
        programs as f64 / s / 1e6
    );
    if let Some(c) = cpu_s {
        println!(
            "        {c:.1} s on CPU (the machine is shared): {:.2} M programs per CPU second",
            programs as f64 / c / 1e6
        );
    }
    println!(
        "write amplification {:.2}, erases {}",
        programs as f64 / writes as f64,
        stats.total_erases()
    );
    for (k, v) in d.metrics() {
        println!("  {k} = {v}");
    }
}

/// Nanoseconds this thread ran on a CPU (Linux `/proc/self/schedstat`), if available.
fn cpu_ns() -> Option<u64> {
    std::fs::read_to_string("/proc/self/schedstat")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Arrival of the next request: a closed loop with a window, so requests overlap on the chips.
trait NextArrival {
    fn arrival_ns_next(self, previous: u64) -> u64;
}

impl NextArrival for ftl::Completion {
    fn arrival_ns_next(self, previous: u64) -> u64 {
        // Each request arrives 1/16 of its latency after the previous one (≈ 16 in flight).
        previous.max(self.arrival_ns + (self.ack_ns - self.arrival_ns) / 16)
    }
}
