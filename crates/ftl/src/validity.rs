//! Which physical pages hold live data, who owns them, and a greedy GC index.
//!
//! `owner[ppn]` is an opaque 32-bit owner chosen by the design (usually the LPN; designs that
//! also keep translation pages in the pool tag those with a high bit). A design whose owners can
//! be read back from the page itself (its OOB record names them) may keep one bit per page
//! instead of 32 ([`Validity::with_owners_on_flash`]; issue #19: 65 MB of a 64 GB device). The greedy index keeps
//! `Full` blocks in buckets by valid count, so the emptiest block is found in O(pages per block)
//! instead of a scan of every block — the hot path of a 131,072-block device.
//! It also remembers, per block, when the newest program that invalidated one of its pages ends:
//! erasing the block before then could lose both the old and the new copy in a power cut.

use flash::{BlockId, Flash, Geometry, Ppn};

use crate::wear_index::WearIndex;

pub const NO_OWNER: u32 = u32::MAX;
const NIL: u32 = u32::MAX;

/// Reads a live page's owner back from the device (the design's OOB record), for a validity
/// that keeps only which pages are live.
pub type OwnerOnFlash = fn(&Flash, Ppn) -> Option<u32>;

#[derive(Clone, Debug)]
enum Owners {
    /// The owner of every page, `NO_OWNER` where none is live.
    Kept(Vec<u32>),
    /// One bit per page, set when it is live; the owner is on the page itself.
    OnFlash { live: Vec<u64>, read: OwnerOnFlash },
}

#[derive(Clone, Debug)]
pub struct Validity {
    geometry: Geometry,
    owners: Owners,
    valid: Vec<u32>,
    invalidated_by_ns: Vec<u64>,
    // greedy buckets: doubly linked lists of blocks per valid count
    in_index: Vec<bool>,
    prev: Vec<u32>,
    next: Vec<u32>,
    head: Vec<u32>,
    /// The indexed blocks by erase count, for wear levelling.
    wear: WearIndex,
}

impl Validity {
    pub fn new(geometry: &Geometry) -> Validity {
        let owners = Owners::Kept(vec![NO_OWNER; geometry.pages() as usize]);
        Validity::with_owners(geometry, owners)
    }

    /// A validity that keeps one bit per page and reads owners back with `read` (which must
    /// return what [`set_valid`](Self::set_valid) was given for every live page; the design's
    /// invariant check compares them). [`owner`](Self::owner) and
    /// [`valid_pages`](Self::valid_pages) then need the device: use
    /// [`owner_on`](Self::owner_on) and [`live_owners_into`](Self::live_owners_into).
    pub fn with_owners_on_flash(geometry: &Geometry, read: OwnerOnFlash) -> Validity {
        let live = flash::resident_vec((geometry.pages() as usize).div_ceil(64), 0);
        Validity::with_owners(geometry, Owners::OnFlash { live, read })
    }

    fn with_owners(geometry: &Geometry, owners: Owners) -> Validity {
        let blocks = geometry.blocks() as usize;
        Validity {
            geometry: geometry.clone(),
            owners,
            valid: vec![0; blocks],
            invalidated_by_ns: vec![0; blocks],
            in_index: vec![false; blocks],
            prev: vec![NIL; blocks],
            next: vec![NIL; blocks],
            head: vec![NIL; geometry.pages_per_block as usize + 1],
            wear: WearIndex::new(blocks),
        }
    }

    /// Forgets every page and block, keeping the arrays (a recovery that rebuilds the validity
    /// of a large device does not hold a second copy meanwhile).
    pub fn clear(&mut self) {
        match &mut self.owners {
            Owners::Kept(owner) => owner.fill(NO_OWNER),
            Owners::OnFlash { live, .. } => live.fill(0),
        }
        self.valid.fill(0);
        self.invalidated_by_ns.fill(0);
        self.in_index.fill(false);
        self.prev.fill(NIL);
        self.next.fill(NIL);
        self.head.fill(NIL);
        self.wear.clear();
    }

