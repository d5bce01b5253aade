//! The operation log and power-cut images.
//!
//! With recording switched on, every flash operation is logged with its simulated span, cause and
//! (for programs) the data and OOB written. A power cut at simulated time T then has one precise
//! meaning (issue #2, "power cut"): operations that ended by T are on flash; an operation running
//! at T is torn if tearing is asked for (program → page fails ECC; erase → block unreadable until
//! erased again) and otherwise never happened; operations that start at or after T never happened.
//! Because a chip serves its operations in issue order, applying the completed operations in
//! completion order reproduces every block's program order. "Cut after the N-th operation" is the
//! same model with T = the end of the N-th mutating operation in completion order.
//!
//! A killed process is another cut (the **image-prefix** model, [`OpLog::image_after_writes`]):
//! [`crate::FileStore`] writes each program and erase through to its file when [`crate::Flash`]
//! issues it — before the simulated operation has even started — in the log's issue order, and
//! caches nothing it has not written. A `kill -9` therefore leaves the file holding exactly the
//! first N image writes in issue order, whatever their simulated completion order; the one being
//! written when the process died is torn (the file store marks a page torn before writing it and
//! programmed after, and flags a block erase-torn before erasing it and clears the flag after), or
//! complete, or absent.

use crate::content::Content;
use crate::geometry::{BlockId, Ppn};
use crate::media::BbtUpdate;
use crate::stats::OpCause;
use crate::store::Store;
use crate::timing::Span;

/// What an operation did.
#[derive(Clone, Debug)]
pub enum OpKind {
    Read {
        ppn: Ppn,
    },
    ReadOob {
        ppn: Ppn,
    },
    Program {
        ppn: Ppn,
        content: Content,
        oob: Box<[u8]>,
    },
    Erase {
        block: BlockId,
    },
    /// A program that reported failure, or the copy of a torn page into a replacement block:
    /// the page reads uncorrectable until its block is erased (media model only).
    ProgramFailed {
        ppn: Ppn,
    },
    /// An erase that reported failure: the block is unreadable until erased again.
    EraseFailed {
        block: BlockId,
    },
    /// A page programmed with data whose ECC does not check (a write-uncorrectable): the copy
    /// of data already lost. Its spare area reads; its data never does.
    ProgramLost {
        ppn: Ppn,
        content: Content,
        oob: Box<[u8]>,
    },
    /// A write of the bad-block table (kept twice by the controller, so a cut leaves the old
    /// table or the new one).
    Bbt(BbtUpdate),
}

/// One logged flash operation.
#[derive(Clone, Debug)]
pub struct LoggedOp {
    /// Issue order, from 0.
    pub seq: u64,
    pub span: Span,
    pub cause: OpCause,
    pub kind: OpKind,
}

impl LoggedOp {
    /// `true` for programs and erases (the operations that change the image).
    pub fn mutates(&self) -> bool {
        !matches!(self.kind, OpKind::Read { .. } | OpKind::ReadOob { .. })
    }

    /// Applies the completed operation to `store` (and to its media plane, if it keeps one).
    pub fn apply(&self, store: &mut dyn Store) {
        let end = self.span.end_ns;
        match &self.kind {
            OpKind::Program { ppn, content, oob } => {
                store.write_page(*ppn, content, oob);
                if let Some(plane) = store.media_mut() {
                    plane.programmed(*ppn, end, false);
                }
            }
            OpKind::Erase { block } => {
                store.erase_block(*block);
                if let Some(plane) = store.media_mut() {
                    plane.erased(*block);
                }
            }
            OpKind::ProgramFailed { ppn } => store.set_torn(*ppn),
            OpKind::EraseFailed { block } => store.set_erase_torn(*block),
            OpKind::ProgramLost { ppn, content, oob } => {
                store.write_page(*ppn, content, oob);
                if let Some(plane) = store.media_mut() {
                    plane.programmed(*ppn, end, true);
                }
            }
            OpKind::Bbt(update) => {
                if let Some(plane) = store.media_mut() {
                    plane.apply(update);
                }
            }
            OpKind::Read { .. } | OpKind::ReadOob { .. } => {}
        }
    }

