//! The packet decoder: `&[u8]` in, `(offset, Packet)` out.

use super::sync;
use super::{BlockItemSize, Ip, IpCompression, Packet, Tnt, PSB_BYTES, PSB_LEN};

/// What went wrong decoding the packet at [`PacketError::offset`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum PacketErrorKind {
    /// The packet extends past the end of the buffer (libipt: `pte_eos`).
    #[error("truncated packet ({needed} bytes needed, {available} left)")]
    Truncated {
        /// Bytes the packet needs.
        needed: usize,
        /// Bytes left in the buffer from the packet's start.
        available: usize,
    },
    /// The opcode is not an Intel PT packet (libipt: `pte_bad_opc`).
    #[error("unknown opcode {0:02x}")]
    UnknownOpcode(u8),
    /// An extended (`02 xx`) opcode that is not an Intel PT packet.
    #[error("unknown extended opcode 02 {0:02x}")]
    UnknownExtendedOpcode(u8),
    /// The opcode is known but the packet is malformed: reserved or
    /// inconsistent payload (libipt: `pte_bad_packet`).
    #[error("malformed {packet} packet: {reason}")]
    Malformed {
        /// The packet's name.
        packet: &'static str,
        /// What is wrong with it.
        reason: &'static str,
    },
}

impl PacketErrorKind {
    /// The closest libipt error code name (`eos`, `bad_opc`, `bad_packet`),
    /// for comparisons with libipt-based tools.
    pub fn libipt_name(&self) -> &'static str {
        match self {
            PacketErrorKind::Truncated { .. } => "eos",
            PacketErrorKind::UnknownOpcode(_) | PacketErrorKind::UnknownExtendedOpcode(_) => "bad_opc",
            PacketErrorKind::Malformed { .. } => "bad_packet",
        }
    }
}

/// A packet that could not be decoded, with the byte offset where it starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
#[error("offset {offset:#x}: {kind}")]
pub struct PacketError {
    /// Offset of the first byte of the bad packet in the decoder's buffer.
    pub offset: usize,
    /// What is wrong.
    pub kind: PacketErrorKind,
}

/// A zero-copy Intel PT packet decoder over a byte slice.
///
/// It tracks the two pieces of state the packet layer needs: the **last IP**
/// (for IP reconstruction; reset to 0 at every PSB) and the **PEBS block
/// context** (inside BBP … BEP, bytes of the form `xxxxx100` are BIP packets,
/// not short TNTs).
///
/// Two ways to use it:
/// * [`PacketDecoder::next_packet`] — one packet at a time; on an error the
///   position is unchanged, and the caller decides how to resynchronise
///   ([`sync_forward`](Self::sync_forward), [`sync_backward`](Self::sync_backward),
///   [`sync_set`](Self::sync_set)), as with libipt's `pt_pkt_next`.
/// * as an [`Iterator`] of `Result<(offset, Packet), PacketError>` — an error is
///   yielded once and decoding resumes at the next PSB, so nothing after a
///   corrupt region is lost.
///
/// The decoder starts at offset 0 without synchronising; call
/// [`sync_forward`](Self::sync_forward) first to start at the first PSB.
#[derive(Debug, Clone)]
pub struct PacketDecoder<'a> {
    data: &'a [u8],
    pos: usize,
    sync: Option<usize>,
    last_ip: u64,
    block: Option<BlockItemSize>,
    exhausted: bool,
}

/// Result of reading one packet: the packet and its size in bytes.
type Read = Result<(Packet, usize), PacketErrorKind>;

#[inline(always)]
fn le(bytes: &[u8]) -> u64 {
    let mut value = [0u8; 8];
    value[..bytes.len()].copy_from_slice(bytes);
    u64::from_le_bytes(value)
}

#[inline(always)]
fn malformed(packet: &'static str, reason: &'static str) -> PacketErrorKind {
    PacketErrorKind::Malformed { packet, reason }
}

/// Splits a TNT payload (stop bit included) into outcome bits.
#[inline(always)]
fn tnt_payload(payload: u64) -> Option<Tnt> {
    if payload <= 1 {
        return None;
    }
    let stop = 63 - payload.leading_zeros();
    Some(Tnt { bits: payload & !(1u64 << stop), len: stop as u8 })
}

