//! What DFTL's translation pages say, read from the pages themselves, plus the moves GC has
//! made that no translation page carries yet.
//!
//! DFTL keeps the whole mapping in translation pages on flash, found through the global
//! translation directory (Gupta et al., ASPLOS '09, §3.1); the CMT caches entries. On a CMT miss
//! the controller reads the translation page and takes one entry; on a write-back it reads the
//! page, changes the entries that moved and programs the result (§3.1.2, read-modify-write).
//! This module does exactly that with the page's bytes in the emulated device — the read itself
//! is charged by the caller ([`Flash::sense`]) — so the simulator holds no second copy of the
//! mapping (issue #19: 62 MB at 64 GB).
//!
//! GC moves a live page whose entry is not cached by noting the move here, per translation
//! page, until the next write-back of that page carries it (DFTL's batch update, deferred).

use crate::format::read_translation_entries;
use flash::{Flash, FlashError, Ppn, WordCrc, WordEdit};

/// Moves a page's list may keep room for once written back (16 moves: 128 bytes per page).
const KEPT_MOVES: usize = 16;

pub struct Mirror {
    per_tpage: u32,
    /// Per translation page: moves (lpn, new location) not yet in it, oldest first.
    pending: Vec<Vec<(u32, Ppn)>>,
}

impl Mirror {
    pub fn new(tvpns: usize, per_tpage: u32) -> Mirror {
        Mirror {
            per_tpage,
            pending: vec![Vec::new(); tvpns],
        }
    }

    fn tvpn(&self, lpn: u32) -> usize {
        (lpn / self.per_tpage) as usize
    }

    /// Where `lpn` is according to its translation page at `tpage` (none yet: `Ppn::NONE`) and
    /// the moves not yet written back.
    pub fn get(&self, flash: &Flash, tpage: Ppn, lpn: u32) -> Result<Ppn, FlashError> {
        if let Some(ppn) = newest_move(&self.pending[self.tvpn(lpn)], lpn) {
            return Ok(ppn);
        }
        if tpage.is_none() {
            return Ok(Ppn::NONE);
        }
        Ok(Ppn(flash.peek_u32_le(tpage, 4 * self.entry_index(lpn))?))
    }

    /// [`get`](Self::get) for a read request's run of LPNs, up to `run`'s last: the entries
    /// are taken from the translation page once per run (one peek of the request's words
    /// instead of one per page; reading back a whole device, the peeks' checks were 6.6 % of a
    /// DFTL crash campaign) and kept in `run`, which the caller clears whenever anything is
    /// written back or rebuilt meanwhile ([`EntryRun::clear`]). The moves not yet written back
    /// are looked at first, every time, as in `get`.
    pub fn get_in_run(
        &self,
        flash: &Flash,
        tpage: Ppn,
        lpn: u32,
        run: &mut EntryRun,
    ) -> Result<Ppn, FlashError> {
        if let Some(ppn) = newest_move(&self.pending[self.tvpn(lpn)], lpn) {
            return Ok(ppn);
        }
        if tpage.is_none() {
            return Ok(Ppn::NONE);
        }
        if let Some(word) = run.word(tpage, lpn) {
            return Ok(Ppn(word));
        }
        let i = self.entry_index(lpn);
        let end = (i + (run.last - lpn) as usize + 1).min(self.per_tpage as usize);
        run.bytes.resize(4 * (end - i), 0);
        flash.peek_bytes(tpage, 4 * i, &mut run.bytes)?;
        run.held = Some((tpage, lpn));
        Ok(Ppn(run
            .word(tpage, lpn)
            .expect("the run just read holds lpn")))
    }

    /// Index of `lpn`'s entry in its translation page, whose word it is (DFTL §3.1.2).
    fn entry_index(&self, lpn: u32) -> usize {
        (lpn % self.per_tpage) as usize
    }

    /// A hint for reading translation page `t`'s pending moves or adding one: with `far` the
    /// list's header, otherwise its newest moves (their address is in the header), which a
    /// lookup reads first and next to which a move is added. Changes nothing.
    pub fn prefetch(&self, t: usize, far: bool) {
        let Some(moves) = self.pending.get(t) else {
            return;
        };
        match (far, moves.last()) {
            (true, _) => flash::prefetch::read(moves),
            (false, Some(newest)) => flash::prefetch::read(newest),
            (false, None) => {}
        }
    }

