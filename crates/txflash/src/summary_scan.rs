//! The recovery scan both commit protocols share (TxFlash §4.1: "the simulator also writes a
//! per-block summary page"): every block read through its summary page when it is full and the
//! summary intact, else page by page to the first blank (an open block or a damaged summary);
//! blocks an interrupted erase left unreadable are erased again. The protocols differ only in
//! their record formats, given as functions.

use flash::codec::CorruptRecord;
use flash::{BlockId, Content, Flash, OpCause, PageState, Ppn, ReadStatus};
use ftl::{media, FtlError};

/// Recovery's analysis of the records it read, as simulated controller time (TxFlash §5.1,
/// Fig. 8: "SCC has better recovery time than BPCC and TC because during recovery it considers
/// only the top 2 versions for every page rather than paying the cost of analyzing all the page
/// versions"). `--param recovery_ns_per_record=N` charges N ns of CPU per record a protocol
/// analyses, after its scan's reads and before it writes anything; 0 (the default) leaves
/// recovery time as flash time alone. Returns the ns charged. docs/txflash.md, "Recovery time".
pub(crate) fn charge_analysis(flash: &mut Flash, records: u64, ns_per_record: u64) -> u64 {
    let ns = records.saturating_mul(ns_per_record);
    if ns > 0 {
        let ready = flash.idle_ns().saturating_add(ns);
        flash.start_clock_at(ready);
    }
    ns
}

/// The `recovery_ns_per_record` parameter both protocols take.
pub(crate) fn recovery_ns_per_record(o: &ftl::DesignOptions) -> Result<u64, FtlError> {
    o.get("recovery_ns_per_record", 0u64)
}

/// What the scan found.
pub(crate) struct BlockScan<R> {
    /// Every record kept, with where.
    pub found: Vec<(Ppn, R)>,
    /// Blocks holding anything (programmed or torn pages).
    pub used: Vec<bool>,
    pub summaries: u64,
    pub scanned: u64,
}

/// A summary page's entries, decoded (block number given for its check).
pub(crate) type SummaryDecoder<R> =
    dyn Fn(&[u8], u32) -> Result<Vec<Option<R>>, flash::codec::CorruptRecord>;

/// How a protocol's records read.
pub(crate) struct RecordFormat<'a, R> {
    /// Bytes of OOB a record takes.
    pub oob_bytes: usize,
    /// A page's OOB record.
    pub decode_oob: &'a dyn Fn(&[u8]) -> Result<R, CorruptRecord>,
    /// Is this OOB record a summary page's?
    pub is_summary: &'a dyn Fn(&R) -> bool,
    /// A summary page's entries (block number given for its check).
    pub decode_summary: &'a SummaryDecoder<R>,
    /// Records worth keeping.
    pub keep: &'a dyn Fn(&R) -> bool,
}

pub(crate) fn scan_blocks<R>(
    flash: &mut Flash,
    start: u64,
    format: &RecordFormat<'_, R>,
) -> Result<BlockScan<R>, FtlError> {
    let g = flash.geometry().clone();
    let ppb = g.pages_per_block;
    let mut s = BlockScan {
        found: Vec::new(),
        used: vec![false; g.blocks() as usize],
        summaries: 0,
        scanned: 0,
    };
    let mut torn_erases = Vec::new();
    let mut oob = vec![0u8; format.oob_bytes];
    for b in 0..g.blocks() {
        let block = BlockId(b);
        if flash.block_erase_torn(block) {
            torn_erases.push(block);
            continue;
        }
        let last = g.ppn(block, ppb - 1);
        let (status, _) = flash.read(last, &mut oob, start, OpCause::Recovery)?;
        if let ReadStatus::Data(Content::Bytes(bytes)) = &status {
            if (format.decode_oob)(&oob).is_ok_and(|r| (format.is_summary)(&r)) {
                if let Ok(entries) = (format.decode_summary)(bytes, b) {
                    s.summaries += 1;
                    s.used[b as usize] = true;
                    for (k, e) in entries.into_iter().enumerate() {
                        if let Some(r) = e.filter(|r| (format.keep)(r)) {
                            s.found.push((g.ppn(block, k as u32), r));
                        }
                    }
                    continue;
                }
            }
        }
        if !matches!(status, ReadStatus::Erased) {
            s.used[b as usize] = true;
        }
        for k in 0..ppb - 1 {
            let ppn = g.ppn(block, k);
            let (state, _) = flash.read_oob(ppn, &mut oob, start, OpCause::Recovery)?;
            s.scanned += 1;
            match state {
                PageState::Erased => break,
                // A record that does not read: a torn program's, or — its page lost to the
                // media whole — a record this block's summary would have held, had it one.
                PageState::Torn if media::undecided_lost(flash, ppn) => {
                    return Err(FtlError::MediaLoss {
                        ppn,
                        what: "the OOB record of a TxFlash page in a block without its summary"
                            .into(),
                    })
                }
                PageState::Torn => s.used[b as usize] = true,
                PageState::Programmed => {
                    s.used[b as usize] = true;
                    if let Some(r) = (format.decode_oob)(&oob).ok().filter(|r| (format.keep)(r)) {
                        s.found.push((ppn, r));
                    }
                }
            }
        }
    }
    for block in torn_erases {
        flash.erase(block, start, OpCause::Recovery)?;
    }
    Ok(s)
}
