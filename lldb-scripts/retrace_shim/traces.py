"""The shim's traces: a bundle opened by `retrace load`, or the live
process's trace at its current stop (fetched from the stub and saved as a
bundle), decoded through the native bridge."""

import argparse
import atexit
import json
import os
import re
import shutil
import tempfile

import lldb

from .native import native
from .server import RetraceError, live_process, monitor, trace_packet


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
        "processes": [{"modules": modules, "pid": process.GetProcessID(), "threads": threads, "triple": target.GetTriple()}],
        "type": "intel-pt",
    }
    if state.get("tscPerfZeroConversion"):
        bundle["tscPerfZeroConversion"] = state["tscPerfZeroConversion"]
    path = os.path.join(directory, "trace.json")
    # Written by the decoder's own schema (what every reader of bundles
    # reads), through the native bridge.
    try:
        native().write_trace_json(path, json.dumps(bundle))
    except ValueError as error:
        raise RetraceError(str(error))
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
            # (Written here, naming the modules in place: trusted.)
            bundle = native().Bundle(path, allow_outside=True)
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


def load_bundle(debugger, path, allow_outside=False):
    """Opens the bundle at `path` (a trace.json, or its directory) and
    creates one target per process with its modules at their load
    addresses, the first one selected. `allow_outside`: read what it names
    outside its directory too."""
    if os.path.isdir(path):
        path = os.path.join(path, "trace.json")
    try:
        bundle = native().Bundle(path, allow_outside=allow_outside)
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
