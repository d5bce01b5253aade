//! fio through nbdfuse against `mobius serve` and against `nbdkit memory` of the same size, in
//! the same run, and the throughput ratio per job (issue #7 wants >= 0.7 without `--pace`).
//!
//! ```sh
//! cargo build --release -p mobius-cli --bin mobius --example nbd_fio_bench
//! target/release/examples/nbd_fio_bench [--ftl dftl] [--size 1G] [--runtime 10] [--rounds 3]
//!     [--connections N] [--mobius PATH] [--image-in-shm]
//! ```
//!
//! mobius serves with `--memory` (full-data flash in RAM, like nbdkit's memory plugin), or with
//! `--image-in-shm` from a file-backed image in /dev/shm (the power-cut path: every page program
//! is a few `pwrite`s). Each server is served on a
//! Unix socket and mounted with `nbdfuse`; fio runs on the FUSE file with `O_DIRECT` and libaio:
//! 128 KiB sequential write QD 4 (it also fills the region the later jobs use), 4 KiB random
//! write QD 16, 4 KiB random read QD 16, each time-based over a 256 MiB region. Needs root
//! (FUSE), nbdkit, nbdfuse, nbdinfo, fio. Not a test: it measures wall-clock throughput.
//!
//! Wall-clock throughput on a shared 2-core machine moves by ±30 % from run to run, so the two
//! servers are measured in `--rounds` rounds, alternating which goes first, and each job's
//! ratio is taken between the two medians; every round's figures are printed too.
//!
//! nbdfuse opens 4 connections to a server that advertises CAN_MULTI_CONN (nbdkit memory does;
//! `mobius serve` does unless the design's promise is `ordered`, see docs/nbd.md) and one
//! otherwise. `--connections N` passes `-C N` to nbdfuse for both servers: `--connections 1`
//! compares an ordered design (OPTR) with nbdkit on equal terms.

use mobius_cli::bench_scale::median;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

struct Job {
    name: &'static str,
    rw: &'static str,
    bs: &'static str,
    iodepth: u32,
}

const JOBS: [Job; 3] = [
    Job {
        name: "seqwrite-128k-qd4",
        rw: "write",
        bs: "128k",
        iodepth: 4,
    },
    Job {
        name: "randwrite-4k-qd16",
        rw: "randwrite",
        bs: "4k",
        iodepth: 16,
    },
    Job {
        name: "randread-4k-qd16",
        rw: "randread",
        bs: "4k",
        iodepth: 16,
    },
];

struct Opts {
    mobius: PathBuf,
    ftl: String,
    size: String,
    runtime_s: u32,
    rounds: usize,
    connections: Option<u32>,
    image_in_shm: bool,
}

fn opts() -> Opts {
    let exe = std::env::current_exe().expect("current exe");
    let mut o = Opts {
        // target/release/examples/nbd_fio_bench -> target/release/mobius
        mobius: exe
            .parent()
            .and_then(Path::parent)
            .map(|p| p.join("mobius"))
            .unwrap_or_else(|| PathBuf::from("mobius")),
        ftl: "dftl".into(),
        size: "1G".into(),
        runtime_s: 10,
        rounds: 3,
        connections: None,
        image_in_shm: false,
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut val = || {
            it.next()
                .cloned()
                .unwrap_or_else(|| die(&format!("{a} needs a value")))
        };
        match a.as_str() {
            "--mobius" => o.mobius = PathBuf::from(val()),
            "--ftl" => o.ftl = val(),
            "--size" => o.size = val(),
            "--runtime" => o.runtime_s = val().parse().unwrap_or_else(|_| die("--runtime N")),
            "--rounds" => {
                o.rounds = val()
                    .parse()
                    .ok()
                    .filter(|n| *n > 0)
                    .unwrap_or_else(|| die("--rounds N (N >= 1)"))
            }
            "--connections" => {
                o.connections = Some(
                    val()
                        .parse()
                        .ok()
                        .filter(|n| *n > 0)
                        .unwrap_or_else(|| die("--connections N (N >= 1)")),
                )
            }
            "--image-in-shm" => o.image_in_shm = true,
            other => die(&format!("unknown argument {other}")),
        }
    }
    o
}

