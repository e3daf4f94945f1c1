//! `retrace-stub --record=branch`: control flow only. After each reverse
//! stop the PC is the one `--record=full` gives for the same commands (full
//! mode is itself checked against GDB's `record full` in `reverse.rs`);
//! every other register is unavailable, stack memory is refused, and code
//! reads work — in GDB 13 and in LLDB 22.

use std::path::{Path, PathBuf};

mod common;

use common::{end_stub, gdb, gdb_breakpoint_address, json_lines, lldb_python, start_recording};
use retrace_tests::recordings::build;
use retrace_tests::tools::{require, which};

fn program(client: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("reverse_branch").join(client);
    let _ = std::fs::remove_dir_all(&dir);
    build("replay_loop", &dir, &["-O0", "-static"])
}

/// The same moves in both modes: to `finish`, back to the last call of
/// `work`, three instructions back, back to the call before, and one
/// instruction forward.
const MOVES: [&str; 8] = ["reverse-continue", "PC", "reverse-stepi", "reverse-stepi", "reverse-stepi", "PC", "reverse-continue", "PC"];

/// `stack`: the stack pointer at the last stop, as full mode has it (the
/// stub runs the program without address randomization, so both runs
/// have the same stack).
fn gdb_session(program: &Path, mode: &str, stack: Option<u64>) -> String {
    let (child, port) = start_recording(program, mode);
    let pc = "python print('PC=%d' % int(gdb.parse_and_eval('$pc')))";
    let mut commands = vec![format!("target remote 127.0.0.1:{port}"), "break finish".into(), "continue".into(), "break work".into()];
    for m in MOVES {
        commands.push(if m == "PC" { pc.into() } else { m.into() });
        if m == "reverse-stepi" {
            commands.push(pc.into());
        }
    }
    let read_stack = match stack {
        Some(sp) => format!("x/2gx {sp:#x}"),
        None => "python print('SP=%d' % int(gdb.parse_and_eval('$sp')))".into(),
    };
    commands.extend(["stepi".into(), pc.into(), "info registers rax rbx rsp".into(), read_stack, "x/3i $pc".into(), "kill".into()]);
    let commands: Vec<&str> = commands.iter().map(String::as_str).collect();
    let out = gdb(program, &commands);
    end_stub(child);
    out
}

fn pcs(out: &str) -> Vec<u64> {
    out.lines().filter_map(|l| l.strip_prefix("PC=")).map(|n| n.parse().unwrap()).collect()
}

#[test]
fn gdb_branch_mode_has_the_pc_of_full_mode_and_nothing_stale() {
    if !require("gcc", which("gcc").is_some()) || !require("gdb", which("gdb").is_some()) {
        return;
    }
    let program = program("gdb");
    let full = gdb_session(&program, "full", None);
    let sp = full.lines().find_map(|l| l.strip_prefix("SP=")).and_then(|n| n.parse().ok()).unwrap_or_else(|| panic!("{full}"));
    let branch = gdb_session(&program, "branch", Some(sp));
    let (full_pcs, branch_pcs) = (pcs(&full), pcs(&branch));
    assert_eq!(full_pcs.len(), 7, "{full}");
    assert_eq!(branch_pcs, full_pcs, "the PCs after each move (left: branch, right: full)\n{branch}");
    assert_eq!(full_pcs[0], gdb_breakpoint_address(&full, 2), "{full}");
    assert!(full.contains("rax            0x"), "full mode has rax:\n{full}");
    for register in ["rax", "rbx", "rsp"] {
        assert!(branch.lines().any(|l| l.starts_with(register) && l.contains("<unavailable>")), "{register} is unavailable:\n{branch}");
    }
    assert!(branch.contains(&format!("Cannot access memory at address {sp:#x}")), "stack memory is refused:\n{branch}");
    assert!(branch.lines().any(|l| l.contains("=> 0x") && l.contains("<work+")), "code is read:\n{branch}");
}

const LLDB_SESSION: &str = r#"
target.BreakpointCreateByName("finish")
process.Continue()
work = target.BreakpointCreateByName("work")
# Where to read the stack: the stack pointers full mode had (argv[3]), as
# branch mode has none.
stack_at = [int(a) for a in sys.argv[3].split(",")] if len(sys.argv) > 3 else None
for i in range(2):
    process.ContinueInDirection(lldb.eRunReverse)
    frame = process.GetSelectedThread().GetFrameAtIndex(0)
    rax = frame.FindRegister("rax")
    sp = stack_at[i] if stack_at else frame.FindRegister("rsp").GetValueAsUnsigned(0)
    stack = process.ReadMemory(sp, 16, error)
    stack_ok = error.Success() and stack is not None and len(stack) == 16
    code = process.ReadMemory(frame.GetPC(), 8, error)
    print(json.dumps({"pc": frame.GetPC(), "sp": sp, "breakpoint": work.GetLocationAtIndex(0).GetLoadAddress(),
                      "function": frame.GetFunctionName(),
                      "rax": rax.GetValueAsUnsigned(0) if rax.GetError().Success() else None,
                      "rax_error": rax.GetError().GetCString(),
                      "stack_read": stack_ok, "code_read": error.Success() and len(code) == 8}))
