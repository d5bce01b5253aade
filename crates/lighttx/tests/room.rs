//! The room LightTx leaves transactions in flight: each keeps its pages' previous versions live
//! until it commits, so the new pages of all running transactions are held to half the
//! over-provisioned pages (`tx_room_pages`). Before, four concurrent dynamic transactions of
//! 256 pages on a full, aged `small` device met "no space", which stops the device.

use flash::{Content, ContentTag, DeviceConfig, Flash, Lpn};
use ftl::{BlockDevice, DesignOptions, DwriteFlag, FtlError, PageOutcome, SwriteMode};
use ftl::{Transactional, TxUuid};
use lighttx::LightTx;
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

fn tag(lpn: u32, write: u64) -> Content {
    Content::Tag(ContentTag { lpn, write })
}

fn read(d: &mut LightTx, lpn: u32, at: u64) -> PageOutcome {
    let mut out = Vec::new();
    d.read(Lpn(lpn), 1, at, &mut out).unwrap();
    out.pop().unwrap()
}

/// A full `small` device, every page written once and as many again at random.
fn full_aged_device() -> (LightTx, u64) {
    let config = DeviceConfig::preset("small").unwrap();
    let flash = Flash::in_memory(config, atomic_write::format::OOB_BYTES, true);
    let mut d = LightTx::format(flash, &DesignOptions::default()).unwrap();
    let n = d.logical_pages();
    let mut at = 0;
    for l in 0..n {
        d.write(Lpn(l), &[tag(l, 1)], at).unwrap();
        at += 1;
    }
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    for _ in 0..n {
        let l = rng.random_range(0..n);
        d.write(Lpn(l), &[tag(l, 2)], at).unwrap();
        at += 1;
    }
    (d, at)
}

/// One dynamic transaction of 200 pages in flight: a second is refused at the page that would
/// go over the room, typed, and aborted; a static transaction one page over what is left is
/// refused and writes nothing, one that fits commits, and so does the first transaction. No
/// "no space" on the way.
#[test]
fn running_transactions_are_held_to_the_room_on_a_full_device() {
    let (mut d, mut at) = full_aged_device();
    let max = d.capabilities().max_tx_pages as u32;
    let mut dwrite = |d: &mut LightTx, uuid: u64, lpn: u32, flag| {
        at += 1;
        let r = d.dwrite(TxUuid(uuid), Lpn(lpn), &tag(lpn, uuid), flag, at);
        (r, at)
    };
    for lpn in 0..200 {
        let flag = if lpn == 0 {
            DwriteFlag::Head
        } else {
            DwriteFlag::Body
        };
        dwrite(&mut d, 10, lpn, flag).0.unwrap();
    }
    let mut refused = None;
    for lpn in 1000..1000 + max {
        let flag = if lpn == 1000 {
            DwriteFlag::Head
        } else {
            DwriteFlag::Body
        };
        if let Err(e) = dwrite(&mut d, 11, lpn, flag).0 {
            refused = Some((lpn - 1000, e));
            break;
        }
    }
    let Some((
        accepted,
        FtlError::TxRoomTaken {
            pages: 1,
            in_flight,
            room,
        },
    )) = refused
    else {
        panic!("the second transaction was not refused for room: {refused:?}");
    };
    assert_eq!(in_flight, room);
    assert_eq!(200 + accepted as u64, room);
    assert!(
        room >= max as u64,
        "room {room} below the longest transaction {max}"
    );
    // Refused, it was aborted.
    assert!(matches!(
        dwrite(&mut d, 11, 2000, DwriteFlag::Rear).0,
        Err(FtlError::UnknownTx(_))
    ));
    let left = (room - 200) as u32;
    let now = at + 1;
    let over: Vec<(Lpn, Content)> = (2200..2200 + left + 1)
        .map(|l| (Lpn(l), tag(l, 12)))
        .collect();
    let r = d.swrite(TxUuid(12), &over, SwriteMode::Sync, now);
    assert!(
        matches!(r, Err(FtlError::TxRoomTaken { in_flight: 200, .. })),
        "{r:?}"
    );
    let done = d
        .swrite(
            TxUuid(13),
            &over[..left as usize],
            SwriteMode::Sync,
            now + 1,
        )
        .unwrap();
    let end = d
        .dwrite(
            TxUuid(10),
            Lpn(200),
            &tag(200, 10),
            DwriteFlag::Rear,
            done.ack_ns,
        )
        .unwrap()
        .ack_ns;
    for lpn in 0..=200 {
        assert_eq!(read(&mut d, lpn, end), PageOutcome::Data(tag(lpn, 10)));
    }
    for lpn in 1000..1000 + accepted {
        assert_ne!(read(&mut d, lpn, end), PageOutcome::Data(tag(lpn, 11)));
    }
    for (l, c) in &over[..left as usize] {
        assert_eq!(read(&mut d, l.0, end), PageOutcome::Data(c.clone()));
    }
    assert_ne!(
        read(&mut d, over[left as usize].0 .0, end),
        PageOutcome::Data(over[left as usize].1.clone())
    );
    d.check_invariants().unwrap();
}

/// Four concurrent dynamic transactions of the longest length, page by page in turn, on a
/// full, aged device: each page is taken or refused for room, never "no space" (which they met
/// before), and the device goes on taking writes afterwards.
#[test]
fn concurrent_long_transactions_never_meet_no_space() {
    let (mut d, mut at) = full_aged_device();
    let max = d.capabilities().max_tx_pages as u32;
    let mut refused = 0;
    for i in 0..max {
        for t in 0..4u32 {
            let lpn = t * max + i;
            let flag = match i {
                0 => DwriteFlag::Head,
                i if i + 1 == max => DwriteFlag::Rear,
                _ => DwriteFlag::Body,
            };
            at += 1;
            match d.dwrite(TxUuid(100 + t as u64), Lpn(lpn), &tag(lpn, 3), flag, at) {
                Ok(_) => {}
                Err(FtlError::TxRoomTaken { .. } | FtlError::UnknownTx(_)) => refused += 1,
                Err(e) => panic!("page {i} of transaction {t}: {e}"),
            }
        }
    }
    assert!(refused > 0, "four transactions of {max} pages fit the room");
    for l in 0..d.logical_pages() {
        at += 1;
        d.write(Lpn(l), &[tag(l, 4)], at).unwrap();
    }
    d.check_invariants().unwrap();
}
