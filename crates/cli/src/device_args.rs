//! Command-line arguments that choose and shape the emulated device.

use clap::Args;
use flash::DeviceConfig;

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
}

impl DeviceArgs {
    /// The options given on the command line (`--preset` when not the default `small`).
    pub fn given(&self) -> Vec<&'static str> {
        flags_given([
            ("--preset", self.preset != "small"),
            ("--config", self.config.is_some()),
            ("--set", !self.overrides.is_empty()),
        ])
    }

    pub fn resolve(&self) -> anyhow::Result<DeviceConfig> {
        let base = DeviceConfig::preset(&self.preset).map_err(anyhow::Error::msg)?;
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
