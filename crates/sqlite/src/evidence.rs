//! What the store did that a crash checker judging media faults needs (issue #69;
//! docs/reliability.md, "Under SQLite"): every page image the store wrote to the device and
//! when, the flushes that made them durable, and the logical pages whose reads the device
//! answered as uncorrectable. SQLite itself sees only SQLITE_IOERR (the VFS cannot say which
//! page failed), so the checker reads it here. Kept only while a caller [`watch`]es, per thread,
//! as the flash's error log is (`flash::media::error_log`): nothing is recorded otherwise.

use flash::{Content, Lpn};
use std::cell::RefCell;
use std::hash::{Hash, Hasher};

/// One page image the store wrote.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Written {
    pub lpn: u32,
    /// [`page_hash`] of the image.
    pub hash: u64,
    /// When the write was issued (the store's clock).
    pub issued_ns: u64,
}

/// What the store did while watched.
#[derive(Clone, Debug, Default)]
pub struct Evidence {
    /// Every page image written, in issue order.
    pub writes: Vec<Written>,
    /// Every flush as (writes issued before it, its acknowledgement): those writes are durable
    /// from then on. (Counted, not timed: a flush and the write after it may share an instant.)
    pub flushes: Vec<(usize, u64)>,
    /// Logical pages whose reads came back uncorrectable, in order.
    pub uncorrectable: Vec<u32>,
    /// Errors of the device (through the host layer) that the VFS answered SQLite with an
    /// SQLITE_IOERR for, in order.
    pub device_errors: Vec<host::HostError>,
}

thread_local! {
    static WATCHED: RefCell<Option<Evidence>> = const { RefCell::new(None) };
}

/// Runs `f` and returns its result with what the store did on this thread meanwhile. Inside
/// another watch, the outer one sees it all too.
pub fn watch<T>(f: impl FnOnce() -> T) -> (T, Evidence) {
    let outer = WATCHED.with(|w| w.borrow_mut().replace(Evidence::default()));
    let out = f();
    let seen = WATCHED
        .with(|w| std::mem::replace(&mut *w.borrow_mut(), outer))
        .unwrap_or_default();
    note(|o| o.append(&seen));
    (out, seen)
}

/// What the innermost watch on this thread has seen so far (empty when none watches).
pub fn so_far() -> Evidence {
    WATCHED.with(|w| w.borrow().clone().unwrap_or_default())
}

impl Evidence {
    fn append(&mut self, more: &Evidence) {
        let before = self.writes.len();
        self.writes.extend(&more.writes);
        self.flushes
            .extend(more.flushes.iter().map(|&(n, ack)| (before + n, ack)));
        self.uncorrectable.extend(&more.uncorrectable);
        self.device_errors
            .extend(more.device_errors.iter().cloned());
    }
}

fn note(f: impl FnOnce(&mut Evidence)) {
    WATCHED.with(|w| {
        if let Some(e) = w.borrow_mut().as_mut() {
            f(e)
        }
    });
}

/// The hash a page image is known by: of its bytes as a page of `page_bytes` reads them.
pub fn page_hash(content: &Content, page_bytes: usize) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    content.to_page_bytes(page_bytes).hash(&mut h);
    h.finish()
}

/// Pages `first..` written with `pages` at `issued_ns`.
pub(crate) fn wrote<'a>(
    pages: impl IntoIterator<Item = (Lpn, &'a Content)>,
    page_bytes: usize,
    issued_ns: u64,
) {
    note(|e| {
        for (lpn, c) in pages {
            e.writes.push(Written {
                lpn: lpn.0,
                hash: page_hash(c, page_bytes),
                issued_ns,
            });
        }
    });
}

pub(crate) fn flushed(ack_ns: u64) {
    note(|e| e.flushes.push((e.writes.len(), ack_ns)));
}

/// The VFS answers SQLite's request with `code` because the store failed with `error`: returns
/// `code`, noting a device error.
pub(crate) fn refused(error: &crate::SqlError, code: std::ffi::c_int) -> std::ffi::c_int {
    if let crate::SqlError::Device(e) = error {
        note(|ev| ev.device_errors.push(e.clone()));
    }
    code
}

pub(crate) fn uncorrectable(lpn: u32) {
    note(|e| e.uncorrectable.push(lpn));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_watched_thread_records_and_the_hash_is_the_page_s() {
        let page = Content::Bytes(vec![7u8; 16].into_boxed_slice());
        wrote([(Lpn(1), &page)], 16, 5);
        let ((), e) = watch(|| {
            wrote([(Lpn(3), &page)], 16, 9);
            flushed(12);
            uncorrectable(3);
        });
        assert_eq!(e.writes.len(), 1);
        assert_eq!(e.writes[0].lpn, 3);
        assert_eq!(e.flushes, vec![(1, 12)]);
        assert_eq!(e.uncorrectable, vec![3]);
        let ((((), inner), ()), outer) = watch(|| {
            wrote([(Lpn(3), &page)], 16, 9);
            (
                watch(|| {
                    wrote([(Lpn(3), &page)], 16, 10);
                    flushed(11);
                    uncorrectable(4)
                }),
                uncorrectable(5),
            )
        });
        assert_eq!(
            (inner.uncorrectable, outer.uncorrectable),
            (vec![4], vec![4, 5])
        );
        assert_eq!(
            (inner.flushes, outer.flushes),
            (vec![(1, 11)], vec![(2, 11)])
        );
        let short = Content::Bytes(vec![7u8; 8].into_boxed_slice());
        assert_ne!(page_hash(&page, 16), page_hash(&short, 16));
        let padded = Content::Bytes([vec![7u8; 8], vec![0u8; 8]].concat().into_boxed_slice());
        assert_eq!(page_hash(&short, 16), page_hash(&padded, 16));
    }
}
