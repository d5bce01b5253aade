//! Every design's recovery against damaged images: an image is a seeded workload's flash, then
//! damaged the ways a failing device or a stray write damages one — a page written where it
//! was not meant to go (a valid record in the wrong place), a page torn, a block erased or its
//! erase torn, an OOB record or a page's bytes with bits flipped, two pages' OOB records
//! swapped, a block put back as it was earlier. Recovery may refuse such an image with a typed
//! error, or recover a device that lost data. It must not panic, and neither must the recovered
//! device when the host goes on using it (reads of every page, more of the design's workload,
//! a second power cut and recovery); and the device must pass its design's invariant check
//! after each recovery and after the use. Images come from every soak geometry, tag-only and
//! with full data, with the design's soak parameter sets in turn. The decoders alone are
//! fuzzed in `decoders_fuzz.rs`; this drives whole recoveries, where records that decode but
//! contradict each other reach the designs' own rules (docs/crashtest.md, "Recoveries against
//! damaged images").
//!
//! Seeded: a failure names the design, geometry, mode, parameters, round and damage;
//! `MOBIUS_FUZZ_SEED` and `MOBIUS_FUZZ_ROUNDS` replay it. `MOBIUS_LONG=1` runs 20× the rounds;
//! `MOBIUS_FUZZ_VERBOSE=1` prints the typed error of every recovered device that failed later.

use flash::{BlockId, Content, DeviceConfig, Flash, Lpn, PageState, Ppn, Store};
use ftl::{BlockDevice, DesignOptions, DesignSpec};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// One way an image is damaged.
#[derive(Clone, Copy, Debug)]
enum Damage {
    /// A programmed page (bytes and OOB record) copied to the next free page of another block:
    /// a write that went to the wrong address.
    Misdirected,
    /// A programmed page's bytes and OOB record copied over another programmed page.
    Overwritten,
    /// A programmed page torn (fails ECC on read).
    Torn,
    /// A whole block erased.
    Erased,
    /// A block's erase marked torn.
    EraseTorn,
    /// Bits flipped in a page's OOB record.
    OobBits,
    /// Bits flipped in a page's bytes (or its tag).
    DataBits,
    /// Two programmed pages' OOB records swapped.
    OobSwapped,
    /// A block as it was halfway through the run: every record intact, but stale (an erase
    /// or programs the device lost, or a block written back from an old copy).
    Stale,
}

const DAMAGES: [Damage; 9] = [
    Damage::Misdirected,
    Damage::Overwritten,
    Damage::Torn,
    Damage::Erased,
    Damage::EraseTorn,
    Damage::OobBits,
    Damage::DataBits,
    Damage::OobSwapped,
    Damage::Stale,
];

/// An intact image to damage, with what the damage draws on.
struct Image {
    /// The flash of a design after a seeded run of its own workload at 90 % fill (GC running).
    store: Box<dyn Store>,
    /// The same flash halfway through the run.
    halfway: Box<dyn Store>,
    /// Its metadata pages.
    metadata: Vec<Ppn>,
    /// The instant the run ended.
    end_ns: u64,
}

fn image(
    spec: &DesignSpec,
    config: &DeviceConfig,
    options: &DesignOptions,
    tag_only: bool,
) -> Result<Image, ftl::FtlError> {
    let oob_bytes = spec.oob_record(&config.geometry);
    let flash = Flash::in_memory(config.clone(), oob_bytes, tag_only);
    let mut dev = spec.build(flash, options)?;
    let mut w = workload::WorkloadSpec::named(spec.default_workload).unwrap();
    w.requests = 2_000;
    w.fill = 0.9;
    let first = lab::driver::run(dev.as_mut(), &w, 5, 0, false, &mut |_, _| {}).unwrap();
    let halfway = dev.flash().store().snapshot();
    w.fill = 0.0;
    let second =
        lab::driver::run(dev.as_mut(), &w, 6, first.end_ns, false, &mut |_, _| {}).unwrap();
    let store = dev.into_flash().into_store();
    let metadata = metadata_pages(store.as_ref());
    Ok(Image {
        store,
        halfway,
        metadata,
        end_ns: second.end_ns,
    })
}

