//! The NBD wire protocol: constants, pure parsers and encoders, typed errors.
//!
//! Everything here is a pure function of bytes, so it can be unit-tested, property-tested and
//! fuzzed without a socket. The server (`server.rs`) only moves bytes between these functions
//! and the transport.
//!
//! All integers on the wire are big-endian ("network byte order").
//!
//! ## Byte layouts (from the NBD protocol document, `doc/proto.md` of the reference server)
//!
//! ```text
//! Server greeting (fixed newstyle), 18 bytes:
//!   0  u64  NBDMAGIC  0x4e42444d41474943 ("NBDMAGIC")
//!   8  u64  IHAVEOPT  0x49484156454f5054 ("IHAVEOPT")
//!  16  u16  handshake flags (FIXED_NEWSTYLE | NO_ZEROES)
//! Client flags, 4 bytes:
//!   0  u32  client flags (C_FIXED_NEWSTYLE | C_NO_ZEROES)
//! Option header, 16 bytes, followed by `length` bytes of option data:
//!   0  u64  IHAVEOPT
//!   8  u32  option
//!  12  u32  length
//! Option reply header, 20 bytes, followed by `length` bytes of reply data:
//!   0  u64  REPLY_MAGIC 0x0003e889045565a9
//!   8  u32  option
//!  12  u32  reply type
//!  16  u32  length
//! Request header, 28 bytes (followed by `length` bytes of payload for WRITE only):
//!   0  u32  REQUEST_MAGIC 0x25609513
//!   4  u16  command flags
//!   6  u16  type
//!   8  u64  handle (cookie, echoed in the reply)
//!  16  u64  offset
//!  24  u32  length
//! Simple reply header, 16 bytes (followed by `length` bytes of data for a successful READ):
//!   0  u32  SIMPLE_REPLY_MAGIC 0x67446698
//!   4  u32  error (an NBD errno, 0 = success)
//!   8  u64  handle
//! ```

use thiserror::Error;

// ---- Handshake -------------------------------------------------------------------------------

/// "NBDMAGIC": first 8 bytes the server sends.
pub const NBD_MAGIC: u64 = 0x4e42_444d_4147_4943;
/// "IHAVEOPT": newstyle negotiation magic, sent by the server in its greeting and by the client
/// before every option.
pub const IHAVEOPT: u64 = 0x4948_4156_454f_5054;
/// Magic that starts every option reply.
pub const OPTION_REPLY_MAGIC: u64 = 0x0003_e889_0455_65a9;

/// Handshake flag: the server speaks fixed newstyle.
pub const NBD_FLAG_FIXED_NEWSTYLE: u16 = 1 << 0;
/// Handshake flag: the server may omit the 124 zero bytes after NBD_OPT_EXPORT_NAME.
pub const NBD_FLAG_NO_ZEROES: u16 = 1 << 1;
/// Client flag: the client speaks fixed newstyle.
pub const NBD_FLAG_C_FIXED_NEWSTYLE: u32 = 1 << 0;
/// Client flag: the client does not want the 124 zero bytes.
pub const NBD_FLAG_C_NO_ZEROES: u32 = 1 << 1;

// ---- Options ---------------------------------------------------------------------------------

pub const NBD_OPT_EXPORT_NAME: u32 = 1;
pub const NBD_OPT_ABORT: u32 = 2;
pub const NBD_OPT_LIST: u32 = 3;
pub const NBD_OPT_STARTTLS: u32 = 5;
pub const NBD_OPT_INFO: u32 = 6;
pub const NBD_OPT_GO: u32 = 7;
pub const NBD_OPT_STRUCTURED_REPLY: u32 = 8;
pub const NBD_OPT_LIST_META_CONTEXT: u32 = 9;
pub const NBD_OPT_SET_META_CONTEXT: u32 = 10;

pub const NBD_REP_ACK: u32 = 1;
pub const NBD_REP_SERVER: u32 = 2;
pub const NBD_REP_INFO: u32 = 3;
/// Bit set in every error reply type.
pub const NBD_REP_FLAG_ERROR: u32 = 1 << 31;
pub const NBD_REP_ERR_UNSUP: u32 = NBD_REP_FLAG_ERROR | 1;
pub const NBD_REP_ERR_POLICY: u32 = NBD_REP_FLAG_ERROR | 2;
pub const NBD_REP_ERR_INVALID: u32 = NBD_REP_FLAG_ERROR | 3;
pub const NBD_REP_ERR_TLS_REQD: u32 = NBD_REP_FLAG_ERROR | 5;
pub const NBD_REP_ERR_UNKNOWN: u32 = NBD_REP_FLAG_ERROR | 6;
pub const NBD_REP_ERR_SHUTDOWN: u32 = NBD_REP_FLAG_ERROR | 7;
pub const NBD_REP_ERR_TOO_BIG: u32 = NBD_REP_FLAG_ERROR | 9;

pub const NBD_INFO_EXPORT: u16 = 0;
pub const NBD_INFO_NAME: u16 = 1;
pub const NBD_INFO_DESCRIPTION: u16 = 2;
pub const NBD_INFO_BLOCK_SIZE: u16 = 3;

