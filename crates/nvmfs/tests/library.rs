//! Library-level behaviour: content, LRU list rules, flush watermarks, page_info, cleaning.
mod common;
use common::*;
use nvmfs::layout::ROOT_INO;
use nvmfs::NvmfsParams;
use rand::{Rng, RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

#[test]
fn many_small_files_survive_remount() {
    let env = Env::new(32);
    let mut fs = env.create(2 << 20, NvmfsParams::default());
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).unwrap().ino;
    let mut model = Vec::new();
    for i in 0..300 {
        let len = rng.random_range(1..12_000usize);
        let data: Vec<u8> = (0..len).map(|_| rng.random()).collect();
        let name = format!("f{i}");
        let ino = fs.create_file(d, name.as_bytes(), 0o644, 0, 0).unwrap().ino;
        fs.write(ino, 0, &data).unwrap();
        model.push((name, data));
    }
    fs.check_invariants().unwrap();
    assert!(
        fs.stats().flush_rounds > 0,
        "2 MB of NVRAM must have flushed"
    );
    for (name, data) in &model {
        let ino = fs.lookup(d, name.as_bytes()).unwrap();
        assert_eq!(&read_all(&mut fs, ino), data);
    }
    let dev = fs.unmount().unwrap();
    drop(dev);
    let mut fs = env.open(NvmfsParams::default());
    assert!(
        !fs.stats().lists_reset_at_mount,
        "clean unmount keeps the lists"
    );
    fs.check_invariants().unwrap();
    assert_eq!(fs.readdir(d).unwrap().len(), 300);
    for (name, data) in &model {
        let ino = fs.resolve(&format!("/d/{name}")).unwrap();
        assert_eq!(&read_all(&mut fs, ino), data);
    }
    // Unlink half, rename some, truncate some.
    for (i, (name, _)) in model.iter().enumerate() {
        if i % 2 == 0 {
            fs.unlink(d, name.as_bytes()).unwrap();
        } else if i % 3 == 0 {
            fs.rename(d, name.as_bytes(), ROOT_INO, format!("r{i}").as_bytes())
                .unwrap();
        }
    }
    fs.check_invariants().unwrap();
    assert!(fs.lookup(d, b"f0").is_err());
    let ino = fs.lookup(ROOT_INO, b"r3").unwrap();
    assert_eq!(read_all(&mut fs, ino), model[3].1);
    fs.truncate(ino, 100).unwrap();
    assert_eq!(
        read_all(&mut fs, ino),
        model[3].1[..100.min(model[3].1.len())]
    );
    fs.check_invariants().unwrap();
}

#[test]
fn large_file_random_writes_match_model() {
    let env = Env::new(48);
    let mut fs = env.create(2 << 20, NvmfsParams::default());
    let ino = fs.create_file(ROOT_INO, b"big", 0o644, 0, 0).unwrap().ino;
    let size = 3 << 20;
    let mut model = vec![0u8; size];
    let mut rng = ChaCha8Rng::seed_from_u64(2);
    for i in 0..3000 {
        let off = rng.random_range(0..size / 4096) * 4096 + if i % 5 == 0 { 100 } else { 0 };
        let len = (4096usize).min(size - off);
        let mut buf = vec![0u8; len];
        rng.fill_bytes(&mut buf);
        fs.write(ino, off as u64, &buf).unwrap();
        model[off..off + len].copy_from_slice(&buf);
        if i % 500 == 0 {
            fs.check_invariants().unwrap();
        }
    }
    fs.truncate(ino, size as u64).unwrap();
    assert_eq!(read_all(&mut fs, ino), model);
    let s = fs.stats().clone();
    assert!(s.flush_rounds > 5 && s.evictions > 0, "{s:?}");
    fs.check_invariants().unwrap();
    drop(fs.unmount().unwrap());
    let mut fs = env.open(NvmfsParams::default());
    assert_eq!(read_all(&mut fs, ino), model);
}

