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

import argparse
import atexit
import glob
import importlib.machinery
import importlib.util
import json
import os
import re
import shlex
import shutil
import sys
import tempfile

import lldb

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import retrace_lines  # noqa: E402 (beside this file)

# Lines `monitor history` gives per request: few at first (a reverse step
# mostly needs few), more for each further request.
HISTORY_FIRST_BATCH = 64
HISTORY_BATCH = 4096



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


def block_ranges(block, target):
    """The address ranges of an LLDB block, as a key to it."""
    return tuple(
        (block.GetRangeStartAddress(i).GetLoadAddress(target), block.GetRangeEndAddress(i).GetLoadAddress(target)) for i in range(block.GetNumRanges())
    )


class Frames:
    """Frames at an address as GDB 13 sees them: the function and the
    blocks inlined into it (innermost first), and which of those blocks
    GDB hides at the address because it begins there (`skip_inline_frames`:
    at a block's entry, or where the address before is outside the block,
    the frame shown is the caller's, at the call site)."""

    def __init__(self, target):
        self.target = target
        self.chains = {}
        self.functions = {}

    def chain(self, pc):
        """[(key, entry, end, call site (file, line))] of the inlined blocks
        holding `pc`, innermost first (`key`: the block's ranges)."""
        if pc not in self.chains:
            chain = []
            block = self.target.ResolveLoadAddress(pc).GetBlock().GetContainingInlinedBlock()
            while block.IsValid():
                ranges = block_ranges(block, self.target)
                if ranges:
                    call = (os.path.normpath(block.GetInlinedCallSiteFile().fullpath or ""), block.GetInlinedCallSiteLine())
                    chain.append((ranges, ranges[0][0], max(end for _, end in ranges), call))
                block = block.GetParent().GetContainingInlinedBlock()
            self.chains[pc] = chain
        return self.chains[pc]

    def skipped(self, pc):
        """How many of the innermost inlined blocks at `pc` GDB hides."""
        count = 0
        before = {key for key, _, _, _ in self.chain(pc - 1)}
        for key, entry, _, _ in self.chain(pc):
            if entry == pc or key not in before:
                count += 1
            else:
                break
        return count

    def trampoline(self, pc):
        """Whether `pc` is in a PLT stub (a trampoline to a shared
        library's function), which GDB's reverse steps pass through."""
        symbol = self.target.ResolveLoadAddress(pc).GetSymbol()
        return symbol.IsValid() and symbol.GetType() == lldb.eSymbolTypeTrampoline

    def function(self, pc):
        """(start, end) of the function holding `pc` (LLDB's debug-info
        function, else its symbol), or None."""
        if pc not in self.functions:
            address = self.target.ResolveLoadAddress(pc)
            context = address.GetSymbolContext(lldb.eSymbolContextFunction | lldb.eSymbolContextSymbol)
            span = None
            for whole in (context.GetFunction(), context.GetSymbol()):
                if whole.IsValid():
                    start = whole.GetStartAddress().GetLoadAddress(self.target)
                    end = whole.GetEndAddress().GetLoadAddress(self.target)
                    if start != lldb.LLDB_INVALID_ADDRESS:
                        span = (start, end)
                        break
            self.functions[pc] = span
        return self.functions[pc]


class Lines:
    """GDB's `find_pc_line` for any address of the target (load
    addresses), from each module's line table read as GDB reads it."""

    def __init__(self, target):
        self.target = target
        self.cache = {}

    def __call__(self, pc):
        if pc not in self.cache:
            address = self.target.ResolveLoadAddress(pc)
            module = address.GetModule()
            found = retrace_lines.Line(pc, None, None, 0, False)
            if module.IsValid() and address.GetFileAddress() != lldb.LLDB_INVALID_ADDRESS:
                slide = pc - address.GetFileAddress()
                for spec in (module.GetFileSpec(), module.GetSymbolFileSpec()):
                    table = retrace_lines.table_for(spec.fullpath) if spec.IsValid() and spec.fullpath else None
                    if table:
                        line = table.find_pc_line(address.GetFileAddress())
                        if line.line:
                            line.pc += slide
                            line.end = line.end + slide if line.end else None
                            line.file = os.path.normpath(line.file)
                        else:
                            line.pc = pc
                        found = line
                        break
            self.cache[pc] = found
        return self.cache[pc]


class Landing(Exception):
    """Where a reverse step lands: an instruction id (`None`: the history's
    beginning), and how many inlined frames GDB shows below the function
    there (`depth`)."""

    def __init__(self, id, depth=None):
        Exception.__init__(self, id)
        self.id, self.depth = id, depth


class Frame:
    """A frame as GDB tells frames apart: the real frame (its depth from
    where the step started: 1 a callee, -1 the caller) and the inlined
    block shown (None: the function itself)."""

    __slots__ = ("real", "key", "shown")

    def __init__(self, real, key, shown):
        self.real, self.key, self.shown = real, key, shown

    def __eq__(self, other):
        return self.real == other.real and self.key == other.key


