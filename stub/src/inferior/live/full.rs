//! `--record=full` and `--record=branch`: the live process recorded from
//! its first instruction, one instruction at a time, into a [`StateLog`],
//! and the debugger moved back and forth in it (`bs`, `bc`, and forward
//! `s`, `c` and `vCont` replayed while in the past).
//!
//! Before each step the instruction is decoded (iced-x86) and the bytes it
//! will write are read, at addresses computed from the registers; after it,
//! the registers are read. A system call, and an instruction whose writes
//! cannot be computed before it runs (`xsave`, scatter stores), is
//! bracketed instead by copies of all writable memory, and the changed
//! bytes — whatever the kernel wrote, `read()`'s buffer, `stat`'s, a
//! vanished mapping's — are kept. A signal's delivery is a step of its own
//! (as GDB's `record full` keeps it: the thread interrupted, after its
//! system call if it was in one, then the handler's entry): it keeps the
//! stack bytes below the red zone that the kernel's signal frame
//! overwrites.
//!
//! In `branch` mode only the order of instructions is kept: in the past
//! the PC is known, other registers are unavailable and only memory that
//! no one can write (code, read-only data) is served.
//!
//! In the past nothing of the process changes: registers and memory come
//! from the log over the stopped process (a write there starts a
//! [`Diversion`]: the process itself is put in that past state until the
//! debugger moves on), and reaching
//! the end of the history going forwards stops there (`replaylog:end`, as
//! GDB's `record full` stops with "No more reverse-execution history");
//! the next resume runs the live process on, recorded. With LLDB, whose
//! own reverse tests expect a forward continue to run on, the live process
//! runs on at once.

use std::collections::HashMap;
use std::ops::Range;

use gdbstub::common::Signal as GdbSignal;
use gdbstub::target::ext::base::reverse_exec::ReplayLogPosition;
use iced_x86::{Decoder, DecoderOptions, InstructionInfoFactory, Mnemonic, OpAccess};
use nix::sys::signal::Signal;
use nix::unistd::Pid;
use retrace_collector::{emulate, process};

use super::{read_all_registers, tid_of, ProcessTarget, ProgramMemory};
use crate::inferior::InferiorError;
use crate::arch::Regs;
use crate::inferior::frames::Flow;
use crate::inferior::replay::{self, Breakpoints, Forward, History, Replayer, Step};
use crate::inferior::state_log::{Overwritten, StateLog};
use crate::inferior::{GotoStop, GotoTarget, HistoryListing, HistoryOps, HistoryPosition, HistoryRequest, HistorySource, HistoryStatus, StopNote, StopReason};

/// What a recording keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordMode {
    /// Every register and byte of memory at every instruction.
    Full,
    /// The order of instructions only (as Intel PT keeps it).
    Branch,
}

impl std::str::FromStr for RecordMode {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        match text {
            "full" => Ok(RecordMode::Full),
            "branch" => Ok(RecordMode::Branch),
            _ => Err(format!("`{text}` is not a recording mode: `full` or `branch`")),
        }
    }
}

/// Bytes below the stack pointer a signal frame may take (the red zone,
/// then the frame with the largest `xsave` area).
const SIGNAL_FRAME_ROOM: u64 = 128 + 16 * 1024;

/// The most writable memory copied around one system call. Beyond it the
/// bytes the kernel writes are not kept: before such a call, writable
/// memory reads as unavailable (where no earlier step kept it), never as
/// what the call wrote.
const SNAPSHOT_LIMIT: u64 = 512 << 20;

/// Why `--record=branch` refuses to run through the past with a watchpoint set.
const WATCHPOINTS_NEED_FULL: &str =
    "a watchpoint cannot stop a run in the past in --record=branch mode (it keeps the order of instructions, not what they write): delete the watchpoint to go back, or record with --record=full to watch memory in the past";

/// RFLAGS.TF.
const TRAP_FLAG: u64 = 0x100;

/// A copy of writable memory, one run per mapping.
type Snapshot = Vec<Overwritten>;

