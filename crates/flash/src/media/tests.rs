//! The media model on a device: reads through the ECC, failures, replacement, reclaim, and
//! power-cut images that carry the chips' state.

use crate::media::{BlockStatus, Fault};
use crate::store::PageState;
use crate::{
    BlockId, Content, ContentTag, DeviceConfig, Flash, FlashError, OpCause, Ppn, ReadStatus,
};

fn config(part: &str, wear: f64, seed: u64) -> DeviceConfig {
    let mut c = DeviceConfig::preset("small")
        .unwrap()
        .with_media(part, wear, seed)
        .unwrap();
    let m = c.media.as_mut().unwrap();
    // No failures unless a test asks for them.
    m.grown_bad_at_endurance = 0.0;
    m.factory_bad_fraction = 0.0;
    c
}

fn tag(lpn: u32, write: u64) -> Content {
    Content::Tag(ContentTag { lpn, write })
}

fn read(f: &mut Flash, ppn: Ppn) -> ReadStatus {
    let mut oob = [0u8; 16];
    f.read(ppn, &mut oob, 0, OpCause::HostData).unwrap().0
}

/// Fills the first `pages` pages of `block` with tags (lpn = page number).
fn fill(f: &mut Flash, block: u32, pages: u32) {
    let ppb = f.geometry().pages_per_block;
    for p in 0..pages {
        let ppn = Ppn(block * ppb + p);
        f.program(ppn, &tag(ppn.0, 1), &[p as u8; 16], 0, OpCause::HostData)
            .unwrap();
    }
}

/// A fresh page of a new part reads back at once; the same device with the model off reads
/// the same data in the same time.
#[test]
fn fresh_pages_read_back_at_once() {
    let mut on = Flash::in_memory(config("mlc", 0.0, 1), 16, true);
    let mut off = Flash::in_memory(DeviceConfig::preset("small").unwrap(), 16, true);
    for f in [&mut on, &mut off] {
        fill(f, 0, 8);
    }
    for p in 0..8 {
        let mut oob = [0u8; 16];
        let a = on.read(Ppn(p), &mut oob, 0, OpCause::HostData).unwrap();
        let b = off.read(Ppn(p), &mut oob, 0, OpCause::HostData).unwrap();
        assert_eq!(a, b);
    }
    assert_eq!(on.stats().media.read_retries, 0);
    assert_eq!(on.stats().media.uncorrectable_reads, 0);
}

/// Pages left powered off for long on a worn part need retries (counted, and charged as chip
/// time), and some become uncorrectable: those never read as data, their block is queued for
/// reclaim, and they stay lost. A page whose data is lost still reads its spare area.
#[test]
fn aged_pages_need_retries_or_are_lost_and_never_read_as_data() {
    let mut c = config("mlc", 1.0, 7);
    c.media.as_mut().unwrap().power_off_s = 330 * 86_400;
    let mut f = Flash::in_memory(c, 16, true);
    let ppb = f.geometry().pages_per_block;
    for b in 0..8 {
        fill(&mut f, b, ppb);
    }
    f.start_clock_at(f.idle_ns());
    let (mut lost, mut retried) = (0, 0);
    for p in 0..8 * ppb {
        let before = f.stats().media.read_retries;
        let mut oob = [0u8; 16];
        let (status, span) = f.read(Ppn(p), &mut oob, 0, OpCause::HostData).unwrap();
        let retries = f.stats().media.read_retries - before;
        let plain = f.timing().read_ns;
        match status {
            ReadStatus::Data(c) => {
                assert_eq!(c.tag(), Some(ContentTag { lpn: p, write: 1 }));
                if retries > 0 {
                    retried += 1;
                    assert!(
                        span.end_ns - span.start_ns > plain * (retries + 1),
                        "{span:?}"
                    );
                }
            }
            ReadStatus::Uncorrectable => {
                lost += 1;
                assert!(f.is_lost(Ppn(p)));
                assert_eq!(
                    read(&mut f, Ppn(p)),
                    ReadStatus::Uncorrectable,
                    "stays lost"
                );
                let (state, _) = f.read_oob(Ppn(p), &mut oob, 0, OpCause::HostData).unwrap();
                assert_eq!(state, PageState::Programmed, "the spare area reads");
                assert!(f.peek_page(Ppn(p)).is_err(), "no peek at lost data");
            }
            ReadStatus::Erased => panic!("{p} erased"),
        }
    }
    assert!(retried > 0 && lost > 0, "retried {retried} lost {lost}");
    let m = &f.stats().media;
    assert_eq!(m.uncorrectable_reads as usize, 2 * lost);
    assert!(m.retry_ns > 0 && m.first_uncorrectable_ns.is_some());
    let lost_tags = f.lost_tags();
    assert_eq!(lost_tags.len(), lost);
}

