//! `mobius crashtest`'s arguments: the campaign's options (`crashtest::options`, which the
//! Python package fills too) and how to print the result.

use clap::Args;
use crashtest::options::CrashtestOptions;

#[derive(Args, Debug)]
pub struct CrashtestArgs {
    #[command(flatten)]
    pub options: CrashtestOptions,
    /// Benchmark: crash points per second per core of each design `--ftl` names (`all`), one
    /// campaign process per design and seed (`--seeds` consecutive seeds from `--seed`, default
    /// 1, 2, 3), torn, one thread, default workload, `--crash-points` each.
    #[arg(long)]
    pub bench: bool,
    /// Benchmark: the same campaigns of this other `mobius` binary (the commit before), in turn
    /// with this one's; their verdicts must agree.
    #[arg(long, value_name = "BINARY", requires = "bench")]
    pub vs: Option<std::path::PathBuf>,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// The campaign's options are read through the arguments (`args.ftl`, `args.seed`, ...).
impl std::ops::Deref for CrashtestArgs {
    type Target = CrashtestOptions;
    fn deref(&self) -> &CrashtestOptions {
        &self.options
    }
}
