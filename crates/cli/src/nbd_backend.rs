//! [`FtlBackend`]: any design as an NBD export.
//!
//! Each NBD request becomes exactly one host request to the FTL (issue #7), so a design's request
//! atomicity (OPTR) is NBD request atomicity. Requests are 512-byte aligned, not page aligned: a
//! write that covers part of a page reads the page first and writes it back whole, still as one
//! request. FLUSH is the FTL's flush; FUA is the write followed by a flush.
//!
//! With [`FtlBackend::with_atomic_requests`] (`mobius serve --atomic-requests`), each WRITE up
//! to the advertised maximum is one static transaction (SWRITE, synchronous): a power cut never
//! leaves part of a request on the device, so software that writes pages larger than a flash
//! page (PostgreSQL's 8 KiB, InnoDB's 16 KiB) may stop writing them twice (docs/nbd.md).

use flash::{Content, Lpn};
use ftl::{BlockDevice, FtlError, PageOutcome, Promise, SwriteMode, TxUuid, ACK_DEFERRED};
use nbd::{BackendError, NbdBackend};

/// Pages per FTL trim request when a discard is split.
const TRIM_CHUNK_PAGES: u64 = 1024;
/// Pages per FTL write request when a WRITE_ZEROES is split.
const ZERO_CHUNK_PAGES: u64 = 1024;
/// Staging pages kept between write requests (1 MiB of 4 KiB pages; bigger requests allocate).
const STAGING_KEEP_PAGES: usize = 256;

pub struct FtlBackend {
    dev: Box<dyn BlockDevice>,
    page_bytes: u64,
    last_arrival_ns: u64,
    pages: Vec<PageOutcome>,
    /// Page buffers a write request is staged in, reused from request to request (a fresh
    /// allocation per page costs more than the copy into it).
    staging: Vec<Content>,
    /// With atomic requests: every write is one SWRITE.
    atomic: Option<AtomicRequests>,
}

/// State of `--atomic-requests`.
struct AtomicRequests {
    /// Largest request in pages: the design's `max_tx_pages` within NBD's 32 MiB.
    max_pages: u64,
    /// Reads are SREADs (Möbius): a read is served after every transaction that arrived
    /// before it committed, so a client never reads around its own acknowledged write.
    sread: bool,
    /// Transaction ids start at the wall clock's nanoseconds when the server starts, so a
    /// server restarted on the same image (after a power cut) never reuses one: a design may
    /// still hold a committed id on flash. One id per request, far fewer than one per ns.
    next_uuid: u64,
}

fn backend_error(e: FtlError) -> BackendError {
    match e {
        FtlError::LpnOutOfRange { .. } => BackendError::OutOfRange,
        FtlError::NoSpace => BackendError::NoSpace,
        FtlError::Flash(_) | FtlError::ImageIo(_) | FtlError::Corrupt(_) => {
            BackendError::Io(e.to_string())
        }
        other => BackendError::Invalid(other.to_string()),
    }
}

impl FtlBackend {
    pub fn new(dev: Box<dyn BlockDevice>, start_ns: u64) -> FtlBackend {
        let page_bytes = dev.flash().geometry().page_bytes as u64;
        FtlBackend {
            dev,
            page_bytes,
            last_arrival_ns: start_ns,
            pages: Vec::new(),
            staging: Vec::new(),
            atomic: None,
        }
    }

