//! The SQLite VFS: glue from SQLite's C callbacks to [`Store`]. Every decision about what
//! reaches the device is in `store.rs`; this file only translates calls and error codes.
//!
//! One VFS is registered per [`crate::Database`] under a unique name, so several databases on
//! several devices can live in one process. The database, its rollback journal and its WAL
//! live on the device; temporary files and the WAL index (`-shm`) live in RAM, as SQLite's own
//! `unix-excl` VFS keeps the WAL index. Randomness and time come from the VFS (seeded, and the
//! device's simulated clock), so a run is reproducible.

use crate::error::SqlError;
use crate::layout::FileKind;
use crate::store::{CommitOutcome, Mode, Store};
use libsqlite3_sys as ffi;
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

pub(crate) type Shared = Arc<Mutex<Store>>;

struct VfsState {
    store: Shared,
    rng: ChaCha8Rng,
}

/// What a SQLite file handle refers to.
enum Backing {
    Device(FileKind),
    /// Temporary files: RAM only.
    Memory(Vec<u8>),
}

struct Handle {
    store: Shared,
    backing: Backing,
    /// WAL-index regions (`xShmMap`), in RAM.
    shm: Vec<Box<[u8]>>,
}

#[repr(C)]
struct File {
    base: ffi::sqlite3_file,
    handle: *mut Handle,
}

/// A registered VFS; unregistered on drop (after every connection using it is closed).
pub(crate) struct Registration {
    vfs: *mut ffi::sqlite3_vfs,
    state: *mut VfsState,
    name: CString,
}

// The raw pointers are owned by the registration and only used by SQLite under the store's lock.
unsafe impl Send for Registration {}

impl Registration {
    pub(crate) fn name(&self) -> &str {
        self.name.to_str().expect("ascii name")
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        unsafe {
            ffi::sqlite3_vfs_unregister(self.vfs);
            drop(Box::from_raw(self.vfs));
            drop(Box::from_raw(self.state));
        }
    }
}

static NEXT_VFS: AtomicU64 = AtomicU64::new(1);

pub(crate) fn register(store: Shared, seed: u64) -> Result<Registration, SqlError> {
    let name = CString::new(format!(
        "mobius-{}",
        NEXT_VFS.fetch_add(1, Ordering::Relaxed)
    ))
    .expect("no NUL");
    let state = Box::into_raw(Box::new(VfsState {
        store,
        rng: ChaCha8Rng::seed_from_u64(seed),
    }));
    let vfs = Box::into_raw(Box::new(ffi::sqlite3_vfs {
        iVersion: 1,
        szOsFile: std::mem::size_of::<File>() as c_int,
        mxPathname: 512,
        pNext: std::ptr::null_mut(),
        zName: name.as_ptr(),
        pAppData: state as *mut c_void,
        xOpen: Some(x_open),
        xDelete: Some(x_delete),
        xAccess: Some(x_access),
        xFullPathname: Some(x_full_pathname),
        xDlOpen: Some(x_dl_open),
        xDlError: Some(x_dl_error),
        xDlSym: Some(x_dl_sym),
        xDlClose: Some(x_dl_close),
        xRandomness: Some(x_randomness),
        xSleep: Some(x_sleep),
        xCurrentTime: Some(x_current_time),
        xGetLastError: Some(x_get_last_error),
        xCurrentTimeInt64: None,
        xSetSystemCall: None,
        xGetSystemCall: None,
        xNextSystemCall: None,
    }));
    let rc = unsafe { ffi::sqlite3_vfs_register(vfs, 0) };
    if rc != ffi::SQLITE_OK {
        unsafe {
            drop(Box::from_raw(vfs));
            drop(Box::from_raw(state));
        }
        return Err(SqlError::Sqlite(rusqlite::Error::SqliteFailure(
            ffi::Error::new(rc),
            Some("sqlite3_vfs_register failed".into()),
        )));
    }
    Ok(Registration { vfs, state, name })
}

