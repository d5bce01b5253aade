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
