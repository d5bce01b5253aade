//! The SSD under NVMFS: our emulated flash in a file (full data, so it persists), run by any
//! FTL design through `ftl::BlockDevice`.

use crate::error::Result;
use flash::DeviceConfig;
use ftl::{BlockDevice, DesignOptions, DesignSpec};
use std::path::Path;

/// Creates a fresh SSD image at `path` and formats `spec` on it.
pub fn create_ssd(
    path: &Path,
    config: &DeviceConfig,
    spec: &DesignSpec,
    options: &DesignOptions,
) -> Result<Box<dyn BlockDevice>> {
    let flash = spec.create_image(path, config, options)?;
    Ok(spec.build(flash, options)?)
}

/// Opens an existing SSD image and recovers `spec` on it (`spec.reopen(flash, options)`).
pub fn open_ssd(
    path: &Path,
    config: &DeviceConfig,
    spec: &DesignSpec,
    options: &DesignOptions,
) -> Result<Box<dyn BlockDevice>> {
    let flash = spec.open_image(path, config, options)?;
    Ok(spec.reopen(flash, options)?.0)
}

/// Mounts the file system on these images: formats both when neither exists, recovers both
/// (the SSD's FTL first, then NVMFS from NVRAM, §III-D) when both do.
pub fn open_or_create(
    nvram_path: &Path,
    nvram_bytes: u64,
    ssd_path: &Path,
    config: &DeviceConfig,
    spec: &DesignSpec,
    options: &DesignOptions,
    params: crate::NvmfsParams,
) -> Result<crate::Nvmfs> {
    match (nvram_path.exists(), ssd_path.exists()) {
        (true, true) => {
            let dev = open_ssd(ssd_path, config, spec, options)?;
            crate::Nvmfs::open(nvram_path, dev, params)
        }
        (false, false) => {
            let dev = create_ssd(ssd_path, config, spec, options)?;
            crate::Nvmfs::create(nvram_path, nvram_bytes, dev, params)
        }
        (nv, _) => Err(crate::NvmfsError::InvalidArgument(format!(
            "{} exists but {} does not: give both images of one file system, or two new paths",
            if nv {
                nvram_path.display()
            } else {
                ssd_path.display()
            },
            if nv {
                ssd_path.display()
            } else {
                nvram_path.display()
            },
        ))),
    }
}
