//! Verdicts that survive the model's unknowns (issue #66): every graded sub-claim re-graded
//! across the table of unknowns ([`crate::unknowns`]).
//!
//! `mobius compare --robustness` runs each experiment (all but those in [`EXCLUDED`]) as
//! *cells*, one run of the experiment at one point of the table:
//! - the **default** cell (the plain report's run, which also records the parameters that reach
//!   the experiment: those it consulted);
//! - **one at a time**: each parameter that reaches it at each end of its range (every other
//!   choice for a choice), the rest at their defaults;
//! - a **Latin hypercube** of `samples` points over all of them together, seeded.
//!
//! Each cell is deterministic for its experiment, seed, scale and point, so cells run anywhere
//! (Dask workers) and in any order, and a finished cell is never run again (resume). From the
//! cells [`grade`] gives every sub-claim graded at the defaults its `robustness`:
//! `pass_fraction` (the share of sampled points where it passes), `flipped_by` (the range ends
//! whose verdict differs from the default's), `points` (sampled points that graded it) and
//! `ends` (every one-at-a-time end: what the tornado chart draws).

use crate::claims::Verdict;
use crate::number::fmt;
use crate::unknowns::{self, Point, Range};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::fmt::Write;

/// Experiments the campaign leaves out, with why.
pub const EXCLUDED: [(&str, &str); 2] = [
    (
        "nvmfs",
        "kernel file systems on the device: hours per point at paper scale, and its parameters are the file systems' (issue #66 leaves it out)",
    ),
    (
        "optr-sqlite",
        "real SQLite on the kernel's ext4 over NBD, measured on the wall clock: the requests the device sees depend on the kernel's timers and races, so a cell is not deterministic in simulated time; cells side by side would disturb each other; workers need root, FUSE and loop devices (docs/robustness.md); its claims' deterministic counterpart, OPTR Fig. 9 through SQLite's VFS, is re-graded in `sqlite`",
    ),
];

/// The experiments the campaign re-grades, in report order.
pub fn experiments() -> Vec<&'static str> {
    crate::experiments()
        .iter()
        .map(|e| e.id)
        .filter(|id| !EXCLUDED.iter().any(|(x, _)| x == id))
        .collect()
}

/// One run of an experiment at one point of the table.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cell {
    pub experiment: String,
    /// `default`, `oat-NAME=VALUE` (one at a time) or `lhs-NNN` (sampled point NNN).
    pub label: String,
    /// The point, as `--unknowns` takes it (empty: the defaults).
    pub spec: String,
}

impl Cell {
    pub fn default_of(experiment: &str) -> Cell {
        Cell {
            experiment: experiment.to_string(),
            label: "default".into(),
            spec: String::new(),
        }
    }

    /// A name for the cell's file: its experiment and label, and a checksum of everything that
    /// decides its numbers (so a cell of another scale, seed or point is not taken for it).
    pub fn key(&self, scale: crate::Scale, seed: u64) -> String {
        let what = format!(
            "{}|{}|{}|{}",
            self.experiment,
            self.spec,
            scale.name(),
            seed
        );
        let label: String = self
            .label
            .chars()
            .map(|c| match c.is_ascii_alphanumeric() || "-_.=".contains(c) {
                true => c,
                false => '_',
            })
            .collect();
        format!(
            "{}.{label}.{:08x}",
            self.experiment,
            crc32c::crc32c(what.as_bytes())
        )
    }

    pub fn is_sample(&self) -> bool {
        self.label.starts_with("lhs-")
    }
}

/// The cells beyond the default one for `experiment`, given the parameters that reach it:
/// each one's range ends, one at a time, then `samples` Latin-hypercube points (seeded by
/// `seed`) restricted to them. None when nothing reaches it.
pub fn plan(
    experiment: &str,
    consulted: &BTreeSet<String>,
    samples: usize,
    seed: u64,
) -> Vec<Cell> {
    let varied: Vec<&unknowns::Unknown> = unknowns::TABLE
        .iter()
        .filter(|u| consulted.contains(u.name))
        .collect();
    if varied.is_empty() {
        return Vec::new();
    }
    let mut cells = Vec::new();
    for u in &varied {
        for v in u.ends() {
            cells.push(Cell {
                experiment: experiment.to_string(),
                label: format!("oat-{}={v}", u.name),
                spec: Point([(u.name, v)].into()).spec(),
            });
        }
    }
    for (i, p) in unknowns::latin_hypercube(samples, seed).iter().enumerate() {
        cells.push(Cell {
            experiment: experiment.to_string(),
            label: format!("lhs-{i:03}"),
            spec: p.only(consulted).spec(),
        });
    }
    cells
}

