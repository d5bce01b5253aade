//! Recovery classification of the cyclic protocols (TxFlash §3.2 "SCC Recovery", §3.3 "BPCC
//! Recovery"): decides, for every logical page, whether its highest
//! version P_h on flash is committed, and from that the page's last committed version.
//!
//! With Q_l = P_h.next and h_Q the highest version of Q on flash:
//! - Case I, h_Q > l: SCC — committed (Q_l is committed by the SCC invariant, P_h by the cycle
//!   property). BPCC — uncommitted iff Q_l has a straddler (some Q_i, i > l, Q_i.back < l).
//! - Case II, h_Q < l: uncommitted (the transaction never wrote Q_l).
//! - Case III, h_Q = l: the same verdict as Q_h, found by following the link; coming back to a
//!   page already on the path closes a cycle of highest versions: committed.
//!
//! The walk is iterative and memoised, so every page is visited once: O(logical pages).

use super::format::Version;

/// What recovery needs of one intention on flash (duplicates merged).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record {
    pub version: u32,
    pub next: Version,
    /// BPCC back pointer (0 for SCC).
    pub back: u32,
}

/// Whether the highest version of a page on flash is committed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// No version on flash: the page holds its initial (virtual) version 0.
    Initial,
    Committed,
    Uncommitted,
}

/// How many pages each case decided (for the recovery report).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CaseCounts {
    pub case_i: u64,
    pub case_ii: u64,
    pub case_iii: u64,
    pub cycles: u64,
}

const UNKNOWN: u8 = 0;
const COMMITTED: u8 = 1;
const UNCOMMITTED: u8 = 2;
const ON_PATH: u8 = 3;

/// `true` when some version above `l` of the page has a back pointer below `l`: Q_l is
/// straddled, hence uncommitted (TxFlash §3.3).
pub fn straddled(page: &[Record], l: u32) -> bool {
    page.iter().any(|r| r.version > l && r.back < l)
}

/// Classifies the highest version of every page. `pages[p]` holds page p's records sorted by
/// version, highest first, one per version. `bpcc` selects BPCC's Case I.
pub fn classify<P: AsRef<[Record]>>(pages: &[P], bpcc: bool) -> (Vec<Status>, CaseCounts) {
    let pages: Vec<&[Record]> = pages.iter().map(AsRef::as_ref).collect();
    let n = pages.len();
    let mut memo = vec![UNKNOWN; n];
    let mut counts = CaseCounts::default();
    let mut path: Vec<usize> = Vec::new();
    for start in 0..n {
        if memo[start] != UNKNOWN || pages[start].is_empty() {
            continue;
        }
        debug_assert!(path.is_empty());
        let mut cur = start;
        // Each step adds a page to the path, so the loop ends within n steps.
        let verdict = loop {
            match memo[cur] {
                COMMITTED => break COMMITTED,
                UNCOMMITTED => break UNCOMMITTED,
                ON_PATH => {
                    counts.cycles += 1;
                    break COMMITTED;
                }
                _ => {}
            }
            let Some(top) = pages[cur].first() else {
                // Only the initial self-linked version 0 (reached through a link to version 0).
                break COMMITTED;
            };
            memo[cur] = ON_PATH;
            path.push(cur);
            let q = top.next;
            let Some(q_page) = pages.get(q.lpn as usize) else {
                counts.case_ii += 1;
                break UNCOMMITTED; // a link outside the device: never a real transaction
            };
            let h_q = q_page.first().map_or(0, |r| r.version);
            if h_q > q.version {
                counts.case_i += 1;
                break if bpcc && straddled(q_page, q.version) {
                    UNCOMMITTED
                } else {
                    COMMITTED
                };
            } else if h_q < q.version {
                counts.case_ii += 1;
                break UNCOMMITTED;
            } else if q_page.is_empty() {
                break COMMITTED; // a link to the initial version 0
            }
            counts.case_iii += 1;
            cur = q.lpn as usize;
        };
        for p in path.drain(..) {
            memo[p] = verdict;
        }
    }
    let status = (0..n)
        .map(|p| match memo[p] {
            _ if pages[p].is_empty() => Status::Initial,
            COMMITTED => Status::Committed,
            _ => Status::Uncommitted,
        })
        .collect();
    (status, counts)
}

