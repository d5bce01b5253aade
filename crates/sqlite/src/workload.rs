//! SQL workloads run on a [`Database`], measured in the device's simulated time.
//!
//! - `kv`: one insert per transaction into a key-value table (OPTR §6.2 / Fig. 9's SQLite
//!   microbenchmark): random 64-bit keys, 100-byte values.
//! - `tpcb`: pgbench's TPC-B-like transaction on SQLite (update an account, read it back,
//!   update its teller and branch, append a history row), `accounts` rows per branch
//!   configurable (pgbench uses 100,000; the default here, 10,000, fits the small devices).
//!   Its invariant: the sums of account, teller and branch balances and of history deltas agree.
//! - `tpcc`: a TPC-C-like mix at a small scale (`tpcc.rs`), as the Möbius paper's DBT-2.

use crate::error::{Breach, SqlError};
use crate::Database;
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::time::Instant;

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum Workload {
    Kv,
    Tpcb,
    /// TPC-C-like mix (`tpcc.rs`).
    Tpcc,
}

impl Workload {
    pub fn parse(s: &str) -> Result<Workload, SqlError> {
        match s {
            "kv" => Ok(Workload::Kv),
            "tpcb" => Ok(Workload::Tpcb),
            "tpcc" => Ok(Workload::Tpcc),
            other => Err(SqlError::UnknownWorkload(other.to_string())),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Workload::Kv => "kv",
            Workload::Tpcb => "tpcb",
            Workload::Tpcc => "tpcc",
        }
    }
}

/// Sizes of the `tpcb` tables.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct Scale {
    /// tpcc: warehouses.
    pub warehouses: u32,
    pub branches: u32,
    pub tellers_per_branch: u32,
    pub accounts_per_branch: u32,
}

impl Default for Scale {
    fn default() -> Scale {
        Scale {
            warehouses: 1,
            branches: 1,
            tellers_per_branch: 10,
            accounts_per_branch: 10_000,
        }
    }
}

impl Scale {
    /// The tables of a crash campaign (`mobius crashtest --workload sqlite-*` and the SQLite
    /// soak): 2,000 accounts, so a cell's load stays short.
    pub fn campaign() -> Scale {
        Scale {
            accounts_per_branch: 2000,
            ..Scale::default()
        }
    }
}

/// Creates and loads the workload's tables (not measured).
pub fn setup(db: &Database, w: Workload, scale: Scale) -> Result<(), SqlError> {
    let conn = db.conn();
    match w {
        Workload::Kv => conn.execute_batch(
            "CREATE TABLE IF NOT EXISTS kv(k INTEGER PRIMARY KEY, v BLOB NOT NULL)",
        )?,
        Workload::Tpcc => crate::tpcc::setup(conn, scale.warehouses)?,
        Workload::Tpcb => {
            conn.execute_batch(
                "CREATE TABLE pgbench_branches(bid INTEGER PRIMARY KEY, bbalance INTEGER NOT NULL, filler TEXT);
                 CREATE TABLE pgbench_tellers(tid INTEGER PRIMARY KEY, bid INTEGER NOT NULL, tbalance INTEGER NOT NULL, filler TEXT);
                 CREATE TABLE pgbench_accounts(aid INTEGER PRIMARY KEY, bid INTEGER NOT NULL, abalance INTEGER NOT NULL, filler TEXT);
                 CREATE TABLE pgbench_history(tid INTEGER, bid INTEGER, aid INTEGER, delta INTEGER, mtime INTEGER, filler TEXT);",
            )?;
            let filler = " ".repeat(84);
            conn.execute_batch("BEGIN")?;
            for b in 1..=scale.branches {
                conn.execute("INSERT INTO pgbench_branches VALUES (?1, 0, NULL)", [b])?;
            }
            for t in 1..=scale.branches * scale.tellers_per_branch {
                let bid = (t - 1) / scale.tellers_per_branch + 1;
                conn.execute(
                    "INSERT INTO pgbench_tellers VALUES (?1, ?2, 0, NULL)",
                    [t, bid],
                )?;
            }
            let mut stmt = conn.prepare("INSERT INTO pgbench_accounts VALUES (?1, ?2, 0, ?3)")?;
            for a in 1..=scale.branches * scale.accounts_per_branch {
                let bid = (a - 1) / scale.accounts_per_branch + 1;
                stmt.execute(rusqlite::params![a, bid, filler])?;
            }
            drop(stmt);
            conn.execute_batch("COMMIT")?;
        }
    }
    Ok(())
}

