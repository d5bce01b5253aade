//! One protocol behaviour per test, driven byte by byte over a socket pair against
//! `Server::serve_connection` with a `MemoryBackend`.

mod common;

use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use nbd::protocol::*;
use nbd::{ConnectionEnd, MemoryBackend, Server, ServerConfig, ServerError, TraceWriter};

const SIZE: u64 = 1 << 20;

/// Runs `client` against a server connection; returns what the connection ended with and the
/// server (for backend inspection).
fn session<T>(
    server: Server<MemoryBackend>,
    client: impl FnOnce(UnixStream) -> T,
) -> (Result<ConnectionEnd, ServerError>, T, Server<MemoryBackend>) {
    let (ours, theirs) = UnixStream::pair().unwrap();
    let (end, out) = std::thread::scope(|s| {
        let server = &server;
        let handle = s.spawn(move || {
            let reader = theirs.try_clone().unwrap();
            server.serve_connection(reader, theirs)
        });
        let out = client(ours);
        (handle.join().unwrap(), out)
    });
    (end, out, server)
}

fn mem_server() -> Server<MemoryBackend> {
    Server::new(MemoryBackend::new(SIZE), ServerConfig::default())
}

#[test]
fn go_reports_size_flags_and_block_sizes() {
    let (end, n, _) = session(mem_server(), |s| {
        let (mut c, n) = Client::connect(s);
        c.disconnect();
        n
    });
    assert_eq!(end.unwrap(), ConnectionEnd::Disconnected);
    assert_eq!(n.size, SIZE);
    let want = NBD_FLAG_HAS_FLAGS
        | NBD_FLAG_SEND_FLUSH
        | NBD_FLAG_SEND_FUA
        | NBD_FLAG_SEND_TRIM
        | NBD_FLAG_SEND_WRITE_ZEROES;
    assert_eq!(
        n.flags, want,
        "no CAN_MULTI_CONN unless the backend is multi-conn safe"
    );
    assert_eq!(n.block_sizes, Some((512, 4096, 32 << 20)));
}

#[test]
fn multi_conn_is_advertised_only_when_backend_says_so() {
    let backend = MemoryBackend::new(SIZE)
        .with_multi_conn_safe(true)
        .with_preferred_block_size(16384);
    let server = Server::new(backend, ServerConfig::default());
    let (_, n, _) = session(server, |s| {
        let (mut c, n) = Client::connect(s);
        c.disconnect();
        n
    });
    assert_ne!(n.flags & NBD_FLAG_CAN_MULTI_CONN, 0);
    assert_eq!(n.block_sizes, Some((512, 16384, 32 << 20)));
}

#[test]
fn export_name_with_and_without_zero_padding() {
    for (client_flags, reply_len) in [(1u32, 134usize), (3, 10)] {
        let (end, reply, _) = session(mem_server(), |s| {
            let mut c = Client::new(s);
            c.greet(client_flags);
            c.send(&encode_option_header(NBD_OPT_EXPORT_NAME, 6));
            c.send(b"mobius");
            let reply = c.recv(reply_len);
            c.disconnect();
            reply
        });
        assert_eq!(end.unwrap(), ConnectionEnd::Disconnected);
        assert_eq!(be_u64(&reply, 0), SIZE);
        assert!(reply[10..].iter().all(|b| *b == 0));
    }
}

#[test]
fn export_name_unknown_closes_the_connection() {
    let (end, closed, _) = session(mem_server(), |s| {
        let mut c = Client::new(s);
        c.greet(3);
        c.send(&encode_option_header(NBD_OPT_EXPORT_NAME, 4));
        c.send(b"nope");
        c.closed()
    });
    assert!(closed);
    assert!(matches!(
        end,
        Err(ServerError::Protocol(ProtocolError::UnknownExport { .. }))
    ));
}

#[test]
fn list_names_the_export() {
    let (_, replies, _) = session(mem_server(), |s| {
        let mut c = Client::new(s);
        c.greet(3);
        c.send(&encode_option_header(NBD_OPT_LIST, 0));
        let server = c.option_reply();
        let ack = c.option_reply();
        c.send(&encode_option_header(NBD_OPT_LIST, 1));
        c.send(&[0]);
        let invalid = c.option_reply();
        c.send(&encode_option_header(NBD_OPT_ABORT, 0));
        let abort = c.option_reply();
        (server, ack, invalid, abort)
    });
    let (server, ack, invalid, abort) = replies;
    assert_eq!(server.reply_type, NBD_REP_SERVER);
    assert_eq!(be_u32(&server.data, 0), 6);
    assert_eq!(&server.data[4..10], b"mobius");
    assert_eq!(ack.reply_type, NBD_REP_ACK);
    assert_eq!(invalid.reply_type, NBD_REP_ERR_INVALID);
    assert_eq!(abort.reply_type, NBD_REP_ACK);
}

