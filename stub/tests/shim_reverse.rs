//! The LLDB shim's reverse stepping (`lldb-scripts/retrace.py`) against
//! `retrace-stub --record`, through python3-lldb-22.
//!
//! The truth is GDB 13's own `reverse-next`, `reverse-step` and
//! `reverse-finish` on a recording of the same run (the stub runs the
//! program without address randomization, in the same environment, so two
//! recordings execute the same instructions): one script of commands runs
//! on both sides, and after each reverse command the shim must stand where
//! GDB stands — the same instruction id, PC, frame (inlined functions
//! included) and CFA. Programs: `reverse_steps.c` (calls, recursion, an
//! inlined function, a signal handler) at -O0; `inlined_steps.c` (a call
//! made from code inlined twice over, a breakpoint in the callee, a store
//! in the middle of a line watched) at -O1 and -O2; brotli 1.2.1's command
//! line tool at -O1, decompressing. `reverse-stepi` is checked against
//! `thread step-inst`.

use std::path::Path;
use std::process::Command;

mod common;

use common::{end_stub, json_lines, lldb_python, lldb_python_present, start_recording};
use retrace_tests::recordings::build;

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

/// GDB's side of a script (a Python command `walk CMD N` runs CMD N times,
/// or until it fails, printing where each lands; `here` prints where the
/// thread stands): the id from `monitor record status`, the PC, the frame's
/// function (inlined ones included), its line and CFA ("frame at").
const GDB_WALK: &str = r#"
import gdb, json
def here(cmd):
    frame = gdb.selected_frame()
    info = gdb.execute("info frame", to_string=True)
    cfa = int(info.split("frame at ")[1].split(":")[0].split()[0], 16) if "frame at " in info else None
    status = json.loads(gdb.execute("monitor record status --json", to_string=True).strip().splitlines()[-1])
    print("LANDING " + json.dumps(dict(cmd=cmd, id=status["position"]["id"], pc=frame.pc(), cfa=cfa,
                                       function=frame.name(), line=frame.find_sal().line)))
class Walk(gdb.Command):
    def __init__(self):
        super().__init__("walk", gdb.COMMAND_USER)
    def invoke(self, arg, tty):
        cmd, n = arg.rsplit(" ", 1)
        for _ in range(int(n)):
            try:
                gdb.execute(cmd, to_string=True)
            except gdb.error as e:
                print("LANDING " + json.dumps(dict(cmd=cmd, error=str(e))))
                return
            here(cmd)
Walk()
"#;

/// The shim's side of the same script (argv[3]: the shim; argv[4…]: the
/// commands), in LLDB's terms: `break F` a breakpoint on F, `watch V` a
/// write watchpoint on V, `continue`, and `walk CMD N` for the shim's
/// `retrace CMD` (reverse-next, reverse-step, reverse-finish,
/// reverse-continue). Where the thread stands is the selected frame's
/// (the shim selects the frame GDB shows).
///
/// reverse-next walks by GDB's rule (`--gdb`), the landings GDB's walk is
/// compared with; at each, the landing by LLDB's rule (the command's
/// default) is computed from the same place too. After the walk, each
/// landing where the two rules differ is judged by LLDB itself: a `NEXT`
/// line with LLDB's `thread step-over` from both landings (breakpoints and
/// watchpoints off), the lines there, and the line of the instruction
/// before GDB's landing.
const LLDB_WALK: &str = r#"
event = lldb.SBEvent()
while process.GetState() != lldb.eStateStopped and listener.WaitForEvent(10, event):
    pass
command("command script import " + sys.argv[3])
command("process handle SIGUSR1 -s false -n false -p true")
from retrace_shim.reverse import ReverseStepper
def position():
    return json.loads(command("retrace where --json").strip().splitlines()[-1])["id"]
def line_at(frame):
    entry = frame.GetLineEntry()
    return [entry.GetFileSpec().fullpath, entry.GetLine()] if entry.IsValid() and entry.GetLine() else None
