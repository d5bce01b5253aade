//! `mobius serve`: any design as an NBD export over a file-backed, full-data flash image.
//!
//! The image outlives the server: `kill -9` is a power cut (what reached the file survives, RAM
//! does not), and starting again on the same image runs the design's recovery and serves the
//! recovered state. SIGINT/SIGTERM shut down cleanly: flush, sync, close.

use crate::nbd_backend::FtlBackend;
use crate::power_cut::{self, ServedBackend, WriteCut};
use clap::Args;
use flash::Flash;
use ftl::DesignOptions;
use lab::device::Recipe;
use nbd::server::{Server, ServerConfig};
use nbd::tls::{TlsConfig, TlsMode};
use nbd::transport::{install_signal_handlers, Listen};
use signal_hook::consts::SIGUSR1;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Design (`mobius info --list`).
    #[arg(long)]
    pub ftl: String,
    /// Flash image file: created (and formatted) if absent, recovered if present.
    #[arg(long, required_unless_present = "memory", conflicts_with = "memory")]
    pub image: Option<PathBuf>,
    /// Keep the flash in memory (full data) instead of an image: nothing survives the server,
    /// so no power cuts; for measuring the server's speed.
    #[arg(long)]
    pub memory: bool,
    #[command(flatten)]
    pub device: Recipe,
    /// Raw flash size instead of a preset's blocks per chip, e.g. 256M, 2G (rounded to whole
    /// blocks). The exported size is smaller (spare blocks, metadata), different per design,
    /// and printed at start (`mobius info --ftl X --size S` prints it without serving).
    #[arg(long)]
    pub size: Option<String>,
    /// TCP address to listen on (default 127.0.0.1:10809 unless --socket or --stdio).
    #[arg(long)]
    pub listen: Option<String>,
    /// Unix socket path to listen on.
    #[arg(long)]
    pub socket: Option<PathBuf>,
    /// Serve one connection on standard input/output (for `nbdfuse --command`).
    #[arg(long)]
    pub stdio: bool,
    /// Hold each reply until its simulated completion time.
    #[arg(long)]
    pub pace: bool,
    /// Record every request in FILE (one line per request: time op offset length flags).
    #[arg(long)]
    pub trace: Option<PathBuf>,
    /// Design parameter, `--param key=value` (repeatable).
    #[arg(long = "param", value_name = "KEY=VALUE")]
    pub params: Vec<String>,
    /// Apply each WRITE request as one device transaction (SWRITE), so a multi-page request is
    /// never torn; the largest is advertised as the NBD maximum block size (docs/nbd.md).
    #[arg(long)]
    pub atomic_requests: bool,
    /// SIGUSR1 is a simulated power cut: the image becomes the flash as the operation log says
    /// it was at that instant, operations in flight torn (needs --image and --pace; docs/nbd.md).
    #[arg(long, requires = "pace", requires = "image")]
    pub power_cut_signal: bool,
    /// With --power-cut-signal: SIGUSR1 only arms the cut, which then falls inside the N-th
    /// following write request that overwrites two pages or more (default the first), just
    /// after its first page is programmed (the instant that tears a request that is not
    /// atomic; docs/nbd.md).
    #[arg(long, requires = "power_cut_signal", value_name = "N", num_args = 0..=1,
          default_missing_value = "1", value_parser = clap::value_parser!(u64).range(1..))]
    pub cut_inside_write: Option<u64>,
    /// Connections served at once; more are refused (the NBD greeting, then an error naming
    /// the limit to every option).
    #[arg(long, default_value_t = nbd::server::MAX_CONNECTIONS_DEFAULT as u64,
          value_parser = clap::value_parser!(u64).range(1..=65536))]
    pub max_connections: u64,
    /// Seconds a client may take from connecting to the end of its handshake (TLS included);
    /// a slower one is disconnected, so idle sockets cannot hold connection slots.
    #[arg(long, value_name = "SECONDS", default_value_t = nbd::server::HANDSHAKE_TIMEOUT_DEFAULT.as_secs_f64())]
    pub handshake_timeout: f64,
    /// WRITE payloads and READ data one connection may hold at once (with --pace, replies
    /// waiting for their time), e.g. 64M; at least 32M, the longest request. A client that does
    /// not read its replies stops being read from.
    #[arg(long, value_name = "SIZE", default_value = "64M")]
    pub connection_buffer: String,
    /// Export read-only: NBD_FLAG_READ_ONLY is set and writes, trims and write-zeroes get
    /// EPERM (the image is still recovered, which may write to it).
    #[arg(long)]
    pub read_only: bool,
    /// TLS (NBD_OPT_STARTTLS): `on` lets clients upgrade, `require` refuses plaintext ones;
    /// needs --tls-psk or --tls-certificates. `--tls` alone is `on`.
    #[arg(long, value_enum, value_name = "MODE", num_args = 0..=1,
          default_value = "off", default_missing_value = "on")]
    pub tls: TlsArg,
    /// Pre-shared keys for TLS: a file of `identity:hexkey` lines (`psktool -u NAME -p FILE`).
    #[arg(long, value_name = "FILE", conflicts_with = "tls_certificates")]
    pub tls_psk: Option<PathBuf>,
    /// X.509 for TLS: a directory with server-cert.pem and server-key.pem (and ca-cert.pem
    /// for --tls-verify-peer), as nbdkit and qemu-nbd take it.
    #[arg(long, value_name = "DIR")]
    pub tls_certificates: Option<PathBuf>,
    /// With --tls-certificates: clients must present a certificate signed by ca-cert.pem.
    #[arg(long, requires = "tls_certificates")]
    pub tls_verify_peer: bool,
}

