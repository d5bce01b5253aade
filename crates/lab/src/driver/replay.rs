//! Trace replay: a recorded block trace against a design, in simulated time (`mobius replay`).
//!
//! The trace (our `serve --trace` lines, blkparse text, MSRC CSV; `trace` loads them) is a list
//! of byte requests. Each is one host request through the same host layer `mobius serve` uses
//! ([`host::Host`], docs/host.md):
//!
//! - a write covering part of a page reads its edge pages first (read-modify-write), then writes
//!   the whole pages as one request; WRITE_ZEROES is split into writes of
//!   [`host::SPLIT_PAGES`]; a FUA write is followed by a flush at its acknowledgement;
//! - a trim forgets the whole pages inside its range (split likewise);
//! - pages carry content tags, not bytes (like `mobius bench`).
//!
//! Timing ([`Timing`]): each request arrives at its trace time (open loop, after the format's
//! idle point), or N requests are kept outstanding (closed loop).

use std::collections::BTreeMap;

use super::{Driver, Queue};
use flash::FlashStats;
use ftl::BlockDevice;
use hdrhistogram::Histogram;
use host::{Host, HostError};
use trace::{Op, Request};

/// How arrivals are chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Timing {
    /// Each request arrives at its trace time.
    Trace,
    /// N requests outstanding; a request arrives when the earliest outstanding one completes.
    Closed { queue_depth: u32 },
}

/// Why a replay stopped.
#[derive(Debug)]
pub enum ReplayError {
    /// A request lies past the device's end (and `--wrap` was not given).
    OutOfRange {
        index: usize,
        end_bytes: u64,
        capacity_bytes: u64,
    },
    /// The device failed in a way that ends the run (full, flash error, corruption).
    Device {
        index: usize,
        op: Op,
        source: HostError,
    },
}

impl std::fmt::Display for ReplayError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReplayError::OutOfRange {
                index,
                end_bytes,
                capacity_bytes,
            } => write!(
                f,
                "request {index} ends at byte {end_bytes}, past the device's {capacity_bytes} \
                 logical bytes: pass a larger --size, or --wrap to fold it back"
            ),
            ReplayError::Device { index, op, source } => {
                write!(f, "request {index} ({}) failed: {source}", op.as_str())
            }
        }
    }
}

impl std::error::Error for ReplayError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ReplayError::Device { source, .. } => Some(source),
            ReplayError::OutOfRange { .. } => None,
        }
    }
}

/// Figures of a replay, in simulated time.
#[derive(Debug, Clone)]
pub struct ReplayStats {
    pub requests: u64,
    pub requests_by_op: BTreeMap<&'static str, u64>,
    pub host_pages_written: u64,
    pub host_pages_read: u64,
    /// Trims a design without trim ignored (as `mobius serve` ignores them).
    pub trims_ignored: u64,
    /// Refused requests by error (the run goes on).
    pub errors: BTreeMap<String, u64>,
    pub latency_ns: Histogram<u64>,
    pub start_ns: u64,
    pub end_ns: u64,
    pub flash: FlashStats,
}

impl ReplayStats {
    pub fn sim_seconds(&self) -> f64 {
        self.end_ns.saturating_sub(self.start_ns) as f64 / 1e9
    }
    pub fn write_amplification(&self) -> f64 {
        if self.host_pages_written == 0 {
            0.0
        } else {
            self.flash.total_programs() as f64 / self.host_pages_written as f64
        }
    }
}

