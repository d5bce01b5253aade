//! Experiment 2 — transactional SSDs, macro (Möbius §V-B, Figs. 9 and 10).
//!
//! Every design runs the same seeded stream of transactions from `clients` concurrent host
//! clients (closed loop). A client reads its transaction's read set, then commits its write set as
//! one atomic unit — SWRITE (sync or async) where the design has static transactions, a DWRITE
//! chain where it has only dynamic ones; DFTL, which has no transactions, writes the pages as one
//! batch of plain writes (no atomicity: the non-transactional reference). The host serialises
//! transactions that write a common page (a lock manager's job), and for designs that allow one
//! transaction at a time it waits for the running one. Measured: transactions per second
//! (normalised to Atomic-Write), host write bandwidth and write amplification, in simulated time,
//! after an unmeasured load phase that writes the whole database once.

use crate::claims::{Check, Claim, Tolerance};
use crate::macro_sweeps::{
    clients_sweep, device_8k, graded_clients_text, merge_sensitivity, note_clients,
    page_size_report, swrite_modes_claim, GRADED_CLIENTS,
};
use crate::number::fmt;
use crate::result::{ExperimentResult, Figure, Table};
use crate::svg::BarChart;
use crate::Context;
use ftl::SwriteMode;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use workload::tpcc::Tpcc;

/// A way of running the experiment: design plus commit mode.
pub type Mode = lab::driver::clients::CommitMode;

pub const MODES: [Mode; 6] = [
    Mode {
        label: "Möbius S-SWRITE",
        design: "mobius",
        swrite: Some(SwriteMode::Sync),
    },
    Mode {
        label: "Möbius A-SWRITE",
        design: "mobius",
        swrite: Some(SwriteMode::Async),
    },
    Mode {
        label: "Atomic-Write",
        design: "atomic-write",
        swrite: Some(SwriteMode::Sync),
    },
    Mode {
        label: "LightTx",
        design: "lighttx",
        swrite: Some(SwriteMode::Sync),
    },
    Mode {
        label: "TxFlash (BPCC)",
        design: "txflash-bpcc",
        swrite: Some(SwriteMode::Sync),
    },
    Mode {
        label: "DFTL",
        design: "dftl",
        swrite: None,
    },
];

/// A stream of transactions (one workload of the experiment).
pub type Workload = workload::TxWorkload;

/// What one mode measured on one workload.
pub use lab::driver::clients::Outcome;

/// The devices the macro experiment runs on: `jasmine` at paper scale; a 1 GiB slice of it
/// (same chips, fewer blocks) at quick scale, so the load phase fills it and GC runs; and Fig.
/// 10's 8 KB-page device with as many pages ([`device_8k`]). Both at this run's point of the
/// table of unknowns, applied after they are cut (a page size of the point keeps each one's
/// capacity).
pub fn devices(ctx: &Context) -> crate::error::Result<(flash::DeviceConfig, flash::DeviceConfig)> {
    let four_k = match ctx.scale {
        crate::Scale::Quick => lab::device::preset_slice("jasmine", 128)?,
        _ => flash::DeviceConfig::preset("jasmine")?,
    };
    let eight_k = device_8k(&four_k)?;
    Ok((ctx.unknowns.device(four_k), ctx.unknowns.device(eight_k)))
}

pub fn tpcc_workload(ctx: &Context, logical_pages: u32) -> Workload {
    let max_w = if ctx.scale == crate::Scale::Quick {
        24
    } else {
        1_000
    };
    let budget = (logical_pages as f64 * 0.7) as u32;
    let mut gen = Tpcc::fitting(budget, max_w).unwrap_or_else(|| Tpcc::new(1));
    let mut rng = ChaCha8Rng::seed_from_u64(ctx.seed);
    let n = if ctx.scale == crate::Scale::Quick {
        20_000
    } else {
        200_000
    };
    let txns = (0..n).map(|_| gen.next(&mut rng)).collect();
    Workload {
        name: "tpcc-like".into(),
        logical_pages_needed: gen.pages(),
        txns,
        preload: true,
    }
}

/// The committed trace of real software: ext4 mkfs and a small-file workload recorded through
/// `mobius serve --trace` (crates/cli/tests/fixtures/record-ext4-trace.sh regenerates it).
const EXT4_TRACE: &[u8] = include_bytes!("../../cli/tests/fixtures/ext4-small-files.trace.gz");

