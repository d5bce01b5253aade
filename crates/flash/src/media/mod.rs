//! The media model: NAND that wears and errs (docs/reliability.md). Off unless
//! [`crate::DeviceConfig::media`] is set; the flash then reads back exactly what was programmed
//! and every figure is what it was without the model.
//!
//! - [`config`]: the parameters, the RBER power law and its published constants, the parts;
//! - [`ecc`]: bit errors per codeword, the ECC's verdict, read retry;
//! - [`plane`]: what the chips remember beyond data (program instants, reads, the bad-block
//!   table), kept in the store so crash images carry it;
//! - `controller`: reads through the ECC, bad-block replacement, read reclaim, fault injection.

pub mod config;
pub(crate) mod controller;
pub mod ecc;
pub mod plane;

pub use config::{Ecc, MediaConfig, Rber, RberModel, PART_NAMES};
pub use controller::{error_log, Fault};
pub use plane::{physical_geometry, BbtUpdate, BlockStatus, MediaPlane};

#[cfg(test)]
mod tests;
