//! The one replay engine: a position in a recorded history and the moves a
//! debugger makes over it — `bc` (back to the latest earlier breakpoint or
//! watched access), `bs` (un-execute a thread's last instruction), forward
//! continue and step while in the past, `monitor goto` (an armed resume) —
//! for every history: a saved trace's [`Timeline`](super::timeline::Timeline)
//! and a live recording's [`StateLog`](super::state_log::StateLog) are two
//! implementations of [`History`]; the [`Replayer`] owns the moves once.
//!
//! A position is a step of the history not yet run: the program stands
//! *before* it. Only steps that can stop a move are visited: the history's
//! indexes find the next or previous step at a breakpoint's address, or
//! that wrote or read a watched byte, without walking the steps between.

use std::collections::BTreeSet;
use std::ops::Range;

use gdbstub::common::Signal as GdbSignal;
use gdbstub::target::ext::base::reverse_exec::ReplayLogPosition;
use gdbstub::target::ext::breakpoints::WatchKind;

use crate::arch::Regs;
use crate::inferior::{Armed, Movement, StopNote, StopReason};

/// One step of a history.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    /// The thread that ran it.
    pub tid: u64,
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
    fn end(&self) -> u64 {
        self.len()
    }

    /// The step at `position`.
    fn step(&self, position: u64) -> Option<Step>;

    /// The thread a stop at `position` is reported for: the one whose step
    /// is there (the last one's at the end).
    fn thread_at(&self, position: u64) -> u64;

    /// Thread `tid`'s latest step before `before`.
    fn previous_of_thread(&self, tid: u64, before: u64) -> Option<u64>;

    /// Thread `tid`'s first step at or after `from`.
    fn next_of_thread(&self, tid: u64, from: u64) -> Option<u64>;

    /// The latest step before `before` at one of `addresses` (sorted).
    fn last_pc_before(&self, addresses: &[u64], before: u64) -> Option<u64>;

    /// The first step at or after `from` at one of `addresses` (sorted).
    fn first_pc_from(&self, addresses: &[u64], from: u64) -> Option<u64>;

    /// The latest step before `before` that wrote a byte of `range`.
    fn last_write_before(&self, _range: Range<u64>, _before: u64) -> Option<u64> {
        None
    }

    /// The first step at or after `from` that wrote a byte of `range`.
    fn first_write_from(&self, _range: Range<u64>, _from: u64) -> Option<u64> {
        None
    }

    /// The latest step before `before` whose instruction read a byte of
    /// `range`.
    fn last_read_before(&self, _range: Range<u64>, _before: u64) -> Option<u64> {
        None
    }

    /// The first step at or after `from` whose instruction read a byte of
    /// `range`.
    fn first_read_from(&self, _range: Range<u64>, _from: u64) -> Option<u64> {
        None
    }

    /// Whether step `position` wrote a byte of `range`.
    fn wrote(&self, _position: u64, _range: &Range<u64>) -> bool {
        false
    }

    /// Thread `tid`'s registers at `position` (those not known marked
    /// unavailable); `None` where the history says nothing of the thread.
    fn registers_at(&self, _tid: u64, _position: u64) -> Option<Regs> {
        None
    }

    /// Memory at `position` from `address`: how many bytes of `buf` are
    /// known (0: none).
    fn memory_at(&self, _position: u64, _address: u64, _buf: &mut [u8]) -> usize {
        0
    }
}

/// The processor's debug registers: hardware breakpoints and watchpoints
/// at once, live and on a replay alike.
pub const DEBUG_REGISTERS: usize = 4;

/// What can stop a move: breakpoints (software and hardware, by address)
/// and watchpoints.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Breakpoints {
    /// Software breakpoints' addresses.
    pub software: BTreeSet<u64>,
    /// Hardware breakpoints' addresses.
    pub hardware: BTreeSet<u64>,
    /// Watched ranges and how they are watched.
    pub watches: Vec<(Range<u64>, WatchKind)>,
}

impl Breakpoints {
    /// Every breakpoint address, sorted.
    pub fn addresses(&self) -> Vec<u64> {
        self.software.union(&self.hardware).copied().collect()
    }

