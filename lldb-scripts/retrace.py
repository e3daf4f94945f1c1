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
import tempfile

import lldb

# Lines `monitor history` gives per request: few at first (a reverse step
# mostly needs few), more for each further request.
HISTORY_FIRST_BATCH = 64
HISTORY_BATCH = 4096

# Code.line_ranges's answers, by (process, function, line).
LINE_RANGES = {}


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
    """An instruction of `monitor history`: its id, address and frame depth."""

    __slots__ = ("id", "pc", "depth")

    def __init__(self, id, pc, depth):
        self.id, self.pc, self.depth = id, pc, depth


def history(debugger, tid, before=None, within=()):
    """Thread `tid`'s instructions before instruction `before` (default: the
    position) in that frame, newest first, fetched as they are read. With
    `within` (address ranges), the run of the frame's instructions inside
    them just before `before` comes as its earliest instruction only (the
    stub passes over it: a long loop on one line is one answer)."""
    batch = HISTORY_FIRST_BATCH
    while True:
        command = "history %d --max %d" % (tid, batch)
        if before is not None:
            command += " --before %d" % before
        if within:
            command += " --within " + ",".join("%x-%x" % r for r in within)
            within = ()
        lines = monitor(debugger, command).splitlines()
        steps = []
        for line in lines[1:]:
            fields = line.split()
            if len(fields) == 3:
                steps.append(Step(int(fields[0]), int(fields[1], 16), int(fields[2])))
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


class Code:
    """What LLDB knows of addresses: lines and functions. With
    `over_inlined`, code inlined into a function counts as the line of the
    call it was inlined for (as stepping over it treats it)."""

    def __init__(self, target, over_inlined=False):
        self.target = target
        self.over_inlined = over_inlined
        self.lines = {}
        self.functions = {}

    def line(self, pc):
        """(file, line) of the code at `pc`, or None for no line (line 0)."""
        if pc not in self.lines:
            address = self.target.ResolveLoadAddress(pc)
            entry = address.GetLineEntry()
            line = (entry.GetFileSpec().fullpath, entry.GetLine()) if entry.IsValid() and entry.GetLine() != 0 else None
            if self.over_inlined and line is not None:
                inlined = address.GetBlock().GetContainingInlinedBlock()
                while inlined.IsValid():
                    line = (inlined.GetInlinedCallSiteFile().fullpath, inlined.GetInlinedCallSiteLine())
                    inlined = inlined.GetParent().GetContainingInlinedBlock()
            self.lines[pc] = line
        return self.lines[pc]

    def line_ranges(self, pc):
        """The address ranges of the function at `pc` whose rows are the
        line of `pc` (the line table's own rows: inlined code not
        included), merged; empty if unknown."""
        line = self.line(pc)
        span = self.function(pc)
        if line is None or span is None:
            return []
        key = (self.target.GetProcess().GetUniqueID(), span, line)
        if key not in LINE_RANGES:
            unit = self.target.ResolveLoadAddress(pc).GetCompileUnit()
            spec = lldb.SBFileSpec(line[0], False)
            rows = []
            index = unit.FindLineEntryIndex(0, line[1], spec, True) if unit.IsValid() else lldb.UINT32_MAX
            while index != lldb.UINT32_MAX:
                entry = unit.GetLineEntryAtIndex(index)
                start = entry.GetStartAddress().GetLoadAddress(self.target)
                end = entry.GetEndAddress().GetLoadAddress(self.target)
                if span[0] <= start < end <= span[1]:
                    rows.append((start, end))
                index = unit.FindLineEntryIndex(index + 1, line[1], spec, True)
            merged = []
            for start, end in sorted(rows):
                if merged and start <= merged[-1][1]:
                    merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
                else:
                    merged.append((start, end))
            LINE_RANGES[key] = merged
        return LINE_RANGES[key]

    def in_prologue(self, pc):
        """Whether `pc` lies in its function's prologue (where LLDB's
        stepping into a function never stops)."""
        function = self.target.ResolveLoadAddress(pc).GetSymbolContext(lldb.eSymbolContextFunction).GetFunction()
        if not function.IsValid():
            return False
        start = function.GetStartAddress().GetLoadAddress(self.target)
        return start <= pc < start + function.GetPrologueByteSize()

    def function(self, pc):
        """(start, end) of the function holding `pc`, or None."""
        if pc not in self.functions:
            address = self.target.ResolveLoadAddress(pc)
            context = address.GetSymbolContext(lldb.eSymbolContextFunction | lldb.eSymbolContextSymbol)
            span = None
            for whole in (context.GetFunction(), context.GetSymbol()):
                if whole.IsValid():
                    start = whole.GetStartAddress().GetLoadAddress(self.target)
                    end = whole.GetEndAddress().GetLoadAddress(self.target)
                    if start != lldb.LLDB_INVALID_ADDRESS and start <= pc < end:
                        span = (start, end)
                        break
            self.functions[pc] = span
        return self.functions[pc]


