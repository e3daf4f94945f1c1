"""retrace's commands for LLDB: time travel over `retrace-stub`.

Load it once per session, or from ~/.lldbinit:

    (lldb) command script import /path/to/retrace/lldb-scripts/retrace.py
    (lldb) help retrace

Post-mortem, without LLDB's intel-pt plugin: `retrace load FILE` opens an
LLDB trace bundle (trace.json: ours, or LLDB's `trace save`) and creates
its targets; `retrace dump instructions|function-calls|info` print what
LLDB's `thread trace dump` prints, with every option of LLDB 22's. They run on
the native bridge `retrace_native` (plugin/python), found in the build
directory next to this script (`cargo build --release -p retrace-python`
makes target/release/libretrace_native.so), or where RETRACE_NATIVE says.

Live, against any process under `retrace-stub`: `retrace start` traces
it (LLDB's `process trace start`, sent as the trace packets themselves),
`retrace dump …` at a stop dumps what it ran, `retrace save DIR` writes a
bundle that stock LLDB loads with `trace load`, `retrace stop` ends it.

Against a program run under `retrace-stub --record` (or a saved trace
under `retrace-stub --replay`), the `retrace` command adds what LLDB 22
lacks: reverse-stepi, reverse-step, reverse-next, reverse-finish,
reverse-continue, `goto` to any instruction of the history, and `where`.

How a reverse step works: the stub lists, newest first, the instructions
the thread executed in its current frame (`monitor history`: callees
skipped, their `ret`s and the call into the frame marked); the landing
instruction is chosen from that list with LLDB's own line tables, then
reached with `monitor goto ID TID --hold` and a real LLDB resume, so the
frames, variables and registers LLDB shows next are those of the new
position. The resume runs forwards (an armed goto lands whichever way it
runs): after a reverse continue LLDB 22 runs the continues inside its own
`thread step-over` backwards too, which would break the way back. The
meaning is the inverse of LLDB's forward stepping: `thread step-over` right after `retrace reverse-next` comes back
to where it started, likewise `thread step-in` after `reverse-step` and
`thread step-inst` after `reverse-stepi`; `reverse-finish` stops at the
call in the caller.

Every retrace command leaves LLDB's direction forward: after `retrace
reverse-continue` a plain `process continue` runs forwards. (After LLDB's
own `process continue -R` its base direction stays reverse: a plain
`process continue` goes on backwards, and so do the continues inside
`thread step-over` and `finish`; `process continue -F` runs forwards
again, and `retrace forward-direction` makes the direction forward
without moving. In an asynchronous debugger — lldb-dap — `retrace
reverse-continue` returns before its stop: there retrace-dap turns the
direction before the next forward resume.)
"""

import os
import sys

import lldb

# The shim's parts are the package beside this file (`retrace_shim`), with
# `retrace_lines`.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from retrace_shim.commands import COMMANDS  # noqa: E402
from retrace_shim.server import RetraceError  # noqa: E402,F401 (for scripts)

# LLDB finds a command's class by a dotted name from its session: the
# classes are this module's names too.
for _command in COMMANDS:
    globals()[_command.__name__] = _command


def __lldb_init_module(debugger, internal_dict):
    interpreter = debugger.GetCommandInterpreter()
    result = lldb.SBCommandReturnObject()
    interpreter.HandleCommand('command container add -h "Time travel over retrace-stub, and traces without the intel-pt plugin." retrace', result)
    interpreter.HandleCommand('command container add -h "Dump the current trace (as LLDB\'s thread trace dump)." retrace dump', result)
    for command in COMMANDS:
        interpreter.HandleCommand(
            "command script add -o -s %s -c %s.%s retrace %s" % (command.synchronicity, __name__, command.__name__, command.name), result
        )
        if not result.Succeeded():
            print("retrace: could not add `retrace %s`: %s" % (command.name, result.GetError()))
