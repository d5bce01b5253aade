//! nilfs2 in a libguestfs appliance, for a machine whose kernel has no nilfs2 (docs/nvmfs.md):
//! its segment size, its cleaner's configuration and the appliance's script.

use super::error::{KernelStackError, Result};
use super::tools::tool_missing;
use std::path::Path;
use std::process::Command;

/// What the appliance's script prints when nilfs2's cleaner died during the run.
pub(super) const CLEANER_STOPPED: &str = "nilfs_cleanerd stopped during the run";

/// nilfs2's segments at most: 1 MiB (`mkfs.nilfs2 -B 256`; its default 8 MiB ones need a
/// volume of more than 128 MiB).
pub const NILFS_BLOCKS_PER_SEGMENT: u32 = 256;
/// Segments a volume needs for nilfs2's reserve to be its 5 % (`r_segments_percentage`) and
/// not its floor of 8 segments (`NILFS_MIN_NRSVSEGS`): 8 / 5 %.
const NILFS_SEGMENTS_FOR_RESERVE: u64 = 160;
/// nilfs2's smallest segment (`mkfs.nilfs2`'s minimum blocks per segment).
const NILFS_MIN_BLOCKS_PER_SEGMENT: u32 = 16;

/// Blocks per nilfs2 segment on a volume of `volume_bytes`: [`NILFS_BLOCKS_PER_SEGMENT`],
/// halved while the volume would have fewer segments than its 5 % reserve needs. On the
/// paper's 64 GB volume the floor of 8 segments is 0.1 % of it; on the quick scale's 91 MiB
/// with 1 MiB segments it would be 8.8 %, more space than nilfs2 reserves anywhere else, taken
/// out of the 12 % a volume at 88 % has left. So the quick scale gets 512 KiB segments (182),
/// the paper scale's ~440 MiB keeps 1 MiB (440).
pub fn nilfs_blocks_per_segment(volume_bytes: u64) -> u32 {
    let mut blocks = NILFS_BLOCKS_PER_SEGMENT;
    while blocks > NILFS_MIN_BLOCKS_PER_SEGMENT
        && volume_bytes / segment_bytes(blocks) < NILFS_SEGMENTS_FOR_RESERVE
    {
        blocks /= 2;
    }
    blocks
}

/// The bytes of a nilfs2 segment of `blocks` 4 KB blocks.
fn segment_bytes(blocks: u32) -> u64 {
    blocks as u64 * 4096
}

/// Segments nilfs2's cleaner cleans per pass while space is low (`mc_nsegments_per_clean`;
/// the packaged file says 4) on a volume of `segments`: one in 11, at least 8 (8 MiB a pass on
/// a volume of 91 one-MiB segments; 16 half-MiB ones on the quick scale's 182), since the
/// cleaner runs at most a pass a second whatever the volume while the workload writes as fast
/// as before.
fn nilfs_cleaner_pass(segments: u64) -> u64 {
    (segments / 11).max(8)
}

/// nilfs2's cleaner in the appliance, for a volume of `volume_bytes` whose page cache holds at
/// most `dirty_bytes` dirty: `nilfs_cleanerd.conf`'s defaults but for a run of minutes.
///
/// - `protection_period 0`: by default every segment written in the last hour is kept, so
///   nothing would be cleaned.
/// - `clean_check_interval 1` (10 s) and `retry_interval 1` (60 s: after a pass that fails,
///   the cleaner would wait longer than the volume takes to fill).
/// - The thresholds in segments, from nilfs2's own refusal rule: the kernel refuses a write
///   while clean segments ≤ its reserve + the dirty blocks in segments + 1
///   (`nilfs_near_disk_full`), and the cleaner adds the same reserve to both thresholds. So
///   `min_clean_segments` = the dirty cap in segments + 1 + two passes: cleaning starts two
///   passes before writes can be refused, however full the page cache is. Measured: a pass
///   first writes the live blocks it moves, so free space swings by ~10 segments while the
///   cleaner runs; starting one pass above the refusal point, free space came within 1–3
///   segments of it, at two passes no closer than 6 (docs/nvmfs.md). Starting earlier cleans
///   fuller segments: a cost to nilfs2, shown beside its figures.
///   `max_clean_segments` = min + a tenth of the volume (at least a pass).
/// - `mc_nsegments_per_clean`: one segment in 11, at least 8 ([`nilfs_cleaner_pass`]; 4).
pub fn nilfs_cleaner_conf(volume_bytes: u64, dirty_bytes: u64) -> Vec<(&'static str, String)> {
    let segment_bytes = segment_bytes(nilfs_blocks_per_segment(volume_bytes));
    let segments = volume_bytes / segment_bytes;
    let pass = nilfs_cleaner_pass(segments);
    let min_clean = dirty_bytes.div_ceil(segment_bytes) + 1 + 2 * pass;
    let max_clean = min_clean + (segments / 10).max(pass);
    vec![
        ("protection_period", "0".into()),
        ("clean_check_interval", "1".into()),
        ("retry_interval", "1".into()),
        ("min_clean_segments", min_clean.to_string()),
        ("max_clean_segments", max_clean.to_string()),
        ("mc_nsegments_per_clean", pass.to_string()),
    ]
}

