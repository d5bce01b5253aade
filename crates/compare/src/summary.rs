//! The scoreboard that heads the report (`summary` in results.json): one row per paper claim —
//! the paper, the figure, the sub-claim that decides the verdict with our number and the
//! paper's (the tolerance taken from the paper), the verdict — linking to the experiment's
//! section; and the totals per paper.
//!
//! Built from results.json's entries (each experiment's `claims`, one per sub-claim in claim
//! order), so the one-process report and one assembled from parts run apart give the same.

use crate::claims::Verdict;
use crate::number::fmt;
use serde::{Deserialize, Serialize};
use std::fmt::Write;

/// Sub-claims of a claim by verdict.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    pub pass: usize,
    pub fail: usize,
    pub not_reproduced: usize,
    pub by_construction: usize,
}

impl Counts {
    fn add(&mut self, v: Verdict) {
        match v {
            Verdict::Pass => self.pass += 1,
            Verdict::Fail => self.fail += 1,
            Verdict::NotReproduced => self.not_reproduced += 1,
            Verdict::ByConstruction => self.by_construction += 1,
        }
    }
    /// Graded sub-claims (by construction ones are shown, not graded).
    pub fn graded(&self) -> usize {
        self.pass + self.fail + self.not_reproduced
    }
}

/// One claim of a paper, as the scoreboard shows it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Row {
    /// The paper ("Möbius", "TxFlash", …; our own checks name themselves).
    pub paper: String,
    /// Where in the paper ("§V-B, Fig. 7").
    pub figure: String,
    /// The paper's claim, quoted.
    pub claim: String,
    /// The sub-claim that decides the verdict: the first failing one of a failed claim, the
    /// first passing one of a passed claim, else the first.
    pub sub_claim: String,
    /// Our number for it (`None`: not measured).
    pub measured: Option<f64>,
    /// The paper's: the range taken from the paper that our number must fall in.
    pub papers: Option<String>,
    pub verdict: Verdict,
    /// Why the deciding sub-claim is not graded or not reproduced (empty otherwise).
    pub why: String,
    pub sub_claims: Counts,
    /// The experiment, and its section's anchor in report.md and report.html.
    pub experiment: String,
    pub section: String,
    /// How the claim fares across the table of unknowns (`mobius compare --robustness` only:
    /// "PASS, holds in 92 % … (its 3 graded sub-claims at once); flips with …", from its first
    /// sub-claim's `claim_robustness`; absent otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub robustness: Option<String>,
}

/// The paper a claim's source names: its first words, before the section sign or an aside.
pub fn paper_of(source: &str) -> &str {
    let end = [" §", " (", ";"]
        .iter()
        .filter_map(|sep| source.find(sep))
        .min()
        .unwrap_or(source.len());
    source[..end].trim()
}

