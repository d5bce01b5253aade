//! NVMFS's mount-time recovery against a damaged NVRAM image: a seeded workload (files in two
//! directories, overwrites, fsyncs, flushes to the SSD and cleaning) stops without an unmount,
//! and copies of its NVRAM file are damaged in one to three places, each in one of the layout's
//! regions (half the time in its first page, where the workload's entries are) — the
//! superblock, the inode table, either bitmap, the page records, the SSD owner table, the
//! extent flags, the redo log or the data area (directories and indirect pages live there) — by
//! flipped bits, an extreme 32-bit value, or a 64-byte record copied from elsewhere in the
//! region. A mount may refuse the image with a typed error or mount a file system that lost
//! data; it must not panic, and neither must the file system when it is used (every file read,
//! one written and fsynced, the invariants checked, an unmount). A damage that aborts the
//! process (an allocation of a damaged size) fails the test binary itself. The superblock's
//! and records' decoders alone are fuzzed in crates/cli/tests/decoders_fuzz.rs.
//!
//! Seeded: a failure names the round, region and damage; `MOBIUS_FUZZ_SEED` and
//! `MOBIUS_FUZZ_ROUNDS` replay it (`MOBIUS_LONG=1`: 10× the rounds).
mod common;
use common::*;
use nvmfs::layout::{
    get_u64, put_u64, BlockAddr, Superblock, DIRECT_POINTERS, INODE_BYTES, INODE_DIRECT_AT,
    INODE_SIZE_AT, PAGE_BYTES, ROOT_INO,
};
use nvmfs::NvmfsParams;
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

fn params() -> NvmfsParams {
    NvmfsParams {
        clean_free_share: 0.3,
        inode_count: 64,
        ..NvmfsParams::default()
    }
}

/// The seeded workload, left without an unmount (a power cut after its last fsync).
fn make_image(env: &Env) {
    let mut fs = env.create(1 << 20, params());
    let sub = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).unwrap().ino;
    let mut inos = Vec::new();
    for i in 0..4 {
        let dir = if i % 2 == 0 { ROOT_INO } else { sub };
        let name = format!("f{i}");
        inos.push(
            fs.create_file(dir, name.as_bytes(), 0o644, 0, 0)
                .unwrap()
                .ino,
        );
    }
    let mut rng = ChaCha8Rng::seed_from_u64(9);
    for _ in 0..2500 {
        let ino = inos[rng.random_range(0..inos.len())];
        // Up to 120 blocks: past the direct pointers, into an indirect page.
        let block = rng.random_range(0..120u64);
        let v: u8 = rng.random_range(1..=255);
        fs.write(ino, block * PAGE_BYTES, &[v; PAGE_BYTES as usize])
            .unwrap();
        fs.fsync(ino).unwrap();
    }
    let stats = fs.stats().clone();
    assert!(
        stats.flush_rounds > 0 && stats.cleaning_rounds > 0,
        "{stats:?}"
    );
    drop(fs.crash());
}

/// The regions of the NVRAM's layout, as byte ranges, with their names.
fn regions(sb: &Superblock) -> Vec<(&'static str, std::ops::Range<usize>)> {
    let page = |p: u32| p as usize * PAGE_BYTES as usize;
    let bounds = [
        ("superblock", 0, sb.inode_table_at),
        ("inode table", sb.inode_table_at, sb.nvram_bitmap_at),
        ("NVRAM bitmap", sb.nvram_bitmap_at, sb.ssd_bitmap_at),
        ("SSD bitmap", sb.ssd_bitmap_at, sb.page_records_at),
        ("page records", sb.page_records_at, sb.ssd_owners_at),
        ("SSD owners", sb.ssd_owners_at, sb.extent_flags_at),
        ("extent flags", sb.extent_flags_at, sb.redo_at),
        ("redo log", sb.redo_at, sb.data_at),
        ("data", sb.data_at, sb.data_at + sb.data_pages),
    ];
    bounds
        .iter()
        .filter(|(_, a, b)| b > a)
        .map(|&(name, a, b)| (name, page(a)..page(b)))
        .collect()
}