#[test]
fn lru_rules_and_page_info() {
    let env = Env::new(32);
    let mut fs = env.create(2 << 20, NvmfsParams::default());
    let ino = fs.create_file(ROOT_INO, b"a", 0o644, 0, 0).unwrap().ino;
    let (_, _, free0, _) = fs.list_lengths();
    fs.write(ino, 0, &[1u8; 4096 * 4]).unwrap();
    let (d, c, f, _) = fs.list_lengths();
    assert_eq!(
        (d, c),
        (5, 0),
        "4 data pages + the root directory's page are dirty"
    );
    assert_eq!(f, free0 - 4);
    let dirty = fs.dirty_pages();
    // Block 3 was written last: MRU. Touching block 0 moves it to MRU.
    let mut b = [0u8; 10];
    fs.read(ino, 0, &mut b).unwrap();
    let block0 = fs.dirty_pages()[0];
    assert!(dirty.contains(&block0));
    // Flush: all 5 dirty pages (< 128) go to one extent, become clean at the LRU end.
    assert!(fs.flush_round().unwrap());
    let (d, c, _, _) = fs.list_lengths();
    assert_eq!((d, c), (0, 5));
    for p in fs.clean_pages() {
        assert!(
            fs.page_info(p).is_some(),
            "flushed page {p} keeps its SSD copy in page_info"
        );
    }
    assert_eq!(
        fs.getattr(ino).unwrap().nvram_blocks,
        4,
        "inodes still point to NVRAM"
    );
    assert_eq!(fs.extent_usage().1, 1);
    // Read of clean data: clean MRU.
    fs.read(ino, 4096, &mut b).unwrap();
    let clean = fs.clean_pages();
    let p1 = clean[0];
    // Write of clean data: dirty MRU, SSD copy invalidated.
    fs.write(ino, 4096, b"x").unwrap();
    assert_eq!(fs.dirty_pages()[0], p1);
    assert_eq!(fs.page_info(p1), None);
    let (d, c, _, _) = fs.list_lengths();
    assert_eq!((d, c), (1, 4));
    fs.check_invariants().unwrap();
    assert!(fs.fragmentation_ratio() >= 1.0);
}

#[test]
fn flush_watermarks_80_50() {
    let env = Env::new(48);
    let mut fs = env.create(2 << 20, NvmfsParams::default());
    let (high, low) = fs.flush_watermarks();
    let cap = fs.superblock().dirty_capacity;
    assert_eq!(high, (cap as f64 * 0.8).ceil() as u32);
    assert_eq!(low, (cap as f64 * 0.5).floor() as u32);
    let ino = fs.create_file(ROOT_INO, b"a", 0o644, 0, 0).unwrap().ino;
    let mut block = 0u64;
    // Fill until just below the high watermark: no flush.
    while fs.list_lengths().0 + 1 < high {
        fs.write(ino, block * 4096, &[9u8; 4096]).unwrap();
        block += 1;
    }
    assert_eq!(fs.stats().flush_rounds, 0);
    fs.write(ino, block * 4096, &[9u8; 4096]).unwrap();
    let (d, c, _, _) = fs.list_lengths();
    assert!(fs.stats().flush_rounds > 0);
    assert!(
        d <= low,
        "flushing stops at or below the low watermark: {d} > {low}"
    );
    assert!(
        d > low.saturating_sub(128),
        "and not more than one round below it"
    );
    assert_eq!(
        c as u64,
        fs.stats().flushed_pages,
        "flushed pages are clean and still on NVRAM"
    );
    fs.check_invariants().unwrap();
}

#[test]
fn cleaning_thresholds_and_efficiency() {
    let env = Env::new(24);
    let params = NvmfsParams {
        clean_free_share: 0.3,
        ..NvmfsParams::default()
    };
    let mut fs = env.create(2 << 20, params.clone());
    let extents = fs.superblock().extents();
    let ino = fs.create_file(ROOT_INO, b"a", 0o644, 0, 0).unwrap().ino;
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    let size_blocks = 600u64;
    let mut model = vec![0u8; (size_blocks * 4096) as usize];
    for _ in 0..6000 {
        let b = rng.random_range(0..size_blocks);
        let v: u8 = rng.random();
        fs.write(ino, b * 4096, &[v; 4096]).unwrap();
        model[(b * 4096) as usize..((b + 1) * 4096) as usize].fill(v);
        if fs.cleaning_due() {
            panic!("cleaning should have run when both thresholds held");
        }
    }
    let s = fs.stats().clone();
    assert!(s.cleaning_rounds > 0, "{s:?} over {extents} extents");
    let eff = s.cleaning_efficiency();
    assert!(eff > 0.0 && eff <= 1.0, "{eff}");
    fs.check_invariants().unwrap();
    assert_eq!(read_all(&mut fs, ino), model);
    drop(fs.unmount().unwrap());
    let mut fs = env.open(params);
    assert_eq!(read_all(&mut fs, ino), model);
    fs.check_invariants().unwrap();
}

