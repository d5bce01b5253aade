//! The optimal recovery point (OPTR §3.5, Algorithm 1).
//!
//! Vertices are the post-checkpoint requests in wid order, straight edges join consecutive wids
//! and every coalescing record `<x, y>` is a bent edge. A valid cut is crossed by exactly one
//! edge, a straight one (no coalesced pair split), and keeps every incomplete request on the sink
//! side. Both functions return an exclusive bound: recover every request with wid < bound.

/// A coalescing record: a page of request `earlier` was overwritten in the cache by request
/// `later` before it reached flash (OPTR §3.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Coalescing {
    pub earlier: u64,
    pub later: u64,
}

/// Phase 3 of recovery (OPTR §3.1–§3.2; [R] where noted): the smallest incomplete
/// post-checkpoint wid. `pages` are `(wid, size)` of the data pages found after the checkpoint
/// (relocated pages and wids ≤ `seal_wid` excluded by the caller), `records` the coalescing
/// records with the earlier request's size. Request i is incomplete iff `P_i + D_i < Size_i`;
/// a wid in `(seal_wid, max_seen]` with no page and no record is incomplete too. Returns
/// `max_seen + 1` when every request is complete.
pub fn first_incomplete(seal_wid: u64, pages: &[(u64, u32)], records: &[(Coalescing, u32)]) -> u64 {
    use rustc_hash::FxHashMap;
    // wid -> (P, D, Size)
    let mut seen: FxHashMap<u64, (u32, u32, u32)> = FxHashMap::default();
    let mut max_seen = seal_wid;
    for &(wid, size) in pages.iter().filter(|p| p.0 > seal_wid) {
        let e = seen.entry(wid).or_insert((0, 0, size));
        e.0 += 1;
        max_seen = max_seen.max(wid);
    }
    for &(r, size) in records.iter().filter(|r| r.0.earlier > seal_wid) {
        let e = seen.entry(r.earlier).or_insert((0, 0, size));
        e.1 += 1;
        max_seen = max_seen.max(r.later);
    }
    (seal_wid + 1..=max_seen)
        .find(|w| seen.get(w).is_none_or(|&(p, d, size)| p + d < size))
        .unwrap_or(max_seen + 1)
}

/// Algorithm 1: start at the first incomplete request and move the cut before `x` whenever a
/// pair `(x, y)` crosses it, scanning records by decreasing `x` (one pass suffices: a record
/// with a larger `x` can never cross a cut that has moved below it).
pub fn algorithm1(wid_incomplete: u64, records: &[Coalescing]) -> u64 {
    let mut sorted: Vec<Coalescing> = records.to_vec();
    sorted.sort_by_key(|r| std::cmp::Reverse(r.earlier));
    let mut bound = wid_incomplete;
    for r in sorted {
        if r.earlier < bound && r.later >= bound {
            bound = r.earlier;
        }
    }
    bound
}

/// The naive flow-network search: extend the source side one request at a time from the
/// checkpoint (`first` is the first post-checkpoint wid) and keep the largest valid cut.
pub fn naive(first: u64, last: u64, incomplete: &[u64], records: &[Coalescing]) -> u64 {
    let mut best = first;
    for bound in first..=last + 1 {
        // source side = [first, bound)
        if incomplete.iter().any(|&w| w >= first && w < bound) {
            break;
        }
        let split = records
            .iter()
            .any(|r| r.earlier < bound && r.later >= bound && r.earlier >= first);
        if !split {
            best = bound;
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn c(earlier: u64, later: u64) -> Coalescing {
        Coalescing { earlier, later }
    }

    /// The paper's example: 6 requests, 7 candidate cuts; request 4 is incomplete, request 1 was
    /// coalesced with 2 and 3 with 5. Only cuts 1 and 3 are valid; the optimum recovers 1 and 2.
    #[test]
    fn paper_example() {
        let records = [c(1, 2), c(3, 5)];
        let valid: Vec<u64> = (1..=7)
            .filter(|&cut| {
                let bound = cut; // cut k keeps requests 1..k-1
                !(1..bound).any(|w| w == 4)
                    && !records
                        .iter()
                        .any(|r| r.earlier < bound && r.later >= bound)
            })
            .collect();
        assert_eq!(valid, vec![1, 3]);
        assert_eq!(algorithm1(4, &records), 3);
        assert_eq!(naive(1, 6, &[4], &records), 3);
    }

    #[test]
    fn incomplete_request_test() {
        let r = |x, y, size| (c(x, y), size);
        // request 11 (3 pages): 2 pages on flash + 1 coalesced into 12 -> complete;
        // request 12 (1 page) complete; request 13 (2 pages): 1 page -> incomplete
        let pages = [(11, 3), (11, 3), (12, 1), (13, 2), (9, 4)];
        assert_eq!(first_incomplete(10, &pages, &[r(11, 12, 3)]), 13);
        // without the record, 11 lacks a page: P + D = 2 < 3
        assert_eq!(first_incomplete(10, &pages, &[]), 11);
        // a wid with no evidence at all (14 between seen wids) is incomplete
        let pages = [(11, 1), (12, 1), (13, 1), (15, 1)];
        assert_eq!(first_incomplete(10, &pages, &[]), 14);
        // everything complete: max_seen + 1; a fully coalesced request counts through records
        let pages = [(12, 1)];
        assert_eq!(first_incomplete(10, &pages, &[r(11, 12, 1)]), 13);
        assert_eq!(first_incomplete(10, &[], &[]), 11);
    }

    proptest! {
        #[test]
        fn algorithm1_matches_naive(
            n in 1u64..40,
            inc in proptest::collection::vec(0u64..40, 0..4),
            recs in proptest::collection::vec((0u64..40, 1u64..10), 0..12),
        ) {
            let first = 1;
            let last = n;
            let incomplete: Vec<u64> = inc.into_iter().filter(|&w| w >= first && w <= last).collect();
            let records: Vec<Coalescing> = recs
                .into_iter()
                .map(|(x, d)| c(first + x % n, first + x % n + d))
                .filter(|r| r.later <= last)
                .collect();
            let wid_inc = incomplete.iter().copied().min().unwrap_or(last + 1);
            prop_assert_eq!(algorithm1(wid_inc, &records), naive(first, last, &incomplete, &records));
        }
    }
}
