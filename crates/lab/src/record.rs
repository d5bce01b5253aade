//! The requests a host hands a design, recorded as our trace lines (`trace::line`): how an
//! in-process front end's I/O becomes an engine trace like those `mobius serve --trace` records
//! over NBD (docs/engine-traces.md). The SQLite VFS runs in the process, not over NBD, so
//! `mobius sql-bench --trace` puts a [`RecordingDevice`] between its host layer and the design.
//!
//! What each request becomes (one line per request unless said):
//!
//! | request | lines |
//! | --- | --- |
//! | write of a run of pages | `WRITE` |
//! | read, SREAD | `READ` |
//! | flush | `FLUSH` |
//! | trim | `TRIM` |
//! | SWRITE | one `WRITE` per run of consecutive pages, in page order, the last with `FUA` |
//! | DWRITE | `WRITE` of its page; the one that ends the transaction (REAR, single) with `FUA` |
//! | ABORT | nothing (a trace has no abort; the aborted pages stay in the trace's group) |
//!
//! An SWRITE is one atomic request that is durable at its acknowledgement (a synchronous
//! SWRITE; an asynchronous one is atomic at once and durable later): its runs lie inside one
//! durability group ending at the `FUA`, so a replay cutting the trace at its durability points
//! (`driver::durability::group`) gets the SWRITE back as one transaction. Only requests the
//! design accepted are recorded (a refused SWRITE, which the caller then commits another way,
//! is not), with the arrival instant the host gave them.

use flash::{Content, Flash, Lpn};
use ftl::{
    BlockDevice, Completion, DwriteFlag, FtlError, PageOutcome, Promise, SwriteMode, Transactional,
    TxCapabilities, TxCompletion, TxUuid,
};
use std::sync::{Arc, Mutex};
use trace::line::{TraceFlags, TraceOp, TraceRecord};

/// The recorded lines, shared between the device (which the host owns) and the recorder's
/// owner; recording starts off, so a setup phase can run untraced.
#[derive(Clone, Debug, Default)]
pub struct RequestLog(Arc<Mutex<LogState>>);

#[derive(Debug, Default)]
struct LogState {
    on: bool,
    records: Vec<TraceRecord>,
}

impl RequestLog {
    /// Records from now on (`true`) or stops (`false`).
    pub fn set_recording(&self, on: bool) {
        self.0.lock().expect("request log").on = on;
    }

    /// The lines recorded so far, in request order.
    pub fn records(&self) -> Vec<TraceRecord> {
        self.0.lock().expect("request log").records.clone()
    }

    fn push(&self, records: impl IntoIterator<Item = TraceRecord>) {
        let mut s = self.0.lock().expect("request log");
        if s.on {
            s.records.extend(records);
        }
    }
}

/// A design whose requests are recorded into a [`RequestLog`]; otherwise the design itself.
pub struct RecordingDevice {
    inner: Box<dyn BlockDevice>,
    log: RequestLog,
    page_bytes: u64,
    caps: Option<TxCapabilities>,
}

impl RecordingDevice {
    /// `inner` recording into `log`.
    pub fn wrap(mut inner: Box<dyn BlockDevice>, log: RequestLog) -> Box<dyn BlockDevice> {
        let page_bytes = u64::from(inner.flash().geometry().page_bytes);
        let caps = inner.transactional().map(|t| t.capabilities());
        Box::new(RecordingDevice {
            inner,
            log,
            page_bytes,
            caps,
        })
    }

    fn record(&self, at: u64, op: TraceOp, start: Lpn, pages: u64, fua: bool) {
        self.log.push([self.line(at, op, start, pages, fua)]);
    }

    fn line(&self, at: u64, op: TraceOp, start: Lpn, pages: u64, fua: bool) -> TraceRecord {
        TraceRecord {
            arrival_ns: at,
            op,
            offset: u64::from(start.0) * self.page_bytes,
            length: u32::try_from(pages * self.page_bytes).unwrap_or(u32::MAX),
            flags: TraceFlags {
                fua,
                no_hole: false,
            },
        }
    }