/// The same seed gives the same errors; another seed other ones.
#[test]
fn errors_are_deterministic_from_the_seed() {
    let run = |seed: u64| {
        let mut c = config("mlc", 1.0, seed);
        c.media.as_mut().unwrap().power_off_s = 365 * 86_400;
        let mut f = Flash::in_memory(c, 16, true);
        fill(&mut f, 0, 32);
        f.start_clock_at(f.idle_ns());
        let out: Vec<bool> = (0..32)
            .map(|p| read(&mut f, Ppn(p)) == ReadStatus::Uncorrectable)
            .collect();
        (out, f.stats().clone())
    };
    assert_eq!(run(3), run(3));
    assert_ne!(run(3).0, run(4).0);
}

/// A program that fails retires its block: the pages programmed before it are copied to a
/// spare, the page lands there, the table names the spare, and the design sees one program
/// that took longer. A crash image from before the table write shows the old block with the
/// failed page torn; one from after shows the spare.
#[test]
fn a_failed_program_moves_the_block_to_a_spare() {
    let mut f = Flash::in_memory(config("mlc", 0.0, 2), 16, true);
    let base = f.start_recording();
    fill(&mut f, 3, 5);
    let old = f.media_plane().unwrap().block(BlockId(3));
    f.inject(Fault::Program(BlockId(3)));
    let span = f
        .program(Ppn(3 * 32 + 5), &tag(99, 2), &[5; 16], 0, OpCause::HostData)
        .unwrap();
    let plane = f.media_plane().unwrap();
    let new = plane.block(BlockId(3));
    assert_ne!(new, old);
    assert_eq!(plane.status(old), BlockStatus::Retired);
    for p in 0..5 {
        let ReadStatus::Data(c) = read(&mut f, Ppn(3 * 32 + p)) else {
            panic!("page {p} lost")
        };
        assert_eq!(
            c.tag(),
            Some(ContentTag {
                lpn: 3 * 32 + p,
                write: 1
            })
        );
    }
    let ReadStatus::Data(c) = read(&mut f, Ppn(3 * 32 + 5)) else {
        panic!("the page did not land")
    };
    assert_eq!(c.tag(), Some(ContentTag { lpn: 99, write: 2 }));
    assert_eq!(f.write_pointer(BlockId(3)), 6);
    let m = &f.stats().media;
    assert_eq!((m.program_failures, m.retired_blocks), (1, 1));
    assert!(
        f.stats().programs_for(OpCause::Media) >= 6,
        "5 copies and the table"
    );
    // Images of the run, before and after the table write.
    let log = f.take_log().unwrap();
    let table = log
        .ops
        .iter()
        .find(|o| matches!(o.kind, crate::OpKind::Bbt(_)))
        .unwrap()
        .span;
    let cfg = f.config().clone();
    let image = log.image_at(base.as_ref(), table.start_ns, true);
    let mut g = Flash::new(cfg.clone(), image);
    assert_eq!(g.media_plane().unwrap().block(BlockId(3)), old);
    assert_eq!(read(&mut g, Ppn(3 * 32 + 5)), ReadStatus::Uncorrectable);
    assert!(
        !g.is_lost(Ppn(3 * 32 + 5)),
        "a failed program is torn, not lost"
    );
    let image = log.image_at(base.as_ref(), span.end_ns, true);
    let mut g = Flash::new(cfg, image);
    assert_eq!(g.media_plane().unwrap().block(BlockId(3)), new);
    assert!(matches!(read(&mut g, Ppn(3 * 32 + 5)), ReadStatus::Data(_)));
}

/// An erase that fails retires the block for an erased spare; when no spare is left, the
/// device turns read-only with a typed error and still reads.
#[test]
fn failed_erases_use_up_the_spares_then_the_device_is_read_only() {
    let mut f = Flash::in_memory(config("mlc", 0.0, 5), 16, true);
    fill(&mut f, 0, 3);
    let spares = f.config().media.as_ref().unwrap().spare_blocks_per_chip;
    for i in 0..spares {
        f.inject(Fault::Erase(BlockId(1)));
        f.erase(BlockId(1), 0, OpCause::GcCopy).unwrap();
        assert_eq!(f.stats().media.retired_blocks, i as u64 + 1);
        assert_eq!(f.write_pointer(BlockId(1)), 0);
        f.program(Ppn(32), &tag(1, 1), &[], 0, OpCause::HostData)
            .unwrap();
        f.erase(BlockId(1), 0, OpCause::GcCopy).unwrap();
    }
    f.inject(Fault::Erase(BlockId(1)));
    let e = f.erase(BlockId(1), 0, OpCause::GcCopy).unwrap_err();
    assert!(matches!(e, FlashError::WornOut { .. }), "{e}");
    assert!(matches!(
        f.program(Ppn(7 * 32), &tag(1, 1), &[], 0, OpCause::HostData),
        Err(FlashError::WornOut { .. })
    ));
    assert!(matches!(read(&mut f, Ppn(0)), ReadStatus::Data(_)));
}

