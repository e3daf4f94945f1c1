//! `retrace record --backend valgrind` against native runs, in one run:
//! `gzip -6 -c` of a generated text (RETRACE_VG_BENCH_MB, default 15 MB),
//! natively, under `valgrind --tool=none`, and recorded by retrace under
//! Valgrind; and, on a slice small enough for it (RETRACE_VG_BENCH_SLICE_KB,
//! default 32 KB), recorded by the ptrace backend in branch mode and under
//! Valgrind; then a python3 script and `sort` of 4 MiB natively, under
//! `--tool=none` and recorded. Prints wall times, ratios, instructions per
//! second, PT bytes per instruction and the recorder's peak RSS.
//!
//! cargo bench -p retrace-plugin --bench valgrind

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

/// A text of `bytes` bytes: words from a fixed list in a fixed pseudo-random
/// order (compressible as prose is).
fn text(bytes: usize) -> Vec<u8> {
    const WORDS: [&str; 24] = [
        "time", "travel", "debugger", "records", "the", "program", "branch", "trace", "packet", "of", "and", "instruction", "thread", "value",
        "memory", "register", "backwards", "stop", "step", "continue", "a", "in", "to", "history",
    ];
    let mut out = Vec::with_capacity(bytes + 16);
    let mut state = 0x2545f4914f6cdd1du64;
    let mut column = 0;
    while out.len() < bytes {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let word = WORDS[(state % WORDS.len() as u64) as usize];
        out.extend_from_slice(word.as_bytes());
        column += word.len() + 1;
        if column > 70 {
            out.push(b'\n');
            column = 0;
        } else {
            out.push(b' ');
        }
    }
    out.truncate(bytes);
    out
}

fn timed(command: &mut Command) -> (f64, std::process::Output) {
    let start = Instant::now();
    let out = command.stdin(Stdio::null()).output().expect("run");
    (start.elapsed().as_secs_f64(), out)
}

fn gzip(input: &Path) -> Vec<String> {
    vec!["/usr/bin/gzip".into(), "-6".into(), "-c".into(), input.display().to_string()]
}

/// Records `gzip` of `input` with `backend` (and `extra` options): wall
/// time and the --json summary.
fn record(dir: &Path, name: &str, backend: &[&str], input: &Path) -> (f64, serde_json::Value) {
    let bundle = dir.join(name);
    let _ = std::fs::remove_dir_all(&bundle);
    let (seconds, out) = timed(Command::new(env!("CARGO_BIN_EXE_retrace")).arg("record").args(backend).arg("--json").arg("-o").arg(&bundle).arg("--").args(gzip(input)));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let summary: serde_json::Value = serde_json::from_str(stderr.lines().last().unwrap()).unwrap_or_else(|e| panic!("{e}: {stderr}"));
    (seconds, summary)
}

/// `command` natively (best of three), under `valgrind --tool=none` and
/// recorded under Valgrind by retrace: one line each.
fn compare(dir: &Path, name: &str, command: &[String]) {
    let native = (0..3).map(|_| timed(Command::new(&command[0]).args(&command[1..])).0).fold(f64::INFINITY, f64::min);
    let (none, _) = timed(Command::new("valgrind").args(["-q", "--tool=none"]).args(command));
    let bundle = dir.join(name);
    let _ = std::fs::remove_dir_all(&bundle);
    let (ours, out) = timed(Command::new(env!("CARGO_BIN_EXE_retrace")).args(["record", "--backend", "valgrind", "--json", "-o"]).arg(&bundle).arg("--").args(command));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let summary: serde_json::Value = serde_json::from_str(stderr.lines().last().unwrap()).unwrap_or_else(|e| panic!("{e}: {stderr}"));
    let instructions = summary["instructions"].as_u64().unwrap();
    println!("{name} ({instructions} instructions recorded):");
    println!("  native                       {native:8.2} s   1.0x");
    println!("  valgrind --tool=none         {none:8.2} s  {:5.1}x", none / native);
    println!(
        "  retrace --backend valgrind   {ours:8.2} s  {:5.1}x  {:.0} M instructions/s  {:.3} PT bytes/instruction  peak RSS {} MiB  decode errors {}",
        ours / native,
        instructions as f64 / ours / 1e6,
        summary["trace_bytes"].as_u64().unwrap() as f64 / instructions as f64,
        summary["peak_rss_kib"].as_i64().unwrap_or(0) / 1024,
        decode_errors(dir, name)
    );
}

