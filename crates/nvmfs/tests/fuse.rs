//! NVMFS mounted through FUSE, driven by real clients: fio random writes on one large file
//! with verification (the IOZONE case), a Postmark-like small-file generator with content
//! checks, remount, errno of failed calls, and process death (SIGKILL) during flushing and
//! during cleaning followed by a remount that must show every file as last fsync'ed.
//!
//! The mount process is this test binary itself, re-run as `mount_child` (an ignored test that
//! serves the mount described by environment variables), so killing it is a real process
//! death with the real mount left behind. Tests skip with a message when /dev/fuse or
//! fusermount3 is missing (or mounting is not permitted); fio's test skips without fio.
mod common;
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

// ------------------------------------------------------------------ the mount process

/// Serves one mount as described by NVMFS_CHILD_* (run by `Mount::start`, never directly).
#[test]
#[ignore = "the FUSE mount process of the other tests"]
fn mount_child() {
    let Ok(dir) = std::env::var("NVMFS_CHILD_DIR") else {
        return;
    };
    let dir = PathBuf::from(dir);
    let var = |k: &str| std::env::var(k).ok();
    let blocks: u32 = var("NVMFS_CHILD_BLOCKS").unwrap().parse().unwrap();
    let nvram: u64 = var("NVMFS_CHILD_NVRAM").unwrap().parse().unwrap();
    let clean_free: f64 = var("NVMFS_CHILD_CLEAN_FREE").unwrap().parse().unwrap();
    let params = nvmfs::NvmfsParams {
        inode_count: 4096,
        clean_free_share: clean_free,
        ..nvmfs::NvmfsParams::default()
    };
    let mut fs = nvmfs::ssd::open_or_create(
        &dir.join("nvram.img"),
        nvram,
        &dir.join("ssd.img"),
        &common::config(blocks),
        &dftl::spec(),
        &ftl::DesignOptions::default(),
        params,
    )
    .expect("open the images");
    if fs.stats().lists_reset_at_mount {
        eprintln!("child: LRU lists reset at mount");
    }
    if fs.stats().redo_replayed_at_mount {
        eprintln!("child: cleaning redo log replayed at mount");
    }
    fs.check_invariants().expect("invariants at mount");
    if let Some(k) = var("NVMFS_CHILD_KILL") {
        let (p, n) = k.split_once(':').unwrap();
        fs.set_kill_point(Some((
            nvmfs::KillPoint::parse(p).unwrap(),
            n.parse().unwrap(),
        )));
    }
    let flag = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, std::sync::Arc::clone(&flag)).unwrap();
    }
    let report = nvmfs::fuse::serve(fs, &dir.join("mnt"), &flag).expect("serve");
    eprintln!(
        "child: stats flush_rounds={} cleaning_rounds={} moved={} recycled={}",
        report.stats.flush_rounds,
        report.stats.cleaning_rounds,
        report.stats.cleaning_moved_blocks,
        report.stats.cleaning_recycled_blocks
    );
}

struct Mount {
    dir: tempfile::TempDir,
    blocks: u32,
    clean_free: f64,
    nvram_bytes: u64,
    child: Option<Child>,
    runs: u32,
}

fn fuse_missing() -> Option<String> {
    if !Path::new("/dev/fuse").exists() {
        return Some("/dev/fuse is missing".into());
    }
    let ok = Command::new("fusermount3")
        .arg("-V")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    (!ok).then(|| "fusermount3 is not installed".into())
}

fn is_mounted(path: &Path) -> bool {
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    let p = path.to_string_lossy();
    mounts
        .lines()
        .any(|l| l.split(' ').nth(1) == Some(&p) && l.contains("fuse"))
}

