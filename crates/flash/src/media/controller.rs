//! What the controller does about worn media (docs/reliability.md): every read is decoded by the
//! ECC, retried with shifted thresholds when it fails, and reported uncorrectable when every
//! retry fails — no data is handed on then; a block whose program or erase fails is retired and
//! replaced by a spare, the pages it held copied over; a block whose reads need retries is
//! rewritten (read reclaim). Replacement and reclaim sit below every design, in the bad-block
//! layer: a design addresses the blocks of its geometry and the controller decides which
//! physical block serves each (the spare pool real SSDs report as SMART 180, "unused reserved
//! block count").

use super::config::MediaConfig;
use super::ecc::{decode, mix, uniform, Codewords};
use super::plane::{BbtUpdate, BlockStatus, MediaPlane};
use crate::content::{Content, ContentTag};
use crate::device::{Flash, Placed};
use crate::error::FlashError;
use crate::geometry::{BlockId, ChipId, Geometry, Ppn};
use crate::oplog::OpKind;
use crate::stats::OpCause;
use crate::store::{PageState, Store};
use crate::timing::Span;

/// Domain separators of the controller's draws.
const BITS: u64 = 0xB175;
const PROGRAM: u64 = 0x9A06;
const ERASE: u64 = 0xE7A5;

/// An operation that can fail on worn media.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Failing {
    Program,
    Erase,
}

/// A fault a test injects into a device with the media model on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// The page's data is lost: every read of it from now on is uncorrectable.
    Read(Ppn),
    /// The page's data and its spare area are lost — a page aged past what even the spare
    /// area's codeword corrects: every read of either fails, so its record names nothing (held
    /// by the controller of the device it is injected into, not carried into crash images;
    /// ended by the block's erase).
    ReadWhole(Ppn),
    /// The page's spare area is lost, its data codewords still correct: a read of its record
    /// fails, and so does a read of the page, which decodes the spare area with the data (as
    /// every page read of the model does, [`super::ecc::Codewords::Page`]) — the page is lost
    /// ([`Flash::is_lost`]) though its data is not. Held by the controller as `ReadWhole`'s
    /// spare area is (not carried into crash images; ended by the block's erase).
    ReadSpare(Ppn),
    /// The next program of a page of the block fails.
    Program(BlockId),
    /// The next erase of the block fails.
    Erase(BlockId),
}

/// The controller's state in RAM (lost at a power cut; what must survive is in the plane).
pub(crate) struct Controller {
    pub(crate) config: MediaConfig,
    /// Copy of the plane's block table: the physical block of each block of the geometry.
    map: Vec<u32>,
    /// Blocks of the geometry whose reads needed retries, to be rewritten.
    reclaim: Vec<BlockId>,
    /// Per block of the geometry: its last table write ends here; programs and erases of it
    /// wait for it, so nothing lands on a block the table does not yet name.
    table_ready_ns: Vec<u64>,
    /// Per block of the geometry: the erase count of the block serving it.
    pub(crate) erase_counts: Vec<u32>,
    /// Why the device went read-only (no spare block left).
    read_only: Option<String>,
    fail_program: Vec<BlockId>,
    fail_erase: Vec<BlockId>,
    /// Physical pages whose spare area fails ([`Fault::ReadWhole`], [`Fault::ReadSpare`]).
    spare_lost: Vec<Ppn>,
}

impl Controller {
    pub(crate) fn new(config: &MediaConfig, logical: &Geometry, store: &dyn Store) -> Controller {
        let plane = store
            .media()
            .expect("a device with the media model needs a store that keeps its media plane");
        let map: Vec<u32> = (0..logical.blocks())
            .map(|b| plane.block(BlockId(b)).0)
            .collect();
        let erase_counts = map.iter().map(|&p| store.erase_count(BlockId(p))).collect();
        Controller {
            config: config.clone(),
            map,
            reclaim: Vec::new(),
            table_ready_ns: vec![0; logical.blocks() as usize],
            erase_counts,
            read_only: None,
            fail_program: Vec::new(),
            fail_erase: Vec::new(),
            spare_lost: Vec::new(),
        }
    }

