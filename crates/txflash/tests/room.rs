//! The room every TxFlash protocol sets aside for transactions in flight: a transaction keeps
//! its pages' previous versions live until it commits (TxFlash §3.2), so the device hides
//! `max_tx_pages` pages below its exported capacity and holds the new pages of every
//! transaction in flight to them. The longest write on a full, aged device is in
//! `crates/nbd/tests/longest_write.rs`.

use flash::{Content, ContentTag, DeviceConfig, Flash, Lpn};
use ftl::{BlockDevice, DesignOptions, DesignSpec, DwriteFlag, FtlError, PageOutcome, SwriteMode};
use ftl::{Transactional, TxUuid};

fn designs() -> [DesignSpec; 3] {
    [
        txflash::spec_tc(),
        txflash::spec_scc(),
        txflash::spec_bpcc(),
    ]
}

fn build(design: &DesignSpec, options: &DesignOptions) -> Result<Box<dyn BlockDevice>, FtlError> {
    let device = DeviceConfig::preset("small").unwrap();
    let oob = design.oob_record(&device.geometry);
    design.build(Flash::in_memory(device, oob, true), options)
}

fn tag(lpn: u32, write: u64) -> Content {
    Content::Tag(ContentTag { lpn, write })
}

fn read(d: &mut dyn BlockDevice, lpn: u32, at: u64) -> PageOutcome {
    let mut out = Vec::new();
    d.read(Lpn(lpn), 1, at, &mut out).unwrap();
    out.pop().unwrap()
}

fn tx(d: &mut dyn BlockDevice) -> &mut dyn Transactional {
    d.transactional().unwrap()
}

/// A room of 16 pages (`max_tx_bytes` = 16 pages): one dynamic transaction of 10 pages in
/// flight leaves 6 for every other transaction. The 7th page of a second one is refused and
/// aborts it; a static one of 7 pages is refused and writes nothing; one of 6 commits, and so
/// does the first transaction.
#[test]
fn transactions_in_flight_are_held_to_the_room_the_device_sets_aside() {
    let options = DesignOptions::default().with("max_tx_bytes", (16 * 4096).to_string());
    for design in designs() {
        let name = design.name;
        let mut d = build(&design, &options).unwrap();
        let d = d.as_mut();
        assert_eq!(tx(d).capabilities().max_tx_pages, 16, "{name}");
        let mut at = 0;
        let mut dwrite = |d: &mut dyn BlockDevice, uuid, lpn, flag| {
            at += 1;
            tx(d).dwrite(TxUuid(uuid), Lpn(lpn), &tag(lpn, uuid), flag, at)
        };
        for lpn in 0..10 {
            let flag = if lpn == 0 {
                DwriteFlag::Head
            } else {
                DwriteFlag::Body
            };
            dwrite(d, 1, lpn, flag).unwrap();
        }
        for lpn in 100..106 {
            let flag = if lpn == 100 {
                DwriteFlag::Head
            } else {
                DwriteFlag::Body
            };
            dwrite(d, 2, lpn, flag).unwrap();
        }
        let refused = dwrite(d, 2, 106, DwriteFlag::Body);
        assert!(
            matches!(
                refused,
                Err(FtlError::TxRoomTaken {
                    pages: 1,
                    in_flight: 16,
                    room: 16
                })
            ),
            "{name}: {refused:?}"
        );
        // The refused page aborted its transaction.
        assert!(
            matches!(
                dwrite(d, 2, 107, DwriteFlag::Rear),
                Err(FtlError::UnknownTx(_))
            ),
            "{name}"
        );
        let seven: Vec<(Lpn, Content)> = (200..207).map(|l| (Lpn(l), tag(l, 3))).collect();
        let refused = tx(d).swrite(TxUuid(3), &seven, SwriteMode::Sync, 100);
        assert!(
            matches!(
                refused,
                Err(FtlError::TxRoomTaken {
                    pages: 7,
                    in_flight: 10,
                    room: 16
                })
            ),
            "{name}: {refused:?}"
        );
        let done = tx(d)
            .swrite(TxUuid(4), &seven[..6], SwriteMode::Sync, 101)
            .unwrap();
        let mut at = done.ack_ns;
        let first = tx(d)
            .dwrite(TxUuid(1), Lpn(10), &tag(10, 1), DwriteFlag::Rear, at)
            .unwrap();
        at = at.max(first.ack_ns);
        for lpn in 0..=10 {
            assert_eq!(read(d, lpn, at), PageOutcome::Data(tag(lpn, 1)), "{name}");
        }
        for lpn in (100..107).chain([206]) {
            assert_eq!(read(d, lpn, at), PageOutcome::Unwritten, "{name} {lpn}");
        }
        for lpn in 200..206 {
            assert_eq!(read(d, lpn, at), PageOutcome::Data(tag(lpn, 3)), "{name}");
        }
        d.check_invariants().unwrap();
    }
}

