//! Recording while the debugger drives the program: a traced thread that
//! the client continues runs one instruction at a time, each written into
//! the thread's [`TraceRing`] as Intel PT, until something stops it that
//! would have stopped it untraced — a breakpoint (whose `int3` is never
//! executed: the stop is taken before it, with the PC where the client
//! expects it), a hardware breakpoint or watchpoint, a signal, an exit, the
//! client's interrupt. A traced thread the client single-steps is recorded
//! too. Untraced threads run freely beside traced ones.
//!
//! At every stop reported to the client each traced thread's trace ends
//! with FUP + TIP.PGD at the thread's PC (LLDB shows it as "software
//! disabled tracing", as for a kernel trace of a debugged thread), and its
//! ring's contents are fixed until the program runs again, so every read
//! within one stop gets the same bytes.

use std::collections::BTreeMap;

use nix::sys::ptrace;
use nix::sys::signal::Signal;
use nix::unistd::Pid;
use retrace_collector::control::Resume;
use retrace_collector::hardware::PerfIntelPt;
use retrace_collector::intel_pt::{IntelPtError, PtEventConfig, ThreadPtEvent};
use retrace_collector::perf_clock::TraceClock;
use retrace_collector::process;
use retrace_collector::trace_ring::{TraceRing, MIN_RING_SIZE};
use retrace_decoder::x86::{FlowKind, InsnInfo};

use super::{rip, tid_of, ProcessTarget, ProgramMemory, INT3};
use crate::inferior::InferiorError;
use crate::inferior::{StopNote, StopReason, ThreadTraceStatus, TraceStart, TraceState, TraceStatus};

/// The largest trace kept per thread (`iptTraceSize`), 1 GiB: more is
/// refused rather than risk the stub's memory.
pub const MAX_RING_SIZE: u64 = 1 << 30;

/// The largest PSB period exponent accepted (2^(7+11) = 256 KiB).
pub const MAX_PSB_PERIOD: u64 = 7;

/// Which recorder makes the traces (`retrace-stub --trace-with`, `monitor
/// trace recorder`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TraceRecorder {
    /// The CPU's Intel PT where the `intel_pt` PMU exists and an event
    /// opens for the threads; else software branch stops.
    Auto,
    /// Software: a thread runs freely to each branch and stops there
    /// (block by block); a process with more threads than one is stepped.
    Branch,
    /// Software: one single step per instruction (slower, and what every
    /// other recorder is checked against).
    Step,
    /// The CPU's Intel PT through `perf_event_open`, one AUX ring per
    /// thread; refused where the PMU is absent.
    IntelPt,
}

impl TraceRecorder {
    /// The names the command line and `monitor trace recorder` take.
    pub const NAMES: &'static str = "auto, branch, step or intel-pt";

    /// Its name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            TraceRecorder::Auto => "auto",
            TraceRecorder::Branch => "branch",
            TraceRecorder::Step => "step",
            TraceRecorder::IntelPt => "intel-pt",
        }
    }
}

impl std::str::FromStr for TraceRecorder {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        match text {
            "auto" => Ok(TraceRecorder::Auto),
            "branch" => Ok(TraceRecorder::Branch),
            "step" => Ok(TraceRecorder::Step),
            "intel-pt" => Ok(TraceRecorder::IntelPt),
            _ => Err(format!("`{text}` is not a trace recorder: {}", TraceRecorder::NAMES)),
        }
    }
}

/// The recorder the traces being made use: chosen when tracing starts,
/// kept while anything is traced.
enum RecorderInUse {
    /// Software Intel PT; `steps_only`: every instruction single-stepped;
    /// `why`: why not the hardware, when `auto` asked for it.
    Software { steps_only: bool, why: Option<String> },
    /// The CPU's Intel PT.
    IntelPt(PerfIntelPt),
}

impl std::fmt::Debug for RecorderInUse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.describe())
    }
}

impl RecorderInUse {
    fn describe(&self) -> String {
        match self {
            RecorderInUse::Software { steps_only: true, .. } => "software Intel PT, one single step per instruction (step)".into(),
            RecorderInUse::Software { steps_only: false, why } => {
                let mut text = String::from("software Intel PT, stops at branches (branch)");
                if let Some(why) = why {
                    text.push_str(&format!("; not the CPU's Intel PT: {why}"));
                }
                text
            }
            RecorderInUse::IntelPt(_) => "the CPU's Intel PT (intel-pt)".into(),
        }
    }
}

