//! Cache hints: start loading memory the simulator is about to read, so that its wait for DRAM
//! overlaps other work (issue #19: a random write on a large device reads several structures
//! far larger than the CPU's cache). A hint changes no state and cannot fault.

/// Asks the CPU to bring `value`'s cache line in (a no-op where there is no such instruction).
#[inline]
pub fn read<T: ?Sized>(value: &T) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        // SAFETY: a prefetch is a hint: it reads nothing into the program and cannot fault,
        // whatever the address; SSE is part of every x86_64 target.
        unsafe { _mm_prefetch::<_MM_HINT_T0>((value as *const T).cast()) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = value;
}

/// The loads of reading a page's bytes at an offset from a tag-only store, in the order they
/// happen: the page's state and slot number, the slot's header, the byte itself. Each needs the
/// one before it in the cache, so a design that knows such a read is coming hints it a step at
/// a time, some work apart ([`crate::Flash::prefetch_data_at`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DataHint {
    PageEntry,
    KeptBytes,
    Bytes,
}

#[cfg(test)]
mod tests {
    /// A hint on a value or a slice, empty or not, leaves everything as it was.
    #[test]
    fn hints_change_nothing() {
        let page = vec![7u8; 4096];
        super::read(&page[100]);
        super::read(&page[..]);
        super::read(&page[..0]);
        assert!(page.iter().all(|&b| b == 7));
    }
}
