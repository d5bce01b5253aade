//! What an experiment produces and how the report is written.

use crate::claims::{Claim, Verdict};
use serde::Serialize;
use std::fmt::Write;
use std::path::Path;

/// A table: header row plus rows of cells (already formatted).
#[derive(Clone, Debug, Serialize)]
pub struct Table {
    pub caption: String,
    pub header: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

/// One figure: file name (without directory) and SVG text.
#[derive(Clone, Debug)]
pub struct Figure {
    pub file: String,
    pub caption: String,
    pub svg: String,
}

#[derive(Clone, Debug)]
pub struct ExperimentResult {
    pub id: &'static str,
    pub title: String,
    pub description: String,
    pub tables: Vec<Table>,
    pub figures: Vec<Figure>,
    pub claims: Vec<Claim>,
    /// Every measured number, for results.json.
    pub data: serde_json::Value,
    /// Designs or modes that were skipped, with the reason (e.g. not built yet).
    pub skipped: Vec<String>,
    /// The host interface every design of this experiment sat behind (the same for all).
    pub host: Option<flash::HostInterface>,
}

impl ExperimentResult {
    /// An experiment that could not run at all, with the reason.
    pub fn failed(id: &'static str, title: &str, why: String) -> ExperimentResult {
        ExperimentResult {
            id,
            title: title.to_string(),
            description: String::new(),
            tables: Vec::new(),
            figures: Vec::new(),
            claims: Vec::new(),
            data: serde_json::Value::Null,
            skipped: vec![why],
            host: None,
        }
    }
}

pub fn fmt(v: f64) -> String {
    if !v.is_finite() {
        "–".into()
    } else if v.abs() >= 1000.0 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.3}")
    }
}

fn table_md(out: &mut String, t: &Table) {
    let _ = writeln!(out, "*{}*\n", t.caption);
    let _ = writeln!(out, "| {} |", t.header.join(" | "));
    let _ = writeln!(
        out,
        "|{}|",
        t.header.iter().map(|_| "---").collect::<Vec<_>>().join("|")
    );
    for r in &t.rows {
        let _ = writeln!(out, "| {} |", r.join(" | "));
    }
    out.push('\n');
}

/// Writes report.md, every figure and results.json into `dir`.
pub fn write_report(dir: &Path, header: &str, results: &[ExperimentResult]) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let mut md = String::new();
    let _ = writeln!(md, "{header}\n");
    for r in results {
        let _ = writeln!(md, "## {}\n\n{}\n", r.title, r.description);
        if let Some(host) = &r.host {
            let _ = writeln!(md, "Host interface, the same for every design: {host}.\n");
        }
        if !r.skipped.is_empty() {
            let _ = writeln!(md, "Skipped: {}\n", r.skipped.join("; "));
        }
        for t in &r.tables {
            table_md(&mut md, t);
        }
        for f in &r.figures {
            std::fs::write(dir.join(&f.file), &f.svg)?;
            let _ = writeln!(md, "![{}]({})\n\n*{}*\n", f.caption, f.file, f.caption);
        }
        claims_md(&mut md, &r.claims);
    }
    std::fs::write(dir.join("report.md"), md)?;
    let json: serde_json::Map<String, serde_json::Value> = results
        .iter()
        .map(|r| {
            (
                r.id.to_string(),
                serde_json::json!({ "title": r.title, "data": r.data, "claims": claims_json(&r.claims), "tables": r.tables, "skipped": r.skipped, "host_interface": r.host }),
            )
        })
        .collect();
    std::fs::write(
        dir.join("results.json"),
        serde_json::to_string_pretty(&serde_json::Value::Object(json))? + "\n",
    )?;
    Ok(())
}

