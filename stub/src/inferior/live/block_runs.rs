//! Recorded continues at branch-stop speed: a recorded thread that only
//! its instruction addresses are kept for (`process trace start`,
//! `--record=branch`) runs freely through each straight run of
//! instructions to the branch that ends it, where an `int3` of the stub's
//! stops it ([`retrace_collector::blocks`], as `retrace record --mode
//! branch` runs); the block's instructions go into the trace and the
//! history at once, and the branch is emulated there or single-stepped.
//!
//! Everything the client sees stays as with single steps:
//! - a block also ends before every breakpoint of the client's, whose stop
//!   is taken there (the PC at the breakpoint, its instruction not run);
//! - hardware breakpoints and watchpoints trap by themselves inside a
//!   block, and the instructions before the trap are recorded; while a
//!   watchpoint is set no branch that reads or writes memory (`call`,
//!   `ret`, `jmp [mem]`) is emulated, so none is missed;
//! - a signal or an interrupt inside a block records the instructions
//!   before the PC;
//! - the stub's `int3`s are in memory only while the program runs: every
//!   stop reported takes them out, reads hide them, and they are taken out
//!   before every system call that copies, shares, replaces or remaps the
//!   address space (`fork`, `vfork`, `clone`, `execve`, `mmap`, `munmap`,
//!   `mprotect`, `mremap`), so no child and no new mapping inherits one.
//!
//! Only a process with one thread runs block by block (an `int3` lifted
//! for a step over it could be missed by another thread; the collector
//! makes the same choice), and only code in mappings no one can write
//! (JIT code is stepped). `--record=full` keeps every register at every
//! instruction and still steps one instruction at a time.

use std::collections::HashMap;
use std::rc::Rc;

use gdbstub::common::Signal as GdbSignal;
use nix::sys::ptrace;
use nix::unistd::Pid;
use retrace_collector::blocks::{self, Block, Int3s};
use retrace_collector::control::Resume;
use retrace_decoder::x86::{FlowKind, InsnInfo};

use super::{tid_of, ProcessTarget};
use crate::inferior::replay::DebugSlot;
use crate::inferior::frames::Flow;
use crate::inferior::StopReason;

/// System calls before which the stub's `int3`s are taken out: clone,
/// fork, vfork, clone3 (a child copies or shares the memory), execve,
/// execveat (the code is replaced), mmap, mprotect, munmap, mremap (code
/// may be unmapped, remapped or made writable).
const ADDRESS_SPACE_SYSCALLS: [u64; 10] = [56, 57, 58, 435, 59, 322, 9, 10, 11, 25];

/// The state of block runs within one resume of the program.
#[derive(Debug, Default)]
pub(super) struct BlockRuns {
    int3s: Int3s,
    /// Blocks found since the program last resumed, by first address.
    blocks: HashMap<u64, Rc<Block>>,
    /// The thread running through a block, and the block's first address.
    running: Option<(Pid, u64)>,
    /// An `int3` given its original byte for a step over it.
    lifted: Option<u64>,
    /// Whether the thread's last resume ends without waiting on the
    /// kernel (a block, or a step of anything but a system call).
    prompt: Option<bool>,
}

impl BlockRuns {
    /// Replaces every `int3` of ours in `buf`, read at `address`, with the
    /// program's byte.
    pub(super) fn hide(&self, address: u64, buf: &mut [u8]) {
        self.int3s.hide(address, buf);
    }

    /// Whether the last resume of a recorded thread ends promptly, once
    /// (`None` if nothing was said since).
    pub(super) fn take_prompt(&mut self) -> Option<bool> {
        self.prompt.take()
    }
}

/// How an instruction moves between frames, from its kind.
fn flow_of(insn: &InsnInfo) -> Flow {
    match insn.kind {
        FlowKind::Call { .. } | FlowKind::IndirectCall => Flow::Call,
        FlowKind::Return => Flow::Return,
        _ => Flow::Other,
    }
}

impl ProcessTarget {
    /// Whether thread `tid`, continuing recorded, may run block by block.
    fn runs_blocks(&self, tid: Pid) -> bool {
        self.threads.len() + self.new_threads.len() == 1 && self.recording.contains(&tid) && !self.records_every_register() && !self.tracing.steps_only()
    }