/// Damages `nvram` in one region drawn from `rng`; returns what was done.
fn damage(nvram: &mut [u8], sb: &Superblock, rng: &mut ChaCha8Rng) -> String {
    let regions = regions(sb);
    let (name, range) = regions[rng.random_range(0..regions.len())].clone();
    let range = range.start..range.end.min(nvram.len());
    if range.len() < 128 {
        return format!("{name}: too small");
    }
    // Half the time within the region's first page, where its entries in use are (the
    // workload's few inodes, records and pointers are the lowest numbered).
    let end = if rng.random_bool(0.5) {
        range.end.min(range.start + PAGE_BYTES as usize + 64)
    } else {
        range.end
    };
    let at = rng.random_range(range.start..end - 64);
    match rng.random_range(0..3u32) {
        0 => {
            for _ in 0..rng.random_range(1..=8) {
                let i = rng.random_range(at..at + 64);
                nvram[i] ^= 1 << rng.random_range(0..8);
            }
            format!("{name}: bits flipped near byte {at}")
        }
        1 => {
            let v = [u32::MAX, 0x8000_0000, 0x7fff_ffff, 4097][rng.random_range(0..4)];
            let at = at & !3;
            nvram[at..at + 4].copy_from_slice(&v.to_le_bytes());
            format!("{name}: {v:#x} written at byte {at}")
        }
        _ => {
            let from = rng.random_range(range.start..range.end - 64) & !7;
            let at = at & !7;
            nvram.copy_within(from..from + 64, at);
            format!("{name}: 64 bytes copied from byte {from} to {at}")
        }
    }
}

/// Mounts the damaged image and uses it. Errors are allowed; a panic is returned as its text.
fn mount_and_use(env: &Env) -> Result<&'static str, String> {
    crashtest::quiet_panics::catch(|| {
        let dev = match nvmfs::ssd::open_ssd(
            &env.ssd(),
            &env.config,
            &dftl::spec(),
            &ftl::DesignOptions::default(),
        ) {
            Ok(dev) => dev,
            Err(_) => return "SSD refused",
        };
        let Ok(mut fs) = nvmfs::Nvmfs::open(&env.nvram(), dev, params()) else {
            return "refused";
        };
        fs.set_clock(|| 7);
        let mut failed = false;
        let mut files = Vec::new();
        for dir in [Some(ROOT_INO), fs.lookup(ROOT_INO, b"d").ok()]
            .into_iter()
            .flatten()
        {
            match fs.readdir(dir) {
                Ok(entries) => files.extend(entries.into_iter().map(|e| e.ino)),
                Err(_) => failed = true,
            }
        }
        for &ino in &files {
            let Ok(attr) = fs.getattr(ino) else {
                failed = true;
                continue;
            };
            let mut buf = vec![0u8; attr.size.min(2 << 20) as usize];
            failed |= fs.read(ino, 0, &mut buf).is_err();
        }
        if let Some(&ino) = files.last() {
            failed |= fs
                .write(ino, 3 * PAGE_BYTES, &[0x5a; PAGE_BYTES as usize])
                .and_then(|_| fs.fsync(ino))
                .is_err();
        }
        failed |= fs.check_invariants().is_err();
        failed |= fs.unmount().is_err();
        if failed {
            "mounted, an operation failed"
        } else {
            "mounted and used"
        }
    })
}