/// What one transaction did.
#[derive(Clone, Copy, Debug, Default)]
pub struct Step {
    /// It changed the database (TPC-C's order-status and stock-level only read).
    pub wrote: bool,
    /// kv: the key it inserted.
    pub key: Option<i64>,
}

/// One transaction of the workload; `written` counts the writing transactions before it.
pub fn transaction(
    db: &Database,
    w: Workload,
    scale: Scale,
    written: u64,
    rng: &mut ChaCha8Rng,
) -> Result<Step, SqlError> {
    let conn = db.conn();
    match w {
        Workload::Tpcc => {
            let wrote = crate::tpcc::transaction(conn, scale.warehouses, written + 1, rng)?;
            return Ok(Step { wrote, key: None });
        }
        Workload::Kv => {
            let key: i64 = rng.random::<i64>() & i64::MAX;
            let value: Vec<u8> = (0..100).map(|_| rng.random::<u8>()).collect();
            conn.prepare_cached("INSERT OR REPLACE INTO kv VALUES (?1, ?2)")?
                .execute(rusqlite::params![key, value])?;
            return Ok(Step {
                wrote: true,
                key: Some(key),
            });
        }
        Workload::Tpcb => {
            let aid = rng.random_range(1..=scale.branches * scale.accounts_per_branch);
            let tid = rng.random_range(1..=scale.branches * scale.tellers_per_branch);
            let bid = rng.random_range(1..=scale.branches);
            let delta: i64 = rng.random_range(-5000..=5000);
            conn.execute_batch("BEGIN")?;
            conn.prepare_cached(
                "UPDATE pgbench_accounts SET abalance = abalance + ?1 WHERE aid = ?2",
            )?
            .execute(rusqlite::params![delta, aid])?;
            let _: i64 = conn
                .prepare_cached("SELECT abalance FROM pgbench_accounts WHERE aid = ?1")?
                .query_row([aid], |r| r.get(0))?;
            conn.prepare_cached(
                "UPDATE pgbench_tellers SET tbalance = tbalance + ?1 WHERE tid = ?2",
            )?
            .execute(rusqlite::params![delta, tid])?;
            conn.prepare_cached(
                "UPDATE pgbench_branches SET bbalance = bbalance + ?1 WHERE bid = ?2",
            )?
            .execute(rusqlite::params![delta, bid])?;
            conn.prepare_cached(
                "INSERT INTO pgbench_history VALUES (?1, ?2, ?3, ?4, strftime('%s','now'), NULL)",
            )?
            .execute(rusqlite::params![tid, bid, aid, delta])?;
            conn.execute_batch("COMMIT")?;
        }
    }
    Ok(Step {
        wrote: true,
        key: None,
    })
}

/// Checks the workload's invariant on a (recovered) database. `Err` describes the breach.
pub fn check_invariant(db: &Database, w: Workload) -> Result<(), Breach> {
    let conn = db.conn();
    let integrity: String = conn
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .map_err(Breach::query("PRAGMA integrity_check"))?;
    if integrity != "ok" {
        return Err(Breach::Integrity(integrity));
    }
    if w == Workload::Tpcc {
        crate::tpcc::check(conn)?;
    }
    if w == Workload::Tpcb {
        let sum = |sql: &str| -> Result<i64, Breach> {
            conn.query_row(sql, [], |r| r.get::<_, Option<i64>>(0))
                .map(|v| v.unwrap_or(0))
                .map_err(Breach::query(sql))
        };
        let a = sum("SELECT sum(abalance) FROM pgbench_accounts")?;
        let t = sum("SELECT sum(tbalance) FROM pgbench_tellers")?;
        let b = sum("SELECT sum(bbalance) FROM pgbench_branches")?;
        let h = sum("SELECT sum(delta) FROM pgbench_history")?;
        if !(a == t && t == b && b == h) {
            return Err(Breach::Balances {
                accounts: a,
                tellers: t,
                branches: b,
                history: h,
            });
        }
    }
    Ok(())
}

