//! A benchmark run (`mobius bench`, the Python package's `bench`): a seeded workload on a
//! design through the request driver, reported in simulated-time figures, then a power cut and
//! the design's recovery; and the in-process peer that measures the simulator's speed as a
//! ratio ([`peer`]).

pub mod peer;

use crate::device::{Recipe, RecipeError};
use crate::registry::UnknownDesign;
use flash::{Flash, OpCause};
use ftl::{DesignOptions, FtlError, RecoveryReport};
use workload::{WorkloadError, WorkloadSpec};

#[derive(Debug, Clone, Default)]
#[cfg_attr(feature = "clap", derive(clap::Args))]
pub struct WorkloadOptions {
    /// Workload name (randwrite, seqwrite, randrw, randwrite-flush, locality, txmix); default: the design's.
    #[cfg_attr(feature = "clap", arg(long))]
    pub workload: Option<String>,
    /// Requests in the measured phase.
    #[cfg_attr(feature = "clap", arg(long))]
    pub requests: Option<u64>,
    /// Pages per write request (largest transaction for txmix).
    #[cfg_attr(feature = "clap", arg(long))]
    pub request_pages: Option<u32>,
    /// Logical pages touched (0 = whole device).
    #[cfg_attr(feature = "clap", arg(long))]
    pub range_pages: Option<u32>,
    /// Outstanding requests.
    #[cfg_attr(feature = "clap", arg(long))]
    pub qd: Option<u32>,
    /// Fill this fraction of the device sequentially first (so GC runs).
    #[cfg_attr(feature = "clap", arg(long))]
    pub fill: Option<f64>,
    /// Requests of the workload issued after the fill and not measured (a steady state first).
    #[cfg_attr(feature = "clap", arg(long))]
    pub warmup_requests: Option<u64>,
    /// Flush every N write requests.
    #[cfg_attr(feature = "clap", arg(long))]
    pub flush_every: Option<u64>,
    /// Fraction of reads (randrw, txmix).
    #[cfg_attr(feature = "clap", arg(long))]
    pub read_fraction: Option<f64>,
    /// Fraction of transactions aborted (txmix).
    #[cfg_attr(feature = "clap", arg(long))]
    pub abort_fraction: Option<f64>,
    /// Hot window in pages (locality).
    #[cfg_attr(feature = "clap", arg(long))]
    pub locality_pages: Option<u32>,
    /// Smallest transaction in pages (txmix).
    #[cfg_attr(feature = "clap", arg(long))]
    pub min_tx_pages: Option<u32>,
    /// Fraction of requests that are trims of 1-8 pages.
    #[cfg_attr(feature = "clap", arg(long))]
    pub trim_fraction: Option<f64>,
    /// While a dynamic transaction is open, fraction of requests that are other requests
    /// (txmix; 0: it runs to its REAR with only reads in between).
    #[cfg_attr(feature = "clap", arg(long))]
    pub interleave_fraction: Option<f64>,
}

