//! Block traces as the transactions their software made durable together (Möbius §V-B's macro
//! workloads from real engines; docs/engine-traces.md).
//!
//! A transaction is the writes between two durability points: a FLUSH, or a write with FUA (a
//! write followed by a flush). An engine that asks for atomic requests (MariaDB without its
//! doublewrite buffer, PostgreSQL without full-page writes, on `mobius serve --atomic-requests`)
//! gets each WRITE applied atomically, and every such request lies inside one transaction, so
//! committing the whole group as one transaction keeps each request whole too. The trace's
//! reads between the same points are the transaction's read set (a group with reads and no
//! writes is a read-only transaction). Sub-page requests are rounded out to whole pages;
//! trims are dropped.
//!
//! A trace recorded by tools/record-engine-traces says in its header (`trace::meta`) how many
//! of the engine's own transactions it holds, with how many clients, and whether its WRITEs
//! were atomic requests: [`EngineTrace`] reads them.

use flash::Lpn;
use trace::{Op, Request};
use workload::{TxWorkload, Txn};

/// Why a trace gave no transactions.
#[derive(Debug, thiserror::Error)]
pub enum TraceTransactionsError {
    #[error(transparent)]
    Trace(#[from] trace::TraceError),
    #[error("{0}: offset beyond 2^32 pages")]
    TooFar(String),
    #[error("{0}: no writes between flushes")]
    NoWrites(String),
    #[error("{name}: header line `# {key}: …` {problem}")]
    Header {
        name: String,
        key: &'static str,
        problem: &'static str,
    },
}

/// A trace cut at its durability points.
#[derive(Clone, Debug, Default)]
pub struct Grouped {
    /// One transaction per group that reads or writes, in trace order.
    pub txns: Vec<Txn>,
    /// One past the highest page the transactions touch.
    pub logical_pages_needed: u32,
    /// Per writing request of the trace (WRITE, WRITE_ZEROES; in trace order): its index in the
    /// request list, its pages, and the transaction that holds it.
    pub writes: Vec<(usize, std::ops::RangeInclusive<u32>, usize)>,
}

/// The pages a request covers (whole pages).
fn pages(
    name: &str,
    r: &Request,
    pb: u64,
) -> Result<std::ops::RangeInclusive<u32>, TraceTransactionsError> {
    let too_far = |_| TraceTransactionsError::TooFar(name.to_string());
    let first = u32::try_from(r.offset_bytes / pb).map_err(too_far)?;
    let last = u32::try_from((r.end_bytes() - 1) / pb).map_err(too_far)?;
    Ok(first..=last)
}

/// Cuts `requests` at their durability points: the writes (and, `with_reads`, the reads) between
/// two of them form one transaction. Groups that touch nothing are dropped.
pub fn group(
    name: &str,
    requests: &[Request],
    page_bytes: u32,
    with_reads: bool,
) -> Result<Grouped, TraceTransactionsError> {
    let pb = page_bytes as u64;
    let mut out = Grouped::default();
    let (mut reads, mut writes, mut held) = (Vec::new(), Vec::new(), Vec::new());
    for (k, r) in requests.iter().enumerate() {
        let reading = r.op == Op::Read && with_reads;
        let writing = matches!(r.op, Op::Write | Op::WriteZeroes);
        if (reading || writing) && r.length_bytes > 0 {
            let span = pages(name, r, pb)?;
            out.logical_pages_needed = out.logical_pages_needed.max(span.end() + 1);
            if writing {
                writes.extend(span.clone().map(Lpn));
                held.push((k, span));
            } else {
                reads.extend(span.map(Lpn));
            }
        }
        let durable_point = r.op == Op::Flush || (r.fua && r.op.modifies());
        if durable_point || k + 1 == requests.len() {
            close(&mut out, &mut reads, &mut writes, &mut held);
        }
    }
    Ok(out)
}

/// Ends the current group: its transaction, if it touches anything.
fn close(
    out: &mut Grouped,
    reads: &mut Vec<Lpn>,
    writes: &mut Vec<Lpn>,
    held: &mut Vec<(usize, std::ops::RangeInclusive<u32>)>,
) {
    writes.sort_unstable();
    writes.dedup();
    reads.sort_unstable();
    reads.dedup();
    if writes.is_empty() && reads.is_empty() {
        held.clear();
        return;
    }
    let t = out.txns.len();
    out.writes
        .extend(held.drain(..).map(|(k, span)| (k, span, t)));
    out.txns.push(Txn {
        kind: "trace",
        reads: std::mem::take(reads),
        writes: std::mem::take(writes),
    });
}

/// `one_pass` replayed `repeat` times as a workload (the database preloaded).
pub fn repeated(name: &str, one_pass: &[Txn], needed: u32, repeat: usize) -> TxWorkload {
    TxWorkload {
        name: name.into(),
        logical_pages_needed: needed,
        txns: one_pass
            .iter()
            .cycle()
            .take(one_pass.len() * repeat.max(1))
            .cloned()
            .collect(),
        preload: true,
    }
}

/// A recorded engine trace: its header and its transactions.
#[derive(Clone, Debug)]
pub struct EngineTrace {
    pub name: String,
    pub meta: trace::meta::Meta,
    /// The engine's own transactions (or a file load's loop iterations) the trace holds.
    pub engine_transactions: u64,
    /// The engine's clients while it was recorded.
    pub clients: usize,
    /// Each WRITE was applied as an atomic request (`mobius serve --atomic-requests`).
    pub atomic_requests: bool,
    pub requests: Vec<Request>,
    pub grouped: Grouped,
}

impl EngineTrace {
    /// Reads a trace recorded by tools/record-engine-traces (gzip or plain) for a device of
    /// `page_bytes` pages.
    pub fn read(
        name: &str,
        bytes: &[u8],
        page_bytes: u32,
    ) -> Result<EngineTrace, TraceTransactionsError> {
        let meta = trace::meta::read_meta(bytes)?;
        let header = |key: &'static str| -> Result<&str, TraceTransactionsError> {
            meta.get(key).ok_or(TraceTransactionsError::Header {
                name: name.to_string(),
                key,
                problem: "is missing",
            })
        };
        let number = |key: &'static str| -> Result<u64, TraceTransactionsError> {
            header(key)?.parse::<u64>().ok().filter(|n| *n > 0).ok_or(
                TraceTransactionsError::Header {
                    name: name.to_string(),
                    key,
                    problem: "is not a positive whole number",
                },
            )
        };
        let engine_transactions = number("engine-transactions")?;
        let clients = number("clients")? as usize;
        let atomic_requests = match header("atomic-requests")? {
            "yes" => true,
            "no" => false,
            _ => {
                return Err(TraceTransactionsError::Header {
                    name: name.to_string(),
                    key: "atomic-requests",
                    problem: "is neither yes nor no",
                })
            }
        };
        let (_, requests) = trace::read(bytes, Some(trace::Format::Ours))?;
        let grouped = group(name, &requests, page_bytes, true)?;
        if grouped.writes.is_empty() {
            return Err(TraceTransactionsError::NoWrites(name.to_string()));
        }
        Ok(EngineTrace {
            name: name.to_string(),
            meta,
            engine_transactions,
            clients,
            atomic_requests,
            requests,
            grouped,
        })
    }

    /// The first `limit` transactions (all of them if fewer), replayed `repeat` times, and the
    /// share of the trace they are (by transactions).
    pub fn workload(&self, limit: Option<usize>, repeat: usize) -> (TxWorkload, f64) {
        let all = &self.grouped.txns;
        let n = limit.map_or(all.len(), |l| l.min(all.len()));
        let wl = repeated(
            &self.name,
            &all[..n],
            self.grouped.logical_pages_needed,
            repeat,
        );
        (wl, n as f64 / all.len() as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(text: &str) -> Vec<Request> {
        trace::parse(text.as_bytes(), trace::Format::Ours).unwrap()
    }

    #[test]
    fn groups_end_at_flushes_and_fua_and_keep_reads() {
        let reqs = parsed(
            "0 READ 8192 4096 -\n1 WRITE 0 8192 -\n2 WRITE 4096 512 -\n3 FLUSH 0 0 -\n\
             4 READ 0 4096 -\n5 FLUSH 0 0 -\n6 TRIM 0 4096 -\n7 FLUSH 0 0 -\n\
             8 WRITE 16384 4096 FUA\n9 WRITE_ZEROES 20480 8192 -\n",
        );
        let g = group("t", &reqs, 4096, true).unwrap();
        let w: Vec<Vec<u32>> = g
            .txns
            .iter()
            .map(|t| t.writes.iter().map(|l| l.0).collect())
            .collect();
        let r: Vec<Vec<u32>> = g
            .txns
            .iter()
            .map(|t| t.reads.iter().map(|l| l.0).collect())
            .collect();
        assert_eq!(w, vec![vec![0, 1], vec![], vec![4], vec![5, 6]]);
        assert_eq!(r, vec![vec![2], vec![0], vec![], vec![]]);
        assert_eq!(g.logical_pages_needed, 7);
        let held: Vec<(usize, usize)> = g.writes.iter().map(|(k, _, t)| (*k, *t)).collect();
        assert_eq!(held, vec![(1, 0), (2, 0), (8, 2), (9, 3)]);
        let no_reads = group("t", &reqs, 4096, false).unwrap();
        assert_eq!(no_reads.txns.len(), 3, "the read-only group is dropped");
        assert_eq!(no_reads.logical_pages_needed, 7);
    }

    const HEADER: &str = "# mobius engine trace: t\n# engine-transactions: 10\n# clients: 4\n\
                          # atomic-requests: yes\n";

    #[test]
    fn an_engine_trace_reads_its_header() {
        let text = format!("{HEADER}0 WRITE 0 8192 -\n1 FLUSH 0 0 -\n2 WRITE 8192 4096 FUA\n");
        let t = EngineTrace::read("t", text.as_bytes(), 4096).unwrap();
        assert_eq!(
            (t.engine_transactions, t.clients, t.atomic_requests),
            (10, 4, true)
        );
        assert_eq!(t.grouped.txns.len(), 2);
        let (wl, share) = t.workload(Some(1), 3);
        assert_eq!((wl.txns.len(), share), (3, 0.5));
        assert_eq!(wl.logical_pages_needed, 3);
    }

    #[test]
    fn a_bad_header_is_a_typed_error() {
        for (bad, key) in [
            (HEADER.replace("# clients: 4\n", ""), "clients"),
            (HEADER.replace("10", "ten"), "engine-transactions"),
            (HEADER.replace("10", "0"), "engine-transactions"),
            (HEADER.replace(": yes", ": maybe"), "atomic-requests"),
        ] {
            let text = format!("{bad}0 WRITE 0 4096 FUA\n");
            match EngineTrace::read("t", text.as_bytes(), 4096) {
                Err(TraceTransactionsError::Header { key: k, .. }) => assert_eq!(k, key),
                other => panic!("{key}: {other:?}"),
            }
        }
        let reads_only = format!("{HEADER}0 READ 0 4096 -\n");
        assert!(matches!(
            EngineTrace::read("t", reads_only.as_bytes(), 4096),
            Err(TraceTransactionsError::NoWrites(_))
        ));
    }
}
