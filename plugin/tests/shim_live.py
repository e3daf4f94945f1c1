"""The LLDB shim on a live process under retrace-stub, against LLDB 22's
built-in trace commands on the same process, in python3-lldb-22.

Usage: python3 shim_live.py SHIM STUB PROGRAM SAVE_DIR BREAK1 BREAK2 BREAK3

The program runs under `retrace-stub` (no recording). At BREAK1 the shim
starts tracing (`retrace start`: the trace packet sent by the shim; the
built-in trace commands fail while the shim runs, so it cannot lean on
them). At BREAK2 and again at BREAK3 (a later stop: the trace is fetched
again) each `retrace dump` case is compared with the built-in's output
for the same live process: LLDB's `process trace start` then fails ("Process
currently traced") but leaves LLDB's trace object in place, so its
`thread trace dump` reads the trace the shim started. `retrace save DIR`
must load in a fresh stock lldb-22 (`trace load`) with the same dump.
The last line is a JSON summary.
"""

import json
import re
import subprocess
import sys

import lldb
from builtin_trace_guard import refused, run_guarded
from builtin_trace_guard import run as run_unguarded

shim, stub_path, program, saved, breaks = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:8]

stub = subprocess.Popen([stub_path, "--listen", "127.0.0.1:0", "--", program], stderr=subprocess.PIPE, text=True)
port = int(re.search(r":(\d+)\s*$", stub.stderr.readline()).group(1))
debugger = lldb.SBDebugger.Create(False)
debugger.SetAsync(False)


def run(command):
    return run_unguarded(debugger, command)


def run_shim(command):
    return run_guarded(debugger, command)


cases = 0
mismatches = []


def compare(name, ours, builtin):
    global cases
    cases += 1
    if ours != builtin:
        mismatches.append(name)
        print("MISMATCH %s\n--- retrace:\n%r\n--- built-in:\n%r" % (name, ours, builtin))


print(run("target create " + program).strip())
print(run("gdb-remote %d" % port).strip())
print(run("command script import " + shim).strip())
run("breakpoint set -n %s" % breaks[0])
run("process continue")
before = run_shim("retrace dump instructions")
print("before start:", before.strip())
assert "not traced" in before, before
started = run_shim("retrace start -s 16kb")
print(started.strip())
assert started.strip() == "tracing the process (16384 bytes per thread)", started
# A second process start is refused by the server, with its words.
again = run_shim("retrace start")
assert again.strip() == "error: retrace start: Process currently traced. Stop process tracing first", again
run("breakpoint delete -f")
builtin_made = False
for stop in breaks[1:]:
    run("breakpoint set -n %s" % stop)
    print(run("process continue").strip().splitlines()[-1])
    run("breakpoint delete -f")
    ours = {}
    options = ["", "-c 20", "-r -c 20", "-f -c 30", "-k -c 25", "-t -e -c 10", "-E", "-j -c 15", "-J -k -f -c 8", "-a -r", "-c 5 -s 3",
               "-i 10 -c 4", "-f -i 10 -c 4"]
    for option in options:
        ours[option] = run_shim("retrace dump instructions " + option)
    ours["calls"] = run_shim("retrace dump function-calls")
    ours["calls -j"] = run_shim("retrace dump function-calls -j")
    ours["-C"] = [run_shim("retrace dump instructions -r -c 3"), run_shim("retrace dump instructions -r -c 3 -C")]
    if not builtin_made:
        made = run("process trace start")
        assert "Process currently traced" in made, made
        builtin_made = True
    for option in options:
        compare("%s: dump instructions %s" % (stop, option), ours[option], run("thread trace dump instructions " + option))
    compare("%s: function-calls" % stop, ours["calls"], run("thread trace dump function-calls"))
    compare("%s: function-calls -j" % stop, ours["calls -j"], run("thread trace dump function-calls -j"))
    builtin_c = [run("thread trace dump instructions -r -c 3"), run("thread trace dump instructions -r -c 3 -C")]
    compare("%s: -C" % stop, ours["-C"], builtin_c)
    print("%s: %d instructions listed" % (stop, ours["-a -r"].count("\n") - 1))

last = run("thread trace dump instructions -c 20")
saved_text = run_shim("retrace save " + saved)
print(saved_text.strip())
assert saved_text.strip() == "Trace bundle description file written to: %s/trace.json" % saved, saved_text
loaded = subprocess.run(
    ["timeout", "120", "lldb-22", "-b", "-o", "trace load %s/trace.json" % saved, "-o", "thread trace dump instructions -c 20"],
    capture_output=True, text=True,
)
loaded_text = loaded.stdout[loaded.stdout.index("(lldb) thread trace dump instructions -c 20\n") + len("(lldb) thread trace dump instructions -c 20\n"):]
compare("saved bundle in stock lldb-22", loaded_text, last)

stopped = run_shim("retrace stop")
assert stopped.strip() == "stopped tracing the process", stopped
run("process continue")
print(json.dumps({"cases": cases, "mismatches": len(mismatches), "refused": refused, "listed": ours["-a -r"].count("\n") - 1}))
run("process kill")
stub.wait(timeout=30)