    /// Heap bytes: the owner of every page, and the per-block counters and greedy index.
    pub fn memory(&self) -> [(&'static str, u64); 2] {
        use flash::vec_bytes;
        [
            (
                "page_owners",
                match &self.owners {
                    Owners::Kept(owner) => vec_bytes(owner),
                    Owners::OnFlash { live, .. } => vec_bytes(live),
                },
            ),
            (
                "block_validity",
                vec_bytes(&self.valid)
                    + vec_bytes(&self.invalidated_by_ns)
                    + vec_bytes(&self.in_index)
                    + vec_bytes(&self.prev)
                    + vec_bytes(&self.next)
                    + vec_bytes(&self.head)
                    + self.wear.memory(),
            ),
        ]
    }

    /// The owner of a live page (a validity that keeps owners; see
    /// [`with_owners_on_flash`](Self::with_owners_on_flash)).
    pub fn owner(&self, ppn: Ppn) -> Option<u32> {
        let o = self.kept()[ppn.0 as usize];
        (o != NO_OWNER).then_some(o)
    }
    /// The owner of a live page, read from `flash` if this validity does not keep owners.
    pub fn owner_on(&self, flash: &Flash, ppn: Ppn) -> Option<u32> {
        match &self.owners {
            Owners::Kept(_) => self.owner(ppn),
            Owners::OnFlash { read, .. } => self.is_valid(ppn).then(|| read(flash, ppn)).flatten(),
        }
    }
    #[inline]
    pub fn is_valid(&self, ppn: Ppn) -> bool {
        let i = ppn.0 as usize;
        match &self.owners {
            Owners::Kept(owner) => owner[i] != NO_OWNER,
            Owners::OnFlash { live, .. } => live[i / 64] >> (i % 64) & 1 != 0,
        }
    }
    fn kept(&self) -> &[u32] {
        match &self.owners {
            Owners::Kept(owner) => owner,
            Owners::OnFlash { .. } => {
                panic!("this validity reads owners from the flash: use owner_on / live_owners_into")
            }
        }
    }
    /// Marks page `i` live (`Some(owner)`) or not, returning whether it was live.
    fn set_live(&mut self, i: usize, owner: Option<u32>) -> bool {
        match &mut self.owners {
            Owners::Kept(o) => std::mem::replace(&mut o[i], owner.unwrap_or(NO_OWNER)) != NO_OWNER,
            Owners::OnFlash { live, .. } => {
                let (word, bit) = (&mut live[i / 64], 1u64 << (i % 64));
                let was = *word & bit != 0;
                if owner.is_some() {
                    *word |= bit
                } else {
                    *word &= !bit
                }
                was
            }
        }
    }
    pub fn valid_count(&self, block: BlockId) -> u32 {
        self.valid[block.0 as usize]
    }
    /// End of the newest program that made a page of `block` stale.
    pub fn invalidated_by_ns(&self, block: BlockId) -> u64 {
        self.invalidated_by_ns[block.0 as usize]
    }

    /// Live pages of a block with their owners (a validity that keeps owners).
    pub fn valid_pages(&self, block: BlockId) -> impl Iterator<Item = (Ppn, u32)> + '_ {
        let first = self.geometry.first_page(block).0;
        let owner = self.kept();
        (first..first + self.geometry.pages_per_block).filter_map(move |p| {
            let o = owner[p as usize];
            (o != NO_OWNER).then_some((Ppn(p), o))
        })
    }

    /// Live pages of a block with their owners into `out` (cleared first, its buffer reused),
    /// read from `flash` if this validity does not keep them; `None` for a live page whose
    /// owner does not read back.
    pub fn live_owners_into(
        &self,
        flash: &Flash,
        block: BlockId,
        out: &mut Vec<(Ppn, Option<u32>)>,
    ) {
        let first = self.geometry.first_page(block).0;
        out.clear();
        out.extend(
            (first..first + self.geometry.pages_per_block)
                .map(Ppn)
                .filter(|&p| self.is_valid(p))
                .map(|p| (p, self.owner_on(flash, p))),
        );
    }

    fn live_count(&self, block: BlockId) -> u32 {
        let first = self.geometry.first_page(block).0;
        (first..first + self.geometry.pages_per_block)
            .filter(|&p| self.is_valid(Ppn(p)))
            .count() as u32
    }

