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
pub mod macro_tx;
pub mod micro;
pub mod nvmfs_exp;
pub mod optr_overhead;
pub mod optr_recovery;
pub mod optr_sqlite;
pub mod recovery;
pub mod report;
pub mod sqlite_exp;
pub mod svg;
pub mod txflash_macro;

pub use claims::{Check, Claim, Tolerance, Verdict};
use ftl::DesignSpec;
pub use report::{assemble_report, write_report, ExperimentResult, Figure, Table};

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
    pub fn device(&self, preset: &str) -> Result<flash::DeviceConfig, flash::ConfigError> {
        flash::DeviceConfig::preset(preset)
    }
}

/// An experiment: id (for `--only`), and the function that runs it.
pub struct Experiment {
    pub id: &'static str,
    pub run: fn(&Context) -> ExperimentResult,
}

/// Every experiment, in report order.
pub fn experiments() -> Vec<Experiment> {
    vec![
        Experiment {
            id: "micro",
            run: micro::run,
        },
        Experiment {
            id: "macro",
            run: macro_tx::run,
        },
        Experiment {
            id: "recovery",
            run: recovery::run,
        },
        Experiment {
            id: "commit",
            run: commit_protocols::run,
        },
        Experiment {
            id: "txflash-macro",
            run: txflash_macro::run,
        },
        Experiment {
            id: "optr",
            run: optr_overhead::run,
        },
        Experiment {
            id: "optr-sqlite",
            run: optr_sqlite::run,
        },
        Experiment {
            id: "campaigns",
            run: campaigns::run,
        },
        Experiment {
            id: "nvmfs",
            run: nvmfs_exp::run,
        },
        Experiment {
            id: "sqlite",
            run: sqlite_exp::run,
        },
    ]
}

/// Runs the experiments (all, or those named in `only`).
pub fn run(ctx: &Context, only: &[String]) -> Result<Vec<ExperimentResult>, UnknownExperiment> {
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
    Ok(all
        .iter()
        .filter(|e| only.is_empty() || only.iter().any(|o| o == e.id))
        .map(|e| (e.run)(ctx))
        .collect())
}
