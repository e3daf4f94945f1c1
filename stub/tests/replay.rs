//! `retrace-stub --replay`: a saved trace served as a stopped process that
//! GDB 13 and LLDB 22 run backwards and forwards. Judged against `retrace
//! dump instructions` on the same bundle: where a reverse-continue stops is
//! the last execution of the breakpoint's address in that listing, and
//! `monitor record status` names the same instruction id.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};

mod common;

use common::{gdb, gdb_breakpoint_address, json_lines, lldb_python, printed_values, retrace, start_stub_command, wait_exit};
use retrace_collector::ptrace_recorder::StepMode;
use retrace_tests::recordings::{build, record_bundle};
use retrace_tests::tools::{require, which};

fn gdb_present() -> bool {
    require("gcc", which("gcc").is_some()) && require("gdb", which("gdb").is_some())
}

/// `replay_loop` built with `flags`, recorded in `mode` into a bundle;
/// returns the program and the bundle's trace.json.
fn recorded(name: &str, flags: &[&str], mode: StepMode) -> (PathBuf, PathBuf) {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("replay").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    let program = build("replay_loop", &dir, flags);
    let trace_json = record_bundle(&program, &[], mode, &dir.join("bundle"));
    (program, trace_json)
}

/// The stub replaying `trace_json`, and its port.
fn start_replay(trace_json: &Path) -> (Child, u16) {
    let (child, line) = start_stub_command(&["--listen".as_ref(), "127.0.0.1:0".as_ref(), "--replay".as_ref(), trace_json.as_os_str()]);
    let port = common::port_of(&line);
    (child, port)
}

/// `retrace dump instructions -a -f --raw` of the bundle's one thread:
/// (item id, address) of every instruction, first to last.
fn listing(trace_json: &Path) -> Vec<(u64, u64)> {
    let out = retrace().args(["dump", "instructions", "-a", "-f", "--raw"]).arg(trace_json).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let (id, rest) = l.trim().split_once(": 0x")?;
            Some((id.parse().ok()?, u64::from_str_radix(rest.split_whitespace().next()?, 16).ok()?))
        })
        .collect()
}

/// Every `monitor record status --json` answer, in order.
fn statuses(out: &str) -> Vec<serde_json::Value> {
    json_lines(out)
}

fn position_id(status: &serde_json::Value) -> u64 {
    status["position"]["id"].as_u64().unwrap_or_else(|| panic!("no position id in {status}"))
}

/// The ids of the instructions at `address`, last first.
fn executions_of(listing: &[(u64, u64)], address: u64) -> Vec<u64> {
    listing.iter().rev().filter(|(_, a)| *a == address).map(|(id, _)| *id).collect()
}

#[test]
fn gdb_runs_a_saved_trace_backwards_and_forwards() {
    if !gdb_present() {
        return;
    }
    let (program, trace_json) = recorded("gdb-static", &["-O0", "-static"], StepMode::Branch);
    let listing = listing(&trace_json);
    let (stub, port) = start_replay(&trace_json);
    let target = format!("target remote 127.0.0.1:{port}");
    let fifth = listing[5];
    let goto_fifth = format!("monitor goto {}", fifth.0);
    let out = gdb(
        &program,
        &[
            &target,
            "monitor record status --json",
            "break work",
            "reverse-continue",
            "p/x $pc",
            "monitor record status --json",
            "reverse-continue",
            "p/x $pc",
            "monitor record status --json",
            "reverse-stepi",
            "p/x $pc",
            "monitor record status --json",
            // PC only: other registers unavailable, writable memory refused, code read.
            "info registers rax",
            "x/x &total",
            "x/i $pc",
            // Forwards inside the history: the next call of work.
            "continue",
            "p/x $pc",
            "monitor record status --json",
            &goto_fifth,
            "stepi",
            "p/x $pc",
            "monitor record status --json",
            "delete",
            "continue",
            "monitor record status --json",
            "reverse-continue",
            "monitor record status --json",
            "monitor goto 12345678901",
            "monitor bogus",
            "kill",
        ],
    );
    let _ = wait_exit(stub);
    let work = gdb_breakpoint_address(&out, 1);
    let calls = executions_of(&listing, work);
    assert_eq!(calls.len(), 5, "work runs five times:\n{out}");
    let statuses = statuses(&out);
    let pcs = printed_values(&out);
    assert_eq!(statuses.len(), 8, "{out}");
    assert_eq!(pcs.len(), 5, "{out}");
    let (last_id, last_pc) = *listing.last().unwrap();
    assert_eq!(position_id(&statuses[0]), last_id, "the replay starts at the end of history");
    assert_eq!(statuses[0]["position"]["pc"].as_u64(), Some(last_pc));
    assert_eq!(statuses[0]["instructions"].as_u64(), Some(listing.len() as u64));
    // Backwards: the last call, then the one before.
    assert_eq!((pcs[0], position_id(&statuses[1])), (work, calls[0]), "{out}");
    assert_eq!((pcs[1], position_id(&statuses[2])), (work, calls[1]), "{out}");
    // One instruction back: the instruction listed before it.
    let before = listing.iter().rev().find(|(id, _)| *id < calls[1]).copied().unwrap();
    assert_eq!((pcs[2], position_id(&statuses[3])), (before.1, before.0), "{out}");
    assert!(out.contains("rax            <unavailable>"), "{out}");
    assert!(out.contains("Cannot access memory at address"), "writable memory is refused:\n{out}");
    assert!(out.lines().any(|l| l.contains("<work+") && l.contains("=>")), "code is read:\n{out}");
    // Forwards: the call after (the breakpoint is where the reverse step left).
    assert_eq!((pcs[3], position_id(&statuses[4])), (work, calls[1]), "{out}");
    // goto then a step: that instruction of the listing.
    assert_eq!((pcs[4], position_id(&statuses[5])), (fifth.1, fifth.0), "{out}");
    // No breakpoints: on to the end, then back to the beginning.
    assert!(out.contains("No more reverse-execution history."), "{out}");
    assert_eq!(position_id(&statuses[6]), last_id, "{out}");
    assert_eq!(position_id(&statuses[7]), listing[0].0, "{out}");
    assert!(out.contains("error: no instruction 12345678901"), "{out}");
    assert!(out.contains("error: unknown monitor command `bogus`"), "{out}");
}

