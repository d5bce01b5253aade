//! Fair accounting of refused transactions (issue #16): a transaction a design refuses as too
//! large is committed through the host's journal (pages to the journal, flush, commit record,
//! flush, pages in place, flush), counted, and its cost shows in time and in flash programs.

use compare::macro_tx::{Workload, MODES};
use compare::{Context, Scale};
use flash::Lpn;
use workload::Txn;

fn workload(big: u32) -> Workload {
    let mut txns: Vec<Txn> = (0..40u32)
        .map(|i| Txn {
            kind: "small",
            reads: vec![],
            writes: vec![Lpn(i * 4), Lpn(i * 4 + 1)],
        })
        .collect();
    txns.insert(
        20,
        Txn {
            kind: "big",
            reads: vec![],
            writes: (1000..1000 + big).map(Lpn).collect(),
        },
    );
    Workload {
        name: "test".into(),
        logical_pages_needed: 2000,
        txns,
        preload: true,
    }
}

#[test]
fn a_refused_transaction_goes_through_the_host_journal_and_costs_what_it_costs() {
    let progress = |_: &str, _: u64, _: u64| {};
    let ctx = Context {
        designs: vec![atomic_write::spec()],
        scale: Scale::Quick,
        seed: 1,
        progress: &progress,
        run_logs: None,
        cores: compare::Cores::serial(),
        unknowns: Default::default(),
    };
    let mode = MODES.iter().find(|m| m.design == "atomic-write").unwrap();
    let config = flash::DeviceConfig::preset("small").unwrap();
    // Atomic-Write keeps at most 1/16 of the small device (256 pages) in one transaction.
    let accepted = ctx.run_clients(mode, &workload(200), &config, 4).unwrap();
    let refused = ctx.run_clients(mode, &workload(400), &config, 4).unwrap();
    assert_eq!(accepted.journal_fallbacks, 0);
    assert_eq!(refused.journal_fallbacks, 1, "{refused:?}");
    assert_eq!(refused.errors, 0);
    assert_eq!(
        refused.committed, 41,
        "every transaction commits, the big one by the journal"
    );
    assert_eq!(refused.host_pages_written, 80 + 400);
    // The journal writes the 400 pages twice plus a commit record: at least 801 programs
    // beyond the small transactions' 80, where a device transaction writes them once.
    assert!(
        refused.flash_programs >= 80 + 801,
        "the fallback's cost is missing: {} programs",
        refused.flash_programs
    );
    assert!(refused.flash_programs > accepted.flash_programs + 400);
}
