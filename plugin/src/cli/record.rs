//! `retrace record`: run a program under a recorder and write a trace bundle.

use std::ffi::OsString;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use retrace_collector::bundle_writer::{write_bundle, BundleInfo};
use retrace_collector::hardware::{host_cpu_info, record_hardware};
use retrace_collector::intel_pt::{IntelPtPmu, PtEventConfig};
use retrace_collector::process::{current_cpu, launch, LaunchOptions};
use retrace_collector::software::{record, Outcome, RecordOptions, StepMode};
use retrace_decoder::bundle::CpuInfo;

use super::CliError;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Backend {
    Auto,
    IntelPt,
    Software,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    Step,
    Branch,
}

pub struct Args {
    pub backend: Backend,
    pub mode: Mode,
    pub output: PathBuf,
    pub max_insns: Option<u64>,
    pub aslr: bool,
    pub insn_log: bool,
    pub json: bool,
    pub command: Vec<OsString>,
}

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_interrupt(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::Relaxed);
}

fn install_interrupt_handler() -> Arc<AtomicBool> {
    use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
    let action = SigAction::new(SigHandler::Handler(on_interrupt), SaFlags::SA_RESTART, SigSet::empty());
    // SAFETY: the handler only stores to an atomic.
    unsafe {
        let _ = sigaction(Signal::SIGINT, &action);
        let _ = sigaction(Signal::SIGTERM, &action);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    std::thread::spawn(move || loop {
        if INTERRUPTED.load(Ordering::Relaxed) {
            flag.store(true, Ordering::Relaxed);
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    });
    stop
}

pub fn run(args: Args) -> Result<ExitCode, CliError> {
    let sysfs = std::path::Path::new(retrace_collector::intel_pt::SYSFS_DIR);
    let hardware = match args.backend {
        Backend::Software => false,
        Backend::IntelPt => match IntelPtPmu::detect(sysfs) {
            Ok(_) => true,
            Err(error) => return Err(CliError::Message(format!("--backend intel-pt: {error}"))),
        },
        Backend::Auto => IntelPtPmu::detect(sysfs).is_ok(),
    };
    tracing::info!(backend = if hardware { "intel-pt" } else { "software" }, "recording");

    let mut command = args.command.into_iter();
    let program = command.next().expect("clap requires a program");
    let mut launch_options = LaunchOptions::new(program, command);
    launch_options.disable_aslr = !args.aslr;
    launch_options.pin_cpu = Some(current_cpu());
    let tracee = launch(&launch_options).map_err(|e| CliError::Message(e.to_string()))?;

    let progress = std::io::stderr().is_terminal().then(|| {
        let bar = indicatif::ProgressBar::new_spinner();
        bar.set_style(indicatif::ProgressStyle::with_template("{spinner} recording: {msg} instructions ({elapsed})").unwrap());
        bar.enable_steady_tick(std::time::Duration::from_millis(200));
        bar
    });
    let options = RecordOptions {
        mode: match args.mode {
            Mode::Step => StepMode::Step,
            Mode::Branch => StepMode::Branch,
        },
        max_instructions: args.max_insns,
        keep_instruction_log: args.insn_log,
        stop: install_interrupt_handler(),
        progress: progress.clone().map(|bar| {
            Arc::new(move |n: u64| bar.set_message(n.to_string())) as Arc<dyn Fn(u64) + Send + Sync>
        }),
        ..RecordOptions::default()
    };
    let (recording, info) = if hardware {
        let recording = record_hardware(tracee, sysfs, &PtEventConfig::default(), &options)
            .map_err(|e| CliError::Message(format!("recording failed: {e}")))?;
        let cpu_info = host_cpu_info().ok_or_else(|| CliError::Message("cannot read /proc/cpuinfo".into()))?;
        let info = BundleInfo { backend: "intel-pt".into(), mode: None, cpu_info, cpu_info_is_synthetic: false };
        (recording, info)
    } else {
        let recording = record(tracee, &options).map_err(|e| CliError::Message(format!("recording failed: {e}")))?;
        let info = BundleInfo {
            backend: "software".into(),
            mode: Some(match args.mode {
                Mode::Step => "step".into(),
                Mode::Branch => "branch".into(),
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

    let seconds = recording.elapsed.as_secs_f64();
    let instructions = recording.instructions();
    let rate = if seconds > 0.0 { instructions as f64 / seconds } else { 0.0 };
    if args.json {
        let summary = serde_json::json!({
            "bundle": trace_json,
            "pid": recording.pid,
            "outcome": recording.outcome.to_string(),
            "threads": recording.threads.iter().map(|t| serde_json::json!({
                "tid": t.tid, "instructions": t.instructions, "trace_bytes": t.trace.len()
            })).collect::<Vec<_>>(),
            "instructions": instructions,
            "trace_bytes": recording.trace_bytes(),
            "seconds": seconds,
            "instructions_per_second": rate,
            "undecodable_instructions": recording.undecodable,
        });
        eprintln!("{summary}");
    } else {
        eprintln!("{}", recording.outcome);
        for thread in &recording.threads {
            eprintln!("  thread {}: {} instructions, {} bytes of trace", thread.tid, thread.instructions, thread.trace.len());
        }
        if info.backend == "intel-pt" {
            eprintln!(
                "recorded {} bytes of Intel PT in {} thread(s), {seconds:.2} s (instruction counts need a decode)",
                recording.trace_bytes(),
                recording.threads.len()
            );
        } else {
            eprintln!(
                "recorded {instructions} instructions in {} thread(s), {} bytes of trace, {seconds:.2} s ({rate:.0} instructions/s)",
                recording.threads.len(),
                recording.trace_bytes()
            );
        }
        if recording.undecodable > 0 {
            eprintln!("{} instruction(s) could not be decoded and appear as tracing gaps", recording.undecodable);
        }
        eprintln!("bundle: {}", trace_json.display());
        eprintln!("  lldb-22 -o \"trace load {}\" -o \"thread trace dump instructions\"", trace_json.display());
    }
    let code = match recording.outcome {
        Outcome::Exited(_) | Outcome::InstructionLimit => 0,
        Outcome::Signaled { .. } | Outcome::Interrupted => 0,
    };
    Ok(ExitCode::from(code))
}