// ---- Transmission flags (sent with the export size) -----------------------------------------

pub const NBD_FLAG_HAS_FLAGS: u16 = 1 << 0;
pub const NBD_FLAG_READ_ONLY: u16 = 1 << 1;
pub const NBD_FLAG_SEND_FLUSH: u16 = 1 << 2;
pub const NBD_FLAG_SEND_FUA: u16 = 1 << 3;
pub const NBD_FLAG_ROTATIONAL: u16 = 1 << 4;
pub const NBD_FLAG_SEND_TRIM: u16 = 1 << 5;
pub const NBD_FLAG_SEND_WRITE_ZEROES: u16 = 1 << 6;
pub const NBD_FLAG_SEND_DF: u16 = 1 << 7;
pub const NBD_FLAG_CAN_MULTI_CONN: u16 = 1 << 8;

// ---- Transmission ----------------------------------------------------------------------------

pub const REQUEST_MAGIC: u32 = 0x2560_9513;
pub const SIMPLE_REPLY_MAGIC: u32 = 0x6744_6698;

pub const NBD_CMD_READ: u16 = 0;
pub const NBD_CMD_WRITE: u16 = 1;
pub const NBD_CMD_DISC: u16 = 2;
pub const NBD_CMD_FLUSH: u16 = 3;
pub const NBD_CMD_TRIM: u16 = 4;
pub const NBD_CMD_CACHE: u16 = 5;
pub const NBD_CMD_WRITE_ZEROES: u16 = 6;
pub const NBD_CMD_BLOCK_STATUS: u16 = 7;
pub const NBD_CMD_RESIZE: u16 = 8;

pub const NBD_CMD_FLAG_FUA: u16 = 1 << 0;
pub const NBD_CMD_FLAG_NO_HOLE: u16 = 1 << 1;
pub const NBD_CMD_FLAG_DF: u16 = 1 << 2;
pub const NBD_CMD_FLAG_REQ_ONE: u16 = 1 << 3;
pub const NBD_CMD_FLAG_FAST_ZERO: u16 = 1 << 4;

// ---- Sizes and limits ------------------------------------------------------------------------

pub const GREETING_BYTES: usize = 18;
pub const OPTION_HEADER_BYTES: usize = 16;
pub const OPTION_REPLY_HEADER_BYTES: usize = 20;
pub const REQUEST_BYTES: usize = 28;
pub const SIMPLE_REPLY_BYTES: usize = 16;
/// Zero padding after the NBD_OPT_EXPORT_NAME reply unless NO_ZEROES was negotiated.
pub const EXPORT_NAME_PADDING_BYTES: usize = 124;

/// Minimum block size advertised in NBD_INFO_BLOCK_SIZE; offsets and lengths of a client that
/// committed to it (NBD_OPT_GO requesting NBD_INFO_BLOCK_SIZE) must be multiples.
pub const BLOCK_SIZE_MIN_BYTES: u32 = 512;
/// Maximum block size advertised, and the longest READ or WRITE the server accepts (32 MiB);
/// TRIM and WRITE_ZEROES carry no payload and may be longer.
pub const BLOCK_SIZE_MAX_BYTES: u32 = 32 << 20;
/// Longest option data the server reads; the protocol caps strings at 4096 bytes, so any
/// legitimate option fits with room to spare.
pub const OPTION_DATA_MAX_BYTES: u32 = 64 << 10;
/// Longest string (export name, info name) the protocol allows.
pub const STRING_MAX_BYTES: usize = 4096;

/// NBD error values carried in the simple reply (a subset of Linux errno numbers).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum Errno {
    Perm = 1,
    Io = 5,
    NoMem = 12,
    Inval = 22,
    NoSpc = 28,
    Overflow = 75,
    NotSup = 95,
    Shutdown = 108,
}

impl Errno {
    pub fn code(self) -> u32 {
        self as u32
    }
}

/// A protocol violation: the connection cannot continue (or, for option data, the option is
/// answered with an error reply). The message says what the peer did wrong.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ProtocolError {
    #[error("bad request magic {got:#010x} (expected 0x25609513): the client is not in the transmission phase or the stream lost sync")]
    BadRequestMagic { got: u32 },
    #[error("bad option magic {got:#018x} (expected IHAVEOPT): the client is not speaking fixed newstyle")]
    BadOptionMagic { got: u64 },
    #[error("client flags {flags:#x} contain unknown bits; the client expects a protocol extension this server lacks")]
    UnknownClientFlags { flags: u32 },
    #[error(
        "client did not set NBD_FLAG_C_FIXED_NEWSTYLE; only fixed-newstyle clients are served"
    )]
    NotFixedNewstyle,
    #[error(
        "option {option} carries {length} bytes of data, more than the {max} this server reads"
    )]
    OptionTooLong { option: u32, length: u32, max: u32 },
    #[error("more than {max} options in one handshake")]
    TooManyOptions { max: u32 },
    #[error("export name {name:?} is not served (NBD_OPT_EXPORT_NAME cannot report an error, so the connection closes)")]
    UnknownExport { name: String },
    #[error("connection closed in the middle of {context}")]
    Truncated { context: &'static str },
    #[error("NBD_OPT_EXPORT_NAME before STARTTLS on a server that requires TLS (it cannot be answered with an error, so the connection closes)")]
    TlsRequired,
}

