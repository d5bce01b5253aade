//! NVMFS vs ext4 (and xfs where mkfs.xfs exists) on the same emulated SSD: SSD write traffic,
//! flash erases, GC page copies, cleaning efficiency (paper §IV). Needs root, /dev/fuse,
//! nbdfuse and losetup for the kernel file systems (their rows say why when skipped).
//!
//! cargo run --release -p mobius-nvmfs --example nvmfs_vs_ext4 -- [--scale quick|paper] [--json FILE]

use nvmfs::experiment::{run, table, Options};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |k: &str| {
        args.iter()
            .position(|a| a == k)
            .and_then(|i| args.get(i + 1).cloned())
    };
    let paper = arg("--scale").as_deref() == Some("paper");
    let work = tempfile::tempdir().expect("scratch directory");
    let e = run(&Options::standard(
        paper,
        dftl::spec(),
        work.path().to_path_buf(),
    ));
    print!("{}", table(&e));
    if let Some(path) = arg("--json") {
        std::fs::write(&path, serde_json::to_string_pretty(&e).expect("json")).expect("write json");
    }
}
