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
    matches!(error, workload::WorkloadError::Request { source, .. }
        if host_ended_by_media(source, flash))
}

/// [`ended_by_media`] for a request the host layer failed (the NBD and SQLite campaigns, which
/// drive the host layer themselves).
///
/// The rule: a design's media error is accepted only where the media lost something of the
/// page it names that the design read — its data codewords, or its spare area alone (DFTL's
/// owner lookup reads only the record, `Flash::oob_record_decoded`) — and nothing else.
/// [`Flash::is_lost`] answers exactly that: a page read decodes the data and the spare area
/// (the model's `Codewords::Page`), so a spare area lost makes the page lost, by the model's
/// draws as by `Fault::ReadSpare` (tests `every_page_whose_spare_area_fails_is_lost`,
/// `a_media_loss_is_accepted_for_a_lost_spare_area_and_only_for_a_lost_page`). A `MediaLoss`
/// naming a page the media lost nothing of is the run's failure, judged as any other.
pub fn host_ended_by_media(error: &host::HostError, flash: &Flash) -> bool {
    host_ended_by_loss(error, |ppn| flash.is_lost(ppn))
}

/// [`host_ended_by_media`] with the evidence of which pages the media lost given as `lost`
/// (e.g. the pages the ECC found lost while a check ran, once the device is gone).
fn host_ended_by_loss(error: &host::HostError, lost: impl Fn(Ppn) -> bool) -> bool {
    matches!(error, host::HostError::Device(FtlError::MediaLoss { ppn, .. }) if lost(*ppn))
}

/// Whether a run that stopped at `error` reached the end of the media's life on `flash`: out of
/// spare blocks ([`FtlError::WornOut`]), or metadata the design cannot do without lost to the
/// media ([`ended_by_media`]).
pub fn end_of_life(error: &workload::WorkloadError, flash: &Flash) -> bool {
    matches!(error, workload::WorkloadError::Request { source, .. }
        if host_end_of_life(source, flash))
}

/// [`end_of_life`] for a request the host layer failed.
pub fn host_end_of_life(error: &host::HostError, flash: &Flash) -> bool {
    host_end_of_life_by(error, |ppn| flash.is_lost(ppn))
}