process.Kill()
"#;

/// `stack`: where to read the stack at each stop (full mode's stack
/// pointers; the stub runs the program without address randomization).
fn lldb_session(program: &Path, mode: &str, stack: Option<&str>) -> Vec<serde_json::Value> {
    let (child, port) = start_recording(program, mode);
    let text = lldb_python(LLDB_SESSION, program, port, stack.as_slice());
    end_stub(child);
    let stops = json_lines(&text);
    assert_eq!(stops.len(), 2, "{mode}:\n{text}");
    stops
}

#[test]
fn lldb_branch_mode_has_the_pc_of_full_mode_and_nothing_stale() {
    if !common::lldb_python_present() {
        return;
    }
    let program = program("lldb");
    let full = lldb_session(&program, "full", None);
    let stack: Vec<String> = full.iter().map(|f| f["sp"].as_u64().filter(|&sp| sp != 0).expect("full mode has rsp").to_string()).collect();
    let branch = lldb_session(&program, "branch", Some(&stack.join(",")));
    for (f, b) in full.iter().zip(&branch) {
        assert_eq!(f["pc"], f["breakpoint"], "full: at the breakpoint: {f}");
        assert_eq!(b["pc"], f["pc"], "branch and full stop at the same PC: {b} / {f}");
        assert_eq!(b["function"], "work", "{b}");
        assert!(f["rax"].is_u64() && f["stack_read"] == true && f["code_read"] == true, "full mode has everything: {f}");
        assert!(b["rax"].is_null(), "rax is unavailable in branch mode: {b}");
        assert_eq!(b["stack_read"], false, "stack memory is refused in branch mode: {b}");
        assert_eq!(b["code_read"], true, "code is read in branch mode: {b}");
    }
}

/// One GDB session on `block_edges` recorded in `mode`: a hardware
/// watchpoint hit inside a block, a breakpoint inside straight-line code,
/// a signal passed to its handler, a fork, then on to the end. The PC and
/// `monitor record status --json` at each stop, and GDB's output.
fn edges_session(program: &Path, mode: &str, line: usize) -> (Vec<u64>, Vec<serde_json::Value>, String) {
    let (child, port) = start_recording(program, mode);
    let pc = "python print('PC=%d' % int(gdb.parse_and_eval('$pc')))";
    let status = "monitor record status --json";
    let target = format!("target remote 127.0.0.1:{port}");
    let inside = format!("break block_edges.c:{line}");
    let commands = [
        &target, "handle SIGUSR1 nostop noprint pass", "watch watched", "continue", pc, status, "delete", &inside, "continue", pc, status, "delete",
        "break done", "continue", pc, status, "delete", "continue",
    ];
    let out = gdb(program, &commands);
    end_stub(child);
    (pcs(&out), json_lines(&out), out)
}

