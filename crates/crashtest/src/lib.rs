//! # mobius-crashtest: every crash image recovered and judged
//!
//! Our version of the VST method of the OPTR paper (§5), taken further: crashes
//! land between any two flash operations of a parallel device and may tear the operation in flight.
//! A campaign runs a seeded workload once with the flash operation log and the host log recorded,
//! chooses crash instants ([`points`]), builds each image incrementally from the log, runs the
//! design's recovery on the image alone, reads every logical page and lets the [`oracle`] judge
//! the result against a promise — the design's own, or a stronger one for negative controls.

mod cut;
pub mod media;
pub mod options;
pub mod oracle;
pub mod points;
pub mod prefix;
pub mod second_life;
pub mod shrink;
pub mod soak;
pub mod sqlite;

use flash::{DeviceConfig, Flash, Lpn, OpLog, Store};
use ftl::{DesignOptions, DesignSpec, Promise};
use oracle::{Judging, Model, Seen};
use points::{CrashPoint, PointKind};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use workload::{HostLog, WorkloadSpec};

/// Why a campaign could not run (a crash image the design fails to recover is a [`Violation`],
/// not an error).
#[derive(Debug, thiserror::Error)]
pub enum CampaignError {
    #[error("formatting a fresh {design} failed: {source}")]
    Format {
        design: &'static str,
        source: ftl::FtlError,
    },
    #[error("the recorded run failed: {0}")]
    Workload(#[from] workload::WorkloadError),
    /// The media model ended the recorded run: the flash wore out, or lost metadata the design
    /// cannot do without ([`media::end_of_life`]).
    #[error("the media ended the recorded run: {0}")]
    EndOfLife(workload::WorkloadError),
    #[error("the driver kept no host log")]
    NoHostLog,
    #[error("flash recording was switched off during the run")]
    NoLog,
    #[error("need shares 0..{expected} of one campaign, got {got}")]
    Shares { expected: usize, got: usize },
}

/// What to run.
#[derive(Clone)]
pub struct CampaignConfig {
    pub design: DesignSpec,
    pub options: DesignOptions,
    pub device: DeviceConfig,
    pub workload: WorkloadSpec,
    pub seed: u64,
    pub crash_points: usize,
    pub torn: bool,
    pub exhaustive: bool,
    pub promise: Promise,
    pub threads: usize,
    pub tag_only: bool,
}

/// One broken rule in one crash image.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Violation {
    pub instant_ns: u64,
    pub torn: bool,
    pub lpn: Option<u32>,
    pub what: String,
    /// The command that replays exactly this crash image.
    pub replay: String,
}

impl Violation {
    /// A broken rule of the image cut at `p`; its replay command is filled in by the caller
    /// ([`check_image_at`]), once per image that broke a rule.
    fn at(p: &CrashPoint, lpn: Option<Lpn>, what: String) -> Violation {
        Violation {
            instant_ns: p.instant_ns,
            torn: p.torn,
            lpn: lpn.map(|l| l.0),
            what,
            replay: String::new(),
        }
    }
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct Summary {
    pub mean: f64,
    pub p50: f64,
    pub max: f64,
}

impl Summary {
    fn of(mut v: Vec<f64>) -> Summary {
        if v.is_empty() {
            return Summary::default();
        }
        v.sort_by(f64::total_cmp);
        Summary {
            mean: v.iter().sum::<f64>() / v.len() as f64,
            p50: v[v.len() / 2],
            max: v[v.len() - 1],
        }
    }
}

/// Where a campaign's time went: wall-clock seconds per phase, summed over its worker threads.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize)]
pub struct PhaseTimes {
    /// Running the workload once with both logs on (life one's recording).
    pub record_s: f64,
    /// Building each crash image from the operation log.
    pub image_s: f64,
    /// The design's recovery on each image, with its invariant check.
    pub recovery_s: f64,
    /// Reading every page of each recovered device back, and the oracle's verdict.
    pub judging_s: f64,
    /// Second lives, every phase of them (recovering the first cut, the run on the recovered
    /// device, its images, recoveries and verdicts).
    pub second_lives_s: f64,
}

impl PhaseTimes {
    /// The sum of two accounts (of two threads, shares or cells).
    pub fn plus(self, o: PhaseTimes) -> PhaseTimes {
        PhaseTimes {
            record_s: self.record_s + o.record_s,
            image_s: self.image_s + o.image_s,
            recovery_s: self.recovery_s + o.recovery_s,
            judging_s: self.judging_s + o.judging_s,
            second_lives_s: self.second_lives_s + o.second_lives_s,
        }
    }
}

/// How fast a campaign (or soak) ran: measured on the wall clock, so it differs from run to
/// run whatever the code does (tools/identity-check leaves it out).
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize)]
pub struct Speed {
    /// Threads the crash points ran on (a soak: its jobs).
    pub threads: usize,
    /// Crash points (second lives' included) per second of wall time per thread.
    pub points_per_s_per_core: f64,
    /// Seconds per phase, summed over the threads.
    pub phases: PhaseTimes,
}

