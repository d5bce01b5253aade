//! Seeds on which LightTx lost durable writes before the window-announcement fix (issue #22;
//! docs/lighttx.md, "Durable writes lost to an unannounced block"). Each is the CLI's default
//! campaign, `mobius crashtest --ftl lighttx --crash-points 2000 --torn --seed S` (txmix on
//! `small`, 3,000 requests after an 80 % fill). Before the fix each had 1–19 violations (at,
//! for example, instant 439719800 on seed 795028 and 1514087600 torn on seed 739595).

use crashtest::testing::assert_keeps_promise;
use ftl::DesignOptions;
use workload::WorkloadSpec;

const SEEDS: [u64; 10] = [
    731676, 739595, 763352, 771271, 795028, 810866, 818785, 826704, 834623, 512020873,
];

#[test]
fn every_seed_that_lost_durable_writes_now_keeps_the_promise() {
    for seed in SEEDS {
        let mut w = WorkloadSpec::named("txmix").expect("txmix is a workload");
        w.requests = 3000;
        w.fill = 0.8;
        assert_keeps_promise(
            lighttx::spec(),
            w,
            DesignOptions::default(),
            2000,
            seed,
            true,
        );
    }
}
