//! Unmodified PostgreSQL 15 with `full_page_writes=off` on atomic NBD requests (issue #15 §4).
//!
//! PostgreSQL writes 8 KiB pages; with `full_page_writes=on` it logs each page's full image in
//! the WAL after every checkpoint so a page torn by a power cut can be rebuilt — the "write
//! twice" cost. `mobius serve --atomic-requests` applies each NBD write as one device
//! transaction, so the page cannot tear below the file system and the full-page images can be
//! turned off.
//!
//! Each trial: `mobius serve --ftl mobius --atomic-requests` on a fresh image, nbdfuse, a
//! direct-I/O loop device, ext4 (4 KiB blocks), `initdb` with `full_page_writes=off` and
//! frequent checkpoints, `pgbench -i` and a CHECKPOINT, then a simulated power cut
//! (`--power-cut-signal`: the image becomes the flash as the operation log says it was at that
//! instant, operations in flight torn; `--pace`, so every reply PostgreSQL saw was sent after its
//! simulated completion), either at a seeded moment while pgbench runs or inside a multi-page
//! overwrite of a CHECKPOINT after a seeded pgbench run (`--cut-inside-write`), and every
//! PostgreSQL process is killed with SIGKILL. Then the server restarts on the image (Möbius
//! recovers), ext4 replays its journal, PostgreSQL must start (WAL replay without full-page
//! images), `pg_amcheck --heapallindexed` must be clean (heaps and B-trees), and pgbench's
//! invariant must hold: account, teller and branch balances each sum to the history's deltas.
//!
//! Data checksums are off: with them PostgreSQL logs a full image of every page whose first
//! change after a checkpoint only sets hint bits, which repairs a torn page of that kind, so
//! fewer torn pages would be put to the test. The negative control shows the checks above see
//! a torn page without checksums.
//!
//! `kill -9` of the server would not do: the image file receives each request's pages while the
//! request is served, so a killed server almost never leaves a request torn. The negative
//! control (the same trials on plain requests, cut inside a write) runs in the long mode and
//! reports its damage rate. See docs/nbd.md.
//!
//! Trials: 2 by default, 20 with `MOBIUS_LONG=1`, N with `MOBIUS_PG_TRIALS=N`; on Möbius, or on
//! the design `MOBIUS_TRIAL_FTL` names. Every step has a timeout and the helpers
//! clean up (pg_ctl stop / kill, umount, losetup -d, fusermount3 -u) even when a step fails.

mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const PG_BIN: &str = "/usr/lib/postgresql/15/bin";
const SIZE: &str = "512M";

fn pg(tool: &str) -> String {
    format!("{PG_BIN}/{tool}")
}

fn trials() -> u64 {
    trial_count("MOBIUS_PG_TRIALS")
}

/// Runs a PostgreSQL tool as the `postgres` user (initdb and the server refuse root).
fn as_postgres(tool: &str, args: &[&str], secs: u32) -> std::process::Output {
    let bin = pg(tool);
    let mut full = vec!["-u", "postgres", "--", bin.as_str()];
    full.extend_from_slice(args);
    run("runuser", &full, secs)
}

fn must_pg(tool: &str, args: &[&str], secs: u32) -> std::process::Output {
    let out = as_postgres(tool, args, secs);
    assert!(out.status.success(), "{tool} {args:?}: {}", text(&out));
    out
}

/// A PostgreSQL cluster on the mounted file system; killed with SIGKILL on drop if still up.
struct Cluster {
    data: PathBuf,
    socket_dir: PathBuf,
    port: String,
    /// The postmaster's pid, read when it started (after a power cut the file is unreadable).
    postmaster: std::cell::Cell<Option<u32>>,
}

impl Cluster {
    fn conn_args(&self) -> Vec<String> {
        vec![
            "-h".into(),
            self.socket_dir.display().to_string(),
            "-p".into(),
            self.port.clone(),
        ]
    }

