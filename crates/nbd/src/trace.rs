//! The server's request trace: each request handed to the backend as one line of our trace
//! format (`trace::line`, where the format is documented), with its simulated arrival.

pub use ::trace::line::{TraceFlags, TraceOp, TraceRecord, TraceWriter};

use crate::protocol::{Command, Request, NBD_CMD_FLAG_FUA, NBD_CMD_FLAG_NO_HOLE};

/// The trace op for an NBD command, if it is one the trace records.
pub fn op_of(command: Command) -> Option<TraceOp> {
    match command {
        Command::Read => Some(TraceOp::Read),
        Command::Write => Some(TraceOp::Write),
        Command::Flush => Some(TraceOp::Flush),
        Command::Trim => Some(TraceOp::Trim),
        Command::WriteZeroes => Some(TraceOp::WriteZeroes),
        Command::Disc => Some(TraceOp::Disc),
        Command::Unsupported(_) | Command::Unknown(_) => None,
    }
}

/// The flags a trace keeps of a request's wire flags.
pub fn flags_of(flags: u16) -> TraceFlags {
    TraceFlags {
        fua: flags & NBD_CMD_FLAG_FUA != 0,
        no_hole: flags & NBD_CMD_FLAG_NO_HOLE != 0,
    }
}

/// The record of a request arriving at `arrival_ns`, if its command is one the trace records.
pub fn record_of(req: &Request, arrival_ns: u64) -> Option<TraceRecord> {
    Some(TraceRecord {
        arrival_ns,
        op: op_of(req.command)?,
        offset: req.offset,
        length: req.length,
        flags: flags_of(req.flags),
    })
}
