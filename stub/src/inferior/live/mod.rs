//! A live process as a target: registers, memory, software and hardware
//! breakpoints, threads and resume actions on top of ptrace (gdbstub's
//! `Target`), how it stops ([`stops`]) and its libraries and memory
//! regions ([`libraries`]). Process control itself (launch, attach) comes
//! from `retrace-collector`.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::num::NonZeroUsize;
use std::os::fd::{AsFd, BorrowedFd};

use gdbstub::common::{Signal as GdbSignal, Tid};
use gdbstub::target::ext::base::multithread::{
    MultiThreadBase, MultiThreadResume, MultiThreadResumeOps, MultiThreadSchedulerLocking,
    MultiThreadSchedulerLockingOps, MultiThreadSingleStep, MultiThreadSingleStepOps,
};
use gdbstub::target::ext::base::reverse_exec::{ReverseContOps, ReverseStepOps};
use gdbstub::target::ext::base::single_register_access::{SingleRegisterAccess, SingleRegisterAccessOps};
use gdbstub::target::ext::thread_extra_info::{ThreadExtraInfo, ThreadExtraInfoOps};
use gdbstub::target::ext::auxv::Auxv;
use gdbstub::target::ext::exec_file::ExecFile;
use gdbstub::target::ext::libraries::LibrariesSvr4;
use gdbstub::target::ext::extended_mode::{
    Args, AttachKind, CurrentActivePid, CurrentActivePidOps, ExtendedMode, ShouldTerminate,
};
use gdbstub::target::{TargetError, TargetResult};
use nix::sys::ptrace;
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::unistd::Pid;
use retrace_collector::control::{Resume, TracedProcess};
use retrace_collector::process;

use crate::inferior::InferiorError;
use crate::arch::{RegNumber, Regs};
use crate::inferior::{copy_window, Inferior, MemoryRegion, Movement, StopNote, StopReason};
use crate::inferior::replay::{History, Replay, ReplaySession};

/// The program's memory as [`ProgramMemory`] reads it, from a
/// `ProcessTarget`'s fields only (so that another of its fields can be
/// borrowed mutably beside it).
macro_rules! program_memory_of {
    ($target:expr) => {
        ProgramMemory { pid: $target.pid, originals: &$target.originals, blocks: &$target.blocks }
    };
}

mod block_runs;
mod breakpoints;
mod full;
mod past;
pub mod trace_rings;
pub use full::RecordMode;
pub use trace_rings::TraceRecorder;
mod stops;

pub use breakpoints::triggered_slot;
pub use crate::inferior::ptrace_registers::{read_all_registers, write_all_registers};

const INT3: u8 = 0xcc;

/// What a thread does at the next resume.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Continue, delivering the signal if any.
    Continue(Option<Signal>),
    /// Execute one instruction, delivering the signal if any.
    Step(Option<Signal>),
}

