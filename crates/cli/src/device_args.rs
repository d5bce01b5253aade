//! Command-line arguments that choose and shape the emulated device.

use clap::Args;
use flash::DeviceConfig;
use ftl::{DesignSpec, OverProvisioningKnob};

#[derive(Args, Debug, Clone)]
pub struct DeviceArgs {
    /// Device preset: jasmine, txflash, optr, nvmfs, small.
    #[arg(long, default_value = "small")]
    pub preset: String,
    /// TOML file overriding any preset field (e.g. `[geometry]\nchannels = 8`).
    #[arg(long)]
    pub config: Option<std::path::PathBuf>,
    /// Override one field: `--set geometry.channels=8 --set timing.program_ns=300000`.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub overrides: Vec<String>,
    /// The media model (docs/reliability.md): bit errors, ECC, read retry and bad blocks of an
    /// `slc`, `mlc` or `tlc` part (off by default: the flash reads back what was programmed).
    /// Its fields can be `--set` as `media.<field>`.
    #[arg(long, value_name = "PART")]
    pub media: Option<String>,
    /// With --media: P/E cycles every block had before the run, in multiples of the part's
    /// rated endurance (1.0: worn to its rating) [default: 0].
    #[arg(long, value_name = "MULTIPLE")]
    pub wear: Option<f64>,
    /// With --media: days the device lies powered off after each power cut before recovery
    /// (every page ages by them) [default: 0].
    #[arg(long, value_name = "DAYS")]
    pub power_off_days: Option<f64>,
}

impl DeviceArgs {
    /// The options given on the command line (`--preset` when not the default `small`); the
    /// media model's flags are not among them ([`media_given`](Self::media_given)): a soak keeps
    /// them for every seed.
    pub fn given(&self) -> Vec<&'static str> {
        flags_given([
            ("--preset", self.preset != "small"),
            ("--config", self.config.is_some()),
            ("--set", !self.overrides.is_empty()),
        ])
    }

    /// The media model's flags given (`--media`, `--wear`, `--power-off-days`).
    pub fn media_given(&self) -> Vec<&'static str> {
        flags_given([
            ("--media", self.media.is_some()),
            ("--wear", self.wear.is_some()),
            ("--power-off-days", self.power_off_days.is_some()),
        ])
    }

    /// The device for `design`. Refused when `--set` or `--config` changes the device's
    /// `over_provisioning` and the design does not read it, taking its own `--param` instead
    /// (`DesignSpec::over_provisioning`): a run that silently ignored it would not be on the
    /// device asked for.
    pub fn resolve_for(&self, design: &DesignSpec) -> anyhow::Result<DeviceConfig> {
        let config = self.resolve()?;
        if let OverProvisioningKnob::Param(name) = design.over_provisioning {
            let preset = DeviceConfig::preset(&self.preset).map_err(anyhow::Error::msg)?;
            if config.over_provisioning != preset.over_provisioning {
                anyhow::bail!(
                    "{} does not read the device's over_provisioning ({} here, from --set or \
                     --config; the preset's is {}): give it as --param {name}=VALUE",
                    design.name,
                    config.over_provisioning,
                    preset.over_provisioning
                );
            }
        }
        Ok(config)
    }

    pub fn resolve(&self) -> anyhow::Result<DeviceConfig> {
        let base = DeviceConfig::preset(&self.preset).map_err(anyhow::Error::msg)?;
        let base = with_media(base, self.media.as_deref(), self.wear, self.power_off_days)?;
        let text = match &self.config {
            Some(p) => Some(
                std::fs::read_to_string(p)
                    .map_err(|e| anyhow::anyhow!("reading {}: {e}", p.display()))?,
            ),
            None => None,
        };
        base.with_overrides(text.as_deref(), &self.overrides)
            .map_err(anyhow::Error::msg)
    }
}

/// `device` with the media model of `part` on, worn to `wear` times its rated endurance and lying
/// powered off `power_off_days` after each power cut (`--media`, `--wear`, `--power-off-days`).
/// Its draws take seed 0 until the command sets its own.
pub fn with_media(
    device: DeviceConfig,
    part: Option<&str>,
    wear: Option<f64>,
    power_off_days: Option<f64>,
) -> anyhow::Result<DeviceConfig> {
    let Some(part) = part else {
        if wear.is_some() || power_off_days.is_some() {
            anyhow::bail!("--wear and --power-off-days shape the media model: give --media PART");
        }
        return Ok(device);
    };
    let wear = wear.unwrap_or(0.0);
    let days = power_off_days.unwrap_or(0.0);
    if !(wear.is_finite() && wear >= 0.0 && days.is_finite() && days >= 0.0) {
        anyhow::bail!("--wear and --power-off-days take numbers at least 0");
    }
    let mut device = device
        .with_media(part, wear, 0)
        .map_err(anyhow::Error::msg)?;
    if let Some(m) = device.media.as_mut() {
        m.power_off_s = (days * 86_400.0).round() as u64;
    }
    Ok(device)
}

