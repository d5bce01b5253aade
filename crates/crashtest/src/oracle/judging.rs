//! Judging a campaign's images in time order without re-deriving, at every image, what the
//! promise requires of every page.
//!
//! What an image must show depends on the crash instant only through which units (or, under
//! durable-writes, which requests) must be visible by then, and that set changes at a few
//! instants: a unit enters it when it is done and leaves it when the host's accepted ABORT of
//! it arrives ([`Model::window`]). A [`Judging`] keeps that set and, per page, the last write it
//! requires and (atomic transactions) the first write of a transaction not yet in it, and
//! advances them over the instants between two images; the rules are then checked page by page
//! and over the few writes in between, instead of over every write of the run (which was the
//! oracle's whole cost once searching the host log was gone). The verdicts and messages are
//! exactly those of checking each image from scratch (crates/crashtest/tests/oracle_reference.rs
//! holds the judge to the oracle it replaced, over images in and out of time order).

use super::{Judged, Lost, Model, Seen, NONE};
use flash::Lpn;
use ftl::Promise;

/// What the media lost, and per page the lost version an error there stands for (filled as
/// errors are accepted).
type Losses<'l, 's> = (&'l Lost, &'s mut [Option<u64>]);

/// Judges images of one model under one promise; images in non-decreasing time order reuse
/// the work of the image before (an earlier instant starts again from the beginning).
pub struct Judging<'m, 'a> {
    model: &'m Model<'a>,
    promise: Promise,
    /// Instants at which an item may enter or leave the required set, in time order: under
    /// atomic transactions the items are units, under durable-writes requests.
    events: Vec<(u64, u32)>,
    /// The instant the state below is advanced to (`None`: not advanced yet) and the next
    /// event to apply.
    at: Option<u64>,
    next_event: usize,
    /// Per item: required by `at`.
    required: Vec<bool>,
    /// Per page: one past the position of its last write whose item is required (0: none).
    required_end: Vec<u32>,
    /// Per page (atomic transactions): the position of its first write by a transaction that
    /// is not required (the page's write count: none).
    open_from: Vec<u32>,
    /// Per image: the position among its page's writes of the write each page shows
    /// ([`NONE`]: none of them).
    seen_at: Vec<u32>,
    /// Per image (atomic transactions): the transactions it shows, as bits and as a list; per
    /// page one past the last position a unit it shows wrote; which transactions were asked
    /// whether the image proves them absent (1: no, 2: yes).
    shown: Vec<u64>,
    shown_transactions: Vec<u32>,
    shown_end: Vec<u32>,
    absent: Vec<u8>,
    asked: Vec<u32>,
}

impl<'m, 'a> Judging<'m, 'a> {
    pub(super) fn new(model: &'m Model<'a>, promise: Promise) -> Judging<'m, 'a> {
        let mut events = Vec::new();
        let items = match promise {
            Promise::AtomicTransactions => {
                for (u, &(from, until)) in model.durable_window.iter().enumerate() {
                    events.extend(from.into_iter().chain(until).map(|at| (at, u as u32)));
                }
                model.units.len()
            }
            Promise::DurableWrites => {
                for (i, at) in model.durable_at.iter().enumerate() {
                    events.extend(at.map(|at| (at, i as u32)));
                }
                model.log.records.len()
            }
            Promise::FlushOnly | Promise::Ordered => 0,
        };
        events.sort_unstable();
        let pages = model.log.logical_pages as usize;
        Judging {
            model,
            promise,
            events,
            at: None,
            next_event: 0,
            required: vec![false; items],
            required_end: vec![0; pages],
            open_from: vec![0; pages],
            seen_at: vec![NONE; pages],
            shown: vec![0; model.units.len().div_ceil(64)],
            shown_transactions: Vec::new(),
            shown_end: vec![0; pages],
            absent: vec![0; model.units.len()],
            asked: Vec::new(),
        }
    }

    /// The logical pages of the run judged.
    pub fn logical_pages(&self) -> u32 {
        self.model.logical_pages()
    }

