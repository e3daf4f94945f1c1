"""The LLDB shim's parts (`lldb-scripts/retrace.py` registers its commands):

* `server` — retrace-stub through LLDB: `monitor` commands, trace packets;
* `reverse` — reverse stepping chosen from the history with GDB's line
  tables, reached with an armed `goto`;
* `native` — the native bridge `retrace_native` (decoder, dumps, bundles);
* `traces` — the current trace: a loaded bundle or the live process's;
* `commands` — the `retrace` subcommands.
"""