/// What is known of a thread's next step before it runs.
#[derive(Debug)]
struct Prepared {
    before: Regs,
    overwritten: Vec<Overwritten>,
    /// The bytes it will read (for read and access watchpoints).
    reads: Vec<Range<u64>>,
    /// All writable memory before it (system calls and writes not
    /// computable in advance), and the mappings then.
    snapshot: Option<(Snapshot, Vec<Range<u64>>)>,
    /// It needed that copy, and the memory was too large to copy: what
    /// it writes is not kept.
    unsaved: bool,
    /// A REP string instruction: its iterations are one step.
    repeats: bool,
    /// A `syscall` instruction.
    system_call: bool,
    /// How the instruction moves between frames.
    flow: Flow,
    /// The resume delivers a signal to a handler: the first stop is the
    /// handler's entry, not an executed instruction.
    entering_handler: bool,
}

/// The process put in a past state so that code can run there: an
/// expression the debugger evaluates (LLDB's breakpoint conditions call
/// functions), a variable set in the past. It begins with the debugger's
/// first write in the past and ends at the next resume that moves in the
/// history (`bc`, `bs`, a `monitor goto`), or at a forward resume once the
/// thread registers are back as they were there (debuggers restore them
/// after a call). Then the present is put back; the history is not changed
/// by it. Memory not mapped at that past position is left as the
/// diversion leaves it: it is not part of the past state, and it is where
/// the debugger's own allocations live (LLDB `mmap`s room for its code at
/// the present and reuses the code it put there).
#[derive(Debug)]
struct Diversion {
    /// The present's bytes of the writable memory mapped at that position.
    memory: Snapshot,
    /// Every thread's registers at the present.
    registers: Vec<(Pid, Regs)>,
}

/// The recording and where the debugger stands in it.
#[derive(Debug)]
pub struct FullRecording {
    /// The process recorded.
    pid: Pid,
    mode: RecordMode,
    log: StateLog,
    prepared: HashMap<Pid, Prepared>,
    /// `None`: the present (the live process).
    position: Option<u64>,
    /// The moves through the history (a `monitor goto` waiting for the
    /// next resume is armed there).
    replayer: Replayer,
    info: InstructionInfoFactory,
    /// Instruction kinds by address.
    flows: HashMap<u64, Flow>,
    /// Code running in a past state, if any.
    diversion: Option<Diversion>,
}

impl FullRecording {
    /// Reads what thread `tid` is about to do before it steps (resumed
    /// with `signal`).
    fn before_step(&mut self, program: &ProgramMemory, tid: Pid, signal: Option<Signal>) {
        self.prepared.remove(&tid);
        let mode = self.mode;
        let pid = program.pid;
        let entering_handler = signal.is_some_and(|signal| process::has_handler(pid, tid, signal));
        let nothing_written =
            |before: Regs| Prepared { before, overwritten: vec![], reads: vec![], snapshot: None, unsaved: false, repeats: false, system_call: false, flow: Flow::Other, entering_handler };
        let prepared = if mode == RecordMode::Branch {
            let Some(rip) = super::rip(tid) else { return };
            nothing_written(Regs::only_pc(rip))
        } else {
            let Ok(before) = read_all_registers(tid) else { return };
            if entering_handler {
                // The kernel writes the signal frame below the red zone.
                let top = before.gpr[7].saturating_sub(128);
                let len = SIGNAL_FRAME_ROOM - 128;
                let frame = current_bytes(pid, top.saturating_sub(len), len as usize);
                self.log.overwritten_outside(frame);
                nothing_written(before)
            } else {
                self.instruction_writes(program, before, entering_handler)
            }
        };
        let mut prepared = prepared;
        // Each address's kind is read once (the history's frame index needs
        // it for every step).
        let pc = prepared.before.rip;
        prepared.flow = *self.flows.entry(pc).or_insert_with(|| {
            let mut code = [0u8; 15];
            let n = program.read(pc, &mut code);
            Flow::of(&code[..n], pc)
        });
        self.prepared.insert(tid, prepared);
    }

