//! `retrace-stub --record`: reverse execution of a live process, judged
//! against GDB 13's own `record full` run natively on the same program in
//! the same environment (ASLR off). One script of reverse and forward
//! commands runs on both sides; after every command the line, `bt`, the
//! locals, the general registers, a watched global and a buffer filled by
//! `read()` must be equal.

use std::path::Path;
use std::process::Command;

mod common;

use common::{pid_and_port, spawn_stub, wait_exit};
use retrace_tests::recordings::build;
use retrace_tests::tools::{require, which};

fn gdb_present() -> bool {
    require("gcc", which("gcc").is_some()) && require("gdb", which("gdb").is_some())
}

/// Prints, after each command of a script file, what both sides compare.
const SHOW: &str = r#"
import gdb
REGS = ["rax", "rbx", "rcx", "rdx", "rsi", "rdi", "rbp", "rsp", "r8", "r9", "r10", "r11",
        "r12", "r13", "r14", "r15", "rip", "eflags"]
def show():
    out = []
    sal = gdb.selected_frame().find_sal()
    out.append("line %s" % sal.line)
    out.append(gdb.execute("bt", to_string=True).strip())
    out.append(gdb.execute("info locals", to_string=True).strip())
    for r in REGS:
        value = gdb.parse_and_eval("$" + r)
        out.append("%s=%s" % (r, str(value) if r == "eflags" else "0x%x" % (int(value) & (2**64 - 1))))
    out.append("counter=%s" % gdb.parse_and_eval("counter"))
    out.append("buffer=%s" % gdb.parse_and_eval("buffer").format_string(repeat_threshold=100))
    return "\n".join(out)
class RunScript(gdb.Command):
    def __init__(self):
        super().__init__("run-script", gdb.COMMAND_USER)
    def invoke(self, arg, tty):
        for line in open(arg):
            command = line.strip()
            if not command:
                continue
            try:
                gdb.execute(command, to_string=True)
                result = "ok"
            except gdb.error as e:
                result = "error: %s" % e
            print("=== %s -> %s" % (command, result))
            print(show())
RunScript()
class Pid(gdb.Command):
    def __init__(self):
        super().__init__("print-pid", gdb.COMMAND_USER)
    def invoke(self, arg, tty):
        print("PID=%d" % gdb.selected_inferior().pid)
Pid()
"#;

/// Lines of the program the script stops at.
struct Lines {
    read: usize,
    pipe: usize,
}

fn lines() -> Lines {
    let source = std::fs::read_to_string(retrace_tests::recordings::programs_dir().join("reverse_mix.c")).unwrap();
    let line_of = |text: &str| source.lines().position(|l| l.contains(text)).unwrap() + 1;
    Lines { read: line_of("read(fds[0]"), pipe: line_of("pipe(fds)") }
}

/// The script: from before the pipe is made, back over calls and to
/// breakpoints and a watchpoint, forwards inside the history to its end
/// and on over a `read()` from the pipe; then back into the signal
/// handler, out of it to where the signal was delivered (after the system
/// call that raised it), and back across the `read()` to before it (its
/// buffer empty again). That last command is judged
/// against a forward run: GDB's `record full` restores registers wrongly
/// back across a system call here (r11 and r13 in the dynamic program, r8
/// in the static one, where the forward run and the stub agree).
fn script(lines: &Lines) -> String {
    [
        &format!("tbreak reverse_mix.c:{}", lines.pipe),
        "continue",
        "reverse-stepi",
        "reverse-step",
        "reverse-next",
        "break square",
        "reverse-continue",
        "reverse-finish",
        "reverse-continue",
        "next",
        "next",
        "watch counter",
        "reverse-continue",
        "reverse-continue",
        "continue",
        "continue",
        "continue",
        "delete",
        "break done",
        // The end of the history ("No more reverse-execution history"),
        // then on, live.
        "continue",
        "continue",
        "break on_usr1",
        "reverse-continue",
        "reverse-stepi",
        // Out of the handler: after the system call that raised the
        // signal, before its delivery.
        "reverse-finish",
        &format!("tbreak reverse_mix.c:{}", lines.read),
        "reverse-continue",
    ]
    .join("\n")
        + "\n"
}

