//! Remote Serial Protocol framing: the client's byte stream split into
//! packets (`$body#cc`), acknowledgements, interrupts and stray bytes, and
//! replies escaped and framed with their checksum.
//!
//! Every byte the client sends goes through [`Framer::feed`]; gdbstub is
//! handed only complete packets whose checksum matched. What the protocol
//! says of the rest: a `+` needs nothing; a `-` asks for the last packet
//! again; `0x03` is an interrupt; any other byte between packets is
//! skipped (as gdbserver skips it); a packet longer than the advertised
//! `PacketSize` is refused without being kept; a `$` inside a packet (data
//! escapes it, so it can only begin one) drops the unfinished packet and
//! starts the next.

/// Something the client sent, as far as framing can tell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Framed {
    /// A complete packet whose checksum matched: its body (between `$` and
    /// `#`, still escaped as sent).
    Packet(Vec<u8>),
    /// A complete packet whose checksum did not match (with acks on, it is
    /// answered `-` and the client sends it again).
    BadChecksum,
    /// A packet longer than the limit: its bytes were dropped as they came.
    TooLong,
    /// `-`: the client asks for the last packet again.
    Nak,
    /// `0x03`: the client asks the running program to stop.
    Interrupt,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Between packets.
    Between,
    /// Inside `$…`, before `#`.
    Body,
    /// After `#`: this many checksum digits still to come.
    Checksum(u8),
}

/// Splits the client's byte stream; never keeps more than `limit` bytes of
/// a packet.
#[derive(Debug)]
pub(crate) struct Framer {
    state: State,
    body: Vec<u8>,
    limit: usize,
    /// The packet grew past the limit: its bytes are being dropped.
    too_long: bool,
    /// The sum of the body's bytes, as sent.
    sum: u8,
    /// The checksum digits as sent.
    stated: [u8; 2],
}

impl Framer {
    /// A framer for packets of at most `limit` bytes between `$` and `#`.
    pub(crate) fn new(limit: usize) -> Self {
        Framer { state: State::Between, body: Vec::new(), limit, too_long: false, sum: 0, stated: [0; 2] }
    }

    /// Takes the next byte; returns what it completes, if anything.
    pub(crate) fn feed(&mut self, byte: u8) -> Option<Framed> {
        match self.state {
            State::Between => match byte {
                b'$' => {
                    self.state = State::Body;
                    self.body.clear();
                    self.too_long = false;
                    self.sum = 0;
                    None
                }
                b'-' => Some(Framed::Nak),
                0x03 => Some(Framed::Interrupt),
                // `+` (an acknowledgement) and stray bytes.
                _ => None,
            },
            // A raw `$` only ever begins a packet (packet data escapes it):
            // the unfinished one is dropped and a new one starts, as GDB's
            // own reader does.
            State::Body | State::Checksum(_) if byte == b'$' => {
                tracing::warn!(bytes = self.body.len(), "a packet left unfinished by a new `$`: dropped");
                self.state = State::Between;
                self.feed(byte)
            }
            State::Body if byte == b'#' => {
                self.state = State::Checksum(2);
                None
            }
            State::Body => {
                self.sum = self.sum.wrapping_add(byte);
                if self.body.len() < self.limit {
                    self.body.push(byte);
                } else {
                    self.too_long = true;
                }
                None
            }
            State::Checksum(left) => {
                self.stated[2 - left as usize] = byte;
                if left > 1 {
                    self.state = State::Checksum(left - 1);
                    return None;
                }
                self.state = State::Between;
                let stated = std::str::from_utf8(&self.stated).ok().and_then(|h| u8::from_str_radix(h, 16).ok());
                Some(if stated != Some(self.sum) {
                    Framed::BadChecksum
                } else if self.too_long {
                    self.body = Vec::new();
                    Framed::TooLong
                } else {
                    Framed::Packet(std::mem::take(&mut self.body))
                })
            }
        }
    }
}

/// `payload` escaped and framed: `$…#cc`.
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
    frame(&body)
}

/// An already escaped `body` framed: `$body#cc`.
pub(crate) fn frame(body: &[u8]) -> Vec<u8> {
    let checksum = body.iter().fold(0u8, |sum, b| sum.wrapping_add(*b));
    let mut packet = Vec::with_capacity(body.len() + 4);
    packet.push(b'$');
    packet.extend_from_slice(body);
    packet.extend_from_slice(format!("#{checksum:02x}").as_bytes());
    packet
}

/// The packet body with RSP escapes (`}` x → x ^ 0x20) undone; `None` when
/// it ends inside an escape.
pub(crate) fn unescape(body: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(body.len());
    let mut bytes = body.iter();
    while let Some(&b) = bytes.next() {
        out.push(if b == b'}' { bytes.next()? ^ 0x20 } else { b });
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed_all(framer: &mut Framer, bytes: &[u8]) -> Vec<Framed> {
        bytes.iter().filter_map(|&b| framer.feed(b)).collect()
    }

    #[test]
    fn packets_acks_naks_interrupts_and_stray_bytes() {
        let mut framer = Framer::new(4096);
        let out = feed_all(&mut framer, b"+\n x\0$?#3f-\x03$?#00$m0,4#fd");
        assert_eq!(out, [Framed::Packet(b"?".to_vec()), Framed::Nak, Framed::Interrupt, Framed::BadChecksum, Framed::Packet(b"m0,4".to_vec())]);
    }

    #[test]
    fn a_packet_over_the_limit_is_dropped_as_it_comes() {
        let mut framer = Framer::new(8);
        let mut bytes = b"$".to_vec();
        bytes.extend(std::iter::repeat(b'a').take(100_000));
        let sum = (100_000u32 * b'a' as u32 % 256) as u8;
        bytes.extend(format!("#{sum:02x}").as_bytes());
        assert_eq!(feed_all(&mut framer, &bytes), [Framed::TooLong]);
        assert!(framer.body.capacity() <= 64, "kept {} bytes", framer.body.capacity());
        assert_eq!(feed_all(&mut framer, &frame(b"g")), [Framed::Packet(b"g".to_vec())]);
    }

    #[test]
    fn a_dollar_inside_an_unfinished_packet_starts_the_next() {
        let mut framer = Framer::new(8);
        let mut bytes = b"$".to_vec();
        bytes.extend(std::iter::repeat(b'a').take(100_000));
        bytes.extend(b"$?#3f$m0,4#$g#67");
        assert_eq!(feed_all(&mut framer, &bytes), [Framed::Packet(b"?".to_vec()), Framed::Packet(b"g".to_vec())]);
        assert!(framer.body.capacity() <= 64, "kept {} bytes", framer.body.capacity());
    }

    #[test]
    fn escapes_round_trip() {
        let payload = b"a#b$c}d*e";
        let framed = escape_and_frame(payload);
        let mut framer = Framer::new(64);
        let [Framed::Packet(body)] = &feed_all(&mut framer, &framed)[..] else { panic!("{framed:?}") };
        assert_eq!(unescape(body).unwrap(), payload);
        assert_eq!(unescape(b"ab}"), None);
    }
}
