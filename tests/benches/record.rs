//! Recorder speed: instructions per second of retrace's software recorder in
//! step mode and branch mode, and of `gdb -batch` `record full`, on the same
//! workload in one run. `cargo bench -p retrace-tests --bench record`
//!
//! `RETRACE_BENCH_ITERATIONS` sets the workload's loop count (default 3000;
//! ~55 instructions per iteration).

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use retrace_collector::process::{current_cpu, launch, LaunchOptions};
use retrace_collector::ptrace_recorder::{record, RecordOptions, StepMode};
use retrace_collector::recording::Outcome;

fn main() {
    let iterations: u64 = std::env::var("RETRACE_BENCH_ITERATIONS").ok().and_then(|v| v.parse().ok()).unwrap_or(3000);
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("bench-record");
    std::fs::create_dir_all(&dir).unwrap();
    let exe = dir.join("bench_loop");
    let source = concat!(env!("CARGO_MANIFEST_DIR"), "/programs/bench_loop.c");
    let ok = Command::new("gcc").args(["-O1", "-g", "-static", "-o"]).arg(&exe).arg(source).status().unwrap().success();
    assert!(ok, "gcc failed");
    let n = iterations.to_string();

    let retrace = |mode: StepMode| {
        let mut options = LaunchOptions::new(exe.as_os_str(), [n.as_str()]);
        options.pin_cpu = Some(current_cpu());
        let tracee = launch(&options).expect("launch");
        let start = Instant::now();
        let recording = record(tracee, &RecordOptions { mode, ..RecordOptions::default() }).expect("record");
        let seconds = start.elapsed().as_secs_f64();
        assert_eq!(recording.outcome, Outcome::Exited(0));
        (recording.instructions(), seconds)
    };
    let (step_insns, step_s) = retrace(StepMode::Step);
    let (branch_insns, branch_s) = retrace(StepMode::Branch);
    assert_eq!(step_insns, branch_insns, "step and branch mode must record the same instructions");

    // gdb: record full from bench_begin to bench_end, pinned like the recorder.
    let gdb_start = Instant::now();
    let gdb = Command::new("taskset")
        .args(["-c", &current_cpu().to_string(), "gdb", "-batch", "-nx"])
        .args(["-ex", "break bench_begin", "-ex", &format!("run {n}"), "-ex", "record full"])
        .args(["-ex", "set record full insn-number-max unlimited", "-ex", "break bench_end"])
        .args(["-ex", "continue", "-ex", "info record"])
        .arg(&exe)
        .output()
        .expect("run gdb");
    let gdb_s = gdb_start.elapsed().as_secs_f64();
    let text = String::from_utf8_lossy(&gdb.stdout);
    let gdb_insns: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("Log contains ").and_then(|r| r.split_whitespace().next()).and_then(|v| v.parse().ok()))
        .unwrap_or_else(|| panic!("gdb did not report its log: {text}"));

    println!("recording {} (static -O1, {iterations} iterations), pinned to one CPU", exe.display());
    println!("{:<26} {:>12} {:>9} {:>13}", "recorder", "instructions", "seconds", "instr/s");
    let rows = [
        ("retrace --mode step", step_insns, step_s),
        ("retrace --mode branch", branch_insns, branch_s),
        ("gdb record full", gdb_insns, gdb_s),
    ];
    for (name, insns, s) in rows {
        println!("{name:<26} {insns:>12} {s:>9.2} {:>13.0}", insns as f64 / s);
    }
    let rate = |i: u64, s: f64| i as f64 / s;
    println!("branch / step:      {:.1}x", rate(branch_insns, branch_s) / rate(step_insns, step_s));
    println!("step / gdb record:  {:.1}x", rate(step_insns, step_s) / rate(gdb_insns, gdb_s));
    println!("branch / gdb record: {:.1}x", rate(branch_insns, branch_s) / rate(gdb_insns, gdb_s));
}
