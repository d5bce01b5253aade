//! Typed errors of every FTL: each says what was wrong and what to do about it.

use flash::{FlashError, Lpn};

/// Host-generated transaction identifier (the paper's `uuid`). `TxUuid(0)` is reserved: in
/// `ABORT(0)` it names the running dynamic transaction (Möbius Table I).
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct TxUuid(pub u64);

impl std::fmt::Display for TxUuid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "tx {}", self.0)
    }
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FtlError {
    #[error("{lpn} is outside the device's {logical_pages} logical pages")]
    LpnOutOfRange { lpn: Lpn, logical_pages: u32 },
    #[error("empty request: a request must name at least one page")]
    EmptyRequest,
    #[error("request of {pages} pages exceeds the largest this design accepts ({max})")]
    RequestTooLarge { pages: u64, max: u64 },
    #[error("device full: garbage collection cannot free a block (utilisation too high for the over-provisioning)")]
    NoSpace,
    #[error("request arrived at {arrival_ns} ns, before the previous one ({previous_ns} ns): arrivals must not go back in time")]
    TimeWentBackwards { arrival_ns: u64, previous_ns: u64 },
    #[error("{0}: this design does not offer that operation")]
    Unsupported(&'static str),
    #[error("unknown {0}: no such transaction is running")]
    UnknownTx(TxUuid),
    #[error("{0} is already in use: a uuid names one transaction")]
    DuplicateTx(TxUuid),
    #[error("{0} is reserved")]
    ReservedTx(TxUuid),
    #[error("a transaction must write at least {min} pages (got {got})")]
    TxTooSmall { got: usize, min: usize },
    #[error("transaction of {pages} pages exceeds the largest this design can keep atomic ({max}); split it into several transactions")]
    TxTooLarge { pages: u64, max: u64 },
    /// Transactions in flight keep their pages' previous versions live until they commit
    /// (TxFlash §3.2), so a full device can only take as many new pages of them as the room it
    /// sets aside below its exported capacity.
    #[error("{pages} more pages of transactions do not fit beside the {in_flight} in flight: the device sets aside room for {room}; commit or abort a running transaction first")]
    TxRoomTaken {
        pages: u64,
        in_flight: u64,
        room: u64,
    },
    #[error("{lpn} appears twice in one transaction")]
    DuplicatePage { lpn: Lpn },
    #[error("no dynamic transaction is running: start one with HEAD")]
    NoDynamicTx,
    #[error("dynamic {0} is running: wait for its REAR or ABORT")]
    DynamicTxRunning(TxUuid),
    #[error("{lpn} is being written by running {holder}; retry after it commits or aborts")]
    Conflict { lpn: Lpn, holder: TxUuid },
    #[error("{0} already committed: it can no longer be aborted")]
    AlreadyCommitted(TxUuid),
    #[error("invalid option: {0}")]
    InvalidOption(String),
    /// The device's spare area cannot hold the design's OOB record (refused at format, not
    /// found at the first program).
    #[error(
        "{design} needs {needs} OOB bytes per page, the device keeps {has} (geometry.oob_bytes)"
    )]
    SpareAreaTooSmall {
        design: &'static str,
        needs: u32,
        has: u32,
    },
    #[error("flash metadata is damaged beyond what recovery can repair: {0}")]
    Corrupt(String),
    /// A page of the design's own metadata that it cannot do without is lost to worn media
    /// (its data failed ECC after every retry) and the design keeps no other copy: what it
    /// names is unrecoverable (docs/reliability.md, what one lost metadata page costs).
    #[error("{what} at {ppn} is lost to the media (uncorrectable) and has no other copy: the device's data cannot be recovered")]
    MediaLoss { ppn: flash::Ppn, what: String },
    #[error("flash rule broken (an FTL bug): {0}")]
    Flash(FlashError),
    /// The image under the device failed (an I/O error): fail-stop, read-only until restarted.
    #[error("{0}")]
    ImageIo(FlashError),
    /// The flash has used up its spare blocks (the media model): read-only for good, as a
    /// worn-out SSD is.
    #[error("{0}")]
    WornOut(FlashError),
}

impl FtlError {
    /// A [`Corrupt`](FtlError::Corrupt) error with `context` put before what it says (which
    /// record named the damage); any other error as it is.
    pub fn in_context(self, context: impl std::fmt::Display) -> FtlError {
        match self {
            FtlError::Corrupt(what) => FtlError::Corrupt(format!("{context}: {what}")),
            other => other,
        }
    }
}

impl From<FlashError> for FtlError {
    fn from(e: FlashError) -> Self {
        match e {
            FlashError::Io(_)
            | FlashError::ImageFailed { .. }
            | FlashError::Image { .. }
            | FlashError::ImageForeign { .. }
            | FlashError::ImageLocked { .. }
            | FlashError::ImageGeometryMismatch { .. } => FtlError::ImageIo(e),
            FlashError::WornOut { .. } => FtlError::WornOut(e),
            other => FtlError::Flash(other),
        }
    }
}

/// One of a design's internal invariants does not hold (an FTL bug, never a host error): what
/// was found, in the words of the structure that checked it. Returned by
/// [`BlockDevice::check_invariants`](crate::BlockDevice::check_invariants), which the host
/// layer's check mode and the crash checker run after every request and every recovery.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvariantViolation(pub String);

impl From<&str> for InvariantViolation {
    fn from(what: &str) -> Self {
        InvariantViolation(what.to_string())
    }
}

/// `violation!("lpn {l} maps to {p}")`: an [`InvariantViolation`] worded like `format!`.
#[macro_export]
macro_rules! violation {
    ($($arg:tt)*) => {
        $crate::InvariantViolation(format!($($arg)*))
    };
}
