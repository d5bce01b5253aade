//! Shrinking (issue #22): a failing campaign reduces to a smaller run that still fails at the
//! instant it names (under either cut model), and a campaign that does not fail does not
//! shrink.

use crashtest::prefix::CutModel;
use crashtest::shrink::{self, shrink};
use crashtest::{replay_one, CampaignConfig};
use ftl::{DesignOptions, Promise};

fn dftl(oob_scan: &str, requests: u64) -> CampaignConfig {
    let mut w = workload::WorkloadSpec::named("randwrite").expect("randwrite");
    w.requests = requests;
    w.fill = 0.5;
    CampaignConfig {
        design: dftl::spec(),
        options: DesignOptions::default().with("oob_scan", oob_scan),
        device: flash::DeviceConfig::preset("small").expect("small"),
        workload: w,
        seed: 3,
        crash_points: 300,
        torn: true,
        exhaustive: false,
        promise: Promise::DurableWrites,
        threads: 2,
        tag_only: true,
    }
}

/// DFTL without its OOB scan, judged as durable-writes, shrinks under `cut` to a smaller run
/// that fails again at the cut it names, whose replay command names it.
fn shrinks_and_replays(cut: CutModel) -> shrink::Shrunk {
    let cfg = dftl("off", 800);
    let s = shrink(&cfg, cut, 40, &|step| eprintln!("shrunk: {step}"))
        .expect("campaigns run")
        .expect("DFTL without its OOB scan loses writes");
    eprintln!("{} campaigns; replay: {}", s.campaigns, s.replay);
    assert_eq!(s.cut, cut);
    assert!(!s.steps.is_empty());
    assert!(s.config.workload.requests < cfg.workload.requests || s.config.workload.fill < 0.5);
    let v = replay_one(&s.config, cut, s.instant_ns, s.torn).expect("replay");
    assert!(
        !v.is_empty(),
        "the shrunk run must fail at the cut it names"
    );
    let named = format!("--replay-instant {}", s.instant_ns);
    assert!(s.replay.contains(&named), "{}", s.replay);
    s
}

#[test]
fn an_injected_bug_shrinks_to_a_smaller_run_that_still_fails() {
    shrinks_and_replays(CutModel::Instant);
}

/// Under the image-prefix cut model the run shrinks the same way, the failure kept is a prefix
/// cut (a write count), and the replay names the model and fails again when run.
#[test]
fn a_failing_run_shrinks_under_the_prefix_cut_model() {
    let s = shrinks_and_replays(CutModel::Prefix);
    assert!(s.replay.ends_with(" --cut-model prefix"), "{}", s.replay);
}

#[test]
fn a_correct_design_does_not_shrink() {
    assert!(shrink(&dftl("on", 200), CutModel::Instant, 10, &|_| {})
        .expect("campaigns run")
        .is_none());
}
