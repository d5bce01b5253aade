//! The SSD under NVMFS: our emulated flash in a file (full data, so it persists), run by any
//! FTL design through `ftl::BlockDevice`.

use crate::error::Result;
use flash::{DeviceConfig, FileStore, Flash};
use ftl::{BlockDevice, DesignOptions, DesignSpec};
use std::path::Path;

/// Creates a fresh SSD image at `path` and formats `spec` on it.
pub fn create_ssd(
    path: &Path,
    config: &DeviceConfig,
    spec: &DesignSpec,
    options: &DesignOptions,
) -> Result<Box<dyn BlockDevice>> {
    let record = (spec.oob_record_bytes)(&config.geometry).min(config.geometry.oob_bytes);
    let store = FileStore::create(path, &config.geometry, record)?;
    let flash = Flash::new(config.clone(), Box::new(store));
    Ok((spec.format)(flash, options)?)
}

/// Opens an existing SSD image and recovers `spec` on it (`(spec.recover)(flash, options)`).
pub fn open_ssd(
    path: &Path,
    config: &DeviceConfig,
    spec: &DesignSpec,
    options: &DesignOptions,
) -> Result<Box<dyn BlockDevice>> {
    let record = (spec.oob_record_bytes)(&config.geometry).min(config.geometry.oob_bytes);
    let store = FileStore::open(path, &config.geometry, record)?;
    let flash = Flash::new(config.clone(), Box::new(store));
    Ok((spec.recover)(flash, options)?.0)
}
