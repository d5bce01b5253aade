//! `mobius sql-bench` (a SQL workload on a design, in simulated time) and `mobius sql` (a
//! SQLite shell on a flash image): SQLite through the VFS of `crates/sqlite` (docs/sqlite.md).

use crate::device_args::DeviceArgs;
use flash::Flash;
use ftl::DesignOptions;
use sqlite::workload::{self, Scale, Workload};
use sqlite::{Database, Mode, OpenOptions, TxKind};
use std::path::PathBuf;

/// Options shared by both commands: the design, device and how SQLite reaches it.
#[derive(clap::Args, Debug)]
pub struct SqlDeviceArgs {
    /// Design (`mobius info --list`).
    #[arg(long)]
    pub ftl: String,
    #[command(flatten)]
    pub device: DeviceArgs,
    /// Device size instead of the preset's blocks per chip, e.g. 64M, 1G.
    #[arg(long, default_value = "64M")]
    pub size: String,
    /// batch (device transactions), journal, wal, ordered (OPTR), nobarrier.
    #[arg(long, default_value = "batch")]
    pub mode: String,
    /// How a batch reaches the device: static (one SWRITE per commit) or dynamic (a DWRITE
    /// chain streamed as SQLite writes, ROLLBACK = ABORT).
    #[arg(long, default_value = "static")]
    pub tx: String,
    /// PRAGMA synchronous: off, normal, full, extra.
    #[arg(long, default_value = "full")]
    pub synchronous: String,
    /// Design parameter, `--param key=value` (repeatable).
    #[arg(long = "param", value_name = "KEY=VALUE")]
    pub params: Vec<String>,
}

impl SqlDeviceArgs {
    fn open_options(&self, seed: u64) -> anyhow::Result<OpenOptions> {
        let mut o = OpenOptions::new(Mode::parse(&self.mode)?);
        o.tx_kind = match self.tx.as_str() {
            "static" => TxKind::Static,
            "dynamic" => TxKind::Dynamic,
            other => anyhow::bail!("unknown --tx '{other}': static or dynamic"),
        };
        if !["off", "normal", "full", "extra"].contains(&self.synchronous.to_lowercase().as_str()) {
            anyhow::bail!(
                "unknown --synchronous '{}': off, normal, full or extra",
                self.synchronous
            );
        }
        o.synchronous = self.synchronous.to_uppercase();
        o.seed = seed;
        Ok(o)
    }

    fn config(&self, design: &ftl::DesignSpec) -> anyhow::Result<flash::DeviceConfig> {
        let mut config = self.device.resolve_for(design)?;
        crate::device_args::apply_size(&mut config, &self.size)?;
        Ok(config)
    }
}

#[derive(clap::Args, Debug)]
pub struct SqlBenchArgs {
    #[command(flatten)]
    pub db: SqlDeviceArgs,
    /// kv (one insert per transaction), tpcb (pgbench's transaction) or tpcc (a TPC-C-like mix).
    #[arg(long, default_value = "tpcb")]
    pub workload: String,
    /// Measured transactions (after loading the tables).
    #[arg(long, default_value_t = 2000)]
    pub transactions: u64,
    /// tpcb: accounts per branch (pgbench: 100,000).
    #[arg(long, default_value_t = 10_000)]
    pub accounts: u32,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
}

pub fn bench(args: &SqlBenchArgs) -> anyhow::Result<()> {
    let design = lab::registry::find(&args.db.ftl)?;
    let config = args.db.config(&design)?;
    let options = DesignOptions::from_pairs(&args.db.params)?;
    let oob = (design.oob_record_bytes)(&config.geometry);
    let dev = design.build(Flash::in_memory(config, oob, false), &options)?;
    let db = Database::create(dev, &args.db.open_options(args.seed)?)?;
    let w = Workload::parse(&args.workload)?;
    let scale = Scale {
        accounts_per_branch: args.accounts,
        ..Scale::default()
    };
    workload::setup(&db, w, scale)?;
    let report = workload::run(&db, w, scale, args.transactions, args.seed)?;
    workload::check_invariant(&db, w)?;
    if args.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        let v = serde_json::to_value(&report)?;
        for (k, v) in v.as_object().expect("object") {
            println!("{k:<28} {v}");
        }
    }
    Ok(())
}

#[derive(clap::Args, Debug)]
pub struct SqlArgs {
    #[command(flatten)]
    pub db: SqlDeviceArgs,
    /// Flash image file: created (and the database formatted) if absent, recovered if present.
    #[arg(long)]
    pub image: PathBuf,
    /// Statements to run; none: read them from standard input, one per line.
    pub sql: Vec<String>,
}

/// A one-shot or line-by-line SQLite shell on a flash image. `kill -9` at any moment is a
/// power cut: the next start recovers the design and SQLite rolls back or replays its log.
pub fn shell(args: &SqlArgs) -> anyhow::Result<()> {
    let design = lab::registry::find(&args.db.ftl)?;
    let config = args.db.config(&design)?;
    let options = DesignOptions::from_pairs(&args.db.params)?;
    let fresh = !args.image.exists();
    let dev = crate::serve::open_image(&design, &config, &options, &args.image)?;
    let opts = args.db.open_options(1)?;
    let db = if fresh {
        Database::create(dev, &opts)?
    } else {
        Database::open(dev, &opts)?
    };
    if args.sql.is_empty() {
        for line in std::io::stdin().lines() {
            run_statement(&db, &line?)?;
        }
    } else {
        for s in &args.sql {
            run_statement(&db, s)?;
        }
    }
    let mut dev = db.close()?;
    dev.flush(dev.flash().idle_ns())?;
    dev.flash_mut().sync()?;
    Ok(())
}

/// Runs one statement and prints its rows, `|`-separated like the sqlite3 shell.
fn run_statement(db: &Database, sql: &str) -> anyhow::Result<()> {
    let sql = sql.trim();
    if sql.is_empty() {
        return Ok(());
    }
    let conn = db.conn();
    let mut stmt = conn.prepare(sql)?;
    let columns = stmt.column_count();
    let mut rows = stmt.query([])?;
    while let Some(row) = rows.next()? {
        let cells: Vec<String> = (0..columns)
            .map(|i| match row.get_ref(i) {
                Ok(rusqlite::types::ValueRef::Null) => String::new(),
                Ok(rusqlite::types::ValueRef::Integer(v)) => v.to_string(),
                Ok(rusqlite::types::ValueRef::Real(v)) => v.to_string(),
                Ok(rusqlite::types::ValueRef::Text(t)) => String::from_utf8_lossy(t).into_owned(),
                Ok(rusqlite::types::ValueRef::Blob(b)) => format!("<{} bytes>", b.len()),
                Err(e) => format!("<{e}>"),
            })
            .collect();
        println!("{}", cells.join("|"));
    }
    Ok(())
}
