//! The step records' encoding: each changed register as its number and
//! change, each write as its address difference, length and old bytes
//! (see the module documentation of [`super`]).

use retrace_decoder::leb128;

use crate::arch::{register_size, Regs};

/// How a changed register is kept in a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Change {
    /// A 64-bit register: the signed difference, LEB128.
    Difference,
    /// A 32-bit register: the bits that flipped, LEB128.
    Flipped,
    /// Wider ones: the new bytes.
    Whole(usize),
}

pub(super) fn change_of(n: usize) -> Change {
    match n {
        0..=16 | 57..=59 => Change::Difference,
        17..=23 | 32..=39 | 56 => Change::Flipped,
        _ => Change::Whole(register_size(n).expect("a register")),
    }
}

/// Register `n` (a 64- or 32-bit one) as a number.
pub(super) fn register_value(regs: &Regs, n: usize) -> u64 {
    match n {
        0..=15 => regs.gpr[n],
        16 => regs.rip,
        17 => u64::from(regs.eflags),
        18..=23 => u64::from(regs.segments[n - 18]),
        32..=39 => u64::from(regs.fpu[n - 32]),
        56 => u64::from(regs.mxcsr),
        57 => regs.orig_rax,
        58 => regs.fs_base,
        _ => regs.gs_base,
    }
}

pub(super) fn set_register_value(regs: &mut Regs, n: usize, value: u64) {
    let size = register_size(n).expect("a register");
    let _ = regs.set_register(n, &value.to_le_bytes()[..size]);
}

/// Grows `vec` for `more` items by an eighth of its size at a time, not
/// double (large vectors grow in place, by remapping).
pub(super) fn reserve<T>(vec: &mut Vec<T>, more: usize) {
    if vec.capacity() - vec.len() < more {
        vec.reserve_exact(more.max(vec.len() / 8).max(64));
    }
}

/// Reads records from one at a [`CHUNK`] boundary on.
#[derive(Clone)]
pub(super) struct Records<'a> {
    pub(super) bytes: &'a [u8],
    pub(super) at: usize,
    /// The previous write's address.
    pub(super) address: u64,
}

impl<'a> Records<'a> {
    pub(super) fn leb128(&mut self) -> u64 {
        leb128::get(self.bytes, &mut self.at).expect("the log's own records")
    }

    /// The next record: each changed register (its number and change),
    /// then each write (address, old bytes).
    pub(super) fn record(&mut self, mut register: impl FnMut(usize, RegisterChange<'a>), mut write: impl FnMut(u64, &'a [u8])) {
        let header = self.leb128();
        for _ in 0..header & 63 {
            let n = self.bytes[self.at] as usize;
            self.at += 1;
            let change = match change_of(n) {
                Change::Difference => RegisterChange::Difference(leb128::unzigzag(self.leb128())),
                Change::Flipped => RegisterChange::Flipped(self.leb128()),
                Change::Whole(size) => {
                    self.at += size;
                    RegisterChange::Whole(&self.bytes[self.at - size..self.at])
                }
            };
            register(n, change);
        }
        for _ in 0..header >> 6 {
            self.address = self.address.wrapping_add(leb128::unzigzag(self.leb128()) as u64);
            let len = self.leb128() as usize;
            self.at += len;
            write(self.address, &self.bytes[self.at - len..self.at]);
        }
    }

    pub(super) fn skip(&mut self) {
        self.record(|_, _| {}, |_, _| {});
    }
}

/// A register's change as a record keeps it.
#[derive(Debug, Clone, Copy)]
pub(super) enum RegisterChange<'a> {
    Difference(i64),
    Flipped(u64),
    Whole(&'a [u8]),
}
