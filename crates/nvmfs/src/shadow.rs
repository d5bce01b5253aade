//! The erase study's second FTL (NVMFS §IV-C, Fig. 7): the paper captured each file system's
//! block trace with blktrace and replayed it on a FAST and a page-level FTL. Here the SSD the
//! file system runs on is the page-level FTL, and [`Shadowed`] hands every write, trim and flush
//! it receives, in the same order, to a second design on its own in-memory flash of the same
//! geometry and the same exported capacity: the same request stream as a trace replay, without
//! storing the trace. Reads are not replayed (they change no flash state the study counts).
//!
//! The shadow keeps no data: each page it is given is a content tag (FAST's decisions depend on
//! addresses alone), so it costs a tag-only flash, not a second copy of the file system.
//!
//! The same tap shows every block written, with its bytes, to a nilfs2 cleaner meter
//! ([`crate::nilfs`]) when nilfs2 is the file system: Figs. 10–11 read from its logs.

use flash::{Content, ContentTag, DeviceConfig, Flash, FlashStats, Lpn};
use ftl::{BlockDevice, Completion, DesignOptions, DesignSpec, FtlError, PageOutcome, Promise};
use std::sync::{Arc, Mutex};

use crate::nilfs::CleanerMeter;

/// The second design and the first error it met (after which it takes no more requests).
pub struct Shadow {
    dev: Box<dyn BlockDevice>,
    error: Option<String>,
    writes: u64,
}

/// What the shadow did between two instants.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct ShadowRun {
    pub design: String,
    pub flash_programs: u64,
    /// Valid pages its merges (or GC) copied: the paper's erase cost.
    pub page_copies: u64,
    pub flash_erases: u64,
    /// Its design metrics at the end (FAST: switch, partial and full merges).
    pub metrics: Vec<(String, f64)>,
    /// Why its figures are missing, if it failed.
    pub error: Option<String>,
}

/// The shadow, shared by the device that replays onto it and the experiment that reads it.
#[derive(Clone)]
pub struct ShadowHandle(Arc<Mutex<Shadow>>);

impl ShadowHandle {
    /// The shadow; a panic while it was held leaves it as it was (its counters stay readable).
    pub fn lock(&self) -> std::sync::MutexGuard<'_, Shadow> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Shadow {
    /// `spec` on a tag-only flash of `config`'s geometry, exporting at least `logical_pages`:
    /// FAST's hidden share is set so that it exports the primary's capacity (rounded up to
    /// whole blocks) and keeps the rest of the same flash for its log blocks.
    pub fn build(
        spec: &DesignSpec,
        config: &DeviceConfig,
        logical_pages: u32,
    ) -> Result<ShadowHandle, FtlError> {
        let g = &config.geometry;
        let options = if spec.name == "fast" {
            let blocks = logical_pages.div_ceil(g.pages_per_block);
            let op = (g.blocks() - blocks) as f64 / g.blocks() as f64 - 1e-9;
            DesignOptions::default().with("op", op)
        } else {
            DesignOptions::default()
        };
        let flash = Flash::in_memory(config.clone(), spec.oob_record(g), true);
        let dev = spec.build(flash, &options)?;
        if dev.logical_pages() < logical_pages {
            return Err(FtlError::InvalidOption(format!(
                "{} exports {} pages, fewer than the {logical_pages} it must replay",
                spec.name,
                dev.logical_pages()
            )));
        }
        Ok(ShadowHandle(Arc::new(Mutex::new(Shadow {
            dev,
            error: None,
            writes: 0,
        }))))
    }

    pub fn stats(&self) -> FlashStats {
        self.dev.flash().stats().clone()
    }

    /// The shadow's work since `before` (its flash counters then).
    pub fn run_since(&self, before: &FlashStats) -> ShadowRun {
        let d = self.dev.flash().stats().since(before);
        ShadowRun {
            design: self.dev.design().to_string(),
            flash_programs: d.total_programs(),
            page_copies: d.programs_for(flash::OpCause::GcCopy),
            flash_erases: d.total_erases(),
            metrics: self.dev.metrics(),
            error: self.error.clone(),
        }
    }

    fn replay(&mut self, op: impl FnOnce(&mut dyn BlockDevice) -> Result<Completion, FtlError>) {
        if self.error.is_none() {
            if let Err(e) = op(self.dev.as_mut()) {
                self.error = Some(e.to_string());
            }
        }
    }
}

/// A nilfs2 cleaner meter shared by the device that feeds it and the experiment that reads it.
#[derive(Clone)]
pub struct MeterHandle(Arc<Mutex<CleanerMeter>>);

impl MeterHandle {
    /// A meter for segments of `blocks_per_segment` blocks.
    pub fn new(blocks_per_segment: u32) -> MeterHandle {
        MeterHandle(Arc::new(Mutex::new(CleanerMeter::new(blocks_per_segment))))
    }

    /// The meter; a panic while it was held leaves it as it was (its counts stay readable).
    pub fn lock(&self) -> std::sync::MutexGuard<'_, CleanerMeter> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The primary device, with every write, trim and flush replayed on a shadow, and the blocks
/// written shown to a nilfs2 cleaner meter (either may be absent).
pub struct Shadowed {
    primary: Box<dyn BlockDevice>,
    shadow: Option<ShadowHandle>,
    meter: Option<MeterHandle>,
}

impl Shadowed {
    pub fn new(primary: Box<dyn BlockDevice>, shadow: ShadowHandle) -> Shadowed {
        Shadowed::tapped(primary, Some(shadow), None)
    }

