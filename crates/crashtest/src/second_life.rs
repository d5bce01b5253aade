//! Second lives: a power cut, recovery, more work on the recovered device, and a second cut.
//!
//! A first campaign judges each image right after recovery; it never asks whether the recovered
//! device keeps its promise from then on. A second life does: from a first cut at `t1` the
//! design recovers (with the flash operation log on, so cuts *during* recovery are tried too),
//! the host reads back every page (the baseline), runs more of the workload on the recovered
//! device, and images of that second life are recovered and judged:
//! - a cut before the recovered device was ready is judged as the first cut: the image must
//!   keep life one's promise at `t1` (recovery may be cut and restarted);
//! - a cut after it is judged against the baseline, written and flushed at the instant the
//!   device was ready (the host saw it: it may not change without a write), followed by the
//!   second life's own requests.

use crate::cut::CutRun;
use crate::oracle::{Model, Seen};
use crate::points::{self, CrashPoint, ImageBuilder};
use crate::prefix::CutModel;
use crate::{
    check_image_at, run_recorded_cut, CampaignConfig, CampaignError, CampaignReport, Recording,
    Speed, Violation,
};
use flash::{Flash, Lpn};
use workload::{HostLog, HostOp, HostRecord};

/// A `--first-cut` argument that is not `NS` or `NS:torn`.
#[derive(Debug, thiserror::Error)]
#[error("first cut '{0}': expected NS or NS:torn")]
pub struct BadFirstCut(pub String);

/// Where a second life starts: the first cut.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FirstCut {
    pub instant_ns: u64,
    pub torn: bool,
}

impl FirstCut {
    /// `T` or `T:torn` (the `--first-cut` argument).
    pub fn parse(text: &str) -> Result<FirstCut, BadFirstCut> {
        let (t, torn) = match text.strip_suffix(":torn") {
            Some(t) => (t, true),
            None => (text, false),
        };
        let instant_ns = t.parse().map_err(|_| BadFirstCut(text.to_string()))?;
        Ok(FirstCut { instant_ns, torn })
    }

    /// ` --first-cut T[:torn]`, as a replay command spells it.
    pub fn arg(&self) -> String {
        format!(
            " --first-cut {}{}",
            self.instant_ns,
            if self.torn { ":torn" } else { "" }
        )
    }
}

/// What the second lives of a campaign found.
#[derive(Clone, Debug, Default)]
pub struct SecondLives {
    pub lives: usize,
    pub crash_points: usize,
    pub violations: Vec<Violation>,
}

/// The recorded second life after `cut`, or the violation that stopped it (a recovery, a read
/// or the run on the recovered device failed: life one's campaign reports the first two too).
pub(crate) struct Life {
    pub(crate) rec: Recording,
    /// When the recovered device was ready for the host.
    pub(crate) ready_ns: u64,
}

/// First cuts for `lives` second lives: evenly spread over life one's sampled crash points, cut
/// by `model`.
pub fn choose_cuts(
    cfg: &CampaignConfig,
    rec: &Recording,
    model: CutModel,
    lives: usize,
) -> Vec<FirstCut> {
    spread_cuts(&CutRun::new(model, rec).choose_points(cfg), lives)
}

/// `lives` first cuts evenly spread, in time, over a campaign's crash points `points`.
pub fn spread_cuts(points: &[CrashPoint], lives: usize) -> Vec<FirstCut> {
    if points.is_empty() || lives == 0 {
        return Vec::new();
    }
    let mut by_time: Vec<&CrashPoint> = points.iter().collect();
    by_time.sort_by_key(|p| (p.instant_ns, p.torn));
    (0..lives)
        .map(|k| by_time[(2 * k + 1) * by_time.len() / (2 * lives)])
        .map(|p| FirstCut {
            instant_ns: p.instant_ns,
            torn: p.torn,
        })
        .collect()
}

