//! Mount-time recovery (§III-D; redo log [R]): replay a committed cleaning transaction, walk the
//! namespace from the root, free what nothing reaches, and load — or reset — the LRU lists.
//!
//! The LRU lists and `page_info` are trusted only when no update of them was in progress
//! (`lists_state == 0`) and they agree with the inodes; otherwise they are reset as the paper
//! says: every NVRAM page an inode points to goes to the dirty list, the clean list is empty,
//! `page_info` is dropped (losing it cannot break consistency, §III-B). The NVRAM and SSD
//! bitmaps, the SSD owner table and the per-inode block counts are always rebuilt from the
//! inodes, so blocks allocated by an interrupted operation (an orphan flushed extent, a
//! migrated page whose transaction never committed) are free again.

use super::Nvmfs;
use crate::error::{NvmfsError, Result};
use crate::layout::*;
use crate::lru::Lru;

/// Calls `f(block, pointer offset, address)` for every non-hole data block pointer of `ino`.
pub(crate) fn for_each_block(fs: &Nvmfs, ino: u32, mut f: impl FnMut(u64, u64, BlockAddr)) {
    let inode = fs.read_inode(ino);
    let at = fs.inode_at(ino);
    for (i, a) in inode.direct.iter().enumerate() {
        if !a.is_hole() {
            f(i as u64, at + INODE_DIRECT_AT as u64 + 8 * i as u64, *a);
        }
    }
    let walk = |page: u32, first: u64, f: &mut dyn FnMut(u64, u64, BlockAddr)| {
        for k in 0..POINTERS_PER_BLOCK {
            let slot = fs.data_at(page) + 8 * k;
            let a = BlockAddr(fs.get64(slot));
            if !a.is_hole() {
                f(first + k, slot, a);
            }
        }
    };
    if let Some(ind) = inode.indirect.as_nvram() {
        walk(ind, DIRECT_POINTERS as u64, &mut f);
    }
    if let Some(d) = inode.double_indirect.as_nvram() {
        for j in 0..POINTERS_PER_BLOCK {
            if let Some(ind) = BlockAddr(fs.get64(fs.data_at(d) + 8 * j)).as_nvram() {
                walk(
                    ind,
                    DIRECT_POINTERS as u64 + POINTERS_PER_BLOCK * (1 + j),
                    &mut f,
                );
            }
        }
    }
}

/// The indirect pages of `ino`, checked to lie in the data area.
fn indirect_pages(fs: &Nvmfs, ino: u32) -> Result<Vec<u32>> {
    let inode = fs.read_inode(ino);
    let mut out = Vec::new();
    let ok = |a: BlockAddr| -> Result<Option<u32>> {
        match a.as_nvram() {
            Some(p) if p < fs.sb.data_pages => Ok(Some(p)),
            None if a.is_hole() => Ok(None),
            _ => Err(NvmfsError::Corrupt(format!(
                "inode {ino}: bad indirect pointer {a:?}"
            ))),
        }
    };
    if let Some(p) = ok(inode.indirect)? {
        out.push(p);
    }
    if let Some(d) = ok(inode.double_indirect)? {
        out.push(d);
        for j in 0..POINTERS_PER_BLOCK {
            if let Some(p) = ok(BlockAddr(fs.get64(fs.data_at(d) + 8 * j)))? {
                out.push(p);
            }
        }
    }
    Ok(out)
}

fn replay_redo(fs: &mut Nvmfs) -> Result<bool> {
    let redo_at = fs.sb.redo_at as u64 * PAGE_BYTES;
    let page = &fs.nv.bytes()[redo_at as usize..(redo_at + PAGE_BYTES) as usize];
    let Ok(log) = RedoLog::decode(page) else {
        put_u32(fs.nv.bytes_mut(), redo_at as usize, 0);
        return Ok(false);
    };
    for e in &log.entries {
        // Idempotent: set the pointer to its new address. The extent's release follows from
        // the bitmap rebuild (nothing points into it any more).
        if let Some(slot) = fs.slot(e.ino, e.block as u64, false)? {
            put_u64(fs.nv.bytes_mut(), slot as usize, e.new_addr.0);
        }
    }
    fs.nv.persist_all()?;
    put_u32(fs.nv.bytes_mut(), redo_at as usize, 0);
    Ok(true)
}

