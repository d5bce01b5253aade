//! `mobius bench-scale`: the same benchmark on devices from 1 GB to 1 TB (issue #19 item 3).
//!
//! Each size runs as its own `mobius bench --json` process (so each reports its own peak
//! resident memory), on the preset's geometry with `blocks_per_chip` set to give that raw
//! size, with the same workload: a sequential fill and then the same number of random writes.
//! The table gives page programs per wall second of the random writes (GC included; the whole
//! run's figure, fill included, beside it) and resident bytes per physical page at each size,
//! and the slowdown from the smallest to the largest: the goal is at most 2× (cache effects
//! expected; more is a data-structure problem). The random writes do not cost the same at every
//! size: a small device collects garbage far more (write amplification), a large one misses its
//! mapping cache far more; the table shows both. Wall-clock figures depend on the
//! machine and on what else runs on it; run it alone for numbers to quote.

use clap::Args;
use lab::device::{apply_size, parse_size};

#[derive(Args, Debug)]
pub struct BenchScaleArgs {
    /// Design.
    #[arg(long, default_value = "dftl")]
    pub ftl: String,
    /// Preset whose geometry is scaled (its blocks per chip change).
    #[arg(long, default_value = "jasmine")]
    pub preset: String,
    /// Raw device sizes, comma-separated, K/M/G/T suffixes. A size may repeat: it is measured
    /// each time, and the slowdown takes its median.
    #[arg(long, default_value = "1G,8G,64G,256G,1T", value_delimiter = ',')]
    pub sizes: Vec<String>,
    /// Workload (the same at every size).
    #[arg(long, default_value = "randwrite")]
    pub workload: String,
    /// Sequential fill before the measured requests.
    #[arg(long, default_value_t = 0.9)]
    pub fill: f64,
    /// Random requests after the fill, the same number at every size.
    #[arg(long, default_value_t = 2_000_000)]
    pub requests: u64,
    /// Unmeasured requests between the fill and the measured ones, this many per physical page
    /// of each size (0.5 at 1 TB: 134 M): every size then measures its steady state (GC running
    /// at its own rate, the mapping cache warm) instead of the first requests after a fill,
    /// which at 1 TB never reach GC.
    #[arg(long, default_value_t = 0.0)]
    pub warmup_per_page: f64,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    #[arg(long)]
    pub json: bool,
}

/// One size's figures, from its `bench --json`.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ScalePoint {
    pub size: String,
    pub raw_bytes: u64,
    pub physical_pages: u64,
    /// Unmeasured requests between the fill and the measured ones.
    pub warmup_requests: u64,
    /// Programs and wall time of the random writes after the fill (GC included).
    pub flash_programs: u64,
    pub wall_s: f64,
    pub programs_per_wall_s: f64,
    /// Requests of the random phase per wall second: unlike programs, a request is the same
    /// work asked of the design at every size (GC and mapping misses are what it costs).
    pub requests_per_wall_s: f64,
    /// The whole run, the sequential fill included.
    pub run_wall_s: f64,
    pub run_programs_per_wall_s: f64,
    pub peak_rss_bytes: u64,
    pub rss_bytes_per_page: f64,
    pub write_amplification: f64,
}