/// The workloads of the experiment on `config` (their pages are `config`'s: the TPC-C-like
/// generator's page-level transactions are the same on any device with the same number of
/// pages, a trace's bytes fall into `config`'s pages); a workload that cannot be built is named
/// in `skipped`. Returns them and how many times the trace is replayed.
pub fn build_workloads(
    ctx: &Context,
    config: &flash::DeviceConfig,
    skipped: &mut Vec<String>,
) -> (Vec<Workload>, usize) {
    // Logical pages: the smallest any design offers on this device is not known before building;
    // size the database on the raw capacity after over-provisioning.
    let logical = (config.geometry.pages() as f64 * (1.0 - config.over_provisioning) * 0.9) as u32;
    let mut workloads = vec![tpcc_workload(ctx, logical)];
    let repeat = if ctx.scale == crate::Scale::Quick {
        10
    } else {
        100
    };
    let page_bytes = config.geometry.page_bytes;
    let trace =
        lab::driver::clients::trace_transactions("ext4-trace", EXT4_TRACE, page_bytes, repeat);
    match trace.map_err(crate::error::MeasureError::from) {
        Ok(w) => workloads.push(w),
        Err(e) => skipped.push(e.to_string()),
    }
    (workloads, repeat)
}

/// Every mode on `wl` with `clients` clients on `config`, in [`MODES`] order (`None` where it
/// did not run, the reason in `skipped`); `progress(m)` after each mode.
fn run_modes(
    ctx: &Context,
    wl: &Workload,
    config: &flash::DeviceConfig,
    clients: usize,
    skipped: &mut Vec<String>,
    progress: &dyn Fn(usize),
) -> Vec<Option<Outcome>> {
    MODES
        .iter()
        .enumerate()
        .map(|(m, mode)| {
            let r = run_or_skip(ctx, mode, wl, config, clients, skipped);
            progress(m + 1);
            r
        })
        .collect()
}

