"""Compares the LLDB shim's `retrace dump` with LLDB 22's built-in `thread
trace dump` on one bundle, in python3-lldb-22.

Usage: python3 shim_dump.py SHIM TRACE_JSON WORK_DIR THREAD_INDEX...

Two debuggers: one runs the built-in (`trace load`, `thread trace dump`),
the other the shim (`retrace load`, `retrace dump`) with the built-in trace
commands made to fail, so the shim cannot lean on them. Each case runs the
same commands in both; the outputs must be equal, line for line and
character for character: the symbolized text's disassembly included
(LLVM's printer, as LLDB's, with LLDB's comments). Every mismatch is
printed; the last line is a JSON summary.
"""

import json
import os
import re
import sys

import lldb
from builtin_trace_guard import refused, run, run_guarded

shim, trace_json, work, indexes = sys.argv[1], sys.argv[2], sys.argv[3], [int(i) for i in sys.argv[4:]]


def debugger():
    d = lldb.SBDebugger.Create(False)
    d.SetAsync(False)
    return d


builtin = debugger()
shimmed = debugger()


def run_shim(command):
    return run_guarded(shimmed, command)


out = run(builtin, "trace load " + trace_json)
assert "error" not in out, out
run_shim("command script import " + shim)
out = run_shim("retrace load " + trace_json)
assert out.startswith("loaded "), out
# The proof that the guard works: the shim's debugger cannot `trace load`.
assert "refused in this test" in run_shim("trace load " + trace_json)
refused.clear()

mismatches = []
cases = 0


def compare(name, lldb_text, shim_text, mode):
    """Line for line, exactly (`mode` names what is compared)."""
    global cases
    cases += 1
    a, b = lldb_text.splitlines(), shim_text.splitlines()
    bad = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
    if bad is None and len(a) != len(b):
        bad = min(len(a), len(b))
    if bad is None and lldb_text != shim_text:
        bad = len(a)  # the same lines, not the same line ends
    if bad is not None:
        mismatches.append(
            "%s (%s): line %d of %d/%d\n  lldb: %r\n  shim: %r"
            % (name, mode, bad, len(a), len(b), a[bad] if bad < len(a) else lldb_text[-20:], b[bad] if bad < len(b) else shim_text[-20:])
        )


def both(options, mode):
    lldb_text = run(builtin, "thread trace dump instructions " + options)
    shim_text = run_shim("retrace dump instructions " + options)
    compare("instructions " + options, lldb_text, shim_text, mode)
    return lldb_text


for index in indexes:
    run(builtin, "thread select %d" % index)
    t = " %d" % index
    # Addresses, ids, events, errors and "no more data": exact.
    last = both("-a -f -e -r" + t, "exact")
    items = max(int(m.group(1)) for m in re.finditer(r"^    (\d+): ", last, re.M))
    for options in ["-r", "-r -c 7 -s 3", "-f -r -c 5 -i %d" % (items // 2), "-r -c 5 -i %d -s 2 -e" % (items // 3), "-f -E", "-E -s 1",
                    "-f -r -t -e -c 40", "-r -c 3 -i %d" % items, "-f -r -c 2 -s %d" % (items + 5)]:
        both(options + t, "exact")
    # JSON: exact (module, symbol, mnemonic, kind, source, line, column).
    for options in ["-j -c 50", "-J -k -f -c 30 -e", "-j -k -i %d -c 40" % (items // 2), "-j -t -e -f -c 20", "-j -r -c 10"]:
        both(options + t, "json")
    # Symbolized text: context lines, ids, addresses and LLVM's disassembly
    # with LLDB's comments.
    for options in ["-c 60", "-f -c 60", "-f -k -c 40 -s 10", "-k -e -t -c 30", "-i %d -c 25 -s 4" % (items // 2), "-a -f"]:
        both(options + t, "text")
    # -C: continues where the previous dump of the thread stopped.
    for sequence in [["-r -c 4", "-C -r -c 4", "-C -f -r -c 6", "-C -r -c 2"], ["-f -r -c 3 -i %d" % (items - 2), "-C -f -r -c 3", "-C -r -c 2"]]:
        for options in sequence:
            both(options + t, "exact")
    # -F: the same file.
    for options in ["-c 30 -f", "-j -c 10"]:
        lldb_file, shim_file = os.path.join(work, "lldb-%d.txt" % index), os.path.join(work, "shim-%d.txt" % index)
        run(builtin, "thread trace dump instructions %s -F %s%s" % (options, lldb_file, t))
        shim_out = run_shim("retrace dump instructions %s -F %s%s" % (options, shim_file, t))
        compare("instructions -F " + options, "", shim_out, "exact")
        compare("file of instructions -F " + options, open(lldb_file).read(), open(shim_file).read(), "json" if "-j" in options else "text")
    # Info: LLDB's layout and counts; the memory and time figures are
    # retrace's own, so those values are masked on both sides.
    masked = lambda text: re.sub(r"(memory usage[^:]*: |Decoding instructions\"?: |totalInBytes\": |avgPerItemInBytes\": )[^\n,]*", r"\1#", text)
    compare("info" + t, masked(run(builtin, "thread trace dump info" + t)), masked(run_shim("retrace dump info" + t)), "layout")
    compare("info -j" + t, masked(run(builtin, "thread trace dump info -j" + t)), masked(run_shim("retrace dump info -j" + t)), "layout")
    # Function calls: exact, text and JSON.
    for options in ["", "-j", "-J"]:
        lldb_text = run(builtin, "thread trace dump function-calls %s%s" % (options, t))
        shim_text = run_shim("retrace dump function-calls %s%s" % (options, t))
        compare("function-calls " + options, lldb_text, shim_text, "exact")

for line in mismatches:
    print("MISMATCH " + line)
print(json.dumps({"cases": cases, "mismatches": len(mismatches), "refused": refused}))
