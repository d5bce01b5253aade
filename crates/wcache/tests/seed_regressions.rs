//! Soak seeds on which the write-cached FTL broke its promise, each replayed as the soak ran it.
//!
//! Seeds 20262004, 20262006 and 20262037 (random writes with flushes, two of them with trims, on
//! the soak's `one-chip` geometry: one chip of 64 blocks of 64 pages; found by `mobius
//! crashtest --ftl all --seeds 40 --seed 20262000 --crash-points 2000 --torn --second-lives
//! 4`): the device was cut while GC had taken its last free block for copies, so every block
//! held data. Recovery closed the two blocks left open, losing their room, and the recovered
//! device had no free block and no open one: GC could not copy a single live page, and a
//! write-back in the second life failed "device full". Recovery now takes the blocks left open
//! up again where their writes stopped (`adopt_blocks_left_open`).

use crashtest::second_life::FirstCut;
use crashtest::soak::SoakGeometry;
use workload::WorkloadSpec;

/// The soak's randwrite-flush shape (3,000 requests after `fill`; a flush every `flush_every`
/// writes, `trims` of the requests trims).
fn randwrite_flush(fill: f64, queue_depth: u32, flush_every: u64, trims: f64) -> WorkloadSpec {
    let mut w = WorkloadSpec::named("randwrite-flush").expect("randwrite-flush is a workload");
    w.requests = 3000;
    w.fill = fill;
    w.queue_depth = queue_depth;
    w.flush_every = flush_every;
    w.trim_fraction = trims;
    w
}

/// The second life after the first cut `(instant_ns, torn)` keeps the flush-only promise.
fn second_life(w: WorkloadSpec, seed: u64, instant_ns: u64, torn: bool) {
    let device = SoakGeometry::named("one-chip").expect("one-chip").device();
    let cfg = crashtest::testing::config(device, wcache::spec(), w, seed, torn);
    crashtest::testing::assert_second_life_keeps_promise(&cfg, FirstCut { instant_ns, torn });
}

#[test]
fn a_device_cut_with_no_free_block_recovers_with_room_for_gc() {
    second_life(
        randwrite_flush(0.8, 8, 64, 0.2),
        20262037,
        2_136_908_599,
        false,
    );
    second_life(
        randwrite_flush(0.9, 4, 16, 0.0),
        20262004,
        2_464_260_893,
        true,
    );
    second_life(
        randwrite_flush(0.8, 4, 64, 0.2),
        20262006,
        2_272_267_128,
        true,
    );
}

/// Seed 20264108 with `op=0` (random writes with a flush every 16, queue depth 16, 90 % fill,
/// 20,000 requests on `one-chip` with SLC timing; 600 points; found by `mobius crashtest --ftl
/// all --seeds 60 --seed 20264100 --crash-points 600 --torn --second-lives 2`, the first soak to
/// turn over-provisioning down): cut while GC's copies held the last free block (GC runs at two
/// free blocks on one chip, and a copy takes one more), the recovered device had none, and the
/// rest of GC's open block could not take its first victim's 50 live pages: a flush in the
/// second life failed "device full". GC's mark is now at least three blocks
/// (`default_gc_free_blocks`).
#[test]
fn a_device_cut_with_no_free_block_at_low_over_provisioning_recovers_with_room_for_gc() {
    let mut w = randwrite_flush(0.9, 16, 16, 0.0);
    w.requests = 20_000;
    let device = SoakGeometry::named("one-chip").expect("one-chip").device();
    let mut cfg = crashtest::testing::config(device, wcache::spec(), w, 20264108, true);
    cfg.options = ftl::DesignOptions::default().with("op", 0);
    cfg.crash_points = 600;
    let cut = FirstCut {
        instant_ns: 37_371_089_600,
        torn: false,
    };
    crashtest::testing::assert_second_life_keeps_promise(&cfg, cut);
}
