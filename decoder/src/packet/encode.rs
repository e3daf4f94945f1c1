//! The packet encoder: `Packet` in, bytes out, byte-exact.

use super::{sign_extend_48, BlockItemSize, Ip, IpCompression, Packet, Tnt, PSB_BYTES};

/// A packet that cannot be encoded as given (a field out of its range).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("cannot encode {packet}: {reason}")]
pub struct EncodeError {
    /// The packet's name.
    pub packet: &'static str,
    /// Which field is out of range.
    pub reason: &'static str,
}

fn invalid(packet: &'static str, reason: &'static str) -> EncodeError {
    EncodeError { packet, reason }
}

/// Which IP packet [`PacketEncoder::encode_ip`] writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IpPacketKind {
    /// TIP.
    Tip,
    /// TIP.PGE.
    TipPge,
    /// TIP.PGD.
    TipPgd,
    /// FUP.
    Fup,
}

impl IpPacketKind {
    fn opcode(self) -> u8 {
        match self {
            IpPacketKind::Tip => 0x0d,
            IpPacketKind::TipPge => 0x11,
            IpPacketKind::TipPgd => 0x01,
            IpPacketKind::Fup => 0x1d,
        }
    }
}

/// Encodes Intel PT packets into a byte buffer it owns.
///
/// It tracks the last IP exactly as a decoder will (reset at PSB, updated by
/// every IP packet with a payload), so [`encode_ip`](Self::encode_ip) can pick
/// the shortest IP compression that a decoder reconstructs correctly.
#[derive(Debug, Clone, Default)]
pub struct PacketEncoder {
    bytes: Vec<u8>,
    last_ip: u64,
    block: Option<BlockItemSize>,
}

/// The IP compression hardware would choose for `ip` after `last_ip`: the
/// shortest payload that reconstructs `ip`, preferring the sign-extended
/// 48-bit form (independent of the last IP) among the 6-byte forms.
pub fn choose_compression(ip: Option<u64>, last_ip: u64) -> IpCompression {
    let Some(ip) = ip else { return IpCompression::Suppressed };
    let diff = ip ^ last_ip;
    if diff >> 16 == 0 {
        IpCompression::Update16
    } else if diff >> 32 == 0 {
        IpCompression::Update32
    } else if sign_extend_48(ip) == ip {
        IpCompression::Sext48
    } else if diff >> 48 == 0 {
        IpCompression::Update48
    } else {
        IpCompression::Full
    }
}

impl PacketEncoder {
    /// An empty encoder with last IP 0.
    pub fn new() -> Self {
        Self::default()
    }

    /// An encoder appending to `bytes` (reusing its allocation).
    pub fn with_buffer(bytes: Vec<u8>) -> Self {
        PacketEncoder { bytes, ..Self::default() }
    }

