//! What the protocol side debugs. A target is a gdbstub `Target`
//! (registers, memory, breakpoints, threads, resume actions — gdbstub's
//! extension traits say which it has) that is also an [`Inferior`]: the
//! one small interface through which the session ([`crate::protocol`])
//! learns that the program stopped and ends the session with it. rr's gdb
//! server talks to its replay sessions through one such interface; so does
//! this one.
//!
//! * [`live`] — a process running now, under ptrace;
//! * [`inert`] — a program in buffers that never runs (its threads stop as
//!   soon as they are resumed): what the protocol side is fuzzed against.
//!
//! * [`saved_trace`] — a saved trace (`--replay`), navigated through a
//!   [`timeline`];
//! * a live process recorded for reverse execution (`--record`) is [`live`]
//!   with a [`state_log`].

use std::os::fd::BorrowedFd;

use gdbstub::stub::MultiThreadStopReason;
use gdbstub::target::Target;

use crate::arch::X86_64Linux;
pub use retrace_decoder::bundle::CpuInfo;
pub use error::InferiorError;

pub mod diversion;
pub mod error;
pub mod frames;
pub mod host_files;
pub mod inert;
pub mod libraries;
pub mod live;
pub mod recorded_state;
pub mod saved_trace;
pub mod ptrace_registers;
pub mod scratch;
pub mod state_log;
pub mod replay;
pub mod timeline;

/// A stop reason to report to the client (thread ids are Linux tids).
pub type StopReason = MultiThreadStopReason<u64>;

pub use retrace_collector::perf_clock::TscConversion;

/// A request to start recording (LLDB's `jLLDBTraceStart`, GDB's
/// `Qbtrace:pt`), already checked for form by the protocol side.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceStart {
    /// The threads to trace (Linux tids), or `None` for the whole process:
    /// every thread now and every thread it starts later.
    pub threads: Option<Vec<u64>>,
    /// Bytes of trace kept per thread: a ring holding the newest data.
    pub ring_size: u64,
    /// For process tracing: the most bytes all the threads' rings may take.
    pub process_limit: Option<u64>,
    /// PSB period exponent: a sync point about every 2^(n+11) bytes.
    pub psb_period: Option<u64>,
    /// Timestamps (TSC packets) in the trace.
    pub tsc: bool,
}

/// What is being recorded now.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TraceState {
    /// Each traced thread (Linux tid) and the size of its trace in bytes.
    pub threads: Vec<(u64, usize)>,
    /// How the trace's TSC values convert to perf-clock nanoseconds.
    pub tsc_conversion: Option<TscConversion>,
}

/// How the traces are being made (`monitor trace status`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TraceStatus {
    /// The recorder, in words.
    pub recorder: String,
    /// Single steps of recorded threads since tracing started.
    pub single_steps: u64,
    /// Runs to the next branch (block runs) since tracing started.
    pub block_runs: u64,
    /// Each traced thread.
    pub threads: Vec<ThreadTraceStatus>,
}

/// One traced thread in a [`TraceStatus`].
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ThreadTraceStatus {
    /// Linux tid.
    pub tid: u64,
    /// The trace's size in bytes.
    pub size: usize,
    /// Instructions recorded since the thread's trace started, older ones
    /// dropped from the ring included (`None`: the CPU counts none).
    pub instructions: Option<u64>,
}

/// Copies what `buf` can take of `data[offset..offset + length]` (a
/// `qXfer` read's window); returns how many bytes.
pub(crate) fn copy_window(data: &[u8], offset: u64, length: usize, buf: &mut [u8]) -> usize {
    let start = usize::try_from(offset).unwrap_or(usize::MAX).min(data.len());
    let n = length.min(buf.len()).min(data.len() - start);
    buf[..n].copy_from_slice(&data[start..start + n]);
    n
}

/// A resume armed by `monitor goto`: wherever it was asked to go, it
/// stops at `position`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Armed {
    /// The position of the history.
    pub position: u64,
    /// Single steps land there without using the arming up; the next
    /// continue (or reverse continue) does. For a debugger that steps off
    /// a breakpoint before it continues (LLDB does, sometimes even after
    /// the breakpoint is removed): the step-off must not be the move.
    pub hold: bool,
}