    /// The bytes the instruction at `before.rip` will overwrite, read now.
    fn instruction_writes(&mut self, program: &ProgramMemory, before: Regs, entering_handler: bool) -> Prepared {
        let pid = program.pid;
        let mut code = [0u8; 16];
        let n = program.read(before.rip, &mut code);
        let insn = Decoder::with_ip(64, &code[..n], before.rip, DecoderOptions::NONE).decode();
        let system_call = insn.mnemonic() == Mnemonic::Syscall;
        let mut whole_memory = insn.is_invalid() || system_call;
        let mut overwritten = Vec::new();
        let mut reads = Vec::new();
        if !whole_memory {
            let registers = address_registers(&before);
            let info = &mut self.info;
            for used in info.info(&insn).used_memory() {
                let size = used.memory_size().size();
                let address = used.virtual_address(0, |register, _, _| registers.address_part(register));
                if matches!(used.access(), OpAccess::Read | OpAccess::CondRead | OpAccess::ReadWrite | OpAccess::ReadCondWrite) {
                    if let Some(address) = address.filter(|_| size > 0) {
                        reads.push(address..address.saturating_add(size as u64));
                    }
                }
                if !matches!(used.access(), OpAccess::Write | OpAccess::CondWrite | OpAccess::ReadWrite | OpAccess::ReadCondWrite) {
                    continue;
                }
                match address {
                    Some(address) if size > 0 && !used.index().is_vector_register() => overwritten.push(current_bytes(pid, address, size)),
                    _ => whole_memory = true,
                }
            }
        }
        let snapshot = if whole_memory { snapshot(pid) } else { None };
        let unsaved = whole_memory && snapshot.is_none();
        if unsaved {
            tracing::warn!(pc = format_args!("{:#x}", before.rip), "writable memory over {SNAPSHOT_LIMIT} bytes: what this instruction writes is not kept, and earlier memory it may write reads as unavailable");
        }
        let repeats = insn.has_rep_prefix() || insn.has_repe_prefix() || insn.has_repne_prefix();
        Prepared { before, overwritten, reads, snapshot, unsaved, repeats, system_call, flow: Flow::Other, entering_handler }
    }

    /// Thread `tid` finished a step: it goes into the history, and its
    /// next step is prepared.
    fn after_step(&mut self, program: &ProgramMemory, tid: Pid) {
        let pid = program.pid;
        let Some(prepared) = self.prepared.remove(&tid) else {
            self.before_step(program, tid, None);
            return;
        };
        if prepared.entering_handler {
            // Stopped at the handler's entry: no instruction ran, the
            // signal was delivered. That is a step of its own (as GDB's
            // `record full` keeps it): from the thread interrupted, after
            // its system call if it was in one, to the handler's entry
            // with its frame written.
            let entry = match self.mode {
                RecordMode::Branch => super::rip(tid).map(Regs::only_pc),
                RecordMode::Full => read_all_registers(tid).ok(),
            };
            match entry {
                Some(entry) => self.log.push_delivery(tid.as_raw() as u64, &prepared.before, &entry),
                None => self.log.entering_handler(tid.as_raw() as u64),
            }
            self.before_step(program, tid, None);
            return;
        }
        let after = match self.mode {
            RecordMode::Branch => super::rip(tid).map(Regs::only_pc),
            RecordMode::Full => read_all_registers(tid).ok(),
        };
        let Some(after) = after else { return };
        if prepared.repeats && after.rip == prepared.before.rip {
            // One iteration of a REP string instruction: the rest of it is
            // the same step.
            let before = prepared.before;
            let mut overwritten = prepared.overwritten;
            let mut reads = prepared.reads;
            self.before_step(program, tid, None);
            if let Some(next) = self.prepared.get_mut(&tid) {
                overwritten.append(&mut next.overwritten);
                next.overwritten = overwritten;
                reads.append(&mut next.reads);
                next.reads = reads;
                next.before = before;
            }
            return;
        }
        let mut after = after;
        if prepared.system_call && after.gpr[11] & TRAP_FLAG != 0 && prepared.before.eflags as u64 & TRAP_FLAG == 0 {
            // `syscall` saved RFLAGS in r11 with the trap flag of our
            // single step: the program would not have seen it.
            after.gpr[11] &= !TRAP_FLAG;
            if let Ok(mut regs) = nix::sys::ptrace::getregs(tid) {
                regs.r11 &= !TRAP_FLAG;
                let _ = nix::sys::ptrace::setregs(tid, regs);
            }
        }
        let mut overwritten = prepared.overwritten;
        let mut mappings = None;
        if let Some((copy, maps_before)) = &prepared.snapshot {
            overwritten.extend(changed_since(pid, copy));
            let now = mapped(pid);
            if &now != maps_before {
                mappings = Some(now);
            }
        }
        let written: Vec<Range<u64>> = overwritten.iter().map(|run| run.address..run.address + run.old.len() as u64).collect();
        self.log.push(tid.as_raw() as u64, &prepared.before, &after, overwritten, mappings, prepared.flow);
        self.log.reads_of_last_step(&prepared.reads);
        if prepared.unsaved {
            let writable = process::read_maps(pid).unwrap_or_default().iter().filter(|m| m.writable).map(|m| m.start..m.end).collect();
            self.log.lost_writes_of_last_step(writable);
        }
        self.others_see_writes(pid, tid, &written);
        self.before_step(program, tid, None);
    }

