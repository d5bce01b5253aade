//! The host interface in front of every design: [`HostLinked`] wraps any [`BlockDevice`] in the
//! one host model of [`flash::HostInterface`], so that every design the tools build is reached
//! over the same link, pays the same command cost and stages writes in the same buffer (issue #16:
//! like for like). [`DesignSpec::build`] and [`DesignSpec::reopen`] apply it.
//!
//! Timing rules ([`HostLink`]):
//! - host → device is one FIFO: a request starts crossing when the link is free and, for a write,
//!   when the staging buffer has room for it; it reaches the design `command_ns` + its data later;
//! - a write's pages stay staged until the design no longer needs the copy: its acknowledgement,
//!   or for a Möbius async SWRITE its durability instant (§IV-B: it returns once the atom inode
//!   is persisted, the data is programmed after). A deferred acknowledgement (merged SWRITEs,
//!   [`ACK_DEFERRED`]) releases its pages on receipt: the design reports when it acknowledges only
//!   later, so its data is counted in the buffer no longer than the request's transfer;
//! - device → host: read data crosses the link back once the flash produced it, in the first gap
//!   of the return direction at or after that instant (replies of independent reads interleave).
//!
//! The design itself never sees the host model: it is called with the instant the request
//! reached it, and what it answers is moved later only where the link says so.

use crate::device::{
    BlockDevice, Completion, DesignOptions, DesignSpec, DwriteFlag, PageOutcome, RecoveryReport,
    SwriteMode, Transactional, TxCapabilities, TxCompletion, ACK_DEFERRED,
};
use crate::error::{FtlError, TxUuid};
use crate::promise::Promise;
use flash::{Bookings, Content, Flash, HostInterface, Lpn};
use std::collections::VecDeque;

/// The link and staging buffer timelines of one device.
#[derive(Clone, Debug)]
pub struct HostLink {
    iface: HostInterface,
    page_bytes: u64,
    /// When the host → device direction is next free.
    down_free_ns: u64,
    /// Staged write pages as (release instant, pages), sorted by release. Releases come nearly
    /// in order (a write's acknowledgement follows its program on the soonest-idle chip), so
    /// the latest so far is pushed on the back, an earlier one placed by a binary search, and
    /// the earliest leaves from the front (a heap's pop cost 112 instructions per request).
    staged: VecDeque<(u64, u64)>,
    staged_pages: u64,
    /// Booked intervals of the device → host direction.
    up: Bookings,
    /// Commands sent.
    pub commands: u64,
    /// Total time requests waited for the link behind earlier requests.
    pub link_wait_ns: u64,
    /// Total time writes waited for room in the staging buffer.
    pub buffer_wait_ns: u64,
}

impl HostLink {
    pub fn new(iface: HostInterface, page_bytes: u32) -> HostLink {
        HostLink {
            iface,
            page_bytes: page_bytes as u64,
            down_free_ns: 0,
            staged: VecDeque::new(),
            staged_pages: 0,
            up: Bookings::default(),
            commands: 0,
            link_wait_ns: 0,
            buffer_wait_ns: 0,
        }
    }

    pub fn interface(&self) -> HostInterface {
        self.iface
    }

    /// A request the host issued at `host_ns` carrying `write_pages` pages of data: returns the
    /// instant it has fully reached the device. Buffer space for the pages must then be given
    /// back with [`HostLink::release`].
    pub fn send(&mut self, host_ns: u64, write_pages: u64) -> u64 {
        if self.iface.is_ideal() {
            return host_ns;
        }
        self.commands += 1;
        let mut start = host_ns.max(self.down_free_ns);
        self.link_wait_ns += start - host_ns;
        self.prune_replies(host_ns);
        if write_pages > 0 {
            let ready = self.wait_for_room(start, write_pages);
            self.buffer_wait_ns += ready - start;
            start = ready;
        }
        let end =
            start + self.iface.command_ns + self.iface.transfer_ns(write_pages * self.page_bytes);
        self.down_free_ns = end;
        end
    }