    /// Whether a breakpoint is at `pc`.
    pub fn at(&self, pc: u64) -> bool {
        self.software.contains(&pc) || self.hardware.contains(&pc)
    }

    /// The ranges watched for writes (write and access watchpoints) and for
    /// reads (read and access watchpoints).
    fn watched(&self) -> (Vec<Range<u64>>, Vec<Range<u64>>) {
        let ranges = |wanted: WatchKind| {
            self.watches.iter().filter(|(_, kind)| *kind == wanted || *kind == WatchKind::ReadWrite).map(|(range, _)| range.clone()).collect()
        };
        (ranges(WatchKind::Write), ranges(WatchKind::Read))
    }
}

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

/// An armed resume's arrival.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Arrival {
    /// The stop to report.
    pub stop: StopReason,
    /// It stopped for a breakpoint there (else for the arming: a stop the
    /// protocol reports as a trace stop).
    pub at_breakpoint: bool,
}

/// Where the debugger stands in a history, and the moves from there.
#[derive(Debug, Clone, Default)]
pub struct Replayer {
    position: u64,
    armed: Option<Armed>,
    /// The last armed resume did not move (a continue to where it stood).
    stood_still: bool,
    /// The last move stopped for a breakpoint at this position.
    stopped_at_breakpoint: Option<u64>,
}

/// gdbstub's id of thread `tid` (1 for a thread id 0, which no thread has).
pub fn tid(tid: u64) -> gdbstub::common::Tid {
    gdbstub::common::Tid::new(tid as usize).unwrap_or(gdbstub::common::Tid::new(1).expect("1 is not 0"))
}

/// A boundary stop at `position`.
pub fn boundary(history: &dyn History, position: u64, pos: ReplayLogPosition) -> StopReason {
    StopReason::ReplayLog { tid: Some(tid(history.thread_at(position))), pos }
}

impl Replayer {
    /// Standing at `position`.
    pub fn at(position: u64) -> Self {
        Replayer { position, armed: None, stood_still: false, stopped_at_breakpoint: None }
    }

    /// Where the debugger stands.
    pub fn position(&self) -> u64 {
        self.position
    }

    /// Stands at `position` (a new history, a restart).
    pub fn move_to(&mut self, position: u64) {
        self.position = position;
        self.stopped_at_breakpoint = None;
    }

    /// A stop at `self.position`, remembered when it is a breakpoint's.
    fn stopped(&mut self, stop: StopReason) -> StopReason {
        let at_breakpoint = matches!(stop, StopReason::SwBreak(_) | StopReason::HwBreak(_));
        self.stopped_at_breakpoint = at_breakpoint.then_some(self.position);
        stop
    }

    /// The next resume goes to `position`, whatever it asks (`hold`: a
    /// single step lands there without using the arming up).
    pub fn arm(&mut self, position: u64, hold: bool) {
        self.armed = Some(Armed { position, hold });
    }

    /// Whether a resume is armed.
    pub fn is_armed(&self) -> bool {
        self.armed.is_some()
    }

    /// Forgets an armed resume.
    pub fn disarm(&mut self) {
        self.armed = None;
    }

    /// Whether the last armed resume did not move (asked once).
    pub fn take_stood_still(&mut self) -> bool {
        std::mem::take(&mut self.stood_still)
    }

    /// The stop for a breakpoint at `position`, if one is there.
    fn breakpoint_at(&self, history: &dyn History, breakpoints: &Breakpoints, position: u64) -> Option<StopReason> {
        let step = history.step(position)?;
        if breakpoints.software.contains(&step.pc) {
            return Some(StopReason::SwBreak(tid(step.tid)));
        }
        breakpoints.hardware.contains(&step.pc).then(|| StopReason::HwBreak(tid(step.tid)))
    }

