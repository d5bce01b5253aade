//! Our trace line format: what `mobius serve --trace` records, one request per line, for later
//! replay (the NBD server writes it; `nbd::trace` turns its requests into records).
//!
//! ## Line format (version 1)
//!
//! ```text
//! <sim_arrival_ns> <op> <offset> <length> <flags>
//! ```
//!
//! Five fields separated by single spaces, one record per line, `\n`-terminated:
//!
//! | field | type | meaning |
//! | --- | --- | --- |
//! | `sim_arrival_ns` | decimal u64 | simulated arrival time in ns, as passed to the backend (`nbd::server` says how it is assigned); non-decreasing down a file |
//! | `op` | one of `READ` `WRITE` `FLUSH` `TRIM` `WRITE_ZEROES` `DISC` | the NBD command |
//! | `offset` | decimal u64 | byte offset; a multiple of 512 for READ/WRITE/TRIM/WRITE_ZEROES, as sent by the client (normally 0) for FLUSH and DISC |
//! | `length` | decimal u32 | byte length; a multiple of 512: in 512..=33554432 for READ/WRITE, in 512..=4294966784 for TRIM/WRITE_ZEROES, as sent (normally 0) for FLUSH and DISC |
//! | `flags` | `-` or a comma list without spaces of `FUA`, `NO_HOLE` | command flags that change the device's behaviour; `FUA` first when both are present |
//!
//! Example:
//!
//! ```text
//! 0 WRITE 0 65536 FUA
//! 15230 READ 0 65536 -
//! 40711 WRITE_ZEROES 1048576 4096 FUA,NO_HOLE
//! 50200 FLUSH 0 0 -
//! 99000 DISC 0 0 -
//! ```
//!
//! What is recorded: every request that passed validation and was handed to the backend, plus
//! each `DISC`, in the order the backend saw them (one line per request even with several
//! connections, written under the same lock as the backend call). Requests the server refused
//! before reaching the backend (misaligned, out of range, unknown command or flag) are not
//! recorded, so every line replays as a valid request against a device of the same size.
//! The write payload is not recorded; a replayer supplies its own data. The flush the server
//! itself performs when it shuts down is not a client request and is not recorded.
//!
//! Readers should skip blank lines and lines starting with `#` ([`read_trace`] does); the
//! server writes neither, but hand-edited traces may contain them.

use std::fmt;
use std::io::{self, BufRead, BufWriter, Write};
use std::str::FromStr;

use thiserror::Error;

/// The operation of one trace line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TraceOp {
    Read,
    Write,
    Flush,
    Trim,
    WriteZeroes,
    Disc,
}

impl TraceOp {
    pub fn as_str(self) -> &'static str {
        match self {
            TraceOp::Read => "READ",
            TraceOp::Write => "WRITE",
            TraceOp::Flush => "FLUSH",
            TraceOp::Trim => "TRIM",
            TraceOp::WriteZeroes => "WRITE_ZEROES",
            TraceOp::Disc => "DISC",
        }
    }
}

impl FromStr for TraceOp {
    type Err = TraceParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "READ" => TraceOp::Read,
            "WRITE" => TraceOp::Write,
            "FLUSH" => TraceOp::Flush,
            "TRIM" => TraceOp::Trim,
            "WRITE_ZEROES" => TraceOp::WriteZeroes,
            "DISC" => TraceOp::Disc,
            other => return Err(TraceParseError::UnknownOp(other.to_string())),
        })
    }
}

/// The command flags a trace keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct TraceFlags {
    /// Forced unit access: the write is durable when it completes.
    pub fua: bool,
    /// WRITE_ZEROES must allocate rather than punch a hole.
    pub no_hole: bool,
}

impl fmt::Display for TraceFlags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.fua, self.no_hole) {
            (false, false) => f.write_str("-"),
            (true, false) => f.write_str("FUA"),
            (false, true) => f.write_str("NO_HOLE"),
            (true, true) => f.write_str("FUA,NO_HOLE"),
        }
    }
}

impl FromStr for TraceFlags {
    type Err = TraceParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut flags = TraceFlags::default();
        if s == "-" {
            return Ok(flags);
        }
        for name in s.split(',') {
            let slot = match name {
                "FUA" => &mut flags.fua,
                "NO_HOLE" => &mut flags.no_hole,
                other => return Err(TraceParseError::UnknownFlag(other.to_string())),
            };
            if *slot {
                return Err(TraceParseError::DuplicateFlag(name.to_string()));
            }
            *slot = true;
        }
        Ok(flags)
    }
}

