//! Breakpoints and watchpoints: entries of the session's table, which the
//! moves read. A trace of control flow alone has no data, so a watchpoint
//! could never trigger and is refused; a full-state recording knows every
//! write and read: up to four ranges are watched, as on the processor.

use gdbstub::target::ext::breakpoints::{HwBreakpoint, HwWatchpoint, SwBreakpoint, WatchKind};
use gdbstub::target::TargetResult;

use super::SavedTrace;
use crate::inferior::replay::DebugSlot;

impl SwBreakpoint for SavedTrace {
    fn add_sw_breakpoint(&mut self, addr: u64, _kind: usize) -> TargetResult<bool, Self> {
        self.session.breakpoints_mut().insert_software(addr);
        Ok(true)
    }

    fn remove_sw_breakpoint(&mut self, addr: u64, _kind: usize) -> TargetResult<bool, Self> {
        self.session.breakpoints_mut().remove_software(addr);
        Ok(true)
    }
}

impl HwBreakpoint for SavedTrace {
    fn add_hw_breakpoint(&mut self, addr: u64, _kind: usize) -> TargetResult<bool, Self> {
        Ok(self.session.breakpoints_mut().take_slot(DebugSlot { address: addr, len: 1, watch: None }).is_some())
    }

    fn remove_hw_breakpoint(&mut self, addr: u64, _kind: usize) -> TargetResult<bool, Self> {
        self.session.breakpoints_mut().free_slot(DebugSlot { address: addr, len: 1, watch: None });
        Ok(true)
    }
}

impl HwWatchpoint for SavedTrace {
    fn add_hw_watchpoint(&mut self, addr: u64, len: u64, kind: WatchKind) -> TargetResult<bool, Self> {
        if self.state.is_none() || len == 0 {
            return Ok(false);
        }
        Ok(self.session.breakpoints_mut().take_slot(DebugSlot { address: addr, len, watch: Some(kind) }).is_some())
    }

    fn remove_hw_watchpoint(&mut self, addr: u64, len: u64, kind: WatchKind) -> TargetResult<bool, Self> {
        let freed = self.session.breakpoints_mut().free_slot(DebugSlot { address: addr, len, watch: Some(kind) });
        Ok(freed.is_some() || self.state.is_none())
    }
}
