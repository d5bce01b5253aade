//! Functional behaviour of Atomic-Write: last write wins, reads inside a transaction, abort,
//! typed refusals, recovery after a clean stop, GC at high utilisation.

use atomic_write::AtomicWrite;
use flash::{Content, ContentTag, DeviceConfig, Flash, Lpn};
use ftl::{
    BlockDevice, DesignOptions, DwriteFlag, FtlError, PageOutcome, SwriteMode, Transactional,
    TxUuid,
};

fn tag(lpn: u32, write: u64) -> Content {
    Content::Tag(ContentTag { lpn, write })
}

fn dev() -> AtomicWrite {
    let flash = Flash::in_memory(
        DeviceConfig::preset("small").unwrap(),
        atomic_write::format::OOB_BYTES,
        true,
    );
    AtomicWrite::format(flash, &DesignOptions::default()).unwrap()
}

fn read1(d: &mut AtomicWrite, lpn: u32, t: u64) -> PageOutcome {
    let mut out = Vec::new();
    d.read(Lpn(lpn), 1, t, &mut out).unwrap();
    out.pop().unwrap()
}

fn write_of(o: &PageOutcome) -> Option<u64> {
    match o {
        PageOutcome::Data(c) => c.tag().map(|t| t.write),
        _ => None,
    }
}

#[test]
fn last_write_wins_and_transactions_commit() {
    let mut d = dev();
    let mut t = d.flash().idle_ns();
    d.write(Lpn(3), &[tag(3, 1), tag(4, 2)], t).unwrap();
    d.write(Lpn(3), &[tag(3, 3)], t).unwrap();
    let c = d
        .swrite(
            TxUuid(1),
            &[(Lpn(4), tag(4, 4)), (Lpn(9), tag(9, 5))],
            SwriteMode::Sync,
            t,
        )
        .unwrap();
    assert_eq!(c.durable_ns, Some(c.ack_ns));
    t = c.ack_ns;
    assert_eq!(write_of(&read1(&mut d, 3, t)), Some(3));
    assert_eq!(write_of(&read1(&mut d, 4, t)), Some(4));
    assert_eq!(write_of(&read1(&mut d, 9, t)), Some(5));
    assert_eq!(read1(&mut d, 10, t), PageOutcome::Unwritten);
    d.check_invariants().unwrap();
}

#[test]
fn reads_inside_a_dynamic_transaction_and_abort() {
    let mut d = dev();
    let t = d.flash().idle_ns();
    d.write(Lpn(5), &[tag(5, 1)], t).unwrap();
    d.dwrite(TxUuid(7), Lpn(5), &tag(5, 2), DwriteFlag::Head, t)
        .unwrap();
    d.dwrite(TxUuid(7), Lpn(6), &tag(6, 3), DwriteFlag::Body, t)
        .unwrap();
    // The transaction sees its own pages, everyone else the committed ones.
    let mut out = Vec::new();
    d.tx_read(TxUuid(7), Lpn(5), 2, t, &mut out).unwrap();
    assert_eq!(
        out.iter().map(write_of).collect::<Vec<_>>(),
        vec![Some(2), Some(3)]
    );
    assert_eq!(write_of(&read1(&mut d, 5, t)), Some(1));
    assert_eq!(read1(&mut d, 6, t), PageOutcome::Unwritten);
    // One transaction at a time; plain writes wait for REAR/ABORT.
    assert_eq!(
        d.dwrite(TxUuid(8), Lpn(1), &tag(1, 4), DwriteFlag::Head, t),
        Err(FtlError::DynamicTxRunning(TxUuid(7)))
    );
    assert_eq!(
        d.write(Lpn(1), &[tag(1, 5)], t),
        Err(FtlError::DynamicTxRunning(TxUuid(7)))
    );
    assert!(matches!(
        d.swrite(TxUuid(9), &[(Lpn(1), tag(1, 6))], SwriteMode::Sync, t),
        Err(FtlError::DynamicTxRunning(_))
    ));
    let a = d.abort(TxUuid(0), t).unwrap();
    assert_eq!(write_of(&read1(&mut d, 5, a.ack_ns)), Some(1));
    assert_eq!(read1(&mut d, 6, a.ack_ns), PageOutcome::Unwritten);
    assert_eq!(
        d.abort(TxUuid(7), a.ack_ns),
        Err(FtlError::UnknownTx(TxUuid(7)))
    );
    // A dynamic transaction that reaches REAR commits.
    d.dwrite(TxUuid(10), Lpn(6), &tag(6, 7), DwriteFlag::Head, a.ack_ns)
        .unwrap();
    let r = d
        .dwrite(TxUuid(10), Lpn(7), &tag(7, 8), DwriteFlag::Rear, a.ack_ns)
        .unwrap();
    assert!(r.durable_ns.is_some());
    assert_eq!(write_of(&read1(&mut d, 6, r.ack_ns)), Some(7));
    assert_eq!(
        d.abort(TxUuid(10), r.ack_ns),
        Err(FtlError::AlreadyCommitted(TxUuid(10)))
    );
    d.check_invariants().unwrap();
}

