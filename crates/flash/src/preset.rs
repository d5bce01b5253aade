//! Device presets: one source of truth for every paper's device, with its source.
//!
//! Values marked [P] come from the papers (Möbius §IV-A, TxFlash §2.1 and §5, OPTR §6.1, NVMFS
//! §IV); values marked [R] are our decisions where the papers are silent, explained in
//! `docs/presets.md`. A preset is a starting point: any field can be overridden from a TOML file or
//! `key=value` pairs (see [`DeviceConfig::with_overrides`]).

use crate::error::ConfigError;
use crate::geometry::Geometry;
use crate::host::HostInterface;
use crate::media::MediaConfig;
use crate::timing::Timing;
use serde::{Deserialize, Serialize};

/// Everything needed to build an emulated device.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceConfig {
    /// Name of the preset this configuration started from.
    pub preset: String,
    pub geometry: Geometry,
    pub timing: Timing,
    /// Fraction of physical pages hidden from the host for GC headroom.
    pub over_provisioning: f64,
    /// The host link and write staging buffer in front of the design (see [`crate::host`]).
    #[serde(default)]
    pub host: HostInterface,
    /// The media model: bit errors, ECC, read retry, bad blocks (docs/reliability.md). Off
    /// (`None`) by default: the flash then reads back exactly what was programmed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media: Option<MediaConfig>,
}

/// The preset names `--preset` accepts.
pub const PRESET_NAMES: [&str; 6] = ["jasmine", "jasmine-8k", "txflash", "optr", "nvmfs", "small"];

/// MLC part of the Möbius prototype's era (Micron 34 nm), [R] datasheet-typical values.
const MLC_2010: Timing = Timing {
    read_ns: 50_000,
    program_ns: 900_000,
    erase_ns: 3_000_000,
    bus_mb_s: 40,
};
/// Samsung SLC datasheet values the TxFlash simulator used: erase 1.5 ms [P], read and
/// program [R] datasheet-typical.
const SLC_SAMSUNG: Timing = Timing {
    read_ns: 25_000,
    program_ns: 200_000,
    erase_ns: 1_500_000,
    bus_mb_s: 40,
};
/// 16 KB-page MLC behind a faster bus, as on the OPTR OpenSSD board, [R].
const MLC_16K: Timing = Timing {
    read_ns: 60_000,
    program_ns: 1_300_000,
    erase_ns: 3_500_000,
    bus_mb_s: 200,
};

/// A preset's geometry, timing, over-provisioning and host interface.
type PresetParts = (Geometry, Timing, f64, HostInterface);

/// Möbius on Jasmine OpenSSD: 64 GB [P], 4 KB page + 224 B spare [P], 128 pages per
/// block [R], 4 channels × 4 chips [R] → 8,192 blocks per chip.
const JASMINE_PRESET: PresetParts = (
    Geometry {
        channels: 4,
        chips_per_channel: 4,
        blocks_per_chip: 8192,
        pages_per_block: 128,
        page_bytes: 4096,
        oob_bytes: 224,
    },
    MLC_2010,
    0.07,
    // Jasmine's SATA 2.0 port; the paper's board peaks near 95 MB/s for writes [P]
    // (Möbius §V-A, Fig. 8); 20 µs per command, 8 MB DRAM write buffer [R].
    HostInterface {
        link_mb_s: 95,
        command_ns: 20_000,
        write_buffer_pages: 2048,
    },
);

/// Möbius on Jasmine OpenSSD with its second flash: "NAND Flash 2 Page Size 8KB + 448Byte" [P]
/// (Table II; 35 nm Samsung K9LCG08U1M, "only use 8KB page size flash to compare Write
/// Amplification ratio", §IV-A), 64 GB [P]. Everything else is `jasmine`'s [R], so that the page
/// size is the one thing that differs: 128 pages per block, 4 ch × 4 chips (4,096 blocks per
/// chip), the same MLC timing (the paper gives neither chip's), link and buffer pages.
const JASMINE_8K_PRESET: PresetParts = (
    Geometry {
        channels: 4,
        chips_per_channel: 4,
        blocks_per_chip: 4096,
        pages_per_block: 128,
        page_bytes: 8192,
        oob_bytes: 448,
    },
    MLC_2010,
    0.07,
    JASMINE_PRESET.3,
);