/// A programmed page to damage: half the time one of the image's metadata pages, else any.
fn programmed(store: &dyn Store, metadata: &[Ppn], rng: &mut ChaCha8Rng) -> Option<Ppn> {
    if !metadata.is_empty() && rng.random_bool(0.5) {
        let p = metadata[rng.random_range(0..metadata.len())];
        if store.page_state(p) == PageState::Programmed {
            return Some(p);
        }
    }
    let pages = store.geometry().pages();
    for _ in 0..64 {
        let p = Ppn(rng.random_range(0..pages));
        if store.page_state(p) == PageState::Programmed {
            return Some(p);
        }
    }
    None
}

/// The metadata pages of an image: those that carry no host page's content tag (a tag-only
/// image keeps bytes for these alone; a full-data image has the tag in every host page).
fn metadata_pages(store: &dyn Store) -> Vec<Ppn> {
    (0..store.geometry().pages())
        .map(Ppn)
        .filter(|&p| store.page_state(p) == PageState::Programmed && store.data(p).tag().is_none())
        .collect()
}

/// Flips one to three bits of `bytes`.
fn flip(bytes: &mut [u8], rng: &mut ChaCha8Rng) {
    if bytes.is_empty() {
        return;
    }
    for _ in 0..rng.random_range(1..=3) {
        let i = rng.random_range(0..bytes.len());
        bytes[i] ^= 1 << rng.random_range(0..8);
    }
}

/// Applies `damage` to `store` at places drawn from `rng`; returns where, for the report.
fn damage(store: &mut dyn Store, image: &Image, damage: Damage, rng: &mut ChaCha8Rng) -> String {
    let metadata = &image.metadata;
    let g = store.geometry().clone();
    let oob_len = store.oob_record_bytes() as usize;
    let mut oob = vec![0u8; oob_len];
    let Some(from) = programmed(store, metadata, rng) else {
        return "nothing programmed".into();
    };
    match damage {
        Damage::Misdirected => {
            for _ in 0..64 {
                let b = BlockId(rng.random_range(0..g.blocks()));
                let extent = store.written_extent(b);
                if extent < g.pages_per_block && b != g.block_of(from) {
                    let to = g.ppn(b, extent);
                    store.oob(from, &mut oob);
                    store.copy_page(from, to, &oob);
                    return format!("{from:?} copied to {to:?}");
                }
            }
            "no free page".into()
        }
        Damage::Overwritten => {
            let to = programmed(store, metadata, rng).unwrap_or(from);
            store.oob(from, &mut oob);
            store.copy_page(from, to, &oob);
            format!("{from:?} copied over {to:?}")
        }
        Damage::Torn => {
            store.set_torn(from);
            format!("{from:?} torn")
        }
        Damage::Erased => {
            let b = g.block_of(from);
            store.erase_block(b);
            format!("{b:?} erased")
        }
        Damage::EraseTorn => {
            let b = g.block_of(from);
            store.set_erase_torn(b);
            format!("{b:?} erase torn")
        }
        Damage::OobBits => {
            store.oob(from, &mut oob);
            flip(&mut oob, rng);
            let content = store.data(from);
            store.write_page(from, &content, &oob);
            format!("{from:?} OOB bits")
        }
        Damage::DataBits => {
            store.oob(from, &mut oob);
            let content = match store.data(from) {
                Content::Bytes(b) => {
                    let mut b = b.to_vec();
                    flip(&mut b, rng);
                    Content::Bytes(b.into_boxed_slice())
                }
                Content::Tag(t) => {
                    let mut b = t.to_bytes(g.page_bytes as usize).to_vec();
                    let head = 32.min(b.len());
                    flip(&mut b[..head], rng);
                    Content::Tag(flash::ContentTag::decode(&b).unwrap_or(t))
                }
            };
            store.write_page(from, &content, &oob);
            format!("{from:?} data bits")
        }
        Damage::OobSwapped => {
            let other = programmed(store, metadata, rng).unwrap_or(from);
            let mut theirs = vec![0u8; oob_len];
            store.oob(from, &mut oob);
            store.oob(other, &mut theirs);
            let (a, b) = (store.data(from), store.data(other));
            store.write_page(from, &a, &theirs);
            store.write_page(other, &b, &oob);
            format!("OOB of {from:?} and {other:?} swapped")
        }
        Damage::Stale => {
            let b = g.block_of(from);
            store.erase_block(b);
            let old = image.halfway.as_ref();
            for p in g.first_page(b).0..g.first_page(b).0 + g.pages_per_block {
                let p = Ppn(p);
                match old.page_state(p) {
                    PageState::Programmed => {
                        old.oob(p, &mut oob);
                        store.write_page(p, &old.data(p), &oob);
                    }
                    PageState::Torn => store.set_torn(p),
                    PageState::Erased => {}
                }
            }
            format!("{b:?} as it was halfway")
        }
    }
}

