//! # retrace-stub
//!
//! The gdb-remote server (`retrace-stub`) that LLDB 22 and GDB 13 connect to.
//! Built on `gdbstub` 0.7.10's state machine with a packet framer in front
//! for what gdbstub cannot express (LLDB's `qProcessInfo`, the
//! `jLLDBTrace*` packets, the replies before a session starts).
//!
//! Two sides that meet at one interface, [`inferior::Inferior`]:
//!
//! * [`protocol`] — the client side: the connection, RSP framing, the
//!   packets answered before gdbstub, the session loop;
//! * [`inferior`] — what is debugged: [`inferior::live`], a process under
//!   ptrace (registers, memory, breakpoints, threads, resume actions, how it
//!   stops, its libraries and memory regions, its traces and recording);
//!   [`inferior::saved_trace`], a bundle replayed; [`inferior::inert`], a
//!   session after the program is gone. A history is moved through by one
//!   engine, [`inferior::replay`].
//!
//! Shared by both: [`arch`] (the x86-64 Linux register set and
//! `target.xml`), [`signals`] (GDB's signal numbering on the wire vs
//! Linux's), [`hex`].
//!
//! Live process control (launch, attach, the one wait loop) comes from
//! `retrace-collector`; a saved trace is decoded by `retrace-decoder` and
//! navigated through its history API. This crate never decodes Intel PT
//! itself and carries no launch code of its own.

#![deny(missing_docs)]
#![deny(missing_debug_implementations)]

pub mod arch;
pub mod hex;
pub mod protocol;
pub mod signals;
pub mod inferior;

// Every target offers the same gdbstub capabilities.
protocol::capabilities::offer_capabilities!(inferior::inert::InertTarget);
protocol::capabilities::offer_capabilities!(inferior::saved_trace::SavedTrace);
protocol::capabilities::offer_capabilities!(inferior::live::ProcessTarget);
