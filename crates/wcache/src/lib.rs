//! # mobius-wcache: a consumer-grade write-cached page-level FTL
//!
//! The baseline of the OPTR paper (OPTR §6.1): a page-level mapping, a DRAM write-back
//! cache (8 MB, LRU) that coalesces rewrites of dirty pages, and write-back of evicted and flushed
//! pages spread over the chips in any order. It promises only flush semantics
//! ([`Promise::FlushOnly`]); under the `ordered` promise the crash checker must catch it (it is
//! the negative control of OPTR).
//!
//! - [`cache`]: the LRU write-back cache, shared with the `optr` crate (its entries carry the
//!   wid and size tags OPTR needs for coalescing tracking);
//! - [`testkit`]: a seeded write/flush workload and a power-cut campaign that checks the
//!   flush-only and the ordered (prefix) promises on every crash image (used by both crates);
//! - [`wcache`]: the device (mapping, write-back, GC, flush) and its scan-based recovery.

pub mod cache;
pub mod testkit;
pub mod wcache;

use ftl::{DesignSpec, Promise};

pub use wcache::{format, recover, WCache, OOB_BYTES};

pub fn spec() -> DesignSpec {
    DesignSpec {
        name: "wcache",
        summary: "consumer write-cached page FTL: 8 MB LRU DRAM cache, coalescing, flush-only (OPTR baseline)",
        promise: Promise::FlushOnly,
        oob_record_bytes: |_| OOB_BYTES,
        format_version: wcache::FORMAT_VERSION,
        format,
        recover,
        default_workload: "randwrite-flush",
        soak_params: &[],
        over_provisioning: ftl::OverProvisioningKnob::Param("op"),
    }
}
