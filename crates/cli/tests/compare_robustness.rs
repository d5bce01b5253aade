//! `mobius compare --robustness` (issue #66): the same cells on one Dask worker and on two give
//! identical numbers; a re-run resumes (runs no finished cell again); every graded sub-claim of
//! results.json carries `robustness: {pass_fraction, flipped_by, points}`; the report shows the
//! robustness column, the table of unknowns and a tornado chart. `.ci/run` installs dask; where
//! it is missing the test says so and skips.

use std::path::Path;

#[path = "common/compare_runs.rs"]
#[allow(dead_code)] // this test uses only the runner
mod compare_runs;
use compare_runs::{mobius, text};

/// A small campaign: txflash-macro (seconds per cell), three parameters, two sampled points.
const CAMPAIGN: [&str; 9] = [
    "compare",
    "--robustness",
    "--only",
    "txflash-macro",
    "--vary",
    "program,host_link,page_size",
    "--samples",
    "2",
    "--workers",
];

/// Every cell record under `out`: its file name → its record (claims with their numbers, what
/// the point made of the page size), its wall and CPU time left out.
fn cells(out: &Path) -> Vec<(String, serde_json::Value)> {
    let mut cells: Vec<(String, serde_json::Value)> =
        std::fs::read_dir(out.join("robustness/cells"))
            .expect("cells")
            .map(|f| {
                let f = f.expect("entry").path();
                let record: serde_json::Value =
                    serde_json::from_str(&std::fs::read_to_string(&f).expect("read"))
                        .expect("json");
                assert!(record["error"].is_null(), "{f:?}: {}", record["error"]);
                let name = f.file_name().unwrap().to_string_lossy().into_owned();
                let mut record = record;
                let o = record.as_object_mut().expect("a record is an object");
                // What the cell measured, not what it took.
                o.remove("wall_s");
                o.remove("cpu_s");
                (name, record)
            })
            .collect();
    cells.sort_by(|a, b| a.0.cmp(&b.0));
    cells
}

#[test]
fn cells_on_one_worker_and_on_two_are_identical_and_every_graded_sub_claim_has_its_robustness() {
    if !compare_runs::has_dask() {
        eprintln!(
            "SKIP compare --robustness: python3 has no dask.distributed (.ci/run installs it)"
        );
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let (one, two) = (dir.path().join("one"), dir.path().join("two"));
    let a = mobius(&[&CAMPAIGN[..], &["1"]].concat(), &one);
    assert!(a.status.success(), "{}", text(&a));
    let b = mobius(&[&CAMPAIGN[..], &["2"]].concat(), &two);
    assert!(b.status.success(), "{}", text(&b));
    let (x, y) = (cells(&one), cells(&two));
    // default + program's two ends + host_link's three choices + page_size's two + two samples
    assert_eq!(
        x.len(),
        10,
        "{:?}",
        x.iter().map(|c| &c.0).collect::<Vec<_>>()
    );
    assert_eq!(x, y, "a cell's numbers differ between one worker and two");
    // A parameter reaches the experiment: doubling the program time moves some number.
    let at = |label: &str| &x.iter().find(|c| c.0.contains(label)).expect(label).1;
    assert_ne!(at(".default.")["claims"], at(".oat-program=2.")["claims"]);
    // The cell at the 8 KB end ran on 8 KB pages (the txflash preset's 4 KB + 128 B, its
    // capacity kept), and its numbers moved; the default cell changed nothing.
    let page = at(".oat-page_size=8k.");
    assert_eq!(
        page["applied"]["page_size"],
        serde_json::json!(["8192 + 256 B pages, 2048 blocks per chip (txflash)"]),
        "{page}"
    );
    assert_ne!(at(".default.")["claims"], page["claims"]);
    assert_eq!(at(".default.")["applied"], serde_json::json!({}));

    // A second run resumes: nothing to run again, the same results.json.
    let c = mobius(&[&CAMPAIGN[..], &["1"]].concat(), &one);
    assert!(c.status.success(), "{}", text(&c));
    assert!(text(&c).contains("already done (resumed)"), "{}", text(&c));
    assert!(!text(&c).contains("compare: cell "), "{}", text(&c));

    let results: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(one.join("results.json")).expect("results.json"),
    )
    .expect("json");
    let claims = results["txflash-macro"]["claims"]
        .as_array()
        .expect("claims");
    let mut graded = 0;
    for c in claims {
        let r = &c["robustness"];
        match c["verdict"].as_str() {
            Some("PASS") | Some("FAIL") => {
                graded += 1;
                assert_eq!(r["points"], 2, "{c}");
                assert!(r["pass_fraction"].is_number(), "{c}");
                assert!(r["flipped_by"].is_array(), "{c}");
                assert_eq!(r["ends"].as_array().map(Vec::len), Some(7), "{c}");
            }
            _ => assert!(r.is_null(), "not graded, no robustness: {c}"),
        }
    }
    assert!(graded > 0);
    assert_eq!(results["robustness"]["cells"], 10);
    let report = std::fs::read_to_string(one.join("report.md")).expect("report.md");
    assert!(
        report.contains("| verdict | across the unknowns |"),
        "{report}"
    );
    assert!(report.contains("### The table of unknowns"));
    assert!(report.contains("### Robustness across the unknowns"));
    assert!(one.join("robustness_txflash-macro.svg").exists());
    // report.html draws the campaign's tables as tables, not as Markdown text.
    let html = std::fs::read_to_string(one.join("report.html")).expect("report.html");
    assert!(!html.contains("|---|"), "a Markdown table left as text");
    assert!(
        html.contains("<th>parameter</th><th>what</th>"),
        "no table of unknowns"
    );
    assert!(
        html.contains("<h3 id=\"the-table-of-unknowns\">"),
        "no heading"
    );
    assert!(html.contains("<th>across the unknowns</th>"));
    // The scoreboard says, per claim, where it holds across the sampled points.
    let rows = results["summary"].as_array().expect("summary");
    let row = rows
        .iter()
        .find_map(|r| r["robustness"].as_str())
        .expect("a claim's robustness in the summary");
    assert!(
        row.starts_with("PASS, ") || row.starts_with("FAIL, "),
        "{row}"
    );
    assert!(row.contains("of 2 sampled points"), "{row}");
}

#[test]
fn a_bad_point_is_a_clear_error() {
    let dir = tempfile::tempdir().expect("temp dir");
    for (spec, says) in [
        ("progam=2", "unknown parameter 'progam'"),
        ("program=9", "outside"),
        ("page_size=16k", "one of preset, 4k, 8k"),
    ] {
        let o = mobius(
            &["compare", "--only", "txflash-macro", "--unknowns", spec],
            dir.path(),
        );
        assert!(!o.status.success(), "{spec} accepted");
        assert!(text(&o).contains(says), "{spec}: {}", text(&o));
    }
}
