//! Möbius parameters (§IV, §V; [R] where the paper is silent) and the reserved-block layout.

use flash::{BlockId, ChipId, Geometry};
use ftl::{DesignOptions, FtlError, GcPolicy};

/// GC's free-block mark by default (`gc_free_blocks`, §IV-D leaves it open [R]): its floor,
/// [`min_gc_free_blocks`].
pub fn default_gc_free_blocks(g: &Geometry) -> u32 {
    min_gc_free_blocks(g)
}

/// Free blocks recovery takes before GC can free one: the chain's next page, GC's copies.
const RECOVERY_FREE_BLOCKS: u32 = 2;

/// The least `gc_free_blocks`: one free block per chip, so that a victim's copies (spread over
/// the chips) find room on every chip, plus two, since GC's copies take a free block while the
/// count is already below the mark and a cut can leave two fewer; and never below
/// [`RECOVERY_FREE_BLOCKS`] + 2 (recovery closes the open blocks and takes two before GC frees
/// one). `chips + 2` on one chip left recovery stranded (soak seed 20264152, docs/mobius.md
/// "GC keeps room for recovery"); `RECOVERY_FREE_BLOCKS + 2` alone on four chips did too, with
/// cost-benefit GC, whose victims hold more live pages (crashtest seed 660101, torn).
pub fn min_gc_free_blocks(g: &Geometry) -> u32 {
    (g.chips() + 2).max(RECOVERY_FREE_BLOCKS + 2)
}

/// Test-only bug injection: the crash campaign must catch each of these.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InjectBug {
    None,
    /// Recovery commits unflagged inodes without reading their data pages' OOB.
    SkipVerify,
    /// Commit flags are emitted before the transaction's data pages are on flash.
    FlagEarly,
    /// The validity rebuild that ends recovery takes the Resident Area only, leaving the pages
    /// that translation pages map invalid (a rebuild that recovery's own merge or GC needs is
    /// right): reads after recovery are right, but GC later erases those pages' blocks without
    /// copying them. Only a second life (work after recovery, then another cut) can catch it.
    StaleValidity,
}

#[derive(Clone, Debug)]
pub struct MobiusConfig {
    /// Inodes a tx may stay unflagged behind the ALA tail (decision M3; default 16).
    pub s_max: u32,
    /// Active ALA size in inodes (12 MB / page size by default; §IV-C).
    pub active_ala_pages: u64,
    /// Blocks in the ALA ring (500 MB by default), a multiple of `ala_stripe`.
    pub ala_blocks: u32,
    /// Blocks (on as many chips) a ring slot stripes consecutive atom inodes over, so that
    /// independent transactions commit in parallel and recovery scans the ALA on every chip at
    /// once (§IV-C: "continuous physical addresses can enhance internal parallelism of SSD and
    /// shorten the scanning time"). Default: every chip where the ring holds three slots, else 1.
    pub ala_stripe: u32,
    /// c, % of DRAM for the cached mapping table (20).
    pub c_percent: f64,
    /// Controller DRAM in bytes (64 MiB).
    pub dram_bytes: u64,
    /// Evicting Area (§III-F): DRAM for cached translation pages, the (100 − c) % of `dram_bytes`
    /// the Resident Area leaves (`evicting_kb` overrides it, for tests of eviction).
    pub evicting_bytes: u64,
    pub inject_bug: InjectBug,
    /// Merge static txs of fewer than `small_tx_pages` pages into one atom inode (§IV-E; on).
    pub merge_small: bool,
    /// The paper's threshold: fewer than 10 pages.
    pub small_tx_pages: u32,
    /// How long a group stays open for more members (our choice: one page-program time, so
    /// the next group fills while an inode programs). Set by `Mobius::empty` from the timing
    /// unless `merge_window_us` is given.
    pub merge_window_ns: u64,
    /// §IV-D: a superseded page becomes invalid (GC may take its block) only once the newer
    /// mapping is merged into a translation page. Off by default (see docs/mobius.md).
    pub deferred_invalidation: bool,
    /// GC's victim choice (§IV-D: "Except ALA, garbage collection scheme is the same as DFTL",
    /// so Möbius takes the policies DFTL does): greedy (default) or cost-benefit, always among
    /// the blocks no pin holds (docs/mobius.md "Mapping, merge, GC").
    pub gc_policy: GcPolicy,
    /// GC runs while fewer blocks are free ([`default_gc_free_blocks`], at least
    /// [`min_gc_free_blocks`]); the mark is also kept out of the exported capacity.
    pub gc_free_blocks: u32,
}

