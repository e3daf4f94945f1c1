//! LLDB 22 against `retrace-stub --record`: the assertions of LLDB's own
//! `TestReverseContinueBreakpoints` and `TestReverseContinueWatchpoints`
//! (in LLVM's `lldb/test/API/functionalities/reverse-execution/`), on their
//! inferior written again
//! (`tests/programs/lldb_reverse.c`), in LLDB's synchronous and
//! asynchronous modes, through `python3-lldb-22`; plus the quirks measured
//! against LLDB 22: a
//! reverse continue issued on a breakpoint does not report it again, and a
//! forward step right after a reverse stop at a breakpoint (LLDB 22 steps
//! off it first here) lands on the next instruction.
//!
//! The two conditional cases (`false_condition()` as the breakpoint's and
//! the watchpoint's condition) run LLDB's calls in the past as diversions.
//!
//! Every case runs again on `retrace-stub --replay` of the same program
//! recorded with full state under Valgrind (`retrace record --mode full`),
//! from its first instruction; there the conditions' calls run in a
//! stand-in process (`inferior::diversion`). The watched value is read as
//! memory, not as an expression. On the replay, expressions that write or
//! call are checked too.

use std::path::Path;

mod common;

use common::{end_stub, json_lines, lldb_python, start_recording, wait_exit};
use retrace_tests::recordings::build;

/// One session: LLDB's `setup_recording` (stop at `start_recording`, then
/// continue to `stop_recording`; the stub records from the first
/// instruction anyway), then each test's steps in turn, printing what the
/// test asserts as JSON lines.
const SESSION: &str = r#"
mode, case = sys.argv[3], sys.argv[4]
async_mode = mode == "async"

def stopped_at(breakpoint):
    return sorted(t.GetThreadID() for t in process
                  if t.GetStopReason() == lldb.eStopReasonBreakpoint
                  and t.GetStopReasonDataAtIndex(0) == breakpoint.GetID())

def resume(run):
    """Runs `run` (a resume), then in async mode waits for the process
    events and returns the states they carried, as LLDB's
    expect_async_state_changes checks them."""
    result = run()
    states = []
    restarted = False
    if async_mode:
        event = lldb.SBEvent()
        while True:
            if not listener.WaitForEvent(60, event):
                states.append("timeout")
                break
            if not lldb.SBProcess.EventIsProcessEvent(event):
                continue
            # As lldbutil.expect_state_changes: a stop-and-restart event
            # (a condition found false) and the running event after it
            # are left out.
            if lldb.SBProcess.GetRestartedFromEvent(event):
                restarted = True
                continue
            state = lldb.SBProcess.GetStateFromEvent(event)
            if restarted and state == lldb.eStateRunning:
                restarted = False
                continue
            states.append(lldb.SBDebugger.StateAsCString(state))
            if state in (lldb.eStateStopped, lldb.eStateExited, lldb.eStateCrashed, lldb.eStateDetached):
                break
    ok = result.Success() if isinstance(result, lldb.SBError) else True
    return ok, states

def report(name, ok, states, **extra):
    thread = process.GetSelectedThread()
    frame = thread.GetFrameAtIndex(0)
    # *g_watched_var_ptr, read as memory (no expression: a replay runs no
    # code to make room for a result).
    pointer = target.FindFirstGlobalVariable("g_watched_var_ptr").GetValueAsUnsigned()
    read_error = lldb.SBError()
    watched = process.ReadMemory(pointer, 4, read_error) if pointer else None
    print(json.dumps(dict(name=name, ok=ok, states=states,
                          state=lldb.SBDebugger.StateAsCString(process.GetState()),
                          reason=thread.GetStopReason(), pc=frame.GetPC(),
                          function=frame.GetFunctionName(),
                          watched=int.from_bytes(watched, "little", signed=True) if watched and read_error.Success() else None,
                          thread_list=command("thread list"),
                          exit_status=process.GetExitStatus(), **extra)), flush=True)

# setup_recording
start = target.BreakpointCreateByName("start_recording")
process.Continue()
initial = stopped_at(start)
target.BreakpointDelete(start.GetID())
stop_bp = target.BreakpointCreateByName("stop_recording")
process.Continue()
target.BreakpointDelete(stop_bp.GetID())
debugger.SetAsync(async_mode)
if async_mode:
    # As LLDB's setup_recording: the stop already seen is announced again.
    event = lldb.SBEvent()
    assert listener.WaitForEvent(10, event), "no stopped event"
    assert lldb.SBProcess.GetStateFromEvent(event) == lldb.eStateStopped
