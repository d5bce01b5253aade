//! `mobius serve --power-cut-signal`: a simulated power cut of the served device.
//!
//! SIGUSR1 cuts power at an instant of simulated time; the image then becomes the flash as the
//! operation log says it was at that instant: operations that ended by then are on flash, one
//! running then is torn, later ones never happened (the crash checker's model,
//! `flash::oplog`). From the cut on the server sends no reply (a device without power answers
//! nothing), not even one computed earlier and held by `--pace` for its due time.
//!
//! Two ways to choose the instant:
//! - **at the signal** (default): the server time at which SIGUSR1 arrived. Under `--pace` the
//!   host has few requests in flight at any moment, so a cut at a random moment rarely lands
//!   inside a multi-page write.
//! - **inside a multi-page write** (`--cut-inside-write[=N]`): SIGUSR1 only arms the cut; it
//!   falls inside the N-th following WRITE request that overwrites at least two pages this
//!   server wrote before (with an instant inside it: see [`instant_inside`]; default the
//!   first), just after the first of that
//!   request's host pages finished programming: the request's other pages are torn if their
//!   program was running and missing if it had not started. This is the instant that tears a
//!   request that is not atomic, so a negative control (plain requests under a database that
//!   assumes they cannot tear) is put to the test instead of hoping a random cut hits one.

use crate::nbd_backend::FtlBackend;
use fixedbitset::FixedBitSet;
use flash::{FileStore, LoggedOp, OpCause, OpKind};
use nbd::{BackendError, NbdBackend};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// The cut of `--cut-inside-write`: armed by SIGUSR1, fired by the N-th multi-page write.
pub struct WriteCut {
    /// Set by SIGUSR1.
    pub armed: Arc<AtomicBool>,
    /// The server's power-off flag (no reply leaves once set).
    power_off: Arc<AtomicBool>,
    /// The server's shutdown flag.
    shutdown: Arc<AtomicBool>,
    /// Multi-page writes with an instant inside them still to let pass before the cut falls
    /// in the next one.
    to_pass: AtomicU64,
    /// Where and when the cut fell, once it did.
    fired: Mutex<Option<FiredCut>>,
}

/// Where a `--cut-inside-write` cut fell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FiredCut {
    /// The instant of the cut in device time.
    pub at_ns: u64,
    /// The request it fell inside.
    pub offset: u64,
    pub pages: u64,
    /// Of the request's pages (page-aligned ones, found by their bytes among the programs the
    /// request issued): how many were on flash at the cut, torn, and not yet started; the
    /// rest were not programmed by the request itself (held in a design's buffer).
    pub finished: u64,
    pub torn: u64,
    pub not_started: u64,
}

impl FiredCut {
    /// Counts how each of the request's pages stood at `at_ns`.
    fn page_states(mut self, ops: &[LoggedOp], offset: u64, data: &[u8], page: u64) -> FiredCut {
        if !offset.is_multiple_of(page) {
            return self;
        }
        for chunk in data.chunks_exact(page as usize) {
            let program = ops.iter().find(|o| match &o.kind {
                OpKind::Program {
                    content: flash::Content::Bytes(b),
                    ..
                } => &b[..] == chunk,
                _ => false,
            });
            match program.map(|o| o.span) {
                Some(s) if s.end_ns <= self.at_ns => self.finished += 1,
                Some(s) if s.start_ns < self.at_ns => self.torn += 1,
                Some(_) => self.not_started += 1,
                None => {}
            }
        }
        self
    }
}

impl WriteCut {
    /// A cut inside the `nth` multi-page write (from 1) after SIGUSR1.
    pub fn new(nth: u64, power_off: Arc<AtomicBool>, shutdown: Arc<AtomicBool>) -> WriteCut {
        WriteCut {
            armed: Arc::new(AtomicBool::new(false)),
            power_off,
            shutdown,
            to_pass: AtomicU64::new(nth.saturating_sub(1)),
            fired: Mutex::new(None),
        }
    }

