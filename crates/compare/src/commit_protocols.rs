//! Experiment 4 — cyclic vs traditional commit (TxFlash §5.1, Figs. 6 and 8; Fig. 7 needs the
//! TxExt3 traces, which we do not have).
//!
//! On the `txflash` preset (32 GB, 8 packages of 4 dies: up to 4 operations per package, §5):
//! - throughput against transaction size: a sequential writer commits transactions of 4 KB to
//!   4 MB (1 to 1,024 of the preset's 4 KB pages; sizes are bytes, so other page sizes take
//!   other page counts), one at a time (its sync interval), for TC, SCC and BPCC;
//! - aborts: transactions of 250 KB on average (uniform 4–496 KB), 0 % to 50 % of them aborted
//!   by the host part-way through (sent page by page, then ABORT), the rest committed as
//!   WriteAtomic; mean transaction time and the simulated recovery time after a power cut at the
//!   end.

use crate::claims::{Check, Claim, Tolerance};
use crate::number::fmt;
use crate::result::{ExperimentResult, Figure, Table};
use crate::svg::{LineChart, Series};
use crate::Context;
use flash::{HostInterface, Lpn};
use ftl::{DesignOptions, DwriteFlag, SwriteMode};
use lab::driver::Driver;
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

const PROTOCOLS: [(&str, &str); 3] = [
    ("txflash-bpcc", "BPCC"),
    ("txflash-scc", "SCC"),
    ("txflash-tc", "TC"),
];
/// Transaction sizes of Fig. 6, in KB (the paper's axis: 4 KB to 4 MB): the pages they take
/// follow the device's page size ([`pages_of`]), so a point of the table of unknowns with 8 KB
/// pages writes the same bytes per transaction in half the pages. Until 2026-12-07 the sizes were
/// pages (1 … 1,024), which at 8 KB pages wrote twice the bytes and refused the 4 MB point.
const TX_KB: [u32; 6] = [4, 16, 64, 256, 1024, 4096];

/// The pages `kb` KB take with `page_bytes`-byte pages (at least one).
fn pages_of(kb: u32, page_bytes: u32) -> u32 {
    (kb * 1024).div_ceil(page_bytes).max(1)
}
/// Simulated controller time per record a recovery analyses (`recovery_ns_per_record`,
/// docs/txflash.md "Recovery time"). The paper gives no figure; its TC recovery (~2.4 s on the
/// 32 GB device) is about our summary-page reads alone (~2.6 s), so analysis is a small part of
/// it. 250 ns is a hash-table probe and a version compare on a controller of the time.
const ANALYSIS_NS_PER_RECORD: u64 = 250;
const ABORT_PCT: [u32; 6] = [0, 10, 20, 30, 40, 50];

/// The host interface of every run graded here: none, as in TxFlash's simulator (§5: it
/// models the flash packages, not a host link). [`LINKED`] runs show the preset's SATA 2.0
/// link beside it.
const PAPER_HOST: HostInterface = HostInterface::NONE;

/// A fresh `txflash` device of `design` behind the driver (the paper's host interface, or
/// `host`).
fn fresh(ctx: &Context, design: &str, host: Option<HostInterface>) -> crate::error::Result<Driver> {
    let spec = ctx.built(design)?;
    let mut config = ctx.device("txflash")?;
    config.host = host.unwrap_or(PAPER_HOST);
    let dev = ctx.fresh(spec, &config, &DesignOptions::default(), true)?;
    Ok(Driver::over(dev, 0).writes_from(1))
}

