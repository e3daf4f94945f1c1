//! The record forms besides the long one (the tag, `at`'s difference, the
//! fields): which of an instruction's records take a short, compact or
//! stack form, and their tags, which the reader dispatches on.

use super::record::{piece, StateRecord};
use crate::leb128;

/// The compact tags (see the format's documentation): an instruction's
/// one register piece (`0x80 | step << 5 | piece`, step 0–3, piece 0–31),
/// one general register and the flags, a step on (`0x30 | register`),
/// and an 8-byte store of a general register's value, a step on (`0x60 |
/// register`).
pub(super) const COMPACT_ONE_PIECE: u8 = 0x80;
pub(super) const COMPACT_WITH_FLAGS: u8 = 0x30;
pub(super) const COMPACT_REGISTER_STORED: u8 = 0x60;

/// The stack forms (`0x78 | load << 1 | step`, step 0 or 1): an 8-byte
/// store (its bytes follow) or load at the signed difference from the
/// thread's `rsp` as its records last gave it, not from the last address
/// (which stays, for the next access elsewhere).
pub(super) const STACK_ACCESS: u8 = 0x78;

/// Bytes of `value` as a signed LEB128 number.
pub(super) fn signed_len(value: i64) -> u32 {
    (64 - leb128::zigzag(value).leading_zeros()).max(1).div_ceil(7)
}

/// `record`'s stack form, `step` after the thread's last `at`: an 8-byte
/// access whose address is shorter to write from `rsp` than from `last`.
pub(super) fn stack_form(record: &StateRecord<'_>, step: u64, rsp: u64, last: u64) -> Option<(u8, u64)> {
    let (address, load) = match record {
        StateRecord::Wrote { by_instruction: true, address, bytes, .. } if bytes.len() == 8 => (*address, 0),
        StateRecord::Read { address, size: 8, .. } => (*address, 1),
        _ => return None,
    };
    let shorter = signed_len(address.wrapping_sub(rsp) as i64) < signed_len(address.wrapping_sub(last) as i64);
    (step <= 1 && shorter).then_some((STACK_ACCESS | load << 1 | step as u8, address))
}

/// An instruction's record in a compact form.
pub(super) enum Compact {
    /// The tag, then each piece's difference (the pieces are the tag's,
    /// all of the record's).
    Pieces(u8),
    /// The tag, then the address difference (the bytes are the
    /// register's value).
    RegisterStored(u8),
}

/// `record`'s compact form, `step` after the thread's last `at`, with
/// the thread's pieces as last written (`last`), if it has one.
pub(super) fn compact_form(record: &StateRecord<'_>, step: u64, last: &[u64; piece::COUNT]) -> Option<Compact> {
    match record {
        StateRecord::Registers { by_instruction: true, changes, .. } => match changes[..] {
            [(p, _)] if p < 32 && step <= 3 => Some(Compact::Pieces(COMPACT_ONE_PIECE | (step as u8) << 5 | p)),
            [(p, _), (piece::RFLAGS, _)] if p < 16 && step == 1 => Some(Compact::Pieces(COMPACT_WITH_FLAGS | p)),
            _ => None,
        },
        StateRecord::Wrote { by_instruction: true, bytes, .. } if step == 1 && bytes.len() == 8 => {
            let value = u64::from_le_bytes(bytes[..].try_into().ok()?);
            let p = piece::GENERAL.clone().find(|&p| last[p as usize] == value)?;
            Some(Compact::RegisterStored(COMPACT_REGISTER_STORED | p))
        }
        _ => None,
    }
}

/// The short tags (see the format's documentation): an instruction's
/// registers (`0x10 | step << 3 | count`, 1–7 pieces), store (`0x20 | size
/// code << 1 | step`) or load (`0x28 | size code << 1 | step`), where `step`
/// (0 or 1) is `at`'s difference and the size code 0–3 stands for 1, 2, 4
/// or 8 bytes.
pub(super) const SHORT_REGISTERS: u8 = 0x10;
pub(super) const SHORT_WROTE: u8 = 0x20;
pub(super) const SHORT_READ: u8 = 0x28;

pub(super) fn size_code(size: u64) -> Option<u8> {
    match size {
        1 => Some(0),
        2 => Some(1),
        4 => Some(2),
        8 => Some(3),
        _ => None,
    }
}

/// `record`'s short tag, `step` after the thread's last `at`, if it has one.
pub(super) fn short_tag(record: &StateRecord<'_>, step: u64) -> Option<u8> {
    let step = u8::try_from(step).ok().filter(|&s| s <= 1)?;
    match record {
        StateRecord::Registers { by_instruction: true, changes, .. } => {
            let count = changes.iter().filter(|(p, _)| (*p as usize) < piece::COUNT).count();
            (1..=7).contains(&count).then(|| SHORT_REGISTERS | step << 3 | count as u8)
        }
        StateRecord::Wrote { by_instruction: true, bytes, .. } => Some(SHORT_WROTE | size_code(bytes.len() as u64)? << 1 | step),
        StateRecord::Read { size, .. } => Some(SHORT_READ | size_code(*size)? << 1 | step),
        _ => None,
    }
}

/// Each piece of `changes` (those that exist) as its number and the
/// signed difference from its last value, which it becomes.
pub(super) fn put_pieces(out: &mut Vec<u8>, last: &mut [u64; piece::COUNT], changes: &[(u8, u64)]) {
    for &(p, value) in changes.iter().filter(|(p, _)| (*p as usize) < piece::COUNT) {
        out.push(p);
        let slot = &mut last[p as usize];
        leb128::put_signed(out, value.wrapping_sub(*slot) as i64);
        *slot = value;
    }
}