    /// The block at `ip`, ending also before the client's breakpoints;
    /// `None` where code may change (a writable mapping: JIT code is
    /// stepped). Blocks and the mappings are forgotten together, before
    /// every system call on the address space.
    fn block_at(&mut self, ip: u64) -> Option<Rc<Block>> {
        if let Some(block) = self.blocks.blocks.get(&ip) {
            return Some(block.clone());
        }
        if !self.fixed_code(ip) {
            return None;
        }
        let block = Rc::new(blocks::discover(ip, |at, buf| self.program_memory(at, buf), |at| self.has_breakpoint(at))?);
        self.blocks.blocks.insert(ip, block.clone());
        Some(block)
    }

    /// Thread `tid` executed `insn` at `ip` and goes on at `next`.
    fn executed_unstepped(&mut self, tid: Pid, ip: u64, insn: &InsnInfo, next: u64) {
        self.ring_executed(tid, ip, insn, next);
        self.history_executed(tid, ip, next, flow_of(insn));
    }

    /// The instructions of `block` before `upto` ran.
    fn block_ran_to(&mut self, tid: Pid, block: &Block, upto: u64) {
        for (ip, insn) in &block.body {
            if *ip == upto {
                break;
            }
            self.executed_unstepped(tid, *ip, insn, *ip + insn.len as u64);
        }
        self.ring_pending(tid, upto);
    }

    /// A stop due at `now` before its instruction runs: the client's
    /// breakpoint, software or hardware.
    pub(super) fn stop_before(&self, tid: Pid, now: u64) -> Option<StopReason> {
        if self.has_breakpoint(now) {
            return Some(StopReason::SwBreak(tid_of(tid)));
        }
        if self.session.breakpoints().has_hardware(now) {
            return Some(StopReason::HwBreak(tid_of(tid)));
        }
        None
    }

    /// Thread `tid`, continuing recorded, stands at `now` with no stop due
    /// there: it runs on, block by block where it can, else by one single
    /// step. `moved`: it got there by a block or an emulated branch (its
    /// next single step is not prepared yet). Returns a stop met on the
    /// way (an emulated branch landing on a breakpoint).
    pub(super) fn run_on(&mut self, tid: Pid, mut now: u64, mut moved: bool) -> Option<StopReason> {
        if let Some(at) = self.blocks.lifted.take() {
            let _ = self.blocks.int3s.rearm(self.pid, at);
        }
        loop {
            if !self.runs_blocks(tid) {
                return self.single_step(tid, now, moved);
            }
            let Some(block) = self.block_at(now) else { return self.single_step(tid, now, moved) };
            if block.body.is_empty() {
                // At the branch already: no need to run to it.
                let Ok(mut regs) = ptrace::getregs(tid) else { return None };
                match self.take_branch(tid, &block, &mut regs) {
                    Some(next) => {
                        now = next;
                        moved = true;
                        if let Some(stop) = self.stop_before(tid, now) {
                            return Some(stop);
                        }
                        continue;
                    }
                    None => return self.single_step(tid, now, moved),
                }
            }
            // The client's breakpoint at the end stops it as well as ours.
            if !self.has_breakpoint(block.end) && self.blocks.int3s.insert(self.pid, block.end).is_err() {
                return self.single_step(tid, now, moved);
            }
            self.blocks.running = Some((tid, now));
            self.blocks.prompt = Some(true);
            self.tracing.block_runs += 1;
            return match self.control.resume(tid, Resume::Free, None) {
                Ok(()) | Err(nix::Error::ESRCH) => None,
                Err(error) => Some(self.cannot_run(tid, error)),
            };
        }
    }

    /// The branch ending `block`, where thread `tid` stands with `regs`:
    /// emulated and recorded, returning where it goes; `None` when it is to
    /// be single-stepped (`regs` unchanged).
    fn take_branch(&mut self, tid: Pid, block: &Block, regs: &mut libc::user_regs_struct) -> Option<u64> {
        let watched = self.session.breakpoints().watching();
        let next = blocks::take_branch(tid, block, regs, !watched).ok().flatten()?;
        self.executed_unstepped(tid, block.end, &block.end_insn, next);
        self.ring_pending(tid, next);
        Some(next)
    }