pub fn run(ctx: &Context) -> ExperimentResult {
    let clients = ctx.unknowns.clients(GRADED_CLIENTS);
    let mut skipped = Vec::new();
    let (config, config_8k) = match devices(ctx) {
        Ok(c) => c,
        Err(e) => {
            return ExperimentResult::failed("macro", "2. Transactional SSDs, macro", e.to_string())
        }
    };
    let (workloads, repeat) = build_workloads(ctx, &config, &mut skipped);
    let (workloads_8k, _) = build_workloads(ctx, &config_8k, &mut skipped);
    let mut data = serde_json::Map::new();
    let mut tables = Vec::new();
    let mut figures = Vec::new();
    let mut claims = Vec::new();
    let steps = (workloads.len() * MODES.len() * 2) as u64;
    // Fig. 9's sub-claims on these workloads, shown and not graded (graded on engine traces).
    let mut sensitivity = Vec::new();
    for (w, wl) in workloads.iter().enumerate() {
        let done = (w * MODES.len() * 2) as u64;
        let progress = |m: usize| (ctx.progress)("macro", done + m as u64, steps);
        let results = run_modes(ctx, wl, &config, clients, &mut skipped, &progress);
        let progress_8k = |m: usize| progress(MODES.len() + m);
        let results_8k = match workloads_8k.iter().find(|w8| w8.name == wl.name) {
            Some(w8) => run_modes(ctx, w8, &config_8k, clients, &mut skipped, &progress_8k),
            None => vec![None; MODES.len()],
        };
        tables.push(workload_table(wl, &results, clients, &mut data));
        figures.extend(workload_figures(wl, &results));
        let (table_8k, figure_8k) = page_size_report(wl, &results, &results_8k, &mut data);
        let get = |label: &str| outcome_of(&results, label);
        let get_8k = |label: &str| outcome_of(&results_8k, label);
        let mut wl_claims = workload_claims(&wl.name, &get, &get_8k, &refused_note(&results));
        wl_claims.push(swrite_modes_claim(&wl.name, &get));
        let tps: Vec<Option<f64>> = results.iter().map(|r| r.as_ref().map(|o| o.tps)).collect();
        let (table, figure, sweep) = clients_sweep(ctx, wl, &config, (clients, &tps), &mut skipped);
        note_clients(&mut wl_claims, &wl.name, &sweep);
        let (merge_table, merge_data) = merge_sensitivity(ctx, wl, &config, &results, &mut skipped);
        // Fig. 9 is graded on real engines' traces (`macro_engines`, experiment 2b); here its
        // sub-claims and A-SWRITE against S-SWRITE are a sensitivity check, shown and not graded.
        // Fig. 10 stays graded here.
        let swrite_modes = wl_claims.pop();
        sensitivity.push(wl_claims.remove(0));
        sensitivity.extend(swrite_modes);
        claims.extend(wl_claims);
        tables.push(table);
        tables.push(merge_table);
        tables.push(table_8k);
        data.insert(format!("{}/merge_small_off", wl.name), merge_data);
        figures.push(figure);
        figures.push(figure_8k);
        data.insert(format!("{}/clients_sweep", wl.name), sweep);
    }
    tables.push(sensitivity_table(&sensitivity));
    ExperimentResult {
        id: "macro",
        title: "2. Transactional SSDs, macro (Möbius Figs. 9 and 10)".into(),
        description: format!("Each design runs the same seeded transactions from {} (the graded point; TPS against 1 to 32 clients below each workload's table; see `crates/lab/src/driver/clients.rs` for the host model and `crates/workload/src/tpcc.rs` for the TPC-C-like mix). Workload `ext4-trace`: the committed trace of ext4 (mkfs + small files, recorded through `mobius serve --trace`), the writes between two flushes forming one transaction, replayed {repeat} times. Fig. 9 is graded in experiment 2b on real engines' traces; its ratios on these two workloads, and A-SWRITE against S-SWRITE, are a sensitivity check (the last table), Fig. 10 is graded here. Device: jasmine geometry{}; Fig. 10 is graded on `jasmine-8k` (8 KB + 448 B pages, the paper's NAND flash 2) with as many pages.", graded_clients_text(), if ctx.scale == crate::Scale::Quick { " with 128 blocks per chip (1 GiB) at quick scale" } else { " (64 GB)" }),
        tables,
        figures,
        claims,
        data: serde_json::Value::Object(data),
        skipped,
        host: Some(config.host),
        ran: crate::Ran::default(),
    }
}

/// The outcome of the mode labelled `label` among `results` (in [`MODES`] order).
fn outcome_of<'a>(results: &'a [Option<Outcome>], label: &str) -> Option<&'a Outcome> {
    MODES
        .iter()
        .position(|m| m.label == label)
        .and_then(|i| results[i].as_ref())
}

/// `mode` on `wl`, or `None` with the reason in `skipped` (design not built, run failed).
fn run_or_skip(
    ctx: &Context,
    mode: &Mode,
    wl: &Workload,
    config: &flash::DeviceConfig,
    clients: usize,
    skipped: &mut Vec<String>,
) -> Option<Outcome> {
    if ctx.design(mode.design).is_none() {
        skipped.push(format!(
            "{}: design '{}' not built",
            mode.label, mode.design
        ));
        return None;
    }
    match ctx.run_clients(mode, wl, config, clients) {
        Ok(o) => Some(o),
        Err(e) => {
            skipped.push(format!("{} on {}: {e}", mode.label, wl.name));
            None
        }
    }
}

/// Atomic-Write's TPS among `results` (the normaliser of Fig. 9).
fn atomic_write_tps(results: &[Option<Outcome>]) -> Option<f64> {
    MODES
        .iter()
        .position(|m| m.design == "atomic-write")
        .and_then(|i| results[i].as_ref())
        .map(|o| o.tps)
}

/// One workload's table (every mode that ran), its outcomes also into `data`.
fn workload_table(
    wl: &Workload,
    results: &[Option<Outcome>],
    clients: usize,
    data: &mut serde_json::Map<String, serde_json::Value>,
) -> Table {
    let aw = atomic_write_tps(results);
    let mut rows = Vec::new();
    for (m, r) in MODES.iter().zip(results) {
        let Some(o) = r else { continue };
        let norm = aw.map_or(f64::NAN, |a| o.tps / a);
        rows.push(
            [m.label.to_string(), fmt(o.tps), fmt(norm)]
                .into_iter()
                .chain(outcome_cells(o))
                .collect(),
        );
        data.insert(
            format!("{}/{}", wl.name, m.label),
            serde_json::to_value(o).unwrap_or_default(),
        );
    }
    Table {
        caption: format!(
            "{}: {} transactions, {clients} clients, simulated time",
            wl.name,
            wl.txns.len()
        ),
        header: ["mode", "TPS", "TPS / Atomic-Write"]
            .into_iter()
            .chain(OUTCOME_COLUMNS)
            .map(String::from)
            .collect(),
        rows,
    }
}

