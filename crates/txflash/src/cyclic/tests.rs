//! Unit tests of the cyclic protocols on the device: every recovery case on real crash images
//! (built from the operation log, as the crash checker does), SCC's erasure of aborted
//! intentions, BPCC's straddlers and GC precedence, dynamic transactions, misuse.

use super::*;
use flash::{ContentTag, DeviceConfig, OpKind, PageState, Store};
use ftl::RecoveryReport;

const A: u32 = 10;
const B: u32 = 11;
const C: u32 = 12;

fn dev(protocol: Protocol) -> TxFlashCyclic {
    let flash = Flash::in_memory(
        DeviceConfig::preset("small").unwrap(),
        protocol.oob_bytes(),
        true,
    );
    TxFlashCyclic::format(flash, protocol, &DesignOptions::default()).unwrap()
}

fn tag(lpn: u32, write: u64) -> Content {
    Content::Tag(ContentTag { lpn, write })
}

fn read1(d: &mut TxFlashCyclic, lpn: u32) -> PageOutcome {
    let mut out = Vec::new();
    let at = d.arrivals.last().max(d.flash.idle_ns());
    d.read(Lpn(lpn), 1, at, &mut out).unwrap();
    out.pop().unwrap()
}

fn detail(r: &RecoveryReport, key: &str) -> f64 {
    r.details.iter().find(|(k, _)| k == key).unwrap().1
}

/// Recording of the operations issued from now on, for crash images.
struct Recording {
    base: Box<dyn Store>,
    config: DeviceConfig,
}

fn record(d: &mut TxFlashCyclic) -> Recording {
    Recording {
        config: d.flash.config().clone(),
        base: d.flash.start_recording(),
    }
}

/// Ends of the host-data programs recorded so far, in issue order.
fn program_ends(d: &TxFlashCyclic) -> Vec<u64> {
    d.flash
        .log()
        .unwrap()
        .ops
        .iter()
        .filter(|o| matches!(o.kind, OpKind::Program { .. }) && o.cause == OpCause::HostData)
        .map(|o| o.span.end_ns)
        .collect()
}

/// Power cut at `at_ns` (operations ended by then are on flash), then recovery.
fn crash(d: &mut TxFlashCyclic, rec: &Recording, at_ns: u64) -> (TxFlashCyclic, RecoveryReport) {
    let image = d
        .flash
        .log()
        .unwrap()
        .image_at(rec.base.as_ref(), at_ns, false);
    let mut flash = Flash::new(rec.config.clone(), image);
    flash.start_clock_at(at_ns);
    let (r, report) = TxFlashCyclic::recover(flash, d.protocol, &DesignOptions::default()).unwrap();
    r.check().unwrap();
    (r, report)
}

/// Power cut after everything issued so far.
fn crash_at_end(d: &mut TxFlashCyclic, rec: &Recording) -> (TxFlashCyclic, RecoveryReport) {
    let end = d.flash.idle_ns() + 1;
    crash(d, rec, end)
}

fn commit_ab(d: &mut TxFlashCyclic, w: u64, at: u64) -> u64 {
    d.swrite(
        TxUuid(1000 + w),
        &[(Lpn(A), tag(A, w)), (Lpn(B), tag(B, w))],
        SwriteMode::Sync,
        at,
    )
    .unwrap()
    .ack_ns
}

