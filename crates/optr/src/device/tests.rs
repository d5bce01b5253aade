use super::*;
use wcache::testkit::{run_campaign, stress, Campaign};

fn campaign(seed: u64, flush_every: u32, flush_interval_ms: u32) -> Campaign {
    let mut c = Campaign::small(seed, flush_every, true);
    c.params = vec![
        ("cache_mb".into(), "0.25".into()),
        ("flush_interval_ms".into(), flush_interval_ms.to_string()),
    ];
    c
}

fn check(c: &Campaign) {
    let o = run_campaign(c, format, recover, OOB_BYTES);
    eprintln!("optr campaign (flush_every {}): {o:?}", c.flush_every);
    assert!(o.gc_erases > 0, "the workload must make GC run");
    assert_eq!(o.flush_violations, 0, "{:?}", o.first_flush_violation);
    assert_eq!(o.prefix_violations, 0, "{:?}", o.first_prefix_violation);
}

#[test]
fn crash_campaign_ordered_without_flushes() {
    check(&campaign(21, 0, 5000));
}

#[test]
fn crash_campaign_ordered_with_flushes() {
    check(&campaign(22, 50, 5000));
}

#[test]
fn crash_campaign_ordered_periodic_internal_flush() {
    check(&campaign(23, 0, 2));
}

#[test]
fn stress_reads_back_everything() {
    let multiple = if std::env::var("MOBIUS_LONG").is_ok() {
        100
    } else {
        5
    };
    let (errors, dev) = stress(format, OOB_BYTES, &[("cache_mb", "0.5")], multiple, 4);
    assert_eq!(errors, 0);
    assert!(dev.flash().stats().total_erases() > 0);
}
