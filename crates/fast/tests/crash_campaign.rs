//! Crash campaigns on the `small` preset through the project-wide checker: every crash image
//! (torn programs and erases included) is recovered and judged against durable-writes. Few RW
//! log blocks make every few host pages a full merge, so cuts land inside merges.

use crashtest::testing::{assert_keeps_promise, long};
use ftl::DesignOptions;
use workload::WorkloadSpec;

fn randwrite(requests: u64, fill: f64, pages: u32, trims: f64) -> WorkloadSpec {
    let mut w = WorkloadSpec::named("randwrite").unwrap();
    w.requests = requests;
    w.fill = fill;
    w.request_pages = pages;
    w.trim_fraction = trims;
    w
}

#[test]
fn random_writes_survive_every_sampled_crash() {
    let o = DesignOptions::default();
    assert_keeps_promise(fast::spec(), randwrite(3000, 0.8, 1, 0.0), o, 400, 1, true);
}

#[test]
fn cuts_inside_merges_with_one_rw_log_block() {
    let o = DesignOptions::default().with("rw_log_blocks", 1);
    assert_keeps_promise(fast::spec(), randwrite(2000, 0.9, 4, 0.1), o, 400, 2, true);
}

#[test]
fn sequential_runs_and_flushes_exercise_the_sw_log_block() {
    let mut w = WorkloadSpec::named("randwrite-flush").unwrap();
    w.requests = 2000;
    w.fill = 0.7;
    w.request_pages = 32;
    w.flush_every = 8;
    let o = DesignOptions::default().with("rw_log_blocks", 2);
    assert_keeps_promise(fast::spec(), w, o, 400, 3, true);
}

#[test]
fn long_campaigns() {
    if !long() {
        return;
    }
    for seed in 10..16 {
        for logs in ["1", "3"] {
            let o = DesignOptions::default().with("rw_log_blocks", logs);
            assert_keeps_promise(
                fast::spec(),
                randwrite(20_000, 0.9, 2, 0.05),
                o,
                2000,
                seed,
                true,
            );
        }
    }
}