    #[inline]
    pub(crate) fn block(&self, block: BlockId) -> BlockId {
        BlockId(self.map[block.0 as usize])
    }

    #[inline]
    pub(crate) fn page(&self, ppn: Ppn, pages_per_block: u32) -> Ppn {
        Ppn(
            self.map[(ppn.0 / pages_per_block) as usize] * pages_per_block
                + ppn.0 % pages_per_block,
        )
    }

    pub(crate) fn table_ready_ns(&self, block: BlockId) -> u64 {
        self.table_ready_ns[block.0 as usize]
    }

    pub(crate) fn read_only(&self) -> Option<&String> {
        self.read_only.as_ref()
    }

    fn queue_reclaim(&mut self, block: BlockId) {
        if !self.reclaim.contains(&block) {
            self.reclaim.push(block);
        }
    }

    /// An erase of `block` rewrites it anyway: it leaves the reclaim queue.
    pub(crate) fn erasing(&mut self, block: BlockId) {
        self.reclaim.retain(|&b| b != block);
    }
}

/// What a read made of a programmed page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Decode {
    Corrected,
    /// Uncorrectable after every retry: no data.
    Lost,
    /// Uncorrectable, but handed on with its bit errors (the negative control).
    Handed,
}

/// Bits flipped in a spare area the ECC did not correct, for the negative control (a read of
/// it, [`Flash::oob_record_decoded`]).
pub(crate) fn garble_oob(oob: &mut [u8]) {
    oob.iter_mut().for_each(|b| *b ^= 0x41);
}

/// Bits flipped in data the ECC did not correct, for the negative control.
pub(crate) fn garble(content: Content) -> Content {
    match content {
        Content::Tag(t) => Content::Tag(ContentTag {
            lpn: t.lpn,
            write: t.write ^ (1 << 62),
        }),
        Content::Bytes(mut b) => {
            for i in (0..b.len()).step_by(97) {
                b[i] ^= 0x41;
            }
            Content::Bytes(b)
        }
    }
}

impl Flash {
    fn controller(&self) -> &Controller {
        self.media.as_deref().expect("media model on")
    }
    fn controller_mut(&mut self) -> &mut Controller {
        self.media.as_deref_mut().expect("media model on")
    }
    fn plane(&self) -> &MediaPlane {
        self.store.media().expect("media plane")
    }
    fn plane_mut(&mut self) -> &mut MediaPlane {
        self.store.media_mut().expect("media plane")
    }

    /// The media plane of a device with the media model on.
    pub fn media_plane(&self) -> Option<&MediaPlane> {
        self.media.as_ref().and(self.store.media())
    }

    /// P/E cycles of physical block `block`, the wear before this run included.
    fn cycles(&self, block: BlockId) -> f64 {
        (self.controller().config.initial_pe as u64 + self.store.erase_count(block) as u64) as f64
    }

    /// Decodes physical page `phys` read at `at_ns` (no side effects).
    fn decode_at(&self, phys: Ppn, at_ns: u64, which: Codewords) -> super::ecc::Decoded {
        let c = &self.controller().config;
        let plane = self.plane();
        let g = plane.physical();
        let block = g.block_of(phys);
        let generation = self.store.erase_count(block) as u64;
        let rate = c.rber.rber(
            self.cycles(block),
            plane.retention_days(phys, at_ns),
            plane.reads(block) as f64,
        );
        let seed = c.seed;
        let draw = |codeword: u32, step: u32| {
            uniform(mix(
                seed,
                &[
                    BITS,
                    phys.0 as u64,
                    generation,
                    codeword as u64,
                    step as u64,
                ],
            ))
        };
        decode(c, rate, g.page_bytes, g.oob_bytes, which, draw)
    }