/// What a cell measured: its experiment's sub-claims as results.json gives them.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub cell: Cell,
    /// results.json's `claims` of the experiment (empty when the cell failed).
    pub claims: Vec<serde_json::Value>,
    pub wall_s: f64,
    /// CPU seconds of the cell's process (what it costs, whatever else shares the machine).
    pub cpu_s: f64,
}

/// One range end of a parameter, run one at a time: the sub-claim's number and verdict there.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct End {
    pub parameter: String,
    /// Its value there, as the report writes it (`× 2`, `= 1`, `= none`).
    pub value: String,
    pub measured: Option<f64>,
    pub verdict: Verdict,
}

/// A sub-claim across the table (`robustness` of its results.json entry).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Robustness {
    /// Share of the sampled points that graded it where it passes (`None`: none graded it).
    pub pass_fraction: Option<f64>,
    /// The range ends, one at a time, where it passes if it fails at the defaults or fails if it
    /// passes ("flips with").
    pub flipped_by: Vec<End>,
    /// Sampled points that graded it (passed or failed).
    pub points: usize,
    /// Every one-at-a-time end.
    pub ends: Vec<End>,
}

/// The sub-claim of `cell` that is `default[i]`: the same position when the two lists have the
/// same claims in the same order (the usual case: a point changes numbers, not which claims
/// are graded), else the first with the same source and sub-claim text.
fn matching<'a>(
    default: &[serde_json::Value],
    cell: &'a [serde_json::Value],
    i: usize,
) -> Option<&'a serde_json::Value> {
    let same = |a: &serde_json::Value, b: &serde_json::Value, keys: &[&str]| {
        keys.iter().all(|k| a[k] == b[k])
    };
    let aligned = default.len() == cell.len()
        && default
            .iter()
            .zip(cell)
            .all(|(a, b)| same(a, b, &["source"]));
    if aligned {
        return cell.get(i);
    }
    cell.iter()
        .find(|c| same(c, &default[i], &["source", "paper", "claim"]))
}

fn verdict_of(check: &serde_json::Value) -> Verdict {
    serde_json::from_value(check["verdict"].clone()).unwrap_or(Verdict::NotReproduced)
}

fn graded(v: Verdict) -> bool {
    matches!(v, Verdict::Pass | Verdict::Fail)
}

/// How a one-at-a-time cell's point reads in the report: `program × 2`, `clients = 1`.
pub fn end_text(spec: &str) -> (String, String) {
    let (name, value) = spec.split_once('=').unwrap_or((spec, ""));
    let factor = unknowns::find(name).is_some_and(|u| matches!(u.range, Range::Factor { .. }));
    let value = match factor {
        true => format!("× {value}"),
        false => format!("= {value}"),
    };
    (name.to_string(), value)
}

/// Each sub-claim of `default` (an experiment's results.json claims at the defaults) across the
/// cells: `None` for one not graded at the defaults (not reproduced, by construction).
pub fn grade(default: &[serde_json::Value], cells: &[Outcome]) -> Vec<Option<Robustness>> {
    (0..default.len())
        .map(|i| across(default, cells, i, "verdict"))
        .collect()
}

/// Each claim of `default` across the cells, by its first sub-claim's index: the claim's
/// verdict (`claim_verdict`: every graded sub-claim at once, FAIL if any fails) at each sampled
/// point and range end, as [`grade`] takes a sub-claim's. `None` for a claim not graded at the
/// defaults. The sub-claims of a claim are consecutive, with the same source, words and note
/// (as the scoreboard groups them, [`crate::summary::scoreboard`]).
pub fn grade_claims(
    default: &[serde_json::Value],
    cells: &[Outcome],
) -> Vec<(usize, Option<Robustness>)> {
    let same_claim = |a: &serde_json::Value, b: &serde_json::Value| {
        ["source", "paper", "note"].iter().all(|k| a[k] == b[k])
    };
    let mut first = 0;
    default
        .chunk_by(same_claim)
        .map(|group| {
            let i = first;
            first += group.len();
            (i, across(default, cells, i, "claim_verdict"))
        })
        .collect()
}

