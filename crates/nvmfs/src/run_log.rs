//! The experiment's log of finished runs, so a campaign of hours can be resumed.
//!
//! At the paper scale the NVMFS experiment runs for hours on a 2-core machine (nilfs2 in a
//! software-emulated appliance writes ~1 MB/s), longer than one sitting. Every run that finishes
//! — completed, or stopped part-way by its file system, which is a result too — is appended to a
//! JSON-lines file as `{"key": ..., "run": ...}`. A later invocation asked to resume reuses a
//! logged run whose key is its own: the same file system and workload, the same settings (device,
//! design, NVRAM, DRAM budget, seed, service clock, erase study) and the same `mobius` binary
//! (its size and modification time), so a rebuilt binary measures afresh. Skipped runs (a tool
//! missing) are not logged: they are retried. A line that does not parse (the run killed while
//! writing it) is ignored and counted.

use crate::experiment::{FsRun, Options, Workload};
use serde_json::{json, Value};
use std::io::Write;
use std::path::{Path, PathBuf};

/// The log file and the runs it held when opened.
pub struct RunLog {
    path: PathBuf,
    settings: Value,
    logged: Vec<(Value, FsRun)>,
    /// Lines of the file that did not parse as an entry.
    pub unreadable_lines: u64,
    /// Runs handed back by [`reuse`](Self::reuse).
    pub reused: u64,
}

#[derive(serde::Deserialize)]
struct Entry {
    key: Value,
    run: FsRun,
}

impl RunLog {
    /// Opens the log at `path` for `opts`: with `resume`, keeps the runs already in it; without,
    /// starts it empty.
    pub fn open(path: &Path, opts: &Options, resume: bool) -> std::io::Result<RunLog> {
        let mut log = RunLog {
            path: path.to_path_buf(),
            settings: settings(opts),
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
            match serde_json::from_str::<Entry>(line) {
                Ok(e) => self.logged.push((e.key, e.run)),
                Err(_) => self.unreadable_lines += 1,
            }
        }
    }

    fn key(&self, fs: &str, workload: &Workload) -> Value {
        json!({ "fs": fs, "workload": workload, "settings": self.settings })
    }

    /// The logged run of `fs` under `workload` with these settings, if there is one.
    pub fn reuse(&mut self, fs: &str, workload: &Workload) -> Option<FsRun> {
        let key = self.key(fs, workload);
        let run = self.logged.iter().rev().find(|(k, _)| *k == key)?.1.clone();
        self.reused += 1;
        Some(run)
    }

    /// Appends a finished run (a skipped one is not logged: it is retried).
    pub fn record(&mut self, workload: &Workload, run: &FsRun) -> std::io::Result<()> {
        if run.skipped.is_some() {
            return Ok(());
        }
        let key = self.key(&run.fs, workload);
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

/// Everything besides the file system and workload that a run's result depends on.
fn settings(opts: &Options) -> Value {
    json!({
        "device": opts.config,
        "design": opts.design.name,
        "nvram_bytes": opts.nvram_bytes,
        "page_cache_budget": opts.page_cache_budget,
        "seed": opts.seed,
        "service_queue_depth": opts.service_queue_depth,
        "erase_study": opts.erase_study.as_ref().map(|d| d.name),
        "binary": binary_fingerprint(),
    })
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

    fn opts(seed: u64) -> Options {
        let design = dftl::spec();
        let mut o = Options::standard(false, design, std::env::temp_dir());
        o.seed = seed;
        o
    }

    fn run(fs: &str, pages: u64, skipped: bool) -> FsRun {
        let mut r = FsRun::blank(fs, "iozone-randwrite");
        r.ssd_pages_written = pages;
        r.skipped = skipped.then(|| "nbdfuse is not installed".to_string());
        r
    }

    /// A resumed log hands back what was logged for the same settings, file system and
    /// workload, and nothing for another seed, another workload, a skipped run or a log opened
    /// without resuming; a torn last line is counted, not fatal.
    #[test]
    fn a_resumed_log_reuses_only_its_own_runs() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("runs.jsonl");
        let o = opts(7);
        let (w0, w1) = (o.workloads[0].clone(), o.workloads[1].clone());
        let mut log = RunLog::open(&path, &o, false).unwrap();
        log.record(&w0, &run("ext4", 123, false)).unwrap();
        log.record(&w0, &run("btrfs", 9, true)).unwrap();
        let mut text = std::fs::read_to_string(&path).unwrap();
        text.push_str("{\"key\": {\"fs\": \"xf");
        std::fs::write(&path, text).unwrap();

        let mut again = RunLog::open(&path, &o, true).unwrap();
        assert_eq!(again.unreadable_lines, 1);
        assert_eq!(again.reuse("ext4", &w0).unwrap().ssd_pages_written, 123);
        assert!(again.reuse("ext4", &w1).is_none(), "another workload");
        assert!(
            again.reuse("btrfs", &w0).is_none(),
            "a skipped run is retried"
        );
        assert_eq!(again.reused, 1);
        let mut other_seed = RunLog::open(&path, &opts(8), true).unwrap();
        assert!(other_seed.reuse("ext4", &w0).is_none(), "another seed");
        let mut fresh = RunLog::open(&path, &o, false).unwrap();
        assert!(
            fresh.reuse("ext4", &w0).is_none(),
            "not resuming starts afresh"
        );
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "");
    }
}
