//! Second lives of a SQLite crash campaign (`--second-lives N`): after a cut, the database does
//! not stop at its recovery. The design recovers, SQLite recovers on top (a hot journal rolled
//! back, a WAL replayed) and the application runs on; a bug that leaves a recovered state which
//! only a later write or a later cut exposes shows only then: a transaction id reused after the
//! cut (the VFS leases them, docs/sqlite.md), a journal extent reused, a directory generation
//! that goes back, a design's recovered state that its next GC or commit trips over. The
//! crash checker's second lives (crates/crashtest/src/second_life.rs) do the same one layer
//! down.
//!
//! Each life: a seeded first cut of the run; the image it leaves is recovered and checked as
//! any cut is; the flash records from then on, so SQLite's recovery writes are in the life;
//! a quarter of the run's transactions follow; then `crash_points / 4` seeded cuts of that
//! life (its end among them) are judged against what the first cut left followed by the
//! life's own transactions. A failing cut prints `--first-cut` and `--replay-instant`.

use super::{check_database, judge, record_run, recover_device};
use super::{CrashConfig, CrashReport, Prior, Recording, RunFailed, RunStart};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use sqlite::{evidence, Breach};

/// Runs `cfg.second_lives` lives after seeded cuts of `rec`, noting their cuts in `report`.
pub(super) fn run_lives(cfg: &CrashConfig, rec: &Recording, report: &mut CrashReport) {
    let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed ^ 0x2d_11fe);
    for _ in 0..cfg.second_lives {
        let first_cut = rng.random_range(rec.cut_range());
        report.second_lives += 1;
        let life = match live(cfg, rec, first_cut, report.durable_mode) {
            Ok(Some(life)) => life,
            Ok(None) => {
                report.lives_ended_by_media += 1;
                continue;
            }
            Err(why) => {
                report.note(Err(why), first_cut, None);
                continue;
            }
        };
        let points = (cfg.crash_points / 4).max(1);
        for at in life.instants(points, cfg.seed ^ first_cut) {
            let outcome = judge(cfg, &life, at, report.durable_mode);
            report.note(outcome, at, Some(first_cut));
        }
    }
}

/// The recorded life after a cut of `rec` at `first_cut` (judged as `durable` says); `Err` when
/// the cut's image fails its checks, or the recovered database fails one of the life's
/// transactions. `Ok(None)` when the media ends the life (media model only): the cut's image
/// was lost to it (recovery stopped at lost metadata, or the database at a lost page), or a
/// transaction of the life failed for a page the media lost ([`super::media`]).
pub(super) fn live(
    cfg: &CrashConfig,
    rec: &Recording,
    first_cut: u64,
    durable: bool,
) -> Result<Option<Recording>, Breach> {
    let run = || -> Result<Option<Recording>, Breach> {
        let Some(mut dev) = recover_device(cfg, rec, first_cut)? else {
            return Ok(None);
        };
        let base = dev.flash_mut().start_recording();
        let start_ns = dev.flash().idle_ns();
        let Ok((db, found)) = check_database(cfg, rec, dev, first_cut, durable)? else {
            return Ok(None);
        };
        let mut keys = rec.keys_in_order();
        keys.truncate(found as usize);
        let versions_before = match crate::media::on(&cfg.device) {
            true => rec.versions.after_cut(first_cut),
            false => Default::default(),
        };
        let start = RunStart {
            base,
            start_ns,
            prior: Prior { found, keys },
            versions_before,
        };
        let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed ^ first_cut.rotate_left(17));
        let n = (cfg.transactions / 4).max(1);
        match record_run(cfg, db, start, n, &mut rng) {
            Ok(life) => Ok(Some(life)),
            Err(RunFailed::EndOfLife(_)) => Ok(None),
            Err(RunFailed::Sql(e)) => Err(Breach::AfterRecovery(e)),
        }
    };
    if !crate::media::on(&cfg.device) {
        return run();
    }
    // The life's versions: SQLite's recovery writes at the first cut's open, then the run's.
    let (life, seen) = evidence::watch(run);
    Ok(life?.map(|mut life| {
        life.versions =
            super::media::Versions::new(std::mem::take(&mut life.versions_before), &seen);
        life
    }))
}
