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

pub mod frames;
pub mod host_files;
pub mod inert;
pub mod live;
pub mod saved_trace;
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

/// A `monitor` command of a target with a history (`--record`, `--replay`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HistoryCommand {
    /// `record status [--json]`.
    Status {
        /// As JSON, for scripts.
        json: bool,
    },
    /// `goto begin|end|ID [TID] [--hold]` (also `record goto …`).
    Goto {
        /// Where.
        target: GotoTarget,
        /// The arming holds through single steps, and the next continue
        /// uses it up ([`Armed::hold`]).
        hold: bool,
    },
    /// `history [TID] [--before ID] [--max N]`: thread TID's instructions
    /// before its instruction ID (default: the thread and instruction the
    /// debugger stands at) in that frame, newest first
    /// ([`frames::frame_history`]).
    History {
        /// The thread (default: the one standing at the position).
        tid: Option<u64>,
        /// The instruction id to look back from (default: the position).
        before: Option<u64>,
        /// At most this many lines.
        max: usize,
        /// `--within START-END[,START-END…]` (hex): the run of the frame's
        /// instructions inside these ranges just before the point is listed
        /// as its earliest instruction only
        /// ([`state_log::StateLog::frame_history`]).
        within: Vec<std::ops::Range<u64>>,
        /// `--stops ADDR[,ADDR…]` (hex): each callee listed says the latest
        /// of its instructions (its own callees' included) at one of these
        /// addresses, if any — where a debugger passing over the callee
        /// backwards would stop at a breakpoint.
        stops: Vec<u64>,
    },
}

/// `monitor history`'s line limit when none is given.
pub const HISTORY_LINES: usize = 4096;

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

impl HistoryCommand {
    /// Reads a `monitor` command; the error says what is understood.
    pub fn parse(command: &str) -> Result<Self, String> {
        let words: Vec<&str> = command.split_whitespace().collect();
        match words.as_slice() {
            ["record", "status"] => Ok(HistoryCommand::Status { json: false }),
            ["record", "status", "--json"] => Ok(HistoryCommand::Status { json: true }),
            ["goto", rest @ ..] | ["record", "goto", rest @ ..] => {
                let hold = rest.last() == Some(&"--hold");
                let rest = if hold { &rest[..rest.len() - 1] } else { rest };
                GotoTarget::parse(rest).map(|target| HistoryCommand::Goto { target, hold })
            }
            ["history", rest @ ..] => Self::parse_history(rest),
            _ => Err(format!(
                "unknown monitor command `{command}`; try `record status [--json]`, `goto begin|end|ID [TID] [--hold]`, `history [TID] [--before ID] [--max N] [--within RANGES]`, `trace data TID` or `trace cpuinfo`"
            )),
        }
    }
}

impl HistoryCommand {
    fn parse_history(args: &[&str]) -> Result<Self, String> {
        const USAGE: &str = "usage: history [TID] [--before ID] [--max N] [--within START-END[,START-END...]] [--stops ADDR[,ADDR...]]";
        let (mut tid, mut before, mut max, mut within, mut stops) = (None, None, HISTORY_LINES, Vec::new(), Vec::new());
        let mut args = args.iter();
        while let Some(&arg) = args.next() {
            let mut number = |what: &str| -> Result<u64, String> {
                let value = args.next().ok_or_else(|| format!("{arg} needs {what}; {USAGE}"))?;
                value.parse::<u64>().map_err(|_| format!("`{value}` is not {what}"))
            };
            match arg {
                "--before" => before = Some(number("an instruction id")?),
                "--max" => max = usize::try_from(number("a line count")?).unwrap_or(usize::MAX),
                "--within" => within = parse_ranges(args.next().ok_or_else(|| format!("--within needs address ranges; {USAGE}"))?)?,
                "--stops" => stops = parse_addresses(args.next().ok_or_else(|| format!("--stops needs addresses; {USAGE}"))?)?,
                _ if tid.is_none() && !arg.starts_with('-') => tid = Some(arg.parse::<u64>().map_err(|_| format!("`{arg}` is not a thread id; {USAGE}"))?),
                _ => return Err(USAGE.into()),
            }
        }
        stops.sort_unstable();
        stops.dedup();
        Ok(HistoryCommand::History { tid, before, max, within, stops })
    }
}

