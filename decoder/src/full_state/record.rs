//! The stream's records ([`StateRecord`]), the register pieces they name,
//! and the magic a stream starts with.

use std::borrow::Cow;

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
    /// `rsp` (one of [`GENERAL`]): the stack forms count from it.
    pub const RSP: u8 = 7;
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
    /// Memory mapped, or its protection changed: what the program may do
    /// with it from then on, and what it is.
    Protected {
        /// When.
        at: u64,
        /// First address.
        start: u64,
        /// Bytes.
        length: u64,
        /// Readable [`PROT_READ`], writable [`PROT_WRITE`], executable
        /// [`PROT_EXEC`]; the heap [`KIND_HEAP`], the main stack
        /// [`KIND_STACK`] (neither: what the memory was); mapped as touched
        /// [`KIND_GROWS`].
        prot: u8,
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
        /// The signal's number; 0 for the fatal signal that ended the
        /// program (the stream's last delivery, which no handler follows:
        /// the recording's end names the signal).
        signal: u32,
        /// Where the thread was interrupted: the instruction it runs when
        /// the handler returns (a faulting one, again).
        ip: u64,
    },
}

/// [`StateRecord::Protected`]: readable.
pub const PROT_READ: u8 = 1;
/// [`StateRecord::Protected`]: writable.
pub const PROT_WRITE: u8 = 2;
/// [`StateRecord::Protected`]: executable.
pub const PROT_EXEC: u8 = 4;
/// [`StateRecord::Protected`]: the memory is the heap (`brk`).
pub const KIND_HEAP: u8 = 8;
/// [`StateRecord::Protected`]: the memory is the main thread's stack.
pub const KIND_STACK: u8 = 16;
/// [`StateRecord::Protected`]: the memory is mapped only as the program
/// touches it, down from its top (the main stack's reserve, which grows on
/// a fault as the kernel grows a stack): below the lowest byte touched so
/// far, nothing is mapped.
pub const KIND_GROWS: u8 = 32;

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
            | StateRecord::Protected { at, .. }
            | StateRecord::Moved { at, .. }
            | StateRecord::FileMapped { at, .. }
            | StateRecord::SignalDelivered { at, .. } => *at,
        }
    }
}