class ReverseStepper:
    """GDB 13's reverse `next`, `step` and `finish` (infrun's
    `process_event_stop_test` going backwards), run over the stub's history
    of the thread (`monitor history`: a frame's instructions with its
    callees' returns and the call into it) instead of single steps: where
    GDB on the same recording lands, this lands, inlined frames included."""

    def __init__(self, debugger, thread):
        self.debugger = debugger
        self.tid = thread.GetThreadID()
        target = thread.GetProcess().GetTarget()
        self.frames = Frames(target)
        self.lines = Lines(target)
        self.breakpoints = set()
        for breakpoint in target.breakpoint_iter():
            if breakpoint.IsEnabled():
                for location in breakpoint:
                    if location.IsEnabled():
                        self.breakpoints.add(location.GetLoadAddress())
        # The frame LLDB shows (the selected one, where it is an inlined
        # frame of the innermost concrete one: as GDB, which has no other):
        # how many inlined blocks it hides at the pc.
        frame = thread.GetFrameAtIndex(0)
        selected = thread.GetSelectedFrame()
        if selected.GetFrameID() != frame.GetFrameID() and all(thread.GetFrameAtIndex(i).IsInlined() for i in range(selected.GetFrameID())):
            frame = selected
        self.pc = frame.GetPC()
        # No frame above the function's own (GDB's outermost frame).
        concrete = next((i for i in range(frame.GetFrameID(), thread.GetNumFrames()) if not thread.GetFrameAtIndex(i).IsInlined()), None)
        self.outermost = concrete is None or concrete == thread.GetNumFrames() - 1
        chain = self.frames.chain(self.pc)
        shown = frame.GetBlock().GetContainingInlinedBlock() if frame.IsInlined() else None
        hidden = len(chain)
        if shown is not None and shown.IsValid() and shown.GetNumRanges():
            hidden = next((i for i, (key, _, _, _) in enumerate(chain) if key == block_ranges(shown, target)), 0)
        self.hidden = hidden

    def frame_at(self, real, pc, hidden=None):
        """GDB's frame at `pc` in real frame `real` (the inlined blocks
        starting there hidden, unless `hidden` says how many)."""
        chain = self.frames.chain(pc)
        skip = self.frames.skipped(pc) if hidden is None else hidden
        key = chain[skip][0] if skip < len(chain) else None
        return Frame(real, key, len(chain) - skip)

    def stepped_in_from(self, frame, pc, step_frame):
        """GDB's `stepped_in_from`: `step_frame` is a caller of the inlined
        frame `frame` (at `pc`) in the same real frame."""
        if frame.real != step_frame.real or frame.key is None:
            return False
        keys = [key for key, _, _, _ in self.frames.chain(pc)]
        above = keys[keys.index(frame.key) + 1:] + [None]
        return step_frame.key in above

    def events(self):
        """The instructions before the position, newest first: (id, pc,
        real frame, how it was reached: 'same', 'callee' (a callee's
        return, met going back), 'caller' (the call into the frame))."""
        real = 0
        stops = self.breakpoints
        steps = iter(history(self.debugger, self.tid, stops=stops))
        while True:
            step = next(steps, None)
            if step is None:
                return
            if step.depth > 0:
                entered = yield (step.id, step.pc, real + 1, "callee", step.stop)
                if entered:
                    real += 1
                    steps = iter(history(self.debugger, self.tid, step.id, stops=stops))
            elif step.depth < 0:
                real -= 1
                yield (step.id, step.pc, real, "caller", None)
                steps = iter(history(self.debugger, self.tid, step.id, stops=stops))
            else:
                yield (step.id, step.pc, real, "same", None)

    def run(self, kind):
        """Where `kind` ('next', 'step', 'finish') lands: a Landing."""
        try:
            self.walk(kind)
        except Landing as landing:
            return landing
        return Landing(None)

    def walk(self, kind):
        lines, frames = self.lines, self.frames
        pc, hidden = self.pc, self.hidden
        frame = self.frame_at(0, pc, hidden)
        over_all = kind != "step"
        if kind == "finish":
            if frame.key is None:
                self.finish_function(frame)
                return
            # Out of an inlined function: a step over all in its caller,
            # with an empty range and no line.
            step_frame = self.frame_at(0, pc, hidden + 1)
            step_range = (pc, pc)
            current = (None, 0)
        else:
            if kind == "step" and hidden > 0:
                # GDB's step at a hidden inlined function goes into it,
                # without running.
                position = status(self.debugger)["position"]
                raise Landing(position["id"], len(frames.chain(pc)) - hidden + 1)
            here = lines(pc)
            step_range = (here.pc, here.end or 0)
            if hidden > 0:
                block_end = frames.chain(pc)[hidden - 1][2]
                step_range = (step_range[0], min(step_range[1], block_end))
            if not here.line:
                step_range = frames.function(pc) or (pc, pc + 1)
            step_frame = frame
            current = frames.chain(pc)[hidden - 1][3] if hidden > 0 else (here.file, here.line)
        generator = self.events()
        send = None
        while True:
            try:
                event = generator.send(send)
            except StopIteration:
                return
            send = None
            id, pc, real, how, stop = event
            if how == "callee":
                # Stepped back into a callee through its return.
                function = frames.function(pc)
                if over_all or not function or not lines(function[0]).line:
                    # Over it, back to its entry and on to the call; a
                    # breakpoint it ran stops that.
                    if stop is not None:
                        raise Landing(stop[0], self.frame_at(real, stop[1]).shown)
                    continue
                sal = lines(pc)
                if sal.pc == pc:
                    raise Landing(id, self.frame_at(real, pc).shown)
                step_range = (sal.pc, sal.end or 0)
                send = True
                continue
            if pc in self.breakpoints:
                raise Landing(id, self.frame_at(real, pc).shown)
            if frames.trampoline(pc):
                continue
            here = self.frame_at(real, pc)
            if real > step_frame.real:
                # Inside a callee being stepped into backwards.
                sal = lines(pc)
                if sal.pc == pc:
                    raise Landing(id, here.shown)
                step_range = (sal.pc, sal.end or 0)
                continue
            if step_range[0] <= pc < step_range[1] and here == step_frame:
                function = frames.function(pc)
                if pc == step_range[0] and not (function and function[0] == pc):
                    raise Landing(id, here.shown)
                continue
            sal = lines(pc)
            if not sal.line:
                raise Landing(id, here.shown)
            skipped = frames.skipped(pc)
            if here == step_frame and skipped > 0:
                chain = frames.chain(pc)
                call = chain[skipped - 1][3]
                if over_all:
                    if retrace_lines.same_line(call, current):
                        continue
                    raise Landing(id, here.shown)
                if retrace_lines.same_line(call, current):
                    raise Landing(id, here.shown + 1)
                raise Landing(id, here.shown)
            if here.key is not None and here != step_frame and self.stepped_in_from(here, pc, step_frame):
                if over_all:
                    continue
                raise Landing(id, here.shown)
            refresh = True
            line = sal.line
            if pc == sal.pc and not retrace_lines.same_line(current, (sal.file, sal.line)):
                if sal.is_stmt:
                    raise Landing(id, here.shown)
                if here == step_frame:
                    refresh = False
                else:
                    line = 0
            step_range = (sal.pc, sal.end or 0)
            if refresh:
                step_frame = here
                current = (sal.file, line)

    def finish_function(self, frame):
        """GDB's `finish_backward`: back to where the function's first line
        starts (in any frame: a recursive call's entry stops it too), then
        one instruction more, to the call; a breakpoint on the way stops
        it. (Out of `main`, GDB refuses: it shows no frame past main.)"""
        function = self.frames.function(self.pc)
        symbol = self.frames.target.ResolveLoadAddress(self.pc).GetSymbolContext(lldb.eSymbolContextFunction).GetFunction()
        if (symbol.IsValid() and symbol.GetName() == "main") or self.outermost:
            raise RetraceError('"finish" not meaningful in the outermost frame.')
        entry = self.lines(function[0]).pc if function else None
        entry_hit = entry == self.pc
        generator = self.events()
        while True:
            try:
                id, pc, real, how, stop = next(generator)
            except StopIteration:
                return
            if entry_hit and not self.frames.trampoline(pc):
                # The one more step (a single step: no inlined frame hidden;
                # a PLT stub passed through).
                raise Landing(id, len(self.frames.chain(pc)))
            if how == "callee":
                if stop is not None:
                    raise Landing(stop[0], self.frame_at(real, stop[1]).shown)
                # A recursive call passes the entry too.
                entry_hit = function is not None and self.frames.function(pc) == function
                continue
            if pc in self.breakpoints:
                raise Landing(id, self.frame_at(real, pc).shown)
            if how == "caller" or pc == entry:
                entry_hit = True
                if how == "caller":
                    raise Landing(id, len(self.frames.chain(pc)))


