//! The paper's measurements (§IV): SSD write traffic, flash erases, GC page copies
//! and cleaning efficiency of NVMFS against ext4 (and xfs where `mkfs.xfs` exists), on the same
//! emulated SSD (same geometry, same FTL, fresh image per run) under the same seeded workloads.
//!
//! NVMFS runs in-process on the library (the FUSE layer adds no SSD traffic: every FUSE request
//! is one library call). ext4/xfs run in the kernel on the emulated SSD exported over NBD from
//! this process: NBD server thread → `nbdfuse` → `losetup --direct-io=on` → `mkfs` → `mount`;
//! the workload goes through `std::fs` on the mount. That needs root, /dev/fuse, nbdfuse and
//! losetup; without them the ext4/xfs rows carry the reason they were skipped.
//!
//! Counters are taken after the file system is made and mounted and before the workload, and
//! again after it is unmounted (everything written back): `ssd_pages_written` is what the file
//! system sent to the SSD, the flash counters are the FTL's (programs by cause, erases).

use super::shadow::{Arrivals, MeterHandle, Shadow, ShadowHandle, ShadowMark, ShadowRun, Shadowed};
use flash::{DeviceConfig, FlashStats, OpCause};
use ftl::{DesignOptions, DesignSpec};
use lab::kernel_stack::budget;
use lab::kernel_stack::dirty_limit::dirty_limit_bytes;
use lab::kernel_stack::{
    fs_host, nilfs_blocks_per_segment, sh, tool_missing, Export, FsHost, KernelStack,
    KernelStackError, Timeouts,
};
use lab::run_log::RunLog;
use nvmfs::fs::{Nvmfs, NvmfsParams};
use nvmfs::ssd::create_ssd;
use nvmfs::NvmfsError;
use rand::{Rng, RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

/// Why one file system's run could not be measured: the report shows it as "skipped" with this
/// text.
#[derive(Debug, thiserror::Error)]
pub enum ExperimentError {
    /// A file operation of the workload failed on NVMFS.
    #[error("{path}: {source}")]
    Nvmfs { path: String, source: NvmfsError },
    /// Building, mounting or unmounting NVMFS failed.
    #[error("{0}")]
    Fs(#[from] NvmfsError),
    /// A file operation of the workload failed on a kernel file system.
    #[error("{path}: {source}")]
    File {
        path: String,
        source: std::io::Error,
    },
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// The kernel file system's stack (NBD export, loop device, mkfs, mount) failed, or what
    /// it needs is not on this machine.
    #[error("{0}")]
    Kernel(#[from] KernelStackError),
    /// The SSD is too small for the file system.
    #[error("{0}")]
    Unavailable(String),
    /// The kernel file system's DRAM budget (a memory cgroup) could not be set up or its
    /// workload process died.
    #[error("{0}")]
    Budget(#[from] budget::BudgetError),
    /// The workload, run in its budgeted process, failed.
    #[error("{0}")]
    Workload(String),
    /// Mounting NVMFS through FUSE for a benchmark program failed.
    #[error("{0}")]
    Fuse(#[from] nvmfs::fuse::ServeError),
    /// A benchmark program is missing or failed.
    #[error("{program}: {why}")]
    Program { program: &'static str, why: String },
    /// A read returned other bytes than the workload wrote.
    #[error("postmark: {0} differs from what was written")]
    Mismatch(String),
}

pub type Result<T, E = ExperimentError> = std::result::Result<T, E>;

/// A seeded workload of the paper's evaluation (4 KB requests).
#[derive(Clone, Debug, Serialize)]
pub enum Workload {
    /// IOzone's random-write case: one file written sequentially until the file system is
    /// `utilisation` full (its own capacity and free space as `df` reports them: NVMFS's SSD
    /// blocks, `statvfs` for a kernel file system), then `overwrites` random 4 KB overwrites,
    /// fsync every 256 writes. Medium utilisation is 50–70 % in the paper (§IV-D), high over
    /// 85 %.
    Iozone { utilisation: f64, overwrites: u32 },
    /// Postmark: `pool` files of 512 B - 16 KB in 5 directories, then `transactions`, each a
    /// read (verified) or an append, and a create or a delete.
    Postmark { pool: u32, transactions: u32 },
    /// The real `postmark` program (Debian's, Katcher 1997) on the mounted file system — NVMFS
    /// through FUSE — with the same pool, transactions and file sizes, 4 KB reads and writes,
    /// unbuffered, seeded; it deletes every file at the end.
    PostmarkBinary { pool: u32, transactions: u32 },
    /// IOzone's random-write case as an fio job (IOzone is not a Debian package): a sequential
    /// 64 KB fill of one file to `utilisation`, then `overwrites` random 4 KB writes with an
    /// fsync every 256, psync engine, no preallocation, fixed random seed ([`fio_iozone_job`]).
    FioIozone { utilisation: f64, overwrites: u32 },
    /// The paper's FIO workload, "random updates over thousands of files": fio lays out `files`
    /// files of `file_kb` KB, then `overwrites` random 4 KB writes spread over them, an fsync
    /// every 256 ([`fio_files_job`]).
    FioFiles {
        files: u32,
        file_kb: u32,
        overwrites: u32,
    },
    /// Filebench's file-server personality as fio can express it (Filebench is not a Debian
    /// package): `files` files of 16–256 KB created and written whole, read and written at
    /// random (half each, 4 KB) until `passes` times their size has moved, then deleted
    /// ([`fio_fileserver_job`]). Filebench creates, appends to and deletes single files all
    /// along; fio lays out every file before its job starts and deletes them when it ends, so
    /// this is one round of the personality. fio's report counts the random phase's bytes, not
    /// the files' creation.
    FioFileserver { files: u32, passes: u32 },
    /// `workload` on a file system first brought to `utilisation` of its capacity (as `df`
    /// counts it) with the workload's own file set counted ([`Workload::file_set_bytes`]): a
    /// ballast file of whole 64 KB chunks is written, synced (NVMFS: flushed from NVRAM to the
    /// SSD) and left alone before the measured phase begins. The paper runs every benchmark
    /// "over 85 %" for Fig. 9 (§IV-D); IOzone brings its own file instead.
    Filled {
        utilisation: f64,
        workload: Box<Workload>,
    },
}

impl Workload {
    /// `workload` on a file system a ballast brings to `utilisation` ([`Workload::Filled`]).
    /// IOzone's workloads fill the file system themselves, so they are not wrapped.
    pub fn filled(utilisation: f64, workload: Workload) -> Workload {
        assert!(
            workload.file_set_bytes().is_some(),
            "{} brings its own utilisation",
            workload.name()
        );
        Workload::Filled {
            utilisation,
            workload: Box::new(workload),
        }
    }

    /// The benchmark itself, without a ballast.
    pub fn benchmark(&self) -> &Workload {
        match self {
            Workload::Filled { workload, .. } => workload.benchmark(),
            w => w,
        }
    }

    /// The size of the files the benchmark keeps, expected at its largest, in whole 4 KB
    /// blocks; `None` for IOzone's workloads (their file is sized to a utilisation). Postmark:
    /// its pool at 8,448 B a file (512 B – 16 KB, uniform) plus half a block of rounding, 10.5
    /// KiB (its transactions create and delete alike, and append 2 KB on average to a quarter
    /// of them); fio: its files' sizes (the file server's 16–256 KB average 136 KB).
    pub fn file_set_bytes(&self) -> Option<u64> {
        match *self.benchmark() {
            Workload::Postmark { pool, transactions }
            | Workload::PostmarkBinary { pool, transactions } => {
                Some(pool as u64 * (10 << 10) + pool as u64 * 512 + transactions as u64 / 4 * 2048)
            }
            Workload::FioFiles { files, file_kb, .. } => Some(files as u64 * file_kb as u64 * 1024),
            Workload::FioFileserver { files, .. } => Some(files as u64 * 136 * 1024),
            Workload::Iozone { .. } | Workload::FioIozone { .. } | Workload::Filled { .. } => None,
        }
    }

    /// The ballast that brings a file system of `size` bytes, `used` of them in use, to the
    /// workload's utilisation with its file set counted (whole 64 KB chunks); `None` when the
    /// workload has no ballast.
    pub fn ballast_bytes(&self, size: u64, used: u64) -> Option<u64> {
        match self {
            Workload::Filled { utilisation, .. } => {
                let files = self.file_set_bytes().unwrap_or(0);
                Some(iozone_file_bytes(*utilisation, size, used + files))
            }
            _ => None,
        }
    }

    /// Whether the workload is a benchmark program run on the mounted file system (NVMFS
    /// through FUSE) rather than our driver through the file API.
    pub fn is_program(&self) -> bool {
        self.is_fio() || matches!(self.benchmark(), Workload::PostmarkBinary { .. })
    }

    /// Whether the workload is a second implementation of a benchmark already in the standard
    /// list (real `postmark` beside our Postmark driver, fio's IOzone job beside our IOzone
    /// driver). nilfs2 in its appliance (~1 MB/s) runs only the first of each, the paper's four
    /// benchmarks at both utilisations (§IV-A).
    pub fn repeats_a_benchmark(&self) -> bool {
        matches!(
            self.benchmark(),
            Workload::PostmarkBinary { .. } | Workload::FioIozone { .. }
        )
    }

    /// Whether the workload is an fio job.
    pub fn is_fio(&self) -> bool {
        matches!(
            self.benchmark(),
            Workload::FioIozone { .. } | Workload::FioFiles { .. } | Workload::FioFileserver { .. }
        )
    }

    /// Memory the workload's own process needs besides the file system's cache, added to the
    /// DRAM budget's cgroup limit: fio keeps its shared pool and job state for the whole run
    /// (10.2 MB peak for fio 3.33 on a 1 MiB job in a cgroup of its own, 2026-11-26; 8 MiB
    /// killed it before it wrote a byte), so 12 MiB; our driver and postmark need < 1 MiB.
    pub fn own_memory_allowance(&self) -> u64 {
        if self.is_fio() {
            12 << 20
        } else {
            0
        }
    }
}

impl Workload {
    /// The workload's name in reports: a benchmark filled above 85 % ends in `-high`, the
    /// paper's "over 85 %" (§IV-D), below that in `-filled` and its percentage.
    pub fn name(&self) -> String {
        let name = match self {
            Workload::Iozone { utilisation, .. } if *utilisation > HIGH_THRESHOLD => {
                "iozone-randwrite-high"
            }
            Workload::Iozone { .. } => "iozone-randwrite",
            Workload::Postmark { .. } => "postmark",
            Workload::PostmarkBinary { .. } => "postmark-binary",
            Workload::FioIozone { .. } => "fio-iozone",
            Workload::FioFiles { .. } => "fio-files",
            Workload::FioFileserver { .. } => "fio-fileserver",
            Workload::Filled {
                utilisation,
                workload,
            } => {
                return match *utilisation > HIGH_THRESHOLD {
                    true => format!("{}-high", workload.name()),
                    false => format!("{}-filled{:.0}", workload.name(), utilisation * 100.0),
                }
            }
        };
        name.to_string()
    }
}

/// What one file system did to the SSD under one workload.
#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct FsRun {
    pub fs: String,
    pub workload: String,
    /// Why this run did not happen (missing tool, not root, ...).
    pub skipped: Option<String>,
    /// The file system refused the workload part-way (out of space): the counters cover what
    /// it did up to then and the unmount.
    pub stopped: Option<String>,
    /// Bytes the workload wrote through the file system API.
    pub app_bytes_written: u64,
    /// 4 KB pages the file system wrote to the SSD.
    pub ssd_pages_written: u64,
    /// Flash page programs of all causes (host data, GC copies, mapping pages, ...).
    pub flash_programs: u64,
    /// Valid pages copied by the FTL's garbage collection.
    pub gc_page_copies: u64,
    pub flash_erases: u64,
    /// The FTL's cleaning efficiency: 1 − GC copies / pages of erased blocks.
    pub ftl_cleaning_efficiency: f64,
    /// NVMFS and nilfs2: the file system's own segment cleaning (§IV-D, Figs. 10–11), 1 − moved
    /// valid blocks / recycled blocks (1 when nothing was recycled).
    pub fs_cleaning_efficiency: Option<f64>,
    /// NVMFS: its cleaning rounds; nilfs2: the logs its cleaner wrote.
    pub fs_cleaning_rounds: Option<u64>,
    /// Blocks (4 KB) the file system's cleaner recycled and the valid ones it moved.
    pub fs_recycled_blocks: Option<u64>,
    pub fs_moved_blocks: Option<u64>,
    /// The same requests replayed on the erase study's second FTL (FAST), if one was given.
    pub erase_study: Option<ShadowRun>,
    /// The same requests, reads included, timed on the run's design as a closed-loop host issues
    /// them ([`Options::service_queue_depth`]): the SSD's service time (Figs. 8–9).
    pub ssd_service: Option<ShadowRun>,
    /// Kernel file systems under a DRAM budget: how often their cache hit the limit.
    pub page_cache_limit_hits: Option<u64>,
    /// Kernel file systems under a DRAM budget: the dirty pages their backing device may hold,
    /// as the kernel held the limit (20 % of the budget, `lab::kernel_stack::dirty_limit`).
    pub dirty_limit_bytes: Option<u64>,
    /// The file system's capacity as `df` counts it (used + available) when the workload began.
    pub fs_bytes: Option<u64>,
    /// IOzone: the size of its file (the utilisation it was asked for, of `fs_bytes`).
    pub iozone_file_bytes: Option<u64>,
    /// A filled workload: the ballast written before it began ([`Workload::Filled`]).
    pub ballast_bytes: Option<u64>,
    /// The file system's utilisation while the workload ran: bytes in use when it began (the
    /// ballast included) plus IOzone's file or the benchmark's file set (expected size,
    /// [`Workload::file_set_bytes`]), over `fs_bytes`.
    pub utilisation: Option<f64>,
}

impl FsRun {
    /// A run of `fs` under the workload named `workload` with nothing counted yet.
    pub fn blank(fs: &str, workload: &str) -> FsRun {
        FsRun {
            fs: fs.to_string(),
            workload: workload.to_string(),
            skipped: None,
            stopped: None,
            app_bytes_written: 0,
            ssd_pages_written: 0,
            flash_programs: 0,
            gc_page_copies: 0,
            flash_erases: 0,
            ftl_cleaning_efficiency: 1.0,
            fs_cleaning_efficiency: None,
            fs_cleaning_rounds: None,
            fs_recycled_blocks: None,
            fs_moved_blocks: None,
            erase_study: None,
            ssd_service: None,
            page_cache_limit_hits: None,
            dirty_limit_bytes: None,
            fs_bytes: None,
            iozone_file_bytes: None,
            ballast_bytes: None,
            utilisation: None,
        }
    }

    /// The SSD's service time for this run's requests in simulated seconds, if the clock timed
    /// them ([`Options::service_queue_depth`]).
    pub fn service_seconds(&self) -> Option<f64> {
        let clock = self.ssd_service.as_ref().filter(|c| c.error.is_none())?;
        Some(clock.service_ns? as f64 / 1e9)
    }

    /// NVMFS §IV-D, Figs. 8–9, device-bound: app MiB written per second of the SSD's service
    /// time.
    pub fn throughput_mib_s(&self) -> Option<f64> {
        let t = self.service_seconds().filter(|t| *t > 0.0)?;
        Some(self.app_bytes_written as f64 / (1 << 20) as f64 / t)
    }
}

/// The whole experiment.
#[derive(Clone, Debug, Serialize)]
pub struct Experiment {
    pub design: String,
    pub ssd_bytes: u64,
    pub nvram_bytes: u64,
    pub seed: u64,
    pub workloads: Vec<Workload>,
    pub runs: Vec<FsRun>,
    /// Where the runs were logged and how many were taken from the log ([`lab::run_log`]).
    pub run_log: Option<String>,
}

/// Experiment settings.
#[derive(Clone)]
pub struct Options {
    pub config: DeviceConfig,
    pub design: DesignSpec,
    pub nvram_bytes: u64,
    pub seed: u64,
    pub workloads: Vec<Workload>,
    /// Kernel file systems to compare with (`ext4`, `btrfs`, `xfs`).
    pub kernel_fs: Vec<String>,
    /// Scratch directory for images and mount points.
    pub work_dir: PathBuf,
    /// DRAM a kernel file system may cache in (its workload runs in a memory cgroup of this
    /// size, budget); `None`: the whole page cache. `standard` gives it the NVRAM's size.
    pub page_cache_budget: Option<u64>,
    /// A second FTL every run's SSD requests are replayed on (the erase study's FAST, NVMFS
    /// §IV-C): same geometry, same exported capacity ([`super::shadow`]).
    pub erase_study: Option<DesignSpec>,
    /// Requests outstanding on the service-time clock, which replays every run's requests on
    /// its design to time them the same way whatever path produced them ([`super::shadow`],
    /// Figs. 8–9); `None`: no clock. `standard` gives 32, SATA NCQ's depth (the paper's X25-E).
    pub service_queue_depth: Option<usize>,
    /// A JSON-lines log of finished runs and whether to resume from it ([`lab::run_log`]);
    /// `None`: no log.
    pub run_log: Option<(PathBuf, bool)>,
    /// File systems this scale leaves to the paper scale, each with why: their runs are listed
    /// (skipped, [`PAPER_ONLY`] and the reason), not measured.
    pub paper_only: Vec<(String, String)>,
}

/// How a run left to the paper scale says so in [`FsRun::skipped`], before its reason.
pub const PAPER_ONLY: &str = "at `--scale paper` only: ";

impl Options {
    /// The settings `nvmfs_vs_ext4` and `mobius compare` use: the `nvmfs` preset (the paper's
    /// 4 KB pages, 256 KB blocks, SLC timing; 16 chips) cut to fewer blocks per chip. Quick: 32
    /// blocks per chip, a 128 MiB SSD, 8 MiB NVRAM and DRAM budget. Paper: 128 blocks per chip,
    /// 512 MiB (xfs needs more than 300 MiB), 32 MiB. IOzone at 60 % and 88 % of each file
    /// system's capacity, 256 random 4 KB overwrites per MiB of SSD; Postmark (ours and the real
    /// program): 20 files and 60 transactions per MiB. ext4 and btrfs (mixed block groups)
    /// always, nilfs2 and f2fs where the kernel has them, each skipped with the reason where the
    /// machine lacks a tool; xfs at the paper scale only (`mkfs.xfs` refuses a file system of
    /// 300 MiB or less), where `mkfs.xfs` is installed.
    pub fn standard(paper: bool, design: DesignSpec, work_dir: PathBuf) -> Options {
        let mut config = DeviceConfig::preset("nvmfs").expect("the nvmfs preset exists");
        config.geometry.blocks_per_chip = if paper { 128 } else { 32 };
        let mib = config.geometry.capacity_bytes() >> 20;
        // btrfs (copy-on-write, so it never overwrites in place) is the log-structured side
        // this machine's kernel offers: it has neither nilfs2 nor f2fs.
        let mut kernel_fs = vec!["ext4".to_string(), "btrfs".to_string()];
        if paper && !tool_missing("mkfs.xfs") {
            kernel_fs.push("xfs".into());
        }
        // The log-structured file system the paper compares with (§IV-D): nilfs2, in this
        // kernel or else in a libguestfs appliance (`lab::kernel_stack::Appliance`; a machine
        // without either shows the row as skipped, naming the packages). f2fs where this kernel
        // has it: the appliance mounts f2fs too (`mkfs.f2fs` runs on this machine), but the
        // paper compares with nilfs2 only and each appliance file system adds ~15 min here.
        // The quick scale leaves nilfs2 in an appliance, and xfs, to the paper scale.
        let mut paper_only = Vec::new();
        if paper || lab::kernel_stack::kernel_has("nilfs2") {
            kernel_fs.push("nilfs2".into());
        } else {
            paper_only.push(("nilfs2".to_string(), NILFS2_IN_AN_APPLIANCE.to_string()));
        }
        if !paper {
            paper_only.push(("xfs".to_string(), XFS_NEEDS_MORE.to_string()));
        }
        if lab::kernel_stack::kernel_has("f2fs") {
            kernel_fs.push("f2fs".into());
        }
        Options {
            config,
            design,
            nvram_bytes: if paper { 32 << 20 } else { 8 << 20 },
            seed: 2013,
            workloads: vec![
                Workload::Iozone {
                    utilisation: 0.60,
                    overwrites: mib as u32 * 256,
                },
                Workload::Iozone {
                    utilisation: HIGH_UTILISATION,
                    overwrites: mib as u32 * 256,
                },
                Workload::Postmark {
                    pool: mib as u32 * 20,
                    transactions: mib as u32 * 60,
                },
                Workload::PostmarkBinary {
                    pool: mib as u32 * 20,
                    transactions: mib as u32 * 60,
                },
                Workload::FioIozone {
                    utilisation: 0.60,
                    overwrites: mib as u32 * 256,
                },
                Workload::FioFiles {
                    files: mib as u32 * 8,
                    file_kb: 32,
                    overwrites: mib as u32 * 256,
                },
                Workload::FioFileserver {
                    files: mib as u32 * 2,
                    passes: 4,
                },
            ]
            .into_iter()
            .flat_map(
                |w| match w.file_set_bytes().is_some() && !w.repeats_a_benchmark() {
                    // Fig. 9: the paper's four benchmarks above 85 % too (IOzone at 88 % above)
                    true => vec![w.clone(), Workload::filled(HIGH_UTILISATION, w)],
                    false => vec![w],
                },
            )
            .collect(),
            kernel_fs,
            work_dir,
            page_cache_budget: Some(if paper { 32 << 20 } else { 8 << 20 }),
            erase_study: None,
            service_queue_depth: Some(SERVICE_QUEUE_DEPTH),
            run_log: None,
            paper_only,
        }
    }
}

/// Why the quick scale leaves nilfs2 to the paper scale where this kernel has none: in an
/// emulated appliance its runs took ~45 of the quick scale's 58–77 min (docs/nvmfs.md).
pub const NILFS2_IN_AN_APPLIANCE: &str = "this kernel has no nilfs2, and in its emulated (TCG) \
     libguestfs appliance, at ~1 MB/s, its eight runs take ~45 min";

/// Why the quick scale leaves xfs to the paper scale.
pub const XFS_NEEDS_MORE: &str = "mkfs.xfs refuses a file system of 300 MiB or less";

/// The paper's high utilisation, "over 85 %" (§IV-D): the runs of Fig. 9.
pub const HIGH_THRESHOLD: f64 = 0.85;

/// The high utilisation [`Options::standard`] runs the benchmarks at besides IOzone's 88 %:
/// the paper's "over 85 %" (§IV-D, Fig. 9), the same 88 %.
pub const HIGH_UTILISATION: f64 = 0.88;

/// The service-time clock's queue depth in [`Options::standard`]: SATA NCQ's 32 commands, what
/// the paper's Intel X25-E accepts.
pub const SERVICE_QUEUE_DEPTH: usize = 32;

/// Runs every workload on NVMFS and on each kernel file system (a run in the resumed run log
/// is taken from it instead, [`lab::run_log`]), one after another.
pub fn run(opts: &Options) -> Experiment {
    run_on(opts, &crate::Cores::serial(), &|_, _| {})
}

/// [`run`] with each run a task on `cores` (each on a fresh image in a directory of its own,
/// as in [`run`]; the runs in the same order), `progress` told (runs done, runs in all) as
/// each ends.
pub fn run_on(
    opts: &Options,
    cores: &crate::Cores,
    progress: &(dyn Fn(u64, u64) + Sync),
) -> Experiment {
    let log = std::sync::Mutex::new(RunLogged::open(opts));
    let lock = || log.lock().unwrap_or_else(|e| e.into_inner());
    let plan = plan(opts);
    // Progress counts the runs measured here, not those listed for the paper scale.
    let measured = plan.iter().filter(|(fs, _)| paper_only(opts, fs).is_none());
    let total = measured.count() as u64;
    let done = std::sync::atomic::AtomicU64::new(0);
    let tasks = plan
        .iter()
        .map(|(fs, w)| crate::tasks::Task {
            input: (fs.as_str(), *w),
            priority: match (paper_only(opts, fs), fs.as_str()) {
                (Some(_), _) => 0,
                (None, "nilfs2") => 300,
                _ => 15,
            },
        })
        .collect();
    let runs = cores.map(tasks, |(fs, w)| {
        if let Some(why) = paper_only(opts, fs) {
            return FsRun {
                skipped: Some(format!("{PAPER_ONLY}{why}")),
                ..FsRun::blank(fs, &w.name())
            };
        }
        // The log's lock is held to look up and to record, not while the run is measured.
        let reused = lock().reuse(fs, w);
        let r = reused.unwrap_or_else(|| {
            let r = measure(opts, fs, w);
            lock().record(fs, w, &r);
            r
        });
        progress(
            done.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1,
            total,
        );
        r
    });
    let run_log = lock().summary();
    Experiment {
        design: opts.design.name.to_string(),
        ssd_bytes: opts.config.geometry.capacity_bytes(),
        nvram_bytes: opts.nvram_bytes,
        seed: opts.seed,
        workloads: opts.workloads.clone(),
        runs,
        run_log,
    }
}

/// Every (file system, workload) run in report order: per workload NVMFS, then each kernel file
/// system, then those left to the paper scale (nilfs2 only on the paper's four benchmarks).
fn plan(opts: &Options) -> Vec<(String, &Workload)> {
    let mut plan = Vec::new();
    for w in &opts.workloads {
        plan.push(("nvmfs".to_string(), w));
        let left = opts.paper_only.iter().map(|(fs, _)| fs);
        let left = left.filter(|fs| paper_only(opts, fs).is_some());
        for k in opts.kernel_fs.iter().chain(left) {
            if k == "nilfs2" && w.repeats_a_benchmark() {
                continue;
            }
            plan.push((k.clone(), w));
        }
    }
    plan
}

/// Why `fs` is left to the paper scale, if it is (not when it was asked for all the same, in
/// `kernel_fs`).
fn paper_only<'a>(opts: &'a Options, fs: &str) -> Option<&'a str> {
    let left = opts.paper_only.iter().find(|(f, _)| f == fs);
    left.filter(|_| !opts.kernel_fs.iter().any(|k| k == fs))
        .map(|(_, why)| why.as_str())
}

/// Measures `fs` under `w`; a run that cannot be made is skipped with the reason.
fn measure(opts: &Options, fs: &str, w: &Workload) -> FsRun {
    let measured = match fs {
        "nvmfs" => run_nvmfs(opts, w),
        kernel => run_kernel_fs(opts, kernel, w),
    };
    measured.unwrap_or_else(|e| skipped(fs, w, e))
}

/// The experiment's runs through its run log, if it has one.
struct RunLogged {
    log: Option<RunLog<FsRun>>,
    path: Option<PathBuf>,
    errors: Vec<String>,
}

impl RunLogged {
    fn open(opts: &Options) -> RunLogged {
        let mut errors = Vec::new();
        let log = opts.run_log.as_ref().and_then(|(path, resume)| {
            RunLog::open(path, log_settings(opts), *resume)
                .map_err(|e| errors.push(format!("opening {}: {e}", path.display())))
                .ok()
        });
        let path = opts.run_log.as_ref().map(|(p, _)| p.clone());
        RunLogged { log, path, errors }
    }

    /// `fs` under `w` from the log, if it holds the run.
    fn reuse(&mut self, fs: &str, w: &Workload) -> Option<FsRun> {
        let key = serde_json::json!({ "fs": fs, "workload": w });
        self.log.as_mut().and_then(|l| l.reuse(&key))
    }

    /// Logs a measured run; a skipped run (a tool missing) is not logged: it is retried.
    fn record(&mut self, fs: &str, w: &Workload, r: &FsRun) {
        let key = serde_json::json!({ "fs": fs, "workload": w });
        if let (Some(log), None) = (&mut self.log, &r.skipped) {
            if let Err(e) = log.record(&key, r) {
                self.errors.push(format!("logging {fs} {}: {e}", w.name()));
            }
        }
    }

    /// A sentence for the report: where the runs were logged, how many were reused, and any
    /// trouble with the log.
    fn summary(&self) -> Option<String> {
        let path = self.path.as_ref()?;
        let mut s = format!("runs logged to {}", path.display());
        if let Some(log) = &self.log {
            if log.reused > 0 {
                s += &format!(
                    "; {} taken from it, measured by an earlier invocation of the same binary \
                     with the same settings (--resume)",
                    log.reused
                );
            }
            if log.unreadable_lines > 0 {
                s += &format!(
                    "; {} unreadable line(s) in it ignored",
                    log.unreadable_lines
                );
            }
        }
        for e in &self.errors {
            s += &format!("; error {e}");
        }
        Some(s)
    }
}

/// Everything besides the file system and workload that a run's result depends on (the log
/// adds the binary).
fn log_settings(opts: &Options) -> serde_json::Value {
    serde_json::json!({
        "device": opts.config,
        "design": opts.design.name,
        "nvram_bytes": opts.nvram_bytes,
        "page_cache_budget": opts.page_cache_budget,
        "seed": opts.seed,
        "service_queue_depth": opts.service_queue_depth,
        "erase_study": opts.erase_study.as_ref().map(|d| d.name),
    })
}

fn skipped(fs: &str, w: &Workload, why: ExperimentError) -> FsRun {
    FsRun {
        skipped: Some(why.to_string()),
        ..FsRun::blank(fs, &w.name())
    }
}

fn flash_run(
    fs: &str,
    w: &Workload,
    app: u64,
    ssd_pages: u64,
    d: &FlashStats,
    pages_per_block: u64,
) -> FsRun {
    let copies = d.programs_for(OpCause::GcCopy);
    let erased = d.total_erases() * pages_per_block;
    FsRun {
        app_bytes_written: app,
        ssd_pages_written: ssd_pages,
        flash_programs: d.total_programs(),
        gc_page_copies: copies,
        flash_erases: d.total_erases(),
        ftl_cleaning_efficiency: if erased == 0 {
            1.0
        } else {
            1.0 - copies as f64 / erased as f64
        },
        ..FsRun::blank(fs, &w.name())
    }
}

// ------------------------------------------------------------------ the workload

/// What the workloads need of a file system (paths relative to its root).
trait Files {
    fn mkdir(&mut self, path: &str) -> Result<()>;
    fn create(&mut self, path: &str) -> Result<()>;
    fn write_at(&mut self, path: &str, offset: u64, data: &[u8]) -> Result<()>;
    fn append(&mut self, path: &str, data: &[u8]) -> Result<()>;
    fn read_all(&mut self, path: &str) -> Result<Vec<u8>>;
    fn remove(&mut self, path: &str) -> Result<()>;
    fn fsync(&mut self, path: &str) -> Result<()>;
}

/// The IOzone file that brings a file system of `size` bytes, `used` of them in use, to
/// `utilisation` (whole 64 KB chunks).
pub fn iozone_file_bytes(utilisation: f64, size: u64, used: u64) -> u64 {
    let target = (utilisation * size as f64) as u64;
    target.saturating_sub(used) / (64 << 10) * (64 << 10)
}

/// Runs `w` (an IOzone file of `file_bytes`); returns the bytes written. Reads are checked
/// against the model.
fn drive(files: &mut dyn Files, w: &Workload, seed: u64, file_bytes: u64) -> Result<u64> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut written = 0u64;
    match *w {
        Workload::Iozone { overwrites, .. } => {
            let (filled, outcome) = write_sequentially(files, "big", file_bytes, 0x5a);
            written += filled;
            outcome?;
            files.fsync("big")?;
            let blocks = file_bytes / 4096;
            let mut buf = [0u8; 4096];
            for i in 0..overwrites {
                rng.fill_bytes(&mut buf);
                let b = rng.random_range(0..blocks);
                files.write_at("big", b * 4096, &buf)?;
                written += 4096;
                if i % 256 == 255 {
                    files.fsync("big")?;
                }
            }
            files.fsync("big")?;
        }
        Workload::Filled { ref workload, .. } => {
            return drive(files, workload, seed, file_bytes);
        }
        Workload::PostmarkBinary { .. }
        | Workload::FioIozone { .. }
        | Workload::FioFiles { .. }
        | Workload::FioFileserver { .. } => {
            unreachable!("a benchmark program runs on a mount (run_program), not through Files")
        }
        Workload::Postmark { pool, transactions } => {
            const DIRS: u32 = 5;
            for d in 0..DIRS {
                files.mkdir(&format!("d{d}"))?;
            }
            // per file its length and CRC-32C (not its bytes: the workload may run inside a
            // DRAM budget, budget)
            let mut model: BTreeMap<String, (usize, u32)> = BTreeMap::new();
            let mut next = 0u32;
            let mut create = |files: &mut dyn Files,
                              rng: &mut ChaCha8Rng,
                              model: &mut BTreeMap<String, (usize, u32)>|
             -> Result<u64> {
                let path = format!("d{}/f{next}", next % DIRS);
                next += 1;
                let len = rng.random_range(512..16_384usize);
                let data: Vec<u8> = (0..len).map(|_| rng.random()).collect();
                files.create(&path)?;
                files.write_at(&path, 0, &data)?;
                model.insert(path, (len, crc32c::crc32c(&data)));
                Ok(len as u64)
            };
            for _ in 0..pool {
                written += create(files, &mut rng, &mut model)?;
            }
            for _ in 0..transactions {
                if !model.is_empty() {
                    let k = rng.random_range(0..model.len());
                    let p = model.keys().nth(k).expect("in range").clone();
                    if rng.random_bool(0.5) {
                        let read = files.read_all(&p)?;
                        if (read.len(), crc32c::crc32c(&read)) != model[&p] {
                            return Err(ExperimentError::Mismatch(p));
                        }
                    } else {
                        let len = rng.random_range(1..4_096usize);
                        let data: Vec<u8> = (0..len).map(|_| rng.random()).collect();
                        files.append(&p, &data)?;
                        written += len as u64;
                        let (n, crc) = model.get_mut(&p).expect("present");
                        *n += len;
                        *crc = crc32c::crc32c_append(*crc, &data);
                    }
                }
                if model.is_empty() || rng.random_bool(0.5) {
                    written += create(files, &mut rng, &mut model)?;
                } else {
                    let k = rng.random_range(0..model.len());
                    let p = model.keys().nth(k).expect("in range").clone();
                    files.remove(&p)?;
                    model.remove(&p);
                }
            }
        }
    }
    Ok(written)
}

// ------------------------------------------------------------------ NVMFS

struct NvmfsFiles<'a>(&'a mut Nvmfs);

impl NvmfsFiles<'_> {
    fn split(path: &str) -> (&str, &str) {
        path.rsplit_once('/').unwrap_or(("", path))
    }
    fn ino(&mut self, path: &str) -> Result<u32> {
        self.0
            .resolve(path)
            .map_err(|source| ExperimentError::Nvmfs {
                path: path.to_string(),
                source,
            })
    }
}

