//! Media faults under NBD requests (issue #69; docs/reliability.md, "The crash checker with
//! media faults"): `mobius crashtest --workload nbd --media PART ...`.
//!
//! With the flash's media model on, a page can be lost to worn media. The export must then
//! answer a READ of its sectors with EIO, never with bytes — neither the lost version's nor an
//! older one. The checker's evidence is the block campaign's: what the flash watched the ECC
//! lose ([`flash::Flash::lost_contents`], the pages whose copies the media lost). The NBD
//! campaign writes bytes, not tags, so it decodes each lost page's sectors itself: a sector
//! carrying its number and write number is a lost version of that sector
//! ([`crashtest::oracle::Lost`], judged by the block campaign's oracle rule: an error is
//! accepted only where a lost version could stand in its place). A sector a lost page of its
//! logical page holds as zeros names no write: zeros are every WRITE_ZEROES of it and "never
//! written", so each of those is a lost version of it (an error there may stand for any state
//! of the sector that reads as zeros, and the oracle chooses which, with the rest of the image).
//! A lost page of nothing but zeros names no logical page: an error anywhere may stand for its
//! zeros, which are then judged as any zeros read back are
//! ([`LostSectors::zeros_for_errors`], tried for the sectors that break the promise as errors).
//! During the recorded run a READ (or a
//! sub-page write's read-modify-write) refused with EIO is accepted when the page it names has a
//! lost copy holding what the page must hold ([`lost_copy_holds`]).

use super::sectors::{self, Sector, ZeroIndex, SECTOR_BYTES};
use crashtest::oracle::Lost;
use flash::{Content, Flash};
use std::collections::BTreeSet;

/// The sector versions the media lost on a device.
pub struct LostSectors {
    versions: Lost,
    /// Sectors a lost page of their logical page held as zeros.
    zeros: BTreeSet<u64>,
    /// A lost page held nothing but zeros: it names no logical page, so any sector reading as
    /// an error may stand for zeros.
    zero_page: bool,
}

impl LostSectors {
    /// What the media lost on `flash`, pages of `sectors_per_page` sectors, for the sectors
    /// `read` back (with `index`, the run's WRITE_ZEROES per sector).
    pub fn of(
        flash: &Flash,
        sectors_per_page: u64,
        read: (&[Option<Sector>], &ZeroIndex),
    ) -> LostSectors {
        let pages = flash.lost_contents().into_iter().filter_map(|c| match c {
            Content::Bytes(bytes) => Some(bytes),
            _ => None,
        });
        Self::of_pages(pages, sectors_per_page, read)
    }

    /// [`LostSectors::of`] the lost page images `pages`.
    fn of_pages(
        pages: impl IntoIterator<Item = impl AsRef<[u8]>>,
        sectors_per_page: u64,
        (read, index): (&[Option<Sector>], &ZeroIndex),
    ) -> LostSectors {
        let mut lost = LostSectors {
            versions: Lost::default(),
            zeros: BTreeSet::new(),
            zero_page: false,
        };
        let mut versions = Vec::new();
        for bytes in pages {
            lost.note_page(bytes.as_ref(), sectors_per_page, &mut versions);
        }
        let zeroed = lost.zeroed_errors(read);
        versions
            .extend((zeroed.iter()).flat_map(|&s| index.zeroings(s).map(move |w| (s as u32, w))));
        let unwritten = zeroed.iter().map(|&s| s as u32);
        lost.versions = Lost::new(versions).with_unwritten(unwritten);
        lost
    }

    /// The sectors reading as errors in `read` whose zeros the media lost: held as zeros by a
    /// lost page of their logical page, or — a lost page of nothing but zeros, which names no
    /// logical page — any. An error there may stand for any state of the sector that reads as
    /// zeros: each WRITE_ZEROES of it, and never written.
    fn zeroed_errors(&self, read: &[Option<Sector>]) -> Vec<usize> {
        (0..read.len())
            .filter(|&s| read[s].is_none())
            .filter(|&s| self.zero_page || self.zeros.contains(&(s as u64)))
            .collect()
    }

    /// Notes one lost page image: its tagged sectors' versions into `versions`, its zero
    /// sectors (a metadata page decodes as garbage and adds nothing).
    fn note_page(&mut self, bytes: &[u8], spp: u64, versions: &mut Vec<(u32, u64)>) {
        let read: Vec<Sector> = bytes
            .chunks(SECTOR_BYTES as usize)
            .map(sectors::decode)
            .collect();
        let page = read.iter().find_map(|s| match s {
            Sector::Tagged { sector, .. } => Some(sector / spp),
            _ => None,
        });
        let Some(page) = page else {
            self.zero_page |= read.iter().all(|s| *s == Sector::Zero);
            return;
        };
        for (i, s) in read.iter().enumerate() {
            match *s {
                Sector::Tagged { sector, write } if sector / spp == page => {
                    versions.push((sector as u32, write))
                }
                Sector::Zero => {
                    self.zeros.insert(page * spp + i as u64);
                }
                _ => {}
            }
        }
    }