    /// A watchpoint step `position` triggers: a write watchpoint whose
    /// bytes it wrote (the same value again too, as the processor's debug
    /// registers trigger: GDB's `watch` and LLDB's `-w modify` ask for a
    /// changed value themselves, LLDB's `-w write` stops at any write), a
    /// read one whose bytes its instruction read, an access one whose
    /// bytes it read or wrote.
    fn watch_triggered_by(&self, history: &dyn History, breakpoints: &Breakpoints, position: u64) -> Option<StopReason> {
        let step = history.step(position)?;
        for (watched, kind) in &breakpoints.watches {
            let stop = || StopReason::Watch { tid: tid(step.tid), kind: *kind, addr: watched.start };
            if *kind != WatchKind::Write && history.last_read_before(watched.clone(), position + 1) == Some(position) {
                return Some(stop());
            }
            if *kind != WatchKind::Read && history.wrote(position, watched) {
                return Some(stop());
            }
        }
        None
    }

    /// A resume armed by `monitor goto` goes there, whatever it asked
    /// (`stepping`: a single step).
    pub fn take_armed(&mut self, history: &dyn History, breakpoints: &Breakpoints, stepping: bool) -> Option<Arrival> {
        let position = Armed::take(&mut self.armed, stepping)?;
        self.stood_still = !stepping && position == self.position;
        self.position = position;
        // Arriving where a breakpoint is: its stop, as on the processor
        // (and a debugger then steps off it before it runs on).
        if let Some(stop) = self.breakpoint_at(history, breakpoints, position) {
            return Some(Arrival { stop: self.stopped(stop), at_breakpoint: true });
        }
        self.stopped_at_breakpoint = None;
        Some(Arrival { stop: StopReason::SignalWithThread { tid: tid(history.thread_at(position)), signal: GdbSignal::SIGTRAP }, at_breakpoint: false })
    }

    /// `bc`: back to the latest earlier breakpoint or watched access, or
    /// the start of the history.
    pub fn run_backwards(&mut self, history: &dyn History, breakpoints: &Breakpoints) -> StopReason {
        let mut from = self.position;
        let (addresses, (written, read)) = (breakpoints.addresses(), breakpoints.watched());
        loop {
            let writes = written.iter().filter_map(|range| history.last_write_before(range.clone(), from));
            let reads = read.iter().filter_map(|range| history.last_read_before(range.clone(), from));
            let Some(position) = writes.chain(reads).chain(history.last_pc_before(&addresses, from)).max() else { break };
            // The write is seen before the instruction that made it.
            if let Some(stop) = self.watch_triggered_by(history, breakpoints, position).or_else(|| self.breakpoint_at(history, breakpoints, position)) {
                self.position = position;
                return self.stopped(stop);
            }
            from = position;
        }
        self.position = 0;
        self.stopped_at_breakpoint = None;
        boundary(history, 0, ReplayLogPosition::Begin)
    }

    /// `bs`: un-executes thread `tid`'s last step.
    pub fn step_backwards(&mut self, history: &dyn History, thread: u64) -> StopReason {
        self.stopped_at_breakpoint = None;
        match history.previous_of_thread(thread, self.position) {
            Some(position) => {
                self.position = position;
                StopReason::SignalWithThread { tid: tid(thread), signal: GdbSignal::SIGTRAP }
            }
            None => boundary(history, self.position, ReplayLogPosition::Begin),
        }
    }

