//! The owners DFTL's invariant check reads back from flash, kept while they cannot change.
//!
//! DFTL keeps one validity bit per page and reads a live page's owner from its OOB record
//! (issue #19), so its invariant check reads the record of every mapped page. A recording run
//! checks after every request, which made the check the largest part of a DFTL crash campaign
//! after reading the images back (docs/performance.md, "Crash campaigns"). A page's record
//! cannot change until its block is erased: the flash programs a page only above its block's
//! write pointer, once per erase (`FlashError::OutOfOrderProgram`), and an erase counts one
//! cycle. So the check keeps each record it read below the write pointer — with its block's
//! erase count then — and reads again only the pages of blocks erased since, and pages not yet
//! programmed when it last looked. What it compares is what a read of the record returns now.
//! With the media model on, a block may move to a spare one without an erase it could see, so
//! nothing is kept there.

use crate::format::{owner_of_record, OOB_BYTES};
use flash::{Flash, Ppn};

/// Not read (or not kept) since the block's last erase.
const UNREAD: u64 = u64::MAX;
/// Read, and the record names no owner.
const NO_OWNER: u64 = 1 << 32;

/// The validity's owner of a page, from its OOB record: a data page's LPN, or a translation
/// page's number with `translation` (DFTL keeps one bit per page, not the owner). The record is
/// what a read of the spare area returns (ECC-checked, [`Flash::oob_record_decoded`]; issue
/// #69): `None` when the media lost it, as when it names no owner.
pub(crate) fn owner_on_flash(flash: &Flash, ppn: Ppn, translation: u32) -> Option<u32> {
    let mut record = [0u8; OOB_BYTES as usize];
    if !flash.oob_record_decoded(ppn, &mut record) {
        return None;
    }
    owner_of_record(&record, translation)
}

/// The owner `ppn`'s OOB record names as the store keeps it, with no ECC: the invariant
/// check's view (a checker's, which compares the validity with what was programmed), never the
/// controller's ([`owner_on_flash`]).
pub(crate) fn owner_in_store(flash: &Flash, ppn: Ppn, translation: u32) -> Option<u32> {
    let mut record = [0u8; OOB_BYTES as usize];
    flash.oob_record(ppn, &mut record);
    owner_of_record(&record, translation)
}

/// Owners read by earlier checks, per page, valid while their block's erase count stays.
pub(crate) struct CheckedOwners {
    /// Per page: [`UNREAD`], [`NO_OWNER`] or the owner.
    owners: Vec<u64>,
    /// Per block: its erase count when its pages' entries were last cleared.
    erases: Vec<u32>,
    translation: u32,
}

impl CheckedOwners {
    /// Nothing kept yet, for `flash` (with the media model on: never anything).
    pub(crate) fn new(flash: &Flash, translation: u32) -> CheckedOwners {
        let g = flash.geometry();
        let keeps = flash.config().media.is_none();
        CheckedOwners {
            owners: vec![UNREAD; if keeps { g.pages() as usize } else { 0 }],
            erases: if keeps {
                flash.erase_counts().to_vec()
            } else {
                Vec::new()
            },
            translation,
        }
    }

    /// Forgets the pages of every block erased since the last call: call before a check.
    pub(crate) fn refresh(&mut self, flash: &Flash) {
        if self.owners.is_empty() {
            return;
        }
        let per_block = flash.geometry().pages_per_block as usize;
        for (b, (&now, kept)) in flash
            .erase_counts()
            .iter()
            .zip(&mut self.erases)
            .enumerate()
        {
            if now != *kept {
                *kept = now;
                self.owners[b * per_block..(b + 1) * per_block].fill(UNREAD);
            }
        }
    }

    /// The owner `ppn`'s OOB record names now (as [`owner_in_store`]), read from flash unless
    /// kept; kept from now on if the page is below its block's write pointer.
    #[inline]
    pub(crate) fn owner(&mut self, flash: &Flash, ppn: Ppn) -> Option<u32> {
        match self.owners.get(ppn.0 as usize) {
            Some(&NO_OWNER) => None,
            Some(&o) if o != UNREAD => Some(o as u32),
            _ => self.read_owner(flash, ppn),
        }
    }

