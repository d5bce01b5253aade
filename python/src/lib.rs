//! `mobius._native`: the Rust side of the Python package (docs/python.md).
//!
//! `bench` and `crashtest` fill the command line's argument structs from keyword arguments and
//! run the same library functions as `mobius bench --json` / `mobius crashtest --json`, so the
//! dictionaries they return have the CLI's keys. [`Device`] is one design on an emulated device
//! for interactive work: writes, reads, static transactions, power cuts at any simulated instant.
//! Every simulation runs with the GIL released (`Python::detach`), so threads and Dask workers
//! run in parallel; every error is a Python exception carrying the typed error's message.

use crashtest::options::{CrashtestOptions, OptionsError};
use flash::{Content, DeviceConfig, FileStore, Flash, Lpn, Store};
use ftl::{DesignOptions, DesignSpec, DwriteFlag, FtlError, PageOutcome, SwriteMode, TxUuid};
use host::{Host, HostError};
use lab::bench::{BenchError, BenchOptions, WorkloadOptions};
use lab::device::{Recipe, RecipeError};
use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Mutex;

create_exception!(
    _native,
    MobiusError,
    PyException,
    "Any error mobius reports."
);
create_exception!(
    _native,
    ConfigError,
    MobiusError,
    "Unknown design, preset, workload or parameter."
);
create_exception!(
    _native,
    AddressError,
    MobiusError,
    "A logical page outside the device, or an empty request."
);
create_exception!(
    _native,
    TooLargeError,
    MobiusError,
    "A request or transaction larger than the design accepts."
);
create_exception!(
    _native,
    DeviceFullError,
    MobiusError,
    "Garbage collection cannot free a block."
);
create_exception!(
    _native,
    TransactionError,
    MobiusError,
    "A transaction the design refuses (unknown, duplicate, conflicting, committed)."
);
create_exception!(
    _native,
    ImageError,
    MobiusError,
    "The image file is missing, foreign, corrupt or failed."
);
create_exception!(
    _native,
    MediaError,
    MobiusError,
    "Worn media: a page the ECC could not correct, metadata lost with the data it maps, or no spare block left."
);

/// The Python exception for a design's typed error.
/// The Python exception for an error of the host layer (the design's own errors as
/// [`ftl_err`]).
fn host_err(e: HostError) -> PyErr {
    let msg = e.to_string();
    match e {
        HostError::Device(f) => ftl_err(f),
        HostError::OutOfRange { .. } => AddressError::new_err(msg),
        HostError::TooLarge { .. } => TooLargeError::new_err(msg),
        HostError::NoTransactions { .. } => ConfigError::new_err(msg),
        HostError::Failed { .. } => ImageError::new_err(msg),
        HostError::Uncorrectable { .. } => MediaError::new_err(msg),
        HostError::NeverAcknowledged(_) | HostError::Invariant { .. } => MobiusError::new_err(msg),
    }
}

fn ftl_err(e: FtlError) -> PyErr {
    let msg = e.to_string();
    match e {
        FtlError::LpnOutOfRange { .. } | FtlError::EmptyRequest => AddressError::new_err(msg),
        FtlError::RequestTooLarge { .. } | FtlError::TxTooLarge { .. } => {
            TooLargeError::new_err(msg)
        }
        FtlError::NoSpace => DeviceFullError::new_err(msg),
        FtlError::InvalidOption(_)
        | FtlError::Unsupported(_)
        | FtlError::SpareAreaTooSmall { .. } => ConfigError::new_err(msg),
        FtlError::ImageIo(_) | FtlError::Corrupt(_) => ImageError::new_err(msg),
        FtlError::MediaLoss { .. } | FtlError::WornOut(_) => MediaError::new_err(msg),
        _ => TransactionError::new_err(msg),
    }
}

