//! Byte requests: range checks, sub-page writes (read-modify-write), split trims and
//! write-zeroes, FUA.

use crate::{Contents, DeviceHandle, Host, HostError, SPLIT_PAGES, STAGING_KEEP_PAGES};
use flash::{Content, Lpn};
use ftl::{Completion, FtlError, PageOutcome, SwriteMode};

/// What a byte write carries.
#[derive(Clone, Copy)]
enum Payload<'a> {
    Bytes(&'a [u8]),
    /// `len` bytes of fresh content tags (tag-only).
    Tags(u64),
}

impl Payload<'_> {
    fn len(&self) -> u64 {
        match self {
            Payload::Bytes(b) => b.len() as u64,
            Payload::Tags(len) => *len,
        }
    }
}

/// The pages of bytes `[offset, end)` (non-empty) that the write covers only in part: they
/// are read first and written back whole. At most two, and one when the range lies in a page.
fn edge_pages(offset: u64, end: u64, page_bytes: u64) -> [Option<u64>; 2] {
    let (first, last) = (offset / page_bytes, (end - 1) / page_bytes);
    let head_partial = !offset.is_multiple_of(page_bytes);
    let tail_partial = !end.is_multiple_of(page_bytes);
    if first == last {
        [(head_partial || tail_partial).then_some(first), None]
    } else {
        [head_partial.then_some(first), tail_partial.then_some(last)]
    }
}

/// Copies `outcome` (one page) into `page`; an uncorrectable page is an error.
fn copy_page(outcome: &PageOutcome, lpn: Lpn, page: &mut [u8]) -> Result<(), HostError> {
    match outcome {
        PageOutcome::Data(c) => c.copy_page_into(page),
        PageOutcome::Unwritten => page.fill(0),
        PageOutcome::Uncorrectable => return Err(HostError::Uncorrectable { lpn }),
    }
    Ok(())
}

fn staged_page(content: &mut Content) -> &mut [u8] {
    match content {
        Content::Bytes(b) => b,
        Content::Tag(_) => unreachable!("byte staging pages are bytes"),
    }
}

impl<D: DeviceHandle> Host<D> {
    /// Reads bytes `[offset, offset + buf.len())` into `buf`, as one device request.
    pub fn read(&mut self, offset: u64, buf: &mut [u8], arrival_ns: u64) -> Result<u64, HostError> {
        let (start, count) = self.span(offset, buf.len() as u64)?;
        let head = (offset % self.page_bytes) as usize;
        let page_bytes = self.page_bytes as usize;
        self.read_then(start, count, arrival_ns, |pages| {
            let mut at = 0usize;
            let mut edge = Vec::new();
            for (i, p) in pages.iter().enumerate() {
                let lpn = Lpn(start.0 + i as u32);
                let from = if i == 0 { head } else { 0 };
                let n = (page_bytes - from).min(buf.len() - at);
                if n == page_bytes {
                    copy_page(p, lpn, &mut buf[at..at + n])?;
                } else {
                    edge.resize(page_bytes, 0);
                    copy_page(p, lpn, &mut edge)?;
                    buf[at..at + n].copy_from_slice(&edge[from..from + n]);
                }
                at += n;
            }
            Ok(())
        })
    }

    /// Reads the pages of bytes `[offset, offset + len)` as one device request and drops what
    /// they hold (tag-only replay: the read costs what it costs).
    pub fn read_range(&mut self, offset: u64, len: u64, arrival_ns: u64) -> Result<u64, HostError> {
        let (start, count) = self.span(offset, len)?;
        self.read_then(start, count, arrival_ns, |_| Ok(()))
    }

    /// One read request of `count` pages at `start`, handed to `deliver`.
    fn read_then(
        &mut self,
        start: Lpn,
        count: u32,
        arrival_ns: u64,
        deliver: impl FnOnce(&[PageOutcome]) -> Result<(), HostError>,
    ) -> Result<u64, HostError> {
        let at = self.at(arrival_ns);
        if count == 0 {
            return Ok(at);
        }
        let mut pages = std::mem::take(&mut self.scratch);
        let result = self
            .read_device(start, count, at, &mut pages)
            .and_then(|done| deliver(&pages).map(|()| done.ack_ns));
        self.scratch = pages;
        self.finish(result)
    }

