//! The LLDB shim's reverse stepping (`lldb-scripts/retrace.py`) against
//! `retrace-stub --record`, through python3-lldb-22, on a program with a
//! loop of calls, recursion, an inlined function and a signal handler
//! (`tests/programs/reverse_steps.c`).
//!
//! The truth is LLDB's own forward stepping of the same run, live: every
//! stop of a `thread step-in` (or `thread step-over`) walk from `main` to
//! its last line, with the instruction id, PC, CFA, `frame variable` and
//! `bt` there. Then from the end, `retrace reverse-step` (or
//! `reverse-next`) must land, one after another, on exactly those stops in
//! reverse order, showing the same frame, variables and backtrace; and at
//! each landing, LLDB's forward step must come back to the stop it came
//! from. `reverse-stepi` is checked the same way against `thread
//! step-inst`, and `reverse-finish` against GDB 13's own `record full`.

use std::path::Path;
use std::process::Command;

mod common;

use common::{end_stub, json_lines, lldb_python, lldb_python_present, start_recording};
use retrace_tests::recordings::build;

/// Walks forward from `main` with argv[3] (`step-in` or `step-over`),
/// then back with `retrace` argv[4], printing one JSON line per stop.
const WALK: &str = r#"
forward, backward, shim = sys.argv[3], sys.argv[4], sys.argv[5]
print(command("command script import " + shim))
command("process handle SIGUSR1 -s false -n false -p true")
thread = process.GetSelectedThread()

def where():
    return json.loads(command("retrace where --json").strip().splitlines()[-1])

def stop():
    frame = thread.GetSelectedFrame()
    entry = frame.GetLineEntry()
    variables = command("frame variable")
    backtrace = [(f.GetFunctionName(), f.GetLineEntry().GetLine()) for f in thread]
    return dict(id=where()["id"], pc=frame.GetPC(), cfa=frame.GetCFA(), function=frame.GetFunctionName(),
                line=entry.GetLine(), variables=variables, backtrace=backtrace)

def same_place(a, b):
    return (a["pc"], a["cfa"], a["function"]) == (b["pc"], b["cfa"], b["function"])

main = target.BreakpointCreateByName("main")
process.Continue()
last_line = int(sys.argv[6])
stops = [stop()]
while not (stops[-1]["function"] == "main" and stops[-1]["line"] >= last_line) and len(stops) < 200:
    command("thread " + forward)
    stops.append(stop())
# LLDB's step into an inlined function at its first instruction runs
# nothing (the same instruction id, seen from the caller then inside it):
# such a pair is one place of the history, seen as the later stop.
stops = [s for n, s in enumerate(stops) if n + 1 == len(stops) or stops[n + 1]["id"] != s["id"]]
print(json.dumps(dict(kind="forward", stops=stops)))

# Back: each landing must be the forward walk's previous stop.
index = len(stops) - 1
while index > 0:
    out = command("retrace " + backward)
    landing = stop()
    expected = stops[index - 1]
    record = dict(kind="landing", at=index - 1, landing=landing, expected=expected, out=out)
    # LLDB's forward step from the landing comes back.
    command("thread " + forward)
    again = stop()
    if again["id"] == stops[index]["id"] and again["function"] != stops[index]["function"]:
        # (Into an inlined function without running: one step more.)
        command("thread " + forward)
    record["forward_again"] = stop()
    record["came_from"] = stops[index]
    print(json.dumps(record))
    if not same_place(landing, expected):
        break
    # Back to the landing the same way (the forward step came back to
    # where the first reverse step started).
    command("retrace " + backward)
    if not same_place(stop(), landing):
        print(json.dumps(dict(kind="unstable", at=index - 1, again=stop(), landing=landing)))
        break
    index -= 1
"#;

