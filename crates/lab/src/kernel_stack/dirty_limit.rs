//! A dirty-page limit for one file system on this machine, as Linux gives a machine whose
//! memory is the DRAM budget: its default `vm.dirty_ratio` (20 %) and
//! `vm.dirty_background_ratio` (10 %) of that memory.
//!
//! Why per device: a kernel file system here caches in a memory cgroup of the DRAM budget
//! ([`super::budget`]), and a cgroup-v1 memory controller has no dirty limit of its own
//! (cgroup v2's writeback domains are v2 only): its pages may all be dirty, bounded by the
//! budget alone, where the paper's testbed (NVMFS §IV-A: 4 GB of DRAM) wrote back at 20 % of
//! it. Linux ≥ 6.2 can bound one backing device's dirty pages instead:
//! `/sys/class/bdi/<bdi>/max_bytes` (converted by the kernel to a share of the machine's dirty
//! threshold, read back here as bytes) with `strict_limit`, which applies that share even while
//! the machine as a whole is under its own threshold. The background threshold follows at half
//! the limit, as 10 % is half of 20 %. Nothing else on the machine is limited.
//! On drop the devices go back to the kernel's defaults (no share of their own, not strict), not
//! to what they held before: loop devices outlive their attachments, so a run killed before it
//! lifted its limit would otherwise hand it on, as "the setting before", to every later run.

use std::path::{Path, PathBuf};

use super::error::{KernelStackError, Result};

/// The share of the DRAM budget that may be dirty: Linux's default `vm.dirty_ratio`, 20 %.
pub const DIRTY_RATIO_PERCENT: u64 = 20;

/// The dirty limit for a DRAM budget of `budget_bytes` (Linux's default ratio of it).
pub fn dirty_limit_bytes(budget_bytes: u64) -> u64 {
    budget_bytes * DIRTY_RATIO_PERCENT / 100
}

/// Dirty-page limits on backing devices, lifted on drop.
#[derive(Debug)]
pub struct DirtyLimit {
    bdis: Vec<PathBuf>,
    bytes: u64,
}

impl DirtyLimit {
    /// Limits each backing device in `bdis` (directories under `/sys/class/bdi`) to `bytes` of
    /// dirty pages, strictly. Fails, naming the file, on a kernel without `max_bytes` (< 6.2).
    pub fn set(bdis: &[PathBuf], bytes: u64) -> Result<DirtyLimit> {
        let mut limit = DirtyLimit {
            bdis: Vec::new(),
            bytes: 0,
        };
        for dir in bdis {
            read(dir, "max_bytes")?;
            limit.bdis.push(dir.clone());
            write(dir, "max_bytes", &bytes.to_string())?;
            write(dir, "strict_limit", "1")?;
        }
        limit.bytes = match bdis.first() {
            Some(dir) => read(dir, "max_bytes")?.parse().map_err(|e| {
                unavailable(dir, "max_bytes", format!("not a number of bytes: {e}"))
            })?,
            None => 0,
        };
        Ok(limit)
    }