    fn start(&self) -> Result<(), String> {
        let log = self.socket_dir.join("pg.log");
        let out = as_postgres(
            "pg_ctl",
            &[
                "-D",
                self.data.to_str().unwrap(),
                "-l",
                log.to_str().unwrap(),
                "-w",
                "-t",
                "120",
                "start",
            ],
            150,
        );
        if out.status.success() {
            let pid = std::fs::read_to_string(self.data.join("postmaster.pid"))
                .ok()
                .and_then(|s| s.lines().next().and_then(|l| l.trim().parse().ok()));
            self.postmaster.set(pid);
            Ok(())
        } else {
            Err(format!(
                "{}\nserver log:\n{}",
                text(&out),
                std::fs::read_to_string(&log).unwrap_or_default()
            ))
        }
    }

    fn psql(&self, sql: &str) -> Result<String, String> {
        let mut args: Vec<String> = self.conn_args();
        args.extend(["-d".into(), "postgres".into(), "-tAc".into(), sql.into()]);
        let args: Vec<&str> = args.iter().map(|s| s.as_str()).collect();
        let out = as_postgres("psql", &args, 120);
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
        } else {
            Err(text(&out))
        }
    }

    /// `psql -c sql` in the background (it may never return: the device can die under it).
    fn spawn_psql(&self, sql: &str) -> Child {
        Command::new("runuser")
            .args(["-u", "postgres", "--"])
            .arg(pg("psql"))
            .args(self.conn_args())
            .args(["-d", "postgres", "-tAc", sql])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn psql")
    }

    /// SIGKILL to the postmaster and every backend (after a power cut nothing is flushed).
    fn kill9(&self) {
        if let Some(pid) = self.postmaster.take() {
            let pid = pid.to_string();
            let _ = run("kill", &["-STOP", &pid], 10);
            let _ = run("pkill", &["-9", "-P", &pid], 10);
            let _ = run("kill", &["-9", &pid], 10);
            wait_for(10, || !Path::new(&format!("/proc/{pid}")).exists());
        }
    }

    /// Clean shutdown; a postmaster that does not stop in time is killed.
    fn stop(&self) {
        let _ = as_postgres(
            "pg_ctl",
            &[
                "-D",
                self.data.to_str().unwrap(),
                "-m",
                "fast",
                "-w",
                "-t",
                "60",
                "stop",
            ],
            90,
        );
        self.kill9();
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// Lets `postgres` traverse the test directory and gives it `run/` for its socket and log.
fn run_dir_for_postgres(dir: &Path) -> PathBuf {
    must("chmod", &["755", dir.to_str().unwrap()], 10);
    let run_dir = dir.join("run");
    std::fs::create_dir_all(&run_dir).unwrap();
    must(
        "chown",
        &["postgres:postgres", run_dir.to_str().unwrap()],
        10,
    );
    run_dir
}

/// initdb, the configuration, pgbench's tables.
fn create(mount: &Path, socket_dir: &Path, port: &str, full_page_writes: bool) -> Cluster {
    let data = mount.join("pg");
    std::fs::create_dir_all(&data).unwrap();
    must(
        "chown",
        &["-R", "postgres:postgres", mount.to_str().unwrap()],
        30,
    );
    must_pg(
        "initdb",
        &[
            "-D",
            data.to_str().unwrap(),
            "-A",
            "trust",
            "-U",
            "postgres",
        ],
        180,
    );
    let conf = format!(
        "\nfull_page_writes = {}\nlisten_addresses = ''\nunix_socket_directories = '{}'\nport = {port}\n\
         checkpoint_timeout = 30s\nmax_wal_size = 64MB\nshared_buffers = 16MB\nfsync = on\n",
        if full_page_writes { "on" } else { "off" },
        socket_dir.display()
    );
    let path = data.join("postgresql.conf");
    let mut text = std::fs::read_to_string(&path).unwrap();
    text.push_str(&conf);
    std::fs::write(&path, text).unwrap();
    let c = Cluster {
        data,
        socket_dir: socket_dir.to_path_buf(),
        port: port.to_string(),
        postmaster: std::cell::Cell::new(None),
    };
    c.start().unwrap();
    let mut args = c.conn_args();
    args.extend([
        "-i".into(),
        "-q".into(),
        "-s".into(),
        "2".into(),
        "postgres".into(),
    ]);
    let args: Vec<&str> = args.iter().map(|s| s.as_str()).collect();
    must_pg("pgbench", &args, 300);
    // A checkpoint after the load: WAL replay after a cut then starts past the load, whose
    // records rebuild whole pages (new pages, index builds) without reading them, so replay
    // reads the pages from the device as in a database that has been running for a while.
    c.psql("CHECKPOINT").expect("checkpoint after pgbench -i");
    c
}

/// pgbench in the background for at most `secs` seconds.
fn pgbench(c: &Cluster, secs: u32, clients: u32) -> Child {
    let mut args = c.conn_args();
    args.extend([
        "-T".into(),
        secs.to_string(),
        "-c".into(),
        clients.to_string(),
        "-n".into(),
        "postgres".into(),
    ]);
    Command::new("timeout")
        .args([
            "-k",
            "5",
            &(secs + 60).to_string(),
            "runuser",
            "-u",
            "postgres",
            "--",
        ])
        .arg(pg("pgbench"))
        .args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn pgbench")
}

/// The balance invariant of pgbench after any number of committed transactions.
const INVARIANT: &str = "SELECT (SELECT sum(abalance) FROM pgbench_accounts) = h AND \
     (SELECT sum(tbalance) FROM pgbench_tellers) = h AND (SELECT sum(bbalance) FROM pgbench_branches) = h \
     FROM (SELECT coalesce(sum(delta), 0) AS h FROM pgbench_history) AS x";

fn check(c: &Cluster) -> Result<u64, String> {
    let mut args = c.conn_args();
    args.extend([
        "-d".into(),
        "postgres".into(),
        "--install-missing".into(),
        "--heapallindexed".into(),
    ]);
    let args: Vec<&str> = args.iter().map(|s| s.as_str()).collect();
    let amcheck = as_postgres("pg_amcheck", &args, 300);
    if !amcheck.status.success() {
        return Err(format!("pg_amcheck: {}", text(&amcheck)));
    }
    if c.psql(INVARIANT)? != "t" {
        return Err("pgbench balances do not sum to the history".into());
    }
    c.psql("SELECT count(*) FROM pgbench_history")?
        .parse()
        .map_err(|e| format!("history count: {e}"))
}

/// Where a trial's simulated power cut falls.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Cut {
    /// At a seeded moment while pgbench runs (`--power-cut-signal`).
    WhileRunning,
    /// Inside a seeded one of the first 48 multi-page overwrites of a CHECKPOINT after a
    /// seeded pgbench run (`--cut-inside-write=N`): the writes of data pages PostgreSQL will
    /// replay without full-page images, cut just after the first page of a request is on
    /// flash.
    InsideCheckpointWrite,
}