#[test]
fn abort_ends_the_handshake() {
    let (end, _, _) = session(mem_server(), |s| {
        let mut c = Client::new(s);
        c.greet(3);
        c.send(&encode_option_header(NBD_OPT_ABORT, 0));
        c.option_reply()
    });
    assert_eq!(end.unwrap(), ConnectionEnd::Aborted);
}

#[test]
fn unsupported_options_get_err_unsup_and_the_handshake_goes_on() {
    let (end, _, _) = session(mem_server(), |s| {
        let mut c = Client::new(s);
        c.greet(3);
        for option in [
            NBD_OPT_STRUCTURED_REPLY,
            NBD_OPT_STARTTLS,
            NBD_OPT_SET_META_CONTEXT,
            4242,
        ] {
            c.send(&encode_option_header(option, 3));
            c.send(b"abc");
            let r = c.option_reply();
            assert_eq!((r.option, r.reply_type), (option, NBD_REP_ERR_UNSUP));
        }
        // INFO on an unknown export, then a malformed INFO, then INFO and GO that work.
        assert_eq!(
            c.go(NBD_OPT_INFO, b"other").unwrap_err().reply_type,
            NBD_REP_ERR_UNKNOWN
        );
        c.send(&encode_option_header(NBD_OPT_GO, 2));
        c.send(&[0, 0]);
        assert_eq!(c.option_reply().reply_type, NBD_REP_ERR_INVALID);
        assert_eq!(c.go(NBD_OPT_INFO, b"mobius").unwrap().size, SIZE);
        assert_eq!(c.go(NBD_OPT_GO, b"mobius").unwrap().size, SIZE);
        assert_eq!(c.write(1, 0, &[1; 512], 0), 0);
        c.disconnect();
    });
    assert_eq!(end.unwrap(), ConnectionEnd::Disconnected);
}

#[test]
fn handshake_violations_close_the_connection() {
    // Not fixed newstyle; unknown client flags; bad option magic; oversize option.
    let cases: Vec<(u32, Vec<u8>)> = vec![
        (0, vec![]),
        (1 << 7 | 1, vec![]),
        (3, vec![0u8; 16]),
        (3, encode_option_header(NBD_OPT_GO, u32::MAX).to_vec()),
    ];
    for (flags, then) in cases {
        let (end, closed, _) = session(mem_server(), |s| {
            let mut c = Client::new(s);
            c.greet(flags);
            c.send(&then);
            c.closed()
        });
        assert!(closed);
        assert!(matches!(end, Err(ServerError::Protocol(_))), "{end:?}");
    }
}

#[test]
fn write_then_read_back_with_every_command() {
    let (end, _, server) = session(mem_server(), |s| {
        let (mut c, _) = Client::connect(s);
        let data: Vec<u8> = (0..8192u32).map(|i| (i % 251) as u8).collect();
        assert_eq!(c.write(1, 4096, &data, NBD_CMD_FLAG_FUA), 0);
        assert_eq!(c.read(2, 4096, 8192).unwrap(), data);
        assert_eq!(c.simple(NBD_CMD_FLUSH, 0, 3, 0, 0), 0);
        assert_eq!(c.simple(NBD_CMD_TRIM, 0, 4, 4096, 512), 0);
        assert_eq!(
            c.simple(NBD_CMD_WRITE_ZEROES, NBD_CMD_FLAG_NO_HOLE, 5, 4608, 512),
            0
        );
        let back = c.read(6, 4096, 8192).unwrap();
        assert!(back[..1024].iter().all(|b| *b == 0));
        assert_eq!(back[1024..], data[1024..]);
        c.disconnect();
    });
    assert_eq!(end.unwrap(), ConnectionEnd::Disconnected);
    assert_eq!(server.with_backend(|b| b.flush_count), 1);
}

