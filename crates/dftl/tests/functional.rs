//! DFTL returns the last written data for random operation sequences under GC pressure (90 %
//! utilisation, a small CMT), with its invariants checked after every step.

use flash::{Content, ContentTag, DeviceConfig, Flash, Lpn};
use ftl::{BlockDevice, DesignOptions, FtlError, PageOutcome};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    Write { lpn: u32, pages: u32 },
    Read { lpn: u32, pages: u32 },
    Trim { lpn: u32 },
    Flush,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (0u32..u32::MAX, 1u32..8).prop_map(|(lpn, pages)| Op::Write { lpn, pages }),
        3 => (0u32..u32::MAX, 1u32..8).prop_map(|(lpn, pages)| Op::Read { lpn, pages }),
        1 => (0u32..u32::MAX).prop_map(|lpn| Op::Trim { lpn }),
        1 => Just(Op::Flush),
    ]
}

fn device(cmt: u32) -> dftl::Dftl {
    let flash = Flash::in_memory(
        DeviceConfig::preset("small").unwrap(),
        dftl::format::OOB_BYTES,
        true,
    );
    dftl::Dftl::format(
        flash,
        &DesignOptions::default()
            .with("cmt_entries", cmt)
            .with("checkpoint_blocks", 8),
    )
    .unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    #[test]
    fn reads_return_the_last_write(ops in proptest::collection::vec(op(), 200..600), cmt in 16u32..128) {
        let mut d = device(cmt);
        let n = d.logical_pages();
        let hot = n * 9 / 10;
        let mut model: Vec<Option<u64>> = vec![None; n as usize];
        // Fill to 90 % so GC and translation-page GC run.
        let mut t = 0;
        let mut w = 0u64;
        for start in (0..hot).step_by(32) {
            let k = 32.min(hot - start);
            let pages: Vec<Content> = (0..k).map(|i| { w += 1; model[(start + i) as usize] = Some(w); Content::Tag(ContentTag { lpn: start + i, write: w }) }).collect();
            t = d.write(Lpn(start), &pages, t).unwrap().ack_ns;
        }
        let mut out = Vec::new();
        for o in ops {
            match o {
                Op::Write { lpn, pages } => {
                    let start = lpn % (hot - pages);
                    let contents: Vec<Content> = (0..pages).map(|i| { w += 1; model[(start + i) as usize] = Some(w); Content::Tag(ContentTag { lpn: start + i, write: w }) }).collect();
                    t = d.write(Lpn(start), &contents, t).unwrap().ack_ns;
                }
                Op::Read { lpn, pages } => {
                    let start = lpn % (n - pages);
                    t = d.read(Lpn(start), pages, t, &mut out).unwrap().ack_ns;
                    for (i, r) in out.iter().enumerate() {
                        let l = start + i as u32;
                        match (model[l as usize], r) {
                            (None, PageOutcome::Unwritten) => {}
                            (Some(w), PageOutcome::Data(c)) => prop_assert_eq!(c.tag(), Some(ContentTag { lpn: l, write: w })),
                            (m, r) => prop_assert!(false, "lpn {}: expected {:?}, read {:?}", l, m, r),
                        }
                    }
                }
                Op::Trim { lpn } => {
                    let l = lpn % n;
                    t = d.trim(Lpn(l), 1, t).unwrap().ack_ns;
                    model[l as usize] = None;
                }
                Op::Flush => t = d.flush(t).unwrap().ack_ns,
            }
            if let Err(e) = d.check_invariants() {
                prop_assert!(false, "invariant broken: {}", e);
            }
        }
    }
}