    /// Thread `tid`'s step, now in the history, wrote `written`: another
    /// thread's step that is under way with a copy of memory from before
    /// (a system call blocked while this thread ran) takes the new bytes
    /// into its copy, so that what its step is found to have changed is
    /// what it changed itself, never the writes of the threads that ran
    /// meanwhile (which are theirs, at their own instructions).
    fn others_see_writes(&mut self, pid: Pid, tid: Pid, written: &[Range<u64>]) {
        let mut copies = self.prepared.iter_mut().filter(|(other, _)| **other != tid).filter_map(|(_, prepared)| prepared.snapshot.as_mut()).peekable();
        if written.is_empty() || copies.peek().is_none() {
            return;
        }
        let now: Vec<Overwritten> = written.iter().map(|range| current_bytes(pid, range.start, (range.end - range.start) as usize)).collect();
        for (copy, _) in copies {
            for run in &now {
                take_bytes(copy, run);
            }
        }
    }

    /// Thread `tid`'s registers before step `position` (the PC only in
    /// `branch` mode).
    fn registers_at(&self, tid: Pid, position: u64) -> Option<Regs> {
        let regs = self.log.registers_at(tid.as_raw() as u64, position)?;
        Some(match self.mode {
            RecordMode::Full => regs,
            RecordMode::Branch => Regs::only_pc(regs.rip),
        })
    }

    /// Memory before step `position`, read over the process as it is now;
    /// how many bytes are known.
    fn memory_at(&self, program: &ProgramMemory, position: u64, address: u64, buf: &mut [u8]) -> usize {
        match self.mode {
            RecordMode::Full => self.log.read_at(position, address, buf, &mut |address, buf| program.read(address, buf)),
            RecordMode::Branch => {
                // Only what nobody can write.
                let maps = process::read_maps(self.pid).unwrap_or_default();
                let Some(m) = maps.iter().find(|m| m.start <= address && address < m.end && !m.writable) else { return 0 };
                let n = buf.len().min((m.end - address) as usize);
                program.read(address, &mut buf[..n])
            }
        }
    }

    /// The thread a stop at `position` is reported for.
    fn thread_at(&self, position: u64) -> u64 {
        let log = &self.log;
        log.at(position).or_else(|| log.at(position.saturating_sub(1))).map_or(self.pid.as_raw() as u64, |(tid, _)| tid)
    }

    /// An empty recording of `pid` as it is now.
    pub fn new(pid: Pid, mode: RecordMode) -> Self {
        FullRecording { pid, mode, log: StateLog::new(mapped(pid)), prepared: HashMap::new(), position: None, replayer: Replayer::default(), info: InstructionInfoFactory::new(), flows: HashMap::new(), diversion: None }
    }
}