/// A move through a target's history.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Movement {
    /// `bc`.
    ReverseContinue,
    /// `bs`.
    ReverseStep,
    /// A continue while the debugger stands in the past.
    ForwardContinue,
}

/// What a stop says beyond gdbstub's stop reasons (the protocol writes it
/// into the stop reply as lldb-server and gdbserver do).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StopNote {
    /// A resume armed by `monitor goto` arrived: a stop as after a single
    /// step (LLDB then shows `stop reason = trace` rather than a signal,
    /// and, at the start of an inlined function, stands in its caller).
    ArrivedWhereArmed,
    /// A stop the trace or the history caused, with why (a move refused,
    /// the trace limit reached).
    Trace(String),
    /// The program stands stopped by a signal the debugger must not
    /// deliver when it resumes (a replay's recorded fatal signal: LLDB
    /// refuses to run backwards delivering one), with the words shown for
    /// it (`signal SIGSEGV`); GDB reads the signal of the stop itself.
    Undeliverable(String),
    /// The program exec'd, for LLDB.
    ExecForLldb,
    /// The program exec'd this file, for GDB (which offered `exec-events`).
    ExecForGdb(String),
}

/// A region of the program's address space.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MemoryRegion {
    /// Mapped from `start` to `end` (exclusive), with these permissions,
    /// from the file `name` (empty: anonymous).
    Mapped {
        /// First address.
        start: u64,
        /// Past the last address.
        end: u64,
        /// Readable.
        readable: bool,
        /// Writable.
        writable: bool,
        /// Executable.
        executable: bool,
        /// The mapped file's path, if any.
        name: String,
    },
    /// Nothing mapped from `start` to `end` (the gap around the address).
    Unmapped {
        /// First address of the gap.
        start: u64,
        /// Past its last address.
        end: u64,
    },
    /// The program's mappings cannot be read.
    Unknown,
}

impl MemoryRegion {
    /// The region of `maps` (sorted or not) that holds `address`, or the
    /// gap around it.
    pub fn of(maps: &[retrace_collector::process::Mapping], address: u64) -> MemoryRegion {
        if let Some(m) = maps.iter().find(|m| m.start <= address && address < m.end) {
            return MemoryRegion::Mapped { start: m.start, end: m.end, readable: m.readable, writable: m.writable, executable: m.executable, name: m.path.clone() };
        }
        let start = maps.iter().map(|m| m.end).filter(|&end| end <= address).max().unwrap_or(0);
        let end = maps.iter().map(|m| m.start).filter(|&s| s > address).min().unwrap_or(u64::MAX);
        MemoryRegion::Unmapped { start, end }
    }
}

impl Armed {
    /// The position a resume (`stepping` or not) goes to, if `armed`
    /// holds one; the arming is used up unless it holds through a step.
    pub fn take(armed: &mut Option<Armed>, stepping: bool) -> Option<u64> {
        let held = (*armed)?;
        if !(held.hold && stepping) {
            *armed = None;
        }
        Some(held.position)
    }
}

/// Where `monitor goto` sends the next resume.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GotoTarget {
    /// The first instruction of the history.
    Begin,
    /// The end of the history.
    End,
    /// Instruction `id` (as `retrace dump instructions` numbers them) of
    /// thread `tid`, or of the thread the debugger stands in.
    Instruction {
        /// The instruction id.
        id: u64,
        /// The thread.
        tid: Option<u64>,
    },
}

/// What a history is and where the debugger stands in it (`monitor
/// record status`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryStatus {
    /// What was recorded, and how.
    pub source: HistorySource,
    /// Steps recorded.
    pub instructions: u64,
    /// (thread, its steps) of every thread in the history.
    pub threads: Vec<(u64, u64)>,
    /// Where the debugger stands.
    pub position: HistoryPosition,
}

