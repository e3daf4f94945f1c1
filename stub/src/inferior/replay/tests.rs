use gdbstub::common::Signal as GdbSignal;

use super::*;
use crate::inferior::{GotoTarget, HistoryListing, HistoryOps, HistoryRequest, HistorySource, InferiorError, Movement, StopNote};

/// A history of steps `(tid, pc)` that knows no data; its end is after
/// its last step, or before it (`before_the_last`, as a saved trace's).
#[derive(Clone)]
struct Steps {
    steps: Vec<(u64, u64)>,
    before_the_last: bool,
}

impl Steps {
    fn at(&self, at: Position) -> Option<(u64, u64)> {
        self.steps.get(at.0 as usize).copied()
    }
}

impl History for Steps {
    fn len(&self) -> u64 {
        self.steps.len() as u64
    }
    fn end(&self) -> Position {
        Position(self.len() - u64::from(self.before_the_last))
    }
    fn step(&self, at: Position) -> Option<HistoryStep> {
        self.at(at).map(|(tid, pc)| HistoryStep { thread: ThreadId(tid), pc })
    }
    fn thread_at(&self, at: Position) -> ThreadId {
        ThreadId(self.at(at).or_else(|| self.at(Position(at.0.checked_sub(1)?))).map_or(1, |s| s.0))
    }
    fn previous_of_thread(&self, thread: ThreadId, before: Position) -> Option<Position> {
        (0..before.0.min(self.len())).rev().map(Position).find(|&p| self.at(p).unwrap().0 == thread.0)
    }
    fn next_of_thread(&self, thread: ThreadId, from: Position) -> Option<Position> {
        (from.0..self.len()).map(Position).find(|&p| self.at(p).unwrap().0 == thread.0)
    }
    fn last_pc_before(&self, addresses: &[u64], before: Position) -> Option<Position> {
        (0..before.0.min(self.len())).rev().map(Position).find(|&p| addresses.contains(&self.at(p).unwrap().1))
    }
    fn first_pc_from(&self, addresses: &[u64], from: Position) -> Option<Position> {
        (from.0..self.len()).map(Position).find(|&p| addresses.contains(&self.at(p).unwrap().1))
    }
    fn source(&self) -> HistorySource {
        HistorySource::Recording { mode: "branch", bytes: 0, watchpoints_refused: self.watchpoints_refused() }
    }
    fn watchpoints_refused(&self) -> Option<&'static str> {
        Some("no data")
    }
    fn instructions(&self) -> u64 {
        self.len()
    }
    fn threads(&self) -> Vec<(ThreadId, u64)> {
        vec![(ThreadId(1), 4), (ThreadId(2), 3)]
    }
    /// A thread's steps before `at`.
    fn instruction_id(&self, thread: ThreadId, at: Position) -> InstructionId {
        InstructionId(self.steps[..at.0.min(self.len()) as usize].iter().filter(|s| s.0 == thread.0).count() as u64)
    }
    fn position_of_instruction(&self, thread: ThreadId, id: InstructionId) -> Result<Position, InferiorError> {
        (0..self.len()).map(Position).find(|&p| self.at(p).unwrap().0 == thread.0 && self.instruction_id(thread, p) == id).ok_or(InferiorError::InvalidRequest("none".into()))
    }
    fn frame_listing(&self, request: &HistoryRequest, _at: Position) -> Result<HistoryListing, InferiorError> {
        Ok(HistoryListing { tid: request.tid.unwrap_or(1), id: 0, steps: vec![] })
    }
}

fn history() -> Steps {
    // Thread 1 at 0x10.., thread 2 at 0x20.., interleaved.
    Steps { steps: vec![(1, 0x10), (1, 0x11), (2, 0x20), (1, 0x12), (2, 0x21), (1, 0x10), (2, 0x22)], before_the_last: false }
}

fn tid(n: u64) -> gdbstub::common::Tid {
    ThreadId(n).gdb()
}

fn trapped(n: u64) -> StopReason {
    StopReason::SignalWithThread { tid: tid(n), signal: GdbSignal::SIGTRAP }
}

/// A session standing at `at` with software breakpoints at `addresses`.
fn session(at: u64, addresses: &[u64]) -> ReplaySession {
    let mut session = ReplaySession::new();
    session.stand_at(Position(at));
    for &address in addresses {
        session.breakpoints_mut().insert_software(address);
    }
    session
}

fn over<'a>(session: &'a mut ReplaySession, history: &Steps) -> Replay<'a> {
    Replay::new(session, Box::new(history.clone()))
}

#[test]
fn backwards_to_breakpoints_then_the_beginning() {
    let h = history();
    let mut s = session(7, &[0x10]);
    let mut r = over(&mut s, &h);
    assert_eq!(r.run_backwards(), StopReason::SwBreak(tid(1)));
    assert_eq!(r.position(), Position(5));
    assert_eq!(r.run_backwards(), StopReason::SwBreak(tid(1)));
    assert_eq!(r.position(), Position(0));
    assert_eq!(r.run_backwards(), StopReason::ReplayLog { tid: Some(tid(1)), pos: ReplayLogPosition::Begin });
    assert_eq!(r.position(), Position(0));
}

