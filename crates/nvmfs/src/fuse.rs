//! NVMFS through FUSE (`fuser`): the kernel's requests become calls on [`Nvmfs`], every
//! failure becomes the errno of its typed error ([`NvmfsError::errno`]).
//!
//! One request at a time (one session thread, and a mutex around the file system): NVMFS
//! updates NVRAM in place and its flushing runs inline, so requests are serialized as the
//! paper's kernel module serializes them per inode. FUSE inode numbers are NVMFS inode numbers
//! (the root is 1 in both). Inode numbers are reused after unlink, so every create hands the
//! kernel a new generation number (kept in RAM: the kernel's caches do not outlive the mount);
//! without it the kernel would serve a deleted file's cached pages for the new one. Opens are
//! counted, so a file unlinked (or renamed over) while open lives on until its last release.

use crate::error::NvmfsError;
use crate::fs::{Attr, Nvmfs, NvmfsStats};
use crate::layout::{NAME_MAX, PAGE_BYTES, S_IFDIR, S_IFLNK, S_IFMT};
use fuser::{
    Config, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo,
    LockOwner, MountOption, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow,
    WriteFlags,
};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Attribute and entry cache lifetime handed to the kernel. Every change goes through this
/// process, so the kernel's cache is never stale for longer than its own requests.
const TTL: Duration = Duration::from_secs(1);

/// The file system as FUSE sees it. Shared with the caller, which unmounts it cleanly once the
/// session ends (`take`).
#[derive(Clone)]
pub struct NvmfsFuse {
    inner: Arc<Mutex<Inner>>,
}

struct Inner {
    fs: Option<Nvmfs>,
    /// Generation of inodes created during this mount (absent = 0).
    generation: rustc_hash::FxHashMap<u32, u64>,
    next_generation: u64,
}

impl Inner {
    fn generation(&self, ino: u32) -> Generation {
        Generation(self.generation.get(&ino).copied().unwrap_or(0))
    }
}

fn errno(e: &NvmfsError) -> Errno {
    Errno::from_i32(e.errno())
}

fn time(ns: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_nanos(ns)
}

fn file_attr(a: &Attr) -> FileAttr {
    let blocks = (a.nvram_blocks as u64 + a.ssd_blocks as u64) * (PAGE_BYTES / 512);
    FileAttr {
        ino: INodeNo(a.ino as u64),
        size: a.size,
        blocks,
        atime: time(a.mtime_ns),
        mtime: time(a.mtime_ns),
        ctime: time(a.ctime_ns),
        crtime: time(a.ctime_ns),
        kind: kind_of(a.mode),
        perm: (a.mode & 0o7777) as u16,
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        rdev: 0,
        blksize: PAGE_BYTES as u32,
        flags: 0,
    }
}

fn kind_of(mode: u32) -> FileType {
    match mode & S_IFMT {
        S_IFDIR => FileType::Directory,
        S_IFLNK => FileType::Symlink,
        _ => FileType::RegularFile,
    }
}

fn ino32(ino: INodeNo) -> Result<u32, Errno> {
    u32::try_from(ino.0).map_err(|_| Errno::ENOENT)
}

