//! A saved trace served as a stopped process (`retrace-stub --replay
//! BUNDLE/trace.json`): the bundle's threads decoded into one
//! [`Timeline`], the program standing at one position of it — at first the
//! end of history — and moved by the client's resumes: `bc`/`bs` backwards,
//! `c`/`s`/`vCont` forwards, each stopping at breakpoints, at the ends of
//! the history, or where `monitor goto` armed it.
//!
//! A trace records control flow only, so the state is the PC: every other
//! register is unavailable (`xx`), memory is served only where it cannot
//! have changed — the read-only segments of the bundle's module copies
//! (code, constants), and the dynamic linker's rendezvous made from the
//! bundle's library list (what LLDB reads to find the libraries) — and
//! everything else is refused, never guessed.
//! Nothing can be written.

use std::os::fd::BorrowedFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use gdbstub::common::{Signal as GdbSignal, Tid};
use gdbstub::target::ext::auxv::Auxv;
use gdbstub::target::ext::base::multithread::{
    MultiThreadBase, MultiThreadResume, MultiThreadResumeOps, MultiThreadSchedulerLocking, MultiThreadSchedulerLockingOps,
    MultiThreadSingleStep, MultiThreadSingleStepOps,
};
use gdbstub::target::ext::base::reverse_exec::{ReverseContOps, ReverseStepOps};
use gdbstub::target::ext::base::single_register_access::{SingleRegisterAccess, SingleRegisterAccessOps};
use gdbstub::target::ext::base::reverse_exec::ReplayLogPosition;
use gdbstub::target::ext::breakpoints::{HwBreakpoint, HwWatchpoint, SwBreakpoint, WatchKind};
use gdbstub::target::ext::exec_file::ExecFile;
use gdbstub::target::ext::libraries::LibrariesSvr4;
use gdbstub::target::{TargetError, TargetResult};
use libc::{AT_BASE, AT_ENTRY, AT_NULL, AT_PAGESZ, AT_PHDR, AT_PHENT, AT_PHNUM};
use object::elf::{PF_R, PF_W, PF_X};
use object::{Object, ObjectSegment};
use retrace_collector::process::Mapping;
use retrace_decoder::bundle::load::LoadedBundle;
use retrace_decoder::flow::{decode_parallel_with, FlowOptions};

use super::frames::{flows_by_address, frame_history, Executed};
use super::live::libraries::{library_list_xml, link_map, rendezvous_address, LinkMapEntry, ReadMemory};
use super::replay::{boundary, Breakpoints, Forward, History, Replayer, TimeTravel, DEBUG_REGISTERS};
use super::recorded_state::{FullStateHistory, RecordedState, Releasing, StreamBytes};
use super::diversion::{Diversion, DiversionStop};
use super::scratch::Scratch;
use super::timeline::{Delivery, RecordedThread, Timeline};
use crate::inferior::InferiorError;
use crate::arch::{RegNumber, Regs};
use crate::inferior::{
    copy_window, GotoStop, GotoTarget, HistoryListing, HistoryOps, HistoryPosition, HistoryRequest, HistorySource, HistoryStatus, Inferior, MemoryRegion,
    StopNote, StopReason,
};

/// A module of the saved process, as its ELF file says it was laid out.
#[derive(Debug, Clone)]
struct Module {
    /// Where the debugger finds the file: the bundle's copy, else the
    /// path on the traced system.
    path: String,
    /// Load bias.
    bias: u64,
    /// The dynamic section's address, if it has one.
    dynamic: Option<u64>,
    /// Entry point (relocated).
    entry: u64,
    /// Program headers' address (relocated) and count.
    program_headers: Option<(u64, u64)>,
    /// `PT_INTERP`: the dynamic linker it asks for.
    interpreter: Option<String>,
    /// Its path on the traced system.
    system_path: String,
    /// A dynamic linker's rendezvous (`_r_debug`) and the function it
    /// calls on every change of the library list (`_dl_debug_state`),
    /// relocated.
    rendezvous: Option<(u64, u64)>,
}

/// Where the replay serves the dynamic linker's rendezvous: a page no
/// Linux process can map (below `vm.mmap_min_addr`), so that it hides
/// nothing of the program's.
pub const RENDEZVOUS_PAGE: u64 = 0x1000;

/// The page the replay answers `qShlibInfoAddr` with ([`RENDEZVOUS_PAGE`]):
/// a pointer to a copy of the dynamic linker's rendezvous (`struct
/// r_debug`) right after it, as it stands while the bundle's libraries
/// are loaded (`RT_CONSISTENT`, the list's first link map, the linker's
/// `_dl_debug_state` and base), zeros after. LLDB finds a Linux program's
/// libraries by reading the rendezvous before it asks for the library list
/// (`qXfer:libraries-svr4:read`), which it then takes whole; without it it
/// lists the program and the dynamic linker only. (The process's own
/// rendezvous, in the linker's writable data, is not recorded; LLDB reads
/// memory in 512-byte lines, so it is served on a page of its own.)
fn rendezvous_page(linker: &Module, first_link_map: u64) -> Vec<u8> {
    let brk = linker.rendezvous.map_or(0, |(_, brk)| brk);
    let mut page = Vec::with_capacity(4096);
    page.extend_from_slice(&(RENDEZVOUS_PAGE + 8).to_le_bytes());
    page.extend_from_slice(&1u32.to_le_bytes()); // r_version
    page.extend_from_slice(&[0; 4]);
    page.extend_from_slice(&first_link_map.to_le_bytes()); // r_map
    page.extend_from_slice(&brk.to_le_bytes()); // r_brk
    page.extend_from_slice(&0u32.to_le_bytes()); // r_state: RT_CONSISTENT
    page.extend_from_slice(&[0; 4]);
    page.extend_from_slice(&linker.bias.to_le_bytes()); // r_ldbase
    page.resize(4096, 0);
    page
}