#[test]
fn a_reverse_step_skips_the_other_threads() {
    let h = history();
    let mut s = session(5, &[]);
    let mut r = over(&mut s, &h);
    assert_eq!(r.step_backwards(ThreadId(2)), trapped(2));
    assert_eq!(r.position(), Position(4));
    assert_eq!(r.step_backwards(ThreadId(2)), trapped(2));
    assert_eq!(r.position(), Position(2));
    assert_eq!(r.step_backwards(ThreadId(2)), StopReason::ReplayLog { tid: Some(tid(2)), pos: ReplayLogPosition::Begin });
    assert_eq!(r.position(), Position(2));
}

#[test]
fn forwards_a_breakpoint_traps_before_its_step_and_a_step_runs_one() {
    let h = history();
    let mut s = session(0, &[0x21]);
    let mut r = over(&mut s, &h);
    assert_eq!(r.run_forwards(None), Forward::Stopped(StopReason::SwBreak(tid(2))));
    assert_eq!(r.position(), Position(4));
    // Stepping from it traps again, as an inserted breakpoint does on
    // the processor…
    assert_eq!(r.run_forwards(Some(ThreadId(2))), Forward::Stopped(StopReason::SwBreak(tid(2))));
    assert_eq!(r.position(), Position(4));
    // …so a debugger steps off it with it removed: thread 2's step runs.
    r.session.breakpoints_mut().remove_software(0x21);
    assert_eq!(r.run_forwards(Some(ThreadId(2))), Forward::Stopped(trapped(2)));
    assert_eq!(r.position(), Position(5));
    r.session.breakpoints_mut().insert_software(0x21);
    // Thread 1 steps: its step at 5 runs.
    assert_eq!(r.run_forwards(Some(ThreadId(1))), Forward::Stopped(trapped(1)));
    assert_eq!(r.position(), Position(6));
    // Thread 1 runs no more: the end, where the session stands at the end
    // of the history (a live recording's present).
    assert_eq!(r.run_forwards(Some(ThreadId(1))), Forward::End);
    assert_eq!(r.position(), Position(7));
    drop(r);
    assert_eq!(s.past(), None);
}

#[test]
fn where_the_end_is_before_the_last_step_its_breakpoint_still_stops() {
    let h = Steps { before_the_last: true, ..history() };
    let mut s = session(0, &[0x22]);
    let mut r = over(&mut s, &h);
    assert_eq!(r.run_forwards(None), Forward::Stopped(StopReason::SwBreak(tid(2))));
    assert_eq!(r.position(), Position(6));
    assert_eq!(r.run_forwards(Some(ThreadId(2))), Forward::Stopped(StopReason::SwBreak(tid(2))));
    r.session.breakpoints_mut().remove_software(0x22);
    assert_eq!(r.run_forwards(None), Forward::End);
    assert_eq!(r.run_forwards(Some(ThreadId(2))), Forward::End);
    assert_eq!(r.position(), Position(6));
}

#[test]
fn a_continue_right_after_a_breakpoint_stop_runs_its_instruction() {
    // GDB takes the breakpoints of a library it was told is not loaded
    // for gone, without removing them, and continues from a stop at
    // one without stepping off it: trapping there again would never
    // end (each stop is one GDB does not know, so it continues).
    let h = history();
    let mut s = session(0, &[0x10]);
    let mut r = over(&mut s, &h);
    assert_eq!(r.run_forwards(None), Forward::Stopped(StopReason::SwBreak(tid(1))));
    assert_eq!(r.position(), Position(0));
    assert_eq!(r.run_forwards(None), Forward::Stopped(StopReason::SwBreak(tid(1))));
    assert_eq!(r.position(), Position(5));
    assert_eq!(r.run_forwards(None), Forward::End);
    assert_eq!(r.position(), Position(h.len()));
    // Arriving other than at a breakpoint's stop (a reverse step), the
    // breakpoint where it stands traps as on the processor.
    r.session.breakpoints_mut().remove_software(0x10);
    r.run_backwards();
    r.session.breakpoints_mut().insert_software(0x10);
    assert_eq!(r.position(), Position(0));
    assert_eq!(r.run_forwards(None), Forward::Stopped(StopReason::SwBreak(tid(1))));
    assert_eq!(r.position(), Position(0));
    let mut s = session(6, &[0x10]);
    let mut r = over(&mut s, &h);
    assert_eq!(r.step_backwards(ThreadId(1)), trapped(1));
    assert_eq!(r.position(), Position(5));
    assert_eq!(r.run_forwards(None), Forward::Stopped(StopReason::SwBreak(tid(1))));
    assert_eq!(r.position(), Position(5));
}

