//! `retrace record`: run a program under a recorder and write a trace bundle.

use std::ffi::OsString;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use retrace_collector::bundle_writer::{write_bundle, BundleInfo};
use retrace_collector::hardware::{host_cpu_info, record_threads, PerfIntelPt};
use retrace_collector::intel_pt::{IntelPtError, PtEventConfig};
use retrace_collector::process::{current_cpu, launch, LaunchOptions};
use retrace_collector::ptrace_recorder::{record, RecordOptions, StepMode};
use retrace_collector::recording::Outcome;
use retrace_decoder::bundle::CpuInfo;

use crate::cli::error::CliError;

/// How a program is recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Backend {
    /// The best one here: Intel PT, else Valgrind, else ptrace.
    Auto,
    /// The CPU's intel_pt PMU.
    IntelPt,
    /// Stops the program under ptrace.
    // (`software`: its earlier name.)
    #[value(alias = "software")]
    Ptrace,
    /// Valgrind with retrace's tool.
    Valgrind,
}

/// Where the ptrace recorder stops the program.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PtraceStops {
    /// At every instruction.
    Step,
    /// At every branch.
    Branch,
}

/// `--mode`, the earlier spelling of --full-state and --ptrace-stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// `--ptrace-stops step`.
    Step,
    /// `--ptrace-stops branch`.
    Branch,
    /// `--full-state`.
    Full,
}

/// What `retrace record` was asked.
#[derive(Debug)]
pub struct Args {
    /// Every register and memory change too (else the control flow).
    pub full_state: bool,
    /// How to record.
    pub backend: Backend,
    /// Where ptrace stops the program (asks for ptrace with `auto`).
    pub ptrace_stops: Option<PtraceStops>,
    /// The bundle directory.
    pub output: PathBuf,
    /// Stop after about this many instructions.
    pub max_insns: Option<u64>,
    /// Keep address-space randomisation on.
    pub aslr: bool,
    /// Write each thread's instruction addresses too.
    pub insn_log: bool,
    /// The summary as one line of JSON.
    pub json: bool,
    /// Replace a bundle already there.
    pub force: bool,
    /// The program and its arguments.
    pub command: Vec<OsString>,
}

/// Where the bundle goes: refused if something is there already (an
/// earlier bundle, unless `force` replaces it; anything else, always), so
/// that a recording never silently replaces another or mixes with it.
fn clear_output(output: &std::path::Path, force: bool) -> Result<(), CliError> {
    let Ok(mut entries) = std::fs::read_dir(output) else {
        if output.exists() {
            return Err(CliError::Message(format!("{} exists and is not a directory: give another -o DIR", output.display())));
        }
        return Ok(());
    };
    if entries.next().is_none() {
        return Ok(());
    }
    if !output.join("trace.json").exists() {
        return Err(CliError::Message(format!("{} exists and is not empty (and holds no trace.json): give another -o DIR", output.display())));
    }
    if !force {
        return Err(CliError::Message(format!(
            "{} holds a trace already ({}): give another -o DIR, or --force to replace it",
            output.display(),
            output.join("trace.json").display()
        )));
    }
    std::fs::remove_dir_all(output).map_err(|e| CliError::Message(format!("replacing {}: {e}", output.display())))
}

/// The stop flag of the recording in progress, for the signal handler.
static STOP: OnceLock<Arc<AtomicBool>> = OnceLock::new();

extern "C" fn on_interrupt(_: libc::c_int) {
    if let Some(stop) = STOP.get() {
        stop.store(true, Ordering::Relaxed);
    }
}

/// Ctrl-C and SIGTERM end the recording: the handler sets the stop flag and,
/// installed without `SA_RESTART`, interrupts the recorder's `waitpid` (a
/// program running freely or blocked in a system call does not delay it).
/// Threads started from here on inherit a mask blocking both, so the signal
/// lands in this (the recording) thread: see [`with_interrupts_blocked`].
fn install_interrupt_handler() -> Arc<AtomicBool> {
    use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
    let stop = STOP.get_or_init(|| Arc::new(AtomicBool::new(false))).clone();
    let action = SigAction::new(SigHandler::Handler(on_interrupt), SaFlags::empty(), SigSet::empty());
    // SAFETY: the handler only stores to an atomic.
    unsafe {
        let _ = sigaction(Signal::SIGINT, &action);
        let _ = sigaction(Signal::SIGTERM, &action);
    }
    stop
}