    /// `true` while armed and not yet fired.
    fn waiting(&self) -> bool {
        self.armed.load(Ordering::SeqCst) && self.fired().is_none()
    }

    pub fn fired(&self) -> Option<FiredCut> {
        *self.fired.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A multi-page write with an instant inside it went by: `true` when the cut falls in it,
    /// `false` while more are to pass first.
    fn falls_in_this_write(&self) -> bool {
        self.to_pass
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_err()
    }

    fn fire(&self, cut: FiredCut) {
        *self.fired.lock().unwrap_or_else(|e| e.into_inner()) = Some(cut);
        self.power_off.store(true, Ordering::SeqCst);
        self.shutdown.store(true, Ordering::SeqCst);
    }
}

/// The instant inside a request whose flash operations are `ops`: just after its first host
/// page finished programming, provided another of its host pages was still unfinished then
/// (otherwise no instant lies inside it: `None`).
pub fn instant_inside(ops: &[LoggedOp]) -> Option<u64> {
    let host_ends = || {
        ops.iter()
            .filter(|o| o.cause == OpCause::HostData && matches!(o.kind, OpKind::Program { .. }))
            .map(|o| o.span.end_ns)
    };
    let first = host_ends().min()?;
    host_ends().any(|end| end > first).then_some(first)
}

/// Pages this server has written (WRITE, WRITE_ZEROES) and not trimmed since it started: a
/// cut inside a write is placed in an *overwrite*, where tearing loses data the host had. A
/// torn first write to pages the file system only just allocated is forgotten with the
/// allocation when the file system's journal did not commit it.
struct WrittenPages {
    page_bytes: u64,
    bits: FixedBitSet,
}

impl WrittenPages {
    fn new(size_bytes: u64, page_bytes: u64) -> WrittenPages {
        WrittenPages {
            page_bytes,
            bits: FixedBitSet::with_capacity(size_bytes.div_ceil(page_bytes) as usize),
        }
    }

    /// Pages that `[offset, offset + len)` touches.
    fn touched(&self, offset: u64, len: u64) -> std::ops::Range<usize> {
        let first = offset / self.page_bytes;
        let end = (offset + len).div_ceil(self.page_bytes);
        first as usize..(end as usize).min(self.bits.len())
    }

    fn mark(&mut self, offset: u64, len: u64) {
        let r = self.touched(offset, len);
        self.bits.insert_range(r);
    }

    /// Forgets the pages a trim covers whole.
    fn trim(&mut self, offset: u64, len: u64) {
        let first = offset.div_ceil(self.page_bytes) as usize;
        let end = (((offset + len) / self.page_bytes) as usize).min(self.bits.len());
        if first < end {
            self.bits.remove_range(first..end);
        }
    }

    fn all_written(&self, offset: u64, len: u64) -> bool {
        self.touched(offset, len).all(|p| self.bits.contains(p))
    }
}

/// The served backend: the design behind [`FtlBackend`], and the `--cut-inside-write` trigger
/// when it is on.
pub struct ServedBackend {
    inner: FtlBackend,
    cut: Option<Arc<WriteCut>>,
    /// Kept only with a cut inside a write.
    written: Option<WrittenPages>,
}

impl ServedBackend {
    pub fn new(inner: FtlBackend, cut: Option<Arc<WriteCut>>) -> ServedBackend {
        let written = cut
            .as_ref()
            .map(|_| WrittenPages::new(inner.size_bytes(), inner.preferred_block_size() as u64));
        ServedBackend {
            inner,
            cut,
            written,
        }
    }

    pub fn into_inner(self) -> FtlBackend {
        self.inner
    }

