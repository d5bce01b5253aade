//! `gc_free_blocks` (the free-block count below which GC runs) on every design that derives
//! its mark from the geometry: Möbius, DFTL, Atomic-Write and LightTx (their engine), TxFlash TC,
//! SCC and BPCC (issue #66's GC threshold, docs/robustness.md). Each design's default is the mark
//! it used before the parameter existed, so given at its default it builds the same device and
//! a run on it does the same flash operations; a larger mark starts GC earlier and keeps more
//! blocks back from the exported capacity (where the mark bounds it); a mark below the design's floor (what it needs to
//! recover and make progress) is a typed error; recovery rebuilds the device with the mark it
//! is given.

use flash::{Content, ContentTag, DeviceConfig, Geometry, Lpn, OpCause};
use ftl::{BlockDevice, DesignOptions, FtlError};
use rand::{RngExt, SeedableRng};

/// A design's default mark and its floor on a geometry.
type Marks = fn(&Geometry) -> (u32, u32);

/// Each design with its marks.
const DESIGNS: [(&str, Marks); 7] = [
    ("mobius", mobius),
    ("dftl", dftl),
    ("atomic-write", engine),
    ("lighttx", engine),
    ("txflash-tc", txflash),
    ("txflash-scc", txflash),
    ("txflash-bpcc", txflash),
];

fn mobius(g: &Geometry) -> (u32, u32) {
    (mftl::default_gc_free_blocks(g), mftl::min_gc_free_blocks(g))
}

fn dftl(g: &Geometry) -> (u32, u32) {
    let cmt = dftl::DftlConfig::from_options(&DesignOptions::default(), g)
        .expect("DFTL's defaults")
        .cmt_entries;
    (
        dftl::default_gc_free_blocks(g, cmt),
        dftl::min_gc_free_blocks(g, cmt),
    )
}

fn engine(g: &Geometry) -> (u32, u32) {
    use atomic_write::engine::{default_gc_free_blocks, min_gc_free_blocks};
    (default_gc_free_blocks(g), min_gc_free_blocks(g))
}

fn txflash(g: &Geometry) -> (u32, u32) {
    (
        txflash::default_gc_free_blocks(g),
        txflash::min_gc_free_blocks(g),
    )
}

fn device() -> DeviceConfig {
    DeviceConfig::preset("small").expect("small preset")
}

fn build(design: &str, mark: Option<u32>) -> Result<Box<dyn BlockDevice>, FtlError> {
    let spec = lab::registry::find(design).expect("a design");
    lab::device::fresh(&spec, &device(), &options(mark), true)
}

fn options(mark: Option<u32>) -> DesignOptions {
    match mark {
        Some(m) => DesignOptions::default().with("gc_free_blocks", m),
        None => DesignOptions::default(),
    }
}

/// A 90 % sequential fill, then as many seeded random single-page writes as the device has
/// logical pages; the flash's counters after it.
fn run(dev: &mut dyn BlockDevice) -> flash::FlashStats {
    let logical = dev.logical_pages();
    let mut at = 0;
    for lpn in 0..logical * 9 / 10 {
        at = write1(dev, lpn, 0, at);
    }
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(66);
    for n in 1..=logical as u64 {
        at = write1(dev, rng.random_range(0..logical), n, at);
    }
    dev.flash().stats().clone()
}

/// Write number `n` of page `lpn`, arriving `at`: its acknowledgement.
fn write1(dev: &mut dyn BlockDevice, lpn: u32, n: u64, at: u64) -> u64 {
    let page = Content::Tag(ContentTag { lpn, write: n });
    dev.write(Lpn(lpn), &[page], at).expect("a write").ack_ns
}

#[test]
fn the_default_mark_given_builds_the_same_device_and_runs_the_same() {
    let g = device().geometry;
    for (design, marks) in DESIGNS {
        let (own, _) = marks(&g);
        let mut implicit = build(design, None).expect("defaults");
        let mut given = build(design, Some(own)).expect("its own mark given");
        assert_eq!(implicit.logical_pages(), given.logical_pages(), "{design}");
        assert_eq!(run(&mut *implicit), run(&mut *given), "{design}");
    }
}

/// Sequential writes over the first `range` logical pages, round and round, until GC erases a
/// victim: how many writes that took.
fn writes_before_gc(dev: &mut dyn BlockDevice, range: u32) -> u64 {
    let gc_erases = |dev: &dyn BlockDevice| dev.flash().stats().erases[OpCause::GcCopy as usize];
    let before = gc_erases(dev);
    let mut at = 0;
    for n in 0..8 * dev.flash().geometry().pages() as u64 {
        at = write1(dev, (n % range as u64) as u32, n, at);
        if gc_erases(dev) > before {
            return n;
        }
    }
    panic!("GC never erased a victim");
}

#[test]
fn a_larger_mark_keeps_more_blocks_back_and_collects_earlier() {
    let g = device().geometry;
    for (design, marks) in DESIGNS {
        let (own, _) = marks(&g);
        let mut base = build(design, None).expect("defaults");
        let mut raised = build(design, Some(2 * own)).expect("twice its mark");
        let range = raised.logical_pages();
        assert!(range <= base.logical_pages(), "{design}");
        let (b, r) = (
            writes_before_gc(&mut *base, range),
            writes_before_gc(&mut *raised, range),
        );
        assert!(r < b, "{design}: GC first erased after {r} writes at twice its mark of {own} blocks, after {b} at it");
    }
}

#[test]
fn a_mark_below_the_floor_is_refused_and_the_floor_runs() {
    let g = device().geometry;
    for (design, marks) in DESIGNS {
        let (own, floor) = marks(&g);
        assert!(floor <= own, "{design}: floor {floor}, default {own}");
        match build(design, Some(floor - 1)) {
            Err(FtlError::InvalidOption(m)) => assert!(m.contains("gc_free_blocks"), "{m}"),
            Err(e) => panic!("{design}: {e}"),
            Ok(_) => panic!("{design} took gc_free_blocks={}", floor - 1),
        }
        let mut low = build(design, Some(floor)).expect("its floor");
        run(&mut *low);
        low.check_invariants().expect("invariants at the floor");
    }
}

#[test]
fn recovery_keeps_the_mark_it_is_given() {
    for (design, marks) in DESIGNS {
        let (own, _) = marks(&device().geometry);
        let spec = lab::registry::find(design).expect("a design");
        let o = options(Some(2 * own));
        let mut dev = lab::device::fresh(&spec, &device(), &o, true).expect("format");
        run(&mut *dev);
        let logical = dev.logical_pages();
        let (back, _) = lab::device::cut_and_recover(&spec, dev, &o).expect("recovery");
        assert_eq!(back.logical_pages(), logical, "{design}");
        back.check_invariants().expect("invariants after recovery");
    }
}