    /// [`owner`](Self::owner) of a page not kept: read, and kept if it can be.
    #[cold]
    fn read_owner(&mut self, flash: &Flash, ppn: Ppn) -> Option<u32> {
        let i = ppn.0 as usize;
        if i >= self.owners.len() {
            return owner_in_store(flash, ppn, self.translation);
        }
        let owner = owner_in_store(flash, ppn, self.translation);
        let g = flash.geometry();
        if g.page_in_block(ppn) < flash.write_pointer(g.block_of(ppn)) {
            self.owners[i] = owner.map_or(NO_OWNER, u64::from);
        }
        owner
    }

    /// Keeps `owner` for `ppn`, a page recovery has just made live for it: with the media
    /// model off (where alone anything is kept), `Validity::set_recovered_valid` accepts a
    /// page only when its OOB record names that owner, and the record read through the ECC
    /// is the record the store keeps, so `owner` is what [`owner`](Self::owner) would read.
    pub(crate) fn keep_recovered(&mut self, flash: &Flash, ppn: Ppn, owner: u32) {
        let Some(kept) = self.owners.get_mut(ppn.0 as usize) else {
            return;
        };
        debug_assert_eq!(
            owner_in_store(flash, ppn, self.translation),
            Some(owner),
            "recovery accepted {ppn} for another owner"
        );
        let g = flash.geometry();
        if g.page_in_block(ppn) < flash.write_pointer(g.block_of(ppn)) {
            *kept = u64::from(owner);
        }
    }

    /// Heap bytes.
    pub(crate) fn memory(&self) -> u64 {
        flash::vec_bytes(&self.owners) + flash::vec_bytes(&self.erases)
    }

    #[cfg(test)]
    pub(crate) fn kept(&self, ppn: Ppn) -> bool {
        self.owners
            .get(ppn.0 as usize)
            .is_some_and(|&o| o != UNREAD)
    }

    #[cfg(test)]
    pub(crate) fn block(&self, b: flash::BlockId) -> u32 {
        self.erases[b.0 as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::{OobRecord, KIND_DATA};
    use flash::{BlockId, Content, ContentTag, DeviceConfig, OpCause};

    fn program(f: &mut Flash, ppn: Ppn, lpn: u32) {
        let record = OobRecord {
            kind: KIND_DATA,
            id: lpn,
            seq: 1,
            crc: 0,
        }
        .encode();
        let tag = Content::Tag(ContentTag { lpn, write: 1 });
        f.program(ppn, &tag, &record, 0, OpCause::HostData).unwrap();
    }

    /// A kept owner is what a read of the record returns; an erase forgets the block's pages,
    /// so a page programmed again for another owner reads as that owner; a page not yet
    /// programmed is never kept.
    #[test]
    fn kept_owners_follow_programs_and_erases() {
        let mut f = Flash::in_memory(DeviceConfig::preset("small").unwrap(), OOB_BYTES, true);
        let mut owners = CheckedOwners::new(&f, 1 << 31);
        let (p0, p1) = (Ppn(0), Ppn(1));
        program(&mut f, p0, 7);
        owners.refresh(&f);
        assert_eq!(owners.owner(&f, p0), Some(7));
        assert!(owners.kept(p0));
        assert_eq!(owners.owner(&f, p1), owner_in_store(&f, p1, 1 << 31));
        assert!(
            !owners.kept(p1),
            "an erased page above the write pointer is read each time"
        );
        program(&mut f, p1, 8);
        owners.refresh(&f);
        assert_eq!(owners.owner(&f, p1), Some(8));
        f.erase(BlockId(0), 0, OpCause::GcCopy).unwrap();
        program(&mut f, p0, 9);
        owners.refresh(&f);
        assert_eq!(owners.block(BlockId(0)), f.erase_count(BlockId(0)));
        assert!(!owners.kept(p0) && !owners.kept(p1));
        assert_eq!(owners.owner(&f, p0), Some(9), "the record after the erase");
    }
}