fn reachable_inodes(fs: &mut Nvmfs) -> Result<Vec<bool>> {
    let count = fs.sb.inode_count;
    let mut live = vec![false; count as usize];
    live[ROOT_INO as usize] = true;
    let mut stack = vec![ROOT_INO];
    let mut page = vec![0u8; PAGE_BYTES as usize];
    while let Some(dir) = stack.pop() {
        let size = fs.read_inode(dir).size;
        let mut blocks = Vec::new();
        for_each_block(fs, dir, |b, _, a| blocks.push((b, a)));
        for (b, a) in blocks {
            if b * PAGE_BYTES >= size {
                continue;
            }
            if let Some(p) = a.as_nvram().filter(|&p| p < fs.sb.data_pages) {
                let at = fs.data_at(p) as usize;
                page.copy_from_slice(&fs.nv.bytes()[at..at + PAGE_BYTES as usize]);
            } else if let Some(lba) = a.as_ssd().filter(|&l| l < fs.sb.ssd_blocks) {
                fs.ssd_read(lba, &mut page)?;
            } else {
                return Err(NvmfsError::Corrupt(format!(
                    "directory {dir}: bad pointer {a:?}"
                )));
            }
            let valid = ((size - b * PAGE_BYTES).min(PAGE_BYTES) / DIRENT_BYTES) as usize;
            for c in page.chunks_exact(DIRENT_BYTES as usize).take(valid) {
                let Ok(Some(e)) = DirEntry::decode(c) else {
                    continue;
                };
                if e.ino == 0 || e.ino >= count || live[e.ino as usize] {
                    continue;
                }
                let child = fs.read_inode(e.ino);
                if child.mode == 0 {
                    continue;
                }
                live[e.ino as usize] = true;
                if child.is_dir() {
                    stack.push(e.ino);
                }
            }
        }
    }
    Ok(live)
}

pub(crate) fn recover(fs: &mut Nvmfs) -> Result<()> {
    let sb = fs.sb.clone();
    let redo_replayed = replay_redo(fs)?;
    let live = reachable_inodes(fs)?;
    let mut owners = claim_blocks(fs, &sb, &live)?;
    // The lists are trusted only if no update was in progress and they match the inodes.
    let trusted = !redo_replayed && get_u32(fs.nv.bytes(), SB_LISTS_STATE as usize) == 0;
    let second_copy = if trusted {
        lists_agree_with_inodes(fs, &sb, &owners)
    } else {
        None
    };
    let consistent = second_copy.is_some();
    let lists = match &second_copy {
        Some(copies) => load_lists(fs, &mut owners, copies),
        None => reset_lists(&owners),
    };
    let second_copy = second_copy.unwrap_or_else(|| vec![None; sb.data_pages as usize]);
    let (lo, hi) = (lists.lo, lists.hi);
    let (lru, nv_free) = rewrite_page_records(fs, &sb, &owners, lists, &second_copy);
    let ext_valid = rewrite_ssd_tables(fs, &sb, &owners.ssd);
    put_u32(fs.nv.bytes_mut(), SB_LISTS_STATE as usize, 0);
    put_u32(fs.nv.bytes_mut(), SB_CLEAN_UNMOUNT as usize, 0);
    fs.nv.persist_all()?;
    fs.lru = lru;
    fs.nv_free = nv_free;
    fs.inode_free = owners.inode_free;
    fs.ext_valid = ext_valid;
    fs.stamp_hi = hi;
    fs.stamp_lo = lo;
    fs.stats.lists_reset_at_mount = !consistent;
    fs.stats.redo_replayed_at_mount = redo_replayed;
    Ok(())
}

/// Who owns each block, from the inodes alone (recovery step 3).
struct Owners {
    /// Per NVRAM data page: (inode, file block) of the pointer to it.
    nvram: Vec<Option<(u32, u32)>>,
    /// Per NVRAM data page: an indirect block of some live inode.
    indirect: Vec<bool>,
    /// Per SSD block: (inode, file block) of the pointer to it.
    ssd: Vec<Option<(u32, u32)>>,
    /// Unreachable inodes (cleared), highest first.
    inode_free: Vec<u32>,
}

/// Clears every unreachable inode and claims the blocks of every live one: each block may be
/// referenced once; pointers beyond EOF (an interrupted truncate) are dropped; each inode's
/// block counts are rewritten.
fn claim_blocks(fs: &mut Nvmfs, sb: &Superblock, live: &[bool]) -> Result<Owners> {
    let data_pages = sb.data_pages as usize;
    let mut owners = Owners {
        nvram: vec![None; data_pages],
        indirect: vec![false; data_pages],
        ssd: vec![None; sb.ssd_blocks as usize],
        inode_free: Vec::new(),
    };
    for ino in (1..sb.inode_count).rev() {
        if !live[ino as usize] {
            if fs.read_inode(ino).mode != 0 {
                Inode::default().encode(fs.inode_slice(ino));
            }
            owners.inode_free.push(ino);
            continue;
        }
        claim_inode(fs, sb, ino, &mut owners)?;
    }
    Ok(owners)
}

