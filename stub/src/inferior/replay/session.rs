//! A replay session: what a debugged program's replay owns whatever its
//! history — where the debugger stands, the breakpoint table, the resume
//! `monitor goto` armed, the stop to report and its note, what happens at
//! the end of the history, and which moves are refused — and, over a
//! history, the moves (as rr's `ReplayTimeline` owns its marks and moves).
//!
//! A position is a step of the history not yet run: the program stands
//! *before* it. Only steps that can stop a move are visited: the history's
//! indexes find the next or previous step at a breakpoint's address, or
//! that wrote or read a watched byte, without walking the steps between.

use gdbstub::common::Signal as GdbSignal;
use gdbstub::target::ext::base::reverse_exec::ReplayLogPosition;
use gdbstub::target::ext::breakpoints::WatchKind;

use super::breakpoints::Breakpoints;
use super::history::{History, InstructionId, Position, ThreadId};
use crate::inferior::{
    Armed, GotoStop, GotoTarget, HistoryListing, HistoryOps, HistoryPosition, HistoryRequest, HistoryStatus, InferiorError, Movement, StopNote, StopReason,
};

/// Why a reverse command is refused without a recording.
pub const NOT_RECORDED: &str = "this program is not recorded, so it cannot run backwards: start it with retrace-stub --record (every register and byte) or --record=branch (the instructions only); a trace started with `process trace start` or `record btrace pt` is read with the client's own trace commands";

/// How a forward move ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Forward {
    /// It stopped in the history.
    Stopped(StopReason),
    /// It reached the end of the history ([`History::end`]): the caller
    /// says what happens there (the live process runs on, a replay reports
    /// the boundary).
    End,
}

/// What a debugged program's replay owns, with or without a history (a
/// live process not recorded has breakpoints and stops too).
#[derive(Debug, Clone, Default)]
pub struct ReplaySession {
    /// Where the debugger stands; `None`: at the end of the history (a
    /// live recording's present, which moves on as it records).
    at: Option<Position>,
    armed: Option<Armed>,
    /// The last armed resume did not move (a continue to where it stood).
    stood_still: bool,
    /// The last move stopped for a breakpoint at this position.
    stopped_at_breakpoint: Option<Position>,
    breakpoints: Breakpoints,
    /// The stop the next wait reports.
    stop: Option<StopReason>,
    /// What the next stop reply says beyond its reason.
    note: Option<StopNote>,
    /// A forward move reaching the end of a live recording runs the
    /// process on (LLDB's reverse tests expect it) rather than stopping
    /// there (GDB's `record full`).
    runs_on_at_end: bool,
}

impl ReplaySession {
    /// A session standing at the end of its history.
    pub fn new() -> Self {
        ReplaySession::default()
    }

    /// The breakpoint table.
    pub fn breakpoints(&self) -> &Breakpoints {
        &self.breakpoints
    }

    /// The breakpoint table, to change.
    pub fn breakpoints_mut(&mut self) -> &mut Breakpoints {
        &mut self.breakpoints
    }

    /// Where the debugger stands, when not at the end of the history.
    pub fn past(&self) -> Option<Position> {
        self.at
    }

    /// Where the debugger stands in `history`.
    pub fn position(&self, history: &dyn History) -> Position {
        self.at.unwrap_or(history.end())
    }

    /// Stands at `at` (a new history, a restart).
    pub fn stand_at(&mut self, at: Position) {
        self.at = Some(at);
        self.stopped_at_breakpoint = None;
    }

    /// Stands at the end of a history started anew (an exec), nothing
    /// armed.
    pub fn restart(&mut self) {
        self.at = None;
        self.armed = None;
        self.stopped_at_breakpoint = None;
    }

    /// The next resume goes to `at`, whatever it asks (`hold`: a single
    /// step lands there without using the arming up).
    pub fn arm(&mut self, at: Position, hold: bool) {
        self.armed = Some(Armed { position: at.index(), hold });
    }

    /// Whether a resume is armed.
    pub fn is_armed(&self) -> bool {
        self.armed.is_some()
    }