impl WorkloadOptions {
    /// The options given on the command line.
    pub fn given(&self) -> Vec<&'static str> {
        crate::flags_given([
            ("--workload", self.workload.is_some()),
            ("--requests", self.requests.is_some()),
            ("--request-pages", self.request_pages.is_some()),
            ("--range-pages", self.range_pages.is_some()),
            ("--qd", self.qd.is_some()),
            ("--fill", self.fill.is_some()),
            ("--warmup-requests", self.warmup_requests.is_some()),
            ("--flush-every", self.flush_every.is_some()),
            ("--read-fraction", self.read_fraction.is_some()),
            ("--abort-fraction", self.abort_fraction.is_some()),
            ("--locality-pages", self.locality_pages.is_some()),
            ("--min-tx-pages", self.min_tx_pages.is_some()),
            ("--trim-fraction", self.trim_fraction.is_some()),
            ("--interleave-fraction", self.interleave_fraction.is_some()),
        ])
    }

    /// The workload `default_name` (the design's) or the one named, with the options given.
    pub fn resolve(&self, default_name: &str) -> Result<WorkloadSpec, WorkloadError> {
        let mut s = WorkloadSpec::named(self.workload.as_deref().unwrap_or(default_name))?;
        if let Some(v) = self.requests {
            s.requests = v;
        }
        if let Some(v) = self.request_pages {
            s.request_pages = v;
        }
        if let Some(v) = self.range_pages {
            s.range_pages = v;
        }
        if let Some(v) = self.qd {
            s.queue_depth = v;
        }
        if let Some(v) = self.fill {
            s.fill = v;
        }
        if let Some(v) = self.warmup_requests {
            s.warmup_requests = v;
        }
        if let Some(v) = self.flush_every {
            s.flush_every = v;
        }
        if let Some(v) = self.read_fraction {
            s.read_fraction = v;
        }
        if let Some(v) = self.abort_fraction {
            s.abort_fraction = v;
        }
        if let Some(v) = self.locality_pages {
            s.locality_pages = v;
        }
        if let Some(v) = self.min_tx_pages {
            s.min_tx_pages = v;
        }
        if let Some(v) = self.trim_fraction {
            s.trim_fraction = v;
        }
        if let Some(v) = self.interleave_fraction {
            s.interleave_fraction = v;
        }
        Ok(s)
    }
}

/// A benchmark run: a seeded workload on a design, measured in simulated time, then a power
/// cut and the design's recovery (`mobius bench`, the Python package's `bench`).
#[derive(Debug, Clone)]
#[cfg_attr(feature = "clap", derive(clap::Args))]
pub struct BenchOptions {
    /// Design (`mobius info --list`).
    #[cfg_attr(feature = "clap", arg(long))]
    pub ftl: String,
    #[cfg_attr(feature = "clap", command(flatten))]
    pub device: Recipe,
    #[cfg_attr(feature = "clap", command(flatten))]
    pub workload: WorkloadOptions,
    /// Design parameter, `--param key=value` (repeatable).
    #[cfg_attr(feature = "clap", arg(long = "param", value_name = "KEY=VALUE"))]
    pub params: Vec<String>,
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 1))]
    pub seed: u64,
    /// Keep full page data instead of content tags (slower, more memory).
    #[cfg_attr(feature = "clap", arg(long))]
    pub full_data: bool,
    /// Skip the power cut + recovery measured after the run.
    #[cfg_attr(feature = "clap", arg(long))]
    pub no_recovery: bool,
    /// Also play the same request stream on the in-process peer (a bare page-mapped FTL,
    /// `lab::bench::peer`), once before and once after the design, and report the speed ratio.
    #[cfg_attr(feature = "clap", arg(long))]
    pub peer: bool,
}