/// Why the CPU's Intel PT cannot record here, for the user.
fn intel_pt_absent(error: &IntelPtError) -> String {
    match error {
        IntelPtError::Absent { path } => format!("no Intel PT on this machine ({} does not exist: an AMD CPU, or a VM without Intel PT)", path.display()),
        other => format!("the CPU's Intel PT cannot be used: {other}"),
    }
}

/// The refusal of `--trace-with intel-pt` where the hardware is absent.
fn intel_pt_refusal(error: &IntelPtError) -> String {
    format!("{}; start retrace-stub with --trace-with branch to record in software", intel_pt_absent(error))
}

/// How each thread's trace is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct RingSettings {
    size: usize,
    psb_period: usize,
    /// The PSB period as the client gave it (an exponent), for the hardware.
    psb_exponent: Option<u64>,
    tsc: bool,
}

impl RingSettings {
    fn ring(&self) -> TraceRing {
        let ring = TraceRing::new(self.size, self.psb_period);
        if self.tsc {
            ring
        } else {
            ring.without_timestamps()
        }
    }
}

/// Where a traced thread's trace is written.
enum ThreadTrace {
    /// By the stub, as the thread is stepped or stopped at branches.
    Ring(TraceRing),
    /// By the CPU, into the event's AUX ring of this many bytes.
    IntelPt(ThreadPtEvent, usize),
}

impl std::fmt::Debug for ThreadTrace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ThreadTrace::Ring(ring) => f.debug_tuple("Ring").field(ring).finish(),
            ThreadTrace::IntelPt(_, size) => f.debug_tuple("IntelPt").field(size).finish(),
        }
    }
}

/// One traced thread.
#[derive(Debug)]
pub(super) struct TracedThread {
    trace: ThreadTrace,
    settings: RingSettings,
    /// The instruction the thread executes next, while it is followed.
    next_ip: Option<u64>,
    /// The trace's contents as read at this stop.
    contents: Option<Vec<u8>>,
}

impl TracedThread {
    fn size(&self) -> usize {
        match &self.trace {
            ThreadTrace::Ring(ring) => ring.size(),
            ThreadTrace::IntelPt(_, size) => *size,
        }
    }

    /// Instructions recorded since the trace started (`None`: the CPU
    /// counts none).
    fn instructions(&self) -> Option<u64> {
        match &self.trace {
            ThreadTrace::Ring(ring) => Some(ring.instructions()),
            ThreadTrace::IntelPt(..) => None,
        }
    }

    /// The ring the stub writes, for a thread recorded in software.
    fn ring(&mut self) -> Option<&mut TraceRing> {
        match &mut self.trace {
            ThreadTrace::Ring(ring) => Some(ring),
            ThreadTrace::IntelPt(..) => None,
        }
    }

    /// The trace now, oldest byte first, exactly [`Self::size`] bytes
    /// (zeros, which decoders skip as padding, before data that does not
    /// fill it), as lldb-server hands out a thread's AUX ring.
    fn read(&self) -> Vec<u8> {
        match &self.trace {
            ThreadTrace::Ring(ring) => ring.contents(),
            ThreadTrace::IntelPt(event, size) => {
                let data = event.snapshot();
                let mut out = vec![0u8; size.saturating_sub(data.len())];
                out.extend_from_slice(&data[data.len().saturating_sub(*size)..]);
                out
            }
        }
    }
}

/// What is recorded in the process.
#[derive(Debug)]
pub(super) struct Tracing {
    /// Process tracing is on: new threads are traced with these settings
    /// while the rings stay within `limit` bytes in all.
    process: Option<(RingSettings, Option<u64>)>,
    threads: BTreeMap<Pid, TracedThread>,
    /// The recorder asked for.
    pub(super) recorder: TraceRecorder,
    /// Where the `intel_pt` PMU is described (sysfs; tests give a fake).
    intel_pt_sysfs: std::path::PathBuf,
    /// The recorder of the traces being made, while anything is traced.
    in_use: Option<RecorderInUse>,
    /// Since tracing started: single steps and block runs of recorded
    /// threads (how the software recorder ran them).
    pub(super) single_steps: u64,
    pub(super) block_runs: u64,
    clock: TraceClock,
    code: CodeCache,
    /// Steps taken in a row without looking at other threads or the client.
    pub(super) steps_in_a_row: u32,
    /// The stub's CPU affinity while it sits beside a recorded thread.
    own_affinity: Option<nix::sched::CpuSet>,
    /// The one CPU the stub and the recorded threads share while recorded.
    beside: Option<nix::sched::CpuSet>,
    /// Recorded threads pinned beside the stub, and their own affinity.
    pinned: Vec<(Pid, nix::sched::CpuSet)>,
}

