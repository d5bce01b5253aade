//! Functional behaviour of LightTx: concurrent transactions, reads inside a transaction, abort,
//! conflicts, typed refusals, parameters.

use flash::{Content, ContentTag, DeviceConfig, Flash, Lpn};
use ftl::{
    BlockDevice, DesignOptions, DwriteFlag, FtlError, PageOutcome, SwriteMode, Transactional,
    TxUuid,
};
use lighttx::LightTx;

fn tag(lpn: u32, write: u64) -> Content {
    Content::Tag(ContentTag { lpn, write })
}

fn flash() -> Flash {
    Flash::in_memory(
        DeviceConfig::preset("small").unwrap(),
        atomic_write::format::OOB_BYTES,
        true,
    )
}

fn dev() -> LightTx {
    LightTx::format(flash(), &DesignOptions::default()).unwrap()
}

fn w(o: &PageOutcome) -> Option<u64> {
    match o {
        PageOutcome::Data(c) => c.tag().map(|t| t.write),
        _ => None,
    }
}

fn read1(d: &mut LightTx, lpn: u32, t: u64) -> Option<u64> {
    let mut out = Vec::new();
    d.read(Lpn(lpn), 1, t, &mut out).unwrap();
    w(&out[0])
}

#[test]
fn interleaved_transactions_commit_and_abort_independently() {
    let mut d = dev();
    let t = d.flash().idle_ns();
    d.write(Lpn(1), &[tag(1, 1)], t).unwrap();
    d.dwrite(TxUuid(10), Lpn(1), &tag(1, 2), DwriteFlag::Head, t)
        .unwrap();
    d.dwrite(TxUuid(20), Lpn(5), &tag(5, 3), DwriteFlag::Head, t)
        .unwrap();
    d.dwrite(TxUuid(10), Lpn(2), &tag(2, 4), DwriteFlag::Body, t)
        .unwrap();
    d.write(Lpn(9), &[tag(9, 5)], t).unwrap();
    d.dwrite(TxUuid(20), Lpn(6), &tag(6, 6), DwriteFlag::Body, t)
        .unwrap();
    // Conflicts are refused, by plain writes and by transactions; a refused page aborts its
    // transaction (20).
    assert_eq!(
        d.write(Lpn(5), &[tag(5, 8)], t),
        Err(FtlError::Conflict {
            lpn: Lpn(5),
            holder: TxUuid(20)
        })
    );
    assert_eq!(
        d.dwrite(TxUuid(20), Lpn(1), &tag(1, 7), DwriteFlag::Body, t),
        Err(FtlError::Conflict {
            lpn: Lpn(1),
            holder: TxUuid(10)
        })
    );
    // Reads inside and outside.
    let mut out = Vec::new();
    d.tx_read(TxUuid(10), Lpn(1), 2, t, &mut out).unwrap();
    assert_eq!(
        out.iter().map(w).collect::<Vec<_>>(),
        vec![Some(2), Some(4)]
    );
    assert_eq!(read1(&mut d, 1, t), Some(1));
    let r = d
        .dwrite(TxUuid(10), Lpn(3), &tag(3, 9), DwriteFlag::Rear, t)
        .unwrap();
    assert!(r.durable_ns.is_some());
    assert_eq!(read1(&mut d, 1, r.ack_ns), Some(2));
    assert_eq!(read1(&mut d, 3, r.ack_ns), Some(9));
    assert_eq!(read1(&mut d, 5, r.ack_ns), None);
    // 20 was aborted by its refused page: no dynamic transaction is open.
    assert_eq!(d.abort(TxUuid(0), r.ack_ns), Err(FtlError::NoDynamicTx));
    assert_eq!(read1(&mut d, 5, r.ack_ns), None);
    assert_eq!(read1(&mut d, 6, r.ack_ns), None);
    assert_eq!(
        d.abort(TxUuid(10), r.ack_ns),
        Err(FtlError::AlreadyCommitted(TxUuid(10)))
    );
    assert_eq!(
        d.abort(TxUuid(20), r.ack_ns),
        Err(FtlError::UnknownTx(TxUuid(20)))
    );
    let s = d
        .swrite(
            TxUuid(30),
            &[(Lpn(5), tag(5, 10)), (Lpn(7), tag(7, 11))],
            SwriteMode::Sync,
            r.ack_ns,
        )
        .unwrap();
    assert_eq!(read1(&mut d, 5, s.ack_ns), Some(10));
    d.check_invariants().unwrap();
    let m: std::collections::BTreeMap<_, _> = d.metrics().into_iter().collect();
    assert_eq!(m["commit_records_written"], 2.0);
}

#[test]
fn abort_zero_with_two_open_transactions_is_ambiguous() {
    let mut d = dev();
    let t = d.flash().idle_ns();
    assert_eq!(d.abort(TxUuid(0), t), Err(FtlError::NoDynamicTx));
    d.dwrite(TxUuid(1), Lpn(1), &tag(1, 1), DwriteFlag::Head, t)
        .unwrap();
    d.dwrite(TxUuid(2), Lpn(2), &tag(2, 2), DwriteFlag::Head, t)
        .unwrap();
    assert_eq!(d.abort(TxUuid(0), t), Err(FtlError::UnknownTx(TxUuid(0))));
    assert_eq!(
        d.dwrite(TxUuid(1), Lpn(3), &tag(3, 3), DwriteFlag::Head, t),
        Err(FtlError::DuplicateTx(TxUuid(1)))
    );
    assert_eq!(
        d.dwrite(TxUuid(3), Lpn(3), &tag(3, 3), DwriteFlag::Rear, t),
        Err(FtlError::UnknownTx(TxUuid(3)))
    );
}

#[test]
fn zone_parameters_are_checked() {
    let bad = |o: DesignOptions| {
        matches!(
            LightTx::format(flash(), &o),
            Err(FtlError::InvalidOption(_))
        )
    };
    assert!(bad(DesignOptions::default().with("zone_blocks", 2)));
    assert!(bad(DesignOptions::default().with("zone_blocks", 100)));
    assert!(bad(DesignOptions::default()
        .with("zone_blocks", 8)
        .with("zone_mb", 1)));
    assert!(bad(DesignOptions::default().with("zone_blok", 8)));
    // 1 MB of 128 KB blocks = 8 blocks.
    assert!(LightTx::format(flash(), &DesignOptions::default().with("zone_mb", 1)).is_ok());
}
