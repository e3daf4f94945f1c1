//! The client connection as gdbstub writes to it: replies collected and
//! sent in one write each (gdbstub's own `TcpStream` connection writes
//! every byte separately).

use std::io::Write;
use std::net::TcpStream;

use gdbstub::conn::Connection;

/// A connection that buffers replies and sends each in one write on flush
/// (gdbstub's own TcpStream connection writes every byte separately).
pub struct BufferedConnection {
    stream: TcpStream,
    out: Vec<u8>,
}

impl BufferedConnection {
    /// A connection writing to `stream`.
    pub fn new(stream: TcpStream) -> Self {
        BufferedConnection { stream, out: Vec::new() }
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
        tracing::debug!(reply = %String::from_utf8_lossy(&self.out), "<-");
        Write::write_all(&mut self.stream, &self.out)?;
        self.out.clear();
        Write::flush(&mut self.stream)
    }
}
