//! Recording with the hardware backend: the program runs at full speed
//! under ptrace while the CPU's Intel PT writes each thread's trace into its
//! AUX ring ([`intel_pt::ThreadPtEvent`]).
//!
//! Process control is [`crate::control`]'s, as for the software backend; this
//! loop only opens a trace per thread when the thread starts (before it runs
//! an instruction), reads it when the thread exits, and starts a new image at
//! each `execve`. Where each thread's trace comes from is a
//! [`ThreadTraceSource`]: [`PerfIntelPt`] here, anything in tests — so the
//! loop runs on machines without the PMU too.
//!
//! A thread whose trace cannot be opened (the locked-memory budget, a
//! refused `perf_event_open`) is left untraced and named in
//! [`Recording::warnings`]; the others are recorded.
//!
//! Modules come from `/proc/PID/maps`, read at every stop; a library mapped
//! and used between two stops of a program that then execs is missed (the
//! kernel's `PERF_RECORD_MMAP2` sideband would close that gap).

use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::Instant;

use nix::sys::ptrace;
use nix::unistd::Pid;
use retrace_decoder::bundle::CpuInfo;

use crate::control::{ProcessEvent, TracedProcess, Wait};
use crate::intel_pt::{IntelPtError, IntelPtPmu, MlockBudget, PtEventConfig, ThreadPtEvent};
use crate::process::{self, LoadedModule, Tracee};
use crate::ptrace_recorder::RecordOptions;
use crate::recording::{ImageRecording, Outcome, Recording, ThreadRecording};

/// Where each thread's trace comes from.
pub trait ThreadTraceSource {
    /// One thread's open trace.
    type Trace;
    /// Starts tracing `tid`, which is stopped (at its first instruction, or
    /// where recording starts).
    fn open(&mut self, tid: Pid) -> Result<Self::Trace, String>;
    /// Everything the thread's trace holds, oldest first; the trace is closed.
    fn read(&mut self, trace: Self::Trace) -> Vec<u8>;
}

/// Intel PT through `perf_event_open`, one event and AUX ring per thread,
/// each ring sized within the locked-memory budget.
pub struct PerfIntelPt {
    pmu: IntelPtPmu,
    config: PtEventConfig,
    budget: MlockBudget,
}

impl std::fmt::Debug for PerfIntelPt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PerfIntelPt").finish_non_exhaustive()
    }
}

impl PerfIntelPt {
    /// The PMU described below `sysfs`, configured by `config`, with the
    /// budget of this process's user.
    pub fn new(sysfs: &Path, config: PtEventConfig) -> Result<Self, IntelPtError> {
        Ok(PerfIntelPt { pmu: IntelPtPmu::detect(sysfs)?, config, budget: MlockBudget::for_this_process() })
    }

    /// Opens (and closes) an event on the calling thread: the check `auto`
    /// makes before choosing this backend.
    pub fn probe(&self) -> Result<(), IntelPtError> {
        let config = PtEventConfig { buffer_size: 4096, ..self.config };
        ThreadPtEvent::open(&self.pmu, &config, 0).map(drop)
    }

    /// Opens thread `tid`'s trace configured by `config` (each thread may
    /// have its own size and settings; the budget may give a smaller ring):
    /// the event and the ring's size, which [`Self::close`] gives back.
    pub fn open_configured(&mut self, tid: Pid, config: PtEventConfig) -> Result<(ThreadPtEvent, usize), String> {
        let size = self.budget.reserve(config.buffer_size).ok_or_else(|| self.budget.exhausted_message())?;
        let config = PtEventConfig { buffer_size: size, ..config };
        match ThreadPtEvent::open(&self.pmu, &config, tid.as_raw()) {
            Ok(event) => Ok((event, size)),
            Err(error) => {
                self.budget.release(size);
                let hint = match &error {
                    IntelPtError::Sys { source, .. } if source.raw_os_error() == Some(libc::EPERM) => {
                        format!(" ({})", MlockBudget::LIMITS_HINT)
                    }
                    _ => String::new(),
                };
                Err(format!("{error}{hint}"))
            }
        }
    }

    /// Closes a trace [`Self::open_configured`] opened: its ring's room
    /// goes back to the budget.
    pub fn close(&mut self, (event, size): (ThreadPtEvent, usize)) {
        drop(event);
        self.budget.release(size);
    }
}