/// TxFlash Figure 3(a) on a real crash image: a dynamic transaction wrote A_1 → B_1, B_1 was
/// still held in RAM at the power cut. Case II (h_B = 0 < 1): A_1 is uncommitted. SCC erases it
/// during recovery.
#[test]
fn figure_3a_broken_link_of_an_interrupted_tx_is_uncommitted() {
    for protocol in [Protocol::Scc, Protocol::Bpcc] {
        let mut d = dev(protocol);
        let rec = record(&mut d);
        d.dwrite(TxUuid(1), Lpn(A), &tag(A, 1), DwriteFlag::Head, 0)
            .unwrap();
        let programs = d.flash.stats().total_programs();
        d.dwrite(TxUuid(1), Lpn(B), &tag(B, 1), DwriteFlag::Body, 10)
            .unwrap();
        assert_eq!(
            d.flash.stats().total_programs(),
            programs + 1,
            "A_1 written once B named it"
        );
        let a1 = Ppn(d.pending[0].as_ref().unwrap().pages[0].ppn.0);
        let (mut r, report) = crash_at_end(&mut d, &rec);
        assert_eq!(detail(&report, "case_ii"), 1.0, "{protocol:?}");
        assert_eq!(detail(&report, "uncommitted_tops"), 1.0);
        assert_eq!(read1(&mut r, A), PageOutcome::Unwritten);
        assert_eq!(read1(&mut r, B), PageOutcome::Unwritten);
        match protocol {
            Protocol::Scc => {
                assert_eq!(detail(&report, "scc_erased_blocks"), 1.0);
                assert_eq!(r.flash.peek_state(a1), PageState::Erased, "SCC erased A_1");
            }
            Protocol::Bpcc => {
                assert_eq!(
                    r.flash.peek_state(a1),
                    PageState::Programmed,
                    "BPCC leaves A_1"
                );
                assert_eq!(detail(&report, "srs_members"), 1.0);
            }
        }
        // Versions continue above S ∪ R: B_1 was referenced, so B's next version is 2.
        assert!(r.version[B as usize] >= 1 && r.version[A as usize] >= 1);
        r.write(Lpn(A), &[tag(A, 2)], r.arrivals.last()).unwrap();
        assert_eq!(read1(&mut r, A), PageOutcome::Data(tag(A, 2)));
    }
}

/// TxFlash Figure 3(b) on a real device: {A_1, B_1} committed, then {B_2, C_1} committed and
/// B_1's block collected. The broken link A_1 → B_1 is Case I (h_B = 2 > 1): committed.
#[test]
fn figure_3b_broken_link_after_gc_is_committed() {
    for protocol in [Protocol::Scc, Protocol::Bpcc] {
        let mut d = dev(protocol);
        let rec = record(&mut d);
        let t = commit_ab(&mut d, 1, 0);
        let b1 = Ppn(d.map[B as usize]);
        d.swrite(
            TxUuid(2),
            &[(Lpn(B), tag(B, 2)), (Lpn(C), tag(C, 2))],
            SwriteMode::Sync,
            t,
        )
        .unwrap();
        let blk = d.flash.geometry().block_of(b1);
        d.space.pool.mark_full(blk);
        d.collect(blk, d.flash.idle_ns(), OpCause::GcCopy).unwrap();
        assert_eq!(d.flash.peek_state(b1), PageState::Erased, "B_1 collected");
        d.check().unwrap();
        let (mut r, report) = crash_at_end(&mut d, &rec);
        assert!(detail(&report, "case_i") >= 1.0, "{report:?}");
        assert_eq!(detail(&report, "uncommitted_tops"), 0.0);
        assert_eq!(read1(&mut r, A), PageOutcome::Data(tag(A, 1)));
        assert_eq!(read1(&mut r, B), PageOutcome::Data(tag(B, 2)));
        assert_eq!(read1(&mut r, C), PageOutcome::Data(tag(C, 2)));
    }
}

