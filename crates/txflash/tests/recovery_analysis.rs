//! Recovery's analysis time (TxFlash §5.1, Fig. 8; docs/txflash.md "Recovery time"): with
//! `recovery_ns_per_record` set, each protocol's recovery takes that much simulated CPU time per
//! record it analyses, on top of the same flash reads; SCC analyses only the top two versions
//! of each page, BPCC and TC every record.

use flash::{Content, ContentTag, DeviceConfig, Flash, Lpn};
use ftl::{BlockDevice, DesignOptions, RecoveryReport, SwriteMode, TxUuid};
use txflash::cyclic::format::Protocol;
use txflash::{TxFlashCyclic, TxFlashTc};

#[derive(Clone, Copy, Debug)]
enum Design {
    Tc,
    Cyclic(Protocol),
}

fn tag(lpn: u32, write: u64) -> Content {
    Content::Tag(ContentTag { lpn, write })
}

/// 600 two-page transactions over 400 pages (three versions of every page on flash), then a
/// power cut and recovery with `ns_per_record`.
fn recover(design: Design, ns_per_record: u64) -> RecoveryReport {
    let o = DesignOptions::default().with("recovery_ns_per_record", ns_per_record);
    let config = DeviceConfig::preset("small").unwrap();
    let oob = match design {
        Design::Tc => txflash::format::OOB_BYTES,
        Design::Cyclic(p) => p.oob_bytes(),
    };
    let flash = Flash::in_memory(config, oob, true);
    let mut dev: Box<dyn BlockDevice> = match design {
        Design::Tc => Box::new(TxFlashTc::format(flash, &o).unwrap()),
        Design::Cyclic(p) => Box::new(TxFlashCyclic::format(flash, p, &o).unwrap()),
    };
    let mut t = 0;
    for i in 0..600u32 {
        t += 1000;
        let l = i % 200;
        let pages = [
            (Lpn(l), tag(l, i as u64)),
            (Lpn(l + 200), tag(l + 200, i as u64)),
        ];
        let tx = dev.transactional().unwrap();
        tx.swrite(TxUuid(i as u64 + 1), &pages, SwriteMode::Sync, t)
            .unwrap();
    }
    let mut flash = dev.into_flash();
    let at = flash.idle_ns() + 1;
    flash.start_clock_at(at);
    match design {
        Design::Tc => TxFlashTc::recover(flash, &o).unwrap().1,
        Design::Cyclic(p) => TxFlashCyclic::recover(flash, p, &o).unwrap().1,
    }
}

fn detail(r: &RecoveryReport, key: &str) -> f64 {
    r.details
        .iter()
        .find(|(k, _)| k == key)
        .unwrap_or_else(|| panic!("no {key} in {r:?}"))
        .1
}

#[test]
fn analysis_time_is_charged_per_record_analysed() {
    let mut analysed = Vec::new();
    for design in [
        Design::Tc,
        Design::Cyclic(Protocol::Scc),
        Design::Cyclic(Protocol::Bpcc),
    ] {
        let free = recover(design, 0);
        let charged = recover(design, 1_000);
        let records = detail(&charged, "records_analysed");
        assert_eq!(detail(&free, "analysis_ms"), 0.0, "{design:?}");
        assert_eq!(charged.flash_reads, free.flash_reads, "{design:?}");
        assert_eq!(
            charged.sim_ns - free.sim_ns,
            records as u64 * 1_000,
            "{design:?}: {free:?} / {charged:?}"
        );
        analysed.push(records);
    }
    let [tc, scc, bpcc] = analysed[..] else {
        unreachable!()
    };
    // Every page has three versions on flash: SCC looks at two of them, BPCC at all three.
    assert_eq!(scc, 400.0 * 2.0);
    assert!(bpcc >= 400.0 * 3.0, "BPCC analysed {bpcc}");
    assert!(tc >= 400.0 * 3.0, "TC analysed {tc}");
}

#[test]
fn a_bad_analysis_cost_is_a_typed_error() {
    let o = DesignOptions::default().with("recovery_ns_per_record", "fast");
    let flash = Flash::in_memory(
        DeviceConfig::preset("small").unwrap(),
        txflash::format::OOB_BYTES,
        true,
    );
    assert!(matches!(
        TxFlashTc::format(flash, &o),
        Err(ftl::FtlError::InvalidOption(_))
    ));
}
