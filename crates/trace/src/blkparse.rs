//! `blkparse` default text output.
//!
//! An event line is
//!
//! ```text
//! <maj,min> <cpu> <seq> <secs.nanosecs> <pid> <action> <rwbs> [<sector> + <sectors>] [<process>]
//!   8,0        3      1      0.000000000   1234      Q       WS   223490 + 8          [jbd2/sda1-8]
//! ```
//!
//! - Which events become requests: queue events (`Q`, what the host submitted) if the trace has
//!   any, else dispatches (`D`), else completions (`C`). Other actions (G, I, M, P, U, m, ...)
//!   are skipped.
//! - `rwbs` (the kernel's `blk_fill_rwbs`): an optional leading `F` is a preflush, then the
//!   operation `R` read, `W` write, `D` discard (`DE` secure erase), `F` flush, `N` none; an `F`
//!   after the operation is FUA; `A`, `S`, `M` (readahead, sync, meta) change nothing here.
//!   A preflush becomes a FLUSH request before the operation; a zero-length write or `N` with
//!   a preflush is just the FLUSH.
//! - Sectors are 512 bytes. The time is seconds with a decimal fraction (up to 9 digits).
//! - Blank lines are skipped; the summary blkparse prints at the end (from the first line
//!   starting `CPU<n> (` or `Total (`) is ignored. Any other line that is not an event is an
//!   error with its line number.

use std::io::BufRead;

use crate::{Format, LineError, Op, Request, TraceError};

const SECTOR_BYTES: u64 = 512;
/// Actions that can become requests, in order of preference.
const ACTIONS: [&str; 3] = ["Q", "D", "C"];

/// `maj,min` as blkparse prints a device.
pub fn is_device(field: &str) -> bool {
    let mut parts = field.split(',');
    let ok =
        |p: Option<&str>| p.is_some_and(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    ok(parts.next()) && ok(parts.next()) && parts.next().is_none()
}

fn is_summary_start(line: &str) -> bool {
    let t = line.trim_start();
    t.starts_with("Total (")
        || (t.starts_with("CPU")
            && t[3..]
                .split_once(" (")
                .is_some_and(|(n, _)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())))
}

/// `secs.fraction` in ns.
fn parse_time(s: &str) -> Option<u64> {
    let (secs, frac) = s.split_once('.').unwrap_or((s, ""));
    if secs.is_empty() || !secs.bytes().all(|b| b.is_ascii_digit()) || frac.len() > 9 {
        return None;
    }
    if !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let secs: u64 = secs.parse().ok()?;
    let frac_ns: u64 = if frac.is_empty() {
        0
    } else {
        frac.parse::<u64>().ok()? * 10u64.pow(9 - frac.len() as u32)
    };
    secs.checked_mul(1_000_000_000)?.checked_add(frac_ns)
}

/// The decoded `rwbs` field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Rwbs {
    preflush: bool,
    /// `None` for `N` (no data operation).
    op: Option<Op>,
    fua: bool,
}

fn parse_rwbs(s: &str) -> Result<Rwbs, LineError> {
    let b = s.as_bytes();
    let bad = || LineError::bad_field("rwbs field", s, "one blkparse prints");
    if b.is_empty() {
        return Err(bad());
    }
    let preflush = b.len() > 1 && b[0] == b'F' && matches!(b[1], b'R' | b'W' | b'D' | b'F' | b'N');
    let rest = if preflush { &b[1..] } else { b };
    let (op, mut tail) = match rest[0] {
        b'R' => (Some(Op::Read), &rest[1..]),
        b'W' => (Some(Op::Write), &rest[1..]),
        b'D' if rest.get(1) == Some(&b'E') => (Some(Op::Trim), &rest[2..]),
        b'D' => (Some(Op::Trim), &rest[1..]),
        b'F' => (Some(Op::Flush), &rest[1..]),
        b'N' => (None, &rest[1..]),
        _ => return Err(bad()),
    };
    let fua = tail.first() == Some(&b'F');
    if fua {
        tail = &tail[1..];
    }
    if !tail.iter().all(|c| matches!(c, b'A' | b'S' | b'M')) {
        return Err(bad());
    }
    Ok(Rwbs { preflush, op, fua })
}

/// One event line's requests (0, 1 or 2), if it is an event of `action`.
struct Event {
    action: String,
    arrival_ns: u64,
    rwbs: Rwbs,
    /// (sector, sectors) when the event names a range.
    range: Option<(u64, u64)>,
}

