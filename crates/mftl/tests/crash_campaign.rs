//! Möbius through the project-wide checker (`mobius crashtest`'s engine): the workload driver,
//! content-tag oracle and crash-image builder are the ones every design is judged by. The txmix
//! workload mixes WRITE, sync/async SWRITE (conflicting, concurrent), DWRITE, ABORT, READ and
//! SREAD; with queue depth 8 and transactions of at most 8 pages most SWRITEs are small, so
//! they are merged into shared atom inodes (§IV-E) and acknowledged late.

use crashtest::testing::{assert_keeps_promise, long, txmix};
use ftl::DesignOptions;
use workload::WorkloadSpec;

fn small_concurrent(requests: u64, fill: f64) -> WorkloadSpec {
    let mut w = txmix(requests, fill);
    w.queue_depth = 8;
    w.request_pages = 8;
    w
}

#[test]
fn merged_small_transactions_survive_every_sampled_crash() {
    assert_keeps_promise(
        mftl::spec(),
        small_concurrent(2000, 0.8),
        DesignOptions::default(),
        300,
        1,
        true,
    );
}

#[test]
fn unmerged_transactions_at_high_utilisation_survive_crashes() {
    let o = DesignOptions::default().with("merge_small", "off");
    assert_keeps_promise(mftl::spec(), txmix(2000, 0.85), o, 300, 2, true);
}

#[test]
fn long_campaigns() {
    if !long() {
        return;
    }
    for seed in 10..14 {
        let o = if seed % 2 == 0 {
            DesignOptions::default()
        } else {
            DesignOptions::default().with("merge_small", "off")
        };
        assert_keeps_promise(
            mftl::spec(),
            small_concurrent(12_000, 0.85),
            o,
            2000,
            seed,
            true,
        );
    }
}