#[test]
fn an_armed_resume_goes_where_it_was_armed_and_says_so() {
    let h = history();
    let mut s = session(7, &[0x12]);
    let mut r = over(&mut s, &h);
    r.session.arm(Position(3), false);
    // At a breakpoint: its stop, and no note.
    assert_eq!(r.take_armed(false), Some(StopReason::SwBreak(tid(1))));
    assert!(!r.session.is_armed());
    assert_eq!(r.session.take_note(), None);
    r.session.arm(Position(1), true);
    // A held arming survives a step.
    assert_eq!(r.take_armed(true), Some(trapped(1)));
    assert_eq!(r.session.take_note(), Some(StopNote::ArrivedWhereArmed));
    assert!(r.session.is_armed());
    assert!(r.take_armed(false).is_some());
    assert!(r.session.take_stood_still());
    assert!(!r.session.take_stood_still());
    assert_eq!(r.take_armed(false), None);
}

#[test]
fn a_goto_arms_the_next_resume_where_a_threads_instruction_runs() {
    let h = history();
    let mut s = session(7, &[]);
    let mut r = over(&mut s, &h);
    // Thread 2's instruction 1 (its second) is at 4.
    let stop = r.goto(GotoTarget::Instruction { id: 1, tid: Some(2) }, false).unwrap();
    assert_eq!((stop.tid, stop.id, stop.pc), (2, 1, Some(0x21)));
    assert_eq!(r.take_armed(false), Some(trapped(2)));
    assert_eq!(r.position(), Position(4));
    let status = r.history_status();
    assert_eq!((status.position.tid, status.position.id, status.position.index, status.position.pc, status.position.present), (2, 1, 4, Some(0x21), false));
    let end = r.goto(GotoTarget::End, false).unwrap();
    assert_eq!(end.pc, None, "the end of the history, after its last step");
    r.take_armed(false);
    assert!(r.history_status().position.present);
    assert!(r.goto(GotoTarget::Instruction { id: 9, tid: Some(1) }, false).is_err());
}

#[test]
fn the_session_refuses_moves_without_a_history_and_watched_moves_its_history_cannot_stop() {
    let h = history();
    let mut s = ReplaySession::new();
    assert_eq!(s.refusal(Movement::ReverseContinue, None), Some(NOT_RECORDED));
    assert_eq!(s.refusal(Movement::ReverseStep, None), Some(NOT_RECORDED));
    assert_eq!(s.refusal(Movement::ForwardContinue, None), None, "a live program runs on");
    assert_eq!(s.refusal(Movement::ReverseContinue, Some(&h)), None);
    s.breakpoints_mut().take_slot(DebugSlot { address: 0x100, len: 4, watch: Some(gdbstub::target::ext::breakpoints::WatchKind::Write) });
    assert_eq!(s.refusal(Movement::ReverseContinue, Some(&h)), Some("no data"));
    assert_eq!(s.refusal(Movement::ReverseStep, Some(&h)), None, "one instruction back: no watchpoint to miss");
    assert_eq!(s.refusal(Movement::ForwardContinue, Some(&h)), None, "at the end: the live process runs");
    s.stand_at(Position(3));
    assert_eq!(s.refusal(Movement::ForwardContinue, Some(&h)), Some("no data"), "through the past");
    s.arm(Position(1), false);
    assert_eq!(s.refusal(Movement::ReverseContinue, Some(&h)), None, "an armed resume goes where it was armed");
}

/// An inferior over [`history`] that counts the moves it prepared for.
struct Recorded {
    session: ReplaySession,
    history: Steps,
    moves_prepared: usize,
}

impl TimeTravel for Recorded {
    fn replay(&mut self) -> Option<Replay<'_>> {
        Some(Replay::new(&mut self.session, Box::new(self.history.clone())))
    }
    fn session(&mut self) -> &mut ReplaySession {
        &mut self.session
    }
    fn before_move(&mut self) {
        self.moves_prepared += 1;
    }
}

#[test]
fn the_moves_of_any_inferior_prepare_then_take_an_arming() {
    let mut inferior = Recorded { session: session(7, &[0x10]), history: history(), moves_prepared: 0 };
    assert_eq!(reverse_continue(&mut inferior), StopReason::SwBreak(tid(1)));
    assert_eq!(inferior.session.past(), Some(Position(5)));
    // An armed resume goes there, and says it arrived.
    inferior.session.arm(Position(2), false);
    assert_eq!(reverse_step(&mut inferior, ThreadId(1)), trapped(2));
    assert_eq!(inferior.session.past(), Some(Position(2)));
    assert_eq!(inferior.session.take_note(), Some(StopNote::ArrivedWhereArmed));
    assert_eq!(reverse_step(&mut inferior, ThreadId(1)), trapped(1));
    assert_eq!(inferior.session.past(), Some(Position(1)));
    assert_eq!(inferior.moves_prepared, 3);
}