/// Recovers `store`, reads every page, runs more of the workload, reads again, then cuts the
/// power and recovers once more. Errors are allowed (the image is damaged). What is reported,
/// as its text: a panic, or a device that recovered with its invariants broken (the design's
/// own check, after each recovery and after the use), which later operations could trip on.
fn recover_and_use(
    spec: &DesignSpec,
    config: &DeviceConfig,
    options: &DesignOptions,
    store: Box<dyn Store>,
    at: u64,
    seed: u64,
) -> Result<&'static str, String> {
    let outcome = crashtest::quiet_panics::catch(|| -> Result<&'static str, String> {
        let mut flash = Flash::new(config.clone(), store);
        flash.start_clock_at(at);
        let Ok((mut dev, _)) = spec.reopen(flash, options) else {
            return Ok("refused");
        };
        invariants(dev.as_ref(), "after recovery")?;
        let at = dev.flash().idle_ns().max(at);
        if read_all(dev.as_mut(), at).is_err() {
            return Ok("recovered, a read failed");
        }
        let mut w = workload::WorkloadSpec::named(spec.default_workload).unwrap();
        w.requests = 1_500;
        w.fill = 0.0;
        let start = dev.flash().idle_ns().max(at);
        let run = match lab::driver::run(dev.as_mut(), &w, seed, start, false, &mut |_, _| {}) {
            Ok(run) => run,
            Err(e) => {
                verbose(spec, "next requests", &e);
                return Ok("recovered, the host's next requests failed");
            }
        };
        if read_all(dev.as_mut(), run.end_ns).is_err() {
            return Ok("recovered, a later read failed");
        }
        invariants(dev.as_ref(), "after the use")?;
        // A second power cut, at the end of that use: the device must come up again from what
        // it wrote on top of the damage.
        let mut flash = dev.into_flash();
        let at = flash.idle_ns().max(run.end_ns);
        flash.start_clock_at(at);
        let mut dev = match spec.reopen(flash, options) {
            Ok((dev, _)) => dev,
            Err(e) => {
                verbose(spec, "second recovery", &e);
                return Ok("recovered, used, refused after a second cut");
            }
        };
        invariants(dev.as_ref(), "after the second recovery")?;
        let at = dev.flash().idle_ns().max(at);
        match read_all(dev.as_mut(), at) {
            Ok(()) => Ok("recovered, used, recovered again"),
            Err(e) => {
                verbose(spec, "read after the second cut", &e);
                Ok("recovered, used, recovered again, a read failed")
            }
        }
    });
    outcome.unwrap_or_else(Err)
}

/// The design's own invariant check, as a failure's text naming `when` it broke.
fn invariants(dev: &dyn BlockDevice, when: &str) -> Result<(), String> {
    dev.check_invariants()
        .map_err(|e| format!("invariant broken {when}: {e}"))
}