/// `--tls`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum TlsArg {
    Off,
    On,
    Require,
}

impl ServeArgs {
    /// The server settings the limit, read-only and TLS options ask for.
    fn server_config(&self) -> anyhow::Result<ServerConfig> {
        let buffer = lab::device::parse_size(&self.connection_buffer)?;
        let min = nbd::server::CONNECTION_BUFFER_MIN_BYTES as u64;
        if buffer < min {
            anyhow::bail!(
                "--connection-buffer {}: at least {} MiB (the longest READ or WRITE must fit)",
                self.connection_buffer,
                min >> 20
            );
        }
        let timeout = self.handshake_timeout;
        if !(timeout.is_finite() && timeout > 0.0 && timeout <= 86_400.0) {
            anyhow::bail!("--handshake-timeout {timeout}: seconds in (0, 86400]");
        }
        Ok(ServerConfig {
            pacing: self.pace,
            max_connections: self.max_connections as usize,
            handshake_timeout: std::time::Duration::from_secs_f64(timeout),
            connection_buffer_bytes: usize::try_from(buffer).unwrap_or(usize::MAX),
            read_only: self.read_only,
            tls: self.tls_config()?.map(Arc::new),
            // The binary's allocator is mimalloc: freed pages go back only when collected.
            release_memory: || {
                lab::bench::return_freed_memory();
                nbd::server::release_free_memory();
            },
            ..ServerConfig::default()
        })
    }

    fn tls_config(&self) -> anyhow::Result<Option<TlsConfig>> {
        let mode = match self.tls {
            TlsArg::Off => {
                if self.tls_psk.is_some() || self.tls_certificates.is_some() {
                    anyhow::bail!("--tls-psk/--tls-certificates need --tls (on or require)");
                }
                return Ok(None);
            }
            TlsArg::On => TlsMode::On,
            TlsArg::Require => TlsMode::Require,
        };
        if self.stdio {
            anyhow::bail!("--tls needs a socket (--listen or --socket), not --stdio");
        }
        let config = match (&self.tls_psk, &self.tls_certificates) {
            (Some(psk), None) => TlsConfig::psk(mode, psk)?,
            (None, Some(dir)) => TlsConfig::x509(mode, dir, self.tls_verify_peer)?,
            _ => anyhow::bail!("--tls needs --tls-psk FILE or --tls-certificates DIR"),
        };
        Ok(Some(config))
    }
}

pub fn run(args: &ServeArgs) -> anyhow::Result<()> {
    // A write past a file-size limit (RLIMIT_FSIZE) is an I/O error on the image (EFBIG),
    // handled fail-stop like any other, not a reason for the process to die.
    signal_hook::flag::register(
        signal_hook::consts::SIGXFSZ,
        Arc::new(AtomicBool::new(false)),
    )?;
    let design = lab::registry::find(&args.ftl)?;
    let mut config = args.device.resolve_for(&design)?;
    if let Some(size) = &args.size {
        lab::device::apply_size(&mut config, size)?;
    }
    let options = DesignOptions::from_pairs(&args.params)?;
    // Bad server options are refused before the image is opened or created.
    let server_config = args.server_config()?;
    let dev = match &args.image {
        None => {
            let flash =
                Flash::in_memory(config.clone(), design.oob_record(&config.geometry), false);
            let dev = design.build(flash, &options)?;
            eprintln!("mobius serve: formatted {} in memory", design.name);
            dev
        }
        Some(image) => open_image("mobius serve", &design, &config, &options, image)?,
    };
    serve_device(args, dev, server_config)
}

/// Recovers the design from `image`, or creates and formats it; `command` (e.g. `mobius
/// serve`) begins the line that says which.
pub(crate) fn open_image(
    command: &str,
    design: &ftl::DesignSpec,
    config: &flash::DeviceConfig,
    options: &DesignOptions,
    image: &std::path::Path,
) -> anyhow::Result<Box<dyn ftl::BlockDevice>> {
    Ok(if image.exists() {
        let flash = design.open_image(image, config, options)?;
        let (dev, report) = design.reopen(flash, options)?;
        eprintln!(
            "{command}: recovered {} from {} ({} flash reads, {:.3} ms simulated)",
            design.name,
            image.display(),
            report.flash_reads,
            report.sim_ns as f64 / 1e6
        );
        dev
    } else {
        let flash = design.create_image(image, config, options)?;
        let mut dev = design.build(flash, options)?;
        dev.flash_mut().sync()?;
        eprintln!(
            "{command}: formatted {} on new image {}",
            design.name,
            image.display()
        );
        dev
    })
}

