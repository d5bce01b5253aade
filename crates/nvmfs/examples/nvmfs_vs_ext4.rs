//! NVMFS vs ext4 (and xfs where mkfs.xfs exists) on the same emulated SSD: SSD write traffic,
//! flash erases, GC page copies, cleaning efficiency (paper §IV). Needs root, /dev/fuse,
//! nbdfuse and losetup for the kernel file systems (their rows say why when skipped).
//!
//! cargo run --release -p mobius-nvmfs --example nvmfs_vs_ext4 -- [--json FILE] [--scale quick|paper]

use nvmfs::experiment::{run, table, Options, Workload};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |k: &str| {
        args.iter()
            .position(|a| a == k)
            .and_then(|i| args.get(i + 1).cloned())
    };
    let paper = arg("--scale").as_deref() == Some("paper");
    // quick: a 64 MiB SSD (128 blocks per chip of the `small` preset), 8 MiB NVRAM; paper:
    // 512 MiB (xfs needs more than 300 MiB), 32 MiB NVRAM.
    let blocks = if paper { 1024 } else { 128 };
    let mut config = flash::DeviceConfig::preset("small").expect("preset");
    config.geometry.blocks_per_chip = blocks;
    let mib = config.geometry.capacity_bytes() >> 20;
    let workloads = vec![
        Workload::Iozone {
            file_bytes: (mib * 6 / 10) << 20,
            overwrites: (mib as u32) * 256,
        },
        Workload::Postmark {
            pool: (mib as u32) * 20,
            transactions: (mib as u32) * 60,
        },
    ];
    let mut kernel_fs = vec!["ext4".to_string()];
    if std::process::Command::new("sh")
        .args(["-c", "command -v mkfs.xfs"])
        .stdout(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
    {
        kernel_fs.push("xfs".into());
    }
    let work = tempfile::tempdir().expect("scratch directory");
    let opts = Options {
        config,
        design: dftl::spec(),
        nvram_bytes: if paper { 32 << 20 } else { 8 << 20 },
        seed: 2013,
        workloads,
        kernel_fs,
        work_dir: work.path().to_path_buf(),
    };
    let e = run(&opts);
    print!("{}", table(&e));
    if let Some(path) = arg("--json") {
        std::fs::write(&path, serde_json::to_string_pretty(&e).expect("json")).expect("write json");
    }
}