/// A saved trace, served as a process stopped somewhere in its history.
#[derive(Debug)]
pub struct SavedTrace {
    pid: u32,
    bundle: PathBuf,
    timeline: Timeline,
    /// Each thread's raw trace, served to clients that decode it themselves
    /// (LLDB's `thread trace dump`, GDB's `record instruction-history`).
    traces: Vec<(u64, Vec<u8>)>,
    /// The client asked for the trace (`process trace start`, `record
    /// btrace pt`): until then none is offered, or GDB 13 would switch to
    /// replaying it itself (it turns `record btrace` on by itself when
    /// `qXfer:btrace-conf` already shows `<pt/>`).
    trace_served: bool,
    cpu: retrace_decoder::bundle::CpuInfo,
    tsc_conversion: Option<crate::inferior::TscConversion>,
    /// What cannot have changed while the program ran.
    unchanging: Vec<ReadOnlyPages>,
    modules: Vec<Module>,
    auxv: Vec<u8>,
    libraries: String,
    /// The page at [`RENDEZVOUS_PAGE`], for a dynamically linked program
    /// ([`rendezvous_page`]).
    rendezvous: Option<Vec<u8>>,
    /// Where the program stands in the timeline, and the moves.
    replayer: Replayer,
    breakpoints: Breakpoints,
    /// The thread the last resume actions single-step, if one steps.
    step: Option<u64>,
    stop: Option<StopReason>,
    /// Words for the next stop reply ([`Inferior::take_stop_note`]).
    stop_note: Option<StopNote>,
    killed: bool,
    /// Every register and byte, for a recording with full state.
    state: Option<RecordedState>,
    /// How the program ended, reported when a full-state replay runs past
    /// its last instruction (as rr reports it): `None` where the recording
    /// ended otherwise (a limit, an interruption) or keeps no state.
    exit: Option<StopReason>,
    /// The last stop reported was the recorded fatal signal's, at the end
    /// (a continue from there ends the program; a replay starts so).
    fatal_signal_reported: bool,
    /// What the debugger wrote (full-state replays: its memory, and the
    /// program's past memory until the next move).
    scratch: Scratch,
    /// Code the debugger runs in the past (full-state replays): the thread
    /// diverted and its stand-in process, until the replay moves on.
    diversion: Option<(u64, Diversion)>,
    /// The library list last read from the recorded memory, and where:
    /// asked for again in chunks at one stop.
    libraries_at: std::cell::RefCell<Option<(u64, String)>>,
}

/// The memory at `position` as a full-state replay shows it: the
/// debugger's own, what it wrote there, the recording's.
fn past_bytes(state: &RecordedState, timeline: &Timeline, scratch: &Scratch, position: u64, address: u64, buf: &mut [u8]) -> usize {
    if let Some(n) = scratch.read_allocated(address, buf) {
        return n;
    }
    let n = state.memory_at(timeline, position, address, buf);
    scratch.overlay(address, buf, n)
}

/// Whether `a` and `b` are the same registers as far as running code goes
/// (the debugger restored what it read).
fn same_registers(a: &Regs, b: &Regs) -> bool {
    const STATUS_FLAGS: u32 = 0xcd5;
    a.gpr == b.gpr && a.rip == b.rip && a.eflags & STATUS_FLAGS == b.eflags & STATUS_FLAGS
}

/// The pages of a read-only segment, mapped from a module file.
#[derive(Debug)]
struct ReadOnlyPages {
    mapping: Mapping,
    file: Arc<[u8]>,
}

/// Reads the layout of one module file: the module and its read-only pages.
fn module(bundle_dir: &Path, entry: &retrace_decoder::bundle::BundleModule) -> Result<(Module, Vec<ReadOnlyPages>), InferiorError> {
    let path = match &entry.file {
        Some(file) => bundle_dir.join(file),
        None => PathBuf::from(&entry.system_path),
    };
    let bytes = std::fs::read(&path).map_err(|e| InferiorError::Bundle(format!("{}: {e}", path.display())))?;
    let file = object::File::parse(&*bytes).map_err(|e| InferiorError::Bundle(format!("{}: not a readable ELF file: {e}", path.display())))?;
    let lowest = file.segments().map(|s| s.address()).min().ok_or_else(|| InferiorError::Bundle(format!("{}: no loadable segments", path.display())))?;
    // The bundle's load address is where the lowest segment's page starts
    // (LLDB's `loadAddress`), as the decoder's image reads it.
    let bias = entry.load_address.0.wrapping_sub(lowest & !0xfff);
    let mut dynamic = None;
    let mut program_headers = None;
    let mut interpreter = None;
    let mut unchanging = Vec::new();
    let path_text = path.to_string_lossy().into_owned();
    if let object::File::Elf64(elf) = &file {
        use object::read::elf::ProgramHeader as _;
        let endian = elf.endian();
        let header = elf.elf_header();
        let phoff = header.e_phoff.get(endian);
        let phnum = header.e_phnum.get(endian) as u64;
        for ph in elf.elf_program_headers() {
            let (kind, vaddr, memsz, flags) = (ph.p_type(endian), ph.p_vaddr(endian), ph.p_memsz(endian), ph.p_flags(endian));
            match kind {
                object::elf::PT_DYNAMIC => dynamic = Some(vaddr.wrapping_add(bias)),
                object::elf::PT_PHDR => program_headers = Some((vaddr.wrapping_add(bias), phnum)),
                object::elf::PT_INTERP => {
                    interpreter = ph.data(endian, &*bytes).ok().map(|d| String::from_utf8_lossy(d.split(|&b| b == 0).next().unwrap_or(&[])).into_owned())
                }
                object::elf::PT_LOAD => {
                    if program_headers.is_none() && ph.p_offset(endian) <= phoff && phoff < ph.p_offset(endian) + ph.p_filesz(endian) {
                        program_headers = Some((vaddr + (phoff - ph.p_offset(endian)) + bias, phnum));
                    }
                    if flags & PF_W == 0 {
                        // Mapped in whole pages, as the kernel maps it: the
                        // file's bytes around the segment come along.
                        let start = vaddr.wrapping_add(bias);
                        let page = start & !0xfff;
                        unchanging.push(Mapping {
                            start: page,
                            end: (start.wrapping_add(memsz) + 0xfff) & !0xfff,
                            readable: flags & PF_R != 0,
                            writable: false,
                            executable: flags & PF_X != 0,
                            offset: ph.p_offset(endian).saturating_sub(start - page),
                            path: entry.system_path.clone(),
                        });
                    }
                }
                _ => {}
            }
        }
    } else {
        return Err(InferiorError::Bundle(format!("{}: not a 64-bit ELF file", path.display())));
    }
    let symbol = |name: &str| {
        use object::ObjectSymbol as _;
        file.symbols().chain(file.dynamic_symbols()).find(|symbol| symbol.name() == Ok(name)).map(|symbol| symbol.address().wrapping_add(bias))
    };
    let rendezvous = symbol("_r_debug").map(|r_debug| (r_debug, symbol("_dl_debug_state").unwrap_or(0)));
    let module = Module {
        path: path_text,
        rendezvous,
        bias,
        dynamic,
        entry: file.entry().wrapping_add(bias),
        program_headers,
        interpreter,
        system_path: entry.system_path.clone(),
    };
    drop(file);
    let bytes: Arc<[u8]> = bytes.into();
    let pages = unchanging.into_iter().map(|mapping| ReadOnlyPages { mapping, file: bytes.clone() }).collect();
    Ok((module, pages))
}

