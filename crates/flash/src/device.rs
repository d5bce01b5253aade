//! [`Flash`]: the device an FTL talks to. It enforces the NAND rules, schedules each operation on
//! its chip and channel, counts it, optionally logs it, and hands it to the store.
//!
//! Rules of NAND flash, each a typed [`FlashError`]:
//! - a page is programmed only when erased ([`FlashError::ProgramNotErased`]);
//! - pages of a block are programmed in increasing order; skipping ahead is allowed and a skipped
//!   page stays dead until the block is erased ([`FlashError::OutOfOrderProgram`]);
//! - erase is per block; an erase torn by a power cut leaves the block unreadable and
//!   unprogrammable until erased again ([`FlashError::BlockNeedsErase`]);
//! - reading a torn page is an uncorrectable-ECC error, never stale or foreign data; reading an
//!   erased page says it is erased ([`ReadStatus`]).

use crate::content::Content;
use crate::error::FlashError;
use crate::geometry::{BlockId, Geometry, Ppn};
use crate::media::controller::{garble, garble_oob, Controller, Decode};
use crate::media::ecc::Codewords;
use crate::oplog::{LoggedOp, OpKind, OpLog};
use crate::preset::DeviceConfig;
use crate::stats::{FlashStats, OpCause};
use crate::store::{MemStore, PageState, Store, TagStore};
use crate::timing::{Span, Timeline, Timing};
use crate::wear::WearCounts;

/// Outcome of a page read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReadStatus {
    Data(Content),
    Erased,
    /// ECC failure: a torn program, or a block left by a torn erase.
    Uncorrectable,
}

/// Where a program went: its span as the design sees it, the span of the program that took
/// (they differ only when a failed program was retried on a replacement block), and the
/// physical page it took on.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Placed {
    pub(crate) span: Span,
    pub(crate) own: Span,
    pub(crate) phys: Ppn,
}

/// A read's outcome in words for an error message ("it reads back …"): `erased`,
/// `uncorrectable (ECC failure)`, or what the page holds ([`Content`]'s summary, never its bytes).
impl std::fmt::Display for ReadStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadStatus::Data(c) => c.fmt(f),
            ReadStatus::Erased => f.write_str("erased"),
            ReadStatus::Uncorrectable => f.write_str("uncorrectable (ECC failure)"),
        }
    }
}

/// The emulated flash device.
pub struct Flash {
    pub(crate) config: DeviceConfig,
    pub(crate) store: Box<dyn Store>,
    /// Next programmable page of each block.
    pub(crate) write_pointer: Vec<u32>,
    pub(crate) timeline: Timeline,
    pub(crate) stats: FlashStats,
    pub(crate) log: Option<OpLog>,
    ops_issued: u64,
    /// Erase counts summarised for the wear spread.
    pub(crate) wear: WearCounts,
    /// The controller's handling of worn media; `None` with the media model off (every
    /// address is then the physical one, and nothing below costs more than this test).
    pub(crate) media: Option<Box<Controller>>,
    /// The design recovered on this device will have its invariants checked right after
    /// ([`expect_invariant_checks`](Self::expect_invariant_checks)).
    checks_expected: bool,
}

impl Flash {
    /// Heap bytes of the emulated device per structure, named `flash.<structure>` (allocated,
    /// not necessarily resident; docs/performance.md).
    pub fn memory(&self) -> Vec<(String, u64)> {
        let mut m: Vec<(String, u64)> = self
            .store
            .memory()
            .into_iter()
            .map(|(name, bytes)| (format!("flash.{name}"), bytes))
            .collect();
        m.push((
            "flash.write_pointers".into(),
            crate::memory::vec_bytes(&self.write_pointer),
        ));
        m.push(("flash.wear_counts".into(), self.wear.memory()));
        m
    }

    /// A device over an existing store (fresh, or an image after a power cut). With the
    /// media model on, the store holds the chips' physical geometry and their media plane.
    pub fn new(config: DeviceConfig, store: Box<dyn Store>) -> Flash {
        assert_eq!(
            &config.physical_geometry(),
            store.geometry(),
            "store geometry differs from the configuration"
        );
        let g = &config.geometry;
        let media = config
            .media
            .as_ref()
            .map(|m| Box::new(Controller::new(m, g, store.as_ref())));
        let physical = |b: u32| media.as_ref().map_or(BlockId(b), |c| c.block(BlockId(b)));
        let mut write_pointer = vec![0u32; g.blocks() as usize];
        for b in 0..g.blocks() {
            write_pointer[b as usize] = store.written_extent(physical(b));
        }
        let timeline = Timeline::new(g.chips(), g.channels);
        let wear = match &media {
            None => WearCounts::new(store.erase_counts()),
            Some(c) => WearCounts::new(&c.erase_counts),
        };
        Flash {
            wear,
            config,
            store,
            write_pointer,
            timeline,
            stats: FlashStats::default(),
            log: None,
            ops_issued: 0,
            media,
            checks_expected: false,
        }
    }

    /// A fresh, fully erased in-memory device: tag-only or full data (with the media model
    /// on, freshly manufactured chips: spare and factory bad blocks drawn from its seed).
    pub fn in_memory(config: DeviceConfig, oob_record_bytes: u32, tag_only: bool) -> Flash {
        let record = oob_record_bytes.min(config.geometry.oob_bytes);
        let physical = config.physical_geometry();
        let mut store: Box<dyn Store> = if tag_only {
            Box::new(TagStore::new(&physical, record))
        } else {
            Box::new(MemStore::new(&physical, record))
        };
        if let Some(media) = &config.media {
            let plane = crate::media::MediaPlane::manufacture(&config.geometry, media)
                .expect("a validated media configuration manufactures its chips");
            store.set_media(plane);
        }
        Flash::new(config, store)
    }

    /// The physical page of `ppn` (itself with the media model off).
    #[inline(always)]
    pub(crate) fn phys(&self, ppn: Ppn) -> Ppn {
        match &self.media {
            None => ppn,
            Some(c) => c.page(ppn, self.config.geometry.pages_per_block),
        }
    }

    /// The physical block serving `block` (itself with the media model off).
    #[inline(always)]
    pub(crate) fn phys_block(&self, block: BlockId) -> BlockId {
        match &self.media {
            None => block,
            Some(c) => c.block(block),
        }
    }

