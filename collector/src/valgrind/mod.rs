//! Recording under Valgrind: the program runs on Valgrind's JIT with
//! retrace's tool (`collector/valgrind/retrace.c`, built against the
//! installed Valgrind by `build.rs`), which logs each superblock it
//! translates (its guest instructions and their bytes) and, as the program
//! runs, each superblock entered and each side exit taken. [`LogConverter`]
//! turns that log into the same Intel PT streams the ptrace backend writes
//! ([`ThreadPtWriter`]): every consumer decodes one format.
//!
//! The log (little-endian; after the magic `RTVGLOG2`), one record per tag:
//!
//! | tag | fields | meaning |
//! |---|---|---|
//! | `B` | u32 id, u64 entry, u64 next, u16 n, n × (u64 address, u8 length, bytes), u16 m, m × (u16 index, u64 to) | a translated superblock: its instructions in execution order, where it goes when it runs to its end if that is one address (else 0), and its side exits: at its instruction `index`, for `to` (0: not one address) |
//! | `E` | u32 id, u8 way | the current thread entered superblock `id` and left it by `way`: 0, its end (unless an `X` follows), k, its side exit k − 1 |
//! | 0x80 \| way | — | it entered the superblock at the address the last one went to (its `next`, or the side exit it took), and left it by `way` (0–127): one byte for most superblocks run |
//! | `X` | u16 exit | it left by its side exit `exit` (when the entry's byte could not say so) |
//! | `G` | — | code that is not the program's ran (Valgrind's own text) |
//! | `T` | u32 number, u32 tid | thread `number` (numbered by the tool: Valgrind reuses its slots) runs from now on |
//! | `S` | u32 signal, u64 ip | a signal is delivered before the instruction at `ip` |
//! | `Q` | u32 number, u64 ip | the thread ended at `ip` (after its exit system call, or where a fatal signal stopped it) |
//! | `M` | u64 start, u64 length, u64 offset, u8 prot, u16 n, n bytes of path | a file mapped into the program |
//! | `L` | — | the instruction limit was reached; the tool ended the program |
//! | `F` | u64 ip | the program ends with the running thread at `ip` (after its exit system call, or at the instruction a fatal signal stopped) |
//! | `P` | u32 pid | the process the log is of (right after the magic) |
//!
//! With `--retrace-full=yes` (full state) the tool also logs what the
//! program changed, which [`LogConverter`] writes as a full-state stream
//! ([`retrace_decoder::full_state`]):
//!
//! | tag | fields | meaning |
//! |---|---|---|
//! | `R` | u16 index, u8 n, n × (u8 piece, u64 value) | instruction `index` of the superblock entered last changed these register pieces |
//! | `r` | u32 number, u8 n, n × (u8 piece, u64 value) | thread `number`'s registers changed other than by an instruction |
//! | `W` | u16 index, u64 address, u16 size, bytes | instruction `index` wrote memory (the bytes after) |
//! | `D` | u16 index, u64 address, u16 size | instruction `index` read memory |
//! | `K` | u32 number, u64 address, u64 size, bytes | memory written other than by an instruction (thread 0: at the start) |
//! | `Z` | u64 start, u64 length | memory mapped zero-filled |
//! | `U` | u64 start, u64 length | memory unmapped |
//! | `A` | u64 start, u64 length, u8 prot | memory mapped or its protection changed: readable 1, writable 2, executable 4; the heap 8, the main stack 16 (neither: what it was); 32: mapped only as touched, down from its top (the main stack's reserve, which Valgrind maps on a fault) |
//! | `C` | u64 from, u64 to, u64 length | memory moved |
//!
//! What Valgrind runs that the program does not (its `freeres` at exit,
//! its replacement of the vsyscall page) is either switched off or logged as
//! a gap; a REP string instruction, which Valgrind runs as one superblock
//! per iteration (or up to eight in one, unrolled), counts once, as Intel
//! PT counts it, and not where a signal interrupts it part-way (it runs on
//! after the handler). The tool answers Valgrind's gdbserver's `monitor
//! retrace last-write` (the program's last write: address and size), which
//! the tests use to compare a replay with Valgrind's own view of a run.


use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::pt_writer::DEFAULT_PSB_PERIOD;
use crate::recording::{Outcome, Recording};

mod convert;
mod log;

pub use convert::{convert_log, convert_stream, ConvertedLog, LogConverter};
pub use log::{log_records, parse_record, LogError, LogRecord, Parsed, RegisterChanges, LOG_MAGIC};