/// LLDB 22's reverse continue (`SBProcess.ContinueInDirection`) through a
/// saved trace of a dynamic program, and its views of the state there.
const LLDB_SESSION: &str = r#"
def status():
    out = command("process plugin packet monitor record status --json")
    return json.loads(next(l for l in out.splitlines() if l.startswith('{"')))

def stop(name):
    thread = process.GetSelectedThread()
    frame = thread.GetFrameAtIndex(0)
    rax = frame.FindRegister("rax")
    print(json.dumps({
        "name": name,
        "state": lldb.SBDebugger.StateAsCString(process.GetState()),
        "reason": thread.GetStopReason(),
        "pc": frame.GetPC(),
        "function": frame.GetFunctionName(),
        "rax_valid": bool(rax.IsValid() and rax.GetValueAsUnsigned(0xdead) != 0xdead and rax.GetError().Success()),
        "id": status()["position"]["id"],
    }))

breakpoint = target.BreakpointCreateByName("work")
print(json.dumps({"name": "breakpoint", "address": breakpoint.GetLocationAtIndex(0).GetLoadAddress()}))
stop("start")
process.ContinueInDirection(lldb.eRunReverse)
stop("reverse")
process.Continue()
stop("reverse again")
process.ContinueInDirection(lldb.eRunForward)
stop("forward")
print(json.dumps({"name": "registers", "text": command("register read rip rax")}))
breakpoint.SetEnabled(False)
process.ContinueInDirection(lldb.eRunReverse)
stop("boundary")
process.Kill()
"#;

#[test]
fn lldb_runs_a_saved_trace_backwards_and_forwards() {
    if !common::lldb_python_present() {
        return;
    }
    let (program, trace_json) = recorded("lldb-dynamic", &["-O0"], StepMode::Branch);
    let listing = listing(&trace_json);
    let (stub, port) = start_replay(&trace_json);
    let text = lldb_python(LLDB_SESSION, &program, port, &[]);
    let _ = wait_exit(stub);
    let events: Vec<serde_json::Value> = statuses(&text);
    assert_eq!(events.len(), 7, "{text}");
    let work = events[0]["address"].as_u64().unwrap();
    let calls = executions_of(&listing, work);
    assert_eq!(calls.len(), 5, "{text}");
    let stop = |i: usize| (events[i]["reason"].as_u64().unwrap(), events[i]["pc"].as_u64().unwrap(), events[i]["id"].as_u64().unwrap());
    const BREAKPOINT: u64 = 3; // lldb.eStopReasonBreakpoint
    const HISTORY_BOUNDARY: u64 = 16; // lldb.eStopReasonHistoryBoundary
    let (last_id, last_pc) = *listing.last().unwrap();
    assert_eq!((stop(1).1, stop(1).2), (last_pc, last_id), "the end of history:\n{text}");
    assert_eq!(stop(2), (BREAKPOINT, work, calls[0]), "reverse continue: the last call:\n{text}");
    assert_eq!(stop(3), (BREAKPOINT, work, calls[1]), "plain continue keeps going backwards:\n{text}");
    assert_eq!(stop(4), (BREAKPOINT, work, calls[0]), "forward again: the next call:\n{text}");
    assert_eq!(events[4]["function"], "work");
    assert!(!events[4]["rax_valid"].as_bool().unwrap(), "rax is unavailable:\n{text}");
    let registers = events[5]["text"].as_str().unwrap();
    assert!(registers.contains(&format!("rip = {work:#018x}")), "{registers}");
    assert!(!registers.contains("0xcccccccc"), "no made-up value: {registers}");
    assert_eq!(stop(6), (HISTORY_BOUNDARY, listing[0].1, listing[0].0), "back to the start:\n{text}");
}