def reverse_line(debugger, thread, enter_callees):
    """reverse-next (`enter_callees` False) or reverse-step: the Landing."""
    return ReverseStepper(debugger, thread).run("step" if enter_callees else "next")


def reverse_finish(debugger, thread):
    """reverse-finish: the Landing."""
    return ReverseStepper(debugger, thread).run("finish")


def reverse_stepi(debugger, thread):
    """The thread's previous instruction, or None (the beginning)."""
    for step in history(debugger, thread.GetThreadID()):
        return step.id
    return None


def go(debugger, result, where, tid=None):
    """Arms `monitor goto WHERE [TID] --hold` and resumes LLDB forwards to it.
    Forwards, so that LLDB's base direction stays forward and its own
    stepping afterwards runs forwards. `--hold`: LLDB may first step off a
    breakpoint at the current PC; that step lands without using the
    arming up, and the continue after it lands again."""
    monitor(debugger, "goto %s%s --hold" % (where, "" if tid is None else " %d" % tid))
    debugger.GetCommandInterpreter().HandleCommand("process continue -F", result)


def turn_forward(debugger):
    """Makes LLDB's base direction forward without moving: a forward
    resume armed to the position it stands at (LLDB then shows `stop
    reason = trace`, or the history's boundary again). Returns the
    selected thread."""
    thread = selected_thread(debugger)
    position = status(debugger)["position"]
    where = "end" if position.get("present") or position.get("id") is None else "%d %d" % (position["id"], position["tid"])
    target = debugger.GetSelectedTarget()
    enabled = [b for b in target.breakpoint_iter() if b.IsEnabled()]
    for breakpoint in enabled:
        breakpoint.SetEnabled(False)
    try:
        monitor(debugger, "goto %s --hold" % where)
        resumed = lldb.SBCommandReturnObject()
        debugger.GetCommandInterpreter().HandleCommand("process continue -F", resumed)
        if not resumed.Succeeded():
            raise RetraceError((resumed.GetError() or "process continue -F failed").strip())
    finally:
        for breakpoint in enabled:
            breakpoint.SetEnabled(True)
    after = status(debugger)["position"]
    if (after.get("id"), after.get("tid"), after.get("present")) != (position.get("id"), position.get("tid"), position.get("present")):
        raise RetraceError("the thread moved from %s to %s" % (position, after))
    return thread


def selected_thread(debugger, tid=None):
    """The selected thread, after selecting thread `tid` if given."""
    process = debugger.GetSelectedTarget().GetProcess()
    if not process.IsValid() or process.GetState() != lldb.eStateStopped:
        raise RetraceError("no stopped process: connect to retrace-stub --record or --replay first (gdb-remote PORT)")
    if tid is not None and not process.SetSelectedThreadByID(tid):
        raise RetraceError("the process has no thread %d" % tid)
    return process.GetSelectedThread()


def take_tid(args, usage):
    """`args` without `--tid TID` (or `-t TID`), and TID (None without)."""
    rest, tid = [], None
    words = iter(args)
    for word in words:
        if word in ("--tid", "-t"):
            value = next(words, None)
            if value is None or not value.isdigit():
                raise RetraceError("--tid takes a thread id; usage: retrace " + usage)
            tid = int(value)
        else:
            rest.append(word)
    return rest, tid


def native():
    """The `retrace_native` module: importable as is, or the file
    RETRACE_NATIVE names, or the newest libretrace_native.so in this
    checkout's target/{release,debug}/."""
    try:
        import retrace_native

        return retrace_native
    except ImportError:
        pass
    candidates = [os.environ["RETRACE_NATIVE"]] if os.environ.get("RETRACE_NATIVE") else []
    if not candidates:
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        built = glob.glob(os.path.join(root, "target", "*", "libretrace_native.so"))
        candidates = sorted(built, key=os.path.getmtime, reverse=True)
    for path in candidates:
        if os.path.exists(path):
            loader = importlib.machinery.ExtensionFileLoader("retrace_native", path)
            spec = importlib.util.spec_from_file_location("retrace_native", path, loader=loader)
            module = importlib.util.module_from_spec(spec)
            loader.exec_module(module)
            return module
    raise RetraceError(
        "the native bridge is not built: run `cargo build --release -p retrace-python` in the retrace checkout, "
        "or set RETRACE_NATIVE to the path of libretrace_native.so"
    )


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