/// Life one's campaign, then `lives` second lives of the same recording (`crash_points / 4`
/// points each), their crash points and violations added to the report. Returns the report and
/// the number of second lives run.
pub fn run_campaign_with_lives(
    cfg: &CampaignConfig,
    lives: usize,
    progress: &(dyn Fn(u64, u64) + Sync),
) -> Result<(CampaignReport, usize), CampaignError> {
    run_campaign_cut(cfg, lives, CutModel::Instant, progress)
}

/// [`run_campaign_with_lives`] with every image, second lives' included, cut by `cut`.
pub fn run_campaign_cut(
    cfg: &CampaignConfig,
    lives: usize,
    cut: CutModel,
    progress: &(dyn Fn(u64, u64) + Sync),
) -> Result<(CampaignReport, usize), CampaignError> {
    let wall = std::time::Instant::now();
    let (cfg, rec, end_of_life) = &crate::media::record_within_life(cfg)?;
    let mut report = run_recorded_cut(cfg, rec, wall, cut, progress);
    if let Some(m) = report.media.as_mut() {
        m.end_of_life = end_of_life.clone();
    }
    let started = std::time::Instant::now();
    let points_each = (cfg.crash_points / 4).max(1);
    let lives = run_second_lives(cfg, rec, (lives, points_each), cut);
    let mut phases = report.speed.phases;
    phases.second_lives_s = started.elapsed().as_secs_f64();
    report.crash_points += lives.crash_points;
    report.wall_s = wall.elapsed().as_secs_f64();
    // Second lives run on one thread, after the points of life one.
    report.speed = Speed::of(
        report.crash_points,
        report.wall_s,
        report.speed.threads,
        phases,
    );
    let mut instants: Vec<(u64, bool)> = lives
        .violations
        .iter()
        .map(|v| (v.instant_ns, v.torn))
        .collect();
    instants.dedup();
    report.violating_points += instants.len();
    report.violations.extend(lives.violations);
    Ok((report, lives.lives))
}

/// Runs and judges `lives` second lives of `rec`, `points_each` crash points in each, every
/// first and second cut made by `model`.
pub fn run_second_lives(
    cfg: &CampaignConfig,
    rec: &Recording,
    (lives, points_each): (usize, usize),
    model: CutModel,
) -> SecondLives {
    let mut out = SecondLives::default();
    for cut in choose_cuts(cfg, rec, model, lives) {
        let (points, violations) = judge_life(cfg, rec, model, cut, points_each, None);
        out.lives += 1;
        out.crash_points += points;
        out.violations.extend(violations);
    }
    out
}

/// The second life after `cut` (made by `model`, as are its own cuts): the design recovers
/// from that image with its flash recording on, the host reads the baseline and runs on, and
/// `points_each` sampled cuts of that second life — its recovery included — are judged, or
/// only `replay` (a cut and whether it tears). Returns (points tried, violations).
pub fn judge_life(
    cfg: &CampaignConfig,
    rec: &Recording,
    model: CutModel,
    cut: FirstCut,
    points_each: usize,
    replay: Option<(u64, bool)>,
) -> (usize, Vec<Violation>) {
    let first = CutRun::new(model, rec);
    let label = |what: String| {
        format!(
            "second life after a cut {}: {what}",
            model.describe(cut.instant_ns)
        )
    };
    let life = match live(cfg, rec, &first, cut, &label) {
        Ok(life) => life,
        Err(v) => return (0, v.into_iter().collect()),
    };
    let second = CutRun::new(model, &life.rec);
    let seed = cfg.seed ^ cut.instant_ns.rotate_left(17);
    let points: Vec<CrashPoint> = match replay {
        Some((instant_ns, torn)) => vec![CrashPoint {
            instant_ns,
            torn,
            kind: points::PointKind::Spread,
        }],
        None => second.sample_life(points_each, cfg.torn, seed, cut.instant_ns),
    };
    // A cut before the recovered device was ready for the host is a cut of its recovery.
    let ready = match &second {
        CutRun::Instant { .. } => life.ready_ns,
        CutRun::Prefix(run) => run.ready,
    };
    let (first, second_model) = (Model::new(first.host()), Model::new(second.host()));
    let mut judging = (
        first.judging(cfg.promise),
        second_model.judging(cfg.promise),
    );
    let mut images = second.images(life.rec.base.as_ref());
    let mut violations = Vec::new();
    for &p in &points {
        let (image, clock) = images(p);
        let replay = || second.replay(cfg, p.instant_ns, p.torn) + &cut.arg();
        let (judging, judge_ns) = match p.instant_ns < ready {
            true => (&mut judging.0, cut.instant_ns),
            false => (&mut judging.1, p.instant_ns),
        };
        let outcome = check_image_at(cfg, judging, image, (p, clock), judge_ns, &replay);
        violations.extend(outcome.violations.into_iter().map(|mut v| {
            v.what = label(v.what);
            v
        }));
    }
    (points.len(), violations)
}