/// Replays `requests` on `dev`, starting at `start_ns`.
pub fn replay(
    dev: &mut dyn BlockDevice,
    requests: &[Request],
    timing: Timing,
    wrap: bool,
    start_ns: u64,
) -> Result<ReplayStats, ReplayError> {
    let mut driver = Driver::over(dev, start_ns);
    let host = driver.host_mut();
    let before = host.device().flash().stats().clone();
    let mut stats = ReplayStats {
        requests: 0,
        requests_by_op: BTreeMap::new(),
        host_pages_written: 0,
        host_pages_read: 0,
        trims_ignored: 0,
        errors: BTreeMap::new(),
        latency_ns: Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("valid bounds"),
        start_ns,
        end_ns: start_ns,
        flash: FlashStats::default(),
    };
    let mut queue = match timing {
        Timing::Closed { queue_depth } => Some(Queue::new(queue_depth as usize, start_ns)),
        Timing::Trace => None,
    };
    let mut last_arrival = start_ns;
    for (index, req) in requests.iter().enumerate() {
        let arrival = match &mut queue {
            None => start_ns.saturating_add(req.arrival_ns).max(last_arrival),
            Some(queue) => queue.next_arrival(),
        };
        last_arrival = arrival;
        let ack = match execute(host, wrap, index, req, arrival) {
            Ok(ack) => ack.max(arrival),
            // Refused requests are counted and the run goes on (as the workload driver does).
            Err(ReplayError::Device { source, .. }) if !source.is_fatal() => {
                *stats.errors.entry(source.to_string()).or_default() += 1;
                arrival
            }
            Err(e) => return Err(e),
        };
        if let Some(queue) = &mut queue {
            queue.completed(ack);
        }
        stats.requests += 1;
        *stats.requests_by_op.entry(req.op.as_str()).or_default() += 1;
        stats.latency_ns.saturating_record((ack - arrival).max(1));
        stats.end_ns = stats.end_ns.max(ack);
    }
    let asked = host.stats();
    stats.host_pages_written = asked.pages_written;
    stats.host_pages_read = asked.pages_read;
    stats.trims_ignored = asked.trims_ignored;
    stats.flash = host.device().flash().stats().since(&before);
    Ok(stats)
}

/// The request's byte range on the device (folded back if `wrap`).
fn range<D: host::DeviceHandle>(
    host: &Host<D>,
    wrap: bool,
    index: usize,
    req: &Request,
) -> Result<(u64, u64), ReplayError> {
    let page_bytes = host.page_bytes();
    let capacity_bytes = host.capacity_bytes();
    let logical_pages = capacity_bytes / page_bytes;
    let (offset, end) = (req.offset_bytes, req.end_bytes());
    if end <= capacity_bytes {
        return Ok((offset, end));
    }
    let first = offset / page_bytes;
    let count = end.div_ceil(page_bytes) - first;
    if !wrap || count > logical_pages {
        return Err(ReplayError::OutOfRange {
            index,
            end_bytes: end,
            capacity_bytes,
        });
    }
    let folded = first % (logical_pages - count + 1);
    let shift = (first - folded) * page_bytes;
    Ok((offset - shift, end - shift))
}

/// One trace request through the host layer; its acknowledgement.
fn execute<D: host::DeviceHandle>(
    host: &mut Host<D>,
    wrap: bool,
    index: usize,
    req: &Request,
    arrival: u64,
) -> Result<u64, ReplayError> {
    let fail = |source| ReplayError::Device {
        index,
        op: req.op,
        source,
    };
    if req.op == Op::Flush {
        return host.flush(arrival).map_err(fail);
    }
    let (offset, end) = range(host, wrap, index, req)?;
    let len = end - offset;
    let done = match req.op {
        Op::Flush => unreachable!("served above"),
        Op::Read => host.read_range(offset, len, arrival),
        Op::Write => host.write_tags(offset, len, req.fua, arrival),
        Op::WriteZeroes => host.write_zeroes(offset, len, req.fua, arrival),
        Op::Trim => host.trim(offset, len, arrival).and_then(|ack| {
            if req.fua {
                Ok(ack.max(host.flush(ack)?))
            } else {
                Ok(ack)
            }
        }),
    };
    done.map_err(fail)
}

#[cfg(test)]
mod tests {
    use super::*;
    use flash::{DeviceConfig, Flash};
    use ftl::DesignOptions;
    use trace::Format;

    fn device(name: &str) -> Box<dyn BlockDevice> {
        let config = DeviceConfig::preset("small").unwrap();
        let design = crate::registry::find(name).unwrap();
        let oob = (design.oob_record_bytes)(&config.geometry);
        let flash = Flash::in_memory(config, oob, true);
        design
            .build(flash, &DesignOptions::from_pairs(&[]).unwrap())
            .unwrap()
    }

    fn parse(text: &str, format: Format) -> Vec<Request> {
        trace::parse(text.as_bytes(), format).unwrap()
    }