    /// The bytes written so far.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Takes the bytes written so far, leaving the encoder's state intact.
    pub fn take_bytes(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.bytes)
    }

    /// Drops the first `n` bytes written (a ring buffer's oldest data),
    /// leaving the encoder's state intact: the next packet still follows the
    /// last one written.
    pub fn discard_front(&mut self, n: usize) {
        self.bytes.drain(..n.min(self.bytes.len()));
    }

    /// Consumes the encoder, returning its bytes.
    pub fn into_bytes(self) -> Vec<u8> {
        self.bytes
    }

    /// Number of bytes written.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// True when nothing has been written.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// The last IP, as a decoder will track it.
    pub fn last_ip(&self) -> u64 {
        self.last_ip
    }

    /// Writes an IP packet for `ip` (`None` = suppressed) with the compression
    /// hardware would use. Returns the compression chosen.
    pub fn encode_ip(&mut self, kind: IpPacketKind, ip: Option<u64>) -> IpCompression {
        let compression = choose_compression(ip, self.last_ip);
        self.write_ip(kind.opcode(), Ip::new(compression, ip.unwrap_or(0)));
        compression
    }

    fn write_ip(&mut self, opcode: u8, ip: Ip) {
        let n = ip.compression.payload_len();
        self.bytes.push((ip.compression as u8) << 5 | opcode);
        self.bytes.extend_from_slice(&ip.raw.to_le_bytes()[..n]);
        if let Some(value) = ip.compression.reconstruct(ip.raw, self.last_ip) {
            self.last_ip = value;
        }
    }

    /// Appends literal bytes, bypassing the encoder's state (for injecting
    /// corruption or foreign data).
    pub fn append_raw(&mut self, bytes: &[u8]) {
        self.bytes.extend_from_slice(bytes);
    }

    fn put(&mut self, bytes: &[u8]) {
        self.bytes.extend_from_slice(bytes);
    }

    fn put_le(&mut self, value: u64, len: usize) {
        self.bytes.extend_from_slice(&value.to_le_bytes()[..len]);
    }

    /// Writes `packet` exactly as given (IP packets with their stated
    /// compression and raw payload). Returns the number of bytes written.
    pub fn encode(&mut self, packet: &Packet) -> Result<usize, EncodeError> {
        let start = self.bytes.len();
        self.write(packet)?;
        if let Packet::Ovf = packet {
            self.last_ip = 0; // the next IP goes out in full (see the decoder)
        }
        match packet {
            Packet::Psb => {
                self.last_ip = 0;
                self.block = None;
            }
            Packet::Bbp { size, .. } => self.block = Some(*size),
            other if other.keeps_block_context() => {}
            _ => self.block = None,
        }
        Ok(self.bytes.len() - start)
    }

    fn write(&mut self, packet: &Packet) -> Result<(), EncodeError> {
        match *packet {
            Packet::Pad => self.put(&[0x00]),
            Packet::Psb => self.put(&PSB_BYTES),
            Packet::Psbend => self.put(&[0x02, 0x23]),
            Packet::TntShort(tnt) => {
                check_tnt(tnt, 6, "tnt.8")?;
                let byte = ((1u8 << tnt.len) | tnt.bits as u8) << 1;
                if self.block.is_some() && byte & 0x7 == 0x4 {
                    return Err(invalid("tnt.8", "would read as BIP inside a BBP block"));
                }
                self.put(&[byte]);
            }
            Packet::TntLong(tnt) => {
                check_tnt(tnt, 47, "tnt.64")?;
                self.put(&[0x02, 0xa3]);
                self.put_le((1u64 << tnt.len) | tnt.bits, 6);
            }
            Packet::Tip(ip) => self.write_ip(0x0d, checked_ip(ip)?),
            Packet::TipPge(ip) => self.write_ip(0x11, checked_ip(ip)?),
            Packet::TipPgd(ip) => self.write_ip(0x01, checked_ip(ip)?),
            Packet::Fup(ip) => self.write_ip(0x1d, checked_ip(ip)?),
            Packet::Pip { cr3, nr } => {
                if cr3 & 0x1f != 0 || cr3 >> 52 != 0 {
                    return Err(invalid("pip", "cr3 must be 32-byte aligned and below 2^52"));
                }
                self.put(&[0x02, 0x43]);
                self.put_le((cr3 >> 5) << 1 | nr as u64, 6);
            }
            Packet::ModeExec { csl, csd, iflag } => {
                self.put(&[0x99, csl as u8 | (csd as u8) << 1 | (iflag as u8) << 2])
            }
            Packet::ModeTsx { intx, abort } => self.put(&[0x99, 0x20 | intx as u8 | (abort as u8) << 1]),
            Packet::Tsc(tsc) => {
                if tsc >> 56 != 0 {
                    return Err(invalid("tsc", "value exceeds 56 bits"));
                }
                self.put(&[0x19]);
                self.put_le(tsc, 7);
            }
            Packet::Mtc(ctc) => self.put(&[0x59, ctc]),
            Packet::Tma { ctc, fc } => {
                if fc >> 9 != 0 {
                    return Err(invalid("tma", "fast counter exceeds 9 bits"));
                }
                self.put(&[0x02, 0x73]);
                self.put_le(ctc as u64, 2);
                self.put(&[0x00]);
                self.put_le(fc as u64, 2);
            }
            Packet::Cyc(value) => {
                if value >> 61 != 0 {
                    return Err(invalid("cyc", "value exceeds 61 bits"));
                }
                let mut rest = value >> 5;
                let more = (rest != 0) as u8;
                self.bytes.push(((value & 0x1f) as u8) << 3 | more << 2 | 0x3);
                while rest != 0 {
                    let bits = (rest & 0x7f) as u8;
                    rest >>= 7;
                    self.bytes.push(bits << 1 | (rest != 0) as u8);
                }
            }
            Packet::Cbr(ratio) => self.put(&[0x02, 0x03, ratio, 0x00]),
            Packet::Vmcs(base) => {
                if base & 0xfff != 0 || base >> 52 != 0 {
                    return Err(invalid("vmcs", "base must be page aligned and below 2^52"));
                }
                self.put(&[0x02, 0xc8]);
                self.put_le(base >> 12, 5);
            }
            Packet::Ovf => self.put(&[0x02, 0xf3]),
            Packet::Stop => self.put(&[0x02, 0x83]),
            Packet::Mnt(payload) => {
                self.put(&[0x02, 0xc3, 0x88]);
                self.put_le(payload, 8);
            }
            Packet::Ptw { payload, size, ip } => {
                let plc = match size {
                    4 if payload >> 32 == 0 => 0u8,
                    8 => 1,
                    _ => return Err(invalid("ptw", "size must be 4 (with a 32-bit payload) or 8")),
                };
                self.put(&[0x02, (ip as u8) << 7 | plc << 5 | 0x12]);
                self.put_le(payload, size as usize);
            }
            Packet::Exstop { ip } => self.put(&[0x02, if ip { 0xe2 } else { 0x62 }]),
            Packet::Mwait { hints, ext } => {
                self.put(&[0x02, 0xc2]);
                self.put_le(hints as u64, 4);
                self.put_le(ext as u64, 4);
            }
            Packet::Pwre { state, sub_state, hw } => {
                if state > 0xf || sub_state > 0xf {
                    return Err(invalid("pwre", "states are 4 bits"));
                }
                self.put(&[0x02, 0x22, (hw as u8) << 3, sub_state | state << 4]);
            }
            Packet::Pwrx { last, deepest, wake } => {
                if last > 0xf || deepest > 0xf || wake > 0xf {
                    return Err(invalid("pwrx", "fields are 4 bits"));
                }
                self.put(&[0x02, 0xa2, deepest | last << 4, wake, 0, 0, 0]);
            }
            Packet::Bbp { size, kind } => {
                if kind > 0x1f {
                    return Err(invalid("bbp", "type is 5 bits"));
                }
                let sz = matches!(size, BlockItemSize::Four) as u8;
                self.put(&[0x02, 0x63, sz << 7 | kind]);
            }
            Packet::Bip { id, payload, size } => {
                let Some(block) = self.block else {
                    return Err(invalid("bip", "only inside a BBP block"));
                };
                if id > 0x1f || size as usize != block.payload_len() || (size == 4 && payload >> 32 != 0) {
                    return Err(invalid("bip", "id is 5 bits; size and payload must match the block"));
                }
                self.bytes.push(id << 3 | 0x4);
                self.put_le(payload, size as usize);
            }
            Packet::Bep { ip } => self.put(&[0x02, if ip { 0xb3 } else { 0x33 }]),
            Packet::Cfe { ip, kind, vector } => {
                if kind > 0x1f {
                    return Err(invalid("cfe", "type is 5 bits"));
                }
                self.put(&[0x02, 0x13, (ip as u8) << 7 | kind, vector]);
            }
            Packet::Evd { kind, payload } => {
                if kind > 0x3f {
                    return Err(invalid("evd", "type is 6 bits"));
                }
                self.put(&[0x02, 0x53, kind]);
                self.put_le(payload, 8);
            }
            Packet::Trig { trbv, ip, mult, icnt } => {
                let flags = (ip as u8) << 7 | (icnt.is_some() as u8) << 6 | (mult as u8) << 5;
                self.put(&[0xd9, flags, trbv]);
                if let Some(icnt) = icnt {
                    self.put_le(icnt as u64, 2);
                }
            }
        }
        Ok(())
    }
}