/// `ADDR[,ADDR…]` in hex (`0x` optional).
fn parse_addresses(text: &str) -> Result<Vec<u64>, String> {
    text.split(',').map(|t| u64::from_str_radix(t.trim_start_matches("0x"), 16).map_err(|_| format!("`{t}` is not a hex address"))).collect()
}

/// `START-END[,START-END…]` in hex (`0x` optional): address ranges, END excluded.
fn parse_ranges(text: &str) -> Result<Vec<std::ops::Range<u64>>, String> {
    let hex = |t: &str| u64::from_str_radix(t.trim_start_matches("0x"), 16).map_err(|_| format!("`{t}` is not a hex address"));
    text.split(',')
        .map(|range| {
            let (start, end) = range.split_once('-').ok_or_else(|| format!("`{range}` is not START-END"))?;
            let (start, end) = (hex(start)?, hex(end)?);
            if start >= end {
                return Err(format!("`{range}` is empty"));
            }
            Ok(start..end)
        })
        .collect()
}

impl GotoTarget {
    fn parse(args: &[&str]) -> Result<Self, String> {
        match args {
            ["begin"] => Ok(GotoTarget::Begin),
            ["end"] => Ok(GotoTarget::End),
            [id] | [id, _] => {
                let id = id.parse::<u64>().map_err(|_| format!("`{id}` is not an instruction id (a number, `begin` or `end`)"))?;
                let tid = match args.get(1) {
                    Some(tid) => Some(tid.parse::<u64>().map_err(|_| format!("`{tid}` is not a thread id"))?),
                    None => None,
                };
                Ok(GotoTarget::Instruction { id, tid })
            }
            _ => Err("usage: goto begin|end|ID [TID] [--hold]".into()),
        }
    }
}

/// The `/proc/cpuinfo` text a decoder of a trace recorded on `cpu` must
/// see (LLDB reads the vendor, family, model and stepping; its parser needs
/// a line after the last of them).
pub fn procfs_cpu_info(cpu: &CpuInfo) -> String {
    format!(
        "processor\t: 0\nvendor_id\t: {}\ncpu family\t: {}\nmodel\t\t: {}\nmodel name\t: retrace trace (Intel PT format)\nstepping\t: {}\nmicrocode\t: 0x0\nflags\t\t: fpu tsc intel_pt\n\n",
        cpu.vendor, cpu.family, cpu.model, cpu.stepping
    )
}

/// The error of a target that records nothing.
pub const TRACING_UNSUPPORTED: &str = "Tracing is not supported by this target.";

/// What the session needs of a debugged program besides gdbstub's
/// [`Target`].
pub trait Inferior: Target<Arch = X86_64Linux, Error = String> {
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

    /// Starts recording threads or the process; the error is a sentence
    /// for the user (LLDB's wording where LLDB has one).
    fn trace_start(&mut self, _request: &TraceStart) -> Result<(), String> {
        Err(TRACING_UNSUPPORTED.into())
    }

    /// Stops recording these threads, or everything (`None`).
    fn trace_stop(&mut self, _threads: Option<&[u64]>) -> Result<(), String> {
        Err(TRACING_UNSUPPORTED.into())
    }

    /// What is recorded now.
    fn trace_state(&self) -> Result<TraceState, String> {
        Err(TRACING_UNSUPPORTED.into())
    }

    /// A traced thread's trace: Intel PT, oldest byte first, exactly the
    /// size [`Self::trace_state`] gives; the same bytes until the program
    /// runs again.
    fn trace_data(&mut self, _tid: u64) -> Result<Vec<u8>, String> {
        Err(TRACING_UNSUPPORTED.into())
    }

    /// How the traces are being made (`monitor trace status`).
    fn trace_status(&self) -> Result<TraceStatus, String> {
        Err(TRACING_UNSUPPORTED.into())
    }

