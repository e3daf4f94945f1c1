//! A converted thread: its instructions as the log's superblocks give
//! them, its Intel PT writer, and the stream stored as it grows.

use std::path::PathBuf;
use std::sync::atomic::Ordering;

use retrace_decoder::x86::{classify, ExecMode, FlowKind, InsnInfo};

use crate::pt_writer::{StraightRun, ThreadPtWriter};

/// Signals a faulting instruction raises (SIGILL, SIGTRAP, SIGBUS, SIGFPE,
/// SIGSEGV): delivered at that instruction, which did not complete.
pub(super) const SYNCHRONOUS_SIGNALS: [u32; 5] = [4, 5, 7, 8, 11];

/// One guest instruction of a superblock.
#[derive(Debug, Clone, Copy)]
pub(super) struct Instruction {
    pub(super) ip: u64,
    /// `None`: bytes the decoder does not know (recorded as a gap).
    pub(super) info: Option<InsnInfo>,
    /// A REP-prefixed string instruction (one superblock per iteration).
    pub(super) rep: bool,
    /// Needs no packet and continues at the next instruction (a run of
    /// them is counted at once).
    pub(super) plain: bool,
    /// Where the run of plain instructions starting here ends (the index
    /// of the first instruction after it that is not plain; its own index
    /// when it is not plain).
    pub(super) run_end: u16,
}

pub(super) fn instruction(ip: u64, bytes: &[u8]) -> Instruction {
    let info = classify(bytes, ip, ExecMode::Bits64);
    let decoded = iced_x86::Decoder::with_ip(64, bytes, ip, iced_x86::DecoderOptions::NONE).decode();
    let rep = (decoded.has_rep_prefix() || decoded.has_repne_prefix()) && decoded.is_string_instruction();
    let plain = !rep && info.is_some_and(|i| i.kind == FlowKind::Other);
    Instruction { ip, info, rep, plain, run_end: 0 }
}

/// A stream stored in a file as it grows, so that memory stays bounded
/// (the bundle writer moves the file into the bundle), and the bytes that
/// could not be stored.
#[derive(Debug, Default)]
pub(super) struct StoredStream {
    pub(super) file: Option<(PathBuf, std::fs::File, usize)>,
    pub(super) kept: Vec<u8>,
}

impl StoredStream {
    /// Appends `bytes` to the file, created in `folder` the first time as
    /// `name(n)` (`n` numbers the files of all conversions). On an error the
    /// bytes stay in memory, nothing is lost, and the error is returned as
    /// a sentence naming `what` was stored.
    pub(super) fn store(&mut self, folder: &std::path::Path, name: impl FnOnce(usize) -> String, bytes: Vec<u8>, what: &str) -> Result<(), String> {
        static FILES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        if self.file.is_none() {
            let path = folder.join(name(FILES.fetch_add(1, Ordering::Relaxed)));
            match std::fs::File::create(&path) {
                Ok(file) => self.file = Some((path, file, 0)),
                Err(error) => {
                    self.kept.extend(bytes);
                    return Err(format!("storing {what} in {}: {error}", path.display()));
                }
            }
        }
        let (path, file, len) = self.file.as_mut().expect("opened above");
        if let Err(error) = std::io::Write::write_all(file, &bytes) {
            // Back to what was stored whole; these bytes stay in memory.
            let _ = file.set_len(*len as u64);
            self.kept.extend(bytes);
            return Err(format!("storing {what} in {}: {error}", path.display()));
        }
        *len += bytes.len();
        Ok(())
    }

    /// The stored file and its length, and the bytes after it: those that
    /// could not be stored, then `rest`.
    pub(super) fn finish(self, rest: Vec<u8>) -> (Option<(PathBuf, usize)>, Vec<u8>) {
        let mut bytes = self.kept;
        bytes.extend(rest);
        (self.file.map(|(path, _, len)| (path, len)), bytes)
    }
}

/// One thread's conversion.
pub(super) struct ThreadState {
    pub(super) tid: u32,
    pub(super) writer: ThreadPtWriter,
    /// The stream's beginning, stored as it grows (with a spill folder).
    pub(super) stored: StoredStream,
    /// The last instruction, waiting for where control went after it.
    pub(super) pending: Option<Instruction>,
    pub(super) log: Option<Vec<u64>>,
    /// Instructions counted so far (the pending one included), as the
    /// trace numbers them: where full-state records are placed.
    pub(super) steps: u64,
}

