//! Media faults beside power cuts (docs/reliability.md): on worn media left powered off after
//! each cut, every design reads a page the media lost as an error and the checker accepts it;
//! a controller that hands on uncorrected data is caught; a run the media ends is judged
//! shortened.

use crashtest::{media, testing, CampaignConfig, CampaignReport};

/// An MLC part at its rated wear lying 300 days off after each cut: enough for the ECC to lose
/// pages after every retry, not so much that every recovery stops at lost metadata.
fn worn(design: &str, seed: u64, hand_uncorrectable: bool) -> CampaignConfig {
    let spec = lab::registry::find(design).expect("design");
    let mut device = flash::DeviceConfig::preset("small")
        .unwrap()
        .with_media("mlc", 1.0, seed)
        .unwrap();
    let m = device.media.as_mut().unwrap();
    m.power_off_s = 300 * 86_400;
    m.hand_uncorrectable = hand_uncorrectable;
    let mut w = workload::WorkloadSpec::named(spec.default_workload).unwrap();
    w.requests = 1500;
    w.fill = 0.8;
    let mut cfg = testing::config(device, spec, w, seed, true);
    cfg.crash_points = 40;
    cfg
}

fn campaign(cfg: &CampaignConfig) -> CampaignReport {
    crashtest::second_life::run_campaign_with_lives(cfg, 0, &|_, _| {})
        .expect("campaign runs")
        .0
}

/// Every design keeps its promise on worn media: pages whose versions the media lost read as
/// errors (accepted), recoveries that meet lost metadata stop with MediaLoss, nothing else.
#[test]
fn every_design_keeps_its_promise_on_worn_media() {
    let mut errors = 0;
    for design in lab::registry::names() {
        let r = campaign(&worn(design, 7, false));
        let first = r
            .violations
            .first()
            .map(|v| format!("{}: {}", v.what, v.replay));
        assert_eq!(r.violations.len(), 0, "{design}: {first:?}");
        assert!(r.media.is_some(), "{design}");
        errors += r.errors_for_lost_pages + r.lost_to_media;
    }
    assert!(
        errors > 0,
        "the media lost nothing: the test proves nothing"
    );
}

/// The negative control: a controller that hands on the bits the ECC could not correct is
/// caught, on a design with redundancy (DFTL) as on one without (Möbius).
#[test]
fn a_controller_handing_on_uncorrected_data_is_caught() {
    for design in ["mobius", "dftl", "optr"] {
        let r = campaign(&worn(design, 7, true));
        assert!(!r.violations.is_empty(), "{design}: not caught");
        assert_eq!(r.errors_for_lost_pages, 0, "{design}");
    }
}

/// A run longer than the worn device's life is judged shortened: the asked-for run ended at
/// WornOut (or lost metadata), and the run judged is the same seed with fewer requests.
#[test]
fn a_run_the_media_ends_is_judged_shortened() {
    let mut cfg = worn("txflash-tc", 11, false);
    let m = cfg.device.media.as_mut().unwrap();
    m.initial_pe = 8 * m.endurance;
    m.power_off_s = 0;
    cfg.workload.requests = 3000;
    let (ran, _, eol) = media::record_within_life(&cfg).expect("a shorter run fits");
    let eol = eol.expect("the media ended the run of 3,000 requests");
    assert_eq!(eol.requests_asked, 3000);
    assert_eq!(eol.requests_run, ran.workload.requests);
    assert!(ran.workload.requests < 3000);
    assert!(eol.ended_by.contains("worn out") || eol.ended_by.contains("lost"));
    // Off, the model ends nothing: the run records as asked.
    cfg.device.media = None;
    let (ran, _, eol) = media::record_within_life(&cfg).unwrap();
    assert!(eol.is_none());
    assert_eq!(ran.workload.requests, 3000);
}

/// Marks every programmed page of `dev`'s flash lost to the media (the media model's fault
/// injection): whatever the design reads next fails ECC.
fn lose_every_page(dev: &mut dyn ftl::BlockDevice) {
    let g = dev.flash().geometry().clone();
    for b in 0..g.blocks() {
        let block = flash::BlockId(b);
        for p in 0..dev.flash().write_pointer(block) {
            dev.flash_mut().inject(flash::Fault::Read(g.ppn(block, p)));
        }
    }
}