    /// Whether the last armed resume did not move (asked once).
    pub fn take_stood_still(&mut self) -> bool {
        std::mem::take(&mut self.stood_still)
    }

    /// Keeps the stop the next wait reports.
    pub fn report(&mut self, stop: StopReason) {
        self.stop = Some(stop);
    }

    /// Keeps `stop` unless one is kept already.
    pub fn report_unless_reported(&mut self, stop: impl FnOnce() -> StopReason) {
        if self.stop.is_none() {
            self.stop = Some(stop());
        }
    }

    /// The stop to report, once.
    pub fn take_stop(&mut self) -> Option<StopReason> {
        self.stop.take()
    }

    /// Keeps what the next stop reply says beyond its reason.
    pub fn note(&mut self, note: StopNote) {
        self.note = Some(note);
    }

    /// Whether a note is kept for the next stop reply.
    pub fn has_note(&self) -> bool {
        self.note.is_some()
    }

    /// What the next stop reply says beyond its reason, once.
    pub fn take_note(&mut self) -> Option<StopNote> {
        self.note.take()
    }

    /// From now on a forward move reaching the end of a live recording
    /// runs the process on (the client is LLDB).
    pub fn run_on_at_end(&mut self) {
        self.runs_on_at_end = true;
    }

    /// Whether a forward move stops at the end of the history.
    pub fn stops_at_end(&self) -> bool {
        !self.runs_on_at_end
    }

    /// Why `movement` cannot be made now over `history` (`None`: there is
    /// none), if it cannot: the one place moves are refused. An armed
    /// resume is never refused (it goes where it was armed).
    pub fn refusal(&self, movement: Movement, history: Option<&dyn History>) -> Option<&'static str> {
        if self.armed.is_some() {
            return None;
        }
        let Some(history) = history else { return (movement != Movement::ForwardContinue).then_some(NOT_RECORDED) };
        let moves_through_history = match movement {
            Movement::ReverseContinue => true,
            Movement::ForwardContinue => self.at.is_some(),
            // (One instruction: GDB steps off a breakpoint so, and would
            // take a refusal for a reason to retry.)
            Movement::ReverseStep => false,
        };
        if moves_through_history && self.breakpoints.watching() {
            history.watchpoints_refused()
        } else {
            None
        }
    }
}

/// A replay session over its history: the moves, and what the debugger is
/// told of the history ([`HistoryOps`]).
pub struct Replay<'a> {
    /// The session.
    pub session: &'a mut ReplaySession,
    /// Its history.
    pub history: Box<dyn History + 'a>,
}

impl std::fmt::Debug for Replay<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replay").field("session", &self.session).field("len", &self.history.len()).finish()
    }
}

/// A boundary stop at `at`.
pub fn boundary(history: &dyn History, at: Position, pos: ReplayLogPosition) -> StopReason {
    StopReason::ReplayLog { tid: Some(history.thread_at(at).gdb()), pos }
}

fn trapped(thread: ThreadId) -> StopReason {
    StopReason::SignalWithThread { tid: thread.gdb(), signal: GdbSignal::SIGTRAP }
}

impl<'a> Replay<'a> {
    /// `session` over `history`.
    pub fn new(session: &'a mut ReplaySession, history: Box<dyn History + 'a>) -> Self {
        Replay { session, history }
    }

    /// Where the debugger stands.
    pub fn position(&self) -> Position {
        self.session.position(&*self.history)
    }

    /// Stands at `at` (at the end of the history: at its end, which a live
    /// recording moves on).
    fn stand(&mut self, at: Position) {
        self.session.at = (at < self.history.end()).then_some(at);
    }

    /// A stop where the debugger stands, remembered when it is a
    /// breakpoint's.
    fn stopped(&mut self, stop: StopReason) -> StopReason {
        let at_breakpoint = matches!(stop, StopReason::SwBreak(_) | StopReason::HwBreak(_));
        self.session.stopped_at_breakpoint = at_breakpoint.then_some(self.position());
        stop
    }

