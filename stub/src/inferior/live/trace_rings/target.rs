//! The traced process's side of tracing: a traced thread's continue run
//! one recorded step at a time until it would have stopped untraced, new
//! threads and execs traced as the process makes them, and the client's
//! requests (`jLLDBTraceStart`, `Qbtrace:pt`, `monitor trace`).

use super::*;

impl ProcessTarget {
    /// The instruction at `ip` as the program has it (our breakpoints
    /// hidden), and its first byte.
    fn decode_at(&mut self, ip: u64) -> Option<(InsnInfo, u8)> {
        let program = program_memory_of!(self);
        self.tracing.decode_at(&program, ip)
    }

    /// Whether `ip` lies in a mapping no one can write (code that cannot
    /// change while the program runs).
    pub(in crate::inferior::live) fn fixed_code(&mut self, ip: u64) -> bool {
        let maps = self.tracing.code.maps.get_or_insert_with(|| process::read_maps(self.pid).unwrap_or_default());
        retrace_collector::code_cache::is_fixed_code(maps, ip, 1)
    }

    /// The code and mappings known may change (a system call on the
    /// address space is about to run): read them afresh.
    pub(in crate::inferior::live) fn forget_code(&mut self) {
        self.tracing.code.clear();
    }

    /// A traced thread ran `insn` at `ip` and goes on at `next`, seen
    /// without a step of its own (a block run): into its trace.
    pub(in crate::inferior::live) fn ring_executed(&mut self, tid: Pid, ip: u64, insn: &InsnInfo, next: u64) {
        let time = self.tracing.clock.now();
        if let Some(ring) = self.tracing.threads.get_mut(&tid).and_then(TracedThread::ring) {
            ring.executed(ip, insn, Some(next), time);
        }
    }

    /// A traced thread's next instruction is at `ip`.
    pub(in crate::inferior::live) fn ring_pending(&mut self, tid: Pid, ip: u64) {
        if let Some(thread) = self.tracing.threads.get_mut(&tid) {
            thread.next_ip = Some(ip);
        }
    }

    /// Whether the instruction at `ip` is one whose single step ends at
    /// once (no system call, which may block): then the stepping thread
    /// alone is waited for.
    pub(in crate::inferior::live) fn steps_promptly(&mut self, ip: u64) -> bool {
        self.decode_at(ip).is_some_and(|(insn, _)| insn.kind != FlowKind::Syscall)
    }

    /// A recorded thread's single step ended (a `SIGTRAP` stop) with its
    /// PC at `now`: every step observer hears of it — the full recording
    /// ([`ProcessTarget::step_done`]), then the thread's trace ring, which
    /// returns the instruction that ran.
    pub(in crate::inferior::live) fn record_progress(&mut self, tid: Pid, now: u64) -> Option<InsnInfo> {
        self.step_done(tid);
        let program = program_memory_of!(self);
        self.tracing.after_step(&program, tid, now)
    }

    /// A traced thread is about to be resumed with `signal`: it is followed
    /// from its PC, or from the first instruction of the signal's handler.
    pub(in crate::inferior::live) fn before_traced_resume(&mut self, tid: Pid, signal: Option<Signal>) {
        let handled = signal.is_some_and(|signal| process::has_handler(self.pid, tid, signal));
        let now = if handled { None } else { rip(tid) };
        if let Some(thread) = self.tracing.threads.get_mut(&tid) {
            thread.next_ip = now;
        }
    }

    /// Continues a traced thread recorded: one instruction at a time.
    pub(in crate::inferior::live) fn start_recorded(&mut self, tid: Pid, signal: Option<Signal>) -> Result<(), InferiorError> {
        self.before_traced_resume(tid, signal);
        self.sit_beside(tid);
        if signal.is_none() {
            if let Some(ip) = rip(tid).filter(|ip| self.has_breakpoint(*ip)) {
                // Continuing onto a breakpoint stops at once, as the int3 would.
                tracing::debug!(tid = tid.as_raw(), ip = format_args!("{ip:#x}"), "recorded continue starts on a breakpoint");
                self.pending_stop = Some(StopReason::SwBreak(tid_of(tid)));
                return Ok(());
            }
        }
        self.prepare_step(tid, signal);
        self.tracing.single_steps += 1;
        match self.control.resume(tid, Resume::Step, signal) {
            Ok(()) => {
                self.recording.insert(tid);
                self.running.insert(tid);
                Ok(())
            }
            Err(nix::Error::ESRCH) => Ok(()),
            Err(errno) => Err(InferiorError::Process { what: format!("resuming thread {tid}"), errno }),
        }
    }