    /// Gives back the buffer space of `write_pages` pages from `release_ns` on.
    pub fn release(&mut self, write_pages: u64, release_ns: u64) {
        let pages = self.staged_size(write_pages);
        if pages == 0 {
            return;
        }
        match self.staged.back() {
            Some(&(last, _)) if last > release_ns => {
                let at = self
                    .staged
                    .partition_point(|&(release, _)| release <= release_ns);
                self.staged.insert(at, (release_ns, pages));
            }
            _ => self.staged.push_back((release_ns, pages)),
        }
        self.staged_pages += pages;
    }

    /// Read data of `pages` pages the flash produced at `ready_ns`: returns when the host has it.
    pub fn reply(&mut self, ready_ns: u64, pages: u64) -> u64 {
        let length = self.iface.transfer_ns(pages * self.page_bytes);
        if length == 0 {
            return ready_ns;
        }
        self.up.book(ready_ns, length) + length
    }

    /// Pages a write occupies in the buffer (a write larger than the buffer fills it).
    fn staged_size(&self, write_pages: u64) -> u64 {
        match self.iface.write_buffer_pages {
            0 => 0,
            cap => write_pages.min(cap),
        }
    }

    /// Earliest instant at or after `start` at which `write_pages` fit in the buffer.
    fn wait_for_room(&mut self, mut start: u64, write_pages: u64) -> u64 {
        let need = self.staged_size(write_pages);
        let cap = self.iface.write_buffer_pages;
        while let Some(&(release, pages)) = self.staged.front() {
            if release > start && self.staged_pages + need <= cap {
                break;
            }
            self.staged.pop_front();
            self.staged_pages -= pages;
            start = start.max(release);
        }
        start
    }

    /// Replies that ended before the host's clock can no longer hold a later reply back.
    fn prune_replies(&mut self, host_ns: u64) {
        self.up.prune(host_ns);
    }
}

/// A design behind the host interface (see the module documentation).
pub struct HostLinked {
    inner: Box<dyn BlockDevice>,
    link: HostLink,
    caps: Option<TxCapabilities>,
}

impl HostLinked {
    /// Wraps `inner`; with an ideal host the design is returned unwrapped.
    pub fn wrap(mut inner: Box<dyn BlockDevice>) -> Box<dyn BlockDevice> {
        let iface = inner.flash().config().host;
        if iface.is_ideal() {
            return inner;
        }
        let page_bytes = inner.flash().geometry().page_bytes;
        let caps = inner.transactional().map(|t| t.capabilities());
        Box::new(HostLinked {
            inner,
            link: HostLink::new(iface, page_bytes),
            caps,
        })
    }

    fn tx(&mut self) -> &mut dyn Transactional {
        self.inner
            .transactional()
            .expect("HostLinked offers transactions only when the design does")
    }

    fn read_reply(&mut self, done: Completion, host_ns: u64, pages: u64) -> Completion {
        Completion {
            arrival_ns: host_ns,
            ack_ns: self.link.reply(done.ack_ns, pages),
        }
    }
}

impl BlockDevice for HostLinked {
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
        let n = pages.len() as u64;
        let at = self.link.send(arrival_ns, n);
        let done = self.inner.write(start, pages, at)?;
        self.link.release(n, done.ack_ns);
        Ok(Completion { arrival_ns, ..done })
    }

    fn read(
        &mut self,
        start: Lpn,
        count: u32,
        arrival_ns: u64,
        out: &mut Vec<PageOutcome>,
    ) -> Result<Completion, FtlError> {
        let at = self.link.send(arrival_ns, 0);
        let done = self.inner.read(start, count, at, out)?;
        Ok(self.read_reply(done, arrival_ns, count as u64))
    }

    fn flush(&mut self, arrival_ns: u64) -> Result<Completion, FtlError> {
        let at = self.link.send(arrival_ns, 0);
        let done = self.inner.flush(at)?;
        Ok(Completion { arrival_ns, ..done })
    }

    fn trim(&mut self, start: Lpn, count: u32, arrival_ns: u64) -> Result<Completion, FtlError> {
        let at = self.link.send(arrival_ns, 0);
        let done = self.inner.trim(start, count, at)?;
        Ok(Completion { arrival_ns, ..done })
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
    fn check_invariants(&self) -> Result<(), crate::InvariantViolation> {
        self.inner.check_invariants()
    }
    fn memory(&self) -> Vec<(String, u64)> {
        self.inner.memory()
    }

    fn metrics(&self) -> Vec<(String, f64)> {
        let mut m = self.inner.metrics();
        m.push(("host_commands".into(), self.link.commands as f64));
        m.push((
            "host_link_wait_ms".into(),
            self.link.link_wait_ns as f64 / 1e6,
        ));
        m.push((
            "host_buffer_wait_ms".into(),
            self.link.buffer_wait_ns as f64 / 1e6,
        ));
        m
    }

    fn transactional(&mut self) -> Option<&mut dyn Transactional> {
        match self.caps {
            Some(_) => Some(self),
            None => None,
        }
    }
}