/// A libguestfs appliance: a small virtual machine running this distribution's kernel package
/// (`linux-image-amd64`), for file systems this machine's kernel does not have (nilfs2 with
/// `libguestfs-nilfs`). KVM is not usable inside this VM (the appliance hangs at boot), so it
/// runs in software emulation (`force_tcg`): ~15 s to boot, about 1 MB/s of 4 KB writes.
pub struct Appliance;

impl Appliance {
    /// What the appliance needs here, or why it is not available for `kind`.
    pub fn available(kind: &str) -> Result<()> {
        if kind != "nilfs2" {
            return Err(KernelStackError::Unavailable(format!(
                "the appliance runs nilfs2 only, not {kind}"
            )));
        }
        for tool in ["guestfish", "guestunmount", "mkfs.nilfs2"] {
            if tool_missing(tool) {
                return Err(KernelStackError::Unavailable(format!(
                    "{tool} is not installed (the appliance needs libguestfs-tools, \
                     linux-image-amd64 and, for nilfs2, libguestfs-nilfs)"
                )));
            }
        }
        let kernel = std::fs::read_dir("/boot").is_ok_and(|d| {
            d.flatten()
                .any(|e| e.file_name().to_string_lossy().starts_with("vmlinuz-"))
        });
        if !kernel {
            return Err(KernelStackError::Unavailable(
                "no kernel in /boot for the libguestfs appliance (linux-image-amd64)".into(),
            ));
        }
        Ok(())
    }

    /// The guestfish script: mount without the mount helper's cleaner (`nogc`), start nilfs2's
    /// cleaner with the packaged `nilfs_cleanerd.conf` and `cleaner`'s keys after it (later
    /// keys win), serve the files at `mnt` until it is unmounted, then stop the cleaner and
    /// unmount (everything written back). The cleaner is given the device mounted at
    /// `/sysroot`, not `/dev/sda`: guestfish translates its own device names, a shell in the
    /// appliance does not, and in about one boot in four the appliance's kernel names our disk
    /// `/dev/sdb` and its own root disk `/dev/sda` (checked with `/proc/partitions`). Given
    /// `/dev/sda` then, the cleaner read the wrong disk's superblock and exited ("cannot open
    /// nilfs on /dev/sda: Invalid argument"): the runs that hit ENOSPC having cleaned nothing.
    /// A cleaner that is not running two seconds after its start fails the script, and with it
    /// the run; one gone when the workload ends (it exits when a cleaning pass fails, as on a
    /// full volume) fails the script after the unmount, so what the file system held is
    /// written back and the run is reported stopped ([`KernelStackError::CleanerStopped`]).
    pub(super) fn nilfs2_script(mnt: &Path, cleaner: &[(&str, String)]) -> String {
        let conf: Vec<String> = cleaner
            .iter()
            .map(|(key, value)| format!("echo {key} {value} >> /tmp/cleaner.conf"))
            .collect();
        format!(
            "run\n\
             mount-options nogc /dev/sda /\n\
             debug sh \"cp /etc/nilfs_cleanerd.conf /tmp/cleaner.conf; {}\"\n\
             debug sh \"dev=$(findmnt -n -o SOURCE /sysroot); /sbin/nilfs_cleanerd -c /tmp/cleaner.conf $dev /sysroot; sleep 2; pgrep -x nilfs_cleanerd && exit 0; echo nilfs_cleanerd did not start on $dev >&2; exit 1\"\n\
             mount-local {} readonly:false\n\
             mount-local-run\n\
             debug sh \"if pgrep -x nilfs_cleanerd; then pkill -x nilfs_cleanerd; sleep 1; else touch /tmp/cleaner-stopped; fi\"\n\
             umount-all\n\
             debug sh \"if test -e /tmp/cleaner-stopped; then echo {CLEANER_STOPPED} >&2; exit 1; fi\"\n",
            conf.join("; "),
            mnt.display()
        )
    }

