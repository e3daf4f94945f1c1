//! The one breakpoint table of a debugged program: software breakpoints
//! by address, and the four x86 debug registers (hardware breakpoints and
//! watchpoints). A live process loads the slots into its threads and puts
//! an `int3` at each software address; a replay only reads the table.

use std::collections::BTreeSet;
use std::ops::Range;

use gdbstub::target::ext::breakpoints::WatchKind;

/// The processor's debug registers: hardware breakpoints and watchpoints
/// at once, live and on a replay alike.
pub const DEBUG_REGISTERS: usize = 4;

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

impl DebugSlot {
    /// The bytes it covers.
    pub fn range(&self) -> Range<u64> {
        self.address..self.address.saturating_add(self.len)
    }
}

/// What can stop a move: breakpoints (software and hardware, by address)
/// and watchpoints.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Breakpoints {
    software: BTreeSet<u64>,
    slots: [Option<DebugSlot>; DEBUG_REGISTERS],
}

impl Breakpoints {
    /// A software breakpoint at `address`: whether it is new.
    pub fn insert_software(&mut self, address: u64) -> bool {
        self.software.insert(address)
    }

    /// Removes the software breakpoint at `address`: whether one was there.
    pub fn remove_software(&mut self, address: u64) -> bool {
        self.software.remove(&address)
    }

    /// Removes every software breakpoint (a new program image holds none).
    pub fn clear_software(&mut self) {
        self.software.clear();
    }

    /// Whether a software breakpoint is at `address`.
    pub fn has_software(&self, address: u64) -> bool {
        self.software.contains(&address)
    }

    /// Takes a debug register for `slot`: its index (the one it holds
    /// already, if it is set), `None` when all four are taken.
    pub fn take_slot(&mut self, slot: DebugSlot) -> Option<usize> {
        if let Some(index) = self.slots.iter().position(|s| *s == Some(slot)) {
            return Some(index);
        }
        let free = self.slots.iter().position(Option::is_none)?;
        self.slots[free] = Some(slot);
        Some(free)
    }

    /// Frees the debug register holding `slot`: its index, if one did.
    pub fn free_slot(&mut self, slot: DebugSlot) -> Option<usize> {
        let index = self.slots.iter().position(|s| *s == Some(slot))?;
        self.slots[index] = None;
        Some(index)
    }

    /// Frees every debug register.
    pub fn free_all_slots(&mut self) {
        self.slots = [None; DEBUG_REGISTERS];
    }

    /// The debug registers, as the processor holds them.
    pub fn slots(&self) -> &[Option<DebugSlot>; DEBUG_REGISTERS] {
        &self.slots
    }

    /// Every breakpoint address, software and hardware, sorted.
    pub fn addresses(&self) -> Vec<u64> {
        let hardware = self.slots.iter().flatten().filter(|s| s.watch.is_none()).map(|s| s.address);
        let all: BTreeSet<u64> = self.software.iter().copied().chain(hardware).collect();
        all.into_iter().collect()
    }

    /// Whether a hardware breakpoint is at `pc`.
    pub fn has_hardware(&self, pc: u64) -> bool {
        self.slots.iter().flatten().any(|s| s.watch.is_none() && s.address == pc)
    }

    /// The watchpoints: each range and how it is watched.
    pub fn watches(&self) -> impl Iterator<Item = (Range<u64>, WatchKind)> + '_ {
        self.slots.iter().flatten().filter_map(|s| Some((s.range(), s.watch?)))
    }

    /// Whether a watchpoint is set.
    pub fn watching(&self) -> bool {
        self.watches().next().is_some()
    }

    /// The ranges watched for writes (write and access watchpoints) and for
    /// reads (read and access watchpoints).
    pub(super) fn watched(&self) -> (Vec<Range<u64>>, Vec<Range<u64>>) {
        let ranges = |wanted: WatchKind| self.watches().filter(|(_, kind)| *kind == wanted || *kind == WatchKind::ReadWrite).map(|(range, _)| range).collect();
        (ranges(WatchKind::Write), ranges(WatchKind::Read))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn four_debug_registers_shared_by_hardware_breakpoints_and_watchpoints() {
        let mut table = Breakpoints::default();
        let at = |address: u64, watch: Option<WatchKind>| DebugSlot { address, len: if watch.is_some() { 8 } else { 1 }, watch };
        assert_eq!(table.take_slot(at(0x10, None)), Some(0));
        assert_eq!(table.take_slot(at(0x20, Some(WatchKind::Write))), Some(1));
        assert_eq!(table.take_slot(at(0x10, None)), Some(0), "set again: the slot it holds");
        assert_eq!(table.take_slot(at(0x30, Some(WatchKind::Read))), Some(2));
        assert_eq!(table.take_slot(at(0x40, Some(WatchKind::ReadWrite))), Some(3));
        assert_eq!(table.take_slot(at(0x50, None)), None, "all four taken");
        table.insert_software(0x18);
        assert_eq!(table.addresses(), vec![0x10, 0x18]);
        assert!(table.has_hardware(0x10) && !table.has_hardware(0x20));
        assert_eq!(table.watched(), (vec![0x20..0x28, 0x40..0x48], vec![0x30..0x38, 0x40..0x48]));
        assert_eq!(table.free_slot(at(0x20, Some(WatchKind::Write))), Some(1));
        assert_eq!(table.take_slot(at(0x50, None)), Some(1), "a freed slot is reused");
        table.free_all_slots();
        assert!(!table.watching());
        assert_eq!(table.addresses(), vec![0x18]);
    }
}