/// Committed transactions per simulated second for a sequential writer of `kb`-KB transactions.
fn throughput(
    ctx: &Context,
    design: &str,
    kb: u32,
    host: Option<HostInterface>,
) -> crate::error::Result<f64> {
    let mut driver = fresh(ctx, design, host)?;
    let page_bytes = driver.device().flash().geometry().page_bytes;
    let pages = pages_of(kb, page_bytes);
    let bytes_total: u64 = if ctx.scale == crate::Scale::Quick {
        64 << 20
    } else {
        1 << 30
    };
    let count = (bytes_total / (pages as u64 * page_bytes as u64)).clamp(8, 20_000);
    let range = driver.device().logical_pages();
    if driver.host_mut().capabilities().is_none() {
        return Err(crate::error::MeasureError::NotTransactional);
    }
    let mut cursor = 0u32;
    let mut t = 0u64;
    for _ in 0..count {
        if cursor + pages > range {
            cursor = 0;
        }
        let lpns: Vec<Lpn> = (cursor..cursor + pages).map(Lpn).collect();
        cursor += pages;
        t = if pages == 1 {
            // A one-page transaction is a plain write; its id is used up all the same.
            driver.fresh_uuid();
            driver.write(lpns[0], 1, t)?
        } else {
            driver.swrite(&lpns, SwriteMode::Sync, t)?.1.ack_ns
        };
    }
    Ok(count as f64 / (t as f64 / 1e9))
}

/// (mean transaction time ms, recovery ms, recovery reads) with `abort_pct` % aborted.
fn aborts(ctx: &Context, design: &str, abort_pct: u32) -> crate::error::Result<(f64, f64, u64)> {
    let mut driver = fresh(ctx, design, None)?;
    let mut rng = ChaCha8Rng::seed_from_u64(ctx.seed ^ abort_pct as u64);
    let n = if ctx.scale == crate::Scale::Quick {
        2_000
    } else {
        20_000
    };
    let range = driver.device().logical_pages().min(1 << 20);
    let page_bytes = driver.device().flash().geometry().page_bytes;
    if driver.host_mut().capabilities().is_none() {
        return Err(crate::error::MeasureError::NotTransactional);
    }
    let mut t = 0u64;
    let mut total_time = 0u64;
    let mut committed = 0u64;
    for _ in 0..n {
        // 4 KB to 496 KB (250 KB on average), in the device's pages
        let pages = pages_of(4 * rng.random_range(1..=124u32), page_bytes);
        let start = rng.random_range(0..range - pages);
        let lpns: Vec<Lpn> = (start..start + pages).map(Lpn).collect();
        if pages > 1 && rng.random_range(0..100) < abort_pct {
            // Sent page by page, then aborted before the last page.
            let uuid = driver.fresh_uuid();
            let mut at = t;
            for (i, &l) in lpns[..lpns.len() - 1].iter().enumerate() {
                let flag = if i == 0 {
                    DwriteFlag::Head
                } else {
                    DwriteFlag::Body
                };
                at = driver
                    .dwrite(uuid, l, flag, at)
                    .map_err(|e| crate::error::MeasureError::step("dwrite", e))?
                    .ack_ns;
            }
            t = driver
                .abort(uuid, at)
                .map_err(|e| crate::error::MeasureError::step("abort", e))?;
        } else {
            let ack = driver
                .swrite(&lpns, SwriteMode::Sync, t)
                .map_err(|e| crate::error::MeasureError::step("swrite", e))?
                .1
                .ack_ns;
            total_time += ack - t;
            committed += 1;
            t = ack;
        }
    }
    let dev = driver.into_device();
    let end = dev.flash().idle_ns();
    let spec = ctx.built(design)?;
    let mut flash = dev.into_flash();
    flash.start_clock_at(end);
    let options = DesignOptions::default().with("recovery_ns_per_record", ANALYSIS_NS_PER_RECORD);
    let options = ctx.unknowns.options(spec, flash.geometry(), options);
    let (_d, r) = spec
        .reopen(flash, &options)
        .map_err(|e| crate::error::MeasureError::step("recovery", e))?;
    Ok((
        total_time as f64 / committed.max(1) as f64 / 1e6,
        r.sim_ns as f64 / 1e6,
        r.flash_reads,
    ))
}

/// The protocols of [`PROTOCOLS`] this build has; the others are listed as skipped.
fn built_protocols(ctx: &Context, skipped: &mut Vec<String>) -> Vec<(&'static str, &'static str)> {
    let (built, missing): (Vec<_>, Vec<_>) = PROTOCOLS
        .iter()
        .copied()
        .partition(|(d, _)| ctx.design(d).is_some());
    for (d, l) in missing {
        skipped.push(format!("{l}: design '{d}' not built"));
    }
    built
}