impl Speed {
    /// `points` checked in `wall_s` on `threads` threads, with the time per phase.
    pub fn of(points: usize, wall_s: f64, threads: usize, phases: PhaseTimes) -> Speed {
        let threads = threads.max(1);
        Speed {
            threads,
            points_per_s_per_core: points as f64 / (wall_s.max(1e-9) * threads as f64),
            phases,
        }
    }

    /// One line for a summary: the rate and where the time went.
    pub fn line(&self) -> String {
        let p = &self.phases;
        format!(
            "{:.0} crash points/s per core on {} thread{}; record {:.1} s, images {:.1} s, recovery {:.1} s, judging {:.1} s, second lives {:.1} s",
            self.points_per_s_per_core,
            self.threads,
            if self.threads == 1 { "" } else { "s" },
            p.record_s,
            p.image_s,
            p.recovery_s,
            p.judging_s,
            p.second_lives_s
        )
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct CampaignReport {
    pub ftl: String,
    pub promise: String,
    pub preset: String,
    pub workload: String,
    pub seed: u64,
    pub torn: bool,
    /// Crash instants tried.
    pub crash_points: usize,
    /// Images the design recovered (a failed recovery is a violation, unless the media lost
    /// a page of metadata it stopped at: `lost_to_media`).
    pub recovered: usize,
    /// Images whose recovery stopped at a page of the design's metadata lost to the media
    /// (media model only; [`media`]).
    #[serde(skip_serializing_if = "is_zero")]
    pub lost_to_media: usize,
    /// Reads after recovery that failed with an error for a page whose version the media lost
    /// (accepted: [`media`]).
    #[serde(skip_serializing_if = "is_zero")]
    pub errors_for_lost_pages: usize,
    /// The media model's part, wear and what the recorded run's media did (model on only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub media: Option<media::MediaRun>,
    /// Crash images with at least one violation.
    pub violating_points: usize,
    pub violations: Vec<Violation>,
    pub points_by_kind: BTreeMap<String, usize>,
    pub recovery_flash_reads: Summary,
    pub recovery_sim_ms: Summary,
    pub flash_ops_recorded: usize,
    pub host_requests: usize,
    pub wall_s: f64,
    /// Points per second per core and the time per phase.
    pub speed: Speed,
}

impl CampaignReport {
    /// One JSON object; `violations` is the count, `violation_details` the first 20.
    pub fn to_json(&self) -> serde_json::Value {
        let mut v = serde_json::to_value(self).expect("report serialises");
        let obj = v.as_object_mut().expect("object");
        obj.insert(
            "violations".into(),
            serde_json::json!(self.violations.len()),
        );
        obj.insert(
            "violation_details".into(),
            serde_json::to_value(self.violations.iter().take(20).collect::<Vec<_>>())
                .expect("violations"),
        );
        obj.insert(
            "crash_points_per_s".into(),
            serde_json::json!(self.crash_points as f64 / self.wall_s.max(1e-9)),
        );
        v
    }
}

/// The recorded run every crash image is built from.
pub struct Recording {
    pub base: Box<dyn Store>,
    pub ops: OpLog,
    pub host: HostLog,
    /// Each record of `host`, by index, placed in `ops` (the image-prefix cut model, [`prefix`]).
    pub positions: Vec<lab::driver::LogPositions>,
    /// When the freshly formatted device was ready (crashes before it are crashes of the format).
    pub ready_ns: u64,
    /// The run's media figures (media model on only).
    pub media: Option<flash::MediaStats>,
}

/// Runs the workload once with both logs on.
pub fn record(cfg: &CampaignConfig) -> Result<Recording, CampaignError> {
    let mut flash = lab::device::flash(&cfg.design, &cfg.device, cfg.tag_only);
    // The run and every image keep OOB records whole: a squeezed record is rebuilt at every
    // read, and each image's recovery would squeeze the whole device anew (DFTL).
    flash.keep_oob_whole();
    let base = flash.start_recording();
    let mut dev =
        cfg.design
            .build(flash, &cfg.options)
            .map_err(|source| CampaignError::Format {
                design: cfg.design.name,
                source,
            })?;
    let ready_ns = dev.flash().idle_ns();
    let run = lab::driver::run(
        dev.as_mut(),
        &cfg.workload,
        cfg.seed,
        ready_ns,
        true,
        &mut |_, _| {},
    )
    .map_err(
        |e| match media::on(&cfg.device) && media::end_of_life(&e, dev.flash()) {
            true => CampaignError::EndOfLife(e),
            false => CampaignError::Workload(e),
        },
    )?;
    let ops = dev.flash_mut().take_log().ok_or(CampaignError::NoLog)?;
    let host = run.log.ok_or(CampaignError::NoHostLog)?;
    let media = media::on(&cfg.device).then(|| dev.flash().stats().media.clone());
    Ok(Recording {
        base,
        ops,
        host,
        positions: run.positions.ok_or(CampaignError::NoHostLog)?,
        ready_ns,
        media,
    })
}

/// The `mobius crashtest` command that rebuilds and judges exactly one crash image: every
/// workload knob that differs from the named workload's defaults is spelt out (`--requests` and
/// `--fill` always, since the CLI has its own defaults for them).
pub fn replay_command(cfg: &CampaignConfig, instant: u64, torn: bool) -> String {
    let w = &cfg.workload;
    let mut c = format!(
        "mobius crashtest --ftl {} --preset {} --workload {} --requests {} --fill {} --seed {} --promise {} --replay-instant {instant}",
        cfg.design.name, cfg.device.preset, w.name, w.requests, w.fill, cfg.seed, cfg.promise.name()
    );
    if let Ok(d) = WorkloadSpec::named(&w.name) {
        let mut knob = |flag: &str, differs: bool, value: String| {
            if differs {
                c.push_str(&format!(" --{flag} {value}"));
            }
        };
        knob(
            "request-pages",
            w.request_pages != d.request_pages,
            w.request_pages.to_string(),
        );
        knob(
            "range-pages",
            w.range_pages != d.range_pages,
            w.range_pages.to_string(),
        );
        knob(
            "qd",
            w.queue_depth != d.queue_depth,
            w.queue_depth.to_string(),
        );
        knob(
            "flush-every",
            w.flush_every != d.flush_every,
            w.flush_every.to_string(),
        );
        knob(
            "read-fraction",
            w.read_fraction != d.read_fraction,
            w.read_fraction.to_string(),
        );
        knob(
            "abort-fraction",
            w.abort_fraction != d.abort_fraction,
            w.abort_fraction.to_string(),
        );
        knob(
            "locality-pages",
            w.locality_pages != d.locality_pages,
            w.locality_pages.to_string(),
        );
        knob(
            "min-tx-pages",
            w.min_tx_pages != d.min_tx_pages,
            w.min_tx_pages.to_string(),
        );
        knob(
            "trim-fraction",
            w.trim_fraction != d.trim_fraction,
            w.trim_fraction.to_string(),
        );
        knob(
            "interleave-fraction",
            w.interleave_fraction != d.interleave_fraction,
            w.interleave_fraction.to_string(),
        );
    }
    c.push_str(&media_flags(&cfg.device));
    for set in device_overrides(&cfg.device) {
        c.push_str(&format!(" --set {set}"));
    }
    for (k, v) in &cfg.options.params {
        c.push_str(&format!(" --param {k}={v}"));
    }
    if !cfg.tag_only {
        c.push_str(" --full-data");
    }
    if torn {
        c.push_str(" --torn");
    }
    c
}

/// `mobius crashtest --ftl D --preset P`, the device spelt out as `--set` overrides of its
/// preset and every design parameter as `--param`: the head of a replay command of the
/// campaigns that run real software (SQLite, NBD requests).
pub fn design_and_device_args(
    design: &str,
    device: &DeviceConfig,
    options: &DesignOptions,
) -> String {
    let mut c = format!("mobius crashtest --ftl {design} --preset {}", device.preset);
    c.push_str(&media_flags(device));
    for set in device_overrides(device) {
        c.push_str(&format!(" --set {set}"));
    }
    for (k, v) in &options.params {
        c.push_str(&format!(" --param {k}={v}"));
    }
    c
}

/// ` --media PART --wear W --power-off-days D` for a device with the media model on (its
/// seed is the campaign's), else nothing.
pub fn media_flags(device: &DeviceConfig) -> String {
    match &device.media {
        None => String::new(),
        Some(m) => format!(
            " --media {} --wear {} --power-off-days {}",
            m.part,
            m.initial_pe as f64 / m.endurance as f64,
            m.power_off_s as f64 / 86_400.0
        ),
    }
}

/// `device` with the media model's seed set to a campaign's seed (the model off: unchanged).
pub fn with_media_seed(mut device: DeviceConfig, seed: u64) -> DeviceConfig {
    if let Some(m) = device.media.as_mut() {
        m.seed = seed & i64::MAX as u64;
    }
    device
}

/// `key=value` for every field of `device` that differs from its preset, with the media model
/// its flags ([`media_flags`]) set up (`--set` arguments).
pub fn device_overrides(device: &DeviceConfig) -> Vec<String> {
    let Ok(mut base) = DeviceConfig::preset(&device.preset) else {
        return Vec::new();
    };
    if let Some(m) = &device.media {
        let Ok(with) = base.clone().with_media(&m.part, 0.0, m.seed) else {
            return Vec::new();
        };
        base = with;
        let b = base.media.as_mut().expect("media on");
        b.initial_pe = m.initial_pe;
        b.power_off_s = m.power_off_s;
    }
    let (Ok(toml::Value::Table(a)), Ok(toml::Value::Table(b))) =
        (toml::Value::try_from(device), toml::Value::try_from(&base))
    else {
        return Vec::new();
    };
    let mut out = Vec::new();
    diff_tables("", &a, &b, &mut out);
    out
}

fn diff_tables(prefix: &str, a: &toml::Table, b: &toml::Table, out: &mut Vec<String>) {
    for (k, v) in a {
        let key = format!("{prefix}{k}");
        match (v, b.get(k)) {
            (toml::Value::Table(x), Some(toml::Value::Table(y))) => {
                diff_tables(&format!("{key}."), x, y, out)
            }
            (v, Some(w)) if v == w => {}
            (v, _) => out.push(format!("{key}={v}")),
        }
    }
}

#[derive(Default)]
struct Outcome {
    violations: Vec<Violation>,
    recovery: Option<(u64, u64)>,
    /// Wall seconds of the recovery (and invariant check), and of reading back and judging.
    recovery_s: f64,
    judging_s: f64,
    /// Read errors accepted as versions the media lost ([`media::errors_accepted`]).
    settled: usize,
}

/// Recovers one image and judges it as a cut at `judge_ns` of the run `judging` judges (a cut
/// during a second life's recovery is judged as the first cut), the recovered device's clock
/// starting at `clock_ns` (the point's instant, or under the prefix model when the image's
/// writes are over), each violation carrying the command `replay` gives (asked only of an image
/// that broke a rule).
pub(crate) fn check_image_at(
    cfg: &CampaignConfig,
    judging: &mut Judging,
    image: Box<dyn Store>,
    (p, clock_ns): (CrashPoint, u64),
    judge_ns: u64,
    replay: &dyn Fn() -> String,
) -> Outcome {
    let started = std::time::Instant::now();
    // A design that panics on an image (in recovery, a read or its invariants) is a violation
    // of that image, with its replay command; the campaign goes on, and the panic is reported
    // there (with its location) instead of on the terminal.
    let mut outcome =
        quiet_panics::catch(|| judge_image(cfg, judging, image, (p, clock_ns), judge_ns))
            .unwrap_or_else(|what| {
                // A panic may have left the judge's work for this image half done.
                judging.clear();
                Outcome {
                    violations: vec![Violation::at(
                        &p,
                        None,
                        format!("the design panicked on this image: {what}"),
                    )],
                    ..Outcome::default()
                }
            });
    if !outcome.violations.is_empty() {
        let replay = replay();
        for v in &mut outcome.violations {
            v.replay.clone_from(&replay);
        }
    }
    outcome.judging_s = (started.elapsed().as_secs_f64() - outcome.recovery_s).max(0.0);
    outcome
}

/// Panics caught and reported as text: a panic hook that stays silent on a thread inside
/// [`catch`](quiet_panics::catch) and keeps the panic's location and message; every other panic
/// prints as before. The crash harness judges images with it, and the fuzz tests of recovery on
/// damaged images (crates/cli/tests/recovery_fuzz.rs, crates/nvmfs/tests/damaged_nvram.rs) run
/// each image with it.
pub mod quiet_panics {
    use std::cell::{Cell, RefCell};

    thread_local! {
        static QUIET: Cell<bool> = const { Cell::new(false) };
        static CAUGHT: RefCell<Option<String>> = const { RefCell::new(None) };
    }

    fn install() {
        static ONCE: std::sync::Once = std::sync::Once::new();
        ONCE.call_once(|| {
            let previous = std::panic::take_hook();
            std::panic::set_hook(Box::new(move |info| {
                if QUIET.with(|q| q.get()) {
                    CAUGHT.with(|c| *c.borrow_mut() = Some(info.to_string().replace('\n', " ")));
                } else {
                    previous(info);
                }
            }));
        });
    }

    /// `f`'s result, or, if it panics, the panic's location and message, with nothing printed.
    /// The hook is per thread, so threads catching at once keep their own panics.
    pub fn catch<T>(f: impl FnOnce() -> T) -> Result<T, String> {
        install();
        let was_quiet = QUIET.with(|q| q.replace(true));
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
        QUIET.with(|q| q.set(was_quiet));
        outcome.map_err(|payload| {
            CAUGHT
                .with(|c| c.borrow_mut().take())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "a panic without a message".into())
        })
    }

    #[cfg(test)]
    mod tests {
        /// A panic comes back as its message and location, quietly; a result passes through,
        /// and a catch inside another keeps the outer one quiet.
        #[test]
        fn a_panic_is_caught_with_its_message_and_location() {
            let text = super::catch(|| -> u32 { panic!("damaged {}", 7) }).unwrap_err();
            assert!(
                text.contains("damaged 7") && text.contains("lib.rs"),
                "{text}"
            );
            assert_eq!(super::catch(|| 5), Ok(5));
            let nested = super::catch(|| {
                let inner = super::catch(|| -> u32 { panic!("inner") });
                assert!(inner.unwrap_err().contains("inner"));
                panic!("outer")
            });
            assert!(nested.unwrap_err().contains("outer"));
        }
    }
}

fn judge_image(
    cfg: &CampaignConfig,
    judging: &mut Judging,
    image: Box<dyn Store>,
    (p, clock_ns): (CrashPoint, u64),
    judge_ns: u64,
) -> Outcome {
    let started = std::time::Instant::now();
    let mut flash = Flash::new(cfg.device.clone(), image);
    flash.start_clock_at(clock_ns);
    // Checked right after recovery (below).
    flash.expect_invariant_checks();
    let violation = |lpn: Option<Lpn>, what: String| Violation::at(&p, lpn, what);
    let failed = |what: String, recovery: Option<(u64, u64)>| Outcome {
        violations: vec![violation(None, what)],
        recovery,
        recovery_s: started.elapsed().as_secs_f64(),
        ..Outcome::default()
    };
    let (reopened, lost) =
        flash::media::error_log::watch(|| cfg.design.reopen(flash, &cfg.options));
    let (mut dev, report) = match reopened {
        Ok(x) => x,
        // Recovery stopped at metadata the ECC found lost while it ran ([`media`]).
        Err(e) if media::lost_to_media(&e, &lost) => {
            return Outcome {
                recovery_s: started.elapsed().as_secs_f64(),
                ..Outcome::default()
            }
        }
        Err(e) => return failed(format!("recovery failed: {e}"), None),
    };
    let recovery = Some((report.flash_reads, report.sim_ns));
    if let Err(e) = dev.check_invariants() {
        return failed(format!("invariant broken after recovery: {e}"), recovery);
    }
    let recovery_s = started.elapsed().as_secs_f64();
    let n = dev.logical_pages();
    let at = dev.flash().idle_ns().max(clock_ns);
    let judged = |violations, settled| Outcome {
        violations,
        recovery,
        recovery_s,
        settled,
        ..Outcome::default()
    };
    let seen = match read_every_page(dev.as_mut(), at) {
        Ok(seen) => seen,
        Err((lpn, e)) => {
            return judged(
                vec![violation(
                    Some(lpn),
                    format!("read after recovery failed: {e}"),
                )],
                0,
            )
        }
    };
    let pages = judging.logical_pages();
    if n != pages {
        return judged(
            vec![violation(
                None,
                format!("recovered device has {n} logical pages, the run had {pages}"),
            )],
            0,
        );
    }
    let (found, settled) = match media::on(&cfg.device) {
        true => {
            let lost = media::lost_versions(dev.flash());
            let found = judging.judge_with_losses(judge_ns, &seen, &lost);
            let settled = media::errors_accepted(&seen, &found);
            (found, settled)
        }
        false => (judging.judge(judge_ns, &seen), 0),
    };
    judged(
        found.into_iter().map(|(l, w)| violation(l, w)).collect(),
        settled,
    )
}

/// What every logical page of a recovered device reads as, from `at` on, 64 pages a request;
/// a failed read is returned with the first page it asked for.
pub(crate) fn read_every_page(
    dev: &mut dyn ftl::BlockDevice,
    mut at: u64,
) -> Result<Vec<Seen>, (Lpn, ftl::FtlError)> {
    let n = dev.logical_pages();
    let mut seen = Vec::with_capacity(n as usize);
    let mut out = Vec::new();
    let mut start = 0;
    while start < n {
        let k = 64.min(n - start);
        let c = dev
            .read(Lpn(start), k, at, &mut out)
            .map_err(|e| (Lpn(start), e))?;
        at = at.max(c.ack_ns);
        seen.extend(
            out.iter()
                .enumerate()
                .map(|(i, o)| Seen::of(start + i as u32, o)),
        );
        start += k;
    }
    Ok(seen)
}

/// Runs a whole campaign.
pub fn run_campaign(
    cfg: &CampaignConfig,
    progress: &(dyn Fn(u64, u64) + Sync),
) -> Result<CampaignReport, CampaignError> {
    let wall = std::time::Instant::now();
    let rec = record(cfg)?;
    Ok(run_recorded(cfg, &rec, wall, progress))
}

/// One share of a campaign's crash points: every `parts`-th point from `part`, each outcome
/// with its point's index. Workers check shares of one recorded run (the recording is
/// deterministic from the seed); [`merge_parts`] rebuilds exactly the whole campaign's report.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CampaignPart {
    pub part: usize,
    pub parts: usize,
    /// Points of the whole campaign.
    pub total_points: usize,
    pub points_by_kind: BTreeMap<String, usize>,
    /// (point index, violations of that image), for every point of this share.
    pub violations: Vec<(usize, Vec<Violation>)>,
    /// (point index, recovery flash reads, recovery ms) for every image that recovered.
    pub recoveries: Vec<(usize, f64, f64)>,
    pub flash_ops_recorded: usize,
    pub host_requests: usize,
    /// Threads this share's points ran on, and their seconds per phase (summed).
    #[serde(default)]
    pub threads: usize,
    #[serde(default)]
    pub phases: PhaseTimes,
    /// Read errors of this share accepted as versions the media lost
    /// ([`media::errors_accepted`]).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub settled: usize,
}