    /// Forwards through the history: one step of `step` (the other threads
    /// running along until it), or on to a breakpoint or watched access.
    pub fn run_forwards(&mut self, history: &dyn History, breakpoints: &Breakpoints, step: Option<u64>) -> Forward {
        let end = history.end();
        let from = self.position;
        let stepped_stands_here = step.is_some_and(|t| history.step(from).is_some_and(|s| s.tid == t));
        let (addresses, (written, read)) = (breakpoints.addresses(), breakpoints.watched());
        // A continue right after a stop at a breakpoint where it stands,
        // without stepping off it first: the debugger holds no breakpoint
        // there (GDB takes those of a library it was told is not loaded
        // for gone, without removing them), so the instruction runs, as it
        // would on the processor; stopping there again would never end.
        let passes_over = step.is_none() && self.stopped_at_breakpoint.take() == Some(from);
        let mut position = from;
        while position < end {
            // An inserted breakpoint traps before its instruction runs,
            // also where the resume starts and when the thread standing
            // there is stepped, as on the processor (GDB and LLDB step off
            // a breakpoint first; LLDB steps with it inserted right after
            // a reverse stop).
            if (step.is_none() && !(passes_over && position == from)) || (position == from && stepped_stands_here) {
                if let Some(stop) = self.breakpoint_at(history, breakpoints, position) {
                    self.position = position;
                    return Forward::Stopped(self.stopped(stop));
                }
            }
            let Some(here) = history.step(position) else { break };
            if let Some(stop) = self.watch_triggered_by(history, breakpoints, position) {
                self.position = position + 1;
                return Forward::Stopped(stop);
            }
            if step == Some(here.tid) {
                self.position = position + 1;
                return Forward::Stopped(StopReason::SignalWithThread { tid: tid(here.tid), signal: GdbSignal::SIGTRAP });
            }
            // On to the next step that can stop: the stepped thread's, one
            // at a breakpoint (when not stepping), one writing or reading a
            // watched byte.
            let next = position + 1;
            let stepped = step.and_then(|t| history.next_of_thread(t, next));
            let breakpoint = if step.is_none() { history.first_pc_from(&addresses, next) } else { None };
            let writes = written.iter().filter_map(|range| history.first_write_from(range.clone(), next));
            let reads = read.iter().filter_map(|range| history.first_read_from(range.clone(), next));
            position = writes.chain(reads).chain(stepped).chain(breakpoint).min().unwrap_or(end).min(end);
        }
        self.position = end;
        // The end stands before a step where the history ends before its
        // last step: a breakpoint there stops as anywhere.
        if (step.is_none() && !(passes_over && from == end)) || (from == end && stepped_stands_here) {
            if let Some(stop) = self.breakpoint_at(history, breakpoints, end) {
                return Forward::Stopped(self.stopped(stop));
            }
        }
        Forward::End
    }
}

/// An inferior with a recorded past, as the history moves need it: its
/// replayer over its history and breakpoints, and where the inferior has a
/// say (a diversion to end, a move it refuses). The moves themselves —
/// [`reverse_continue`], [`reverse_step`], [`take_armed`] — are written
/// once, here, for every inferior; [`offer_reverse_execution`] wires them
/// to gdbstub's reverse capabilities.
pub trait TimeTravel {
    /// Runs `action` with the replayer standing where the debugger stands,
    /// over the history and the inserted breakpoints; `None` when the
    /// inferior records no history.
    fn replay_history<R>(&mut self, action: impl FnOnce(&mut Replayer, &dyn History, &Breakpoints) -> R) -> Option<R>;

    /// Before a move through the history (a diversion — an expression
    /// evaluated in the past — ends here).
    fn before_move(&mut self) {}

    /// Why `movement` cannot be made now, as the stop to report (`None`:
    /// it can).
    fn move_refused(&mut self, _movement: Movement) -> Option<StopReason> {
        None
    }

    /// Keeps what the next stop reply says beyond its reason.
    fn note_stop(&mut self, note: StopNote);

    /// Keeps the stop the next wait reports.
    fn report_stop(&mut self, stop: StopReason);
}

/// A resume armed by `monitor goto` goes there, whatever it asked
/// (`stepping`: a single step); `None` when none is armed.
pub fn take_armed(inferior: &mut impl TimeTravel, stepping: bool) -> Option<StopReason> {
    let arrival = inferior.replay_history(|replayer, history, breakpoints| replayer.take_armed(history, breakpoints, stepping))??;
    if !arrival.at_breakpoint {
        inferior.note_stop(StopNote::ArrivedWhereArmed);
    }
    Some(arrival.stop)
}

/// `bc` on any inferior: an armed resume, else a refusal, else back to the
/// latest earlier breakpoint or watched access.
pub fn reverse_continue(inferior: &mut impl TimeTravel) -> StopReason {
    inferior.before_move();
    if let Some(stop) = take_armed(inferior, false).or_else(|| inferior.move_refused(Movement::ReverseContinue)) {
        return stop;
    }
    inferior.replay_history(|replayer, history, breakpoints| replayer.run_backwards(history, breakpoints)).unwrap_or_else(|| no_history())
}

