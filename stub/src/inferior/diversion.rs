//! Code run in a replay's past (a function an expression calls, a
//! breakpoint condition that calls one), as rr runs a diversion from a
//! replay: a stand-in process. The recorded program is started again under
//! ptrace and stopped at its entry; its writable memory is replaced by the
//! recorded memory at the position, and every other page the code touches
//! is mapped in from the recording when it faults. Only the diverted thread
//! runs; what the code changes stays in the stand-in, which is killed when
//! the replay moves on (the history is as recorded).

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

use nix::sys::ptrace;
use nix::sys::signal::Signal;
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::Pid;
use retrace_collector::process::{launch, LaunchOptions};

use crate::arch::Regs;
use crate::inferior::ptrace_registers::{read_all_registers, write_all_registers};

const PAGE: u64 = 4096;

/// The bytes of memory at the position (the recording's, and what the
/// debugger wrote there): how many of `buf` from `address` are known.
pub type Source<'a> = &'a mut dyn FnMut(u64, &mut [u8]) -> usize;

/// How a run of the stand-in ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DiversionStop {
    /// At one of the breakpoints given (the PC is its address).
    Breakpoint,
    /// A single step done.
    Stepped,
    /// A signal stopped it (a fault on memory the recording does not
    /// know, an abort).
    Signal(Signal),
    /// The code ended the process.
    Exited(i32),
}

/// See the module documentation.
#[derive(Debug)]
pub struct Diversion {
    pid: Pid,
    memory: File,
    /// Pages whose bytes the stand-in holds (from the recording).
    held: BTreeSet<u64>,
    /// Where a `syscall` instruction is written to make system calls in the
    /// stand-in: where it stood when started, always mapped and executable
    /// in it.
    gate: u64,
}

fn sys(what: &'static str) -> impl Fn(nix::Error) -> String {
    move |e| format!("the diversion's stand-in process: {what}: {e}")
}

/// The full x87 tag word (2 bits a register, 11: empty) as `fxsave`'s
/// abridged one (1 bit a register: in use), which ptrace takes.
fn abridged_tags(full: u32) -> u32 {
    (0..8).fold(0, |tags, k| if (full >> (2 * k)) & 3 != 3 { tags | 1 << k } else { tags })
}

