//! # mobius-lab: what every experiment, front end and test shares
//!
//! The layer between the designs (with the host layer, `host`) and the front ends (`mobius`'s
//! commands, the Python package, `compare`'s experiments, the NBD server, NVMFS), in one place
//! (docs/architecture.md):
//!
//! - [`kernel_stack`]: a design under a kernel file system (NBD export, nbdfuse, loop device,
//!   mkfs, mount, dirty limit, DRAM budget, teardown);
//! - [`run_log`]: a long campaign's log of finished runs, so it resumes where it stopped.

pub mod kernel_stack;
pub mod run_log;
