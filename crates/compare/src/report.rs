//! What an experiment produces and how the report is written.

use crate::claims::{Claim, Verdict};
use crate::summary;
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
    /// The scale it ran at, what that leaves for the paper scale, its wall time: filled in by
    /// [`crate::run`] (an experiment adds only the runs it moved to the paper scale).
    pub ran: Ran,
}

/// How an experiment ran (`ran` in results.json).
#[derive(Clone, Debug, Default, Serialize, serde::Deserialize, PartialEq)]
pub struct Ran {
    /// `quick` or `paper`.
    pub scale: String,
    /// What this scale runs, against the paper scale.
    pub at_this_scale: String,
    /// Runs this scale leaves to `--scale paper`, each with why (an experiment's own list).
    pub moved_to_paper: Vec<String>,
    /// The command that runs the rest (at the quick scale).
    pub rest: Option<String>,
    /// Wall-clock seconds the experiment took (beside the others, on the run's cores).
    pub wall_s: f64,
}

impl Ran {
    /// One line for the report: the scale, what it ran, what it left and how to run that, and
    /// the wall time.
    pub fn sentence(&self) -> String {
        let mut s = format!("Scale `{}`: {}.", self.scale, self.at_this_scale);
        if !self.moved_to_paper.is_empty() {
            s += &format!(
                " At `--scale paper` only: {}.",
                self.moved_to_paper.join("; ")
            );
        }
        if let Some(rest) = &self.rest {
            s += &format!(" The rest: `{rest}`.");
        }
        s + &format!(" Wall time {}.", wall_time(self.wall_s))
    }
}

impl Ran {
    /// The `ran` of a results.json entry (the default where it has none).
    pub fn of(entry: &serde_json::Value) -> Ran {
        serde_json::from_value(entry["ran"].clone()).unwrap_or_default()
    }

    /// The report's row of experiments, in Markdown: scale, what it ran, what it left to the
    /// paper scale, the command for the rest, the wall time (`–` for what there is not).
    pub fn cells(&self) -> [String; 5] {
        let moved = match self.moved_to_paper.is_empty() {
            true => "–".to_string(),
            false => self.moved_to_paper.join("; "),
        };
        [
            self.scale.clone(),
            self.at_this_scale.clone(),
            moved,
            self.rest.as_ref().map_or("–".into(), |c| format!("`{c}`")),
            wall_time(self.wall_s),
        ]
    }
}

/// Seconds as `42.1 s` or `3 min 05 s`.
pub fn wall_time(seconds: f64) -> String {
    if seconds < 60.0 {
        format!("{seconds:.1} s")
    } else {
        let s = seconds.round() as u64;
        format!("{} min {:02} s", s / 60, s % 60)
    }
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
            ran: Ran::default(),
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

/// An experiment's entry in results.json.
pub(crate) fn entry_json(r: &ExperimentResult) -> serde_json::Value {
    let figures: Vec<serde_json::Value> = r
        .figures
        .iter()
        .map(|f| serde_json::json!({ "file": f.file, "caption": f.caption }))
        .collect();
    serde_json::json!({
        "title": r.title,
        "description": r.description,
        "data": r.data,
        "claims": claims_json(&r.claims),
        "tables": r.tables,
        "figures": figures,
        "skipped": r.skipped,
        "host_interface": r.host,
        "ran": r.ran,
    })
}

/// report.md, results.json and report.html from the experiments' report.md sections and
/// results.json entries (their figures already in `dir`): the header's title, the scoreboard,
/// the rest of the header, the table of experiments, the sections.
fn write_all(
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
    let bad = |what: String| std::io::Error::new(std::io::ErrorKind::InvalidData, what);
    let mut sections = String::new();
    let mut entries = Vec::new();
    let mut verdicts = Vec::new();
    let mut missing = Vec::new();
    for id in ids {
        let part = dir.join("parts").join(id);
        let Ok(report) = std::fs::read_to_string(part.join("report.md")) else {
            missing.push(id.to_string());
            continue;
        };
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
        let heading = format!("\n## {}\n", entry["title"].as_str().unwrap_or_default());
        let section = report
            .find(&heading)
            .map(|i| &report[i + 1..])
            .ok_or_else(|| bad(format!("{}: no experiment section", part.display())))?;
        sections.push_str(section);
        entries.push((id.to_string(), entry.clone()));
        for f in std::fs::read_dir(&part)? {
            let f = f?.path();
            if f.extension().is_some_and(|x| x == "svg") {
                std::fs::copy(&f, dir.join(f.file_name().expect("file name")))?;
            }
        }
    }
    write_all(dir, header, &sections, entries)?;
    Ok((verdicts, missing))
}
