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
use super::{CrashConfig, CrashReport, Prior, Recording, RunStart};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use sqlite::Breach;

/// Runs `cfg.second_lives` lives after seeded cuts of `rec`, noting their cuts in `report`.
pub(super) fn run_lives(cfg: &CrashConfig, rec: &Recording, report: &mut CrashReport) {
    let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed ^ 0x2d_11fe);
    for _ in 0..cfg.second_lives {
        let first_cut = rng.random_range(rec.cut_range());
        report.second_lives += 1;
        let life = match live(cfg, rec, first_cut, report.durable_mode) {
            Ok(life) => life,
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

/// The recorded life after a cut of `rec` at `first_cut` (judged as `durable` says); `Err` when the cut's image fails its
/// checks, or the recovered database fails one of the life's transactions.
pub(super) fn live(
    cfg: &CrashConfig,
    rec: &Recording,
    first_cut: u64,
    durable: bool,
) -> Result<Recording, Breach> {
    let mut dev = recover_device(cfg, rec, first_cut)?;
    let base = dev.flash_mut().start_recording();
    let start_ns = dev.flash().idle_ns();
    let (db, found) = check_database(cfg, rec, dev, first_cut, durable)?;
    let mut keys = rec.keys_in_order();
    keys.truncate(found as usize);
    let start = RunStart {
        base,
        start_ns,
        prior: Prior { found, keys },
    };
    let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed ^ first_cut.rotate_left(17));
    let n = (cfg.transactions / 4).max(1);
    record_run(cfg, db, start, n, &mut rng).map_err(Breach::AfterRecovery)
}