impl Transactional for HostLinked {
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
        // A transaction the design refuses as too large is refused on its command alone.
        let n = pages.len() as u64;
        let carried = if n > self.capabilities().max_tx_pages {
            0
        } else {
            n
        };
        let at = self.link.send(arrival_ns, carried);
        let done = self.tx().swrite(uuid, pages, mode, at)?;
        let release = match (done.ack_ns, mode) {
            (ACK_DEFERRED, _) => at,
            (_, SwriteMode::Async) => done.durable_ns.unwrap_or(done.ack_ns),
            (ack, SwriteMode::Sync) => ack,
        };
        self.link.release(carried, release);
        Ok(TxCompletion { arrival_ns, ..done })
    }

    fn dwrite(
        &mut self,
        uuid: TxUuid,
        lpn: Lpn,
        content: &Content,
        flag: DwriteFlag,
        arrival_ns: u64,
    ) -> Result<TxCompletion, FtlError> {
        let at = self.link.send(arrival_ns, 1);
        let done = self.tx().dwrite(uuid, lpn, content, flag, at)?;
        self.link.release(1, done.ack_ns);
        Ok(TxCompletion { arrival_ns, ..done })
    }

    fn abort(&mut self, uuid: TxUuid, arrival_ns: u64) -> Result<Completion, FtlError> {
        let at = self.link.send(arrival_ns, 0);
        let done = self.tx().abort(uuid, at)?;
        Ok(Completion { arrival_ns, ..done })
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
        let at = self.link.send(arrival_ns, 0);
        let done = self.tx().sread(start, count, at, out)?;
        Ok(self.read_reply(done, arrival_ns, count as u64))
    }
}

impl DesignSpec {
    /// Builds the design on an erased device, behind the device's host interface.
    pub fn build(
        &self,
        flash: Flash,
        options: &DesignOptions,
    ) -> Result<Box<dyn BlockDevice>, FtlError> {
        Ok(HostLinked::wrap((self.format)(flash, options)?))
    }

