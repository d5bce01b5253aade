//! Media faults beside power cuts (docs/crashtest.md, "Media faults"; docs/reliability.md).
//!
//! With the flash's media model on, a page can be lost to worn media: the ECC cannot correct it
//! after every retry. A design must then never hand on data — neither the lost version's bits nor
//! an older version in its place — but may answer with an error. The oracle accepts that error for
//! a logical page exactly when the media lost a version of it the promise allows the page to show
//! (the version is then judged as if it had been read), and nothing else: a read showing an older
//! or a wrong version stays a violation, and so does an error where no version was lost. A
//! recovery may also stop at a page of the design's own metadata the ECC found lost while it ran
//! (the design names the page in [`FtlError::MediaLoss`]): the design keeps no other copy, and
//! reports the device's data lost with it — what one lost metadata page can cost.

use crate::oracle::{Lost, Seen};
use flash::{DeviceConfig, Flash, Lpn, Ppn};
use ftl::FtlError;

/// Whether `device` has the media model on.
pub fn on(device: &DeviceConfig) -> bool {
    device.media.is_some()
}

/// A failed recovery that stopped at a page of its metadata the ECC found lost during it
/// (`lost`: what the flash's error log watched).
pub fn lost_to_media(error: &FtlError, lost: &[Ppn]) -> bool {
    matches!(error, FtlError::MediaLoss { ppn, .. } if lost.contains(ppn))
}

/// The versions of logical pages the media lost on `flash` (for
/// [`crate::oracle::Model::judge_with_losses`]).
pub fn lost_versions(flash: &Flash) -> Lost {
    Lost::new(flash.lost_tags().into_iter().map(|t| (t.lpn, t.write)))
}

/// Reads that failed with an error and were accepted: errors in `seen` that no violation in
/// `violations` names.
pub fn errors_accepted(seen: &[Seen], violations: &[(Option<Lpn>, String)]) -> usize {
    let named: std::collections::BTreeSet<u32> = violations
        .iter()
        .filter_map(|(l, _)| l.map(|l| l.0))
        .collect();
    seen.iter()
        .enumerate()
        .filter(|(l, s)| **s == Seen::Uncorrectable && !named.contains(&(*l as u32)))
        .count()
}

/// A run that stopped at a request the device failed for metadata lost to the media (a page of
/// `flash` the ECC finds lost): the device's life ends there, no violation.
pub fn ended_by_media(error: &workload::WorkloadError, flash: &Flash) -> bool {
    matches!(
        error,
        workload::WorkloadError::Request {
            source: host::HostError::Device(FtlError::MediaLoss { ppn, .. }),
            ..
        } if flash.is_lost(*ppn)
    )
}
