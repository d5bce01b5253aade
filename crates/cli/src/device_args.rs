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
