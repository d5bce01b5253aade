//! Flash operation counters, broken down by why the operation was issued.

use serde::Serialize;

/// Why a flash operation was issued; the statistics and the crash checker's aimed crash points
/// are broken down by it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[repr(u8)]
pub enum OpCause {
    /// Host data pages (including a cache's write-back of host data).
    HostData = 0,
    /// Valid pages copied by garbage collection.
    GcCopy = 1,
    /// Pages moved by static wear leveling.
    WearLevel = 2,
    /// Mapping / translation pages and mapping directories.
    Mapping = 3,
    /// Transaction metadata: atom inodes, commit records, head lists.
    TxMeta = 4,
    /// Checkpoints, seal pages, global metadata.
    Checkpoint = 5,
    /// Per-block summary pages.
    Summary = 6,
    /// Other logged records (e.g. OPTR coalescing records).
    Record = 7,
    /// Work done by recovery after a power cut.
    Recovery = 8,
    /// The controller's own work on worn media: bad-block replacement and read reclaim
    /// (docs/reliability.md).
    Media = 9,
}

impl OpCause {
    pub const ALL: [OpCause; 10] = [
        OpCause::HostData,
        OpCause::GcCopy,
        OpCause::WearLevel,
        OpCause::Mapping,
        OpCause::TxMeta,
        OpCause::Checkpoint,
        OpCause::Summary,
        OpCause::Record,
        OpCause::Recovery,
        OpCause::Media,
    ];
    pub fn name(self) -> &'static str {
        match self {
            OpCause::HostData => "host_data",
            OpCause::GcCopy => "gc_copy",
            OpCause::WearLevel => "wear_level",
            OpCause::Mapping => "mapping",
            OpCause::TxMeta => "tx_meta",
            OpCause::Checkpoint => "checkpoint",
            OpCause::Summary => "summary",
            OpCause::Record => "record",
            OpCause::Recovery => "recovery",
            OpCause::Media => "media",
        }
    }
}

const CAUSES: usize = OpCause::ALL.len();

/// Counts of reads, programs and erases per cause, and what the media model did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FlashStats {
    pub reads: [u64; CAUSES],
    pub programs: [u64; CAUSES],
    pub erases: [u64; CAUSES],
    /// All zero while the media model is off.
    pub media: MediaStats,
}

/// What worn media cost (docs/reliability.md): the figures a lifetime run reads.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct MediaStats {
    /// Reads (page or spare area) that needed read retry, and the re-reads they took.
    pub retried_reads: u64,
    pub read_retries: u64,
    /// The re-reads by the cause of the read that needed them ([`OpCause`] order): which of a
    /// design's reads meet aged pages.
    pub retries_by_cause: [u64; CAUSES],
    /// Chip time the re-reads took.
    pub retry_ns: u64,
    /// Bit errors the ECC corrected.
    pub corrected_bits: u64,
    /// Reads the ECC could not correct after every retry (no data handed on).
    pub uncorrectable_reads: u64,
    /// Programs and erases that reported failure, and the blocks retired for them.
    pub program_failures: u64,
    pub erase_failures: u64,
    pub retired_blocks: u64,
    /// Blocks rewritten because their reads needed retries.
    pub reclaimed_blocks: u64,
    /// Pages written uncorrectable on purpose: copies of data already lost.
    pub lost_pages_written: u64,
    /// When the first read was uncorrectable, and how many host data pages had been
    /// programmed by then.
    pub first_uncorrectable_ns: Option<u64>,
    pub host_programs_before_first_uncorrectable: Option<u64>,
}

impl FlashStats {
    #[inline]
    pub fn total_reads(&self) -> u64 {
        self.reads.iter().sum()
    }
    #[inline]
    pub fn total_programs(&self) -> u64 {
        self.programs.iter().sum()
    }
    #[inline]
    pub fn total_erases(&self) -> u64 {
        self.erases.iter().sum()
    }
    pub fn programs_for(&self, cause: OpCause) -> u64 {
        self.programs[cause as usize]
    }
    pub fn reads_for(&self, cause: OpCause) -> u64 {
        self.reads[cause as usize]
    }
    /// Counters accumulated since `earlier` was taken.
    pub fn since(&self, earlier: &FlashStats) -> FlashStats {
        let mut d = FlashStats::default();
        for i in 0..CAUSES {
            d.reads[i] = self.reads[i] - earlier.reads[i];
            d.programs[i] = self.programs[i] - earlier.programs[i];
            d.erases[i] = self.erases[i] - earlier.erases[i];
        }
        d.media = self.media.since(&earlier.media);
        d
    }
    /// `{"programs": {"host_data": n, ...}, "reads": {...}, "erases": {...}}`
    pub fn to_json_map(
        &self,
    ) -> std::collections::BTreeMap<&'static str, std::collections::BTreeMap<&'static str, u64>>
    {
        let mut out = std::collections::BTreeMap::new();
        for (name, arr) in [
            ("reads", &self.reads),
            ("programs", &self.programs),
            ("erases", &self.erases),
        ] {
            let m = OpCause::ALL
                .iter()
                .map(|c| (c.name(), arr[*c as usize]))
                .filter(|(_, v)| *v > 0)
                .collect();
            out.insert(name, m);
        }
        out
    }
}

impl MediaStats {
    /// Counters accumulated since `earlier` (the first uncorrectable read kept if it came since).
    pub fn since(&self, earlier: &MediaStats) -> MediaStats {
        MediaStats {
            retried_reads: self.retried_reads - earlier.retried_reads,
            read_retries: self.read_retries - earlier.read_retries,
            retries_by_cause: std::array::from_fn(|c| {
                self.retries_by_cause[c] - earlier.retries_by_cause[c]
            }),
            retry_ns: self.retry_ns - earlier.retry_ns,
            corrected_bits: self.corrected_bits - earlier.corrected_bits,
            uncorrectable_reads: self.uncorrectable_reads - earlier.uncorrectable_reads,
            program_failures: self.program_failures - earlier.program_failures,
            erase_failures: self.erase_failures - earlier.erase_failures,
            retired_blocks: self.retired_blocks - earlier.retired_blocks,
            reclaimed_blocks: self.reclaimed_blocks - earlier.reclaimed_blocks,
            lost_pages_written: self.lost_pages_written - earlier.lost_pages_written,
            first_uncorrectable_ns: earlier
                .first_uncorrectable_ns
                .is_none()
                .then_some(self.first_uncorrectable_ns)
                .flatten(),
            host_programs_before_first_uncorrectable: earlier
                .first_uncorrectable_ns
                .is_none()
                .then_some(self.host_programs_before_first_uncorrectable)
                .flatten(),
        }
    }
}