fn nanos(t: TimeOrNow) -> u64 {
    let t = match t {
        TimeOrNow::SpecificTime(t) => t,
        TimeOrNow::Now => SystemTime::now(),
    };
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

impl NvmfsFuse {
    pub fn new(fs: Nvmfs) -> NvmfsFuse {
        NvmfsFuse {
            inner: Arc::new(Mutex::new(Inner {
                fs: Some(fs),
                generation: Default::default(),
                next_generation: 1,
            })),
        }
    }

    /// The file system back, once the session is over (None if already taken).
    pub fn take(&self) -> Option<Nvmfs> {
        self.lock().fs.take()
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic inside a request must not wedge every later request: keep going on the
        // state as it is (every NVRAM update is itself crash consistent).
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs `f` on the mounted file system; EIO once it has been taken (unmounting).
    fn with<T>(&self, f: impl FnOnce(&mut Nvmfs) -> Result<T, NvmfsError>) -> Result<T, Errno> {
        let mut guard = self.lock();
        let fs = guard.fs.as_mut().ok_or(Errno::EIO)?;
        f(fs).map_err(|e| errno(&e))
    }

    /// Runs a creating call and gives the new inode a fresh generation.
    fn with_new(
        &self,
        f: impl FnOnce(&mut Nvmfs) -> Result<Attr, NvmfsError>,
    ) -> Result<(Attr, Generation), Errno> {
        let mut guard = self.lock();
        let inner = &mut *guard;
        let fs = inner.fs.as_mut().ok_or(Errno::EIO)?;
        let attr = f(fs).map_err(|e| errno(&e))?;
        let g = inner.next_generation;
        inner.next_generation += 1;
        inner.generation.insert(attr.ino, g);
        Ok((attr, Generation(g)))
    }

    /// The attributes of `name` in `dir` and the generation the kernel knows it by.
    fn lookup_entry(&self, dir: u32, name: &OsStr) -> Result<(Attr, Generation), Errno> {
        let mut guard = self.lock();
        let inner = &mut *guard;
        let fs = inner.fs.as_mut().ok_or(Errno::EIO)?;
        let attr = fs
            .lookup(dir, name.as_bytes())
            .and_then(|ino| fs.getattr(ino))
            .map_err(|e| errno(&e))?;
        Ok((attr.clone(), inner.generation(attr.ino)))
    }
}

impl Filesystem for NvmfsFuse {
    fn destroy(&mut self) {
        // The caller's `serve` unmounts cleanly after the session; nothing to do here.
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        match ino32(parent).and_then(|dir| self.lookup_entry(dir, name)) {
            Ok((a, g)) => reply.entry(&TTL, &file_attr(&a), g),
            Err(e) => reply.error(e),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match ino32(ino).and_then(|ino| self.with(|fs| fs.getattr(ino))) {
            Ok(a) => reply.attr(&TTL, &file_attr(&a)),
            Err(e) => reply.error(e),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let r = ino32(ino).and_then(|ino| {
            self.with(|fs| {
                if let Some(size) = size {
                    fs.truncate(ino, size)?;
                }
                if mode.is_some() || uid.is_some() || gid.is_some() || mtime.is_some() {
                    fs.setattr(ino, mode, uid, gid, mtime.map(nanos))?;
                }
                fs.getattr(ino)
            })
        });
        match r {
            Ok(a) => reply.attr(&TTL, &file_attr(&a)),
            Err(e) => reply.error(e),
        }
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        _rdev: u32,
        reply: ReplyEntry,
    ) {
        // Regular files only: NVMFS has no device, fifo or socket nodes.
        if mode & libc::S_IFMT != libc::S_IFREG {
            return reply.error(Errno::EPERM);
        }
        let r = ino32(parent).and_then(|dir| {
            self.with_new(|fs| fs.create_file(dir, name.as_bytes(), mode, req.uid(), req.gid()))
        });
        match r {
            Ok((a, g)) => reply.entry(&TTL, &file_attr(&a), g),
            Err(e) => reply.error(e),
        }
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let r = ino32(parent).and_then(|dir| {
            self.with_new(|fs| {
                let target = target.as_os_str().as_bytes();
                fs.symlink(dir, link_name.as_bytes(), target, req.uid(), req.gid())
            })
        });
        match r {
            Ok((a, g)) => reply.entry(&TTL, &file_attr(&a), g),
            Err(e) => reply.error(e),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        match ino32(ino).and_then(|ino| self.with(|fs| fs.readlink(ino))) {
            Ok(t) => reply.data(&t),
            Err(e) => reply.error(e),
        }
    }

    fn link(
        &self,
        _req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let r = ino32(ino).and_then(|ino| {
            let dir = ino32(newparent)?;
            let mut guard = self.lock();
            let inner = &mut *guard;
            let fs = inner.fs.as_mut().ok_or(Errno::EIO)?;
            let a = fs
                .link(ino, dir, newname.as_bytes())
                .map_err(|e| errno(&e))?;
            let g = inner.generation(ino);
            Ok((a, g))
        });
        match r {
            Ok((a, g)) => reply.entry(&TTL, &file_attr(&a), g),
            Err(e) => reply.error(e),
        }
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        let r = ino32(parent).and_then(|dir| {
            self.with_new(|fs| fs.mkdir(dir, name.as_bytes(), mode, req.uid(), req.gid()))
        });
        match r {
            Ok((a, g)) => reply.entry(&TTL, &file_attr(&a), g),
            Err(e) => reply.error(e),
        }
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let r = ino32(parent).and_then(|dir| self.with(|fs| fs.unlink(dir, name.as_bytes())));
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let r = ino32(parent).and_then(|dir| self.with(|fs| fs.rmdir(dir, name.as_bytes())));
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        if flags.intersects(RenameFlags::RENAME_EXCHANGE | RenameFlags::RENAME_WHITEOUT) {
            return reply.error(Errno::EINVAL);
        }
        let r = ino32(parent).and_then(|dir| {
            let new_dir = ino32(newparent)?;
            self.with(|fs| {
                if flags.contains(RenameFlags::RENAME_NOREPLACE)
                    && fs.lookup(new_dir, newname.as_bytes()).is_ok()
                {
                    return Err(NvmfsError::Exists);
                }
                fs.rename(dir, name.as_bytes(), new_dir, newname.as_bytes())
            })
        });
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let r = ino32(ino).and_then(|ino| {
            self.with(|fs| {
                let mut buf = vec![0u8; size as usize];
                let n = fs.read(ino, offset, &mut buf)?;
                buf.truncate(n);
                Ok(buf)
            })
        });
        match r {
            Ok(buf) => reply.data(&buf),
            Err(e) => reply.error(e),
        }
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        match ino32(ino).and_then(|ino| self.with(|fs| fs.write(ino, offset, data))) {
            Ok(n) => reply.written(n as u32),
            Err(e) => reply.error(e),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match ino32(ino).and_then(|ino| self.with(|fs| fs.open_file(ino))) {
            Ok(()) => reply.opened(FileHandle(0), FopenFlags::empty()),
            Err(e) => reply.error(e),
        }
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        match ino32(ino).and_then(|ino| self.with(|fs| fs.close(ino))) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        // close(2): NVRAM writes are already in place; durability is fsync's business.
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        match ino32(ino).and_then(|ino| self.with(|fs| fs.fsync(ino))) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    /// A directory syncs like a file: its inode and blocks.
    fn fsyncdir(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.fsync(req, ino, fh, datasync, reply)
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        // Each entry's type from its inode (a directory entry records only "is a directory").
        let r = ino32(ino).and_then(|dir| {
            self.with(|fs| {
                let entries = fs.readdir(dir)?;
                let mut typed = Vec::with_capacity(entries.len());
                for e in entries {
                    let mode = fs.getattr(e.ino).map_or(0, |a| a.mode);
                    typed.push((e, kind_of(mode)));
                }
                Ok(typed)
            })
        });
        let entries = match r {
            Ok(e) => e,
            Err(e) => return reply.error(e),
        };
        // Offsets: 1 = ".", 2 = "..", 3.. = entries in directory-file order.
        let dots = [
            (ino, FileType::Directory, &b"."[..]),
            (ino, FileType::Directory, b".."),
        ];
        let all = dots.into_iter().chain(
            entries
                .iter()
                .map(|(e, kind)| (INodeNo(e.ino as u64), *kind, &e.name[..])),
        );
        for (i, (ino, kind, name)) in all.enumerate().skip(offset as usize) {
            if reply.add(ino, i as u64 + 1, kind, OsStr::from_bytes(name)) {
                break;
            }
        }
        reply.ok();
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        match self.with(|fs| Ok(fs.usage())) {
            Ok(u) => reply.statfs(
                u.blocks,
                u.free_blocks,
                u.free_blocks,
                u.inodes,
                u.free_inodes,
                PAGE_BYTES as u32,
                NAME_MAX as u32,
                PAGE_BYTES as u32,
            ),
            Err(e) => reply.error(e),
        }
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        if mode & libc::S_IFMT != libc::S_IFREG && mode & libc::S_IFMT != 0 {
            return reply.error(Errno::EPERM);
        }
        let r = ino32(parent).and_then(|dir| {
            self.with_new(|fs| {
                let a = fs.create_file(dir, name.as_bytes(), mode, req.uid(), req.gid())?;
                fs.open_file(a.ino)?;
                Ok(a)
            })
        });
        match r {
            Ok((a, g)) => {
                reply.created(&TTL, &file_attr(&a), g, FileHandle(0), FopenFlags::empty())
            }
            Err(e) => reply.error(e),
        }
    }
}

/// What `serve` hands back after a clean unmount.
#[derive(Clone, Debug)]
pub struct ServeReport {
    pub stats: NvmfsStats,
    /// Host pages the SSD was asked to write over the whole mount.
    pub ssd_pages_written: u64,
    /// The mount point was busy at shutdown and was detached lazily (`fusermount3 -u -z`).
    pub lazily_detached: bool,
}

/// Errors of `serve`.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("mounting {mountpoint}: {source} (is /dev/fuse there and fusermount3 installed?)")]
    Mount {
        mountpoint: String,
        source: std::io::Error,
    },
    #[error("the FUSE session ended with an error: {0}")]
    Session(std::io::Error),
    #[error("closing the file system: {0}")]
    Close(#[from] NvmfsError),
}

/// Mounts `fs` at `mountpoint`, runs `work` (another process may use the mount meanwhile: a
/// benchmark binary that has exited when `work` returns), unmounts it and hands the file
/// system back, still open (the caller reads its counters and unmounts it).
pub fn with_mounted<R>(
    fs: Nvmfs,
    mountpoint: &Path,
    work: impl FnOnce() -> R,
) -> Result<(R, Nvmfs), ServeError> {
    let handle = NvmfsFuse::new(fs);
    let mut config = Config::default();
    config.mount_options = vec![
        MountOption::FSName("nvmfs".into()),
        MountOption::Subtype("nvmfs".into()),
    ];
    let session = fuser::spawn_mount(handle.clone(), mountpoint, &config).map_err(|source| {
        ServeError::Mount {
            mountpoint: mountpoint.display().to_string(),
            source,
        }
    })?;
    let result = work();
    let ended = session.umount_and_join();
    let fs = handle.take().ok_or_else(|| {
        ServeError::Close(NvmfsError::InvalidArgument(
            "file system already taken".into(),
        ))
    })?;
    ended.map_err(ServeError::Session)?;
    Ok((result, fs))
}

/// Mounts `fs` at `mountpoint` and serves requests until the file system is unmounted from
/// outside (`fusermount3 -u`) or `shutdown` becomes true (SIGINT/SIGTERM); then unmounts it
/// cleanly: the SSD is flushed and synced, the NVRAM image is marked clean.
pub fn serve(
    fs: Nvmfs,
    mountpoint: &Path,
    shutdown: &AtomicBool,
) -> Result<ServeReport, ServeError> {
    let handle = NvmfsFuse::new(fs);
    let mut config = Config::default();
    config.mount_options = vec![
        MountOption::FSName("nvmfs".into()),
        MountOption::Subtype("nvmfs".into()),
        MountOption::DefaultPermissions,
    ];
    let session = fuser::spawn_mount(handle.clone(), mountpoint, &config).map_err(|source| {
        ServeError::Mount {
            mountpoint: mountpoint.display().to_string(),
            source,
        }
    })?;
    // Bounded wait: the poll ends when the session thread ends or a signal arrives.
    while !session.guard.is_finished() && !shutdown.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut lazily_detached = false;
    let ended = if session.guard.is_finished() {
        session.join()
    } else {
        match session.umount_and_join() {
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                // Busy (an open file, a shell's working directory): detach lazily; the kernel
                // ends the mount when its last user leaves, and requests until then get EIO.
                lazily_detached = std::process::Command::new("fusermount3")
                    .args(["-u", "-z"])
                    .arg(mountpoint)
                    .status()
                    .is_ok_and(|s| s.success());
                if lazily_detached {
                    Ok(())
                } else {
                    Err(e)
                }
            }
            other => other,
        }
    };
    let fs = handle.take();
    let Some(fs) = fs else {
        return Err(ServeError::Close(NvmfsError::InvalidArgument(
            "file system already taken".into(),
        )));
    };
    let stats = fs.stats().clone();
    let ssd_pages_written = stats.ssd_pages_written;
    fs.unmount()?;
    ended.map_err(ServeError::Session)?;
    Ok(ServeReport {
        stats,
        ssd_pages_written,
        lazily_detached,
    })
}