/// Runs `start` (which starts helper threads, e.g. a progress bar's ticker)
/// with SIGINT and SIGTERM blocked, so those threads never take them.
fn with_interrupts_blocked<T>(start: impl FnOnce() -> T) -> T {
    use nix::sys::signal::{pthread_sigmask, SigSet, SigmaskHow, Signal};
    let mut set = SigSet::empty();
    set.add(Signal::SIGINT);
    set.add(Signal::SIGTERM);
    let _ = pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&set), None);
    let value = start();
    let _ = pthread_sigmask(SigmaskHow::SIG_UNBLOCK, Some(&set), None);
    value
}

/// Intel PT as it records here, when an event of the intel_pt PMU really
/// opens (else why not: no PMU, `perf_event_paranoid`, a container…).
pub fn intel_pt_here() -> Result<PerfIntelPt, IntelPtError> {
    let source = PerfIntelPt::new(&retrace_collector::intel_pt::sysfs_dir(), PtEventConfig::default())?;
    source.probe()?;
    Ok(source)
}

/// The hardware source to record with, or `None` for Valgrind or ptrace.
/// `auto` takes Intel PT only when an event really opens, and says why not
/// when the PMU is there but unusable (`perf_event_paranoid`, a container…).
fn choose_backend(backend: Backend) -> Result<Option<PerfIntelPt>, CliError> {
    match backend {
        Backend::Ptrace | Backend::Valgrind => Ok(None),
        Backend::IntelPt => intel_pt_here().map(Some).map_err(|error| CliError::Message(format!("--backend intel-pt: {error}"))),
        Backend::Auto => match intel_pt_here() {
            Ok(source) => Ok(Some(source)),
            Err(IntelPtError::Absent { .. }) => Ok(None),
            Err(error) => {
                eprintln!("retrace: Intel PT is present but unusable ({error}); recording with ptrace");
                Ok(None)
            }
        },
    }
}

/// Records the program as `args` asks; the exit status is the program's.
pub fn run(mut args: Args) -> Result<ExitCode, CliError> {
    clear_output(&args.output, args.force)?;
    if args.full_state {
        return match args.backend {
            Backend::Auto | Backend::Valgrind if args.ptrace_stops.is_none() => run_valgrind(args),
            Backend::Auto | Backend::Valgrind => Err(CliError::Message(
                "--full-state records under Valgrind, which sees every instruction without stops: leave out --ptrace-stops".into(),
            )),
            Backend::IntelPt | Backend::Ptrace => Err(CliError::Message(format!(
                "--backend {} records the control flow only; --full-state records under Valgrind: leave out --backend (or give --backend valgrind)",
                if args.backend == Backend::IntelPt { "intel-pt" } else { "ptrace" }
            ))),
        };
    }
    if args.backend == Backend::Valgrind {
        return run_valgrind(args);
    }
    let hardware = choose_backend(args.backend)?;
    if hardware.is_none() && args.backend == Backend::Auto && args.ptrace_stops.is_none() {
        match retrace_collector::valgrind::availability() {
            Ok(()) => {
                eprintln!("retrace: no Intel PT here; recording under Valgrind (--backend valgrind)");
                return run_valgrind(args);
            }
            Err(why) => {
                eprintln!("retrace: no Intel PT here and {}; recording with ptrace, stopping at every branch (--backend ptrace --ptrace-stops branch)", lowercase_first(&why));
                args.ptrace_stops = Some(PtraceStops::Branch);
            }
        }
    }
    let stops = args.ptrace_stops.unwrap_or(PtraceStops::Step);
    tracing::info!(backend = if hardware.is_some() { "intel-pt" } else { "ptrace" }, "recording");
    let stop = install_interrupt_handler();

    let mut command = args.command.into_iter();
    let program = command.next().expect("clap requires a program");
    let mut launch_options = LaunchOptions::new(program, command);
    launch_options.disable_aslr = !args.aslr;
    launch_options.pin_cpu = Some(current_cpu());
    let tracee = launch(&launch_options).map_err(|e| CliError::Message(e.to_string()))?;

    let progress = progress_spinner();
    let options = RecordOptions {
        mode: match stops {
            PtraceStops::Step => StepMode::Step,
            PtraceStops::Branch => StepMode::Branch,
        },
        max_instructions: args.max_insns,
        keep_instruction_log: args.insn_log,
        stop,
        progress: progress.clone().map(show_instructions),
        ..RecordOptions::default()
    };
    let (recording, info) = if let Some(mut source) = hardware {
        let recording = record_threads(tracee, &mut source, &options);
        let cpu_info = host_cpu_info().ok_or_else(|| CliError::Message("cannot read /proc/cpuinfo".into()))?;
        let info = BundleInfo { backend: "intel-pt".into(), mode: None, cpu_info, cpu_info_is_synthetic: false };
        (recording, info)
    } else {
        let recording = record(tracee, &options).map_err(|e| CliError::Message(format!("recording failed: {e}")))?;
        let info = BundleInfo {
            backend: "software".into(),
            mode: Some(match stops {
                PtraceStops::Step => "step".into(),
                PtraceStops::Branch => "branch".into(),
            }),
            cpu_info: CpuInfo::software_recording(),
            cpu_info_is_synthetic: true,
        };
        (recording, info)
    };
    if let Some(bar) = progress {
        bar.finish_and_clear();
    }
    let trace_json = write_bundle(&args.output, &recording, &info).map_err(|e| CliError::Message(e.to_string()))?;

    report(&recording, &info, &trace_json, args.json);
    Ok(exit_status(&recording.outcome))
}

