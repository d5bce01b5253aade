//! `mobius nvmfs`: mounts NVMFS (hybrid NVRAM + SSD file system, docs/nvmfs.md) with FUSE.
//!
//! NVRAM is a memory-mapped file; the SSD is a file-backed flash image run in-process by any
//! design, through its block interface. Both images are created (and formatted) when neither
//! exists and recovered when both do: `kill -9` is process death, the next mount recovers.
//! SIGINT/SIGTERM or `fusermount3 -u MOUNTPOINT` unmount cleanly: the SSD is flushed and
//! synced, the NVRAM image marked clean.

use clap::Args;
use ftl::DesignOptions;
use lab::device::Recipe;
use nvmfs::{KillPoint, NvmfsParams};
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

#[derive(Args, Debug)]
pub struct NvmfsArgs {
    /// NVRAM image (a memory-mapped file): created if absent, recovered if present.
    #[arg(long)]
    pub nvram: PathBuf,
    /// NVRAM size for a new image, e.g. 64M (rounded down to 4 KiB pages).
    #[arg(long, default_value = "64M")]
    pub nvram_size: String,
    /// SSD flash image: created (and formatted) if absent, recovered if present.
    #[arg(long)]
    pub ssd_image: PathBuf,
    /// Design running the SSD (`mobius info --list`).
    #[arg(long, default_value = "dftl")]
    pub ftl: String,
    #[command(flatten)]
    pub device: Recipe,
    /// SSD size instead of a preset's blocks per chip, e.g. 256M, 2G (rounded to whole blocks).
    #[arg(long)]
    pub size: Option<String>,
    /// Inodes in the inode table of a new file system.
    #[arg(long, default_value_t = 16384)]
    pub inodes: u32,
    /// Design parameter, `--param key=value` (repeatable).
    #[arg(long = "param", value_name = "KEY=VALUE")]
    pub params: Vec<String>,
    /// Crash test hook: SIGKILL this process the N-th time POINT is reached
    /// (flush-after-ssd-write, flush-mid-metadata, clean-before-commit, clean-after-commit).
    #[arg(long, value_name = "POINT:N", hide = true)]
    pub kill_at: Option<String>,
    /// Where to mount.
    pub mountpoint: PathBuf,
}

fn parse_kill_at(s: &str) -> anyhow::Result<(KillPoint, u64)> {
    let (point, n) = s.split_once(':').unwrap_or((s, "1"));
    let point = KillPoint::parse(point)
        .ok_or_else(|| anyhow::anyhow!("--kill-at {s}: unknown point '{point}'"))?;
    let n: u64 = n
        .parse()
        .map_err(|_| anyhow::anyhow!("--kill-at {s}: N must be a positive number"))?;
    Ok((point, n.max(1)))
}

pub fn run(args: &NvmfsArgs) -> anyhow::Result<()> {
    let design = lab::registry::find(&args.ftl)?;
    let mut config = args.device.resolve_for(&design)?;
    if let Some(size) = &args.size {
        lab::device::apply_size(&mut config, size)?;
    }
    let options = DesignOptions::from_pairs(&args.params)?;
    let nvram_bytes = lab::device::parse_size(&args.nvram_size)?;
    let kill_at = args.kill_at.as_deref().map(parse_kill_at).transpose()?;
    let params = NvmfsParams {
        inode_count: args.inodes,
        ..NvmfsParams::default()
    };
    let existed = args.nvram.exists();
    let mut fs = nvmfs::ssd::open_or_create(
        &args.nvram,
        nvram_bytes,
        &args.ssd_image,
        &config,
        &design,
        &options,
        params,
    )?;
    fs.set_kill_point(kill_at);
    let (d, c, f, _) = fs.list_lengths();
    eprintln!(
        "mobius nvmfs: {} {} on {} ({} MiB), SSD {} by {}: {} dirty, {} clean, {} free NVRAM pages{}",
        if existed { "recovered" } else { "formatted" },
        args.nvram.display(),
        args.mountpoint.display(),
        fs.superblock().nvram_bytes >> 20,
        args.ssd_image.display(),
        design.name,
        d,
        c,
        f,
        if fs.stats().lists_reset_at_mount {
            " (LRU lists reset: the last run died mid-update)"
        } else {
            ""
        }
    );
    let flag = Arc::new(AtomicBool::new(false));
    nbd::transport::install_signal_handlers(&flag)?;
    let report = nvmfs::fuse::serve(fs, &args.mountpoint, &flag)?;
    if report.lazily_detached {
        eprintln!(
            "mobius nvmfs: {} was busy; detached lazily (the file system is closed; requests until the last user leaves get EIO)",
            args.mountpoint.display()
        );
    }
    let s = &report.stats;
    eprintln!(
        "mobius nvmfs: unmounted cleanly: {} flush rounds ({} pages to SSD), {} cleaning rounds (efficiency {:.3})",
        s.flush_rounds,
        s.ssd_pages_written,
        s.cleaning_rounds,
        s.cleaning_efficiency()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kill_points_parse() {
        assert_eq!(
            parse_kill_at("clean-after-commit:3").unwrap(),
            (KillPoint::CleanAfterCommit, 3)
        );
        assert_eq!(
            parse_kill_at("flush-after-ssd-write").unwrap(),
            (KillPoint::FlushAfterSsdWrite, 1)
        );
        assert!(parse_kill_at("nowhere:1").is_err());
        assert_eq!(lab::device::parse_size("64M").unwrap(), 64 << 20);
    }
}
