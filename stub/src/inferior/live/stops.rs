//! How the live process stops: the events of the collector's process
//! control ([`TracedProcess`], the one owner of `waitpid` for the program,
//! as under `retrace record`) collected until one must be reported to the
//! client (all-stop: when one thread stops, the others are stopped too),
//! and new threads let run with the others.

use gdbstub::common::Signal as GdbSignal;
use std::collections::BTreeSet;

use nix::sys::ptrace;
use nix::sys::signal::Signal;
use nix::unistd::Pid;
use retrace_collector::control::{ProcessEvent, Resume, Spawn, Wait};

use super::trace_rings::STEPS_IN_A_ROW;
use super::rip;
use super::{tid_of, triggered_slot, ExecEvents, ProcessTarget};
use retrace_collector::process;
use crate::inferior::{StopNote, StopReason};

/// The stop reply for the end of the process.
fn process_end(event: ProcessEvent) -> Option<StopReason> {
    match event {
        ProcessEvent::Exited(code) => Some(StopReason::Exited(code as u8)),
        ProcessEvent::Killed(signal) => Some(StopReason::Terminated(crate::signals::to_gdb(signal))),
        _ => None,
    }
}

impl ProcessTarget {
    /// Stops every running thread except `except`, waiting for each to stop.
    /// A thread that stopped at one of our breakpoints in the meantime is backed
    /// up so it hits it again later.
    ///
    /// Events are taken from every thread as they come, not one thread's
    /// at a time: a thread exec'ing waits in the kernel until the tracer has
    /// reaped every other thread (the exec killed them), so waiting on it
    /// alone would wait for ever.
    pub(super) fn stop_others(&mut self, except: Option<Pid>) {
        let waiting: BTreeSet<Pid> = self.running.iter().copied().filter(|t| Some(*t) != except).collect();
        for tid in &waiting {
            // SAFETY: tgkill has no memory-safety preconditions.
            unsafe { libc::syscall(libc::SYS_tgkill, self.pid.as_raw(), tid.as_raw(), libc::SIGSTOP) };
        }
        self.wait_for_sigstops(waiting);
    }

    /// Takes the process's events until every thread of `waiting` has
    /// stopped for the SIGSTOP the stub sent it (or is gone): the one loop
    /// that waits for threads to stand still, whatever else comes first.
    fn wait_for_sigstops(&mut self, mut waiting: BTreeSet<Pid>) {
        while !waiting.is_empty() {
            let event = match self.control.next_event(Wait::Block) {
                Ok(Some(event)) => event,
                Ok(None) if !self.control.is_over() => continue,
                Ok(None) | Err(_) => {
                    for tid in std::mem::take(&mut waiting) {
                        self.thread_gone(tid);
                    }
                    break;
                }
            };
            let tid = match event {
                ProcessEvent::Exec { tid: leader, former } => {
                    // Every other thread went with the old image, the one
                    // whose stop was due too: the exec is reported instead,
                    // and there is no one left to wait for.
                    tracing::debug!(leader = leader.as_raw(), former = former.as_raw(), "an exec met while stopping the threads: reported instead of the stop due");
                    let stop = self.exec_done(leader, former);
                    self.exec_stop = Some(stop);
                    self.collect_sigstop(leader);
                    return;
                }
                ProcessEvent::Exited(_) | ProcessEvent::Killed(_) => {
                    self.ended = process_end(event);
                    for tid in std::mem::take(&mut waiting) {
                        self.thread_gone(tid);
                    }
                    break;
                }
                ProcessEvent::ThreadGone(tid) => tid,
                _ => match event.stopped_thread() {
                    Some(tid) => tid,
                    None => {
                        self.side_event(event);
                        continue;
                    }
                },
            };
            if !waiting.contains(&tid) {
                self.event_of_a_thread_not_running(event);
                continue;
            }
            let stopped = match event {
                ProcessEvent::Signal(_, Signal::SIGSTOP) => true,
                ProcessEvent::Trap(_) if self.recording.contains(&tid) => {
                    // A recorded step finished first; the SIGSTOP is
                    // still pending and comes before the next instruction.
                    if let Some(now) = rip(tid) {
                        self.record_progress(tid, now);
                    }
                    self.tracing.single_steps += 1;
                    let _ = self.control.resume(tid, Resume::Step, None);
                    false
                }
                ProcessEvent::Trap(_) => {
                    // A breakpoint's trap is backed up so it hits again
                    // (a client's single step that ended is no breakpoint's).
                    if !self.stepping.contains(&tid) {
                        if let Ok(mut regs) = ptrace::getregs(tid) {
                            if self.has_breakpoint(regs.rip.wrapping_sub(1)) {
                                regs.rip -= 1;
                                let _ = ptrace::setregs(tid, regs);
                            }
                        }
                    }
                    // The SIGSTOP is still pending: collect it.
                    let _ = self.control.resume(tid, Resume::Free, None);
                    false
                }
                ProcessEvent::Signal(_, signal) => {
                    // Another signal came first: the thread stays where
                    // it is (a signal stop runs nothing) and gets it at
                    // its next resume, as a stop reported then
                    // (gdbserver's pending status); the SIGSTOP comes
                    // after the pending signals numbered below it.
                    tracing::debug!(tid = tid.as_raw(), ?signal, "a signal met while stopping the threads: reported at the thread's next resume");
                    self.deferred_signals.entry(tid).or_default().push_back(signal);
                    let _ = self.control.resume(tid, Resume::Free, None);
                    false
                }
                ProcessEvent::ThreadGone(_) => {
                    self.thread_gone(tid);
                    true
                }
                ProcessEvent::Exiting(_) => {
                    // On its way out: it is reaped later (a leader only
                    // after every other thread), not waited for here.
                    let _ = self.control.resume(tid, Resume::Free, None);
                    true
                }
                _ => {
                    // Mid-instruction (a clone's event comes from inside
                    // the system call): the instruction ends the way the
                    // thread was running, so a recorded thread's system
                    // call is recorded (run freely, it went unrecorded and
                    // left a gap in the trace).
                    self.side_event(event);
                    self.resume_after_event(tid);
                    false
                }
            };
            if stopped {
                waiting.remove(&tid);
                self.running.remove(&tid);
            }
        }
    }