    /// A thread in a recorded continue finished an instruction and stands
    /// at `now`: the stop due there, or `None` once it runs on.
    pub(in crate::inferior::live) fn step_on(&mut self, tid: Pid, now: u64) -> Option<StopReason> {
        self.stop_before(tid, now).or_else(|| self.run_on(tid, now, false))
    }

    /// The stop due after a recorded continue's step, in the order the
    /// hardware reports them: a watchpoint hit by the instruction, the
    /// program's own `int3`, then what stands at the next instruction.
    pub(in crate::inferior::live) fn after_recorded_step(&mut self, tid: Pid, now: u64, slot: Option<crate::inferior::replay::DebugSlot>) -> Option<StopReason> {
        if self.in_block(tid) {
            return self.block_stopped(tid, slot);
        }
        let pending = self.tracing.threads.get(&tid).and_then(|t| t.next_ip);
        if let Some(slot) = slot {
            if slot.watch.is_none() && pending == Some(now) {
                // An execution breakpoint faulted before the instruction ran.
                return Some(StopReason::HwBreak(tid_of(tid)));
            }
        }
        let was_int3 = pending.is_some_and(|ip| self.decode_at(ip).is_some_and(|(_, first)| first == INT3) && !self.has_breakpoint(ip));
        let executed = self.record_progress(tid, now);
        if let Some(crate::inferior::replay::DebugSlot { watch: Some(kind), address, .. }) = slot {
            return Some(StopReason::Watch { tid: tid_of(tid), kind, addr: address });
        }
        if was_int3 && executed.is_some() {
            return Some(StopReason::SignalWithThread { tid: tid_of(tid), signal: gdbstub::common::Signal::SIGTRAP });
        }
        self.step_on(tid, now)
    }

    /// Resumes a thread after a ptrace event stop (clone, exec of another
    /// process…) the way it was running: stepped when recorded or
    /// single-stepped by the client, else freely.
    pub(in crate::inferior::live) fn resume_after_event(&mut self, tid: Pid) {
        let how = if self.recording.contains(&tid) || self.stepping.contains(&tid) { Resume::Step } else { Resume::Free };
        let result = self.control.resume(tid, how, None);
        if let Err(error) = result {
            tracing::debug!(tid = tid.as_raw(), %error, "resume after an event");
        }
    }

    /// A new thread of the process: traced if the process is. Returns
    /// whether it is.
    pub(in crate::inferior::live) fn trace_new_thread(&mut self, tid: Pid) -> bool {
        let Some((settings, limit)) = self.tracing.process else { return false };
        let opened = if limit.is_some_and(|limit| self.tracing.total_bytes() + settings.size as u64 > limit) {
            Err(InferiorError::Refused(format!("Thread {tid} can't be traced as the process trace size limit has been reached. Consider retracing with a higher limit.")))
        } else {
            self.tracing.open(tid, settings)
        };
        match opened {
            Ok(thread) => {
                self.tracing.threads.insert(tid, thread);
                true
            }
            Err(message) => {
                tracing::warn!(tid = tid.as_raw(), %message, "a new thread is not traced");
                // The stop says so (lldb-server's `reason:processor trace`).
                self.session.note(StopNote::Trace(message.to_string()));
                false
            }
        }
    }

    /// The process exec'd: the old program's traces are gone with it; the
    /// thread left is traced afresh if it or the process was.
    pub(in crate::inferior::live) fn trace_exec(&mut self, tid: Pid, former: Pid) {
        self.blocks_stopped(true);
        let kept = [former, tid].iter().find_map(|t| self.tracing.threads.get(t)).map(|t| t.settings);
        self.tracing.close_all();
        self.tracing.code.clear();
        self.recording.clear();
        if let Some(settings) = kept.or(self.tracing.process.map(|(settings, _)| settings)) {
            match self.tracing.open(tid, settings) {
                Ok(thread) => {
                    self.tracing.threads.insert(tid, thread);
                }
                Err(message) => tracing::warn!(%message, "the program exec'd: its thread is not traced"),
            }
        }
        self.tracing.settle();
    }

    /// A thread is gone: so is its trace (as lldb-server frees it).
    pub(in crate::inferior::live) fn trace_thread_gone(&mut self, tid: Pid) {
        self.tracing.close(tid);
        self.tracing.settle();
        self.recording.remove(&tid);
    }

