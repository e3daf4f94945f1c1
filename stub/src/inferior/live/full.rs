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

use iced_x86::{Decoder, DecoderOptions, InstructionInfoFactory, Mnemonic, OpAccess};
use nix::sys::signal::Signal;
use nix::unistd::Pid;
use retrace_collector::{emulate, process};

use super::{read_all_registers, ProcessTarget, ProgramMemory};
use crate::arch::Regs;
use crate::inferior::frames::Flow;
use crate::inferior::state_log::{Overwritten, StateLog};

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

/// RFLAGS.TF.
const TRAP_FLAG: u64 = 0x100;

/// A copy of writable memory, one run per mapping.
pub(super) type Snapshot = Vec<Overwritten>;

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
pub(super) struct SavedPresent {
    /// The present's bytes of the writable memory mapped at that position.
    pub(super) memory: Snapshot,
    /// Every thread's registers at the present.
    pub(super) registers: Vec<(Pid, Regs)>,
}

/// The recording and where the debugger stands in it.
#[derive(Debug)]
pub struct FullRecording {
    /// The process recorded.
    pub(super) pid: Pid,
    pub(super) mode: RecordMode,
    pub(super) log: StateLog,
    prepared: HashMap<Pid, Prepared>,
    info: InstructionInfoFactory,
    /// Instruction kinds by address.
    flows: HashMap<u64, Flow>,
    /// Code running in a past state, if any.
    pub(super) diversion: Option<SavedPresent>,
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
    pub(super) fn registers_at(&self, tid: Pid, position: u64) -> Option<Regs> {
        let regs = self.log.registers_at(tid.as_raw() as u64, position)?;
        Some(match self.mode {
            RecordMode::Full => regs,
            RecordMode::Branch => Regs::only_pc(regs.rip),
        })
    }

    /// Memory before step `position`, read over the process as it is now;
    /// how many bytes are known.
    pub(super) fn memory_at(&self, program: &ProgramMemory, position: u64, address: u64, buf: &mut [u8]) -> usize {
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
    pub(super) fn thread_at(&self, position: u64) -> u64 {
        let log = &self.log;
        log.at(position).or_else(|| log.at(position.saturating_sub(1))).map_or(self.pid.as_raw() as u64, |(tid, _)| tid)
    }

    /// An empty recording of `pid` as it is now.
    pub fn new(pid: Pid, mode: RecordMode) -> Self {
        FullRecording { pid, mode, log: StateLog::new(mapped(pid)), prepared: HashMap::new(), info: InstructionInfoFactory::new(), flows: HashMap::new(), diversion: None }
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
pub(super) fn snapshot(pid: Pid) -> Option<(Snapshot, Vec<Range<u64>>)> {
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
            self.session.restart();
        }
    }

}
