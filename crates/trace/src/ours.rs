//! Our own format: the lines `mobius serve --trace` writes (the format: [`crate::line`]).
//!
//! `DISC` lines end a connection, not a device request, and are dropped; `WRITE_ZEROES` keeps
//! its FUA flag and loses NO_HOLE (every design writes the zeroes).

use std::io::BufRead;

use crate::line::{parse_line, TraceOp};

use crate::{Format, LineError, Op, Request, TraceError};

pub fn parse(input: impl BufRead) -> Result<Vec<Request>, TraceError> {
    let mut requests = Vec::new();
    for (index, line) in input.lines().enumerate() {
        let line_no = index as u64 + 1;
        let line = line?;
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let record = parse_line(&line).map_err(|e| TraceError::parse(Format::Ours, line_no, e))?;
        let op = match record.op {
            TraceOp::Read => Op::Read,
            TraceOp::Write => Op::Write,
            TraceOp::Flush => Op::Flush,
            TraceOp::Trim => Op::Trim,
            TraceOp::WriteZeroes => Op::WriteZeroes,
            TraceOp::Disc => continue,
        };
        let (offset_bytes, length_bytes) = if op == Op::Flush {
            (0, 0)
        } else {
            (record.offset, u64::from(record.length))
        };
        if op != Op::Flush && length_bytes == 0 {
            return Err(TraceError::parse(
                Format::Ours,
                line_no,
                LineError::ZeroLength {
                    op: record.op.as_str(),
                },
            ));
        }
        requests.push(Request {
            arrival_ns: record.arrival_ns,
            op,
            offset_bytes,
            length_bytes,
            fua: record.flags.fua,
        });
    }
    Ok(requests)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_become_requests() {
        let text = "# recorded by hand\n5 WRITE 1024 3072 FUA\n9 WRITE_ZEROES 0 8192 NO_HOLE\n\
                    12 FLUSH 0 0 -\n13 TRIM 4096 4096 -\n20 READ 0 512 -\n21 DISC 0 0 -\n";
        let reqs = crate::parse(text.as_bytes(), Format::Ours).unwrap();
        let ops: Vec<Op> = reqs.iter().map(|r| r.op).collect();
        assert_eq!(
            ops,
            [Op::Write, Op::WriteZeroes, Op::Flush, Op::Trim, Op::Read]
        );
        assert_eq!(
            reqs[0],
            Request {
                arrival_ns: 0,
                op: Op::Write,
                offset_bytes: 1024,
                length_bytes: 3072,
                fua: true
            }
        );
        assert_eq!(reqs[4].arrival_ns, 15, "rebased to the first request");
    }

    #[test]
    fn malformed_lines_name_their_line() {
        let text = "0 WRITE 0 4096 -\n\n1 WRITE 0 4096 BOGUS\n";
        match crate::parse(text.as_bytes(), Format::Ours) {
            Err(TraceError::Parse {
                line,
                format,
                problem,
            }) => {
                assert_eq!((line, format), (3, Format::Ours));
                let message = problem.to_string();
                assert!(message.contains("BOGUS"), "{message}");
            }
            other => panic!("expected a parse error, got {other:?}"),
        }
        assert!(matches!(
            crate::parse("0 READ 0 0 -\n".as_bytes(), Format::Ours),
            Err(TraceError::Parse { line: 1, .. })
        ));
    }
}