/// The columns a macro table ends with ([`outcome_cells`]).
pub(crate) const OUTCOME_COLUMNS: [&str; 4] = [
    "bandwidth MB/s",
    "write amplification",
    "host-journal fallbacks",
    "refused",
];

/// One run's cells under [`OUTCOME_COLUMNS`].
pub(crate) fn outcome_cells(o: &Outcome) -> [String; 4] {
    [
        fmt(o.bandwidth_mb_s),
        fmt(o.write_amplification),
        o.journal_fallbacks.to_string(),
        o.errors.to_string(),
    ]
}

/// Fig. 9 (TPS over Atomic-Write's) and Fig. 10 (write amplification) for one workload.
fn workload_figures(wl: &Workload, results: &[Option<Outcome>]) -> [Figure; 2] {
    let aw = atomic_write_tps(results);
    let present: Vec<(usize, &Outcome)> = results
        .iter()
        .enumerate()
        .filter_map(|(i, r)| r.as_ref().map(|o| (i, o)))
        .collect();
    let series: Vec<String> = present
        .iter()
        .map(|(i, _)| MODES[*i].label.to_string())
        .collect();
    let chart = |title: String, y_label: &str, value: &dyn Fn(&Outcome) -> f64| BarChart {
        title,
        y_label: y_label.into(),
        categories: vec![wl.name.clone()],
        series: series.clone(),
        values: present.iter().map(|(_, o)| vec![value(o)]).collect(),
    };
    [
        Figure {
            file: format!("fig9_tps_{}.svg", wl.name),
            caption: format!(
                "Möbius Fig. 9 — TPS normalised to Atomic-Write, {}",
                wl.name
            ),
            svg: chart(
                format!("TPS / Atomic-Write ({})", wl.name),
                "normalised TPS",
                &|o| aw.map_or(f64::NAN, |a| o.tps / a),
            )
            .to_svg(),
        },
        Figure {
            file: format!("fig10_wa_{}.svg", wl.name),
            caption: format!("Möbius Fig. 10 — write amplification, {}", wl.name),
            svg: chart(
                format!("Write amplification ({})", wl.name),
                "flash programs / host pages",
                &|o| o.write_amplification,
            )
            .to_svg(),
        },
    ]
}

/// Fig. 9's sub-claims on the synthetic workloads, shown beside the graded ones of experiment 2b
/// (`macro_engines`, real engines' traces) as a sensitivity check: how the paper's tolerance
/// would judge them, not graded.
fn sensitivity_table(claims: &[Claim]) -> Table {
    let rows = claims
        .iter()
        .flat_map(|c| {
            c.checks.iter().enumerate().map(move |(i, k)| {
                vec![
                    c.source.clone(),
                    k.claim.clone(),
                    k.measured.map_or("–".into(), fmt),
                    k.tolerance.map_or("–".into(), |t| t.to_string()),
                    if k.verdict == crate::claims::Verdict::Pass {
                        "yes"
                    } else {
                        "no"
                    }
                    .into(),
                    if i == 0 {
                        c.note.clone()
                    } else {
                        String::new()
                    },
                ]
            })
        })
        .collect();
    Table {
        caption: "Fig. 9 on the synthetic workloads: a sensitivity check, not graded (graded on real engines' traces in experiment 2b)".into(),
        header: ["source", "sub-claim", "measured", "the paper's tolerance", "inside it", "note"]
            .map(String::from)
            .to_vec(),
        rows,
    }
}