/// From the end of `main`: `retrace reverse-stepi` N times, each undone by
/// `thread step-inst`; then `retrace reverse-finish` from inside `square`.
const STEPI_FINISH: &str = r#"
shim = sys.argv[3]
command("command script import " + shim)
thread = process.GetSelectedThread()
def place():
    frame = thread.GetFrameAtIndex(0)
    registers = {r.GetName(): r.GetValue() for r in frame.GetRegisters().GetFirstValueByName("General Purpose Registers")}
    return dict(pc=frame.GetPC(), cfa=frame.GetCFA(), registers=registers,
                id=json.loads(command("retrace where --json").strip().splitlines()[-1])["id"])
target.BreakpointCreateByLocation("reverse_steps.c", int(sys.argv[4]))
process.Continue()
for n in range(int(sys.argv[5])):
    before = place()
    command("retrace reverse-stepi")
    landing = place()
    command("thread step-inst")
    print(json.dumps(dict(kind="stepi", before=before, landing=landing, again=place())))
    command("retrace goto %d" % landing["id"])
# reverse-finish from the last call of square's first line.
square = target.BreakpointCreateByName("square")
process.ContinueInDirection(lldb.eRunReverse)
inside = place()
command("retrace reverse-finish")
frame = thread.GetFrameAtIndex(0)
instruction = target.ReadInstructions(frame.GetPCAddress(), 1)[0]
print(json.dumps(dict(kind="finish", inside=inside, function=frame.GetFunctionName(), line=frame.GetLineEntry().GetLine(),
                      mnemonic=instruction.GetMnemonic(target), pc=frame.GetPC(),
                      square=square.GetLocationAtIndex(0).GetLoadAddress())))
"#;

fn shim() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../lldb-scripts/retrace.py").display().to_string()
}

/// The line of `main`'s `return` (where the forward walks end).
fn last_line(source: &str) -> usize {
    source.lines().position(|l| l.contains("return counter == 0;")).unwrap() + 1
}

fn program(dir: &Path) -> (std::path::PathBuf, usize) {
    let source = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/programs/reverse_steps.c")).unwrap();
    // Static: the stops do not depend on whether libc has line tables here.
    (build("reverse_steps", dir, &["-O0", "-static"]), last_line(&source))
}

fn walk(forward: &str, backward: &str) {
    if !lldb_python_present() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("retrace-shim-{}-{backward}", std::process::id()));
    let (program, last) = program(&dir);
    let (stub, port) = start_recording(&program, "full");
    let out = lldb_python(WALK, &program, port, &[forward, backward, &shim(), &last.to_string()]);
    end_stub(stub);
    let lines = json_lines(&out);
    let forward_stops = lines.iter().find(|l| l["kind"] == "forward").unwrap_or_else(|| panic!("no forward walk:\n{out}"));
    let stops = forward_stops["stops"].as_array().unwrap();
    assert!(stops.len() >= 12, "a walk of {} stops:\n{out}", stops.len());
    let landings: Vec<_> = lines.iter().filter(|l| l["kind"] == "landing").collect();
    let place = |s: &serde_json::Value| (s["pc"].clone(), s["cfa"].clone(), s["function"].clone(), s["line"].clone());
    for landing in &landings {
        let (got, expected) = (&landing["landing"], &landing["expected"]);
        assert_eq!(place(got), place(expected), "`retrace {backward}` landed elsewhere than the forward walk's stop {}:\n{landing:#}", landing["at"]);
        assert_eq!(got["id"], expected["id"], "instruction id at stop {}", landing["at"]);
        assert_eq!(got["variables"], expected["variables"], "frame variable at stop {}", landing["at"]);
        assert_eq!(got["backtrace"], expected["backtrace"], "bt at stop {}", landing["at"]);
        assert_eq!(
            place(&landing["forward_again"]),
            place(&landing["came_from"]),
            "`thread {forward}` from the landing of stop {} goes elsewhere",
            landing["at"]
        );
    }
    assert!(!lines.iter().any(|l| l["kind"] == "unstable"), "a second reverse step from the same place landed elsewhere:\n{out}");
    assert_eq!(landings.len(), stops.len() - 1, "every stop of the forward walk is landed on:\n{out}");
    let functions: std::collections::BTreeSet<&str> = stops.iter().filter_map(|s| s["function"].as_str()).collect();
    if forward == "step-in" {
        // The walk went through the callees, the recursion and the inlined
        // function (the signal handler runs within `raise`, which step-in
        // steps over: it has no lines in a static libc).
        for f in ["square", "depth", "twice"] {
            assert!(functions.contains(f), "step-in walk never in {f}: {functions:?}");
        }
        let depths: std::collections::BTreeSet<_> = stops.iter().filter(|s| s["function"] == "depth").map(|s| s["cfa"].as_u64()).collect();
        assert!(depths.len() >= 4, "the recursion's frames: {depths:?}");
    } else {
        assert_eq!(functions.into_iter().collect::<Vec<_>>(), vec!["main"]);
    }
    // The stretch includes `raise(SIGUSR1)`, whose handler ran in between.
    let lines: Vec<_> = stops.iter().filter(|s| s["function"] == "main").map(|s| s["line"].as_u64().unwrap()).collect();
    let raise = (last - 2) as u64;
    assert!(lines.windows(2).any(|w| w == [raise, raise + 1]), "a step over line {raise} (raise) to the next: {lines:?}");
}

