//! DFTL on worn media (docs/reliability.md, docs/dftl.md): a translation page lost to the
//! media is rebuilt from the data pages' OOB records, at run time and in recovery, and the
//! host reads what it wrote; a lost seal of the newest checkpoint is a typed media loss of the
//! device, a lost seal of the older one costs nothing.

use dftl::format::{OobRecord, KIND_TRANSLATION, OOB_BYTES};
use dftl::layout::Layout;
use flash::{Content, ContentTag, DeviceConfig, Fault, Flash, Lpn, Ppn};
use ftl::{BlockDevice, DesignOptions, FtlError, PageOutcome};

fn media_device() -> DeviceConfig {
    DeviceConfig::small_with_bit_errors_only()
}

fn options() -> DesignOptions {
    DesignOptions::default()
        .with("cmt_entries", 16)
        .with("checkpoint_blocks", 8)
}

/// A device with `n` pages written (write number = lpn + 1), its translation pages on flash.
fn written(n: u32) -> (dftl::Dftl, u64) {
    let flash = Flash::in_memory(media_device(), OOB_BYTES, true);
    let mut d = dftl::Dftl::format(flash, &options()).unwrap();
    let mut t = 0;
    for start in (0..n).step_by(16) {
        let pages: Vec<Content> = (start..(start + 16).min(n))
            .map(|lpn| {
                Content::Tag(ContentTag {
                    lpn,
                    write: lpn as u64 + 1,
                })
            })
            .collect();
        t = d.write(Lpn(start), &pages, t).unwrap().ack_ns;
    }
    (d, t)
}

/// The newest translation page of tvpn `t` on the device, found by its OOB record.
fn translation_page(flash: &Flash, t: u32) -> Ppn {
    let mut best = (0, Ppn::NONE);
    let mut rec = [0u8; OOB_BYTES as usize];
    for p in 0..flash.geometry().pages() {
        if flash.peek_state(Ppn(p)) != flash::PageState::Programmed {
            continue;
        }
        flash.oob_record(Ppn(p), &mut rec);
        if let Ok(r) = OobRecord::decode(&rec) {
            if r.kind == KIND_TRANSLATION && r.id == t && r.seq >= best.0 {
                best = (r.seq, Ppn(p));
            }
        }
    }
    assert!(!best.1.is_none(), "no translation page {t} on flash");
    best.1
}

fn assert_reads_written(d: &mut dyn BlockDevice, n: u32, at: u64) {
    let mut out = Vec::new();
    for start in (0..n).step_by(64) {
        let k = 64.min(n - start);
        d.read(Lpn(start), k, at, &mut out).unwrap();
        for (i, o) in out.iter().enumerate() {
            let lpn = start + i as u32;
            let want = ContentTag {
                lpn,
                write: lpn as u64 + 1,
            };
            assert_eq!(o, &PageOutcome::Data(Content::Tag(want)), "lpn {lpn}");
        }
    }
}

fn metric(d: &dyn BlockDevice, name: &str) -> f64 {
    d.metrics()
        .into_iter()
        .find(|(n, _)| n == name)
        .map_or(0.0, |(_, v)| v)
}

#[test]
fn a_translation_page_lost_while_running_is_rebuilt() {
    let (mut d, t) = written(2400);
    let tpage = translation_page(d.flash(), 0);
    d.flash_mut().inject(Fault::Read(tpage));
    assert_reads_written(&mut d, 2400, t);
    assert_eq!(metric(&d, "translation_page_rebuilds"), 1.0);
    d.check_invariants().unwrap();
}

#[test]
fn recovery_rebuilds_a_lost_translation_page() {
    let (d, t) = written(2400);
    let mut flash = Box::new(d).into_flash();
    let tpage = translation_page(&flash, 1);
    flash.inject(Fault::Read(tpage));
    flash.start_clock_at(t);
    let (mut r, report) = dftl::Dftl::recover(flash, &options()).unwrap();
    let lost = report
        .details
        .iter()
        .find(|(n, _)| n == "lost_translation_pages")
        .unwrap()
        .1;
    assert_eq!(lost, 1.0);
    r.check_invariants().unwrap();
    let at = r.flash().idle_ns();
    assert_reads_written(&mut r, 2400, at);
}

#[test]
fn a_lost_seal_costs_the_device_only_if_it_is_the_newest() {
    let (d, t) = written(2400);
    let flash = Box::new(d).into_flash();
    let g = flash.geometry().clone();
    let layout = Layout::new(&g, g.pages());
    let seal = |slot| layout.slot_page(&g, slot, layout.payload_pages);
    // The newest seal is the one in the slot programmed last.
    let newest = (0..2)
        .max_by_key(|&s| {
            let b = flash.peek_page(seal(s)).unwrap();
            u64::from_le_bytes(b[8..16].try_into().unwrap())
        })
        .unwrap();
    for (slot, costs_the_device) in [(newest, true), (1 - newest, false)] {
        let mut f = Flash::new(flash.config().clone(), flash.store().snapshot());
        f.inject(Fault::Read(seal(slot)));
        f.start_clock_at(t);
        match dftl::Dftl::recover(f, &options()) {
            Err(FtlError::MediaLoss { ppn, .. }) => {
                assert!(costs_the_device, "older seal lost: {ppn}");
                assert_eq!(ppn, seal(slot));
            }
            Ok((mut r, _)) => {
                assert!(!costs_the_device, "newest seal lost, yet recovered");
                let at = r.flash().idle_ns();
                assert_reads_written(&mut r, 2400, at);
            }
            Err(e) => panic!("{e}"),
        }
    }
}
