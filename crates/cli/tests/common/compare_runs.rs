//! What the `mobius compare` tests share: running the binary, its output as text, and wall
//! times masked in report text for tests that compare two runs' reports.

use std::path::Path;
use std::process::Command;

/// `mobius ARGS --out OUT`.
pub fn mobius(args: &[&str], out: &Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_mobius"))
        .args(args)
        .arg("--out")
        .arg(out)
        .output()
        .expect("run mobius")
}

/// Whether python3 has dask.distributed (`.ci/run` installs it; a test without it skips).
#[allow(dead_code)] // the Dask tests' (compare_report includes this module too)
pub fn has_dask() -> bool {
    Command::new("python3")
        .args(["-c", "import dask.distributed"])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Standard output then standard error.
pub fn text(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr)
}

/// A word's trailing number, and what comes before it (`<td>17.8` → `<td>`, `17.8`).
fn number(w: &str) -> Option<(&str, &str)> {
    let start = w
        .trim_end_matches(|c: char| c.is_ascii_digit() || c == '.')
        .len();
    let n = &w[start..];
    n.starts_with(|c: char| c.is_ascii_digit())
        .then(|| (&w[..start], n))
}

/// What follows a unit `s` ending a word (`s.` → `.`), if the word is one.
fn unit(w: &str) -> Option<&str> {
    w.strip_prefix('s')
        .filter(|rest| !rest.starts_with(char::is_alphanumeric))
}

/// The text with every wall time the report prints (`12.3 s`, `3 min 05 s`) replaced by `…`.
pub fn mask_wall_times(text: &str) -> String {
    let words: Vec<&str> = text.split(' ').collect();
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < words.len() {
        let at = |k: usize| words.get(i + k).copied().unwrap_or("");
        if let Some((before, n)) = number(at(0)) {
            if let (true, Some(after)) = (n.contains('.'), unit(at(1))) {
                out.push(format!("{before}…{after}"));
                i += 2;
                continue;
            }
            let whole = |w: &str| !w.is_empty() && w.chars().all(|c| c.is_ascii_digit());
            if let (true, true, Some(after)) = (at(1) == "min", whole(at(2)), unit(at(3))) {
                out.push(format!("{before}…{after}"));
                i += 4;
                continue;
            }
        }
        out.push(words[i].to_string());
        i += 1;
    }
    out.join(" ")
}
