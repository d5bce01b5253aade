//! ext4 on `mobius serve` through real clients, for dftl, wcache and optr:
//! `nbdfuse` + `losetup --direct-io=on` + `mkfs.ext4` + `mount`, files written and fsynced, fio
//! with verification, unmount, clean server shutdown, restart on the same image (recovery),
//! `fsck.ext4 -fn` clean, remount, every file and fio's data verified again.
//!
//! Skips (passes, printing `SKIP`) where /dev/fuse, loop devices, root or the tools are missing.

mod common;

use common::*;
use std::path::Path;

const SIZE: &str = "192M";
const FILES: u64 = 40;

fn file_len(i: u64) -> usize {
    1024 + (splitmix(i) % (48 << 10)) as usize
}

fn write_files(dir: &Path, seed: u64) {
    let sub = dir.join("files");
    std::fs::create_dir_all(&sub).unwrap();
    for i in 0..FILES {
        let path = sub.join(format!("f{i:03}"));
        std::fs::write(&path, content(seed, i, file_len(i))).unwrap();
        std::fs::File::open(&path).unwrap().sync_all().unwrap();
    }
}

fn verify_files(dir: &Path, seed: u64) {
    for i in 0..FILES {
        let path = dir.join("files").join(format!("f{i:03}"));
        let got = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(
            got == content(seed, i, file_len(i)),
            "{} differs",
            path.display()
        );
    }
}

fn fio(dir: &Path, verify_only: bool) {
    let mut args = vec![
        "--name=verify".to_string(),
        format!("--directory={}", dir.display()),
        "--rw=randwrite".into(),
        "--bs=4k".into(),
        "--size=8M".into(),
        "--ioengine=psync".into(),
        "--direct=1".into(),
        "--verify=crc32c".into(),
        "--randseed=7".into(),
        "--verify_state_save=0".into(),
        "--output-format=terse".into(),
    ];
    if verify_only {
        args.push("--verify_only".into());
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    must("fio", &args, 300);
}

fn round_trip(ftl: &str) {
    let test = format!("ext4_round_trip_{ftl}");
    let use_fio = have("fio");
    if skip(&test, &[]) {
        return;
    }
    if !use_fio {
        eprintln!("{test}: fio is not installed; the fio step is skipped");
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let image = dir.join("dev.img");
    let seed = 0x5eed ^ ftl.len() as u64;
    {
        let mut server = Server::start(dir, ftl, &image, SIZE, &[]);
        let mut stack = server.attach(&dir.join("fuse1"));
        must_step(stack.mkfs("ext4", &["-q"]));
        stack.mount(&dir.join("ext1"), "").unwrap();
        let mnt = stack.mount_point().to_path_buf();
        write_files(&mnt, seed);
        if use_fio {
            fio(&mnt, false);
        }
        verify_files(&mnt, seed);
        assert!(stack.unmount_fs().is_ok(), "{ftl}: unmount");
        drop(stack);
        assert!(server.stop(), "{ftl}: clean shutdown");
    }
    // Restart on the same image: the design's recovery runs, then the file system is checked.
    let mut server = Server::start(dir, ftl, &image, SIZE, &[]);
    let log = std::fs::read_to_string(&server.log).unwrap();
    assert!(log.contains("recovered"), "{ftl}: {log}");
    let mut stack = server.attach(&dir.join("fuse2"));
    if let Err(report) = stack.fsck_ext4() {
        panic!("{ftl}: fsck after a clean restart: {report}");
    }
    stack.mount(&dir.join("ext2"), "").unwrap();
    let mnt = stack.mount_point().to_path_buf();
    verify_files(&mnt, seed);
    if use_fio {
        fio(&mnt, true);
    }
    assert!(stack.unmount_fs().is_ok());
    drop(stack);
    assert!(server.stop());
}

#[test]
fn ext4_round_trip_dftl() {
    round_trip("dftl");
}

#[test]
fn ext4_round_trip_wcache() {
    round_trip("wcache");
}

#[test]
fn ext4_round_trip_optr() {
    round_trip("optr");
}