    pub fn config(&self) -> &DeviceConfig {
        &self.config
    }
    #[inline]
    pub fn geometry(&self) -> &Geometry {
        &self.config.geometry
    }
    pub fn timing(&self) -> &Timing {
        &self.config.timing
    }
    pub fn store(&self) -> &dyn Store {
        self.store.as_ref()
    }
    pub fn into_store(self) -> Box<dyn Store> {
        self.store
    }
    pub fn stats(&self) -> &FlashStats {
        &self.stats
    }
    pub fn oob_record_bytes(&self) -> u32 {
        self.store.oob_record_bytes()
    }
    pub fn tag_only(&self) -> bool {
        self.store.tag_only()
    }
    /// Flash operations issued since the device was built.
    pub fn ops_issued(&self) -> u64 {
        self.ops_issued
    }
    /// Simulated instant at which every chip is idle.
    pub fn idle_ns(&self) -> u64 {
        self.timeline.all_idle_ns()
    }
    /// Simulated instant at which `chip` finishes what was issued to it.
    #[inline]
    pub fn chip_free_ns(&self, chip: u32) -> u64 {
        self.timeline.chip_free_ns(chip)
    }
    /// One step of a hint for reading `ppn`'s data at byte `at` ([`crate::DataHint`]), for a
    /// design that knows which page it will read soon: a hint that changes nothing
    /// ([`crate::prefetch`]).
    pub fn prefetch_data_at(&self, ppn: Ppn, at: usize, step: crate::DataHint) {
        self.store.prefetch_data_at(self.phys(ppn), at, step);
    }
    /// [`chip_free_ns`](Self::chip_free_ns) of every chip, by chip number.
    #[inline]
    pub fn chip_free_times(&self) -> &[u64] {
        self.timeline.chip_free_times()
    }
    /// The host's clock has reached `ns`: no operation issued from now on starts before it
    /// ([`Timeline::raise_floor`]; the host layer calls it with each request's instant).
    #[inline]
    pub fn raise_time_floor(&mut self, ns: u64) {
        self.timeline.raise_floor(ns);
        if self.media.is_some() {
            self.maintain(ns);
        }
    }
    /// Says that the design recovered on this device will have its invariants checked right
    /// after its recovery (a crash campaign checks every image it recovers): a design may then
    /// keep what its recovery read that the check reads again (DFTL: the owners of the mapped
    /// pages), which a device that is not checked would hold for nothing. Changes nothing the
    /// device does.
    pub fn expect_invariant_checks(&mut self) {
        self.checks_expected = true;
    }

    /// Whether [`expect_invariant_checks`](Self::expect_invariant_checks) was called.
    pub fn invariant_checks_expected(&self) -> bool {
        self.checks_expected
    }

    /// Starts the device's clocks at `ns` (recovery after a power cut at `ns`). With the media
    /// model on, the device lay powered off for `media.power_off_s` first: every page ages.
    pub fn start_clock_at(&mut self, ns: u64) {
        self.timeline.advance_all_to(ns);
        if let Some(c) = &self.media {
            let off = c.config.power_off_s.saturating_mul(1_000_000_000);
            if let Some(plane) = self.store.media_mut() {
                plane.power_off(off);
            }
        }
    }

    /// The design will not read `ppn`'s data again (a superseded translation page): a tag-only
    /// image may forget the bytes it keeps for it, which is what grows with the run on a large
    /// device (issue #19). Ignored while recording, since a crash image of an earlier instant
    /// may still hold `ppn` as the newest copy. Reading the page afterwards returns its tag.
    pub fn release_bytes(&mut self, ppn: Ppn) {
        if self.log.is_none() {
            let ppn = self.phys(ppn);
            self.store.release_bytes(ppn);
        }
    }

    /// [`Store::make_resident`]: faults in the store's lazily mapped per-page arrays.
    pub fn make_resident(&mut self) {
        self.store.make_resident();
    }

    /// Installs the design's rule for keeping OOB records in fewer bytes on a tag-only device
    /// ([`crate::squeeze`]); reads return the same bytes either way.
    pub fn squeeze_oob(&mut self, rule: std::sync::Arc<dyn crate::OobSqueeze>) {
        self.store.squeeze_oob(rule);
    }

    /// [`Store::keep_oob_whole`]: the design's rule for squeezing OOB records will be ignored.
    pub fn keep_oob_whole(&mut self) {
        self.store.keep_oob_whole();
    }

    /// Starts logging every operation (for crash campaigns). Returns the image as of now, which
    /// is the base the log applies to.
    pub fn start_recording(&mut self) -> Box<dyn Store> {
        self.log = Some(OpLog::default());
        self.store.snapshot()
    }
    pub fn take_log(&mut self) -> Option<OpLog> {
        self.log.take()
    }
    pub fn log(&self) -> Option<&OpLog> {
        self.log.as_ref()
    }
    /// Operations logged so far (0 when not recording): a request's place in the log, which
    /// the image-prefix cut model ([`OpLog::image_after_writes`]) judges it by.
    pub fn logged_ops(&self) -> usize {
        self.log.as_ref().map_or(0, |l| l.ops.len())
    }

    /// Next programmable page of `block` (== pages_per_block when full).
    pub fn write_pointer(&self, block: BlockId) -> u32 {
        self.write_pointer[block.0 as usize]
    }
    pub fn erase_count(&self, block: BlockId) -> u32 {
        self.store.erase_count(self.phys_block(block))
    }
    /// Every block's erase count, by block number (one call for a scan of many blocks).
    pub fn erase_counts(&self) -> &[u32] {
        match &self.media {
            None => self.store.erase_counts(),
            Some(c) => &c.erase_counts,
        }
    }
    /// Page state without a flash operation (for invariant checks and tests, not for FTL logic).
    pub fn peek_state(&self, ppn: Ppn) -> PageState {
        self.store.page_state(self.phys(ppn))
    }
    pub fn block_erase_torn(&self, block: BlockId) -> bool {
        self.store.erase_torn(self.phys_block(block))
    }
    /// The OOB record of a page as the store keeps it, with no flash operation and no check
    /// (a design's owner lookup that stands in for a table in RAM).
    pub fn oob_record(&self, ppn: Ppn, out: &mut [u8]) {
        self.store.oob(self.phys(ppn), out);
    }
    /// Makes a file-backed image durable.
    pub fn sync(&mut self) -> Result<(), FlashError> {
        self.store.sync()
    }

    pub(crate) fn check_page(&self, ppn: Ppn) -> Result<(), FlashError> {
        if self.config.geometry.contains_ppn(ppn) {
            Ok(())
        } else {
            Err(FlashError::PageOutOfRange {
                ppn,
                pages: self.config.geometry.pages(),
            })
        }
    }

    /// Fail-stop: once the image has failed, every program and erase is refused; so they are
    /// once worn media has used up its spare blocks.
    fn check_writable(&self) -> Result<(), FlashError> {
        if let Some(reason) = self.media.as_ref().and_then(|c| c.read_only()) {
            return Err(FlashError::WornOut {
                reason: reason.clone(),
            });
        }
        match self.store.failure() {
            Some(reason) => Err(FlashError::ImageFailed { reason }),
            None => Ok(()),
        }
    }