pub fn run(ctx: &Context) -> ExperimentResult {
    let mut skipped = Vec::new();
    let mut data = serde_json::Map::new();
    let present = built_protocols(ctx, &mut skipped);
    let page_bytes = ctx
        .device("txflash")
        .map_or(4096, |c| c.geometry.page_bytes);
    let tx_pages: Vec<u32> = TX_KB.iter().map(|&kb| pages_of(kb, page_bytes)).collect();
    let total = (present.len() * (TX_KB.len() + ABORT_PCT.len())) as u64;
    let mut step = 0;
    let mut tput = vec![vec![f64::NAN; TX_KB.len()]; present.len()];
    let mut ab = vec![vec![(f64::NAN, f64::NAN, 0u64); ABORT_PCT.len()]; present.len()];
    for (i, (d, l)) in present.iter().enumerate() {
        for (j, &kb) in TX_KB.iter().enumerate() {
            match throughput(ctx, d, kb, None) {
                Ok(v) => tput[i][j] = v,
                Err(e) => skipped.push(format!("{l} throughput at {} pages: {e}", tx_pages[j])),
            }
            step += 1;
            (ctx.progress)("commit", step, total);
        }
        for (j, &a) in ABORT_PCT.iter().enumerate() {
            match aborts(ctx, d, a) {
                Ok(v) => ab[i][j] = v,
                Err(e) => skipped.push(format!("{l} at {a}% aborts: {e}")),
            }
            step += 1;
            (ctx.progress)("commit", step, total);
        }
        data.insert(l.to_string(), serde_json::json!({
            "tx_pages": tx_pages, "tx_per_s": tput[i],
            "abort_pct": ABORT_PCT, "tx_time_ms": ab[i].iter().map(|x| x.0).collect::<Vec<_>>(),
            "recovery_ms": ab[i].iter().map(|x| x.1).collect::<Vec<_>>(), "recovery_reads": ab[i].iter().map(|x| x.2).collect::<Vec<_>>(),
        }));
    }
    let tc = present.iter().position(|(d, _)| *d == "txflash-tc");
    let mut rows = Vec::new();
    for (i, (_, l)) in present.iter().enumerate() {
        rows.push(
            std::iter::once(l.to_string())
                .chain(tput[i].iter().enumerate().map(|(j, v)| match tc {
                    Some(t) if t != i => {
                        format!("{} ({:+.0} %)", fmt(*v), (v / tput[t][j] - 1.0) * 100.0)
                    }
                    _ => fmt(*v),
                }))
                .collect(),
        );
    }
    let mut abort_rows = Vec::new();
    for (i, (_, l)) in present.iter().enumerate() {
        abort_rows.push(
            std::iter::once(l.to_string())
                .chain(
                    ab[i]
                        .iter()
                        .map(|x| format!("{} ms / rec {} ms", fmt(x.0), fmt(x.1))),
                )
                .collect(),
        );
    }
    let linked = linked_gains(ctx, &tx_pages, &mut skipped);
    let row = |design: &str| present.iter().position(|(d, _)| *d == design);
    let pick =
        |i: Option<usize>| i.map(|i| (tput[i].clone(), ab[i].iter().map(|x| (x.0, x.1)).collect()));
    let claims = claims(&Measured {
        bpcc: pick(row("txflash-bpcc")),
        scc: pick(row("txflash-scc")),
        tc: pick(row("txflash-tc")),
    });
    let labels: Vec<String> = present.iter().map(|(_, l)| l.to_string()).collect();
    ExperimentResult {
        id: "commit",
        title: "4. Cyclic vs traditional commit (TxFlash Figs. 6 and 8)".into(),
        description: "txflash preset (32 GB, 8 packages of 4 dies: up to 4 operations per package) with no host link, as TxFlash's simulator (§5); the same throughput sweep behind the preset's SATA 2.0 link is shown beside it, not graded. Throughput: a sequential writer committing one transaction at a time. Aborts: 250 KB average transactions, aborted ones sent page by page and then aborted.".into(),
        tables: vec![
            Table { caption: "Committed transactions per second (simulated) against transaction size; in brackets the change against TC".into(), header: std::iter::once("protocol".to_string()).chain(TX_KB.iter().map(|kb| format!("{kb} KB"))).collect(), rows },
            linked,
            Table { caption: "Mean transaction time / recovery time after a power cut at the end, against the abort rate".into(), header: std::iter::once("protocol".to_string()).chain(ABORT_PCT.iter().map(|a| format!("{a} % aborts"))).collect(), rows: abort_rows },
        ],
        figures: vec![
            Figure { file: "txflash_fig6_throughput.svg".into(), caption: "TxFlash Fig. 6 — throughput vs transaction size".into(), svg: LineChart { title: "Transaction throughput".into(), x_label: "transaction size (KB, log)".into(), y_label: "tx/s (log)".into(), log_x: true, log_y: true, series: labels.iter().enumerate().map(|(i, l)| Series { name: l.clone(), points: TX_KB.iter().map(|&kb| kb as f64).zip(tput[i].iter().copied()).collect() }).collect() }.to_svg() },
            Figure { file: "txflash_fig8_abort_txtime.svg".into(), caption: "TxFlash Fig. 8 (transaction time) — transaction time vs abort rate".into(), svg: LineChart { title: "Transaction time".into(), x_label: "aborted transactions (%)".into(), y_label: "ms".into(), log_x: false, log_y: false, series: labels.iter().enumerate().map(|(i, l)| Series { name: l.clone(), points: ABORT_PCT.iter().map(|a| *a as f64).zip(ab[i].iter().map(|x| x.0)).collect() }).collect() }.to_svg() },
            Figure { file: "txflash_fig8_abort_recovery.svg".into(), caption: "TxFlash Fig. 8 (recovery) — recovery time vs abort rate".into(), svg: LineChart { title: "Recovery time".into(), x_label: "aborted transactions (%)".into(), y_label: "ms".into(), log_x: false, log_y: false, series: labels.iter().enumerate().map(|(i, l)| Series { name: l.clone(), points: ABORT_PCT.iter().map(|a| *a as f64).zip(ab[i].iter().map(|x| x.1)).collect() }).collect() }.to_svg() },
        ],
        claims,
        data: serde_json::Value::Object(data),
        skipped,
        host: Some(PAPER_HOST),
        ran: crate::Ran::default(),
    }
}