    /// LPNs of translation page `t` with moves pending (oldest first; one may repeat).
    pub fn pending_lpns(&self, t: usize) -> impl Iterator<Item = u32> + '_ {
        self.pending
            .get(t)
            .into_iter()
            .flatten()
            .map(|&(lpn, _)| lpn)
    }

    /// [`get`](Self::get) for a hint: `None` where the page would be read from an image file
    /// ([`Flash::hint_u32_le`]) or holds no data.
    pub fn hint_get(&self, flash: &Flash, tpage: Ppn, lpn: u32) -> Option<Ppn> {
        if let Some(ppn) = newest_move(self.pending.get(self.tvpn(lpn))?, lpn) {
            return Some(ppn);
        }
        if tpage.is_none() {
            return Some(Ppn::NONE);
        }
        flash.hint_u32_le(tpage, 4 * self.entry_index(lpn)).map(Ppn)
    }

    /// `lpn` now lives at `ppn`, and its translation page does not say so yet.
    pub fn note_move(&mut self, lpn: u32, ppn: Ppn) {
        let t = self.tvpn(lpn);
        self.pending[t].push((lpn, ppn));
    }

    pub fn has_pending(&self, t: usize) -> bool {
        !self.pending[t].is_empty()
    }

    /// Translation pages with moves not yet written back.
    pub fn pending_tvpns(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.pending.len()).filter(|&t| self.has_pending(t))
    }

    /// The next version of translation page `t` (now at `tpage`, checksum `crc`; none yet: an
    /// erased page's bytes, checksum `fresh_crc`): its bytes with every pending move applied,
    /// which are no longer pending. The caller applies the CMT's dirty entries and programs the
    /// result; `tpage` is superseded and its bytes are taken ([`Flash::take_page`]).
    pub fn take_for_write_back<'w>(
        &mut self,
        flash: &mut Flash,
        t: usize,
        (tpage, crc): (Ppn, u32),
        fresh_crc: u32,
        words: &'w WordCrc,
    ) -> Result<WordEdit<'w>, FlashError> {
        let mut page = if tpage.is_none() {
            let page_bytes = flash.geometry().page_bytes as usize;
            WordEdit::new(vec![0xFFu8; page_bytes].into(), fresh_crc, words)
        } else {
            WordEdit::new(flash.take_page(tpage)?, crc, words)
        };
        for &(lpn, ppn) in &self.pending[t] {
            page.set(self.entry_index(lpn), ppn.0);
        }
        let moves = &mut self.pending[t];
        // A short list keeps its buffer for the page's next moves (freeing it and growing it
        // again at every write-back held ~4 % of a GC-heavy run's samples: the allocator's
        // metadata is as cold as the list); a long one goes, so memory follows the moves
        // outstanding, not the most a page ever had.
        if moves.capacity() > KEPT_MOVES {
            *moves = Vec::new();
        } else {
            moves.clear();
        }
        Ok(page)
    }

    /// Every mapping of translation page `t` (at `tpage`), into `out` (one entry per LPN of
    /// the page, from the first).
    pub fn entries(
        &self,
        flash: &Flash,
        t: usize,
        tpage: Ppn,
        out: &mut [Ppn],
    ) -> Result<(), FlashError> {
        if tpage.is_none() {
            out.fill(Ppn::NONE);
        } else {
            let mut page = vec![0u8; out.len() * 4];
            flash.peek_bytes(tpage, 0, &mut page)?;
            read_translation_entries(&page, out);
        }
        for &(lpn, ppn) in &self.pending[t] {
            out[self.entry_index(lpn)] = ppn;
        }
        Ok(())
    }

    /// Heap bytes: the per-page move lists.
    pub fn memory(&self) -> u64 {
        let lists = flash::vec_bytes(&self.pending);
        let moves: u64 = self.pending.iter().map(flash::vec_bytes).sum();
        lists + moves
    }
}

/// The translation entries one read request has taken from one translation page
/// ([`Mirror::get_in_run`]): the words of its LPNs from the first one that missed the CMT to the
/// request's last (or the page's end), as that page holds them.
pub struct EntryRun {
    /// The request's last LPN.
    last: u32,
    /// The translation page the words were read from, and the LPN of the first word.
    held: Option<(Ppn, u32)>,
    bytes: Vec<u8>,
}

impl EntryRun {
    /// Nothing held yet, for a request whose last LPN is `last`.
    pub fn new(last: u32) -> EntryRun {
        EntryRun {
            last,
            held: None,
            bytes: Vec::new(),
        }
    }

    /// Forgets the words: a translation page was written back or rebuilt since they were read.
    pub fn clear(&mut self) {
        self.held = None;
    }

    /// `lpn`'s word if held and read from `tpage`.
    fn word(&self, tpage: Ppn, lpn: u32) -> Option<u32> {
        let (from, first) = self.held?;
        let at = 4 * lpn.checked_sub(first)? as usize;
        let bytes = self.bytes.get(at..at + 4).filter(|_| from == tpage)?;
        Some(u32::from_le_bytes(bytes.try_into().expect("four bytes")))
    }
}