/// `len` bytes of `pid`'s memory at `address` as they are now (fewer where
/// the memory ends), to keep before something overwrites them.
fn current_bytes(pid: Pid, address: u64, len: usize) -> Overwritten {
    let mut old = vec![0u8; len];
    let n = process::read_memory(pid, address, &mut old);
    old.truncate(n);
    Overwritten { address, old }
}

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

/// Puts `bytes` (an address and the bytes there) into the copy of memory
/// where the copy covers them.
fn take_bytes(copy: &mut Snapshot, bytes: &Overwritten) {
    let end = bytes.address + bytes.old.len() as u64;
    for run in copy.iter_mut() {
        let run_end = run.address + run.old.len() as u64;
        let (start, stop) = (run.address.max(bytes.address), run_end.min(end));
        if start < stop {
            let into = (start - run.address) as usize..(stop - run.address) as usize;
            let from = (start - bytes.address) as usize..(stop - bytes.address) as usize;
            run.old[into].copy_from_slice(&bytes.old[from]);
        }
    }
}

/// Every mapping of `pid`.
fn mapped(pid: Pid) -> Vec<Range<u64>> {
    process::read_maps(pid).unwrap_or_default().iter().map(|m| m.start..m.end).collect()
}

/// All writable, readable memory of `pid` (none past [`SNAPSHOT_LIMIT`]),
/// and every mapping it has now.
fn snapshot(pid: Pid) -> Option<(Snapshot, Vec<Range<u64>>)> {
    let maps = process::read_maps(pid).ok()?;
    let writable: Vec<_> = maps.iter().filter(|m| m.writable && m.readable).collect();
    if writable.iter().map(|m| m.end - m.start).sum::<u64>() > SNAPSHOT_LIMIT {
        return None;
    }
    let copy = writable.into_iter().map(|m| current_bytes(pid, m.start, (m.end - m.start) as usize)).collect();
    Some((copy, maps.iter().map(|m| m.start..m.end).collect()))
}

/// The bytes of `before` that differ now (or are gone), as runs.
fn changed_since(pid: Pid, before: &Snapshot) -> Vec<Overwritten> {
    let mut changed = Vec::new();
    for Overwritten { address, old } in before {
        let mut now = vec![0u8; old.len()];
        let n = process::read_memory(pid, *address, &mut now);
        let mut i = 0;
        while i < old.len() {
            if i < n && now[i] == old[i] {
                i += 1;
                continue;
            }
            let start = i;
            while i < old.len() && (i >= n || now[i] != old[i]) {
                i += 1;
            }
            changed.push(Overwritten { address: address + start as u64, old: old[start..i].to_vec() });
        }
    }
    changed
}

/// The registers an instruction's memory addresses are computed from, in
/// the collector's (iced-x86's) order.
fn address_registers(regs: &Regs) -> emulate::Registers {
    let g = &regs.gpr;
    // GDB's order is rax rbx rcx rdx rsi rdi rbp rsp r8…; iced's rax rcx rdx rbx rsp rbp rsi rdi r8….
    let gpr = [g[0], g[2], g[3], g[1], g[7], g[6], g[4], g[5], g[8], g[9], g[10], g[11], g[12], g[13], g[14], g[15]];
    emulate::Registers { gpr, rflags: regs.eflags as u64, fs_base: regs.fs_base, gs_base: regs.gs_base }
}

impl ProcessTarget {
    /// Turns recording on for the whole process, from now.
    pub fn record(mut self, mode: RecordMode) -> Self {
        self.full = Some(FullRecording::new(self.pid, mode));
        self
    }

    /// Whether the thread's continues are recorded by the stub, step by
    /// step or block by block (not in a diversion: it does not change the
    /// history; not a thread the CPU's Intel PT traces: it runs freely).
    pub(super) fn records(&self, tid: Pid) -> bool {
        self.full.as_ref().is_some_and(|full| full.diversion.is_none()) || self.tracing.records_in_software(tid)
    }

