//! `report.html`: the report as one self-contained page a browser opens from disk — the
//! scoreboard first, then every experiment with its tables, its figures inline (they are SVG)
//! and its claims. No script, no style sheet or font from elsewhere, no request at all: the page
//! forbids itself every load (`Content-Security-Policy: default-src 'none'`).
//!
//! Written from results.json's entries and the SVG files beside it, so the one-process report
//! and one assembled from parts run apart give the same page.

use crate::claims::Verdict;
use crate::number::fmt;
use crate::summary::{anchor, per_paper, tally, Row};
use crate::svg::escape;
use serde_json::Value;
use std::fmt::Write;
use std::path::Path;

const STYLE: &str = "body{font-family:sans-serif;max-width:1200px;margin:1em auto;padding:0 1em;line-height:1.4}\
table{border-collapse:collapse;margin:.5em 0 1em;font-size:90%}th,td{border:1px solid #ccc;padding:.2em .5em;vertical-align:top}\
th{background:#f3f3f3}td.PASS{background:#e3f4e3}td.FAIL{background:#fbe0e0}td.NOT-REPRODUCED{background:#fff3cd}\
td.BY-CONSTRUCTION{background:#eef}figure{margin:1em 0}figure svg{max-width:100%;height:auto;border:1px solid #ddd}\
figcaption{font-style:italic}code{background:#f3f3f3;padding:0 .2em}.ran{color:#333;background:#f8f8f8;padding:.4em}";

/// The page: `header` is report.md's opening (a `# title` line, then a paragraph), `entries`
/// results.json's experiments (id → entry), `board` the scoreboard; the figures are read from
/// `dir`.
pub fn page(
    header: &str,
    entries: &[(String, Value)],
    board: &[Row],
    dir: &Path,
) -> std::io::Result<String> {
    let (title, intro) = header.split_once('\n').unwrap_or((header, ""));
    let title = title.trim_start_matches('#').trim();
    let mut h = format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">\n\
         <title>{}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n<h1>{}</h1>\n",
        escape(title),
        escape(title)
    );
    scoreboard(&mut h, board);
    opening(&mut h, intro);
    experiments(&mut h, entries);
    for (id, entry) in entries {
        section(&mut h, id, entry, dir)?;
    }
    h.push_str("</body>\n</html>\n");
    Ok(h)
}

/// The report's opening after its title, Markdown as report.md has it: paragraphs, `##` to
/// `####` headings and pipe tables (the robustness campaign's), each table drawn as every other
/// table of the page ([`table`]).
fn opening(h: &mut String, md: &str) {
    for block in md.split("\n\n").map(str::trim).filter(|b| !b.is_empty()) {
        if let Some(t) = md_table(block) {
            table(h, &t);
            continue;
        }
        let level = block.chars().take_while(|c| *c == '#').count();
        match block[level..].strip_prefix(' ') {
            Some(text) if (2..=4).contains(&level) && !text.contains('\n') => {
                let _ = writeln!(
                    h,
                    "<h{level} id=\"{}\">{}</h{level}>",
                    escape(&anchor(text)),
                    inline(text)
                );
            }
            _ => {
                let _ = writeln!(h, "<p>{}</p>", inline(block));
            }
        }
    }
}

/// A Markdown pipe table (a `| a | b |` header, a `|---|---|` rule, rows; `\|` inside a cell)
/// as the table [`table`] draws (`header`, `rows`); `None` for any other block.
fn md_table(block: &str) -> Option<Value> {
    let lines: Vec<&str> = block.lines().map(str::trim).collect();
    let piped = |l: &&str| l.len() >= 2 && l.starts_with('|') && l.ends_with('|');
    if lines.len() < 2 || !lines.iter().all(piped) {
        return None;
    }
    let rule = md_cells(lines[1]);
    let is_rule = |c: &String| !c.is_empty() && c.chars().all(|ch| matches!(ch, '-' | ':'));
    if !rule.iter().all(is_rule) {
        return None;
    }
    let rows: Vec<Vec<String>> = lines[2..].iter().map(|l| md_cells(l)).collect();
    Some(serde_json::json!({ "caption": "", "header": md_cells(lines[0]), "rows": rows }))
}

/// The cells of a pipe table's line, trimmed, `\|` read as `|`.
fn md_cells(line: &str) -> Vec<String> {
    let mut cells = vec![String::new()];
    let mut chars = line[1..line.len() - 1].chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'|') => {
                chars.next();
                cells.last_mut().expect("one cell").push('|');
            }
            '|' => cells.push(String::new()),
            _ => cells.last_mut().expect("one cell").push(c),
        }
    }
    cells.iter().map(|c| c.trim().to_string()).collect()
}

fn verdict_class(v: Verdict) -> &'static str {
    match v {
        Verdict::Pass => "PASS",
        Verdict::Fail => "FAIL",
        Verdict::NotReproduced => "NOT-REPRODUCED",
        Verdict::ByConstruction => "BY-CONSTRUCTION",
    }
}