def here(cmd):
    thread = process.GetSelectedThread()
    frame = thread.GetSelectedFrame()
    landing = dict(cmd=cmd, id=position(), pc=frame.GetPC(), cfa=frame.GetCFA(), function=frame.GetFunctionName(),
                   line=(line_at(frame) or [None, 0])[1])
    print("LANDING " + json.dumps(landing))
    return landing
def go(id):
    if "error:" in command("retrace goto %d" % id):
        command("retrace goto end")
    return line_at(process.GetSelectedThread().GetFrameAtIndex(0))
def step_over(id):
    go(id)
    target.DisableAllBreakpoints()
    target.DisableAllWatchpoints()
    command("thread step-over")
    target.EnableAllBreakpoints()
    target.EnableAllWatchpoints()
    return [position(), line_at(process.GetSelectedThread().GetFrameAtIndex(0))]
nexts = []
for line in sys.argv[4:]:
    words = line.split()
    if words[0] == "break" and ":" in words[1]:
        file, number = words[1].split(":")
        target.BreakpointCreateByLocation(file, int(number))
    elif words[0] == "break":
        target.BreakpointCreateByName(words[1])
    elif words[0] == "watch":
        print(command("watchpoint set variable -w write " + words[1]))
    elif words[0] == "continue":
        process.Continue()
    elif words[0] == "walk":
        cmd = " ".join(words[1:-1])
        for _ in range(int(words[-1])):
            rule = None
            if cmd == "reverse-next":
                thread = process.GetSelectedThread()
                rule = dict(start=position(), lldb=ReverseStepper(debugger, thread).lldb_next().id, gdb=ReverseStepper(debugger, thread).run("next").id)
                out = command("retrace reverse-next --gdb")
            else:
                out = command("retrace " + cmd)
            if "error:" in out:
                print("LANDING " + json.dumps(dict(cmd=cmd, error=out.strip())))
                break
            landing = here(cmd)
            if rule is not None:
                rule["moved"] = landing["id"]
                nexts.append(rule)
for rule in nexts:
    if rule["lldb"] != rule["gdb"] and None not in (rule["lldb"], rule["gdb"]):
        rule["start_line"] = go(rule["start"])
        rule["lldb_over"] = step_over(rule["lldb"])
        rule["lldb_line"] = go(rule["lldb"])
        rule["gdb_over"] = step_over(rule["gdb"])
        rule["gdb_line"] = go(rule["gdb"])
        command("retrace reverse-stepi")
        rule["before_gdb_line"] = line_at(process.GetSelectedThread().GetFrameAtIndex(0))
    print("NEXT " + json.dumps(rule))
process.Kill()
"#;

/// Runs `script` with GDB and with the shim, each on its own recording of
/// `program args`; returns both lists of landings and both outputs, after
/// judging the shim's reverse-next by LLDB's rule ([`assert_inverts_lldbs_next`]).
fn both_walk(program: &Path, args: &[&str], script: &[&str]) -> (Vec<serde_json::Value>, Vec<serde_json::Value>, String) {
    let (gdb, shim, text) = both_walk_with_rules(program, args, script);
    assert_inverts_lldbs_next(&shim.1, &text);
    (gdb, shim.0, text)
}

/// The JSON after `tag` on each line of `text` that starts with it.
fn tagged(text: &str, tag: &str) -> Vec<serde_json::Value> {
    text.lines().filter_map(|l| l.strip_prefix(tag)).map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"))).collect()
}