pub fn run(args: &BenchScaleArgs) -> anyhow::Result<()> {
    let mut points = Vec::new();
    for size in &args.sizes {
        let point = measure_size(args, size)?;
        if !args.json {
            eprintln!(
                "{size}: {:.2} M programs/s, {:.1} B/page",
                point.programs_per_wall_s / 1e6,
                point.rss_bytes_per_page
            );
        }
        points.push(point);
    }
    let per_program = slowdown(&points, |p| p.programs_per_wall_s);
    let per_request = slowdown(&points, |p| p.requests_per_wall_s);
    if args.json {
        let out = serde_json::json!({
            "ftl": args.ftl, "preset": args.preset, "workload": args.workload,
            "fill": args.fill, "requests": args.requests, "seed": args.seed,
            "warmup_per_page": args.warmup_per_page,
            "points": points, "slowdown_smallest_to_largest": per_program,
            "slowdown_per_request_smallest_to_largest": per_request,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        print_table(&points, per_program, per_request);
    }
    Ok(())
}

/// A rate of the random writes (`rate`: programs or requests per wall second) at the smallest
/// size over that at the largest (1 = no slowdown). A size named more than once in `--sizes`
/// is measured each time and counts with its median: on a machine whose speed drifts, the
/// cheap smallest size can be run several times around the largest one
/// (`--sizes 1G,1G,1G,8G,64G,256G,1T,1G,1G,1G`).
pub fn slowdown(points: &[ScalePoint], rate: impl Fn(&ScalePoint) -> f64) -> Option<f64> {
    let smallest = points.iter().map(|p| p.raw_bytes).min()?;
    let largest = points.iter().map(|p| p.raw_bytes).max()?;
    let median_at = |bytes: u64| {
        median(
            points
                .iter()
                .filter(|p| p.raw_bytes == bytes)
                .map(&rate)
                .collect(),
        )
    };
    Some(median_at(smallest) / median_at(largest).max(1e-9))
}

/// The median of `xs` (the mean of the middle two for an even count); `xs` must not be empty.
pub fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    let n = xs.len();
    if n % 2 == 1 {
        xs[n / 2]
    } else {
        (xs[n / 2 - 1] + xs[n / 2]) / 2.0
    }
}

/// The preset's geometry with `blocks_per_chip` set to give `size`.
fn geometry_of(preset: &str, size: &str) -> anyhow::Result<flash::Geometry> {
    let mut config = flash::DeviceConfig::preset(preset).map_err(anyhow::Error::msg)?;
    apply_size(&mut config, size)?;
    Ok(config.geometry)
}

/// The warm-up at `size`: `per_page` requests per physical page.
fn warmup_requests(geometry: &flash::Geometry, per_page: f64) -> anyhow::Result<u64> {
    if !(per_page.is_finite() && per_page >= 0.0) {
        anyhow::bail!("--warmup-per-page must be a number >= 0, not {per_page}");
    }
    Ok((geometry.pages() as f64 * per_page) as u64)
}

fn measure_size(args: &BenchScaleArgs, size: &str) -> anyhow::Result<ScalePoint> {
    let geometry = geometry_of(&args.preset, size)?;
    let blocks = geometry.blocks_per_chip;
    let warmup = warmup_requests(&geometry, args.warmup_per_page)?;
    let run = BenchRun {
        ftl: &args.ftl,
        preset: &args.preset,
        fill: args.fill,
        requests: args.requests,
        warmup_requests: warmup,
        seed: args.seed,
        extra: vec![
            "--set".into(),
            format!("geometry.blocks_per_chip={blocks}"),
            "--workload".into(),
            args.workload.clone(),
        ],
    };
    let v = run.json(&format!("at {size}"))?;
    point_from(size, &v)
}

/// One `bench --no-recovery --json` run in its own process (so that its peak resident memory is
/// its own): the arguments the table commands share, and any others (`extra`).
pub struct BenchRun<'a> {
    pub ftl: &'a str,
    pub preset: &'a str,
    pub fill: f64,
    pub requests: u64,
    pub warmup_requests: u64,
    pub seed: u64,
    pub extra: Vec<String>,
}

impl BenchRun<'_> {
    pub fn argv(&self) -> Vec<String> {
        let mut argv: Vec<String> = ["bench", "--ftl", self.ftl, "--preset", self.preset]
            .iter()
            .map(|s| s.to_string())
            .collect();
        for (flag, value) in [
            ("--fill", self.fill.to_string()),
            ("--requests", self.requests.to_string()),
            ("--warmup-requests", self.warmup_requests.to_string()),
            ("--seed", self.seed.to_string()),
        ] {
            argv.push(flag.to_string());
            argv.push(value);
        }
        argv.extend(self.extra.iter().cloned());
        argv.extend(["--no-recovery".to_string(), "--json".to_string()]);
        argv
    }

    /// Runs it and parses what it prints; `what` names the run in errors.
    pub fn json(&self, what: &str) -> anyhow::Result<serde_json::Value> {
        let exe = std::env::current_exe()?;
        let out = std::process::Command::new(exe)
            .args(self.argv())
            .stderr(std::process::Stdio::inherit())
            .output()?;
        if !out.status.success() {
            anyhow::bail!("bench {what} failed ({})", out.status);
        }
        Ok(serde_json::from_slice(&out.stdout)?)
    }
}

/// Reads one size's figures from `bench --json`.
pub fn point_from(size: &str, v: &serde_json::Value) -> anyhow::Result<ScalePoint> {
    let num = |k: &str| {
        v.get(k)
            .and_then(|x| x.as_f64())
            .ok_or_else(|| anyhow::anyhow!("bench --json at {size} has no number '{k}'"))
    };
    let physical_pages = num("physical_pages")? as u64;
    let wall_s = num("wall_s")?;
    let flash_programs = num("flash_programs")? as u64;
    let peak_rss_bytes = num("peak_rss_bytes")? as u64;
    Ok(ScalePoint {
        size: size.to_string(),
        raw_bytes: parse_size(size)?,
        physical_pages,
        warmup_requests: v
            .get("warmup_requests")
            .and_then(|x| x.as_u64())
            .unwrap_or(0),
        flash_programs,
        wall_s,
        programs_per_wall_s: num("sim_page_programs_per_s")?,
        requests_per_wall_s: num("requests")? / wall_s.max(1e-9),
        run_wall_s: num("run_wall_s")?,
        run_programs_per_wall_s: num("run_page_programs_per_s")?,
        peak_rss_bytes,
        rss_bytes_per_page: peak_rss_bytes as f64 / physical_pages.max(1) as f64,
        write_amplification: num("write_amplification")?,
    })
}

