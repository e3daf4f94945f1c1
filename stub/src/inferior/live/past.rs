//! The live recording's past: where the debugger stands in it, what the
//! client is shown there (threads, registers, memory), the recording as the
//! replay engine's [`History`], and a [`SavedPresent`]: the process put in
//! a past state so code can run there (a diversion), the present kept
//! aside until the debugger moves on.

use std::ops::Range;

use gdbstub::target::ext::base::reverse_exec::ReplayLogPosition;
use nix::unistd::Pid;
use retrace_collector::process;

use super::full::{snapshot, FullRecording, RecordMode, SavedPresent};
use super::{read_all_registers, tid_of, ProcessTarget, ProgramMemory};
use crate::arch::Regs;
use crate::inferior::replay::{self, Forward, History, HistoryStep, InstructionId, Position, Replay, ThreadId};
use crate::inferior::state_log::{Overwritten, StateLog};
use crate::inferior::{HistoryListing, HistoryRequest, HistorySource, InferiorError, StopReason};

/// Writes `wanted` at `address` where it differs from `now` (what is there).
fn write_differences(pid: Pid, address: u64, now: &[u8], wanted: &[u8]) {
    let mut i = 0;
    while i < now.len() {
        if now[i] == wanted[i] {
            i += 1;
            continue;
        }
        let end = (i..now.len()).find(|&j| now[j] == wanted[j]).unwrap_or(now.len());
        process::write_memory(pid, address + i as u64, &wanted[i..end]);
        i = end;
    }
}

/// Why `--record=branch` refuses to run through the past with a watchpoint set.
const WATCHPOINTS_NEED_FULL: &str =
    "a watchpoint cannot stop a run in the past in --record=branch mode (it keeps the order of instructions, not what they write): delete the watchpoint to go back, or record with --record=full to watch memory in the past";

impl ProcessTarget {
    /// The debugger's position in the history, if it is in the past
    /// (and not running a diversion from it: then the process is in that
    /// past state itself).
    pub(super) fn past(&self) -> Option<u64> {
        self.full.as_ref().filter(|full| full.diversion.is_none()).and(self.session.past()).map(|at| at.index())
    }

    /// Before the debugger writes registers or memory: in the past, the
    /// process is first put in that past state (a [`Diversion`]), where the
    /// write then lands. Refused in `branch` mode, which does not know the
    /// past state.
    pub(super) fn divert(&mut self) -> Result<(), InferiorError> {
        let Some(position) = self.past() else { return Ok(()) };
        let Some(full) = self.full.as_ref() else { return Ok(()) };
        if full.mode == RecordMode::Branch {
            return Err(InferiorError::Refused("the past cannot be changed or run in `--record=branch` mode: only its instruction addresses are recorded".into()));
        }
        let Some((writable, _)) = snapshot(self.pid) else { return Err(InferiorError::Refused("the process's writable memory is too large to copy".into())) };
        let mut memory = Vec::new();
        let registers: Vec<(Pid, Regs)> = self.threads.iter().filter_map(|&tid| Some((tid, read_all_registers(tid).ok()?))).collect();
        // Memory as it was then, written where it differs from now.
        for run in &writable {
            let start = run.address;
            let end = start + run.old.len() as u64;
            let mut present = |address: u64, buf: &mut [u8]| {
                let from = (address - start) as usize;
                let n = buf.len().min(run.old.len().saturating_sub(from));
                buf[..n].copy_from_slice(&run.old[from..from + n]);
                n
            };
            let mut at = start;
            while at < end {
                let mut past = vec![0u8; (end - at) as usize];
                let n = full.log.read_at(position, at, &mut past, &mut present);
                if n == 0 {
                    // Not mapped then: as it is.
                    at = (at / 4096 + 1) * 4096;
                    continue;
                }
                let now = &run.old[(at - start) as usize..(at - start) as usize + n];
                write_differences(self.pid, at, now, &past[..n]);
                memory.push(Overwritten { address: at, old: now.to_vec() });
                at += n as u64;
            }
        }
        for (tid, _) in &registers {
            if let Some(regs) = full.log.registers_at(tid.as_raw() as u64, position) {
                let _ = super::write_all_registers(*tid, &regs);
            }
        }
        tracing::debug!(position, "diversion from the past begins");
        if let Some(full) = self.full.as_mut() {
            full.diversion = Some(SavedPresent { memory, registers });
        }
        Ok(())
    }

