//! Crash campaigns of the cyclic protocols (SCC, BPCC) on the `small` preset through the
//! project-wide checker: every sampled crash image (torn programs and erases included) is
//! recovered and judged against atomic-transactions.

use crashtest::testing::{assert_keeps_promise, long, txmix};
use ftl::{DesignOptions, DesignSpec};
use workload::WorkloadSpec;

fn campaign(
    spec: DesignSpec,
    w: WorkloadSpec,
    o: DesignOptions,
    points: usize,
    seed: u64,
    torn: bool,
) {
    assert_keeps_promise(spec, w, o, points, seed, torn);
}

/// Aborts, then rewrites of the same pages: a narrow hot range and many aborts, so the pages of
/// aborted transactions are written again soon — where SCC must erase first and BPCC straddles.
fn abort_rewrite(requests: u64) -> WorkloadSpec {
    let mut w = txmix(requests, 0.5);
    w.range_pages = 48;
    w.abort_fraction = 0.5;
    w.request_pages = 6;
    w
}

#[test]
fn scc_txmix_with_aborts_survives_every_sampled_crash() {
    campaign(
        txflash::spec_scc(),
        txmix(1500, 0.0),
        DesignOptions::default(),
        300,
        1,
        true,
    );
}

#[test]
fn bpcc_txmix_with_aborts_survives_every_sampled_crash() {
    campaign(
        txflash::spec_bpcc(),
        txmix(1500, 0.0),
        DesignOptions::default(),
        300,
        1,
        true,
    );
}

#[test]
fn scc_at_high_utilisation_with_gc_survives_crashes() {
    campaign(
        txflash::spec_scc(),
        txmix(2500, 0.85),
        DesignOptions::default(),
        300,
        2,
        true,
    );
}

#[test]
fn bpcc_at_high_utilisation_with_gc_survives_crashes() {
    campaign(
        txflash::spec_bpcc(),
        txmix(2500, 0.85),
        DesignOptions::default(),
        300,
        2,
        true,
    );
}

#[test]
fn scc_abort_then_rewrite_survives_crashes() {
    campaign(
        txflash::spec_scc(),
        abort_rewrite(2000),
        DesignOptions::default(),
        300,
        3,
        true,
    );
}

#[test]
fn bpcc_abort_then_rewrite_survives_crashes() {
    campaign(
        txflash::spec_bpcc(),
        abort_rewrite(2000),
        DesignOptions::default(),
        300,
        3,
        true,
    );
}

#[test]
fn cyclic_refusing_isolation_untorn() {
    let o = DesignOptions::default().with("isolation", "refuse");
    campaign(
        txflash::spec_scc(),
        txmix(1000, 0.7),
        o.clone(),
        150,
        4,
        false,
    );
    campaign(txflash::spec_bpcc(), txmix(1000, 0.7), o, 150, 4, false);
}

/// `MOBIUS_LONG=1`: per protocol, 2 seeds × (txmix at 85 % fill, abort-then-rewrite, randwrite at
/// 90 % fill), 20,000 requests each.
fn long_campaigns(spec: DesignSpec) {
    if !long() {
        return;
    }
    for seed in 10..12 {
        let o = DesignOptions::default();
        campaign(
            spec.clone(),
            txmix(20_000, 0.85),
            o.clone(),
            3000,
            seed,
            true,
        );
        campaign(
            spec.clone(),
            abort_rewrite(20_000),
            o.clone(),
            3000,
            seed,
            true,
        );
        let mut w = WorkloadSpec::named("randwrite").unwrap();
        w.requests = 20_000;
        w.fill = 0.9;
        campaign(spec.clone(), w, o, 2000, seed, true);
    }
}

#[test]
fn scc_long_campaigns() {
    long_campaigns(txflash::spec_scc());
}

#[test]
fn bpcc_long_campaigns() {
    long_campaigns(txflash::spec_bpcc());
}

/// The abort-then-rewrite workload really aborts and rewrites: SCC erases blocks for its aborts,
/// BPCC never does and leaves the aborted intentions as straddle responsibility set members.
#[test]
fn abort_then_rewrite_workload_exercises_the_difference() {
    let w = abort_rewrite(2000);
    let mut metrics = Vec::new();
    for spec in [txflash::spec_scc(), txflash::spec_bpcc()] {
        let config = flash::DeviceConfig::preset("small").unwrap();
        let flash = flash::Flash::in_memory(
            config.clone(),
            (spec.oob_record_bytes)(&config.geometry),
            true,
        );
        let mut dev = spec.build(flash, &DesignOptions::default()).unwrap();
        let r = lab::driver::run(dev.as_mut(), &w, 3, 0, false, &mut |_, _| {}).unwrap();
        assert_eq!(r.stats.read_mismatches, 0);
        let m: std::collections::HashMap<String, f64> = dev.metrics().into_iter().collect();
        eprintln!("{}: {m:?}", spec.name);
        assert!(m["aborts"] >= 50.0, "{m:?}");
        metrics.push(m);
    }
    assert!(
        metrics[0]["abort_erases"] >= 50.0,
        "SCC erases for its aborts"
    );
    assert_eq!(
        metrics[1]["abort_erases"], 0.0,
        "BPCC leaves aborted intentions"
    );
    assert!(metrics[1]["srs_members"] > 0.0);
}
