//! Soak seeds on which DFTL broke its promise, each replayed as the soak ran it.

use crashtest::second_life::FirstCut;
use crashtest::testing::{assert_second_life_keeps_promise, config};
use workload::WorkloadSpec;

/// Seed 9500145 (randwrite-flush, a flush every 16 writes, queue depth 8, 90 % fill on `small`),
/// second life after a torn cut at 581,909,431 ns that tore a reservation page: the recovery wrote
/// the log on after the torn page, its GC copied translation page 1 into a block only that new
/// page reserved and erased the block the newest durable checkpoint named for it; cut again before
/// the recovery's own checkpoint was on flash, the next recovery followed the log from that
/// checkpoint, stopped at the torn page, never scanned the copy, and found translation page 1
/// erased ("does not read back intact"). The log is now followed past a torn page.
#[test]
fn a_torn_reservation_page_no_longer_hides_the_log_written_after_it() {
    let mut w = WorkloadSpec::named("randwrite-flush").expect("randwrite-flush is a workload");
    w.requests = 3000;
    w.fill = 0.9;
    w.queue_depth = 8;
    w.flush_every = 16;
    let small = flash::DeviceConfig::preset("small").expect("small preset");
    let cfg = config(small, dftl::spec(), w, 9500145, true);
    let cut = FirstCut {
        instant_ns: 581_909_431,
        torn: true,
    };
    assert_second_life_keeps_promise(&cfg, cut);
}