    /// The ECC's handling of a read of programmed page `ppn` (physical `phys`) whose first
    /// sensing is `span`: retries at shifted thresholds (each a sensing and transfer more),
    /// counts, read disturb, reclaim. Returns what became of the read and its whole span.
    #[cold]
    #[inline(never)]
    pub(crate) fn media_read(
        &mut self,
        ppn: Ppn,
        phys: Ppn,
        mut span: Span,
        (which, cause): (Codewords, OpCause),
    ) -> (Decode, Span) {
        let lost_before = self.found_lost(phys, which);
        let d = self.decode_at(phys, span.start_ns, which);
        let (retries, corrected) = if lost_before {
            (0, false)
        } else {
            (d.retries, d.corrected)
        };
        let g = self.config.geometry.clone();
        let bytes = match which {
            Codewords::Page => (g.page_bytes + g.oob_bytes) as u64,
            Codewords::Spare => g.oob_bytes.max(16) as u64,
        };
        let chip = g.chip_of(ppn).0;
        for _ in 0..retries {
            let again = self
                .timeline
                .schedule_read(chip, span.end_ns, &self.config.timing, bytes);
            self.stats.media.retry_ns += again.end_ns - again.start_ns;
            span.end_ns = again.end_ns;
        }
        let block = g.block_of(ppn);
        self.plane_mut().read(g.block_of(phys), 1 + retries);
        let m = &mut self.stats.media;
        if retries > 0 {
            m.retried_reads += 1;
            m.read_retries += retries as u64;
            m.retries_by_cause[cause as usize] += retries as u64;
        }
        let reclaim_after = self.controller().config.reclaim_after_retries.max(1);
        if !corrected || retries >= reclaim_after {
            self.controller_mut().queue_reclaim(block);
        }
        if corrected {
            self.stats.media.corrected_bits += d.bit_errors as u64;
            return (Decode::Corrected, span);
        }
        self.note_uncorrectable(span.start_ns);
        if self.controller().config.hand_uncorrectable {
            return (Decode::Handed, span);
        }
        if which == Codewords::Page {
            self.plane_mut().set_lost(phys, true);
        }
        error_log::lost(ppn);
        error_log::lost_content(|| self.store.data(phys));
        (Decode::Lost, span)
    }

    fn note_uncorrectable(&mut self, at_ns: u64) {
        let host = self.stats.programs_for(OpCause::HostData);
        let m = &mut self.stats.media;
        m.uncorrectable_reads += 1;
        if m.first_uncorrectable_ns.is_none() {
            m.first_uncorrectable_ns = Some(at_ns);
            m.host_programs_before_first_uncorrectable = Some(host);
        }
    }

    /// Whether `ppn` is lost to the media — a read of the page fails now: its data codewords
    /// or its spare area's (a page read decodes both, [`super::ecc::Codewords::Page`]; the
    /// spare area fails the same draw a read of the record alone does, so a page whose spare
    /// area is lost is lost) or it was written lost — as opposed to torn by a power cut,
    /// erased or readable. What the crash checker accepts a design's media error for, whether
    /// the design read the page or only its record. Always `false` with the media model off.
    pub fn is_lost(&self, ppn: Ppn) -> bool {
        if self.media.is_none() || !self.config.geometry.contains_ppn(ppn) {
            return false;
        }
        let phys = self.phys(ppn);
        let block = self.config.geometry.block_of(ppn);
        if self.store.page_state(phys) != PageState::Programmed
            || self.store.erase_torn(self.phys_block(block))
        {
            return false;
        }
        self.lost_now(ppn, phys, Codewords::Page)
    }

    /// Whether codewords `which` of `phys` were found lost by an earlier read (or written
    /// lost).
    fn found_lost(&self, phys: Ppn, which: Codewords) -> bool {
        let spare = || self.controller().spare_lost.contains(&phys);
        match which {
            Codewords::Page => self.plane().is_lost(phys) || spare(),
            Codewords::Spare => spare(),
        }
    }

    /// Whether codewords `which` of programmed page `ppn` (physical `phys`) are lost when its
    /// chip is next free: found lost before, or uncorrectable after every retry then. No
    /// flash operation of its own.
    fn lost_now(&self, ppn: Ppn, phys: Ppn, which: Codewords) -> bool {
        let now = self.chip_free_ns(self.config.geometry.chip_of(ppn).0);
        self.found_lost(phys, which) || !self.decode_at(phys, now, which).corrected
    }