/// [`host_end_of_life`] with the evidence of which pages the media lost given as `lost`.
pub fn host_end_of_life_by(error: &host::HostError, lost: impl Fn(Ppn) -> bool) -> bool {
    matches!(error, host::HostError::Device(FtlError::WornOut(_)))
        || host_ended_by_loss(error, lost)
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
        MediaRun::new(device, rec.media.clone().unwrap_or_default())
    }

    /// The figures of `device` (media on) and of a recorded run whose media did `recorded`.
    pub fn new(device: &DeviceConfig, recorded: flash::MediaStats) -> Option<MediaRun> {
        let m = device.media.as_ref()?;
        Some(MediaRun {
            part: m.part.clone(),
            wear: m.initial_pe as f64 / m.endurance as f64,
            power_off_days: m.power_off_s as f64 / 86_400.0,
            recorded,
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
    let record = |requests| {
        let mut run = cfg.clone();
        run.workload.requests = requests;
        crate::record(&run).map(|rec| (run, rec))
    };
    let ended = |e: &crate::CampaignError| match e {
        crate::CampaignError::EndOfLife(e) => Some(e.to_string()),
        _ => None,
    };
    let ((run, rec), eol) = within_life(cfg.workload.requests, record, ended)?;
    Ok((run, rec, eol))
}

/// Runs `record` with `requests`; while it fails with an error `ended` calls the end of the
/// media's life (naming what ended it), again with half the requests, down to
/// [`SHORTEST_RUN`]. Returns what recorded and the end of life met on the way (every
/// campaign that records a run: the block devices', NBD's).
pub fn within_life<R, E>(
    requests: u64,
    mut record: impl FnMut(u64) -> Result<R, E>,
    ended: impl Fn(&E) -> Option<String>,
) -> Result<(R, Option<EndOfLife>), E> {
    let mut run = requests;
    let mut eol: Option<EndOfLife> = None;
    loop {
        let e = match record(run) {
            Ok(rec) => return Ok((rec, eol)),
            Err(e) => e,
        };
        match ended(&e) {
            Some(by) if run > SHORTEST_RUN => {
                let eol = eol.get_or_insert(EndOfLife {
                    requests_asked: requests,
                    requests_run: 0,
                    ended_by: by,
                });
                run /= 2;
                eol.requests_run = run;
            }
            _ => return Err(e),
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

/// The media model's flags of a campaign or soak (`--media`, `--wear`, `--power-off-days`);
/// its fields can be `--set` as `media.<field>` after `--media` switched it on.
#[derive(Clone, Debug, Default)]
#[cfg_attr(feature = "clap", derive(clap::Args))]
pub struct MediaRecipe {
    /// The media model (docs/reliability.md): bit errors, ECC, read retry and bad blocks of an
    /// `slc`, `mlc` or `tlc` part (off by default: the flash reads back what was programmed).
    /// Its fields can be `--set` as `media.<field>`.
    #[cfg_attr(feature = "clap", arg(long, value_name = "PART"))]
    pub media: Option<String>,
    /// With --media: P/E cycles every block had before the run, in multiples of the part's
    /// rated endurance (1.0: worn to its rating) [default: 0].
    #[cfg_attr(feature = "clap", arg(long, value_name = "MULTIPLE"))]
    pub wear: Option<f64>,
    /// With --media: days the device lies powered off after each power cut before recovery
    /// (every page ages by them) [default: 0].
    #[cfg_attr(feature = "clap", arg(long, value_name = "DAYS"))]
    pub power_off_days: Option<f64>,
}

/// Media flags that do not describe a model.
#[derive(Debug, thiserror::Error)]
pub enum MediaRecipeError {
    #[error("--wear and --power-off-days shape the media model: give --media PART")]
    NoPart,
    #[error("--wear and --power-off-days take numbers at least 0")]
    Negative,
    #[error(transparent)]
    Config(#[from] flash::ConfigError),
}

/// `--set` overrides split into the media model's (`media.*`, applied once the model is on)
/// and the rest.
pub fn split_overrides(overrides: &[String]) -> (Vec<String>, Vec<String>) {
    overrides
        .iter()
        .cloned()
        .partition(|o| o.trim_start().starts_with("media."))
}

impl MediaRecipe {
    /// The flags given.
    pub fn given(&self) -> Vec<&'static str> {
        lab::flags_given([
            ("--media", self.media.is_some()),
            ("--wear", self.wear.is_some()),
            ("--power-off-days", self.power_off_days.is_some()),
        ])
    }

    /// `device` with the model on as the flags say (unchanged without `--media`); its draws
    /// take seed 0 until a campaign sets its own ([`crate::with_media_seed`]). `--set media.*`
    /// overrides (in `overrides`) are applied after.
    pub fn apply(
        &self,
        device: DeviceConfig,
        overrides: &[String],
    ) -> Result<DeviceConfig, MediaRecipeError> {
        let Some(part) = &self.media else {
            if self.wear.is_some() || self.power_off_days.is_some() {
                return Err(MediaRecipeError::NoPart);
            }
            return Ok(device);
        };
        let wear = self.wear.unwrap_or(0.0);
        let days = self.power_off_days.unwrap_or(0.0);
        if !(wear.is_finite() && wear >= 0.0 && days.is_finite() && days >= 0.0) {
            return Err(MediaRecipeError::Negative);
        }
        let mut device = device.with_media(part, wear, 0)?;
        if let Some(m) = device.media.as_mut() {
            m.power_off_s = (days * 86_400.0).round() as u64;
        }
        let media_sets: Vec<String> = overrides
            .iter()
            .filter(|o| o.trim_start().starts_with("media."))
            .cloned()
            .collect();
        if media_sets.is_empty() {
            return Ok(device);
        }
        Ok(device.with_overrides(None, &media_sets)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `--media` switches the model on, `--wear` and `--power-off-days` shape it and `--set
    /// media.*` changes any field; either without `--media`, or an unknown part, is refused.
    #[test]
    fn the_media_flags_shape_the_model_and_bad_ones_are_refused() {
        let small = || DeviceConfig::preset("small").unwrap();
        let mut a = MediaRecipe {
            media: Some("tlc".into()),
            wear: Some(0.5),
            power_off_days: Some(2.0),
        };
        let sets = ["media.ecc.correctable_bits=40".to_string()];
        let m = a.apply(small(), &sets).unwrap().media.unwrap();
        assert_eq!(
            (m.part.as_str(), m.initial_pe, m.power_off_s),
            ("tlc", 500, 172_800)
        );
        assert_eq!(m.ecc.correctable_bits, 40);
        assert!(MediaRecipe::default()
            .apply(small(), &[])
            .unwrap()
            .media
            .is_none());
        a.media = None;
        assert!(a
            .apply(small(), &[])
            .unwrap_err()
            .to_string()
            .contains("--media"));
        a.media = Some("qlc".into());
        assert!(a.apply(small(), &[]).is_err());
        a.media = Some("mlc".into());
        a.wear = Some(-1.0);
        assert!(a.apply(small(), &[]).is_err());
    }
}
