//! Serves a RAM disk (`MemoryBackend`) over NBD. Used by the integration tests against real
//! clients, and handy by hand:
//!
//! ```text
//! nbd_mem_server [--size BYTES] [--pacing] [--latency-ns NS] [--trace FILE] [--multi-conn]
//!                (--unix PATH | --tcp ADDR | --stdio)
//! nbdfuse MNT --command target/debug/examples/nbd_mem_server --stdio
//! ```
//!
//! SIGINT/SIGTERM stop it cleanly (the backend is flushed, the trace written). Nothing is
//! printed to stdout, which is the NBD stream under `--stdio`.

use std::path::PathBuf;
use std::process::ExitCode;

use nbd::{install_signal_handlers, Listen, MemoryBackend, Server, ServerConfig, TraceWriter};

struct Args {
    size_bytes: u64,
    pacing: bool,
    latency_ns: u64,
    trace: Option<PathBuf>,
    multi_conn: bool,
    listen: Listen,
}

const USAGE: &str = "usage: nbd_mem_server [--size BYTES] [--pacing] [--latency-ns NS] \
                     [--trace FILE] [--multi-conn] (--unix PATH | --tcp ADDR | --stdio)";

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        size_bytes: 64 << 20,
        pacing: false,
        latency_ns: 0,
        trace: None,
        multi_conn: false,
        listen: Listen::Stdio,
    };
    let mut listen = None;
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = |name: &str| it.next().ok_or(format!("{name} needs a value\n{USAGE}"));
        match arg.as_str() {
            "--size" => {
                args.size_bytes = value("--size")?
                    .parse()
                    .map_err(|e| format!("--size: {e}"))?
            }
            "--latency-ns" => {
                args.latency_ns = value("--latency-ns")?
                    .parse()
                    .map_err(|e| format!("--latency-ns: {e}"))?
            }
            "--trace" => args.trace = Some(PathBuf::from(value("--trace")?)),
            "--pacing" => args.pacing = true,
            "--multi-conn" => args.multi_conn = true,
            "--unix" => listen = Some(Listen::Unix(PathBuf::from(value("--unix")?))),
            "--tcp" => listen = Some(Listen::Tcp(value("--tcp")?)),
            "--stdio" => listen = Some(Listen::Stdio),
            "-h" | "--help" => return Err(USAGE.to_string()),
            other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
        }
    }
    args.listen = listen.ok_or(format!("choose a transport\n{USAGE}"))?;
    Ok(args)
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(msg) => {
            eprintln!("{msg}");
            return ExitCode::from(2);
        }
    };
    let backend = MemoryBackend::new(args.size_bytes)
        .with_latency_ns(args.latency_ns)
        .with_multi_conn_safe(args.multi_conn);
    let config = ServerConfig {
        pacing: args.pacing,
        ..ServerConfig::default()
    };
    let mut server = Server::new(backend, config);
    if let Some(path) = &args.trace {
        match TraceWriter::create(path) {
            Ok(t) => server = server.with_trace(t),
            Err(e) => {
                eprintln!(
                    "nbd_mem_server: cannot create trace {}: {e}",
                    path.display()
                );
                return ExitCode::FAILURE;
            }
        }
    }
    if let Err(e) = install_signal_handlers(&server.shutdown_flag()) {
        eprintln!("nbd_mem_server: cannot install signal handlers: {e}");
        return ExitCode::FAILURE;
    }
    eprintln!(
        "nbd_mem_server: serving {} bytes on {:?}",
        args.size_bytes, args.listen
    );
    let result = server.serve(&args.listen);
    let flushes = server.with_backend(|b| b.flush_count);
    match result {
        Ok(()) => {
            eprintln!("nbd_mem_server: stopped cleanly, backend flushed ({flushes} flushes)");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("nbd_mem_server: {e}");
            ExitCode::FAILURE
        }
    }
}
