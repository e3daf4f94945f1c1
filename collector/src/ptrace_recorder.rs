//! The ptrace recorder: records a program's user-space control flow by
//! single-stepping every thread under ptrace (or running it block by block
//! to branch stops), and encodes it as Intel PT with
//! [`ThreadPtWriter`](crate::pt_writer::ThreadPtWriter).

use std::collections::HashMap;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use nix::errno::Errno;
use nix::sys::ptrace;
use nix::sys::signal::Signal;
use nix::unistd::Pid;
use retrace_decoder::x86::{classify, ExecMode, FlowKind, InsnInfo};

use crate::control::{rip, ProcessEvent, Spawn, TracedProcess, Wait};
use crate::blocks::{self, Block, Int3s};
use crate::code_cache::CodeCache;
use crate::perf_clock::TraceClock;
use crate::process::{self, LoadedModule, Tracee};
use crate::recording::{ImageRecording, Outcome, Recording, ThreadRecording};
use crate::pt_writer::{ThreadPtWriter, DEFAULT_PSB_PERIOD};

/// How the software backend observes control flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepMode {
    /// `PTRACE_SINGLESTEP` after every instruction (~20 µs each here: a #DB
    /// trap per instruction).
    Step,
    /// Branch stops: an `int3` on the branch ending each basic block; at the
    /// stop the tracer emulates the branch from registers and memory and
    /// resumes at its target (no #DB). System calls, far transfers and
    /// anything not emulated are single-stepped; code in writable mappings
    /// (JIT) is single-stepped; once the process has a second thread every
    /// thread is single-stepped.
    Branch,
}

/// Options for [`record`].
#[derive(Clone)]
pub struct RecordOptions {
    /// How to observe control flow.
    pub mode: StepMode,
    /// Stop after this many instructions (all threads together).
    pub max_instructions: Option<u64>,
    /// Bytes between PSBs.
    pub psb_period: usize,
    /// Keep every executed instruction address per thread (ground truth for tests).
    pub keep_instruction_log: bool,
    /// Set from outside (e.g. a Ctrl-C handler) to end the recording.
    pub stop: Arc<AtomicBool>,
    /// Called now and then with the number of instructions recorded so far.
    pub progress: Option<Arc<dyn Fn(u64) + Send + Sync>>,
}

impl std::fmt::Debug for RecordOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordOptions").field("mode", &self.mode).field("max_instructions", &self.max_instructions).field("psb_period", &self.psb_period).finish_non_exhaustive()
    }
}

impl Default for RecordOptions {
    fn default() -> Self {
        RecordOptions {
            mode: StepMode::Step,
            max_instructions: None,
            psb_period: DEFAULT_PSB_PERIOD,
            keep_instruction_log: false,
            stop: Arc::new(AtomicBool::new(false)),
            progress: None,
        }
    }
}

/// Errors that end a recording early (the tracee is killed).
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// A ptrace or wait call failed unexpectedly.
    #[error("{what} failed for thread {tid}: {source}")]
    Ptrace {
        /// What was attempted.
        what: &'static str,
        /// The thread.
        tid: i32,
        /// The errno.
        source: Errno,
    },
}

/// How a thread is being followed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Track {
    /// Single-stepping; `next_ip` is the instruction about to execute.
    Step,
    /// Running freely from `start` to the breakpoint ending its block.
    Block { start: u64 },
    /// Single-stepping the original instruction under a breakpoint.
    StepOver { at: u64 },
}

struct ThreadState {
    order: usize,
    writer: ThreadPtWriter,
    /// The next instruction this thread will execute, once known.
    next_ip: Option<u64>,
    track: Track,
    log: Option<Vec<u64>>,
    finished: bool,
}

struct Recorder<'a> {
    pid: Pid,
    process: TracedProcess,
    options: &'a RecordOptions,
    /// Images the process left by `execve`.
    finished_images: Vec<ImageRecording>,
    threads: HashMap<Pid, ThreadState>,
    modules: Vec<LoadedModule>,
    maps: Vec<process::Mapping>,
    total: u64,
    undecodable: u64,
    exit_ip: Option<u64>,
    /// Branch stops are in use (branch mode while the process has one thread).
    branch_stops: bool,
    /// The branch stops' breakpoints.
    int3s: Int3s,
    /// Blocks found, by first address (shared: the hot path only counts references).
    blocks: HashMap<u64, Rc<Block>>,
    /// Decoded instructions of read-only code, for single-stepping.
    insn_cache: CodeCache,
    clock: TraceClock,
}