    /// Forgets everything worked out so far (after a panic that may have left it half done):
    /// the next image is judged from the beginning.
    pub fn clear(&mut self) {
        self.at = None;
        self.shown.fill(0);
        self.shown_transactions.clear();
        self.shown_end.fill(0);
        self.absent.fill(0);
        self.asked.clear();
    }

    /// Checks one crash image at `t`; returns (lpn, message) for every rule broken, as
    /// [`Model::judge`].
    pub fn judge(&mut self, t: u64, seen: &[Seen]) -> Judged {
        // Nothing lost, so no error is accepted and nothing stands for one.
        self.judge_into(t, seen, (&Lost::default(), &mut []))
    }

    /// [`judge`](Self::judge) of an image whose media lost the versions in `lost`: a page that
    /// reads as an error is accepted only where one of its lost versions could stand in its
    /// place ([`Lost`]).
    pub fn judge_with_losses(&mut self, t: u64, seen: &[Seen], lost: &Lost) -> Judged {
        self.judge_settling(t, seen, lost).0
    }

    /// [`judge_with_losses`](Self::judge_with_losses), and per page the lost version an error
    /// there was taken to stand for (`None` where it reads otherwise, or the error was not
    /// accepted): what the page holds from then on, for a run that goes on from this image.
    pub fn judge_settling(
        &mut self,
        t: u64,
        seen: &[Seen],
        lost: &Lost,
    ) -> (Judged, Vec<Option<u64>>) {
        let mut stood = vec![None; seen.len()];
        let v = self.judge_into(t, seen, (lost, &mut stood));
        (v, stood)
    }

    /// The judge: `stood` gets, per page accepted as an error, the lost version it stands for
    /// (it may be empty when `lost` is: no error is accepted then).
    fn judge_into(&mut self, t: u64, seen: &[Seen], losses: Losses) -> Judged {
        let mut v = Vec::new();
        self.model
            .judge_writes_seen(t, seen, losses.0, &mut self.seen_at, &mut v);
        if !v.is_empty() {
            return v;
        }
        let m = self.model;
        match self.promise {
            Promise::DurableWrites => {
                self.advance(t);
                let required_end = &self.required_end;
                let last_covered = |lpn: usize| (required_end[lpn] as usize).checked_sub(1);
                m.judge_per_page(t, (seen, &self.seen_at), last_covered, losses, &mut v)
            }
            Promise::FlushOnly => {
                let covered_before = m.flushed_before(t);
                let last_covered = |lpn: usize| {
                    let f = covered_before? as u32;
                    m.writes
                        .records(lpn)
                        .partition_point(|&r| r < f)
                        .checked_sub(1)
                };
                m.judge_per_page(t, (seen, &self.seen_at), last_covered, losses, &mut v)
            }
            Promise::AtomicTransactions => {
                self.advance(t);
                self.judge_atomic(t, seen, losses, &mut v)
            }
            Promise::Ordered => m.judge_ordered(t, (seen, &self.seen_at), losses, &mut v),
        }
        v
    }

    /// Brings the required set and the per-page positions to instant `t`.
    fn advance(&mut self, t: u64) {
        if self.at.is_none_or(|at| at > t) {
            self.restart();
        }
        self.at = Some(t);
        while let Some(&(at, item)) = self.events.get(self.next_event) {
            if at > t {
                break;
            }
            self.next_event += 1;
            let item = item as usize;
            let now = match self.promise {
                Promise::AtomicTransactions => self.model.durable(item, t),
                _ => true,
            };
            if now != self.required[item] {
                self.required[item] = now;
                if now {
                    self.enter(item);
                } else {
                    self.leave(item);
                }
            }
        }
    }

    /// Nothing required: the state before the first event.
    fn restart(&mut self) {
        self.next_event = 0;
        self.required.fill(false);
        self.required_end.fill(0);
        let m = self.model;
        for (lpn, open) in self.open_from.iter_mut().enumerate() {
            let units = m.writes.units(lpn);
            *open = units
                .iter()
                .position(|&u| m.is_transaction(u as usize))
                .unwrap_or(units.len()) as u32;
        }
    }

