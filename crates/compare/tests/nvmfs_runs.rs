//! The NVMFS experiment's runs (`compare::nvmfs_exp::runs`): NVMFS in-process beside the kernel
//! file systems over NBD on the same small SSD, skipped file systems, and the run log.

use flash::{DeviceConfig, Geometry};

/// The `small` preset with `blocks` blocks per chip.
fn config(blocks: u32) -> DeviceConfig {
    let mut c = DeviceConfig::preset("small").unwrap();
    c.geometry = Geometry {
        blocks_per_chip: blocks,
        ..c.geometry
    };
    c
}

/// The paper's measurement on a small SSD: NVMFS only ever writes whole, block-aligned 512 KB
/// extents, so the FTL's garbage collection never copies a page for it; its own cleaning
/// reports 1 − moved / recycled. ext4 (over NBD, when root and the tools are here) runs the
/// same workload on the same SSD.
#[test]
fn experiment_nvmfs_vs_kernel_fs() {
    use compare::nvmfs_exp::runs::{run, table, Workload};
    let work = tempfile::tempdir().unwrap();
    let workloads = vec![
        Workload::Iozone {
            utilisation: 0.6,
            overwrites: 6_000,
        },
        Workload::Postmark {
            pool: 600,
            transactions: 1_500,
        },
        // the real programs, NVMFS through FUSE
        Workload::PostmarkBinary {
            pool: 300,
            transactions: 600,
        },
        Workload::FioIozone {
            utilisation: 0.5,
            overwrites: 2_000,
        },
        Workload::FioFiles {
            files: 200,
            file_kb: 32,
            overwrites: 2_000,
        },
        Workload::FioFileserver {
            files: 60,
            passes: 2,
        },
        // Fig. 9: a benchmark on a file system a ballast brought to 88 %
        Workload::filled(
            0.88,
            Workload::Postmark {
                pool: 600,
                transactions: 1_500,
            },
        ),
    ];
    let opts = experiment_options(&work, workloads, "ext4");
    let e = run(&opts);
    eprintln!("{}", table(&e));
    let json = serde_json::to_string(&e).unwrap();
    assert!(json.contains("\"fs\":\"nvmfs\""));
    for r in e.runs.iter().filter(|r| r.fs == "nvmfs") {
        if let Some(why) = r.skipped.as_deref().filter(|_| r.workload.contains('-')) {
            // a program run needs /dev/fuse, root and the program (.ci/run installs them)
            let missing = why.contains("not installed") || why.contains("fuse");
            assert!(missing && r.workload != "iozone-randwrite", "{r:?}");
            eprintln!("{} skipped: {why}", r.workload);
            continue;
        }
        assert!(r.skipped.is_none(), "{r:?}");
        assert!(r.app_bytes_written > 0, "{r:?}");
        assert!(r.ssd_pages_written > 0, "{r:?}");
        assert!(
            r.flash_erases > 0 || r.workload.contains("postmark"),
            "{r:?}"
        );
        if !r.workload.ends_with("-high") {
            assert_eq!(
                r.gc_page_copies, 0,
                "whole extents never need GC copies while the SSD has room: {r:?}"
            );
        }
        let eff = r.fs_cleaning_efficiency.unwrap();
        assert!((0.0..=1.0).contains(&eff), "{r:?}");
        // the same requests on FAST: whole aligned extents are switch merges, never copies
        let fast = r.erase_study.as_ref().expect("FAST replayed the run");
        assert_eq!(fast.error, None);
        assert!(fast.flash_programs >= r.ssd_pages_written, "{fast:?}");
        assert_eq!(fast.page_copies, 0, "{fast:?}");
        assert_timed(r);
    }
    let iozone = |fs: &str| {
        e.runs
            .iter()
            .find(|r| r.fs == fs && r.workload == "iozone-randwrite")
            .unwrap()
    };
    assert!(iozone("nvmfs").fs_cleaning_rounds.unwrap() > 0);
    assert_filled(&e, "nvmfs");
    if e.runs.iter().any(|r| r.fs == "ext4" && r.skipped.is_none()) {
        assert_filled(&e, "ext4");
    }
    let ext4 = iozone("ext4");
    match &ext4.skipped {
        Some(why) => eprintln!("ext4 skipped: {why}"),
        None => {
            assert!(
                ext4.gc_page_copies > iozone("nvmfs").gc_page_copies,
                "random 4 KB overwrites under ext4 leave the FTL pages to copy"
            );
            assert!(
                ext4.page_cache_limit_hits.unwrap() > 0,
                "a 12 MiB file through a 4 MiB DRAM budget must hit it: {ext4:?}"
            );
            let fast = ext4.erase_study.as_ref().unwrap();
            assert!(
                fast.page_copies > ext4.gc_page_copies,
                "FAST full merges: {fast:?}"
            );
            assert_timed(ext4);
        }
    }
}

