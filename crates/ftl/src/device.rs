//! The interfaces every design implements.
//!
//! Time model: the host calls the device in arrival order (arrivals never go back in time); each
//! call issues its flash operations at once on the chips' timelines and returns the simulated
//! instant at which the host is told the request is done (`ack_ns`). RAM state changes at call
//! time; what survives a power cut is decided by the flash operations' spans alone (see
//! `flash::oplog`), so an FTL that needs "B after A" on flash must pass A's end as B's
//! `not_before`. The crash checker holds every design to exactly that.

use crate::error::{FtlError, TxUuid};
use crate::promise::Promise;
use flash::{Content, Flash, Geometry, Lpn};
use std::collections::BTreeMap;

/// When a request arrived and when the host was told it is done.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, serde::Serialize)]
pub struct Completion {
    pub arrival_ns: u64,
    pub ack_ns: u64,
}

/// What a read of one logical page returns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PageOutcome {
    Data(Content),
    /// Never written (or trimmed): reads as zeros.
    Unwritten,
    /// The page holding the data failed ECC.
    Uncorrectable,
}

impl PageOutcome {
    /// What the host reads from the flash page a design maps the logical page to. A mapped
    /// page that reads erased is data the design lost (its mapping names a page that was never
    /// programmed, or whose block was erased): the host sees an uncorrectable page, never
    /// zeros, so a lost write cannot pass for a trimmed one.
    pub fn of_mapped_page(status: flash::ReadStatus) -> PageOutcome {
        match status {
            flash::ReadStatus::Data(c) => PageOutcome::Data(c),
            flash::ReadStatus::Erased | flash::ReadStatus::Uncorrectable => {
                PageOutcome::Uncorrectable
            }
        }
    }
}

/// A plain block device: every design implements it.
pub trait BlockDevice: Send {
    /// The design's `--ftl` name.
    fn design(&self) -> &'static str;
    /// What the design promises about power cuts.
    fn promise(&self) -> Promise;
    /// Logical pages the host may address (capacity after over-provisioning and reserved areas).
    fn logical_pages(&self) -> u32;
    /// The longest write request the design takes, in pages (`None`: any inside the capacity),
    /// like an NVMe device's maximum data transfer size: a design that applies each request
    /// whole (as one transaction, or without collecting garbage inside it) can hold only so
    /// much of it in its spare space. The host layer refuses a longer write and NBD
    /// advertises the limit, so clients split their requests (docs/host.md).
    fn max_write_pages(&self) -> Option<u32> {
        None
    }
    /// Writes a run of consecutive logical pages as one request.
    fn write(
        &mut self,
        start: Lpn,
        pages: &[Content],
        arrival_ns: u64,
    ) -> Result<Completion, FtlError>;
    /// Reads `count` consecutive logical pages into `out` (cleared first).
    fn read(
        &mut self,
        start: Lpn,
        count: u32,
        arrival_ns: u64,
        out: &mut Vec<PageOutcome>,
    ) -> Result<Completion, FtlError>;
    /// Makes every write acknowledged before it durable.
    fn flush(&mut self, arrival_ns: u64) -> Result<Completion, FtlError>;
    /// Forgets a run of logical pages (they read as unwritten, or — after a power cut — as
    /// unwritten or their last data).
    fn trim(&mut self, start: Lpn, count: u32, arrival_ns: u64) -> Result<Completion, FtlError>;
    fn flash(&self) -> &Flash;
    fn flash_mut(&mut self) -> &mut Flash;
    /// Power cut: RAM state is dropped, the flash is kept.
    fn into_flash(self: Box<Self>) -> Flash;
    /// A request for logical pages from `start` on will be served after `ahead` others (0: it
    /// has arrived): a design may start loading its mapping into the CPU cache, so the load
    /// overlaps other work. A simulation-speed hint with no effect on what is simulated; the
    /// driver hints each request at every distance from the farthest it looks ahead down to 1,
    /// the host layer at 0, so a chain of dependent loads can be asked for a step per request
    /// (docs/performance.md).
    fn prefetch_mapping(&self, _start: Lpn, _ahead: usize) {}
    /// Checks the design's internal invariants (called after every step in tests).
    fn check_invariants(&self) -> Result<(), crate::InvariantViolation> {
        Ok(())
    }
    /// Design-specific figures for `mobius bench --json` (e.g. `("cmt_hit_ratio", 0.93)`).
    fn metrics(&self) -> Vec<(String, f64)> {
        Vec::new()
    }
    /// Heap bytes per structure, for `mobius bench --json`'s `memory` (docs/performance.md):
    /// the emulated flash's by default; a design adds its own (`<design>.<structure>`).
    fn memory(&self) -> Vec<(String, u64)> {
        self.flash().memory()
    }
    /// The transactional interface, for designs that offer one.
    fn transactional(&mut self) -> Option<&mut dyn Transactional> {
        None
    }
}

