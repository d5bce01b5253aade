//! Real-client plumbing for the tests: `mobius serve` as a process on a Unix socket
//! ([`Server`]: started, stopped, power-cut by signal or `kill -9`), under the kernel stack of
//! `lab::kernel_stack` (the one the experiments use): `nbdfuse` on the socket, a direct-I/O
//! loop device on its file, `mkfs`, `mount`, `fsck.ext4`. A `KernelStack` tears down in reverse
//! when dropped (unmount, lazily if it is busy; losetup -d; fusermount3 -u; nbdfuse killed if
//! it hangs), so a failing test leaves nothing behind; declare the server before it so the
//! server is dropped (killed) last.
//!
//! Every external command runs under coreutils `timeout` (nbdfuse's manual warns that loop
//! devices on its file can hang; the trials' stacks are `Timeouts::BOUNDED`), and every wait
//! is a bounded poll.

#![allow(dead_code)]

pub use lab::kernel_stack::{Export, KernelStack, Nbdfuse, Timeouts};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

/// Tools the real-client tests run.
pub const TOOLS: [&str; 8] = [
    "nbdfuse",
    "fusermount3",
    "losetup",
    "mkfs.ext4",
    "fsck.ext4",
    "mount",
    "umount",
    "timeout",
];

/// `Err(why)` when this machine cannot run the real-client tests.
pub fn requirements(extra_tools: &[&str]) -> Result<(), String> {
    if !Path::new("/dev/fuse").exists() {
        return Err("/dev/fuse is missing".into());
    }
    if !Path::new("/dev/loop-control").exists() {
        return Err("loop devices are missing (/dev/loop-control)".into());
    }
    for tool in TOOLS.iter().chain(extra_tools) {
        if !have(tool) {
            return Err(format!(
                "`{tool}` is not installed (.ci/run installs libnbd-bin fuse3 e2fsprogs fio)"
            ));
        }
    }
    // mount and losetup need root.
    let uid = run("id", &["-u"], 5);
    if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
        return Err("not running as root (mount and losetup need it)".into());
    }
    Ok(())
}

/// Prints the skip message and returns true when the test must skip.
pub fn skip(test: &str, extra_tools: &[&str]) -> bool {
    match requirements(extra_tools) {
        Ok(()) => false,
        Err(why) => {
            eprintln!("SKIP {test}: {why}");
            println!("SKIP {test}: {why}");
            true
        }
    }
}

/// Whether `tool` is on the PATH.
pub fn have(tool: &str) -> bool {
    !lab::kernel_stack::tool_missing(tool)
}

/// Runs `program args` under `timeout -k 5 <secs>`.
pub fn run(program: &str, args: &[&str], secs: u32) -> Output {
    Command::new("timeout")
        .arg("-k")
        .arg("5")
        .arg(secs.to_string())
        .arg(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("running {program}: {e}"))
}

pub fn text(out: &Output) -> String {
    format!(
        "status {:?}\nstdout: {}\nstderr: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Runs and panics with the output unless it succeeded.
pub fn must(program: &str, args: &[&str], secs: u32) -> Output {
    let out = run(program, args, secs);
    assert!(
        out.status.success(),
        "{program} {args:?} failed: {}",
        text(&out)
    );
    out
}

/// Runs `mobius ARGS`: whether it succeeded, and its stdout then stderr.
pub fn mobius(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_mobius"))
        .args(args)
        .output()
        .expect("run mobius");
    let mut s = String::from_utf8_lossy(&out.stdout).into_owned();
    s.push_str(&String::from_utf8_lossy(&out.stderr));
    (out.status.success(), s)
}

/// Resident memory of process `pid` in bytes (0 when it is gone).
pub fn rss_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb << 10)
}

pub fn be_u32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes(b[at..at + 4].try_into().unwrap())
}