/// A file system the experiment cannot run is reported as skipped, with the typed reason's text
/// (here a mkfs that does not exist), not as a failure of the whole experiment.
#[test]
fn a_kernel_fs_that_cannot_run_is_skipped_with_its_reason() {
    use compare::nvmfs_exp::runs::{run, Workload};
    let work = tempfile::tempdir().unwrap();
    let workloads = vec![Workload::Iozone {
        utilisation: 0.05,
        overwrites: 10,
    }];
    let opts = experiment_options(&work, workloads, "nosuchfs");
    let e = run(&opts);
    let skipped = e.runs.iter().find(|r| r.fs == "nosuchfs").unwrap();
    let why = skipped.skipped.as_deref().unwrap();
    // On a machine without the NBD client the run stops one step earlier, with that reason.
    assert!(
        why.contains("mkfs.nosuchfs is not installed")
            || why.contains("needs root")
            || why.contains("nbdfuse is not installed"),
        "{why}"
    );
    let nvmfs = e.runs.iter().find(|r| r.fs == "nvmfs").unwrap();
    assert_eq!(nvmfs.skipped, None);
}

/// A resumed experiment takes a finished run from its run log instead of measuring it again
/// (the log's figure, altered here, comes back), retries a skipped run, and says so; without
/// `resume` it measures afresh.
#[test]
fn a_resumed_experiment_takes_finished_runs_from_its_log() {
    use compare::nvmfs_exp::runs::{run, Workload};
    let work = tempfile::tempdir().unwrap();
    let workloads = vec![Workload::Iozone {
        utilisation: 0.05,
        overwrites: 10,
    }];
    let mut opts = experiment_options(&work, workloads, "nosuchfs");
    let log = work.path().join("runs.jsonl");
    opts.run_log = Some((log.clone(), false));
    let first = run(&opts);
    let measured = first.runs.iter().find(|r| r.fs == "nvmfs").unwrap();
    assert!(measured.app_bytes_written > 0);
    let text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(
        text.lines().count(),
        1,
        "the skipped run is not logged: {text}"
    );
    let altered = text.replace(
        &format!("\"app_bytes_written\":{}", measured.app_bytes_written),
        "\"app_bytes_written\":424242",
    );
    assert_ne!(altered, text);
    std::fs::write(&log, altered).unwrap();

    opts.run_log = Some((log.clone(), true));
    let resumed = run(&opts);
    let nvmfs = resumed.runs.iter().find(|r| r.fs == "nvmfs").unwrap();
    assert_eq!(nvmfs.app_bytes_written, 424242);
    let retried = resumed.runs.iter().find(|r| r.fs == "nosuchfs").unwrap();
    assert!(retried.skipped.is_some());
    let summary = resumed.run_log.as_deref().unwrap();
    assert!(summary.contains("1 taken from it"), "{summary}");

    opts.run_log = Some((log, false));
    let again = run(&opts);
    let nvmfs = again.runs.iter().find(|r| r.fs == "nvmfs").unwrap();
    assert_eq!(nvmfs.app_bytes_written, measured.app_bytes_written);
}