fn die(msg: &str) -> ! {
    eprintln!("nbd_fio_bench: {msg}");
    std::process::exit(2)
}

fn wait_for(secs: u64, mut ready: impl FnMut() -> bool) -> bool {
    for _ in 0..secs * 20 {
        if ready() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    ready()
}

/// A server plus an nbdfuse mount of it; torn down on drop.
struct Served {
    server: Child,
    fuse: Option<Child>,
    mnt: PathBuf,
}

impl Served {
    fn start(mut server: Command, socket: &Path, mnt: &Path, connections: Option<u32>) -> Served {
        let server = server
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| die(&format!("starting the server: {e}")));
        let mut s = Served {
            server,
            fuse: None,
            mnt: mnt.to_path_buf(),
        };
        if !wait_for(60, || socket.exists()) {
            die("the server did not create its socket");
        }
        std::fs::create_dir_all(mnt).unwrap();
        let uri = format!("nbd+unix:///?socket={}", socket.display());
        s.fuse = Some(
            Command::new("nbdfuse")
                .args(connections.map(|n| format!("--connections={n}")))
                .arg(mnt)
                .arg(&uri)
                .stdin(Stdio::null())
                .spawn()
                .unwrap_or_else(|e| die(&format!("nbdfuse: {e}"))),
        );
        if !wait_for(30, || mnt.join("nbd").exists()) {
            die("nbdfuse did not mount");
        }
        s
    }

    fn file(&self) -> PathBuf {
        self.mnt.join("nbd")
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = Command::new("fusermount3")
            .arg("-u")
            .arg(&self.mnt)
            .status();
        if let Some(mut f) = self.fuse.take() {
            let _ = f.wait();
        }
        let _ = Command::new("kill")
            .args(["-TERM", &self.server.id().to_string()])
            .status();
        let _ = self.server.wait();
    }
}