impl Files for NvmfsFiles<'_> {
    fn mkdir(&mut self, path: &str) -> Result<()> {
        let (dir, name) = Self::split(path);
        let d = self.ino(dir)?;
        self.0
            .mkdir(d, name.as_bytes(), 0o755, 0, 0)
            .map(|_| ())
            .map_err(ExperimentError::from)
    }
    fn create(&mut self, path: &str) -> Result<()> {
        let (dir, name) = Self::split(path);
        let d = self.ino(dir)?;
        self.0
            .create_file(d, name.as_bytes(), 0o644, 0, 0)
            .map(|_| ())
            .map_err(ExperimentError::from)
    }
    fn write_at(&mut self, path: &str, offset: u64, data: &[u8]) -> Result<()> {
        let ino = self.ino(path)?;
        self.0
            .write(ino, offset, data)
            .map(|_| ())
            .map_err(ExperimentError::from)
    }
    fn append(&mut self, path: &str, data: &[u8]) -> Result<()> {
        let ino = self.ino(path)?;
        let size = self.0.getattr(ino).map_err(ExperimentError::from)?.size;
        self.0
            .write(ino, size, data)
            .map(|_| ())
            .map_err(ExperimentError::from)
    }
    fn read_all(&mut self, path: &str) -> Result<Vec<u8>> {
        let ino = self.ino(path)?;
        let size = self.0.getattr(ino).map_err(ExperimentError::from)?.size;
        let mut buf = vec![0u8; size as usize];
        let n = self
            .0
            .read(ino, 0, &mut buf)
            .map_err(ExperimentError::from)?;
        buf.truncate(n);
        Ok(buf)
    }
    fn remove(&mut self, path: &str) -> Result<()> {
        let (dir, name) = Self::split(path);
        let d = self.ino(dir)?;
        self.0
            .unlink(d, name.as_bytes())
            .map_err(ExperimentError::from)
    }
    fn fsync(&mut self, path: &str) -> Result<()> {
        let ino = self.ino(path)?;
        self.0.fsync(ino).map_err(ExperimentError::from)
    }
}