/// [`claim_blocks`] for one live inode.
fn claim_inode(fs: &mut Nvmfs, sb: &Superblock, ino: u32, owners: &mut Owners) -> Result<()> {
    let data_pages = sb.data_pages as usize;
    let twice = |what: &str, n: u64| NvmfsError::Corrupt(format!("{what} {n} referenced twice"));
    for p in indirect_pages(fs, ino)? {
        if owners.indirect[p as usize] || owners.nvram[p as usize].is_some() {
            return Err(twice("NVRAM page", p as u64));
        }
        owners.indirect[p as usize] = true;
    }
    let size = fs.read_inode(ino).size;
    if size > MAX_FILE_BYTES {
        // No write makes a file this long; reading it (a directory's lookups read it whole)
        // would ask for that much memory.
        return Err(NvmfsError::Corrupt(format!(
            "inode {ino}: size {size} is beyond the largest file"
        )));
    }
    let blocks = size.div_ceil(PAGE_BYTES);
    let mut ptrs = Vec::new();
    for_each_block(fs, ino, |b, slot, a| ptrs.push((b, slot, a)));
    let (mut n_nv, mut n_ssd) = (0u32, 0u32);
    for (b, slot, a) in ptrs {
        if b >= blocks {
            // Left behind by an interrupted truncate: beyond EOF, so drop it.
            put_u64(fs.nv.bytes_mut(), slot as usize, 0);
            continue;
        }
        let owner = Some((ino, b as u32));
        if let Some(p) = a.as_nvram().filter(|&p| (p as usize) < data_pages) {
            if owners.indirect[p as usize] || owners.nvram[p as usize].is_some() {
                return Err(twice("NVRAM page", p as u64));
            }
            owners.nvram[p as usize] = owner;
            n_nv += 1;
        } else if let Some(l) = a.as_ssd().filter(|&l| l < sb.ssd_blocks) {
            if owners.ssd[l as usize].is_some() {
                return Err(twice("SSD block", l));
            }
            owners.ssd[l as usize] = owner;
            n_ssd += 1;
        } else {
            return Err(NvmfsError::Corrupt(format!(
                "inode {ino}: bad pointer {a:?}"
            )));
        }
    }
    let at = fs.inode_at(ino) as usize;
    put_u32(fs.nv.bytes_mut(), at + INODE_NVRAM_BLOCKS_AT, n_nv);
    put_u32(fs.nv.bytes_mut(), at + INODE_SSD_BLOCKS_AT, n_ssd);
    Ok(())
}

/// Whether every page record agrees with the inodes: a dirty page names its owner; a clean one
/// names its owner and a second copy on an SSD block no inode and no other page claims; a page
/// no inode points to is on neither list. Returns each clean page's second copy if so.
fn lists_agree_with_inodes(
    fs: &Nvmfs,
    sb: &Superblock,
    owners: &Owners,
) -> Option<Vec<Option<u64>>> {
    let data_pages = sb.data_pages as usize;
    let mut second_copy: Vec<Option<u64>> = vec![None; data_pages];
    let mut claimed = vec![false; sb.ssd_blocks as usize];
    // p indexes the page records, the owners and the second copies alike
    #[allow(clippy::needless_range_loop)]
    for p in 0..data_pages {
        let rec = fs.read_record(p as u32);
        let ok = match owners.nvram[p] {
            Some(o) => match rec.list {
                PageList::Dirty => rec.page_info.is_hole() && (rec.owner_ino, rec.owner_block) == o,
                PageList::Clean => {
                    let l = rec.page_info.as_ssd().filter(|&l| l < sb.ssd_blocks);
                    let fine = (rec.owner_ino, rec.owner_block) == o
                        && l.is_some_and(|l| {
                            owners.ssd[l as usize].is_none() && !claimed[l as usize]
                        });
                    if fine {
                        claimed[l.unwrap() as usize] = true;
                        second_copy[p] = l;
                    }
                    fine
                }
                _ => false,
            },
            None => !matches!(rec.list, PageList::Dirty | PageList::Clean),
        };
        if !ok {
            return None;
        }
    }
    Some(second_copy)
}

/// The LRU lists and the stamp of every page on them, as recovery rebuilt them.
struct Lists {
    lru: Lru,
    /// Per NVRAM data page: its stamp (0 off the lists).
    stamps: Vec<u64>,
    /// Stamps in use are above `lo` and at most `hi`.
    lo: u64,
    hi: u64,
}