/// One trace line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TraceRecord {
    pub arrival_ns: u64,
    pub op: TraceOp,
    pub offset: u64,
    pub length: u32,
    pub flags: TraceFlags,
}

impl fmt::Display for TraceRecord {
    /// The line without its newline.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} {} {} {}",
            self.arrival_ns,
            self.op.as_str(),
            self.offset,
            self.length,
            self.flags
        )
    }
}

/// Why a trace line did not parse.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum TraceParseError {
    #[error("expected 5 space-separated fields `<sim_arrival_ns> <op> <offset> <length> <flags>`, found {0}")]
    FieldCount(usize),
    #[error("field `{field}` is not a decimal integer that fits: {value:?}")]
    BadNumber { field: &'static str, value: String },
    #[error("unknown op {0:?} (expected READ, WRITE, FLUSH, TRIM, WRITE_ZEROES or DISC)")]
    UnknownOp(String),
    #[error("unknown flag {0:?} (expected `-` or a comma list of FUA, NO_HOLE)")]
    UnknownFlag(String),
    #[error("flag {0:?} appears twice")]
    DuplicateFlag(String),
}

/// A parse error with the 1-based line number it happened on.
#[derive(Debug, Error)]
pub enum TraceReadError {
    #[error("trace line {line}: {source}")]
    Parse {
        line: usize,
        #[source]
        source: TraceParseError,
    },
    #[error("reading the trace: {0}")]
    Io(#[from] io::Error),
}

fn number<T: FromStr>(field: &'static str, value: &str) -> Result<T, TraceParseError> {
    // `u64::from_str` accepts a leading '+'; the format does not.
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return Err(TraceParseError::BadNumber {
            field,
            value: value.to_string(),
        });
    }
    value.parse().map_err(|_| TraceParseError::BadNumber {
        field,
        value: value.to_string(),
    })
}

/// Parses one record line (a trailing `\n` or `\r\n` is allowed). Comments and blank lines
/// are errors here; [`read_trace`] skips them.
pub fn parse_line(line: &str) -> Result<TraceRecord, TraceParseError> {
    let line = line.trim_end_matches(['\n', '\r']);
    let fields: Vec<&str> = line.split(' ').collect();
    if fields.len() != 5 {
        return Err(TraceParseError::FieldCount(fields.len()));
    }
    Ok(TraceRecord {
        arrival_ns: number("sim_arrival_ns", fields[0])?,
        op: fields[1].parse()?,
        offset: number("offset", fields[2])?,
        length: number("length", fields[3])?,
        flags: fields[4].parse()?,
    })
}

/// Reads a whole trace, skipping blank lines and `#` comments.
pub fn read_trace(input: impl BufRead) -> Result<Vec<TraceRecord>, TraceReadError> {
    let mut records = Vec::new();
    for (index, line) in input.lines().enumerate() {
        let line = line?;
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let record = parse_line(&line).map_err(|source| TraceReadError::Parse {
            line: index + 1,
            source,
        })?;
        records.push(record);
    }
    Ok(records)
}

/// Buffered writer of trace lines. The server flushes it when a connection ends and when it
/// shuts down.
pub struct TraceWriter {
    out: BufWriter<Box<dyn Write + Send>>,
}

impl TraceWriter {
    pub fn new(out: impl Write + Send + 'static) -> TraceWriter {
        TraceWriter {
            out: BufWriter::new(Box::new(out)),
        }
    }

    /// Creates (truncates) a trace file.
    pub fn create(path: impl AsRef<std::path::Path>) -> io::Result<TraceWriter> {
        Ok(TraceWriter::new(std::fs::File::create(path)?))
    }