#[test]
fn trim_and_write_zeroes_longer_than_32_mib_are_served() {
    // Only READ and WRITE carry a payload and need the 32 MiB cap; mkfs discards the whole
    // device in one request.
    let size: u64 = 48 << 20;
    let big = (40u32 << 20) + 512;
    let server = Server::new(MemoryBackend::new(size), ServerConfig::default());
    let (end, _, server) = session(server, |s| {
        let (mut c, _) = Client::connect(s);
        assert_eq!(c.write(1, 0, &[7; 4096], 0), 0);
        assert_eq!(c.write(2, u64::from(big), &[9; 512], 0), 0);
        assert_eq!(c.simple(NBD_CMD_TRIM, 0, 3, 0, big), 0);
        assert_eq!(c.read(4, 0, 4096).unwrap(), vec![0; 4096]);
        assert_eq!(c.write(5, 0, &[7; 4096], 0), 0);
        assert_eq!(
            c.simple(NBD_CMD_WRITE_ZEROES, NBD_CMD_FLAG_FUA, 6, 0, big),
            0
        );
        assert_eq!(c.read(7, 0, 4096).unwrap(), vec![0; 4096]);
        assert_eq!(c.read(8, u64::from(big), 512).unwrap(), vec![9; 512]);
        assert_eq!(
            c.simple(NBD_CMD_TRIM, 0, 9, 0, big + (8 << 20)),
            Errno::Inval.code(),
            "past the end is still refused"
        );
        c.disconnect();
    });
    assert_eq!(end.unwrap(), ConnectionEnd::Disconnected);
    assert_eq!(server.with_backend(|b| b.image()[0]), 0);
}

#[test]
fn pipelined_requests_are_all_answered() {
    const N: u64 = 64;
    let (end, _, server) = session(mem_server(), |s| {
        let (mut c, _) = Client::connect(s);
        // Send every request before reading any reply.
        let mut bytes = Vec::new();
        for i in 0..N {
            bytes.extend_from_slice(&request(NBD_CMD_WRITE, 0, i, i * 512, 512));
            bytes.extend_from_slice(&[i as u8; 512]);
        }
        for i in 0..N {
            bytes.extend_from_slice(&request(NBD_CMD_READ, 0, 1000 + i, i * 512, 512));
        }
        let writer = {
            let mut w = c.stream.try_clone().unwrap();
            std::thread::spawn(move || std::io::Write::write_all(&mut w, &bytes).unwrap())
        };
        let mut seen = Vec::new();
        for _ in 0..N {
            let (err, h) = c.reply();
            assert_eq!(err, 0);
            seen.push(h);
        }
        for _ in 0..N {
            let (err, h) = c.reply();
            assert_eq!(err, 0);
            let data = c.recv(512);
            assert!(data.iter().all(|b| *b == (h - 1000) as u8));
            seen.push(h);
        }
        writer.join().unwrap();
        c.disconnect();
        seen
    });
    assert_eq!(end.unwrap(), ConnectionEnd::Disconnected);
    assert_eq!(server.with_backend(|b| b.call_count), 2 * N);
}

#[test]
fn invalid_requests_get_the_right_errno() {
    let mut backend = MemoryBackend::new(SIZE);
    backend.poison_sector(8192);
    let server = Server::new(backend, ServerConfig::default());
    let (end, _, server) = session(server, |s| {
        let (mut c, _) = Client::connect(s);
        let inval = Errno::Inval.code();
        assert_eq!(c.read(1, 1, 512), Err(inval), "misaligned offset");
        assert_eq!(c.read(2, 0, 100), Err(inval), "misaligned length");
        assert_eq!(c.read(3, SIZE, 512), Err(inval), "read past the end");
        assert_eq!(
            c.write(4, SIZE - 512, &[0; 1024], 0),
            Errno::NoSpc.code(),
            "write past the end"
        );
        assert_eq!(c.write(5, 0, &[9; 100], 0), inval, "misaligned write");
        assert_eq!(
            c.simple(NBD_CMD_TRIM, 0, 6, SIZE, 512),
            inval,
            "trim past the end"
        );
        assert_eq!(
            c.simple(NBD_CMD_WRITE_ZEROES, 0, 7, SIZE, 512),
            Errno::NoSpc.code()
        );
        assert_eq!(c.simple(99, 0, 8, 0, 512), inval, "unknown command");
        assert_eq!(c.simple(NBD_CMD_CACHE, 0, 9, 0, 512), Errno::NotSup.code());
        assert_eq!(
            c.simple(NBD_CMD_BLOCK_STATUS, 0, 10, 0, 512),
            Errno::NotSup.code()
        );
        assert_eq!(
            c.simple(NBD_CMD_READ, 1 << 12, 11, 0, 512),
            inval,
            "unknown flag"
        );
        assert_eq!(
            c.read(12, 0, (32 << 20) + 512),
            Err(inval),
            "read over 32 MiB"
        );
        assert_eq!(
            c.read(13, 8192, 512),
            Err(Errno::Io.code()),
            "uncorrectable page"
        );
        // The connection still works after all of that.
        assert_eq!(c.write(14, 0, &[3; 512], 0), 0);
        assert_eq!(c.read(15, 0, 512).unwrap(), vec![3; 512]);
        c.disconnect();
    });
    assert_eq!(end.unwrap(), ConnectionEnd::Disconnected);
    let image = server.with_backend(|b| b.image()[..1024].to_vec());
    assert_eq!(&image[..512], &[3; 512], "only the valid write landed");
    assert!(image[512..].iter().all(|b| *b == 0));
}

