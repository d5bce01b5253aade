//! The socket timeouts the server, its transports and TLS share.

use std::time::Duration;

/// How long a read may block before the shutdown flag is looked at again (sockets get this as
/// their read timeout; stdin is polled with it).
pub const SHUTDOWN_POLL: Duration = Duration::from_millis(100);
/// How long a reply write may block on a client that stopped reading before the connection
/// is dropped.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(30);