    /// The image's I/O error, if the operation that just ran met one.
    #[inline]
    fn check_io(&self, errors_before: u64) -> Result<(), FlashError> {
        if self.store.io_errors() == errors_before {
            return Ok(());
        }
        Err(self.io_failure())
    }

    /// The error of an I/O error on the image ([`check_io`](Self::check_io)).
    #[cold]
    fn io_failure(&self) -> FlashError {
        let reason = self.store.failure().unwrap_or_else(|| "I/O error".into());
        FlashError::Io(reason)
    }

    /// The I/O error that put the image in its failed, read-only state, if any.
    pub fn failure(&self) -> Option<String> {
        self.store.failure()
    }

    #[inline]
    pub(crate) fn record(&mut self, span: Span, cause: OpCause, kind: impl FnOnce() -> OpKind) {
        let seq = self.ops_issued;
        self.ops_issued += 1;
        if let Some(log) = &mut self.log {
            log.ops.push(LoggedOp {
                seq,
                span,
                cause,
                kind: kind(),
            });
        }
    }

    /// State of physical page `phys` and whether its block's erase was torn (a physical block
    /// is numbered as a block of the geometry is: pages per block are the same).
    #[inline]
    fn read_status(&self, phys: Ppn) -> (PageState, bool) {
        let block = self.config.geometry.block_of(phys);
        (self.store.page_state(phys), self.store.erase_torn(block))
    }

    /// Reads a page: data into the result, its OOB record into `oob_out`. Charged as
    /// [`sense`](Self::sense) (the same time, counter and recorded operation). With the media
    /// model on, the data went through the ECC: a page it could not correct after every retry
    /// is [`ReadStatus::Uncorrectable`], never data.
    pub fn read(
        &mut self,
        ppn: Ppn,
        oob_out: &mut [u8],
        not_before: u64,
        cause: OpCause,
    ) -> Result<(ReadStatus, Span), FlashError> {
        let (state, span, handed) = self.sense_page(ppn, not_before, cause)?;
        let phys = self.phys(ppn);
        if state == PageState::Programmed && !oob_out.is_empty() {
            self.store.oob(phys, oob_out);
        }
        let status = self.read_status_of(state, phys, handed)?;
        Ok((status, span))
    }

    /// What a read of physical page `phys`, sensed as `state`, returns: its data if programmed
    /// (garbled where the controller hands on what the ECC did not correct, `handed`).
    #[inline(always)]
    fn read_status_of(
        &self,
        state: PageState,
        phys: Ppn,
        handed: bool,
    ) -> Result<ReadStatus, FlashError> {
        Ok(match state {
            PageState::Torn => ReadStatus::Uncorrectable,
            PageState::Erased => ReadStatus::Erased,
            PageState::Programmed => {
                let errors = self.store.io_errors();
                let data = self.store.data(phys);
                self.check_io(errors)?;
                ReadStatus::Data(if handed { garble(data) } else { data })
            }
        })
    }

    /// [`read`](Self::read) for a design that does not use the page's OOB record (a host read
    /// of a mapped page): the same time, counters and recorded operation, without copying the
    /// record out (3 % of a crash campaign's reading back of every page).
    ///
    /// With the media model off (no ECC, no remapping) it takes the page's state, time and
    /// data in one inlined pass, without the media model's branches: this is the host read of
    /// every page a crash campaign reads back.
    #[inline]
    pub fn read_data(
        &mut self,
        ppn: Ppn,
        not_before: u64,
        cause: OpCause,
    ) -> Result<(ReadStatus, Span), FlashError> {
        if self.media.is_some() {
            return self.read(ppn, &mut [], not_before, cause);
        }
        let (state, span) = self.sense_timed(ppn, not_before, cause)?;
        self.record(span, cause, || OpKind::Read { ppn });
        // Physical is logical with the media model off.
        let status = self.read_status_of(state, ppn, false)?;
        Ok((status, span))
    }

    /// Reads a page like [`read`](Self::read) — same time, same counters — but hands back only
    /// its state: for FTLs that keep a RAM mirror of the page (e.g. DFTL's translation pages)
    /// and need the read's cost, not a copy of its bytes. A page the ECC could not correct is
    /// `Torn` (uncorrectable) whatever made it so.
    pub fn sense(
        &mut self,
        ppn: Ppn,
        not_before: u64,
        cause: OpCause,
    ) -> Result<(PageState, Span), FlashError> {
        let (state, span, _) = self.sense_page(ppn, not_before, cause)?;
        Ok((state, span))
    }

    /// [`sense`](Self::sense), and whether the data is handed on uncorrected (the media
    /// model's negative control).
    #[inline]
    fn sense_page(
        &mut self,
        ppn: Ppn,
        not_before: u64,
        cause: OpCause,
    ) -> Result<(PageState, Span, bool), FlashError> {
        let (mut state, mut span) = self.sense_timed(ppn, not_before, cause)?;
        let phys = self.phys(ppn);
        let mut handed = false;
        if self.media.is_some() && state == PageState::Programmed {
            let (decode, whole) = self.media_read(ppn, phys, span, (Codewords::Page, cause));
            span = whole;
            match decode {
                Decode::Corrected => {}
                Decode::Lost => state = PageState::Torn,
                Decode::Handed => handed = true,
            }
        }
        self.record(span, cause, || OpKind::Read { ppn: phys });
        Ok((state, span, handed))
    }

    /// The part of a page read before the media model: the page checked, its read booked
    /// and counted, and its state as the store keeps it (torn where its block's erase was).
    #[inline(always)]
    fn sense_timed(
        &mut self,
        ppn: Ppn,
        not_before: u64,
        cause: OpCause,
    ) -> Result<(PageState, Span), FlashError> {
        self.check_page(ppn)?;
        let bytes = (self.config.geometry.page_bytes + self.config.geometry.oob_bytes) as u64;
        let chip = self.config.geometry.chip_of(ppn).0;
        let span = self
            .timeline
            .schedule_read(chip, not_before, &self.config.timing, bytes);
        self.stats.reads[cause as usize] += 1;
        let state = match self.read_status(self.phys(ppn)) {
            (_, true) | (PageState::Torn, _) => PageState::Torn,
            (state, _) => state,
        };
        Ok((state, span))
    }