#[test]
fn reverse_step_lands_on_every_stop_of_a_forward_step_in_walk() {
    walk("step-in", "reverse-step");
}

#[test]
fn reverse_next_lands_on_every_stop_of_a_forward_step_over_walk() {
    walk("step-over", "reverse-next");
}

#[test]
fn reverse_stepi_is_undone_by_step_inst_and_reverse_finish_lands_where_gdb_does() {
    if !lldb_python_present() || retrace_tests::tools::which("gdb").is_none() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("retrace-shim-{}-stepi", std::process::id()));
    let (program, last) = program(&dir);
    let (stub, port) = start_recording(&program, "full");
    let out = lldb_python(STEPI_FINISH, &program, port, &[&shim(), &last.to_string(), "25"]);
    end_stub(stub);
    let lines = json_lines(&out);
    let stepis: Vec<_> = lines.iter().filter(|l| l["kind"] == "stepi").collect();
    assert_eq!(stepis.len(), 25, "{out}");
    for s in &stepis {
        assert_eq!(s["landing"]["id"].as_u64().unwrap() + 1, s["before"]["id"].as_u64().unwrap(), "one instruction back: {s:#}");
        assert_eq!(s["again"]["pc"], s["before"]["pc"], "step-inst comes back: {s:#}");
        assert_eq!(s["again"]["registers"], s["before"]["registers"], "with the same registers: {s:#}");
    }
    let finish = lines.iter().find(|l| l["kind"] == "finish").unwrap_or_else(|| panic!("no reverse-finish:\n{out}"));
    assert_eq!(finish["function"], "main", "{finish:#}");
    assert_eq!(finish["mnemonic"], "callq", "reverse-finish stops on the call: {finish:#}");

    // GDB's own `record full`, natively: the line its reverse-finish lands on.
    let gdb = Command::new("timeout")
        .args(["120", "gdb", "-batch", "-nx", "-ex", "break main", "-ex", "run", "-ex", "record full", "-ex", "break square"])
        .args(["-ex", "continue", "-ex", "continue", "-ex", "continue", "-ex", "reverse-finish", "-ex", "info line *$pc"])
        .arg(&program)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&gdb.stdout);
    let gdb_line = text
        .lines()
        .filter_map(|l| l.strip_prefix("Line ").and_then(|rest| rest.split_whitespace().next()).and_then(|n| n.parse::<u64>().ok()))
        .last()
        .unwrap_or_else(|| panic!("gdb said:\n{text}{}", String::from_utf8_lossy(&gdb.stderr)));
    assert_eq!(finish["line"].as_u64(), Some(gdb_line), "GDB's reverse-finish line; gdb said:\n{text}");
}

