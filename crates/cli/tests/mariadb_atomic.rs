//! Unmodified MariaDB (InnoDB) with `innodb_doublewrite=OFF` on atomic NBD requests (issue #15
//! §4, the MariaDB half).
//!
//! InnoDB writes 16 KiB pages; its doublewrite buffer writes every page twice (first to a
//! doublewrite area, then in place) so a page torn by a power cut can be restored. MariaDB
//! turns it off on devices that write a page atomically. `mobius serve --atomic-requests`
//! applies each NBD write as one device transaction, so the page cannot tear below the file
//! system and the doublewrite buffer can go.
//!
//! Each trial: `mobius serve --ftl mobius --pace --power-cut-signal` on a fresh image (one
//! channel of four chips, as the PostgreSQL trials: `common::cut_trial_flags`, docs/nbd.md), nbdfuse, a direct-I/O loop
//! device, ext4 (4 KiB blocks), `mariadb-install-db`, `mariadbd` with `innodb_doublewrite=0`,
//! `innodb_flush_method=O_DIRECT` and `innodb_flush_log_at_trx_commit=1`, a bank of 100,000
//! accounts flushed to the device, then transfers (a stored procedure: two balance updates and
//! a history row per transaction) and a simulated power cut, either at a seeded moment while the
//! transfers run or inside a seeded one of the first 48 multi-page overwrites the page cleaner
//! issues when told to flush every dirty page (`--cut-inside-write=N`). Every MariaDB process
//! is killed with SIGKILL, the server restarts on the image (Möbius recovers), ext4 replays its
//! journal, and MariaDB must start (InnoDB crash recovery, checksums verified), `CHECK TABLE
//! ... EXTENDED` must be OK, and every account's balance must equal 1,000 plus its transfers in
//! the history (and the balances sum to 100,000,000).
//!
//! Trials: 2 by default (one cut of each kind), 20 with `MOBIUS_LONG=1`, N with
//! `MOBIUS_MARIADB_TRIALS=N`; on Möbius, or on the design `MOBIUS_TRIAL_FTL` names. The
//! negative control (plain requests, cut inside a write) runs in the long mode. Every step has
//! a timeout and the helpers clean up even when a step fails.

mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const SIZE: &str = "512M";
const ACCOUNTS: u32 = 100_000;

fn trials() -> u64 {
    trial_count("MOBIUS_MARIADB_TRIALS")
}

const SCHEMA: &str = "CREATE DATABASE bank; USE bank;
CREATE TABLE accounts (id INT PRIMARY KEY, balance BIGINT NOT NULL,
  filler CHAR(100) NOT NULL DEFAULT '') ENGINE=InnoDB;
CREATE TABLE history (id BIGINT AUTO_INCREMENT PRIMARY KEY, src INT NOT NULL, dst INT NOT NULL,
  delta BIGINT NOT NULL, KEY (src), KEY (dst)) ENGINE=InnoDB;
INSERT INTO accounts (id, balance) SELECT seq, 1000 FROM seq_1_to_100000;
DELIMITER //
CREATE PROCEDURE transfers(n INT)
BEGIN
  DECLARE i INT DEFAULT 0;
  DECLARE a INT; DECLARE b INT; DECLARE d INT;
  WHILE i < n DO
    SET a = 1 + FLOOR(RAND() * 100000), b = 1 + FLOOR(RAND() * 100000), d = FLOOR(RAND() * 100);
    START TRANSACTION;
    UPDATE accounts SET balance = balance - d WHERE id = a;
    UPDATE accounts SET balance = balance + d WHERE id = b;
    INSERT INTO history (src, dst, delta) VALUES (a, b, d);
    COMMIT;
    SET i = i + 1;
  END WHILE;
END//
DELIMITER ;
";

/// Accounts whose balance is not 1,000 plus their transfers in the history.
const MISMATCHES: &str = "SELECT COUNT(*) FROM bank.accounts a LEFT JOIN
  (SELECT id, SUM(x) AS s FROM (SELECT src AS id, -delta AS x FROM bank.history
   UNION ALL SELECT dst, delta FROM bank.history) t GROUP BY id) h ON h.id = a.id
  WHERE a.balance <> 1000 + COALESCE(h.s, 0)";

