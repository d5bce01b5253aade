//! Recovery of the cyclic protocols from flash alone (TxFlash §3.2 "SCC Recovery", §3.3 "BPCC
//! Recovery", §4.1 summary pages; [R] where noted).
//!
//! 1. Every block: an erase-torn block is erased; a block whose last page is a valid summary
//!    gives all its records in one read; any other block (open at the crash, or a damaged
//!    summary) is read OOB by OOB to the first erased page, torn pages skipped.
//! 2. S = the intentions found (GC duplicates merged, the lowest PPN is the principal copy);
//!    every page's highest version is classified by the three cases ([`super::classify`]).
//! 3. The last committed version of each page becomes its mapping; versions continue above
//!    everything in S ∪ R.
//! 4. SCC: every uncommitted intention (necessarily a page's highest version) is erased — its
//!    blocks relocated and erased — before the device serves a write (SCC invariant).
//!    BPCC: uncommitted intentions stay; the straddle responsibility sets are rebuilt: each one
//!    is a member of the set of the first committed version above its next-link target, and that
//!    version, if superseded, stays pinned.

use super::classify::{self, Record, Status};
use super::format::{self, CyclicOob, Kind, Protocol, Version, MAX_OOB_BYTES};
use super::{Rec, TxFlashCyclic, NONE};
use flash::{BlockId, Flash, Ppn};
use ftl::{DesignOptions, FtlError, RecoveryReport};

/// Step 1, the scan both protocols share ([`crate::summary_scan`]), with the cyclic records.
fn scan(
    flash: &mut Flash,
    protocol: Protocol,
    start: u64,
) -> Result<crate::summary_scan::BlockScan<CyclicOob>, FtlError> {
    crate::summary_scan::scan_blocks(
        flash,
        start,
        &crate::summary_scan::RecordFormat {
            oob_bytes: MAX_OOB_BYTES,
            decode_oob: &|b: &[u8]| CyclicOob::decode(protocol, b),
            is_summary: &|r: &CyclicOob| r.kind == Kind::Summary,
            decode_summary: &format::decode_summary,
            keep: &|r: &CyclicOob| r.kind != Kind::Summary,
        },
    )
}

/// Records recovery analyses (TxFlash §5.1): SCC only the top two versions of each page (only
/// a page's highest version can be uncommitted, so the last committed one is at most one
/// below); BPCC every version (a straddler may sit anywhere above the version it straddles),
/// plus the straddle responsibility sets it rebuilds (counted by the caller).
pub(crate) fn records_analysed(pages: &[&[classify::Record]], bpcc: bool) -> u64 {
    let per_page = if bpcc { usize::MAX } else { 2 };
    pages.iter().map(|p| p.len().min(per_page) as u64).sum()
}

/// S: one record per (page, version) found, each page's highest version first, in one array
/// (page `p`'s at `start[p]..start[p + 1]`). A vector per page, and one per version for its
/// copies in a hash map, were thousands of allocations per recovery: a fifth of a TxFlash crash
/// campaign, most of it the allocator touching fresh memory.
struct PageRecords {
    start: Vec<u32>,
    records: Vec<Record>,
}

impl PageRecords {
    /// Every page's records, by page.
    fn pages(&self) -> Vec<&[Record]> {
        self.start
            .windows(2)
            .map(|w| &self.records[w[0] as usize..w[1] as usize])
            .collect()
    }
}

/// Every physical copy of each version found: per page (at `start[p]..start[p + 1]`), its
/// versions highest first, each version's copies lowest PPN first, as (version, PPN, index of
/// the copy in the scan).
struct Copies {
    start: Vec<u32>,
    entries: Vec<(u32, Ppn, u32)>,
}

impl Copies {
    /// The copies of `v` (`None` if none was found).
    fn get(&self, v: &Version) -> Option<&[(u32, Ppn, u32)]> {
        let lpn = v.lpn as usize;
        let page = &self.entries[*self.start.get(lpn)? as usize..self.start[lpn + 1] as usize];
        let from = page.partition_point(|c| c.0 > v.version);
        let to = page.partition_point(|c| c.0 >= v.version);
        (to > from).then(|| &page[from..to])
    }
    /// The copies of a version that was found.
    fn of(&self, v: &Version) -> &[(u32, Ppn, u32)] {
        self.get(v).expect("a version found has copies")
    }
}

