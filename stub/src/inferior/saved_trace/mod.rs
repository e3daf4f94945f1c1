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
use std::path::PathBuf;
use std::sync::Arc;

use gdbstub::common::{Signal as GdbSignal, Tid};
use retrace_collector::process::Mapping;

use crate::inferior::diversion::Diversion;
use crate::inferior::recorded_state::RecordedState;
use crate::inferior::replay::{ReplaySession, TimeTravel};
use crate::inferior::scratch::Scratch;
use crate::inferior::timeline::Timeline;
use crate::inferior::{HistoryOps, Inferior, MemoryRegion, Movement, StopNote, StopReason};

mod breakpoints;
mod history;
mod load;
mod memory;
mod resume;
mod trace;


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

/// A saved trace, served as a process stopped somewhere in its history.
#[derive(Debug)]
pub struct SavedTrace {
    pid: u32,
    bundle: PathBuf,
    timeline: Timeline,
    /// Each thread's raw trace, served to clients that decode it themselves
    /// (LLDB's `thread trace dump`, GDB's `record instruction-history`).
    traces: Vec<(u64, std::sync::Arc<[u8]>)>,
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
    /// Where the program stands in the timeline, its breakpoints, the
    /// stop to report.
    session: ReplaySession,
    /// The thread the last resume actions single-step, if one steps.
    step: Option<u64>,
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

/// The pages of a read-only segment, mapped from a module file.
#[derive(Debug)]
struct ReadOnlyPages {
    mapping: Mapping,
    file: Arc<[u8]>,
}

impl SavedTrace {
    /// The timeline being replayed.
    pub fn timeline(&self) -> &Timeline {
        &self.timeline
    }

    /// Stands the program at its first instruction (before a client
    /// connects): it runs forwards from there as it ran.
    pub fn go_to_start(&mut self) {
        self.session.stand_at(crate::inferior::replay::Position::START);
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
        self.session.past().map_or(self.timeline.end(), |at| at.index())
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
}

/// The signal that killed the program, for a recording that ended so.
fn fatal_signal(exit: Option<StopReason>) -> Option<GdbSignal> {
    match exit? {
        StopReason::Terminated(signal) => Some(signal),
        _ => None,
    }
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

/// Reads what cannot have changed (a read-only segment of `pages`, from
/// the file); `None` elsewhere.
fn unchanging_bytes(pages: &[ReadOnlyPages], start: u64, data: &mut [u8]) -> Option<usize> {
    let pages = pages.iter().find(|p| p.mapping.start <= start && start < p.mapping.end)?;
    let (range, file) = (&pages.mapping, &pages.file);
    let offset = usize::try_from(range.offset + (start - range.start)).ok()?;
    // Past the file's end a page reads as zeros.
    let n = data.len().min((range.end - start) as usize);
    let from_file = n.min(file.len().saturating_sub(offset));
    data[..from_file].copy_from_slice(&file[offset..offset + from_file]);
    data[from_file..n].fill(0);
    Some(n)
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
        self.session.take_stood_still()
    }

    fn shared_library_info_address(&self) -> Option<u64> {
        self.rendezvous.as_ref().map(|_| RENDEZVOUS_PAGE)
    }

    fn take_stop_note(&mut self) -> Option<StopNote> {
        self.session.take_note()
    }

    /// The files of the recorded machine a client asks for (`vFile:open`):
    /// a module by the path it had there, from the bundle's copy; the
    /// bundle's own files and separate debug files
    /// (`/usr/lib/debug/.build-id/`, as the decoder looks for them) as they
    /// are here; the recorded process's `/proc` files: its mappings at the
    /// position (a full-state recording says them; GDB's `info proc
    /// mappings`), and no other (the recorded pid is another process's
    /// here, or none's). Nothing else of this machine: the bundle names
    /// the paths a client asks for, and a bundle is untrusted input.
    fn target_file(&self, path: &[u8]) -> crate::inferior::host_files::TargetFile {
        use crate::inferior::host_files::TargetFile;
        let path = String::from_utf8_lossy(path);
        if let Some(module) = self.modules.iter().find(|m| m.system_path == path) {
            return std::fs::read(&module.path).map_or(TargetFile::Missing, TargetFile::Text);
        }
        let inside = |folder: &std::path::Path| {
            let real = std::path::Path::new(&*path).canonicalize();
            folder.canonicalize().is_ok_and(|folder| real.is_ok_and(|real| real.starts_with(folder)))
        };
        let bundle_dir = self.bundle.parent().unwrap_or(std::path::Path::new("."));
        if inside(bundle_dir) || inside(std::path::Path::new("/usr/lib/debug/.build-id")) {
            return TargetFile::Host;
        }
        let Some(rest) = path.strip_prefix("/proc/") else { return TargetFile::Missing };
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
        let end = self.timeline.end();
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
        self.session.take_stop()
    }

    fn interrupt(&mut self) {
        let tid = self.tid_at(self.position());
        self.session.report_unless_reported(|| StopReason::SignalWithThread { tid, signal: GdbSignal::SIGINT });
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

    fn support_tracing(&mut self) -> Option<&mut dyn crate::inferior::TraceOps> {
        Some(self)
    }

    fn register_available(&mut self, tid: u64, n: usize) -> bool {
        if let Some(regs) = self.state.as_ref().and_then(|state| state.registers_at(&self.timeline, tid, self.position())) {
            return regs.is_available(n);
        }
        self.timeline.thread_of(tid).and_then(|t| self.timeline.next_pc_of_thread(self.position(), t)).is_some() && n == 16
    }

    fn support_history(&mut self) -> Option<Box<dyn HistoryOps + '_>> {
        self.replay().map(|replay| Box::new(replay) as Box<dyn HistoryOps>)
    }

    fn history_move_refused(&self, movement: Movement) -> Option<&'static str> {
        self.session.refusal(movement, Some(&self.history()))
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

crate::inferior::offer_fixed_extended_mode!(SavedTrace);