#[test]
fn branch_mode_runs_block_by_block_and_records_every_instruction_full_mode_steps() {
    if !require("gcc", which("gcc").is_some()) || !require("gdb", which("gdb").is_some()) {
        return;
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("reverse_branch").join("edges");
    let _ = std::fs::remove_dir_all(&dir);
    let program = build("block_edges", &dir, &["-O0", "-static"]);
    let source = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/programs/block_edges.c")).unwrap();
    let line = source.lines().position(|l| l.contains("a breakpoint here is inside a block")).unwrap() + 1;
    // Full mode single-steps every instruction: the count to match.
    let (full_pcs, full_status, full) = edges_session(&program, "full", line);
    let (branch_pcs, branch_status, branch) = edges_session(&program, "branch", line);
    assert_eq!(full_pcs.len(), 3, "{full}");
    assert_eq!(branch_pcs, full_pcs, "the PC at the watchpoint, the breakpoint inside a block and `done` (left: branch)\n{branch}");
    let counts = |s: &[serde_json::Value]| s.iter().map(|v| v["instructions"].as_u64().unwrap()).collect::<Vec<_>>();
    assert_eq!(counts(&branch_status), counts(&full_status), "instructions recorded at each stop (left: branch, right: full)\n{branch}");
    assert!(counts(&full_status)[0] > 1000, "{full}");
    for out in [&full, &branch] {
        assert!(out.contains("Hardware watchpoint 1: watched"), "{out}");
        let new_value = |o: &str| o.lines().find(|l| l.starts_with("New value = ")).map(str::to_string);
        assert_eq!(new_value(out), new_value(&full), "{out}");
        // The forked child ran `churn` (code the stub had int3s in) and
        // computed what the parent does.
        assert!(out.contains("exited normally"), "{out}");
    }
    assert_eq!(branch_pcs[1], gdb_breakpoint_address(&branch, 2), "{branch}");
}

/// What `--record=branch` says when a watchpoint is set and the debugger
/// moves in the history (the first words of its message).
const WATCH_REFUSED: &str = "a watchpoint cannot stop a run in the past in --record=branch mode";

/// GDB: a watchpoint in branch mode cannot stop a run in the past (the
/// history has no memory writes), so reverse-continue with one set is
/// refused with the reason, where the debugger stands — not run on to the
/// start of the history as though nothing wrote the variable; the monitor
/// status says why; without the watchpoint reverse execution goes on; a
/// forward run through the past with one set is refused alike.
#[test]
fn gdb_branch_mode_refuses_to_move_in_the_past_with_a_watchpoint_and_says_why() {
    if !require("gcc", which("gcc").is_some()) || !require("gdb", which("gdb").is_some()) {
        return;
    }
    let program = program("gdb-watch");
    let (child, port) = start_recording(&program, "branch");
    let where_ = "python print('WHERE=%s' % gdb.selected_frame().name())";
    let commands = [
        &format!("target remote 127.0.0.1:{port}"), "break finish", "continue", "watch total", "reverse-continue", where_, "monitor record status", "monitor record status --json",
        "delete 2", "break work", "reverse-continue", where_, "watch total", "continue", where_, "delete", "reverse-continue", "kill",
    ];
    let out = gdb(&program, &commands);
    end_stub(child);
    let wheres: Vec<&str> = out.lines().filter_map(|l| l.strip_prefix("WHERE=")).collect();
    assert_eq!(wheres, ["finish", "work", "work"], "refused where it stood, back to work, refused there:\n{out}");
    assert_eq!(out.matches(&format!("retrace-stub: {WATCH_REFUSED}")).count(), 2, "the reason, on each refusal:\n{out}");
    assert!(out.contains(&format!("Watchpoints: {WATCH_REFUSED}")), "the status says why:\n{out}");
    let status = json_lines(&out);
    assert_eq!(status[0]["watchpoints"]["refused"], true, "{out}");
    // (GDB's stdout comes first in `out`, its warnings after.)
    let boundary = out.find("No more reverse-execution history.").unwrap_or_else(|| panic!("the start of the history at last:\n{out}"));
    assert_eq!(out[..boundary].matches("Program stopped.").count(), 2, "refused twice before the watchpoint's deletion:\n{out}");
    assert_eq!(out.matches("No more reverse-execution history.").count(), 1, "{out}");
    assert_eq!(out.matches("Remote failure reply").count(), 2, "{out}");
}

const LLDB_WATCH_REFUSED: &str = r#"
target.BreakpointCreateByName("finish")
process.Continue()
options = lldb.SBWatchpointOptions()
options.SetWatchpointTypeWrite(lldb.eWatchpointWriteTypeOnModify)
total = target.FindFirstGlobalVariable("total")
watch = target.WatchpointCreateByAddress(total.GetLoadAddress(), 4, options, error)
assert error.Success(), error.GetCString()
def stop():
    thread = process.GetSelectedThread()
    return {"reason": thread.GetStopReason(), "description": thread.GetStopDescription(300),
            "function": thread.GetFrameAtIndex(0).GetFunctionName(), "state": process.GetState()}
process.ContinueInDirection(lldb.eRunReverse)
print(json.dumps(stop()))
target.DeleteWatchpoint(watch.GetID())
process.ContinueInDirection(lldb.eRunReverse)
print(json.dumps(stop()))
process.Kill()
"#;

/// LLDB: the same refusal is a stop where it stood, the reason as its
/// description; without the watchpoint, reverse-continue reaches the start.
#[test]
fn lldb_branch_mode_refuses_to_move_in_the_past_with_a_watchpoint_and_says_why() {
    if !common::lldb_python_present() {
        return;
    }
    let program = program("lldb-watch");
    let (child, port) = start_recording(&program, "branch");
    let text = lldb_python(LLDB_WATCH_REFUSED, &program, port, &[]);
    end_stub(child);
    let stops = json_lines(&text);
    assert_eq!(stops.len(), 2, "{text}");
    const STOPPED: u64 = 5; // lldb.eStateStopped
    const HISTORY_BOUNDARY: u64 = 16; // lldb.eStopReasonHistoryBoundary
    assert_eq!(stops[0]["state"].as_u64(), Some(STOPPED), "{text}");
    assert_eq!(stops[0]["function"], "finish", "it stays where it stood:\n{text}");
    assert!(stops[0]["description"].as_str().unwrap().starts_with(WATCH_REFUSED), "{text}");
    assert_eq!(stops[1]["reason"].as_u64(), Some(HISTORY_BOUNDARY), "{text}");
}