/// TxFlash simulator: 32 GB as 8 fully connected 4 GB packages [P], 4 KB page + 128 B
/// metadata [P], 15 % of pages reserved [P], 64 pages per block [R]. "I/O
/// interleaving ... up to 4 I/O operations within a single flash package
/// concurrently" [P] (TxFlash §5): each package is a channel of its own (fully
/// connected) holding 4 dies that work at once and share the package's bus, so a
/// package runs up to 4 operations; `--set geometry.chips_per_channel=N` (with
/// `blocks_per_chip` scaled to keep 4 GB) sets N.
const TXFLASH_PRESET: PresetParts = (
    Geometry {
        channels: 8,
        chips_per_channel: 4,
        blocks_per_chip: 4096,
        pages_per_block: 64,
        page_bytes: 4096,
        oob_bytes: 128,
    },
    SLC_SAMSUNG,
    0.15,
    HostInterface::SATA2, // [R]: the TxFlash simulator models no link.
);

/// OPTR on OpenSSD: 4 ch × 4 chips, 128 × 16 KB pages per block, ≈ 4,000 blocks per
/// chip, 2,208 B spare [P]; 128 GB nominal.
const OPTR_PRESET: PresetParts = (
    Geometry {
        channels: 4,
        chips_per_channel: 4,
        blocks_per_chip: 4000,
        pages_per_block: 128,
        page_bytes: 16384,
        oob_bytes: 2208,
    },
    MLC_16K,
    0.07,
    HostInterface::SATA3, // OpenSSD's SATA 3.0 port [P]; command cost, buffer [R].
);

/// NVMFS FTL study: 24 GB, 4 KB page, 256 KB block, 10 % over-provisioning [P];
/// 8 channels × 2 chips [R], SLC (X25-E class) timing [R].
const NVMFS_PRESET: PresetParts = (
    Geometry {
        channels: 8,
        chips_per_channel: 2,
        blocks_per_chip: 6144,
        pages_per_block: 64,
        page_bytes: 4096,
        oob_bytes: 128,
    },
    SLC_SAMSUNG,
    0.10,
    HostInterface::SATA2, // X25-E class SATA 2.0 [R].
);

/// A 16 MB device for tests and exhaustive crash campaigns [R].
const SMALL_PRESET: PresetParts = (
    Geometry {
        channels: 2,
        chips_per_channel: 2,
        blocks_per_chip: 32,
        pages_per_block: 32,
        page_bytes: 4096,
        oob_bytes: 128,
    },
    SLC_SAMSUNG,
    0.125,
    // Ideal host: crash-test regression instants depend on it staying so.
    HostInterface::NONE,
);

impl DeviceConfig {
    /// Looks a preset up by name.
    pub fn preset(name: &str) -> Result<DeviceConfig, ConfigError> {
        let (geometry, timing, over_provisioning, host) = match name {
            "jasmine" => JASMINE_PRESET,
            "jasmine-8k" => JASMINE_8K_PRESET,
            "txflash" => TXFLASH_PRESET,
            "optr" => OPTR_PRESET,
            "nvmfs" => NVMFS_PRESET,
            "small" => SMALL_PRESET,
            other => {
                return Err(ConfigError::UnknownPreset {
                    name: other.to_string(),
                    known: PRESET_NAMES.join(", "),
                })
            }
        };
        Ok(DeviceConfig {
            preset: name.to_string(),
            geometry,
            timing,
            over_provisioning,
            host,
            media: None,
        })
    }

    /// The media model of part `part` (`slc`, `mlc`, `tlc`) switched on, worn to `wear` times its
    /// rated endurance, its draws seeded by `seed`.
    pub fn with_media(
        mut self,
        part: &str,
        wear: f64,
        seed: u64,
    ) -> Result<DeviceConfig, ConfigError> {
        let mut media = MediaConfig::part(part, self.geometry.blocks_per_chip)?.with_wear(wear);
        media.seed = seed & i64::MAX as u64;
        self.media = Some(media);
        self.validate()?;
        Ok(self)
    }

    /// The `small` preset with a fresh MLC part whose blocks never go bad (no factory or grown
    /// bad blocks), seeded by 1: bit errors and injected faults only — what tests of a design's
    /// handling of lost pages start from.
    pub fn small_with_bit_errors_only() -> DeviceConfig {
        let mut c = DeviceConfig::preset("small")
            .and_then(|c| c.with_media("mlc", 0.0, 1))
            .expect("the small preset takes the mlc part");
        let m = c.media.as_mut().expect("media on");
        m.grown_bad_at_endurance = 0.0;
        m.factory_bad_fraction = 0.0;
        c
    }

