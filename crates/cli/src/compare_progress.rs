//! `mobius compare`'s progress: on a terminal a live display (the run's elapsed time and
//! experiments done, one bar per running experiment: run i of n, elapsed, estimate left);
//! otherwise plain lines on standard error (each experiment's start and end, its progress at
//! most every [`PLAIN_EVERY`], and a line naming what is running whenever nothing else was
//! printed for that long), so a log shows the run moving from its first second.

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::sync::mpsc;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How often plain lines report a running experiment.
pub const PLAIN_EVERY: Duration = Duration::from_secs(15);

/// An experiment's progress: (runs done, runs in all), when it started, when it first reported
/// a run done (and how many), when last printed.
#[derive(Clone, Copy)]
struct Running {
    done: u64,
    total: u64,
    started: Instant,
    first: Option<(Instant, u64)>,
    printed: Instant,
}

/// The live display, or plain lines.
pub struct Progress {
    start: Instant,
    experiments: u64,
    live: Option<Live>,
    running: Mutex<BTreeMap<String, Running>>,
    finished: Mutex<u64>,
    /// When the last plain line was printed.
    last_line: Mutex<Instant>,
}

struct Live {
    multi: MultiProgress,
    overall: ProgressBar,
    bars: Mutex<BTreeMap<String, ProgressBar>>,
}

impl Progress {
    /// For `experiments` experiments; live when standard error is a terminal.
    pub fn new(experiments: u64) -> Progress {
        Progress::with(experiments, std::io::stderr().is_terminal())
    }

    fn with(experiments: u64, terminal: bool) -> Progress {
        let now = Instant::now();
        Progress {
            start: now,
            experiments,
            live: terminal.then(|| Live::new(experiments)),
            running: Mutex::new(BTreeMap::new()),
            finished: Mutex::new(0),
            last_line: Mutex::new(now),
        }
    }

    /// A line above the live display, or a plain line.
    pub fn line(&self, text: &str) {
        match &self.live {
            Some(l) => {
                let _ = l.multi.println(text);
            }
            None => {
                eprintln!("{text}");
                *lock(&self.last_line) = Instant::now();
            }
        }
    }

    fn clock(&self) -> String {
        clock(self.start.elapsed())
    }

    /// Time since the run began.
    pub fn elapsed(&self) -> Duration {
        self.start.elapsed()
    }

    /// The experiment `id` started.
    pub fn started(&self, id: &str) {
        let now = Instant::now();
        lock(&self.running).insert(
            id.to_string(),
            Running {
                done: 0,
                total: 0,
                started: now,
                first: None,
                printed: now,
            },
        );
        match &self.live {
            Some(l) => l.add(id),
            None => self.line(&format!("compare [{}] {id}: started", self.clock())),
        }
    }

    /// `id` has done `done` of its `total` runs.
    pub fn advanced(&self, id: &str, done: u64, total: u64) {
        if let Some(l) = &self.live {
            l.set(id, done, total);
        }
        let mut running = lock(&self.running);
        let Some(r) = running.get_mut(id) else {
            return;
        };
        (r.done, r.total) = (done, total);
        if r.first.is_none() && done > 0 {
            r.first = Some((Instant::now(), done));
        }
        if self.live.is_none() && r.printed.elapsed() >= PLAIN_EVERY && done < total {
            r.printed = Instant::now();
            let text = format!("compare [{}] {id}: {}", self.clock(), status(r));
            drop(running);
            self.line(&text);
        }
    }

    /// `id` ended after `wall_s` seconds with `verdicts` for its sub-claims.
    pub fn finished(&self, id: &str, wall_s: f64, verdicts: &str) {
        lock(&self.running).remove(id);
        let n = {
            let mut f = lock(&self.finished);
            *f += 1;
            *f
        };
        if let Some(l) = &self.live {
            l.remove(id, n);
        }
        self.line(&format!(
            "compare [{}] {id}: done in {} ({n} of {} experiments){verdicts}",
            self.clock(),
            compare::result::wall_time(wall_s),
            self.experiments
        ));
    }

