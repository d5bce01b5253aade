//! The table of unknowns: every parameter of the model that the papers leave open, its default,
//! the range it plausibly takes and where that range comes from (issue #66).
//!
//! `mobius compare` grades each claim at one point of this table (the defaults, [`Point::default`]).
//! An experiment reads the parameters through its [`Context`](crate::Context) — the device
//! ([`Overrides::device`]: flash timing, channel, host link, over-provisioning), the design's
//! options ([`Overrides::options`]: mapping RAM, Möbius's ALA, GC policy, a design's own
//! over-provisioning), the host's concurrency ([`Overrides::clients`]) and the fill
//! ([`Overrides::fill`]) — so that `mobius compare --unknowns SPEC` runs it at any other point,
//! and `mobius compare --robustness` re-grades it across the table ([`crate::robustness`]).
//! What an experiment consulted is recorded ([`Overrides::consulted`]): the parameters that reach
//! it, which the robustness campaign varies for it.
//!
//! At the defaults every accessor returns its input unchanged: a plain `mobius compare` gives
//! the same numbers as before the table existed.

use flash::{DeviceConfig, Geometry, HostInterface};
use ftl::{DesignOptions, DesignSpec, OverProvisioningKnob};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

/// How a parameter's range is given.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Range {
    /// A factor on the experiment's own default (its preset's value), `lo ..= hi`; sampled
    /// log-uniformly (a halving and a doubling are as far from the default).
    Factor { lo: f64, hi: f64 },
    /// An absolute value replacing the experiment's default, `lo ..= hi`; sampled uniformly, or
    /// log-uniformly with `log` (a count over orders of magnitude); rounded with `integer`.
    Value {
        lo: f64,
        hi: f64,
        log: bool,
        integer: bool,
    },
    /// One of named choices; the first is the default.
    Choice(&'static [&'static str]),
}

/// One parameter the papers leave open.
#[derive(Clone, Copy, Debug)]
pub struct Unknown {
    /// Its name in `--unknowns name=value`.
    pub name: &'static str,
    /// What it is, and how it reaches the model.
    pub what: &'static str,
    /// Its default, in words (the value each experiment runs at without overrides).
    pub default: &'static str,
    pub range: Range,
    /// Where the range comes from.
    pub source: &'static str,
}

impl Unknown {
    /// The range in words, for the report.
    pub fn range_text(&self) -> String {
        let g = |v: f64| v.to_string();
        match self.range {
            Range::Factor { lo, hi } => format!("× {} … × {}", g(lo), g(hi)),
            Range::Value { lo, hi, .. } => format!("{} … {}", g(lo), g(hi)),
            Range::Choice(c) => c.join(" / "),
        }
    }

    /// The ends of its range a one-at-a-time run takes: both ends of a number, every choice but
    /// the default.
    pub fn ends(&self) -> Vec<Value> {
        match self.range {
            Range::Factor { lo, hi } | Range::Value { lo, hi, .. } => {
                vec![Value::Num(lo), Value::Num(hi)]
            }
            Range::Choice(c) => c[1..].iter().map(|s| Value::Choice(s)).collect(),
        }
    }

    /// The value at `u` in [0, 1) of its range (a Latin-hypercube coordinate).
    pub fn at(&self, u: f64) -> Value {
        let lerp = |lo: f64, hi: f64, log: bool| match log {
            true => (lo.ln() + u * (hi.ln() - lo.ln())).exp(),
            false => lo + u * (hi - lo),
        };
        match self.range {
            Range::Factor { lo, hi } => Value::Num(round3(lerp(lo, hi, true))),
            Range::Value {
                lo,
                hi,
                log,
                integer,
            } => {
                let v = lerp(lo, hi, log);
                Value::Num(if integer {
                    v.round().clamp(lo, hi)
                } else {
                    round3(v)
                })
            }
            Range::Choice(c) => Value::Choice(c[((u * c.len() as f64) as usize).min(c.len() - 1)]),
        }
    }
}

/// Three significant decimals: a sampled point prints, parses back and names its cell exactly.
fn round3(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}

/// A parameter's value at a point.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Value {
    Num(f64),
    Choice(&'static str),
}

impl std::fmt::Display for Value {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Value::Num(v) => write!(f, "{v}"),
            Value::Choice(c) => f.write_str(c),
        }
    }
}

/// The page sizes `page_size` moves between (a 16 KB-page preset keeps its own).
const PAGE_SIZES: [u32; 2] = [4096, 8192];
/// The least GC free-block mark `gc_threshold` sets for wcache and OPTR: wcache's own floor
/// (two free blocks on one chip left none at a cut: `wcache::wcache::default_gc_free_blocks`).
/// The other designs refuse a mark below their own floor (`mftl::min_gc_free_blocks`,
/// `dftl::min_gc_free_blocks`, `atomic_write::engine::min_gc_free_blocks`,
/// `txflash::min_gc_free_blocks`), and the factor stops there.
const MIN_GC_FREE_BLOCKS: u32 = 3;

