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

/// Whether a run that stopped at `error` reached the end of the media's life on `flash`: out of
/// spare blocks ([`FtlError::WornOut`]), or metadata the design cannot do without lost to the
/// media ([`ended_by_media`]).
pub fn end_of_life(error: &workload::WorkloadError, flash: &Flash) -> bool {
    matches!(
        error,
        workload::WorkloadError::Request {
            source: host::HostError::Device(FtlError::WornOut(_)),
            ..
        }
    ) || ended_by_media(error, flash)
}

/// The media model's side of a campaign's report: the device's part and wear, what the recorded
/// run's media did, and — when the media ended the asked-for run — the run that was judged.
#[derive(Clone, Debug, serde::Serialize)]
pub struct MediaRun {
    pub part: String,
    /// P/E cycles before the run, in multiples of the part's rated endurance.
    pub wear: f64,
    pub power_off_days: f64,
    /// The recorded run's media figures (retries, uncorrectable reads, retired blocks...).
    pub recorded: flash::MediaStats,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub end_of_life: Option<EndOfLife>,
}

/// A recorded run the media ended: the flash wore out or lost metadata the design cannot do
/// without. The campaign then judges the longest run of the same seed, with the requests halved
/// until one fits in the device's life.
#[derive(Clone, Debug, serde::Serialize)]
pub struct EndOfLife {
    pub requests_asked: u64,
    pub requests_run: u64,
    /// What ended the run that was asked for.
    pub ended_by: String,
}

impl MediaRun {
    /// The figures of `device` (media on) and of the recording `rec`.
    pub fn of(device: &DeviceConfig, rec: &crate::Recording) -> Option<MediaRun> {
        let m = device.media.as_ref()?;
        Some(MediaRun {
            part: m.part.clone(),
            wear: m.initial_pe as f64 / m.endurance as f64,
            power_off_days: m.power_off_s as f64 / 86_400.0,
            recorded: rec.media.clone().unwrap_or_default(),
            end_of_life: None,
        })
    }
}

/// Fewest measured requests a run is cut down to before the end of the media's life is
/// reported as the campaign's error.
const SHORTEST_RUN: u64 = 16;

/// Records `cfg`'s run; when the media ends it ([`crate::CampaignError::EndOfLife`]), records
/// the same seed with half the requests until a run fits in the device's life. Returns the
/// config that was recorded, the recording, and the end of life met on the way.
pub fn record_within_life(
    cfg: &crate::CampaignConfig,
) -> Result<(crate::CampaignConfig, crate::Recording, Option<EndOfLife>), crate::CampaignError> {
    let mut run = cfg.clone();
    let mut ended: Option<EndOfLife> = None;
    loop {
        match crate::record(&run) {
            Ok(rec) => return Ok((run, rec, ended)),
            Err(crate::CampaignError::EndOfLife(e)) if run.workload.requests > SHORTEST_RUN => {
                let eol = ended.get_or_insert_with(|| EndOfLife {
                    requests_asked: cfg.workload.requests,
                    requests_run: 0,
                    ended_by: e.to_string(),
                });
                run.workload.requests /= 2;
                eol.requests_run = run.workload.requests;
            }
            Err(e) => return Err(e),
        }
    }
}

/// The media model's negative control: `cfg`'s soak with a controller that hands on data the
/// ECC did not correct, its bits flipped, instead of failing the read (`hand_uncorrectable`) —
/// every design then passes wrong bytes to the host or to its own recovery. Judged by each
/// design's own promise, it must be caught. `None` with the media model off.
pub fn control(cfg: &crate::soak::SoakConfig) -> Option<crate::soak::SoakConfig> {
    let mut control = cfg.clone();
    control.media.as_mut()?.hand_uncorrectable = true;
    Some(control)
}
