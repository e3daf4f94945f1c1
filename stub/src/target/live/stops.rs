//! How the live process stops: ptrace events collected until one must be
//! reported to the client (all-stop: when one thread stops, the others are
//! stopped too), and new threads let run with the others.

use gdbstub::common::Signal as GdbSignal;
use nix::sys::ptrace;
use nix::sys::signal::Signal;
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

use super::recording::{rip, STEPS_IN_A_ROW};
use super::{tid_of, triggered_slot, ProcessTarget};
use crate::target::StopReason;

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
                match waitpid(tid, Some(WaitPidFlag::__WALL)) {
                    Ok(WaitStatus::Stopped(_, Signal::SIGSTOP)) => break,
                    Ok(WaitStatus::Stopped(_, Signal::SIGTRAP)) if self.recording.contains(&tid) => {
                        // A recorded step finished first; the SIGSTOP is
                        // still pending and comes before the next instruction.
                        if let Some(now) = rip(tid) {
                            self.record_progress(tid, now);
                        }
                        self.tracing.single_steps += 1;
                        let _ = ptrace::step(tid, None);
                    }
                    Ok(WaitStatus::Stopped(_, Signal::SIGTRAP)) => {
                        if let Ok(mut regs) = ptrace::getregs(tid) {
                            if self.has_breakpoint(regs.rip.wrapping_sub(1)) {
                                regs.rip -= 1;
                                let _ = ptrace::setregs(tid, regs);
                            }
                        }
                        // The SIGSTOP is still pending: collect it.
                        let _ = ptrace::cont(tid, None);
                    }
                    Ok(WaitStatus::Stopped(_, _)) | Ok(WaitStatus::PtraceEvent(..)) => {
                        let _ = ptrace::cont(tid, None);
                    }
                    _ => {
                        self.threads.remove(&tid);
                        self.trace_thread_gone(tid);
                        break;
                    }
                }
            }
            self.running.remove(&tid);
        }
    }

    /// Collects ptrace events until one must be reported to the client.
    pub(super) fn next_stop(&mut self) -> Option<StopReason> {
        // A recorded thread stepping an instruction that cannot block: wait
        // for it alone (a few hundred times in a row at most, then the other
        // threads and the client get their turn).
        let mut only: Option<Pid> = None;
        loop {
            let status = match only.take() {
                Some(tid) => waitpid(tid, Some(WaitPidFlag::__WALL)),
                None => waitpid(None, Some(WaitPidFlag::__WALL | WaitPidFlag::WNOHANG)),
            };
            let status = match status {
                Ok(WaitStatus::StillAlive) => return None,
                Ok(status) => status,
                Err(_) => return Some(StopReason::Exited(0)),
            };
            tracing::trace!(?status, "ptrace");
            match status {
                WaitStatus::PtraceEvent(tid, _, event) if event == libc::PTRACE_EVENT_CLONE => {
                    if let Ok(new) = ptrace::getevent(tid) {
                        let new = Pid::from_raw(new as i32);
                        self.threads.insert(new);
                        self.new_threads.insert(new);
                    }
                    self.resume_after_event(tid);
                }
                WaitStatus::PtraceEvent(tid, _, event) if event == libc::PTRACE_EVENT_EXEC && !self.threads.contains(&tid) && tid != self.pid => {
                    self.resume_after_event(tid);
                }
                WaitStatus::PtraceEvent(tid, _, event) if event == libc::PTRACE_EVENT_EXEC => {
                    // The program exec'd (the collector asks for exec events):
                    // reported as the SIGTRAP the kernel sends without them.
                    let former = ptrace::getevent(tid).map_or(tid, |former| Pid::from_raw(former as i32));
                    self.threads.retain(|t| *t == self.pid);
                    self.running.clear();
                    self.trace_exec(tid, former);
                    self.history_restarts();
                    return Some(StopReason::SignalWithThread { tid: tid_of(tid), signal: GdbSignal::SIGTRAP });
                }
                WaitStatus::PtraceEvent(tid, _, _) => self.resume_after_event(tid),
                WaitStatus::Stopped(tid, Signal::SIGSTOP)
                    if !self.threads.contains(&tid)
                        && !self.new_threads.contains(&tid)
                        && retrace_collector::process::thread_group(tid).is_some_and(|group| group != self.pid) =>
                {
                    // A forked child's first stop (launch asks for fork events):
                    // not a thread of the program.
                    self.release_forked_child(tid);
                }
                WaitStatus::Stopped(tid, Signal::SIGSTOP) if self.new_threads.remove(&tid) || !self.threads.contains(&tid) => {
                    // A new thread's first stop: let it run with the others, unless
                    // only some threads may run now (a step with the others held,
                    // while the client has lifted breakpoints): then it waits for
                    // the next resume.
                    self.threads.insert(tid);
                    self.init_thread_debug_registers();
                    let traced = self.trace_new_thread(tid) || self.full_recording();
                    if self.stop_note.is_some() {
                        // Over the process's trace limit: stop, as lldb-server does.
                        self.stop_others(None);
                        return Some(StopReason::SignalWithThread { tid: tid_of(tid), signal: GdbSignal::SIGTRAP });
                    }
                    if self.scheduler_locked {
                        // It waits for the next resume.
                    } else if traced {
                        if let Err(error) = self.start_recorded(tid, None) {
                            tracing::warn!(%error, "a new traced thread");
                        }
                    } else if ptrace::cont(tid, None).is_ok() {
                        self.running.insert(tid);
                    }
                }
                WaitStatus::Stopped(tid, Signal::SIGSTOP) if self.interrupted => {
                    self.block_interrupted(tid);
                    self.running.remove(&tid);
                    self.stop_others(Some(tid));
                    return Some(StopReason::SignalWithThread { tid: tid_of(tid), signal: GdbSignal::SIGINT });
                }
                WaitStatus::Stopped(tid, Signal::SIGTRAP) if self.records(tid) => {
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
                WaitStatus::Stopped(tid, Signal::SIGTRAP) => {
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
                WaitStatus::Stopped(tid, signal) => {
                    self.block_interrupted(tid);
                    self.running.remove(&tid);
                    self.stop_others(Some(tid));
                    return Some(StopReason::SignalWithThread { tid: tid_of(tid), signal: crate::signals::to_gdb(signal) });
                }
                WaitStatus::Exited(tid, code) => {
                    self.threads.remove(&tid);
                    self.running.remove(&tid);
                    self.trace_thread_gone(tid);
                    if tid == self.pid {
                        return Some(StopReason::Exited(code as u8));
                    }
                }
                WaitStatus::Signaled(tid, signal, _) => {
                    self.threads.remove(&tid);
                    self.running.remove(&tid);
                    self.trace_thread_gone(tid);
                    if tid == self.pid {
                        return Some(StopReason::Terminated(crate::signals::to_gdb(signal)));
                    }
                }
                _ => {}
            }
        }
    }
}