fn scoreboard(h: &mut String, board: &[Row]) {
    let robust = board.iter().any(|r| r.robustness.is_some());
    h.push_str(
        "<h2 id=\"scoreboard\">Scoreboard</h2>\n<table id=\"scoreboard-table\">\n\
         <tr><th>paper</th><th>figure or claim</th><th>our number</th><th>the paper's</th><th>verdict</th>",
    );
    h.push_str(match robust {
        true => "<th>across the unknowns</th></tr>\n",
        false => "</tr>\n",
    });
    for r in board {
        let why = if r.why.is_empty() {
            String::new()
        } else {
            format!(" ({})", inline(&r.why))
        };
        let _ = writeln!(
            h,
            "<tr><td>{}</td><td><a href=\"#{}\">{}</a>: {}</td><td>{}</td><td>{}</td><td class=\"{}\">{} · {}{why}</td>{}</tr>",
            escape(&r.paper),
            escape(&r.section),
            escape(if r.figure.is_empty() { "claim" } else { &r.figure }),
            inline(&r.sub_claim),
            r.measured.map_or("–".to_string(), fmt),
            escape(r.papers.as_deref().unwrap_or("–")),
            verdict_class(r.verdict),
            verdict_class(r.verdict),
            escape(&tally(r)),
            match (robust, &r.robustness) {
                (false, _) => String::new(),
                (true, t) => format!("<td>{}</td>", inline(t.as_deref().unwrap_or("–"))),
            },
        );
    }
    h.push_str("</table>\n<ul>\n");
    for (paper, claims, sub) in per_paper(board) {
        let line = crate::summary::paper_line(&paper, &claims, &sub);
        let _ = writeln!(h, "<li>{}</li>", escape(&line));
    }
    h.push_str("</ul>\n");
}

fn experiments(h: &mut String, entries: &[(String, Value)]) {
    h.push_str(
        "<h2 id=\"experiments\">Experiments</h2>\n<table>\n<tr><th>experiment</th><th>scale</th><th>what it ran</th>\
         <th>at <code>--scale paper</code> only</th><th>the rest</th><th>wall time</th></tr>\n",
    );
    for (id, entry) in entries {
        let cells = crate::Ran::of(entry).cells().map(|c| inline(&c));
        let _ = writeln!(
            h,
            "<tr><td><a href=\"#{}\">{}</a></td><td>{}</td></tr>",
            escape(&anchor(entry["title"].as_str().unwrap_or(id))),
            escape(id),
            cells.join("</td><td>")
        );
    }
    h.push_str("</table>\n");
}

/// One experiment: heading, description, scale and wall time, host, what was skipped, tables,
/// figures, claims.
fn section(h: &mut String, id: &str, e: &Value, dir: &Path) -> std::io::Result<()> {
    let title = e["title"].as_str().unwrap_or(id);
    let _ = writeln!(
        h,
        "<h2 id=\"{}\">{}</h2>\n<p>{}</p>\n<p class=\"ran\">{}</p>",
        escape(&anchor(title)),
        escape(title),
        inline(e["description"].as_str().unwrap_or_default()),
        inline(&crate::Ran::of(e).sentence())
    );
    if let Ok(host) = serde_json::from_value::<flash::HostInterface>(e["host_interface"].clone()) {
        let _ = writeln!(
            h,
            "<p>Host interface, the same for every design: {}.</p>",
            escape(&host.to_string())
        );
    }
    let skipped = strings(&e["skipped"]);
    if !skipped.is_empty() {
        h.push_str("<p>Skipped:</p>\n<ul>\n");
        for s in skipped {
            let _ = writeln!(h, "<li>{}</li>", inline(&s));
        }
        h.push_str("</ul>\n");
    }
    for t in e["tables"].as_array().into_iter().flatten() {
        table(h, t);
    }
    for f in e["figures"].as_array().into_iter().flatten() {
        let file = f["file"].as_str().unwrap_or_default();
        let svg = std::fs::read_to_string(dir.join(file))?;
        let _ = writeln!(
            h,
            "<figure id=\"{}\">\n{}\n<figcaption>{}</figcaption>\n</figure>",
            escape(&figure_id(file)),
            svg.trim(),
            inline(f["caption"].as_str().unwrap_or_default())
        );
    }
    claims(h, e["claims"].as_array().map_or(&[][..], |a| &a[..]));
    Ok(())
}

/// A figure's element id in the page: `figure-` and its file name without `.svg`.
pub fn figure_id(file: &str) -> String {
    format!("figure-{}", file.trim_end_matches(".svg"))
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s.as_str().map(str::to_string))
        .collect()
}

