//! Designs on a small full-data device, for the SQLite tests.
#![allow(dead_code)]

use flash::DeviceConfig;
use ftl::{BlockDevice, DesignOptions, DesignSpec};

/// Every design (the lab's registry).
pub fn designs() -> Vec<DesignSpec> {
    lab::registry::all()
}

pub fn spec(name: &str) -> DesignSpec {
    lab::registry::find(name).expect("a design of the registry")
}

/// The small preset with 128 blocks per chip (64 MiB raw), full data.
pub fn config() -> DeviceConfig {
    let mut c = DeviceConfig::preset("small").expect("preset");
    c.geometry.blocks_per_chip = 128;
    c
}

pub fn device(name: &str) -> Box<dyn BlockDevice> {
    lab::device::fresh(&spec(name), &config(), &DesignOptions::default(), false).expect("format")
}

/// Power cut: the device's RAM is dropped and the design recovers from flash alone.
pub fn recover(name: &str, dev: Box<dyn BlockDevice>) -> Box<dyn BlockDevice> {
    lab::device::cut_and_recover(&spec(name), dev, &DesignOptions::default())
        .expect("recover")
        .0
}
