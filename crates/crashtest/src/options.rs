//! The options of a crash campaign or a soak, as `mobius crashtest` and the Python package
//! give them, and the campaigns they describe: [`measure`] is what `--json` prints, without
//! printing. SQLite and NBD workloads, controls, replays and shrinking stay with the command
//! line (crates/cli), which prints as it goes.

use crate::prefix::CutModel;
use crate::soak::{self, Shape, SoakConfig};
use crate::CampaignConfig;
use ftl::{DesignOptions, DesignSpec, Promise};
use lab::bench::WorkloadOptions;
use lab::device::Recipe;

/// A crash campaign, or a soak of many (`mobius crashtest`, the Python package's `crashtest`):
/// the design, device, workload and promise, the crash points and how they are cut.
#[derive(Debug, Clone)]
#[cfg_attr(feature = "clap", derive(clap::Args))]
pub struct CrashtestOptions {
    /// Design (`mobius info --list`); a soak also takes `all` or a comma-separated list.
    #[cfg_attr(feature = "clap", arg(long))]
    pub ftl: String,
    #[cfg_attr(feature = "clap", command(flatten))]
    pub device: Recipe,
    #[cfg_attr(feature = "clap", command(flatten))]
    pub media: crate::media::MediaRecipe,
    #[cfg_attr(feature = "clap", command(flatten))]
    pub workload: WorkloadOptions,
    /// Design parameter, `--param key=value` (repeatable).
    #[cfg_attr(feature = "clap", arg(long = "param", value_name = "KEY=VALUE"))]
    pub params: Vec<String>,
    /// Crash instants to try (ignored with --exhaustive).
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 1000))]
    pub crash_points: usize,
    /// Seed (default 1); with --seeds, the first of N consecutive seeds (default: fresh random
    /// seeds, each printed).
    #[cfg_attr(feature = "clap", arg(long))]
    pub seed: Option<u64>,
    /// Soak: run N seeds, each choosing its workload shape, queue depth, fill, geometry, flash
    /// timing, run length and (one seed in four) the lowest over-provisioning each design takes.
    #[cfg_attr(feature = "clap", arg(long))]
    pub seeds: Option<usize>,
    /// Soak: campaigns run at once (default: every core).
    #[cfg_attr(feature = "clap", arg(long))]
    pub jobs: Option<usize>,
    /// Soak: keep the given (or default) device and workload for every seed instead of varying
    /// (without --workload, each design runs its own default workload).
    #[cfg_attr(feature = "clap", arg(long))]
    pub fixed: bool,
    /// Reduce a failing run to the smallest that still fails, and print its replay command.
    #[cfg_attr(feature = "clap", arg(long))]
    pub shrink: bool,
    /// Soak the negative controls (known-bad configurations): each must be caught.
    #[cfg_attr(feature = "clap", arg(long))]
    pub controls: bool,
    /// Also tear the operations running at each crash instant.
    #[cfg_attr(feature = "clap", arg(long))]
    pub torn: bool,
    /// Every instant between consecutive flash operations (small runs only).
    #[cfg_attr(feature = "clap", arg(long))]
    pub exhaustive: bool,
    /// Judge against this promise instead of the design's own (negative controls).
    #[cfg_attr(feature = "clap", arg(long))]
    pub promise: Option<String>,
    /// Worker threads of a single campaign (default 2; a soak runs `--jobs` cells of one thread).
    #[cfg_attr(feature = "clap", arg(long))]
    pub threads: Option<usize>,
    /// Keep full page data instead of content tags.
    #[cfg_attr(feature = "clap", arg(long))]
    pub full_data: bool,
    /// Rebuild and judge only the image at this instant (from a violation's replay command).
    #[cfg_attr(feature = "clap", arg(long))]
    pub replay_instant: Option<u64>,
    /// SQLite workloads (`--workload sqlite-tpcb|sqlite-kv|sqlite-tpcc`): batch, journal, wal,
    /// ordered, nobarrier [default: batch]; a SQLite soak (`--workload sqlite` or `--seeds`)
    /// draws only commit paths of this mode
    #[cfg_attr(feature = "clap", arg(long))]
    pub mode: Option<String>,
    /// SQLite workloads: PRAGMA synchronous (default EXTRA for journal/ordered, else FULL); a
    /// SQLite soak draws only commit paths with it
    #[cfg_attr(feature = "clap", arg(long))]
    pub synchronous: Option<String>,
    /// SQLite workloads: batch commits as static (SWRITE) or dynamic (DWRITE) transactions
    /// [default: static]; a SQLite soak draws only commit paths with it
    #[cfg_attr(feature = "clap", arg(long))]
    pub tx: Option<String>,
    /// Second lives: after each of N cuts of the run, the recovered device runs on (a quarter of
    /// the requests) and is cut again; cuts during that recovery are tried too.
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 0))]
    pub second_lives: usize,
    /// NBD workload (`--workload nbd`): every write one synchronous transaction, as `mobius
    /// serve --atomic-requests` applies it; a soak runs only such exports.
    #[cfg_attr(feature = "clap", arg(long))]
    pub atomic_requests: bool,
    /// NBD workload with --atomic-requests: read with plain reads, not SREADs (a negative
    /// control: a read-modify-write can then put old sectors back).
    #[cfg_attr(feature = "clap", arg(long))]
    pub plain_reads: bool,
    /// With --replay-instant: the instant lies in the second life after this first cut
    /// (`NS` or `NS:torn`, from a violation's replay command).
    #[cfg_attr(feature = "clap", arg(long))]
    pub first_cut: Option<String>,
    /// Soak: draw only this workload shape (repeatable: txmix, randwrite-flush, large-tx,
    /// abort-heavy, trim-heavy, interleaved); designs that support none of them are left out.
    #[cfg_attr(feature = "clap", arg(long = "shape", value_name = "SHAPE"))]
    pub shapes: Vec<String>,
    /// How crash images are cut: `instant` (a power cut at a simulated instant: the operations
    /// completed by then) or `prefix` (a killed process, `kill -9`: the first N image writes in
    /// the order they were issued, the next one torn with --torn); with `prefix`,
    /// --replay-instant and --first-cut count image writes [default: instant]
    #[cfg_attr(feature = "clap", arg(long, value_name = "MODEL"))]
    pub cut_model: Option<String>,
}