/// The directory of one run: its file system, the workload's place in the list (two workloads
/// may share a name, e.g. iozone at two utilisations, and runs in parallel must not share
/// images) and the workload's name.
fn run_dir(opts: &Options, fs: &str, w: &Workload) -> PathBuf {
    let place = opts.workloads.iter().position(|o| std::ptr::eq(o, w));
    let place = place.map_or_else(String::new, |i| format!("{i}-"));
    opts.work_dir.join(format!("{fs}-{place}{}", w.name()))
}

fn run_nvmfs(opts: &Options, w: &Workload) -> Result<FsRun> {
    let dir = run_dir(opts, "nvmfs", w);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(ExperimentError::from)?;
    let dev = create_ssd(
        &dir.join("ssd.img"),
        &opts.config,
        &opts.design,
        &DesignOptions::default(),
    )
    .map_err(ExperimentError::from)?;
    let (dev, taps) = with_taps(opts, dev, None)?;
    let mut fs = Nvmfs::create(
        &dir.join("nvram.img"),
        opts.nvram_bytes,
        dev,
        NvmfsParams {
            inode_count: match *w.benchmark() {
                Workload::Postmark { pool, .. } => pool * 2 + 1024,
                Workload::PostmarkBinary { pool, transactions } => pool * 2 + transactions + 1024,
                Workload::FioIozone { .. } => 1024,
                Workload::FioFiles { files, .. } => files + 1024,
                Workload::FioFileserver { files, .. } => files * 2 + 1024,
                Workload::Iozone { .. } | Workload::Filled { .. } => 1024,
            },
            ..NvmfsParams::default()
        },
    )
    .map_err(ExperimentError::from)?;
    let usage = fs.usage();
    let (size, used) = (
        usage.blocks * 4096,
        (usage.blocks - usage.free_blocks) * 4096,
    );
    let ballast = match w.ballast_bytes(size, used) {
        Some(bytes) => Some(fill_nvmfs(&mut fs, bytes)?),
        None => None,
    };
    let used = ballast.map_or(used, |b| used + b);
    let file_bytes = iozone_file(w, size, used);
    let before = fs.device().flash().stats().clone();
    let stats_before = fs.stats().clone();
    let marks = taps.mark();
    let mut nvmfs_stopped = None;
    let app = if w.is_program() {
        let mnt = dir.join("mnt");
        std::fs::create_dir_all(&mnt).map_err(ExperimentError::from)?;
        let program = || run_program(&mnt, w, opts.seed, file_bytes.unwrap_or(0));
        let (app, back) = nvmfs::fuse::with_mounted(fs, &mnt, program)?;
        fs = back;
        let (app, stopped) = app?;
        nvmfs_stopped = stopped;
        app
    } else {
        drive(
            &mut NvmfsFiles(&mut fs),
            w,
            opts.seed,
            file_bytes.unwrap_or(0),
        )?
    };
    let stats = fs.stats().since(&stats_before);
    let dev = fs.unmount().map_err(ExperimentError::from)?;
    let d = dev.flash().stats().since(&before);
    let ppb = opts.config.geometry.pages_per_block as u64;
    let mut r = flash_run("nvmfs", w, app, stats.ssd_pages_written, &d, ppb);
    r.fs_cleaning_efficiency = Some(stats.cleaning_efficiency());
    r.fs_cleaning_rounds = Some(stats.cleaning_rounds);
    r.fs_recycled_blocks = Some(stats.cleaning_recycled_blocks);
    r.fs_moved_blocks = Some(stats.cleaning_moved_blocks);
    r.stopped = nvmfs_stopped;
    (r.erase_study, r.ssd_service) = taps.runs_since(&marks);
    (r.fs_bytes, r.iozone_file_bytes) = (Some(size), file_bytes);
    (r.ballast_bytes, r.utilisation) = (ballast, utilisation(w, size, used, file_bytes));
    drop(dev);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(r)
}