    /// Applies every write request as one device transaction. Refused for a design without
    /// static transactions (OPTR already applies each request atomically: its promise).
    pub fn with_atomic_requests(mut self) -> Result<FtlBackend, String> {
        let design = self.dev.design();
        let caps = self
            .dev
            .transactional()
            .map(|t| t.capabilities())
            .filter(|c| c.static_tx)
            .ok_or_else(|| {
                format!("--atomic-requests needs device transactions; {design} has none")
            })?;
        let nbd_max = nbd::protocol::BLOCK_SIZE_MAX_BYTES as u64 / self.page_bytes;
        let since_epoch = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64);
        self.atomic = Some(AtomicRequests {
            max_pages: caps.max_tx_pages.min(nbd_max).max(1),
            sread: caps.sread,
            next_uuid: since_epoch.max(1),
        });
        Ok(self)
    }

    pub fn into_device(self) -> Box<dyn BlockDevice> {
        self.dev
    }

    pub fn device_mut(&mut self) -> &mut dyn BlockDevice {
        self.dev.as_mut()
    }

    /// Fail-stop: after an I/O error on the image every request that would change the device
    /// (write, trim, write-zeroes, flush) is refused with EIO, even one a design could take
    /// into its RAM, since it could never be made durable. Reads go on.
    fn writable(&self) -> Result<(), BackendError> {
        match self.dev.flash().failure() {
            Some(reason) => Err(BackendError::Io(format!(
                "the image failed earlier; the device is read-only until restarted ({reason})"
            ))),
            None => Ok(()),
        }
    }

    /// Arrivals handed to the FTL never go back in time.
    fn arrival(&mut self, arrival_ns: u64) -> u64 {
        self.last_arrival_ns = self.last_arrival_ns.max(arrival_ns);
        self.last_arrival_ns
    }

    /// Logical pages covering `[offset, offset + len)`.
    fn span(&self, offset: u64, len: u64) -> Result<(Lpn, u32), BackendError> {
        let end = offset.checked_add(len).ok_or(BackendError::OutOfRange)?;
        if end > self.size_bytes() {
            return Err(BackendError::OutOfRange);
        }
        let first = offset / self.page_bytes;
        let last = end.div_ceil(self.page_bytes);
        Ok((Lpn(first as u32), (last - first) as u32))
    }

    /// Writes the page a read returned into `page` (one page long).
    fn copy_page(outcome: &PageOutcome, page: &mut [u8]) -> Result<(), BackendError> {
        match outcome {
            PageOutcome::Data(c) => c.copy_page_into(page),
            PageOutcome::Unwritten => page.fill(0),
            PageOutcome::Uncorrectable => {
                return Err(BackendError::Io("uncorrectable flash page".into()))
            }
        }
        Ok(())
    }

    /// The staging pages, at least `count` of them, each a whole page of bytes.
    fn take_staging(&mut self, count: usize) -> Vec<Content> {
        let mut staging = std::mem::take(&mut self.staging);
        while staging.len() < count {
            staging.push(Content::Bytes(
                vec![0u8; self.page_bytes as usize].into_boxed_slice(),
            ));
        }
        staging
    }

    fn staged_page(content: &mut Content) -> &mut [u8] {
        match content {
            Content::Bytes(b) => b,
            Content::Tag(_) => unreachable!("staging pages are bytes"),
        }
    }

    /// Writes `data` at byte `offset` as one FTL request, filling partial pages from the device.
    fn write_bytes(
        &mut self,
        offset: u64,
        data: &[u8],
        fua: bool,
        arrival: u64,
    ) -> Result<u64, BackendError> {
        let (start, count) = self.span(offset, data.len() as u64)?;
        if count == 0 {
            return Ok(arrival);
        }
        let mut staging = self.take_staging(count as usize);
        let result = self.stage_and_write(
            start,
            offset,
            data,
            fua,
            arrival,
            &mut staging[..count as usize],
        );
        staging.truncate(STAGING_KEEP_PAGES);
        self.staging = staging;
        result
    }

    /// Fills `staging` (one page per page of the span starting at `start`) and writes it.
    fn stage_and_write(
        &mut self,
        start: Lpn,
        offset: u64,
        data: &[u8],
        fua: bool,
        arrival: u64,
        staging: &mut [Content],
    ) -> Result<u64, BackendError> {
        let count = staging.len() as u32;
        let pb = self.page_bytes as usize;
        let head = (offset % self.page_bytes) as usize;
        if head == 0 && data.len().is_multiple_of(pb) {
            // Whole pages: copied from the payload into the staging pages.
            for (page, chunk) in staging.iter_mut().zip(data.chunks(pb)) {
                Self::staged_page(page).copy_from_slice(chunk);
            }
            return self.write_pages(start, staging, fua, arrival);
        }
        let mut ready = arrival;
        let partial_first = head != 0 || data.len() < pb;
        let partial_last = !(head + data.len()).is_multiple_of(pb);
        if partial_first || partial_last {
            // Read-modify-write of the edge pages (read as part of this request).
            let mut pages = std::mem::take(&mut self.pages);
            for (i, lpn) in [(0usize, start.0), (count as usize - 1, start.0 + count - 1)] {
                if (i == 0 && !partial_first) || (i != 0 && !partial_last) {
                    continue;
                }
                let c = self
                    .read_device(Lpn(lpn), 1, arrival, &mut pages)
                    .map_err(backend_error)?;
                ready = ready.max(c.ack_ns);
                let copied = Self::copy_page(&pages[0], Self::staged_page(&mut staging[i]));
                if let Err(e) = copied {
                    self.pages = pages;
                    return Err(e);
                }
            }
            self.pages = pages;
        }
        // The payload over the pages, from `head` in the first one.
        let mut at = 0usize;
        for (i, page) in staging.iter_mut().enumerate() {
            let page = Self::staged_page(page);
            let from = if i == 0 { head } else { 0 };
            let n = (pb - from).min(data.len() - at);
            page[from..from + n].copy_from_slice(&data[at..at + n]);
            at += n;
        }
        debug_assert_eq!(at, data.len());
        // The write is issued once its edge pages are read.
        self.write_pages(start, staging, fua, ready)
    }

    /// One FTL write request of whole pages at `ready` (the FTL's clock never goes back), then
    /// a flush if `fua`.
    fn write_pages(
        &mut self,
        start: Lpn,
        contents: &[Content],
        fua: bool,
        ready: u64,
    ) -> Result<u64, BackendError> {
        let at = self.arrival(ready);
        if self.atomic.is_some() {
            // A synchronous SWRITE is durable when acknowledged: FUA needs no flush.
            return self.write_atomically(start, contents, at);
        }
        let done = self.dev.write(start, contents, at).map_err(backend_error)?;
        let mut ack = done.ack_ns;
        if fua {
            let at = self.arrival(ack);
            ack = ack.max(self.dev.flush(at).map_err(backend_error)?.ack_ns);
        }
        Ok(ack)
    }
}

