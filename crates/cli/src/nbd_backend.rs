//! Every design as an NBD export: [`nbd::ftl_backend::FtlBackend`] (the host layer behind
//! NBD's interface), tested here on the designs the program builds.

pub use nbd::ftl_backend::FtlBackend;

#[cfg(test)]
mod tests {
    use super::*;
    use flash::{DeviceConfig, Flash, Lpn};
    use ftl::{DesignOptions, PageOutcome};
    use nbd::{BackendError, NbdBackend};

    /// A full-data, in-memory device of 64 MiB raw ("small" with more blocks).
    fn backend(name: &str) -> FtlBackend {
        let mut config = DeviceConfig::preset("small").unwrap();
        config.geometry.blocks_per_chip = 128;
        let design = lab::registry::find(name).unwrap();
        let oob = (design.oob_record_bytes)(&config.geometry).min(config.geometry.oob_bytes);
        let flash = Flash::in_memory(config, oob, false);
        let dev = design
            .build(flash, &DesignOptions::from_pairs(&[]).unwrap())
            .unwrap();
        FtlBackend::new(dev, 0)
    }

    /// A deterministic stream of offsets, lengths and fill bytes.
    fn xorshift(seed: u64) -> impl FnMut() -> u64 {
        let mut x = seed;
        move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        }
    }

    #[test]
    fn write_zeroes_longer_than_a_write_is_split_and_keeps_its_edges() {
        for name in ["dftl", "wcache", "optr"] {
            let mut b = backend(name);
            let size = b.size_bytes();
            assert!(size > 36 << 20, "{name}: device of {size} bytes too small");
            let ones = vec![0xa5u8; 8192];
            b.write(0, &ones, false, 0).unwrap();
            b.write(size - 8192, &ones, false, 0).unwrap();
            // 512 bytes in, unaligned both ends, crossing several chunk boundaries.
            let len = size - 1024;
            b.write_zeroes(512, len, true, 0).unwrap();
            let mut head = vec![0u8; 4096];
            b.read(0, &mut head, 0).unwrap();
            assert_eq!(
                head[..512],
                ones[..512],
                "{name}: head before the range kept"
            );
            assert!(head[512..].iter().all(|x| *x == 0), "{name}: zeroed");
            let mut tail = vec![0u8; 8192];
            b.read(size - 8192, &mut tail, 0).unwrap();
            let cut = 8192 - 512;
            assert!(tail[..cut].iter().all(|x| *x == 0), "{name}: tail zeroed");
            assert_eq!(
                tail[cut..],
                ones[cut..],
                "{name}: bytes after the range kept"
            );
        }
    }

    /// Unaligned and aligned writes of every size, through reused staging pages, read back
    /// exactly as a byte array model says (no byte of an earlier request leaks into a later one).
    #[test]
    fn sector_aligned_writes_and_reads_match_a_byte_model() {
        for name in ["dftl", "wcache", "optr"] {
            let mut b = backend(name);
            let span = 64 * 4096u64;
            let mut model = vec![0u8; span as usize];
            // xorshift: deterministic offsets, lengths and fill bytes.
            let mut next = xorshift(0x9e37_79b9_7f4a_7c15);
            for round in 0..400u64 {
                let sectors = span / 512;
                let first = next() % sectors;
                let count = 1 + next() % (sectors - first).min(40);
                let (offset, len) = (first * 512, count * 512);
                let byte = (round % 251) as u8 + 1;
                let data: Vec<u8> = (0..len).map(|i| byte ^ (i % 7) as u8).collect();
                b.write(offset, &data, round % 5 == 0, 0).unwrap();
                model[offset as usize..(offset + len) as usize].copy_from_slice(&data);
                let first = next() % sectors;
                let count = 1 + next() % (sectors - first).min(40);
                let (offset, len) = (first * 512, count * 512);
                let mut got = vec![0xeeu8; len as usize];
                b.read(offset, &mut got, 0).unwrap();
                assert_eq!(
                    got,
                    model[offset as usize..(offset + len) as usize],
                    "{name}: read of {len} bytes at {offset} after round {round}"
                );
            }
        }
    }

    /// Byte-granular requests (an NBD_OPT_EXPORT_NAME client's unaligned ones, issue 68) go
    /// through the host's read-modify-write: every byte reads back as a byte model says,
    /// and the bytes around each write keep their data.
    #[test]
    fn unaligned_byte_writes_and_reads_match_a_byte_model() {
        for name in ["dftl", "wcache", "optr", "mobius"] {
            let mut b = backend(name);
            let span = 16 * 4096u64;
            let mut model = vec![0u8; span as usize];
            let mut next = xorshift(0x2545_f491_4f6c_dd1d);
            for round in 0..300u64 {
                let offset = next() % (span - 1);
                let len = 1 + next() % (span - offset).min(9000);
                let data: Vec<u8> = (0..len).map(|i| (round as u8) ^ (i % 13) as u8).collect();
                match round % 4 {
                    3 => {
                        b.write_zeroes(offset, len, false, 0).unwrap();
                        model[offset as usize..(offset + len) as usize].fill(0);
                    }
                    _ => {
                        b.write(offset, &data, round % 7 == 0, 0).unwrap();
                        model[offset as usize..(offset + len) as usize].copy_from_slice(&data);
                    }
                }
                let offset = next() % (span - 1);
                let len = 1 + next() % (span - offset).min(9000);
                let mut got = vec![0xeeu8; len as usize];
                b.read(offset, &mut got, 0).unwrap();
                assert!(
                    got == model[offset as usize..(offset + len) as usize],
                    "{name}: read of {len} bytes at {offset} after round {round}"
                );
            }
        }
    }

    #[test]
    fn multi_conn_is_advertised_unless_the_promise_is_about_order() {
        for (name, safe) in [
            ("dftl", true),
            ("wcache", true),
            ("mobius", true),
            ("optr", false),
        ] {
            assert_eq!(backend(name).multi_conn_safe(), safe, "{name}");
        }
    }

    #[test]
    fn trim_of_the_whole_device_is_served() {
        let mut b = backend("dftl");
        let size = b.size_bytes();
        b.write(4096, &[3u8; 4096], false, 0).unwrap();
        b.trim(0, size, 0).unwrap();
        let mut page = vec![1u8; 4096];
        b.read(4096, &mut page, 0).unwrap();
        assert!(page.iter().all(|x| *x == 0));
    }

    /// Writes `requests` 8-page requests (each over the same 8 pages, filled with its own byte)
    /// with the flash recording, then cuts power at every operation boundary and inside every
    /// operation (torn), recovers Möbius and returns how many images held a torn request.
    fn torn_requests(atomic: bool) -> (usize, usize) {
        let mut b = backend("mobius");
        if atomic {
            b = b.with_atomic_requests().unwrap();
        }
        let base = b.device_mut().flash_mut().start_recording();
        let config = b.device_mut().flash().config().clone();
        for r in 1..=12u8 {
            let data = vec![r; 8 * 4096];
            b.write(8 * 4096 * 3, &data, false, 0).unwrap();
        }
        let mut dev = b.into_device();
        let log = dev.flash_mut().take_log().unwrap();
        let mut instants: Vec<u64> = log
            .ops
            .iter()
            .flat_map(|o| [o.span.end_ns, (o.span.start_ns + o.span.end_ns) / 2])
            .collect();
        instants.sort_unstable();
        instants.dedup();
        let design = lab::registry::find("mobius").unwrap();
        let mut torn = 0;
        for &at in &instants {
            let mut flash = Flash::new(config.clone(), log.image_at(base.as_ref(), at, true));
            flash.start_clock_at(at);
            let (mut dev, _) = design.reopen(flash, &DesignOptions::default()).unwrap();
            let mut out = Vec::new();
            dev.read(Lpn(24), 8, at, &mut out).unwrap();
            let firsts: Vec<u8> = out
                .iter()
                .map(|p| match p {
                    PageOutcome::Data(c) => c.to_page_bytes(4096)[0],
                    _ => 0,
                })
                .collect();
            if firsts.iter().any(|&f| f != firsts[0]) {
                torn += 1;
            }
        }
        (torn, instants.len())
    }

    #[test]
    fn atomic_requests_are_never_torn_by_a_power_cut() {
        let (torn, cuts) = torn_requests(true);
        assert!(cuts > 50, "only {cuts} instants");
        assert_eq!(torn, 0, "{torn} of {cuts} images hold part of a request");
    }

    #[test]
    fn without_atomic_requests_a_multi_page_write_can_tear() {
        // Negative control: the same requests as plain writes are caught torn.
        let (torn, cuts) = torn_requests(false);
        assert!(
            torn > 0,
            "no torn request in {cuts} images: the check cannot fail"
        );
    }

    #[test]
    fn atomic_requests_refuse_what_they_cannot_keep_atomic() {
        for name in ["dftl", "wcache", "optr"] {
            assert!(backend(name).with_atomic_requests().is_err(), "{name}");
        }
        let mut b = backend("atomic-write").with_atomic_requests().unwrap();
        let max = b.max_payload_bytes() as usize;
        assert!((4096..32 << 20).contains(&max), "{max}");
        assert!(b.write(0, &vec![1u8; max], true, 0).is_ok());
        let err = b.write(0, &vec![1u8; max + 4096], false, 0).unwrap_err();
        assert!(matches!(err, BackendError::TooLarge(_)), "{err}");
        assert_eq!(err.errno(), nbd::protocol::Errno::Overflow);
        // WRITE_ZEROES longer than the maximum is split into pieces that fit.
        b.write_zeroes(0, (3 * max) as u64, true, 0).unwrap();
    }

    #[test]
    fn atomic_requests_read_back_what_was_written() {
        for name in [
            "atomic-write",
            "lighttx",
            "txflash-tc",
            "txflash-scc",
            "mobius",
        ] {
            let mut b = backend(name).with_atomic_requests().unwrap();
            let mut model = vec![0u8; 64 * 4096];
            let writes: [(usize, usize); 6] = [
                (0, 4096),
                (1024, 1024),
                (8192, 65536),
                (3584, 1536),
                (20992, 8192),
                (512, 512),
            ];
            for (k, (off, len)) in writes.into_iter().enumerate() {
                let data: Vec<u8> = (0..len).map(|i| (i * 7 + k * 13 + 1) as u8).collect();
                b.write(off as u64, &data, false, 0).unwrap();
                model[off..off + len].copy_from_slice(&data);
                let mut back = vec![0u8; model.len()];
                b.read(0, &mut back, 0).unwrap();
                let bad = back.iter().zip(&model).position(|(a, m)| a != m);
                assert_eq!(
                    bad, None,
                    "{name}: after write {k} ({off}, {len}) first wrong byte"
                );
            }
        }
    }
}
