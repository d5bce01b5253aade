//! A cell of the robustness campaign (one experiment at one point of the table of unknowns) is
//! deterministic: run twice, on one core and on two, it gives the same numbers; and the point
//! reaches the experiment (its numbers move, and it records what it consulted).

use compare::unknowns::{Overrides, Point};
use compare::{run, Context, Scale};

fn claims_at(spec: &str, cores: compare::Cores) -> (serde_json::Value, Vec<&'static str>) {
    let (claims, ctx) = run_at("txflash-macro", spec, cores);
    (claims, ctx.consulted())
}

/// Experiment `id` at the point `spec`: its claims, and what the point reached.
fn run_at(id: &str, spec: &str, cores: compare::Cores) -> (serde_json::Value, Overrides) {
    let progress = |_: &str, _: u64, _: u64| {};
    let ctx = Context {
        designs: lab::registry::all(),
        scale: Scale::Quick,
        seed: 4,
        progress: &progress,
        run_logs: None,
        cores,
        unknowns: Overrides::at(Point::parse(spec).unwrap()),
    };
    let results = run(&ctx, &[id.to_string()]).unwrap();
    let claims = compare::result::claims_json(&results[0].claims);
    (claims, ctx.unknowns)
}

/// A cell at the far end of the page size and the GC mark runs with them: the sqlite
/// experiment's small devices on 8 KB pages, wcache and OPTR collecting at twice their own
/// marks; its numbers move.
#[test]
fn a_cell_at_the_other_page_size_and_gc_mark_runs_at_them() {
    let (moved, o) = run_at(
        "sqlite",
        "page_size=8k,gc_threshold=2",
        compare::Cores::serial(),
    );
    for name in ["page_size", "gc_threshold"] {
        assert!(o.consulted().contains(&name), "{name} not consulted");
    }
    let applied = o.applied();
    // Its runs are on a small slice (128 blocks per chip of 4 KB: 64 of 8 KB); it also reads
    // the jasmine preset, for its host link only.
    assert!(
        applied["page_size"].contains(&"8192 + 256 B pages, 64 blocks per chip (small)".into()),
        "{applied:?}"
    );
    let gc = applied["gc_threshold"].join("; ");
    for design in ["wcache: GC below", "optr: GC below"] {
        assert!(gc.contains(design), "{design} not in {gc}");
    }
    let (default, o) = run_at("sqlite", "", compare::Cores::serial());
    assert!(o.applied().is_empty(), "{:?}", o.applied());
    assert_ne!(moved, default, "the point changed no number");
}

#[test]
fn a_cell_gives_the_same_numbers_on_one_core_and_on_two_and_its_point_moves_them() {
    let spec = "program=2,host_link=sata3,over_provisioning=0.1";
    let (serial, consulted) = claims_at(spec, compare::Cores::serial());
    let (parallel, _) = claims_at(spec, compare::Cores::new(2));
    assert_eq!(serial, parallel);
    let (default, _) = claims_at("", compare::Cores::serial());
    assert_ne!(serial, default, "the point changed no number");
    for name in ["program", "host_link", "over_provisioning", "gc_policy"] {
        assert!(consulted.contains(&name), "{name} not in {consulted:?}");
    }
    assert!(!consulted.contains(&"clients"), "one client per replay");
}