fn push_auxv(auxv: &mut Vec<u8>, key: u64, value: u64) {
    auxv.extend_from_slice(&key.to_le_bytes());
    auxv.extend_from_slice(&value.to_le_bytes());
}

/// `mappings` as `/proc/PID/maps` lists them.
fn proc_maps(mappings: &[Mapping]) -> String {
    let flag = |set: bool, letter: char| if set { letter } else { '-' };
    mappings
        .iter()
        .map(|m| {
            let line = format!("{:08x}-{:08x} {}{}{}p {:08x} 00:00 0", m.start, m.end, flag(m.readable, 'r'), flag(m.writable, 'w'), flag(m.executable, 'x'), m.offset);
            if m.path.is_empty() { format!("{line}\n") } else { format!("{line:<72} {}\n", m.path) }
        })
        .collect()
}

/// The signal that killed the program, for a recording that ended so.
fn fatal_signal(exit: Option<StopReason>) -> Option<GdbSignal> {
    match exit? {
        StopReason::Terminated(signal) => Some(signal),
        _ => None,
    }
}

/// The stop reporting a recorded end: an exit status, or the signal that
/// killed the program (`None` for a signal number Linux does not have).
fn exit_stop(exit: retrace_decoder::bundle::RecordedExit) -> Option<StopReason> {
    match exit {
        retrace_decoder::bundle::RecordedExit::Status(code) => Some(StopReason::Exited(code as u8)),
        retrace_decoder::bundle::RecordedExit::Signal(number) => {
            let signal = nix::sys::signal::Signal::try_from(number).ok()?;
            Some(StopReason::Terminated(crate::signals::to_gdb(signal)))
        }
    }
}

/// The threads' runs in the order a full-state stream's schedule gives
/// (tid, first step, count or to the end), as timeline slices; a run that
/// does not follow its thread's last is left out, and what the schedule
/// does not place of a thread follows at the end (every instruction is in
/// the timeline once).
fn scheduled_slices(threads: &[RecordedThread], runs: &[(u32, u64, Option<u64>)]) -> Vec<(usize, u64, u64)> {
    let mut next = vec![0u64; threads.len()];
    let mut slices = Vec::new();
    for &(tid, first, count) in runs {
        let Some(thread) = threads.iter().position(|t| t.tid == u64::from(tid)) else { continue };
        let total = threads[thread].history.instructions();
        if first != next[thread] || first >= total {
            continue;
        }
        let count = count.unwrap_or(total - first).min(total - first);
        if count > 0 {
            slices.push((thread, first, count));
            next[thread] += count;
        }
    }
    for (thread, t) in threads.iter().enumerate() {
        let total = t.history.instructions();
        if next[thread] < total {
            tracing::warn!(tid = t.tid, placed = next[thread], total, "the full-state schedule does not place all of the thread's instructions: the rest follows at the end");
            slices.push((thread, next[thread], total - next[thread]));
        }
    }
    slices
}

/// Loads a bundle's full-state `stream` (in `dir`) over `timeline`:
/// mapped files are read from the bundle's copies (`modules/<path>`).
fn load_full_state(dir: &Path, stream: StreamBytes, timeline: &Timeline) -> Result<RecordedState, String> {
    let mut file = |path: &[u8]| {
        let relative = String::from_utf8_lossy(path).trim_start_matches('/').to_string();
        std::fs::read(dir.join("modules").join(relative)).ok()
    };
    let (started, bytes) = (std::time::Instant::now(), stream.bytes().len());
    let state = RecordedState::load(timeline, stream, &mut file)?;
    tracing::info!(bytes, seconds = started.elapsed().as_secs_f64(), "full state indexed");
    Ok(state)
}

