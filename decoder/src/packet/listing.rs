//! A `ptdump`-style listing of packets: one text line per packet, or one JSON
//! record per packet.
//!
//! The text columns follow libipt's `ptdump --lastip`: the offset (16 hex
//! digits), the packet name, its payload, and for IP packets the reconstructed
//! IP; for PIP and VMCS the tracked CR3/VMCS value.

use std::fmt::{self, Write};

use serde::Serialize;

use super::{BlockItemSize, Ip, IpCompression, Packet, PacketError};

/// One listed packet, as serialised by `retrace ptdump --json`.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct PacketRecord<'a> {
    /// Byte offset of the packet.
    pub offset: usize,
    /// The packet (`packet` = name, `payload` = fields).
    #[serde(flatten)]
    pub packet: &'a Packet,
}

/// One decode error, as serialised by `retrace ptdump --json`.
#[derive(Debug, Clone, Serialize)]
pub struct ErrorRecord {
    /// Byte offset of the packet that could not be decoded.
    pub offset: usize,
    /// What went wrong.
    pub error: String,
    /// libipt's name for the same error (`eos`, `bad_opc`, `bad_packet`).
    pub libipt_error: &'static str,
    /// Offset of the PSB where decoding resumed, if any.
    pub resumed_at: Option<usize>,
}

impl ErrorRecord {
    /// The record for `error`, with decoding resumed at `resumed_at`.
    pub fn new(error: &PacketError, resumed_at: Option<usize>) -> Self {
        ErrorRecord {
            offset: error.offset,
            error: error.kind.to_string(),
            libipt_error: error.kind.libipt_name(),
            resumed_at,
        }
    }
}

fn ip_payload(ip: &Ip) -> String {
    let code = ip.compression as u8;
    match ip.compression {
        IpCompression::Suppressed => format!("{code:x}: ????????????????"),
        IpCompression::Update16 => format!("{code:x}: ????????????{:04x}", ip.raw),
        IpCompression::Update32 => format!("{code:x}: ????????{:08x}", ip.raw),
        IpCompression::Update48 => format!("{code:x}: ????{:012x}", ip.raw),
        IpCompression::Sext48 => format!("{code:x}: {:016x}", super::sign_extend_48(ip.raw)),
        IpCompression::Full => format!("{code:x}: {:016x}", ip.raw),
    }
}

fn flags(parts: &[(bool, &str)]) -> String {
    parts.iter().filter(|(set, _)| *set).map(|(_, name)| *name).collect::<Vec<_>>().join(", ")
}