/// `retrace record`'s exit status: the program's, as rr's (128+N when
/// signal N ended it, as a shell says; 130 when the recording stopped it:
/// Ctrl-C or --max-insns).
fn exit_status(outcome: &Outcome) -> ExitCode {
    ExitCode::from(match *outcome {
        Outcome::Exited(code) => code as u8,
        Outcome::Signaled { signal, .. } => 128u8.wrapping_add(signal as u8),
        Outcome::InstructionLimit | Outcome::Interrupted => 130,
    })
}

/// What `retrace record` says about a recording on stderr: the summary as
/// one line of JSON, or the outcome, threads, counts and the bundle.
fn report(recording: &retrace_collector::recording::Recording, info: &BundleInfo, trace_json: &std::path::Path, json: bool) {
    let seconds = recording.elapsed.as_secs_f64();
    let instructions = recording.instructions();
    let rate = if seconds > 0.0 { instructions as f64 / seconds } else { 0.0 };
    if json {
        let summary = serde_json::json!({
            "bundle": trace_json,
            "backend": info.backend,
            "peak_rss_kib": peak_rss_kib(),
            "pid": recording.pid,
            "outcome": recording.outcome.to_string(),
            "threads": recording.images.iter().enumerate().flat_map(|(image, i)| i.threads.iter().map(move |t| serde_json::json!({
                "tid": t.tid, "image": image, "instructions": t.instructions, "trace_bytes": t.trace_len()
            }))).collect::<Vec<_>>(),
            "images": recording.images.len(),
            "warnings": recording.warnings,
            "instructions": instructions,
            "trace_bytes": recording.trace_bytes(),
            "seconds": seconds,
            "instructions_per_second": rate,
            "undecodable_instructions": recording.undecodable,
        });
        eprintln!("{summary}");
    } else {
        eprintln!("{}", recording.outcome);
        for (number, image) in recording.images.iter().enumerate() {
            if recording.images.len() > 1 {
                let program = image.modules.first().map_or("?", |m| m.path.as_str());
                eprintln!("  image {number} ({program}):");
            }
            for thread in &image.threads {
                eprintln!("  thread {}: {} instructions, {} bytes of trace", thread.tid, thread.instructions, thread.trace_len());
            }
        }
        for warning in &recording.warnings {
            eprintln!("warning: {warning}");
        }
        if info.backend == "intel-pt" {
            eprintln!(
                "recorded {} bytes of Intel PT in {} thread(s), {seconds:.2} s (instruction counts need a decode)",
                recording.trace_bytes(),
                recording.threads().count()
            );
        } else {
            eprintln!(
                "recorded {instructions} instructions ({}) in {} thread(s), {} bytes of trace, {seconds:.2} s ({rate:.0} instructions/s)",
                what_and_how(info),
                recording.threads().count(),
                recording.trace_bytes()
            );
        }
        if recording.undecodable > 0 {
            eprintln!("{} instruction(s) could not be decoded and appear as tracing gaps", recording.undecodable);
        }
        eprintln!("bundle: {}", trace_json.display());
        for line in next_commands(info, trace_json) {
            eprintln!("{line}");
        }
    }
}

/// What a recording holds and what recorded it, in the words of
/// `retrace record --help`.
fn what_and_how(info: &BundleInfo) -> String {
    let what = if info.mode.as_deref() == Some("full") { "full state" } else { "control flow" };
    let how = match (info.backend.as_str(), info.mode.as_deref()) {
        ("valgrind", _) => "Valgrind",
        ("intel-pt", _) => "Intel PT",
        (_, Some("step")) => "ptrace, a stop per instruction",
        _ => "ptrace, a stop per branch",
    };
    format!("{what}, by {how}")
}

