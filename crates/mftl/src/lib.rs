//! # mobius-mftl: Möbius (mFTL)
//!
//! Atom inodes, the Atom Log Area, DAG commit, dynamic transactions, fast recovery (SPEC.md §2).
//! See `docs/mobius.md`.

pub mod format;
