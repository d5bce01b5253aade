//! MSRC-style CSV (the SNIA "MSR Cambridge" block traces).
//!
//! ```text
//! Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime
//! 128166372003061629,hm,1,Read,3387584512,4096,74186
//! ```
//!
//! - `Timestamp` is a Windows FILETIME (100 ns ticks); arrivals are its distance from the first
//!   request's, in ns.
//! - `Type` is `Read` or `Write` (any case). `Offset` and `Size` are bytes; a request of size 0
//!   is skipped. `Hostname`, `DiskNumber` and `ResponseTime` are read as text and ignored (the
//!   trace may mix disks; filter it first if that matters).
//! - A first line whose first field is not a number is a header and is skipped. Fields may be
//!   surrounded by spaces. Blank lines are skipped.

use std::io::BufRead;

use crate::{Format, LineError, Op, Request, TraceError};

/// FILETIME ticks are 100 ns.
const TICK_NS: u64 = 100;

fn number(field: &str, name: &'static str) -> Result<u64, LineError> {
    field
        .parse::<u64>()
        .map_err(|_| LineError::bad_field(name, field, "a non-negative integer"))
}

pub fn parse(input: impl BufRead) -> Result<Vec<Request>, TraceError> {
    // Hand-split rather than the csv crate: these rows never quote, and the csv reader's line
    // positions skip blank lines, which would misnumber errors.
    let mut requests = Vec::new();
    let mut first = true;
    for (index, line) in input.lines().enumerate() {
        let line_no = index as u64 + 1;
        let line = line?;
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let fields: Vec<&str> = trimmed
            .split(',')
            .map(|f| f.trim().trim_matches('"'))
            .collect();
        let is_header = first && fields[0].parse::<u64>().is_err();
        first = false;
        if is_header {
            continue;
        }
        let err = |m: LineError| TraceError::parse(Format::Msrc, line_no, m);
        if fields.len() < 6 {
            return Err(err(LineError::FieldCount {
                expected: "7 fields `Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime`",
                found: fields.len(),
            }));
        }
        let ticks = number(fields[0], "Timestamp").map_err(err)?;
        let op = match fields[3].to_ascii_lowercase().as_str() {
            "read" => Op::Read,
            "write" => Op::Write,
            other => return Err(err(LineError::bad_field("Type", other, "Read or Write"))),
        };
        let offset_bytes = number(fields[4], "Offset").map_err(err)?;
        let length_bytes = number(fields[5], "Size").map_err(err)?;
        if length_bytes == 0 {
            continue;
        }
        requests.push(Request {
            arrival_ns: ticks.saturating_mul(TICK_NS),
            op,
            offset_bytes,
            length_bytes,
            fua: false,
        });
    }
    Ok(requests)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_become_requests() {
        let text = "Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime\n\
                    128166372003061629,hm,1,Read,3387584512,4096,74186\n\
                    \n\
                    128166372003061639, hm, 1, write, 1024, 8192, 100\n\
                    128166372003061640,hm,1,Write,0,0,1\n";
        let reqs = crate::parse(text.as_bytes(), Format::Msrc).unwrap();
        assert_eq!(
            reqs,
            vec![
                Request {
                    arrival_ns: 0,
                    op: Op::Read,
                    offset_bytes: 3387584512,
                    length_bytes: 4096,
                    fua: false
                },
                Request {
                    arrival_ns: 1000,
                    op: Op::Write,
                    offset_bytes: 1024,
                    length_bytes: 8192,
                    fua: false
                },
            ]
        );
    }

    #[test]
    fn malformed_rows_name_their_line() {
        for (text, line) in [
            ("1,h,0,Read,0,4096,1\n2,h,0,Erase,0,4096,1\n", 2),
            ("1,h,0,Read,0,4096,1\n2,h,0,Read\n", 2),
            ("1,h,0,Read,-5,4096,1\n", 1),
            (
                "Timestamp,Hostname\n1,h,0,Read,0,4096,1\n\n9,h,0,Read,0,big,1\n",
                4,
            ),
        ] {
            match crate::parse(text.as_bytes(), Format::Msrc) {
                Err(TraceError::Parse {
                    line: l,
                    format: Format::Msrc,
                    ..
                }) => assert_eq!(l, line, "{text:?}"),
                other => panic!("{text:?}: expected a parse error, got {other:?}"),
            }
        }
    }
}
