//! Media faults under SQLite (issue #69; docs/reliability.md, "Under SQLite"):
//! `mobius crashtest --workload sqlite-* --media PART ...`.
//!
//! With the flash's media model on, a page can be lost to worn media. The design must then
//! answer its read with an error (SQLite sees SQLITE_IOERR), never with bytes. The oracle
//! accepts such an error only where a page the database needed was lost: every logical page
//! the store's reads found uncorrectable ([`sqlite::evidence`]) must have a copy the media lost
//! ([`flash::Flash::lost_contents`], the simulator's ground truth) holding a version of it the
//! database may hold there — after a cut, one no older than its newest version a flush had made
//! durable by the cut, and written by then ([`Versions::allowed`]); during a run, the newest
//! one written. Anything else stays a violation: an error for a page of which the media lost
//! no such version, and every query that returns an older or a wrong row (the campaign's own
//! checks, which run unchanged wherever no read failed).

use sqlite::evidence::Evidence;
use std::collections::{BTreeMap, BTreeSet};

/// The page versions a database wrote: per logical page, each image's hash, issue instant and
/// place in the store's order of writes, the flushes, and what a first cut left possible
/// before them (a second life).
#[derive(Clone, Debug, Default)]
pub struct Versions {
    by_lpn: BTreeMap<u32, Vec<Version>>,
    /// (writes issued before it, acknowledged) of every flush.
    flushes: Vec<(usize, u64)>,
    /// Per logical page, the versions a cut before this life's writes left possible.
    prior: BTreeMap<u32, Vec<u64>>,
}

/// One page image written.
#[derive(Clone, Copy, Debug)]
struct Version {
    hash: u64,
    issued_ns: u64,
    /// Its place among the store's writes.
    index: usize,
}

impl Versions {
    /// The versions `evidence` wrote, after `prior` ([`Versions::after_cut`] of the life before).
    pub fn new(prior: BTreeMap<u32, Vec<u64>>, evidence: &Evidence) -> Versions {
        let mut by_lpn: BTreeMap<u32, Vec<Version>> = BTreeMap::new();
        for (index, w) in evidence.writes.iter().enumerate() {
            by_lpn.entry(w.lpn).or_default().push(Version {
                hash: w.hash,
                issued_ns: w.issued_ns,
                index,
            });
        }
        Versions {
            by_lpn,
            flushes: evidence.flushes.clone(),
            prior,
        }
    }

    /// The versions (hashes) logical page `lpn` may hold after a cut at `cut`: those written
    /// by then from its newest version issued before a flush acknowledged by then; with no
    /// such version, every one written by then and those the life before left possible.
    pub fn allowed(&self, lpn: u32, cut: u64) -> Vec<u64> {
        let written: &[Version] = self.by_lpn.get(&lpn).map_or(&[], |v| v);
        let by_cut: Vec<Version> = written
            .iter()
            .copied()
            .filter(|w| w.issued_ns <= cut)
            .collect();
        let fence = self
            .flushes
            .iter()
            .filter(|f| f.1 <= cut)
            .map(|f| f.0)
            .max();
        let floor = fence.and_then(|f| by_cut.iter().rposition(|w| w.index < f));
        let mut allowed: Vec<u64> = match floor {
            Some(i) => by_cut[i..].iter().map(|w| w.hash).collect(),
            None => by_cut.iter().map(|w| w.hash).collect(),
        };
        if floor.is_none() {
            allowed.extend(self.prior.get(&lpn).into_iter().flatten());
        }
        allowed
    }

    /// The version `lpn` must read as now, during the run: its newest written (or, unwritten in
    /// this life, any the life before left possible).
    pub fn needed_now(&self, lpn: u32) -> Vec<u64> {
        match self.by_lpn.get(&lpn).and_then(|v| v.last()) {
            Some(w) => vec![w.hash],
            None => self.prior.get(&lpn).cloned().unwrap_or_default(),
        }
    }

    /// What a cut at `cut` leaves possible, per logical page: the prior of the life after it.
    pub fn after_cut(&self, cut: u64) -> BTreeMap<u32, Vec<u64>> {
        let lpns: BTreeSet<u32> = self
            .by_lpn
            .keys()
            .chain(self.prior.keys())
            .copied()
            .collect();
        lpns.into_iter()
            .map(|l| (l, self.allowed(l, cut)))
            .collect()
    }
}

