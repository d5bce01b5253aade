//! `mobius info`: geometry, capacity and timing of a preset; `--list` the designs.

use crate::device_args::DeviceArgs;
use clap::Args;

#[derive(Args, Debug)]
pub struct InfoArgs {
    #[command(flatten)]
    pub device: DeviceArgs,
    /// List the designs built so far (name, promise, summary).
    #[arg(long)]
    pub list: bool,
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: &InfoArgs) -> anyhow::Result<()> {
    if args.list {
        for d in crate::designs::all() {
            println!("{:<14} {:<20} {}", d.name, d.promise.name(), d.summary);
        }
        return Ok(());
    }
    let c = args.device.resolve()?;
    let g = &c.geometry;
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "preset": c.preset, "geometry": g, "timing": c.timing, "over_provisioning": c.over_provisioning,
                "capacity_bytes": g.capacity_bytes(), "pages": g.pages(), "blocks": g.blocks(), "chips": g.chips(),
            }))?
        );
        return Ok(());
    }
    let gib = g.capacity_bytes() as f64 / (1u64 << 30) as f64;
    println!("preset            {}", c.preset);
    println!(
        "capacity          {:.3} GiB ({} bytes)",
        gib,
        g.capacity_bytes()
    );
    println!(
        "layout            {} channels x {} chips/channel = {} chips",
        g.channels,
        g.chips_per_channel,
        g.chips()
    );
    println!(
        "                  {} blocks/chip x {} pages/block = {} blocks, {} pages",
        g.blocks_per_chip,
        g.pages_per_block,
        g.blocks(),
        g.pages()
    );
    println!(
        "page              {} B data + {} B spare (OOB)",
        g.page_bytes, g.oob_bytes
    );
    println!("block             {} KiB", g.block_bytes() / 1024);
    println!(
        "timing            tR {} us, tPROG {} us, tBERS {} us, bus {} MB/s ({} us per page)",
        c.timing.read_ns as f64 / 1e3,
        c.timing.program_ns as f64 / 1e3,
        c.timing.erase_ns as f64 / 1e3,
        c.timing.bus_mb_s,
        c.timing.transfer_ns(g.page_bytes as u64) as f64 / 1e3
    );
    println!("over-provisioning {:.1} %", c.over_provisioning * 100.0);
    Ok(())
}