/// BPCC / TC throughput behind the `txflash` preset's own host interface (SATA 2.0): every
/// multi-page WriteAtomic crosses the link whole before its programs start, which adds the
/// same time to both protocols and moves the curve left.
/// `tx_pages` are the pages of each [`TX_KB`] size on this device (`run` derives them once).
fn linked_gains(ctx: &Context, tx_pages: &[u32], skipped: &mut Vec<String>) -> Table {
    let link = ctx.device("txflash").map(|c| c.host).unwrap_or(PAPER_HOST);
    let mut cells = vec!["BPCC / TC behind SATA 2.0".to_string()];
    for (&kb, p) in TX_KB.iter().zip(tx_pages) {
        let tc = throughput(ctx, "txflash-tc", kb, Some(link));
        let bpcc = throughput(ctx, "txflash-bpcc", kb, Some(link));
        match (bpcc, tc) {
            (Ok(b), Ok(t)) => cells.push(format!("{:.3}", b / t)),
            (Err(e), _) | (_, Err(e)) => {
                skipped.push(format!("SATA 2.0 throughput at {p} pages: {e}"));
                cells.push("—".into());
            }
        }
    }
    Table {
        caption: format!("Not graded: BPCC / TC throughput with the txflash preset's host link ({} MB/s, store-and-forward)", link.link_mb_s),
        header: std::iter::once("ratio".to_string()).chain(TX_KB.iter().map(|kb| format!("{kb} KB"))).collect(),
        rows: vec![cells],
    }
}