impl ThreadState {
    pub(super) fn executed(&mut self, insn: Instruction, undecodable: &mut u64) {
        if let Some(previous) = self.pending {
            // Valgrind runs a REP string instruction one iteration per
            // instruction mark (a superblock of its own, or up to eight
            // when VEX unrolls it); Intel PT counts the instruction once.
            if insn.rep && previous.ip == insn.ip {
                return;
            }
            self.pending = None;
            let info = previous.info.expect("pending instructions are decoded");
            self.writer.executed(previous.ip, &info, Some(insn.ip), 0);
        }
        if insn.info.is_none() {
            *undecodable += 1;
            self.writer.disable_async(insn.ip);
            return;
        }
        if let Some(log) = self.log.as_mut() {
            log.push(insn.ip);
        }
        self.steps += 1;
        self.pending = Some(insn);
    }

    /// The instructions of one superblock run, in order: runs of plain
    /// instructions are counted at once (all but the last, which waits as
    /// any last instruction does).
    pub(super) fn run(&mut self, instructions: &[Instruction], undecodable: &mut u64) {
        let mut i = 0;
        while i < instructions.len() {
            let insn = instructions[i];
            if insn.plain && i + 1 < instructions.len() {
                if let Some(previous) = self.pending.take() {
                    let info = previous.info.expect("pending instructions are decoded");
                    self.writer.executed(previous.ip, &info, Some(insn.ip), 0);
                }
                let start = i;
                // The run, but not the last instruction executed.
                i = (insn.run_end as usize).min(instructions.len() - 1);
                self.writer.executed_plain(insn.ip, (i - start) as u64, 0);
                self.steps += (i - start) as u64;
                if let Some(log) = self.log.as_mut() {
                    log.extend(instructions[start..i].iter().map(|x| x.ip));
                }
                continue;
            }
            self.executed(insn, undecodable);
            i += 1;
        }
    }

    /// The instructions of one superblock run, in order, the run of all
    /// but the last computed once (`straight`): the same as [`Self::run`]
    /// for instructions that are all decoded, with no REP among them.
    /// With `closed`, `straight` holds the last instruction too (where it
    /// went is known): nothing is left pending.
    pub(super) fn run_straight(&mut self, instructions: &[Instruction], straight: &StraightRun, closed: bool) {
        let (first, last) = (instructions[0], instructions[instructions.len() - 1]);
        if let Some(previous) = self.pending.take() {
            let info = previous.info.expect("pending instructions are decoded");
            self.writer.executed(previous.ip, &info, Some(first.ip), 0);
        }
        self.writer.executed_straight(first.ip, straight, 0);
        self.steps += instructions.len() as u64;
        if let Some(log) = self.log.as_mut() {
            log.extend(instructions.iter().map(|x| x.ip));
        }
        if !closed {
            self.pending = Some(last);
        }
    }

    /// Control left the program's code after the pending instruction
    /// (a signal before `resume`, or code not the program's): the pending
    /// instruction completes towards `resume` when known, and tracing stops.
    ///
    /// A REP instruction interrupted between its iterations (at its own
    /// address: a fault part-way, or a signal between two iterations) has
    /// not completed: as Intel PT shows it, it is not counted, and it runs
    /// (on) after the handler. Returns whether that was so.
    pub(super) fn interrupted(&mut self, resume: Option<u64>) -> bool {
        if let Some(previous) = self.pending.take() {
            let info = previous.info.expect("pending instructions are decoded");
            match resume {
                Some(ip) if previous.rep && ip == previous.ip => {
                    self.steps -= 1;
                    if let Some(log) = self.log.as_mut() {
                        log.pop();
                    }
                    self.writer.disable_async(ip);
                    return true;
                }
                Some(ip) => {
                    self.writer.executed(previous.ip, &info, Some(ip), 0);
                    self.writer.disable_async(ip);
                }
                None => self.end_with(previous, info),
            }
        }
        false
    }

    /// The thread ended after its pending instruction (an `exit` system
    /// call), or the recording did.
    pub(super) fn ended(&mut self) {
        if let Some(previous) = self.pending.take() {
            let info = previous.info.expect("pending instructions are decoded");
            self.end_with(previous, info);
        }
    }

    pub(super) fn end_with(&mut self, previous: Instruction, info: InsnInfo) {
        let fallthrough = previous.ip.wrapping_add(info.len as u64);
        match info.kind {
            FlowKind::Syscall | FlowKind::FarTransfer => self.writer.executed(previous.ip, &info, None, 0),
            FlowKind::Other => {
                self.writer.executed(previous.ip, &info, Some(fallthrough), 0);
                self.writer.disable_async(fallthrough);
            }
            FlowKind::Jump { target } | FlowKind::Call { target } => {
                self.writer.executed(previous.ip, &info, Some(target), 0);
                self.writer.disable_async(target);
            }
            // Where it went is not known: it is left out (tracing stops
            // before it), never guessed.
            _ => {
                if let Some(log) = self.log.as_mut() {
                    log.pop();
                }
                self.steps -= 1;
                self.writer.disable_async(previous.ip);
            }
        }
    }
}
