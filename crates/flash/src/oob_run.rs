//! [`Flash::read_oob_run`]: the OOB records of a block's pages read one after another in one
//! call, as a recovery's scan reads them (docs/performance.md, "Crash campaigns": the scan of
//! the write-cached FTL was 42 % of its crash campaign, a third of it the per-read work of the
//! timing model and the device).

use crate::device::Flash;
use crate::error::FlashError;
use crate::geometry::{BlockId, Ppn};
use crate::oplog::OpKind;
use crate::stats::OpCause;
use crate::store::PageState;

/// Where a run of OOB reads ended ([`Flash::read_oob_run`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OobRun {
    /// Programmed pages read from the run's first page on; their records are in the buffer.
    pub programmed: u32,
    /// The page after them, read too, and what it read as (`Erased`, or `Torn`: a torn
    /// program, a block whose erase was cut, a record the ECC could not correct); `None` when
    /// the programmed pages reach the block's end.
    pub stopped_at: Option<(Ppn, PageState)>,
}

impl Flash {
    /// Reads the OOB records of `block`'s pages from page `from` on, in order, up to and
    /// including the first page that is not programmed, or to the block's end (nothing from
    /// the block's end on): exactly what as many [`read_oob`](Self::read_oob) calls at
    /// `not_before` would do — the same spans, counters and recorded operations — with the
    /// timing model's per-read set-up done once per run ([`crate::Timeline::read_run`]). The
    /// programmed pages' records go into `records` (cleared first), one each.
    pub fn read_oob_run<const N: usize>(
        &mut self,
        block: BlockId,
        from: u32,
        records: &mut Vec<[u8; N]>,
        not_before: u64,
        cause: OpCause,
    ) -> Result<OobRun, FlashError> {
        let g = &self.config.geometry;
        if !g.contains_block(block) {
            return Err(FlashError::BlockOutOfRange {
                block,
                blocks: g.blocks(),
            });
        }
        records.clear();
        if from >= g.pages_per_block {
            return Ok(OobRun {
                programmed: 0,
                stopped_at: None,
            });
        }
        match self.media {
            None => Ok(self.run_in_store((block, from), records, (not_before, cause))),
            Some(_) => self.run_read_by_read((block, from), records, (not_before, cause)),
        }
    }

    /// [`read_oob_run`](Self::read_oob_run) with the media model off: the store says where
    /// the programmed pages stop, and the reads are booked as one run.
    fn run_in_store<const N: usize>(
        &mut self,
        (block, from): (BlockId, u32),
        records: &mut Vec<[u8; N]>,
        (not_before, cause): (u64, OpCause),
    ) -> OobRun {
        let g = &self.config.geometry;
        let (first, left) = (g.ppn(block, from), g.pages_per_block - from);
        let erase_torn = self.store.erase_torn(block);
        let programmed = match erase_torn {
            true => 0,
            false => self.store.programmed_run(first, left),
        };
        let stopped_at = (programmed < left).then(|| {
            let ppn = Ppn(first.0 + programmed);
            match erase_torn {
                true => (ppn, PageState::Torn),
                false => (ppn, self.store.page_state(ppn)),
            }
        });
        let reads = programmed + u32::from(stopped_at.is_some());
        let bytes = u64::from(g.oob_bytes.max(16));
        let chip = g.chip_of_block(block).0;
        let mut run = self
            .timeline
            .read_run(chip, not_before, &self.config.timing, bytes);
        for k in 0..reads {
            let span = self.timeline.schedule_run_read(&mut run);
            let ppn = Ppn(first.0 + k);
            self.record(span, cause, || OpKind::ReadOob { ppn });
        }
        self.stats.reads[cause as usize] += u64::from(reads);
        records.resize(programmed as usize, [0; N]);
        for (k, out) in records.iter_mut().enumerate() {
            self.store.oob(Ppn(first.0 + k as u32), out);
        }
        OobRun {
            programmed,
            stopped_at,
        }
    }