    /// The OOB record of `ppn` as a read of its spare area returns it now, into `out`, with no
    /// flash operation of its own: for a design that reads a live page's record with the page
    /// its GC senses right after (DFTL's owner lookup, issue #19), charged with that read.
    /// `false` (and `out` untouched) when the ECC cannot correct the spare area after every
    /// retry (a page lost whole); with the negative control's switch on, the uncorrected bits.
    /// With the media model off, or a page not programmed: the record as the store keeps it.
    pub fn oob_record_decoded(&self, ppn: Ppn, out: &mut [u8]) -> bool {
        let phys = self.phys(ppn);
        let worn = self.media.is_some()
            && self.config.geometry.contains_ppn(ppn)
            && self.store.page_state(phys) == PageState::Programmed;
        if !worn {
            self.store.oob(phys, out);
            return true;
        }
        let lost = self.lost_now(ppn, phys, Codewords::Spare);
        if lost && !self.controller().config.hand_uncorrectable {
            return false;
        }
        self.store.oob(phys, out);
        if lost {
            garble_oob(out);
        }
        true
    }

    /// Content tags of host pages lost to the media, in the blocks that serve the geometry:
    /// what the crash checker accepts a read error for (docs/crashtest.md, "Media faults").
    pub fn lost_tags(&self) -> Vec<ContentTag> {
        self.lost_contents()
            .iter()
            .filter_map(Content::tag)
            .collect()
    }

    /// What every page lost to the media held when it was programmed (metadata pages too), in
    /// the blocks that serve the geometry, in page order: the crash checker's evidence of
    /// which versions were lost, for checkers that decode their own page images (the NBD
    /// campaign's sectors, issue #69). Empty with the media model off.
    pub fn lost_contents(&self) -> Vec<Content> {
        let Some(ctl) = self.media.as_deref() else {
            return Vec::new();
        };
        let ppb = self.config.geometry.pages_per_block;
        (0..self.config.geometry.pages())
            .map(Ppn)
            .filter(|&ppn| self.is_lost(ppn))
            .map(|ppn| self.store.data(ctl.page(ppn, ppb)))
            .collect()
    }

    /// Physical block `pblock` was erased: the spare-area faults injected into its pages
    /// ([`Fault::ReadWhole`]) end with it, as the plane's lost pages do.
    fn forget_spare_faults(&mut self, pblock: BlockId) {
        let ppb = self.plane().physical().pages_per_block;
        self.controller_mut()
            .spare_lost
            .retain(|p| p.0 / ppb != pblock.0);
    }

    /// Marks `fault` to happen (see [`Fault`]); ignored with the media model off.
    pub fn inject(&mut self, fault: Fault) {
        if self.media.is_none() {
            return;
        }
        match fault {
            Fault::Read(ppn) => {
                let phys = self.phys(ppn);
                self.plane_mut().set_lost(phys, true);
            }
            Fault::ReadWhole(ppn) => {
                let phys = self.phys(ppn);
                self.plane_mut().set_lost(phys, true);
                self.controller_mut().spare_lost.push(phys);
            }
            Fault::ReadSpare(ppn) => {
                let phys = self.phys(ppn);
                self.controller_mut().spare_lost.push(phys);
            }
            Fault::Program(b) => self.controller_mut().fail_program.push(b),
            Fault::Erase(b) => self.controller_mut().fail_erase.push(b),
        }
    }

    /// Whether the next program of physical page `phys` (of `block` of the geometry, if it
    /// serves one) fails.
    fn program_fails(&mut self, block: Option<BlockId>, phys: Ppn) -> bool {
        let pblock = self.plane().physical().block_of(phys);
        self.op_fails(Failing::Program, block, pblock, phys.0)
    }

    /// Whether the next erase of physical block `pblock` (serving `block`) fails.
    fn erase_fails(&mut self, block: Option<BlockId>, pblock: BlockId) -> bool {
        self.op_fails(Failing::Erase, block, pblock, pblock.0)
    }