/// A malformed option payload: answered with NBD_REP_ERR_INVALID, the handshake continues.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum OptionDataError {
    #[error("option data is {got} bytes, too short for the {needed} bytes its fields need")]
    TooShort { got: usize, needed: usize },
    #[error("option data has {extra} trailing bytes after its fields")]
    TrailingBytes { extra: usize },
    #[error("export name is {length} bytes, longer than the protocol's {max}-byte limit")]
    NameTooLong { length: usize, max: usize },
    #[error("NBD_OPT_LIST carries {length} bytes of data; it must carry none")]
    ListWithData { length: u32 },
}

/// A parsed option header. The `length` bytes of data that follow are read separately.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OptionHeader {
    pub option: u32,
    pub length: u32,
}

/// A parsed NBD_OPT_GO / NBD_OPT_INFO payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InfoRequest {
    /// The export name as bytes (the protocol says UTF-8, but a server must not trust that).
    pub name: Vec<u8>,
    /// The NBD_INFO_* items the client asked for.
    pub requested: Vec<u16>,
}

/// The client's handshake flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientFlags {
    pub no_zeroes: bool,
}

/// A transmission-phase command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Command {
    Read,
    Write,
    Disc,
    Flush,
    Trim,
    WriteZeroes,
    /// A command the protocol defines but this server does not offer (CACHE, BLOCK_STATUS,
    /// RESIZE): answered with ENOTSUP.
    Unsupported(u16),
    /// A command number the protocol does not define: answered with EINVAL.
    Unknown(u16),
}

impl Command {
    pub fn from_wire(kind: u16) -> Command {
        match kind {
            NBD_CMD_READ => Command::Read,
            NBD_CMD_WRITE => Command::Write,
            NBD_CMD_DISC => Command::Disc,
            NBD_CMD_FLUSH => Command::Flush,
            NBD_CMD_TRIM => Command::Trim,
            NBD_CMD_WRITE_ZEROES => Command::WriteZeroes,
            NBD_CMD_CACHE | NBD_CMD_BLOCK_STATUS | NBD_CMD_RESIZE => Command::Unsupported(kind),
            other => Command::Unknown(other),
        }
    }

    pub fn to_wire(self) -> u16 {
        match self {
            Command::Read => NBD_CMD_READ,
            Command::Write => NBD_CMD_WRITE,
            Command::Disc => NBD_CMD_DISC,
            Command::Flush => NBD_CMD_FLUSH,
            Command::Trim => NBD_CMD_TRIM,
            Command::WriteZeroes => NBD_CMD_WRITE_ZEROES,
            Command::Unsupported(k) | Command::Unknown(k) => k,
        }
    }

    /// Command flags the protocol documents as applicable to this command and that this server
    /// has negotiated (FUA everywhere it is advertised; NO_HOLE on WRITE_ZEROES; DF on READ,
    /// trivially honoured because simple replies are never fragmented).
    pub fn allowed_flags(self) -> u16 {
        match self {
            Command::Read => NBD_CMD_FLAG_FUA | NBD_CMD_FLAG_DF,
            Command::Write | Command::Trim | Command::Flush => NBD_CMD_FLAG_FUA,
            Command::WriteZeroes => NBD_CMD_FLAG_FUA | NBD_CMD_FLAG_NO_HOLE,
            Command::Disc | Command::Unsupported(_) | Command::Unknown(_) => 0,
        }
    }
}

/// A parsed request header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    pub flags: u16,
    pub command: Command,
    pub handle: u64,
    pub offset: u64,
    pub length: u32,
}

impl Request {
    pub fn fua(&self) -> bool {
        self.flags & NBD_CMD_FLAG_FUA != 0
    }

    /// Bytes of payload that follow this header on the wire. Only WRITE has a payload; an
    /// unknown command is assumed to have none (the protocol gives no way to know otherwise).
    pub fn payload_bytes(&self) -> u32 {
        if self.command == Command::Write {
            self.length
        } else {
            0
        }
    }
}

fn be_u16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

fn be_u32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn be_u64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_be_bytes(a)
}

/// Parses the client's 4-byte flags after the greeting.
pub fn parse_client_flags(bytes: &[u8; 4]) -> Result<ClientFlags, ProtocolError> {
    let flags = u32::from_be_bytes(*bytes);
    let known = NBD_FLAG_C_FIXED_NEWSTYLE | NBD_FLAG_C_NO_ZEROES;
    if flags & !known != 0 {
        return Err(ProtocolError::UnknownClientFlags { flags });
    }
    if flags & NBD_FLAG_C_FIXED_NEWSTYLE == 0 {
        return Err(ProtocolError::NotFixedNewstyle);
    }
    Ok(ClientFlags {
        no_zeroes: flags & NBD_FLAG_C_NO_ZEROES != 0,
    })
}

