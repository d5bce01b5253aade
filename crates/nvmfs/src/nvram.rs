//! NVRAM emulated by a memory-mapped file (§III-A): byte-addressable, updated in place, and
//! persistent across process death (a MAP_SHARED mapping's stores reach the file even when the
//! process is killed).
//!
//! Durable ordering ([R]): every metadata record is followed by `persist(range)`, the
//! emulation's "flush the cache lines and fence". By default it is a fence only, which is exact
//! for process death (the kernel keeps every store of a killed process); with `strict` it also
//! msyncs the range, which orders the stores for a machine crash too, at the cost of a
//! synchronous file write per record. Data is always persisted before the pointer to it.
//!
//! One process per NVRAM file: it is held under an exclusive lock while mapped
//! (`flash::image_lock`, as the SSD image is), so a second mount of the same images is refused
//! before either file is touched.

use crate::error::{NvmfsError, Result};
use memmap2::{MmapMut, MmapOptions};
use std::fs::OpenOptions;
use std::path::Path;
use std::sync::atomic::{fence, Ordering};

pub struct Nvram {
    map: MmapMut,
    /// The open file, which holds the exclusive lock (one process per NVRAM image,
    /// `flash::image_lock`); the mapping outlives a closed descriptor, the lock does not.
    _file: std::fs::File,
    strict: bool,
    persists: u64,
}

impl Nvram {
    /// Creates (or replaces) a zeroed NVRAM file of `bytes` bytes.
    pub fn create(path: &Path, bytes: u64, strict: bool) -> Result<Nvram> {
        // Locked before it is emptied: a file another process holds is refused untouched.
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)?;
        flash::image_lock::lock_exclusive(&file, path)?;
        file.set_len(0)?;
        file.set_len(bytes)?;
        // SAFETY: the file is ours for the file system's lifetime (its lock keeps other
        // mobius processes out); no one else maps it.
        let map = unsafe { MmapOptions::new().map_mut(&file)? };
        Ok(Nvram {
            map,
            _file: file,
            strict,
            persists: 0,
        })
    }

    pub fn open(path: &Path, strict: bool) -> Result<Nvram> {
        let file = OpenOptions::new().read(true).write(true).open(path)?;
        flash::image_lock::lock_exclusive(&file, path)?;
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
            _file: file,
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

#[cfg(test)]
mod tests {
    use super::*;

    /// One process per NVRAM file: a second create or open while it is mapped is refused with
    /// the image lock's error, and the mapped contents stay as they were.
    #[test]
    fn a_mapped_nvram_file_is_refused_a_second_time() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nvram.img");
        let mut first = Nvram::create(&path, 8192, false).unwrap();
        first.bytes_mut()[100] = 0x5a;
        for second in [Nvram::open(&path, false), Nvram::create(&path, 8192, false)] {
            let err = second.err().expect("a held NVRAM file must be refused");
            assert!(
                matches!(
                    err,
                    NvmfsError::Flash(flash::FlashError::ImageLocked { .. })
                ),
                "{err}"
            );
        }
        assert_eq!(
            std::fs::read(&path).unwrap()[100],
            0x5a,
            "refused, untouched"
        );
        drop(first);
        assert_eq!(Nvram::open(&path, false).unwrap().bytes()[100], 0x5a);
    }
}
