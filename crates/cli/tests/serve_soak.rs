//! A soak of hostile clients beside a verifying writer (issue 68), on loopback only, against
//! `mobius serve --pace` on an image: idle sockets, half handshakes, clients that never read
//! their large replies, abrupt closes in the middle of a request, malformed handshakes and
//! requests, all at once and over the connection limit. The writer writes, reads back and
//! checks its data all along, reconnecting now and then (so new clients must still get in);
//! at the end every block reads back as last written, before and after a restart, the server
//! stayed within its memory bound and shut down cleanly.
//!
//! CI runs it for a few seconds; `MOBIUS_LONG=1` for two minutes (`MOBIUS_SOAK_SECS=N` for
//! N seconds). The hostile mix follows a seed (`MOBIUS_SOAK_SEED`, printed), though thread
//! timing makes a run's interleaving its own.

mod common;

use common::*;
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

const BLOCK: usize = 64 << 10;
const BLOCKS: u64 = 128;
const MAX_CONNECTIONS: u64 = 8;
const BUFFER: u64 = 32 << 20;

fn request(command: u16, handle: u64, offset: u64, length: u32) -> [u8; 28] {
    nbd_request(command, handle, offset, length)
}

fn go(socket: &Path) -> std::io::Result<UnixStream> {
    nbd_go(socket, Duration::from_secs(60))
}

/// The writer's pattern for `block` at `version`.
fn pattern(block: u64, version: u64) -> Vec<u8> {
    let mut x =
        block.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ version.wrapping_mul(0xd1b5_4a32_d192_ed03);
    (0..BLOCK)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn simple_reply(s: &mut UnixStream, handle: u64) -> std::io::Result<u32> {
    let mut r = [0u8; 16];
    s.read_exact(&mut r)?;
    assert_eq!(be_u32(&r, 0), 0x6744_6698, "reply magic");
    assert_eq!(u64::from_be_bytes(r[8..16].try_into().unwrap()), handle);
    Ok(be_u32(&r, 4))
}

/// A connection for the writer: retried while hostile clients hold every slot.
fn writer_connection(socket: &Path) -> UnixStream {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        match go(socket) {
            Ok(s) => return s,
            Err(e) if Instant::now() < deadline => {
                let _ = e;
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => panic!("the verifying writer was locked out for two minutes: {e}"),
        }
    }
}

fn write_block(s: &mut UnixStream, handle: u64, block: u64, data: &[u8]) -> std::io::Result<()> {
    s.write_all(&request(1, handle, block * BLOCK as u64, BLOCK as u32))?;
    s.write_all(data)?;
    let err = simple_reply(s, handle)?;
    assert_eq!(err, 0, "write of block {block} failed with errno {err}");
    Ok(())
}

fn read_block(s: &mut UnixStream, handle: u64, block: u64) -> std::io::Result<Vec<u8>> {
    s.write_all(&request(0, handle, block * BLOCK as u64, BLOCK as u32))?;
    let err = simple_reply(s, handle)?;
    assert_eq!(err, 0, "read of block {block} failed with errno {err}");
    let mut data = vec![0u8; BLOCK];
    s.read_exact(&mut data)?;
    Ok(data)
}

/// Writes, reads back and checks blocks until `stop`; returns each block's last version.
fn verifying_writer(socket: &Path, stop: &AtomicBool, seed: u64, done: &AtomicU64) -> Vec<u64> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5752_4954_4552);
    let mut versions = vec![0u64; BLOCKS as usize];
    let mut s = writer_connection(socket);
    let mut handle = 0u64;
    while !stop.load(Ordering::Relaxed) || handle < 64 {
        let block = rng.random_range(0..BLOCKS);
        let version = versions[block as usize] + 1;
        handle += 1;
        write_block(&mut s, handle, block, &pattern(block, version)).unwrap();
        versions[block as usize] = version;
        let check = rng.random_range(0..BLOCKS);
        handle += 1;
        let got = read_block(&mut s, handle, check).unwrap();
        assert!(
            got == pattern(check, versions[check as usize])
                || versions[check as usize] == 0 && got.iter().all(|&b| b == 0),
            "block {check} does not hold version {} (seed {seed})",
            versions[check as usize]
        );
        done.fetch_add(1, Ordering::Relaxed);
        if rng.random_range(0..32u32) == 0 {
            // A new connection now and then: new clients must still get in.
            let _ = s.write_all(&request(2, 0, 0, 0));
            s = writer_connection(socket);
        }
    }
    let _ = s.write_all(&request(2, 0, 0, 0));
    versions
}

