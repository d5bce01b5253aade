//! Typed errors of NVMFS, with the errno each maps to at the FUSE edge.

use thiserror::Error;

#[derive(Debug, Error)]
pub enum NvmfsError {
    #[error("no such file or directory")]
    NotFound,
    #[error("file exists")]
    Exists,
    #[error("not a directory")]
    NotDir,
    #[error("is a directory")]
    IsDir,
    #[error("directory not empty")]
    NotEmpty,
    #[error("name longer than {max} bytes")]
    NameTooLong { max: usize },
    #[error("no space left: {0}")]
    NoSpace(&'static str),
    #[error("file too large (more than {max_bytes} bytes)")]
    FileTooLarge { max_bytes: u64 },
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    #[error("operation not permitted: {0}")]
    NotPermitted(&'static str),
    #[error("NVRAM image is corrupt or incompatible: {0}")]
    Corrupt(String),
    #[error("the SSD refused a request: {0}")]
    Ftl(#[from] ftl::FtlError),
    #[error("the flash image: {0}")]
    Flash(#[from] flash::FlashError),
    #[error("I/O on the NVRAM file: {0}")]
    Io(#[from] std::io::Error),
    #[error("SSD page {lba} is unreadable (uncorrectable)")]
    SsdUnreadable { lba: u64 },
    /// The crash hook fired: the file system stopped as if the process had died here.
    #[error("crash hook fired (simulated process death)")]
    Crashed,
}

impl NvmfsError {
    /// The errno a FUSE reply carries.
    pub fn errno(&self) -> i32 {
        match self {
            NvmfsError::NotFound => libc::ENOENT,
            NvmfsError::Exists => libc::EEXIST,
            NvmfsError::NotDir => libc::ENOTDIR,
            NvmfsError::IsDir => libc::EISDIR,
            NvmfsError::NotEmpty => libc::ENOTEMPTY,
            NvmfsError::NameTooLong { .. } => libc::ENAMETOOLONG,
            NvmfsError::NoSpace(_) => libc::ENOSPC,
            NvmfsError::FileTooLarge { .. } => libc::EFBIG,
            NvmfsError::InvalidArgument(_) => libc::EINVAL,
            NvmfsError::NotPermitted(_) => libc::EPERM,
            _ => libc::EIO,
        }
    }
}

pub type Result<T> = std::result::Result<T, NvmfsError>;
