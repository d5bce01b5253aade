//! A minimal NBD client for tests: speaks just enough of the protocol to drive the server
//! byte by byte, including things real clients never send.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use nbd::protocol::*;

pub fn be_u16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}
pub fn be_u32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes(b[at..at + 4].try_into().unwrap())
}
pub fn be_u64(b: &[u8], at: usize) -> u64 {
    u64::from_be_bytes(b[at..at + 8].try_into().unwrap())
}

/// Client bytes for the GO option naming `name` and requesting `infos`.
pub fn go_option(option: u32, name: &[u8], infos: &[u16]) -> Vec<u8> {
    let mut data = (name.len() as u32).to_be_bytes().to_vec();
    data.extend_from_slice(name);
    data.extend_from_slice(&(infos.len() as u16).to_be_bytes());
    for i in infos {
        data.extend_from_slice(&i.to_be_bytes());
    }
    let mut b = encode_option_header(option, data.len() as u32).to_vec();
    b.extend_from_slice(&data);
    b
}

pub fn request(command: u16, flags: u16, handle: u64, offset: u64, length: u32) -> [u8; 28] {
    encode_request(&Request {
        flags,
        command: Command::from_wire(command),
        handle,
        offset,
        length,
    })
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OptionReply {
    pub option: u32,
    pub reply_type: u32,
    pub data: Vec<u8>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Negotiated {
    pub size: u64,
    pub flags: u16,
    pub block_sizes: Option<(u32, u32, u32)>,
}

pub struct Client<S: Read + Write = UnixStream> {
    pub stream: S,
}

impl Client<UnixStream> {
    /// Wraps a socket with a 10 s read timeout so a silent server fails the test instead of
    /// hanging it.
    pub fn new(stream: UnixStream) -> Client {
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        Client { stream }
    }

    /// Greets and enters transmission with GO on the default export.
    pub fn connect(stream: UnixStream) -> (Client, Negotiated) {
        Client::connect_on(Client::new(stream))
    }
}

impl<S: Read + Write> Client<S> {
    /// Greets and enters transmission with GO on the default export.
    pub fn connect_on(mut c: Client<S>) -> (Client<S>, Negotiated) {
        c.greet(NBD_FLAG_C_FIXED_NEWSTYLE | NBD_FLAG_C_NO_ZEROES);
        let n = c.go(NBD_OPT_GO, b"").expect("GO succeeds");
        (c, n)
    }

    pub fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).unwrap();
        self.stream.flush().unwrap();
    }

    pub fn recv(&mut self, n: usize) -> Vec<u8> {
        let mut b = vec![0u8; n];
        self.stream.read_exact(&mut b).unwrap();
        b
    }

    /// Reads the greeting and sends the client flags.
    pub fn greet(&mut self, client_flags: u32) {
        let g = self.recv(18);
        assert_eq!(be_u64(&g, 0), NBD_MAGIC);
        assert_eq!(be_u64(&g, 8), IHAVEOPT);
        assert_eq!(be_u16(&g, 16), NBD_FLAG_FIXED_NEWSTYLE | NBD_FLAG_NO_ZEROES);
        self.send(&client_flags.to_be_bytes());
    }

    pub fn option_reply(&mut self) -> OptionReply {
        let h = self.recv(20);
        assert_eq!(be_u64(&h, 0), OPTION_REPLY_MAGIC);
        let len = be_u32(&h, 16) as usize;
        OptionReply {
            option: be_u32(&h, 8),
            reply_type: be_u32(&h, 12),
            data: self.recv(len),
        }
    }

    /// Sends GO or INFO and collects INFO replies up to ACK (or returns the error reply).
    pub fn go(&mut self, option: u32, name: &[u8]) -> Result<Negotiated, OptionReply> {
        self.send(&go_option(option, name, &[NBD_INFO_BLOCK_SIZE]));
        let mut n = Negotiated {
            size: 0,
            flags: 0,
            block_sizes: None,
        };
        loop {
            let r = self.option_reply();
            assert_eq!(r.option, option);
            match r.reply_type {
                NBD_REP_ACK => return Ok(n),
                NBD_REP_INFO => match be_u16(&r.data, 0) {
                    NBD_INFO_EXPORT => {
                        n.size = be_u64(&r.data, 2);
                        n.flags = be_u16(&r.data, 10);
                    }
                    NBD_INFO_BLOCK_SIZE => {
                        n.block_sizes =
                            Some((be_u32(&r.data, 2), be_u32(&r.data, 6), be_u32(&r.data, 10)))
                    }
                    _ => {}
                },
                _ => return Err(r),
            }
        }
    }

    /// Reads one simple reply: (error, handle).
    pub fn reply(&mut self) -> (u32, u64) {
        let r = self.recv(16);
        assert_eq!(be_u32(&r, 0), SIMPLE_REPLY_MAGIC);
        (be_u32(&r, 4), be_u64(&r, 8))
    }

    pub fn write(&mut self, handle: u64, offset: u64, data: &[u8], flags: u16) -> u32 {
        self.send(&request(
            NBD_CMD_WRITE,
            flags,
            handle,
            offset,
            data.len() as u32,
        ));
        self.send(data);
        let (err, h) = self.reply();
        assert_eq!(h, handle);
        err
    }

    pub fn read(&mut self, handle: u64, offset: u64, len: u32) -> Result<Vec<u8>, u32> {
        self.send(&request(NBD_CMD_READ, 0, handle, offset, len));
        let (err, h) = self.reply();
        assert_eq!(h, handle);
        if err != 0 {
            return Err(err);
        }
        Ok(self.recv(len as usize))
    }

    /// Sends a request without payload and returns the reply's error.
    pub fn simple(&mut self, command: u16, flags: u16, handle: u64, offset: u64, len: u32) -> u32 {
        self.send(&request(command, flags, handle, offset, len));
        let (err, h) = self.reply();
        assert_eq!(h, handle);
        err
    }

    pub fn disconnect(&mut self) {
        self.send(&request(NBD_CMD_DISC, 0, 0, 0, 0));
    }

    /// True when the server has closed the connection (EOF within the timeout).
    pub fn closed(&mut self) -> bool {
        let mut b = [0u8; 1];
        matches!(self.stream.read(&mut b), Ok(0) | Err(_))
    }
}

/// A child process's stdout and stdin as one stream.
pub struct ChildPipes {
    pub stdout: std::process::ChildStdout,
    pub stdin: std::process::ChildStdin,
}

impl Read for ChildPipes {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.stdout.read(buf)
    }
}

impl Write for ChildPipes {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.stdin.write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.stdin.flush()
    }
}