impl Recorder<'_> {
    fn thread(&mut self, tid: Pid) -> &mut ThreadState {
        let order = self.threads.len();
        let keep = self.options.keep_instruction_log;
        let period = self.options.psb_period;
        self.threads.entry(tid).or_insert_with(|| ThreadState {
            order,
            writer: ThreadPtWriter::new(period),
            next_ip: None,
            track: Track::Step,
            log: keep.then(Vec::new),
            finished: false,
        })
    }

    fn refresh_modules(&mut self) {
        if let Ok(maps) = process::read_maps(self.pid) {
            process::add_new_modules(&mut self.modules, self.pid, &maps);
            if self.maps != maps {
                // Code may have been unmapped or replaced: rediscover blocks.
                self.blocks.clear();
                self.insn_cache.clear();
                self.maps = maps;
            }
        }
    }

    /// Reads code at `ip` as it is without our breakpoints.
    fn read_code(&self, ip: u64, buf: &mut [u8]) -> usize {
        self.int3s.read_hidden(self.pid, ip, buf)
    }

    fn decode_at(&mut self, ip: u64) -> Option<InsnInfo> {
        // Code in writable mappings may change under us (JIT): never kept.
        let (pid, int3s, maps) = (self.pid, &self.int3s, &self.maps);
        self.insn_cache.decode(ip, |bytes| int3s.read_hidden(pid, ip, bytes), || maps).map(|(insn, _)| insn)
    }

    fn record_executed(&mut self, tid: Pid, ip: u64, insn: &InsnInfo, next: Option<u64>) {
        let time = self.clock.now();
        let state = self.thread(tid);
        state.writer.executed(ip, insn, next, time);
        if let Some(log) = &mut state.log {
            log.push(ip);
        }
        self.total += 1;
    }

    /// The instruction at the thread's `next_ip` executed; control is now at `now`.
    fn executed(&mut self, tid: Pid, now: Option<u64>) {
        let Some(ip) = self.thread(tid).next_ip else {
            if let Some(now) = now {
                self.thread(tid).next_ip = Some(now);
            }
            return;
        };
        let insn = self.decode_at(ip);
        if now == Some(ip) && insn.is_some_and(|insn| insn.kind == FlowKind::Other) {
            // A REP string instruction stops after each iteration; it has not
            // finished (hardware traces it once).
            return;
        }
        match insn {
            Some(insn) => {
                self.record_executed(tid, ip, &insn, now);
                if insn.kind == FlowKind::Syscall {
                    if let Ok(regs) = ptrace::getregs(tid) {
                        // mmap, mprotect, munmap, mremap: the module list may change.
                        if matches!(regs.orig_rax, 9 | 10 | 11 | 25) {
                            self.refresh_modules();
                        }
                    }
                }
            }
            None => {
                // Unreadable or undecodable: leave a clean tracing gap.
                tracing::warn!(tid = tid.as_raw(), ip = format_args!("{ip:#x}"), "cannot decode instruction");
                self.thread(tid).writer.disable_async(ip);
                self.undecodable += 1;
            }
        }
        self.thread(tid).next_ip = now;
        if let Some(now) = now {
            // Known before it runs: an `execve` leaves no old code to read it from.
            let _ = self.decode_at(now);
        }
    }

    fn finish_thread(&mut self, tid: Pid) {
        let state = self.thread(tid);
        if !state.finished {
            if let Some(ip) = state.next_ip {
                state.writer.disable_async(ip);
            }
            state.finished = true;
        }
    }

    fn ptrace_error(what: &'static str, tid: Pid) -> impl FnOnce(Errno) -> RecordError {
        move |source| RecordError::Ptrace { what, tid: tid.as_raw(), source }
    }

    fn step(&mut self, tid: Pid, signal: Option<Signal>) -> Result<(), RecordError> {
        self.thread(tid).track = Track::Step;
        match ptrace::step(tid, signal) {
            Ok(()) | Err(Errno::ESRCH) => Ok(()),
            Err(source) => Err(RecordError::Ptrace { what: "PTRACE_SINGLESTEP", tid: tid.as_raw(), source }),
        }
    }

    fn in_writable_mapping(&self, ip: u64) -> bool {
        self.maps.iter().any(|m| m.start <= ip && ip < m.end && m.writable)
    }

    /// Lets the thread continue from its `next_ip`: with branch stops when
    /// possible, else one single step.
    fn resume(&mut self, tid: Pid, signal: Option<Signal>) -> Result<(), RecordError> {
        let Some(ip) = self.thread(tid).next_ip else { return self.step(tid, signal) };
        if !self.branch_stops || self.in_writable_mapping(ip) {
            return self.step(tid, signal);
        }
        let block = match self.blocks.get(&ip) {
            Some(block) => block.clone(),
            None => match blocks::discover(ip, |at, buf| self.read_code(at, buf), |_| false).map(Rc::new) {
                Some(block) => {
                    self.blocks.insert(ip, block.clone());
                    block
                }
                None => return self.step(tid, signal),
            },
        };
        if block.body.is_empty() && signal.is_none() {
            // Already at the branch: handle it without running.
            let regs = ptrace::getregs(tid).map_err(Self::ptrace_error("PTRACE_GETREGS", tid))?;
            return self.at_branch(tid, &block, regs);
        }
        if self.int3s.insert(self.pid, block.end).is_err() {
            return self.step(tid, signal);
        }
        self.thread(tid).track = Track::Block { start: ip };
        match ptrace::cont(tid, signal) {
            Ok(()) | Err(Errno::ESRCH) => Ok(()),
            Err(source) => Err(RecordError::Ptrace { what: "PTRACE_CONT", tid: tid.as_raw(), source }),
        }
    }

    /// The thread stands at `block.end` with `regs`: emulate the branch, or
    /// single-step the original instruction.
    fn at_branch(&mut self, tid: Pid, block: &Block, mut regs: libc::user_regs_struct) -> Result<(), RecordError> {
        let at = block.end;
        match blocks::take_branch(tid, block, &mut regs, true).map_err(Self::ptrace_error("PTRACE_SETREGS", tid))? {
            Some(next) => {
                self.record_executed(tid, at, &block.end_insn, Some(next));
                self.thread(tid).next_ip = Some(next);
                self.resume(tid, None)
            }
            None => self.step_over(tid, at, regs),
        }
    }

    /// Single-steps the original instruction at `at` (a breakpoint address).
    fn step_over(&mut self, tid: Pid, at: u64, mut regs: libc::user_regs_struct) -> Result<(), RecordError> {
        self.int3s.lift(self.pid, at).map_err(Self::ptrace_error("PTRACE_POKEDATA", tid))?;
        if regs.rip != at {
            regs.rip = at;
            ptrace::setregs(tid, regs).map_err(Self::ptrace_error("PTRACE_SETREGS", tid))?;
        }
        let state = self.thread(tid);
        state.next_ip = Some(at);
        let result = self.step(tid, None);
        self.thread(tid).track = Track::StepOver { at };
        result
    }

    /// Records the part of `block` before `upto` as executed.
    fn record_block_prefix(&mut self, tid: Pid, start: u64, upto: u64) {
        let Some(block) = self.blocks.get(&start).cloned() else { return };
        for (ip, insn) in &block.body {
            if *ip == upto {
                break;
            }
            self.record_executed(tid, *ip, insn, Some(*ip + insn.len as u64));
        }
        self.thread(tid).next_ip = Some(upto);
    }

    /// A SIGTRAP stop.
    fn on_trap(&mut self, tid: Pid) -> Result<(), RecordError> {
        let track = self.thread(tid).track;
        if let Track::Step | Track::StepOver { .. } = track {
            let Ok(now) = rip(tid) else { return Ok(()) };
            self.executed(tid, Some(now));
        }
        match track {
            Track::Step => self.resume(tid, None),
            Track::StepOver { at } => {
                if self.branch_stops {
                    let _ = self.int3s.rearm(self.pid, at);
                }
                self.resume(tid, None)
            }
            Track::Block { start } => {
                let Ok(regs) = ptrace::getregs(tid) else { return Ok(()) };
                let at = regs.rip.wrapping_sub(1);
                let Some(block) = self.blocks.get(&start).cloned().filter(|b| b.end == at) else {
                    // Not our breakpoint (the program's own int3): continue by single-stepping.
                    tracing::warn!(tid = tid.as_raw(), rip = format_args!("{:#x}", regs.rip), "unexpected trap");
                    self.record_block_prefix(tid, start, regs.rip);
                    return self.step(tid, None);
                };
                self.record_block_prefix(tid, start, at);
                self.at_branch(tid, &block, regs)
            }
        }
    }

    /// The thread stopped somewhere inside its block (a signal or exit):
    /// account for the instructions it ran.
    fn catch_up(&mut self, tid: Pid, now: u64) {
        if let Track::Block { start } = self.thread(tid).track {
            self.record_block_prefix(tid, start, now);
            self.thread(tid).track = Track::Step;
        }
    }

    /// The process became multi-threaded: single-step everything from now on
    /// (a breakpoint lifted for a step-over could be missed by another thread).
    fn leave_branch_mode(&mut self) {
        if self.branch_stops {
            tracing::info!("second thread: switching from branch stops to single-stepping");
            self.int3s.remove_all(self.pid);
            self.branch_stops = false;
        }
    }

    /// Kills the tracee and reaps every thread, closing all open traces.
    fn kill_and_drain(&mut self) {
        let tids: Vec<Pid> = self.threads.keys().copied().collect();
        for tid in tids {
            self.finish_thread(tid);
        }
        self.process.kill();
    }

    /// The threads of the image being recorded, in creation order; the
    /// recorder's per-image state starts afresh.
    fn take_image(&mut self) -> ImageRecording {
        let mut threads: Vec<(usize, ThreadRecording)> = std::mem::take(&mut self.threads)
            .into_iter()
            .map(|(tid, state)| {
                let instructions = state.writer.instructions();
                let trace = state.writer.into_bytes();
                (state.order, ThreadRecording { tid: tid.as_raw() as u32, trace, trace_file: None, instructions, instruction_log: state.log })
            })
            .collect();
        threads.sort_by_key(|(order, _)| *order);
        ImageRecording { threads: threads.into_iter().map(|(_, t)| t).collect(), modules: std::mem::take(&mut self.modules), full_state: None, mapped_files: Vec::new() }
    }

    /// `execve` succeeded in `former` (now `tid`): the old image's traces end
    /// with the system call; the new program is recorded from its first
    /// instruction as an image of its own.
    fn exec(&mut self, tid: Pid, former: Pid) -> Result<(), RecordError> {
        if let Some(ip) = self.threads.get(&former).and_then(|state| state.next_ip) {
            // The old code is gone: the instruction is known from before it ran,
            // or is the two-byte `syscall` every x86-64 execve goes through.
            let insn = self.insn_cache.get(ip).map(|(insn, _)| insn).or_else(|| classify(&[0x0f, 0x05], ip, ExecMode::Bits64));
            if let Some(insn) = insn {
                self.record_executed(former, ip, &insn, None);
            }
            self.thread(former).finished = true;
        }
        let tids: Vec<Pid> = self.threads.keys().copied().collect();
        for old in tids {
            self.finish_thread(old);
        }
        let image = self.take_image();
        tracing::info!(pid = self.pid.as_raw(), threads = image.threads.len(), "execve: a new program image");
        self.finished_images.push(image);
        // The old address space and everything learnt about it are gone.
        self.int3s.forget();
        self.blocks.clear();
        self.insn_cache.clear();
        self.maps.clear();
        self.exit_ip = None;
        self.branch_stops = self.options.mode == StepMode::Branch;
        self.refresh_modules();
        let first = rip(tid).map_err(Self::ptrace_error("PTRACE_PEEKUSER", tid))?;
        self.thread(tid).next_ip = Some(first);
        self.resume(tid, None)
    }

    fn run(&mut self) -> Result<Outcome, RecordError> {
        let first = rip(self.pid).map_err(Self::ptrace_error("PTRACE_GETREGS", self.pid))?;
        self.thread(self.pid).next_ip = Some(first);
        self.refresh_modules();
        self.resume(self.pid, None)?;
        let main_outcome;
        let mut since_progress = 0u64;
        loop {
            if self.options.stop.load(Ordering::Relaxed) {
                self.kill_and_drain();
                return Ok(Outcome::Interrupted);
            }
            if self.options.max_instructions.is_some_and(|max| self.total >= max) {
                self.kill_and_drain();
                return Ok(Outcome::InstructionLimit);
            }
            if self.total - since_progress >= 10_000 {
                since_progress = self.total;
                if let Some(progress) = &self.options.progress {
                    progress(self.total);
                }
            }
            let event = match self.process.next_event(Wait::Block) {
                Ok(Some(event)) => event,
                Ok(None) => continue, // interrupted: look at the stop flag
                Err(source) => return Err(RecordError::Ptrace { what: "waitpid", tid: -1, source }),
            };
            match event {
                ProcessEvent::ForkedChild(child) => {
                    // Not recorded: give it its code back (it is let go after this).
                    self.int3s.put_back_in(child);
                }
                ProcessEvent::Trap(tid) => self.on_trap(tid)?,
                ProcessEvent::ThreadStarted(tid) => {
                    // A new thread's first stop: it starts at the instruction after clone.
                    if let Ok(now) = rip(tid) {
                        self.thread(tid).next_ip = Some(now);
                    }
                    self.resume(tid, None)?;
                }
                ProcessEvent::Signal(tid, signal) => {
                    // Signal-delivery stop: the instruction at RIP has not executed.
                    let Ok(now) = rip(tid) else { continue };
                    self.catch_up(tid, now);
                    if let Track::StepOver { at } = self.thread(tid).track {
                        if self.branch_stops {
                            let _ = self.int3s.rearm(self.pid, at);
                        }
                    }
                    let handled = process::has_handler(self.pid, tid, signal);
                    tracing::debug!(tid = tid.as_raw(), %signal, handled, "signal");
                    if handled {
                        let state = self.thread(tid);
                        state.writer.disable_async(now);
                        state.next_ip = None; // resumes in the handler: step into it
                        self.step(tid, Some(signal))?;
                    } else {
                        self.thread(tid).next_ip = Some(now);
                        self.resume(tid, Some(signal))?;
                    }
                }
                ProcessEvent::Spawned { parent, child, kind } => {
                    match kind {
                        Spawn::Thread => {
                            self.leave_branch_mode();
                            self.thread(child);
                        }
                        // The child borrows our memory: it must run without breakpoints.
                        Spawn::Vfork => self.leave_branch_mode(),
                        Spawn::Fork => {}
                    }
                    self.step(parent, None)?;
                }
                ProcessEvent::Exec { tid, former } => self.exec(tid, former)?,
                ProcessEvent::Exiting(tid) => {
                    if tid == self.pid {
                        self.refresh_modules();
                    }
                    if let Ok(now) = rip(tid) {
                        self.catch_up(tid, now);
                        let pending = self.thread(tid).next_ip;
                        if pending.is_some() && pending != Some(now) {
                            // The pending instruction ran (a system call such as exit_group, or
                            // the last instruction before a SIGKILL landed).
                            self.executed(tid, Some(now));
                        } else if tid == self.pid {
                            self.exit_ip = Some(now);
                        }
                    }
                    self.finish_thread(tid);
                    let _ = ptrace::cont(tid, None);
                }
                ProcessEvent::Other(tid) => self.step(tid, None)?,
                ProcessEvent::ThreadGone(tid) => self.finish_thread(tid),
                ProcessEvent::Exited(code) => {
                    self.finish_thread(self.pid);
                    main_outcome = Outcome::Exited(code);
                    break;
                }
                ProcessEvent::Killed(signal) => {
                    self.finish_thread(self.pid);
                    main_outcome = Outcome::Signaled { signal, at: self.exit_ip };
                    break;
                }
            }
        }
        Ok(main_outcome)
    }
}

