//! Typed errors of the flash model: each names the rule that was broken and where.

use crate::geometry::{BlockId, Ppn};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FlashError {
    #[error("{ppn} is outside the device ({pages} pages)")]
    PageOutOfRange { ppn: Ppn, pages: u32 },
    #[error("{block} is outside the device ({blocks} blocks)")]
    BlockOutOfRange { block: BlockId, blocks: u32 },
    #[error("program of {ppn}: the page is not erased (erase its block first)")]
    ProgramNotErased { ppn: Ppn },
    #[error("program of {ppn}: pages of a block are programmed in increasing order; next programmable page is {next} of the block")]
    OutOfOrderProgram { ppn: Ppn, next: u32 },
    #[error(
        "program of {ppn}: {block} was left unreadable by an interrupted erase; erase it again"
    )]
    BlockNeedsErase { ppn: Ppn, block: BlockId },
    #[error(
        "program of {ppn}: OOB record of {got} bytes exceeds the {max} bytes this device keeps"
    )]
    OobTooLarge { ppn: Ppn, got: usize, max: u32 },
    #[error("program of {ppn}: data of {got} bytes exceeds the {max}-byte page")]
    DataTooLarge { ppn: Ppn, got: usize, max: u32 },
    #[error("image {path}: {reason}")]
    Image { path: String, reason: String },
    #[error("image {path}: geometry {found} does not match the requested {wanted}")]
    ImageGeometryMismatch {
        path: String,
        found: String,
        wanted: String,
    },
    #[error("image {path} was formatted by {found}, not by {wanted}: open it with the design and parameters that made it")]
    ImageForeign {
        path: String,
        found: String,
        wanted: String,
    },
    #[error("the image has failed and the device is read-only until restarted: {reason}")]
    ImageFailed { reason: String },
    #[error("image I/O: {0}")]
    Io(String),
}

impl From<std::io::Error> for FlashError {
    fn from(e: std::io::Error) -> Self {
        FlashError::Io(e.to_string())
    }
}