/// A raw NBD client on `socket`: greets and enters transmission with NBD_OPT_GO asking for the
/// block sizes; `Err` when the server refuses or closes (never panics). Reads and writes time
/// out after `timeout`.
pub fn nbd_go(socket: &Path, timeout: Duration) -> std::io::Result<std::os::unix::net::UnixStream> {
    use std::io::{Read, Write};
    let mut s = std::os::unix::net::UnixStream::connect(socket)?;
    s.set_read_timeout(Some(timeout))?;
    s.set_write_timeout(Some(timeout))?;
    let mut greeting = [0u8; 18];
    s.read_exact(&mut greeting)?;
    s.write_all(&3u32.to_be_bytes())?;
    let mut option = b"IHAVEOPT".to_vec();
    option.extend_from_slice(&7u32.to_be_bytes()); // NBD_OPT_GO
    option.extend_from_slice(&8u32.to_be_bytes());
    option.extend_from_slice(&[0, 0, 0, 0, 0, 1, 0, 3]); // "", NBD_INFO_BLOCK_SIZE
    s.write_all(&option)?;
    loop {
        let mut h = [0u8; 20];
        s.read_exact(&mut h)?;
        let mut data = vec![0u8; be_u32(&h, 16) as usize];
        s.read_exact(&mut data)?;
        match be_u32(&h, 12) {
            1 => return Ok(s),
            3 => {}
            other => return Err(std::io::Error::other(format!("GO refused: {other:#x}"))),
        }
    }
}

/// An NBD request header (command 0 READ, 1 WRITE, 2 DISC, ...).
pub fn nbd_request(command: u16, handle: u64, offset: u64, length: u32) -> [u8; 28] {
    let mut b = [0u8; 28];
    b[0..4].copy_from_slice(&0x2560_9513u32.to_be_bytes());
    b[6..8].copy_from_slice(&command.to_be_bytes());
    b[8..16].copy_from_slice(&handle.to_be_bytes());
    b[16..24].copy_from_slice(&offset.to_be_bytes());
    b[24..28].copy_from_slice(&length.to_be_bytes());
    b
}