#[test]
fn out_of_space_backend_reports_enospc() {
    let mut backend = MemoryBackend::new(SIZE);
    backend.out_of_space = true;
    let (_, _, _) = session(Server::new(backend, ServerConfig::default()), |s| {
        let (mut c, _) = Client::connect(s);
        assert_eq!(c.write(1, 0, &[1; 512], 0), Errno::NoSpc.code());
        c.disconnect();
    });
}

#[test]
fn oversize_write_is_discarded_not_stored_and_the_connection_survives() {
    let len = (32u32 << 20) + 512;
    let (end, _, server) = session(mem_server(), |s| {
        let (mut c, _) = Client::connect(s);
        c.send(&request(NBD_CMD_WRITE, 0, 1, 0, len));
        let mut w = c.stream.try_clone().unwrap();
        let sender = std::thread::spawn(move || {
            let chunk = vec![0xeeu8; 1 << 20];
            let mut left = len as usize;
            while left > 0 {
                let n = left.min(chunk.len());
                std::io::Write::write_all(&mut w, &chunk[..n]).unwrap();
                left -= n;
            }
        });
        let (err, h) = c.reply();
        sender.join().unwrap();
        assert_eq!((err, h), (Errno::Inval.code(), 1));
        assert_eq!(c.read(2, 0, 512).unwrap(), vec![0; 512]);
        c.disconnect();
    });
    assert_eq!(end.unwrap(), ConnectionEnd::Disconnected);
    assert_eq!(
        server.with_backend(|b| b.call_count),
        1,
        "only the read reached the backend"
    );
}

#[test]
fn truncated_write_never_reaches_the_backend() {
    let (end, _, server) = session(mem_server(), |s| {
        let (mut c, _) = Client::connect(s);
        c.send(&request(NBD_CMD_WRITE, 0, 1, 0, 4096));
        c.send(&[0xaa; 1000]);
        drop(c);
    });
    assert!(matches!(
        end,
        Err(ServerError::Protocol(ProtocolError::Truncated { .. }))
    ));
    server.with_backend(|b| {
        assert_eq!(b.call_count, 0);
        assert!(b.image().iter().all(|x| *x == 0));
    });
}

#[test]
fn bad_request_magic_closes_after_pending_replies() {
    let (end, _, _) = session(mem_server(), |s| {
        let (mut c, _) = Client::connect(s);
        let mut bytes = request(NBD_CMD_FLUSH, 0, 7, 0, 0).to_vec();
        let mut bad = request(NBD_CMD_READ, 0, 8, 0, 512);
        bad[0] = 0;
        bytes.extend_from_slice(&bad);
        c.send(&bytes);
        assert_eq!(c.reply(), (0, 7));
        assert!(c.closed());
    });
    assert!(matches!(
        end,
        Err(ServerError::Protocol(ProtocolError::BadRequestMagic { .. }))
    ));
}

#[test]
fn client_vanishing_mid_header_is_a_truncation_not_a_panic() {
    let (end, _, _) = session(mem_server(), |s| {
        let (mut c, _) = Client::connect(s);
        c.send(&request(NBD_CMD_READ, 0, 1, 0, 512)[..10]);
    });
    assert!(matches!(
        end,
        Err(ServerError::Protocol(ProtocolError::Truncated { .. }))
    ));
    let (end, _, _) = session(mem_server(), |s| {
        let (_c, _) = Client::connect(s);
    });
    assert_eq!(end.unwrap(), ConnectionEnd::ClientClosed);
}