/// A traced process, all threads stopped unless resumed.
pub struct ProcessTarget {
    /// The process id.
    pub pid: Pid,
    /// Live threads.
    pub threads: BTreeSet<Pid>,
    /// The process's events: the collector's process control, the one
    /// owner of `waitpid` for it ([`stops`]).
    control: TracedProcess,
    /// The program ended while other threads were being stopped: reported
    /// at the next wait.
    ended: Option<StopReason>,
    /// The byte under each `int3` of a software breakpoint of the
    /// session's table: address → original byte.
    originals: HashMap<u64, u8>,
    actions: HashMap<Pid, Action>,
    /// Only threads with explicit actions run (e.g. a single step).
    pub scheduler_locked: bool,
    /// Threads currently running (resumed, not yet stopped).
    pub running: BTreeSet<Pid>,
    /// Threads resumed with a single step.
    pub stepping: BTreeSet<Pid>,
    /// Threads created since the last stop whose first stop is still due.
    new_threads: BTreeSet<Pid>,
    /// The client asked for a stop (Ctrl-C) that is not reported yet.
    interrupted: bool,
    /// Readable when a child changed state (SIGCHLD, blocked for the session).
    sigchld: Option<SignalFd>,
    /// What is recorded ([`recording`]).
    tracing: trace_rings::Tracing,
    /// Traced threads in a recorded continue (stepped one instruction at a time).
    recording: BTreeSet<Pid>,
    /// A stop found while resuming (a recorded thread continued onto a
    /// breakpoint): the threads already started are stopped and it is reported.
    pending_stop: Option<StopReason>,
    /// Signals that stopped a thread while the stub was stopping it for
    /// another thread's stop: each is reported at the thread's next resume,
    /// before anything runs.
    deferred_signals: BTreeMap<Pid, VecDeque<Signal>>,
    /// An exec met while the other threads were being stopped: reported
    /// instead of the stop that was due (its thread went with the old image).
    exec_stop: Option<StopReason>,
    /// How the client is told of an exec (see [`ExecEvents`]).
    exec_events: ExecEvents,
    /// The history kept for reverse execution (`--record`).
    full: Option<full::FullRecording>,
    /// Recorded continues run block by block ([`block_runs`]).
    blocks: block_runs::BlockRuns,
    /// The breakpoint table, where the debugger stands in the history,
    /// a stop to report without waiting (an interrupt while nothing ran,
    /// a move through the history) and what its reply says.
    session: ReplaySession,
}

impl std::fmt::Debug for ProcessTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcessTarget").field("pid", &self.pid).field("threads", &self.threads).field("session", &self.session).finish_non_exhaustive()
    }
}

/// How an exec is reported: by the words of the client's protocol, once
/// the client is known to take them, else as the bare SIGTRAP the kernel
/// sends without exec events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ExecEvents {
    /// `T05` alone.
    Signal,
    /// lldb-server's `reason:exec;` (LLDB reloads its modules and sets its
    /// breakpoints again in the new image).
    Lldb,
    /// gdbserver's `exec:<path in hex>;`, for a GDB that offered
    /// `exec-events+` ("process N is executing new program: PATH").
    Gdb,
}

/// A stopped thread's RIP, where it can be read.
fn rip(tid: Pid) -> Option<u64> {
    retrace_collector::control::rip(tid).ok()
}

/// gdbstub's thread id for a Linux thread.
pub(crate) fn tid_of(pid: Pid) -> Tid {
    NonZeroUsize::new(pid.as_raw() as usize).expect("thread ids are positive")
}

fn pid_of(tid: Tid) -> Pid {
    Pid::from_raw(tid.get() as i32)
}

fn signal_of(signal: Option<GdbSignal>) -> Option<Signal> {
    signal.and_then(crate::signals::from_gdb)
}

/// Writes `bytes` into `pid`'s memory through `/proc/PID/mem` (which, for a
/// tracer, writes read-only code pages too).
fn poke_into(pid: Pid, address: u64, bytes: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    let mem = std::fs::OpenOptions::new().write(true).open(format!("/proc/{pid}/mem"))?;
    mem.write_all_at(bytes, address)
}

/// The program's memory as the program has it: what the step observers
/// (the trace rings, the full recording) read, with the stub's breakpoints
/// and block-run `int3`s hidden. Built from the target's fields, so that an
/// observer borrowed mutably beside it can read through it.
struct ProgramMemory<'a> {
    /// The process.
    pid: Pid,
    /// The bytes under the stub's `int3`s: address → original byte.
    originals: &'a HashMap<u64, u8>,
    /// The block runs' own `int3`s.
    blocks: &'a block_runs::BlockRuns,
}

impl ProgramMemory<'_> {
    /// Reads at `address`; how many bytes were read.
    fn read(&self, address: u64, buf: &mut [u8]) -> usize {
        let n = process::read_memory(self.pid, address, buf);
        self.blocks.hide(address, &mut buf[..n]);
        for (i, byte) in buf[..n].iter_mut().enumerate() {
            if let Some(original) = self.originals.get(&(address + i as u64)) {
                *byte = *original;
            }
        }
        n
    }
}