    /// Whether the next `op` of physical block `pblock` (serving `block`, if any; at `unit`, the
    /// physical page or block the draw is made for) fails: an injected fault of `block` is
    /// taken first, else a draw at the failure probability of the block's P/E cycles, keyed by
    /// the unit and the block's erase generation.
    fn op_fails(
        &mut self,
        op: Failing,
        block: Option<BlockId>,
        pblock: BlockId,
        unit: u32,
    ) -> bool {
        if let Some(block) = block {
            let ctl = self.controller_mut();
            let injected = match op {
                Failing::Program => &mut ctl.fail_program,
                Failing::Erase => &mut ctl.fail_erase,
            };
            if let Some(i) = injected.iter().position(|&b| b == block) {
                injected.remove(i);
                return true;
            }
        }
        let ppb = self.config.geometry.pages_per_block;
        let (erase, program) = self
            .controller()
            .config
            .fail_probabilities(self.cycles(pblock), ppb);
        let (p, domain) = match op {
            Failing::Program => (program, PROGRAM),
            Failing::Erase => (erase, ERASE),
        };
        let gen = self.store.erase_count(pblock) as u64;
        uniform(mix(
            self.controller().config.seed,
            &[domain, unit as u64, gen],
        )) < p
    }

    /// The program of `ppn` (physical `phys`) scheduled as `span` reported failure: the page
    /// is left unreadable, the block is replaced by a spare holding the pages before it, and
    /// the page is programmed there. Returns the whole span and the page's new physical page.
    #[cold]
    #[inline(never)]
    pub(crate) fn media_program(
        &mut self,
        ppn: Ppn,
        mut phys: Ppn,
        span: Span,
        cause: OpCause,
    ) -> Result<Placed, FlashError> {
        let g = self.config.geometry.clone();
        let block = g.block_of(ppn);
        let mut attempt = span;
        while self.program_fails(Some(block), phys) {
            self.stats.media.program_failures += 1;
            self.record(attempt, cause, || OpKind::ProgramFailed { ppn: phys });
            self.store.set_torn(phys);
            let ready = self.relocate(block, g.page_in_block(ppn), attempt.end_ns, true)?;
            let bytes = (g.page_bytes + g.oob_bytes) as u64;
            attempt =
                self.timeline
                    .schedule_program(g.chip_of(ppn).0, ready, &self.config.timing, bytes);
            self.stats.programs[OpCause::Media as usize] += 1;
            phys = self.phys(ppn);
        }
        Ok(Placed {
            span: Span {
                start_ns: span.start_ns,
                end_ns: attempt.end_ns,
            },
            own: attempt,
            phys,
        })
    }

    /// The erase of `block` scheduled as `span`: erased in place, or — when the erase fails —
    /// the block retired and replaced by an erased spare. Returns the whole span.
    #[cold]
    #[inline(never)]
    pub(crate) fn media_erase(
        &mut self,
        block: BlockId,
        span: Span,
        cause: OpCause,
    ) -> Result<Span, FlashError> {
        let pblock = self.phys_block(block);
        if !self.erase_fails(Some(block), pblock) {
            self.record(span, cause, || OpKind::Erase { block: pblock });
            self.erase_physical(block, pblock);
            return Ok(span);
        }
        self.stats.media.erase_failures += 1;
        self.record(span, cause, || OpKind::EraseFailed { block: pblock });
        self.store.set_erase_torn(pblock);
        let end = self.relocate(block, 0, span.end_ns, true)?;
        Ok(Span {
            start_ns: span.start_ns,
            end_ns: end,
        })
    }

    /// Erases physical block `pblock` (serving `block`, if any) in the store and the plane.
    fn erase_physical(&mut self, block: BlockId, pblock: BlockId) {
        self.store.erase_block(pblock);
        self.plane_mut().erased(pblock);
        self.forget_spare_faults(pblock);
        let after = self.store.erase_count(pblock);
        let before = std::mem::replace(
            &mut self.controller_mut().erase_counts[block.0 as usize],
            after,
        );
        self.wear.changed(before, after);
    }

