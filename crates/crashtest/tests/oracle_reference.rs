//! The crash oracle against the one it replaced: for random host logs, crash instants and
//! images, [`crashtest::oracle::Model::judge`] gives exactly the verdicts and messages of the
//! oracle that searched the host log for every page and unit (kept below, as it was before the
//! search was replaced by indexing). A speed-up of the judge may not change a verdict. With
//! media losses ([`crashtest::oracle::Lost`]), the same holds of
//! [`crashtest::oracle::Judging::judge_settling`]: verdicts, messages and the version each
//! accepted error stands for.

/// The oracle as it was (commit b122dc9), unchanged but for its imports, with the judging of
/// media losses h/media added to it before the oracle was indexed (commit 3f758d8: `Lost`,
/// `judge_with_losses`, `judge_settling`; `Lost` itself is the crate's).
mod reference {
    #![allow(dead_code)]
    use crashtest::oracle::{Judged, Lost, Seen};
    use flash::Lpn;
    use ftl::{DwriteFlag, Promise, TxUuid};
    use rustc_hash::FxHashMap;
    use workload::{HostLog, HostOp, HostRecord};

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

    /// The host log, indexed for judging many crash images.
    pub struct Model<'a> {
        log: &'a HostLog,
        /// Per LPN: write numbers in arrival order.
        writes: Vec<Vec<u64>>,
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
    }

    impl<'a> Model<'a> {
        pub fn new(log: &'a HostLog) -> Model<'a> {
            let mut writes = vec![Vec::new(); log.logical_pages as usize];
            let mut trims = vec![Vec::new(); log.logical_pages as usize];
            let mut aborts = FxHashMap::default();
            let mut dynamic: FxHashMap<u64, DynTx> = FxHashMap::default();
            let mut flushes = Vec::new();
            for (i, r) in log.records.iter().enumerate() {
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
            Model {
                log,
                durable_at,
                writes,
                trims,
                aborts,
                dynamic,
                flushes,
            }
        }

        pub fn logical_pages(&self) -> u32 {
            self.log.logical_pages
        }

        /// Whether write `write` is one the host issued, by a request that arrived by `t`.
        pub fn arrived_by(&self, write: u64, t: u64) -> bool {
            self.record(write).is_some_and(|(_, r)| r.arrival_ns <= t)
        }

        fn record(&self, write: u64) -> Option<(usize, &HostRecord)> {
            let r = self.log.record_of_write(write)?;
            Some((r.index as usize, r))
        }

        fn unit_of(&self, write: u64) -> Option<Unit> {
            let (i, r) = self.record(write)?;
            Some(match &r.op {
                HostOp::SWrite { .. } => Unit::Static(i),
                HostOp::DWrite { uuid, .. } => Unit::Dynamic(uuid.0),
                _ => Unit::Page(write),
            })
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

        /// Must `u` be visible after a crash at `t`? Not once the host's accepted ABORT of it has
        /// arrived: an abort in flight at the cut may or may not have taken effect (a device may
        /// make the abort durable before it acknowledges it).
        fn durable(&self, u: Unit, t: u64) -> bool {
            let done =
                |r: &HostRecord| r.succeeded() && r.durable_ns.or(r.ack_ns).is_some_and(|d| d <= t);
            match u {
                Unit::Page(w) => self
                    .record(w)
                    .is_some_and(|(_, r)| r.ack_ns.is_some_and(|a| a <= t)),
                Unit::Static(i) => {
                    let r = &self.log.records[i];
                    let HostOp::SWrite { uuid, .. } = &r.op else {
                        unreachable!()
                    };
                    done(r) && !self.abort_arrived(uuid.0, t)
                }
                Unit::Dynamic(uuid) => {
                    self.dynamic[&uuid]
                        .rear
                        .is_some_and(|i| done(&self.log.records[i]))
                        && !self.abort_arrived(uuid, t)
                }
            }
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

        /// Checks one crash image; returns (lpn, message) for every rule broken.
        pub fn judge(&self, promise: Promise, t: u64, seen: &[Seen]) -> Vec<(Option<Lpn>, String)> {
            self.judge_with_losses(promise, t, seen, &Lost::default())
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
        ) -> Vec<(Option<Lpn>, String)> {
            self.judge_settling(promise, t, seen, lost).0
        }

        /// [`judge_with_losses`](Self::judge_with_losses), and per page the lost version an error
        /// there was taken to stand for (`None` where it reads otherwise, or the error was not
        /// accepted): what the page holds from then on, for a run that goes on from this image.
        pub fn judge_settling(
            &self,
            promise: Promise,
            t: u64,
            seen: &[Seen],
            lost: &Lost,
        ) -> (Judged, Vec<Option<u64>>) {
            let mut stood = vec![None; seen.len()];
            let v = self.judge_into(promise, (t, lost), seen, &mut stood);
            (v, stood)
        }

        fn judge_into(
            &self,
            promise: Promise,
            (t, lost): (u64, &Lost),
            seen: &[Seen],
            stood: &mut [Option<u64>],
        ) -> Vec<(Option<Lpn>, String)> {
            let mut v = Vec::new();
            // Rules that hold for every promise.
            for (lpn, s) in seen.iter().enumerate() {
                let bad = match *s {
                    Seen::Unwritten => None,
                    Seen::Uncorrectable if self.may_be_lost(lpn, lost, t) => None,
                    Seen::Uncorrectable => Some("reads as an uncorrectable ECC error".to_string()),
                    Seen::Garbage => Some("holds bytes no host write produced (garbage)".to_string()),
                    Seen::Foreign(tag) => Some(format!("holds data of lpn {} (write {})", tag.lpn, tag.write)),
                    Seen::Write(w) => match self.record(w) {
                        None => Some(format!("holds write {w}, which the host never issued")),
                        Some((_, r)) if !self.writes[lpn].contains(&w) => Some(format!("holds write {w} of request {} ({}), which did not write this page or failed: {:?}", r.index, r.op.kind(), r.error)),
                        Some((_, r)) if r.arrival_ns > t => Some(format!("holds write {w} of request {}, which arrived after the crash", r.index)),
                        _ => None,
                    },
                };
                if let Some(msg) = bad {
                    v.push((Some(Lpn(lpn as u32)), msg));
                }
            }
            if !v.is_empty() {
                return v;
            }
            match promise {
                Promise::DurableWrites => self.judge_per_page(
                    (t, lost),
                    (seen, stood),
                    |r| self.durable_at[r.index as usize].is_some_and(|d| d <= t),
                    &mut v,
                ),
                Promise::FlushOnly => {
                    let covered_before = self.flushed_before(t);
                    self.judge_per_page(
                        (t, lost),
                        (seen, stood),
                        |r| covered_before.is_some_and(|f| (r.index as usize) < f),
                        &mut v,
                    )
                }
                Promise::AtomicTransactions => self.judge_atomic((t, lost), (seen, stood), &mut v),
                Promise::Ordered => self.judge_ordered((t, lost), (seen, stood), &mut v),
            }
            v
        }

        /// Did the media lose a version of `lpn` that the host wrote there by `t`?
        fn may_be_lost(&self, lpn: usize, lost: &Lost, t: u64) -> bool {
            lost.held_unwritten(lpn)
                || lost
                    .of(lpn)
                    .iter()
                    .any(|&w| self.writes[lpn].contains(&w) && self.arrived_by(w, t))
        }

        fn judge_per_page(
            &self,
            (t, lost): (u64, &Lost),
            (seen, stood): (&[Seen], &mut [Option<u64>]),
            covered: impl Fn(&HostRecord) -> bool,
            v: &mut Vec<(Option<Lpn>, String)>,
        ) {
            for (lpn, s) in seen.iter().enumerate() {
                let ws = &self.writes[lpn];
                let last_covered = ws
                    .iter()
                    .rposition(|&w| self.record(w).is_some_and(|(_, r)| covered(r)));
                let ok = match (*s, last_covered) {
                    (Seen::Unwritten, None) => true,
                    (Seen::Unwritten, Some(i)) if self.trimmed_after(lpn, Some(ws[i]), t) => true,
                    (Seen::Unwritten, Some(i)) => {
                        v.push((
                            Some(Lpn(lpn as u32)),
                            format!(
                                "reads as never written, but write {} (request {}) must have survived",
                                ws[i],
                                self.record(ws[i]).map_or(0, |(_, r)| r.index)
                            ),
                        ));
                        continue;
                    }
                    (Seen::Write(w), None) => {
                        self.record(w).is_some_and(|(_, r)| r.arrival_ns <= t)
                    }
                    (Seen::Write(w), Some(i)) => ws[i..].contains(&w),
                    // An error in place of a version the rule allows, which the media lost.
                    (Seen::Uncorrectable, i) => {
                        let allowed = |&w: &u64| match i {
                            None => self.arrived_by(w, t),
                            Some(i) => ws[i..].contains(&w) && self.arrived_by(w, t),
                        };
                        let gone = match i {
                            None => true,
                            Some(i) => self.trimmed_after(lpn, Some(ws[i]), t),
                        };
                        let unwritten =
                            (gone && lost.held_unwritten(lpn)).then_some(Lost::UNWRITTEN);
                        match lost.of(lpn).iter().rev().copied().find(|w| allowed(w)).or(unwritten) {
                            Some(w) => stood[lpn] = Some(w),
                            None => v.push((Some(Lpn(lpn as u32)), "reads as an error, but the media lost no version the promise lets it hold".into())),
                        }
                        continue;
                    }
                    _ => true,
                };
                if !ok {
                    let i = last_covered.expect("covered write exists when the check can fail");
                    v.push((Some(Lpn(lpn as u32)), format!("holds write {} but write {} (request {}) must have survived, or a later one", match *s { Seen::Write(w) => w, _ => 0 }, ws[i], self.record(ws[i]).map_or(0, |(_, r)| r.index))));
                }
            }
        }

        fn judge_atomic(
            &self,
            (t, lost): (u64, &Lost),
            (seen, stood): (&[Seen], &mut [Option<u64>]),
            v: &mut Vec<(Option<Lpn>, String)>,
        ) {
            use std::collections::BTreeSet;
            let mut present: BTreeSet<Unit> = BTreeSet::new();
            for s in seen {
                if let Seen::Write(w) = *s {
                    if let Some(u) = self.unit_of(w) {
                        present.insert(u);
                    }
                }
            }
            for &u in &present {
                if let Err(why) = self.committable(u, t) {
                    v.push((None, format!("{u:?} is visible although {why}")));
                }
            }
            // P ∪ units that must be there.
            let mut p: BTreeSet<Unit> = present.clone();
            for ws in &self.writes {
                for &w in ws {
                    if let Some(u) = self.unit_of(w) {
                        if !p.contains(&u) && self.durable(u, t) {
                            p.insert(u);
                        }
                    }
                }
            }
            self.units_behind_errors(seen, (t, lost), &mut p);
            for (lpn, s) in seen.iter().enumerate() {
                let ws = &self.writes[lpn];
                let expected = ws
                    .iter()
                    .rev()
                    .find(|&&w| self.unit_of(w).is_some_and(|u| p.contains(&u)))
                    .copied();
                let found = match *s {
                    Seen::Write(w) => Some(w),
                    // An error stands for the version expected, if the media lost it.
                    Seen::Uncorrectable => match lost.stands_for(lpn, expected) {
                        Some(e) => {
                            stood[lpn] = Some(e);
                            continue;
                        }
                        None => {
                            let should = expected.map_or("never written".into(), |w| {
                                format!("write {w} of {:?}", self.unit_of(w))
                            });
                            v.push((Some(Lpn(lpn as u32)), format!("reads as an error, but should hold {should}, which the media did not lose")));
                            continue;
                        }
                    },
                    _ => None,
                };
                if expected != found && !(found.is_none() && self.trimmed_after(lpn, expected, t)) {
                    let describe = |w: Option<u64>| match w {
                        None => "never written".to_string(),
                        Some(w) => format!("write {w} of {:?}", self.unit_of(w)),
                    };
                    let why = match expected.and_then(|w| self.unit_of(w)) {
                        Some(u) if !present.contains(&u) => " (it was durable before the crash)",
                        Some(_) => " (its unit is visible elsewhere: all or nothing)",
                        None => "",
                    };
                    v.push((
                        Some(Lpn(lpn as u32)),
                        format!(
                            "holds {} but should hold {}{why}",
                            describe(found),
                            describe(expected)
                        ),
                    ));
                }
            }
            // A later transaction cannot survive without an earlier one that wrote a common page
            // (Möbius Tx(A)/Tx(B)). The earlier one counts as missing only when the image proves it
            // absent: one of its pages shows something older than its own write (all its pages may
            // otherwise have been overwritten by later survivors, which hides whether it survived).
            for (lpn, ws) in self.writes.iter().enumerate() {
                let mut missing: Option<Unit> = None;
                for &w in ws {
                    let Some(u) = self.unit_of(w) else { continue };
                    if matches!(u, Unit::Page(_)) {
                        continue;
                    }
                    if p.contains(&u) {
                        if let Some(a) = missing.filter(|a| *a != u) {
                            v.push((Some(Lpn(lpn as u32)), format!("{u:?} survived without the earlier {a:?}, which also wrote this page and was neither aborted nor unfinished (a later transaction cannot survive without an earlier one)")));
                            break;
                        }
                    } else if missing.is_none()
                        && !self.exempt(u, t)
                        && self.proven_absent(u, seen, t)
                    {
                        missing = Some(u);
                    }
                }
            }
        }

        /// Units that pages reading as errors may stand for, added to `p`: where the version `p`
        /// makes a page expect is not lost, the newest lost version after it whose unit may be
        /// visible at `t` (its other pages are then held to it like any unit's). Repeated until
        /// nothing changes, since a unit added moves what other pages expect.
        fn units_behind_errors(
            &self,
            seen: &[Seen],
            (t, lost): (u64, &Lost),
            p: &mut std::collections::BTreeSet<Unit>,
        ) {
            let errors: Vec<usize> = (0..seen.len())
                .filter(|&l| seen[l] == Seen::Uncorrectable)
                .collect();
            loop {
                let mut grew = false;
                for &lpn in &errors {
                    let ws = &self.writes[lpn];
                    let expected = ws
                        .iter()
                        .rposition(|&w| self.unit_of(w).is_some_and(|u| p.contains(&u)));
                    if lost.stands_for(lpn, expected.map(|i| ws[i])).is_some() {
                        continue;
                    }
                    let after = expected.map_or(0, |i| i + 1);
                    let behind = ws[after..]
                        .iter()
                        .rev()
                        .filter(|&&w| lost.has(lpn, w))
                        .filter_map(|&w| self.unit_of(w))
                        .find(|&u| self.committable(u, t).is_ok());
                    if let Some(u) = behind {
                        grew |= p.insert(u);
                    }
                }
                if !grew {
                    return;
                }
            }
        }

        /// Does the image show, on some page of `u`, a state older than `u`'s write of it (reading as
        /// never written proves nothing where a later trim arrived by `t`)?
        fn proven_absent(&self, u: Unit, seen: &[Seen], t: u64) -> bool {
            let writes: Vec<(Lpn, u64)> = match u {
                Unit::Page(w) => self
                    .record(w)
                    .map(|(_, r)| r.writes().filter(|x| x.1 == w).collect())
                    .unwrap_or_default(),
                Unit::Static(i) => self.log.records[i].writes().collect(),
                Unit::Dynamic(uuid) => self
                    .log
                    .records
                    .iter()
                    .filter(|r| {
                        r.succeeded()
                            && matches!(&r.op, HostOp::DWrite { uuid: x, .. } if x.0 == uuid)
                    })
                    .flat_map(|r| r.writes())
                    .collect(),
            };
            writes.iter().any(|&(lpn, w)| {
                let ws = &self.writes[lpn.0 as usize];
                let mine = ws.iter().position(|&x| x == w);
                match seen[lpn.0 as usize] {
                    Seen::Write(x) => match (ws.iter().position(|&y| y == x), mine) {
                        (Some(a), Some(b)) => a < b,
                        _ => false,
                    },
                    Seen::Unwritten => !self.trimmed_after(lpn.0 as usize, Some(w), t),
                    _ => false,
                }
            })
        }

        fn judge_ordered(
            &self,
            (t, lost): (u64, &Lost),
            (seen, stood): (&[Seen], &mut [Option<u64>]),
            v: &mut Vec<(Option<Lpn>, String)>,
        ) {
            let covered_before = self.flushed_before(t);
            let mut prefix: Option<usize> = None;
            for s in seen {
                if let Seen::Write(w) = *s {
                    if let Some((i, _)) = self.record(w) {
                        prefix = prefix.max(Some(i));
                    }
                }
            }
            if let Some(f) = covered_before {
                let last_flushed = self.log.records[..f]
                    .iter()
                    .rposition(|r| r.succeeded() && r.op.written_pages() > 0);
                prefix = prefix.max(last_flushed);
            }
            let expected_at = |lpn: usize, prefix: Option<usize>| {
                self.writes[lpn]
                    .iter()
                    .rev()
                    .find(|&&w| {
                        self.record(w)
                            .is_some_and(|(i, _)| prefix.is_some_and(|p| i <= p))
                    })
                    .copied()
            };
            // What an error stands for where the prefix gives `expected`: that version if the
            // media lost it, or never written (nothing, or trimmed after) if a lost copy held it so.
            let stands = |lpn: usize, expected: Option<u64>| {
                lost.stands_for(lpn, expected).or_else(|| {
                    (lost.held_unwritten(lpn) && self.trimmed_after(lpn, expected, t))
                        .then_some(Lost::UNWRITTEN)
                })
            };
            // A page reading as an error may stand for a lost version beyond the prefix the other
            // pages prove: the prefix is the first, from there on, under which every page reading
            // as an error stands, or could stand under no longer prefix (no lost version of it by
            // a later request that arrived by `t`).
            let errors: Vec<usize> = (0..seen.len())
                .filter(|&l| seen[l] == Seen::Uncorrectable)
                .collect();
            let settles = |p: Option<usize>| {
                errors.iter().all(|&lpn| {
                    stands(lpn, expected_at(lpn, p)).is_some()
                        || !lost.of(lpn).iter().any(|&w| {
                            self.writes[lpn].contains(&w)
                                && self.record(w).is_some_and(|(i, r)| {
                                    r.arrival_ns <= t && p.is_none_or(|p| i > p)
                                })
                        })
                })
            };
            let first = prefix.map_or(0, |p| p + 1);
            prefix = std::iter::once(prefix)
                .chain((first..self.log.records.len()).map(Some))
                .find(|&p| settles(p))
                .unwrap_or(prefix);
            for (lpn, s) in seen.iter().enumerate() {
                let expected = expected_at(lpn, prefix);
                let found = match *s {
                    Seen::Write(w) => Some(w),
                    Seen::Uncorrectable => match stands(lpn, expected) {
                        Some(e) => {
                            stood[lpn] = Some(e);
                            continue;
                        }
                        None => {
                            v.push((Some(Lpn(lpn as u32)), format!("reads as an error, but the prefix up to request {prefix:?} gives {}, which the media did not lose", expected.map_or("never written".into(), |w| format!("write {w}")))));
                            continue;
                        }
                    },
                    _ => None,
                };
                if expected != found && !(found.is_none() && self.trimmed_after(lpn, expected, t)) {
                    v.push((Some(Lpn(lpn as u32)), format!(
                        "holds {} but the recovered state must be the prefix up to request {:?}, which gives {} (prefix, request atomicity or flush semantics broken)",
                        found.map_or("never written".into(), |w| format!("write {w}")),
                        prefix,
                        expected.map_or("never written".into(), |w| format!("write {w}")),
                    )));
                }
            }
        }
    }
}

use crashtest::oracle::{Judged, Judging, Lost, Model, Seen};
use flash::{ContentTag, Lpn};
use ftl::{DwriteFlag, Promise, SwriteMode, TxUuid};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use workload::{HostLog, HostOp, HostRecord};

/// A random host log of `pages` pages: plain writes, flushes, trims, reads, static and dynamic
/// transactions, aborts (of live and finished transactions), some requests refused, instants
/// that tie and overlap; one log in four long (up to 120 requests: pages written many times).
fn random_log(rng: &mut ChaCha8Rng, pages: u32) -> HostLog {
    let most = if rng.random_range(0..4u32) == 0 {
        120
    } else {
        40
    };
    let mut records = Vec::new();
    let (mut now, mut next_write, mut next_uuid) = (0u64, 0u64, 1u64);
    let mut open_dynamic: Vec<u64> = Vec::new();
    let mut txs: Vec<u64> = Vec::new();
    for index in 0..rng.random_range(1..most) {
        now += rng.random_range(0..4u64) * 5;
        let lpn = |rng: &mut ChaCha8Rng| Lpn(rng.random_range(0..pages));
        let op = match rng.random_range(0..10u32) {
            0..=2 => {
                let start = rng.random_range(0..pages);
                HostOp::Write {
                    start: Lpn(start),
                    count: rng.random_range(1..=(pages - start).min(3)),
                }
            }
            3 => HostOp::Flush,
            4 => {
                let start = rng.random_range(0..pages);
                HostOp::Trim {
                    start: Lpn(start),
                    count: rng.random_range(1..=2),
                }
            }
            5 | 6 => {
                let uuid = next_uuid;
                next_uuid += 1;
                txs.push(uuid);
                let n = rng.random_range(1..=4);
                HostOp::SWrite {
                    uuid: TxUuid(uuid),
                    lpns: (0..n).map(|_| lpn(rng)).collect(),
                    mode: if rng.random_bool(0.5) {
                        SwriteMode::Sync
                    } else {
                        SwriteMode::Async
                    },
                }
            }
            7 | 8 => {
                let (uuid, flag) = match open_dynamic.len() {
                    n if n > 0 && rng.random_bool(0.6) => {
                        let k = rng.random_range(0..n);
                        let uuid = open_dynamic[k];
                        if rng.random_bool(0.5) {
                            open_dynamic.remove(k);
                            (uuid, DwriteFlag::Rear)
                        } else {
                            (uuid, DwriteFlag::Body)
                        }
                    }
                    _ => {
                        let uuid = next_uuid;
                        next_uuid += 1;
                        txs.push(uuid);
                        if rng.random_bool(0.3) {
                            (uuid, DwriteFlag::Single)
                        } else {
                            open_dynamic.push(uuid);
                            (uuid, DwriteFlag::Head)
                        }
                    }
                };
                HostOp::DWrite {
                    uuid: TxUuid(uuid),
                    lpn: lpn(rng),
                    flag,
                }
            }
            _ if !txs.is_empty() && rng.random_bool(0.7) => HostOp::Abort {
                uuid: TxUuid(txs[rng.random_range(0..txs.len())]),
            },
            _ => HostOp::Read {
                start: Lpn(0),
                count: 1,
            },
        };
        let failed = rng.random_bool(0.1);
        let ack = now + rng.random_range(1..30u64);
        let ends_tx = matches!(op, HostOp::SWrite { .. })
            || matches!(
                op,
                HostOp::DWrite {
                    flag: DwriteFlag::Rear | DwriteFlag::Single,
                    ..
                }
            );
        let written = op.written_pages();
        records.push(HostRecord {
            index,
            op,
            arrival_ns: now,
            ack_ns: (!failed).then_some(ack),
            durable_ns: (!failed && ends_tx && rng.random_bool(0.7))
                .then(|| ack + rng.random_range(0..40u64)),
            error: failed.then(|| "refused".to_string()),
            first_write: next_write,
        });
        next_write += written;
    }
    HostLog {
        design: "random".into(),
        logical_pages: pages,
        records,
        next_write,
    }
}

/// An image of `log` cut at `t`: each page showing one of its writes that succeeded and arrived
/// by `t`, or nothing (so the rules past the first are reached), and in one image in six one
/// page breaking the first rule: a write of another page, one never issued, one refused or
/// arriving later, a foreign tag, garbage or an ECC error.
fn random_image(rng: &mut ChaCha8Rng, log: &HostLog, t: u64) -> Vec<Seen> {
    let mut may_show: Vec<Vec<u64>> = vec![Vec::new(); log.logical_pages as usize];
    let mut any: Vec<u64> = Vec::new();
    for r in &log.records {
        for (lpn, w) in r.writes() {
            any.push(w);
            if r.succeeded() && r.arrival_ns <= t {
                may_show[lpn.0 as usize].push(w);
            }
        }
    }
    let mut image: Vec<Seen> = may_show
        .iter()
        .map(|ws| match ws.len() {
            0 => Seen::Unwritten,
            n if rng.random_bool(0.2) => Seen::Write(ws[rng.random_range(0..n)]),
            // Mostly the latest or the one before it: images that keep the promise.
            n => match rng.random_range(0..4u32) {
                0 => Seen::Unwritten,
                1 if n > 1 => Seen::Write(ws[n - 2]),
                _ => Seen::Write(ws[n - 1]),
            },
        })
        .collect();
    if rng.random_range(0..6u32) == 0 {
        let page = rng.random_range(0..image.len());
        image[page] = match rng.random_range(0..5u32) {
            0 => Seen::Write(rng.random_range(0..log.next_write + 3)),
            1 if !any.is_empty() => Seen::Write(any[rng.random_range(0..any.len())]),
            2 => Seen::Foreign(ContentTag { lpn: 0, write: 1 }),
            3 => Seen::Garbage,
            _ => Seen::Uncorrectable,
        };
    }
    image
}

/// A crash instant near something that happened in `log`.
fn random_instant(rng: &mut ChaCha8Rng, log: &HostLog) -> u64 {
    let times: Vec<u64> = log
        .records
        .iter()
        .flat_map(|r| [Some(r.arrival_ns), r.ack_ns, r.durable_ns])
        .flatten()
        .collect();
    let at = times[rng.random_range(0..times.len())];
    (at + rng.random_range(0..3u64)).saturating_sub(1)
}

#[test]
fn the_indexed_oracle_judges_exactly_as_the_searching_one() {
    let mut rng = ChaCha8Rng::seed_from_u64(70);
    let mut judged = [0usize; 3];
    for case in 0..6000 {
        let pages = rng.random_range(1..10u32);
        let log = random_log(&mut rng, pages);
        let (new, old) = (Model::new(&log), reference::Model::new(&log));
        for _ in 0..8 {
            let t = random_instant(&mut rng, &log);
            let seen = random_image(&mut rng, &log, t);
            for promise in Promise::ALL {
                let got = new.judge(promise, t, &seen);
                let want = old.judge(promise, t, &seen);
                assert_eq!(
                    got, want,
                    "case {case}, {promise:?} at {t}, image {seen:?}, log {:#?}",
                    log.records
                );
                // 0: kept the promise; 1: broke the rule of every promise; 2: broke the
                // promise's own rules.
                let deep = got.first().is_some_and(|(_, m)| !first_rule(m));
                judged[usize::from(!got.is_empty()) + usize::from(deep)] += 1;
            }
        }
    }
    eprintln!("judged (kept, first rule, own rules): {judged:?}");
    // Every verdict is common: the comparison covers images that keep and break each rule.
    assert!(judged.iter().all(|&n| n > 20_000), "{judged:?}");
}

/// A message of the rule that holds for every promise (a page shows a write it may show).
fn first_rule(message: &str) -> bool {
    [
        "ECC",
        "garbage",
        "holds data of lpn",
        "never issued",
        "did not write this page",
        "arrived after the crash",
    ]
    .iter()
    .any(|m| message.contains(m))
        && !message.contains("is visible although")
}

/// A random log of up to 9 pages and 24 crash instants near what happened in it, in time order.
fn log_and_instants(rng: &mut ChaCha8Rng) -> (HostLog, Vec<u64>) {
    let pages = rng.random_range(1..10u32);
    let log = random_log(rng, pages);
    let mut instants: Vec<u64> = (0..24).map(|_| random_instant(rng, &log)).collect();
    instants.sort_unstable();
    (log, instants)
}

/// A campaign judges its images in time order with one [`crashtest::oracle::Judging`] per
/// promise, which keeps what the instants before worked out: over runs of instants, mostly
/// rising, sometimes equal or falling back (a new share of points, a second life judged as its
/// first cut), every verdict is still the searching oracle's.
#[test]
fn a_judging_advanced_from_image_to_image_judges_as_the_searching_oracle() {
    let mut rng = ChaCha8Rng::seed_from_u64(71);
    let mut judged = [0usize; 3];
    for case in 0..1500 {
        let (log, mut instants) = log_and_instants(&mut rng);
        let (new, old) = (Model::new(&log), reference::Model::new(&log));
        // A few steps back in time.
        for _ in 0..rng.random_range(0..3) {
            let (a, b) = (rng.random_range(0..24), rng.random_range(0..24));
            instants.swap(a, b);
        }
        for promise in Promise::ALL {
            let mut judging = new.judging(promise);
            for &t in &instants {
                let seen = random_image(&mut rng, &log, t);
                let got = judging.judge(t, &seen);
                let want = old.judge(promise, t, &seen);
                assert_eq!(
                    got, want,
                    "case {case}, {promise:?} at {t} (instants {instants:?}), image {seen:?}, log {:#?}",
                    log.records
                );
                let deep = got.first().is_some_and(|(_, m)| !first_rule(m));
                judged[usize::from(!got.is_empty()) + usize::from(deep)] += 1;
            }
        }
    }
    eprintln!("judged (kept, first rule, own rules): {judged:?}");
    assert!(judged.iter().all(|&n| n > 20_000), "{judged:?}");
}

/// An image of `log` at `t` with pages reading as errors, and what the media lost:
/// [`random_image`]'s image with about a page in four turned into an error; for most error
/// pages the version it showed and any of the page's other writes (arrived or not, required or
/// not) lost, and now and then versions of a page that reads otherwise; some error pages, most
/// of those that read as never written, held as never written by a lost copy.
fn random_losses(rng: &mut ChaCha8Rng, log: &HostLog, t: u64) -> (Vec<Seen>, Lost) {
    let mut seen = random_image(rng, log, t);
    let mut writes: Vec<Vec<u64>> = vec![Vec::new(); log.logical_pages as usize];
    for r in &log.records {
        for (lpn, w) in r.writes() {
            writes[lpn.0 as usize].push(w);
        }
    }
    let mut lost = Vec::new();
    let mut unwritten = Vec::new();
    for (lpn, ws) in writes.iter().enumerate() {
        let shown = seen[lpn];
        if rng.random_bool(0.25) {
            seen[lpn] = Seen::Uncorrectable;
        }
        let error = seen[lpn] == Seen::Uncorrectable;
        let odds = if shown == Seen::Unwritten { 0.6 } else { 0.1 };
        if error && rng.random_bool(odds) {
            unwritten.push(lpn as u32);
        }
        if !(error && rng.random_bool(0.8) || rng.random_bool(0.1)) {
            continue;
        }
        if let Seen::Write(w) = shown {
            if rng.random_bool(0.7) {
                lost.push((lpn as u32, w));
            }
        }
        lost.extend(
            ws.iter()
                .filter(|_| rng.random_bool(0.3))
                .map(|&w| (lpn as u32, w)),
        );
    }
    (seen, Lost::new(lost).with_unwritten(unwritten))
}

/// The one message the indexed judge words otherwise with media losses: a page that does not
/// show the version of a unit an error elsewhere stands for says the unit is visible elsewhere
/// (all or nothing), where the searching oracle said it was durable (it only knew of the units
/// read back).
fn why_unified(judged: Judged) -> Judged {
    judged
        .into_iter()
        .map(|(lpn, m)| {
            let m = m.replace(
                " (its unit is visible elsewhere: all or nothing)",
                " (it was durable before the crash)",
            );
            (lpn, m)
        })
        .collect()
}

/// With media losses, a campaign's judge (images in time order, one [`Judging`] per promise,
/// images without errors in between) gives the searching oracle's verdicts, messages (but for
/// [`why_unified`]) and, per page accepted as an error, the lost version it stands for.
#[test]
fn a_judging_with_media_losses_judges_as_the_searching_oracle() {
    let mut rng = ChaCha8Rng::seed_from_u64(72);
    // Images kept with an error accepted, broken at an error, broken otherwise.
    let mut judged = [0usize; 3];
    for case in 0..1500 {
        let (log, instants) = log_and_instants(&mut rng);
        let (new, old) = (Model::new(&log), reference::Model::new(&log));
        for promise in Promise::ALL {
            let mut judging: Judging = new.judging(promise);
            for &t in &instants {
                let (seen, lost) = random_losses(&mut rng, &log, t);
                let (got, stood) = judging.judge_settling(t, &seen, &lost);
                let (want, want_stood) = old.judge_settling(promise, t, &seen, &lost);
                assert_eq!(
                    (why_unified(got.clone()), &stood),
                    (why_unified(want), &want_stood),
                    "case {case}, {promise:?} at {t}, image {seen:?}, lost {lost:?}, log {:#?}",
                    log.records
                );
                let at_error = got
                    .iter()
                    .any(|(_, m)| m.contains("reads as an error") || m.contains("ECC"));
                if got.is_empty() && stood.iter().any(Option::is_some) {
                    judged[0] += 1;
                } else if at_error {
                    judged[1] += 1;
                } else if !got.is_empty() {
                    judged[2] += 1;
                }
                let plain = random_image(&mut rng, &log, t);
                assert_eq!(
                    judging.judge(t, &plain),
                    old.judge(promise, t, &plain),
                    "case {case}, {promise:?} at {t} after an image with losses, image {plain:?}"
                );
            }
        }
    }
    eprintln!("judged (error accepted, broken at an error, broken otherwise): {judged:?}");
    assert!(judged.iter().all(|&n| n > 5_000), "{judged:?}");
}