    /// Bytes `at..at + out.len()` of a programmed page, with no flash operation: for a design
    /// that has charged the page's read already ([`sense`](Self::sense)) and needs only part of
    /// it (DFTL reads one entry of a translation page). An I/O error on the image is an error.
    pub fn peek_bytes(&self, ppn: Ppn, at: usize, out: &mut [u8]) -> Result<(), FlashError> {
        let len = out.len();
        self.peek(ppn, at, len, |store, p| store.data_bytes(p, at, out))
    }

    /// The OOB record of a programmed page, with no flash operation, as
    /// [`peek_bytes`](Self::peek_bytes): for a GC copy that keeps the page's record.
    pub fn peek_oob(&self, ppn: Ppn, out: &mut [u8]) -> Result<(), FlashError> {
        self.peek(ppn, 0, 0, |store, p| store.oob(p, out))
    }

    /// `Ok` when `ppn` (in range) holds readable data, else why not (a page the ECC found
    /// lost is uncorrectable, as a torn one is).
    fn holds_data(&self, ppn: Ppn) -> Result<(), FlashError> {
        let phys = self.phys(ppn);
        let state = match self.read_status(phys) {
            (_, true) | (PageState::Torn, _) => "uncorrectable",
            (PageState::Erased, _) => "erased",
            (PageState::Programmed, _) if self.media.is_none() => return Ok(()),
            (PageState::Programmed, _) => match self.store.media() {
                Some(plane) if plane.is_lost(phys) => "uncorrectable",
                _ => return Ok(()),
            },
        };
        Err(FlashError::NoData { ppn, state })
    }

    /// The little-endian `u32` at bytes `at..at + 4` of a programmed page, with no flash
    /// operation (as [`peek_bytes`](Self::peek_bytes): DFTL's entry of a translation page).
    pub fn peek_u32_le(&self, ppn: Ppn, at: usize) -> Result<u32, FlashError> {
        self.peek(ppn, at, 4, |store, p| store.data_u32_le(p, at))
    }

    /// [`peek_u32_le`](Self::peek_u32_le) for a hint: the value only where the store keeps the
    /// page in memory (`None` where it would read the image file, and for a page that holds no
    /// data), so a hint never does I/O, never fails and changes nothing.
    pub fn hint_u32_le(&self, ppn: Ppn, at: usize) -> Option<u32> {
        self.peek(ppn, at, 4, |store, p| store.data_u32_le_in_memory(p, at))
            .ok()
            .flatten()
    }

    /// The bytes of a programmed page, whole, with no flash operation (as
    /// [`peek_bytes`](Self::peek_bytes); a tag is expanded into its page image).
    pub fn peek_page(&self, ppn: Ppn) -> Result<Box<[u8]>, FlashError> {
        let page_bytes = self.config.geometry.page_bytes as usize;
        self.peek(ppn, 0, 0, |store, p| match store.data(p) {
            Content::Bytes(bytes) => bytes,
            tag => {
                let mut page = vec![0u8; page_bytes];
                tag.copy_page_into(&mut page);
                page.into_boxed_slice()
            }
        })
    }

    /// [`peek_page`](Self::peek_page) then [`release_bytes`](Self::release_bytes), for a
    /// metadata page the design rewrites elsewhere and will not read again (DFTL's
    /// read-modify-write of a translation page): a tag-only store hands its buffer over instead
    /// of a copy. A recording device keeps the page, as `release_bytes` does.
    pub fn take_page(&mut self, ppn: Ppn) -> Result<Box<[u8]>, FlashError> {
        if self.log.is_none() {
            self.peek(ppn, 0, 0, |_, _| ())?;
            let phys = self.phys(ppn);
            if let Some(bytes) = self.store.take_bytes(phys) {
                return Ok(bytes);
            }
        }
        let page = self.peek_page(ppn)?;
        self.release_bytes(ppn);
        Ok(page)
    }

    /// The checks every peek makes around `read`, which takes bytes `at..at + len` of `ppn`
    /// (given as its physical page) from the store: a page of the device, bytes within it,
    /// data on it (an erased or uncorrectable page is an error), and no I/O error on the image
    /// meanwhile.
    fn peek<T>(
        &self,
        ppn: Ppn,
        at: usize,
        len: usize,
        read: impl FnOnce(&dyn Store, Ppn) -> T,
    ) -> Result<T, FlashError> {
        self.check_page(ppn)?;
        let page_bytes = self.config.geometry.page_bytes;
        if at + len > page_bytes as usize {
            return Err(FlashError::PeekPastPage {
                ppn,
                at,
                end: at + len,
                page_bytes,
            });
        }
        self.holds_data(ppn)?;
        let errors = self.store.io_errors();
        let value = read(self.store.as_ref(), self.phys(ppn));
        self.check_io(errors)?;
        Ok(value)
    }

    /// Reads only a page's OOB record (sense time plus the spare-area transfer). Returns the
    /// page state as the ECC sees it: `Programmed`, `Erased` or `Torn` (uncorrectable). With
    /// the media model on, the spare area is a codeword of its own: a page whose data is lost
    /// to wear usually still reads its record here, and a torn page never does.
    pub fn read_oob(
        &mut self,
        ppn: Ppn,
        oob_out: &mut [u8],
        not_before: u64,
        cause: OpCause,
    ) -> Result<(PageState, Span), FlashError> {
        self.check_page(ppn)?;
        let bytes = self.config.geometry.oob_bytes.max(16) as u64;
        let chip = self.config.geometry.chip_of(ppn).0;
        let mut span = self
            .timeline
            .schedule_read(chip, not_before, &self.config.timing, bytes);
        self.stats.reads[cause as usize] += 1;
        let phys = self.phys(ppn);
        let mut state = match self.read_status(phys) {
            (_, true) | (PageState::Torn, _) => PageState::Torn,
            (PageState::Erased, _) => PageState::Erased,
            (PageState::Programmed, _) => PageState::Programmed,
        };
        if self.media.is_some() && state == PageState::Programmed {
            let (decode, whole) = self.media_read(ppn, phys, span, (Codewords::Spare, cause));
            span = whole;
            match decode {
                Decode::Corrected => {}
                Decode::Lost => state = PageState::Torn,
                Decode::Handed => {
                    self.store.oob(phys, oob_out);
                    garble_oob(oob_out);
                    self.record(span, cause, || OpKind::ReadOob { ppn: phys });
                    return Ok((state, span));
                }
            }
        }
        self.record(span, cause, || OpKind::ReadOob { ppn: phys });
        if state == PageState::Programmed {
            self.store.oob(phys, oob_out);
        }
        Ok((state, span))
    }