/// `default[i]`'s verdict under `key` (`verdict`: the sub-claim's; `claim_verdict`: its
/// claim's) across the cells: the share of sampled points where it passes, every range end and
/// those that flip it. `None` when it is not graded at the defaults.
fn across(
    default: &[serde_json::Value],
    cells: &[Outcome],
    i: usize,
    key: &str,
) -> Option<Robustness> {
    let verdict = |c: Option<&serde_json::Value>| {
        c.and_then(|c| serde_json::from_value(c[key].clone()).ok())
            .unwrap_or(Verdict::NotReproduced)
    };
    let at_default = verdict(default.get(i));
    if !graded(at_default) {
        return None;
    }
    let (mut points, mut passed) = (0, 0);
    for o in cells.iter().filter(|o| o.cell.is_sample()) {
        let v = verdict(matching(default, &o.claims, i));
        points += graded(v) as usize;
        passed += (v == Verdict::Pass) as usize;
    }
    let ends: Vec<End> = cells
        .iter()
        .filter(|o| o.cell.label.starts_with("oat-"))
        .map(|o| {
            let (parameter, value) = end_text(&o.cell.spec);
            let check = matching(default, &o.claims, i);
            End {
                parameter,
                value,
                measured: check
                    .filter(|_| key == "verdict")
                    .and_then(|c| c["measured"].as_f64()),
                verdict: verdict(check),
            }
        })
        .collect();
    Some(Robustness {
        pass_fraction: (points > 0).then(|| passed as f64 / points as f64),
        flipped_by: ends
            .iter()
            .filter(|e| graded(e.verdict) && e.verdict != at_default)
            .cloned()
            .collect(),
        points,
        ends,
    })
}

/// Gives every sub-claim of an experiment's results.json `entry` its `robustness`, and the
/// first sub-claim of every claim its claim's (`claim_robustness`, [`grade_claims`]).
pub fn attach(
    entry: &mut serde_json::Value,
    robustness: &[Option<Robustness>],
    claims: &[(usize, Option<Robustness>)],
) {
    let Some(checks) = entry["claims"].as_array_mut() else {
        return;
    };
    let json = |r: &Robustness| serde_json::to_value(r).expect("robustness is plain data");
    for (c, r) in checks.iter_mut().zip(robustness) {
        if let (Some(o), Some(r)) = (c.as_object_mut(), r) {
            o.insert("robustness".into(), json(r));
        }
    }
    for (i, r) in claims {
        if let (Some(o), Some(r)) = (checks.get_mut(*i).and_then(|c| c.as_object_mut()), r) {
            o.insert("claim_robustness".into(), json(r));
        }
    }
}

/// A sub-claim's robustness in words, from its results.json entry: `holds in 92 % of 40
/// sampled points; flips with clients = 1`. `None` without a `robustness` field.
pub fn sentence(check: &serde_json::Value) -> Option<String> {
    let r: Robustness = serde_json::from_value(check.get("robustness")?.clone()).ok()?;
    Some(words(verdict_of(check), &r))
}

/// A claim's robustness in words, from the results.json entry of its first sub-claim
/// (`claim_robustness`, its verdict `claim_verdict`), `graded` its graded sub-claims:
/// `PASS, holds in 92 % of 40 sampled points (its 3 graded sub-claims at once); flips with
/// clients = 1`. `None` without a `claim_robustness` field.
pub fn claim_sentence(first: &serde_json::Value, graded: usize) -> Option<String> {
    let r: Robustness = serde_json::from_value(first.get("claim_robustness")?.clone()).ok()?;
    let verdict: Verdict = serde_json::from_value(first["claim_verdict"].clone()).ok()?;
    let text = words(verdict, &r);
    Some(match (graded > 1, text.split_once("; ")) {
        (true, Some((share, flips))) => format!(
            "{}, {share} (its {graded} graded sub-claims at once); {flips}",
            verdict.label().trim_matches('*')
        ),
        _ => format!("{}, {text}", verdict.label().trim_matches('*')),
    })
}