/// `g` with `page_bytes` pages and the same capacity: the spare area scales with the page, the
/// blocks per chip inversely (at least one), the pages per block and the chips stay — as the
/// `jasmine-8k` preset (Möbius Table II's 8 KB + 448 B flash) stands to `jasmine`.
fn with_page_bytes(g: &Geometry, page_bytes: u32) -> Geometry {
    let scale = |v: u32, num: u32, den: u32| ((v as u64 * num as u64 / den as u64) as u32).max(1);
    Geometry {
        page_bytes,
        oob_bytes: scale(g.oob_bytes, page_bytes, g.page_bytes),
        blocks_per_chip: scale(g.blocks_per_chip, g.page_bytes, page_bytes),
        ..g.clone()
    }
}

/// Every design whose mapping table lives in a DRAM of its own size (`dram_mb`).
const MAPPING_RAM_DESIGNS: [&str; 2] = ["mobius", "dftl"];
/// Designs with a GC victim policy (greedy or cost-benefit), and the parameter that sets it.
/// Möbius chooses among the blocks no pin holds (docs/mobius.md) with either policy, as DFTL
/// does (Möbius §IV-D: "Except ALA, garbage collection scheme is the same as DFTL").
const GC_POLICY_DESIGNS: [(&str, &str); 8] = [
    ("mobius", "gc_policy"),
    ("dftl", "gc"),
    ("atomic-write", "gc_policy"),
    ("lighttx", "gc_policy"),
    ("txflash-tc", "gc_policy"),
    ("txflash-scc", "gc_policy"),
    ("txflash-bpcc", "gc_policy"),
    ("wcache", "gc_policy"),
];