report("recorded", True, [], initial=initial)

if case == "watchpoint":
    # TestReverseContinueWatchpoints.test_reverse_continue_watchpoint
    options = lldb.SBWatchpointOptions()
    options.SetWatchpointTypeWrite(lldb.eWatchpointWriteTypeOnModify)
    address = target.FindFirstGlobalVariable("g_watched_var_ptr").GetValueAsUnsigned()
    watchpoint = target.WatchpointCreateByAddress(address, 4, options, error)
    assert error.Success(), error.GetCString()
    report("reverse to the watchpoint", *resume(lambda: process.ContinueInDirection(lldb.eRunReverse)))
    report("step forward over the store", *resume(lambda: process.GetSelectedThread().StepInstruction(False) or lldb.SBError()))
elif case == "breakpoint":
    # TestReverseContinueBreakpoints.test_reverse_continue_breakpoint and
    # test_continue_preserves_direction
    breakpoint = target.BreakpointCreateByName("trigger_breakpoint")
    report("reverse to the breakpoint", *resume(lambda: process.ContinueInDirection(lldb.eRunReverse)), at=stopped_at(breakpoint),
           address=breakpoint.GetLocationAtIndex(0).GetLoadAddress())
    report("plain continue keeps the direction", *resume(lambda: process.Continue()))
    # Quirks: forward to the breakpoint, reverse from on it (not reported
    # again), forward to it and on to the end of the recording, back to
    # it, and a forward step right after that reverse stop.
    report("forward to the breakpoint", *resume(lambda: process.ContinueInDirection(lldb.eRunForward)))
    report("reverse from on the breakpoint", *resume(lambda: process.ContinueInDirection(lldb.eRunReverse)))
    report("forward to the breakpoint again", *resume(lambda: process.ContinueInDirection(lldb.eRunForward)))
    last = target.BreakpointCreateByName("stop_recording")
    report("forward to stop_recording", *resume(lambda: process.Continue()))
    target.BreakpointDelete(last.GetID())
    instructions = target.ReadInstructions(breakpoint.GetLocationAtIndex(0).GetAddress(), 2)
    report("reverse to the breakpoint from the end", *resume(lambda: process.ContinueInDirection(lldb.eRunReverse)),
           next=instructions.GetInstructionAtIndex(1).GetAddress().GetLoadAddress(target))
    report("step right after a reverse stop", *resume(lambda: process.GetSelectedThread().StepInstruction(False) or lldb.SBError()))
elif case == "conditions":
    # TestReverseContinueBreakpoints.test_reverse_continue_skip_breakpoint and
    # TestReverseContinueWatchpoints.test_reverse_continue_skip_watchpoint:
    # each condition is a call LLDB runs in the past (a diversion).
    breakpoint = target.BreakpointCreateByName("trigger_breakpoint")
    breakpoint.SetCondition("false_condition()")
    options = lldb.SBWatchpointOptions()
    options.SetWatchpointTypeWrite(lldb.eWatchpointWriteTypeOnModify)
    address = target.FindFirstGlobalVariable("g_watched_var_ptr").GetValueAsUnsigned()
    watchpoint = target.WatchpointCreateByAddress(address, 4, options, error)
    assert error.Success(), error.GetCString()
    watchpoint.SetCondition("false_condition()")
    report("reverse past both false conditions", *resume(lambda: process.ContinueInDirection(lldb.eRunReverse)))
    # Forwards through the history, the breakpoint's condition true.
    target.DeleteWatchpoint(watchpoint.GetID())
    # (A new breakpoint: LLDB 22 keeps running a location's first compiled
    # condition after SetCondition changes its text.)
    target.BreakpointDelete(breakpoint.GetID())
    breakpoint = target.BreakpointCreateByName("trigger_breakpoint")
    breakpoint.SetCondition("false_condition() == 0")
    report("forward to the true condition", *resume(lambda: process.ContinueInDirection(lldb.eRunForward)))
    frame = process.GetSelectedThread().GetFrameAtIndex(0)
    call = frame.EvaluateExpression("false_condition() + 40")
    report("a call in the past", True, [], result=call.GetValueAsSigned() if call.GetError().Success() else str(call.GetError()))
    frame.EvaluateExpression("*g_watched_var_ptr = 7")
    report("a write in the past", True, [])
    report("step on through the history", *resume(lambda: process.GetSelectedThread().StepInstruction(False) or lldb.SBError()))
    breakpoint.SetEnabled(False)
    report("forward to the exit", *resume(lambda: process.ContinueInDirection(lldb.eRunForward)))
