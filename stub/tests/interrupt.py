"""Ctrl-C through LLDB's SB API: continue a spinning program under
retrace-stub, interrupt it, and check it stopped inside the loop; then kill.
Usage: python3 interrupt.py PROGRAM PORT"""
import sys
import time

import lldb

program, port = sys.argv[1], int(sys.argv[2])
debugger = lldb.SBDebugger.Create()
debugger.SetAsync(True)
target = debugger.CreateTarget(program)
listener = debugger.GetListener()
error = lldb.SBError()
process = target.ConnectRemote(listener, f"connect://127.0.0.1:{port}", "gdb-remote", error)
assert error.Success(), error


def wait_for(state, seconds=20):
    deadline = time.time() + seconds
    event = lldb.SBEvent()
    while time.time() < deadline:
        if process.GetState() == state:
            return True
        listener.WaitForEvent(1, event)
    return process.GetState() == state


assert wait_for(lldb.eStateStopped), f"not stopped after connect: {process.GetState()}"
process.Continue()
assert wait_for(lldb.eStateRunning), "did not run"
time.sleep(0.5)
error = process.Stop()
assert error.Success(), error
assert wait_for(lldb.eStateStopped), f"not stopped after interrupt: {process.GetState()}"
frame = process.GetSelectedThread().GetFrameAtIndex(0)
print("stopped in", frame.GetFunctionName(), "reason", process.GetSelectedThread().GetStopReason())
assert frame.GetFunctionName() == "main", frame
process.Kill()
print("interrupt OK")
