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
use gdbstub::target::ext::breakpoints::{HwBreakpoint, HwWatchpoint, SwBreakpoint, WatchKind};
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
use crate::inferior::replay::{Breakpoints, History, Replayer};

mod block_runs;
mod full;
pub mod libraries;
pub mod recording;
pub use full::RecordMode;
pub use recording::TraceRecorder;
mod stops;

const INT3: u8 = 0xcc;

/// Why a reverse command is refused without a recording.
const NO_HISTORY: &str = "this program is not recorded, so it cannot run backwards: start it with retrace-stub --record (every register and byte) or --record=branch (the instructions only); a trace started with `process trace start` or `record btrace pt` is read with the client's own trace commands";

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
    /// Breakpoint address → original byte.
    breakpoints: HashMap<u64, u8>,
    actions: HashMap<Pid, Action>,
    /// Only threads with explicit actions run (e.g. a single step).
    pub scheduler_locked: bool,
    /// Threads currently running (resumed, not yet stopped).
    pub running: BTreeSet<Pid>,
    /// Threads resumed with a single step.
    pub stepping: BTreeSet<Pid>,
    /// Debug-register slots: hardware breakpoints and watchpoints.
    pub debug_slots: [Option<DebugSlot>; 4],
    /// Threads created since the last stop whose first stop is still due.
    new_threads: BTreeSet<Pid>,
    /// The client asked for a stop (Ctrl-C) that is not reported yet.
    interrupted: bool,
    /// Readable when a child changed state (SIGCHLD, blocked for the session).
    sigchld: Option<SignalFd>,
    /// A stop to report without waiting (an interrupt while nothing ran).
    stop_now: Option<StopReason>,
    /// What is recorded ([`recording`]).
    tracing: recording::Tracing,
    /// Traced threads in a recorded continue (stepped one instruction at a time).
    recording: BTreeSet<Pid>,
    /// Text to add to the next stop reply (`reason:…;description:…;`).
    stop_note: Option<StopNote>,
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
    /// Forward replay stops at the end of the history (GDB's convention)
    /// rather than running on live (LLDB's): see
    /// [`Inferior::client_is_lldb`].
    history_end_stops: bool,
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

/// Offset of `u_debugreg` in `struct user` (x86-64).
const DEBUGREG_OFFSET: usize = 848;

/// DR7 for the slots: local enable, R/W and LEN fields per slot.
fn dr7(slots: &[Option<DebugSlot>; 4]) -> u64 {
    let mut value = 0u64;
    for (i, slot) in slots.iter().enumerate() {
        let Some(slot) = slot else { continue };
        let rw = match slot.watch {
            None => 0b00,
            Some(WatchKind::Write) => 0b01,
            Some(WatchKind::Read | WatchKind::ReadWrite) => 0b11,
        };
        let len = match (slot.watch, slot.len) {
            (None, _) | (_, 1) => 0b00,
            (_, 2) => 0b01,
            (_, 8) => 0b10,
            _ => 0b11,
        };
        value |= 1 << (2 * i);
        value |= (rw | len << 2) << (16 + 4 * i);
    }
    value
}