/// `bs` on any inferior: an armed resume, else a refusal, else thread
/// `thread`'s last step un-executed.
pub fn reverse_step(inferior: &mut impl TimeTravel, thread: u64) -> StopReason {
    inferior.before_move();
    if let Some(stop) = take_armed(inferior, true).or_else(|| inferior.move_refused(Movement::ReverseStep)) {
        return stop;
    }
    inferior.replay_history(|replayer, history, _| replayer.step_backwards(history, thread)).unwrap_or_else(|| no_history())
}

/// The stop of a move over no history (an inferior refuses such moves
/// first, saying why; this is the stop should one not).
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
                crate::inferior::replay::TimeTravel::report_stop(self, stop);
                Ok(())
            }
        }

        impl gdbstub::target::ext::base::reverse_exec::ReverseStep<gdbstub::common::Tid> for $target {
            fn reverse_step(&mut self, thread: gdbstub::common::Tid) -> Result<(), Self::Error> {
                let stop = crate::inferior::replay::reverse_step(self, thread.get() as u64);
                crate::inferior::replay::TimeTravel::report_stop(self, stop);
                Ok(())
            }
        }
    };
}
pub(crate) use offer_reverse_execution;

#[cfg(test)]
mod tests {
    use super::*;

    /// A history of steps `(tid, pc)` that knows no data.
    struct Steps(Vec<(u64, u64)>);

    impl History for Steps {
        fn len(&self) -> u64 {
            self.0.len() as u64
        }
        fn step(&self, position: u64) -> Option<Step> {
            self.0.get(position as usize).map(|&(tid, pc)| Step { tid, pc })
        }
        fn thread_at(&self, position: u64) -> u64 {
            self.step(position).or_else(|| self.step(position.checked_sub(1)?)).map_or(1, |s| s.tid)
        }
        fn previous_of_thread(&self, tid: u64, before: u64) -> Option<u64> {
            (0..before.min(self.len())).rev().find(|&p| self.0[p as usize].0 == tid)
        }
        fn next_of_thread(&self, tid: u64, from: u64) -> Option<u64> {
            (from..self.len()).find(|&p| self.0[p as usize].0 == tid)
        }
        fn last_pc_before(&self, addresses: &[u64], before: u64) -> Option<u64> {
            (0..before.min(self.len())).rev().find(|&p| addresses.contains(&self.0[p as usize].1))
        }
        fn first_pc_from(&self, addresses: &[u64], from: u64) -> Option<u64> {
            (from..self.len()).find(|&p| addresses.contains(&self.0[p as usize].1))
        }
    }

    fn history() -> Steps {
        // Thread 1 at 0x10.., thread 2 at 0x20.., interleaved.
        Steps(vec![(1, 0x10), (1, 0x11), (2, 0x20), (1, 0x12), (2, 0x21), (1, 0x10), (2, 0x22)])
    }

    fn software(addresses: &[u64]) -> Breakpoints {
        Breakpoints { software: addresses.iter().copied().collect(), ..Default::default() }
    }

    #[test]
    fn backwards_to_breakpoints_then_the_beginning() {
        let h = history();
        let mut r = Replayer::at(h.len());
        let bp = software(&[0x10]);
        assert_eq!(r.run_backwards(&h, &bp), StopReason::SwBreak(tid(1)));
        assert_eq!(r.position(), 5);
        assert_eq!(r.run_backwards(&h, &bp), StopReason::SwBreak(tid(1)));
        assert_eq!(r.position(), 0);
        assert_eq!(r.run_backwards(&h, &bp), StopReason::ReplayLog { tid: Some(tid(1)), pos: ReplayLogPosition::Begin });
        assert_eq!(r.position(), 0);
    }

    #[test]
    fn a_reverse_step_skips_the_other_threads() {
        let h = history();
        let mut r = Replayer::at(5);
        assert_eq!(r.step_backwards(&h, 2), StopReason::SignalWithThread { tid: tid(2), signal: GdbSignal::SIGTRAP });
        assert_eq!(r.position(), 4);
        assert_eq!(r.step_backwards(&h, 2), StopReason::SignalWithThread { tid: tid(2), signal: GdbSignal::SIGTRAP });
        assert_eq!(r.position(), 2);
        assert_eq!(r.step_backwards(&h, 2), StopReason::ReplayLog { tid: Some(tid(2)), pos: ReplayLogPosition::Begin });
        assert_eq!(r.position(), 2);
    }

