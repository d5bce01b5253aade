//! Devices: a design formatted on an emulated flash of a given shape, on any store, and the
//! same device recovered after a power cut.
//!
//! A device's shape is a [`DeviceConfig`] (a preset with overrides: [`Recipe`]); its store is
//! where the flash lives ([`Store`]): in memory with content tags only (what simulations use),
//! in memory with full page data, or an image file that outlives the process (`mobius serve`,
//! `mobius sql`, NVMFS's SSD).

use flash::{DeviceConfig, Flash};
use ftl::{BlockDevice, DesignOptions, DesignSpec, FtlError, OverProvisioningKnob, RecoveryReport};
use std::path::{Path, PathBuf};

/// Where a device's flash lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Store<'a> {
    /// In memory, each page's data a content tag (what simulations use).
    TagOnly,
    /// In memory, with every page's bytes.
    FullData,
    /// An image file with full data: created when absent, recovered when present.
    Image(&'a Path),
}

/// An erased in-memory flash of `config` for `spec` (keeping the OOB bytes its record needs).
pub fn flash(spec: &DesignSpec, config: &DeviceConfig, tag_only: bool) -> Flash {
    Flash::in_memory(
        config.clone(),
        (spec.oob_record_bytes)(&config.geometry),
        tag_only,
    )
}

/// `spec` formatted on a fresh in-memory device of `config` (tag-only or with full data).
pub fn fresh(
    spec: &DesignSpec,
    config: &DeviceConfig,
    options: &DesignOptions,
    tag_only: bool,
) -> Result<Box<dyn BlockDevice>, FtlError> {
    spec.build(flash(spec, config, tag_only), options)
}

/// What [`open`] found at the store.
#[derive(Debug)]
pub enum Opened {
    /// A new device: formatted.
    Formatted,
    /// An image that already held the design: recovered, with what the recovery read and cost.
    Recovered(RecoveryReport),
}

/// `spec` on `store`: formatted on a fresh device, or (an image that exists) recovered from it.
/// An image is refused unless this design formatted it with `options` on this geometry. A new
/// image is synced once formatted, so it opens again whatever happens next.
pub fn open(
    spec: &DesignSpec,
    config: &DeviceConfig,
    options: &DesignOptions,
    store: Store,
) -> Result<(Box<dyn BlockDevice>, Opened), FtlError> {
    match store {
        Store::TagOnly | Store::FullData => {
            let dev = fresh(spec, config, options, store == Store::TagOnly)?;
            Ok((dev, Opened::Formatted))
        }
        Store::Image(path) if path.exists() => {
            let flash = spec.open_image(path, config, options)?;
            let (dev, report) = spec.reopen(flash, options)?;
            Ok((dev, Opened::Recovered(report)))
        }
        Store::Image(path) => {
            let flash = spec.create_image(path, config, options)?;
            let mut dev = spec.build(flash, options)?;
            dev.flash_mut().sync()?;
            Ok((dev, Opened::Formatted))
        }
    }
}

/// A power cut of `dev` once its flash is idle, then `spec`'s recovery from the flash alone
/// (its clock starting at the cut): the recovered device and what the recovery read and cost.
pub fn cut_and_recover(
    spec: &DesignSpec,
    dev: Box<dyn BlockDevice>,
    options: &DesignOptions,
) -> Result<(Box<dyn BlockDevice>, RecoveryReport), FtlError> {
    let end = dev.flash().idle_ns();
    let mut flash = dev.into_flash();
    flash.start_clock_at(end);
    spec.reopen(flash, options)
}

/// The figure `name` among those `dev` reports (`BlockDevice::metrics`), if it reports it.
pub fn metric(dev: &dyn BlockDevice, name: &str) -> Option<f64> {
    dev.metrics()
        .into_iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v)
}

/// The preset `name` with `blocks_per_chip` blocks per chip: the same chips, channels and
/// timing, a smaller device (the experiments' quick-scale slices of the papers' devices).
pub fn preset_slice(name: &str, blocks_per_chip: u32) -> Result<DeviceConfig, flash::ConfigError> {
    let mut config = DeviceConfig::preset(name)?;
    config.geometry.blocks_per_chip = blocks_per_chip;
    config.validate()?;
    Ok(config)
}

