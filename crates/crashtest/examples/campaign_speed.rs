//! Crash points per second of a DFTL campaign on the `small` preset (target: 10,000 points with
//! `--torn` in under a minute on two cores).
//!
//! `cargo run --release -p mobius-crashtest --example campaign_speed -- [POINTS] [THREADS]`

use crashtest::{run_campaign, CampaignConfig};
use flash::DeviceConfig;
use ftl::DesignOptions;
use workload::WorkloadSpec;

fn main() {
    let mut args = std::env::args().skip(1);
    let points: usize = args.next().map_or(10_000, |a| a.parse().expect("POINTS"));
    let threads: usize = args.next().map_or(2, |a| a.parse().expect("THREADS"));
    let design = dftl::spec();
    let mut workload = WorkloadSpec::named(design.default_workload).expect("workload");
    workload.requests = 3000;
    workload.fill = 0.8;
    let cfg = CampaignConfig {
        promise: design.promise,
        design,
        options: DesignOptions::default(),
        device: DeviceConfig::preset("small").expect("preset"),
        workload,
        seed: 1,
        crash_points: points,
        torn: true,
        exhaustive: false,
        threads,
        tag_only: true,
    };
    let r = run_campaign(&cfg, &|_, _| {}).expect("campaign");
    println!(
        "{} crash points ({} recovered, {} violations) on {} threads in {:.1} s: {:.0} crash points/s; recovery reads mean {:.0}",
        r.crash_points,
        r.recovered,
        r.violations.len(),
        threads,
        r.wall_s,
        r.crash_points as f64 / r.wall_s.max(1e-9),
        r.recovery_flash_reads.mean
    );
}
