//! One process per image: every image file (the flash image of [`crate::FileStore`], NVMFS's
//! NVRAM file) is held under an exclusive `flock(2)` for as long as it is open.
//!
//! Two processes writing one image corrupt it silently (each caches the page states, block
//! table and the design's RAM state; their programs interleave on the file), so a second open
//! is refused with [`FlashError::ImageLocked`], naming the image and, where `/proc/locks` tells,
//! the process that holds it. The lock is taken on the open file before anything is read or
//! written, so a refused open leaves the image byte for byte as it was.
//!
//! Why `flock` and not `fcntl` record locks: a record lock belongs to the process and is
//! dropped when *any* descriptor of the file is closed in that process (reading an image's
//! header with `mobius info` in the same process would release it); a `flock` lock belongs to
//! the open file and is released only when that descriptor closes, which the kernel also does
//! when the process dies (`kill -9` included), so a stale lock cannot outlive its holder. The
//! lock is advisory: it keeps out every mobius front end, not `dd`.

use crate::error::FlashError;
use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::os::unix::io::AsRawFd;
use std::path::Path;

/// Takes an exclusive lock on `file` (opened from `path`) without waiting: refused with
/// [`FlashError::ImageLocked`] when another open file holds it, in this process or another.
/// The lock lasts as long as `file` stays open.
pub fn lock_exclusive(file: &File, path: &Path) -> Result<(), FlashError> {
    loop {
        // SAFETY: flock on a valid, open descriptor; no memory is passed.
        let r = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if r == 0 {
            return Ok(());
        }
        let e = std::io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EWOULDBLOCK) => {
                return Err(FlashError::ImageLocked {
                    path: path.display().to_string(),
                    holder: holder_of(file)
                        .unwrap_or_else(|| "a process not named by /proc/locks".into()),
                })
            }
            _ => {
                return Err(FlashError::Image {
                    path: path.display().to_string(),
                    reason: format!("cannot take the exclusive lock on it: {e}"),
                })
            }
        }
    }
}

/// Who holds the `flock` lock on `file`: "pid N (command line)", from `/proc/locks`.
fn holder_of(file: &File) -> Option<String> {
    let meta = file.metadata().ok()?;
    let locks = std::fs::read_to_string("/proc/locks").ok()?;
    let pid = flock_holder(
        &locks,
        libc::major(meta.dev()),
        libc::minor(meta.dev()),
        meta.ino(),
    )?;
    let command = std::fs::read(format!("/proc/{pid}/cmdline"))
        .ok()
        .map(|c| {
            let words: Vec<String> = c
                .split(|&b| b == 0)
                .filter(|w| !w.is_empty())
                .map(|w| String::from_utf8_lossy(w).into_owned())
                .collect();
            words.join(" ")
        })
        .filter(|c| !c.is_empty());
    Some(match command {
        Some(c) => format!("pid {pid}: {c}"),
        None => format!("pid {pid}"),
    })
}

/// The pid of the granted `FLOCK` lock on inode `ino` of device `major:minor` in the text of
/// `/proc/locks` (lines like `1: FLOCK  ADVISORY  WRITE 17937 fe:00:9978625 0 EOF`; waiters,
/// marked `->`, are skipped). The device is printed in hex.
fn flock_holder(locks: &str, major: u32, minor: u32, ino: u64) -> Option<u32> {
    let wanted = format!("{major:02x}:{minor:02x}:{ino}");
    locks.lines().find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        match fields.as_slice() {
            [_, "FLOCK", _, _, pid, dev_ino, ..] if *dev_ino == wanted => pid.parse().ok(),
            _ => None,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_holder_is_read_from_proc_locks_lines() {
        let locks = "1: POSIX  ADVISORY  WRITE 11 fe:00:77 0 EOF\n\
                     2: FLOCK  ADVISORY  WRITE 4242 fe:00:9978625 0 EOF\n\
                     2: -> FLOCK  ADVISORY  WRITE 4343 fe:00:9978625 0 EOF\n\
                     3: FLOCK  ADVISORY  WRITE 55 08:01:9978625 0 EOF\n";
        assert_eq!(flock_holder(locks, 0xfe, 0, 9978625), Some(4242));
        assert_eq!(flock_holder(locks, 8, 1, 9978625), Some(55));
        assert_eq!(
            flock_holder(locks, 0xfe, 0, 77),
            None,
            "a record lock is not ours"
        );
        assert_eq!(flock_holder(locks, 0xfe, 0, 1), None);
        assert_eq!(flock_holder("garbage\n\n1:", 0, 0, 0), None);
    }

    #[test]
    fn a_second_open_file_is_refused_and_names_this_process() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("img");
        let first = File::create(&path).unwrap();
        lock_exclusive(&first, &path).unwrap();
        let second = File::open(&path).unwrap();
        let err = lock_exclusive(&second, &path).unwrap_err();
        let me = format!("pid {}", std::process::id());
        match &err {
            FlashError::ImageLocked { path: p, holder } => {
                assert_eq!(p, &path.display().to_string());
                assert!(holder.starts_with(&me), "{holder}");
            }
            other => panic!("{other:?}"),
        }
        assert!(err.to_string().contains("already open"), "{err}");
        drop(first);
        lock_exclusive(&second, &path).expect("free once the holder closed it");
    }
}
