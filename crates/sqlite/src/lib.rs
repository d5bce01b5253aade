//! SQLite on the emulated device (issue #15; docs/sqlite.md).
//!
//! A VFS stores a database, its rollback journal and its WAL on any design; the [`Mode`] chosen
//! per connection decides how commits reach the device: SQLite's batch atomic writes as device
//! transactions (SWRITE, or DWRITE chains with ABORT; reads by SREAD), a rollback journal or a
//! WAL with FLUSH, or — on a device that keeps request order — a journal whose ordering syncs
//! are dropped. X-FTL (SIGMOD '13) and Möbius §V ran databases this way; OPTR §4 / Fig. 9 ran
//! SQLite in the ordered modes.

pub mod durability;
pub mod error;
pub mod evidence;
pub mod layout;
pub mod shell;
pub mod store;
pub mod tpcc;
mod vfs;
pub mod workload;

pub use error::{Breach, SqlError};
pub use layout::{Directory, FileKind};
pub use store::{CommitOutcome, Mode, Store, StoreStats, TxKind};

use ftl::BlockDevice;
use rusqlite::{Connection, OpenFlags};
use std::sync::{Arc, Mutex};

/// Name SQLite knows the database by; the device holds exactly one database.
const DB_NAME: &str = "mobius.db";

/// An open SQLite database on a device. Drop order matters: the connection closes before the
/// VFS it uses is unregistered.
pub struct Database {
    conn: Option<Connection>,
    store: Option<vfs::Shared>,
    registration: Option<vfs::Registration>,
}

/// How to open a database.
#[derive(Clone, Debug)]
pub struct OpenOptions {
    pub mode: Mode,
    pub tx_kind: TxKind,
    /// `PRAGMA synchronous`: OFF, NORMAL, FULL or EXTRA.
    pub synchronous: String,
    /// Seeds SQLite's randomness (journal nonces, WAL salts).
    pub seed: u64,
    /// Page cache in KiB (large enough that a transaction never spills: a spill ends batch mode).
    pub cache_kib: u32,
}

impl OpenOptions {
    pub fn new(mode: Mode) -> OpenOptions {
        OpenOptions {
            mode,
            tx_kind: TxKind::Static,
            synchronous: "FULL".into(),
            seed: 1,
            cache_kib: 65536,
        }
    }
}

impl Database {
    /// Formats `dev` with an empty database and opens it.
    pub fn create(dev: Box<dyn BlockDevice>, opts: &OpenOptions) -> Result<Database, SqlError> {
        let store = Store::format(dev, opts.mode, opts.tx_kind)?;
        Database::connect(store, opts)
    }

    /// Opens the database on `dev` (after a power cut: on the recovered device).
    pub fn open(dev: Box<dyn BlockDevice>, opts: &OpenOptions) -> Result<Database, SqlError> {
        let store = Store::open(dev, opts.mode, opts.tx_kind)?;
        Database::connect(store, opts)
    }

    fn connect(store: Store, opts: &OpenOptions) -> Result<Database, SqlError> {
        let page_bytes = store.page_bytes();
        let store = Arc::new(Mutex::new(store));
        let registration = vfs::register(store.clone(), opts.seed)?;
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = Connection::open_with_flags_and_vfs(DB_NAME, flags, registration.name())?;
        let mut db = Database {
            conn: Some(conn),
            store: Some(store),
            registration: Some(registration),
        };
        db.configure(page_bytes, opts)?;
        Ok(db)
    }

    fn configure(&mut self, page_bytes: usize, opts: &OpenOptions) -> Result<(), SqlError> {
        let conn = self.conn();
        conn.execute_batch(&format!(
            "PRAGMA page_size = {page_bytes}; PRAGMA cache_size = -{}; PRAGMA synchronous = {};",
            opts.cache_kib, opts.synchronous
        ))?;
        let mode: String = conn.query_row(
            &format!("PRAGMA journal_mode = {}", opts.mode.journal_mode()),
            [],
            |r| r.get(0),
        )?;
        if opts.mode == Mode::Wal {
            // Checkpoint before the WAL fills half its extent (SQLite's default, 1,000 pages,
            // is more than a small device's WAL extent holds).
            let wal_pages =
                self.with_store(|s| s.directory().capacity(FileKind::Wal)) / page_bytes as u64;
            let pages = (wal_pages / 2).clamp(16, 1000);
            self.conn()
                .execute_batch(&format!("PRAGMA wal_autocheckpoint = {pages};"))?;
        }
        if !mode.eq_ignore_ascii_case(opts.mode.journal_mode()) {
            return Err(SqlError::JournalModeRefused {
                wanted: opts.mode.journal_mode(),
                runs: mode,
            });
        }
        Ok(())
    }

    fn shared(&self) -> &vfs::Shared {
        self.store.as_ref().expect("open")
    }

    pub fn conn(&self) -> &Connection {
        self.conn.as_ref().expect("open")
    }

    pub fn conn_mut(&mut self) -> &mut Connection {
        self.conn.as_mut().expect("open")
    }

    /// Runs `f` on the store (statistics, the clock, the device).
    pub fn with_store<T>(&self, f: impl FnOnce(&Store) -> T) -> T {
        f(&self.shared().lock().expect("store lock"))
    }

    /// Runs `f` on the store mutably (e.g. to start the flash's operation log).
    pub fn with_store_mut<T>(&self, f: impl FnOnce(&mut Store) -> T) -> T {
        f(&mut self.shared().lock().expect("store lock"))
    }

    pub fn stats(&self) -> StoreStats {
        self.with_store(|s| s.stats().clone())
    }

    pub fn now_ns(&self) -> u64 {
        self.with_store(|s| s.now_ns())
    }

    /// Closes the database cleanly (buffered writes reach the device; no flush) and returns
    /// the device.
    pub fn close(mut self) -> Result<Box<dyn BlockDevice>, SqlError> {
        if let Some(conn) = self.conn.take() {
            conn.close().map_err(|(_, e)| e)?;
        }
        Ok(self.into_device())
    }

    /// Power cut: whatever SQLite or the VFS had not handed to the device is lost; the device
    /// (with its own RAM state, which the caller drops with `into_flash`) is returned.
    pub fn cut_power(mut self) -> Box<dyn BlockDevice> {
        self.shared().lock().expect("store lock").cut_power();
        drop(self.conn.take());
        self.into_device()
    }

    fn into_device(mut self) -> Box<dyn BlockDevice> {
        drop(self.conn.take());
        drop(self.registration.take());
        let store = self.store.take().expect("open");
        let store = Arc::try_unwrap(store)
            .unwrap_or_else(|_| panic!("a SQLite file is still open on the device"))
            .into_inner()
            .expect("store lock");
        store.into_device()
    }
}

impl Drop for Database {
    fn drop(&mut self) {
        drop(self.conn.take());
        drop(self.registration.take());
    }
}
