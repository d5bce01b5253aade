//! # mobius-compare: the papers' experiments, side by side
//!
//! `mobius compare` runs each experiment on every design it applies to, with the same seeds, and
//! writes `report.md` (tables, and beside every figure the paper's claim with our measured number),
//! one SVG per figure and `results.json`. Every number in the report is measured in that run; the
//! papers' values are quoted as the papers', with section and figure.

pub mod campaigns;
pub mod claims;
pub mod commit_protocols;
pub mod error;
pub mod html;
pub mod lifetime;
pub mod macro_engines;
pub mod macro_sweeps;
pub mod macro_tx;
pub mod micro;
pub mod number;
pub mod nvmfs_exp;
pub mod optr_overhead;
pub mod optr_recovery;
pub mod optr_sqlite;
pub mod recovery;
pub mod report;
pub mod result;
pub mod robustness;
pub mod sqlite_exp;
pub mod summary;
pub mod svg;
pub mod tasks;
pub mod tornado;
pub mod txflash_macro;
pub mod unknowns;

pub use claims::{Check, Claim, Tolerance, Verdict};
use ftl::DesignSpec;
pub use report::{assemble_report, write_report};
pub use result::{ExperimentResult, Figure, Ran, Table};
pub use tasks::Cores;

#[derive(Debug, thiserror::Error)]
#[error("unknown scale '{0}' (quick, paper)")]
pub struct UnknownScale(pub String);

#[derive(Debug, thiserror::Error)]
#[error("unknown experiment '{name}'; known: {known}")]
pub struct UnknownExperiment {
    pub name: String,
    pub known: String,
}

/// How big the experiments are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scale {
    /// Minutes on a 2-core machine: fewer iterations, smaller devices where the figure allows.
    Quick,
    /// The papers' device sizes and run lengths.
    Paper,
}

impl Scale {
    pub fn parse(s: &str) -> Result<Scale, UnknownScale> {
        match s {
            "quick" => Ok(Scale::Quick),
            "paper" => Ok(Scale::Paper),
            _ => Err(UnknownScale(s.to_string())),
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Scale::Quick => "quick",
            Scale::Paper => "paper",
        }
    }
    /// Iterations per point of the micro benchmark (the paper: 50).
    pub fn micro_iterations(self) -> u32 {
        match self {
            Scale::Quick => 10,
            Scale::Paper => 50,
        }
    }
}

/// What every experiment gets.
pub struct Context<'a> {
    pub designs: Vec<DesignSpec>,
    pub scale: Scale,
    pub seed: u64,
    pub progress: &'a (dyn Fn(&str, u64, u64) + Sync),
    /// Where a long experiment logs its finished runs, and whether it resumes from them
    /// (`mobius compare --resume`; today the NVMFS experiment, `lab::run_log`).
    pub run_logs: Option<RunLogs>,
    /// The cores the experiments, and the independent runs inside them, share as tasks
    /// ([`Cores::serial`]: one after another; the figures are the same either way).
    pub cores: Cores,
    /// The point of the table of unknowns the experiments run at (`mobius compare --unknowns`;
    /// the defaults unless given), and the parameters they consulted ([`unknowns`]).
    pub unknowns: unknowns::Overrides,
}

/// [`Context::run_logs`]: a directory for the logs, and whether to reuse what they hold.
#[derive(Clone, Debug)]
pub struct RunLogs {
    pub dir: std::path::PathBuf,
    pub resume: bool,
}