impl SavedTrace {
    /// Loads and decodes the bundle described by `trace_json`. The error is
    /// a sentence for the user.
    pub fn open(trace_json: &Path) -> Result<Self, InferiorError> {
        let trace_json = &retrace_decoder::bundle::load::trace_json_of(trace_json);
        let loaded: LoadedBundle = retrace_decoder::bundle::load::load(trace_json).map_err(|e| InferiorError::Bundle(e.to_string()))?;
        for warning in &loaded.warnings {
            tracing::warn!("{warning}");
        }
        if loaded.processes.len() != 1 {
            return Err(InferiorError::Bundle(format!(
                "{}: the trace holds {} program images (the process exec'd); replay serves one program: open the bundle of one image",
                trace_json.display(),
                loaded.processes.len()
            )));
        }
        let process = &loaded.description.processes[0];
        let pid = u32::try_from(process.pid).map_err(|_| InferiorError::Bundle(format!("{}: pid {} is not a Linux pid", trace_json.display(), process.pid)))?;
        let image = &loaded.processes[0].image;
        // Item ids as `retrace dump instructions` and LLDB give them.
        let options = FlowOptions { lldb_psb_slices: true };
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let started = std::time::Instant::now();
        let threads: Vec<RecordedThread> = loaded
            .threads
            .iter()
            .map(|t| RecordedThread { tid: t.tid, history: decode_parallel_with(&t.trace, image, cores, options) })
            .collect();
        tracing::info!(seconds = started.elapsed().as_secs_f64(), "traces decoded");
        if threads.iter().all(|t| t.history.instructions() == 0) {
            return Err(InferiorError::Bundle(format!("{}: the trace holds no instructions", trace_json.display())));
        }
        let dir = trace_json.parent().unwrap_or(Path::new("."));
        let full_state = match loaded.description.retrace.as_ref().and_then(|r| r.full_state.as_ref()) {
            Some(name) => {
                let path = dir.join(name);
                Some(StreamBytes::open(&path).map_err(|e| InferiorError::Bundle(format!("{}: the full-state stream {}: {e}", trace_json.display(), path.display())))?)
            }
            None => None,
        };
        // A full-state recording says the one order the threads ran in.
        // Without it (no clock common to the threads) their interleaving is
        // not known: one thread after another, in bundle order.
        let timeline = match &full_state {
            Some(stream) => {
                // Up to any damage (the state's load says where it is);
                // a file that is no stream at all is refused.
                let started = std::time::Instant::now();
                let reading = Releasing::new(stream);
                let schedule = retrace_decoder::full_state::schedule_of(reading.take_while(|item| item.as_ref().map_or_else(|e| e.offset == 0, |_| true)))
                    .map_err(|e| InferiorError::Bundle(format!("{}: {e}", trace_json.display())))?;
                tracing::info!(seconds = started.elapsed().as_secs_f64(), runs = schedule.runs.len(), deliveries = schedule.deliveries.len(), "full-state schedule read");
                let slices = scheduled_slices(&threads, &schedule.runs);
                let deliveries = schedule
                    .deliveries
                    .iter()
                    .filter_map(|d| Some(Delivery { thread: threads.iter().position(|t| t.tid == u64::from(d.tid))?, index: d.at, ip: d.ip }))
                    .collect();
                Timeline::scheduled(threads, slices, deliveries)
            }
            None => Timeline::sequential(threads),
        };
        let mut modules = Vec::new();
        let mut unchanging = Vec::new();
        for entry in &process.modules {
            if entry.system_path.starts_with('[') && entry.file.is_none() {
                continue; // [vdso] without a copy
            }
            match module(dir, entry) {
                Ok((module, pages)) => {
                    modules.push(module);
                    unchanging.extend(pages);
                }
                Err(e) => tracing::warn!("module {} left out: {e}", entry.system_path),
            }
        }
        let Some(program) = modules.first().cloned() else {
            return Err(InferiorError::Bundle(format!("{}: the trace lists no readable module (the program's file is needed)", trace_json.display())));
        };
        let mut auxv = Vec::new();
        if let Some((phdr, phnum)) = program.program_headers {
            push_auxv(&mut auxv, AT_PHDR, phdr);
            push_auxv(&mut auxv, AT_PHENT, 56);
            push_auxv(&mut auxv, AT_PHNUM, phnum);
        }
        push_auxv(&mut auxv, AT_PAGESZ, 4096);
        let interpreter = program.interpreter.as_ref().and_then(|i| {
            let name = Path::new(i).file_name()?;
            modules.iter().skip(1).find(|m| Path::new(&m.system_path).file_name() == Some(name))
        });
        push_auxv(&mut auxv, AT_BASE, interpreter.map_or(0, |m| m.bias));
        push_auxv(&mut auxv, AT_ENTRY, program.entry);
        push_auxv(&mut auxv, AT_NULL, 0);
        let entries: Vec<LinkMapEntry> = modules
            .iter()
            .skip(1)
            .filter_map(|m| {
                // `lm` only names the entry (there is no link map to read):
                // the dynamic section's address is unique per module.
                let dynamic = m.dynamic?;
                Some(LinkMapEntry { link_map: dynamic, base: m.bias, dynamic, name: m.path.clone().into_bytes() })
            })
            .collect();
        let libraries = library_list_xml(&entries);
        let rendezvous = match (interpreter, entries.first()) {
            (Some(linker), Some(first)) if linker.rendezvous.is_some() => Some(rendezvous_page(linker, first.link_map)),
            _ => None,
        };
        let state = match full_state {
            Some(stream) => Some(load_full_state(dir, stream, &timeline).map_err(|e| InferiorError::Bundle(format!("{}: {e}", trace_json.display())))?),
            None => None,
        };
        let position = timeline.len() - 1;
        let tsc_conversion = loaded.description.tsc_perf_zero_conversion.as_ref().and_then(|c| {
            Some(crate::inferior::TscConversion { time_mult: c.time_mult, time_shift: c.time_shift, time_zero: c.time_zero.parse().ok()? })
        });
        Ok(SavedTrace {
            pid,
            bundle: trace_json.to_path_buf(),
            timeline,
            traces: loaded.threads.iter().map(|t| (t.tid, t.trace.clone())).collect(),
            trace_served: false,
            cpu: loaded.description.cpu_info.clone(),
            tsc_conversion,
            unchanging,
            modules,
            auxv,
            libraries,
            rendezvous,
            replayer: Replayer::at(position),
            breakpoints: Breakpoints::default(),
            step: None,
            stop: None,
            stop_note: None,
            killed: false,
            exit: state.as_ref().and(loaded.description.retrace.as_ref().and_then(|r| r.exit)).and_then(exit_stop),
            fatal_signal_reported: true,
            state,
            scratch: Scratch::default(),
            diversion: None,
            libraries_at: Default::default(),
        })
    }

    /// The timeline being replayed.
    pub fn timeline(&self) -> &Timeline {
        &self.timeline
    }

    /// Stands the program at its first instruction (before a client
    /// connects): it runs forwards from there as it ran.
    pub fn go_to_start(&mut self) {
        self.replayer.move_to(0);
    }

    /// The program's mappings where the replay stands: a full-state
    /// recording says what was mapped at each position; otherwise the
    /// modules' read-only segments are known.
    fn mappings_here(&self) -> Vec<Mapping> {
        match &self.state {
            Some(state) => state.mappings_at(self.position()),
            None => self.unchanging.iter().map(|pages| pages.mapping.clone()).collect(),
        }
    }

    /// The current position in the timeline.
    pub fn position(&self) -> u64 {
        self.replayer.position()
    }

    /// Runs a diversion the resume continues, if there is one and its
    /// thread's registers are not back to the recorded ones (the debugger
    /// restored them: the diversion ends, the replay moves on).
    fn run_diversion(&mut self) -> Option<StopReason> {
        let position = self.position();
        let SavedTrace { state: Some(state), timeline, scratch, diversion: Some((tid, stand_in)), breakpoints, step, .. } = self else { return None };
        let tid = *tid;
        let recorded = state.registers_at(timeline, tid, position);
        if stand_in.registers().ok().zip(recorded).is_some_and(|(now, recorded)| same_registers(&now, &recorded)) {
            return None;
        }
        let addresses = breakpoints.addresses();
        let mut source = |address: u64, buf: &mut [u8]| past_bytes(state, timeline, scratch, position, address, buf);
        let thread = Tid::new(tid as usize)?;
        Some(match stand_in.run(step.is_some(), &addresses, &mut source) {
            Ok(DiversionStop::Breakpoint) => StopReason::SwBreak(thread),
            Ok(DiversionStop::Stepped) => StopReason::DoneStep,
            Ok(DiversionStop::Signal(signal)) => StopReason::SignalWithThread { tid: thread, signal: GdbSignal(signal as u8) },
            Ok(DiversionStop::Exited(code)) => {
                tracing::warn!(code, "the code run in the past ended its stand-in process");
                StopReason::SignalWithThread { tid: thread, signal: GdbSignal::SIGKILL }
            }
            Err(e) => {
                tracing::warn!("{e}");
                StopReason::SignalWithThread { tid: thread, signal: GdbSignal::SIGKILL }
            }
        })
    }

