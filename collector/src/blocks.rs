//! Branch stops, the pieces every recorder that runs a thread block by block
//! shares (the software backend, and retrace-stub's recorded continues): a
//! thread runs freely through a straight run of instructions to the
//! branch that ends it, where an `int3` the program never sees stops it;
//! there the branch is emulated from the registers (no #DB trap) or, when
//! it cannot be, single-stepped.
//!
//! - [`Block`] and [`discover`]: the instructions from an address to the
//!   next one that transfers control;
//! - [`Int3s`]: the breakpoints' original bytes, put back on demand and
//!   hidden from reads;
//! - [`take_branch`]: the branch at a stop, emulated on the stopped thread.

use std::collections::HashMap;

use nix::errno::Errno;
use nix::sys::ptrace;
use nix::unistd::Pid;
use retrace_decoder::x86::{classify, ExecMode, FlowKind, InsnInfo};

use crate::emulate::{emulate_branch, Registers};
use crate::process;

/// The `int3` opcode.
pub const INT3: u8 = 0xcc;

/// The most instructions a block holds; a longer straight run is not a
/// block (its thread is single-stepped).
pub const MAX_BLOCK: usize = 4096;

/// A straight run of instructions ending at one that transfers control
/// (or at an address the caller wants a stop at).
#[derive(Debug, Clone)]
pub struct Block {
    /// The instructions before the end, in order.
    pub body: Vec<(u64, InsnInfo)>,
    /// Address of the ending instruction, where the breakpoint goes.
    pub end: u64,
    /// The ending instruction.
    pub end_insn: InsnInfo,
    /// Its original bytes (from `end`, as many as were readable).
    pub end_bytes: [u8; 16],
}

/// The block starting at `start`, its code read by `read` (which fills
/// what it can and says how much, the program's own bytes, breakpoints
/// hidden). It also ends before any instruction `ends_at` names (where the
/// caller has a stop of its own). `None` when code cannot be read or
/// decoded, or the run is longer than [`MAX_BLOCK`].
pub fn discover(start: u64, mut read: impl FnMut(u64, &mut [u8]) -> usize, mut ends_at: impl FnMut(u64) -> bool) -> Option<Block> {
    let mut body = Vec::new();
    let mut ip = start;
    let mut bytes = [0u8; 16];
    while body.len() < MAX_BLOCK {
        let n = read(ip, &mut bytes);
        let insn = classify(&bytes[..n], ip, ExecMode::Bits64)?;
        if insn.kind != FlowKind::Other || (ip != start && ends_at(ip)) {
            return Some(Block { body, end: ip, end_insn: insn, end_bytes: bytes });
        }
        body.push((ip, insn));
        ip += insn.len as u64;
    }
    None
}

/// Breakpoints of a recorder's own, by address, with the bytes they hide.
#[derive(Debug, Default)]
pub struct Int3s {
    original: HashMap<u64, u8>,
}

fn set_byte(pid: Pid, address: u64, byte: u8) -> Result<(), Errno> {
    let word = ptrace::read(pid, address as ptrace::AddressType)? as u64;
    ptrace::write(pid, address as ptrace::AddressType, ((word & !0xff) | byte as u64) as libc::c_long)
}

impl Int3s {
    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.original.is_empty()
    }

    /// Puts one at `address` in `pid`'s memory (nothing if it is there).
    pub fn insert(&mut self, pid: Pid, address: u64) -> Result<(), Errno> {
        if self.original.contains_key(&address) {
            return Ok(());
        }
        let word = ptrace::read(pid, address as ptrace::AddressType)? as u64;
        ptrace::write(pid, address as ptrace::AddressType, ((word & !0xff) | INT3 as u64) as libc::c_long)?;
        self.original.insert(address, word as u8);
        Ok(())
    }

    /// Gives `address` its original byte for a while (a step over it),
    /// keeping it known; [`Int3s::rearm`] puts the `int3` back.
    pub fn lift(&self, pid: Pid, address: u64) -> Result<(), Errno> {
        match self.original.get(&address) {
            Some(&byte) => set_byte(pid, address, byte),
            None => Ok(()),
        }
    }

    /// Puts back the `int3` at `address` after [`Int3s::lift`].
    pub fn rearm(&self, pid: Pid, address: u64) -> Result<(), Errno> {
        if self.original.contains_key(&address) {
            set_byte(pid, address, INT3)?;
        }
        Ok(())
    }

    /// Gives every address its original byte in `pid` (also a forked
    /// child's copy of the memory), keeping them known.
    pub fn put_back_in(&self, pid: Pid) {
        for (&address, &byte) in &self.original {
            let _ = set_byte(pid, address, byte);
        }
    }

    /// Gives every address its original byte and forgets them all.
    pub fn remove_all(&mut self, pid: Pid) {
        self.put_back_in(pid);
        self.original.clear();
    }

    /// Forgets them all without touching memory (the address space is
    /// gone: `execve`).
    pub fn forget(&mut self) {
        self.original.clear();
    }

    /// Reads `pid`'s memory at `address` into `buf` as the program holds
    /// it, without these breakpoints; returns how many bytes were read.
    pub fn read_hidden(&self, pid: Pid, address: u64, buf: &mut [u8]) -> usize {
        let n = crate::process::read_memory(pid, address, buf);
        self.hide(address, &mut buf[..n]);
        n
    }

    /// Replaces in `buf`, read from `address`, every `int3` of ours with
    /// the program's byte.
    pub fn hide(&self, address: u64, buf: &mut [u8]) {
        if self.original.is_empty() {
            return;
        }
        for (i, byte) in buf.iter_mut().enumerate() {
            if let Some(&original) = self.original.get(&(address + i as u64)) {
                *byte = original;
            }
        }
    }
}

/// The thread `tid` stands at `block.end` with `regs` (its `rip` at the
/// `int3` or past it): the branch is emulated on it — registers set, a call's return address
/// pushed — and the address it continues at returned. `None` when it must
/// be single-stepped instead (not a near branch emulated exactly, memory
/// unreadable, or it touches memory and `memory` is false: a hardware
/// watchpoint would miss the access); `regs` are unchanged then.
pub fn take_branch(tid: Pid, block: &Block, regs: &mut libc::user_regs_struct, memory: bool) -> Result<Option<u64>, Errno> {
    let mut read_u64 = |address: u64| {
        let mut word = [0u8; 8];
        (memory && process::read_memory(tid, address, &mut word) == 8).then(|| u64::from_le_bytes(word))
    };
    let Some(effect) = emulate_branch(&block.end_bytes, block.end, &Registers::from_user(regs), &mut read_u64) else { return Ok(None) };
    if let Some(value) = effect.push {
        let target = effect.rsp.expect("a push moves rsp");
        if !memory || process::write_memory(tid, target, &value.to_le_bytes()) != 8 {
            return Ok(None);
        }
    }
    regs.rip = effect.next_ip;
    if let Some(rsp) = effect.rsp {
        regs.rsp = rsp;
    }
    if let Some(rcx) = effect.rcx {
        regs.rcx = rcx;
    }
    ptrace::setregs(tid, *regs)?;
    Ok(Some(effect.next_ip))
}
