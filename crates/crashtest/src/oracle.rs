//! The oracle: what may a logical page hold after a power cut at instant T, given the host log?
//!
//! It never trusts the design's account of what it recovered: visibility is inferred from the
//! content tags read back (each names the page write that produced it). Rules per promise
//! (docs/crashtest.md states them in full):
//! - every page: its content is a write *to that page*, by a request that succeeded and arrived by
//!   T, or the page was never written; never garbage, never an ECC error;
//! - durable-writes: a page shows its last write acknowledged by T, or a later one;
//! - flush-only: a page shows its last write that arrived before a flush acknowledged by T, or a
//!   later one;
//! - atomic-transactions: units are transactions (SWRITE; a DWRITE chain by uuid) and single pages
//!   of plain writes. With P the units seen on any page plus the units that must be there (durable
//!   by T), each page shows the latest unit of P that writes it (all-or-nothing, durability, and no
//!   older version resurfacing); a unit seen must have been able to commit (not aborted, chain
//!   finished, no error); and a transaction seen whose page was also written by an earlier
//!   transaction requires that earlier one too, unless it was aborted, failed or never finished;
//! - ordered: the image equals the state after a prefix of the write requests in arrival order
//!   (each request all-or-nothing), and that prefix covers every write that arrived before a flush
//!   acknowledged by T;
//! - trims (every promise): a trimmed page reads as never written or keeps its data (a trim may be
//!   forgotten by a power cut), so a trim never makes a write mandatory; a trim of the page that
//!   arrived by T after the write a promise requires lets the page read as never written instead.

use flash::{ContentTag, Lpn};
use ftl::{DwriteFlag, PageOutcome, Promise, TxUuid};
use rustc_hash::{FxHashMap, FxHashSet};
use workload::{HostLog, HostOp, HostRecord};

mod judging;
pub use judging::Judging;

/// What one logical page read back as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Seen {
    Unwritten,
    Write(u64),
    Foreign(ContentTag),
    Garbage,
    Uncorrectable,
}

impl Seen {
    pub fn of(lpn: u32, outcome: &PageOutcome) -> Seen {
        match outcome {
            PageOutcome::Unwritten => Seen::Unwritten,
            PageOutcome::Uncorrectable => Seen::Uncorrectable,
            PageOutcome::Data(c) => match c.tag() {
                Some(t) if t.lpn == lpn => Seen::Write(t.write),
                Some(t) => Seen::Foreign(t),
                None => Seen::Garbage,
            },
        }
    }
}

/// Versions of logical pages the media lost: a copy of each read uncorrectable (the media
/// model, [`crate::media`]). A page that reads as an error is accepted where the promise would
/// accept one of its lost versions in its place, and the oracle judges the rest of the image as
/// if it showed that version; an error anywhere else is a violation.
///
/// A checker that decodes its own page images (the NBD campaign's sectors) may also know that a
/// lost copy held a page as never written (zeros): an error there may then stand for "never
/// written" ([`Lost::with_unwritten`]; the version it stood for is [`Lost::UNWRITTEN`]).
#[derive(Clone, Debug, Default)]
pub struct Lost {
    per_lpn: FxHashMap<u32, Vec<u64>>,
    unwritten: FxHashSet<u32>,
}

impl Lost {
    /// What an error stood for where a lost copy held its page as never written.
    pub const UNWRITTEN: u64 = u64::MAX;

    /// The lost versions `(lpn, write)`.
    pub fn new(versions: impl IntoIterator<Item = (u32, u64)>) -> Lost {
        let mut per_lpn: FxHashMap<u32, Vec<u64>> = FxHashMap::default();
        for (lpn, w) in versions {
            per_lpn.entry(lpn).or_default().push(w);
        }
        for ws in per_lpn.values_mut() {
            ws.sort_unstable();
            ws.dedup();
        }
        Lost {
            per_lpn,
            unwritten: FxHashSet::default(),
        }
    }

    /// These losses, and the pages `lpns` a lost copy held as never written.
    pub fn with_unwritten(mut self, lpns: impl IntoIterator<Item = u32>) -> Lost {
        self.unwritten.extend(lpns);
        self
    }

    /// Whether the media lost nothing.
    pub fn is_empty(&self) -> bool {
        self.per_lpn.is_empty() && self.unwritten.is_empty()
    }

    /// Lost versions of `lpn`, oldest first.
    pub fn of(&self, lpn: usize) -> &[u64] {
        self.per_lpn
            .get(&(lpn as u32))
            .map_or(&[], |v| v.as_slice())
    }

    /// Whether the media lost version `w` of `lpn`.
    pub fn has(&self, lpn: usize, w: u64) -> bool {
        self.of(lpn).contains(&w)
    }

    /// Whether a lost copy held `lpn` as never written.
    pub fn held_unwritten(&self, lpn: usize) -> bool {
        self.unwritten.contains(&(lpn as u32))
    }

    /// What an error at `lpn` stands for where the promise expects `expected` (a write, or never
    /// written): that version if the media lost it ([`Lost::UNWRITTEN`] for never written).
    pub fn stands_for(&self, lpn: usize, expected: Option<u64>) -> Option<u64> {
        match expected {
            Some(e) => self.has(lpn, e).then_some(e),
            None => self.held_unwritten(lpn).then_some(Self::UNWRITTEN),
        }
    }
}

/// The rules an image broke: (the page, if one, and what).
pub type Judged = Vec<(Option<Lpn>, String)>;

