//! Crash campaigns on the `small` preset through the project-wide checker: every sampled crash
//! image (including torn programs and erases) is recovered and judged against
//! atomic-transactions (all-or-nothing, acknowledged transactions present, never foreign data).

use crashtest::{run_campaign, CampaignConfig};
use flash::DeviceConfig;
use ftl::{DesignOptions, Promise};
use workload::WorkloadSpec;

fn long() -> bool {
    std::env::var("MOBIUS_LONG").is_ok_and(|v| v == "1")
}

fn campaign(workload: WorkloadSpec, options: DesignOptions, points: usize, seed: u64, torn: bool) {
    let cfg = CampaignConfig {
        design: txflash::spec_tc(),
        options,
        device: DeviceConfig::preset("small").unwrap(),
        workload,
        seed,
        crash_points: points,
        torn,
        exhaustive: false,
        promise: Promise::AtomicTransactions,
        threads: 2,
        tag_only: true,
    };
    let r = run_campaign(&cfg, &|_, _| {}).expect("campaign runs");
    eprintln!(
        "txflash-tc {} seed {seed} torn {torn}: {} points, {} recovered, {} violating, reads mean {:.0}",
        cfg.workload.name, r.crash_points, r.recovered, r.violating_points, r.recovery_flash_reads.mean
    );
    assert!(
        r.violations.is_empty(),
        "{} violations, first: {:#?}",
        r.violations.len(),
        &r.violations[..r.violations.len().min(5)]
    );
    assert_eq!(r.recovered, r.crash_points);
}

fn txmix(requests: u64, fill: f64) -> WorkloadSpec {
    let mut w = WorkloadSpec::named("txmix").unwrap();
    w.requests = requests;
    w.fill = fill;
    w.abort_fraction = 0.2;
    w
}

#[test]
fn tc_txmix_with_aborts_survives_every_sampled_crash() {
    campaign(txmix(1500, 0.0), DesignOptions::default(), 300, 1, true);
}

#[test]
fn tc_txmix_at_high_utilisation_with_gc_survives_crashes() {
    campaign(txmix(2500, 0.85), DesignOptions::default(), 300, 2, true);
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
