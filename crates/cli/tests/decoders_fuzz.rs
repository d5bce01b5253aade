//! Every on-flash decoder against damaged input (issue #20: "decoders trust what they read"):
//! the corpus is the metadata pages and OOB records real images hold (each design runs a
//! seeded workload on a tag-only device), and each sample is fed as it is and then mutated —
//! bytes flipped, cut short, run long, filled with noise — to every decoder. A decoder may
//! refuse any input; it must not panic. Seeded, so a failure names the design, sample, mutation
//! and decoder needed to replay it. `MOBIUS_LONG=1` runs 50× the mutations.

use flash::{Content, DeviceConfig, Flash, OpCause, PageState, Ppn, ReadStatus};
use ftl::DesignOptions;
use lab::decoders::{decoder as d, sized, Decoder};
use rand::{Rng, RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Metadata pages (as bytes) and OOB records of a `small` image after a seeded workload.
fn corpus(spec: &ftl::DesignSpec) -> Vec<Vec<u8>> {
    let config = DeviceConfig::preset("small").unwrap();
    let oob_bytes = (spec.oob_record_bytes)(&config.geometry);
    let flash = Flash::in_memory(config, oob_bytes, true);
    let mut dev = spec.build(flash, &DesignOptions::default()).unwrap();
    let mut w = workload::WorkloadSpec::named(spec.default_workload).unwrap();
    w.requests = 3_000;
    w.fill = 0.5;
    let run = lab::driver::run(dev.as_mut(), &w, 11, 0, false, &mut |_, _| {}).unwrap();
    let mut flash = dev.into_flash();
    flash.start_clock_at(run.end_ns);
    let g = flash.geometry().clone();
    let mut out = Vec::new();
    let mut oob = vec![0u8; oob_bytes as usize];
    for p in 0..g.pages() {
        if flash.peek_state(Ppn(p)) != PageState::Programmed {
            continue;
        }
        let at = flash.idle_ns();
        let (status, _) = flash.read(Ppn(p), &mut oob, at, OpCause::Recovery).unwrap();
        if let ReadStatus::Data(Content::Bytes(b)) = status {
            out.push(b.to_vec());
        }
        // OOB records repeat a lot: keep every 16th.
        if p % 16 == 0 {
            out.push(oob.clone());
        }
    }
    out
}

/// `sample` damaged one of five ways, chosen by `rng`.
fn mutate(sample: &[u8], rng: &mut ChaCha8Rng) -> Vec<u8> {
    let mut b = sample.to_vec();
    match rng.random_range(0..5u32) {
        0 => {
            for _ in 0..rng.random_range(1..=8) {
                if !b.is_empty() {
                    let i = rng.random_range(0..b.len());
                    b[i] ^= 1 << rng.random_range(0..8);
                }
            }
        }
        1 => b.truncate(rng.random_range(0..=b.len())),
        2 => {
            let extra = rng.random_range(1..64);
            b.extend((0..extra).map(|_| rng.random::<u8>()));
        }
        3 => {
            // A field overwritten with an extreme value (counts, offsets, lengths).
            if b.len() >= 4 {
                let i = rng.random_range(0..b.len() - 3);
                let v = [u32::MAX, 0x8000_0000, 0x7fff_ffff, 4097][rng.random_range(0..4)];
                b[i..i + 4].copy_from_slice(&v.to_le_bytes());
            }
        }
        _ => rng.fill_bytes(&mut b),
    }
    b
}

/// Feeds each sample, then `rounds` mutations of it, to every decoder; returns one line per
/// decoder that panicked (its first failure), and the number of decodes.
fn fuzz(
    decoders: &[Decoder],
    samples: &[Vec<u8>],
    rounds: u32,
    seed: u64,
    what: &str,
) -> (Vec<String>, u64) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut failures: Vec<String> = Vec::new();
    let mut fed = 0u64;
    for (s, sample) in samples.iter().enumerate() {
        for m in 0..=rounds {
            let input = if m == 0 {
                sample.clone()
            } else {
                mutate(sample, &mut rng)
            };
            let pad = if m % 2 == 0 { 0 } else { 0xff };
            for dec in decoders {
                fed += 1;
                let input = sized(&input, dec.bytes, pad);
                let panicked = catch_unwind(AssertUnwindSafe(|| (dec.decode)(&input))).is_err();
                if panicked && !failures.iter().any(|f| f.starts_with(dec.name)) {
                    failures.push(format!(
                        "{} panicked on {what} sample {s}, mutation {m} (seed {seed}; starts {:02x?})",
                        dec.name,
                        &input[..input.len().min(24)]
                    ));
                }
            }
        }
    }
    (failures, fed)
}

/// Runs `f` with the panic hook silenced (panics are caught and reported by [`fuzz`]).
fn quietly<T>(f: impl FnOnce() -> T) -> T {
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let out = f();
    std::panic::set_hook(hook);
    out
}

