//! `mobius compare`: the papers' experiments side by side, with figures and a report.

use clap::Args;
use indicatif::MultiProgress;
use std::collections::BTreeMap;
use std::sync::Mutex;

#[derive(Args, Debug)]
pub struct CompareArgs {
    /// quick (minutes on 2 cores) or paper (the papers' device sizes and run lengths).
    #[arg(long, default_value = "quick")]
    pub scale: String,
    /// Output directory for report.md, the SVG figures and results.json.
    #[arg(long, default_value = "out/compare")]
    pub out: std::path::PathBuf,
    /// Run only this experiment (repeatable): micro, macro, recovery, ...
    #[arg(long)]
    pub only: Vec<String>,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

pub fn run(args: &CompareArgs) -> anyhow::Result<()> {
    let scale = compare::Scale::parse(&args.scale).map_err(anyhow::Error::msg)?;
    let multi = MultiProgress::new();
    let bars: Mutex<BTreeMap<String, indicatif::ProgressBar>> = Mutex::new(BTreeMap::new());
    let progress = |what: &str, done: u64, total: u64| {
        let mut bars = bars.lock().expect("progress lock");
        let bar = bars
            .entry(what.to_string())
            .or_insert_with(|| multi.add(crate::progress::bar(total, what)));
        bar.set_length(total);
        bar.set_position(done);
        if done >= total {
            bar.finish();
        }
    };
    let ctx = compare::Context {
        designs: crate::designs::all(),
        scale,
        seed: args.seed,
        progress: &progress,
    };
    let results = compare::run(&ctx, &args.only).map_err(anyhow::Error::msg)?;
    let names: Vec<&str> = ctx.designs.iter().map(|d| d.name).collect();
    let header = format!(
        "# mobius compare — the papers' experiments, side by side\n\nScale `{}`, seed {}. Designs built: {}. Every number below was measured in this run (simulated time unless stated); the papers' values are quoted as the papers'. Reproduce with `mobius compare --scale {} --seed {}`.",
        scale.name(), args.seed, names.join(", "), scale.name(), args.seed
    );
    compare::write_report(&args.out, &header, &results)?;
    for r in &results {
        for s in &r.skipped {
            eprintln!("compare: {}: skipped {s}", r.id);
        }
    }
    let checks: Vec<compare::Verdict> = results
        .iter()
        .flat_map(|r| &r.claims)
        .flat_map(|c| c.checks.iter().map(|k| k.verdict))
        .collect();
    let count = |v: compare::Verdict| checks.iter().filter(|k| **k == v).count();
    println!(
        "sub-claims: {} PASS, {} FAIL, {} NOT-REPRODUCED, {} by construction",
        count(compare::Verdict::Pass),
        count(compare::Verdict::Fail),
        count(compare::Verdict::NotReproduced),
        count(compare::Verdict::ByConstruction)
    );
    println!("wrote {}", args.out.join("report.md").display());
    Ok(())
}