    /// The geometry of the chips themselves: the design's geometry, plus the spare blocks of
    /// the media model when it is on.
    pub fn physical_geometry(&self) -> Geometry {
        match &self.media {
            None => self.geometry.clone(),
            Some(m) => crate::media::physical_geometry(&self.geometry, m),
        }
    }

    /// Applies a TOML document (any subset of fields, e.g. `[geometry]\nchannels = 8`) and then
    /// `key=value` overrides with dotted keys (`geometry.channels=8`, `timing.program_ns=300000`).
    pub fn with_overrides(
        self,
        toml_text: Option<&str>,
        pairs: &[String],
    ) -> Result<DeviceConfig, ConfigError> {
        let mut value =
            toml::Value::try_from(&self).map_err(|e| ConfigError::Invalid(e.to_string()))?;
        if let Some(text) = toml_text {
            let doc: toml::Table = text
                .parse()
                .map_err(|e: toml::de::Error| ConfigError::ConfigFile(e.to_string()))?;
            merge(&mut value, toml::Value::Table(doc));
        }
        for pair in pairs {
            let (key, raw) = pair
                .split_once('=')
                .ok_or_else(|| ConfigError::NotKeyValue(pair.clone()))?;
            let parsed: toml::Value = format!("v = {raw}")
                .parse::<toml::Table>()
                .map(|mut t| t.remove("v").expect("key v was just written"))
                .unwrap_or_else(|_| toml::Value::String(raw.to_string()));
            set_path(&mut value, key.trim(), parsed)?;
        }
        let config: DeviceConfig = value
            .try_into()
            .map_err(|e: toml::de::Error| ConfigError::Invalid(e.to_string()))?;
        config.validate()?;
        Ok(config)
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        self.geometry.validate()?;
        self.timing.validate()?;
        if !(0.0..0.9).contains(&self.over_provisioning) {
            return Err(ConfigError::OverProvisioning(self.over_provisioning));
        }
        if let Some(media) = &self.media {
            media.validate()?;
            self.physical_geometry().validate()?;
        }
        Ok(())
    }
}

fn merge(base: &mut toml::Value, over: toml::Value) {
    match (base, over) {
        (toml::Value::Table(b), toml::Value::Table(o)) => {
            for (k, v) in o {
                match b.get_mut(&k) {
                    Some(slot) => merge(slot, v),
                    None => {
                        b.insert(k, v);
                    }
                }
            }
        }
        (slot, v) => *slot = v,
    }
}

