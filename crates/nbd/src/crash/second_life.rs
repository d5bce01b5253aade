//! Second lives of an NBD crash campaign (`--second-lives N`; docs/nbd.md, "Second lives"): a
//! power cut, the design's recovery, the export serving requests again on the recovered
//! device, and a second cut. Life one's images are judged right after recovery; a recovered
//! state that only later work trips over (a GC that erases what recovery left unaccounted, a
//! transaction id or a log position reused, a request split differently) shows only here. The
//! crash checker's second lives do the same under the workload driver
//! (crates/crashtest/src/second_life.rs).
//!
//! Each life: a first cut among life one's crash points (spread evenly in time); its image is
//! recovered with the flash recording, so cuts during recovery are tried too; every sector is
//! read back (the baseline); a new export on the recovered device (as `mobius serve` restarted
//! on the image, its transaction ids beyond life one's) runs a quarter of the requests, seeded
//! from the cut; then `crash_points / 4` cuts of that life are judged:
//! - a cut before the recovered device was ready, as life one's cut at the first instant (the
//!   image must keep life one's promise: recovery may be cut and restarted);
//! - a cut after it, against the baseline (written and flushed when the device was ready: the
//!   host saw it) followed by the life's own requests.

use super::sectors::{Sector, SectorLog};
use super::{
    read_sectors_until, Expect, Images, Judge, NbdCrashConfig, NbdCrashError, NbdCrashReport,
    Recording, Run,
};
use crashtest::points::{self, CrashPoint};
use crashtest::prefix::CutModel;
use crashtest::second_life::{recover_cut, recover_image, FirstCut, Recovered};

/// Transaction ids of a second life's atomic requests start here: beyond any life one could
/// use, as a restarted `mobius serve` starts from the wall clock.
const SECOND_LIFE_UUID: u64 = super::FIRST_UUID + (1 << 40);

/// A recorded second life.
struct Life {
    rec: Recording,
    /// When the recovered device was ready for the host (under the prefix cut: the image
    /// writes issued by then).
    ready: u64,
}

/// Runs `cfg.second_lives` lives after cuts among life one's crash points `first_points`,
/// judging their cuts with `first` (life one's judge) and their own, into `report`.
pub(super) fn run_lives(
    cfg: &NbdCrashConfig,
    first: &Judge,
    first_points: &[CrashPoint],
    report: &mut NbdCrashReport,
) {
    let points_each = (cfg.crash_points / 4).max(1);
    for cut in crashtest::second_life::spread_cuts(first_points, cfg.second_lives) {
        report.second_lives += 1;
        judge_life(cfg, first, cut, Some(points_each), report);
    }
}

/// The life after `cut`: `points_each` sampled cuts of it, or only `cfg.only_at` (a replay).
pub(super) fn judge_life(
    cfg: &NbdCrashConfig,
    first: &Judge,
    cut: FirstCut,
    points_each: Option<usize>,
    report: &mut NbdCrashReport,
) {
    let outcome = crashtest::quiet_panics::catch(|| live(cfg, first, cut))
        .unwrap_or_else(|what| Err(format!("the design panicked in the second life: {what}")));
    let life = match outcome {
        Ok(Some(life)) => life,
        // The cut's own image broke life one's promise: life one's campaign reports it (a
        // campaign's first cuts are among its crash points); a replay says so.
        Ok(None) if points_each.is_some() => return,
        Ok(None) => {
            let what = "the first cut's image does not recover or read back whole (replay that \
                        cut without --first-cut)";
            report.note_life_failure(cut, what);
            return;
        }
        Err(what) => {
            report.note_life_failure(cut, &what);
            return;
        }
    };
    let second = Judge::new(cfg, &life.rec);
    let prefix = (cfg.cut == CutModel::Prefix).then(|| life.rec.prefix_run());
    let points = match (points_each, cfg.only_at, &prefix) {
        (Some(n), _, Some(run)) => run.sample(n, cfg.torn, life_seed(cfg, cut), 0),
        (Some(n), _, None) => points::sample(
            &life.rec.ops,
            &life.rec.log.log,
            n,
            cfg.torn,
            life_seed(cfg, cut),
            cut.instant_ns,
        ),
        (None, Some((instant_ns, torn)), _) => vec![CrashPoint {
            instant_ns,
            torn,
            kind: points::PointKind::Spread,
        }],
        (None, None, _) => Vec::new(),
    };
    for m in &life.rec.read_mismatches {
        report.note_read_mismatch(format!(
            "second life after a cut at {} ns: {m}",
            cut.instant_ns
        ));
    }
    let mut images = Images::new(&life.rec, prefix.as_ref());
    for p in points {
        let (image, clock) = images.image(&p);
        let verdict = if p.instant_ns < life.ready {
            first.point(image, clock, cut.instant_ns)
        } else {
            second.point(image, clock, p.instant_ns)
        };
        report.note_in_life(&p, cut, &verdict);
    }
}

