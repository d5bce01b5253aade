//! `mobius compare`'s report (issue #67): experiments run as parallel tasks give the serial
//! run's results (results.json the same but for wall times), the report opens with the
//! scoreboard, and report.html opens in headless Chromium from disk without a load or an error,
//! every figure shown.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[path = "common/compare_runs.rs"]
mod compare_runs;
use compare_runs::{mask_wall_times, mobius, text};

/// Keys of wall-clock figures, as tools/identity-check's WALL_CLOCK drops them.
const WALL_CLOCK: [&str; 5] = [
    "wall_s",
    "wall_seconds",
    "wall_ms",
    "elapsed_s",
    "crash_points_per_s",
];

/// results.json without its wall-clock fields ([`WALL_CLOCK`], at any depth).
fn results_without_wall_times(dir: &Path) -> serde_json::Value {
    fn strip(v: &mut serde_json::Value) {
        match v {
            serde_json::Value::Object(m) => {
                m.retain(|k, _| !WALL_CLOCK.contains(&k.as_str()));
                m.values_mut().for_each(strip);
            }
            serde_json::Value::Array(a) => a.iter_mut().for_each(strip),
            _ => {}
        }
    }
    let text = std::fs::read_to_string(dir.join("results.json")).expect("results.json");
    let mut v: serde_json::Value = serde_json::from_str(&text).expect("results.json parses");
    strip(&mut v);
    v
}

#[test]
fn wall_times_are_masked_and_nothing_else() {
    assert_eq!(
        mask_wall_times("Wall time 17.8 s. | 3 min 05 s |"),
        "Wall time …. | … |"
    );
    assert_eq!(
        mask_wall_times("for 10 s per bar, 2 s"),
        "for 10 s per bar, 2 s"
    );
    assert_eq!(mask_wall_times("<td>3 min 05 s</td>"), "<td>…</td>");
}

/// Three experiments, one of them on SQLite (a VFS registered per run), serially and as tasks
/// on two cores: the same results.json but for the wall times, the same report.md and
/// report.html but for them.
#[test]
fn experiments_as_parallel_tasks_give_the_serial_results() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (serial, parallel) = (dir.path().join("serial"), dir.path().join("parallel"));
    let only = [
        "compare",
        "--only",
        "commit",
        "--only",
        "txflash-macro",
        "--only",
        "sqlite",
    ];
    let a = mobius(&[&only[..], &["--jobs", "1"]].concat(), &serial);
    assert!(a.status.success(), "{}", text(&a));
    let b = mobius(&[&only[..], &["--jobs", "2"]].concat(), &parallel);
    assert!(b.status.success(), "{}", text(&b));
    assert!(text(&b).contains("as tasks on 2 core(s)"), "{}", text(&b));
    let (one, two) = (
        results_without_wall_times(&serial),
        results_without_wall_times(&parallel),
    );
    assert!(
        one == two,
        "results.json differs between --jobs 1 and --jobs 2"
    );
    assert!(one["summary"].as_array().is_some_and(|s| !s.is_empty()));
    for name in ["report.md", "report.html"] {
        let read = |d: &PathBuf| mask_wall_times(&std::fs::read_to_string(d.join(name)).unwrap());
        assert!(read(&serial) == read(&parallel), "{name} differs");
    }
    // The time each experiment took is in results.json and in the report.
    for id in ["commit", "txflash-macro", "sqlite"] {
        let ran = &serde_json::from_str::<serde_json::Value>(
            &std::fs::read_to_string(parallel.join("results.json")).unwrap(),
        )
        .unwrap()[id]["ran"];
        assert!(
            ran["wall_s"].as_f64().is_some_and(|s| s > 0.0),
            "{id}: {ran}"
        );
        assert_eq!(ran["scale"], "quick");
        assert_eq!(
            ran["rest"],
            format!("mobius compare --only {id} --scale paper")
        );
    }
    let md = std::fs::read_to_string(parallel.join("report.md")).unwrap();
    let first_section = md.find("\n## ").expect("a section");
    assert!(md[first_section..].starts_with("\n## Scoreboard\n"), "{md}");
    assert!(md.contains("Wall time "), "{md}");
}

/// Where Chromium is, installing Debian's `chromium` if it is missing (as `.ci/setup` does);
/// `None` when it is absent and cannot be installed.
fn chromium() -> Option<PathBuf> {
    let find = || {
        ["chromium", "chromium-browser"].iter().find_map(|name| {
            let out = Command::new("sh")
                .args(["-c", &format!("command -v {name}")])
                .output()
                .ok()?;
            let path = String::from_utf8_lossy(&out.stdout).trim().to_string();
            (out.status.success() && !path.is_empty()).then(|| PathBuf::from(path))
        })
    };
    if let Some(p) = find() {
        return Some(p);
    }
    let installed = Command::new("apt-get")
        .args(["install", "-y", "-qq", "chromium"])
        .env("DEBIAN_FRONTEND", "noninteractive")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    installed.then(find).flatten()
}

/// What the page shows, measured in the browser by a page that frames it.
#[derive(Debug, serde::Deserialize)]
struct Shown {
    title: String,
    /// Every `<figure>`: its id and its drawing's size on the page.
    figures: Vec<(String, f64, f64)>,
    /// Everything the page loaded (nothing: it is self-contained).
    resources: Vec<String>,
    first_table: String,
    scoreboard_rows: usize,
    /// The browser's console lines about the page (a blocked load, an error).
    #[serde(skip)]
    console: Vec<String>,
}

