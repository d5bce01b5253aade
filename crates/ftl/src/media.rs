//! What every design does about worn media (docs/reliability.md): the parts of a controller's
//! handling of read errors that do not depend on the design. Bad-block replacement and read
//! reclaim sit below the designs, in the flash's bad-block layer; what a design must do itself
//! is never hand on data the ECC did not correct, keep a lost page lost when it moves it, and
//! tell a page lost to the media from one torn by a power cut when it recovers.

use crate::error::FtlError;
use flash::{Content, Flash, OpCause, PageState, Ppn, ReadStatus, Span};

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

/// Tells a page whose data failed ECC lost to the media from a torn one by reading its spare
/// area (a charged read of the OOB, into `oob`): a worn page's record still decodes, a torn
/// page's does not, so a record that decodes proves the page was programmed whole. Returns the
/// verdict and the read's span. With the media model off nothing is lost: the page is torn,
/// and nothing is read (an empty span at `not_before`). Called only for a page whose data did
/// not decode.
pub fn classify(
    flash: &mut Flash,
    ppn: Ppn,
    oob: &mut [u8],
    not_before: u64,
    cause: OpCause,
) -> Result<(Unreadable, Span), FtlError> {
    if flash.config().media.is_none() {
        let span = Span {
            start_ns: not_before,
            end_ns: not_before,
        };
        return Ok((Unreadable::Torn, span));
    }
    let (state, span) = flash.read_oob(ppn, oob, not_before, cause)?;
    let verdict = match state {
        PageState::Programmed => Unreadable::Lost,
        _ => Unreadable::Torn,
    };
    Ok((verdict, span))
}

/// Whether a page known to have been programmed whole — a record written after it names it
/// (a GTD entry, a seal's or a root's list), or its own spare area decoded — is lost to the
/// media when its data does not decode: no cut can tear a program that had ended. With the
/// media model on it is; with the model off nothing is lost and such a page is damage.
pub fn whole_page_lost(flash: &Flash) -> bool {
    flash.config().media.is_some()
}

/// The one place a design still asks the simulator ([`Flash::is_lost`]) whether page `ppn`,
/// which decoded nothing in a recovery's scan, was programmed whole (lost to the media) rather
/// than torn by a cut, where no record written after it names it. Torn by the cut and lost
/// whole read alike there; taking it for torn could hide an acknowledged version behind an
/// older one, and taking it for lost would stop every recovery after a cut that tore a page.
/// "A later page of its block decodes" does not decide it: a design may resume a block past a
/// page an earlier cut tore (FAST after its recovery, Möbius's hole skipping), so a torn page
/// can sit before decoding ones (soak seed 162713554244749, FAST, second life). Left open
/// (docs/reliability.md, "Lost or torn").
///
/// What it answers: [`Flash::is_lost`] is true exactly when the page is programmed (not torn,
/// not in a block whose erase was torn) and a read of it fails now (its data or its spare
/// area; a spare area lost is a page lost, and errors only grow until the erase). Asked only
/// after the design's own read of the page found nothing, it is therefore "was this page
/// programmed whole", the simulator's ground truth: it never makes a design take a torn page
/// for lost or a lost one for torn. It is a bit a real controller does not have, so the
/// designs' results on these paths are those of a controller with a perfect lost-or-torn
/// detector.
pub fn undecided_lost(flash: &Flash, ppn: Ppn) -> bool {
    flash.is_lost(ppn)
}

/// The program half of moving live page `from` to `to` after a read of it (state `sensed`,
/// ending at `read_end`), with `oob` as the copy's record: its data copied, or — when the ECC
/// found it lost — a copy that reads uncorrectable as it does, so its owner reads an error from
/// then on, never older data or another page's ([`Flash::program_lost_copy`]). A torn or erased
/// live page is damage no copy can mend.
#[inline]
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
    // Live and uncorrectable: lost to the media, whole or not (`record_of_live`); the flash
    // refuses a lost copy of a page it does not hold lost.
    if sensed == PageState::Torn && whole_page_lost(flash) {
        return Ok(flash.program_lost_copy(from, to, oob, read_end, cause)?);
    }
    Err(FtlError::Corrupt(format!(
        "live {from} did not read back ({sensed:?})"
    )))
}