fn life_seed(cfg: &NbdCrashConfig, cut: FirstCut) -> u64 {
    cfg.seed ^ cut.instant_ns.rotate_left(17)
}

/// Recovers the image of `cut`, reads the baseline and serves the life's requests on it,
/// recording. `Ok(None)`: the cut's image does not recover or read whole (life one's
/// violation, or with the media model on a recovery stopped at lost metadata), or the media
/// ended the life; `Err`: the recovered export failed a request it must take. With the media
/// model on, a sector read as an error holds the version life one's oracle (`judge`) took it
/// to stand for ([`super::media::settle`]).
fn live(cfg: &NbdCrashConfig, judge: &Judge, cut: FirstCut) -> Result<Option<Life>, String> {
    let first = judge.rec;
    let (recovered, start_ns) = match cfg.cut {
        CutModel::Instant => {
            let image = (first.base.as_ref(), &first.ops);
            let recovered = recover_cut(&cfg.design, &cfg.device, &cfg.options, image, cut);
            (recovered, cut.instant_ns)
        }
        CutModel::Prefix => {
            let run = first.prefix_run();
            let image = run
                .images(first.base.as_ref())
                .image_after(cut.instant_ns, cut.torn);
            let clock = run.clock_after(cut.instant_ns, cut.torn);
            let recovered = recover_image(&cfg.design, &cfg.device, &cfg.options, image, clock);
            (recovered, clock)
        }
    };
    let Some(Recovered {
        mut dev,
        base,
        ready_ns,
    }) = recovered
    else {
        return Ok(None);
    };
    let Ok((read, read_ns)) = read_sectors_until(dev.as_mut(), ready_ns) else {
        return Ok(None);
    };
    let Some(read) = judge.settled(&read, cut.instant_ns, dev.flash()) else {
        return Ok(None);
    };
    let Some((log, expect)) = baseline(&first.log, &read, ready_ns) else {
        return Ok(None);
    };
    // The export serves its first request once the host has read the baseline.
    let backend = super::open_backend(cfg, dev, read_ns, SECOND_LIFE_UUID)
        .map_err(|e| format!("the recovered export could not open: {e}"))?;
    let mut run = Run::new(cfg, backend).continuing(log, expect, read_ns);
    let requests = (cfg.requests / 4).max(50);
    match run.run_requests(requests, life_seed(cfg, cut)) {
        Ok(()) => {}
        // The media ended the life (worn out, metadata lost): no violation, nothing to cut.
        Err(NbdCrashError::EndOfLife(_)) => return Ok(None),
        Err(e) => return Err(format!("the recovered export failed: {e}")),
    }
    let rec = run.into_recording(base, start_ns);
    let ready = match cfg.cut {
        CutModel::Instant => ready_ns,
        CutModel::Prefix => rec.prefix_run().ready,
    };
    Ok(Some(Life { rec, ready }))
}

/// The recovered sectors as a second life's log and what a READ must return from each; `None`
/// if a sector holds something no write put there (life one's violation).
fn baseline(
    first: &SectorLog,
    read: &[Option<Sector>],
    ready_ns: u64,
) -> Option<(SectorLog, Vec<Expect>)> {
    let mut holds = Vec::new();
    let mut expect = vec![Expect::default(); read.len()];
    for (s, sector) in read.iter().enumerate() {
        match sector {
            Some(Sector::Zero) => {}
            Some(Sector::Tagged { sector, write }) if *sector == s as u64 => {
                holds.push((*write, s as u64));
                expect[s].write = Some(*write);
            }
            _ => return None,
        }
    }
    Some((SectorLog::baseline(first, &mut holds, ready_ns), expect))
}