const FRAMING_PAGE: &str = r#"<!DOCTYPE html><html><body><pre id="out">pending</pre>
<iframe id="r" src="PAGE" style="width:1280px;height:900px"></iframe>
<script>
const frame = document.getElementById('r');
frame.onload = () => {
  const d = frame.contentDocument, w = frame.contentWindow;
  const figures = [...d.querySelectorAll('figure')].map(f => {
    const s = f.querySelector('svg');
    const b = s ? s.getBoundingClientRect() : {width: 0, height: 0};
    return [f.id, b.width, b.height];
  });
  const resources = w.performance.getEntriesByType('resource').map(e => e.name);
  const first = d.querySelector('table');
  document.getElementById('out').textContent = 'SHOWN ' + JSON.stringify({
    title: d.title, figures, resources, first_table: first ? first.id : '',
    scoreboard_rows: d.querySelectorAll('#scoreboard-table tr').length - 1});
};
</script></body></html>"#;

/// Opens `page` (a file in `dir`) in headless Chromium, from disk, in a frame of a page that
/// measures what it shows; a new empty profile, no network services.
fn open_in_chromium(browser: &Path, dir: &Path, page: &str) -> Shown {
    let framing = dir.join(format!("framing-{page}"));
    std::fs::write(&framing, FRAMING_PAGE.replace("PAGE", page)).expect("framing page");
    let profile = tempfile::tempdir().expect("profile dir");
    let mut child = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--allow-file-access-from-files",
            "--enable-logging=stderr",
            "--v=0",
            "--virtual-time-budget=10000",
            "--dump-dom",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(format!("file://{}", framing.display()))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start chromium");
    let start = Instant::now();
    while child.try_wait().expect("wait").is_none() {
        if start.elapsed() > Duration::from_secs(180) {
            let _ = child.kill();
            panic!("chromium did not finish in 180 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = child.wait_with_output().expect("chromium output");
    let dom = String::from_utf8_lossy(&out.stdout);
    let json = dom
        .split("SHOWN ")
        .nth(1)
        .and_then(|s| s.split("</pre>").next())
        .unwrap_or_else(|| panic!("no measurement in the DOM: {dom}\n{}", text(&out)));
    let json = json
        .replace("&amp;", "&")
        .replace("&lt;", "<")
        .replace("&gt;", ">");
    let mut shown: Shown = serde_json::from_str(&json).expect("measurement parses");
    shown.console = String::from_utf8_lossy(&out.stderr)
        .lines()
        .filter(|l| l.contains("CONSOLE") && l.contains(page))
        .map(str::to_string)
        .collect();
    shown
}

/// What is wrong with what the browser showed of a report whose results.json is `results`.
fn faults(shown: &Shown, results: &serde_json::Value) -> Vec<String> {
    let mut faults = Vec::new();
    if !shown.resources.is_empty() {
        faults.push(format!("the page loaded {:?}", shown.resources));
    }
    faults.extend(shown.console.iter().map(|l| format!("console: {l}")));
    let figures: Vec<String> = results
        .as_object()
        .into_iter()
        .flatten()
        .flat_map(|(_, e)| e["figures"].as_array().cloned().unwrap_or_default())
        .filter_map(|f| f["file"].as_str().map(compare::html::figure_id))
        .collect();
    for id in &figures {
        match shown.figures.iter().find(|(f, ..)| f == id) {
            None => faults.push(format!("figure {id} is not on the page")),
            Some((_, w, h)) if *w < 100.0 || *h < 100.0 => {
                faults.push(format!("figure {id} is drawn {w} × {h}"))
            }
            Some(_) => {}
        }
    }
    if shown.figures.len() != figures.len() {
        faults.push(format!(
            "{} figures on the page, {} in results.json",
            shown.figures.len(),
            figures.len()
        ));
    }
    if shown.first_table != "scoreboard-table" {
        faults.push(format!(
            "the first table is '{}', not the scoreboard",
            shown.first_table
        ));
    }
    let summary = results["summary"].as_array().map_or(0, |s| s.len());
    if shown.scoreboard_rows != summary || summary == 0 {
        faults.push(format!(
            "{} scoreboard rows, {summary} in results.json's summary",
            shown.scoreboard_rows
        ));
    }
    faults
}

#[test]
fn the_html_report_opens_in_headless_chromium_and_shows_every_figure() {
    let Some(browser) = chromium() else {
        eprintln!("SKIP report.html in Chromium: chromium is not installed and `apt-get install chromium` failed (.ci/setup installs it)");
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let out = dir.path().join("compare");
    // Line charts (commit) and a bar chart (txflash-macro).
    let o = mobius(
        &["compare", "--only", "commit", "--only", "txflash-macro"],
        &out,
    );
    assert!(o.status.success(), "{}", text(&o));
    let results: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    let shown = open_in_chromium(&browser, &out, "report.html");
    assert!(shown.title.starts_with("mobius compare"), "{shown:?}");
    assert_eq!(shown.figures.len(), 4, "{shown:?}");
    let found = faults(&shown, &results);
    assert!(found.is_empty(), "{found:#?}\n{shown:?}");

    // The check can fail: the page with a load from the network and a figure drawn empty.
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    let broken = html
        .replacen("<h1>", "<img src=\"http://example.invalid/x.png\"><h1>", 1)
        .replacen(
            "<svg width=\"640\" height=\"400\"",
            "<svg width=\"0\" height=\"0\"",
            1,
        );
    std::fs::write(out.join("broken.html"), broken).unwrap();
    let shown = open_in_chromium(&browser, &out, "broken.html");
    let found = faults(&shown, &results);
    assert!(found.iter().any(|f| f.contains("loaded")), "{found:#?}");
    assert!(found.iter().any(|f| f.contains("console")), "{found:#?}");
    assert!(found.iter().any(|f| f.contains("is drawn")), "{found:#?}");
}