/// A static transaction cut between its intentions: 5 pages over 4 chips, so the fifth ends a
/// program later than the others. At the cut four intentions are on flash; the one linking to
/// the missing fifth is Case II, the others follow it by Case III. Every page falls back to its
/// previous committed version (SCC: the second-highest; BPCC: the back pointer).
#[test]
fn static_tx_cut_between_intentions_falls_back() {
    for protocol in [Protocol::Scc, Protocol::Bpcc] {
        let mut d = dev(protocol);
        let pages: Vec<(Lpn, Content)> = (0..5).map(|i| (Lpn(20 + i), tag(20 + i, 1))).collect();
        let t = d
            .swrite(TxUuid(1), &pages, SwriteMode::Sync, 0)
            .unwrap()
            .ack_ns;
        let rec = record(&mut d);
        let pages2: Vec<(Lpn, Content)> = (0..5).map(|i| (Lpn(20 + i), tag(20 + i, 2))).collect();
        let ack = d
            .swrite(TxUuid(2), &pages2, SwriteMode::Sync, t)
            .unwrap()
            .ack_ns;
        let ends = program_ends(&d);
        assert_eq!(ends.len(), 5);
        let first = *ends.iter().min().unwrap();
        assert!(first < ack, "the intentions end at different instants");
        let (mut r, report) = crash(&mut d, &rec, first);
        let on_flash = ends.iter().filter(|&&e| e <= first).count();
        assert_eq!(
            detail(&report, "uncommitted_tops"),
            on_flash as f64,
            "{protocol:?}"
        );
        assert_eq!(detail(&report, "case_ii"), 1.0);
        for i in 0..5 {
            assert_eq!(read1(&mut r, 20 + i), PageOutcome::Data(tag(20 + i, 1)));
        }
        // After the ack every intention is on flash: a closed cycle, Case III.
        let (mut r, report) = crash(&mut d, &rec, ack);
        assert_eq!(detail(&report, "uncommitted_tops"), 0.0);
        assert!(detail(&report, "cycles") >= 1.0);
        for i in 0..5 {
            assert_eq!(read1(&mut r, 20 + i), PageOutcome::Data(tag(20 + i, 2)));
        }
    }
}

/// Aborts, then the same pages rewritten — the case that separates the protocols. An aborted
/// dynamic transaction left A_2 → B_2 (B_2 held); then B is written again (B_3).
/// SCC erases A_2 at the abort, and B_3 waits for that erase. BPCC leaves A_2; B_3's back
/// pointer (1) straddles B_2, so recovery's Case I finds the straddler and A_2 is uncommitted.
#[test]
fn abort_then_rewrite_scc_erases_bpcc_straddles() {
    for protocol in [Protocol::Scc, Protocol::Bpcc] {
        let mut d = dev(protocol);
        let rec = record(&mut d);
        let t = commit_ab(&mut d, 1, 0);
        d.dwrite(TxUuid(5), Lpn(A), &tag(A, 2), DwriteFlag::Head, t)
            .unwrap();
        d.dwrite(TxUuid(5), Lpn(B), &tag(B, 2), DwriteFlag::Body, t + 1)
            .unwrap();
        let a2 = d.pending[d.by_uuid[&TxUuid(5)] as usize]
            .as_ref()
            .unwrap()
            .pages[0]
            .ppn;
        d.abort(TxUuid(5), t + 2).unwrap();
        let barrier = d.busy_until[B as usize];
        let b3 = d.write(Lpn(B), &[tag(B, 3)], t + 3).unwrap();
        assert!(b3.ack_ns > barrier, "B_3 is programmed after the barrier");
        assert_eq!(
            d.committed[B as usize], 3,
            "B_2 was allocated, so B's next version is 3"
        );
        match protocol {
            Protocol::Scc => {
                assert_eq!(d.flash.peek_state(a2), PageState::Erased);
                assert!(d.abort_erases >= 1);
                let erase_ns = d.flash.timing().erase_ns;
                assert!(barrier >= t + 2 + erase_ns, "B waits for A_2's erase");
            }
            Protocol::Bpcc => {
                assert_eq!(d.flash.peek_state(a2), PageState::Programmed);
                assert_eq!(d.abort_erases, 0);
                assert_eq!(
                    d.srs.set_size(Version { lpn: B, version: 3 }),
                    1,
                    "SRS(B_3) = {{A_2}}"
                );
            }
        }
        d.check().unwrap();
        let (mut r, report) = crash_at_end(&mut d, &rec);
        assert_eq!(
            read1(&mut r, A),
            PageOutcome::Data(tag(A, 1)),
            "{protocol:?}"
        );
        assert_eq!(read1(&mut r, B), PageOutcome::Data(tag(B, 3)));
        if protocol == Protocol::Bpcc {
            assert!(detail(&report, "case_i") >= 1.0);
            assert_eq!(
                detail(&report, "uncommitted_tops"),
                1.0,
                "A_2 is left, uncommitted"
            );
            assert_eq!(detail(&report, "srs_members"), 1.0);
            assert!(
                r.srs.holds(Version { lpn: B, version: 3 }),
                "SRS rebuilt by recovery"
            );
        }
    }
}