    /// Chooses the recorder (`monitor trace recorder NAME`): `auto`,
    /// `branch`, `step` or `intel-pt`.
    fn trace_recorder(&mut self, _name: &str) -> Result<(), String> {
        Err(TRACING_UNSUPPORTED.into())
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

    /// Answers a `monitor` command (`qRcmd`: GDB's `monitor …`, LLDB's
    /// `process plugin packet monitor …`): the text to show, or why not.
    fn monitor_command(&mut self, command: &str) -> Result<String, String> {
        Err(format!("unknown monitor command `{command}`: this target has none"))
    }

    /// What `qShlibInfoAddr` answers: an address holding a pointer to the
    /// dynamic linker's rendezvous, for a target whose own cannot be read
    /// (LLDB asks before it looks in the program's `DT_DEBUG`).
    fn shared_library_info_address(&self) -> Option<u64> {
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

    /// The CPU a decoder of this target's traces should assume (its errata
    /// apply): by default the one software recordings declare.
    fn trace_cpu(&self) -> CpuInfo {
        CpuInfo::software_recording()
    }
}

/// The gdbstub capabilities every target offers — the same for all, so
/// that a packet reaches the same gdbstub parser whatever is debugged (the
/// protocol side's checks, and its fuzzing against the inert target, hold
/// for the live one): multi-thread base with resume, single step and
/// scheduler locking, software and hardware breakpoints and watchpoints,
/// the executable's path, auxv, the library list, extended mode (only so
/// that thread ids carry the real pid); no fork events.
macro_rules! offer_capabilities {
    ($target:ty) => {
        impl gdbstub::target::Target for $target {
            type Arch = crate::arch::X86_64Linux;
            type Error = String;

            fn base_ops(&mut self) -> gdbstub::target::ext::base::BaseOps<'_, Self::Arch, Self::Error> {
                gdbstub::target::ext::base::BaseOps::MultiThread(self)
            }

            fn support_breakpoints(&mut self) -> Option<gdbstub::target::ext::breakpoints::BreakpointsOps<'_, Self>> {
                Some(self)
            }

            fn support_exec_file(&mut self) -> Option<gdbstub::target::ext::exec_file::ExecFileOps<'_, Self>> {
                Some(self)
            }

            fn support_auxv(&mut self) -> Option<gdbstub::target::ext::auxv::AuxvOps<'_, Self>> {
                Some(self)
            }