    pub fn set_valid(&mut self, ppn: Ppn, owner: u32) {
        debug_assert_ne!(owner, NO_OWNER);
        let was_live = self.set_live(ppn.0 as usize, Some(owner));
        assert!(!was_live, "{ppn} is already live");
        let b = self.geometry.block_of(ppn);
        self.unlink(b);
        self.valid[b.0 as usize] += 1;
        self.relink(b);
    }

    /// [`set_valid`](Self::set_valid) for a recovery: the records recovery read (a mapping, a
    /// checkpoint, a log) name `ppn` live for `owner`. On a damaged image they can name a page
    /// no intact image would, and a device built on that would break its own invariants later,
    /// at the first program into a block it took for free. So this refuses, as
    /// [`FtlError::Corrupt`](crate::FtlError::Corrupt), a page outside the device, a page that
    /// is not programmed (erased, torn, or in a block whose erase was torn), a page already live
    /// for another owner and, when owners are read back from flash, a page whose OOB record
    /// names another owner. The checks look at the store's state without a flash operation:
    /// an intact image passes them all, so they cost a recovery no simulated time.
    pub fn set_recovered_valid(
        &mut self,
        flash: &Flash,
        ppn: Ppn,
        owner: u32,
    ) -> Result<(), crate::FtlError> {
        let corrupt =
            |why: String| crate::FtlError::Corrupt(format!("page {ppn} (owner {owner:#x}) {why}"));
        if !self.geometry.contains_ppn(ppn) {
            return Err(corrupt("is outside the device".into()));
        }
        let state = flash.peek_state(ppn);
        if state != flash::PageState::Programmed {
            return Err(corrupt(format!("is named live but is {state:?}")));
        }
        if flash.block_erase_torn(self.geometry.block_of(ppn)) {
            return Err(corrupt(
                "is named live in a block whose erase was torn".into(),
            ));
        }
        if self.is_valid(ppn) {
            let other = self.owner_on(flash, ppn).unwrap_or(NO_OWNER);
            return Err(corrupt(format!(
                "is named live twice (also for {other:#x})"
            )));
        }
        if let Owners::OnFlash { read, .. } = &self.owners {
            let on_flash = read(flash, ppn);
            // A spare area the media lost names no owner: nothing to check it against (#69).
            let spare_lost = || {
                let mut record = vec![0u8; flash.oob_record_bytes() as usize];
                !flash.oob_record_decoded(ppn, &mut record)
            };
            if on_flash != Some(owner) && !(on_flash.is_none() && spare_lost()) {
                return Err(corrupt(format!(
                    "is named live, its OOB record says {on_flash:?}"
                )));
            }
        }
        self.set_valid(ppn, owner);
        Ok(())
    }

    /// A hint for invalidating `ppn` soon (the page a write will supersede): with `far`, what
    /// [`invalidate`](Self::invalidate) reads of the page and its block; otherwise the block's
    /// neighbours in its greedy bucket, which it relinks (their numbers are in what the far
    /// step loads). Changes nothing.
    pub fn prefetch_invalidate(&self, ppn: Ppn, far: bool) {
        use flash::prefetch::read;
        let i = ppn.0 as usize;
        let b = self.geometry.block_of(ppn).0 as usize;
        if b >= self.valid.len() {
            return;
        }
        if far {
            match &self.owners {
                Owners::Kept(owner) => read(&owner[i]),
                Owners::OnFlash { live, .. } => read(&live[i / 64]),
            }
            read(&self.valid[b]);
            read(&self.invalidated_by_ns[b]);
            read(&self.in_index[b]);
            read(&self.prev[b]);
            read(&self.next[b]);
            return;
        }
        for neighbour in [self.prev[b], self.next[b]] {
            if let Some(n) = self.next.get(neighbour as usize) {
                read(n);
                read(&self.prev[neighbour as usize]);
            }
        }
    }

