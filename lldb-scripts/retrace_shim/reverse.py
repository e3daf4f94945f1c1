"""Reverse stepping as GDB does it: the landing instruction of a reverse
step, next, finish or stepi is chosen from the thread's history in its
frame (`monitor history`) with GDB's line tables (`retrace_lines`), then
reached with an armed `monitor goto` and a forward LLDB resume."""

import os

import lldb

import retrace_lines

from .server import RetraceError, history, monitor, selected_thread, status


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
    beginning), how many inlined frames GDB shows below the function there
    (`depth`), and whether a breakpoint stopped the step there."""

    def __init__(self, id, depth=None, breakpoint=False):
        Exception.__init__(self, id)
        self.id, self.depth, self.breakpoint = id, depth, breakpoint


class LldbLines:
    """LLDB's own line entries (its rows, not GDB's statements): the line
    at an address as (file, line) (None: line 0 or no line), the address
    its row starts at and ends before."""

    def __init__(self, target):
        self.target = target
        self.cache = {}

    def row(self, pc):
        """(line, row start, row end) at `pc`."""
        if pc not in self.cache:
            entry = self.target.ResolveLoadAddress(pc).GetLineEntry()
            line, start, end = None, None, None
            if entry.IsValid():
                start = entry.GetStartAddress().GetLoadAddress(self.target)
                end = entry.GetEndAddress().GetLoadAddress(self.target)
                if entry.GetLine():
                    line = (os.path.normpath(entry.GetFileSpec().fullpath or ""), entry.GetLine())
            self.cache[pc] = (line, start, end)
        return self.cache[pc]

    def line(self, pc):
        return self.row(pc)[0]

    def starts_row(self, pc):
        return self.row(pc)[1] == pc


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
        self.lldb_lines = LldbLines(target)
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

    def lldb_next(self):
        """LLDB's reverse-next: the inverse of its `thread step-over`. Back
        over the rest of the line the thread stands on (never staying on
        it), then over the line before, to where that line's run of
        instructions in this frame started: its contiguous rows count as one
        line, as do rows of line 0, calls and inlined calls made from it.
        Where GDB's landing is such a start too (one loop line's last
        iteration, say), GDB's. Where LLDB's rule has no answer (before the
        function's first line, in or out of an inlined function, without
        lines), and where a breakpoint stops the way back, GDB's."""
        gdb = self.run("next")
        if gdb.breakpoint:
            return gdb
        found = self.previous_line_start(gdb.id)
        return gdb if found is None else found

    def previous_line_start(self, gdb):
        """The Landing of LLDB's reverse-next, None where its rule has no
        answer or GDB's landing `gdb` (an id) keeps it."""
        shown = [key for key, _, _, _ in self.frames.chain(self.pc)][self.hidden:]
        here = self.lldb_line(self.pc)[0]
        if not here or shown:
            # No line, or a line of an inlined function, where LLDB's
            # stepping and its frames differ from GDB's more than by lines.
            return None
        line, oldest = None, None
        for id, pc, real, how, stop in self.events():
            if how == "caller":
                return None
            if how == "callee":
                if stop is not None:
                    return Landing(stop[0], self.frame_at(real, stop[1]).shown, breakpoint=True)
                continue
            if pc in self.breakpoints:
                return Landing(id, self.frame_at(real, pc).shown, breakpoint=True)
            if self.frames.trampoline(pc):
                # A PLT stub on the way to a call: part of the line.
                continue
            at, starts = self.lldb_line(pc)
            if at is False:
                # Back out of the function the step started in.
                return None
            if at is None:
                # Inside an inlined call, line 0: part of the line.
                continue
            if line is None:
                if at == here:
                    continue
                line = at
            if id == gdb and at == line and starts and self.lldb_range_start(pc) == pc:
                # GDB's landing starts a range of the line before.
                return None
            if at != line:
                if oldest[2]:
                    break
                # The line was entered in the middle of a row: LLDB's step
                # from the line before goes on through it.
                line = at
            oldest = (id, pc, starts)
        if oldest is None:
            return None
        return Landing(oldest[0], self.frame_at(0, oldest[1]).shown)

    def lldb_range_start(self, pc):
        """Where LLDB's range of the line at `pc` starts, a function's own
        line: its rows just before in memory, and the functions inlined
        there from the same line, are one range with it (as LLDB steps
        over them: `GetSameLineContiguousAddressRange`, inlined functions
        included)."""
        line, start, _ = self.lldb_lines.row(pc)
        for _ in range(10000):
            if line is None or not start:
                break
            chain = self.frames.chain(start - 1)
            before, before_start, before_end = self.lldb_lines.row(start - 1)
            if before_end != start or before_start is None:
                break
            if (chain[-1][3] if chain else before) != line:
                break
            start = before_start
        return start

    def lldb_line(self, pc):
        """The line LLDB shows at `pc` in the frame the step started in, and
        whether `pc` starts it (a row's start, or the entry of a function
        inlined there, where LLDB shows the call's line): ((file, line),
        starts); (None, False) inside an inlined call or without a line;
        (False, False) outside the function."""
        chain = self.frames.chain(pc)
        if chain:
            # The step started outside inlined functions.
            _, entry, _, call = chain[-1]
            if entry != pc:
                return None, False
            return (call if call[1] else None), True
        lines = self.lldb_lines
        if self.frames.function(pc) != self.frames.function(self.pc):
            return False, False
        return lines.line(pc), lines.starts_row(pc)

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
                        raise Landing(stop[0], self.frame_at(real, stop[1]).shown, breakpoint=True)
                    continue
                sal = lines(pc)
                if sal.pc == pc:
                    raise Landing(id, self.frame_at(real, pc).shown)
                step_range = (sal.pc, sal.end or 0)
                send = True
                continue
            if pc in self.breakpoints:
                raise Landing(id, self.frame_at(real, pc).shown, breakpoint=True)
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


def reverse_line(debugger, thread, enter_callees, gdb_rule=False):
    """reverse-next (`enter_callees` False) or reverse-step: the Landing.
    reverse-next by LLDB's line rule unless `gdb_rule`."""
    stepper = ReverseStepper(debugger, thread)
    if enter_callees or gdb_rule:
        return stepper.run("step" if enter_callees else "next")
    return stepper.lldb_next()


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
