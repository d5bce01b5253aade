//! What a host request can fail with, and what the host is told.

use flash::Lpn;
use ftl::{FtlError, TxUuid};

/// Linux errno values a front end reports (NBD replies, FUSE, the SQLite VFS).
pub mod errno {
    pub const EIO: i32 = 5;
    pub const EINVAL: i32 = 22;
    pub const ENOSPC: i32 = 28;
    pub const EOVERFLOW: i32 = 75;
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum HostError {
    #[error("{len} bytes at byte {offset} lie outside the device's {capacity_bytes} bytes")]
    OutOfRange {
        offset: u64,
        len: u64,
        capacity_bytes: u64,
    },
    #[error("{pages} pages in one write; at most {max} (the advertised maximum)")]
    TooLarge { pages: u64, max: u64 },
    #[error("{lpn} is uncorrectable: its flash page failed ECC")]
    Uncorrectable { lpn: Lpn },
    #[error("the image failed earlier; the device is read-only until restarted ({reason})")]
    Failed { reason: String },
    #[error("{0} was held back by the device and never acknowledged")]
    NeverAcknowledged(TxUuid),
    #[error("{needs} need device transactions; {design} has none")]
    NoTransactions {
        needs: &'static str,
        design: &'static str,
    },
    #[error("{design} broke an invariant: {reason}")]
    Invariant {
        design: &'static str,
        reason: ftl::InvariantViolation,
    },
    #[error(transparent)]
    Device(#[from] FtlError),
}

impl HostError {
    /// The errno the host is told: EIO for media, image and internal failures, ENOSPC for a
    /// full device, EOVERFLOW for a write larger than one atomic unit, EINVAL for the rest
    /// (the request's shape or range).
    pub fn errno(&self) -> i32 {
        match self {
            HostError::Uncorrectable { .. }
            | HostError::Failed { .. }
            | HostError::NeverAcknowledged(_)
            | HostError::Invariant { .. } => errno::EIO,
            HostError::TooLarge { .. } => errno::EOVERFLOW,
            HostError::OutOfRange { .. } | HostError::NoTransactions { .. } => errno::EINVAL,
            HostError::Device(e) => match e {
                FtlError::NoSpace => errno::ENOSPC,
                FtlError::Flash(_)
                | FtlError::ImageIo(_)
                | FtlError::WornOut(_)
                | FtlError::MediaLoss { .. }
                | FtlError::Corrupt(_) => errno::EIO,
                _ => errno::EINVAL,
            },
        }
    }

    /// Whether a simulation must stop (trace replay and the workload driver go on past a
    /// refused request, but not past a broken flash rule, a failed image, damaged metadata, a
    /// full device or a broken invariant).
    pub fn is_fatal(&self) -> bool {
        match self {
            HostError::Device(e) => matches!(
                e,
                FtlError::Flash(_)
                    | FtlError::ImageIo(_)
                    | FtlError::WornOut(_)
                    | FtlError::MediaLoss { .. }
                    | FtlError::Corrupt(_)
                    | FtlError::NoSpace
            ),
            HostError::Failed { .. } | HostError::Invariant { .. } => true,
            _ => false,
        }
    }

    /// The design's own error, if that is what this is.
    pub fn device_error(&self) -> Option<&FtlError> {
        match self {
            HostError::Device(e) => Some(e),
            _ => None,
        }
    }
}