/// The record of live page `from` for its copy: read with the page when it read (`peek`),
/// else from its spare area, which a page lost to the media usually still reads (a charged read
/// of the OOB), else — its spare area lost too — `rebuild`'s ([`record_of_unreadable`]).
/// Returns when the record is known.
#[inline]
pub fn record_of_live(
    flash: &mut Flash,
    (from, sensed): (Ppn, PageState),
    oob: &mut [u8],
    read_end: u64,
    cause: OpCause,
    rebuild: impl FnOnce(&mut [u8]) -> Result<(), FtlError>,
) -> Result<u64, FtlError> {
    if sensed == PageState::Programmed {
        flash.peek_oob(from, oob)?;
        return Ok(read_end);
    }
    let failed = (sensed == PageState::Torn).then_some(rebuild);
    record_of_unreadable(flash, from, oob, (read_end, cause), failed)
        .map_err(|e| e.in_context(format_args!("live {from} did not read back ({sensed:?})")))
}

/// [`record_of_live`] for a design whose GC reads a live page whole ([`Flash::read`], which
/// fills `oob` when the page reads): when the read was uncorrectable, the record comes from
/// the spare area of a page lost to the media, or from `rebuild` when that fails too; an erased
/// live page is damage. Returns when the record is known.
#[inline]
pub fn record_of_read(
    flash: &mut Flash,
    from: Ppn,
    status: &ReadStatus,
    oob: &mut [u8],
    (read_end, cause): (u64, OpCause),
    rebuild: impl FnOnce(&mut [u8]) -> Result<(), FtlError>,
) -> Result<u64, FtlError> {
    if let ReadStatus::Data(_) = status {
        return Ok(read_end);
    }
    let failed = (*status == ReadStatus::Uncorrectable).then_some(rebuild);
    record_of_unreadable(flash, from, oob, (read_end, cause), failed)
        .map_err(|e| e.in_context(format_args!("live {from} reads back {status}")))
}

/// The `rebuild` of a design whose record of a live page holds what it keeps nowhere else
/// (`what`: e.g. the write's sequence number that orders its recovery): such a page lost whole
/// is reported lost (`FtlError::MediaLoss`), never moved with a guessed record that could
/// order it before or after the wrong version.
pub fn record_kept_nowhere_else(
    from: Ppn,
    what: &str,
) -> impl FnOnce(&mut [u8]) -> Result<(), FtlError> + '_ {
    move |_| {
        Err(FtlError::MediaLoss {
            ppn: from,
            what: format!("the record of a live page ({what})"),
        })
    }
}

/// The record of live page `from`, whose data did not decode, for its copy: its spare area's
/// when that decodes (a page lost to the media, [`classify`]). When it does not either, the
/// page reads as a torn one does; but outside recovery a page the design's own mapping holds
/// live was programmed whole and acknowledged — no cut can have torn it — so with the media
/// model on it is a page lost whole, and its record is rebuilt from the design's mapping by
/// `rebuild` (given only when the data failed ECC, not when it read erased): the spare area
/// holds nothing the design cannot know, or `rebuild` says what it cannot rebuild
/// (`FtlError::MediaLoss`). With the model off nothing is lost and such a page is damage
/// (`FtlError::Corrupt`), as an erased live page is. Returns when the record is known.
///
/// Recovery never comes here: there a page no record names live may be the one a cut tore
/// ([`classify`] keeps calling it torn).
fn record_of_unreadable(
    flash: &mut Flash,
    from: Ppn,
    oob: &mut [u8],
    (read_end, cause): (u64, OpCause),
    rebuild: Option<impl FnOnce(&mut [u8]) -> Result<(), FtlError>>,
) -> Result<u64, FtlError> {
    match (classify(flash, from, oob, read_end, cause)?, rebuild) {
        ((Unreadable::Lost, span), _) => Ok(span.end_ns),
        ((Unreadable::Torn, span), Some(rebuild)) if whole_page_lost(flash) => {
            rebuild(oob)?;
            Ok(span.end_ns)
        }
        _ => Err(FtlError::Corrupt("its record neither".into())),
    }
}