/// Reads that needed retries queue their block; the next erase rewrites it on a spare (its
/// old block becomes a spare), after which its pages read without retries.
#[test]
fn read_reclaim_rewrites_a_block_whose_reads_needed_retries() {
    let mut c = config("mlc", 1.0, 11);
    c.media.as_mut().unwrap().power_off_s = 160 * 86_400;
    let mut f = Flash::in_memory(c, 16, true);
    fill(&mut f, 0, 32);
    fill(&mut f, 1, 32);
    f.start_clock_at(f.idle_ns());
    let retried: Vec<u32> = (0..32)
        .filter(|&p| {
            let before = f.stats().media.read_retries;
            let _ = read(&mut f, Ppn(p));
            f.stats().media.read_retries > before
        })
        .collect();
    assert!(!retried.is_empty());
    let old = f.media_plane().unwrap().block(BlockId(0));
    f.erase(BlockId(5), f.idle_ns(), OpCause::GcCopy).unwrap();
    let plane = f.media_plane().unwrap();
    assert_ne!(plane.block(BlockId(0)), old);
    assert_eq!(plane.status(old), BlockStatus::Spare);
    assert_eq!(f.stats().media.reclaimed_blocks, 1);
    let before = f.stats().media.read_retries;
    for &p in &retried {
        let _ = read(&mut f, Ppn(p));
    }
    assert_eq!(
        f.stats().media.read_retries,
        before,
        "rewritten pages are fresh"
    );
}

/// A lost page copied as lost reads uncorrectable at its new place, keeps its record and its
/// tag for the checker; a readable page cannot be copied as lost.
#[test]
fn a_lost_page_copied_stays_lost() {
    let mut f = Flash::in_memory(config("mlc", 0.0, 4), 16, true);
    fill(&mut f, 0, 2);
    assert!(matches!(
        f.program_lost_copy(Ppn(0), Ppn(32), &[1; 16], 0, OpCause::GcCopy),
        Err(FlashError::NotLost { .. })
    ));
    f.inject(Fault::Read(Ppn(1)));
    assert_eq!(read(&mut f, Ppn(1)), ReadStatus::Uncorrectable);
    f.program_lost_copy(Ppn(1), Ppn(32), &[7; 16], 0, OpCause::GcCopy)
        .unwrap();
    assert_eq!(read(&mut f, Ppn(32)), ReadStatus::Uncorrectable);
    let mut oob = [0u8; 16];
    f.read_oob(Ppn(32), &mut oob, 0, OpCause::GcCopy).unwrap();
    assert_eq!(oob, [7; 16]);
    assert_eq!(f.lost_tags(), vec![ContentTag { lpn: 1, write: 1 }; 2]);
    f.erase(BlockId(0), 0, OpCause::GcCopy).unwrap();
    assert_eq!(f.lost_tags(), vec![ContentTag { lpn: 1, write: 1 }]);
}

/// A page lost whole reads uncorrectable, and so does its spare area (read as torn): its
/// record names nothing; a page lost by `Fault::Read` still reads its record.
#[test]
fn a_page_lost_whole_reads_neither_its_data_nor_its_record() {
    let mut f = Flash::in_memory(config("mlc", 0.0, 4), 16, true);
    fill(&mut f, 0, 2);
    f.inject(Fault::Read(Ppn(0)));
    f.inject(Fault::ReadWhole(Ppn(1)));
    let mut oob = [0u8; 16];
    for p in [Ppn(0), Ppn(1)] {
        assert_eq!(read(&mut f, p), ReadStatus::Uncorrectable);
        assert!(f.is_lost(p));
    }
    let (state, _) = f.read_oob(Ppn(0), &mut oob, 0, OpCause::HostData).unwrap();
    assert_eq!((state, oob), (PageState::Programmed, [0; 16]));
    let (state, _) = f.read_oob(Ppn(1), &mut oob, 0, OpCause::HostData).unwrap();
    assert_eq!(state, PageState::Torn);
    // The owner lookup that stands for the spare area's read (DFTL's, #69) sees the same.
    let reads = f.stats().total_reads();
    let mut record = [0xFFu8; 16];
    assert!(!f.oob_record_decoded(Ppn(1), &mut record));
    assert_eq!(record, [0xFF; 16], "nothing handed on");
    assert!(f.oob_record_decoded(Ppn(0), &mut record));
    assert_eq!(record, [0; 16]);
    assert_eq!(
        f.stats().total_reads(),
        reads,
        "no flash operation of its own"
    );
}

