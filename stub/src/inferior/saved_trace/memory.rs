//! What the debugger reads and writes: registers, memory and threads at the
//! position (the PC alone and the unchanging pages for a control-flow
//! trace; every register and byte for a full-state recording, where a
//! write diverts the thread into a stand-in process), the library list,
//! the auxiliary vector and the program's path.

use std::path::Path;

use gdbstub::common::Tid;
use gdbstub::target::ext::auxv::Auxv;
use gdbstub::target::ext::base::multithread::{MultiThreadBase, MultiThreadResumeOps};
use gdbstub::target::ext::base::single_register_access::{SingleRegisterAccess, SingleRegisterAccessOps};
use gdbstub::target::ext::exec_file::ExecFile;
use gdbstub::target::ext::libraries::LibrariesSvr4;
use gdbstub::target::{TargetError, TargetResult};

use super::{tid, unchanging_bytes, SavedTrace, RENDEZVOUS_PAGE};
use crate::arch::{RegNumber, Regs};
use crate::inferior::diversion::Diversion;
use crate::inferior::libraries::{library_list_xml, link_map, rendezvous_address, ReadMemory};
use crate::inferior::recorded_state::RecordedState;
use crate::inferior::scratch::Scratch;
use crate::inferior::timeline::Timeline;
use crate::inferior::{copy_window, InferiorError};

/// The memory at `position` as a full-state replay shows it: the
/// debugger's own, what it wrote there, the recording's.
pub(super) fn past_bytes(state: &RecordedState, timeline: &Timeline, scratch: &Scratch, position: u64, address: u64, buf: &mut [u8]) -> usize {
    if let Some(n) = scratch.read_allocated(address, buf) {
        return n;
    }
    let n = state.memory_at(timeline, position, address, buf);
    scratch.overlay(address, buf, n)
}

/// Whether `a` and `b` are the same registers as far as running code goes
/// (the debugger restored what it read).
pub(super) fn same_registers(a: &Regs, b: &Regs) -> bool {
    const STATUS_FLAGS: u32 = 0xcd5;
    a.gpr == b.gpr && a.rip == b.rip && a.eflags & STATUS_FLAGS == b.eflags & STATUS_FLAGS
}


impl MultiThreadBase for SavedTrace {
    fn read_registers(&mut self, regs: &mut Regs, thread: Tid) -> TargetResult<(), Self> {
        let index = self.timeline.thread_of(tid(thread)).ok_or(TargetError::NonFatal)?;
        if let Some((_, diversion)) = self.diversion.as_ref().filter(|(diverted, _)| *diverted == tid(thread)) {
            *regs = diversion.registers().map_err(|e| {
                tracing::warn!("{e}");
                TargetError::NonFatal
            })?;
            return Ok(());
        }
        if let Some(known) = self.state.as_ref().and_then(|state| state.registers_at(&self.timeline, tid(thread), self.position())) {
            *regs = known;
            return Ok(());
        }
        *regs = match self.timeline.next_pc_of_thread(self.position(), index) {
            Some(pc) => Regs::only_pc(pc),
            // It runs no more in the history: where it stands is not known.
            None => Regs { unavailable: u128::MAX, ..Regs::default() },
        };
        Ok(())
    }

    /// On a full-state replay, registers other than the recorded ones
    /// divert the thread: code run from here runs in a stand-in process
    /// (see [`Diversion`]).
    fn write_registers(&mut self, regs: &Regs, thread: Tid) -> TargetResult<(), Self> {
        let (position, tid) = (self.position(), tid(thread));
        let SavedTrace { state: Some(state), timeline, scratch, diversion, modules, .. } = self else { return Err(TargetError::NonFatal) };
        match diversion {
            Some((diverted, stand_in)) if *diverted == tid => stand_in.set_registers(regs).map_err(|e| {
                tracing::warn!("{e}");
                TargetError::NonFatal
            }),
            Some(_) => Err(TargetError::NonFatal),
            None => {
                let recorded = state.registers_at(timeline, tid, position).ok_or(TargetError::NonFatal)?;
                if same_registers(regs, &recorded) {
                    return Ok(());
                }
                let program = modules.first().ok_or(TargetError::NonFatal)?;
                let mut source = |address: u64, buf: &mut [u8]| past_bytes(state, timeline, scratch, position, address, buf);
                match Diversion::start(Path::new(&program.path), regs, &mut source) {
                    Ok(stand_in) => {
                        tracing::debug!(tid, position, "diversion from the recorded past begins");
                        *diversion = Some((tid, stand_in));
                        Ok(())
                    }
                    Err(e) => {
                        tracing::warn!("code cannot run in the past here: {e}");
                        Err(TargetError::NonFatal)
                    }
                }
            }
        }
    }

