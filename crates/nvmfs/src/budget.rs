//! The same DRAM budget for every file system's cache (NVMFS §IV-A gives each file system the
//! same memory): NVMFS caches in its NVRAM, so a kernel file system's workload runs in a child
//! process inside a memory cgroup limited to the NVRAM's size. The kernel charges the page cache
//! a process fills (clean and dirty pages) to that process's cgroup; at the limit it reclaims,
//! writing dirty pages back to the SSD as NVMFS's flushing does when its NVRAM fills. The NBD
//! server, which owns the emulated SSD, stays outside the cgroup.
//!
//! The child is forked from this (multi-threaded) process and only runs the workload's file
//! calls, then leaves with `_exit`; its outcome comes back over a pipe. The workload keeps a
//! CRC per file rather than the files' bytes, so its own memory stays well under 1 MiB of the
//! budget.

use std::io::{Read, Write};
use std::os::fd::FromRawFd;
use std::path::PathBuf;

/// Why a budget could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum BudgetError {
    #[error("no memory cgroup controller on this machine (neither /sys/fs/cgroup/memory nor cgroup2 with memory): cannot give the kernel file system the NVRAM's DRAM budget")]
    NoController,
    #[error("memory cgroup {path}: {source}")]
    Cgroup {
        path: String,
        source: std::io::Error,
    },
    #[error("fork: {0}")]
    Fork(std::io::Error),
    #[error("the workload made no progress for {0} s (no SSD request, no byte written): killed")]
    Stalled(u64),
    #[error(
        "the workload process died without an outcome (status {0:#x}): killed by the memory limit?"
    )]
    ChildDied(i32),
}

/// A counter a forked child updates and its parent reads, even after the child was killed
/// (a shared anonymous page, mapped before the fork).
pub struct SharedCounter {
    ptr: *mut std::sync::atomic::AtomicU64,
}

// SAFETY: the mapping is a page-aligned AtomicU64, valid until drop.
unsafe impl Send for SharedCounter {}
unsafe impl Sync for SharedCounter {}

impl SharedCounter {
    pub fn new() -> std::io::Result<SharedCounter> {
        // SAFETY: a fresh shared anonymous mapping of one page, zeroed by the kernel.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(SharedCounter { ptr: ptr.cast() })
    }

    pub fn get(&self) -> &std::sync::atomic::AtomicU64 {
        // SAFETY: valid for the life of self (see new).
        unsafe { &*self.ptr }
    }
}

impl Drop for SharedCounter {
    fn drop(&mut self) {
        // SAFETY: unmaps the page mapped in new.
        unsafe { libc::munmap(self.ptr.cast(), 4096) };
    }
}

/// Whether a child's wait status says the kernel killed it (SIGKILL: the memory cgroup's OOM
/// killer when the budget could not be met by reclaim).
pub fn killed(status: i32) -> bool {
    libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGKILL
}

/// A memory cgroup with a limit, removed on drop.
pub struct MemoryBudget {
    dir: PathBuf,
    bytes: u64,
}

impl MemoryBudget {
    /// A new cgroup `name` limited to `bytes` (cgroup v1's memory controller, else cgroup v2).
    pub fn create(name: &str, bytes: u64) -> Result<MemoryBudget, BudgetError> {
        let v1 = PathBuf::from("/sys/fs/cgroup/memory");
        let v2 = PathBuf::from("/sys/fs/cgroup");
        let (dir, limit_file) = if v1.join("memory.limit_in_bytes").exists() {
            (v1.join(name), "memory.limit_in_bytes")
        } else if std::fs::read_to_string(v2.join("cgroup.controllers"))
            .is_ok_and(|c| c.split_whitespace().any(|x| x == "memory"))
        {
            (v2.join(name), "memory.max")
        } else {
            return Err(BudgetError::NoController);
        };
        let shown = dir.display().to_string();
        let err = |source| BudgetError::Cgroup {
            path: shown.clone(),
            source,
        };
        if !dir.exists() {
            std::fs::create_dir(&dir).map_err(err)?;
        }
        let budget = MemoryBudget { dir, bytes };
        std::fs::write(budget.dir.join(limit_file), bytes.to_string()).map_err(err)?;
        Ok(budget)
    }

    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Runs `work` in a child process inside the cgroup and returns what it sent back. A
    /// watchdog: if `progress` (the SSD's requests and the bytes written, say) stays the same
    /// for `stall`, the child is killed and the answer is [`BudgetError::Stalled`] — a file
    /// system that blocks its writer for good (nilfs2 full with dirty pages it cannot write
    /// back) ends the run instead of hanging it.
    pub fn run_in_child(
        &self,
        work: impl FnOnce() -> Vec<u8>,
        progress: &dyn Fn() -> u64,
        stall: std::time::Duration,
    ) -> Result<Vec<u8>, BudgetError> {
        let procs = self.dir.join("cgroup.procs");
        let mut fds = [0i32; 2];
        // SAFETY: pipe(2) fills the two descriptors.
        if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
            return Err(BudgetError::Fork(std::io::Error::last_os_error()));
        }
        // SAFETY: the child only joins the cgroup, runs the workload's file calls and leaves
        // with _exit (no unwinding, no destructors of the parent's state).
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(BudgetError::Fork(std::io::Error::last_os_error()));
        }
        if pid == 0 {
            // SAFETY: fds[0] is ours; fds[1] becomes the child's File.
            unsafe { libc::close(fds[0]) };
            let mut out = unsafe { std::fs::File::from_raw_fd(fds[1]) };
            let joined = std::fs::write(&procs, "0");
            let reply = match joined {
                Ok(()) => std::panic::catch_unwind(std::panic::AssertUnwindSafe(work))
                    .unwrap_or_else(|_| b"\x02the workload panicked".to_vec()),
                Err(e) => format!("\x02joining {}: {e}", procs.display()).into_bytes(),
            };
            let _ = out.write_all(&reply);
            // SAFETY: leave without running the parent's destructors or atexit handlers.
            unsafe { libc::_exit(0) };
        }
        // SAFETY: fds[1] is the child's end; fds[0] becomes our File.
        unsafe { libc::close(fds[1]) };
        let input = unsafe { std::fs::File::from_raw_fd(fds[0]) };
        let (reply, stalled) = read_watched(input, progress, stall);
        if stalled {
            // SAFETY: kills the child we forked (a FUSE request it waits on is killable).
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        let mut status = 0;
        // SAFETY: waits for the child we forked.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        if stalled {
            return Err(BudgetError::Stalled(stall.as_secs()));
        }
        if reply.is_empty() {
            return Err(BudgetError::ChildDied(status));
        }
        Ok(reply)
    }

    /// The cgroup's failure count: how often the limit was hit (reclaim ran).
    pub fn limit_hits(&self) -> u64 {
        let read = |f: &str| std::fs::read_to_string(self.dir.join(f)).ok();
        read("memory.failcnt")
            .and_then(|s| s.trim().parse().ok())
            .or_else(|| {
                read("memory.events").and_then(|s| {
                    s.lines()
                        .find_map(|l| l.strip_prefix("max ").and_then(|n| n.trim().parse().ok()))
                })
            })
            .unwrap_or(0)
    }

    /// The most memory the cgroup held (cgroup v1; `None` on v2).
    pub fn peak_bytes(&self) -> Option<u64> {
        std::fs::read_to_string(self.dir.join("memory.max_usage_in_bytes"))
            .ok()
            .and_then(|s| s.trim().parse().ok())
    }
}