    /// Whether thread `index` existed at `position`: its first instruction
    /// is at or before it, and it had not ended (with a full-state
    /// recording: its last instruction, before the position, was no
    /// `exit` system call; without, a thread is not known to have ended).
    fn thread_exists_at(&self, index: usize, position: u64) -> bool {
        let Some((first, last)) = self.timeline.span_of(index) else { return false };
        if position < first {
            return false;
        }
        let (Some(state), true) = (&self.state, position > last) else { return true };
        const EXIT: u64 = 60;
        const EXIT_GROUP: u64 = 231;
        let Some(step) = self.timeline.at(last) else { return true };
        let mut code = [0u8; 2];
        let is_syscall = state.memory_at(&self.timeline, last, step.ip, &mut code) == 2 && code == [0x0f, 0x05];
        let number = state.registers_at(&self.timeline, step.tid, last).filter(|r| r.is_available(0)).map(|r| r.gpr[0]);
        !(is_syscall && matches!(number, Some(EXIT | EXIT_GROUP)))
    }

    fn tid_at(&self, position: u64) -> Tid {
        let tid = self.timeline.at(position).map_or(self.pid as u64, |i| i.tid);
        Tid::new(tid as usize).expect("tids are not 0")
    }

    /// Reads what cannot have changed (a read-only segment, from the file);
    /// `None` elsewhere.
    fn unchanging_bytes(&self, start: u64, data: &mut [u8]) -> Option<usize> {
        let pages = self.unchanging.iter().find(|p| p.mapping.start <= start && start < p.mapping.end)?;
        let (range, file) = (&pages.mapping, &pages.file);
        let offset = usize::try_from(range.offset + (start - range.start)).ok()?;
        // Past the file's end a page reads as zeros.
        let n = data.len().min((range.end - start) as usize);
        let from_file = n.min(file.len().saturating_sub(offset));
        data[..from_file].copy_from_slice(&file[offset..offset + from_file]);
        data[from_file..n].fill(0);
        Some(n)
    }

}

impl HistoryOps for SavedTrace {
    fn history_status(&self) -> HistoryStatus {
        let here = self.timeline.at(self.position()).expect("the position is in the timeline");
        HistoryStatus {
            source: HistorySource::SavedTrace { bundle: self.bundle.clone(), trace_bytes: self.traces.iter().map(|(_, trace)| trace.len()).sum(), full_state: self.state.is_some() },
            instructions: self.timeline.instructions(),
            threads: self.timeline.threads().iter().map(|t| (t.tid, t.history.instructions())).collect(),
            position: HistoryPosition { tid: here.tid, id: self.timeline.item_id(self.position()).unwrap_or(0), index: self.position(), pc: Some(here.ip), present: false },
        }
    }

    /// `goto begin|end|ID [TID] [--hold]`.
    fn goto(&mut self, target: GotoTarget, hold: bool) -> Result<GotoStop, InferiorError> {
        let position = match target {
            GotoTarget::Begin => 0,
            GotoTarget::End => self.timeline.len() - 1,
            GotoTarget::Instruction { id, tid } => {
                let tid = tid.unwrap_or_else(|| self.timeline.at(self.position()).map_or(0, |i| i.tid));
                self.timeline.position_of_item(tid, id)?
            }
        };
        self.replayer.arm(position, hold);
        let here = self.timeline.at(position).expect("a position of the timeline");
        Ok(GotoStop { tid: here.tid, id: self.timeline.item_id(position).unwrap_or(0), pc: Some(here.ip) })
    }

    /// A thread's instructions in a frame. (Signal handler entries are not
    /// marked: a trace shows them as plain branches; `within` only shortens
    /// the answer, and a saved trace lists every step.)
    fn history(&self, request: &HistoryRequest) -> Result<HistoryListing, InferiorError> {
        let HistoryRequest { tid, before, max, stops, .. } = request;
        let here = self.timeline.at(self.position()).expect("the position is in the timeline");
        let tid = tid.unwrap_or(here.tid);
        let thread = self.timeline.thread_of(tid).ok_or_else(|| InferiorError::InvalidRequest(format!("no thread {tid} in the history")))?;
        let history = &self.timeline.threads()[thread].history;
        // The thread's instruction index to look back from.
        let index = match before {
            Some(item) => self.timeline.at(self.timeline.position_of_item(tid, *item)?).map_or(0, |i| i.index),
            None if here.thread == thread => here.index,
            None => self.timeline.next_of_thread(self.position(), thread).and_then(|p| self.timeline.at(p)).map_or(history.instructions(), |i| i.index),
        };
        let id = history.cursor_at(index).map_or(history.items_len(), |c| c.item_id());
        let mut cursor = index.checked_sub(1).and_then(|last| history.cursor_at(last));
        let executed = std::iter::from_fn(|| {
            let at = cursor?;
            let step = Executed { id: at.item_id(), pc: at.ip(), interrupted: false };
            let mut previous = at;
            cursor = previous.prev().then_some(previous);
            Some(step)
        });
        let flow = flows_by_address(|pc, code| self.unchanging_bytes(pc, code).unwrap_or(0));
        Ok(HistoryListing { tid, id, steps: frame_history(executed, flow, *max, stops) })
    }
}

fn tid(thread: Tid) -> u64 {
    thread.get() as u64
}


impl Inferior for SavedTrace {
    fn pid(&self) -> u32 {
        self.pid
    }

    fn start_session(&mut self) -> std::io::Result<()> {
        Ok(())
    }

    fn take_stood_still(&mut self) -> bool {
        self.replayer.take_stood_still()
    }

    fn shared_library_info_address(&self) -> Option<u64> {
        self.rendezvous.as_ref().map(|_| RENDEZVOUS_PAGE)
    }