/// Checks the crash points of a recorded run on `cfg.threads` workers; `wall` is when the
/// campaign started (for the report's wall time).
pub fn run_recorded(
    cfg: &CampaignConfig,
    rec: &Recording,
    wall: std::time::Instant,
    progress: &(dyn Fn(u64, u64) + Sync),
) -> CampaignReport {
    run_recorded_cut(cfg, rec, wall, prefix::CutModel::Instant, progress)
}

/// [`run_recorded`] with its images cut by `cut`.
pub fn run_recorded_cut(
    cfg: &CampaignConfig,
    rec: &Recording,
    wall: std::time::Instant,
    cut: prefix::CutModel,
    progress: &(dyn Fn(u64, u64) + Sync),
) -> CampaignReport {
    // The campaign started with its recording.
    let record_s = wall.elapsed().as_secs_f64();
    let part = run_recorded_part(cfg, rec, cut, (0, 1), progress);
    let mut report = merge_parts(cfg, vec![part], wall.elapsed().as_secs_f64())
        .expect("one part is a whole campaign");
    report.speed.phases.record_s = record_s;
    report.media = media::MediaRun::of(&cfg.device, rec);
    report
}

/// Checks share `part` of `parts` of a recorded run's crash points, cut by `cut` (see
/// [`CampaignPart`]).
pub fn run_recorded_part(
    cfg: &CampaignConfig,
    rec: &Recording,
    cut: prefix::CutModel,
    (part, parts): (usize, usize),
    progress: &(dyn Fn(u64, u64) + Sync),
) -> CampaignPart {
    let run = &cut::CutRun::new(cut, rec);
    let model = Model::new(run.host());
    let cuts = Cuts {
        points: run.choose_points(cfg),
        model: &model,
        images: &|| run.images(rec.base.as_ref()),
        replay: &|p| run.replay(cfg, p.instant_ns, p.torn),
    };
    check_part(cfg, rec, cuts, (part, parts), progress)
}

