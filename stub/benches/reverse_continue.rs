//! Moving backwards through a `--record=full` history, in one run, on the
//! baseline workload (`tests/programs/bench_loop.c`, static -O1):
//!
//! 1. `bc` back to `bench_begin` (hit once, before the loop) from
//!    `bench_end` over a history of about 200,000 instructions (GDB's
//!    default `record full` limit), against GDB 13's own `record full`
//!    `reverse-continue` over the same stretch run natively;
//! 2. over a history of 10 million instructions (`RETRACE_BENCH_LONG`): the
//!    same `bc`, and `bc` to a write watchpoint on `__environ` (written
//!    once, by the C library's start-up) — each from the packet sent to the
//!    stop reply, against one forward `c` round trip of the same session
//!    (from a stop at `work` to its next call, one loop iteration recorded);
//!    and forward replay: `c` from `bench_begin` through the whole history
//!    to `bench_end` (medians of 5, alternating with the `bc`);
//! 3. `bs` round trips against forward `s` round trips (each followed by a
//!    `g`, as clients read the registers at every stop), medians of 50.
//!
//! `cargo bench -p retrace-stub --bench reverse_continue`
//! (`RETRACE_BENCH_LONG`: the long history's loop count, default 666666:
//! 10 million instructions at 15 an iteration; recording it takes minutes).

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

/// The address of symbol `name` in `program`.
fn symbol(program: &Path, name: &str) -> u64 {
    let data = std::fs::read(program).unwrap();
    let file = object::File::parse(&*data).unwrap();
    file.symbols().find(|s| s.name() == Ok(name)).unwrap_or_else(|| panic!("no {name}")).address()
}

/// GDB 13's `record full` from `main` to `bench_end`, then
/// `reverse-continue` to `bench_begin`: (instructions in its log, seconds
/// of the reverse-continue).
fn gdb_reverse_continue(program: &Path, iterations: u64) -> (u64, f64) {
    let timer = "python import time; t = time.time()";
    let commands = [
        "set pagination off",
        "break main",
        &format!("run {iterations}"),
        "record full",
        "set record full insn-number-max unlimited",
        "break bench_end",
        "continue",
        "info record",
        "break bench_begin",
        timer,
        "reverse-continue",
        "python print('SECONDS %.6f' % (time.time() - t))",
        "info line *$pc",
        "kill",
    ];
    let mut gdb = Command::new("gdb");
    gdb.args(["-nx", "-batch"]);
    for command in commands {
        gdb.args(["-ex", command]);
    }
    let out = gdb.arg(program).stdin(Stdio::null()).output().unwrap();
    let out = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    let instructions = out.lines().find_map(|l| l.strip_prefix("Log contains ")?.strip_suffix(" instructions.")?.parse().ok());
    let seconds = out.lines().find_map(|l| l.strip_prefix("SECONDS ")?.parse().ok());
    assert!(out.contains("Breakpoint 3, bench_begin"), "GDB's reverse-continue did not stop at bench_begin:\n{out}");
    (instructions.unwrap_or_else(|| panic!("{out}")), seconds.unwrap_or_else(|| panic!("{out}")))
}

type Session = common::RawSession;

/// `retrace-stub --record=full` on `program iterations`, a raw session with it.
fn start(program: &Path, iterations: u64) -> Session {
    let mut command = Command::new(stub_binary());
    command.args(["--record=full", "--listen", "127.0.0.1:0", "--"]).arg(program).arg(iterations.to_string());
    let (stub, line) = common::spawn_stub(command);
    let (_, port) = common::pid_and_port(&line);
    Session::open(stub, port)
}

/// `monitor COMMAND`: the text its `O` packets carried before `OK`.
fn monitor(session: &mut Session, command: &str) -> String {
    let mut reply = session.send(&format!("qRcmd,{}", command.bytes().map(|b| format!("{b:02x}")).collect::<String>()));
    let mut text = String::new();
    while let Some(body) = reply.strip_prefix('O').filter(|_| reply != "OK") {
        text.extend((0..body.len() / 2).map(|i| u8::from_str_radix(&body[2 * i..2 * i + 2], 16).unwrap() as char));
        reply = common::read_packet(&mut session.stream).unwrap();
    }
    assert_eq!(reply, "OK", "monitor {command}: {text}");
    text
}