impl ProcessTarget {
    /// A target for the stopped process `pid` (its main thread).
    pub fn new(pid: Pid) -> Self {
        Self::with_threads(pid, &[pid])
    }

    /// A target for the stopped process `pid` with these stopped threads.
    pub fn with_threads(pid: Pid, threads: &[Pid]) -> Self {
        ProcessTarget {
            pid,
            threads: threads.iter().copied().collect(),
            control: TracedProcess::new(pid, threads.iter().copied()),
            ended: None,
            originals: HashMap::new(),
            actions: HashMap::new(),
            scheduler_locked: false,
            running: BTreeSet::new(),
            stepping: BTreeSet::new(),
            new_threads: BTreeSet::new(),
            interrupted: false,
            sigchld: None,
            tracing: trace_rings::Tracing::default(),
            recording: BTreeSet::new(),
            pending_stop: None,
            deferred_signals: BTreeMap::new(),
            exec_stop: None,
            exec_events: ExecEvents::Signal,
            full: None,
            blocks: block_runs::BlockRuns::default(),
            session: ReplaySession::new(),
        }
    }

    /// Traces are made by `recorder` (`--trace-with`; `auto` by default).
    pub fn trace_with(mut self, recorder: TraceRecorder) -> Self {
        self.tracing.recorder = recorder;
        self
    }

    /// Writes to the tracee's memory through `/proc/<pid>/mem` (works on
    /// read-only code pages too).
    fn poke(&self, address: u64, bytes: &[u8]) -> std::io::Result<()> {
        poke_into(self.pid, address, bytes)
    }

    /// Lets a forked child go, untraced (GDB's default: follow the parent,
    /// detach the child): a child with its own copy of memory first gets the
    /// original bytes under our breakpoints back. A vforked child shares the
    /// parent's memory (the kernel's `kcmp(KCMP_VM)` says so); its bytes are
    /// the parent's and stay as they are.
    pub(super) fn release_forked_child(&self, child: Pid) {
        // SAFETY: kcmp only compares two processes' kernel objects.
        let shares_memory = unsafe { libc::syscall(libc::SYS_kcmp, self.pid.as_raw(), child.as_raw(), 1 /* KCMP_VM */, 0, 0) } == 0;
        if !shares_memory {
            for (&address, &original) in &self.originals {
                let _ = poke_into(child, address, &[original]);
            }
        }
        // The process control detaches it before its next event.
        tracing::debug!(child = child.as_raw(), shares_memory, "forked child let go");
    }

    /// A thread's registers where the debugger stands: from the history
    /// in the past (or now, for a thread the history does not cover).
    fn registers(&self, tid: Pid) -> Option<Regs> {
        if let Some(position) = self.past() {
            if let Some(regs) = self.past_registers(tid, position) {
                return Some(regs);
            }
        }
        read_all_registers(tid).ok()
    }

    /// Before a write of the debugger's: in the past, the process goes
    /// into that past state ([`ProcessTarget::divert`]); refused where the
    /// past state is not known.
    fn divert_for_write(&mut self) -> Result<(), TargetError<InferiorError>> {
        self.divert().map_err(|reason| {
            tracing::warn!(%reason, "write in the past refused");
            TargetError::NonFatal
        })
    }

    /// Reads the process's memory as the program has it now: our
    /// breakpoints hidden. Returns how many bytes were read.
    pub(super) fn program_memory(&self, address: u64, buf: &mut [u8]) -> usize {
        program_memory_of!(self).read(address, buf)
    }