/// Serves `dev` until the client(s) leave or a signal asks to stop; flushes and syncs at the end.
fn serve_device(
    args: &ServeArgs,
    dev: Box<dyn ftl::BlockDevice>,
    config: ServerConfig,
) -> anyhow::Result<()> {
    let start = dev.flash().idle_ns();
    let raw = dev.flash().geometry().capacity_bytes();
    let exported = dev.logical_pages() as u64 * dev.flash().geometry().page_bytes as u64;
    eprintln!(
        "mobius serve: exporting {exported} bytes ({:.1} MiB, {:.1} % of the {:.1} MiB raw flash)",
        exported as f64 / (1u64 << 20) as f64,
        100.0 * exported as f64 / raw as f64,
        raw as f64 / (1u64 << 20) as f64
    );
    let mut backend = FtlBackend::new(dev, start);
    if args.atomic_requests {
        backend = backend.with_atomic_requests()?;
        eprintln!(
            "mobius serve: atomic requests, at most {} bytes each",
            nbd::NbdBackend::max_payload_bytes(&backend)
        );
    }
    let listen = match (&args.socket, args.stdio, &args.listen) {
        (Some(p), false, None) => Listen::Unix(p.clone()),
        (None, true, None) => Listen::Stdio,
        (None, false, l) => Listen::Tcp(l.clone().unwrap_or_else(|| "127.0.0.1:10809".into())),
        _ => anyhow::bail!("choose one of --listen, --socket, --stdio"),
    };
    let shutdown = Arc::new(AtomicBool::new(false));
    install_signal_handlers(&shutdown)?;
    let power_off = Arc::new(AtomicBool::new(false));
    let recording = args
        .power_cut_signal
        .then(|| power_cut::start_recording(&mut backend));
    let write_cut = args.cut_inside_write.map(|nth| {
        Arc::new(WriteCut::new(
            nth,
            Arc::clone(&power_off),
            Arc::clone(&shutdown),
        ))
    });
    if let Some(cut) = &write_cut {
        signal_hook::flag::register(SIGUSR1, Arc::clone(&cut.armed))?;
    } else if args.power_cut_signal {
        signal_hook::flag::register(SIGUSR1, Arc::clone(&power_off))?;
        signal_hook::flag::register(SIGUSR1, Arc::clone(&shutdown))?;
    }
    if let Some(tls) = &config.tls {
        eprintln!("mobius serve: TLS {:?}: {}", tls.mode, tls.description);
    }
    let mut server = Server::new(ServedBackend::new(backend, write_cut.clone()), config)
        .with_shutdown_flag(shutdown)
        .with_power_off_flag(Arc::clone(&power_off));
    if let Some(t) = &args.trace {
        server = server.with_trace(nbd::trace::TraceWriter::create(t)?);
    }
    let served = Arc::new(AtomicBool::new(false));
    let signal_at = (recording.is_some() && write_cut.is_none()).then(|| {
        power_cut::watch_for_signal(
            Arc::clone(&power_off),
            Arc::clone(&served),
            server.elapsed_ns(),
        )
    });
    let result = server.serve(&listen);
    served.store(true, std::sync::atomic::Ordering::SeqCst);
    let signal_at = signal_at.and_then(|w| w.join().ok().flatten());
    let fired = write_cut.as_ref().and_then(|c| c.fired());
    if let (Some(base), Some(at_ns)) = (recording, signal_at.or(fired.map(|f| f.at_ns))) {
        let backend = server.into_backend()?.into_inner();
        let image = args.image.as_ref().expect("clap requires --image");
        let (unfinished, logged) = power_cut::write_cut_image(image, backend, base, at_ns, start)?;
        let inside = fired.map_or(String::new(), |f| {
            format!(
                " inside a write of {} pages at byte {} ({} of its pages on flash, {} torn, {} not started)",
                f.pages, f.offset, f.finished, f.torn, f.not_started
            )
        });
        eprintln!(
            "mobius serve: power cut at {at_ns} ns{inside}: {unfinished} of {logged} operations not finished (torn if running)"
        );
        return Ok(());
    }
    // After a backend panic the device is left as it is (a power cut), never flushed.
    let mut backend = server.into_backend()?.into_inner();
    let flushed = nbd::NbdBackend::flush(&mut backend, 0);
    let mut dev = backend.into_device();
    dev.flash_mut().sync()?;
    result?;
    flushed.map_err(|e| anyhow::anyhow!("final flush: {e}"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn sizes_parse() {
        use lab::device::parse_size;
        assert_eq!(parse_size("256M").unwrap(), 256 << 20);
        assert_eq!(parse_size("2G").unwrap(), 2 << 30);
        assert_eq!(parse_size("1T").unwrap(), 1 << 40);
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert!(parse_size("lots").is_err());
    }
}
