//! The `mobius` program's commands as a library: the binary (`src/main.rs`) parses the command
//! line into these argument structs, and the Python package (`python/`) fills the same structs
//! from keyword arguments, so both front ends run one code path.

pub mod bench;
pub mod bench_designs;
pub mod bench_scale;
pub mod compare_cmd;
pub mod compare_progress;
pub mod compare_robust;
pub mod crash_args;
pub mod crash_bench;
pub mod crash_summary;
pub mod crashtest_cmd;
pub mod info;
pub mod nbd_backend;
pub mod nbd_crash_cmd;
pub mod nvmfs_cmd;
pub mod power_cut;
pub mod progress;
pub mod python;
pub mod replay;
pub mod serve;
pub mod sql_cmd;
pub mod sql_crash_cmd;
