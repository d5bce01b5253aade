//! The NBD crash campaign's requests: a seeded stream of what NBD clients send an export.
//!
//! Offsets and lengths are 512-byte aligned (NBD's rule), not page aligned, so many writes
//! cover part of a page and the host layer reads that page and writes it back whole inside the
//! same request. The mix, per request:
//!
//! - page-aligned writes of 1–4 pages (PostgreSQL's 8 KiB and InnoDB's 16 KiB pages);
//! - sector-aligned writes of 1 sector to 3 pages, at random or right after the previous
//!   write (a log appending in sectors, whose appends share pages);
//! - large writes, up to the largest request the export takes; with atomic requests, now and
//!   then one page more, which must be refused and leave nothing behind;
//! - WRITE_ZEROES (split by the host into pieces of at most a transaction), TRIM, FLUSH, READ;
//! - FUA on one write in five.
//!
//! Half the addresses fall in a hot window of 16 pages, so requests overwrite each other's
//! pages. Gaps between arrivals are 0 (a burst: the next request arrives before the last one
//! is acknowledged), a few microseconds, or up to 2 ms (the device idles and runs GC).

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::sectors::SECTOR_BYTES;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    Write { offset: u64, len: u64, fua: bool },
    Zeroes { offset: u64, len: u64, fua: bool },
    Trim { offset: u64, len: u64 },
    Flush,
    Read { offset: u64, len: u64 },
}

/// A request and the simulated time since the previous one arrived.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Timed {
    pub gap_ns: u64,
    pub request: Request,
}

/// What the stream is drawn for.
#[derive(Clone, Copy, Debug)]
pub struct Export {
    pub capacity_bytes: u64,
    pub page_bytes: u64,
    /// The largest write the export takes whole (with atomic requests, the transaction limit).
    pub max_write_bytes: u64,
    /// Draw writes one page over [`Export::max_write_bytes`] (atomic requests: refused).
    pub oversize: bool,
}

/// The largest "large write" drawn, in pages, whatever the export takes.
const LARGE_PAGES_CAP: u64 = 256;

/// Pages of the hot window.
const HOT_PAGES: u64 = 16;

struct Draw<'a> {
    export: &'a Export,
    rng: ChaCha8Rng,
    hot_first_sector: u64,
    /// Where the previous write ended (sectors).
    last_end: u64,
}

impl Draw<'_> {
    fn sectors(&self) -> u64 {
        self.export.capacity_bytes / SECTOR_BYTES
    }

    fn sectors_per_page(&self) -> u64 {
        self.export.page_bytes / SECTOR_BYTES
    }

    fn max_pages(&self) -> u64 {
        (self.export.max_write_bytes / self.export.page_bytes).max(1)
    }

    /// A first sector for `len` sectors: in the hot window half the time, page-aligned when
    /// `aligned`; the range always fits.
    fn place(&mut self, len: u64, aligned: bool) -> u64 {
        let spp = self.sectors_per_page();
        let room = self.sectors() - len;
        let at = if self.rng.random_bool(0.5) {
            self.hot_first_sector + self.rng.random_range(0..HOT_PAGES * spp)
        } else {
            self.rng.random_range(0..=room)
        };
        let at = at.min(room);
        if aligned {
            at / spp * spp
        } else {
            at
        }
    }

    fn write(&mut self, first: u64, len: u64) -> Request {
        self.last_end = first + len;
        Request::Write {
            offset: first * SECTOR_BYTES,
            len: len * SECTOR_BYTES,
            fua: self.rng.random_range(0..5) == 0,
        }
    }

    fn next(&mut self) -> Request {
        let spp = self.sectors_per_page();
        let max_pages = self.max_pages().min(LARGE_PAGES_CAP);
        match self.rng.random_range(0..100) {
            0..30 => {
                let len = self.rng.random_range(1..=4u64.min(max_pages)) * spp;
                let first = self.place(len, true);
                self.write(first, len)
            }
            30..45 => {
                let len = self
                    .rng
                    .random_range(1..=(3 * spp).min(max_pages * spp - spp + 1));
                let first = self.place(len, false);
                self.write(first, len)
            }
            45..55 => {
                let len = self.rng.random_range(1..=spp);
                let first = self.last_end.min(self.sectors() - len);
                self.write(first, len)
            }
            55..62 => {
                let pages = self.rng.random_range(max_pages.div_ceil(2)..=max_pages);
                // A sector-aligned start spans one page more than the length: keep it within.
                let (len, aligned) = if pages > 1 && self.rng.random_bool(0.5) {
                    ((pages - 1) * spp, false)
                } else {
                    (pages * spp, true)
                };
                let first = self.place(len, aligned);
                self.write(first, len)
            }
            62..64 if self.export.oversize => {
                let len = (self.max_pages() + 1) * spp;
                let first = self.place(len.min(self.sectors()), true);
                self.write(first, len.min(self.sectors() - first))
            }
            62..70 => {
                let len = self
                    .rng
                    .random_range(1..=(3 * self.max_pages() * spp).min(self.sectors() / 8));
                let aligned = self.rng.random_bool(0.5);
                let first = self.place(len, aligned);
                Request::Zeroes {
                    offset: first * SECTOR_BYTES,
                    len: len * SECTOR_BYTES,
                    fua: self.rng.random_range(0..5) == 0,
                }
            }
            70..76 => {
                let len = self.rng.random_range(1..=8 * spp);
                let aligned = self.rng.random_bool(0.5);
                let first = self.place(len, aligned);
                Request::Trim {
                    offset: first * SECTOR_BYTES,
                    len: len * SECTOR_BYTES,
                }
            }
            76..86 => Request::Flush,
            _ => {
                let len = self.rng.random_range(1..=4 * spp);
                let first = self.place(len, false);
                Request::Read {
                    offset: first * SECTOR_BYTES,
                    len: len * SECTOR_BYTES,
                }
            }
        }
    }

    fn gap_ns(&mut self) -> u64 {
        match self.rng.random_range(0..10) {
            0..4 => 0,
            4..8 => self.rng.random_range(0..30_000),
            _ => self.rng.random_range(0..2_000_000),
        }
    }
}