impl TxFlashCyclic {
    /// Rebuilds the device from flash alone.
    pub fn recover(
        mut flash: Flash,
        protocol: Protocol,
        o: &DesignOptions,
    ) -> Result<(TxFlashCyclic, RecoveryReport), FtlError> {
        let before = flash.stats().clone();
        let start = flash.idle_ns();
        let s = scan(&mut flash, protocol, start)?;
        let g = flash.geometry().clone();
        let mut dev = TxFlashCyclic::empty(flash, protocol, o)?;
        let bpcc = dev.bpcc();
        let (records, copies) = dev.build_s(&s.found);
        let pages = records.pages();
        let (status, cases) = classify::classify(&pages, bpcc);
        for b in 0..g.blocks() {
            if s.used[b as usize] {
                dev.space.pool.mark_full(BlockId(b));
            }
        }
        let (uncommitted_ppns, uncommitted_tops) = dev.apply_verdicts(&pages, &copies, &status)?;
        let mut members = 0u64;
        if bpcc {
            members = dev.rebuild_srs(&pages, &copies);
        }
        let analysed = records_analysed(&pages, bpcc) + members;
        let analysis_ns = crate::summary_scan::charge_analysis(
            &mut dev.flash,
            analysed,
            dev.p.recovery_ns_per_record,
        );
        for b in 0..g.blocks() {
            if s.used[b as usize] {
                dev.space.validity.index_block(BlockId(b));
            }
        }
        dev.arrivals = ftl::ArrivalClock::starting_at(dev.flash.idle_ns());
        let mut erased_blocks = 0;
        if !uncommitted_ppns.is_empty() {
            let before_erases = dev.abort_erases;
            let end = dev.erase_intentions(&uncommitted_ppns, start)?;
            erased_blocks = dev.abort_erases - before_erases;
            for b in dev.busy_until.iter_mut() {
                *b = (*b).max(end);
            }
        }
        dev.arrivals = ftl::ArrivalClock::starting_at(dev.flash.idle_ns());
        let mut report = RecoveryReport::measure(&dev.flash, &before, start);
        let details = [
            ("summary_pages_read", s.summaries as f64),
            ("pages_scanned", s.scanned as f64),
            ("records_found", s.found.len() as f64),
            ("case_i", cases.case_i as f64),
            ("case_ii", cases.case_ii as f64),
            ("case_iii", cases.case_iii as f64),
            ("cycles", cases.cycles as f64),
            ("uncommitted_tops", uncommitted_tops as f64),
            ("scc_erased_blocks", erased_blocks as f64),
            ("srs_members", members as f64),
            ("pinned_versions", dev.pinned.len() as f64),
            ("records_analysed", analysed as f64),
            ("analysis_ms", analysis_ns as f64 / 1e6),
        ];
        for (k, v) in details {
            report.details.push((k.into(), v));
        }
        Ok((dev, report))
    }

    /// Step 2: S as one record per (page, version), highest version first, with every physical
    /// copy (lowest PPN first); also the summary entries and the version high-water marks
    /// (S ∪ R, [R]). A version's record is that of its first copy in scan order.
    fn build_s(&mut self, found: &[(Ppn, CyclicOob)]) -> (PageRecords, Copies) {
        let n = self.logical as usize;
        // The intentions of this device, counted per page, then placed page by page.
        let mut start = vec![0u32; n + 1];
        let mut kept = Vec::with_capacity(found.len());
        for (k, (ppn, r)) in found.iter().enumerate() {
            self.summ[ppn.0 as usize] = format::encode_entry(r);
            if r.lpn >= n as u64 || r.version == 0 {
                continue; // foreign record: not an intention of this device
            }
            let i = r.lpn as usize;
            self.version[i] = self.version[i].max(r.version);
            if (r.next_lpn as usize) < n {
                let j = r.next_lpn as usize;
                self.version[j] = self.version[j].max(r.next_version);
            }
            start[i + 1] += 1;
            kept.push(k as u32);
        }
        for i in 0..n {
            start[i + 1] += start[i];
        }
        let mut next = start.clone();
        let mut entries = vec![(0, Ppn(0), 0); kept.len()];
        for k in kept {
            let (ppn, r) = &found[k as usize];
            let at = &mut next[r.lpn as usize];
            entries[*at as usize] = (r.version, *ppn, k);
            *at += 1;
        }
        let mut records = Vec::with_capacity(entries.len());
        let mut record_start = Vec::with_capacity(n + 1);
        for lpn in 0..n {
            record_start.push(records.len() as u32);
            let page = &mut entries[start[lpn] as usize..start[lpn + 1] as usize];
            page.sort_unstable_by_key(|&(version, ppn, _)| (std::cmp::Reverse(version), ppn));
            for run in page.chunk_by(|a, b| a.0 == b.0) {
                let first = run.iter().map(|c| c.2).min().expect("a run has a copy");
                let r = &found[first as usize].1;
                records.push(Record {
                    version: r.version,
                    next: r.next(),
                    back: r.back,
                });
            }
        }
        record_start.push(records.len() as u32);
        let records = PageRecords {
            start: record_start,
            records,
        };
        (records, Copies { start, entries })
    }