#[test]
fn no_decoder_panics_on_damaged_images() {
    let rounds = if std::env::var("MOBIUS_LONG").is_ok() {
        500
    } else {
        10
    };
    let decoders = lab::decoders::all();
    let mut failures = Vec::new();
    let mut fed = 0;
    for spec in lab::registry::all() {
        let design = spec.name;
        let samples: Vec<Vec<u8>> = corpus(&spec).into_iter().step_by(3).collect();
        assert!(!samples.is_empty(), "{design}: no metadata in the image");
        let (f, n) = quietly(|| fuzz(&decoders, &samples, rounds, 0xdec0de, design));
        eprintln!("{design}: {} samples, {n} decodes", samples.len());
        failures.extend(f);
        fed += n;
    }
    let samples = host_side_corpus();
    let (f, n) = quietly(|| fuzz(&decoders, &samples, rounds, 0xdec0de, "host-side"));
    eprintln!("host-side: {} samples, {n} decodes", samples.len());
    failures.extend(f);
    fed += n;
    assert!(
        failures.is_empty(),
        "decoders panicked ({fed} decodes):\n{}",
        failures.join("\n")
    );
}

/// Records that live outside a design's metadata: an image file's header, NVMFS's superblock,
/// inode, page record, directory entry and committed redo log, the SQLite VFS's directory.
fn host_side_corpus() -> Vec<Vec<u8>> {
    use nvmfs::layout::*;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("h.img");
    let config = DeviceConfig::preset("small").unwrap();
    let spec = lab::registry::all().remove(0);
    spec.create_image(&path, &config, &DesignOptions::default())
        .unwrap();
    let header = std::fs::read(&path).unwrap()[..flash::FileStore::HEADER_FIELD_BYTES].to_vec();
    let mut superblock = vec![0u8; 4096];
    Superblock::plan(64 << 20, 3500, 1024, 0.5)
        .unwrap()
        .encode(&mut superblock);
    let mut inode = vec![0u8; INODE_BYTES as usize];
    Inode {
        mode: S_IFREG | 0o644,
        size: 1 << 20,
        direct: [BlockAddr::ssd(77); DIRECT_POINTERS],
        ..Default::default()
    }
    .encode(&mut inode);
    let mut record = vec![0u8; PAGE_RECORD_BYTES as usize];
    PageRecord {
        list: PageList::Clean,
        owner_ino: 9,
        owner_block: 513,
        stamp: 1 << 40,
        page_info: BlockAddr::ssd(1000),
    }
    .encode(&mut record);
    let mut entry = vec![0u8; DIRENT_BYTES as usize];
    DirEntry {
        ino: 17,
        kind_dir: false,
        name: b"pg_wal".to_vec(),
    }
    .encode(&mut entry);
    let mut redo = vec![0u8; 4096];
    let entries = (0..40)
        .map(|i| RedoEntry {
            ino: i,
            block: 2 * i,
            new_addr: BlockAddr::nvram(i),
        })
        .collect();
    RedoLog { extent: 3, entries }.encode_body(&mut redo);
    redo[REDO_STATE_AT..REDO_STATE_AT + 4].copy_from_slice(&1u32.to_le_bytes());
    let directory = sqlite::layout::Directory::new(65_536, 4096)
        .unwrap()
        .encode();
    vec![
        header,
        superblock,
        inode,
        record,
        entry,
        redo,
        directory.to_vec(),
    ]
}

/// The harness is an oracle: a decoder that indexes by a length it read (the bug this test
/// hunts) is reported, with the sample and mutation that made it panic.
#[test]
fn the_harness_reports_a_decoder_that_trusts_a_length() {
    let trusting = d("trusting", 64, |b| {
        let n = b[0] as usize;
        std::hint::black_box(&b[1..1 + n]);
    });
    let careful = d("careful", 64, |b| {
        let n = b[0] as usize;
        std::hint::black_box(b.get(1..1 + n));
    });
    let samples = vec![vec![8u8; 64]];
    let (failures, fed) = quietly(|| fuzz(&[trusting, careful], &samples, 50, 1, "test"));
    assert_eq!(fed, 2 * 51);
    assert_eq!(failures.len(), 1, "{failures:?}");
    assert!(
        failures[0].starts_with("trusting panicked on test sample 0"),
        "{failures:?}"
    );
}

/// Feeds each decoder every sample cut short (lengths up to its own); one line per decoder that
/// panicked.
fn cut_short(decoders: &[Decoder], samples: &[Vec<u8>]) -> Vec<String> {
    let mut failures = Vec::new();
    for dec in decoders {
        'samples: for sample in samples {
            let full = sized(sample, dec.bytes, 0);
            let step = (dec.bytes / 64).max(1);
            for len in (0..dec.bytes).step_by(step).chain([dec.bytes - 1]) {
                let cut = &full[..len];
                if catch_unwind(AssertUnwindSafe(|| (dec.decode)(cut))).is_err() {
                    failures.push(format!(
                        "{} panicked on {len} of its {} bytes",
                        dec.name, dec.bytes
                    ));
                    break 'samples;
                }
            }
        }
    }
    failures
}

/// Shorter than their callers ever hand them: every decoder refuses a record cut anywhere
/// (real samples and noise) without panicking; a decoder that reads a byte past a short
/// record is caught.
#[test]
fn no_decoder_panics_on_a_short_record() {
    let mut samples = host_side_corpus();
    samples.push(vec![0x5a; 4096]);
    let failures = quietly(|| cut_short(&lab::decoders::all(), &samples));
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    let fixed_offset = d("fixed offset", 32, |b| {
        std::hint::black_box(b[31]);
    });
    let caught = quietly(|| cut_short(&[fixed_offset], &samples));
    assert_eq!(caught.len(), 1, "{caught:?}");
}