    /// Ends a diversion before a resume: always before one that moves in
    /// the history (`forward` false, or a `monitor goto` armed), before a
    /// forward one once the registers are back as they were in the past.
    pub(super) fn settle_diversion(&mut self, forward: bool) {
        let Some(full) = self.full.as_ref() else { return };
        let (Some(diversion), Some(position)) = (&full.diversion, self.session.past().map(|at| at.index())) else { return };
        let back = || {
            diversion.registers.iter().all(|(tid, _)| {
                let Some(then) = full.log.registers_at(tid.as_raw() as u64, position) else { return true };
                // What every debugger saves and restores around a call.
                read_all_registers(*tid).is_ok_and(|now| now.gpr == then.gpr && now.rip == then.rip && now.eflags == then.eflags)
            })
        };
        if forward && !self.session.is_armed() && !back() {
            return;
        }
        let Some(diversion) = self.full.as_mut().and_then(|full| full.diversion.take()) else { return };
        for run in &diversion.memory {
            let mut now = vec![0u8; run.old.len()];
            let n = process::read_memory(self.pid, run.address, &mut now);
            write_differences(self.pid, run.address, &now[..n], &run.old[..n]);
        }
        for (tid, regs) in &diversion.registers {
            let _ = super::write_all_registers(*tid, regs);
        }
        tracing::debug!(position, "diversion from the past ends; the present is back");
    }

    /// Registers of `tid` at the past `position`: `None` when the history
    /// does not change them (a thread that never ran in it).
    pub(super) fn past_registers(&self, tid: Pid, position: u64) -> Option<Regs> {
        self.full.as_ref()?.registers_at(tid, position)
    }

    /// In the past: the threads there, in the order they started — each
    /// that had run its first instruction by then and had not yet run its
    /// last (a thread alive now has not run its last), and those alive now
    /// that ran nothing recorded. (A thread created before that position
    /// but first run after it is missing.)
    fn past_threads(&self) -> Option<Vec<u64>> {
        let position = self.past()?;
        let log = &self.full.as_ref()?.log;
        let mut threads: Vec<(u64, u64)> = log
            .threads()
            .filter_map(|tid| {
                let (first, last) = log.span_of_thread(tid)?;
                let alive_now = self.threads.contains(&Pid::from_raw(tid as i32));
                (first <= position && (alive_now || position <= last)).then_some((first, tid))
            })
            .collect();
        // Threads alive now that ran nothing recorded (blocked all along)
        // were there too.
        threads.extend(self.threads.iter().map(|t| t.as_raw() as u64).filter(|&t| log.span_of_thread(t).is_none()).map(|t| (u64::MAX, t)));
        threads.sort_unstable();
        Some(threads.into_iter().map(|(_, tid)| tid).collect())
    }

    /// The threads the client is shown: in the past those there (some
    /// gone by now), else the live ones.
    pub(super) fn client_threads(&self) -> Vec<u64> {
        self.past_threads().unwrap_or_else(|| self.threads.iter().map(|tid| tid.as_raw() as u64).collect())
    }

    /// Memory at the past `position`.
    pub(super) fn past_memory(&self, position: u64, address: u64, buf: &mut [u8]) -> usize {
        let program = program_memory_of!(self);
        self.full.as_ref().map_or(0, |full| full.memory_at(&program, position, address, buf))
    }

    /// The recording as a history: its state log, read over the process
    /// (at the end of the history, the present); `None` without one.
    pub(super) fn live_history(&self) -> Option<LiveHistory<'_>> {
        Some(LiveHistory { full: self.full.as_ref()?, program: program_memory_of!(self) })
    }

    /// The session over the recording; `None` without one.
    pub(super) fn live_replay(&mut self) -> Option<Replay<'_>> {
        let ProcessTarget { session, full, pid, originals, blocks, .. } = self;
        let history = LiveHistory { full: full.as_ref()?, program: ProgramMemory { pid: *pid, originals, blocks } };
        Some(Replay::new(session, Box::new(history)))
    }

    /// See [`crate::inferior::Inferior::take_stood_still`].
    pub(super) fn take_stood_still(&mut self) -> bool {
        self.session.take_stood_still()
    }

    /// Forwards in the past: one instruction of `step` (the others running
    /// along), or on to a breakpoint or watched change. The end of the
    /// history stops there, or, for a client that expects it (LLDB), gives
    /// `None`: the live process is to run on.
    pub(super) fn replay_forwards(&mut self, step: Option<Pid>) -> Option<StopReason> {
        let mut replay = self.live_replay()?;
        if let Forward::Stopped(stop) = replay.run_forwards(step.map(|t| ThreadId(t.as_raw() as u64))) {
            return Some(stop);
        }
        let (len, stops_at_end) = (replay.history.len(), replay.session.stops_at_end());
        let last_thread = replay.history.thread_at(Position(len.saturating_sub(1)));
        drop(replay);
        if step.is_none() && len > 0 {
            // Arriving at the present where a breakpoint sits: the thread
            // that ran last stops there before running it, as on the
            // processor.
            let tid = Pid::from_raw(last_thread.0 as i32);
            if super::rip(tid).is_some_and(|pc| self.has_breakpoint(pc)) {
                return Some(StopReason::SwBreak(tid_of(tid)));
            }
        }
        if !stops_at_end {
            return None;
        }
        let history = self.live_history()?;
        Some(replay::boundary(&history, Position(len), ReplayLogPosition::End))
    }
}

