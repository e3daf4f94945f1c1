//! The software backend: records a program's user-space control flow by
//! single-stepping every thread under ptrace, and encodes it as Intel PT with
//! [`ThreadPtWriter`](crate::pt_writer::ThreadPtWriter).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::ptrace;
use nix::sys::signal::{kill, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use retrace_decoder::x86::{classify, ExecMode, FlowKind, InsnInfo};

use crate::process::{self, LoadedModule, Tracee};
use crate::pt_writer::{ThreadPtWriter, DEFAULT_PSB_PERIOD};

/// How the software backend observes control flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepMode {
    /// `PTRACE_SINGLESTEP` after every instruction.
    Step,
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

/// How the recording ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The program exited with this status.
    Exited(i32),
    /// The program was killed by a signal; `at` is where the main thread was.
    Signaled {
        /// The signal.
        signal: Signal,
        /// The instruction the main thread had not yet executed, if known.
        at: Option<u64>,
    },
    /// `max_instructions` was reached; the program was killed.
    InstructionLimit,
    /// The recording was interrupted (Ctrl-C); the program was killed.
    Interrupted,
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Outcome::Exited(code) => write!(f, "program exited with status {code}"),
            Outcome::Signaled { signal, at: Some(at) } => write!(f, "program killed by {signal} at {at:#x}"),
            Outcome::Signaled { signal, at: None } => write!(f, "program killed by {signal}"),
            Outcome::InstructionLimit => write!(f, "instruction limit reached; program killed"),
            Outcome::Interrupted => write!(f, "recording interrupted; program killed"),
        }
    }
}

/// One thread's recording.
#[derive(Debug, Clone)]
pub struct ThreadRecording {
    /// Thread id.
    pub tid: u32,
    /// Its Intel PT stream.
    pub trace: Vec<u8>,
    /// Instructions recorded.
    pub instructions: u64,
    /// Every executed instruction's address, when asked for.
    pub instruction_log: Option<Vec<u64>>,
}

/// A finished recording.
#[derive(Debug, Clone)]
pub struct Recording {
    /// Process id.
    pub pid: u32,
    /// Threads in creation order.
    pub threads: Vec<ThreadRecording>,
    /// Modules seen mapped during the recording.
    pub modules: Vec<LoadedModule>,
    /// How it ended.
    pub outcome: Outcome,
    /// Wall time of the recording.
    pub elapsed: Duration,
    /// Instructions whose bytes could not be read or decoded (recorded as
    /// tracing gaps).
    pub undecodable: u64,
}

impl Recording {
    /// Instructions in all threads.
    pub fn instructions(&self) -> u64 {
        self.threads.iter().map(|t| t.instructions).sum()
    }