    /// A new thread's first stop: it is one of the program's threads now,
    /// with the debug registers in use, traced if the process is.
    fn thread_joins(&mut self, tid: Pid) {
        self.new_threads.remove(&tid);
        self.threads.insert(tid);
        self.init_thread_debug_registers();
        if !self.tracing.traces(tid) {
            self.trace_new_thread(tid);
        }
    }

    /// An event of a thread the stub is not stopping (it was stopped
    /// already, or not yet started) met while stopping the others: a new
    /// thread's first stop makes it one of the program's threads, stopped
    /// with them; a thread on its way out (an exec killed it) goes on out.
    fn event_of_a_thread_not_running(&mut self, event: ProcessEvent) {
        match event {
            ProcessEvent::ThreadStarted(tid) => self.thread_joins(tid),
            ProcessEvent::Exiting(tid) => {
                let _ = self.control.resume(tid, Resume::Free, None);
            }
            ProcessEvent::ThreadGone(_) | ProcessEvent::ForkedChild(_) => self.side_event(event),
            other => {
                tracing::warn!(event = ?other, "an event of a thread not running, met while stopping the others: left stopped");
                self.side_event(other);
            }
        }
    }

    /// The program exec'd (thread `former`, now `tid`, the process's
    /// only thread): the stop to report, a SIGTRAP with the client's words
    /// for an exec. The new image holds none of the old one's breakpoints:
    /// their map goes, so no removal writes an old byte into the new code
    /// and no read shows one. The kernel cleared the thread's debug
    /// registers: a client told of the exec sets its hardware breakpoints
    /// and watchpoints afresh, so the slots are forgotten; one that is not
    /// told removes them itself, so they are written again meanwhile.
    fn exec_done(&mut self, tid: Pid, former: Pid) -> StopReason {
        self.threads.clear();
        self.threads.insert(tid);
        self.new_threads.clear();
        self.running.clear();
        self.stepping.clear();
        self.deferred_signals.clear();
        self.originals.clear();
        self.session.breakpoints_mut().clear_software();
        if self.exec_events == ExecEvents::Signal {
            // The client does not know of the exec and removes what it set.
            self.init_thread_debug_registers();
        } else {
            // The client sets its breakpoints and watchpoints afresh in the
            // new image, removing none (gdbserver forgets them too).
            self.session.breakpoints_mut().free_all_slots();
        }
        self.trace_exec(tid, former);
        self.history_restarts();
        let note = match self.exec_events {
            ExecEvents::Signal => None,
            ExecEvents::Lldb => Some(StopNote::ExecForLldb),
            ExecEvents::Gdb => process::executable_path(tid).map(|path| StopNote::ExecForGdb(path.to_string_lossy().into_owned())),
        };
        self.session.take_note();
        if let Some(note) = note {
            self.session.note(note);
        }
        StopReason::SignalWithThread { tid: tid_of(tid), signal: GdbSignal::SIGTRAP }
    }

