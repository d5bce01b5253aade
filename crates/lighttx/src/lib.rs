//! # mobius-lighttx: LightTx (Lu et al.), as the Möbius paper describes it
//!
//! Concurrent transactions with their id in every page's OOB, commit records, mappings persisted
//! at commit, and a sliding window of blocks (available + unavailable zones) that recovery scans.
//! Runs on the log engine of `mobius-atomic-write` ([`atomic_write::engine`]); see
//! [`lighttx::LightTx`] and `docs/lighttx.md`.

#[allow(clippy::module_inception)]
pub mod lighttx;

use ftl::{BlockDevice, DesignOptions, DesignSpec, FtlError, Promise, RecoveryReport};
pub use lighttx::LightTx;

fn format_fn(flash: flash::Flash, o: &DesignOptions) -> Result<Box<dyn BlockDevice>, FtlError> {
    Ok(Box::new(LightTx::format(flash, o)?))
}

fn recover_fn(
    flash: flash::Flash,
    o: &DesignOptions,
) -> Result<(Box<dyn BlockDevice>, RecoveryReport), FtlError> {
    let (d, r) = LightTx::recover(flash, o)?;
    Ok((Box::new(d), r))
}

/// LightTx as the tools see it.
pub fn spec() -> DesignSpec {
    DesignSpec {
        name: "lighttx",
        summary: "LightTx (Lu et al.): concurrent transactions, tx ids in the OOB, commit records, sliding zone window scanned at recovery",
        promise: Promise::AtomicTransactions,
        oob_record_bytes: |_| atomic_write::format::OOB_BYTES,
        format_version: atomic_write::format::FORMAT_VERSION,
        format: format_fn,
        recover: recover_fn,
        default_workload: "txmix",
        soak_params: &[],
        over_provisioning: ftl::OverProvisioningKnob::Param("over_provisioning"),
    }
}