/// Records `tracee` (stopped at its first instruction, as [`process::launch`]
/// leaves it) until it exits, the limit is reached, or `options.stop` is set.
pub fn record(tracee: Tracee, options: &RecordOptions) -> Result<Recording, RecordError> {
    let start = Instant::now();
    let mut recorder = Recorder {
        pid: tracee.pid,
        process: TracedProcess::new(tracee.pid, [tracee.pid]),
        options,
        finished_images: Vec::new(),
        threads: HashMap::new(),
        modules: Vec::new(),
        maps: Vec::new(),
        total: 0,
        undecodable: 0,
        exit_ip: None,
        branch_stops: options.mode == StepMode::Branch,
        int3s: Int3s::default(),
        blocks: HashMap::new(),
        insn_cache: CodeCache::default(),
        clock: TraceClock::choose(),
    };
    let result = recorder.run();
    tracee.unpin_tracer();
    let outcome = match result {
        Ok(outcome) => outcome,
        Err(error) => {
            recorder.kill_and_drain();
            return Err(error);
        }
    };
    let last = recorder.take_image();
    let mut images = std::mem::take(&mut recorder.finished_images);
    images.push(last);
    Ok(Recording {
        pid: tracee.pid.as_raw() as u32,
        images,
        outcome,
        elapsed: start.elapsed(),
        undecodable: recorder.undecodable,
        tsc_conversion: Some(recorder.clock.conversion()),
        warnings: Vec::new(),
    })
}