impl ThreadTraceSource for PerfIntelPt {
    type Trace = (ThreadPtEvent, usize);

    fn open(&mut self, tid: Pid) -> Result<Self::Trace, String> {
        self.open_configured(tid, self.config)
    }

    fn read(&mut self, trace: Self::Trace) -> Vec<u8> {
        let bytes = trace.0.snapshot();
        self.close(trace);
        bytes
    }
}

/// The image being recorded: threads in creation order, each with its open
/// trace or the bytes read from it.
struct OpenImage<T> {
    threads: Vec<(Pid, Option<T>, Vec<u8>)>,
    modules: Vec<LoadedModule>,
}

impl<T> OpenImage<T> {
    fn new() -> Self {
        OpenImage { threads: Vec::new(), modules: Vec::new() }
    }

    /// Reads (and closes) the open traces of the threads `which` selects.
    fn read_threads<S: ThreadTraceSource<Trace = T>>(&mut self, source: &mut S, which: impl Fn(Pid) -> bool) {
        for (_, trace, bytes) in self.threads.iter_mut().filter(|(tid, ..)| which(*tid)) {
            if let Some(trace) = trace.take() {
                *bytes = source.read(trace);
            }
        }
    }

    fn finish<S: ThreadTraceSource<Trace = T>>(mut self, source: &mut S) -> ImageRecording {
        self.read_threads(source, |_| true);
        let threads = self
            .threads
            .into_iter()
            .map(|(tid, _, trace)| ThreadRecording { tid: tid.as_raw() as u32, trace, trace_file: None, instructions: 0, instruction_log: None })
            .collect();
        ImageRecording { threads, modules: self.modules, full_state: None, mapped_files: Vec::new() }
    }

    fn refresh_modules(&mut self, pid: Pid) {
        if let Ok(maps) = process::read_maps(pid) {
            process::add_new_modules(&mut self.modules, pid, &maps);
        }
    }
}

/// Records `tracee` with Intel PT until it exits (or the stop flag).
/// `max_instructions` cannot be enforced by hardware tracing and is ignored.
pub fn record_hardware(
    tracee: Tracee,
    sysfs: &Path,
    config: &PtEventConfig,
    options: &RecordOptions,
) -> Result<Recording, IntelPtError> {
    let mut source = match PerfIntelPt::new(sysfs, *config) {
        Ok(source) => source,
        Err(error) => {
            process::kill_and_reap(tracee.pid);
            return Err(error);
        }
    };
    if let Err(error) = source.probe() {
        process::kill_and_reap(tracee.pid);
        return Err(error);
    }
    Ok(record_threads(tracee, &mut source, options))
}