    fn tx(&mut self) -> &mut dyn Transactional {
        self.inner
            .transactional()
            .expect("RecordingDevice offers transactions only when the design does")
    }
}

/// The runs of consecutive pages of `pages` (sorted, distinct): (first, count).
fn runs(pages: &[(Lpn, Content)]) -> Vec<(Lpn, u64)> {
    let mut lpns: Vec<u32> = pages.iter().map(|(l, _)| l.0).collect();
    lpns.sort_unstable();
    lpns.dedup();
    let mut out: Vec<(Lpn, u64)> = Vec::new();
    for l in lpns {
        match out.last_mut() {
            Some((first, n)) if u64::from(first.0) + *n == u64::from(l) => *n += 1,
            _ => out.push((Lpn(l), 1)),
        }
    }
    out
}

impl BlockDevice for RecordingDevice {
    fn design(&self) -> &'static str {
        self.inner.design()
    }
    fn promise(&self) -> Promise {
        self.inner.promise()
    }
    fn logical_pages(&self) -> u32 {
        self.inner.logical_pages()
    }
    fn max_write_pages(&self) -> Option<u32> {
        self.inner.max_write_pages()
    }

    fn write(
        &mut self,
        start: Lpn,
        pages: &[Content],
        arrival_ns: u64,
    ) -> Result<Completion, FtlError> {
        let done = self.inner.write(start, pages, arrival_ns)?;
        self.record(arrival_ns, TraceOp::Write, start, pages.len() as u64, false);
        Ok(done)
    }

    fn read(
        &mut self,
        start: Lpn,
        count: u32,
        arrival_ns: u64,
        out: &mut Vec<PageOutcome>,
    ) -> Result<Completion, FtlError> {
        let done = self.inner.read(start, count, arrival_ns, out)?;
        self.record(arrival_ns, TraceOp::Read, start, u64::from(count), false);
        Ok(done)
    }

    fn flush(&mut self, arrival_ns: u64) -> Result<Completion, FtlError> {
        let done = self.inner.flush(arrival_ns)?;
        self.record(arrival_ns, TraceOp::Flush, Lpn(0), 0, false);
        Ok(done)
    }

    fn trim(&mut self, start: Lpn, count: u32, arrival_ns: u64) -> Result<Completion, FtlError> {
        let done = self.inner.trim(start, count, arrival_ns)?;
        self.record(arrival_ns, TraceOp::Trim, start, u64::from(count), false);
        Ok(done)
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
    fn prefetch_mapping(&self, start: Lpn, ahead: usize) {
        self.inner.prefetch_mapping(start, ahead)
    }
    fn check_invariants(&self) -> Result<(), ftl::InvariantViolation> {
        self.inner.check_invariants()
    }
    fn metrics(&self) -> Vec<(String, f64)> {
        self.inner.metrics()
    }
    fn memory(&self) -> Vec<(String, u64)> {
        self.inner.memory()
    }
    fn transactional(&mut self) -> Option<&mut dyn Transactional> {
        match self.caps {
            Some(_) => Some(self),
            None => None,
        }
    }
}

impl Transactional for RecordingDevice {
    fn capabilities(&self) -> TxCapabilities {
        self.caps.unwrap_or_default()
    }

    fn swrite(
        &mut self,
        uuid: TxUuid,
        pages: &[(Lpn, Content)],
        mode: SwriteMode,
        arrival_ns: u64,
    ) -> Result<TxCompletion, FtlError> {
        let done = self.tx().swrite(uuid, pages, mode, arrival_ns)?;
        let runs = runs(pages);
        let last = runs.len().saturating_sub(1);
        let lines: Vec<TraceRecord> = runs
            .iter()
            .enumerate()
            .map(|(k, &(start, n))| self.line(arrival_ns, TraceOp::Write, start, n, k == last))
            .collect();
        self.log.push(lines);
        Ok(done)
    }

    fn dwrite(
        &mut self,
        uuid: TxUuid,
        lpn: Lpn,
        content: &Content,
        flag: DwriteFlag,
        arrival_ns: u64,
    ) -> Result<TxCompletion, FtlError> {
        let done = self.tx().dwrite(uuid, lpn, content, flag, arrival_ns)?;
        let ends = matches!(flag, DwriteFlag::Rear | DwriteFlag::Single);
        self.record(arrival_ns, TraceOp::Write, lpn, 1, ends);
        Ok(done)
    }