/// A trim is cut into transactions of the room the transactions in flight leave; with none
/// left it is refused, typed, and forgets nothing.
#[test]
fn a_trim_takes_the_room_left_and_is_refused_without_any() {
    let options = DesignOptions::default().with("max_tx_bytes", (16 * 4096).to_string());
    for design in designs() {
        let name = design.name;
        let mut d = build(&design, &options).unwrap();
        let d = d.as_mut();
        let pages: Vec<Content> = (300..340).map(|l| tag(l, 5)).collect();
        for (k, chunk) in pages.chunks(16).enumerate() {
            d.write(Lpn(300 + 16 * k as u32), chunk, k as u64).unwrap();
        }
        let mut at = 10;
        for lpn in 0..12 {
            let flag = if lpn == 0 {
                DwriteFlag::Head
            } else {
                DwriteFlag::Body
            };
            tx(d)
                .dwrite(TxUuid(1), Lpn(lpn), &tag(lpn, 1), flag, at)
                .unwrap();
            at += 1;
        }
        // Four pages of room: 20 pages trimmed in five transactions.
        let done = d.trim(Lpn(300), 20, at).unwrap();
        at = at.max(done.ack_ns);
        for lpn in 12..16 {
            tx(d)
                .dwrite(TxUuid(1), Lpn(lpn), &tag(lpn, 1), DwriteFlag::Body, at)
                .unwrap();
        }
        let refused = d.trim(Lpn(320), 20, at);
        assert!(
            matches!(refused, Err(FtlError::TxRoomTaken { in_flight: 16, .. })),
            "{name}: {refused:?}"
        );
        for lpn in 300..340 {
            let want = if lpn < 320 {
                PageOutcome::Unwritten
            } else {
                PageOutcome::Data(tag(lpn, 5))
            };
            assert_eq!(read(d, lpn, at), want, "{name} {lpn}");
        }
        d.check_invariants().unwrap();
    }
}

/// Left at its default (4 MB, TxFlash §2.1), the longest transaction is 1/16 of the data pages
/// on a small device; set, it is what was set, and the device hides it below its exported
/// capacity: a setting that leaves no logical page is refused.
#[test]
fn the_room_is_the_longest_transaction_and_is_hidden_below_the_capacity() {
    let device = DeviceConfig::preset("small").unwrap();
    let g = &device.geometry;
    let data_pages = g.blocks() as u64 * (g.pages_per_block as u64 - 1);
    let pages = |n: u64| DesignOptions::default().with("max_tx_bytes", (n * 4096).to_string());
    for design in designs() {
        let name = design.name;
        let mut d = build(&design, &DesignOptions::default()).unwrap();
        assert_eq!(
            tx(d.as_mut()).capabilities().max_tx_pages,
            data_pages / 16,
            "{name}"
        );
        assert_eq!(
            d.max_write_pages(),
            Some((data_pages / 16) as u32),
            "{name}"
        );
        let logical = |n| build(&design, &pages(n)).unwrap().logical_pages() as u64;
        assert_eq!(logical(100) - logical(300), 200, "{name}");
        let mut big = build(&design, &pages(1024)).unwrap();
        assert_eq!(tx(big.as_mut()).capabilities().max_tx_pages, 1024, "{name}");
        assert!(
            matches!(
                build(&design, &pages(data_pages)),
                Err(FtlError::InvalidOption(_))
            ),
            "{name}"
        );
    }
}