/// The Python exception for a device that cannot be shaped as asked: a bad preset, override or
/// size is the caller's configuration; an unreadable TOML file is an I/O error.
fn recipe_err(e: RecipeError) -> PyErr {
    match e {
        RecipeError::ConfigFile { .. } => MobiusError::new_err(e.to_string()),
        _ => ConfigError::new_err(e.to_string()),
    }
}

/// The Python exception for a workload that cannot run: a bad option is the caller's
/// configuration; a request the device failed, an invariant it broke, is the run's error.
fn workload_err(e: workload::WorkloadError) -> PyErr {
    use workload::WorkloadError as W;
    match e {
        W::UnknownWorkload { .. }
        | W::ZeroRequestPages
        | W::ZeroQueueDepth
        | W::FractionOutOfRange
        | W::RangeTooSmall { .. }
        | W::MinTxPages
        | W::NeedsTransactions(_) => ConfigError::new_err(e.to_string()),
        _ => MobiusError::new_err(e.to_string()),
    }
}

/// The Python exception for a benchmark that could not run.
fn bench_err(e: BenchError) -> PyErr {
    match e {
        BenchError::UnknownDesign(e) => ConfigError::new_err(e.to_string()),
        BenchError::Device(e) => recipe_err(e),
        BenchError::Workload(e) => workload_err(e),
        BenchError::Design(f) => ftl_err(f),
        BenchError::Peer(e) => ConfigError::new_err(e.to_string()),
    }
}

/// The Python exception for a crash campaign that could not run (a violation is a result, not
/// an error).
fn campaign_err(e: OptionsError) -> PyErr {
    match e {
        OptionsError::Device(e) => recipe_err(e),
        OptionsError::Workload(e) => workload_err(e),
        OptionsError::Design(f) => ftl_err(f),
        OptionsError::Campaign(_) | OptionsError::Share(_) => MobiusError::new_err(e.to_string()),
        _ => ConfigError::new_err(e.to_string()),
    }
}

fn json_to_py(py: Python<'_>, v: &serde_json::Value) -> PyResult<Py<PyAny>> {
    let text = serde_json::to_string(v).map_err(|e| MobiusError::new_err(e.to_string()))?;
    let json = py.import("json")?;
    Ok(json.call_method1("loads", (text,))?.unbind())
}

fn pairs(map: Option<BTreeMap<String, String>>) -> Vec<String> {
    map.unwrap_or_default()
        .into_iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect()
}

/// Every design: name, summary, promise, default workload.
#[pyfunction]
fn designs(py: Python<'_>) -> PyResult<Py<PyAny>> {
    let list: Vec<serde_json::Value> = lab::registry::all()
        .iter()
        .map(|d| {
            serde_json::json!({
                "name": d.name, "summary": d.summary, "promise": d.promise.name(),
                "default_workload": d.default_workload,
            })
        })
        .collect();
    json_to_py(py, &serde_json::Value::Array(list))
}

/// Every preset's full configuration (geometry, timing, over-provisioning, host interface).
#[pyfunction]
fn presets(py: Python<'_>) -> PyResult<Py<PyAny>> {
    let mut map = serde_json::Map::new();
    for name in flash::PRESET_NAMES {
        let c = DeviceConfig::preset(name).map_err(|e| ConfigError::new_err(e.to_string()))?;
        let v = serde_json::to_value(&c).map_err(|e| MobiusError::new_err(e.to_string()))?;
        map.insert(name.to_string(), v);
    }
    json_to_py(py, &serde_json::Value::Object(map))
}

