//! # mobius-txflash: TxFlash (Prabhakaran, Rodeheffer, Zhou — "Transactional Flash", OSDI'08)
//!
//! A transactional SSD: `WriteAtomic` of up to 4 MB, `Abort`, plain reads and writes (a plain
//! write is a one-page transaction), over a page-mapped FTL with a per-block summary page.
//!
//! Implemented commit protocol: Traditional Commit ([`tc`], design `txflash-tc`). The cyclic
//! protocols (SCC, BPCC) are not implemented yet — see docs/txflash.md.

pub mod format;
pub mod tc;

pub use tc::TxFlashTc;

/// TxFlash with the Traditional Commit protocol.
pub fn spec_tc() -> ftl::DesignSpec {
    tc::spec()
}