/// The saved trace is also served as a trace, for the clients' own
/// decoders: GDB's `record btrace pt` (its libipt) and LLDB's `process trace
/// start` (its intel-pt plugin) decode what `retrace dump` lists.
#[test]
fn the_saved_trace_is_served_to_gdb_and_lldb_decoders() {
    if !gdb_present() || !require("lldb-22", which("lldb-22").is_some()) {
        return;
    }
    let (program, trace_json) = recorded("decoders", &["-O2", "-static"], StepMode::Branch);
    let listing = listing(&trace_json);
    let count = listing.len();

    let (stub, port) = start_replay(&trace_json);
    let history = format!("record instruction-history {},{count}", count - 9);
    let out = gdb(&program, &[&format!("target remote 127.0.0.1:{port}"), "record btrace pt", "info record", &history, "kill"]);
    let _ = wait_exit(stub);
    assert!(out.contains(&format!("Recorded {count} instructions in ")) && out.contains("(0 gaps)"), "{out}");
    let addresses: Vec<u64> = out
        .lines()
        .filter_map(|l| {
            let (index, rest) = l.split_once('\t')?;
            index.trim().parse::<usize>().ok()?;
            let rest = rest.trim().trim_start_matches("=>").trim();
            u64::from_str_radix(rest.strip_prefix("0x")?.split_whitespace().next()?, 16).ok()
        })
        .collect();
    let tail: Vec<u64> = listing[count - 10..].iter().map(|(_, a)| *a).collect();
    assert_eq!(addresses, tail, "GDB's instruction history ends as the listing:\n{out}");

    let (stub, port) = start_replay(&trace_json);
    let lldb = Command::new("timeout")
        .args(["60", "lldb-22", "-b", "-o", &format!("gdb-remote {port}"), "-o", "process trace start"])
        .args(["-o", "thread trace dump instructions -e -c 12", "-o", "kill"])
        .arg(&program)
        .output()
        .unwrap();
    let _ = wait_exit(stub);
    let lldb = String::from_utf8_lossy(&lldb.stdout).into_owned();
    let ours = retrace().args(["dump", "instructions", "-e", "-c", "12"]).arg(&trace_json).output().unwrap();
    let ours = String::from_utf8_lossy(&ours.stdout).into_owned();
    let dump = |text: &str| -> Vec<String> {
        text.lines().skip_while(|l| !l.starts_with("thread #1")).skip(1).take_while(|l| l.starts_with("  ")).map(str::to_string).collect()
    };
    assert!(dump(&ours).len() >= 12, "{ours}");
    assert_eq!(dump(&lldb), dump(&ours), "LLDB's dump of the served trace:\n{lldb}");
}

/// `retrace goto ID` (the shim) lands LLDB on the address `retrace dump
/// instructions` lists for ID, for ids across the whole history, in both
/// directions.
#[test]
fn shim_goto_lands_on_the_address_the_dump_lists_for_the_id() {
    if !common::lldb_python_present() {
        return;
    }
    let (program, trace_json) = recorded("goto-ids", &["-O0"], StepMode::Step);
    let listing = listing(&trace_json);
    assert!(listing.len() > 1000, "{} instructions", listing.len());
    let n = listing.len();
    // From the end backwards, then forwards again, and the extremes.
    let picks: Vec<(u64, u64)> = [n - 2, n / 2, n / 5, 3, 0, n / 3, n - 1, 2 * n / 3].iter().map(|&i| listing[i]).collect();
    let ids: Vec<String> = picks.iter().map(|(id, _)| id.to_string()).collect();
    let (stub, port) = start_replay(&trace_json);
    let shim = concat!(env!("CARGO_MANIFEST_DIR"), "/../lldb-scripts/retrace.py");
    let body = r#"
event = lldb.SBEvent()
while process.GetState() != lldb.eStateStopped and listener.WaitForEvent(10, event):
    pass
print(command("command script import " + sys.argv[3]))
for id in sys.argv[4:]:
    out = command("retrace goto " + id)
    thread = process.GetSelectedThread()
    where = json.loads(command("retrace where --json").strip().splitlines()[-1])
    print(json.dumps({"goto": int(id), "pc": thread.GetFrameAtIndex(0).GetPC(), "where": where["id"], "out": out}))
process.Kill()
"#;
    let mut extra = vec![shim];
    extra.extend(ids.iter().map(String::as_str));
    let out = lldb_python(body, &program, port, &extra);
    let _ = wait_exit(stub);
    let landings = json_lines(&out);
    assert_eq!(landings.len(), picks.len(), "{out}");
    for ((id, address), landing) in picks.iter().zip(&landings) {
        assert_eq!(landing["goto"].as_u64(), Some(*id), "{out}");
        assert_eq!(landing["pc"].as_u64(), Some(*address), "retrace goto {id}: the pc LLDB shows is not the listed 0x{address:x}:\n{out}");
        assert_eq!(landing["where"].as_u64(), Some(*id), "retrace where after goto {id}:\n{out}");
    }
}

