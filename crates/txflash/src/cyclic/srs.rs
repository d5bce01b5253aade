//! BPCC straddle responsibility sets (TxFlash §3.3 "BPCC Garbage Collection"; [R] where noted).
//!
//! For P_k with back pointer i, SRS(P_k) = {Q_l ∈ S | Q_l.next = P_j, i < j < k}: the
//! uncommitted intentions whose classification (Case I) depends on P_k's back pointer. GC
//! precedence: P_k may be collected only once SRS(P_k) is empty (and a newer version of P is
//! committed). The three optimisations prune the sets:
//!
//! 1. Q_l leaves every set once a higher version of Q is committed ([`Srs::on_commit`]).
//! 2. If Q_l ∈ SRS(P_j) ∩ SRS(P_k), j < k, it leaves SRS(P_j).
//! 3. An aborted P_j with no higher committed version of P has an empty set.
//!
//! Rules 2 and 3 decide *who* holds a member, so they are applied when a member is placed: two
//! straddlers of the same P_m are either both uncommitted or the higher one is the first committed
//! version above m (a committed version above m would be the later one's back pointer, and that
//! pointer is below m). By rule 3 the uncommitted ones hold nothing, and by rule 2 the lower ones
//! hold nothing, so each member has at most one holder: the first committed version of P above
//! m. It is placed there when that version commits ([`Srs::on_commit`]); until then the target
//! is *open*. A member leaves when every physical copy of it is erased ([`Srs::on_erased`]) or by
//! rule 1. When a set empties, its holder is *released*, with the instant from which erasing it
//! is safe (the member's erase, or the superseding commit, is on flash).

use super::format::Version;
use rustc_hash::FxHashMap;

/// An uncommitted intention on flash whose next-link target is uncommitted: a potential member
/// of a straddle responsibility set.
#[derive(Clone, Debug)]
struct Dangling {
    target: Version,
    /// Physical copies still on flash (GC duplicates after a crash).
    copies: u32,
    /// When the last erased copy's erase ends.
    gone_ns: u64,
    holder: Option<Version>,
}

#[derive(Clone, Copy, Debug, Default)]
struct Set {
    members: u32,
    /// Latest instant a member left it (the holder's erase must not start before).
    dep_ns: u64,
}

/// All straddle responsibility sets of a device.
#[derive(Clone, Debug, Default)]
pub struct Srs {
    dangling: FxHashMap<Version, Dangling>,
    /// page → versions of its dangling intentions (rule 1 looks them up by page).
    by_page: FxHashMap<u32, Vec<u32>>,
    /// target P_m → the dangling Q_l with Q_l.next = P_m.
    referrers: FxHashMap<Version, Vec<Version>>,
    /// page P → uncommitted targets P_m not yet straddled by a committed version.
    open_targets: FxHashMap<u32, Vec<u32>>,
    sets: FxHashMap<Version, Set>,
}

impl Srs {
    /// Registers an uncommitted intention `q` on flash (aborted, or found uncommitted by
    /// recovery) whose next-link is `target`. `holder` is its committed straddler if one exists
    /// already (recovery); otherwise the target stays open until one commits.
    pub fn add_dangling(
        &mut self,
        q: Version,
        target: Version,
        copies: u32,
        gone_ns: u64,
        holder: Option<Version>,
    ) {
        debug_assert!(copies > 0);
        if self.dangling.contains_key(&q) {
            return;
        }
        self.dangling.insert(
            q,
            Dangling {
                target,
                copies,
                gone_ns,
                holder,
            },
        );
        self.by_page.entry(q.lpn).or_default().push(q.version);
        self.referrers.entry(target).or_default().push(q);
        match holder {
            Some(h) => self.sets.entry(h).or_default().members += 1,
            None => {
                let t = self.open_targets.entry(target.lpn).or_default();
                if !t.contains(&target.version) {
                    t.push(target.version);
                }
            }
        }
    }

