//! # mobius-atomic-write: Atomic-Write (Ouyang et al.) and the log engine it shares with LightTx
//!
//! - [`format`]: every on-flash record (OOB record, translation/GTD pages, root, commit record);
//! - [`engine`]: the log-structured FTL both designs run on — copy-on-write mapping tree, root
//!   ring, window of blocks announced for the log tail, GC, recovery by tail scan;
//! - [`aw`]: Atomic-Write itself (one-bit commit flag, one transaction at a time).
//!
//! See `docs/atomic-write.md`.

pub mod aw;
pub mod engine;
pub mod format;

pub use aw::AtomicWrite;
use ftl::{BlockDevice, DesignOptions, DesignSpec, FtlError, Promise, RecoveryReport};

fn format_fn(flash: flash::Flash, o: &DesignOptions) -> Result<Box<dyn BlockDevice>, FtlError> {
    Ok(Box::new(AtomicWrite::format(flash, o)?))
}

fn recover_fn(
    flash: flash::Flash,
    o: &DesignOptions,
) -> Result<(Box<dyn BlockDevice>, RecoveryReport), FtlError> {
    let (d, r) = AtomicWrite::recover(flash, o)?;
    Ok((Box::new(d), r))
}

/// Atomic-Write as the tools see it.
pub fn spec() -> DesignSpec {
    DesignSpec {
        name: "atomic-write",
        summary: "Atomic-Write (Ouyang et al.): log-structured FTL, one-bit commit flag, one transaction at a time, mapping persisted at commit",
        promise: Promise::AtomicTransactions,
        oob_record_bytes: |_| format::OOB_BYTES,
        format_version: format::FORMAT_VERSION,
        format: format_fn,
        recover: recover_fn,
        default_workload: "txmix",
        soak_params: &[],
        over_provisioning: ftl::OverProvisioningKnob::Param("over_provisioning"),
    }
}
