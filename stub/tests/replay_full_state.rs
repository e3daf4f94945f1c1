//! `retrace-stub --replay` of a full-state recording (`retrace record
//! --backend valgrind --mode full`) against GDB 13 on the same program run
//! natively. At every hit of a breakpoint in a loop, the locals, globals,
//! heap bytes and the buffer the kernel filled (from a pipe) that GDB
//! prints on the replay must be what it prints natively at the same
//! iteration, and what GDB's own `record full` of a native run shows going
//! back over the same hits (so too in a signal handler). The replay reaches them by reverse-continue from the end,
//! then by continue. The program is linked `-no-pie` and static, and no
//! value compared is an address, so Valgrind's other layout does not
//! matter. No general register of the frame may read unavailable.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

mod common;

use common::{gdb, retrace, start_stub_command};
use retrace_tests::recordings::build;
use retrace_tests::tools::{require, which};

fn tools_present() -> bool {
    require("gcc", which("gcc").is_some())
        && require("gdb", which("gdb").is_some())
        && require("valgrind (Debian package valgrind)", which("valgrind").is_some())
        && require("retrace built with Valgrind's headers", retrace_collector::valgrind::availability().is_ok())
}

/// Keeps glibc off the AVX and AVX-512 instructions GDB 13's `record full`
/// cannot record ("Process record does not support instruction 0x62"), for
/// its native runs.
const AVX_OFF: &str = "set environment GLIBC_TUNABLES=glibc.cpu.hwcaps=-AVX512F,-AVX512VL,-AVX512BW,-AVX512DQ,-AVX2,-AVX,-EVEX";

/// GDB's Python: `show` prints one `VALUES` line of the loop's state.
const SHOW: &str = r#"
import gdb
class Show(gdb.Command):
    def __init__(self):
        super().__init__('show', gdb.COMMAND_USER)
    def invoke(self, arg, tty):
        i = int(gdb.parse_and_eval('i'))
        inf = gdb.selected_inferior()
        heap = int(gdb.parse_and_eval('(long)heap'))
        written = inf.read_memory(heap, min(i, 16)).tobytes().hex() if i > 0 else ''
        buffer = inf.read_memory(int(gdb.parse_and_eval('(long)&buffer')), 24).tobytes().hex()
        print('VALUES %d total=%d counter=%d ratio=%s buffer=%s heap=%s' % (i, int(gdb.parse_and_eval('total')), int(gdb.parse_and_eval('counter')), gdb.parse_and_eval('ratio').format_string(), buffer, written))
Show()
"#;

/// Every `VALUES` line by the loop's `i`.
fn values(out: &str) -> BTreeMap<i64, String> {
    out.lines()
        .filter_map(|l| l.strip_prefix("VALUES "))
        .map(|l| {
            let (i, rest) = l.split_once(' ').unwrap();
            (i.parse().unwrap(), rest.to_string())
        })
        .collect()
}

