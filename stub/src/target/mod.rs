//! What the protocol side debugs. A target is a gdbstub `Target`
//! (registers, memory, breakpoints, threads, resume actions — gdbstub's
//! extension traits say which it has) that is also an [`Inferior`]: the
//! one small interface through which the session ([`crate::protocol`])
//! learns that the program stopped and ends the session with it. rr's gdb
//! server talks to its replay sessions through one such interface; so does
//! this one.
//!
//! * [`live`] — a process running now, under ptrace;
//! * [`inert`] — a program in buffers that never runs (its threads stop as
//!   soon as they are resumed): what the protocol side is fuzzed against.
//!
//! The recorded history (`--record`) and a saved trace (`--replay`) are to
//! be targets of their own behind the same interface.

use std::os::fd::BorrowedFd;

use gdbstub::stub::MultiThreadStopReason;
use gdbstub::target::Target;

use crate::arch::X86_64Linux;

pub mod inert;
pub mod live;

/// A stop reason to report to the client (thread ids are Linux tids).
pub type StopReason = MultiThreadStopReason<u64>;

/// What the session needs of a debugged program besides gdbstub's
/// [`Target`].
pub trait Inferior: Target<Arch = X86_64Linux, Error = String> {
    /// The process id the client is told (`qProcessInfo`, thread ids).
    fn pid(&self) -> u32;

    /// Called once before the session starts: set up what
    /// [`Self::stop_events`] returns.
    fn start_session(&mut self) -> std::io::Result<()>;

    /// Whether the program has this thread (a Linux tid) now.
    fn has_thread(&self, tid: u64) -> bool;

    /// A descriptor that becomes readable when the program may have
    /// stopped (the session waits on it and on the client at once); `None`
    /// when stops are known without waiting.
    fn stop_events(&self) -> Option<BorrowedFd<'_>>;

    /// After a resume: the stop to report, once there is one. Never blocks.
    fn poll_stop(&mut self) -> Option<StopReason>;

    /// The client asked for a stop (Ctrl-C): the program is stopped and
    /// [`Self::poll_stop`] reports it (SIGINT).
    fn interrupt(&mut self);

    /// The body of the `qMemoryRegionInfo` reply for `address`.
    fn memory_region_info(&self, address: u64) -> Vec<u8>;

    /// The client killed the program, or went away: it must not outlive
    /// the session.
    fn kill(&mut self);

    /// The client detached: the program runs on without the debugger.
    fn detach(&mut self);
}