def size_in_bytes(text):
    """A size as LLDB's trace commands read it: a number with an optional
    unit b, k/kb/kib, m/mb/mib (any case)."""
    match = re.fullmatch(r"\s*(\d+)\s*(b|k|kb|kib|m|mb|mib)?\s*", text, re.IGNORECASE)
    if not match:
        raise argparse.ArgumentTypeError("invalid bytes expression for '%s'" % text)
    unit = (match.group(2) or "b").lower()
    return int(match.group(1)) * {"b": 1, "k": 1024, "kb": 1024, "kib": 1024, "m": 1 << 20, "mb": 1 << 20, "mib": 1 << 20}[unit]


def cpu_info(text):
    """`cpuInfo` of a bundle from /proc/cpuinfo text, read as LLDB reads it
    (the first vendor_id, cpu family, model and stepping lines)."""
    info = {}
    keys = {"vendor_id": "vendor", "cpu family": "family", "model": "model", "stepping": "stepping"}
    for line in text.split("\n"):
        columns = line.split(":")
        if len(columns) < 2:
            continue
        key = keys.get(columns[0].strip())
        if key and key not in info:
            value = columns[1].strip()
            info[key] = value if key == "vendor" else int(value)
    if len(info) != 4:
        raise RetraceError("the server's cpuinfo lacks %s" % ", ".join(sorted(set(keys.values()) - set(info))))
    if info["vendor"] != "GenuineIntel":
        info["vendor"] = "Unknown"
    return info


def live_process(debugger):
    """The selected target's process if it is a live one stopped under a
    gdb-remote server, else None."""
    process = debugger.GetSelectedTarget().GetProcess()
    if process.IsValid() and process.GetPluginName() == "gdb-remote" and process.GetState() == lldb.eStateStopped:
        return process
    return None


def save_live_trace(debugger, directory, copy_modules):
    """Writes the selected (live) process's trace as an LLDB bundle in
    `directory`, as LLDB's `trace save` does: trace.json, each traced
    thread's Intel PT bytes in threads/TID.intelpt_trace, and (with
    `copy_modules`) copies of the modules in modules/. Returns the path of
    trace.json."""
    process = live_process(debugger)
    if process is None:
        raise RetraceError("no stopped live process: connect to retrace-stub (gdb-remote PORT) and stop it first")
    target = process.GetTarget()
    state = json.loads(trace_packet(debugger, "jLLDBTraceGetState", {"type": "intel-pt"}))
    traced = {t["tid"] for t in state.get("tracedThreads") or []}
    if not traced:
        raise RetraceError("the process is not traced: `retrace start` first")
    # LLDB's thread order, so that the bundle's thread #N is LLDB's.
    order = [t.GetThreadID() for t in process if t.GetThreadID() in traced]
    order += sorted(traced - set(order))
    os.makedirs(os.path.join(directory, "threads"), exist_ok=True)
    threads = []
    for tid in order:
        data = monitor(debugger, "trace data %d" % tid).strip()
        try:
            data = bytes.fromhex(data)
        except ValueError:
            raise RetraceError("unreadable trace data of thread %d: %s" % (tid, data[:200]))
        name = "threads/%d.intelpt_trace" % tid
        with open(os.path.join(directory, name), "wb") as out:
            out.write(data)
        threads.append({"iptTrace": name, "tid": tid})
    modules = []
    for module in target.module_iter():
        path = module.GetFileSpec().fullpath
        platform = module.GetPlatformFileSpec().fullpath or path
        load = module.GetObjectFileHeaderAddress().GetLoadAddress(target)
        if not path or not os.path.isabs(path) or not os.path.isfile(path) or load == lldb.LLDB_INVALID_ADDRESS:
            continue  # [vdso] and other modules only in memory, as LLDB's trace save skips them
        entry = {"systemPath": platform, "loadAddress": "0x%x" % load}
        if copy_modules:
            copy = os.path.join("modules", platform.lstrip("/"))
            os.makedirs(os.path.dirname(os.path.join(directory, copy)), exist_ok=True)
            shutil.copyfile(path, os.path.join(directory, copy))
            entry["file"] = copy
        else:
            entry["file"] = path
        uuid = module.GetUUIDString()
        if uuid:
            entry["uuid"] = uuid
        modules.append(entry)
    bundle = {
        "cpuInfo": cpu_info(monitor(debugger, "trace cpuinfo")),
        "cpus": None,
        "kernel": None,
        "processes": [{"modules": modules, "pid": process.GetProcessID(), "threads": threads, "triple": target.GetTriple()}],
        "tscPerfZeroConversion": state.get("tscPerfZeroConversion"),
        "type": "intel-pt",
    }
    path = os.path.join(directory, "trace.json")
    with open(path, "w") as out:
        json.dump(bundle, out, indent=2, sort_keys=True)
        out.write("\n")
    return path


class LoadedTrace:
    """The shim's current trace: a bundle opened by `retrace load`, its
    processes and the targets made for them, and where each thread's last
    dump stopped (for `-C`)."""

    current = None

    def __init__(self, path, bundle, processes, targets):
        self.path = path
        self.bundle = bundle
        self.processes = processes
        self.targets = targets
        self.last_ids = {}

    def thread(self, index=None, tid=None):
        """The thread (dict of `tid`, `index`, `position`) by LLDB's index in
        the first process, or by tid; default thread #1."""
        threads = [t for p in self.processes for t in p["threads"]]
        if tid is not None:
            found = [t for t in threads if t["tid"] == tid]
            if not found:
                raise RetraceError("no thread with tid %d in %s" % (tid, self.path))
            return found[0]
        index = 1 if index is None else index
        found = [t for t in self.processes[0]["threads"] if t["index"] == index] if self.processes else []
        if not found:
            raise RetraceError('no thread with index: "%d"' % index)
        return found[0]