/// The payload column and the optional tracking column of a packet.
fn columns(packet: &Packet) -> (String, Option<(&'static str, String)>) {
    let ip_tracking = |ip: &Ip| {
        let value = match ip.ip {
            Some(ip) => format!("{ip:016x}"),
            None => "<suppressed>".to_string(),
        };
        Some(("ip", value))
    };
    match packet {
        Packet::Pad | Packet::Psb | Packet::Psbend | Packet::Ovf | Packet::Stop => (String::new(), None),
        Packet::TntShort(tnt) | Packet::TntLong(tnt) => {
            (tnt.outcomes().map(|taken| if taken { '!' } else { '.' }).collect(), None)
        }
        Packet::Tip(ip) | Packet::TipPge(ip) | Packet::TipPgd(ip) | Packet::Fup(ip) => {
            (ip_payload(ip), ip_tracking(ip))
        }
        Packet::Pip { cr3, nr } => {
            (format!("{cr3:x}{}", if *nr { ", nr" } else { "" }), Some(("cr3", format!("{cr3:016x}"))))
        }
        Packet::Vmcs(base) => (format!("{base:x}"), Some(("vmcs", format!("{base:016x}")))),
        Packet::ModeExec { csl, csd, iflag } => (flags(&[(*csd, "cs.d"), (*csl, "cs.l"), (*iflag, "if")]), None),
        Packet::ModeTsx { intx, abort } => (flags(&[(*intx, "intx"), (*abort, "abrt")]), None),
        Packet::Tsc(v) | Packet::Cyc(v) | Packet::Mnt(v) => (format!("{v:x}"), None),
        Packet::Mtc(v) | Packet::Cbr(v) => (format!("{v:x}"), None),
        Packet::Tma { ctc, fc } => (format!("{ctc:x}, {fc:x}"), None),
        Packet::Ptw { payload, size, ip } => {
            let plc = if *size == 8 { 1 } else { 0 };
            (format!("{plc:x}: {payload:x}{}", if *ip { ", ip" } else { "" }), None)
        }
        Packet::Exstop { ip } | Packet::Bep { ip } => ((if *ip { "ip" } else { "" }).to_string(), None),
        Packet::Mwait { hints, ext } => (format!("{hints:08x}, {ext:08x}"), None),
        Packet::Pwre { state, sub_state, hw } => (
            format!("c{}.{}{}", (state + 1) & 0xf, (sub_state + 1) & 0xf, if *hw { ", hw" } else { "" }),
            None,
        ),
        Packet::Pwrx { last, deepest, wake } => {
            let reason = match wake {
                0x1 => "int".to_string(),
                0x4 => "st".to_string(),
                0x8 => "hw".to_string(),
                other => format!("{other:x}"),
            };
            (format!("{reason}: c{}, c{}", (last + 1) & 0xf, (deepest + 1) & 0xf), None)
        }
        Packet::Bbp { size, kind } => {
            let bytes = match size {
                BlockItemSize::Four => 4,
                BlockItemSize::Eight => 8,
            };
            (format!("sz: {bytes}, type: {kind:x}"), None)
        }
        Packet::Bip { id, payload, .. } => (format!("{id:x}: {payload:x}"), None),
        Packet::Cfe { ip, kind, vector } => {
            (format!("{kind:x}, {vector:x}{}", if *ip { ", ip" } else { "" }), None)
        }
        Packet::Evd { kind, payload } => (format!("{kind:x}: {payload:x}"), None),
        Packet::Trig { trbv, ip, mult, icnt } => {
            let mut text = format!("{trbv:x}");
            if let Some(icnt) = icnt {
                let _ = write!(text, ", icnt: {icnt:x}");
            }
            for (set, name) in [(*mult, ", mult"), (*ip, ", ip")] {
                if set {
                    text.push_str(name);
                }
            }
            (text, None)
        }
    }
}

/// Writes the listing line for `packet` at `offset` (no trailing newline).
pub fn write_packet_line(out: &mut impl Write, offset: usize, packet: &Packet) -> fmt::Result {
    let (payload, tracking) = columns(packet);
    write!(out, "{offset:016x}  ")?;
    if payload.is_empty() && tracking.is_none() {
        return write!(out, "{}", packet.name());
    }
    write!(out, "{:<9} ", packet.name())?;
    match tracking {
        Some((id, value)) => write!(out, "{payload:<24} {id:<4} {value}"),
        None => write!(out, "{payload}"),
    }
}

/// The listing line for `packet` at `offset`.
pub fn packet_line(offset: usize, packet: &Packet) -> String {
    let mut line = String::new();
    let _ = write_packet_line(&mut line, offset, packet);
    line
}

/// The listing line for a decode error, saying where decoding resumed.
pub fn error_line(error: &PacketError, resumed_at: Option<usize>) -> String {
    match resumed_at {
        Some(resume) => {
            format!("[{:016x}: error: {}; resuming at PSB {resume:016x}]", error.offset, error.kind)
        }
        None => format!("[{:016x}: error: {}; no PSB follows]", error.offset, error.kind),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::Tnt;

    #[test]
    fn lines_match_ptdump_columns() {
        let ip = Ip { compression: IpCompression::Sext48, raw: 0x7fff_f7dd_6090, ip: Some(0x7fff_f7dd_6090) };
        assert_eq!(
            packet_line(0x10, &Packet::Fup(ip)),
            "0000000000000010  fup       3: 00007ffff7dd6090      ip   00007ffff7dd6090"
        );
        assert_eq!(packet_line(0, &Packet::Psb), "0000000000000000  psb");
        assert_eq!(
            packet_line(0x22, &Packet::TntShort(Tnt::from_outcomes([true, true, false]))),
            "0000000000000022  tnt.8     !!."
        );
        assert_eq!(
            packet_line(0x30, &Packet::ModeExec { csl: true, csd: false, iflag: false }),
            "0000000000000030  mode.exec cs.l"
        );
        let upd = Ip { compression: IpCompression::Update16, raw: 0x1234, ip: Some(0x401234) };
        assert_eq!(
            packet_line(0x40, &Packet::Tip(upd)),
            "0000000000000040  tip       1: ????????????1234      ip   0000000000401234"
        );
    }
}