fn parse_event(line: &str) -> Result<Event, LineError> {
    let f: Vec<&str> = line.split_whitespace().collect();
    if f.len() < 7 {
        return Err(LineError::FieldCount {
            expected: "at least 7 fields (device cpu seq time pid action rwbs)",
            found: f.len(),
        });
    }
    let arrival_ns =
        parse_time(f[3]).ok_or_else(|| LineError::bad_field("time", f[3], "seconds.fraction"))?;
    let action = f[5].to_string();
    if !ACTIONS.contains(&f[5]) {
        // Not an event that becomes a request: its remaining fields are free-form.
        return Ok(Event {
            action,
            arrival_ns,
            rwbs: Rwbs {
                preflush: false,
                op: None,
                fua: false,
            },
            range: None,
        });
    }
    let rwbs = parse_rwbs(f[6])?;
    let range = if f.len() >= 10 && f[8] == "+" {
        let sector: u64 = f[7]
            .parse()
            .map_err(|_| LineError::bad_field("sector", f[7], "a number"))?;
        let count: u64 = f[9]
            .parse()
            .map_err(|_| LineError::bad_field("sector count", f[9], "a number"))?;
        Some((sector, count))
    } else if f.len() == 7 || f[7].starts_with('[') || f[7].starts_with('(') {
        None
    } else {
        return Err(LineError::bad_field(
            "range",
            &f[7..].join(" "),
            "`<sector> + <sectors>`",
        ));
    };
    Ok(Event {
        action,
        arrival_ns,
        rwbs,
        range,
    })
}

fn requests_of(e: &Event) -> Vec<Request> {
    let mut out = Vec::new();
    let flush = |out: &mut Vec<Request>| {
        out.push(Request {
            arrival_ns: e.arrival_ns,
            op: Op::Flush,
            offset_bytes: 0,
            length_bytes: 0,
            fua: false,
        })
    };
    if e.rwbs.preflush {
        flush(&mut out);
    }
    match (e.rwbs.op, e.range) {
        (Some(Op::Flush), _) if !e.rwbs.preflush => flush(&mut out),
        (Some(Op::Flush), _) => {}
        (Some(op), Some((sector, count))) if count > 0 => out.push(Request {
            arrival_ns: e.arrival_ns,
            op,
            offset_bytes: sector.saturating_mul(SECTOR_BYTES),
            length_bytes: count.saturating_mul(SECTOR_BYTES),
            fua: e.rwbs.fua && op == Op::Write,
        }),
        // A FUA write without data is a flush.
        (Some(Op::Write), _) if e.rwbs.fua && !e.rwbs.preflush => flush(&mut out),
        _ => {}
    }
    out
}