elif case == "expressions":
    # Expressions in the past on a replay: LLDB's evaluator is given memory
    # for its results (`_M`), a write lasts until the next move, a call runs
    # in a diversion.
    frame = process.GetSelectedThread().GetFrameAtIndex(0)
    def value(text):
        v = frame.EvaluateExpression(text)
        return v.GetValueAsSigned() if v.GetError().Success() else "error: " + str(v.GetError())
    report("expressions", True, [], deref=value("*g_watched_var_ptr"), sum=value("*g_watched_var_ptr + 40"))
    frame.EvaluateExpression("*g_watched_var_ptr = 7")
    report("a write in the past", True, [], deref=value("*g_watched_var_ptr"))
    report("a call in the past", True, [], result=value("false_condition()"))
    report("step on through the history", *resume(lambda: process.GetSelectedThread().StepInstruction(False) or lldb.SBError()))
else:
    # TestReverseContinueBreakpoints.test_reverse_continue: the history
    # boundary, then forward to the program's exit.
    report("reverse to the boundary", *resume(lambda: process.ContinueInDirection(lldb.eRunReverse)))
    report("forward to the exit", *resume(lambda: process.ContinueInDirection(lldb.eRunForward)))
"#;

const STOPPED: &str = "stopped";
const BREAKPOINT: u64 = 3; // lldb.eStopReasonBreakpoint
const WATCHPOINT: u64 = 4; // lldb.eStopReasonWatchpoint
const TRACE: u64 = 8; // lldb.eStopReasonTrace
const HISTORY_BOUNDARY: u64 = 16; // lldb.eStopReasonHistoryBoundary

/// What the session debugs.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Target {
    /// `retrace-stub --record=full`: the live program, recorded as it runs.
    Recording,
    /// `retrace-stub --replay` of the program recorded with full state
    /// under Valgrind (`retrace record --mode full`), from its first
    /// instruction.
    Replay,
}

/// Runs one case of the session against a fresh stub; the JSON lines it
/// printed (the first: the stop at `stop_recording`).
fn session_on(target: Target, mode: &str, case: &str) -> Option<(Vec<serde_json::Value>, String)> {
    if !common::lldb_python_present() {
        return None;
    }
    let name = if target == Target::Replay { format!("replay-{case}-{mode}") } else { format!("{case}-{mode}") };
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("reverse_lldb").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    // Static, so that the history (from the first instruction) is short;
    // -no-pie, so that Valgrind runs it where it runs natively.
    let program = build("lldb_reverse", &dir, &["-O0", "-static", "-no-pie"]);
    let (child, port) = match target {
        Target::Recording => start_recording(&program, "full"),
        Target::Replay => {
            let bundle = dir.join("bundle");
            let out = common::retrace().args(["record", "--mode", "full", "-o"]).arg(&bundle).arg("--").arg(&program).output().unwrap();
            assert!(out.status.success(), "retrace record: {}", String::from_utf8_lossy(&out.stderr));
            let (child, line) = common::start_stub_command(&["--replay".as_ref(), bundle.join("trace.json").as_os_str(), "--replay-from".as_ref(), "start".as_ref(), "--listen".as_ref(), "127.0.0.1:0".as_ref()]);
            let port = common::port_of(&line);
            (child, port)
        }
    };
    let text = lldb_python(SESSION, &program, port, &[mode, case]);
    if target == Target::Recording && (case == "boundary" || case == "conditions") {
        assert!(wait_exit(child).is_some(), "the stub ends with the program");
    } else {
        end_stub(child);
    }
    std::fs::write(dir.join("session.out"), &text).unwrap();
    let events = json_lines(&text);
    let recorded = &events.first().unwrap_or_else(|| panic!("no stop at stop_recording:\n{text}"));
    assert_eq!(recorded["function"], "stop_recording", "{text}");
    assert_eq!(recorded["watched"], 2, "{text}");
    Some((events, text))
}

/// Checks the stops of a session.
struct Stops<'a> {
    events: &'a [serde_json::Value],
    text: &'a str,
    asynchronous: bool,
}

