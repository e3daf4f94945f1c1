//! The process-control core every backend shares: the one owner of
//! `waitpid` for a traced process. It turns ptrace's stops into
//! [`ProcessEvent`]s — a thread trapped, a signal is due, a thread started,
//! clone/fork/vfork happened, the process exec'd, a thread is exiting, the
//! process is over — and handles what no recorder should have to:
//!
//! * a new thread is reported once, when it stands at its first instruction,
//!   whether its clone event or its first stop reached us first, and its
//!   initial `SIGSTOP` is never delivered;
//! * forked and vforked children (not recorded) are reported once stopped at
//!   their first instruction — always after their parent's fork/vfork event
//!   (a vforked child shares the parent's memory: the caller must know that
//!   before it touches the child) — so a recorder can take its breakpoints
//!   out of their copy of memory; they are detached before the next event;
//! * `execve` (`PTRACE_O_TRACEEXEC`) is an event, not a stray `SIGTRAP`; the
//!   threads that exec killed are gone with it.
//!
//! Callers resume threads themselves (`PTRACE_CONT`, `PTRACE_SINGLESTEP`, …)
//! after each event: the core resumes nothing it reported.
//!
//! Waiting is scoped to the tracee's process group when it leads one (as
//! [`crate::process::launch`] arranges), so two recordings in one process
//! (tests) do not take each other's stops.

use std::collections::{BTreeSet, HashSet, VecDeque};

use nix::errno::Errno;
use nix::sys::ptrace;
use nix::sys::signal::Signal;
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

use crate::process;

/// What created a child.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Spawn {
    /// `clone` with `CLONE_THREAD`: a new thread of this process.
    Thread,
    /// `fork` (or a `clone` without `CLONE_THREAD`): a new process, not recorded.
    Fork,
    /// `vfork`: a new process borrowing this one's memory until it execs or exits.
    Vfork,
}

/// Something that happened to the traced process. Every thread named in an
/// event is stopped until the caller resumes it (except in
/// [`ProcessEvent::ThreadGone`], [`ProcessEvent::Exited`] and
/// [`ProcessEvent::Killed`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcessEvent {
    /// `SIGTRAP` that is no ptrace event: a single step finished, or an
    /// `int3` executed (the program's or the caller's).
    Trap(Pid),
    /// A signal is about to be delivered (signal-delivery stop): resume with
    /// it to deliver it, without to suppress it.
    Signal(Pid, Signal),
    /// A new thread of the process stands at its first instruction.
    ThreadStarted(Pid),
    /// The thread `parent` stopped inside `clone`/`fork`/`vfork`, which made
    /// `child`; resuming it finishes the system call.
    Spawned {
        /// The thread that called it.
        parent: Pid,
        /// The new thread or process.
        child: Pid,
        /// Which call.
        kind: Spawn,
    },
    /// A forked or vforked child stands at its first instruction. It is not
    /// recorded: undo any change made to its memory now; it is detached
    /// (and runs on untraced) before the next event is returned.
    ForkedChild(Pid),
    /// `execve` succeeded: the process runs a new program, stopped at its
    /// first instruction in the thread whose id is the process id. `former`
    /// is the id the calling thread had (the same unless a non-leader thread
    /// exec'd); every other thread is gone.
    Exec {
        /// The thread now running the new program (the process id).
        tid: Pid,
        /// The thread that called `execve`, by its id before the call.
        former: Pid,
    },
    /// A thread is about to exit (`PTRACE_EVENT_EXIT`); its registers are
    /// still readable. (Also the leader's when another thread exec'd.)
    Exiting(Pid),
    /// A thread other than the process's last was reaped.
    ThreadGone(Pid),
    /// The process exited with this status.
    Exited(i32),
    /// The process was killed by this signal.
    Killed(Signal),
    /// A ptrace stop with nothing to report (e.g. `PTRACE_EVENT_VFORK_DONE`):
    /// resume the thread.
    Other(Pid),
}

/// How a stopped thread goes on ([`TracedProcess::resume`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resume {
    /// Run freely until something stops it (`PTRACE_CONT`).
    Free,
    /// Execute one instruction and stop (`PTRACE_SINGLESTEP`): a
    /// debugger's step, or a recorder's.
    Step,
}