/// The workload options of `bench` and `crashtest`, named as on the command line; an unknown
/// name is an error, not a silently ignored option.
fn workload_args(shape: Option<&Bound<'_, PyDict>>) -> PyResult<WorkloadOptions> {
    let mut w = WorkloadOptions::default();
    let Some(shape) = shape else { return Ok(w) };
    for (k, v) in shape.iter() {
        let key: String = k.extract()?;
        let bad = |e: PyErr| ConfigError::new_err(format!("{key}: {e}"));
        match key.as_str() {
            "workload" => w.workload = Some(v.extract().map_err(bad)?),
            "requests" => w.requests = Some(v.extract().map_err(bad)?),
            "request_pages" => w.request_pages = Some(v.extract().map_err(bad)?),
            "range_pages" => w.range_pages = Some(v.extract().map_err(bad)?),
            "qd" => w.qd = Some(v.extract().map_err(bad)?),
            "fill" => w.fill = Some(v.extract().map_err(bad)?),
            "flush_every" => w.flush_every = Some(v.extract().map_err(bad)?),
            "read_fraction" => w.read_fraction = Some(v.extract().map_err(bad)?),
            "abort_fraction" => w.abort_fraction = Some(v.extract().map_err(bad)?),
            "locality_pages" => w.locality_pages = Some(v.extract().map_err(bad)?),
            "min_tx_pages" => w.min_tx_pages = Some(v.extract().map_err(bad)?),
            "trim_fraction" => w.trim_fraction = Some(v.extract().map_err(bad)?),
            "interleave_fraction" => w.interleave_fraction = Some(v.extract().map_err(bad)?),
            other => return Err(ConfigError::new_err(format!("unknown option '{other}'"))),
        }
    }
    Ok(w)
}

fn recipe(preset: String, set: Option<BTreeMap<String, String>>) -> Recipe {
    Recipe {
        preset,
        config_file: None,
        overrides: pairs(set),
    }
}

/// The device `recipe` describes with the media model as `media` says (its draws seeded by
/// `seed`): `media.*` overrides apply once the model is on, as the CLI's `--set`.
fn media_config(
    recipe: Recipe,
    media: &crashtest::media::MediaRecipe,
    seed: u64,
) -> PyResult<DeviceConfig> {
    let (sets, rest) = crashtest::media::split_overrides(&recipe.overrides);
    let device = Recipe {
        overrides: rest,
        ..recipe
    }
    .resolve()
    .map_err(|e| ConfigError::new_err(format!("{e:#}")))?;
    let device = media
        .apply(device, &sets)
        .map_err(|e| ConfigError::new_err(e.to_string()))?;
    Ok(crashtest::with_media_seed(device, seed))
}

/// `mobius bench --json`: a seeded workload on a design, measured in simulated time.
#[pyfunction(name = "bench")]
#[pyo3(signature = (ftl, preset = "small".to_string(), params = None, set = None, seed = 1,
                    full_data = false, no_recovery = false, shape = None, peer = false))]
#[allow(clippy::too_many_arguments)]
fn run_bench(
    py: Python<'_>,
    ftl: String,
    preset: String,
    params: Option<BTreeMap<String, String>>,
    set: Option<BTreeMap<String, String>>,
    seed: u64,
    full_data: bool,
    no_recovery: bool,
    shape: Option<&Bound<'_, PyDict>>,
    peer: bool,
) -> PyResult<Py<PyAny>> {
    let args = BenchOptions {
        ftl,
        device: recipe(preset, set),
        workload: workload_args(shape)?,
        params: pairs(params),
        seed,
        full_data,
        no_recovery,
        peer,
    };
    let out = py
        .detach(|| lab::bench::measure(&args, &|_, _| {}))
        .map_err(bench_err)?;
    json_to_py(py, &out)
}

/// `mobius crashtest --json`: one campaign, or a soak over `seeds` seeds (or every design with
/// `ftl="all"`).
#[pyfunction(name = "crashtest")]
#[pyo3(signature = (ftl, preset = "small".to_string(), params = None, set = None, seed = None,
                    seeds = None, jobs = None, crash_points = 1000, torn = false,
                    exhaustive = false, promise = None, threads = None, fixed = false,
                    full_data = false, second_lives = 0, shape = None, share = None,
                    shares = None, wall_s = 0.0, cut_model = None, media = None, wear = None,
                    power_off_days = None))]