    /// A write while the cut is armed: if the request overwrites two pages or more and an
    /// instant lies inside it, the cut falls there.
    fn write_under_armed_cut(
        &mut self,
        cut: &WriteCut,
        offset: u64,
        data: &[u8],
        fua: bool,
        arrival_ns: u64,
    ) -> Result<u64, BackendError> {
        let page = self.inner.preferred_block_size() as u64;
        let pages = (offset + data.len() as u64).div_ceil(page) - offset / page;
        let overwrite = self
            .written
            .as_ref()
            .is_some_and(|w| w.all_written(offset, data.len() as u64));
        let before = self
            .inner
            .device_mut()
            .flash()
            .log()
            .map_or(0, |l| l.ops.len());
        let result = self.inner.write(offset, data, fua, arrival_ns);
        if pages >= 2 && overwrite {
            let flash = self.inner.device_mut().flash();
            let ops = flash.log().map_or(&[][..], |l| &l.ops[before..]);
            if let Some(at_ns) = instant_inside(ops) {
                if cut.falls_in_this_write() {
                    let fired = FiredCut {
                        at_ns,
                        offset,
                        pages,
                        finished: 0,
                        torn: 0,
                        not_started: 0,
                    };
                    cut.fire(fired.page_states(ops, offset, data, page));
                }
            }
        }
        result
    }
}

impl NbdBackend for ServedBackend {
    fn size_bytes(&self) -> u64 {
        self.inner.size_bytes()
    }
    fn preferred_block_size(&self) -> u32 {
        self.inner.preferred_block_size()
    }
    fn max_payload_bytes(&self) -> u32 {
        self.inner.max_payload_bytes()
    }
    fn multi_conn_safe(&self) -> bool {
        self.inner.multi_conn_safe()
    }
    fn read(&mut self, offset: u64, buf: &mut [u8], arrival_ns: u64) -> Result<u64, BackendError> {
        self.inner.read(offset, buf, arrival_ns)
    }
    fn write(
        &mut self,
        offset: u64,
        data: &[u8],
        fua: bool,
        arrival_ns: u64,
    ) -> Result<u64, BackendError> {
        let result = match self.cut.clone().filter(|c| c.waiting()) {
            Some(cut) => self.write_under_armed_cut(&cut, offset, data, fua, arrival_ns),
            None => self.inner.write(offset, data, fua, arrival_ns),
        };
        if let (Ok(_), Some(w)) = (&result, self.written.as_mut()) {
            w.mark(offset, data.len() as u64);
        }
        result
    }
    fn flush(&mut self, arrival_ns: u64) -> Result<u64, BackendError> {
        self.inner.flush(arrival_ns)
    }
    fn trim(&mut self, offset: u64, len: u64, arrival_ns: u64) -> Result<u64, BackendError> {
        let result = self.inner.trim(offset, len, arrival_ns);
        if let (Ok(_), Some(w)) = (&result, self.written.as_mut()) {
            w.trim(offset, len);
        }
        result
    }
    fn write_zeroes(
        &mut self,
        offset: u64,
        len: u64,
        fua: bool,
        arrival_ns: u64,
    ) -> Result<u64, BackendError> {
        let result = self.inner.write_zeroes(offset, len, fua, arrival_ns);
        if let (Ok(_), Some(w)) = (&result, self.written.as_mut()) {
            w.mark(offset, len);
        }
        result
    }
}

/// Notes the server time at which SIGUSR1 arrived (within a millisecond): the instant of a cut
/// at the signal. Requests the server still handles while it shuts down start after it, so
/// their operations never happened, as after a real cut. Ends with `None` once `done` is set
/// without a cut.
pub fn watch_for_signal(
    cut: Arc<AtomicBool>,
    done: Arc<AtomicBool>,
    server_ns_now: u64,
) -> std::thread::JoinHandle<Option<u64>> {
    let start = std::time::Instant::now();
    std::thread::spawn(move || loop {
        if cut.load(Ordering::SeqCst) {
            return Some(server_ns_now + start.elapsed().as_nanos() as u64);
        }
        if done.load(Ordering::SeqCst) {
            return None;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    })
}

/// Starts the operation log; returns the image it applies to.
pub fn start_recording(backend: &mut FtlBackend) -> Box<dyn flash::Store> {
    backend.device_mut().flash_mut().start_recording()
}

/// Replaces `image` with the flash as of device time `at_ns` (at least `start_ns`: a
/// recovered device starts at its own clock); returns how many operations were unfinished then
/// and how many were logged.
pub fn write_cut_image(
    image: &std::path::Path,
    backend: FtlBackend,
    base: Box<dyn flash::Store>,
    at_ns: u64,
    start_ns: u64,
) -> anyhow::Result<(usize, usize)> {
    let at = at_ns.max(start_ns);
    let mut flash = backend.into_device().into_flash();
    let log = flash.take_log().expect("recording since start");
    let in_flight = log.ops.iter().filter(|o| o.span.end_ns > at).count();
    let cut = log.image_at(base.as_ref(), at, true);
    drop(flash);
    let header = FileStore::read_header(image)?;
    FileStore::replace_with(image, cut.as_ref(), &header.identity)?;
    Ok((in_flight, log.ops.len()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use flash::{Content, ContentTag, Ppn, Span};

    fn program(seq: u64, cause: OpCause, start_ns: u64, end_ns: u64) -> LoggedOp {
        LoggedOp {
            seq,
            span: Span { start_ns, end_ns },
            cause,
            kind: OpKind::Program {
                ppn: Ppn(seq as u32),
                content: Content::Tag(ContentTag { lpn: 0, write: seq }),
                oob: Box::new([]),
            },
        }
    }

    #[test]
    fn the_cut_falls_after_the_first_host_page_while_another_is_unfinished() {
        let ops = [
            program(0, OpCause::Mapping, 0, 50),
            program(1, OpCause::HostData, 10, 300),
            program(2, OpCause::HostData, 40, 330),
        ];
        assert_eq!(instant_inside(&ops), Some(300));
    }

    #[test]
    fn no_instant_inside_a_request_whose_pages_end_together_or_without_host_pages() {
        let together = [
            program(1, OpCause::HostData, 10, 300),
            program(2, OpCause::HostData, 10, 300),
        ];
        assert_eq!(instant_inside(&together), None);
        assert_eq!(instant_inside(&[program(0, OpCause::TxMeta, 0, 9)]), None);
        assert_eq!(instant_inside(&[]), None);
    }
}

#[cfg(test)]
mod write_cut_tests {
    use super::*;

    #[test]
    fn the_cut_falls_in_the_nth_write_after_the_signal() {
        let (off, stop) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicBool::new(false)),
        );
        let cut = WriteCut::new(3, Arc::clone(&off), Arc::clone(&stop));
        cut.armed.store(true, Ordering::SeqCst);
        for n in 1..=3u64 {
            assert!(cut.waiting(), "write {n}");
            if cut.falls_in_this_write() {
                cut.fire(FiredCut {
                    at_ns: n,
                    offset: 0,
                    pages: 2,
                    finished: 1,
                    torn: 1,
                    not_started: 0,
                });
            }
        }
        assert_eq!(cut.fired().map(|f| f.at_ns), Some(3));
        assert!(!cut.waiting());
        assert!(off.load(Ordering::SeqCst) && stop.load(Ordering::SeqCst));
    }

    #[test]
    fn written_pages_follow_writes_and_whole_page_trims() {
        let mut w = WrittenPages::new(16 * 4096, 4096);
        assert!(!w.all_written(0, 8192));
        w.mark(100, 8000); // pages 0 and 1, partly
        assert!(w.all_written(0, 8192));
        assert!(!w.all_written(0, 3 * 4096));
        w.trim(2048, 4096); // covers no page whole
        assert!(w.all_written(0, 8192));
        w.trim(4096, 4096);
        assert!(!w.all_written(0, 8192) && w.all_written(0, 4096));
        w.mark(15 * 4096, 4096);
        assert!(w.all_written(15 * 4096, 4096));
    }
}
