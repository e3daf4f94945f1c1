//! The protocol side: what the client sends and what it is answered, with
//! no knowledge of how the program runs (that is the inferior's,
//! [`crate::inferior`]).
//!
//! * [`capabilities`] — the gdbstub capabilities every inferior offers;
//! * [`connection`] — the buffered client connection gdbstub writes to;
//! * [`framing`] — packets cut out of the byte stream, replies framed;
//! * [`grammar`] — packets gdbstub would choke on, caught first;
//! * [`gdb_btrace`] — GDB's branch-trace packets (`Qbtrace`, `qXfer:btrace`);
//! * [`lldb_trace`] — LLDB's `jLLDBTrace*` packets;
//! * [`threads`] — thread ids that name no thread, resumes that could not stop;
//! * [`monitor`] — the `monitor` commands: trace data, the history's status, `goto`, `history`;
//! * [`replies`] — the text of memory regions and stop notes;
//! * [`session`] — the loop: bytes in, gdbstub's state machine, stops out.

pub mod capabilities;
pub mod connection;
pub mod framing;
pub mod gdb_btrace;
pub mod grammar;
pub mod lldb_trace;
pub mod monitor;
pub mod replies;
pub mod session;
pub mod threads;
