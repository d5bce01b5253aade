//! NVRAM emulated by a memory-mapped file (§III-A): byte-addressable, updated in place, and
//! persistent across process death (a MAP_SHARED mapping's stores reach the file even when the
//! process is killed).
//!
//! Durable ordering ([R]): every metadata record is followed by `persist(range)`, the
//! emulation's "flush the cache lines and fence". By default it is a fence only, which is exact
//! for process death (the kernel keeps every store of a killed process); with `strict` it also
//! msyncs the range, which orders the stores for a machine crash too, at the cost of a
//! synchronous file write per record. Data is always persisted before the pointer to it.

use crate::error::{NvmfsError, Result};
use memmap2::{MmapMut, MmapOptions};
use std::fs::OpenOptions;
use std::path::Path;
use std::sync::atomic::{fence, Ordering};

pub struct Nvram {
    map: MmapMut,
    strict: bool,
    persists: u64,
}

impl Nvram {
    /// Creates (or replaces) a zeroed NVRAM file of `bytes` bytes.
    pub fn create(path: &Path, bytes: u64, strict: bool) -> Result<Nvram> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)?;
        file.set_len(bytes)?;
        // SAFETY: the file is ours for the file system's lifetime; no one else maps it.
        let map = unsafe { MmapOptions::new().map_mut(&file)? };
        Ok(Nvram {
            map,
            strict,
            persists: 0,
        })
    }

    pub fn open(path: &Path, strict: bool) -> Result<Nvram> {
        let file = OpenOptions::new().read(true).write(true).open(path)?;
        if file.metadata()?.len() < 4096 {
            return Err(NvmfsError::Corrupt(format!(
                "{} is too short to be an NVRAM image",
                path.display()
            )));
        }
        // SAFETY: as in `create`.
        let map = unsafe { MmapOptions::new().map_mut(&file)? };
        Ok(Nvram {
            map,
            strict,
            persists: 0,
        })
    }

    pub fn len(&self) -> u64 {
        self.map.len() as u64
    }
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
    pub fn bytes(&self) -> &[u8] {
        &self.map
    }
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.map
    }
    /// Persist points issued so far.
    pub fn persists(&self) -> u64 {
        self.persists
    }

    /// Makes `[at, at+len)` durable before any later store (cache-line flush + fence).
    pub fn persist(&mut self, at: u64, len: u64) -> Result<()> {
        fence(Ordering::SeqCst);
        if self.strict {
            self.map.flush_range(at as usize, len as usize)?;
        }
        self.persists += 1;
        Ok(())
    }

    /// Makes the whole NVRAM durable (fsync / unmount).
    pub fn persist_all(&mut self) -> Result<()> {
        fence(Ordering::SeqCst);
        self.map.flush()?;
        Ok(())
    }
}