/// `n` requests for `export`, the same for the same seed.
pub fn generate(export: &Export, n: u64, seed: u64) -> Vec<Timed> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x0b1c_5ec7);
    let spp = export.page_bytes / SECTOR_BYTES;
    let pages = export.capacity_bytes / export.page_bytes;
    let hot_page = rng.random_range(0..pages.saturating_sub(HOT_PAGES).max(1));
    let mut draw = Draw {
        export,
        rng,
        hot_first_sector: hot_page * spp,
        last_end: 0,
    };
    (0..n)
        .map(|_| {
            let gap_ns = draw.gap_ns();
            Timed {
                gap_ns,
                request: draw.next(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn export() -> Export {
        Export {
            capacity_bytes: 16 << 20,
            page_bytes: 4096,
            max_write_bytes: 64 * 4096,
            oversize: true,
        }
    }

    #[test]
    fn the_stream_is_seeded_in_range_aligned_and_mixed() {
        let e = export();
        let a = generate(&e, 3000, 5);
        assert_eq!(a, generate(&e, 3000, 5));
        assert_ne!(a, generate(&e, 3000, 6));
        let mut kinds = std::collections::BTreeSet::new();
        let (mut sub_page, mut oversize, mut bursts) = (0, 0, 0);
        for t in &a {
            bursts += (t.gap_ns == 0) as u32;
            let (offset, len) = match t.request {
                Request::Write { offset, len, .. } => {
                    kinds.insert("write");
                    sub_page += (offset % e.page_bytes != 0 || len % e.page_bytes != 0) as u32;
                    oversize += (len > e.max_write_bytes) as u32;
                    (offset, len)
                }
                Request::Zeroes { offset, len, .. } => {
                    kinds.insert("zeroes");
                    (offset, len)
                }
                Request::Trim { offset, len } => {
                    kinds.insert("trim");
                    (offset, len)
                }
                Request::Read { offset, len } => {
                    kinds.insert("read");
                    (offset, len)
                }
                Request::Flush => {
                    kinds.insert("flush");
                    continue;
                }
            };
            assert!(len > 0 && offset % SECTOR_BYTES == 0 && len % SECTOR_BYTES == 0);
            assert!(offset + len <= e.capacity_bytes, "{t:?}");
        }
        assert_eq!(kinds.len(), 5);
        assert!(
            sub_page > 300 && oversize > 10 && bursts > 600,
            "{sub_page} {oversize} {bursts}"
        );
    }
}
