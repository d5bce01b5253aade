//! Our SSD under a kernel file system: the design exported over NBD exactly as `mobius serve`
//! exports it (the one host layer), from a thread of this process: NBD server → `nbdfuse` →
//! `losetup --direct-io=on` → `mkfs` → `mount`, and torn down in reverse. Needs root,
//! /dev/fuse, nbdfuse and losetup ([`kernel_fs_available`] says which is missing). Used by the
//! NVMFS experiment (ext4, btrfs, xfs, nilfs2 beside NVMFS), by OPTR's SQLite-on-ext4
//! experiment and by the database trials.
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
mod tools;

pub use appliance::{nilfs_blocks_per_segment, nilfs_cleaner_conf, Appliance};
pub use error::{KernelStackError, Result};
pub use tools::{kernel_fs_available, kernel_has, sh, tool_missing};

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

/// Everything set up for a kernel file system; torn down in reverse order on drop.
pub struct KernelStack {
    export: Arc<dyn NbdExport>,
    server: Option<std::thread::JoinHandle<()>>,
    nbdfuse: Option<Child>,
    fuse_dir: PathBuf,
    loop_dev: Option<String>,
    mnt: Option<PathBuf>,
    /// The `guestfish` serving the file system from a libguestfs appliance ([`Appliance`]).
    appliance: Option<Child>,
    /// The dirty-page limit on the file system's backing devices, lifted after the unmount.
    dirty_limit: Option<dirty_limit::DirtyLimit>,
}

impl KernelStack {
    /// The loop device the export is attached to.
    pub fn loop_dev(&self) -> &str {
        self.loop_dev
            .as_deref()
            .expect("attached by export_as_loop_device")
    }

    /// Makes a `kind` file system on the loop device and mounts it at `mnt` with `options`
    /// (`mount -o`; none when empty).
    pub fn make_and_mount(&mut self, kind: &str, mnt: &Path, options: &str) -> Result<()> {
        self.make_fs(kind)?;
        let loop_dev = self.loop_dev().to_string();
        let mut mount = Command::new("mount");
        if !options.is_empty() {
            mount.args(["-o", options]);
        }
        sh(mount.arg(&loop_dev).arg(mnt))?;
        self.mnt = Some(mnt.to_path_buf());
        Ok(())
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

    fn make_fs(&mut self, kind: &str) -> Result<()> {
        let loop_dev = self.loop_dev().to_string();
        match kind {
            "ext4" => sh(Command::new("mkfs.ext4").args(["-q", "-F", "-b", "4096", &loop_dev]))?,
            "xfs" => sh(Command::new("mkfs.xfs").args(["-q", "-f", &loop_dev]))?,
            // Mixed block groups (btrfs's own advice below 1 GiB, and the only way it makes a
            // file system under 114 MiB), one copy of everything as on the other file systems
            // (the default duplicates metadata, which mixed groups hold the data in too).
            "btrfs" => sh(Command::new("mkfs.btrfs")
                .args(["-q", "-f", "-M", "-m", "single", "-d", "single", &loop_dev]))?,
            // Segments of at most 1 MiB (nilfs_blocks_per_segment): the default 8 MiB ones need
            // more than 128 MiB. Made here; mounted in the appliance (this kernel has no nilfs2).
            "nilfs2" => {
                let blocks = nilfs_blocks_per_segment(self.loop_dev_bytes()?);
                sh(Command::new("mkfs.nilfs2").args([
                    "-q",
                    "-f",
                    "-B",
                    &blocks.to_string(),
                    &loop_dev,
                ]))?
            }
            "f2fs" => sh(Command::new("mkfs.f2fs").args(["-q", "-f", &loop_dev]))?,
            other => sh(Command::new(format!("mkfs.{other}")).arg(&loop_dev))?,
        };
        Ok(())
    }

    /// Unmounts the file system (it writes everything back); the rest goes on drop. An
    /// appliance's file system is written back when the appliance has shut down: this waits
    /// for `guestfish` to exit (up to five minutes).
    pub fn unmount_fs(&mut self) -> Result<()> {
        let Some(m) = self.mnt.take() else {
            return Ok(());
        };
        if self.appliance.is_none() {
            sh(Command::new("umount").arg(&m))?;
            return Ok(());
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
            let _ = Command::new("umount").arg("-l").arg(&m).status();
        }
        if let Some(l) = self.loop_dev.take() {
            let _ = Command::new("losetup").args(["-d", &l]).status();
        }
        if let Some(mut c) = self.nbdfuse.take() {
            let _ = Command::new("fusermount3")
                .arg("-u")
                .arg(&self.fuse_dir)
                .status();
            // Bounded wait, then make sure it is gone.
            for _ in 0..100 {
                if matches!(c.try_wait(), Ok(Some(_))) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
        self.export.stop();
        if let Some(t) = self.server.take() {
            let _ = t.join();
        }
    }
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

/// Serves `export` on a Unix socket in `dir` and attaches it as a loop device (`nbdfuse`,
/// `losetup --direct-io=on`). The caller keeps its own handle on the server, to read its
/// counters while it serves; the stack stops it when dropped.
pub fn export_as_loop_device(dir: &Path, export: Arc<dyn NbdExport>) -> Result<KernelStack> {
    let fuse_dir = dir.join("nbd");
    std::fs::create_dir_all(&fuse_dir).map_err(KernelStackError::from)?;
    let sock = dir.join("nbd.sock");
    let serving = Arc::clone(&export);
    let socket = sock.clone();
    let thread = std::thread::spawn(move || serving.serve_unix(&socket));
    let mut stack = KernelStack {
        export,
        server: Some(thread),
        nbdfuse: None,
        fuse_dir: fuse_dir.clone(),
        loop_dev: None,
        mnt: None,
        appliance: None,
        dirty_limit: None,
    };
    wait_for(200, Duration::from_millis(10), || sock.exists());
    let uri = format!("nbd+unix:///?socket={}", sock.display());
    stack.nbdfuse = Some(
        Command::new("nbdfuse")
            .arg(&fuse_dir)
            .arg(&uri)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| KernelStackError::Command {
                command: "nbdfuse".into(),
                reason: e.to_string(),
            })?,
    );
    let nbd_file = fuse_dir.join("nbd");
    let up = || std::fs::metadata(&nbd_file).is_ok_and(|m| m.len() > 0);
    if !wait_for(400, Duration::from_millis(25), up) {
        return Err(KernelStackError::Command {
            command: "nbdfuse".into(),
            reason: "did not come up".into(),
        });
    }
    let loop_dev = sh(Command::new("losetup")
        .args(["--direct-io=on", "-f", "--show"])
        .arg(&nbd_file))?;
    stack.loop_dev = Some(loop_dev);
    Ok(stack)
}
