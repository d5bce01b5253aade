//! Our SSD under a kernel file system: the design is exported exactly as `mobius serve` exports
//! it (the one host layer, through NBD), in this process: NBD server thread → `nbdfuse` →
//! `losetup --direct-io=on` → `mkfs` → `mount`. Needs root, /dev/fuse, nbdfuse and losetup
//! ([`kernel_fs_available`] says which is missing). Used by the NVMFS experiment (ext4, btrfs,
//! xfs beside NVMFS) and by OPTR's SQLite-on-ext4 experiment (`compare`'s `optr_sqlite`).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Why the kernel stack could not be set up or taken down.
#[derive(Debug, thiserror::Error)]
pub enum KernelStackError {
    /// A system command failed.
    #[error("{command}: {reason}")]
    Command { command: String, reason: String },
    /// What the stack needs is not on this machine (root, a tool, /dev/fuse, the kernel's file
    /// system).
    #[error("{0}")]
    Unavailable(String),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

pub type Result<T, E = KernelStackError> = std::result::Result<T, E>;

/// Runs a command; its trimmed stdout, or an error naming the command and its first stderr line.
pub fn sh(cmd: &mut Command) -> Result<String> {
    let failed = |cmd: &Command, reason: String| KernelStackError::Command {
        command: format!("{cmd:?}"),
        reason,
    };
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| failed(cmd, e.to_string()))?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let first = stderr.lines().next().unwrap_or("").trim();
        return Err(failed(cmd, format!("{} {first}", out.status)));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Whether `tool` is not on the PATH.
pub fn tool_missing(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .stdout(Stdio::null())
        .status()
        .map_or(true, |s| !s.success())
}

/// Everything set up for a kernel file system; torn down in reverse order on drop.
pub struct KernelStack {
    shutdown: Arc<AtomicBool>,
    server: Option<std::thread::JoinHandle<()>>,
    nbdfuse: Option<Child>,
    fuse_dir: PathBuf,
    loop_dev: Option<String>,
    mnt: Option<PathBuf>,
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
        let loop_dev = self.loop_dev().to_string();
        match kind {
            "ext4" => sh(Command::new("mkfs.ext4").args(["-q", "-F", "-b", "4096", &loop_dev]))?,
            "xfs" => sh(Command::new("mkfs.xfs").args(["-q", "-f", &loop_dev]))?,
            // Mixed block groups (btrfs's own advice below 1 GiB, and the only way it makes a
            // file system under 114 MiB), one copy of everything as on the other file systems
            // (the default duplicates metadata, which mixed groups hold the data in too).
            "btrfs" => sh(Command::new("mkfs.btrfs")
                .args(["-q", "-f", "-M", "-m", "single", "-d", "single", &loop_dev]))?,
            // 1 MiB segments (256 blocks): the default 8 MiB ones need more than 128 MiB.
            // Untested here: this machine's kernel has no nilfs2 (mkfs alone checked).
            "nilfs2" => sh(Command::new("mkfs.nilfs2").args(["-q", "-f", "-B", "256", &loop_dev]))?,
            "f2fs" => sh(Command::new("mkfs.f2fs").args(["-q", "-f", &loop_dev]))?,
            other => sh(Command::new(format!("mkfs.{other}")).arg(&loop_dev))?,
        };
        let mut mount = Command::new("mount");
        if !options.is_empty() {
            mount.args(["-o", options]);
        }
        sh(mount.arg(&loop_dev).arg(mnt))?;
        self.mnt = Some(mnt.to_path_buf());
        Ok(())
    }

    /// Unmounts the file system (it writes everything back); the rest goes on drop.
    pub fn unmount_fs(&mut self) -> Result<()> {
        if let Some(m) = self.mnt.take() {
            sh(Command::new("umount").arg(&m))?;
        }
        Ok(())
    }
}

impl Drop for KernelStack {
    fn drop(&mut self) {
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
        self.shutdown.store(true, Ordering::Relaxed);
        if let Some(t) = self.server.take() {
            let _ = t.join();
        }
    }
}

/// What a kernel file system's run needs of the machine: root, the tools, /dev/fuse.
/// Whether the running kernel has file system `kind` (`/proc/filesystems`).
pub fn kernel_has(kind: &str) -> bool {
    std::fs::read_to_string("/proc/filesystems").is_ok_and(|list| {
        list.lines()
            .any(|l| l.split_whitespace().last() == Some(kind))
    })
}

pub fn kernel_fs_available(kind: &str) -> Result<()> {
    // SAFETY: a plain syscall without arguments.
    if unsafe { libc::geteuid() } != 0 {
        return Err(KernelStackError::Unavailable(
            "needs root (losetup, mount)".into(),
        ));
    }
    for tool in ["nbdfuse", "losetup", "fusermount3", &format!("mkfs.{kind}")] {
        if tool_missing(tool) {
            return Err(KernelStackError::Unavailable(format!(
                "{tool} is not installed"
            )));
        }
    }
    if !kernel_has(kind) {
        return Err(KernelStackError::Unavailable(format!(
            "this kernel has no {kind} (not in /proc/filesystems)"
        )));
    }
    if !Path::new("/dev/fuse").exists() {
        return Err(KernelStackError::Unavailable("/dev/fuse is missing".into()));
    }
    Ok(())
}

/// The NBD server `mobius serve` runs, over one design.
pub type SsdServer = crate::server::Server<crate::ftl_backend::FtlBackend>;

/// Exports the SSD exactly as `mobius serve` exports it (the one host layer, through NBD),
/// and attaches the export as a loop device (`nbdfuse`, `losetup --direct-io=on`). The server
/// is shared so its counters can be read while it serves.
///
/// With `pacing`, each reply is held until wall-clock time reaches the request's simulated
/// completion (`mobius serve --pace`), so the kernel and the application wait for the device as
/// they would for a real one.
pub fn export_as_loop_device(
    dir: &Path,
    dev: Box<dyn ftl::BlockDevice>,
    pacing: bool,
) -> Result<(KernelStack, Arc<SsdServer>)> {
    let fuse_dir = dir.join("nbd");
    std::fs::create_dir_all(&fuse_dir).map_err(KernelStackError::from)?;
    let backend = crate::ftl_backend::FtlBackend::new(dev, 0);
    let shutdown = Arc::new(AtomicBool::new(false));
    let server = Arc::new(
        crate::server::Server::new(
            backend,
            crate::server::ServerConfig {
                pacing,
                ..crate::server::ServerConfig::default()
            },
        )
        .with_shutdown_flag(Arc::clone(&shutdown)),
    );
    let sock = dir.join("nbd.sock");
    let listen = crate::transport::Listen::Unix(sock.clone());
    let serving = Arc::clone(&server);
    let thread = std::thread::spawn(move || {
        let _ = serving.serve(&listen);
    });
    let mut stack = KernelStack {
        shutdown,
        server: Some(thread),
        nbdfuse: None,
        fuse_dir: fuse_dir.clone(),
        loop_dev: None,
        mnt: None,
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
    Ok((stack, server))
}

/// Polls `ready` up to `tries` times, `pause` apart; whether it became true.
fn wait_for(tries: u32, pause: Duration, ready: impl Fn() -> bool) -> bool {
    for _ in 0..tries {
        if ready() {
            return true;
        }
        std::thread::sleep(pause);
    }
    ready()
}