impl Cut {
    /// Half the trials each way, alternating.
    fn of_trial(n: u64) -> Cut {
        if n.is_multiple_of(2) {
            Cut::WhileRunning
        } else {
            Cut::InsideCheckpointWrite
        }
    }
}

/// Runs the workload on the first server and cuts its power as `cut` says; returns the
/// server's cut line and a description of the moment.
fn run_and_cut(
    server: &mut Server,
    cluster: &Cluster,
    n: u64,
    cut: Cut,
) -> Result<(String, String), String> {
    let moment = match cut {
        Cut::WhileRunning => {
            let cut_after = Duration::from_millis(1500 + splitmix(0x9a5 ^ n) % 4000);
            let mut bench = pgbench(cluster, 30, 4);
            std::thread::sleep(cut_after);
            let cut = server.power_cut();
            cluster.kill9();
            let _ = bench.kill();
            let _ = bench.wait();
            if !cut {
                return Err("the server did not write its cut image".into());
            }
            format!("cut after {cut_after:?} of pgbench")
        }
        Cut::InsideCheckpointWrite => {
            let secs = 2 + (splitmix(0xc4e ^ n) % 5) as u32;
            let _ = pgbench(cluster, secs, 4).wait_with_output();
            server.arm_cut();
            let mut checkpoint = cluster.spawn_psql("CHECKPOINT");
            let cut = server.power_cut();
            cluster.kill9();
            let _ = checkpoint.kill();
            let _ = checkpoint.wait();
            if !cut {
                return Err("no multi-page write came, or the cut image was not written".into());
            }
            format!("cut inside a CHECKPOINT write after {secs} s of pgbench")
        }
    };
    // "power cut at T ns [inside a write of P pages at byte B]: N of M operations not finished"
    Ok((server.cut_line(), moment))
}

