//! The machine's side of the stack: commands, tools and what the kernel offers.

use super::error::{KernelStackError, Result};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

/// Runs a command; its trimmed stdout, or an error naming the command and its first stderr line.
pub fn sh(cmd: &mut Command) -> Result<String> {
    sh_within(cmd, None)
}

/// [`sh`] under coreutils `timeout` when `secs` is given ([`run_within`]).
pub fn sh_within(cmd: &mut Command, secs: Option<u32>) -> Result<String> {
    let out = run_within(cmd, secs)?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let first = stderr.lines().next().unwrap_or("").trim();
        return Err(failed(cmd, format!("{} {first}", out.status)));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Runs a command to its end, stdin empty; with `secs`, under `timeout -k 5 <secs>` (killed
/// after that, and SIGKILLed 5 s later if it is still there): nbdfuse(1) warns that a loop
/// device on its file can hang, and a hung step must fail, not hang its caller.
pub fn run_within(cmd: &mut Command, secs: Option<u32>) -> Result<Output> {
    let output = match secs {
        None => cmd.stdin(Stdio::null()).output(),
        Some(secs) => Command::new("timeout")
            .args(["-k", "5", &secs.to_string()])
            .arg(cmd.get_program())
            .args(cmd.get_args())
            .stdin(Stdio::null())
            .output(),
    };
    output.map_err(|e| failed(cmd, e.to_string()))
}

/// A command that could not run or failed, and why.
fn failed(cmd: &Command, reason: String) -> KernelStackError {
    KernelStackError::Command {
        command: format!("{cmd:?}"),
        reason,
    }
}

/// Whether `tool` is not on the PATH.
pub fn tool_missing(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .stdout(Stdio::null())
        .status()
        .map_or(true, |s| !s.success())
}

/// Whether the running kernel has file system `kind` (`/proc/filesystems`).
pub fn kernel_has(kind: &str) -> bool {
    std::fs::read_to_string("/proc/filesystems").is_ok_and(|list| {
        list.lines()
            .any(|l| l.split_whitespace().last() == Some(kind))
    })
}

/// Root, the tools and /dev/fuse: what the stack needs wherever the file system runs.
pub(super) fn kernel_prerequisites(kind: &str) -> Result<()> {
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

/// Kills every process whose command line names `path` (an abandoned appliance's `qemu` and
/// libguestfs's recovery process, which hold our loop device) and waits, up to 30 s, until
/// none is left.
pub(super) fn kill_processes_naming(path: &str) {
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
pub(super) fn is_mount_point(path: &Path) -> bool {
    std::fs::read_to_string("/proc/mounts").is_ok_and(|mounts| {
        mounts
            .lines()
            .any(|l| l.split_whitespace().nth(1) == path.to_str())
    })
}

/// Polls `ready` up to `tries` times, `pause` apart; whether it became true.
pub(super) fn wait_for(tries: u32, pause: Duration, mut ready: impl FnMut() -> bool) -> bool {
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

    #[test]
    fn a_missing_tool_names_its_debian_package() {
        for kind in ["ext4", "xfs", "btrfs", "nilfs2", "f2fs"] {
            let tool = format!("mkfs.{kind}");
            assert_ne!(debian_package(&tool), tool);
        }
        assert_eq!(debian_package("nbdfuse"), "libnbd-bin");
        assert_eq!(debian_package("fusermount3"), "fuse3");
    }
}
