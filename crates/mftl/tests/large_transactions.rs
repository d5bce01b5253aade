//! Large static transactions on a nearly full device with short blocks: Möbius must hold the
//! capacity it exports (docs/mobius.md, "A merge waits for pending transactions").
//!
//! Found by a stress probe of `mobius bench --workload txmix --fill 0.97 --abort-fraction 0.2
//! --trim-fraction 0.05` with 128–236-page transactions at queue depth 4–16 on the `small`
//! preset cut into 16-page blocks, over-provisioning 5–7 %: about one run in five failed with
//! "device full" (a fatal error). Three faults, each fixed:
//! - A merge started while async SWRITEs were pending stopped its head at the first pending
//!   inode, so the ring filled; the merge a full ring then forces needed GC, whose relocation
//!   inode had nowhere to go (seed 312). And GC inside such a merge cannot wait for the pending
//!   transactions, so it deferred every victim holding a page they rewrite (most blocks, with
//!   128-page transactions) without freeing it, until no block was free (seeds 305, 400). A merge
//!   a nearly full ring forces now waits for the pending transactions first.
//! - An ABORT whose abort-mark inode merged (and so trimmed the transaction table) indexed the
//!   table by a stale position and panicked (seed 305 once the wait is in; the old code too, on
//!   8-page blocks).
//! - A merge's GC restored the whole low-water mark; on a device this full each victim frees
//!   a page or two, and the burst's relocation inodes outgrew the last ring slot (seed 401).
//!   It now collects only the block its translation pages need.

use flash::{DeviceConfig, Flash};
use ftl::DesignOptions;
use workload::WorkloadSpec;

/// The `small` preset with blocks of `pages_per_block` pages (the same 12–16 MB).
fn short_blocks(pages_per_block: u32, over_provisioning: f64) -> DeviceConfig {
    let mut d = DeviceConfig::preset("small").expect("small preset");
    d.geometry.pages_per_block = pages_per_block;
    d.geometry.blocks_per_chip = 768 / pages_per_block;
    d.over_provisioning = over_provisioning;
    d
}

/// txmix of `pages`-page transactions at queue depth `qd` after a 97 % fill.
fn large_txmix(pages: u32, qd: u32, requests: u64) -> WorkloadSpec {
    let mut w = WorkloadSpec::named("txmix").expect("txmix is a workload");
    w.requests = requests;
    w.fill = 0.97;
    w.abort_fraction = 0.2;
    w.trim_fraction = 0.05;
    w.request_pages = pages;
    w.queue_depth = qd;
    w
}

/// Runs `w` on Möbius over `device`; every request must complete (refusals the design may
/// make — a transaction too large — are counted by the driver, a fatal error is a failure).
fn run(device: DeviceConfig, w: &WorkloadSpec, seed: u64) -> Result<(), String> {
    let spec = mftl::spec();
    let oob = spec.oob_record(&device.geometry);
    let flash = Flash::in_memory(device, oob, true);
    let mut dev = spec
        .build(flash, &DesignOptions::default())
        .map_err(|e| e.to_string())?;
    lab::driver::run(dev.as_mut(), w, seed, 0, false, &mut |_, _| {})
        .map(|_| ())
        .map_err(|e| format!("seed {seed}: {e}"))
}

/// Fails without the wait for pending transactions ("device full").
#[test]
fn a_merge_the_ring_forces_waits_for_pending_transactions() {
    run(short_blocks(16, 0.07), &large_txmix(128, 4, 60_000), 312).unwrap();
    run(short_blocks(8, 0.05), &large_txmix(128, 4, 20_000), 400).unwrap();
}

/// Fails without the wait ("device full") and, with the wait, without finding the aborted
/// transaction again (a panic).
#[test]
fn an_abort_whose_mark_merges_finds_its_transaction_again() {
    run(short_blocks(16, 0.07), &large_txmix(128, 4, 60_000), 305).unwrap();
}

/// Fails with the wait, without bounding the merge's GC ("device full").
#[test]
fn a_merge_collects_only_what_its_translation_pages_need() {
    run(short_blocks(16, 0.05), &large_txmix(236, 16, 20_000), 401).unwrap();
}
