//! FAST's recovery: everything from the OOB records (FAST keeps its maps in RAM only).
//!
//! 1. **Scan** every page's OOB record: per logical page the largest `seq` found (its newest
//!    version; a merge copy and its source share it) and whether an RW log page holds it; per
//!    block its role, logical block and generation.
//! 2. **Assign roles**: RW-kind blocks are the RW log, oldest generation first (the youngest, if
//!    not full, is the current RW log block); the youngest SW-only block that is an unbroken run
//!    of offsets 0, 1, 2… up to its write pointer is the SW log block. Each logical block's data
//!    block is the youngest of its blocks through which (with the SW log block and the RW log)
//!    every one of its pages reaches a newest version: a merge cut short leaves its new block
//!    incomplete but every source intact (sources are erased only after the copies end), so the
//!    old data block is chosen and the merge is as if never begun; a merge whose copies all
//!    ended is kept.
//! 3. **Repair** a logical block no candidate serves (a partial merge cut short, a torn SW log
//!    page): it is full-merged into a fresh block from its newest versions, oldest copy first.
//!    Every block with no role is erased (it holds no newest version, or no longer). There is
//!    always a block to repair with: normal operation lets at most one merge be part-way at a
//!    time (`Fast::take_block`), so a cut leaves at most one logical block's old blocks pinned
//!    beyond what the pool spares.

use crate::fast::{Fast, SwLog};
use crate::format::{Kind, PageOob, OOB_BYTES};
use flash::{BlockId, Flash, OpCause, PageState, Ppn};
use ftl::{media, BlockDevice, DesignOptions, FtlError, RecoveryReport};

/// What the scan learnt about one block.
#[derive(Clone, Copy, Debug, Default)]
struct BlockScan {
    /// Any page not erased (programmed or torn), or a torn erase.
    used: bool,
    data: bool,
    sw: bool,
    rw: bool,
    /// Logical block of its data/SW records (the first one's; others are ignored).
    lbn: Option<u32>,
    gen: u64,
    /// Leading offsets holding SW records of their own offset, none torn.
    sw_run: u32,
}

struct Scan {
    /// `seq` of the record on each page (0: none).
    page_seq: Vec<u64>,
    /// Per logical page: the largest `seq` found (0: never written).
    max_seq: Vec<u64>,
    /// Per logical page: an RW log page holding its largest `seq`.
    rw_max: Vec<Ppn>,
    blocks: Vec<BlockScan>,
    /// Data/SW blocks by logical block, youngest first.
    candidates: Vec<Vec<BlockId>>,
    max_seq_seen: u64,
    max_gen: u64,
}

/// Recovers FAST from what is on flash.
pub fn recover(
    flash: Flash,
    o: &DesignOptions,
) -> Result<(Box<dyn BlockDevice>, RecoveryReport), FtlError> {
    let before = flash.stats().clone();
    let start = flash.idle_ns();
    let mut dev = Fast::empty(flash, o)?;
    let scan = scan(&mut dev, start)?;
    dev.seq = scan.max_seq_seen + 1;
    dev.gen = scan.max_gen;
    dev.merges_end_ns = start;
    adopt_logs(&mut dev, &scan);
    let broken = choose_data_blocks(&mut dev, &scan);
    mark_newest(&mut dev, &scan, &broken);
    let mut erased = free_blocks_without_role(&mut dev, &scan, start)?;
    for &lbn in &broken {
        let sources = repair_sources(&dev, &scan, lbn);
        dev.merge_from(lbn, &sources, start, OpCause::Recovery)?;
        // The repaired block's old blocks lose their role: freed, they are what the next
        // repair writes to (a torn cut can leave two logical blocks broken, one free block).
        erased += free_blocks_without_role(&mut dev, &scan, start)?;
    }
    while dev.rw.len() as u32 + dev.frontier.is_some() as u32 > dev.params.rw_log_blocks {
        let b = dev.recycle_oldest_log(start)?;
        dev.free.put(b);
    }
    let mut report = RecoveryReport::measure(&dev.flash, &before, start);
    report.details = vec![
        ("repaired_logical_blocks".into(), broken.len() as f64),
        ("blocks_erased".into(), erased as f64),
        (
            "rw_log_blocks_found".into(),
            (dev.rw.len() + dev.frontier.is_some() as usize) as f64,
        ),
    ];
    Ok((Box::new(dev), report))
}

