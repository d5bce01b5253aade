//! A whole connection on arbitrary client bytes (after a valid handshake half the time):
//! the server may end the connection with an error but must never panic.
#![no_main]

use std::io::Cursor;

use libfuzzer_sys::fuzz_target;
use nbd::protocol::{encode_option_header, NBD_OPT_GO};
use nbd::{MemoryBackend, Server, ServerConfig};

fuzz_target!(|data: &[u8]| {
    let mut input = Vec::with_capacity(data.len() + 32);
    if data.first().is_some_and(|b| b & 1 == 1) {
        input.extend_from_slice(&3u32.to_be_bytes());
        input.extend_from_slice(&encode_option_header(NBD_OPT_GO, 6));
        input.extend_from_slice(&[0u8; 6]);
    }
    input.extend_from_slice(data.get(1..).unwrap_or(&[]));
    let server = Server::new(MemoryBackend::new(64 << 10), ServerConfig::default());
    let _ = server.serve_connection(Cursor::new(input), std::io::sink());
});