/// An empty directory for test `name`.
fn work_dir(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("replay-full-state").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `retrace-stub --replay trace_json`, and the port it listens on.
fn replay_port(trace_json: &Path) -> (std::process::Child, u16) {
    let (stub, line) = start_stub_command(&["--listen".as_ref(), "127.0.0.1:0".as_ref(), "--replay".as_ref(), trace_json.as_os_str()]);
    (stub, common::port_of(&line))
}

/// `retrace-stub --replay trace_json`, and GDB's command to reach it.
fn start_replay(trace_json: &Path) -> (std::process::Child, String) {
    let (stub, port) = replay_port(trace_json);
    (stub, format!("target remote 127.0.0.1:{port}"))
}

/// `retrace record --backend valgrind --mode full -o DIR/bundle -- program
/// args`: what it said, and the bundle's trace.json.
fn record_full(dir: &Path, program: &Path, args: &[&std::ffi::OsStr]) -> (std::process::Output, PathBuf) {
    let bundle = dir.join("bundle");
    let out = retrace().args(["record", "--backend", "valgrind", "--mode", "full", "-o"]).arg(&bundle).arg("--").arg(program).args(args).output().unwrap();
    (out, bundle.join("trace.json"))
}

/// [`record_full`] of a program that exits with status 0: the trace.json.
fn recorded_fully(dir: &Path, program: &Path) -> PathBuf {
    let (out, trace_json) = record_full(dir, program, &[]);
    assert!(out.status.success(), "retrace record: {}", String::from_utf8_lossy(&out.stderr));
    trace_json
}

/// GDB's `$N = value` values, in order.
fn printed(out: &str) -> Vec<String> {
    out.lines().filter_map(|l| l.split_once(" = ").filter(|(k, _)| k.starts_with('$')).map(|(_, v)| v.to_string())).collect()
}

/// `program` (tests/programs/`name`.c, static, -no-pie, -O0 and `flags`)
/// recorded with full state; the program and the bundle's trace.json.
fn recorded_program(dir: &Path, name: &str, flags: &[&str]) -> (PathBuf, PathBuf) {
    let mut all = vec!["-O0", "-static", "-no-pie"];
    all.extend_from_slice(flags);
    let program = build(name, dir, &all);
    let trace_json = recorded_fully(dir, &program);
    (program, trace_json)
}

fn recorded(dir: &Path) -> (PathBuf, PathBuf) {
    recorded_program(dir, "full_state", &[])
}

#[test]
fn gdb_sees_on_the_replay_what_it_sees_natively_at_every_hit_backwards_and_forwards() {
    if !tools_present() {
        return;
    }
    let dir = work_dir("loop");
    let (program, trace_json) = recorded(&dir);
    let script = dir.join("show.py");
    std::fs::write(&script, SHOW).unwrap();
    let source = format!("source {}", script.display());

    // Natively: every hit, forwards.
    let mut native_commands = vec![source.as_str(), "break full_state.c:37", "run"];
    native_commands.extend(std::iter::repeat(["show", "continue"]).take(40).flatten());
    let native = values(&gdb(&program, &native_commands));
    assert_eq!(native.keys().copied().collect::<Vec<_>>(), (0..40).collect::<Vec<_>>(), "GDB's native hits");
    // GDB's own record full, natively, from main (before the pipe): to the
    // last hit, then back through every other.
    let mut record_full_commands = vec![source.as_str(), AVX_OFF, "break main", "run", "record full", "set record full insn-number-max unlimited", "break full_state.c:37"];
    record_full_commands.extend(std::iter::repeat_n("continue", 40));
    record_full_commands.push("show");
    record_full_commands.extend(std::iter::repeat_n(["reverse-continue", "show"], 39).flatten());
    let out = gdb(&program, &record_full_commands);
    let record_full = values(&out);
    assert_eq!(record_full.keys().copied().collect::<Vec<_>>(), (0..40).collect::<Vec<_>>(), "GDB's record full, backwards:\n{out}");
    assert_eq!(record_full, native, "GDB's record full against its plain run");

    // The replay: from the end, back through every hit, then forwards.
    let (stub, target) = start_replay(&trace_json);
    let mut commands = vec![source.as_str(), target.as_str(), "break full_state.c:37"];
    commands.extend(std::iter::repeat(["reverse-continue", "show"]).take(40).flatten());
    commands.extend(["info registers", "reverse-continue"]);
    commands.extend(std::iter::repeat(["continue", "show"]).take(3).flatten());
    let out = gdb(&program, &commands);
    common::end_stub(stub);
    let lines: Vec<&str> = out.lines().filter(|l| l.starts_with("VALUES ")).collect();
    assert_eq!(lines.len(), 43, "40 hits backwards, 3 forwards:\n{out}");
    let backwards = values(&lines[..40].join("\n"));
    assert_eq!(backwards.keys().rev().copied().collect::<Vec<_>>(), (0..40).rev().collect::<Vec<_>>(), "the hits, latest first:\n{out}");
    for (i, seen) in &backwards {
        assert_eq!(seen, &native[i], "reverse-continue to i = {i}:\n{out}");
    }
    // Past the first hit: the start of the history.
    assert!(out.contains("No more reverse-execution history"), "{out}");
    let forwards = values(&lines[40..].join("\n"));
    assert_eq!(forwards.keys().copied().collect::<Vec<_>>(), vec![0, 1, 2], "{out}");
    for (i, seen) in &forwards {
        assert_eq!(seen, &native[i], "continue to i = {i}:\n{out}");
    }
    // At i = 0, every general register is known.
    let registers: Vec<&str> = out.lines().skip_while(|l| !l.starts_with("rax ")).take(18).collect();
    assert_eq!(registers.len(), 18, "{out}");
    assert!(registers.iter().all(|l| !l.contains("unavailable")), "{registers:#?}");
}

/// Watchpoints on the replay: a write, a read, and the kernel's write into
/// a buffer (`read` from a pipe), found backwards, with the values GDB
/// prints natively at the iteration they belong to.
#[test]
fn watchpoints_on_the_replay_stop_at_the_writes_reads_and_the_kernels_write() {
    if !tools_present() {
        return;
    }
    let dir = work_dir("watch");
    let (program, trace_json) = recorded(&dir);
    let script = dir.join("show.py");
    std::fs::write(&script, SHOW).unwrap();
    let source = format!("source {}", script.display());
    // Natively, at iteration 38's hit.
    let native = values(&gdb(&program, &[source.as_str(), "break full_state.c:37 if i == 38", "run", "show"]));
    let native_counter = native[&38].split(' ').find_map(|f| f.strip_prefix("counter=")).unwrap().to_string();

    let (stub, target) = start_replay(&trace_json);
    let out = gdb(
        &program,
        &[
            &source,
            &target,
            "break full_state.c:37",
            "reverse-continue",
            "delete",
            // Back from i = 39's hit: the write of counter in iteration 38.
            "watch counter",
            "reverse-continue",
            "print i",
            "print counter",
            "delete",
            // The read of ratio before it: line 38 of iteration 37.
            "rwatch ratio",
            "reverse-continue",
            "print i",
            "info line *$pc",
            "delete",
            // The kernel's write of the pipe's bytes into buffer.
            "watch buffer[3]",
            "reverse-continue",
            "bt 2",
            "monitor record status",
        ],
    );
    // A full recording is not said to be control flow only.
    assert!(out.contains("(full state: every register and byte") && !out.contains("control flow only"), "{out}");
    common::end_stub(stub);
    let printed = printed(&out);
    assert_eq!(printed.len(), 3, "{out}");
    assert_eq!(printed[0], "38", "the write of counter is in iteration 38:\n{out}");
    // Before that write: the value at iteration 38's hit, natively.
    assert_eq!(printed[1], native_counter, "{out}");
    assert_eq!(printed[2], "37", "the read of ratio before it is in iteration 37:\n{out}");
    assert!(out.contains("Line 38 of"), "the read is on line 38:\n{out}");
    assert!(out.contains("in read ()") && out.contains("full_state.c:31"), "the kernel's write stops in read(), called from line 31:\n{out}");
}

/// Four threads writing a shared table: on the replay, main after the
/// joins sees every worker's writes, and a worker's breakpoint (a
/// condition on its loop) shows its locals and the table, as GDB shows
/// them natively. This holds only where the threads' steps fall in the
/// order they ran. (GDB 13's `record full` cannot be the oracle here: it
/// refuses `clone3`, system call 435, and when glibc falls back to `clone`
/// it records none of the new threads' instructions: reverse-continue to
/// a worker's breakpoint runs back to the start.)
#[test]
fn four_threads_interleave_as_they_ran_and_show_their_native_values() {
    if !tools_present() {
        return;
    }
    let dir = work_dir("threads");
    let (program, trace_json) = recorded_program(&dir, "full_state_threads", &["-pthread"]);
    let after_joins = ["print sums", "print table[2][49]", "print table[0][0]"];
    let in_worker = ["print acc", "print sums[2]", "print table[2][9]"];
    let threads = "python print('THREADS %d' % len(gdb.selected_inferior().threads()))";
    let mut native_commands = vec!["break full_state_threads.c:35", "run", threads];
    native_commands.extend(after_joins);
    native_commands.extend(["kill", "delete", "break full_state_threads.c:28", "run", threads, "kill", "delete", "break full_state_threads.c:20 if id == 2 && r == 10", "run"]);
    native_commands.extend(in_worker);
    native_commands.push("kill");
    let native_out = gdb(&program, &native_commands);
    let native = printed(&native_out);
    assert_eq!(native.len(), 6, "{native_out}");
    let counts = |out: &str| out.lines().filter_map(|l| l.strip_prefix("THREADS ")?.parse().ok()).collect::<Vec<usize>>();
    // After the joins, and before the first pthread_create: main alone.
    assert_eq!(counts(&native_out), [1, 1], "{native_out}");

    let (stub, target) = start_replay(&trace_json);
    let mut commands = vec![target.as_str(), "break full_state_threads.c:35", "reverse-continue", threads];
    commands.extend(after_joins);
    commands.extend(["delete", "break full_state_threads.c:20 if id == 2 && r == 10", "reverse-continue"]);
    commands.extend(in_worker);
    commands.extend([threads, "delete", "break full_state_threads.c:28", "reverse-continue", threads]);
    let out = gdb(&program, &commands);
    common::end_stub(stub);
    assert_eq!(printed(&out), native, "{out}");
    assert!(out.contains("hit Breakpoint 2, work (arg=0x2)"), "{out}");
    // The threads as they were: main alone after the joins (the workers
    // ended) and before any was created, as natively; in worker 2, main
    // and worker 2 at least, and never more than the five there were.
    let replayed = counts(&out);
    assert_eq!(replayed.len(), 3, "{out}");
    assert_eq!((replayed[0], replayed[2]), (1, 1), "{out}");
    assert!((2..=5).contains(&replayed[1]), "{out}");
}

/// GDB's Python: `where_now` prints one `AT` line: the function, the line,
/// and `i` and `total` where main's frame is selected.
const WHERE_NOW: &str = r#"
import gdb
class WhereNow(gdb.Command):
    def __init__(self):
        super().__init__('where_now', gdb.COMMAND_USER)
    def invoke(self, arg, tty):
        frame = gdb.selected_frame()
        name = frame.name()
        line = frame.find_sal().line
        if name == 'main':
            print('AT main:%d i=%d total=%d' % (line, int(gdb.parse_and_eval('i')), int(gdb.parse_and_eval('total'))))
        else:
            print('AT %s:%d a=%d b=%d' % (name, line, int(gdb.parse_and_eval('a')), int(gdb.parse_and_eval('b'))))
WhereNow()
"#;

/// reverse-next, reverse-step, reverse-finish and reverse-stepi on the
/// replay land where GDB's forward `next`, `step` and `finish` land
/// natively, with the same values: in iteration 20, from line 37 back
/// into `mix` (called on line 35) and out, and forwards again; and where
/// the same moves land in GDB's own `record full` of a native run.
#[test]
fn reverse_next_step_finish_and_stepi_land_where_native_steps_do() {
    if !tools_present() {
        return;
    }
    let dir = work_dir("steps");
    let (program, trace_json) = recorded(&dir);
    let script = dir.join("where.py");
    std::fs::write(&script, WHERE_NOW).unwrap();
    let source = format!("source {}", script.display());
    let at_lines = |out: &str| -> Vec<String> { out.lines().filter_map(|l| l.strip_prefix("AT ")).map(str::to_string).collect() };

    // Natively, forwards from line 35 of iteration 20: into mix and out,
    // then on to line 37.
    let native_out = gdb(&program, &[&source, "break full_state.c:35 if i == 20", "run", "where_now", "step", "where_now", "finish", "where_now", "next", "where_now", "next", "where_now"]);
    let native = at_lines(&native_out);
    assert_eq!(native.len(), 5, "{native_out}");
    assert!(native[0].starts_with("main:35 i=20") && native[1].starts_with("mix:") && native[4].starts_with("main:37 i=20"), "{native:#?}");

    // The replay, backwards from line 37 of iteration 20.
    let moves = [
            "where_now",
            "reverse-next",
            "where_now",
            // Back into mix from its end, then out to the call.
            "reverse-step",
            "where_now",
            "reverse-finish",
            "where_now",
            // To the start of line 35: the values before the call.
            "reverse-next",
            "where_now",
            // One instruction back and forth: the same place.
            "reverse-stepi",
            "stepi",
            "where_now",
            // Forwards again, replayed: as natively.
            "step",
            "where_now",
            "finish",
            "where_now",
    ];
    let (stub, target) = start_replay(&trace_json);
    let mut commands = vec![source.as_str(), &target, "break full_state.c:37 if i == 20", "reverse-continue", "delete"];
    commands.extend(moves);
    let out = gdb(&program, &commands);
    common::end_stub(stub);
    let replay = at_lines(&out);
    assert_eq!(replay.len(), 8, "{out}");
    // GDB's own record full, natively, recording from main: the same moves
    // from the same place land on the same lines with the same values.
    let mut commands = vec![source.as_str(), AVX_OFF, "break main", "run", "record full", "set record full insn-number-max unlimited", "break full_state.c:37 if i == 20", "continue", "delete"];
    commands.extend(moves);
    let record_full_out = gdb(&program, &commands);
    assert_eq!(at_lines(&record_full_out), replay, "GDB's record full against the replay:\n{record_full_out}\n{out}");
    // 37 and 36 of iteration 20, as natively.
    assert_eq!(replay[0], native[4], "{out}");
    assert_eq!(replay[1], native[3], "{out}");
    assert!(replay[2].starts_with("mix:") && replay[2] != native[1], "reverse-step enters mix from its end:\n{out}");
    assert!(replay[3].starts_with("main:35 i=20"), "reverse-finish returns to the call:\n{out}");
    assert_eq!(replay[4], native[0], "reverse-next to the start of line 35:\n{out}");
    assert_eq!(replay[5], replay[4], "reverse-stepi then stepi:\n{out}");
    assert_eq!(replay[6], native[1], "step into mix, replayed:\n{out}");
    assert!(replay[7].starts_with("main:35 i=20"), "finish, replayed:\n{out}");
}

/// Past the last instruction, a continue ends the program as it ended when
/// recorded (as `rr replay` does): GDB sees it exit as it does natively.
#[test]
fn continuing_past_the_end_reports_the_recorded_exit() {
    if !tools_present() {
        return;
    }
    let dir = work_dir("exit");
    let (program, trace_json) = recorded(&dir);
    let native = gdb(&program, &["run"]);
    assert!(native.contains("exited normally"), "{native}");
    let (stub, target) = start_replay(&trace_json);
    let out = gdb(&program, &[&target, "break full_state.c:37", "reverse-continue", "delete", "continue"]);
    common::end_stub(stub);
    assert!(out.contains("Breakpoint 1, main ()"), "{out}");
    assert!(out.contains("[Inferior 1 (process") && out.contains("exited normally]"), "the recorded exit:\n{out}");
}

/// A breakpoint where the history ends (the instruction after `exit_group`,
/// which never ran): a continue stops there, and the next continue, which
/// GDB begins by stepping off the breakpoint, ends the program as it ended
/// when recorded, as Valgrind's gdbserver does on the same run (not "No
/// more reverse-execution history": lz4's differential test waited there).
#[test]
fn stepping_off_a_breakpoint_at_the_end_reports_the_recorded_exit() {
    if !tools_present() {
        return;
    }
    let dir = work_dir("exit-breakpoint");
    let (program, trace_json) = recorded(&dir);
    let (stub, target) = start_replay(&trace_json);
    let out = gdb(&program, &[&target, "break *$pc", "reverse-stepi", "continue", "python print('AT %#x' % int(gdb.parse_and_eval('$pc')))", "continue"]);
    common::end_stub(stub);
    assert!(out.contains("Breakpoint 1, 0x"), "the breakpoint at the end stops a continue:\n{out}");
    assert!(!out.contains("No more reverse-execution history"), "{out}");
    assert!(out.contains("[Inferior 1 (process") && out.contains("exited normally]"), "the recorded exit:\n{out}");
}

/// GDB's Python: `signal-show` prints one `VALUES` line in the handler:
/// its locals, the globals, and the frames' names up to main (a signal
/// frame as `<signal>`).
const SIGNAL_SHOW: &str = r#"
import gdb
class Show(gdb.Command):
    def __init__(self):
        super().__init__('signal-show', gdb.COMMAND_USER)
    def invoke(self, arg, tty):
        frames = []
        f = gdb.newest_frame()
        while f is not None:
            frames.append('<signal>' if f.type() == gdb.SIGTRAMP_FRAME else str(f.name()))
            f = f.older()
        v = lambda e: int(gdb.parse_and_eval(e))
        print('VALUES %d twice=%d sig=%d seen=%d,%d,%d frames=%s' % (v('hits'), v('twice'), v('sig'), v('seen[0]'), v('seen[1]'), v('seen[2]'), '/'.join(frames)))
Show()
"#;

/// A signal handler on the replay (`tests/programs/full_state_signal.c`:
/// SIGUSR1 raised three times): reverse-continue from the end to the
/// breakpoint in the handler shows, at each hit, the locals, globals and
/// frames through the signal frame that GDB shows natively, and that GDB's
/// own `record full` shows going backwards over the same hits (run
/// natively, with glibc kept off the AVX instructions `record full` cannot
/// record). No register of `info all-registers` reads unavailable there.
/// Out of the handler, reverse-finish stands where `record full` stands:
/// after the `tgkill` system call, before the delivery (the signal's own
/// step); reverse-stepi from there is the `syscall`, with its number in
/// rax; stepi goes back to the delivery, then into the handler.
#[test]
fn a_signal_handler_on_the_replay_shows_what_gdb_record_full_shows_natively() {
    if !tools_present() {
        return;
    }
    let dir = work_dir("signal");
    let (program, trace_json) = recorded_program(&dir, "full_state_signal", &[]);
    let script = dir.join("show.py");
    std::fs::write(&script, SIGNAL_SHOW).unwrap();
    let source = format!("source {}", script.display());
    let quiet = "handle SIGUSR1 nostop noprint pass";
    let hit = "break full_state_signal.c:14";

    let native = values(&gdb(&program, &[&source, quiet, hit, "run", "signal-show", "continue", "signal-show", "continue", "signal-show"]));
    assert_eq!(native.keys().copied().collect::<Vec<_>>(), vec![0, 1, 2], "the native hits");
    let out_of_handler = ["reverse-finish", "p $pc", "p $rax", "p hits", "reverse-stepi", "p $pc", "stepi", "p $pc"];
    let mut commands = vec![&source, quiet, AVX_OFF, "break main", "run", "record full", hit, "continue", "continue", "continue", "reverse-continue", "signal-show", "reverse-continue", "signal-show"];
    commands.extend(out_of_handler);
    let out = gdb(&program, &commands);
    let lines: Vec<&str> = out.lines().filter(|l| l.starts_with("VALUES ")).collect();
    assert_eq!(lines.len(), 2, "GDB's record full, backwards:\n{out}");
    let record_full = values(&lines.join("\n"));
    let record_full_out_of_handler = printed(&out);
    assert_eq!(record_full_out_of_handler.len(), 5, "{out}");
    assert!(record_full_out_of_handler[0].contains("<__pthread_kill_implementation"), "{out}");

    let (stub, target) = start_replay(&trace_json);
    let mut commands = vec![&source, &target, hit, "reverse-continue", "signal-show", "reverse-continue", "signal-show", "reverse-continue", "signal-show", "info all-registers"];
    commands.extend(&out_of_handler[..6]);
    commands.extend(["p $rax", "stepi", "p $pc", "stepi", "p $pc", "p $rdi"]);
    let out = gdb(&program, &commands);
    common::end_stub(stub);
    // After the system call (its result, 0), before the delivery; the
    // handler has not run (hits 0); then the system call itself.
    let replay_out_of_handler = printed(&out);
    assert_eq!(replay_out_of_handler.len(), 8, "{out}");
    let compared: Vec<&String> = [0, 1, 2, 3, 5].iter().map(|&i| &replay_out_of_handler[i]).collect();
    assert_eq!(compared, record_full_out_of_handler.iter().collect::<Vec<_>>(), "reverse-finish, reverse-stepi and stepi against GDB's record full:\n{out}");
    assert_eq!(replay_out_of_handler[1..3], ["0", "0"], "{out}");
    assert!(replay_out_of_handler[3] != replay_out_of_handler[0], "reverse-stepi moves to the syscall:\n{out}");
    // 234 is tgkill's number on x86-64 (record full shows 0 there: it does
    // not restore what a system call changed in the registers).
    assert_eq!(replay_out_of_handler[4], "234", "rax before the syscall:\n{out}");
    assert!(replay_out_of_handler[6].contains("<on_usr1>") && replay_out_of_handler[7] == "10", "stepi into the handler, the signal number in rdi:\n{out}");
    let lines: Vec<&str> = out.lines().filter(|l| l.starts_with("VALUES ")).collect();
    assert_eq!(lines.len(), 3, "three hits backwards:\n{out}");
    let replay = values(&lines.join("\n"));
    assert_eq!(lines[0].split(' ').nth(1), Some("2"), "the last hit first:\n{out}");
    for (hits, seen) in &replay {
        assert_eq!(seen, &native[hits], "hit {hits} against the native run:\n{out}");
        assert!(seen.ends_with("frames=on_usr1/<signal>/__pthread_kill_implementation.constprop.0/raise/main"), "{seen}");
    }
    for (hits, seen) in &record_full {
        assert_eq!(&replay[hits], seen, "hit {hits} against GDB's record full:\n{out}");
    }
    let registers: Vec<&str> = out.lines().skip_while(|l| !l.starts_with("rax ")).take_while(|l| !l.starts_with("[Inferior")).collect();
    assert!(registers.len() > 40 && registers.iter().all(|l| !l.contains("unavailable")), "{registers:#?}");
}

/// The signal program forwards and watched backwards: from the first
/// handler hit on the replay, `next`, `finish` out of the handler to the
/// signal frame, `stepi` through `__restore_rt` and `next` back into the
/// code that raised it print what a plain native run prints; a watchpoint
/// on the handler's counter, reverse-continued from the end, stops at its
/// three writes in turn with the native values backwards and the native
/// frames through `<signal handler called>` (GDB's `record full` misses
/// hardware watchpoints in reverse: the native forward run is the truth).
#[test]
fn a_signal_handler_replayed_forwards_and_watched_backwards_as_natively() {
    if !tools_present() {
        return;
    }
    let dir = work_dir("signal-moves");
    let (program, trace_json) = recorded_program(&dir, "full_state_signal", &[]);
    let quiet = "handle SIGUSR1 nostop noprint pass";
    let hit = "break full_state_signal.c:14";
    let forwards = ["next", "p twice", "p seen[0]", "next", "p hits", "finish", "p $pc", "stepi", "p $pc", "next", "p $pc", "next", "p $pc", "bt"];
    let frames = |out: &str| -> Vec<String> { out.lines().filter(|l| l.starts_with('#')).map(str::to_string).collect() };
    let changes = |out: &str| -> Vec<(String, String)> {
        let lines: Vec<&str> = out.lines().collect();
        lines.windows(2).filter_map(|w| Some((w[0].strip_prefix("Old value = ")?.to_string(), w[1].strip_prefix("New value = ")?.to_string()))).collect()
    };
    let mut commands = vec![quiet, hit, "run"];
    commands.extend(forwards);
    let native_forwards = gdb(&program, &commands);
    let native_values = printed(&native_forwards);
    assert_eq!(native_values.len(), 7, "{native_forwards}");
    assert!(native_values[3].contains("<__restore_rt>") && native_values[5].contains("<__pthread_kill_implementation"), "{native_forwards}");
    let native_watch = gdb(&program, &[quiet, "break main", "run", "watch hits", "continue", "bt", "continue", "continue"]);
    let native_changes = changes(&native_watch);
    assert_eq!(native_changes.len(), 3, "{native_watch}");
    let native_frames = frames(&native_watch);
    assert_eq!(native_frames.len(), 5, "{native_watch}");

    let (stub, target) = start_replay(&trace_json);
    let mut commands = vec![target.as_str(), hit, "reverse-continue", "reverse-continue", "reverse-continue", "p hits"];
    commands.extend(forwards);
    let replay_forwards = gdb(&program, &commands);
    common::end_stub(stub);
    let (stub, target) = start_replay(&trace_json);
    let replay_watch = gdb(&program, &[&target, "watch hits", "reverse-continue", "reverse-continue", "reverse-continue", "bt"]);
    common::end_stub(stub);
    let replay_values = printed(&replay_forwards);
    assert_eq!(replay_values.first().map(String::as_str), Some("0"), "at the first hit:\n{replay_forwards}");
    assert_eq!(replay_values[1..], native_values[..], "forwards from the first hit:\n{replay_forwards}");
    assert_eq!(frames(&replay_forwards), frames(&native_forwards), "{replay_forwards}");
    // Backwards, each write undone: old and new swap, in reverse order.
    let undone: Vec<(String, String)> = native_changes.iter().rev().map(|(old, new)| (new.clone(), old.clone())).collect();
    assert_eq!(changes(&replay_watch), undone, "{replay_watch}");
    // (Backwards GDB stands before the store, forwards after it: the
    // frames under the handler's are the same.)
    let replay_frames = frames(&replay_watch);
    assert_eq!(replay_frames.len(), 5, "{replay_watch}");
    assert!(replay_frames[0].contains("on_usr1 (sig=10)") && native_frames[0].contains("on_usr1 (sig=10)"), "{replay_watch}");
    assert_eq!(replay_frames[1..], native_frames[1..], "{replay_watch}");
}

/// Code run in the past on the replay (a diversion): GDB calls `mix` at an
/// iteration's hit and gets what it gets natively there; a global set
/// there reads back; the replay goes on as recorded after it.
#[test]
fn gdb_calls_a_function_in_the_past_and_the_history_stays_as_recorded() {
    if !tools_present() {
        return;
    }
    let dir = work_dir("call");
    let (program, trace_json) = recorded(&dir);
    let native = gdb(&program, &["break full_state.c:37 if i == 38", "run", "print mix(total, 5)", "print mix(-3, i)", "next", "print counter"]);
    let native_values = printed(&native);
    assert_eq!(native_values.len(), 3, "{native}");

    let (stub, target) = start_replay(&trace_json);
    let out = gdb(
        &program,
        &[&target, "break full_state.c:37", "reverse-continue", "reverse-continue", "print i", "print mix(total, 5)", "print mix(-3, i)", "print counter = 12345", "print counter", "next", "print counter"],
    );
    common::end_stub(stub);
    let replay = printed(&out);
    assert_eq!(replay.len(), 6, "{out}");
    assert_eq!(replay[0], "38", "{out}");
    assert_eq!(replay[1..3], native_values[..2], "the calls, as natively at i = 38:\n{out}");
    assert_eq!((replay[3].as_str(), replay[4].as_str()), ("12345", "12345"), "a write in the past:\n{out}");
    assert_eq!(replay[5], native_values[2], "after the next, counter as recorded:\n{out}");
}

/// The same calls on a PIE program linked dynamically (Debian gcc's
/// default), which Valgrind loads elsewhere than a native run does: GDB and
/// LLDB call `mix` in the past and get what they get natively.
#[test]
fn gdb_and_lldb_call_a_function_in_the_past_of_a_pie_program() {
    if !tools_present() {
        return;
    }
    let dir = work_dir("call-pie");
    let program = build("full_state", &dir, &["-O0", "-pie", "-fPIE"]);
    let trace_json = recorded_fully(&dir, &program);
    let native = gdb(&program, &["break full_state.c:37 if i == 38", "run", "print mix(total, 5)", "print mix(-3, i)"]);
    let native_values = printed(&native);
    assert_eq!(native_values.len(), 2, "{native}");

    let (stub, target) = start_replay(&trace_json);
    let out = gdb(&program, &[&target, "break full_state.c:37", "reverse-continue", "reverse-continue", "print i", "print mix(total, 5)", "print mix(-3, i)"]);
    common::end_stub(stub);
    assert_eq!(printed(&out), ["38".to_string(), native_values[0].clone(), native_values[1].clone()], "GDB's calls on the replay, as natively at i = 38:\n{out}");

    if !common::lldb_python_present() {
        return;
    }
    let (stub, port) = replay_port(&trace_json);
    let out = common::lldb_python(
        r#"
target.BreakpointCreateByLocation("full_state.c", 37)
process.ContinueInDirection(lldb.eRunReverse)
process.ContinueInDirection(lldb.eRunReverse)
frame = process.GetSelectedThread().GetFrameAtIndex(0)
for expression in ["i", "mix(total, 5)", "mix(-3, i)"]:
    print("VALUE", frame.EvaluateExpression(expression).GetValue())
"#,
        &program,
        port,
        &[],
    );
    common::end_stub(stub);
    let values: Vec<&str> = out.lines().filter_map(|l| l.strip_prefix("VALUE ")).collect();
    assert_eq!(values, ["38", native_values[0].as_str(), native_values[1].as_str()], "LLDB's calls on the replay:\n{out}");
}

/// glibc's string functions where they use REP string instructions
/// (`tests/programs/rep_strings.c`: memset of 12,304 bytes, calloc of as
/// many, a 60 KB memcpy): on the replay, GDB shows at the print what the
/// program printed (calloc's pointer, the bytes memset and memcpy wrote,
/// as the native run prints them but for the pointer, which Valgrind's
/// heap moves), and a reverse watchpoint on a byte memcpy wrote, then on
/// one memset wrote, stops in memcpy called from `copy_it`, in memset
/// called from `clear_it`, where natively a watchpoint stops in them.
#[test]
fn after_rep_string_instructions_the_replay_shows_their_results_and_watchpoints_stop_in_them() {
    if !tools_present() {
        return;
    }
    let dir = work_dir("rep-strings");
    let program = build("rep_strings", &dir, &["-O0"]);
    let (out, trace_json) = record_full(&dir, &program, &[]);
    assert!(out.status.success(), "retrace record: {}", String::from_utf8_lossy(&out.stderr));
    let printed_when_recorded: Vec<String> = String::from_utf8_lossy(&out.stdout).split_whitespace().map(str::to_string).collect();
    let native_run = std::process::Command::new(&program).output().unwrap();
    let printed_natively: Vec<String> = String::from_utf8_lossy(&native_run.stdout).split_whitespace().map(str::to_string).collect();
    assert_eq!((printed_when_recorded.len(), printed_natively.len()), (4, 4), "{printed_when_recorded:?} {printed_natively:?}");
    assert_eq!(printed_when_recorded[1..], printed_natively[1..], "the bytes, under Valgrind and natively");
    let source = std::fs::read_to_string(retrace_tests::recordings::programs_dir().join("rep_strings.c")).unwrap();
    let print_line = source.lines().position(|l| l.contains("line:print")).unwrap() + 1;
    let breakpoint = format!("break rep_strings.c:{print_line}");
    // Natively: where a watchpoint on each byte stops (the function and its caller).
    let native = gdb(&program, &["break main", "run", "watch -l big[5000]", "continue", "bt 2", "delete", "watch -l dst[40000]", "continue", "bt 2"]);
    let frames = |out: &str| -> Vec<String> { out.lines().filter(|l| l.starts_with('#')).map(|l| l.split(" in ").nth(1).or_else(|| l.split_whitespace().nth(1)).unwrap_or("").split(' ').next().unwrap_or("").to_string()).collect() };
    let native_frames = frames(&native);
    assert_eq!(native_frames.len(), 4, "{native}");
    assert!(native_frames[0].starts_with("__mem") && native_frames[1] == "clear_it" && native_frames[2].starts_with("__mem") && native_frames[3] == "copy_it", "natively: {native_frames:?}\n{native}");

    let (stub, target) = start_replay(&trace_json);
    let out = gdb(&program, &[&target, &breakpoint, "reverse-continue", "print/x (long)p", "print big[100]", "print dst[40000]", "print p[5000]", "delete", "watch -l dst[40000]", "reverse-continue", "bt 2", "x/i $pc", "delete", "watch -l big[5000]", "reverse-continue", "bt 2", "x/i $pc"]);
    common::end_stub(stub);
    let values = printed(&out);
    assert_eq!(values.len(), 4, "{out}");
    assert_eq!(values[0], printed_when_recorded[0], "calloc's pointer, as printed:\n{out}");
    assert_eq!(values[1..4].iter().map(|v| v.split_whitespace().next().unwrap().to_string()).collect::<Vec<_>>(), printed_when_recorded[1..], "the bytes, as printed:\n{out}");
    let replayed_frames = frames(&out);
    assert_eq!(replayed_frames.len(), 4, "{out}");
    assert!(replayed_frames[0].starts_with("__mem") && replayed_frames[1] == "copy_it" && replayed_frames[2].starts_with("__mem") && replayed_frames[3] == "clear_it", "on the replay: {replayed_frames:?}\n{out}");
    // (The stop is on the REP instruction that wrote the byte.)
    let instructions: Vec<&str> = out.lines().filter(|l| l.starts_with("=> ")).collect();
    assert_eq!(instructions.len(), 2, "{out}");
    assert!(instructions[0].contains("rep movsb") && instructions[1].contains("rep stos"), "the REP instructions:\n{out}");
}

/// The frames LLDB's `bt` lists (functions and arguments, without
/// addresses, which Valgrind's layout moves): at `breakpoint` natively (the
/// first hit), or on the replay of `trace_json` (its last hit, reached
/// backwards from the end).
fn lldb_frames(program: &Path, breakpoint: &str, trace_json: Option<&Path>) -> Vec<String> {
    let out = match trace_json {
        None => {
            let out = std::process::Command::new("lldb-22").args(["-b", "-o", &format!("breakpoint set {breakpoint}"), "-o", "process launch --stop-at-entry", "-o", "process handle -s false -n false -p true SIGUSR1", "-o", "continue", "-o", "bt"]).arg(program).output().unwrap();
            String::from_utf8_lossy(&out.stdout).into_owned()
        }
        Some(trace_json) => {
            let (stub, port) = replay_port(trace_json);
            let out = std::process::Command::new("lldb-22")
                .args(["-b", "-o", &format!("gdb-remote {port}"), "-o", &format!("breakpoint set {breakpoint}"), "-o", "process continue -R", "-o", "bt"])
                .arg(program)
                .output()
                .unwrap();
            common::end_stub(stub);
            String::from_utf8_lossy(&out.stdout).into_owned()
        }
    };
    let bt = out.split("(lldb) bt").nth(1).unwrap_or_default();
    // `frame #1: 0x… prog`f(a=1) at f.c:3:5` → `prog`f(…) at f.c:3:5`, with
    // pointer values left out.
    let frames: Vec<String> = bt
        .lines()
        .filter_map(|l| l.trim_start_matches(['*', ' ']).strip_prefix("frame #"))
        .map(|l| l.split_once(": 0x").map_or(l, |(_, rest)| rest.split_once(' ').map_or(rest, |(_, f)| f)).to_string())
        .map(|f| f.split(' ').map(|w| if w.contains("=0x") { w.split("=0x").next().unwrap().to_string() + "=<pointer>" } else { w.to_string() }).collect::<Vec<_>>().join(" "))
        .collect();
    assert!(!frames.is_empty(), "no backtrace:\n{out}");
    // (Valgrind refuses `clone3`: under it glibc starts threads with
    // `clone`, natively with `clone3`. The run's own difference.)
    frames.into_iter().map(|f| if f.starts_with("libc.so.6`__clone") { "libc.so.6`<clone>".to_string() } else { f }).collect()
}

/// LLDB's `bt` on a replay lists the frames native LLDB lists (functions,
/// arguments, lines), in a program built as Debian's gcc builds by
/// default (PIE, dynamic) and in the full-state tests' programs: none cut
/// short by a memory read answered short (a large, barely written stack
/// frame, a fresh heap block), no argument `<unavailable>` that natively
/// has a value. LLDB reads such memory in 512-byte lines, whole.
#[test]
fn lldb_backtraces_on_the_replay_are_the_native_ones() {
    if !tools_present() || !common::lldb_python_present() {
        return;
    }
    for (name, breakpoint, flags) in [
        ("deep_frames", "-n leaf", &["-O0"][..]),
        ("full_state", "-f full_state.c -l 37", &["-O0", "-static", "-no-pie"][..]),
        ("full_state_signal", "-n on_usr1", &["-O0"][..]),
        ("full_state_threads", "-n work", &["-O0", "-pthread"][..]),
    ] {
        let dir = work_dir(&format!("bt-{name}"));
        let program = build(name, &dir, flags);
        let trace_json = recorded_fully(&dir, &program);
        let native = lldb_frames(&program, breakpoint, None);
        let replayed = lldb_frames(&program, breakpoint, Some(&trace_json));
        assert_eq!(replayed, native, "{name}: LLDB's bt on the replay, and natively");
    }
    // The 20 KB frame (once its lowest byte is written: Valgrind maps the
    // stack's pages as the program reaches them, as the kernel does) and
    // the heap block read whole, in LLDB's lines.
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("replay-full-state").join("bt-deep_frames");
    let program = dir.join("deep_frames");
    let (stub, port) = replay_port(&dir.join("bundle").join("trace.json"));
    let out = std::process::Command::new("lldb-22")
        .args(["-b", "-o", &format!("gdb-remote {port}"), "-o", "breakpoint set -f deep_frames.c -l 11", "-o", "process continue -R", "-o", "memory read --force -c 20000 &big[0]", "-o", "memory read --force -c 100000 block"])
        .arg(&program)
        .output()
        .unwrap();
    common::end_stub(stub);
    let out = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    // (16 bytes a line.)
    let lines = |after: &str| out.split(after).nth(1).unwrap_or_default().lines().skip(1).take_while(|l| l.starts_with("0x")).count();
    assert_eq!((lines("-c 20000 &big[0]"), lines("-c 100000 block")), (1250, 6250), "{}", out.lines().filter(|l| !l.starts_with("0x")).collect::<Vec<_>>().join("\n"));
}

/// The memory regions LLDB's `memory region` shows for `expressions`, in
/// `program` stopped at `stop_here` (natively, or on the replay of
/// `trace_json`): permissions and names, without the addresses (Valgrind's
/// layout moves them).
fn lldb_regions(program: &Path, expressions: &[&str], trace_json: Option<&Path>) -> Vec<String> {
    let mut args: Vec<String> = vec!["-b".into()];
    let stub = trace_json.map(|trace_json| {
        let (stub, port) = replay_port(trace_json);
        args.extend(["-o".into(), format!("gdb-remote {port}")]);
        stub
    });
    args.extend(["-o".into(), "breakpoint set -n stop_here".into(), "-o".into(), if stub.is_some() { "process continue -R" } else { "run" }.into()]);
    for expression in expressions {
        args.extend(["-o".into(), format!("memory region {expression}")]);
    }
    let out = std::process::Command::new("lldb-22").args(&args).arg(program).output().unwrap();
    if let Some(stub) = stub {
        common::end_stub(stub);
    }
    let out = String::from_utf8_lossy(&out.stdout).into_owned();
    let regions: Vec<String> = out.lines().filter(|l| l.starts_with("[0x")).map(|l| l.split_once(") ").map_or(l, |(_, rest)| rest).to_string()).collect();
    assert_eq!(regions.len(), expressions.len(), "{out}");
    regions
}

/// `memory region` on a replay (`tests/programs/regions.c`): .data, the
/// heap, the stack, an anonymous mapping and its page made inaccessible
/// have the permissions and names LLDB shows natively; GDB's `info proc
/// mappings` lists the mappings as they were where the replay stands (no
/// heap nor the anonymous pages at the start, both at `stop_here`), and
/// lldb-dap's data breakpoints need it (`dap_client.rs`).
#[test]
fn memory_regions_on_the_replay_are_the_native_ones_as_they_were_then() {
    if !tools_present() || !common::lldb_python_present() {
        return;
    }
    let dir = work_dir("regions");
    let program = build("regions", &dir, &["-O0"]);
    let trace_json = recorded_fully(&dir, &program);
    let expressions = ["&counter", "block", "$rsp", "pages", "pages+4096", "pages+8192", "main"];
    let native = lldb_regions(&program, &expressions, None);
    assert_eq!(native[1], "rw- [heap]", "natively: {native:?}");
    assert_eq!(native[4], "---", "natively: {native:?}");
    let replayed = lldb_regions(&program, &expressions, Some(&trace_json));
    assert_eq!(replayed, native, "LLDB's memory regions on the replay, and natively");

    let (stub, target) = start_replay(&trace_json);
    let out = gdb(&program, &[&target, "monitor goto begin", "stepi", "info proc mappings", "break stop_here", "continue", "info proc mappings"]);
    common::end_stub(stub);
    let tables: Vec<&str> = out.split("Mapped address spaces:").skip(1).collect();
    assert_eq!(tables.len(), 2, "{out}");
    let lists = |table: &str, what: &str| table.lines().any(|l| l.contains(what));
    assert!(!lists(tables[0], "[heap]") && lists(tables[0], "[stack]") && lists(tables[0], "regions"), "at the start:\n{}", tables[0]);
    assert!(lists(tables[1], "rw-p   [heap]") && lists(tables[1], "---p") && lists(tables[1], "rw-p   [stack]"), "at stop_here:\n{}", tables[1]);
}

/// The libraries GDB's `info sharedlibrary` lists, by file name, without
/// Valgrind's own preloaded one.
fn libraries(section: &str) -> Vec<String> {
    let mut names: Vec<String> = section
        .lines()
        .filter(|l| l.starts_with("0x"))
        .filter_map(|l| l.split_whitespace().last())
        .map(|path| path.rsplit('/').next().unwrap_or(path).to_string())
        .filter(|name| !name.starts_with("vgpreload_"))
        .collect();
    names.sort();
    names
}

/// The shared libraries on the replay of a dynamic program that loads one
/// with `dlopen` (`tests/programs/dlopen_main.c`) are the ones loaded at
/// the position, as natively: before the `dlopen`, not the library; after
/// it, the library too.
#[test]
fn shared_libraries_are_the_ones_loaded_at_the_position() {
    if !tools_present() {
        return;
    }
    let dir = work_dir("libraries");
    let library = build("shlib_lib", &dir, &["-O0", "-shared", "-fPIC"]);
    let program = build("dlopen_main", &dir, &["-O0", "-no-pie", "-rdynamic", "-ldl"]);
    let (out, trace_json) = record_full(&dir, &program, &[library.as_os_str()]);
    // retrace record exits as the program did (with its mix of the calls).
    assert_eq!(out.status.code(), Some(49), "retrace record: {}", String::from_utf8_lossy(&out.stderr));
    let arg = library.display().to_string();
    let native = gdb(&program, &["break dlopen_main.c:11", "break dlopen_main.c:16", &format!("run {arg}"), "echo LIBRARIES\\n", "info sharedlibrary", "continue", "echo LIBRARIES\\n", "info sharedlibrary"]);
    let native: Vec<Vec<String>> = native.split("LIBRARIES").skip(1).map(libraries).collect();
    assert_eq!(native.len(), 2, "{native:?}");
    assert!(native[1].contains(&"shlib_lib".to_string()) && !native[0].contains(&"shlib_lib".to_string()), "{native:?}");

    let (stub, target) = start_replay(&trace_json);
    let out = gdb(&program, &[&target, "break dlopen_main.c:16", "reverse-continue", "echo LIBRARIES\\n", "info sharedlibrary", "break dlopen_main.c:11", "reverse-continue", "echo LIBRARIES\\n", "info sharedlibrary"]);
    common::end_stub(stub);
    let replay: Vec<Vec<String>> = out.split("LIBRARIES").skip(1).map(libraries).collect();
    assert_eq!(replay.len(), 2, "{out}");
    assert_eq!(replay[0], native[1], "after the dlopen:\n{out}");
    assert_eq!(replay[1], native[0], "before it:\n{out}");
}

/// A program killed by SIGSEGV (`tests/programs/crash.c`): the replay
/// stands where the fault stopped it natively (the faulting instruction,
/// with the registers and memory of then), reports SIGSEGV there, as rr
/// does, and a continue ends the program with it; run backwards and
/// forwards again, the fault is reported again. LLDB sees the same stop
/// (`signal SIGSEGV`) and runs backwards from it (it refuses to resume
/// backwards delivering a signal). The recording's output holds the
/// program's and retrace's words, none of Valgrind's.
#[test]
fn a_program_killed_by_sigsegv_replays_to_the_fault_and_reports_it_as_natively() {
    if !tools_present() {
        return;
    }
    let dir = work_dir("sigsegv");
    let program = build("crash", &dir, &["-O0", "-static", "-no-pie"]);
    let (out, trace_json) = record_full(&dir, &program, &[]);
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(128 + 11), "retrace record ends as the program did: {said}");
    assert!(!said.lines().any(|l| l.starts_with("==")), "Valgrind's messages in the program's stderr:\n{said}");
    let values = ["p $pc", "p $rax", "p $rdx", "p work", "p/x (long)target"];
    let mut native_commands = vec!["run"];
    native_commands.extend(values);
    native_commands.push("continue");
    let native = gdb(&program, &native_commands);
    assert!(native.contains("Program received signal SIGSEGV") && native.contains("Program terminated with signal SIGSEGV"), "{native}");
    let native_values = printed(&native);
    assert_eq!(native_values.len(), values.len(), "{native}");
    let fault = native_values[0].split_whitespace().find(|w| w.starts_with("0x")).unwrap().to_string();
    assert!(said.contains(&format!("program killed by SIGSEGV at {fault}")), "retrace record names the faulting instruction {fault}:\n{said}");

    let (stub, target) = start_replay(&trace_json);
    // At the end (where a replay starts), back one instruction, forwards
    // into the fault, and past it.
    let mut commands = vec![target.as_str(), "info program"];
    commands.extend(values);
    commands.extend(["reverse-stepi", "continue"]);
    commands.extend(values);
    commands.push("continue");
    let out = gdb(&program, &commands);
    common::end_stub(stub);
    let replayed = printed(&out);
    assert_eq!(replayed.len(), 2 * values.len(), "{out}");
    assert_eq!(&replayed[..values.len()], &native_values[..], "standing at the end of the replay:\n{out}\nnatively:\n{native}");
    assert_eq!(&replayed[values.len()..], &native_values[..], "continued into the fault:\n{out}\nnatively:\n{native}");
    assert!(out.contains("It stopped at a breakpoint") || out.contains("It stopped with signal SIGSEGV"), "info program at the end:\n{out}");
    assert!(out.contains("Program received signal SIGSEGV"), "continued into the fault:\n{out}");
    assert!(out.contains("Program terminated with signal SIGSEGV"), "continued past it:\n{out}");

    if !common::lldb_python_present() {
        return;
    }
    let (stub, port) = replay_port(&trace_json);
    let out = common::lldb_python(
        r#"
print("STOP", process.GetSelectedThread().GetStopDescription(100), hex(process.GetSelectedThread().GetFrameAtIndex(0).GetPC()))
error = process.ContinueInDirection(lldb.eRunReverse)
print("RESUMED", error.GetCString())
print("BACK", process.GetSelectedThread().GetStopDescription(100))
"#,
        &program,
        port,
        &[],
    );
    common::end_stub(stub);
    assert!(out.contains(&format!("STOP signal SIGSEGV {fault}")), "LLDB's stop at the end:\n{out}");
    assert!(out.contains("BACK history boundary"), "LLDB ran backwards to the start:\n{out}");
}
