"""What the shim's LLDB tests share: a debugger whose built-in trace
commands (`trace …`, `thread trace …`, `process trace …`) fail while the
shim runs, so that the shim cannot lean on them, and the list of those it
tried (`refused`, which must stay empty)."""

import re

import lldb

refused = []
_original = lldb.SBCommandInterpreter.HandleCommand


def _guarded(self, command, *args):
    if re.match(r"\s*(trace\b|thread\s+trace\b|process\s+trace\b)", command):
        refused.append(command)
        result = args[-1] if args and isinstance(args[-1], lldb.SBCommandReturnObject) else None
        if result is not None:
            result.SetError("refused in this test: the shim must not call `%s`" % command)
        return lldb.eReturnStatusFailed
    return _original(self, command, *args)


def run(debugger, command):
    """The command's output and error text."""
    result = lldb.SBCommandReturnObject()
    debugger.GetCommandInterpreter().HandleCommand(command, result)
    return (result.GetOutput() or "") + (result.GetError() or "")


def run_guarded(debugger, command):
    """`run` with the built-in trace commands failing meanwhile."""
    lldb.SBCommandInterpreter.HandleCommand = _guarded
    try:
        return run(debugger, command)
    finally:
        lldb.SBCommandInterpreter.HandleCommand = _original