    /// Marks a page stale; `superseded_end_ns` is when the copy that replaces it is on flash.
    pub fn invalidate(&mut self, ppn: Ppn, superseded_end_ns: u64) {
        let was_live = self.set_live(ppn.0 as usize, None);
        assert!(was_live, "{ppn} is not live");
        let b = self.geometry.block_of(ppn);
        self.unlink(b);
        self.valid[b.0 as usize] -= 1;
        let t = &mut self.invalidated_by_ns[b.0 as usize];
        *t = (*t).max(superseded_end_ns);
        self.relink(b);
    }

    /// Forgets everything about an erased block.
    pub fn erased(&mut self, block: BlockId) {
        assert_eq!(
            self.valid[block.0 as usize], 0,
            "{block} still holds live pages"
        );
        self.invalidated_by_ns[block.0 as usize] = 0;
    }

    /// Puts a full block in the greedy index (call when the pool marks it full).
    pub fn index_block(&mut self, block: BlockId) {
        if !self.in_index[block.0 as usize] {
            self.in_index[block.0 as usize] = true;
            self.link(block);
            self.wear.indexed(block);
        }
    }
    /// Takes a block out of the greedy index (victim chosen, or block reserved).
    pub fn unindex_block(&mut self, block: BlockId) {
        if self.in_index[block.0 as usize] {
            self.unlink(block);
            self.in_index[block.0 as usize] = false;
            self.wear.unindexed(block);
        }
    }
    pub fn is_indexed(&self, block: BlockId) -> bool {
        self.in_index[block.0 as usize]
    }

    /// Indexed block with the fewest live pages that satisfies `eligible`.
    pub fn greedy_victim(&self, mut eligible: impl FnMut(BlockId) -> bool) -> Option<BlockId> {
        for &h in &self.head {
            let mut b = h;
            while b != NIL {
                if eligible(BlockId(b)) {
                    return Some(BlockId(b));
                }
                b = self.next[b as usize];
            }
        }
        None
    }