/// Parses a 16-byte option header. Does not bound `length`; the caller decides (see
/// [`OPTION_DATA_MAX_BYTES`]).
pub fn parse_option_header(
    bytes: &[u8; OPTION_HEADER_BYTES],
) -> Result<OptionHeader, ProtocolError> {
    let magic = be_u64(bytes, 0);
    if magic != IHAVEOPT {
        return Err(ProtocolError::BadOptionMagic { got: magic });
    }
    Ok(OptionHeader {
        option: be_u32(bytes, 8),
        length: be_u32(bytes, 12),
    })
}

/// Parses the data of NBD_OPT_GO or NBD_OPT_INFO:
/// `u32 name length, name, u16 count, count × u16 info type`.
pub fn parse_info_request(data: &[u8]) -> Result<InfoRequest, OptionDataError> {
    if data.len() < 4 {
        return Err(OptionDataError::TooShort {
            got: data.len(),
            needed: 4,
        });
    }
    let name_len = be_u32(data, 0) as usize;
    if name_len > STRING_MAX_BYTES {
        return Err(OptionDataError::NameTooLong {
            length: name_len,
            max: STRING_MAX_BYTES,
        });
    }
    let count_at = 4 + name_len;
    if data.len() < count_at + 2 {
        return Err(OptionDataError::TooShort {
            got: data.len(),
            needed: count_at + 2,
        });
    }
    let count = be_u16(data, count_at) as usize;
    let needed = count_at + 2 + 2 * count;
    if data.len() < needed {
        return Err(OptionDataError::TooShort {
            got: data.len(),
            needed,
        });
    }
    if data.len() > needed {
        return Err(OptionDataError::TrailingBytes {
            extra: data.len() - needed,
        });
    }
    let requested = (0..count)
        .map(|i| be_u16(data, count_at + 2 + 2 * i))
        .collect();
    Ok(InfoRequest {
        name: data[4..count_at].to_vec(),
        requested,
    })
}

/// Parses a 28-byte request header. Only a bad magic is an error here: every other field
/// combination is answered with an error reply, decided by [`check_request`].
pub fn parse_request(bytes: &[u8; REQUEST_BYTES]) -> Result<Request, ProtocolError> {
    let magic = be_u32(bytes, 0);
    if magic != REQUEST_MAGIC {
        return Err(ProtocolError::BadRequestMagic { got: magic });
    }
    Ok(Request {
        flags: be_u16(bytes, 4),
        command: Command::from_wire(be_u16(bytes, 6)),
        handle: be_u64(bytes, 8),
        offset: be_u64(bytes, 16),
        length: be_u32(bytes, 24),
    })
}

/// What a request is checked against: the export, and what the connection negotiated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestLimits {
    /// The export size in bytes.
    pub export_bytes: u64,
    /// Offsets and lengths must be multiples of this: [`BLOCK_SIZE_MIN_BYTES`] for a client that
    /// committed to the advertised block sizes, 1 for one that did not (NBD_OPT_EXPORT_NAME, or
    /// NBD_OPT_GO without an NBD_INFO_BLOCK_SIZE request), whose unaligned requests the protocol
    /// says a server SHOULD serve (proto.md, "Size constraints").
    pub min_block_bytes: u32,
    /// A read-only export: WRITE, TRIM and WRITE_ZEROES are refused with EPERM.
    pub read_only: bool,
}

impl RequestLimits {
    /// A writable export whose client committed to 512-byte alignment.
    pub fn aligned(export_bytes: u64) -> RequestLimits {
        RequestLimits {
            export_bytes,
            min_block_bytes: BLOCK_SIZE_MIN_BYTES,
            read_only: false,
        }
    }
}

/// Decides whether a well-formed request may reach the backend, and if not, which error the
/// reply carries. Pure: the limits are the only context.
///
/// Order of checks: command, flags, read-only (EPERM), length cap, alignment, range. Reads and
/// trims past the end get EINVAL and writes ENOSPC, as the protocol recommends.
pub fn check_request(req: &Request, limits: &RequestLimits) -> Result<(), Errno> {
    match req.command {
        Command::Unknown(_) => return Err(Errno::Inval),
        Command::Unsupported(_) => return Err(Errno::NotSup),
        _ => {}
    }
    if req.flags & !req.command.allowed_flags() != 0 {
        return Err(Errno::Inval);
    }
    let changes_data = matches!(
        req.command,
        Command::Write | Command::Trim | Command::WriteZeroes
    );
    if limits.read_only && changes_data {
        return Err(Errno::Perm);
    }
    match req.command {
        // FLUSH and DISC carry no range; the protocol says offset and length are zero, but
        // being lenient costs nothing.
        Command::Flush | Command::Disc => Ok(()),
        Command::Read | Command::Write | Command::Trim | Command::WriteZeroes => {
            // Only data-carrying requests are capped: a TRIM or WRITE_ZEROES of any length
            // (up to the u32 the wire allows) is legal, and the backend splits it.
            let carries_data = matches!(req.command, Command::Read | Command::Write);
            if req.length == 0 || (carries_data && req.length > BLOCK_SIZE_MAX_BYTES) {
                return Err(Errno::Inval);
            }
            let align = u64::from(limits.min_block_bytes.max(1));
            if !req.offset.is_multiple_of(align) || !u64::from(req.length).is_multiple_of(align) {
                return Err(Errno::Inval);
            }
            let in_range = req
                .offset
                .checked_add(u64::from(req.length))
                .is_some_and(|end| end <= limits.export_bytes);
            if in_range {
                Ok(())
            } else if matches!(req.command, Command::Write | Command::WriteZeroes) {
                Err(Errno::NoSpc)
            } else {
                Err(Errno::Inval)
            }
        }
        Command::Unsupported(_) | Command::Unknown(_) => unreachable!("handled above"),
    }
}