#[test]
fn misuse_is_a_typed_error() {
    let mut d = dev();
    let t = d.flash().idle_ns();
    let n = d.logical_pages();
    assert!(matches!(
        d.write(Lpn(n), &[tag(n, 1)], t),
        Err(FtlError::LpnOutOfRange { .. })
    ));
    assert_eq!(
        d.swrite(TxUuid(1), &[], SwriteMode::Sync, t),
        Err(FtlError::EmptyRequest)
    );
    assert_eq!(
        d.swrite(
            TxUuid(1),
            &[(Lpn(1), tag(1, 1)), (Lpn(1), tag(1, 2))],
            SwriteMode::Sync,
            t
        ),
        Err(FtlError::DuplicatePage { lpn: Lpn(1) })
    );
    assert_eq!(
        d.dwrite(TxUuid(0), Lpn(1), &tag(1, 1), DwriteFlag::Head, t),
        Err(FtlError::ReservedTx(TxUuid(0)))
    );
    assert_eq!(
        d.dwrite(TxUuid(3), Lpn(1), &tag(1, 1), DwriteFlag::Body, t),
        Err(FtlError::UnknownTx(TxUuid(3)))
    );
    assert_eq!(d.abort(TxUuid(0), t), Err(FtlError::NoDynamicTx));
    let max = d.capabilities().max_tx_pages as u32;
    let big: Vec<(Lpn, Content)> = (0..=max).map(|i| (Lpn(i), tag(i, i as u64))).collect();
    assert!(matches!(
        d.swrite(TxUuid(4), &big, SwriteMode::Sync, t),
        Err(FtlError::TxTooLarge { .. })
    ));
    assert!(matches!(
        d.read(Lpn(0), 1, t - 1, &mut Vec::new()),
        Err(FtlError::TimeWentBackwards { .. })
    ));
    let o = DesignOptions::default().with("reserve_blok", 2);
    let flash = Flash::in_memory(DeviceConfig::preset("small").unwrap(), 28, true);
    assert!(matches!(
        AtomicWrite::format(flash, &o),
        Err(FtlError::InvalidOption(_))
    ));
}

#[test]
fn gc_at_high_utilisation_keeps_data_and_recovery_restores_it() {
    let mut d = dev();
    let n = d.logical_pages();
    let mut t = d.flash().idle_ns();
    let mut expect = vec![u64::MAX; n as usize];
    let mut w = 0u64;
    let mut x: u64 = 12345;
    for round in 0..6 * n {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let lpn = ((x >> 33) as u32) % n;
        w += 1;
        if round % 5 == 0 {
            let l2 = (lpn + 1) % n;
            w += 1;
            let c = d
                .swrite(
                    TxUuid(w),
                    &[(Lpn(lpn), tag(lpn, w - 1)), (Lpn(l2), tag(l2, w))],
                    SwriteMode::Sync,
                    t,
                )
                .unwrap();
            expect[lpn as usize] = w - 1;
            expect[l2 as usize] = w;
            t = t.max(c.arrival_ns);
        } else {
            let c = d.write(Lpn(lpn), &[tag(lpn, w)], t).unwrap();
            expect[lpn as usize] = w;
            t = c.ack_ns;
        }
        if round % 997 == 0 {
            d.check_invariants().unwrap();
        }
    }
    let m: std::collections::BTreeMap<_, _> = d.metrics().into_iter().collect();
    assert!(m["gc_victims"] > 10.0, "GC ran {} times", m["gc_victims"]);
    assert!(m["tree_pages_written"] > 0.0);
    let check = |d: &mut AtomicWrite, t: u64| {
        for lpn in 0..n {
            let o = read1(d, lpn, t);
            let want = (expect[lpn as usize] != u64::MAX).then_some(expect[lpn as usize]);
            assert_eq!(write_of(&o), want, "lpn {lpn}");
        }
    };
    check(&mut d, t);
    let f = d.flush(t).unwrap();
    let mut flash = Box::new(d).into_flash();
    flash.start_clock_at(f.ack_ns);
    let (mut r, rep) = AtomicWrite::recover(flash, &DesignOptions::default()).unwrap();
    assert!(rep.flash_reads > 0 && rep.sim_ns > 0);
    r.check_invariants().unwrap();
    let t = r.flash().idle_ns();
    check(&mut r, t);
}