/// The commands to run next on the bundle `trace_json`: a replay first
/// (every value with full state; the program counter otherwise, where
/// LLDB's own trace commands show more).
fn next_commands(info: &BundleInfo, trace_json: &std::path::Path) -> Vec<String> {
    let dir = trace_json.parent().map_or_else(|| trace_json.display().to_string(), |d| d.display().to_string());
    if info.mode.as_deref() == Some("full") {
        vec![
            "next: debug it, every value at every point, backwards too:".into(),
            format!("  retrace replay {dir}          (LLDB 22 with retrace reverse-step/-next/-finish, process continue -R)"),
            format!("  retrace replay --gdb {dir}    (GDB: reverse-step, reverse-continue, watch -l)"),
        ]
    } else {
        vec![
            "next: explore it in LLDB, or list what it ran:".into(),
            format!("  lldb-22 -o \"trace load {}\" -o \"thread trace dump instructions\"", trace_json.display()),
            format!("  retrace dump instructions {}", trace_json.display()),
            "  (retrace record --full-state -o DIR -- PROGRAM, then retrace replay DIR: every value, backwards)".into(),
        ]
    }
}

/// The largest resident set this process has had, in KiB.
fn peak_rss_kib() -> i64 {
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage writes the struct it is given.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } != 0 {
        return 0;
    }
    usage.ru_maxrss
}

fn lowercase_first(text: &str) -> String {
    let mut chars = text.chars();
    chars.next().map(|c| c.to_lowercase().chain(chars).collect()).unwrap_or_default()
}

/// A spinner on stderr while recording, when stderr is a terminal (its
/// ticker thread does not take the program's Ctrl-C).
fn progress_spinner() -> Option<indicatif::ProgressBar> {
    with_interrupts_blocked(|| {
        std::io::stderr().is_terminal().then(|| {
            let bar = indicatif::ProgressBar::new_spinner();
            bar.set_style(indicatif::ProgressStyle::with_template("{spinner} recording: {msg} instructions ({elapsed})").unwrap());
            bar.enable_steady_tick(std::time::Duration::from_millis(200));
            bar
        })
    })
}

/// A progress callback showing the instructions recorded on `bar`.
fn show_instructions(bar: indicatif::ProgressBar) -> Arc<dyn Fn(u64) + Send + Sync> {
    Arc::new(move |n: u64| bar.set_message(n.to_string()))
}

/// `--backend valgrind`: the program runs under Valgrind with retrace's
/// tool; its stdin, stdout and stderr are untouched and its exit status is
/// `retrace record`'s.
fn run_valgrind(args: Args) -> Result<ExitCode, CliError> {
    use retrace_collector::valgrind;
    valgrind::availability().map_err(|why| CliError::Message(format!("--backend valgrind: {why}")))?;
    if args.ptrace_stops.is_some() {
        return Err(CliError::Message("--backend valgrind sees every instruction without stops: --ptrace-stops is for --backend ptrace; leave it out".into()));
    }
    let full_state = args.full_state;
    let stop = install_interrupt_handler();
    let mut command = args.command.into_iter();
    let program = command.next().expect("clap requires a program");
    let rest: Vec<OsString> = command.collect();
    // Traces are stored as they grow, beside the bundle (moved into it at
    // the end): memory stays bounded however long the program runs.
    let spill = args.output.with_file_name(format!(
        ".{}.retrace-{}",
        args.output.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
        std::process::id()
    ));
    std::fs::create_dir_all(&spill).map_err(|e| CliError::Message(format!("creating {}: {e}", spill.display())))?;
    let progress = progress_spinner();
    let options = valgrind::ValgrindOptions {
        keep_instruction_log: args.insn_log,
        max_instructions: args.max_insns,
        spill_folder: Some(spill.clone()),
        stop,
        progress: progress.clone().map(show_instructions),
        full_state,
        ..Default::default()
    };
    let recorded = valgrind::record(&program, &rest, &options).map_err(|e| CliError::Message(format!("recording failed: {e}")));
    if let Some(bar) = progress {
        bar.finish_and_clear();
    }
    let info = BundleInfo { backend: "valgrind".into(), mode: full_state.then(|| "full".into()), cpu_info: CpuInfo::software_recording(), cpu_info_is_synthetic: true };
    let written = recorded.and_then(|recording| {
        let trace_json = write_bundle(&args.output, &recording, &info).map_err(|e| CliError::Message(e.to_string()))?;
        Ok((recording, trace_json))
    });
    let _ = std::fs::remove_dir_all(&spill);
    let (recording, trace_json) = written?;
    report(&recording, &info, &trace_json, args.json);
    Ok(exit_status(&recording.outcome))
}