/// Static transaction acknowledgement mode (Möbius SWRITE).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum SwriteMode {
    /// Acknowledged when every page is on flash.
    Sync,
    /// Acknowledged when the transaction's metadata is on flash; durable later (`durable_ns`).
    Async,
}

/// Position of a page in a dynamic transaction (Möbius DWRITE).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum DwriteFlag {
    Head,
    Body,
    Rear,
    /// A one-page dynamic transaction (HEAD|REAR).
    Single,
}

/// `TxCompletion::ack_ns` of an SWRITE the device holds back: Möbius merges small static
/// transactions into one atom inode (§IV-E), so it knows when a transaction is acknowledged only
/// once the group closes. The real completion comes later from
/// [`Transactional::take_completions`].
pub const ACK_DEFERRED: u64 = u64::MAX;

/// Acknowledgement of a transactional request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, serde::Serialize)]
pub struct TxCompletion {
    pub arrival_ns: u64,
    /// When the host is told the request is done.
    pub ack_ns: u64,
    /// For a request that ends a transaction (SWRITE, REAR, Single): the instant from which the
    /// transaction survives any power cut. Equal to `ack_ns` for synchronous acknowledgement;
    /// later for Möbius async SWRITE, which promises atomicity at once and durability only here.
    /// `None` for HEAD/BODY pages.
    pub durable_ns: Option<u64>,
}

/// What a transactional design offers; the workload generator and the checker read it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, serde::Serialize)]
pub struct TxCapabilities {
    pub static_tx: bool,
    pub async_swrite: bool,
    pub dynamic_tx: bool,
    /// More than one static transaction may be in flight.
    pub concurrent_static: bool,
    /// More than one dynamic transaction may be open.
    pub concurrent_dynamic: bool,
    pub sread: bool,
    pub abort: bool,
    /// Largest transaction the design keeps atomic, in pages.
    pub max_tx_pages: u64,
}

/// The transactional interface (Möbius Table I; TxFlash WriteAtomic/Abort; LightTx; Atomic-Write).
pub trait Transactional {
    fn capabilities(&self) -> TxCapabilities;
    /// Static transaction: the whole page set is known up front.
    fn swrite(
        &mut self,
        uuid: TxUuid,
        pages: &[(Lpn, Content)],
        mode: SwriteMode,
        arrival_ns: u64,
    ) -> Result<TxCompletion, FtlError>;
    /// One page of a dynamic transaction.
    fn dwrite(
        &mut self,
        uuid: TxUuid,
        lpn: Lpn,
        content: &Content,
        flag: DwriteFlag,
        arrival_ns: u64,
    ) -> Result<TxCompletion, FtlError>;
    /// Aborts a running transaction; `TxUuid(0)` aborts the running dynamic transaction.
    fn abort(&mut self, uuid: TxUuid, arrival_ns: u64) -> Result<Completion, FtlError>;
    /// Completions of SWRITEs answered with [`ACK_DEFERRED`], once known. `now_ns` is the
    /// host's clock: the device may act on timers that expired by then (a group of merged
    /// transactions is closed at its deadline), and `u64::MAX` means the host waits for
    /// everything held back. Designs that never defer return nothing.
    fn take_completions(&mut self, now_ns: u64) -> Result<Vec<(TxUuid, TxCompletion)>, FtlError> {
        let _ = now_ns;
        Ok(Vec::new())
    }
    /// Serializable read: returns after every static transaction that arrived before it committed.
    fn sread(
        &mut self,
        start: Lpn,
        count: u32,
        arrival_ns: u64,
        out: &mut Vec<PageOutcome>,
    ) -> Result<Completion, FtlError>;
}

/// Design parameters given on the command line (`--param key=value`), checked by the design.
#[derive(Clone, Debug, Default)]
pub struct DesignOptions {
    pub params: BTreeMap<String, String>,
}

impl DesignOptions {
    pub fn from_pairs(pairs: &[String]) -> Result<DesignOptions, FtlError> {
        let mut params = BTreeMap::new();
        for pair in pairs {
            let (k, v) = pair
                .split_once('=')
                .ok_or_else(|| FtlError::InvalidOption(format!("'{pair}' is not key=value")))?;
            params.insert(k.trim().to_string(), v.trim().to_string());
        }
        Ok(DesignOptions { params })
    }

    pub fn with(mut self, key: &str, value: impl ToString) -> Self {
        self.params.insert(key.to_string(), value.to_string());
        self
    }

    /// Parses `key` as a `T`, or returns `default` when absent.
    pub fn get<T: std::str::FromStr>(&self, key: &str, default: T) -> Result<T, FtlError> {
        match self.params.get(key) {
            None => Ok(default),
            Some(v) => v
                .parse()
                .map_err(|_| FtlError::InvalidOption(format!("{key}={v} is not a valid value"))),
        }
    }