/// A unit of atomicity.
/// Why a unit may not be visible after a crash at a given instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
enum NotCommittable {
    #[error("the log names no such write")]
    UnknownWrite,
    #[error("it arrived after the crash")]
    ArrivedAfterCrash,
    #[error("the host's ABORT of {0} was acknowledged before the crash")]
    AbortAcknowledged(TxUuid),
    #[error("its REAR had not arrived by the crash")]
    RearNotArrived,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Unit {
    /// One page of a plain write request (write number).
    Page(u64),
    /// A static transaction (record index).
    Static(usize),
    /// A dynamic transaction (uuid).
    Dynamic(u64),
}

struct DynTx {
    /// Record of the REAR/Single page, if it succeeded.
    rear: Option<usize>,
    failed: bool,
}

/// No record, unit or position: an empty entry of [`WriteFacts`].
const NONE: u32 = u32::MAX;

/// What the model knows of one write number, found by indexing instead of a search (a search
/// of the host log per page and per unit was four fifths of a campaign's time).
#[derive(Clone, Copy)]
struct WriteFacts {
    /// Index of the request that wrote it ([`NONE`]: none did).
    record: u32,
    /// Its unit of atomicity, an index into [`Model::units`] ([`NONE`]: no request wrote it).
    unit: u32,
    /// The page it wrote and its place in that page's writes ([`NONE`]: its request failed).
    lpn: u32,
    pos: u32,
}

/// Lists of (page, position in that page's writes) by item: item `i` has
/// `entries[start[i]..start[i + 1]]`.
#[derive(Default)]
struct PagesOf {
    start: Vec<u32>,
    entries: Vec<(u32, u32)>,
}

impl PagesOf {
    /// From (item, page, position) triples, `items` items.
    fn new(mut triples: Vec<(u32, u32, u32)>, items: usize) -> PagesOf {
        triples.sort_unstable();
        let mut start = Vec::with_capacity(items + 1);
        let mut k = 0;
        for item in 0..items as u32 {
            start.push(k as u32);
            while k < triples.len() && triples[k].0 == item {
                k += 1;
            }
        }
        start.push(k as u32);
        let entries = triples.into_iter().map(|(_, l, p)| (l, p)).collect();
        PagesOf { start, entries }
    }
    fn of(&self, item: usize) -> &[(u32, u32)] {
        &self.entries[self.start[item] as usize..self.start[item + 1] as usize]
    }
}

/// Every page's writes by requests that succeeded, in arrival order, in one array (page `lpn`'s
/// at `start[lpn]..start[lpn + 1]`), each with its unit and its request beside it: an image is
/// judged page by page, and this keeps that walk on consecutive memory.
#[derive(Default)]
struct PageWrites {
    start: Vec<u32>,
    writes: Vec<u64>,
    units: Vec<u32>,
    records: Vec<u32>,
}

impl PageWrites {
    fn range(&self, lpn: usize) -> std::ops::Range<usize> {
        self.start[lpn] as usize..self.start[lpn + 1] as usize
    }
    /// The write numbers of page `lpn`.
    fn of(&self, lpn: usize) -> &[u64] {
        &self.writes[self.range(lpn)]
    }
    fn units(&self, lpn: usize) -> &[u32] {
        &self.units[self.range(lpn)]
    }
    fn records(&self, lpn: usize) -> &[u32] {
        &self.records[self.range(lpn)]
    }
}

/// The host log, indexed for judging many crash images.
pub struct Model<'a> {
    log: &'a HostLog,
    /// Per LPN: write numbers in arrival order (with their units and requests).
    writes: PageWrites,
    /// Per LPN: record indices of the trims the device accepted, in arrival order.
    trims: Vec<Vec<usize>>,
    /// Per uuid: first abort request the device accepted (record index).
    aborts: FxHashMap<u64, usize>,
    dynamic: FxHashMap<u64, DynTx>,
    /// Acknowledged flushes: (record index, ack instant), in arrival order.
    flushes: Vec<(usize, u64)>,
    /// Per record: from when its writes must survive under durable-writes — `durable_ns` when the
    /// device gave one (async SWRITE is durable after its ack), the REAR's for DWRITE HEAD/BODY
    /// pages (acknowledged at once, durable only with their transaction), else the ack.
    durable_at: Vec<Option<u64>>,
    /// Per write number, up to the last one any request wrote.
    facts: Vec<WriteFacts>,
    /// Every unit of atomicity a request wrote, in the units' order (index order is unit order).
    units: Vec<Unit>,
    /// Per unit: (page, write) of every page a transaction wrote (empty for plain pages).
    unit_pages: Vec<Vec<(Lpn, u64)>>,
    /// Per unit and per record: the entries of `writes` that are theirs.
    unit_writes: PagesOf,
    record_writes: PagesOf,
    /// The index of the first unit that is a transaction (the units of single pages come
    /// first in the units' order).
    first_transaction: usize,
    /// Per record: its arrival.
    arrival: Vec<u64>,
    /// Per unit: from when it must be visible after a cut, and from when no longer (its
    /// accepted ABORT arrived): `durable(u, t)` is `from <= t < until`.
    durable_window: Vec<(Option<u64>, Option<u64>)>,
    /// Per record index `f`: the last record before it that succeeded and wrote pages.
    last_writing_before: Vec<Option<usize>>,
}