/// A host over a fresh `design` on the small preset with the MLC part, unworn (media seed 1).
fn fresh_host_on_mlc(design: &str) -> host::Host {
    let spec = lab::registry::find(design).unwrap();
    let device = flash::DeviceConfig::preset("small")
        .unwrap()
        .with_media("mlc", 0.0, 1)
        .unwrap();
    let dev = lab::device::fresh(&spec, &device, &ftl::DesignOptions::default(), false)
        .expect("fresh device");
    host::Host::new(dev, 0)
}

/// A host read of a page the media lost is a typed error, never bytes: HostError::Uncorrectable
/// with errno EIO (what the NBD server answers, `host::HostError::errno`), on a design that
/// rebuilds its lost mapping (DFTL) as on the transactional ones. (A design that still holds the
/// page in its RAM write buffer, as OPTR does after a flush, answers from RAM: no flash read.)
#[test]
fn a_lost_page_reads_as_a_typed_error_with_eio() {
    for design in ["dftl", "mobius", "atomic-write", "txflash-bpcc"] {
        let mut h = fresh_host_on_mlc(design);
        let data = vec![0xA5u8; 4 * 4096];
        let t = h.write(0, &data, true, 0).expect("write");
        let t = h.flush(t).expect("flush");
        lose_every_page(h.device_mut());
        let mut buf = vec![0u8; 4096];
        let r = h.read(0, &mut buf, t + 1);
        let e = r.expect_err("a lost page never reads");
        assert!(
            matches!(e, host::HostError::Uncorrectable { .. })
                || matches!(e, host::HostError::Device(ftl::FtlError::MediaLoss { .. })),
            "{design}: {e}"
        );
        assert_eq!(e.errno(), 5, "{design}: EIO");
        assert!(buf.iter().all(|&b| b == 0), "{design}: no bytes handed on");
    }
}

/// Regression (soak 2's TxFlash find): a trimmed page whose tombstone the media lost reads as
/// unwritten, as the trim made it — the tombstone's kind is in its spare area, which still
/// reads — not as an error for a version the media never lost; a lost data page beside it
/// still reads as an error. On every TxFlash commit protocol.
#[test]
fn txflash_reads_a_trimmed_page_whose_tombstone_the_media_lost_as_unwritten() {
    for design in ["txflash-tc", "txflash-scc", "txflash-bpcc"] {
        let mut h = fresh_host_on_mlc(design);
        let t = h.write(0, &vec![0xA5u8; 2 * 4096], true, 0).expect("write");
        let t = h.trim(0, 4096, t).expect("trim");
        let t = h.flush(t).expect("flush");
        lose_every_page(h.device_mut());
        let mut buf = vec![0xFFu8; 4096];
        h.read(0, &mut buf, t + 1)
            .unwrap_or_else(|e| panic!("{design}: the trimmed page failed: {e}"));
        assert!(buf.iter().all(|&b| b == 0), "{design}: reads as zeros");
        let e = h
            .read(4096, &mut buf, t + 2)
            .expect_err("a lost page never reads");
        assert!(
            matches!(e, host::HostError::Uncorrectable { .. }),
            "{design}: {e}"
        );
    }
}

/// Regression (a soak's find): DFTL rebuilt a translation page lost to the media from data
/// pages' records even when the page had recorded trims — a trimmed LPN's newest version, erased
/// by GC, gave way to an older one still on flash (8 pages of this image held their fill data).
/// Such a page is now reported lost with what it maps.
#[test]
fn dftl_does_not_rebuild_a_lost_translation_page_that_recorded_trims() {
    let mut cfg = worn("dftl", 57113723175021, false);
    cfg.device.over_provisioning = 0.0;
    cfg.device.timing.erase_ns = 3_000_000;
    cfg.device.timing.program_ns = 900_000;
    cfg.device.timing.read_ns = 50_000;
    cfg.workload = workload::WorkloadSpec::named("randwrite-flush").unwrap();
    cfg.workload.requests = 3000;
    cfg.workload.fill = 0.8;
    cfg.workload.queue_depth = 16;
    cfg.workload.trim_fraction = 0.2;
    let v = crashtest::replay_one(
        &cfg,
        crashtest::prefix::CutModel::Instant,
        1_499_085_000,
        true,
    )
    .expect("replays");
    assert!(v.is_empty(), "{:?}", v.first().map(|v| &v.what));
}