/// The newest of `moves` (oldest first) for `lpn`.
fn newest_move(moves: &[(u32, Ppn)], lpn: u32) -> Option<Ppn> {
    moves
        .iter()
        .rev()
        .find(|(l, _)| *l == lpn)
        .map(|&(_, ppn)| ppn)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::{encode_translation, translation_crc, translation_entry};
    use flash::{Content, DeviceConfig, OpCause};

    /// The mirror answers from the translation page on flash, except where GC moved an entry
    /// since: the newest move wins, and a write-back carries every move and clears them.
    #[test]
    fn moves_override_the_page_until_written_back() {
        for tag_only in [true, false] {
            let mut f = Flash::in_memory(DeviceConfig::preset("small").unwrap(), 16, tag_only);
            let page_bytes = f.geometry().page_bytes as usize;
            let per = (page_bytes / 4) as u32;
            let entries: Vec<Ppn> = (0..per).map(|i| Ppn(100 + i)).collect();
            let page = encode_translation(&entries, page_bytes);
            let crc = translation_crc(&page);
            let fresh_crc = translation_crc(&vec![0xFF; page_bytes]);
            let words = WordCrc::new(page_bytes);
            f.program(Ppn(0), &Content::Bytes(page), &[], 0, OpCause::Mapping)
                .unwrap();
            let mut m = Mirror::new(2, per);
            let tpage = Ppn(0);
            assert_eq!(m.get(&f, tpage, 7).unwrap(), Ppn(107));
            assert_eq!(
                m.get(&f, Ppn::NONE, per + 3).unwrap(),
                Ppn::NONE,
                "no page yet"
            );
            m.note_move(7, Ppn(900));
            m.note_move(7, Ppn(901));
            m.note_move(per + 3, Ppn(902));
            assert_eq!(m.get(&f, tpage, 7).unwrap(), Ppn(901), "newest move");
            assert_eq!(m.get(&f, tpage, 8).unwrap(), Ppn(108));
            assert_eq!(m.pending_tvpns().collect::<Vec<_>>(), vec![0, 1]);
            let mut all = vec![Ppn::NONE; per as usize];
            m.entries(&f, 0, tpage, &mut all).unwrap();
            assert_eq!((all[6], all[7], all[8]), (Ppn(106), Ppn(901), Ppn(108)));
            // Each next version carries the checksum of its bytes, kept from the moves alone.
            let (next, next_crc) = m
                .take_for_write_back(&mut f, 0, (tpage, crc), fresh_crc, &words)
                .unwrap()
                .finish();
            assert_eq!(translation_entry(&next, 7), Ppn(901));
            assert_eq!(translation_entry(&next, 9), Ppn(109));
            assert_eq!(next_crc, translation_crc(&next));
            assert!(!m.has_pending(0) && m.has_pending(1));
            let (fresh, fresh_page_crc) = m
                .take_for_write_back(&mut f, 1, (Ppn::NONE, 0), fresh_crc, &words)
                .unwrap()
                .finish();
            assert_eq!(translation_entry(&fresh, 3), Ppn(902));
            assert_eq!(translation_entry(&fresh, 4), Ppn::NONE);
            assert_eq!(fresh_page_crc, translation_crc(&fresh));
            // A translation page that is not on flash is an error, not a mapping.
            assert!(m.get(&f, Ppn(1), 7).is_err());
        }
    }

    /// A read request's run of entries answers as `get` does: moves first, words read once
    /// from the page the run was read from, read again from another page or once cleared.
    #[test]
    fn a_run_of_entries_answers_as_get() {
        let mut f = Flash::in_memory(DeviceConfig::preset("small").unwrap(), 16, true);
        let page_bytes = f.geometry().page_bytes as usize;
        let per = (page_bytes / 4) as u32;
        for (ppn, base) in [(Ppn(0), 100), (Ppn(1), 5000)] {
            let entries: Vec<Ppn> = (0..per).map(|i| Ppn(base + i)).collect();
            let page = Content::Bytes(encode_translation(&entries, page_bytes));
            f.program(ppn, &page, &[], 0, OpCause::Mapping).unwrap();
        }
        let mut m = Mirror::new(2, per);
        m.note_move(9, Ppn(900));
        let mut run = EntryRun::new(per + 2);
        for lpn in 5..per {
            let want = m.get(&f, Ppn(0), lpn).unwrap();
            assert_eq!(m.get_in_run(&f, Ppn(0), lpn, &mut run).unwrap(), want);
        }
        assert_eq!(m.get_in_run(&f, Ppn(0), 9, &mut run).unwrap(), Ppn(900));
        // The same LPNs as another page holds them (a write-back moved the page).
        assert_eq!(m.get_in_run(&f, Ppn(1), 6, &mut run).unwrap(), Ppn(5006));
        run.clear();
        assert_eq!(m.get_in_run(&f, Ppn(0), 7, &mut run).unwrap(), Ppn(107));
        let mut next = EntryRun::new(per + 2);
        assert_eq!(
            m.get_in_run(&f, Ppn::NONE, per, &mut next).unwrap(),
            Ppn::NONE
        );
        assert!(m.get_in_run(&f, Ppn(2), per + 1, &mut next).is_err());
    }
}
