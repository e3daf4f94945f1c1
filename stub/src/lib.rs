//! # retrace-stub
//!
//! The gdb-remote server (`retrace-stub`) that LLDB 22 and GDB 13 connect to.
//! Built on `gdbstub` 0.7.10's state machine with a packet framer in front
//! for what gdbstub cannot express (LLDB's `qProcessInfo`; later the
//! `jLLDBTrace*` packets and replay).
//!
//! Two sides that meet at one interface, [`target::Inferior`]:
//!
//! * [`protocol`] — the client side: the connection, RSP framing, the
//!   packets answered before gdbstub, the session loop;
//! * [`target`] — what is debugged: [`target::live`], a process under
//!   ptrace (registers, memory, breakpoints, threads, resume actions, how it
//!   stops, its libraries and memory regions).
//!
//! Shared by both: [`arch`] (the x86-64 Linux register set and
//! `target.xml`), [`signals`] (GDB's signal numbering on the wire vs
//! Linux's), [`hex`].
//!
//! Live process control (launch) comes from `retrace-collector`; replay
//! navigation will go only through the decoder's history API. This crate must
//! never decode Intel PT itself or carry its own launch code.

pub mod arch;
pub mod hex;
pub mod protocol;
pub mod signals;
pub mod target;