    /// A device read; an SREAD under atomic writes where the design has it. Without it a read
    /// arriving before an earlier SWRITE committed (in simulated time) returns the old pages
    /// on Möbius.
    fn read_device(
        &mut self,
        start: Lpn,
        count: u32,
        at: u64,
        out: &mut Vec<PageOutcome>,
    ) -> Result<Completion, HostError> {
        let serializable = self.atomic.is_some_and(|a| a.sread);
        self.device_read(start, count, at, out, serializable)
    }

    /// Writes `data` at byte `offset` as one device request; with `fua`, a flush follows.
    pub fn write(
        &mut self,
        offset: u64,
        data: &[u8],
        fua: bool,
        arrival_ns: u64,
    ) -> Result<u64, HostError> {
        self.write_payload(offset, Payload::Bytes(data), fua, arrival_ns)
    }

    /// Writes `len` bytes of fresh content tags at byte `offset` (tag-only simulation).
    pub fn write_tags(
        &mut self,
        offset: u64,
        len: u64,
        fua: bool,
        arrival_ns: u64,
    ) -> Result<u64, HostError> {
        self.write_payload(offset, Payload::Tags(len), fua, arrival_ns)
    }

    fn write_payload(
        &mut self,
        offset: u64,
        payload: Payload,
        fua: bool,
        arrival_ns: u64,
    ) -> Result<u64, HostError> {
        self.modify(arrival_ns, |host, at| {
            let ack = host.write_request(offset, payload, at)?;
            host.after_write(ack, fua)
        })
    }

    /// FUA: a flush at the write's acknowledgement. An atomic write is a synchronous SWRITE,
    /// durable when acknowledged, so it needs none. (The image is synced by [`Host::flush`]
    /// only: a killed server loses nothing the host's page cache holds.)
    fn after_write(&mut self, ack: u64, fua: bool) -> Result<u64, HostError> {
        if !fua || self.atomic.is_some() {
            return Ok(ack);
        }
        let at = self.at(ack);
        let done = self.device_mut().flush(at)?;
        self.stats.flushes += 1;
        Ok(ack.max(done.ack_ns))
    }

    /// Writes zeros over bytes `[offset, offset + len)` (tags on a tag-only host). Longer than
    /// one write may be (NBD allows 4 GiB), it is split into writes of at most
    /// [`SPLIT_PAGES`] pages (with atomic writes, of the transaction limit) at page-aligned
    /// boundaries, so only each piece is atomic; FUA flushes once, after the last piece. Every
    /// page the request covers only in part is read before its first piece is written
    /// ([`Host::read_tail_first`]): one that does not read refuses the request whole.
    pub fn write_zeroes(
        &mut self,
        offset: u64,
        len: u64,
        fua: bool,
        arrival_ns: u64,
    ) -> Result<u64, HostError> {
        self.modify(arrival_ns, |host, at| {
            let pieces = host.zeroes_pieces(offset, len)?;
            host.read_tail_first(&pieces, at)?;
            let longest = pieces.iter().map(|&(_, n)| n).max().unwrap_or(0);
            let zeros = match host.contents {
                Contents::Bytes => vec![0u8; longest as usize],
                Contents::Tags => Vec::new(),
            };
            let mut ack = at;
            for (pos, n) in pieces {
                let payload = match host.contents {
                    Contents::Bytes => Payload::Bytes(&zeros[..n as usize]),
                    Contents::Tags => Payload::Tags(n),
                };
                let written = host.write_request(pos, payload, at);
                ack = ack.max(written.inspect_err(|_| host.tail_read = None)?);
            }
            host.after_write(ack, fua)
        })
    }