impl Default for Tracing {
    fn default() -> Self {
        Tracing {
            process: None,
            threads: BTreeMap::new(),
            recorder: TraceRecorder::Auto,
            intel_pt_sysfs: retrace_collector::intel_pt::sysfs_dir(),
            in_use: None,
            single_steps: 0,
            block_runs: 0,
            clock: TraceClock::choose(),
            code: CodeCache::default(),
            steps_in_a_row: 0,
            own_affinity: None,
            beside: None,
            pinned: Vec::new(),
        }
    }
}

/// Instructions decoded while the program runs, from code that cannot
/// change under us: mappings not writable, as they were when the program
/// last resumed or mapped memory. Emptied at every resume (the client may
/// have written to code) and after every system call that changes
/// mappings.
#[derive(Debug, Default)]
struct CodeCache {
    /// The process's mappings, read on first use after a change.
    maps: Option<Vec<process::Mapping>>,
    /// The instructions decoded there.
    decoded: retrace_collector::code_cache::CodeCache,
}

impl CodeCache {
    fn clear(&mut self) {
        self.maps = None;
        self.decoded.clear();
    }
}

/// How many steps a recorded thread takes waiting for that thread alone
/// before the other threads and the client are looked at.
pub(super) const STEPS_IN_A_ROW: u32 = 256;

/// Linux system calls that change mappings: mmap, mprotect, munmap, mremap.
const MAPPING_SYSCALLS: [u64; 4] = [9, 10, 11, 25];

impl Tracing {
    /// The instruction at `ip` as the program has it, and its first byte
    /// (kept while its code cannot change).
    fn decode_at(&mut self, program: &ProgramMemory, ip: u64) -> Option<(InsnInfo, u8)> {
        let maps = &mut self.code.maps;
        self.code.decoded.decode(ip, |bytes| program.read(ip, bytes), || maps.get_or_insert_with(|| process::read_maps(program.pid).unwrap_or_default()))
    }

    /// A traced thread's single step ended (a `SIGTRAP` stop) with its PC
    /// at `now`: the instruction it was about to execute goes into its
    /// trace. Returns that instruction. (A signal-delivery stop comes before
    /// the instruction runs: nothing is recorded for it.)
    fn after_step(&mut self, program: &ProgramMemory, tid: Pid, now: u64) -> Option<InsnInfo> {
        let pending = self.threads.get(&tid)?.next_ip;
        let Some(ip) = pending else {
            self.threads.get_mut(&tid)?.next_ip = Some(now);
            return None;
        };
        let insn = self.decode_at(program, ip).map(|(insn, _)| insn);
        if insn.is_some_and(|insn| insn.kind == FlowKind::Syscall) {
            // The mappings may have changed: decode afresh.
            if let Some(number) = ptrace::getregs(tid).ok().map(|regs| regs.orig_rax) {
                if MAPPING_SYSCALLS.contains(&number) {
                    self.code.clear();
                }
            }
        }
        if now == ip && insn.is_some_and(|insn| insn.kind == FlowKind::Other) {
            // Nothing ran (a REP string instruction stops after each
            // iteration without finishing, and counts once, as in hardware).
            return None;
        }
        let time = self.clock.now();
        let thread = self.threads.get_mut(&tid)?;
        thread.next_ip = Some(now);
        let ring = thread.ring()?;
        match insn {
            Some(insn) => ring.executed(ip, &insn, Some(now), time),
            None => {
                tracing::warn!(tid = tid.as_raw(), ip = format_args!("{ip:#x}"), "cannot decode an executed instruction: a gap in the trace");
                ring.stopped(ip);
            }
        }
        insn
    }

    /// Whether `tid` is traced.
    pub(super) fn traces(&self, tid: Pid) -> bool {
        self.threads.contains_key(&tid)
    }

    /// Whether `tid` is traced by the stub (stepped or stopped at
    /// branches), not by the CPU.
    pub(super) fn records_in_software(&self, tid: Pid) -> bool {
        self.threads.get(&tid).is_some_and(|thread| matches!(thread.trace, ThreadTrace::Ring(_)))
    }