static IO_METHODS: ffi::sqlite3_io_methods = ffi::sqlite3_io_methods {
    iVersion: 2,
    xClose: Some(x_close),
    xRead: Some(x_read),
    xWrite: Some(x_write),
    xTruncate: Some(x_truncate),
    xSync: Some(x_sync),
    xFileSize: Some(x_file_size),
    xLock: Some(x_lock),
    xUnlock: Some(x_unlock),
    xCheckReservedLock: Some(x_check_reserved_lock),
    xFileControl: Some(x_file_control),
    xSectorSize: Some(x_sector_size),
    xDeviceCharacteristics: Some(x_device_characteristics),
    xShmMap: Some(x_shm_map),
    xShmLock: Some(x_shm_lock),
    xShmBarrier: Some(x_shm_barrier),
    xShmUnmap: Some(x_shm_unmap),
    xFetch: None,
    xUnfetch: None,
};

/// Runs a callback body, turning a panic into an I/O error instead of unwinding into C.
fn guard(f: impl FnOnce() -> c_int) -> c_int {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(ffi::SQLITE_IOERR)
}

unsafe fn state<'a>(vfs: *mut ffi::sqlite3_vfs) -> &'a mut VfsState {
    &mut *((*vfs).pAppData as *mut VfsState)
}

unsafe fn handle<'a>(file: *mut ffi::sqlite3_file) -> &'a mut Handle {
    &mut *(*(file as *mut File)).handle
}

/// The device file a path names: the database, `<db>-journal` or `<db>-wal`.
unsafe fn kind_of_name(name: *const c_char) -> Option<FileKind> {
    if name.is_null() {
        return None;
    }
    let name = CStr::from_ptr(name).to_string_lossy();
    if name.ends_with("-journal") {
        Some(FileKind::Journal)
    } else if name.ends_with("-wal") {
        Some(FileKind::Wal)
    } else if name.ends_with("-shm") || name.ends_with("-mj") || name.contains("-mj") {
        None
    } else {
        Some(FileKind::Db)
    }
}

fn kind_of_flags(flags: c_int) -> Option<FileKind> {
    if flags & ffi::SQLITE_OPEN_MAIN_DB != 0 {
        Some(FileKind::Db)
    } else if flags & ffi::SQLITE_OPEN_MAIN_JOURNAL != 0 {
        Some(FileKind::Journal)
    } else if flags & ffi::SQLITE_OPEN_WAL != 0 {
        Some(FileKind::Wal)
    } else {
        None
    }
}

unsafe extern "C" fn x_open(
    vfs: *mut ffi::sqlite3_vfs,
    _name: ffi::sqlite3_filename,
    file: *mut ffi::sqlite3_file,
    flags: c_int,
    out_flags: *mut c_int,
) -> c_int {
    (*file).pMethods = std::ptr::null();
    guard(|| {
        let st = state(vfs);
        let backing = match kind_of_flags(flags) {
            Some(kind) => {
                let mut store = st.store.lock().expect("store lock");
                if !store.exists(kind) {
                    if flags & ffi::SQLITE_OPEN_CREATE == 0 {
                        return ffi::SQLITE_CANTOPEN;
                    }
                    store.create(kind);
                }
                Backing::Device(kind)
            }
            None => Backing::Memory(Vec::new()),
        };
        let h = Box::new(Handle {
            store: st.store.clone(),
            backing,
            shm: Vec::new(),
        });
        (*(file as *mut File)).handle = Box::into_raw(h);
        (*file).pMethods = &IO_METHODS;
        if !out_flags.is_null() {
            *out_flags = flags;
        }
        ffi::SQLITE_OK
    })
}

unsafe extern "C" fn x_delete(
    vfs: *mut ffi::sqlite3_vfs,
    name: *const c_char,
    sync_dir: c_int,
) -> c_int {
    guard(|| {
        let Some(kind) = kind_of_name(name) else {
            return ffi::SQLITE_OK;
        };
        let mut store = state(vfs).store.lock().expect("store lock");
        match store.delete(kind, sync_dir != 0) {
            Ok(()) => ffi::SQLITE_OK,
            Err(e) => crate::evidence::refused(&e, ffi::SQLITE_IOERR_DELETE),
        }
    })
}

