//! Power cuts under a real file system: OPTR's claim shown with ext4.
//!
//! Each trial: `mobius serve` on a fresh image and a Unix socket, nbdfuse on the socket, a
//! direct-I/O loop device, `mkfs.ext4`, `mount -o nobarrier` (ext4 sends no FLUSH or FUA: only
//! the device's own ordering keeps the journal sound), a writer that creates, fsyncs, rewrites
//! and deletes files, then `kill -9` of the server after a seeded number of writer steps (a power cut: the
//! server's RAM is lost, the image file keeps what reached it). The server is restarted on
//! the same image (the design's recovery runs), the file system is mounted once (ext4 replays
//! its journal) and unmounted, and `fsck.ext4 -fn` judges it. A trial is damaged when the
//! mount fails or fsck reports anything.
//!
//! - **optr** (ordered promise: what survives is a prefix of the requests, each whole) must come
//!   out clean in every trial.
//! - **wcache** (flush-only promise, and ext4 sends no flush here) may be damaged; the test
//!   reports its damage rate, and with 10 or more trials asserts that at least one was damaged
//!   (a power-cut test that cannot tell the designs apart proves nothing).
//!
//! Both designs get the OPTR paper's 8 MB write cache (§6.1, `--param cache_mb=8`) rather than
//! the default of 1/64 of this 128 MiB device (2 MiB). With 2 MiB, LRU eviction writes pages
//! back almost in arrival order and wcache came out damaged in only 0–4 of 20 trials; with
//! 8 MiB, hot metadata stays cached while the journal moves on, as in a real drive's cache.
//!
//! Trials: 3 per design by default, 20 with `MOBIUS_LONG=1`, N with `MOBIUS_POWER_CUT_TRIALS=N`. The server is served on a socket
//! (not `nbdfuse --command ... --stdio`) so the test holds its pid and can SIGKILL it alone.

mod common;

use common::*;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

const SIZE: &str = "128M";
/// The write cache of both designs (OPTR §6.1: 8 MB).
const CACHE: [&str; 2] = ["--param", "cache_mb=8"];

fn trials() -> u64 {
    if let Some(n) = std::env::var("MOBIUS_POWER_CUT_TRIALS")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        return n;
    }
    if std::env::var("MOBIUS_LONG").is_ok_and(|v| v == "1") {
        20
    } else {
        3
    }
}

/// Writes, fsyncs, atomically replaces (rename) and deletes files until `stop` or the first error; counts its
/// steps in `progress`.
fn writer(dir: &Path, seed: u64, stop: &AtomicBool, progress: &AtomicU64) -> u64 {
    let mut done = 0u64;
    for i in 0..100_000u64 {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let r = splitmix(seed ^ i);
        let sub = dir.join(format!("d{}", r % 8));
        let path = sub.join(format!("f{}", r % 200));
        let step = (|| -> std::io::Result<()> {
            std::fs::create_dir_all(&sub)?;
            match r % 10 {
                0 => {
                    let _ = std::fs::remove_file(&path);
                }
                1 | 2 => {
                    // Atomic replace: write a temporary, fsync it, rename it over, fsync the dir.
                    let tmp = sub.join(format!("t{}", r % 200));
                    let len = 512 + (r >> 8) as usize % (64 << 10);
                    std::fs::write(&tmp, content(seed, i, len))?;
                    std::fs::File::open(&tmp)?.sync_all()?;
                    std::fs::rename(&tmp, &path)?;
                    std::fs::File::open(&sub)?.sync_all()?;
                }
                _ => {
                    let len = 512 + (r >> 8) as usize % (64 << 10);
                    std::fs::write(&path, content(seed, i, len))?;
                    std::fs::File::open(&path)?.sync_all()?;
                }
            }
            Ok(())
        })();
        if step.is_err() {
            break;
        }
        done += 1;
        progress.store(done, Ordering::Relaxed);
    }
    done
}

