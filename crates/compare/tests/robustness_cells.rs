//! A cell of the robustness campaign (one experiment at one point of the table of unknowns) is
//! deterministic: run twice, on one core and on two, it gives the same numbers; and the point
//! reaches the experiment (its numbers move, and it records what it consulted).

use compare::unknowns::{Overrides, Point};
use compare::{run, Context, Scale};

fn claims_at(spec: &str, cores: compare::Cores) -> (serde_json::Value, Vec<&'static str>) {
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
    let results = run(&ctx, &["txflash-macro".to_string()]).unwrap();
    let claims = compare::result::claims_json(&results[0].claims);
    (claims, ctx.unknowns.consulted())
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