    /// Applies the operation as interrupted by a power cut.
    pub fn tear(&self, store: &mut dyn Store) {
        match &self.kind {
            OpKind::Program { ppn, .. }
            | OpKind::ProgramLost { ppn, .. }
            | OpKind::ProgramFailed { ppn } => store.set_torn(*ppn),
            OpKind::Erase { block } | OpKind::EraseFailed { block } => store.set_erase_torn(*block),
            OpKind::Bbt(_) | OpKind::Read { .. } | OpKind::ReadOob { .. } => {}
        }
    }

    /// `true` when the operation is running at instant `at_ns`.
    pub fn in_flight_at(&self, at_ns: u64) -> bool {
        self.span.start_ns < at_ns && at_ns < self.span.end_ns
    }
}

/// All operations issued while recording was on.
#[derive(Clone, Debug, Default)]
pub struct OpLog {
    pub ops: Vec<LoggedOp>,
}

impl OpLog {
    /// Indices of mutating operations sorted by (end time, issue order).
    pub fn completion_order(&self) -> Vec<usize> {
        let mut idx: Vec<usize> = (0..self.ops.len())
            .filter(|&i| self.ops[i].mutates())
            .collect();
        idx.sort_by_key(|&i| (self.ops[i].span.end_ns, self.ops[i].seq));
        idx
    }

    /// The crash instant "just after the n-th mutating operation completed" (n counts from 1;
    /// n = 0 is the instant before anything was issued).
    pub fn instant_after(&self, order: &[usize], n: usize) -> u64 {
        if n == 0 {
            0
        } else {
            self.ops[order[n.min(order.len()) - 1]].span.end_ns
        }
    }

    /// Indices of the image writes (programs and erases) in issue order: the order a
    /// file-backed store writes them to its file.
    pub fn issue_order(&self) -> Vec<usize> {
        (0..self.ops.len())
            .filter(|&i| self.ops[i].mutates())
            .collect()
    }

    /// Image writes among the first `k` logged operations, for every `k` from 0 to
    /// `ops.len()` (the result has `ops.len() + 1` entries).
    pub fn writes_before(&self) -> Vec<u64> {
        let mut out = Vec::with_capacity(self.ops.len() + 1);
        let mut n = 0u64;
        out.push(0);
        for op in &self.ops {
            n += op.mutates() as u64;
            out.push(n);
        }
        out
    }

    /// The image a process killed after its first `n` image writes leaves in its file, built on
    /// `base` (the image when recording started): those writes applied in issue order and, with
    /// `tear`, the next one torn (a process killed while writing it).
    pub fn image_after_writes(&self, base: &dyn Store, n: usize, tear: bool) -> Box<dyn Store> {
        let mut image = base.snapshot();
        let order = self.issue_order();
        for &i in order.iter().take(n) {
            self.ops[i].apply(image.as_mut());
        }
        if tear {
            if let Some(&i) = order.get(n) {
                self.ops[i].tear(image.as_mut());
            }
        }
        image
    }

    /// Builds the flash image as of instant `at_ns` on top of `base` (the image when recording
    /// started). With `tear`, operations running at `at_ns` are torn; otherwise they are dropped.
    pub fn image_at(&self, base: &dyn Store, at_ns: u64, tear: bool) -> Box<dyn Store> {
        let mut image = base.snapshot();
        for i in self.completion_order() {
            let op = &self.ops[i];
            if op.span.end_ns <= at_ns {
                op.apply(image.as_mut());
            } else if tear && op.in_flight_at(at_ns) {
                op.tear(image.as_mut());
            }
        }
        image
    }
}