    /// Moves `block` of the geometry to a spare of its chip: the spare is erased, the first
    /// `pages` pages of the block are copied to it (read through the ECC; a lost page is
    /// copied lost, a torn one torn), and the table is written. The block left is retired
    /// (`retire`) or given back to the spares. A spare that fails is retired and the next one
    /// tried; none left makes the device read-only. Returns when the table write ends.
    fn relocate(
        &mut self,
        block: BlockId,
        pages: u32,
        not_before: u64,
        retire: bool,
    ) -> Result<u64, FlashError> {
        let g = self.config.geometry.clone();
        let chip = g.chip_of_block(block);
        let old = self.phys_block(block);
        let mut at = not_before;
        loop {
            let Some(spare) = self.plane().blocks_in(chip, BlockStatus::Spare).next() else {
                let reason = format!("no spare block left on chip {} to replace {block}", chip.0);
                self.controller_mut().read_only = Some(reason.clone());
                return Err(FlashError::WornOut { reason });
            };
            match self.fill_spare(spare, old, pages, at)? {
                Ok(end) => {
                    let update = BbtUpdate {
                        map: Some((block, spare)),
                        retire: retire.then_some(old),
                        spare: (!retire).then_some(old),
                    };
                    let end = self.write_table(chip, update, end);
                    let ctl = self.controller_mut();
                    ctl.map[block.0 as usize] = spare.0;
                    ctl.table_ready_ns[block.0 as usize] = end;
                    let after = self.store.erase_count(spare);
                    let before = std::mem::replace(
                        &mut self.controller_mut().erase_counts[block.0 as usize],
                        after,
                    );
                    self.wear.changed(before, after);
                    if retire {
                        self.stats.media.retired_blocks += 1;
                    }
                    return Ok(end);
                }
                Err(failed_at) => {
                    let update = BbtUpdate {
                        map: None,
                        retire: Some(spare),
                        spare: None,
                    };
                    at = self.write_table(chip, update, failed_at);
                    self.stats.media.retired_blocks += 1;
                }
            }
        }
    }

    /// Erases `spare` and copies the first `pages` pages of physical block `from` into it.
    /// `Ok(Ok(end))` when done, `Ok(Err(at))` when the spare failed a program or its erase.
    fn fill_spare(
        &mut self,
        spare: BlockId,
        from: BlockId,
        pages: u32,
        not_before: u64,
    ) -> Result<Result<u64, u64>, FlashError> {
        let g = self.config.geometry.clone();
        let chip = self.plane().physical().chip_of_block(spare).0;
        let erase = self
            .timeline
            .schedule_erase(chip, not_before, &self.config.timing);
        self.stats.erases[OpCause::Media as usize] += 1;
        if self.erase_fails(None, spare) {
            self.stats.media.erase_failures += 1;
            self.record(erase, OpCause::Media, || OpKind::EraseFailed {
                block: spare,
            });
            self.store.set_erase_torn(spare);
            return Ok(Err(erase.end_ns));
        }
        self.record(erase, OpCause::Media, || OpKind::Erase { block: spare });
        self.store.erase_block(spare);
        self.plane_mut().erased(spare);
        self.forget_spare_faults(spare);
        let ppb = g.pages_per_block;
        let mut at = erase.end_ns;
        let mut oob = vec![0u8; self.store.oob_record_bytes() as usize];
        for page in 0..pages {
            let (src, dst) = (Ppn(from.0 * ppb + page), Ppn(spare.0 * ppb + page));
            match self.copy_page_into(src, dst, &mut oob, at)? {
                Ok(end) => at = end,
                Err(failed) => return Ok(Err(failed)),
            }
        }
        Ok(Ok(at))
    }