    const OURS: &str = "0 WRITE 0 8192 -\n1000 WRITE 1024 1024 -\n2000 FLUSH 0 0 -\n\
                        3000 READ 0 4096 -\n4000 TRIM 0 8192 -\n5000 WRITE_ZEROES 8192 4096 FUA\n\
                        6000 DISC 0 0 -\n";

    #[test]
    fn our_format_replays_with_read_modify_write_and_fua() {
        let mut dev = device("dftl");
        let reqs = parse(OURS, Format::Ours);
        let s = replay(dev.as_mut(), &reqs, Timing::Trace, false, 0).unwrap();
        assert_eq!(s.requests, 6);
        // 2 pages + 1 (sub-page write) + 1 (zeroes); the sub-page write read its page first.
        assert_eq!(s.host_pages_written, 4);
        assert_eq!(s.host_pages_read, 1 + 1);
        assert!(s.flash.total_programs() >= 4);
        assert!(s.errors.is_empty(), "{:?}", s.errors);
        assert_eq!(s.requests_by_op["flush"], 1);
        assert!(s.end_ns > s.start_ns);
    }

    #[test]
    fn blkparse_and_msrc_replay_on_every_design() {
        let blk = "8,0 0 1 0.000000 1 Q WS 8 + 16 [a]\n8,0 0 2 0.000100 1 Q FWFS 64 + 8 [j]\n\
                   8,0 0 3 0.000200 1 Q R 8 + 8 [a]\n8,0 0 4 0.000300 1 Q D 0 + 64 [t]\n";
        let msrc = "Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime\n\
                    1000,h,0,Write,0,16384,1\n1010,h,0,Read,4096,512,1\n1020,h,0,Write,512,512,1\n";
        for name in [
            "dftl",
            "wcache",
            "optr",
            "mobius",
            "atomic-write",
            "lighttx",
            "txflash-tc",
        ] {
            for (text, format, writes) in [(blk, Format::Blkparse, 3), (msrc, Format::Msrc, 5)] {
                let mut dev = device(name);
                let reqs = parse(text, format);
                for timing in [Timing::Trace, Timing::Closed { queue_depth: 4 }] {
                    let start = dev.flash().idle_ns();
                    let s = replay(dev.as_mut(), &reqs, timing, false, start)
                        .unwrap_or_else(|e| panic!("{name} {format}: {e}"));
                    assert_eq!(s.requests, reqs.len() as u64, "{name} {format}");
                    assert_eq!(s.host_pages_written, writes, "{name} {format}");
                    assert!(s.errors.is_empty(), "{name} {format}: {:?}", s.errors);
                }
                dev.check_invariants().unwrap();
            }
        }
    }

    #[test]
    fn requests_past_the_end_fail_unless_wrapped() {
        let mut dev = device("dftl");
        let cap = u64::from(dev.logical_pages()) * 4096;
        let reqs = vec![Request {
            arrival_ns: 0,
            op: Op::Write,
            offset_bytes: cap + 3 * 4096 + 512,
            length_bytes: 4096,
            fua: false,
        }];
        let err = replay(dev.as_mut(), &reqs, Timing::Trace, false, 0).unwrap_err();
        assert!(
            matches!(err, ReplayError::OutOfRange { index: 0, .. }),
            "{err}"
        );
        assert!(err.to_string().contains("--wrap"));
        let s = replay(dev.as_mut(), &reqs, Timing::Trace, true, 0).unwrap();
        assert_eq!(s.host_pages_written, 2, "an unaligned page folded back");
    }

    #[test]
    fn closed_loop_ignores_trace_times() {
        let reqs: Vec<Request> = (0..64)
            .map(|i| Request {
                arrival_ns: i * 1_000_000_000,
                op: Op::Write,
                offset_bytes: i * 4096,
                length_bytes: 4096,
                fua: false,
            })
            .collect();
        let mut a = device("dftl");
        let open = replay(a.as_mut(), &reqs, Timing::Trace, false, 0).unwrap();
        let mut b = device("dftl");
        let closed = replay(
            b.as_mut(),
            &reqs,
            Timing::Closed { queue_depth: 8 },
            false,
            0,
        )
        .unwrap();
        assert!(open.sim_seconds() >= 63.0);
        assert!(closed.sim_seconds() < 1.0);
        assert_eq!(open.host_pages_written, closed.host_pages_written);
    }
}