impl FtlBackend {
    /// A device read; an SREAD under atomic requests where the design has it. Without it a
    /// read arriving (in simulated time) before an earlier SWRITE committed returns the old
    /// pages on Möbius — the server does not hold replies until their simulated completion
    /// unless `--pace`, so a client's next request can arrive before its write is done.
    fn read_device(
        &mut self,
        start: Lpn,
        count: u32,
        at: u64,
        out: &mut Vec<PageOutcome>,
    ) -> Result<ftl::Completion, FtlError> {
        if self.atomic.as_ref().is_some_and(|a| a.sread) {
            if let Some(tx) = self.dev.transactional() {
                return tx.sread(start, count, at, out);
            }
        }
        self.dev.read(start, count, at, out)
    }

    /// One synchronous SWRITE of the request's pages.
    fn write_atomically(
        &mut self,
        start: Lpn,
        contents: &[Content],
        at: u64,
    ) -> Result<u64, BackendError> {
        let atomic = self.atomic.as_mut().expect("atomic requests on");
        if contents.len() as u64 > atomic.max_pages {
            return Err(BackendError::TooLarge(format!(
                "{} pages in one atomic request; at most {} (the advertised maximum)",
                contents.len(),
                atomic.max_pages
            )));
        }
        let uuid = TxUuid(atomic.next_uuid);
        atomic.next_uuid += 1;
        let pages: Vec<(Lpn, Content)> = contents
            .iter()
            .enumerate()
            .map(|(i, c)| (Lpn(start.0 + i as u32), c.clone()))
            .collect();
        let tx = self.dev.transactional().expect("checked when enabled");
        let mut done = tx
            .swrite(uuid, &pages, SwriteMode::Sync, at)
            .map_err(backend_error)?;
        if done.ack_ns == ACK_DEFERRED {
            // Möbius holds small SWRITEs back to merge them: the reply waits for the group.
            done = tx
                .take_completions(u64::MAX)
                .map_err(backend_error)?
                .into_iter()
                .find(|(u, _)| *u == uuid)
                .map(|(_, c)| c)
                .ok_or_else(|| BackendError::Io(format!("{uuid} was never acknowledged")))?;
        }
        Ok(done.ack_ns)
    }
}