/// One trial; `Ok(())` when the recovered file system is clean, `Err(why)` when damaged.
fn trial(ftl: &str, n: u64) -> Result<(), String> {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let image = dir.join("dev.img");
    let seed = splitmix(0xc0ffee ^ n ^ (ftl.len() as u64) << 32);
    // The power cut lands after a seeded number of writer steps (200 to 3,199), so how much
    // work precedes it does not depend on how loaded the machine is.
    let cut_after_steps = 200 + seed % 3000;
    let files_written;
    {
        let mut server = Server::start(dir, ftl, &image, SIZE, &CACHE);
        let mut stack = server.attach(&dir.join("fuse1"));
        must_step(stack.mkfs("ext4", &["-q"]));
        stack.mount(&dir.join("ext1"), "nobarrier").unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = mpsc::channel();
        let progress = Arc::new(AtomicU64::new(0));
        let wdir = stack.mount_point().to_path_buf();
        let (wstop, wprogress) = (Arc::clone(&stop), Arc::clone(&progress));
        std::thread::spawn(move || {
            let _ = tx.send(writer(&wdir, seed, &wstop, &wprogress));
        });
        // Bounded: a writer that stalls still gets its power cut after 120 s.
        wait_for(120, || progress.load(Ordering::Relaxed) >= cut_after_steps);
        server.kill9();
        stop.store(true, Ordering::Relaxed);
        // The writer ends on its first I/O error; if it hangs in the kernel it is left behind
        // and the lazy unmount below detaches the mount anyway.
        files_written = rx.recv_timeout(Duration::from_secs(60)).unwrap_or(u64::MAX);
        drop(stack);
    }
    assert!(
        files_written > 0,
        "{ftl} trial {n}: the writer did nothing before the cut"
    );
    let mut server = Server::start(dir, ftl, &image, SIZE, &CACHE);
    let mut stack = server.attach(&dir.join("fuse2"));
    let verdict = match stack.mount(&dir.join("ext2"), "") {
        Err(e) => Err(format!("mount after recovery failed: {e}")),
        Ok(()) => match stack.unmount_fs() {
            Ok(()) => stack.fsck_ext4().map_err(|e| e.to_string()),
            Err(_) => Err("unmount after journal replay failed".into()),
        },
    };
    drop(stack);
    assert!(
        server.stop(),
        "{ftl} trial {n}: clean shutdown after the check"
    );
    eprintln!(
        "{ftl} trial {n}: cut after step {cut_after_steps}, writer ended at step {}: {}",
        files_written,
        if verdict.is_ok() { "clean" } else { "DAMAGED" }
    );
    verdict
}

fn campaign(ftl: &str) -> (u64, Vec<(u64, String)>) {
    let n = trials();
    let damaged: Vec<(u64, String)> = (0..n)
        .filter_map(|i| trial(ftl, i).err().map(|e| (i, e)))
        .collect();
    eprintln!(
        "power-cut campaign {ftl}: {} of {n} trials damaged ({:.0} %)",
        damaged.len(),
        100.0 * damaged.len() as f64 / n as f64
    );
    (n, damaged)
}

#[test]
fn optr_keeps_ext4_consistent_across_kill_9() {
    if skip("optr_keeps_ext4_consistent_across_kill_9", &[]) {
        return;
    }
    let (n, damaged) = campaign("optr");
    assert!(
        damaged.is_empty(),
        "OPTR must keep ext4 (nobarrier) clean across power cuts; {} of {n} damaged:\n{}",
        damaged.len(),
        damaged
            .iter()
            .map(|(i, e)| format!("trial {i}: {e}"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[test]
fn wcache_damage_rate_under_kill_9_is_reported() {
    if skip("wcache_damage_rate_under_kill_9_is_reported", &[]) {
        return;
    }
    // The write-cached baseline promises only flush-only and ext4 sends no flush here: damage
    // is allowed, so the rate is printed; only its absence over many trials fails the test.
    let (n, damaged) = campaign("wcache");
    println!(
        "wcache: {} of {n} power-cut trials left ext4 damaged",
        damaged.len()
    );
    if let Some((i, e)) = damaged.first() {
        let first: String = e.lines().take(12).collect::<Vec<_>>().join("\n");
        eprintln!("wcache trial {i}, first damage report:\n{first}");
    }
    // 70-80 % of trials are damaged (docs/nbd.md): none in 10 or more means the test has lost
    // its power to tell an ordered device from a write-cached one.
    assert!(
        n < 10 || !damaged.is_empty(),
        "wcache came out clean in all {n} power-cut trials: the test no longer tells designs apart"
    );
}