impl Diversion {
    /// Starts `program` as a stand-in holding the memory `source` gives in
    /// its writable mappings, with `registers`.
    pub fn start(program: &Path, registers: &Regs, source: Source<'_>) -> Result<Self, String> {
        let tracee = launch(&LaunchOptions::new(program.as_os_str(), Vec::<std::ffi::OsString>::new())).map_err(|e| format!("the diversion's stand-in process: {e}"))?;
        let pid = tracee.pid;
        let memory = File::options().read(true).write(true).open(format!("/proc/{pid}/mem")).map_err(|e| format!("the diversion's stand-in process: its memory: {e}"))?;
        // The gate: where the stand-in stands (its own entry, mapped and
        // executable there, where the recording's may not be: a PIE
        // recorded under Valgrind's layout runs natively elsewhere).
        let gate = ptrace::getregs(pid).map_err(sys("reading its registers"))?.rip;
        let mut diversion = Diversion { pid, memory, held: BTreeSet::new(), gate };
        // Its writable mappings (the program's data and bss) as recorded.
        let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).map_err(|e| format!("the diversion's stand-in process: its mappings: {e}"))?;
        for line in maps.lines() {
            let mut fields = line.split_whitespace();
            let (Some(range), Some(permissions)) = (fields.next(), fields.next()) else { continue };
            let name = fields.nth(3).unwrap_or("");
            if !permissions.starts_with("rw") || name.starts_with('[') {
                continue;
            }
            let Some((start, end)) = range.split_once('-').and_then(|(s, e)| Some((u64::from_str_radix(s, 16).ok()?, u64::from_str_radix(e, 16).ok()?))) else { continue };
            for page in (start..end).step_by(PAGE as usize) {
                diversion.refresh(page, source);
            }
        }
        // The x87 tags as given, once (later writes keep them).
        diversion.write_registers(registers, abridged_tags(registers.fpu[2]))?;
        Ok(diversion)
    }

    /// Writes the recorded bytes of `page` into the stand-in (where it has
    /// the page mapped): whether the recording knows any.
    fn refresh(&mut self, page: u64, source: Source<'_>) -> bool {
        let mut bytes = vec![0u8; PAGE as usize];
        let known = source(page, &mut bytes);
        if known > 0 && self.memory.write_all_at(&bytes[..known], page).is_ok() {
            self.held.insert(page);
            return true;
        }
        false
    }

    /// Makes system call `number` in the stand-in, at the gate.
    fn syscall(&mut self, number: u64, args: [u64; 6]) -> Result<u64, String> {
        let saved = ptrace::getregs(self.pid).map_err(sys("reading its registers"))?;
        let mut original = [0u8; 2];
        self.memory.read_exact_at(&mut original, self.gate).map_err(|e| format!("the diversion's stand-in process: {e}"))?;
        self.memory.write_all_at(&[0x0f, 0x05], self.gate).map_err(|e| format!("the diversion's stand-in process: {e}"))?;
        let mut call = saved;
        (call.rip, call.rax, call.orig_rax) = (self.gate, number, u64::MAX);
        (call.rdi, call.rsi, call.rdx, call.r10, call.r8, call.r9) = (args[0], args[1], args[2], args[3], args[4], args[5]);
        ptrace::setregs(self.pid, call).map_err(sys("setting its registers"))?;
        ptrace::step(self.pid, None).map_err(sys("stepping"))?;
        let status = waitpid(self.pid, None).map_err(sys("waiting"))?;
        let result = ptrace::getregs(self.pid).map(|r| r.rax);
        let _ = self.memory.write_all_at(&original, self.gate);
        ptrace::setregs(self.pid, saved).map_err(sys("restoring its registers"))?;
        match (status, result) {
            (WaitStatus::Stopped(_, Signal::SIGTRAP), Ok(rax)) => Ok(rax),
            (other, _) => Err(format!("the diversion's stand-in process: a system call ended as {other:?}")),
        }
    }

    /// Maps `page` in the stand-in and fills it from `source`: whether the
    /// recording knows it.
    fn fault_in(&mut self, page: u64, source: Source<'_>) -> bool {
        let mut probe = [0u8; 1];
        if self.held.contains(&page) || (source(page, &mut probe) == 0 && (1..PAGE).step_by(64).all(|at| source(page + at, &mut probe) == 0)) {
            return false;
        }
        let flags = (libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE) as u64;
        let protection = (libc::PROT_READ | libc::PROT_WRITE | libc::PROT_EXEC) as u64;
        match self.syscall(libc::SYS_mmap as u64, [page, PAGE, protection, flags, u64::MAX, 0]) {
            Ok(address) if address == page => {
                let mut bytes = vec![0u8; PAGE as usize];
                // The known runs of the page (a byte not known reads 0).
                let mut at = 0;
                while at < PAGE as usize {
                    let known = source(page + at as u64, &mut bytes[at..]);
                    at = if known == 0 { (at / 64 + 1) * 64 } else { at + known };
                }
                let _ = self.memory.write_all_at(&bytes, page);
                self.held.insert(page);
                true
            }
            _ => false,
        }
    }

    /// The stand-in's registers.
    pub fn registers(&self) -> Result<Regs, String> {
        read_all_registers(self.pid).map_err(sys("reading its registers"))
    }

    /// Sets the stand-in's registers. The x87 tags (the debugger's notion
    /// of them varies) stay as they are.
    pub fn set_registers(&self, registers: &Regs) -> Result<(), String> {
        self.write_registers(registers, self.registers()?.fpu[2])
    }

    /// Writes `registers` with the abridged x87 tag word `tags`. Segment
    /// bases that are no user address (LLDB fills registers it does not
    /// track with 0xcc) stay as they are.
    fn write_registers(&self, registers: &Regs, tags: u32) -> Result<(), String> {
        let current = self.registers()?;
        let mut registers = registers.clone();
        registers.fpu[2] = tags;
        const USER_END: u64 = 1 << 47;
        if registers.fs_base >= USER_END {
            registers.fs_base = current.fs_base;
        }
        if registers.gs_base >= USER_END {
            registers.gs_base = current.gs_base;
        }
        registers.orig_rax = u64::MAX;
        write_all_registers(self.pid, &registers).map_err(|e| format!("the diversion's stand-in process: setting its registers ({registers:x?}): {e}"))
    }

    /// Reads the stand-in's memory where it holds the recording's pages
    /// (or its own program's): how many bytes, `None` where it holds none.
    pub fn read(&self, address: u64, buf: &mut [u8]) -> Option<usize> {
        let page = address / PAGE * PAGE;
        if !self.held.contains(&page) {
            return None;
        }
        let mut n = 0;
        while n < buf.len() && self.held.contains(&((address + n as u64) / PAGE * PAGE)) {
            let end = (((address + n as u64) / PAGE + 1) * PAGE - address) as usize;
            let end = end.min(buf.len());
            self.memory.read_exact_at(&mut buf[n..end], address + n as u64).ok()?;
            n = end;
        }
        Some(n)
    }

    /// Writes into the stand-in, bringing the pages in first: whether it
    /// holds them all.
    pub fn write(&mut self, address: u64, data: &[u8], source: Source<'_>) -> bool {
        let end = address.saturating_add(data.len() as u64);
        for page in (address / PAGE * PAGE..end).step_by(PAGE as usize) {
            if !self.held.contains(&page) && !self.fault_in(page, source) {
                return false;
            }
        }
        self.memory.write_all_at(data, address).is_ok()
    }

    /// Runs (or single-steps) the stand-in until one of `breakpoints`, a
    /// signal or its end; pages it touches come from `source`.
    pub fn run(&mut self, step: bool, breakpoints: &[u64], source: Source<'_>) -> Result<DiversionStop, String> {
        let mut inserted: BTreeMap<u64, u8> = BTreeMap::new();
        for &address in breakpoints {
            let page = address / PAGE * PAGE;
            if !self.held.contains(&page) {
                self.fault_in(page, source);
            }
            let mut byte = [0u8];
            if self.memory.read_exact_at(&mut byte, address).is_ok() && self.memory.write_all_at(&[0xcc], address).is_ok() {
                inserted.insert(address, byte[0]);
            }
        }
        let stop = self.run_to_stop(step, &inserted, source);
        for (&address, &byte) in &inserted {
            let _ = self.memory.write_all_at(&[byte], address);
        }
        stop
    }

    fn run_to_stop(&mut self, step: bool, breakpoints: &BTreeMap<u64, u8>, source: Source<'_>) -> Result<DiversionStop, String> {
        let mut signal = None;
        loop {
            if step {
                ptrace::step(self.pid, signal).map_err(sys("stepping"))?;
            } else {
                ptrace::cont(self.pid, signal).map_err(sys("continuing"))?;
            }
            signal = None;
            match waitpid(self.pid, None).map_err(sys("waiting"))? {
                WaitStatus::Stopped(_, Signal::SIGSEGV) => {
                    let address = ptrace::getsiginfo(self.pid).map(|info| unsafe { info.si_addr() } as u64).unwrap_or(0);
                    if !self.fault_in(address / PAGE * PAGE, source) {
                        return Ok(DiversionStop::Signal(Signal::SIGSEGV));
                    }
                }
                WaitStatus::Stopped(_, Signal::SIGTRAP) => {
                    let mut registers = ptrace::getregs(self.pid).map_err(sys("reading its registers"))?;
                    if breakpoints.contains_key(&registers.rip.wrapping_sub(1)) {
                        registers.rip -= 1;
                        ptrace::setregs(self.pid, registers).map_err(sys("setting its registers"))?;
                        return Ok(DiversionStop::Breakpoint);
                    }
                    return Ok(if step { DiversionStop::Stepped } else { DiversionStop::Signal(Signal::SIGTRAP) });
                }
                WaitStatus::Stopped(_, other) => return Ok(DiversionStop::Signal(other)),
                WaitStatus::Exited(_, code) => return Ok(DiversionStop::Exited(code)),
                WaitStatus::Signaled(_, killed, _) => return Ok(DiversionStop::Signal(killed)),
                // Its exit announced (PTRACE_O_TRACEEXIT), a thread or a
                // child started: on.
                _ => {}
            }
        }
    }
}

impl Drop for Diversion {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(self.pid, Signal::SIGKILL);
        let _ = waitpid(self.pid, None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_full_tag_word_becomes_the_abridged_one() {
        assert_eq!(abridged_tags(0xffff), 0);
        // st0 valid (00), st1 zero (01), st2 special (10), the rest empty.
        assert_eq!(abridged_tags(0xffe4), 0b0000_0111);
    }
}