    /// Programs data and OOB of one erased page, atomically unless a power cut tears it.
    pub fn program(
        &mut self,
        ppn: Ppn,
        content: &Content,
        oob: &[u8],
        not_before: u64,
        cause: OpCause,
    ) -> Result<Span, FlashError> {
        let placed = self.schedule_program(ppn, content, oob, not_before, cause)?;
        let errors = self.store.io_errors();
        self.store.write_page(placed.phys, content, oob);
        self.programmed(&placed);
        self.check_io(errors)?;
        Ok(placed.span)
    }

    /// [`program`](Self::program) handing the content over: a tag-only store keeps a metadata
    /// page's buffer as it is instead of copying it (a translation page per write-back).
    pub fn program_owned(
        &mut self,
        ppn: Ppn,
        content: Content,
        oob: &[u8],
        not_before: u64,
        cause: OpCause,
    ) -> Result<Span, FlashError> {
        let placed = self.schedule_program(ppn, &content, oob, not_before, cause)?;
        let errors = self.store.io_errors();
        self.store.write_page_owned(placed.phys, content, oob);
        self.programmed(&placed);
        self.check_io(errors)?;
        Ok(placed.span)
    }

    /// The program half of a GC copy: programs at `to` the data `from` holds, with `oob` as its
    /// record, after [`sense`](Self::sense) has read `from` (and found it programmed) — the same
    /// time, counters and recorded operation as [`program_owned`](Self::program_owned) of what
    /// [`read`](Self::read) returned, without the data passing through the caller: a tag-only
    /// store shares a metadata page's bytes between the two pages ([`Store::copy_page`]).
    pub fn program_copy(
        &mut self,
        from: Ppn,
        to: Ppn,
        oob: &[u8],
        not_before: u64,
        cause: OpCause,
    ) -> Result<Span, FlashError> {
        self.check_page(from)?;
        self.holds_data(from)?;
        // The operation log records what was programmed; it is kept only when asked for.
        let logged = self.log.is_some().then(|| self.store.data(self.phys(from)));
        let placed = self.place_program(to, 0, oob, not_before, cause)?;
        self.record(placed.own, cause, || OpKind::Program {
            ppn: placed.phys,
            content: logged.unwrap_or(Content::Bytes(Box::default())),
            oob: oob.into(),
        });
        let errors = self.store.io_errors();
        self.store.copy_page(self.phys(from), placed.phys, oob);
        self.programmed(&placed);
        self.check_io(errors)?;
        Ok(placed.span)
    }

    /// The media plane's note of a program that ended (media model only).
    #[inline]
    fn programmed(&mut self, placed: &Placed) {
        if self.media.is_some() {
            if let Some(plane) = self.store.media_mut() {
                plane.programmed(placed.phys, placed.own.end_ns, false);
            }
        }
    }

    /// Checks a program against the rules, schedules it and records it; the caller stores it.
    #[inline]
    fn schedule_program(
        &mut self,
        ppn: Ppn,
        content: &Content,
        oob: &[u8],
        not_before: u64,
        cause: OpCause,
    ) -> Result<Placed, FlashError> {
        let data_bytes = match content {
            Content::Bytes(b) => b.len(),
            Content::Tag(_) => 0,
        };
        let placed = self.place_program(ppn, data_bytes, oob, not_before, cause)?;
        self.record(placed.own, cause, || OpKind::Program {
            ppn: placed.phys,
            content: content.clone(),
            oob: oob.into(),
        });
        Ok(placed)
    }

    /// Checks a program of `data_bytes` bytes (0 for a tag) and `oob` against the rules and
    /// schedules it; the caller records and stores it. With the media model on, a program that
    /// fails is retried on a replacement block (`Placed::phys`).
    pub(crate) fn place_program(
        &mut self,
        ppn: Ppn,
        data_bytes: usize,
        oob: &[u8],
        not_before: u64,
        cause: OpCause,
    ) -> Result<Placed, FlashError> {
        self.check_page(ppn)?;
        self.check_writable()?;
        let g = &self.config.geometry;
        if oob.len() > self.store.oob_record_bytes() as usize {
            return Err(FlashError::OobTooLarge {
                ppn,
                got: oob.len(),
                max: self.store.oob_record_bytes(),
            });
        }
        if data_bytes > g.page_bytes as usize {
            return Err(FlashError::DataTooLarge {
                ppn,
                got: data_bytes,
                max: g.page_bytes,
            });
        }
        let block = g.block_of(ppn);
        let phys = self.phys(ppn);
        if self.store.erase_torn(g.block_of(phys)) {
            return Err(FlashError::BlockNeedsErase { ppn, block });
        }
        if self.store.page_state(phys) != PageState::Erased {
            return Err(FlashError::ProgramNotErased { ppn });
        }
        let g = &self.config.geometry;
        let offset = g.page_in_block(ppn);
        let next = self.write_pointer[block.0 as usize];
        if offset < next {
            return Err(FlashError::OutOfOrderProgram { ppn, next });
        }
        let bytes = (g.page_bytes + g.oob_bytes) as u64;
        let chip = g.chip_of(ppn).0;
        let not_before = match &self.media {
            None => not_before,
            Some(c) => not_before.max(c.table_ready_ns(block)),
        };
        let span = self
            .timeline
            .schedule_program(chip, not_before, &self.config.timing, bytes);
        self.write_pointer[block.0 as usize] = offset + 1;
        self.stats.programs[cause as usize] += 1;
        if self.media.is_some() {
            return self.media_program(ppn, phys, span, cause);
        }
        Ok(Placed {
            span,
            own: span,
            phys,
        })
    }

    /// Erases a block. With the media model on, blocks queued for read reclaim are rewritten
    /// first (a controller's background work, done when the design collects garbage), and an
    /// erase that fails retires the block for a spare.
    pub fn erase(
        &mut self,
        block: BlockId,
        not_before: u64,
        cause: OpCause,
    ) -> Result<Span, FlashError> {
        self.check_writable()?;
        let g = &self.config.geometry;
        if !g.contains_block(block) {
            return Err(FlashError::BlockOutOfRange {
                block,
                blocks: g.blocks(),
            });
        }
        let chip = g.chip_of_block(block).0;
        let mut not_before = not_before;
        if let Some(c) = self.media.as_deref_mut() {
            c.erasing(block);
            self.maintain(not_before);
            not_before = not_before.max(self.media.as_ref().map_or(0, |c| c.table_ready_ns(block)));
        }
        let span = self
            .timeline
            .schedule_erase(chip, not_before, &self.config.timing);
        self.write_pointer[block.0 as usize] = 0;
        self.stats.erases[cause as usize] += 1;
        if self.media.is_some() {
            return self.media_erase(block, span, cause);
        }
        self.record(span, cause, || OpKind::Erase { block });
        let errors = self.store.io_errors();
        let before = self.store.erase_count(block);
        self.store.erase_block(block);
        self.wear.changed(before, self.store.erase_count(block));
        self.check_io(errors)?;
        Ok(span)
    }

