//! NVMFS: a hybrid NVRAM + SSD file system (Qiu & Reddy, MSST 2013, §III).
//!
//! Metadata and hot data live on NVRAM (a memory-mapped file here); cold data is flushed, 512 KB
//! at a time, to fresh extents of the SSD (our emulated device, through `ftl::BlockDevice`),
//! which is never overwritten in place. See docs/nvmfs.md.

pub mod error;
pub mod fs;
pub mod fuse;
pub mod layout;
pub mod lru;
pub mod nvram;
pub mod ssd;

pub use error::{NvmfsError, Result};
pub use fs::{Attr, FsUsage, KillPoint, Nvmfs, NvmfsParams, NvmfsStats};