    /// The lost versions, for the oracle ([`crashtest::oracle::Model::judge_settling`]).
    pub fn versions(&self) -> &Lost {
        &self.versions
    }

    /// `read` with each sector of `failing` (sectors the oracle found broken under every reading
    /// of zeros) that reads as an error and that a lost page held as zeros read as zeros instead (what the error may stand
    /// for: a zeroing, a trim, never written); `None` if no sector changes. The campaign judges
    /// the image again with them.
    pub fn zeros_for_errors(
        &self,
        read: &[Option<Sector>],
        failing: &BTreeSet<usize>,
    ) -> Option<Vec<Option<Sector>>> {
        let stands = |s: usize| self.zero_page || self.zeros.contains(&(s as u64));
        let changed: Vec<usize> = failing
            .iter()
            .copied()
            .filter(|&s| read.get(s).is_some_and(Option::is_none) && stands(s))
            .collect();
        if changed.is_empty() {
            return None;
        }
        let mut zeros = read.to_vec();
        for s in changed {
            zeros[s] = Some(Sector::Zero);
        }
        Some(zeros)
    }
}

/// Whether the media lost a copy of a page whose bytes `holds` accepts as what the page must
/// hold now: then an EIO for it is the answer the export owes.
pub fn lost_copy_holds(flash: &Flash, holds: impl Fn(&[u8]) -> bool) -> bool {
    flash
        .lost_contents()
        .iter()
        .any(|c| matches!(c, Content::Bytes(b) if holds(b)))
}

