use super::*;
use crate::error::errno;
use flash::{DeviceConfig, Flash};
use ftl::{Completion, DesignOptions, FtlError, Promise};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// A full-data (or tag-only) in-memory design on the `small` preset.
fn device(spec: ftl::DesignSpec, full_data: bool) -> Box<dyn BlockDevice> {
    device_of_blocks(spec, full_data, None)
}

fn device_of_blocks(
    spec: ftl::DesignSpec,
    full_data: bool,
    blocks_per_chip: Option<u32>,
) -> Box<dyn BlockDevice> {
    let mut config = DeviceConfig::preset("small").unwrap();
    if let Some(blocks) = blocks_per_chip {
        config.geometry.blocks_per_chip = blocks;
    }
    let oob = (spec.oob_record_bytes)(&config.geometry).min(config.geometry.oob_bytes);
    let flash = Flash::in_memory(config, oob, !full_data);
    spec.build(flash, &DesignOptions::default()).unwrap()
}

fn dftl_host() -> Host {
    Host::new(device(dftl::spec(), true), 0)
}

/// A design wrapped to change one behaviour: no trim, an invariant that breaks, or a logical
/// page whose reads fail ECC (lost to the media).
struct Wrapped {
    inner: Box<dyn BlockDevice>,
    trim: bool,
    invariant_breaks_after_writes: Option<u64>,
    writes: u64,
    lost: Option<u32>,
}

impl Wrapped {
    fn new(inner: Box<dyn BlockDevice>) -> Wrapped {
        Wrapped {
            inner,
            trim: true,
            invariant_breaks_after_writes: None,
            writes: 0,
            lost: None,
        }
    }
}

impl BlockDevice for Wrapped {
    fn design(&self) -> &'static str {
        "wrapped"
    }
    fn promise(&self) -> Promise {
        self.inner.promise()
    }
    fn logical_pages(&self) -> u32 {
        self.inner.logical_pages()
    }
    fn write(&mut self, start: Lpn, pages: &[Content], at: u64) -> Result<Completion, FtlError> {
        self.writes += 1;
        self.inner.write(start, pages, at)
    }
    fn read(
        &mut self,
        start: Lpn,
        count: u32,
        at: u64,
        out: &mut Vec<PageOutcome>,
    ) -> Result<Completion, FtlError> {
        let done = self.inner.read(start, count, at, out)?;
        if let Some(lost) = self.lost.filter(|l| (start.0..start.0 + count).contains(l)) {
            out[(lost - start.0) as usize] = PageOutcome::Uncorrectable;
        }
        Ok(done)
    }
    fn flush(&mut self, at: u64) -> Result<Completion, FtlError> {
        self.inner.flush(at)
    }
    fn trim(&mut self, start: Lpn, count: u32, at: u64) -> Result<Completion, FtlError> {
        if !self.trim {
            return Err(FtlError::Unsupported("trim"));
        }
        self.inner.trim(start, count, at)
    }
    fn flash(&self) -> &Flash {
        self.inner.flash()
    }
    fn flash_mut(&mut self) -> &mut Flash {
        self.inner.flash_mut()
    }
    fn into_flash(self: Box<Self>) -> Flash {
        self.inner.into_flash()
    }
    fn check_invariants(&self) -> Result<(), ftl::InvariantViolation> {
        match self.invariant_breaks_after_writes {
            Some(n) if self.writes >= n => Err(ftl::violation!("broken after {n} writes")),
            _ => self.inner.check_invariants(),
        }
    }
}

#[test]
fn byte_requests_match_a_byte_model_at_any_alignment() {
    let mut host = dftl_host();
    // A 2 MiB window keeps overwrites frequent.
    let window = 2u64 << 20;
    let mut model = vec![0u8; window as usize];
    let mut rng = ChaCha8Rng::seed_from_u64(20);
    for step in 0..3000u64 {
        let offset = rng.random_range(0..window - 1);
        let len = rng.random_range(1..=(window - offset).min(40_000));
        match rng.random_range(0..10) {
            0..=4 => {
                let data: Vec<u8> = (0..len).map(|_| rng.random()).collect();
                host.write(offset, &data, rng.random_bool(0.1), step)
                    .unwrap();
                model[offset as usize..(offset + len) as usize].copy_from_slice(&data);
            }
            5 => {
                host.write_zeroes(offset, len, false, step).unwrap();
                model[offset as usize..(offset + len) as usize].fill(0);
            }
            6 => {
                // Trim drops whole pages only; the model forgets them too.
                host.trim(offset, len, step).unwrap();
                let pb = host.page_bytes();
                let (first, end) = (offset.div_ceil(pb) * pb, (offset + len) / pb * pb);
                if end > first {
                    model[first as usize..end as usize].fill(0);
                }
            }
            _ => {
                let mut buf = vec![0xeeu8; len as usize];
                host.read(offset, &mut buf, step).unwrap();
                assert!(
                    buf == model[offset as usize..(offset + len) as usize],
                    "step {step}: read of {len} bytes at {offset} differs from the model"
                );
            }
        }
    }
}