/// The claims table: one row per sub-claim, the paper's words on its first row.
fn claims_md(out: &mut String, claims: &[Claim]) {
    if claims.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "| source | the paper says | sub-claim | measured | tolerance | verdict | note |\n|---|---|---|---|---|---|---|"
    );
    for c in claims {
        for (i, k) in c.checks.iter().enumerate() {
            let (source, paper, note) = if i == 0 {
                (c.source.as_str(), c.paper.as_str(), c.note.as_str())
            } else {
                ("", "", "")
            };
            let measured = k.measured.map_or("–".to_string(), fmt);
            let tolerance = k.tolerance.map_or("–".to_string(), |t| t.to_string());
            let verdict = if k.why.is_empty() {
                k.verdict.label().to_string()
            } else {
                format!("{} ({})", k.verdict.label(), k.why)
            };
            let _ = writeln!(
                out,
                "| {source} | {paper} | {} | {measured} | {tolerance} | {verdict} | {note} |",
                k.claim
            );
        }
    }
    let count = |v: Verdict| {
        claims
            .iter()
            .flat_map(|c| &c.checks)
            .filter(|k| k.verdict == v)
            .count()
    };
    let _ = writeln!(
        out,
        "\nSub-claims: {} PASS, {} FAIL, {} NOT-REPRODUCED, {} by construction.\n",
        count(Verdict::Pass),
        count(Verdict::Fail),
        count(Verdict::NotReproduced),
        count(Verdict::ByConstruction)
    );
}

/// `results.json`'s claims: one entry per sub-claim, `{claim, measured, tolerance, verdict}`
/// plus where the paper says it.
pub fn claims_json(claims: &[Claim]) -> serde_json::Value {
    let rows: Vec<serde_json::Value> = claims
        .iter()
        .flat_map(|c| {
            c.checks.iter().map(move |k| {
                serde_json::json!({
                    "source": c.source,
                    "paper": c.paper,
                    "claim": k.claim,
                    "measured": k.measured,
                    "tolerance": k.tolerance.map(|t| t.to_string()),
                    "tolerance_spec": k.tolerance,
                    "verdict": k.verdict,
                    "why": k.why,
                    "claim_verdict": c.verdict(),
                    "note": c.note,
                })
            })
        })
        .collect();
    serde_json::Value::Array(rows)
}

/// Builds `dir`/report.md and `dir`/results.json from experiments run apart (one `mobius
/// compare --only ID --out dir/parts/ID` each, e.g. as Dask tasks): each part's report section
/// (its report.md after the header), its results.json entry and its figures, in the order of
/// `ids` (report order). Returns every sub-claim verdict of the assembled report and the ids
/// that had no part.
pub fn assemble_report(
    dir: &Path,
    header: &str,
    ids: &[&str],
) -> std::io::Result<(Vec<Verdict>, Vec<String>)> {
    let bad = |what: String| std::io::Error::new(std::io::ErrorKind::InvalidData, what);
    let mut md = String::new();
    let _ = writeln!(md, "{header}\n");
    let mut json = serde_json::Map::new();
    let mut verdicts = Vec::new();
    let mut missing = Vec::new();
    for id in ids {
        let part = dir.join("parts").join(id);
        let Ok(report) = std::fs::read_to_string(part.join("report.md")) else {
            missing.push(id.to_string());
            continue;
        };
        let section = report
            .find("\n## ")
            .map(|i| &report[i + 1..])
            .ok_or_else(|| bad(format!("{}: no experiment section", part.display())))?;
        md.push_str(section);
        let results: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(part.join("results.json"))?)
                .map_err(|e| bad(format!("{}/results.json: {e}", part.display())))?;
        let entry = results
            .get(*id)
            .ok_or_else(|| bad(format!("{}/results.json has no '{id}'", part.display())))?;
        for c in entry["claims"].as_array().into_iter().flatten() {
            verdicts.push(
                serde_json::from_value(c["verdict"].clone())
                    .map_err(|e| bad(format!("{}/results.json: verdict: {e}", part.display())))?,
            );
        }
        json.insert(id.to_string(), entry.clone());
        for f in std::fs::read_dir(&part)? {
            let f = f?.path();
            if f.extension().is_some_and(|x| x == "svg") {
                std::fs::copy(&f, dir.join(f.file_name().expect("file name")))?;
            }
        }
    }
    std::fs::write(dir.join("report.md"), md)?;
    std::fs::write(
        dir.join("results.json"),
        serde_json::to_string_pretty(&serde_json::Value::Object(json))? + "\n",
    )?;
    Ok((verdicts, missing))
}