    /// A signal deferred for a thread this resume would run: its stop,
    /// reported now instead (nothing runs), one signal per resume. Not
    /// while the client passes a signal to any thread: that one would be
    /// lost with the resume; the deferred ones wait for the next.
    fn take_deferred_signal(&mut self) -> Option<StopReason> {
        if self.actions.values().any(|action| matches!(action, Action::Continue(Some(_)) | Action::Step(Some(_)))) {
            return None;
        }
        let tid = self.deferred_signals.keys().copied().find(|tid| self.actions.contains_key(tid) || !self.scheduler_locked)?;
        let signals = self.deferred_signals.get_mut(&tid)?;
        let signal = signals.pop_front()?;
        if signals.is_empty() {
            self.deferred_signals.remove(&tid);
        }
        Some(StopReason::SignalWithThread { tid: tid_of(tid), signal: crate::signals::to_gdb(signal) })
    }

    /// Starts every thread per the resume actions; returns how many run.
    fn start_threads(&mut self) -> Result<usize, InferiorError> {
        self.stepping.clear();
        self.recording.clear();
        self.traces_resumed();
        let threads: Vec<Pid> = self.threads.iter().copied().collect();
        for tid in threads {
            let action = match self.actions.get(&tid) {
                Some(action) => *action,
                None if self.scheduler_locked => continue,
                None => Action::Continue(None),
            };
            let traced = self.records(tid);
            let result = match action {
                Action::Continue(signal) if traced => {
                    self.start_recorded(tid, signal)?;
                    continue;
                }
                Action::Continue(signal) => self.control.resume(tid, Resume::Free, signal),
                Action::Step(signal) => {
                    if traced {
                        self.before_traced_resume(tid, signal);
                        self.prepare_step(tid, signal);
                        self.tracing.single_steps += 1;
                    }
                    self.stepping.insert(tid);
                    self.control.resume(tid, Resume::Step, signal)
                }
            };
            tracing::debug!(tid = tid.as_raw(), ?action, ?result, "resume");
            match result {
                Ok(()) => {
                    self.running.insert(tid);
                }
                Err(nix::Error::ESRCH) => {}
                Err(errno) => return Err(InferiorError::Process { what: format!("resuming thread {tid}"), errno }),
            }
        }
        Ok(self.running.len())
    }
}

impl Inferior for ProcessTarget {
    fn client_is_lldb(&mut self) {
        self.session.run_on_at_end();
        self.exec_events = ExecEvents::Lldb;
    }

    fn client_takes_exec_events(&mut self) {
        self.exec_events = ExecEvents::Gdb;
    }

    fn pid(&self) -> u32 {
        self.pid.as_raw() as u32
    }

    fn start_session(&mut self) -> std::io::Result<()> {
        let mut mask = SigSet::empty();
        mask.add(Signal::SIGCHLD);
        mask.thread_block()?;
        self.sigchld = Some(SignalFd::with_flags(&mask, SfdFlags::SFD_NONBLOCK)?);
        Ok(())
    }

    fn has_thread(&self, tid: u64) -> bool {
        self.client_threads().contains(&tid)
    }

    fn any_thread(&self) -> Option<u64> {
        self.client_threads().first().copied()
    }