class Landing(Exception):
    """Where a reverse step lands: an instruction id (`None`: the history's
    beginning)."""

    def __init__(self, id):
        Exception.__init__(self, id)
        self.id = id


def setting(debugger, name):
    """An LLDB setting's value, as JSON gives it."""
    stream = lldb.SBStream()
    debugger.GetSetting(name).GetAsJSON(stream)
    try:
        return json.loads(stream.GetData())
    except ValueError:
        return None


class Walk:
    """One reverse-next or reverse-step: the frame's history read backwards,
    with LLDB's line tables and its step-in settings."""

    def __init__(self, debugger, thread, enter_callees):
        self.debugger = debugger
        self.tid = thread.GetThreadID()
        self.code = Code(thread.GetProcess().GetTarget(), over_inlined=not enter_callees)
        self.enter_callees = enter_callees
        self.avoid_libraries = set(setting(debugger, "target.process.thread.step-avoid-libraries") or [])
        avoid = setting(debugger, "target.process.thread.step-avoid-regexp")
        self.avoid_names = re.compile(avoid) if avoid else None

    def steps(self, before=None):
        """The frame's history before `before`."""
        return iter(history(self.debugger, self.tid, before))

    def run_steps(self, step, steps):
        """The frame's history before `step`, which starts a run of its
        line going back (`steps`: the history being read, at `step`).
        Stepping over callees, the stub passes over the run (callees
        included) itself; stepping into them, each callee's return is
        needed, and `steps` goes on."""
        if self.enter_callees:
            return steps
        return iter(history(self.debugger, self.tid, step.id, self.code.line_ranges(step.pc)))

    def steps_into(self, pc):
        """Whether `thread step-in` would stop in the function at `pc`: it
        has lines and neither its library nor its name is to be avoided."""
        if self.code.line(pc) is None:
            return False
        address = self.code.target.ResolveLoadAddress(pc)
        if address.GetModule().GetFileSpec().GetFilename() in self.avoid_libraries:
            return False
        name = address.GetSymbolContext(lldb.eSymbolContextFunction).GetFunction().GetName() or ""
        return not (self.avoid_names and self.avoid_names.search(name))

    def callee(self, ret, returned_to):
        """A callee's `ret`, met going back; `returned_to` is the instruction
        it returned to (None: where we stand). `thread step-in` from the
        callee's last line stops where it returns: so reverse-step enters
        the callee if we stand there, and otherwise lands there. Raises
        Landing (reverse-next steps over callees: nothing)."""
        if not self.enter_callees or not self.steps_into(ret.pc):
            return
        if returned_to is not None:
            raise Landing(returned_to.id)
        self.run_start(self.steps(before=ret.id), self.code.line(ret.pc), ret.id)

    def run_start(self, steps, line, landing, newest=None):
        """From a run of `line` whose earliest instruction so far is
        `landing` (the step `newest`), goes back to the run's first
        instruction. Raises Landing."""
        for step in steps:
            if step.depth > 0:
                self.callee(step, newest)
                continue
            if step.depth < 0:
                break
            newest = step
            here = self.code.line(step.pc)
            if here is None or self.code.in_prologue(step.pc):
                continue
            if here != line:
                break
            landing = step.id
        raise Landing(landing)

    def landing(self, pc):
        """The id reverse-next/step lands on from `pc`, or None."""
        current = self.code.line(pc)
        function = self.code.function(pc)
        steps = self.steps()
        newest = None
        try:
            for step in steps:
                if step.depth > 0:
                    self.callee(step, newest)
                    continue
                if step.depth < 0:
                    # Back out of the function's entry: the start of the
                    # caller's line that called it.
                    line = self.code.line(step.pc)
                    if line is None:
                        raise Landing(step.id)
                    self.run_start(self.run_steps(step, self.steps(before=step.id)), line, step.id, step)
                newest = step
                if function is not None and self.code.function(step.pc) != function:
                    # At the frame's depth but outside its function: a
                    # signal handler's restorer.
                    continue
                here = self.code.line(step.pc)
                if here is None or here == current or self.code.in_prologue(step.pc):
                    # (Stepping into a function stops after its prologue:
                    # before it, the call is next.)
                    continue
                self.run_start(self.run_steps(step, steps), here, step.id, step)
        except Landing as landing:
            return landing.id
        return None