    /// Whether the software recorder was asked to single-step every
    /// instruction (`step`), not to run blocks.
    pub(super) fn steps_only(&self) -> bool {
        matches!(self.in_use, Some(RecorderInUse::Software { steps_only: true, .. }))
    }

    fn total_bytes(&self) -> u64 {
        self.threads.values().map(|t| t.size() as u64).sum()
    }

    /// The recorder for traces about to start, chosen as asked: the
    /// hardware where `auto` finds it, else software.
    fn choose(&self) -> Result<RecorderInUse, InferiorError> {
        let hardware = || PerfIntelPt::new(&self.intel_pt_sysfs, PtEventConfig::default());
        Ok(match self.recorder {
            TraceRecorder::Branch => RecorderInUse::Software { steps_only: false, why: None },
            TraceRecorder::Step => RecorderInUse::Software { steps_only: true, why: None },
            TraceRecorder::IntelPt => RecorderInUse::IntelPt(hardware().map_err(|e| InferiorError::Refused(intel_pt_refusal(&e)))?),
            TraceRecorder::Auto => match hardware() {
                Ok(pt) => RecorderInUse::IntelPt(pt),
                Err(error) => RecorderInUse::Software { steps_only: false, why: Some(intel_pt_absent(&error)) },
            },
        })
    }

    /// A new trace for thread `tid`, by the recorder in use.
    fn open(&mut self, tid: Pid, settings: RingSettings) -> Result<TracedThread, InferiorError> {
        let trace = match &mut self.in_use {
            Some(RecorderInUse::IntelPt(pt)) => {
                let config = PtEventConfig { tsc: settings.tsc, psb_period: settings.psb_exponent, buffer_size: settings.size };
                let (event, size) = pt.open_configured(tid, config).map_err(|e| InferiorError::Refused(format!("Intel PT for thread {tid}: {e}")))?;
                ThreadTrace::IntelPt(event, size)
            }
            _ => ThreadTrace::Ring(settings.ring()),
        };
        Ok(TracedThread { trace, settings, next_ip: None, contents: None })
    }

    /// Thread `tid` is traced no more; its ring's room is given back.
    fn close(&mut self, tid: Pid) {
        if let Some(thread) = self.threads.remove(&tid) {
            self.release(thread);
        }
    }

    /// A trace is dropped: the hardware's ring goes back to the budget.
    fn release(&mut self, thread: TracedThread) {
        if let (ThreadTrace::IntelPt(event, size), Some(RecorderInUse::IntelPt(pt))) = (thread.trace, &mut self.in_use) {
            pt.close((event, size));
        }
    }

    /// Every trace is closed.
    fn close_all(&mut self) {
        let tids: Vec<Pid> = self.threads.keys().copied().collect();
        for tid in tids {
            self.close(tid);
        }
    }

    /// With nothing traced, the next start chooses the recorder afresh.
    fn settle(&mut self) {
        if self.threads.is_empty() && self.process.is_none() {
            self.in_use = None;
        }
    }

    /// Opens traces for `tids`, all or none. Under `auto`, a hardware
    /// event that does not open (the budget, the kernel's refusal) makes
    /// every thread recorded in software instead.
    fn open_all(&mut self, tids: &[Pid], settings: RingSettings) -> Result<(), InferiorError> {
        let chose_now = self.in_use.is_none();
        if chose_now {
            self.in_use = Some(self.choose()?);
            self.single_steps = 0;
            self.block_runs = 0;
        }
        let mut opened = Vec::new();
        for &tid in tids {
            match self.open(tid, settings) {
                Ok(thread) => opened.push((tid, thread)),
                Err(error) => {
                    for (_, thread) in opened {
                        self.release(thread);
                    }
                    if chose_now && self.recorder == TraceRecorder::Auto && matches!(self.in_use, Some(RecorderInUse::IntelPt(_))) {
                        tracing::warn!(%error, "the CPU's Intel PT does not open: recording in software");
                        self.in_use = Some(RecorderInUse::Software { steps_only: false, why: Some(error.to_string()) });
                        return self.open_all(tids, settings);
                    }
                    self.settle();
                    return Err(error);
                }
            }
        }
        self.threads.extend(opened);
        Ok(())
    }
}

