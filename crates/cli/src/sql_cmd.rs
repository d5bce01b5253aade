//! `mobius sql-bench` (a SQL workload on a design, in simulated time) and `mobius sql` (a
//! SQLite shell on a flash image): SQLite through the VFS of `crates/sqlite` (docs/sqlite.md).

use ftl::DesignOptions;
use lab::device::Recipe;
use lab::record::{RecordingDevice, RequestLog};
use sqlite::durability::{durable_mode, durable_synchronous};
use sqlite::shell::Shell;
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
    pub device: Recipe,
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
    /// PRAGMA synchronous: off, normal, full, extra. Default: `sql-bench` full; `sql` the
    /// level at which the mode loses no acknowledged commit (extra for journal and ordered,
    /// else full; docs/sqlite.md).
    #[arg(long)]
    pub synchronous: Option<String>,
    /// Design parameter, `--param key=value` (repeatable).
    #[arg(long = "param", value_name = "KEY=VALUE")]
    pub params: Vec<String>,
}

impl SqlDeviceArgs {
    /// How to open the database; `synchronous` unless `--synchronous` is given.
    fn open_options(&self, seed: u64, synchronous: &str) -> anyhow::Result<OpenOptions> {
        let mut o = OpenOptions::new(Mode::parse(&self.mode)?);
        o.tx_kind = match self.tx.as_str() {
            "static" => TxKind::Static,
            "dynamic" => TxKind::Dynamic,
            other => anyhow::bail!("unknown --tx '{other}': static or dynamic"),
        };
        let synchronous = self.synchronous.as_deref().unwrap_or(synchronous);
        if !["off", "normal", "full", "extra"].contains(&synchronous.to_lowercase().as_str()) {
            anyhow::bail!("unknown --synchronous '{synchronous}': off, normal, full or extra");
        }
        o.synchronous = synchronous.to_uppercase();
        o.seed = seed;
        Ok(o)
    }