/// The table: each parameter the papers leave open (docs/robustness.md has it with its sources).
pub const TABLE: [Unknown; 16] = [
    Unknown {
        name: "read",
        what: "flash page read time (`timing.read_ns`, every preset)",
        default: "the preset's: 25 µs SLC, 50 µs MLC (jasmine), 60 µs 16 KB MLC (optr) [R]",
        range: Range::Factor { lo: 0.5, hi: 2.0 },
        source: "datasheets of the papers' era: SLC tR 25 µs (Samsung K9F series), MLC 50–75 µs (Micron 34 nm MT29F), large-page MLC up to 100 µs",
    },
    Unknown {
        name: "program",
        what: "flash page program time (`timing.program_ns`)",
        default: "the preset's: 200 µs SLC, 900 µs MLC, 1.3 ms 16 KB MLC [R]",
        range: Range::Factor { lo: 0.5, hi: 2.0 },
        source: "datasheets: SLC tPROG 200 µs typical, 700 µs max (Samsung K9F); MLC 900 µs typical, 2.2 ms max (Micron MT29F 34 nm)",
    },
    Unknown {
        name: "erase",
        what: "flash block erase time (`timing.erase_ns`)",
        default: "the preset's: 1.5 ms SLC [P TxFlash §5], 3 ms MLC, 3.5 ms 16 KB MLC [R]",
        range: Range::Factor { lo: 0.5, hi: 2.0 },
        source: "datasheets: tBERS 1.5–2 ms typical SLC, 3 ms typical and up to 10 ms max MLC",
    },
    Unknown {
        name: "channel",
        what: "flash channel (bus) bandwidth (`timing.bus_mb_s`)",
        default: "the preset's: 40 MB/s (jasmine, txflash, small), 200 MB/s (optr) [R]",
        range: Range::Factor { lo: 0.75, hi: 2.5 },
        source: "ONFI 1.0 asynchronous interface 40–50 MB/s (the Jasmine board's Samsung parts) to ONFI 2.x synchronous 100–133 MB/s",
    },
    Unknown {
        name: "host_link",
        what: "host link bandwidth (`host.link_mb_s`); an ideal host (the small preset) stays ideal",
        default: "the preset's: 95 MB/s jasmine (the board's measured peak, Möbius Fig. 8 [P]), SATA 2.0 txflash, SATA 3.0 optr",
        range: Range::Choice(&["preset", "sata2", "sata3", "none"]),
        source: "SATA 2.0 300 MB/s and SATA 3.0 600 MB/s of payload; none: TxFlash's simulator models no link (§5)",
    },
    Unknown {
        name: "command",
        what: "per-command cost on the host link, µs (`host.command_ns`); not on an ideal host",
        default: "the preset's: 20 µs jasmine, 5 µs the SATA presets [R]",
        range: Range::Value {
            lo: 2.0,
            hi: 50.0,
            log: true,
            integer: false,
        },
        source: "AHCI command round trips of a few µs (NCQ FIS exchange) to tens of µs of firmware dispatch on 2010 controllers (Jasmine's ARM7 at 87.5 MHz)",
    },
    Unknown {
        name: "write_buffer",
        what: "device DRAM staging host writes (`host.write_buffer_pages`); not on an ideal host",
        default: "the preset's: 2,048 pages (8 MB of 4 KB pages) [R]",
        range: Range::Factor { lo: 0.25, hi: 4.0 },
        source: "OPTR's 8 MB write cache (§6.1 [P]); SSD DRAM of the era 32–128 MB of which the buffer is a share (Jasmine: 64 MB in all, Möbius §IV-A [P])",
    },
    Unknown {
        name: "mapping_ram",
        what: "controller DRAM for the mapping table, MB (`dram_mb` of mobius and dftl)",
        default: "64 MB (the Jasmine board's DRAM, Möbius §IV-A [P])",
        range: Range::Value {
            lo: 32.0,
            hi: 128.0,
            log: true,
            integer: false,
        },
        source: "SSD controllers of 2009–2012 with 32–128 MB of DRAM (Intel X25-M G2 32 MB, Jasmine 64 MB, Crucial C300 128 MB); Möbius's c % is raised where its Resident Area would not fit (as §V does)",
    },
    Unknown {
        name: "ala",
        what: "Möbius's ALA ring, MB (`ala_mb`; capped at 1/25 of the blocks on small devices)",
        default: "500 MB (Möbius §IV-A [P])",
        range: Range::Value {
            lo: 250.0,
            hi: 1000.0,
            log: true,
            integer: false,
        },
        source: "half to twice the paper's 500 MB: the paper gives one size and no sensitivity",
    },
    Unknown {
        name: "active_ala",
        what: "Möbius's active ALA, MB (`active_ala_mb`): the merge threshold, merged when full",
        default: "12 MB (Möbius §IV-A implementation [P])",
        range: Range::Value {
            lo: 6.0,
            hi: 20.0,
            log: true,
            integer: false,
        },
        source: "half the implementation's 12 MB (§IV-A) to the evaluation's 20 MB (§V); c % raised to fit, as §V does",
    },
    Unknown {
        name: "gc_policy",
        what: "GC victim choice (`gc_policy` of mobius, atomic-write, lighttx, the TxFlash designs, wcache; `gc` of dftl)",
        default: "greedy [R]",
        range: Range::Choice(&["greedy", "cost-benefit"]),
        source: "greedy and cost-benefit (LFS, Rosenblum & Ousterhout '92): the papers name no policy",
    },
    Unknown {
        name: "over_provisioning",
        what: "share of flash hidden from the host (the device's, or the design's own `op` / `over_provisioning` parameter: the same value for every design)",
        default: "each design's and preset's: 7 % jasmine / optr, 15 % TxFlash [P §5], 20 % Atomic-Write [R]",
        range: Range::Value {
            lo: 0.05,
            hi: 0.25,
            log: false,
            integer: false,
        },
        source: "7 % of consumer drives (GB against GiB) to 28 % of enterprise drives; the papers' 7–15 %",
    },
    Unknown {
        name: "clients",
        what: "concurrent host clients (closed loop) of the transaction workloads (`macro`, `macro-engines`)",
        default: "1: one transaction command at a time (an added ATA command is not queued; jbd commits one transaction at a time: Möbius §IV-A, §V-B)",
        range: Range::Value {
            lo: 1.0,
            hi: 32.0,
            log: true,
            integer: true,
        },
        source: "Möbius §V does not give DBT-2's connections; DBT-2 and TPC-C drivers run 1 to tens of terminals per warehouse set",
    },
    Unknown {
        name: "fill",
        what: "share of the logical space written before the measured phase (OPTR grid, crash campaigns)",
        default: "the experiment's: 90 % OPTR quick grid, 80 % crash campaigns [R]",
        range: Range::Value {
            lo: 0.5,
            hi: 0.95,
            log: false,
            integer: false,
        },
        source: "OPTR §7 gives no fill for its overhead grid; half full to nearly full (GC bound)",
    },
    Unknown {
        name: "page_size",
        what: "flash page size of a 4 or 8 KB-page preset (`geometry.page_bytes`), the capacity kept: spare bytes scale with the page, blocks per chip inversely (as `jasmine-8k` against `jasmine`); the 16 KB optr preset stays",
        default: "the preset's: 4 KB jasmine, txflash, small; 8 KB jasmine-8k (Möbius Fig. 10) [P]",
        range: Range::Choice(&["preset", "4k", "8k"]),
        source: "Möbius Table II: the Jasmine board carries 4 KB + 224 B and 8 KB + 448 B page flash (§IV-A uses the 8 KB one for write amplification only); TxFlash §5 simulates 4 KB pages",
    },
    Unknown {
        name: "gc_threshold",
        what: "free blocks at which GC starts, a factor on the design's own mark (`gc_free_blocks` of every design but fast; at least the design's floor: what it needs to recover and make progress)",
        default: "each design's [R]: Möbius chips + 2 (at least 4), DFTL 2 per chip + 4 + a checkpoint's room, Atomic-Write and LightTx the engine's root floor + a GC batch, TxFlash 2 per chip + 2, wcache 2 per chip (at least 3), optr 2 chains + the cache's blocks + 2",
        range: Range::Factor { lo: 0.5, hi: 2.0 },
        source: "the papers name no mark; half to twice the designs' own (OPTR §7 and the Möbius paper say only that GC runs when free blocks run low)",
    },
];

/// The table entry called `name`.
pub fn find(name: &str) -> Option<&'static Unknown> {
    TABLE.iter().find(|u| u.name == name)
}