def reverse_line(debugger, thread, enter_callees):
    """reverse-next (`enter_callees` False) or reverse-step: the landing id."""
    return Walk(debugger, thread, enter_callees).landing(thread.GetFrameAtIndex(0).GetPC())


def reverse_finish(debugger, thread):
    """The call that entered the current frame, or None (the beginning)."""
    for step in history(debugger, thread.GetThreadID()):
        if step.depth < 0:
            return step.id
    return None


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


def inlined_block_start(block, target):
    """The first address of the inlined block `block`, or None."""
    if not block.IsValid() or block.GetNumRanges() == 0:
        return None
    return min(block.GetRangeStartAddress(i).GetLoadAddress(target) for i in range(block.GetNumRanges()))


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
        id = self.landing(debugger, thread)
        if id is None:
            go(debugger, result, "begin")
        else:
            go(debugger, result, str(id), thread.GetThreadID())
        self.landed(debugger, thread, result)

    def landed(self, debugger, thread, result):
        pass


class ReverseStepi(ReverseMove):
    """Un-executes the selected thread's last instruction. `thread step-inst`
    from there comes back."""

    name, usage = "reverse-stepi", "reverse-stepi [--tid TID]"
    short = "Step back one instruction."

    def landing(self, debugger, thread):
        return reverse_stepi(debugger, thread)


class ReverseNext(ReverseMove):
    """Goes back to the start of the previous source line of the current
    function, stepping back over calls (and signal handlers). Before the
    function's first line it goes to the start of the caller's line. `thread
    step-over` from there comes back."""

    name, usage = "reverse-next", "reverse-next [--tid TID]"
    short = "Step back one source line, over calls."

    def landing(self, debugger, thread):
        return reverse_line(debugger, thread, False)


class ReverseStep(ReverseMove):
    """Goes back to the start of the previous source line, entering a
    function with line information that returned in between (at the start
    of its last line). `thread step-in` from there comes back."""

    name, usage = "reverse-step", "reverse-step [--tid TID]"
    short = "Step back one source line, into calls."
    # Waits for the landing: at an inlined function's first instruction it
    # steps into it (without running) after the stop.
    synchronicity = "synchronous"

    def landing(self, debugger, thread):
        return reverse_line(debugger, thread, True)

    def landed(self, debugger, thread, result):
        # At the first instruction of an inlined function whose own line
        # we stepped back to, LLDB (stopped, not stepping) shows the
        # caller: its step-in moves into the function without running.
        frame = thread.GetFrameAtIndex(0)
        block = frame.GetPCAddress().GetBlock().GetContainingInlinedBlock()
        if not frame.IsInlined() and inlined_block_start(block, thread.GetProcess().GetTarget()) == frame.GetPC():
            debugger.GetCommandInterpreter().HandleCommand("thread step-in", result)


class ReverseFinish(ReverseMove):
    """Goes back to the call instruction (in the caller) that entered the
    current function."""

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


COMMANDS = [
    ReverseStepi, ReverseNext, ReverseStep, ReverseFinish, ReverseContinue, ForwardDirection, Goto, Where,
    Load, Start, Stop, Save, DumpInstructions, DumpFunctionCalls, DumpInfo,
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
