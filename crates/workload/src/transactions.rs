//! Transactions as the macro experiments run them: pages a transaction reads, then the pages
//! it commits as one atomic unit, and a stream of them with the database they touch.

use flash::Lpn;

/// One transaction: pages read, then the write set (committed as one atomic unit).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Txn {
    pub kind: &'static str,
    pub reads: Vec<Lpn>,
    pub writes: Vec<Lpn>,
}

/// A stream of transactions, and the logical pages they touch.
#[derive(Clone, Debug)]
pub struct TxWorkload {
    pub name: String,
    /// The database's pages: `0..logical_pages_needed`.
    pub logical_pages_needed: u32,
    pub txns: Vec<Txn>,
    /// Write the whole range once before the measured run (the unmeasured load phase), so the
    /// device starts full; a trace replayed as a trace-driven simulator does starts empty.
    pub preload: bool,
}