/// Whether [`TracedProcess::next_event`] may block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// Block until something happens (or a signal interrupts the wait).
    Block,
    /// Return at once when nothing is pending.
    Poll,
    /// Block until this thread has something to report (a debugger
    /// stopping its threads one by one). Events already queued (a forked
    /// child reported after its parent's fork) still come first, and may
    /// be about another thread; a thread that cannot be waited for any
    /// more (reaped already) is `Err(ECHILD)`.
    Thread(Pid),
}

/// A traced process: its threads and the bookkeeping behind
/// [`ProcessEvent`]s.
#[derive(Debug)]
pub struct TracedProcess {
    pid: Pid,
    /// What `waitpid` is asked about: `-pgid` while the tracee leads its own
    /// process group, else `-1`.
    wait_for: Pid,
    threads: BTreeSet<Pid>,
    /// Clone events whose new thread has not stopped yet.
    clone_seen: HashSet<Pid>,
    /// New threads reported at their first stop before their clone event.
    started_early: HashSet<Pid>,
    /// Forked children whose parent's fork event was reported.
    fork_seen: HashSet<Pid>,
    /// Forked children that stopped before their parent's fork event: they
    /// are reported right after it (a vforked child shares the parent's
    /// memory; the caller must have seen the vfork first).
    early_children: HashSet<Pid>,
    /// Forked children reported, to detach before the next event.
    to_release: Vec<Pid>,
    queue: VecDeque<ProcessEvent>,
    over: bool,
}

/// Offset of `rip` in `struct user_regs_struct` (the start of `struct user`).
const USER_RIP_OFFSET: usize = 16 * 8;

/// A stopped thread's RIP: one `PTRACE_PEEKUSER`, half the cost of
/// `PTRACE_GETREGS` (the tracers read it at every stop).
pub fn rip(tid: Pid) -> Result<u64, Errno> {
    ptrace::read_user(tid, USER_RIP_OFFSET as ptrace::AddressType).map(|value| value as u64)
}

impl TracedProcess {
    /// Takes over `pid`, whose `threads` are all in a ptrace stop (as
    /// [`process::launch`] and [`process::attach`] leave them).
    pub fn new(pid: Pid, threads: impl IntoIterator<Item = Pid>) -> Self {
        let leads_group = nix::unistd::getpgid(Some(pid)).is_ok_and(|group| group == pid);
        let mut set: BTreeSet<Pid> = threads.into_iter().collect();
        set.insert(pid);
        TracedProcess {
            pid,
            wait_for: if leads_group { Pid::from_raw(-pid.as_raw()) } else { Pid::from_raw(-1) },
            threads: set,
            clone_seen: HashSet::new(),
            started_early: HashSet::new(),
            fork_seen: HashSet::new(),
            early_children: HashSet::new(),
            to_release: Vec::new(),
            queue: VecDeque::new(),
            over: false,
        }
    }

    /// Resumes thread `tid`, stopped in an event of this process, as `how`
    /// says, delivering `signal` if one is given. A recorder runs a thread
    /// recorded by resuming it freely to breakpoints of its own and by
    /// steps (`blocks`, `software`).
    pub fn resume(&self, tid: Pid, how: Resume, signal: Option<Signal>) -> nix::Result<()> {
        match how {
            Resume::Free => ptrace::cont(tid, signal),
            Resume::Step => ptrace::step(tid, signal),
        }
    }

    /// The process id.
    pub fn pid(&self) -> Pid {
        self.pid
    }