/// One connection's log: the process it names (when it is the program's)
/// and its conversion.
type ImageLog = (Option<u32>, ConvertedLog);

/// Why recording under Valgrind failed.
#[derive(Debug, thiserror::Error)]
pub enum ValgrindError {
    /// Valgrind, or the tool, is not here.
    #[error("{0}")]
    Unavailable(String),
    /// Running it failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The error.
        source: std::io::Error,
    },
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> ValgrindError {
    let what = what.into();
    move |source| ValgrindError::Io { what, source }
}

#[cfg(valgrind_tool)]
static TOOL: &[u8] = include_bytes!(env!("RETRACE_VALGRIND_TOOL"));
#[cfg(not(valgrind_tool))]
static TOOL: &[u8] = &[];

/// Where the installed Valgrind keeps its tools and preload libraries.
fn valgrind_libexec() -> Option<PathBuf> {
    ["/usr/libexec/valgrind", "/usr/lib/x86_64-linux-gnu/valgrind", "/usr/lib/valgrind", "/usr/local/libexec/valgrind"]
        .into_iter()
        .map(PathBuf::from)
        .find(|dir| dir.join("none-amd64-linux").exists())
}

fn valgrind_binary() -> Option<PathBuf> {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
        .map(|dir| dir.join("valgrind"))
        .find(|path| path.is_file())
}

/// Whether `--backend valgrind` can run here, or why not (one sentence).
pub fn availability() -> Result<(), String> {
    if TOOL.is_empty() {
        return Err("retrace was built without Valgrind's headers (apt-get install valgrind, then rebuild retrace)".into());
    }
    if valgrind_binary().is_none() || valgrind_libexec().is_none() {
        return Err("Valgrind is not installed (apt-get install valgrind)".into());
    }
    Ok(())
}

/// The options retrace runs Valgrind with (before the program): quiet (the
/// program's stderr is its own), no `freeres` at exit (the program never
/// runs it natively), exec'd programs followed. Tests run their reference
/// tools with the same.
pub const VALGRIND_OPTIONS: [&str; 4] = ["-q", "--run-libc-freeres=no", "--run-cxx-freeres=no", "--trace-children=yes"];

/// Names the `VALGRIND_LIB` folder retrace prepares (else one in the
/// temporary directory per tool build); retrace removes it from the
/// program's environment. Valgrind shows the program that folder (in
/// `VALGRIND_LIB` and `LD_PRELOAD`), so a reference run with another tool
/// from the same folder sees the same environment.
pub const VALGRIND_LIB_VARIABLE: &str = "RETRACE_VALGRIND_LIB";

/// A `VALGRIND_LIB` folder: the installed Valgrind's files and retrace's
/// tool beside them (shared by runs; written again when the tool changes).
pub fn tool_folder() -> Result<PathBuf, ValgrindError> {
    availability().map_err(ValgrindError::Unavailable)?;
    let libexec = valgrind_libexec().expect("checked");
    let stamp = TOOL.iter().fold(0xcbf29ce484222325u64, |h, b| (h ^ *b as u64).wrapping_mul(0x100000001b3));
    let folder = match std::env::var_os(VALGRIND_LIB_VARIABLE) {
        Some(folder) => PathBuf::from(folder),
        None => std::env::temp_dir().join(format!("retrace-valgrind-{}-{stamp:016x}", nix::unistd::getuid())),
    };
    let tool = folder.join("retrace-amd64-linux");
    // The same bytes, not just the same size (a rebuilt tool can keep it).
    if tool.metadata().is_ok_and(|m| m.len() == TOOL.len() as u64) && std::fs::read(&tool).is_ok_and(|bytes| bytes == TOOL) {
        return Ok(folder);
    }
    std::fs::create_dir_all(&folder).map_err(io(format!("creating {}", folder.display())))?;
    for entry in std::fs::read_dir(&libexec).map_err(io(format!("reading {}", libexec.display())))? {
        let entry = entry.map_err(io("reading Valgrind's folder"))?;
        let link = folder.join(entry.file_name());
        if !link.exists() {
            let _ = std::os::unix::fs::symlink(entry.path(), &link);
        }
    }
    // Written aside, then renamed: runs side by side never see half a tool.
    let partial = folder.join(format!(".retrace-amd64-linux.{}", std::process::id()));
    std::fs::write(&partial, TOOL).map_err(io("writing retrace's Valgrind tool"))?;
    std::fs::set_permissions(&partial, std::os::unix::fs::PermissionsExt::from_mode(0o755)).map_err(io("making the tool executable"))?;
    std::fs::rename(&partial, &tool).map_err(io("placing retrace's Valgrind tool"))?;
    Ok(folder)
}