/// A MariaDB server on the mounted file system; killed with SIGKILL on drop if still up.
struct Mariadb {
    data: PathBuf,
    run: PathBuf,
    server: Option<Child>,
    /// `innodb_doublewrite` (off in the trials; on in the cost benchmark's first run).
    doublewrite: bool,
}

impl Mariadb {
    fn socket(&self) -> PathBuf {
        self.run.join("m.sock")
    }

    /// `mariadb-install-db` into `data` (owned by the `mysql` user). Its temporary tables go
    /// to this instance's run directory: in the shared /tmp, another test's `mariadbd`
    /// starting up removes every `#sql*` file it finds, and a bootstrap running beside it
    /// failed ("Unknown table 'mysql.tmp_user_sys'").
    fn install(mount: &Path, run: &Path) -> Mariadb {
        let data = mount.join("mysql");
        std::fs::create_dir_all(&data).unwrap();
        must("chown", &["-R", "mysql:mysql", data.to_str().unwrap()], 30);
        must(
            "mariadb-install-db",
            &[
                "--no-defaults",
                "--user=mysql",
                &format!("--datadir={}", data.display()),
                &format!("--tmpdir={}", run.display()),
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
            ],
            180,
        );
        Mariadb {
            data,
            run: run.to_path_buf(),
            server: None,
            doublewrite: false,
        }
    }