/// What a history was recorded from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HistorySource {
    /// A saved trace, replayed: control flow only, or with the full state.
    SavedTrace {
        /// The bundle's `trace.json`.
        bundle: std::path::PathBuf,
        /// Bytes of Intel PT in it.
        trace_bytes: usize,
        /// It holds a full-state recording: registers and memory are
        /// served.
        full_state: bool,
    },
    /// The live process, recorded as it runs.
    Recording {
        /// `full` or `branch`.
        mode: &'static str,
        /// Bytes the history takes.
        bytes: usize,
        /// Why watchpoints cannot stop a move through it, if they cannot.
        watchpoints_refused: Option<&'static str>,
    },
}

/// A position of a history, as the debugger sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HistoryPosition {
    /// The thread standing there.
    pub tid: u64,
    /// The id of that thread's instruction there.
    pub id: u64,
    /// The position (steps before it).
    pub index: u64,
    /// Its instruction's address, where one is there (not at the present).
    pub pc: Option<u64>,
    /// At the end of a live recording: the present.
    pub present: bool,
}

/// `monitor history`'s question: thread `tid`'s instructions before its
/// instruction `before` in that frame, newest first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryRequest {
    /// The thread (default: the one standing at the position).
    pub tid: Option<u64>,
    /// The instruction id to look back from (default: the position).
    pub before: Option<u64>,
    /// At most this many lines.
    pub max: usize,
    /// The run of the frame's instructions inside these ranges just
    /// before the point is listed as its earliest instruction only.
    pub within: Vec<std::ops::Range<u64>>,
    /// Each callee listed says the latest of its instructions at one of
    /// these addresses, if any.
    pub stops: Vec<u64>,
}

/// `monitor history`'s answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryListing {
    /// The thread.
    pub tid: u64,
    /// The instruction looked back from.
    pub id: u64,
    /// The frame's instructions, newest first.
    pub steps: Vec<frames::FrameStep>,
}

/// Where an armed resume will stop (`monitor goto`'s answer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GotoStop {
    /// The thread standing there.
    pub tid: u64,
    /// That thread's instruction id there.
    pub id: u64,
    /// The instruction's address; `None` at the present.
    pub pc: Option<u64>,
}

/// The history capability of a target with a recorded past: typed answers,
/// which the protocol's `monitor` commands put into words.
pub trait HistoryOps {
    /// What the history is and where the debugger stands.
    fn history_status(&self) -> HistoryStatus;

    /// Arms the next resume to stop at `target` (`hold`: single steps do
    /// not use the arming up, [`Armed::hold`]).
    fn goto(&mut self, target: GotoTarget, hold: bool) -> Result<GotoStop, InferiorError>;

    /// A thread's instructions in a frame, newest first.
    fn history(&self, request: &HistoryRequest) -> Result<HistoryListing, InferiorError>;
}

/// The tracing capability of a target that records traces: typed answers,
/// which the protocol's trace packets and `monitor trace` put into words.
pub trait TraceOps {
    /// Starts recording threads or the process; the error is a sentence
    /// for the user (LLDB's wording where LLDB has one).
    fn trace_start(&mut self, request: &TraceStart) -> Result<(), InferiorError>;

    /// Stops recording these threads, or everything (`None`).
    fn trace_stop(&mut self, threads: Option<&[u64]>) -> Result<(), InferiorError>;

    /// What is recorded now.
    fn trace_state(&self) -> Result<TraceState, InferiorError>;

    /// A traced thread's trace: Intel PT, oldest byte first, exactly the
    /// size [`Self::trace_state`] gives; the same bytes until the program
    /// runs again.
    fn trace_data(&mut self, tid: u64) -> Result<Vec<u8>, InferiorError>;

    /// How the traces are being made (`monitor trace status`).
    fn trace_status(&self) -> Result<TraceStatus, InferiorError>;

    /// Chooses the recorder (`monitor trace recorder NAME`): `auto`,
    /// `branch`, `step` or `intel-pt`.
    fn trace_recorder(&mut self, name: &str) -> Result<(), InferiorError>;

    /// The CPU a decoder of this target's traces should assume (its errata
    /// apply).
    fn trace_cpu(&self) -> CpuInfo;
}

/// A target's tracing capability, or the error of one that records
/// nothing.
pub fn tracing_of<T: Inferior + ?Sized>(target: &mut T) -> Result<&mut dyn TraceOps, InferiorError> {
    target.support_tracing().ok_or(InferiorError::Unsupported(TRACING_UNSUPPORTED))
}