    /// Writes one record and hands it to the kernel at once: the server records a request
    /// before it runs it, so a `kill -9` loses no request whose reply was sent (a buffered
    /// tail would lose the last few thousand).
    pub fn record(&mut self, record: &TraceRecord) -> io::Result<()> {
        writeln!(self.out, "{record}")?;
        self.out.flush()
    }

    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

impl fmt::Debug for TraceWriter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TraceWriter")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn documented_example_parses() {
        let text = "0 WRITE 0 65536 FUA\n15230 READ 0 65536 -\n\n# comment\n\
                    40711 WRITE_ZEROES 1048576 4096 FUA,NO_HOLE\n50200 FLUSH 0 0 -\n99000 DISC 0 0 -\n";
        let records = read_trace(text.as_bytes()).unwrap();
        assert_eq!(records.len(), 5);
        assert_eq!(
            records[2],
            TraceRecord {
                arrival_ns: 40711,
                op: TraceOp::WriteZeroes,
                offset: 1048576,
                length: 4096,
                flags: TraceFlags {
                    fua: true,
                    no_hole: true
                },
            }
        );
        assert_eq!(records[4].op, TraceOp::Disc);
    }

    #[test]
    fn display_matches_format() {
        let r = TraceRecord {
            arrival_ns: 7,
            op: TraceOp::Trim,
            offset: 512,
            length: 1024,
            flags: TraceFlags::default(),
        };
        assert_eq!(r.to_string(), "7 TRIM 512 1024 -");
        assert_eq!(parse_line("7 TRIM 512 1024 -\r\n"), Ok(r));
    }

    #[test]
    fn malformed_lines_are_typed_errors() {
        assert_eq!(
            parse_line("1 READ 0 512"),
            Err(TraceParseError::FieldCount(4))
        );
        assert_eq!(
            parse_line("1  READ 0 512 -"),
            Err(TraceParseError::FieldCount(6))
        );
        assert!(matches!(
            parse_line("x READ 0 512 -"),
            Err(TraceParseError::BadNumber { .. })
        ));
        assert!(matches!(
            parse_line("+1 READ 0 512 -"),
            Err(TraceParseError::BadNumber { .. })
        ));
        assert!(matches!(
            parse_line("1 READ 0 99999999999 -"),
            Err(TraceParseError::BadNumber {
                field: "length",
                ..
            })
        ));
        assert_eq!(
            parse_line("1 CACHE 0 512 -"),
            Err(TraceParseError::UnknownOp("CACHE".into()))
        );
        assert_eq!(
            parse_line("1 WRITE 0 512 DF"),
            Err(TraceParseError::UnknownFlag("DF".into()))
        );
        assert_eq!(
            parse_line("1 WRITE 0 512 FUA,FUA"),
            Err(TraceParseError::DuplicateFlag("FUA".into()))
        );
        assert!(parse_line("").is_err());
        let err = read_trace("0 READ 0 512 -\nbad\n".as_bytes()).unwrap_err();
        assert!(
            matches!(err, TraceReadError::Parse { line: 2, .. }),
            "{err}"
        );
    }

    #[test]
    fn writer_writes_one_line_per_record() {
        let buf = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        struct Sink(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);
        impl Write for Sink {
            fn write(&mut self, b: &[u8]) -> io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        let mut w = TraceWriter::new(Sink(buf.clone()));
        let r = parse_line("5 WRITE 4096 512 FUA").unwrap();
        w.record(&r).unwrap();
        w.record(&r).unwrap();
        w.flush().unwrap();
        assert_eq!(
            String::from_utf8(buf.lock().unwrap().clone()).unwrap(),
            "5 WRITE 4096 512 FUA\n5 WRITE 4096 512 FUA\n"
        );
    }

    fn op_strategy() -> impl Strategy<Value = TraceOp> {
        prop_oneof![
            Just(TraceOp::Read),
            Just(TraceOp::Write),
            Just(TraceOp::Flush),
            Just(TraceOp::Trim),
            Just(TraceOp::WriteZeroes),
            Just(TraceOp::Disc),
        ]
    }

    proptest! {
        #[test]
        fn records_round_trip(arrival_ns in any::<u64>(), op in op_strategy(), offset in any::<u64>(),
                              length in any::<u32>(), fua in any::<bool>(), no_hole in any::<bool>()) {
            let r = TraceRecord { arrival_ns, op, offset, length, flags: TraceFlags { fua, no_hole } };
            prop_assert_eq!(parse_line(&r.to_string()), Ok(r));
        }

        #[test]
        fn parse_line_never_panics(line in "\\PC{0,60}") {
            let _ = parse_line(&line);
        }
    }
}
