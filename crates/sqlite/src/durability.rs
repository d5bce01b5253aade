//! When SQLite's commits survive a power cut on the device: per [`Mode`], the `PRAGMA
//! synchronous` levels under which a commit that returned is durable (docs/sqlite.md).

use crate::Mode;

/// Whether a commit that returned is promised to survive (the SQLite crash campaign's judgement, crashtest::sqlite).
pub fn durable_mode(mode: Mode, synchronous: &str) -> bool {
    let s = synchronous.to_ascii_lowercase();
    match mode {
        Mode::Batch | Mode::Wal => s == "full" || s == "extra",
        Mode::Journal | Mode::Ordered => s == "extra",
        Mode::NoBarrier => false,
    }
}

/// The `PRAGMA synchronous` under which `mode` keeps every commit that returned
/// ([`durable_mode`]), and why in a phrase: what `mobius sql` and the SQLite crash campaigns run
/// by default. No level makes `nobarrier` durable (its phrase says so): FULL, as the soak runs it.
pub fn durable_synchronous(mode: Mode) -> (&'static str, &'static str) {
    match mode {
        Mode::Batch => (
            "FULL",
            "a commit returns once its device transaction is durable",
        ),
        Mode::Wal => ("FULL", "SQLite syncs the WAL at every commit"),
        Mode::Journal | Mode::Ordered => (
            "EXTRA",
            "the commit point is the rollback journal's deletion, which SQLite syncs only with \
             EXTRA (with FULL a power cut just after a commit may roll it back)",
        ),
        Mode::NoBarrier => (
            "FULL",
            "no level keeps an acknowledged commit: every flush is dropped, and a power cut \
             leaves a prefix of the commits",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The default level keeps every acknowledged commit in each mode that can (nobarrier
    /// cannot), and is EXTRA exactly where FULL is not enough.
    #[test]
    fn the_default_synchronous_is_the_durable_one() {
        for mode in Mode::ALL {
            let (level, why) = durable_synchronous(mode);
            assert_eq!(
                durable_mode(mode, level),
                mode != Mode::NoBarrier,
                "{mode:?}"
            );
            assert_eq!(
                level == "EXTRA",
                !durable_mode(mode, "FULL") && durable_mode(mode, "EXTRA"),
                "{mode:?}"
            );
            assert!(!why.is_empty());
        }
    }
}