/// The settings a request asks for, or LLDB's error text.
fn ring_settings(request: &TraceStart) -> Result<RingSettings, InferiorError> {
    let size = request.ring_size;
    if !size.is_power_of_two() || size < MIN_RING_SIZE as u64 {
        return Err(InferiorError::InvalidRequest(format!("The intel pt trace size must be a power of 2 greater than or equal to 4096 (2^12) bytes. It was {size}.")));
    }
    if size > MAX_RING_SIZE {
        return Err(InferiorError::InvalidRequest(format!("The trace size {size} is over retrace-stub's limit of {MAX_RING_SIZE} bytes (1 GiB) per thread.")));
    }
    let psb_period = match request.psb_period {
        None => retrace_collector::pt_writer::DEFAULT_PSB_PERIOD,
        Some(exponent) if exponent <= MAX_PSB_PERIOD => 1 << (exponent + 11),
        Some(_) => {
            let valid: Vec<String> = (0..=MAX_PSB_PERIOD).map(|n| n.to_string()).collect();
            return Err(InferiorError::InvalidRequest(format!("Invalid psb_period. Valid values are: {}.", valid.join(", "))));
        }
    };
    Ok(RingSettings { size: size as usize, psb_period, psb_exponent: request.psb_period, tsc: request.tsc })
}

impl ProcessTarget {
    /// The instruction at `ip` as the program has it (our breakpoints
    /// hidden), and its first byte.
    fn decode_at(&mut self, ip: u64) -> Option<(InsnInfo, u8)> {
        let program = program_memory_of!(self);
        self.tracing.decode_at(&program, ip)
    }

    /// Whether `ip` lies in a mapping no one can write (code that cannot
    /// change while the program runs).
    pub(super) fn fixed_code(&mut self, ip: u64) -> bool {
        let maps = self.tracing.code.maps.get_or_insert_with(|| process::read_maps(self.pid).unwrap_or_default());
        retrace_collector::code_cache::is_fixed_code(maps, ip, 1)
    }

    /// The code and mappings known may change (a system call on the
    /// address space is about to run): read them afresh.
    pub(super) fn forget_code(&mut self) {
        self.tracing.code.clear();
    }

    /// A traced thread ran `insn` at `ip` and goes on at `next`, seen
    /// without a step of its own (a block run): into its trace.
    pub(super) fn ring_executed(&mut self, tid: Pid, ip: u64, insn: &InsnInfo, next: u64) {
        let time = self.tracing.clock.now();
        if let Some(ring) = self.tracing.threads.get_mut(&tid).and_then(TracedThread::ring) {
            ring.executed(ip, insn, Some(next), time);
        }
    }

    /// A traced thread's next instruction is at `ip`.
    pub(super) fn ring_pending(&mut self, tid: Pid, ip: u64) {
        if let Some(thread) = self.tracing.threads.get_mut(&tid) {
            thread.next_ip = Some(ip);
        }
    }

    /// Whether the instruction at `ip` is one whose single step ends at
    /// once (no system call, which may block): then the stepping thread
    /// alone is waited for.
    pub(super) fn steps_promptly(&mut self, ip: u64) -> bool {
        self.decode_at(ip).is_some_and(|(insn, _)| insn.kind != FlowKind::Syscall)
    }

    /// A recorded thread's single step ended (a `SIGTRAP` stop) with its
    /// PC at `now`: every step observer hears of it — the full recording
    /// ([`ProcessTarget::step_done`]), then the thread's trace ring, which
    /// returns the instruction that ran.
    pub(super) fn record_progress(&mut self, tid: Pid, now: u64) -> Option<InsnInfo> {
        self.step_done(tid);
        let program = program_memory_of!(self);
        self.tracing.after_step(&program, tid, now)
    }

    /// A traced thread is about to be resumed with `signal`: it is followed
    /// from its PC, or from the first instruction of the signal's handler.
    pub(super) fn before_traced_resume(&mut self, tid: Pid, signal: Option<Signal>) {
        let handled = signal.is_some_and(|signal| process::has_handler(self.pid, tid, signal));
        let now = if handled { None } else { rip(tid) };
        if let Some(thread) = self.tracing.threads.get_mut(&tid) {
            thread.next_ip = now;
        }
    }

