//! # mobius-ftl: what every design shares
//!
//! - [`device`]: the block-device interface every design implements, the transactional
//!   interface (static and dynamic transactions, abort, serializable read), design options,
//!   recovery reports and the [`DesignSpec`] the tools use to build and recover a design;
//! - [`host_interface`]: the one host model (link, command cost, staging buffer) every design
//!   the tools build sits behind;
//! - [`promise`]: the crash promises a design can declare;
//! - [`alloc`], [`validity`], [`space`]: block allocation across chips, page validity, greedy and
//!   cost-benefit GC, static wear leveling, over-provisioning;
//! - [`media`]: what a design does about worn media (reads the ECC could not correct, lost
//!   pages moved, a lost page told from a torn one);
//! - [`lru`], [`dirty`]: a least-recently-used order and dirty marks over a fixed table's
//!   indices; [`id_set`]: a set of ids kept as ranges (transaction uuids).

pub mod alloc;
pub mod device;
pub mod dirty;
pub mod error;
pub mod host_interface;
pub mod id_set;
pub mod lru;
pub mod media;
pub mod promise;
pub mod space;
pub mod validity;
pub mod wear_index;

pub use alloc::{
    gc_free_blocks, logical_pages, working_blocks, BlockPool, BlockState, ChipAllocation,
};
pub use device::{
    check_range, check_tx_room, require_spare_area, ArrivalClock, BlockDevice, Completion,
    DesignOptions, DesignSpec, DwriteFlag, OverProvisioningKnob, PageOutcome, RecoveryReport,
    SwriteMode, Transactional, TxCapabilities, TxCompletion, ACK_DEFERRED,
};
pub use dirty::DirtySet;
pub use error::{FtlError, InvariantViolation, TxUuid};
pub use host_interface::{HostLink, HostLinked};
pub use id_set::IdSet;
pub use lru::IndexLru;
pub use promise::{Promise, UnknownPromise};
pub use space::{GcPolicy, Moved, Space};
pub use validity::{OwnerOnFlash, Validity, NO_OWNER};
