//! NVMFS vs ext4, btrfs and nilfs2 (and xfs where mkfs.xfs exists, at the paper scale) on the
//! same emulated SSD: SSD write traffic, flash erases, GC page copies, cleaning efficiency and
//! throughput in simulated SSD time (paper §IV). Needs root, /dev/fuse, nbdfuse and losetup for
//! the kernel file systems (their rows say why when skipped).
//!
//! cargo run --release -p mobius-compare --example nvmfs_vs_ext4 -- [--scale quick|paper]
//!     [--fs ext4,btrfs,...] [--workloads postmark,postmark-high,...] [--queue-depth N]
//!     [--json FILE]
//!
//! `--fs` picks the kernel file systems (default: `Options::standard`'s), `--workloads` the
//! workloads by their report names (default: all of them); `--queue-depth` the
//! requests the service-time clock keeps outstanding (default 32; docs/nvmfs.md "Throughput in
//! simulated SSD time").

use compare::nvmfs_exp::runs::{run, table, Options};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |k: &str| {
        args.iter()
            .position(|a| a == k)
            .and_then(|i| args.get(i + 1).cloned())
    };
    // A comma-separated option's names, empty ones dropped.
    let names = |k: &str| {
        arg(k).map(|list| -> Vec<String> {
            list.split(',')
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect()
        })
    };
    let paper = arg("--scale").as_deref() == Some("paper");
    let mut opts = Options::standard(paper, dftl::spec(), std::path::PathBuf::new());
    if let Some(kernel_fs) = names("--fs") {
        opts.kernel_fs = kernel_fs;
    }
    if let Some(wanted) = names("--workloads") {
        let known: Vec<String> = opts.workloads.iter().map(|w| w.name()).collect();
        if let Some(unknown) = wanted.iter().find(|w| !known.iter().any(|k| k == *w)) {
            eprintln!(
                "unknown workload {unknown:?}; the workloads are {}",
                known.join(", ")
            );
            std::process::exit(2);
        }
        opts.workloads.retain(|w| wanted.contains(&w.name()));
    }
    if let Some(depth) = arg("--queue-depth") {
        match depth.parse::<usize>() {
            Ok(d) if d > 0 => opts.service_queue_depth = Some(d),
            _ => {
                eprintln!("--queue-depth wants a positive number of requests, not {depth:?}");
                std::process::exit(2);
            }
        }
    }
    let work = tempfile::tempdir().expect("scratch directory");
    opts.work_dir = work.path().to_path_buf();
    let e = run(&opts);
    print!("{}", table(&e));
    if let Some(path) = arg("--json") {
        std::fs::write(&path, serde_json::to_string_pretty(&e).expect("json")).expect("write json");
    }
}