fn trial(design: &str, n: u64, atomic: bool, cut: Cut) -> Result<u64, String> {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let run_dir = run_dir_for_postgres(dir);
    let image = dir.join("dev.img");
    let port = (55432 + n).to_string();
    // Which of the checkpoint's multi-page writes the cut falls inside (its first ones often
    // go to blocks the file system allocated after its last journal commit, which the
    // recovered file system no longer has: nothing there for PostgreSQL to read torn).
    let nth = (cut == Cut::InsideCheckpointWrite).then(|| 1 + splitmix(0x7e4 ^ n) % 48);
    let flags = cut_trial_flags(atomic, nth);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let (cut_line, moment) = {
        let mut server = Server::start(dir, design, &image, SIZE, &flags);
        let fs = ext4_on(&server, dir, "first", true)?;
        let cluster = create(fs.mount_point(), &run_dir, &port, false);
        let cut = run_and_cut(&mut server, &cluster, n, cut);
        drop(cluster);
        drop(fs);
        // A cut that did not happen is a failure of the harness, never "damage".
        cut.unwrap_or_else(|e| {
            panic!(
                "trial {n}: {e}: {}",
                std::fs::read_to_string(&server.log).unwrap_or_default()
            )
        })
    };
    let again = restart_flags(atomic);
    let again: Vec<&str> = again.iter().map(String::as_str).collect();
    let mut server = Server::start(dir, design, &image, SIZE, &again);
    let fs = ext4_on(&server, dir, "again", false).map_err(|e| format!("after recovery: {e}"))?;
    let cluster = Cluster {
        data: fs.mount_point().join("pg"),
        socket_dir: run_dir.clone(),
        port,
        postmaster: std::cell::Cell::new(None),
    };
    let verdict = cluster
        .start()
        .map_err(|e| format!("PostgreSQL did not start after the cut: {e}"))
        .and_then(|()| check(&cluster));
    cluster.stop();
    drop(cluster);
    drop(fs);
    let _ = server.stop();
    eprintln!(
        "postgres trial {n} on {design} (atomic {atomic}): {moment} ({cut_line}): {}",
        match &verdict {
            Ok(h) => format!("clean, {h} pgbench transactions survived"),
            Err(e) => format!("DAMAGED: {e}"),
        }
    );
    verdict
}

/// The negative control (long mode): the same trials without `--atomic-requests`, so
/// PostgreSQL's 8 KiB pages can tear at the cut and, with full-page writes off, cannot be
/// rebuilt. A cut at a random moment almost never lands inside a multi-page write under
/// `--pace` (0 of 20, docs/nbd.md), so the control cuts inside a multi-page overwrite of a
/// CHECKPOINT: each trial tears one request (the server prints which of its pages were on
/// flash, torn, not started). Whether the torn page holds a change PostgreSQL then misses is
/// chance (measured: 7 of 20 trials damaged, docs/nbd.md), so this is a rate over `trials()` (20) and must
/// be at least one: a control that never catches anything proves nothing.
#[test]
fn postgres_without_full_page_writes_is_damaged_by_a_cut_inside_a_plain_write_long() {
    if !control_requested("MOBIUS_PG_TRIALS")
        || skip("postgres_plain", &[&pg("initdb"), "runuser", "pkill"])
    {
        eprintln!("PostgreSQL negative control skipped: set MOBIUS_LONG=1");
        return;
    }
    let n = trials();
    let damaged = (0..n)
        .filter(|i| {
            trial(
                &trial_design(),
                101 + 2 * i,
                false,
                Cut::InsideCheckpointWrite,
            )
            .is_err()
        })
        .count();
    eprintln!("PostgreSQL, plain requests, cut inside a checkpoint write: {damaged} of {n} trials damaged");
    assert!(
        damaged > 0,
        "the negative control caught none of {n}: the checks cannot see a torn page"
    );
}

