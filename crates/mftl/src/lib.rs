//! # mobius-mftl: Möbius (mFTL)
//!
//! Atom inodes, the Atom Log Area, DAG commit, dynamic transactions via the Head List, chained
//! normal writes, Resident Area + translation pages, ALA merge, GC and fast recovery
//! (Möbius §III–IV). See `docs/mobius.md` for the design and every deviation from the paper.
//! `§III-C` and the like cite the Möbius paper; `decision M3` and the like cite the numbered
//! decisions we took where the paper is silent (docs/mobius.md, "Decisions where the paper is
//! silent").

pub mod config;
pub mod format;
#[allow(clippy::module_inception)]
pub mod mftl;
pub mod recovery;
#[cfg(test)]
mod tests;

pub use config::{default_gc_free_blocks, min_gc_free_blocks, InjectBug, MobiusConfig};
use ftl::{BlockDevice, DesignOptions, DesignSpec, FtlError, Promise, RecoveryReport};
pub use mftl::Mobius;

fn format(flash: flash::Flash, o: &DesignOptions) -> Result<Box<dyn BlockDevice>, FtlError> {
    Ok(Box::new(Mobius::format(flash, o)?))
}

fn recover(
    flash: flash::Flash,
    o: &DesignOptions,
) -> Result<(Box<dyn BlockDevice>, RecoveryReport), FtlError> {
    let (d, r) = Mobius::recover(flash, o)?;
    Ok((Box::new(d), r))
}

/// Möbius as the tools see it.
pub fn spec() -> DesignSpec {
    DesignSpec {
        name: "mobius",
        summary: "Möbius mFTL: atom inodes in the Atom Log Area, DAG commit, static/dynamic transactions, fast recovery",
        promise: Promise::AtomicTransactions,
        oob_record_bytes: |_| format::OOB_BYTES,
        format_version: format::FORMAT_VERSION,
        format,
        recover,
        default_workload: "txmix",
        // Half the seeds soak the ALA striped over four chips (the default where the ring has
        // room for it, e.g. `jasmine`; the soak's 16 MB geometries keep one).
        soak_params: &[&[], &[("ala_stripe", "4")]],
        over_provisioning: ftl::OverProvisioningKnob::Device,
    }
}
