//! Process death during flushing and cleaning: stop after the k-th durable step (NVRAM persist
//! point or SSD write), drop everything, reopen from the NVRAM file + SSD image, and check
//! every page of every file holds its content before or after the interrupted operation (all
//! earlier operations were fsync'ed), and the lists are rebuilt as §III-D says.
mod common;
use common::*;
use nvmfs::layout::ROOT_INO;
use nvmfs::{NvmfsError, NvmfsParams};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

const FILES: usize = 3;
const BLOCKS: u64 = 150;

fn params() -> NvmfsParams {
    NvmfsParams {
        clean_free_share: 0.3,
        inode_count: 64,
        ..NvmfsParams::default()
    }
}

/// Runs the seeded workload; returns the models before and after the interrupted op, or the
/// final model and total steps when no crash happened.
fn run(env: &Env, crash_after: Option<u64>) -> (Vec<Vec<u8>>, Vec<Vec<u8>>, u64, bool) {
    let mut fs = env.create(1 << 20, params());
    let mut inos = Vec::new();
    for i in 0..FILES {
        inos.push(
            fs.create_file(ROOT_INO, format!("f{i}").as_bytes(), 0o644, 0, 0)
                .unwrap()
                .ino,
        );
    }
    let mut model = vec![Vec::new(); FILES];
    let start = fs.steps();
    fs.set_crash_after(crash_after);
    let mut rng = ChaCha8Rng::seed_from_u64(9);
    for _ in 0..3000 {
        let f = rng.random_range(0..FILES);
        let b = rng.random_range(0..BLOCKS);
        let v: u8 = rng.random_range(1..=255);
        let mut next = model.clone();
        let end = ((b + 1) * 4096) as usize;
        if next[f].len() < end {
            next[f].resize(end, 0);
        }
        next[f][(b * 4096) as usize..end].fill(v);
        let r = fs
            .write(inos[f], b * 4096, &[v; 4096])
            .and_then(|_| fs.fsync(inos[f]));
        match r {
            Ok(()) => model = next,
            Err(NvmfsError::Crashed) => {
                let steps = fs.steps() - start;
                drop(fs.crash());
                return (model, next, steps, true);
            }
            Err(e) => panic!(
                "{e}: lists {:?} extents {:?} of {} frag {} stats {:?}",
                fs.list_lengths(),
                fs.extent_usage(),
                fs.superblock().extents(),
                fs.fragmentation_ratio(),
                fs.stats()
            ),
        }
    }
    let steps = fs.steps() - start;
    let stats = fs.stats().clone();
    assert!(
        stats.flush_rounds > 3 && stats.cleaning_rounds > 0,
        "{stats:?}"
    );
    drop(fs.crash());
    (model.clone(), model, steps, false)
}

fn verify(env: &Env, before: &[Vec<u8>], after: &[Vec<u8>]) -> (bool, bool) {
    let mut fs = env.open(params());
    fs.check_invariants().unwrap();
    let reset = fs.stats().lists_reset_at_mount;
    if reset {
        let (_, c, _, _) = fs.list_lengths();
        // Reset lists: the clean list starts empty (a flush may have run since, at mount).
        assert!(c as u64 <= fs.stats().flushed_pages);
    }
    for i in 0..FILES {
        let ino = fs.lookup(ROOT_INO, format!("f{i}").as_bytes()).unwrap();
        let got = read_all(&mut fs, ino);
        for (pg, chunk) in got.chunks(4096).enumerate() {
            let b = before[i].chunks(4096).nth(pg);
            let a = after[i].chunks(4096).nth(pg);
            assert!(
                Some(chunk) == b
                    || Some(chunk) == a
                    || (b.is_none() && chunk.iter().all(|&x| x == 0)),
                "file {i} page {pg} holds neither the old nor the new content"
            );
        }
        assert!(got.len() == before[i].len() || got.len() == after[i].len());
    }
    (reset, fs.stats().redo_replayed_at_mount)
}

#[test]
fn crash_during_flush_and_cleaning() {
    let env = Env::new(20);
    let (_, _, total, crashed) = run(&env, None);
    assert!(!crashed);
    let points: u64 = std::env::var("MOBIUS_LONG").map_or(6, |_| 40);
    let (mut resets, mut replays, mut checked) = (0, 0, 0);
    for i in 1..=points {
        let k = total * i / (points + 1) + i % 7;
        let env = Env::new(20);
        let (before, after, _, crashed) = run(&env, Some(k));
        assert!(crashed);
        let (reset, replay) = verify(&env, &before, &after);
        resets += reset as u32;
        replays += replay as u32;
        checked += 1;
    }
    eprintln!("crash points checked: {checked} of {total} steps; lists reset at {resets}, redo replayed at {replays}");
    assert!(resets > 0);
}