    /// The stop for a breakpoint at `at`, if one is there.
    fn breakpoint_at(&self, at: Position) -> Option<StopReason> {
        let step = self.history.step(at)?;
        let table = &self.session.breakpoints;
        if table.has_software(step.pc) {
            return Some(StopReason::SwBreak(step.thread.gdb()));
        }
        table.has_hardware(step.pc).then(|| StopReason::HwBreak(step.thread.gdb()))
    }

    /// A watchpoint the step at `at` triggers: a write watchpoint whose
    /// bytes it wrote (the same value again too, as the processor's debug
    /// registers trigger: GDB's `watch` and LLDB's `-w modify` ask for a
    /// changed value themselves, LLDB's `-w write` stops at any write), a
    /// read one whose bytes its instruction read, an access one whose
    /// bytes it read or wrote.
    fn watch_triggered_by(&self, at: Position) -> Option<StopReason> {
        let step = self.history.step(at)?;
        for (watched, kind) in self.session.breakpoints.watches() {
            let stop = || StopReason::Watch { tid: step.thread.gdb(), kind, addr: watched.start };
            if kind != WatchKind::Write && self.history.last_read_before(watched.clone(), at.next()) == Some(at) {
                return Some(stop());
            }
            if kind != WatchKind::Read && self.history.wrote(at, &watched) {
                return Some(stop());
            }
        }
        None
    }

    /// A resume armed by `monitor goto` goes there, whatever it asked
    /// (`stepping`: a single step); `None` when none is armed. Arriving
    /// other than at a breakpoint, the stop says so ([`StopNote::ArrivedWhereArmed`]).
    pub fn take_armed(&mut self, stepping: bool) -> Option<StopReason> {
        let at = Position(Armed::take(&mut self.session.armed, stepping)?);
        self.session.stood_still = !stepping && at == self.position();
        self.stand(at);
        // Arriving where a breakpoint is: its stop, as on the processor
        // (and a debugger then steps off it before it runs on).
        if let Some(stop) = self.breakpoint_at(at) {
            return Some(self.stopped(stop));
        }
        self.session.stopped_at_breakpoint = None;
        self.session.note(StopNote::ArrivedWhereArmed);
        Some(trapped(self.history.thread_at(at)))
    }

    /// `bc`: back to the latest earlier breakpoint or watched access, or
    /// the start of the history.
    pub fn run_backwards(&mut self) -> StopReason {
        let mut from = self.position();
        let (addresses, (written, read)) = (self.session.breakpoints.addresses(), self.session.breakpoints.watched());
        loop {
            let history = &*self.history;
            let writes = written.iter().filter_map(|range| history.last_write_before(range.clone(), from));
            let reads = read.iter().filter_map(|range| history.last_read_before(range.clone(), from));
            let Some(at) = writes.chain(reads).chain(history.last_pc_before(&addresses, from)).max() else { break };
            // The write is seen before the instruction that made it.
            if let Some(stop) = self.watch_triggered_by(at).or_else(|| self.breakpoint_at(at)) {
                self.stand(at);
                return self.stopped(stop);
            }
            from = at;
        }
        self.stand(Position::START);
        self.session.stopped_at_breakpoint = None;
        boundary(&*self.history, Position::START, ReplayLogPosition::Begin)
    }

    /// `bs`: un-executes thread `thread`'s last step.
    pub fn step_backwards(&mut self, thread: ThreadId) -> StopReason {
        self.session.stopped_at_breakpoint = None;
        let here = self.position();
        match self.history.previous_of_thread(thread, here) {
            Some(at) => {
                self.stand(at);
                trapped(thread)
            }
            None => boundary(&*self.history, here, ReplayLogPosition::Begin),
        }
    }

