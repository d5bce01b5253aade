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
}

impl OpCause {
    pub const ALL: [OpCause; 9] = [
        OpCause::HostData,
        OpCause::GcCopy,
        OpCause::WearLevel,
        OpCause::Mapping,
        OpCause::TxMeta,
        OpCause::Checkpoint,
        OpCause::Summary,
        OpCause::Record,
        OpCause::Recovery,
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
        }
    }
}

const CAUSES: usize = OpCause::ALL.len();

/// Counts of reads, programs and erases per cause.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FlashStats {
    pub reads: [u64; CAUSES],
    pub programs: [u64; CAUSES],
    pub erases: [u64; CAUSES],
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