/// The live recording as a [`History`]: its state log, read over the
/// process (at the end of the history, the present).
pub(super) struct LiveHistory<'a> {
    full: &'a FullRecording,
    program: ProgramMemory<'a>,
}

impl LiveHistory<'_> {
    fn log(&self) -> &StateLog {
        &self.full.log
    }
}

impl History for LiveHistory<'_> {
    fn len(&self) -> u64 {
        self.log().len()
    }

    fn step(&self, at: Position) -> Option<HistoryStep> {
        self.log().at(at.0).map(|(tid, pc)| HistoryStep { thread: ThreadId(tid), pc })
    }

    fn thread_at(&self, at: Position) -> ThreadId {
        ThreadId(self.full.thread_at(at.0))
    }

    fn previous_of_thread(&self, thread: ThreadId, before: Position) -> Option<Position> {
        self.log().previous_of_thread(thread.0, before.0).map(Position)
    }

    fn next_of_thread(&self, thread: ThreadId, from: Position) -> Option<Position> {
        self.log().next_of_thread(thread.0, from.0).map(Position)
    }

    fn last_pc_before(&self, addresses: &[u64], before: Position) -> Option<Position> {
        self.log().last_pc_before(addresses, before.0).map(Position)
    }

    fn first_pc_from(&self, addresses: &[u64], from: Position) -> Option<Position> {
        self.log().first_pc_from(addresses, from.0).map(Position)
    }

    fn last_write_before(&self, range: Range<u64>, before: Position) -> Option<Position> {
        self.log().last_write_before(range, before.0).map(Position)
    }

    fn first_write_from(&self, range: Range<u64>, from: Position) -> Option<Position> {
        self.log().first_write_from(range, from.0).map(Position)
    }

    fn last_read_before(&self, range: Range<u64>, before: Position) -> Option<Position> {
        self.log().last_read_before(range, before.0).map(Position)
    }

    fn first_read_from(&self, range: Range<u64>, from: Position) -> Option<Position> {
        self.log().first_read_from(range, from.0).map(Position)
    }

    fn wrote(&self, at: Position, range: &Range<u64>) -> bool {
        self.log().overwritten_by(at.0).any(|(address, old)| address < range.end && range.start < address + old.len() as u64)
    }

    /// A `--record=branch` history does not know what its instructions
    /// wrote, so a run there would go on to the end of the history as
    /// though nothing wrote the bytes. (Live, forwards, they work.)
    fn watchpoints_refused(&self) -> Option<&'static str> {
        (self.full.mode == RecordMode::Branch).then_some(WATCHPOINTS_NEED_FULL)
    }

    fn registers_at(&self, thread: ThreadId, at: Position) -> Option<Regs> {
        self.full.registers_at(Pid::from_raw(thread.0 as i32), at.0)
    }

    /// (Position `len()` reads the present.)
    fn memory_at(&self, at: Position, address: u64, buf: &mut [u8]) -> usize {
        self.full.memory_at(&self.program, at.0, address, buf)
    }

    fn source(&self) -> HistorySource {
        HistorySource::Recording {
            mode: match self.full.mode {
                RecordMode::Full => "full",
                RecordMode::Branch => "branch",
            },
            bytes: self.log().bytes(),
            watchpoints_refused: self.watchpoints_refused(),
        }
    }

    fn instructions(&self) -> u64 {
        self.log().instructions()
    }

    fn threads(&self) -> Vec<(ThreadId, u64)> {
        let log = self.log();
        log.threads().map(|t| (ThreadId(t), log.steps_of_thread_before(t, log.len()))).collect()
    }

    /// The thread's steps before `at` (a delivery has no number of its own).
    fn instruction_id(&self, thread: ThreadId, at: Position) -> InstructionId {
        InstructionId(self.log().steps_of_thread_before(thread.0, at.0))
    }

    fn position_of_instruction(&self, thread: ThreadId, id: InstructionId) -> Result<Position, InferiorError> {
        let (tid, id) = (thread.0, id.0);
        self.log().position_of_thread_step(tid, id).map(Position).ok_or_else(|| InferiorError::InvalidRequest(format!("thread {tid} has no instruction {id} in the history")))
    }

    fn frame_listing(&self, request: &HistoryRequest, at: Position) -> Result<HistoryListing, InferiorError> {
        let log = self.log();
        let tid = request.tid.unwrap_or_else(|| self.full.thread_at(at.0));
        let (id, steps) = match request.before {
            Some(id) => (id, log.frame_history(tid, id, request.max, &request.within, &request.stops)),
            // From where it stands (a delivery has no number of its own).
            None => (log.steps_of_thread_before(tid, at.0), log.frame_history_at(tid, at.0, request.max, &request.within, &request.stops)),
        };
        Ok(HistoryListing { tid, id, steps })
    }
}
