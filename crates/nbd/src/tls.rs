//! TLS for the NBD server: NBD_OPT_STARTTLS with pre-shared keys or X.509 certificates.
//!
//! The handshake starts in plain text; a client that sends NBD_OPT_STARTTLS gets NBD_REP_ACK
//! and the rest of the connection (remaining options and the whole transmission phase) runs
//! over TLS (NBD protocol, "TLS support"). [`TlsMode::Require`] is the protocol's FORCEDTLS:
//! before STARTTLS every option but NBD_OPT_ABORT is answered NBD_REP_ERR_TLS_REQD and an
//! NBD_OPT_EXPORT_NAME closes the connection. [`TlsMode::On`] lets a client stay in plain text.
//!
//! The credentials are those of nbdkit and qemu-nbd, so their files work unchanged:
//! - **PSK**: a file of `identity:hexkey` lines (GnuTLS `psktool`'s format). The client names
//!   an identity; an unknown identity or a wrong key fails the TLS handshake.
//! - **X.509**: a directory holding `server-cert.pem` and `server-key.pem`, and `ca-cert.pem`
//!   when client certificates are checked (`verify_peer`).
//!
//! The TLS library is OpenSSL (the `openssl` crate over Debian's libssl): rustls has no
//! external pre-shared keys (rustls issue #174), which the libnbd and qemu clients use for PSK,
//! and one TLS stack for both kinds keeps one code path (docs/nbd.md, "TLS"). TLS 1.2 is the
//! oldest version offered, as the NBD protocol asks.
//!
//! After the TLS handshake the socket is non-blocking and both halves of the connection (the
//! request reader and the reply writer, which run on two threads under `--pace`) share the
//! session under a mutex, held only while OpenSSL moves bytes, never while waiting: a half
//! that needs the socket waits in `poll(2)` without the lock.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use openssl::ssl::{
    ErrorCode, HandshakeError, MidHandshakeSslStream, SslAcceptor, SslFiletype, SslMethod,
    SslOptions, SslStream, SslVerifyMode, SslVersion,
};
use thiserror::Error;

use crate::error::ServerError;
use crate::timeouts::{SHUTDOWN_POLL, WRITE_TIMEOUT};

/// Whether a client may, or must, start TLS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsMode {
    /// A client may send NBD_OPT_STARTTLS, or carry on in plain text.
    On,
    /// Every option before NBD_OPT_STARTTLS but NBD_OPT_ABORT is refused with
    /// NBD_REP_ERR_TLS_REQD (the protocol's FORCEDTLS mode).
    Require,
}

/// Why the TLS credentials could not be loaded.
#[derive(Debug, Error)]
pub enum TlsError {
    #[error("PSK file {path}: {reason}")]
    PskFile { path: PathBuf, reason: String },
    #[error(
        "PSK file {path}, line {line}: {reason} (each line is identity:hexkey, as psktool writes)"
    )]
    PskLine {
        path: PathBuf,
        line: usize,
        reason: String,
    },
    #[error("certificate {path}: {reason}")]
    Certificate { path: PathBuf, reason: String },
    #[error("TLS setup: {0}")]
    Setup(#[from] openssl::error::ErrorStack),
}

/// TLS settings of a server: the mode and the acceptor holding the credentials.
#[derive(Clone)]
pub struct TlsConfig {
    pub mode: TlsMode,
    acceptor: SslAcceptor,
    /// What the credentials are, for the server's start-up line.
    pub description: String,
}

impl std::fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsConfig")
            .field("mode", &self.mode)
            .field("description", &self.description)
            .finish()
    }
}

/// The longest key a PSK file line may carry (the TLS stack's PSK buffer is 512 bytes).
const PSK_KEY_MAX_BYTES: usize = 256;