fn check_tnt(tnt: Tnt, max: u8, name: &'static str) -> Result<(), EncodeError> {
    if tnt.len == 0 || tnt.len > max || tnt.bits >> tnt.len != 0 {
        return Err(invalid(name, "bit count out of range or stray bits above it"));
    }
    Ok(())
}

fn checked_ip(ip: Ip) -> Result<Ip, EncodeError> {
    let n = ip.compression.payload_len();
    if n < 8 && ip.raw >> (8 * n) != 0 {
        return Err(invalid("ip", "payload wider than its compression form"));
    }
    Ok(ip)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::PacketDecoder;

    #[test]
    fn hardware_compression_choice() {
        let last = 0x0000_7fff_f7dd_6090;
        assert_eq!(choose_compression(None, last), IpCompression::Suppressed);
        assert_eq!(choose_compression(Some(0x0000_7fff_f7dd_1234), last), IpCompression::Update16);
        assert_eq!(choose_compression(Some(0x0000_7fff_1234_5678), last), IpCompression::Update32);
        assert_eq!(choose_compression(Some(0x0000_5555_5555_0000), last), IpCompression::Sext48);
        assert_eq!(choose_compression(Some(0xffff_8000_0000_1000), 0), IpCompression::Sext48);
        assert_eq!(choose_compression(Some(0x1234_8000_0000_1000), 0x1234_0000_0000_0000), IpCompression::Update48);
        assert_eq!(choose_compression(Some(0x1234_8000_0000_1000), 0), IpCompression::Full);
    }

    #[test]
    fn encode_ip_round_trips_through_decoder() {
        let ips = [0x401000u64, 0x401020, 0x7fff_f7dd_6090, 0x401000, 0xffff_ffff_8100_0000, 0x1234_8000_0000_1000];
        let mut enc = PacketEncoder::new();
        enc.encode(&Packet::Psb).unwrap();
        for ip in ips {
            enc.encode_ip(IpPacketKind::Tip, Some(ip));
        }
        let decoded: Vec<u64> = PacketDecoder::new(enc.bytes())
            .filter_map(|item| item.unwrap().1.ip().and_then(|ip| ip.ip))
            .collect();
        assert_eq!(decoded, ips);
    }

    #[test]
    fn rejects_out_of_range_fields() {
        let mut enc = PacketEncoder::new();
        assert!(enc.encode(&Packet::TntShort(Tnt { bits: 0, len: 7 })).is_err());
        assert!(enc.encode(&Packet::TntShort(Tnt { bits: 4, len: 2 })).is_err());
        assert!(enc.encode(&Packet::Cyc(1 << 62)).is_err());
        assert!(enc.encode(&Packet::Bip { id: 1, payload: 0, size: 8 }).is_err());
        assert!(enc.encode(&Packet::Tip(Ip { compression: IpCompression::Update16, raw: 0x10000, ip: None })).is_err());
        assert!(enc.is_empty());
    }
}