/// The program half of moving live page `from` to `to` after [`Flash::read`] returned
/// `status` (and [`record_of_read`] the record in `oob`, known at `ready`): its data
/// programmed, or a lost copy of it ([`copy_live`]).
#[inline]
pub fn copy_read(
    flash: &mut Flash,
    (from, status): (Ppn, ReadStatus),
    to: Ppn,
    oob: &[u8],
    ready: u64,
    cause: OpCause,
) -> Result<Span, FtlError> {
    match status {
        ReadStatus::Data(content) => Ok(flash.program_owned(to, content, oob, ready, cause)?),
        _ => copy_live(flash, (from, PageState::Torn), to, oob, ready, cause),
    }
}

/// What a design programs into a page: data, or — moving a page the ECC found lost — a copy
/// that reads uncorrectable as its original does ([`Flash::program_lost_copy`]).
#[derive(Clone, Copy, Debug)]
pub enum Source<'a> {
    Data(&'a Content),
    LostCopyOf(Ppn),
}

impl<'a> Source<'a> {
    /// The source of a copy of `from`, which [`Flash::read`] returned as `status` (and
    /// [`record_of_read`] found lost, when it did not read).
    #[inline]
    pub fn of_read(from: Ppn, status: &'a ReadStatus) -> Source<'a> {
        match status {
            ReadStatus::Data(content) => Source::Data(content),
            _ => Source::LostCopyOf(from),
        }
    }

    /// Programs it at `ppn` with `oob` as its record.
    #[inline]
    pub fn program(
        self,
        flash: &mut Flash,
        ppn: Ppn,
        oob: &[u8],
        not_before: u64,
        cause: OpCause,
    ) -> Result<Span, FtlError> {
        Ok(match self {
            Source::Data(content) => flash.program(ppn, content, oob, not_before, cause)?,
            Source::LostCopyOf(from) => {
                flash.program_lost_copy(from, ppn, oob, not_before, cause)?
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{BlockPool, GcPolicy, Space, Validity};
    use flash::{BlockId, ContentTag, DeviceConfig, Fault};

    fn worn_device() -> Flash {
        Flash::in_memory(DeviceConfig::small_with_bit_errors_only(), 16, true)
    }

    fn tag(lpn: u32) -> Content {
        Content::Tag(ContentTag { lpn, write: 1 })
    }

    fn never_rebuilt(_: &mut [u8]) -> Result<(), FtlError> {
        panic!("a record that reads is never rebuilt")
    }

    /// Live page 1 of a fresh worn device (with the media model on or off) lost whole: its data
    /// and its spare area fail. Returns the device and the read of the page.
    fn live_page_lost_whole(cfg: DeviceConfig) -> (Flash, ReadStatus) {
        let mut f = Flash::in_memory(cfg, 16, true);
        for p in 0..2 {
            f.program(Ppn(p), &tag(p), &[p as u8 + 1; 16], 0, OpCause::HostData)
                .unwrap();
        }
        f.inject(Fault::ReadWhole(Ppn(1)));
        let (status, _) = f.read(Ppn(1), &mut [0u8; 16], 0, OpCause::GcCopy).unwrap();
        (f, status)
    }

    /// A live page lost whole — neither its data nor its spare area decodes — is moved as a
    /// lost copy with the record its design rebuilt from its mapping (the spare area names
    /// nothing): the copy reads uncorrectable with that record. A design that cannot rebuild
    /// it stops with its typed error, never `Corrupt`.
    #[test]
    fn a_live_page_lost_whole_moves_with_the_record_its_design_rebuilds() {
        let (mut f, status) = live_page_lost_whole(DeviceConfig::small_with_bit_errors_only());
        assert_eq!(status, ReadStatus::Uncorrectable);
        let mut oob = [0u8; 16];
        let rebuild = |o: &mut [u8]| {
            o.fill(9);
            Ok(())
        };
        let at = (0, OpCause::GcCopy);
        let ready = record_of_read(&mut f, Ppn(1), &status, &mut oob, at, rebuild).unwrap();
        assert_eq!(oob, [9; 16]);
        copy_read(&mut f, (Ppn(1), status.clone()), Ppn(32), &oob, ready, at.1).unwrap();
        let (copy, _) = f.read(Ppn(32), &mut oob, 0, OpCause::HostData).unwrap();
        assert_eq!(copy, ReadStatus::Uncorrectable);
        assert_eq!(
            f.read_oob(Ppn(32), &mut oob, 0, at.1).unwrap().0,
            PageState::Programmed
        );
        assert_eq!(oob, [9; 16], "the copy carries the rebuilt record");
        let cannot = |_: &mut [u8]| {
            Err(FtlError::MediaLoss {
                ppn: Ppn(1),
                what: "a record kept nowhere else".into(),
            })
        };
        let e = record_of_read(&mut f, Ppn(1), &status, &mut oob, at, cannot).unwrap_err();
        assert!(matches!(e, FtlError::MediaLoss { .. }), "{e}");
        // The sense-based path (`Space::collect`) decides alike.
        let ready = record_of_live(
            &mut f,
            (Ppn(1), PageState::Torn),
            &mut oob,
            0,
            at.1,
            rebuild,
        );
        assert!(ready.is_ok());
    }

    /// The rule is not loosened where a cut may have torn the page: with the media model off
    /// a live page that does not read is damage (`Corrupt`, the design's record never asked
    /// for), and recovery's [`classify`] still calls a torn page — nothing of it decodes —
    /// torn, so a recovery takes it for the cut's, not for acknowledged data.
    #[test]
    fn a_torn_page_stays_torn_and_damage_stays_damage() {
        let mut off = DeviceConfig::small_with_bit_errors_only();
        off.media = None;
        let mut f = Flash::in_memory(off, 16, true);
        let mut oob = [0u8; 16];
        let at = (0, OpCause::GcCopy);
        let e = record_of_read(
            &mut f,
            Ppn(3),
            &ReadStatus::Uncorrectable,
            &mut oob,
            at,
            never_rebuilt,
        )
        .unwrap_err();
        assert!(matches!(e, FtlError::Corrupt(_)), "{e}");
        // A live page that reads erased is damage whatever the model: nothing is rebuilt.
        let (mut f, _) = live_page_lost_whole(DeviceConfig::small_with_bit_errors_only());
        let e = record_of_read(
            &mut f,
            Ppn(5),
            &ReadStatus::Erased,
            &mut oob,
            at,
            never_rebuilt,
        )
        .unwrap_err();
        assert!(matches!(e, FtlError::Corrupt(_)), "{e}");
        // Torn by a cut (the first test's image): classify calls it torn, as before.
        let mut f = worn_device();
        let base = f.start_recording();
        f.program(Ppn(0), &tag(0), &[1; 16], 0, OpCause::HostData)
            .unwrap();
        let log = f.take_log().unwrap();
        let cut = log.ops.last().unwrap().span.start_ns + 1;
        let mut g = Flash::new(f.config().clone(), log.image_at(base.as_ref(), cut, true));
        let verdict = classify(&mut g, Ppn(0), &mut oob, 0, OpCause::Recovery).unwrap();
        assert_eq!(verdict.0, Unreadable::Torn);
    }

    /// A page lost to the media reads its spare area (lost); a torn one does not (torn); a
    /// readable or erased page is neither lost nor copied as lost.
    #[test]
    fn lost_and_torn_pages_are_told_apart_by_their_spare_area() {
        let mut f = worn_device();
        let base = f.start_recording();
        for p in 0..3 {
            f.program(Ppn(p), &tag(p), &[p as u8 + 1; 16], 0, OpCause::HostData)
                .unwrap();
        }
        let log = f.take_log().unwrap();
        let last = log.ops.last().unwrap().span;
        let cfg = f.config().clone();
        // Cut in the middle of the last program: page 2 torn.
        let mut g = Flash::new(cfg, log.image_at(base.as_ref(), last.start_ns + 1, true));
        g.inject(Fault::Read(Ppn(1)));
        let mut oob = [0u8; 16];
        let mut verdict = |g: &mut Flash, p| classify(g, Ppn(p), &mut oob, 0, OpCause::Recovery);
        assert_eq!(verdict(&mut g, 1).unwrap().0, Unreadable::Lost);
        assert_eq!(verdict(&mut g, 2).unwrap().0, Unreadable::Torn);
        let (status, read) = g.read(Ppn(1), &mut oob, 0, OpCause::GcCopy).unwrap();
        assert_eq!(status, ReadStatus::Uncorrectable);
        let ready = record_of_read(
            &mut g,
            Ppn(1),
            &status,
            &mut oob,
            (read.end_ns, OpCause::GcCopy),
            never_rebuilt,
        )
        .unwrap();
        assert_eq!(oob, [2; 16], "the lost page's record, from its spare area");
        copy_read(
            &mut g,
            (Ppn(1), status),
            Ppn(32),
            &oob,
            ready,
            OpCause::GcCopy,
        )
        .unwrap();
        assert!(g.is_lost(Ppn(32)));
        let (status, _) = g.read(Ppn(2), &mut oob, 0, OpCause::GcCopy).unwrap();
        // A live page that decodes nothing is taken for lost whole (a live page was programmed
        // whole) and its record rebuilt; a torn one held live — an FTL bug — is then refused
        // by the flash when copied as lost.
        let rebuilt = |o: &mut [u8]| {
            o.fill(3);
            Ok(())
        };
        let at = (0, OpCause::GcCopy);
        record_of_read(&mut g, Ppn(2), &status, &mut oob, at, rebuilt).unwrap();
        assert!(copy_live(
            &mut g,
            (Ppn(2), PageState::Torn),
            Ppn(33),
            &oob,
            0,
            OpCause::GcCopy
        )
        .is_err());
    }

    /// GC moves a live page the ECC finds lost as a lost copy: its owner maps to the copy,
    /// which reads uncorrectable — never erased, never another page's data.
    #[test]
    fn gc_moves_a_lost_live_page_as_lost() {
        let mut f = worn_device();
        let g = f.geometry().clone();
        let pool = BlockPool::new(&g, 2, |_| false);
        let mut space = Space::new(pool, Validity::new(&g), GcPolicy::Greedy, u32::MAX);
        for lpn in 0..g.pages_per_block {
            let ppn = space.allocate_on(0, flash::ChipId(0), &f).unwrap();
            f.program(ppn, &tag(lpn), &[lpn as u8; 16], 0, OpCause::HostData)
                .unwrap();
            space.validity.set_valid(ppn, lpn);
        }
        let victim = (0..g.blocks())
            .map(BlockId)
            .find(|&b| space.pool.state(b) == crate::BlockState::Full)
            .unwrap();
        let lost = g.ppn(victim, 3);
        space.validity.invalidate(g.ppn(victim, 0), 0);
        f.inject(Fault::Read(lost));
        let mut moves = Vec::new();
        space
            .collect(
                &mut f,
                victim,
                1,
                0,
                OpCause::GcCopy,
                |_, _| false,
                |_, _| panic!("the lost page's record reads"),
                Space::owner_kept,
                |m| moves.push(m),
                |_| 0,
            )
            .unwrap();
        let m = moves.iter().find(|m| m.from == lost).unwrap();
        assert!(f.is_lost(m.to));
        let mut oob = [0u8; 16];
        assert_eq!(
            f.read(m.to, &mut oob, 0, OpCause::HostData).unwrap().0,
            ReadStatus::Uncorrectable
        );
        assert_eq!(f.lost_tags(), vec![ContentTag { lpn: 3, write: 1 }]);
        assert_eq!(moves.len() as u32, g.pages_per_block - 1);
        space.check_invariants().unwrap();
    }
}
