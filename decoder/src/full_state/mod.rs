//! Full-state recordings: beside a recording's Intel PT streams (which say
//! what ran), every change the program's registers and memory went through,
//! so that any register or byte at any past position can be served. Written
//! by `retrace record --backend valgrind --full` as `state/<pid>.rtstate` in
//! the bundle; `docs/full-state-format.md` describes the format and
//! [`StateWriter`] / [`state_records`] encode and decode it.
//!
//! Every record is a thread's and says *when* it took effect as `at`: how
//! many of the thread's instructions had completed (an instruction's own
//! effects have `at` = its step number + 1; what the kernel did in its
//! system call is placed the same way, after the system call's step). The
//! process-wide records before any thread ran (the memory at the start)
//! are thread 0's with `at` 0.
//!
//! Encoding (after the magic `RTSTATE2`, up to the end mark `E`; streams
//! from before the end mark start with `RTSTATE1`; numbers are LEB128, "signed" ones
//! zigzag-mapped): each record is a tag byte, then `at` as the difference
//! from the previous record of the same thread, then its fields:
//!
//! | tag | fields | meaning |
//! |---|---|---|
//! | `T` | tid (no `at`) | the records that follow are thread `tid`'s |
//! | `E` | (no `at`) | the end mark: the stream is whole ([`StateWriter::finish`]) |
//! | `S` | — | the thread runs from its step `at` on, until another is scheduled: the one order the threads ran in |
//! | `R` | n, n × (piece u8, signed difference from the thread's last value of the piece) | an instruction changed registers: their values after it |
//! | `r` | as `R` | registers changed other than by an instruction (a system call's result, a signal delivered, a thread's first registers) |
//! | `W` | signed address difference from the previous `W`, `K` or `D`'s, size, bytes | an instruction wrote memory: the bytes after it |
//! | `K` | as `W` | memory written other than by an instruction (by the kernel, the memory at the start) |
//! | `D` | signed address difference, size | an instruction read memory |
//! | `Z` | start, length | memory mapped zero-filled |
//! | `U` | start, length | memory unmapped |
//! | `P` | start, length, prot (u8) | memory mapped or its protection changed: readable 1, writable 2, executable 4; the heap 8, the main stack 16 (neither: what it was); 32: mapped only as touched, down from its top (the main stack's reserve) |
//! | `C` | from, to, length | memory moved (`mremap`) |
//! | `F` | start, length, file offset, path length, path | a file mapped: its bytes (a module copied into the bundle, by its path) |
//! | `I` | signal, ip | a signal is delivered to the thread, interrupted before `ip`: the thread's records after it with the same `at` (the signal frame, the handler's registers) are the delivery's; signal 0: the fatal signal that ended the program stopped the thread at `ip` (the last delivery, after its last step) |
//!
//! An instruction's own records also take short forms (the step and the
//! count or size in the tag, 0x10–0x2f) and, the most frequent, compact
//! ones: one piece (`0x80 | step << 5 | piece`), a general register and
//! the flags (`0x30 | register`), an 8-byte store of a general register's
//! value (`0x60 | register`, no bytes: the reader knows the value), and
//! 8-byte stores and loads near the stack pointer, from `rsp` (`0x78 |
//! load << 1 | step`); `docs/full-state-format.md` has the tables.
//!
//! Register pieces are 8 bytes each, numbered as [`piece`] says.


mod deltas;
mod forms;
mod machine;
mod reader;
mod record;
mod schedule;
mod writer;

pub use machine::{set_pieces, StateMachine};
pub use reader::{state_records, StateError, StateRecords, StreamPosition};
pub use record::{piece, StateRecord, KIND_GROWS, KIND_HEAP, KIND_STACK, PROT_EXEC, PROT_READ, PROT_WRITE, STATE_MAGIC, STATE_MAGIC_UNMARKED};
pub use schedule::{schedule, schedule_of, Delivery, Schedule};
pub use writer::StateWriter;

#[cfg(test)]
mod tests;