/// Per protocol: throughput by [`TX_KB`], and (transaction ms, recovery ms) by [`ABORT_PCT`].
type Curves = (Vec<f64>, Vec<(f64, f64)>);

struct Measured {
    bpcc: Option<Curves>,
    scc: Option<Curves>,
    tc: Option<Curves>,
}

/// TxFlash's Fig. 6 and 8 claims, graded.
///
/// Tolerances: Fig. 6 — BPCC / TC throughput 1.95 ± 15 % "when the transaction is of the order of
/// 100 KB" (our 64 KB point), 1.05 … 1.30 at "1000 KB" (our 1 MB point; the paper: about +15 %),
/// 0.95 … 1.10 at 4 MB ("performs as well"), 1 ± 5 % for one page ("similarly"); SCC and BPCC
/// within 1 % of each other at every size. Fig. 8 — SCC's transaction time at 50 % aborts at
/// least 1.2× its time without aborts, BPCC's within ± 10 %; BPCC's recovery within 1 % of TC's.
fn claims(m: &Measured) -> Vec<Claim> {
    let at = |kb: u32| TX_KB.iter().position(|&k| k == kb).expect("size");
    let nan = || {
        (
            vec![f64::NAN; TX_KB.len()],
            vec![(f64::NAN, f64::NAN); ABORT_PCT.len()],
        )
    };
    let (b, s, t) = (
        m.bpcc.clone().unwrap_or_else(nan),
        m.scc.clone().unwrap_or_else(nan),
        m.tc.clone().unwrap_or_else(nan),
    );
    let gain = |p: u32| b.0[at(p)] / t.0[at(p)];
    let fig6 = Claim::new("TxFlash §5.1, Fig. 6", "the improvement is about 95 % when the transaction is of the order of 100 KB, about 15 % at 1000 KB; for transactions larger than 4 MB cyclic commit performs as well as traditional commit; single-page transactions perform similarly")
        .check(Check::grade("BPCC / TC throughput at 64 KB", gain(64), Tolerance::Within { target: 1.95, rel: 0.15 }))
        .check(Check::grade("BPCC / TC throughput at 1 MB", gain(1024), Tolerance::Between { min: 1.05, max: 1.30 }))
        .check(Check::grade("BPCC / TC throughput at 4 MB", gain(4096), Tolerance::Between { min: 0.95, max: 1.10 }))
        .check(Check::grade("BPCC / TC throughput at 4 KB (1 page)", gain(4), Tolerance::Within { target: 1.0, rel: 0.05 }))
        .note("Our sequential writer waits for each commit; the gain is the commit record TC must write after its data. Graded as the paper's simulator runs: up to 4 operations per package (4 dies) and no host link. Behind the preset's SATA 2.0 link (the table beside, not graded) every multi-page WriteAtomic crosses the link whole before it is programmed, which adds the same time to both protocols: 64 KB 1.65, 1 MB 1.04 (docs/txflash.md).");
    let spread =
        s.0.iter()
            .zip(&b.0)
            .map(|(x, y)| (x / y - 1.0).abs())
            .fold(f64::NAN, f64::max);
    let same = Claim::new("TxFlash §5.1, Fig. 6", "the performance numbers are the same for both SCC and BPCC, as they differ only when there are aborted transactions")
        .check(Check::grade("largest |SCC / BPCC − 1| throughput over the sizes", spread, Tolerance::AtMost { max: 0.01 }));
    let last = ABORT_PCT.len() - 1;
    let fig8 = Claim::new("TxFlash §5.1, Fig. 8 (transaction time)", "SCC's transaction time rises with the abort rate (aborted pages must be erased before newer versions are written); BPCC stays flat")
        .check(Check::grade("SCC transaction time, 50 % / 0 % aborts", s.1[last].0 / s.1[0].0, Tolerance::AtLeast { min: 1.2 }))
        .check(Check::grade("BPCC transaction time, 50 % / 0 % aborts", b.1[last].0 / b.1[0].0, Tolerance::Within { target: 1.0, rel: 0.10 }))
        .note("SCC erases the blocks of an aborted transaction's intentions at the abort (relocating their live pages); the next transactions wait for those chips.");
    let rec = |c: &Curves| c.1.iter().map(|x| x.1).sum::<f64>() / ABORT_PCT.len() as f64;
    let (rs, rb, rt) = (rec(&s), rec(&b), rec(&t));
    let recovery = Claim::new("TxFlash §5.1, Fig. 8 (recovery)", "SCC has the fastest recovery (it reads only the top two versions of each page); BPCC's recovery is less than 1 % above TC's")
        .check(Check::grade("BPCC / TC recovery time (mean over abort rates)", rb / rt, Tolerance::Within { target: 1.0, rel: 0.01 }))
        .check(Check::grade("SCC / fastest of TC, BPCC recovery time (mean over abort rates)", rs / rt.min(rb), Tolerance::Below { bound: 1.0 }))
        .note(format!("Recovery time is the simulated flash time of the summary-page scan plus {ANALYSIS_NS_PER_RECORD} ns of controller time per record analysed (a documented model parameter; the paper gives none): SCC analyses the top two versions of each page, BPCC every version and its straddle responsibility sets, TC every record. Without that cost all three read the same summary pages and take the same time."));
    vec![fig6, same, fig8, recovery]
}

