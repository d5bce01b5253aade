//! A zone record longer than a page is written in pieces, the last one short; a page reads
//! back whole, padded with zeros, so recovery must check each piece's CRC over what it reads.
//! Before, it checked it over the bytes as programmed: a tag-only device gave those back and
//! every soak passed, while on a file image (`mobius serve`) recovery refused the device
//! ("zone record piece 1 ... is unreadable"), found by the PostgreSQL trials on LightTx.

use flash::{Content, ContentTag, DeviceConfig, Flash, Lpn};
use ftl::{BlockDevice, DesignOptions, PageOutcome};
use lighttx::LightTx;

fn tag(lpn: u32, write: u64) -> Content {
    Content::Tag(ContentTag { lpn, write })
}

#[test]
fn a_zone_record_of_several_pieces_recovers() {
    // 512 MiB on four chips, as the PostgreSQL trials' device: the zone lists > 1,000 blocks.
    let mut config = DeviceConfig::preset("small").unwrap();
    config.geometry.channels = 1;
    config.geometry.chips_per_channel = 4;
    config.geometry.blocks_per_chip = 1024;
    let flash = Flash::in_memory(config, atomic_write::format::OOB_BYTES, true);
    let o = DesignOptions::default();
    let mut d = LightTx::format(flash, &o).unwrap();
    let n = d.logical_pages();
    let mut at = 0;
    for round in 0..2u64 {
        for l in (0..n).step_by(7) {
            at = d.write(Lpn(l), &[tag(l, round)], at).unwrap().ack_ns;
        }
    }
    at = d.flush(at).unwrap().ack_ns;
    let pieces = d
        .metrics()
        .into_iter()
        .find(|(k, _)| k == "zone_record_pages")
        .map(|(_, v)| v);
    assert!(
        pieces.is_some_and(|p| p >= 2.0),
        "the zone record must take several pages for this test ({pieces:?})"
    );
    let flash = Box::new(d).into_flash();
    let (mut r, _) = LightTx::recover(flash, &o).unwrap_or_else(|e| panic!("{e:.200}"));
    let mut out = Vec::new();
    for l in (0..n).step_by(7 * 97) {
        r.read(Lpn(l), 1, at, &mut out).unwrap();
        assert_eq!(out[0], PageOutcome::Data(tag(l, 1)), "lpn {l}");
    }
}