#[test]
fn no_mount_panics_on_a_damaged_nvram() {
    let rounds: u32 = match std::env::var("MOBIUS_FUZZ_ROUNDS") {
        Ok(n) => n.parse().expect("MOBIUS_FUZZ_ROUNDS is a number"),
        Err(_) if std::env::var("MOBIUS_LONG").is_ok() => 1_000,
        Err(_) => 100,
    };
    let seed: u64 = std::env::var("MOBIUS_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed_0a1d);
    let pristine = Env::new(20);
    make_image(&pristine);
    let nvram = std::fs::read(pristine.nvram()).unwrap();
    let ssd = std::fs::read(pristine.ssd()).unwrap();
    let sb = Superblock::decode(&nvram[..4096]).unwrap();
    let mut tally = std::collections::BTreeMap::new();
    let mut failures = Vec::new();
    for round in 0..rounds {
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ ((round as u64) << 8));
        let env = Env::new(20);
        let mut damaged = nvram.clone();
        let what: Vec<String> = (0..rng.random_range(1..=3))
            .map(|_| damage(&mut damaged, &sb, &mut rng))
            .collect();
        std::fs::write(env.nvram(), &damaged).unwrap();
        std::fs::write(env.ssd(), &ssd).unwrap();
        match mount_and_use(&env) {
            Ok(outcome) => *tally.entry(outcome).or_insert(0) += 1,
            Err(panic) => failures.push(format!(
                "round {round} (MOBIUS_FUZZ_SEED={seed}; {}): panicked: {panic}",
                what.join("; ")
            )),
        }
    }
    eprintln!("{tally:?}");
    assert!(
        failures.is_empty(),
        "{} damaged NVRAM images made NVMFS panic:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Found by the fuzz (300 rounds): an inode's pointer to NVRAM page p with a bit flipped above
/// the page number's 32 bits passed recovery as page p, and the first eviction of that page
/// failed its assertion that the inode points to it. Such a pointer is now no address, and the
/// mount refuses the image.
#[test]
fn a_pointer_with_a_bit_set_above_its_page_number_is_refused_at_mount() {
    let env = Env::new(20);
    make_image(&env);
    let mut nvram = std::fs::read(env.nvram()).unwrap();
    let sb = Superblock::decode(&nvram[..4096]).unwrap();
    let table = sb.inode_table_at as usize * PAGE_BYTES as usize;
    let slot = (0..sb.inode_count as usize)
        .flat_map(|ino| {
            (0..DIRECT_POINTERS)
                .map(move |k| table + ino * INODE_BYTES as usize + INODE_DIRECT_AT + 8 * k)
        })
        .find(|&at| BlockAddr(get_u64(&nvram, at)).as_nvram().is_some())
        .expect("a direct pointer to NVRAM");
    let pointer = get_u64(&nvram, slot);
    put_u64(&mut nvram, slot, pointer | 1 << 46);
    std::fs::write(env.nvram(), &nvram).unwrap();
    assert_refused(&env, "bad pointer");
}

/// Found by the fuzz (3,000 rounds of another seed): a directory whose inode's size was
/// damaged to petabytes mounted, and its first lookup asked for that much memory to read it
/// whole, which aborts the process. A size beyond the largest file is now refused at mount.
#[test]
fn an_inode_size_beyond_the_largest_file_is_refused_at_mount() {
    let env = Env::new(20);
    make_image(&env);
    let mut nvram = std::fs::read(env.nvram()).unwrap();
    let sb = Superblock::decode(&nvram[..4096]).unwrap();
    let root =
        sb.inode_table_at as usize * PAGE_BYTES as usize + ROOT_INO as usize * INODE_BYTES as usize;
    put_u64(&mut nvram, root + INODE_SIZE_AT, 1 << 50);
    std::fs::write(env.nvram(), &nvram).unwrap();
    assert_refused(&env, "beyond the largest file");
}

/// Mounting `env` fails with a `Corrupt` error that says `why`.
fn assert_refused(env: &Env, why: &str) {
    let dev = nvmfs::ssd::open_ssd(
        &env.ssd(),
        &env.config,
        &dftl::spec(),
        &ftl::DesignOptions::default(),
    )
    .unwrap();
    match nvmfs::Nvmfs::open(&env.nvram(), dev, params()) {
        Err(nvmfs::NvmfsError::Corrupt(text)) => assert!(text.contains(why), "{text}"),
        Err(e) => panic!("refused for another reason: {e}"),
        Ok(_) => panic!("mounted a damaged image"),
    }
}