/// Plain requests cut at a random moment while pgbench runs (long mode): the rate at which a
/// random cut damages the database, for docs/nbd.md (no assertion: it is a rate).
#[test]
fn postgres_on_plain_requests_cut_at_random_moments_long() {
    if std::env::var("MOBIUS_LONG").is_err()
        || skip(
            "postgres_plain_random",
            &[&pg("initdb"), "runuser", "pkill"],
        )
    {
        eprintln!("skipped: set MOBIUS_LONG=1");
        return;
    }
    let n = trials();
    let damaged = (0..n)
        .filter(|i| trial(&trial_design(), 200 + 2 * i, false, Cut::WhileRunning).is_err())
        .count();
    eprintln!("PostgreSQL, plain requests, random cuts: {damaged} of {n} trials damaged");
}

/// With atomic requests no cut damages the database: half the trials cut at a random moment,
/// half inside a checkpoint's write.
#[test]
fn postgres_without_full_page_writes_survives_power_cuts_on_atomic_requests() {
    if skip("postgres_atomic", &[&pg("initdb"), "runuser", "pkill"]) {
        return;
    }
    let failures = failed_trials(trials(), |n| {
        trial(&trial_design(), n, true, Cut::of_trial(n))
    });
    assert!(failures.is_empty(), "damaged trials: {failures:?}");
}

/// Every other design with static transactions, one trial each, the cuts alternating: the
/// export's atomic requests are each design's own SWRITE, and its recovery must bring
/// PostgreSQL back (LightTx could not restart before the fix in docs/lighttx.md).
#[test]
fn postgres_without_full_page_writes_survives_a_cut_on_every_transactional_design() {
    if skip("postgres_designs", &[&pg("initdb"), "runuser", "pkill"]) {
        return;
    }
    let failures = failed_on_other_designs(|design, n| trial(design, n, true, Cut::of_trial(n)));
    assert!(failures.is_empty(), "damaged trials: {failures:?}");
}

/// pgbench TPS with full-page writes on and off on the same device (atomic requests), wall
/// clock: the cost of writing pages twice, on real software. Behind MOBIUS_LONG (a benchmark,
/// not a test); prints the figures for docs/nbd.md.
#[test]
fn full_page_writes_cost_on_the_same_device() {
    if std::env::var("MOBIUS_LONG").is_err()
        || skip("postgres_fpw_bench", &[&pg("initdb"), "runuser"])
    {
        eprintln!("full_page_writes benchmark skipped: set MOBIUS_LONG=1");
        return;
    }
    for fpw in [true, false] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let run_dir = run_dir_for_postgres(dir);
        // Paced: each reply waits for its simulated completion, so TPS follows the device.
        let trace = dir.join("requests.trace");
        let server = Server::start(
            dir,
            "mobius",
            &dir.join("dev.img"),
            SIZE,
            &[
                "--atomic-requests",
                "--pace",
                "--trace",
                trace.to_str().unwrap(),
            ],
        );
        let fs = ext4_on(&server, dir, "bench", true).unwrap();
        let cluster = create(fs.mount_point(), &run_dir, "55499", fpw);
        let lsn = || {
            cluster
                .psql("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn")
                .ok()
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or(f64::NAN)
        };
        let before = lsn();
        let (bytes_before, flushes_before) = trace_totals(&trace);
        let out = pgbench(&cluster, 20, 4).wait_with_output().unwrap();
        let wal = lsn() - before;
        let (bytes_after, flushes_after) = trace_totals(&trace);
        let report = String::from_utf8_lossy(&out.stdout);
        let field = |key: &str| {
            report
                .lines()
                .find(|l| l.starts_with(key))
                .unwrap_or("?")
                .to_string()
        };
        let txs: f64 = field("number of transactions actually processed")
            .rsplit(' ')
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or(f64::NAN);
        eprintln!(
            "full_page_writes={fpw}: {}; {txs} transactions; WAL {:.0} bytes, device writes {:.0} bytes and {:.2} flushes per transaction",
            field("tps"),
            wal / txs,
            (bytes_after - bytes_before) as f64 / txs,
            (flushes_after - flushes_before) as f64 / txs
        );
        cluster.stop();
    }
}
