//! OPTR through the project's crash checker (`mobius crashtest --ftl optr`), under its own
//! `ordered` promise, on a write-heavy, high-locality workload (the cache coalesces) with GC
//! running; the write-cached baseline is judged under the same promise and must be caught.
//!
//! CI size: 300 torn crash images per campaign. `MOBIUS_LONG=1`: the paper's Table 1 — 2,400
//! images without flushes and 2,400 with a flush every 1,000 writes (12,000 requests each).
//! The same campaigns from the command line (docs/optr.md):
//! `mobius crashtest --ftl optr --preset small --workload locality --locality-pages 128
//!  --request-pages 4 --requests 12000 --fill 0.8 --flush-every 1000 --crash-points 2400 --torn`

use crashtest::{run_campaign, testing::long, CampaignConfig};
use ftl::{DesignOptions, DesignSpec, Promise};
use workload::WorkloadSpec;

fn workload(requests: u64, flush_every: u64) -> WorkloadSpec {
    let mut w = WorkloadSpec::named("locality").unwrap();
    w.requests = requests;
    w.request_pages = 4;
    w.locality_pages = 128;
    w.fill = 0.8;
    w.flush_every = flush_every;
    w
}

fn config(design: DesignSpec, w: WorkloadSpec, points: usize, seed: u64) -> CampaignConfig {
    CampaignConfig {
        promise: Promise::Ordered,
        design,
        options: DesignOptions::default(),
        device: flash::DeviceConfig::preset("small").unwrap(),
        workload: w,
        seed,
        crash_points: points,
        torn: true,
        exhaustive: false,
        threads: 2,
        tag_only: true,
    }
}

fn size() -> (u64, usize) {
    if long() {
        (12_000, 2_400)
    } else {
        (3_000, 300)
    }
}

fn assert_ordered(flush_every: u64, seed: u64) {
    let (requests, points) = size();
    let cfg = config(optr::spec(), workload(requests, flush_every), points, seed);
    let r = run_campaign(&cfg, &|_, _| {}).unwrap();
    eprintln!(
        "optr ordered, flush every {flush_every}: {} images ({:?}), {} recovered, {} violating, {} requests, recovery reads max {:.0}, {:.1} ms max",
        r.crash_points, r.points_by_kind, r.recovered, r.violating_points, r.host_requests,
        r.recovery_flash_reads.max, r.recovery_sim_ms.max
    );
    assert_eq!(r.crash_points, points, "distinct crash instants");
    assert_eq!(r.recovered, r.crash_points);
    assert!(
        r.violations.is_empty(),
        "{:#?}",
        &r.violations[..r.violations.len().min(3)]
    );
}

#[test]
fn ordered_without_flushes() {
    assert_ordered(0, 61);
}

#[test]
fn ordered_with_a_flush_every_1000_writes() {
    assert_ordered(1000, 62);
}

/// The campaigns' workload does what the proof needs: the cache coalesces (OPTR writes
/// coalescing records), GC runs, checkpoints of both kinds happen.
#[test]
fn the_campaign_workload_coalesces_and_collects() {
    for flush_every in [0, 1000] {
        let (requests, _) = size();
        let spec = optr::spec();
        let config = flash::DeviceConfig::preset("small").unwrap();
        let f = flash::Flash::in_memory(config, optr::OOB_BYTES, true);
        let mut dev = spec.build(f, &DesignOptions::default()).unwrap();
        let w = workload(requests, flush_every);
        lab::driver::run(dev.as_mut(), &w, 61, 0, false, &mut |_, _| {}).unwrap();
        let m = dev.metrics();
        let get = |k: &str| m.iter().find(|(n, _)| n == k).map_or(0.0, |x| x.1);
        eprintln!(
            "flush every {flush_every}: {m:?}, erases {}",
            dev.flash().stats().total_erases()
        );
        assert!(get("coalesced_pages") > 0.0);
        assert!(get("extra_record_pages") > 0.0);
        assert!(get("gc_rounds") > 0.0);
        assert!(get("extra_incremental_checkpoint_pages") > 0.0);
        assert!(get("extra_full_checkpoint_pages") > 0.0);
    }
}

/// The negative control: the baseline, judged under the same promise on the same workload.
#[test]
fn the_baseline_is_caught_under_ordered() {
    for (flush_every, seed) in [(0, 61), (1000, 62)] {
        let cfg = config(wcache::spec(), workload(3_000, flush_every), 300, seed);
        let r = run_campaign(&cfg, &|_, _| {}).unwrap();
        eprintln!(
            "wcache ordered, flush every {flush_every}: {} images, {} violating",
            r.crash_points, r.violating_points
        );
        assert!(r.violating_points > 0, "wcache must be caught");
    }
}
