//! # mobius-dftl: DFTL, the page-level baseline
//!
//! See [`dftl::Dftl`] for the design and `docs/dftl.md` for how it survives power cuts.

pub mod cmt;
#[allow(clippy::module_inception)]
pub mod dftl;
pub mod format;
pub mod layout;
pub mod mirror;
mod owners;

pub use dftl::{default_gc_free_blocks, min_gc_free_blocks, Dftl, DftlConfig};
use ftl::{BlockDevice, DesignOptions, DesignSpec, FtlError, Promise, RecoveryReport};

fn format(flash: flash::Flash, o: &DesignOptions) -> Result<Box<dyn BlockDevice>, FtlError> {
    Ok(Box::new(Dftl::format(flash, o)?))
}

fn recover(
    flash: flash::Flash,
    o: &DesignOptions,
) -> Result<(Box<dyn BlockDevice>, RecoveryReport), FtlError> {
    let (d, r) = Dftl::recover(flash, o)?;
    Ok((Box::new(d), r))
}

/// DFTL as the tools see it.
pub fn spec() -> DesignSpec {
    DesignSpec {
        name: "dftl",
        summary: "DFTL: demand-cached page mapping, checkpoints + OOB scan recovery (baseline)",
        promise: Promise::DurableWrites,
        oob_record_bytes: |_| format::OOB_BYTES,
        format_version: format::FORMAT_VERSION,
        format,
        recover,
        default_workload: "randwrite",
        soak_params: &[],
        over_provisioning: ftl::OverProvisioningKnob::Device,
    }
}