#[test]
fn bad_input_is_a_typed_error() {
    let mut d = device(64);
    let n = d.logical_pages();
    let page = [Content::Tag(ContentTag { lpn: 0, write: 1 })];
    assert!(matches!(
        d.write(Lpn(n), &page, 0),
        Err(FtlError::LpnOutOfRange { .. })
    ));
    assert!(matches!(
        d.write(Lpn(0), &[], 0),
        Err(FtlError::EmptyRequest)
    ));
    let mut out = Vec::new();
    assert!(matches!(
        d.read(Lpn(n - 1), 2, 0, &mut out),
        Err(FtlError::LpnOutOfRange { .. })
    ));
    assert!(matches!(
        d.read(Lpn(0), 0, 0, &mut out),
        Err(FtlError::EmptyRequest)
    ));
    d.write(Lpn(0), &page, 100).unwrap();
    assert!(matches!(
        d.write(Lpn(0), &page, 50),
        Err(FtlError::TimeWentBackwards { .. })
    ));
    let flash = Flash::in_memory(
        DeviceConfig::preset("small").unwrap(),
        dftl::format::OOB_BYTES,
        true,
    );
    assert!(matches!(
        dftl::Dftl::format(flash, &DesignOptions::default().with("oob_scan", "of")),
        Err(FtlError::InvalidOption(_))
    ));
    for o in [
        DesignOptions::default().with("cmt_entires", 5),
        // The CMT's index keeps the dirty bit in a slot number's top bit.
        DesignOptions::default().with("cmt_entries", 1u64 << 31),
    ] {
        let flash = Flash::in_memory(
            DeviceConfig::preset("small").unwrap(),
            dftl::format::OOB_BYTES,
            true,
        );
        assert!(matches!(
            dftl::Dftl::format(flash, &o),
            Err(FtlError::InvalidOption(_))
        ));
    }
}

#[test]
fn an_unformatted_device_is_refused_by_recovery() {
    let flash = Flash::in_memory(
        DeviceConfig::preset("small").unwrap(),
        dftl::format::OOB_BYTES,
        true,
    );
    assert!(matches!(
        dftl::Dftl::recover(flash, &DesignOptions::default()),
        Err(FtlError::Corrupt(_))
    ));
}

fn id() -> flash::ImageIdentity {
    flash::ImageIdentity {
        design: "dftl".into(),
        format_version: 1,
        params_hash: DesignOptions::default().fingerprint(),
    }
}

#[test]
fn full_data_and_file_backed_devices_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dftl.img");
    let config = DeviceConfig::preset("small").unwrap();
    let store =
        flash::FileStore::create(&path, &config.geometry, dftl::format::OOB_BYTES, &id()).unwrap();
    let mut d = dftl::Dftl::format(
        Flash::new(config.clone(), Box::new(store)),
        &DesignOptions::default(),
    )
    .unwrap();
    let data: Vec<Content> = (0..40u8)
        .map(|i| Content::Bytes(vec![i; 4096].into_boxed_slice()))
        .collect();
    let t = d.write(Lpn(10), &data, 0).unwrap().ack_ns;
    let mut flash = Box::new(d).into_flash();
    flash.sync().unwrap();
    drop(flash);
    let store =
        flash::FileStore::open(&path, &config.geometry, dftl::format::OOB_BYTES, &id()).unwrap();
    let mut flash = Flash::new(config, Box::new(store));
    flash.start_clock_at(t);
    let (mut d, report) = dftl::Dftl::recover(flash, &DesignOptions::default()).unwrap();
    assert!(report.flash_reads > 0);
    let mut out = Vec::new();
    d.read(Lpn(10), 40, report.sim_ns + t, &mut out).unwrap();
    for (i, r) in out.iter().enumerate() {
        let PageOutcome::Data(c) = r else {
            panic!("page {i}: {r:?}")
        };
        assert_eq!(c.as_bytes().unwrap(), &vec![i as u8; 4096][..]);
    }
    d.check_invariants().unwrap();
}

