//! Remote Serial Protocol framing: the client's byte stream split into
//! packets (`$body#cc`) and everything else, and replies escaped and framed
//! with their checksum.

/// Splits the client's byte stream into packets, so some can be answered
/// here instead of by gdbstub.
#[derive(Default)]
pub(crate) struct Framer {
    packet: Option<Vec<u8>>,
    checksum_left: usize,
}

pub(crate) enum Framed {
    /// Bytes for gdbstub, unchanged.
    Forward(Vec<u8>),
    /// A complete packet body (between `$` and `#`), still escaped.
    Packet(Vec<u8>, Vec<u8>),
}

impl Framer {
    pub(crate) fn feed(&mut self, byte: u8) -> Option<Framed> {
        match &mut self.packet {
            None if byte == b'$' => {
                self.packet = Some(vec![byte]);
                None
            }
            None => Some(Framed::Forward(vec![byte])),
            Some(raw) if self.checksum_left > 0 => {
                raw.push(byte);
                self.checksum_left -= 1;
                if self.checksum_left == 0 {
                    let raw = self.packet.take().expect("in a packet");
                    let end = raw.iter().rposition(|&b| b == b'#').expect("has #");
                    let body = raw[1..end].to_vec();
                    return Some(Framed::Packet(body, raw));
                }
                None
            }
            Some(raw) => {
                raw.push(byte);
                if byte == b'#' {
                    self.checksum_left = 2;
                }
                None
            }
        }
    }
}

pub(crate) fn escape_and_frame(payload: &[u8]) -> Vec<u8> {
    let mut body = Vec::with_capacity(payload.len() + 4);
    for &b in payload {
        if matches!(b, b'#' | b'$' | b'}' | b'*') {
            body.push(b'}');
            body.push(b ^ 0x20);
        } else {
            body.push(b);
        }
    }
    let checksum = body.iter().fold(0u8, |sum, b| sum.wrapping_add(*b));
    let mut packet = vec![b'$'];
    packet.extend_from_slice(&body);
    packet.extend_from_slice(format!("#{checksum:02x}").as_bytes());
    packet
}

