//! The one replay engine: a [`ReplaySession`] — where the debugger stands
//! in a recorded history, its breakpoints, an armed `monitor goto`, the
//! stop to report — and, over a [`History`], the moves a debugger makes:
//! `bc` (back to the latest earlier breakpoint or watched access), `bs`
//! (un-execute a thread's last instruction), forward continue and step
//! while in the past, `monitor goto` (an armed resume). A saved trace's
//! timeline (with or without its full state) and a live recording's state
//! log are implementations of [`History`]; every target with a history
//! holds a session and hands it its history ([`TimeTravel`]).

use gdbstub::target::ext::base::reverse_exec::ReplayLogPosition;

pub mod breakpoints;
pub mod history;
pub mod session;

pub use breakpoints::{Breakpoints, DebugSlot, DEBUG_REGISTERS};
pub use history::{History, HistoryStep, InstructionId, Position, ThreadId};
pub use session::{boundary, Forward, Replay, ReplaySession, NOT_RECORDED};

use crate::inferior::StopReason;

/// An inferior with a recorded past, as the history moves need it: its
/// session over its history, and where the inferior has a say (a
/// diversion to end before a move). The moves themselves —
/// [`reverse_continue`], [`reverse_step`] and the forward ones of
/// [`Replay`] — are written once, for every inferior;
/// [`offer_reverse_execution`] wires them to gdbstub's reverse
/// capabilities.
pub trait TimeTravel {
    /// The session over the history; `None` when the inferior records no
    /// history.
    fn replay(&mut self) -> Option<Replay<'_>>;

    /// The session (with or without a history).
    fn session(&mut self) -> &mut ReplaySession;

    /// Before a move through the history (a diversion — an expression
    /// evaluated in the past — ends here).
    fn before_move(&mut self) {}
}

/// `bc` on any inferior: an armed resume, else back to the latest earlier
/// breakpoint or watched access. (A move the session refuses never gets
/// here: the protocol answers it, [`ReplaySession::refusal`].)
pub fn reverse_continue(inferior: &mut impl TimeTravel) -> StopReason {
    inferior.before_move();
    match inferior.replay() {
        Some(mut replay) => replay.take_armed(false).unwrap_or_else(|| replay.run_backwards()),
        None => no_history(),
    }
}

/// `bs` on any inferior: an armed resume, else thread `thread`'s last step
/// un-executed.
pub fn reverse_step(inferior: &mut impl TimeTravel, thread: ThreadId) -> StopReason {
    inferior.before_move();
    match inferior.replay() {
        Some(mut replay) => replay.take_armed(true).unwrap_or_else(|| replay.step_backwards(thread)),
        None => no_history(),
    }
}

/// The stop of a move over no history (the protocol refuses such moves
/// first, saying why; this is the stop should one get through).
fn no_history() -> StopReason {
    StopReason::ReplayLog { tid: None, pos: ReplayLogPosition::Begin }
}

/// gdbstub's reverse capabilities (`bc`, `bs`) for an inferior that is
/// [`TimeTravel`]: one implementation for every inferior.
macro_rules! offer_reverse_execution {
    ($target:ty) => {
        impl gdbstub::target::ext::base::reverse_exec::ReverseCont<gdbstub::common::Tid> for $target {
            fn reverse_cont(&mut self) -> Result<(), Self::Error> {
                let stop = crate::inferior::replay::reverse_continue(self);
                crate::inferior::replay::TimeTravel::session(self).report(stop);
                Ok(())
            }
        }

        impl gdbstub::target::ext::base::reverse_exec::ReverseStep<gdbstub::common::Tid> for $target {
            fn reverse_step(&mut self, thread: gdbstub::common::Tid) -> Result<(), Self::Error> {
                let stop = crate::inferior::replay::reverse_step(self, crate::inferior::replay::ThreadId(thread.get() as u64));
                crate::inferior::replay::TimeTravel::session(self).report(stop);
                Ok(())
            }
        }
    };
}
pub(crate) use offer_reverse_execution;

#[cfg(test)]
mod tests;
