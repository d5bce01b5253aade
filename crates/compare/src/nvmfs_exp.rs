//! Experiment — NVMFS against ext4 and xfs on the same emulated SSD (NVMFS, Qiu & Reddy, MSST
//! 2013, §IV and §VI): SSD write traffic, flash erases, GC page copies and cleaning
//! efficiency (1 − moved valid blocks / recycled blocks) under IOzone random writes and
//! Postmark. The runs themselves are `nvmfs::experiment` (see docs/nvmfs.md): NVMFS in-process,
//! ext4/xfs in the kernel over NBD from this process (root, /dev/fuse, nbdfuse and losetup
//! needed; otherwise their rows are skipped with the reason).

use crate::claims::{Check, Claim, Tolerance};
use crate::report::{fmt, ExperimentResult, Table};
use crate::{Context, Scale};
use nvmfs::experiment::{run as run_experiment, Options};

const TITLE: &str = "7. NVMFS vs ext4/xfs on the same emulated SSD (NVMFS §VI)";

pub fn run(ctx: &Context) -> ExperimentResult {
    let mut skipped = Vec::new();
    let Some(design) = ctx.design("dftl").cloned() else {
        return ExperimentResult::failed("nvmfs", TITLE, "the dftl design is not built".into());
    };
    let work = std::env::temp_dir().join(format!("mobius-nvmfs-{}", std::process::id()));
    if let Err(e) = std::fs::create_dir_all(&work) {
        let why = format!("scratch directory {}: {e}", work.display());
        return ExperimentResult::failed("nvmfs", TITLE, why);
    }
    let mut opts = Options::standard(ctx.scale == Scale::Paper, design, work.clone());
    opts.seed = ctx.seed;
    (ctx.progress)("nvmfs", 0, 1);
    let e = run_experiment(&opts);
    (ctx.progress)("nvmfs", 1, 1);
    let _ = std::fs::remove_dir_all(&work);
    let mut rows = Vec::new();
    for r in &e.runs {
        if let Some(why) = &r.skipped {
            skipped.push(format!("{} / {}: {why}", r.fs, r.workload));
            continue;
        }
        rows.push(vec![
            r.workload.clone(),
            r.fs.clone(),
            fmt(r.app_bytes_written as f64 / (1 << 20) as f64),
            r.ssd_pages_written.to_string(),
            r.flash_programs.to_string(),
            r.gc_page_copies.to_string(),
            r.flash_erases.to_string(),
            format!("{:.3}", r.ftl_cleaning_efficiency),
            match (r.fs_cleaning_efficiency, r.fs_cleaning_rounds) {
                (Some(x), Some(n)) => format!("{x:.3} ({n})"),
                _ => "—".into(),
            },
        ]);
    }
    let find = |fs: &str| {
        e.runs
            .iter()
            .find(|r| r.fs == fs && r.workload == "iozone-randwrite" && r.skipped.is_none())
    };
    let claim = erase_claim(find("nvmfs"), find("ext4"));
    ExperimentResult {
        id: "nvmfs",
        title: TITLE.into(),
        description: format!(
            "SSD {} MiB ({}), NVRAM {} MiB; fresh image per run; counters from mount to unmount. \
             FTL cleaning efficiency = 1 − GC copies / pages of erased blocks; NVMFS's own = \
             1 − moved valid blocks / recycled blocks.{}",
            e.ssd_bytes >> 20,
            e.design,
            e.nvram_bytes >> 20,
            if ctx.scale == Scale::Paper {
                ""
            } else {
                " xfs runs at `--scale paper` only: mkfs.xfs refuses 300 MiB or less."
            }
        ),
        tables: vec![Table {
            caption: "SSD traffic, erases, GC copies, cleaning efficiency".into(),
            header: [
                "workload",
                "fs",
                "app MiB written",
                "SSD pages written",
                "flash programs",
                "GC page copies",
                "erases",
                "FTL cleaning eff.",
                "FS cleaning eff. (rounds)",
            ]
            .iter()
            .map(|s| s.to_string())
            .collect(),
            rows,
        }],
        figures: Vec::new(),
        claims: vec![claim],
        data: serde_json::to_value(&e).unwrap_or_default(),
        skipped,
        host: Some(opts.config.host),
    }
}

/// NVMFS's erase study graded on the IOzone runs: NVMFS against ext4 on the same SSD. NVMFS's
/// own segment cleaning re-flushes pages; those count in its flash programs.
fn erase_claim(
    nvmfs: Option<&nvmfs::experiment::FsRun>,
    ext4: Option<&nvmfs::experiment::FsRun>,
) -> Claim {
    let claim = Claim::new(
        "NVMFS §VI (SSD write traffic and erase study)",
        "NVMFS reduces the SSD's write traffic, erase count and erase cost (valid-page copies) against ext3/btrfs/nilfs2 under random writes",
    );
    let (Some(n), Some(x)) = (nvmfs, ext4) else {
        return claim.check(Check::not_reproduced(
            "NVMFS / ext4 GC page copies, erases, flash programs",
            "ext4 did not run here (see skipped)",
        ));
    };
    let ratio = |a: u64, b: u64| a as f64 / b as f64;
    claim
        .check(Check::grade("NVMFS / ext4 GC page copies (IOzone)", ratio(n.gc_page_copies, x.gc_page_copies), Tolerance::Below { bound: 1.0 }))
        .check(Check::grade("NVMFS / ext4 flash erases (IOzone)", ratio(n.flash_erases, x.flash_erases), Tolerance::Below { bound: 1.0 }))
        .check(Check::grade("NVMFS / ext4 flash programs, NVMFS's own cleaning included (IOzone)", ratio(n.flash_programs, x.flash_programs), Tolerance::Below { bound: 1.0 }))
        .note("The paper used a 24 GB simulated SSD with FAST and page-level FTLs and ext3/btrfs/nilfs2; here ext4 on the same emulated SSD through the same NBD path. ext4's page cache coalesces overwrites.")
}

#[cfg(test)]
mod claim_tests {
    use super::*;
    use crate::claims::Verdict;
    use nvmfs::experiment::FsRun;

    fn run(fs: &str, copies: u64, erases: u64, programs: u64) -> FsRun {
        FsRun {
            fs: fs.into(),
            workload: "iozone-randwrite".into(),
            skipped: None,
            app_bytes_written: 1,
            ssd_pages_written: 1,
            flash_programs: programs,
            gc_page_copies: copies,
            flash_erases: erases,
            ftl_cleaning_efficiency: 0.5,
            fs_cleaning_efficiency: None,
            fs_cleaning_rounds: None,
        }
    }

    #[test]
    fn nvmfs_must_beat_ext4_on_every_count() {
        let x = run("ext4", 1000, 100, 5000);
        assert_eq!(
            erase_claim(Some(&run("nvmfs", 500, 50, 4000)), Some(&x)).verdict(),
            Verdict::Pass
        );
        assert_eq!(
            erase_claim(Some(&run("nvmfs", 500, 150, 4000)), Some(&x)).verdict(),
            Verdict::Fail
        );
        assert_eq!(
            erase_claim(Some(&run("nvmfs", 500, 50, 6000)), Some(&x)).verdict(),
            Verdict::Fail
        );
        assert_eq!(
            erase_claim(None, Some(&x)).verdict(),
            Verdict::NotReproduced
        );
    }
}