/// Why a `--unknowns` specification is refused.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum SpecError {
    #[error("'{0}' is not name=value")]
    NotPair(String),
    #[error("unknown parameter '{name}'; the table has: {known}")]
    Unknown { name: String, known: String },
    #[error("{name}={value}: {why}")]
    Value {
        name: String,
        value: String,
        why: String,
    },
}

/// A point of the table: the parameters set away from their defaults (the rest at theirs).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Point(pub BTreeMap<&'static str, Value>);

impl Point {
    /// Parses `name=value,name=value` (empty: the defaults). A number must lie in its range, a
    /// choice be one of its choices.
    pub fn parse(spec: &str) -> Result<Point, SpecError> {
        let mut p = BTreeMap::new();
        for pair in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (name, raw) = pair
                .split_once('=')
                .ok_or_else(|| SpecError::NotPair(pair.to_string()))?;
            let (name, raw) = (name.trim(), raw.trim());
            let u = find(name).ok_or_else(|| SpecError::Unknown {
                name: name.to_string(),
                known: TABLE.map(|u| u.name).join(", "),
            })?;
            let bad = |why: String| SpecError::Value {
                name: name.to_string(),
                value: raw.to_string(),
                why,
            };
            let v = match u.range {
                Range::Factor { lo, hi } | Range::Value { lo, hi, .. } => {
                    let v: f64 = raw.parse().map_err(|_| bad("not a number".into()))?;
                    if !(lo..=hi).contains(&v) {
                        return Err(bad(format!("outside {}", u.range_text())));
                    }
                    Value::Num(v)
                }
                Range::Choice(c) => match c.iter().find(|s| **s == raw) {
                    Some(s) => Value::Choice(s),
                    None => return Err(bad(format!("one of {}", c.join(", ")))),
                },
            };
            p.insert(u.name, v);
        }
        Ok(Point(p))
    }

    /// The specification `parse` reads back: `name=value,…` in name order.
    pub fn spec(&self) -> String {
        let pairs: Vec<String> = self.0.iter().map(|(k, v)| format!("{k}={v}")).collect();
        pairs.join(",")
    }

    /// The point restricted to `names`.
    pub fn only(&self, names: &BTreeSet<String>) -> Point {
        Point(
            self.0
                .iter()
                .filter(|(k, _)| names.contains(**k))
                .map(|(k, v)| (*k, *v))
                .collect(),
        )
    }
}

/// The parameters an experiment runs at, a record of those it consulted, and of what the
/// point's page size and GC mark made of the devices and designs it ran.
#[derive(Clone, Debug, Default)]
pub struct Overrides {
    pub point: Point,
    record: Arc<Mutex<Record>>,
}

/// What [`Overrides`] noted as the experiment ran.
#[derive(Debug, Default)]
struct Record {
    consulted: BTreeSet<&'static str>,
    applied: BTreeMap<&'static str, BTreeSet<String>>,
}

impl Overrides {
    pub fn at(point: Point) -> Overrides {
        Overrides {
            point,
            record: Default::default(),
        }
    }