#[allow(clippy::too_many_arguments)]
fn run_crashtest(
    py: Python<'_>,
    ftl: String,
    preset: String,
    params: Option<BTreeMap<String, String>>,
    set: Option<BTreeMap<String, String>>,
    seed: Option<u64>,
    seeds: Option<usize>,
    jobs: Option<usize>,
    crash_points: usize,
    torn: bool,
    exhaustive: bool,
    promise: Option<String>,
    threads: Option<usize>,
    fixed: bool,
    full_data: bool,
    second_lives: usize,
    shape: Option<&Bound<'_, PyDict>>,
    share: Option<(usize, usize)>,
    shares: Option<Vec<String>>,
    wall_s: f64,
    cut_model: Option<String>,
    media: Option<String>,
    wear: Option<f64>,
    power_off_days: Option<f64>,
) -> PyResult<Py<PyAny>> {
    let args = CrashtestOptions {
        second_lives,
        first_cut: None,
        ftl,
        device: recipe(preset, set),
        media: crashtest::media::MediaRecipe {
            media,
            wear,
            power_off_days,
        },
        workload: workload_args(shape)?,
        params: pairs(params),
        crash_points,
        seed,
        seeds,
        jobs,
        fixed,
        shrink: false,
        controls: false,
        torn,
        exhaustive,
        promise,
        threads,
        full_data,
        replay_instant: None,
        mode: None,
        synchronous: None,
        tx: None,
        atomic_requests: false,
        plain_reads: false,
        shapes: Vec::new(),
        cut_model,
    };
    match args.workload.workload.as_deref() {
        Some(w) if w.starts_with("sqlite") => {
            return Err(ConfigError::new_err(
                "SQLite crash workloads run from the command line: mobius crashtest --workload sqlite-…",
            ));
        }
        Some("nbd") => {
            return Err(ConfigError::new_err(
                "NBD crash campaigns run from the command line: mobius crashtest --workload nbd",
            ));
        }
        _ => {}
    }
    let out = py
        .detach(|| match (share, shares) {
            // One share of a campaign's crash points, as JSON text for `shares`.
            (Some((part, parts)), _) => crashtest::options::measure_share(&args, part, parts)
                .map(|v| serde_json::Value::String(v.to_string())),
            // The whole campaign's report from all its shares.
            (None, Some(texts)) => {
                let values = texts
                    .iter()
                    .map(|t| serde_json::from_str(t))
                    .collect::<Result<Vec<serde_json::Value>, _>>()?;
                crashtest::options::merge_shares(&args, values, wall_s)
            }
            (None, None) => crashtest::options::measure(&args),
        })
        .map_err(campaign_err)?;
    json_to_py(py, &out)
}

/// One design on an emulated device, with full page data (see docs/python.md).
struct Open {
    /// The design behind the one host layer (its clock, held completions, fail-stop).
    dev: Option<Host>,
    spec: DesignSpec,
    options: DesignOptions,
    config: DeviceConfig,
    image: Option<PathBuf>,
    /// The flash contents when the operation log started: a power cut replays the log on it.
    base: Option<Box<dyn Store>>,
    now_ns: u64,
    /// When the device last became ready (formatted or recovered): the earliest power cut.
    ready_ns: u64,
    next_uuid: u64,
}

#[pyclass(module = "mobius._native", name = "Device")]
struct Device {
    state: Mutex<Open>,
}

impl Open {
    fn dev(&mut self) -> PyResult<&mut Host> {
        self.dev
            .as_mut()
            .ok_or_else(|| MobiusError::new_err("the device was lost in a failed recovery"))
    }

    fn page_bytes(&self) -> usize {
        self.config.geometry.page_bytes as usize
    }

    /// Splits `data` into whole pages.
    fn pages(&self, data: &[u8]) -> PyResult<Vec<Content>> {
        let pb = self.page_bytes();
        if data.is_empty() || !data.len().is_multiple_of(pb) {
            return Err(AddressError::new_err(format!(
                "data of {} bytes is not a whole number of {pb}-byte pages",
                data.len()
            )));
        }
        Ok(data.chunks(pb).map(|c| Content::Bytes(c.into())).collect())
    }

