//! Full-state recording (`retrace record --backend valgrind --mode full`)
//! against GDB 13's own `record full`, in one run, on the baseline workload
//! (`tests/programs/bench_loop.c`, static -O1, `-no-pie`):
//!
//! 1. GDB's `record full` from `main` to `bench_end` over
//!    RETRACE_FULL_BENCH_GDB iterations (default 13 333: ~200 k
//!    instructions, GDB's default log limit): instructions in its log and
//!    seconds, hence instructions per second;
//! 2. the same program recorded by retrace with full state over
//!    RETRACE_FULL_BENCH_ITERATIONS iterations (default 666 666: ~10 M
//!    instructions): instructions, seconds, bytes of `state.rtstate` (and
//!    of the whole bundle) per instruction, the recorder's peak RSS;
//! 3. `retrace-stub --record=full` (the live program single-stepped) over
//!    the same iterations as GDB's, driven by GDB: instructions, seconds,
//!    bytes of its state log per instruction;
//! 4. the ratios of the instructions per second.
//!
//! cargo bench -p retrace-plugin --bench valgrind_full

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

fn build(dir: &Path) -> PathBuf {
    let exe = dir.join("bench_loop");
    let source = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/programs/bench_loop.c");
    let out = Command::new("gcc").args(["-O1", "-g", "-static", "-no-pie", "-o"]).arg(&exe).arg(source).output().expect("gcc");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    exe
}

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// `gdb -batch` on `program` with these commands: what it printed.
fn gdb_batch(program: &Path, commands: &[String]) -> String {
    let mut gdb = Command::new("gdb");
    gdb.args(["-nx", "-batch"]);
    for command in commands {
        gdb.args(["-ex", command]);
    }
    let out = gdb.arg(program).stdin(Stdio::null()).output().expect("gdb");
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

/// GDB 13's `record full` of `main` to `bench_end`: (instructions in its
/// log, seconds from `record full` to the stop at `bench_end`).
fn gdb_record_full(program: &Path, iterations: u64) -> (u64, f64) {
    let commands = [
        "set pagination off".to_string(),
        "break main".into(),
        format!("run {iterations}"),
        "set record full insn-number-max unlimited".into(),
        "break bench_end".into(),
        "python import time; t = time.time()".into(),
        "record full".into(),
        "continue".into(),
        "python print('SECONDS %.6f' % (time.time() - t))".into(),
        "info record".into(),
        "kill".into(),
    ];
    let text = gdb_batch(program, &commands);
    let instructions = text.lines().find_map(|l| l.strip_prefix("Log contains ")?.strip_suffix(" instructions.")?.parse().ok()).unwrap_or_else(|| panic!("{text}"));
    let seconds = text.lines().find_map(|l| l.strip_prefix("SECONDS ")?.parse().ok()).unwrap_or_else(|| panic!("{text}"));
    (instructions, seconds)
}

/// `retrace-stub --record=full` (single-stepping the live program) from
/// its first instruction to `bench_end`, driven by GDB 13: (instructions
/// in its history, seconds of the continue, bytes of its state log).
fn stub_record_full(program: &Path, iterations: u64) -> (u64, f64, u64) {
    let stub = Path::new(env!("CARGO_BIN_EXE_retrace")).with_file_name("retrace-stub");
    if !stub.exists() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let built = Command::new(cargo).args(["build", "--release", "-p", "retrace-stub", "--bin", "retrace-stub"]).status().expect("cargo");
        assert!(built.success(), "building retrace-stub");
    }
    let mut child = Command::new(&stub)
        .args(["--record=full", "--listen", "127.0.0.1:0", "--"])
        .arg(program)
        .arg(iterations.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("retrace-stub");
    let mut line = String::new();
    let mut stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    while !line.contains("listening on") {
        line.clear();
        assert!(std::io::BufRead::read_line(&mut stderr, &mut line).unwrap() > 0, "the stub ended before listening");
    }
    let address = line.trim().rsplit(' ').next().unwrap().to_string();
    let commands = [
        format!("target remote {address}"),
        "break bench_end".into(),
        "python import time; t = time.time()".into(),
        "continue".into(),
        "python print('SECONDS %.6f' % (time.time() - t))".into(),
        "monitor record status --json".into(),
        "kill".into(),
    ];
    let text = gdb_batch(program, &commands);
    let _ = child.kill();
    let _ = child.wait();
    let seconds = text.lines().find_map(|l| l.strip_prefix("SECONDS ")?.parse().ok()).unwrap_or_else(|| panic!("{text}"));
    let status: serde_json::Value = text.lines().find_map(|l| serde_json::from_str(l).ok().filter(|v: &serde_json::Value| v.get("instructions").is_some())).unwrap_or_else(|| panic!("{text}"));
    (status["instructions"].as_u64().unwrap(), seconds, status["bytes"].as_u64().unwrap_or(0))
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("bench-valgrind-full");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let program = build(&dir);
    let gdb_iterations = env_number("RETRACE_FULL_BENCH_GDB", 13_333);
    let iterations = env_number("RETRACE_FULL_BENCH_ITERATIONS", 666_666);

    let (gdb_instructions, gdb_seconds) = gdb_record_full(&program, gdb_iterations);
    let gdb_rate = gdb_instructions as f64 / gdb_seconds;
    let (stub_instructions, stub_seconds, stub_bytes) = stub_record_full(&program, gdb_iterations);
    let stub_rate = stub_instructions as f64 / stub_seconds;

    let bundle = dir.join("bundle");
    let start = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_retrace"))
        .args(["record", "--backend", "valgrind", "--mode", "full", "--json", "-o"])
        .arg(&bundle)
        .arg("--")
        .arg(&program)
        .arg(iterations.to_string())
        .stdin(Stdio::null())
        .output()
        .expect("retrace record");
    let seconds = start.elapsed().as_secs_f64();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let summary: serde_json::Value = serde_json::from_str(stderr.lines().last().unwrap()).unwrap_or_else(|e| panic!("{e}: {stderr}"));
    let instructions = summary["instructions"].as_u64().unwrap();
    let state = std::fs::metadata(bundle.join("state.rtstate")).unwrap().len();
    let trace = summary["trace_bytes"].as_u64().unwrap();
    let rate = instructions as f64 / seconds;

    println!("bench_loop (static -O1 -no-pie), full state: every register and byte at every instruction");
    println!("  GDB 13 record full            {gdb_instructions:>10} instructions  {gdb_seconds:>8.2} s  {:>12.0} instructions/s", gdb_rate);
    println!(
        "  retrace --backend valgrind --mode full  {instructions:>10} instructions  {seconds:>8.2} s  {:>12.0} instructions/s  {:.2} state bytes/instruction (+{:.3} PT)  peak RSS {} MiB",
        rate,
        state as f64 / instructions as f64,
        trace as f64 / instructions as f64,
        summary["peak_rss_kib"].as_u64().unwrap_or(0) / 1024
    );
    println!(
        "  retrace-stub --record=full      {stub_instructions:>10} instructions  {stub_seconds:>8.2} s  {:>12.0} instructions/s  {:.2} bytes/instruction in its state log",
        stub_rate,
        stub_bytes as f64 / stub_instructions as f64
    );
    println!("  instructions per second, retrace / GDB record full: {:.0}x (goal >= 100x, 1000x)", rate / gdb_rate);
    println!("  instructions per second, retrace / retrace-stub --record=full: {:.0}x", rate / stub_rate);
}
