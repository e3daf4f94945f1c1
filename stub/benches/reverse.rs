//! Recording for reverse execution, in one run, on the baseline workload
//! (`tests/programs/bench_loop.c`): GDB 13's own
//! `record full` run natively from `bench_begin` to `bench_end` against
//! `retrace-stub --record=full` (and `=branch`) over the same stretch
//! driven by GDB 13 (the stub keeps itself and the program on one CPU;
//! GDB is measured as users run it and also pinned to one CPU):
//!
//! - instructions recorded per second, over that stretch (GDB: its log's
//!   count; the stub: `monitor record status --json` before and after);
//! - bytes per recorded instruction (GDB: its RSS growth over the stretch,
//!   read from its own /proc; the stub: the history's size, before and
//!   after, and its RSS growth, read by the same probe).
//!
//! And `retrace-stub --record=branch` against `retrace record --mode
//! branch`'s recorder (the collector, run here as the CLI runs it, the tracee
//! on the bench's CPU) on a longer run: instructions per second, the
//! stub over the stretch, the collector over the whole program (its
//! start-up is a few percent of it).
//!
//! `cargo bench -p retrace-stub --bench reverse` (`RETRACE_BENCH_ITERATIONS`,
//! default 2000: the loop count, 15 instructions an iteration;
//! `RETRACE_BENCH_BRANCH_ITERATIONS`, default 100000, for the branch-mode
//! comparison).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use retrace_collector::process::{current_cpu, launch, LaunchOptions};
use retrace_collector::ptrace_recorder::{record, RecordOptions, StepMode};

#[path = "../tests/common/mod.rs"]
mod common;

fn build(dir: &Path) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let exe = dir.join("bench_loop");
    let source = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/programs/bench_loop.c");
    assert!(Command::new("gcc").args(["-g", "-O1", "-static", "-o"]).arg(&exe).arg(source).status().unwrap().success());
    exe
}

/// Prints the wall clock, GDB's own resident size and that of the
/// process `RETRACE_PROBE_PID` names (GDB's again without it).
const PROBE: &str = r#"
import gdb, os, time
def rss(pid):
    return next(int(l.split()[1]) for l in open("/proc/%s/status" % pid) if l.startswith("VmRSS:")) * 1024
class Probe(gdb.Command):
    def __init__(self):
        super().__init__("probe", gdb.COMMAND_USER)
    def invoke(self, arg, tty):
        print("PROBE %s %.6f %d %d" % (arg, time.time(), rss("self"), rss(os.environ.get("RETRACE_PROBE_PID", "self"))))
Probe()
"#;