    /// Installs `flash` (just powered on at `at`) as the device and starts a new operation log.
    fn power_on(&mut self, mut flash: Flash, at: u64, format: bool) -> PyResult<()> {
        flash.start_clock_at(at);
        self.base = Some(flash.start_recording());
        let dev = if format {
            self.spec.build(flash, &self.options).map_err(ftl_err)?
        } else {
            self.spec.reopen(flash, &self.options).map_err(ftl_err)?.0
        };
        // The host resumes when the device is ready: formatted, or recovered.
        self.now_ns = at.max(dev.flash().idle_ns());
        self.ready_ns = self.now_ns;
        self.dev = Some(Host::new(dev, self.now_ns));
        Ok(())
    }

    /// Power cut at `at`: operations finished by then are kept, a running one is torn if `torn`,
    /// later ones never happened; the design recovers from what is on flash.
    fn crash(&mut self, at: Option<u64>, torn: bool) -> PyResult<u64> {
        let at = at.unwrap_or(self.now_ns);
        if at < self.ready_ns {
            return Err(MobiusError::new_err(format!(
                "a power cut at {at} ns is before the device was ready ({} ns)",
                self.ready_ns
            )));
        }
        let dev = self
            .dev
            .take()
            .ok_or_else(|| MobiusError::new_err("no device"))?;
        let mut flash = dev.into_device().into_flash();
        let log = flash.take_log().expect("the device always records");
        let base = self.base.take().expect("recording starts at power-on");
        let image = log.image_at(base.as_ref(), at, torn);
        drop(flash);
        let flash = match &self.image {
            None => Flash::new(self.config.clone(), image),
            Some(path) => {
                let id = self.spec.image_identity(&self.options);
                FileStore::replace_with(path, image.as_ref(), &id)
                    .map_err(|e| ImageError::new_err(e.to_string()))?;
                self.spec
                    .open_image(path, &self.config, &self.options)
                    .map_err(ftl_err)?
            }
        };
        self.power_on(flash, at, false)?;
        Ok(at)
    }
}