    /// Copies physical page `src` into `dst` of a spare (a bad-block copy or a reclaim), after
    /// `not_before`: `Ok(Ok(end))`, or `Ok(Err(at))` when the program of `dst` failed.
    fn copy_page_into(
        &mut self,
        src: Ppn,
        dst: Ppn,
        oob: &mut [u8],
        not_before: u64,
    ) -> Result<Result<u64, u64>, FlashError> {
        let g = self.config.geometry.clone();
        let chip = self.plane().physical().chip_of(src).0;
        let sblock = self.plane().physical().block_of(src);
        let state = match (self.store.page_state(src), self.store.erase_torn(sblock)) {
            (_, true) | (PageState::Torn, _) => PageState::Torn,
            (state, _) => state,
        };
        if state == PageState::Erased {
            return Ok(Ok(not_before));
        }
        let bytes = (g.page_bytes + g.oob_bytes) as u64;
        let mut read = self
            .timeline
            .schedule_read(chip, not_before, &self.config.timing, bytes);
        self.stats.reads[OpCause::Media as usize] += 1;
        let lost = match state {
            PageState::Programmed => {
                let lost_before = self.found_lost(src, Codewords::Page);
                let d = self.decode_at(src, read.start_ns, Codewords::Page);
                for _ in 0..d.retries {
                    let again =
                        self.timeline
                            .schedule_read(chip, read.end_ns, &self.config.timing, bytes);
                    self.stats.media.retry_ns += again.end_ns - again.start_ns;
                    self.stats.media.read_retries += 1;
                    self.stats.media.retries_by_cause[OpCause::Media as usize] += 1;
                    read.end_ns = again.end_ns;
                }
                self.plane_mut().read(sblock, 1 + d.retries);
                if !d.corrected && !lost_before {
                    self.note_uncorrectable(read.start_ns);
                }
                lost_before || !d.corrected
            }
            _ => false,
        };
        self.record(read, OpCause::Media, || OpKind::Read { ppn: src });
        let program = self
            .timeline
            .schedule_program(chip, read.end_ns, &self.config.timing, bytes);
        self.stats.programs[OpCause::Media as usize] += 1;
        if self.program_fails(None, dst) {
            self.stats.media.program_failures += 1;
            self.record(program, OpCause::Media, || OpKind::ProgramFailed {
                ppn: dst,
            });
            self.store.set_torn(dst);
            return Ok(Err(program.end_ns));
        }
        if state == PageState::Torn {
            self.record(program, OpCause::Media, || OpKind::ProgramFailed {
                ppn: dst,
            });
            self.store.set_torn(dst);
            return Ok(Ok(program.end_ns));
        }
        self.store.oob(src, oob);
        let logged = self.log.is_some().then(|| self.store.data(src));
        let kind = |content: Content, oob: &[u8]| match lost {
            true => OpKind::ProgramLost {
                ppn: dst,
                content,
                oob: oob.into(),
            },
            false => OpKind::Program {
                ppn: dst,
                content,
                oob: oob.into(),
            },
        };
        self.record(program, OpCause::Media, || {
            kind(logged.unwrap_or(Content::Bytes(Box::default())), oob)
        });
        self.store.copy_page(src, dst, oob);
        self.plane_mut().programmed(dst, program.end_ns, lost);
        if lost {
            self.stats.media.lost_pages_written += 1;
        }
        Ok(Ok(program.end_ns))
    }

    /// One write of the bad-block table on `chip` after `not_before` (a page program's time),
    /// applied to the plane. Returns its end.
    fn write_table(&mut self, chip: ChipId, update: BbtUpdate, not_before: u64) -> u64 {
        let g = &self.config.geometry;
        let bytes = (g.page_bytes + g.oob_bytes) as u64;
        let span = self
            .timeline
            .schedule_program(chip.0, not_before, &self.config.timing, bytes);
        self.stats.programs[OpCause::Media as usize] += 1;
        self.record(span, OpCause::Media, || OpKind::Bbt(update));
        self.plane_mut().apply(&update);
        span.end_ns
    }

