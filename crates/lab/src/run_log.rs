//! A long campaign's log of finished runs, so a campaign of hours can be resumed.
//!
//! At the paper scale the NVMFS experiment runs for hours on a 2-core machine (nilfs2 in a
//! software-emulated appliance writes ~1 MB/s), longer than one sitting. Every run that finishes
//! is appended to a JSON-lines file as `{"key": ..., "run": ...}`. A later invocation asked to
//! resume reuses a logged run whose key is its own: the run's own key (which file system and
//! workload, say), the campaign's settings (device, design, seed, ...) and the running `mobius`
//! binary (its size and modification time), so a rebuilt binary measures afresh. What a caller
//! does not record (a run skipped for a missing tool) is retried. A line that does not parse (the
//! run killed while writing it) is ignored and counted.

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Value};
use std::io::Write;
use std::path::{Path, PathBuf};

/// The log file and the runs it held when opened.
pub struct RunLog<R> {
    path: PathBuf,
    settings: Value,
    logged: Vec<(Value, R)>,
    /// Lines of the file that did not parse as an entry.
    pub unreadable_lines: u64,
    /// Runs handed back by [`reuse`](Self::reuse).
    pub reused: u64,
}

#[derive(serde::Deserialize)]
struct Entry<R> {
    key: Value,
    run: R,
}

impl<R: Serialize + DeserializeOwned + Clone> RunLog<R> {
    /// Opens the log at `path` for a campaign with `settings` (everything besides a run's own
    /// key that its result depends on): with `resume`, keeps the runs already in it; without,
    /// starts it empty.
    pub fn open(path: &Path, settings: Value, resume: bool) -> std::io::Result<RunLog<R>> {
        let mut log = RunLog {
            path: path.to_path_buf(),
            settings: json!({ "campaign": settings, "binary": binary_fingerprint() }),
            logged: Vec::new(),
            unreadable_lines: 0,
            reused: 0,
        };
        match (resume, std::fs::read_to_string(path)) {
            (true, Ok(text)) => log.read_entries(&text),
            (true, Err(e)) if e.kind() == std::io::ErrorKind::NotFound => {}
            (true, Err(e)) => return Err(e),
            (false, _) => std::fs::write(path, "")?,
        }
        Ok(log)
    }

    fn read_entries(&mut self, text: &str) {
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            match serde_json::from_str::<Entry<R>>(line) {
                Ok(e) => self.logged.push((e.key, e.run)),
                Err(_) => self.unreadable_lines += 1,
            }
        }
    }

    fn key(&self, run_key: &Value) -> Value {
        json!({ "run": run_key, "settings": self.settings })
    }

    /// The logged run with key `run_key` under these settings, if there is one.
    pub fn reuse(&mut self, run_key: &Value) -> Option<R> {
        let key = self.key(run_key);
        let run = self.logged.iter().rev().find(|(k, _)| *k == key)?.1.clone();
        self.reused += 1;
        Some(run)
    }

    /// Appends a finished run under `run_key`.
    pub fn record(&mut self, run_key: &Value, run: &R) -> std::io::Result<()> {
        let key = self.key(run_key);
        let entry = json!({ "key": key, "run": run });
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(&self.path)?;
        writeln!(file, "{entry}")?;
        self.logged.push((key, run.clone()));
        Ok(())
    }
}

/// The running binary's size and modification time: a rebuilt `mobius` does not reuse runs.
fn binary_fingerprint() -> Value {
    let meta = std::env::current_exe().and_then(std::fs::metadata);
    match meta {
        Ok(m) => {
            let modified = m
                .modified()
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map(|d| d.as_nanos().to_string());
            json!({ "bytes": m.len(), "modified_ns": modified })
        }
        Err(e) => json!({ "unknown": e.to_string() }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    struct Run {
        pages: u64,
    }

    fn key(fs: &str, workload: &str) -> Value {
        json!({ "fs": fs, "workload": workload })
    }

    /// A resumed log hands back what was logged for the same settings and key, and nothing
    /// for other settings, another key or a log opened without resuming; a torn last line is
    /// counted, not fatal.
    #[test]
    fn a_resumed_log_reuses_only_its_own_runs() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("runs.jsonl");
        let settings = json!({ "seed": 7 });
        let mut log = RunLog::open(&path, settings.clone(), false).unwrap();
        log.record(&key("ext4", "w0"), &Run { pages: 123 }).unwrap();
        let mut text = std::fs::read_to_string(&path).unwrap();
        text.push_str("{\"key\": {\"fs\": \"xf");
        std::fs::write(&path, text).unwrap();

        let mut again: RunLog<Run> = RunLog::open(&path, settings.clone(), true).unwrap();
        assert_eq!(again.unreadable_lines, 1);
        assert_eq!(again.reuse(&key("ext4", "w0")), Some(Run { pages: 123 }));
        assert!(again.reuse(&key("ext4", "w1")).is_none(), "another key");
        assert!(again.reuse(&key("btrfs", "w0")).is_none(), "never logged");
        assert_eq!(again.reused, 1);
        let mut other: RunLog<Run> = RunLog::open(&path, json!({ "seed": 8 }), true).unwrap();
        assert!(other.reuse(&key("ext4", "w0")).is_none(), "other settings");
        let mut fresh: RunLog<Run> = RunLog::open(&path, settings, false).unwrap();
        assert!(fresh.reuse(&key("ext4", "w0")).is_none(), "not resuming");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "");
    }
}
