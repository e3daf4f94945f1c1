//! An inert program: memory and registers in buffers, threads that stop as
//! soon as they are resumed. It offers gdbstub the same capabilities as
//! [`super::live::ProcessTarget`] (so the same packets reach the same
//! parsers) and needs no process: the protocol side is fuzzed and tested
//! against it (`stub/fuzz`).

use std::collections::{BTreeSet, HashMap};
use std::os::fd::BorrowedFd;

use gdbstub::common::{Signal as GdbSignal, Tid};
use gdbstub::target::ext::auxv::Auxv;
use gdbstub::target::ext::base::multithread::{
    MultiThreadBase, MultiThreadResume, MultiThreadResumeOps, MultiThreadSchedulerLocking, MultiThreadSchedulerLockingOps,
    MultiThreadSingleStep, MultiThreadSingleStepOps,
};
use gdbstub::target::ext::base::single_register_access::{SingleRegisterAccess, SingleRegisterAccessOps};
use gdbstub::target::ext::breakpoints::{HwBreakpoint, HwWatchpoint, SwBreakpoint, WatchKind};
use gdbstub::target::ext::exec_file::ExecFile;
use gdbstub::target::ext::libraries::LibrariesSvr4;
use gdbstub::target::ext::thread_extra_info::{ThreadExtraInfo, ThreadExtraInfoOps};
use gdbstub::target::{TargetError, TargetResult};

use crate::arch::{RegNumber, Regs};
use crate::inferior::{copy_window, Inferior, MemoryRegion, StopReason};

/// Where the inert program's memory starts.
pub const MEMORY_START: u64 = 0x5555_5555_4000;

/// A program that never runs.
#[derive(Debug)]
pub struct InertTarget {
    pid: u32,
    threads: BTreeSet<u64>,
    registers: HashMap<u64, Regs>,
    memory: Vec<u8>,
    /// Its breakpoint table.
    session: crate::inferior::replay::ReplaySession,
    /// Threads resumed by the last resume actions.
    actions: BTreeSet<u64>,
    scheduler_locked: bool,
    /// The stop the last resume owes the client.
    stop: Option<StopReason>,
    killed: bool,
}

impl InertTarget {
    /// Process `pid` with `threads` (tids) and `memory` at [`MEMORY_START`].
    pub fn new(pid: u32, threads: &[u64], memory: Vec<u8>) -> Self {
        InertTarget {
            pid,
            threads: threads.iter().copied().collect(),
            registers: threads.iter().map(|&t| (t, Regs::default())).collect(),
            memory,
            session: crate::inferior::replay::ReplaySession::new(),
            actions: BTreeSet::new(),
            scheduler_locked: false,
            stop: None,
            killed: false,
        }
    }

    /// Whether the client killed it.
    pub fn killed(&self) -> bool {
        self.killed
    }

    fn window(&self, start: u64, len: usize) -> Option<std::ops::Range<usize>> {
        let offset = usize::try_from(start.checked_sub(MEMORY_START)?).ok()?;
        (offset < self.memory.len()).then(|| offset..offset.saturating_add(len).min(self.memory.len()))
    }
}

fn tid(thread: Tid) -> u64 {
    thread.get() as u64
}


impl Inferior for InertTarget {
    fn pid(&self) -> u32 {
        self.pid
    }

    fn start_session(&mut self) -> std::io::Result<()> {
        Ok(())
    }

    fn has_thread(&self, tid: u64) -> bool {
        self.threads.contains(&tid)
    }

    fn any_thread(&self) -> Option<u64> {
        self.threads.iter().copied().min()
    }

    fn stop_events(&self) -> Option<BorrowedFd<'_>> {
        None
    }

    fn poll_stop(&mut self) -> Option<StopReason> {
        self.stop.take()
    }

    fn interrupt(&mut self) {
        if self.stop.is_none() {
            let first = self.threads.first().copied().unwrap_or(self.pid as u64);
            self.stop = Some(StopReason::SignalWithThread { tid: Tid::new(first as usize).expect("tids are not 0"), signal: GdbSignal::SIGINT });
        }
    }

    fn memory_region(&self, address: u64) -> MemoryRegion {
        match self.window(address, 1) {
            Some(_) => MemoryRegion::Mapped { start: MEMORY_START, end: MEMORY_START + self.memory.len() as u64, readable: true, writable: false, executable: true, name: String::new() },
            None => MemoryRegion::Unknown,
        }
    }

    fn kill(&mut self) {
        self.killed = true;
    }

    fn detach(&mut self) {}
}

impl MultiThreadBase for InertTarget {
    fn read_registers(&mut self, regs: &mut Regs, thread: Tid) -> TargetResult<(), Self> {
        *regs = self.registers.get(&tid(thread)).cloned().ok_or(TargetError::NonFatal)?;
        Ok(())
    }

    fn write_registers(&mut self, regs: &Regs, thread: Tid) -> TargetResult<(), Self> {
        *self.registers.get_mut(&tid(thread)).ok_or(TargetError::NonFatal)? = regs.clone();
        Ok(())
    }