fn instructions(session: &mut Session) -> u64 {
    let text = monitor(session, "record status --json");
    let status: serde_json::Value = serde_json::from_str(text.trim()).unwrap_or_else(|_| panic!("record status: {text}"));
    status["instructions"].as_u64().unwrap()
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn ms(seconds: f64) -> String {
    format!("{:.2} ms", seconds * 1e3)
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let long: u64 = std::env::var("RETRACE_BENCH_LONG").map_or(666_666, |n| n.parse().unwrap());
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("bench-reverse-continue");
    let program = retrace_tests::recordings::build("bench_loop", &dir, &["-O1", "-static"]);
    let (begin, end, work, environ) = (symbol(&program, "bench_begin"), symbol(&program, "bench_end"), symbol(&program, "work"), symbol(&program, "__environ"));

    // 1. About 200,000 instructions: bc against GDB's reverse-continue.
    let short = 13_333;
    let (gdb_instructions, gdb_seconds) = gdb_reverse_continue(&program, short);
    let mut session = start(&program, short);
    session.send(&format!("Z0,{end:x},1"));
    let reply = session.send("c");
    session.stop_at(&reply, end, "c to bench_end");
    let history = instructions(&mut session);
    session.send(&format!("z0,{end:x},1"));
    session.send(&format!("Z0,{begin:x},1"));
    let (reply, bc_short) = session.timed("bc");
    session.stop_at(&reply, begin, "bc to bench_begin");
    drop(session);

    // 2. A long history.
    let mut session = start(&program, long);
    session.send(&format!("Z0,{work:x},1"));
    let reply = session.send("c");
    session.stop_at(&reply, work, "c to work");
    let forward: Vec<f64> = (0..5)
        .map(|_| {
            let (reply, seconds) = session.timed("c");
            session.stop_at(&reply, work, "c to work again");
            seconds
        })
        .collect();
    let forward = median(forward);
    session.send(&format!("z0,{work:x},1"));
    session.send(&format!("Z0,{end:x},1"));
    let recording = Instant::now();
    let reply = session.send("c");
    let recording = recording.elapsed().as_secs_f64();
    session.stop_at(&reply, end, "c to bench_end");
    let long_history = instructions(&mut session);

    // 3. bs against s, at the end of the history (s records one more step).
    let mut steps = Vec::new();
    let mut back_steps = Vec::new();
    for _ in 0..50 {
        let start = Instant::now();
        let reply = session.send("s");
        assert!(reply.starts_with('T'), "s: {reply}");
        session.send("g");
        steps.push(start.elapsed().as_secs_f64());
    }
    for _ in 0..50 {
        let start = Instant::now();
        let reply = session.send("bs");
        assert!(reply.starts_with('T'), "bs: {reply}");
        session.send("g");
        back_steps.push(start.elapsed().as_secs_f64());
    }
    let (step, back_step) = (median(steps), median(back_steps));
    // Back where the steps started: every one undone.
    assert_eq!(session.register(16), end, "50 bs undo 50 s");

    // bc to bench_begin, then forward replay from it through the whole
    // history to bench_end (where the live process stands), five times
    // each: medians.
    let (mut back, mut ahead) = (Vec::new(), Vec::new());
    for _ in 0..5 {
        session.send(&format!("z0,{end:x},1"));
        session.send(&format!("Z0,{begin:x},1"));
        let (reply, seconds) = session.timed("bc");
        session.stop_at(&reply, begin, "bc to bench_begin over the long history");
        back.push(seconds);
        session.send(&format!("z0,{begin:x},1"));
        session.send(&format!("Z0,{end:x},1"));
        let (reply, seconds) = session.timed("c");
        session.stop_at(&reply, end, "c replayed forwards to bench_end");
        ahead.push(seconds);
    }
    let (bc_long, replay_long) = (median(back), median(ahead));
    session.send(&format!("z0,{end:x},1"));
    // From bench_end again, back to the C library's write of __environ.
    monitor(&mut session, "goto end");
    let reply = session.send("c");
    assert!(reply.starts_with('T'), "goto end: {reply}");
    session.send(&format!("Z2,{environ:x},8"));
    let (reply, watch_long) = session.timed("bc");
    assert!(reply.contains("watch:"), "bc to the __environ write: {reply}");
    drop(session);

    println!("bench_loop (static -O1), retrace-stub --record=full driven by raw packets");
    println!();
    println!("1. bc from bench_end back to bench_begin over ~200k instructions");
    println!("   GDB 13 record full reverse-continue   {gdb_instructions:>9} instructions in its log   {}", ms(gdb_seconds));
    println!("   retrace-stub bc                       {history:>9} instructions in its history  {}", ms(bc_short));
    println!("   bc vs GDB reverse-continue: {:.0}x faster (goal >= 100x)", gdb_seconds / bc_short);
    println!();
    println!("2. a history of {long_history} instructions (recorded in {recording:.0} s)");
    println!("   forward c round trip (work to work, one iteration)  {}", ms(forward));
    println!("   bc to bench_begin (median of 5)                     {}  ({:.2}x a forward c; context <= 20 ms)", ms(bc_long), bc_long / forward);
    println!("   c replayed from bench_begin to bench_end (median of 5)  {}", ms(replay_long));
    println!("   bc to the write of __environ (watchpoint)           {}  ({:.2}x a forward c; context <= 100 ms)", ms(watch_long), watch_long / forward);
    println!();
    println!("3. single steps at the end of the history, each with a g, median of 50");
    println!("   s + g   {}", ms(step));
    println!("   bs + g  {}", ms(back_step));
    println!("   bs / s = {:.2} (goal <= 1.2)", back_step / step);
}