/// Every block holds its last version, through a fresh connection.
fn verify_all(socket: &Path, versions: &[u64], seed: u64, when: &str) {
    let mut s = writer_connection(socket);
    for (block, &version) in versions.iter().enumerate() {
        let got = read_block(&mut s, block as u64 + 1, block as u64).unwrap();
        let ok = if version == 0 {
            got.iter().all(|&b| b == 0)
        } else {
            got == pattern(block as u64, version)
        };
        assert!(
            ok,
            "{when}: block {block} lost version {version} (seed {seed})"
        );
    }
    let _ = s.write_all(&request(2, 0, 0, 0));
}

/// One hostile client, chosen by `rng`; returns when it has done its harm.
fn hostile_client(socket: &Path, rng: &mut ChaCha8Rng) {
    let hold = Duration::from_millis(rng.random_range(0..1500));
    let kind = rng.random_range(0..6u32);
    let Ok(mut s) = UnixStream::connect(socket) else {
        return;
    };
    let _ = s.set_write_timeout(Some(Duration::from_secs(5)));
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    match kind {
        // An idle socket: never a byte.
        0 => std::thread::sleep(hold),
        // Half a handshake: the flags and part of an option header, then silence.
        1 => {
            let mut g = [0u8; 18];
            let _ = s.read_exact(&mut g);
            let _ = s.write_all(&3u32.to_be_bytes());
            let _ = s.write_all(&b"IHAVEOPT\0\0\0\x07"[..rng.random_range(1..12)]);
            std::thread::sleep(hold);
        }
        // Large READs whose replies are never read, then an abrupt close.
        2 => {
            drop(s);
            if let Ok(mut s) = go(socket) {
                for i in 0..rng.random_range(1..64u64) {
                    let offset = rng.random_range(0..4u64) << 20;
                    if s.write_all(&request(0, i, offset, 32 << 20)).is_err() {
                        break;
                    }
                }
                std::thread::sleep(hold);
            }
        }
        // A WRITE cut short in its payload.
        3 => {
            drop(s);
            if let Ok(mut s) = go(socket) {
                let offset = (BLOCKS * BLOCK as u64) + (rng.random_range(0..64u64) << 16);
                let _ = s.write_all(&request(1, 7, offset, 1 << 20));
                let _ = s.write_all(&vec![0xa5; rng.random_range(0..(1 << 20))]);
            }
        }
        // Malformed requests after a good handshake: unknown commands and flags, unaligned
        // and out-of-range requests (answered with errors), then a bad magic (closed).
        4 => {
            drop(s);
            if let Ok(mut s) = go(socket) {
                // Never inside the writer's blocks: a TRIM or WRITE_ZEROES there is a client's
                // right, not an attack.
                let region = BLOCKS * BLOCK as u64;
                for i in 0..rng.random_range(1..16u64) {
                    let offset = rng.random_range(region..u64::MAX);
                    let mut r = request(rng.random_range(0..12u16), i, offset, rng.random());
                    if rng.random_range(0..4u32) == 0 {
                        r[4] = rng.random();
                    }
                    if r[7] == 1 {
                        r[7] = 0; // no WRITE: its payload would be the rest of the stream
                    }
                    if s.write_all(&r).is_err() {
                        break;
                    }
                }
                let _ = s.write_all(&[0xde, 0xad, 0xbe, 0xef]);
                let _ = s.write_all(&[0u8; 24]);
            }
        }
        // A malformed handshake: random bytes after the greeting.
        _ => {
            let mut g = [0u8; 18];
            let _ = s.read_exact(&mut g);
            let junk: Vec<u8> = (0..rng.random_range(1..200))
                .map(|_| rng.random())
                .collect();
            let _ = s.write_all(&junk);
            std::thread::sleep(hold.min(Duration::from_millis(200)));
        }
    }
}

fn soak_seconds() -> u64 {
    if let Some(secs) = std::env::var("MOBIUS_SOAK_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        return secs;
    }
    if std::env::var("MOBIUS_LONG").is_ok_and(|v| v == "1") {
        120
    } else {
        4
    }
}

