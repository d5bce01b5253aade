//! Transaction clients: a stream of transactions ([`TxWorkload`]) from N concurrent host clients
//! on a loaded device, through the [`Driver`] — the host model of the macro experiments (Möbius
//! §V-B's DBT-2 and Filebench, TxFlash §5.1's traces).
//!
//! Each client runs one transaction at a time (closed loop): it reads the transaction's read set,
//! then commits its write set as one atomic unit — an SWRITE (sync or async) where the design
//! has static transactions, a DWRITE chain where it has only dynamic ones, or (no commit mode:
//! the non-transactional reference) one batch of plain writes. The host serialises transactions
//! that write a common page (a lock manager's job), and for designs that take one transaction at
//! a time it waits for the running one. A transaction the design refuses as too large commits
//! through the host's own journal ([`JournalStep`]), its whole cost counted. Measured:
//! transactions per second, host write bandwidth and write amplification, in simulated time,
//! after an unmeasured load phase that writes the whole database once (unless the workload
//! starts empty).

use super::{Committed, Driver};
use flash::{FlashStats, Lpn};
use ftl::{BlockDevice, FtlError, SwriteMode, TxUuid};
use host::HostError;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use workload::TxWorkload;

pub use super::durability::TraceTransactionsError;

/// Why a run of transaction clients stopped.
#[derive(Debug, thiserror::Error)]
pub enum ClientsError {
    /// The device is too small for the database (and, with it, the host journal).
    #[error("needs {needed} logical pages{with}, device has {has}")]
    TooSmall {
        needed: u32,
        with: &'static str,
        has: u32,
    },
    /// Writing the database once before the measured run failed.
    #[error("load: {0}")]
    Load(HostError),
    /// A step of the host journal failed.
    #[error("host journal: {0}")]
    Journal(HostError),
    /// The device failed for good (a broken flash rule, a failed image, damaged metadata, a
    /// full device).
    #[error(transparent)]
    Device(HostError),
    #[error("completion of a transaction not held")]
    UnheldCompletion,
    #[error("{0} transactions held and never completed")]
    NeverCompleted(usize),
}

/// What a run measured.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Outcome {
    pub committed: u64,
    pub sim_s: f64,
    pub tps: f64,
    pub bandwidth_mb_s: f64,
    pub write_amplification: f64,
    pub host_pages_written: u64,
    pub flash_programs: u64,
    /// Transactions refused for another reason (counted, not run).
    pub errors: u64,
    /// Transactions the design refused as too large, committed the way a host would: through
    /// its own journal (see [`JournalStep`]); their whole cost is in every figure.
    pub journal_fallbacks: u64,
    /// The design's own figures at the end of the run (`BlockDevice::metrics`; not in the
    /// experiments' JSON).
    #[serde(skip)]
    pub design_metrics: Vec<(String, f64)>,
}

/// The host-side journal a transaction the design refuses as too large falls back to, the way
/// ext4's jbd2 or SQLite's rollback journal commit without device transactions: the pages are
/// written to a journal area and flushed, a commit record is written and flushed, then the
/// pages are written in place and flushed. Each step waits for the previous one's flush. The
/// journal area sits after the database; one fallback uses it at a time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JournalStep {
    /// Pages into the journal, then a flush.
    Data = 2,
    /// The commit record, then a flush.
    Commit = 3,
    /// The pages in place, then a flush: the transaction is done.
    Checkpoint = 4,
}

impl JournalStep {
    fn of(phase: u8) -> Option<JournalStep> {
        match phase {
            2 => Some(JournalStep::Data),
            3 => Some(JournalStep::Commit),
            4 => Some(JournalStep::Checkpoint),
            _ => None,
        }
    }
}

/// Runs `wl` from `clients` clients on `dev`, committing each transaction as `commit` says (see
/// [`Driver::commit`]).
/// A design and the way its clients commit: SWRITE in `swrite`'s mode where it has static
/// transactions, else a DWRITE chain; DFTL's `None`: plain writes (the experiments' modes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CommitMode {
    /// The mode's name in tables and figures.
    pub label: &'static str,
    /// The design's `--ftl` name (`crate::registry`).
    pub design: &'static str,
    pub swrite: Option<SwriteMode>,
}

pub fn run(
    dev: Box<dyn BlockDevice>,
    commit: Option<SwriteMode>,
    wl: &TxWorkload,
    clients: usize,
) -> Result<Outcome, ClientsError> {
    drive(dev, commit, false, wl, clients)
}