unsafe extern "C" fn x_access(
    vfs: *mut ffi::sqlite3_vfs,
    name: *const c_char,
    _flags: c_int,
    out: *mut c_int,
) -> c_int {
    guard(|| {
        let exists = match kind_of_name(name) {
            Some(kind) => state(vfs).store.lock().expect("store lock").exists(kind),
            None => false,
        };
        *out = exists as c_int;
        ffi::SQLITE_OK
    })
}

unsafe extern "C" fn x_full_pathname(
    _vfs: *mut ffi::sqlite3_vfs,
    name: *const c_char,
    n_out: c_int,
    out: *mut c_char,
) -> c_int {
    let bytes = CStr::from_ptr(name).to_bytes_with_nul();
    if bytes.len() > n_out as usize {
        return ffi::SQLITE_CANTOPEN;
    }
    std::ptr::copy_nonoverlapping(bytes.as_ptr() as *const c_char, out, bytes.len());
    ffi::SQLITE_OK
}

unsafe extern "C" fn x_dl_open(_vfs: *mut ffi::sqlite3_vfs, _name: *const c_char) -> *mut c_void {
    std::ptr::null_mut()
}

unsafe extern "C" fn x_dl_error(_vfs: *mut ffi::sqlite3_vfs, n: c_int, out: *mut c_char) {
    let msg = b"extensions cannot be loaded on the mobius VFS\0";
    let len = msg.len().min(n.max(0) as usize);
    if len > 0 {
        std::ptr::copy_nonoverlapping(msg.as_ptr() as *const c_char, out, len);
        *out.add(len - 1) = 0;
    }
}

unsafe extern "C" fn x_dl_sym(
    _vfs: *mut ffi::sqlite3_vfs,
    _lib: *mut c_void,
    _sym: *const c_char,
) -> Option<unsafe extern "C" fn(*mut ffi::sqlite3_vfs, *mut c_void, *const c_char)> {
    None
}

unsafe extern "C" fn x_dl_close(_vfs: *mut ffi::sqlite3_vfs, _lib: *mut c_void) {}

unsafe extern "C" fn x_randomness(vfs: *mut ffi::sqlite3_vfs, n: c_int, out: *mut c_char) -> c_int {
    let st = state(vfs);
    for i in 0..n.max(0) as usize {
        *out.add(i) = st.rng.random::<u8>() as c_char;
    }
    n
}

unsafe extern "C" fn x_sleep(_vfs: *mut ffi::sqlite3_vfs, micros: c_int) -> c_int {
    micros
}

/// The device's simulated clock as a Julian day (from the Unix epoch).
unsafe extern "C" fn x_current_time(vfs: *mut ffi::sqlite3_vfs, out: *mut f64) -> c_int {
    let now = state(vfs).store.lock().map(|s| s.now_ns()).unwrap_or(0);
    *out = 2_440_587.5 + now as f64 / 86_400e9;
    ffi::SQLITE_OK
}

unsafe extern "C" fn x_get_last_error(
    _vfs: *mut ffi::sqlite3_vfs,
    _n: c_int,
    _out: *mut c_char,
) -> c_int {
    0
}

// ------------------------------------------------------------------ file methods

unsafe extern "C" fn x_close(file: *mut ffi::sqlite3_file) -> c_int {
    guard(|| {
        let h = Box::from_raw((*(file as *mut File)).handle);
        (*file).pMethods = std::ptr::null();
        if let Backing::Device(kind) = h.backing {
            if h.store.lock().expect("store lock").close(kind).is_err() {
                return ffi::SQLITE_IOERR_CLOSE;
            }
        }
        ffi::SQLITE_OK
    })
}