    /// The parameters the experiment read so far (those that reach it), in name order.
    pub fn consulted(&self) -> Vec<&'static str> {
        self.lock().consulted.iter().copied().collect()
    }

    /// What the point made of the parameters whose value alone does not say it: per parameter
    /// (`page_size`, `gc_threshold`), each distinct result (`8192 + 448 B pages, 64 blocks per
    /// chip (jasmine)`, `optr: GC below 37 free blocks`). Empty at the defaults.
    pub fn applied(&self) -> BTreeMap<&'static str, Vec<String>> {
        let r = self.lock();
        r.applied
            .iter()
            .map(|(k, v)| (*k, v.iter().cloned().collect()))
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Record> {
        self.record.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn note(&self, name: &'static str, what: String) {
        self.lock().applied.entry(name).or_default().insert(what);
    }

    /// `name`'s value at this point (`None`: its default), noted as consulted.
    fn get(&self, name: &'static str) -> Option<Value> {
        debug_assert!(find(name).is_some(), "{name} is not in the table");
        self.lock().consulted.insert(name);
        self.point.0.get(name).copied()
    }

    fn num(&self, name: &'static str) -> Option<f64> {
        match self.get(name) {
            Some(Value::Num(v)) => Some(v),
            _ => None,
        }
    }

    /// `config` at this point: flash timing, channel, over-provisioning, the page size of a 4 or
    /// 8 KB-page device, and (unless the host is ideal) the host link, command cost and write
    /// buffer. A quick-scale slice is cut before (`lab::device::preset_slice`), so that the page
    /// size keeps the slice's capacity.
    pub fn device(&self, mut config: DeviceConfig) -> DeviceConfig {
        let scale =
            |v: u64, f: Option<f64>| f.map_or(v, |f| ((v as f64 * f).round() as u64).max(1));
        let t = &mut config.timing;
        t.read_ns = scale(t.read_ns, self.num("read"));
        t.program_ns = scale(t.program_ns, self.num("program"));
        t.erase_ns = scale(t.erase_ns, self.num("erase"));
        t.bus_mb_s = scale(t.bus_mb_s, self.num("channel"));
        if let Some(op) = self.num("over_provisioning") {
            config.over_provisioning = op;
        }
        if !config.host.is_ideal() {
            config.host = self.host(config.host);
        }
        if PAGE_SIZES.contains(&config.geometry.page_bytes) {
            let bytes = match self.get("page_size") {
                Some(Value::Choice("4k")) => 4096,
                Some(Value::Choice("8k")) => 8192,
                _ => return config,
            };
            config.geometry = with_page_bytes(&config.geometry, bytes);
            let g = &config.geometry;
            self.note(
                "page_size",
                format!(
                    "{} + {} B pages, {} blocks per chip ({})",
                    g.page_bytes, g.oob_bytes, g.blocks_per_chip, config.preset
                ),
            );
        }
        config
    }

    /// A (non-ideal) host interface at this point.
    fn host(&self, mut h: HostInterface) -> HostInterface {
        match self.get("host_link") {
            Some(Value::Choice("sata2")) => h.link_mb_s = HostInterface::SATA2.link_mb_s,
            Some(Value::Choice("sata3")) => h.link_mb_s = HostInterface::SATA3.link_mb_s,
            Some(Value::Choice("none")) => h.link_mb_s = 0,
            _ => {}
        }
        if let Some(us) = self.num("command") {
            h.command_ns = (us * 1000.0).round() as u64;
        }
        if let Some(f) = self.num("write_buffer") {
            h.write_buffer_pages = ((h.write_buffer_pages as f64 * f).round() as u64).max(1);
        }
        h
    }

    /// `base` with this point's parameters for `spec`'s design on `geometry`: mapping RAM,
    /// Möbius's ALA, GC policy, and over-provisioning where the design takes its own. A
    /// parameter the design does not have is not consulted for it.
    pub fn options(
        &self,
        spec: &DesignSpec,
        geometry: &Geometry,
        mut base: DesignOptions,
    ) -> DesignOptions {
        let design = spec.name;
        // (the design's option, the unknown that sets it)
        let mut set: Vec<(&str, &'static str)> = Vec::new();
        if MAPPING_RAM_DESIGNS.contains(&design) {
            set.push(("dram_mb", "mapping_ram"));
        }
        if design == "mobius" {
            set.push(("ala_mb", "ala"));
            set.push(("active_ala_mb", "active_ala"));
        }
        if let Some((_, key)) = GC_POLICY_DESIGNS.iter().find(|(d, _)| *d == design) {
            set.push((key, "gc_policy"));
        }
        if let OverProvisioningKnob::Param(key) = spec.over_provisioning {
            set.push((key, "over_provisioning"));
        }
        let mut resized_mobius = false;
        for (key, unknown) in set {
            if let Some(own) = base.params.get(key) {
                self.keep_experiments_own(unknown, design, key, own);
                continue;
            }
            if let Some(v) = self.get(unknown) {
                base.params.insert(key.to_string(), v.to_string());
                resized_mobius |=
                    design == "mobius" && matches!(unknown, "mapping_ram" | "ala" | "active_ala");
            }
        }
        if resized_mobius {
            fit_resident_area(geometry, &mut base);
        }
        self.gc_mark(design, geometry, &mut base);
        base
    }

    /// A design option the experiment sets itself is its measurement's condition, not an
    /// unknown: micro's runs with 2 MB of mapping RAM (the sub-claims named so), recovery's
    /// sweep of Möbius's active ALA (the scanning zones of Fig. 11). It stands, the parameter is
    /// not consulted for that run, and a point that would have moved it says so in `applied`.
    fn keep_experiments_own(&self, unknown: &'static str, design: &str, key: &str, own: &str) {
        if self.point.0.contains_key(unknown) {
            self.note(
                unknown,
                format!("{design}: {key}={own} kept (the experiment's own)"),
            );
        }
    }

    /// `gc_threshold`: the design's GC free-block mark (the one its options give, or its
    /// default) times the factor, at least the design's floor, for the designs that take one.
    fn gc_mark(&self, design: &str, g: &Geometry, o: &mut DesignOptions) {
        let Some((default, floor)) = gc_marks(design, g, o) else {
            return;
        };
        let Some(Value::Num(f)) = self.get("gc_threshold") else {
            return;
        };
        let own = o.get("gc_free_blocks", default).unwrap_or(default);
        let mark = ((own as f64 * f).round() as u32).max(floor);
        o.params.insert("gc_free_blocks".into(), mark.to_string());
        self.note(
            "gc_threshold",
            format!("{design}: GC below {mark} free blocks (its own {own})"),
        );
    }

    /// Concurrent host clients (`default` when not set).
    pub fn clients(&self, default: usize) -> usize {
        self.num("clients").map_or(default, |v| v as usize)
    }

    /// The fill before a measured phase (`default` when not set).
    pub fn fill(&self, default: f64) -> f64 {
        self.num("fill").unwrap_or(default)
    }
}

/// `design`'s GC free-block mark by default on `g` with options `o` (`gc_free_blocks` when not
/// given) and the least it takes; `None` for a design without the parameter (fast) or options
/// it refuses anyway.
fn gc_marks(design: &str, g: &Geometry, o: &DesignOptions) -> Option<(u32, u32)> {
    Some(match design {
        "mobius" => (mftl::default_gc_free_blocks(g), mftl::min_gc_free_blocks(g)),
        "dftl" => {
            let cmt = dftl::DftlConfig::from_options(o, g).ok()?.cmt_entries;
            let own = dftl::default_gc_free_blocks(g, cmt);
            (own, dftl::min_gc_free_blocks(g, cmt))
        }
        "atomic-write" | "lighttx" => {
            use atomic_write::engine::{default_gc_free_blocks, min_gc_free_blocks};
            (default_gc_free_blocks(g), min_gc_free_blocks(g))
        }
        "txflash-tc" | "txflash-scc" | "txflash-bpcc" => (
            txflash::default_gc_free_blocks(g),
            txflash::min_gc_free_blocks(g),
        ),
        "wcache" => (
            wcache::wcache::default_gc_free_blocks(g),
            MIN_GC_FREE_BLOCKS,
        ),
        "optr" => {
            let own_cache = wcache::cache::default_cache_mb(g);
            let cache_mb = o.get("cache_mb", own_cache).unwrap_or(own_cache);
            let own = optr::device::default_gc_free_blocks(g, cache_mb);
            (own, MIN_GC_FREE_BLOCKS)
        }
        _ => return None,
    })
}

/// Möbius's decision M1: the Resident Area (the active ALA's mappings) must fit `c_percent` of
/// the DRAM. A point with less DRAM or a larger active ALA than the paper's may not fit the
/// default c = 20 %; the paper itself raises c where it must (§V evaluation: a 20 MB active ALA
/// with c = 31 %, [`crate::recovery::EVALUATION_PROFILE`]), and so does the point: c becomes the
/// least whole percent that fits, when the one set does not.
fn fit_resident_area(g: &Geometry, o: &mut DesignOptions) {
    let probe = o.clone().with("c_percent", 99);
    let Ok(c) = mftl::MobiusConfig::from_options(g, &probe) else {
        return;
    };
    let items = mftl::format::inode_capacity(g.page_bytes, mftl::format::InodeKind::Static);
    let resident = (c.active_ala_pages * items as u64 * 8) as f64;
    let need = (resident / c.dram_bytes as f64 * 100.0).ceil();
    if need > o.get("c_percent", 20.0).unwrap_or(20.0) {
        o.params.insert("c_percent".into(), need.to_string());
    }
}

/// `samples` points of a Latin hypercube over every varied parameter of the table, from `seed`:
/// each parameter's range cut into `samples` strata, each stratum taken once, at a seeded place
/// inside it, the strata of different parameters paired by seeded permutations.
pub fn latin_hypercube(samples: usize, seed: u64) -> Vec<Point> {
    use rand::seq::SliceRandom;
    use rand::{RngExt, SeedableRng};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed ^ 0x6c68_735f_756e_6b6e);
    let mut points = vec![Point::default(); samples];
    for u in TABLE.iter() {
        let mut strata: Vec<usize> = (0..samples).collect();
        strata.shuffle(&mut rng);
        for (p, s) in points.iter_mut().zip(strata) {
            let at = (s as f64 + rng.random::<f64>()) / samples as f64;
            p.0.insert(u.name, u.at(at));
        }
    }
    points
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_point_prints_and_parses_back_and_bad_specs_are_refused() {
        let p = Point::parse("program=1.5, host_link=sata3,clients=4").unwrap();
        assert_eq!(p.spec(), "clients=4,host_link=sata3,program=1.5");
        assert_eq!(Point::parse(&p.spec()).unwrap(), p);
        assert_eq!(Point::parse("").unwrap(), Point::default());
        let refused = |spec: &str| Point::parse(spec).unwrap_err();
        assert!(matches!(refused("progam=1"), SpecError::Unknown { .. }));
        assert!(matches!(refused("program=9"), SpecError::Value { .. }));
        assert!(matches!(refused("host_link=pcie"), SpecError::Value { .. }));
        assert!(matches!(refused("page_size=16k"), SpecError::Value { .. }));
        assert!(matches!(
            refused("gc_threshold=0.1"),
            SpecError::Value { .. }
        ));
        assert!(matches!(refused("clients"), SpecError::NotPair(_)));
    }

    #[test]
    fn the_defaults_change_nothing_and_a_point_reaches_the_device_and_the_design() {
        let jasmine = DeviceConfig::preset("jasmine").unwrap();
        let none = Overrides::default();
        assert_eq!(none.device(jasmine.clone()), jasmine);
        let mobius = lab::registry::find("mobius").unwrap();
        assert!(none
            .options(&mobius, &jasmine.geometry, DesignOptions::default())
            .params
            .is_empty());
        assert_eq!((none.clients(8), none.fill(0.9)), (8, 0.9));
        let o = Overrides::at(
            Point::parse("program=2,host_link=none,command=2,mapping_ram=32,active_ala=20,over_provisioning=0.2,clients=1,fill=0.5")
                .unwrap(),
        );
        let d = o.device(jasmine.clone());
        assert_eq!(d.timing.program_ns, 2 * jasmine.timing.program_ns);
        assert_eq!((d.host.link_mb_s, d.host.command_ns), (0, 2000));
        assert_eq!(d.over_provisioning, 0.2);
        let small = DeviceConfig::preset("small").unwrap();
        assert!(o.device(small).host.is_ideal(), "an ideal host stays ideal");
        let opts = o.options(&mobius, &jasmine.geometry, DesignOptions::default());
        assert_eq!(opts.params.get("dram_mb").map(String::as_str), Some("32"));
        let c: f64 = opts.params["c_percent"].parse().unwrap();
        assert!(
            c > 20.0,
            "c % raised for the Resident Area to fit 32 MB: {c}"
        );
        lab::device::fresh(&mobius, &d, &opts, true).expect("Möbius takes the point");
        let optr = lab::registry::find("optr").unwrap();
        let opts = o.options(&optr, &jasmine.geometry, DesignOptions::default());
        assert_eq!(opts.params.get("op").map(String::as_str), Some("0.2"));
        assert!(!opts.params.contains_key("dram_mb"));
        assert_eq!((o.clients(8), o.fill(0.9)), (1, 0.5));
        let seen = o.consulted();
        for name in ["program", "host_link", "mapping_ram", "clients", "fill"] {
            assert!(seen.contains(&name), "{name} not recorded in {seen:?}");
        }
    }

    /// An option the experiment sets itself (micro's 2 MB of mapping RAM, recovery's active
    /// ALA) is its condition: a point does not replace it, says so, and does not count as
    /// reaching that run; the options the experiment left to the defaults still move.
    #[test]
    fn an_experiments_own_option_stands_against_a_point() {
        let jasmine = DeviceConfig::preset("jasmine").unwrap();
        let mobius = lab::registry::find("mobius").unwrap();
        let dftl = lab::registry::find("dftl").unwrap();
        let o = Overrides::at(Point::parse("mapping_ram=128,ala=1000,active_ala=6").unwrap());
        let own = DesignOptions::default()
            .with("dram_mb", 2)
            .with("active_ala_mb", 1);
        let opts = o.options(&mobius, &jasmine.geometry, own.clone());
        assert_eq!(opts.params["dram_mb"], "2");
        assert_eq!(opts.params["active_ala_mb"], "1");
        assert_eq!(
            opts.params["ala_mb"], "1000",
            "the ring was left to the default"
        );
        assert_eq!(
            o.applied()["mapping_ram"],
            ["mobius: dram_mb=2 kept (the experiment's own)"]
        );
        let kept = Overrides::at(Point::parse("mapping_ram=128").unwrap());
        let opts = kept.options(&dftl, &jasmine.geometry, own);
        assert_eq!(opts.params["dram_mb"], "2");
        assert!(!kept.consulted().contains(&"mapping_ram"));
        let moved = kept.options(&dftl, &jasmine.geometry, DesignOptions::default());
        assert_eq!(moved.params["dram_mb"], "128");
        assert!(
            !moved.params.contains_key("c_percent"),
            "Möbius's fit is Möbius's only"
        );
        assert!(kept.consulted().contains(&"mapping_ram"));
    }

    /// `page_size` moves a 4 or 8 KB-page device to the other page size with its capacity
    /// (`jasmine` at 8 KB is `jasmine-8k`), leaves a 16 KB one and the defaults alone, and says
    /// what it made.
    #[test]
    fn the_page_size_keeps_the_capacity_and_spares_a_16k_device() {
        let at = |spec: &str| Overrides::at(Point::parse(spec).unwrap());
        let jasmine = DeviceConfig::preset("jasmine").unwrap();
        let j8 = DeviceConfig::preset("jasmine-8k").unwrap();
        let o = at("page_size=8k");
        assert_eq!(o.device(jasmine.clone()).geometry, j8.geometry);
        assert_eq!(
            at("page_size=4k").device(j8.clone()).geometry,
            jasmine.geometry
        );
        assert_eq!(at("page_size=4k").device(jasmine.clone()), jasmine);
        assert_eq!(at("").device(j8.clone()), j8);
        let optr = DeviceConfig::preset("optr").unwrap();
        let fresh = at("page_size=8k");
        assert_eq!(fresh.device(optr.clone()), optr);
        assert!(
            !fresh.consulted().contains(&"page_size"),
            "a 16 KB device is not reached"
        );
        let slice = lab::device::preset_slice("small", 24).unwrap();
        let g = o.device(slice.clone()).geometry;
        assert_eq!(
            (g.page_bytes, g.oob_bytes, g.blocks_per_chip),
            (8192, 256, 12)
        );
        assert_eq!(g.capacity_bytes(), slice.geometry.capacity_bytes());
        assert_eq!(
            o.applied()["page_size"],
            [
                "8192 + 256 B pages, 12 blocks per chip (small)",
                "8192 + 448 B pages, 4096 blocks per chip (jasmine)"
            ]
        );
        assert!(at("").applied().is_empty());
    }

    /// `gc_threshold` scales the mark of the designs that take one (their default, or the one
    /// their options give), never below the floor, and reaches no other design.
    #[test]
    fn the_gc_threshold_scales_each_designs_own_mark() {
        let g = DeviceConfig::preset("small").unwrap().geometry;
        let at = |spec: &str| Overrides::at(Point::parse(spec).unwrap());
        let mark = |o: &Overrides, design: &str, base: DesignOptions| {
            let spec = lab::registry::find(design).unwrap();
            o.options(&spec, &g, base)
                .params
                .get("gc_free_blocks")
                .cloned()
        };
        let own = wcache::wcache::default_gc_free_blocks(&g);
        let twice = at("gc_threshold=2");
        assert_eq!(
            mark(&twice, "wcache", DesignOptions::default()),
            Some((2 * own).to_string())
        );
        let given = DesignOptions::default().with("gc_free_blocks", 10);
        assert_eq!(mark(&twice, "wcache", given), Some("20".into()));
        assert_eq!(
            mark(
                &at("gc_threshold=0.5"),
                "wcache",
                DesignOptions::default().with("gc_free_blocks", 4)
            ),
            Some(MIN_GC_FREE_BLOCKS.to_string())
        );
        let optr_own =
            optr::device::default_gc_free_blocks(&g, wcache::cache::default_cache_mb(&g));
        assert_eq!(
            mark(&twice, "optr", DesignOptions::default()),
            Some((2 * optr_own).to_string())
        );
        assert_eq!(mark(&twice, "fast", DesignOptions::default()), None);
        assert_eq!(mark(&at(""), "wcache", DesignOptions::default()), None);
        let half = at("gc_threshold=0.5");
        let device = DeviceConfig::preset("small").unwrap();
        for design in GC_MARK_DESIGNS {
            let (own, floor) = gc_marks(design, &g, &DesignOptions::default()).unwrap();
            assert!(floor <= own, "{design}: floor {floor}, default {own}");
            let want = Some((2 * own).to_string());
            assert_eq!(
                mark(&twice, design, DesignOptions::default()),
                want,
                "{design}"
            );
            let low = DesignOptions::default().with("gc_free_blocks", floor + 1);
            assert_eq!(
                mark(&half, design, low),
                Some(floor.to_string()),
                "{design}"
            );
            let spec = lab::registry::find(design).unwrap();
            for o in [&twice, &half] {
                let opts = o.options(&spec, &g, DesignOptions::default());
                lab::device::fresh(&spec, &device, &opts, true)
                    .unwrap_or_else(|e| panic!("{design} refused {:?}: {e}", opts.params));
            }
        }
        // wcache's default and given marks, optr's, and one per other design.
        let notes = &twice.applied()["gc_threshold"];
        assert_eq!(notes.len(), 3 + GC_MARK_DESIGNS.len(), "{notes:?}");
        let optr_dev = lab::registry::find("optr").unwrap();
        let device = twice.device(DeviceConfig::preset("small").unwrap());
        let opts = twice.options(&optr_dev, &g, DesignOptions::default());
        lab::device::fresh(&optr_dev, &device, &opts, true).expect("optr takes twice its mark");
    }

    /// The designs that take `gc_free_blocks` with a floor of their own.
    const GC_MARK_DESIGNS: [&str; 7] = [
        "mobius",
        "dftl",
        "atomic-write",
        "lighttx",
        "txflash-tc",
        "txflash-scc",
        "txflash-bpcc",
    ];

    /// Every design accepts every option the table gives it (a misspelt key would be refused
    /// at format), at both ends of each range.
    #[test]
    fn every_design_takes_the_options_the_table_gives_it() {
        let names = lab::registry::names();
        let named = MAPPING_RAM_DESIGNS
            .iter()
            .chain(GC_POLICY_DESIGNS.iter().map(|(d, _)| d));
        for d in named {
            assert!(names.contains(d), "{d} is no design's name");
        }
        let device = DeviceConfig::preset("small").unwrap();
        for spec in lab::registry::all() {
            for u in TABLE.iter() {
                for v in u.ends() {
                    let o = Overrides::at(Point([(u.name, v)].into()));
                    let at = o.device(device.clone());
                    let opts = o.options(&spec, &at.geometry, DesignOptions::default());
                    if opts.params.is_empty() && at == device {
                        continue;
                    }
                    lab::device::fresh(&spec, &at, &opts, true)
                        .unwrap_or_else(|e| panic!("{} with {}={v}: {e}", spec.name, u.name));
                }
            }
        }
    }

    #[test]
    fn a_latin_hypercube_takes_every_stratum_of_every_range_once_and_is_seeded() {
        let n = 10;
        let a = latin_hypercube(n, 7);
        assert_eq!(a, latin_hypercube(n, 7));
        assert_ne!(a, latin_hypercube(n, 8));
        let program = find("program").unwrap();
        let Range::Factor { lo, hi } = program.range else {
            unreachable!()
        };
        let mut strata: Vec<usize> = a
            .iter()
            .map(|p| match p.0["program"] {
                Value::Num(v) => ((v.ln() - lo.ln()) / (hi.ln() - lo.ln()) * n as f64) as usize,
                _ => unreachable!(),
            })
            .collect();
        strata.sort();
        assert_eq!(strata, (0..n).collect::<Vec<_>>());
        for p in &a {
            assert_eq!(Point::parse(&p.spec()).unwrap(), *p, "a sample parses back");
        }
    }
}