/// A verdict's robustness in words: where it holds or passes, and what flips it.
fn words(verdict: Verdict, r: &Robustness) -> String {
    let mut s = match r.pass_fraction {
        None => "no sampled point graded it".to_string(),
        Some(p) => {
            let pct = format!("{:.0} %", p * 100.0);
            let n = match r.points {
                1 => "1 sampled point".to_string(),
                n => format!("{n} sampled points"),
            };
            match verdict {
                Verdict::Pass if p == 1.0 => format!("holds in all of {n}"),
                Verdict::Pass => format!("holds in {pct} of {n}"),
                _ if p == 0.0 => format!("fails in all of {n}"),
                _ => format!("passes in {pct} of {n}"),
            }
        }
    };
    if r.ends.is_empty() {
        s += "; no parameter of the table reaches it";
    } else if r.flipped_by.is_empty() {
        s += "; no range end flips it";
    } else {
        s += &format!("; flips with {}", flip_names(r).join(", "));
    }
    s
}

/// The range ends that flip `r`, as the report names them (`clients = 1`, `program × 0.5`).
fn flip_names(r: &Robustness) -> Vec<String> {
    r.flipped_by
        .iter()
        .map(|e| format!("{} {}", e.parameter, e.value))
        .collect()
}

/// The table of unknowns in Markdown: name, what, default, range, source.
pub fn table_md() -> String {
    let mut md = String::from(
        "| parameter | what | default | range | source of the range |\n|---|---|---|---|---|\n",
    );
    for u in unknowns::TABLE.iter() {
        let _ = writeln!(
            md,
            "| `{}` | {} | {} | {} | {} |",
            u.name,
            crate::summary::cell(u.what),
            crate::summary::cell(u.default),
            u.range_text(),
            crate::summary::cell(u.source)
        );
    }
    md
}

/// An experiment's robustness subsection for report.md: what reaches it, its cells, one row
/// per graded sub-claim, and its tornado chart (`figure`, when drawn).
pub fn section_md(
    entry: &serde_json::Value,
    consulted: &[String],
    cells: &[Outcome],
    figure: Option<&str>,
) -> String {
    let mut md = String::from("### Robustness across the unknowns\n\n");
    let samples = cells.iter().filter(|o| o.cell.is_sample()).count();
    let wall: f64 = cells.iter().map(|o| o.wall_s).sum();
    let reach = match consulted.is_empty() {
        true => "none".to_string(),
        false => consulted
            .iter()
            .map(|c| format!("`{c}`"))
            .collect::<Vec<_>>()
            .join(", "),
    };
    let _ = writeln!(
        md,
        "Parameters that reach this experiment: {reach}. Cells: {} one at a time, {samples} sampled points ({} of cell time, summed).\n",
        cells.len() - samples,
        crate::result::wall_time(wall)
    );
    md += "| sub-claim | measured | verdict at the defaults | across the unknowns |\n|---|---|---|---|\n";
    for c in entry["claims"].as_array().into_iter().flatten() {
        let Some(text) = sentence(c) else { continue };
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} |",
            crate::summary::cell(c["claim"].as_str().unwrap_or_default()),
            c["measured"].as_f64().map_or("–".into(), fmt),
            verdict_of(c).label(),
            crate::summary::cell(&text)
        );
    }
    if let Some(file) = figure {
        let _ = writeln!(
            md,
            "\n![Robustness: tornado]({file})\n\n*{}*",
            TORNADO_CAPTION
        );
    }
    md.push('\n');
    md
}

/// The caption of every tornado chart.
pub const TORNADO_CAPTION: &str = "Tornado: each sub-claim's measured number with one parameter at a time at its range's low end (blue) and high end (orange; a choice's alternatives in grey), the rest at their defaults; the black line is the number at the defaults, the green band the tolerance taken from the paper; an end whose verdict differs from the default's is outlined in red";

/// What a campaign ran (`robustness` at the top of its results.json).
#[derive(Clone, Debug, Serialize)]
pub struct Campaign {
    /// Latin-hypercube points per experiment, and the seed that placed them.
    pub samples: usize,
    pub lhs_seed: u64,
    /// Cells in all (default ones included); of them, those an earlier run had finished
    /// (resumed, not run again); and this run's wall time, which does not include those.
    pub cells: usize,
    pub resumed: usize,
    pub wall_s: f64,
    /// Per experiment: the parameters that reach it, its cells and their summed wall time.
    pub experiments: Vec<ExperimentCells>,
    pub excluded: Vec<(String, String)>,
    /// Cells that failed (their process, or their experiment at that point): they grade
    /// nothing, so each sub-claim's `points` counts fewer than the samples; the report lists them.
    pub failed: Vec<FailedCell>,
}