/// Parses a PSK file: `identity:hexkey` per line, blank lines skipped.
pub fn parse_psk_file(path: &Path, text: &str) -> Result<HashMap<Vec<u8>, Vec<u8>>, TlsError> {
    let mut keys = HashMap::new();
    for (i, line) in text.lines().enumerate() {
        let bad = |reason: String| TlsError::PskLine {
            path: path.to_path_buf(),
            line: i + 1,
            reason,
        };
        let line = line.trim_end_matches('\r');
        if line.trim().is_empty() {
            continue;
        }
        let (identity, hex) = line
            .rsplit_once(':')
            .ok_or_else(|| bad("no ':' between identity and key".into()))?;
        if identity.is_empty() {
            return Err(bad("empty identity".into()));
        }
        let key = decode_hex(hex).map_err(bad)?;
        if key.is_empty() || key.len() > PSK_KEY_MAX_BYTES {
            return Err(bad(format!(
                "the key is {} bytes; it must be 1 to {PSK_KEY_MAX_BYTES}",
                key.len()
            )));
        }
        if keys.insert(identity.as_bytes().to_vec(), key).is_some() {
            return Err(bad(format!("identity {identity:?} appears twice")));
        }
    }
    if keys.is_empty() {
        return Err(TlsError::PskFile {
            path: path.to_path_buf(),
            reason: "holds no key".into(),
        });
    }
    Ok(keys)
}

fn decode_hex(hex: &str) -> Result<Vec<u8>, String> {
    if !hex.len().is_multiple_of(2) {
        return Err("the key has an odd number of hex digits".into());
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| {
            u8::from_str_radix(hex.get(i..i + 2).unwrap_or("-"), 16)
                .map_err(|_| format!("the key is not hex: {hex:?}"))
        })
        .collect()
}

