//! Tornado charts of the robustness campaign ([`crate::robustness`]): per experiment, one panel
//! per graded sub-claim, one row per parameter, the measured number at each end of the
//! parameter's range against the number at the defaults and the paper's tolerance band.
//! Plain SVG text, deterministic.

use crate::claims::Verdict;
use crate::number::fmt;
use crate::robustness::Robustness;
use std::fmt::Write;

const WIDTH: f64 = 760.0;
const LABEL: f64 = 190.0;
const PLOT: f64 = 500.0;
const ROW: f64 = 16.0;
/// Panels per chart: those with flips first, then the widest swings.
const MAX_PANELS: usize = 8;
/// Colours of the ends: low, high, other choices.
const END_COLOURS: [&str; 3] = ["#1f77b4", "#ff7f0e", "#7f7f7f"];

/// One panel: a sub-claim, its number at the defaults, its tolerance and its robustness.
pub struct Panel<'a> {
    pub claim: &'a str,
    pub measured: f64,
    /// `tolerance_spec` of results.json (`{kind, min, max, bound, target, rel}`).
    pub tolerance: &'a serde_json::Value,
    pub robustness: &'a Robustness,
}

/// The interval a tolerance accepts (open ends infinite).
fn band(t: &serde_json::Value) -> Option<(f64, f64)> {
    let f = |k: &str| t[k].as_f64();
    Some(match t["kind"].as_str()? {
        "at-least" => (f("min")?, f64::INFINITY),
        "at-most" => (f64::NEG_INFINITY, f("max")?),
        "below" => (f64::NEG_INFINITY, f("bound")?),
        "between" => (f("min")?, f("max")?),
        "within" => {
            let (t, r) = (f("target")?, f("rel")?);
            (t * (1.0 - r), t * (1.0 + r))
        }
        _ => return None,
    })
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn swing(p: &Panel) -> f64 {
    let vs: Vec<f64> = p
        .robustness
        .ends
        .iter()
        .filter_map(|e| e.measured)
        .collect();
    let (lo, hi) = vs
        .iter()
        .fold((p.measured, p.measured), |(a, b), v| (a.min(*v), b.max(*v)));
    (hi - lo) / p.measured.abs().max(1e-12)
}

/// The chart of `panels` (at most [`MAX_PANELS`], flips first, then widest swings); `None`
/// when no panel has a measured end.
pub fn svg(title: &str, mut panels: Vec<Panel>) -> Option<String> {
    // A panel where no end moves the number has nothing to draw (the robustness table says so).
    panels.retain(|p| {
        let moved = |e: &crate::robustness::End| e.measured.is_some_and(|v| v != p.measured);
        p.measured.is_finite() && p.robustness.ends.iter().any(moved)
    });
    if panels.is_empty() {
        return None;
    }
    panels.sort_by(|a, b| {
        let flips = |p: &Panel| p.robustness.flipped_by.len();
        flips(b).cmp(&flips(a)).then(swing(b).total_cmp(&swing(a)))
    });
    panels.truncate(MAX_PANELS);
    let mut body = String::new();
    let mut y = 34.0;
    for p in &panels {
        y = panel(&mut body, p, y);
    }
    let mut s = String::new();
    let _ = write!(
        s,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{}\" viewBox=\"0 0 {WIDTH} {}\" font-family=\"sans-serif\" font-size=\"11\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n<text x=\"8\" y=\"20\" font-size=\"14\">{}</text>\n{body}</svg>\n",
        y + 8.0,
        y + 8.0,
        escape(title)
    );
    Some(s)
}

/// Draws one panel from `y` down; returns where the next starts.
fn panel(s: &mut String, p: &Panel, y: f64) -> f64 {
    let r = p.robustness;
    let tol = band(p.tolerance);
    let mut lo = p.measured;
    let mut hi = p.measured;
    for v in r.ends.iter().filter_map(|e| e.measured) {
        (lo, hi) = (lo.min(v), hi.max(v));
    }
    for v in tol
        .iter()
        .flat_map(|(a, b)| [*a, *b])
        .filter(|v| v.is_finite())
    {
        (lo, hi) = (lo.min(v), hi.max(v));
    }
    let pad = ((hi - lo) * 0.08).max(hi.abs().max(1e-9) * 0.02);
    let (lo, hi) = (lo - pad, hi + pad);
    let x = |v: f64| LABEL + (v.clamp(lo, hi) - lo) / (hi - lo) * PLOT;
    let claim: String = p.claim.chars().take(110).collect();
    let _ = writeln!(
        s,
        "<text x=\"8\" y=\"{}\" font-weight=\"bold\">{}</text>",
        y + 10.0,
        escape(&claim)
    );
    // Parameters in order of first appearance, each with its ends.
    let mut names: Vec<&str> = Vec::new();
    for e in &r.ends {
        if !names.contains(&e.parameter.as_str()) {
            names.push(&e.parameter);
        }
    }
    let top = y + 16.0;
    let height = names.len() as f64 * ROW;
    if let Some((a, b)) = tol {
        let _ = writeln!(s, "<rect x=\"{:.1}\" y=\"{top:.1}\" width=\"{:.1}\" height=\"{height:.1}\" fill=\"#2ca02c\" fill-opacity=\"0.15\"/>", x(a), x(b) - x(a));
    }
    let base = x(p.measured);
    for (row, name) in names.iter().enumerate() {
        let ry = top + row as f64 * ROW;
        let _ = writeln!(
            s,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            LABEL - 6.0,
            ry + 11.0,
            escape(name)
        );
        let ends: Vec<_> = r.ends.iter().filter(|e| e.parameter == *name).collect();
        let choice = ends
            .iter()
            .any(|e| e.value.starts_with('=') && e.value[2..].parse::<f64>().is_err());
        for (k, e) in ends.iter().enumerate() {
            let Some(v) = e.measured else { continue };
            let colour = if choice {
                END_COLOURS[2]
            } else {
                END_COLOURS[k.min(1)]
            };
            let flipped = r.flipped_by.contains(e);
            let (a, b) = (base.min(x(v)), base.max(x(v)));
            let stroke = if flipped {
                " stroke=\"#d62728\" stroke-width=\"2\""
            } else {
                ""
            };
            let _ = writeln!(s, "<rect x=\"{a:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{colour}\" fill-opacity=\"0.8\"{stroke}><title>{} {}: {} ({})</title></rect>", ry + 2.0, (b - a).max(1.0), ROW - 4.0, escape(name), escape(&e.value), fmt(v), verdict_word(e.verdict));
            if b - a < 1.5 {
                continue; // no swing: no label over the line
            }
            let (dx, anchor) = match x(v) >= base {
                true => (3.0, "start"),
                false => (-3.0, "end"),
            };
            let _ = writeln!(
                s,
                "<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"9\" fill=\"#333\" text-anchor=\"{anchor}\">{}</text>",
                x(v) + dx,
                ry + 11.0,
                escape(&e.value)
            );
        }
    }
    let _ = writeln!(
        s,
        "<line x1=\"{base:.1}\" y1=\"{top:.1}\" x2=\"{base:.1}\" y2=\"{:.1}\" stroke=\"black\"/>",
        top + height
    );
    let axis = top + height + 12.0;
    let apart = |v: f64| (x(v) - x(lo + pad)).abs() > 45.0 && (x(hi - pad) - x(v)).abs() > 45.0;
    let mut ticks = vec![(lo + pad, "start"), (hi - pad, "end")];
    if apart(p.measured) {
        ticks.push((p.measured, "middle"));
    }
    for (v, anchor) in ticks {
        let _ = writeln!(
            s,
            "<text x=\"{:.1}\" y=\"{axis:.1}\" font-size=\"9\" text-anchor=\"{anchor}\">{}</text>",
            x(v),
            fmt(v)
        );
    }
    axis + 14.0
}

fn verdict_word(v: Verdict) -> &'static str {
    match v {
        Verdict::Pass => "PASS",
        Verdict::Fail => "FAIL",
        Verdict::NotReproduced => "NOT-REPRODUCED",
        Verdict::ByConstruction => "by construction",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::robustness::End;

    #[test]
    fn a_tornado_draws_each_end_the_tolerance_band_and_outlines_a_flip() {
        let end = |p: &str, v: &str, m: f64, verdict| End {
            parameter: p.into(),
            value: v.into(),
            measured: Some(m),
            verdict,
        };
        let flip = end("clients", "= 1", 1.1, Verdict::Fail);
        let r = Robustness {
            pass_fraction: Some(0.75),
            flipped_by: vec![flip.clone()],
            points: 4,
            ends: vec![
                flip,
                end("clients", "= 32", 2.5, Verdict::Pass),
                end("host_link", "= none", 1.7, Verdict::Pass),
            ],
        };
        let tol = serde_json::json!({"kind": "at-least", "min": 1.3});
        let svg = svg(
            "macro",
            vec![Panel {
                claim: "A-SWRITE / Atomic-Write TPS",
                measured: 1.6,
                tolerance: &tol,
                robustness: &r,
            }],
        )
        .unwrap();
        assert!(svg.starts_with("<svg"));
        assert_eq!(svg.matches("<title>").count(), 3);
        assert_eq!(svg.matches("stroke=\"#d62728\"").count(), 1);
        assert!(svg.contains("fill=\"#2ca02c\""), "tolerance band");
        assert!(svg.contains(">clients<") && svg.contains(">host_link<"));
        let empty = Robustness {
            ends: Vec::new(),
            flipped_by: Vec::new(),
            ..r
        };
        let none = Panel {
            claim: "x",
            measured: 1.0,
            tolerance: &tol,
            robustness: &empty,
        };
        assert!(super::svg("t", vec![none]).is_none());
    }
}