/// A heading's anchor as GitHub makes it (and report.html uses): lower case, every character
/// that is not a letter, digit, space, `-` or `_` dropped, spaces made `-`.
pub fn anchor(heading: &str) -> String {
    heading
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The scoreboard of results.json's experiment entries (id → entry), in their order.
pub fn scoreboard(entries: &[(String, serde_json::Value)]) -> Vec<Row> {
    let mut rows = Vec::new();
    for (id, entry) in entries {
        let section = anchor(entry["title"].as_str().unwrap_or(id));
        let checks = entry["claims"].as_array().map_or(&[][..], |a| &a[..]);
        // The sub-claims of one claim are consecutive, its source, words and note repeated.
        let same_claim = |a: &serde_json::Value, b: &serde_json::Value| {
            ["source", "paper", "note"].iter().all(|k| a[k] == b[k])
        };
        for group in checks.chunk_by(same_claim) {
            rows.push(row(id, &section, group));
        }
    }
    rows
}

/// The scoreboard of experiments' results (as results.json's `summary` has it).
pub fn of_results(results: &[crate::ExperimentResult]) -> Vec<Row> {
    let entries: Vec<(String, serde_json::Value)> = results
        .iter()
        .map(|r| (r.id.to_string(), crate::result::entry_json(r)))
        .collect();
    scoreboard(&entries)
}

fn row(id: &str, section: &str, checks: &[serde_json::Value]) -> Row {
    let text = |v: &serde_json::Value, k: &str| v[k].as_str().unwrap_or_default().to_string();
    let verdict_of = |v: &serde_json::Value, k: &str| serde_json::from_value(v[k].clone()).ok();
    let first = &checks[0];
    let verdict = verdict_of(first, "claim_verdict").unwrap_or(Verdict::NotReproduced);
    let mut sub_claims = Counts::default();
    for c in checks {
        sub_claims.add(verdict_of(c, "verdict").unwrap_or(Verdict::NotReproduced));
    }
    let deciding = checks
        .iter()
        .find(|c| verdict_of(c, "verdict") == Some(verdict))
        .unwrap_or(first);
    let source = text(first, "source");
    let paper = paper_of(&source).to_string();
    Row {
        figure: source[paper.len()..].trim().to_string(),
        paper,
        claim: text(first, "paper"),
        sub_claim: text(deciding, "claim"),
        measured: deciding["measured"].as_f64(),
        papers: deciding["tolerance"].as_str().map(str::to_string),
        verdict,
        why: text(deciding, "why"),
        sub_claims,
        experiment: id.to_string(),
        section: section.to_string(),
        robustness: crate::robustness::claim_sentence(first, sub_claims.pass + sub_claims.fail)
            .or_else(|| crate::robustness::sentence(deciding)),
    }
}

/// How many of a claim's sub-claims went which way, in words.
pub fn tally(r: &Row) -> String {
    let c = r.sub_claims;
    let n = c.graded();
    match r.verdict {
        Verdict::Pass => format!("{} of {n} sub-claims pass", c.pass),
        Verdict::Fail => format!("{} of {n} sub-claims fail", c.fail),
        Verdict::NotReproduced => format!("{} of {n} not reproduced", c.not_reproduced),
        Verdict::ByConstruction => format!("{} shown, not graded", c.by_construction),
    }
}

/// Claims and sub-claims per paper, in the order the papers first appear.
pub fn per_paper(rows: &[Row]) -> Vec<(String, Counts, Counts)> {
    let mut out: Vec<(String, Counts, Counts)> = Vec::new();
    for r in rows {
        let i = match out.iter().position(|(p, ..)| *p == r.paper) {
            Some(i) => i,
            None => {
                out.push((r.paper.clone(), Counts::default(), Counts::default()));
                out.len() - 1
            }
        };
        out[i].1.add(r.verdict);
        let (s, c) = (&mut out[i].2, r.sub_claims);
        s.pass += c.pass;
        s.fail += c.fail;
        s.not_reproduced += c.not_reproduced;
        s.by_construction += c.by_construction;
    }
    out
}

/// One paper's totals in words: `Möbius: claims 5 PASS, 4 FAIL, 0 NOT-REPRODUCED (sub-claims …)`.
pub fn paper_line(paper: &str, claims: &Counts, sub: &Counts) -> String {
    format!(
        "{paper}: claims {} PASS, {} FAIL, {} NOT-REPRODUCED (sub-claims {} PASS, {} FAIL, {} NOT-REPRODUCED, {} by construction)",
        claims.pass,
        claims.fail,
        claims.not_reproduced,
        sub.pass,
        sub.fail,
        sub.not_reproduced,
        sub.by_construction
    )
}

/// The scoreboard as report.md's opening table, with the totals per paper under it.
pub fn scoreboard_md(rows: &[Row]) -> String {
    let mut md = String::from(
        "## Scoreboard\n\nEvery claim of the papers this run graded: the sub-claim that decides its verdict, our number and the paper's (the range taken from the paper that ours must fall in); the section has every sub-claim, the paper's words and why we differ.\n\n| paper | figure or claim | our number | the paper's | verdict |\n|---|---|---|---|---|\n",
    );
    let robust = rows.iter().any(|r| r.robustness.is_some());
    if robust {
        md = md.replace(
            " verdict |\n|---|",
            " verdict | across the unknowns |\n|---|---|",
        );
    }
    for r in rows {
        let mut verdict = format!("{} · {}", r.verdict.label(), tally(r));
        if !r.why.is_empty() {
            verdict += &format!(" ({})", r.why);
        }
        let _ = writeln!(
            md,
            "| {} | [{}](#{}): {} | {} | {} | {} |",
            cell(&r.paper),
            cell(if r.figure.is_empty() {
                "claim"
            } else {
                &r.figure
            }),
            r.section,
            cell(&r.sub_claim),
            r.measured.map_or("–".to_string(), fmt),
            r.papers.as_deref().unwrap_or("–"),
            cell(&verdict)
                + &match (robust, &r.robustness) {
                    (false, _) => String::new(),
                    (true, text) => format!(" | {}", cell(text.as_deref().unwrap_or("–"))),
                },
        );
    }
    md.push('\n');
    for (paper, claims, sub) in per_paper(rows) {
        let _ = writeln!(md, "- {}", paper_line(&paper, &claims, &sub));
    }
    md.push('\n');
    md
}

/// Text for a Markdown table cell: its `|` escaped.
pub fn cell(text: &str) -> String {
    text.replace('|', "\\|")
}

/// The table of experiments under the scoreboard: scale, what it ran, what it left for the
/// paper scale and the command that runs it, wall time.
pub fn experiments_md(entries: &[(String, serde_json::Value)]) -> String {
    let mut md = String::from(
        "## Experiments\n\n| experiment | scale | what it ran | at `--scale paper` only | the rest | wall time |\n|---|---|---|---|---|---|\n",
    );
    for (id, entry) in entries {
        let title = entry["title"].as_str().unwrap_or(id);
        let cells = crate::Ran::of(entry).cells().map(|c| cell(&c));
        let _ = writeln!(md, "| [{id}](#{}) | {} |", anchor(title), cells.join(" | "));
    }
    md.push('\n');
    md
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::claims::{Check, Claim, Tolerance};

    fn entries(claims: &[Claim]) -> Vec<(String, serde_json::Value)> {
        let entry = serde_json::json!({
            "title": "1. Compound writes — latency (Möbius Fig. 7)",
            "claims": crate::result::claims_json(claims),
        });
        vec![("micro".into(), entry)]
    }

    #[test]
    fn a_claim_is_one_row_decided_by_its_first_failing_sub_claim() {
        let failed = Claim::new("Möbius §V-B, Fig. 7", "A-SWRITE is best")
            .check(Check::grade("a / b", 0.5, Tolerance::Below { bound: 1.0 }))
            .check(Check::grade("c / d", 1.6, Tolerance::Below { bound: 1.0 }))
            .check(Check::by_construction("e", 1.0, "structural"));
        let passed = Claim::new("TxFlash §5.1, Fig. 6", "SCC is fastest").check(Check::grade(
            "x",
            2.0,
            Tolerance::AtLeast { min: 1.0 },
        ));
        let missing = Claim::new("X-FTL (SIGMOD '13); sqlite.org", "fewer writes")
            .check(Check::not_reproduced("y", "the design is not built"));
        let rows = scoreboard(&entries(&[failed, passed, missing]));
        assert_eq!(rows.len(), 3);
        let r = &rows[0];
        assert_eq!(
            (r.paper.as_str(), r.figure.as_str()),
            ("Möbius", "§V-B, Fig. 7")
        );
        assert_eq!((r.sub_claim.as_str(), r.measured), ("c / d", Some(1.6)));
        assert_eq!(r.papers.as_deref(), Some("< 1.000"));
        assert_eq!(r.verdict, Verdict::Fail);
        assert_eq!(tally(r), "1 of 2 sub-claims fail");
        assert_eq!(r.section, "1-compound-writes--latency-möbius-fig-7");
        assert_eq!(
            (rows[1].verdict, rows[1].sub_claim.as_str()),
            (Verdict::Pass, "x")
        );
        assert_eq!(rows[2].paper, "X-FTL");
        assert_eq!(rows[2].verdict, Verdict::NotReproduced);
        assert_eq!(rows[2].why, "the design is not built");
        let md = scoreboard_md(&rows);
        assert!(md.contains("| Möbius | [§V-B, Fig. 7](#1-compound-writes--latency-möbius-fig-7): c / d | 1.600 | < 1.000 | **FAIL** · 1 of 2 sub-claims fail |"), "{md}");
        let totals = per_paper(&rows);
        assert_eq!(totals.len(), 3);
        assert_eq!(
            (
                totals[0].1.fail,
                totals[0].2.pass,
                totals[0].2.by_construction
            ),
            (1, 1, 1)
        );
    }

    #[test]
    fn two_claims_with_the_same_source_stay_two_rows() {
        let a = Claim::new("OPTR §7, Fig. 13", "first").check(Check::grade(
            "p",
            2.0,
            Tolerance::AtLeast { min: 1.0 },
        ));
        let b = Claim::new("OPTR §7, Fig. 13", "second").check(Check::grade(
            "q",
            0.5,
            Tolerance::AtLeast { min: 1.0 },
        ));
        let rows = scoreboard(&entries(&[a, b]));
        assert_eq!(rows.len(), 2);
        assert_eq!(
            (rows[0].verdict, rows[1].verdict),
            (Verdict::Pass, Verdict::Fail)
        );
    }

    #[test]
    fn papers_are_named_by_the_first_words_of_a_source() {
        assert_eq!(paper_of("NVMFS §IV-D, Figs. 10–11"), "NVMFS");
        assert_eq!(
            paper_of("Crash campaign (the VST method of OPTR §5, docs/crashtest.md)"),
            "Crash campaign"
        );
        assert_eq!(paper_of("Möbius §V (DBT-2 on MySQL)"), "Möbius");
        assert_eq!(paper_of("plain"), "plain");
    }

    #[test]
    fn a_bar_in_a_cell_does_not_split_the_table() {
        assert_eq!(cell("largest |a / b − 1|"), "largest \\|a / b − 1\\|");
    }
}
