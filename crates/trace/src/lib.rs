//! # mobius-trace: block traces as a list of host requests
//!
//! Three input formats, one output type ([`Request`]):
//!
//! | [`Format`] | what | parser |
//! | --- | --- | --- |
//! | `ours` | the lines `mobius serve --trace` writes (the format: [`line`]) | [`ours`] |
//! | `blkparse` | `blkparse` default text output (`8,0 1 7 0.000123 42 Q WS 2048 + 8 [proc]`) | [`blkparse`] |
//! | `msrc` | MSRC-Cambridge-style CSV (`Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime`) | [`msrc`] |
//!
//! [`load`] opens a file, decompresses it if it is gzip (by its magic bytes, whatever its name),
//! detects the format when none is given, and parses it. Every malformed line is a
//! [`TraceError::Parse`] carrying its 1-based line number.
//!
//! Arrival times are rebased so the first request arrives at 0 and never go backwards down the
//! list (a request stamped earlier than its predecessor arrives with it). Offsets and lengths
//! are in bytes as the trace gives them; they need not be page aligned.
//!
//! [`split_at_flushes`] groups the writes between durability points, the shape `mobius
//! compare`'s macro experiment turns into transactions.

pub mod blkparse;
pub mod line;
pub mod meta;
pub mod msrc;
pub mod ours;

use std::fmt;
use std::io::{self, BufRead, BufReader, Read};
use std::path::Path;
use std::str::FromStr;

use thiserror::Error;

/// What a request asks of the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    Read,
    Write,
    /// Make every completed write durable.
    Flush,
    /// Discard the range (advisory).
    Trim,
    /// Write zeroes over the range (no payload in the trace).
    WriteZeroes,
}

impl Op {
    pub fn as_str(self) -> &'static str {
        match self {
            Op::Read => "read",
            Op::Write => "write",
            Op::Flush => "flush",
            Op::Trim => "trim",
            Op::WriteZeroes => "write_zeroes",
        }
    }

    /// Whether the request changes the device's contents.
    pub fn modifies(self) -> bool {
        matches!(self, Op::Write | Op::Trim | Op::WriteZeroes)
    }
}

/// One host request of a trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Request {
    /// Arrival in ns after the first request of the trace.
    pub arrival_ns: u64,
    pub op: Op,
    /// Byte offset (0 for a flush).
    pub offset_bytes: u64,
    /// Byte length (0 for a flush).
    pub length_bytes: u64,
    /// Forced unit access: durable when it completes (a write followed by a flush).
    pub fua: bool,
}

impl Request {
    /// One past the last byte the request touches.
    pub fn end_bytes(&self) -> u64 {
        self.offset_bytes.saturating_add(self.length_bytes)
    }
}

/// A trace format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Format {
    Ours,
    Blkparse,
    Msrc,
}

impl Format {
    pub const NAMES: [&'static str; 3] = ["ours", "blkparse", "msrc"];

    pub fn as_str(self) -> &'static str {
        match self {
            Format::Ours => "ours",
            Format::Blkparse => "blkparse",
            Format::Msrc => "msrc",
        }
    }

    /// Guesses the format from the first line that is not blank or a `#` comment.
    pub fn detect(first_line: &str) -> Option<Format> {
        let line = first_line.trim();
        let fields: Vec<&str> = line.split_whitespace().collect();
        if line.contains(',') && !fields.first().is_some_and(|f| blkparse::is_device(f)) {
            return Some(Format::Msrc);
        }
        if fields.first().is_some_and(|f| blkparse::is_device(f)) {
            return Some(Format::Blkparse);
        }
        if fields.len() == 5 && fields[1].parse::<line::TraceOp>().is_ok() {
            return Some(Format::Ours);
        }
        None
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Format {
    type Err = TraceError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "ours" => Ok(Format::Ours),
            "blkparse" => Ok(Format::Blkparse),
            "msrc" => Ok(Format::Msrc),
            other => Err(TraceError::UnknownFormatName(other.to_string())),
        }
    }
}