/// Writes NVMFS's ballast and flushes every dirty page to the SSD, as `sync` leaves a kernel
/// file system's ballast on the SSD: the measured phase starts with none of it in NVRAM's dirty
/// list. Returns the bytes written.
fn fill_nvmfs(fs: &mut Nvmfs, bytes: u64) -> Result<u64> {
    let written = write_ballast(&mut NvmfsFiles(fs), bytes)?;
    while fs.flush_round().map_err(ExperimentError::from)? {}
    Ok(written)
}

/// Writes a ballast file of `bytes` in 64 KB chunks and fsyncs it; a file system that runs out
/// of room keeps what fit (its workload then runs fuller than asked, and stops if it must).
/// Returns the bytes written.
fn write_ballast(files: &mut dyn Files, bytes: u64) -> Result<u64> {
    const PATH: &str = "ballast";
    let (written, outcome) = write_sequentially(files, PATH, bytes, 0xb5);
    match outcome.and_then(|()| files.fsync(PATH)) {
        Err(e) if !is_no_space(&e) => Err(e),
        _ => Ok(written),
    }
}

/// Creates `path` and writes `bytes` of `byte` into it from the start in 64 KB chunks (IOzone's
/// fill, a ballast): the bytes written, and the error that stopped it short, if one did.
fn write_sequentially(
    files: &mut dyn Files,
    path: &str,
    bytes: u64,
    byte: u8,
) -> (u64, Result<()>) {
    let chunk = vec![byte; 64 << 10];
    if let Err(e) = files.create(path) {
        return (0, Err(e));
    }
    let mut written = 0;
    while written < bytes {
        let n = (chunk.len() as u64).min(bytes - written);
        if let Err(e) = files.write_at(path, written, &chunk[..n as usize]) {
            return (written, Err(e));
        }
        written += n;
    }
    (written, Ok(()))
}

