//! Experiment 2 — transactional SSDs, macro (Möbius §V-C, Figs. 9 and 10).
//!
//! Every design runs the same seeded stream of transactions from `clients` concurrent host
//! clients (closed loop). A client reads its transaction's read set, then commits its write set as
//! one atomic unit — SWRITE (sync or async) where the design has static transactions, a DWRITE
//! chain where it has only dynamic ones; DFTL, which has no transactions, writes the pages as one
//! batch of plain writes (no atomicity: the non-transactional reference). The host serialises
//! transactions that write a common page (a lock manager's job), and for designs that allow one
//! transaction at a time it waits for the running one. Measured: transactions per second
//! (normalised to Atomic-Write), host write bandwidth and write amplification, in simulated time,
//! after an unmeasured load phase that writes the whole database once.

use crate::claims::{Check, Claim, Tolerance};
use crate::report::{fmt, ExperimentResult, Figure, Table};
use crate::svg::BarChart;
use crate::tpcc::{Tpcc, Txn};
use crate::Context;
use flash::{Content, ContentTag, Flash, Lpn};
use ftl::{BlockDevice, DesignOptions, DwriteFlag, FtlError, SwriteMode, TxUuid};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// A way of running the experiment: design plus commit mode.
#[derive(Clone, Copy, Debug)]
pub struct Mode {
    pub label: &'static str,
    pub design: &'static str,
    pub swrite: Option<SwriteMode>,
}

pub const MODES: [Mode; 6] = [
    Mode {
        label: "Möbius S-SWRITE",
        design: "mobius",
        swrite: Some(SwriteMode::Sync),
    },
    Mode {
        label: "Möbius A-SWRITE",
        design: "mobius",
        swrite: Some(SwriteMode::Async),
    },
    Mode {
        label: "Atomic-Write",
        design: "atomic-write",
        swrite: Some(SwriteMode::Sync),
    },
    Mode {
        label: "LightTx",
        design: "lighttx",
        swrite: Some(SwriteMode::Sync),
    },
    Mode {
        label: "TxFlash (BPCC)",
        design: "txflash-bpcc",
        swrite: Some(SwriteMode::Sync),
    },
    Mode {
        label: "DFTL",
        design: "dftl",
        swrite: None,
    },
];

/// A stream of transactions (one workload of the experiment).
pub struct Workload {
    pub name: String,
    pub logical_pages_needed: u32,
    pub txns: Vec<Txn>,
    /// Write the whole range once before the measured run (the unmeasured load phase), so the
    /// device starts full; a trace replayed as a trace-driven simulator does starts empty.
    pub preload: bool,
}

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
    /// experiment's JSON).
    #[serde(skip)]
    pub design_metrics: Vec<(String, f64)>,
}

/// The host-side journal a transaction the design refuses as too large falls back to, the way
/// ext4's jbd2 or SQLite's rollback journal commit without device transactions: the pages are
/// written to a journal area and flushed, a commit record is written and flushed, then the
/// pages are written in place and flushed. Each step waits for the previous one's flush. The
/// journal area sits after the database; one fallback uses it at a time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum JournalStep {
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

/// Plain writes of `pages` (each its own content) at `start..`, in runs of 64, then a flush;
/// returns the flush's acknowledgement.
fn write_and_flush(
    dev: &mut dyn BlockDevice,
    pages: &[Lpn],
    host: &mut Host,
    at: u64,
) -> Result<u64, FtlError> {
    for chunk in pages.chunks(64) {
        // Runs of consecutive pages go as one request, others one page each.
        let contiguous = chunk.windows(2).all(|w| w[1].0 == w[0].0 + 1);
        if contiguous {
            let data: Vec<Content> = chunk.iter().map(|&l| host.page(l)).collect();
            dev.write(chunk[0], &data, at)?;
        } else {
            for &l in chunk {
                let c = host.page(l);
                dev.write(l, &[c], at)?;
            }
        }
    }
    Ok(dev.flush(at)?.ack_ns)
}

/// One step of a journal fallback for a transaction writing `writes`, issued at `at`; returns
/// when its flush completed.
fn journal_step(
    dev: &mut dyn BlockDevice,
    step: JournalStep,
    writes: &[Lpn],
    journal_base: u32,
    host: &mut Host,
    at: u64,
) -> Result<u64, FtlError> {
    let journal: Vec<Lpn> = match step {
        JournalStep::Data => (0..writes.len() as u32)
            .map(|k| Lpn(journal_base + 1 + k))
            .collect(),
        JournalStep::Commit => vec![Lpn(journal_base)],
        JournalStep::Checkpoint => writes.to_vec(),
    };
    write_and_flush(dev, &journal, host, at)
}