/// Why a trace could not be loaded.
#[derive(Debug, Error)]
pub enum TraceError {
    #[error("{format} trace, line {line}: {problem}")]
    Parse {
        format: Format,
        /// 1-based line number in the (decompressed) text.
        line: u64,
        problem: LineError,
    },
    #[error("unknown trace format {0:?} (expected ours, blkparse or msrc)")]
    UnknownFormatName(String),
    #[error("cannot tell the trace's format from its first line {0:?}; pass --format ours|blkparse|msrc")]
    Undetected(String),
    #[error("the trace holds no request")]
    Empty,
    #[error("reading the trace: {0}")]
    Io(#[from] io::Error),
}

impl TraceError {
    pub(crate) fn parse(format: Format, line: u64, problem: impl Into<LineError>) -> TraceError {
        TraceError::Parse {
            format,
            line,
            problem: problem.into(),
        }
    }
}

/// What is wrong with one line of a trace.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum LineError {
    #[error("{field} {value:?} is not {expected}")]
    BadField {
        field: &'static str,
        value: String,
        expected: &'static str,
    },
    #[error("expected {expected}, found {found} fields")]
    FieldCount {
        expected: &'static str,
        found: usize,
    },
    #[error("{op} of length 0")]
    ZeroLength { op: &'static str },
    #[error("not a blkparse event line (it must start with `maj,min`): {0:?}")]
    NotAnEvent(String),
    #[error(transparent)]
    Ours(#[from] line::TraceParseError),
}

impl LineError {
    pub(crate) fn bad_field(field: &'static str, value: &str, expected: &'static str) -> LineError {
        LineError::BadField {
            field,
            value: value.to_string(),
            expected,
        }
    }
}

/// Parses a whole trace in `format` (uncompressed text).
pub fn parse(input: impl BufRead, format: Format) -> Result<Vec<Request>, TraceError> {
    let mut requests = match format {
        Format::Ours => ours::parse(input)?,
        Format::Blkparse => blkparse::parse(input)?,
        Format::Msrc => msrc::parse(input)?,
    };
    rebase(&mut requests);
    Ok(requests)
}

/// Loads a trace file: gzip or plain (by magic bytes), `format` or detected.
pub fn load(
    path: impl AsRef<Path>,
    format: Option<Format>,
) -> Result<(Format, Vec<Request>), TraceError> {
    let file = std::fs::File::open(path.as_ref())?;
    read(file, format)
}

/// [`load`] for any reader.
pub fn read<'a>(
    input: impl Read + 'a,
    format: Option<Format>,
) -> Result<(Format, Vec<Request>), TraceError> {
    let mut text = decompressed(input)?;
    let format = match format {
        Some(f) => f,
        None => detect_in(text.as_mut())?,
    };
    Ok((format, parse(text, format)?))
}

/// The text of a trace: gunzipped if it is gzip (by its magic bytes), else as it is.
pub fn decompressed<'a>(input: impl Read + 'a) -> io::Result<Box<dyn BufRead + 'a>> {
    let mut input = BufReader::new(input);
    let gzip = input.fill_buf()?.starts_with(&[0x1f, 0x8b]);
    Ok(if gzip {
        Box::new(BufReader::new(flate2::bufread::MultiGzDecoder::new(input)))
    } else {
        Box::new(input)
    })
}

/// Peeks at the first meaningful line without consuming it (the buffer holds it).
fn detect_in(text: &mut dyn BufRead) -> Result<Format, TraceError> {
    let buf = text.fill_buf()?;
    let head = String::from_utf8_lossy(&buf[..buf.len().min(64 << 10)]).into_owned();
    let first = head
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with('#'))
        .ok_or(TraceError::Empty)?;
    Format::detect(first).ok_or_else(|| TraceError::Undetected(first.chars().take(80).collect()))
}

/// First arrival becomes 0; arrivals never go backwards.
fn rebase(requests: &mut [Request]) {
    let Some(first) = requests.first().map(|r| r.arrival_ns) else {
        return;
    };
    let mut last = 0u64;
    for r in requests.iter_mut() {
        let t = r.arrival_ns.saturating_sub(first).max(last);
        r.arrival_ns = t;
        last = t;
    }
}

