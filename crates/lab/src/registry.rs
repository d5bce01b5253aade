//! The design registry: every design this build has, by its `--ftl` name. Each entry is the
//! design's [`DesignSpec`] (how to format and recover it, its promise, the workload that
//! exercises its whole interface, the parameters a soak varies); the command line, the Python
//! package, the experiments and the tests all read this one list.

use ftl::DesignSpec;

/// A design name this build does not have.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown design '{name}'; built so far: {known}")]
pub struct UnknownDesign {
    pub name: String,
    /// Every design's name, comma-separated.
    pub known: String,
}

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

/// Every design's name, in [`all`]'s order.
pub fn names() -> Vec<&'static str> {
    all().iter().map(|d| d.name).collect()
}

/// The design called `name`.
pub fn find(name: &str) -> Result<DesignSpec, UnknownDesign> {
    all()
        .into_iter()
        .find(|d| d.name == name)
        .ok_or_else(|| UnknownDesign {
            name: name.to_string(),
            known: names().join(", "),
        })
}

/// The designs a list names: `all` (every design, in [`all`]'s order) or names separated by
/// commas (those, in that order).
pub fn named(list: &str) -> Result<Vec<DesignSpec>, UnknownDesign> {
    if list == "all" {
        return Ok(all());
    }
    list.split(',').map(|n| find(n.trim())).collect()
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

    #[test]
    fn an_unknown_design_is_a_typed_error_naming_every_known_one() {
        let e = find("mobius2").err().expect("unknown");
        assert_eq!(e.name, "mobius2");
        for name in names() {
            assert!(e.known.contains(name), "{e}");
        }
        assert_eq!(find("fast").unwrap().name, "fast");
        let two: Vec<&str> = named("optr, dftl")
            .unwrap()
            .iter()
            .map(|d| d.name)
            .collect();
        assert_eq!(two, ["optr", "dftl"]);
        assert_eq!(named("all").unwrap().len(), names().len());
        assert_eq!(named("dftl,nope").err().expect("unknown").name, "nope");
        assert_eq!(names().len(), 10);
    }
}