/// The error of a target that records nothing.
pub const TRACING_UNSUPPORTED: &str = "Tracing is not supported by this target.";

/// What the session needs of a debugged program besides gdbstub's
/// [`Target`].
pub trait Inferior: Target<Arch = X86_64Linux, Error = InferiorError> {
    /// The process id the client is told (`qProcessInfo`, thread ids).
    fn pid(&self) -> u32;

    /// Called once before the session starts: set up what
    /// [`Self::stop_events`] returns.
    fn start_session(&mut self) -> std::io::Result<()>;

    /// Whether the program has this thread (a Linux tid) now.
    fn has_thread(&self, tid: u64) -> bool;

    /// The thread a client that names any thread (`Hgp0.0`) means: the
    /// first, as gdbstub and gdbserver choose.
    fn any_thread(&self) -> Option<u64>;

    /// A descriptor that becomes readable when the program may have
    /// stopped (the session waits on it and on the client at once); `None`
    /// when stops are known without waiting.
    fn stop_events(&self) -> Option<BorrowedFd<'_>>;

    /// After a resume: the stop to report, once there is one. Never blocks.
    fn poll_stop(&mut self) -> Option<StopReason>;

    /// The client asked for a stop (Ctrl-C): the program is stopped and
    /// [`Self::poll_stop`] reports it (SIGINT).
    fn interrupt(&mut self);

    /// The region of the address space that holds `address`.
    fn memory_region(&self, address: u64) -> MemoryRegion;

    /// The client killed the program, or went away: it must not outlive
    /// the session.
    fn kill(&mut self);

    /// The client detached: the program runs on without the debugger.
    fn detach(&mut self);

    /// The client is LLDB (it sent a packet only LLDB sends). LLDB's own
    /// reverse-execution tests expect a forward continue from the past to
    /// run on into the live program (their harness puts the past state
    /// back into the process), where GDB's `record full` stops at the end
    /// of the history ("No more reverse-execution history"): a target
    /// replaying a recording of a live process follows the client.
    fn client_is_lldb(&mut self) {}

    /// The client (GDB) offered `exec-events+`: an exec is reported as
    /// one (`exec:<path in hex>;` in the stop reply).
    fn client_takes_exec_events(&mut self) {}

    /// The tracing capability (LLDB's `jLLDBTrace*`, GDB's `Qbtrace`,
    /// `monitor trace`): `None` where the target records nothing.
    fn support_tracing(&mut self) -> Option<&mut dyn TraceOps> {
        None
    }

    /// What a client opening `path` (GDB's Host I/O) reads: by default
    /// the machine's file (the program runs here).
    fn target_file(&self, _path: &[u8]) -> host_files::TargetFile {
        host_files::TargetFile::Host
    }

    /// The signal the program stands stopped by, where it is not the
    /// debugger's own trap (`?` reports it): a replay standing at the
    /// instruction a recorded fatal signal interrupted, as rr reports it.
    /// The thread and the signal; `None` for a trap.
    fn standing_signal(&self) -> Option<(u64, gdbstub::common::Signal)> {
        None
    }

    /// What the stop about to be reported says beyond its reason.
    fn take_stop_note(&mut self) -> Option<StopNote> {
        None
    }

    /// Whether register `n` (GDB's numbering) of thread `tid` has a known
    /// value now (a replayed trace knows only the PC).
    fn register_available(&mut self, _tid: u64, _n: usize) -> bool {
        true
    }