/// Runs as parallel tasks (two cores) are the serial runs, in the same order, with the run log
/// written by both; progress counts every measured run and nothing left to the paper scale,
/// which is listed with its reason and not run.
#[test]
fn runs_as_parallel_tasks_are_the_serial_runs_and_paper_scale_ones_are_listed() {
    use compare::nvmfs_exp::runs::{run, run_on, Workload, PAPER_ONLY};
    let work = tempfile::tempdir().unwrap();
    let workloads = vec![
        Workload::Iozone {
            utilisation: 0.05,
            overwrites: 10,
        },
        Workload::Iozone {
            utilisation: 0.2,
            overwrites: 200,
        },
        Workload::Postmark {
            pool: 30,
            transactions: 60,
        },
    ];
    let mut opts = experiment_options(&work, workloads, "nosuchfs");
    opts.paper_only = vec![("nilfs2".into(), "too slow here".into())];
    opts.run_log = Some((work.path().join("serial.jsonl"), false));
    let serial = run(&opts);
    opts.run_log = Some((work.path().join("parallel.jsonl"), false));
    let seen = std::sync::Mutex::new(Vec::new());
    let parallel = run_on(&opts, &compare::Cores::new(2), &|done, total| {
        seen.lock().unwrap().push((done, total))
    });
    let json = |e: &compare::nvmfs_exp::runs::Experiment| serde_json::to_string(&e.runs).unwrap();
    assert_eq!(json(&serial), json(&parallel));
    let order: Vec<(&str, &str)> = parallel
        .runs
        .iter()
        .map(|r| (r.fs.as_str(), r.workload.as_str()))
        .collect();
    assert_eq!(
        order,
        [
            ("nvmfs", "iozone-randwrite"),
            ("nosuchfs", "iozone-randwrite"),
            ("nilfs2", "iozone-randwrite"),
            ("nvmfs", "iozone-randwrite"),
            ("nosuchfs", "iozone-randwrite"),
            ("nilfs2", "iozone-randwrite"),
            ("nvmfs", "postmark"),
            ("nosuchfs", "postmark"),
            ("nilfs2", "postmark"),
        ]
    );
    let nilfs2 = parallel.runs.iter().filter(|r| r.fs == "nilfs2");
    for r in nilfs2 {
        assert_eq!(
            r.skipped.as_deref(),
            Some(format!("{PAPER_ONLY}too slow here").as_str())
        );
    }
    let mut seen = seen.into_inner().unwrap();
    seen.sort();
    assert_eq!(seen, (1..=6).map(|d| (d, 6)).collect::<Vec<_>>());
    for log in ["serial.jsonl", "parallel.jsonl"] {
        let text = std::fs::read_to_string(work.path().join(log)).unwrap();
        assert_eq!(text.lines().count(), 3, "NVMFS's three runs: {text}");
    }
    // A file system left to the paper scale but asked for all the same (`nvmfs_vs_ext4 --fs`)
    // is run (here: skipped for its missing mkfs), and not listed.
    opts.paper_only = vec![("nosuchfs".into(), "too slow here".into())];
    opts.workloads.truncate(1);
    opts.run_log = None;
    let asked = run(&opts);
    let runs: Vec<_> = asked.runs.iter().filter(|r| r.fs == "nosuchfs").collect();
    assert_eq!(runs.len(), 1);
    let why = runs[0].skipped.as_deref().unwrap_or_default();
    assert!(!why.starts_with(PAPER_ONLY), "{why}");
}

/// The experiment on a 64-block-per-chip SSD with 4 MiB of NVRAM, NVMFS beside `kernel_fs`.
fn experiment_options(
    work: &tempfile::TempDir,
    workloads: Vec<compare::nvmfs_exp::runs::Workload>,
    kernel_fs: &str,
) -> compare::nvmfs_exp::runs::Options {
    compare::nvmfs_exp::runs::Options {
        config: config(64),
        design: dftl::spec(),
        nvram_bytes: 4 << 20,
        seed: 7,
        workloads,
        kernel_fs: vec![kernel_fs.into()],
        work_dir: work.path().to_path_buf(),
        page_cache_budget: Some(4 << 20),
        erase_study: Some(fast::spec()),
        service_queue_depth: Some(compare::nvmfs_exp::runs::SERVICE_QUEUE_DEPTH),
        run_log: None,
        paper_only: Vec::new(),
    }
}

/// `fs` ran the filled Postmark above 85 % with a ballast, and its counts cover the workload
/// alone: the ballast's pages are not in them (NVMFS's own counters start after it too).
fn assert_filled(e: &compare::nvmfs_exp::runs::Experiment, fs: &str) {
    let find = |w: &str| {
        let r = e.runs.iter().find(|r| r.fs == fs && r.workload == w);
        r.unwrap_or_else(|| panic!("{fs} ran no {w}"))
    };
    let (high, plain) = (find("postmark-high"), find("postmark"));
    assert!(high.skipped.is_none() && high.stopped.is_none(), "{high:?}");
    let u = high.utilisation.unwrap();
    assert!((0.85..=0.89).contains(&u), "{u}: {high:?}");
    assert!(plain.utilisation.unwrap() < 0.5, "{plain:?}");
    let ballast = high.ballast_bytes.unwrap();
    assert!(ballast > high.fs_bytes.unwrap() / 4, "{high:?}");
    assert!(
        high.ssd_pages_written * 4096 < plain.ssd_pages_written * 4096 + ballast / 2,
        "the ballast's pages are not the workload's: {high:?}"
    );
    assert!(high.ssd_pages_written <= high.flash_programs, "{high:?}");
    assert_eq!(high.app_bytes_written, plain.app_bytes_written);
}

/// The service-time clock was given the pages the run's SSD was, and did the same work with
/// them: the same design on the same requests in the same order, up to where its allocator put
/// pages (the chip free soonest: placement follows timing, so its GC may differ slightly).
fn assert_timed(r: &compare::nvmfs_exp::runs::FsRun) {
    let clock = r.ssd_service.as_ref().expect("the clock timed the run");
    assert_eq!(clock.error, None, "{r:?}");
    assert!(clock.requests > 0 && clock.service_ns.unwrap() > 0, "{r:?}");
    assert_eq!(clock.pages_written, r.ssd_pages_written, "{r:?}");
    let programs = clock.flash_programs as f64 / r.flash_programs as f64;
    assert!((programs - 1.0).abs() < 0.03, "{programs}: {r:?}");
}
