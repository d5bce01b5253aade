//! Möbius on worn media (docs/reliability.md, docs/mobius.md): a lost atom inode or translation
//! page is reported as the device's data lost, never as an older state.

use flash::{Content, ContentTag, DeviceConfig, Fault, Flash, Lpn, Ppn};
use ftl::{BlockDevice, DesignOptions, FtlError, SwriteMode, TxUuid};
use mftl::format::{PageKind, PageOob, OOB_BYTES};

fn media_device() -> DeviceConfig {
    DeviceConfig::small_with_bit_errors_only()
}

/// Every page of `kind` on the device, by its OOB record.
fn pages_of(flash: &Flash, kind: PageKind) -> Vec<Ppn> {
    let mut rec = [0u8; OOB_BYTES as usize];
    (0..flash.geometry().pages())
        .map(Ppn)
        .filter(|&p| {
            flash.peek_state(p) == flash::PageState::Programmed && {
                flash.oob_record(p, &mut rec);
                PageOob::decode(&rec).is_ok_and(|o| o.kind == kind)
            }
        })
        .collect()
}

#[test]
fn a_lost_atom_inode_is_reported_as_the_device_lost() {
    let flash = Flash::in_memory(media_device(), OOB_BYTES, true);
    let mut d = mftl::Mobius::format(flash, &DesignOptions::default()).unwrap();
    let mut t = 0;
    for i in 0..20u32 {
        let pages: Vec<(Lpn, Content)> = (0..4)
            .map(|k| {
                let lpn = i * 4 + k;
                (
                    Lpn(lpn),
                    Content::Tag(ContentTag {
                        lpn,
                        write: lpn as u64,
                    }),
                )
            })
            .collect();
        let tx = d.transactional().unwrap();
        t = tx
            .swrite(TxUuid(i as u64 + 1), &pages, SwriteMode::Sync, t)
            .unwrap()
            .ack_ns;
    }
    let mut flash = Box::new(d).into_flash();
    let inodes = pages_of(&flash, PageKind::Inode);
    assert!(!inodes.is_empty());
    let lost = inodes[inodes.len() / 2];
    flash.inject(Fault::Read(lost));
    flash.start_clock_at(t);
    match mftl::Mobius::recover(flash, &DesignOptions::default()) {
        Err(FtlError::MediaLoss { ppn, .. }) => assert_eq!(ppn, lost),
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("recovered past a lost inode"),
    }
}