fn both_walk_with_rules(program: &Path, args: &[&str], script: &[&str]) -> (Vec<serde_json::Value>, (Vec<serde_json::Value>, Vec<serde_json::Value>), String) {
    let (stub, port) = common::start_recording_with_args(program, args, "full");
    let walk = program.with_extension("gdb-walk.py");
    std::fs::write(&walk, GDB_WALK).unwrap();
    let mut commands = vec![format!("source {}", walk.display()), format!("target remote 127.0.0.1:{port}"), "handle SIGUSR1 nostop noprint pass".into()];
    commands.extend(script.iter().map(|c| c.to_string()));
    commands.push("kill".into());
    let commands: Vec<&str> = commands.iter().map(String::as_str).collect();
    let gdb = common::gdb(program, &commands);
    end_stub(stub);
    let (stub, port) = common::start_recording_with_args(program, args, "full");
    let shim = shim();
    let mut extra = vec![shim.as_str()];
    extra.extend(script);
    let lldb = lldb_python(LLDB_WALK, program, port, &extra);
    end_stub(stub);
    let text = format!("=== GDB\n{gdb}\n=== the shim\n{lldb}");
    (tagged(&gdb, "LANDING "), (tagged(&lldb, "LANDING "), tagged(&lldb, "NEXT ")), text)
}

/// The shim's reverse-next by LLDB's rule (its default) against LLDB's own
/// `thread step-over`, at each place a walk ran reverse-next: where it
/// lands elsewhere than GDB's rule does, LLDB's step-over from its landing
/// comes back to where the reverse-next started (from the middle of a
/// line: to that line, before it), on another line; and GDB's landing
/// broke LLDB's rule: it stayed on the line, or LLDB's step-over from it
/// does not come back, or it is not where its line started (the
/// instruction before it is on the same line, or the shim's landing is an
/// earlier instruction of the same line). Returns how many landings
/// differed.
fn assert_inverts_lldbs_next(nexts: &[serde_json::Value], text: &str) -> usize {
    let mut differed = 0;
    for rule in nexts {
        let context = format!("reverse-next from {} by LLDB's rule and GDB's: {rule}\n{text}", rule["start"]);
        if !rule["gdb"].is_null() {
            assert_eq!(rule["moved"], rule["gdb"], "`retrace reverse-next --gdb` moved to GDB's landing: {context}");
        }
        if rule["lldb"] == rule["gdb"] {
            continue;
        }
        differed += 1;
        assert!(!rule["lldb"].is_null() && !rule["gdb"].is_null(), "{context}");
        let (over, start) = (rule["lldb_over"][0].as_u64().unwrap(), rule["start"].as_u64().unwrap());
        assert!(over == start || (over < start && rule["lldb_over"][1] == rule["start_line"]), "LLDB's step-over from the landing comes back: {context}");
        assert_ne!(rule["lldb_line"], rule["start_line"], "the landing is on another line: {context}");
        assert!(!rule["lldb_line"].is_null(), "{context}");
        // (Not where its line started: the instruction before it is on the
        // line, or the line's run started before, where the shim landed.)
        let line_started_before = rule["lldb_line"] == rule["gdb_line"] && rule["lldb"].as_u64() < rule["gdb"].as_u64();
        let gdb_breaks_the_rule = rule["gdb_line"] == rule["start_line"] || rule["gdb_over"][0] != rule["start"] || rule["before_gdb_line"] == rule["gdb_line"] || line_started_before;
        assert!(gdb_breaks_the_rule, "GDB's landing keeps LLDB's rule, the shim's differs: {context}");
    }
    differed
}

/// Every landing of the shim is GDB's: the instruction (its id counted from
/// the script's first landing: two recordings of one static program were
/// seen to differ by some 60 instructions of glibc's start-up when tests
/// ran side by side — not understood yet — and never after it), its PC,
/// the frame's CFA (where GDB knows it: not past the outermost frame) and,
/// where there are lines, the function (without them GDB and LLDB name an
/// address by different aliases, `pthread_kill` / `__pthread_kill`). Lines
/// are compared through the PC: at a few addresses GDB names the
/// statement's line and LLDB the last row's.
fn assert_lands_where_gdb_does(gdb: &[serde_json::Value], shim: &[serde_json::Value], text: &str, at_least: usize) {
    assert!(gdb.len() >= at_least, "GDB landed {} times (at least {at_least} expected):\n{text}", gdb.len());
    assert_eq!(gdb.len(), shim.len(), "as many landings:\n{text}");
    let id = |landings: &[serde_json::Value], l: &serde_json::Value| l["id"].as_i64().unwrap() - landings[0]["id"].as_i64().unwrap();
    for (n, (g, s)) in gdb.iter().zip(shim).enumerate() {
        let context = format!("landing {n} ({}): GDB {g}, the shim {s}", g["cmd"]);
        if g.get("error").is_some() {
            assert!(s.get("error").is_some(), "GDB refused, the shim did not: {context}\n{text}");
            continue;
        }
        assert_eq!((id(shim, s), &s["pc"]), (id(gdb, g), &g["pc"]), "{context}\n{text}");
        if !g["cfa"].is_null() && g["cfa"] != 0 {
            assert_eq!(s["cfa"], g["cfa"], "the frame's CFA: {context}\n{text}");
        }
        if g["line"] != 0 {
            assert_eq!(s["function"], g["function"], "the frame: {context}\n{text}");
        }
    }
}