/// BPCC GC precedence (TxFlash §3.3): B_3 straddles the aborted B_2 that A_2 links to. When B_4
/// supersedes B_3, B_3 stays live (pinned) — GC copies it — until A_2 is erased; then it is
/// garbage. Recovery rebuilds the pin. Ignoring the precedence (erasing B_3 first) makes
/// recovery take the aborted A_2 for committed.
#[test]
fn bpcc_gc_precedence_keeps_the_straddler_until_its_set_is_empty() {
    let setup = || {
        let mut d = dev(Protocol::Bpcc);
        let rec = record(&mut d);
        let t = commit_ab(&mut d, 1, 0);
        d.dwrite(TxUuid(5), Lpn(A), &tag(A, 2), DwriteFlag::Head, t)
            .unwrap();
        d.dwrite(TxUuid(5), Lpn(B), &tag(B, 2), DwriteFlag::Body, t + 1)
            .unwrap();
        let a2 = d.pending[d.by_uuid[&TxUuid(5)] as usize]
            .as_ref()
            .unwrap()
            .pages[0]
            .ppn;
        d.abort(TxUuid(5), t + 2).unwrap();
        d.write(Lpn(B), &[tag(B, 3)], t + 3).unwrap();
        let b3 = Ppn(d.map[B as usize]);
        d.write(Lpn(B), &[tag(B, 4)], t + 4).unwrap();
        (d, rec, a2, b3)
    };
    let b3_id = Version { lpn: B, version: 3 };
    let (mut d, rec, a2, b3) = setup();
    assert_eq!(
        d.pinned_versions(),
        1,
        "B_3 superseded but responsible for A_2"
    );
    assert!(
        d.space.validity.is_valid(b3),
        "a pinned page is live: GC copies it"
    );
    d.check().unwrap();
    // A crash now: recovery finds the straddler and re-pins B_3.
    let (mut r, report) = crash_at_end(&mut d, &rec);
    assert_eq!(read1(&mut r, A), PageOutcome::Data(tag(A, 1)));
    assert_eq!(detail(&report, "pinned_versions"), 1.0);
    // GC of B_3's block moves it (still pinned).
    let g = d.flash.geometry().clone();
    d.space.pool.mark_full(g.block_of(b3));
    d.collect(g.block_of(b3), d.flash.idle_ns(), OpCause::GcCopy)
        .unwrap();
    let moved = d.pinned[&b3_id].ppn;
    assert_ne!(moved, b3);
    assert_eq!(d.flash.peek_state(b3), PageState::Erased);
    // Erasing A_2 empties SRS(B_3): B_3 becomes garbage.
    if g.block_of(a2) != g.block_of(moved) {
        d.space.pool.mark_full(g.block_of(a2));
        d.collect(g.block_of(a2), d.flash.idle_ns(), OpCause::GcCopy)
            .unwrap();
    }
    assert_eq!(d.pinned_versions(), 0);
    assert!(!d.srs.holds(b3_id));
    assert!(!d.space.validity.is_valid(moved));
    d.check().unwrap();
    let (mut r, _) = crash_at_end(&mut d, &rec);
    assert_eq!(read1(&mut r, A), PageOutcome::Data(tag(A, 1)));
    assert_eq!(read1(&mut r, B), PageOutcome::Data(tag(B, 4)));

    // Negative control: drop the precedence and erase B_3 while A_2 is on flash.
    let (mut d, rec, a2, b3) = setup();
    d.release_holder(b3_id, 0);
    d.srs = Srs::default();
    let blk = g.block_of(b3);
    assert_ne!(
        blk,
        g.block_of(a2),
        "the test needs A_2 and B_3 in different blocks"
    );
    d.space.pool.mark_full(blk);
    d.collect(blk, d.flash.idle_ns(), OpCause::GcCopy).unwrap();
    let (mut r, _) = crash_at_end(&mut d, &rec);
    assert_eq!(
        read1(&mut r, A),
        PageOutcome::Data(tag(A, 2)),
        "without the straddler the aborted A_2 looks committed"
    );
}

