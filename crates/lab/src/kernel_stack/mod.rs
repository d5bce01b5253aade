//! Our SSD under a kernel file system: an NBD export → `nbdfuse` → `losetup --direct-io=on` →
//! `mkfs` → `mount`, torn down in reverse when the [`KernelStack`] is dropped, also after a
//! step failed. Needs root, /dev/fuse, nbdfuse and losetup ([`kernel_fs_available`] says which
//! is missing).
//!
//! The export is either the design served from a thread of this process exactly as `mobius
//! serve` serves it (the one host layer; [`Export::InProcess`]): the NVMFS experiment (ext4,
//! btrfs, xfs, nilfs2 beside NVMFS) and OPTR's SQLite-on-ext4 experiment, which read the
//! server's counters while it serves; or a server someone else runs ([`Export::Uri`]): the
//! database and file-system trials start `mobius serve` processes and `kill -9` them.
//!
//! Every step but those whose time grows with the device runs under coreutils `timeout`
//! (nbdfuse(1) warns that loop devices on its file can hang); the trials bound those too
//! ([`Timeouts`]). The loop device uses direct I/O: a buffered one would hold writes in this
//! machine's page cache and reorder them on the way to the device, under the very file system
//! whose ordering is tested.
//!
//! The server itself is the `nbd` crate's, handed in as an [`NbdExport`] (that crate builds on
//! this one, so it cannot be named here). Beside the stack: the file system's dirty-page limit
//! ([`dirty_limit`]), its DRAM budget as a memory cgroup ([`budget`]), aborting stuck FUSE
//! connections ([`fusectl`]) and nilfs2 in a libguestfs appliance ([`appliance`]).

pub mod appliance;
pub mod budget;
pub mod dirty_limit;
mod error;
pub mod fusectl;
mod nbdfuse;
mod tools;

pub use appliance::{nilfs_blocks_per_segment, nilfs_cleaner_conf, Appliance};
pub use error::{KernelStackError, Result};
pub use nbdfuse::Nbdfuse;
pub use tools::{kernel_fs_available, kernel_has, run_within, sh, sh_within, tool_missing};

use appliance::CLEANER_STOPPED;
use std::io::{Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;
use tools::{is_mount_point, kernel_prerequisites, kill_processes_naming, wait_for};

/// An NBD server of the SSD (the `nbd` crate's `Server`), served on a Unix socket by a thread
/// of this process until it is stopped.
pub trait NbdExport: Send + Sync + 'static {
    /// Serves clients on `socket` until [`stop`](Self::stop) is called; returns then.
    fn serve_unix(&self, socket: &Path);
    /// Asks the server to stop: its accept loop and every connection end.
    fn stop(&self);
}

/// Where the stack's NBD export comes from.
pub enum Export {
    /// A server of this process, served on the Unix socket `<nbdfuse's directory>.sock` by a
    /// thread until the stack is dropped. The caller keeps its own handle on the server, to
    /// read its counters while it serves.
    InProcess(Arc<dyn NbdExport>),
    /// A server someone else runs, at this NBD URI (`nbd+unix:///?socket=PATH`): a `mobius
    /// serve` process, which a trial can `kill -9` under the mounted file system.
    Uri(String),
}

/// How long the steps whose time grows with the device may run (seconds; `None`: as long as
/// they take): making the file system, mounting it, and unmounting it, which writes back every
/// dirty page. The other steps have fixed bounds: `losetup` 30 s, `fusermount3` 20 s,
/// `fsck.ext4` 120 s, the unmount on drop 60 s before a lazy one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeouts {
    pub mkfs: Option<u32>,
    pub mount: Option<u32>,
    pub umount: Option<u32>,
}

impl Timeouts {
    /// A trial's: a step that hangs fails the trial instead of hanging the test run.
    pub const BOUNDED: Timeouts = Timeouts {
        mkfs: Some(120),
        mount: Some(60),
        umount: Some(60),
    };
    /// An experiment's: the steps take as long as the device needs (an unmount writes back
    /// what the page cache holds, gigabytes at the paper scale; stalls are the experiment's to
    /// detect, [`KernelStack::abandon_fs`]).
    pub const UNBOUNDED: Timeouts = Timeouts {
        mkfs: None,
        mount: None,
        umount: None,
    };
}