    /// A WRITE_ZEROES in more than one piece: reads the page its last piece covers only in part
    /// (its tail; the head's is the first piece's, read before anything is written) before the
    /// first piece is written, and keeps it for the last piece. A tail page the media lost then
    /// refuses the whole request, never after the earlier pieces took effect (found by the NBD
    /// crash campaign with media faults: the log took a refused request for unapplied).
    fn read_tail_first(&mut self, pieces: &[(u64, u64)], at: u64) -> Result<(), HostError> {
        let (Some(&(pos, n)), true) = (pieces.last(), pieces.len() > 1) else {
            return Ok(());
        };
        let end = pos + n;
        if end.is_multiple_of(self.page_bytes) {
            return Ok(());
        }
        let lpn = (end - 1) / self.page_bytes;
        let at = self.at(at);
        let mut pages = std::mem::take(&mut self.scratch);
        let read = self.read_edge(lpn, at, &mut pages);
        let page = read.map(|ack_ns| (pages[0].clone(), ack_ns));
        self.scratch = pages;
        let (page, ack) = page?;
        if self.contents == Contents::Bytes && page == PageOutcome::Uncorrectable {
            return Err(HostError::Uncorrectable {
                lpn: Lpn(lpn as u32),
            });
        }
        self.tail_read = Some((lpn, page, ack));
        Ok(())
    }

    /// The writes (byte offset, length) that [`Host::write_zeroes`] splits bytes
    /// `[offset, offset + len)` into: cut at multiples of [`SPLIT_PAGES`] pages (with atomic
    /// writes or on a design with a longest write, of that limit if smaller), each one device
    /// request (one SWRITE).
    pub fn zeroes_pieces(&self, offset: u64, len: u64) -> Result<Vec<(u64, u64)>, HostError> {
        self.span(offset, len)?;
        let chunk_pages = self
            .max_write_pages()
            .map_or(SPLIT_PAGES, |m| m.min(SPLIT_PAGES));
        let chunk_bytes = chunk_pages * self.page_bytes;
        let (end, mut pos, mut pieces) = (offset + len, offset, Vec::new());
        while pos < end {
            let next = ((pos / chunk_bytes + 1) * chunk_bytes).min(end);
            pieces.push((pos, next - pos));
            pos = next;
        }
        Ok(pieces)
    }

    /// Trims the whole pages inside bytes `[offset, offset + len)`, split into requests of at
    /// most [`SPLIT_PAGES`] pages; partial pages at the edges are left as they are. A design
    /// without trim ignores it (counted in [`crate::HostStats::trims_ignored`]): TRIM is
    /// advisory.
    pub fn trim(&mut self, offset: u64, len: u64, arrival_ns: u64) -> Result<u64, HostError> {
        self.modify(arrival_ns, |host, at| {
            host.span(offset, len)?;
            let (mut lpn, end) = (
                offset.div_ceil(host.page_bytes),
                (offset + len) / host.page_bytes,
            );
            let mut ack = at;
            while lpn < end {
                let n = (end - lpn).min(SPLIT_PAGES);
                let at = host.at(at);
                match host.device_mut().trim(Lpn(lpn as u32), n as u32, at) {
                    Ok(done) => ack = ack.max(done.ack_ns),
                    Err(FtlError::Unsupported(_)) => {
                        host.stats.trims_ignored += 1;
                        break;
                    }
                    Err(e) => return Err(e.into()),
                }
                lpn += n;
            }
            Ok(ack)
        })
    }

    /// One device write of the pages under `payload` at byte `offset`: edge pages are read
    /// first (as part of this request), and the write is issued once they are in.
    fn write_request(&mut self, offset: u64, payload: Payload, at: u64) -> Result<u64, HostError> {
        let len = payload.len();
        let (start, count) = self.span(offset, len)?;
        let at = self.at(at);
        if count == 0 {
            return Ok(at);
        }
        let count = count as usize;
        let mut staging = self.take_staging(payload, count);
        let result = self
            .stage(offset, payload, at, start, count, &mut staging)
            .and_then(|ready| self.write_staged(start, &staging[..count], ready));
        if let Payload::Bytes(_) = payload {
            staging.truncate(STAGING_KEEP_PAGES);
            self.staging = staging;
        }
        result
    }

    /// Page buffers for a write of `count` pages: at least `count` reused byte pages, or
    /// room for the tags.
    fn take_staging(&mut self, payload: Payload, count: usize) -> Vec<Content> {
        match payload {
            Payload::Bytes(_) => {
                let mut staging = std::mem::take(&mut self.staging);
                while staging.len() < count {
                    let page = vec![0u8; self.page_bytes as usize].into_boxed_slice();
                    staging.push(Content::Bytes(page));
                }
                staging
            }
            Payload::Tags(_) => Vec::with_capacity(count),
        }
    }