    pub fn tapped(
        primary: Box<dyn BlockDevice>,
        shadow: Option<ShadowHandle>,
        meter: Option<MeterHandle>,
    ) -> Shadowed {
        Shadowed {
            primary,
            shadow,
            meter,
        }
    }
}

impl BlockDevice for Shadowed {
    fn design(&self) -> &'static str {
        self.primary.design()
    }
    fn promise(&self) -> Promise {
        self.primary.promise()
    }
    fn logical_pages(&self) -> u32 {
        self.primary.logical_pages()
    }

    fn write(
        &mut self,
        start: Lpn,
        pages: &[Content],
        arrival_ns: u64,
    ) -> Result<Completion, FtlError> {
        let done = self.primary.write(start, pages, arrival_ns)?;
        if let Some(meter) = &self.meter {
            let mut meter = meter.lock();
            for (k, page) in pages.iter().enumerate() {
                if let Content::Bytes(bytes) = page {
                    meter.observe(start.0 as u64 + k as u64, bytes);
                }
            }
        }
        let Some(shadow) = &self.shadow else {
            return Ok(done);
        };
        let mut shadow = shadow.lock();
        let tags: Vec<Content> = (0..pages.len() as u32)
            .map(|k| {
                shadow.writes += 1;
                Content::Tag(ContentTag {
                    lpn: start.0 + k,
                    write: shadow.writes,
                })
            })
            .collect();
        shadow.replay(|d| d.write(start, &tags, arrival_ns));
        Ok(done)
    }

    fn read(
        &mut self,
        start: Lpn,
        count: u32,
        arrival_ns: u64,
        out: &mut Vec<PageOutcome>,
    ) -> Result<Completion, FtlError> {
        self.primary.read(start, count, arrival_ns, out)
    }

    fn flush(&mut self, arrival_ns: u64) -> Result<Completion, FtlError> {
        let done = self.primary.flush(arrival_ns)?;
        if let Some(shadow) = &self.shadow {
            shadow.lock().replay(|d| d.flush(arrival_ns));
        }
        Ok(done)
    }

    fn trim(&mut self, start: Lpn, count: u32, arrival_ns: u64) -> Result<Completion, FtlError> {
        let done = self.primary.trim(start, count, arrival_ns)?;
        if let Some(shadow) = &self.shadow {
            shadow.lock().replay(|d| d.trim(start, count, arrival_ns));
        }
        Ok(done)
    }

    fn flash(&self) -> &Flash {
        self.primary.flash()
    }
    fn flash_mut(&mut self) -> &mut Flash {
        self.primary.flash_mut()
    }
    fn into_flash(self: Box<Self>) -> Flash {
        self.primary.into_flash()
    }
    fn prefetch_mapping(&self, start: Lpn, ahead: usize) {
        self.primary.prefetch_mapping(start, ahead)
    }
    fn check_invariants(&self) -> Result<(), ftl::InvariantViolation> {
        self.primary.check_invariants()
    }
    fn metrics(&self) -> Vec<(String, f64)> {
        self.primary.metrics()
    }
    fn memory(&self) -> Vec<(String, u64)> {
        self.primary.memory()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// DFTL on the `small` preset's tag-only flash, with its spec and configuration.
    fn dftl_on_small() -> (Box<dyn BlockDevice>, DesignSpec, DeviceConfig) {
        let cfg = DeviceConfig::preset("small").unwrap();
        let spec = dftl::spec();
        let flash = Flash::in_memory(cfg.clone(), spec.oob_record(&cfg.geometry), true);
        let primary = spec.build(flash, &DesignOptions::default()).unwrap();
        (primary, spec, cfg)
    }

    #[test]
    fn the_shadow_replays_writes_trims_and_flushes_and_must_cover_the_primary() {
        let (primary, spec, cfg) = dftl_on_small();
        let logical = primary.logical_pages();
        let shadow = Shadow::build(&spec, &cfg, logical).unwrap();
        let before = shadow.lock().stats();
        let mut dev = Shadowed::new(primary, shadow.clone());
        let page = Content::Bytes(vec![7u8; 4096].into_boxed_slice());
        for i in 0..100 {
            dev.write(Lpn(i), std::slice::from_ref(&page), 1_000 * i as u64)
                .unwrap();
        }
        dev.trim(Lpn(0), 10, 200_000).unwrap();
        dev.flush(300_000).unwrap();
        let run = shadow.lock().run_since(&before);
        assert_eq!(run.design, "dftl");
        assert!(run.flash_programs >= 100, "{run:?}");
        assert_eq!(run.error, None);
        // a shadow too small to replay the primary's range is refused
        assert!(Shadow::build(&spec, &cfg, logical + 1).is_err());
    }

    /// A tapped device shows every page it is given to the nilfs2 cleaner meter, with its
    /// block number, and needs no shadow design for it.
    #[test]
    fn the_meter_sees_each_written_block() {
        use crate::nilfs::{summary_block, GC_LOG_FLAGS};
        let (primary, _, _) = dftl_on_small();
        let meter = MeterHandle::new(16);
        let mut dev = Shadowed::tapped(primary, None, Some(meter.clone()));
        let data = Content::Bytes(vec![3u8; 4096].into_boxed_slice());
        let log = |seq| Content::Bytes(summary_block(GC_LOG_FLAGS, seq, 10, 100).into());
        dev.write(Lpn(16), &[data.clone(), log(1), data.clone()], 0)
            .unwrap();
        dev.write(Lpn(17), &[log(2)], 1_000).unwrap(); // segment 1 again, a new sequence
        let c = meter.lock().counts();
        assert_eq!((c.cleaner_logs, c.moved_blocks), (2, 2 * (10 - 1 - 1)));
        assert_eq!((c.recycled_segments, c.recycled_blocks), (1, 16));
    }
}
