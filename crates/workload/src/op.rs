//! Host requests and the host log: what the host asked, when, and what it was told.
//!
//! Every page a request writes gets a host-wide write number; the page's content is
//! `ContentTag { lpn, write }`, so any page read back (after a power cut too) names the exact
//! request that wrote it. The crash checker judges recovered images against this log alone.

use flash::Lpn;
use ftl::{DwriteFlag, SwriteMode, TxUuid};
use serde::Serialize;

/// One host request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub enum HostOp {
    Write {
        start: Lpn,
        count: u32,
    },
    Read {
        start: Lpn,
        count: u32,
    },
    Flush,
    Trim {
        start: Lpn,
        count: u32,
    },
    SWrite {
        uuid: TxUuid,
        lpns: Vec<Lpn>,
        mode: SwriteMode,
    },
    DWrite {
        uuid: TxUuid,
        lpn: Lpn,
        flag: DwriteFlag,
    },
    Abort {
        uuid: TxUuid,
    },
    SRead {
        start: Lpn,
        count: u32,
    },
}

impl HostOp {
    /// The first page a plain read or write looks up (what the host layer hints to the design
    /// on arrival: `BlockDevice::prefetch_mapping`).
    pub fn mapping_lookup(&self) -> Option<Lpn> {
        match self {
            HostOp::Write { start, .. } | HostOp::Read { start, .. } => Some(*start),
            _ => None,
        }
    }

    pub fn kind(&self) -> &'static str {
        match self {
            HostOp::Write { .. } => "write",
            HostOp::Read { .. } => "read",
            HostOp::Flush => "flush",
            HostOp::Trim { .. } => "trim",
            HostOp::SWrite {
                mode: SwriteMode::Sync,
                ..
            } => "swrite-sync",
            HostOp::SWrite {
                mode: SwriteMode::Async,
                ..
            } => "swrite-async",
            HostOp::DWrite { .. } => "dwrite",
            HostOp::Abort { .. } => "abort",
            HostOp::SRead { .. } => "sread",
        }
    }

    /// How many pages this request writes ([`written_lpns`](Self::written_lpns)' length,
    /// without building the list).
    pub fn written_pages(&self) -> u64 {
        match self {
            HostOp::Write { count, .. } => *count as u64,
            HostOp::SWrite { lpns, .. } => lpns.len() as u64,
            HostOp::DWrite { .. } => 1,
            _ => 0,
        }
    }

    /// Logical pages this request writes, in order.
    pub fn written_lpns(&self) -> Vec<Lpn> {
        match self {
            HostOp::Write { start, count } => (0..*count).map(|i| Lpn(start.0 + i)).collect(),
            HostOp::SWrite { lpns, .. } => lpns.clone(),
            HostOp::DWrite { lpn, .. } => vec![*lpn],
            _ => Vec::new(),
        }
    }
}

/// One request as it happened.
#[derive(Clone, Debug, Serialize)]
pub struct HostRecord {
    /// Request number, from 0, in arrival order.
    pub index: u64,
    pub op: HostOp,
    pub arrival_ns: u64,
    /// When the host was told it is done; `None` if the device refused it with an error.
    pub ack_ns: Option<u64>,
    /// For requests that end a transaction: from when it survives any power cut.
    pub durable_ns: Option<u64>,
    /// The error the device answered, if any (the request had no effect).
    pub error: Option<String>,
    /// Write number of the first page written (pages get consecutive numbers).
    pub first_write: u64,
}

impl HostRecord {
    /// (lpn, write number) of every page this request wrote.
    pub fn writes(&self) -> impl Iterator<Item = (Lpn, u64)> + '_ {
        self.op
            .written_lpns()
            .into_iter()
            .enumerate()
            .map(move |(i, l)| (l, self.first_write + i as u64))
    }
    pub fn succeeded(&self) -> bool {
        self.error.is_none()
    }
}

/// Everything the host did in a run.
#[derive(Clone, Debug, Default, Serialize)]
pub struct HostLog {
    pub design: String,
    pub logical_pages: u32,
    pub records: Vec<HostRecord>,
    /// Number of the next page write (all pages written have smaller numbers).
    pub next_write: u64,
}

impl HostLog {
    /// The request that wrote page-write number `write`.
    pub fn record_of_write(&self, write: u64) -> Option<&HostRecord> {
        let i = self.records.partition_point(|r| r.first_write <= write);
        let r = self.records.get(i.checked_sub(1)?)?;
        let n = r.op.written_pages();
        (write < r.first_write + n).then_some(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_pages_is_the_length_of_written_lpns_for_every_kind_of_request() {
        let (start, uuid) = (Lpn(7), TxUuid(3));
        let ops = [
            HostOp::Write { start, count: 5 },
            HostOp::Read { start, count: 5 },
            HostOp::Flush,
            HostOp::Trim { start, count: 5 },
            HostOp::SWrite {
                uuid,
                lpns: vec![Lpn(1), Lpn(9), Lpn(4)],
                mode: SwriteMode::Sync,
            },
            HostOp::DWrite {
                uuid,
                lpn: start,
                flag: DwriteFlag::Body,
            },
            HostOp::Abort { uuid },
            HostOp::SRead { start, count: 5 },
        ];
        for op in &ops {
            assert_eq!(op.written_pages(), op.written_lpns().len() as u64, "{op:?}");
        }
        let writing = ops.iter().filter(|op| op.written_pages() > 0).count();
        assert_eq!(writing, 3, "write, swrite and dwrite write pages");
    }
}