/// The hardware backend's loop over any [`ThreadTraceSource`]: runs
/// `tracee` freely until it exits (or `options.stop` is set: set it from a
/// signal handler installed without `SA_RESTART`, so a blocked wait returns).
pub fn record_threads<S: ThreadTraceSource>(tracee: Tracee, source: &mut S, options: &RecordOptions) -> Recording {
    let start = Instant::now();
    let pid = tracee.pid;
    let mut process = TracedProcess::new(pid, [pid]);
    let mut images = Vec::new();
    let mut image: OpenImage<S::Trace> = OpenImage::new();
    let mut warnings = Vec::new();
    let open = |tid: Pid, image: &mut OpenImage<S::Trace>, source: &mut S, warnings: &mut Vec<String>| {
        match source.open(tid) {
            Ok(trace) => image.threads.push((tid, Some(trace), Vec::new())),
            Err(reason) => {
                tracing::warn!(tid = tid.as_raw(), %reason, "thread not traced");
                warnings.push(format!("thread {tid} is not traced: {reason}"));
            }
        }
    };
    image.refresh_modules(pid);
    open(pid, &mut image, source, &mut warnings);
    let _ = ptrace::cont(pid, None);
    let outcome = loop {
        if options.stop.load(Ordering::Relaxed) {
            image.refresh_modules(pid);
            image.read_threads(source, |_| true);
            process.kill();
            break Outcome::Interrupted;
        }
        let event = match process.next_event(Wait::Block) {
            Ok(Some(event)) => event,
            Ok(None) => continue,
            Err(error) => {
                warnings.push(format!("waiting for the program failed: {error}"));
                process.kill();
                break Outcome::Interrupted;
            }
        };
        let resume = |tid: Pid, signal| {
            let _ = ptrace::cont(tid, signal);
        };
        match event {
            ProcessEvent::ThreadStarted(tid) => {
                image.refresh_modules(pid);
                open(tid, &mut image, source, &mut warnings);
                resume(tid, None);
            }
            ProcessEvent::Exec { tid, .. } => {
                // The old image's traces end with execve; the new program
                // starts a new image at its first instruction.
                let finished = std::mem::replace(&mut image, OpenImage::new());
                images.push(finished.finish(source));
                image.refresh_modules(pid);
                open(tid, &mut image, source, &mut warnings);
                resume(tid, None);
            }
            ProcessEvent::Exiting(tid) => {
                image.refresh_modules(pid);
                image.read_threads(source, |t| t == tid);
                resume(tid, None);
            }
            ProcessEvent::Signal(tid, signal) => {
                image.refresh_modules(pid);
                resume(tid, Some(signal));
            }
            // The program's own int3 or raise(SIGTRAP): it is the program's signal.
            ProcessEvent::Trap(tid) => resume(tid, Some(nix::sys::signal::Signal::SIGTRAP)),
            ProcessEvent::Spawned { parent, .. } => {
                image.refresh_modules(pid);
                resume(parent, None);
            }
            ProcessEvent::Other(tid) => resume(tid, None),
            ProcessEvent::ForkedChild(_) | ProcessEvent::ThreadGone(_) => {}
            ProcessEvent::Exited(code) => break Outcome::Exited(code),
            ProcessEvent::Killed(signal) => break Outcome::Signaled { signal, at: None },
        }
    };
    tracee.unpin_tracer();
    images.push(image.finish(source));
    Recording {
        pid: pid.as_raw() as u32,
        images,
        outcome,
        elapsed: start.elapsed(),
        undecodable: 0,
        tsc_conversion: crate::perf_clock::tsc_conversion(),
        warnings,
    }
}

/// The CPU from `/proc/cpuinfo` (vendor, family, model, stepping of the first CPU).
pub fn host_cpu_info() -> Option<CpuInfo> {
    parse_cpuinfo(&std::fs::read_to_string("/proc/cpuinfo").ok()?)
}

/// Parses the first processor block of `/proc/cpuinfo` text.
pub fn parse_cpuinfo(text: &str) -> Option<CpuInfo> {
    let field = |name: &str| {
        text.lines()
            .find(|line| line.split(':').next().is_some_and(|key| key.trim() == name))
            .and_then(|line| line.split_once(':'))
            .map(|(_, value)| value.trim().to_string())
    };
    Some(CpuInfo {
        vendor: field("vendor_id")?,
        family: field("cpu family")?.parse().ok()?,
        model: field("model")?.parse().ok()?,
        stepping: field("stepping")?.parse().ok()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::sys::wait::{waitpid, WaitPidFlag};

    #[test]
    fn cpuinfo_of_the_first_processor() {
        let text = "processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 85\nmodel name\t: Intel(R) Xeon(R)\nstepping\t: 4\n\nprocessor\t: 1\nvendor_id\t: GenuineIntel\n";
        assert_eq!(
            parse_cpuinfo(text),
            Some(CpuInfo { vendor: "GenuineIntel".into(), family: 6, model: 85, stepping: 4 })
        );
        assert_eq!(parse_cpuinfo("processor : 0\n"), None);
    }

    #[test]
    fn absent_pmu_fails_before_running_the_program() {
        if Path::new(crate::intel_pt::SYSFS_DIR).join("type").exists() {
            return;
        }
        let tracee = process::launch(&process::LaunchOptions::new("/bin/true", Vec::<String>::new())).unwrap();
        let pid = tracee.pid;
        let error = record_hardware(tracee, Path::new(crate::intel_pt::SYSFS_DIR), &PtEventConfig::default(), &RecordOptions::default())
            .err()
            .expect("no PMU here");
        assert!(matches!(error, IntelPtError::Absent { .. }), "{error}");
        // The program was not left behind.
        assert!(waitpid(pid, Some(WaitPidFlag::WNOHANG)).is_err());
    }
}