    /// One single step of thread `tid` at `now` (its PC), recorded.
    fn single_step(&mut self, tid: Pid, now: u64, moved: bool) -> Option<StopReason> {
        if moved {
            self.prepare_step(tid, None);
        }
        let system_call = !self.steps_promptly(now);
        if system_call {
            let number = ptrace::getregs(tid).map_or(u64::MAX, |regs| regs.rax);
            if ADDRESS_SPACE_SYSCALLS.contains(&number) {
                tracing::trace!(number, "system call on the address space: the stub's int3s and blocks go, and the mappings are read afresh");
                self.blocks.int3s.remove_all(self.pid);
                self.blocks.blocks.clear();
                self.forget_code();
            }
        }
        self.blocks.prompt = Some(!system_call);
        self.tracing.single_steps += 1;
        match self.control.resume(tid, Resume::Step, None) {
            Ok(()) | Err(nix::Error::ESRCH) => None,
            Err(error) => Some(self.cannot_run(tid, error)),
        }
    }

    fn cannot_run(&self, tid: Pid, error: nix::Error) -> StopReason {
        tracing::warn!(tid = tid.as_raw(), %error, "cannot run a recorded thread on");
        StopReason::SignalWithThread { tid: tid_of(tid), signal: GdbSignal::SIGTRAP }
    }

    /// Whether thread `tid` is running through a block.
    pub(super) fn in_block(&self, tid: Pid) -> bool {
        self.blocks.running.is_some_and(|(running, _)| running == tid)
    }

    /// Thread `tid` stopped with a SIGTRAP while running through a block
    /// (`slot`: the debug register that triggered, if any): the stop due,
    /// or `None` once it runs on.
    pub(super) fn block_stopped(&mut self, tid: Pid, slot: Option<DebugSlot>) -> Option<StopReason> {
        let (_, start) = self.blocks.running.take()?;
        let block = self.blocks.blocks.get(&start)?.clone();
        let Ok(mut regs) = ptrace::getregs(tid) else { return None };
        if let Some(slot) = slot {
            // Inside the block: a watchpoint after the instruction that
            // hit it, a hardware breakpoint before its instruction.
            self.block_ran_to(tid, &block, regs.rip);
            return Some(match slot.watch {
                Some(kind) => StopReason::Watch { tid: tid_of(tid), kind, addr: slot.address },
                None => StopReason::HwBreak(tid_of(tid)),
            });
        }
        let at = regs.rip.wrapping_sub(1);
        if at != block.end {
            // No `int3` of the stub's or the client's (the program's own
            // ends a block): reported as the trap it is.
            tracing::warn!(tid = tid.as_raw(), rip = format_args!("{:#x}", regs.rip), "unexpected trap inside a block");
            self.block_ran_to(tid, &block, regs.rip);
            return Some(StopReason::SignalWithThread { tid: tid_of(tid), signal: GdbSignal::SIGTRAP });
        }
        self.block_ran_to(tid, &block, at);
        regs.rip = at;
        if self.has_breakpoint(at) {
            let _ = ptrace::setregs(tid, regs);
            return Some(StopReason::SwBreak(tid_of(tid)));
        }
        match self.take_branch(tid, &block, &mut regs) {
            Some(next) => self.stop_before(tid, next).or_else(|| self.run_on(tid, next, true)),
            None => {
                if ptrace::setregs(tid, regs).is_err() || self.blocks.int3s.lift(self.pid, at).is_err() {
                    return None;
                }
                self.blocks.lifted = Some(at);
                self.single_step(tid, at, true)
            }
        }
    }

    /// Thread `tid` stopped for a signal or an interrupt: what it ran of
    /// its block before its PC is recorded.
    pub(super) fn block_interrupted(&mut self, tid: Pid) {
        let Some((_, start)) = self.blocks.running.take_if(|(running, _)| *running == tid) else { return };
        let (Some(block), Some(now)) = (self.blocks.blocks.get(&start).cloned(), super::rip(tid)) else { return };
        self.block_ran_to(tid, &block, now);
    }

    /// A stop is reported (or the address space is gone, `gone`): the
    /// stub's `int3`s leave the program's memory.
    pub(super) fn blocks_stopped(&mut self, gone: bool) {
        if !gone {
            self.blocks.int3s.remove_all(self.pid);
        }
        self.blocks = BlockRuns::default();
    }
}