/// Polls `ready` every 50 ms for at most `secs`.
pub fn wait_for(secs: u64, mut ready: impl FnMut() -> bool) -> bool {
    for _ in 0..secs * 20 {
        if ready() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    ready()
}

/// `mobius serve` on a Unix socket, stderr to `<dir>/serve-<n>.log`.
pub struct Server {
    child: Option<Child>,
    pub socket: PathBuf,
    pub log: PathBuf,
}

impl Server {
    pub fn start(dir: &Path, ftl: &str, image: &Path, size: &str, extra: &[&str]) -> Server {
        Self::spawn(dir, None, ftl, image, size, extra).unwrap_or_else(|log| {
            panic!("mobius serve did not come up: {log}");
        })
    }

    /// Like `start`, with the process's file-size limit (RLIMIT_FSIZE) at `fsize` bytes: a
    /// write to the image beyond it fails with EFBIG, a real I/O error. Err: the server's log.
    #[allow(dead_code)]
    pub fn start_limited(
        dir: &Path,
        ftl: &str,
        image: &Path,
        size: &str,
        fsize: u64,
    ) -> Result<Server, String> {
        Self::spawn(dir, Some(fsize), ftl, image, size, &[])
    }

    fn spawn(
        dir: &Path,
        fsize: Option<u64>,
        ftl: &str,
        image: &Path,
        size: &str,
        extra: &[&str],
    ) -> Result<Server, String> {
        let socket = dir.join("serve.sock");
        // A socket left by a killed server would look like a live one while this one recovers.
        let _ = std::fs::remove_file(&socket);
        let n = std::fs::read_dir(dir).map(|d| d.count()).unwrap_or(0);
        let log = dir.join(format!("serve-{n}.log"));
        let mut command = match fsize {
            None => Command::new(env!("CARGO_BIN_EXE_mobius")),
            Some(bytes) => {
                let mut c = Command::new("prlimit");
                c.arg(format!("--fsize={bytes}"))
                    .arg("--")
                    .arg(env!("CARGO_BIN_EXE_mobius"));
                c
            }
        };
        let child = command
            .args(["serve", "--ftl", ftl, "--size", size, "--image"])
            .arg(image)
            .arg("--socket")
            .arg(&socket)
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("server log"))
            .spawn()
            .expect("spawn mobius serve");
        let mut server = Server {
            child: Some(child),
            socket,
            log,
        };
        // The socket appears once the image is formatted or recovered.
        let up = wait_for(60, || server.socket.exists() || !server.running());
        if up && server.running() {
            Ok(server)
        } else {
            Err(std::fs::read_to_string(&server.log).unwrap_or_default())
        }
    }

    pub fn uri(&self) -> String {
        format!("nbd+unix:///?socket={}", self.socket.display())
    }

    /// The export as a file: `nbdfuse` at `fuse_dir`.
    pub fn nbdfuse(&self, fuse_dir: &Path) -> Nbdfuse {
        must_step(Nbdfuse::start(fuse_dir, &self.uri()))
    }

    /// The export as a direct-I/O loop device (nbdfuse at `fuse_dir`), every step bounded.
    pub fn attach(&self, fuse_dir: &Path) -> KernelStack {
        must_step(KernelStack::attach(
            Export::Uri(self.uri()),
            fuse_dir,
            Timeouts::BOUNDED,
        ))
    }

    /// The server's process id (None once it was stopped or killed).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    pub fn running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// The server's "power cut at …" line (where the cut fell), without its prefix; empty if
    /// it printed none.
    pub fn cut_line(&self) -> String {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .find(|l| l.contains("power cut at"))
            .map(|l| l.trim_start_matches("mobius serve: ").to_string())
            .unwrap_or_default()
    }

    /// SIGUSR1 without waiting: arms the cut of `--cut-inside-write` (the server goes on until
    /// the cut falls).
    pub fn arm_cut(&self) {
        if let Some(c) = &self.child {
            let _ = run("kill", &["-USR1", &c.id().to_string()], 5);
        }
    }

    /// Simulated power cut (`--power-cut-signal`): SIGUSR1, then wait for the server to write
    /// the cut image and exit. False if it did not exit cleanly within 120 s.
    pub fn power_cut(&mut self) -> bool {
        let Some(mut c) = self.child.take() else {
            return false;
        };
        let _ = run("kill", &["-USR1", &c.id().to_string()], 5);
        let exited = wait_for(120, || matches!(c.try_wait(), Ok(Some(_))));
        if !exited {
            let _ = c.kill();
        }
        let status = c.wait().ok();
        exited && status.is_some_and(|s| s.success())
    }

    /// Power cut: SIGKILL, nothing flushed.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Clean shutdown: SIGTERM (flush, sync, close), then wait at most 30 s.
    pub fn stop(&mut self) -> bool {
        let Some(mut c) = self.child.take() else {
            return false;
        };
        let _ = run("kill", &["-TERM", &c.id().to_string()], 5);
        let exited = wait_for(30, || matches!(c.try_wait(), Ok(Some(_))));
        if !exited {
            let _ = c.kill();
        }
        let status = c.wait().ok();
        exited && status.is_some_and(|s| s.success())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// ext4 with 4 KiB blocks on the server's export (`lab::kernel_stack`): nbdfuse at
/// `dir/<name>-fuse`, a direct-I/O loop device, `mkfs.ext4` first when `format`, the mount at
/// `dir/<name>-ext`; dropped in reverse. Panics when the plumbing fails; `Err` when the mount
/// does (after a power cut, a verdict on the file system).
pub fn ext4_on(
    server: &Server,
    dir: &Path,
    name: &str,
    format: bool,
) -> Result<KernelStack, String> {
    let mut stack = server.attach(&dir.join(format!("{name}-fuse")));
    if format {
        must_step(stack.mkfs("ext4", &["-q", "-b", "4096"]));
    }
    stack
        .mount(&dir.join(format!("{name}-ext")), "")
        .map_err(|e| format!("mount: {e}"))?;
    Ok(stack)
}

/// A step of the test's plumbing that must work (nbdfuse, losetup, mkfs): a failure is the
/// harness's, never a verdict on the device.
pub fn must_step<T>(step: lab::kernel_stack::Result<T>) -> T {
    step.unwrap_or_else(|e| panic!("{e}"))
}

/// Deterministic file contents: file `i` of a workload with `seed`.
pub fn content(seed: u64, i: u64, len: usize) -> Vec<u8> {
    let mut x = splitmix(seed ^ i.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let mut out = Vec::with_capacity(len);
    while out.len() < len {
        x = splitmix(x);
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len);
    out
}

/// SplitMix64: one step of a seeded sequence (tests need no RNG crate).
pub fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = x;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Bytes written (WRITE and WRITE_ZEROES) and FLUSH requests in a `mobius serve --trace` file
/// so far (the server hands every line to the kernel as it goes, so it can be read mid-run).
pub fn trace_totals(path: &Path) -> (u64, u64) {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let (mut bytes, mut flushes) = (0u64, 0u64);
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        match f.get(1).copied() {
            Some("WRITE" | "WRITE_ZEROES") => {
                bytes += f.get(3).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0)
            }
            Some("FLUSH") => flushes += 1,
            _ => {}
        }
    }
    (bytes, flushes)
}

/// `mobius serve` flags of a database power-cut trial: paced, the simulated cut, one channel of
/// four chips (the pages of a request cross the bus one after another, so a cut can fall inside
/// a database page: docs/nbd.md), atomic requests or not, and the cut placed inside the `nth`
/// multi-page overwrite after the signal when given.
pub fn cut_trial_flags(atomic: bool, nth: Option<u64>) -> Vec<String> {
    let mut flags: Vec<String> = ["--pace", "--power-cut-signal"].map(String::from).to_vec();
    flags.extend(restart_flags(atomic));
    if let Some(n) = nth {
        flags.push(format!("--cut-inside-write={n}"));
    }
    flags
}

/// The flags of the server restarted on a trial's image after the cut: the same device and
/// requests, no cut.
pub fn restart_flags(atomic: bool) -> Vec<String> {
    let mut flags: Vec<String> = DB_GEOMETRY.map(String::from).to_vec();
    if atomic {
        flags.push("--atomic-requests".into());
    }
    flags
}

/// One channel of four chips for the database trials (see [`cut_trial_flags`]).
pub const DB_GEOMETRY: [&str; 4] = [
    "--set",
    "geometry.channels=1",
    "--set",
    "geometry.chips_per_channel=4",
];

/// `MOBIUS_LONG=1`: the long mode.
pub fn long_mode() -> bool {
    std::env::var("MOBIUS_LONG").is_ok_and(|v| v == "1")
}

/// Trials of a database power-cut test: `var=N` when set, else 20 in the long mode, 2
/// otherwise.
pub fn trial_count(var: &str) -> u64 {
    match std::env::var(var).ok().and_then(|v| v.parse().ok()) {
        Some(n) => n,
        None if long_mode() => 20,
        None => 2,
    }
}

/// The design the database trials serve: `MOBIUS_TRIAL_FTL` (any design with static
/// transactions: atomic requests are SWRITEs), Möbius by default.
pub fn trial_design() -> String {
    std::env::var("MOBIUS_TRIAL_FTL").unwrap_or_else(|_| "mobius".into())
}

/// The designs with static transactions other than Möbius (the trials' default), which the
/// database trials also run once each: the first such runs found LightTx unable to restart
/// from its image (docs/lighttx.md, "The zone record on a file image").
pub fn other_transactional_designs() -> Vec<&'static str> {
    lab::registry::all()
        .iter()
        .filter(|d| d.promise == ftl::Promise::AtomicTransactions && d.name != "mobius")
        .map(|d| d.name)
        .collect()
}

/// The trials `0..n` of `trial` (given a trial number) that failed, with why.
pub fn failed_trials(n: u64, trial: impl Fn(u64) -> Result<u64, String>) -> Vec<(u64, String)> {
    (0..n)
        .filter_map(|k| trial(k).err().map(|e| (k, e)))
        .collect()
}

/// One trial of `trial` (given a design and a trial number) on each of
/// [`other_transactional_designs`], numbered from 300 (apart from the main test's numbers,
/// which choose its cuts and ports); the designs whose trial failed, with why.
pub fn failed_on_other_designs(
    trial: impl Fn(&str, u64) -> Result<u64, String>,
) -> Vec<(&'static str, String)> {
    other_transactional_designs()
        .into_iter()
        .enumerate()
        .filter_map(|(k, design)| trial(design, 300 + k as u64).err().map(|e| (design, e)))
        .collect()
}

/// A negative control of the database trials runs in the long mode or when `var` asks for a
/// number of trials.
pub fn control_requested(var: &str) -> bool {
    long_mode() || std::env::var(var).is_ok()
}
