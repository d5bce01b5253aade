//! Typed errors of the SQLite layer.

use flash::codec::CorruptRecord;
use ftl::FtlError;
use host::HostError;

#[derive(Debug, thiserror::Error)]
pub enum SqlError {
    /// The device (through the host layer) refused or failed a request.
    #[error("device error: {0}")]
    Device(#[from] HostError),
    #[error("the device holds no SQLite directory (format it first)")]
    NotFormatted,
    /// The directory page is damaged (checksum, or extents that cannot be).
    #[error("corrupt SQLite directory: {0}")]
    Corrupt(CorruptRecord),
    /// Page 0 holds something else, or a directory of another version or page size.
    #[error("foreign image: page 0 is not this build's SQLite directory: {0}")]
    Foreign(CorruptRecord),
    #[error("device pages of {page_bytes} bytes: SQLite needs 512-65536")]
    PageSize { page_bytes: u32 },
    #[error("SQLite refused journal_mode={wanted} (runs {runs})")]
    JournalModeRefused { wanted: &'static str, runs: String },
    #[error("device of {logical_pages} logical pages is too small for a database")]
    DeviceTooSmall { logical_pages: u32 },
    #[error("mode '{mode}' needs {needs}; design '{design}' does not offer it")]
    ModeUnsupported {
        mode: &'static str,
        design: &'static str,
        needs: &'static str,
    },
    #[error("unknown mode '{0}': batch, journal, wal, ordered or nobarrier")]
    UnknownMode(String),
    #[error("unknown --tx '{0}': static, dynamic (or plain: negative control)")]
    UnknownTxKind(String),
    #[error("unknown workload '{0}': kv, tpcb or tpcc")]
    UnknownWorkload(String),
    #[error("the {file} file would grow past its extent of {capacity} bytes")]
    FileFull { file: &'static str, capacity: u64 },
    #[error("the device returned an uncorrectable page at logical page {0}")]
    Uncorrectable(u32),
    #[error("sqlite: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// A request after [`crate::Database::cut_power`]: the power is gone.
    #[error("the device has lost power")]
    PoweredOff,
    #[error("fill {0} is not a share of the device (0 to 1)")]
    InvalidFill(f64),
}

impl From<FtlError> for SqlError {
    fn from(e: FtlError) -> SqlError {
        SqlError::Device(HostError::Device(e))
    }
}

/// Why a database, opened after a power cut (or at the end of a run), is judged broken.
#[derive(Debug, thiserror::Error)]
pub enum Breach {
    #[error("recovery failed: {0}")]
    Recovery(FtlError),
    #[error("invariant broken after recovery: {0}")]
    Invariant(ftl::InvariantViolation),
    #[error("database does not open: {0}")]
    DoesNotOpen(SqlError),
    /// A second life: the database, recovered and checked, failed a later transaction.
    #[error("the recovered database failed a transaction: {0}")]
    AfterRecovery(SqlError),
    /// With the media model on: the database failed with an I/O error for a logical page of
    /// which the media lost no version the database may hold there (issue #69).
    #[error(
        "logical page {lpn} read as an I/O error, but the media lost no version of it the \
         database may hold there"
    )]
    NotLost { lpn: u32 },
    #[error("{query}: {source}")]
    Query {
        query: String,
        source: rusqlite::Error,
    },
    #[error("integrity_check: {0}")]
    Integrity(String),
    #[error(
        "TPC-C consistency: {bad_ytd} warehouses with W_YTD != sum(D_YTD), {bad_next} districts with a wrong \
         next order id, {bad_lines} districts whose order lines disagree with O_OL_CNT, {bad_history} warehouses \
         whose YTD disagrees with history; commits numbered 1..{last_commit} but {commits} present"
    )]
    Tpcc {
        bad_ytd: i64,
        bad_next: i64,
        bad_lines: i64,
        bad_history: i64,
        last_commit: i64,
        commits: i64,
    },
    #[error("balances disagree: accounts {accounts}, tellers {tellers}, branches {branches}, history {history}")]
    Balances {
        accounts: i64,
        tellers: i64,
        branches: i64,
        history: i64,
    },
    #[error(
        "kv holds {present} keys that are not the first {expected} inserted (a gap or a later key)"
    )]
    KeyGap { present: usize, expected: usize },
    #[error("{found} transactions found, only {ran} ran")]
    MoreThanRan { found: u64, ran: u64 },
    #[error(
        "{committed} commits had returned by {at_ns} ns but only {found} transactions survived"
    )]
    LostCommits {
        committed: u64,
        at_ns: u64,
        found: u64,
    },
}

impl Breach {
    /// A query the check needed failed to run.
    pub fn query(query: &str) -> impl FnOnce(rusqlite::Error) -> Breach + '_ {
        move |source| Breach::Query {
            query: query.to_string(),
            source,
        }
    }
}