fn set_path(value: &mut toml::Value, key: &str, new: toml::Value) -> Result<(), ConfigError> {
    let mut cursor = value;
    let parts: Vec<&str> = key.split('.').collect();
    for (i, part) in parts.iter().enumerate() {
        let table = cursor
            .as_table_mut()
            .ok_or_else(|| ConfigError::NotATable {
                key: key.to_string(),
                part: part.to_string(),
            })?;
        if i + 1 == parts.len() {
            if !table.contains_key(*part) {
                return Err(ConfigError::UnknownKey(key.to_string()));
            }
            table.insert(part.to_string(), new);
            return Ok(());
        }
        cursor = table
            .get_mut(*part)
            .ok_or_else(|| ConfigError::UnknownKey(key.to_string()))?;
    }
    Err(ConfigError::UnknownKey(key.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_match_their_papers() {
        let j = DeviceConfig::preset("jasmine").unwrap();
        assert_eq!(j.geometry.capacity_bytes(), 64 << 30);
        assert_eq!(j.geometry.pages(), 16 << 20);
        let j8 = DeviceConfig::preset("jasmine-8k").unwrap();
        assert_eq!(j8.geometry.capacity_bytes(), 64 << 30);
        assert_eq!((j8.geometry.page_bytes, j8.geometry.oob_bytes), (8192, 448));
        assert_eq!((j8.timing.clone(), j8.host), (j.timing.clone(), j.host));
        let t = DeviceConfig::preset("txflash").unwrap();
        assert_eq!(t.geometry.capacity_bytes(), 32 << 30);
        assert_eq!(t.geometry.channels, 8, "8 packages, each fully connected");
        assert_eq!(
            t.geometry.chips(),
            32,
            "4 concurrent operations per package"
        );
        let o = DeviceConfig::preset("optr").unwrap();
        assert_eq!(o.geometry.chips(), 16);
        assert_eq!(o.geometry.block_bytes(), 2 << 20);
        let n = DeviceConfig::preset("nvmfs").unwrap();
        assert_eq!(n.geometry.capacity_bytes(), 24 << 30);
        assert_eq!(n.geometry.block_bytes(), 256 << 10);
        let s = DeviceConfig::preset("small").unwrap();
        assert!(s.geometry.capacity_bytes() <= 32 << 20);
        for name in PRESET_NAMES {
            DeviceConfig::preset(name).unwrap().validate().unwrap();
        }
    }

    #[test]
    fn overrides_from_toml_and_pairs() {
        let c = DeviceConfig::preset("small")
            .unwrap()
            .with_overrides(
                Some("[geometry]\nchannels = 4\n"),
                &[
                    "timing.program_ns=300000".into(),
                    "over_provisioning=0.2".into(),
                ],
            )
            .unwrap();
        assert_eq!(c.geometry.channels, 4);
        assert_eq!(c.timing.program_ns, 300_000);
        assert_eq!(c.over_provisioning, 0.2);
    }

    #[test]
    fn bad_overrides_are_clear_errors() {
        let base = DeviceConfig::preset("small").unwrap();
        let with = |pair: &str| base.clone().with_overrides(None, &[pair.into()]);
        assert_eq!(
            with("geometry.chanels=4").unwrap_err(),
            ConfigError::UnknownKey("geometry.chanels".into())
        );
        assert!(matches!(
            with("geometry.page_bytes=1000"),
            Err(ConfigError::PageBytes {
                page_bytes: 1000,
                ..
            })
        ));
        let e = with("geometry.page_bytes=4194304").unwrap_err();
        assert!(e.to_string().contains("from 512 to"), "{e}");
        assert_eq!(
            with("geometry.channels").unwrap_err(),
            ConfigError::NotKeyValue("geometry.channels".into())
        );
        assert_eq!(
            with("timing.bus_mb_s=0").unwrap_err(),
            ConfigError::ZeroBusSpeed
        );
        assert!(matches!(
            base.clone()
                .with_overrides(Some("[geometry]\nbogus = 1"), &[]),
            Err(ConfigError::Invalid(_))
        ));
        assert!(matches!(
            base.clone().with_overrides(Some("[geometry"), &[]),
            Err(ConfigError::ConfigFile(_))
        ));
        let e = DeviceConfig::preset("nope").unwrap_err();
        assert!(matches!(e, ConfigError::UnknownPreset { .. }));
        assert!(e.to_string().contains("known presets"), "{e}");
    }

    /// TxFlash §5: up to 4 operations run at once inside one package. The four dies of package
    /// 0 (chips 0, 8, 16, 24) take four programs whose transfers cross the package's bus one
    /// after the other and whose program times overlap (the bus, not the dies, is then the
    /// limit); a fifth program to die 0 waits for its
    /// first and for the bus, and a program on another package does not wait for package 0's bus at all.
    #[test]
    fn a_txflash_package_runs_four_operations_at_once() {
        use crate::{Content, ContentTag, Flash, OpCause};
        let config = DeviceConfig::preset("txflash").unwrap();
        let (g, t) = (config.geometry.clone(), config.timing.clone());
        let mut flash = Flash::in_memory(config, 16, true);
        let mut program = |chip: u32, page: u32| {
            let ppn = g.ppn(g.block(crate::ChipId(chip), 0), page);
            let tag = Content::Tag(ContentTag { lpn: 0, write: 1 });
            flash
                .program(ppn, &tag, &[0u8; 16], 0, OpCause::HostData)
                .unwrap()
        };
        let transfer = t.transfer_ns((g.page_bytes + g.oob_bytes) as u64);
        let dies: Vec<_> = [0, 8, 16, 24].iter().map(|&c| program(c, 0)).collect();
        for (i, span) in dies.iter().enumerate() {
            assert_eq!(
                span.start_ns,
                i as u64 * transfer,
                "die {i}: the bus is shared"
            );
            assert_eq!(span.end_ns, (i as u64 + 1) * transfer + t.program_ns);
        }
        // With the Samsung timing a page crosses the bus in 106 µs and programs in 200 µs,
        // so the bus keeps about three dies programming at once.
        assert!(
            dies[2].start_ns < dies[0].end_ns,
            "programs on three dies overlap"
        );
        assert!(
            dies[3].start_ns < dies[1].end_ns,
            "and the fourth with the second"
        );
        let fifth = program(0, 1);
        assert!(
            fifth.start_ns >= dies[0].end_ns,
            "die 0 runs one operation at a time"
        );
        assert_eq!(
            fifth.start_ns,
            4 * transfer,
            "and its data waits for the bus"
        );
        let other_package = program(1, 0);
        assert_eq!(other_package.start_ns, 0, "packages are fully connected");
    }
}