impl TlsConfig {
    /// Pre-shared keys from a psktool-format file.
    pub fn psk(mode: TlsMode, path: &Path) -> Result<TlsConfig, TlsError> {
        let text = std::fs::read_to_string(path).map_err(|e| TlsError::PskFile {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
        let keys = parse_psk_file(path, &text)?;
        let count = keys.len();
        let mut builder = base_builder()?;
        // TLS 1.2 PSK suites (TLS 1.3 takes the same callback, with SHA-256 suites).
        builder.set_cipher_list("ECDHEPSK:DHEPSK:PSK:!NULL:!RC4:!3DES:!MD5:@STRENGTH")?;
        builder.set_psk_server_callback(move |_ssl, identity, out| {
            match identity.and_then(|id| keys.get(id)) {
                Some(key) if key.len() <= out.len() => {
                    out[..key.len()].copy_from_slice(key);
                    Ok(key.len())
                }
                // Unknown identity: no key, the handshake fails.
                _ => Ok(0),
            }
        });
        Ok(TlsConfig {
            mode,
            acceptor: builder.build(),
            description: format!("PSK, {count} identities from {}", path.display()),
        })
    }

    /// X.509: `server-cert.pem` and `server-key.pem` from `dir`; with `verify_peer`, clients
    /// must present a certificate signed by `dir/ca-cert.pem`.
    pub fn x509(mode: TlsMode, dir: &Path, verify_peer: bool) -> Result<TlsConfig, TlsError> {
        let cert = dir.join("server-cert.pem");
        let key = dir.join("server-key.pem");
        let mut builder = base_builder()?;
        let bad = |path: &Path| {
            let path = path.to_path_buf();
            move |e: openssl::error::ErrorStack| TlsError::Certificate {
                path,
                reason: e.to_string(),
            }
        };
        builder
            .set_certificate_chain_file(&cert)
            .map_err(bad(&cert))?;
        builder
            .set_private_key_file(&key, SslFiletype::PEM)
            .map_err(bad(&key))?;
        builder.check_private_key().map_err(bad(&key))?;
        if verify_peer {
            let ca = dir.join("ca-cert.pem");
            builder.set_ca_file(&ca).map_err(bad(&ca))?;
            builder.set_verify(SslVerifyMode::PEER | SslVerifyMode::FAIL_IF_NO_PEER_CERT);
        }
        Ok(TlsConfig {
            mode,
            acceptor: builder.build(),
            description: format!(
                "X.509 from {}{}",
                dir.display(),
                if verify_peer {
                    ", client certificates checked"
                } else {
                    ""
                }
            ),
        })
    }

    /// Runs the TLS handshake on `stream` (the NBD_REP_ACK to STARTTLS already sent) within
    /// `deadline`, and returns the two halves of the TLS connection.
    pub(crate) fn accept<S: Read + Write + AsRawFd>(
        &self,
        stream: S,
        deadline: Instant,
        shutdown: &AtomicBool,
    ) -> Result<(TlsHalf<S>, TlsHalf<S>), ServerError> {
        let fd = stream.as_raw_fd();
        set_nonblocking(fd)?;
        let mut attempt = self.acceptor.accept(stream);
        let ssl = loop {
            let mid: MidHandshakeSslStream<S> = match attempt {
                Ok(ssl) => break ssl,
                Err(HandshakeError::WouldBlock(mid)) => mid,
                Err(HandshakeError::Failure(mid)) => {
                    return Err(ServerError::Tls(mid.error().to_string()))
                }
                Err(HandshakeError::SetupFailure(e)) => {
                    return Err(ServerError::Tls(e.to_string()))
                }
            };
            if shutdown.load(Ordering::Relaxed) {
                return Err(ServerError::Tls("the server is shutting down".into()));
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(ServerError::HandshakeTimeout);
            }
            let events = match mid.error().code() {
                ErrorCode::WANT_WRITE => libc::POLLOUT,
                _ => libc::POLLIN,
            };
            wait_for(fd, events, (deadline - now).min(SHUTDOWN_POLL))?;
            attempt = mid.handshake();
        };
        let session = Arc::new(Session {
            ssl: Mutex::new(ssl),
            fd,
        });
        Ok((
            TlsHalf {
                session: Arc::clone(&session),
            },
            TlsHalf { session },
        ))
    }
}

/// Settings both kinds share: TLS 1.2 or later, no renegotiation, a peer closing without
/// close_notify read as the end of the stream (qemu and nbdcopy may just close).
fn base_builder() -> Result<openssl::ssl::SslAcceptorBuilder, TlsError> {
    let mut builder = SslAcceptor::mozilla_intermediate_v5(SslMethod::tls_server())?;
    builder.set_min_proto_version(Some(SslVersion::TLS1_2))?;
    builder.set_options(SslOptions::NO_RENEGOTIATION | SslOptions::IGNORE_UNEXPECTED_EOF);
    Ok(builder)
}

fn set_nonblocking(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl on a valid descriptor owned by the caller's stream.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above.
    if unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Waits until `fd` is ready for `events` or `timeout` passes; `Ok(false)` on timeout.
fn wait_for(fd: RawFd, events: libc::c_short, timeout: Duration) -> io::Result<bool> {
    let mut pfd = libc::pollfd {
        fd,
        events,
        revents: 0,
    };
    let ms = timeout.as_millis().clamp(1, i32::MAX as u128) as libc::c_int;
    // SAFETY: `pfd` is a valid pollfd for the duration of the call and nfds is 1.
    let ready = unsafe { libc::poll(&mut pfd, 1, ms) };
    match ready {
        r if r < 0 => {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                Ok(false)
            } else {
                Err(e)
            }
        }
        0 => Ok(false),
        _ => Ok(true),
    }
}

/// One TLS session shared by the two halves of a connection.
struct Session<S: Read + Write> {
    ssl: Mutex<SslStream<S>>,
    fd: RawFd,
}

impl<S: Read + Write> Session<S> {
    fn lock(&self) -> MutexGuard<'_, SslStream<S>> {
        self.ssl.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl<S: Read + Write> Drop for Session<S> {
    /// Sends close_notify, best effort (the socket is non-blocking: never waits).
    fn drop(&mut self) {
        let _ = self.lock().shutdown();
    }
}

/// What to do after OpenSSL returned an error for a non-blocking call.
enum Retry {
    Wait(libc::c_short),
    Eof,
    Fail(io::Error),
}

fn retry_after(e: openssl::ssl::Error) -> Retry {
    match e.code() {
        ErrorCode::WANT_READ => Retry::Wait(libc::POLLIN),
        ErrorCode::WANT_WRITE => Retry::Wait(libc::POLLOUT),
        ErrorCode::ZERO_RETURN => Retry::Eof,
        _ => Retry::Fail(
            e.into_io_error()
                .unwrap_or_else(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string())),
        ),
    }
}

/// One half (reading or writing) of a TLS connection. Reads time out after
/// [`SHUTDOWN_POLL`] with `TimedOut`, as a socket's do (the server then looks at its shutdown
/// flag); a write waits at most [`WRITE_TIMEOUT`] for a client that stopped reading.
pub struct TlsHalf<S: Read + Write> {
    session: Arc<Session<S>>,
}

impl<S: Read + Write> Read for TlsHalf<S> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            let result = self.session.lock().ssl_read(buf);
            match result.map_err(retry_after) {
                Ok(n) => return Ok(n),
                Err(Retry::Eof) => return Ok(0),
                Err(Retry::Fail(e)) => return Err(e),
                Err(Retry::Wait(events)) => {
                    if !wait_for(self.session.fd, events, SHUTDOWN_POLL)? {
                        return Err(io::ErrorKind::TimedOut.into());
                    }
                }
            }
        }
    }
}