/// The file system's utilisation while `w` runs: `used` bytes (its ballast included) plus
/// IOzone's file or the benchmark's file set, of `size`.
fn utilisation(w: &Workload, size: u64, used: u64, iozone_file: Option<u64>) -> Option<f64> {
    let files = iozone_file.or_else(|| w.file_set_bytes())?;
    (size > 0).then(|| (used + files) as f64 / size as f64)
}

// ------------------------------------------------------------------ kernel file systems over NBD
fn run_kernel_fs(opts: &Options, kind: &str, w: &Workload) -> Result<FsRun> {
    let host = fs_host(kind)?;
    let dir = run_dir(opts, kind, w);
    let _ = std::fs::remove_dir_all(&dir);
    let mnt = dir.join("mnt");
    std::fs::create_dir_all(&mnt).map_err(ExperimentError::from)?;
    let dev = create_ssd(
        &dir.join("ssd.img"),
        &opts.config,
        &opts.design,
        &DesignOptions::default(),
    )
    .map_err(ExperimentError::from)?;
    let bytes = dev.logical_pages() as u64 * dev.flash().geometry().page_bytes as u64;
    if kind == "xfs" && bytes <= 300 << 20 {
        return Err(ExperimentError::Unavailable(format!(
            "xfs needs more than 300 MiB; this SSD exports {} MiB",
            bytes >> 20
        )));
    }
    let budget = match opts.page_cache_budget {
        Some(bytes) => {
            let name = format!("mobius-{}-{kind}-{}", std::process::id(), w.name());
            let limit = bytes + w.own_memory_allowance();
            Some(budget::MemoryBudget::create(&name, limit)?)
        }
        None => None,
    };
    let meter = (kind == "nilfs2").then(|| MeterHandle::new(nilfs_blocks_per_segment(bytes)));
    let (dev, taps) = with_taps(opts, dev, meter.clone())?;
    let server = nbd::ssd_server(dev, false);
    let mut stack = KernelStack::attach(
        Export::InProcess(server.clone()),
        &dir.join("nbd"),
        Timeouts::UNBOUNDED,
    )?;
    // Linux's default share of the budget may be dirty, on every kernel file system alike.
    let dirty = opts.page_cache_budget.map(dirty_limit_bytes);
    match host {
        FsHost::Kernel => stack.make_and_mount(kind, &mnt, "")?,
        FsHost::Appliance => stack
            .make_and_mount_nilfs2_in_appliance(&mnt, dirty.unwrap_or(APPLIANCE_DIRTY_BYTES))?,
    }
    let dirty_held = match dirty {
        Some(bytes) => Some(stack.limit_dirty(bytes)?),
        None => None,
    };
    let cleaner = || meter.as_ref().map(|m| m.lock().counts());
    // Flash counters and the pages the file system had written, read under the server's lock.
    let counters = || {
        server.with_backend(|b| {
            let flash = b.device_mut().flash().stats().clone();
            (flash, b.host_stats().pages_written)
        })
    };
    let (size, used) = fs_space(&mnt)?;
    let ballast = fill_mounted(&mnt, w, size, used)?;
    // syncfs of this file system only: another run beside it keeps its dirty pages.
    let _ = sh(Command::new("sync").arg("--file-system").arg(&mnt));
    let (before, written_before) = counters();
    let marks = taps.mark();
    let cleaner_before = cleaner();
    let used = ballast.map_or(used, |b| used + b);
    let file_bytes = iozone_file(w, size, used);
    let requests = || {
        server.with_backend(|b| {
            let s = b.host_stats();
            s.pages_written + s.pages_read + s.flushes
        })
    };
    let file = file_bytes.unwrap_or(0);
    let outcome = drive_mounted(&mnt, w, opts.seed, file, budget.as_ref(), &requests)?;
    let (app, stopped) = match outcome {
        Mounted::Ran((app, stopped)) => match stack.unmount_fs() {
            Ok(()) => (app, stopped),
            // nilfs2's cleaner gave up part-way: measured (everything was written back), but
            // not nilfs2 as configured, so the run is reported stopped, after why it stopped
            Err(e @ KernelStackError::CleanerStopped) => {
                let why = match stopped {
                    Some(first) => format!("{first}; {e}"),
                    None => e.to_string(),
                };
                (app, Some(why))
            }
            Err(e) => return Err(e.into()),
        },
        Mounted::Stalled((app, why)) => {
            stack.abandon_fs();
            (app, Some(why))
        }
    };
    let (after, written_after) = counters();
    let (erase_study, ssd_service) = taps.runs_since(&marks);
    let cleaning = cleaner().zip(cleaner_before).map(|(a, b)| a.since(&b));
    let d = after.since(&before);
    let ssd_pages = written_after - written_before;
    drop(stack);
    let ppb = opts.config.geometry.pages_per_block as u64;
    let _ = std::fs::remove_dir_all(&dir);
    let mut r = flash_run(kind, w, app, ssd_pages, &d, ppb);
    (r.erase_study, r.ssd_service) = (erase_study, ssd_service);
    r.stopped = stopped;
    r.page_cache_limit_hits = budget.as_ref().map(|b| b.limit_hits());
    r.dirty_limit_bytes = dirty_held;
    (r.fs_bytes, r.iozone_file_bytes) = (Some(size), file_bytes);
    (r.ballast_bytes, r.utilisation) = (ballast, utilisation(w, size, used, file_bytes));
    if let Some(c) = cleaning {
        r.fs_cleaning_efficiency = Some(c.efficiency().unwrap_or(1.0));
        r.fs_cleaning_rounds = Some(c.cleaner_logs);
        r.fs_recycled_blocks = Some(c.recycled_blocks);
        r.fs_moved_blocks = Some(c.moved_blocks);
    }
    Ok(r)
}

