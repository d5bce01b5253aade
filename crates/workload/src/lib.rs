//! # mobius-workload: seeded host workloads
//!
//! [`WorkloadSpec`] names a workload and its knobs; [`Generator`] turns it into requests
//! ([`HostOp`]) with one seeded RNG (the same seed gives the same requests on every platform).
//! The lab's request driver (`lab::driver::run`) plays them against any design in simulated
//! time and records the [`HostLog`] the crash checker judges.

pub mod error;
pub mod gen;
pub mod op;
pub mod spec;
pub mod tpcc;
pub mod transactions;

pub use error::WorkloadError;
pub use gen::{Generator, Phase, View};
pub use op::{HostLog, HostOp, HostRecord};
pub use spec::{WorkloadSpec, WORKLOAD_NAMES};
pub use transactions::{TxWorkload, Txn};