/// A cell that graded nothing, and why (the first line of its error).
#[derive(Clone, Debug, Serialize)]
pub struct FailedCell {
    pub experiment: String,
    pub label: String,
    pub why: String,
}

#[derive(Clone, Debug, Serialize)]
pub struct ExperimentCells {
    pub experiment: String,
    pub consulted: Vec<String>,
    pub cells: usize,
    pub cell_wall_s: f64,
    pub cell_cpu_s: f64,
}

/// The campaign's report in `dir`: the default cells' parts (under `dir/parts/`) assembled as
/// `--workers` assembles them, every graded sub-claim given its `robustness` from `outcomes`
/// (the other cells), each experiment's section followed by its robustness table and tornado
/// chart, the table of unknowns in the opening, and `robustness` (`campaign`) in results.json.
/// Returns every sub-claim verdict at the defaults and the ids that had no part.
pub fn assemble(
    dir: &std::path::Path,
    header: &str,
    ids: &[&str],
    outcomes: &[Outcome],
    campaign: &Campaign,
) -> std::io::Result<(Vec<Verdict>, Vec<String>)> {
    let mut parts = crate::report::read_parts(dir, ids)?;
    for (k, (id, entry)) in parts.entries.iter_mut().enumerate() {
        let cells: Vec<Outcome> = outcomes
            .iter()
            .filter(|o| o.cell.experiment == *id && o.cell.label != "default")
            .cloned()
            .collect();
        let default = entry["claims"].as_array().cloned().unwrap_or_default();
        attach(
            entry,
            &grade(&default, &cells),
            &grade_claims(&default, &cells),
        );
        let figure = tornado_file(dir, id, entry)?;
        let consulted = campaign
            .experiments
            .iter()
            .find(|e| e.experiment == *id)
            .map_or(&[][..], |e| &e.consulted[..]);
        parts.sections[k] += &section_md(entry, consulted, &cells, figure.as_deref());
    }
    let (title, intro) = header.split_once('\n').unwrap_or((header, ""));
    let header = format!("{title}\n{intro}\n\n{}", campaign_md(campaign));
    crate::report::write_all(dir, &header, &parts.sections.concat(), parts.entries)?;
    let path = dir.join("results.json");
    let mut json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path)?)?;
    json["robustness"] = serde_json::to_value(campaign)?;
    std::fs::write(&path, serde_json::to_string_pretty(&json)? + "\n")?;
    Ok((parts.verdicts, parts.missing))
}

/// Draws `id`'s tornado chart into `dir` and lists it among the entry's figures; its file name.
fn tornado_file(
    dir: &std::path::Path,
    id: &str,
    entry: &mut serde_json::Value,
) -> std::io::Result<Option<String>> {
    let claims = entry["claims"].as_array().cloned().unwrap_or_default();
    let robust: Vec<(serde_json::Value, Robustness)> = claims
        .iter()
        .filter_map(|c| {
            Some((
                c.clone(),
                serde_json::from_value(c.get("robustness")?.clone()).ok()?,
            ))
        })
        .collect();
    let panels = robust
        .iter()
        .map(|(c, r)| crate::tornado::Panel {
            claim: c["claim"].as_str().unwrap_or_default(),
            measured: c["measured"].as_f64().unwrap_or(f64::NAN),
            tolerance: &c["tolerance_spec"],
            robustness: r,
        })
        .collect();
    let title = format!(
        "{} — across the table of unknowns",
        entry["title"].as_str().unwrap_or(id)
    );
    let Some(svg) = crate::tornado::svg(&title, panels) else {
        return Ok(None);
    };
    let file = format!("robustness_{id}.svg");
    std::fs::write(dir.join(&file), svg)?;
    if let Some(figures) = entry["figures"].as_array_mut() {
        figures.push(serde_json::json!({ "file": file, "caption": TORNADO_CAPTION }));
    }
    Ok(Some(file))
}