/// Every module LLDB lists, as (UUID, load address, file name); then the
/// first frame's function, as a JSON line.
const IMAGE_LIST: &str = r#"
event = lldb.SBEvent()
while process.GetState() != lldb.eStateStopped and listener.WaitForEvent(10, event):
    pass
if len(sys.argv) > 3:
    target.BreakpointCreateByName(sys.argv[3])
    process.Continue()
modules = sorted([m.GetUUIDString(), m.GetObjectFileHeaderAddress().GetLoadAddress(target)] for m in target.module_iter())
frame = process.GetSelectedThread().GetFrameAtIndex(0)
print(json.dumps({"modules": modules, "function": frame.GetFunctionName(), "module": frame.GetModule().GetFileSpec().GetFilename()}))
process.Kill()
"#;

/// LLDB on a replay lists the shared libraries the program had, as it does
/// on the live process (it reads the dynamic linker's rendezvous before it
/// takes the library list; the replay had none to read, so only the
/// program and the dynamic linker were listed and frames in libc were bare
/// addresses); the frame at the end of the history is libc's `_exit`.
#[test]
fn lldb_lists_the_libraries_of_a_replay_as_of_the_live_process() {
    if !common::lldb_python_present() {
        return;
    }
    let (program, trace_json) = recorded("image-list", &["-O0"], StepMode::Branch);
    let (stub, port) = common::start_stub(&program);
    let live = lldb_python(IMAGE_LIST, &program, port, &["finish"]);
    common::end_stub(stub);
    let (stub, port) = start_replay(&trace_json);
    let replayed = lldb_python(IMAGE_LIST, &program, port, &[]);
    let _ = wait_exit(stub);
    let (live, replayed) = (&json_lines(&live)[0], &json_lines(&replayed)[0]);
    let modules = live["modules"].as_array().unwrap();
    assert!(modules.len() >= 4, "the program, ld.so, the vDSO, libc: {live}");
    assert_eq!(replayed["modules"], live["modules"], "(UUID, load address) of every module");
    assert_eq!(replayed["module"], "libc.so.6", "{replayed}");
    assert!(replayed["function"].as_str().is_some_and(|f| f.contains("_exit")), "{replayed}");
}

/// `--replay-from start`: the program stands at its first instruction and
/// runs forwards as it ran: `continue` stops at the first call of work.
#[test]
fn a_replay_from_the_start_runs_forwards_as_the_program_ran() {
    if !gdb_present() {
        return;
    }
    let (program, trace_json) = recorded("gdb-from-start", &["-O0", "-static"], StepMode::Branch);
    let listing = listing(&trace_json);
    let (child, line) = start_stub_command(&["--listen".as_ref(), "127.0.0.1:0".as_ref(), "--replay".as_ref(), trace_json.as_os_str(), "--replay-from".as_ref(), "start".as_ref()]);
    assert!(line.contains("at the start of history"), "{line}");
    let port: u16 = common::port_of(&line);
    let target = format!("target remote 127.0.0.1:{port}");
    let out = gdb(&program, &[&target, "monitor record status --json", "break work", "continue", "monitor record status --json", "kill"]);
    let _ = wait_exit(child);
    let statuses = statuses(&out);
    assert_eq!(statuses.len(), 2, "{out}");
    assert_eq!(position_id(&statuses[0]), listing[0].0, "the first instruction");
    let work = gdb_breakpoint_address(&out, 1);
    let first_call = *executions_of(&listing, work).last().unwrap();
    assert_eq!(position_id(&statuses[1]), first_call, "the first call of work:\n{out}");
}
