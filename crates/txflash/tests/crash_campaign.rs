//! Crash campaigns on the `small` preset through the project-wide checker: every sampled crash
//! image (including torn programs and erases) is recovered and judged against
//! atomic-transactions (all-or-nothing, acknowledged transactions present, never foreign data).

use crashtest::testing::{assert_keeps_promise, long, txmix};
use ftl::DesignOptions;
use workload::WorkloadSpec;

fn campaign(workload: WorkloadSpec, options: DesignOptions, points: usize, seed: u64, torn: bool) {
    assert_keeps_promise(txflash::spec_tc(), workload, options, points, seed, torn);
}

#[test]
fn tc_txmix_with_aborts_survives_every_sampled_crash() {
    campaign(txmix(1500, 0.0), DesignOptions::default(), 300, 1, true);
}

#[test]
fn tc_txmix_at_high_utilisation_with_gc_survives_crashes() {
    campaign(txmix(2500, 0.85), DesignOptions::default(), 300, 2, true);
}

/// A commit reserve of 1 % (39 records on `small`) makes TC compact its oldest commit records
/// many times in the run: a cut during a compaction, torn copy or torn erase included, must
/// leave every page at its newest committed version.
#[test]
fn tc_compacting_commit_records_survives_crashes() {
    let o = DesignOptions::default().with("commit_reserve", "0.01");
    campaign(txmix(2500, 0.85), o, 300, 4, true);
}

#[test]
fn tc_refusing_isolation_untorn() {
    let o = DesignOptions::default().with("isolation", "refuse");
    campaign(txmix(1500, 0.7), o, 200, 3, false);
}

#[test]
fn tc_long_campaigns() {
    if !long() {
        return;
    }
    for seed in 10..16 {
        campaign(
            txmix(20_000, 0.85),
            DesignOptions::default(),
            3000,
            seed,
            true,
        );
        let mut w = WorkloadSpec::named("randwrite").unwrap();
        w.requests = 20_000;
        w.fill = 0.9;
        campaign(w, DesignOptions::default(), 2000, seed, true);
    }
}