#[test]
fn namespace_errors() {
    let env = Env::new(32);
    let mut fs = env.create(1 << 20, NvmfsParams::default());
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).unwrap().ino;
    fs.create_file(d, b"x", 0o644, 0, 0).unwrap();
    assert!(matches!(
        fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0),
        Err(nvmfs::NvmfsError::Exists)
    ));
    assert!(matches!(
        fs.rmdir(ROOT_INO, b"d"),
        Err(nvmfs::NvmfsError::NotEmpty)
    ));
    assert!(matches!(
        fs.unlink(ROOT_INO, b"d"),
        Err(nvmfs::NvmfsError::IsDir)
    ));
    assert!(matches!(
        fs.lookup(ROOT_INO, b"nope"),
        Err(nvmfs::NvmfsError::NotFound)
    ));
    assert!(matches!(
        fs.create_file(ROOT_INO, &[b'a'; 200], 0o644, 0, 0),
        Err(nvmfs::NvmfsError::NameTooLong { .. })
    ));
    assert!(fs.rename(ROOT_INO, b"d", d, b"inside").is_err());
    fs.unlink(d, b"x").unwrap();
    fs.rmdir(ROOT_INO, b"d").unwrap();
    assert!(fs.readdir(ROOT_INO).unwrap().is_empty());
    fs.check_invariants().unwrap();
}

/// Reads (in readahead-sized runs) promote SSD blocks to the clean list while writes flush
/// and clean: a model check of the mixed path (see also the step-by-step regression below).
#[test]
fn cleaning_while_reads_fill_nvram_with_clean_pages() {
    let env = Env::new(32);
    let params = NvmfsParams {
        clean_free_share: 0.3,
        ..NvmfsParams::default()
    };
    let mut fs = env.create(1 << 20, params);
    let files: Vec<u32> = (0..3)
        .map(|i| {
            fs.create_file(ROOT_INO, format!("f{i}").as_bytes(), 0o644, 0, 0)
                .unwrap()
                .ino
        })
        .collect();
    let blocks = 100usize;
    let mut model = vec![vec![0u8; blocks * 4096]; files.len()];
    let mut rng = ChaCha8Rng::seed_from_u64(77);
    let mut buf = vec![0u8; 4096];
    for i in 0..4_000 {
        let f = rng.random_range(0..files.len());
        let off = rng.random_range(0..blocks) * 4096;
        if rng.random_bool(0.5) {
            rng.fill_bytes(&mut buf);
            fs.write(files[f], off as u64, &buf).unwrap();
            model[f][off..off + 4096].copy_from_slice(&buf);
        } else {
            // Reads come in readahead-sized runs, as the kernel sends them through FUSE.
            let len = (rng.random_range(1..=32usize) * 4096).min(blocks * 4096 - off);
            let mut got = vec![0u8; len];
            let n = fs.read(files[f], off as u64, &mut got).unwrap();
            let want = &model[f][off..off + len];
            assert!(got[..n] == want[..n], "op {i}: file {f} at {off} differs");
        }
        if i % 1000 == 0 {
            fs.check_invariants().unwrap();
        }
    }
    let s = fs.stats().clone();
    assert!(
        s.cleaning_rounds > 0 && s.read_promotions > 0 && s.evictions > 0,
        "{s:?}"
    );
    fs.check_invariants().unwrap();
    for (f, &ino) in files.iter().enumerate() {
        let got = read_all(&mut fs, ino);
        assert!(got == model[f][..got.len()], "file {f} differs");
    }
}