impl<'a> Model<'a> {
    pub fn new(log: &'a HostLog) -> Model<'a> {
        let mut writes = vec![Vec::new(); log.logical_pages as usize];
        let mut trims = vec![Vec::new(); log.logical_pages as usize];
        let mut aborts = FxHashMap::default();
        let mut dynamic: FxHashMap<u64, DynTx> = FxHashMap::default();
        let mut flushes = Vec::new();
        for (i, r) in log.records.iter().enumerate() {
            debug_assert_eq!(r.index, i as u64, "records are numbered by position");
            if r.succeeded() {
                for (lpn, w) in r.writes() {
                    writes[lpn.0 as usize].push(w);
                }
            }
            match &r.op {
                HostOp::Trim { start, count } if r.succeeded() => {
                    let end = (start.0 + count).min(log.logical_pages);
                    for lpn in start.0..end {
                        trims[lpn as usize].push(i);
                    }
                }
                // A refused ABORT (e.g. AlreadyCommitted) exempts nothing.
                HostOp::Abort { uuid } if r.succeeded() => {
                    aborts.entry(uuid.0).or_insert(i);
                }
                HostOp::Flush => {
                    if let Some(ack) = r.ack_ns {
                        flushes.push((i, ack));
                    }
                }
                HostOp::DWrite { uuid, flag, .. } => {
                    let d = dynamic.entry(uuid.0).or_insert(DynTx {
                        rear: None,
                        failed: false,
                    });
                    if !r.succeeded() {
                        d.failed = true;
                    } else if matches!(flag, DwriteFlag::Rear | DwriteFlag::Single) {
                        d.rear = Some(i);
                    }
                }
                _ => {}
            }
        }
        let durable_at = log
            .records
            .iter()
            .map(|r| {
                if !r.succeeded() {
                    return None;
                }
                match &r.op {
                    HostOp::DWrite { uuid, .. } => dynamic
                        .get(&uuid.0)
                        .and_then(|d| d.rear)
                        .and_then(|i| log.records[i].durable_ns.or(log.records[i].ack_ns)),
                    _ => r.durable_ns.or(r.ack_ns),
                }
            })
            .collect();
        let mut model = Model {
            log,
            durable_at,
            writes: PageWrites::default(),
            trims,
            aborts,
            dynamic,
            flushes,
            facts: Vec::new(),
            units: Vec::new(),
            unit_pages: Vec::new(),
            unit_writes: PagesOf::default(),
            record_writes: PagesOf::default(),
            first_transaction: 0,
            arrival: log.records.iter().map(|r| r.arrival_ns).collect(),
            durable_window: Vec::new(),
            last_writing_before: Vec::new(),
        };
        model.index_writes();
        model.index_pages(writes);
        model
    }

    /// Fills the per-write facts (record and unit; the units numbered in their order) and the
    /// last writing request before each record.
    fn index_writes(&mut self) {
        let log = self.log;
        let end = log
            .records
            .iter()
            .map(|r| r.first_write + r.op.written_pages())
            .max()
            .unwrap_or(0);
        // The search the facts replace, once per write: a write belongs to the request
        // `record_of_write` finds, whatever the log's numbering.
        let found: Vec<Option<(u32, Unit)>> = (0..end)
            .map(|w| {
                let r = log.record_of_write(w)?;
                let unit = match &r.op {
                    HostOp::SWrite { .. } => Unit::Static(r.index as usize),
                    HostOp::DWrite { uuid, .. } => Unit::Dynamic(uuid.0),
                    _ => Unit::Page(w),
                };
                Some((r.index as u32, unit))
            })
            .collect();
        let mut units: Vec<Unit> = found.iter().flatten().map(|&(_, u)| u).collect();
        units.sort_unstable();
        units.dedup();
        self.facts = found
            .into_iter()
            .map(|f| WriteFacts {
                record: f.map_or(NONE, |(r, _)| r),
                unit: f.map_or(NONE, |(_, u)| {
                    units.binary_search(&u).expect("every unit is listed") as u32
                }),
                lpn: NONE,
                pos: NONE,
            })
            .collect();
        self.durable_window = units.iter().map(|&u| self.window(u)).collect();
        self.first_transaction = units.partition_point(|u| matches!(u, Unit::Page(_)));
        self.units = units;
        self.last_writing_before = std::iter::once(None)
            .chain(log.records.iter().enumerate().scan(None, |last, (i, r)| {
                if r.succeeded() && r.op.written_pages() > 0 {
                    *last = Some(i);
                }
                Some(*last)
            }))
            .collect();
    }

    /// Lays out every page's `writes` in one array with their units and records, fills each
    /// write's page and position in the facts, the entries of each unit and record, and what
    /// each transaction wrote (for [`Model::proven_absent`]).
    fn index_pages(&mut self, writes: Vec<Vec<u64>>) {
        let mut by_unit = Vec::new();
        let mut by_record = Vec::new();
        let mut pages = PageWrites::default();
        for (lpn, ws) in writes.into_iter().enumerate() {
            pages.start.push(pages.writes.len() as u32);
            for (pos, w) in ws.into_iter().enumerate() {
                let f = &mut self.facts[w as usize];
                (f.lpn, f.pos) = (lpn as u32, pos as u32);
                by_unit.push((f.unit, lpn as u32, pos as u32));
                by_record.push((f.record, lpn as u32, pos as u32));
                pages.writes.push(w);
                pages.units.push(f.unit);
                pages.records.push(f.record);
            }
        }
        pages.start.push(pages.writes.len() as u32);
        self.writes = pages;
        self.unit_writes = PagesOf::new(by_unit, self.units.len());
        self.record_writes = PagesOf::new(by_record, self.log.records.len());
        self.unit_pages = vec![Vec::new(); self.units.len()];
        for (i, r) in self.log.records.iter().enumerate() {
            let unit = match &r.op {
                HostOp::SWrite { .. } => Unit::Static(i),
                HostOp::DWrite { uuid, .. } if r.succeeded() => Unit::Dynamic(uuid.0),
                _ => continue,
            };
            if let Ok(u) = self.units.binary_search(&unit) {
                self.unit_pages[u].extend(r.writes());
            }
        }
    }

    /// When `u` must be visible after a cut: from its acknowledgement (a page of a plain
    /// write), or from when it was done (a transaction: its end, or its REAR's, succeeded and
    /// durable), until the host's accepted ABORT of it arrived (an abort in flight at the cut may
    /// or may not have taken effect: a device may make it durable before acknowledging it).
    fn window(&self, u: Unit) -> (Option<u64>, Option<u64>) {
        let done = |r: &HostRecord| r.succeeded().then(|| r.durable_ns.or(r.ack_ns)).flatten();
        let abort = |uuid: u64| {
            self.aborts
                .get(&uuid)
                .map(|&i| self.log.records[i].arrival_ns)
        };
        match u {
            Unit::Page(w) => (self.log.record_of_write(w).and_then(|r| r.ack_ns), None),
            Unit::Static(i) => {
                let r = &self.log.records[i];
                let HostOp::SWrite { uuid, .. } = &r.op else {
                    unreachable!()
                };
                (done(r), abort(uuid.0))
            }
            Unit::Dynamic(uuid) => {
                let rear = self.dynamic[&uuid].rear;
                (rear.and_then(|i| done(&self.log.records[i])), abort(uuid))
            }
        }
    }

    pub fn logical_pages(&self) -> u32 {
        self.log.logical_pages
    }

    fn facts(&self, write: u64) -> Option<&WriteFacts> {
        self.facts.get(usize::try_from(write).ok()?)
    }

    /// Whether write `write` is one the host issued, by a request that arrived by `t`.
    pub fn arrived_by(&self, write: u64, t: u64) -> bool {
        self.record(write).is_some_and(|(_, r)| r.arrival_ns <= t)
    }

    /// Did the media lose a version of `lpn` that the host wrote there by `t`, or a copy that
    /// held it as never written?
    fn may_be_lost(&self, lpn: usize, lost: &Lost, t: u64) -> bool {
        lost.held_unwritten(lpn)
            || lost
                .of(lpn)
                .iter()
                .any(|&w| self.position(lpn, w).is_some() && self.arrived_by(w, t))
    }

    fn record(&self, write: u64) -> Option<(usize, &HostRecord)> {
        let i = self.facts(write)?.record;
        (i != NONE).then(|| (i as usize, &self.log.records[i as usize]))
    }

    /// The index of the unit `write` belongs to.
    fn unit_index(&self, write: u64) -> Option<usize> {
        let u = self.facts(write)?.unit;
        (u != NONE).then_some(u as usize)
    }

    fn unit_of(&self, write: u64) -> Option<Unit> {
        self.unit_index(write).map(|u| self.units[u])
    }

    /// Where `write` stands among the writes of `lpn` (`None`: it did not write `lpn`, or its
    /// request failed).
    fn position(&self, lpn: usize, write: u64) -> Option<usize> {
        self.facts(write)
            .filter(|f| f.pos != NONE && f.lpn as usize == lpn)
            .map(|f| f.pos as usize)
    }

    fn abort_arrived(&self, uuid: u64, t: u64) -> bool {
        self.aborts
            .get(&uuid)
            .is_some_and(|&i| self.log.records[i].arrival_ns <= t)
    }
    fn abort_acked(&self, uuid: u64, t: u64) -> bool {
        self.aborts
            .get(&uuid)
            .is_some_and(|&i| self.log.records[i].ack_ns.is_some_and(|a| a <= t))
    }

    /// May `u` be visible after a crash at `t`? `Err` says why not.
    fn committable(&self, u: Unit, t: u64) -> Result<(), NotCommittable> {
        match u {
            Unit::Page(w) => {
                let (_, r) = self.record(w).ok_or(NotCommittable::UnknownWrite)?;
                (r.arrival_ns <= t)
                    .then_some(())
                    .ok_or(NotCommittable::ArrivedAfterCrash)
            }
            Unit::Static(i) => {
                let r = &self.log.records[i];
                let HostOp::SWrite { uuid, .. } = &r.op else {
                    unreachable!()
                };
                if r.arrival_ns > t {
                    Err(NotCommittable::ArrivedAfterCrash)
                } else if self.abort_acked(uuid.0, t) {
                    Err(NotCommittable::AbortAcknowledged(TxUuid(uuid.0)))
                } else {
                    Ok(())
                }
            }
            Unit::Dynamic(uuid) => {
                let d = &self.dynamic[&uuid];
                match d.rear {
                    _ if self.abort_acked(uuid, t) => {
                        Err(NotCommittable::AbortAcknowledged(TxUuid(uuid)))
                    }
                    Some(i) if self.log.records[i].arrival_ns <= t => Ok(()),
                    _ => Err(NotCommittable::RearNotArrived),
                }
            }
        }
    }

    /// Must unit `u` (by index) be visible after a crash at `t`? ([`Model::window`]).
    fn durable(&self, u: usize, t: u64) -> bool {
        let (from, until) = self.durable_window[u];
        from.is_some_and(|f| f <= t) && until.is_none_or(|a| t < a)
    }

    /// Was `u` aborted, failed, or unfinished at `t` (so later transactions may survive without it)?
    fn exempt(&self, u: Unit, t: u64) -> bool {
        match u {
            Unit::Page(_) => true,
            Unit::Static(i) => {
                let HostOp::SWrite { uuid, .. } = &self.log.records[i].op else {
                    unreachable!()
                };
                self.abort_arrived(uuid.0, t)
            }
            Unit::Dynamic(uuid) => {
                let d = &self.dynamic[&uuid];
                d.failed
                    || self.abort_arrived(uuid, t)
                    || d.rear.is_none_or(|i| self.log.records[i].arrival_ns > t)
            }
        }
    }

    /// Record index of the latest flush acknowledged by `t`: every request before it is covered
    /// (a flush covers every request the host sent before it, whatever their arrival instants).
    fn flushed_before(&self, t: u64) -> Option<usize> {
        self.flushes
            .iter()
            .filter(|(_, ack)| *ack <= t)
            .map(|(i, _)| *i)
            .max()
    }

    /// Did a trim of `lpn` arrive by `t`, after write `w` (after nothing: any trim)? Then the
    /// page may read as never written even where the promise requires `w`.
    fn trimmed_after(&self, lpn: usize, w: Option<u64>, t: u64) -> bool {
        let after = w.and_then(|w| self.record(w)).map(|(i, _)| i);
        self.trims[lpn]
            .iter()
            .any(|&i| after.is_none_or(|a| i > a) && self.log.records[i].arrival_ns <= t)
    }

    /// Does the image show, on some page of unit `u` (by index), a state older than `u`'s write
    /// of it (reading as never written proves nothing where a later trim arrived by `t`)?
    fn proven_absent(&self, u: usize, seen: &[Seen], t: u64) -> bool {
        self.unit_pages[u].iter().any(|&(lpn, w)| {
            let lpn = lpn.0 as usize;
            let mine = self.position(lpn, w);
            match seen[lpn] {
                Seen::Write(x) => match (self.position(lpn, x), mine) {
                    (Some(a), Some(b)) => a < b,
                    _ => false,
                },
                Seen::Unwritten => !self.trimmed_after(lpn, Some(w), t),
                _ => false,
            }
        })
    }

    /// Checks one crash image; returns (lpn, message) for every rule broken. (A campaign judges
    /// its images in time order with one [`Judging`], which keeps what it worked out between
    /// them.)
    pub fn judge(&self, promise: Promise, t: u64, seen: &[Seen]) -> Vec<(Option<Lpn>, String)> {
        self.judging(promise).judge(t, seen)
    }

    /// [`judge`](Self::judge) of an image whose media lost the versions in `lost`: a page that
    /// reads as an error is accepted only where one of its lost versions could stand in its
    /// place ([`Lost`]).
    pub fn judge_with_losses(
        &self,
        promise: Promise,
        t: u64,
        seen: &[Seen],
        lost: &Lost,
    ) -> Judged {
        self.judging(promise).judge_with_losses(t, seen, lost)
    }

    /// [`judge_with_losses`](Self::judge_with_losses), and per page the lost version an error
    /// there was taken to stand for ([`Judging::judge_settling`]).
    pub fn judge_settling(
        &self,
        promise: Promise,
        t: u64,
        seen: &[Seen],
        lost: &Lost,
    ) -> (Judged, Vec<Option<u64>>) {
        self.judging(promise).judge_settling(t, seen, lost)
    }

    /// A judge of images under `promise` that advances what the promise requires from one
    /// crash instant to the next ([`Judging`]).
    pub fn judging(&self, promise: Promise) -> Judging<'_, 'a> {
        Judging::new(self, promise)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ftl::SwriteMode;

    /// A plain write of page `lpn` alone.
    fn write_one(lpn: u32) -> HostOp {
        HostOp::Write {
            start: Lpn(lpn),
            count: 1,
        }
    }

    fn rec(
        op: HostOp,
        arrival: u64,
        ack: Option<u64>,
        durable: Option<u64>,
        first_write: u64,
    ) -> HostRecord {
        HostRecord {
            index: 0,
            op,
            arrival_ns: arrival,
            ack_ns: ack,
            durable_ns: durable,
            error: None,
            first_write,
        }
    }

    fn log(records: Vec<HostRecord>, pages: u32) -> HostLog {
        let mut records = records;
        let mut next = 0;
        for (i, r) in records.iter_mut().enumerate() {
            r.index = i as u64;
            r.first_write = next;
            next += r.op.written_pages();
        }
        HostLog {
            design: "test".into(),
            logical_pages: pages,
            records,
            next_write: next,
        }
    }

    fn sw(uuid: u64, lpns: &[u32]) -> HostOp {
        HostOp::SWrite {
            uuid: TxUuid(uuid),
            lpns: lpns.iter().map(|&l| Lpn(l)).collect(),
            mode: SwriteMode::Async,
        }
    }

    use Seen::{Unwritten as U, Write as W};

    /// w0,w1: tx1 {0,1} durable at 10; w2,w3: tx2 {1,2} durable at 40; w4: plain write lpn 3 acked
    /// at 60; w5,w6: dynamic tx3 lpn 4 (HEAD) and 5 (REAR, durable 100); w7: tx4 {6} aborted at 130.
    fn txlog() -> HostLog {
        log(
            vec![
                rec(sw(1, &[0, 1]), 0, Some(5), Some(10), 0),
                rec(sw(2, &[1, 2]), 20, Some(30), Some(40), 0),
                rec(
                    HostOp::Write {
                        start: Lpn(3),
                        count: 1,
                    },
                    50,
                    Some(60),
                    Some(60),
                    0,
                ),
                rec(
                    HostOp::DWrite {
                        uuid: TxUuid(3),
                        lpn: Lpn(4),
                        flag: DwriteFlag::Head,
                    },
                    70,
                    Some(80),
                    None,
                    0,
                ),
                rec(
                    HostOp::DWrite {
                        uuid: TxUuid(3),
                        lpn: Lpn(5),
                        flag: DwriteFlag::Rear,
                    },
                    90,
                    Some(100),
                    Some(100),
                    0,
                ),
                rec(sw(4, &[6]), 110, Some(115), Some(200), 0),
                rec(HostOp::Abort { uuid: TxUuid(4) }, 120, Some(130), None, 0),
            ],
            8,
        )
    }

    fn judge(l: &HostLog, p: Promise, t: u64, seen: &[Seen]) -> usize {
        Model::new(l).judge(p, t, seen).len()
    }

    fn judge_lost(l: &HostLog, p: Promise, t: u64, seen: &[Seen], lost: &[(u32, u64)]) -> usize {
        let lost = Lost::new(lost.iter().copied());
        Model::new(l).judge_with_losses(p, t, seen, &lost).len()
    }

    const E: Seen = Seen::Uncorrectable;

    /// An error stands for a version the media lost, judged as that version: the version the
    /// promise requires (tx2's write of page 1), not an older one; no lost version, no excuse.
    #[test]
    fn an_error_is_accepted_only_in_place_of_a_lost_version_the_promise_allows() {
        let l = txlog();
        let a = Promise::AtomicTransactions;
        let seen = [W(0), E, W(3), U, U, U, U, U];
        assert_eq!(judge_lost(&l, a, 45, &seen, &[(1, 2)]), 0);
        assert!(
            judge_lost(&l, a, 45, &seen, &[(1, 1)]) > 0,
            "an older version lost"
        );
        assert!(judge_lost(&l, a, 45, &seen, &[]) > 0, "nothing lost");
        assert!(judge(&l, a, 45, &seen) > 0);
        // Another page's version lost excuses nothing here.
        assert!(judge_lost(&l, a, 45, &seen, &[(0, 0)]) > 0);
    }

    /// An error may stand for a lost version of a transaction that may be visible; it is then
    /// held to all or nothing like any visible one. A lost version of an aborted transaction
    /// stands for nothing.
    #[test]
    fn a_lost_version_makes_its_transaction_visible_whole_or_not_at_all() {
        let l = txlog();
        let a = Promise::AtomicTransactions;
        // At 35 tx2 may or may not be visible: with its page 2 showing it, page 1's error
        // stands for its lost write; with page 2 never written, it cannot.
        assert_eq!(
            judge_lost(&l, a, 35, &[W(0), E, W(3), U, U, U, U, U], &[(1, 2)]),
            0
        );
        assert!(judge_lost(&l, a, 35, &[W(0), E, U, U, U, U, U, U], &[(1, 2)]) > 0);
        // Page 1's older version lost with tx2 not visible: the error stands for tx1's write.
        assert_eq!(
            judge_lost(&l, a, 35, &[W(0), E, U, U, U, U, U, U], &[(1, 1), (1, 2)]),
            0
        );
        // tx4 was aborted by 130: its lost page-6 version excuses no error.
        assert!(judge_lost(&l, a, 135, &[W(0), W(2), W(3), U, U, U, E, U], &[(6, 7)]) > 0);
    }

    /// Per-page promises: an error where a lost version could be read (the last durable write
    /// or a later one), not where only an older one was lost.
    #[test]
    fn per_page_promises_take_an_error_for_a_lost_durable_or_later_version() {
        let w = write_one;
        let l = log(
            vec![
                rec(w(0), 0, Some(10), None, 0),
                rec(w(0), 15, Some(20), None, 0),
                rec(HostOp::Flush, 21, Some(22), None, 0),
            ],
            2,
        );
        for p in [Promise::DurableWrites, Promise::FlushOnly, Promise::Ordered] {
            assert_eq!(judge_lost(&l, p, 25, &[E, U], &[(0, 1)]), 0, "{p:?}");
            assert!(judge_lost(&l, p, 25, &[E, U], &[(0, 0)]) > 0, "{p:?}");
            assert!(judge_lost(&l, p, 25, &[U, E], &[(0, 1)]) > 0, "{p:?}");
        }
    }

    /// Ordered: an error raises the prefix the other pages prove only as far as the first
    /// request whose version of its page the media lost — not to the newest such request,
    /// which a page showing an older write may exclude (OPTR's NBD second life at 300 days, seed
    /// 116200440708931, was judged broken so); no prefix under which every page stands, no
    /// excuse.
    #[test]
    fn ordered_takes_the_least_prefix_under_which_an_error_stands() {
        let w = write_one;
        // Page 0: write 0 (request 0), write 2 (request 2); page 1: writes 1 and 3.
        let l = log(
            vec![
                rec(w(0), 0, Some(5), None, 0),
                rec(w(1), 10, Some(15), None, 0),
                rec(w(0), 20, Some(25), None, 0),
                rec(w(1), 30, Some(35), None, 0),
            ],
            2,
        );
        let o = Promise::Ordered;
        // Page 0 shows write 0: the prefix ends before request 2, so page 1's error stands for
        // write 1 (request 1), lost; the newest lost version (write 3) would need request 3.
        assert_eq!(judge_lost(&l, o, 40, &[W(0), E], &[(1, 1), (1, 3)]), 0);
        assert!(
            judge_lost(&l, o, 40, &[W(0), E], &[(1, 3)]) > 0,
            "only write 3 lost"
        );
        assert_eq!(judge_lost(&l, o, 40, &[W(2), E], &[(1, 1), (1, 3)]), 0);
        assert!(judge_lost(&l, o, 40, &[W(0), E], &[]) > 0, "nothing lost");
    }

    /// A copy the media lost that held a page as never written (a checker decoding its own
    /// pages knows it) lets an error stand for "never written" where the promise allows it,
    /// and nowhere else.
    #[test]
    fn an_error_may_stand_for_never_written_where_a_lost_copy_held_it_so() {
        let w = write_one;
        let l = log(
            vec![
                rec(w(0), 0, Some(5), None, 0),
                rec(w(1), 10, Some(15), None, 0),
                rec(HostOp::Flush, 20, Some(25), None, 0),
            ],
            2,
        );
        let judge = |p: Promise, t: u64, seen: &[Seen], unwritten: bool| {
            let lost = Lost::new([]).with_unwritten(unwritten.then_some(1));
            Model::new(&l).judge_settling(p, t, seen, &lost)
        };
        for p in [Promise::DurableWrites, Promise::FlushOnly, Promise::Ordered] {
            // Before page 1's write arrived, an error there may stand for never written.
            let (v, stood) = judge(p, 8, &[W(0), E], true);
            assert!(v.is_empty(), "{p:?}: {v:?}");
            assert_eq!(stood[1], Some(Lost::UNWRITTEN));
            assert!(!judge(p, 8, &[W(0), E], false).0.is_empty(), "{p:?}");
            // After the flush, page 1's write must have survived: never written is no excuse.
            assert!(!judge(p, 30, &[W(0), E], true).0.is_empty(), "{p:?}");
        }
    }

    /// An async SWRITE durable at 100 whose accepted ABORT arrived at 50 and is acknowledged at
    /// 300: a cut in between may show it or not (the abort may or may not have taken effect);
    /// after the abort's acknowledgement it must be gone.
    #[test]
    fn an_accepted_abort_in_flight_at_the_cut_may_or_may_not_have_taken_effect() {
        let l = log(
            vec![
                rec(sw(1, &[0, 1]), 0, Some(10), Some(100), 0),
                rec(HostOp::Abort { uuid: TxUuid(1) }, 50, Some(300), None, 0),
            ],
            2,
        );
        let p = Promise::AtomicTransactions;
        assert_eq!(judge(&l, p, 200, &[W(0), W(1)]), 0, "kept");
        assert_eq!(judge(&l, p, 200, &[U, U]), 0, "aborted");
        assert!(judge(&l, p, 200, &[W(0), U]) > 0, "half a transaction");
        assert!(
            judge(&l, p, 400, &[W(0), W(1)]) > 0,
            "survived an acknowledged abort"
        );
        assert_eq!(judge(&l, p, 400, &[U, U]), 0);
        // Without the abort it is durable from 100 on.
        let kept = log(vec![rec(sw(1, &[0, 1]), 0, Some(10), Some(100), 0)], 2);
        assert!(
            judge(&kept, p, 200, &[U, U]) > 0,
            "lost a durable transaction"
        );
    }

    #[test]
    fn atomic_transactions_all_or_nothing_and_durability() {
        let l = txlog();
        let a = Promise::AtomicTransactions;
        assert_eq!(
            judge(&l, a, 35, &[W(0), W(1), U, U, U, U, U, U]),
            0,
            "tx2 not yet durable may be absent"
        );
        assert_eq!(
            judge(&l, a, 35, &[W(0), W(2), W(3), U, U, U, U, U]),
            0,
            "tx2 may be present whole"
        );
        assert!(
            judge(&l, a, 35, &[W(0), W(2), U, U, U, U, U, U]) > 0,
            "tx2 half present"
        );
        assert!(
            judge(&l, a, 35, &[U, W(1), U, U, U, U, U, U]) > 0,
            "tx1 was durable at 10"
        );
        assert!(
            judge(&l, a, 45, &[W(0), W(1), U, U, U, U, U, U]) > 0,
            "tx2 durable at 40 lost"
        );
        assert!(
            judge(&l, a, 45, &[W(0), W(1), W(3), U, U, U, U, U]) > 0,
            "older version resurfaced over tx2"
        );
    }

    #[test]
    fn a_later_transaction_cannot_survive_without_an_earlier_overlapping_one() {
        // tx1 not durable until 100 this time.
        let mut l = txlog();
        l.records[0].durable_ns = Some(100);
        let a = Promise::AtomicTransactions;
        assert!(
            judge(&l, a, 45, &[U, W(2), W(3), U, U, U, U, U]) > 0,
            "tx2 without tx1 (Tx(A)/Tx(B))"
        );
        // Once tx1 is aborted by the host, tx2 may survive alone.
        l.records.push(HostRecord {
            index: 7,
            op: HostOp::Abort { uuid: TxUuid(1) },
            arrival_ns: 15,
            ack_ns: Some(16),
            durable_ns: None,
            error: None,
            first_write: 8,
        });
        assert_eq!(judge(&l, a, 45, &[U, W(2), W(3), U, U, U, U, U]), 0);
    }

    #[test]
    fn dynamic_transactions_and_aborts() {
        let l = txlog();
        let a = Promise::AtomicTransactions;
        let base = [W(0), W(2), W(3), W(4)];
        let with = |rest: [Seen; 4]| -> Vec<Seen> { base.iter().copied().chain(rest).collect() };
        assert!(
            judge(&l, a, 85, &with([W(5), U, U, U])) > 0,
            "HEAD visible before REAR arrived"
        );
        assert_eq!(judge(&l, a, 85, &with([U, U, U, U])), 0);
        assert_eq!(judge(&l, a, 105, &with([W(5), W(6), U, U])), 0);
        assert!(
            judge(&l, a, 105, &with([U, U, U, U])) > 0,
            "dynamic tx durable at 100 lost"
        );
        assert!(
            judge(&l, a, 105, &with([W(5), U, U, U])) > 0,
            "dynamic tx half present"
        );
        assert!(
            judge(&l, a, 135, &with([W(5), W(6), W(7), U])) > 0,
            "aborted tx4 visible"
        );
        assert_eq!(
            judge(&l, a, 125, &with([W(5), W(6), W(7), U])),
            0,
            "abort not yet acknowledged: either way"
        );
    }

    #[test]
    fn foreign_garbage_and_future_data_are_always_violations() {
        let l = txlog();
        for p in Promise::ALL {
            assert!(
                judge(
                    &l,
                    p,
                    45,
                    &[
                        Seen::Foreign(ContentTag { lpn: 1, write: 1 }),
                        W(2),
                        W(3),
                        U,
                        U,
                        U,
                        U,
                        U
                    ]
                ) > 0
            );
            assert!(judge(&l, p, 45, &[Seen::Garbage, W(2), W(3), U, U, U, U, U]) > 0);
            assert!(judge(&l, p, 45, &[Seen::Uncorrectable, W(2), W(3), U, U, U, U, U]) > 0);
            assert!(
                judge(&l, p, 45, &[W(0), W(2), W(3), W(4), U, U, U, U]) > 0,
                "write 4 arrived at 50"
            );
            assert!(
                judge(&l, p, 45, &[W(1), W(2), W(3), U, U, U, U, U]) > 0,
                "write 1 is of lpn 1"
            );
        }
    }

    #[test]
    fn ordered_is_prefix_semantics_with_flushes() {
        let w = |lpn, count| HostOp::Write {
            start: Lpn(lpn),
            count,
        };
        let l = log(
            vec![
                rec(w(0, 1), 0, Some(1), None, 0),
                rec(w(1, 2), 2, Some(3), None, 0),
                rec(HostOp::Flush, 4, Some(50), None, 0),
                rec(w(0, 1), 60, Some(61), None, 0),
            ],
            4,
        );
        let o = Promise::Ordered;
        assert_eq!(judge(&l, o, 40, &[U, U, U, U]), 0, "nothing flushed yet");
        assert_eq!(
            judge(&l, o, 40, &[W(0), U, U, U]),
            0,
            "prefix of one request"
        );
        assert!(
            judge(&l, o, 40, &[U, W(1), W(2), U]) > 0,
            "request 1 without request 0"
        );
        assert!(judge(&l, o, 40, &[W(0), W(1), U, U]) > 0, "request 1 torn");
        assert!(
            judge(&l, o, 55, &[W(0), U, U, U]) > 0,
            "flush acknowledged: requests 0 and 1 must be there"
        );
        assert_eq!(judge(&l, o, 65, &[W(3), W(1), W(2), U]), 0);
        // The same images under flush-only: page by page, so the torn request is fine.
        assert_eq!(judge(&l, Promise::FlushOnly, 40, &[W(0), W(1), U, U]), 0);
        assert!(judge(&l, Promise::FlushOnly, 55, &[W(0), U, W(2), U]) > 0);
        assert!(
            judge(&l, Promise::DurableWrites, 40, &[W(0), W(1), U, U]) > 0,
            "request 1 acknowledged at 3"
        );
    }

    #[test]
    fn an_earlier_transaction_hidden_by_later_survivors_is_not_presumed_lost() {
        // tx1 {0,1} (w0,w1), tx2 {0} (w2), tx3 {1} (w3); none durable yet at 50.
        let l = log(
            vec![
                rec(sw(1, &[0, 1]), 0, Some(5), Some(100), 0),
                rec(sw(2, &[0]), 10, Some(15), Some(100), 0),
                rec(sw(3, &[1]), 20, Some(25), Some(100), 0),
            ],
            2,
        );
        let a = Promise::AtomicTransactions;
        // tx2 and tx3 hide both pages of tx1: it may have survived, so no Tx(A)/Tx(B) violation.
        assert_eq!(judge(&l, a, 50, &[W(2), W(3)]), 0);
        // Page 1 shows the state before tx1 while tx2 (which overwrote tx1's page 0) survived.
        assert!(judge(&l, a, 50, &[W(2), U]) > 0);
    }

    #[test]
    fn a_flush_covers_requests_sent_before_it_at_the_same_instant() {
        let w = |lpn| HostOp::Write {
            start: Lpn(lpn),
            count: 1,
        };
        let l = log(
            vec![
                rec(w(0), 0, Some(100), None, 0),
                rec(HostOp::Flush, 0, Some(150), None, 0),
                rec(w(1), 0, Some(120), None, 0),
            ],
            2,
        );
        let f = Promise::FlushOnly;
        assert!(
            judge(&l, f, 160, &[U, U]) > 0,
            "write 0 was sent before the flush"
        );
        assert_eq!(
            judge(&l, f, 160, &[W(0), U]),
            0,
            "write 1 was sent after it"
        );
        assert_eq!(judge(&l, f, 140, &[U, U]), 0, "flush not yet acknowledged");
    }

    #[test]
    fn a_trim_permits_never_written_but_never_forgets_a_later_write() {
        let w = |lpn| HostOp::Write {
            start: Lpn(lpn),
            count: 1,
        };
        let trim = HostOp::Trim {
            start: Lpn(0),
            count: 1,
        };
        // w0 lpn 0 acked at 10; trim lpn 0 arrives 20, acked 21; w1 lpn 0 arrives 40, acked 50.
        let l = log(
            vec![
                rec(w(0), 0, Some(10), None, 0),
                rec(trim.clone(), 20, Some(21), None, 0),
                rec(w(0), 40, Some(50), None, 0),
            ],
            1,
        );
        for p in [Promise::DurableWrites, Promise::AtomicTransactions] {
            assert!(
                judge(&l, p, 15, &[U]) > 0,
                "{p:?}: w0 durable, trim not arrived"
            );
            assert_eq!(judge(&l, p, 30, &[U]), 0, "{p:?}: trimmed");
            assert_eq!(
                judge(&l, p, 30, &[W(0)]),
                0,
                "{p:?}: trim forgotten by the cut"
            );
            assert!(
                judge(&l, p, 60, &[U]) > 0,
                "{p:?}: w1 after the trim was acknowledged"
            );
            assert!(judge(&l, p, 60, &[W(0)]) > 0, "{p:?}: w1 lost");
        }
        assert_eq!(
            judge(&l, Promise::FlushOnly, 60, &[U]),
            0,
            "nothing flushed"
        );
        // Ordered: w0, flush (acked 12), trim, w1, flush (acked 55).
        let l = log(
            vec![
                rec(w(0), 0, Some(10), None, 0),
                rec(HostOp::Flush, 11, Some(12), None, 0),
                rec(trim, 20, Some(21), None, 0),
                rec(w(0), 40, Some(50), None, 0),
                rec(HostOp::Flush, 51, Some(55), None, 0),
            ],
            1,
        );
        let o = Promise::Ordered;
        assert!(judge(&l, o, 15, &[U]) > 0, "w0 flushed");
        assert_eq!(judge(&l, o, 30, &[U]), 0, "trimmed");
        assert_eq!(judge(&l, o, 30, &[W(0)]), 0, "trim forgotten");
        assert!(judge(&l, o, 60, &[U]) > 0, "w1 flushed after the trim");
    }

    #[test]
    fn a_trimmed_page_does_not_prove_an_earlier_transaction_absent() {
        // tx1 {0, 1} (w0, w1) not durable; trim lpn 0; tx2 {1} (w2) survives.
        let l = log(
            vec![
                rec(sw(1, &[0, 1]), 0, Some(5), Some(100), 0),
                rec(
                    HostOp::Trim {
                        start: Lpn(0),
                        count: 1,
                    },
                    10,
                    Some(11),
                    None,
                    0,
                ),
                rec(sw(2, &[1]), 20, Some(25), Some(100), 0),
            ],
            2,
        );
        let a = Promise::AtomicTransactions;
        assert_eq!(judge(&l, a, 50, &[U, W(2)]), 0, "lpn 0 may be trimmed");
        // Without the trim, lpn 0 unwritten proves tx1 absent while tx2 survived.
        let mut l2 = l.clone();
        l2.records[1].error = Some("refused".into());
        assert!(judge(&l2, a, 50, &[U, W(2)]) > 0);
    }
}