/// Reads `input` to its end, unless `progress` stays the same for `stall` first: (what was
/// read, whether it stalled).
fn read_watched(
    mut input: std::fs::File,
    progress: &dyn Fn() -> u64,
    stall: std::time::Duration,
) -> (Vec<u8>, bool) {
    use std::os::fd::AsRawFd;
    let mut reply = Vec::new();
    let (mut seen, mut since) = (progress(), std::time::Instant::now());
    loop {
        let mut poll = libc::pollfd {
            fd: input.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd, a timeout of one second.
        let ready = unsafe { libc::poll(&mut poll, 1, 1000) };
        if ready > 0 {
            let mut chunk = [0u8; 4096];
            match input.read(&mut chunk) {
                Ok(0) => return (reply, false),
                Ok(n) => reply.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => return (reply, false),
            }
        }
        let now = progress();
        if now != seen {
            (seen, since) = (now, std::time::Instant::now());
        } else if since.elapsed() >= stall {
            return (reply, true);
        }
    }
}

impl Drop for MemoryBudget {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A budget of `bytes` for a test; needs root and a memory controller (this machine has
    /// both): elsewhere `None`, having said why.
    fn test_budget(name: &str, bytes: u64) -> Option<MemoryBudget> {
        MemoryBudget::create(name, bytes)
            .inspect_err(|e| eprintln!("skipped: {e}"))
            .ok()
    }

    #[test]
    fn a_child_fills_no_more_page_cache_than_its_budget() {
        let name = format!("mobius-budget-test-{}", std::process::id());
        let Some(budget) = test_budget(&name, 4 << 20) else {
            return;
        };
        let dir = std::env::temp_dir().join(&name);
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("f");
        let work = || {
            let data = vec![7u8; 1 << 20];
            let mut f = std::fs::File::create(&file).unwrap();
            for _ in 0..24 {
                f.write_all(&data).unwrap();
            }
            b"\x00done".to_vec()
        };
        let reply = budget
            .run_in_child(work, &|| 0, std::time::Duration::from_secs(600))
            .unwrap();
        assert_eq!(reply, b"\x00done");
        assert_eq!(std::fs::metadata(&file).unwrap().len(), 24 << 20);
        if let Some(peak) = budget.peak_bytes() {
            assert!(peak <= 4 << 20, "peak {peak}");
        }
        assert!(
            budget.limit_hits() > 0,
            "24 MiB through a 4 MiB budget never hit the limit"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The watchdog: a child that blocks for good while nothing progresses is killed and
    /// reported as stalled; one that keeps progressing, though slower than the stall time in
    /// all, is left to finish.
    #[test]
    fn a_child_that_makes_no_progress_is_killed_and_one_that_does_is_not() {
        let name = format!("mobius-budget-stall-{}", std::process::id());
        let Some(budget) = test_budget(&name, 16 << 20) else {
            return;
        };
        let stall = std::time::Duration::from_secs(2);
        let blocked = || {
            std::thread::sleep(std::time::Duration::from_secs(30));
            b"\x00never".to_vec()
        };
        match budget.run_in_child(blocked, &|| 7, stall) {
            Err(BudgetError::Stalled(2)) => {}
            other => panic!("{other:?}"),
        }
        let ticks = SharedCounter::new().unwrap();
        let slow = || {
            for _ in 0..5 {
                std::thread::sleep(std::time::Duration::from_millis(1200));
                ticks
                    .get()
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            b"\x00done".to_vec()
        };
        let progress = || ticks.get().load(std::sync::atomic::Ordering::Relaxed);
        assert_eq!(
            budget.run_in_child(slow, &progress, stall).unwrap(),
            b"\x00done"
        );
    }
}