class LiveTrace(LoadedTrace):
    """The trace of the live process at its current stop: fetched from the
    server once per stop (as LLDB refreshes its own), saved to a temporary
    bundle that names the modules where they are, and decoded from there.
    Threads go by LLDB's index of the live thread."""

    current = None

    def __init__(self, debugger, process):
        self.key = (process.GetProcessID(), process.GetStopID())
        self.process = process
        self.directory = tempfile.mkdtemp(prefix="retrace-live-")
        atexit.register(shutil.rmtree, self.directory, True)
        path = save_live_trace(debugger, self.directory, False)
        try:
            bundle = native().Bundle(path)
        except ValueError as error:
            raise RetraceError(str(error))
        LoadedTrace.__init__(self, path, bundle, bundle.processes(), [process.GetTarget()])

    def close(self):
        shutil.rmtree(self.directory, ignore_errors=True)

    def thread(self, index=None, tid=None):
        if tid is None:
            index = 1 if index is None else index
            thread = self.process.GetThreadByIndexID(index)
            if not thread.IsValid():
                raise RetraceError('no thread with index: "%d"' % index)
            tid = thread.GetThreadID()
        for thread in (t for p in self.processes for t in p["threads"]):
            if thread["tid"] == tid:
                return thread
        raise RetraceError("thread %d is not traced: `retrace start --tid %d` (or `retrace start` for the process) first" % (tid, tid))


def current_trace(debugger=None):
    """What `retrace dump` reads: the trace loaded for the selected target,
    else the live process's trace at this stop, else the loaded trace."""
    loaded = LoadedTrace.current
    if debugger is not None:
        target = debugger.GetSelectedTarget()
        process = live_process(debugger)
        if process is not None and not (loaded and target in loaded.targets):
            key = (process.GetProcessID(), process.GetStopID())
            live = LiveTrace.current
            if live is None or live.key != key:
                if live is not None:
                    live.close()
                    LiveTrace.current = None
                LiveTrace.current = LiveTrace(debugger, process)
            return LiveTrace.current
    if loaded is None:
        raise RetraceError("no trace: `retrace load DIR/trace.json`, or `retrace start` on a process under retrace-stub")
    return loaded


def load_bundle(debugger, path):
    """Opens the bundle at `path` (a trace.json, or its directory) and
    creates one target per process with its modules at their load
    addresses, the first one selected."""
    if os.path.isdir(path):
        path = os.path.join(path, "trace.json")
    try:
        bundle = native().Bundle(path)
    except ValueError as error:
        raise RetraceError(str(error))
    processes = bundle.processes()
    targets = []
    for process in processes:
        error = lldb.SBError()
        target = debugger.CreateTarget("", process["triple"] or "", None, False, error)
        if not target.IsValid():
            raise RetraceError("cannot create a target: %s" % error.GetCString())
        for module in process["modules"]:
            added = target.AddModule(module["path"], process["triple"] or "", module["uuid"])
            if not added.IsValid():
                continue
            header = added.GetObjectFileHeaderAddress().GetFileAddress()
            slide = module["loadAddress"] - (header if header != lldb.LLDB_INVALID_ADDRESS else 0)
            target.SetModuleLoadAddress(added, slide)
        targets.append(target)
    if targets:
        debugger.SetSelectedTarget(targets[0])
    LoadedTrace.current = LoadedTrace(path, bundle, processes, targets)
    return LoadedTrace.current


class Arguments(argparse.ArgumentParser):
    """argparse that reports instead of exiting LLDB."""

    def error(self, message):
        raise RetraceError(message)


def item_id(text):
    """An item id as LLDB reads it: decimal, or hex after 0x."""
    try:
        return int(text, 16) if text.lower().startswith("0x") else int(text)
    except ValueError:
        raise argparse.ArgumentTypeError("invalid item id: %s" % text)


class Command:
    """A `retrace` subcommand."""

    name = None
    short = None
    usage = None
    # How LLDB runs the command: `synchronous` waits for any resume it
    # makes to stop; `current` follows the debugger, so that in lldb-dap
    # (asynchronous) a resume is seen by lldb-dap itself, which then sends
    # its `stopped` event and shows the new position's frames and
    # variables, as after its own steps.
    synchronicity = "synchronous"

    def __init__(self, debugger, internal_dict):
        pass

    def get_short_help(self):
        return self.short

    def get_long_help(self):
        return self.short + "\n\nSyntax: retrace " + self.usage + "\n\n" + (self.__doc__ or "")

    def __call__(self, debugger, command, exe_ctx, result):
        try:
            try:
                words = shlex.split(command)
            except ValueError as error:  # an unclosed quote
                raise RetraceError("cannot read the arguments: %s" % error)
            self.run(debugger, words, result)
        except RetraceError as error:
            result.SetError("retrace %s: %s" % (self.name, error))


class ReverseMove(Command):
    """Moves the selected thread back; LLDB then shows where it stands."""

    synchronicity = "current"

    def landing(self, debugger, thread):
        raise NotImplementedError

    def run(self, debugger, args, result):
        args, tid = take_tid(args, self.usage)
        if args:
            raise RetraceError("takes no arguments but --tid; usage: retrace " + self.usage)
        thread = selected_thread(debugger, tid)
        landing = self.landing(debugger, thread)
        if landing.id is None:
            go(debugger, result, "begin")
        else:
            go(debugger, result, str(landing.id), thread.GetThreadID())
        if landing.depth is not None and thread.GetProcess().GetState() == lldb.eStateStopped:
            # (Where the debugger waits for the stop: in lldb-dap, which does
            # not, LLDB's own choice of frame stays.)
            show_inlined(debugger, thread, landing.depth, result)


def show_inlined(debugger, thread, depth, result):
    """Makes LLDB show `depth` inlined frames below the function, as GDB
    does at the same address: LLDB's own choice hides fewer or more of the
    inlined functions starting there. Further in, its `thread step-in`
    enters one without running; further out, the frame is selected."""
    def inlined():
        return next((i for i in range(thread.GetNumFrames()) if not thread.GetFrameAtIndex(i).IsInlined()), 0)

    pc = thread.GetFrameAtIndex(0).GetPC()
    for _ in range(depth - inlined()):
        debugger.GetCommandInterpreter().HandleCommand("thread step-in", result)
        if thread.GetFrameAtIndex(0).GetPC() != pc:
            raise RetraceError("stepping into the inlined function at 0x%x moved the thread" % pc)
    if inlined() > depth:
        thread.SetSelectedFrame(inlined() - depth)