/// The environment both programs run in: the same bytes on both stacks.
fn clean_env(command: &mut Command) {
    command.env_clear().env("PATH", "/usr/bin:/bin").env("HOME", "/");
}

/// The blocks printed after each command, with `pid` (which differs
/// between the two runs) spelled `PID`, and r11's trap flag cleared (see
/// below).
fn blocks(out: &str, pid: i32) -> Vec<String> {
    let pid = format!("=0x{pid:x}");
    let start = out.find("=== ").unwrap_or_else(|| panic!("no script output:\n{out}"));
    out[start..]
        .split("=== ")
        .filter(|b| !b.is_empty())
        .map(|block| {
            block
                .lines()
                .map(|line| {
                    if let Some(value) = line.strip_prefix("r11=0x") {
                        // GDB's `record full` single-steps `syscall` and the
                        // kernel saves RFLAGS with its trap flag into r11:
                        // GDB's run shows it after some system calls.
                        let value = u64::from_str_radix(value, 16).unwrap();
                        return format!("r11={:#x}", value & !0x100);
                    }
                    if let Some(rest) = line.strip_prefix("Hardware watchpoint") {
                        // The stub's are hardware ones; GDB's own run uses
                        // software ones (see below).
                        return format!("Watchpoint{rest}");
                    }
                    if line.ends_with(&pid) {
                        return line.replace(&pid, "=PID");
                    }
                    line.to_string()
                })
                .collect::<Vec<_>>()
                .join("\n")
        })
        .collect()
}