pub const KNOWN: &[&str] = &[
    "s_max",
    "active_ala_mb",
    "ala_mb",
    "c_percent",
    "dram_mb",
    "evicting_kb",
    "merge_small",
    "small_tx_pages",
    "merge_window_us",
    "inject_bug",
    "deferred_invalidation",
    "ala_stripe",
    "gc_policy",
    "gc_free_blocks",
];

/// A switch parameter: `on`/`true` or `off`/`false`, `default` when absent.
fn on_off(o: &DesignOptions, key: &str, default: bool) -> Result<bool, FtlError> {
    match o.params.get(key).map(String::as_str) {
        None => Ok(default),
        Some("on") | Some("true") => Ok(true),
        Some("off") | Some("false") => Ok(false),
        Some(v) => Err(FtlError::InvalidOption(format!("{key}={v}: on or off"))),
    }
}

impl MobiusConfig {
    /// Paper defaults; on a device too small for a 500 MB ALA (the `small` preset) the ALA is
    /// scaled to 1/25 of the blocks (at least 4) and the active part to a third of the ring, so
    /// that merges and ring wrap happen in tests (documented in docs/mobius.md).
    pub fn from_options(g: &Geometry, o: &DesignOptions) -> Result<MobiusConfig, FtlError> {
        o.check_known("mobius", KNOWN)?;
        let page = g.page_bytes as u64;
        let block = g.block_bytes();
        let ala_mb: f64 = o.get("ala_mb", 500.0)?;
        let active_mb: f64 = o.get("active_ala_mb", 12.0)?;
        let mut ala_blocks = ((ala_mb * 1048576.0) as u64).div_ceil(block) as u32;
        let cap = (g.blocks() / 25).max(4);
        let scaled = ala_blocks > cap;
        ala_blocks = ala_blocks.min(cap);
        let stripe_default = if ala_blocks >= 3 * g.chips() {
            g.chips()
        } else {
            1
        };
        let stripe: u32 = o.get("ala_stripe", stripe_default)?;
        if stripe == 0 || stripe > g.chips() {
            return Err(FtlError::InvalidOption(format!(
                "ala_stripe={stripe} must be between 1 and the {} chips",
                g.chips()
            )));
        }
        // Whole slots of `stripe` blocks, at least four of them.
        ala_blocks = ala_blocks.max(4 * stripe) / stripe * stripe;
        let mut active = (active_mb * 1048576.0) as u64 / page;
        let ring_pages = ala_blocks as u64 * g.pages_per_block as u64;
        let slot_pages = stripe as u64 * g.pages_per_block as u64;
        // Slack of three slots: the one the tail is in, the next one (erased ahead), and the
        // rest of a slot a recovery leaves behind when it skips a hole (recovery.rs).
        if scaled {
            active = active
                .min(ring_pages / 3)
                .min(ring_pages.saturating_sub(3 * slot_pages));
        }
        if active + 3 * slot_pages > ring_pages {
            return Err(FtlError::InvalidOption(format!(
                "active ALA of {active} inodes does not fit a ring of {ala_blocks} blocks with three slots of {stripe} blocks of slack"
            )));
        }
        let bug = match o.params.get("inject_bug").map(String::as_str) {
            None | Some("none") => InjectBug::None,
            Some("skip_verify") => InjectBug::SkipVerify,
            Some("flag_early") => InjectBug::FlagEarly,
            Some("stale_validity") => InjectBug::StaleValidity,
            Some(v) => {
                return Err(FtlError::InvalidOption(format!(
                    "inject_bug={v}: none, skip_verify, flag_early, stale_validity"
                )))
            }
        };
        let c = MobiusConfig {
            s_max: o.get("s_max", 16)?,
            active_ala_pages: active.max(4),
            ala_blocks,
            ala_stripe: stripe,
            c_percent: o.get("c_percent", 20.0)?,
            dram_bytes: (o.get("dram_mb", 64.0f64)? * 1048576.0) as u64,
            evicting_bytes: 0,
            merge_small: on_off(o, "merge_small", true)?,
            small_tx_pages: o.get("small_tx_pages", 10)?,
            merge_window_ns: (o.get("merge_window_us", 0.0f64)? * 1000.0) as u64,
            inject_bug: bug,
            deferred_invalidation: on_off(o, "deferred_invalidation", false)?,
            gc_policy: o.get::<String>("gc_policy", "greedy".into())?.parse()?,
            gc_free_blocks: ftl::gc_free_blocks(
                o,
                "mobius",
                default_gc_free_blocks(g),
                min_gc_free_blocks(g),
            )?,
        };
        let mut c = c;
        let evicting_default = c.dram_bytes as f64 * (100.0 - c.c_percent).max(0.0) / 100.0;
        c.evicting_bytes = (o.get("evicting_kb", evicting_default / 1024.0)? * 1024.0) as u64;
        if c.evicting_bytes < 2 * page {
            return Err(FtlError::InvalidOption(format!(
                "the Evicting Area ({} B) must hold at least two translation pages of {page} B",
                c.evicting_bytes
            )));
        }
        if c.s_max < 2 {
            return Err(FtlError::InvalidOption("s_max must be at least 2".into()));
        }
        // Decision M1: the worst-case Resident Area must fit c % of DRAM.
        let items = crate::format::inode_capacity(g.page_bytes, crate::format::InodeKind::Static);
        let resident = c.active_ala_pages * items as u64 * 8;
        let budget = c.dram_bytes as f64 * c.c_percent / 100.0;
        if resident as f64 > budget {
            return Err(FtlError::InvalidOption(format!(
                "active ALA of {} inodes needs a Resident Area of {resident} B > c={}% of {} B DRAM; raise c_percent (20 MB needs c >= 31) or lower active_ala_mb",
                c.active_ala_pages, c.c_percent, c.dram_bytes
            )));
        }
        Ok(c)
    }