impl Context<'_> {
    pub fn design(&self, name: &str) -> Option<&DesignSpec> {
        self.designs.iter().find(|d| d.name == name)
    }
    /// The design, or why a measurement that needs it cannot be made.
    pub fn built(&self, name: &str) -> error::Result<&DesignSpec> {
        self.design(name)
            .ok_or_else(|| error::MeasureError::NotBuilt(name.to_string()))
    }
    /// The preset `preset` at this run's point of the table of unknowns.
    pub fn device(&self, preset: &str) -> Result<flash::DeviceConfig, flash::ConfigError> {
        Ok(self.unknowns.device(flash::DeviceConfig::preset(preset)?))
    }
    /// The preset `preset` cut to `blocks_per_chip` blocks per chip (a quick-scale slice,
    /// `lab::device::preset_slice`), then put at this run's point of the table of unknowns: a
    /// page size of the point keeps the slice's capacity.
    pub fn device_slice(
        &self,
        preset: &str,
        blocks_per_chip: u32,
    ) -> Result<flash::DeviceConfig, flash::ConfigError> {
        let slice = lab::device::preset_slice(preset, blocks_per_chip)?;
        Ok(self.unknowns.device(slice))
    }
    /// `spec` formatted on a fresh in-memory device of `config`, with `options` at this run's
    /// point of the table of unknowns (`lab::device::fresh`).
    pub fn fresh(
        &self,
        spec: &DesignSpec,
        config: &flash::DeviceConfig,
        options: &ftl::DesignOptions,
        tag_only: bool,
    ) -> Result<Box<dyn ftl::BlockDevice>, ftl::FtlError> {
        let options = self
            .unknowns
            .options(spec, &config.geometry, options.clone());
        lab::device::fresh(spec, config, &options, tag_only)
    }
    /// `mode`'s design on a fresh tag-only device of `config`, loaded with `wl`'s database,
    /// then `clients` clients committing `wl`'s transactions (`lab::driver::clients`).
    pub fn run_clients(
        &self,
        mode: &lab::driver::clients::CommitMode,
        wl: &workload::TxWorkload,
        config: &flash::DeviceConfig,
        clients: usize,
    ) -> error::Result<lab::driver::clients::Outcome> {
        self.run_clients_with(mode, wl, config, clients, &ftl::DesignOptions::default())
    }
    /// [`Context::run_clients`] with design options (a sensitivity run that changes one
    /// parameter).
    pub fn run_clients_with(
        &self,
        mode: &lab::driver::clients::CommitMode,
        wl: &workload::TxWorkload,
        config: &flash::DeviceConfig,
        clients: usize,
        options: &ftl::DesignOptions,
    ) -> error::Result<lab::driver::clients::Outcome> {
        let spec = self.built(mode.design)?;
        let dev = self.fresh(spec, config, options, true)?;
        Ok(lab::driver::clients::run(dev, mode.swrite, wl, clients)?)
    }
}

/// An experiment: id (for `--only`), the function that runs it, and what its quick scale runs.
pub struct Experiment {
    pub id: &'static str,
    pub run: fn(&Context) -> ExperimentResult,
    /// What the quick scale runs, against the paper scale (the report says it beside the
    /// experiment, with the command that runs the rest); `None`: the same at both scales.
    pub quick_scale: Option<&'static str>,
    /// Its wall time at quick scale, alone on the 2-core machine (seconds; measured one at a
    /// time on 2026-12-07 beside other jobs, load ~8): its task's priority, so the longest
    /// start first. NVMFS's is its runs' coordinator's (they are tasks of their own).
    pub quick_seconds: u64,
    /// Its figures are measured on the wall clock: it runs with no other task beside it.
    pub alone: bool,
}

