//! What a recording is, whatever recorded it (the ptrace recorder, Intel
//! PT, Valgrind): each program image's threads and their Intel PT, its
//! modules, a full-state stream if one was kept, and how the program
//! ended. The bundle writer writes it.

use std::time::Duration;

use nix::sys::signal::Signal;

use crate::process::LoadedModule;

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
    /// Its Intel PT stream (after what `trace_file` holds).
    pub trace: Vec<u8>,
    /// The stream's beginning, when a long recording stored it as it went
    /// (the bundle writer moves it into the bundle), and its length.
    pub trace_file: Option<(std::path::PathBuf, usize)>,
    /// Instructions recorded.
    pub instructions: u64,
    /// Every executed instruction's address, when asked for.
    pub instruction_log: Option<Vec<u64>>,
}

impl ThreadRecording {
    /// Bytes of its trace (the stored beginning included).
    pub fn trace_len(&self) -> usize {
        self.trace_file.as_ref().map_or(0, |(_, len)| *len) + self.trace.len()
    }
}

/// What the process ran between two `execve`s: one program image, its
/// threads and its modules.
#[derive(Debug, Clone, Default)]
pub struct ImageRecording {
    /// Threads in creation order (each trace ends where the image ended).
    pub threads: Vec<ThreadRecording>,
    /// Modules seen mapped while this image ran.
    pub modules: Vec<LoadedModule>,
    /// Every register and memory change, when recorded with full state.
    pub full_state: Option<FullStateStream>,
    /// The files mapped that are not modules (data files), for the full
    /// state's file mappings.
    pub mapped_files: Vec<String>,
}

/// A full-state stream ([`retrace_decoder::full_state`]): its beginning
/// stored as it grew (the bundle writer moves it into the bundle), then
/// the rest.
#[derive(Debug, Clone, Default)]
pub struct FullStateStream {
    /// Where the beginning is stored, and its length.
    pub stored: Option<(std::path::PathBuf, usize)>,
    /// The bytes after it.
    pub bytes: Vec<u8>,
}

/// A finished recording.
#[derive(Debug, Clone)]
pub struct Recording {
    /// Process id.
    pub pid: u32,
    /// The program images the process ran, oldest first: one, plus one per
    /// successful `execve` (a thread's id may appear in several).
    pub images: Vec<ImageRecording>,
    /// How it ended.
    pub outcome: Outcome,
    /// Wall time of the recording.
    pub elapsed: Duration,
    /// Instructions whose bytes could not be read or decoded (recorded as
    /// tracing gaps).
    pub undecodable: u64,
    /// How the TSC values in the trace convert to perf-clock nanoseconds.
    pub tsc_conversion: Option<crate::perf_clock::TscConversion>,
    /// What the user should know about the recording (threads not traced,
    /// smaller trace buffers), one sentence each.
    pub warnings: Vec<String>,
}

impl Recording {
    /// Every thread of every image, in order.
    pub fn threads(&self) -> impl Iterator<Item = &ThreadRecording> {
        self.images.iter().flat_map(|image| &image.threads)
    }

    /// Instructions in all threads.
    pub fn instructions(&self) -> u64 {
        self.threads().map(|t| t.instructions).sum()
    }

    /// Bytes of trace in all threads.
    pub fn trace_bytes(&self) -> usize {
        self.threads().map(ThreadRecording::trace_len).sum()
    }
}