    /// Collects a SIGSTOP the stub sent thread `tid` that is still pending
    /// (its status's `SigPnd`), so the thread stands still without one.
    fn collect_sigstop(&mut self, tid: Pid) {
        let status = std::fs::read_to_string(format!("/proc/{}/task/{tid}/status", self.pid)).unwrap_or_default();
        let pending = status.lines().find_map(|line| line.strip_prefix("SigPnd:")).and_then(|mask| u64::from_str_radix(mask.trim(), 16).ok());
        if pending.is_none_or(|mask| mask & (1 << (libc::SIGSTOP - 1)) == 0) {
            return;
        }
        // Delivered before the thread runs an instruction (signals pending
        // across the exec come first, and are deferred as any met while
        // threads are stopped).
        if self.control.resume(tid, Resume::Free, None).is_err() {
            return;
        }
        self.wait_for_sigstops(BTreeSet::from([tid]));
    }

    /// Bookkeeping for an event met while waiting for something else: a
    /// new thread is known (not yet a thread of the program's for the
    /// client or for resumes: its first stop is still to come), a forked
    /// child gets its memory back, a thread gone is forgotten.
    fn side_event(&mut self, event: ProcessEvent) {
        match event {
            ProcessEvent::Spawned { child, kind: Spawn::Thread, .. } => {
                self.new_threads.insert(child);
            }
            ProcessEvent::ForkedChild(child) => self.release_forked_child(child),
            ProcessEvent::ThreadGone(tid) => self.thread_gone(tid),
            _ => {}
        }
    }

    /// Thread `tid` is gone.
    fn thread_gone(&mut self, tid: Pid) {
        self.deferred_signals.remove(&tid);
        self.threads.remove(&tid);
        self.new_threads.remove(&tid);
        self.running.remove(&tid);
        self.trace_thread_gone(tid);
    }