impl<S: Read + Write> Write for TlsHalf<S> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let deadline = Instant::now() + WRITE_TIMEOUT;
        loop {
            let result = self.session.lock().ssl_write(buf);
            match result.map_err(retry_after) {
                Ok(n) => return Ok(n),
                Err(Retry::Eof) => return Err(io::ErrorKind::BrokenPipe.into()),
                Err(Retry::Fail(e)) => return Err(e),
                Err(Retry::Wait(events)) => {
                    let now = Instant::now();
                    if now >= deadline {
                        return Err(io::ErrorKind::TimedOut.into());
                    }
                    wait_for(self.session.fd, events, deadline - now)?;
                }
            }
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        // ssl_write hands every record to the socket; nothing is buffered above it.
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn psk_files_parse_as_psktool_writes_them() {
        let p = Path::new("keys.psk");
        let keys = parse_psk_file(p, "alice:0123abCD\n\nbob:ff\r\n").unwrap();
        assert_eq!(keys[&b"alice".to_vec()], vec![0x01, 0x23, 0xab, 0xcd]);
        assert_eq!(keys[&b"bob".to_vec()], vec![0xff]);
        // An identity may hold ':' (the key is after the last one).
        let keys = parse_psk_file(p, "a:b:00").unwrap();
        assert_eq!(keys[&b"a:b".to_vec()], vec![0]);
    }

    #[test]
    fn bad_psk_files_are_typed_errors_naming_the_line() {
        let p = Path::new("keys.psk");
        for (text, line, says) in [
            ("alice", 1, "no ':'"),
            ("alice:abc", 1, "odd number"),
            ("alice:zz", 1, "not hex"),
            ("alice:", 1, "the key is 0 bytes"),
            (":00", 1, "empty identity"),
            ("a:00\na:01", 2, "appears twice"),
        ] {
            match parse_psk_file(p, text) {
                Err(e @ TlsError::PskLine { line: l, .. }) => {
                    assert_eq!(l, line, "{text:?}: {e}");
                    assert!(e.to_string().contains(says), "{text:?}: {e}");
                }
                other => panic!("{text:?}: {other:?}"),
            }
        }
        let long = format!("a:{}", "00".repeat(PSK_KEY_MAX_BYTES + 1));
        assert!(parse_psk_file(p, &long).is_err());
        assert!(matches!(
            parse_psk_file(p, "\n\n"),
            Err(TlsError::PskFile { .. })
        ));
    }
}