/// Metadata pages a tag-only image keeps as bytes after `rounds` random writes with a flush
/// every 50, and the device (flushed).
fn kept_tree_bytes(recording: bool, rounds: u64) -> (u64, AtomicWrite, u64) {
    let mut flash = Flash::in_memory(
        DeviceConfig::preset("small").unwrap(),
        atomic_write::format::OOB_BYTES,
        true,
    );
    if recording {
        flash.start_recording();
    }
    let mut d = AtomicWrite::format(flash, &DesignOptions::default()).unwrap();
    let n = d.logical_pages() * 9 / 10;
    let mut t = d.flash().idle_ns();
    for w in 0..rounds {
        let lpn = (w.wrapping_mul(2_654_435_761) % n as u64) as u32;
        t = d.write(Lpn(lpn), &[tag(lpn, w)], t).unwrap().ack_ns;
        if w % 50 == 49 {
            t = d.flush(t).unwrap().ack_ns;
        }
    }
    t = d.flush(t).unwrap().ack_ns;
    let kept = d
        .memory()
        .into_iter()
        .find(|(k, _)| k == "flash.metadata_pages")
        .map(|(_, bytes)| bytes / d.flash().geometry().page_bytes as u64)
        .unwrap();
    (kept, d, t)
}

/// Each root written releases the tree pages it superseded from a tag-only image that is not
/// recording (issue #19: 3.5 GB of stale tree pages on a 64 GB device before); a recording
/// image keeps them (a crash image of an earlier instant may need them). Recovery of the
/// released image still reads the newest tree.
#[test]
fn superseded_tree_pages_are_released_where_no_crash_image_needs_them() {
    let rounds = 20_000;
    let (recorded, _, _) = kept_tree_bytes(true, rounds);
    let (released, d, t) = kept_tree_bytes(false, rounds);
    assert!(
        released * 2 < recorded,
        "{released} metadata pages kept, {recorded} while recording"
    );
    let n = d.logical_pages() * 9 / 10;
    let mut expect = vec![u64::MAX; n as usize];
    for w in 0..rounds {
        expect[(w.wrapping_mul(2_654_435_761) % n as u64) as usize] = w;
    }
    let mut flash = Box::new(d).into_flash();
    flash.start_clock_at(t);
    let (mut r, _) = AtomicWrite::recover(flash, &DesignOptions::default()).unwrap();
    let t = r.flash().idle_ns();
    for lpn in 0..n {
        let want = (expect[lpn as usize] != u64::MAX).then_some(expect[lpn as usize]);
        assert_eq!(write_of(&read1(&mut r, lpn, t)), want, "lpn {lpn}");
    }
}

/// Issue #67: a damaged page of the mapping tree fails recovery with an error that names the
/// page, the checksum its OOB record expects and what it holds, in one short line: never the
/// page's bytes.
#[test]
fn a_damaged_tree_page_is_named_in_one_short_line() {
    let config = DeviceConfig::preset("small").unwrap();
    let flash = Flash::in_memory(config.clone(), atomic_write::format::OOB_BYTES, false);
    let mut d = AtomicWrite::format(flash, &DesignOptions::default()).unwrap();
    let mut t = d.flash().idle_ns();
    for lpn in (0..d.logical_pages()).step_by(3) {
        t = d.write(Lpn(lpn), &[tag(lpn, 1)], t).unwrap().ack_ns;
    }
    t = d.flush(t).unwrap().ack_ns;
    let mut store = Box::new(d).into_flash().into_store();
    let tree = |oob: &[u8]| {
        use atomic_write::format::{OobRecord, KIND_GTD, KIND_TRANSLATION};
        OobRecord::decode(oob).is_ok_and(|r| r.kind == KIND_GTD || r.kind == KIND_TRANSLATION)
    };
    assert!(flash::flip_a_data_bit(store.as_mut(), tree) > 0);
    let mut flash = Flash::new(config, store);
    flash.start_clock_at(t);
    let Err(FtlError::Corrupt(msg)) = AtomicWrite::recover(flash, &DesignOptions::default()) else {
        panic!("a damaged tree page recovered");
    };
    assert!(msg.starts_with("tree page ppn "), "{msg}");
    assert!(
        msg.contains("its OOB record expects data whose CRC32C is 0x")
            && msg.contains("it reads back 4096 bytes whose CRC32C is 0x"),
        "{msg}"
    );
    assert!(msg.len() < 300 && msg.matches(", ").count() < 5, "{msg}");
}
