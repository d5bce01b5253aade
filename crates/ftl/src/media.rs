//! What every design does about worn media (docs/reliability.md): the parts of a controller's
//! handling of read errors that do not depend on the design. Bad-block replacement and read
//! reclaim sit below the designs, in the flash's bad-block layer; what a design must do itself
//! is never hand on data the ECC did not correct, keep a lost page lost when it moves it, and
//! tell a page lost to the media from one torn by a power cut when it recovers.

use crate::error::FtlError;
use flash::{Flash, OpCause, PageState, Ppn, Span};

/// Why a page did not read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unreadable {
    /// Its program was cut by a power cut (or it was never whole): nothing of it reads, its
    /// spare area included. It holds nothing that was ever acknowledged.
    Torn,
    /// Its data failed ECC on a worn part, but its spare area — a codeword of its own — reads
    /// (its record in `oob`): the page was whole, and what it held is lost.
    Lost,
}

/// Tells a page that failed ECC lost to the media from a torn one by reading its spare area
/// (a charged read of the OOB, into `oob`): a worn page's record still decodes, a torn page's
/// does not. Returns the verdict and the read's span.
pub fn classify(
    flash: &mut Flash,
    ppn: Ppn,
    oob: &mut [u8],
    not_before: u64,
    cause: OpCause,
) -> Result<(Unreadable, Span), FtlError> {
    let (state, span) = flash.read_oob(ppn, oob, not_before, cause)?;
    let verdict = match state {
        PageState::Programmed if flash.is_lost(ppn) => Unreadable::Lost,
        _ => Unreadable::Torn,
    };
    Ok((verdict, span))
}

/// The program half of moving live page `from` to `to` after a read of it (state `sensed`,
/// ending at `read_end`), with `oob` as the copy's record: its data copied, or — when the ECC
/// found it lost — a copy that reads uncorrectable as it does, so its owner reads an error from
/// then on, never older data or another page's ([`Flash::program_lost_copy`]). A torn or erased
/// live page is damage no copy can mend.
pub fn copy_live(
    flash: &mut Flash,
    (from, sensed): (Ppn, PageState),
    to: Ppn,
    oob: &[u8],
    read_end: u64,
    cause: OpCause,
) -> Result<Span, FtlError> {
    if sensed == PageState::Programmed {
        return Ok(flash.program_copy(from, to, oob, read_end, cause)?);
    }
    if flash.is_lost(from) {
        return Ok(flash.program_lost_copy(from, to, oob, read_end, cause)?);
    }
    Err(FtlError::Corrupt(format!(
        "live {from} did not read back ({sensed:?})"
    )))
}

/// The record of live page `from` for its copy: read with the page when it read (`peek`),
/// else from its spare area, which a page lost to the media still reads (a charged read of the
/// OOB). Returns when the record is known.
pub fn record_of_live(
    flash: &mut Flash,
    (from, sensed): (Ppn, PageState),
    oob: &mut [u8],
    read_end: u64,
    cause: OpCause,
) -> Result<u64, FtlError> {
    if sensed == PageState::Programmed {
        flash.peek_oob(from, oob)?;
        return Ok(read_end);
    }
    match classify(flash, from, oob, read_end, cause)? {
        (Unreadable::Lost, span) => Ok(span.end_ns),
        (Unreadable::Torn, _) => Err(FtlError::Corrupt(format!(
            "live {from} did not read back ({sensed:?}), its record neither"
        ))),
    }
}