class ReverseStepi(ReverseMove):
    """Un-executes the selected thread's last instruction. `thread step-inst`
    from there comes back."""

    name, usage = "reverse-stepi", "reverse-stepi [--tid TID]"
    short = "Step back one instruction."

    def landing(self, debugger, thread):
        return Landing(reverse_stepi(debugger, thread))


class ReverseNext(ReverseMove):
    """Goes back to the start of the previous source line of the current
    function (of the current line, from its middle), stepping back over
    calls and inlined functions, as GDB's reverse-next: its line table
    (statements), its inlined frames. Before the function's first line it
    goes to the start of the caller's line."""

    name, usage = "reverse-next", "reverse-next [--tid TID]"
    short = "Step back one source line, over calls."

    def landing(self, debugger, thread):
        return reverse_line(debugger, thread, False)


class ReverseStep(ReverseMove):
    """Goes back to the start of the previous source line, entering a
    function with line information that returned in between (at the start
    of its last line's row) and inlined functions, as GDB's reverse-step."""

    name, usage = "reverse-step", "reverse-step [--tid TID]"
    short = "Step back one source line, into calls."
    # Waits for the landing, to show the inlined frame GDB shows there.
    synchronicity = "synchronous"

    def landing(self, debugger, thread):
        return reverse_line(debugger, thread, True)


class ReverseFinish(ReverseMove):
    """Goes back to where the current function was entered: the call
    instruction in the caller, or, out of an inlined function, the start
    of the caller's line before it, as GDB's reverse-finish."""

    name, usage = "reverse-finish", "reverse-finish [--tid TID]"
    short = "Step back out of the current function, to its call."

    def landing(self, debugger, thread):
        return reverse_finish(debugger, thread)


class ReverseContinue(Command):
    """Runs backwards to the latest earlier breakpoint or watched change, or
    to the beginning of the history (`process continue -R`)."""

    name, usage = "reverse-continue", "reverse-continue [--tid TID]"
    synchronicity = "current"
    short = "Run backwards to a breakpoint, a watchpoint or the history's beginning."

    def run(self, debugger, args, result):
        args, tid = take_tid(args, self.usage)
        if args:
            raise RetraceError("takes no arguments but --tid; usage: retrace " + self.usage)
        selected_thread(debugger, tid)
        debugger.GetCommandInterpreter().HandleCommand("process continue -R", result)
        process = debugger.GetSelectedTarget().GetProcess()
        if result.Succeeded() and not debugger.GetAsync() and process.GetState() == lldb.eStateStopped:
            # LLDB's direction stays reverse after `process continue -R`:
            # turned forward again, so that a plain `continue` or step that
            # follows runs forwards, as after every other retrace command.
            # (Asynchronous, the stop comes later: retrace-dap turns it
            # before the next forward resume.)
            turn_forward(debugger)


class ForwardDirection(Command):
    """After `process continue -R` (and `retrace reverse-continue`) LLDB 22
    keeps running backwards: a plain `process continue` goes on backwards,
    and so do the continues inside `thread step-over` and `finish`. This
    makes LLDB's direction forward again without moving the thread: it
    resumes forwards to the very instruction it stands on (breakpoints
    set aside meanwhile, so that LLDB does not step off one). retrace-dap
    runs it before a forward step or continue that follows a reverse
    continue."""

    name, usage = "forward-direction", "forward-direction"
    short = "Make LLDB run forwards again after a reverse continue, without moving."

    def run(self, debugger, args, result):
        if args:
            raise RetraceError("takes no arguments; usage: retrace " + self.usage)
        thread = turn_forward(debugger)
        result.AppendMessage("LLDB runs forwards again; thread %d stays at pc 0x%x" % (thread.GetThreadID(), thread.GetFrameAtIndex(0).GetPC()))




class Goto(Command):
    """Moves to instruction ID of the selected thread (ids as `thread trace
    dump instructions` and `retrace where` number them), or to the
    history's `begin` or `end`."""

    name, usage = "goto", "goto ID|begin|end [--tid TID]"
    synchronicity = "current"
    short = "Go to an instruction of the history."

    def run(self, debugger, args, result):
        args, tid = take_tid(args, self.usage)
        if len(args) != 1 or not (args[0] in ("begin", "end") or args[0].isdigit()):
            raise RetraceError("usage: retrace " + self.usage)
        thread = selected_thread(debugger, tid)
        go(debugger, result, args[0], None if args[0] in ("begin", "end") else thread.GetThreadID())


class Where(Command):
    """Shows the instruction id the selected thread stands at and the
    history's extent (`--json` for scripts)."""

    name, usage = "where", "where [--json]"
    short = "Show where in the history the process stands."

    def run(self, debugger, args, result):
        if args not in ([], ["--json"]):
            raise RetraceError("usage: retrace " + self.usage)
        thread = selected_thread(debugger)
        state = status(debugger)
        tid = thread.GetThreadID()
        position = state["position"]
        threads = {t["tid"]: t["instructions"] for t in state["threads"]}
        here = {
            "tid": tid,
            "id": position["id"] if position["tid"] == tid else None,
            "pc": thread.GetFrameAtIndex(0).GetPC(),
            "present": position.get("present", False),
            "instructions": threads.get(tid, 0),
            "historyInstructions": state["instructions"],
        }
        if args:
            result.AppendMessage(json.dumps(here))
            return
        at = "the present (the live process)" if here["present"] else "instruction %s" % here["id"]
        result.AppendMessage(
            "thread %d at %s, pc 0x%x; its history: instructions 0..%d; %d instructions in all threads (%s)"
            % (tid, at, here["pc"], max(here["instructions"] - 1, 0), here["historyInstructions"], state.get("mode", "?"))
        )