    fn support_single_register_access(&mut self) -> Option<SingleRegisterAccessOps<'_, Tid, Self>> {
        Some(self)
    }

    fn read_addrs(&mut self, start: u64, data: &mut [u8], _thread: Tid) -> TargetResult<usize, Self> {
        // Only what cannot have changed, and the dynamic linker's rendezvous.
        if let Some(bytes) = self.rendezvous.as_ref().filter(|page| RENDEZVOUS_PAGE <= start && start < RENDEZVOUS_PAGE + page.len() as u64) {
            let from = (start - RENDEZVOUS_PAGE) as usize;
            let n = data.len().min(bytes.len() - from);
            data[..n].copy_from_slice(&bytes[from..from + n]);
            return Ok(n);
        }
        if let Some(n) = self.diversion.as_ref().and_then(|(_, d)| d.read(start, data)) {
            return Ok(n);
        }
        if let Some(state) = &self.state {
            let n = past_bytes(state, &self.timeline, &self.scratch, self.position(), start, data);
            return if n == 0 { Err(TargetError::NonFatal) } else { Ok(n) };
        }
        unchanging_bytes(&self.unchanging, start, data).ok_or(TargetError::NonFatal)
    }

    /// On a full-state replay: into the debugger's memory, or over the
    /// program's past until the next move.
    fn write_addrs(&mut self, start: u64, data: &[u8], _thread: Tid) -> TargetResult<(), Self> {
        let position = self.position();
        let SavedTrace { state: Some(state), timeline, scratch, diversion, .. } = self else { return Err(TargetError::NonFatal) };
        scratch.write(start, data);
        if let Some((_, diversion)) = diversion {
            diversion.write(start, data, &mut |address, buf| past_bytes(state, timeline, scratch, position, address, buf));
        }
        Ok(())
    }

    /// The threads as they were at the position: begun, and not ended.
    fn list_active_threads(&mut self, register: &mut dyn FnMut(Tid)) -> Result<(), Self::Error> {
        let position = self.position();
        for (index, thread) in self.timeline.threads().iter().enumerate() {
            if self.thread_exists_at(index, position) {
                register(Tid::new(thread.tid as usize).ok_or(InferiorError::InvalidRequest("thread 0".into()))?);
            }
        }
        Ok(())
    }

    fn support_resume(&mut self) -> Option<MultiThreadResumeOps<'_, Self>> {
        Some(self)
    }
}

impl SingleRegisterAccess<Tid> for SavedTrace {
    fn read_register(&mut self, thread: Tid, reg: RegNumber, buf: &mut [u8]) -> TargetResult<usize, Self> {
        let mut regs = Regs::default();
        self.read_registers(&mut regs, thread)?;
        if !regs.is_available(reg.0) {
            return Ok(0); // `xx…`
        }
        let bytes = regs.register_bytes(reg.0).ok_or(TargetError::NonFatal)?;
        Ok(copy_window(&bytes, 0, buf.len(), buf))
    }

    fn write_register(&mut self, thread: Tid, reg: RegNumber, value: &[u8]) -> TargetResult<(), Self> {
        let mut regs = Regs::default();
        self.read_registers(&mut regs, thread)?;
        regs.set_register(reg.0, value).map_err(|()| TargetError::NonFatal)?;
        self.write_registers(&regs, thread)
    }
}

impl ExecFile for SavedTrace {
    fn get_exec_file(&self, _pid: Option<gdbstub::common::Pid>, offset: u64, length: usize, buf: &mut [u8]) -> TargetResult<usize, Self> {
        let path = self.modules.first().map_or("", |m| m.path.as_str());
        Ok(copy_window(path.as_bytes(), offset, length, buf))
    }
}

impl Auxv for SavedTrace {
    fn get_auxv(&self, offset: u64, length: usize, buf: &mut [u8]) -> TargetResult<usize, Self> {
        Ok(copy_window(&self.auxv, offset, length, buf))
    }
}

/// A full-state replay's memory at a position, as the library list reads
/// it.
struct RecordedMemory<'a> {
    state: &'a RecordedState,
    timeline: &'a Timeline,
    position: u64,
}

impl ReadMemory for RecordedMemory<'_> {
    fn read(&self, address: u64, buf: &mut [u8]) -> bool {
        self.state.memory_at(self.timeline, self.position, address, buf) == buf.len()
    }
}

impl SavedTrace {
    /// The libraries loaded at the position: on a full-state replay, the
    /// dynamic linker's own link map in the recorded memory (each named by
    /// the bundle's copy of its file); else, or before the linker
    /// published one, every library the bundle holds.
    fn libraries_now(&self) -> String {
        let position = self.position();
        if let Some((_, list)) = self.libraries_at.borrow().as_ref().filter(|(at, _)| *at == position) {
            return list.clone();
        }
        let Some(state) = &self.state else { return self.libraries.clone() };
        let memory = RecordedMemory { state, timeline: &self.timeline, position };
        let Ok(mut entries) = rendezvous_address(&self.auxv, &memory).and_then(|r_debug| link_map(r_debug, &memory)) else { return self.libraries.clone() };
        for entry in entries.iter_mut().filter(|e| !e.name.is_empty()) {
            if let Some(module) = self.modules.iter().skip(1).find(|m| m.bias == entry.base && m.dynamic == Some(entry.dynamic)) {
                entry.name = module.path.clone().into_bytes();
            }
        }
        let list = library_list_xml(&entries);
        *self.libraries_at.borrow_mut() = Some((position, list.clone()));
        list
    }
}

impl LibrariesSvr4 for SavedTrace {
    fn get_libraries_svr4(&self, offset: u64, length: usize, buf: &mut [u8]) -> TargetResult<usize, Self> {
        Ok(copy_window(self.libraries_now().as_bytes(), offset, length, buf))
    }
}
