//! Resuming: forwards through the history (to a breakpoint, a watched
//! access, the recorded end or fatal signal), backwards (`bc`, `bs`), an
//! armed `monitor goto`, and code the debugger runs in the past.

use gdbstub::common::{Signal as GdbSignal, Tid};
use gdbstub::target::ext::base::multithread::{
    MultiThreadResume, MultiThreadSchedulerLocking, MultiThreadSchedulerLockingOps, MultiThreadSingleStep, MultiThreadSingleStepOps,
};
use gdbstub::target::ext::base::reverse_exec::{ReplayLogPosition, ReverseContOps, ReverseStepOps};

use super::memory::{past_bytes, same_registers};
use super::history::SavedHistory;
use super::{fatal_signal, tid, SavedTrace};
use crate::inferior::diversion::DiversionStop;
use crate::inferior::replay::{boundary, Forward, Replay, ReplaySession, ThreadId, TimeTravel};
use crate::inferior::{StopNote, StopReason};

impl SavedTrace {
    /// Runs a diversion the resume continues, if there is one and its
    /// thread's registers are not back to the recorded ones (the debugger
    /// restored them: the diversion ends, the replay moves on).
    fn run_diversion(&mut self) -> Option<StopReason> {
        let position = self.position();
        let SavedTrace { state: Some(state), timeline, scratch, diversion: Some((tid, stand_in)), session, step, .. } = self else { return None };
        let tid = *tid;
        let recorded = state.registers_at(timeline, tid, position);
        if stand_in.registers().ok().zip(recorded).is_some_and(|(now, recorded)| same_registers(&now, &recorded)) {
            return None;
        }
        let addresses = session.breakpoints().addresses();
        let mut source = |address: u64, buf: &mut [u8]| past_bytes(state, timeline, scratch, position, address, buf);
        let thread = Tid::new(tid as usize)?;
        Some(match stand_in.run(step.is_some(), &addresses, &mut source) {
            Ok(DiversionStop::Breakpoint) => StopReason::SwBreak(thread),
            Ok(DiversionStop::Stepped) => StopReason::DoneStep,
            Ok(DiversionStop::Signal(signal)) => StopReason::SignalWithThread { tid: thread, signal: GdbSignal(signal as u8) },
            Ok(DiversionStop::Exited(code)) => {
                tracing::warn!(code, "the code run in the past ended its stand-in process");
                StopReason::SignalWithThread { tid: thread, signal: GdbSignal::SIGKILL }
            }
            Err(e) => {
                tracing::warn!("{e}");
                StopReason::SignalWithThread { tid: thread, signal: GdbSignal::SIGKILL }
            }
        })
    }

    /// Forwards through the history: to a breakpoint, a watched access,
    /// the step asked for, or the end — where the recorded fatal signal
    /// or exit is reported, else the boundary.
    fn run_forwards(&mut self) -> StopReason {
        let (step, exit) = (self.step.map(ThreadId), self.exit);
        let reported = std::mem::take(&mut self.fatal_signal_reported);
        let mut replay = self.replay().expect("a saved trace always has its history");
        let from = replay.position();
        if let Forward::Stopped(stop) = replay.run_forwards(step) {
            return stop;
        }
        let end = replay.history.end();
        // Running into the instruction a fatal signal interrupted: that
        // signal's stop, as rr reports it (continued, it ends the program).
        if let Some(signal) = fatal_signal(exit).filter(|_| !(reported && from == end)) {
            let thread = replay.history.thread_at(end);
            replay.session.note(StopNote::Undeliverable(crate::signals::stop_words(signal)));
            drop(replay);
            self.fatal_signal_reported = true;
            return StopReason::SignalWithThread { tid: thread.gdb(), signal };
        }
        // Past the last instruction, a continue ends the program as it
        // ended when recorded (a step stops at the end; from the end, where
        // nothing is left to step, a step ends it too: GDB steps off a
        // breakpoint there before it continues).
        match exit.filter(|_| step.is_none() || from == end) {
            Some(exit) => exit,
            None => boundary(&*replay.history, replay.position(), ReplayLogPosition::End),
        }
    }
}

impl MultiThreadResume for SavedTrace {
    fn resume(&mut self) -> Result<(), Self::Error> {
        if let Some(stop) = self.run_diversion() {
            self.session.report(stop);
            return Ok(());
        }
        self.before_move();
        let stepping = self.step.is_some();
        let armed = self.replay().and_then(|mut replay| replay.take_armed(stepping));
        let stop = match armed {
            Some(stop) => stop,
            None => self.run_forwards(),
        };
        self.session.report(stop);
        Ok(())
    }

    fn clear_resume_actions(&mut self) -> Result<(), Self::Error> {
        self.step = None;
        Ok(())
    }

    fn set_resume_action_continue(&mut self, _thread: Tid, _signal: Option<GdbSignal>) -> Result<(), Self::Error> {
        Ok(())
    }

    fn support_single_step(&mut self) -> Option<MultiThreadSingleStepOps<'_, Self>> {
        Some(self)
    }

    fn support_scheduler_locking(&mut self) -> Option<MultiThreadSchedulerLockingOps<'_, Self>> {
        Some(self)
    }

    fn support_reverse_cont(&mut self) -> Option<ReverseContOps<'_, Tid, Self>> {
        Some(self)
    }

    fn support_reverse_step(&mut self) -> Option<ReverseStepOps<'_, Tid, Self>> {
        Some(self)
    }
}

impl MultiThreadSingleStep for SavedTrace {
    fn set_resume_action_step(&mut self, thread: Tid, _signal: Option<GdbSignal>) -> Result<(), Self::Error> {
        self.step = Some(tid(thread));
        Ok(())
    }
}

impl MultiThreadSchedulerLocking for SavedTrace {
    fn set_resume_action_scheduler_lock(&mut self) -> Result<(), Self::Error> {
        Ok(())
    }
}

impl TimeTravel for SavedTrace {
    fn replay(&mut self) -> Option<Replay<'_>> {
        let SavedTrace { session, timeline, state, bundle, traces, unchanging, .. } = self;
        Some(Replay::new(session, Box::new(SavedHistory::of(timeline, state, bundle, traces, unchanging))))
    }

    fn session(&mut self) -> &mut ReplaySession {
        &mut self.session
    }

    /// What the debugger wrote over the past, and code it ran there, end
    /// with a move.
    fn before_move(&mut self) {
        self.scratch.moved();
        if self.diversion.take().is_some() {
            tracing::debug!("diversion from the recorded past ends");
        }
    }
}

crate::inferior::replay::offer_reverse_execution!(SavedTrace);