// ---- Encoders --------------------------------------------------------------------------------

/// The 18-byte server greeting.
pub fn encode_greeting() -> [u8; GREETING_BYTES] {
    let mut b = [0u8; GREETING_BYTES];
    b[0..8].copy_from_slice(&NBD_MAGIC.to_be_bytes());
    b[8..16].copy_from_slice(&IHAVEOPT.to_be_bytes());
    b[16..18].copy_from_slice(&(NBD_FLAG_FIXED_NEWSTYLE | NBD_FLAG_NO_ZEROES).to_be_bytes());
    b
}

/// An option header as a client sends it (used by tests and fuzzers to build sessions).
pub fn encode_option_header(option: u32, length: u32) -> [u8; OPTION_HEADER_BYTES] {
    let mut b = [0u8; OPTION_HEADER_BYTES];
    b[0..8].copy_from_slice(&IHAVEOPT.to_be_bytes());
    b[8..12].copy_from_slice(&option.to_be_bytes());
    b[12..16].copy_from_slice(&length.to_be_bytes());
    b
}

/// A whole option reply: header plus data.
pub fn encode_option_reply(option: u32, reply_type: u32, data: &[u8]) -> Vec<u8> {
    debug_assert!(data.len() <= u32::MAX as usize);
    let mut b = Vec::with_capacity(OPTION_REPLY_HEADER_BYTES + data.len());
    b.extend_from_slice(&OPTION_REPLY_MAGIC.to_be_bytes());
    b.extend_from_slice(&option.to_be_bytes());
    b.extend_from_slice(&reply_type.to_be_bytes());
    b.extend_from_slice(&(data.len() as u32).to_be_bytes());
    b.extend_from_slice(data);
    b
}

/// NBD_INFO_EXPORT payload: `u16 type, u64 size, u16 transmission flags`.
pub fn encode_info_export(size_bytes: u64, transmission_flags: u16) -> [u8; 12] {
    let mut b = [0u8; 12];
    b[0..2].copy_from_slice(&NBD_INFO_EXPORT.to_be_bytes());
    b[2..10].copy_from_slice(&size_bytes.to_be_bytes());
    b[10..12].copy_from_slice(&transmission_flags.to_be_bytes());
    b
}

/// NBD_INFO_BLOCK_SIZE payload: `u16 type, u32 minimum, u32 preferred, u32 maximum`.
pub fn encode_info_block_size(min: u32, preferred: u32, max: u32) -> [u8; 14] {
    debug_assert!(min.is_power_of_two() && preferred.is_power_of_two());
    debug_assert!(min <= preferred && preferred <= max && max.is_multiple_of(min));
    let mut b = [0u8; 14];
    b[0..2].copy_from_slice(&NBD_INFO_BLOCK_SIZE.to_be_bytes());
    b[2..6].copy_from_slice(&min.to_be_bytes());
    b[6..10].copy_from_slice(&preferred.to_be_bytes());
    b[10..14].copy_from_slice(&max.to_be_bytes());
    b
}

/// NBD_INFO_NAME or NBD_INFO_DESCRIPTION payload: `u16 type, string`.
pub fn encode_info_string(info: u16, text: &[u8]) -> Vec<u8> {
    let mut b = Vec::with_capacity(2 + text.len());
    b.extend_from_slice(&info.to_be_bytes());
    b.extend_from_slice(text);
    b
}

/// NBD_REP_SERVER payload for NBD_OPT_LIST: `u32 name length, name, description`.
pub fn encode_rep_server(name: &[u8], description: &[u8]) -> Vec<u8> {
    let mut b = Vec::with_capacity(4 + name.len() + description.len());
    b.extend_from_slice(&(name.len() as u32).to_be_bytes());
    b.extend_from_slice(name);
    b.extend_from_slice(description);
    b
}

/// Reply to NBD_OPT_EXPORT_NAME: `u64 size, u16 transmission flags`, then 124 zero bytes
/// unless the client negotiated NO_ZEROES.
pub fn encode_export_name_reply(
    size_bytes: u64,
    transmission_flags: u16,
    no_zeroes: bool,
) -> Vec<u8> {
    let mut b = Vec::with_capacity(10 + EXPORT_NAME_PADDING_BYTES);
    b.extend_from_slice(&size_bytes.to_be_bytes());
    b.extend_from_slice(&transmission_flags.to_be_bytes());
    if !no_zeroes {
        b.resize(10 + EXPORT_NAME_PADDING_BYTES, 0);
    }
    b
}

