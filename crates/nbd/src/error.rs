//! Why a connection or a server loop ended abnormally.

use crate::protocol::ProtocolError;
use std::io;
use thiserror::Error;

/// Why a connection or a server loop ended abnormally.
#[derive(Debug, Error)]
pub enum ServerError {
    #[error("NBD protocol error: {0}")]
    Protocol(#[from] ProtocolError),
    #[error("I/O error on the connection: {0}")]
    Io(#[from] io::Error),
    #[error("backend flush at shutdown failed: {0}")]
    FinalFlush(crate::BackendError),
    /// A backend call panicked: the device's state is unknown, so the server stopped serving
    /// every connection and did not flush; what is on flash is what a power cut would leave.
    #[error("a backend call panicked; the server stopped without flushing (the device is as a power cut left it)")]
    BackendPanicked,
    /// The client did not finish the handshake within [`ServerConfig::handshake_timeout`](crate::ServerConfig::handshake_timeout).
    #[error("the client did not finish the handshake in time (--handshake-timeout)")]
    HandshakeTimeout,
    /// The TLS handshake after NBD_OPT_STARTTLS failed (an unknown PSK identity, a wrong key,
    /// a certificate the server does not accept, ...).
    #[error("TLS handshake failed: {0}")]
    Tls(String),
}