/// A thread's trace in memory beyond which it is stored (with a spill
/// folder).
pub const SPILL_BYTES: usize = 8 << 20;

/// Options for [`record`].
#[derive(Clone)]
pub struct ValgrindOptions {
    /// Bytes between PSBs.
    pub psb_period: usize,
    /// Keep every executed instruction address per thread (for tests).
    pub keep_instruction_log: bool,
    /// End the program after this many instructions (all threads of an
    /// image together).
    pub max_instructions: Option<u64>,
    /// Where threads' traces are stored as they grow (the bundle writer
    /// moves them into the bundle); without it they stay in memory.
    pub spill_folder: Option<PathBuf>,
    /// Set from outside (Ctrl-C) to end the recording: the program is
    /// interrupted and the bundle holds what ran.
    pub stop: Arc<AtomicBool>,
    /// Called about five times a second with the instructions converted so
    /// far (all images).
    pub progress: Option<Arc<dyn Fn(u64) + Send + Sync>>,
    /// Also record every register and memory change (each image's
    /// [`crate::recording::ImageRecording::full_state`]).
    pub full_state: bool,
}

impl std::fmt::Debug for ValgrindOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ValgrindOptions").field("max_instructions", &self.max_instructions).field("spill_folder", &self.spill_folder).finish_non_exhaustive()
    }
}

impl Default for ValgrindOptions {
    fn default() -> Self {
        ValgrindOptions { psb_period: DEFAULT_PSB_PERIOD, keep_instruction_log: false, max_instructions: None, spill_folder: None, stop: Arc::new(AtomicBool::new(false)), progress: None, full_state: false }
    }
}