impl Stops<'_> {
    fn event(&self, name: &str) -> &serde_json::Value {
        self.events.iter().find(|e| e["name"] == name).unwrap_or_else(|| panic!("no `{name}`:\n{}", self.text))
    }

    /// The resume succeeded and, in async mode, announced running, then `end`.
    fn resumed(&self, name: &str, end: &str) -> &serde_json::Value {
        let e = self.event(name);
        assert_eq!(e["ok"], true, "{name}: the resume failed:\n{}", self.text);
        let states: Vec<&str> = e["states"].as_array().unwrap().iter().map(|s| s.as_str().unwrap()).collect();
        if self.asynchronous {
            assert_eq!(states, ["running", end], "{name}: the process events:\n{}", self.text);
        }
        assert_eq!(e["state"], end, "{name}:\n{}", self.text);
        e
    }

    /// Stopped at the start of the history, and LLDB says so.
    fn at_boundary(&self, name: &str) -> &serde_json::Value {
        let e = self.resumed(name, STOPPED);
        assert_eq!(e["reason"].as_u64(), Some(HISTORY_BOUNDARY), "{name}:\n{}", self.text);
        assert!(e["thread_list"].as_str().unwrap().contains("stop reason = history boundary"), "{name}:\n{}", self.text);
        e
    }

    /// Stopped for `reason` in `function`.
    fn stop(&self, name: &str, reason: u64, function: &str) -> &serde_json::Value {
        let e = self.resumed(name, STOPPED);
        assert_eq!(e["reason"].as_u64(), Some(reason), "{name}: the stop reason:\n{}", self.text);
        assert_eq!(e["function"].as_str(), Some(function), "{name}: where:\n{}", self.text);
        e
    }
}

fn watchpoint(mode: &str) {
    watchpoint_on(Target::Recording, mode);
}

fn watchpoint_on(target: Target, mode: &str) {
    let Some((events, text)) = session_on(target, mode, "watchpoint") else { return };
    let stops = Stops { events: &events, text: &text, asynchronous: mode == "async" };
    // Reverse continue shows the old value at the store, in
    // trigger_watchpoint; one instruction forward, the new value, and the
    // watchpoint again.
    let back = stops.stop("reverse to the watchpoint", WATCHPOINT, "trigger_watchpoint");
    assert_eq!(back["watched"], 1, "the value before the store:\n{text}");
    let list = back["thread_list"].as_str().unwrap();
    assert!(list.contains("stopped") && list.contains("trigger_watchpoint") && list.contains("stop reason = watchpoint 1"), "{list}");
    let step = stops.stop("step forward over the store", WATCHPOINT, "trigger_watchpoint");
    assert_eq!(step["watched"], 2, "the value after the store:\n{text}");
    assert!(step["thread_list"].as_str().unwrap().contains("stop reason = watchpoint 1"), "{text}");
    assert!(step["pc"].as_u64() > back["pc"].as_u64(), "the step moved on:\n{text}");
}

fn breakpoint(mode: &str) {
    breakpoint_on(Target::Recording, mode);
}

fn breakpoint_on(target: Target, mode: &str) {
    let Some((events, text)) = session_on(target, mode, "breakpoint") else { return };
    let stops = Stops { events: &events, text: &text, asynchronous: mode == "async" };
    let at = stops.stop("reverse to the breakpoint", BREAKPOINT, "trigger_breakpoint");
    assert_eq!(at["at"], events[0]["initial"], "the threads stopped at the breakpoint are the initial ones:\n{text}");
    let address = at["address"].as_u64().unwrap();
    assert_eq!(at["pc"].as_u64(), Some(address), "{text}");
    let boundary = stops.at_boundary("plain continue keeps the direction");
    // Quirks.
    assert_eq!(stops.stop("forward to the breakpoint", BREAKPOINT, "trigger_breakpoint")["pc"].as_u64(), Some(address), "{text}");
    let again = stops.resumed("reverse from on the breakpoint", STOPPED);
    assert_eq!(again["reason"].as_u64(), Some(HISTORY_BOUNDARY), "a reverse continue from on the breakpoint does not report it again:\n{text}");
    assert_eq!(again["pc"], boundary["pc"], "{text}");
    stops.stop("forward to the breakpoint again", BREAKPOINT, "trigger_breakpoint");
    stops.stop("forward to stop_recording", BREAKPOINT, "stop_recording");
    let next = stops.stop("reverse to the breakpoint from the end", BREAKPOINT, "trigger_breakpoint")["next"].as_u64();
    // LLDB 22 steps off the breakpoint here (`z0`, `vCont;s`, `Z0`): the
    // step executes the breakpointed instruction, as forwards.
    let step = stops.stop("step right after a reverse stop", TRACE, "trigger_breakpoint");
    assert_eq!(step["pc"].as_u64(), next, "the step lands on the next instruction:\n{text}");
}