/// Which debug slot triggered, from DR6 (clearing DR6).
pub fn triggered_slot(tid: Pid) -> Option<usize> {
    let dr6 = ptrace::read_user(tid, (DEBUGREG_OFFSET + 6 * 8) as ptrace::AddressType).ok()? as u64;
    let _ = ptrace::write_user(tid, (DEBUGREG_OFFSET + 6 * 8) as ptrace::AddressType, 0);
    (0..4).find(|i| dr6 >> i & 1 == 1)
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

fn getfpregs(tid: Pid) -> nix::Result<libc::user_fpregs_struct> {
    let mut fp = std::mem::MaybeUninit::<libc::user_fpregs_struct>::zeroed();
    // SAFETY: PTRACE_GETFPREGS fills the struct for a stopped tracee.
    let r = unsafe { libc::ptrace(libc::PTRACE_GETFPREGS, tid.as_raw(), 0, fp.as_mut_ptr()) };
    if r < 0 {
        return Err(nix::Error::last());
    }
    // SAFETY: initialised by the kernel (or zeroed).
    Ok(unsafe { fp.assume_init() })
}

fn setfpregs(tid: Pid, fp: &libc::user_fpregs_struct) -> nix::Result<()> {
    // SAFETY: PTRACE_SETFPREGS reads the struct.
    let r = unsafe { libc::ptrace(libc::PTRACE_SETFPREGS, tid.as_raw(), 0, fp as *const _) };
    if r < 0 {
        return Err(nix::Error::last());
    }
    Ok(())
}

/// Reads every register of a stopped thread.
pub fn read_all_registers(tid: Pid) -> nix::Result<Regs> {
    let r = ptrace::getregs(tid)?;
    let fp = getfpregs(tid)?;
    let mut regs = Regs {
        gpr: [r.rax, r.rbx, r.rcx, r.rdx, r.rsi, r.rdi, r.rbp, r.rsp, r.r8, r.r9, r.r10, r.r11, r.r12, r.r13, r.r14, r.r15],
        rip: r.rip,
        eflags: r.eflags as u32,
        segments: [r.cs as u32, r.ss as u32, r.ds as u32, r.es as u32, r.fs as u32, r.gs as u32],
        orig_rax: r.orig_rax,
        fs_base: r.fs_base,
        gs_base: r.gs_base,
        mxcsr: fp.mxcsr,
        ..Regs::default()
    };
    regs.fpu = [
        fp.cwd as u32,
        fp.swd as u32,
        fp.ftw as u32,
        (fp.rip >> 32) as u32,
        fp.rip as u32,
        (fp.rdp >> 32) as u32,
        fp.rdp as u32,
        fp.fop as u32,
    ];
    for i in 0..8 {
        let words = &fp.st_space[i * 4..i * 4 + 4];
        let mut bytes = [0u8; 16];
        for (j, w) in words.iter().enumerate() {
            bytes[j * 4..j * 4 + 4].copy_from_slice(&w.to_le_bytes());
        }
        regs.st[i].copy_from_slice(&bytes[..10]);
    }
    for i in 0..16 {
        let mut bytes = [0u8; 16];
        for (j, w) in fp.xmm_space[i * 4..i * 4 + 4].iter().enumerate() {
            bytes[j * 4..j * 4 + 4].copy_from_slice(&w.to_le_bytes());
        }
        regs.xmm[i] = u128::from_le_bytes(bytes);
    }
    Ok(regs)
}

/// Writes every register of a stopped thread.
pub fn write_all_registers(tid: Pid, regs: &Regs) -> nix::Result<()> {
    let mut r = ptrace::getregs(tid)?;
    let g = &regs.gpr;
    (r.rax, r.rbx, r.rcx, r.rdx, r.rsi, r.rdi, r.rbp, r.rsp) = (g[0], g[1], g[2], g[3], g[4], g[5], g[6], g[7]);
    (r.r8, r.r9, r.r10, r.r11, r.r12, r.r13, r.r14, r.r15) = (g[8], g[9], g[10], g[11], g[12], g[13], g[14], g[15]);
    r.rip = regs.rip;
    r.eflags = regs.eflags as u64;
    r.orig_rax = regs.orig_rax;
    r.fs_base = regs.fs_base;
    r.gs_base = regs.gs_base;
    ptrace::setregs(tid, r)?;
    let mut fp = getfpregs(tid)?;
    fp.cwd = regs.fpu[0] as u16;
    fp.swd = regs.fpu[1] as u16;
    fp.ftw = regs.fpu[2] as u16;
    fp.fop = regs.fpu[7] as u16;
    fp.mxcsr = regs.mxcsr;
    for i in 0..8 {
        let mut bytes = [0u8; 16];
        bytes[..10].copy_from_slice(&regs.st[i]);
        for j in 0..4 {
            fp.st_space[i * 4 + j] = u32::from_le_bytes(bytes[j * 4..j * 4 + 4].try_into().unwrap());
        }
    }
    for i in 0..16 {
        let bytes = regs.xmm[i].to_le_bytes();
        for j in 0..4 {
            fp.xmm_space[i * 4 + j] = u32::from_le_bytes(bytes[j * 4..j * 4 + 4].try_into().unwrap());
        }
    }
    setfpregs(tid, &fp)
}

/// Writes `bytes` into `pid`'s memory through `/proc/PID/mem` (which, for a
/// tracer, writes read-only code pages too).
fn poke_into(pid: Pid, address: u64, bytes: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    let mem = std::fs::OpenOptions::new().write(true).open(format!("/proc/{pid}/mem"))?;
    mem.write_all_at(bytes, address)
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
            breakpoints: HashMap::new(),
            actions: HashMap::new(),
            scheduler_locked: false,
            running: BTreeSet::new(),
            stepping: BTreeSet::new(),
            debug_slots: [None; 4],
            new_threads: BTreeSet::new(),
            interrupted: false,
            sigchld: None,
            stop_now: None,
            tracing: recording::Tracing::default(),
            recording: BTreeSet::new(),
            pending_stop: None,
            deferred_signals: BTreeMap::new(),
            exec_stop: None,
            exec_events: ExecEvents::Signal,
            stop_note: None,
            full: None,
            blocks: block_runs::BlockRuns::default(),
            history_end_stops: true,
        }
    }

    /// Traces are made by `recorder` (`--trace-with`; `auto` by default).
    pub fn trace_with(mut self, recorder: TraceRecorder) -> Self {
        self.tracing.recorder = recorder;
        self
    }

    /// Loads the debug registers of every thread from the slots.
    fn apply_debug_registers(&self) -> Result<(), InferiorError> {
        for tid in &self.threads {
            let write = |index: usize, value: u64| {
                ptrace::write_user(*tid, (DEBUGREG_OFFSET + index * 8) as ptrace::AddressType, value as i64)
            };
            // Disable first: an address may only change while its slot is off.
            write(7, 0).map_err(|errno| InferiorError::Process { what: format!("DR7 of thread {tid}"), errno })?;
            for (i, slot) in self.debug_slots.iter().enumerate() {
                if let Some(slot) = slot {
                    write(i, slot.address).map_err(|errno| InferiorError::Process { what: format!("DR{i} of thread {tid}"), errno })?;
                }
            }
            write(7, dr7(&self.debug_slots)).map_err(|errno| InferiorError::Process { what: format!("DR7 of thread {tid}"), errno })?;
        }
        Ok(())
    }

    fn add_slot(&mut self, slot: DebugSlot) -> TargetResult<bool, Self> {
        if self.debug_slots.contains(&Some(slot)) {
            return Ok(true);
        }
        let Some(free) = self.debug_slots.iter().position(Option::is_none) else { return Ok(false) };
        self.debug_slots[free] = Some(slot);
        if self.apply_debug_registers().is_err() {
            self.debug_slots[free] = None;
            let _ = self.apply_debug_registers();
            return Ok(false);
        }
        Ok(true)
    }

    fn remove_slot(&mut self, slot: DebugSlot) -> TargetResult<bool, Self> {
        if let Some(i) = self.debug_slots.iter().position(|s| *s == Some(slot)) {
            self.debug_slots[i] = None;
            self.apply_debug_registers().map_err(|_| TargetError::NonFatal)?;
        }
        Ok(true)
    }

    /// Debug registers of a thread that appeared after they were set.
    pub fn init_thread_debug_registers(&self) {
        if self.debug_slots.iter().any(Option::is_some) {
            let _ = self.apply_debug_registers();
        }
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
            for (&address, &original) in &self.breakpoints {
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
        let n = process::read_memory(self.pid, address, buf);
        self.blocks.hide(address, &mut buf[..n]);
        for (i, byte) in buf[..n].iter_mut().enumerate() {
            if let Some(original) = self.breakpoints.get(&(address + i as u64)) {
                *byte = *original;
            }
        }
        n
    }

    /// Puts every original byte back (before detaching).
    pub fn remove_all_breakpoints(&mut self) {
        for (address, original) in std::mem::take(&mut self.breakpoints) {
            let _ = self.poke(address, &[original]);
        }
    }

    /// True when `address` holds one of our breakpoints.
    pub fn has_breakpoint(&self, address: u64) -> bool {
        self.breakpoints.contains_key(&address)
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
        self.history_end_stops = false;
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
        if let Some(stop) = self.stop_now.take() {
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
                self.stop_now = Some(StopReason::SignalWithThread { tid: tid_of(tid), signal: gdbstub::common::Signal::SIGINT });
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
        self.debug_slots = [None; 4];
        if let Err(error) = self.apply_debug_registers() {
            tracing::warn!(%error, "clearing the debug registers before detaching");
        }
        for tid in &self.threads {
            let _ = ptrace::detach(*tid, None);
        }
    }

    fn trace_start(&mut self, request: &crate::inferior::TraceStart) -> Result<(), InferiorError> {
        self.start_tracing(request)
    }

    fn trace_stop(&mut self, threads: Option<&[u64]>) -> Result<(), InferiorError> {
        self.stop_tracing(threads)
    }

    fn trace_state(&self) -> Result<crate::inferior::TraceState, InferiorError> {
        Ok(self.tracing_state())
    }

    fn trace_data(&mut self, tid: u64) -> Result<Vec<u8>, InferiorError> {
        self.thread_trace(tid)
    }

    fn take_stop_note(&mut self) -> Option<StopNote> {
        self.stop_note.take()
    }

    fn take_stood_still(&mut self) -> bool {
        ProcessTarget::take_stood_still(self)
    }

    fn trace_status(&self) -> Result<crate::inferior::TraceStatus, InferiorError> {
        Ok(self.tracing_status())
    }

    fn trace_recorder(&mut self, name: &str) -> Result<(), InferiorError> {
        self.set_trace_recorder(name.parse().map_err(InferiorError::InvalidRequest)?)
    }

    fn trace_cpu(&self) -> retrace_decoder::bundle::CpuInfo {
        self.tracing_cpu()
    }

    fn register_available(&mut self, tid: u64, n: usize) -> bool {
        let tid = Pid::from_raw(tid as i32);
        self.registers(tid).is_none_or(|regs| regs.is_available(n))
    }

    fn support_history(&mut self) -> Option<&mut dyn crate::inferior::HistoryOps> {
        match self.full_recording() {
            true => Some(self),
            false => None,
        }
    }

    fn records_history_when_asked(&self) -> bool {
        true
    }

    fn history_move_refused(&self, movement: Movement) -> Option<&'static str> {
        if !self.full_recording() {
            return (movement != Movement::ForwardContinue).then_some(NO_HISTORY);
        }
        let watching = self.debug_slots.iter().flatten().any(|slot| slot.watch.is_some());
        let moves = match movement {
            Movement::ReverseContinue => true,
            Movement::ForwardContinue => self.past().is_some(),
            // (One instruction: GDB steps off a breakpoint so, and would
            // take a refusal for a reason to retry.)
            Movement::ReverseStep => false,
        };
        (watching && moves).then(|| self.past_watchpoints_refused()).flatten()
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
            if let Some(original) = self.breakpoints.get_mut(&(start + i as u64)) {
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
        if let Some(stop) = crate::inferior::replay::take_armed(self, step.is_some()) {
            self.stop_now = Some(stop);
            return Ok(());
        }
        if let Some(stop) = step.is_none().then(|| self.refuse_history_move(Movement::ForwardContinue)).flatten() {
            self.stop_now = Some(stop);
            return Ok(());
        }
        if self.past().is_some() {
            match self.replay_forwards(step) {
                Some(stop) => {
                    self.stop_now = Some(stop);
                    return Ok(());
                }
                // At the present: the live process runs on, recorded.
                None => {}
            }
        }
        if let Some(stop) = self.take_deferred_signal() {
            self.stop_now = Some(stop);
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
    // hears why it cannot go back (`NO_HISTORY`), where GDB would only
    // say "Target remote does not support this command".
    fn support_reverse_cont(&mut self) -> Option<ReverseContOps<'_, Tid, Self>> {
        Some(self)
    }

    fn support_reverse_step(&mut self) -> Option<ReverseStepOps<'_, Tid, Self>> {
        Some(self)
    }
}

impl crate::inferior::replay::TimeTravel for ProcessTarget {
    fn replay_history<R>(&mut self, action: impl FnOnce(&mut Replayer, &dyn History, &Breakpoints) -> R) -> Option<R> {
        self.full_recording().then(|| self.replay(action))
    }

    fn before_move(&mut self) {
        self.settle_diversion(false);
    }

    fn move_refused(&mut self, movement: Movement) -> Option<StopReason> {
        self.refuse_history_move(movement)
    }

    fn note_stop(&mut self, note: StopNote) {
        self.stop_note = Some(note);
    }

    fn report_stop(&mut self, stop: StopReason) {
        self.stop_now = Some(stop);
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

impl HwBreakpoint for ProcessTarget {
    fn add_hw_breakpoint(&mut self, addr: u64, _kind: usize) -> TargetResult<bool, Self> {
        self.add_slot(DebugSlot { address: addr, len: 1, watch: None })
    }

    fn remove_hw_breakpoint(&mut self, addr: u64, _kind: usize) -> TargetResult<bool, Self> {
        self.remove_slot(DebugSlot { address: addr, len: 1, watch: None })
    }
}

impl HwWatchpoint for ProcessTarget {
    fn add_hw_watchpoint(&mut self, addr: u64, len: u64, kind: WatchKind) -> TargetResult<bool, Self> {
        // x86 watches 1, 2, 4 or 8 aligned bytes per slot.
        if !matches!(len, 1 | 2 | 4 | 8) || addr % len != 0 {
            return Ok(false);
        }
        self.add_slot(DebugSlot { address: addr, len, watch: Some(kind) })
    }

    fn remove_hw_watchpoint(&mut self, addr: u64, len: u64, kind: WatchKind) -> TargetResult<bool, Self> {
        self.remove_slot(DebugSlot { address: addr, len, watch: Some(kind) })
    }
}

impl SwBreakpoint for ProcessTarget {
    fn add_sw_breakpoint(&mut self, addr: u64, _kind: usize) -> TargetResult<bool, Self> {
        if self.breakpoints.contains_key(&addr) {
            return Ok(true);
        }
        let mut original = [0u8; 1];
        if process::read_memory(self.pid, addr, &mut original) != 1 {
            return Ok(false);
        }
        self.poke(addr, &[INT3]).map_err(TargetError::Io)?;
        self.breakpoints.insert(addr, original[0]);
        Ok(true)
    }

    fn remove_sw_breakpoint(&mut self, addr: u64, _kind: usize) -> TargetResult<bool, Self> {
        match self.breakpoints.remove(&addr) {
            Some(original) => {
                self.poke(addr, &[original]).map_err(TargetError::Io)?;
                Ok(true)
            }
            None => Ok(true),
        }
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
        match libraries::library_list(&auxv, &libraries::ProcessMemory(self.pid)) {
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