fn decode_errors(dir: &Path, name: &str) -> u64 {
    let out = Command::new(env!("CARGO_BIN_EXE_retrace")).args(["dump", "info", "--json"]).arg(dir.join(name).join("trace.json")).output().unwrap();
    let info: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    info["threads"].as_array().unwrap().iter().map(|t| t["errors"].as_u64().unwrap()).sum()
}

fn main() {
    let mb: usize = std::env::var("RETRACE_VG_BENCH_MB").ok().and_then(|v| v.parse().ok()).unwrap_or(15);
    let slice_kb: usize = std::env::var("RETRACE_VG_BENCH_SLICE_KB").ok().and_then(|v| v.parse().ok()).unwrap_or(32);
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("bench-valgrind");
    std::fs::create_dir_all(&dir).unwrap();
    let big = dir.join("text");
    std::fs::write(&big, text(mb << 20)).unwrap();
    let small = dir.join("slice");
    std::fs::write(&small, text(slice_kb << 10)).unwrap();

    let args = gzip(&big);
    let native = (0..3).map(|_| timed(Command::new(&args[0]).args(&args[1..])).0).fold(f64::INFINITY, f64::min);
    let (none, _) = timed(Command::new("valgrind").args(["-q", "--tool=none"]).args(&args));
    let (ours, summary) = record(&dir, "valgrind", &["--backend", "valgrind"], &big);
    let instructions = summary["instructions"].as_u64().unwrap();
    let trace = summary["trace_bytes"].as_u64().unwrap();
    let errors = decode_errors(&dir, "valgrind");

    let slice_args = gzip(&small);
    let slice_native = (0..3).map(|_| timed(Command::new(&slice_args[0]).args(&slice_args[1..])).0).fold(f64::INFINITY, f64::min);
    let (slice_ours, slice_summary) = record(&dir, "slice-valgrind", &["--backend", "valgrind"], &small);
    let (slice_branch, branch_summary) = record(&dir, "slice-branch", &["--backend", "ptrace", "--ptrace-stops", "branch"], &small);
    let rate = |n: u64, s: f64| n as f64 / s;
    let ours_rate = rate(slice_summary["instructions"].as_u64().unwrap(), slice_ours);
    let branch_rate = rate(branch_summary["instructions"].as_u64().unwrap(), slice_branch);

    println!("gzip -6 -c of {mb} MiB of text ({instructions} instructions recorded):");
    println!("  native                       {native:8.2} s   1.0x");
    println!("  valgrind --tool=none         {none:8.2} s  {:5.1}x", none / native);
    println!(
        "  retrace --backend valgrind   {ours:8.2} s  {:5.1}x  {:.0} M instructions/s  {:.3} PT bytes/instruction  peak RSS {} MiB  decode errors {errors}",
        ours / native,
        rate(instructions, ours) / 1e6,
        trace as f64 / instructions as f64,
        summary["peak_rss_kib"].as_i64().unwrap_or(0) / 1024
    );
    println!("gzip -6 -c of {slice_kb} KiB ({} instructions):", slice_summary["instructions"]);
    println!("  native                       {slice_native:8.3} s   1.0x");
    println!("  retrace --backend valgrind   {slice_ours:8.2} s  {:5.0}x  {:.2} M instructions/s (a short run: Valgrind's start-up dominates)", slice_ours / slice_native, ours_rate / 1e6);
    println!("  retrace --ptrace-stops branch {slice_branch:7.2} s  {:5.0}x  {:.2} M instructions/s", slice_branch / slice_native, branch_rate / 1e6);
    println!(
        "  instructions per second, valgrind backend / branch mode: {:.0}x on this slice (start-up dominates it), {:.0}x with the valgrind backend's rate on {mb} MiB",
        ours_rate / branch_rate,
        rate(instructions, ours) / branch_rate
    );
    // A python3 script (the interpreter's start-up and a loop of dict and
    // string work) and sort of 4 MiB of the text.
    let script = "d = {}\nfor i in range(200000):\n    d[str(i) * 3] = i % 7\nprint(sum(d.values()))";
    compare(&dir, "python3", &["/usr/bin/python3".into(), "-c".into(), script.into()]);
    let sort_input = dir.join("sort-input");
    std::fs::write(&sort_input, text(4 << 20)).unwrap();
    compare(&dir, "sort", &["/usr/bin/sort".into(), sort_input.display().to_string()]);
}