#[pymethods]
impl Device {
    /// Opens `ftl` on a fresh in-memory device, or on the image file `image` (created and
    /// formatted when missing, recovered when present). `media` ("slc", "mlc", "tlc") switches
    /// the media model on, as the CLI's `--media` (docs/reliability.md): blocks worn to `wear`
    /// times the part's rated cycles, `power_off_days` of lying unpowered after each power cut,
    /// draws from `media_seed`; `set={"media.<field>": ...}` changes any of its fields.
    #[new]
    #[pyo3(signature = (ftl = "mobius".to_string(), preset = "small".to_string(), params = None, set = None, image = None, media = None, wear = None, power_off_days = None, media_seed = 1))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        ftl: String,
        preset: String,
        params: Option<BTreeMap<String, String>>,
        set: Option<BTreeMap<String, String>>,
        image: Option<PathBuf>,
        media: Option<String>,
        wear: Option<f64>,
        power_off_days: Option<f64>,
        media_seed: u64,
    ) -> PyResult<Device> {
        let spec = lab::registry::find(&ftl).map_err(|e| ConfigError::new_err(e.to_string()))?;
        let media = crashtest::media::MediaRecipe {
            media,
            wear,
            power_off_days,
        };
        let config = media_config(recipe(preset, set), &media, media_seed)?;
        let options = DesignOptions::from_pairs(&pairs(params)).map_err(ftl_err)?;
        let oob = spec.oob_record(&config.geometry);
        let mut open = Open {
            dev: None,
            spec,
            options,
            config,
            image: image.clone(),
            base: None,
            now_ns: 0,
            ready_ns: 0,
            next_uuid: 1,
        };
        py.detach(|| -> PyResult<()> {
            let (flash, format) = match &image {
                None => (Flash::in_memory(open.config.clone(), oob, false), true),
                Some(p) if p.exists() => (
                    open.spec
                        .open_image(p, &open.config, &open.options)
                        .map_err(ftl_err)?,
                    false,
                ),
                Some(p) => (
                    open.spec
                        .create_image(p, &open.config, &open.options)
                        .map_err(ftl_err)?,
                    true,
                ),
            };
            open.power_on(flash, 0, format)
        })?;
        Ok(Device {
            state: Mutex::new(open),
        })
    }

    /// Bytes per logical page.
    #[getter]
    fn page_bytes(&self) -> usize {
        self.lock().page_bytes()
    }

    /// Logical pages the host may address.
    #[getter]
    fn logical_pages(&self) -> PyResult<u32> {
        Ok(self.lock().dev()?.device().logical_pages())
    }

    /// The host's simulated clock (ns): each call waits for its acknowledgement.
    #[getter]
    fn now_ns(&self) -> u64 {
        self.lock().now_ns
    }

    /// Leaves the powered device idle for `days` (simulated): the host's clock moves on, and
    /// with the media model on every page ages by them. Returns the new clock.
    fn idle(&self, days: f64) -> PyResult<u64> {
        if !(days.is_finite() && days >= 0.0) {
            return Err(ConfigError::new_err(format!(
                "idle days must be a number at least 0, not {days}"
            )));
        }
        let mut s = self.lock();
        s.now_ns = s.now_ns.saturating_add((days * 86_400e9).round() as u64);
        Ok(s.now_ns)
    }

    #[getter]
    fn design(&self) -> &'static str {
        self.lock().spec.name
    }

    /// Writes whole pages at `lpn`; returns the acknowledgement instant.
    fn write(&self, py: Python<'_>, lpn: u32, data: &[u8]) -> PyResult<u64> {
        let mut guard = self.lock();
        let s: &mut Open = &mut guard;
        let pages = s.pages(data)?;
        py.detach(|| {
            let now = s.now_ns;
            let done = s
                .dev()?
                .write_pages(Lpn(lpn), &pages, now)
                .map_err(host_err)?;
            s.now_ns = s.now_ns.max(done.ack_ns);
            Ok(done.ack_ns)
        })
    }

    /// Reads `count` pages at `lpn`; unwritten pages read as zeros.
    #[pyo3(signature = (lpn, count = 1))]
    fn read<'py>(&self, py: Python<'py>, lpn: u32, count: u32) -> PyResult<Bound<'py, PyBytes>> {
        self.read_with(py, lpn, count, false)
    }

    /// Makes every acknowledged write durable.
    fn flush(&self, py: Python<'_>) -> PyResult<u64> {
        let mut guard = self.lock();
        let s: &mut Open = &mut guard;
        py.detach(|| {
            let now = s.now_ns;
            let ack = s.dev()?.flush(now).map_err(host_err)?;
            s.now_ns = s.now_ns.max(ack);
            Ok(ack)
        })
    }

    fn trim(&self, py: Python<'_>, lpn: u32, count: u32) -> PyResult<u64> {
        let mut guard = self.lock();
        let s: &mut Open = &mut guard;
        py.detach(|| {
            let now = s.now_ns;
            let done = s
                .dev()?
                .trim_pages(Lpn(lpn), count, now)
                .map_err(host_err)?;
            s.now_ns = s.now_ns.max(done.ack_ns);
            Ok(done.ack_ns)
        })
    }

    /// Commits `pages` (a list of `(lpn, bytes)`, one page each) as one static transaction
    /// (SWRITE): synchronous (durable when acknowledged) or asynchronous (atomic at once, durable
    /// at the returned `durable_ns`). Returns `(ack_ns, durable_ns)`.
    #[pyo3(signature = (pages, sync = true))]
    fn swrite(
        &self,
        py: Python<'_>,
        pages: Vec<(u32, Vec<u8>)>,
        sync: bool,
    ) -> PyResult<(u64, u64)> {
        let mut guard = self.lock();
        let s: &mut Open = &mut guard;
        let pb = s.page_bytes();
        let mut tx = Vec::with_capacity(pages.len());
        for (lpn, data) in pages {
            if data.len() != pb {
                return Err(AddressError::new_err(format!(
                    "page {lpn}: {} bytes, a transaction page must be {pb}",
                    data.len()
                )));
            }
            tx.push((Lpn(lpn), Content::Bytes(data.into())));
        }
        let mode = if sync {
            SwriteMode::Sync
        } else {
            SwriteMode::Async
        };
        py.detach(|| {
            let uuid = TxUuid(s.next_uuid);
            s.next_uuid += 1;
            let now = s.now_ns;
            // A merged small transaction waits for the group it joined to close.
            let done = s
                .dev()?
                .swrite_acknowledged(uuid, &tx, mode, now)
                .map_err(host_err)?;
            s.now_ns = s.now_ns.max(done.ack_ns);
            Ok((done.ack_ns, done.durable_ns.unwrap_or(done.ack_ns)))
        })
    }

    /// A fresh transaction id for `dwrite` / `abort`.
    fn new_uuid(&self) -> u64 {
        let mut guard = self.lock();
        guard.next_uuid += 1;
        guard.next_uuid - 1
    }

    /// One page of a dynamic transaction (DWRITE): `flag` is `head`, `body`, `rear` or `single`
    /// (head and rear at once). Returns `(ack_ns, durable_ns)`; `durable_ns` is None until rear.
    fn dwrite(
        &self,
        py: Python<'_>,
        uuid: u64,
        lpn: u32,
        data: Vec<u8>,
        flag: &str,
    ) -> PyResult<(u64, Option<u64>)> {
        let flag = match flag {
            "head" => DwriteFlag::Head,
            "body" => DwriteFlag::Body,
            "rear" => DwriteFlag::Rear,
            "single" => DwriteFlag::Single,
            other => {
                return Err(ConfigError::new_err(format!(
                    "unknown DWRITE flag '{other}'; known: head, body, rear, single"
                )))
            }
        };
        let mut guard = self.lock();
        let s: &mut Open = &mut guard;
        let page = s.pages(&data)?;
        if page.len() != 1 {
            return Err(AddressError::new_err("a DWRITE carries exactly one page"));
        }
        py.detach(|| {
            let now = s.now_ns;
            let done = s
                .dev()?
                .dwrite(TxUuid(uuid), Lpn(lpn), &page[0], flag, now)
                .map_err(host_err)?;
            s.now_ns = s.now_ns.max(done.ack_ns);
            Ok((done.ack_ns, done.durable_ns))
        })
    }

    /// ABORT of a running transaction; returns the acknowledgement instant.
    fn abort(&self, py: Python<'_>, uuid: u64) -> PyResult<u64> {
        let mut guard = self.lock();
        let s: &mut Open = &mut guard;
        py.detach(|| {
            let now = s.now_ns;
            let done = s.dev()?.abort(TxUuid(uuid), now).map_err(host_err)?;
            s.now_ns = s.now_ns.max(done.ack_ns);
            Ok(done.ack_ns)
        })
    }

    /// Serializable read (SREAD): returns after every static transaction that arrived before it.
    #[pyo3(signature = (lpn, count = 1))]
    fn sread<'py>(&self, py: Python<'py>, lpn: u32, count: u32) -> PyResult<Bound<'py, PyBytes>> {
        self.read_with(py, lpn, count, true)
    }

    /// What the design offers: static/dynamic transactions, SREAD, ABORT, largest transaction.
    fn capabilities(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let mut guard = self.lock();
        let caps = guard.dev()?.capabilities();
        let v = serde_json::to_value(caps).map_err(|e| MobiusError::new_err(e.to_string()))?;
        json_to_py(py, &v)
    }

    /// Whether the design offers transactions (SWRITE).
    #[getter]
    fn transactional(&self) -> PyResult<bool> {
        Ok(self.lock().dev()?.capabilities().is_some())
    }

    /// Power cut at simulated instant `at_ns` (default: now), then recovery; returns the instant.
    #[pyo3(signature = (at_ns = None, torn = true))]
    fn crash(&self, py: Python<'_>, at_ns: Option<u64>, torn: bool) -> PyResult<u64> {
        let mut guard = self.lock();
        let s: &mut Open = &mut guard;
        py.detach(|| s.crash(at_ns, torn))
    }

    /// Flash counters and the design's own metrics.
    fn stats(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let mut guard = self.lock();
        let s: &mut Open = &mut guard;
        let dev = s.dev()?.device();
        let f = dev.flash().stats();
        let mut m = serde_json::json!({
            "design": dev.design(),
            "flash_programs": f.total_programs(),
            "flash_reads": f.total_reads(),
            "flash_erases": f.total_erases(),
            "logical_pages": dev.logical_pages(),
        });
        let obj = m.as_object_mut().expect("object");
        for (k, v) in dev.metrics() {
            obj.insert(k, serde_json::json!(v));
        }
        if dev.flash().config().media.is_some() {
            let media =
                serde_json::to_value(&f.media).map_err(|e| MobiusError::new_err(e.to_string()))?;
            obj.insert("media".into(), media);
        }
        obj.insert("now_ns".into(), serde_json::json!(s.now_ns));
        json_to_py(py, &m)
    }
}

