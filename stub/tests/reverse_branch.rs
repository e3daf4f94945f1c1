//! `retrace-stub --record=branch`: control flow only. After each reverse
//! stop the PC is the one `--record=full` gives for the same commands (full
//! mode is itself checked against GDB's `record full` in `reverse.rs`);
//! every other register is unavailable, stack memory is refused, and code
//! reads work — in GDB 13 and in LLDB 22.

use std::path::{Path, PathBuf};
use std::process::Command;

mod common;

use common::{gdb, gdb_breakpoint_address, pid_and_port, spawn_stub};
use retrace_tests::recordings::build;
use retrace_tests::tools::{require, which};

fn program(client: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("reverse_branch").join(client);
    let _ = std::fs::remove_dir_all(&dir);
    build("replay_loop", &dir, &["-O0", "-static"])
}

fn start(program: &Path, mode: &str) -> (std::process::Child, u16) {
    let mut stub = Command::new(env!("CARGO_BIN_EXE_retrace-stub"));
    stub.args([&format!("--record={mode}"), "--listen", "127.0.0.1:0", "--"]).arg(program);
    let (child, line) = spawn_stub(stub);
    (child, pid_and_port(&line).1)
}

fn stop(mut child: std::process::Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// The same moves in both modes: to `finish`, back to the last call of
/// `work`, three instructions back, back to the call before, and one
/// instruction forward.
const MOVES: [&str; 8] = ["reverse-continue", "PC", "reverse-stepi", "reverse-stepi", "reverse-stepi", "PC", "reverse-continue", "PC"];

/// `stack`: the stack pointer at the last stop, as full mode has it (the
/// stub runs the program without address randomization, so both runs
/// have the same stack).
fn gdb_session(program: &Path, mode: &str, stack: Option<u64>) -> String {
    let (child, port) = start(program, mode);
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
    stop(child);
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
    assert!(branch.contains("Cannot access memory at address"), "stack memory is refused:\n{branch}");
    assert!(branch.lines().any(|l| l.contains("=> 0x") && l.contains("<work+")), "code is read:\n{branch}");
}

const LLDB_SESSION: &str = r#"
import json, sys, lldb
program, port = sys.argv[1], sys.argv[2]
debugger = lldb.SBDebugger.Create()
debugger.SetAsync(False)
target = debugger.CreateTarget(program)
error = lldb.SBError()
process = target.ConnectRemote(debugger.GetListener(), "connect://127.0.0.1:" + port, "gdb-remote", error)
assert error.Success(), error.GetCString()
target.BreakpointCreateByName("finish")
process.Continue()
work = target.BreakpointCreateByName("work")
for _ in range(2):
    process.ContinueInDirection(lldb.eRunReverse)
    frame = process.GetSelectedThread().GetFrameAtIndex(0)
    rax = frame.FindRegister("rax")
    rsp = frame.FindRegister("rsp")
    stack = process.ReadMemory(rsp.GetValueAsUnsigned(0), 16, error) if rsp.GetError().Success() else None
    stack_ok = error.Success() and stack is not None
    code = process.ReadMemory(frame.GetPC(), 8, error)
    print(json.dumps({"pc": frame.GetPC(), "breakpoint": work.GetLocationAtIndex(0).GetLoadAddress(),
                      "function": frame.GetFunctionName(),
                      "rax": rax.GetValueAsUnsigned(0) if rax.GetError().Success() else None,
                      "rax_error": rax.GetError().GetCString(),
                      "stack_read": stack_ok, "code_read": error.Success() and len(code) == 8}))
process.Kill()
"#;

fn lldb_session(program: &Path, mode: &str) -> Vec<serde_json::Value> {
    let (child, port) = start(program, mode);
    let out = Command::new("timeout").args(["300", "/usr/bin/python3", "-c", LLDB_SESSION]).arg(program).arg(port.to_string()).output().unwrap();
    stop(child);
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    let stops: Vec<serde_json::Value> = text.lines().filter(|l| l.starts_with("{\"")).map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(stops.len(), 2, "{mode}:\n{text}");
    stops
}

#[test]
fn lldb_branch_mode_has_the_pc_of_full_mode_and_nothing_stale() {
    if !require("gcc", which("gcc").is_some())
        || !require("lldb-22", which("lldb-22").is_some())
        || !require("python3-lldb-22", Path::new("/usr/lib/python3/dist-packages/lldb").exists())
    {
        return;
    }
    let program = program("lldb");
    let full = lldb_session(&program, "full");
    let branch = lldb_session(&program, "branch");
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
