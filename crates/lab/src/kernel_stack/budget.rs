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
use std::path::{Path, PathBuf};

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
    #[error("the workload made no progress for {seconds} s (no SSD request, no byte written): killed{woken}")]
    Stalled {
        seconds: u64,
        /// How the killed child was woken if SIGKILL alone did not end it (empty if it did).
        woken: String,
    },
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
    /// back) ends the run instead of hanging it. A killed child still blocked on a FUSE request
    /// its server never answers is woken by aborting the FUSE connections mounted at or under
    /// `mounts` ([`reap_stalled`]).
    pub fn run_in_child(
        &self,
        work: impl FnOnce() -> Vec<u8>,
        progress: &dyn Fn() -> u64,
        stall: std::time::Duration,
        mounts: &Path,
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
            // SAFETY: kills the child we forked.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            return Err(BudgetError::Stalled {
                seconds: stall.as_secs(),
                woken: reap_stalled(pid, mounts),
            });
        }
        let mut status = 0;
        // SAFETY: waits for the child we forked.
        unsafe { libc::waitpid(pid, &mut status, 0) };
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

/// How long a killed child gets to end on SIGKILL alone, and then after its FUSE connections
/// were aborted.
const KILL_GRACE: std::time::Duration = std::time::Duration::from_secs(5);
const ABORT_GRACE: std::time::Duration = std::time::Duration::from_secs(60);

/// Reaps a child just sent SIGKILL. A child blocked on a FUSE request its server has read
/// sleeps uninterruptibly with the signal pending until the request is answered, which a
/// stalled server (a libguestfs appliance behind `guestfish mount-local`) never does: after
/// [`KILL_GRACE`] the FUSE connections mounted at or under `mounts` are aborted
/// ([`super::fusectl`]), which fails the request and lets the signal act. A child still alive
/// [`ABORT_GRACE`] later is left to a thread that reaps it whenever it ends. Returns how the
/// child was woken, as a clause for [`BudgetError::Stalled`] (empty if SIGKILL was enough).
fn reap_stalled(pid: libc::pid_t, mounts: &Path) -> String {
    if wait_within(pid, KILL_GRACE) {
        return String::new();
    }
    let aborted = match super::fusectl::abort_fuse_mounts_under(mounts) {
        Ok(m) if m.is_empty() => format!("; no FUSE mount under {} to abort", mounts.display()),
        Ok(m) => {
            let at: Vec<String> = m
                .iter()
                .map(|m| m.mountpoint.display().to_string())
                .collect();
            format!(
                "; SIGKILL did not end it, so the FUSE connection(s) at {} were aborted",
                at.join(", ")
            )
        }
        Err(e) => {
            format!("; SIGKILL did not end it and its FUSE connections could not be aborted ({e})")
        }
    };
    if wait_within(pid, ABORT_GRACE) {
        return aborted;
    }
    std::thread::spawn(move || {
        let mut status = 0;
        // SAFETY: waits for the child we forked; nobody else waits for it.
        unsafe { libc::waitpid(pid, &mut status, 0) };
    });
    format!(
        "{aborted}; it was still blocked {} s later and is left to be reaped when it ends",
        ABORT_GRACE.as_secs()
    )
}

