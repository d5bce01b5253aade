//! Workload specifications: a name plus knobs, all with defaults, all seeded.
//!
//! | name | what it does |
//! |---|---|
//! | `randwrite` | random writes of `request_pages` pages within `range_pages` |
//! | `seqwrite` | sequential writes of `request_pages`, wrapping at `range_pages` |
//! | `randrw` | random reads and writes (`read_fraction` reads) |
//! | `randwrite-flush` | `randwrite` with a flush every `flush_every` writes |
//! | `locality` | writes within a hot window of `locality_pages`, moving slowly (coalescing) |
//! | `txmix` | every primitive the design offers: plain writes, sync/async SWRITE (some overlapping), DWRITE chains, ABORT, SREAD, reads, flushes |
//!
//! Every workload may start with a sequential `fill` phase to a target utilisation so that GC runs
//! during the measured phase.

use crate::error::WorkloadError;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WorkloadSpec {
    pub name: String,
    /// Requests in the measured phase.
    pub requests: u64,
    /// Pages per write request (max for transactional workloads' transaction size).
    pub request_pages: u32,
    /// Logical pages the workload touches (0 = the whole device).
    pub range_pages: u32,
    /// Outstanding requests (closed loop).
    pub queue_depth: u32,
    /// Fraction of requests that are reads (randrw, txmix).
    pub read_fraction: f64,
    /// Flush after this many write requests (0 = never; randwrite-flush default 64).
    pub flush_every: u64,
    /// Hot window of the locality workload.
    pub locality_pages: u32,
    /// Fraction of the logical space written sequentially before the measured phase.
    pub fill: f64,
    /// Requests of the workload's own kind issued after the fill and before the measured
    /// phase, not measured: they bring the device to its steady state (GC running, the
    /// mapping cache holding what the workload asks for) before the figures start.
    pub warmup_requests: u64,
    /// txmix: fraction of transactions aborted by the host.
    pub abort_fraction: f64,
    /// txmix: smallest transaction, in pages.
    pub min_tx_pages: u32,
    /// Fraction of measured requests that are trims of 1–8 pages (every workload but seqwrite
    /// and locality).
    pub trim_fraction: f64,
    /// txmix: while a dynamic transaction is open, the fraction of requests that are something
    /// else — plain writes, static transactions, trims, flushes, and more dynamic transactions
    /// on designs that run several — instead of its next page or a read (0: it runs to its
    /// REAR, reads only in between).
    pub interleave_fraction: f64,
}

impl Default for WorkloadSpec {
    fn default() -> Self {
        WorkloadSpec {
            name: "randwrite".into(),
            requests: 100_000,
            request_pages: 1,
            range_pages: 0,
            queue_depth: 8,
            read_fraction: 0.3,
            flush_every: 0,
            locality_pages: 2048,
            fill: 0.0,
            warmup_requests: 0,
            abort_fraction: 0.1,
            min_tx_pages: 2,
            trim_fraction: 0.0,
            interleave_fraction: 0.0,
        }
    }
}

pub const WORKLOAD_NAMES: [&str; 6] = [
    "randwrite",
    "seqwrite",
    "randrw",
    "randwrite-flush",
    "locality",
    "txmix",
];

impl WorkloadSpec {
    pub fn named(name: &str) -> Result<WorkloadSpec, WorkloadError> {
        if !WORKLOAD_NAMES.contains(&name) {
            return Err(WorkloadError::UnknownWorkload {
                name: name.to_string(),
                known: WORKLOAD_NAMES.join(", "),
            });
        }
        let mut s = WorkloadSpec {
            name: name.to_string(),
            ..WorkloadSpec::default()
        };
        match name {
            "randwrite-flush" => s.flush_every = 64,
            "txmix" => {
                s.request_pages = 16;
                s.flush_every = 200;
                s.read_fraction = 0.15;
            }
            "locality" => s.flush_every = 0,
            _ => {}
        }
        Ok(s)
    }

    pub fn validate(&self, logical_pages: u32) -> Result<(), WorkloadError> {
        if self.request_pages == 0 {
            return Err(WorkloadError::ZeroRequestPages);
        }
        if self.queue_depth == 0 {
            return Err(WorkloadError::ZeroQueueDepth);
        }
        if !(0.0..=1.0).contains(&self.fill)
            || !(0.0..=1.0).contains(&self.read_fraction)
            || !(0.0..=1.0).contains(&self.abort_fraction)
            || !(0.0..=1.0).contains(&self.trim_fraction)
            || !(0.0..=1.0).contains(&self.interleave_fraction)
        {
            return Err(WorkloadError::FractionOutOfRange);
        }
        let range = self.range(logical_pages);
        if range < self.request_pages {
            return Err(WorkloadError::RangeTooSmall {
                range,
                request_pages: self.request_pages,
            });
        }
        if self.min_tx_pages == 0 || self.min_tx_pages > self.request_pages.max(2) {
            return Err(WorkloadError::MinTxPages);
        }
        Ok(())
    }

    /// Whether the generator may issue reads (READ or SREAD): `randrw` and `txmix` with a read
    /// fraction above zero. Without reads the driver keeps no expected contents per page.
    pub fn issues_reads(&self) -> bool {
        matches!(self.name.as_str(), "randrw" | "txmix") && self.read_fraction > 0.0
    }

    /// The logical range actually used.
    pub fn range(&self, logical_pages: u32) -> u32 {
        if self.range_pages == 0 {
            logical_pages
        } else {
            self.range_pages.min(logical_pages)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every way a spec can be unusable is its own error, named before anything runs.
    #[test]
    fn bad_specs_are_typed_errors() {
        assert!(matches!(
            WorkloadSpec::named("nosuch"),
            Err(WorkloadError::UnknownWorkload { .. })
        ));
        let ok = WorkloadSpec::named("randwrite").unwrap();
        assert_eq!(ok.validate(1024), Ok(()));
        let with = |f: fn(&mut WorkloadSpec)| {
            let mut s = ok.clone();
            f(&mut s);
            s.validate(1024).unwrap_err()
        };
        assert_eq!(
            with(|s| s.request_pages = 0),
            WorkloadError::ZeroRequestPages
        );
        assert_eq!(with(|s| s.queue_depth = 0), WorkloadError::ZeroQueueDepth);
        assert_eq!(with(|s| s.fill = 1.5), WorkloadError::FractionOutOfRange);
        assert_eq!(
            with(|s| s.request_pages = 2048),
            WorkloadError::RangeTooSmall {
                range: 1024,
                request_pages: 2048
            }
        );
        assert_eq!(with(|s| s.min_tx_pages = 0), WorkloadError::MinTxPages);
    }
}
