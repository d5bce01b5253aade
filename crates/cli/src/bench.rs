//! `mobius bench`: run a seeded workload on a design and report simulated-time figures
//! (the run itself is `lab::bench`, which the Python package calls too).

use clap::Args;
use lab::bench::BenchOptions;

#[derive(Args, Debug)]
pub struct BenchArgs {
    #[command(flatten)]
    pub options: BenchOptions,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: &BenchArgs) -> anyhow::Result<()> {
    let bar = crate::progress::bar(0, "bench");
    let out = lab::bench::measure(&args.options, &|done, total| {
        bar.set_length(total);
        bar.set_position(done)
    })?;
    bar.finish_and_clear();
    if args.json {
        println!("{}", serde_json::to_string(&out)?);
    } else {
        print_human(&out);
    }
    let mismatches = out["read_mismatches"].as_u64().unwrap_or(0);
    if mismatches > 0 {
        anyhow::bail!("{mismatches} reads returned data other than the last write");
    }
    Ok(())
}

fn print_human(v: &serde_json::Value) {
    let obj = v.as_object().expect("object");
    for (k, val) in obj {
        match val {
            serde_json::Value::Number(n) if n.is_f64() => {
                println!("{k:<28} {:.3}", n.as_f64().unwrap_or(0.0))
            }
            serde_json::Value::Object(_) | serde_json::Value::Array(_) => println!("{k:<28} {val}"),
            other => println!("{k:<28} {}", other.to_string().trim_matches('"')),
        }
    }
}