/// [`run`] without device transactions, made durable the way the host's own journaling does: each
/// transaction's pages as plain writes, then a flush (the engine's fsync), done at the flush's
/// acknowledgement. The baseline of a trace that carries the engine's own journal (its double
/// writes or full-page writes), where the transactional designs replay the trace the engine
/// wrote for atomic requests.
pub fn run_flushed(
    dev: Box<dyn BlockDevice>,
    wl: &TxWorkload,
    clients: usize,
) -> Result<Outcome, ClientsError> {
    drive(dev, None, true, wl, clients)
}

fn drive(
    dev: Box<dyn BlockDevice>,
    commit: Option<SwriteMode>,
    flush_plain: bool,
    wl: &TxWorkload,
    clients: usize,
) -> Result<Outcome, ClientsError> {
    let driver = load(dev, wl)?;
    let mut run = Clients::new(driver, commit, wl, clients);
    run.flush_plain = flush_plain;
    loop {
        run.settle_held()?;
        let Some(Reverse((at, client, i, phase))) = run.events.pop() else {
            if run.held.is_empty() {
                break;
            }
            // Nothing else to run: the poll above (horizon = forever) completed every held
            // transaction unless the design never answers.
            return Err(ClientsError::NeverCompleted(run.held.len()));
        };
        run.clock = run.clock.max(at);
        let done = if let Some(step) = JournalStep::of(phase) {
            run.journal(step, client, i, at)?
        } else if phase == 0 {
            run.reads(client, i, at)?
        } else {
            run.commit(client, i, at)?
        };
        if let Some(t) = done {
            run.end = run.end.max(t);
            run.start_next(client, t);
        }
    }
    Ok(run.outcome())
}

/// The host journal: a commit record and room for the largest transaction.
pub fn journal_pages(wl: &TxWorkload) -> u32 {
    1 + wl.txns.iter().map(|t| t.writes.len()).max().unwrap_or(0) as u32
}

/// `dev` with the database written once, sequentially (the unmeasured load phase), behind its
/// driver; refuses a device too small for the database and the host journal.
fn load(dev: Box<dyn BlockDevice>, wl: &TxWorkload) -> Result<Driver, ClientsError> {
    let has = dev.logical_pages();
    if has < wl.logical_pages_needed {
        return Err(ClientsError::TooSmall {
            needed: wl.logical_pages_needed,
            with: "",
            has,
        });
    }
    let journal_needed = wl.logical_pages_needed + journal_pages(wl);
    if has < journal_needed {
        return Err(ClientsError::TooSmall {
            needed: journal_needed,
            with: " with the host journal",
            has,
        });
    }
    let mut driver = Driver::over(dev, 0).writes_from(1);
    let load_to = if wl.preload {
        wl.logical_pages_needed
    } else {
        0
    };
    driver.fill(load_to, 64, 0).map_err(ClientsError::Load)?;
    Ok(driver)
}

/// Events in time order, so the device sees arrivals that never go back in time: (time,
/// client, transaction index, phase 0 = reads, 1 = commit, 2.. = [`JournalStep`]).
type Event = Reverse<(u64, usize, usize, u8)>;

/// `page_busy` of a page whose writer's completion is not known yet.
const HELD: u64 = u64::MAX;

/// One run of the clients against a loaded device: the event queue, the host's lock manager
/// (per page, when its last writer completes), the transactions the device holds.
struct Clients<'a> {
    driver: Driver,
    commit: Option<SwriteMode>,
    /// Without transactions: a flush after each transaction's writes ([`run_flushed`]).
    flush_plain: bool,
    wl: &'a TxWorkload,
    events: BinaryHeap<Event>,
    next_txn: usize,
    /// Per page: when its last writer completes ([`HELD`] while unknown).
    page_busy: Vec<u64>,
    /// Designs that take one transaction at a time: when the running one completes.
    tx_busy: u64,
    concurrent: bool,
    /// Möbius merges small transactions (§IV-E) and answers their SWRITE later: (client, txn)
    /// per held uuid, and lock-manager waits parked until a holder completes.
    held: HashMap<TxUuid, (usize, usize)>,
    parked: Vec<(usize, usize)>,
    /// The transaction committing through the host journal, and those waiting for it.
    journal_owner: Option<usize>,
    journal_waiting: Vec<(usize, usize)>,
    journal_base: u32,
    before: FlashStats,
    start_ns: u64,
    clock: u64,
    end: u64,
    out: Outcome,
}