#[cfg(test)]
mod claim_tests {
    use super::*;
    use crate::claims::Verdict;

    /// Throughput by size [1, 4, 16, 64, 256, 1024 pages] and transaction ms by abort rate.
    fn curves(tput: [f64; 6], tx_ms: [f64; 6], rec_ms: f64) -> Option<Curves> {
        Some((tput.to_vec(), tx_ms.iter().map(|&t| (t, rec_ms)).collect()))
    }

    fn paper() -> Measured {
        Measured {
            bpcc: curves([100.0, 90.0, 78.0, 40.0, 12.0, 3.0], [5.0; 6], 100.5),
            scc: curves(
                [100.0, 90.0, 78.0, 40.0, 12.0, 3.0],
                [5.0, 5.5, 6.0, 6.5, 7.0, 8.0],
                90.0,
            ),
            tc: curves([99.0, 50.0, 40.0, 30.0, 10.0, 2.9], [5.0; 6], 100.0),
        }
    }

    #[test]
    fn paper_like_numbers_pass() {
        let v: Vec<Verdict> = claims(&paper()).iter().map(|c| c.verdict()).collect();
        assert_eq!(v, vec![Verdict::Pass; 4]);
    }

    #[test]
    fn numbers_that_contradict_the_paper_fail() {
        let mut m = paper();
        // The gain gone by 64 KB (our pre-interleaving curve).
        m.tc = curves([99.0, 50.0, 70.0, 35.0, 11.0, 2.9], [5.0; 6], 100.0);
        assert_eq!(claims(&m)[0].verdict(), Verdict::Fail);
        let mut m = paper();
        m.scc = curves(
            [100.0, 80.0, 78.0, 40.0, 12.0, 3.0],
            [5.0, 5.5, 6.0, 6.5, 7.0, 8.0],
            90.0,
        );
        assert_eq!(claims(&m)[1].verdict(), Verdict::Fail);
        let mut m = paper();
        m.scc = curves([100.0, 90.0, 78.0, 40.0, 12.0, 3.0], [5.0; 6], 90.0);
        assert_eq!(claims(&m)[2].verdict(), Verdict::Fail);
        let mut m = paper();
        m.bpcc = curves([100.0, 90.0, 78.0, 40.0, 12.0, 3.0], [5.0; 6], 110.0);
        assert_eq!(claims(&m)[3].verdict(), Verdict::Fail);
        // SCC no faster than TC: its recovery advantage is gone.
        let mut m = paper();
        m.scc = curves(
            [100.0, 90.0, 78.0, 40.0, 12.0, 3.0],
            [5.0, 5.5, 6.0, 6.5, 7.0, 8.0],
            100.0,
        );
        assert_eq!(claims(&m)[3].verdict(), Verdict::Fail);
    }
}