/// Rule 1: once a higher version of A commits, A_2 leaves SRS(B_3).
#[test]
fn bpcc_rule_1_releases_the_straddler() {
    let mut d = dev(Protocol::Bpcc);
    let t = commit_ab(&mut d, 1, 0);
    d.dwrite(TxUuid(5), Lpn(A), &tag(A, 2), DwriteFlag::Head, t)
        .unwrap();
    d.dwrite(TxUuid(5), Lpn(B), &tag(B, 2), DwriteFlag::Body, t + 1)
        .unwrap();
    d.abort(TxUuid(5), t + 2).unwrap();
    d.write(Lpn(B), &[tag(B, 3)], t + 3).unwrap();
    d.write(Lpn(B), &[tag(B, 4)], t + 4).unwrap();
    assert_eq!(d.pinned_versions(), 1);
    d.write(Lpn(A), &[tag(A, 3)], t + 5).unwrap();
    assert_eq!(
        d.pinned_versions(),
        0,
        "A_3 committed: A_2 can never be A's top again"
    );
    assert_eq!(d.srs.dangling_count(), 0);
    d.check().unwrap();
}

/// Dynamic transactions hold each page until the next one arrives (§3.4); the REAR links back
/// to the HEAD, closing the cycle; the transaction is visible only after REAR.
#[test]
fn dynamic_tx_holds_each_page_until_the_next() {
    for protocol in [Protocol::Scc, Protocol::Bpcc] {
        let mut d = dev(protocol);
        let rec = record(&mut d);
        let p0 = d.flash.stats().total_programs();
        d.dwrite(TxUuid(1), Lpn(1), &tag(1, 1), DwriteFlag::Head, 0)
            .unwrap();
        assert_eq!(d.flash.stats().total_programs(), p0, "HEAD is held");
        d.dwrite(TxUuid(1), Lpn(2), &tag(2, 1), DwriteFlag::Body, 1)
            .unwrap();
        assert_eq!(d.flash.stats().total_programs(), p0 + 1);
        assert_eq!(
            read1(&mut d, 1),
            PageOutcome::Unwritten,
            "not visible before REAR"
        );
        let now = d.arrivals.last();
        let c = d
            .dwrite(TxUuid(1), Lpn(3), &tag(3, 1), DwriteFlag::Rear, now)
            .unwrap();
        assert_eq!(c.durable_ns, Some(c.ack_ns));
        assert_eq!(d.flash.stats().total_programs(), p0 + 3);
        let (mut r, report) = crash(&mut d, &rec, c.ack_ns);
        assert_eq!(detail(&report, "uncommitted_tops"), 0.0);
        for l in 1..=3 {
            assert_eq!(read1(&mut r, l), PageOutcome::Data(tag(l, 1)));
        }
        // A one-page dynamic transaction links to itself.
        d.dwrite(TxUuid(2), Lpn(4), &tag(4, 1), DwriteFlag::Single, c.ack_ns)
            .unwrap();
        assert_eq!(read1(&mut d, 4), PageOutcome::Data(tag(4, 1)));
        d.check().unwrap();
    }
}

