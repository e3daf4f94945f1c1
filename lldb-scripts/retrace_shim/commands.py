"""The `retrace` subcommands LLDB runs (`command script add`), each a
class with its help."""

import argparse
import json
import os
import shlex

import lldb

from .reverse import Landing, go, reverse_finish, reverse_line, reverse_stepi, turn_forward
from .server import RetraceError, live_process, selected_thread, status, trace_packet
from .traces import current_trace, load_bundle, save_live_trace, size_in_bytes


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

    def options(self, args):
        """Takes the command's own options from `args` (none but --tid)."""
        if args:
            raise RetraceError("takes no arguments but --tid; usage: retrace " + self.usage)

    def run(self, debugger, args, result):
        args, tid = take_tid(args, self.usage)
        self.options(args)
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
    """Undoes LLDB's `thread step-over` (`next`): goes back to where the
    previous source line of the current function started, stepping back
    over calls and inlined functions, so that `next` from there comes back.
    It never stays on the line it starts from (from the middle of a line
    too, it goes to the line before); the rows of one line that follow one
    another are one line, as LLDB steps them. A breakpoint on the way back
    stops it. Before the function's first line it goes to the start of the
    caller's line, and in a function inlined where it stands it lands, as
    GDB's reverse-next does.

    --gdb: land where GDB 13's reverse-next lands instead (its line table
    of statements: from the middle of a line to its start; on a loop line,
    one iteration back)."""

    name, usage = "reverse-next", "reverse-next [--gdb] [--tid TID]"
    short = "Step back one source line, over calls."
    gdb_rule = False

    def options(self, args):
        self.gdb_rule = False
        for word in args:
            if word != "--gdb":
                raise RetraceError("unknown argument %s; usage: retrace %s" % (word, self.usage))
            self.gdb_rule = True

    def landing(self, debugger, thread):
        return reverse_line(debugger, thread, False, self.gdb_rule)


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
    intel-pt plugin in LLDB: the decoding is retrace's. A bundle is
    untrusted input: nothing outside its directory is read, unless
    --allow-outside-bundle (modules named by their paths on this machine,
    absolute paths, links out)."""

    name, usage = "load", "load [--allow-outside-bundle] FILE"
    short = "Load an LLDB trace bundle (trace.json) as the current trace."

    def run(self, debugger, args, result):
        allow_outside = "--allow-outside-bundle" in args
        args = [a for a in args if a != "--allow-outside-bundle"]
        if len(args) != 1:
            raise RetraceError("usage: retrace " + self.usage)
        trace = load_bundle(debugger, args[0], allow_outside)
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
