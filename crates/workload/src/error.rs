//! Typed errors of workloads and the driver: a spec that cannot run, or a run the device stopped.

use ftl::TxUuid;
use host::HostError;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum WorkloadError {
    #[error("unknown workload '{name}'; known: {known}")]
    UnknownWorkload { name: String, known: String },
    #[error("request_pages must be at least 1")]
    ZeroRequestPages,
    #[error("queue_depth must be at least 1")]
    ZeroQueueDepth,
    #[error("fill, read_fraction, abort_fraction, trim_fraction and interleave_fraction must be within [0, 1]")]
    FractionOutOfRange,
    #[error("range of {range} pages is smaller than a request of {request_pages} pages")]
    RangeTooSmall { range: u32, request_pages: u32 },
    #[error("min_tx_pages must be within 1..=request_pages")]
    MinTxPages,
    #[error("workload {0} needs a transactional design (use randwrite, randrw, ...)")]
    NeedsTransactions(String),
    /// The device failed a request in a way that stops the run (broken or full).
    #[error("request {index} ({op}) failed: {source}")]
    Request {
        index: u64,
        op: &'static str,
        source: HostError,
    },
    #[error("request {index} ({op}) broke an invariant: {reason}")]
    Invariant {
        index: u64,
        op: &'static str,
        reason: ftl::InvariantViolation,
    },
    #[error("the final flush failed: {0}")]
    FinalFlush(HostError),
    #[error("closing held transactions failed: {0}")]
    HeldTransactions(HostError),
    /// The design broke the deferred-acknowledgement contract (`ftl::ACK_DEFERRED`).
    #[error("{design}: {what}")]
    DeferredAck { design: String, what: String },
    #[error("the device completed {0:?}, which it had not held back")]
    UnheldCompletion(TxUuid),
    #[error("{design}: SWRITE {uuid:?} never completed")]
    NeverCompleted { design: String, uuid: TxUuid },
}

/// For callers that still report errors as text.
impl From<WorkloadError> for String {
    fn from(e: WorkloadError) -> String {
        e.to_string()
    }
}
