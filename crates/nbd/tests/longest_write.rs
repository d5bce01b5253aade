//! Every export takes every write up to the longest it advertises (NBD's maximum block size),
//! on a device whose exported capacity is full and aged, on every geometry the crash soak
//! draws from. Before the NBD crash soak found it, a single long write inside the exported
//! capacity met "no space" on DFTL (GC ran only before a request), Möbius (at over-provisioning
//! 0), Atomic-Write and LightTx (transactions at 5 %), OPTR (no GC inside a request) and the
//! TxFlash protocols (a transaction's previous versions stay live until it commits, §3.2, and
//! nothing set room aside for them); each is fixed or advertises what it takes
//! (`BlockDevice::max_write_pages`).

use ftl::{DesignOptions, DesignSpec};
use nbd::ftl_backend::FtlBackend;
use nbd::NbdBackend;
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

fn designs() -> Vec<DesignSpec> {
    lab::registry::all()
}

/// Fills the export, overwrites as many random pages, then writes 20 requests of each size
/// 8, 16, ... up to the advertised maximum at random places; the first refusal, if any.
fn longest_writes(
    design: &DesignSpec,
    device: &flash::DeviceConfig,
    options: &DesignOptions,
    atomic: bool,
) -> Option<String> {
    let oob = design.oob_record(&device.geometry);
    let flash = flash::Flash::in_memory(device.clone(), oob, true);
    let dev = match design.build(flash, options) {
        Ok(dev) => dev,
        Err(e) => return Some(format!("format: {e}")),
    };
    let start = dev.flash().idle_ns();
    let mut export = FtlBackend::new(dev, start);
    if atomic {
        export = match export.with_atomic_requests_from(1) {
            Ok(export) => export,
            Err(e) => return Some(format!("atomic requests: {e}")),
        };
    }
    let page = export.preferred_block_size() as u64;
    let pages = export.size_bytes() / page;
    let max = (export.max_payload_bytes() as u64 / page).min(pages);
    let data = vec![7u8; (max * page) as usize];
    let mut at = start;
    let write = |export: &mut FtlBackend, first: u64, n: u64, at: &mut u64| {
        export
            .write(first * page, &data[..(n * page) as usize], false, *at)
            .map(|ack| *at = ack)
            .map_err(|e| format!("{n} pages at page {first}: {e}"))
    };
    let fill = max.min(32);
    for first in (0..pages).step_by(fill as usize) {
        if let Err(e) = write(&mut export, first, fill.min(pages - first), &mut at) {
            return Some(format!("fill: {e}"));
        }
    }
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    for _ in 0..pages {
        if let Err(e) = write(&mut export, rng.random_range(0..pages), 1, &mut at) {
            return Some(format!("aging: {e}"));
        }
    }
    let mut n = 8.min(max);
    loop {
        for _ in 0..20 {
            if let Err(e) = write(&mut export, rng.random_range(0..=pages - n), n, &mut at) {
                return Some(e);
            }
        }
        if n == max {
            return None;
        }
        n = (n * 2).min(max);
    }
}

/// Each design on `device` with its own over-provisioning under each of its soak parameter
/// sets the device allows, and with the lowest over-provisioning it accepts (as the soaks draw
/// them).
fn setups(
    design: &DesignSpec,
    device: &flash::DeviceConfig,
) -> Vec<(flash::DeviceConfig, DesignOptions, String)> {
    let none = DesignOptions::default();
    let mut v = vec![(device.clone(), none.clone(), "own".to_string())];
    for set in design.soak_params.iter().filter(|set| !set.is_empty()) {
        let mut options = DesignOptions::default();
        for (k, val) in set.iter() {
            options.params.insert(k.to_string(), val.to_string());
        }
        if !crashtest::soak::refuses(design, device, &options) {
            v.push((device.clone(), options, format!("{set:?}")));
        }
    }
    if let Some(low) = crashtest::soak::lowest_over_provisioning(design, device, &none, &none) {
        v.push((low.device, low.options, format!("op {}", low.value)));
    }
    v
}

#[test]
fn every_export_takes_the_longest_write_it_advertises_on_a_full_aged_device() {
    let mut failures = Vec::new();
    for geometry in crashtest::soak::SOAK_GEOMETRIES {
        for design in designs() {
            let atomic = crashtest::soak::capabilities(&design, &DesignOptions::default())
                .is_some_and(|c| c.static_tx);
            for (device, options, op) in setups(&design, &geometry.device()) {
                for atomic in [false, true].into_iter().filter(|&a| !a || atomic) {
                    if let Some(e) = longest_writes(&design, &device, &options, atomic) {
                        let name = design.name;
                        failures.push(format!(
                            "{name} on {} ({op}, atomic {atomic}): {e}",
                            geometry.name
                        ));
                    }
                }
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}
