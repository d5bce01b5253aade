//! # mobius-workload: seeded host workloads and the closed-loop driver
//!
//! [`WorkloadSpec`] names a workload and its knobs; [`Generator`] turns it into requests with one
//! seeded RNG (the same seed gives the same requests on every platform); [`driver::run`] plays
//! them against any design in simulated time and records the [`HostLog`] the crash checker judges.

pub mod driver;
pub mod error;
pub mod gen;
pub mod op;
pub mod spec;

pub use driver::{run, run_from, Origin, RunResult, RunStats};
pub use error::WorkloadError;
pub use gen::{Generator, Phase, View};
pub use op::{HostLog, HostOp, HostRecord};
pub use spec::{WorkloadSpec, WORKLOAD_NAMES};
