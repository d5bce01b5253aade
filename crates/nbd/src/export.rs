//! The SSD's NBD server as the lab's kernel stack attaches it (`lab::kernel_stack`): the one
//! host layer behind `mobius serve`'s server, served on a Unix socket from a thread.

use crate::ftl_backend::FtlBackend;
use crate::server::{Server, ServerConfig};
use crate::transport::Listen;
use crate::NbdBackend;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// The NBD server `mobius serve` runs, over one design.
pub type SsdServer = Server<FtlBackend>;

/// A server of `dev` as `mobius serve` exports it. With `pacing`, each reply is held until
/// wall-clock time reaches the request's simulated completion (`mobius serve --pace`), so the
/// kernel and the application wait for the device as they would for a real one.
pub fn ssd_server(dev: Box<dyn ftl::BlockDevice>, pacing: bool) -> Arc<SsdServer> {
    let config = ServerConfig {
        pacing,
        ..ServerConfig::default()
    };
    Arc::new(Server::new(FtlBackend::new(dev, 0), config))
}

impl<B: NbdBackend + 'static> lab::kernel_stack::NbdExport for Server<B> {
    fn serve_unix(&self, socket: &Path) {
        let _ = self.serve(&Listen::Unix(socket.to_path_buf()));
    }

    fn stop(&self) {
        self.shutdown_flag().store(true, Ordering::Relaxed);
    }
}
