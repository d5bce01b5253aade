//! `mobius info`: geometry, capacity and timing of a preset; `--list` the designs.

use clap::Args;
use lab::device::Recipe;

#[derive(Args, Debug)]
pub struct InfoArgs {
    #[command(flatten)]
    pub device: Recipe,
    /// List the designs built so far (name, promise, summary).
    #[arg(long)]
    pub list: bool,
    /// Also show what this design exports on the device: capacity, transaction limits.
    #[arg(long)]
    pub ftl: Option<String>,
    /// Design parameter for --ftl, `key=value` (repeatable).
    #[arg(long = "param", value_name = "KEY=VALUE")]
    pub params: Vec<String>,
    /// Raw flash size instead of the preset's, e.g. 256M (as `mobius serve --size`).
    #[arg(long)]
    pub size: Option<String>,
    /// Show what an image file's header records (design, parameters, geometry) and stop.
    #[arg(long, value_name = "PATH")]
    pub image: Option<std::path::PathBuf>,
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: &InfoArgs) -> anyhow::Result<()> {
    if args.list {
        for d in lab::registry::all() {
            println!("{:<14} {:<20} {}", d.name, d.promise.name(), d.summary);
        }
        return Ok(());
    }
    if let Some(image) = &args.image {
        return image_info(image, args.json);
    }
    let mut c = args.device.resolve()?;
    if let Some(size) = &args.size {
        lab::device::apply_size(&mut c, size)?;
    }
    let design = args
        .ftl
        .as_deref()
        .map(|f| design_info(f, &args.params, &c))
        .transpose()?;
    let g = &c.geometry;
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "preset": c.preset, "geometry": g, "timing": c.timing, "over_provisioning": c.over_provisioning, "host": c.host,
                "capacity_bytes": g.capacity_bytes(), "pages": g.pages(), "blocks": g.blocks(), "chips": g.chips(),
                "design": design,
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
    println!("host interface    {}", c.host);
    if let Some(d) = design {
        println!(
            "design            {} ({})",
            d["design"].as_str().unwrap_or(""),
            d["promise"].as_str().unwrap_or("")
        );
        println!(
            "exported          {} bytes ({} pages, {:.1} % of the raw flash)",
            d["exported_bytes"],
            d["logical_pages"],
            d["exported_fraction"].as_f64().unwrap_or(0.0) * 100.0
        );
        println!("OOB kept          {} B per page", d["oob_record_bytes"]);
        match d.get("max_tx_pages") {
            Some(m) => println!("transactions      at most {m} pages each"),
            None => println!("transactions      none"),
        }
    }
    Ok(())
}

/// What design `name` exports when formatted on `c` (formatted in memory, tag-only).
fn design_info(
    name: &str,
    params: &[String],
    c: &flash::DeviceConfig,
) -> anyhow::Result<serde_json::Value> {
    let design = lab::registry::find(name)?;
    let options = ftl::DesignOptions::from_pairs(params)?;
    let oob = design.oob_record(&c.geometry);
    let mut dev = design.build(flash::Flash::in_memory(c.clone(), oob, true), &options)?;
    let g = &c.geometry;
    let exported = dev.logical_pages() as u64 * g.page_bytes as u64;
    let mut v = serde_json::json!({
        "design": design.name,
        "promise": design.promise.name(),
        "logical_pages": dev.logical_pages(),
        "exported_bytes": exported,
        "exported_fraction": exported as f64 / g.capacity_bytes() as f64,
        "oob_record_bytes": oob,
    });
    if let Some(t) = dev.transactional() {
        v["max_tx_pages"] = t.capabilities().max_tx_pages.into();
    }
    Ok(v)
}

/// `mobius info --image PATH`: the header of an image file.
fn image_info(path: &std::path::Path, json: bool) -> anyhow::Result<()> {
    let h = flash::FileStore::read_header(path)?;
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "design": h.identity.design,
                "params_hash": format!("{:016x}", h.identity.params_hash),
                "geometry": h.geometry,
                "oob_record_bytes": h.oob_record_bytes,
                "capacity_bytes": h.geometry.capacity_bytes(),
            }))?
        );
        return Ok(());
    }
    let g = &h.geometry;
    println!("image             {}", path.display());
    println!("formatted by      {}", h.identity);
    println!(
        "geometry          {} channels x {} chips x {} blocks x {} pages x {} B (+{} B OOB, {} B kept)",
        g.channels, g.chips_per_channel, g.blocks_per_chip, g.pages_per_block, g.page_bytes, g.oob_bytes, h.oob_record_bytes
    );
    println!("raw capacity      {} bytes", g.capacity_bytes());
    Ok(())
}