    fn abort(&mut self, uuid: TxUuid, arrival_ns: u64) -> Result<Completion, FtlError> {
        self.tx().abort(uuid, arrival_ns)
    }

    fn take_completions(&mut self, now_ns: u64) -> Result<Vec<(TxUuid, TxCompletion)>, FtlError> {
        self.tx().take_completions(now_ns)
    }

    fn sread(
        &mut self,
        start: Lpn,
        count: u32,
        arrival_ns: u64,
        out: &mut Vec<PageOutcome>,
    ) -> Result<Completion, FtlError> {
        let done = self.tx().sread(start, count, arrival_ns, out)?;
        self.record(arrival_ns, TraceOp::Read, start, u64::from(count), false);
        Ok(done)
    }
}

/// The trace text of `records` under `header` (`key: value` pairs, `trace::meta`'s lines).
pub fn trace_text(header: &[(&str, String)], records: &[TraceRecord]) -> String {
    let mut text = String::new();
    for (key, value) in header {
        text.push_str(&format!("# {key}: {value}\n"));
    }
    for r in records {
        text.push_str(&format!("{r}\n"));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn device(design: &str) -> Box<dyn BlockDevice> {
        let spec = crate::registry::find(design).unwrap();
        let config = crate::device::preset_slice("jasmine", 16).unwrap();
        crate::device::fresh(&spec, &config, &ftl::DesignOptions::default(), true).unwrap()
    }

    fn tag(lpn: u32) -> Content {
        Content::Tag(flash::ContentTag { lpn, write: 1 })
    }

    #[test]
    fn an_swrite_is_its_runs_ending_in_fua_and_recording_starts_off() {
        let log = RequestLog::default();
        let mut dev = RecordingDevice::wrap(device("mobius"), log.clone());
        dev.write(Lpn(0), &[tag(0)], 0).unwrap();
        log.set_recording(true);
        let pages: Vec<(Lpn, Content)> = [9, 3, 4, 5, 10].map(|l| (Lpn(l), tag(l))).to_vec();
        let tx = dev.transactional().unwrap();
        tx.swrite(TxUuid(1), &pages, SwriteMode::Sync, 10).unwrap();
        let mut out = Vec::new();
        tx.sread(Lpn(3), 2, 20, &mut out).unwrap();
        dev.flush(30).unwrap();
        let text: Vec<String> = log.records().iter().map(|r| r.to_string()).collect();
        assert_eq!(
            text,
            [
                "10 WRITE 12288 12288 -",
                "10 WRITE 36864 8192 FUA",
                "20 READ 12288 8192 -",
                "30 FLUSH 0 0 -"
            ]
        );
        // Cut at its durability points, the SWRITE is one transaction again.
        let body = trace_text(&[("clients", "1".into())], &log.records());
        let requests = trace::parse(body.as_bytes(), trace::Format::Ours).unwrap();
        let g = crate::driver::durability::group("t", &requests, 4096, true).unwrap();
        let writes: Vec<u32> = g.txns[0].writes.iter().map(|l| l.0).collect();
        assert_eq!(writes, [3, 4, 5, 9, 10]);
        assert_eq!(
            g.txns.len(),
            2,
            "the SWRITE, then the read before the flush"
        );
    }

    #[test]
    fn a_refused_request_is_not_recorded_and_a_plain_design_offers_no_transactions() {
        let log = RequestLog::default();
        log.set_recording(true);
        let mut dev = RecordingDevice::wrap(device("dftl"), log.clone());
        assert!(dev.transactional().is_none());
        let beyond = dev.logical_pages() + 10;
        assert!(dev.write(Lpn(beyond), &[tag(beyond)], 0).is_err());
        assert!(log.records().is_empty());
        dev.write(Lpn(1), &[tag(1), tag(2)], 5).unwrap();
        assert_eq!(log.records()[0].to_string(), "5 WRITE 4096 8192 -");
    }
}