/// `read` with each sector reading as an error replaced by the version the oracle took it to
/// stand for (`stood`, per sector; none taken: it stays an error): what a run that goes on from
/// the image holds there (a second life's baseline). Never written and a WRITE_ZEROES (by
/// `index`) hold zeros.
pub fn settle(
    read: &[Option<Sector>],
    stood: &[Option<u64>],
    index: &ZeroIndex,
) -> Vec<Option<Sector>> {
    let zeros = |s: usize, w: u64| w == Lost::UNWRITTEN || index.zeroings(s).any(|z| z == w);
    read.iter()
        .enumerate()
        .map(|(s, r)| match (r, stood.get(s).copied().flatten()) {
            (None, Some(write)) if zeros(s, write) => Some(Sector::Zero),
            (None, Some(write)) => Some(Sector::Tagged {
                sector: s as u64,
                write,
            }),
            (r, _) => *r,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page_of(sectors: &[Option<u64>], first: u64) -> Vec<u8> {
        let mut page = vec![0u8; sectors.len() * SECTOR_BYTES as usize];
        for (i, (w, out)) in sectors
            .iter()
            .zip(page.chunks_mut(SECTOR_BYTES as usize))
            .enumerate()
        {
            if let Some(w) = w {
                sectors::encode(first + i as u64, *w, out);
            }
        }
        page
    }

    /// A lost page's tagged sectors are lost versions of them; its zero sectors may stand for
    /// errors on its own page only; a metadata page adds nothing; an all-zero page may stand
    /// for any error.
    #[test]
    fn a_lost_page_names_its_sectors_versions_and_zeros() {
        let mut lost = LostSectors {
            versions: Lost::default(),
            zeros: BTreeSet::new(),
            zero_page: false,
        };
        let mut versions = Vec::new();
        lost.note_page(
            &page_of(&[Some(7), None, Some(9), None], 4),
            4,
            &mut versions,
        );
        lost.note_page(&[0xA5u8; 2048], 4, &mut versions);
        assert_eq!(versions, vec![(4, 7), (6, 9)]);
        assert_eq!(lost.zeros, BTreeSet::from([5, 7]));
        assert!(!lost.zero_page);
        let read = vec![Some(Sector::Zero), None, None, None, None, None, None, None];
        let failing: BTreeSet<usize> = (0..8).collect();
        let zeros = lost
            .zeros_for_errors(&read, &failing)
            .expect("5 and 7 change");
        assert_eq!(zeros[5], Some(Sector::Zero));
        assert_eq!(zeros[4], None);
        assert_eq!(zeros[1], None, "page 0 lost no zeros");
        assert!(lost.zeros_for_errors(&read, &BTreeSet::from([4])).is_none());
        assert!(lost.zeros_for_errors(&read[..4], &failing).is_none());
        lost.note_page(&[0u8; 2048], 4, &mut versions);
        let zeros = lost.zeros_for_errors(&read[..4], &failing).unwrap();
        assert_eq!(zeros[1], Some(Sector::Zero));
    }

    /// An error on a sector whose zeros a lost page held may stand for any state of it that
    /// reads as zeros (each WRITE_ZEROES of it, never written); a lost page of nothing but
    /// zeros lends its zeros to every error; a sector read back, or one whose zeros nothing
    /// lost, gets none.
    #[test]
    fn lost_zeros_are_every_zero_state_of_their_errors() {
        use super::super::sectors::SectorLog;
        let mut log = SectorLog::new("test", 8);
        log.write(0, 8, false, true, 0, &Ok(10)); // WRITE_ZEROES: writes 0..8
        log.write(0, 4, false, false, 15, &Ok(20)); // writes 8..12
        let index = log.zero_index();
        let read = vec![None, None, Some(Sector::Zero), None, None, None, None, None];
        // A lost copy of page 0 (sectors 0..4): sector 0 tagged, sectors 1..4 zeros.
        let page0 = page_of(&[Some(8), None, None, None], 0);
        let lost = LostSectors::of_pages([page0.clone()], 4, (&read, &index));
        let v = lost.versions();
        assert_eq!(v.of(0), &[8], "a tagged sector is its write only");
        assert_eq!(v.of(1), &[1], "write 1 zeroed sector 1");
        assert!(v.held_unwritten(1) && v.held_unwritten(3));
        assert!(!v.held_unwritten(0), "its lost copy was tagged");
        assert!(
            v.of(2).is_empty() && !v.held_unwritten(2),
            "read back: no error to stand"
        );
        assert!(
            v.of(4).is_empty() && !v.held_unwritten(4),
            "page 1 lost nothing"
        );
        let lost = LostSectors::of_pages([page0, vec![0u8; 2048]], 4, (&read, &index));
        assert!(
            lost.versions().held_unwritten(4),
            "an all-zero page names no page"
        );
        assert_eq!(lost.versions().of(5), &[5]);
        assert!(!lost.versions().held_unwritten(2));
    }

    /// The block oracle's rule over sectors: a page reading as errors is accepted where the
    /// media lost the version the promise gives its sectors, not where it lost only an older
    /// one, nor where it lost nothing.
    #[test]
    fn an_error_is_accepted_only_for_the_version_the_media_lost() {
        use super::super::sectors::{Reading, SectorLog};
        use ftl::Promise;
        let mut log = SectorLog::new("test", 4);
        log.write(0, 4, false, false, 0, &Ok(10)); // writes 0..4
        log.write(0, 4, false, false, 15, &Ok(20)); // writes 4..8
        let model = crashtest::oracle::Model::new(&log.log);
        let index = log.zero_index();
        let p = Promise::DurableWrites;
        let seen = log.seen(&index, &[None; 4], 30, p, Reading::Latest);
        let judge = |pages: &[Vec<u8>]| {
            let mut lost = LostSectors {
                versions: Lost::default(),
                zeros: BTreeSet::new(),
                zero_page: false,
            };
            let mut versions = Vec::new();
            for page in pages {
                lost.note_page(page, 4, &mut versions);
            }
            model.judge_with_losses(p, 30, &seen, &Lost::new(versions))
        };
        let newest = page_of(&[Some(4), Some(5), Some(6), Some(7)], 0);
        let older = page_of(&[Some(0), Some(1), Some(2), Some(3)], 0);
        assert!(judge(&[newest.clone(), older.clone()]).is_empty());
        assert_eq!(judge(&[older]).len(), 4);
        assert_eq!(judge(&[]).len(), 4);
    }

    /// Settling gives an error the version it stood for: a write's tag, or zeros where it
    /// stood for never written or for a WRITE_ZEROES; an error nothing stood for stays one.
    #[test]
    fn settling_replaces_only_errors_the_oracle_accepted() {
        use super::super::sectors::SectorLog;
        let mut log = SectorLog::new("test", 4);
        log.write(0, 4, false, false, 0, &Ok(10)); // writes 0..4
        log.write(2, 2, false, true, 15, &Ok(20)); // WRITE_ZEROES: writes 4, 5 (sectors 2, 3)
        let index = log.zero_index();
        let read = [None, Some(Sector::Zero), None, None];
        let stood = [Some(0), Some(1), Some(4), Some(Lost::UNWRITTEN)];
        let settled = settle(&read, &stood, &index);
        let tagged = |sector, write| Some(Sector::Tagged { sector, write });
        assert_eq!(settled[0], tagged(0, 0));
        assert_eq!(
            settled[1],
            Some(Sector::Zero),
            "a sector read back stays as read"
        );
        assert_eq!(settled[2], Some(Sector::Zero), "write 4 zeroed sector 2");
        assert_eq!(settled[3], Some(Sector::Zero), "never written");
        let settled = settle(&read, &[None, None, Some(2), None], &index);
        assert_eq!(settled[0], None, "nothing stood for it");
        assert_eq!(settled[2], tagged(2, 2));
    }
}
