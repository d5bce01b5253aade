//! [`MemoryBackend`]: a RAM image for tests and examples. Completion time = arrival time plus
//! an optional fixed latency; a few fault hooks let tests provoke EIO and ENOSPC.

use crate::{BackendError, NbdBackend};

/// Size of the sectors that [`MemoryBackend::poison_sector`] marks uncorrectable.
pub const SECTOR_BYTES: u64 = 512;

/// A `Vec<u8>` image.
#[derive(Debug, Clone)]
pub struct MemoryBackend {
    image: Vec<u8>,
    preferred_block_size: u32,
    multi_conn_safe: bool,
    /// Added to the arrival time of every request to give its completion time.
    pub latency_ns: u64,
    /// Sector indexes whose reads fail with [`BackendError::Io`] (an uncorrectable page).
    poisoned_sectors: Vec<u64>,
    /// When set, writes and write-zeroes fail with [`BackendError::NoSpace`].
    pub out_of_space: bool,
    /// Number of successful flushes, so tests can see that shutdown flushed.
    pub flush_count: u64,
    /// Number of backend calls of any kind.
    pub call_count: u64,
}

impl MemoryBackend {
    /// A zero-filled image of `size_bytes`, preferred block size 4096, not multi-conn safe.
    pub fn new(size_bytes: u64) -> Self {
        let size = usize::try_from(size_bytes).expect("image must fit in memory");
        MemoryBackend {
            image: vec![0; size],
            preferred_block_size: 4096,
            multi_conn_safe: false,
            latency_ns: 0,
            poisoned_sectors: Vec::new(),
            out_of_space: false,
            flush_count: 0,
            call_count: 0,
        }
    }

    pub fn with_preferred_block_size(mut self, bytes: u32) -> Self {
        self.preferred_block_size = bytes;
        self
    }

    pub fn with_multi_conn_safe(mut self, safe: bool) -> Self {
        self.multi_conn_safe = safe;
        self
    }

    pub fn with_latency_ns(mut self, latency_ns: u64) -> Self {
        self.latency_ns = latency_ns;
        self
    }

    /// Makes reads of the 512-byte sector at `offset` fail with EIO until it is rewritten.
    pub fn poison_sector(&mut self, offset: u64) {
        self.poisoned_sectors.push(offset / SECTOR_BYTES);
    }

    pub fn image(&self) -> &[u8] {
        &self.image
    }

    pub fn image_mut(&mut self) -> &mut [u8] {
        &mut self.image
    }

    fn range(&self, offset: u64, len: u64) -> Result<std::ops::Range<usize>, BackendError> {
        let end = offset.checked_add(len).ok_or(BackendError::OutOfRange)?;
        if end > self.image.len() as u64 {
            return Err(BackendError::OutOfRange);
        }
        Ok(offset as usize..end as usize)
    }

    fn unpoison(&mut self, offset: u64, len: u64) {
        let first = offset / SECTOR_BYTES;
        let end = (offset + len).div_ceil(SECTOR_BYTES);
        self.poisoned_sectors.retain(|s| *s < first || *s >= end);
    }
}

impl NbdBackend for MemoryBackend {
    fn size_bytes(&self) -> u64 {
        self.image.len() as u64
    }

    fn preferred_block_size(&self) -> u32 {
        self.preferred_block_size
    }

    fn multi_conn_safe(&self) -> bool {
        self.multi_conn_safe
    }

    fn read(&mut self, offset: u64, buf: &mut [u8], arrival_ns: u64) -> Result<u64, BackendError> {
        self.call_count += 1;
        let r = self.range(offset, buf.len() as u64)?;
        let first = offset / SECTOR_BYTES;
        let end = (offset + buf.len() as u64).div_ceil(SECTOR_BYTES);
        if let Some(s) = self
            .poisoned_sectors
            .iter()
            .find(|s| **s >= first && **s < end)
        {
            return Err(BackendError::Io(format!("sector {s} is uncorrectable")));
        }
        buf.copy_from_slice(&self.image[r]);
        Ok(arrival_ns + self.latency_ns)
    }

    fn write(
        &mut self,
        offset: u64,
        data: &[u8],
        _fua: bool,
        arrival_ns: u64,
    ) -> Result<u64, BackendError> {
        self.call_count += 1;
        let r = self.range(offset, data.len() as u64)?;
        if self.out_of_space {
            return Err(BackendError::NoSpace);
        }
        self.image[r].copy_from_slice(data);
        self.unpoison(offset, data.len() as u64);
        Ok(arrival_ns + self.latency_ns)
    }

    fn flush(&mut self, arrival_ns: u64) -> Result<u64, BackendError> {
        self.call_count += 1;
        self.flush_count += 1;
        Ok(arrival_ns + self.latency_ns)
    }

    fn trim(&mut self, offset: u64, len: u64, arrival_ns: u64) -> Result<u64, BackendError> {
        self.call_count += 1;
        // Trimmed data reads back as zeroes, like an FTL that unmaps the pages.
        let r = self.range(offset, len)?;
        self.image[r].fill(0);
        self.unpoison(offset, len);
        Ok(arrival_ns + self.latency_ns)
    }

    fn write_zeroes(
        &mut self,
        offset: u64,
        len: u64,
        _fua: bool,
        arrival_ns: u64,
    ) -> Result<u64, BackendError> {
        self.call_count += 1;
        let r = self.range(offset, len)?;
        if self.out_of_space {
            return Err(BackendError::NoSpace);
        }
        self.image[r].fill(0);
        self.unpoison(offset, len);
        Ok(arrival_ns + self.latency_ns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_read_trim_round_trip() {
        let mut m = MemoryBackend::new(4096).with_latency_ns(10);
        assert_eq!(m.write(512, &[7u8; 512], false, 100), Ok(110));
        let mut buf = [0u8; 1024];
        m.read(0, &mut buf, 0).unwrap();
        assert!(buf[..512].iter().all(|b| *b == 0) && buf[512..].iter().all(|b| *b == 7));
        m.trim(512, 512, 0).unwrap();
        m.read(0, &mut buf, 0).unwrap();
        assert!(buf.iter().all(|b| *b == 0));
        assert_eq!(m.read(4096, &mut buf, 0), Err(BackendError::OutOfRange));
    }

    #[test]
    fn poisoned_sector_fails_reads_until_rewritten() {
        let mut m = MemoryBackend::new(4096);
        m.poison_sector(1024);
        let mut buf = [0u8; 512];
        assert!(matches!(
            m.read(1024, &mut buf, 0),
            Err(BackendError::Io(_))
        ));
        assert!(m.read(512, &mut buf, 0).is_ok());
        m.write(1024, &buf, false, 0).unwrap();
        assert!(m.read(1024, &mut buf, 0).is_ok());
    }
}