    /// Continues a traced thread recorded: one instruction at a time.
    pub(super) fn start_recorded(&mut self, tid: Pid, signal: Option<Signal>) -> Result<(), InferiorError> {
        self.before_traced_resume(tid, signal);
        self.sit_beside(tid);
        if signal.is_none() {
            if let Some(ip) = rip(tid).filter(|ip| self.breakpoints.contains_key(ip)) {
                // Continuing onto a breakpoint stops at once, as the int3 would.
                tracing::debug!(tid = tid.as_raw(), ip = format_args!("{ip:#x}"), "recorded continue starts on a breakpoint");
                self.pending_stop = Some(StopReason::SwBreak(tid_of(tid)));
                return Ok(());
            }
        }
        self.prepare_step(tid, signal);
        self.tracing.single_steps += 1;
        match self.control.resume(tid, Resume::Step, signal) {
            Ok(()) => {
                self.recording.insert(tid);
                self.running.insert(tid);
                Ok(())
            }
            Err(nix::Error::ESRCH) => Ok(()),
            Err(errno) => Err(InferiorError::Process { what: format!("resuming thread {tid}"), errno }),
        }
    }

    /// A thread in a recorded continue finished an instruction and stands
    /// at `now`: the stop due there, or `None` once it runs on.
    pub(super) fn step_on(&mut self, tid: Pid, now: u64) -> Option<StopReason> {
        self.stop_before(tid, now).or_else(|| self.run_on(tid, now, false))
    }

    /// The stop due after a recorded continue's step, in the order the
    /// hardware reports them: a watchpoint hit by the instruction, the
    /// program's own `int3`, then what stands at the next instruction.
    pub(super) fn after_recorded_step(&mut self, tid: Pid, now: u64, slot: Option<super::DebugSlot>) -> Option<StopReason> {
        if self.in_block(tid) {
            return self.block_stopped(tid, slot);
        }
        let pending = self.tracing.threads.get(&tid).and_then(|t| t.next_ip);
        if let Some(slot) = slot {
            if slot.watch.is_none() && pending == Some(now) {
                // An execution breakpoint faulted before the instruction ran.
                return Some(StopReason::HwBreak(tid_of(tid)));
            }
        }
        let was_int3 = pending.is_some_and(|ip| self.decode_at(ip).is_some_and(|(_, first)| first == INT3) && !self.breakpoints.contains_key(&ip));
        let executed = self.record_progress(tid, now);
        if let Some(super::DebugSlot { watch: Some(kind), address, .. }) = slot {
            return Some(StopReason::Watch { tid: tid_of(tid), kind, addr: address });
        }
        if was_int3 && executed.is_some() {
            return Some(StopReason::SignalWithThread { tid: tid_of(tid), signal: gdbstub::common::Signal::SIGTRAP });
        }
        self.step_on(tid, now)
    }

    /// Resumes a thread after a ptrace event stop (clone, exec of another
    /// process…) the way it was running: stepped when recorded or
    /// single-stepped by the client, else freely.
    pub(super) fn resume_after_event(&mut self, tid: Pid) {
        let how = if self.recording.contains(&tid) || self.stepping.contains(&tid) { Resume::Step } else { Resume::Free };
        let result = self.control.resume(tid, how, None);
        if let Err(error) = result {
            tracing::debug!(tid = tid.as_raw(), %error, "resume after an event");
        }
    }

    /// A new thread of the process: traced if the process is. Returns
    /// whether it is.
    pub(super) fn trace_new_thread(&mut self, tid: Pid) -> bool {
        let Some((settings, limit)) = self.tracing.process else { return false };
        let opened = if limit.is_some_and(|limit| self.tracing.total_bytes() + settings.size as u64 > limit) {
            Err(InferiorError::Refused(format!("Thread {tid} can't be traced as the process trace size limit has been reached. Consider retracing with a higher limit.")))
        } else {
            self.tracing.open(tid, settings)
        };
        match opened {
            Ok(thread) => {
                self.tracing.threads.insert(tid, thread);
                true
            }
            Err(message) => {
                tracing::warn!(tid = tid.as_raw(), %message, "a new thread is not traced");
                // The stop says so (lldb-server's `reason:processor trace`).
                self.stop_note = Some(StopNote::Trace(message.to_string()));
                false
            }
        }
    }

    /// The process exec'd: the old program's traces are gone with it; the
    /// thread left is traced afresh if it or the process was.
    pub(super) fn trace_exec(&mut self, tid: Pid, former: Pid) {
        self.blocks_stopped(true);
        let kept = [former, tid].iter().find_map(|t| self.tracing.threads.get(t)).map(|t| t.settings);
        self.tracing.close_all();
        self.tracing.code.clear();
        self.recording.clear();
        if let Some(settings) = kept.or(self.tracing.process.map(|(settings, _)| settings)) {
            match self.tracing.open(tid, settings) {
                Ok(thread) => {
                    self.tracing.threads.insert(tid, thread);
                }
                Err(message) => tracing::warn!(%message, "the program exec'd: its thread is not traced"),
            }
        }
        self.tracing.settle();
    }