    /// Plain lines only: whenever nothing was printed for [`PLAIN_EVERY`], a line naming what
    /// runs and how far it is, until `stop` says so (or is dropped).
    pub fn heartbeat(&self, stop: mpsc::Receiver<()>) {
        if self.live.is_some() {
            return;
        }
        while let Err(mpsc::RecvTimeoutError::Timeout) = stop.recv_timeout(Duration::from_secs(1)) {
            if lock(&self.last_line).elapsed() < PLAIN_EVERY {
                continue;
            }
            let running: Vec<String> = lock(&self.running)
                .iter()
                .map(|(id, r)| format!("{id} {}", status(r)))
                .collect();
            if !running.is_empty() {
                self.line(&format!(
                    "compare [{}] running: {}",
                    self.clock(),
                    running.join("; ")
                ));
            }
        }
    }

    /// Ends the live display.
    pub fn done(&self) {
        if let Some(l) = &self.live {
            l.overall.finish_and_clear();
        }
    }
}

/// `run 3/12, 0:25 elapsed, ~1:05 left`: the estimate from the pace since the first report of a
/// run done (not from the start: an experiment's runs may wait a while for a core).
fn status(r: &Running) -> String {
    let mut s = String::new();
    if r.total > 0 {
        s += &format!("run {}/{}, ", r.done, r.total);
    }
    s += &format!("{} elapsed", clock(r.started.elapsed()));
    if let Some((at, first)) = r
        .first
        .filter(|(_, first)| r.done > *first && r.total > r.done)
    {
        let pace = at.elapsed().div_f64((r.done - first) as f64);
        s += &format!(", ~{} left", clock(pace.mul_f64((r.total - r.done) as f64)));
    }
    s
}

/// `m:ss`.
fn clock(d: Duration) -> String {
    let s = d.as_secs();
    format!("{}:{:02}", s / 60, s % 60)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Live {
    fn new(experiments: u64) -> Live {
        let multi = MultiProgress::with_draw_target(ProgressDrawTarget::stderr());
        let overall = multi.add(ProgressBar::new(experiments));
        overall.set_style(
            ProgressStyle::with_template(
                "compare {elapsed_precise} [{bar:30}] {pos}/{len} experiments done",
            )
            .expect("static template")
            .progress_chars("=> "),
        );
        overall.enable_steady_tick(Duration::from_secs(1));
        Live {
            multi,
            overall,
            bars: Mutex::new(BTreeMap::new()),
        }
    }

    fn add(&self, id: &str) {
        let bar = self.multi.add(ProgressBar::new(0));
        // Until the experiment says how many runs it has.
        bar.set_style(
            ProgressStyle::with_template("{prefix:>14} {spinner} {elapsed} elapsed")
                .expect("static template"),
        );
        bar.set_prefix(id.to_string());
        bar.enable_steady_tick(Duration::from_secs(1));
        lock(&self.bars).insert(id.to_string(), bar);
    }

    fn set(&self, id: &str, done: u64, total: u64) {
        if let Some(bar) = lock(&self.bars).get(id) {
            if bar.length() == Some(0) && total > 0 {
                bar.set_style(
                    ProgressStyle::with_template(
                        "{prefix:>14} [{bar:30}] run {pos}/{len}, {elapsed} elapsed, ~{eta} left",
                    )
                    .expect("static template")
                    .progress_chars("=> "),
                );
            }
            bar.set_length(total);
            bar.set_position(done);
        }
    }

    fn remove(&self, id: &str, finished: u64) {
        if let Some(bar) = lock(&self.bars).remove(id) {
            bar.finish_and_clear();
            self.multi.remove(&bar);
        }
        self.overall.set_position(finished);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_status_gives_runs_elapsed_and_an_estimate_from_the_pace() {
        let now = Instant::now();
        let r = Running {
            done: 1,
            total: 4,
            started: now - Duration::from_secs(20),
            first: Some((now, 1)),
            printed: now,
        };
        assert_eq!(status(&r), "run 1/4, 0:20 elapsed", "no pace yet");
        // Runs that waited 100 s for a core, then ended every 10 s.
        let waited = Running {
            done: 3,
            total: 6,
            started: now - Duration::from_secs(130),
            first: Some((now - Duration::from_secs(20), 1)),
            ..r
        };
        assert_eq!(status(&waited), "run 3/6, 2:10 elapsed, ~0:30 left");
        let unknown = Running {
            total: 0,
            done: 0,
            first: None,
            ..r
        };
        assert_eq!(status(&unknown), "0:20 elapsed");
        assert_eq!(clock(Duration::from_secs(754)), "12:34");
    }
}