/// Runs `program` with `args` under Valgrind with retrace's tool (its
/// stdin, stdout and stderr are the caller's) and converts the log of each
/// program image it ran (one per `execve`) into a [`Recording`].
pub fn record(program: &OsStr, args: &[OsString], options: &ValgrindOptions) -> Result<Recording, ValgrindError> {
    let folder = tool_folder()?;
    let valgrind = valgrind_binary().expect("checked by tool_folder");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(io("listening for the tool"))?;
    let address = listener.local_addr().map_err(io("listening for the tool"))?;
    listener.set_nonblocking(true).map_err(io("listening for the tool"))?;
    let done = Arc::new(AtomicBool::new(false));
    let main_pid = Arc::new(std::sync::OnceLock::<u32>::new());
    let converted = options.progress.as_ref().map(|_| Arc::new(std::sync::atomic::AtomicU64::new(0)));
    // Each connection is one program image's log (or a forked child's,
    // drained): converted on a thread of its own as the program runs.
    let acceptor = {
        let (done, main_pid, options, converted) = (done.clone(), main_pid.clone(), options.clone(), converted.clone());
        std::thread::spawn(move || -> Vec<std::thread::JoinHandle<std::io::Result<ImageLog>>> {
            let mut handlers = Vec::new();
            loop {
                match listener.accept() {
                    Ok((mut stream, _)) => {
                        let _ = stream.set_nonblocking(false);
                        let (main_pid, options, converted) = (main_pid.clone(), options.clone(), converted.clone());
                        handlers.push(std::thread::spawn(move || {
                            // A forked child's log (it exec'd under Valgrind) is not kept.
                            let is_main = |pid: u32| loop {
                                if let Some(main) = main_pid.get() {
                                    break *main == pid;
                                }
                                std::thread::sleep(Duration::from_millis(1));
                            };
                            let converter = LogConverter::new(options.psb_period, options.keep_instruction_log)
                                .with_limit(options.max_instructions)
                                .with_spill(options.spill_folder.clone(), SPILL_BYTES)
                                .with_progress(converted)
                                .with_full_state(options.full_state);
                            let (pid, converted) = convert_stream(&mut stream, converter, &is_main)?;
                            Ok((pid.filter(|&pid| is_main(pid)), converted))
                        }));
                    }
                    Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => {
                        if done.load(Ordering::Relaxed) {
                            break;
                        }
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    Err(_) => break,
                }
            }
            handlers
        })
    };
    // Valgrind's own messages ("Process terminating with default action
    // of signal 11", its errors) go to a file, not into the program's
    // stderr; retrace logs them and says what matters in its own words.
    let valgrind_log = std::env::temp_dir().join(format!("retrace-valgrind-messages-{}-{}", std::process::id(), address.port()));
    let start = Instant::now();
    let spawned = std::process::Command::new(&valgrind)
        .env_remove(VALGRIND_LIB_VARIABLE)
        .env("VALGRIND_LIB", &folder)
        .args(VALGRIND_OPTIONS)
        .arg("--tool=retrace")
        .arg(format!("--log-file={}.%p", valgrind_log.display()))
        .arg(format!("--retrace-server={address}"))
        .args(options.max_instructions.map(|n| format!("--retrace-max-insns={n}")))
        .args(options.full_state.then_some("--retrace-full=yes"))
        .arg(program)
        .args(args)
        .spawn();
    let mut child = match spawned {
        Ok(child) => child,
        Err(error) => {
            done.store(true, Ordering::Relaxed);
            let _ = acceptor.join();
            return Err(io(format!("running {}", valgrind.display()))(error));
        }
    };
    let pid = child.id();
    let _ = main_pid.set(pid);
    let mut shown = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().map_err(io("waiting for Valgrind"))? {
            break status;
        }
        if let (Some(progress), Some(converted)) = (&options.progress, &converted) {
            if shown.elapsed() >= Duration::from_millis(200) {
                progress(converted.load(Ordering::Relaxed));
                shown = Instant::now();
            }
        }
        if options.stop.load(Ordering::Relaxed) {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::Signal::SIGINT);
            break child.wait().map_err(io("waiting for Valgrind"))?;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let elapsed = start.elapsed();
    let messages = valgrind_messages(&valgrind_log, pid);
    done.store(true, Ordering::Relaxed);
    let handlers = acceptor.join().expect("the acceptor does not panic");
    // This process's images, in the order they connected (exec order).
    let mut images = Vec::new();
    let mut undecodable = 0;
    let mut warnings = Vec::new();
    let mut limited = false;
    let mut ended_at = None;
    for handler in handlers {
        let (Some(_), mut converted) = handler.join().expect("a conversion does not panic").map_err(io("reading the tool's log"))? else { continue };
        ended_at = converted.ended_at.or(ended_at);
        undecodable += converted.undecodable;
        warnings.append(&mut converted.warnings);
        limited |= converted.limited;
        if !converted.image.threads.is_empty() {
            images.push(converted.image);
        }
    }
    let outcome = if options.stop.load(Ordering::Relaxed) {
        Outcome::Interrupted
    } else if limited {
        Outcome::InstructionLimit
    } else if let Some(code) = status.code() {
        Outcome::Exited(code)
    } else {
        use std::os::unix::process::ExitStatusExt;
        let signal = status.signal().and_then(|s| nix::sys::signal::Signal::try_from(s).ok()).unwrap_or(nix::sys::signal::Signal::SIGKILL);
        Outcome::Signaled { signal, at: ended_at }
    };
    if images.is_empty() {
        let said = if messages.is_empty() { String::new() } else { format!("; Valgrind said: {}", messages.join(" ")) };
        return Err(ValgrindError::Unavailable(format!("Valgrind ran but sent no log ({}){said}", warnings.join("; "))));
    }
    Ok(Recording { pid, images, outcome, elapsed, undecodable, tsc_conversion: None, warnings })
}

/// Valgrind's messages for the process `pid` from its `--log-file`s
/// (`prefix.<pid>`, one per process: all are removed), without the
/// `==pid==` margin; each is logged.
fn valgrind_messages(prefix: &Path, pid: u32) -> Vec<String> {
    let mut messages = Vec::new();
    let (Some(folder), Some(name)) = (prefix.parent(), prefix.file_name()) else { return messages };
    let name = format!("{}.", name.to_string_lossy());
    for entry in std::fs::read_dir(folder).into_iter().flatten().flatten() {
        let file = entry.file_name().to_string_lossy().into_owned();
        let Some(of) = file.strip_prefix(&name) else { continue };
        let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
        let _ = std::fs::remove_file(entry.path());
        for line in text.lines() {
            let line = line.split_once("== ").filter(|(margin, _)| margin.starts_with("==")).map_or(line, |(_, rest)| rest).trim();
            if line.is_empty() {
                continue;
            }
            tracing::info!(process = of, "valgrind: {line}");
            if of == pid.to_string() {
                messages.push(line.to_string());
            }
        }
    }
    messages
}

#[cfg(test)]
mod tests;
