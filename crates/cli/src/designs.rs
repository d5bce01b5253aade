//! The designs built so far, by `--ftl` name.

use ftl::DesignSpec;

/// Every design this build knows, in the order `mobius info --list` prints them.
pub fn all() -> Vec<DesignSpec> {
    vec![
        mftl::spec(),
        dftl::spec(),
        atomic_write::spec(),
        lighttx::spec(),
        txflash::spec_tc(),
        txflash::spec_scc(),
        txflash::spec_bpcc(),
        wcache::spec(),
        optr::spec(),
        fast::spec(),
    ]
}

pub fn find(name: &str) -> anyhow::Result<DesignSpec> {
    let designs = all();
    designs
        .iter()
        .find(|d| d.name == name)
        .cloned()
        .ok_or_else(|| {
            let names: Vec<&str> = designs.iter().map(|d| d.name).collect();
            anyhow::anyhow!(
                "unknown design '{name}'; built so far: {}",
                names.join(", ")
            )
        })
}
