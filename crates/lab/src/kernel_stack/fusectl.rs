//! Aborting FUSE connections through the kernel's fusectl file system
//! (`/sys/fs/fuse/connections/<N>/abort`, Documentation/filesystems/fuse.rst, "Aborting a
//! filesystem connection").
//!
//! A process blocked on a FUSE request the server has already read sleeps uninterruptibly
//! (`request_wait_answer`) until the server answers: SIGKILL stays pending. A server that never
//! answers (a stalled libguestfs appliance behind `guestfish mount-local`; nbdfuse under a
//! kernel file system whose device stopped) leaves the process unkillable. Aborting the
//! connection fails every pending and later request with ENOTCONN, so the process wakes,
//! takes its SIGKILL and can be reaped.

use std::path::{Path, PathBuf};

/// Where the kernel exposes one directory per FUSE connection.
const CONNECTIONS: &str = "/sys/fs/fuse/connections";

/// A FUSE mount from `/proc/self/mountinfo`: where it is and its connection's number.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FuseMount {
    pub mountpoint: PathBuf,
    /// The connection's directory name under [`CONNECTIONS`]: the super block's device number
    /// as the kernel encodes it (`major << 20 | minor`; FUSE's anonymous devices have major 0).
    pub connection: u64,
}

/// The FUSE mounts (`fuse`, `fuse.*`, `fuseblk`) in a mountinfo table whose mount point is
/// `under` or inside it. Reads the table only: no request reaches a (possibly stuck) server.
pub fn fuse_mounts_in(mountinfo: &str, under: &Path) -> Vec<FuseMount> {
    mountinfo
        .lines()
        .filter_map(parse_line)
        .filter(|m| m.mountpoint.starts_with(under))
        .collect()
}

/// One mountinfo line (proc(5)): `id parent major:minor root mountpoint options [optional
/// fields] - fstype source super-options`; `None` unless it is a FUSE mount.
fn parse_line(line: &str) -> Option<FuseMount> {
    let (left, right) = line.split_once(" - ")?;
    let fstype = right.split(' ').next()?;
    if !(fstype == "fuse" || fstype == "fuseblk" || fstype.starts_with("fuse.")) {
        return None;
    }
    let fields: Vec<&str> = left.split(' ').collect();
    let (major, minor) = fields.get(2)?.split_once(':')?;
    let (major, minor): (u64, u64) = (major.parse().ok()?, minor.parse().ok()?);
    Some(FuseMount {
        mountpoint: PathBuf::from(unescape(fields.get(4)?)),
        connection: (major << 20) | minor,
    })
}

/// Mountinfo escapes space, tab, newline and backslash as three octal digits (`\040`).
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match (bytes[i], octal) {
            (b'\\', Some(d)) => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Aborts the connection of every FUSE mount at or under `under` (mounting fusectl first if
/// it is not mounted): the mounts aborted, or why not. Needs root.
pub fn abort_fuse_mounts_under(under: &Path) -> std::io::Result<Vec<FuseMount>> {
    let table = std::fs::read_to_string("/proc/self/mountinfo")?;
    let mounts = fuse_mounts_in(&table, under);
    if mounts.is_empty() {
        return Ok(mounts);
    }
    ensure_fusectl(&table)?;
    for m in &mounts {
        let abort = Path::new(CONNECTIONS)
            .join(m.connection.to_string())
            .join("abort");
        std::fs::write(&abort, "1")
            .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", abort.display())))?;
    }
    Ok(mounts)
}

/// Mounts fusectl at [`CONNECTIONS`] unless the mountinfo `table` shows it there already.
fn ensure_fusectl(table: &str) -> std::io::Result<()> {
    let mounted = table.lines().any(|l| {
        l.split_once(" - ")
            .is_some_and(|(_, r)| r.starts_with("fusectl "))
    });
    if mounted {
        return Ok(());
    }
    let status = std::process::Command::new("mount")
        .args(["-t", "fusectl", "none", CONNECTIONS])
        .status()?;
    if !status.success() {
        return Err(std::io::Error::other(format!(
            "mount -t fusectl none {CONNECTIONS}: {status}"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE: &str = "\
36 35 98:0 / /mnt1 rw,noatime master:1 - ext3 /dev/root rw,errors=continue
40 22 0:40 / /tmp/run/a\\040b/mnt rw,nosuid,nodev,relatime shared:80 - fuse /dev/fuse rw,user_id=0,group_id=0
41 22 0:41 / /tmp/run/nbd rw,nosuid - fuse.nbdfuse nbdfuse rw,user_id=0
42 22 8:16 / /tmp/run/blk rw - fuseblk /dev/sdb rw
43 22 0:43 / /tmp/other/mnt rw - fuse.nvmfs nvmfs rw
44 22 7:0 / /tmp/run/mnt rw - btrfs /dev/loop0 rw
45 22 0:45 / /sys/fs/fuse/connections rw - fusectl none rw";

    #[test]
    fn finds_the_fuse_mounts_under_a_directory_and_their_connections() {
        let found = fuse_mounts_in(TABLE, Path::new("/tmp/run"));
        let want = [
            ("/tmp/run/a b/mnt", 40),
            ("/tmp/run/nbd", 41),
            ("/tmp/run/blk", (8 << 20) | 16),
        ];
        assert_eq!(found.len(), want.len(), "{found:?}");
        for (m, (path, conn)) in found.iter().zip(want) {
            assert_eq!(m.mountpoint, Path::new(path));
            assert_eq!(m.connection, conn);
        }
    }

    #[test]
    fn a_sibling_with_the_same_prefix_is_not_under_the_directory() {
        let table = "50 22 0:50 / /tmp/run2/mnt rw - fuse /dev/fuse rw";
        assert!(fuse_mounts_in(table, Path::new("/tmp/run")).is_empty());
    }

    #[test]
    fn malformed_lines_are_skipped_not_fatal() {
        for line in [
            "",
            "garbage",
            "1 2 x:y / /tmp/run/m rw - fuse f rw",
            "1 2 0:1 - fuse",
        ] {
            assert!(fuse_mounts_in(line, Path::new("/tmp")).is_empty(), "{line}");
        }
    }
}
