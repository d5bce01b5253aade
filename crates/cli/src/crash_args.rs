//! `mobius crashtest`'s arguments: the campaign's options (`crashtest::options`, which the
//! Python package fills too) and how to print the result.

use clap::Args;
use crashtest::options::CrashtestOptions;

#[derive(Args, Debug)]
pub struct CrashtestArgs {
    #[command(flatten)]
    pub options: CrashtestOptions,
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