    /// Reads edge page `lpn` of a write issued at `at` into `pages[0]` — a WRITE_ZEROES's tail
    /// read ahead ([`Host::read_tail_first`]) if it is that page — and returns when it was in.
    fn read_edge(
        &mut self,
        lpn: u64,
        at: u64,
        pages: &mut Vec<PageOutcome>,
    ) -> Result<u64, HostError> {
        if let Some((_, page, ack_ns)) = self.tail_read.take_if(|r| r.0 == lpn) {
            pages.clear();
            pages.push(page);
            return Ok(ack_ns);
        }
        self.stats.edge_reads += 1;
        let read = self.read_device(Lpn(lpn as u32), 1, at, pages);
        read.map(|done| done.ack_ns)
    }

    /// Reads the edge pages into `staging` and lays the payload over its first `count` pages
    /// (fresh tags: pushed); returns when the write may be issued (its edge pages are in).
    fn stage(
        &mut self,
        offset: u64,
        payload: Payload,
        at: u64,
        start: Lpn,
        count: usize,
        staging: &mut Vec<Content>,
    ) -> Result<u64, HostError> {
        let mut ready = at;
        let mut pages = std::mem::take(&mut self.scratch);
        for lpn in edge_pages(offset, offset + payload.len(), self.page_bytes)
            .into_iter()
            .flatten()
        {
            let read = self.read_edge(lpn, at, &mut pages);
            let copied = read.and_then(|ack_ns| {
                ready = ready.max(ack_ns);
                match payload {
                    Payload::Bytes(_) => {
                        let i = (lpn - u64::from(start.0)) as usize;
                        copy_page(&pages[0], Lpn(lpn as u32), staged_page(&mut staging[i]))
                    }
                    Payload::Tags(_) => Ok(()),
                }
            });
            if let Err(e) = copied {
                self.scratch = pages;
                return Err(e);
            }
        }
        self.scratch = pages;
        self.lay_payload(offset, payload, start, count, staging);
        Ok(ready)
    }

    /// The payload over the staged pages, from the offset's place in the first one.
    fn lay_payload(
        &mut self,
        offset: u64,
        payload: Payload,
        start: Lpn,
        count: usize,
        staging: &mut Vec<Content>,
    ) {
        match payload {
            Payload::Bytes(data) => {
                let page_bytes = self.page_bytes as usize;
                let mut at = 0usize;
                for (i, page) in staging[..count].iter_mut().enumerate() {
                    let from = if i == 0 {
                        (offset % self.page_bytes) as usize
                    } else {
                        0
                    };
                    let n = (page_bytes - from).min(data.len() - at);
                    staged_page(page)[from..from + n].copy_from_slice(&data[at..at + n]);
                    at += n;
                }
                debug_assert_eq!(at, data.len());
            }
            Payload::Tags(_) => {
                for i in 0..count {
                    let tag = self.fresh_tag(start.0 + i as u32);
                    staging.push(tag);
                }
            }
        }
    }

    /// The write of whole staged pages at `ready`: a plain write, or with atomic writes one
    /// synchronous SWRITE.
    fn write_staged(
        &mut self,
        start: Lpn,
        staged: &[Content],
        ready: u64,
    ) -> Result<u64, HostError> {
        let at = self.at(ready);
        let pages = staged.len() as u64;
        if let Some(max) = self.max_write_pages().filter(|&max| pages > max) {
            return Err(HostError::TooLarge { pages, max });
        }
        if self.atomic.is_none() {
            let done = self.device_mut().write(start, staged, at)?;
            self.stats.pages_written += pages;
            return Ok(done.ack_ns);
        }
        let uuid = self.next_atomic_uuid();
        let pages: Vec<(Lpn, Content)> = staged
            .iter()
            .enumerate()
            .map(|(i, c)| (Lpn(start.0 + i as u32), c.clone()))
            .collect();
        Ok(self
            .swrite_acknowledged_at(uuid, &pages, SwriteMode::Sync, at)?
            .ack_ns)
    }
}
