//! # mobius-optr: OPTR, an order-preserving FTL behind a plain block interface
//!
//! OPTR (SPEC.md §5; seed paper 003) keeps the consumer write cache of the `wcache` baseline
//! but guarantees prefix semantics, request atomicity and flush semantics after a power cut.
//!
//! - [`cutpoint`]: the optimal recovery point — Algorithm 1 and the naive flow-network search;
//! - [`format`]: OOB record, summary page, seal, incremental diff, full-checkpoint chunk and
//!   coalescing-record pages, with round-trip tests.
//!
//! Status: see docs/optr.md — the device itself (write path, checkpoints, GC, five-phase
//! recovery) is not in this crate yet.

pub mod cutpoint;
pub mod format;