    fn stop_events(&self) -> Option<BorrowedFd<'_>> {
        self.sigchld.as_ref().map(|fd| fd.as_fd())
    }

    fn poll_stop(&mut self) -> Option<StopReason> {
        if let Some(stop) = self.session.take_stop() {
            self.interrupted = false;
            return Some(stop);
        }
        if let Some(sigchld) = &self.sigchld {
            while let Ok(Some(_)) = sigchld.read_signal() {}
        }
        let reason = match self.pending_stop.take() {
            Some(reason) => {
                self.stop_others(None);
                reason
            }
            None => self.next_stop()?,
        };
        let reason = self.exec_stop.take().unwrap_or(reason);
        self.interrupted = false;
        self.traces_stopped();
        Some(reason)
    }

    fn interrupt(&mut self) {
        if self.running.is_empty() {
            // Nothing runs (a resume that started no thread): the stop is now.
            if let Some(&tid) = self.threads.first() {
                self.session.report(StopReason::SignalWithThread { tid: tid_of(tid), signal: gdbstub::common::Signal::SIGINT });
            }
        }
        for tid in &self.running {
            // SAFETY: tgkill has no memory-safety preconditions.
            unsafe { libc::syscall(libc::SYS_tgkill, self.pid.as_raw(), tid.as_raw(), libc::SIGSTOP) };
        }
        self.interrupted = true;
    }

    fn memory_region(&self, address: u64) -> MemoryRegion {
        match process::read_maps(self.pid) {
            Ok(maps) => MemoryRegion::of(&maps, address),
            Err(_) => MemoryRegion::Unknown,
        }
    }

    fn kill(&mut self) {
        self.control.kill();
    }

    /// Lets the program run on untraced, as gdbserver leaves it: the
    /// present put back (a diversion in the past ends), every breakpoint's
    /// byte restored and every thread's debug registers cleared — a
    /// watchpoint left armed (LLDB detaches without removing its
    /// watchpoints) would kill the program with SIGTRAP at its next write.
    fn detach(&mut self) {
        self.settle_diversion(false);
        self.remove_all_breakpoints();
        self.session.breakpoints_mut().free_all_slots();
        if let Err(error) = self.apply_debug_registers() {
            tracing::warn!(%error, "clearing the debug registers before detaching");
        }
        for tid in &self.threads {
            let _ = ptrace::detach(*tid, None);
        }
    }

    fn take_stop_note(&mut self) -> Option<StopNote> {
        self.session.take_note()
    }

    fn take_stood_still(&mut self) -> bool {
        ProcessTarget::take_stood_still(self)
    }

    fn support_tracing(&mut self) -> Option<&mut dyn crate::inferior::TraceOps> {
        Some(self)
    }

    fn register_available(&mut self, tid: u64, n: usize) -> bool {
        let tid = Pid::from_raw(tid as i32);
        self.registers(tid).is_none_or(|regs| regs.is_available(n))
    }

    fn support_history(&mut self) -> Option<Box<dyn crate::inferior::HistoryOps + '_>> {
        self.live_replay().map(|replay| Box::new(replay) as Box<dyn crate::inferior::HistoryOps>)
    }

    fn records_history_when_asked(&self) -> bool {
        true
    }

    fn history_move_refused(&self, movement: Movement) -> Option<&'static str> {
        let history = self.live_history();
        self.session.refusal(movement, history.as_ref().map(|h| h as &dyn History))
    }
}

impl MultiThreadBase for ProcessTarget {
    fn read_registers(&mut self, regs: &mut Regs, tid: Tid) -> TargetResult<(), Self> {
        *regs = self.registers(pid_of(tid)).ok_or(TargetError::NonFatal)?;
        Ok(())
    }

    fn write_registers(&mut self, regs: &Regs, tid: Tid) -> TargetResult<(), Self> {
        self.divert_for_write()?;
        write_all_registers(pid_of(tid), regs).map_err(|_| TargetError::NonFatal)
    }

