//! Soak seeds on which Möbius broke its promise, each replayed as the soak ran it.
//!
//! Seed 9200065 (large-tx shape: txmix, 64-page requests, transactions of at least 16 pages,
//! queue depth 16, 50 % fill on `small`): 3 of 2,000 images showed a committed SWRITE with one
//! page reverted to an older transaction's version. GC had moved that page's older version while
//! the newer transaction was still pending and logged the move; the victim was erased and the
//! `from` page reused for a later copy of the newest version, which the merged translation page
//! mapped, so recovery's conditional replay (`cur == from`) applied the stale move. GC now leaves
//! blocks holding a page a pending transaction rewrites (docs/mobius.md, "GC and pending
//! transactions"). Found by `mobius crashtest --ftl all --seeds 25 --seed 9200050 --crash-points
//! 2000 --torn --second-lives 4`.

use crashtest::soak::wide_device;
use crashtest::testing::{assert_keeps_promise, assert_keeps_promise_on};
use ftl::DesignOptions;
use workload::WorkloadSpec;

/// The soak's transactional mix, as its cells run it (3,000 requests after a `fill`).
fn txmix(fill: f64, queue_depth: u32) -> WorkloadSpec {
    let mut w = WorkloadSpec::named("txmix").expect("txmix is a workload");
    w.requests = 3000;
    w.fill = fill;
    w.queue_depth = queue_depth;
    w
}

/// The soak's large-tx shape: 64-page requests, transactions of at least 16 pages.
fn large_tx(fill: f64, queue_depth: u32) -> WorkloadSpec {
    let mut w = txmix(fill, queue_depth);
    w.request_pages = 64;
    w.min_tx_pages = 16;
    w
}

/// The `small` preset.
fn small() -> flash::DeviceConfig {
    flash::DeviceConfig::preset("small").expect("small preset")
}

/// The soak's second life of `seed` after the first cut `(instant, torn)`, with the ALA striped
/// over `stripe` chips, 2,000 torn points: no violation.
fn second_life(
    device: flash::DeviceConfig,
    w: WorkloadSpec,
    seed: u64,
    stripe: u32,
    (instant_ns, torn): (u64, bool),
) {
    let mut cfg = crashtest::testing::config(device, mftl::spec(), w, seed, true);
    cfg.options = DesignOptions::default().with("ala_stripe", stripe);
    let cut = crashtest::second_life::FirstCut { instant_ns, torn };
    crashtest::testing::assert_second_life_keeps_promise(&cfg, cut);
}

/// The soak's trim-heavy shape: one request in five a trim, queue depth 16.
fn trim_heavy(fill: f64) -> WorkloadSpec {
    let mut w = txmix(fill, 16);
    w.trim_fraction = 0.2;
    w
}

#[test]
fn a_stale_gc_relocation_no_longer_reverts_a_committed_page() {
    assert_keeps_promise(
        mftl::spec(),
        large_tx(0.5, 16),
        DesignOptions::default(),
        2000,
        9200065,
        true,
    );
}

/// Seeds 9500029 and 9500044 (trim-heavy shape on the `wide` geometry: txmix with 20 % trims,
/// queue depth 16, 50 % / 80 % fill; found by the second soak chunk on the channel-gap timing
/// model): 1 of 2,000 images read two LPNs as uncorrectable pages; 2 images mapped a page in a
/// free block. A merge had folded normal writes' mappings from the Resident Area
/// into a translation page that, with its GM record, reached flash before the written page (the
/// head of the normal-write chain) did. Translation pages of a merge now wait for every page the
/// Resident Area maps (`resident_durable_by`: normal writes, GC copies, committed dynamic
/// transactions).
#[test]
fn a_merge_no_longer_maps_a_normal_write_before_its_page_is_on_flash() {
    for (seed, fill) in [(9500044, 0.8), (9500029, 0.5)] {
        assert_keeps_promise_on(
            wide_device(),
            mftl::spec(),
            trim_heavy(fill),
            DesignOptions::default(),
            2000,
            seed,
            true,
        );
    }
}