/// The page's last committed version (0 = the initial version) given its top's status: the top
/// itself; else SCC's second-highest version (committed by the SCC invariant) or BPCC's back
/// pointer of the top.
pub fn last_committed(page: &[Record], status: Status, bpcc: bool) -> u32 {
    match status {
        Status::Initial => 0,
        Status::Committed => page[0].version,
        Status::Uncommitted if bpcc => page[0].back,
        Status::Uncommitted => page.get(1).map_or(0, |r| r.version),
    }
}

/// BPCC: whether the record of version `v` is a committed version of its page, given the page's
/// last committed version `c`: at or below `c` and straddled by nothing (committed intentions
/// are never straddled).
pub fn record_committed(page: &[Record], v: u32, c: u32) -> bool {
    v <= c && !straddled(page, v)
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: u32 = 0;
    const B: u32 = 1;
    const C: u32 = 2;
    const D: u32 = 3;
    const E: u32 = 4;

    fn v(lpn: u32, version: u32) -> Version {
        Version { lpn, version }
    }

    /// Pages from (page, version, next, back) tuples.
    fn pages(n: usize, recs: &[(u32, u32, Version, u32)]) -> Vec<Vec<Record>> {
        let mut p = vec![Vec::new(); n];
        for &(lpn, version, next, back) in recs {
            p[lpn as usize].push(Record {
                version,
                next,
                back,
            });
        }
        for x in &mut p {
            x.sort_by_key(|r: &Record| std::cmp::Reverse(r.version));
        }
        p
    }

    /// TxFlash Figure 3(a): A_1 → B_1, B_1 never written (aborted). Case II: uncommitted.
    #[test]
    fn figure_3a_aborted_broken_link_is_uncommitted() {
        for bpcc in [false, true] {
            let p = pages(3, &[(A, 1, v(B, 1), 0)]);
            let (s, counts) = classify(&p, bpcc);
            assert_eq!(s[A as usize], Status::Uncommitted);
            assert_eq!(s[B as usize], Status::Initial);
            assert_eq!(counts.case_ii, 1);
            assert_eq!(last_committed(&p[A as usize], s[A as usize], bpcc), 0);
        }
    }

    /// TxFlash Figure 3(b): {A_1, B_1} committed, then {B_2, C_1} committed and B_1 collected.
    /// The same broken link A_1 → B_1 is now Case I: committed.
    #[test]
    fn figure_3b_committed_broken_link_is_committed() {
        for bpcc in [false, true] {
            let p = pages(
                3,
                &[(A, 1, v(B, 1), 0), (B, 2, v(C, 1), 1), (C, 1, v(B, 2), 0)],
            );
            let (s, counts) = classify(&p, bpcc);
            assert_eq!(s, vec![Status::Committed; 3], "bpcc={bpcc}");
            assert!(counts.case_i >= 1 && counts.cycles == 1);
            assert_eq!(last_committed(&p[B as usize], s[B as usize], bpcc), 2);
        }
    }

    /// TxFlash Figure 4 (SCC): A_1 → B_1 with B_2 present (I, committed); D_1 → C_2 with only
    /// C_1 present (II, uncommitted); B_2 ↔ … cycle (III, committed).
    #[test]
    fn scc_figure_4_cases() {
        let p = pages(
            4,
            &[
                (A, 1, v(B, 1), 0),
                (B, 1, v(A, 1), 0),
                (B, 2, v(C, 1), 0),
                (C, 1, v(B, 2), 0),
                (D, 1, v(C, 2), 0),
            ],
        );
        let (s, _) = classify(&p, false);
        assert_eq!(s[A as usize], Status::Committed, "case I");
        assert_eq!(s[D as usize], Status::Uncommitted, "case II");
        assert_eq!(s[B as usize], Status::Committed, "case III, cycle");
        assert_eq!(s[C as usize], Status::Committed);
        assert_eq!(last_committed(&p[D as usize], s[D as usize], false), 0);
    }

    /// SCC: an uncommitted top falls back to the second-highest version.
    #[test]
    fn scc_uncommitted_top_falls_back_to_second_highest() {
        let p = pages(
            2,
            &[
                (A, 3, v(A, 3), 0),
                (A, 4, v(B, 7), 0), // B_7 never written
                (B, 6, v(B, 6), 0),
            ],
        );
        let (s, _) = classify(&p, false);
        assert_eq!(s[A as usize], Status::Uncommitted);
        assert_eq!(last_committed(&p[A as usize], s[A as usize], false), 3);
        assert_eq!(s[B as usize], Status::Committed, "self-link: one-page tx");
    }

    /// Case III chains through several pages before a decisive case.
    #[test]
    fn case_iii_chain_takes_the_verdict_at_its_end() {
        // A_2 → B_1 → C_1 → D_5 (D has only D_4): uncommitted all along the chain.
        let p = pages(
            4,
            &[
                (A, 2, v(B, 1), 1),
                (B, 1, v(C, 1), 0),
                (C, 1, v(D, 5), 0),
                (D, 4, v(D, 4), 3),
            ],
        );
        for bpcc in [false, true] {
            let (s, c) = classify(&p, bpcc);
            assert_eq!(s[..3], [Status::Uncommitted; 3]);
            assert_eq!(s[D as usize], Status::Committed);
            // A → B, B → C, and D's self-link.
            assert_eq!(c.case_iii, 3);
        }
    }

    /// TxFlash Figure 5 (BPCC). A_1,B_1 committed; {A_2, B_2…} aborted (A_2 left); {A_3, B_3}
    /// committed with A_3.back = 1; {C_2, D_2} aborted with C_2 → D_2; D_3 and D_4 straddle D_2;
    /// E_4 → C_4 (C has only up to C_2).
    #[test]
    fn bpcc_figure_5_cases() {
        let p = pages(
            5,
            &[
                (A, 1, v(B, 1), 0),
                (B, 1, v(A, 1), 0),
                (A, 2, v(B, 2), 1),
                (A, 3, v(B, 3), 1),
                (B, 3, v(A, 3), 1),
                (C, 1, v(C, 1), 0),
                (C, 2, v(D, 2), 1),
                (D, 1, v(D, 1), 0),
                (D, 3, v(D, 3), 1),
                (D, 4, v(E, 4), 1),
                (E, 3, v(E, 3), 2),
                (E, 4, v(C, 4), 3),
            ],
        );
        let (s, _) = classify(&p, true);
        assert_eq!(
            s[A as usize],
            Status::Committed,
            "A_3 ↔ B_3: case III cycle"
        );
        assert_eq!(s[B as usize], Status::Committed);
        assert_eq!(
            s[C as usize],
            Status::Uncommitted,
            "case I: D_4 > D_2 and D_4 straddles D_2"
        );
        assert_eq!(last_committed(&p[C as usize], s[C as usize], true), 1);
        assert_eq!(s[E as usize], Status::Uncommitted, "case II: C_4 > C_2");
        assert_eq!(last_committed(&p[E as usize], s[E as usize], true), 3);
        // D_4 → E_4 (E's top, uncommitted): case III, uncommitted; D falls back to D_1.
        assert_eq!(s[D as usize], Status::Uncommitted);
        assert_eq!(last_committed(&p[D as usize], s[D as usize], true), 1);
        // Record-level verdicts: D_3 is straddled by D_4 (back 1 < 3), A_2 by A_3.
        assert!(!record_committed(&p[D as usize], 3, 1));
        assert!(record_committed(&p[D as usize], 1, 1));
        assert!(!record_committed(&p[A as usize], 2, 3));
        assert!(record_committed(&p[A as usize], 1, 3));
    }

    /// The case that separates SCC and BPCC: an aborted A_2 → B_2 left on flash (BPCC leaves
    /// aborted intentions), then B_3 committed straddling B_2. SCC's Case I would wrongly call
    /// A_2 committed — which is why SCC must erase A_2 first; BPCC finds the straddler.
    #[test]
    fn bpcc_case_i_straddler_vs_scc() {
        let p = pages(
            2,
            &[
                (A, 1, v(A, 1), 0),
                (A, 2, v(B, 2), 1),
                (B, 1, v(B, 1), 0),
                (B, 3, v(B, 3), 1),
            ],
        );
        let (bp, _) = classify(&p, true);
        assert_eq!(bp[A as usize], Status::Uncommitted);
        assert_eq!(last_committed(&p[A as usize], bp[A as usize], true), 1);
        let (scc, _) = classify(&p, false);
        assert_eq!(
            scc[A as usize],
            Status::Committed,
            "without the erasure SCC would misclassify"
        );
        // Without the straddler (B_3.back = 2) BPCC calls A_2 committed: B_2 was committed.
        let q = pages(
            2,
            &[(A, 2, v(B, 2), 1), (B, 3, v(B, 3), 2), (B, 1, v(B, 1), 0)],
        );
        assert_eq!(classify(&q, true).0[A as usize], Status::Committed);
    }

    #[test]
    fn links_outside_the_device_are_uncommitted() {
        let p = pages(1, &[(A, 1, v(900, 1), 0)]);
        assert_eq!(classify(&p, false).0[0], Status::Uncommitted);
    }
}