#[test]
fn reverse_next_step_and_finish_land_where_gdbs_do_at_o0() {
    if !lldb_python_present() || retrace_tests::tools::which("gdb").is_none() {
        return;
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("shim-reverse-o0");
    let (program, last) = program(&dir);
    let stop = format!("break reverse_steps.c:{last}");
    let script = [stop.as_str(), "continue", "walk reverse-next 12", "walk reverse-step 40", "walk reverse-finish 1", "walk reverse-next 3"];
    let (gdb, (shim, nexts), text) = both_walk_with_rules(&program, &[], &script);
    assert_lands_where_gdb_does(&gdb, &shim, &text, 50);
    // `counter += sum + deep + doubled;` is three rows of one line: GDB's
    // reverse-next goes back row by row and stays on the line twice; LLDB's
    // rule goes to the line before.
    assert!(assert_inverts_lldbs_next(&nexts, &text) >= 2, "the rules differ on the for line:\n{text}");
}

/// LLDB's `thread step-over` from `main`'s first line to its last (argv[4],
/// argv[5]), over calls, a `for` loop whose increment and condition are
/// two rows of one line, a line of three rows and a signal's handler; then
/// as many `retrace reverse-next`: the positions, forwards then back.
const STEP_OVER_AND_BACK: &str = r#"
event = lldb.SBEvent()
while process.GetState() != lldb.eStateStopped and listener.WaitForEvent(10, event):
    pass
command("command script import " + sys.argv[3])
command("process handle SIGUSR1 -s false -n false -p true")
def where():
    frame = process.GetSelectedThread().GetFrameAtIndex(0)
    entry = frame.GetLineEntry()
    return dict(id=json.loads(command("retrace where --json").strip().splitlines()[-1])["id"], pc=frame.GetPC(),
                line=entry.GetLine(), function=frame.GetFunctionName())
first = target.BreakpointCreateByLocation("reverse_steps.c", int(sys.argv[4]))
process.Continue()
target.BreakpointDelete(first.GetID())
forward = [where()]
while forward[-1]["line"] != int(sys.argv[5]) and len(forward) < 60:
    command("thread step-over")
    forward.append(where())
print("FORWARD " + json.dumps(forward))
back = [forward[-1]]
for _ in range(len(forward) - 1):
    command("retrace reverse-next")
    back.append(where())
print("BACK " + json.dumps(back))
process.Kill()
"#;

/// Step Back in LLDB and VS Code is the inverse of LLDB's own step-over
/// (`next`): from `main`'s last line, `retrace reverse-next` visits every
/// place LLDB's forward `next` stood, in reverse order: at the start of
/// each line as LLDB's line ranges have it, never twice on one line. (GDB
/// 13's rule, `--gdb`, stays twice on the line of three rows.)
#[test]
fn reverse_next_undoes_lldbs_step_over_line_by_line_at_o0() {
    if !lldb_python_present() {
        return;
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("shim-reverse-inverse");
    let (program, last) = program(&dir);
    let source = std::fs::read_to_string(retrace_tests::recordings::programs_dir().join("reverse_steps.c")).unwrap();
    let line_of = |text: &str| source.lines().position(|l| l.contains(text)).unwrap() + 1;
    let (first, for_line, three_rows) = (line_of("int sum = 0;"), line_of("for (int i = 0;"), line_of("counter += sum + deep + doubled;"));
    let (stub, port) = common::start_recording_with_args(&program, &[], "full");
    let shim = shim();
    let (first_arg, last_arg) = (first.to_string(), last.to_string());
    let out = lldb_python(STEP_OVER_AND_BACK, &program, port, &[shim.as_str(), &first_arg, &last_arg]);
    end_stub(stub);
    let list = |tag: &str| -> Vec<serde_json::Value> {
        let first = tagged(&out, tag).into_iter().next().unwrap_or_else(|| panic!("no {tag}line:\n{out}"));
        serde_json::from_value(first).unwrap()
    };
    let (forward, back) = (list("FORWARD "), list("BACK "));
    let lines: Vec<u64> = forward.iter().map(|p| p["line"].as_u64().unwrap()).collect();
    assert_eq!(lines.first().copied(), Some(first as u64), "{out}");
    assert_eq!(lines.last().copied(), Some(last as u64), "{out}");
    assert_eq!(lines.iter().filter(|&&l| l == for_line as u64).count(), 4, "the for line: its start, then three increments:\n{out}");
    assert!(lines.contains(&(three_rows as u64)), "{out}");
    assert!(forward.iter().all(|p| p["function"] == "main"), "{out}");
    let place = |p: &serde_json::Value| (p["id"].as_u64(), p["pc"].as_u64(), p["line"].as_u64());
    let undone: Vec<_> = forward.iter().rev().map(place).collect();
    let walked: Vec<_> = back.iter().map(place).collect();
    assert_eq!(walked, undone, "reverse-next retraces LLDB's step-over:\n{out}");
}

/// `inlined_steps.c` built with `opt`, static (libc without lines).
fn inlined_steps(opt: &str) -> std::path::PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("shim-inlined-{opt}"));
    build("inlined_steps", &dir, &[opt, "-static"])
}