    /// The live threads, by id.
    pub fn threads(&self) -> impl Iterator<Item = Pid> + '_ {
        self.threads.iter().copied()
    }

    /// True once [`ProcessEvent::Exited`] or [`ProcessEvent::Killed`] was returned.
    pub fn is_over(&self) -> bool {
        self.over
    }

    fn release_forked_children(&mut self) {
        for child in self.to_release.drain(..) {
            if let Err(error) = ptrace::detach(child, None) {
                tracing::warn!(child = child.as_raw(), %error, "cannot detach a forked child");
            }
        }
    }

    /// Forked children whose parent's fork event was seen but whose first
    /// stop was not (the parent exited first, as a daemonizing parent does):
    /// they are ours until detached, so wait for that stop and let them go.
    fn release_children_not_yet_stopped(&mut self) {
        // Children that stopped before their fork event are already stopped.
        self.to_release.extend(self.early_children.drain());
        self.release_forked_children();
        let children: Vec<Pid> = self.fork_seen.drain().collect();
        for child in children {
            loop {
                match waitpid(child, Some(WaitPidFlag::__WALL)) {
                    Ok(WaitStatus::Stopped(..) | WaitStatus::PtraceEvent(..)) => {
                        if let Err(error) = ptrace::detach(child, None) {
                            tracing::warn!(child = child.as_raw(), %error, "cannot detach a forked child");
                        }
                        break;
                    }
                    Err(Errno::EINTR) => continue,
                    Ok(WaitStatus::Continued(_) | WaitStatus::StillAlive | WaitStatus::PtraceSyscall(_)) => continue,
                    // Gone already (killed with its group), or not ours.
                    Ok(WaitStatus::Exited(..) | WaitStatus::Signaled(..)) | Err(_) => break,
                }
            }
        }
    }

    /// The next event. With [`Wait::Block`], `Ok(None)` means the wait was
    /// interrupted by a signal (check your stop flag); with [`Wait::Poll`],
    /// that nothing is pending. After the process is over, `Ok(None)`.
    pub fn next_event(&mut self, wait: Wait) -> Result<Option<ProcessEvent>, Errno> {
        self.release_forked_children();
        loop {
            if let Some(event) = self.queue.pop_front() {
                return Ok(Some(self.deliver(event)));
            }
            if self.over {
                return Ok(None);
            }
            let (whom, flags) = match wait {
                Wait::Block => (self.wait_for, WaitPidFlag::__WALL),
                Wait::Poll => (self.wait_for, WaitPidFlag::__WALL | WaitPidFlag::WNOHANG),
                Wait::Thread(tid) => (tid, WaitPidFlag::__WALL),
            };
            let status = match waitpid(whom, Some(flags)) {
                Ok(WaitStatus::StillAlive) => return Ok(None),
                Ok(status) => status,
                Err(Errno::EINTR) => return Ok(None),
                Err(error) if matches!(wait, Wait::Thread(_)) => return Err(error),
                Err(Errno::ECHILD) if self.wait_for != Pid::from_raw(-1) => {
                    // The tracee left the process group it led: wait for any child.
                    self.wait_for = Pid::from_raw(-1);
                    continue;
                }
                Err(Errno::ECHILD) => {
                    // Nothing left to wait for: the process is gone unseen.
                    self.over = true;
                    return Ok(Some(ProcessEvent::Killed(Signal::SIGKILL)));
                }
                Err(error) => return Err(error),
            };
            tracing::trace!(?status, "ptrace");
            if let Some(event) = self.interpret(status) {
                return Ok(Some(self.deliver(event)));
            }
        }
    }

    /// A forked child handed to the caller is released at the next call.
    fn deliver(&mut self, event: ProcessEvent) -> ProcessEvent {
        if let ProcessEvent::ForkedChild(child) = event {
            self.to_release.push(child);
        }
        event
    }

    fn interpret(&mut self, status: WaitStatus) -> Option<ProcessEvent> {
        match status {
            WaitStatus::Exited(tid, code) => self.gone(tid, ProcessEvent::Exited(code)),
            WaitStatus::Signaled(tid, signal, _) => self.gone(tid, ProcessEvent::Killed(signal)),
            WaitStatus::PtraceEvent(tid, _, event) => Some(self.ptrace_event(tid, event)),
            WaitStatus::Stopped(tid, Signal::SIGSTOP) if !self.threads.contains(&tid) => self.first_stop(tid),
            WaitStatus::Stopped(tid, Signal::SIGTRAP) => Some(ProcessEvent::Trap(tid)),
            WaitStatus::Stopped(tid, signal) => Some(ProcessEvent::Signal(tid, signal)),
            WaitStatus::PtraceSyscall(tid) => Some(ProcessEvent::Other(tid)),
            WaitStatus::Continued(_) | WaitStatus::StillAlive => None,
        }
    }

    fn gone(&mut self, tid: Pid, end: ProcessEvent) -> Option<ProcessEvent> {
        if tid == self.pid {
            // The leader is reaped last: the process is over.
            self.threads.clear();
            self.over = true;
            self.release_children_not_yet_stopped();
            return Some(end);
        }
        self.threads.remove(&tid).then_some(ProcessEvent::ThreadGone(tid))
    }

    fn ptrace_event(&mut self, tid: Pid, event: i32) -> ProcessEvent {
        let message = || ptrace::getevent(tid).ok().map(|value| Pid::from_raw(value as i32));
        match event {
            libc::PTRACE_EVENT_CLONE | libc::PTRACE_EVENT_FORK | libc::PTRACE_EVENT_VFORK => {
                let Some(child) = message() else { return ProcessEvent::Other(tid) };
                let kind = match event {
                    libc::PTRACE_EVENT_FORK => Spawn::Fork,
                    libc::PTRACE_EVENT_VFORK => Spawn::Vfork,
                    // A clone without CLONE_THREAD makes a process: tell by its thread group.
                    _ if process::thread_group(child).is_some_and(|group| group != self.pid) => Spawn::Fork,
                    _ => Spawn::Thread,
                };
                if kind == Spawn::Thread && !self.started_early.remove(&child) {
                    self.clone_seen.insert(child);
                }
                if kind != Spawn::Thread {
                    if self.early_children.remove(&child) {
                        self.queue.push_back(ProcessEvent::ForkedChild(child));
                    } else {
                        self.fork_seen.insert(child);
                    }
                }
                ProcessEvent::Spawned { parent: tid, child, kind }
            }
            libc::PTRACE_EVENT_EXEC => {
                let former = message().unwrap_or(tid);
                self.threads.clear();
                self.threads.insert(self.pid);
                self.clone_seen.clear();
                self.started_early.clear();
                ProcessEvent::Exec { tid: self.pid, former }
            }
            libc::PTRACE_EVENT_EXIT => ProcessEvent::Exiting(tid),
            _ => ProcessEvent::Other(tid),
        }
    }

    /// The first stop of a task we have not seen stop before: a new thread
    /// of ours, or a forked child.
    fn first_stop(&mut self, tid: Pid) -> Option<ProcessEvent> {
        let announced = self.clone_seen.remove(&tid);
        if announced || process::thread_group(tid) == Some(self.pid) {
            if !announced {
                // Its clone event may still come: it must not announce it again.
                self.started_early.insert(tid);
            }
            self.threads.insert(tid);
            Some(ProcessEvent::ThreadStarted(tid))
        } else if self.fork_seen.remove(&tid) {
            Some(ProcessEvent::ForkedChild(tid))
        } else {
            // Reported right after its parent's fork event.
            self.early_children.insert(tid);
            None
        }
    }

    /// Kills the process and reaps it, letting every thread through the
    /// stops on its way out. Children reported but not yet released are
    /// detached first.
    pub fn kill(&mut self) {
        self.release_forked_children();
        if self.over {
            return;
        }
        let _ = nix::sys::signal::kill(self.pid, Signal::SIGKILL);
        while !self.over {
            match self.next_event(Wait::Block) {
                Ok(Some(ProcessEvent::Exited(_) | ProcessEvent::Killed(_))) | Err(_) => break,
                // A forked child reported here is released by the next call.
                Ok(Some(event)) => {
                    if let Some(tid) = event.stopped_thread() {
                        let _ = ptrace::cont(tid, None);
                    }
                }
                Ok(None) => {}
            }
        }
    }
}

impl ProcessEvent {
    /// The thread this event left in a ptrace stop, if any (a forked child
    /// is the core's to release, not the caller's to resume).
    pub fn stopped_thread(&self) -> Option<Pid> {
        match *self {
            ProcessEvent::Trap(tid)
            | ProcessEvent::Signal(tid, _)
            | ProcessEvent::ThreadStarted(tid)
            | ProcessEvent::Exiting(tid)
            | ProcessEvent::Other(tid) => Some(tid),
            ProcessEvent::Spawned { parent, .. } => Some(parent),
            ProcessEvent::Exec { tid, .. } => Some(tid),
            ProcessEvent::ForkedChild(_)
            | ProcessEvent::ThreadGone(_)
            | ProcessEvent::Exited(_)
            | ProcessEvent::Killed(_) => None,
        }
    }
}