impl NbdBackend for FtlBackend {
    fn size_bytes(&self) -> u64 {
        self.dev.logical_pages() as u64 * self.page_bytes
    }
    fn preferred_block_size(&self) -> u32 {
        self.page_bytes as u32
    }
    fn max_payload_bytes(&self) -> u32 {
        match &self.atomic {
            Some(a) => (a.max_pages * self.page_bytes).min(u32::MAX as u64) as u32,
            None => nbd::protocol::BLOCK_SIZE_MAX_BYTES,
        }
    }
    /// NBD_FLAG_CAN_MULTI_CONN promises that a FLUSH (or FUA) on any connection covers the
    /// writes completed on every connection. Every connection shares this one backend, so that
    /// holds for every design, and a design whose promise is about single writes or flushes
    /// (flush-only, durable writes; transactions are not reachable over NBD, so their plain
    /// writes follow durable-writes) keeps it whichever connection a write came on. An
    /// `ordered` design (OPTR) does not: its prefix semantics follow arrival order, and a
    /// client spreading one stream over connections (nbdfuse does, at random) makes arrival
    /// order differ from the order the file system issued, so the promise would no longer say
    /// anything about the file system's writes.
    fn multi_conn_safe(&self) -> bool {
        self.dev.promise() != Promise::Ordered
    }
    fn read(&mut self, offset: u64, buf: &mut [u8], arrival_ns: u64) -> Result<u64, BackendError> {
        let arrival = self.arrival(arrival_ns);
        let (start, count) = self.span(offset, buf.len() as u64)?;
        if count == 0 {
            return Ok(arrival);
        }
        let mut pages = std::mem::take(&mut self.pages);
        let done = self
            .read_device(start, count, arrival, &mut pages)
            .map_err(backend_error);
        let result = done.and_then(|done| {
            let head = (offset % self.page_bytes) as usize;
            let mut at = 0usize;
            let pb = self.page_bytes as usize;
            let mut edge = Vec::new();
            for (i, p) in pages.iter().enumerate() {
                let from = if i == 0 { head } else { 0 };
                let n = (pb - from).min(buf.len() - at);
                if from == 0 && n == pb {
                    // A whole page goes straight into the reply.
                    Self::copy_page(p, &mut buf[at..at + pb])?;
                } else {
                    edge.resize(pb, 0);
                    Self::copy_page(p, &mut edge)?;
                    buf[at..at + n].copy_from_slice(&edge[from..from + n]);
                }
                at += n;
            }
            Ok(done.ack_ns)
        });
        self.pages = pages;
        result
    }
    fn write(
        &mut self,
        offset: u64,
        data: &[u8],
        fua: bool,
        arrival_ns: u64,
    ) -> Result<u64, BackendError> {
        self.writable()?;
        let arrival = self.arrival(arrival_ns);
        self.write_bytes(offset, data, fua, arrival)
    }
    fn flush(&mut self, arrival_ns: u64) -> Result<u64, BackendError> {
        self.writable()?;
        let arrival = self.arrival(arrival_ns);
        let ack = self.dev.flush(arrival).map_err(backend_error)?.ack_ns;
        self.dev
            .flash_mut()
            .sync()
            .map_err(|e| BackendError::Io(e.to_string()))?;
        Ok(ack)
    }
    /// Trims the whole pages inside the range; partial pages at its edges are left as they are
    /// (TRIM is advisory, and a design without trim ignores it).
    fn trim(&mut self, offset: u64, len: u64, arrival_ns: u64) -> Result<u64, BackendError> {
        self.writable()?;
        let arrival = self.arrival(arrival_ns);
        self.span(offset, len)?;
        let first = offset.div_ceil(self.page_bytes);
        let end = (offset + len) / self.page_bytes;
        if end <= first {
            return Ok(arrival);
        }
        // A discard of the whole device is fine for NBD; FTLs bound one request, so split it.
        let mut ack = arrival;
        let mut lpn = first;
        while lpn < end {
            let n = (end - lpn).min(TRIM_CHUNK_PAGES);
            match self.dev.trim(Lpn(lpn as u32), n as u32, arrival) {
                Ok(done) => ack = ack.max(done.ack_ns),
                // A design without trim (OPTR) keeps the data; NBD lets a server ignore a TRIM.
                Err(FtlError::Unsupported(_)) => return Ok(arrival),
                Err(e) => return Err(backend_error(e)),
            }
            lpn += n;
        }
        Ok(ack)
    }
    fn write_zeroes(
        &mut self,
        offset: u64,
        len: u64,
        fua: bool,
        arrival_ns: u64,
    ) -> Result<u64, BackendError> {
        self.writable()?;
        let arrival = self.arrival(arrival_ns);
        self.span(offset, len)?;
        // WRITE_ZEROES may be longer than any write (up to 4 GiB): it is split into FTL write
        // requests of at most ZERO_CHUNK_PAGES pages at page-aligned boundaries, so only each
        // piece is atomic (with atomic requests, pieces of at most the transaction limit); FUA
        // flushes once, after the last piece.
        let chunk_pages = self
            .atomic
            .as_ref()
            .map_or(ZERO_CHUNK_PAGES, |a| a.max_pages.min(ZERO_CHUNK_PAGES));
        let chunk_bytes = chunk_pages * self.page_bytes;
        let zeros = vec![0u8; len.min(chunk_bytes) as usize];
        let end = offset + len;
        let mut pos = offset;
        let mut ack = arrival;
        while pos < end {
            let boundary = (pos / chunk_bytes + 1) * chunk_bytes;
            let n = boundary.min(end) - pos;
            let last = pos + n == end;
            let at = self.arrival(arrival);
            ack = ack.max(self.write_bytes(pos, &zeros[..n as usize], fua && last, at)?);
            pos += n;
        }
        Ok(ack)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flash::{DeviceConfig, Flash};
    use ftl::DesignOptions;

    /// A full-data, in-memory device of 64 MiB raw ("small" with more blocks).
    fn backend(name: &str) -> FtlBackend {
        let mut config = DeviceConfig::preset("small").unwrap();
        config.geometry.blocks_per_chip = 128;
        let design = crate::designs::find(name).unwrap();
        let oob = (design.oob_record_bytes)(&config.geometry).min(config.geometry.oob_bytes);
        let flash = Flash::in_memory(config, oob, false);
        let dev = design
            .build(flash, &DesignOptions::from_pairs(&[]).unwrap())
            .unwrap();
        FtlBackend::new(dev, 0)
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
            let mut x = 0x9e37_79b9_7f4a_7c15u64;
            let mut next = move || {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x
            };
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
        let base = b.dev.flash_mut().start_recording();
        let config = b.dev.flash().config().clone();
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
        let design = crate::designs::find("mobius").unwrap();
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