/// Seed 9500104 (trim-heavy shape on the `wide` geometry, 90 % fill; second life after a cut at
/// 142,979,000 ns; found by the soak chunk from 9500100): 2 images kept a dynamic transaction and
/// lost the earlier async SWRITE that wrote the same pages (Tx(A)/Tx(B) order broken). The SWRITE
/// was a small one, merged into a group whose inode was still queued on the ALA chip; its data
/// was programmed, so it was installed in RAM and, once a later inode was built to carry its flag,
/// dropped from the table of pending transactions. DWRITE HEAD waited only for pending ones, so
/// the dynamic transaction's ring closed (and committed at recovery) before the SWRITE's inode was
/// on flash. HEAD now waits for every static transaction admitted before it
/// (`static_durable`), dropped ones included.
#[test]
fn a_dynamic_transaction_no_longer_commits_before_an_earlier_async_swrite_is_on_flash() {
    second_life(
        wide_device(),
        trim_heavy(0.9),
        9500104,
        1,
        (142_979_000, false),
    );
}

/// Seed 9600005 with a striped ALA (`ala_stripe=4`; large-tx shape: txmix, 64-page requests,
/// transactions of at least 16 pages, queue depth 1, 50 % fill on `small`), second life after a
/// torn cut at 967,913,999 ns: a recovery that met a hole at ALA index 278 verified the unflagged
/// transactions before it and went on from the next slot (index 384, a HoleSkip inode first); cut
/// again before its resolution inode was on flash, the next recovery counted the S_max window in
/// ALA indices across the skipped slot (384 − 270 > 16) and rejected a complete 64-page SWRITE
/// without reading it, although it had been durable before the first cut. The window now counts
/// the inodes the device appended (skipped indices and HoleSkip inodes are not among them).
#[test]
fn a_recovery_no_longer_counts_a_skipped_slot_in_the_s_max_window() {
    second_life(small(), large_tx(0.5, 1), 9600005, 4, (967_913_999, true));
}

/// Seed 9500176 with a striped ALA (`ala_stripe=4`, trim-heavy shape at 80 % fill on `small`),
/// second life after a torn cut at 268,139,599 ns: the next recovery met a hole and went on from
/// the next slot; preparing that slot merges early when the slot after it is still in use, the
/// merge appended an inode, and preparing the slot again for that inode (the tail had not moved)
/// found it "in use" and took the ring for full: recovery failed with "device full". A slot
/// already prepared for the current tail is now left as it is.
#[test]
fn a_slot_prepared_for_the_tail_is_not_taken_for_a_full_ring() {
    second_life(small(), trim_heavy(0.8), 9500176, 4, (268_139_599, true));
}

/// Seed 20264152 with the device's over-provisioning turned down to 0 (abort-heavy shape: txmix
/// with half the transactions aborted, queue depth 1, 90 % fill, on the soak's `one-chip`
/// geometry with MLC timing; 600 torn points), second life after a torn cut at
/// 14,539,104,465 ns: the device was cut again while GC held the free blocks two below its
/// low-water mark (one left). Recovery closed the blocks left open, took the last free block for
/// the chain, and the merge it ran needed GC, which had nowhere to copy even the one live page
/// of its victim: "device full". GC's low-water mark is now at least four blocks
/// (`mftl::default_gc_free_blocks`, docs/mobius.md). Found by `mobius crashtest --ftl all --seeds 60 --seed
/// 20264100 --crash-points 600 --torn --second-lives 2`, the first soak to turn
/// over-provisioning down.
#[test]
fn a_device_cut_with_one_free_block_recovers_with_room_for_gc() {
    let mut device = crashtest::soak::SoakGeometry::named("one-chip")
        .expect("one-chip")
        .device();
    device.timing = flash::DeviceConfig::preset("jasmine")
        .expect("jasmine preset")
        .timing;
    device.over_provisioning = 0.0;
    let mut w = txmix(0.9, 1);
    w.abort_fraction = 0.5;
    let mut cfg = crashtest::testing::config(device, mftl::spec(), w, 20264152, true);
    cfg.crash_points = 600;
    let cut = crashtest::second_life::FirstCut {
        instant_ns: 14_539_104_465,
        torn: true,
    };
    crashtest::testing::assert_second_life_keeps_promise(&cfg, cut);
}