/// Every experiment, in report order.
pub fn experiments() -> Vec<Experiment> {
    let e = |id, run, quick_scale: &'static str, quick_seconds| Experiment {
        id,
        run,
        quick_scale: Some(quick_scale),
        quick_seconds,
        alone: false,
    };
    vec![
        e(
            "micro",
            micro::run,
            "10 iterations per point (the paper: 50)",
            48,
        ),
        e(
            "macro",
            macro_tx::run,
            "a 1 GiB slice of the jasmine device (128 blocks per chip; the paper's 64 GB) and a \
             2 GiB one of jasmine-8k (as many 8 KB pages), at most 24 TPC-C warehouses and \
             20,000 transactions (1,000 and 200,000), the ext4 trace replayed 10 times (100)",
            24,
        ),
        e(
            "recovery",
            recovery::run,
            "the paper's sizes; Möbius's active ALA up to 128 MB on the scanning-zone figure \
             (512 MB)",
            45,
        ),
        e(
            "macro-engines",
            macro_engines::run,
            "each trace replayed once (5 times), on a 1 GiB slice of the jasmine device (64 GB)",
            22,
        ),
        e(
            "commit",
            commit_protocols::run,
            "64 MiB written per commit size (1 GiB) and 2,000 transactions per abort rate \
             (20,000)",
            5,
        ),
        e(
            "txflash-macro",
            txflash_macro::run,
            "each benchmark replayed twice (10 times)",
            2,
        ),
        e(
            "optr",
            optr_overhead::run,
            "the paper's geometry cut to 4 GB (128 blocks per chip), 90 % filled, 1 GB written \
             per point (the paper's 128 GB, 4 GB per point); recovery time on 128 GB is graded \
             at the paper scale only",
            18,
        ),
        Experiment {
            alone: true,
            ..e("optr-sqlite", optr_sqlite::run, "10 s per bar (60 s)", 45)
        },
        e(
            "campaigns",
            campaigns::run,
            "500 crash instants per design and control (10,000)",
            40,
        ),
        e("nvmfs", nvmfs_exp::run, nvmfs_exp::QUICK_SCALE, 300),
        e(
            "lifetime",
            lifetime::run,
            "24 blocks per chip, 500-request steps, at most 200 drive writes (64, 2,000, 1,000)",
            30,
        ),
        e(
            "sqlite",
            sqlite_exp::run,
            "1,000 transactions on 2,000 accounts, 128 blocks per chip (10,000 on 10,000, 512)",
            5,
        ),
    ]
}

/// What [`run_observed`] reports as the experiments go (besides [`Context::progress`]).
#[derive(Clone, Copy, Debug)]
pub enum Event<'a> {
    /// The experiment got its core (every core, for one measured on the wall clock).
    Started { id: &'static str },
    /// It ended; its result, wall time included.
    Finished { result: &'a ExperimentResult },
}

/// Runs the experiments (all, or those named in `only`), as tasks on `ctx.cores`; the results
/// in report order.
pub fn run(ctx: &Context, only: &[String]) -> Result<Vec<ExperimentResult>, UnknownExperiment> {
    run_observed(ctx, only, &|_| {})
}

/// [`run`], telling `observe` when each experiment starts and ends.
pub fn run_observed(
    ctx: &Context,
    only: &[String],
    observe: &(dyn Fn(Event) + Sync),
) -> Result<Vec<ExperimentResult>, UnknownExperiment> {
    let all = experiments();
    for o in only {
        if !all.iter().any(|e| e.id == o) {
            let ids: Vec<&str> = all.iter().map(|e| e.id).collect();
            return Err(UnknownExperiment {
                name: o.clone(),
                known: ids.join(", "),
            });
        }
    }
    let tasks = all
        .iter()
        .filter(|e| only.is_empty() || only.iter().any(|o| o == e.id))
        .map(|e| tasks::Task {
            input: e,
            priority: e.quick_seconds,
        })
        .collect();
    Ok(ctx.cores.map(tasks, |e| run_one(ctx, e, observe)))
}

/// One experiment as a task: timed, its scale and the command for the rest noted.
fn run_one(ctx: &Context, e: &Experiment, observe: &(dyn Fn(Event) + Sync)) -> ExperimentResult {
    let measure = || {
        observe(Event::Started { id: e.id });
        let start = std::time::Instant::now();
        let mut r = (e.run)(ctx);
        r.ran.wall_s = start.elapsed().as_secs_f64();
        r.ran.scale = ctx.scale.name().to_string();
        r.ran.at_this_scale = match (ctx.scale, e.quick_scale) {
            (Scale::Quick, Some(quick)) => {
                r.ran.rest = Some(rest_command(e.id, ctx.seed));
                quick.to_string()
            }
            (Scale::Paper, Some(_)) => "the papers' device sizes and run lengths".into(),
            (_, None) => "the same at both scales (the paper's sizes)".into(),
        };
        observe(Event::Finished { result: &r });
        r
    };
    if e.alone {
        ctx.cores.run_alone(e.quick_seconds, measure)
    } else {
        measure()
    }
}

/// The command that runs experiment `id` at the paper scale.
pub fn rest_command(id: &str, seed: u64) -> String {
    let seed = if seed == 1 {
        String::new()
    } else {
        format!(" --seed {seed}")
    };
    format!("mobius compare --only {id} --scale paper{seed}")
}