/// The negative control hands on data the ECC could not correct, its bits flipped.
#[test]
fn the_control_hands_uncorrected_data_on() {
    let mut c = config("mlc", 0.0, 4);
    c.media.as_mut().unwrap().hand_uncorrectable = true;
    let mut f = Flash::in_memory(c.clone(), 16, true);
    fill(&mut f, 0, 1);
    f.inject(Fault::Read(Ppn(0)));
    let ReadStatus::Data(d) = read(&mut f, Ppn(0)) else {
        panic!("the control hands data on")
    };
    assert_ne!(d.tag(), Some(ContentTag { lpn: 0, write: 1 }));
}

/// Factory bad blocks are drawn from the seed and never serve the geometry; the device
/// offers its whole geometry whatever they are.
#[test]
fn factory_bad_blocks_are_hidden_behind_the_table() {
    let mut c = config("mlc", 0.0, 9);
    c.media.as_mut().unwrap().factory_bad_fraction = 0.3;
    let mut f = Flash::in_memory(c, 16, true);
    let plane = f.media_plane().unwrap();
    assert!(plane.count(BlockStatus::FactoryBad) > 0);
    let blocks = f.geometry().blocks();
    for b in 0..blocks {
        let p = f.media_plane().unwrap().block(BlockId(b));
        assert_eq!(f.media_plane().unwrap().status(p), BlockStatus::InUse);
        f.program(Ppn(b * 32), &tag(b, 1), &[], 0, OpCause::HostData)
            .unwrap();
    }
    assert!((0..blocks).all(|b| matches!(read(&mut f, Ppn(b * 32)), ReadStatus::Data(_))));
}

/// A page whose spare area alone is lost (`Fault::ReadSpare`) reads neither its record nor
/// the page (a page read decodes the spare area too), and is lost (`is_lost`), as the crash
/// checker asks of a design's media error: the error of a design that read only the record
/// (DFTL's owner lookup) is one for a page the media lost. A page beside it is not.
#[test]
fn a_page_whose_spare_area_alone_is_lost_is_lost() {
    let mut f = Flash::in_memory(config("mlc", 0.0, 4), 16, true);
    fill(&mut f, 0, 2);
    assert!(!f.is_lost(Ppn(1)));
    f.inject(Fault::ReadSpare(Ppn(1)));
    assert!(f.is_lost(Ppn(1)));
    assert!(!f.is_lost(Ppn(0)));
    let mut record = [0xFFu8; 16];
    assert!(!f.oob_record_decoded(Ppn(1), &mut record));
    let mut oob = [0u8; 16];
    let (state, _) = f.read_oob(Ppn(1), &mut oob, 0, OpCause::HostData).unwrap();
    assert_eq!(state, PageState::Torn);
    assert_eq!(read(&mut f, Ppn(1)), ReadStatus::Uncorrectable);
    assert_eq!(f.lost_tags(), vec![ContentTag { lpn: 1, write: 1 }]);
    assert!(matches!(read(&mut f, Ppn(0)), ReadStatus::Data(_)));
    f.erase(BlockId(0), 0, OpCause::GcCopy).unwrap();
    fill(&mut f, 0, 2);
    assert!(!f.is_lost(Ppn(1)), "the fault ends with the block's erase");
}

/// With the model's own draws, every page whose spare area fails after every retry (what a
/// read of the record alone sees: `oob_record_decoded`) is lost (`is_lost`): the spare area's
/// codeword is decoded by every page read with the same draws. Over pages aged 600 days at
/// rated wear (some spare areas fail), and on a younger device (none do).
#[test]
fn every_page_whose_spare_area_fails_is_lost() {
    let mut spare_lost = 0;
    for days in [600, 100] {
        let mut c = config("mlc", 1.0, 11);
        c.media.as_mut().unwrap().power_off_s = days * 86_400;
        let mut f = Flash::in_memory(c, 16, true);
        let ppb = f.geometry().pages_per_block;
        for b in 0..32 {
            fill(&mut f, b, ppb);
        }
        f.start_clock_at(f.idle_ns());
        let mut record = [0u8; 16];
        for p in (0..32 * ppb).map(Ppn) {
            if !f.oob_record_decoded(p, &mut record) {
                spare_lost += 1;
                assert!(f.is_lost(p), "{days} days: {p:?}");
            }
        }
    }
    assert!(
        spare_lost > 0,
        "the test reached spare areas the ECC cannot correct"
    );
}