    /// Whether every register of every instruction is kept
    /// (`--record=full`): then threads are recorded one step at a time.
    pub(super) fn records_every_register(&self) -> bool {
        self.full.as_ref().is_some_and(|full| full.mode == RecordMode::Full)
    }

    /// Thread `tid` ran the instruction at `ip` and goes on at `next`,
    /// seen without a step of its own (a block run): into the history of a
    /// `--record=branch` recording.
    pub(super) fn history_executed(&mut self, tid: Pid, ip: u64, next: u64, flow: Flow) {
        if let Some(full) = self.full.as_mut().filter(|full| full.mode == RecordMode::Branch && full.diversion.is_none()) {
            full.log.push(tid.as_raw() as u64, &Regs::only_pc(ip), &Regs::only_pc(next), Vec::new(), None, flow);
        }
    }

    /// Why watchpoints cannot stop runs in the past, if they cannot: a
    /// `--record=branch` history does not know what its instructions
    /// wrote, so a run there would go on to the end of the history as
    /// though nothing wrote the bytes. (Live, forwards, they work.)
    pub(super) fn past_watchpoints_refused(&self) -> Option<&'static str> {
        self.full.as_ref().filter(|full| full.mode == RecordMode::Branch).map(|_| WATCHPOINTS_NEED_FULL)
    }

    /// A move in the history that cannot be made (no recording, or
    /// watchpoints a branch recording cannot honour): the stop where the
    /// debugger stands, saying why (LLDB shows the description as the stop reason;
    /// the signal 0 keeps it from taking the stop for a breakpoint's).
    pub(super) fn refuse_history_move(&mut self, movement: crate::inferior::Movement) -> Option<StopReason> {
        use crate::inferior::Inferior as _;
        let reason = self.history_move_refused(movement)?;
        let tid = match self.full.as_ref() {
            Some(full) => Pid::from_raw(self.thread_at(full.position.unwrap_or(full.log.len())) as i32),
            None => self.threads.first().copied().unwrap_or(self.pid),
        };
        self.stop_note = Some(StopNote::Trace(reason.to_string()));
        Some(StopReason::SignalWithThread { tid: tid_of(tid), signal: GdbSignal(0) })
    }

    /// Whether the process is recorded for reverse execution.
    pub(super) fn full_recording(&self) -> bool {
        self.full.is_some()
    }

    /// The debugger's position in the history, if it is in the past
    /// (and not running a diversion from it: then the process is in that
    /// past state itself).
    pub(super) fn past(&self) -> Option<u64> {
        self.full.as_ref().and_then(|full| full.position.filter(|_| full.diversion.is_none()))
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
            full.diversion = Some(Diversion { memory, registers });
        }
        Ok(())
    }

    /// Ends a diversion before a resume: always before one that moves in
    /// the history (`forward` false, or a `monitor goto` armed), before a
    /// forward one once the registers are back as they were in the past.
    pub(super) fn settle_diversion(&mut self, forward: bool) {
        let Some(full) = self.full.as_ref() else { return };
        let (Some(diversion), Some(position)) = (&full.diversion, full.position) else { return };
        let back = || {
            diversion.registers.iter().all(|(tid, _)| {
                let Some(then) = full.log.registers_at(tid.as_raw() as u64, position) else { return true };
                // What every debugger saves and restores around a call.
                read_all_registers(*tid).is_ok_and(|now| now.gpr == then.gpr && now.rip == then.rip && now.eflags == then.eflags)
            })
        };
        if forward && !full.replayer.is_armed() && !back() {
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

    /// Tells the full recording, a step observer, that thread `tid` is
    /// about to step (resumed with `signal`).
    pub(super) fn prepare_step(&mut self, tid: Pid, signal: Option<Signal>) {
        let program = program_memory_of!(self);
        if let Some(full) = self.full.as_mut() {
            full.before_step(&program, tid, signal);
        }
    }

    /// Tells the full recording that thread `tid` finished a step.
    pub(super) fn step_done(&mut self, tid: Pid) {
        let program = program_memory_of!(self);
        if let Some(full) = self.full.as_mut() {
            full.after_step(&program, tid);
        }
    }

    /// The debugger writes memory at the present: the old bytes are kept.
    pub(super) fn before_debugger_write(&mut self, address: u64, len: usize) {
        let pid = self.pid;
        if let Some(full) = self.full.as_mut().filter(|full| full.diversion.is_none()) {
            full.log.overwritten_outside(current_bytes(pid, address, len));
        }
    }

    /// The program exec'd: a new history starts.
    pub(super) fn history_restarts(&mut self) {
        let pid = self.pid;
        if let Some(full) = self.full.as_mut() {
            full.log.restart(mapped(pid));
            full.diversion = None;
            full.prepared.clear();
            full.position = None;
            full.replayer.disarm();
        }
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

    fn thread_at(&self, position: u64) -> u64 {
        self.full.as_ref().map_or(self.pid.as_raw() as u64, |full| full.thread_at(position))
    }

    /// Runs `action` with the replayer standing where the debugger stands
    /// (the end of the history at the present), over the recording; the
    /// debugger stands where it leaves the replayer.
    /// `None` without a recording.
    pub(super) fn replay<R>(&mut self, action: impl FnOnce(&mut Replayer, &dyn History, &Breakpoints) -> R) -> Option<R> {
        let breakpoints = self.breakpoint_table();
        let program = program_memory_of!(self);
        let full = self.full.as_mut()?;
        let mut replayer = std::mem::take(&mut full.replayer);
        replayer.move_to(full.position.unwrap_or(full.log.len()));
        let result = action(&mut replayer, &LiveHistory { full, program }, &breakpoints);
        full.position = (replayer.position() < full.log.len()).then_some(replayer.position());
        full.replayer = replayer;
        Some(result)
    }

    /// See [`crate::inferior::Inferior::take_stood_still`].
    pub(super) fn take_stood_still(&mut self) -> bool {
        self.full.as_mut().is_some_and(|full| full.replayer.take_stood_still())
    }

    /// Forwards in the past: one instruction of `step` (the others running
    /// along), or on to a breakpoint or watched change. The end of the
    /// history stops there, or, for a client that expects it (LLDB), gives
    /// `None`: the live process is to run on.
    pub(super) fn replay_forwards(&mut self, step: Option<Pid>) -> Option<StopReason> {
        let step_tid = step.map(|t| t.as_raw() as u64);
        match self.replay(|replayer, history, breakpoints| replayer.run_forwards(history, breakpoints, step_tid))? {
            Forward::Stopped(stop) => return Some(stop),
            Forward::End => {}
        }
        let len = self.full.as_ref()?.log.len();
        if step.is_none() && len > 0 {
            // Arriving at the present where a breakpoint sits: the thread
            // that ran last stops there before running it, as on the
            // processor.
            let tid = Pid::from_raw(self.thread_at(len - 1) as i32);
            if super::rip(tid).is_some_and(|pc| self.breakpoints.contains_key(&pc)) {
                return Some(StopReason::SwBreak(tid_of(tid)));
            }
        }
        if !self.history_end_stops {
            return None;
        }
        self.replay(|_, history, _| replay::boundary(history, len, ReplayLogPosition::End))
    }

}

impl HistoryOps for FullRecording {
    fn history_status(&self) -> HistoryStatus {
        let full = &*self;
        let len = full.log.len();
        let index = full.position.unwrap_or(len);
        let tid = self.thread_at(index);
        HistoryStatus {
            source: HistorySource::Recording {
                mode: match full.mode {
                    RecordMode::Full => "full",
                    RecordMode::Branch => "branch",
                },
                bytes: full.log.bytes(),
                watchpoints_refused: (full.mode == RecordMode::Branch).then_some(WATCHPOINTS_NEED_FULL),
            },
            instructions: full.log.instructions(),
            threads: full.log.threads().map(|t| (t, full.log.steps_of_thread_before(t, len))).collect(),
            position: HistoryPosition {
                tid,
                id: full.log.steps_of_thread_before(tid, index),
                index,
                pc: full.position.map(|p| full.log.at(p).map_or(0, |(_, pc)| pc)),
                present: full.position.is_none(),
            },
        }
    }

    /// `goto begin|end|ID [TID] [--hold]`.
    fn goto(&mut self, target: GotoTarget, hold: bool) -> Result<GotoStop, InferiorError> {
        let full = &*self;
        let len = full.log.len();
        if len == 0 {
            return Err(InferiorError::Refused("the history is empty: nothing has run since recording started".into()));
        }
        let position = match target {
            GotoTarget::Begin => 0,
            GotoTarget::End => len,
            GotoTarget::Instruction { id, tid } => {
                let tid = tid.unwrap_or_else(|| self.thread_at(full.position.unwrap_or(len)));
                full.log.position_of_thread_step(tid, id).ok_or_else(|| InferiorError::InvalidRequest(format!("thread {tid} has no instruction {id} in the history")))?
            }
        };
        let pc = full.log.at(position).map(|(_, pc)| pc);
        self.replayer.arm(position, hold);
        let tid = self.thread_at(position);
        let id = self.log.steps_of_thread_before(tid, position);
        Ok(GotoStop { tid, id, pc })
    }

    fn history(&self, request: &HistoryRequest) -> Result<HistoryListing, InferiorError> {
        let full = &*self;
        let position = full.position.unwrap_or(full.log.len());
        let tid = request.tid.unwrap_or_else(|| self.thread_at(position));
        let (id, steps) = match request.before {
            Some(id) => (id, full.log.frame_history(tid, id, request.max, &request.within, &request.stops)),
            // From where it stands (a delivery has no number of its own).
            None => (full.log.steps_of_thread_before(tid, position), full.log.frame_history_at(tid, position, request.max, &request.within, &request.stops)),
        };
        Ok(HistoryListing { tid, id, steps })
    }
}

/// The live recording as a [`History`]: its state log, read over the
/// process (at the end of the history, the present).
struct LiveHistory<'a> {
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

    fn step(&self, position: u64) -> Option<Step> {
        self.log().at(position).map(|(tid, pc)| Step { tid, pc })
    }

    fn thread_at(&self, position: u64) -> u64 {
        self.full.thread_at(position)
    }

    fn previous_of_thread(&self, tid: u64, before: u64) -> Option<u64> {
        self.log().previous_of_thread(tid, before)
    }

    fn next_of_thread(&self, tid: u64, from: u64) -> Option<u64> {
        self.log().next_of_thread(tid, from)
    }

    fn last_pc_before(&self, addresses: &[u64], before: u64) -> Option<u64> {
        self.log().last_pc_before(addresses, before)
    }

    fn first_pc_from(&self, addresses: &[u64], from: u64) -> Option<u64> {
        self.log().first_pc_from(addresses, from)
    }

    fn last_write_before(&self, range: Range<u64>, before: u64) -> Option<u64> {
        self.log().last_write_before(range, before)
    }

    fn first_write_from(&self, range: Range<u64>, from: u64) -> Option<u64> {
        self.log().first_write_from(range, from)
    }

    fn last_read_before(&self, range: Range<u64>, before: u64) -> Option<u64> {
        self.log().last_read_before(range, before)
    }

    fn first_read_from(&self, range: Range<u64>, from: u64) -> Option<u64> {
        self.log().first_read_from(range, from)
    }

    fn wrote(&self, position: u64, range: &Range<u64>) -> bool {
        self.log().overwritten_by(position).any(|(at, old)| at < range.end && range.start < at + old.len() as u64)
    }

    fn registers_at(&self, tid: u64, position: u64) -> Option<Regs> {
        self.full.registers_at(Pid::from_raw(tid as i32), position)
    }

    /// (Position `len()` reads the present.)
    fn memory_at(&self, position: u64, address: u64, buf: &mut [u8]) -> usize {
        self.full.memory_at(&self.program, position, address, buf)
    }
}
