//! # mobius-fast: FAST, the hybrid log-block FTL
//!
//! FAST (Lee, Park, Chung, Lee, Park, Song: "A log buffer-based flash translation layer using
//! fully-associative sector translation", ACM TECS 6(3), 2007) maps data blocks at block
//! granularity and absorbs overwrites in a few log blocks: one sequential-write (SW) log block
//! for a logical block rewritten from its first page, and fully associative random-write (RW)
//! log blocks that take any page. Reclaiming log space costs merges (switch, partial, full).
//! The NVMFS paper replays its file systems' block traces on FAST and on a page-level FTL for
//! its erase study (NVMFS §IV-C, Fig. 7: erase count and erase cost, i.e. valid-page copies);
//! `mobius compare`'s NVMFS experiment does the same (docs/nvmfs.md).
//!
//! - [`format`]: the OOB record;
//! - [`fast`]: the device, its write path and merges;
//! - [`recover`]: recovery from the OOB records alone;
//! - [`free`]: the erased blocks, per chip.
//!
//! It promises durable writes ([`Promise::DurableWrites`]): every write is on flash when
//! acknowledged and a block is erased only after everything that superseded it is (docs/fast.md).

#[allow(clippy::module_inception)]
pub mod fast;
pub mod format;
pub mod free;
pub mod recover;

#[cfg(test)]
mod tests;

use ftl::{DesignSpec, Promise};

pub use fast::{format, Fast, Layout, Params, RESERVE_BLOCKS};
pub use recover::recover;

/// FAST as the tools see it.
pub fn spec() -> DesignSpec {
    DesignSpec {
        name: "fast",
        summary: "FAST hybrid log-block FTL: block-mapped data, one SW + fully associative RW log blocks, switch/partial/full merges (NVMFS erase study)",
        promise: Promise::DurableWrites,
        oob_record_bytes: |_| format::OOB_BYTES,
        format_version: format::FORMAT_VERSION,
        format,
        recover,
        default_workload: "randwrite",
        // one or two RW log blocks: a full merge every few host pages
        soak_params: &[&[], &[("rw_log_blocks", "1")], &[("rw_log_blocks", "2")]],
        over_provisioning: ftl::OverProvisioningKnob::Param("op"),
    }
}