    /// A stable hash of every parameter (key=value, in key order): recorded in an image so it
    /// is reopened only with the parameters it was formatted with.
    pub fn fingerprint(&self) -> u64 {
        let mut text = String::new();
        for (k, v) in &self.params {
            text.push_str(k);
            text.push('=');
            text.push_str(v);
            text.push('\n');
        }
        xxhash_rust::xxh3::xxh3_64(text.as_bytes())
    }

    /// Rejects keys the design does not know (a misspelt parameter must not pass silently).
    pub fn check_known(&self, design: &str, known: &[&str]) -> Result<(), FtlError> {
        for k in self.params.keys() {
            if !known.contains(&k.as_str()) {
                return Err(FtlError::InvalidOption(format!(
                    "{design} has no parameter '{k}'; known: {}",
                    known.join(", ")
                )));
            }
        }
        Ok(())
    }
}

/// What a recovery cost: reads from the crash instant until the device is ready.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct RecoveryReport {
    pub flash_reads: u64,
    pub flash_programs: u64,
    pub flash_erases: u64,
    /// Simulated time from power-on to ready.
    pub sim_ns: u64,
    /// Design-specific details (e.g. `("ala_pages_scanned", 312.0)`).
    pub details: Vec<(String, f64)>,
}

impl RecoveryReport {
    /// Measures a recovery that started at `start_ns` with `before` as the flash counters.
    pub fn measure(flash: &Flash, before: &flash::FlashStats, start_ns: u64) -> RecoveryReport {
        let d = flash.stats().since(before);
        RecoveryReport {
            flash_reads: d.total_reads(),
            flash_programs: d.total_programs(),
            flash_erases: d.total_erases(),
            sim_ns: flash.idle_ns().saturating_sub(start_ns),
            details: Vec::new(),
        }
    }
}

pub type FormatFn = fn(Flash, &DesignOptions) -> Result<Box<dyn BlockDevice>, FtlError>;
pub type RecoverFn =
    fn(Flash, &DesignOptions) -> Result<(Box<dyn BlockDevice>, RecoveryReport), FtlError>;

/// A design as the tools see it: how to build it on a fresh device and how to recover it.
#[derive(Clone)]
pub struct DesignSpec {
    /// `--ftl` name.
    pub name: &'static str,
    pub summary: &'static str,
    pub promise: Promise,
    /// OOB bytes per page the design uses (the store keeps only these).
    pub oob_record_bytes: fn(&Geometry) -> u32,
    /// Version of the design's on-flash format (every record it writes: OOB records, metadata
    /// pages). An image records it in its header; another version is refused on open.
    pub format_version: u32,
    /// Builds the design on an erased device.
    pub format: FormatFn,
    /// Rebuilds the design from what is on flash alone (its clock already at the crash instant).
    pub recover: RecoverFn,
    /// Name of the workload that exercises the design's whole interface.
    pub default_workload: &'static str,
    /// Parameter sets a soak varies across seeds (each seed runs one of them; none: only the
    /// defaults), so that a mode the soak's small geometries would not choose by default is
    /// soaked too (Möbius's striped ALA).
    pub soak_params: &'static [&'static [(&'static str, &'static str)]],
    /// Where the design takes its over-provisioning from, so that a soak and the capacity test
    /// can turn it down on every design alike.
    pub over_provisioning: OverProvisioningKnob,
}

/// Where a design takes its over-provisioning (the share of flash hidden from the host as GC
/// headroom) from. The designs differ: DFTL and Möbius hide the device's share; the others
/// have a parameter of their own, with their own default.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OverProvisioningKnob {
    /// The device's `over_provisioning` (`--set over_provisioning=...`).
    Device,
    /// The design parameter of this name (`--param name=...`).
    Param(&'static str),
}

impl DesignSpec {
    /// OOB bytes per page the design keeps on `geometry` (at most the spare area).
    pub fn oob_record(&self, geometry: &Geometry) -> u32 {
        (self.oob_record_bytes)(geometry).min(geometry.oob_bytes)
    }

    /// What an image formatted by this design with `options` records in its header.
    pub fn image_identity(&self, options: &DesignOptions) -> flash::ImageIdentity {
        flash::ImageIdentity {
            design: self.name.to_string(),
            format_version: self.format_version,
            params_hash: options.fingerprint(),
        }
    }

    /// A new, erased image file for this design (to be formatted).
    pub fn create_image(
        &self,
        path: &std::path::Path,
        config: &flash::DeviceConfig,
        options: &DesignOptions,
    ) -> Result<Flash, FtlError> {
        refuse_media_on_file(config)?;
        let oob = self.oob_record(&config.geometry);
        let identity = self.image_identity(options);
        let store = flash::FileStore::create(path, &config.geometry, oob, &identity)?;
        Ok(Flash::new(config.clone(), Box::new(store)))
    }