/// Recovers the image of `cut` (made by `first`, life one's run), reads the baseline and runs
/// the second life on it, recording; `label` words what went wrong.
fn live(
    cfg: &CampaignConfig,
    rec: &Recording,
    first: &CutRun,
    cut: FirstCut,
    label: &dyn Fn(String) -> String,
) -> Result<Life, Option<Violation>> {
    let fail = |what: String| Violation {
        instant_ns: cut.instant_ns,
        torn: cut.torn,
        lpn: None,
        what: label(what),
        replay: first.replay(cfg, cut.instant_ns, cut.torn) + &cut.arg(),
    };
    // A failed first recovery or read is life one's violation, reported by its campaign.
    let (image, clock) = first.image_of(rec.base.as_ref(), cut.instant_ns, cut.torn);
    let recovered =
        recover_image(&cfg.design, &cfg.device, &cfg.options, image, clock).ok_or(None)?;
    let seed = cfg.seed ^ cut.instant_ns.rotate_left(17);
    live_on(cfg, rec, recovered, (seed, clock), &fail)
}

/// The second life of a recovered device: the baseline it reads back, then a quarter of the
/// workload (seeded by `seed`) on it, recorded; `from_ns` is the instant its recording starts
/// at (the first cut's). `fail` words a failed run as a violation.
pub(crate) fn live_on(
    cfg: &CampaignConfig,
    rec: &Recording,
    recovered: Recovered,
    (seed, from_ns): (u64, u64),
    fail: &dyn Fn(String) -> Violation,
) -> Result<Life, Option<Violation>> {
    let Recovered {
        mut dev,
        base,
        ready_ns,
    } = recovered;
    // With the media model on, a page the media lost reads back as what the first life's
    // promise let stand at the cut (`from_ns`).
    let first = Model::new(&rec.host);
    let judged = (&first, cfg.promise, from_ns);
    let Some(contents) = read_all(dev.as_mut(), ready_ns, &cfg.device, judged) else {
        return Err(None);
    };
    let mut host = baseline(&rec.host, &contents, ready_ns);
    // The baseline is known to the host once recovery is done and the pages are read.
    let ready = lab::driver::LogPositions {
        arrival: dev.flash().logged_ops(),
        answered: dev.flash().logged_ops(),
    };
    let mut positions = vec![ready; host.records.len()];
    let mut spec = cfg.workload.clone();
    spec.fill = 0.0;
    spec.requests = (spec.requests / 4).max(50);
    let origin = lab::driver::Origin {
        first_write: rec.host.next_write,
        first_uuid: last_uuid(&rec.host) + 1,
        contents: Some(contents),
    };
    let run = lab::driver::run_from(
        dev.as_mut(),
        &spec,
        seed,
        ready_ns,
        true,
        &origin,
        &mut |_, _| {},
    );
    let run = match run {
        Ok(run) => run,
        // Metadata the design cannot do without lost to the media: the life ends there.
        Err(e) if crate::media::ended_by_media(&e, dev.flash()) => return Err(None),
        Err(e) => {
            return Err(Some(fail(format!(
                "the recovered device failed the next run: {e}"
            ))))
        }
    };
    let log = run.log.expect("recorded");
    positions.extend(run.positions.expect("recorded"));
    let offset = host.records.len() as u64;
    host.records.extend(log.records.into_iter().map(|mut r| {
        r.index += offset;
        r
    }));
    host.next_write = log.next_write;
    let ops = dev.flash_mut().take_log().expect("recording was on");
    Ok(Life {
        rec: Recording {
            base,
            ops,
            host,
            positions,
            ready_ns: from_ns,
            media: None,
        },
        ready_ns,
    })
}