unsafe extern "C" fn x_read(
    file: *mut ffi::sqlite3_file,
    buf: *mut c_void,
    amt: c_int,
    offset: i64,
) -> c_int {
    guard(|| {
        let h = handle(file);
        let out = std::slice::from_raw_parts_mut(buf as *mut u8, amt as usize);
        let whole = match &h.backing {
            Backing::Device(kind) => {
                match h
                    .store
                    .lock()
                    .expect("store lock")
                    .read(*kind, offset as u64, out)
                {
                    Ok(w) => w,
                    Err(e) => return crate::evidence::refused(&e, ffi::SQLITE_IOERR_READ),
                }
            }
            Backing::Memory(data) => {
                let from = (offset as usize).min(data.len());
                let n = (data.len() - from).min(out.len());
                out[..n].copy_from_slice(&data[from..from + n]);
                out[n..].fill(0);
                n == out.len()
            }
        };
        if whole {
            ffi::SQLITE_OK
        } else {
            ffi::SQLITE_IOERR_SHORT_READ
        }
    })
}

unsafe extern "C" fn x_write(
    file: *mut ffi::sqlite3_file,
    buf: *const c_void,
    amt: c_int,
    offset: i64,
) -> c_int {
    guard(|| {
        let h = handle(file);
        let data = std::slice::from_raw_parts(buf as *const u8, amt as usize);
        match &mut h.backing {
            Backing::Device(kind) => {
                match h
                    .store
                    .lock()
                    .expect("store lock")
                    .write(*kind, offset as u64, data)
                {
                    Ok(()) => ffi::SQLITE_OK,
                    Err(SqlError::FileFull { .. }) => ffi::SQLITE_FULL,
                    Err(e) => crate::evidence::refused(&e, ffi::SQLITE_IOERR_WRITE),
                }
            }
            Backing::Memory(mem) => {
                let end = offset as usize + data.len();
                if mem.len() < end {
                    mem.resize(end, 0);
                }
                mem[offset as usize..end].copy_from_slice(data);
                ffi::SQLITE_OK
            }
        }
    })
}

unsafe extern "C" fn x_truncate(file: *mut ffi::sqlite3_file, size: i64) -> c_int {
    guard(|| {
        let h = handle(file);
        match &mut h.backing {
            Backing::Device(kind) => h
                .store
                .lock()
                .expect("store lock")
                .truncate(*kind, size as u64),
            Backing::Memory(mem) => mem.truncate(size as usize),
        }
        ffi::SQLITE_OK
    })
}

unsafe extern "C" fn x_sync(file: *mut ffi::sqlite3_file, _flags: c_int) -> c_int {
    guard(|| {
        let h = handle(file);
        match &h.backing {
            Backing::Device(kind) => match h.store.lock().expect("store lock").sync(*kind) {
                Ok(()) => ffi::SQLITE_OK,
                Err(e) => crate::evidence::refused(&e, ffi::SQLITE_IOERR_FSYNC),
            },
            Backing::Memory(_) => ffi::SQLITE_OK,
        }
    })
}

unsafe extern "C" fn x_file_size(file: *mut ffi::sqlite3_file, out: *mut i64) -> c_int {
    guard(|| {
        let h = handle(file);
        *out = match &h.backing {
            Backing::Device(kind) => h.store.lock().expect("store lock").size(*kind) as i64,
            Backing::Memory(mem) => mem.len() as i64,
        };
        ffi::SQLITE_OK
    })
}

/// One connection per device: locks always succeed (documented in docs/sqlite.md).
unsafe extern "C" fn x_lock(_file: *mut ffi::sqlite3_file, _level: c_int) -> c_int {
    ffi::SQLITE_OK
}

unsafe extern "C" fn x_unlock(_file: *mut ffi::sqlite3_file, _level: c_int) -> c_int {
    ffi::SQLITE_OK
}

unsafe extern "C" fn x_check_reserved_lock(
    _file: *mut ffi::sqlite3_file,
    out: *mut c_int,
) -> c_int {
    *out = 0;
    ffi::SQLITE_OK
}

