//! Our SSD under a kernel file system: the design is exported exactly as `mobius serve` exports
//! it (the one host layer, through NBD), in this process: NBD server thread → `nbdfuse` →
//! `losetup --direct-io=on` → `mkfs` → `mount`. Needs root, /dev/fuse, nbdfuse and losetup
//! ([`kernel_fs_available`] says which is missing). Used by the NVMFS experiment (ext4, btrfs,
//! xfs beside NVMFS) and by OPTR's SQLite-on-ext4 experiment (`compare`'s `optr_sqlite`).

use std::io::{Seek, SeekFrom};
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
    /// nilfs2's cleaner was gone when the workload ended (`nilfs_cleanerd` exits when a
    /// cleaning pass fails, as when the volume has no room for the blocks it would move); the
    /// file system was still unmounted, everything written back.
    #[error("nilfs2's cleaner (nilfs_cleanerd) exited during the run; it exits when a cleaning pass fails, as when the volume has no room left for the blocks it would move")]
    CleanerStopped,
}

/// What the appliance's script prints when nilfs2's cleaner died during the run.
const CLEANER_STOPPED: &str = "nilfs_cleanerd stopped during the run";

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
    /// The `guestfish` serving the file system from a libguestfs appliance ([`Appliance`]).
    appliance: Option<Child>,
    /// The dirty-page limit on the file system's backing devices, lifted after the unmount.
    dirty_limit: Option<crate::dirty_limit::DirtyLimit>,
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
    /// cache) to `bytes`, until the stack is dropped ([`crate::dirty_limit`]); returns the
    /// limit as the kernel holds it.
    pub fn limit_dirty(&mut self, bytes: u64) -> Result<u64> {
        let bdis = crate::dirty_limit::mounted_bdis(self.loop_dev())?;
        let limit = crate::dirty_limit::DirtyLimit::set(&bdis, bytes)?;
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

/// nilfs2's segments at most: 1 MiB (`mkfs.nilfs2 -B 256`; its default 8 MiB ones need a
/// volume of more than 128 MiB).
pub const NILFS_BLOCKS_PER_SEGMENT: u32 = 256;
/// Segments a volume needs for nilfs2's reserve to be its 5 % (`r_segments_percentage`) and
/// not its floor of 8 segments (`NILFS_MIN_NRSVSEGS`): 8 / 5 %.
const NILFS_SEGMENTS_FOR_RESERVE: u64 = 160;
/// nilfs2's smallest segment (`mkfs.nilfs2`'s minimum blocks per segment).
const NILFS_MIN_BLOCKS_PER_SEGMENT: u32 = 16;

/// Blocks per nilfs2 segment on a volume of `volume_bytes`: [`NILFS_BLOCKS_PER_SEGMENT`],
/// halved while the volume would have fewer segments than its 5 % reserve needs. On the
/// paper's 64 GB volume the floor of 8 segments is 0.1 % of it; on the quick scale's 91 MiB
/// with 1 MiB segments it would be 8.8 %, more space than nilfs2 reserves anywhere else, taken
/// out of the 12 % a volume at 88 % has left. So the quick scale gets 512 KiB segments (182),
/// the paper scale's ~440 MiB keeps 1 MiB (440).
pub fn nilfs_blocks_per_segment(volume_bytes: u64) -> u32 {
    let mut blocks = NILFS_BLOCKS_PER_SEGMENT;
    while blocks > NILFS_MIN_BLOCKS_PER_SEGMENT
        && volume_bytes / segment_bytes(blocks) < NILFS_SEGMENTS_FOR_RESERVE
    {
        blocks /= 2;
    }
    blocks
}

/// The bytes of a nilfs2 segment of `blocks` 4 KB blocks.
fn segment_bytes(blocks: u32) -> u64 {
    blocks as u64 * 4096
}

/// Segments nilfs2's cleaner cleans per pass while space is low (`mc_nsegments_per_clean`;
/// the packaged file says 4) on a volume of `segments`: one in 11, at least 8 (8 MiB a pass on
/// a volume of 91 one-MiB segments; 16 half-MiB ones on the quick scale's 182), since the
/// cleaner runs at most a pass a second whatever the volume while the workload writes as fast
/// as before.
fn nilfs_cleaner_pass(segments: u64) -> u64 {
    (segments / 11).max(8)
}

/// nilfs2's cleaner in the appliance, for a volume of `volume_bytes` whose page cache holds at
/// most `dirty_bytes` dirty: `nilfs_cleanerd.conf`'s defaults but for a run of minutes.
///
/// - `protection_period 0`: by default every segment written in the last hour is kept, so
///   nothing would be cleaned.
/// - `clean_check_interval 1` (10 s) and `retry_interval 1` (60 s: after a pass that fails,
///   the cleaner would wait longer than the volume takes to fill).
/// - The thresholds in segments, from nilfs2's own refusal rule: the kernel refuses a write
///   while clean segments ≤ its reserve + the dirty blocks in segments + 1
///   (`nilfs_near_disk_full`), and the cleaner adds the same reserve to both thresholds. So
///   `min_clean_segments` = the dirty cap in segments + 1 + two passes: cleaning starts two
///   passes before writes can be refused, however full the page cache is. Measured: a pass
///   first writes the live blocks it moves, so free space swings by ~10 segments while the
///   cleaner runs; starting one pass above the refusal point, free space came within 1–3
///   segments of it, at two passes no closer than 6 (docs/nvmfs.md). Starting earlier cleans
///   fuller segments: a cost to nilfs2, shown beside its figures.
///   `max_clean_segments` = min + a tenth of the volume (at least a pass).
/// - `mc_nsegments_per_clean`: one segment in 11, at least 8 ([`nilfs_cleaner_pass`]; 4).
pub fn nilfs_cleaner_conf(volume_bytes: u64, dirty_bytes: u64) -> Vec<(&'static str, String)> {
    let segment_bytes = segment_bytes(nilfs_blocks_per_segment(volume_bytes));
    let segments = volume_bytes / segment_bytes;
    let pass = nilfs_cleaner_pass(segments);
    let min_clean = dirty_bytes.div_ceil(segment_bytes) + 1 + 2 * pass;
    let max_clean = min_clean + (segments / 10).max(pass);
    vec![
        ("protection_period", "0".into()),
        ("clean_check_interval", "1".into()),
        ("retry_interval", "1".into()),
        ("min_clean_segments", min_clean.to_string()),
        ("max_clean_segments", max_clean.to_string()),
        ("mc_nsegments_per_clean", pass.to_string()),
    ]
}

/// A libguestfs appliance: a small virtual machine running this distribution's kernel package
/// (`linux-image-amd64`), for file systems this machine's kernel does not have (nilfs2 with
/// `libguestfs-nilfs`). KVM is not usable inside this VM (the appliance hangs at boot), so it
/// runs in software emulation (`force_tcg`): ~15 s to boot, about 1 MB/s of 4 KB writes.
pub struct Appliance;

impl Appliance {
    /// What the appliance needs here, or why it is not available for `kind`.
    pub fn available(kind: &str) -> Result<()> {
        if kind != "nilfs2" {
            return Err(KernelStackError::Unavailable(format!(
                "the appliance runs nilfs2 only, not {kind}"
            )));
        }
        for tool in ["guestfish", "guestunmount", "mkfs.nilfs2"] {
            if tool_missing(tool) {
                return Err(KernelStackError::Unavailable(format!(
                    "{tool} is not installed (the appliance needs libguestfs-tools, \
                     linux-image-amd64 and, for nilfs2, libguestfs-nilfs)"
                )));
            }
        }
        let kernel = std::fs::read_dir("/boot").is_ok_and(|d| {
            d.flatten()
                .any(|e| e.file_name().to_string_lossy().starts_with("vmlinuz-"))
        });
        if !kernel {
            return Err(KernelStackError::Unavailable(
                "no kernel in /boot for the libguestfs appliance (linux-image-amd64)".into(),
            ));
        }
        Ok(())
    }

    /// The guestfish script: mount without the mount helper's cleaner (`nogc`), start nilfs2's
    /// cleaner with the packaged `nilfs_cleanerd.conf` and `cleaner`'s keys after it (later
    /// keys win), serve the files at `mnt` until it is unmounted, then stop the cleaner and
    /// unmount (everything written back). The cleaner is given the device mounted at
    /// `/sysroot`, not `/dev/sda`: guestfish translates its own device names, a shell in the
    /// appliance does not, and in about one boot in four the appliance's kernel names our disk
    /// `/dev/sdb` and its own root disk `/dev/sda` (checked with `/proc/partitions`). Given
    /// `/dev/sda` then, the cleaner read the wrong disk's superblock and exited ("cannot open
    /// nilfs on /dev/sda: Invalid argument"): the runs that hit ENOSPC having cleaned nothing.
    /// A cleaner that is not running two seconds after its start fails the script, and with it
    /// the run; one gone when the workload ends (it exits when a cleaning pass fails, as on a
    /// full volume) fails the script after the unmount, so what the file system held is
    /// written back and the run is reported stopped ([`KernelStackError::CleanerStopped`]).
    fn nilfs2_script(mnt: &Path, cleaner: &[(&str, String)]) -> String {
        let conf: Vec<String> = cleaner
            .iter()
            .map(|(key, value)| format!("echo {key} {value} >> /tmp/cleaner.conf"))
            .collect();
        format!(
            "run\n\
             mount-options nogc /dev/sda /\n\
             debug sh \"cp /etc/nilfs_cleanerd.conf /tmp/cleaner.conf; {}\"\n\
             debug sh \"dev=$(findmnt -n -o SOURCE /sysroot); /sbin/nilfs_cleanerd -c /tmp/cleaner.conf $dev /sysroot; sleep 2; pgrep -x nilfs_cleanerd && exit 0; echo nilfs_cleanerd did not start on $dev >&2; exit 1\"\n\
             mount-local {} readonly:false\n\
             mount-local-run\n\
             debug sh \"if pgrep -x nilfs_cleanerd; then pkill -x nilfs_cleanerd; sleep 1; else touch /tmp/cleaner-stopped; fi\"\n\
             umount-all\n\
             debug sh \"if test -e /tmp/cleaner-stopped; then echo {CLEANER_STOPPED} >&2; exit 1; fi\"\n",
            conf.join("; "),
            mnt.display()
        )
    }

    fn environment(cmd: &mut Command, dirty_bytes: u64) {
        cmd.env("LIBGUESTFS_BACKEND", "direct")
            .env("LIBGUESTFS_BACKEND_SETTINGS", "force_tcg")
            .env(
                "LIBGUESTFS_APPEND",
                format!(
                    "sysctl.vm.dirty_bytes={dirty_bytes} sysctl.vm.dirty_background_bytes={}",
                    dirty_bytes / 2
                ),
            );
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
        self.shutdown.store(true, Ordering::Relaxed);
        if let Some(t) = self.server.take() {
            let _ = t.join();
        }
    }
}

/// Whether the running kernel has file system `kind` (`/proc/filesystems`).
pub fn kernel_has(kind: &str) -> bool {
    std::fs::read_to_string("/proc/filesystems").is_ok_and(|list| {
        list.lines()
            .any(|l| l.split_whitespace().last() == Some(kind))
    })
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

/// Root, the tools and /dev/fuse: what the stack needs wherever the file system runs.
fn kernel_prerequisites(kind: &str) -> Result<()> {
    // SAFETY: a plain syscall without arguments.
    if unsafe { libc::geteuid() } != 0 {
        return Err(KernelStackError::Unavailable(
            "needs root (losetup, mount)".into(),
        ));
    }
    for tool in ["nbdfuse", "losetup", "fusermount3", &format!("mkfs.{kind}")] {
        if tool_missing(tool) {
            return Err(KernelStackError::Unavailable(format!(
                "{tool} is not installed (apt-get install {}, or run the README's command through .ci/setup)",
                debian_package(tool)
            )));
        }
    }
    if !Path::new("/dev/fuse").exists() {
        return Err(KernelStackError::Unavailable("/dev/fuse is missing".into()));
    }
    Ok(())
}

/// The Debian package that installs `tool`.
fn debian_package(tool: &str) -> &str {
    match tool {
        "nbdfuse" => "libnbd-bin",
        "losetup" => "mount",
        "fusermount3" => "fuse3",
        "mkfs.ext4" => "e2fsprogs",
        "mkfs.xfs" => "xfsprogs",
        "mkfs.btrfs" => "btrfs-progs",
        "mkfs.nilfs2" => "nilfs-tools",
        "mkfs.f2fs" => "f2fs-tools",
        other => other,
    }
}

/// What a kernel file system's run needs of the machine: root, the tools, /dev/fuse, and the
/// file system in this kernel.
pub fn kernel_fs_available(kind: &str) -> Result<()> {
    kernel_prerequisites(kind)?;
    if !kernel_has(kind) {
        return Err(KernelStackError::Unavailable(format!(
            "this kernel has no {kind} (not in /proc/filesystems)"
        )));
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
    Ok((stack, server))
}

/// Kills every process whose command line names `path` (an abandoned appliance's `qemu` and
/// libguestfs's recovery process, which hold our loop device) and waits, up to 30 s, until
/// none is left.
fn kill_processes_naming(path: &str) {
    let naming = || -> Vec<i32> {
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return Vec::new();
        };
        entries
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
            .filter(|pid| {
                let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
                cmdline
                    .split(|b| *b == 0)
                    .any(|arg| String::from_utf8_lossy(arg).contains(path))
            })
            .collect()
    };
    wait_for(300, Duration::from_millis(100), || {
        let pids = naming();
        for pid in &pids {
            // SAFETY: kill(2) on a process id; at worst ESRCH if it is already gone.
            unsafe { libc::kill(*pid, libc::SIGKILL) };
        }
        pids.is_empty()
    });
}

/// Whether something is mounted at `path` (canonical; `/proc/mounts`).
fn is_mount_point(path: &Path) -> bool {
    std::fs::read_to_string("/proc/mounts").is_ok_and(|mounts| {
        mounts
            .lines()
            .any(|l| l.split_whitespace().nth(1) == path.to_str())
    })
}

/// Polls `ready` up to `tries` times, `pause` apart; whether it became true.
fn wait_for(tries: u32, pause: Duration, mut ready: impl FnMut() -> bool) -> bool {
    for _ in 0..tries {
        if ready() {
            return true;
        }
        std::thread::sleep(pause);
    }
    ready()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// nilfs2's kernel reserve (`nilfs_near_disk_full`'s `ns_nrsvsegs`): 5 % of the segments,
    /// at least 8. The cleaner adds the same reserve to its thresholds.
    fn reserve(segments: u64) -> u64 {
        (segments * 5).div_ceil(100).max(8)
    }

    fn threshold(conf: &[(&str, String)], key: &str) -> u64 {
        let (_, value) = conf.iter().find(|(k, _)| *k == key).expect("key present");
        value.parse().expect("a number of segments")
    }

    #[test]
    fn the_cleaner_starts_two_passes_before_nilfs2_refuses_writes() {
        for (volume_mib, dirty_kib) in [
            (91, 1638),
            (91, 8192),
            (440, 6553),
            (91, 0),
            (1024, 65536),
            (40, 8192),
        ] {
            let conf = nilfs_cleaner_conf(volume_mib << 20, dirty_kib << 10);
            let segment_kib = nilfs_blocks_per_segment(volume_mib << 20) as u64 * 4;
            let segments = (volume_mib << 10) / segment_kib;
            let r = reserve(segments);
            // The kernel refuses writes at clean ≤ r + dirty segments + 1; the cleaner starts
            // below min + r and pauses above max + r.
            let refused_at = r + dirty_kib.div_ceil(segment_kib) + 1;
            let pass = threshold(&conf, "mc_nsegments_per_clean");
            let starts_below = threshold(&conf, "min_clean_segments") + r;
            let pauses_above = threshold(&conf, "max_clean_segments") + r;
            assert!(starts_below > refused_at + 2 * pass - 1, "{conf:?}");
            assert!(pauses_above >= starts_below + pass, "{conf:?}");
        }
        // The quick scale's volume (91 MiB, 182 segments) with 20 % of its 8 MiB budget dirty.
        let quick = nilfs_cleaner_conf(91 << 20, (8 << 20) / 5);
        assert_eq!(threshold(&quick, "mc_nsegments_per_clean"), 16);
        assert_eq!(threshold(&quick, "min_clean_segments"), 37);
        assert_eq!(threshold(&quick, "max_clean_segments"), 55);
        // The paper scale's (~440 MiB, 32 MiB budget): passes of 40, cleaning below 110 clean.
        let paper = nilfs_cleaner_conf(440 << 20, (32 << 20) / 5);
        assert_eq!(threshold(&paper, "mc_nsegments_per_clean"), 40);
        assert_eq!(threshold(&paper, "min_clean_segments"), 88);
    }

    #[test]
    fn a_missing_tool_names_its_debian_package() {
        for kind in ["ext4", "xfs", "btrfs", "nilfs2", "f2fs"] {
            let tool = format!("mkfs.{kind}");
            assert_ne!(debian_package(&tool), tool);
        }
        assert_eq!(debian_package("nbdfuse"), "libnbd-bin");
        assert_eq!(debian_package("fusermount3"), "fuse3");
    }

    #[test]
    fn segments_are_small_enough_for_the_reserve_to_be_five_percent() {
        assert_eq!(nilfs_blocks_per_segment(91 << 20), 128);
        assert_eq!(nilfs_blocks_per_segment(440 << 20), 256);
        assert_eq!(nilfs_blocks_per_segment(64 << 30), 256);
        assert_eq!(nilfs_blocks_per_segment(1 << 20), 16);
        for mib in [40u64, 91, 160, 300, 440] {
            let blocks = nilfs_blocks_per_segment(mib << 20) as u64;
            let segments = (mib << 20) / (blocks * 4096);
            assert!(
                segments >= 160 || blocks == 16,
                "{mib} MiB: {segments} segments"
            );
            assert!(
                blocks == 256 || segments < 320,
                "{mib} MiB: segments halved too far"
            );
        }
    }

    #[test]
    fn the_script_appends_the_keys_after_the_packaged_configuration() {
        let conf = nilfs_cleaner_conf(91 << 20, (8 << 20) / 5);
        let script = Appliance::nilfs2_script(Path::new("/mnt/x"), &conf);
        // Packaged file, our keys, cleaner, files served, cleaner checked and stopped, unmount,
        // then a cleaner found gone fails the script.
        let steps = [
            "cp /etc/nilfs_cleanerd.conf",
            "echo min_clean_segments 37 >>",
            "/sbin/nilfs_cleanerd -c",
            "mount-local ",
            "if pgrep -x nilfs_cleanerd",
            "pkill -x nilfs_cleanerd",
            "touch /tmp/cleaner-stopped",
            "umount-all",
            "if test -e /tmp/cleaner-stopped",
            CLEANER_STOPPED,
        ];
        let at: Vec<usize> = steps
            .iter()
            .map(|step| {
                script
                    .find(step)
                    .unwrap_or_else(|| panic!("{step:?} missing: {script}"))
            })
            .collect();
        assert!(at.windows(2).all(|w| w[0] < w[1]), "{steps:?}: {script}");
        // The device mounted at /sysroot, whatever the appliance named it (never "/dev/sda"
        // in a shell: guestfish's names are translated, the shell's are not).
        assert!(
            script.contains(
                "dev=$(findmnt -n -o SOURCE /sysroot); /sbin/nilfs_cleanerd -c /tmp/cleaner.conf $dev /sysroot"
            ),
            "{script}"
        );
        assert!(!script.contains("cleaner.conf /dev/sda"), "{script}");
        assert!(
            script.contains("mount-local /mnt/x readonly:false"),
            "{script}"
        );
        assert!(script.contains("echo protection_period 0 >>"), "{script}");
    }
}