/// `pinned`: GDB (and so its inferior) kept on CPU 0 (`taskset -c 0`), as
/// the stub keeps itself and its inferior on one CPU.
fn gdb_run(program: &Path, dir: &Path, commands: &[String], pinned: bool, probed: Option<u32>) -> String {
    let probe = dir.join("probe.py");
    std::fs::write(&probe, PROBE).unwrap();
    let mut gdb = if pinned {
        let mut taskset = Command::new("taskset");
        taskset.args(["-c", "0", "gdb"]);
        taskset
    } else {
        Command::new("gdb")
    };
    gdb.args(["-nx", "-batch", "-ex", "set pagination off", "-ex", &format!("source {}", probe.display())]);
    if let Some(pid) = probed {
        gdb.env("RETRACE_PROBE_PID", pid.to_string());
    }
    for command in commands {
        gdb.args(["-ex", command]);
    }
    let out = gdb.arg(program).stdin(Stdio::null()).output().expect("gdb");
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

/// (time, GDB's resident bytes, the probed process's) of `PROBE name`.
fn probe(out: &str, name: &str) -> (f64, u64, u64) {
    let line = out.lines().find_map(|l| l.strip_prefix(&format!("PROBE {name} "))).unwrap_or_else(|| panic!("no probe {name}:\n{out}"));
    let fields: Vec<&str> = line.split(' ').collect();
    (fields[0].parse().unwrap(), fields[1].parse().unwrap(), fields[2].parse().unwrap())
}

/// Every `monitor record status --json` answer, in order.
fn statuses(out: &str) -> Vec<serde_json::Value> {
    out.lines().filter(|l| l.starts_with("{\"")).map(|l| serde_json::from_str(l).unwrap()).collect()
}

struct Measured {
    instructions: u64,
    seconds: f64,
    bytes: f64,
    /// The recording process's resident-size growth (GDB: `bytes`).
    resident: f64,
}

fn gdb_record_full(program: &Path, dir: &Path, iterations: &str, pinned: bool) -> Measured {
    let commands: Vec<String> = [
        "set can-use-hw-watchpoints 0",
        "break bench_begin",
        &format!("run {iterations}"),
        "record full",
        "set record full insn-number-max unlimited",
        "break bench_end",
        "probe begin",
        "continue",
        "probe end",
        "info record",
        "kill",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let out = gdb_run(program, dir, &commands, pinned, None);
    let ((t0, rss0, _), (t1, rss1, _)) = (probe(&out, "begin"), probe(&out, "end"));
    let instructions: u64 = out
        .lines()
        .find_map(|l| l.strip_prefix("Log contains ")?.strip_suffix(" instructions.")?.parse().ok())
        .unwrap_or_else(|| panic!("no instruction count:\n{out}"));
    let bytes = rss1.saturating_sub(rss0) as f64;
    Measured { instructions, seconds: t1 - t0, bytes, resident: bytes }
}

fn stub_record(program: &Path, dir: &Path, iterations: &str, mode: &str) -> Measured {
    let mut stub = Command::new(env!("CARGO_BIN_EXE_retrace-stub"));
    stub.args([&format!("--record={mode}"), "--listen", "127.0.0.1:0", "--"]).arg(program).arg(iterations);
    let (child, line) = common::spawn_stub(stub);
    let (_, port) = common::pid_and_port(&line);
    let commands: Vec<String> = [
        format!("target remote 127.0.0.1:{port}"),
        "break bench_begin".into(),
        "continue".into(),
        "break bench_end".into(),
        "monitor record status --json".into(),
        "probe begin".into(),
        "continue".into(),
        "probe end".into(),
        "monitor record status --json".into(),
        "kill".into(),
    ]
    .to_vec();
    let out = gdb_run(program, dir, &commands, false, Some(child.id()));
    let _ = common::wait_exit(child);
    let ((t0, _, rss0), (t1, _, rss1)) = (probe(&out, "begin"), probe(&out, "end"));
    let s = statuses(&out);
    assert_eq!(s.len(), 2, "{out}");
    let count = |k: &str, i: usize| s[i][k].as_u64().unwrap_or_else(|| panic!("{k} in {}", s[i]));
    Measured {
        instructions: count("instructions", 1) - count("instructions", 0),
        seconds: t1 - t0,
        bytes: (count("bytes", 1) - count("bytes", 0)) as f64,
        resident: rss1.saturating_sub(rss0) as f64,
    }
}

/// `retrace record --mode branch`'s recorder on the whole program.
fn collector_branch(program: &Path, iterations: &str) -> Measured {
    let mut options = LaunchOptions::new(program.as_os_str(), [iterations]);
    options.pin_cpu = Some(current_cpu());
    let recording = record(launch(&options).unwrap(), &RecordOptions { mode: StepMode::Branch, ..RecordOptions::default() }).unwrap();
    assert_eq!(recording.outcome, retrace_collector::recording::Outcome::Exited(0));
    let bytes = recording.trace_bytes() as f64;
    Measured { instructions: recording.instructions(), seconds: recording.elapsed.as_secs_f64(), bytes, resident: bytes }
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let iterations = std::env::var("RETRACE_BENCH_ITERATIONS").unwrap_or_else(|_| "2000".into());
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("bench-reverse");
    let program = build(&dir);
    let gdb = gdb_record_full(&program, &dir, &iterations, false);
    let pinned = gdb_record_full(&program, &dir, &iterations, true);
    let full = stub_record(&program, &dir, &iterations, "full");
    let branch = stub_record(&program, &dir, &iterations, "branch");
    let long = std::env::var("RETRACE_BENCH_BRANCH_ITERATIONS").unwrap_or_else(|_| "100000".into());
    let long_branch = stub_record(&program, &dir, &long, "branch");
    let collector = collector_branch(&program, &long);
    println!("bench_loop {iterations} (static -O1), bench_begin to bench_end");
    println!("{:<36} {:>12} {:>9} {:>12} {:>10} {:>12}", "recorder", "instructions", "seconds", "instr/s", "B/instr", "RSS B/instr");
    for (name, m) in [
        ("GDB 13 record full (native)", &gdb),
        ("GDB 13 record full (taskset -c 0)", &pinned),
        ("retrace-stub --record=full", &full),
        ("retrace-stub --record=branch", &branch),
    ] {
        println!(
            "{name:<36} {:>12} {:>9.3} {:>12.0} {:>10.1} {:>12.1}",
            m.instructions,
            m.seconds,
            m.instructions as f64 / m.seconds,
            m.bytes / m.instructions as f64,
            m.resident / m.instructions as f64
        );
    }
    let rate = |m: &Measured| m.instructions as f64 / m.seconds;
    let per = |m: &Measured| m.bytes / m.instructions as f64;
    println!("full recording speed vs GDB record full: {:.2}x (goal >= 10x; at least 3x needed)", rate(&full) / rate(&gdb));
    println!("full recording speed vs GDB record full pinned to one CPU: {:.2}x", rate(&full) / rate(&pinned));
    println!("full bytes per instruction vs GDB record full: {:.3}x (goal <= 0.1x)", per(&full) / per(&gdb));
    println!("full resident growth per instruction vs GDB record full: {:.3}x", (full.resident / full.instructions as f64) / per(&gdb));
    println!("branch recording speed vs GDB record full: {:.2}x", rate(&branch) / rate(&gdb));
    println!();
    println!("bench_loop {long}: branch mode");
    println!("{:<52} {:>12} {:>9} {:>12}", "recorder", "instructions", "seconds", "instr/s");
    for (name, m) in [("retrace record --mode branch (collector, whole run)", &collector), ("retrace-stub --record=branch (GDB, the stretch)", &long_branch)] {
        println!("{name:<52} {:>12} {:>9.3} {:>12.0}", m.instructions, m.seconds, rate(m));
    }
    println!("branch recording under the stub vs retrace record --mode branch: {:.2}x (goal >= 0.8x)", rate(&long_branch) / rate(&collector));
}