impl Device {
    fn read_with<'py>(
        &self,
        py: Python<'py>,
        lpn: u32,
        count: u32,
        serializable: bool,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let mut guard = self.lock();
        let s: &mut Open = &mut guard;
        let pb = s.page_bytes();
        let bytes = py.detach(|| -> PyResult<Vec<u8>> {
            let mut out = Vec::new();
            let now = s.now_ns;
            let dev = s.dev()?;
            let done = if serializable {
                dev.sread(Lpn(lpn), count, now, &mut out)
            } else {
                dev.read_pages(Lpn(lpn), count, now, &mut out)
            }
            .map_err(host_err)?;
            s.now_ns = s.now_ns.max(done.ack_ns);
            let mut bytes = vec![0u8; pb * out.len()];
            for (page, o) in bytes.chunks_mut(pb).zip(&out) {
                match o {
                    PageOutcome::Data(c) => c.copy_page_into(page),
                    PageOutcome::Unwritten => {}
                    PageOutcome::Uncorrectable => {
                        return Err(MediaError::new_err(format!(
                            "uncorrectable page in {lpn}+{count}: lost to the media"
                        )))
                    }
                }
            }
            Ok(bytes)
        })?;
        Ok(PyBytes::new(py, &bytes))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Open> {
        // A panic inside a call poisons the lock; the state is still the last consistent one.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(designs, m)?)?;
    m.add_function(wrap_pyfunction!(presets, m)?)?;
    m.add_function(wrap_pyfunction!(run_bench, m)?)?;
    m.add_function(wrap_pyfunction!(run_crashtest, m)?)?;
    m.add_class::<Device>()?;
    let py = m.py();
    m.add("MobiusError", py.get_type::<MobiusError>())?;
    m.add("ConfigError", py.get_type::<ConfigError>())?;
    m.add("AddressError", py.get_type::<AddressError>())?;
    m.add("TooLargeError", py.get_type::<TooLargeError>())?;
    m.add("DeviceFullError", py.get_type::<DeviceFullError>())?;
    m.add("TransactionError", py.get_type::<TransactionError>())?;
    m.add("ImageError", py.get_type::<ImageError>())?;
    m.add("MediaError", py.get_type::<MediaError>())?;
    Ok(())
}
