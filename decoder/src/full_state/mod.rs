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
//! | `C` | from, to, length | memory moved (`mremap`) |
//! | `F` | start, length, file offset, path length, path | a file mapped: its bytes (a module copied into the bundle, by its path) |
//! | `I` | signal, ip | a signal is delivered to the thread, interrupted before `ip`: the thread's records after it with the same `at` (the signal frame, the handler's registers) are the delivery's |
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

use std::borrow::Cow;
use std::collections::HashMap;

use crate::leb128;

/// The magic at the start of a full-state stream: one that ends with an
/// end mark ([`StateRecord::End`]), so that a stream cut between two
/// records is told from a whole one.
pub const STATE_MAGIC: &[u8; 8] = b"RTSTATE2";

/// The magic of the streams written before the end mark (read as they
/// are: their end is where the bytes end).
pub const STATE_MAGIC_UNMARKED: &[u8; 8] = b"RTSTATE1";

/// The register pieces (8 bytes each) records name.
pub mod piece {
    /// How many numbers there are (not all are used).
    pub const COUNT: usize = 112;
    /// `rax rbx rcx rdx rsi rdi rbp rsp r8 … r15` are 0..16, GDB's order.
    pub const GENERAL: std::ops::Range<u8> = 0..16;
    /// `rflags`.
    pub const RFLAGS: u8 = 16;
    /// `fs_base`.
    pub const FS_BASE: u8 = 17;
    /// `gs_base`.
    pub const GS_BASE: u8 = 18;
    /// The SSE rounding mode, as Valgrind keeps it (0..4).
    pub const SSE_ROUNDING: u8 = 96;
    /// x87's top-of-stack index.
    pub const X87_TOP: u8 = 108;
    /// The eight x87 tag bytes (1: full).
    pub const X87_TAGS: u8 = 109;
    /// The x87 rounding mode.
    pub const X87_ROUNDING: u8 = 110;
    /// The x87 condition bits C3..C0, where the status word keeps them.
    pub const X87_CONDITION: u8 = 111;

    /// Bytes 0..8 of `xmm{n}` (bytes 8..16 are the next piece).
    pub const fn xmm(n: u8) -> u8 {
        32 + 2 * n
    }

    /// Bytes 16..24 of `ymm{n}` (24..32 are the next piece).
    pub const fn ymm_upper(n: u8) -> u8 {
        64 + 2 * n
    }

    /// x87 physical register `k`, as a double.
    pub const fn x87(k: u8) -> u8 {
        100 + k
    }
}

/// One record (see the module documentation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StateRecord<'a> {
    /// The records that follow are thread `tid`'s (0: the process's, at
    /// its start).
    Thread(u32),
    /// The thread runs from its step `at` on, until another thread is
    /// scheduled: the threads' steps in the one order they ran.
    Scheduled {
        /// Its steps completed when it was scheduled.
        at: u64,
    },
    /// Registers changed: `(piece, value after)`.
    Registers {
        /// The thread's steps completed when they changed.
        at: u64,
        /// By an instruction (its step is `at - 1`), or not.
        by_instruction: bool,
        /// Each piece changed and its value then.
        changes: Vec<(u8, u64)>,
    },
    /// Memory written: the bytes as they were after.
    Wrote {
        /// The thread's steps completed when it was written.
        at: u64,
        /// By an instruction (its step is `at - 1`), or not.
        by_instruction: bool,
        /// First address.
        address: u64,
        /// The bytes (read in place from a stream, or a register's value
        /// that a store wrote).
        bytes: Cow<'a, [u8]>,
    },
    /// An instruction read memory.
    Read {
        /// Its step + 1.
        at: u64,
        /// First address.
        address: u64,
        /// How many bytes.
        size: u64,
    },
    /// Memory mapped zero-filled.
    Zeroed {
        /// When.
        at: u64,
        /// First address.
        start: u64,
        /// Bytes.
        length: u64,
    },
    /// Memory unmapped.
    Unmapped {
        /// When.
        at: u64,
        /// First address.
        start: u64,
        /// Bytes.
        length: u64,
    },
    /// Memory moved.
    Moved {
        /// When.
        at: u64,
        /// Where it was.
        from: u64,
        /// Where it is.
        to: u64,
        /// Bytes.
        length: u64,
    },
    /// A file's bytes mapped.
    FileMapped {
        /// When.
        at: u64,
        /// First address.
        start: u64,
        /// Bytes.
        length: u64,
        /// Offset in the file.
        offset: u64,
        /// The file's path when recorded.
        path: &'a [u8],
    },
    /// The stream is whole: nothing follows (the last record of a stream
    /// [`StateWriter::finish`] ended).
    End,
    /// A signal is delivered to the thread: what its records say after
    /// this one, until its next step, is the delivery's (the signal frame
    /// written, the handler's registers); before it, the thread stood
    /// interrupted at `ip`.
    SignalDelivered {
        /// The thread's steps completed when it was delivered.
        at: u64,
        /// The signal's number.
        signal: u32,
        /// Where the thread was interrupted: the instruction it runs when
        /// the handler returns (a faulting one, again).
        ip: u64,
    },
}

/// What both ends keep to code differences: per thread, the last `at` and
/// register values; the last address.
#[derive(Debug, Default, Clone)]
struct DeltaState {
    tid: u32,
    /// Every thread's, in the order first met (a few: looked up only when
    /// the stream changes threads).
    threads: Vec<(u32, ThreadDeltas)>,
    /// The index of `tid`'s in `threads`, once it has one.
    current: usize,
    address: u64,
}

#[derive(Debug, Clone)]
struct ThreadDeltas {
    at: u64,
    pieces: Box<[u64; piece::COUNT]>,
}

impl Default for ThreadDeltas {
    fn default() -> Self {
        ThreadDeltas { at: 0, pieces: Box::new([0; piece::COUNT]) }
    }
}

impl DeltaState {
    /// The index of `tid`'s differences (made if new).
    fn index(&mut self) -> usize {
        if self.threads.get(self.current).is_none_or(|(tid, _)| *tid != self.tid) {
            let tid = self.tid;
            self.current = self.threads.iter().position(|(t, _)| *t == tid).unwrap_or_else(|| {
                self.threads.push((tid, ThreadDeltas::default()));
                self.threads.len() - 1
            });
        }
        self.current
    }

    fn thread(&mut self) -> &mut ThreadDeltas {
        let index = self.index();
        &mut self.threads[index].1
    }
}

impl StateRecord<'_> {
    /// When it took effect (0 for [`StateRecord::Thread`]).
    pub fn at(&self) -> u64 {
        match self {
            StateRecord::Thread(_) | StateRecord::End => 0,
            StateRecord::Scheduled { at }
            | StateRecord::Registers { at, .. }
            | StateRecord::Wrote { at, .. }
            | StateRecord::Read { at, .. }
            | StateRecord::Zeroed { at, .. }
            | StateRecord::Unmapped { at, .. }
            | StateRecord::Moved { at, .. }
            | StateRecord::FileMapped { at, .. }
            | StateRecord::SignalDelivered { at, .. } => *at,
        }
    }
}

mod forms;
mod machine;
mod reader;
mod schedule;
mod writer;

pub use machine::{set_pieces, StateMachine};
pub use reader::{state_records, StateError, StateRecords, StreamPosition};
pub use schedule::{schedule, schedule_of, Delivery, Schedule};
pub use writer::StateWriter;

#[cfg(test)]
mod tests;