/// SQLite on a device whose pages the media lost: opening the database or reading it fails
/// with a typed error (the store's `SqlError::Uncorrectable`, or SQLite's I/O error from the
/// VFS), never with rows.
#[test]
fn sqlite_on_lost_pages_fails_with_a_typed_error() {
    let spec = lab::registry::find("dftl").unwrap();
    let device = flash::DeviceConfig::preset("small")
        .unwrap()
        .with_media("mlc", 0.0, 1)
        .unwrap();
    let dev = lab::device::fresh(&spec, &device, &ftl::DesignOptions::default(), false).unwrap();
    let opts = sqlite::OpenOptions::new(sqlite::Mode::Journal);
    let db = sqlite::Database::create(dev, &opts).expect("create");
    db.conn()
        .execute_batch("CREATE TABLE t(x); INSERT INTO t VALUES (1), (2), (3);")
        .expect("insert");
    let mut dev = db.close().expect("close");
    lose_every_page(dev.as_mut());
    let e = match sqlite::Database::open(dev, &opts) {
        Err(e) => e,
        Ok(db) => {
            let rows = db
                .conn()
                .query_row("SELECT count(*) FROM t", [], |r| r.get::<_, i64>(0));
            let e = rows.expect_err("a database whose pages are lost yields no rows");
            sqlite::SqlError::Sqlite(e)
        }
    };
    let text = e.to_string();
    assert!(
        matches!(e, sqlite::SqlError::Uncorrectable(_))
            || text.contains("disk I/O error")
            || text.contains("I/O"),
        "{text}"
    );
}

/// What GC did with a live page lost whole ([`gc_over_a_page_lost_whole`]).
enum Moved {
    /// The run went on: the page was moved as a lost copy (the host's clock after the run).
    On(u64),
    /// The run stopped with this error.
    Stopped(host::HostError),
}

/// A fresh `design` on the MLC part: LPN 0 written and flushed, its data page then lost whole
/// (data and spare area: `Fault::ReadWhole`), then random single-page writes over 80 % of the
/// other LPNs (a flush every 64) until GC (or a merge) has moved it as a lost copy, and as long
/// again (so every design's move is durable: the engine's next root, the victim erased).
/// Returns the host and what became of the run.
fn gc_over_a_page_lost_whole(design: &str) -> (host::Host, Moved) {
    gc_over_a_lost_page(design, flash::Fault::ReadWhole)
}

/// [`gc_over_a_page_lost_whole`] with LPN 0's page lost by `fault`.
fn gc_over_a_lost_page(design: &str, fault: fn(flash::Ppn) -> flash::Fault) -> (host::Host, Moved) {
    let mut h = fresh_host_on_mlc(design);
    let t = h.write(0, &[0xA5u8; 4096], true, 0).expect("write");
    let mut t = h.flush(t).expect("flush");
    let span = (h.device().logical_pages() as u64 - 1) * 8 / 10;
    let flash = h.device_mut().flash_mut();
    let g = flash.geometry().clone();
    let holds_lpn_0 =
        |f: &flash::Flash, p| f.peek_page(p).is_ok_and(|b| b.iter().all(|&x| x == 0xA5));
    let pages: Vec<_> = (0..g.pages())
        .map(flash::Ppn)
        .filter(|&p| holds_lpn_0(flash, p))
        .collect();
    assert!(!pages.is_empty(), "{design}: LPN 0's page is on flash");
    for p in pages {
        flash.inject(fault(p));
    }
    let moved = |h: &host::Host| h.device().flash().stats().media.lost_pages_written > 0;
    let (mut after, mut x) = (None, 1u64);
    for i in 0..400_000u64 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let lpn = 1 + (x >> 33) % span;
        let mut step = h.write(lpn * 4096, &[(i % 251) as u8 + 1; 4096], false, t);
        if i % 64 == 63 {
            step = step.and_then(|t| h.flush(t));
        }
        t = match step {
            Ok(t) => t,
            Err(e) => return (h, Moved::Stopped(e)),
        };
        after = after.or(moved(&h).then_some(i));
        if after.is_some_and(|r| i >= 2 * r + 4096) && i % 64 == 63 {
            return (h, Moved::On(t));
        }
    }
    panic!("{design}: GC never moved LPN 0's page in 400,000 writes");
}

/// Reads LPN 0 at `t`: a lost page's read must be the typed media error, never bytes.
fn assert_lpn_0_reads_lost(h: &mut host::Host, t: u64, design: &str, when: &str) {
    let mut buf = vec![0u8; 4096];
    match h.read(0, &mut buf, t) {
        Err(host::HostError::Uncorrectable { .. }) => {}
        other => panic!("{design} {when}: LPN 0 read {other:?}, not the media error"),
    }
    assert!(
        buf.iter().all(|&b| b == 0),
        "{design} {when}: no bytes handed on"
    );
}