    fn take_stop_note(&mut self) -> Option<StopNote> {
        self.stop_note.take()
    }

    /// The recorded process's `/proc` files: its mappings at the position
    /// (a full-state recording says them; GDB's `info proc mappings`), and
    /// no other: the recorded pid is another process's here, or none's.
    fn target_file(&self, path: &[u8]) -> crate::inferior::host_files::TargetFile {
        use crate::inferior::host_files::TargetFile;
        let path = String::from_utf8_lossy(path);
        let Some(rest) = path.strip_prefix("/proc/") else { return TargetFile::Host };
        let (process, file) = rest.split_once('/').unwrap_or((rest, ""));
        if process != self.pid.to_string() && process != "self" {
            return TargetFile::Host;
        }
        match file {
            "maps" => TargetFile::Text(proc_maps(&self.mappings_here()).into_bytes()),
            _ => TargetFile::Missing,
        }
    }

    fn standing_signal(&self) -> Option<(u64, GdbSignal)> {
        let end = History::end(&self.timeline);
        let signal = fatal_signal(self.exit).filter(|_| self.fatal_signal_reported && self.position() == end)?;
        Some((self.tid_at(end).get() as u64, signal))
    }

    fn has_thread(&self, tid: u64) -> bool {
        self.timeline.thread_of(tid).is_some()
    }

    fn any_thread(&self) -> Option<u64> {
        self.timeline.at(self.position()).map(|i| i.tid)
    }

    fn stop_events(&self) -> Option<BorrowedFd<'_>> {
        None
    }

    fn poll_stop(&mut self) -> Option<StopReason> {
        self.stop.take()
    }

    fn interrupt(&mut self) {
        if self.stop.is_none() {
            self.stop = Some(StopReason::SignalWithThread { tid: self.tid_at(self.position()), signal: GdbSignal::SIGINT });
        }
    }

    fn memory_region(&self, address: u64) -> MemoryRegion {
        if let Some(range) = self.scratch.allocation(address) {
            return MemoryRegion::Mapped { start: range.start, end: range.end, readable: true, writable: true, executable: false, name: String::new() };
        }
        MemoryRegion::of(&self.mappings_here(), address)
    }

    fn kill(&mut self) {
        self.killed = true;
    }

    fn detach(&mut self) {}

    /// The trace is recorded already: starting it again (LLDB's `process
    /// trace start`, GDB's `record btrace pt`) serves it.
    fn trace_start(&mut self, request: &crate::inferior::TraceStart) -> Result<(), InferiorError> {
        let () = match &request.threads {
            Some(threads) => match threads.iter().find(|&&t| !self.traces.iter().any(|(tid, _)| *tid == t)) {
                Some(missing) => Err(InferiorError::InvalidRequest(format!("Thread {missing} was not recorded in the saved trace"))),
                None => Ok(()),
            },
            None => Ok(()),
        }?;
        if self.trace_served {
            return Err(InferiorError::Refused("Process currently traced. Stop process tracing first".into()));
        }
        self.trace_served = true;
        Ok(())
    }

    /// The saved trace is no longer offered (it stays replayable).
    fn trace_stop(&mut self, _threads: Option<&[u64]>) -> Result<(), InferiorError> {
        self.trace_served = false;
        Ok(())
    }

    fn trace_state(&self) -> Result<crate::inferior::TraceState, InferiorError> {
        let served = self.traces.iter().filter(|_| self.trace_served);
        Ok(crate::inferior::TraceState {
            threads: served.map(|(tid, trace)| (*tid, trace.len())).collect(),
            tsc_conversion: self.tsc_conversion,
        })
    }

    fn trace_data(&mut self, tid: u64) -> Result<Vec<u8>, InferiorError> {
        self.traces.iter().find(|(t, _)| *t == tid).map(|(_, trace)| trace.clone()).ok_or_else(|| InferiorError::InvalidRequest(format!("Thread {tid} not traced")))
    }

    fn trace_cpu(&self) -> crate::inferior::CpuInfo {
        self.cpu.clone()
    }

    fn register_available(&mut self, tid: u64, n: usize) -> bool {
        if let Some(regs) = self.state.as_ref().and_then(|state| state.registers_at(&self.timeline, tid, self.position())) {
            return regs.is_available(n);
        }
        self.timeline.thread_of(tid).and_then(|t| self.timeline.next_pc_of_thread(self.position(), t)).is_some() && n == 16
    }

    fn support_history(&mut self) -> Option<&mut dyn HistoryOps> {
        Some(self)
    }

    /// On a full-state replay, where nothing of the recording is.
    fn allocate(&mut self, size: u64) -> Option<u64> {
        let state = self.state.as_ref()?;
        self.scratch.allocate(size, |range| !state.touched(range))
    }

    fn deallocate(&mut self, address: u64) -> Option<bool> {
        self.state.as_ref()?;
        Some(self.scratch.deallocate(address))
    }
}

impl MultiThreadBase for SavedTrace {
    fn read_registers(&mut self, regs: &mut Regs, thread: Tid) -> TargetResult<(), Self> {
        let index = self.timeline.thread_of(tid(thread)).ok_or(TargetError::NonFatal)?;
        if let Some((_, diversion)) = self.diversion.as_ref().filter(|(diverted, _)| *diverted == tid(thread)) {
            *regs = diversion.registers().map_err(|e| {
                tracing::warn!("{e}");
                TargetError::NonFatal
            })?;
            return Ok(());
        }
        if let Some(known) = self.state.as_ref().and_then(|state| state.registers_at(&self.timeline, tid(thread), self.position())) {
            *regs = known;
            return Ok(());
        }
        *regs = match self.timeline.next_pc_of_thread(self.position(), index) {
            Some(pc) => Regs::only_pc(pc),
            // It runs no more in the history: where it stands is not known.
            None => Regs { unavailable: u128::MAX, ..Regs::default() },
        };
        Ok(())
    }

