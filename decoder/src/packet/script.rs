//! Packet scripts: Intel PT streams written as readable text, one packet per
//! line, in the same `name payload` syntax the [`listing`](super::listing)
//! prints (so a listing's name and payload columns read back as a script).
//!
//! ```text
//! # comment
//! psb
//! tsc 3b9aca00
//! mode.exec cs.l
//! psbend
//! tip.pge 401000          # IP without "N:": compressed as hardware would
//! tnt.8 !!.
//! tip 1: ????????????1234 # explicit IP compression (the ? are optional)
//! raw 02 04               # literal bytes, e.g. to inject corruption
//! ```
//!
//! Numbers are hexadecimal (an optional `0x` is accepted).

use super::encode::{EncodeError, IpPacketKind};
use super::{BlockItemSize, Ip, IpCompression, Packet, PacketEncoder, Tnt};

/// One line of a packet script.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScriptItem {
    /// A packet written exactly as given.
    Packet(Packet),
    /// An IP packet whose compression the encoder chooses.
    AutoIp(IpPacketKind, Option<u64>),
    /// Literal bytes.
    Raw(Vec<u8>),
}

/// A script line that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {message}")]
pub struct ScriptError {
    /// 1-based line number.
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

fn hex(text: &str) -> Result<u64, String> {
    let digits = text.trim().trim_start_matches("0x").trim_start_matches('?');
    u64::from_str_radix(digits, 16).map_err(|_| format!("not a hex number: {text:?}"))
}

fn hex_as<T: TryFrom<u64>>(text: &str) -> Result<T, String> {
    T::try_from(hex(text)?).map_err(|_| format!("out of range: {text:?}"))
}

/// Splits `payload` at commas and checks which of `names` appear as flags.
fn flag_set(parts: &[&str], name: &str) -> bool {
    parts.iter().any(|part| part.trim() == name)
}

fn check_flags(parts: &[&str], allowed: &[&str]) -> Result<(), String> {
    match parts.iter().map(|p| p.trim()).find(|p| !p.is_empty() && !allowed.contains(p)) {
        Some(unknown) => Err(format!("unknown flag {unknown:?}")),
        None => Ok(()),
    }
}

fn split_colon(payload: &str) -> Result<(&str, &str), String> {
    payload.split_once(':').ok_or_else(|| format!("expected `a: b`, got {payload:?}"))
}

fn parse_ip(kind: IpPacketKind, payload: &str) -> Result<ScriptItem, String> {
    let make = |ip: Ip| match kind {
        IpPacketKind::Tip => Packet::Tip(ip),
        IpPacketKind::TipPge => Packet::TipPge(ip),
        IpPacketKind::TipPgd => Packet::TipPgd(ip),
        IpPacketKind::Fup => Packet::Fup(ip),
    };
    if payload.is_empty() {
        return Ok(ScriptItem::AutoIp(kind, None));
    }
    let Some((code, value)) = payload.split_once(':') else {
        return Ok(ScriptItem::AutoIp(kind, Some(hex(payload)?)));
    };
    let compression = IpCompression::from_bits(hex_as(code)?).ok_or("reserved IP compression")?;
    let value = value.trim();
    let raw = if compression == IpCompression::Suppressed || value.chars().all(|c| c == '?') {
        0
    } else {
        hex(value.trim_start_matches('?'))?
    };
    Ok(ScriptItem::Packet(make(Ip::new(compression, raw))))
}

fn parse_tnt(payload: &str, max: usize) -> Result<Tnt, String> {
    if payload.is_empty() || payload.len() > max || !payload.chars().all(|c| c == '!' || c == '.') {
        return Err(format!("expected 1 to {max} of `!` (taken) and `.` (not taken)"));
    }
    Ok(Tnt::from_outcomes(payload.chars().map(|c| c == '!')))
}

fn c_state(text: &str) -> Result<u8, String> {
    let number: u8 = text.trim().trim_start_matches('c').parse().map_err(|_| format!("bad C-state {text:?}"))?;
    Ok(number.wrapping_sub(1) & 0xf)
}

/// Parses one line (without comment) into an item; `block` is the BIP size of
/// the enclosing BBP block, if any.
fn parse_line(line: &str, block: Option<BlockItemSize>) -> Result<Option<ScriptItem>, String> {
    let line = line.split('#').next().unwrap_or("").trim();
    if line.is_empty() {
        return Ok(None);
    }
    let (name, payload) = match line.split_once(char::is_whitespace) {
        Some((name, rest)) => (name, rest.trim()),
        None => (line, ""),
    };
    let parts: Vec<&str> = payload.split(',').collect();
    let packet = match name {
        "raw" => {
            let bytes = payload.split_whitespace().map(hex_as::<u8>).collect::<Result<Vec<_>, _>>()?;
            return Ok(Some(ScriptItem::Raw(bytes)));
        }
        "tip" => return parse_ip(IpPacketKind::Tip, payload).map(Some),
        "tip.pge" => return parse_ip(IpPacketKind::TipPge, payload).map(Some),
        "tip.pgd" => return parse_ip(IpPacketKind::TipPgd, payload).map(Some),
        "fup" => return parse_ip(IpPacketKind::Fup, payload).map(Some),
        "pad" => Packet::Pad,
        "psb" => Packet::Psb,
        "psbend" => Packet::Psbend,
        "ovf" => Packet::Ovf,
        "stop" => Packet::Stop,
        "tnt.8" => Packet::TntShort(parse_tnt(payload, 6)?),
        "tnt.64" => Packet::TntLong(parse_tnt(payload, 47)?),
        "pip" => {
            check_flags(&parts[1..], &["nr"])?;
            Packet::Pip { cr3: hex(parts[0])?, nr: flag_set(&parts[1..], "nr") }
        }
        "vmcs" => Packet::Vmcs(hex(payload)?),
        "mode.exec" => {
            check_flags(&parts, &["cs.d", "cs.l", "if"])?;
            Packet::ModeExec {
                csl: flag_set(&parts, "cs.l"),
                csd: flag_set(&parts, "cs.d"),
                iflag: flag_set(&parts, "if"),
            }
        }
        "mode.tsx" => {
            check_flags(&parts, &["intx", "abrt"])?;
            Packet::ModeTsx { intx: flag_set(&parts, "intx"), abort: flag_set(&parts, "abrt") }
        }
        "tsc" => Packet::Tsc(hex(payload)?),
        "mtc" => Packet::Mtc(hex_as(payload)?),
        "tma" => {
            let [ctc, fc] = parts[..] else { return Err("expected `ctc, fc`".into()) };
            Packet::Tma { ctc: hex_as(ctc)?, fc: hex_as(fc)? }
        }
        "cyc" => Packet::Cyc(hex(payload)?),
        "cbr" => Packet::Cbr(hex_as(payload)?),
        "mnt" => Packet::Mnt(hex(payload)?),
        "ptw" => {
            let (plc, rest) = split_colon(payload)?;
            let rest: Vec<&str> = rest.split(',').collect();
            check_flags(&rest[1..], &["ip"])?;
            let size = match hex(plc)? {
                0 => 4,
                1 => 8,
                _ => return Err("ptw payload code must be 0 (4 bytes) or 1 (8 bytes)".into()),
            };
            Packet::Ptw { payload: hex(rest[0])?, size, ip: flag_set(&rest[1..], "ip") }
        }
        "exstop" | "bep" => {
            check_flags(&parts, &["ip"])?;
            let ip = flag_set(&parts, "ip");
            if name == "exstop" {
                Packet::Exstop { ip }
            } else {
                Packet::Bep { ip }
            }
        }
        "mwait" => {
            let [hints, ext] = parts[..] else { return Err("expected `hints, ext`".into()) };
            Packet::Mwait { hints: hex_as(hints)?, ext: hex_as(ext)? }
        }
        "pwre" => {
            check_flags(&parts[1..], &["hw"])?;
            let (state, sub) = parts[0].trim().split_once('.').ok_or("expected `cS.U[, hw]`")?;
            let sub_state: u8 = sub.parse().map_err(|_| format!("bad sub C-state {sub:?}"))?;
            Packet::Pwre {
                state: c_state(state)?,
                sub_state: sub_state.wrapping_sub(1) & 0xf,
                hw: flag_set(&parts[1..], "hw"),
            }
        }
        "pwrx" => {
            let (reason, states) = split_colon(payload)?;
            let wake = match reason.trim() {
                "int" => 1,
                "st" => 4,
                "hw" => 8,
                other => hex_as(other)?,
            };
            let [last, deepest] = states.split(',').collect::<Vec<_>>()[..] else {
                return Err("expected `reason: cL, cD`".into());
            };
            Packet::Pwrx { last: c_state(last)?, deepest: c_state(deepest)?, wake }
        }
        "bbp" => {
            let [sz, kind] = parts[..] else { return Err("expected `sz: 4|8, type: T`".into()) };
            let size = match sz.trim() {
                "sz: 4" => BlockItemSize::Four,
                "sz: 8" => BlockItemSize::Eight,
                _ => return Err("expected `sz: 4` or `sz: 8`".into()),
            };
            let kind = kind.trim().strip_prefix("type:").ok_or("expected `type: T`")?;
            Packet::Bbp { size, kind: hex_as(kind)? }
        }
        "bip" => {
            let size = block.ok_or("bip outside a bbp block")?.payload_len() as u8;
            let (id, value) = split_colon(payload)?;
            Packet::Bip { id: hex_as(id)?, payload: hex(value)?, size }
        }
        "cfe" => {
            check_flags(&parts.get(2..).unwrap_or(&[]), &["ip"])?;
            let (Some(kind), Some(vector)) = (parts.first(), parts.get(1)) else {
                return Err("expected `type, vector[, ip]`".into());
            };
            Packet::Cfe { ip: flag_set(&parts[2..], "ip"), kind: hex_as(kind)?, vector: hex_as(vector)? }
        }
        "evd" => {
            let (kind, value) = split_colon(payload)?;
            Packet::Evd { kind: hex_as(kind)?, payload: hex(value)? }
        }
        "trig" => {
            let mut icnt = None;
            for part in &parts[1..] {
                if let Some(value) = part.trim().strip_prefix("icnt:") {
                    icnt = Some(hex_as(value)?);
                } else if !matches!(part.trim(), "mult" | "ip") {
                    return Err(format!("unknown flag {part:?}"));
                }
            }
            Packet::Trig { trbv: hex_as(parts[0])?, ip: flag_set(&parts[1..], "ip"), mult: flag_set(&parts[1..], "mult"), icnt }
        }
        other => return Err(format!("unknown packet {other:?}")),
    };
    Ok(Some(ScriptItem::Packet(packet)))
}

/// Parses a whole script.
pub fn parse(text: &str) -> Result<Vec<ScriptItem>, ScriptError> {
    let mut items = Vec::new();
    let mut block = None;
    for (index, line) in text.lines().enumerate() {
        let item = parse_line(line, block).map_err(|message| ScriptError { line: index + 1, message })?;
        if let Some(item) = item {
            block = match &item {
                ScriptItem::Packet(Packet::Bbp { size, .. }) => Some(*size),
                ScriptItem::Packet(Packet::Bip { .. } | Packet::Pad | Packet::Tsc(_) | Packet::Cyc(_)) => block,
                _ => None,
            };
            items.push(item);
        }
    }
    Ok(items)
}

/// Encodes parsed script items into bytes.
pub fn encode(items: &[ScriptItem]) -> Result<Vec<u8>, EncodeError> {
    let mut encoder = PacketEncoder::new();
    for item in items {
        match item {
            ScriptItem::Packet(packet) => {
                encoder.encode(packet)?;
            }
            ScriptItem::AutoIp(kind, ip) => {
                encoder.encode_ip(*kind, *ip);
            }
            ScriptItem::Raw(bytes) => encoder.append_raw(bytes),
        }
    }
    Ok(encoder.into_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::PacketDecoder;

    #[test]
    fn script_encodes_and_decodes() {
        let text = "psb\ntsc 1000\nmode.exec cs.l\npsbend\ntip.pge 401000\ntnt.8 !!.\ntip 1: ????????????1234\nraw 02 04\n";
        let bytes = encode(&parse(text).unwrap()).unwrap();
        let items: Vec<_> = PacketDecoder::new(&bytes).collect();
        assert_eq!(items.len(), 8);
        assert_eq!(items[4].as_ref().unwrap().1.ip().unwrap().ip, Some(0x401000));
        assert_eq!(items[6].as_ref().unwrap().1.ip().unwrap().ip, Some(0x401234));
        let error = items[7].as_ref().unwrap_err();
        assert_eq!(error.offset, bytes.len() - 2);
    }

    #[test]
    fn errors_name_the_line() {
        let error = parse("psb\nbogus 12\n").unwrap_err();
        assert_eq!(error.line, 2);
        assert!(parse("tnt.8 !!!!!!!").is_err());
        assert!(parse("bip 1: 2").is_err());
    }
}