/// A design recovered from a first cut, recording from the cut on.
pub struct Recovered {
    pub dev: Box<dyn ftl::BlockDevice>,
    /// The image at the cut: the base of the second life's recording.
    pub base: Box<dyn flash::Store>,
    /// When the recovered device was ready for the host.
    pub ready_ns: u64,
}

/// The design recovered from the image `cut` leaves of a recording (`image`: its base and
/// its operations), with the flash recording from the cut on, so that the second life's cuts
/// include cuts during recovery; `None` if recovery refuses the image.
pub fn recover_cut(
    design: &ftl::DesignSpec,
    device: &flash::DeviceConfig,
    options: &ftl::DesignOptions,
    (base, ops): (&dyn flash::Store, &flash::OpLog),
    cut: FirstCut,
) -> Option<Recovered> {
    let mut builder = ImageBuilder::new(base, ops);
    let image = builder.image_at(cut.instant_ns, cut.torn);
    recover_image(design, device, options, image, cut.instant_ns)
}

/// The design recovered from `image` on a device whose clock starts at `clock_ns`, recording
/// from then on; `None` if recovery refuses the image.
pub fn recover_image(
    design: &ftl::DesignSpec,
    device: &flash::DeviceConfig,
    options: &ftl::DesignOptions,
    image: Box<dyn flash::Store>,
    clock_ns: u64,
) -> Option<Recovered> {
    let mut flash = Flash::new(device.clone(), image);
    flash.start_clock_at(clock_ns);
    let base = flash.start_recording();
    let (dev, _) = design.reopen(flash, options).ok()?;
    let ready_ns = dev.flash().idle_ns().max(clock_ns);
    Some(Recovered {
        dev,
        base,
        ready_ns,
    })
}

/// Every page's write number after recovery (`u64::MAX`: unwritten); `None` if a read fails or
/// a page is not a write of that page (life one's violation). With the media model on, a page
/// that reads as an error holds the lost version life one's oracle (`first`, judging the cut
/// `cut_ns` against `promise`) took it to stand for ([`crate::media`]).
fn read_all(
    dev: &mut dyn ftl::BlockDevice,
    at: u64,
    device: &flash::DeviceConfig,
    (first, promise, cut_ns): (&Model, ftl::Promise, u64),
) -> Option<Vec<u64>> {
    let seen = crate::read_every_page(dev, at).ok()?;
    let stood = match crate::media::on(device) {
        true => {
            let lost = crate::media::lost_versions(dev.flash());
            first.judge_settling(promise, cut_ns, &seen, &lost).1
        }
        false => vec![None; seen.len()],
    };
    seen.into_iter()
        .zip(stood)
        .map(|(seen, stood)| match seen {
            Seen::Unwritten => Some(u64::MAX),
            Seen::Write(w) => Some(w),
            Seen::Uncorrectable => stood,
            _ => None,
        })
        .collect()
}

