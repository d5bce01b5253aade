//! Möbius: reads and SREAD (Table I), and the invariants the harness checks after every
//! request.

use super::*;

impl Mobius {
    // ---------------------------------------------------------------- reads

    pub(super) fn read_pages(
        &mut self,
        start: Lpn,
        count: u32,
        at: u64,
        overlay: bool,
        out: &mut Vec<PageOutcome>,
    ) -> Result<u64, FtlError> {
        out.clear();
        let mut ack = at;
        let mut oob = [0u8; OOB_BYTES as usize];
        for i in 0..count {
            let lpn = start.0 + i;
            let (mut ppn, t) = self.lookup(lpn, at)?;
            if overlay {
                for tx in &self.txs {
                    let dyn_wrote = self
                        .chain
                        .as_ref()
                        .is_some_and(|c| c.undo.iter().any(|u| u.0 == lpn));
                    if tx.state == TxState::Pending && !tx.superseded.contains(&lpn) && !dyn_wrote {
                        if let Some(&(_, p)) = tx.items.iter().find(|x| x.0 == lpn) {
                            ppn = p;
                        }
                    }
                }
            }
            if ppn == NO_PPN {
                out.push(PageOutcome::Unwritten);
                ack = ack.max(t);
                continue;
            }
            let (st, span) = self
                .flash
                .read(Ppn(ppn), &mut oob, t, OpCause::HostData)
                .map_err(err_flash)?;
            ack = ack.max(span.end_ns);
            out.push(PageOutcome::of_mapped_page(st));
        }
        Ok(ack)
    }

    /// Live pages on the data blocks (host data, pending transactions, translation pages).
    pub fn valid_pages(&self) -> u64 {
        (0..self.flash.geometry().blocks())
            .map(BlockId)
            .filter(|&b| !self.layout.is_reserved(b))
            .map(|b| self.space.validity.valid_count(b) as u64)
            .sum()
    }

    pub(crate) fn state_check(&self) -> Result<(), ftl::InvariantViolation> {
        self.space.check_invariants()?;
        if self.resident.len() as u64
            > self.cfg.active_ala_pages * self.items_per_inode as u64
                + self.flash.geometry().pages() as u64
        {
            return Err("Resident Area exceeds its bound".into());
        }
        for (l, p) in &self.resident {
            if *p != NO_PPN && self.space.validity.owner(Ppn(*p)) != Some(*l) {
                return Err(ftl::violation!(
                    "lpn {l} maps to {p}, which is not live for it"
                ));
            }
        }
        if self.tail < self.head {
            return Err("ALA tail behind head".into());
        }
        self.check_translation_view()
    }

    /// Every loaded or evicted translation page's copy on flash holds what the view says: the
    /// view changes only in a merge, which writes every page it changes, from its previous copy
    /// and the folded LPNs alone ([`patch_tp`]); this is what keeps that rewrite honest, and
    /// what lets a reload after eviction keep the view instead of decoding the page again.
    fn check_translation_view(&self) -> Result<(), ftl::InvariantViolation> {
        if self.merging {
            return Ok(());
        }
        let per = entries_per_page(self.flash.geometry().page_bytes);
        for (tp, &ppn) in self.gtd.iter().enumerate() {
            // An evicted page's entries stay in the view, and a reload uses them as they are.
            if ppn == NO_PPN || !(self.tp_loaded[tp] || self.tp_evicted[tp]) {
                continue;
            }
            let page = self
                .flash
                .peek_page(Ppn(ppn))
                .map_err(|e| ftl::violation!("translation page {tp} at {ppn}: {e}"))?;
            let start = tp * per;
            let mut view = self.base[start..(start + per).min(self.logical as usize)].to_vec();
            match decode_tp_into(&page, &mut view) {
                Ok(true) => {}
                Ok(false) => {
                    return Err(ftl::violation!(
                        "translation page {tp} at {ppn} differs from the view"
                    ))
                }
                Err(e) => {
                    return Err(ftl::violation!(
                        "translation page {tp} at {ppn} is damaged: {e}"
                    ))
                }
            }
        }
        Ok(())
    }
}