/// Regression, built step by step: cleaning an extent whose first blocks have clean NVRAM
/// copies at the clean LRU end and whose later blocks live on SSD only, with no free NVRAM
/// page. Allocating a migration page evicts one of those clean copies; the round must not
/// keep the evicted page in its redo log (the old code then handed the same page to the
/// migrated block, and two blocks shared it).
#[test]
fn cleaning_never_logs_a_page_its_own_allocation_evicted() {
    let env = Env::new(24);
    let params = NvmfsParams {
        flush_high: 1.0,
        flush_low: 0.9,
        ..NvmfsParams::default()
    };
    let mut fs = env.create(1 << 20, params);
    let a = fs.create_file(ROOT_INO, b"a", 0o644, 0, 0).unwrap().ino;
    let b = fs.create_file(ROOT_INO, b"b", 0o644, 0, 0).unwrap().ino;
    let block = |ino: u32, i: u64| [(ino as u8) ^ (i as u8) ^ 0x5a; 4096];
    for i in 0..40 {
        fs.write(a, i * 4096, &block(a, i)).unwrap();
    }
    // One extent with a0..a39 (and the directory page); a20..a39 overwritten: 20 valid left.
    assert!(fs.flush_round().unwrap());
    let mut model: Vec<[u8; 4096]> = (0..40).map(|i| block(a, i)).collect();
    for i in 20..40 {
        model[i as usize] = [0xee; 4096];
        fs.write(a, i * 4096, &model[i as usize]).unwrap();
    }
    // a0..a9 read: clean MRU. Then fill NVRAM, and more pages evict the rest of the clean list.
    let mut buf = [0u8; 4096];
    for i in 0..10 {
        fs.read(a, i * 4096, &mut buf).unwrap();
    }
    let mut next = 0u64;
    while fs.list_lengths().2 > 0 {
        fs.write(b, next * 4096, &block(b, next)).unwrap();
        next += 1;
    }
    // The directory page (flushed first, so at the very LRU end) and a10..a19 go.
    for _ in 0..20 {
        if fs.list_lengths().1 == 10 {
            break;
        }
        fs.write(b, next * 4096, &block(b, next)).unwrap();
        next += 1;
    }
    assert_eq!(fs.list_lengths().1, 10, "a0..a9 are the clean list");
    assert_eq!(fs.list_lengths().2, 0, "no free NVRAM page");
    // One free page, so the round passes its precheck (11 SSD-only blocks: the directory page
    // and a10..a19; 10 clean + 1 free pages). Extent order: directory, a0..a9 (clean copies,
    // logged first), a10..a19 (need pages: their allocations evict a0..a9).
    next -= 1;
    fs.truncate(b, next * 4096).unwrap();
    assert_eq!(fs.list_lengths().2, 1);
    fs.check_invariants().unwrap();
    let _ = fs.clean_round().unwrap();
    fs.check_invariants().unwrap();
    for (i, want) in model.iter().enumerate() {
        fs.read(a, i as u64 * 4096, &mut buf).unwrap();
        assert!(&buf == want, "a{i} lost its content");
    }
    for i in 0..next {
        fs.read(b, i * 4096, &mut buf).unwrap();
        assert!(buf == block(b, i), "b{i} lost its content");
    }
}

/// POSIX: a file unlinked while open lives on, nameless, until its last close; a crash while
/// it is open leaves it unreachable, and the next mount frees it.
#[test]
fn unlinked_open_file_lives_until_close_or_crash() {
    let env = Env::new(32);
    let mut fs = env.create(1 << 20, NvmfsParams::default());
    let free0 = fs.usage().free_inodes;
    let a = fs.create_file(ROOT_INO, b"a", 0o644, 0, 0).unwrap().ino;
    fs.write(a, 0, &[3u8; 9000]).unwrap();
    fs.open_file(a).unwrap();
    fs.open_file(a).unwrap();
    fs.unlink(ROOT_INO, b"a").unwrap();
    assert!(fs.lookup(ROOT_INO, b"a").is_err());
    assert_eq!(fs.getattr(a).unwrap().nlink, 0);
    fs.write(a, 9000, &[4u8; 100]).unwrap();
    assert_eq!(read_all(&mut fs, a).len(), 9100);
    fs.close(a).unwrap();
    assert!(fs.getattr(a).is_ok(), "one open left");
    fs.close(a).unwrap();
    assert!(fs.getattr(a).is_err(), "freed at the last close");
    assert_eq!(fs.usage().free_inodes, free0);
    fs.check_invariants().unwrap();
    // Open, unlink, crash: mount frees the orphan and its blocks.
    let b = fs.create_file(ROOT_INO, b"b", 0o644, 0, 0).unwrap().ino;
    fs.write(b, 0, &[5u8; 50_000]).unwrap();
    fs.open_file(b).unwrap();
    fs.unlink(ROOT_INO, b"b").unwrap();
    fs.fsync(b).unwrap();
    drop(fs.crash());
    let mut fs = env.open(NvmfsParams::default());
    fs.check_invariants().unwrap();
    assert!(fs.getattr(b).is_err());
    assert_eq!(fs.usage().free_inodes, free0);
}