impl<'a> PacketDecoder<'a> {
    /// A decoder positioned at offset 0 of `data`.
    pub fn new(data: &'a [u8]) -> Self {
        PacketDecoder { data, pos: 0, sync: None, last_ip: 0, block: None, exhausted: false }
    }

    /// The buffer being decoded.
    pub fn data(&self) -> &'a [u8] {
        self.data
    }

    /// Offset of the next packet.
    pub fn offset(&self) -> usize {
        self.pos
    }

    /// Offset of the PSB the decoder last synchronised to, if any.
    pub fn sync_offset(&self) -> Option<usize> {
        self.sync
    }

    /// The last IP used for IP reconstruction.
    pub fn last_ip(&self) -> u64 {
        self.last_ip
    }

    /// True inside a BBP … BEP block.
    pub fn in_block(&self) -> bool {
        self.block.is_some()
    }

    fn set_sync(&mut self, offset: usize) {
        self.sync = Some(offset);
        self.pos = offset;
        self.last_ip = 0;
        self.block = None;
        self.exhausted = false;
    }

    /// Moves to the next PSB after the current position (a PSB partially
    /// consumed by the packet before the current position counts), with
    /// libipt's `pt_pkt_sync_forward` semantics. Returns its offset, or `None`
    /// (position unchanged) when there is none.
    pub fn sync_forward(&mut self) -> Option<usize> {
        let mut from = self.pos;
        if self.sync == Some(from) {
            from += PSB_LEN;
        }
        let from = from - from.min(PSB_LEN - 1);
        let found = sync::find_psb_forward(self.data, from)?;
        self.set_sync(found);
        Some(found)
    }

    /// Moves to the last PSB before the current position (libipt's
    /// `pt_pkt_sync_backward`). Returns its offset, or `None` when there is none.
    pub fn sync_backward(&mut self) -> Option<usize> {
        let found = sync::find_psb_backward(self.data, self.pos)?;
        self.set_sync(found);
        Some(found)
    }

    /// Moves to `offset` without taking it for a sync point (a following
    /// [`Self::sync_forward`] still finds a PSB that starts up to 15 bytes
    /// before it, as after any packet).
    pub fn seek(&mut self, offset: usize) {
        self.pos = offset.min(self.data.len());
        self.exhausted = false;
    }

    /// Moves to an arbitrary offset (which should hold a PSB for the last IP to
    /// be right). Returns `false` when `offset` is past the end.
    pub fn sync_set(&mut self, offset: usize) -> bool {
        if offset > self.data.len() {
            return false;
        }
        self.set_sync(offset);
        true
    }

    /// Decodes the packet at the current position and advances past it.
    ///
    /// `Ok(None)` at the end of the buffer. On error the position is unchanged.
    #[inline]
    pub fn next_packet(&mut self) -> Result<Option<(usize, Packet)>, PacketError> {
        let offset = self.pos;
        if offset >= self.data.len() {
            return Ok(None);
        }
        match self.read(offset) {
            Ok((packet, size)) => {
                self.pos = offset + size;
                self.track(&packet);
                Ok(Some((offset, packet)))
            }
            Err(kind) => Err(PacketError { offset, kind }),
        }
    }

    /// Updates last-IP and block context after a packet.
    #[inline(always)]
    fn track(&mut self, packet: &Packet) {
        // An overflow resets IP compression, as a PSB does (libipt resets
        // its query decoder at OVF; the next IP is sent in full).
        if let Packet::Ovf = packet {
            self.last_ip = 0;
        }
        match packet {
            Packet::Bbp { size, .. } => self.block = Some(*size),
            Packet::Psb => {
                self.last_ip = 0;
                self.block = None;
            }
            other if other.keeps_block_context() => {}
            _ => self.block = None,
        }
    }

    #[inline(always)]
    fn need(&self, offset: usize, size: usize) -> Result<&'a [u8], PacketErrorKind> {
        self.data.get(offset..offset + size).ok_or(PacketErrorKind::Truncated {
            needed: size,
            available: self.data.len() - offset,
        })
    }

    #[inline(always)]
    fn read(&mut self, offset: usize) -> Read {
        let byte = self.data[offset];
        match byte {
            0x00 => Ok((Packet::Pad, 1)),
            0x02 => self.read_extended(offset),
            0x19 => {
                let b = self.need(offset, 8)?;
                Ok((Packet::Tsc(le(&b[1..8])), 8))
            }
            0x59 => {
                let b = self.need(offset, 2)?;
                Ok((Packet::Mtc(b[1]), 2))
            }
            0x99 => {
                let b = self.need(offset, 2)?;
                let bits = b[1];
                let packet = match bits >> 5 {
                    0 => Packet::ModeExec {
                        csl: bits & 1 != 0,
                        csd: bits & 2 != 0,
                        iflag: bits & 4 != 0,
                    },
                    1 => Packet::ModeTsx { intx: bits & 1 != 0, abort: bits & 2 != 0 },
                    _ => return Err(malformed("mode", "unknown leaf")),
                };
                Ok((packet, 2))
            }
            0xd9 => {
                let b = self.need(offset, 3)?;
                let (flags, trbv) = (b[1], b[2]);
                let icnt = if flags & 0x40 != 0 {
                    let b = self.need(offset, 5)?;
                    Some(le(&b[3..5]) as u16)
                } else {
                    None
                };
                let size = if icnt.is_some() { 5 } else { 3 };
                Ok((Packet::Trig { trbv, ip: flags & 0x80 != 0, mult: flags & 0x20 != 0, icnt }, size))
            }
            _ if byte & 1 == 0 => {
                if let Some(size) = self.block {
                    if byte & 0x7 == 0x4 {
                        let n = size.payload_len();
                        let b = self.need(offset, 1 + n)?;
                        let packet = Packet::Bip { id: byte >> 3, payload: le(&b[1..1 + n]), size: n as u8 };
                        return Ok((packet, 1 + n));
                    }
                }
                // An even byte other than 00 and 02 always has a stop bit above bit 1.
                let tnt = tnt_payload((byte >> 1) as u64).ok_or(malformed("tnt.8", "no payload"))?;
                Ok((Packet::TntShort(tnt), 1))
            }
            _ if byte & 0x3 == 0x3 => self.read_cyc(offset),
            _ => {
                let make: fn(Ip) -> Packet = match byte & 0x1f {
                    0x0d => Packet::Tip,
                    0x1d => Packet::Fup,
                    0x11 => Packet::TipPge,
                    0x01 => Packet::TipPgd,
                    _ => return Err(PacketErrorKind::UnknownOpcode(byte)),
                };
                let compression = IpCompression::from_bits(byte >> 5)
                    .ok_or(malformed("ip", "reserved IP compression"))?;
                let n = compression.payload_len();
                let b = self.need(offset, 1 + n)?;
                let raw = le(&b[1..1 + n]);
                let ip = compression.reconstruct(raw, self.last_ip);
                if let Some(ip) = ip {
                    self.last_ip = ip;
                }
                Ok((make(Ip { compression, raw, ip }), 1 + n))
            }
        }
    }

    #[inline(always)]
    fn read_cyc(&self, offset: usize) -> Read {
        let data = self.data;
        let first = data[offset];
        let mut value = (first >> 3) as u64;
        let mut more = first & 0x4 != 0;
        let mut shift = 5u32;
        let mut pos = offset + 1;
        while more {
            let Some(&byte) = data.get(pos) else {
                return Err(PacketErrorKind::Truncated { needed: pos - offset + 1, available: data.len() - offset });
            };
            pos += 1;
            more = byte & 1 != 0;
            let bits = (byte >> 1) as u64;
            if shift + 7 > 64 {
                return Err(malformed("cyc", "payload exceeds 64 bits"));
            }
            value |= bits << shift;
            shift += 7;
        }
        Ok((Packet::Cyc(value), pos - offset))
    }

    #[inline(always)]
    fn read_extended(&self, offset: usize) -> Read {
        let b = self.need(offset, 2)?;
        let ext = b[1];
        match ext {
            0x82 => {
                let b = self.need(offset, PSB_LEN)?;
                if b != PSB_BYTES {
                    return Err(malformed("psb", "broken 02 82 pattern"));
                }
                Ok((Packet::Psb, PSB_LEN))
            }
            0x23 => Ok((Packet::Psbend, 2)),
            0xf3 => Ok((Packet::Ovf, 2)),
            0x83 => Ok((Packet::Stop, 2)),
            0xa3 => {
                let b = self.need(offset, 8)?;
                let tnt = tnt_payload(le(&b[2..8])).ok_or(malformed("tnt.64", "no payload bits"))?;
                Ok((Packet::TntLong(tnt), 8))
            }
            0x43 => {
                let b = self.need(offset, 8)?;
                let payload = le(&b[2..8]);
                Ok((Packet::Pip { cr3: (payload >> 1) << 5, nr: payload & 1 != 0 }, 8))
            }
            0x03 => {
                let b = self.need(offset, 4)?;
                Ok((Packet::Cbr(b[2]), 4))
            }
            0x73 => {
                let b = self.need(offset, 7)?;
                let ctc = le(&b[2..4]) as u16;
                let fc = le(&b[5..7]) as u16;
                if b[4] != 0 {
                    return Err(malformed("tma", "reserved byte set"));
                }
                if fc & !0x1ff != 0 {
                    return Err(malformed("tma", "fast counter exceeds 9 bits"));
                }
                Ok((Packet::Tma { ctc, fc }, 7))
            }
            0xc8 => {
                let b = self.need(offset, 7)?;
                Ok((Packet::Vmcs(le(&b[2..7]) << 12), 7))
            }
            0xc3 => {
                let b = self.need(offset, 3)?;
                if b[2] != 0x88 {
                    return Err(PacketErrorKind::UnknownExtendedOpcode(ext));
                }
                let b = self.need(offset, 11)?;
                Ok((Packet::Mnt(le(&b[3..11])), 11))
            }
            0x62 | 0xe2 => Ok((Packet::Exstop { ip: ext & 0x80 != 0 }, 2)),
            0xc2 => {
                let b = self.need(offset, 10)?;
                let hints = le(&b[2..6]) as u32;
                let ext = le(&b[6..10]) as u32;
                Ok((Packet::Mwait { hints, ext }, 10))
            }
            0x22 => {
                let b = self.need(offset, 4)?;
                let p = le(&b[2..4]);
                let packet = Packet::Pwre {
                    state: ((p >> 12) & 0xf) as u8,
                    sub_state: ((p >> 8) & 0xf) as u8,
                    hw: p & 0x8 != 0,
                };
                Ok((packet, 4))
            }
            0xa2 => {
                let b = self.need(offset, 7)?;
                let p = le(&b[2..7]);
                let packet = Packet::Pwrx {
                    last: ((p >> 4) & 0xf) as u8,
                    deepest: (p & 0xf) as u8,
                    wake: ((p >> 8) & 0xf) as u8,
                };
                Ok((packet, 7))
            }
            0x63 => {
                let b = self.need(offset, 3)?;
                let size = if b[2] & 0x80 != 0 { BlockItemSize::Four } else { BlockItemSize::Eight };
                Ok((Packet::Bbp { size, kind: b[2] & 0x1f }, 3))
            }
            0x33 | 0xb3 => Ok((Packet::Bep { ip: ext & 0x80 != 0 }, 2)),
            0x13 => {
                let b = self.need(offset, 4)?;
                Ok((Packet::Cfe { ip: b[2] & 0x80 != 0, kind: b[2] & 0x1f, vector: b[3] }, 4))
            }
            0x53 => {
                let b = self.need(offset, 11)?;
                Ok((Packet::Evd { kind: b[2] & 0x3f, payload: le(&b[3..11]) }, 11))
            }
            _ if ext & 0x1f == 0x12 => {
                let size = match (ext >> 5) & 0x3 {
                    0 => 4,
                    1 => 8,
                    _ => return Err(malformed("ptw", "reserved payload size")),
                };
                let b = self.need(offset, 2 + size)?;
                let packet = Packet::Ptw { payload: le(&b[2..2 + size]), size: size as u8, ip: ext & 0x80 != 0 };
                Ok((packet, 2 + size))
            }
            _ => Err(PacketErrorKind::UnknownExtendedOpcode(ext)),
        }
    }
}

impl<'a> Iterator for PacketDecoder<'a> {
    type Item = Result<(usize, Packet), PacketError>;

    /// The next packet; after an error, decoding resumes at the next PSB.
    fn next(&mut self) -> Option<Self::Item> {
        if self.exhausted {
            return None;
        }
        match self.next_packet() {
            Ok(Some(item)) => Some(Ok(item)),
            Ok(None) => None,
            Err(error) => {
                if self.sync_forward().is_none() {
                    self.exhausted = true;
                }
                Some(Err(error))
            }
        }
    }
}
