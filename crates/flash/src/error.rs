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
    #[error("{ppn} holds no readable data ({state}): nothing to peek at or copy")]
    NoData { ppn: Ppn, state: &'static str },
    #[error("peek at {ppn}: bytes {at}..{end} are past the {page_bytes}-byte page")]
    PeekPastPage {
        ppn: Ppn,
        at: usize,
        end: usize,
        page_bytes: u32,
    },
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
    /// Another open file holds the image's exclusive lock: one process per image
    /// ([`crate::image_lock`]).
    #[error("image {path} is already open ({holder}): one process at a time may hold an image, two would corrupt it; stop that one or use another image")]
    ImageLocked { path: String, holder: String },
    #[error("the image has failed and the device is read-only until restarted: {reason}")]
    ImageFailed { reason: String },
    #[error("image I/O: {0}")]
    Io(String),
    /// The media model ran out of spare blocks: the device is read-only from now on, as a
    /// worn-out SSD is.
    #[error("the flash is worn out and read-only: {reason}")]
    WornOut { reason: String },
    /// A page copied as lost (`Flash::program_lost_copy`) whose data still reads: an FTL bug.
    #[error("{ppn} is not lost: only a page whose data the ECC cannot correct is copied as lost")]
    NotLost { ppn: Ppn },
}

impl From<std::io::Error> for FlashError {
    fn from(e: std::io::Error) -> Self {
        FlashError::Io(e.to_string())
    }
}

/// A device configuration that cannot be used: an unknown preset, a bad field, or an override or
/// configuration file that does not parse. Each names the field and the rule.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConfigError {
    #[error("unknown preset '{name}'; known presets: {known}")]
    UnknownPreset { name: String, known: String },
    #[error("unknown flash part '{name}' for the media model; known parts: {known}")]
    UnknownPart { name: String, known: String },
    #[error("geometry field {0} must be at least 1")]
    ZeroGeometryField(&'static str),
    #[error("page_bytes = {page_bytes} must be a power of two from 512 to {max}")]
    PageBytes { page_bytes: u32, max: usize },
    #[error("pages_per_block = {0} exceeds 65535")]
    PagesPerBlock(u32),
    #[error("{0} pages do not fit 32-bit physical page numbers")]
    TooManyPages(u64),
    #[error("timing.bus_mb_s must be at least 1")]
    ZeroBusSpeed,
    #[error("over_provisioning = {0} must be in [0, 0.9)")]
    OverProvisioning(f64),
    #[error("config file: {0}")]
    ConfigFile(String),
    #[error("override '{0}' is not key=value")]
    NotKeyValue(String),
    #[error("override key '{key}': '{part}' is not inside a table")]
    NotATable { key: String, part: String },
    #[error("override key '{0}' names no configuration field")]
    UnknownKey(String),
    #[error("configuration: {0}")]
    Invalid(String),
}

/// For callers that still report errors as text.
impl From<ConfigError> for String {
    fn from(e: ConfigError) -> String {
        e.to_string()
    }
}