    #[test]
    fn forwards_a_breakpoint_traps_before_its_step_and_a_step_runs_one() {
        let h = history();
        let bp = software(&[0x21]);
        let mut r = Replayer::at(0);
        assert_eq!(r.run_forwards(&h, &bp, None), Forward::Stopped(StopReason::SwBreak(tid(2))));
        assert_eq!(r.position(), 4);
        // Stepping from it traps again, as an inserted breakpoint does on
        // the processor…
        assert_eq!(r.run_forwards(&h, &bp, Some(2)), Forward::Stopped(StopReason::SwBreak(tid(2))));
        assert_eq!(r.position(), 4);
        // …so a debugger steps off it with it removed: thread 2's step runs.
        let none = Breakpoints::default();
        assert_eq!(r.run_forwards(&h, &none, Some(2)), Forward::Stopped(StopReason::SignalWithThread { tid: tid(2), signal: GdbSignal::SIGTRAP }));
        assert_eq!(r.position(), 5);
        // Thread 1 steps: its step at 5 runs.
        assert_eq!(r.run_forwards(&h, &bp, Some(1)), Forward::Stopped(StopReason::SignalWithThread { tid: tid(1), signal: GdbSignal::SIGTRAP }));
        assert_eq!(r.position(), 6);
        // Thread 1 runs no more: the end.
        assert_eq!(r.run_forwards(&h, &bp, Some(1)), Forward::End);
        assert_eq!(r.position(), 7);
    }

    /// A history whose end stands before its last step (a saved trace).
    struct BeforeTheLast(Steps);

    impl History for BeforeTheLast {
        fn len(&self) -> u64 {
            self.0.len()
        }
        fn end(&self) -> u64 {
            self.0.len() - 1
        }
        fn step(&self, position: u64) -> Option<Step> {
            self.0.step(position)
        }
        fn thread_at(&self, position: u64) -> u64 {
            self.0.thread_at(position)
        }
        fn previous_of_thread(&self, tid: u64, before: u64) -> Option<u64> {
            self.0.previous_of_thread(tid, before)
        }
        fn next_of_thread(&self, tid: u64, from: u64) -> Option<u64> {
            self.0.next_of_thread(tid, from)
        }
        fn last_pc_before(&self, addresses: &[u64], before: u64) -> Option<u64> {
            self.0.last_pc_before(addresses, before)
        }
        fn first_pc_from(&self, addresses: &[u64], from: u64) -> Option<u64> {
            self.0.first_pc_from(addresses, from)
        }
    }

    #[test]
    fn where_the_end_is_before_the_last_step_its_breakpoint_still_stops() {
        let h = BeforeTheLast(history());
        let bp = software(&[0x22]);
        let mut r = Replayer::at(0);
        assert_eq!(r.run_forwards(&h, &bp, None), Forward::Stopped(StopReason::SwBreak(tid(2))));
        assert_eq!(r.position(), 6);
        assert_eq!(r.run_forwards(&h, &bp, Some(2)), Forward::Stopped(StopReason::SwBreak(tid(2))));
        assert_eq!(r.run_forwards(&h, &Breakpoints::default(), None), Forward::End);
        assert_eq!(r.run_forwards(&h, &Breakpoints::default(), Some(2)), Forward::End);
        assert_eq!(r.position(), 6);
    }

