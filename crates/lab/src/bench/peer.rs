//! The in-process peer of `mobius bench --peer` (issue #19): a bare page-mapped FTL that plays
//! the same request stream as the design under test, in the same process, so the speed of the
//! simulator is reported as a ratio that a noisy machine moves far less than a wall-clock rate.
//!
//! The peer does the least any page-level FTL simulation of the device must do per page: a
//! mapping array with every entry in RAM, page validity with a greedy victim index
//! ([`ftl::Validity`], the one the designs use), one open block for host writes and one for GC
//! copies. It has no flash model (no timing, no OOB records, no content tags, no rules checked),
//! no mapping cache, no checkpoints and no recovery. The ratio `sim / peer` is therefore what the
//! full simulation costs over that floor; MQSim's published rate stays the external anchor
//! (docs/performance.md).

use flash::{BlockId, Geometry, Ppn};
use ftl::Validity;
use workload::{Generator, HostOp, Phase, View, WorkloadSpec};

/// One play of the request stream by the peer: its measured phase (after the fill).
#[derive(Clone, Debug, PartialEq)]
pub struct PeerRun {
    pub host_pages_written: u64,
    /// Host pages plus GC copies of the measured phase.
    pub programs: u64,
    pub gc_copies: u64,
    pub wall_s: f64,
}

impl PeerRun {
    pub fn programs_per_s(&self) -> f64 {
        self.programs as f64 / self.wall_s.max(1e-9)
    }
    pub fn write_amplification(&self) -> f64 {
        self.programs as f64 / self.host_pages_written.max(1) as f64
    }
}

/// Free blocks kept back so GC always has somewhere to copy to.
const GC_RESERVE_BLOCKS: usize = 2;

struct PagePeer {
    geometry: Geometry,
    map: Vec<Ppn>,
    validity: Validity,
    free: Vec<BlockId>,
    host_open: Option<(BlockId, u32)>,
    gc_open: Option<(BlockId, u32)>,
    victim_pages: Vec<(Ppn, u32)>,
    programs: u64,
    gc_copies: u64,
}

impl PagePeer {
    fn new(geometry: &Geometry, logical_pages: u32) -> PagePeer {
        PagePeer {
            geometry: geometry.clone(),
            map: vec![Ppn::NONE; logical_pages as usize],
            validity: Validity::new(geometry),
            free: (0..geometry.blocks()).rev().map(BlockId).collect(),
            host_open: None,
            gc_open: None,
            victim_pages: Vec::new(),
            programs: 0,
            gc_copies: 0,
        }
    }

    /// Next page of the host's or GC's open block, opening a free block when needed.
    fn next_page(&mut self, for_gc: bool) -> Ppn {
        let slot = if for_gc {
            &mut self.gc_open
        } else {
            &mut self.host_open
        };
        let (block, page) = slot.unwrap_or_else(|| {
            let block = self.free.pop().expect("the peer keeps free blocks for GC");
            (block, 0)
        });
        if page + 1 == self.geometry.pages_per_block {
            *slot = None;
            self.validity.index_block(block);
        } else {
            *slot = Some((block, page + 1));
        }
        self.geometry.ppn(block, page)
    }

    fn place(&mut self, lpn: u32, for_gc: bool) {
        let ppn = self.next_page(for_gc);
        let old = self.map[lpn as usize];
        if !old.is_none() {
            self.validity.invalidate(old, 0);
        }
        self.validity.set_valid(ppn, lpn);
        self.map[lpn as usize] = ppn;
        self.programs += 1;
    }

    fn write(&mut self, lpn: u32) {
        while self.free.len() <= GC_RESERVE_BLOCKS {
            self.collect();
        }
        self.place(lpn, false);
    }

    fn trim(&mut self, lpn: u32) {
        let old = std::mem::replace(&mut self.map[lpn as usize], Ppn::NONE);
        if !old.is_none() {
            self.validity.invalidate(old, 0);
        }
    }

    /// Greedy GC of one block: copy its live pages, erase it.
    fn collect(&mut self) {
        let victim = self
            .validity
            .greedy_victim(|_| true)
            .expect("a full block to collect: the exported space is below the raw space");
        self.validity.unindex_block(victim);
        let mut pages = std::mem::take(&mut self.victim_pages);
        pages.clear();
        pages.extend(self.validity.valid_pages(victim));
        for &(_, lpn) in &pages {
            self.place(lpn, true);
            self.gc_copies += 1;
        }
        self.victim_pages = pages;
        self.validity.erased(victim);
        self.free.push(victim);
    }