/// Runs `gdb -nx -batch` on `program` in the clean environment with these
/// commands (at most two minutes); its standard output.
fn gdb_in_clean_env(program: &Path, commands: &[&str]) -> String {
    let mut gdb = Command::new("timeout");
    clean_env(&mut gdb);
    gdb.args(["120", "gdb", "-nx", "-batch"]);
    for command in commands {
        gdb.args(["-ex", command]);
    }
    let out = gdb.arg(program).output().unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// GDB starting the program itself as the stub does: no shell, none of
/// GDB's own LINES and COLUMNS.
const LAUNCH_AS_THE_STUB: [&str; 3] = ["set startup-with-shell off", "unset environment LINES", "unset environment COLUMNS"];

/// Both programs pass SIGUSR1 to the program silently.
const PASS_SIGUSR1: &str = "handle SIGUSR1 nostop noprint pass";

/// The pid `print-pid` printed.
fn printed_pid(out: &str) -> i32 {
    out.lines().find_map(|l| l.strip_prefix("PID=")).and_then(|p| p.parse().ok()).unwrap_or_else(|| panic!("{out}"))
}

/// What a plain forward run shows when it first stops at `line`.
fn forward_truth(program: &Path, source_show: &str, dir: &Path, line: usize) -> String {
    let script = dir.join("forward.gdb");
    std::fs::write(&script, "print 0\n").unwrap();
    let stop = format!("break reverse_mix.c:{line}");
    let run_script = format!("run-script {}", script.display());
    let mut commands = LAUNCH_AS_THE_STUB.to_vec();
    commands.extend([PASS_SIGUSR1, source_show, &stop, "run", "print-pid", &run_script]);
    let out = gdb_in_clean_env(program, &commands);
    blocks(&out, printed_pid(&out)).pop().unwrap_or_else(|| panic!("{out}"))
}

fn compare_with_record_full(name: &str, flags: &[&str]) {
    if !gdb_present() {
        return;
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("reverse").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    let program = build("reverse_mix", &dir, flags);
    let lines = lines();
    let show = dir.join("show.py");
    std::fs::write(&show, SHOW).unwrap();
    let script_text = script(&lines);
    let script_path = dir.join("script.gdb");
    std::fs::write(&script_path, &script_text).unwrap();
    let run_script = format!("run-script {}", script_path.display());
    let source_show = format!("source {}", show.display());

    // GDB alone: `record full` from main.
    let mut commands = LAUNCH_AS_THE_STUB.to_vec();
    commands.extend([
        PASS_SIGUSR1,
        // GDB's reverse execution misses hardware watchpoints here.
        "set can-use-hw-watchpoints 0",
        &source_show,
        "break main",
        "run",
        "print-pid",
        "record full",
        &run_script,
    ]);
    let native = gdb_in_clean_env(&program, &commands);
    let native_pid = printed_pid(&native);

    // GDB against the stub, recording from the first instruction.
    let mut stub = Command::new(env!("CARGO_BIN_EXE_retrace-stub"));
    clean_env(&mut stub);
    stub.args(["--record", "--listen", "127.0.0.1:0", "--"]).arg(&program);
    let (child, line) = spawn_stub(stub);
    let (stub_pid, port) = pid_and_port(&line);
    let target = format!("target remote 127.0.0.1:{port}");
    let remote = gdb_in_clean_env(&program, &[PASS_SIGUSR1, &source_show, &target, "break main", "continue", &run_script]);
    let _ = wait_exit(child);

    std::fs::write(dir.join("native.out"), &native).unwrap();
    std::fs::write(dir.join("remote.out"), &remote).unwrap();
    let (expected, actual) = (blocks(&native, native_pid), blocks(&remote, stub_pid));
    let commands = script_text.lines().count();
    assert_eq!(expected.len(), commands, "GDB's own run did not finish the script:\n{native}");
    assert_eq!(actual.len(), commands, "{remote}");
    for (want, got) in expected.iter().zip(&actual).take(commands - 1) {
        assert_eq!(got, want, "after `{}` (left: against the stub, right: GDB's record full)", want.lines().next().unwrap_or(""));
    }
    // The last: the state before read() reached backwards across the
    // signal's delivery is the state a forward run stops in there.
    let forward = forward_truth(&program, &source_show, &dir, lines.read);
    let last = |block: &str| block.lines().skip(1).collect::<Vec<_>>().join("\n");
    assert_eq!(last(actual.last().unwrap()), last(&forward), "back across the signal delivery (left: against the stub, right: a forward run)");
    // Where the history starts differs (the stub records from the first
    // instruction); nothing here reaches it, and every command succeeded.
    assert!(actual.iter().all(|b| b.lines().next().is_some_and(|l| l.ends_with("-> ok"))), "{remote}");
    // Sanity: the script reached what it is about.
    let all = actual.join("\n");
    assert!(all.contains("on_usr1"), "the signal handler was reached");
    let last = actual.last().unwrap();
    assert!(last.contains(&format!("buffer=\"{}\"", "\\000".repeat(31))), "before read() its buffer is empty again:\n{last}");
    assert!(all.contains("buffer=\"hello, past\\000"), "after read()");
    // The recording's own r11 after a system call never has our trap flag.
    for line in remote.lines().filter_map(|l| l.strip_prefix("r11=0x")) {
        assert_eq!(u64::from_str_radix(line, 16).unwrap() & 0x100, 0, "r11 keeps the trap flag of a single step");
    }
}

#[test]
fn gdb_reverse_execution_matches_record_full_static() {
    compare_with_record_full("static", &["-O0", "-static"]);
}

#[test]
fn gdb_reverse_execution_matches_record_full_dynamic() {
    compare_with_record_full("dynamic", &["-O0"]);
}

/// `--attach PID --record`: a running program is recorded from the moment
/// the stub attaches. Forward to two calls of `tick`, then backwards: the
/// first call's argument and the counter before it are the ones seen going
/// forwards, and the history begins at the attach (not at the program's
/// start), after which forwards runs into the same call again.
#[test]
fn gdb_reverse_continues_through_a_history_recorded_from_attach() {
    if !gdb_present() {
        return;
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("reverse-attach");
    let program = build("attach_ticks", &dir, &["-O0"]);
    let mut running = Command::new(&program).spawn().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(200));
    let mut stub = Command::new(env!("CARGO_BIN_EXE_retrace-stub"));
    stub.args(["--record", "--listen", "127.0.0.1:0", "--attach", &running.id().to_string()]);
    let (child, line) = spawn_stub(stub);
    assert!(line.contains("attached and stopped"), "{line}");
    let (_, port) = pid_and_port(&line);
    let target = format!("target remote 127.0.0.1:{port}");
    let out = common::gdb(
        &program,
        &[
            &target,
            "p/x $pc",
            "break tick",
            "continue",
            "p/x $rdi",
            "continue",
            "p/x $rdi",
            "p/x counter",
            "reverse-continue",
            "p/x $rdi",
            "p/x counter",
            "reverse-continue",
            "continue",
            "p/x $rdi",
            "monitor record status",
            "kill",
        ],
    );
    let _ = wait_exit(child);
    let _ = running.kill();
    let _ = running.wait();
    let values = common::printed_values(&out);
    assert_eq!(values.len(), 7, "{out}");
    let (attached_at, values) = (values[0], &values[1..]);
    let first = values[0];
    assert!(first > 1, "the program had counted before the attach:\n{out}");
    assert_eq!(values[1..3], [first + 1, first], "forwards:\n{out}");
    assert_eq!(values[3..5], [first, first - 1], "back at the first call, the counter before it:\n{out}");
    // The history begins at the attach. Where the attach stopped the
    // program on the breakpoint's own address (the call before the first,
    // caught at its first instruction: rare, more so on a busy machine), a
    // reverse continue stops there for the breakpoint, as on the processor.
    if common::gdb_breakpoint_address(&out, 1) == attached_at {
        assert!(out.contains(&format!("Breakpoint 1, tick (i={})", first - 1)), "the attach stood at the breakpoint:\n{out}");
    } else {
        assert!(out.contains("No more reverse-execution history."), "the history begins at the attach:\n{out}");
    }
    assert_eq!(values[5], first, "forwards from the attach into the first call again:\n{out}");
}

/// Expressions and writes in the past through GDB 13: a call at a past
/// stop returns what it returns there, a variable set there reads back
/// (the process runs a diversion from that state), and the next move
/// through the history shows the recorded values again — forwards and
/// backwards — with the live program's end as recorded.
#[test]
fn gdb_calls_and_writes_in_the_past_leave_the_history_as_recorded() {
    if !gdb_present() {
        return;
    }
    let (out, status) = gdb_on_recording(
        "lldb_reverse",
        &[
            "break stop_recording",
            "continue",
            "break trigger_breakpoint",
            "reverse-continue",
            "p/x *g_watched_var_ptr",
            "p/x false_condition() + 40",
            "set var *g_watched_var_ptr = 7",
            "p/x *g_watched_var_ptr",
            "stepi",
            "p/x *g_watched_var_ptr",
            "p/x false_condition() + 41",
            "reverse-stepi",
            "reverse-stepi",
            "p/x *g_watched_var_ptr",
            "delete",
            "continue",
            "continue",
        ],
    );
    let values = common::printed_values(&out);
    assert!(out.contains("Breakpoint 2, trigger_breakpoint"), "{out}");
    assert_eq!(values, [2, 40, 7, 2, 41, 2], "{out}");
    assert!(out.contains("No more reverse-execution history."), "forwards through the history to its end:\n{out}");
    assert!(out.contains("exited normally"), "the program ends as recorded:\n{out}");
    assert!(status.is_some(), "the stub ends with the program");
}

/// Read and access watchpoints (`Z3`, `Z4`) in a full recording, through
/// GDB 13: backwards, `rwatch` stops at the one instruction that read the
/// global (PC on it, not yet run: it names the global) and then finds no
/// earlier read; forwards from the start, `awatch` stops after each store
/// and the read, in order.
#[test]
fn gdb_read_and_access_watchpoints_stop_in_the_past() {
    if !gdb_present() {
        return;
    }
    let (out, _) = gdb_on_recording(
        "read_watch",
        &[
            "break done",
            "continue",
            "delete",
            "rwatch shared",
            "reverse-continue",
            "info symbol $pc",
            "x/i $pc",
            "reverse-continue",
            "delete",
            "awatch shared",
            "continue",
            "info symbol $pc",
            "continue",
            "info symbol $pc",
            "continue",
            "info symbol $pc",
            "kill",
        ],
    );
    let functions: Vec<&str> = out.lines().filter(|l| l.contains(" in section .text")).map(|l| l.split(' ').next().unwrap()).collect();
    assert_eq!(functions, ["reader", "writer", "reader", "writer"], "{out}");
    let read_at = out.lines().find(|l| l.starts_with("=> ")).unwrap_or_else(|| panic!("{out}"));
    assert!(read_at.contains("<shared>"), "the reverse stop is on the instruction that reads it: {read_at}\n{out}");
    assert!(out.contains("No more reverse-execution history."), "no read before it:\n{out}");
    assert!(out.contains("Hardware read watchpoint 2: shared"), "{out}");
    // Once when set, then at each of its three stops.
    assert_eq!(out.matches("Hardware access (read/write) watchpoint 3: shared").count(), 4, "{out}");
    assert_eq!(out.matches("Hardware read watchpoint 2: shared").count(), 2, "{out}");
}

/// GDB 13 against `retrace-stub --record` on `name` (from
/// tests/programs, static -O0): `commands` after `set confirm off` and
/// `target remote`; its output and whether the stub ended by itself.
fn gdb_on_recording(name: &str, commands: &[&str]) -> (String, Option<i32>) {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("reverse-{name}"));
    let program = build(name, &dir, &["-O0", "-static"]);
    let mut stub = Command::new(env!("CARGO_BIN_EXE_retrace-stub"));
    stub.args(["--record", "--listen", "127.0.0.1:0", "--"]).arg(&program);
    let (child, line) = spawn_stub(stub);
    let (_, port) = pid_and_port(&line);
    let target = format!("target remote 127.0.0.1:{port}");
    let mut all = vec!["set confirm off", &target];
    all.extend(commands);
    let out = common::gdb(&program, &all);
    (out, wait_exit(child))
}

#[test]
fn memory_a_system_call_wrote_unkept_is_unavailable_before_it_never_stale() {
    if !gdb_present() {
        return;
    }
    // 600 MiB of writable memory: the `read()` cannot be bracketed by
    // copies, so what it wrote is not kept.
    let (out, status) = gdb_on_recording(
        "huge_writable",
        &[
            "break done",
            "continue",
            "print buffer",
            "break before_read",
            "reverse-continue",
            "info symbol $pc",
            "print buffer",
            "print sizeof(buffer)",
            "delete",
            "continue",
            "continue",
        ],
    );
    let printed: Vec<&str> = out.lines().filter(|l| l.starts_with('$') || l.contains("Cannot access memory")).collect();
    assert_eq!(printed.first().copied(), Some("$1 = \"after!\\000\""), "{out}");
    assert!(out.lines().any(|l| l.starts_with("before_read + ")), "back before the read:\n{out}");
    assert!(
        printed.iter().any(|l| l.contains("Cannot access memory at address")) && !printed.iter().skip(1).any(|l| l.contains("after!")),
        "before the read the buffer is unavailable, not what the read wrote:\n{out}"
    );
    assert!(out.contains("exited normally"), "{out}");
    assert_eq!(status, Some(0), "{out}");
}