    #[test]
    fn a_continue_right_after_a_breakpoint_stop_runs_its_instruction() {
        // GDB takes the breakpoints of a library it was told is not loaded
        // for gone, without removing them, and continues from a stop at
        // one without stepping off it: trapping there again would never
        // end (each stop is one GDB does not know, so it continues).
        let h = history();
        let bp = software(&[0x10]);
        let mut r = Replayer::at(0);
        assert_eq!(r.run_forwards(&h, &bp, None), Forward::Stopped(StopReason::SwBreak(tid(1))));
        assert_eq!(r.position(), 0);
        assert_eq!(r.run_forwards(&h, &bp, None), Forward::Stopped(StopReason::SwBreak(tid(1))));
        assert_eq!(r.position(), 5);
        assert_eq!(r.run_forwards(&h, &bp, None), Forward::End);
        assert_eq!(r.position(), h.len());
        // Arriving other than at a breakpoint's stop (a reverse step), the
        // breakpoint where it stands traps as on the processor.
        r.run_backwards(&h, &Breakpoints::default());
        assert_eq!(r.position(), 0);
        assert_eq!(r.run_forwards(&h, &bp, None), Forward::Stopped(StopReason::SwBreak(tid(1))));
        assert_eq!(r.position(), 0);
        let mut r = Replayer::at(6);
        assert_eq!(r.step_backwards(&h, 1), StopReason::SignalWithThread { tid: tid(1), signal: GdbSignal::SIGTRAP });
        assert_eq!(r.position(), 5);
        assert_eq!(r.run_forwards(&h, &bp, None), Forward::Stopped(StopReason::SwBreak(tid(1))));
        assert_eq!(r.position(), 5);
    }

    #[test]
    fn an_armed_resume_goes_where_it_was_armed() {
        let h = history();
        let bp = software(&[0x12]);
        let mut r = Replayer::at(7);
        r.arm(3, false);
        assert_eq!(r.take_armed(&h, &bp, false), Some(Arrival { stop: StopReason::SwBreak(tid(1)), at_breakpoint: true }));
        assert!(!r.is_armed());
        r.arm(1, true);
        // A held arming survives a step.
        let arrival = r.take_armed(&h, &bp, true).unwrap();
        assert!(!arrival.at_breakpoint);
        assert!(r.is_armed());
        assert!(r.take_armed(&h, &bp, false).is_some());
        assert!(r.take_stood_still());
        assert!(!r.take_stood_still());
    }

    /// An inferior over [`history`] that refuses reverse steps and keeps
    /// what it is told.
    struct Refusing {
        replayer: Replayer,
        breakpoints: Breakpoints,
        moves_prepared: usize,
        notes: Vec<StopNote>,
        reported: Vec<StopReason>,
    }

    impl TimeTravel for Refusing {
        fn replay_history<R>(&mut self, action: impl FnOnce(&mut Replayer, &dyn History, &Breakpoints) -> R) -> Option<R> {
            Some(action(&mut self.replayer, &history(), &self.breakpoints))
        }
        fn before_move(&mut self) {
            self.moves_prepared += 1;
        }
        fn move_refused(&mut self, movement: Movement) -> Option<StopReason> {
            (movement == Movement::ReverseStep).then_some(StopReason::SignalWithThread { tid: tid(9), signal: GdbSignal(0) })
        }
        fn note_stop(&mut self, note: StopNote) {
            self.notes.push(note);
        }
        fn report_stop(&mut self, stop: StopReason) {
            self.reported.push(stop);
        }
    }

    #[test]
    fn the_moves_of_any_inferior_prepare_take_an_arming_then_ask_for_refusals() {
        let mut inferior = Refusing { replayer: Replayer::at(7), breakpoints: software(&[0x10]), moves_prepared: 0, notes: vec![], reported: vec![] };
        assert_eq!(reverse_continue(&mut inferior), StopReason::SwBreak(tid(1)));
        assert_eq!(inferior.replayer.position(), 5);
        // Refused: the inferior's stop, no move.
        assert_eq!(reverse_step(&mut inferior, 1), StopReason::SignalWithThread { tid: tid(9), signal: GdbSignal(0) });
        assert_eq!(inferior.replayer.position(), 5);
        // An armed resume wins over a refusal, and says it arrived.
        inferior.replayer.arm(2, false);
        assert_eq!(reverse_step(&mut inferior, 1), StopReason::SignalWithThread { tid: tid(2), signal: GdbSignal::SIGTRAP });
        assert_eq!(inferior.replayer.position(), 2);
        assert_eq!(inferior.notes, vec![StopNote::ArrivedWhereArmed]);
        assert_eq!(inferior.moves_prepared, 3);
    }
}