/// A request header as a client sends it (used by tests and fuzzers).
pub fn encode_request(req: &Request) -> [u8; REQUEST_BYTES] {
    let mut b = [0u8; REQUEST_BYTES];
    b[0..4].copy_from_slice(&REQUEST_MAGIC.to_be_bytes());
    b[4..6].copy_from_slice(&req.flags.to_be_bytes());
    b[6..8].copy_from_slice(&req.command.to_wire().to_be_bytes());
    b[8..16].copy_from_slice(&req.handle.to_be_bytes());
    b[16..24].copy_from_slice(&req.offset.to_be_bytes());
    b[24..28].copy_from_slice(&req.length.to_be_bytes());
    b
}

/// The 16-byte simple reply header.
pub fn encode_simple_reply(error: u32, handle: u64) -> [u8; SIMPLE_REPLY_BYTES] {
    let mut b = [0u8; SIMPLE_REPLY_BYTES];
    b[0..4].copy_from_slice(&SIMPLE_REPLY_MAGIC.to_be_bytes());
    b[4..8].copy_from_slice(&error.to_be_bytes());
    b[8..16].copy_from_slice(&handle.to_be_bytes());
    b
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn req(command: Command, flags: u16, offset: u64, length: u32) -> Request {
        Request {
            flags,
            command,
            handle: 0x1122_3344_5566_7788,
            offset,
            length,
        }
    }

    #[test]
    fn request_round_trips_through_encoder() {
        let r = req(Command::WriteZeroes, NBD_CMD_FLAG_FUA, 4096, 8192);
        assert_eq!(parse_request(&encode_request(&r)), Ok(r));
    }

    #[test]
    fn request_byte_layout_is_big_endian() {
        let bytes = encode_request(&req(Command::Write, 1, 0x0102_0304_0506_0708, 0x0a0b_0c0d));
        assert_eq!(&bytes[0..4], &[0x25, 0x60, 0x95, 0x13]);
        assert_eq!(&bytes[4..8], &[0, 1, 0, 1]);
        assert_eq!(&bytes[16..24], &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(&bytes[24..28], &[0x0a, 0x0b, 0x0c, 0x0d]);
    }

    #[test]
    fn bad_request_magic_is_a_protocol_error() {
        let mut b = encode_request(&req(Command::Read, 0, 0, 512));
        b[0] ^= 0xff;
        assert!(matches!(
            parse_request(&b),
            Err(ProtocolError::BadRequestMagic { .. })
        ));
    }

    #[test]
    fn unknown_and_unsupported_commands_parse_and_are_refused() {
        let unknown =
            parse_request(&encode_request(&req(Command::Unknown(99), 0, 0, 512))).unwrap();
        assert_eq!(unknown.command, Command::Unknown(99));
        assert_eq!(
            check_request(&unknown, &RequestLimits::aligned(1 << 20)),
            Err(Errno::Inval)
        );
        let cache = req(Command::from_wire(NBD_CMD_CACHE), 0, 0, 512);
        assert_eq!(
            check_request(&cache, &RequestLimits::aligned(1 << 20)),
            Err(Errno::NotSup)
        );
    }

    #[test]
    fn check_request_enforces_alignment_range_and_cap() {
        let size = 1 << 20;
        assert_eq!(
            check_request(
                &req(Command::Read, 0, 0, 512),
                &RequestLimits::aligned(size)
            ),
            Ok(())
        );
        assert_eq!(
            check_request(
                &req(Command::Read, 0, 1, 512),
                &RequestLimits::aligned(size)
            ),
            Err(Errno::Inval)
        );
        assert_eq!(
            check_request(
                &req(Command::Read, 0, 0, 100),
                &RequestLimits::aligned(size)
            ),
            Err(Errno::Inval)
        );
        assert_eq!(
            check_request(&req(Command::Read, 0, 0, 0), &RequestLimits::aligned(size)),
            Err(Errno::Inval)
        );
        assert_eq!(
            check_request(
                &req(Command::Read, 0, size, 512),
                &RequestLimits::aligned(size)
            ),
            Err(Errno::Inval)
        );
        assert_eq!(
            check_request(
                &req(Command::Trim, 0, size, 512),
                &RequestLimits::aligned(size)
            ),
            Err(Errno::Inval)
        );
        assert_eq!(
            check_request(
                &req(Command::Write, 0, size, 512),
                &RequestLimits::aligned(size)
            ),
            Err(Errno::NoSpc)
        );
        assert_eq!(
            check_request(
                &req(Command::WriteZeroes, 0, size - 512, 1024),
                &RequestLimits::aligned(size)
            ),
            Err(Errno::NoSpc)
        );
        assert_eq!(
            check_request(
                &req(Command::Write, 0, u64::MAX - 511, 512),
                &RequestLimits::aligned(u64::MAX)
            ),
            Err(Errno::NoSpc),
            "offset + length overflow must not wrap into range"
        );
        let over = BLOCK_SIZE_MAX_BYTES + 512;
        assert_eq!(
            check_request(
                &req(Command::Write, 0, 0, over),
                &RequestLimits::aligned(u64::MAX)
            ),
            Err(Errno::Inval)
        );
        assert_eq!(
            check_request(
                &req(Command::Read, 0, 0, over),
                &RequestLimits::aligned(u64::MAX)
            ),
            Err(Errno::Inval)
        );
        // Large discards and zeroings carry no payload and are legal at any length.
        let huge = u32::MAX - 511;
        assert_eq!(
            check_request(
                &req(Command::Trim, 0, 0, huge),
                &RequestLimits::aligned(u64::MAX)
            ),
            Ok(())
        );
        assert_eq!(
            check_request(
                &req(Command::WriteZeroes, 0, 0, huge),
                &RequestLimits::aligned(u64::MAX)
            ),
            Ok(())
        );
        assert_eq!(
            check_request(
                &req(Command::Trim, 0, 0, huge),
                &RequestLimits::aligned(u64::from(huge) - 512)
            ),
            Err(Errno::Inval),
            "a large trim must still lie inside the export"
        );
        assert_eq!(
            check_request(&req(Command::Flush, 0, 0, 0), &RequestLimits::aligned(size)),
            Ok(())
        );
    }

    /// A client that never committed to the block sizes (EXPORT_NAME, GO without asking for
    /// them) may send any byte range; one that did keeps getting EINVAL for unaligned ones.
    #[test]
    fn alignment_is_enforced_only_on_clients_that_committed_to_it() {
        let size = 1 << 20;
        let bytes = RequestLimits {
            min_block_bytes: 1,
            ..RequestLimits::aligned(size)
        };
        for command in [
            Command::Read,
            Command::Write,
            Command::Trim,
            Command::WriteZeroes,
        ] {
            for (offset, length) in [(1, 512), (0, 100), (513, 7), (size - 1, 1)] {
                let r = req(command, 0, offset, length);
                assert_eq!(check_request(&r, &bytes), Ok(()), "{r:?}");
                assert_eq!(
                    check_request(&r, &RequestLimits::aligned(size)),
                    Err(Errno::Inval),
                    "{r:?}"
                );
            }
        }
        // The range and the 32 MiB cap still hold byte for byte.
        assert_eq!(
            check_request(&req(Command::Read, 0, size - 1, 2), &bytes),
            Err(Errno::Inval)
        );
        assert_eq!(
            check_request(&req(Command::Write, 0, size - 1, 2), &bytes),
            Err(Errno::NoSpc)
        );
        let over = BLOCK_SIZE_MAX_BYTES + 1;
        assert_eq!(
            check_request(&req(Command::Read, 0, 0, over), &bytes),
            Err(Errno::Inval)
        );
        assert_eq!(
            check_request(&req(Command::Read, 0, 0, 0), &bytes),
            Err(Errno::Inval)
        );
    }

    #[test]
    fn a_read_only_export_refuses_every_change_with_eperm() {
        let size = 1 << 20;
        let ro = RequestLimits {
            read_only: true,
            ..RequestLimits::aligned(size)
        };
        for command in [Command::Write, Command::Trim, Command::WriteZeroes] {
            assert_eq!(
                check_request(&req(command, 0, 0, 512), &ro),
                Err(Errno::Perm)
            );
            // EPERM even where the range alone would be ENOSPC or EINVAL.
            assert_eq!(
                check_request(&req(command, 0, size, 512), &ro),
                Err(Errno::Perm)
            );
        }
        assert_eq!(check_request(&req(Command::Read, 0, 0, 512), &ro), Ok(()));
        assert_eq!(check_request(&req(Command::Flush, 0, 0, 0), &ro), Ok(()));
        // A flag the command does not take is still EINVAL.
        assert_eq!(
            check_request(&req(Command::Write, NBD_CMD_FLAG_NO_HOLE, 0, 512), &ro),
            Err(Errno::Inval)
        );
    }

    #[test]
    fn check_request_rejects_flags_not_applicable() {
        let size = 1 << 20;
        let fua = NBD_CMD_FLAG_FUA;
        assert_eq!(
            check_request(
                &req(Command::Write, fua, 0, 512),
                &RequestLimits::aligned(size)
            ),
            Ok(())
        );
        assert_eq!(
            check_request(
                &req(Command::Write, NBD_CMD_FLAG_NO_HOLE, 0, 512),
                &RequestLimits::aligned(size)
            ),
            Err(Errno::Inval)
        );
        assert_eq!(
            check_request(
                &req(Command::WriteZeroes, NBD_CMD_FLAG_NO_HOLE | fua, 0, 512),
                &RequestLimits::aligned(size)
            ),
            Ok(())
        );
        assert_eq!(
            check_request(
                &req(Command::WriteZeroes, NBD_CMD_FLAG_FAST_ZERO, 0, 512),
                &RequestLimits::aligned(size)
            ),
            Err(Errno::Inval)
        );
        assert_eq!(
            check_request(
                &req(Command::Read, 0x8000, 0, 512),
                &RequestLimits::aligned(size)
            ),
            Err(Errno::Inval)
        );
    }

    #[test]
    fn option_header_parses_and_rejects_bad_magic() {
        let h = encode_option_header(NBD_OPT_GO, 7);
        assert_eq!(
            parse_option_header(&h),
            Ok(OptionHeader {
                option: NBD_OPT_GO,
                length: 7
            })
        );
        let mut bad = h;
        bad[7] = 0;
        assert!(matches!(
            parse_option_header(&bad),
            Err(ProtocolError::BadOptionMagic { .. })
        ));
    }

    #[test]
    fn client_flags() {
        assert_eq!(
            parse_client_flags(&3u32.to_be_bytes()),
            Ok(ClientFlags { no_zeroes: true })
        );
        assert_eq!(
            parse_client_flags(&1u32.to_be_bytes()),
            Ok(ClientFlags { no_zeroes: false })
        );
        assert_eq!(
            parse_client_flags(&0u32.to_be_bytes()),
            Err(ProtocolError::NotFixedNewstyle)
        );
        assert_eq!(
            parse_client_flags(&5u32.to_be_bytes()),
            Err(ProtocolError::UnknownClientFlags { flags: 5 })
        );
    }

    fn info_bytes(name: &[u8], infos: &[u16]) -> Vec<u8> {
        let mut b = (name.len() as u32).to_be_bytes().to_vec();
        b.extend_from_slice(name);
        b.extend_from_slice(&(infos.len() as u16).to_be_bytes());
        for i in infos {
            b.extend_from_slice(&i.to_be_bytes());
        }
        b
    }

    #[test]
    fn info_request_parses_and_rejects_malformed() {
        let ok = parse_info_request(&info_bytes(b"disk", &[NBD_INFO_BLOCK_SIZE, NBD_INFO_NAME]));
        assert_eq!(
            ok,
            Ok(InfoRequest {
                name: b"disk".to_vec(),
                requested: vec![NBD_INFO_BLOCK_SIZE, NBD_INFO_NAME]
            })
        );
        let mut trailing = info_bytes(b"", &[]);
        trailing.push(0);
        assert_eq!(
            parse_info_request(&trailing),
            Err(OptionDataError::TrailingBytes { extra: 1 })
        );
        let short = &info_bytes(b"disk", &[1, 2])[..9];
        assert!(matches!(
            parse_info_request(short),
            Err(OptionDataError::TooShort { .. })
        ));
        let huge_name = 100_000u32.to_be_bytes();
        assert!(matches!(
            parse_info_request(&huge_name),
            Err(OptionDataError::NameTooLong { .. })
        ));
        // A name length near u32::MAX must not overflow the index arithmetic.
        assert!(parse_info_request(&u32::MAX.to_be_bytes()).is_err());
    }

    #[test]
    fn encoders_have_documented_sizes() {
        assert_eq!(encode_greeting().len(), 18);
        assert_eq!(&encode_greeting()[0..8], b"NBDMAGIC");
        assert_eq!(&encode_greeting()[8..16], b"IHAVEOPT");
        assert_eq!(encode_option_reply(1, NBD_REP_ACK, &[]).len(), 20);
        assert_eq!(encode_export_name_reply(1, 1, false).len(), 134);
        assert_eq!(encode_export_name_reply(1, 1, true).len(), 10);
        assert_eq!(encode_simple_reply(22, 9)[4..8], 22u32.to_be_bytes());
    }

    proptest! {
        #[test]
        fn parse_request_never_panics(bytes in proptest::array::uniform28(any::<u8>()), size in any::<u64>()) {
            if let Ok(r) = parse_request(&bytes) {
                let _ = check_request(&r, &RequestLimits::aligned(size));
                prop_assert_eq!(encode_request(&r), bytes);
            }
        }

        #[test]
        fn parse_option_header_never_panics(bytes in proptest::array::uniform16(any::<u8>())) {
            let _ = parse_option_header(&bytes);
        }

        #[test]
        fn parse_info_request_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = parse_info_request(&bytes);
        }

        #[test]
        fn accepted_requests_lie_inside_the_export(
            offset in any::<u64>(), length in any::<u32>(), size in any::<u64>(), kind in 0u16..10,
            min_block in prop_oneof![Just(1u32), Just(BLOCK_SIZE_MIN_BYTES)], read_only in any::<bool>()
        ) {
            let r = req(Command::from_wire(kind), 0, offset, length);
            let limits = RequestLimits { export_bytes: size, min_block_bytes: min_block, read_only };
            if check_request(&r, &limits).is_ok() && !matches!(r.command, Command::Flush | Command::Disc) {
                prop_assert!(offset + u64::from(length) <= size);
                prop_assert!(length > 0);
                if matches!(r.command, Command::Read | Command::Write) {
                    prop_assert!(length <= BLOCK_SIZE_MAX_BYTES);
                }
                prop_assert_eq!(offset % u64::from(min_block), 0);
                prop_assert!(!read_only || r.command == Command::Read);
            }
        }
    }
}
