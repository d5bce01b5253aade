//! NBD on worn media (issue #69, docs/reliability.md): a page the ECC cannot correct reaches
//! the client as NBD's EIO, never as bytes. Every design is served (in process, over a socket
//! pair) on a device with the media model on; a client writes, every programmed page is then
//! lost to the media, and the client reads back.

mod common;

use std::os::unix::net::UnixStream;

use common::*;
use flash::{DeviceConfig, Fault, PageState, Ppn};
use ftl::DesignOptions;
use nbd::ftl_backend::FtlBackend;
use nbd::protocol::{Errno, NBD_CMD_FLAG_FUA};
use nbd::{Server, ServerConfig};

/// The small preset with 128 blocks per chip and the MLC error model on (bit errors only).
fn media_config() -> DeviceConfig {
    let mut c = DeviceConfig::small_with_bit_errors_only();
    c.geometry.blocks_per_chip = 128;
    c
}

fn server(design: &str) -> Server<FtlBackend> {
    let spec = lab::registry::find(design).expect("a design of the registry");
    let dev = lab::device::fresh(&spec, &media_config(), &DesignOptions::default(), false)
        .expect("format");
    Server::new(FtlBackend::new(dev, 0), ServerConfig::default())
}

/// Every programmed page of the served device fails ECC from now on.
fn lose_every_page(server: &Server<FtlBackend>) {
    server.with_backend(|b| {
        let flash = b.device_mut().flash_mut();
        for p in (0..flash.geometry().pages()).map(Ppn) {
            if flash.peek_state(p) == PageState::Programmed {
                flash.inject(Fault::Read(p));
            }
        }
    });
}

/// A client writes 64 KiB with FUA and reads it back; the read's result after `damage`.
fn read_back_after(design: &str, damage: impl FnOnce(&Server<FtlBackend>)) -> Result<bool, u32> {
    let server = server(design);
    let data: Vec<u8> = (0..65536u32).map(|i| (i * 31 + 7) as u8).collect();
    let (ours, theirs) = UnixStream::pair().unwrap();
    std::thread::scope(|s| {
        let srv = &server;
        let handle = s.spawn(move || {
            let reader = theirs.try_clone().unwrap();
            srv.serve_connection(reader, theirs)
        });
        let (mut c, _) = Client::connect(ours);
        assert_eq!(c.write(1, 4096, &data, NBD_CMD_FLAG_FUA), 0, "{design}");
        damage(srv);
        let read = c.read(2, 4096, data.len() as u32);
        c.disconnect();
        handle.join().unwrap().unwrap();
        read.map(|back| back == data)
    })
}

#[test]
fn a_lost_page_is_eio_to_the_client_never_bytes() {
    for spec in lab::registry::all() {
        let design = spec.name;
        match read_back_after(design, lose_every_page) {
            Err(e) => assert_eq!(e, Errno::Io.code(), "{design}: error {e}, not EIO"),
            // The write-cached FTL and OPTR (its write cache, OPTR §6.1) may serve their own
            // DRAM copy of the pages: then exactly the written bytes.
            Ok(true) if ["wcache", "optr"].contains(&design) => {}
            Ok(same) => panic!("{design}: the read returned bytes (the written ones: {same})"),
        }
    }
}

/// The check above can fail: without the loss every design returns the written bytes.
#[test]
fn without_the_loss_the_bytes_read_back() {
    for design in ["mobius", "dftl", "optr"] {
        assert_eq!(read_back_after(design, |_| {}), Ok(true), "{design}");
    }
}
