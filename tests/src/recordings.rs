//! Building the C test programs and recording them into bundles with the
//! collector library, for decoder comparisons.

use std::path::{Path, PathBuf};
use std::process::Command;

use retrace_collector::bundle_writer::{write_bundle, BundleInfo};
use retrace_collector::process::{current_cpu, launch, LaunchOptions};
use retrace_collector::ptrace_recorder::{record, RecordOptions, StepMode};
use retrace_decoder::bundle::CpuInfo;

/// `tests/programs`.
pub fn programs_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("programs")
}

/// Builds `tests/programs/<name>.c` with gcc and `flags` into `dir`.
pub fn build(name: &str, dir: &Path, flags: &[&str]) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let exe = dir.join(name);
    // Tests running at once may build the same program into the same place:
    // each writes its own file and renames it over the program, so none ever
    // runs a half-written one.
    static BUILDS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = BUILDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let partial = dir.join(format!(".{name}.{}.{n}", std::process::id()));
    let out = Command::new("gcc")
        .arg("-g")
        .args(flags)
        .arg("-o")
        .arg(&partial)
        .arg(programs_dir().join(format!("{name}.c")))
        .output()
        .expect("run gcc");
    assert!(out.status.success(), "gcc: {}", String::from_utf8_lossy(&out.stderr));
    std::fs::rename(&partial, &exe).unwrap();
    exe
}

/// Records `program args` in `mode` into the bundle directory `bundle`;
/// returns the path of its trace.json.
pub fn record_bundle(program: &Path, args: &[&str], mode: StepMode, bundle: &Path) -> PathBuf {
    let mut options = LaunchOptions::new(program.as_os_str(), args.iter().copied());
    options.pin_cpu = Some(current_cpu());
    let tracee = launch(&options).expect("launch");
    let recording = record(tracee, &RecordOptions { mode, ..RecordOptions::default() }).expect("record");
    let info = BundleInfo {
        backend: "software".into(),
        mode: Some(format!("{mode:?}").to_lowercase()),
        cpu_info: CpuInfo::software_recording(),
        cpu_info_is_synthetic: true,
    };
    write_bundle(bundle, &recording, &info).expect("write bundle")
}

/// The summary `retrace record --json` prints as the last line of its
/// stderr (its own messages go there; stdout is the program's). Panics,
/// with the stderr, if it printed none or its exit status is not the
/// program's (see [`exit_status_of`]).
pub fn record_summary(out: &std::process::Output) -> serde_json::Value {
    let stderr = String::from_utf8_lossy(&out.stderr);
    let last = stderr.lines().rev().find(|line| !line.trim().is_empty()).unwrap_or("");
    let summary: serde_json::Value = serde_json::from_str(last).unwrap_or_else(|e| panic!("JSON summary expected as stderr's last line ({e}): {stderr}"));
    let outcome = summary["outcome"].as_str().unwrap_or_default();
    assert_eq!(out.status.code(), Some(exit_status_of(outcome)), "retrace record's exit status for {outcome:?}: {stderr}");
    summary
}

/// The exit status `retrace record` has for a recording's `outcome`, as
/// `rr record`'s and a shell's: the program's exit status, 128 + N when
/// signal N killed it, 130 when the recording stopped it.
pub fn exit_status_of(outcome: &str) -> i32 {
    if let Some(status) = outcome.strip_prefix("program exited with status ") {
        return status.trim().parse().unwrap_or_else(|_| panic!("{outcome:?}"));
    }
    if let Some(rest) = outcome.strip_prefix("program killed by ") {
        let name = rest.split_whitespace().next().unwrap_or_default();
        let signals = [("SIGINT", 2), ("SIGILL", 4), ("SIGTRAP", 5), ("SIGABRT", 6), ("SIGBUS", 7), ("SIGFPE", 8), ("SIGKILL", 9), ("SIGSEGV", 11), ("SIGPIPE", 13), ("SIGALRM", 14), ("SIGTERM", 15)];
        let number = signals.iter().find(|(n, _)| *n == name).unwrap_or_else(|| panic!("a signal this list lacks: {outcome:?}")).1;
        return 128 + number;
    }
    assert!(outcome.starts_with("instruction limit reached") || outcome.starts_with("recording interrupted"), "an outcome of no known form: {outcome:?}");
    130
}

/// The executed addresses of an `--insn-log` file (`threads/<tid>.insns`:
/// hex, one per line).
pub fn read_insn_log(path: &Path) -> Vec<u64> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .map(|line| u64::from_str_radix(line, 16).unwrap())
        .collect()
}