    /// Step 3: maps every page to its last committed version. Returns the physical copies of
    /// SCC's uncommitted intentions (to erase) and the number of uncommitted highest versions.
    fn apply_verdicts(
        &mut self,
        pages: &[&[Record]],
        copies: &Copies,
        status: &[Status],
    ) -> Result<(Vec<Ppn>, u64), FtlError> {
        let bpcc = self.bpcc();
        let dev = self;
        let mut uncommitted_ppns: Vec<Ppn> = Vec::new();
        let mut uncommitted_tops = 0u64;
        for i in 0..pages.len() {
            let c = classify::last_committed(pages[i], status[i], bpcc);
            dev.committed[i] = c;
            if status[i] == Status::Uncommitted {
                uncommitted_tops += 1;
                if !bpcc {
                    let top = Version {
                        lpn: i as u32,
                        version: pages[i][0].version,
                    };
                    uncommitted_ppns.extend(copies.of(&top).iter().map(|c| c.1));
                }
            }
            if c == 0 {
                continue;
            }
            let id = Version {
                lpn: i as u32,
                version: c,
            };
            let ppn = copies
                .get(&id)
                .and_then(|v| v.first())
                .map(|c| c.1)
                .ok_or_else(|| {
                    FtlError::Corrupt(format!(
                        "page {i}: its last committed version {c} is not on flash"
                    ))
                })?;
            dev.map[i] = ppn.0;
            dev.space.validity.set_valid(ppn, i as u32);
        }
        Ok((uncommitted_ppns, uncommitted_tops))
    }

    /// BPCC: rebuilds the straddle responsibility sets after recovery. Every intention above its
    /// page's last committed version is uncommitted and a member; its holder is the first
    /// committed version above its target (rules 2 and 3), pinned if superseded. Returns the
    /// number of members.
    fn rebuild_srs(&mut self, pages: &[&[Record]], copies: &Copies) -> u64 {
        let n = pages.len();
        let mut members = 0;
        for i in 0..n {
            let c = self.committed[i];
            for r in pages[i].iter().take_while(|r| r.version > c) {
                let q = Version {
                    lpn: i as u32,
                    version: r.version,
                };
                let t = r.next;
                let holder = pages.get(t.lpn as usize).and_then(|tp| {
                    let ct = self.committed[t.lpn as usize];
                    tp.iter()
                        .rev()
                        .find(|x| {
                            x.version > t.version && classify::record_committed(tp, x.version, ct)
                        })
                        .map(|x| Version {
                            lpn: t.lpn,
                            version: x.version,
                        })
                });
                let ncopies = copies.of(&q).len() as u32;
                self.srs.add_dangling(q, t, ncopies, 0, holder);
                members += 1;
                let Some(h) = holder else { continue };
                if self.committed[h.lpn as usize] == h.version || self.pinned.contains_key(&h) {
                    continue;
                }
                let ppn = copies.of(&h)[0].1;
                let rec = self.new_rec(Rec::Pinned { id: h });
                self.space.validity.set_valid(ppn, self.logical + rec);
                self.pinned.insert(
                    h,
                    super::PinnedPage {
                        ppn,
                        rec,
                        superseded_ns: 0,
                    },
                );
            }
        }
        debug_assert!(self
            .map
            .iter()
            .all(|&p| p == NONE || p < self.summ.len() as u32));
        members
    }
}
