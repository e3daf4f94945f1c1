//! `retrace-stub --record` with four threads, each hitting one breakpoint
//! once: every reverse continue stops at the latest earlier hit, in
//! whichever thread made it, and selects that thread — in GDB 13 and in
//! LLDB 22. The truth is the program's own: each thread writes its tid
//! into `order[]` just before its hit, under a lock.

use std::path::{Path, PathBuf};

mod common;

use common::{end_stub, gdb, gdb_breakpoint_address, json_lines, lldb_python, start_recording};
use retrace_tests::recordings::build;
use retrace_tests::tools::{require, which};

fn program(client: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("reverse_threads").join(client);
    let _ = std::fs::remove_dir_all(&dir);
    build("four_hits", &dir, &["-O0", "-static", "-pthread"])
}

/// The tids in `order[]` from a line `… = {a, b, c, d}`.
fn order(line: &str) -> Vec<u64> {
    let list = line.split_once('{').and_then(|(_, rest)| rest.split_once('}')).map(|(list, _)| list).unwrap_or_else(|| panic!("no list in {line}"));
    list.split(',').map(|n| n.trim().parse().unwrap()).collect()
}

#[test]
fn gdb_reverse_continue_stops_at_each_threads_hit_latest_first() {
    if !require("gcc", which("gcc").is_some()) || !require("gdb", which("gdb").is_some()) {
        return;
    }
    let program = program("gdb");
    let (child, port) = start_recording(&program, "full");
    let lwp = "python print('LWP=%d' % gdb.selected_thread().ptid[1])";
    let pc = "python print('PC=%d' % int(gdb.parse_and_eval('$pc')))";
    let mut commands = vec![format!("target remote 127.0.0.1:{port}"), "break done".into(), "continue".into(), "print order".into(), "break hit".into()];
    for _ in 0..4 {
        commands.extend(["reverse-continue".to_string(), lwp.to_string(), pc.to_string()]);
    }
    commands.extend(["reverse-continue".to_string(), "kill".to_string()]);
    let commands: Vec<&str> = commands.iter().map(String::as_str).collect();
    let out = gdb(&program, &commands);
    end_stub(child);
    let order = order(out.lines().find(|l| l.starts_with("$1 = {")).unwrap_or_else(|| panic!("{out}")));
    assert_eq!(order.len(), 4);
    let stopped: Vec<u64> = out.lines().filter_map(|l| l.strip_prefix("LWP=")).map(|n| n.parse().unwrap()).collect();
    let latest_first: Vec<u64> = order.iter().rev().copied().collect();
    assert_eq!(stopped, latest_first, "the threads selected at each reverse stop:\n{out}");
    assert_eq!(out.lines().filter(|l| l.contains("hit Breakpoint 2, hit (k=")).count(), 4, "{out}");
    let breakpoint = gdb_breakpoint_address(&out, 2);
    let pcs: Vec<u64> = out.lines().filter_map(|l| l.strip_prefix("PC=")).map(|n| n.parse().unwrap()).collect();
    assert_eq!(pcs, [breakpoint; 4], "each stop is at the breakpoint in hit:\n{out}");
    assert!(out.contains("No more reverse-execution history."), "then the start of the history:\n{out}");
}

const LLDB_SESSION: &str = r#"
target.BreakpointCreateByName("done")
process.Continue()
order = target.FindFirstGlobalVariable("order")
print(json.dumps({"order": [order.GetChildAtIndex(i).GetValueAsUnsigned() for i in range(4)]}))
hit = target.BreakpointCreateByName("hit")
address = hit.GetLocationAtIndex(0).GetLoadAddress()
for _ in range(5):
    process.ContinueInDirection(lldb.eRunReverse)
    thread = process.GetSelectedThread()
    print(json.dumps({"tid": thread.GetThreadID(), "reason": thread.GetStopReason(),
                      "at_hit": thread.GetFrameAtIndex(0).GetPC() == address,
                      "threads": len(process.threads)}))
process.Kill()
"#;

#[test]
fn lldb_reverse_continue_stops_at_each_threads_hit_latest_first() {
    if !common::lldb_python_present() {
        return;
    }
    let program = program("lldb");
    let (child, port) = start_recording(&program, "full");
    let text = lldb_python(LLDB_SESSION, &program, port, &[]);
    end_stub(child);
    let lines = json_lines(&text);
    assert_eq!(lines.len(), 6, "{text}");
    let order: Vec<u64> = lines[0]["order"].as_array().unwrap().iter().map(|t| t.as_u64().unwrap()).collect();
    const BREAKPOINT: u64 = 3; // lldb.eStopReasonBreakpoint
    const HISTORY_BOUNDARY: u64 = 16; // lldb.eStopReasonHistoryBoundary
    for (stop, tid) in lines[1..5].iter().zip(order.iter().rev()) {
        assert_eq!(stop["tid"].as_u64(), Some(*tid), "the thread selected:\n{text}");
        assert_eq!(stop["reason"].as_u64(), Some(BREAKPOINT), "{text}");
        assert_eq!(stop["at_hit"], true, "{text}");
        assert!(stop["threads"].as_u64().unwrap() >= 2, "the past's threads are listed:\n{text}");
    }
    assert_eq!(lines[5]["reason"].as_u64(), Some(HISTORY_BOUNDARY), "then the start of the history:\n{text}");
}