    /// A thread is gone: so is its trace (as lldb-server frees it).
    pub(super) fn trace_thread_gone(&mut self, tid: Pid) {
        self.tracing.close(tid);
        self.tracing.settle();
        self.recording.remove(&tid);
    }

    /// Runs the stub and the recorded threads on one CPU (the one the
    /// first recorded thread last ran on) while they are recorded: a single
    /// step is a round trip between the two, and waking a thread on another
    /// CPU costs an interrupt between CPUs (several microseconds in a
    /// virtual machine, more than the step itself; recording ran at a third
    /// of the speed). Every affinity is given back at the next stop, so
    /// only a program that asks for its affinity while recorded sees this.
    fn sit_beside(&mut self, tid: Pid) {
        if self.tracing.beside.is_none() {
            let stat = std::fs::read_to_string(format!("/proc/{}/task/{tid}/stat", self.pid)).unwrap_or_default();
            // Field 39 (`processor`), counted after the command name's `)`.
            let cpu = stat.rsplit(')').next().and_then(|rest| rest.split_whitespace().nth(36)).and_then(|f| f.parse::<usize>().ok());
            let Some(cpu) = cpu else { return };
            let Ok(own) = nix::sched::sched_getaffinity(Pid::from_raw(0)) else { return };
            let mut set = nix::sched::CpuSet::new();
            if set.set(cpu).is_err() || nix::sched::sched_setaffinity(Pid::from_raw(0), &set).is_err() {
                return;
            }
            self.tracing.own_affinity = Some(own);
            self.tracing.beside = Some(set);
        }
        let Some(set) = self.tracing.beside else { return };
        if let Ok(theirs) = nix::sched::sched_getaffinity(tid) {
            if nix::sched::sched_setaffinity(tid, &set).is_ok() {
                self.tracing.pinned.push((tid, theirs));
            }
        }
    }

    /// A stop is reported: every traced thread's trace ends at its PC.
    pub(super) fn traces_stopped(&mut self) {
        self.blocks_stopped(false);
        if let Some(own) = self.tracing.own_affinity.take() {
            let _ = nix::sched::sched_setaffinity(Pid::from_raw(0), &own);
        }
        self.tracing.beside = None;
        for (tid, theirs) in std::mem::take(&mut self.tracing.pinned) {
            let _ = nix::sched::sched_setaffinity(tid, &theirs);
        }
        self.recording.clear();
        for (&tid, thread) in &mut self.tracing.threads {
            thread.next_ip = None;
            if let (Some(ring), Some(ip)) = (thread.ring(), rip(tid)) {
                ring.stopped(ip);
            }
        }
    }

    /// The program runs again: the next reads see new contents, and code
    /// is read afresh.
    pub(super) fn traces_resumed(&mut self) {
        self.tracing.code.clear();
        self.tracing.steps_in_a_row = 0;
        for thread in self.tracing.threads.values_mut() {
            thread.contents = None;
        }
    }

    pub(super) fn start_tracing(&mut self, request: &TraceStart) -> Result<(), InferiorError> {
        let settings = ring_settings(request)?;
        match &request.threads {
            None => {
                if self.tracing.process.is_some() {
                    return Err(InferiorError::Refused("Process currently traced. Stop process tracing first".into()));
                }
                let new: Vec<Pid> = self.threads.iter().copied().filter(|tid| !self.tracing.traces(*tid)).collect();
                let mut total = self.tracing.total_bytes();
                for tid in &new {
                    total += settings.size as u64;
                    if request.process_limit.is_some_and(|limit| total > limit) {
                        return Err(InferiorError::Refused(format!(
                            "Thread {tid} can't be traced as the process trace size limit has been reached. Consider retracing with a higher limit."
                        )));
                    }
                }
                self.tracing.open_all(&new, settings)?;
                self.tracing.process = Some((settings, request.process_limit));
            }
            Some(tids) => {
                let mut new = Vec::new();
                for &tid in tids {
                    let pid = i32::try_from(tid).ok().map(Pid::from_raw).filter(|pid| self.threads.contains(pid));
                    let Some(pid) = pid else { return Err(InferiorError::InvalidRequest(format!("Thread {tid} not found in the process."))) };
                    if self.tracing.process.is_some() && self.tracing.traces(pid) {
                        return Err(InferiorError::Refused(format!("Thread with tid {tid} is currently traced. Stop tracing it first.")));
                    }
                    if self.tracing.traces(pid) || new.contains(&pid) {
                        return Err(InferiorError::Refused(format!("Thread {tid} already traced")));
                    }
                    new.push(pid);
                }
                self.tracing.open_all(&new, settings)?;
            }
        }
        tracing::info!(threads = self.tracing.threads.len(), ring = settings.size, recorder = ?self.tracing.in_use, "tracing started");
        Ok(())
    }

