//! The live process's breakpoints: software ones (an `int3` over the
//! original byte, which every read of the program's memory hides) and the
//! four x86 debug registers (hardware breakpoints and watchpoints, loaded
//! into every thread).

use gdbstub::target::ext::breakpoints::{HwBreakpoint, HwWatchpoint, SwBreakpoint, WatchKind};
use gdbstub::target::{TargetError, TargetResult};
use nix::sys::ptrace;
use nix::unistd::Pid;
use retrace_collector::process;

use super::{ProcessTarget, INT3};
use crate::inferior::replay::{Breakpoints, DEBUG_REGISTERS};
use crate::inferior::InferiorError;

/// One of the four x86 debug-address registers in use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DebugSlot {
    /// Address watched or breakpointed.
    pub address: u64,
    /// Length in bytes (1 for execution breakpoints).
    pub len: u64,
    /// `None` for an execution breakpoint.
    pub watch: Option<WatchKind>,
}

/// Offset of `u_debugreg` in `struct user` (x86-64).
const DEBUGREG_OFFSET: usize = 848;

/// DR7 for the slots: local enable, R/W and LEN fields per slot.
fn dr7(slots: &[Option<DebugSlot>; DEBUG_REGISTERS]) -> u64 {
    let mut value = 0u64;
    for (i, slot) in slots.iter().enumerate() {
        let Some(slot) = slot else { continue };
        let rw = match slot.watch {
            None => 0b00,
            Some(WatchKind::Write) => 0b01,
            Some(WatchKind::Read | WatchKind::ReadWrite) => 0b11,
        };
        let len = match (slot.watch, slot.len) {
            (None, _) | (_, 1) => 0b00,
            (_, 2) => 0b01,
            (_, 8) => 0b10,
            _ => 0b11,
        };
        value |= 1 << (2 * i);
        value |= (rw | len << 2) << (16 + 4 * i);
    }
    value
}

/// Which debug slot triggered, from DR6 (clearing DR6).
pub fn triggered_slot(tid: Pid) -> Option<usize> {
    let dr6 = ptrace::read_user(tid, (DEBUGREG_OFFSET + 6 * 8) as ptrace::AddressType).ok()? as u64;
    let _ = ptrace::write_user(tid, (DEBUGREG_OFFSET + 6 * 8) as ptrace::AddressType, 0);
    (0..4).find(|i| dr6 >> i & 1 == 1)
}

impl ProcessTarget {
    /// What can stop a move through the history: the breakpoints (software
    /// and debug registers) and watchpoints set now.
    pub(super) fn breakpoint_table(&self) -> Breakpoints {
        let mut table = Breakpoints { software: self.breakpoints.keys().copied().collect(), ..Default::default() };
        for slot in self.debug_slots.iter().flatten() {
            match slot.watch {
                None => {
                    table.hardware.insert(slot.address);
                }
                Some(kind) => table.watches.push((slot.address..slot.address + slot.len, kind)),
            }
        }
        table
    }

    /// Loads the debug registers of every thread from the slots.
    pub(super) fn apply_debug_registers(&self) -> Result<(), InferiorError> {
        for tid in &self.threads {
            let write = |index: usize, value: u64| {
                ptrace::write_user(*tid, (DEBUGREG_OFFSET + index * 8) as ptrace::AddressType, value as i64)
            };
            // Disable first: an address may only change while its slot is off.
            write(7, 0).map_err(|errno| InferiorError::Process { what: format!("DR7 of thread {tid}"), errno })?;
            for (i, slot) in self.debug_slots.iter().enumerate() {
                if let Some(slot) = slot {
                    write(i, slot.address).map_err(|errno| InferiorError::Process { what: format!("DR{i} of thread {tid}"), errno })?;
                }
            }
            write(7, dr7(&self.debug_slots)).map_err(|errno| InferiorError::Process { what: format!("DR7 of thread {tid}"), errno })?;
        }
        Ok(())
    }

    fn add_slot(&mut self, slot: DebugSlot) -> TargetResult<bool, Self> {
        if self.debug_slots.contains(&Some(slot)) {
            return Ok(true);
        }
        let Some(free) = self.debug_slots.iter().position(Option::is_none) else { return Ok(false) };
        self.debug_slots[free] = Some(slot);
        if self.apply_debug_registers().is_err() {
            self.debug_slots[free] = None;
            let _ = self.apply_debug_registers();
            return Ok(false);
        }
        Ok(true)
    }

    fn remove_slot(&mut self, slot: DebugSlot) -> TargetResult<bool, Self> {
        if let Some(i) = self.debug_slots.iter().position(|s| *s == Some(slot)) {
            self.debug_slots[i] = None;
            self.apply_debug_registers().map_err(|_| TargetError::NonFatal)?;
        }
        Ok(true)
    }

    /// Debug registers of a thread that appeared after they were set.
    pub fn init_thread_debug_registers(&self) {
        if self.debug_slots.iter().any(Option::is_some) {
            let _ = self.apply_debug_registers();
        }
    }

    /// Puts every original byte back (before detaching).
    pub fn remove_all_breakpoints(&mut self) {
        for (address, original) in std::mem::take(&mut self.breakpoints) {
            let _ = self.poke(address, &[original]);
        }
    }

    /// True when `address` holds one of our breakpoints.
    pub fn has_breakpoint(&self, address: u64) -> bool {
        self.breakpoints.contains_key(&address)
    }
}

impl HwBreakpoint for ProcessTarget {
    fn add_hw_breakpoint(&mut self, addr: u64, _kind: usize) -> TargetResult<bool, Self> {
        self.add_slot(DebugSlot { address: addr, len: 1, watch: None })
    }

    fn remove_hw_breakpoint(&mut self, addr: u64, _kind: usize) -> TargetResult<bool, Self> {
        self.remove_slot(DebugSlot { address: addr, len: 1, watch: None })
    }
}

impl HwWatchpoint for ProcessTarget {
    fn add_hw_watchpoint(&mut self, addr: u64, len: u64, kind: WatchKind) -> TargetResult<bool, Self> {
        // x86 watches 1, 2, 4 or 8 aligned bytes per slot.
        if !matches!(len, 1 | 2 | 4 | 8) || addr % len != 0 {
            return Ok(false);
        }
        self.add_slot(DebugSlot { address: addr, len, watch: Some(kind) })
    }

    fn remove_hw_watchpoint(&mut self, addr: u64, len: u64, kind: WatchKind) -> TargetResult<bool, Self> {
        self.remove_slot(DebugSlot { address: addr, len, watch: Some(kind) })
    }
}

impl SwBreakpoint for ProcessTarget {
    fn add_sw_breakpoint(&mut self, addr: u64, _kind: usize) -> TargetResult<bool, Self> {
        if self.breakpoints.contains_key(&addr) {
            return Ok(true);
        }
        let mut original = [0u8; 1];
        if process::read_memory(self.pid, addr, &mut original) != 1 {
            return Ok(false);
        }
        self.poke(addr, &[INT3]).map_err(TargetError::Io)?;
        self.breakpoints.insert(addr, original[0]);
        Ok(true)
    }

    fn remove_sw_breakpoint(&mut self, addr: u64, _kind: usize) -> TargetResult<bool, Self> {
        match self.breakpoints.remove(&addr) {
            Some(original) => {
                self.poke(addr, &[original]).map_err(TargetError::Io)?;
                Ok(true)
            }
            None => Ok(true),
        }
    }
}