/// Recovery reads one summary page per full block and scans only the open ones.
#[test]
fn recovery_reads_summaries_and_keeps_committed_transactions() {
    for protocol in [Protocol::Scc, Protocol::Bpcc] {
        let mut d = dev(protocol);
        let mut t = 0;
        for i in 0..600u32 {
            t += 1000;
            let l = i % 200;
            d.swrite(
                TxUuid(i as u64 + 1),
                &[
                    (Lpn(l), tag(l, i as u64)),
                    (Lpn(l + 200), tag(l + 200, i as u64)),
                ],
                SwriteMode::Sync,
                t,
            )
            .unwrap();
        }
        let mut flash = Box::new(d).into_flash();
        let at = flash.idle_ns() + 1;
        flash.start_clock_at(at);
        let full = (0..flash.geometry().blocks())
            .filter(|&b| flash.write_pointer(BlockId(b)) == flash.geometry().pages_per_block)
            .count();
        let (mut r, report) =
            TxFlashCyclic::recover(flash, protocol, &DesignOptions::default()).unwrap();
        r.check().unwrap();
        assert_eq!(detail(&report, "summary_pages_read") as usize, full);
        assert!(report.flash_reads < 3 * 128 + 4 * 32, "{report:?}");
        for l in 0..200u32 {
            let last = (400 + l) as u64;
            assert_eq!(read1(&mut r, l), PageOutcome::Data(tag(l, last)));
            assert_eq!(
                read1(&mut r, l + 200),
                PageOutcome::Data(tag(l + 200, last))
            );
        }
        assert!(r.version[0] >= 3);
    }
}

#[test]
fn trim_is_persistent() {
    for protocol in [Protocol::Scc, Protocol::Bpcc] {
        let mut d = dev(protocol);
        let rec = record(&mut d);
        d.write(Lpn(3), &[tag(3, 1), tag(4, 1)], 0).unwrap();
        d.trim(Lpn(3), 1, 10).unwrap();
        assert_eq!(read1(&mut d, 3), PageOutcome::Unwritten);
        let (mut r, _) = crash_at_end(&mut d, &rec);
        assert_eq!(read1(&mut r, 3), PageOutcome::Unwritten);
        assert_eq!(read1(&mut r, 4), PageOutcome::Data(tag(4, 1)));
    }
}

