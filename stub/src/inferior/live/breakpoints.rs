//! The live process's breakpoints, entries of the session's table made
//! real: an `int3` over the original byte for a software one (every read
//! of the program's memory hides it), the four x86 debug registers loaded
//! into every thread for hardware breakpoints and watchpoints.

use gdbstub::target::ext::breakpoints::{HwBreakpoint, HwWatchpoint, SwBreakpoint, WatchKind};
use gdbstub::target::{TargetError, TargetResult};
use nix::sys::ptrace;
use nix::unistd::Pid;
use retrace_collector::process;

use super::{ProcessTarget, INT3};
use crate::inferior::replay::{DebugSlot, DEBUG_REGISTERS};
use crate::inferior::InferiorError;

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
    /// Loads the debug registers of every thread from the slots.
    pub(super) fn apply_debug_registers(&self) -> Result<(), InferiorError> {
        for tid in &self.threads {
            let write = |index: usize, value: u64| {
                ptrace::write_user(*tid, (DEBUGREG_OFFSET + index * 8) as ptrace::AddressType, value as i64)
            };
            // Disable first: an address may only change while its slot is off.
            write(7, 0).map_err(|errno| InferiorError::Process { what: format!("DR7 of thread {tid}"), errno })?;
            let slots = self.session.breakpoints().slots();
            for (i, slot) in slots.iter().enumerate() {
                if let Some(slot) = slot {
                    write(i, slot.address).map_err(|errno| InferiorError::Process { what: format!("DR{i} of thread {tid}"), errno })?;
                }
            }
            write(7, dr7(slots)).map_err(|errno| InferiorError::Process { what: format!("DR7 of thread {tid}"), errno })?;
        }
        Ok(())
    }

    fn add_slot(&mut self, slot: DebugSlot) -> TargetResult<bool, Self> {
        if self.session.breakpoints().slots().contains(&Some(slot)) {
            return Ok(true);
        }
        if self.session.breakpoints_mut().take_slot(slot).is_none() {
            return Ok(false);
        }
        if self.apply_debug_registers().is_err() {
            self.session.breakpoints_mut().free_slot(slot);
            let _ = self.apply_debug_registers();
            return Ok(false);
        }
        Ok(true)
    }

    fn remove_slot(&mut self, slot: DebugSlot) -> TargetResult<bool, Self> {
        if self.session.breakpoints_mut().free_slot(slot).is_some() {
            self.apply_debug_registers().map_err(|_| TargetError::NonFatal)?;
        }
        Ok(true)
    }

    /// Debug registers of a thread that appeared after they were set.
    pub fn init_thread_debug_registers(&self) {
        if self.session.breakpoints().slots().iter().any(Option::is_some) {
            let _ = self.apply_debug_registers();
        }
    }

    /// Puts every original byte back (before detaching).
    pub fn remove_all_breakpoints(&mut self) {
        for (address, original) in std::mem::take(&mut self.originals) {
            self.session.breakpoints_mut().remove_software(address);
            let _ = self.poke(address, &[original]);
        }
    }

    /// True when `address` holds one of our breakpoints.
    pub fn has_breakpoint(&self, address: u64) -> bool {
        self.session.breakpoints().has_software(address)
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
        if self.has_breakpoint(addr) {
            return Ok(true);
        }
        let mut original = [0u8; 1];
        if process::read_memory(self.pid, addr, &mut original) != 1 {
            return Ok(false);
        }
        self.poke(addr, &[INT3]).map_err(TargetError::Io)?;
        self.originals.insert(addr, original[0]);
        self.session.breakpoints_mut().insert_software(addr);
        Ok(true)
    }

    fn remove_sw_breakpoint(&mut self, addr: u64, _kind: usize) -> TargetResult<bool, Self> {
        self.session.breakpoints_mut().remove_software(addr);
        match self.originals.remove(&addr) {
            Some(original) => {
                self.poke(addr, &[original]).map_err(TargetError::Io)?;
                Ok(true)
            }
            None => Ok(true),
        }
    }
}