fn table(h: &mut String, t: &Value) {
    let _ = writeln!(
        h,
        "<table>\n<caption>{}</caption>",
        inline(t["caption"].as_str().unwrap_or_default())
    );
    h.push_str("<tr>");
    for c in strings(&t["header"]) {
        let _ = write!(h, "<th>{}</th>", inline(&c));
    }
    h.push_str("</tr>\n");
    for row in t["rows"].as_array().into_iter().flatten() {
        h.push_str("<tr>");
        for c in strings(row) {
            let _ = write!(h, "<td>{}</td>", inline(&c));
        }
        h.push_str("</tr>\n");
    }
    h.push_str("</table>\n");
}

/// The claims table: one row per sub-claim, as report.md's.
fn claims(h: &mut String, checks: &[Value]) {
    if checks.is_empty() {
        return;
    }
    h.push_str(
        "<table class=\"claims\">\n<tr><th>source</th><th>the paper says</th><th>sub-claim</th><th>measured</th>\
         <th>tolerance</th><th>verdict</th><th>note</th></tr>\n",
    );
    let text = |c: &Value, k: &str| c[k].as_str().unwrap_or_default().to_string();
    let mut previous: Option<&Value> = None;
    for c in checks {
        let first =
            previous.is_none_or(|p| ["source", "paper", "note"].iter().any(|k| p[k] != c[k]));
        previous = Some(c);
        let (source, paper, note) = if first {
            (text(c, "source"), text(c, "paper"), text(c, "note"))
        } else {
            Default::default()
        };
        let verdict: Verdict =
            serde_json::from_value(c["verdict"].clone()).unwrap_or(Verdict::NotReproduced);
        let why = text(c, "why");
        let _ = writeln!(
            h,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"{}\">{}{}</td><td>{}</td></tr>",
            inline(&source),
            inline(&paper),
            inline(&text(c, "claim")),
            c["measured"].as_f64().map_or("–".to_string(), fmt),
            escape(c["tolerance"].as_str().unwrap_or("–")),
            verdict_class(verdict),
            verdict_class(verdict),
            (if why.is_empty() { String::new() } else { format!(" ({})", inline(&why)) })
                + &crate::robustness::sentence(c).map_or(String::new(), |t| format!(" · {}", inline(&t))),
            inline(&note),
        );
    }
    h.push_str("</table>\n");
}

/// Markdown's inline code (`` `x` ``) and bold (`**x**`) as HTML, everything else escaped.
pub fn inline(md: &str) -> String {
    let mut out = String::new();
    for (i, part) in md.split('`').enumerate() {
        if i % 2 == 1 {
            let _ = write!(out, "<code>{}</code>", escape(part));
            continue;
        }
        let escaped = escape(part);
        let paired = escaped.matches("**").count().is_multiple_of(2);
        for (j, piece) in escaped.split("**").enumerate() {
            if !paired {
                out.push_str(&escaped);
                break;
            }
            if j % 2 == 1 {
                let _ = write!(out, "<strong>{piece}</strong>");
            } else {
                out.push_str(piece);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inline_markdown_is_escaped_and_code_and_bold_kept() {
        assert_eq!(
            inline("run `a < b` for **bold** & <more>"),
            "run <code>a &lt; b</code> for <strong>bold</strong> &amp; &lt;more&gt;"
        );
        assert_eq!(inline("2 ** 3"), "2 ** 3");
    }

    /// The robustness campaign's opening (a heading, a paragraph, pipe tables) is drawn as HTML:
    /// no Markdown table line is left as text, and a `\|` stays inside its cell.
    #[test]
    fn the_openings_markdown_tables_and_headings_become_html() {
        let md = "## Robustness\n\nSome `code` **here**.\n\n| a | b \\| c |\n|---|---|\n| 1 | `x` |\n| 2 | y |\n\n### The table\n\n|not a table|\n| x |";
        let mut h = String::new();
        opening(&mut h, md);
        assert!(h.contains("<h2 id=\"robustness\">Robustness</h2>"), "{h}");
        assert!(h.contains("<h3 id=\"the-table\">The table</h3>"), "{h}");
        assert!(
            h.contains("<p>Some <code>code</code> <strong>here</strong>.</p>"),
            "{h}"
        );
        assert!(h.contains("<tr><th>a</th><th>b | c</th></tr>"), "{h}");
        assert!(
            h.contains("<tr><td>1</td><td><code>x</code></td></tr>"),
            "{h}"
        );
        assert_eq!(h.matches("<table>").count(), 1, "{h}");
        assert!(!h.contains("|---|"), "a Markdown table left as text: {h}");
        // Two piped lines without a rule are no table: a paragraph, as before.
        assert!(h.contains("<p>|not a table|\n| x |</p>"), "{h}");
        // The plain report's opening, one paragraph, is as it was.
        let mut plain = String::new();
        opening(&mut plain, "\n\nScale `quick`, seed 1.");
        assert_eq!(plain, "<p>Scale <code>quick</code>, seed 1.</p>\n");
    }
}