class Load(Command):
    """Opens an LLDB trace bundle (DIR/trace.json or DIR: ours, LLDB's
    `trace save`, or one listing jitdumps) and makes it the shim's current
    trace: one target per process, its modules loaded where the traced
    process had them, so `image lookup`, `disassemble` and breakpoints
    resolve as in the traced run. Unlike `trace load` it needs no
    intel-pt plugin in LLDB: the decoding is retrace's."""

    name, usage = "load", "load FILE"
    short = "Load an LLDB trace bundle (trace.json) as the current trace."

    def run(self, debugger, args, result):
        if len(args) != 1:
            raise RetraceError("usage: retrace " + self.usage)
        trace = load_bundle(debugger, args[0])
        threads = sum(len(p["threads"]) for p in trace.processes)
        result.AppendMessage(
            "loaded %s: %d process%s, %d thread%s"
            % (trace.path, len(trace.processes), "" if len(trace.processes) == 1 else "es", threads, "" if threads == 1 else "s")
        )


class Start(Command):
    """Starts tracing the selected process under retrace-stub, as LLDB's
    `process trace start` (or, with --tid, `thread trace start`) does, by
    sending the trace packet itself: LLDB needs no intel-pt plugin. The
    options are those commands': -s the buffer kept per thread (a power of
    two >= 4096; units b, kb, mb), -l the process's total limit, -t
    timestamps, -p the PSB period. From the next stop, `retrace dump`
    shows what the traced threads ran."""

    name, usage = "start", "start [-t] [-s SIZE] [-l LIMIT] [-p PERIOD] [--tid TID ...]"
    short = "Start tracing the process (or threads) under retrace-stub."

    def __init__(self, debugger, internal_dict):
        parser = Arguments(prog="retrace start", add_help=False)
        parser.add_argument("-s", "--buffer-size", type=size_in_bytes, default=4096)
        parser.add_argument("-l", "--total-size-limit", type=size_in_bytes, default=5242880)
        parser.add_argument("-t", "--tsc", action="store_true")
        parser.add_argument("-p", "--psb-period", type=int)
        parser.add_argument("--tid", type=int, action="append", help="trace this thread (repeatable) instead of the process")
        self.parser = parser

    def run(self, debugger, args, result):
        options = self.parser.parse_args(args)
        if live_process(debugger) is None:
            raise RetraceError("no stopped live process: connect to retrace-stub (gdb-remote PORT) first")
        request = {"type": "intel-pt", "iptTraceSize": options.buffer_size, "enableTsc": options.tsc, "psbPeriod": options.psb_period, "tids": options.tid}
        if options.tid is None:
            request.update(processBufferSizeLimit=options.total_size_limit, perCpuTracing=False, disableCgroupTracing=False)
        else:
            request.update(processBufferSizeLimit=None, perCpuTracing=None, disableCgroupTracing=None)
        trace_packet(debugger, "jLLDBTraceStart", request)
        what = "the process" if options.tid is None else "thread%s %s" % ("" if len(options.tid) == 1 else "s", ", ".join(map(str, options.tid)))
        result.AppendMessage("tracing %s (%d bytes per thread)" % (what, options.buffer_size))


class Stop(Command):
    """Stops tracing the selected process (or, with --tid, those threads),
    as LLDB's `process trace stop` / `thread trace stop` do."""

    name, usage = "stop", "stop [--tid TID ...]"
    short = "Stop tracing the process (or threads) under retrace-stub."

    def __init__(self, debugger, internal_dict):
        parser = Arguments(prog="retrace stop", add_help=False)
        parser.add_argument("--tid", type=int, action="append")
        self.parser = parser

    def run(self, debugger, args, result):
        options = self.parser.parse_args(args)
        if live_process(debugger) is None:
            raise RetraceError("no stopped live process: connect to retrace-stub (gdb-remote PORT) first")
        trace_packet(debugger, "jLLDBTraceStop", {"type": "intel-pt", "tids": options.tid})
        result.AppendMessage("stopped tracing %s" % ("the process" if options.tid is None else ", ".join(map(str, options.tid))))


class Save(Command):
    """Saves the trace of the selected live process as an LLDB trace
    bundle in DIR, as LLDB's `trace save` lays it out: DIR/trace.json,
    threads/TID.intelpt_trace and copies of the modules in modules/. Stock
    LLDB opens it with `trace load DIR/trace.json`, retrace with `retrace
    load` or `retrace dump`."""

    name, usage = "save", "save DIR"
    short = "Save the live process's trace as an LLDB trace bundle."

    def run(self, debugger, args, result):
        if len(args) != 1:
            raise RetraceError("usage: retrace " + self.usage)
        path = save_live_trace(debugger, os.path.abspath(os.path.expanduser(args[0])), True)
        result.AppendMessage("Trace bundle description file written to: %s" % path)


def json_style(options):
    """The bridge's JSON layout for -j (compact) or -J (pretty), or None."""
    return "compact" if options.json else "pretty" if options.pretty_json else None


def thread_arguments(parser):
    parser.add_argument("thread_index", nargs="?", type=int, help="the thread's index (as `thread list` numbers it; default 1)")
    parser.add_argument("--tid", type=int, help="the thread with this id instead")
    parser.add_argument("-F", "--file", help="write to this file instead of the console")