/// Writes `w`'s ballast, if it has one, on the file system mounted at `mnt` (`size` bytes,
/// `used` in use), outside the DRAM budget (the `sync` after it writes it back); returns the
/// bytes written. The bytes in use afterwards are `used` + those, not `df`'s new figure: xfs
/// counts its speculative preallocation past the ballast's end as used until it trims it,
/// minutes later (measured: 110 % for a run at 88 % on the paper scale).
fn fill_mounted(mnt: &std::path::Path, w: &Workload, size: u64, used: u64) -> Result<Option<u64>> {
    let Some(bytes) = w.ballast_bytes(size, used) else {
        return Ok(None);
    };
    let progress = std::sync::atomic::AtomicU64::new(0);
    write_ballast(&mut DirFiles(mnt.to_path_buf(), &progress), bytes).map(Some)
}

/// An appliance's dirty-page limit when the experiment sets no DRAM budget.
const APPLIANCE_DIRTY_BYTES: u64 = 64 << 20;

/// IOzone's file size on a file system of `size` bytes with `used` in use.
fn iozone_file(w: &Workload, size: u64, used: u64) -> Option<u64> {
    match *w {
        Workload::Iozone { utilisation, .. } | Workload::FioIozone { utilisation, .. } => {
            Some(iozone_file_bytes(utilisation, size, used))
        }
        _ => None,
    }
}

/// Runs a benchmark program's workload on the file system mounted at `mnt` (an IOzone-like
/// file of `file_bytes`); returns the bytes it reports writing, and why it stopped if the file
/// system ran out of space part-way.
fn run_program(
    mnt: &std::path::Path,
    w: &Workload,
    seed: u64,
    file_bytes: u64,
) -> Result<(u64, Option<String>)> {
    let (program, package, script) = match *w {
        Workload::Filled { ref workload, .. } => return run_program(mnt, workload, seed, file_bytes),
        Workload::PostmarkBinary { pool, transactions } => (
            "postmark",
            "postmark",
            format!(
                "set location {}\nset number {pool}\nset transactions {transactions}\nset size 512 16384\nset read 4096\nset write 4096\nset buffering false\nset seed {seed}\nrun\nquit\n",
                mnt.display()
            ),
        ),
        Workload::FioIozone { overwrites, .. } => (
            "fio",
            "fio",
            fio_iozone_job(mnt, file_bytes, overwrites, seed),
        ),
        Workload::FioFiles {
            files,
            file_kb,
            overwrites,
        } => ("fio", "fio", fio_files_job(mnt, files, file_kb, overwrites, seed)),
        Workload::FioFileserver { files, passes } => {
            ("fio", "fio", fio_fileserver_job(mnt, files, passes, seed))
        }
        _ => unreachable!("only benchmark programs run here"),
    };
    let fail = |why: String| ExperimentError::Program { program, why };
    if tool_missing(program) {
        return Err(fail(format!("not installed (apt-get install {package})")));
    }
    let config = mnt.with_extension(format!("{program}.job"));
    std::fs::write(&config, script).map_err(ExperimentError::Io)?;
    let mut cmd = Command::new(program);
    if program == "fio" {
        cmd.arg("--output-format=json");
    }
    let out = cmd.arg(&config).output().map_err(|e| fail(e.to_string()))?;
    let _ = std::fs::remove_file(&config);
    let text = String::from_utf8_lossy(&out.stdout);
    let errors = String::from_utf8_lossy(&out.stderr);
    let written = match program {
        "fio" => fio_bytes_written(&text),
        _ => postmark_bytes_written(&text),
    };
    if !out.status.success() {
        let no_space = "No space left on device";
        if let Some(line) = errors
            .lines()
            .chain(text.lines())
            .find(|l| l.contains(no_space))
        {
            let done = written.unwrap_or(0);
            let why = format!(
                "{program}: {}, after {:.1} MiB",
                line.trim(),
                done as f64 / (1 << 20) as f64
            );
            return Ok((done, Some(why)));
        }
        return Err(fail(format!("{} {errors}", out.status)));
    }
    let written = written.ok_or_else(|| fail(format!("no bytes written in its report: {text}")))?;
    Ok((written, None))
}

/// The fio job that reproduces IOzone's random-write case on `dir` (docs/nvmfs.md).
pub fn fio_iozone_job(
    dir: &std::path::Path,
    file_bytes: u64,
    overwrites: u32,
    seed: u64,
) -> String {
    format!(
        "[global]\ndirectory={}\nfilename=iozone.dat\nioengine=psync\nfallocate=none\nrandrepeat=1\nrandseed={seed}\nsize={file_bytes}\n\n\
         [fill]\nrw=write\nbs=64k\nend_fsync=1\n\n\
         [overwrite]\nstonewall\nrw=randwrite\nbs=4k\nio_size={}\nfsync=256\nend_fsync=1\n",
        dir.display(),
        overwrites as u64 * 4096
    )
}

/// The paper's FIO workload on `dir`: random 4 KB updates over `files` files (docs/nvmfs.md).
pub fn fio_files_job(
    dir: &std::path::Path,
    files: u32,
    file_kb: u32,
    overwrites: u32,
    seed: u64,
) -> String {
    format!(
        "[global]\ndirectory={}\nioengine=psync\nfallocate=none\nrandrepeat=1\nrandseed={seed}\n\n\
         [files]\nnrfiles={files}\nfilesize={file_kb}k\nsize={}k\nfile_service_type=random\nrw=randwrite\nbs=4k\nio_size={}\nfsync=256\nend_fsync=1\n",
        dir.display(),
        files as u64 * file_kb as u64,
        overwrites as u64 * 4096
    )
}

/// Filebench's file-server personality as an fio job on `dir` (docs/nvmfs.md): fio lays out
/// `files` files of 16–256 KB (creates and writes them whole), reads and writes them at random
/// (half each, 4 KB) until `passes` times their size has moved, and deletes them at the end.
pub fn fio_fileserver_job(dir: &std::path::Path, files: u32, passes: u32, seed: u64) -> String {
    let kb = files as u64 * 136;
    format!(
        "[global]\ndirectory={}\nioengine=psync\nfallocate=none\nrandrepeat=1\nrandseed={seed}\n\n\
         [fileserver]\nnrfiles={files}\nfilesize=16k-256k\nsize={kb}k\nio_size={}k\n\
         file_service_type=random\nrw=randrw\nrwmixread=50\nbs=4k\nunlink=1\nend_fsync=1\n",
        dir.display(),
        kb * passes as u64
    )
}

/// The bytes every job of an fio JSON report wrote.
pub fn fio_bytes_written(report: &str) -> Option<u64> {
    let json: serde_json::Value = serde_json::from_str(&report[report.find('{')?..]).ok()?;
    let jobs = json.get("jobs")?.as_array()?;
    jobs.iter()
        .map(|j| j.get("write")?.get("io_bytes")?.as_u64())
        .sum()
}

/// Postmark's "N megabytes written" line, in bytes (its megabyte is 2^20 bytes).
pub fn postmark_bytes_written(report: &str) -> Option<u64> {
    report.lines().find_map(|l| {
        let (n, rest) = l.trim().split_once(' ')?;
        rest.starts_with("megabytes written")
            .then(|| n.parse::<f64>().ok())
            .flatten()
            .map(|mb| (mb * (1u64 << 20) as f64) as u64)
    })
}

/// A mounted file system's capacity and bytes in use, as `df` counts them (used + available
/// to an unprivileged writer; used).
fn fs_space(mnt: &std::path::Path) -> Result<(u64, u64)> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(mnt.as_os_str().as_bytes())
        .map_err(|e| ExperimentError::Io(std::io::Error::other(e)))?;
    // SAFETY: statvfs fills the zeroed struct for a NUL-terminated path.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(path.as_ptr(), &mut st) } != 0 {
        return Err(ExperimentError::Io(std::io::Error::last_os_error()));
    }
    let unit = st.f_frsize as u64;
    let used = (st.f_blocks as u64 - st.f_bfree as u64) * unit;
    Ok((used + st.f_bavail as u64 * unit, used))
}