/// After `retrace reverse-continue` LLDB's direction is forward again: a
/// plain `process continue` runs forwards (LLDB 22 keeps the direction of
/// `process continue -R`, so it went on backwards), from a breakpoint, a
/// watchpoint and the history's boundary alike; the stop each reverse
/// continue shows stays what it was (the boundary's too).
const CONTINUE_AFTER_REVERSE: &str = r#"
shim = sys.argv[3]
command("command script import " + shim)
thread = process.GetSelectedThread()
def stop(name, out=""):
    frame = thread.GetFrameAtIndex(0)
    print(json.dumps(dict(name=name, function=frame.GetFunctionName(), reason=thread.GetStopReason(),
                          listed=command("thread list"), out=out)))
target.BreakpointCreateByName("stop_recording")
process.Continue()
options = lldb.SBWatchpointOptions()
options.SetWatchpointTypeWrite(lldb.eWatchpointWriteTypeOnModify)
pointer = target.FindFirstGlobalVariable("g_watched_var_ptr").GetValueAsUnsigned()
watch = target.WatchpointCreateByAddress(pointer, 4, options, error)
assert error.Success(), error.GetCString()
stop("reverse to the watchpoint", command("retrace reverse-continue"))
target.DeleteWatchpoint(watch.GetID())
process.Continue()
stop("continue after it")
middle = target.BreakpointCreateByName("trigger_breakpoint")
stop("reverse to the breakpoint", command("retrace reverse-continue"))
process.Continue()
stop("continue after it")
target.BreakpointDelete(middle.GetID())
stop("reverse to the boundary", command("retrace reverse-continue"))
process.Continue()
stop("continue after it")
process.Kill()
"#;

#[test]
fn a_plain_continue_after_the_shims_reverse_continue_runs_forwards() {
    if !lldb_python_present() {
        return;
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("shim-continue-after-reverse");
    let program = build("lldb_reverse", &dir, &["-O0", "-static"]);
    let (stub, port) = start_recording(&program, "full");
    let out = lldb_python(CONTINUE_AFTER_REVERSE, &program, port, &[&shim()]);
    end_stub(stub);
    let stops = json_lines(&out);
    let seen: Vec<(&str, &str, u64)> = stops.iter().map(|s| (s["name"].as_str().unwrap(), s["function"].as_str().unwrap_or("?"), s["reason"].as_u64().unwrap())).collect();
    const TRACE: u64 = 2; // lldb.eStopReasonTrace (the turn forward, in place)
    const BREAKPOINT: u64 = 3; // lldb.eStopReasonBreakpoint
    const HISTORY_BOUNDARY: u64 = 16; // lldb.eStopReasonHistoryBoundary
    assert_eq!(
        seen,
        [
            ("reverse to the watchpoint", "trigger_watchpoint", TRACE),
            ("continue after it", "stop_recording", BREAKPOINT),
            ("reverse to the breakpoint", "trigger_breakpoint", TRACE),
            ("continue after it", "stop_recording", BREAKPOINT),
            ("reverse to the boundary", "_start", HISTORY_BOUNDARY),
            ("continue after it", "stop_recording", BREAKPOINT),
        ],
        "{out}"
    );
    // What each reverse continue printed is its own stop.
    assert!(stops[0]["out"].as_str().unwrap().contains("stop reason = watchpoint 1"), "{out}");
    assert!(stops[2]["out"].as_str().unwrap().contains("stop reason = breakpoint 2.1"), "{out}");
    assert!(stops[4]["out"].as_str().unwrap().contains("stop reason = history boundary"), "{out}");
    assert!(stops[4]["listed"].as_str().unwrap().contains("stop reason = history boundary"), "and stays so:\n{out}");
}