/// Step 1: reads every page's OOB record.
fn scan(dev: &mut Fast, start: u64) -> Result<Scan, FtlError> {
    let g = dev.flash.geometry().clone();
    let lbns = dev.data.len();
    let mut s = Scan {
        page_seq: vec![0; g.pages() as usize],
        max_seq: vec![0; dev.logical as usize],
        rw_max: vec![Ppn::NONE; dev.logical as usize],
        blocks: vec![BlockScan::default(); g.blocks() as usize],
        candidates: vec![Vec::new(); lbns],
        max_seq_seen: 0,
        max_gen: 0,
    };
    let mut oob = [0u8; OOB_BYTES as usize];
    for b in 0..g.blocks() {
        let block = BlockId(b);
        s.blocks[b as usize].used = dev.flash.block_erase_torn(block);
        let mut run_open = true;
        for p in 0..g.pages_per_block {
            let ppn = g.ppn(block, p);
            let (state, _) = dev
                .flash
                .read_oob(ppn, &mut oob, start, OpCause::Recovery)?;
            if state != PageState::Erased {
                s.blocks[b as usize].used = true;
            }
            // A record that does not read is a torn program's, or — its page lost to the media
            // whole — one whose version no other page names (docs/reliability.md).
            if state == PageState::Torn && media::undecided_lost(&dev.flash, ppn) {
                return Err(FtlError::MediaLoss {
                    ppn,
                    what: "the OOB record of a FAST page".into(),
                });
            }
            let rec = match state {
                PageState::Programmed => PageOob::decode(&oob).ok(),
                _ => None,
            };
            let bs = &mut s.blocks[b as usize];
            let Some(rec) =
                rec.filter(|r| r.lpn < dev.logical && fits(bs, r, p, g.pages_per_block))
            else {
                run_open = false;
                continue;
            };
            note_record(bs, &rec, p, &mut run_open, g.pages_per_block);
            s.page_seq[ppn.0 as usize] = rec.seq;
            s.max_seq_seen = s.max_seq_seen.max(rec.seq);
            s.max_gen = s.max_gen.max(rec.gen);
            let lpn = rec.lpn as usize;
            if rec.seq > s.max_seq[lpn] {
                s.max_seq[lpn] = rec.seq;
                s.rw_max[lpn] = Ppn::NONE;
            }
            if rec.seq == s.max_seq[lpn] && rec.kind == Kind::Rw {
                s.rw_max[lpn] = ppn;
            }
        }
        let bs = s.blocks[b as usize];
        if let Some(lbn) = bs.lbn.filter(|_| !bs.rw) {
            s.candidates[lbn as usize].push(block);
        }
    }
    for c in s.candidates.iter_mut() {
        c.sort_by_key(|b| std::cmp::Reverse(s.blocks[b.0 as usize].gen));
    }
    Ok(s)
}

/// Whether a record belongs where it was found: one block holds one role, and a data or SW
/// block holds its logical block's pages at their own offsets. Anything else is ignored.
fn fits(bs: &BlockScan, r: &PageOob, page: u32, ppb: u32) -> bool {
    match r.kind {
        Kind::Rw => !bs.data && !bs.sw,
        Kind::Data | Kind::Sw => {
            r.lpn % ppb == page && !bs.rw && bs.lbn.is_none_or(|l| l == r.lpn / ppb)
        }
    }
}