/// Runs the workload on a mounted file system: the bytes it wrote, and why it stopped if it
/// ran out of space part-way.
fn drive_dir(
    mnt: &std::path::Path,
    w: &Workload,
    seed: u64,
    file_bytes: u64,
    progress: &std::sync::atomic::AtomicU64,
) -> Result<(u64, Option<String>)> {
    if w.is_program() {
        return run_program(mnt, w, seed, file_bytes);
    }
    let mut files = DirFiles(mnt.to_path_buf(), progress);
    match drive(&mut files, w, seed, file_bytes) {
        Ok(app) => Ok((app, None)),
        Err(e) if is_no_space(&e) => {
            let done = progress.load(std::sync::atomic::Ordering::Relaxed);
            let why = format!("{e}, after {:.1} MiB", done as f64 / (1 << 20) as f64);
            Ok((done, Some(why)))
        }
        Err(e) => Err(e),
    }
}

/// Runs the workload on the mount, inside the DRAM budget if there is one. A workload the
/// budget's OOM killer stopped is a measured outcome, like running out of space.
fn drive_mounted(
    mnt: &std::path::Path,
    w: &Workload,
    seed: u64,
    file_bytes: u64,
    budget: Option<&budget::MemoryBudget>,
    ssd_requests: &dyn Fn() -> u64,
) -> Result<Mounted> {
    let progress = budget::SharedCounter::new()?;
    let run = || drive_dir(mnt, w, seed, file_bytes, progress.get());
    let Some(b) = budget else {
        return run().map(Mounted::Ran);
    };
    let written = || progress.get().load(std::sync::atomic::Ordering::Relaxed);
    let moving = || ssd_requests().wrapping_add(written());
    // A benchmark program counts its own bytes and reports them when it ends: killed, it
    // reports nothing, so the reason says so instead of "after 0.0 MiB".
    let after = || match w.is_program() {
        true => "its own count of bytes written lost with it".to_string(),
        false => format!("after {:.1} MiB", written() as f64 / (1 << 20) as f64),
    };
    // The run's own mounts (the appliance's FUSE mount, nbdfuse) sit beside `mnt`.
    let scratch = mnt.parent().unwrap_or(mnt);
    match b.run_in_child(|| encode_outcome(run()), &moving, STALL, scratch) {
        Ok(reply) => decode_outcome(&reply).map(Mounted::Ran),
        Err(budget::BudgetError::ChildDied(status)) if budget::killed(status) => {
            let why = format!(
                "killed by the OOM killer at its memory cgroup's {} MiB limit (the DRAM budget), {}",
                b.bytes() >> 20,
                after()
            );
            Ok(Mounted::Ran((written(), Some(why))))
        }
        Err(e @ budget::BudgetError::Stalled { .. }) => {
            let why = format!(
                "{e}, {}; the file system was abandoned without its unmount's write-back",
                after()
            );
            Ok(Mounted::Stalled((written(), why)))
        }
        Err(e) => Err(e.into()),
    }
}

/// How long a workload on a kernel file system may go without an SSD request or a byte written
/// before it is declared stalled ([`budget::MemoryBudget::run_in_child`]). Measured:
/// nilfs2 at 88 % once blocked its writer for over 30 min with the SSD idle; no run that
/// completed was ever idle for more than seconds.
const STALL: std::time::Duration = std::time::Duration::from_secs(300);

/// What a workload on a mounted file system came to: (app bytes written, why it stopped
/// part-way); `Stalled`: the file system stopped answering, so it cannot be unmounted cleanly.
enum Mounted {
    Ran((u64, Option<String>)),
    Stalled((u64, String)),
}

/// The budgeted workload process's outcome as bytes for the pipe: `0 | written u64 | stopped`,
/// or `2 | error text`.
fn encode_outcome(r: Result<(u64, Option<String>)>) -> Vec<u8> {
    match r {
        Ok((written, stopped)) => {
            let mut b = vec![0u8];
            b.extend_from_slice(&written.to_le_bytes());
            b.extend_from_slice(stopped.unwrap_or_default().as_bytes());
            b
        }
        Err(e) => {
            let mut b = vec![2u8];
            b.extend_from_slice(e.to_string().as_bytes());
            b
        }
    }
}

fn decode_outcome(b: &[u8]) -> Result<(u64, Option<String>)> {
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    match b {
        [0, rest @ ..] if rest.len() >= 8 => {
            let written = u64::from_le_bytes(rest[..8].try_into().expect("8 bytes"));
            let stopped = text(&rest[8..]);
            Ok((written, (!stopped.is_empty()).then_some(stopped)))
        }
        [_, rest @ ..] => Err(ExperimentError::Workload(text(rest))),
        [] => Err(ExperimentError::Workload("no outcome".into())),
    }
}

/// A file system that ran out of room part-way: a measured outcome (its counters cover what it
/// did), not a run that could not happen.
fn is_no_space(e: &ExperimentError) -> bool {
    matches!(e, ExperimentError::File { source, .. } if source.raw_os_error() == Some(libc::ENOSPC))
}

/// The designs replaying a run's SSD requests ([`super::shadow`]).
struct Taps {
    /// The erase study's second FTL (FAST), given each request when the SSD was.
    erase_study: Option<ShadowHandle>,
    /// The service-time clock: the run's design, closed loop.
    clock: Option<ShadowHandle>,
}

/// Both taps' state when the measured phase began.
struct TapMarks(Option<ShadowMark>, Option<ShadowMark>);

impl Taps {
    fn handles(&self) -> Vec<ShadowHandle> {
        self.erase_study
            .iter()
            .chain(&self.clock)
            .cloned()
            .collect()
    }

    /// Starts the measured phase (the clock's queue drains first).
    fn mark(&self) -> TapMarks {
        let mark = |s: &Option<ShadowHandle>| s.as_ref().map(|s| s.lock().mark());
        TapMarks(mark(&self.erase_study), mark(&self.clock))
    }

    /// What each did since `marks`: (erase study, service time).
    fn runs_since(&self, marks: &TapMarks) -> (Option<ShadowRun>, Option<ShadowRun>) {
        let run = |s: &Option<ShadowHandle>, m: &Option<ShadowMark>| {
            Some(s.as_ref()?.lock().run_since(m.as_ref()?))
        };
        (run(&self.erase_study, &marks.0), run(&self.clock, &marks.1))
    }
}

/// The run's SSD with the erase study's second FTL and the service-time clock replaying its
/// requests, each if asked for, and the blocks it is given shown to `meter`, if one is given.
fn with_taps(
    opts: &Options,
    dev: Box<dyn ftl::BlockDevice>,
    meter: Option<MeterHandle>,
) -> Result<(Box<dyn ftl::BlockDevice>, Taps)> {
    let build = |spec: &DesignSpec, arrivals, role: &str| {
        Shadow::build(spec, &opts.config, dev.logical_pages(), arrivals)
            .map_err(|e| ExperimentError::Unavailable(format!("{role} FTL {}: {e}", spec.name)))
    };
    let erase_study = match &opts.erase_study {
        Some(spec) => Some(build(spec, Arrivals::AsIssued, "erase study")?),
        None => None,
    };
    let clock = match opts.service_queue_depth {
        Some(queue_depth) => Some(build(
            &opts.design,
            Arrivals::ClosedLoop { queue_depth },
            "service-time clock",
        )?),
        None => None,
    };
    let taps = Taps { erase_study, clock };
    let shadows = taps.handles();
    if shadows.is_empty() && meter.is_none() {
        return Ok((dev, taps));
    }
    Ok((Box::new(Shadowed::tapped(dev, shadows, meter)), taps))
}

/// A mounted kernel file system, counting the bytes it accepted.
struct DirFiles<'a>(PathBuf, &'a std::sync::atomic::AtomicU64);

fn file_error(path: &str, source: std::io::Error) -> ExperimentError {
    ExperimentError::File {
        path: path.to_string(),
        source,
    }
}

