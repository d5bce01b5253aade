//! Typed errors of the SQLite layer.

use ftl::FtlError;
use host::HostError;

#[derive(Debug, thiserror::Error)]
pub enum SqlError {
    /// The device (through the host layer) refused or failed a request.
    #[error("device error: {0}")]
    Device(#[from] HostError),
    #[error("the device holds no SQLite directory (format it first)")]
    NotFormatted,
    #[error("corrupt SQLite directory: {0}")]
    Corrupt(String),
    #[error("foreign image: {0}")]
    Foreign(String),
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
    #[error("unknown workload '{0}': kv, tpcb or tpcc")]
    UnknownWorkload(String),
    #[error("the {file} file would grow past its extent of {capacity} bytes")]
    FileFull { file: &'static str, capacity: u64 },
    #[error("the device returned an uncorrectable page at logical page {0}")]
    Uncorrectable(u32),
    #[error("sqlite: {0}")]
    Sqlite(#[from] rusqlite::Error),
}

impl From<FtlError> for SqlError {
    fn from(e: FtlError) -> SqlError {
        SqlError::Device(HostError::Device(e))
    }
}