    /// Parts a multipart transaction may have: half the verification window, so every part of
    /// an unflagged transaction can be verified (decision M10).
    pub fn max_parts(&self) -> u32 {
        (self.s_max / 2).max(1)
    }
}

/// Reserved blocks: two GM blocks (alternating slots, decision M16) and the ALA ring striped over
/// chips.
#[derive(Clone, Debug)]
pub struct Layout {
    pub gm: [BlockId; 2],
    pub ala: Vec<BlockId>,
    reserved: Vec<bool>,
    /// Blocks marked in `reserved` (counted once: every SWRITE asks, via the largest
    /// transaction, and a scan of every block cost a fifth of a Möbius run's time).
    reserved_count: u32,
}

impl Layout {
    pub fn new(g: &Geometry, ala_blocks: u32) -> Layout {
        let chips = g.chips();
        let mut reserved = vec![false; g.blocks() as usize];
        let gm = [
            g.block(ChipId(0), 0),
            g.block(ChipId(1 % chips), if chips > 1 { 0 } else { 1 }),
        ];
        for b in gm {
            reserved[b.0 as usize] = true;
        }
        let mut ala = Vec::new();
        let mut k = 0u32;
        while (ala.len() as u32) < ala_blocks {
            let chip = ChipId(k % chips);
            let idx = 1 + k / chips;
            let b = g.block(chip, idx);
            if !reserved[b.0 as usize] {
                reserved[b.0 as usize] = true;
                ala.push(b);
            }
            k += 1;
        }
        let reserved_count = reserved.iter().filter(|r| **r).count() as u32;
        Layout {
            gm,
            ala,
            reserved,
            reserved_count,
        }
    }
    pub fn is_reserved(&self, b: BlockId) -> bool {
        self.reserved[b.0 as usize]
    }
    pub fn reserved_count(&self) -> u32 {
        self.reserved_count
    }
}