/// `page_busy` of a page whose writer's completion is not known yet.
const HELD: u64 = u64::MAX;

pub(crate) struct Host {
    pub(crate) write: u64,
    pub(crate) uuid: u64,
}

impl Host {
    pub(crate) fn page(&mut self, l: Lpn) -> Content {
        self.write += 1;
        Content::Tag(ContentTag {
            lpn: l.0,
            write: self.write,
        })
    }
}

pub(crate) fn commit(
    dev: &mut dyn BlockDevice,
    mode: &Mode,
    writes: &[Lpn],
    at: u64,
    host: &mut Host,
) -> Result<u64, FtlError> {
    let Some(swrite) = mode.swrite else {
        let mut end = at;
        for &l in writes {
            let c = host.page(l);
            end = end.max(dev.write(l, &[c], at)?.ack_ns);
        }
        return Ok(end);
    };
    host.uuid += 1;
    let uuid = TxUuid(host.uuid);
    let tx = dev
        .transactional()
        .ok_or(FtlError::Unsupported("transactions"))?;
    let caps = tx.capabilities();
    if caps.static_tx && writes.len() >= 2 {
        let pages: Vec<(Lpn, Content)> = writes.iter().map(|&l| (l, host.page(l))).collect();
        return Ok(tx.swrite(uuid, &pages, swrite, at)?.ack_ns);
    }
    let mut t = at;
    for (i, &l) in writes.iter().enumerate() {
        let flag = match (i, writes.len()) {
            (_, 1) => DwriteFlag::Single,
            (0, _) => DwriteFlag::Head,
            (i, n) if i + 1 == n => DwriteFlag::Rear,
            _ => DwriteFlag::Body,
        };
        let c = host.page(l);
        // The pages of a dynamic transaction are sent back to back (arrival `at`), so other
        // clients' requests are still issued in time order.
        t = t.max(tx.dwrite(uuid, l, &c, flag, at)?.ack_ns);
    }
    Ok(t)
}