/// The report's opening paragraph on the campaign, and the table of unknowns.
fn campaign_md(c: &Campaign) -> String {
    let mut md = format!(
        "## Robustness across the model's unknowns\n\nEvery graded sub-claim re-graded across the parameters the papers leave open (`mobius compare --robustness`, docs/robustness.md): each parameter that reaches an experiment at each end of its range, one at a time, and {} Latin-hypercube points over all of them together (seed {}). {}. The scoreboard's last column and each section's robustness table say where a verdict holds; *flips with* names the range ends that turn it.\n\n",
        c.samples,
        c.lhs_seed,
        cells_and_time(c)
    );
    md += "| experiment | parameters that reach it | cells | CPU time of its cells | wall time of its cells (summed) |\n|---|---|---|---|---|\n";
    for e in &c.experiments {
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} |",
            e.experiment,
            e.consulted.join(", "),
            e.cells,
            crate::result::wall_time(e.cell_cpu_s),
            crate::result::wall_time(e.cell_wall_s)
        );
    }
    for (id, why) in &c.excluded {
        let _ = writeln!(md, "| {id} | not re-graded: {why} | – | – | – |");
    }
    md += &failed_md(&c.failed);
    md += "\n### The table of unknowns\n\n";
    md += &table_md();
    md
}

/// "664 cells in 62 min 35 s", or for a resumed campaign what this run ran and what it took
/// from an earlier one (whose wall time is not known here: the table's cell times are).
fn cells_and_time(c: &Campaign) -> String {
    let wall = crate::result::wall_time(c.wall_s);
    match c.resumed {
        0 => format!("{} cells in {wall}", c.cells),
        r => format!(
            "{} cells: {} run in {wall}, {r} finished by an earlier run of the same command and resumed (the table gives every experiment's cell time)",
            c.cells,
            c.cells - r
        ),
    }
}