    /// `p` (with back pointer `back`) has committed, durable at `commit_end`. Applies rule 1 to
    /// page p's dangling versions below it and makes `p` the holder of every open target it
    /// straddles. Returns the holders whose set became empty, with their release instant.
    pub fn on_commit(&mut self, p: Version, back: u32, commit_end: u64) -> Vec<(Version, u64)> {
        let mut released = Vec::new();
        // Rule 1: lower versions of this page can never again be its highest version.
        if let Some(vs) = self.by_page.get(&p.lpn) {
            let gone: Vec<u32> = vs.iter().copied().filter(|&l| l < p.version).collect();
            for l in gone {
                let q = Version {
                    lpn: p.lpn,
                    version: l,
                };
                if let Some(r) = self.remove(q, commit_end) {
                    released.push(r);
                }
            }
        }
        // Straddles: p is the first committed version above each open target m, back < m < k.
        if let Some(ms) = self.open_targets.get_mut(&p.lpn) {
            let (take, keep): (Vec<u32>, Vec<u32>) =
                ms.iter().partition(|&&m| back < m && m < p.version);
            *ms = keep;
            if ms.is_empty() {
                self.open_targets.remove(&p.lpn);
            }
            for m in take {
                let target = Version {
                    lpn: p.lpn,
                    version: m,
                };
                let qs = self.referrers.get(&target).cloned().unwrap_or_default();
                for q in qs {
                    let d = self.dangling.get_mut(&q).expect("referrer is dangling");
                    debug_assert!(d.holder.is_none(), "a member has one holder (rules 2, 3)");
                    d.holder = Some(p);
                    self.sets.entry(p).or_default().members += 1;
                }
            }
        }
        released
    }

    /// One physical copy of `q` was erased (erase ends at `erase_end`). Returns the released
    /// holder, if `q` was the last member of its set.
    pub fn on_erased(&mut self, q: Version, erase_end: u64) -> Option<(Version, u64)> {
        let d = self.dangling.get_mut(&q)?;
        d.copies -= 1;
        d.gone_ns = d.gone_ns.max(erase_end);
        if d.copies > 0 {
            return None;
        }
        let gone = d.gone_ns;
        self.remove(q, gone)
    }

    /// Removes member `q` (no longer needed from `at_ns`); returns its holder if released.
    fn remove(&mut self, q: Version, at_ns: u64) -> Option<(Version, u64)> {
        let d = self.dangling.remove(&q)?;
        if let Some(vs) = self.by_page.get_mut(&q.lpn) {
            vs.retain(|&v| v != q.version);
            if vs.is_empty() {
                self.by_page.remove(&q.lpn);
            }
        }
        if let Some(rs) = self.referrers.get_mut(&d.target) {
            rs.retain(|&r| r != q);
            if rs.is_empty() {
                self.referrers.remove(&d.target);
                if let Some(ms) = self.open_targets.get_mut(&d.target.lpn) {
                    ms.retain(|&m| m != d.target.version);
                    if ms.is_empty() {
                        self.open_targets.remove(&d.target.lpn);
                    }
                }
            }
        }
        let h = d.holder?;
        let set = self.sets.get_mut(&h).expect("holder has a set");
        set.members -= 1;
        set.dep_ns = set.dep_ns.max(at_ns);
        if set.members == 0 {
            let s = self.sets.remove(&h).unwrap();
            return Some((h, s.dep_ns));
        }
        None
    }

    /// Whether `p`'s set is non-empty (it must not be collected).
    pub fn holds(&self, p: Version) -> bool {
        self.sets.contains_key(&p)
    }

    /// Members of `p`'s set.
    pub fn set_size(&self, p: Version) -> u32 {
        self.sets.get(&p).map_or(0, |s| s.members)
    }

    /// Whether `q` is still a (potential) member.
    pub fn is_dangling(&self, q: Version) -> bool {
        self.dangling.contains_key(&q)
    }

    pub fn dangling_count(&self) -> usize {
        self.dangling.len()
    }