/// Hashes of the page images the media lost on `flash` (pages of `page_bytes`).
pub fn lost_hashes(flash: &flash::Flash) -> BTreeSet<u64> {
    let page_bytes = flash.geometry().page_bytes as usize;
    flash
        .lost_contents()
        .iter()
        .map(|c| sqlite::evidence::page_hash(c, page_bytes))
        .collect()
}

/// The first logical page of `uncorrectable` for which `lost` holds none of the versions
/// `needed` gives it: an error the oracle does not accept (`None`: each was lost).
pub fn unaccepted(
    uncorrectable: &[u32],
    lost: &BTreeSet<u64>,
    needed: impl Fn(u32) -> Vec<u64>,
) -> Option<u32> {
    uncorrectable
        .iter()
        .copied()
        .find(|&l| !needed(l).iter().any(|h| lost.contains(h)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use sqlite::evidence::Written;

    /// Writes (lpn, hash, issued) and flushes (writes before it, acknowledged).
    fn evidence(writes: &[(u32, u64, u64)], flushes: &[(usize, u64)]) -> Evidence {
        Evidence {
            writes: writes
                .iter()
                .map(|&(lpn, hash, issued_ns)| Written {
                    lpn,
                    hash,
                    issued_ns,
                })
                .collect(),
            flushes: flushes.to_vec(),
            ..Evidence::default()
        }
    }

    /// Page 1 written as Z (t 5) and A (t 10), flushed (acknowledged at 30), then B (t 40)
    /// and C (t 60). A cut at 50 allows A and B; at 35 only A; before the flush's
    /// acknowledgement everything written. A second life after the cut at 50 starts from A and
    /// B. A write issued at the very instant a flush before it was acknowledged is not covered
    /// by it (the store's order of writes decides, not the clock).
    #[test]
    fn a_version_older_than_the_durable_one_is_not_allowed() {
        let v = Versions::new(
            BTreeMap::new(),
            &evidence(
                &[(1, 0xF, 5), (1, 0xA, 10), (1, 0xB, 40), (1, 0xC, 60)],
                &[(2, 30)],
            ),
        );
        assert_eq!(v.allowed(1, 50), vec![0xA, 0xB]);
        assert_eq!(v.allowed(1, 35), vec![0xA]);
        assert_eq!(v.allowed(1, 25), vec![0xF, 0xA]);
        assert_eq!(v.needed_now(1), vec![0xC]);
        let v2 = Versions::new(v.after_cut(50), &evidence(&[], &[]));
        assert_eq!(v2.allowed(1, 70), vec![0xA, 0xB]);
        let v3 = Versions::new(v.after_cut(50), &evidence(&[(1, 0xD, 80)], &[(1, 90)]));
        assert_eq!(v3.allowed(1, 95), vec![0xD]);
        assert!(v3.allowed(2, 95).is_empty());
        let same_instant = Versions::new(
            BTreeMap::new(),
            &evidence(&[(1, 0xA, 10), (1, 0xB, 30)], &[(1, 30)]),
        );
        assert_eq!(same_instant.allowed(1, 31), vec![0xA, 0xB]);
    }

    /// The oracle's rule: an error is accepted only for a page whose needed version was lost;
    /// an older version lost, or nothing lost, is not enough.
    #[test]
    fn an_error_is_accepted_only_where_the_needed_version_was_lost() {
        let v = Versions::new(
            BTreeMap::new(),
            &evidence(&[(1, 0xA, 10), (1, 0xB, 40)], &[(2, 55)]),
        );
        let needed = |l| v.allowed(l, 60);
        assert_eq!(unaccepted(&[1], &BTreeSet::from([0xB]), needed), None);
        assert_eq!(unaccepted(&[1], &BTreeSet::from([0xA]), needed), Some(1));
        assert_eq!(unaccepted(&[1], &BTreeSet::new(), needed), Some(1));
        assert_eq!(unaccepted(&[1, 2], &BTreeSet::from([0xB]), needed), Some(2));
    }
}