    fn support_single_register_access(&mut self) -> Option<SingleRegisterAccessOps<'_, Tid, Self>> {
        Some(self)
    }

    fn read_addrs(&mut self, start: u64, data: &mut [u8], _thread: Tid) -> TargetResult<usize, Self> {
        let window = self.window(start, data.len()).ok_or(TargetError::NonFatal)?;
        let n = window.len();
        data[..n].copy_from_slice(&self.memory[window]);
        Ok(n)
    }

    fn write_addrs(&mut self, start: u64, data: &[u8], _thread: Tid) -> TargetResult<(), Self> {
        let window = self.window(start, data.len()).filter(|w| w.len() == data.len()).ok_or(TargetError::NonFatal)?;
        self.memory[window].copy_from_slice(data);
        Ok(())
    }

    fn list_active_threads(&mut self, register: &mut dyn FnMut(Tid)) -> Result<(), Self::Error> {
        for &thread in &self.threads {
            register(Tid::new(thread as usize).ok_or(crate::inferior::InferiorError::InvalidRequest("thread 0".into()))?);
        }
        Ok(())
    }

    fn support_resume(&mut self) -> Option<MultiThreadResumeOps<'_, Self>> {
        Some(self)
    }

    fn support_thread_extra_info(&mut self) -> Option<ThreadExtraInfoOps<'_, Self>> {
        Some(self)
    }
}

impl ThreadExtraInfo for InertTarget {
    fn thread_extra_info(&self, _thread: Tid, buf: &mut [u8]) -> Result<usize, Self::Error> {
        Ok(copy_window(b"inert", 0, buf.len(), buf))
    }
}

impl SingleRegisterAccess<Tid> for InertTarget {
    fn read_register(&mut self, thread: Tid, reg: RegNumber, buf: &mut [u8]) -> TargetResult<usize, Self> {
        let bytes = self.registers.get(&tid(thread)).and_then(|r| r.register_bytes(reg.0)).ok_or(TargetError::NonFatal)?;
        Ok(copy_window(&bytes, 0, buf.len(), buf))
    }

    fn write_register(&mut self, thread: Tid, reg: RegNumber, value: &[u8]) -> TargetResult<(), Self> {
        let regs = self.registers.get_mut(&tid(thread)).ok_or(TargetError::NonFatal)?;
        regs.set_register(reg.0, value).map_err(|()| TargetError::NonFatal)
    }
}

impl MultiThreadResume for InertTarget {
    fn resume(&mut self) -> Result<(), Self::Error> {
        // Every resumed thread stops at once, the first of them reporting.
        let first = self.actions.iter().copied().find(|t| self.threads.contains(t));
        let first = first.or_else(|| (!self.scheduler_locked).then(|| self.threads.first().copied()).flatten());
        if let Some(thread) = first {
            self.stop = Some(StopReason::SignalWithThread { tid: Tid::new(thread as usize).ok_or(crate::inferior::InferiorError::InvalidRequest("thread 0".into()))?, signal: GdbSignal::SIGTRAP });
        }
        Ok(())
    }

    fn clear_resume_actions(&mut self) -> Result<(), Self::Error> {
        self.actions.clear();
        self.scheduler_locked = false;
        Ok(())
    }

    fn set_resume_action_continue(&mut self, thread: Tid, _signal: Option<GdbSignal>) -> Result<(), Self::Error> {
        self.actions.insert(tid(thread));
        Ok(())
    }

    fn support_single_step(&mut self) -> Option<MultiThreadSingleStepOps<'_, Self>> {
        Some(self)
    }

    fn support_scheduler_locking(&mut self) -> Option<MultiThreadSchedulerLockingOps<'_, Self>> {
        Some(self)
    }
}

impl MultiThreadSingleStep for InertTarget {
    fn set_resume_action_step(&mut self, thread: Tid, _signal: Option<GdbSignal>) -> Result<(), Self::Error> {
        self.actions.insert(tid(thread));
        Ok(())
    }
}

impl MultiThreadSchedulerLocking for InertTarget {
    fn set_resume_action_scheduler_lock(&mut self) -> Result<(), Self::Error> {
        self.scheduler_locked = true;
        Ok(())
    }
}

impl SwBreakpoint for InertTarget {
    fn add_sw_breakpoint(&mut self, addr: u64, _kind: usize) -> TargetResult<bool, Self> {
        if self.window(addr, 1).is_none() {
            return Ok(false);
        }
        self.session.breakpoints_mut().insert_software(addr);
        Ok(true)
    }

    fn remove_sw_breakpoint(&mut self, addr: u64, _kind: usize) -> TargetResult<bool, Self> {
        self.session.breakpoints_mut().remove_software(addr);
        Ok(true)
    }
}

impl HwBreakpoint for InertTarget {
    fn add_hw_breakpoint(&mut self, _addr: u64, _kind: usize) -> TargetResult<bool, Self> {
        Ok(false)
    }

    fn remove_hw_breakpoint(&mut self, _addr: u64, _kind: usize) -> TargetResult<bool, Self> {
        Ok(true)
    }
}

impl HwWatchpoint for InertTarget {
    fn add_hw_watchpoint(&mut self, _addr: u64, _len: u64, _kind: WatchKind) -> TargetResult<bool, Self> {
        Ok(false)
    }

    fn remove_hw_watchpoint(&mut self, _addr: u64, _len: u64, _kind: WatchKind) -> TargetResult<bool, Self> {
        Ok(true)
    }
}

impl ExecFile for InertTarget {
    fn get_exec_file(&self, _pid: Option<gdbstub::common::Pid>, offset: u64, length: usize, buf: &mut [u8]) -> TargetResult<usize, Self> {
        Ok(copy_window(b"/inert", offset, length, buf))
    }
}

impl Auxv for InertTarget {
    fn get_auxv(&self, offset: u64, length: usize, buf: &mut [u8]) -> TargetResult<usize, Self> {
        Ok(copy_window(&[0; 16], offset, length, buf))
    }
}

impl LibrariesSvr4 for InertTarget {
    fn get_libraries_svr4(&self, offset: u64, length: usize, buf: &mut [u8]) -> TargetResult<usize, Self> {
        Ok(copy_window(br#"<library-list-svr4 version="1.0"/>"#, offset, length, buf))
    }
}

crate::inferior::offer_fixed_extended_mode!(InertTarget);