    /// An existing image file, refused unless this design formatted it with `options` on this
    /// geometry (to be recovered).
    pub fn open_image(
        &self,
        path: &std::path::Path,
        config: &flash::DeviceConfig,
        options: &DesignOptions,
    ) -> Result<Flash, FtlError> {
        refuse_media_on_file(config)?;
        let oob = self.oob_record(&config.geometry);
        let identity = self.image_identity(options);
        let store = flash::FileStore::open(path, &config.geometry, oob, &identity)?;
        Ok(Flash::new(config.clone(), Box::new(store)))
    }
}

/// The media model keeps the chips' state beside their data in memory (its plane); an image
/// file keeps only data, so a device with the model on runs in memory (docs/reliability.md).
fn refuse_media_on_file(config: &flash::DeviceConfig) -> Result<(), FtlError> {
    match config.media {
        None => Ok(()),
        Some(_) => Err(FtlError::InvalidOption(
            "the media model runs on in-memory devices only, not on an image file".into(),
        )),
    }
}

/// The instant of the last request a design took. Arrivals never go back in time (the
/// contract of [`BlockDevice`]; the host layer keeps it): every design admits each request
/// through its clock and refuses one that arrives earlier.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ArrivalClock(u64);

impl ArrivalClock {
    /// A clock whose next request may arrive at `ns` or later (after a format or recovery).
    pub fn starting_at(ns: u64) -> ArrivalClock {
        ArrivalClock(ns)
    }

    /// The last arrival admitted.
    pub fn last(&self) -> u64 {
        self.0
    }

    /// Admits a request arriving at `arrival_ns`; `TimeWentBackwards` if it is earlier than
    /// the last one.
    pub fn admit(&mut self, arrival_ns: u64) -> Result<(), FtlError> {
        if arrival_ns < self.0 {
            return Err(FtlError::TimeWentBackwards {
                arrival_ns,
                previous_ns: self.0,
            });
        }
        self.0 = arrival_ns;
        Ok(())
    }
}

/// Refuses a device that keeps fewer than `needs` OOB bytes per page, the size of `design`'s
/// OOB record: a spare area that small (`geometry.oob_bytes`), or a store built to keep fewer.
/// Every design calls it before it builds anything, at format and at recovery, so this is a
/// typed error there instead of a broken flash rule at the first program.
pub fn require_spare_area(design: &'static str, needs: u32, flash: &Flash) -> Result<(), FtlError> {
    let has = flash.geometry().oob_bytes.min(flash.oob_record_bytes());
    if has < needs {
        return Err(FtlError::SpareAreaTooSmall { design, needs, has });
    }
    Ok(())
}

/// Checks that `[start, start+count)` lies inside the device and is not empty.
pub fn check_range(start: Lpn, count: u64, logical_pages: u32) -> Result<(), FtlError> {
    if count == 0 {
        return Err(FtlError::EmptyRequest);
    }
    let end = start.0 as u64 + count;
    if end > logical_pages as u64 {
        let bad = if start.0 >= logical_pages {
            start.0
        } else {
            logical_pages
        };
        return Err(FtlError::LpnOutOfRange {
            lpn: Lpn(bad),
            logical_pages,
        });
    }
    Ok(())
}

/// Checks that `pages` more new pages of transactions fit beside the `in_flight` pages of the
/// running ones in the `room` a design sets aside for them (their previous versions stay live
/// until they commit): else [`FtlError::TxRoomTaken`].
pub fn check_tx_room(pages: u64, in_flight: u64, room: u64) -> Result<(), FtlError> {
    if in_flight + pages > room {
        return Err(FtlError::TxRoomTaken {
            pages,
            in_flight,
            room,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tx_room_tests {
    use super::*;

    #[test]
    fn pages_over_the_room_are_refused_and_up_to_it_taken() {
        assert_eq!(check_tx_room(6, 10, 16), Ok(()));
        assert_eq!(
            check_tx_room(7, 10, 16),
            Err(FtlError::TxRoomTaken {
                pages: 7,
                in_flight: 10,
                room: 16
            })
        );
    }
}

#[cfg(test)]
mod arrival_tests {
    use super::*;

    #[test]
    fn an_earlier_arrival_is_refused_and_leaves_the_clock() {
        let mut clock = ArrivalClock::starting_at(100);
        assert!(clock.admit(100).is_ok());
        assert!(clock.admit(250).is_ok());
        assert_eq!(
            clock.admit(249),
            Err(FtlError::TimeWentBackwards {
                arrival_ns: 249,
                previous_ns: 250
            })
        );
        assert_eq!(clock.last(), 250);
    }
}