/// An in-process export and the thread serving it; stopped and joined when dropped.
struct Serving {
    export: Arc<dyn NbdExport>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Serving {
    /// Serves `export` on `socket` from a new thread; waits (up to 2 s) for the socket.
    fn start(export: Arc<dyn NbdExport>, socket: &Path) -> Serving {
        let serving = Arc::clone(&export);
        let at = socket.to_path_buf();
        let thread = std::thread::spawn(move || serving.serve_unix(&at));
        wait_for(200, Duration::from_millis(10), || socket.exists());
        Serving {
            export,
            thread: Some(thread),
        }
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        self.export.stop();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Everything set up for a kernel file system; torn down in reverse order on drop.
pub struct KernelStack {
    serving: Option<Serving>,
    nbdfuse: Option<Nbdfuse>,
    fuse_dir: PathBuf,
    loop_dev: Option<String>,
    mnt: Option<PathBuf>,
    timeouts: Timeouts,
    /// The `guestfish` serving the file system from a libguestfs appliance ([`Appliance`]).
    appliance: Option<Child>,
    /// The dirty-page limit on the file system's backing devices, lifted after the unmount.
    dirty_limit: Option<dirty_limit::DirtyLimit>,
}

impl KernelStack {
    /// Attaches `export` as a loop device: `nbdfuse` at `fuse_dir` (made if missing; the
    /// export is the file `fuse_dir/nbd`), then `losetup --direct-io=on`. What was set up
    /// when a step fails is torn down before the error returns.
    pub fn attach(export: Export, fuse_dir: &Path, timeouts: Timeouts) -> Result<KernelStack> {
        let (serving, uri) = match export {
            Export::Uri(uri) => (None, uri),
            Export::InProcess(export) => {
                let socket = fuse_dir.with_extension("sock");
                let uri = format!("nbd+unix:///?socket={}", socket.display());
                (Some(Serving::start(export, &socket)), uri)
            }
        };
        let mut stack = KernelStack {
            serving,
            nbdfuse: None,
            fuse_dir: fuse_dir.to_path_buf(),
            loop_dev: None,
            mnt: None,
            timeouts,
            appliance: None,
            dirty_limit: None,
        };
        let nbdfuse = stack.nbdfuse.insert(Nbdfuse::start(fuse_dir, &uri)?);
        let file = nbdfuse.file();
        let loop_dev = sh_within(
            Command::new("losetup")
                .args(["--direct-io=on", "-f", "--show"])
                .arg(&file),
            Some(30),
        )?;
        if !loop_dev.starts_with("/dev/loop") {
            return Err(KernelStackError::Command {
                command: format!("losetup --direct-io=on -f --show {}", file.display()),
                reason: format!("printed {loop_dev:?}, not a loop device"),
            });
        }
        stack.loop_dev = Some(loop_dev);
        Ok(stack)
    }

    /// The loop device the export is attached to.
    pub fn loop_dev(&self) -> &str {
        self.loop_dev.as_deref().expect("attached by attach")
    }

    /// Where the file system is mounted.
    pub fn mount_point(&self) -> &Path {
        self.mnt.as_deref().expect("mounted by mount")
    }

    /// Makes a `kind` file system on the loop device with the options the experiments use
    /// ([`make_fs`](Self::make_fs)) and mounts it at `mnt` with `options`
    /// ([`mount`](Self::mount)).
    pub fn make_and_mount(&mut self, kind: &str, mnt: &Path, options: &str) -> Result<()> {
        self.make_fs(kind)?;
        self.mount(mnt, options)
    }

    /// Mounts the loop device's file system at `mnt` (made if missing) with `options`
    /// (`mount -o`; none when empty).
    pub fn mount(&mut self, mnt: &Path, options: &str) -> Result<()> {
        std::fs::create_dir_all(mnt)?;
        let loop_dev = self.loop_dev().to_string();
        let mut mount = Command::new("mount");
        if !options.is_empty() {
            mount.args(["-o", options]);
        }
        sh_within(mount.arg(&loop_dev).arg(mnt), self.timeouts.mount)?;
        self.mnt = Some(mnt.to_path_buf());
        Ok(())
    }

    /// `fsck.ext4 -fn` on the loop device (up to 120 s): `Ok` when the file system is clean,
    /// else an error whose reason is fsck's whole report.
    pub fn fsck_ext4(&self) -> Result<()> {
        let mut fsck = Command::new("fsck.ext4");
        fsck.args(["-fn", self.loop_dev()]);
        let out = run_within(&mut fsck, Some(120))?;
        if out.status.success() {
            return Ok(());
        }
        Err(KernelStackError::Command {
            command: format!("{fsck:?}"),
            reason: format!(
                "{}\nstdout: {}\nstderr: {}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        })
    }

    /// The loop device's size in bytes (the SSD's exported capacity).
    fn loop_dev_bytes(&self) -> Result<u64> {
        Ok(std::fs::File::open(self.loop_dev())?.seek(SeekFrom::End(0))?)
    }

    /// Bounds the dirty pages of the file system on the loop device (mounted by this kernel,
    /// or by an appliance, whose writes reach the loop device through this machine's page
    /// cache) to `bytes`, until the stack is dropped ([`dirty_limit`]); returns the
    /// limit as the kernel holds it.
    pub fn limit_dirty(&mut self, bytes: u64) -> Result<u64> {
        let bdis = dirty_limit::mounted_bdis(self.loop_dev())?;
        let limit = dirty_limit::DirtyLimit::set(&bdis, bytes)?;
        let held = limit.bytes();
        self.dirty_limit = Some(limit);
        Ok(held)
    }

    /// Makes a nilfs2 file system on the loop device and mounts it at `mnt` through a
    /// libguestfs appliance ([`Appliance`]), whose own kernel has the file system this one
    /// lacks: the appliance opens the loop device as its disk, runs nilfs2's cleaner with
    /// [`nilfs_cleaner_conf`], and `guestfish`'s `mount-local` serves the files to this
    /// machine over FUSE until [`unmount_fs`](Self::unmount_fs). The appliance's page cache
    /// holds at most `dirty_bytes` of dirty pages, and starts writing back at half of that (as
    /// Linux's default 10 % is half its 20 %; set at its boot: it has no memory cgroup).
    pub fn make_and_mount_nilfs2_in_appliance(
        &mut self,
        mnt: &Path,
        dirty_bytes: u64,
    ) -> Result<()> {
        self.make_fs("nilfs2")?;
        let loop_dev = self.loop_dev().to_string();
        let volume_bytes = self.loop_dev_bytes()?;
        let cleaner = nilfs_cleaner_conf(volume_bytes, dirty_bytes);
        let script = self.fuse_dir.with_extension("guestfish");
        std::fs::write(&script, Appliance::nilfs2_script(mnt, &cleaner))?;
        // Its output goes to a file: a pipe nobody reads until the end fills and blocks it,
        // and with it every request to the mount.
        let log = std::fs::File::create(self.appliance_log())?;
        let mut guestfish = Command::new("guestfish");
        Appliance::environment(&mut guestfish, dirty_bytes);
        let child = guestfish
            .args(["--format=raw", "-a", &loop_dev, "-f"])
            .arg(&script)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .map_err(KernelStackError::from)?;
        self.appliance = Some(child);
        self.mnt = Some(mnt.to_path_buf());
        let target = mnt.canonicalize()?;
        wait_for(1800, Duration::from_millis(100), || {
            is_mount_point(&target) || self.appliance_exited()
        });
        if !is_mount_point(&target) {
            self.mnt = None;
            let why = self.stop_appliance();
            return Err(KernelStackError::Command {
                command: format!("guestfish -a {loop_dev} (mount-local {})", mnt.display()),
                reason: format!("not mounted after 3 min: {why}"),
            });
        }
        Ok(())
    }

    /// Where `guestfish` writes its output.
    fn appliance_log(&self) -> PathBuf {
        self.fuse_dir.with_extension("guestfish.log")
    }

    fn appliance_exited(&mut self) -> bool {
        self.appliance
            .as_mut()
            .is_none_or(|c| matches!(c.try_wait(), Ok(Some(_))))
    }

    /// Waits (up to five minutes) for the appliance to shut down, killing it after that; its
    /// exit status and the last line of its output.
    fn stop_appliance(&mut self) -> String {
        let Some(mut child) = self.appliance.take() else {
            return "no appliance".into();
        };
        wait_for(3000, Duration::from_millis(100), || {
            matches!(child.try_wait(), Ok(Some(_)))
        });
        let _ = child.kill();
        let log = std::fs::read_to_string(self.appliance_log());
        let last = log
            .as_deref()
            .unwrap_or("")
            .lines()
            .last()
            .unwrap_or("")
            .trim()
            .to_string();
        match child.wait() {
            Ok(status) => format!("{status} {last}"),
            Err(e) => e.to_string(),
        }
    }

    /// Makes a `kind` file system on the loop device with the options the experiments use.
    fn make_fs(&mut self, kind: &str) -> Result<()> {
        let args: Vec<String> = match kind {
            "ext4" => vec!["-q".into(), "-F".into(), "-b".into(), "4096".into()],
            "xfs" => vec!["-q".into(), "-f".into()],
            // Mixed block groups (btrfs's own advice below 1 GiB, and the only way it makes a
            // file system under 114 MiB), one copy of everything as on the other file systems
            // (the default duplicates metadata, which mixed groups hold the data in too).
            "btrfs" => ["-q", "-f", "-M", "-m", "single", "-d", "single"]
                .map(String::from)
                .to_vec(),
            // Segments of at most 1 MiB (nilfs_blocks_per_segment): the default 8 MiB ones need
            // more than 128 MiB. Made here; mounted in the appliance (this kernel has no nilfs2).
            "nilfs2" => {
                let blocks = nilfs_blocks_per_segment(self.loop_dev_bytes()?);
                vec!["-q".into(), "-f".into(), "-B".into(), blocks.to_string()]
            }
            "f2fs" => vec!["-q".into(), "-f".into()],
            _ => Vec::new(),
        };
        self.mkfs(kind, &args)
    }

    /// `mkfs.<kind> ARGS <loop device>`.
    pub fn mkfs(&mut self, kind: &str, args: &[impl AsRef<std::ffi::OsStr>]) -> Result<()> {
        let loop_dev = self.loop_dev().to_string();
        let mut mkfs = Command::new(format!("mkfs.{kind}"));
        sh_within(mkfs.args(args).arg(&loop_dev), self.timeouts.mkfs)?;
        Ok(())
    }

    /// Unmounts the file system (it writes everything back; if `umount` fails or times out,
    /// it is detached lazily and the error returned); the rest goes on drop. An
    /// appliance's file system is written back when the appliance has shut down: this waits
    /// for `guestfish` to exit (up to five minutes).
    pub fn unmount_fs(&mut self) -> Result<()> {
        let Some(m) = self.mnt.take() else {
            return Ok(());
        };
        if self.appliance.is_none() {
            return unmount(&m, self.timeouts.umount);
        }
        sh(Command::new("guestunmount").arg(&m))?;
        let status = self.stop_appliance();
        if status.contains(CLEANER_STOPPED) {
            return Err(KernelStackError::CleanerStopped);
        }
        if !status.starts_with("exit status: 0") {
            return Err(KernelStackError::Command {
                command: format!("guestfish (unmounting {})", m.display()),
                reason: status,
            });
        }
        Ok(())
    }
    /// Gives up on a file system that stopped answering (its writer blocked for good): an
    /// appliance is killed at once (libguestfs's recovery process takes its virtual machine
    /// down with it) and its FUSE mount detached; a kernel file system is unmounted lazily.
    /// What it had not written back is lost; the rest goes on drop, as after
    /// [`unmount_fs`](Self::unmount_fs).
    pub fn abandon_fs(&mut self) {
        let Some(m) = self.mnt.take() else {
            return;
        };
        if let Some(mut child) = self.appliance.take() {
            let _ = child.kill();
            let _ = child.wait();
            // Its virtual machine holds the loop device open until it is gone too.
            if let Some(loop_dev) = self.loop_dev.as_deref() {
                kill_processes_naming(loop_dev);
            }
            let _ = Command::new("fusermount3")
                .args(["-u", "-z"])
                .arg(&m)
                .status();
        } else {
            let _ = Command::new("umount").arg("-l").arg(&m).status();
        }
    }
}

impl Drop for KernelStack {
    fn drop(&mut self) {
        if self.appliance.is_some() {
            if let Some(m) = self.mnt.take() {
                let _ = Command::new("guestunmount").arg(&m).status();
            }
            self.stop_appliance();
        }
        if let Some(m) = self.mnt.take() {
            let _ = unmount(&m, Some(60));
        }
        if let Some(l) = self.loop_dev.take() {
            let _ = run_within(Command::new("losetup").args(["-d", &l]), Some(30));
        }
        drop(self.nbdfuse.take());
        drop(self.serving.take());
    }
}

/// `umount`, within `secs`; if that fails, `umount -l` (detached now, written back when no
/// longer busy) and the first error.
fn unmount(mnt: &Path, secs: Option<u32>) -> Result<()> {
    sh_within(Command::new("umount").arg(mnt), secs).inspect_err(|_| {
        let _ = run_within(Command::new("umount").arg("-l").arg(mnt), Some(30));
    })?;
    Ok(())
}

/// Where a `kind` file system can run: this machine's kernel, or a libguestfs appliance's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FsHost {
    Kernel,
    Appliance,
}

/// Where a `kind` file system can run here: this machine's kernel, else a libguestfs
/// [`Appliance`]'s; or why neither.
pub fn fs_host(kind: &str) -> Result<FsHost> {
    kernel_prerequisites(kind)?;
    if kernel_has(kind) {
        return Ok(FsHost::Kernel);
    }
    Appliance::available(kind).map_err(|e| {
        KernelStackError::Unavailable(format!(
            "this kernel has no {kind} (not in /proc/filesystems), and no appliance: {e}"
        ))
    })?;
    Ok(FsHost::Appliance)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_over_its_time_is_killed_and_named() {
        match sh_within(Command::new("sleep").arg("30"), Some(1)) {
            Err(KernelStackError::Command { command, reason }) => {
                assert!(command.contains("sleep"), "{command}");
                // coreutils `timeout` exits 124 when it killed the command.
                assert!(reason.contains("124"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            sh_within(Command::new("echo").arg("ok"), Some(5)).unwrap(),
            "ok"
        );
    }

    /// nbdfuse with no server behind its URI fails the attach with its own words, and nothing
    /// is left mounted.
    #[test]
    fn attaching_to_no_server_fails_and_leaves_nothing_mounted() {
        if let Err(e) = kernel_fs_available("ext4") {
            return eprintln!("skipped: {e}");
        }
        let tmp = tempfile::tempdir().unwrap();
        let uri = format!(
            "nbd+unix:///?socket={}",
            tmp.path().join("none.sock").display()
        );
        let fuse_dir = tmp.path().join("nbd");
        match KernelStack::attach(Export::Uri(uri), &fuse_dir, Timeouts::BOUNDED) {
            Err(KernelStackError::Command { command, .. }) => {
                assert!(command.starts_with("nbdfuse"), "{command}")
            }
            Err(other) => panic!("{other}"),
            Ok(_) => panic!("attached to no server"),
        }
        assert!(!is_mount_point(&fuse_dir.canonicalize().unwrap()));
    }

    /// The whole stack on an external server (nbdkit's memory plugin, standing in for a `mobius
    /// serve` process): mkfs, mount, a file, unmount, fsck clean; then the superblock zeroed
    /// through the loop device, and fsck must report the damage.
    #[test]
    fn fsck_passes_a_clean_file_system_and_reports_a_damaged_one() {
        if let Err(e) = kernel_fs_available("ext4") {
            return eprintln!("skipped: {e}");
        }
        if tool_missing("nbdkit") || tool_missing("fsck.ext4") {
            return eprintln!("skipped: nbdkit or fsck.ext4 is not installed");
        }
        let tmp = tempfile::tempdir().unwrap();
        let socket = tmp.path().join("nbdkit.sock");
        let mut nbdkit = Command::new("nbdkit")
            .args(["--foreground", "--exit-with-parent", "-U"])
            .arg(&socket)
            .args(["memory", "64M"])
            .spawn()
            .unwrap();
        wait_for(200, Duration::from_millis(25), || socket.exists());
        let uri = format!("nbd+unix:///?socket={}", socket.display());
        let fuse_dir = tmp.path().join("nbd");
        let checked = (|| -> Result<Result<()>> {
            let mut stack = KernelStack::attach(Export::Uri(uri), &fuse_dir, Timeouts::BOUNDED)?;
            stack.mkfs("ext4", &["-q"])?;
            stack.mount(&tmp.path().join("mnt"), "")?;
            std::fs::write(stack.mount_point().join("f"), b"kept")?;
            stack.unmount_fs()?;
            stack.fsck_ext4()?;
            // ext4's superblock: 1024 bytes at byte 1024.
            let dev = std::fs::OpenOptions::new()
                .write(true)
                .open(stack.loop_dev())?;
            std::os::unix::fs::FileExt::write_all_at(&dev, &[0u8; 1024], 1024)?;
            dev.sync_all()?;
            Ok(stack.fsck_ext4())
        })();
        let _ = nbdkit.kill();
        let _ = nbdkit.wait();
        match checked {
            Ok(Err(KernelStackError::Command { command, reason })) => {
                assert!(command.contains("fsck.ext4"), "{command}");
                assert!(reason.to_lowercase().contains("super"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
        assert!(!is_mount_point(&fuse_dir.canonicalize().unwrap()));
    }
}