/// Inlined code at -O1 and -O2: reverse-step from `done` through `run`,
/// `step_once` and `twice` (all inlined into `main`) into `leaf` and out,
/// reverse-finish out of inlined frames, reverse-next over them; from a
/// breakpoint in `leaf` (called from inlined code), reverse-next and
/// reverse-step stopping at that breakpoint in earlier calls,
/// reverse-finish out of `leaf`; and from a watchpoint stop in the middle
/// of a line, reverse-next to that line's start.
fn inlined(opt: &str) {
    if !lldb_python_present() || retrace_tests::tools::which("gdb").is_none() {
        return;
    }
    let program = inlined_steps(opt);
    let scripts: [&[&str]; 3] = [
        &["break done", "continue", "walk reverse-step 40", "walk reverse-finish 2", "walk reverse-next 3"],
        &["break done", "continue", "break leaf", "walk reverse-continue 1", "walk reverse-next 3", "walk reverse-finish 1", "walk reverse-next 6", "walk reverse-step 6", "walk reverse-finish 1"],
        &["break done", "continue", "watch watched", "walk reverse-continue 1", "walk reverse-next 4", "walk reverse-finish 1"],
    ];
    let mut functions = std::collections::BTreeSet::new();
    for (script, at_least) in scripts.iter().zip([40, 17, 5]) {
        let (gdb, shim, text) = both_walk(&program, &[], script);
        assert_lands_where_gdb_does(&gdb, &shim, &text, at_least);
        functions.extend(shim.iter().filter_map(|l| l["function"].as_str().map(str::to_string)));
    }
    for inlined in ["run", "step_once", "twice", "leaf"] {
        assert!(functions.contains(inlined), "no landing in {inlined}: {functions:?}");
    }
}

#[test]
fn reverse_next_step_and_finish_land_where_gdbs_do_in_inlined_code_at_o1() {
    inlined("-O1");
}