#[test]
fn a_sub_page_write_reads_each_edge_page_once() {
    let mut host = dftl_host();
    let pb = host.page_bytes();
    host.write(100, &[1u8; 200], false, 0).unwrap();
    assert_eq!(host.stats().edge_reads, 1, "inside one page: one edge read");
    host.write(pb - 512, &vec![2u8; pb as usize], false, 0)
        .unwrap();
    assert_eq!(
        host.stats().edge_reads,
        3,
        "straddling two pages: both edges"
    );
    host.write(pb, &vec![3u8; 2 * pb as usize], false, 0)
        .unwrap();
    assert_eq!(host.stats().edge_reads, 3, "aligned: no edge read");
    assert_eq!(host.stats().pages_written, 1 + 2 + 2);
    assert_eq!(host.stats().pages_read, 3);
}

#[test]
fn long_write_zeroes_is_split_and_keeps_its_edges() {
    let mut host = Host::new(device_of_blocks(dftl::spec(), true, Some(128)), 0);
    let size = host.capacity_bytes();
    let pb = host.page_bytes();
    assert!(
        size > 3 * SPLIT_PAGES * pb,
        "device of {size} bytes too small"
    );
    host.write(0, &vec![0xa5u8; 8192], false, 0).unwrap();
    host.write(size - 8192, &vec![0xa5u8; 8192], false, 0)
        .unwrap();
    let writes_before = host.stats().pages_written;
    host.write_zeroes(512, size - 1024, true, 0).unwrap();
    assert_eq!(host.stats().pages_written - writes_before, size / pb);
    let mut edge = [0u8; 1024];
    host.read(0, &mut edge, 0).unwrap();
    assert!(edge[..512].iter().all(|&b| b == 0xa5) && edge[512..].iter().all(|&b| b == 0));
    host.read(size - 1024, &mut edge, 0).unwrap();
    assert!(edge[..512].iter().all(|&b| b == 0) && edge[512..].iter().all(|&b| b == 0xa5));
}

/// A WRITE_ZEROES in pieces whose tail page the media lost is refused whole: no piece is
/// written (before, the pieces ahead of the last were, and the request still failed).
#[test]
fn write_zeroes_whose_tail_page_is_lost_writes_no_piece() {
    let mut wrapped = Wrapped::new(device_of_blocks(dftl::spec(), true, Some(128)));
    let pb = 4096;
    let len = (SPLIT_PAGES + 2) * pb + 512;
    wrapped.lost = Some((len / pb) as u32);
    let mut host = Host::new(Box::new(wrapped) as Box<dyn BlockDevice>, 0);
    assert!(host.zeroes_pieces(0, len).unwrap().len() > 1);
    host.write(0, &vec![0xa5u8; 8192], false, 0).unwrap();
    let writes_before = host.stats().pages_written;
    let e = host.write_zeroes(0, len, false, 10).unwrap_err();
    assert_eq!(
        e,
        HostError::Uncorrectable {
            lpn: Lpn((len / pb) as u32)
        }
    );
    assert_eq!(
        host.stats().pages_written,
        writes_before,
        "no piece written"
    );
    let mut buf = [0u8; 8192];
    host.read(0, &mut buf, 20).unwrap();
    assert!(
        buf.iter().all(|&b| b == 0xa5),
        "the first piece's pages untouched"
    );
    // Without the loss the same request zeroes every page, its tail read once.
    let mut host = Host::new(device_of_blocks(dftl::spec(), true, Some(128)), 0);
    host.write(0, &vec![0xa5u8; 8192], false, 0).unwrap();
    let edges = host.stats().edge_reads;
    host.write_zeroes(0, len, false, 10).unwrap();
    assert_eq!(host.stats().edge_reads - edges, 1);
    host.read(0, &mut buf, 20).unwrap();
    assert!(buf.iter().all(|&b| b == 0));
}

#[test]
fn a_design_without_trim_ignores_it_and_keeps_the_data() {
    let mut wrapped = Wrapped::new(device(dftl::spec(), true));
    wrapped.trim = false;
    let mut host = Host::new(Box::new(wrapped) as Box<dyn BlockDevice>, 0);
    host.write(0, &[7u8; 8192], false, 0).unwrap();
    host.trim(0, 8192, 10).unwrap();
    assert_eq!(host.stats().trims_ignored, 1);
    let mut buf = [0u8; 8192];
    host.read(0, &mut buf, 20).unwrap();
    assert!(buf.iter().all(|&b| b == 7));
}