fn note_record(bs: &mut BlockScan, rec: &PageOob, page: u32, run_open: &mut bool, ppb: u32) {
    match rec.kind {
        Kind::Data => bs.data = true,
        Kind::Sw => bs.sw = true,
        Kind::Rw => bs.rw = true,
    }
    bs.gen = bs.gen.max(rec.gen);
    if rec.kind != Kind::Rw {
        bs.lbn = Some(rec.lpn / ppb);
    }
    if *run_open && rec.kind == Kind::Sw && rec.lpn % ppb == page {
        bs.sw_run = page + 1;
    } else {
        *run_open = false;
    }
}

/// Step 2a: the RW log (oldest first, the youngest open one as the current block) and the SW
/// log block.
fn adopt_logs(dev: &mut Fast, scan: &Scan) {
    let ppb = dev.ppb;
    let mut rw: Vec<u32> = (0..scan.blocks.len() as u32)
        .filter(|&b| scan.blocks[b as usize].rw)
        .collect();
    rw.sort_by_key(|&b| scan.blocks[b as usize].gen);
    if let Some(&young) = rw.last() {
        let next = dev.flash.write_pointer(BlockId(young));
        if next < ppb {
            rw.pop();
            dev.frontier = Some((BlockId(young), next));
        }
    }
    dev.rw = rw.into_iter().map(BlockId).collect();
    let sw = (0..scan.blocks.len() as u32)
        .filter(|&b| {
            let s = &scan.blocks[b as usize];
            s.sw && !s.data
                && s.sw_run > 0
                && s.sw_run < ppb
                && dev.flash.write_pointer(BlockId(b)) == s.sw_run
        })
        .max_by_key(|&b| scan.blocks[b as usize].gen);
    if let Some(b) = sw {
        let s = &scan.blocks[b as usize];
        dev.sw = Some(SwLog {
            lbn: s.lbn.expect("an SW block names its logical block"),
            block: BlockId(b),
            next: s.sw_run,
            // Already on flash: nothing of it is in flight after recovery.
            end_ns: 0,
        });
    }
    let logs = dev.rw.iter().copied().chain(dev.frontier.map(|f| f.0));
    for b in logs.chain(dev.sw.map(|s| s.block)).collect::<Vec<_>>() {
        dev.block_gen[b.0 as usize] = scan.blocks[b.0 as usize].gen;
    }
}

/// Step 2b: each logical block's data block, youngest candidate first; returns the logical
/// blocks no candidate serves (to repair). An SW log block whose logical block has no other
/// block is its data block.
fn choose_data_blocks(dev: &mut Fast, scan: &Scan) -> Vec<u32> {
    let mut broken = Vec::new();
    for lbn in 0..scan.candidates.len() as u32 {
        let sw_block = dev.sw.filter(|s| s.lbn == lbn).map(|s| s.block);
        let candidates: Vec<BlockId> = scan.candidates[lbn as usize]
            .iter()
            .copied()
            .filter(|&b| Some(b) != sw_block)
            .collect();
        if candidates.is_empty() {
            if let Some(block) = sw_block {
                dev.sw = None;
                if serves(dev, scan, lbn, block) {
                    dev.data[lbn as usize] = block;
                    dev.block_gen[block.0 as usize] = scan.blocks[block.0 as usize].gen;
                } else {
                    broken.push(lbn);
                }
            }
            continue;
        }
        match candidates.iter().find(|&&c| serves(dev, scan, lbn, c)) {
            Some(&c) => {
                dev.data[lbn as usize] = c;
                dev.block_gen[c.0 as usize] = scan.blocks[c.0 as usize].gen;
            }
            None => broken.push(lbn),
        }
    }
    broken
}