#[test]
fn hostile_clients_beside_a_verifying_writer() {
    let seed: u64 = std::env::var("MOBIUS_SOAK_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(68);
    let secs = soak_seconds();
    println!("soak: seed {seed}, {secs} s (MOBIUS_SOAK_SEED, MOBIUS_SOAK_SECS, MOBIUS_LONG=1)");
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let image: PathBuf = dir.join("dev.img");
    let args = [
        "--pace",
        "--max-connections",
        "8",
        "--handshake-timeout",
        "1",
        "--connection-buffer",
        "32M",
    ];
    let mut server = Server::start(dir, "dftl", &image, "64M", &args);
    let pid = server.pid().unwrap();
    let socket = server.socket.clone();
    drop(go(&socket).unwrap());
    let baseline = rss_bytes(pid);
    let stop = AtomicBool::new(false);
    let rounds = AtomicU64::new(0);
    let hostile_runs = AtomicU64::new(0);
    let mut peak = 0;
    let versions = std::thread::scope(|scope| {
        let writer = scope.spawn(|| verifying_writer(&socket, &stop, seed, &rounds));
        for t in 0..12u64 {
            let (socket, stop, runs) = (&socket, &stop, &hostile_runs);
            scope.spawn(move || {
                let mut rng = ChaCha8Rng::seed_from_u64(seed.wrapping_mul(1000) + t);
                while !stop.load(Ordering::Relaxed) {
                    hostile_client(socket, &mut rng);
                    runs.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        let end = Instant::now() + Duration::from_secs(secs);
        while Instant::now() < end {
            std::thread::sleep(Duration::from_millis(100));
            peak = peak.max(rss_bytes(pid));
            assert!(
                server.running(),
                "the server died under hostile clients (seed {seed})"
            );
        }
        stop.store(true, Ordering::Relaxed);
        writer.join().unwrap()
    });
    let grown = peak.saturating_sub(baseline);
    println!(
        "soak: {} verified write+read rounds, {} hostile clients, peak +{} MiB over {} MiB",
        rounds.load(Ordering::Relaxed),
        hostile_runs.load(Ordering::Relaxed),
        grown >> 20,
        baseline >> 20
    );
    assert!(
        rounds.load(Ordering::Relaxed) >= 32,
        "the writer hardly got to write"
    );
    assert!(
        grown <= MAX_CONNECTIONS * BUFFER + (96 << 20),
        "the server grew by {} MiB, more than {MAX_CONNECTIONS} connections x 32 MiB allow (seed {seed})",
        grown >> 20
    );
    assert!(server.running(), "the server died (seed {seed})");
    verify_all(&socket, &versions, seed, "after the soak");
    assert!(server.stop(), "clean shutdown after the soak (seed {seed})");
    let mut server = Server::start(dir, "dftl", &image, "64M", &args);
    verify_all(&server.socket.clone(), &versions, seed, "after a restart");
    assert!(server.stop());
}

/// The soak's check can fail: a block written behind the writer's back (a write the device
/// lost, as far as the writer can tell) is caught, and so is one that never reached it.
#[test]
fn the_soak_check_catches_a_block_that_is_not_what_was_written() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let mut server = Server::start(dir, "dftl", &dir.join("dev.img"), "64M", &[]);
    let socket = server.socket.clone();
    let mut versions = vec![0u64; BLOCKS as usize];
    let mut s = writer_connection(&socket);
    for block in 0..4u64 {
        versions[block as usize] = 1;
        write_block(&mut s, block + 1, block, &pattern(block, 1)).unwrap();
    }
    verify_all(&socket, &versions, 0, "control");
    write_block(&mut s, 9, 2, &pattern(2, 7)).unwrap();
    let caught = std::panic::catch_unwind(|| verify_all(&socket, &versions, 0, "overwritten"));
    assert!(
        caught.is_err(),
        "a block holding other data passed the check"
    );
    write_block(&mut s, 10, 2, &pattern(2, 1)).unwrap();
    versions[5] = 1;
    let caught = std::panic::catch_unwind(|| verify_all(&socket, &versions, 0, "never written"));
    assert!(caught.is_err(), "a block never written passed the check");
    assert!(server.stop());
}
