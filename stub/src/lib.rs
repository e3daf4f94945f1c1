//! # retrace-stub
//!
//! The gdb-remote server (`retrace-stub`) that LLDB 22 and GDB 13 connect to:
//! launch/attach, forward debugging, recording, replay (`bs`/`bc`) and LLDB's
//! `jLLDBTrace*` packets. Built on `gdbstub` 0.7.10 with a packet framer in
//! front for what gdbstub cannot express.
//!
//! Live process control comes from `retrace-collector`; replay navigation goes
//! only through the decoder's history API. This crate must never decode Intel PT
//! itself or carry its own ptrace helpers.