    pub(super) fn environment(cmd: &mut Command, dirty_bytes: u64) {
        cmd.env("LIBGUESTFS_BACKEND", "direct")
            .env("LIBGUESTFS_BACKEND_SETTINGS", "force_tcg")
            .env(
                "LIBGUESTFS_APPEND",
                format!(
                    "sysctl.vm.dirty_bytes={dirty_bytes} sysctl.vm.dirty_background_bytes={}",
                    dirty_bytes / 2
                ),
            );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// nilfs2's kernel reserve (`nilfs_near_disk_full`'s `ns_nrsvsegs`): 5 % of the segments,
    /// at least 8. The cleaner adds the same reserve to its thresholds.
    fn reserve(segments: u64) -> u64 {
        (segments * 5).div_ceil(100).max(8)
    }

    fn threshold(conf: &[(&str, String)], key: &str) -> u64 {
        let (_, value) = conf.iter().find(|(k, _)| *k == key).expect("key present");
        value.parse().expect("a number of segments")
    }

    #[test]
    fn the_cleaner_starts_two_passes_before_nilfs2_refuses_writes() {
        for (volume_mib, dirty_kib) in [
            (91, 1638),
            (91, 8192),
            (440, 6553),
            (91, 0),
            (1024, 65536),
            (40, 8192),
        ] {
            let conf = nilfs_cleaner_conf(volume_mib << 20, dirty_kib << 10);
            let segment_kib = nilfs_blocks_per_segment(volume_mib << 20) as u64 * 4;
            let segments = (volume_mib << 10) / segment_kib;
            let r = reserve(segments);
            // The kernel refuses writes at clean ≤ r + dirty segments + 1; the cleaner starts
            // below min + r and pauses above max + r.
            let refused_at = r + dirty_kib.div_ceil(segment_kib) + 1;
            let pass = threshold(&conf, "mc_nsegments_per_clean");
            let starts_below = threshold(&conf, "min_clean_segments") + r;
            let pauses_above = threshold(&conf, "max_clean_segments") + r;
            assert!(starts_below > refused_at + 2 * pass - 1, "{conf:?}");
            assert!(pauses_above >= starts_below + pass, "{conf:?}");
        }
        // The quick scale's volume (91 MiB, 182 segments) with 20 % of its 8 MiB budget dirty.
        let quick = nilfs_cleaner_conf(91 << 20, (8 << 20) / 5);
        assert_eq!(threshold(&quick, "mc_nsegments_per_clean"), 16);
        assert_eq!(threshold(&quick, "min_clean_segments"), 37);
        assert_eq!(threshold(&quick, "max_clean_segments"), 55);
        // The paper scale's (~440 MiB, 32 MiB budget): passes of 40, cleaning below 110 clean.
        let paper = nilfs_cleaner_conf(440 << 20, (32 << 20) / 5);
        assert_eq!(threshold(&paper, "mc_nsegments_per_clean"), 40);
        assert_eq!(threshold(&paper, "min_clean_segments"), 88);
    }

    #[test]
    fn segments_are_small_enough_for_the_reserve_to_be_five_percent() {
        assert_eq!(nilfs_blocks_per_segment(91 << 20), 128);
        assert_eq!(nilfs_blocks_per_segment(440 << 20), 256);
        assert_eq!(nilfs_blocks_per_segment(64 << 30), 256);
        assert_eq!(nilfs_blocks_per_segment(1 << 20), 16);
        for mib in [40u64, 91, 160, 300, 440] {
            let blocks = nilfs_blocks_per_segment(mib << 20) as u64;
            let segments = (mib << 20) / (blocks * 4096);
            assert!(
                segments >= 160 || blocks == 16,
                "{mib} MiB: {segments} segments"
            );
            assert!(
                blocks == 256 || segments < 320,
                "{mib} MiB: segments halved too far"
            );
        }
    }

    #[test]
    fn the_script_appends_the_keys_after_the_packaged_configuration() {
        let conf = nilfs_cleaner_conf(91 << 20, (8 << 20) / 5);
        let script = Appliance::nilfs2_script(Path::new("/mnt/x"), &conf);
        // Packaged file, our keys, cleaner, files served, cleaner checked and stopped, unmount,
        // then a cleaner found gone fails the script.
        let steps = [
            "cp /etc/nilfs_cleanerd.conf",
            "echo min_clean_segments 37 >>",
            "/sbin/nilfs_cleanerd -c",
            "mount-local ",
            "if pgrep -x nilfs_cleanerd",
            "pkill -x nilfs_cleanerd",
            "touch /tmp/cleaner-stopped",
            "umount-all",
            "if test -e /tmp/cleaner-stopped",
            CLEANER_STOPPED,
        ];
        let at: Vec<usize> = steps
            .iter()
            .map(|step| {
                script
                    .find(step)
                    .unwrap_or_else(|| panic!("{step:?} missing: {script}"))
            })
            .collect();
        assert!(at.windows(2).all(|w| w[0] < w[1]), "{steps:?}: {script}");
        // The device mounted at /sysroot, whatever the appliance named it (never "/dev/sda"
        // in a shell: guestfish's names are translated, the shell's are not).
        assert!(
            script.contains(
                "dev=$(findmnt -n -o SOURCE /sysroot); /sbin/nilfs_cleanerd -c /tmp/cleaner.conf $dev /sysroot"
            ),
            "{script}"
        );
        assert!(!script.contains("cleaner.conf /dev/sda"), "{script}");
        assert!(
            script.contains("mount-local /mnt/x readonly:false"),
            "{script}"
        );
        assert!(script.contains("echo protection_period 0 >>"), "{script}");
    }
}