    pub(super) fn stop_tracing(&mut self, threads: Option<&[u64]>) -> Result<(), InferiorError> {
        match threads {
            None => {
                self.tracing.process = None;
                self.tracing.close_all();
            }
            Some(tids) => {
                let mut stopped = Vec::new();
                for &tid in tids {
                    let pid = i32::try_from(tid).ok().map(Pid::from_raw).filter(|pid| self.tracing.traces(*pid));
                    let Some(pid) = pid else { return Err(InferiorError::InvalidRequest(format!("Thread {tid} not currently traced"))) };
                    stopped.push(pid);
                }
                for pid in stopped {
                    self.tracing.close(pid);
                }
            }
        }
        self.tracing.settle();
        Ok(())
    }

    pub(super) fn tracing_state(&self) -> TraceState {
        TraceState {
            threads: self.tracing.threads.iter().map(|(tid, t)| (tid.as_raw() as u64, t.size())).collect(),
            tsc_conversion: Some(self.tracing.clock.conversion()),
        }
    }

    pub(super) fn thread_trace(&mut self, tid: u64) -> Result<Vec<u8>, InferiorError> {
        let pid = i32::try_from(tid).ok().map(Pid::from_raw);
        let Some(thread) = pid.and_then(|pid| self.tracing.threads.get_mut(&pid)) else {
            return Err(InferiorError::InvalidRequest(format!("Thread {tid} not currently traced")));
        };
        if thread.contents.is_none() {
            thread.contents = Some(thread.read());
        }
        Ok(thread.contents.clone().unwrap_or_default())
    }

    /// How the traces are being made, and what each holds.
    pub(super) fn tracing_status(&self) -> TraceStatus {
        let tracing = &self.tracing;
        TraceStatus {
            recorder: tracing.in_use.as_ref().map_or_else(|| format!("none yet ({} when tracing starts)", tracing.recorder.name()), RecorderInUse::describe),
            single_steps: tracing.single_steps,
            block_runs: tracing.block_runs,
            threads: tracing
                .threads
                .iter()
                .map(|(tid, thread)| ThreadTraceStatus { tid: tid.as_raw() as u64, size: thread.size(), instructions: thread.instructions() })
                .collect(),
        }
    }

    /// Sets the recorder for traces started from now on; a software
    /// recorder in use switches between `step` and `branch` at once.
    pub(super) fn set_trace_recorder(&mut self, recorder: TraceRecorder) -> Result<(), InferiorError> {
        match (&mut self.tracing.in_use, recorder) {
            (Some(RecorderInUse::Software { steps_only, .. }), TraceRecorder::Step | TraceRecorder::Branch) => {
                *steps_only = recorder == TraceRecorder::Step;
            }
            (Some(in_use), TraceRecorder::IntelPt | TraceRecorder::Auto) | (Some(in_use @ RecorderInUse::IntelPt(_)), _) => {
                return Err(InferiorError::Refused(format!("the traces being made use {}: stop tracing first (process trace stop, record stop)", in_use.describe())));
            }
            (None, _) => {}
        }
        self.tracing.recorder = recorder;
        Ok(())
    }

    /// The CPU a decoder of the traces should assume: this one for the
    /// hardware's traces, else the one software recordings declare.
    pub(super) fn tracing_cpu(&self) -> retrace_decoder::bundle::CpuInfo {
        match self.tracing.in_use {
            Some(RecorderInUse::IntelPt(_)) => retrace_collector::hardware::host_cpu_info().unwrap_or_else(retrace_decoder::bundle::CpuInfo::software_recording),
            _ => retrace_decoder::bundle::CpuInfo::software_recording(),
        }
    }
}
