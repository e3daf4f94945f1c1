//! The client connection as gdbstub writes to it: replies collected and
//! sent in one write each (gdbstub's own `TcpStream` connection writes
//! every byte separately).

use std::cell::Cell;
use std::io::Write;
use std::net::TcpStream;
use std::rc::Rc;

use gdbstub::conn::Connection;

/// A connection that buffers replies and sends each in one write on flush
/// (gdbstub's own TcpStream connection writes every byte separately).
#[derive(Debug)]
pub struct BufferedConnection {
    stream: TcpStream,
    out: Vec<u8>,
    /// The last packet sent (`$…#cc`), for a client's `-`.
    last_packet: Vec<u8>,
    /// Set when a write failed: the client is gone.
    broken: Rc<Cell<bool>>,
    /// Bytes to append to the next reply's body.
    extension: Option<Vec<u8>>,
}

impl BufferedConnection {
    /// A connection writing to `stream`; `broken` is set when a write fails.
    pub fn new(stream: TcpStream, broken: Rc<Cell<bool>>) -> Self {
        BufferedConnection { stream, out: Vec::new(), last_packet: Vec::new(), broken, extension: None }
    }

    /// Appends `extra` (already escaped) to the body of the next reply
    /// sent, with its checksum made anew: features added to gdbstub's
    /// `qSupported` reply.
    pub fn extend_next_reply(&mut self, extra: &[u8]) {
        self.extension = Some(extra.to_vec());
    }

    fn apply_extension(&mut self) {
        let Some(start) = self.out.iter().rposition(|&b| b == b'$') else { return };
        let Some(hash) = self.out[start..].iter().rposition(|&b| b == b'#').map(|i| start + i) else { return };
        let Some(extra) = self.extension.take() else { return };
        let mut body = self.out[start + 1..hash].to_vec();
        body.extend_from_slice(&extra);
        self.out.truncate(start);
        self.out.extend_from_slice(&super::framing::frame(&body));
    }

    /// Sends the last packet again (the client's `-`).
    pub fn resend_last_packet(&mut self) -> std::io::Result<()> {
        if self.last_packet.is_empty() {
            return Ok(());
        }
        self.out.extend_from_slice(&self.last_packet);
        self.flush()
    }
}

impl Connection for BufferedConnection {
    type Error = std::io::Error;

    fn write(&mut self, byte: u8) -> Result<(), Self::Error> {
        self.out.push(byte);
        Ok(())
    }

    fn write_all(&mut self, buf: &[u8]) -> Result<(), Self::Error> {
        self.out.extend_from_slice(buf);
        Ok(())
    }

    fn flush(&mut self) -> Result<(), Self::Error> {
        if self.out.is_empty() {
            return Ok(());
        }
        if self.extension.is_some() {
            self.apply_extension();
        }
        tracing::debug!(reply = %String::from_utf8_lossy(&self.out), "<-");
        // Replies are escaped: a `$` starts a packet.
        if let Some(start) = self.out.iter().rposition(|&b| b == b'$') {
            self.last_packet.clear();
            self.last_packet.extend_from_slice(&self.out[start..]);
        }
        let sent = Write::write_all(&mut self.stream, &self.out).and_then(|()| Write::flush(&mut self.stream));
        self.out.clear();
        if sent.is_err() {
            self.broken.set(true);
        }
        sent
    }
}