/// Why the options describe no campaign that can run.
#[derive(Debug, thiserror::Error)]
pub enum OptionsError {
    /// Options given to a soak that it would not use (the Python binding raises
    /// `ConfigError`): refused rather than silently ignored.
    #[error("{0}")]
    UnusedBySoak(String),
    #[error("share {part} of {parts} does not exist")]
    NoSuchShare { part: usize, parts: usize },
    #[error("shares split one campaign: no --seeds, --ftl all, a design list or --second-lives")]
    SharesOfASoak,
    #[error("unknown shape '{shape}'; shapes: {known}")]
    UnknownShape { shape: String, known: String },
    #[error("no design of {designs} supports the shape{plural} {shapes}")]
    NoDesignForShapes {
        designs: String,
        plural: &'static str,
        shapes: String,
    },
    #[error(transparent)]
    UnknownDesign(#[from] lab::registry::UnknownDesign),
    #[error(transparent)]
    Device(#[from] lab::device::RecipeError),
    #[error(transparent)]
    Media(#[from] crate::media::MediaRecipeError),
    #[error(transparent)]
    Workload(#[from] workload::WorkloadError),
    #[error(transparent)]
    Design(#[from] ftl::FtlError),
    #[error(transparent)]
    Promise(#[from] ftl::UnknownPromise),
    #[error(transparent)]
    CutModel(#[from] crate::prefix::UnknownCutModel),
    #[error(transparent)]
    Campaign(#[from] crate::CampaignError),
    #[error("a campaign share: {0}")]
    Share(#[from] serde_json::Error),
}

type Result<T> = std::result::Result<T, OptionsError>;

/// What `--json` prints for a single campaign, or for a soak (`seeds` given or `ftl` = `all`),
/// without printing: the library entry point of the Python package. SQLite and NBD workloads,
/// controls, replays and shrinking stay command-line only.
pub fn measure(args: &CrashtestOptions) -> Result<serde_json::Value> {
    if is_soak(args) {
        let cfg = soak_config(args, lab::registry::named(&args.ftl)?)?;
        return Ok(soak::run_soak(&cfg, &|_| {}).to_json());
    }
    let cfg = single_config(args, lab::registry::find(&args.ftl)?)?;
    let cut = cut_model(args)?;
    let (report, lives) =
        crate::second_life::run_campaign_cut(&cfg, args.second_lives, cut, &|_, _| {})?;
    let mut v = report.to_json();
    v["second_lives"] = serde_json::json!(lives);
    if cut != CutModel::Instant {
        v["cut_model"] = serde_json::json!(cut.name());
    }
    Ok(v)
}

/// Share `part` of `parts` of the single campaign `args` describe (for running one campaign's
/// crash points on several workers; the recording is repeated by each, deterministic from the
/// seed), as JSON for [`merge_shares`].
pub fn measure_share(
    args: &CrashtestOptions,
    part: usize,
    parts: usize,
) -> Result<serde_json::Value> {
    if parts == 0 || part >= parts {
        return Err(OptionsError::NoSuchShare { part, parts });
    }
    if is_soak(args) || args.second_lives > 0 {
        return Err(OptionsError::SharesOfASoak);
    }
    let cfg = single_config(args, lab::registry::find(&args.ftl)?)?;
    let rec = crate::record(&cfg)?;
    let cut = cut_model(args)?;
    let share = crate::run_recorded_part(&cfg, &rec, cut, (part, parts), &|_, _| {});
    Ok(serde_json::to_value(share)?)
}

/// The report of the whole campaign from all its shares: the same as one process gives
/// (`wall_s` aside, which is `wall_s` here).
pub fn merge_shares(
    args: &CrashtestOptions,
    shares: Vec<serde_json::Value>,
    wall_s: f64,
) -> Result<serde_json::Value> {
    let cfg = single_config(args, lab::registry::find(&args.ftl)?)?;
    let parts = shares
        .into_iter()
        .map(serde_json::from_value)
        .collect::<std::result::Result<Vec<crate::CampaignPart>, _>>()?;
    let report = crate::merge_parts(&cfg, parts, wall_s)?;
    let mut v = report.to_json();
    v["second_lives"] = serde_json::json!(0);
    Ok(v)
}

/// The campaign the flags describe (the CLI's defaults: 3,000 requests after an 80 % fill).
pub fn single_config(args: &CrashtestOptions, design: DesignSpec) -> Result<CampaignConfig> {
    let seed = args.seed.unwrap_or(1);
    let device = crate::with_media_seed(media_device(args, &design)?, seed);
    let mut workload = args.workload.resolve(design.default_workload)?;
    if args.workload.requests.is_none() {
        workload.requests = soak::BASE_REQUESTS;
    }
    if args.workload.fill.is_none() {
        workload.fill = 0.8;
    }
    let promise = match &args.promise {
        Some(p) => Promise::parse(p)?,
        None => design.promise,
    };
    Ok(CampaignConfig {
        design,
        options: DesignOptions::from_pairs(&args.params)?,
        device,
        workload,
        seed,
        crash_points: args.crash_points,
        torn: args.torn,
        exhaustive: args.exhaustive,
        promise,
        threads: args.threads.unwrap_or(2),
        tag_only: !args.full_data,
    })
}

/// The device for `design` with the media model as `--media` says: `--set media.*` applies
/// once the model is on.
pub fn media_device(args: &CrashtestOptions, design: &DesignSpec) -> Result<flash::DeviceConfig> {
    let (media, rest) = crate::media::split_overrides(&args.device.overrides);
    let recipe = Recipe {
        overrides: rest,
        ..args.device.clone()
    };
    Ok(args.media.apply(recipe.resolve_for(design)?, &media)?)
}

/// The cut model `--cut-model` names (instant when not given).
pub fn cut_model(args: &CrashtestOptions) -> Result<CutModel> {
    Ok(match &args.cut_model {
        Some(name) => CutModel::parse(name)?,
        None => CutModel::Instant,
    })
}

/// `--workload sqlite-W`: `Some(Some(W))`; `--workload sqlite` (a soak that draws the
/// workload): `Some(None)`; another workload: `None`.
pub fn sqlite_workload(args: &CrashtestOptions) -> Option<Option<&str>> {
    match args.workload.workload.as_deref()? {
        "sqlite" => Some(None),
        w => w.strip_prefix("sqlite-").map(Some),
    }
}

/// A soak: `--seeds`, or more than one design (`all`, or a comma-separated list).
pub fn is_soak(args: &CrashtestOptions) -> bool {
    args.seeds.is_some() || args.ftl == "all" || args.ftl.contains(',')
}

/// A soak's options that it would not use, as an error rather than silently: without
/// `--fixed` every seed chooses its own device and workload, and every cell runs tag-only on
/// sampled instants, whatever the command line says.
fn check_soak_options(args: &CrashtestOptions) -> Result<()> {
    if !args.fixed {
        let varied: Vec<&str> = [args.device.given(), args.workload.given()].concat();
        if !varied.is_empty() {
            return Err(OptionsError::UnusedBySoak(format!(
                "a soak chooses the device and workload of each seed, so it would ignore {}: \
                 add --fixed to run every seed on them",
                varied.join(", ")
            )));
        }
    }
    if args.fixed && !args.shapes.is_empty() {
        return Err(OptionsError::UnusedBySoak(
            "--shape chooses among the shapes a varying soak draws; --fixed runs the given \
             workload"
                .into(),
        ));
    }
    let single = lab::flags_given([
        ("--exhaustive", args.exhaustive),
        ("--full-data", args.full_data),
        ("--replay-instant", args.replay_instant.is_some()),
        ("--first-cut", args.first_cut.is_some()),
        ("--threads", args.threads.is_some()),
    ]);
    if !single.is_empty() {
        return Err(OptionsError::UnusedBySoak(format!(
            "{} {} to a single campaign (one design, no --seeds), not to a soak",
            single.join(", "),
            if single.len() == 1 {
                "applies"
            } else {
                "apply"
            }
        )));
    }
    Ok(())
}

pub fn soak_config(args: &CrashtestOptions, designs: Vec<DesignSpec>) -> Result<SoakConfig> {
    check_soak_options(args)?;
    let options = DesignOptions::from_pairs(&args.params)?;
    let (shapes, designs) = shapes_and_designs(&args.shapes, designs, &options)?;
    let seeds = soak_seeds(args);
    // Each design on its own default workload unless --workload names one for all of them
    // (the first design's would be a workload the others may not run).
    let fixed = match args.fixed {
        true => designs
            .iter()
            .map(|d| single_config(args, d.clone()).map(|c| (c.workload, c.device)))
            .collect::<Result<Vec<_>>>()?,
        false => Vec::new(),
    };
    let media = match designs.first() {
        Some(d) => media_device(args, d)?.media,
        None => None,
    };
    Ok(SoakConfig {
        designs,
        promise: args.promise.as_deref().map(Promise::parse).transpose()?,
        options,
        seeds,
        crash_points: args.crash_points,
        torn: args.torn,
        jobs: args
            .jobs
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get())),
        vary: !args.fixed,
        shapes,
        second_lives: args.second_lives,
        fixed,
        media,
        cut: cut_model(args)?,
    })
}

/// The shapes `--shape` names, and the designs that support at least one of them (all of
/// them when no shape is named).
fn shapes_and_designs(
    names: &[String],
    designs: Vec<DesignSpec>,
    options: &DesignOptions,
) -> Result<(Vec<Shape>, Vec<DesignSpec>)> {
    let shapes = names
        .iter()
        .map(|n| {
            Shape::named(n).ok_or_else(|| {
                let known: Vec<&str> = Shape::ALL.iter().map(|s| s.name()).collect();
                OptionsError::UnknownShape {
                    shape: n.clone(),
                    known: known.join(", "),
                }
            })
        })
        .collect::<Result<Vec<Shape>>>()?;
    if shapes.is_empty() {
        return Ok((shapes, designs));
    }
    let names: Vec<&str> = designs.iter().map(|d| d.name).collect();
    let suited: Vec<DesignSpec> = designs
        .into_iter()
        .filter(|d| {
            let caps = crate::soak::capabilities(d, options);
            shapes.iter().any(|s| s.supported_by(caps))
        })
        .collect();
    if suited.is_empty() {
        return Err(OptionsError::NoDesignForShapes {
            designs: names.join(", "),
            plural: if shapes.len() == 1 { "" } else { "s" },
            shapes: shape_list(&shapes),
        });
    }
    Ok((shapes, suited))
}

fn shape_list(shapes: &[Shape]) -> String {
    shapes
        .iter()
        .map(|s| s.name())
        .collect::<Vec<_>>()
        .join(", ")
}

/// `--seeds N` consecutive seeds from `--seed`, or N fresh ones (printed) without it.
pub fn soak_seeds(args: &CrashtestOptions) -> Vec<u64> {
    let n = args.seeds.unwrap_or(1);
    match args.seed {
        Some(s) => (0..n as u64).map(|i| s + i).collect(),
        None => {
            let s = soak::fresh_seeds(n);
            eprintln!("crashtest: fresh seeds {s:?}");
            s
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(ftl: &str) -> CrashtestOptions {
        CrashtestOptions {
            ftl: ftl.into(),
            device: Recipe::preset("small"),
            media: crate::media::MediaRecipe::default(),
            workload: WorkloadOptions::default(),
            params: Vec::new(),
            crash_points: 10,
            seed: Some(1),
            seeds: None,
            jobs: None,
            fixed: false,
            shrink: false,
            controls: false,
            torn: false,
            exhaustive: false,
            promise: None,
            threads: None,
            full_data: false,
            replay_instant: None,
            mode: None,
            synchronous: None,
            tx: None,
            second_lives: 0,
            atomic_requests: false,
            plain_reads: false,
            first_cut: None,
            shapes: Vec::new(),
            cut_model: None,
        }
    }

    /// Options a soak would not use, shares of a soak or of no campaign, and unknown names are
    /// typed errors, not campaigns run on something else than asked.
    #[test]
    fn options_that_describe_no_campaign_are_typed_errors() {
        let mut soak = options("all");
        soak.device.preset = "txflash".into();
        assert!(matches!(measure(&soak), Err(OptionsError::UnusedBySoak(_))));
        assert!(matches!(
            measure_share(&options("dftl"), 2, 2),
            Err(OptionsError::NoSuchShare { part: 2, parts: 2 })
        ));
        assert!(matches!(
            measure_share(&options("all"), 0, 2),
            Err(OptionsError::SharesOfASoak)
        ));
        let mut shaped = options("dftl,optr");
        shaped.shapes = vec!["no-such-shape".into()];
        assert!(matches!(
            measure(&shaped),
            Err(OptionsError::UnknownShape { .. })
        ));
        assert!(matches!(
            measure(&options("no-such-design")),
            Err(OptionsError::UnknownDesign(_))
        ));
        let mut promise = options("dftl");
        promise.promise = Some("no-such-promise".into());
        assert!(matches!(measure(&promise), Err(OptionsError::Promise(_))));
        let mut cut = options("dftl");
        cut.cut_model = Some("kill".into());
        assert!(matches!(measure(&cut), Err(OptionsError::CutModel(_))));
    }
}