/// The modifying requests (write, trim, write-zeroes) between durability points, in order.
///
/// A group ends at each FLUSH and after each FUA request (a FUA write is the write followed by
/// a flush); reads are left out and empty groups are dropped. The writes of one group are what
/// the host allowed the device to make durable in any order: `mobius compare` turns each into
/// one transaction.
pub fn split_at_flushes(requests: &[Request]) -> Vec<Vec<Request>> {
    let mut groups = Vec::new();
    let mut current = Vec::new();
    for r in requests {
        if r.op.modifies() {
            current.push(*r);
        }
        let durable_point = r.op == Op::Flush || (r.fua && r.op.modifies());
        if durable_point && !current.is_empty() {
            groups.push(std::mem::take(&mut current));
        }
    }
    if !current.is_empty() {
        groups.push(current);
    }
    groups
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(arrival_ns: u64, op: Op, fua: bool) -> Request {
        Request {
            arrival_ns,
            op,
            offset_bytes: 0,
            length_bytes: 4096,
            fua,
        }
    }

    #[test]
    fn groups_end_at_flushes_and_fua_writes() {
        let reqs = [
            req(0, Op::Write, false),
            req(1, Op::Read, false),
            req(2, Op::Trim, false),
            req(3, Op::Flush, false),
            req(4, Op::Flush, false),
            req(5, Op::Write, false),
            req(6, Op::Write, true),
            req(7, Op::WriteZeroes, false),
        ];
        let groups = split_at_flushes(&reqs);
        let times: Vec<Vec<u64>> = groups
            .iter()
            .map(|g| g.iter().map(|r| r.arrival_ns).collect())
            .collect();
        assert_eq!(times, vec![vec![0, 2], vec![5, 6], vec![7]]);
    }

    #[test]
    fn rebase_starts_at_zero_and_never_goes_back() {
        let mut reqs = [
            req(100, Op::Read, false),
            req(150, Op::Read, false),
            req(120, Op::Read, false),
        ];
        rebase(&mut reqs);
        let t: Vec<u64> = reqs.iter().map(|r| r.arrival_ns).collect();
        assert_eq!(t, vec![0, 50, 50]);
    }

    #[test]
    fn formats_are_detected_from_the_first_line() {
        assert_eq!(Format::detect("0 WRITE 0 4096 FUA"), Some(Format::Ours));
        assert_eq!(
            Format::detect("  8,0    3        1     0.000000000  1234  Q   W 223490 + 8 [jbd2]"),
            Some(Format::Blkparse)
        );
        assert_eq!(
            Format::detect("128166372003061629,hm,1,Read,3387584512,4096,74186"),
            Some(Format::Msrc)
        );
        assert_eq!(Format::detect("hello world"), None);
        assert!(matches!(
            "tar".parse::<Format>(),
            Err(TraceError::UnknownFormatName(_))
        ));
    }

    #[test]
    fn gzip_and_plain_read_the_same() {
        use flate2::write::GzEncoder;
        use std::io::Write;
        let text = "0 WRITE 0 4096 -\n10 FLUSH 0 0 -\n20 READ 512 1024 -\n30 DISC 0 0 -\n";
        let mut enc = GzEncoder::new(Vec::new(), flate2::Compression::default());
        enc.write_all(text.as_bytes()).unwrap();
        let gz = enc.finish().unwrap();
        let (f1, plain) = read(text.as_bytes(), None).unwrap();
        let (f2, unzipped) = read(gz.as_slice(), None).unwrap();
        assert_eq!((f1, f2), (Format::Ours, Format::Ours));
        assert_eq!(plain, unzipped);
        assert_eq!(plain.len(), 3, "DISC is not a device request");
        assert!(matches!(read("".as_bytes(), None), Err(TraceError::Empty)));
        assert!(matches!(
            read("what is this\n".as_bytes(), None),
            Err(TraceError::Undetected(_))
        ));
    }
}