fn boundary(mode: &str) {
    boundary_on(Target::Recording, mode);
}

fn boundary_on(target: Target, mode: &str) {
    let Some((events, text)) = session_on(target, mode, "boundary") else { return };
    let stops = Stops { events: &events, text: &text, asynchronous: mode == "async" };
    stops.at_boundary("reverse to the boundary");
    let exit = stops.resumed("forward to the exit", "exited");
    assert_eq!(exit["exit_status"], 0, "{text}");
}

/// Breakpoint and watchpoint conditions that call a function, evaluated
/// in the past: LLDB runs the call in a diversion from the stop, finds the
/// condition false and goes on backwards to the boundary; forwards, a true
/// one stops. A call's result there, a write there (seen until the next
/// resume), and the history as it was after them: the step reads the
/// recorded value, the program ends as recorded.
fn conditions(mode: &str) {
    conditions_on(Target::Recording, mode);
}

fn conditions_on(target: Target, mode: &str) {
    let Some((events, text)) = session_on(target, mode, "conditions") else { return };
    let stops = Stops { events: &events, text: &text, asynchronous: mode == "async" };
    stops.at_boundary("reverse past both false conditions");
    let at = stops.stop("forward to the true condition", BREAKPOINT, "trigger_breakpoint");
    assert_eq!(at["watched"], 2, "{text}");
    assert_eq!(stops.event("a call in the past")["result"], 40, "{text}");
    assert_eq!(stops.event("a write in the past")["watched"], 7, "the write is seen in the diversion:\n{text}");
    let step = stops.stop("step on through the history", TRACE, "trigger_breakpoint");
    assert_eq!(step["watched"], 2, "the history is as recorded after the diversion:\n{text}");
    let exit = stops.resumed("forward to the exit", "exited");
    assert_eq!(exit["exit_status"], 0, "{text}");
}

#[test]
fn lldb_conditions_that_call_functions_are_evaluated_in_the_past() {
    conditions("sync");
    conditions("async");
}

#[test]
fn lldb_reverse_continue_to_the_boundary_then_forward_to_the_exit() {
    boundary("sync");
    boundary("async");
}

#[test]
fn lldb_reverse_continue_to_a_breakpoint_keeps_its_direction() {
    breakpoint("sync");
    breakpoint("async");
}

#[test]
fn lldb_reverse_continue_to_a_watchpoint_then_step_over_the_store() {
    watchpoint("sync");
    watchpoint("async");
}

/// Expressions at `stop_recording` on a replay: read through memory LLDB
/// is given for its results; a write seen until the next move; a call run
/// in a stand-in process (a diversion).
fn expressions_on(target: Target, mode: &str) {
    let Some((events, text)) = session_on(target, mode, "expressions") else { return };
    let stops = Stops { events: &events, text: &text, asynchronous: mode == "async" };
    let e = stops.event("expressions");
    assert_eq!((&e["deref"], &e["sum"]), (&serde_json::json!(2), &serde_json::json!(42)), "{text}");
    let written = stops.event("a write in the past");
    assert_eq!((&written["deref"], &written["watched"]), (&serde_json::json!(7), &serde_json::json!(7)), "{text}");
    assert_eq!(stops.event("a call in the past")["result"], 0, "false_condition(), run in the past:\n{text}");
    let step = stops.stop("step on through the history", TRACE, "stop_recording");
    assert_eq!(step["watched"], 2, "the history is as recorded after the write:\n{text}");
}

/// The same cases, and expressions, on a replay of a full-state recording made under
/// Valgrind: LLDB runs forwards from the first instruction to
/// `stop_recording`, then as against the live recording; past the end the
/// replay reports the exit status the program had.
#[test]
fn lldb_reverse_continue_and_expressions_on_a_full_state_replay() {
    if !retrace_tests::tools::require("valgrind", retrace_tests::tools::which("valgrind").is_some()) {
        return;
    }
    for mode in ["sync", "async"] {
        breakpoint_on(Target::Replay, mode);
        expressions_on(Target::Replay, mode);
        conditions_on(Target::Replay, mode);
        watchpoint_on(Target::Replay, mode);
        boundary_on(Target::Replay, mode);
    }
}