    /// The limit as the kernel holds it (a share of its dirty threshold, in bytes, so within a
    /// page or so of what was asked).
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

/// A backing device's defaults: the whole of the machine's threshold may be its, not strictly.
const DEFAULT_MAX_RATIO: &str = "100";
const DEFAULT_STRICT_LIMIT: &str = "0";

impl Drop for DirtyLimit {
    fn drop(&mut self) {
        // A device gone by now (btrfs's own, after its unmount) has nothing to put back.
        for dir in self.bdis.iter().rev() {
            let _ = write(dir, "max_ratio", DEFAULT_MAX_RATIO);
            let _ = write(dir, "strict_limit", DEFAULT_STRICT_LIMIT);
        }
    }
}

/// The backing device of block device `dev` (`/dev/loop3` → `/sys/class/bdi/7:3`).
pub fn block_device_bdi(dev: &str) -> Result<PathBuf> {
    let name = Path::new(dev)
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or(dev);
    let numbers = Path::new("/sys/block").join(name).join("dev");
    let id =
        std::fs::read_to_string(&numbers).map_err(|e| unavailable(&numbers, "", e.to_string()))?;
    Ok(Path::new("/sys/class/bdi").join(id.trim()))
}

/// The backing device a file system mounted from block device `dev` writes back through: the
/// device's own for ext4 and xfs; btrfs registers one of its own (`btrfs-N`), named by
/// `/sys/fs/btrfs/<uuid>/bdi` for the file system whose `devices/` holds `dev`.
pub fn mounted_bdis(dev: &str) -> Result<Vec<PathBuf>> {
    let mut bdis = vec![block_device_bdi(dev)?];
    let name = Path::new(dev).file_name().unwrap_or_default();
    if let Ok(entries) = std::fs::read_dir("/sys/fs/btrfs") {
        for fs in entries.flatten().map(|e| e.path()) {
            if fs.join("devices").join(name).exists() {
                let bdi = std::fs::canonicalize(fs.join("bdi"))
                    .map_err(|e| unavailable(&fs, "bdi", e.to_string()))?;
                bdis.push(bdi);
            }
        }
    }
    Ok(bdis)
}

fn read(dir: &Path, file: &str) -> Result<String> {
    std::fs::read_to_string(dir.join(file))
        .map(|s| s.trim().to_string())
        .map_err(|e| unavailable(dir, file, e.to_string()))
}

fn write(dir: &Path, file: &str, value: &str) -> Result<()> {
    std::fs::write(dir.join(file), value).map_err(|e| KernelStackError::Command {
        command: format!("echo {value} > {}", dir.join(file).display()),
        reason: e.to_string(),
    })
}

fn unavailable(dir: &Path, file: &str, reason: String) -> KernelStackError {
    KernelStackError::Unavailable(format!(
        "cannot limit dirty pages per device ({}: {reason}); needs Linux ≥ 6.2 (/sys/class/bdi/*/max_bytes, strict_limit)",
        dir.join(file).display()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_limit_is_linux_default_share_of_the_budget() {
        assert_eq!(dirty_limit_bytes(8 << 20), 8 * (1 << 20) / 5);
        assert_eq!(dirty_limit_bytes(0), 0);
    }

    #[test]
    fn a_missing_device_is_a_clear_error() {
        let err = block_device_bdi("/dev/no-such-device").expect_err("no device");
        assert!(err.to_string().contains("no-such-device"), "{err}");
        let dir = tempfile::tempdir().unwrap();
        let err = DirtyLimit::set(&[dir.path().to_path_buf()], 1 << 20).expect_err("no max_bytes");
        assert!(err.to_string().contains("6.2"), "{err}");
    }

    /// On a kernel that has the knobs, and as root: a detached loop device's limit is set,
    /// read back within a few pages of the request, and lifted to the defaults on drop, also
    /// when a run killed before its drop had left a limit behind.
    #[test]
    fn a_loop_device_is_limited_and_restored() {
        // A loop device nobody has attached (an experiment running beside the tests may hold
        // a limit on its own).
        let detached = (0..8).map(|n| format!("/dev/loop{n}")).find(|dev| {
            let name = dev.trim_start_matches("/dev/");
            let sys = Path::new("/sys/block").join(name);
            sys.exists() && !sys.join("loop/backing_file").exists()
        });
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        let dir = match detached.map(|dev| block_device_bdi(&dev)) {
            Some(Ok(dir)) if root && dir.join("max_bytes").exists() => dir,
            _ => {
                eprintln!("skipped: no detached loop device with max_bytes, or not root");
                return;
            }
        };
        let dir = dir.as_path();
        write(dir, "max_bytes", &(1u64 << 20).to_string()).unwrap(); // a killed run's leftover
        write(dir, "strict_limit", "1").unwrap();
        {
            let limit = DirtyLimit::set(&[dir.to_path_buf()], 2 << 20).unwrap();
            let got = limit.bytes() as i64;
            assert!((got - (2 << 20)).abs() < 64 << 10, "{got}");
            assert_eq!(read(dir, "strict_limit").unwrap(), "1");
        }
        assert_eq!(read(dir, "max_ratio").unwrap(), DEFAULT_MAX_RATIO);
        assert_eq!(read(dir, "strict_limit").unwrap(), DEFAULT_STRICT_LIMIT);
    }
}
