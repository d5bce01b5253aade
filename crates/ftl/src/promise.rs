//! The promises a design can make about what survives a power cut (issue #3).

use serde::Serialize;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Promise {
    /// Data written before the last completed flush survives; anything after may be old or new,
    /// page by page; never data of another logical page, never garbage.
    FlushOnly,
    /// Every acknowledged write survives.
    DurableWrites,
    /// Transactions are all or nothing, durable once acknowledged durable, and a later
    /// transaction writing a page of an earlier one cannot survive without it; plain writes
    /// follow durable-writes.
    AtomicTransactions,
    /// OPTR: prefix semantics, request atomicity, flush semantics.
    Ordered,
}

impl Promise {
    pub const ALL: [Promise; 4] = [
        Promise::FlushOnly,
        Promise::DurableWrites,
        Promise::AtomicTransactions,
        Promise::Ordered,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Promise::FlushOnly => "flush-only",
            Promise::DurableWrites => "durable-writes",
            Promise::AtomicTransactions => "atomic-transactions",
            Promise::Ordered => "ordered",
        }
    }

    pub fn parse(name: &str) -> Result<Promise, UnknownPromise> {
        Promise::ALL
            .into_iter()
            .find(|p| p.name() == name)
            .ok_or_else(|| UnknownPromise(name.to_string()))
    }
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("unknown promise '{0}'; known: flush-only, durable-writes, atomic-transactions, ordered")]
pub struct UnknownPromise(pub String);