#[test]
fn reverse_next_step_and_finish_land_where_gdbs_do_in_inlined_code_at_o2() {
    inlined("-O2");
}

/// After a watchpoint stop on a store in the middle of a line, GDB's
/// reverse-next goes to the start of that line (`--gdb`), LLDB's rule to
/// the start of the line before (it never stays on the line).
#[test]
fn reverse_next_from_the_middle_of_a_line_goes_to_its_start_by_gdbs_rule_and_to_the_line_before_by_lldbs() {
    if !lldb_python_present() || retrace_tests::tools::which("gdb").is_none() {
        return;
    }
    let program = inlined_steps("-O0");
    let source = std::fs::read_to_string(retrace_tests::recordings::programs_dir().join("inlined_steps.c")).unwrap();
    let store_line = source.lines().position(|l| l.contains("watched = total + i;")).unwrap() as u64 + 1;
    let (gdb, (shim, nexts), text) = both_walk_with_rules(&program, &[], &["break done", "continue", "watch watched", "walk reverse-continue 1", "walk reverse-next 1"]);
    assert_lands_where_gdb_does(&gdb, &shim, &text, 2);
    let (stop, next) = (&shim[0], &shim[1]);
    assert_eq!((stop["line"].as_u64(), next["line"].as_u64()), (Some(store_line), Some(store_line)), "the watchpoint stop and the line's start:\n{text}");
    assert!(next["id"].as_u64() < stop["id"].as_u64(), "{text}");
    assert_eq!(assert_inverts_lldbs_next(&nexts, &text), 1, "{text}");
    assert_eq!(nexts[0]["lldb_line"][1].as_u64(), Some(store_line - 1), "LLDB's rule: the line before:\n{text}");
}

