//! The memory the simulation's arrays hold: made resident up front, counted for the memory
//! reports.

/// `n` copies of `value`, every memory page of them written now. A zeroed vector is otherwise
/// mapped lazily and each memory page is faulted in (and zeroed by the kernel) when first
/// touched: on a large device that cost falls on the first writes to each region, inside a
/// benchmark's measured phase, and on a virtual machine a first-touch fault costs milliseconds
/// per 2 MB. The per-page arrays every run touches are made resident at construction instead.
pub fn resident_vec<T: Copy>(n: usize, value: T) -> Vec<T> {
    let mut v = Vec::with_capacity(n);
    // Keeps the compiler from turning allocate-then-fill back into a lazily zeroed allocation.
    std::hint::black_box(&mut v);
    v.resize(n, value);
    v
}

/// Writes one byte of every memory page of `v` with the value it holds, so that each page is
/// faulted in now ([`resident_vec`] does the same to an array as it allocates it).
pub fn fault_in(v: &mut [u8]) {
    const MEMORY_PAGE: usize = 4096;
    for i in (0..v.len()).step_by(MEMORY_PAGE) {
        v[i] = std::hint::black_box(v[i]);
    }
}

/// Heap bytes a vector holds (its capacity).
pub fn vec_bytes<T>(v: &Vec<T>) -> u64 {
    (v.capacity() * std::mem::size_of::<T>()) as u64
}

/// Heap bytes a deque holds (its capacity).
pub fn deque_bytes<T>(v: &std::collections::VecDeque<T>) -> u64 {
    (v.capacity() * std::mem::size_of::<T>()) as u64
}
