//! What the replay engine asks of a recorded past: its steps in one global
//! order, the searches a move needs, the state it knows, and what the
//! debugger is told of it (`monitor record status`, `goto`, `history`).
//! A saved trace's timeline, a full-state recording and a live recording's
//! state log are its implementations; the engine needs nothing else of
//! them.

use std::ops::Range;

use crate::arch::Regs;
use crate::inferior::{HistoryListing, HistoryRequest, HistorySource, InferiorError};

/// A position of a history: the program stands *before* the step of this
/// index (the history's length: after its last step). Ordered as the
/// steps ran, as rr's `Mark`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Position(pub u64);

impl Position {
    /// Before the first step.
    pub const START: Position = Position(0);

    /// The steps before it.
    pub fn index(self) -> u64 {
        self.0
    }

    /// After the step standing here.
    pub fn next(self) -> Position {
        Position(self.0.saturating_add(1))
    }
}

/// A thread of a history: its Linux tid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ThreadId(pub u64);

impl ThreadId {
    /// gdbstub's id of the thread (1 for a thread id 0, which no thread has).
    pub fn gdb(self) -> gdbstub::common::Tid {
        gdbstub::common::Tid::new(self.0 as usize).unwrap_or(gdbstub::common::Tid::new(1).expect("1 is not 0"))
    }
}

/// A thread's instruction as `retrace dump instructions` and the debugger
/// number them (an item id of a saved trace, a step count of a live
/// recording).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct InstructionId(pub u64);

/// One step of a history.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HistoryStep {
    /// The thread that ran it.
    pub thread: ThreadId,
    /// Its instruction's address.
    pub pc: u64,
}

/// A recorded past: every thread's steps in one global order, and the
/// searches moving through it needs. What a history does not record (the
/// bytes a trace's instructions wrote) it answers with `None`, `false` or
/// zero bytes: unknown, never guessed.
pub trait History {
    /// Steps recorded.
    fn len(&self) -> u64;

    /// Whether nothing was recorded.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The last position the program can stand at: after the last step
    /// ([`Self::len`]) where the state there is known (the live process, a
    /// recording with full state), else before the last step.
    fn end(&self) -> Position {
        Position(self.len())
    }

    /// The step at `at`.
    fn step(&self, at: Position) -> Option<HistoryStep>;

    /// The thread a stop at `at` is reported for: the one whose step is
    /// there (the last one's at the end).
    fn thread_at(&self, at: Position) -> ThreadId;

    /// Thread `thread`'s latest step before `before`.
    fn previous_of_thread(&self, thread: ThreadId, before: Position) -> Option<Position>;

    /// Thread `thread`'s first step at or after `from`.
    fn next_of_thread(&self, thread: ThreadId, from: Position) -> Option<Position>;

    /// The latest step before `before` at one of `addresses` (sorted).
    fn last_pc_before(&self, addresses: &[u64], before: Position) -> Option<Position>;

    /// The first step at or after `from` at one of `addresses` (sorted).
    fn first_pc_from(&self, addresses: &[u64], from: Position) -> Option<Position>;

    /// The latest step before `before` that wrote a byte of `range`.
    fn last_write_before(&self, _range: Range<u64>, _before: Position) -> Option<Position> {
        None
    }

    /// The first step at or after `from` that wrote a byte of `range`.
    fn first_write_from(&self, _range: Range<u64>, _from: Position) -> Option<Position> {
        None
    }

    /// The latest step before `before` whose instruction read a byte of
    /// `range`.
    fn last_read_before(&self, _range: Range<u64>, _before: Position) -> Option<Position> {
        None
    }

    /// The first step at or after `from` whose instruction read a byte of
    /// `range`.
    fn first_read_from(&self, _range: Range<u64>, _from: Position) -> Option<Position> {
        None
    }

    /// Whether the step at `at` wrote a byte of `range`.
    fn wrote(&self, _at: Position, _range: &Range<u64>) -> bool {
        false
    }

    /// Why a watchpoint cannot stop a move through this history, if it
    /// cannot (it keeps the order of instructions, not what they write).
    fn watchpoints_refused(&self) -> Option<&'static str> {
        None
    }

    /// Thread `thread`'s registers at `at` (those not known marked
    /// unavailable); `None` where the history says nothing of the thread.
    fn registers_at(&self, _thread: ThreadId, _at: Position) -> Option<Regs> {
        None
    }

    /// Memory at `at` from `address`: how many bytes of `buf` are known
    /// (0: none).
    fn memory_at(&self, _at: Position, _address: u64, _buf: &mut [u8]) -> usize {
        0
    }

    /// What was recorded, and how (`monitor record status`).
    fn source(&self) -> HistorySource;

    /// Instructions recorded (signal deliveries, steps of their own, not
    /// counted).
    fn instructions(&self) -> u64;

    /// Every thread of the history and its instructions.
    fn threads(&self) -> Vec<(ThreadId, u64)>;

    /// The id of thread `thread`'s instruction at `at` (the next it runs).
    fn instruction_id(&self, thread: ThreadId, at: Position) -> InstructionId;

    /// Where thread `thread`'s instruction `id` runs.
    fn position_of_instruction(&self, thread: ThreadId, id: InstructionId) -> Result<Position, InferiorError>;

    /// A thread's instructions in a frame, newest first, looking back from
    /// `at` (`monitor history`).
    fn frame_listing(&self, request: &HistoryRequest, at: Position) -> Result<HistoryListing, InferiorError>;
}