    /// Runs the stub and the recorded threads on one CPU (the one the
    /// first recorded thread last ran on) while they are recorded: a single
    /// step is a round trip between the two, and waking a thread on another
    /// CPU costs an interrupt between CPUs (several microseconds in a
    /// virtual machine, more than the step itself; recording ran at a third
    /// of the speed). Every affinity is given back at the next stop, so
    /// only a program that asks for its affinity while recorded sees this.
    fn sit_beside(&mut self, tid: Pid) {
        if self.tracing.beside.is_none() {
            let stat = std::fs::read_to_string(format!("/proc/{}/task/{tid}/stat", self.pid)).unwrap_or_default();
            // Field 39 (`processor`), counted after the command name's `)`.
            let cpu = stat.rsplit(')').next().and_then(|rest| rest.split_whitespace().nth(36)).and_then(|f| f.parse::<usize>().ok());
            let Some(cpu) = cpu else { return };
            let Ok(own) = nix::sched::sched_getaffinity(Pid::from_raw(0)) else { return };
            let mut set = nix::sched::CpuSet::new();
            if set.set(cpu).is_err() || nix::sched::sched_setaffinity(Pid::from_raw(0), &set).is_err() {
                return;
            }
            self.tracing.own_affinity = Some(own);
            self.tracing.beside = Some(set);
        }
        let Some(set) = self.tracing.beside else { return };
        if let Ok(theirs) = nix::sched::sched_getaffinity(tid) {
            if nix::sched::sched_setaffinity(tid, &set).is_ok() {
                self.tracing.pinned.push((tid, theirs));
            }
        }
    }

    /// A stop is reported: every traced thread's trace ends at its PC.
    pub(in crate::inferior::live) fn traces_stopped(&mut self) {
        self.blocks_stopped(false);
        if let Some(own) = self.tracing.own_affinity.take() {
            let _ = nix::sched::sched_setaffinity(Pid::from_raw(0), &own);
        }
        self.tracing.beside = None;
        for (tid, theirs) in std::mem::take(&mut self.tracing.pinned) {
            let _ = nix::sched::sched_setaffinity(tid, &theirs);
        }
        self.recording.clear();
        for (&tid, thread) in &mut self.tracing.threads {
            thread.next_ip = None;
            if let (Some(ring), Some(ip)) = (thread.ring(), rip(tid)) {
                ring.stopped(ip);
            }
        }
    }

    /// The program runs again: the next reads see new contents, and code
    /// is read afresh.
    pub(in crate::inferior::live) fn traces_resumed(&mut self) {
        self.tracing.code.clear();
        self.tracing.steps_in_a_row = 0;
        for thread in self.tracing.threads.values_mut() {
            thread.contents = None;
        }
    }

    pub(in crate::inferior::live) fn start_tracing(&mut self, request: &TraceStart) -> Result<(), InferiorError> {
        let settings = ring_settings(request)?;
        match &request.threads {
            None => {
                if self.tracing.process.is_some() {
                    return Err(InferiorError::Refused("Process currently traced. Stop process tracing first".into()));
                }
                let new: Vec<Pid> = self.threads.iter().copied().filter(|tid| !self.tracing.traces(*tid)).collect();
                let mut total = self.tracing.total_bytes();
                for tid in &new {
                    total += settings.size as u64;
                    if request.process_limit.is_some_and(|limit| total > limit) {
                        return Err(InferiorError::Refused(format!(
                            "Thread {tid} can't be traced as the process trace size limit has been reached. Consider retracing with a higher limit."
                        )));
                    }
                }
                self.tracing.open_all(&new, settings)?;
                self.tracing.process = Some((settings, request.process_limit));
            }
            Some(tids) => {
                let mut new = Vec::new();
                for &tid in tids {
                    let pid = i32::try_from(tid).ok().map(Pid::from_raw).filter(|pid| self.threads.contains(pid));
                    let Some(pid) = pid else { return Err(InferiorError::InvalidRequest(format!("Thread {tid} not found in the process."))) };
                    if self.tracing.process.is_some() && self.tracing.traces(pid) {
                        return Err(InferiorError::Refused(format!("Thread with tid {tid} is currently traced. Stop tracing it first.")));
                    }
                    if self.tracing.traces(pid) || new.contains(&pid) {
                        return Err(InferiorError::Refused(format!("Thread {tid} already traced")));
                    }
                    new.push(pid);
                }
                self.tracing.open_all(&new, settings)?;
            }
        }
        tracing::info!(threads = self.tracing.threads.len(), ring = settings.size, recorder = ?self.tracing.in_use, "tracing started");
        Ok(())
    }