/// A size in bytes with an optional K/M/G/T suffix (binary: `64M` = 64 MiB).
pub fn parse_size(s: &str) -> anyhow::Result<u64> {
    let s = s.trim();
    let (num, mult) = match s.chars().last() {
        Some('K' | 'k') => (&s[..s.len() - 1], 1u64 << 10),
        Some('M' | 'm') => (&s[..s.len() - 1], 1 << 20),
        Some('G' | 'g') => (&s[..s.len() - 1], 1 << 30),
        Some('T' | 't') => (&s[..s.len() - 1], 1 << 40),
        _ => (s, 1),
    };
    let n: u64 = num.parse().map_err(|_| {
        anyhow::anyhow!("size {s}: expected a number with an optional K/M/G/T suffix")
    })?;
    n.checked_mul(mult)
        .ok_or_else(|| anyhow::anyhow!("size {s} is too large"))
}

/// Sets the blocks per chip so the raw device holds `size` (rounded down to whole blocks).
pub fn apply_size(config: &mut DeviceConfig, size: &str) -> anyhow::Result<()> {
    let bytes = parse_size(size)?;
    let g = &mut config.geometry;
    let per_chip = bytes / (g.chips() as u64 * g.block_bytes());
    if per_chip < 8 {
        anyhow::bail!(
            "--size {size} is too small for {} chips of {} KiB blocks",
            g.chips(),
            g.block_bytes() / 1024
        );
    }
    g.blocks_per_chip = per_chip.min(u32::MAX as u64) as u32;
    config.validate().map_err(anyhow::Error::msg)
}

/// The flags of `flags` whose paired condition holds (those given on the command line).
pub fn flags_given<const N: usize>(flags: [(&'static str, bool); N]) -> Vec<&'static str> {
    flags
        .into_iter()
        .filter_map(|(flag, given)| given.then_some(flag))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(overrides: &[&str]) -> DeviceArgs {
        DeviceArgs {
            preset: "small".into(),
            config: None,
            overrides: overrides.iter().map(|s| s.to_string()).collect(),
            media: None,
            wear: None,
            power_off_days: None,
        }
    }

    /// `--media` switches the model on, `--wear` and `--power-off-days` shape it and `--set
    /// media.*` changes any field; either without `--media`, or an unknown part, is refused.
    #[test]
    fn the_media_flags_shape_the_model_and_bad_ones_are_refused() {
        let mut a = args(&["media.ecc.correctable_bits=40"]);
        a.media = Some("tlc".into());
        a.wear = Some(0.5);
        a.power_off_days = Some(2.0);
        let d = a.resolve().unwrap();
        let m = d.media.unwrap();
        assert_eq!(
            (m.part.as_str(), m.initial_pe, m.power_off_s),
            ("tlc", 500, 172_800)
        );
        assert_eq!(m.ecc.correctable_bits, 40);
        assert!(args(&[]).resolve().unwrap().media.is_none());
        let mut a = args(&[]);
        a.wear = Some(1.0);
        assert!(a.resolve().unwrap_err().to_string().contains("--media"));
        a.media = Some("qlc".into());
        assert!(a.resolve().unwrap_err().to_string().contains("known parts"));
        a.media = Some("mlc".into());
        a.wear = Some(-1.0);
        assert!(a.resolve().is_err());
    }

    #[test]
    fn a_device_over_provisioning_a_design_does_not_read_is_refused_not_ignored() {
        let set = args(&["over_provisioning=0.1"]);
        for (name, param) in [
            ("lighttx", "--param over_provisioning="),
            ("txflash-tc", "--param over_provisioning="),
            ("optr", "--param op="),
        ] {
            let design = lab::registry::find(name).unwrap();
            let refused = set.resolve_for(&design).unwrap_err().to_string();
            assert!(refused.contains(param), "{name}: {refused}");
            // The preset's own value, or none given, is no request to change it.
            assert!(args(&[]).resolve_for(&design).is_ok());
            assert!(args(&["over_provisioning=0.125"])
                .resolve_for(&design)
                .is_ok());
        }
        for name in ["dftl", "mobius"] {
            let design = lab::registry::find(name).unwrap();
            let config = set.resolve_for(&design).unwrap();
            assert_eq!(config.over_provisioning, 0.1, "{name}");
        }
    }
}
