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

mod target;
