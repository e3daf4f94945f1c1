//! Replaying a full-state recording (`retrace record --mode full`, under
//! Valgrind) with `retrace-stub --replay`, driven by raw gdb-remote
//! packets, at each history length asked for (default 10⁶ and 10⁸
//! instructions; `RETRACE_REPLAY_BENCH=1000000,100000000`), on
//! `tests/programs/replay_bench.c` (static -O1 -no-pie): a loop of ~16
//! instructions an iteration that calls `bench_mark` once, 10⁷
//! instructions before `bench_end` (half the history, if shorter).
//!
//! For each length, in one run:
//! 1. the replay server's start (bundle decoded and indexed, until it
//!    listens) and its resident memory then;
//! 2. `bc` from the end of the history back to the hit of `bench_mark`,
//!    checked: the PC, `marked` (still -1 there) and `sink` (the sum the
//!    loop had reached, computed here);
//! 3. at that position, medians of 20: memory reads (`m`) of `sink`
//!    (written ~20 instructions before), of `__environ` (written by the C
//!    library's start-up, at the far start of the history), 64 and 512
//!    bytes at the stack pointer; `g`; `bs` + `g` and `s` + `g`;
//! 4. `c` from there forwards to `bench_end` (10⁷ instructions), and `bc`
//!    from the end to the write of `marked` (a watchpoint, 10⁷ back);
//! 5. the server's peak resident memory (`VmHWM`).
//!
//! `cargo bench -p retrace-stub --bench replay_full_state`

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use object::{Object, ObjectSymbol};

#[path = "../tests/common/mod.rs"]
mod common;

/// The stub measured: this build's, or another build's (`RETRACE_STUB`,
/// e.g. an earlier commit's release binary, to compare the two runs'
/// ratios).
fn stub_binary() -> std::ffi::OsString {
    std::env::var_os("RETRACE_STUB").unwrap_or_else(|| env!("CARGO_BIN_EXE_retrace-stub").into())
}

/// Instructions an iteration of the loop runs (measured: the recording's
/// count over its iterations, ~16).
const PER_ITERATION: u64 = 16;

/// How far back the breakpoint hit and the watched write are.
const BACK: u64 = 10_000_000;

fn symbol(program: &Path, name: &str) -> u64 {
    let data = std::fs::read(program).unwrap();
    let file = object::File::parse(&*data).unwrap();
    file.symbols().find(|s| s.name() == Ok(name)).unwrap_or_else(|| panic!("no {name}")).address()
}

/// What `work(i)` returns: `i` if odd, plus `0·i + 1·i + 2·i`.
fn work(i: i64) -> i64 {
    (if i & 1 == 1 { i } else { 0 }) + 3 * i
}

fn status_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status.lines().find_map(|l| l.strip_prefix(field)?.trim().strip_suffix("kB")?.trim().parse().ok()).unwrap_or(0)
}

type Replay = common::RawSession;