            fn support_libraries_svr4(&mut self) -> Option<gdbstub::target::ext::libraries::LibrariesSvr4Ops<'_, Self>> {
                Some(self)
            }

            fn support_monitor_cmd(&mut self) -> Option<gdbstub::target::ext::monitor_cmd::MonitorCmdOps<'_, Self>> {
                Some(self)
            }

            fn support_extended_mode(&mut self) -> Option<gdbstub::target::ext::extended_mode::ExtendedModeOps<'_, Self>> {
                Some(self)
            }

            fn support_host_io(&mut self) -> Option<gdbstub::target::ext::host_io::HostIoOps<'_, Self>> {
                Some(self)
            }

            fn use_fork_stop_reason(&self) -> bool {
                false
            }

            fn use_vfork_stop_reason(&self) -> bool {
                false
            }

            fn use_vforkdone_stop_reason(&self) -> bool {
                false
            }
        }

        impl gdbstub::target::ext::monitor_cmd::MonitorCmd for $target {
            fn handle_monitor_cmd(
                &mut self,
                cmd: &[u8],
                mut out: gdbstub::target::ext::monitor_cmd::ConsoleOutput<'_>,
            ) -> Result<(), Self::Error> {
                let command = String::from_utf8_lossy(cmd);
                match crate::inferior::Inferior::monitor_command(self, &command) {
                    // In `O` packets of a few KiB each (a trace's hex can be megabytes).
                    Ok(text) => {
                        for chunk in text.as_bytes().chunks(2048) {
                            out.write_raw(chunk);
                            out.flush();
                        }
                    }
                    Err(reason) => {
                        out.write_raw(b"error: ");
                        out.write_raw(reason.as_bytes());
                        out.write_raw(b"\n");
                    }
                }
                Ok(())
            }
        }

        impl gdbstub::target::ext::host_io::HostIo for $target {
            fn support_open(&mut self) -> Option<gdbstub::target::ext::host_io::HostIoOpenOps<'_, Self>> {
                Some(self)
            }

            fn support_close(&mut self) -> Option<gdbstub::target::ext::host_io::HostIoCloseOps<'_, Self>> {
                Some(self)
            }

            fn support_pread(&mut self) -> Option<gdbstub::target::ext::host_io::HostIoPreadOps<'_, Self>> {
                Some(self)
            }

            fn support_fstat(&mut self) -> Option<gdbstub::target::ext::host_io::HostIoFstatOps<'_, Self>> {
                Some(self)
            }

            fn support_readlink(&mut self) -> Option<gdbstub::target::ext::host_io::HostIoReadlinkOps<'_, Self>> {
                Some(self)
            }

            fn support_setfs(&mut self) -> Option<gdbstub::target::ext::host_io::HostIoSetfsOps<'_, Self>> {
                Some(self)
            }
        }

        impl gdbstub::target::ext::host_io::HostIoOpen for $target {
            fn open(
                &mut self,
                filename: &[u8],
                flags: gdbstub::target::ext::host_io::HostIoOpenFlags,
                _mode: gdbstub::target::ext::host_io::HostIoOpenMode,
            ) -> gdbstub::target::ext::host_io::HostIoResult<u32, Self> {
                crate::inferior::host_files::open(filename, flags)
            }
        }

        impl gdbstub::target::ext::host_io::HostIoClose for $target {
            fn close(&mut self, fd: u32) -> gdbstub::target::ext::host_io::HostIoResult<(), Self> {
                crate::inferior::host_files::close(fd)
            }
        }

        impl gdbstub::target::ext::host_io::HostIoPread for $target {
            fn pread(&mut self, fd: u32, count: usize, offset: u64, buf: &mut [u8]) -> gdbstub::target::ext::host_io::HostIoResult<usize, Self> {
                crate::inferior::host_files::pread(fd, count, offset, buf)
            }
        }

        impl gdbstub::target::ext::host_io::HostIoFstat for $target {
            fn fstat(&mut self, fd: u32) -> gdbstub::target::ext::host_io::HostIoResult<gdbstub::target::ext::host_io::HostIoStat, Self> {
                crate::inferior::host_files::fstat(fd)
            }
        }

        impl gdbstub::target::ext::host_io::HostIoReadlink for $target {
            fn readlink(&mut self, filename: &[u8], buf: &mut [u8]) -> gdbstub::target::ext::host_io::HostIoResult<usize, Self> {
                crate::inferior::host_files::readlink(filename, buf)
            }
        }

        /// One filesystem: the stub's (it and the program share it).
        impl gdbstub::target::ext::host_io::HostIoSetfs for $target {
            fn setfs(&mut self, _fs: gdbstub::target::ext::host_io::FsKind) -> gdbstub::target::ext::host_io::HostIoResult<(), Self> {
                Ok(())
            }
        }

        impl gdbstub::target::ext::breakpoints::Breakpoints for $target {
            fn support_sw_breakpoint(&mut self) -> Option<gdbstub::target::ext::breakpoints::SwBreakpointOps<'_, Self>> {
                Some(self)
            }

            fn support_hw_breakpoint(&mut self) -> Option<gdbstub::target::ext::breakpoints::HwBreakpointOps<'_, Self>> {
                Some(self)
            }

            fn support_hw_watchpoint(&mut self) -> Option<gdbstub::target::ext::breakpoints::HwWatchpointOps<'_, Self>> {
                Some(self)
            }
        }
    };
}
pub(crate) use offer_capabilities;

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
                Err("this program cannot be restarted".into())
            }

            fn support_current_active_pid(
                &mut self,
            ) -> Option<gdbstub::target::ext::extended_mode::CurrentActivePidOps<'_, Self>> {
                Some(self)
            }
        }

        impl gdbstub::target::ext::extended_mode::CurrentActivePid for $target {
            fn current_active_pid(&mut self) -> Result<gdbstub::common::Pid, Self::Error> {
                std::num::NonZeroUsize::new(self.pid as usize).ok_or_else(|| "no process".to_string())
            }
        }
    };
}
pub(crate) use offer_fixed_extended_mode;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn history_commands_parse_and_say_what_is_understood() {
        assert_eq!(HistoryCommand::parse("record status"), Ok(HistoryCommand::Status { json: false }));
        assert_eq!(HistoryCommand::parse(" record  status --json"), Ok(HistoryCommand::Status { json: true }));
        assert_eq!(HistoryCommand::parse("goto begin"), Ok(HistoryCommand::Goto { target: GotoTarget::Begin, hold: false }));
        assert_eq!(HistoryCommand::parse("record goto end"), Ok(HistoryCommand::Goto { target: GotoTarget::End, hold: false }));
        assert_eq!(HistoryCommand::parse("goto 120"), Ok(HistoryCommand::Goto { target: GotoTarget::Instruction { id: 120, tid: None }, hold: false }));
        assert_eq!(HistoryCommand::parse("goto 7 4242"), Ok(HistoryCommand::Goto { target: GotoTarget::Instruction { id: 7, tid: Some(4242) }, hold: false }));
        assert_eq!(HistoryCommand::parse("goto x"), Err("`x` is not an instruction id (a number, `begin` or `end`)".into()));
        assert_eq!(HistoryCommand::parse("goto 1 t"), Err("`t` is not a thread id".into()));
        assert_eq!(HistoryCommand::parse("goto"), Err("usage: goto begin|end|ID [TID] [--hold]".into()));
        assert_eq!(
            HistoryCommand::parse("goto 7 4242 --hold"),
            Ok(HistoryCommand::Goto { target: GotoTarget::Instruction { id: 7, tid: Some(4242) }, hold: true })
        );
        let mut held = Some(Armed { position: 3, hold: true });
        assert_eq!((Armed::take(&mut held, true), held), (Some(3), Some(Armed { position: 3, hold: true })), "a step keeps a held arming");
        assert_eq!((Armed::take(&mut held, false), held), (Some(3), None), "a continue uses it up");
        let mut once = Some(Armed { position: 3, hold: false });
        assert_eq!((Armed::take(&mut once, true), once), (Some(3), None), "a step uses up an arming not held");
        assert_eq!(Armed::take(&mut once, false), None);
        assert_eq!(HistoryCommand::parse("history"), Ok(HistoryCommand::History { tid: None, before: None, max: HISTORY_LINES, within: vec![], stops: vec![] }));
        assert_eq!(HistoryCommand::parse("history 4242 --before 17 --max 3"), Ok(HistoryCommand::History { tid: Some(4242), before: Some(17), max: 3, within: vec![], stops: vec![] }));
        assert_eq!(
            HistoryCommand::parse("history --within 0x10-0x20,30-38"),
            Ok(HistoryCommand::History { tid: None, before: None, max: HISTORY_LINES, within: vec![0x10..0x20, 0x30..0x38], stops: vec![] })
        );
        assert_eq!(HistoryCommand::parse("history --within 20-10"), Err("`20-10` is empty".into()));
        assert_eq!(HistoryCommand::parse("history --within x-1"), Err("`x` is not a hex address".into()));
        assert_eq!(
            HistoryCommand::parse("history 7 --stops 0x20,10,20"),
            Ok(HistoryCommand::History { tid: Some(7), before: None, max: HISTORY_LINES, within: vec![], stops: vec![0x10, 0x20] })
        );
        assert_eq!(HistoryCommand::parse("history --stops 1,y"), Err("`y` is not a hex address".into()));
        assert_eq!(
            HistoryCommand::parse("history --max"),
            Err("--max needs a line count; usage: history [TID] [--before ID] [--max N] [--within START-END[,START-END...]] [--stops ADDR[,ADDR...]]".into())
        );
        assert_eq!(HistoryCommand::parse("history --before x"), Err("`x` is not an instruction id".into()));
        assert_eq!(
            HistoryCommand::parse("history 1 2"),
            Err("usage: history [TID] [--before ID] [--max N] [--within START-END[,START-END...]] [--stops ADDR[,ADDR...]]".into())
        );
        assert!(HistoryCommand::parse("reverse").unwrap_err().starts_with("unknown monitor command `reverse`"));
    }
}