/// The transactions each design refused (committed through the host journal, or not run),
/// for the claims' notes.
fn refused_note(results: &[Option<Outcome>]) -> String {
    let refused: Vec<String> = MODES
        .iter()
        .zip(results)
        .filter_map(|(m, r)| {
            r.as_ref()
                .filter(|o| o.errors + o.journal_fallbacks > 0)
                .map(|o| {
                    format!(
                        "{} {} through the host journal, {} not run",
                        m.label, o.journal_fallbacks, o.errors
                    )
                })
        })
        .collect();
    if refused.is_empty() {
        "none".to_string()
    } else {
        refused.join(", ")
    }
}

/// The paper's Fig. 9 and 10 claims graded on one workload's outcomes (`get(label)`).
///
/// Tolerances: the paper reports A-SWRITE "at most 67 %" above Atomic-Write on DBT-2 and S-SWRITE
/// "similar" to it; we grade A-SWRITE / Atomic-Write TPS in 1.3 … 1.92 (the paper's +67 % with
/// 15 % either side, and at least +30 %) and S-SWRITE / Atomic-Write within ± 15 % on the
/// TPC-C-like mix; on the file-system trace (the paper's Filebench) Atomic-Write must beat
/// S-SWRITE ("because transactions are small"). Fig. 10: Möbius's write amplification no higher
/// than Atomic-Write's and below LightTx's.
pub(crate) fn workload_claims<'a>(
    workload: &str,
    get: &dyn Fn(&str) -> Option<&'a Outcome>,
    get_8k: &dyn Fn(&str) -> Option<&'a Outcome>,
    refused: &str,
) -> Vec<Claim> {
    let ratio_of = |get: &dyn Fn(&str) -> Option<&'a Outcome>,
                    a: &str,
                    b: &str,
                    f: fn(&Outcome) -> f64| match (get(a), get(b)) {
        (Some(x), Some(y)) => f(x) / f(y),
        _ => f64::NAN,
    };
    let ratio = |a: &str, b: &str, f: fn(&Outcome) -> f64| ratio_of(get, a, b, f);
    let ratio_8k = |a: &str, b: &str, f: fn(&Outcome) -> f64| ratio_of(get_8k, a, b, f);
    let tps = |o: &Outcome| o.tps;
    let wa = |o: &Outcome| o.write_amplification;
    let a_aw = ratio("Möbius A-SWRITE", "Atomic-Write", tps);
    let s_aw = ratio("Möbius S-SWRITE", "Atomic-Write", tps);
    let mut tps_claim = if workload == "ext4-trace" {
        Claim::new(
            "Möbius §V-B, Fig. 9 (Filebench)",
            "in filebench tests, Atomic-Write outperforms S-SWRITE because transactions are small",
        )
        .check(Check::grade(
            format!("S-SWRITE / Atomic-Write TPS ({workload})"),
            s_aw,
            Tolerance::Below { bound: 1.0 },
        ))
        .check(Check::grade(
            format!("A-SWRITE / Atomic-Write TPS ({workload})"),
            a_aw,
            Tolerance::AtLeast { min: 1.0 },
        ))
    } else {
        Claim::new("Möbius §V-B, Fig. 9 (DBT-2)", "Möbius can at most 67 % outperform Atomic-Write using A-SWRITE; S-SWRITE provides similar throughput to Atomic-Write")
            .check(Check::grade(format!("A-SWRITE / Atomic-Write TPS ({workload})"), a_aw, Tolerance::Between { min: 1.3, max: 1.67 * 1.15 }))
            .check(Check::grade(format!("S-SWRITE / Atomic-Write TPS ({workload})"), s_aw, Tolerance::Within { target: 1.0, rel: 0.15 }))
    };
    tps_claim = tps_claim.note(if workload == "ext4-trace" {
        format!("The ext4 trace (mkfs + small files; each journal commit's writes = one transaction) stands in for Filebench on the paper's revised ext3. Transactions a design refused: {refused}.")
    } else {
        format!("Our stand-in for DBT-2 is the documented TPC-C-like page-level generator, not MySQL. Transactions a design refused: {refused}.")
    });
    let wa_claim = Claim::new("Möbius §V-B, Fig. 10", "Möbius does not enlarge write amplification compared with the other methods, and is better than LightTx")
        .check(Check::grade(format!("Möbius S-SWRITE / Atomic-Write WA, 8 KB pages ({workload})"), ratio_8k("Möbius S-SWRITE", "Atomic-Write", wa), Tolerance::AtMost { max: 1.0 }))
        .check(Check::grade(format!("Möbius S-SWRITE / LightTx WA, 8 KB pages ({workload})"), ratio_8k("Möbius S-SWRITE", "LightTx", wa), Tolerance::Below { bound: 1.0 }))
        .note(format!("Graded on the paper's 8 KB-page flash (§IV-A: \"only use 8KB page size flash to compare Write Amplification ratio\"; the jasmine-8k preset, the same transactions on as many pages). On the 4 KB jasmine preset, shown beside and not graded: Möbius S-SWRITE / Atomic-Write WA {}, Möbius S-SWRITE / LightTx WA {}.", fmt(ratio("Möbius S-SWRITE", "Atomic-Write", wa)), fmt(ratio("Möbius S-SWRITE", "LightTx", wa))));
    vec![tps_claim, wa_claim]
}

