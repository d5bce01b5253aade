//! # mobius-txflash: TxFlash (Prabhakaran, Rodeheffer, Zhou — "Transactional Flash", OSDI'08)
//!
//! A transactional SSD: `WriteAtomic` of up to 4 MB, `Abort`, plain reads and writes (a plain
//! write is a one-page transaction), over a page-mapped FTL with a per-block summary page.
//!
//! Commit protocols (TxFlash §3, Table 1):
//! - Traditional Commit ([`tc`], design `txflash-tc`): intention records + a commit record.
//! - Simple Cyclic Commit ([`cyclic`], design `txflash-scc`): next-link cycles; aborted
//!   intentions are erased before their pages are written again.
//! - Back Pointer Cyclic Commit ([`cyclic`], design `txflash-bpcc`): next-links plus back
//!   pointers; aborted intentions are left and straddled; GC follows the straddle
//!   responsibility sets.
//!
//! See docs/txflash.md.

pub mod cyclic;
pub mod format;
mod summary_scan;
mod surface;
pub mod tc;

pub use cyclic::TxFlashCyclic;
pub use surface::{default_gc_free_blocks, min_gc_free_blocks, Isolation};

/// Largest `WriteAtomic` by default (`--param max_tx_bytes`): 4 MB, TxFlash §2.1.
pub const DEFAULT_MAX_TX_BYTES: u64 = 4 << 20;
pub use tc::TxFlashTc;

/// TxFlash with the Traditional Commit protocol.
pub fn spec_tc() -> ftl::DesignSpec {
    tc::spec()
}

/// TxFlash with Simple Cyclic Commit (TxFlash §3.2).
pub fn spec_scc() -> ftl::DesignSpec {
    cyclic::spec_scc()
}

/// TxFlash with Back Pointer Cyclic Commit (TxFlash §3.3).
pub fn spec_bpcc() -> ftl::DesignSpec {
    cyclic::spec_bpcc()
}
