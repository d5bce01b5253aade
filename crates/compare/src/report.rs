//! What an experiment produces and how the report is written.

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

/// A paper's claim set beside our measured number.
#[derive(Clone, Debug, Serialize)]
pub struct Claim {
    /// Where the paper says it ("Möbius §V-B, Fig. 7").
    pub source: String,
    /// The paper's claim, quoted as the paper's.
    pub paper: String,
    /// Our measured number(s), from this run.
    pub ours: String,
    /// Whether ours agrees in direction/magnitude; `None` when not comparable.
    pub agrees: Option<bool>,
    /// Why we believe we differ, where we do (model difference, paper ambiguity, bug).
    pub note: String,
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
        if !r.claims.is_empty() {
            let _ = writeln!(
                md,
                "| source | the paper says | we measured | agrees | note |\n|---|---|---|---|---|"
            );
            for c in &r.claims {
                let agrees = match c.agrees {
                    Some(true) => "yes",
                    Some(false) => "**no**",
                    None => "n/a",
                };
                let _ = writeln!(
                    md,
                    "| {} | {} | {} | {} | {} |",
                    c.source, c.paper, c.ours, agrees, c.note
                );
            }
            md.push('\n');
        }
    }
    std::fs::write(dir.join("report.md"), md)?;
    let json: serde_json::Map<String, serde_json::Value> = results
        .iter()
        .map(|r| {
            (
                r.id.to_string(),
                serde_json::json!({ "title": r.title, "data": r.data, "claims": r.claims, "tables": r.tables, "skipped": r.skipped }),
            )
        })
        .collect();
    std::fs::write(
        dir.join("results.json"),
        serde_json::to_string_pretty(&serde_json::Value::Object(json))? + "\n",
    )?;
    Ok(())
}