pub fn parse(input: impl BufRead) -> Result<Vec<Request>, TraceError> {
    // Events of each preferred action, kept until we know which action the trace has.
    let mut by_action: [Vec<Request>; 3] = Default::default();
    for (index, line) in input.lines().enumerate() {
        let line_no = index as u64 + 1;
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        if is_summary_start(&line) {
            break;
        }
        let first = line.split_whitespace().next().unwrap_or("");
        if !is_device(first) {
            return Err(TraceError::parse(
                Format::Blkparse,
                line_no,
                LineError::NotAnEvent(line.chars().take(80).collect()),
            ));
        }
        let event =
            parse_event(&line).map_err(|m| TraceError::parse(Format::Blkparse, line_no, m))?;
        if let Some(slot) = ACTIONS.iter().position(|a| *a == event.action) {
            by_action[slot].extend(requests_of(&event));
        }
    }
    let mut chosen = by_action
        .into_iter()
        .find(|v| !v.is_empty())
        .unwrap_or_default();
    // blkparse sorts by time, but per-CPU buffers can interleave by a few ns: keep file order
    // for equal times and sort otherwise.
    chosen.sort_by_key(|r| r.arrival_ns);
    Ok(chosen)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "\
  8,0    3        1     0.000000000  1234  Q   W 2048 + 8 [kworker/u8:2]
  8,0    3        2     0.000000500  1234  G   W 2048 + 8 [kworker/u8:2]
  8,0    3        3     0.000001000  1234  D   W 2048 + 8 [kworker/u8:2]
  8,0    0        4     0.000150000     0  C   W 2048 + 8 [0]
  8,0    1        5     0.001000000   77  Q FWFS 4096 + 16 [jbd2/sda-8]
  8,0    1        6     0.002000000   77  Q  FN [jbd2/sda-8]
  8,0    1        7     0.003000000   77  Q  RA 0 + 256 [cat]
  8,0    1        8     0.004000000   77  Q   D 8192 + 2048 [fstrim]
  8,0    1        9     0.004500000   77  m   N cfq77 some free text here
  8,0    1       10     0.005         77  Q  WS 100 + 0 [sync]

CPU0 (sda):
 Reads Queued:           1,      128KiB\t Writes Queued:           3,       12KiB
Total (sda):
";

    #[test]
    fn queue_events_become_requests() {
        let reqs = crate::parse(SAMPLE.as_bytes(), Format::Blkparse).unwrap();
        let got: Vec<(u64, Op, u64, u64, bool)> = reqs
            .iter()
            .map(|r| (r.arrival_ns, r.op, r.offset_bytes, r.length_bytes, r.fua))
            .collect();
        assert_eq!(
            got,
            vec![
                (0, Op::Write, 2048 * 512, 4096, false),
                (1_000_000, Op::Flush, 0, 0, false),
                (1_000_000, Op::Write, 4096 * 512, 8192, true),
                (2_000_000, Op::Flush, 0, 0, false),
                (3_000_000, Op::Read, 0, 256 * 512, false),
                (4_000_000, Op::Trim, 8192 * 512, 2048 * 512, false),
            ]
        );
    }

    #[test]
    fn dispatches_are_used_when_there_are_no_queue_events() {
        let text = "8,0 0 1 0.5 1 D WS 8 + 8 [x]\n8,0 0 2 0.6 0 C WS 8 + 8 [0]\n";
        let reqs = crate::parse(text.as_bytes(), Format::Blkparse).unwrap();
        assert_eq!(reqs.len(), 1);
        assert_eq!((reqs[0].op, reqs[0].offset_bytes), (Op::Write, 4096));
    }

    #[test]
    fn malformed_lines_name_their_line() {
        for (text, line) in [
            ("8,0 0 1 0.0 1 Q W 8 + 8 [x]\ngarbage here\n", 2),
            (
                "8,0 0 1 0.0 1 Q W 8 + 8 [x]\n8,0 0 2 zero 1 Q W 8 + 8 [x]\n",
                2,
            ),
            ("8,0 0 1 0.0 1 Q X 8 + 8 [x]\n", 1),
            ("8,0 0 1 0.0 1 Q W eight + 8 [x]\n", 1),
            ("8,0 0 1 0.0 1 Q W 8 - 8 [x]\n", 1),
            ("\n\n8,0 0 1 0.0 1 Q\n", 3),
        ] {
            match crate::parse(text.as_bytes(), Format::Blkparse) {
                Err(TraceError::Parse {
                    line: l,
                    format: Format::Blkparse,
                    ..
                }) => assert_eq!(l, line, "{text:?}"),
                other => panic!("{text:?}: expected a parse error, got {other:?}"),
            }
        }
    }

    #[test]
    fn rwbs_decodes() {
        let r = |s| parse_rwbs(s).unwrap();
        assert_eq!(
            r("FWFS"),
            Rwbs {
                preflush: true,
                op: Some(Op::Write),
                fua: true
            }
        );
        assert_eq!(
            r("WFS"),
            Rwbs {
                preflush: false,
                op: Some(Op::Write),
                fua: true
            }
        );
        assert_eq!(
            r("F"),
            Rwbs {
                preflush: false,
                op: Some(Op::Flush),
                fua: false
            }
        );
        assert_eq!(
            r("FN"),
            Rwbs {
                preflush: true,
                op: None,
                fua: false
            }
        );
        assert_eq!(
            r("DE"),
            Rwbs {
                preflush: false,
                op: Some(Op::Trim),
                fua: false
            }
        );
        assert_eq!(
            r("RM"),
            Rwbs {
                preflush: false,
                op: Some(Op::Read),
                fua: false
            }
        );
        assert!(parse_rwbs("WQ").is_err());
        assert!(parse_rwbs("").is_err());
    }

    #[test]
    fn times_parse() {
        assert_eq!(parse_time("1.5"), Some(1_500_000_000));
        assert_eq!(parse_time("0.000000001"), Some(1));
        assert_eq!(parse_time("3"), Some(3_000_000_000));
        assert_eq!(parse_time("1.0000000001"), None);
        assert_eq!(parse_time("-1.0"), None);
    }
}