#[test]
fn pacing_holds_replies_until_simulated_completion() {
    let latency = Duration::from_millis(150);
    let backend = MemoryBackend::new(SIZE).with_latency_ns(latency.as_nanos() as u64);
    let paced = Server::new(
        backend.clone(),
        ServerConfig {
            pacing: true,
            ..ServerConfig::default()
        },
    );
    let (_, elapsed, _) = session(paced, |s| {
        let (mut c, _) = Client::connect(s);
        let t = Instant::now();
        assert_eq!(c.simple(NBD_CMD_FLUSH, 0, 1, 0, 0), 0);
        let elapsed = t.elapsed();
        c.disconnect();
        elapsed
    });
    assert!(elapsed >= latency - Duration::from_millis(5), "{elapsed:?}");
    let unpaced = Server::new(backend, ServerConfig::default());
    let (_, elapsed, _) = session(unpaced, |s| {
        let (mut c, _) = Client::connect(s);
        let t = Instant::now();
        assert_eq!(c.simple(NBD_CMD_FLUSH, 0, 1, 0, 0), 0);
        let elapsed = t.elapsed();
        c.disconnect();
        elapsed
    });
    assert!(elapsed < latency, "{elapsed:?}");
}

/// A paced reply still waiting for its due time: a shutdown sends it at once, a power cut
/// (the power-off flag) never sends it.
#[test]
fn a_power_cut_drops_replies_a_shutdown_would_send() {
    use std::sync::atomic::{AtomicBool, Ordering};
    for power_cut in [false, true] {
        let backend =
            MemoryBackend::new(SIZE).with_latency_ns(Duration::from_secs(30).as_nanos() as u64);
        let off = Arc::new(AtomicBool::new(false));
        let server = Server::new(
            backend,
            ServerConfig {
                pacing: true,
                ..ServerConfig::default()
            },
        )
        .with_power_off_flag(Arc::clone(&off));
        let stop = server.shutdown_flag();
        let (end, reply, _) = session(server, |s| {
            // The test's socket pair has no server-side read timeout, so the server's reader
            // only ends when the client leaves: "no reply" is one second of silence.
            let (mut c, _) = Client::connect(s);
            c.stream
                .set_read_timeout(Some(Duration::from_secs(1)))
                .unwrap();
            c.send(&request(NBD_CMD_FLUSH, 0, 7, 0, 0));
            std::thread::sleep(Duration::from_millis(100));
            off.store(power_cut, Ordering::SeqCst);
            stop.store(true, Ordering::SeqCst);
            // After a cut nothing may arrive (a reply's first byte would make `closed` false).
            if power_cut {
                Err(c.closed())
            } else {
                Ok(c.reply())
            }
        });
        end.unwrap();
        if power_cut {
            assert_eq!(reply, Err(true), "a reply left after the power cut");
        } else {
            assert_eq!(reply, Ok((0, 7)), "a shutdown sends the pending reply");
        }
    }
}

#[derive(Clone, Default)]
struct SharedSink(Arc<Mutex<Vec<u8>>>);
impl std::io::Write for SharedSink {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn trace_records_backend_requests_in_order() {
    let sink = SharedSink::default();
    let server = mem_server().with_trace(TraceWriter::new(sink.clone()));
    let (end, _, _) = session(server, |s| {
        let (mut c, _) = Client::connect(s);
        assert_eq!(c.write(1, 4096, &[1; 1024], NBD_CMD_FLAG_FUA), 0);
        assert!(c.read(2, 1, 512).is_err(), "refused: not traced");
        assert!(c.read(3, 4096, 1024).is_ok());
        assert_eq!(
            c.simple(
                NBD_CMD_WRITE_ZEROES,
                NBD_CMD_FLAG_FUA | NBD_CMD_FLAG_NO_HOLE,
                4,
                0,
                512
            ),
            0
        );
        assert_eq!(c.simple(NBD_CMD_TRIM, 0, 5, 0, 512), 0);
        assert_eq!(c.simple(NBD_CMD_FLUSH, 0, 6, 0, 0), 0);
        c.disconnect();
    });
    assert_eq!(end.unwrap(), ConnectionEnd::Disconnected);
    let text = String::from_utf8(sink.0.lock().unwrap().clone()).unwrap();
    let records = trace::line::read_trace(text.as_bytes()).unwrap();
    let shape: Vec<String> = text
        .lines()
        .map(|l| l.split_once(' ').unwrap().1.to_string())
        .collect();
    assert_eq!(
        shape,
        [
            "WRITE 4096 1024 FUA",
            "READ 4096 1024 -",
            "WRITE_ZEROES 0 512 FUA,NO_HOLE",
            "TRIM 0 512 -",
            "FLUSH 0 0 -",
            "DISC 0 0 -",
        ]
    );
    assert!(records
        .windows(2)
        .all(|w| w[0].arrival_ns <= w[1].arrival_ns));
}