/// The cells that failed, grouped by experiment and reason: their points count in no
/// sub-claim's `points` (a fraction "of 29 sampled points" says 11 of 40 are here).
fn failed_md(failed: &[FailedCell]) -> String {
    if failed.is_empty() {
        return String::new();
    }
    let mut groups: std::collections::BTreeMap<(&str, &str), Vec<&str>> = Default::default();
    for f in failed {
        groups
            .entry((&f.experiment, &f.why))
            .or_default()
            .push(&f.label);
    }
    let mut md = format!(
        "\n**{} cell(s) failed and grade nothing** (a sub-claim's fraction counts only the sampled points that graded it):\n\n| experiment | cells | why |\n|---|---|---|\n",
        failed.len()
    );
    for ((experiment, why), labels) in groups {
        let _ = writeln!(md, "| {experiment} | {} | {why} |", labels.join(", "));
    }
    md
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::claims::{Check, Claim, Tolerance};

    /// A sub-claim "TPS ratio ≥ 1.3" whose measured ratio is `ratio`.
    fn claims(ratio: f64) -> Vec<serde_json::Value> {
        let c = Claim::new("Möbius §V", "Möbius beats Atomic-Write")
            .check(Check::grade(
                "A-SWRITE / Atomic-Write TPS",
                ratio,
                Tolerance::AtLeast { min: 1.3 },
            ))
            .check(Check::not_reproduced("other", "no model"));
        crate::result::claims_json(&[c]).as_array().unwrap().clone()
    }

    fn outcome(label: &str, spec: &str, ratio: f64) -> Outcome {
        Outcome {
            cell: Cell {
                experiment: "macro".into(),
                label: label.into(),
                spec: spec.into(),
            },
            claims: claims(ratio),
            wall_s: 1.0,
            cpu_s: 1.0,
        }
    }

    /// A grader fed a parameter that flips it reports that parameter, and only it.
    #[test]
    fn the_parameter_whose_end_flips_a_verdict_is_reported_and_no_other() {
        let default = claims(1.6);
        let cells = vec![
            outcome("oat-clients=1", "clients=1", 1.1),
            outcome("oat-clients=32", "clients=32", 2.5),
            outcome("oat-program=0.5", "program=0.5", 1.5),
            outcome("oat-program=2", "program=2", 1.7),
            outcome("lhs-000", "clients=2,program=1.2", 1.2),
            outcome("lhs-001", "clients=9,program=0.7", 1.9),
            outcome("lhs-002", "clients=20,program=1.9", 2.2),
            outcome("lhs-003", "clients=5,program=0.6", 1.4),
        ];
        let r = grade(&default, &cells);
        assert_eq!(r.len(), 2);
        assert!(r[1].is_none(), "a sub-claim not graded at the defaults");
        let r = r[0].as_ref().unwrap();
        assert_eq!(r.points, 4);
        assert_eq!(r.pass_fraction, Some(0.75));
        assert_eq!(r.ends.len(), 4);
        assert_eq!(r.flipped_by.len(), 1);
        let flip = &r.flipped_by[0];
        assert_eq!(
            (flip.parameter.as_str(), flip.value.as_str(), flip.verdict),
            ("clients", "= 1", Verdict::Fail)
        );
        assert_eq!(flip.measured, Some(1.1));
        let mut entry = serde_json::json!({ "claims": default });
        attach(&mut entry, &grade(&default, &cells), &[]);
        let s = sentence(&entry["claims"][0]).unwrap();
        assert_eq!(
            s,
            "holds in 75 % of 4 sampled points; flips with clients = 1"
        );
        assert!(sentence(&entry["claims"][1]).is_none());
        // Nothing flips it when every end passes: no parameter is named.
        let steady: Vec<Outcome> = cells
            .iter()
            .map(|o| outcome(&o.cell.label, &o.cell.spec, 2.0))
            .collect();
        let r = grade(&default, &steady)[0].clone().unwrap();
        assert!(r.flipped_by.is_empty());
        assert_eq!(r.pass_fraction, Some(1.0));
        // A failing default is flipped by the end where it passes, with the factor written so.
        let r = grade(&claims(1.0), &cells)[0].clone().unwrap();
        assert_eq!(
            flip_names(&r),
            ["clients = 32", "program × 0.5", "program × 2"]
        );
    }

    /// A claim of two sub-claims, "TPS ratio ≥ 1.3" and "WA ratio ≤ 1", measured `tps` and `wa`.
    fn two(tps: f64, wa: f64) -> Vec<serde_json::Value> {
        let c = Claim::new("Möbius §V-C, Fig. 9", "Möbius is faster and writes less")
            .check(Check::grade("TPS", tps, Tolerance::AtLeast { min: 1.3 }))
            .check(Check::grade("WA", wa, Tolerance::AtMost { max: 1.0 }));
        let other = Claim::new("Möbius §V-D", "another claim").check(Check::grade(
            "x",
            tps,
            Tolerance::AtLeast { min: 0.0 },
        ));
        crate::result::claims_json(&[c, other])
            .as_array()
            .unwrap()
            .clone()
    }

    /// A claim holds at a point only where every sub-claim does: its share is that of the
    /// points where all pass (less than either sub-claim's), and an end that flips any one of
    /// them flips the claim and is named; the scoreboard says so in its row.
    #[test]
    fn a_claims_share_is_where_all_its_sub_claims_hold_and_an_end_flipping_one_is_named() {
        let default = two(1.6, 0.8);
        let cell = |label: &str, spec: &str, tps, wa| Outcome {
            cell: Cell {
                experiment: "macro".into(),
                label: label.into(),
                spec: spec.into(),
            },
            claims: two(tps, wa),
            wall_s: 1.0,
            cpu_s: 1.0,
        };
        let cells = vec![
            cell("oat-clients=1", "clients=1", 1.5, 1.2),
            cell("oat-clients=32", "clients=32", 2.0, 0.7),
            cell("oat-program=0.5", "program=0.5", 1.1, 0.9),
            cell("oat-program=2", "program=2", 1.7, 0.9),
            cell("lhs-000", "clients=2,program=1.2", 1.2, 0.9),
            cell("lhs-001", "clients=9,program=0.7", 1.9, 1.1),
            cell("lhs-002", "clients=20,program=1.9", 2.2, 0.6),
            cell("lhs-003", "clients=5,program=0.6", 1.4, 0.9),
        ];
        let subs = grade(&default, &cells);
        let shares: Vec<Option<f64>> = subs
            .iter()
            .map(|r| r.as_ref().unwrap().pass_fraction)
            .collect();
        assert_eq!(shares, [Some(0.75), Some(0.75), Some(1.0)]);
        let claims = grade_claims(&default, &cells);
        assert_eq!(claims.len(), 2);
        let (first, r) = &claims[0];
        let r = r.as_ref().unwrap();
        assert_eq!((*first, r.points, r.pass_fraction), (0, 4, Some(0.5)));
        let flips = flip_names(r);
        assert_eq!(flips, ["clients = 1", "program × 0.5"]);
        assert_eq!(
            claims[1].0, 2,
            "the second claim starts at its first sub-claim"
        );
        let mut entry = serde_json::json!({ "title": "2. Macro", "claims": default });
        attach(&mut entry, &subs, &claims);
        assert_eq!(
            claim_sentence(&entry["claims"][0], 2).unwrap(),
            "PASS, holds in 50 % of 4 sampled points (its 2 graded sub-claims at once); flips with clients = 1, program × 0.5"
        );
        assert!(entry["claims"][1].get("claim_robustness").is_none());
        let board = crate::summary::scoreboard(&[("macro".into(), entry)]);
        assert_eq!(
            board[0].robustness.as_deref(),
            Some("PASS, holds in 50 % of 4 sampled points (its 2 graded sub-claims at once); flips with clients = 1, program × 0.5")
        );
        assert_eq!(
            board[1].robustness.as_deref(),
            Some("PASS, holds in all of 4 sampled points; no range end flips it")
        );
        // A failing claim is flipped by the end where every sub-claim passes, not by one where
        // only one of them does.
        let r = grade_claims(&two(1.2, 0.8), &cells)[0].1.clone().unwrap();
        let flips = flip_names(&r);
        assert_eq!(flips, ["clients = 32", "program × 2"]);
    }

    #[test]
    fn the_docs_copy_of_the_table_is_the_codes() {
        let docs = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../docs/robustness.md"
        ))
        .unwrap();
        assert!(
            docs.contains(&table_md()),
            "docs/robustness.md: paste the output of `mobius compare --list-unknowns`"
        );
    }

    #[test]
    fn a_plan_runs_each_parameter_that_reaches_at_its_ends_then_the_samples() {
        let reach: BTreeSet<String> = ["clients", "host_link"].map(String::from).into();
        let cells = plan("macro", &reach, 5, 1);
        let labels: Vec<&str> = cells.iter().map(|c| c.label.as_str()).collect();
        assert_eq!(
            &labels[..5],
            [
                "oat-host_link=sata2",
                "oat-host_link=sata3",
                "oat-host_link=none",
                "oat-clients=1",
                "oat-clients=32"
            ]
        );
        assert_eq!(cells.len(), 10);
        for c in &cells[5..] {
            let p = Point::parse(&c.spec).unwrap();
            let names: BTreeSet<String> = p.0.keys().map(|k| k.to_string()).collect();
            assert_eq!(names, reach, "a sample varies exactly what reaches");
        }
        assert!(plan("macro", &BTreeSet::new(), 5, 1).is_empty());
        let a = &cells[0];
        assert_ne!(
            a.key(crate::Scale::Quick, 1),
            a.key(crate::Scale::Quick, 2),
            "another seed is another cell"
        );
    }

    /// A resumed campaign does not give the cells it took from an earlier run this run's time.
    #[test]
    fn a_resumed_campaign_says_which_cells_this_run_ran() {
        let c = |resumed| Campaign {
            samples: 40,
            lhs_seed: 1,
            cells: 664,
            resumed,
            wall_s: 60.0,
            experiments: Vec::new(),
            excluded: Vec::new(),
            failed: Vec::new(),
        };
        assert!(
            cells_and_time(&c(0)).starts_with("664 cells in 1 min"),
            "{}",
            cells_and_time(&c(0))
        );
        let r = cells_and_time(&c(651));
        assert!(
            r.contains("13 run in 1 min") && r.contains("651 finished by an earlier run"),
            "{r}"
        );
    }

    /// Failed cells are listed in the report's campaign paragraph, grouped by experiment and
    /// reason; none, nothing.
    #[test]
    fn failed_cells_are_listed_with_why() {
        let f = |label: &str, why: &str| FailedCell {
            experiment: "optr".into(),
            label: label.into(),
            why: why.into(),
        };
        assert_eq!(failed_md(&[]), "");
        let md = failed_md(&[
            f("lhs-002", "the experiment failed: not reached"),
            f("lhs-007", "the experiment failed: not reached"),
            f("oat-fill=0.5", "exit 1: boom"),
        ]);
        assert!(md.contains("3 cell(s) failed"), "{md}");
        assert!(
            md.contains("| optr | lhs-002, lhs-007 | the experiment failed: not reached |"),
            "{md}"
        );
        assert!(
            md.contains("| optr | oat-fill=0.5 | exit 1: boom |"),
            "{md}"
        );
    }
}