    /// Rewrites the blocks queued for read reclaim, from `not_before` on: each moves to a
    /// spare of its chip and the block it leaves becomes a spare. A device that has run out of
    /// spares keeps its blocks where they are.
    #[cold]
    #[inline(never)]
    pub(crate) fn maintain(&mut self, not_before: u64) {
        while let Some(block) = self.media.as_deref_mut().and_then(|c| c.reclaim.pop()) {
            let pages = self.write_pointer[block.0 as usize];
            if pages == 0 || self.controller().read_only().is_some() {
                continue;
            }
            if self.relocate(block, pages, not_before, false).is_ok() {
                self.stats.media.reclaimed_blocks += 1;
            }
        }
    }

    /// Programs at `to` a copy of `from`, whose data is lost to the media: the copy reads
    /// uncorrectable as its original does (a write-uncorrectable), with `oob` as its record, so
    /// a design moving a lost page keeps it lost instead of dropping it — its logical page then
    /// reads as an error, never as older data. `from` must be lost ([`is_lost`](Self::is_lost)).
    pub fn program_lost_copy(
        &mut self,
        from: Ppn,
        to: Ppn,
        oob: &[u8],
        not_before: u64,
        cause: OpCause,
    ) -> Result<Span, FlashError> {
        self.check_page(from)?;
        if !self.is_lost(from) {
            return Err(FlashError::NotLost { ppn: from });
        }
        let placed = self.place_program(to, 0, oob, not_before, cause)?;
        let content = self.store.data(self.phys(from));
        let logged = self.log.is_some().then(|| content.clone());
        self.record(placed.own, cause, || OpKind::ProgramLost {
            ppn: placed.phys,
            content: logged.unwrap_or(Content::Bytes(Box::default())),
            oob: oob.into(),
        });
        self.store.write_page_owned(placed.phys, content, oob);
        self.plane_mut()
            .programmed(placed.phys, placed.own.end_ns, true);
        self.stats.media.lost_pages_written += 1;
        Ok(placed.span)
    }
}

/// The controller's error log (as an SSD's, e.g. NVMe's error information log): every page a
/// read found lost to the media, by the page the design named. A checker that hands a device
/// to a design's recovery, which may fail and drop it, reads what the ECC found meanwhile with
/// [`watch`](error_log::watch) and so can tell a recovery that stops at a page the media lost
/// from one that stops for no reason.
pub mod error_log {
    use crate::geometry::Ppn;
    use std::cell::RefCell;

    thread_local! {
        static WATCHED: RefCell<Option<Vec<Ppn>>> = const { RefCell::new(None) };
        static CONTENTS: RefCell<Option<Vec<crate::Content>>> = const { RefCell::new(None) };
    }

    /// What the page a read found lost held (taken only while [`watch_contents`] watches).
    pub(crate) fn lost_content(content: impl FnOnce() -> crate::Content) {
        CONTENTS.with(|w| {
            if let Some(v) = w.borrow_mut().as_mut() {
                v.push(content())
            }
        });
    }

    /// Runs `f` and returns its result with what every page a read on this thread found lost
    /// to the media meanwhile held, in order: for a checker that judges by content (the SQLite
    /// campaign's pages) what a read found lost after the checker last asked the flash.
    pub fn watch_contents<T>(f: impl FnOnce() -> T) -> (T, Vec<crate::Content>) {
        let outer = CONTENTS.with(|w| w.borrow_mut().replace(Vec::new()));
        let out = f();
        let found = CONTENTS.with(|w| std::mem::replace(&mut *w.borrow_mut(), outer));
        (out, found.unwrap_or_default())
    }

    pub(crate) fn lost(ppn: Ppn) {
        WATCHED.with(|w| {
            if let Some(v) = w.borrow_mut().as_mut() {
                v.push(ppn)
            }
        });
    }

    /// Runs `f` and returns its result with every page a read on this thread found lost to the
    /// media meanwhile (any device), in order.
    pub fn watch<T>(f: impl FnOnce() -> T) -> (T, Vec<Ppn>) {
        let outer = WATCHED.with(|w| w.borrow_mut().replace(Vec::new()));
        let out = f();
        let found = WATCHED.with(|w| std::mem::replace(&mut *w.borrow_mut(), outer));
        (out, found.unwrap_or_default())
    }
}