    /// Forwards through the history: one step of `step` (the other threads
    /// running along until it), or on to a breakpoint or watched access.
    pub fn run_forwards(&mut self, step: Option<ThreadId>) -> Forward {
        let end = self.history.end();
        let from = self.position();
        let stepped_stands_here = step.is_some_and(|t| self.history.step(from).is_some_and(|s| s.thread == t));
        let (addresses, (written, read)) = (self.session.breakpoints.addresses(), self.session.breakpoints.watched());
        // A continue right after a stop at a breakpoint where it stands,
        // without stepping off it first: the debugger holds no breakpoint
        // there (GDB takes those of a library it was told is not loaded
        // for gone, without removing them), so the instruction runs, as it
        // would on the processor; stopping there again would never end.
        let passes_over = step.is_none() && self.session.stopped_at_breakpoint.take() == Some(from);
        let mut at = from;
        while at < end {
            // An inserted breakpoint traps before its instruction runs,
            // also where the resume starts and when the thread standing
            // there is stepped, as on the processor (GDB and LLDB step off
            // a breakpoint first; LLDB steps with it inserted right after
            // a reverse stop).
            if (step.is_none() && !(passes_over && at == from)) || (at == from && stepped_stands_here) {
                if let Some(stop) = self.breakpoint_at(at) {
                    self.stand(at);
                    return Forward::Stopped(self.stopped(stop));
                }
            }
            let Some(here) = self.history.step(at) else { break };
            if let Some(stop) = self.watch_triggered_by(at) {
                self.stand(at.next());
                return Forward::Stopped(stop);
            }
            if step == Some(here.thread) {
                self.stand(at.next());
                return Forward::Stopped(trapped(here.thread));
            }
            // On to the next step that can stop: the stepped thread's, one
            // at a breakpoint (when not stepping), one writing or reading a
            // watched byte.
            let history = &*self.history;
            let next = at.next();
            let stepped = step.and_then(|t| history.next_of_thread(t, next));
            let breakpoint = if step.is_none() { history.first_pc_from(&addresses, next) } else { None };
            let writes = written.iter().filter_map(|range| history.first_write_from(range.clone(), next));
            let reads = read.iter().filter_map(|range| history.first_read_from(range.clone(), next));
            at = writes.chain(reads).chain(stepped).chain(breakpoint).min().unwrap_or(end).min(end);
        }
        self.stand(end);
        // The end stands before a step where the history ends before its
        // last step: a breakpoint there stops as anywhere.
        if (step.is_none() && !(passes_over && from == end)) || (from == end && stepped_stands_here) {
            if let Some(stop) = self.breakpoint_at(end) {
                return Forward::Stopped(self.stopped(stop));
            }
        }
        Forward::End
    }
}

/// The one history capability: every history answers through its session.
impl HistoryOps for Replay<'_> {
    fn history_status(&self) -> HistoryStatus {
        let history = &*self.history;
        let at = self.position();
        let thread = history.thread_at(at);
        HistoryStatus {
            source: history.source(),
            instructions: history.instructions(),
            threads: history.threads().into_iter().map(|(t, n)| (t.0, n)).collect(),
            position: HistoryPosition {
                tid: thread.0,
                id: history.instruction_id(thread, at).0,
                index: at.index(),
                pc: history.step(at).map(|s| s.pc),
                present: at.index() >= history.len(),
            },
        }
    }

    /// `goto begin|end|ID [TID] [--hold]`.
    fn goto(&mut self, target: GotoTarget, hold: bool) -> Result<GotoStop, InferiorError> {
        let history = &*self.history;
        if history.is_empty() {
            return Err(InferiorError::Refused("the history is empty: nothing has run since recording started".into()));
        }
        let at = match target {
            GotoTarget::Begin => Position::START,
            GotoTarget::End => history.end(),
            GotoTarget::Instruction { id, tid } => {
                let thread = tid.map_or_else(|| history.thread_at(self.position()), ThreadId);
                history.position_of_instruction(thread, InstructionId(id))?
            }
        };
        let thread = history.thread_at(at);
        let stop = GotoStop { tid: thread.0, id: history.instruction_id(thread, at).0, pc: history.step(at).map(|s| s.pc) };
        self.session.arm(at, hold);
        Ok(stop)
    }

    fn history(&self, request: &HistoryRequest) -> Result<HistoryListing, InferiorError> {
        self.history.frame_listing(request, self.position())
    }
}