    /// The history capability (`--record`, `--replay`): `None` where the
    /// target has no history (`monitor record status`, `goto` and `history`
    /// are then refused).
    fn support_history(&mut self) -> Option<Box<dyn HistoryOps + '_>> {
        None
    }

    /// Whether the target would have a history had it been started
    /// recording (the refusal of a history command then says how).
    fn records_history_when_asked(&self) -> bool {
        false
    }

    /// What `qShlibInfoAddr` answers: an address holding a pointer to the
    /// dynamic linker's rendezvous, for a target whose own cannot be read
    /// (LLDB asks before it looks in the program's `DT_DEBUG`).
    fn shared_library_info_address(&self) -> Option<u64> {
        None
    }

    /// Memory for the debugger's own use (LLDB's `_M`: its expression
    /// results): its address; `None` where the target gives none (the
    /// debugger makes room another way: a live program is called `mmap`).
    fn allocate(&mut self, _size: u64) -> Option<u64> {
        None
    }

    /// Gives back memory [`Self::allocate`] gave (LLDB's `_m`): `None`
    /// where the target gives none.
    fn deallocate(&mut self, _address: u64) -> Option<bool> {
        None
    }

    /// Whether the stop just taken from [`Inferior::poll_stop`] is a
    /// continue armed by `monitor goto` that went nowhere (armed to where
    /// the debugger stands): then a client last told of the history's
    /// boundary is told so again, so that a resume made only to turn
    /// LLDB's direction forward (the shim's `forward-direction`) leaves
    /// that stop as it was.
    fn take_stood_still(&mut self) -> bool {
        false
    }

    /// Why the debugger cannot make `movement` through the history now, if
    /// it cannot (the session answers the client with the reason).
    fn history_move_refused(&self, _movement: Movement) -> Option<&'static str> {
        None
    }
}

/// The extended mode of a program the stub did not start and cannot start
/// again (an inert program, a saved trace): `vRun`/`vAttach` refused, the
/// client attached to it, `vKill` ends the session (the type's `killed`
/// field records it), the pid its `pid` field. Extended mode is offered only
/// so that thread ids carry the pid.
macro_rules! offer_fixed_extended_mode {
    ($target:ty) => {
        impl gdbstub::target::ext::extended_mode::ExtendedMode for $target {
            fn run(
                &mut self,
                _filename: Option<&[u8]>,
                _args: gdbstub::target::ext::extended_mode::Args<'_, '_>,
            ) -> gdbstub::target::TargetResult<gdbstub::common::Pid, Self> {
                Err(gdbstub::target::TargetError::NonFatal)
            }

            fn attach(&mut self, _pid: gdbstub::common::Pid) -> gdbstub::target::TargetResult<(), Self> {
                Err(gdbstub::target::TargetError::NonFatal)
            }

            fn query_if_attached(
                &mut self,
                _pid: gdbstub::common::Pid,
            ) -> gdbstub::target::TargetResult<gdbstub::target::ext::extended_mode::AttachKind, Self> {
                Ok(gdbstub::target::ext::extended_mode::AttachKind::Attach)
            }

            fn kill(
                &mut self,
                _pid: Option<gdbstub::common::Pid>,
            ) -> gdbstub::target::TargetResult<gdbstub::target::ext::extended_mode::ShouldTerminate, Self> {
                self.killed = true;
                Ok(gdbstub::target::ext::extended_mode::ShouldTerminate::Yes)
            }

            fn restart(&mut self) -> Result<(), Self::Error> {
                Err(crate::inferior::error::InferiorError::Unsupported("this program cannot be restarted"))
            }

            fn support_current_active_pid(
                &mut self,
            ) -> Option<gdbstub::target::ext::extended_mode::CurrentActivePidOps<'_, Self>> {
                Some(self)
            }
        }

        impl gdbstub::target::ext::extended_mode::CurrentActivePid for $target {
            fn current_active_pid(&mut self) -> Result<gdbstub::common::Pid, Self::Error> {
                std::num::NonZeroUsize::new(self.pid as usize).ok_or(crate::inferior::error::InferiorError::NoProcess)
            }
        }
    };
}
pub(crate) use offer_fixed_extended_mode;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_arming_held_survives_steps_and_one_not_held_does_not() {
        let mut held = Some(Armed { position: 3, hold: true });
        assert_eq!((Armed::take(&mut held, true), held), (Some(3), Some(Armed { position: 3, hold: true })), "a step keeps a held arming");
        assert_eq!((Armed::take(&mut held, false), held), (Some(3), None), "a continue uses it up");
        let mut once = Some(Armed { position: 3, hold: false });
        assert_eq!((Armed::take(&mut once, true), once), (Some(3), None), "a step uses up an arming not held");
        assert_eq!(Armed::take(&mut once, false), None);
    }
}