/// A live page lost whole — its data and its spare area fail — is moved by every design's GC
/// as a lost copy with the record the design rebuilds from its mapping (its spare area names
/// nothing): the run goes on, LPN 0 reads as the typed media error, and after a power cut
/// and recovery still does, never older data. A design whose record holds what it keeps
/// nowhere else (OPTR's write id, TxFlash's versions and links, FAST's sequence number), or
/// that cannot tell whose page it is (DFTL, whose owner is its spare area's), stops with
/// `MediaLoss`, never `Corrupt`. It used to be `Corrupt` for every design (Möbius's
/// lifetime run, docs/reliability.md).
#[test]
fn gc_moves_a_live_page_lost_whole_with_its_design_s_record() {
    for design in lab::registry::names() {
        let rebuilds = match design {
            "mobius" | "atomic-write" | "lighttx" | "wcache" => true,
            // DFTL reads a live page's owner from its spare area (issue #19), through the ECC
            // (#69): a data page lost whole names no owner, and DFTL keeps no reverse map.
            "dftl" | "optr" | "fast" | "txflash-tc" | "txflash-scc" | "txflash-bpcc" => false,
            other => panic!("{other}: say whether it rebuilds a lost page's record"),
        };
        let (mut h, moved) = gc_over_a_page_lost_whole(design);
        let t = match (moved, rebuilds) {
            (Moved::On(t), true) => t,
            (Moved::Stopped(host::HostError::Device(ftl::FtlError::MediaLoss { .. })), false) => {
                continue
            }
            (Moved::On(_), false) => panic!("{design}: moved a record it cannot rebuild"),
            (Moved::Stopped(e), _) => panic!("{design}: GC stopped: {e}"),
        };
        assert_lpn_0_reads_lost(&mut h, t + 1, design, "after the move");
        let spec = lab::registry::find(design).unwrap();
        let opts = ftl::DesignOptions::default();
        let (dev, _) = lab::device::cut_and_recover(&spec, h.into_device(), &opts)
            .unwrap_or_else(|e| panic!("{design}: recovery after the move: {e}"));
        let t = dev.flash().idle_ns() + 1;
        let mut h = host::Host::new(dev, t);
        assert_lpn_0_reads_lost(&mut h, t, design, "after a cut and recovery");
    }
}

/// The crash checker's end-of-life rule (`media::host_ended_by_media`) accepts a design's
/// `MediaLoss` where the media lost what the design read of the page — its data or, as here,
/// only its spare area: DFTL's GC reads a live data page's owner from its spare area alone
/// (`Flash::oob_record_decoded`), finds it lost (`Fault::ReadSpare`: the data codewords still
/// correct) and stops with `MediaLoss` naming the page, which the rule accepts. The failing
/// input: the same error naming a page the media lost nothing of is not accepted (the campaign
/// then reports the run's failure, not an end of life).
#[test]
fn a_media_loss_is_accepted_for_a_lost_spare_area_and_only_for_a_lost_page() {
    let (h, moved) = gc_over_a_lost_page("dftl", flash::Fault::ReadSpare);
    let Moved::Stopped(e) = moved else {
        panic!("DFTL moved a data page whose owner it could not read");
    };
    let host::HostError::Device(ftl::FtlError::MediaLoss { ppn, .. }) = &e else {
        panic!("DFTL stopped with {e}, not MediaLoss");
    };
    let flash = h.device().flash();
    assert!(crashtest::media::host_ended_by_media(&e, flash), "{e}");
    assert!(crashtest::media::host_end_of_life(&e, flash));
    let g = flash.geometry();
    let intact = (0..g.pages())
        .map(flash::Ppn)
        .find(|&p| flash.peek_state(p) == flash::PageState::Programmed && !flash.is_lost(p))
        .expect("a programmed page the media lost nothing of");
    assert_ne!(intact, *ppn);
    let nothing_lost = host::HostError::Device(ftl::FtlError::MediaLoss {
        ppn: intact,
        what: "a data page's OOB record".into(),
    });
    assert!(!crashtest::media::host_ended_by_media(&nothing_lost, flash));
    assert!(!crashtest::media::host_end_of_life(&nothing_lost, flash));
}