class DumpInstructions(Command):
    """Prints the current trace's instructions of one thread as LLDB's
    `thread trace dump instructions` does, option for option: newest first
    (-f: oldest first), -c instructions (default 20; -a all) after skipping
    -s items from the start or from item -i; -r addresses only; -e with
    events, -E only events; -k control-flow kinds; -t times; -j/-J JSON;
    -C continues where the previous dump of the thread stopped (pressing
    Enter repeats the command with -C); -F writes to a file."""

    name, usage = "dump instructions", "dump instructions [-CEJaefjkrt] [-c COUNT] [-F FILE] [-i ID] [-s N] [--tid TID] [THREAD-INDEX]"
    short = "Dump the instructions of a thread of the trace (LLDB's thread trace dump instructions)."

    def __init__(self, debugger, internal_dict):
        parser = Arguments(prog="retrace dump instructions", add_help=False)
        parser.add_argument("-c", "--count", type=int, default=20)
        parser.add_argument("-s", "--skip", type=int, default=0)
        parser.add_argument("-i", "--id", type=item_id)
        parser.add_argument("-f", "--forwards", action="store_true")
        parser.add_argument("-a", "--all", action="store_true")
        parser.add_argument("-r", "--raw", action="store_true")
        parser.add_argument("-e", "--show-events", action="store_true")
        parser.add_argument("-E", "--only-events", action="store_true")
        parser.add_argument("-k", "--show-control-flow-kind", action="store_true")
        parser.add_argument("-t", "--show-timestamps", action="store_true")
        parser.add_argument("-j", "--json", action="store_true")
        parser.add_argument("-J", "--pretty-json", action="store_true")
        parser.add_argument("-C", "--continue", dest="resume", action="store_true")
        thread_arguments(parser)
        self.parser = parser

    def get_repeat_command(self, command):
        return command if " -C" in command or "--continue" in command else command + " -C"

    def run(self, debugger, args, result):
        options = self.parser.parse_args(args)
        trace = current_trace(debugger)
        thread = trace.thread(options.thread_index, options.tid)
        position = thread["position"]
        start, skip = options.id, options.skip
        if options.resume and position in trace.last_ids:
            start, skip = trace.last_ids[position], 1
        try:
            text, stops = trace.bundle.dump_instructions(
                threads=[position],
                forwards=options.forwards,
                count=options.count,
                all=options.all,
                raw=options.raw,
                events=options.show_events,
                only_events=options.only_events,
                kinds=options.show_control_flow_kind,
                start_id=start,
                skip=skip,
                json=json_style(options),
                time=options.show_timestamps,
                file=options.file,
            )
        except (ValueError, OSError) as error:
            raise RetraceError(str(error))
        for stopped, last_id in stops:
            if last_id is not None:
                trace.last_ids[stopped] = last_id
        # LLDB ends JSON output without a newline.
        result.Print(text[:-1] if json_style(options) and text.endswith("\n") else text)


class DumpFunctionCalls(Command):
    """Prints the function-call trees of one thread of the current trace
    as LLDB's `thread trace dump function-calls` does (-j/-J: JSON; -F:
    to a file)."""

    name, usage = "dump function-calls", "dump function-calls [-jJ] [-F FILE] [--tid TID] [THREAD-INDEX]"
    short = "Dump the function-call trees of a thread of the trace (LLDB's thread trace dump function-calls)."

    def __init__(self, debugger, internal_dict):
        parser = Arguments(prog="retrace dump function-calls", add_help=False)
        parser.add_argument("-j", "--json", action="store_true")
        parser.add_argument("-J", "--pretty-json", action="store_true")
        thread_arguments(parser)
        self.parser = parser

    def run(self, debugger, args, result):
        options = self.parser.parse_args(args)
        trace = current_trace(debugger)
        thread = trace.thread(options.thread_index, options.tid)
        try:
            text = trace.bundle.dump_function_calls(threads=[thread["position"]], json=json_style(options), file=options.file)
        except (ValueError, OSError) as error:
            raise RetraceError(str(error))
        # LLDB ends JSON output without a newline.
        result.Print(text[:-1] if json_style(options) and text.endswith("\n") else text)


class DumpInfo(Command):
    """Prints what LLDB's `thread trace dump info` prints for threads of
    the current trace: the trace technology, the items decoded, the raw
    trace size, memory and decode time (retrace's), the events and errors
    by kind. THREAD-INDEX... or `all` (default: thread 1); -j: LLDB's JSON."""

    name, usage = "dump info", "dump info [-j] [-v] [--tid TID] [THREAD-INDEX ...|all]"
    short = "Summarize the trace of threads (LLDB's thread trace dump info)."

    def __init__(self, debugger, internal_dict):
        parser = Arguments(prog="retrace dump info", add_help=False)
        parser.add_argument("-j", "--json", action="store_true")
        parser.add_argument("-v", "--verbose", action="store_true", help="accepted, as LLDB's (per-thread traces have nothing more to show)")
        parser.add_argument("--tid", type=int)
        parser.add_argument("threads", nargs="*", help="thread indexes, or all")
        self.parser = parser

    def run(self, debugger, args, result):
        options = self.parser.parse_args(args)
        trace = current_trace(debugger)
        if options.threads == ["all"]:
            threads = [t for p in trace.processes for t in p["threads"]]
        elif options.tid is not None or not options.threads:
            threads = [trace.thread(None, options.tid)]
        else:
            try:
                threads = [trace.thread(int(index)) for index in options.threads]
            except ValueError:
                raise RetraceError("invalid thread index: %s; usage: retrace %s" % (" ".join(options.threads), self.usage))
        try:
            text = trace.bundle.dump_info([t["position"] for t in threads], json=options.json)
        except (ValueError, OSError) as error:
            raise RetraceError(str(error))
        result.Print(text[:-1] if options.json and text.endswith("\n") else text)


class Help(Command):
    """What `help retrace` (or `help retrace COMMAND`) prints: the retrace
    commands, or one command's help."""

    name, usage = "help", "help [COMMAND [SUBCOMMAND]]"
    short = "Show the retrace commands, or one command's help."

    def run(self, debugger, args, result):
        out = lldb.SBCommandReturnObject()
        debugger.GetCommandInterpreter().HandleCommand("help retrace " + " ".join(shlex.quote(a) for a in args), out)
        if not out.Succeeded():
            raise RetraceError((out.GetError() or "").strip() or "no such command")
        result.AppendMessage((out.GetOutput() or "").rstrip("\n"))


COMMANDS = [
    ReverseStepi, ReverseNext, ReverseStep, ReverseFinish, ReverseContinue, ForwardDirection, Goto, Where,
    Load, Start, Stop, Save, DumpInstructions, DumpFunctionCalls, DumpInfo, Help,
]


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
