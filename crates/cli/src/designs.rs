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

#[cfg(test)]
mod tests {
    use super::*;
    use flash::{DeviceConfig, Flash};
    use ftl::{DesignOptions, FtlError};

    fn format_on(design: &DesignSpec, oob_bytes: u32) -> Result<(), FtlError> {
        let mut device = DeviceConfig::preset("small").expect("small preset");
        device.geometry.oob_bytes = oob_bytes;
        let flash = Flash::in_memory(device.clone(), design.oob_record(&device.geometry), true);
        (design.format)(flash, &DesignOptions::default()).map(drop)
    }

    /// A spare area smaller than a design's OOB record is refused at format, by every design,
    /// with a typed error naming both sizes. Before, DFTL, wcache, OPTR and FAST formatted and
    /// then failed their first program as a broken flash rule ("an FTL bug").
    #[test]
    fn every_design_refuses_a_spare_area_too_small_for_its_record_at_format() {
        for design in all() {
            let needs = (design.oob_record_bytes)(&DeviceConfig::preset("small").unwrap().geometry);
            match format_on(&design, needs - 1) {
                Err(FtlError::SpareAreaTooSmall {
                    design: name,
                    needs: n,
                    has,
                }) => {
                    assert_eq!((name, n, has), (design.name, needs, needs - 1));
                }
                other => panic!(
                    "{}: {:?} with {} OOB bytes",
                    design.name,
                    other.err(),
                    needs - 1
                ),
            }
            assert!(
                format_on(&design, needs).is_ok(),
                "{} refuses a spare area of exactly its record ({needs} bytes)",
                design.name
            );
        }
    }
}