    /// On a full-state replay, registers other than the recorded ones
    /// divert the thread: code run from here runs in a stand-in process
    /// (see [`Diversion`]).
    fn write_registers(&mut self, regs: &Regs, thread: Tid) -> TargetResult<(), Self> {
        let (position, tid) = (self.position(), tid(thread));
        let SavedTrace { state: Some(state), timeline, scratch, diversion, modules, .. } = self else { return Err(TargetError::NonFatal) };
        match diversion {
            Some((diverted, stand_in)) if *diverted == tid => stand_in.set_registers(regs).map_err(|e| {
                tracing::warn!("{e}");
                TargetError::NonFatal
            }),
            Some(_) => Err(TargetError::NonFatal),
            None => {
                let recorded = state.registers_at(timeline, tid, position).ok_or(TargetError::NonFatal)?;
                if same_registers(regs, &recorded) {
                    return Ok(());
                }
                let program = modules.first().ok_or(TargetError::NonFatal)?;
                let mut source = |address: u64, buf: &mut [u8]| past_bytes(state, timeline, scratch, position, address, buf);
                match Diversion::start(Path::new(&program.path), regs, &mut source) {
                    Ok(stand_in) => {
                        tracing::debug!(tid, position, "diversion from the recorded past begins");
                        *diversion = Some((tid, stand_in));
                        Ok(())
                    }
                    Err(e) => {
                        tracing::warn!("code cannot run in the past here: {e}");
                        Err(TargetError::NonFatal)
                    }
                }
            }
        }
    }

    fn support_single_register_access(&mut self) -> Option<SingleRegisterAccessOps<'_, Tid, Self>> {
        Some(self)
    }

    fn read_addrs(&mut self, start: u64, data: &mut [u8], _thread: Tid) -> TargetResult<usize, Self> {
        // Only what cannot have changed, and the dynamic linker's rendezvous.
        if let Some(bytes) = self.rendezvous.as_ref().filter(|page| RENDEZVOUS_PAGE <= start && start < RENDEZVOUS_PAGE + page.len() as u64) {
            let from = (start - RENDEZVOUS_PAGE) as usize;
            let n = data.len().min(bytes.len() - from);
            data[..n].copy_from_slice(&bytes[from..from + n]);
            return Ok(n);
        }
        if let Some(n) = self.diversion.as_ref().and_then(|(_, d)| d.read(start, data)) {
            return Ok(n);
        }
        if let Some(state) = &self.state {
            let n = past_bytes(state, &self.timeline, &self.scratch, self.position(), start, data);
            return if n == 0 { Err(TargetError::NonFatal) } else { Ok(n) };
        }
        self.unchanging_bytes(start, data).ok_or(TargetError::NonFatal)
    }

    /// On a full-state replay: into the debugger's memory, or over the
    /// program's past until the next move.
    fn write_addrs(&mut self, start: u64, data: &[u8], _thread: Tid) -> TargetResult<(), Self> {
        let position = self.position();
        let SavedTrace { state: Some(state), timeline, scratch, diversion, .. } = self else { return Err(TargetError::NonFatal) };
        scratch.write(start, data);
        if let Some((_, diversion)) = diversion {
            diversion.write(start, data, &mut |address, buf| past_bytes(state, timeline, scratch, position, address, buf));
        }
        Ok(())
    }

    /// The threads as they were at the position: begun, and not ended.
    fn list_active_threads(&mut self, register: &mut dyn FnMut(Tid)) -> Result<(), Self::Error> {
        let position = self.position();
        for (index, thread) in self.timeline.threads().iter().enumerate() {
            if self.thread_exists_at(index, position) {
                register(Tid::new(thread.tid as usize).ok_or(InferiorError::InvalidRequest("thread 0".into()))?);
            }
        }
        Ok(())
    }

    fn support_resume(&mut self) -> Option<MultiThreadResumeOps<'_, Self>> {
        Some(self)
    }
}

impl SingleRegisterAccess<Tid> for SavedTrace {
    fn read_register(&mut self, thread: Tid, reg: RegNumber, buf: &mut [u8]) -> TargetResult<usize, Self> {
        let mut regs = Regs::default();
        self.read_registers(&mut regs, thread)?;
        if !regs.is_available(reg.0) {
            return Ok(0); // `xx…`
        }
        let bytes = regs.register_bytes(reg.0).ok_or(TargetError::NonFatal)?;
        Ok(copy_window(&bytes, 0, buf.len(), buf))
    }

    fn write_register(&mut self, thread: Tid, reg: RegNumber, value: &[u8]) -> TargetResult<(), Self> {
        let mut regs = Regs::default();
        self.read_registers(&mut regs, thread)?;
        regs.set_register(reg.0, value).map_err(|()| TargetError::NonFatal)?;
        self.write_registers(&regs, thread)
    }
}

impl MultiThreadResume for SavedTrace {
    fn resume(&mut self) -> Result<(), Self::Error> {
        if let Some(stop) = self.run_diversion() {
            self.stop = Some(stop);
            return Ok(());
        }
        let stop = match crate::inferior::replay::take_armed(self, self.step.is_some()) {
            Some(stop) => stop,
            None => {
                let (step, exit) = (self.step, self.exit);
                let mut note = None;
                let reported = std::mem::take(&mut self.fatal_signal_reported);
                let stop = self.replay_history(|replayer, history, breakpoints| {
                    let from = replayer.position();
                    let Forward::Stopped(stop) = replayer.run_forwards(history, breakpoints, step) else {
                        // Running into the instruction a fatal signal
                        // interrupted: that signal's stop, as rr reports it
                        // (continued, it ends the program).
                        if let Some(signal) = fatal_signal(exit).filter(|_| !(reported && from == history.end())) {
                            note = Some(StopNote::Undeliverable(crate::signals::stop_words(signal)));
                            return StopReason::SignalWithThread { tid: super::replay::tid(history.thread_at(history.end())), signal };
                        }
                        // Past the last instruction, a continue ends the
                        // program as it ended when recorded (a step stops
                        // at the end; from the end, where nothing is left
                        // to step, a step ends it too: GDB steps off a
                        // breakpoint there before it continues).
                        return match exit.filter(|_| step.is_none() || from == history.end()) {
                            Some(exit) => exit,
                            None => boundary(history, replayer.position(), ReplayLogPosition::End),
                        };
                    };
                    stop
                })
                .expect("a saved trace always has its history");
                if let Some(note) = note {
                    self.fatal_signal_reported = true;
                    self.note_stop(note);
                }
                stop
            }
        };
        self.stop = Some(stop);
        Ok(())
    }

    fn clear_resume_actions(&mut self) -> Result<(), Self::Error> {
        self.step = None;
        Ok(())
    }

    fn set_resume_action_continue(&mut self, _thread: Tid, _signal: Option<GdbSignal>) -> Result<(), Self::Error> {
        Ok(())
    }

