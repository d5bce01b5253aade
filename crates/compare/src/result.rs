//! What an experiment produces: its tables, figures, claims and measured data, and its entry in
//! results.json.

use crate::claims::Claim;
use serde::Serialize;

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
