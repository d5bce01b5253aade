//! FAST's merges, reads against a model, and recovery.

use crate::fast::Fast;
use flash::{Content, DeviceConfig, Flash, Lpn};
use ftl::{BlockDevice, DesignOptions, PageOutcome};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::HashMap;

fn small() -> Flash {
    let cfg = DeviceConfig::preset("small").unwrap();
    Flash::in_memory(cfg, crate::format::OOB_BYTES, true)
}

fn device(o: &DesignOptions) -> Box<dyn BlockDevice> {
    crate::format(small(), o).unwrap()
}

fn stats(dev: &dyn BlockDevice) -> HashMap<String, f64> {
    dev.metrics().into_iter().collect()
}

/// Writes one page with a content tag derived from `(lpn, version)`; returns the content.
struct Writer {
    now: u64,
    version: u64,
    model: HashMap<u32, Content>,
}

impl Writer {
    fn new() -> Writer {
        Writer {
            now: 0,
            version: 0,
            model: HashMap::new(),
        }
    }
    fn write(&mut self, dev: &mut dyn BlockDevice, lpn: u32) {
        self.version += 1;
        let c = Content::Tag(flash::ContentTag {
            lpn,
            write: self.version,
        });
        self.now += 1_000;
        dev.write(Lpn(lpn), std::slice::from_ref(&c), self.now)
            .unwrap();
        self.model.insert(lpn, c);
        dev.check_invariants().unwrap();
    }
    fn run(&mut self, dev: &mut dyn BlockDevice, lpns: impl IntoIterator<Item = u32>) {
        for l in lpns {
            self.write(dev, l);
        }
    }
    fn verify(&mut self, dev: &mut dyn BlockDevice) {
        let mut out = Vec::new();
        for lpn in 0..dev.logical_pages() {
            self.now += 1_000;
            dev.read(Lpn(lpn), 1, self.now, &mut out).unwrap();
            let want = match self.model.get(&lpn) {
                Some(c) => PageOutcome::Data(c.clone()),
                None => PageOutcome::Unwritten,
            };
            assert_eq!(out[0], want, "lpn {lpn}");
        }
    }
}

#[test]
fn rewriting_a_whole_block_in_order_is_a_switch_merge_without_copies() {
    let mut dev = device(&DesignOptions::default());
    let ppb = dev.flash().geometry().pages_per_block;
    let mut w = Writer::new();
    w.run(dev.as_mut(), 0..ppb); // in place
    w.run(dev.as_mut(), 0..ppb); // SW log block, full: switch
    let m = stats(dev.as_ref());
    assert_eq!(m["switch_merges"], 1.0);
    assert_eq!(
        m["partial_merges"] + m["full_merges"] + m["merge_copies"],
        0.0
    );
    assert_eq!(dev.flash().stats().total_erases(), 1, "the old data block");
    w.verify(dev.as_mut());
}

/// Two logical blocks written in place, then offsets 0..5 of the first again: its SW log block,
/// part-written. Returns the writer.
fn part_written_sw_log(dev: &mut dyn BlockDevice) -> Writer {
    let ppb = dev.flash().geometry().pages_per_block;
    let mut w = Writer::new();
    w.run(dev, 0..2 * ppb);
    w.run(dev, 0..5);
    w
}

#[test]
fn a_part_written_sw_log_block_is_completed_by_a_partial_merge() {
    let mut dev = device(&DesignOptions::default());
    let ppb = dev.flash().geometry().pages_per_block;
    let mut w = part_written_sw_log(dev.as_mut());
    w.write(dev.as_mut(), ppb); // offset 0 of lbn 1: the SW log block of lbn 0 is merged
    let m = stats(dev.as_ref());
    assert_eq!((m["partial_merges"], m["switch_merges"]), (1.0, 0.0));
    assert_eq!(m["merge_copies"], (ppb - 5) as f64);
    w.verify(dev.as_mut());
}

/// With one RW log block: 4 logical blocks written, then `ppb` overwrites of their offsets 1..,
/// spread over the 4 and all into the one RW log block, which is then full.
fn fill_the_one_rw_log(dev: &mut dyn BlockDevice, w: &mut Writer) {
    let ppb = dev.flash().geometry().pages_per_block;
    w.run(dev, 0..4 * ppb);
    let lpns: Vec<u32> = (0..ppb).map(|k| (k % 4) * ppb + 1 + k / 4).collect();
    w.run(dev, lpns);
}

#[test]
fn a_recycled_rw_log_block_full_merges_every_logical_block_it_holds() {
    let o = DesignOptions::default().with("rw_log_blocks", 1);
    let mut dev = device(&o);
    let ppb = dev.flash().geometry().pages_per_block;
    let mut w = Writer::new();
    fill_the_one_rw_log(dev.as_mut(), &mut w);
    assert_eq!(stats(dev.as_ref())["full_merges"], 0.0);
    w.write(dev.as_mut(), 3); // the RW log is full: recycle it
    let m = stats(dev.as_ref());
    assert_eq!(m["full_merges"], 4.0);
    assert_eq!(
        m["merge_copies"],
        (4 * ppb) as f64,
        "every page of 4 full blocks"
    );
    assert_eq!(m["rw_logs_recycled"], 1.0);
    w.verify(dev.as_mut());
}