/// With `MOBIUS_FUZZ_VERBOSE`, prints an error a damaged device returned (digits left out, so
/// that the same error on different pages counts once with `sort | uniq -c`).
fn verbose(spec: &DesignSpec, when: &str, e: &dyn std::fmt::Display) {
    if std::env::var("MOBIUS_FUZZ_VERBOSE").is_ok() {
        let e = e.to_string();
        let short: String = e
            .chars()
            .filter(|c| !c.is_ascii_digit())
            .take(160)
            .collect();
        eprintln!("  {}: {when}: {short}", spec.name);
    }
}

/// Reads every logical page, 64 at a time, from `at` on.
fn read_all(dev: &mut dyn BlockDevice, mut at: u64) -> Result<(), ftl::FtlError> {
    let n = dev.logical_pages();
    let mut out = Vec::new();
    let mut start = 0;
    while start < n {
        let k = 64.min(n - start);
        at = at.max(dev.read(Lpn(start), k, at, &mut out)?.ack_ns);
        start += k;
    }
    Ok(())
}

#[test]
fn no_design_panics_or_breaks_its_invariants_on_a_damaged_image() {
    let rounds: u32 = match std::env::var("MOBIUS_FUZZ_ROUNDS") {
        Ok(n) => n.parse().expect("MOBIUS_FUZZ_ROUNDS is a number"),
        Err(_) if std::env::var("MOBIUS_LONG").is_ok() => 2_000,
        Err(_) => 100,
    };
    let seed: u64 = std::env::var("MOBIUS_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed_da3a);
    let mut failures = Vec::new();
    for spec in lab::registry::all() {
        let tally = fuzz_design(&spec, rounds, seed, &mut failures);
        eprintln!("{}: {tally:?}", spec.name);
    }
    assert!(
        failures.is_empty(),
        "{} damaged images made a design panic or recover with its invariants broken:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// One image kind: a soak geometry, tag-only or with full data, and parameters.
struct Kind {
    geometry: crashtest::soak::SoakGeometry,
    tag_only: bool,
    params: &'static [(&'static str, &'static str)],
}

/// The kinds `spec` is fuzzed on: each soak geometry tag-only and with full data, and each with
/// the next of the design's soak parameter sets (the defaults first).
fn kinds(spec: &DesignSpec) -> Vec<Kind> {
    let geometries = crashtest::soak::SOAK_GEOMETRIES;
    let shapes = geometries.iter().flat_map(|g| [(*g, true), (*g, false)]);
    shapes
        .enumerate()
        .map(|(k, (geometry, tag_only))| Kind {
            geometry,
            tag_only,
            params: match k % (spec.soak_params.len() + 1) {
                0 => &[],
                i => spec.soak_params[i - 1],
            },
        })
        .collect()
}

/// The options of `kind` and its intact image; a parameter set the geometry refuses (Möbius's
/// striped ALA on one chip) falls back to the defaults, and `kind` says so.
fn kind_image(spec: &DesignSpec, kind: &mut Kind) -> (DesignOptions, Image) {
    let config = kind.geometry.device();
    let options = kind
        .params
        .iter()
        .fold(DesignOptions::default(), |o, (key, value)| {
            o.with(key, value)
        });
    match image(spec, &config, &options, kind.tag_only) {
        Ok(image) => (options, image),
        Err(_) => {
            kind.params = &[];
            let options = DesignOptions::default();
            let image = image(spec, &config, &options, kind.tag_only).unwrap();
            (options, image)
        }
    }
}

/// Runs `rounds` damaged images of `spec`, going round its kinds; returns the tally of
/// outcomes and adds each failure, with what replays it, to `failures`.
fn fuzz_design(
    spec: &DesignSpec,
    rounds: u32,
    seed: u64,
    failures: &mut Vec<String>,
) -> std::collections::BTreeMap<&'static str, u32> {
    let mut tally = std::collections::BTreeMap::new();
    let mut kinds = kinds(spec);
    let count = kinds.len();
    for (k, kind) in kinds.iter_mut().enumerate() {
        let (options, image) = kind_image(spec, kind);
        let config = kind.geometry.device();
        for round in (k as u32..rounds).step_by(count) {
            let mut rng = ChaCha8Rng::seed_from_u64(seed ^ ((round as u64) << 8));
            let mut store = image.store.snapshot();
            let what: Vec<String> = (0..rng.random_range(1..=3))
                .map(|_| {
                    let d = DAMAGES[rng.random_range(0..DAMAGES.len())];
                    format!("{d:?}: {}", damage(store.as_mut(), &image, d, &mut rng))
                })
                .collect();
            match recover_and_use(spec, &config, &options, store, image.end_ns, round as u64) {
                Ok(outcome) => *tally.entry(outcome).or_insert(0) += 1,
                Err(failure) => {
                    failures.push(format!(
                    "{} on {} ({}, {:?}): round {round} (MOBIUS_FUZZ_SEED={seed}; {}): {failure}",
                    spec.name,
                    kind.geometry.name,
                    if kind.tag_only { "tag-only" } else { "full data" },
                    kind.params,
                    what.join("; ")
                ))
                }
            }
        }
    }
    tally
}

/// DFTL's recovery, made to panic on an image with a torn page.
fn dftl_panicking_on_a_torn_page(
    flash: Flash,
    options: &DesignOptions,
) -> Result<(Box<dyn BlockDevice>, ftl::RecoveryReport), ftl::FtlError> {
    let g = flash.geometry().clone();
    let torn = (0..g.pages()).any(|p| flash.peek_state(Ppn(p)) == PageState::Torn);
    assert!(!torn, "a torn page on the image");
    (dftl().recover)(flash, options)
}

fn dftl() -> DesignSpec {
    lab::registry::all()
        .into_iter()
        .find(|d| d.name == "dftl")
        .unwrap()
}

/// The negative control: a design that panics on a damaged image is reported, with the panic's
/// message, and the same design on the intact image is not.
#[test]
fn a_design_that_panics_on_a_damaged_image_is_reported() {
    let spec = DesignSpec {
        recover: dftl_panicking_on_a_torn_page,
        ..dftl()
    };
    let config = DeviceConfig::preset("small").unwrap();
    let options = DesignOptions::default();
    let image = image(&spec, &config, &options, true).unwrap();
    let at = image.end_ns;
    let intact = recover_and_use(&spec, &config, &options, image.store.snapshot(), at, 1);
    assert_eq!(intact, Ok("recovered, used, recovered again"));
    let mut store = image.store.snapshot();
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    damage(store.as_mut(), &image, Damage::Torn, &mut rng);
    let damaged = recover_and_use(&spec, &config, &options, store, at, 1);
    let panic = damaged.expect_err("the panic is reported");
    assert!(panic.contains("a torn page on the image"), "{panic}");
}

/// DFTL's recovery, followed by the erase of every full block: live pages gone under the
/// mapping, which DFTL's invariant check must see.
fn dftl_erasing_its_full_blocks_after_recovery(
    flash: Flash,
    options: &DesignOptions,
) -> Result<(Box<dyn BlockDevice>, ftl::RecoveryReport), ftl::FtlError> {
    let (mut dev, report) = (dftl().recover)(flash, options)?;
    let g = dev.flash().geometry().clone();
    let at = dev.flash().idle_ns();
    for b in (0..g.blocks()).map(BlockId) {
        if dev.flash().write_pointer(b) == g.pages_per_block {
            dev.flash_mut()
                .erase(b, at, flash::OpCause::Recovery)
                .unwrap();
        }
    }
    Ok((dev, report))
}

/// The other negative control: a design that recovers with its invariants broken is reported
/// with the design's own words.
#[test]
fn a_design_that_recovers_with_its_invariants_broken_is_reported() {
    let spec = DesignSpec {
        recover: dftl_erasing_its_full_blocks_after_recovery,
        ..dftl()
    };
    let config = DeviceConfig::preset("small").unwrap();
    let options = DesignOptions::default();
    let image = image(&spec, &config, &options, true).unwrap();
    let outcome = recover_and_use(&spec, &config, &options, image.store, image.end_ns, 1);
    let failure = outcome.expect_err("the broken invariant is reported");
    assert!(
        failure.starts_with("invariant broken after recovery"),
        "{failure}"
    );
}