#[test]
fn out_of_range_and_overflowing_requests_are_typed_errors() {
    let mut host = dftl_host();
    let size = host.capacity_bytes();
    let past = host.write(size - 512, &[0u8; 1024], false, 0).unwrap_err();
    assert!(matches!(past, HostError::OutOfRange { .. }), "{past}");
    assert_eq!(past.errno(), errno::EINVAL);
    let wraps = host.trim(u64::MAX - 10, 100, 0).unwrap_err();
    assert!(matches!(wraps, HostError::OutOfRange { .. }), "{wraps}");
    let mut buf = [0u8; 512];
    assert!(host.read(size, &mut buf, 0).is_err());
    // Nothing was written by the refused requests.
    assert_eq!(host.stats().pages_written, 0);
}

#[test]
fn errno_and_fatality_follow_the_error() {
    let cases: Vec<(HostError, i32, bool)> = vec![
        (FtlError::NoSpace.into(), errno::ENOSPC, true),
        (FtlError::Corrupt("x".into()).into(), errno::EIO, true),
        (FtlError::EmptyRequest.into(), errno::EINVAL, false),
        // No room beside the transactions in flight: refused, the device goes on.
        (
            FtlError::TxRoomTaken {
                pages: 2,
                in_flight: 248,
                room: 248,
            }
            .into(),
            errno::EINVAL,
            false,
        ),
        (
            HostError::TooLarge { pages: 9, max: 8 },
            errno::EOVERFLOW,
            false,
        ),
        (HostError::Uncorrectable { lpn: Lpn(3) }, errno::EIO, false),
        (HostError::Failed { reason: "x".into() }, errno::EIO, true),
        (
            HostError::Invariant {
                design: "d",
                reason: "x".into(),
            },
            errno::EIO,
            true,
        ),
    ];
    for (e, want_errno, want_fatal) in cases {
        assert_eq!(e.errno(), want_errno, "{e}");
        assert_eq!(e.is_fatal(), want_fatal, "{e}");
    }
}

#[test]
fn calls_never_go_back_in_time() {
    let mut host = dftl_host();
    let ack = host.write(0, &[1u8; 4096], false, 1_000_000).unwrap();
    assert!(ack >= 1_000_000);
    // Arriving "before" the last call: issued at it, and the design never sees time go back.
    let ack2 = host.write(4096, &[1u8; 4096], false, 5).unwrap();
    assert!(ack2 >= 1_000_000);
    assert!(host.clock_ns() >= 1_000_000);
}

#[test]
fn check_mode_reports_a_broken_invariant_and_plain_mode_does_not() {
    for checked in [false, true] {
        let mut wrapped = Wrapped::new(device(dftl::spec(), true));
        wrapped.invariant_breaks_after_writes = Some(3);
        let mut host = Host::new(Box::new(wrapped) as Box<dyn BlockDevice>, 0).checked(checked);
        let results: Vec<_> = (0..5u64)
            .map(|i| host.write(i * 4096, &[1u8; 4096], false, i))
            .collect();
        let failed = results.iter().filter(|r| r.is_err()).count();
        if checked {
            assert_eq!(failed, 3, "writes 3, 4 and 5 follow the break");
            assert!(matches!(results[2], Err(HostError::Invariant { .. })));
        } else {
            assert_eq!(failed, 0);
        }
    }
}

#[test]
fn tag_only_writes_number_their_tags_and_still_read_edges() {
    let mut host = Host::new(device(dftl::spec(), false), 0).tag_only();
    host.write_tags(1024, 8192, false, 0).unwrap();
    assert_eq!(host.stats().pages_written, 3);
    assert_eq!(host.stats().edge_reads, 2);
    let mut out = Vec::new();
    host.read_pages(Lpn(0), 3, 10, &mut out).unwrap();
    let tags: Vec<_> = out
        .iter()
        .map(|o| match o {
            PageOutcome::Data(c) => c.tag().unwrap(),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        tags.iter().map(|t| (t.lpn, t.write)).collect::<Vec<_>>(),
        vec![(0, 1), (1, 2), (2, 3)]
    );
}

#[test]
fn atomic_writes_need_transactions_and_bound_their_size() {
    let refused = dftl_host().with_atomic_writes(64, 1).err().unwrap();
    assert!(
        matches!(refused, HostError::NoTransactions { .. }),
        "{refused}"
    );
    let mut host = Host::new(device(mftl::spec(), true), 0)
        .with_atomic_writes(4, 1)
        .unwrap();
    assert_eq!(host.atomic_max_pages(), Some(4));
    let pb = host.page_bytes() as usize;
    host.write(0, &vec![9u8; 4 * pb], false, 0).unwrap();
    assert_eq!(host.stats().swrites, 1);
    let big = host.write(0, &vec![9u8; 5 * pb], false, 0).unwrap_err();
    assert!(
        matches!(big, HostError::TooLarge { pages: 5, max: 4 }),
        "{big}"
    );
    assert_eq!(big.errno(), errno::EOVERFLOW);
    let mut buf = vec![0u8; 4 * pb];
    host.read(0, &mut buf, 0).unwrap();
    assert!(buf.iter().all(|&b| b == 9));
    assert!(host.stats().sreads >= 1, "reads are SREADs on Möbius");
}