    fn config(&self, design: &ftl::DesignSpec) -> anyhow::Result<flash::DeviceConfig> {
        let mut config = self.device.resolve_for(design)?;
        lab::device::apply_size(&mut config, &self.size)?;
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
    /// Record the measured run's device requests into FILE as an engine trace (our trace lines
    /// under a `# key: value` header, docs/engine-traces.md); the load before it is not recorded.
    #[arg(long, value_name = "FILE")]
    pub trace: Option<PathBuf>,
}

pub fn bench(args: &SqlBenchArgs) -> anyhow::Result<()> {
    let design = lab::registry::find(&args.db.ftl)?;
    let config = args.db.config(&design)?;
    let options = DesignOptions::from_pairs(&args.db.params)?;
    let log = RequestLog::default();
    let mut dev = lab::device::fresh(&design, &config, &options, false)?;
    if args.trace.is_some() {
        dev = RecordingDevice::wrap(dev, log.clone());
    }
    let open = args.db.open_options(args.seed, "FULL")?;
    let db = Database::create(dev, &open)?;
    let w = Workload::parse(&args.workload)?;
    let scale = Scale {
        accounts_per_branch: args.accounts,
        ..Scale::default()
    };
    workload::setup(&db, w, scale)?;
    log.set_recording(true);
    let report = workload::run(&db, w, scale, args.transactions, args.seed)?;
    log.set_recording(false);
    workload::check_invariant(&db, w)?;
    if let Some(path) = &args.trace {
        let text = lab::record::trace_text(&trace_header(args, &open, scale), &log.records());
        std::fs::write(path, text)
            .map_err(|e| anyhow::anyhow!("writing the trace {}: {e}", path.display()))?;
    }
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

/// The header of a `sql-bench --trace` trace: the keys `lab::driver::durability::EngineTrace`
/// reads, and what ran (the recorder adds the trace's name and who recorded it).
fn trace_header(
    args: &SqlBenchArgs,
    open: &OpenOptions,
    scale: Scale,
) -> Vec<(&'static str, String)> {
    let db = &args.db;
    let workload = match args.workload.as_str() {
        "tpcc" => format!(
            "tpcc (crates/sqlite/src/tpcc.rs: {} warehouse, TPC-C's mix, one terminal)",
            scale.warehouses
        ),
        "tpcb" => format!("tpcb ({} accounts)", scale.accounts_per_branch),
        other => other.to_string(),
    };
    vec![
        ("software", format!("SQLite {} (rusqlite bundled, SQLITE_ENABLE_BATCH_ATOMIC_WRITE) through the VFS of crates/sqlite, one connection", rusqlite::version())),
        ("device", format!("mobius sql-bench --ftl {} --size {}{}", db.ftl, db.size, db.params.iter().map(|p| format!(" --param {p}")).collect::<String>())),
        ("workload", format!("{workload}, {} transactions after an untraced load, seed {}; --mode {} --tx {} PRAGMA synchronous={}", args.transactions, args.seed, db.mode, db.tx, open.synchronous)),
        ("engine-transactions", args.transactions.to_string()),
        ("clients", "1".into()),
        ("atomic-requests", if open.mode == Mode::Batch { "yes" } else { "no" }.into()),
    ]
}

#[derive(clap::Args, Debug)]
pub struct SqlArgs {
    #[command(flatten)]
    pub db: SqlDeviceArgs,
    /// Flash image file: created (and the database formatted) if absent, recovered if present.
    #[arg(long)]
    pub image: PathBuf,
    /// SQL to run, each argument one or more statements; none: read statements from standard
    /// input, each ending with `;` (a statement may span lines, a line may hold several).
    pub sql: Vec<String>,
}

/// A SQLite shell on a flash image: every statement given, in order, until the first that
/// fails (docs/sqlite.md, "The shell"). `kill -9` at any moment is a power cut: the next start
/// recovers the design and SQLite rolls back or replays its log.
pub fn shell(args: &SqlArgs) -> anyhow::Result<()> {
    let design = lab::registry::find(&args.db.ftl)?;
    let config = args.db.config(&design)?;
    let options = DesignOptions::from_pairs(&args.db.params)?;
    let mode = Mode::parse(&args.db.mode)?;
    let opts = args.db.open_options(1, durable_synchronous(mode).0)?;
    let fresh = !args.image.exists();
    let dev = crate::serve::open_image("mobius sql", &design, &config, &options, &args.image)?;
    let db = if fresh {
        Database::create(dev, &opts)?
    } else {
        Database::open(dev, &opts)?
    };
    eprintln!(
        "mobius sql: {}",
        synchronous_note(mode, &opts.synchronous, args.db.synchronous.is_some())
    );
    let ran = run_statements(&db, &args.sql);
    let mut dev = db.close()?;
    dev.flush(dev.flash().idle_ns())?;
    dev.flash_mut().sync()?;
    ran
}

/// The start line's account of `PRAGMA synchronous`: the level, and whether and why it keeps
/// every acknowledged commit in `mode`.
fn synchronous_note(mode: Mode, level: &str, given: bool) -> String {
    let (safe, why) = durable_synchronous(mode);
    let name = mode.name();
    if !given {
        format!("synchronous={level}, {name} mode's default: {why} (--synchronous overrides)")
    } else if durable_mode(mode, level) || !durable_mode(mode, safe) {
        format!("synchronous={level} (--synchronous)")
    } else {
        format!(
            "synchronous={level} (--synchronous): {name} mode may lose acknowledged commits to a \
             power cut; {safe} keeps them: {why}"
        )
    }
}

/// Runs the statements of every argument, or of standard input when there are none.
fn run_statements(db: &Database, scripts: &[String]) -> anyhow::Result<()> {
    let mut shell = Shell::new(db.conn(), std::io::stdout().lock());
    if scripts.is_empty() {
        for line in std::io::stdin().lines() {
            shell.feed_line(&line?)?;
        }
        shell.finish()?;
    } else {
        for (i, sql) in scripts.iter().enumerate() {
            shell.run_argument(i + 1, sql)?;
        }
    }
    Ok(())
}