/// Whether child `pid` ended (and was reaped) within `limit`.
fn wait_within(pid: libc::pid_t, limit: std::time::Duration) -> bool {
    let start = std::time::Instant::now();
    loop {
        let mut status = 0;
        // SAFETY: polls the child we forked without blocking.
        if unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) } != 0 {
            return true;
        }
        if start.elapsed() >= limit {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
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
            .run_in_child(work, &|| 0, std::time::Duration::from_secs(600), &dir)
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
        let nowhere = std::env::temp_dir().join(&name);
        match budget.run_in_child(blocked, &|| 7, stall, &nowhere) {
            Err(BudgetError::Stalled { seconds: 2, woken }) => assert_eq!(woken, ""),
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
            budget
                .run_in_child(slow, &progress, stall, &nowhere)
                .unwrap(),
            b"\x00done"
        );
    }

    /// A FUSE file system whose writes are read and never answered (the replies are parked,
    /// so fuser cannot answer them with EIO on drop): a writer blocks uninterruptibly.
    struct NeverAnswersWrites {
        parked: std::sync::Mutex<Vec<fuser::ReplyWrite>>,
    }

    fn attr(ino: u64, kind: fuser::FileType) -> fuser::FileAttr {
        let t = std::time::UNIX_EPOCH;
        fuser::FileAttr {
            ino: fuser::INodeNo(ino),
            size: 0,
            blocks: 0,
            atime: t,
            mtime: t,
            ctime: t,
            crtime: t,
            kind,
            perm: 0o777,
            nlink: 1,
            uid: 0,
            gid: 0,
            rdev: 0,
            blksize: 4096,
            flags: 0,
        }
    }

    impl fuser::Filesystem for NeverAnswersWrites {
        fn lookup(
            &self,
            _req: &fuser::Request,
            parent: fuser::INodeNo,
            name: &std::ffi::OsStr,
            reply: fuser::ReplyEntry,
        ) {
            match (parent.0, name.to_str()) {
                (1, Some("f")) => reply.entry(
                    &std::time::Duration::ZERO,
                    &attr(2, fuser::FileType::RegularFile),
                    fuser::Generation(0),
                ),
                _ => reply.error(fuser::Errno::ENOENT),
            }
        }

        fn getattr(
            &self,
            _req: &fuser::Request,
            ino: fuser::INodeNo,
            _fh: Option<fuser::FileHandle>,
            reply: fuser::ReplyAttr,
        ) {
            match ino.0 {
                1 => reply.attr(
                    &std::time::Duration::ZERO,
                    &attr(1, fuser::FileType::Directory),
                ),
                2 => reply.attr(
                    &std::time::Duration::ZERO,
                    &attr(2, fuser::FileType::RegularFile),
                ),
                _ => reply.error(fuser::Errno::ENOENT),
            }
        }

        fn write(
            &self,
            _req: &fuser::Request,
            _ino: fuser::INodeNo,
            _fh: fuser::FileHandle,
            _offset: u64,
            _data: &[u8],
            _write_flags: fuser::WriteFlags,
            _flags: fuser::OpenFlags,
            _lock_owner: Option<fuser::LockOwner>,
            reply: fuser::ReplyWrite,
        ) {
            self.parked.lock().unwrap().push(reply);
        }
    }

    /// The watchdog's kill reaches a child blocked on a FUSE write its server never answers
    /// (SIGKILL alone leaves it asleep in `request_wait_answer`): the connection is aborted
    /// and the run comes back as stalled instead of hanging. Before the abort was built this
    /// test hung; the thread and its deadline turn a hang into a failure.
    #[test]
    fn a_child_blocked_on_an_unanswered_fuse_request_is_still_reaped() {
        let name = format!("mobius-budget-fuse-{}", std::process::id());
        let Some(budget) = test_budget(&name, 16 << 20) else {
            return;
        };
        let dir = std::env::temp_dir().join(&name);
        let mnt = dir.join("mnt");
        std::fs::create_dir_all(&mnt).unwrap();
        let fs = NeverAnswersWrites {
            parked: Default::default(),
        };
        let session = match fuser::spawn_mount(fs, &mnt, &fuser::Config::default()) {
            Ok(s) => s,
            Err(e) => return eprintln!("skipped: no FUSE mount here ({e})"),
        };
        let file = mnt.join("f");
        let (done, outcome) = std::sync::mpsc::channel();
        let scope = dir.clone();
        std::thread::spawn(move || {
            let write = || {
                let mut f = std::fs::OpenOptions::new().write(true).open(&file).unwrap();
                let _ = f.write_all(&[1u8; 4096]);
                b"\x00answered".to_vec()
            };
            let stall = std::time::Duration::from_secs(2);
            let _ = done.send(budget.run_in_child(write, &|| 7, stall, &scope));
        });
        let deadline = std::time::Duration::from_secs(KILL_GRACE.as_secs() + 120);
        let outcome = outcome.recv_timeout(deadline);
        // Whatever happened, wake anything still blocked on the mount, or the session's
        // thread (joined on drop) would wait for it for ever.
        let _ = crate::kernel_stack::fusectl::abort_fuse_mounts_under(&dir);
        let _ = std::process::Command::new("fusermount3")
            .args(["-u", "-z"])
            .arg(&mnt)
            .status();
        drop(session);
        let _ = std::fs::remove_dir_all(&dir);
        match outcome {
            Ok(Err(BudgetError::Stalled { seconds: 2, woken })) => {
                assert!(woken.contains("were aborted"), "{woken}");
                assert!(woken.contains(&mnt.display().to_string()), "{woken}");
                assert!(!woken.contains("left to be reaped"), "{woken}");
            }
            other => panic!("{other:?}"),
        }
    }
}
