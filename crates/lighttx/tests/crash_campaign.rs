//! Crash campaigns on the `small` preset through the project-wide checker: every crash image
//! (including torn programs and erases) is recovered and judged against atomic-transactions.

use crashtest::testing::{assert_keeps_promise, long, txmix};
use ftl::DesignOptions;
use workload::WorkloadSpec;

fn campaign(workload: WorkloadSpec, options: DesignOptions, points: usize, seed: u64, torn: bool) {
    assert_keeps_promise(lighttx::spec(), workload, options, points, seed, torn);
}

#[test]
fn txmix_with_aborts_survives_every_sampled_crash() {
    campaign(txmix(1500, 0.0), DesignOptions::default(), 300, 1, true);
}

#[test]
fn txmix_at_high_utilisation_with_gc_survives_crashes() {
    campaign(txmix(2500, 0.85), DesignOptions::default(), 300, 2, true);
}

#[test]
fn untorn_crashes_and_a_small_zone() {
    let o = DesignOptions::default().with("zone_blocks", 8);
    campaign(txmix(1500, 0.7), o, 200, 3, false);
}

#[test]
fn long_campaigns() {
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
