//! The recorded engine traces (tools/record-engine-traces) replayed on every design with
//! transactions: each transaction the trace's software made durable together reaches the design
//! as one transaction, whole (checked by counts and pages, not by time).

use compare::macro_engines::WORKLOADS;
use lab::driver::durability::EngineTrace;
use trace::Op;

const PAGE: u32 = 4096;

/// Every trace of the experiment, by file name.
fn traces() -> Vec<(&'static str, &'static [u8])> {
    WORKLOADS
        .iter()
        .flat_map(|w| std::iter::once(w.atomic).chain(w.journaled))
        .collect()
}

/// Transactions counted straight from the requests: a group ends at a FLUSH or a FUA write and
/// counts when it reads or writes something.
fn groups_in(t: &EngineTrace) -> usize {
    let (mut groups, mut touched) = (0, false);
    for (k, r) in t.requests.iter().enumerate() {
        touched |= matches!(r.op, Op::Read | Op::Write | Op::WriteZeroes);
        let end = r.op == Op::Flush || (r.fua && r.op.modifies()) || k + 1 == t.requests.len();
        if end && touched {
            groups += 1;
            touched = false;
        }
    }
    groups
}

#[test]
fn every_trace_has_its_header_and_keeps_each_request_inside_one_transaction() {
    for (name, bytes) in traces() {
        let t = EngineTrace::read(name, bytes, PAGE).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(t.atomic_requests, name.ends_with("-atomic"), "{name}");
        assert!(t.engine_transactions > 0 && t.clients > 0, "{name}");
        assert_eq!(
            t.grouped.txns.len(),
            groups_in(&t),
            "{name}: one transaction per group"
        );
        let writes = t
            .requests
            .iter()
            .filter(|r| matches!(r.op, Op::Write | Op::WriteZeroes))
            .count();
        assert_eq!(
            t.grouped.writes.len(),
            writes,
            "{name}: every write request is held"
        );
        for (k, span, tx) in &t.grouped.writes {
            let held = &t.grouped.txns[*tx].writes;
            assert!(
                span.clone()
                    .all(|p| held.binary_search(&flash::Lpn(p)).is_ok()),
                "{name}: request {k} lies whole in its transaction"
            );
        }
        // Two consecutive write requests share a transaction exactly when no durability point
        // lies between them; transactions follow the trace's order.
        for pair in t.grouped.writes.windows(2) {
            let ((k1, _, t1), (k2, _, t2)) = (&pair[0], &pair[1]);
            let durable = t.requests[*k1..*k2]
                .iter()
                .any(|r| r.op == Op::Flush || (r.fua && r.op.modifies()));
            assert_eq!(t1 != t2, durable, "{name}: requests {k1} and {k2}");
            assert!(t2 >= t1, "{name}: requests {k1} and {k2} in order");
        }
        let pages: usize = t.grouped.txns.iter().map(|x| x.writes.len()).sum();
        assert!(pages > 0, "{name}");
    }
}

#[test]
fn every_trace_replays_on_every_transactional_design_one_transaction_per_group() {
    let config = lab::device::preset_slice("jasmine", 128).unwrap();
    for (name, bytes) in traces() {
        let t = EngineTrace::read(name, bytes, PAGE).unwrap();
        let (wl, share) = t.workload(None, 1);
        let pages: u64 = wl.txns.iter().map(|x| x.writes.len() as u64).sum();
        let mut ran = Vec::new();
        for spec in lab::registry::all() {
            for swrite in [ftl::SwriteMode::Sync, ftl::SwriteMode::Async] {
                let mut dev =
                    lab::device::fresh(&spec, &config, &ftl::DesignOptions::default(), true)
                        .unwrap();
                let Some(caps) = dev.transactional().map(|t| t.capabilities()) else {
                    break;
                };
                if !(caps.static_tx || caps.dynamic_tx)
                    || (swrite == ftl::SwriteMode::Async && !caps.async_swrite)
                {
                    continue;
                }
                let o = lab::driver::clients::run(dev, Some(swrite), &wl, t.clients)
                    .unwrap_or_else(|e| panic!("{name} on {}: {e}", spec.name));
                let at = format!(
                    "{name} ({:.0} %) on {} {swrite:?}",
                    share * 100.0,
                    spec.name
                );
                assert_eq!(
                    o.committed,
                    wl.txns.len() as u64,
                    "{at}: every transaction committed"
                );
                assert_eq!(o.errors, 0, "{at}: none refused");
                assert_eq!(
                    o.host_pages_written, pages,
                    "{at}: every page of every transaction"
                );
                assert!(o.flash_programs >= pages, "{at}");
                ran.push(format!("{} {swrite:?}", spec.name));
            }
        }
        // Möbius in both modes, Atomic-Write, LightTx, TxFlash TC, SCC and BPCC.
        assert_eq!(ran.len(), 7, "{name}: {ran:?}");
    }
}