/// brotli 1.2.1's command line tool (`c/tools/brotli.c` and the library's
/// C sources, from PyPI's `Brotli` sdist that the test command downloads,
/// RETRACE_BROTLI_SDIST) built `-g -O1 -static`, and a small `.br` file it
/// made; `None` (after saying why) where the sources are missing.
fn brotli() -> Option<(std::path::PathBuf, std::path::PathBuf)> {
    let sdist = std::env::var_os("RETRACE_BROTLI_SDIST").map(std::path::PathBuf::from).unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/brotli-1.2.1.tar.gz"));
    if !retrace_tests::tools::require("brotli 1.2.1's sources (RETRACE_BROTLI_SDIST)", sdist.exists()) {
        return None;
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("brotli");
    let (program, compressed) = (dir.join("brotli"), dir.join("small.br"));
    if compressed.exists() {
        return Some((program, compressed));
    }
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    assert!(Command::new("tar").arg("xzf").arg(&sdist).arg("-C").arg(&dir).status().unwrap().success());
    let sources = dir.join("brotli-1.2.1");
    let mut gcc = Command::new("gcc");
    gcc.args(["-g", "-O1", "-static", "-o"]).arg(&program).arg("-I").arg(sources.join("c/include")).arg(sources.join("c/tools/brotli.c"));
    for part in ["common", "dec", "enc"] {
        let mut files: Vec<_> = std::fs::read_dir(sources.join("c").join(part)).unwrap().map(|e| e.unwrap().path()).filter(|p| p.extension().is_some_and(|e| e == "c")).collect();
        files.sort();
        gcc.args(files);
    }
    // Built where the sources are: the line tables name them relative to it.
    let built = gcc.arg("-lm").current_dir(&sources).output().unwrap();
    assert!(built.status.success(), "{}", String::from_utf8_lossy(&built.stderr));
    let text: Vec<u8> = std::fs::read(sources.join("README.md")).unwrap().into_iter().take(2000).collect();
    let plain = dir.join("small.txt");
    std::fs::write(&plain, &text).unwrap();
    let made = Command::new(&program).arg("-c").arg(&plain).output().unwrap();
    assert!(made.status.success());
    std::fs::write(&compressed, &made.stdout).unwrap();
    Some((program, compressed))
}

/// brotli decompressing: from its last call of the decoder (reached by
/// reverse-continue from its output), reverse-next back through the
/// inlined `DecompressFile` to its loop's lines, reverse-finish out of it
/// into `DecompressFiles`, on; and from `WriteOutput`, reverse-step through
/// the decoder's functions, reverse-finish three frames out, reverse-next
/// through `main`.
#[test]
fn reverse_next_step_and_finish_land_where_gdbs_do_in_brotli() {
    if !lldb_python_present() || retrace_tests::tools::which("gdb").is_none() {
        return;
    }
    let Some((program, compressed)) = brotli() else { return };
    let compressed = compressed.display().to_string();
    let args = ["-d", "-c", compressed.as_str()];
    let scripts: [&[&str]; 2] = [
        &["break WriteOutput", "continue", "break BrotliDecoderDecompressStream", "walk reverse-continue 1", "walk reverse-next 6", "walk reverse-finish 1", "walk reverse-next 4", "walk reverse-step 8"],
        &["break WriteOutput", "continue", "walk reverse-step 30", "walk reverse-finish 3", "walk reverse-next 30"],
    ];
    for (script, at_least) in scripts.iter().zip([20, 60]) {
        let (gdb, shim, text) = both_walk(&program, &args, script);
        assert_lands_where_gdb_does(&gdb, &shim, &text, at_least);
        if script.len() == 8 {
            // The case users met: reverse-next from the decoder's entry lands
            // in the inlined caller's line that called it, and
            // reverse-finish from there in DecompressFiles.
            assert_eq!((shim[1]["function"].as_str(), shim[1]["line"].as_u64()), (Some("DecompressFile"), Some(1310)), "{text}");
            let finish = shim.iter().find(|l| l["cmd"] == "reverse-finish").unwrap();
            assert_eq!(finish["function"], "DecompressFiles", "{text}");
        }
    }
}

/// The line table the shim reads as GDB does (`retrace_lines.py`): for
/// every address of `main` at -O2, the row GDB's `info line *ADDR` names
/// (its line and where it starts); a damaged `.debug_line` or a truncated,
/// scribbled-over file never raises (the units before the damage are
/// kept).
#[test]
fn the_shims_line_table_answers_as_gdbs_and_survives_damage() {
    if retrace_tests::tools::which("gdb").is_none() {
        return;
    }
    let program = inlined_steps("-O2");
    let disassembly = common::gdb(&program, &["disassemble main"]);
    let addresses: Vec<u64> =
        disassembly.lines().filter_map(|l| l.trim_start().strip_prefix("0x")).filter_map(|l| u64::from_str_radix(l.split_whitespace().next()?, 16).ok()).collect();
    assert!(addresses.len() > 20, "{disassembly}");
    let mut commands: Vec<String> = addresses.iter().map(|a| format!("info line *{a:#x}")).collect();
    commands.insert(0, "set width 0".into());
    let gdb = common::gdb(&program, &commands.iter().map(String::as_str).collect::<Vec<_>>());
    // "Line 45 of \"inlined_steps.c\" starts at address 0x40153d <main+77> and ends at …"
    let expected: Vec<(u64, u64)> = gdb
        .lines()
        .filter_map(|l| {
            let line = l.strip_prefix("Line ")?.split_whitespace().next()?.parse().ok()?;
            let start = u64::from_str_radix(l.split("starts at address 0x").nth(1)?.split_whitespace().next()?, 16).ok()?;
            Some((line, start))
        })
        .collect();
    assert_eq!(expected.len(), addresses.len(), "{gdb}");
    let script = r#"
import json, random, sys
sys.path.insert(0, sys.argv[1])
import retrace_lines
table = retrace_lines.table_for(sys.argv[2])
print(json.dumps([[table.find_pc_line(int(a)).line, table.find_pc_line(int(a)).pc] for a in sys.argv[3:]]))
data = open(sys.argv[2], "rb").read()
random.seed(7)
for n in range(300):
    damaged = bytearray(data[:random.randrange(len(data))] if n % 2 else data)
    for _ in range(random.randint(1, 200)):
        damaged[random.randrange(len(damaged))] = random.randrange(256)
    path = sys.argv[2] + ".damaged"
    open(path, "wb").write(damaged)
    retrace_lines.TABLES.clear()
    for a in sys.argv[3:]:
        retrace_lines.table_for(path).find_pc_line(int(a))
print("survived")
"#;
    let lldb_scripts = Path::new(env!("CARGO_MANIFEST_DIR")).join("../lldb-scripts");
    let out = Command::new("python3").arg("-c").arg(script).arg(&lldb_scripts).arg(&program).args(addresses.iter().map(u64::to_string)).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    let answered: Vec<(u64, u64)> = serde_json::from_str(text.lines().next().unwrap_or("")).unwrap_or_else(|e| panic!("{e}: {text}"));
    assert_eq!(answered, expected, "(line, row start) per address of main, as GDB's info line:\n{gdb}");
    assert!(text.contains("survived"), "{text}");
}

/// The shim's reverse-next back over a call holding a breakpoint
/// (`tests/programs/callee_breakpoint.c`: after `f(2)`, a breakpoint in
/// `f`) stops at that breakpoint in the call, `x` = 2, as GDB's own
/// `record full` of a native run does; on `retrace-stub --record=full` (the
/// stub recording as the program runs) and on the replay of a full-state
/// recording, in LLDB's batch mode and within the time a stop takes (it
/// once stayed "resuming").
#[test]
fn reverse_next_over_a_call_holding_a_breakpoint_stops_there_as_gdbs() {
    if !lldb_python_present() || !retrace_tests::tools::require("gdb", retrace_tests::tools::which("gdb").is_some()) {
        return;
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("shim-callee-breakpoint");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let program = build("callee_breakpoint", &dir, &["-O0"]);
    let truth = common::gdb(&program, &["break main", "run", "record full", "break callee_breakpoint.c:11", "continue", "break f", "reverse-next", "print x", "print $pc"]);
    assert!(truth.contains("Breakpoint 3, f (x=2)"), "GDB's record full:\n{truth}");
    let lldb = |port: u16| {
        let out = Command::new("timeout")
            .args(["60", "lldb-22", "-b", "-o", &format!("gdb-remote {port}"), "-o", &format!("command script import {}", shim()), "-o", "breakpoint set -f callee_breakpoint.c -l 11"])
            .args(["-o", "process continue", "-o", "breakpoint set -n f", "-o", "retrace reverse-next", "-o", "frame variable x", "-o", "process status"])
            .arg(&program)
            .output()
            .unwrap();
        (out.status.code(), String::from_utf8_lossy(&out.stdout).into_owned())
    };
    let (stub, port) = start_recording(&program, "full");
    let (code, live) = lldb(port);
    end_stub(stub);
    assert_eq!(code, Some(0), "LLDB on retrace-stub --record ended (a timeout: 124):\n{live}");
    assert!(live.contains("stop reason = breakpoint 2.1") && live.contains("(int) x = 2"), "on retrace-stub --record:\n{live}");

    let bundle = dir.join("bundle");
    let recorded = common::retrace().args(["record", "--backend", "valgrind", "--mode", "full", "-o"]).arg(&bundle).arg("--").arg(&program).output().unwrap();
    assert!(recorded.status.success(), "{}", String::from_utf8_lossy(&recorded.stderr));
    let (stub, line) = common::start_stub_command(&["--listen".as_ref(), "127.0.0.1:0".as_ref(), "--replay".as_ref(), bundle.join("trace.json").as_os_str(), "--replay-from".as_ref(), "start".as_ref()]);
    let (code, replayed) = lldb(common::port_of(&line));
    end_stub(stub);
    assert_eq!(code, Some(0), "LLDB on the replay ended (a timeout: 124):\n{replayed}");
    assert!(replayed.contains("stop reason = breakpoint 2.1") && replayed.contains("(int) x = 2"), "on the replay:\n{replayed}");
}
