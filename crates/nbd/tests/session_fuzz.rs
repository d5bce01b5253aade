//! Property tests over whole sessions on an in-memory stream: random bytes never panic the
//! server, and a cut-short stream of plausible requests leaves the backend exactly as if only
//! the fully received, valid requests had run.

use std::io::{Cursor, Write};
use std::sync::{Arc, Mutex};

use nbd::protocol::*;
use nbd::{MemoryBackend, Server, ServerConfig};
use proptest::prelude::*;

const SIZE: u64 = 64 << 10;

#[derive(Clone, Default)]
struct Sink(Arc<Mutex<Vec<u8>>>);
impl Write for Sink {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Client flags plus a GO on the default export asking for no information: the bytes that
/// reach transmission. Such a client did not commit to the block sizes (any byte range goes).
fn handshake_prefix() -> Vec<u8> {
    handshake(false)
}

/// Client flags plus a GO on the default export, asking for NBD_INFO_BLOCK_SIZE (committing
/// the client to 512-byte alignment) or for nothing.
fn handshake(ask_block_size: bool) -> Vec<u8> {
    let mut b = 3u32.to_be_bytes().to_vec();
    let mut data = vec![0u8, 0, 0, 0];
    if ask_block_size {
        data.extend_from_slice(&1u16.to_be_bytes());
        data.extend_from_slice(&NBD_INFO_BLOCK_SIZE.to_be_bytes());
    } else {
        data.extend_from_slice(&0u16.to_be_bytes());
    }
    b.extend_from_slice(&encode_option_header(NBD_OPT_GO, data.len() as u32));
    b.extend_from_slice(&data);
    b
}

/// What the server checks a request against after [`handshake`].
fn limits(ask_block_size: bool) -> RequestLimits {
    RequestLimits {
        min_block_bytes: if ask_block_size { 512 } else { 1 },
        ..RequestLimits::aligned(SIZE)
    }
}

fn run(input: Vec<u8>) -> (Server<MemoryBackend>, Vec<u8>) {
    let server = Server::new(MemoryBackend::new(SIZE), ServerConfig::default());
    let sink = Sink::default();
    // Any outcome is fine; only a panic (which would propagate here) fails the test.
    let _ = server.serve_connection(Cursor::new(input), sink.clone());
    let out = sink.0.lock().unwrap().clone();
    (server, out)
}

#[derive(Debug, Clone)]
struct Req {
    command: u16,
    flags: u16,
    offset: u64,
    length: u32,
    fill: u8,
}

fn req_strategy() -> impl Strategy<Value = Req> {
    let command = prop_oneof![
        4 => Just(NBD_CMD_WRITE),
        2 => Just(NBD_CMD_READ),
        1 => Just(NBD_CMD_TRIM),
        1 => Just(NBD_CMD_WRITE_ZEROES),
        1 => Just(NBD_CMD_FLUSH),
        1 => 0u16..12,
    ];
    let flags = prop_oneof![
        4 => Just(0u16),
        1 => Just(NBD_CMD_FLAG_FUA),
        1 => Just(NBD_CMD_FLAG_NO_HOLE),
        1 => any::<u16>(),
    ];
    let offset = prop_oneof![
        4 => (0u64..160).prop_map(|s| s * 512),
        1 => 0u64..(SIZE + 4096),
        1 => any::<u64>(),
    ];
    let length = prop_oneof![
        4 => (1u32..9).prop_map(|s| s * 512),
        1 => 0u32..5000,
        1 => Just((32u32 << 20) + 512),
    ];
    (command, flags, offset, length, any::<u8>()).prop_map(
        |(command, flags, offset, length, fill)| Req {
            command,
            flags,
            offset,
            length,
            fill,
        },
    )
}

/// The stream for `reqs` and, per request, the stream position at which it is fully received.
fn encode(reqs: &[Req], ask_block_size: bool) -> (Vec<u8>, Vec<u64>) {
    let mut bytes = handshake(ask_block_size);
    let mut ends = Vec::new();
    for (i, r) in reqs.iter().enumerate() {
        let header = Request {
            flags: r.flags,
            command: Command::from_wire(r.command),
            handle: i as u64,
            offset: r.offset,
            length: r.length,
        };
        bytes.extend_from_slice(&encode_request(&header));
        let mut end = bytes.len() as u64;
        if r.command == NBD_CMD_WRITE {
            end += u64::from(r.length);
            // Oversize payloads are not materialised: the server will wait for bytes that
            // never come, which is exactly the cut-short case.
            if r.length <= BLOCK_SIZE_MAX_BYTES {
                bytes.extend(std::iter::repeat_n(r.fill, r.length as usize));
            }
        }
        ends.push(end);
    }
    (bytes, ends)
}

/// The image the backend must hold when the stream is cut at `cut`.
fn model(reqs: &[Req], ends: &[u64], cut: u64, limits: &RequestLimits) -> Vec<u8> {
    let mut image = vec![0u8; SIZE as usize];
    for (r, end) in reqs.iter().zip(ends) {
        if *end > cut {
            break;
        }
        let header = Request {
            flags: r.flags,
            command: Command::from_wire(r.command),
            handle: 0,
            offset: r.offset,
            length: r.length,
        };
        if header.command == Command::Disc {
            break;
        }
        if check_request(&header, limits).is_err() {
            continue;
        }
        let range = r.offset as usize..(r.offset + u64::from(r.length)) as usize;
        match header.command {
            Command::Write => image[range].fill(r.fill),
            Command::Trim | Command::WriteZeroes => image[range].fill(0),
            _ => {}
        }
    }
    image
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic_the_server(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        run(bytes);
    }

    #[test]
    fn random_bytes_after_a_valid_handshake_never_panic(
        bytes in proptest::collection::vec(any::<u8>(), 0..512),
        magic_every in 0usize..3,
    ) {
        let mut input = handshake_prefix();
        // Sprinkle valid request magics so random headers get past the first check.
        let mut bytes = bytes;
        if magic_every > 0 {
            for chunk in bytes.chunks_mut(28) {
                if chunk.len() >= 4 {
                    chunk[..4].copy_from_slice(&REQUEST_MAGIC.to_be_bytes());
                }
            }
        }
        input.extend_from_slice(&bytes);
        run(input);
    }

    #[test]
    fn cut_short_streams_apply_exactly_the_complete_valid_requests(
        reqs in proptest::collection::vec(req_strategy(), 0..24),
        cut_fraction in 0.0f64..=1.0,
        ask_block_size in any::<bool>(),
    ) {
        let (bytes, ends) = encode(&reqs, ask_block_size);
        let prefix = handshake(ask_block_size).len() as u64;
        let cut = prefix + ((bytes.len() as u64 - prefix) as f64 * cut_fraction) as u64;
        let cut = cut.min(bytes.len() as u64);
        let (server, _) = run(bytes[..cut as usize].to_vec());
        let image = server.with_backend(|b| b.image().to_vec());
        let want = model(&reqs, &ends, cut, &limits(ask_block_size));
        prop_assert!(image == want, "backend image differs from the model (cut at {cut} of {})", bytes.len());
    }
}
