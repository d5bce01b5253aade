//! How the report is written: report.md, report.html and results.json from the experiments'
//! results.

use crate::claims::{Claim, Verdict};
use crate::number::fmt;
use crate::result::{entry_json, ExperimentResult, Table};
use crate::summary;
use std::fmt::Write;
use std::path::Path;

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

/// Writes report.md (the scoreboard first), report.html, every figure and results.json into
/// `dir`.
pub fn write_report(dir: &Path, header: &str, results: &[ExperimentResult]) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let mut sections = String::new();
    for r in results {
        section_md(&mut sections, r);
        for f in &r.figures {
            std::fs::write(dir.join(&f.file), &f.svg)?;
        }
    }
    let entries = results
        .iter()
        .map(|r| (r.id.to_string(), entry_json(r)))
        .collect();
    write_all(dir, header, &sections, entries)
}

/// An experiment's section of report.md.
fn section_md(md: &mut String, r: &ExperimentResult) {
    let _ = writeln!(md, "## {}\n\n{}\n", r.title, r.description);
    let _ = writeln!(md, "{}\n", r.ran.sentence());
    if let Some(host) = &r.host {
        let _ = writeln!(md, "Host interface, the same for every design: {host}.\n");
    }
    if !r.skipped.is_empty() {
        let _ = writeln!(md, "Skipped: {}\n", r.skipped.join("; "));
    }
    for t in &r.tables {
        table_md(md, t);
    }
    for f in &r.figures {
        let _ = writeln!(md, "![{}]({})\n\n*{}*\n", f.caption, f.file, f.caption);
    }
    claims_md(md, &r.claims);
}

/// report.md, results.json and report.html from the experiments' report.md sections and
/// results.json entries (their figures already in `dir`): the header's title, the scoreboard,
/// the rest of the header, the table of experiments, the sections.
pub(crate) fn write_all(
    dir: &Path,
    header: &str,
    sections: &str,
    entries: Vec<(String, serde_json::Value)>,
) -> std::io::Result<()> {
    let board = summary::scoreboard(&entries);
    let (title, intro) = header.split_once('\n').unwrap_or((header, ""));
    let mut md = format!("{title}\n\n");
    md += &summary::scoreboard_md(&board);
    let intro = intro.trim();
    if !intro.is_empty() {
        md += &format!("{intro}\n\n");
    }
    md += &summary::experiments_md(&entries);
    md += sections;
    std::fs::write(dir.join("report.md"), md)?;
    std::fs::write(
        dir.join("report.html"),
        crate::html::page(header, &entries, &board, dir)?,
    )?;
    let mut json: serde_json::Map<String, serde_json::Value> = entries.into_iter().collect();
    json.insert("summary".into(), serde_json::to_value(&board)?);
    std::fs::write(
        dir.join("results.json"),
        serde_json::to_string_pretty(&serde_json::Value::Object(json))? + "\n",
    )
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

/// Builds `dir`/report.md, report.html and results.json from experiments run apart (one
/// `mobius compare --only ID --out dir/parts/ID` each, e.g. as Dask tasks): each part's report
/// section (its report.md from the experiment's heading on), its results.json entry and its
/// figures, in the order of `ids` (report order). Returns every sub-claim verdict of the
/// assembled report and the ids that had no part.
pub fn assemble_report(
    dir: &Path,
    header: &str,
    ids: &[&str],
) -> std::io::Result<(Vec<Verdict>, Vec<String>)> {
    let parts = read_parts(dir, ids)?;
    let sections: String = parts.sections.concat();
    write_all(dir, header, &sections, parts.entries)?;
    Ok((parts.verdicts, parts.missing))
}

/// What [`read_parts`] found under `dir/parts/`.
pub(crate) struct Parts {
    /// Each part's report.md section, in the order of `entries`.
    pub sections: Vec<String>,
    /// Each part's results.json entry, by id.
    pub entries: Vec<(String, serde_json::Value)>,
    pub verdicts: Vec<Verdict>,
    /// The ids that had no part.
    pub missing: Vec<String>,
}

/// Reads the parts of `ids` under `dir/parts/` and copies their figures into `dir`.
pub(crate) fn read_parts(dir: &Path, ids: &[&str]) -> std::io::Result<Parts> {
    let bad = |what: String| std::io::Error::new(std::io::ErrorKind::InvalidData, what);
    let mut parts = Parts {
        sections: Vec::new(),
        entries: Vec::new(),
        verdicts: Vec::new(),
        missing: Vec::new(),
    };
    for id in ids {
        let part = dir.join("parts").join(id);
        let Ok(report) = std::fs::read_to_string(part.join("report.md")) else {
            parts.missing.push(id.to_string());
            continue;
        };
        let results: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(part.join("results.json"))?)
                .map_err(|e| bad(format!("{}/results.json: {e}", part.display())))?;
        let entry = results
            .get(*id)
            .ok_or_else(|| bad(format!("{}/results.json has no '{id}'", part.display())))?;
        for c in entry["claims"].as_array().into_iter().flatten() {
            parts.verdicts.push(
                serde_json::from_value(c["verdict"].clone())
                    .map_err(|e| bad(format!("{}/results.json: verdict: {e}", part.display())))?,
            );
        }
        let heading = format!("\n## {}\n", entry["title"].as_str().unwrap_or_default());
        let section = report
            .find(&heading)
            .map(|i| &report[i + 1..])
            .ok_or_else(|| bad(format!("{}: no experiment section", part.display())))?;
        parts.sections.push(section.to_string());
        parts.entries.push((id.to_string(), entry.clone()));
        for f in std::fs::read_dir(&part)? {
            let f = f?.path();
            if f.extension().is_some_and(|x| x == "svg") {
                std::fs::copy(&f, dir.join(f.file_name().expect("file name")))?;
            }
        }
    }
    Ok(parts)
}