/// Transactions that have committed, as the database shows them.
pub fn committed_count(db: &Database, w: Workload) -> Result<u64, SqlError> {
    let sql = match w {
        Workload::Kv => "SELECT count(*) FROM kv",
        Workload::Tpcb => "SELECT count(*) FROM pgbench_history",
        Workload::Tpcc => "SELECT count(*) FROM tpcc_commits",
    };
    Ok(db.conn().query_row(sql, [], |r| r.get::<_, i64>(0))? as u64)
}

/// What a measured run did, per transaction and in simulated time.
#[derive(Clone, Debug, serde::Serialize)]
pub struct RunReport {
    pub ftl: String,
    pub mode: String,
    pub tx_kind: String,
    pub synchronous: String,
    pub workload: String,
    pub transactions: u64,
    pub sim_seconds: f64,
    /// Transactions per simulated second (device time only; SQLite's CPU time is `wall_seconds`).
    /// `None` when the run took no simulated time at all (every write absorbed by a device
    /// buffer and never flushed, as OPTR in `nobarrier` mode): there is no rate to report.
    pub tps_sim: Option<f64>,
    pub wall_seconds: f64,
    pub host_pages_written_per_tx: f64,
    pub flash_programs_per_tx: f64,
    pub flushes_per_tx: f64,
    /// Of `flushes_per_tx`: those the VFS added so a grown file's size never reaches flash
    /// before its data (devices that only promise what a flush covers).
    pub ordering_flushes_per_tx: f64,
    pub device_tx_per_tx: f64,
    pub journal_fallbacks: u64,
    pub write_amplification: f64,
    pub syncs_skipped_per_tx: f64,
}

/// Runs `n` transactions and measures them (the setup before is not counted).
pub fn run(
    db: &Database,
    w: Workload,
    scale: Scale,
    n: u64,
    seed: u64,
) -> Result<RunReport, SqlError> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let programs = |db: &Database| db.with_store(|s| s.device().flash().stats().total_programs());
    let (p0, s0, t0) = (programs(db), db.stats(), db.now_ns());
    let wall = Instant::now();
    let mut written = 0;
    for _ in 0..n {
        written += transaction(db, w, scale, written, &mut rng)?.wrote as u64;
    }
    let wall_seconds = wall.elapsed().as_secs_f64();
    let (p1, s1, t1) = (programs(db), db.stats(), db.now_ns());
    let sim_seconds = (t1 - t0) as f64 / 1e9;
    let per = |x: u64| x as f64 / n.max(1) as f64;
    let host = s1.host_pages_written + s1.tx_pages - s0.host_pages_written - s0.tx_pages;
    let (mode, tx_kind, synchronous, ftl) = db.with_store(|s| {
        (
            s.mode(),
            s.tx_kind(),
            s.synchronous_name().to_string(),
            s.device().design(),
        )
    });
    Ok(RunReport {
        ftl: ftl.to_string(),
        mode: mode.name().into(),
        tx_kind: format!("{tx_kind:?}").to_lowercase(),
        synchronous,
        workload: w.name().into(),
        transactions: n,
        sim_seconds,
        tps_sim: (sim_seconds > 1e-6).then(|| n as f64 / sim_seconds),
        wall_seconds,
        host_pages_written_per_tx: per(host),
        flash_programs_per_tx: per(p1 - p0),
        flushes_per_tx: per(s1.flushes - s0.flushes),
        ordering_flushes_per_tx: per(s1.ordering_flushes - s0.ordering_flushes),
        device_tx_per_tx: per(s1.tx_committed - s0.tx_committed),
        journal_fallbacks: s1.journal_fallbacks - s0.journal_fallbacks,
        write_amplification: (p1 - p0) as f64 / host.max(1) as f64,
        syncs_skipped_per_tx: per(s1.syncs_skipped - s0.syncs_skipped),
    })
}