    /// Recovers the design from flash, behind the device's host interface. The link starts idle:
    /// a power cut drops whatever was in flight on it.
    pub fn reopen(
        &self,
        flash: Flash,
        options: &DesignOptions,
    ) -> Result<(Box<dyn BlockDevice>, RecoveryReport), FtlError> {
        let (dev, report) = (self.recover)(flash, options)?;
        Ok((HostLinked::wrap(dev), report))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: u32 = 4096;

    fn jasmine_like() -> HostInterface {
        HostInterface {
            link_mb_s: 95,
            command_ns: 20_000,
            write_buffer_pages: 2048,
        }
    }

    #[test]
    fn back_to_back_writes_are_bound_by_the_link() {
        let mut link = HostLink::new(jasmine_like(), PAGE);
        let mut now = 0;
        for _ in 0..256 {
            // The design acknowledges at once (it only stages): the link is the bottleneck.
            now = link.send(now, 64);
            link.release(64, now);
        }
        let mb_s = (256 * 64 * PAGE as u64) as f64 / now as f64 * 1000.0;
        assert!((90.0..95.0).contains(&mb_s), "{mb_s} MB/s");
        assert_eq!(link.commands, 256);
    }

    #[test]
    fn a_request_reaches_the_design_after_its_data_crossed() {
        let mut link = HostLink::new(jasmine_like(), PAGE);
        let at = link.send(1_000, 1);
        assert_eq!(at, 1_000 + 20_000 + 43_116);
        // A command issued while the first is crossing waits for the link.
        let next = link.send(2_000, 0);
        assert_eq!(next, at + 20_000);
        assert_eq!(link.link_wait_ns, at - 2_000);
    }

    #[test]
    fn a_full_buffer_holds_writes_back_until_the_design_releases_pages() {
        let iface = HostInterface {
            link_mb_s: 0,
            command_ns: 0,
            write_buffer_pages: 8,
        };
        let mut link = HostLink::new(iface, PAGE);
        assert_eq!(link.send(0, 8), 0);
        link.release(8, 10_000_000);
        // No room until the first write's pages are released at 10 ms.
        assert_eq!(link.send(0, 4), 10_000_000);
        link.release(4, 40_000_000);
        assert_eq!(link.buffer_wait_ns, 10_000_000);
        // Four pages still fit beside the second write's four.
        assert_eq!(link.send(10_000_000, 4), 10_000_000);
        link.release(4, 40_000_000);
        // A full buffer again: wait for the 40 ms releases.
        assert_eq!(link.send(10_000_000, 1), 40_000_000);
        assert_eq!(link.buffer_wait_ns, 40_000_000);
    }

    /// The staging buffer kept sorted (releases placed from the back) against a plain model:
    /// a list searched for its earliest release, with releases in any order.
    #[test]
    fn the_staging_buffer_frees_the_earliest_release_first_in_any_order() {
        use rand::{RngExt, SeedableRng};
        let iface = HostInterface {
            link_mb_s: 0,
            command_ns: 0,
            write_buffer_pages: 32,
        };
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        let mut link = HostLink::new(iface, PAGE);
        let mut model: Vec<(u64, u64)> = Vec::new();
        let (mut now, mut link_free) = (0u64, 0u64);
        for _ in 0..20_000 {
            let pages = rng.random_range(1..=40u64);
            // The model: free the earliest releases until the write fits and none is due.
            let need = pages.min(32);
            // The link is one FIFO: a request starts no earlier than the one before it.
            let mut start = now.max(link_free);
            while let Some(i) = (0..model.len()).min_by_key(|&i| model[i]) {
                let release = model[i].0;
                let used: u64 = model.iter().map(|m| m.1).sum();
                if release > start && used + need <= 32 {
                    break;
                }
                model.swap_remove(i);
                start = start.max(release);
            }
            assert_eq!(link.send(now, pages), start);
            link_free = start;
            // Mostly later than the last release, sometimes well before it.
            let release = start + rng.random_range(0..50_000u64);
            link.release(pages, release);
            model.push((release, need));
            now += rng.random_range(0..5_000u64);
        }
    }

    #[test]
    fn read_replies_take_the_first_gap_of_the_return_direction() {
        let iface = HostInterface {
            link_mb_s: 1000,
            command_ns: 0,
            write_buffer_pages: 0,
        };
        let mut link = HostLink::new(iface, 1000);
        // One page = 1 µs on the link.
        assert_eq!(link.reply(10_000, 2), 12_000);
        assert_eq!(link.reply(0, 1), 1_000);
        // Overlaps [10, 12) µs: moved behind it.
        assert_eq!(link.reply(11_000, 1), 13_000);
        // Fits in the gap [1, 10) µs.
        assert_eq!(link.reply(5_000, 3), 8_000);
        assert_eq!(link.reply(7_000, 3), 16_000);
    }

    #[test]
    fn an_ideal_host_adds_nothing() {
        let mut link = HostLink::new(HostInterface::NONE, PAGE);
        assert_eq!(link.send(123, 1000), 123);
        link.release(1000, u64::MAX);
        assert_eq!(link.send(124, 1000), 124);
        assert_eq!(link.reply(500, 1000), 500);
        assert_eq!(link.commands, 0);
    }
}