    /// Bytes of trace in all threads.
    pub fn trace_bytes(&self) -> usize {
        self.threads.iter().map(|t| t.trace.len()).sum()
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

struct ThreadState {
    order: usize,
    writer: ThreadPtWriter,
    /// The next instruction this thread will execute, once known.
    next_ip: Option<u64>,
    log: Option<Vec<u64>>,
    finished: bool,
}

fn tsc() -> u64 {
    // SAFETY: RDTSC has no preconditions on x86-64.
    unsafe { core::arch::x86_64::_rdtsc() }
}

fn rip(tid: Pid) -> Result<u64, Errno> {
    ptrace::getregs(tid).map(|regs| regs.rip)
}

struct Recorder<'a> {
    pid: Pid,
    options: &'a RecordOptions,
    threads: HashMap<Pid, ThreadState>,
    modules: Vec<LoadedModule>,
    total: u64,
    undecodable: u64,
    exit_ip: Option<u64>,
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
            log: keep.then(Vec::new),
            finished: false,
        })
    }

    fn refresh_modules(&mut self) {
        if let Ok(maps) = process::read_maps(self.pid) {
            for module in process::modules_in(self.pid, &maps) {
                if !self.modules.iter().any(|m| m.path == module.path && m.base == module.base) {
                    tracing::debug!(path = module.path, base = format_args!("{:#x}", module.base), "module");
                    self.modules.push(module);
                }
            }
        }
    }

    fn decode_at(&mut self, tid: Pid, ip: u64) -> Option<InsnInfo> {
        let mut bytes = [0u8; 16];
        let n = process::read_memory(tid, ip, &mut bytes);
        classify(&bytes[..n], ip, ExecMode::Bits64)
    }

    /// The instruction at the thread's `next_ip` executed; control is now at `now`.
    fn executed(&mut self, tid: Pid, now: Option<u64>) {
        let Some(ip) = self.thread(tid).next_ip else {
            if let Some(now) = now {
                self.thread(tid).next_ip = Some(now);
            }
            return;
        };
        let insn = self.decode_at(tid, ip);
        if now == Some(ip) && insn.is_some_and(|insn| insn.kind == FlowKind::Other) {
            // A REP string instruction stops after each iteration; it has not
            // finished (hardware traces it once).
            return;
        }
        let time = tsc();
        let state = self.thread(tid);
        match insn {
            Some(insn) => {
                state.writer.executed(ip, &insn, now, time);
                if let Some(log) = &mut state.log {
                    log.push(ip);
                }
                self.total += 1;
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
                state.writer.disable_async(ip);
                self.undecodable += 1;
            }
        }
        let state = self.thread(tid);
        state.next_ip = now;
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

    fn step(&self, tid: Pid, signal: Option<Signal>) -> Result<(), RecordError> {
        match ptrace::step(tid, signal) {
            Ok(()) | Err(Errno::ESRCH) => Ok(()),
            Err(source) => Err(RecordError::Ptrace { what: "PTRACE_SINGLESTEP", tid: tid.as_raw(), source }),
        }
    }

    /// Kills the tracee and reaps every thread, closing all open traces.
    fn kill_and_drain(&mut self) {
        let tids: Vec<Pid> = self.threads.keys().copied().collect();
        for tid in tids {
            self.finish_thread(tid);
        }
        let _ = kill(self.pid, Signal::SIGKILL);
        while let Ok(status) = waitpid(None, Some(WaitPidFlag::__WALL)) {
            if let WaitStatus::PtraceEvent(tid, ..) | WaitStatus::Stopped(tid, _) = status {
                let _ = ptrace::cont(tid, None);
            }
        }
    }

    fn run(&mut self) -> Result<Outcome, RecordError> {
        let first = rip(self.pid).map_err(|source| RecordError::Ptrace { what: "PTRACE_GETREGS", tid: self.pid.as_raw(), source })?;
        self.thread(self.pid).next_ip = Some(first);
        self.refresh_modules();
        self.step(self.pid, None)?;
        let mut main_outcome = None;
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
            let status = match waitpid(None, Some(WaitPidFlag::__WALL)) {
                Ok(status) => status,
                Err(Errno::ECHILD) => break,
                Err(Errno::EINTR) => continue,
                Err(source) => return Err(RecordError::Ptrace { what: "waitpid", tid: -1, source }),
            };
            match status {
                WaitStatus::Stopped(tid, Signal::SIGTRAP) => {
                    match rip(tid) {
                        Ok(now) => self.executed(tid, Some(now)),
                        Err(_) => continue,
                    }
                    self.step(tid, None)?;
                }
                WaitStatus::Stopped(tid, Signal::SIGSTOP) if !self.threads.contains_key(&tid) || self.thread(tid).next_ip.is_none() => {
                    // A new thread's first stop: it starts at the instruction after clone.
                    if let Ok(now) = rip(tid) {
                        self.thread(tid).next_ip = Some(now);
                    }
                    self.step(tid, None)?;
                }
                WaitStatus::Stopped(tid, signal) => {
                    // Signal-delivery stop: the instruction at RIP has not executed.
                    let handled = process::has_handler(self.pid, tid, signal);
                    if handled {
                        if let Ok(now) = rip(tid) {
                            let state = self.thread(tid);
                            state.writer.disable_async(now);
                            state.next_ip = None; // resumes in the handler
                        }
                    }
                    tracing::debug!(tid = tid.as_raw(), %signal, handled, "signal");
                    self.step(tid, Some(signal))?;
                }
                WaitStatus::PtraceEvent(tid, _, event) if event == libc::PTRACE_EVENT_CLONE => {
                    if let Ok(new) = ptrace::getevent(tid) {
                        self.thread(Pid::from_raw(new as i32));
                    }
                    self.step(tid, None)?;
                }
                WaitStatus::PtraceEvent(tid, _, event) if event == libc::PTRACE_EVENT_EXIT => {
                    if tid == self.pid {
                        self.refresh_modules();
                    }
                    if let Ok(now) = rip(tid) {
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
                WaitStatus::PtraceEvent(tid, ..) => self.step(tid, None)?,
                WaitStatus::Exited(tid, code) => {
                    self.finish_thread(tid);
                    if tid == self.pid {
                        main_outcome = Some(Outcome::Exited(code));
                    }
                }
                WaitStatus::Signaled(tid, signal, _) => {
                    self.finish_thread(tid);
                    if tid == self.pid {
                        main_outcome = Some(Outcome::Signaled { signal, at: self.exit_ip });
                    }
                }
                _ => {}
            }
        }
        Ok(main_outcome.unwrap_or(Outcome::Exited(0)))
    }
}

/// Records `tracee` (stopped at its first instruction, as [`process::launch`]
/// leaves it) until it exits, the limit is reached, or `options.stop` is set.
pub fn record(tracee: Tracee, options: &RecordOptions) -> Result<Recording, RecordError> {
    let start = Instant::now();
    let mut recorder = Recorder {
        pid: tracee.pid,
        options,
        threads: HashMap::new(),
        modules: Vec::new(),
        total: 0,
        undecodable: 0,
        exit_ip: None,
    };
    let outcome = match recorder.run() {
        Ok(outcome) => outcome,
        Err(error) => {
            recorder.kill_and_drain();
            return Err(error);
        }
    };
    let mut threads: Vec<(usize, ThreadRecording)> = recorder
        .threads
        .into_iter()
        .map(|(tid, state)| {
            let instructions = state.writer.instructions();
            (
                state.order,
                ThreadRecording { tid: tid.as_raw() as u32, trace: state.writer.into_bytes(), instructions, instruction_log: state.log },
            )
        })
        .collect();
    threads.sort_by_key(|(order, _)| *order);
    Ok(Recording {
        pid: tracee.pid.as_raw() as u32,
        threads: threads.into_iter().map(|(_, t)| t).collect(),
        modules: recorder.modules,
        outcome,
        elapsed: start.elapsed(),
        undecodable: recorder.undecodable,
    })
}