/// A device's shape as the command line gives it: a preset, a TOML file overriding any of its
/// fields, and `key=value` overrides (docs/presets.md).
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::Args))]
pub struct Recipe {
    /// Device preset: jasmine, jasmine-8k, txflash, optr, nvmfs, small.
    #[cfg_attr(feature = "clap", arg(long, default_value = "small"))]
    pub preset: String,
    /// TOML file overriding any preset field (e.g. `[geometry]\nchannels = 8`).
    #[cfg_attr(feature = "clap", arg(long = "config", value_name = "CONFIG"))]
    pub config_file: Option<PathBuf>,
    /// Override one field: `--set geometry.channels=8 --set timing.program_ns=300000`.
    #[cfg_attr(feature = "clap", arg(long = "set", value_name = "KEY=VALUE"))]
    pub overrides: Vec<String>,
}

/// Why a device could not be shaped as asked.
#[derive(Debug, thiserror::Error)]
pub enum RecipeError {
    #[error("{0}")]
    Config(#[from] flash::ConfigError),
    #[error("reading {path}: {source}")]
    ConfigFile {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The device's over-provisioning differs from its preset's, and the design does not read
    /// it (it takes a parameter of its own).
    #[error("{design} does not read the device's over_provisioning ({asked} here, from --set or --config; the preset's is {preset}): give it as --param {param}=VALUE")]
    OverProvisioningIgnored {
        design: &'static str,
        asked: f64,
        preset: f64,
        param: &'static str,
    },
    #[error("size {0}: expected a number with an optional K/M/G/T suffix")]
    BadSize(String),
    #[error("size {0} is too large")]
    SizeTooLarge(String),
    #[error("--size {size} is too small for {chips} chips of {block_kib} KiB blocks")]
    SizeTooSmall {
        size: String,
        chips: u64,
        block_kib: u64,
    },
}

impl Recipe {
    /// The preset `name` with nothing overridden.
    pub fn preset(name: &str) -> Recipe {
        Recipe {
            preset: name.to_string(),
            config_file: None,
            overrides: Vec::new(),
        }
    }

    /// The options given on the command line (`--preset` when not the default `small`).
    pub fn given(&self) -> Vec<&'static str> {
        crate::flags_given([
            ("--preset", self.preset != "small"),
            ("--config", self.config_file.is_some()),
            ("--set", !self.overrides.is_empty()),
        ])
    }

    /// The device the recipe describes.
    pub fn resolve(&self) -> Result<DeviceConfig, RecipeError> {
        let base = DeviceConfig::preset(&self.preset)?;
        let text =
            match &self.config_file {
                Some(path) => Some(std::fs::read_to_string(path).map_err(|source| {
                    RecipeError::ConfigFile {
                        path: path.clone(),
                        source,
                    }
                })?),
                None => None,
            };
        Ok(base.with_overrides(text.as_deref(), &self.overrides)?)
    }

    /// The device for `design`. Refused when the recipe changes the device's
    /// `over_provisioning` and the design does not read it, taking its own parameter instead
    /// (`DesignSpec::over_provisioning`): a run that silently ignored it would not be on the
    /// device asked for.
    pub fn resolve_for(&self, design: &DesignSpec) -> Result<DeviceConfig, RecipeError> {
        let config = self.resolve()?;
        if let OverProvisioningKnob::Param(param) = design.over_provisioning {
            let preset = DeviceConfig::preset(&self.preset)?;
            if config.over_provisioning != preset.over_provisioning {
                return Err(RecipeError::OverProvisioningIgnored {
                    design: design.name,
                    asked: config.over_provisioning,
                    preset: preset.over_provisioning,
                    param,
                });
            }
        }
        Ok(config)
    }
}

/// A size in bytes with an optional K/M/G/T suffix (binary: `64M` = 64 MiB).
pub fn parse_size(s: &str) -> Result<u64, RecipeError> {
    let s = s.trim();
    let (num, mult) = match s.chars().last() {
        Some('K' | 'k') => (&s[..s.len() - 1], 1u64 << 10),
        Some('M' | 'm') => (&s[..s.len() - 1], 1 << 20),
        Some('G' | 'g') => (&s[..s.len() - 1], 1 << 30),
        Some('T' | 't') => (&s[..s.len() - 1], 1 << 40),
        _ => (s, 1),
    };
    let n: u64 = num
        .parse()
        .map_err(|_| RecipeError::BadSize(s.to_string()))?;
    n.checked_mul(mult)
        .ok_or_else(|| RecipeError::SizeTooLarge(s.to_string()))
}

/// Sets the blocks per chip so the raw device holds `size` (rounded down to whole blocks).
pub fn apply_size(config: &mut DeviceConfig, size: &str) -> Result<(), RecipeError> {
    let bytes = parse_size(size)?;
    let g = &mut config.geometry;
    let per_chip = bytes / (g.chips() as u64 * g.block_bytes());
    if per_chip < 8 {
        return Err(RecipeError::SizeTooSmall {
            size: size.to_string(),
            chips: g.chips() as u64,
            block_kib: g.block_bytes() / 1024,
        });
    }
    g.blocks_per_chip = per_chip.min(u32::MAX as u64) as u32;
    Ok(config.validate()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(overrides: &[&str]) -> Recipe {
        Recipe {
            overrides: overrides.iter().map(|s| s.to_string()).collect(),
            ..Recipe::preset("small")
        }
    }

    #[test]
    fn a_device_over_provisioning_a_design_does_not_read_is_refused_not_ignored() {
        let set = with(&["over_provisioning=0.1"]);
        for (name, param) in [
            ("lighttx", "--param over_provisioning="),
            ("txflash-tc", "--param over_provisioning="),
            ("optr", "--param op="),
        ] {
            let design = crate::registry::find(name).unwrap();
            let refused = set.resolve_for(&design).unwrap_err().to_string();
            assert!(refused.contains(param), "{name}: {refused}");
            // The preset's own value, or none given, is no request to change it.
            assert!(with(&[]).resolve_for(&design).is_ok());
            assert!(with(&["over_provisioning=0.125"])
                .resolve_for(&design)
                .is_ok());
        }
        for name in ["dftl", "mobius"] {
            let design = crate::registry::find(name).unwrap();
            let config = set.resolve_for(&design).unwrap();
            assert_eq!(config.over_provisioning, 0.1, "{name}");
        }
    }

    #[test]
    fn sizes_take_binary_suffixes_and_refuse_the_rest() {
        assert_eq!(parse_size("64M").unwrap(), 64 << 20);
        assert_eq!(parse_size("2g").unwrap(), 2 << 30);
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert!(matches!(parse_size("12X"), Err(RecipeError::BadSize(_))));
        assert!(matches!(
            parse_size("99999999999T"),
            Err(RecipeError::SizeTooLarge(_))
        ));
        let mut config = DeviceConfig::preset("small").unwrap();
        assert!(matches!(
            apply_size(&mut config, "1K"),
            Err(RecipeError::SizeTooSmall { .. })
        ));
        apply_size(&mut config, "256M").unwrap();
        assert_eq!(config.geometry.capacity_bytes(), 256 << 20);
    }

    /// A new image is formatted, the same path later recovered; an in-memory store is always
    /// fresh.
    #[test]
    fn an_image_is_formatted_once_then_recovered() {
        let dir = tempfile::tempdir().unwrap();
        let image = dir.path().join("d.img");
        let spec = crate::registry::find("dftl").unwrap();
        let config = DeviceConfig::preset("small").unwrap();
        let options = DesignOptions::default();
        let (dev, first) = open(&spec, &config, &options, Store::Image(&image)).unwrap();
        assert!(matches!(first, Opened::Formatted));
        drop(dev);
        let (_, second) = open(&spec, &config, &options, Store::Image(&image)).unwrap();
        assert!(matches!(second, Opened::Recovered(_)));
        let (_, memory) = open(&spec, &config, &options, Store::TagOnly).unwrap();
        assert!(matches!(memory, Opened::Formatted));
    }
}
