//! The host interface every design sits behind: one model, the same for every design (issue #16).
//!
//! A real SSD is reached over a link (SATA, PCIe) with a per-command cost, and it stages the data
//! of a write in a bounded DRAM buffer before its FTL programs it. Without a model of that, a
//! design that acknowledges on metadata alone (Möbius async SWRITE, §IV-B of the Möbius paper)
//! reports any bandwidth at all; with it, every design is capped by the same link.
//!
//! The model (applied by `ftl::host_interface::HostLinked`, around every design the tools build):
//! - **Host → device**: requests cross the link one after another (FIFO). A request costs
//!   `command_ns` plus its data at `link_mb_s`; the design sees it when its last byte arrived.
//! - **Staging buffer**: `write_buffer_pages` pages of device DRAM hold write data until the
//!   design has taken it (its acknowledgement, or for a Möbius async SWRITE its durability); a
//!   write that does not fit waits for space before it crosses the link.
//! - **Device → host**: read data crosses the same link back, after the flash produced it.
//!
//! [`HostInterface::NONE`] is an ideal host (no link, no command cost, unbounded buffer): the
//! `small` test preset keeps it so that crash-test instants of regression tests stay put.

use serde::{Deserialize, Serialize};

/// The host link and the device's write staging buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostInterface {
    /// Link bandwidth in MB/s (10^6 bytes per second), each direction; 0 = unlimited.
    pub link_mb_s: u64,
    /// Fixed cost of one command on the link (protocol, FIS exchange, firmware dispatch).
    pub command_ns: u64,
    /// Pages of device DRAM that stage write data; 0 = unbounded.
    pub write_buffer_pages: u64,
}

impl Default for HostInterface {
    fn default() -> Self {
        HostInterface::NONE
    }
}

impl HostInterface {
    /// An ideal host: requests arrive instantly and the buffer is unbounded.
    pub const NONE: HostInterface = HostInterface {
        link_mb_s: 0,
        command_ns: 0,
        write_buffer_pages: 0,
    };

    /// SATA 2.0 (3 Gb/s, ≈ 300 MB/s of payload after 8b/10b coding).
    pub const SATA2: HostInterface = HostInterface {
        link_mb_s: 300,
        command_ns: 5_000,
        write_buffer_pages: 2048,
    };

    /// SATA 3.0 (6 Gb/s, ≈ 600 MB/s of payload).
    pub const SATA3: HostInterface = HostInterface {
        link_mb_s: 600,
        command_ns: 5_000,
        write_buffer_pages: 2048,
    };

    /// Time the link needs to move `bytes` bytes in one direction (0 on an unlimited link).
    pub fn transfer_ns(&self, bytes: u64) -> u64 {
        if self.link_mb_s == 0 {
            return 0;
        }
        (bytes * 1000).div_ceil(self.link_mb_s)
    }

    /// True when the host adds no time and no back-pressure at all.
    pub fn is_ideal(&self) -> bool {
        *self == HostInterface::NONE
    }
}

impl std::fmt::Display for HostInterface {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.is_ideal() {
            return write!(f, "ideal (no link, no command cost, unbounded buffer)");
        }
        match self.link_mb_s {
            0 => write!(f, "unlimited link")?,
            mb => write!(f, "{mb} MB/s link")?,
        }
        write!(f, ", {} µs per command", self.command_ns as f64 / 1000.0)?;
        match self.write_buffer_pages {
            0 => write!(f, ", unbounded write buffer"),
            pages => write!(f, ", {pages}-page write buffer"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transfer_time_follows_the_link() {
        let sata2 = HostInterface::SATA2;
        // 4 KiB at 300 MB/s = 13.653 µs, rounded up.
        assert_eq!(sata2.transfer_ns(4096), 13_654);
        assert_eq!(HostInterface::NONE.transfer_ns(1 << 30), 0);
        assert!(HostInterface::NONE.is_ideal());
        assert!(!sata2.is_ideal());
        assert_eq!(
            sata2.to_string(),
            "300 MB/s link, 5 µs per command, 2048-page write buffer"
        );
    }
}