    /// [`read_oob_run`](Self::read_oob_run) with the media model on: each read goes through the
    /// ECC (its retries take time, and it may find a record lost), so read by read.
    fn run_read_by_read<const N: usize>(
        &mut self,
        (block, from): (BlockId, u32),
        records: &mut Vec<[u8; N]>,
        (not_before, cause): (u64, OpCause),
    ) -> Result<OobRun, FlashError> {
        let ppb = self.config.geometry.pages_per_block;
        let mut record = [0; N];
        for p in from..ppb {
            let ppn = self.config.geometry.ppn(block, p);
            let (state, _) = self.read_oob(ppn, &mut record, not_before, cause)?;
            if state != PageState::Programmed {
                return Ok(OobRun {
                    programmed: p - from,
                    stopped_at: Some((ppn, state)),
                });
            }
            records.push(record);
        }
        Ok(OobRun {
            programmed: ppb - from,
            stopped_at: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::content::{Content, ContentTag};
    use crate::preset::DeviceConfig;
    use crate::timing::Span;

    /// A device whose blocks 0..4 hold: a part-written block, a full one, one with a torn page
    /// in the middle of its programs, one whose erase was cut; the rest erased.
    fn written(media: bool) -> Flash {
        let mut config = DeviceConfig::preset("small").unwrap();
        if media {
            config = config.with_media("mlc", 0.0, 1).unwrap();
        }
        let mut f = Flash::in_memory(config, 16, true);
        let ppb = f.geometry().pages_per_block;
        let program = |f: &mut Flash, block: u32, pages: u32| {
            for p in 0..pages {
                let ppn = f.geometry().ppn(BlockId(block), p);
                let tag = Content::Tag(ContentTag {
                    lpn: ppn.0,
                    write: 1,
                });
                let oob = [(ppn.0 & 0xff) as u8, (ppn.0 >> 8) as u8, 7];
                f.program(ppn, &tag, &oob, 0, OpCause::HostData).unwrap();
            }
        };
        program(&mut f, 0, 5);
        program(&mut f, 1, ppb);
        program(&mut f, 2, 9);
        program(&mut f, 3, 4);
        if !media {
            let torn = f.geometry().ppn(BlockId(2), 3);
            f.store.set_torn(torn);
            f.store.set_erase_torn(BlockId(3));
        }
        f
    }

    /// What `read_oob` page by page gives for the same pages: the records of the programmed
    /// pages before the first other one, and that one.
    fn read_by_read(
        f: &mut Flash,
        block: BlockId,
        from: u32,
    ) -> (Vec<[u8; 16]>, OobRun, Vec<Span>) {
        let (mut records, mut spans) = (Vec::new(), Vec::new());
        let ppb = f.geometry().pages_per_block;
        for p in from..ppb {
            let ppn = f.geometry().ppn(block, p);
            let mut record = [0u8; 16];
            let (state, span) = f.read_oob(ppn, &mut record, 10, OpCause::Recovery).unwrap();
            spans.push(span);
            if state != PageState::Programmed {
                let run = OobRun {
                    programmed: p - from,
                    stopped_at: Some((ppn, state)),
                };
                return (records, run, spans);
            }
            records.push(record);
        }
        let run = OobRun {
            programmed: ppb - from,
            stopped_at: None,
        };
        (records, run, spans)
    }

    /// Every block and starting page, on devices with and without the media model, recording:
    /// the run reads what reads one by one read, with the same operations logged (spans
    /// included), the same counters, and the timeline left where they leave it.
    #[test]
    fn a_run_reads_what_reads_one_by_one_read() {
        for media in [false, true] {
            let base = written(media);
            let ppb = base.geometry().pages_per_block;
            for (block, from) in (0..6).flat_map(|b| [0, 2, 3, 4, 5, ppb - 1, ppb].map(|p| (b, p)))
            {
                let block = BlockId(block);
                let (mut one, mut run) = (written(media), written(media));
                one.start_recording();
                run.start_recording();
                let (records, expected, _) = read_by_read(&mut one, block, from);
                let mut got = Vec::new();
                let ended = run
                    .read_oob_run(block, from, &mut got, 10, OpCause::Recovery)
                    .unwrap();
                assert_eq!(
                    ended, expected,
                    "block {block:?} from {from}, media {media}"
                );
                assert_eq!(got, records);
                let ops = |f: &Flash| format!("{:?}", f.log().unwrap().ops);
                assert_eq!(ops(&run), ops(&one));
                assert_eq!(run.stats().reads, one.stats().reads);
                assert_eq!(run.chip_free_times(), one.chip_free_times());
                assert_eq!(run.ops_issued(), one.ops_issued());
            }
        }
    }

    /// A block outside the device is a typed error, as for an erase.
    #[test]
    fn a_run_outside_the_device_is_an_error() {
        let mut f = written(false);
        let blocks = f.geometry().blocks();
        let mut records: Vec<[u8; 16]> = Vec::new();
        assert!(matches!(
            f.read_oob_run(BlockId(blocks), 0, &mut records, 0, OpCause::Recovery),
            Err(FlashError::BlockOutOfRange { .. })
        ));
    }
}