/// The recovered contents as a host log: one single-page write per written page, with the write
/// number the page holds, acknowledged at `ready_ns`, then a flush acknowledged at `ready_ns`.
fn baseline(first: &HostLog, contents: &[u64], ready_ns: u64) -> HostLog {
    let mut pages: Vec<(u64, u32)> = contents
        .iter()
        .enumerate()
        .filter(|(_, &w)| w != u64::MAX)
        .map(|(l, &w)| (w, l as u32))
        .collect();
    pages.sort_unstable();
    let mut records: Vec<HostRecord> = pages
        .into_iter()
        .map(|(w, lpn)| HostRecord {
            index: 0,
            op: HostOp::Write {
                start: Lpn(lpn),
                count: 1,
            },
            arrival_ns: ready_ns,
            ack_ns: Some(ready_ns),
            durable_ns: None,
            error: None,
            first_write: w,
        })
        .collect();
    records.push(HostRecord {
        index: 0,
        op: HostOp::Flush,
        arrival_ns: ready_ns,
        ack_ns: Some(ready_ns),
        durable_ns: None,
        error: None,
        first_write: first.next_write,
    });
    for (i, r) in records.iter_mut().enumerate() {
        r.index = i as u64;
    }
    HostLog {
        design: first.design.clone(),
        logical_pages: first.logical_pages,
        records,
        next_write: first.next_write,
    }
}

/// The largest transaction id life one used.
fn last_uuid(log: &HostLog) -> u64 {
    log.records
        .iter()
        .filter_map(|r| match &r.op {
            HostOp::SWrite { uuid, .. } | HostOp::DWrite { uuid, .. } | HostOp::Abort { uuid } => {
                Some(uuid.0)
            }
            _ => None,
        })
        .max()
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ftl::Promise;

    fn write(index: u64, lpn: u32, first_write: u64, at: u64) -> HostRecord {
        HostRecord {
            index,
            op: HostOp::Write {
                start: Lpn(lpn),
                count: 1,
            },
            arrival_ns: at,
            ack_ns: Some(at + 10),
            durable_ns: None,
            error: None,
            first_write,
        }
    }

    /// Life one wrote lpn 0 twice and lpn 1 once; the recovered device showed the newer write
    /// of lpn 0 and nothing of lpn 1 (not yet durable at the cut).
    fn lives() -> HostLog {
        let first = HostLog {
            design: "x".into(),
            logical_pages: 4,
            records: vec![
                write(0, 0, 0, 100),
                write(1, 0, 1, 200),
                write(2, 1, 2, 300),
            ],
            next_write: 3,
        };
        baseline(&first, &[1, u64::MAX, u64::MAX, u64::MAX], 1_000)
    }

    #[test]
    fn the_baseline_is_what_the_recovered_device_showed_and_it_must_stay() {
        let log = lives();
        let model = Model::new(&log);
        let kept = [
            Seen::Write(1),
            Seen::Unwritten,
            Seen::Unwritten,
            Seen::Unwritten,
        ];
        for promise in [
            Promise::DurableWrites,
            Promise::AtomicTransactions,
            Promise::Ordered,
        ] {
            assert!(model.judge(promise, 2_000, &kept).is_empty(), "{promise:?}");
        }
        // The older write of lpn 0 resurfacing after the second cut is a violation, as is the
        // page forgetting the data the host saw, under every promise.
        for seen in [Seen::Write(0), Seen::Unwritten] {
            let image = [seen, Seen::Unwritten, Seen::Unwritten, Seen::Unwritten];
            for promise in [
                Promise::DurableWrites,
                Promise::AtomicTransactions,
                Promise::Ordered,
            ] {
                assert!(
                    !model.judge(promise, 2_000, &image).is_empty(),
                    "{promise:?} {seen:?}"
                );
            }
        }
        // lpn 1's write never showed: it may not appear from nowhere in the second life.
        let image = [
            Seen::Write(1),
            Seen::Write(2),
            Seen::Unwritten,
            Seen::Unwritten,
        ];
        assert!(!model
            .judge(Promise::DurableWrites, 2_000, &image)
            .is_empty());
    }

    #[test]
    fn first_cuts_parse_and_print_back() {
        let cut = FirstCut::parse("123:torn").unwrap();
        assert_eq!(
            cut,
            FirstCut {
                instant_ns: 123,
                torn: true
            }
        );
        assert_eq!(cut.arg(), " --first-cut 123:torn");
        assert_eq!(FirstCut::parse("77").unwrap().arg(), " --first-cut 77");
        assert!(FirstCut::parse("soon").is_err());
    }
}
