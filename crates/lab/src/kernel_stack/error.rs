//! Why the kernel stack could not be set up or taken down.

/// Why the kernel stack could not be set up or taken down.
#[derive(Debug, thiserror::Error)]
pub enum KernelStackError {
    /// A system command failed.
    #[error("{command}: {reason}")]
    Command { command: String, reason: String },
    /// What the stack needs is not on this machine (root, a tool, /dev/fuse, the kernel's file
    /// system).
    #[error("{0}")]
    Unavailable(String),
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// nilfs2's cleaner was gone when the workload ended (`nilfs_cleanerd` exits when a
    /// cleaning pass fails, as when the volume has no room for the blocks it would move); the
    /// file system was still unmounted, everything written back.
    #[error("nilfs2's cleaner (nilfs_cleanerd) exited during the run; it exits when a cleaning pass fails, as when the volume has no room left for the blocks it would move")]
    CleanerStopped,
}

pub type Result<T, E = KernelStackError> = std::result::Result<T, E>;
