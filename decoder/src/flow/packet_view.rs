//! The packets as libipt 2.0.5's query decoder sees them: which it knows by
//! their opcode alone while reading ahead (and so decodes only when a query
//! needs them), which it does not know at all, and what a PSB+ header may
//! hold. LLDB's output depends on each of these choices.

use super::Flow;
use crate::item::FlowError;
use crate::packet::{Packet, PacketDecoder, PacketErrorKind};

/// Whether libipt finds this packet error only when it decodes the packet
/// as an event or a branch, not while reading ahead past status packets: its
/// read-ahead knows flow and event packets by their opcode and stops there.
pub(super) fn decoded_later(kind: &PacketErrorKind) -> bool {
    matches!(kind, PacketErrorKind::Malformed { packet: "mode" | "ip" | "tnt.8" | "tnt.64" | "ptw", .. })
}

/// A TIP.PGE must say where tracing starts: libipt rejects one without an IP
/// as a bad packet.
pub(super) fn pge_without_ip() -> FlowError {
    FlowError::Packet(PacketErrorKind::Malformed { packet: "tip.pge", reason: "no IP" }, None)
}

/// Whether libipt leaves this malformed packet (at `at`) until it is needed:
/// TNT, TIP and event packets are known by their opcode when reading ahead,
/// FUPs are decoded then.
pub(super) fn left_for_later(data: &[u8], at: usize, kind: &PacketErrorKind) -> bool {
    decoded_later(kind) && data.get(at).map(|b| b & 0x1f) != Some(0x1d)
}

/// Whether the packet at `at` is an event packet by its opcode (MODE,
/// TIP.PGE, TIP.PGD, and the extended PIP, CBR, VMCS, OVF, STOP, MNT,
/// EXSTOP, MWAIT, PWRE, PWRX, PTW).
pub(super) fn is_event_opcode(data: &[u8], at: usize) -> bool {
    match data.get(at).copied().unwrap_or(0) {
        0x99 => true,
        0x02 => data.get(at + 1).is_some_and(|&b| matches!(b, 0x43 | 0x03 | 0xc8 | 0xf3 | 0x83 | 0xc3 | 0x62 | 0xe2 | 0xc2 | 0x22 | 0xa2) || b & 0x1f == 0x12),
        opcode => matches!(opcode & 0x1f, 0x11 | 0x01),
    }
}

/// Whether `error` is a malformed TNT or TIP (see [`is_query_packet`]):
/// libipt leaves it, known by its opcode, until a branch needs it.
pub(super) fn is_damaged_query(data: &[u8], error: &(usize, FlowError)) -> bool {
    matches!(error, (at, FlowError::Packet(kind, _)) if decoded_later(kind) && is_query_packet(data, *at))
}

/// Whether the (malformed) packet at `at` answers a query — a TNT or a TIP,
/// which wait for the branch that needs them — rather than being an event
/// or a FUP, which libipt decodes as soon as it reads ahead to them.
pub(super) fn is_query_packet(data: &[u8], at: usize) -> bool {
    match data.get(at).copied().unwrap_or(0) {
        0x02 => data.get(at + 1) == Some(&0xa3), // TNT.64 (PTW and PSB are not)
        opcode => opcode & 1 == 0 || opcode & 0x1f == 0x0d,
    }
}

/// Whether the packet at `at` is a TNT (short or long) by its opcode.
pub(super) fn is_tnt_opcode(data: &[u8], at: usize) -> bool {
    match data.get(at).copied().unwrap_or(0) {
        0x02 => data.get(at + 1) == Some(&0xa3),
        opcode => opcode != 0 && opcode & 1 == 0,
    }
}

/// Whether the packet at `at` may appear in a PSB+ header, by its opcode:
/// PAD, FUP, MODE, TSC, MTC, CYC and the extended PIP, CBR, TMA, VMCS, MNT,
/// PSBEND, OVF.
pub(super) fn is_header_opcode(data: &[u8], at: usize) -> bool {
    match data.get(at).copied().unwrap_or(0) {
        0x00 | 0x99 | 0x19 | 0x59 => true,
        0x02 => matches!(data.get(at + 1), Some(0x43 | 0x03 | 0x73 | 0xc8 | 0xc3 | 0x23 | 0xf3)),
        opcode => opcode & 0x1f == 0x1d || opcode & 0x03 == 0x03,
    }
}

/// The next packet as libipt 2.0.5 sees it: packets it does not know (those
/// of PEBS-via-PT blocks, control-flow events and triggers, newer than it)
/// are unknown opcodes.
#[inline]
pub(super) fn next_packet(packets: &mut PacketDecoder<'_>) -> Result<Option<(usize, Packet)>, crate::packet::PacketError> {
    use crate::packet::PacketError;
    let next = packets.next_packet()?;
    match next {
        Some((offset, Packet::Bbp { .. } | Packet::Bip { .. } | Packet::Bep { .. } | Packet::Cfe { .. } | Packet::Evd { .. } | Packet::Trig { .. })) => {
            let data = packets.data();
            let kind = match data[offset] {
                0x02 => PacketErrorKind::UnknownExtendedOpcode(data.get(offset + 1).copied().unwrap_or(0)),
                opcode => PacketErrorKind::UnknownOpcode(opcode),
            };
            Err(PacketError { offset, kind })
        }
        other => Ok(other),
    }
}

/// Reads a PSB+ header (the PSB itself already read) as libipt does as soon
/// as it meets the PSB: only header packets may come before PSBEND (or an
/// OVF, which also ends it). `Ok(false)` when the trace ends first.
pub(super) fn read_psb_header(ahead: &mut PacketDecoder<'_>, psb: usize) -> Flow<bool> {
    use PacketErrorKind as K;
    loop {
        match next_packet(ahead) {
            Ok(None) => return Ok(false),
            Err(e) if matches!(e.kind, K::Truncated { .. }) => return Ok(false),
            // libipt checks the opcode before decoding the packet.
            Err(e) if !matches!(e.kind, K::UnknownOpcode(_) | K::UnknownExtendedOpcode(_)) && !is_header_opcode(ahead.data(), e.offset) => {
                return Err((psb, FlowError::BadContext(None)))
            }
            Err(e) => return Err((psb, FlowError::Packet(e.kind, None))),
            Ok(Some((_, packet))) => match packet {
                Packet::Psbend | Packet::Ovf => return Ok(true),
                Packet::Pad
                | Packet::Fup(_)
                | Packet::Pip { .. }
                | Packet::ModeExec { .. }
                | Packet::ModeTsx { .. }
                | Packet::Tsc(_)
                | Packet::Cbr(_)
                | Packet::Tma { .. }
                | Packet::Mtc(_)
                | Packet::Cyc(_)
                | Packet::Vmcs(_)
                | Packet::Mnt(_) => {}
                _ => return Err((psb, FlowError::BadContext(None))),
            },
        }
    }
}
