//! A recorded run seen by one cut model ([`CutModel`]): what its crash points count (simulated
//! instants, or image writes in issue order), the host log the oracle judges them by (on that
//! clock), how its points are chosen and its images built, and the command that replays one.
//! Life one's campaign, its second lives and a replay run the same code on either model.

use crate::points::{self, CrashPoint, ImageBuilder, PointKind};
use crate::prefix::{CutModel, PrefixRun};
use crate::{CampaignConfig, Images, Recording};
use flash::{OpLog, Store};
use workload::HostLog;

/// A recording cut by one model.
pub(crate) enum CutRun<'r> {
    /// Power cuts at simulated instants: the recording's operations and host log, and when its
    /// host started (no cut before).
    Instant {
        ops: &'r OpLog,
        host: &'r HostLog,
        ready_ns: u64,
    },
    /// Prefixes of the image writes ([`crate::prefix`]).
    Prefix(PrefixRun<'r>),
}

impl<'r> CutRun<'r> {
    pub(crate) fn new(model: CutModel, rec: &'r Recording) -> CutRun<'r> {
        match model {
            CutModel::Instant => CutRun::Instant {
                ops: &rec.ops,
                host: &rec.host,
                ready_ns: rec.ready_ns,
            },
            CutModel::Prefix => CutRun::Prefix(PrefixRun::new(rec)),
        }
    }

    pub(crate) fn model(&self) -> CutModel {
        match self {
            CutRun::Instant { .. } => CutModel::Instant,
            CutRun::Prefix(_) => CutModel::Prefix,
        }
    }

    /// The host log on this model's clock: what the oracle judges a cut by.
    pub(crate) fn host(&self) -> &HostLog {
        match self {
            CutRun::Instant { host, .. } => host,
            CutRun::Prefix(run) => &run.clocked,
        }
    }

    /// A campaign's crash points: every one with `exhaustive`, else a sample, none before the
    /// formatted device was ready.
    pub(crate) fn choose_points(&self, cfg: &CampaignConfig) -> Vec<CrashPoint> {
        match self {
            CutRun::Instant {
                ops,
                host,
                ready_ns,
            } => {
                let mut points = if cfg.exhaustive {
                    points::exhaustive(ops, cfg.torn)
                } else {
                    points::sample(ops, host, cfg.crash_points, cfg.torn, cfg.seed, *ready_ns)
                };
                points.retain(|p| p.instant_ns >= *ready_ns);
                points
            }
            CutRun::Prefix(run) => crate::prefix::choose_points(cfg, run),
        }
    }

    /// `n` sampled points of a second life (this run) whose first cut was at `cut_ns` (the
    /// instant model samples from the first cut on, the prefix model from the second life's
    /// first write).
    pub(crate) fn sample_life(
        &self,
        n: usize,
        torn: bool,
        seed: u64,
        cut_ns: u64,
    ) -> Vec<CrashPoint> {
        match self {
            CutRun::Instant { ops, host, .. } => points::sample(ops, host, n, torn, seed, cut_ns),
            CutRun::Prefix(run) => run.sample(n, torn, seed, 0),
        }
    }

    /// A builder of this run's images for ascending points, on `base` (the recording's): each
    /// point's image and the instant the recovered device's clock starts at.
    pub(crate) fn images<'s>(&'s self, base: &dyn Store) -> Images<'s> {
        match self {
            CutRun::Instant { ops, .. } => {
                let mut builder = ImageBuilder::new(base, ops);
                Box::new(move |p: CrashPoint| {
                    (builder.image_at(p.instant_ns, p.torn), p.instant_ns)
                })
            }
            CutRun::Prefix(run) => {
                let mut images = run.images(base);
                Box::new(move |p: CrashPoint| {
                    let image = images.image_after(p.instant_ns, p.torn);
                    (image, run.clock_after(p.instant_ns, p.torn))
                })
            }
        }
    }

    /// The image of the single cut `(at, torn)` and its clock.
    pub(crate) fn image_of(&self, base: &dyn Store, at: u64, torn: bool) -> (Box<dyn Store>, u64) {
        self.images(base)(CrashPoint {
            instant_ns: at,
            torn,
            kind: PointKind::Spread,
        })
    }

    /// The command that replays the cut `(at, torn)` of a campaign.
    pub(crate) fn replay(&self, cfg: &CampaignConfig, at: u64, torn: bool) -> String {
        crate::replay_command(cfg, at, torn) + self.model().arg()
    }
}