    fn support_single_register_access(&mut self) -> Option<SingleRegisterAccessOps<'_, Tid, Self>> {
        Some(self)
    }

    fn read_addrs(&mut self, start: u64, data: &mut [u8], _tid: Tid) -> TargetResult<usize, Self> {
        let n = match self.past() {
            Some(position) => self.past_memory(position, start, data),
            None => self.program_memory(start, data),
        };
        if n == 0 && !data.is_empty() {
            return Err(TargetError::NonFatal);
        }
        Ok(n)
    }

    fn write_addrs(&mut self, start: u64, data: &[u8], _tid: Tid) -> TargetResult<(), Self> {
        self.divert_for_write()?;
        self.before_debugger_write(start, data.len());
        // Keep breakpoints in place over written bytes, remembering the new originals.
        let mut bytes = data.to_vec();
        for (i, byte) in bytes.iter_mut().enumerate() {
            if let Some(original) = self.originals.get_mut(&(start + i as u64)) {
                *original = *byte;
                *byte = INT3;
            }
        }
        self.poke(start, &bytes).map_err(TargetError::Io)
    }

    fn list_active_threads(&mut self, register: &mut dyn FnMut(Tid)) -> Result<(), Self::Error> {
        for tid in self.client_threads() {
            register(tid_of(Pid::from_raw(tid as i32)));
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

/// A thread's name (`/proc/<pid>/task/<tid>/comm`), shown by `info threads`.
impl ThreadExtraInfo for ProcessTarget {
    fn thread_extra_info(&self, tid: Tid, buf: &mut [u8]) -> Result<usize, Self::Error> {
        let name = std::fs::read_to_string(format!("/proc/{}/task/{}/comm", self.pid, tid.get())).unwrap_or_default();
        Ok(copy_window(name.trim_end().as_bytes(), 0, buf.len(), buf))
    }
}

impl SingleRegisterAccess<Tid> for ProcessTarget {
    fn read_register(&mut self, tid: Tid, reg: RegNumber, buf: &mut [u8]) -> TargetResult<usize, Self> {
        let regs = self.registers(pid_of(tid)).ok_or(TargetError::NonFatal)?;
        if !regs.is_available(reg.0) {
            return Ok(0); // `xx…`
        }
        let bytes = regs.register_bytes(reg.0).ok_or(TargetError::NonFatal)?;
        Ok(copy_window(&bytes, 0, buf.len(), buf))
    }

    fn write_register(&mut self, tid: Tid, reg: RegNumber, value: &[u8]) -> TargetResult<(), Self> {
        self.divert_for_write()?;
        let tid = pid_of(tid);
        let mut regs = read_all_registers(tid).map_err(|_| TargetError::NonFatal)?;
        regs.set_register(reg.0, value).map_err(|_| TargetError::NonFatal)?;
        write_all_registers(tid, &regs).map_err(|_| TargetError::NonFatal)
    }
}

impl MultiThreadResume for ProcessTarget {
    fn resume(&mut self) -> Result<(), Self::Error> {
        self.settle_diversion(true);
        let step = self.actions.iter().find(|(_, action)| matches!(action, Action::Step(_))).map(|(tid, _)| *tid);
        if let Some(stop) = self.live_replay().and_then(|mut replay| replay.take_armed(step.is_some())) {
            self.session.report(stop);
            return Ok(());
        }
        if self.past().is_some() {
            match self.replay_forwards(step) {
                Some(stop) => {
                    self.session.report(stop);
                    return Ok(());
                }
                // At the present: the live process runs on, recorded.
                None => {}
            }
        }
        if let Some(stop) = self.take_deferred_signal() {
            self.session.report(stop);
            return Ok(());
        }
        self.start_threads().map(|_| ())
    }

    fn clear_resume_actions(&mut self) -> Result<(), Self::Error> {
        self.actions.clear();
        self.scheduler_locked = false;
        Ok(())
    }

    fn set_resume_action_continue(&mut self, tid: Tid, signal: Option<GdbSignal>) -> Result<(), Self::Error> {
        self.actions.insert(pid_of(tid), Action::Continue(signal_of(signal)));
        Ok(())
    }

    fn support_single_step(&mut self) -> Option<MultiThreadSingleStepOps<'_, Self>> {
        Some(self)
    }

    fn support_scheduler_locking(&mut self) -> Option<MultiThreadSchedulerLockingOps<'_, Self>> {
        Some(self)
    }

    // Offered without a recording too: a client's reverse command then
    // hears why it cannot go back (`replay::NOT_RECORDED`), where GDB would only
    // say "Target remote does not support this command".
    fn support_reverse_cont(&mut self) -> Option<ReverseContOps<'_, Tid, Self>> {
        Some(self)
    }

    fn support_reverse_step(&mut self) -> Option<ReverseStepOps<'_, Tid, Self>> {
        Some(self)
    }
}

impl crate::inferior::replay::TimeTravel for ProcessTarget {
    fn replay(&mut self) -> Option<Replay<'_>> {
        self.live_replay()
    }

    fn session(&mut self) -> &mut ReplaySession {
        &mut self.session
    }

    fn before_move(&mut self) {
        self.settle_diversion(false);
    }
}

