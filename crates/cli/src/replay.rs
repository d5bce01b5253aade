//! `mobius replay`: a recorded block trace against any design, in simulated time
//! ([`lab::driver::replay`] replays it). By default each request arrives at its trace time;
//! `--qd N` ignores the trace's times and keeps N requests outstanding (closed loop). The report
//! has `mobius bench`'s keys: latency, IOPS, bandwidth, write amplification.

use std::collections::BTreeMap;
use std::path::PathBuf;

use clap::Args;
use flash::OpCause;
use ftl::{BlockDevice, DesignOptions};
use lab::driver::replay::{replay, ReplayStats, Timing};
use trace::Format;

use lab::device::Recipe;

#[derive(Args, Debug)]
pub struct ReplayArgs {
    /// Design (`mobius info --list`).
    #[arg(long)]
    pub ftl: String,
    #[command(flatten)]
    pub device: Recipe,
    /// Device size instead of a preset's blocks per chip, e.g. 256M, 2G (as `mobius serve`).
    #[arg(long)]
    pub size: Option<String>,
    /// Trace file, plain or gzip.
    pub trace: PathBuf,
    /// Trace format: ours, blkparse, msrc (default: detected from the first line).
    #[arg(long)]
    pub format: Option<String>,
    /// Keep N requests outstanding (closed loop) instead of using the trace's arrival times.
    #[arg(long)]
    pub qd: Option<u32>,
    /// Fold requests that lie past the device's end back into it instead of failing.
    #[arg(long)]
    pub wrap: bool,
    /// Design parameter, `--param key=value` (repeatable).
    #[arg(long = "param", value_name = "KEY=VALUE")]
    pub params: Vec<String>,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: &ReplayArgs) -> anyhow::Result<()> {
    let design = lab::registry::find(&args.ftl)?;
    let mut config = args.device.resolve_for(&design)?;
    if let Some(size) = &args.size {
        lab::device::apply_size(&mut config, size)?;
    }
    let format = args
        .format
        .as_deref()
        .map(str::parse::<Format>)
        .transpose()?;
    let (format, requests) = trace::load(&args.trace, format)?;
    if requests.is_empty() {
        anyhow::bail!("{}: the trace holds no request", args.trace.display());
    }
    let options = DesignOptions::from_pairs(&args.params)?;
    let mut dev = lab::device::fresh(&design, &config, &options, true)?;
    let timing = match args.qd {
        Some(queue_depth) => Timing::Closed { queue_depth },
        None => Timing::Trace,
    };
    let start_ns = dev.flash().idle_ns();
    let wall = std::time::Instant::now();
    let stats = replay(dev.as_mut(), &requests, timing, args.wrap, start_ns)?;
    let wall_s = wall.elapsed().as_secs_f64();
    let out = report(
        &stats,
        dev.as_ref(),
        &ReportContext {
            design: design.name,
            preset: &config.preset,
            trace: &args.trace.display().to_string(),
            format,
            timing,
            page_bytes: config.geometry.page_bytes,
            wall_s,
        },
    );
    if args.json {
        println!("{}", serde_json::to_string(&out)?);
    } else {
        print_human(&out);
    }
    Ok(())
}

struct ReportContext<'a> {
    design: &'a str,
    preset: &'a str,
    trace: &'a str,
    format: Format,
    timing: Timing,
    page_bytes: u32,
    wall_s: f64,
}

fn report(s: &ReplayStats, dev: &dyn BlockDevice, cx: &ReportContext) -> serde_json::Value {
    let sim_s = s.sim_seconds().max(1e-12);
    let lat = |q: f64| s.latency_ns.value_at_quantile(q) as f64 / 1e3;
    let page = f64::from(cx.page_bytes);
    let timing = match cx.timing {
        Timing::Trace => "trace".to_string(),
        Timing::Closed { queue_depth } => format!("qd{queue_depth}"),
    };
    let mut out = serde_json::json!({
        "ftl": cx.design,
        "preset": cx.preset,
        "trace": cx.trace,
        "format": cx.format.as_str(),
        "timing": timing,
        "requests": s.requests,
        "requests_by_op": s.requests_by_op,
        "host_pages_written": s.host_pages_written,
        "host_pages_read": s.host_pages_read,
        "flash_programs": s.flash.total_programs(),
        "flash_reads": s.flash.total_reads(),
        "flash_erases": s.flash.total_erases(),
        "programs_by_cause": OpCause::ALL.iter().map(|c| (c.name(), s.flash.programs_for(*c))).filter(|(_, v)| *v > 0).collect::<BTreeMap<_, _>>(),
        "write_amplification": s.write_amplification(),
        "latency_us": { "mean": s.latency_ns.mean() / 1e3, "p50": lat(0.5), "p99": lat(0.99), "max": s.latency_ns.max() as f64 / 1e3 },
        "iops": s.requests as f64 / sim_s,
        "bandwidth_mb_s": s.host_pages_written as f64 * page / sim_s / 1e6,
        "read_bandwidth_mb_s": s.host_pages_read as f64 * page / sim_s / 1e6,
        "sim_seconds": sim_s,
        "errors": s.errors,
        "trims_ignored": s.trims_ignored,
        "wall_s": cx.wall_s,
        "sim_page_programs_per_s": s.flash.total_programs() as f64 / cx.wall_s.max(1e-9),
    });
    let obj = out.as_object_mut().expect("object");
    for (k, v) in dev.metrics() {
        obj.insert(k, serde_json::json!(v));
    }
    out
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