    /// Per-block erase counts: (min, max, mean).
    pub fn wear_spread(&self) -> (u32, u32, f64) {
        self.wear.spread()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::content::ContentTag;

    fn flash(tag_only: bool) -> Flash {
        Flash::in_memory(DeviceConfig::preset("small").unwrap(), 16, tag_only)
    }

    fn tag(lpn: u32, write: u64) -> Content {
        Content::Tag(ContentTag { lpn, write })
    }

    #[test]
    fn a_read_status_reads_as_a_phrase() {
        assert_eq!(ReadStatus::Erased.to_string(), "erased");
        assert_eq!(
            ReadStatus::Uncorrectable.to_string(),
            "uncorrectable (ECC failure)"
        );
        assert_eq!(
            ReadStatus::Data(tag(3, 4)).to_string(),
            "the content tag of lpn 3 write 4"
        );
    }

    /// A GC copy by `program_copy` is a read's program: on twin devices, one copying through
    /// `read` and `program_owned` and the other through `sense`, `peek_oob` and `program_copy`,
    /// the spans, counters, records, logged operations and data are the same on every store,
    /// for a tag and for a page of bytes; the copy of a page of bytes reads whole after its
    /// source is erased; a page with no data is refused.
    #[test]
    fn a_copy_is_a_program_of_what_a_read_returned() {
        for tag_only in [true, false] {
            let (mut a, mut b) = (flash(tag_only), flash(tag_only));
            let page_bytes = a.geometry().page_bytes as usize;
            let ppb = a.geometry().pages_per_block;
            let mut bytes = vec![0u8; page_bytes];
            bytes[..6].copy_from_slice(b"mapped");
            for f in [&mut a, &mut b] {
                f.start_recording();
                f.program(Ppn(0), &tag(7, 1), &[9; 16], 0, OpCause::HostData)
                    .unwrap();
                let page = Content::Bytes(bytes.clone().into());
                f.program(Ppn(1), &page, &[3; 16], 0, OpCause::Mapping)
                    .unwrap();
            }
            for (from, to) in [(Ppn(0), Ppn(ppb)), (Ppn(1), Ppn(ppb + 1))] {
                let mut oob_a = [0u8; 16];
                let (status, read_a) = a.read(from, &mut oob_a, 5, OpCause::GcCopy).unwrap();
                let ReadStatus::Data(content) = status else {
                    panic!("{from} did not read back: {status:?}")
                };
                let program_a = a
                    .program_owned(to, content, &oob_a, read_a.end_ns, OpCause::GcCopy)
                    .unwrap();
                let (state, read_b) = b.sense(from, 5, OpCause::GcCopy).unwrap();
                assert_eq!(state, PageState::Programmed);
                let mut oob_b = [0u8; 16];
                b.peek_oob(from, &mut oob_b).unwrap();
                let program_b = b
                    .program_copy(from, to, &oob_b, read_b.end_ns, OpCause::GcCopy)
                    .unwrap();
                assert_eq!((read_a, program_a, oob_a), (read_b, program_b, oob_b));
            }
            assert_eq!(a.stats(), b.stats());
            let ops = |f: &Flash| format!("{:?}", f.log().expect("recording").ops);
            assert_eq!(ops(&a), ops(&b));
            for f in [&mut a, &mut b] {
                f.erase(BlockId(0), 0, OpCause::GcCopy).unwrap();
                assert_eq!(&*f.peek_page(Ppn(ppb + 1)).unwrap(), bytes.as_slice());
                let mut oob = [0u8; 16];
                f.peek_oob(Ppn(ppb + 1), &mut oob).unwrap();
                assert_eq!(oob, [3; 16]);
                assert!(matches!(
                    f.program_copy(Ppn(0), Ppn(ppb + 2), &[], 0, OpCause::GcCopy),
                    Err(FlashError::NoData {
                        state: "erased",
                        ..
                    })
                ));
            }
        }
    }

    /// A tag-only store shares a copied page's bytes: handing one page's bytes over (a
    /// write-back) or dropping them (an erase, a release) leaves the other page's whole, in
    /// either order, and the shared bytes are counted once.
    #[test]
    fn a_copied_page_of_bytes_is_shared_until_both_are_gone() {
        let mut f = flash(true);
        let page_bytes = f.geometry().page_bytes as usize;
        let ppb = f.geometry().pages_per_block;
        let bytes: Vec<u8> = (0..page_bytes).map(|i| (i % 251) as u8 + 1).collect();
        let page = Content::Bytes(bytes.clone().into());
        let kept = |f: &Flash| {
            let memory = f.store.memory();
            memory
                .iter()
                .find(|(n, _)| *n == "metadata_pages")
                .unwrap()
                .1
        };
        let none = kept(&f);
        f.program(Ppn(0), &page, &[], 0, OpCause::Mapping).unwrap();
        let one = kept(&f);
        f.program_copy(Ppn(0), Ppn(ppb), &[], 0, OpCause::GcCopy)
            .unwrap();
        f.program_copy(Ppn(ppb), Ppn(2 * ppb), &[], 0, OpCause::GcCopy)
            .unwrap();
        assert_eq!(kept(&f), one, "three pages, one buffer");
        // The middle copy's bytes handed over: the others keep theirs.
        assert_eq!(&*f.take_page(Ppn(ppb)).unwrap(), bytes.as_slice());
        assert_eq!(&*f.peek_page(Ppn(0)).unwrap(), bytes.as_slice());
        f.erase(BlockId(0), 0, OpCause::GcCopy).unwrap();
        assert_eq!(&*f.peek_page(Ppn(2 * ppb)).unwrap(), bytes.as_slice());
        assert_eq!(&*f.take_page(Ppn(2 * ppb)).unwrap(), bytes.as_slice());
        assert!(
            kept(&f) < one,
            "every holder gone: the slot is free ({none} empty)"
        );
    }

    /// A peek returns the bytes a read would, on every store, and refuses what a read could
    /// not give: an erased or torn page, bytes past the page, a page outside the device.
    #[test]
    fn peeks_return_what_reads_return_and_refuse_what_reads_cannot() {
        for tag_only in [true, false] {
            let mut f = flash(tag_only);
            let page_bytes = f.geometry().page_bytes as usize;
            let mut page = vec![0u8; page_bytes];
            page[8..12].copy_from_slice(&0xA1B2_C3D4u32.to_le_bytes());
            f.program(
                Ppn(0),
                &Content::Bytes(page.clone().into()),
                &[],
                0,
                OpCause::Mapping,
            )
            .unwrap();
            f.program(Ppn(1), &tag(5, 6), &[], 0, OpCause::HostData)
                .unwrap();
            assert_eq!(f.peek_u32_le(Ppn(0), 8).unwrap(), 0xA1B2_C3D4);
            assert_eq!(f.peek_u32_le(Ppn(0), page_bytes - 4).unwrap(), 0);
            // A hint reads what a peek reads from a store in memory, and nothing where a peek
            // fails (an erased page, past the page).
            assert_eq!(f.hint_u32_le(Ppn(0), 8), Some(0xA1B2_C3D4));
            assert_eq!(f.hint_u32_le(Ppn(2), 8), None);
            assert_eq!(f.hint_u32_le(Ppn(0), page_bytes - 2), None);
            assert_eq!(&*f.peek_page(Ppn(0)).unwrap(), page.as_slice());
            let mut some = [0u8; 6];
            f.peek_bytes(Ppn(0), 7, &mut some).unwrap();
            assert_eq!(some, [0, 0xD4, 0xC3, 0xB2, 0xA1, 0]);
            let mut image = vec![0u8; page_bytes];
            ContentTag { lpn: 5, write: 6 }.fill(&mut image);
            assert_eq!(&*f.peek_page(Ppn(1)).unwrap(), image.as_slice());
            let erased = Ppn(2);
            assert!(matches!(
                f.peek_u32_le(erased, 0),
                Err(FlashError::NoData {
                    state: "erased",
                    ..
                })
            ));
            assert!(matches!(
                f.peek_u32_le(Ppn(0), page_bytes - 2),
                Err(FlashError::PeekPastPage { .. })
            ));
            let outside = Ppn(f.geometry().pages());
            assert!(matches!(
                f.peek_page(outside),
                Err(FlashError::PageOutOfRange { .. })
            ));
            f.store.set_torn(Ppn(1));
            assert!(matches!(
                f.peek_page(Ppn(1)),
                Err(FlashError::NoData {
                    state: "uncorrectable",
                    ..
                })
            ));
        }
    }

    /// A superseded metadata page's bytes are dropped by a tag-only image that is not recording,
    /// and kept by a recording one (a crash image may need them) and by a full-data one; taking
    /// the page ([`Flash::take_page`]) hands over its bytes and then releases it the same way.
    #[test]
    fn released_bytes_are_dropped_only_where_no_image_needs_them() {
        let bytes = || Content::Bytes(vec![7u8; 4096].into_boxed_slice());
        let data = |f: &mut Flash| {
            let mut oob = [0u8; 16];
            match f.read(Ppn(0), &mut oob, 0, OpCause::HostData).unwrap().0 {
                ReadStatus::Data(c) => c,
                other => panic!("{other:?}"),
            }
        };
        for (tag_only, recording, kept) in [
            (true, false, false),
            (true, true, true),
            (false, false, true),
        ] {
            let mut f = flash(tag_only);
            if recording {
                f.start_recording();
            }
            f.program(Ppn(0), &bytes(), &[1], 0, OpCause::Mapping)
                .unwrap();
            let taken = f.take_page(Ppn(0)).unwrap();
            assert_eq!(Content::Bytes(taken), bytes());
            assert_eq!(
                data(&mut f) == bytes(),
                kept,
                "tag_only {tag_only} recording {recording}"
            );
            f.release_bytes(Ppn(0));
            assert_eq!(data(&mut f) == bytes(), kept);
            // An erased page has nothing to take: a typed error, as for a peek.
            assert!(matches!(
                f.take_page(Ppn(1)),
                Err(FlashError::NoData { .. })
            ));
        }
    }

    /// Handing the content over stores the same page as lending it, on every store, and the
    /// rules still apply.
    #[test]
    fn program_owned_stores_what_program_stores() {
        for tag_only in [true, false] {
            let mut f = flash(tag_only);
            let page: Box<[u8]> = (0..4096u32).map(|i| i as u8).collect();
            f.program_owned(
                Ppn(0),
                Content::Bytes(page.clone()),
                &[9],
                0,
                OpCause::Mapping,
            )
            .unwrap();
            f.program_owned(Ppn(1), tag(3, 4), &[8], 0, OpCause::HostData)
                .unwrap();
            let mut oob = [0u8; 16];
            let (ReadStatus::Data(c), _) = f.read(Ppn(0), &mut oob, 0, OpCause::Mapping).unwrap()
            else {
                panic!("expected data")
            };
            assert_eq!(c.as_bytes(), Some(&page[..]));
            assert_eq!(oob[0], 9);
            let (ReadStatus::Data(c), _) = f.read(Ppn(1), &mut oob, 0, OpCause::HostData).unwrap()
            else {
                panic!("expected data")
            };
            assert_eq!(c.tag(), Some(ContentTag { lpn: 3, write: 4 }));
            assert!(matches!(
                f.program_owned(Ppn(0), tag(1, 1), &[], 0, OpCause::HostData),
                Err(FlashError::ProgramNotErased { .. })
            ));
        }
    }

    #[test]
    fn program_then_read_returns_data_and_oob() {
        for tag_only in [true, false] {
            let mut f = flash(tag_only);
            f.program(Ppn(0), &tag(5, 1), &[1, 2, 3], 0, OpCause::HostData)
                .unwrap();
            let mut oob = [0u8; 16];
            let (status, span) = f.read(Ppn(0), &mut oob, 0, OpCause::HostData).unwrap();
            assert_eq!(
                status.clone(),
                match status {
                    ReadStatus::Data(ref c) => ReadStatus::Data(c.clone()),
                    _ => panic!(),
                }
            );
            let ReadStatus::Data(c) = status else {
                panic!("expected data")
            };
            assert_eq!(c.tag(), Some(ContentTag { lpn: 5, write: 1 }));
            assert_eq!(&oob[..4], &[1, 2, 3, 0]);
            assert!(span.end_ns > span.start_ns);
        }
    }

    #[test]
    fn reading_an_erased_page_says_erased() {
        let mut f = flash(true);
        let mut oob = [0u8; 16];
        assert_eq!(
            f.read(Ppn(7), &mut oob, 0, OpCause::HostData).unwrap().0,
            ReadStatus::Erased
        );
    }

    #[test]
    fn program_requires_erased_page() {
        let mut f = flash(true);
        f.program(Ppn(0), &tag(0, 0), &[], 0, OpCause::HostData)
            .unwrap();
        assert_eq!(
            f.program(Ppn(0), &tag(0, 1), &[], 0, OpCause::HostData),
            Err(FlashError::ProgramNotErased { ppn: Ppn(0) })
        );
        f.erase(BlockId(0), 0, OpCause::GcCopy).unwrap();
        f.program(Ppn(0), &tag(0, 1), &[], 0, OpCause::HostData)
            .unwrap();
        assert_eq!(f.erase_count(BlockId(0)), 1);
    }

    #[test]
    fn pages_of_a_block_are_programmed_in_order_and_skips_stay_dead() {
        let mut f = flash(true);
        f.program(Ppn(2), &tag(0, 0), &[], 0, OpCause::HostData)
            .unwrap();
        assert_eq!(
            f.program(Ppn(1), &tag(0, 1), &[], 0, OpCause::HostData),
            Err(FlashError::OutOfOrderProgram {
                ppn: Ppn(1),
                next: 3
            })
        );
        f.program(Ppn(3), &tag(0, 2), &[], 0, OpCause::HostData)
            .unwrap();
        assert_eq!(f.write_pointer(BlockId(0)), 4);
    }

    #[test]
    fn out_of_range_and_oversize_are_errors() {
        let mut f = flash(true);
        let pages = f.geometry().pages();
        let mut oob = [0u8; 16];
        assert!(matches!(
            f.read(Ppn(pages), &mut oob, 0, OpCause::HostData),
            Err(FlashError::PageOutOfRange { .. })
        ));
        assert!(matches!(
            f.erase(BlockId(u32::MAX), 0, OpCause::HostData),
            Err(FlashError::BlockOutOfRange { .. })
        ));
        assert!(matches!(
            f.program(Ppn(0), &tag(0, 0), &[0u8; 17], 0, OpCause::HostData),
            Err(FlashError::OobTooLarge { .. })
        ));
        let big = Content::Bytes(vec![0u8; 8192].into_boxed_slice());
        assert!(matches!(
            f.program(Ppn(0), &big, &[], 0, OpCause::Mapping),
            Err(FlashError::DataTooLarge { .. })
        ));
    }

    #[test]
    fn torn_program_reads_uncorrectable_and_torn_erase_blocks_the_block() {
        let config = DeviceConfig::preset("small").unwrap();
        let mut f = Flash::in_memory(config.clone(), 16, false);
        let base = f.start_recording();
        let a = f
            .program(Ppn(0), &tag(1, 1), &[9], 0, OpCause::HostData)
            .unwrap();
        let e = f.erase(BlockId(1), a.end_ns, OpCause::GcCopy).unwrap();
        let log = f.take_log().unwrap();
        // Cut in the middle of the program: torn.
        let image = log.image_at(base.as_ref(), (a.start_ns + a.end_ns) / 2, true);
        let mut g = Flash::new(config.clone(), image);
        let mut oob = [0u8; 16];
        assert_eq!(
            g.read(Ppn(0), &mut oob, 0, OpCause::Recovery).unwrap().0,
            ReadStatus::Uncorrectable
        );
        assert!(matches!(
            g.program(Ppn(0), &tag(1, 2), &[], 0, OpCause::HostData),
            Err(FlashError::ProgramNotErased { .. })
        ));
        // Same cut without tearing: the program never happened.
        let image = log.image_at(base.as_ref(), (a.start_ns + a.end_ns) / 2, false);
        let mut g = Flash::new(config.clone(), image);
        assert_eq!(
            g.read(Ppn(0), &mut oob, 0, OpCause::Recovery).unwrap().0,
            ReadStatus::Erased
        );
        // Cut in the middle of the erase: block 1 unreadable until erased again.
        let image = log.image_at(base.as_ref(), (e.start_ns + e.end_ns) / 2, true);
        let mut g = Flash::new(config.clone(), image);
        let first = g.geometry().first_page(BlockId(1));
        assert_eq!(
            g.read(first, &mut oob, 0, OpCause::Recovery).unwrap().0,
            ReadStatus::Uncorrectable
        );
        assert!(matches!(
            g.program(first, &tag(1, 3), &[], 0, OpCause::HostData),
            Err(FlashError::BlockNeedsErase { .. })
        ));
        g.erase(BlockId(1), 0, OpCause::Recovery).unwrap();
        g.program(first, &tag(1, 3), &[], 0, OpCause::HostData)
            .unwrap();
        // After everything: the program is there.
        let image = log.image_at(base.as_ref(), u64::MAX, true);
        let mut g = Flash::new(config, image);
        let ReadStatus::Data(c) = g.read(Ppn(0), &mut oob, 0, OpCause::Recovery).unwrap().0 else {
            panic!()
        };
        assert_eq!(c.tag(), Some(ContentTag { lpn: 1, write: 1 }));
    }

    #[test]
    fn cut_after_nth_operation_matches_completion_order() {
        let config = DeviceConfig::preset("small").unwrap();
        let mut f = Flash::in_memory(config.clone(), 16, true);
        let base = f.start_recording();
        let pages_per_chip = f.geometry().pages_per_chip();
        // Chip 0 gets two programs, chip 1 one that ends between them although issued last.
        let a = f
            .program(Ppn(0), &tag(0, 0), &[], 0, OpCause::HostData)
            .unwrap();
        let b = f
            .program(Ppn(1), &tag(1, 1), &[], 0, OpCause::HostData)
            .unwrap();
        let c = f
            .program(Ppn(pages_per_chip), &tag(2, 2), &[], 1, OpCause::HostData)
            .unwrap();
        assert!(a.end_ns < c.end_ns && c.end_ns < b.end_ns);
        let log = f.take_log().unwrap();
        let order = log.completion_order();
        assert_eq!(order.len(), 3);
        let at = log.instant_after(&order, 1);
        let image = log.image_at(base.as_ref(), at, false);
        let programmed: Vec<u32> = (0..f.geometry().pages())
            .filter(|&p| image.page_state(Ppn(p)) == PageState::Programmed)
            .collect();
        assert_eq!(programmed, vec![0]);
        let at = log.instant_after(&order, 2);
        let image = log.image_at(base.as_ref(), at, false);
        let programmed: Vec<u32> = (0..f.geometry().pages())
            .filter(|&p| image.page_state(Ppn(p)) == PageState::Programmed)
            .collect();
        assert_eq!(programmed, vec![0, pages_per_chip]);
    }

    #[test]
    fn wear_is_counted_per_block() {
        let mut f = flash(true);
        for _ in 0..3 {
            f.erase(BlockId(4), 0, OpCause::GcCopy).unwrap();
        }
        assert_eq!(f.erase_count(BlockId(4)), 3);
        let (min, max, _) = f.wear_spread();
        assert_eq!((min, max), (0, 3));
        assert_eq!(f.stats().total_erases(), 3);
    }
}
