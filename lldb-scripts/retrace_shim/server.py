"""Talking to retrace-stub through LLDB: `monitor` commands (the history, the
recording's status, `goto`), LLDB's trace packets, the selected thread and
the live process."""

import json
import re

import lldb


class RetraceError(Exception):
    """A command cannot do what was asked; the text says why."""


def monitor(debugger, command):
    """The text the stub answers to `monitor COMMAND`; its error as RetraceError."""
    result = lldb.SBCommandReturnObject()
    debugger.GetCommandInterpreter().HandleCommand("process plugin packet monitor " + command, result)
    if not result.Succeeded():
        raise RetraceError((result.GetError() or "").strip() or "the monitor command failed (is this process under retrace-stub?)")
    lines = []
    for line in (result.GetOutput() or "").splitlines():
        # LLDB echoes the packet and the final reply after the text.
        if line.startswith("  packet: ") or line.startswith("response: "):
            continue
        lines.append(line)
    text = "\n".join(lines)
    if text.startswith("error: ") or text.startswith("unknown monitor command"):
        raise RetraceError(text[len("error: "):] if text.startswith("error: ") else text)
    return text


def status(debugger):
    """`monitor record status --json`, parsed."""
    text = monitor(debugger, "record status --json")
    try:
        return json.loads(text.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise RetraceError("this process has no history: start it under `retrace-stub --record` or `--replay` (%s)" % text.strip())


# Lines `monitor history` gives per request: few at first (a reverse step
# mostly needs few), more for each further request.
HISTORY_FIRST_BATCH = 64


HISTORY_BATCH = 4096


class Step:
    """An instruction of `monitor history`: its id, address and frame depth;
    for a callee, the latest of its instructions at a stop address asked
    about, (id, pc), or None."""

    __slots__ = ("id", "pc", "depth", "stop")

    def __init__(self, id, pc, depth, stop=None):
        self.id, self.pc, self.depth, self.stop = id, pc, depth, stop


def history(debugger, tid, before=None, within=(), stops=()):
    """Thread `tid`'s instructions before instruction `before` (default: the
    position) in that frame, newest first, fetched as they are read. With
    `within` (address ranges), the run of the frame's instructions inside
    them just before `before` comes as its earliest instruction only (the
    stub passes over it: a long loop on one line is one answer). With
    `stops` (addresses), each callee says the latest of its instructions
    at one of them."""
    batch = HISTORY_FIRST_BATCH
    while True:
        command = "history %d --max %d" % (tid, batch)
        if before is not None:
            command += " --before %d" % before
        if within:
            command += " --within " + ",".join("%x-%x" % r for r in within)
            within = ()
        if stops:
            command += " --stops " + ",".join("%x" % a for a in sorted(stops))
        lines = monitor(debugger, command).splitlines()
        steps = []
        for line in lines[1:]:
            fields = line.split()
            if len(fields) == 3:
                steps.append(Step(int(fields[0]), int(fields[1], 16), int(fields[2])))
            elif len(fields) == 6 and fields[3] == "stop":
                steps.append(Step(int(fields[0]), int(fields[1], 16), int(fields[2]), (int(fields[4]), int(fields[5], 16))))
        if len(steps) < batch or steps[-1].depth < 0:
            for step in steps:
                yield step
            return
        # The next batch goes on from the oldest instruction of the frame
        # listed (a list starts at a position of the frame looked from).
        oldest = max(i for i, s in enumerate(steps) if s.depth == 0)
        for step in steps[: oldest + 1]:
            yield step
        before = steps[oldest].id
        batch = HISTORY_BATCH


def selected_thread(debugger, tid=None):
    """The selected thread, after selecting thread `tid` if given."""
    process = debugger.GetSelectedTarget().GetProcess()
    if not process.IsValid() or process.GetState() != lldb.eStateStopped:
        raise RetraceError("no stopped process: connect to retrace-stub --record or --replay first (gdb-remote PORT)")
    if tid is not None and not process.SetSelectedThreadByID(tid):
        raise RetraceError("the process has no thread %d" % tid)
    return process.GetSelectedThread()


def live_process(debugger):
    """The selected target's process if it is a live one stopped under a
    gdb-remote server, else None."""
    process = debugger.GetSelectedTarget().GetProcess()
    if process.IsValid() and process.GetPluginName() == "gdb-remote" and process.GetState() == lldb.eStateStopped:
        return process
    return None


def trace_packet(debugger, name, request):
    """Sends LLDB's trace packet `name` (jLLDBTraceStart…) with the JSON
    `request`, escaped as LLDB escapes it, through `process plugin packet
    send`; returns the reply, an error reply's text as RetraceError."""
    body = json.dumps(request, separators=(",", ":"), sort_keys=True)
    if any(c in body for c in "#$*'"):
        raise RetraceError("cannot send %s with %r" % (name, body))
    result = lldb.SBCommandReturnObject()
    debugger.GetCommandInterpreter().HandleCommand("process plugin packet send '%s:%s'" % (name, body.replace("}", "}]")), result)
    if not result.Succeeded():
        raise RetraceError((result.GetError() or "").strip() or "cannot send %s (is the process under retrace-stub?)" % name)
    replies = [line[len("response: "):] for line in (result.GetOutput() or "").splitlines() if line.startswith("response: ")]
    reply = replies[-1].strip() if replies else ""
    if not reply:
        raise RetraceError("the server does not know %s: is this process under retrace-stub?" % name)
    if re.match(r"E[0-9a-fA-F]{2}(;|$)", reply):
        try:
            message = bytes.fromhex(reply[4:]).decode("utf-8", "replace")
        except ValueError:
            message = ""
        raise RetraceError(message or "the server refused %s (%s)" % (name, reply))
    return reply