#[test]
fn misuse_is_typed() {
    for protocol in [Protocol::Scc, Protocol::Bpcc] {
        let mut d = dev(protocol);
        let n = d.logical_pages();
        let c = tag(0, 1);
        assert!(matches!(
            d.swrite(TxUuid(1), &[], SwriteMode::Sync, 0),
            Err(FtlError::EmptyRequest)
        ));
        assert!(matches!(
            d.swrite(TxUuid(1), &[(Lpn(n), c.clone())], SwriteMode::Sync, 0),
            Err(FtlError::LpnOutOfRange { .. })
        ));
        assert!(matches!(
            d.swrite(TxUuid(1), &[(Lpn(0), c.clone())], SwriteMode::Async, 0),
            Err(FtlError::Unsupported(_))
        ));
        assert!(matches!(
            d.swrite(
                TxUuid(1),
                &[(Lpn(0), c.clone()), (Lpn(0), c.clone())],
                SwriteMode::Sync,
                0
            ),
            Err(FtlError::DuplicatePage { .. })
        ));
        assert!(matches!(
            d.swrite(TxUuid(0), &[(Lpn(0), c.clone())], SwriteMode::Sync, 0),
            Err(FtlError::ReservedTx(_))
        ));
        assert!(matches!(d.abort(TxUuid(9), 0), Err(FtlError::UnknownTx(_))));
        assert!(matches!(d.abort(TxUuid(0), 0), Err(FtlError::NoDynamicTx)));
        d.dwrite(TxUuid(7), Lpn(3), &c, DwriteFlag::Head, 0)
            .unwrap();
        assert!(matches!(
            d.write(Lpn(3), std::slice::from_ref(&c), 1),
            Err(FtlError::Conflict {
                lpn: Lpn(3),
                holder: TxUuid(7)
            })
        ));
        assert!(matches!(
            d.dwrite(TxUuid(8), Lpn(4), &c, DwriteFlag::Body, 1),
            Err(FtlError::UnknownTx(_))
        ));
        // A refused page aborts its transaction.
        assert!(matches!(
            d.dwrite(TxUuid(7), Lpn(3), &c, DwriteFlag::Body, 2),
            Err(FtlError::DuplicatePage { .. })
        ));
        assert!(matches!(d.abort(TxUuid(7), 3), Err(FtlError::UnknownTx(_))));
        d.swrite(TxUuid(2), &[(Lpn(9), c.clone())], SwriteMode::Sync, 4)
            .unwrap();
        assert!(matches!(
            d.abort(TxUuid(2), 5),
            Err(FtlError::AlreadyCommitted(_))
        ));
        assert!(matches!(
            d.write(Lpn(1), std::slice::from_ref(&c), 0),
            Err(FtlError::TimeWentBackwards { .. })
        ));
        let mut small = TxFlashCyclic::format(
            Flash::in_memory(DeviceConfig::preset("small").unwrap(), 64, true),
            protocol,
            &DesignOptions::default().with("max_tx_bytes", 4 * 4096),
        )
        .unwrap();
        let big: Vec<(Lpn, Content)> = (0..5).map(|i| (Lpn(i), tag(i, 1))).collect();
        assert!(matches!(
            small.swrite(TxUuid(1), &big, SwriteMode::Sync, 0),
            Err(FtlError::TxTooLarge { pages: 5, max: 4 })
        ));
        for bad in [
            ("isolaton", "wait"),
            ("isolation", "maybe"),
            ("over_provisioning", "0.95"),
            ("commit_reserve", "0.1"),
        ] {
            let o = DesignOptions::default().with(bad.0, bad.1);
            let f = Flash::in_memory(DeviceConfig::preset("small").unwrap(), 64, true);
            assert!(
                matches!(
                    TxFlashCyclic::format(f, protocol, &o),
                    Err(FtlError::InvalidOption(_))
                ),
                "{bad:?}"
            );
        }
        let f = Flash::in_memory(DeviceConfig::preset("small").unwrap(), 24, true);
        assert!(
            matches!(
                TxFlashCyclic::format(f, protocol, &DesignOptions::default()),
                Err(FtlError::SpareAreaTooSmall { .. })
            ),
            "OOB too small for the record"
        );
        d.check().unwrap();
    }
}

/// Isolation: a transaction overlapping in time one that is committed but not yet on flash
/// waits for it (or is refused): otherwise B_2 could be on flash while its predecessor's
/// transaction is not, and the SCC invariant would call that predecessor committed.
#[test]
fn overlapping_transactions_wait_or_are_refused() {
    for protocol in [Protocol::Scc, Protocol::Bpcc] {
        let mut d = dev(protocol);
        let a = commit_ab(&mut d, 1, 0);
        let b = d.write(Lpn(B), &[tag(B, 2)], 1).unwrap();
        assert!(b.ack_ns > a, "{protocol:?}");
        let mut r = TxFlashCyclic::format(
            Flash::in_memory(DeviceConfig::preset("small").unwrap(), 64, true),
            protocol,
            &DesignOptions::default().with("isolation", "refuse"),
        )
        .unwrap();
        commit_ab(&mut r, 1, 0);
        assert!(matches!(
            r.write(Lpn(B), &[tag(B, 2)], 1),
            Err(FtlError::Conflict { lpn: Lpn(B), .. })
        ));
    }
}