    pub fn holders(&self) -> impl Iterator<Item = Version> + '_ {
        self.sets.keys().copied()
    }

    /// Member counts equal the dangling entries that name each holder.
    pub fn check(&self) -> Result<(), ftl::InvariantViolation> {
        let mut count: FxHashMap<Version, u32> = FxHashMap::default();
        for (q, d) in &self.dangling {
            if d.copies == 0 {
                return Err(ftl::violation!("{q:?} is dangling with no copy"));
            }
            if let Some(h) = d.holder {
                *count.entry(h).or_default() += 1;
            }
        }
        for (h, s) in &self.sets {
            if count.get(h).copied().unwrap_or(0) != s.members || s.members == 0 {
                return Err(ftl::violation!(
                    "SRS of {h:?}: {} members recorded",
                    s.members
                ));
            }
        }
        if count.len() != self.sets.len() {
            return Err("a member names a holder without a set".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(lpn: u32, version: u32) -> Version {
        Version { lpn, version }
    }

    /// Aborted {A_2 → B_2}: B_3 commits (back 1) and holds A_2; B_3 is released only when A_2 is
    /// erased (GC precedence), at the erase's end.
    #[test]
    fn straddler_holds_member_until_it_is_erased() {
        let mut s = Srs::default();
        s.add_dangling(v(0, 2), v(1, 2), 1, 0, None);
        assert!(s.on_commit(v(1, 3), 1, 100).is_empty());
        assert!(s.holds(v(1, 3)));
        assert_eq!(s.set_size(v(1, 3)), 1);
        s.check().unwrap();
        assert_eq!(s.on_erased(v(0, 2), 500), Some((v(1, 3), 500)));
        assert!(!s.holds(v(1, 3)));
        assert_eq!(s.dangling_count(), 0);
        s.check().unwrap();
    }

    /// Rule 1: a committed A_3 removes A_2 from SRS(B_3).
    #[test]
    fn rule_1_higher_committed_version_releases() {
        let mut s = Srs::default();
        s.add_dangling(v(0, 2), v(1, 2), 1, 0, None);
        s.on_commit(v(1, 3), 1, 100);
        assert_eq!(s.on_commit(v(0, 3), 1, 250), vec![(v(1, 3), 250)]);
        assert!(!s.is_dangling(v(0, 2)));
    }

    /// Rules 2 and 3: an aborted straddler (D_3, back 1, of target D_2) holds nothing; the
    /// committed D_4 (back 1) does.
    #[test]
    fn rules_2_and_3_only_the_committed_straddler_holds() {
        let mut s = Srs::default();
        s.add_dangling(v(2, 2), v(3, 2), 1, 0, None); // C_2 → D_2, aborted
                                                      // D_3 aborted: never commits, so it never holds (rule 3).
        s.add_dangling(v(3, 3), v(4, 4), 1, 0, None); // D_3 → E_4, aborted
        assert!(!s.holds(v(3, 3)));
        s.on_commit(v(3, 4), 1, 10); // D_4 straddles D_2 (and D_3)
        assert!(s.holds(v(3, 4)));
        assert_eq!(
            s.set_size(v(3, 4)),
            1,
            "C_2 → D_2 only; D_3 → E_4 targets E"
        );
        // Rule 1 on D: D_3 is below the committed D_4.
        assert!(!s.is_dangling(v(3, 3)));
        s.check().unwrap();
    }

    /// Duplicate copies (a GC crash): the member leaves only when the last copy is erased.
    #[test]
    fn every_copy_must_be_erased() {
        let mut s = Srs::default();
        s.add_dangling(v(0, 5), v(1, 5), 2, 0, Some(v(1, 6)));
        assert!(s.on_erased(v(0, 5), 40).is_none());
        assert_eq!(s.on_erased(v(0, 5), 30), Some((v(1, 6), 40)));
        assert!(s.on_erased(v(9, 9), 1).is_none(), "unknown record");
    }
}