    /// Starts `mariadbd` (InnoDB crash recovery runs here after a cut) and waits until it
    /// answers.
    fn start(&mut self) -> Result<(), String> {
        let _ = std::fs::remove_file(self.socket());
        let log = self.run.join("err.log");
        let child = Command::new("/usr/sbin/mariadbd")
            .args(["--no-defaults", "--user=mysql", "--skip-networking"])
            .arg(format!("--datadir={}", self.data.display()))
            .arg(format!("--tmpdir={}", self.run.display()))
            .arg(format!("--socket={}", self.socket().display()))
            .arg(format!("--pid-file={}", self.run.join("m.pid").display()))
            .arg(format!("--log-error={}", log.display()))
            .arg(format!(
                "--innodb-doublewrite={}",
                u8::from(self.doublewrite)
            ))
            .args([
                "--innodb-flush-method=O_DIRECT",
                "--innodb-flush-log-at-trx-commit=1",
                "--innodb-buffer-pool-size=64M",
                "--innodb-log-file-size=32M",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(
                std::fs::File::create(self.run.join("stderr.log"))
                    .map_err(|e| format!("mariadbd's stderr: {e}"))?,
            )
            .spawn()
            .map_err(|e| format!("spawn mariadbd: {e}"))?;
        self.server = Some(child);
        // Up when it answers; given up on when it exits (a failed crash recovery) or after
        // 150 s.
        let mut exited = false;
        let up = wait_for(150, || {
            exited = !self
                .server
                .as_mut()
                .is_some_and(|c| matches!(c.try_wait(), Ok(None)));
            exited || self.sql("SELECT 1").is_ok()
        }) && !exited;
        if up {
            Ok(())
        } else {
            // This start's errors: the log after its last "Starting MariaDB" line.
            let log = std::fs::read_to_string(&log).unwrap_or_default();
            let this_start = log.rsplit("Starting MariaDB").next().unwrap_or_default();
            let errors: Vec<&str> = this_start
                .lines()
                .filter(|l| l.contains("[ERROR]"))
                .take(4)
                .collect();
            Err(format!(
                "mariadbd did not come up: {}{}",
                errors.join(" | "),
                std::fs::read_to_string(self.run.join("stderr.log")).unwrap_or_default()
            ))
        }
    }

    fn client(&self) -> Command {
        let mut c = Command::new("timeout");
        c.args([
            "-k",
            "5",
            "600",
            "mariadb",
            "--no-defaults",
            "-u",
            "root",
            "-N",
            "-B",
        ])
        .arg(format!("--socket={}", self.socket().display()));
        c
    }

    fn sql(&self, sql: &str) -> Result<String, String> {
        let out = self
            .client()
            .args(["-e", sql])
            .stdin(Stdio::null())
            .output()
            .map_err(|e| e.to_string())?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
        } else {
            Err(text(&out))
        }
    }

    /// `sql` in the background (it may never return: the device can die under it).
    fn spawn_sql(&self, sql: &str) -> Child {
        self.client()
            .args(["-e", sql])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn mariadb client")
    }

    /// The bank, loaded and flushed to the device (so recovery replays onto pages it reads).
    fn load(&self) {
        let out = self
            .client()
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .and_then(|mut c| {
                use std::io::Write;
                c.stdin.take().unwrap().write_all(SCHEMA.as_bytes())?;
                c.wait_with_output()
            })
            .expect("load the bank");
        assert!(out.status.success(), "schema: {}", text(&out));
        self.flush_dirty_pages();
    }

    /// Tells the page cleaner to write every dirty page, waits until none is left (at most
    /// 60 s), then lets it keep dirty pages again.
    fn flush_dirty_pages(&self) {
        self.sql("SET GLOBAL innodb_max_dirty_pages_pct = 0, innodb_max_dirty_pages_pct_lwm = 0")
            .expect("flush dirty pages");
        wait_for(60, || {
            self.sql("SELECT variable_value FROM information_schema.global_status WHERE variable_name = 'INNODB_BUFFER_POOL_PAGES_DIRTY'")
                .is_ok_and(|v| v == "0")
        });
        self.sql("SET GLOBAL innodb_max_dirty_pages_pct = 90")
            .expect("dirty pages again");
    }

    /// The checks after recovery: CHECK TABLE, the balances against the history; returns the
    /// number of transfers that survived.
    fn check(&self) -> Result<u64, String> {
        let checked = self.sql("CHECK TABLE bank.accounts, bank.history EXTENDED")?;
        if checked.lines().any(|l| !l.ends_with("OK")) {
            return Err(format!("CHECK TABLE: {checked}"));
        }
        let bad = self.sql(MISMATCHES)?;
        if bad != "0" {
            return Err(format!("{bad} accounts disagree with the history"));
        }
        let total = self.sql("SELECT SUM(balance) FROM bank.accounts")?;
        if total != (ACCOUNTS as u64 * 1000).to_string() {
            return Err(format!("the balances sum to {total}"));
        }
        self.sql("SELECT COUNT(*) FROM bank.history")?
            .parse()
            .map_err(|e| format!("history count: {e}"))
    }

    /// SIGKILL to the server (after a power cut nothing is flushed).
    fn kill9(&mut self) {
        if let Some(mut c) = self.server.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn stop(&mut self) {
        let _ = self.sql("SHUTDOWN");
        if let Some(c) = self.server.as_mut() {
            if !wait_for(60, || matches!(c.try_wait(), Ok(Some(_)))) {
                self.kill9();
            }
        }
        self.server = None;
    }
}

impl Drop for Mariadb {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// Where a trial's simulated power cut falls.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Cut {
    /// At a seeded moment while the transfers run.
    WhileRunning,
    /// Inside a seeded one of the first 48 multi-page overwrites of a flush of every dirty page
    /// after seeded seconds of transfers.
    InsideFlush,
}

impl Cut {
    /// Half the trials each way, alternating (as the PostgreSQL trials' `Cut::of_trial`).
    fn of_trial(n: u64) -> Cut {
        if n.is_multiple_of(2) {
            Cut::WhileRunning
        } else {
            Cut::InsideFlush
        }
    }
}

/// Runs the transfers and cuts the power as `cut` says; returns a description of the moment.
fn run_and_cut(server: &mut Server, db: &mut Mariadb, n: u64, cut: Cut) -> Result<String, String> {
    match cut {
        Cut::WhileRunning => {
            let after = Duration::from_millis(1500 + splitmix(0x3db ^ n) % 4000);
            let mut work = db.spawn_sql("CALL bank.transfers(100000000)");
            std::thread::sleep(after);
            let cut = server.power_cut();
            db.kill9();
            let _ = work.kill();
            let _ = work.wait();
            cut.then(|| format!("cut after {after:?} of transfers"))
                .ok_or_else(|| "the server did not write its cut image".into())
        }
        Cut::InsideFlush => {
            let secs = 2 + splitmix(0x5ee ^ n) % 5;
            let mut work = db.spawn_sql("CALL bank.transfers(100000000)");
            std::thread::sleep(Duration::from_secs(secs));
            let _ = work.kill();
            let _ = work.wait();
            server.arm_cut();
            let mut flush = db.spawn_sql(
                "SET GLOBAL innodb_max_dirty_pages_pct = 0, innodb_max_dirty_pages_pct_lwm = 0",
            );
            let cut = server.power_cut();
            db.kill9();
            let _ = flush.kill();
            let _ = flush.wait();
            cut.then(|| format!("cut inside the flush after {secs} s of transfers"))
                .ok_or_else(|| "no multi-page overwrite came, or no cut image".into())
        }
    }
}

/// A temporary directory the `mysql` user can reach, with its run directory (socket, pid,
/// logs) owned by `mysql`.
fn dirs_for_mysql() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let run_dir = tmp.path().join("run");
    std::fs::create_dir_all(&run_dir).unwrap();
    must("chown", &["mysql:mysql", run_dir.to_str().unwrap()], 10);
    must("chmod", &["755", tmp.path().to_str().unwrap()], 10);
    (tmp, run_dir)
}

fn trial(design: &str, n: u64, atomic: bool, cut: Cut) -> Result<u64, String> {
    let (tmp, run_dir) = dirs_for_mysql();
    let dir = tmp.path();
    let image = dir.join("dev.img");
    let nth = (cut == Cut::InsideFlush).then(|| 1 + splitmix(0x7e5 ^ n) % 48);
    let flags = cut_trial_flags(atomic, nth);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let (moment, cut_line) = {
        let mut server = Server::start(dir, design, &image, SIZE, &flags);
        let fs = ext4_on(&server, dir, "first", true)?;
        let mut db = Mariadb::install(fs.mount_point(), &run_dir);
        db.start().expect("mariadbd on the fresh device");
        db.load();
        let moment = run_and_cut(&mut server, &mut db, n, cut);
        drop(db);
        drop(fs);
        // A cut that did not happen is a failure of the harness, never "damage".
        let moment = moment.unwrap_or_else(|e| {
            panic!(
                "trial {n}: {e}: {}",
                std::fs::read_to_string(&server.log).unwrap_or_default()
            )
        });
        (moment, server.cut_line())
    };
    let again = restart_flags(atomic);
    let again: Vec<&str> = again.iter().map(String::as_str).collect();
    let mut server = Server::start(dir, design, &image, SIZE, &again);
    let fs = ext4_on(&server, dir, "again", false).map_err(|e| format!("after recovery: {e}"))?;
    let mut db = Mariadb {
        data: fs.mount_point().join("mysql"),
        run: run_dir.clone(),
        server: None,
        doublewrite: false,
    };
    let verdict = db
        .start()
        .map_err(|e| format!("MariaDB did not start after the cut: {e}"))
        .and_then(|()| db.check());
    db.stop();
    drop(db);
    drop(fs);
    let _ = server.stop();
    eprintln!(
        "mariadb trial {n} on {design} (atomic {atomic}): {moment} ({cut_line}): {}",
        match &verdict {
            Ok(h) => format!("clean, {h} transfers survived"),
            Err(e) => format!("DAMAGED: {e}"),
        }
    );
    verdict
}

fn tools() -> [&'static str; 5] {
    [
        "/usr/sbin/mariadbd",
        "mariadb-install-db",
        "mariadb",
        "mkfs.ext4",
        "timeout",
    ]
}

/// With atomic requests no cut damages the database: half the trials cut at a random moment,
/// half inside the page cleaner's writes.
#[test]
fn mariadb_without_doublewrite_survives_power_cuts_on_atomic_requests() {
    if skip("mariadb_atomic", &tools()) {
        return;
    }
    let failures = failed_trials(trials(), |n| {
        trial(&trial_design(), n, true, Cut::of_trial(n))
    });
    assert!(failures.is_empty(), "damaged trials: {failures:?}");
}

/// Every other design with static transactions, one trial each, the cuts alternating (as the
/// PostgreSQL trials do).
#[test]
fn mariadb_without_doublewrite_survives_a_cut_on_every_transactional_design() {
    if skip("mariadb_designs", &tools()) {
        return;
    }
    let failures = failed_on_other_designs(|design, n| trial(design, n, true, Cut::of_trial(n)));
    assert!(failures.is_empty(), "damaged trials: {failures:?}");
}

/// The negative control (long mode): plain requests, the cut inside the page cleaner's
/// writes; a rate that must be at least one damaged trial.
#[test]
fn mariadb_without_doublewrite_is_damaged_by_a_cut_inside_a_plain_write_long() {
    if !control_requested("MOBIUS_MARIADB_TRIALS") || skip("mariadb_plain", &tools()) {
        eprintln!("MariaDB negative control skipped: set MOBIUS_LONG=1");
        return;
    }
    let n = trials();
    let damaged = (0..n)
        .filter(|i| trial(&trial_design(), 101 + 2 * i, false, Cut::InsideFlush).is_err())
        .count();
    eprintln!("MariaDB, plain requests, cut inside a flush: {damaged} of {n} trials damaged");
    assert!(
        damaged > 0,
        "the negative control caught none of {n}: the checks cannot see a torn page"
    );
}

/// Transfers per second and device writes per transfer with the doublewrite buffer on and off on
/// the same device (atomic requests, paced), 20 s each. Behind MOBIUS_LONG (a benchmark, not a
/// test); prints the figures for docs/nbd.md.
#[test]
fn doublewrite_cost_on_the_same_device_long() {
    if !long_mode() || skip("mariadb_doublewrite_bench", &tools()) {
        eprintln!("doublewrite benchmark skipped: set MOBIUS_LONG=1");
        return;
    }
    for doublewrite in [true, false] {
        let (tmp, run_dir) = dirs_for_mysql();
        let dir = tmp.path();
        let trace = dir.join("requests.trace");
        let mut flags = vec![
            "--atomic-requests",
            "--pace",
            "--trace",
            trace.to_str().unwrap(),
        ];
        flags.extend(DB_GEOMETRY);
        let mut server = Server::start(dir, "mobius", &dir.join("dev.img"), SIZE, &flags);
        let fs = ext4_on(&server, dir, "bench", true).unwrap();
        let mut db = Mariadb::install(fs.mount_point(), &run_dir);
        db.doublewrite = doublewrite;
        db.start().expect("mariadbd");
        db.load();
        let (bytes_before, flushes_before) = trace_totals(&trace);
        let mut work = db.spawn_sql("CALL bank.transfers(100000000)");
        std::thread::sleep(Duration::from_secs(20));
        let _ = work.kill();
        let _ = work.wait();
        db.flush_dirty_pages();
        let (bytes_after, flushes_after) = trace_totals(&trace);
        let txs: f64 = db
            .sql("SELECT COUNT(*) FROM bank.history")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(f64::NAN);
        eprintln!(
            "innodb_doublewrite={doublewrite}: {txs} transfers in 20 s ({:.1} per s); device writes {:.0} bytes and {:.2} flushes per transfer (dirty pages flushed at the end)",
            txs / 20.0,
            (bytes_after - bytes_before) as f64 / txs,
            (flushes_after - flushes_before) as f64 / txs
        );
        db.stop();
        drop(db);
        drop(fs);
        let _ = server.stop();
    }
}
