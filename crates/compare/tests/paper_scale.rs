//! The paper scale of the macro experiments' new sweeps starts and runs (issue #65; behind
//! `MOBIUS_LONG=1`, with `--release`): experiment 2b whole at `Scale::Paper` (every engine trace
//! five times on the 64 GB device, 1 to 32 clients), and experiment 2's paper-scale devices —
//! the 64 GB `jasmine` and the 128 GB `jasmine-8k` of Fig. 10 — loaded with the paper-scale
//! TPC-C-like database (1,000 warehouses at most) and running a prefix of its transactions at the
//! graded point and at 32 clients. docs/engine-traces.md ("Paper scale") has the measured times.

use compare::macro_engines::WORKLOADS;
use compare::macro_sweeps::{CLIENT_COUNTS, GRADED_CLIENTS};
use compare::{Context, Scale};

fn long() -> bool {
    let on = std::env::var("MOBIUS_LONG").is_ok_and(|v| v == "1");
    if !on {
        eprintln!("paper-scale run skipped: set MOBIUS_LONG=1");
    }
    on
}

fn paper<'a>(progress: &'a (dyn Fn(&str, u64, u64) + Sync)) -> Context<'a> {
    Context {
        designs: lab::registry::all(),
        scale: Scale::Paper,
        seed: 1,
        progress,
        run_logs: None,
        cores: compare::Cores::new(2),
        unknowns: Default::default(),
    }
}

#[test]
fn macro_engines_at_paper_scale_grades_every_trace_at_every_client_count() {
    if !long() {
        return;
    }
    let progress = |_: &str, _: u64, _: u64| {};
    let ctx = paper(&progress);
    let started = std::time::Instant::now();
    let r = compare::macro_engines::run(&ctx);
    eprintln!(
        "macro-engines at paper scale: {:.0} s",
        started.elapsed().as_secs_f64()
    );
    assert!(r.skipped.is_empty(), "{:?}", r.skipped);
    assert!(r.description.contains("whole, 5 times") && r.description.contains("64 GB"));
    for claim in &r.claims {
        for check in &claim.checks {
            assert!(
                check.measured.is_some_and(f64::is_finite),
                "{}: {}",
                claim.source,
                check.claim
            );
        }
    }
    for wl in &WORKLOADS {
        let sweep = &r.data[&format!("{}/clients_sweep", wl.name)];
        for (label, tps) in sweep["tps"].as_object().unwrap() {
            let tps = tps.as_array().unwrap();
            assert_eq!(tps.len(), CLIENT_COUNTS.len());
            assert!(
                tps.iter().all(|t| t.as_f64().is_some_and(|t| t > 0.0)),
                "{}: {label}: {tps:?}",
                wl.name
            );
        }
    }
}

#[test]
fn macro_paper_devices_load_the_paper_database_and_run_at_one_and_32_clients() {
    if !long() {
        return;
    }
    let progress = |_: &str, _: u64, _: u64| {};
    let ctx = paper(&progress);
    let (four_k, eight_k) = compare::macro_tx::devices(&ctx).unwrap();
    assert_eq!(four_k.geometry.page_bytes, 4096);
    assert_eq!(eight_k.geometry.page_bytes, 8192);
    assert_eq!(eight_k.geometry.pages(), four_k.geometry.pages());
    let modes = compare::macro_tx::MODES;
    for (config, size) in [(&four_k, "64 GB, 4 KB"), (&eight_k, "128 GB, 8 KB")] {
        let mut skipped = Vec::new();
        let (workloads, _) = compare::macro_tx::build_workloads(&ctx, config, &mut skipped);
        assert!(skipped.is_empty(), "{skipped:?}");
        let mut tpcc = workloads.into_iter().next().unwrap();
        assert_eq!(tpcc.txns.len(), 200_000, "the paper scale's transactions");
        tpcc.txns.truncate(2_000);
        for mode in [&modes[0], &modes[2]] {
            for clients in [GRADED_CLIENTS, 32] {
                let started = std::time::Instant::now();
                let o = ctx.run_clients(mode, &tpcc, config, clients).unwrap();
                eprintln!(
                    "{size}: {} at {clients} clients, load + 2,000 transactions: {:.0} s, {:.1} TPS",
                    mode.label,
                    started.elapsed().as_secs_f64(),
                    o.tps
                );
                assert_eq!(o.committed, 2_000, "{size}: {}", mode.label);
                assert_eq!(o.errors, 0);
            }
        }
    }
}