/// The images of one worker's crash points, in order: each point's image and the instant its
/// recovered device's clock starts at.
pub(crate) type Images<'a> = Box<dyn FnMut(CrashPoint) -> (Box<dyn Store>, u64) + Send + 'a>;

/// A campaign's crash points, how they are cut and judged: the model every image is judged by
/// (at the point's `instant_ns`), a fresh image builder per worker, and each point's replay.
pub(crate) struct Cuts<'m, 'a> {
    pub points: Vec<CrashPoint>,
    pub model: &'m Model<'a>,
    pub images: &'m dyn Fn() -> Images<'m>,
    pub replay: &'m (dyn Fn(CrashPoint) -> String + Sync),
}

/// Checks share `part` of `parts` of `cuts` on `cfg.threads` workers.
pub(crate) fn check_part(
    cfg: &CampaignConfig,
    rec: &Recording,
    cuts: Cuts,
    (part, parts): (usize, usize),
    progress: &(dyn Fn(u64, u64) + Sync),
) -> CampaignPart {
    let all = &cuts.points;
    let mut points_by_kind = BTreeMap::new();
    for p in all {
        *points_by_kind
            .entry(format!("{:?}{}", p.kind, if p.torn { "+torn" } else { "" }).to_lowercase())
            .or_insert(0) += 1;
    }
    let mine: Vec<(usize, CrashPoint)> = all
        .iter()
        .copied()
        .enumerate()
        .filter(|(i, _)| i % parts.max(1) == part)
        .collect();
    let threads = cfg.threads.max(1).min(mine.len().max(1));
    let chunk = mine.len().div_ceil(threads).max(1);
    let done = std::sync::atomic::AtomicU64::new(0);
    let total = mine.len() as u64;
    let results: Vec<(Vec<(usize, Outcome)>, f64)> = std::thread::scope(|s| {
        let handles: Vec<_> = mine
            .chunks(chunk)
            .map(|share| {
                let mut images = (cuts.images)();
                let (model, done, replay) = (cuts.model, &done, cuts.replay);
                s.spawn(move || {
                    let mut judging = model.judging(cfg.promise);
                    let mut image_s = 0.0;
                    let outcomes = share
                        .iter()
                        .map(|&(i, p)| {
                            let started = std::time::Instant::now();
                            let (image, clock_ns) = images(p);
                            image_s += started.elapsed().as_secs_f64();
                            let replay = || replay(p);
                            let o = check_image_at(
                                cfg,
                                &mut judging,
                                image,
                                (p, clock_ns),
                                p.instant_ns,
                                &replay,
                            );
                            let d = done.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
                            if d % 64 == 0 || d == total {
                                progress(d, total);
                            }
                            (i, o)
                        })
                        .collect::<Vec<_>>();
                    (outcomes, image_s)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("crash-check worker panicked"))
            .collect()
    });
    let image_s = results.iter().map(|r| r.1).sum();
    let outcomes: Vec<(usize, Outcome)> = results.into_iter().flat_map(|r| r.0).collect();
    let phases = PhaseTimes {
        image_s,
        recovery_s: outcomes.iter().map(|(_, o)| o.recovery_s).sum(),
        judging_s: outcomes.iter().map(|(_, o)| o.judging_s).sum(),
        ..PhaseTimes::default()
    };
    let settled = outcomes.iter().map(|(_, o)| o.settled).sum();
    CampaignPart {
        settled,
        part,
        parts,
        total_points: all.len(),
        points_by_kind,
        recoveries: outcomes
            .iter()
            .filter_map(|(i, o)| o.recovery.map(|r| (*i, r.0 as f64, r.1 as f64 / 1e6)))
            .collect(),
        violations: outcomes
            .into_iter()
            .map(|(i, o)| (i, o.violations))
            .collect(),
        flash_ops_recorded: rec.ops.ops.len(),
        host_requests: rec.host.records.len(),
        threads,
        phases,
    }
}

/// The whole campaign's report from all its shares (any order); `wall_s` is the caller's.
pub fn merge_parts(
    cfg: &CampaignConfig,
    mut parts: Vec<CampaignPart>,
    wall_s: f64,
) -> Result<CampaignReport, CampaignError> {
    parts.sort_by_key(|p| p.part);
    let n = parts.first().map_or(0, |p| p.parts);
    if parts.is_empty()
        || parts.len() != n
        || parts
            .iter()
            .enumerate()
            .any(|(k, p)| p.part != k || p.parts != n)
    {
        return Err(CampaignError::Shares {
            expected: n,
            got: parts.len(),
        });
    }
    let mut outcomes: Vec<(usize, Vec<Violation>)> = parts
        .iter_mut()
        .flat_map(|p| std::mem::take(&mut p.violations))
        .collect();
    outcomes.sort_by_key(|(i, _)| *i);
    let recoveries: Vec<(usize, f64, f64)> = parts
        .iter()
        .flat_map(|p| p.recoveries.iter().copied())
        .collect();
    let first = &parts[0];
    let failed = outcomes
        .iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(i, _)| *i);
    let recovered_at: std::collections::BTreeSet<usize> = recoveries.iter().map(|r| r.0).collect();
    let failed_recoveries = failed.filter(|i| !recovered_at.contains(i)).count();
    let lost_to_media = first.total_points - recoveries.len() - failed_recoveries;
    let threads = parts.iter().map(|p| p.threads.max(1)).sum();
    let phases = parts
        .iter()
        .fold(PhaseTimes::default(), |sum, p| sum.plus(p.phases));
    Ok(CampaignReport {
        ftl: cfg.design.name.to_string(),
        promise: cfg.promise.name().to_string(),
        preset: cfg.device.preset.clone(),
        workload: cfg.workload.name.clone(),
        seed: cfg.seed,
        torn: cfg.torn,
        crash_points: first.total_points,
        recovered: recoveries.len(),
        lost_to_media,
        errors_for_lost_pages: parts.iter().map(|p| p.settled).sum(),
        media: None,
        violating_points: outcomes.iter().filter(|(_, v)| !v.is_empty()).count(),
        violations: outcomes.into_iter().flat_map(|(_, v)| v).collect(),
        points_by_kind: first.points_by_kind.clone(),
        recovery_flash_reads: Summary::of(recoveries.iter().map(|r| r.1).collect()),
        recovery_sim_ms: Summary::of(recoveries.iter().map(|r| r.2).collect()),
        flash_ops_recorded: first.flash_ops_recorded,
        host_requests: first.host_requests,
        wall_s,
        speed: Speed::of(first.total_points, wall_s, threads, phases),
    })
}

/// Rebuilds and judges the single crash image `cut` makes at `at` (for `--replay-instant`; under
/// the prefix model `at` counts image writes).
pub fn replay_one(
    cfg: &CampaignConfig,
    cut: prefix::CutModel,
    at: u64,
    torn: bool,
) -> Result<Vec<Violation>, CampaignError> {
    let rec = record(cfg)?;
    let run = cut::CutRun::new(cut, &rec);
    let model = Model::new(run.host());
    let (image, clock) = run.image_of(rec.base.as_ref(), at, torn);
    let p = CrashPoint {
        instant_ns: at,
        torn,
        kind: PointKind::Spread,
    };
    let replay = || run.replay(cfg, at, torn);
    Ok(check_image_at(
        cfg,
        &mut model.judging(cfg.promise),
        image,
        (p, clock),
        at,
        &replay,
    )
    .violations)
}

/// Helpers for design crates' own crash-campaign tests.
pub mod testing {
    use super::prefix::CutModel;
    use super::second_life::{judge_life, FirstCut};
    use super::{record, run_campaign, CampaignConfig};
    use ftl::{DesignOptions, DesignSpec};
    use workload::WorkloadSpec;

    /// `MOBIUS_LONG=1` switches on the long campaigns.
    pub fn long() -> bool {
        std::env::var("MOBIUS_LONG").is_ok_and(|v| v == "1")
    }

    /// The transactional mix with 20 % aborts, `requests` long after a `fill`.
    pub fn txmix(requests: u64, fill: f64) -> WorkloadSpec {
        let mut w = WorkloadSpec::named("txmix").expect("txmix is a workload");
        w.requests = requests;
        w.fill = fill;
        w.abort_fraction = 0.2;
        w
    }

    /// Runs a campaign of `design` on the `small` preset under its own promise and panics with
    /// the first violations if any image breaks it or fails to recover.
    pub fn assert_keeps_promise(
        design: DesignSpec,
        workload: WorkloadSpec,
        options: DesignOptions,
        points: usize,
        seed: u64,
        torn: bool,
    ) {
        let small = flash::DeviceConfig::preset("small").expect("small preset");
        assert_keeps_promise_on(small, design, workload, options, points, seed, torn)
    }

    /// [`assert_keeps_promise`] on another device (e.g. the soak's `wide` geometry).
    pub fn assert_keeps_promise_on(
        device: flash::DeviceConfig,
        design: DesignSpec,
        workload: WorkloadSpec,
        options: DesignOptions,
        points: usize,
        seed: u64,
        torn: bool,
    ) {
        let mut cfg = config(device, design, workload, seed, torn);
        cfg.options = options;
        cfg.crash_points = points;
        let r = run_campaign(&cfg, &|_, _| {}).expect("campaign runs");
        eprintln!(
            "{} {} seed {seed} torn {torn}: {} points, {} recovered, {} violating, reads mean {:.0}",
            cfg.design.name, cfg.workload.name, r.crash_points, r.recovered, r.violating_points, r.recovery_flash_reads.mean
        );
        assert!(
            r.violations.is_empty(),
            "{} violations, first: {:#?}",
            r.violations.len(),
            &r.violations[..r.violations.len().min(5)]
        );
        assert_eq!(r.recovered, r.crash_points);
    }

    /// A campaign of `design` on `device` under its own promise (default options, 2,000 points,
    /// tag-only, two threads): the soak's configuration of one seed.
    pub fn config(
        device: flash::DeviceConfig,
        design: DesignSpec,
        workload: WorkloadSpec,
        seed: u64,
        torn: bool,
    ) -> CampaignConfig {
        CampaignConfig {
            promise: design.promise,
            design,
            options: DesignOptions::default(),
            device,
            workload,
            seed,
            crash_points: 2000,
            torn,
            exhaustive: false,
            threads: 2,
            tag_only: true,
        }
    }

    /// Runs the second life that starts at `cut` (as the soak's `--second-lives` does: a quarter
    /// of `cfg.crash_points` sampled in it) and panics with the first violations.
    pub fn assert_second_life_keeps_promise(cfg: &CampaignConfig, cut: FirstCut) {
        let rec = record(cfg).expect("life one runs");
        let points_each = (cfg.crash_points / 4).max(1);
        let (points, violations) = judge_life(cfg, &rec, CutModel::Instant, cut, points_each, None);
        eprintln!(
            "{} seed {} second life after {}: {points} points, {} violations",
            cfg.design.name,
            cfg.seed,
            cut.instant_ns,
            violations.len()
        );
        assert!(points > 0, "the second life ran no crash point");
        assert!(
            violations.is_empty(),
            "{} violations, first: {:#?}",
            violations.len(),
            &violations[..violations.len().min(5)]
        );
    }
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}
