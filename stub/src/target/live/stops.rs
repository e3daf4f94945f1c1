//! How the live process stops: the events of the collector's process
//! control ([`TracedProcess`], the one owner of `waitpid` for the program,
//! as under `retrace record`) collected until one must be reported to the
//! client (all-stop: when one thread stops, the others are stopped too),
//! and new threads let run with the others.

use gdbstub::common::Signal as GdbSignal;
use nix::sys::ptrace;
use nix::sys::signal::Signal;
use nix::unistd::Pid;
use retrace_collector::control::{ProcessEvent, Resume, Spawn, Wait};

use super::recording::{rip, STEPS_IN_A_ROW};
use super::{tid_of, triggered_slot, ProcessTarget};
use crate::target::StopReason;

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
    pub(super) fn stop_others(&mut self, except: Option<Pid>) {
        let others: Vec<Pid> = self.running.iter().copied().filter(|t| Some(*t) != except).collect();
        for tid in &others {
            // SAFETY: tgkill has no memory-safety preconditions.
            unsafe { libc::syscall(libc::SYS_tgkill, self.pid.as_raw(), tid.as_raw(), libc::SIGSTOP) };
        }
        for tid in others {
            loop {
                let event = match self.control.next_event(Wait::Thread(tid)) {
                    Ok(Some(event)) => event,
                    Ok(None) if !self.control.is_over() => continue,
                    Ok(None) => break,
                    Err(_) => {
                        self.thread_gone(tid);
                        break;
                    }
                };
                match event {
                    ProcessEvent::Signal(t, Signal::SIGSTOP) if t == tid => break,
                    ProcessEvent::Trap(t) if t == tid && self.recording.contains(&tid) => {
                        // A recorded step finished first; the SIGSTOP is
                        // still pending and comes before the next instruction.
                        if let Some(now) = rip(tid) {
                            self.record_progress(tid, now);
                        }
                        self.tracing.single_steps += 1;
                        let _ = self.control.resume(tid, Resume::Step, None);
                    }
                    ProcessEvent::Trap(t) if t == tid => {
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
                    }
                    ProcessEvent::Signal(t, signal) if t == tid => {
                        // Another signal came first: the thread stays where
                        // it is (a signal stop runs nothing) and gets it at
                        // its next resume, as a stop reported then
                        // (gdbserver's pending status); the SIGSTOP is next.
                        tracing::debug!(tid = tid.as_raw(), ?signal, "a signal met while stopping the threads: reported at the thread's next resume");
                        self.deferred_signals.insert(tid, signal);
                        let _ = self.control.resume(tid, Resume::Free, None);
                    }
                    ProcessEvent::ThreadGone(t) if t == tid => {
                        self.thread_gone(tid);
                        break;
                    }
                    ProcessEvent::Exiting(t) if t == tid => {
                        // On its way out: it is reaped later (a leader only
                        // after every other thread), not waited for here.
                        let _ = self.control.resume(tid, Resume::Free, None);
                        break;
                    }
                    ProcessEvent::Exited(_) | ProcessEvent::Killed(_) => {
                        self.ended = process_end(event);
                        self.thread_gone(tid);
                        break;
                    }
                    other => {
                        self.side_event(other);
                        if let Some(stopped) = other.stopped_thread().filter(|&t| t == tid) {
                            if matches!(other, ProcessEvent::Exec { .. }) {
                                tracing::warn!(tid = tid.as_raw(), "an exec met while stopping the threads is not reported");
                            }
                            // Mid-instruction (a clone's event comes from
                            // inside the system call): the instruction ends
                            // the way the thread was running, so a recorded
                            // thread's system call is recorded (run freely,
                            // it went unrecorded and left a gap in the trace).
                            self.resume_after_event(stopped);
                        }
                    }
                }
            }
            self.running.remove(&tid);
        }
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
                ProcessEvent::Exec { tid, former } => {
                    // Reported as the SIGTRAP the kernel sends without exec
                    // events.
                    self.threads.retain(|t| *t == self.pid);
                    self.new_threads.clear();
                    self.running.clear();
                    self.deferred_signals.clear();
                    self.trace_exec(tid, former);
                    self.history_restarts();
                    return Some(StopReason::SignalWithThread { tid: tid_of(tid), signal: GdbSignal::SIGTRAP });
                }
                ProcessEvent::Exiting(tid) | ProcessEvent::Other(tid) => self.resume_after_event(tid),
                ProcessEvent::ThreadStarted(tid) => {
                    // A new thread's first stop: let it run with the others, unless
                    // only some threads may run now (a step with the others held,
                    // while the client has lifted breakpoints): then it waits for
                    // the next resume.
                    self.new_threads.remove(&tid);
                    self.threads.insert(tid);
                    self.init_thread_debug_registers();
                    if !self.tracing.traces(tid) {
                        self.trace_new_thread(tid);
                    }
                    // Stepped or run by blocks when the stub records it (a
                    // thread the CPU traces runs freely).
                    let recorded = self.records(tid);
                    if self.stop_note.is_some() {
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
                    let slot = if self.debug_slots.iter().any(Option::is_some) { triggered_slot(tid).and_then(|i| self.debug_slots[i]) } else { None };
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
                            Some(super::DebugSlot { watch: Some(kind), address, .. }) => StopReason::Watch { tid: tid_of(tid), kind, addr: address },
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
                    if let Some(slot) = triggered_slot(tid).and_then(|i| self.debug_slots[i]) {
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