/// `m`: the 8 bytes at `address`, little-endian, as a number.
fn word(replay: &mut Replay, address: u64) -> i64 {
    let reply = common::run_length_decoded(&replay.send(&format!("m{address:x},8")));
    let bytes: Vec<u8> = (0..8).map(|i| u8::from_str_radix(&reply[2 * i..2 * i + 2], 16).unwrap_or_else(|_| panic!("m {address:#x}: {reply}"))).collect();
    i64::from_le_bytes(bytes.try_into().unwrap())
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// Median seconds of 20 runs of `run`.
fn timed20(replay: &mut Replay, mut run: impl FnMut(&mut Replay)) -> f64 {
    median(
        (0..20)
            .map(|_| {
                let start = Instant::now();
                run(replay);
                start.elapsed().as_secs_f64()
            })
            .collect(),
    )
}

fn ms(seconds: f64) -> String {
    format!("{:>9.3} ms", seconds * 1e3)
}

fn bench(program: &Path, dir: &Path, length: u64) {
    let iterations = length / PER_ITERATION;
    let back = BACK.min(length / 2);
    let mark = iterations - back / PER_ITERATION;
    let bundle = dir.join(format!("bundle-{length}"));
    let _ = std::fs::remove_dir_all(&bundle);
    let recording = Instant::now();
    let out = common::retrace()
        .args(["record", "--mode", "full", "--json", "-o"])
        .arg(&bundle)
        .arg("--")
        .arg(program)
        .args([iterations.to_string(), mark.to_string()])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let recording = recording.elapsed().as_secs_f64();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let summary: serde_json::Value = serde_json::from_str(stderr.lines().last().unwrap()).unwrap_or_else(|e| panic!("{e}: {stderr}"));
    let instructions = summary["instructions"].as_u64().unwrap();
    let state_bytes = std::fs::metadata(bundle.join("state.rtstate")).unwrap().len();

    let (mark_pc, end_pc, sink, marked, environ) =
        (symbol(program, "bench_mark"), symbol(program, "bench_end"), symbol(program, "sink"), symbol(program, "marked"), symbol(program, "__environ"));
    let mut command = Command::new(stub_binary());
    command.arg("--replay").arg(bundle.join("trace.json")).args(["--listen", "127.0.0.1:0"]);
    let start = Instant::now();
    let (stub, line) = common::spawn_stub(command);
    let load = start.elapsed().as_secs_f64();
    let pid = stub.id();
    let rss_loaded = status_kib(pid, "VmRSS:");
    let mut replay = Replay::open(stub, common::port_of(&line));

    // 2. bc back to the mark.
    replay.send(&format!("Z0,{mark_pc:x},1"));
    let (reply, bc) = replay.timed("bc");
    replay.stop_at(&reply, mark_pc, "bc to bench_mark");
    assert_eq!(word(&mut replay, marked), -1, "marked before bench_mark's store");
    let expected: i64 = (0..mark as i64).map(work).sum();
    assert_eq!(word(&mut replay, sink), expected, "sink when bench_mark is called");
    assert_ne!(word(&mut replay, environ), 0, "__environ, set at the start");

    // 3. Reads and steps there.
    let rsp = replay.register(7);
    let read_sink = timed20(&mut replay, |r| {
        r.send(&format!("m{sink:x},8"));
    });
    let read_environ = timed20(&mut replay, |r| {
        r.send(&format!("m{environ:x},8"));
    });
    let read_stack = timed20(&mut replay, |r| {
        r.send(&format!("m{rsp:x},40"));
    });
    let read_page = timed20(&mut replay, |r| {
        r.send(&format!("m{:x},200", rsp - 256));
    });
    let registers = timed20(&mut replay, |r| {
        r.send("g");
    });
    let back_step = timed20(&mut replay, |r| {
        let reply = r.send("bs");
        assert!(reply.starts_with('T'), "bs: {reply}");
        r.send("g");
    });
    let step = timed20(&mut replay, |r| {
        let reply = r.send("s");
        assert!(reply.starts_with('T'), "s: {reply}");
        r.send("g");
    });
    assert_eq!(replay.register(16), mark_pc, "20 s undo 20 bs");
    // LLDB reads a stop's registers one `p` at a time.
    let back_step_each = timed20(&mut replay, |r| {
        let reply = r.send("bs");
        assert!(reply.starts_with('T'), "bs: {reply}");
        for n in 0..24 {
            r.send(&format!("p{n:x}"));
        }
    });
    for _ in 0..20 {
        assert!(replay.send("s").starts_with('T'));
    }
    assert_eq!(replay.register(16), mark_pc, "20 s undo 20 bs");

    // 4. Forwards to the end, then back to the watched write.
    replay.send(&format!("z0,{mark_pc:x},1"));
    replay.send(&format!("Z0,{end_pc:x},1"));
    let (reply, forward) = replay.timed("c");
    replay.stop_at(&reply, end_pc, "c to bench_end");
    replay.send(&format!("z0,{end_pc:x},1"));
    replay.send(&format!("Z2,{marked:x},8"));
    let (reply, watch) = replay.timed("bc");
    assert!(reply.contains("watch:"), "bc to the write of marked: {reply}");
    // Stopped before the store (as GDB shows a reverse watchpoint stop);
    // one step on, its value.
    assert_eq!(word(&mut replay, marked), -1, "marked at its write, backwards");
    assert!(replay.send("s").starts_with('T'));
    assert_eq!(word(&mut replay, marked), mark as i64, "marked just after its write");
    let rss_peak = status_kib(pid, "VmHWM:");
    drop(replay);

    let reads = [read_sink, read_environ, read_stack, read_page];
    println!("{instructions} instructions recorded in {recording:.1} s ({:.2} state bytes/instruction)", state_bytes as f64 / instructions as f64);
    println!("  replay server start (decode, index)      {:>9.2} s    resident then {} MiB", load, rss_loaded / 1024);
    println!("  bc to the bench_mark hit {back} back   {}   (target <= 1 s at 10^8)", ms(bc));
    println!("  m sink (written ~20 instructions before) {}", ms(read_sink));
    println!("  m __environ (written at the start)       {}", ms(read_environ));
    println!("  m 64 bytes at rsp                        {}", ms(read_stack));
    println!("  m 512 bytes around rsp                   {}", ms(read_page));
    println!("  slowest read                             {}   (target <= 10 ms)", ms(reads.iter().copied().fold(0.0, f64::max)));
    println!("  g                                        {}", ms(registers));
    println!("  bs + g                                   {}", ms(back_step));
    println!("  s + g                                    {}", ms(step));
    println!("  bs + p x 24 (as LLDB reads a stop)       {}", ms(back_step_each));
    println!("  c forwards {back} to bench_end       {}", ms(forward));
    println!("  bc to the write of marked {back} back  {}", ms(watch));
    println!("  replay server peak RSS                   {:>9} MiB   (target <= 1024 MiB at 10^8)", rss_peak / 1024);
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let lengths: Vec<u64> = std::env::var("RETRACE_REPLAY_BENCH").unwrap_or_else(|_| "1000000,100000000".into()).split(',').map(|n| n.trim().parse().expect("RETRACE_REPLAY_BENCH: instruction counts")).collect();
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("bench-replay-full-state");
    let program = retrace_tests::recordings::build("replay_bench", &dir, &["-O1", "-static", "-no-pie"]);
    println!("replay_bench (static -O1 -no-pie), retrace-stub --replay of a full-state recording, raw packets");
    for length in lengths {
        bench(&program, &dir, length);
    }
}
