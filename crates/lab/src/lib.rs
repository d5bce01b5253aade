//! # mobius-lab: what every experiment, front end and test shares
//!
//! The layer between the designs (with the host layer, `host`) and the front ends (`mobius`'s
//! commands, the Python package, `compare`'s experiments, the NBD server, NVMFS), in one place
//! (docs/architecture.md):
//!
//! - [`registry`]: every design by its `--ftl` name (its spec, promise, default workload);
//! - [`decoders`]: every on-flash decoder of every format, for the fuzzers;
//! - [`device`]: a design on a device of a given shape (a preset with overrides), on any store
//!   (tag-only, full data in memory, an image file), and recovered after a power cut;
//! - [`driver`]: the request driver over the host layer (closed loop, trace replay, and the
//!   experiments' own sequences): content tags, transaction ids, arrival clock;
//! - [`kernel_stack`]: a design under a kernel file system (NBD export, nbdfuse, loop device,
//!   mkfs, mount, dirty limit, DRAM budget, teardown);
//! - [`record`]: the requests a host hands a design, recorded as trace lines (an in-process
//!   front end's engine trace: `mobius sql-bench --trace`);
//! - [`run_log`]: a long campaign's log of finished runs, so it resumes where it stopped;
//! - [`bench`]: a benchmark run (a workload on a design, measured, cut and recovered), and the
//!   in-process peer that gives the simulator's speed as a ratio.
//!
//! The options of the runs a front end starts ([`device::Recipe`], [`bench::BenchOptions`]) take
//! `clap` attributes under the `clap` feature, so the command line and the Python package fill
//! the same structs.

pub mod bench;
pub mod decoders;
pub mod device;
pub mod driver;
pub mod kernel_stack;
pub mod record;
pub mod registry;
pub mod run_log;

/// The flags of `flags` whose paired condition holds (those given on the command line).
pub fn flags_given<const N: usize>(flags: [(&'static str, bool); N]) -> Vec<&'static str> {
    flags
        .into_iter()
        .filter_map(|(flag, given)| given.then_some(flag))
        .collect()
}