    pub(in crate::inferior::live) fn stop_tracing(&mut self, threads: Option<&[u64]>) -> Result<(), InferiorError> {
        match threads {
            None => {
                self.tracing.process = None;
                self.tracing.close_all();
            }
            Some(tids) => {
                let mut stopped = Vec::new();
                for &tid in tids {
                    let pid = i32::try_from(tid).ok().map(Pid::from_raw).filter(|pid| self.tracing.traces(*pid));
                    let Some(pid) = pid else { return Err(InferiorError::InvalidRequest(format!("Thread {tid} not currently traced"))) };
                    stopped.push(pid);
                }
                for pid in stopped {
                    self.tracing.close(pid);
                }
            }
        }
        self.tracing.settle();
        Ok(())
    }

    pub(in crate::inferior::live) fn tracing_state(&self) -> TraceState {
        TraceState {
            threads: self.tracing.threads.iter().map(|(tid, t)| (tid.as_raw() as u64, t.size())).collect(),
            tsc_conversion: Some(self.tracing.clock.conversion()),
        }
    }

    pub(in crate::inferior::live) fn thread_trace(&mut self, tid: u64) -> Result<Vec<u8>, InferiorError> {
        let pid = i32::try_from(tid).ok().map(Pid::from_raw);
        let Some(thread) = pid.and_then(|pid| self.tracing.threads.get_mut(&pid)) else {
            return Err(InferiorError::InvalidRequest(format!("Thread {tid} not currently traced")));
        };
        if thread.contents.is_none() {
            thread.contents = Some(thread.read());
        }
        Ok(thread.contents.clone().unwrap_or_default())
    }

    /// How the traces are being made, and what each holds.
    pub(in crate::inferior::live) fn tracing_status(&self) -> TraceStatus {
        let tracing = &self.tracing;
        TraceStatus {
            recorder: tracing.in_use.as_ref().map_or_else(|| format!("none yet ({} when tracing starts)", tracing.recorder.name()), RecorderInUse::describe),
            single_steps: tracing.single_steps,
            block_runs: tracing.block_runs,
            threads: tracing
                .threads
                .iter()
                .map(|(tid, thread)| ThreadTraceStatus { tid: tid.as_raw() as u64, size: thread.size(), instructions: thread.instructions() })
                .collect(),
        }
    }

    /// Sets the recorder for traces started from now on; a software
    /// recorder in use switches between `step` and `branch` at once.
    pub(in crate::inferior::live) fn set_trace_recorder(&mut self, recorder: TraceRecorder) -> Result<(), InferiorError> {
        match (&mut self.tracing.in_use, recorder) {
            (Some(RecorderInUse::Software { steps_only, .. }), TraceRecorder::Step | TraceRecorder::Branch) => {
                *steps_only = recorder == TraceRecorder::Step;
            }
            (Some(in_use), TraceRecorder::IntelPt | TraceRecorder::Auto) | (Some(in_use @ RecorderInUse::IntelPt(_)), _) => {
                return Err(InferiorError::Refused(format!("the traces being made use {}: stop tracing first (process trace stop, record stop)", in_use.describe())));
            }
            (None, _) => {}
        }
        self.tracing.recorder = recorder;
        Ok(())
    }

    /// The CPU a decoder of the traces should assume: this one for the
    /// hardware's traces, else the one software recordings declare.
    pub(in crate::inferior::live) fn tracing_cpu(&self) -> retrace_decoder::bundle::CpuInfo {
        match self.tracing.in_use {
            Some(RecorderInUse::IntelPt(_)) => retrace_collector::hardware::host_cpu_info().unwrap_or_else(retrace_decoder::bundle::CpuInfo::software_recording),
            _ => retrace_decoder::bundle::CpuInfo::software_recording(),
        }
    }
}

impl crate::inferior::TraceOps for ProcessTarget {
    fn trace_start(&mut self, request: &crate::inferior::TraceStart) -> Result<(), InferiorError> {
        self.start_tracing(request)
    }

    fn trace_stop(&mut self, threads: Option<&[u64]>) -> Result<(), InferiorError> {
        self.stop_tracing(threads)
    }

    fn trace_state(&self) -> Result<crate::inferior::TraceState, InferiorError> {
        Ok(self.tracing_state())
    }

    fn trace_data(&mut self, tid: u64) -> Result<Vec<u8>, InferiorError> {
        self.thread_trace(tid)
    }

    fn trace_status(&self) -> Result<crate::inferior::TraceStatus, InferiorError> {
        Ok(self.tracing_status())
    }

    fn trace_recorder(&mut self, name: &str) -> Result<(), InferiorError> {
        self.set_trace_recorder(name.parse().map_err(InferiorError::InvalidRequest)?)
    }

    fn trace_cpu(&self) -> retrace_decoder::bundle::CpuInfo {
        self.tracing_cpu()
    }
}