#[test]
fn random_writes_trims_and_reads_agree_with_a_model_and_survive_recovery() {
    for (seed, rw_logs) in [(1u64, "1"), (2, "3"), (3, "10")] {
        let o = DesignOptions::default().with("rw_log_blocks", rw_logs);
        let mut dev = device(&o);
        let logical = dev.logical_pages();
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut w = Writer::new();
        for _ in 0..6_000 {
            let lpn = rng.random_range(0..logical);
            if rng.random_range(0..20) == 0 {
                w.now += 1_000;
                dev.trim(Lpn(lpn), 1, w.now).unwrap();
                w.model.remove(&lpn);
            } else if rng.random_range(0..3) == 0 {
                // a sequential run from a block start (the SW log block's case)
                let start = lpn - lpn % 32;
                w.run(dev.as_mut(), start..start + rng.random_range(1..=32));
            } else {
                w.write(dev.as_mut(), lpn);
            }
        }
        w.verify(dev.as_mut());
        let m = stats(dev.as_ref());
        assert!(m["full_merges"] > 0.0 && m["partial_merges"] + m["switch_merges"] > 0.0);
        // power cut with everything on flash: trimmed pages may come back as their last data
        let flash = dev.into_flash();
        let (mut dev, report) = crate::recover(flash, &o).unwrap();
        dev.check_invariants().unwrap();
        assert_eq!(report.details[0], ("repaired_logical_blocks".into(), 0.0));
        let mut out = Vec::new();
        for lpn in 0..logical {
            w.now = w.now.max(dev.flash().idle_ns()) + 1_000;
            dev.read(Lpn(lpn), 1, w.now, &mut out).unwrap();
            if let Some(c) = w.model.get(&lpn) {
                assert_eq!(
                    out[0],
                    PageOutcome::Data(c.clone()),
                    "seed {seed} lpn {lpn}"
                );
            }
        }
        // and it keeps going
        for _ in 0..2_000 {
            w.write(dev.as_mut(), rng.random_range(0..logical));
        }
    }
}

#[test]
fn the_exported_capacity_leaves_the_log_and_merge_reserve() {
    let flash = small();
    let blocks = flash.geometry().blocks();
    let ppb = flash.geometry().pages_per_block;
    let dev = Fast::empty(flash, &DesignOptions::default()).unwrap();
    let logical_blocks = dev.logical_pages() / ppb;
    assert_eq!(logical_blocks, (blocks as f64 * 0.9).floor() as u32);
    assert_eq!(
        dev.params.rw_log_blocks,
        blocks - logical_blocks - 1 - crate::RESERVE_BLOCKS
    );
    for bad in [
        ("rw_log_blocks", "0"),
        ("rw_log_blocks", "500"),
        ("op", "0.95"),
        ("op", "0.001"),
    ] {
        let o = DesignOptions::default().with(bad.0, bad.1);
        assert!(crate::format(small(), &o).is_err(), "{bad:?} accepted");
    }
    let o = DesignOptions::default().with("log_blocks", 3);
    assert!(
        crate::format(small(), &o).is_err(),
        "unknown parameter accepted"
    );
}

/// FAST on a fresh MLC part whose blocks fail only where a test injects it.
fn on_media(o: &DesignOptions) -> Box<dyn BlockDevice> {
    let cfg = DeviceConfig::small_with_bit_errors_only();
    crate::format(Flash::in_memory(cfg, crate::format::OOB_BYTES, true), o).unwrap()
}

/// Makes the next program of any block fail until its chip has no spare block left: the
/// flash is then worn out (read-only).
fn wear_out_at_next_program(dev: &mut dyn BlockDevice) {
    let f = dev.flash_mut();
    let spares = f.config().media.as_ref().unwrap().spare_blocks_per_chip;
    for b in 0..f.geometry().blocks() {
        for _ in 0..=spares {
            f.inject(flash::Fault::Program(flash::BlockId(b)));
        }
    }
}

/// A write to `lpn` that the worn-out flash refuses: a typed error, every block still in one
/// role, every page reading what was written before, and the next write refused too.
fn refused_when_worn_out(dev: &mut dyn BlockDevice, w: &mut Writer, lpn: u32) {
    for _ in 0..2 {
        w.now += 1_000;
        let c = Content::Tag(flash::ContentTag { lpn, write: 0 });
        match dev.write(Lpn(lpn), std::slice::from_ref(&c), w.now) {
            Err(ftl::FtlError::WornOut(_)) => {}
            other => panic!("expected worn out, got {other:?}"),
        }
        dev.check_invariants().unwrap();
        w.verify(dev);
    }
}

/// A partial merge the flash stops part-way (worn out at its first copy) changes no map: the
/// SW log block keeps its role and its pages, the data block its own (it used to leave the SW
/// log block with no role: "block N has 0 roles", `mobius crashtest --ftl fast ... --wear 8`).
#[test]
fn a_partial_merge_stopped_by_worn_out_flash_keeps_every_block_and_page() {
    let mut dev = on_media(&DesignOptions::default());
    let ppb = dev.flash().geometry().pages_per_block;
    let mut w = part_written_sw_log(dev.as_mut());
    wear_out_at_next_program(dev.as_mut());
    refused_when_worn_out(dev.as_mut(), &mut w, ppb); // offset 0 of lbn 1: merge lbn 0's SW log
}

/// The same for the full merges of a recycled RW log block: the log block stays in the log.
#[test]
fn a_full_merge_stopped_by_worn_out_flash_keeps_every_block_and_page() {
    let o = DesignOptions::default().with("rw_log_blocks", 1);
    let mut dev = on_media(&o);
    let mut w = Writer::new();
    fill_the_one_rw_log(dev.as_mut(), &mut w);
    wear_out_at_next_program(dev.as_mut());
    refused_when_worn_out(dev.as_mut(), &mut w, 3); // the RW log is full: recycle it
}