    /// Indexed blocks (for cost-benefit and wear-leveling scans).
    pub fn indexed_blocks(&self) -> impl Iterator<Item = BlockId> + '_ {
        (0..self.in_index.len() as u32)
            .filter(|&b| self.in_index[b as usize])
            .map(BlockId)
    }

    /// The indexed, `eligible` block with the fewest erases in `counts` (ties: lowest number),
    /// from an index by erase count ([`WearIndex`]) rather than a scan of every block.
    pub fn least_worn_indexed(
        &mut self,
        counts: &[u32],
        eligible: impl FnMut(BlockId) -> bool,
    ) -> Option<BlockId> {
        self.wear.least_worn(&self.in_index, counts, eligible)
    }

    fn link(&mut self, b: BlockId) {
        let c = self.valid[b.0 as usize] as usize;
        let h = self.head[c];
        self.prev[b.0 as usize] = NIL;
        self.next[b.0 as usize] = h;
        if h != NIL {
            self.prev[h as usize] = b.0;
        }
        self.head[c] = b.0;
    }
    fn unlink(&mut self, b: BlockId) {
        if !self.in_index[b.0 as usize] {
            return;
        }
        let (p, n) = (self.prev[b.0 as usize], self.next[b.0 as usize]);
        if p != NIL {
            self.next[p as usize] = n;
        } else {
            self.head[self.valid[b.0 as usize] as usize] = n;
        }
        if n != NIL {
            self.prev[n as usize] = p;
        }
    }
    fn relink(&mut self, b: BlockId) {
        if self.in_index[b.0 as usize] {
            self.link(b);
        }
    }

    /// Valid counts equal the number of owned pages of each block.
    pub fn check_invariants(&self) -> Result<(), crate::InvariantViolation> {
        self.wear.check_invariants(&self.in_index)?;
        for b in 0..self.geometry.blocks() {
            let n = self.live_count(BlockId(b));
            if n != self.valid[b as usize] {
                return Err(crate::violation!(
                    "block {b}: valid count {} but {n} owned pages",
                    self.valid[b as usize]
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flash::DeviceConfig;

    /// What a recovery may set live: a programmed page, once, owned as its OOB record says.
    /// Each other case is a typed `Corrupt` error, and leaves the page as it was.
    #[test]
    fn a_recovered_page_is_refused_unless_programmed_once_and_owned_as_recorded() {
        use flash::{Content, ContentTag, OpCause};
        let config = DeviceConfig::preset("small").unwrap();
        let mut f = Flash::in_memory(config.clone(), 16, true);
        let g = f.geometry().clone();
        fn read(flash: &Flash, ppn: Ppn) -> Option<u32> {
            flash.store().data(ppn).tag().map(|t| t.lpn)
        }
        for p in 0..4 {
            let content = Content::Tag(ContentTag { lpn: p, write: 1 });
            f.program(Ppn(p), &content, &[], 0, OpCause::HostData)
                .unwrap();
        }
        let last = g.first_page(BlockId(1));
        f.program(
            last,
            &Content::Tag(ContentTag { lpn: 9, write: 1 }),
            &[],
            0,
            OpCause::HostData,
        )
        .unwrap();
        let mut store = f.into_store();
        store.set_torn(Ppn(3));
        store.set_erase_torn(BlockId(1));
        let f = Flash::new(config, store);
        let corrupt =
            |r: Result<(), crate::FtlError>| matches!(r, Err(crate::FtlError::Corrupt(_)));
        for mut v in [Validity::new(&g), Validity::with_owners_on_flash(&g, read)] {
            assert!(
                corrupt(v.set_recovered_valid(&f, Ppn(g.pages()), 0)),
                "outside"
            );
            assert!(corrupt(v.set_recovered_valid(&f, Ppn(100), 0)), "erased");
            assert!(corrupt(v.set_recovered_valid(&f, Ppn(3), 3)), "torn");
            assert!(corrupt(v.set_recovered_valid(&f, last, 9)), "erase torn");
            v.set_recovered_valid(&f, Ppn(0), 0).unwrap();
            assert!(corrupt(v.set_recovered_valid(&f, Ppn(0), 0)), "twice");
            assert!(!v.is_valid(Ppn(3)) && !v.is_valid(Ppn(100)));
            assert_eq!(v.valid_count(BlockId(0)), 1);
        }
        // A caller puts the record that named the page before the reason, once.
        let why = Validity::new(&g)
            .set_recovered_valid(&f, Ppn(100), 7)
            .unwrap_err()
            .in_context("lpn 7")
            .to_string();
        assert_eq!(
            why,
            "flash metadata is damaged beyond what recovery can repair: lpn 7: page ppn 100 \
             (owner 0x7) is named live but is Erased"
        );
        // Only owners read back from flash can contradict the caller.
        let mut on_flash = Validity::with_owners_on_flash(&g, read);
        assert!(corrupt(on_flash.set_recovered_valid(&f, Ppn(1), 2)));
        assert!(!on_flash.is_valid(Ppn(1)));
        on_flash.set_recovered_valid(&f, Ppn(1), 1).unwrap();
        let mut kept = Validity::new(&g);
        kept.set_recovered_valid(&f, Ppn(1), 2).unwrap();
        assert_eq!(kept.owner(Ppn(1)), Some(2));
    }

    /// One bit per page, owners read back from the device: the same liveness, counts and greedy
    /// index as a validity that keeps owners, and the owners the device gives.
    #[test]
    fn owners_on_flash_follow_the_device() {
        use flash::{Content, ContentTag, OpCause};
        let mut f = Flash::in_memory(DeviceConfig::preset("small").unwrap(), 16, true);
        let g = f.geometry().clone();
        // Owner = the tag's LPN, as a design would read it from its OOB record.
        fn read(flash: &Flash, ppn: Ppn) -> Option<u32> {
            flash.store().data(ppn).tag().map(|t| t.lpn)
        }
        let mut kept = Validity::new(&g);
        let mut on_flash = Validity::with_owners_on_flash(&g, read);
        for p in 0..2 * g.pages_per_block {
            let lpn = 1000 + p;
            let content = Content::Tag(ContentTag { lpn, write: 1 });
            f.program(Ppn(p), &content, &[], 0, OpCause::HostData)
                .unwrap();
            kept.set_valid(Ppn(p), lpn);
            on_flash.set_valid(Ppn(p), lpn);
        }
        for v in [&mut kept, &mut on_flash] {
            v.index_block(BlockId(0));
            v.index_block(BlockId(1));
            v.invalidate(Ppn(3), 7);
            v.invalidate(Ppn(g.pages_per_block + 1), 9);
            v.invalidate(Ppn(g.pages_per_block + 2), 9);
        }
        for b in [BlockId(0), BlockId(1)] {
            let expected: Vec<_> = kept.valid_pages(b).map(|(p, o)| (p, Some(o))).collect();
            let mut live = Vec::new();
            on_flash.live_owners_into(&f, b, &mut live);
            assert_eq!(live, expected);
            assert_eq!(on_flash.valid_count(b), kept.valid_count(b));
        }
        assert_eq!(on_flash.owner_on(&f, Ppn(3)), None, "stale");
        assert_eq!(on_flash.owner_on(&f, Ppn(4)), Some(1004));
        assert_eq!(on_flash.greedy_victim(|_| true), Some(BlockId(1)));
        on_flash.check_invariants().unwrap();
        on_flash.clear();
        assert!(!on_flash.is_valid(Ppn(4)));
        assert_eq!(on_flash.valid_count(BlockId(0)), 0);
        assert!(
            on_flash.memory()[0].1 * 16 < kept.memory()[0].1,
            "a bit, not 4 bytes"
        );
    }

    /// Asking a validity without owners for an owner without the device is a bug in the caller.
    #[test]
    #[should_panic(expected = "use owner_on")]
    fn owners_on_flash_need_the_device() {
        let g = DeviceConfig::preset("small").unwrap().geometry;
        fn read(_: &Flash, _: Ppn) -> Option<u32> {
            None
        }
        Validity::with_owners_on_flash(&g, read).owner(Ppn(0));
    }

    #[test]
    fn greedy_index_tracks_the_emptiest_block() {
        let g = DeviceConfig::preset("small").unwrap().geometry;
        let mut v = Validity::new(&g);
        for b in 0..3u32 {
            for p in 0..g.pages_per_block {
                v.set_valid(g.ppn(BlockId(b), p), p);
            }
            v.index_block(BlockId(b));
        }
        v.invalidate(g.ppn(BlockId(1), 0), 10);
        v.invalidate(g.ppn(BlockId(1), 1), 20);
        v.invalidate(g.ppn(BlockId(2), 5), 5);
        assert_eq!(v.greedy_victim(|_| true), Some(BlockId(1)));
        assert_eq!(v.greedy_victim(|b| b != BlockId(1)), Some(BlockId(2)));
        assert_eq!(v.invalidated_by_ns(BlockId(1)), 20);
        v.unindex_block(BlockId(1));
        assert_eq!(v.greedy_victim(|_| true), Some(BlockId(2)));
        v.check_invariants().unwrap();
    }

    /// The wear-levelling choice picks what a plain search does: the indexed,
    /// eligible block with the fewest erases, the lowest-numbered of equals; none when no block
    /// qualifies.
    #[test]
    fn least_worn_indexed_matches_a_plain_search() {
        use rand::{RngExt, SeedableRng};
        let g = DeviceConfig::preset("small").unwrap().geometry;
        let blocks = g.blocks();
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
        let mut v = Validity::new(&g);
        let mut counts = vec![0u32; blocks as usize];
        assert_eq!(v.least_worn_indexed(&counts, |_| true), None);
        for _ in 0..2_000 {
            let b = BlockId(rng.random_range(0..blocks));
            match (v.is_indexed(b), rng.random_range(0..10)) {
                // Erase counts only grow; a block is erased out of the index (and, once in a
                // while here, inside it, which no design does).
                (false, 0..=3) | (true, 0) => counts[b.0 as usize] += 1,
                (false, _) => v.index_block(b),
                (true, _) => v.unindex_block(b),
            }
            let banned = rng.random_range(0..blocks);
            let eligible = |b: BlockId| b.0 % 7 != banned % 7;
            let plain = v
                .indexed_blocks()
                .filter(|&b| eligible(b))
                .min_by_key(|&b| (counts[b.0 as usize], b.0));
            assert_eq!(v.least_worn_indexed(&counts, eligible), plain);
        }
    }
}