/// Whether `lbn`'s pages all reach a newest version with `data` as its data block: through
/// the RW log, else the SW log block where it holds the offset, else `data`'s page.
fn serves(dev: &Fast, scan: &Scan, lbn: u32, data: BlockId) -> bool {
    (0..dev.ppb).all(|off| {
        let lpn = lbn * dev.ppb + off;
        reached_via(dev, scan, lpn, data)
            .is_none_or(|p| scan.page_seq[p.0 as usize] == scan.max_seq[lpn as usize])
    })
}

/// Step 2c: marks live the version each logical page now reaches (for a logical block to
/// repair: the version its merge will copy) and fills the RW log's page map.
fn mark_newest(dev: &mut Fast, scan: &Scan, broken: &[u32]) {
    for lbn in 0..dev.data.len() as u32 {
        let sources = if broken.binary_search(&lbn).is_ok() {
            repair_sources(dev, scan, lbn)
        } else {
            (0..dev.ppb)
                .map(|off| reached(dev, scan, lbn * dev.ppb + off))
                .collect()
        };
        for (off, ppn) in sources.into_iter().enumerate() {
            let Some(ppn) = ppn else { continue };
            let lpn = lbn * dev.ppb + off as u32;
            dev.validity.set_valid(ppn, lpn);
            if scan.rw_max[lpn as usize] == ppn {
                dev.log_map.insert(lpn, ppn);
            }
        }
    }
}

/// The page holding `lpn`'s newest version that the maps reach.
fn reached(dev: &Fast, scan: &Scan, lpn: u32) -> Option<Ppn> {
    reached_via(dev, scan, lpn, dev.data[(lpn / dev.ppb) as usize])
}

/// The page the maps send `lpn` to with `data` as its data block, in `Fast::locate`'s order
/// (the RW log's page holding the newest version, the SW log block where it holds the offset,
/// the data block's page); `None` for a page never written.
fn reached_via(dev: &Fast, scan: &Scan, lpn: u32, data: BlockId) -> Option<Ppn> {
    if scan.max_seq[lpn as usize] == 0 {
        return None;
    }
    if !scan.rw_max[lpn as usize].is_none() {
        return Some(scan.rw_max[lpn as usize]);
    }
    let (lbn, off) = (lpn / dev.ppb, lpn % dev.ppb);
    if let Some(sw) = dev.sw.filter(|s| s.lbn == lbn && off < s.next) {
        return Some(dev.ppn(sw.block, off));
    }
    Some(dev.ppn(data, off))
}

/// For a logical block to repair: per offset the oldest block's page holding the newest
/// version (so a merge target cut short is left unused, and free), else the RW log's.
fn repair_sources(dev: &Fast, scan: &Scan, lbn: u32) -> Vec<Option<Ppn>> {
    (0..dev.ppb)
        .map(|off| {
            let lpn = (lbn * dev.ppb + off) as usize;
            if scan.max_seq[lpn] == 0 {
                return None;
            }
            let oldest = scan.candidates[lbn as usize]
                .iter()
                .rev()
                .map(|&b| dev.ppn(b, off))
                .find(|p| scan.page_seq[p.0 as usize] == scan.max_seq[lpn]);
            oldest.or(Some(scan.rw_max[lpn]).filter(|p| !p.is_none()))
        })
        .collect()
}

/// Puts every block that has no role and holds no live page into the pool, erasing it first if
/// the scan found anything on it. Returns the blocks erased.
fn free_blocks_without_role(dev: &mut Fast, scan: &Scan, start: u64) -> Result<u64, FtlError> {
    let roles = dev.roles();
    let mut erased = 0;
    for (b, (&roles, found)) in roles.iter().zip(&scan.blocks).enumerate() {
        let block = BlockId(b as u32);
        if roles > 0 || dev.validity.valid_count(block) > 0 {
            continue;
        }
        if found.used || dev.flash.write_pointer(block) > 0 {
            dev.erase(block, start, OpCause::Recovery)?;
            erased += 1;
        }
        dev.free.put(block);
    }
    Ok(erased)
}