    fn apply(&mut self, op: &HostOp) {
        match op {
            HostOp::Write { start, count } => {
                for lpn in start.0..start.0 + count {
                    self.write(lpn);
                }
            }
            HostOp::Trim { start, count } => {
                for lpn in start.0..start.0 + count {
                    self.trim(lpn);
                }
            }
            HostOp::Read { start, count } => {
                for lpn in start.0..start.0 + count {
                    std::hint::black_box(self.map[lpn as usize]);
                }
            }
            _ => {}
        }
    }
}

/// Why the peer cannot play a workload.
#[derive(Debug, thiserror::Error)]
pub enum PeerError {
    #[error("the bench peer plays plain workloads, not txmix's transactions")]
    Transactions,
    #[error(transparent)]
    Workload(#[from] workload::WorkloadError),
}

/// Plays `spec` with `seed` (the requests `lab::driver::run` would issue: same generator, same
/// RNG) on the peer over `geometry`, exporting `logical_pages`.
pub fn play(
    geometry: &Geometry,
    logical_pages: u32,
    spec: &WorkloadSpec,
    seed: u64,
) -> Result<PeerRun, PeerError> {
    use rand::SeedableRng;
    if spec.name == "txmix" {
        return Err(PeerError::Transactions);
    }
    let mut generator = Generator::new(spec, logical_pages, None)?;
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let view = View {
        now_ns: 0,
        inflight_static: &[],
    };
    let mut peer = PagePeer::new(geometry, logical_pages);
    let mut measured: Option<(std::time::Instant, u64, u64)> = None;
    let mut host_pages = 0u64;
    while let Some((op, phase)) = generator.next(&mut rng, &view) {
        if phase == Phase::Measured && measured.is_none() {
            measured = Some((std::time::Instant::now(), peer.programs, peer.gc_copies));
        }
        if phase == Phase::Measured {
            host_pages += op.written_pages();
        }
        peer.apply(&op);
    }
    let (started, programs, copies) =
        measured.unwrap_or((std::time::Instant::now(), peer.programs, peer.gc_copies));
    Ok(PeerRun {
        host_pages_written: host_pages,
        programs: peer.programs - programs,
        gc_copies: peer.gc_copies - copies,
        wall_s: started.elapsed().as_secs_f64(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small() -> Geometry {
        flash::DeviceConfig::preset("small").unwrap().geometry
    }

    /// The peer's result is a function of the request stream: the same seed gives the same
    /// counts, and every host page is programmed once plus what GC copies.
    #[test]
    fn the_peer_plays_the_same_stream_for_the_same_seed() {
        let g = small();
        let logical = (g.pages() as f64 * 0.9) as u32;
        let mut spec = WorkloadSpec::named("randwrite").unwrap();
        spec.fill = 0.9;
        spec.requests = 50_000;
        let a = play(&g, logical, &spec, 3).unwrap();
        let b = play(&g, logical, &spec, 3).unwrap();
        assert_eq!((a.programs, a.gc_copies), (b.programs, b.gc_copies));
        assert_eq!(a.host_pages_written, 50_000);
        assert_eq!(a.programs, a.host_pages_written + a.gc_copies);
        assert!(a.gc_copies > 0, "a 90 % full device collects garbage");
        let c = play(&g, logical, &spec, 4).unwrap();
        assert_ne!(a.gc_copies, c.gc_copies, "another seed, another stream");
    }

    /// The peer keeps exactly the last write of every page: after random writes and trims,
    /// each mapped page is live and owned by its LPN, and no other page is live.
    #[test]
    fn the_peer_maps_every_page_to_its_last_write() {
        let g = small();
        let logical = (g.pages() as f64 * 0.85) as u32;
        let mut spec = WorkloadSpec::named("randwrite").unwrap();
        spec.fill = 0.5;
        spec.trim_fraction = 0.1;
        spec.requests = 30_000;
        let mut generator = Generator::new(&spec, logical, None).unwrap();
        let mut rng = <rand_chacha::ChaCha8Rng as rand::SeedableRng>::seed_from_u64(9);
        let view = View {
            now_ns: 0,
            inflight_static: &[],
        };
        let mut peer = PagePeer::new(&g, logical);
        while let Some((op, _)) = generator.next(&mut rng, &view) {
            peer.apply(&op);
        }
        let mut live = 0;
        for (lpn, &ppn) in peer.map.iter().enumerate() {
            if !ppn.is_none() {
                assert_eq!(peer.validity.owner(ppn), Some(lpn as u32));
                live += 1;
            }
        }
        let valid: u32 = (0..g.blocks())
            .map(|b| peer.validity.valid_count(BlockId(b)))
            .sum();
        assert_eq!(valid, live);
        assert!(peer.gc_copies > 0);
    }
}