/// Trusted lists: every owned page back on its list in stamp order, keeping its stamp; each
/// clean page's second copy becomes an owned SSD block.
fn load_lists(fs: &Nvmfs, owners: &mut Owners, second_copy: &[Option<u64>]) -> Lists {
    let data_pages = owners.nvram.len() as u32;
    let mut lists = Lists {
        lru: Lru::new(data_pages),
        stamps: vec![0; data_pages as usize],
        lo: (1u64 << 62) - 1,
        hi: 1u64 << 62,
    };
    let mut order: Vec<(u64, u32)> = (0..data_pages)
        .filter(|&p| owners.nvram[p as usize].is_some())
        .map(|p| (fs.read_record(p).stamp, p))
        .collect();
    order.sort_unstable();
    for &(stamp, p) in &order {
        let list = fs.read_record(p).list;
        lists.lru.push_mru(list, p);
        lists.stamps[p as usize] = stamp;
        lists.hi = lists.hi.max(stamp);
        lists.lo = lists.lo.min(stamp.saturating_sub(1));
    }
    for (p, l) in second_copy.iter().enumerate() {
        if let Some(l) = l {
            owners.ssd[*l as usize] = owners.nvram[p];
        }
    }
    lists
}

/// Reset lists (§III-B): every NVRAM page an inode points to is dirty, the clean list empty;
/// fresh stamps in list order, the LRU end lowest.
fn reset_lists(owners: &Owners) -> Lists {
    let data_pages = owners.nvram.len() as u32;
    let mut lru = Lru::new(data_pages);
    for p in 0..data_pages {
        if owners.nvram[p as usize].is_some() {
            lru.push_mru(PageList::Dirty, p);
        }
    }
    let lo = (1u64 << 62) - 1;
    let mut stamps = vec![0u64; data_pages as usize];
    let mut stamp = lo;
    let pages: Vec<u32> = lru.iter(PageList::Dirty).collect();
    for &p in pages.iter().rev() {
        stamp += 1;
        stamps[p as usize] = stamp;
    }
    Lists {
        lru,
        stamps,
        lo,
        hi: stamp,
    }
}

/// Rewrites every page record and the NVRAM bitmap from the rebuilt state: owned pages with
/// their list and stamp, indirect blocks off the lists, the rest free. Returns the lists and
/// the free pages (highest first).
fn rewrite_page_records(
    fs: &mut Nvmfs,
    sb: &Superblock,
    owners: &Owners,
    lists: Lists,
    second_copy: &[Option<u64>],
) -> (Lru, Vec<u32>) {
    let Lists {
        mut lru, stamps, ..
    } = lists;
    let mut nv_free = Vec::new();
    for p in (0..sb.data_pages).rev() {
        let i = p as usize;
        let rec = if let Some((ino, b)) = owners.nvram[i] {
            PageRecord {
                list: lru.list_of(p),
                owner_ino: ino,
                owner_block: b,
                stamp: stamps[i],
                page_info: second_copy[i].map_or(BlockAddr::HOLE, BlockAddr::ssd),
            }
        } else if owners.indirect[i] {
            lru.set_off_list(p, PageList::Indirect);
            PageRecord {
                list: PageList::Indirect,
                owner_block: u32::MAX,
                ..PageRecord::FREE
            }
        } else {
            nv_free.push(p);
            PageRecord::FREE
        };
        let at = fs.record_at(p) as usize;
        rec.encode(&mut fs.nv.bytes_mut()[at..at + PAGE_RECORD_BYTES as usize]);
        let used = owners.nvram[i].is_some() || owners.indirect[i];
        set_bit_raw(fs, sb.nvram_bitmap_at, p as u64, used);
    }
    (lru, nv_free)
}

/// Rewrites the SSD bitmap, the SSD owner table and the per-extent "partly valid" flags from
/// the owners; returns the valid blocks per extent.
fn rewrite_ssd_tables(fs: &mut Nvmfs, sb: &Superblock, ssd: &[Option<(u32, u32)>]) -> Vec<u32> {
    let mut ext_valid = vec![0u32; sb.extents() as usize];
    for l in 0..sb.ssd_blocks {
        let o = ssd[l as usize];
        set_bit_raw(fs, sb.ssd_bitmap_at, l, o.is_some());
        let v = o.map_or(0, |(ino, b)| ino as u64 | (b as u64) << 32);
        let at = fs.owner_at(l) as usize;
        put_u64(fs.nv.bytes_mut(), at, v);
        ext_valid[(l / EXTENT_BLOCKS) as usize] += o.is_some() as u32;
    }
    for (e, v) in ext_valid.iter().enumerate() {
        let at = sb.extent_flags_at as usize * PAGE_BYTES as usize + 4 * e;
        put_u32(
            fs.nv.bytes_mut(),
            at,
            (*v > 0 && *v < EXTENT_BLOCKS as u32) as u32,
        );
    }
    ext_valid
}

fn set_bit_raw(fs: &mut Nvmfs, region_page: u32, idx: u64, on: bool) {
    let at = (region_page as u64 * PAGE_BYTES + idx / 8) as usize;
    let b = &mut fs.nv.bytes_mut()[at];
    if on {
        *b |= 1 << (idx % 8);
    } else {
        *b &= !(1 << (idx % 8));
    }
}
