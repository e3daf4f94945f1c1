"""The shim's reverse-next over long loops against a forward `next`, in
one run (driven by stub/benches/reverse_next.rs; python3-lldb-22).

tests/programs/reverse_loop.c runs under `retrace-stub --record` (full
mode) to its last line; timed, each as the command's time in LLDB's
Python (sync mode):
  - `thread step-over` at the live end over one line of a 3-round loop
    (the reference: a forward next over one iteration's line);
  - `retrace reverse-next` from the last line over `spin(LOOP)` (a call
    running LOOP iterations, about 5 instructions each);
  - `retrace reverse-next` from there over the one-line loop of LOOP
    iterations (about 7 instructions each).
Each landing is checked (the line it lands on). argv: stub, program, shim.
"""
import json
import re
import subprocess
import sys
import time

sys.path.insert(0, subprocess.run(["lldb-22", "-P"], capture_output=True, text=True).stdout.strip())
import lldb  # noqa: E402

stub_path, program, shim, source = sys.argv[1:5]
lines = {}
for number, text in enumerate(open(source), 1):
    marker = re.search(r"line:(\w+)", text)
    if marker:
        lines[marker.group(1)] = number

stub = subprocess.Popen([stub_path, "--record=full", "--listen", "127.0.0.1:0", "--", program], stderr=subprocess.PIPE, text=True)
port = int(re.search(r":(\d+)\s*$", stub.stderr.readline()).group(1))
lldb.SBDebugger.Initialize()
debugger = lldb.SBDebugger.Create()
debugger.SetAsync(False)


def command(text):
    result = lldb.SBCommandReturnObject()
    debugger.GetCommandInterpreter().HandleCommand(text, result)
    if not result.Succeeded():
        raise SystemExit("%s: %s" % (text, result.GetError()))
    return result.GetOutput() or ""


def line():
    return debugger.GetSelectedTarget().GetProcess().GetSelectedThread().GetFrameAtIndex(0).GetLineEntry().GetLine()


def timed(text):
    begin = time.perf_counter()
    command(text)
    return (time.perf_counter() - begin) * 1e3


command("target create " + program)
command("gdb-remote %d" % port)
command("command script import " + shim)
command("breakpoint set -f reverse_loop.c -l %d" % lines["body"])
command("process continue")
command("breakpoint delete -f")
forward = []
for _ in range(2):
    forward.append(timed("thread step-over"))
command("breakpoint set -f reverse_loop.c -l %d" % lines["end"])
begin = time.perf_counter()
command("process continue")
recording = time.perf_counter() - begin
command("breakpoint delete -f")
instructions = json.loads(command("retrace where --json").strip().splitlines()[-1])["instructions"]
# The history's size as the stub counts it (state log, indexes included).
record = next(json.loads(l) for l in command("process plugin packet monitor record status --json").splitlines() if l.startswith("{"))
over_call = timed("retrace reverse-next")
assert line() == lines["call"], "reverse-next from the end lands on line %d, not %d" % (line(), lines["call"])
over_loop = timed("retrace reverse-next")
assert line() == lines["loop"], "reverse-next over the loop lands on line %d, not %d" % (line(), lines["loop"])
next_ms = min(forward)
print("recorded %d instructions to the end in %.1f s" % (instructions, recording))
print("history: %d bytes, %.1f per instruction" % (record["bytes"], record["bytes"] / record["instructions"]))
print("forward next (live, one loop line)       %7.1f ms (best of %d)" % (next_ms, len(forward)))
print("reverse-next over spin(LOOP) (a call)    %7.1f ms  ratio %.1f" % (over_call, over_call / next_ms))
print("reverse-next over the one-line loop      %7.1f ms  ratio %.1f (target <= 2)" % (over_loop, over_loop / next_ms))
print(json.dumps({"next_ms": next_ms, "over_call_ms": over_call, "over_loop_ms": over_loop, "instructions": instructions, "history_bytes": record["bytes"]}))
command("process kill")