fn print_table(points: &[ScalePoint], per_program: Option<f64>, per_request: Option<f64>) {
    println!(
        "{:>6} {:>12} {:>12} {:>8} {:>10} {:>9} {:>6} {:>10} {:>10} {:>8}",
        "size",
        "pages",
        "programs",
        "wall s",
        "M progs/s",
        "K reqs/s",
        "WA",
        "run M/s",
        "RSS MB",
        "B/page"
    );
    for p in points {
        println!(
            "{:>6} {:>12} {:>12} {:>8.1} {:>10.3} {:>9.1} {:>6.2} {:>10.3} {:>10.0} {:>8.1}",
            p.size,
            p.physical_pages,
            p.flash_programs,
            p.wall_s,
            p.programs_per_wall_s / 1e6,
            p.requests_per_wall_s / 1e3,
            p.write_amplification,
            p.run_programs_per_wall_s / 1e6,
            p.peak_rss_bytes as f64 / 1e6,
            p.rss_bytes_per_page
        );
    }
    let warmed = points.iter().map(|p| p.warmup_requests).max().unwrap_or(0);
    if warmed > 0 {
        let each: Vec<String> = points
            .iter()
            .map(|p| format!("{} {}", p.size, p.warmup_requests))
            .collect();
        println!(
            "(unmeasured warm-up requests after the fill: {})",
            each.join(", ")
        );
    }
    println!("(programs, wall s, M progs/s, K reqs/s, WA: the measured random writes; run M/s: the whole run, fill and warm-up included)");
    for (what, s) in [("per program", per_program), ("per request", per_request)] {
        if let Some(s) = s {
            println!(
                "slowdown smallest -> largest, {what} (medians of repeated sizes): {s:.2}x ({} the 2x goal)",
                if s <= 2.0 { "within" } else { "beyond" }
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(size: &str, per_s: f64) -> ScalePoint {
        let v = serde_json::json!({
            "physical_pages": 1000, "wall_s": 2.0, "flash_programs": 5000, "requests": 4000,
            "peak_rss_bytes": 40_000, "sim_page_programs_per_s": per_s,
            "run_wall_s": 3.0, "run_page_programs_per_s": per_s,
            "write_amplification": 1.5,
        });
        point_from(size, &v).unwrap()
    }

    #[test]
    fn the_slowdown_compares_the_smallest_and_largest_sizes() {
        let points = [point("1T", 1e6), point("1G", 3e6), point("8G", 2e6)];
        assert_eq!(slowdown(&points, |p| p.programs_per_wall_s), Some(3.0));
        assert_eq!(slowdown(&points, |p| p.requests_per_wall_s), Some(1.0));
        assert_eq!(points[0].requests_per_wall_s, 2000.0);
        assert_eq!(points[0].rss_bytes_per_page, 40.0);
        assert_eq!(slowdown(&[], |p| p.programs_per_wall_s), None);
    }

    #[test]
    fn a_size_measured_several_times_counts_with_its_median() {
        let points = [
            point("1G", 1e6),
            point("1G", 9e6),
            point("1T", 1e6),
            point("1G", 3e6),
        ];
        // The median 3e6, not the first run's 1e6 nor the mean 4.33e6.
        assert_eq!(slowdown(&points, |p| p.programs_per_wall_s), Some(3.0));
        let even = [
            point("1G", 2e6),
            point("1G", 4e6),
            point("1T", 1e6),
            point("1T", 2e6),
        ];
        assert_eq!(slowdown(&even, |p| p.programs_per_wall_s), Some(2.0));
    }

    #[test]
    fn a_bench_output_without_a_figure_is_an_error() {
        let e = point_from("1G", &serde_json::json!({"wall_s": 1.0})).unwrap_err();
        assert!(e.to_string().contains("physical_pages"), "{e}");
    }

    #[test]
    fn a_bench_run_is_the_bench_command_line() {
        let run = BenchRun {
            ftl: "dftl",
            preset: "jasmine",
            fill: 0.5,
            requests: 300,
            warmup_requests: 7,
            seed: 3,
            extra: vec!["--workload".into(), "randwrite".into()],
        };
        assert_eq!(
            run.argv().join(" "),
            "bench --ftl dftl --preset jasmine --fill 0.5 --requests 300 --warmup-requests 7 \
             --seed 3 --workload randwrite --no-recovery --json"
        );
    }

    #[test]
    fn sizes_map_to_blocks_per_chip() {
        // jasmine: 16 chips of 128 × 4 KiB pages (512 KiB blocks): 1 GiB = 128 blocks per chip.
        assert_eq!(geometry_of("jasmine", "1G").unwrap().blocks_per_chip, 128);
        assert_eq!(
            geometry_of("jasmine", "1T").unwrap().blocks_per_chip,
            131_072
        );
        assert!(geometry_of("jasmine", "1M").is_err());
    }

    #[test]
    fn the_warmup_scales_with_the_physical_pages() {
        let g = geometry_of("jasmine", "1G").unwrap();
        assert_eq!(warmup_requests(&g, 0.5).unwrap(), 131_072);
        assert_eq!(warmup_requests(&g, 0.0).unwrap(), 0);
        assert!(warmup_requests(&g, -1.0).is_err());
        assert!(warmup_requests(&g, f64::NAN).is_err());
    }
}