    /// Collects ptrace events until one must be reported to the client.
    pub(super) fn next_stop(&mut self) -> Option<StopReason> {
        if let Some(end) = self.ended.take() {
            return Some(end);
        }
        // A recorded thread stepping an instruction that cannot block: wait
        // for it alone (a few hundred times in a row at most, then the other
        // threads and the client get their turn).
        let mut only: Option<Pid> = None;
        loop {
            let event = match only.take() {
                Some(tid) => self.control.next_event(Wait::Thread(tid)),
                None => self.control.next_event(Wait::Poll),
            };
            let event = match event {
                Ok(Some(event)) => event,
                Ok(None) => return None,
                Err(_) => return Some(StopReason::Exited(0)),
            };
            tracing::trace!(?event, "process event");
            match event {
                ProcessEvent::Spawned { parent, .. } => {
                    self.side_event(event);
                    self.resume_after_event(parent);
                }
                ProcessEvent::ForkedChild(_) | ProcessEvent::ThreadGone(_) => self.side_event(event),
                ProcessEvent::Exec { tid, former } => return Some(self.exec_done(tid, former)),
                ProcessEvent::Exiting(tid) => {
                    // A leader on its way out (pthread_exit) stays a
                    // zombie until the others end: no SIGSTOP would ever
                    // stop it. Another thread is reaped at the next stop
                    // and its trace goes then.
                    if tid == self.pid {
                        self.running.remove(&tid);
                    }
                    self.resume_after_event(tid);
                }
                ProcessEvent::Other(tid) => self.resume_after_event(tid),
                ProcessEvent::ThreadStarted(tid) => {
                    // A new thread's first stop: let it run with the others, unless
                    // only some threads may run now (a step with the others held,
                    // while the client has lifted breakpoints): then it waits for
                    // the next resume.
                    self.thread_joins(tid);
                    // Stepped or run by blocks when the stub records it (a
                    // thread the CPU traces runs freely).
                    let recorded = self.records(tid);
                    if self.session.has_note() {
                        // Over the process's trace limit: stop, as lldb-server does.
                        self.stop_others(None);
                        return Some(StopReason::SignalWithThread { tid: tid_of(tid), signal: GdbSignal::SIGTRAP });
                    }
                    if self.scheduler_locked {
                        // It waits for the next resume.
                    } else if recorded {
                        if let Err(error) = self.start_recorded(tid, None) {
                            tracing::warn!(%error, "a new traced thread");
                        }
                    } else if self.control.resume(tid, Resume::Free, None).is_ok() {
                        self.running.insert(tid);
                    }
                }
                ProcessEvent::Signal(tid, Signal::SIGSTOP) if self.interrupted => {
                    self.block_interrupted(tid);
                    self.running.remove(&tid);
                    self.stop_others(Some(tid));
                    return Some(StopReason::SignalWithThread { tid: tid_of(tid), signal: GdbSignal::SIGINT });
                }
                ProcessEvent::Trap(tid) if self.records(tid) => {
                    // (A block's stop reads all registers itself.)
                    let now = if self.in_block(tid) { 0 } else { rip(tid).unwrap_or(0) };
                    let slot = if self.session.breakpoints().slots().iter().any(Option::is_some) { triggered_slot(tid).and_then(|i| self.session.breakpoints().slots()[i]) } else { None };
                    let reason = if self.recording.contains(&tid) {
                        match self.after_recorded_step(tid, now, slot) {
                            Some(reason) => reason,
                            None => {
                                // Stepped on.
                                self.tracing.steps_in_a_row += 1;
                                let prompt = self.blocks.take_prompt().unwrap_or_else(|| self.steps_promptly(now));
                                if self.tracing.steps_in_a_row < STEPS_IN_A_ROW && prompt {
                                    only = Some(tid);
                                } else {
                                    self.tracing.steps_in_a_row = 0;
                                }
                                continue;
                            }
                        }
                    } else {
                        // The client's single step.
                        self.record_progress(tid, now);
                        match slot {
                            Some(crate::inferior::replay::DebugSlot { watch: Some(kind), address, .. }) => StopReason::Watch { tid: tid_of(tid), kind, addr: address },
                            Some(_) => StopReason::HwBreak(tid_of(tid)),
                            None => StopReason::SignalWithThread { tid: tid_of(tid), signal: GdbSignal::SIGTRAP },
                        }
                    };
                    self.running.remove(&tid);
                    self.recording.remove(&tid);
                    self.stop_others(Some(tid));
                    return Some(reason);
                }
                ProcessEvent::Trap(tid) => {
                    self.running.remove(&tid);
                    let stepped = self.stepping.contains(&tid);
                    self.stop_others(Some(tid));
                    let mut reason = StopReason::SignalWithThread { tid: tid_of(tid), signal: GdbSignal::SIGTRAP };
                    if let Some(slot) = triggered_slot(tid).and_then(|i| self.session.breakpoints().slots()[i]) {
                        return Some(match slot.watch {
                            Some(kind) => StopReason::Watch { tid: tid_of(tid), kind, addr: slot.address },
                            None => StopReason::HwBreak(tid_of(tid)),
                        });
                    }
                    if !stepped {
                        if let Ok(mut regs) = ptrace::getregs(tid) {
                            if self.has_breakpoint(regs.rip.wrapping_sub(1)) {
                                regs.rip -= 1;
                                let _ = ptrace::setregs(tid, regs);
                                reason = StopReason::SwBreak(tid_of(tid));
                            }
                        }
                    }
                    return Some(reason);
                }
                ProcessEvent::Signal(tid, signal) => {
                    self.block_interrupted(tid);
                    self.running.remove(&tid);
                    self.stop_others(Some(tid));
                    return Some(StopReason::SignalWithThread { tid: tid_of(tid), signal: crate::signals::to_gdb(signal) });
                }
                ProcessEvent::Exited(_) | ProcessEvent::Killed(_) => {
                    self.thread_gone(self.pid);
                    return process_end(event);
                }
            }
        }
    }
}