    /// The writes of `item` (a unit or a request), as (page, position).
    fn writes_of(&self, item: usize) -> &'m [(u32, u32)] {
        match self.promise {
            Promise::AtomicTransactions => self.model.unit_writes.of(item),
            _ => self.model.record_writes.of(item),
        }
    }

    /// Whether the write at `pos` of page `lpn` is by a required item.
    fn required_at(&self, lpn: usize, pos: usize) -> bool {
        let item = match self.promise {
            Promise::AtomicTransactions => self.model.writes.units(lpn)[pos],
            _ => self.model.writes.records(lpn)[pos],
        };
        self.required[item as usize]
    }

    /// `item` became required.
    fn enter(&mut self, item: usize) {
        let m = self.model;
        for &(lpn, pos) in self.writes_of(item) {
            let lpn = lpn as usize;
            self.required_end[lpn] = self.required_end[lpn].max(pos + 1);
            if self.promise != Promise::AtomicTransactions || self.open_from[lpn] != pos {
                continue;
            }
            let units = m.writes.units(lpn);
            let mut open = pos as usize;
            while open < units.len()
                && (!m.is_transaction(units[open] as usize) || self.required[units[open] as usize])
            {
                open += 1;
            }
            self.open_from[lpn] = open as u32;
        }
    }

    /// `item` is no longer required (a unit whose accepted ABORT arrived).
    fn leave(&mut self, item: usize) {
        for &(lpn, pos) in self.writes_of(item) {
            let lpn = lpn as usize;
            let mut end = self.required_end[lpn] as usize;
            while end > 0 && !self.required_at(lpn, end - 1) {
                end -= 1;
            }
            self.required_end[lpn] = end as u32;
            if self.promise == Promise::AtomicTransactions && self.model.is_transaction(item) {
                self.open_from[lpn] = self.open_from[lpn].min(pos);
            }
        }
    }

    fn is_shown(&self, u: usize) -> bool {
        self.shown[u / 64] >> (u % 64) & 1 != 0
    }

    /// Whether transaction `u` is in P: shown by the image, or required by `at`.
    fn in_p(&self, u: usize) -> bool {
        self.required[u] || self.is_shown(u)
    }

    /// One past the last write of page `lpn` whose unit is in P.
    fn p_end(&self, lpn: usize) -> usize {
        self.required_end[lpn].max(self.shown_end[lpn]) as usize
    }

    /// Atomic transactions. Units are transactions (SWRITE; a DWRITE chain by uuid) and single
    /// pages of plain writes. With P the units seen on any page plus the units that must be
    /// there (durable by `t`), each page shows the latest unit of P that writes it; a unit seen
    /// must have been able to commit; a later transaction cannot survive without an earlier one
    /// that also wrote one of its pages ([`Judging::judge_transaction_order`]).
    ///
    /// A single page's unit shown is the write its page shows (it has no other, and the rule
    /// every promise shares let it through: it arrived by `t`, so it may commit), so only the
    /// transactions shown are listed, and checked in the units' order.
    ///
    /// A page reading as an error adds to P the unit of the lost version it may stand for
    /// ([`Judging::units_behind_errors`]) and must stand for the version P makes it expect.
    fn judge_atomic(
        &mut self,
        t: u64,
        seen: &[Seen],
        (lost, stood): Losses,
        v: &mut Vec<(Option<Lpn>, String)>,
    ) {
        let m = self.model;
        self.units_shown(t, seen.len(), v);
        if !lost.is_empty() {
            self.units_behind_errors(t, seen, lost);
        }
        for (lpn, s) in seen.iter().enumerate() {
            let end = self.p_end(lpn);
            let at = self.seen_at[lpn];
            // The page shows the last write of P (the common case).
            if at != NONE && at as usize + 1 == end {
                continue;
            }
            let ws = m.writes.of(lpn);
            let expected = end.checked_sub(1).map(|p| ws[p]);
            let describe = |w: Option<u64>| match w {
                None => "never written".to_string(),
                Some(w) => format!("write {w} of {:?}", m.unit_of(w)),
            };
            let found = match *s {
                Seen::Write(w) => Some(w),
                // An error stands for the version expected, if the media lost it.
                Seen::Uncorrectable => {
                    match lost.stands_for(lpn, expected) {
                        Some(e) => stood[lpn] = Some(e),
                        None => v.push((Some(Lpn(lpn as u32)), format!("reads as an error, but should hold {}, which the media did not lose", describe(expected)))),
                    }
                    continue;
                }
                _ => None,
            };
            if expected != found && !(found.is_none() && m.trimmed_after(lpn, expected, t)) {
                // A single page's unit shown is shown on this page, which does not show it.
                let why = match expected.and_then(|w| m.unit_index(w)) {
                    Some(u) if !(m.is_transaction(u) && self.is_shown(u)) => {
                        " (it was durable before the crash)"
                    }
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
        self.judge_transaction_order(t, seen, v);
        self.forget_image();
    }

    /// Notes the units the image of `pages` pages shows (from `seen_at`): the transactions,
    /// checked in the units' order to have been able to commit by `t`, and how far each page's
    /// P reaches.
    fn units_shown(&mut self, t: u64, pages: usize, v: &mut Vec<(Option<Lpn>, String)>) {
        let m = self.model;
        for lpn in 0..pages {
            let at = self.seen_at[lpn];
            if at == NONE {
                continue;
            }
            let u = m.writes.units(lpn)[at as usize] as usize;
            if m.is_transaction(u) {
                if !self.is_shown(u) {
                    self.shown[u / 64] |= 1 << (u % 64);
                    self.shown_transactions.push(u as u32);
                }
            } else {
                self.shown_end[lpn] = self.shown_end[lpn].max(at + 1);
            }
        }
        self.shown_transactions.sort_unstable();
        for &u in &self.shown_transactions {
            if let Err(why) = m.committable(m.units[u as usize], t) {
                let u = m.units[u as usize];
                v.push((None, format!("{u:?} is visible although {why}")));
            }
            for &(lpn, pos) in m.unit_writes.of(u as usize) {
                let end = &mut self.shown_end[lpn as usize];
                *end = (*end).max(pos + 1);
            }
        }
    }

    /// Units that pages reading as errors may stand for, added to P as if shown: where the
    /// version P makes a page expect is not lost, the newest lost version after it whose unit
    /// may be visible at `t` (its other pages are then held to it like any unit's). Repeated
    /// until nothing changes, since a unit added moves what other pages expect.
    fn units_behind_errors(&mut self, t: u64, seen: &[Seen], lost: &Lost) {
        let m = self.model;
        let errors = error_pages(seen);
        loop {
            let mut grew = false;
            for &lpn in &errors {
                let ws = m.writes.of(lpn);
                let end = self.p_end(lpn);
                let expected = end.checked_sub(1).map(|p| ws[p]);
                if lost.stands_for(lpn, expected).is_some() {
                    continue;
                }
                let behind = (end..ws.len())
                    .rev()
                    .filter(|&pos| lost.has(lpn, ws[pos]))
                    .map(|pos| (pos, m.writes.units(lpn)[pos] as usize))
                    .find(|&(_, u)| m.committable(m.units[u], t).is_ok());
                if let Some((pos, u)) = behind {
                    grew |= self.show(u, lpn, pos);
                }
            }
            if !grew {
                return;
            }
        }
    }

    /// Adds unit `u`, which wrote position `pos` of page `lpn`, to what the image shows;
    /// whether it was not shown before.
    fn show(&mut self, u: usize, lpn: usize, pos: usize) -> bool {
        let m = self.model;
        if !m.is_transaction(u) {
            let end = &mut self.shown_end[lpn];
            let grew = (*end as usize) <= pos;
            *end = (*end).max(pos as u32 + 1);
            return grew;
        }
        if self.is_shown(u) {
            return false;
        }
        self.shown[u / 64] |= 1 << (u % 64);
        self.shown_transactions.push(u as u32);
        for &(lpn, pos) in m.unit_writes.of(u) {
            let end = &mut self.shown_end[lpn as usize];
            *end = (*end).max(pos + 1);
        }
        true
    }

    /// Clears what one image showed.
    fn forget_image(&mut self) {
        for &u in &self.shown_transactions {
            self.shown[u as usize / 64] = 0;
        }
        self.shown_transactions.clear();
        self.shown_end.fill(0);
        for &u in &self.asked {
            self.absent[u as usize] = 0;
        }
        self.asked.clear();
    }

    /// A later transaction cannot survive without an earlier one that wrote a common page
    /// (Möbius Tx(A)/Tx(B)). The earlier one counts as missing only when the image proves it
    /// absent: one of its pages shows something older than its own write (all its pages may
    /// otherwise have been overwritten by later survivors, which hides whether it survived).
    ///
    /// Per page only the writes from its first transaction outside P (every one before it is in
    /// P, so none can be missing) to its last write in P (no later one can survive) are looked
    /// at: the checks of every write of the page in order give the same violations.
    fn judge_transaction_order(
        &mut self,
        t: u64,
        seen: &[Seen],
        v: &mut Vec<(Option<Lpn>, String)>,
    ) {
        let m = self.model;
        for lpn in 0..self.open_from.len() {
            let from = self.open_from[lpn] as usize;
            let end = self.p_end(lpn);
            if from >= end {
                continue;
            }
            let mut missing: Option<usize> = None;
            for &u in &m.writes.units(lpn)[from..end] {
                let u = u as usize;
                if !m.is_transaction(u) {
                    continue;
                }
                if self.in_p(u) {
                    if let Some(a) = missing.filter(|a| *a != u) {
                        let (u, a) = (m.units[u], m.units[a]);
                        v.push((Some(Lpn(lpn as u32)), format!("{u:?} survived without the earlier {a:?}, which also wrote this page and was neither aborted nor unfinished (a later transaction cannot survive without an earlier one)")));
                        break;
                    }
                } else if missing.is_none() && !m.exempt(m.units[u], t) {
                    if self.absent[u] == 0 {
                        self.absent[u] = 1 + u8::from(m.proven_absent(u, seen, t));
                        self.asked.push(u as u32);
                    }
                    if self.absent[u] == 2 {
                        missing = Some(u);
                    }
                }
            }
        }
    }
}

impl Model<'_> {
    /// Whether unit `u` (by index) is a transaction rather than a single page.
    fn is_transaction(&self, u: usize) -> bool {
        u >= self.first_transaction
    }

    /// Where `w` stands among page `lpn`'s writes: looked for among the last few (a page mostly
    /// shows one of its latest), else through the facts.
    fn locate(&self, lpn: usize, w: u64) -> Option<usize> {
        let ws = self.writes.of(lpn);
        let recent = ws.len().saturating_sub(8);
        match ws[recent..].iter().rposition(|&x| x == w) {
            Some(i) => Some(recent + i),
            None => self.position(lpn, w),
        }
    }

    /// The rule that holds for every promise: a page shows a write *to that page*, by a request
    /// that succeeded and arrived by `t`, or was never written; never garbage, never an ECC
    /// error but in place of a version of the page the media lost (`lost`; the promise then
    /// says which). Notes in `seen_at` where each page's write stands among its writes.
    fn judge_writes_seen(
        &self,
        t: u64,
        seen: &[Seen],
        lost: &Lost,
        seen_at: &mut [u32],
        v: &mut Vec<(Option<Lpn>, String)>,
    ) {
        for (lpn, s) in seen.iter().enumerate() {
            seen_at[lpn] = NONE;
            let bad = match *s {
                Seen::Unwritten => None,
                Seen::Uncorrectable if self.may_be_lost(lpn, lost, t) => None,
                Seen::Uncorrectable => Some("reads as an uncorrectable ECC error".to_string()),
                Seen::Garbage => Some("holds bytes no host write produced (garbage)".to_string()),
                Seen::Foreign(tag) => Some(format!("holds data of lpn {} (write {})", tag.lpn, tag.write)),
                Seen::Write(w) => match self.locate(lpn, w) {
                    Some(at) => {
                        seen_at[lpn] = at as u32;
                        let r = self.writes.records(lpn)[at] as usize;
                        (self.arrival[r] > t).then(|| format!("holds write {w} of request {}, which arrived after the crash", self.log.records[r].index))
                    }
                    None => match self.record(w) {
                        None => Some(format!("holds write {w}, which the host never issued")),
                        Some((_, r)) => Some(format!("holds write {w} of request {} ({}), which did not write this page or failed: {:?}", r.index, r.op.kind(), r.error)),
                    },
                },
            };
            if let Some(msg) = bad {
                v.push((Some(Lpn(lpn as u32)), msg));
            }
        }
    }

    /// Durable-writes and flush-only: each page shows its last covered write (at position
    /// `last_covered(lpn)` of its writes), or a later one. `seen_at`: where each page's write
    /// stands among its writes ([`Model::judge_writes_seen`] let every write shown through).
    ///
    /// A page reading as an error stands for the newest version the media lost among those
    /// the rule allows it to show.
    fn judge_per_page(
        &self,
        t: u64,
        (seen, seen_at): (&[Seen], &[u32]),
        last_covered: impl Fn(usize) -> Option<usize>,
        (lost, stood): Losses,
        v: &mut Vec<(Option<Lpn>, String)>,
    ) {
        for (lpn, s) in seen.iter().enumerate() {
            let last_covered = last_covered(lpn);
            let ok = match (*s, last_covered) {
                (Seen::Unwritten, None) => true,
                (Seen::Unwritten, Some(i)) => {
                    let ws = self.writes.of(lpn);
                    if self.trimmed_after(lpn, Some(ws[i]), t) {
                        continue;
                    }
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
                // Shown, so it arrived by `t`.
                (Seen::Write(_), None) => true,
                (Seen::Write(_), Some(i)) => seen_at[lpn] as usize >= i,
                (Seen::Uncorrectable, i) => {
                    let allowed = |&w: &u64| {
                        self.arrived_by(w, t)
                            && i.is_none_or(|i| self.position(lpn, w).is_some_and(|p| p >= i))
                    };
                    // Else never written, where nothing had to survive (or a trim came after it).
                    let covered = i.map(|i| self.writes.of(lpn)[i]);
                    let unwritten = || self.error_stands_for(lpn, covered, lost, t);
                    match lost.of(lpn).iter().rev().copied().find(allowed).or_else(unwritten) {
                        Some(w) => stood[lpn] = Some(w),
                        None => v.push((Some(Lpn(lpn as u32)), "reads as an error, but the media lost no version the promise lets it hold".into())),
                    }
                    continue;
                }
                _ => true,
            };
            if !ok {
                let ws = self.writes.of(lpn);
                let i = last_covered.expect("covered write exists when the check can fail");
                v.push((Some(Lpn(lpn as u32)), format!("holds write {} but write {} (request {}) must have survived, or a later one", match *s { Seen::Write(w) => w, _ => 0 }, ws[i], self.record(ws[i]).map_or(0, |(_, r)| r.index))));
            }
        }
    }

    /// Ordered: the image equals the state after a prefix of the write requests in arrival
    /// order (each request all-or-nothing), and that prefix covers every write that arrived
    /// before a flush acknowledged by `t`.
    ///
    /// A page reading as an error may stand for a lost version beyond the prefix the other
    /// pages prove: the prefix then reaches that version's request.
    fn judge_ordered(
        &self,
        t: u64,
        (seen, seen_at): (&[Seen], &[u32]),
        (lost, stood): Losses,
        v: &mut Vec<(Option<Lpn>, String)>,
    ) {
        let covered_before = self.flushed_before(t);
        let mut prefix: Option<usize> = None;
        for (lpn, &at) in seen_at.iter().enumerate() {
            if at != NONE {
                let r = self.writes.records(lpn)[at as usize] as usize;
                prefix = prefix.max(Some(r));
            }
        }
        if let Some(f) = covered_before {
            prefix = prefix.max(self.last_writing_before[f]);
        }
        if !lost.is_empty() {
            prefix = self.prefix_behind_errors(t, seen, lost, prefix);
        }
        for (lpn, s) in seen.iter().enumerate() {
            let records = self.writes.records(lpn);
            let in_prefix = |i: usize| prefix.is_some_and(|p| records[i] as usize <= p);
            // The page shows the write the prefix gives (the common case): its write is in the
            // prefix and the next one is not.
            let at = seen_at[lpn] as usize;
            if at != NONE as usize
                && in_prefix(at)
                && !(at + 1 < records.len() && in_prefix(at + 1))
            {
                continue;
            }
            let expected = self.expected_in_prefix(lpn, prefix);
            let found = match *s {
                Seen::Write(w) => Some(w),
                Seen::Uncorrectable => {
                    match self.error_stands_for(lpn, expected, lost, t) {
                        Some(e) => stood[lpn] = Some(e),
                        None => v.push((Some(Lpn(lpn as u32)), format!("reads as an error, but the prefix up to request {prefix:?} gives {}, which the media did not lose", expected.map_or("never written".into(), |w| format!("write {w}"))))),
                    }
                    continue;
                }
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

    /// Ordered: the write of page `lpn` the state after the prefix up to request `prefix` gives.
    fn expected_in_prefix(&self, lpn: usize, prefix: Option<usize>) -> Option<u64> {
        let records = self.writes.records(lpn);
        let at = prefix.and_then(|p| records.partition_point(|&r| r as usize <= p).checked_sub(1));
        at.map(|i| self.writes.of(lpn)[i])
    }

    /// What an error at `lpn` stands for where the promise gives `expected` (ordered: the
    /// prefix's version; per page: the last covered write): that version if the media lost it,
    /// or never written — where `expected` is nothing or a trim arrived by `t` after it — if a
    /// lost copy held the page so.
    fn error_stands_for(
        &self,
        lpn: usize,
        expected: Option<u64>,
        lost: &Lost,
        t: u64,
    ) -> Option<u64> {
        lost.stands_for(lpn, expected).or_else(|| {
            (lost.held_unwritten(lpn) && self.trimmed_after(lpn, expected, t))
                .then_some(Lost::UNWRITTEN)
        })
    }

    /// Ordered: the shortest prefix from `prefix` (what the other pages and the flushes prove)
    /// under which every page reading as an error stands for a version the media lost
    /// ([`Self::error_stands_for`]). Where one does not, the prefix is raised to the next
    /// request, arrived by `t`, that wrote a lost version of that page — the least raise that
    /// lets it stand — until nothing moves. Each raise is to the least prefix under which that
    /// page stands, so none passes a prefix under which all of them stand; and the least such
    /// prefix is the one the other pages accept best (each shows a write of a request up to
    /// the prefix, and no later write of it). A page that no prefix lets stand leaves it where
    /// it is (the check then reports that page).
    fn prefix_behind_errors(
        &self,
        t: u64,
        seen: &[Seen],
        lost: &Lost,
        mut prefix: Option<usize>,
    ) -> Option<usize> {
        let errors = error_pages(seen);
        loop {
            let mut raised = false;
            for &lpn in &errors {
                let expected = self.expected_in_prefix(lpn, prefix);
                if self.error_stands_for(lpn, expected, lost, t).is_some() {
                    continue;
                }
                let records = self.writes.records(lpn);
                let ws = self.writes.of(lpn);
                let from = prefix.map_or(0, |p| records.partition_point(|&r| r as usize <= p));
                let next = (from..records.len())
                    .map(|i| (records[i] as usize, ws[i]))
                    .find(|&(r, w)| lost.has(lpn, w) && self.arrival[r] <= t);
                if let Some((r, _)) = next {
                    prefix = Some(r);
                    raised = true;
                }
            }
            if !raised {
                return prefix;
            }
        }
    }
}

/// The pages of an image that read as errors.
fn error_pages(seen: &[Seen]) -> Vec<usize> {
    (0..seen.len())
        .filter(|&lpn| seen[lpn] == Seen::Uncorrectable)
        .collect()
}
