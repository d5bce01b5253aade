//! Page-level and transactional requests: one device call each, on the host's clock.

use crate::{DeviceHandle, Host, HostError};
use flash::{Content, Lpn};
use ftl::{
    Completion, DwriteFlag, PageOutcome, SwriteMode, TxCapabilities, TxCompletion, TxUuid,
    ACK_DEFERRED,
};

impl<D: DeviceHandle> Host<D> {
    /// What the design offers as transactions; `None` for a plain block device.
    pub fn capabilities(&mut self) -> Option<TxCapabilities> {
        self.device_mut().transactional().map(|t| t.capabilities())
    }

    /// One write request of whole pages starting at `start`.
    pub fn write_pages(
        &mut self,
        start: Lpn,
        pages: &[Content],
        arrival_ns: u64,
    ) -> Result<Completion, HostError> {
        self.device().prefetch_mapping(start, 0);
        self.modify(arrival_ns, |host, at| {
            let done = host.device_mut().write(start, pages, at)?;
            host.stats.pages_written += pages.len() as u64;
            Ok(done)
        })
    }

    /// One read request of `count` pages into `out`.
    pub fn read_pages(
        &mut self,
        start: Lpn,
        count: u32,
        arrival_ns: u64,
        out: &mut Vec<PageOutcome>,
    ) -> Result<Completion, HostError> {
        self.device().prefetch_mapping(start, 0);
        let at = self.at(arrival_ns);
        let result = self.device_read(start, count, at, out, false);
        self.finish(result)
    }

    /// One trim request; a design without trim refuses it with `Unsupported` (callers that may
    /// ignore a trim use the byte-level [`Host::trim`]).
    pub fn trim_pages(
        &mut self,
        start: Lpn,
        count: u32,
        arrival_ns: u64,
    ) -> Result<Completion, HostError> {
        self.modify(arrival_ns, |host, at| {
            Ok(host.device_mut().trim(start, count, at)?)
        })
    }

    /// Makes every acknowledged write durable, then syncs the image (a file-backed image
    /// reaches the host's disk).
    pub fn flush(&mut self, arrival_ns: u64) -> Result<u64, HostError> {
        self.modify(arrival_ns, |host, at| {
            host.stats.flushes += 1;
            let done = host.device_mut().flush(at)?;
            host.device_mut()
                .flash_mut()
                .sync()
                .map_err(ftl::FtlError::from)?;
            Ok(done.ack_ns)
        })
    }

    /// A static transaction (SWRITE). Its acknowledgement may be [`ACK_DEFERRED`].
    pub fn swrite(
        &mut self,
        uuid: TxUuid,
        pages: &[(Lpn, Content)],
        mode: SwriteMode,
        arrival_ns: u64,
    ) -> Result<TxCompletion, HostError> {
        self.modify(arrival_ns, |host, at| host.swrite_at(uuid, pages, mode, at))
    }

    /// A static transaction whose acknowledgement is known on return: a completion the device
    /// held back (Möbius merges small SWRITEs, §IV-E) is waited for.
    pub fn swrite_acknowledged(
        &mut self,
        uuid: TxUuid,
        pages: &[(Lpn, Content)],
        mode: SwriteMode,
        arrival_ns: u64,
    ) -> Result<TxCompletion, HostError> {
        self.modify(arrival_ns, |host, at| {
            host.swrite_acknowledged_at(uuid, pages, mode, at)
        })
    }

    /// One page of a dynamic transaction (DWRITE).
    pub fn dwrite(
        &mut self,
        uuid: TxUuid,
        lpn: Lpn,
        content: &Content,
        flag: DwriteFlag,
        arrival_ns: u64,
    ) -> Result<TxCompletion, HostError> {
        self.modify(arrival_ns, |host, at| {
            let done = host.tx("DWRITE")?.dwrite(uuid, lpn, content, flag, at)?;
            host.stats.dwrites += 1;
            host.stats.pages_written += 1;
            Ok(done)
        })
    }

    /// Aborts a running transaction (`TxUuid(0)`: the running dynamic one).
    pub fn abort(&mut self, uuid: TxUuid, arrival_ns: u64) -> Result<Completion, HostError> {
        self.modify(arrival_ns, |host, at| {
            let done = host.tx("ABORT")?.abort(uuid, at)?;
            host.stats.aborts += 1;
            Ok(done)
        })
    }

    /// A serializable read (SREAD).
    pub fn sread(
        &mut self,
        start: Lpn,
        count: u32,
        arrival_ns: u64,
        out: &mut Vec<PageOutcome>,
    ) -> Result<Completion, HostError> {
        let at = self.at(arrival_ns);
        let result = self.device_read(start, count, at, out, true);
        self.finish(result)
    }

    /// Completions of SWRITEs answered with [`ACK_DEFERRED`] that are known by `now_ns`
    /// (`u64::MAX`: wait for all). Not a request: it issues nothing the clock must follow.
    pub fn take_completions(
        &mut self,
        now_ns: u64,
    ) -> Result<Vec<(TxUuid, TxCompletion)>, HostError> {
        let result = self.completions_by(now_ns);
        self.finish(result)
    }

    // The device calls themselves, with their statistics; the public requests above wrap them
    // in the clock, fail-stop and check mode, once per request (an atomic byte write calls
    // them directly).

    /// A read or (`serializable`) an SREAD at `at`.
    pub(crate) fn device_read(
        &mut self,
        start: Lpn,
        count: u32,
        at: u64,
        out: &mut Vec<PageOutcome>,
        serializable: bool,
    ) -> Result<Completion, HostError> {
        self.stats.pages_read += u64::from(count);
        if serializable {
            self.stats.sreads += 1;
            return Ok(self.tx("SREAD")?.sread(start, count, at, out)?);
        }
        Ok(self.device_mut().read(start, count, at, out)?)
    }

    /// An SWRITE at `at`; its acknowledgement may be [`ACK_DEFERRED`].
    fn swrite_at(
        &mut self,
        uuid: TxUuid,
        pages: &[(Lpn, Content)],
        mode: SwriteMode,
        at: u64,
    ) -> Result<TxCompletion, HostError> {
        let done = self.tx("SWRITE")?.swrite(uuid, pages, mode, at)?;
        self.stats.swrites += 1;
        self.stats.pages_written += pages.len() as u64;
        Ok(done)
    }

    /// An SWRITE at `at` whose held-back completion, if any, is waited for.
    pub(crate) fn swrite_acknowledged_at(
        &mut self,
        uuid: TxUuid,
        pages: &[(Lpn, Content)],
        mode: SwriteMode,
        at: u64,
    ) -> Result<TxCompletion, HostError> {
        let done = self.swrite_at(uuid, pages, mode, at)?;
        if done.ack_ns != ACK_DEFERRED {
            return Ok(done);
        }
        self.completions_by(u64::MAX)?
            .into_iter()
            .find(|(u, _)| *u == uuid)
            .map(|(_, c)| c)
            .ok_or(HostError::NeverAcknowledged(uuid))
    }

    fn completions_by(&mut self, now_ns: u64) -> Result<Vec<(TxUuid, TxCompletion)>, HostError> {
        match self.device_mut().transactional() {
            Some(tx) => Ok(tx.take_completions(now_ns)?),
            None => Ok(Vec::new()),
        }
    }

    /// The design's transactional interface; a design without one does not offer `op`.
    pub(crate) fn tx(
        &mut self,
        op: &'static str,
    ) -> Result<&mut dyn ftl::Transactional, HostError> {
        self.device_mut()
            .transactional()
            .ok_or(HostError::Device(ftl::FtlError::Unsupported(op)))
    }
}