/// Runs one mode on one workload.
pub fn run_mode(
    ctx: &Context,
    mode: &Mode,
    wl: &Workload,
    config: &flash::DeviceConfig,
    clients: usize,
) -> crate::error::Result<Outcome> {
    let (dev, host) = loaded_device(ctx, mode, wl, config)?;
    let mut run = MacroRun::new(dev, host, mode, wl, clients);
    loop {
        run.settle_held()?;
        let Some(Reverse((at, client, i, phase))) = run.events.pop() else {
            if run.held.is_empty() {
                break;
            }
            // Nothing else to run: the poll above (horizon = forever) completed every held
            // transaction unless the design never answers.
            return Err(crate::error::MeasureError::Precondition(format!(
                "{} transactions held and never completed",
                run.held.len()
            )));
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
    Ok(run.outcome(config))
}

/// A fresh device of `mode`'s design with the database written once, sequentially (the
/// unmeasured load phase), and the host that wrote it; refuses a device too small for the
/// database and the host journal.
fn loaded_device(
    ctx: &Context,
    mode: &Mode,
    wl: &Workload,
    config: &flash::DeviceConfig,
) -> crate::error::Result<(Box<dyn BlockDevice>, Host)> {
    let spec = ctx.built(mode.design)?;
    let flash = Flash::in_memory(
        config.clone(),
        (spec.oob_record_bytes)(&config.geometry),
        true,
    );
    let mut dev = spec.build(flash, &DesignOptions::default())?;
    if dev.logical_pages() < wl.logical_pages_needed {
        return Err(crate::error::MeasureError::Precondition(format!(
            "needs {} logical pages, device has {}",
            wl.logical_pages_needed,
            dev.logical_pages()
        )));
    }
    let journal_needed = wl.logical_pages_needed + journal_pages(wl);
    if dev.logical_pages() < journal_needed {
        return Err(crate::error::MeasureError::Precondition(format!(
            "needs {journal_needed} logical pages with the host journal, device has {}",
            dev.logical_pages()
        )));
    }
    let mut host = Host { write: 0, uuid: 0 };
    let mut t = 0;
    let load_to = if wl.preload {
        wl.logical_pages_needed
    } else {
        0
    };
    for start in (0..load_to).step_by(64) {
        let n = 64.min(wl.logical_pages_needed - start);
        let pages: Vec<Content> = (start..start + n).map(|l| host.page(Lpn(l))).collect();
        t = dev
            .write(Lpn(start), &pages, t)
            .map_err(|e| crate::error::MeasureError::step("load", e))?
            .ack_ns;
    }
    Ok((dev, host))
}

/// The host journal: a commit record and room for the largest transaction.
fn journal_pages(wl: &Workload) -> u32 {
    1 + wl.txns.iter().map(|t| t.writes.len()).max().unwrap_or(0) as u32
}

/// Events in time order, so the device sees arrivals that never go back in time: (time,
/// client, transaction index, phase 0 = reads, 1 = commit, 2.. = [`JournalStep`]).
type Event = Reverse<(u64, usize, usize, u8)>;

/// One run of the clients against a loaded device: the event queue, the host's lock manager
/// (per page, when its last writer completes), the transactions the device holds.
struct MacroRun<'a> {
    dev: Box<dyn BlockDevice>,
    mode: &'a Mode,
    wl: &'a Workload,
    host: Host,
    events: BinaryHeap<Event>,
    next_txn: usize,
    /// Per page: when its last writer completes ([`HELD`] while unknown).
    page_busy: Vec<u64>,
    /// Designs that take one transaction at a time: when the running one completes.
    tx_busy: u64,
    concurrent: bool,
    /// Möbius merges small transactions (§IV-E) and answers their SWRITE later: (client, txn)
    /// per held uuid, and lock-manager waits parked until a holder completes.
    held: std::collections::HashMap<TxUuid, (usize, usize)>,
    parked: Vec<(usize, usize)>,
    /// The transaction committing through the host journal, and those waiting for it.
    journal_owner: Option<usize>,
    journal_waiting: Vec<(usize, usize)>,
    journal_base: u32,
    reads_buf: Vec<ftl::PageOutcome>,
    before: flash::FlashStats,
    start_ns: u64,
    clock: u64,
    end: u64,
    out: Outcome,
}

impl<'a> MacroRun<'a> {
    fn new(
        mut dev: Box<dyn BlockDevice>,
        host: Host,
        mode: &'a Mode,
        wl: &'a Workload,
        clients: usize,
    ) -> MacroRun<'a> {
        let start_ns = dev.flash().idle_ns();
        let concurrent = dev
            .transactional()
            .map(|t| t.capabilities().concurrent_static)
            .unwrap_or(true);
        let mut run = MacroRun {
            before: dev.flash().stats().clone(),
            dev,
            mode,
            wl,
            host,
            events: BinaryHeap::new(),
            next_txn: 0,
            page_busy: vec![0u64; wl.logical_pages_needed as usize],
            tx_busy: start_ns,
            concurrent,
            held: Default::default(),
            parked: Vec::new(),
            journal_owner: None,
            journal_waiting: Vec::new(),
            journal_base: wl.logical_pages_needed,
            reads_buf: Vec::new(),
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
    fn settle_held(&mut self) -> crate::error::Result<()> {
        if self.held.is_empty() {
            return Ok(());
        }
        let horizon = self.events.peek().map_or(u64::MAX, |e| e.0 .0);
        let done = self
            .dev
            .transactional()
            .map(|t| t.take_completions(horizon))
            .transpose()?
            .unwrap_or_default();
        for (uuid, c) in done {
            let (client, i) = self.held.remove(&uuid).ok_or_else(|| {
                crate::error::MeasureError::Precondition(
                    "completion of a transaction not held".into(),
                )
            })?;
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
    ) -> crate::error::Result<Option<u64>> {
        let writes = &self.wl.txns[i].writes;
        let t = journal_step(
            self.dev.as_mut(),
            step,
            writes,
            self.journal_base,
            &mut self.host,
            at,
        )
        .map_err(|e| crate::error::MeasureError::step("host journal", e))?;
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
    fn reads(&mut self, client: usize, i: usize, at: u64) -> crate::error::Result<Option<u64>> {
        let txn = &self.wl.txns[i];
        let mut t = at;
        for &l in &txn.reads {
            let done = self.dev.read(l, 1, at, &mut self.reads_buf)?;
            t = t.max(done.ack_ns);
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
    fn commit(&mut self, client: usize, i: usize, at: u64) -> crate::error::Result<Option<u64>> {
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
        match commit(self.dev.as_mut(), self.mode, writes, at, &mut self.host) {
            Ok(ftl::ACK_DEFERRED) => {
                self.lock_pages(i, HELD);
                self.held.insert(TxUuid(self.host.uuid), (client, i));
                self.out.committed += 1;
                self.out.host_pages_written += pages;
                Ok(None)
            }
            Ok(ack) => {
                self.lock_pages(i, ack);
                self.tx_busy = ack;
                self.out.committed += 1;
                self.out.host_pages_written += pages;
                Ok(Some(ack))
            }
            Err(
                e @ (FtlError::Flash(_)
                | FtlError::ImageIo(_)
                | FtlError::Corrupt(_)
                | FtlError::NoSpace),
            ) => Err(e.into()),
            Err(FtlError::TxTooLarge { .. }) if self.journal_owner.is_some() => {
                self.journal_waiting.push((client, i));
                Ok(None)
            }
            Err(FtlError::TxTooLarge { .. }) => {
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
    fn outcome(mut self, config: &flash::DeviceConfig) -> Outcome {
        let d = self.dev.flash().stats().since(&self.before);
        let out = &mut self.out;
        out.sim_s = (self.end - self.start_ns) as f64 / 1e9;
        out.tps = out.committed as f64 / out.sim_s.max(1e-12);
        out.flash_programs = d.total_programs();
        out.write_amplification = d.total_programs() as f64 / out.host_pages_written.max(1) as f64;
        out.bandwidth_mb_s = out.host_pages_written as f64 * config.geometry.page_bytes as f64
            / out.sim_s.max(1e-12)
            / 1e6;
        out.design_metrics = self.dev.metrics();
        self.out
    }
}

/// The device the macro experiment runs on: `jasmine` at paper scale; a 1 GiB slice of it
/// (same chips, fewer blocks) at quick scale, so the load phase fills it and GC runs.
fn device(ctx: &Context) -> crate::error::Result<flash::DeviceConfig> {
    let mut c = ctx.device("jasmine")?;
    if ctx.scale == crate::Scale::Quick {
        c.geometry.blocks_per_chip = 128;
    }
    Ok(c)
}

pub fn tpcc_workload(ctx: &Context, logical_pages: u32) -> Workload {
    let max_w = if ctx.scale == crate::Scale::Quick {
        24
    } else {
        1_000
    };
    let budget = (logical_pages as f64 * 0.7) as u32;
    let mut gen = Tpcc::fitting(budget, max_w).unwrap_or_else(|| Tpcc::new(1));
    let mut rng = ChaCha8Rng::seed_from_u64(ctx.seed);
    let n = if ctx.scale == crate::Scale::Quick {
        20_000
    } else {
        200_000
    };
    let txns = (0..n).map(|_| gen.next(&mut rng)).collect();
    Workload {
        name: "tpcc-like".into(),
        logical_pages_needed: gen.pages(),
        txns,
        preload: true,
    }
}

/// The committed trace of real software: ext4 mkfs and a small-file workload recorded through
/// `mobius serve --trace` (crates/cli/tests/fixtures/record-ext4-trace.sh regenerates it).
const EXT4_TRACE: &[u8] = include_bytes!("../../cli/tests/fixtures/ext4-small-files.trace.gz");

/// A block trace turned into transactions the way a journaling file system commits: the writes
/// between two durability points (FLUSH, or a FUA write) form one transaction (its distinct
/// pages, sub-page writes rounded out to whole pages; trims dropped). The trace is replayed
/// `repeat` times so runs are long enough to measure.
pub fn trace_workload(
    name: &str,
    bytes: &[u8],
    page_bytes: u32,
    repeat: usize,
) -> crate::error::Result<Workload> {
    let (_, requests) = trace::read(bytes, None)?;
    let pb = page_bytes as u64;
    let mut one_pass = Vec::new();
    let mut needed = 0u32;
    for group in trace::split_at_flushes(&requests) {
        let mut writes: Vec<Lpn> = Vec::new();
        for r in group
            .iter()
            .filter(|r| r.op != trace::Op::Trim && r.length_bytes > 0)
        {
            for p in r.offset_bytes / pb..=(r.end_bytes() - 1) / pb {
                let l = u32::try_from(p).map_err(|_| {
                    crate::error::MeasureError::Precondition(format!(
                        "{name}: offset beyond 2^32 pages"
                    ))
                })?;
                writes.push(Lpn(l));
                needed = needed.max(l + 1);
            }
        }
        writes.sort_unstable();
        writes.dedup();
        if !writes.is_empty() {
            one_pass.push(Txn {
                kind: "trace",
                reads: Vec::new(),
                writes,
            });
        }
    }
    if one_pass.is_empty() {
        return Err(crate::error::MeasureError::Precondition(format!(
            "{name}: no writes between flushes"
        )));
    }
    let txns = one_pass
        .iter()
        .cycle()
        .take(one_pass.len() * repeat.max(1))
        .cloned()
        .collect();
    Ok(Workload {
        name: name.into(),
        logical_pages_needed: needed,
        txns,
        preload: true,
    })
}

pub fn run(ctx: &Context) -> ExperimentResult {
    let clients = 8;
    let mut skipped = Vec::new();
    let config = match device(ctx) {
        Ok(c) => c,
        Err(e) => {
            return ExperimentResult::failed("macro", "2. Transactional SSDs, macro", e.to_string())
        }
    };
    // Logical pages: the smallest any design offers on this device is not known before building;
    // size the database on the raw capacity after over-provisioning.
    let logical = (config.geometry.pages() as f64 * (1.0 - config.over_provisioning) * 0.9) as u32;
    let mut workloads = vec![tpcc_workload(ctx, logical)];
    let repeat = if ctx.scale == crate::Scale::Quick {
        10
    } else {
        100
    };
    match trace_workload("ext4-trace", EXT4_TRACE, config.geometry.page_bytes, repeat) {
        Ok(w) => workloads.push(w),
        Err(e) => skipped.push(e.to_string()),
    }
    let mut data = serde_json::Map::new();
    let mut tables = Vec::new();
    let mut figures = Vec::new();
    let mut claims = Vec::new();
    let progress =
        |step: usize| (ctx.progress)("macro", step as u64, (workloads.len() * MODES.len()) as u64);
    // TPS of each mode on the first workload at `clients`, reused by the clients sweep.
    let mut first_tps: Vec<Option<f64>> = Vec::new();
    for (w, wl) in workloads.iter().enumerate() {
        let results: Vec<Option<Outcome>> = MODES
            .iter()
            .enumerate()
            .map(|(m, mode)| {
                let r = run_or_skip(ctx, mode, wl, &config, clients, &mut skipped);
                progress(w * MODES.len() + m + 1);
                r
            })
            .collect();
        tables.push(workload_table(wl, &results, clients, &mut data));
        figures.extend(workload_figures(wl, &results));
        let get = |label: &str| {
            MODES
                .iter()
                .position(|m| m.label == label)
                .and_then(|i| results[i].as_ref())
        };
        claims.extend(workload_claims(&wl.name, &get, &refused_note(&results)));
        if first_tps.is_empty() {
            first_tps = results.iter().map(|r| r.as_ref().map(|o| o.tps)).collect();
        }
    }
    if let Some(wl) = workloads.first() {
        let (table, sweep) = clients_sweep(ctx, wl, &config, (clients, &first_tps), &mut skipped);
        note_one_client(&mut claims, &sweep, clients);
        tables.push(table);
        data.insert(format!("{}/clients_sweep", wl.name), sweep);
    }
    ExperimentResult {
        id: "macro",
        title: "2. Transactional SSDs, macro (Möbius Figs. 9 and 10)".into(),
        description: format!("Each design runs the same seeded transactions from {clients} concurrent clients (see `crates/compare/src/macro_tx.rs` and `tpcc.rs` for the host model and the TPC-C-like mix). Workload `ext4-trace`: the committed trace of ext4 (mkfs + small files, recorded through `mobius serve --trace`), the writes between two flushes forming one transaction, replayed {repeat} times. Device: jasmine geometry{}.", if ctx.scale == crate::Scale::Quick { " with 128 blocks per chip (1 GiB) at quick scale" } else { " (64 GB)" }),
        tables,
        figures,
        claims,
        data: serde_json::Value::Object(data),
        skipped,
        host: device(ctx).ok().map(|c| c.host),
        ran: crate::Ran::default(),
    }
}

/// `mode` on `wl`, or `None` with the reason in `skipped` (design not built, run failed).
fn run_or_skip(
    ctx: &Context,
    mode: &Mode,
    wl: &Workload,
    config: &flash::DeviceConfig,
    clients: usize,
    skipped: &mut Vec<String>,
) -> Option<Outcome> {
    if ctx.design(mode.design).is_none() {
        skipped.push(format!(
            "{}: design '{}' not built",
            mode.label, mode.design
        ));
        return None;
    }
    match run_mode(ctx, mode, wl, config, clients) {
        Ok(o) => Some(o),
        Err(e) => {
            skipped.push(format!("{} on {}: {e}", mode.label, wl.name));
            None
        }
    }
}

/// Atomic-Write's TPS among `results` (the normaliser of Fig. 9).
fn atomic_write_tps(results: &[Option<Outcome>]) -> Option<f64> {
    MODES
        .iter()
        .position(|m| m.design == "atomic-write")
        .and_then(|i| results[i].as_ref())
        .map(|o| o.tps)
}

/// One workload's table (every mode that ran), its outcomes also into `data`.
fn workload_table(
    wl: &Workload,
    results: &[Option<Outcome>],
    clients: usize,
    data: &mut serde_json::Map<String, serde_json::Value>,
) -> Table {
    let aw = atomic_write_tps(results);
    let mut rows = Vec::new();
    for (m, r) in MODES.iter().zip(results) {
        let Some(o) = r else { continue };
        let norm = aw.map_or(f64::NAN, |a| o.tps / a);
        rows.push(vec![
            m.label.to_string(),
            fmt(o.tps),
            fmt(norm),
            fmt(o.bandwidth_mb_s),
            fmt(o.write_amplification),
            o.journal_fallbacks.to_string(),
            o.errors.to_string(),
        ]);
        data.insert(
            format!("{}/{}", wl.name, m.label),
            serde_json::to_value(o).unwrap_or_default(),
        );
    }
    Table {
        caption: format!(
            "{}: {} transactions, {clients} clients, simulated time",
            wl.name,
            wl.txns.len()
        ),
        header: [
            "mode",
            "TPS",
            "TPS / Atomic-Write",
            "bandwidth MB/s",
            "write amplification",
            "host-journal fallbacks",
            "refused",
        ]
        .map(String::from)
        .to_vec(),
        rows,
    }
}

/// Fig. 9 (TPS over Atomic-Write's) and Fig. 10 (write amplification) for one workload.
fn workload_figures(wl: &Workload, results: &[Option<Outcome>]) -> [Figure; 2] {
    let aw = atomic_write_tps(results);
    let present: Vec<(usize, &Outcome)> = results
        .iter()
        .enumerate()
        .filter_map(|(i, r)| r.as_ref().map(|o| (i, o)))
        .collect();
    let series: Vec<String> = present
        .iter()
        .map(|(i, _)| MODES[*i].label.to_string())
        .collect();
    let chart = |title: String, y_label: &str, value: &dyn Fn(&Outcome) -> f64| BarChart {
        title,
        y_label: y_label.into(),
        categories: vec![wl.name.clone()],
        series: series.clone(),
        values: present.iter().map(|(_, o)| vec![value(o)]).collect(),
    };
    [
        Figure {
            file: format!("fig9_tps_{}.svg", wl.name),
            caption: format!(
                "Möbius Fig. 9 — TPS normalised to Atomic-Write, {}",
                wl.name
            ),
            svg: chart(
                format!("TPS / Atomic-Write ({})", wl.name),
                "normalised TPS",
                &|o| aw.map_or(f64::NAN, |a| o.tps / a),
            )
            .to_svg(),
        },
        Figure {
            file: format!("fig10_wa_{}.svg", wl.name),
            caption: format!("Möbius Fig. 10 — write amplification, {}", wl.name),
            svg: chart(
                format!("Write amplification ({})", wl.name),
                "flash programs / host pages",
                &|o| o.write_amplification,
            )
            .to_svg(),
        },
    ]
}

/// The DBT-2 claim's note gets the one-client ratios from the clients sweep.
fn note_one_client(claims: &mut [Claim], sweep: &serde_json::Value, clients: usize) {
    let one = |label: &str| {
        let t = &sweep["tps"];
        t[label][0].as_f64().unwrap_or(f64::NAN) / t["Atomic-Write"][0].as_f64().unwrap_or(f64::NAN)
    };
    if let Some(c) = claims.iter_mut().find(|c| c.source.contains("DBT-2")) {
        c.note.push_str(&format!(
            " Graded at {clients} clients (fixed before measuring). Atomic-Write takes one transaction at a time, so every other design's lead grows with the host's concurrency, which the paper does not state for DBT-2: with one client A-SWRITE / Atomic-Write is {} and S-SWRITE / Atomic-Write {} (table of TPS against clients below).",
            fmt(one("Möbius A-SWRITE")),
            fmt(one("Möbius S-SWRITE"))
        ));
    }
}

/// Concurrent host clients the TPS of [`clients_sweep`] is measured at.
pub const CLIENT_COUNTS: [usize; 4] = [1, 2, 4, 8];

/// TPS of every mode on `wl` against the number of concurrent clients, normalised to
/// Atomic-Write at the same count. `measured` is the client count the experiment already ran
/// and its TPS per mode (in [`MODES`] order), which is not run again. Atomic-Write takes one transaction at a time (Möbius §II), so
/// the others' lead grows with concurrency; the paper does not state DBT-2's.
fn clients_sweep(
    ctx: &Context,
    wl: &Workload,
    config: &flash::DeviceConfig,
    measured: (usize, &[Option<f64>]),
    skipped: &mut Vec<String>,
) -> (Table, serde_json::Value) {
    let built: Vec<(usize, &Mode)> = MODES
        .iter()
        .enumerate()
        .filter(|(_, m)| ctx.design(m.design).is_some())
        .collect();
    let mut tps = vec![vec![f64::NAN; CLIENT_COUNTS.len()]; built.len()];
    for (k, &clients) in CLIENT_COUNTS.iter().enumerate() {
        for (i, &(m, mode)) in built.iter().enumerate() {
            if clients == measured.0 {
                tps[i][k] = measured.1.get(m).copied().flatten().unwrap_or(f64::NAN);
                continue;
            }
            match run_mode(ctx, mode, wl, config, clients) {
                Ok(o) => tps[i][k] = o.tps,
                Err(e) => skipped.push(format!("{} with {clients} clients: {e}", mode.label)),
            }
        }
    }
    let aw = built.iter().position(|(_, m)| m.design == "atomic-write");
    let norm = |i: usize, k: usize| aw.map_or(f64::NAN, |a| tps[i][k] / tps[a][k]);
    let rows = built
        .iter()
        .enumerate()
        .map(|(i, (_, m))| {
            std::iter::once(m.label.to_string())
                .chain(
                    (0..CLIENT_COUNTS.len())
                        .map(|k| format!("{} ({}×)", fmt(tps[i][k]), fmt(norm(i, k)))),
                )
                .collect()
        })
        .collect();
    let data = serde_json::json!({
        "clients": CLIENT_COUNTS,
        "tps": built.iter().enumerate().map(|(i, (_, m))| (m.label.to_string(), serde_json::json!(tps[i]))).collect::<serde_json::Map<_, _>>(),
    });
    let table = Table {
        caption: format!(
            "{}: TPS (and TPS / Atomic-Write) against concurrent clients",
            wl.name
        ),
        header: std::iter::once("mode".to_string())
            .chain(
                CLIENT_COUNTS
                    .iter()
                    .map(|c| format!("{c} client{}", if *c == 1 { "" } else { "s" })),
            )
            .collect(),
        rows,
    };
    (table, data)
}

/// The transactions each design refused (committed through the host journal, or not run),
/// for the claims' notes.
fn refused_note(results: &[Option<Outcome>]) -> String {
    let refused: Vec<String> = MODES
        .iter()
        .zip(results)
        .filter_map(|(m, r)| {
            r.as_ref()
                .filter(|o| o.errors + o.journal_fallbacks > 0)
                .map(|o| {
                    format!(
                        "{} {} through the host journal, {} not run",
                        m.label, o.journal_fallbacks, o.errors
                    )
                })
        })
        .collect();
    if refused.is_empty() {
        "none".to_string()
    } else {
        refused.join(", ")
    }
}

/// The paper's Fig. 9 and 10 claims graded on one workload's outcomes (`get(label)`).
///
/// Tolerances: the paper reports A-SWRITE "at most 67 %" above Atomic-Write on DBT-2 and S-SWRITE
/// "similar" to it; we grade A-SWRITE / Atomic-Write TPS in 1.3 … 1.92 (the paper's +67 % with
/// 15 % either side, and at least +30 %) and S-SWRITE / Atomic-Write within ± 15 % on the
/// TPC-C-like mix; on the file-system trace (the paper's Filebench) Atomic-Write must beat
/// S-SWRITE ("because transactions are small"). Fig. 10: Möbius's write amplification no higher
/// than Atomic-Write's and below LightTx's.
pub(crate) fn workload_claims<'a>(
    workload: &str,
    get: &dyn Fn(&str) -> Option<&'a Outcome>,
    refused: &str,
) -> Vec<Claim> {
    let ratio = |a: &str, b: &str, f: fn(&Outcome) -> f64| match (get(a), get(b)) {
        (Some(x), Some(y)) => f(x) / f(y),
        _ => f64::NAN,
    };
    let tps = |o: &Outcome| o.tps;
    let wa = |o: &Outcome| o.write_amplification;
    let a_aw = ratio("Möbius A-SWRITE", "Atomic-Write", tps);
    let s_aw = ratio("Möbius S-SWRITE", "Atomic-Write", tps);
    let mut tps_claim = if workload == "ext4-trace" {
        Claim::new(
            "Möbius §V-C, Fig. 9 (Filebench)",
            "in filebench tests, Atomic-Write outperforms S-SWRITE because transactions are small",
        )
        .check(Check::grade(
            format!("S-SWRITE / Atomic-Write TPS ({workload})"),
            s_aw,
            Tolerance::Below { bound: 1.0 },
        ))
        .check(Check::grade(
            format!("A-SWRITE / Atomic-Write TPS ({workload})"),
            a_aw,
            Tolerance::AtLeast { min: 1.0 },
        ))
    } else {
        Claim::new("Möbius §V-C, Fig. 9 (DBT-2)", "Möbius can at most 67 % outperform Atomic-Write using A-SWRITE; S-SWRITE provides similar throughput to Atomic-Write")
            .check(Check::grade(format!("A-SWRITE / Atomic-Write TPS ({workload})"), a_aw, Tolerance::Between { min: 1.3, max: 1.67 * 1.15 }))
            .check(Check::grade(format!("S-SWRITE / Atomic-Write TPS ({workload})"), s_aw, Tolerance::Within { target: 1.0, rel: 0.15 }))
    };
    tps_claim = tps_claim.note(if workload == "ext4-trace" {
        format!("The ext4 trace (mkfs + small files; each journal commit's writes = one transaction) stands in for Filebench on the paper's revised ext3. Transactions a design refused: {refused}.")
    } else {
        format!("Our stand-in for DBT-2 is the documented TPC-C-like page-level generator, not MySQL. Transactions a design refused: {refused}.")
    });
    let wa_claim = Claim::new("Möbius §V-C, Fig. 10", "Möbius does not enlarge write amplification compared with the other methods, and is better than LightTx")
        .check(Check::grade(format!("Möbius S-SWRITE / Atomic-Write WA ({workload})"), ratio("Möbius S-SWRITE", "Atomic-Write", wa), Tolerance::AtMost { max: 1.0 }))
        .check(Check::grade(format!("Möbius S-SWRITE / LightTx WA ({workload})"), ratio("Möbius S-SWRITE", "LightTx", wa), Tolerance::Below { bound: 1.0 }))
        .note("The paper measured on 8 KB-page flash; we use the 4 KB jasmine preset for every design.");
    vec![tps_claim, wa_claim]
}

#[cfg(test)]
mod claim_tests {
    use super::*;
    use crate::claims::Verdict;

    fn outcome(tps: f64, wa: f64) -> Outcome {
        Outcome {
            tps,
            write_amplification: wa,
            ..Outcome::default()
        }
    }

    fn graded(workload: &str, rows: &[(&str, f64, f64)]) -> Vec<Verdict> {
        let outs: Vec<(String, Outcome)> = rows
            .iter()
            .map(|(l, t, w)| (l.to_string(), outcome(*t, *w)))
            .collect();
        let get = |label: &str| outs.iter().find(|(l, _)| l == label).map(|(_, o)| o);
        workload_claims(workload, &get, "none")
            .iter()
            .map(|c| c.verdict())
            .collect()
    }

    const PAPER: [(&str, f64, f64); 4] = [
        ("Möbius A-SWRITE", 160.0, 2.0),
        ("Möbius S-SWRITE", 105.0, 2.0),
        ("Atomic-Write", 100.0, 2.2),
        ("LightTx", 90.0, 2.5),
    ];

    #[test]
    fn paper_like_numbers_pass() {
        assert_eq!(graded("tpcc", &PAPER), vec![Verdict::Pass, Verdict::Pass]);
    }

    #[test]
    fn numbers_that_contradict_the_paper_fail() {
        let mut too_good = PAPER;
        too_good[0].1 = 260.0; // +160 % is not "at most +67 %"
        assert_eq!(graded("tpcc", &too_good)[0], Verdict::Fail);
        let mut slow_sync = PAPER;
        slow_sync[1].1 = 60.0;
        assert_eq!(graded("tpcc", &slow_sync)[0], Verdict::Fail);
        let mut wa = PAPER;
        wa[1].2 = 3.0; // Möbius above LightTx
        assert_eq!(graded("tpcc", &wa)[1], Verdict::Fail);
        // Filebench: S-SWRITE beating Atomic-Write contradicts the paper.
        assert_eq!(graded("ext4-trace", &PAPER)[0], Verdict::Fail);
    }

    #[test]
    fn a_missing_design_is_not_reproduced() {
        assert_eq!(graded("tpcc", &PAPER[..2]), vec![Verdict::NotReproduced; 2]);
    }
}