#[cfg(test)]
mod claim_tests {
    use super::*;
    use crate::claims::Verdict;

    fn outcome(tps: f64, wa: f64) -> Outcome {
        Outcome {
            tps,
            write_amplification: wa,
            ..Outcome::default()
        }
    }

    fn graded(workload: &str, rows: &[(&str, f64, f64)]) -> Vec<Verdict> {
        let outs: Vec<(String, Outcome)> = rows
            .iter()
            .map(|(l, t, w)| (l.to_string(), outcome(*t, *w)))
            .collect();
        let get = |label: &str| outs.iter().find(|(l, _)| l == label).map(|(_, o)| o);
        workload_claims(workload, &get, &get, "none")
            .iter()
            .map(|c| c.verdict())
            .collect()
    }

    const PAPER: [(&str, f64, f64); 4] = [
        ("Möbius A-SWRITE", 160.0, 2.0),
        ("Möbius S-SWRITE", 105.0, 2.0),
        ("Atomic-Write", 100.0, 2.2),
        ("LightTx", 90.0, 2.5),
    ];

    #[test]
    fn paper_like_numbers_pass() {
        assert_eq!(graded("tpcc", &PAPER), vec![Verdict::Pass, Verdict::Pass]);
    }

    #[test]
    fn numbers_that_contradict_the_paper_fail() {
        let mut too_good = PAPER;
        too_good[0].1 = 260.0; // +160 % is not "at most +67 %"
        assert_eq!(graded("tpcc", &too_good)[0], Verdict::Fail);
        let mut slow_sync = PAPER;
        slow_sync[1].1 = 60.0;
        assert_eq!(graded("tpcc", &slow_sync)[0], Verdict::Fail);
        let mut wa = PAPER;
        wa[1].2 = 3.0; // Möbius above LightTx
        assert_eq!(graded("tpcc", &wa)[1], Verdict::Fail);
        // Filebench: S-SWRITE beating Atomic-Write contradicts the paper.
        assert_eq!(graded("ext4-trace", &PAPER)[0], Verdict::Fail);
    }

    #[test]
    fn write_amplification_is_graded_on_8_kb_pages() {
        let outs = |rows: &[(&str, f64, f64)]| -> Vec<(String, Outcome)> {
            rows.iter()
                .map(|(l, t, w)| (l.to_string(), outcome(*t, *w)))
                .collect()
        };
        let mut high = PAPER;
        high[1].2 = 3.0; // Möbius above LightTx
        let (above, below) = (outs(&high), outs(&PAPER));
        let get_above = |label: &str| above.iter().find(|(l, _)| l == label).map(|(_, o)| o);
        let get_below = |label: &str| below.iter().find(|(l, _)| l == label).map(|(_, o)| o);
        let none = |_: &str| None;
        // 4 KB pages are shown, not graded: the verdict follows the 8 KB outcomes.
        let wa = workload_claims("tpcc", &get_above, &get_below, "none")[1].verdict();
        assert_eq!(wa, Verdict::Pass);
        let wa = workload_claims("tpcc", &get_below, &get_above, "none")[1].verdict();
        assert_eq!(wa, Verdict::Fail);
        let wa = workload_claims("tpcc", &get_below, &none, "none")[1].verdict();
        assert_eq!(wa, Verdict::NotReproduced);
    }

    #[test]
    fn a_missing_design_is_not_reproduced() {
        assert_eq!(graded("tpcc", &PAPER[..2]), vec![Verdict::NotReproduced; 2]);
    }
}
