//! # retrace-stub
//!
//! The gdb-remote server (`retrace-stub`) that LLDB 22 and GDB 13 connect to.
//! Built on `gdbstub` 0.7.10's state machine with a packet framer in front
//! for what gdbstub cannot express (LLDB's `qProcessInfo`; later the
//! `jLLDBTrace*` packets and replay).
//!
//! * [`arch`] — the x86-64 Linux register set and `target.xml`;
//! * [`target`] — registers, memory, software breakpoints, threads, resume
//!   actions (ptrace);
//! * [`server`] — the connection loop, the framer, ptrace stops → stop replies;
//! * [`loader`] — the dynamic linker's library list (`qXfer:libraries-svr4`)
//!   and memory regions (`qMemoryRegionInfo`);
//! * [`signals`] — GDB's signal numbering on the wire vs Linux's.
//!
//! Live process control (launch) comes from `retrace-collector`; replay
//! navigation will go only through the decoder's history API. This crate must
//! never decode Intel PT itself or carry its own launch code.

pub mod arch;
pub mod loader;
pub mod server;
pub mod signals;
pub mod target;
