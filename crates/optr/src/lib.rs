//! # mobius-optr: OPTR, an order-preserving FTL behind a plain block interface
//!
//! OPTR (the OPTR paper, §3) keeps the consumer write cache of the `wcache` baseline
//! but guarantees prefix semantics, request atomicity and flush semantics after a power cut.
//!
//! - [`cutpoint`]: the optimal recovery point — Algorithm 1 and the naive flow-network search;
//! - [`format`]: OOB record, summary page, seal, incremental diff, full-checkpoint chunk and
//!   coalescing-record pages, with round-trip tests.
//! - [`device`]: the device (write path, coalescing records, checkpoints, constrained GC,
//!   internal flushes) and its five-phase recovery.

pub mod cutpoint;
pub mod device;
pub mod format;

use ftl::{DesignSpec, Promise};

pub use device::{format, recover, Optr, Overhead};
pub use format::OOB_BYTES;

pub fn spec() -> DesignSpec {
    DesignSpec {
        name: "optr",
        summary:
            "OPTR: write-cached FTL with prefix semantics, request atomicity and flush semantics",
        promise: Promise::Ordered,
        oob_record_bytes: |_| OOB_BYTES,
        format_version: format::FORMAT_VERSION,
        format,
        recover,
        default_workload: "randwrite-flush",
        soak_params: &[],
        over_provisioning: ftl::OverProvisioningKnob::Param("op"),
    }
}