impl<'a> Clients<'a> {
    fn new(
        mut driver: Driver,
        commit: Option<SwriteMode>,
        wl: &'a TxWorkload,
        clients: usize,
    ) -> Clients<'a> {
        let start_ns = driver.device().flash().idle_ns();
        let concurrent = driver
            .host_mut()
            .capabilities()
            .map(|c| c.concurrent_static)
            .unwrap_or(true);
        let mut run = Clients {
            before: driver.device().flash().stats().clone(),
            driver,
            commit,
            flush_plain: false,
            wl,
            events: BinaryHeap::new(),
            next_txn: 0,
            page_busy: vec![0u64; wl.logical_pages_needed as usize],
            tx_busy: start_ns,
            concurrent,
            held: HashMap::new(),
            parked: Vec::new(),
            journal_owner: None,
            journal_waiting: Vec::new(),
            journal_base: wl.logical_pages_needed,
            start_ns,
            clock: start_ns,
            end: start_ns,
            out: Outcome::default(),
        };
        for c in 0..clients.min(wl.txns.len()) {
            run.start_next(c, start_ns);
        }
        run
    }

    /// `client`'s next transaction, if any is left, starts at `at`.
    fn start_next(&mut self, client: usize, at: u64) {
        if self.next_txn < self.wl.txns.len() {
            self.events.push(Reverse((at, client, self.next_txn, 0)));
            self.next_txn += 1;
        }
    }

    /// Completions of held transactions up to the next event: their pages unlock, parked
    /// commits retry, their clients move on.
    fn settle_held(&mut self) -> Result<(), ClientsError> {
        if self.held.is_empty() {
            return Ok(());
        }
        let horizon = self.events.peek().map_or(u64::MAX, |e| e.0 .0);
        let done = self
            .driver
            .take_completions(horizon)
            .map_err(ClientsError::Device)?;
        for (uuid, c) in done {
            let (client, i) = self
                .held
                .remove(&uuid)
                .ok_or(ClientsError::UnheldCompletion)?;
            let ack = c.ack_ns.max(self.clock);
            self.lock_pages(i, ack);
            self.end = self.end.max(ack);
            for (c2, i2) in self.parked.drain(..) {
                self.events.push(Reverse((ack, c2, i2, 1)));
            }
            self.start_next(client, ack);
        }
        Ok(())
    }

    /// Transaction `i`'s pages are busy until `until`.
    fn lock_pages(&mut self, i: usize, until: u64) {
        for l in &self.wl.txns[i].writes {
            self.page_busy[l.0 as usize] = until;
        }
    }

    /// One step of a commit through the host journal; the checkpoint ends it.
    fn journal(
        &mut self,
        step: JournalStep,
        client: usize,
        i: usize,
        at: u64,
    ) -> Result<Option<u64>, ClientsError> {
        let writes = &self.wl.txns[i].writes;
        let pages: Vec<Lpn> = match step {
            JournalStep::Data => (0..writes.len() as u32)
                .map(|k| Lpn(self.journal_base + 1 + k))
                .collect(),
            JournalStep::Commit => vec![Lpn(self.journal_base)],
            JournalStep::Checkpoint => writes.clone(),
        };
        let t = self
            .driver
            .write_and_flush(&pages, at)
            .map_err(ClientsError::Journal)?;
        if step != JournalStep::Checkpoint {
            self.events.push(Reverse((t, client, i, step as u8 + 1)));
            return Ok(None);
        }
        self.lock_pages(i, t);
        let waiting: Vec<_> = self
            .parked
            .drain(..)
            .chain(self.journal_waiting.drain(..))
            .collect();
        for (c2, i2) in waiting {
            self.events.push(Reverse((t, c2, i2, 1)));
        }
        self.journal_owner = None;
        self.out.committed += 1;
        self.out.journal_fallbacks += 1;
        self.out.host_pages_written += self.wl.txns[i].writes.len() as u64;
        Ok(Some(t))
    }

    /// The transaction's reads; a read-only one is then done, any other goes on to commit.
    fn reads(&mut self, client: usize, i: usize, at: u64) -> Result<Option<u64>, ClientsError> {
        let txn = &self.wl.txns[i];
        let mut t = at;
        for &l in &txn.reads {
            t = t.max(self.driver.read(l, 1, at).map_err(ClientsError::Device)?);
        }
        if txn.writes.is_empty() {
            self.out.committed += 1;
            Ok(Some(t))
        } else {
            self.events.push(Reverse((t, client, i, 1)));
            Ok(None)
        }
    }

    /// The commit, once the host's lock manager lets it go: after earlier transactions on the
    /// same pages (and the running one where the design takes one at a time).
    fn commit(&mut self, client: usize, i: usize, at: u64) -> Result<Option<u64>, ClientsError> {
        let writes = &self.wl.txns[i].writes;
        let mut ready = writes
            .iter()
            .map(|l| self.page_busy[l.0 as usize])
            .fold(at, u64::max);
        if !self.concurrent {
            ready = ready.max(self.tx_busy);
        }
        if ready == HELD {
            self.parked.push((client, i));
            return Ok(None);
        }
        if ready > at {
            self.events.push(Reverse((ready, client, i, 1)));
            return Ok(None);
        }
        let pages = writes.len() as u64;
        let committed = if self.flush_plain && self.commit.is_none() {
            self.driver
                .write_and_flush(writes, at)
                .map(|ack_ns| Committed { uuid: None, ack_ns })
        } else {
            self.driver.commit(writes, self.commit, at)
        };
        match committed {
            Ok(Committed {
                uuid,
                ack_ns: ftl::ACK_DEFERRED,
            }) => {
                self.lock_pages(i, HELD);
                let uuid = uuid.ok_or(ClientsError::UnheldCompletion)?;
                self.held.insert(uuid, (client, i));
                self.out.committed += 1;
                self.out.host_pages_written += pages;
                Ok(None)
            }
            Ok(Committed { ack_ns, .. }) => {
                self.lock_pages(i, ack_ns);
                self.tx_busy = ack_ns;
                self.out.committed += 1;
                self.out.host_pages_written += pages;
                Ok(Some(ack_ns))
            }
            Err(e) if e.is_fatal() => Err(ClientsError::Device(e)),
            Err(e) if too_large(&e) && self.journal_owner.is_some() => {
                self.journal_waiting.push((client, i));
                Ok(None)
            }
            Err(e) if too_large(&e) => {
                // Refused as too large: the host commits it through its journal. Its pages
                // stay locked until the in-place write is flushed.
                self.journal_owner = Some(i);
                self.lock_pages(i, HELD);
                self.events
                    .push(Reverse((at, client, i, JournalStep::Data as u8)));
                Ok(None)
            }
            Err(_) => {
                self.out.errors += 1;
                Ok(Some(at))
            }
        }
    }

    /// The run's figures from the measured phase.
    fn outcome(mut self) -> Outcome {
        let dev = self.driver.device();
        let d = dev.flash().stats().since(&self.before);
        let page_bytes = dev.flash().geometry().page_bytes;
        let out = &mut self.out;
        out.sim_s = (self.end - self.start_ns) as f64 / 1e9;
        out.tps = out.committed as f64 / out.sim_s.max(1e-12);
        out.flash_programs = d.total_programs();
        out.write_amplification = d.total_programs() as f64 / out.host_pages_written.max(1) as f64;
        out.bandwidth_mb_s =
            out.host_pages_written as f64 * page_bytes as f64 / out.sim_s.max(1e-12) / 1e6;
        out.design_metrics = dev.metrics();
        self.out
    }
}

/// The design refused a transaction as larger than it keeps atomic.
fn too_large(e: &HostError) -> bool {
    matches!(e.device_error(), Some(FtlError::TxTooLarge { .. }))
}

/// A block trace turned into transactions the way a journaling file system commits: the writes
/// between two durability points (FLUSH, or a FUA write) form one transaction (its distinct
/// pages, sub-page writes rounded out to whole pages; trims and reads dropped;
/// [`super::durability::group`]). The trace is replayed `repeat` times so runs are long enough
/// to measure.
pub fn trace_transactions(
    name: &str,
    bytes: &[u8],
    page_bytes: u32,
    repeat: usize,
) -> Result<TxWorkload, TraceTransactionsError> {
    let (_, requests) = trace::read(bytes, None)?;
    let grouped = super::durability::group(name, &requests, page_bytes, false)?;
    if grouped.txns.is_empty() {
        return Err(TraceTransactionsError::NoWrites(name.to_string()));
    }
    Ok(super::durability::repeated(
        name,
        &grouped.txns,
        grouped.logical_pages_needed,
        repeat,
    ))
}