unsafe extern "C" fn x_file_control(
    file: *mut ffi::sqlite3_file,
    op: c_int,
    arg: *mut c_void,
) -> c_int {
    guard(|| {
        let h = handle(file);
        let Backing::Device(FileKind::Db) = h.backing else {
            return ffi::SQLITE_NOTFOUND;
        };
        let mut store = h.store.lock().expect("store lock");
        match op {
            ffi::SQLITE_FCNTL_BEGIN_ATOMIC_WRITE => match store.begin_atomic() {
                Ok(()) => ffi::SQLITE_OK,
                Err(e) => crate::evidence::refused(&e, ffi::SQLITE_IOERR_BEGIN_ATOMIC),
            },
            // Any SQLITE_IOERR_* but NOMEM makes SQLite retry the commit with its rollback
            // journal: that is the fallback for a transaction the design refuses.
            ffi::SQLITE_FCNTL_COMMIT_ATOMIC_WRITE => match store.commit_atomic() {
                Ok(CommitOutcome::Committed) => ffi::SQLITE_OK,
                Ok(CommitOutcome::Refused) => ffi::SQLITE_IOERR_COMMIT_ATOMIC,
                Err(e) => crate::evidence::refused(&e, ffi::SQLITE_IOERR_COMMIT_ATOMIC),
            },
            ffi::SQLITE_FCNTL_ROLLBACK_ATOMIC_WRITE => match store.rollback_atomic() {
                Ok(()) => ffi::SQLITE_OK,
                Err(e) => crate::evidence::refused(&e, ffi::SQLITE_IOERR_ROLLBACK_ATOMIC),
            },
            ffi::SQLITE_FCNTL_SIZE_HINT => ffi::SQLITE_OK,
            ffi::SQLITE_FCNTL_PRAGMA => {
                let args = arg as *mut *mut c_char;
                let name = *args.add(1);
                let value = *args.add(2);
                if !name.is_null()
                    && !value.is_null()
                    && CStr::from_ptr(name)
                        .to_string_lossy()
                        .eq_ignore_ascii_case("synchronous")
                {
                    store.set_synchronous(&CStr::from_ptr(value).to_string_lossy());
                }
                ffi::SQLITE_NOTFOUND
            }
            _ => ffi::SQLITE_NOTFOUND,
        }
    })
}

unsafe extern "C" fn x_sector_size(file: *mut ffi::sqlite3_file) -> c_int {
    let h = handle(file);
    h.store
        .lock()
        .map(|s| s.page_bytes() as c_int)
        .unwrap_or(4096)
}

/// Every design writes a page without disturbing its neighbours (powersafe overwrite); in
/// `batch` mode the database file also reports batch atomic writes.
unsafe extern "C" fn x_device_characteristics(file: *mut ffi::sqlite3_file) -> c_int {
    let h = handle(file);
    let batch = matches!(h.backing, Backing::Device(FileKind::Db))
        && h.store
            .lock()
            .map(|s| s.mode() == Mode::Batch)
            .unwrap_or(false);
    ffi::SQLITE_IOCAP_POWERSAFE_OVERWRITE
        | if batch {
            ffi::SQLITE_IOCAP_BATCH_ATOMIC
        } else {
            0
        }
}

unsafe extern "C" fn x_shm_map(
    file: *mut ffi::sqlite3_file,
    region: c_int,
    size: c_int,
    extend: c_int,
    out: *mut *mut c_void,
) -> c_int {
    guard(|| {
        let h = handle(file);
        let region = region as usize;
        while h.shm.len() <= region {
            if extend == 0 {
                *out = std::ptr::null_mut();
                return ffi::SQLITE_OK;
            }
            h.shm.push(vec![0u8; size as usize].into_boxed_slice());
        }
        *out = h.shm[region].as_mut_ptr() as *mut c_void;
        ffi::SQLITE_OK
    })
}

unsafe extern "C" fn x_shm_lock(
    _file: *mut ffi::sqlite3_file,
    _offset: c_int,
    _n: c_int,
    _flags: c_int,
) -> c_int {
    ffi::SQLITE_OK
}

unsafe extern "C" fn x_shm_barrier(_file: *mut ffi::sqlite3_file) {
    std::sync::atomic::fence(Ordering::SeqCst);
}

unsafe extern "C" fn x_shm_unmap(file: *mut ffi::sqlite3_file, _delete: c_int) -> c_int {
    handle(file).shm.clear();
    ffi::SQLITE_OK
}
