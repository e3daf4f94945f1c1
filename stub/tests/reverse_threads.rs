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

/// The overrun program, `-O0` dynamic (glibc's `pthread_join` waits in a
/// futex system call while the writer runs), and the line of its store.
fn overrun_program(client: &str) -> (PathBuf, u32) {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("reverse_threads").join(format!("overrun-{client}"));
    let _ = std::fs::remove_dir_all(&dir);
    let program = build("overrun_threads", &dir, &["-O0", "-pthread"]);
    let source = std::fs::read_to_string(retrace_tests::recordings::programs_dir().join("overrun_threads.c")).unwrap();
    let line = source.lines().position(|l| l.contains("/* overrun */")).unwrap() as u32 + 1;
    (program, line)
}

/// GDB: a write watchpoint on the global the worker overruns into, and
/// reverse-continue from after the join: the stop is the writer's, at its
/// store, in its thread (the program says which thread wrote) — not main's
/// futex call, during which the write happened — and before it nothing
/// else wrote the global.
fn gdb_watch_overrun(workers: &str) {
    if !require("gcc", which("gcc").is_some()) || !require("gdb", which("gdb").is_some()) {
        return;
    }
    let (program, store_line) = overrun_program(&format!("gdb-{workers}"));
    let (child, port) = common::start_recording_with_args(&program, &[workers], "full");
    let commands = [
        format!("target remote 127.0.0.1:{port}"),
        "break joined".into(),
        "continue".into(),
        "python print('WRITER=%d' % int(gdb.parse_and_eval('writer')))".into(),
        "watch -l g.shared".into(),
        "reverse-continue".into(),
        "python print('LWP=%d' % gdb.selected_thread().ptid[1])".into(),
        "python f = gdb.selected_frame(); print('FRAME=%s:%d' % (f.name(), f.find_sal().line))".into(),
        "print g.shared".into(),
        "reverse-continue".into(),
        "kill".into(),
    ];
    let commands: Vec<&str> = commands.iter().map(String::as_str).collect();
    let out = gdb(&program, &commands);
    end_stub(child);
    let value = |prefix: &str| out.lines().find_map(|l| l.strip_prefix(prefix)).unwrap_or_else(|| panic!("no {prefix}:\n{out}")).to_string();
    assert_eq!(value("LWP="), value("WRITER="), "the thread selected is the writer:\n{out}");
    assert_eq!(value("FRAME="), format!("worker:{store_line}"), "the stop is at the store:\n{out}");
    let watch = out.find("Old value = 7\nNew value = 44").unwrap_or_else(|| panic!("the overrun's values, seen backwards:\n{out}"));
    assert!(out[..watch].contains("hit Hardware watchpoint 2: -location g.shared"), "{out}");
    assert!(out.contains("$1 = 44"), "before the store, the global as initialized:\n{out}");
    assert!(out[watch..].contains("No more reverse-execution history."), "nothing wrote it before:\n{out}");
    assert_eq!(out.matches("Old value").count(), 1, "one write only:\n{out}");
}

#[test]
fn gdb_reverse_watchpoint_blames_the_writing_thread_not_the_waiting_one() {
    gdb_watch_overrun("1");
}

#[test]
fn gdb_reverse_watchpoint_finds_the_one_writer_among_three_workers() {
    gdb_watch_overrun("3");
}

const LLDB_WATCH_OVERRUN: &str = r#"
target.BreakpointCreateByName("joined")
process.Continue()
writer = target.FindFirstGlobalVariable("writer").GetValueAsUnsigned()
shared = target.FindFirstGlobalVariable("g").GetChildMemberWithName("shared")
options = lldb.SBWatchpointOptions()
options.SetWatchpointTypeWrite(lldb.eWatchpointWriteTypeOnModify)
watch = target.WatchpointCreateByAddress(shared.GetLoadAddress(), 4, options, error)
assert error.Success(), error.GetCString()
for _ in range(2):
    process.ContinueInDirection(lldb.eRunReverse)
    thread = process.GetSelectedThread()
    frame = thread.GetFrameAtIndex(0)
    print(json.dumps({"writer": writer, "tid": thread.GetThreadID(), "reason": thread.GetStopReason(),
                      "function": frame.GetFunctionName(), "line": frame.GetLineEntry().GetLine(),
                      "value": target.FindFirstGlobalVariable("g").GetChildMemberWithName("shared").GetValueAsSigned()}))
process.Kill()
"#;

#[test]
fn lldb_reverse_watchpoint_blames_the_writing_thread_among_three_workers() {
    if !common::lldb_python_present() {
        return;
    }
    let (program, store_line) = overrun_program("lldb");
    let (child, port) = common::start_recording_with_args(&program, &["3"], "full");
    let text = lldb_python(LLDB_WATCH_OVERRUN, &program, port, &[]);
    end_stub(child);
    let stops = json_lines(&text);
    assert_eq!(stops.len(), 2, "{text}");
    const WATCHPOINT: u64 = 4; // lldb.eStopReasonWatchpoint
    const HISTORY_BOUNDARY: u64 = 16; // lldb.eStopReasonHistoryBoundary
    let stop = &stops[0];
    assert_eq!(stop["tid"], stop["writer"], "the thread selected is the writer:\n{text}");
    assert_eq!(stop["reason"].as_u64(), Some(WATCHPOINT), "{text}");
    assert_eq!((stop["function"].as_str(), stop["line"].as_u64()), (Some("worker"), Some(store_line as u64)), "at the store:\n{text}");
    assert_eq!(stop["value"], 44, "before the store:\n{text}");
    assert_eq!(stops[1]["reason"].as_u64(), Some(HISTORY_BOUNDARY), "nothing wrote it before:\n{text}");
}