impl Files for DirFiles<'_> {
    fn mkdir(&mut self, path: &str) -> Result<()> {
        std::fs::create_dir(self.0.join(path)).map_err(|source| file_error(path, source))
    }
    fn create(&mut self, path: &str) -> Result<()> {
        std::fs::File::create(self.0.join(path))
            .map(|_| ())
            .map_err(|source| file_error(path, source))
    }
    fn write_at(&mut self, path: &str, offset: u64, data: &[u8]) -> Result<()> {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(self.0.join(path))
            .map_err(|source| file_error(path, source))?;
        f.write_all_at(data, offset)
            .map_err(|source| file_error(path, source))?;
        self.1
            .fetch_add(data.len() as u64, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }
    fn append(&mut self, path: &str, data: &[u8]) -> Result<()> {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(self.0.join(path))
            .map_err(|source| file_error(path, source))?;
        f.write_all(data)
            .map_err(|source| file_error(path, source))?;
        self.1
            .fetch_add(data.len() as u64, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }
    fn read_all(&mut self, path: &str) -> Result<Vec<u8>> {
        std::fs::read(self.0.join(path)).map_err(|source| file_error(path, source))
    }
    fn remove(&mut self, path: &str) -> Result<()> {
        std::fs::remove_file(self.0.join(path)).map_err(|source| file_error(path, source))
    }
    fn fsync(&mut self, path: &str) -> Result<()> {
        std::fs::File::open(self.0.join(path))
            .and_then(|f| f.sync_all())
            .map_err(|source| file_error(path, source))
    }
}

/// The experiment as a Markdown table.
pub fn table(e: &Experiment) -> String {
    let mut s = format!(
        "SSD {} MiB ({}), NVRAM {} MiB, seed {}\n\n",
        e.ssd_bytes >> 20,
        e.design,
        e.nvram_bytes >> 20,
        e.seed
    );
    s.push_str("| workload | fs | utilisation | app MiB written | SSD pages written | flash programs | GC page copies | erases | FTL cleaning eff. | FS cleaning eff. (rounds) | SSD time (sim s) | app MiB/s (sim) |\n");
    s.push_str("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for r in &e.runs {
        if let Some(why) = &r.skipped {
            s.push_str(&format!(
                "| {} | {} | | skipped: {why} | | | | | | | | |\n",
                r.workload, r.fs
            ));
            continue;
        }
        let app_mib = r.app_bytes_written as f64 / (1 << 20) as f64;
        s.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {:.3} | {} | {} | {} |\n",
            r.workload,
            r.fs,
            r.utilisation
                .map_or("—".into(), |u| format!("{:.0} %", u * 100.0)),
            match &r.stopped {
                Some(why) => format!("{app_mib:.1} (stopped: {why})"),
                None => format!("{app_mib:.1}"),
            },
            r.ssd_pages_written,
            r.flash_programs,
            r.gc_page_copies,
            r.flash_erases,
            r.ftl_cleaning_efficiency,
            match (r.fs_cleaning_efficiency, r.fs_cleaning_rounds) {
                (Some(e), Some(n)) => format!("{e:.3} ({n})"),
                _ => "—".into(),
            },
            r.service_seconds()
                .map_or("—".into(), |t| format!("{t:.3}")),
            r.throughput_mib_s()
                .map_or("—".into(), |t| format!("{t:.1}")),
        ));
    }
    s
}

#[cfg(test)]
mod stop_tests {
    use super::*;

    #[test]
    fn only_running_out_of_space_stops_a_run_part_way() {
        let err = |code| ExperimentError::File {
            path: "big".into(),
            source: std::io::Error::from_raw_os_error(code),
        };
        assert!(is_no_space(&err(libc::ENOSPC)));
        assert!(!is_no_space(&err(libc::EIO)));
        assert!(!is_no_space(&ExperimentError::Mismatch("f".into())));
    }

    #[test]
    fn fio_reports_the_bytes_of_every_job() {
        let report = "fio-3.x\n{\"jobs\": [{\"write\": {\"io_bytes\": 1000}}, {\"write\": {\"io_bytes\": 24}}]}";
        assert_eq!(fio_bytes_written(report), Some(1024));
        assert_eq!(fio_bytes_written("{\"jobs\": [{\"read\": {}}]}"), None);
        assert_eq!(fio_bytes_written("no report"), None);
        let job = fio_iozone_job(std::path::Path::new("/m"), 1 << 20, 10, 7);
        assert!(
            job.contains("directory=/m") && job.contains("io_size=40960"),
            "{job}"
        );
    }

    #[test]
    fn postmark_reports_its_bytes_written() {
        let report = "Data:\n\t2.61 megabytes read (2.61 megabytes per second)\n\t4.46 megabytes written (4.46 megabytes per second)\n";
        assert_eq!(
            postmark_bytes_written(report),
            Some((4.46 * 1048576.0) as u64)
        );
        assert_eq!(
            postmark_bytes_written("Data:\n\t2.61 megabytes read\n"),
            None
        );
    }

    #[test]
    fn a_budgeted_outcome_crosses_the_pipe_intact() {
        let stopped = Some("big: No space left on device, after 3.0 MiB".to_string());
        let back = decode_outcome(&encode_outcome(Ok((3 << 20, stopped.clone())))).unwrap();
        assert_eq!(back, (3 << 20, stopped));
        assert_eq!(
            decode_outcome(&encode_outcome(Ok((5, None)))).unwrap(),
            (5, None)
        );
        let err = decode_outcome(&encode_outcome(Err(ExperimentError::Mismatch(
            "d1/f3".into(),
        ))));
        assert!(matches!(err, Err(ExperimentError::Workload(t)) if t.contains("d1/f3")));
        assert!(decode_outcome(&[]).is_err() && decode_outcome(&[0, 1, 2]).is_err());
    }
}

#[cfg(test)]
mod fill_tests {
    use super::*;

    fn fio_files(files: u32) -> Workload {
        Workload::FioFiles {
            files,
            file_kb: 1024,
            overwrites: 10,
        }
    }

    #[test]
    fn a_filled_benchmark_is_named_by_its_utilisation_and_runs_as_itself() {
        let high = Workload::filled(0.88, fio_files(10));
        assert_eq!(high.name(), "fio-files-high");
        assert_eq!(
            Workload::filled(0.5, fio_files(10)).name(),
            "fio-files-filled50"
        );
        assert!(high.is_program() && high.is_fio() && !high.repeats_a_benchmark());
        assert_eq!(
            high.own_memory_allowance(),
            fio_files(10).own_memory_allowance()
        );
        assert!(matches!(
            high.benchmark(),
            Workload::FioFiles { files: 10, .. }
        ));
        let binary = Workload::PostmarkBinary {
            pool: 1,
            transactions: 1,
        };
        assert!(Workload::filled(0.9, binary).repeats_a_benchmark());
    }

    #[test]
    #[should_panic(expected = "brings its own utilisation")]
    fn iozone_is_never_filled() {
        Workload::filled(
            0.88,
            Workload::Iozone {
                utilisation: 0.6,
                overwrites: 1,
            },
        );
    }

    /// The ballast leaves room for the file set and no more: in use + ballast + files = 88 %.
    #[test]
    fn the_ballast_brings_the_file_system_to_its_utilisation_with_the_files_counted() {
        let (size, used) = (100 << 20, 2 << 20);
        let w = Workload::filled(0.88, fio_files(10));
        assert_eq!(w.file_set_bytes(), Some(10 << 20));
        let ballast = w.ballast_bytes(size, used).unwrap();
        assert_eq!(ballast % (64 << 10), 0);
        let u = utilisation(&w, size, used + ballast, None).unwrap();
        assert!((0.879..=0.88).contains(&u), "{u}");
        // a file set larger than the target: no ballast, the utilisation is the file set's
        assert_eq!(
            Workload::filled(0.88, fio_files(95)).ballast_bytes(size, used),
            Some(0)
        );
        assert_eq!(fio_files(10).ballast_bytes(size, used), None);
        let iozone = Workload::Iozone {
            utilisation: 0.6,
            overwrites: 1,
        };
        assert_eq!(utilisation(&iozone, size, used, Some(58 << 20)), Some(0.6));
        assert_eq!(utilisation(&iozone, size, used, None), None);
    }

    #[test]
    fn the_standard_runs_put_each_of_the_papers_benchmarks_above_85_percent() {
        let opts = Options::standard(false, dftl::spec(), std::env::temp_dir());
        let names: Vec<String> = opts.workloads.iter().map(|w| w.name()).collect();
        for high in [
            "iozone-randwrite-high",
            "postmark-high",
            "fio-files-high",
            "fio-fileserver-high",
        ] {
            assert!(names.iter().any(|n| n == high), "{high} missing: {names:?}");
        }
        assert!(
            !names.iter().any(|n| n == "postmark-binary-high"),
            "{names:?}"
        );
        let distinct: std::collections::BTreeSet<_> = names.iter().collect();
        assert_eq!(distinct.len(), names.len(), "{names:?}");
    }

    /// Files that take `room` bytes, then fail writes with `errno`.
    struct Tight {
        room: u64,
        written: u64,
        errno: i32,
    }

    impl Files for Tight {
        fn mkdir(&mut self, _: &str) -> Result<()> {
            Ok(())
        }
        fn create(&mut self, _: &str) -> Result<()> {
            Ok(())
        }
        fn write_at(&mut self, path: &str, _: u64, data: &[u8]) -> Result<()> {
            if self.written + data.len() as u64 > self.room {
                let source = std::io::Error::from_raw_os_error(self.errno);
                return Err(file_error(path, source));
            }
            self.written += data.len() as u64;
            Ok(())
        }
        fn append(&mut self, path: &str, data: &[u8]) -> Result<()> {
            self.write_at(path, 0, data)
        }
        fn read_all(&mut self, _: &str) -> Result<Vec<u8>> {
            Ok(Vec::new())
        }
        fn remove(&mut self, _: &str) -> Result<()> {
            Ok(())
        }
        fn fsync(&mut self, _: &str) -> Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_ballast_keeps_what_fit_and_fails_on_any_other_error() {
        let mut roomy = Tight {
            room: u64::MAX,
            written: 0,
            errno: libc::ENOSPC,
        };
        assert_eq!(write_ballast(&mut roomy, 200 << 10).unwrap(), 200 << 10);
        let mut full = Tight {
            room: 128 << 10,
            written: 0,
            errno: libc::ENOSPC,
        };
        assert_eq!(write_ballast(&mut full, 1 << 20).unwrap(), 128 << 10);
        let mut broken = Tight {
            room: 128 << 10,
            written: 0,
            errno: libc::EIO,
        };
        assert!(write_ballast(&mut broken, 1 << 20).is_err());
    }
}