impl Mount {
    fn new(blocks: u32, clean_free: f64, nvram_bytes: u64) -> Mount {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("mnt")).unwrap();
        Mount {
            dir,
            blocks,
            clean_free,
            nvram_bytes,
            child: None,
            runs: 0,
        }
    }
    fn mnt(&self) -> PathBuf {
        self.dir.path().join("mnt")
    }
    fn log(&self) -> PathBuf {
        self.dir.path().join(format!("child{}.log", self.runs))
    }
    fn log_text(&self) -> String {
        std::fs::read_to_string(self.log()).unwrap_or_default()
    }

    /// Starts the mount process; Err(reason) when FUSE cannot be used here.
    fn start(&mut self, kill: Option<&str>) -> Result<(), String> {
        if let Some(why) = fuse_missing() {
            return Err(why);
        }
        self.runs += 1;
        let mut cmd = Command::new(std::env::current_exe().unwrap());
        cmd.args(["--exact", "mount_child", "--ignored", "--nocapture"])
            .env("NVMFS_CHILD_DIR", self.dir.path())
            .env("NVMFS_CHILD_BLOCKS", self.blocks.to_string())
            .env("NVMFS_CHILD_NVRAM", self.nvram_bytes.to_string())
            .env("NVMFS_CHILD_CLEAN_FREE", self.clean_free.to_string())
            .stdout(Stdio::null())
            .stderr(File::create(self.log()).unwrap());
        if let Some(k) = kill {
            cmd.env("NVMFS_CHILD_KILL", k);
        }
        let mut child = cmd.spawn().unwrap();
        // Bounded wait for the mount to appear (or the child to fail).
        for _ in 0..400 {
            if is_mounted(&self.mnt()) {
                self.child = Some(child);
                return Ok(());
            }
            if let Some(status) = child.try_wait().unwrap() {
                return Err(format!(
                    "the mount process exited ({status}) before mounting: {}",
                    self.log_text()
                ));
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        let _ = child.kill();
        let _ = child.wait();
        Err(format!("no mount after 10 s: {}", self.log_text()))
    }

    /// SIGTERM: the clean unmount path; the process must exit 0.
    fn stop(&mut self) {
        let mut child = self.child.take().expect("mounted");
        // SAFETY: signal to our own child.
        unsafe {
            libc::kill(child.id() as i32, libc::SIGTERM);
        }
        let status = child.wait().unwrap();
        assert!(
            status.success(),
            "clean unmount failed ({status}): {}",
            self.log_text()
        );
        assert!(!is_mounted(&self.mnt()), "still mounted after SIGTERM");
    }

    /// Waits for the mount process to die (it kills itself at its kill point), then lazily
    /// unmounts the dead mount. Returns its exit status.
    fn wait_dead(&mut self) -> ExitStatus {
        let mut child = self.child.take().expect("mounted");
        let status = child.wait().unwrap();
        let _ = Command::new("fusermount3")
            .args(["-u", "-z"])
            .arg(self.mnt())
            .status();
        status
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        if is_mounted(&self.mnt()) {
            let _ = Command::new("fusermount3")
                .args(["-u", "-z"])
                .arg(self.mnt())
                .status();
        }
    }
}

macro_rules! mount_or_skip {
    ($m:expr, $kill:expr) => {
        if let Err(why) = $m.start($kill) {
            eprintln!("SKIP: NVMFS through FUSE cannot run here: {why}");
            return;
        }
    };
}

fn errno_of(r: std::io::Result<impl Sized>) -> i32 {
    r.err()
        .and_then(|e| e.raw_os_error())
        .expect("the call must fail with an errno")
}

/// A counter from the mount process's last `child: stats` line.
fn stat_of(log: &str, key: &str) -> u64 {
    log.rsplit(&format!("{key}="))
        .next()
        .and_then(|s| s.split([' ', '\n']).next())
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

// ------------------------------------------------------------------ fio (IOZONE case)

fn fio(args: &[String]) -> std::process::Output {
    Command::new("fio").args(args).output().expect("run fio")
}

#[test]
fn fio_random_writes_on_one_large_file() {
    if Command::new("fio").arg("--version").output().is_err() {
        eprintln!("SKIP: fio is not installed");
        return;
    }
    // 48 blocks per chip: a 24 MiB SSD; the file is 12 MiB, NVRAM 4 MiB, so the random
    // overwrite pass flushes many extents and fragments the earlier ones (cleaning).
    let mut m = Mount::new(48, 0.3, 4 << 20);
    mount_or_skip!(m, None);
    let file = m.mnt().join("big");
    let common = [
        format!("--filename={}", file.display()),
        "--name=iozone".into(),
        "--size=12M".into(),
        "--bs=4k".into(),
        "--ioengine=psync".into(),
        "--verify=crc32c".into(),
        "--randseed=1234".into(),
        "--fallocate=none".into(),
        "--verify_state_save=0".into(),
        "--output-format=terse".into(),
    ];
    let passes = [("write", "--do_verify=1"), ("randwrite", "--do_verify=1")];
    for (rw, verify) in passes {
        let mut a = common.to_vec();
        a.push(format!("--rw={rw}"));
        a.push(verify.into());
        let out = fio(&a);
        assert!(
            out.status.success(),
            "fio {rw}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let stat = std::fs::metadata(&file).unwrap();
    assert_eq!(stat.len(), 12 << 20);
    m.stop();
    let log = m.log_text();
    assert!(log.contains("child: stats"), "{log}");
    eprintln!("{log}");
    assert!(
        stat_of(&log, "flush_rounds") > 10,
        "12 MiB through 4 MiB NVRAM must flush: {log}"
    );
    assert!(
        stat_of(&log, "cleaning_rounds") > 0,
        "random overwrites fragment the extents: {log}"
    );
    // Remount and let fio verify what the last pass wrote.
    mount_or_skip!(m, None);
    let mut a = common.to_vec();
    a.push("--rw=randwrite".into());
    a.push("--verify_only".into());
    let out = fio(&a);
    assert!(
        out.status.success(),
        "fio verify after remount: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    m.stop();
}

// ------------------------------------------------------------------ Postmark-like

/// Postmark: a pool of `pool` files (512 B - 16 KB) in a few directories, then `tx`
/// transactions, each a read (verified against the model) or an append, and a create or a
/// delete. The model is what every file must hold.
fn postmark(
    root: &Path,
    tag: &str,
    rng: &mut ChaCha8Rng,
    model: &mut BTreeMap<PathBuf, Vec<u8>>,
    pool: u32,
    tx: u32,
) {
    const DIRS: u32 = 5;
    for d in 0..DIRS {
        let _ = std::fs::create_dir(root.join(format!("d{d}")));
    }
    let mut next = 0u32;
    let mut create = |rng: &mut ChaCha8Rng, model: &mut BTreeMap<PathBuf, Vec<u8>>| {
        let path = root.join(format!("d{}/{tag}{next}", next % DIRS));
        next += 1;
        let len = rng.random_range(512..16_384usize);
        let data: Vec<u8> = (0..len).map(|_| rng.random()).collect();
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .unwrap();
        f.write_all(&data).unwrap();
        model.insert(path, data);
    };
    for _ in 0..pool {
        create(rng, model);
    }
    let pick = |rng: &mut ChaCha8Rng, model: &BTreeMap<PathBuf, Vec<u8>>| {
        let k = rng.random_range(0..model.len());
        model.keys().nth(k).unwrap().clone()
    };
    for _ in 0..tx {
        if !model.is_empty() {
            let p = pick(rng, model);
            if rng.random_bool(0.5) {
                let got = std::fs::read(&p).unwrap();
                assert!(got == model[&p], "{} differs from the model", p.display());
            } else {
                let len = rng.random_range(1..4_096usize);
                let data: Vec<u8> = (0..len).map(|_| rng.random()).collect();
                let mut f = OpenOptions::new().append(true).open(&p).unwrap();
                f.write_all(&data).unwrap();
                model.get_mut(&p).unwrap().extend_from_slice(&data);
            }
        }
        if model.is_empty() || rng.random_bool(0.5) {
            create(rng, model);
        } else {
            let p = pick(rng, model);
            std::fs::remove_file(&p).unwrap();
            model.remove(&p);
        }
    }
}

fn verify_tree(root: &Path, model: &BTreeMap<PathBuf, Vec<u8>>) {
    let mut seen = 0;
    for d in std::fs::read_dir(root).unwrap() {
        let d = d.unwrap();
        if !d.file_type().unwrap().is_dir() {
            continue;
        }
        for f in std::fs::read_dir(d.path()).unwrap() {
            let p = f.unwrap().path();
            let want = model
                .get(&p)
                .unwrap_or_else(|| panic!("{} not in model", p.display()));
            let got = std::fs::read(&p).unwrap();
            let first = got.iter().zip(want.iter()).position(|(a, b)| a != b);
            assert!(
                &got == want,
                "{} differs: {} bytes, want {}, first difference at {first:?}",
                p.display(),
                got.len(),
                want.len()
            );
            seen += 1;
        }
    }
    assert_eq!(seen, model.len(), "readdir shows every file once");
}

#[test]
fn postmark_small_files_survive_remount() {
    let long = std::env::var("MOBIUS_LONG").is_ok();
    // The live set grows with the appends: the long run gets a 64 MiB SSD instead of 24 MiB.
    let mut m = Mount::new(if long { 128 } else { 48 }, 0.10, 4 << 20);
    mount_or_skip!(m, None);
    let mut rng = ChaCha8Rng::seed_from_u64(42);
    let mut model = BTreeMap::new();
    let (pool, tx): (u32, u32) = if long {
        (1_500, 20_000)
    } else {
        (1_000, 3_000)
    };
    postmark(&m.mnt(), "a", &mut rng, &mut model, pool, tx);
    verify_tree(&m.mnt(), &model);
    m.stop();
    let log = m.log_text();
    eprintln!("{} files; {log}", model.len());
    assert!(
        stat_of(&log, "flush_rounds") > 0,
        "the small files outgrow NVRAM: {log}"
    );
    mount_or_skip!(m, None);
    verify_tree(&m.mnt(), &model);
    // A second round after the remount, then a third mount.
    postmark(&m.mnt(), "b", &mut rng, &mut model, pool / 4, tx / 3);
    verify_tree(&m.mnt(), &model);
    m.stop();
    mount_or_skip!(m, None);
    verify_tree(&m.mnt(), &model);
    m.stop();
}

// ------------------------------------------------------------------ POSIX calls and errno

#[test]
fn posix_calls_and_errno() {
    let mut m = Mount::new(24, 0.10, 4 << 20);
    mount_or_skip!(m, None);
    let r = m.mnt();
    std::fs::create_dir(r.join("d")).unwrap();
    std::fs::write(r.join("d/a"), b"hello").unwrap();
    assert_eq!(errno_of(std::fs::create_dir(r.join("d"))), libc::EEXIST);
    assert_eq!(
        errno_of(
            OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(r.join("d/a"))
        ),
        libc::EEXIST
    );
    assert_eq!(errno_of(std::fs::remove_dir(r.join("d"))), libc::ENOTEMPTY);
    assert_eq!(errno_of(std::fs::remove_file(r.join("d"))), libc::EISDIR);
    assert_eq!(errno_of(File::open(r.join("missing"))), libc::ENOENT);
    assert_eq!(errno_of(std::fs::remove_dir(r.join("d/a"))), libc::ENOTDIR);
    assert_eq!(errno_of(File::open(r.join("d/a/x"))), libc::ENOTDIR);
    let long = "n".repeat(200);
    assert_eq!(errno_of(File::create(r.join(&long))), libc::ENAMETOOLONG);
    std::fs::create_dir(r.join("e")).unwrap();
    assert_eq!(
        errno_of(std::fs::rename(r.join("e"), r.join("d/a"))),
        libc::ENOTDIR
    );
    assert_eq!(
        errno_of(std::fs::rename(r.join("d/a"), r.join("e"))),
        libc::EISDIR
    );
    assert_eq!(
        errno_of(std::fs::rename(r.join("d"), r.join("d/sub"))),
        libc::EINVAL
    );
    // rename over an existing file replaces it.
    std::fs::write(r.join("b"), b"bbb").unwrap();
    std::fs::rename(r.join("b"), r.join("d/a")).unwrap();
    assert_eq!(std::fs::read(r.join("d/a")).unwrap(), b"bbb");
    assert!(!r.join("b").exists());
    // truncate (grow and shrink), holes read as zeros, pwrite/pread.
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(r.join("d/a"))
        .unwrap();
    f.set_len(10_000).unwrap();
    f.write_all_at(b"xyz", 9_000).unwrap();
    let mut buf = vec![0u8; 10_000];
    f.read_exact_at(&mut buf, 0).unwrap();
    assert_eq!(&buf[..3], b"bbb");
    assert!(buf[3..9_000].iter().all(|&b| b == 0));
    assert_eq!(&buf[9_000..9_003], b"xyz");
    f.set_len(2).unwrap();
    f.sync_all().unwrap();
    drop(f);
    assert_eq!(std::fs::read(r.join("d/a")).unwrap(), b"bb");
    // stat / setattr
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(r.join("d/a"), std::fs::Permissions::from_mode(0o600)).unwrap();
    let md = std::fs::metadata(r.join("d/a")).unwrap();
    assert_eq!(md.permissions().mode() & 0o777, 0o600);
    assert_eq!(md.len(), 2);
    assert!(md.is_file());
    assert!(std::fs::metadata(r.join("d")).unwrap().is_dir());
    // readdir
    let mut names: Vec<String> = std::fs::read_dir(&r)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["d", "e"]);
    // statfs
    let c = std::ffi::CString::new(r.to_str().unwrap()).unwrap();
    // SAFETY: statvfs writes into the zeroed struct we pass.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    assert_eq!(unsafe { libc::statvfs(c.as_ptr(), &mut st) }, 0);
    assert_eq!(st.f_bsize, 4096);
    assert!(st.f_blocks > 0 && st.f_bfree <= st.f_blocks);
    assert!(st.f_ffree > 0);
    // Symbolic and hard links.
    std::os::unix::fs::symlink("d/a", r.join("sym")).unwrap();
    assert_eq!(std::fs::read_link(r.join("sym")).unwrap(), Path::new("d/a"));
    assert!(std::fs::symlink_metadata(r.join("sym"))
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(
        std::fs::read(r.join("sym")).unwrap(),
        b"bb",
        "followed by the kernel"
    );
    // (A DirEntry keeps its directory open: take the type and let it go.)
    let sym_is_link = std::fs::read_dir(&r)
        .unwrap()
        .map(|e| e.unwrap())
        .find(|e| e.file_name() == "sym")
        .map(|e| e.file_type().unwrap().is_symlink());
    assert_eq!(sym_is_link, Some(true), "readdir's d_type");
    assert_eq!(errno_of(std::fs::read_link(r.join("d/a"))), libc::EINVAL);
    std::fs::hard_link(r.join("d/a"), r.join("hard")).unwrap();
    use std::os::unix::fs::MetadataExt;
    assert_eq!(std::fs::metadata(r.join("hard")).unwrap().nlink(), 2);
    assert_eq!(
        errno_of(std::fs::hard_link(r.join("d"), r.join("dl"))),
        libc::EPERM
    );
    assert_eq!(
        errno_of(std::fs::hard_link(r.join("d/a"), r.join("e"))),
        libc::EEXIST
    );
    std::fs::remove_file(r.join("hard")).unwrap();
    assert_eq!(std::fs::metadata(r.join("d/a")).unwrap().nlink(), 1);
    std::fs::remove_file(r.join("sym")).unwrap();
    // Unlinked (and renamed-over) while open: readable and writable until the last close.
    let ffree = |p: &Path| {
        let c = std::ffi::CString::new(p.to_str().unwrap()).unwrap();
        // SAFETY: statvfs writes into the zeroed struct we pass.
        let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
        assert_eq!(unsafe { libc::statvfs(c.as_ptr(), &mut st) }, 0);
        st.f_ffree
    };
    let free_before = ffree(&r);
    std::fs::write(r.join("tmp"), vec![7u8; 20_000]).unwrap();
    std::fs::write(r.join("over"), b"old").unwrap();
    let held = OpenOptions::new()
        .read(true)
        .write(true)
        .open(r.join("tmp"))
        .unwrap();
    let held2 = File::open(r.join("over")).unwrap();
    std::fs::remove_file(r.join("tmp")).unwrap();
    std::fs::write(r.join("new"), b"new").unwrap();
    std::fs::rename(r.join("new"), r.join("over")).unwrap();
    assert_eq!(errno_of(File::open(r.join("tmp"))), libc::ENOENT);
    held.write_all_at(b"still here", 10_000).unwrap();
    let mut buf = vec![0u8; 20_000];
    held.read_exact_at(&mut buf, 0).unwrap();
    assert_eq!(&buf[10_000..10_010], b"still here");
    let mut old = Vec::new();
    (&held2).read_to_end(&mut old).unwrap();
    assert_eq!(
        old, b"old",
        "the replaced file stays readable through its handle"
    );
    assert_eq!(std::fs::read(r.join("over")).unwrap(), b"new");
    assert_eq!(
        ffree(&r),
        free_before - 3,
        "two nameless files and `over` hold inodes"
    );
    drop(held);
    drop(held2);
    // Release is asynchronous in FUSE: wait (bounded) for the inodes to come back.
    for _ in 0..200 {
        if ffree(&r) == free_before - 1 {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(ffree(&r), free_before - 1, "the last close freed both");
    std::fs::remove_file(r.join("over")).unwrap();
    // rmdir, then the directory is gone.
    std::fs::remove_file(r.join("d/a")).unwrap();
    std::fs::remove_dir(r.join("d")).unwrap();
    assert_eq!(errno_of(std::fs::metadata(r.join("d"))), libc::ENOENT);
    m.stop();
}

// ------------------------------------------------------------------ process death

/// The write in flight when the mount died: (file, block, byte).
type InFlight = (usize, u64, u8);

const CRASH_FILES: usize = 3;
const CRASH_BLOCKS: u64 = 150;

/// Seeded 4 KB overwrites with fsync after each, until the mount dies. Returns the model as
/// last fsync'ed and the write in flight when it died (file, block, byte).
fn write_until_death(
    mnt: &Path,
    seed: u64,
    max_writes: u32,
    progress: Option<&AtomicU64>,
) -> (Vec<Vec<u8>>, Option<InFlight>) {
    let mut files: Vec<File> = (0..CRASH_FILES)
        .map(|i| {
            OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(true)
                .open(mnt.join(format!("f{i}")))
                .unwrap()
        })
        .collect();
    let mut model = vec![Vec::new(); CRASH_FILES];
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    for _ in 0..max_writes {
        let f = rng.random_range(0..CRASH_FILES);
        let b = rng.random_range(0..CRASH_BLOCKS);
        let v: u8 = rng.random_range(1..=255);
        let r = files[f]
            .seek(SeekFrom::Start(b * 4096))
            .and_then(|_| files[f].write_all(&[v; 4096]))
            .and_then(|_| files[f].sync_all());
        if r.is_err() {
            return (model, Some((f, b, v)));
        }
        let m: &mut Vec<u8> = &mut model[f];
        let end = ((b + 1) * 4096) as usize;
        if m.len() < end {
            m.resize(end, 0);
        }
        m[(b * 4096) as usize..end].fill(v);
        if let Some(p) = progress {
            p.fetch_add(1, Ordering::Release);
        }
    }
    (model, None)
}

fn verify_after_crash(mnt: &Path, model: &[Vec<u8>], pending: Option<InFlight>) {
    for (i, want) in model.iter().enumerate() {
        let mut got = Vec::new();
        File::open(mnt.join(format!("f{i}")))
            .unwrap()
            .read_to_end(&mut got)
            .unwrap();
        let in_flight = pending.filter(|p| p.0 == i);
        let grown = in_flight.map_or(want.len(), |(_, b, _)| {
            want.len().max(((b + 1) * 4096) as usize)
        });
        assert!(
            got.len() == want.len() || got.len() == grown,
            "file {i}: {} bytes, fsync'ed {} (in flight: {in_flight:?})",
            got.len(),
            want.len()
        );
        for (pg, chunk) in got.chunks(4096).enumerate() {
            let old = want.chunks(4096).nth(pg);
            let ok = Some(chunk) == old
                || (old.is_none() && chunk.iter().all(|&x| x == 0))
                || in_flight
                    .is_some_and(|(_, b, v)| b == pg as u64 && chunk.iter().all(|&x| x == v));
            assert!(ok, "file {i} block {pg} is not what was last fsync'ed");
        }
    }
}

/// Kills the mount process at `point` (its n-th occurrence), remounts, verifies.
fn crash_at(point: &str, seed: u64) -> String {
    let mut m = Mount::new(20, 0.3, 1 << 20);
    if let Err(why) = m.start(Some(point)) {
        return format!("SKIP: {why}");
    }
    let (model, pending) = write_until_death(&m.mnt(), seed, 20_000, None);
    let status = m.wait_dead();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(
        status.signal(),
        Some(libc::SIGKILL),
        "the mount process must die at {point} ({status}): {}",
        m.log_text()
    );
    assert!(pending.is_some(), "the writer saw the death");
    m.start(None).unwrap();
    let log = m.log_text();
    verify_after_crash(&m.mnt(), &model, pending);
    // Still a working file system: write on, fsync, unmount cleanly, remount, verify.
    let (model2, pending2) = write_until_death(&m.mnt(), seed + 1, 300, None);
    assert!(pending2.is_none());
    m.stop();
    m.start(None).unwrap();
    verify_after_crash(&m.mnt(), &model2, None);
    m.stop();
    log
}

#[test]
fn kill_during_flush_then_remount() {
    if let Some(why) = fuse_missing() {
        eprintln!("SKIP: {why}");
        return;
    }
    let log = crash_at("flush-after-ssd-write:3", 11);
    if log.starts_with("SKIP") {
        return eprintln!("{log}");
    }
    assert!(!log.contains("LRU lists reset"), "{log}");
    let log = crash_at("flush-mid-metadata:4", 12);
    assert!(
        log.contains("LRU lists reset"),
        "a death inside the list update resets the lists (§III-D): {log}"
    );
}

#[test]
fn kill_during_cleaning_then_remount() {
    if let Some(why) = fuse_missing() {
        eprintln!("SKIP: {why}");
        return;
    }
    let log = crash_at("clean-before-commit:2", 21);
    if log.starts_with("SKIP") {
        return eprintln!("{log}");
    }
    assert!(!log.contains("redo log replayed"), "{log}");
    let log = crash_at("clean-after-commit:2", 22);
    assert!(
        log.contains("cleaning redo log replayed"),
        "a committed cleaning transaction is replayed at mount: {log}"
    );
}

#[test]
fn kill9_at_arbitrary_instants() {
    // SIGKILL from another thread once a seeded number of writes were fsync'ed, landing
    // wherever the mount process is then (inside a write, an fsync, a flush round, idle);
    // several rounds on the same images: each remount recovers and the next run goes on.
    let mut m = Mount::new(20, 0.3, 1 << 20);
    mount_or_skip!(m, None);
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let rounds = std::env::var("MOBIUS_LONG").map_or(3, |_| 12);
    for round in 0..rounds {
        let n: u64 = rng.random_range(200..1_500);
        let pid = m.child.as_ref().unwrap().id() as i32;
        let progress = AtomicU64::new(0);
        let (model, pending) = std::thread::scope(|s| {
            s.spawn(|| {
                // Bounded: the writer makes progress or has already died.
                for _ in 0..200_000 {
                    if progress.load(Ordering::Acquire) >= n {
                        break;
                    }
                    std::thread::sleep(Duration::from_micros(50));
                }
                // SAFETY: signal to our own child.
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                }
            });
            write_until_death(&m.mnt(), 100 + round, 1_000_000, Some(&progress))
        });
        assert!(pending.is_some(), "round {round}: the writer saw the death");
        m.wait_dead();
        m.start(None).unwrap();
        verify_after_crash(&m.mnt(), &model, pending);
        for i in 0..CRASH_FILES {
            std::fs::remove_file(m.mnt().join(format!("f{i}"))).unwrap();
        }
    }
    m.stop();
}

#[test]
fn sigterm_with_a_busy_mount_point_still_closes_cleanly() {
    let mut m = Mount::new(24, 0.10, 4 << 20);
    mount_or_skip!(m, None);
    std::fs::write(m.mnt().join("f"), b"kept").unwrap();
    let held = File::open(m.mnt().join("f")).unwrap();
    m.stop(); // exit 0 and no longer in the mount table: detached lazily
    assert!(m.log_text().contains("child: stats"), "{}", m.log_text());
    let mut buf = [0u8; 4];
    assert!(
        held.read_at(&mut buf, 0).is_err(),
        "the file system is closed"
    );
    drop(held);
    mount_or_skip!(m, None);
    assert_eq!(std::fs::read(m.mnt().join("f")).unwrap(), b"kept");
    m.stop();
}
