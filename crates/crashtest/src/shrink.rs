//! Shrinking a failing campaign to the smallest run that still fails.
//!
//! A violation found after 3,000 requests on a 16 MB device is hard to read; the same bug after
//! 40 requests is not. [`shrink`] tries smaller runs one knob at a time — fewer requests, no or
//! a smaller fill, queue depth 1, smaller requests, fewer blocks, fewer chips — keeps each
//! reduction under which some crash instant still violates the promise, and repeats until no
//! knob can shrink. A run small enough is checked exhaustively (every instant between flash
//! operations, torn too when the original was), so "still fails" does not depend on sampling.
//!
//! Under the image-prefix cut model ([`crate::prefix`]) the run shrinks the same way and each
//! candidate is cut by prefix (exhaustively: after every image write, each write torn too), so
//! the failure kept is a prefix cut, and the replay command names the model.

use crate::prefix::CutModel;
use crate::{record, replay_command, run_recorded_cut, CampaignConfig, CampaignError};

/// Runs with at most this many recorded flash operations are checked exhaustively.
pub const EXHAUSTIVE_MAX_OPS: usize = 6000;

/// The smallest failing run found.
#[derive(Clone)]
pub struct Shrunk {
    pub config: CampaignConfig,
    /// One failing crash instant of it.
    pub instant_ns: u64,
    pub torn: bool,
    pub violation: String,
    /// How the images were cut (`instant_ns` counts image writes under the prefix model).
    pub cut: CutModel,
    /// `mobius crashtest` command that replays that instant.
    pub replay: String,
    /// Each accepted reduction, in order ("requests 3000 → 1500", ...).
    pub steps: Vec<String>,
    /// Campaigns run while shrinking.
    pub campaigns: usize,
}

/// A failing cut of `cfg` by `cut`, if any: (instant or write count, torn, what).
fn first_failure(cfg: &CampaignConfig, cut: CutModel) -> Option<(u64, bool, String)> {
    let wall = std::time::Instant::now();
    let rec = record(cfg).ok()?;
    let check = CampaignConfig {
        exhaustive: rec.ops.ops.len() <= EXHAUSTIVE_MAX_OPS,
        threads: cfg.threads.max(2),
        ..cfg.clone()
    };
    let r = run_recorded_cut(&check, &rec, wall, cut, &|_, _| {});
    r.violations
        .first()
        .map(|v| (v.instant_ns, v.torn, v.what.clone()))
}

/// Candidate reductions of `c`: (description, smaller configuration).
fn candidates(c: &CampaignConfig) -> Vec<(String, CampaignConfig)> {
    let mut out = Vec::new();
    let mut push = |what: String, f: &dyn Fn(&mut CampaignConfig)| {
        let mut n = c.clone();
        f(&mut n);
        out.push((what, n));
    };
    let w = &c.workload;
    if w.requests > 8 {
        let half = w.requests / 2;
        push(format!("requests {} → {half}", w.requests), &|n| {
            n.workload.requests = half
        });
        let three_q = w.requests * 3 / 4;
        push(format!("requests {} → {three_q}", w.requests), &|n| {
            n.workload.requests = three_q
        });
    }
    if w.fill > 0.0 {
        push(format!("fill {} → 0", w.fill), &|n| n.workload.fill = 0.0);
        let half = (w.fill * 50.0).round() / 100.0;
        push(format!("fill {} → {half}", w.fill), &|n| {
            n.workload.fill = half
        });
    }
    if w.queue_depth > 1 {
        push(format!("queue depth {} → 1", w.queue_depth), &|n| {
            n.workload.queue_depth = 1
        });
    }
    if w.request_pages > 1 {
        let half = w.request_pages / 2;
        push(
            format!("request pages {} → {half}", w.request_pages),
            &|n| {
                n.workload.request_pages = half;
                n.workload.min_tx_pages = n.workload.min_tx_pages.min(half.max(1));
            },
        );
    }
    let g = &c.device.geometry;
    if g.blocks_per_chip > 8 {
        let half = g.blocks_per_chip / 2;
        push(
            format!("blocks per chip {} → {half}", g.blocks_per_chip),
            &|n| n.device.geometry.blocks_per_chip = half,
        );
    }
    if g.chips_per_channel > 1 {
        push(
            format!("chips per channel {} → 1", g.chips_per_channel),
            &|n| n.device.geometry.chips_per_channel = 1,
        );
    }
    if g.channels > 1 {
        let half = g.channels / 2;
        push(format!("channels {} → {half}", g.channels), &|n| {
            n.device.geometry.channels = half
        });
    }
    out
}

/// Shrinks a failing campaign whose images `cut` makes. `None` when `cfg` does not fail at all
/// (sampled or, if small, exhaustive); `budget` bounds the campaigns tried; `progress` hears
/// each accepted step.
pub fn shrink(
    cfg: &CampaignConfig,
    cut: CutModel,
    budget: usize,
    progress: &dyn Fn(&str),
) -> Result<Option<Shrunk>, CampaignError> {
    let mut campaigns = 1;
    let Some(mut failure) = first_failure(cfg, cut) else {
        return Ok(None);
    };
    let mut cur = cfg.clone();
    let mut steps = Vec::new();
    'outer: while campaigns < budget {
        for (what, cand) in candidates(&cur) {
            if campaigns >= budget {
                break 'outer;
            }
            campaigns += 1;
            if cand.device.validate().is_err() {
                continue;
            }
            if let Some(f) = first_failure(&cand, cut) {
                progress(&what);
                steps.push(what);
                cur = cand;
                failure = f;
                continue 'outer;
            }
        }
        break;
    }
    let (instant_ns, torn, violation) = failure;
    Ok(Some(Shrunk {
        replay: replay_command(&cur, instant_ns, torn) + cut.arg(),
        config: cur,
        cut,
        instant_ns,
        torn,
        violation,
        steps,
        campaigns,
    }))
}