    fn support_single_step(&mut self) -> Option<MultiThreadSingleStepOps<'_, Self>> {
        Some(self)
    }

    fn support_scheduler_locking(&mut self) -> Option<MultiThreadSchedulerLockingOps<'_, Self>> {
        Some(self)
    }

    fn support_reverse_cont(&mut self) -> Option<ReverseContOps<'_, Tid, Self>> {
        Some(self)
    }

    fn support_reverse_step(&mut self) -> Option<ReverseStepOps<'_, Tid, Self>> {
        Some(self)
    }
}

impl MultiThreadSingleStep for SavedTrace {
    fn set_resume_action_step(&mut self, thread: Tid, _signal: Option<GdbSignal>) -> Result<(), Self::Error> {
        self.step = Some(tid(thread));
        Ok(())
    }
}

impl MultiThreadSchedulerLocking for SavedTrace {
    fn set_resume_action_scheduler_lock(&mut self) -> Result<(), Self::Error> {
        Ok(())
    }
}

impl TimeTravel for SavedTrace {
    fn replay_history<R>(&mut self, action: impl FnOnce(&mut Replayer, &dyn History, &Breakpoints) -> R) -> Option<R> {
        self.scratch.moved();
        if self.diversion.take().is_some() {
            tracing::debug!("diversion from the recorded past ends");
        }
        match &self.state {
            Some(state) => Some(action(&mut self.replayer, &FullStateHistory { timeline: &self.timeline, state }, &self.breakpoints)),
            None => Some(action(&mut self.replayer, &self.timeline, &self.breakpoints)),
        }
    }

    fn note_stop(&mut self, note: StopNote) {
        self.stop_note = Some(note);
    }

    fn report_stop(&mut self, stop: StopReason) {
        self.stop = Some(stop);
    }
}

crate::inferior::replay::offer_reverse_execution!(SavedTrace);

impl SwBreakpoint for SavedTrace {
    fn add_sw_breakpoint(&mut self, addr: u64, _kind: usize) -> TargetResult<bool, Self> {
        self.breakpoints.software.insert(addr);
        Ok(true)
    }

    fn remove_sw_breakpoint(&mut self, addr: u64, _kind: usize) -> TargetResult<bool, Self> {
        self.breakpoints.software.remove(&addr);
        Ok(true)
    }
}

impl HwBreakpoint for SavedTrace {
    fn add_hw_breakpoint(&mut self, addr: u64, _kind: usize) -> TargetResult<bool, Self> {
        self.breakpoints.hardware.insert(addr);
        Ok(true)
    }

    fn remove_hw_breakpoint(&mut self, addr: u64, _kind: usize) -> TargetResult<bool, Self> {
        self.breakpoints.hardware.remove(&addr);
        Ok(true)
    }
}

impl HwWatchpoint for SavedTrace {
    /// A trace of control flow alone has no data: a watchpoint could never
    /// trigger, and is refused. A recording with full state knows every
    /// write and read: up to four ranges are watched, as on the processor.
    fn add_hw_watchpoint(&mut self, addr: u64, len: u64, kind: WatchKind) -> TargetResult<bool, Self> {
        if self.state.is_none() || len == 0 || self.breakpoints.watches.len() >= DEBUG_REGISTERS {
            return Ok(false);
        }
        self.breakpoints.watches.push((addr..addr.saturating_add(len), kind));
        Ok(true)
    }

    fn remove_hw_watchpoint(&mut self, addr: u64, len: u64, kind: WatchKind) -> TargetResult<bool, Self> {
        let watched = addr..addr.saturating_add(len);
        match self.breakpoints.watches.iter().position(|(range, k)| *range == watched && *k == kind) {
            Some(index) => {
                self.breakpoints.watches.remove(index);
                Ok(true)
            }
            None => Ok(self.state.is_none()),
        }
    }
}

impl ExecFile for SavedTrace {
    fn get_exec_file(&self, _pid: Option<gdbstub::common::Pid>, offset: u64, length: usize, buf: &mut [u8]) -> TargetResult<usize, Self> {
        let path = self.modules.first().map_or("", |m| m.path.as_str());
        Ok(copy_window(path.as_bytes(), offset, length, buf))
    }
}

impl Auxv for SavedTrace {
    fn get_auxv(&self, offset: u64, length: usize, buf: &mut [u8]) -> TargetResult<usize, Self> {
        Ok(copy_window(&self.auxv, offset, length, buf))
    }
}

/// A full-state replay's memory at a position, as the library list reads
/// it.
struct RecordedMemory<'a> {
    state: &'a RecordedState,
    timeline: &'a Timeline,
    position: u64,
}

impl ReadMemory for RecordedMemory<'_> {
    fn read(&self, address: u64, buf: &mut [u8]) -> bool {
        self.state.memory_at(self.timeline, self.position, address, buf) == buf.len()
    }
}

impl SavedTrace {
    /// The libraries loaded at the position: on a full-state replay, the
    /// dynamic linker's own link map in the recorded memory (each named by
    /// the bundle's copy of its file); else, or before the linker
    /// published one, every library the bundle holds.
    fn libraries_now(&self) -> String {
        let position = self.position();
        if let Some((_, list)) = self.libraries_at.borrow().as_ref().filter(|(at, _)| *at == position) {
            return list.clone();
        }
        let Some(state) = &self.state else { return self.libraries.clone() };
        let memory = RecordedMemory { state, timeline: &self.timeline, position };
        let Ok(mut entries) = rendezvous_address(&self.auxv, &memory).and_then(|r_debug| link_map(r_debug, &memory)) else { return self.libraries.clone() };
        for entry in entries.iter_mut().filter(|e| !e.name.is_empty()) {
            if let Some(module) = self.modules.iter().skip(1).find(|m| m.bias == entry.base && m.dynamic == Some(entry.dynamic)) {
                entry.name = module.path.clone().into_bytes();
            }
        }
        let list = library_list_xml(&entries);
        *self.libraries_at.borrow_mut() = Some((position, list.clone()));
        list
    }
}

impl LibrariesSvr4 for SavedTrace {
    fn get_libraries_svr4(&self, offset: u64, length: usize, buf: &mut [u8]) -> TargetResult<usize, Self> {
        Ok(copy_window(self.libraries_now().as_bytes(), offset, length, buf))
    }
}

crate::inferior::offer_fixed_extended_mode!(SavedTrace);
