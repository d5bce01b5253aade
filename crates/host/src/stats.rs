//! What the host asked of the design.

/// Counts of what the host asked of its design, kept by every [`crate::Host`].
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct HostStats {
    /// Pages the design accepted to write: plain writes, SWRITE and DWRITE pages.
    pub pages_written: u64,
    /// Pages the design was asked to read, edge reads of sub-page writes and SREADs included.
    pub pages_read: u64,
    /// Of `pages_read`: edge pages read by sub-page writes (read-modify-write).
    pub edge_reads: u64,
    pub flushes: u64,
    /// Trim requests a design without trim ignored (as NBD allows).
    pub trims_ignored: u64,
    pub swrites: u64,
    pub dwrites: u64,
    pub aborts: u64,
    pub sreads: u64,
}