/// Writes `pages` random single pages on a fresh device, then cuts power (drained) and recovers.
fn recovery_after(checkpoint_blocks: u32, pages: u32) -> ftl::RecoveryReport {
    let config = DeviceConfig::preset("small").unwrap();
    let flash = Flash::in_memory(config.clone(), dftl::format::OOB_BYTES, true);
    let o = DesignOptions::default()
        .with("checkpoint_blocks", checkpoint_blocks)
        .with("cmt_entries", 4096);
    let mut d = dftl::Dftl::format(flash, &o).unwrap();
    let n = d.logical_pages();
    let mut t = 0;
    let mut x = 12345u32;
    for w in 1..=u64::from(pages) {
        x = x.wrapping_mul(1_103_515_245).wrapping_add(12_345);
        let lpn = (x >> 8) % n;
        t = d
            .write(Lpn(lpn), &[Content::Tag(ContentTag { lpn, write: w })], t)
            .unwrap()
            .ack_ns;
    }
    let at = d.flash().idle_ns();
    let mut flash = Box::new(d).into_flash();
    flash.start_clock_at(at);
    let (d, report) = dftl::Dftl::recover(flash, &o).unwrap();
    d.check_invariants().unwrap();
    report
}

fn detail(r: &ftl::RecoveryReport, key: &str) -> f64 {
    r.details.iter().find(|(k, _)| k == key).unwrap().1
}

#[test]
fn recovery_cost_grows_with_the_scan_zone_not_the_device() {
    // The same workload with checkpoints every 2, 8 and 32 blocks opened: recovery scans more.
    let reports: Vec<_> = [2u32, 8, 32]
        .iter()
        .map(|&c| recovery_after(c, 600))
        .collect();
    for w in reports.windows(2) {
        assert!(
            detail(&w[1], "pages_scanned") > detail(&w[0], "pages_scanned"),
            "{reports:#?}"
        );
        assert!(w[1].flash_reads > w[0].flash_reads, "{reports:#?}");
        assert!(w[1].sim_ns > w[0].sim_ns, "{reports:#?}");
    }
    // A scan zone never exceeds what checkpoint_blocks allows plus the reserved look-ahead.
    assert!(detail(&reports[0], "blocks_scanned") < 64.0, "{reports:#?}");
}

#[test]
fn a_full_data_device_in_memory_survives_a_power_cut() {
    let config = DeviceConfig::preset("small").unwrap();
    let flash = Flash::in_memory(config, dftl::format::OOB_BYTES, false);
    let o = DesignOptions::default().with("cmt_entries", 32);
    let mut d = dftl::Dftl::format(flash, &o).unwrap();
    let n = d.logical_pages();
    let mut t = 0;
    let mut w = 0;
    let mut last = vec![0u64; n as usize];
    // Three passes over 90 % of the device: GC and translation-page write-backs run.
    for pass in 0..3 {
        for start in (0..n * 9 / 10).step_by(7) {
            let k = 7.min(n * 9 / 10 - start);
            let pages: Vec<Content> = (0..k)
                .map(|i| {
                    w += 1;
                    last[(start + i) as usize] = w;
                    Content::Bytes(
                        ContentTag {
                            lpn: start + i,
                            write: w,
                        }
                        .to_bytes(4096),
                    )
                })
                .collect();
            t = d.write(Lpn(start), &pages, t + pass).unwrap().ack_ns;
        }
    }
    let mut flash = Box::new(d).into_flash();
    flash.start_clock_at(t);
    let (mut d, report) = dftl::Dftl::recover(flash, &o).unwrap();
    d.check_invariants().unwrap();
    let mut out = Vec::new();
    d.read(Lpn(0), n, t + report.sim_ns, &mut out).unwrap();
    for (lpn, r) in out.iter().enumerate() {
        let expected = last[lpn];
        match r {
            PageOutcome::Unwritten => assert_eq!(expected, 0, "lpn {lpn}"),
            PageOutcome::Data(c) => assert_eq!(
                c.tag(),
                Some(ContentTag {
                    lpn: lpn as u32,
                    write: expected
                }),
                "lpn {lpn}"
            ),
            PageOutcome::Uncorrectable => panic!("lpn {lpn} uncorrectable"),
        }
    }
}