/// Bytes per second of one fio job on `file`.
fn fio(file: &Path, job: &Job, runtime_s: u32) -> f64 {
    let out = Command::new("fio")
        .arg(format!("--name={}", job.name))
        .arg(format!("--filename={}", file.display()))
        .arg(format!("--rw={}", job.rw))
        .arg(format!("--bs={}", job.bs))
        .arg(format!("--iodepth={}", job.iodepth))
        .args(["--ioengine=libaio", "--direct=1", "--size=256M"])
        .args(["--time_based", "--randseed=1", "--output-format=json"])
        .arg(format!("--runtime={runtime_s}"))
        .output()
        .unwrap_or_else(|e| die(&format!("fio: {e}")));
    if !out.status.success() {
        die(&format!(
            "fio failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let v: serde_json::Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| die(&format!("fio output: {e}")));
    let side = if job.rw.contains("read") {
        "read"
    } else {
        "write"
    };
    v["jobs"][0][side]["bw_bytes"].as_f64().unwrap_or(0.0)
}

/// fio's throughput for every job against a fresh `mobius serve`; also the export's size.
fn run_mobius(o: &Opts, dir: &Path, image: &Path) -> (Vec<f64>, u64) {
    let sock = dir.join("mobius.sock");
    let _ = std::fs::remove_file(&sock);
    let _ = std::fs::remove_file(image);
    let mut cmd = Command::new(&o.mobius);
    cmd.args(["serve", "--ftl", &o.ftl, "--size", &o.size]);
    if o.image_in_shm {
        cmd.arg("--image").arg(image);
    } else {
        cmd.arg("--memory");
    }
    cmd.arg("--socket").arg(&sock);
    let mobius = Served::start(cmd, &sock, &dir.join("mnt-mobius"), o.connections);
    let size = std::fs::metadata(mobius.file())
        .map(|m| m.len())
        .unwrap_or(0);
    let ours = JOBS
        .iter()
        .map(|j| fio(&mobius.file(), j, o.runtime_s))
        .collect();
    drop(mobius);
    let _ = std::fs::remove_file(image);
    (ours, size)
}

/// fio's throughput for every job against a fresh `nbdkit memory` of `size` bytes.
fn run_nbdkit(o: &Opts, dir: &Path, size: u64) -> Vec<f64> {
    let sock = dir.join("nbdkit.sock");
    let _ = std::fs::remove_file(&sock);
    let mut cmd = Command::new("nbdkit");
    cmd.args(["-f", "-U"])
        .arg(&sock)
        .arg("memory")
        .arg(size.to_string());
    let nbdkit = Served::start(cmd, &sock, &dir.join("mnt-nbdkit"), o.connections);
    let theirs = JOBS
        .iter()
        .map(|j| fio(&nbdkit.file(), j, o.runtime_s))
        .collect();
    drop(nbdkit);
    theirs
}

fn main() {
    let o = opts();
    let dir = std::env::temp_dir().join(format!("nbd_fio_bench.{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let image = PathBuf::from(format!("/dev/shm/nbd_fio_bench.{}.img", std::process::id()));
    // The export size comes from mobius (the design decides it); nbdkit gets the same.
    let mut ours: Vec<Vec<f64>> = Vec::new();
    let mut theirs: Vec<Vec<f64>> = Vec::new();
    let mut size = 0;
    for round in 0..o.rounds {
        // Even rounds run mobius first, odd rounds nbdkit first (once the size is known).
        let (m, k) = if round % 2 == 0 || size == 0 {
            let (m, s) = run_mobius(&o, &dir, &image);
            size = s;
            (m, run_nbdkit(&o, &dir, size))
        } else {
            let k = run_nbdkit(&o, &dir, size);
            (run_mobius(&o, &dir, &image).0, k)
        };
        let ratios: Vec<String> = (0..JOBS.len())
            .map(|j| format!("{:.2}", m[j] / k[j].max(1.0)))
            .collect();
        ours.push(m);
        theirs.push(k);
        eprintln!("round {}: ratios {}", round + 1, ratios.join(" "));
    }
    let _ = std::fs::remove_dir_all(&dir);
    println!(
        "mobius serve --ftl {} ({} export bytes, {}, no --pace) vs nbdkit memory, \
         fio {} s per job through nbdfuse ({}), {} round(s), medians",
        o.ftl,
        size,
        if o.image_in_shm {
            "image in /dev/shm"
        } else {
            "--memory"
        },
        o.runtime_s,
        match o.connections {
            Some(n) => format!("-C {n}"),
            None => "default connections".into(),
        },
        o.rounds
    );
    println!(
        "{:<20} {:>12} {:>12} {:>7}   per round (mobius/nbdkit MB/s)",
        "job", "mobius MB/s", "nbdkit MB/s", "ratio"
    );
    let mut worst = f64::INFINITY;
    for (j, job) in JOBS.iter().enumerate() {
        let m = median(ours.iter().map(|r| r[j]).collect());
        let k = median(theirs.iter().map(|r| r[j]).collect());
        let ratio = if k > 0.0 { m / k } else { 0.0 };
        worst = worst.min(ratio);
        let rounds: Vec<String> = ours
            .iter()
            .zip(&theirs)
            .map(|(a, b)| format!("{:.0}/{:.0}", a[j] / 1e6, b[j] / 1e6))
            .collect();
        println!(
            "{:<20} {:>12.1} {:>12.1} {ratio:>7.2}   {}",
            job.name,
            m / 1e6,
            k / 1e6,
            rounds.join(" ")
        );
    }
    println!(
        "lowest ratio {worst:.2} (target >= 0.70): {}",
        if worst >= 0.7 { "met" } else { "NOT met" }
    );
}
