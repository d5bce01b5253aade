//! # mobius-flash: the emulated NAND flash device
//!
//! Channels × chips × blocks × pages, each page a data area and an out-of-band (OOB) area; the
//! rules NAND imposes (erase before program, in-order programming inside a block, block erase,
//! atomic page program unless a power cut tears it); a timing model in which chips and channels
//! work in parallel; storage backends (tag-only, full data in memory, full data in a file); and
//! power cuts at any simulated instant (docs/presets.md, docs/crashtest.md).
//!
//! Layering follows MQSim: FTLs (crates `ftl`, `dftl`, …) call [`Flash`]; `Flash` checks the
//! rules, schedules the operation on its chip and channel, records it and hands it to a [`Store`].

pub mod codec;
pub mod content;
pub mod device;
pub mod error;
pub mod file;
pub mod geometry;
pub mod host;
pub mod image_lock;
pub mod media;
pub mod memory;
pub mod oob_run;
pub mod oplog;
pub mod prefetch;
pub mod preset;
pub mod squeeze;
pub mod stats;
pub mod store;
pub mod timing;
pub mod wear;
pub mod word_crc;

pub use content::{Content, ContentTag};
pub use device::{Flash, ReadStatus};
pub use error::{ConfigError, FlashError};
pub use file::{FileStore, ImageHeader, ImageIdentity};
pub use geometry::{BlockId, ChipId, Geometry, Lpn, Ppn};
pub use host::HostInterface;
pub use media::{Fault, MediaConfig};
pub use memory::{deque_bytes, resident_vec, vec_bytes};
pub use oob_run::OobRun;
pub use oplog::{LoggedOp, OpKind, OpLog};
pub use prefetch::DataHint;
pub use preset::{DeviceConfig, PRESET_NAMES};
pub use squeeze::OobSqueeze;
pub use stats::{FlashStats, MediaStats, OpCause};
pub use store::{flip_a_data_bit, MemStore, PageState, Store, TagStore};
pub use timing::{Bookings, ReadRun, Span, Timeline, Timing};
pub use word_crc::{WordCrc, WordEdit};