#[test]
fn overwriting_the_whole_logical_space_keeps_working() {
    // Logical capacity leaves GC its reserve, so a device written full, over and over, never
    // runs out of space (FtlError::NoSpace is for a pool that GC cannot refill).
    let config = DeviceConfig::preset("small").unwrap();
    let flash = Flash::in_memory(config, dftl::format::OOB_BYTES, true);
    let mut d = dftl::Dftl::format(flash, &DesignOptions::default()).unwrap();
    let n = d.logical_pages();
    let mut t = 0;
    for round in 0..4u64 {
        for lpn in 0..n {
            let page = [Content::Tag(ContentTag { lpn, write: round })];
            t = d.write(Lpn(lpn), &page, t).unwrap().ack_ns;
        }
    }
    d.check_invariants().unwrap();
}

#[test]
fn checkpoints_follow_checkpoint_blocks() {
    // The reservation log must not force checkpoints earlier than the scan-zone knob asks.
    for cb in [4u32, 24] {
        let flash = Flash::in_memory(
            DeviceConfig::preset("small").unwrap(),
            dftl::format::OOB_BYTES,
            true,
        );
        let o = DesignOptions::default().with("checkpoint_blocks", cb);
        let mut d = dftl::Dftl::format(flash, &o).unwrap();
        let n = d.logical_pages() * 9 / 10;
        let mut t = 0;
        let mut x = 7u32;
        for w in 0..20_000u64 {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12_345);
            let lpn = (x >> 8) % n;
            let page = [Content::Tag(ContentTag { lpn, write: w })];
            t = d.write(Lpn(lpn), &page, t).unwrap().ack_ns;
        }
        let m: std::collections::BTreeMap<String, f64> = d.metrics().into_iter().collect();
        let per = m["blocks_opened"] / m["checkpoints"];
        assert!(
            per >= cb as f64 * 0.9 && per <= cb as f64 * 1.5,
            "checkpoint_blocks {cb}: one checkpoint per {per:.1} blocks opened ({m:?})"
        );
    }
}

/// Issue #67: a damaged translation page fails recovery with an error that names the page,
/// what its OOB record expects and what it holds, in one short line: never the page's bytes
/// (it printed all 4,096 as decimal numbers).
#[test]
fn a_damaged_translation_page_is_named_in_one_short_line() {
    let config = DeviceConfig::preset("small").unwrap();
    let flash = Flash::in_memory(config.clone(), dftl::format::OOB_BYTES, false);
    let mut d =
        dftl::Dftl::format(flash, &DesignOptions::default().with("cmt_entries", 64)).unwrap();
    let mut t = 0;
    for lpn in (0..d.logical_pages()).step_by(3) {
        let page = [Content::Tag(ContentTag { lpn, write: 1 })];
        t = d.write(Lpn(lpn), &page, t).unwrap().ack_ns;
    }
    t = d.flush(t).unwrap().ack_ns;
    let mut store = Box::new(d).into_flash().into_store();
    let translation = |oob: &[u8]| {
        dftl::format::OobRecord::decode(oob).is_ok_and(|r| r.kind == dftl::format::KIND_TRANSLATION)
    };
    assert!(flash::flip_a_data_bit(store.as_mut(), translation) > 0);
    let mut flash = Flash::new(config, store);
    flash.start_clock_at(t);
    let Err(FtlError::Corrupt(msg)) = dftl::Dftl::recover(flash, &DesignOptions::default()) else {
        panic!("a damaged translation page recovered");
    };
    assert!(msg.starts_with("translation page "), "{msg}");
    assert!(
        msg.contains("does not read back intact: it holds 4096 bytes whose CRC32C is 0x"),
        "{msg}"
    );
    assert!(msg.contains("stored,") && msg.contains("computed"), "{msg}");
    assert!(msg.len() < 300 && msg.matches(", ").count() < 5, "{msg}");
}
