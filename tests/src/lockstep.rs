//! Runs retrace's packet decoder and libipt's side by side over one buffer and
//! reports the first disagreement: packet, payload, size, error offset, error
//! kind, or resynchronisation point.

use std::collections::BTreeMap;

use retrace_decoder::packet::{Packet, PacketDecoder};

use crate::libipt::{FlatPacket, LibiptPacketDecoder};

/// What a lockstep run saw.
#[derive(Debug, Default, Clone)]
pub struct Agreement {
    /// Packets both decoders produced identically.
    pub packets: u64,
    /// Errors both reported at the same offset with the same kind.
    pub errors: u64,
    /// Packets newer than libipt 2.0.5 that retrace decoded where libipt
    /// reported `bad_opc` at the same offset.
    pub newer_packets: u64,
    /// Agreed packets by kind.
    pub kinds: BTreeMap<&'static str, u64>,
    /// Agreed errors by libipt error name.
    pub error_kinds: BTreeMap<&'static str, u64>,
}

/// retrace's packet flattened the way the shim flattens libipt's.
pub fn flatten(packet: &Packet) -> (&'static str, [u64; 3]) {
    let fields = match *packet {
        Packet::TntShort(t) | Packet::TntLong(t) => [t.bits, t.len as u64, 0],
        Packet::Tip(ip) | Packet::TipPge(ip) | Packet::TipPgd(ip) | Packet::Fup(ip) => {
            [ip.compression as u64, ip.raw, 0]
        }
        Packet::Pip { cr3, nr } => [cr3, nr as u64, 0],
        // libipt 2.0.5 does not know MODE.Exec's IF bit.
        Packet::ModeExec { csl, csd, .. } => [csl as u64 | (csd as u64) << 1, 0, 0],
        Packet::ModeTsx { intx, abort } => [intx as u64 | (abort as u64) << 1, 0, 0],
        Packet::Tsc(v) | Packet::Cyc(v) | Packet::Vmcs(v) | Packet::Mnt(v) => [v, 0, 0],
        Packet::Cbr(v) | Packet::Mtc(v) => [v as u64, 0, 0],
        Packet::Tma { ctc, fc } => [ctc as u64, fc as u64, 0],
        Packet::Exstop { ip } => [ip as u64, 0, 0],
        Packet::Mwait { hints, ext } => [hints as u64, ext as u64, 0],
        Packet::Pwre { state, sub_state, hw } => [state as u64, sub_state as u64, hw as u64],
        // libipt 2.0.5 exposes wake-reason bits 0, 2 and 3 only.
        Packet::Pwrx { last, deepest, wake } => [last as u64, deepest as u64, (wake & 0xd) as u64],
        Packet::Ptw { payload, size, ip } => [payload, (size == 8) as u64, ip as u64],
        _ => [0, 0, 0],
    };
    (packet.name(), fields)
}

fn describe(data: &[u8], offset: usize) -> String {
    let end = (offset + 16).min(data.len());
    let bytes: Vec<String> = data[offset.min(end)..end].iter().map(|b| format!("{b:02x}")).collect();
    format!("offset {offset:#x} (bytes {})", bytes.join(" "))
}

/// Decodes `data` with both decoders in lockstep, starting with a forward
/// sync. Returns what agreed, or a description of the first disagreement.
pub fn compare(data: &[u8]) -> Result<Agreement, String> {
    let mut ours = PacketDecoder::new(data);
    let mut theirs = LibiptPacketDecoder::new(data);
    let mut seen = Agreement::default();

    let resync = |ours: &mut PacketDecoder, theirs: &mut LibiptPacketDecoder| -> Result<bool, String> {
        let a = ours.sync_forward();
        let b = theirs.sync_forward().ok();
        if a.map(|o| o as u64) != b {
            return Err(format!("sync_forward disagrees: retrace {a:?}, libipt {b:?}"));
        }
        Ok(a.is_some())
    };
    if !resync(&mut ours, &mut theirs)? {
        return Ok(seen);
    }
    loop {
        let before = ours.clone();
        let offset = ours.offset();
        let their_offset = theirs.offset().map_err(|e| format!("libipt offset: {e}"))?;
        if their_offset != offset as u64 {
            return Err(format!("position differs: retrace {offset:#x}, libipt {their_offset:#x}"));
        }
        let mine = ours.next_packet();
        let other = theirs.next_packet();
        match (mine, other) {
            (Ok(None), Err("eos")) => return Ok(seen),
            (Ok(Some((at, packet))), Ok(FlatPacket { name, fields, size })) => {
                let (my_name, my_fields) = flatten(&packet);
                let my_size = ours.offset() - at;
                if (my_name, my_fields, my_size) != (name, fields, size) {
                    return Err(format!(
                        "packet differs at {}: retrace {my_name} {my_fields:x?} ({my_size} bytes), libipt {name} {fields:x?} ({size} bytes)",
                        describe(data, at)
                    ));
                }
                seen.packets += 1;
                *seen.kinds.entry(my_name).or_default() += 1;
            }
            (Ok(Some((at, packet))), Err("bad_opc")) if packet.is_post_libipt_2_0() => {
                seen.newer_packets += 1;
                let _ = at;
                ours = before;
                if !resync(&mut ours, &mut theirs)? {
                    return Ok(seen);
                }
            }
            (Err(error), Err(their_error)) => {
                if error.kind.libipt_name() != their_error {
                    return Err(format!(
                        "error kind differs at {}: retrace {} ({}), libipt {their_error}",
                        describe(data, error.offset),
                        error.kind.libipt_name(),
                        error.kind
                    ));
                }
                seen.errors += 1;
                *seen.error_kinds.entry(their_error).or_default() += 1;
                if !resync(&mut ours, &mut theirs)? {
                    return Ok(seen);
                }
            }
            (mine, other) => {
                return Err(format!("results differ at {}: retrace {mine:?}, libipt {other:?}", describe(data, offset)));
            }
        }
    }
}