/// Why a benchmark could not run.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error(transparent)]
    UnknownDesign(#[from] UnknownDesign),
    #[error(transparent)]
    Device(#[from] RecipeError),
    #[error(transparent)]
    Workload(#[from] WorkloadError),
    #[error(transparent)]
    Design(#[from] FtlError),
    #[error(transparent)]
    Peer(#[from] peer::PeerError),
}

/// Runs the benchmark `args` describe and returns the object `--json` prints; `progress(done,
/// total)` follows the measured requests.
pub fn measure(
    args: &BenchOptions,
    progress: &(dyn Fn(u64, u64) + Sync),
) -> Result<serde_json::Value, BenchError> {
    let design = crate::registry::find(&args.ftl)?;
    let config = args.device.resolve_for(&design)?;
    let spec = args.workload.resolve(design.default_workload)?;
    let options = DesignOptions::from_pairs(&args.params)?;
    let oob = (design.oob_record_bytes)(&config.geometry);
    let building = std::time::Instant::now();
    let flash = Flash::in_memory(config.clone(), oob, !args.full_data);
    let mut dev = design.build(flash, &options)?;
    // Construction writes the per-page arrays (flash::resident_vec), and the OOB records a
    // design keeps whole are faulted in once it is built (a squeezing design drops them): the
    // kernel's zeroing is reported here, not charged to the measured phase's first program of
    // each block (docs/performance.md, fourteenth round).
    dev.flash_mut().make_resident();
    let build_wall_s = building.elapsed().as_secs_f64();
    // The peer runs before and after the design so that drift in the machine's speed during
    // the run affects both sides of the ratio alike.
    let logical = dev.logical_pages();
    let peer = || {
        args.peer
            .then(|| peer::play(&config.geometry, logical, &spec, args.seed))
            .transpose()
    };
    let peer_before = peer()?;
    let total = spec.requests;
    let started = std::time::Instant::now();
    let result = crate::driver::run(dev.as_mut(), &spec, args.seed, 0, false, &mut |done, _| {
        progress(done, total)
    })?;
    let run_wall_s = started.elapsed().as_secs_f64();
    let peer_after = peer()?;
    let s = &result.stats;
    // Programs and wall time of the same span: the measured phase (GC included).
    let sim_per_s = s.flash.total_programs() as f64 / s.wall_s.max(1e-9);
    let metrics = dev.metrics();
    let mut memory = dev.memory();
    memory.push(("driver.expected_contents".into(), s.expected_contents_bytes));
    let (wear_min, wear_max, wear_mean) = dev.flash().wear_spread();
    let total_programs_all = dev.flash().stats().total_programs();
    let logical_pages = dev.logical_pages();
    let recovery = if args.no_recovery {
        None
    } else {
        let mut flash = dev.into_flash();
        return_freed_memory();
        flash.start_clock_at(result.end_ns);
        let (_dev, report) = design.reopen(flash, &options)?;
        Some(report)
    };
    let sim_s = s.sim_seconds().max(1e-12);
    let lat = |q: f64| s.latency_ns.value_at_quantile(q) as f64 / 1e3;
    let bytes = s.host_pages_written as f64 * config.geometry.page_bytes as f64;
    let mut out = serde_json::json!({
        "ftl": design.name,
        "preset": config.preset,
        "workload": spec.name,
        "seed": args.seed,
        "requests": s.requests,
        "warmup_requests": spec.warmup_requests,
        "logical_pages": logical_pages,
        "physical_pages": config.geometry.pages(),
        "exported_fraction": logical_pages as f64 / config.geometry.pages() as f64,
        "host_pages_written": s.host_pages_written,
        "host_pages_read": s.host_pages_read,
        "flash_programs": s.flash.total_programs(),
        "flash_reads": s.flash.total_reads(),
        "flash_erases": s.flash.total_erases(),
        "programs_by_cause": OpCause::ALL.iter().map(|c| (c.name(), s.flash.programs_for(*c))).filter(|(_, v)| *v > 0).collect::<std::collections::BTreeMap<_, _>>(),
        "write_amplification": s.write_amplification(),
        "latency_us": { "mean": s.latency_ns.mean() / 1e3, "p50": lat(0.5), "p99": lat(0.99), "max": s.latency_ns.max() as f64 / 1e3 },
        "iops": s.requests as f64 / sim_s,
        "bandwidth_mb_s": bytes / sim_s / 1e6,
        "tps": s.transactions_committed as f64 / sim_s,
        "sim_seconds": sim_s,
        "errors": s.errors,
        "read_mismatches": s.read_mismatches,
        "erase_count": { "min": wear_min, "max": wear_max, "mean": wear_mean },
        "wall_s": s.wall_s,
        "build_wall_s": build_wall_s,
        "sim_page_programs_per_s": sim_per_s,
        // The whole run, the sequential fill included.
        "run_wall_s": run_wall_s,
        "run_page_programs_per_s": total_programs_all as f64 / run_wall_s.max(1e-9),
        "peak_rss_bytes": peak_rss_bytes(),
        // Heap bytes per structure (allocated; zeroed arrays become resident on first touch).
        "memory_allocated_bytes": memory.iter().map(|(_, b)| b).sum::<u64>(),
        "memory": memory.into_iter().collect::<std::collections::BTreeMap<_, _>>(),
    });
    let obj = out.as_object_mut().expect("object");
    if let (Some(before), Some(after)) = (&peer_before, &peer_after) {
        add_peer_keys(obj, before, after, sim_per_s);
    }
    for (k, v) in metrics {
        obj.insert(k, serde_json::json!(v));
    }
    if let Some(r) = &recovery {
        add_recovery_keys(obj, r);
    }
    Ok(out)
}

/// `bench --peer`'s keys: the peer's rate over both of its plays, and the design's over it.
fn add_peer_keys(
    obj: &mut serde_json::Map<String, serde_json::Value>,
    before: &peer::PeerRun,
    after: &peer::PeerRun,
    sim_per_s: f64,
) {
    let programs = before.programs + after.programs;
    let peer_per_s = programs as f64 / (before.wall_s + after.wall_s).max(1e-9);
    let keys = [
        ("peer_page_programs_per_s", peer_per_s),
        ("peer_write_amplification", after.write_amplification()),
        ("speed_vs_peer", sim_per_s / peer_per_s.max(1e-9)),
    ];
    for (k, v) in keys {
        obj.insert(k.into(), serde_json::json!(v));
    }
}

/// The recovery after the run's power cut: reads, simulated time and the design's details.
fn add_recovery_keys(obj: &mut serde_json::Map<String, serde_json::Value>, r: &RecoveryReport) {
    obj.insert(
        "recovery_flash_reads".into(),
        serde_json::json!(r.flash_reads),
    );
    obj.insert(
        "recovery_sim_ms".into(),
        serde_json::json!(r.sim_ns as f64 / 1e6),
    );
    for (k, v) in &r.details {
        obj.insert(format!("recovery_{k}"), serde_json::json!(v));
    }
}

/// Hands the memory the power cut freed (the design's RAM state) back to the system before
/// recovery builds the new state. mimalloc returns freed pages after a delay, so without this
/// the old state's pages could still be resident while recovery allocates, and the peak would
/// count both (10–25 MB at 64 GB; docs/performance.md, "The peak after the power cut"). The
/// allocator's own bookkeeping only: what the run allocated and measured is unchanged. Also
/// `mobius serve`'s collect after each connection (`ServerConfig::release_memory`).
pub fn return_freed_memory() {
    // SAFETY: `mi_collect` takes no pointers and may be called at any time; under another
    // global allocator (the tests') it only tidies mimalloc's own empty heap.
    unsafe { libmimalloc_sys::mi_collect(true) }
}

/// The process's peak resident set (VmHWM in /proc/self/status), in bytes; `None` where the
/// kernel does not report it.
fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(ftl: &str) -> BenchOptions {
        BenchOptions {
            ftl: ftl.into(),
            device: Recipe::preset("small"),
            workload: WorkloadOptions {
                requests: Some(200),
                ..WorkloadOptions::default()
            },
            params: Vec::new(),
            seed: 1,
            full_data: false,
            no_recovery: false,
            peer: false,
        }
    }

    /// A run measures what it was asked to (the requests of the measured phase, the design's
    /// recovery), and what cannot run is a typed error.
    #[test]
    fn a_bench_runs_as_asked_or_says_why_not() {
        let out = measure(&options("dftl"), &|_, _| {}).unwrap();
        assert_eq!(out["requests"], 200);
        assert_eq!(out["read_mismatches"], 0);
        assert!(out["recovery_sim_ms"].as_f64().unwrap() > 0.0);
        let unknown = measure(&options("no-such-design"), &|_, _| {});
        assert!(matches!(unknown, Err(BenchError::UnknownDesign(_))));
        let mut bad = options("dftl");
        bad.workload.workload = Some("no-such-workload".into());
        let bad = measure(&bad, &|_, _| {});
        assert!(matches!(bad, Err(BenchError::Workload(_))));
        let mut txmix = options("mobius");
        txmix.workload.workload = Some("txmix".into());
        txmix.peer = true;
        let txmix = measure(&txmix, &|_, _| {});
        assert!(matches!(
            txmix,
            Err(BenchError::Peer(peer::PeerError::Transactions))
        ));
    }
}