crate::inferior::replay::offer_reverse_execution!(ProcessTarget);

impl MultiThreadSingleStep for ProcessTarget {
    fn set_resume_action_step(&mut self, tid: Tid, signal: Option<GdbSignal>) -> Result<(), Self::Error> {
        self.actions.insert(pid_of(tid), Action::Step(signal_of(signal)));
        Ok(())
    }
}

impl MultiThreadSchedulerLocking for ProcessTarget {
    fn set_resume_action_scheduler_lock(&mut self) -> Result<(), Self::Error> {
        self.scheduler_locked = true;
        Ok(())
    }
}

impl ExecFile for ProcessTarget {
    fn get_exec_file(
        &self,
        _pid: Option<gdbstub::common::Pid>,
        offset: u64,
        length: usize,
        buf: &mut [u8],
    ) -> TargetResult<usize, Self> {
        let path = process::executable_path(self.pid).ok_or(TargetError::NonFatal)?;
        Ok(copy_window(path.as_os_str().as_encoded_bytes(), offset, length, buf))
    }
}

impl Auxv for ProcessTarget {
    fn get_auxv(&self, offset: u64, length: usize, buf: &mut [u8]) -> TargetResult<usize, Self> {
        let auxv = std::fs::read(format!("/proc/{}/auxv", self.pid)).map_err(TargetError::Io)?;
        Ok(copy_window(&auxv, offset, length, buf))
    }
}

/// The dynamic linker's link map. Before it has run there is none: an error
/// reply, after which GDB and LLDB wait for the rendezvous breakpoint and ask
/// again (lldb-server answers the same way).
impl LibrariesSvr4 for ProcessTarget {
    fn get_libraries_svr4(&self, offset: u64, length: usize, buf: &mut [u8]) -> TargetResult<usize, Self> {
        let auxv = std::fs::read(format!("/proc/{}/auxv", self.pid)).map_err(TargetError::Io)?;
        match crate::inferior::libraries::library_list(&auxv, &crate::inferior::libraries::ProcessMemory(self.pid)) {
            Ok(xml) => Ok(copy_window(xml.as_bytes(), offset, length, buf)),
            Err(error) => {
                tracing::debug!(%error, "no library list");
                Err(TargetError::NonFatal)
            }
        }
    }
}

/// Extended mode is enabled so that thread ids carry the real pid
/// (`p<pid>.<tid>`; gdbstub uses a fake pid 1 otherwise, and LLDB then
/// ignores stop replies for a process it does not know). Starting or
/// attaching to other programs through the client is not offered.
impl ExtendedMode for ProcessTarget {
    fn run(&mut self, _filename: Option<&[u8]>, _args: Args<'_, '_>) -> TargetResult<gdbstub::common::Pid, Self> {
        Err(TargetError::NonFatal)
    }

    fn attach(&mut self, _pid: gdbstub::common::Pid) -> TargetResult<(), Self> {
        Err(TargetError::NonFatal)
    }

    fn query_if_attached(&mut self, _pid: gdbstub::common::Pid) -> TargetResult<AttachKind, Self> {
        Ok(AttachKind::Run)
    }

    fn kill(&mut self, _pid: Option<gdbstub::common::Pid>) -> TargetResult<ShouldTerminate, Self> {
        self.control.kill();
        self.threads.clear();
        Ok(ShouldTerminate::Yes)
    }

    fn restart(&mut self) -> Result<(), Self::Error> {
        Err(InferiorError::Unsupported("restart is not supported; start retrace-stub again"))
    }

    fn support_current_active_pid(&mut self) -> Option<CurrentActivePidOps<'_, Self>> {
        Some(self)
    }
}

impl CurrentActivePid for ProcessTarget {
    fn current_active_pid(&mut self) -> Result<gdbstub::common::Pid, Self::Error> {
        gdbstub::common::Pid::new(self.pid.as_raw() as usize).ok_or(InferiorError::NoProcess)
    }
}