/// A trim refused because a running transaction holds one of its pages changes none of them.
/// A trim is written in chunks of what the room leaves; with the room nearly taken each page is
/// its own chunk, and the trim used to write the tombstones before the held page and then
/// refuse, so the host, told nothing was done, lost those pages (found by a `--fixed` soak
/// with `--interleave-fraction 0.9 --trim-fraction 0.1`, docs/txflash.md).
#[test]
fn a_refused_trim_leaves_every_page_as_it_was() {
    for design in designs() {
        let mut d = build(&design, &DesignOptions::default()).unwrap();
        let mut t = d.flash().idle_ns();
        for l in 0..8 {
            t += 1000;
            d.write(Lpn(l), &[tag(l, l as u64 + 1)], t).unwrap();
        }
        let max = d.transactional().unwrap().capabilities().max_tx_pages as u32;
        let tx = d.transactional().unwrap();
        // One transaction fills the room but two pages, another holds page 5.
        let base = 1000;
        for k in 0..max - 2 {
            t += 1000;
            let flag = if k == 0 {
                DwriteFlag::Head
            } else {
                DwriteFlag::Body
            };
            tx.dwrite(TxUuid(1), Lpn(base + k), &tag(base + k, 100), flag, t)
                .unwrap();
        }
        t += 1000;
        tx.dwrite(TxUuid(2), Lpn(5), &tag(5, 200), DwriteFlag::Head, t)
            .unwrap();
        t += 1000;
        let refused = d.trim(Lpn(0), 8, t);
        assert!(
            matches!(refused, Err(FtlError::Conflict { lpn: Lpn(5), .. })),
            "{}: {refused:?}",
            design.name
        );
        for l in [0, 1, 2, 3, 4, 6, 7] {
            t += 1000;
            assert_eq!(
                read(d.as_mut(), l, t),
                PageOutcome::Data(tag(l, l as u64 + 1)),
                "{}: page {l} after the refused trim",
                design.name
            );
        }
    }
}

/// A trim of a page a running transaction holds is refused even when the page held nothing
/// before: it may not slip in under the transaction's write (before, only mapped pages were
/// checked, so such a trim was taken and then the transaction's commit overrode it, an order
/// the host could not tell from the acknowledgements). Found by the protocol fuzz.
#[test]
fn a_trim_of_a_page_a_running_transaction_holds_is_refused_even_if_it_was_never_written() {
    for design in designs() {
        let mut d = build(&design, &DesignOptions::default()).unwrap();
        let mut t = d.flash().idle_ns() + 1000;
        let tx = d.transactional().unwrap();
        tx.dwrite(TxUuid(1), Lpn(40), &tag(40, 1), DwriteFlag::Head, t)
            .unwrap();
        t += 1000;
        let refused = d.trim(Lpn(38), 4, t);
        assert!(
            matches!(
                refused,
                Err(FtlError::Conflict {
                    lpn: Lpn(40),
                    holder: TxUuid(1)
                })
            ),
            "{}: {refused:?}",
            design.name
        );
        t += 1000;
        let tx = d.transactional().unwrap();
        tx.dwrite(TxUuid(1), Lpn(41), &tag(41, 2), DwriteFlag::Rear, t)
            .unwrap();
        t = t.max(d.flash().idle_ns()) + 1000;
        assert_eq!(read(d.as_mut(), 40, t), PageOutcome::Data(tag(40, 1)));
        // Once it has committed, the same trim is taken.
        t += 1000;
        d.trim(Lpn(38), 4, t).unwrap();
        t = t.max(d.flash().idle_ns()) + 1000;
        assert_eq!(read(d.as_mut(), 40, t), PageOutcome::Unwritten);
    }
}
