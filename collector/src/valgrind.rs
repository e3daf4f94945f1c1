//! Recording under Valgrind: the program runs on Valgrind's JIT with
//! retrace's tool (`collector/valgrind/retrace.c`, built against the
//! installed Valgrind by `build.rs`), which logs each superblock it
//! translates (its guest instructions and their bytes) and, as the program
//! runs, each superblock entered and each side exit taken. [`LogConverter`]
//! turns that log into the same Intel PT streams the ptrace backend writes
//! ([`ThreadPtWriter`]): every consumer decodes one format.
//!
//! The log (little-endian; after the magic `RTVGLOG2`), one record per tag:
//!
//! | tag | fields | meaning |
//! |---|---|---|
//! | `B` | u32 id, u64 entry, u64 next, u16 n, n × (u64 address, u8 length, bytes), u16 m, m × (u16 index, u64 to) | a translated superblock: its instructions in execution order, where it goes when it runs to its end if that is one address (else 0), and its side exits: at its instruction `index`, for `to` (0: not one address) |
//! | `E` | u32 id, u8 way | the current thread entered superblock `id` and left it by `way`: 0, its end (unless an `X` follows), k, its side exit k − 1 |
//! | 0x80 \| way | — | it entered the superblock at the address the last one went to (its `next`, or the side exit it took), and left it by `way` (0–127): one byte for most superblocks run |
//! | `X` | u16 exit | it left by its side exit `exit` (when the entry's byte could not say so) |
//! | `G` | — | code that is not the program's ran (Valgrind's own text) |
//! | `T` | u32 number, u32 tid | thread `number` (numbered by the tool: Valgrind reuses its slots) runs from now on |
//! | `S` | u32 signal, u64 ip | a signal is delivered before the instruction at `ip` |
//! | `Q` | u32 number, u64 ip | the thread ended at `ip` (after its exit system call, or where a fatal signal stopped it) |
//! | `M` | u64 start, u64 length, u64 offset, u8 prot, u16 n, n bytes of path | a file mapped into the program |
//! | `L` | — | the instruction limit was reached; the tool ended the program |
//! | `F` | u64 ip | the program ends with the running thread at `ip` (after its exit system call, or at the instruction a fatal signal stopped) |
//! | `P` | u32 pid | the process the log is of (right after the magic) |
//!
//! What Valgrind runs that the program does not (its `freeres` at exit,
//! its replacement of the vsyscall page) is either switched off or logged as
//! a gap; a REP string instruction, which Valgrind runs as one superblock
//! per iteration, counts once, as Intel PT counts it.

use std::collections::{BTreeMap, HashMap};
use std::ffi::{OsStr, OsString};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use retrace_decoder::history::AddressHasher;
use retrace_decoder::x86::{classify, ExecMode, FlowKind, InsnInfo};

use crate::process::LoadedModule;
use crate::pt_writer::{StraightRun, ThreadPtWriter, DEFAULT_PSB_PERIOD};
use crate::software::{ImageRecording, Outcome, Recording, ThreadRecording};

/// The magic at the start of every log.
pub const LOG_MAGIC: &[u8; 8] = b"RTVGLOG2";

/// One record of the tool's log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogRecord<'a> {
    /// A translated superblock: `(address, bytes)` of each instruction, and
    /// its side exits: `(index of the instruction, to)` (`to` 0: not one
    /// address).
    Superblock { id: u32, entry: u64, next: u64, instructions: Vec<(u64, &'a [u8])>, exits: Vec<(u16, u64)> },
    /// The current thread entered superblock `id` and left it by `way`
    /// (0: its end, unless a [`LogRecord::LeftAt`] follows; k: side exit
    /// k − 1).
    Entered { id: u32, way: u8 },
    /// It entered the superblock at the address the last one went to, and
    /// left it by `way` (as in [`LogRecord::Entered`]).
    EnteredNext { way: u8 },
    /// The superblock just entered left by its side exit `exit`.
    LeftAt { exit: u16 },
    /// Code that is not the program's ran.
    Foreign,
    /// Thread `number` (its OS id `tid`) runs from now on.
    Thread { number: u32, tid: u32 },
    /// `signal` is delivered before the instruction at `ip`.
    Signal { signal: u32, ip: u64 },
    /// Thread `number` ended at `ip`.
    ThreadEnd { number: u32, ip: u64 },
    /// A file mapped into the program.
    Mapping { start: u64, length: u64, offset: u64, prot: u8, path: &'a [u8] },
    /// The instruction limit was reached: the tool ended the program.
    Limit,
    /// The log is process `pid`'s (right after the magic).
    Process(u32),
    /// The program ends with the running thread at `ip`.
    Final(u64),
}

/// A log that cannot be read on from `offset`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("Valgrind log at byte {offset}: {what}")]
pub struct LogError {
    /// Where in the log.
    pub offset: usize,
    /// What is wrong there.
    pub what: String,
}

const KNOWN_TAGS: &[u8] = b"BEXGTSQMLPF";

/// The byte of a [`LogRecord::EnteredNext`]: this bit and the way.
const ENTERED_NEXT: u8 = 0x80;

fn is_tag(byte: u8) -> bool {
    byte & ENTERED_NEXT != 0 || KNOWN_TAGS.contains(&byte)
}

/// One record at the start of `bytes`.
#[derive(Debug)]
pub enum Parsed<'a> {
    /// The record and its length.
    Record(LogRecord<'a>, usize),
    /// `bytes` ends inside a record (or is empty): more is needed.
    Incomplete,
    /// Not a record: an unknown tag.
    Bad(String),
}

/// Reads the record at the start of `bytes` (a log after its magic).
pub fn parse_record(bytes: &[u8]) -> Parsed<'_> {
    let Some(&tag) = bytes.first() else { return Parsed::Incomplete };
    if !is_tag(tag) {
        return Parsed::Bad(format!("unknown record tag {tag:#04x}"));
    }
    let mut reader = LogReader { log: bytes, at: 0, failed: false };
    match reader.record() {
        Some(record) => Parsed::Record(record, reader.at),
        None => Parsed::Incomplete,
    }
}

/// The records of a log, in order; a damaged or cut record ends the
/// iteration with an error naming its offset (the format has no sync
/// points: what follows cannot be placed).
pub fn log_records(log: &[u8]) -> impl Iterator<Item = Result<LogRecord<'_>, LogError>> {
    let mut reader = LogReader { log, at: 0, failed: false };
    if !log.starts_with(LOG_MAGIC) {
        reader.failed = true;
        return LogRecords { reader, first: Some(LogError { offset: 0, what: "not a retrace Valgrind log (no RTVGLOG2)".into() }) };
    }
    reader.at = LOG_MAGIC.len();
    LogRecords { reader, first: None }
}

struct LogRecords<'a> {
    reader: LogReader<'a>,
    first: Option<LogError>,
}

impl<'a> Iterator for LogRecords<'a> {
    type Item = Result<LogRecord<'a>, LogError>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Some(error) = self.first.take() {
            return Some(Err(error));
        }
        if self.reader.failed || self.reader.at >= self.reader.log.len() {
            return None;
        }
        let start = self.reader.at;
        let record = self.reader.record();
        if record.is_none() {
            self.reader.failed = true;
            let tag = self.reader.log[start];
            let what = if is_tag(tag) { format!("record '{}' cut short", tag as char) } else { format!("unknown record tag {tag:#04x}") };
            return Some(Err(LogError { offset: start, what }));
        }
        record.map(Ok)
    }
}

struct LogReader<'a> {
    log: &'a [u8],
    at: usize,
    failed: bool,
}

impl<'a> LogReader<'a> {
    fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        let bytes = self.log.get(self.at..self.at.checked_add(n)?)?;
        self.at += n;
        Some(bytes)
    }

    fn u8(&mut self) -> Option<u8> {
        Some(self.bytes(1)?[0])
    }

    fn u16(&mut self) -> Option<u16> {
        Some(u16::from_le_bytes(self.bytes(2)?.try_into().ok()?))
    }

    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.bytes(4)?.try_into().ok()?))
    }

    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.bytes(8)?.try_into().ok()?))
    }

    fn record(&mut self) -> Option<LogRecord<'a>> {
        Some(match self.u8()? {
            b'B' => {
                let id = self.u32()?;
                let entry = self.u64()?;
                let next = self.u64()?;
                let n = self.u16()?;
                let mut instructions = Vec::with_capacity(n as usize);
                for _ in 0..n {
                    let address = self.u64()?;
                    let length = self.u8()?;
                    instructions.push((address, self.bytes(length as usize)?));
                }
                let m = self.u16()?;
                let mut exits = Vec::with_capacity(m as usize);
                for _ in 0..m {
                    exits.push((self.u16()?, self.u64()?));
                }
                LogRecord::Superblock { id, entry, next, instructions, exits }
            }
            b'E' => LogRecord::Entered { id: self.u32()?, way: self.u8()? },
            b'X' => LogRecord::LeftAt { exit: self.u16()? },
            byte if byte & ENTERED_NEXT != 0 => LogRecord::EnteredNext { way: byte & !ENTERED_NEXT },
            b'G' => LogRecord::Foreign,
            b'T' => LogRecord::Thread { number: self.u32()?, tid: self.u32()? },
            b'S' => LogRecord::Signal { signal: self.u32()?, ip: self.u64()? },
            b'Q' => LogRecord::ThreadEnd { number: self.u32()?, ip: self.u64()? },
            b'M' => {
                let (start, length, offset, prot) = (self.u64()?, self.u64()?, self.u64()?, self.u8()?);
                let n = self.u16()?;
                LogRecord::Mapping { start, length, offset, prot, path: self.bytes(n as usize)? }
            }
            b'L' => LogRecord::Limit,
            b'P' => LogRecord::Process(self.u32()?),
            b'F' => LogRecord::Final(self.u64()?),
            _ => return None,
        })
    }
}

/// Signals a faulting instruction raises (SIGILL, SIGTRAP, SIGBUS, SIGFPE,
/// SIGSEGV): delivered at that instruction, which did not complete.
const SYNCHRONOUS_SIGNALS: [u32; 5] = [4, 5, 7, 8, 11];

/// One guest instruction of a superblock.
#[derive(Debug, Clone, Copy)]
struct Instruction {
    ip: u64,
    /// `None`: bytes the decoder does not know (recorded as a gap).
    info: Option<InsnInfo>,
    /// A REP-prefixed string instruction (one superblock per iteration).
    rep: bool,
    /// Needs no packet and continues at the next instruction (a run of
    /// them is counted at once).
    plain: bool,
    /// Where the run of plain instructions starting here ends (the index
    /// of the first instruction after it that is not plain; its own index
    /// when it is not plain).
    run_end: u16,
}

fn instruction(ip: u64, bytes: &[u8]) -> Instruction {
    let info = classify(bytes, ip, ExecMode::Bits64);
    let decoded = iced_x86::Decoder::with_ip(64, bytes, ip, iced_x86::DecoderOptions::NONE).decode();
    let rep = (decoded.has_rep_prefix() || decoded.has_repne_prefix()) && decoded.is_string_instruction();
    let plain = !rep && info.is_some_and(|i| i.kind == FlowKind::Other);
    Instruction { ip, info, rep, plain, run_end: 0 }
}

/// One thread's conversion.
struct ThreadState {
    tid: u32,
    writer: ThreadPtWriter,
    /// Where the stream's beginning is stored as it grows (with a spill
    /// folder), and the file.
    stored: Option<(PathBuf, std::fs::File, usize)>,
    /// Bytes taken from the writer that could not be stored (kept here).
    kept: Vec<u8>,
    /// The last instruction, waiting for where control went after it.
    pending: Option<Instruction>,
    log: Option<Vec<u64>>,
}

impl ThreadState {
    fn executed(&mut self, insn: Instruction, undecodable: &mut u64) {
        if let Some(previous) = self.pending {
            // Valgrind runs a REP string instruction one iteration per
            // superblock; Intel PT counts the instruction once.
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
        self.pending = Some(insn);
    }

    /// The instructions of one superblock run, in order: runs of plain
    /// instructions are counted at once (all but the last, which waits as
    /// any last instruction does).
    fn run(&mut self, instructions: &[Instruction], undecodable: &mut u64) {
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
    fn run_straight(&mut self, instructions: &[Instruction], straight: &StraightRun, closed: bool) {
        let (first, last) = (instructions[0], instructions[instructions.len() - 1]);
        if let Some(previous) = self.pending.take() {
            let info = previous.info.expect("pending instructions are decoded");
            self.writer.executed(previous.ip, &info, Some(first.ip), 0);
        }
        self.writer.executed_straight(first.ip, straight, 0);
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
    fn interrupted(&mut self, resume: Option<u64>) {
        if let Some(previous) = self.pending.take() {
            let info = previous.info.expect("pending instructions are decoded");
            match resume {
                Some(ip) => {
                    self.writer.executed(previous.ip, &info, Some(ip), 0);
                    self.writer.disable_async(ip);
                }
                None => self.end_with(previous, info),
            }
        }
    }

    /// The thread ended after its pending instruction (an `exit` system
    /// call), or the recording did.
    fn ended(&mut self) {
        if let Some(previous) = self.pending.take() {
            let info = previous.info.expect("pending instructions are decoded");
            self.end_with(previous, info);
        }
    }

    fn end_with(&mut self, previous: Instruction, info: InsnInfo) {
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
                self.writer.disable_async(previous.ip);
            }
        }
    }
}

/// A translated superblock.
struct Superblock {
    /// Where it starts.
    entry: u64,
    instructions: Box<[Instruction]>,
    /// The ways out: `[0]` its end, `[k]` its side exit k − 1.
    ways: Box<[Way]>,
}

/// One way out of a superblock.
struct Way {
    /// How many of its instructions run when it leaves this way.
    end: u16,
    /// Where it goes then, if one address.
    to: Option<u64>,
    /// The superblock there, once looked up (and the translation
    /// generation it is good for).
    to_id: std::cell::Cell<Option<(u32, u32)>>,
    /// What the instructions before the last write, computed once (when
    /// they are decoded, no REP among them, and need nothing but TNT bits).
    straight: Option<StraightRun>,
    /// The same for all of them, the last going to `to`: what the way
    /// writes when the superblock there is entered next.
    closed: Option<StraightRun>,
}

impl Superblock {
    fn new(instructions: Vec<Instruction>, next: u64, exits: &[(u16, u64)]) -> Superblock {
        let way = |end: usize, to: u64| {
            let end = end.min(instructions.len());
            let body = &instructions[..end];
            let simple = body.iter().all(|i| i.info.is_some() && !i.rep);
            let steps = body.windows(2).map(|pair| (pair[0].ip, pair[0].info.expect("checked"), pair[1].ip));
            let straight = if simple { StraightRun::new(steps.clone()) } else { None };
            let closed = match body.last() {
                Some(last) if simple && to != 0 => StraightRun::new(steps.chain([(last.ip, last.info.expect("checked"), to)])),
                _ => None,
            };
            Way { end: end as u16, to: (to != 0).then_some(to), to_id: Default::default(), straight, closed }
        };
        let mut ways = vec![way(instructions.len(), next)];
        ways.extend(exits.iter().map(|&(index, to)| way(index as usize + 1, to)));
        Superblock { entry: instructions.first().map_or(0, |i| i.ip), ways: ways.into(), instructions: instructions.into() }
    }
}

/// How the open superblock is closed.
#[derive(Debug, Clone, Copy)]
enum Leaving {
    /// By the way out it left by (its end unless the log said otherwise);
    /// where it went is known later.
    AsLeft,
    /// By the way out it left by, into the superblock there (which the
    /// log says was entered next).
    IntoNext,
    /// After its first this many instructions (before a fault).
    After(usize),
}

/// Turns one log (one program image of one process) into per-thread Intel
/// PT streams and the modules the program mapped.
pub struct LogConverter {
    /// By id (the tool numbers them from 0).
    superblocks: Vec<Option<Superblock>>,
    /// The latest translation at each address.
    by_address: HashMap<u64, u32, std::hash::BuildHasherDefault<AddressHasher>>,
    /// Where the program goes next, when one address (as the tool predicts).
    predicted: Option<u64>,
    threads: Vec<ThreadState>,
    /// Index in `threads` by the tool's thread number.
    numbers: BTreeMap<u32, usize>,
    current: Option<usize>,
    /// The superblock and its way out that `predicted` is where of (the
    /// id there is cached in it).
    predicted_by: Option<(u32, usize)>,
    /// Bumped when an address is translated again (cached successors go).
    generation: u32,
    /// The superblock entered last (its id) and the way it left by (0 its
    /// end, until the log says otherwise), until its instructions are
    /// written.
    open: Option<(u32, usize)>,
    mappings: Vec<(u64, u64, u64, u8, String)>,
    psb_period: usize,
    keep_instruction_log: bool,
    undecodable: u64,
    /// Instructions to convert at most (all threads together), and how many
    /// were.
    limit: Option<u64>,
    converted: u64,
    /// The limit was reached (here or in the tool).
    limited: bool,
    /// Where threads' streams are stored once they pass `spill_bytes`
    /// (memory stays bounded however long the run).
    spill: Option<(PathBuf, usize)>,
    /// A stream that could not be stored.
    spill_error: Option<String>,
    /// Superblocks' straight runs are written at once (else instruction by
    /// instruction, as tests compare).
    fast: bool,
    /// Where instructions converted are counted for a progress display
    /// (with how many of this converter's were counted there).
    progress: Option<(Arc<std::sync::atomic::AtomicU64>, u64)>,
}

impl LogConverter {
    /// A converter writing a PSB every `psb_period` bytes; with
    /// `keep_instruction_log`, each thread's instruction addresses are kept.
    pub fn new(psb_period: usize, keep_instruction_log: bool) -> Self {
        LogConverter {
            superblocks: Vec::new(),
            by_address: HashMap::default(),
            predicted: None,
            threads: Vec::new(),
            numbers: BTreeMap::new(),
            current: None,
            predicted_by: None,
            generation: 0,
            open: None,
            mappings: Vec::new(),
            psb_period,
            keep_instruction_log,
            undecodable: 0,
            limit: None,
            converted: 0,
            limited: false,
            spill: None,
            spill_error: None,
            fast: true,
            progress: None,
        }
    }

    /// Stores each thread's stream in `folder` whenever `bytes` of it are
    /// in memory.
    pub fn with_spill(mut self, folder: Option<PathBuf>, bytes: usize) -> Self {
        self.spill = folder.map(|f| (f, bytes.max(1)));
        self
    }

    fn store(&mut self, index: usize) {
        let Some((folder, _)) = &self.spill else { return };
        let thread = &mut self.threads[index];
        let bytes = thread.writer.take_written();
        if thread.stored.is_none() {
            static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
            let path = folder.join(format!("{}.{}.pt", thread.tid, NEXT.fetch_add(1, Ordering::Relaxed)));
            match std::fs::File::create(&path) {
                Ok(file) => thread.stored = Some((path, file, 0)),
                Err(error) => {
                    self.spill_error.get_or_insert(format!("storing the trace in {}: {error}", path.display()));
                    self.spill = None;
                    thread.kept.extend(bytes);
                    return;
                }
            }
        }
        let (path, file, len) = thread.stored.as_mut().expect("opened above");
        *len += bytes.len();
        if let Err(error) = std::io::Write::write_all(file, &bytes) {
            // Back to what was stored whole; these bytes stay in memory.
            *len -= bytes.len();
            let _ = file.set_len(*len as u64);
            // Nothing is lost: the rest stays in memory.
            self.spill_error.get_or_insert(format!("storing the trace in {}: {error}", path.display()));
            self.spill = None;
            thread.kept.extend(bytes);
        }
    }

    /// Counts the instructions converted in `counter` as the log is read
    /// (converters of several images can share one).
    pub fn with_progress(mut self, counter: Option<Arc<std::sync::atomic::AtomicU64>>) -> Self {
        self.progress = counter.map(|c| (c, 0));
        self
    }

    /// Adds the instructions converted since the last call to the progress
    /// counter.
    fn publish_progress(&mut self) {
        if let Some((counter, published)) = self.progress.as_mut() {
            counter.fetch_add(self.converted - *published, Ordering::Relaxed);
            *published = self.converted;
        }
    }

    /// Converts at most `limit` instructions (all threads together); the
    /// rest of the log is left out.
    pub fn with_limit(mut self, limit: Option<u64>) -> Self {
        self.limit = limit;
        self
    }

    /// The instruction limit was reached.
    pub fn limited(&self) -> bool {
        self.limited
    }

    fn into_converted(mut self, mut warnings: Vec<String>) -> ConvertedLog {
        warnings.extend(self.spill_error.take());
        let limited = self.limited;
        let (image, undecodable) = self.finish();
        ConvertedLog { image, undecodable, warnings, limited }
    }

    /// Instructions converted so far, all threads.
    pub fn instructions(&self) -> u64 {
        self.threads.iter().map(|t| t.writer.instructions()).sum()
    }

    fn thread(&mut self) -> Option<&mut ThreadState> {
        self.threads.get_mut(self.current?)
    }

    fn enter(&mut self, id: u32) -> Result<(), String> {
        let superblock = self.superblocks.get(id as usize).and_then(Option::as_ref).ok_or_else(|| format!("superblock {id} entered before it was translated"))?;
        self.open = Some((id, 0));
        self.predicted = superblock.ways[0].to;
        self.predicted_by = Some((id, 0));
        Ok(())
    }

    /// The superblock at the predicted address (its id cached in the way
    /// out that predicted it).
    fn predicted_id(&mut self) -> Result<u32, String> {
        let at = self.predicted.ok_or("a superblock entered as predicted where nothing was")?;
        let way = self.predicted_by.and_then(|(by, way)| self.superblocks.get(by as usize)?.as_ref()?.ways.get(way));
        if let Some((id, generation)) = way.and_then(|way| way.to_id.get()) {
            if generation == self.generation {
                return Ok(id);
            }
        }
        let id = *self.by_address.get(&at).ok_or_else(|| format!("no superblock translated at {at:#x}"))?;
        if let Some(way) = way {
            way.to_id.set(Some((id, self.generation)));
        }
        Ok(id)
    }

    /// The open superblock leaves by its way out `way` (as the log says).
    fn leave(&mut self, way: usize) -> Result<(), String> {
        let Some((id, left)) = self.open.as_mut() else {
            // (Nothing to leave: a damaged log; what follows cannot be
            // predicted.)
            self.predicted = None;
            self.predicted_by = None;
            return Ok(());
        };
        let id = *id;
        let ways = self.superblocks[id as usize].as_ref().map_or(0, |sb| sb.ways.len());
        if way >= ways || *left != 0 {
            return Err(format!("superblock {id} left by its way out {way} of {ways}"));
        }
        *left = way;
        self.predicted = self.superblocks[id as usize].as_ref().and_then(|sb| sb.ways[way].to);
        self.predicted_by = Some((id, way));
        Ok(())
    }

    /// The open superblock is closed: its instructions that ran are the
    /// thread's.
    fn close(&mut self, leaving: Leaving) {
        let Some((id, way)) = self.open.take() else { return };
        let Some(superblock) = self.superblocks[id as usize].as_ref() else { return };
        let way = &superblock.ways[way];
        let (mut end, mut run) = match leaving {
            Leaving::AsLeft => (way.end as usize, way.straight.as_ref().map(|run| (run, false))),
            Leaving::IntoNext => (way.end as usize, way.closed.as_ref().map(|run| (run, true)).or(way.straight.as_ref().map(|run| (run, false)))),
            Leaving::After(end) => (end.min(superblock.instructions.len()), None),
        };
        if let Some(limit) = self.limit {
            let room = limit.saturating_sub(self.converted);
            if (end as u64) >= room {
                end = room as usize;
                self.limited = true;
                run = None;
            }
        }
        self.converted += end as u64;
        let mut undecodable = 0;
        if let Some(index) = self.current {
            let thread = &mut self.threads[index];
            let instructions = &superblock.instructions[..end];
            match run {
                Some((run, closed)) if end > 0 && self.fast => thread.run_straight(instructions, run, closed),
                _ => thread.run(instructions, &mut undecodable),
            }
            if self.spill.as_ref().is_some_and(|(_, at)| thread.writer.unwritten_len() >= *at) {
                self.store(index);
            }
        }
        self.undecodable += undecodable;
    }

    /// Takes the one-byte records at the start of `bytes` (the superblock
    /// at the predicted address was entered, and left as the byte says)
    /// while each way out is a straight run into a superblock looked up
    /// before: the loop most of a log is. Returns how many it took (the
    /// rest, and anything else, goes through [`Self::feed`]).
    pub fn entered_next_run(&mut self, bytes: &[u8]) -> usize {
        let (Some((mut id, mut way)), Some(index), None, None, true, false) = (self.open, self.current, self.limit, &self.spill_error, self.fast, self.limited) else {
            return 0;
        };
        if self.predicted_by != Some((id, way)) {
            return 0;
        }
        let thread = &mut self.threads[index];
        let spill_at = self.spill.as_ref().map_or(usize::MAX, |(_, at)| *at);
        let mut taken = 0;
        for &byte in bytes {
            if byte & ENTERED_NEXT == 0 {
                break;
            }
            let Some(superblock) = self.superblocks[id as usize].as_ref() else { break };
            let out = &superblock.ways[way];
            let (Some(run), Some((next, generation))) = (&out.closed, out.to_id.get()) else { break };
            let next_way = (byte & !ENTERED_NEXT) as usize;
            if generation != self.generation || self.superblocks[next as usize].as_ref().is_none_or(|sb| next_way >= sb.ways.len()) {
                break;
            }
            if let Some(previous) = thread.pending.take() {
                let info = previous.info.expect("pending instructions are decoded");
                thread.writer.executed(previous.ip, &info, Some(superblock.entry), 0);
            }
            thread.writer.executed_straight(superblock.entry, run, 0);
            if let Some(log) = thread.log.as_mut() {
                log.extend(superblock.instructions[..out.end as usize].iter().map(|x| x.ip));
            }
            self.converted += out.end as u64;
            (id, way) = (next, next_way);
            taken += 1;
            if thread.writer.unwritten_len() >= spill_at {
                break;
            }
        }
        if taken > 0 {
            self.open = Some((id, way));
            self.predicted = self.superblocks[id as usize].as_ref().and_then(|sb| sb.ways[way].to);
            self.predicted_by = Some((id, way));
            if self.threads[index].writer.unwritten_len() >= spill_at {
                self.store(index);
            }
        }
        taken
    }

    /// The most frequent record, one byte: the superblock at the predicted
    /// address was entered and left by `way`.
    pub fn entered_next(&mut self, way: u8) -> Result<(), String> {
        if self.limited {
            return Ok(());
        }
        let next = self.predicted_id()?;
        self.close(Leaving::IntoNext);
        self.enter(next)?;
        if way != 0 {
            self.leave(way as usize)?;
        }
        Ok(())
    }

    /// Takes one record.
    pub fn feed(&mut self, record: LogRecord<'_>) -> Result<(), String> {
        if self.limited {
            return Ok(());
        }
        match record {
            LogRecord::LeftAt { exit } => return self.leave(exit as usize + 1),
            LogRecord::EnteredNext { way } => return self.entered_next(way),
            _ => {}
        }
        // A fault stops a superblock at the faulting instruction: what
        // follows it there never ran (and neither did it).
        let stopped_at = match record {
            LogRecord::Signal { signal, ip } if SYNCHRONOUS_SIGNALS.contains(&signal) => Some(ip),
            LogRecord::Final(ip) => Some(ip),
            LogRecord::ThreadEnd { number, ip } if self.numbers.get(&number).copied() == self.current && self.current.is_some() => Some(ip),
            _ => None,
        };
        if let Some(ip) = stopped_at {
            // (An exit system call does not fault: the end may name it.)
            let faulted = |i: &Instruction| i.ip == ip && !i.info.is_some_and(|info| info.kind == FlowKind::Syscall);
            // (Only in a superblock that has not left yet.)
            let open = self.open.filter(|&(_, way)| way == 0).and_then(|(id, _)| self.superblocks[id as usize].as_ref());
            if let Some(index) = open.and_then(|sb| sb.instructions.iter().position(faulted)) {
                self.close(Leaving::After(index));
            }
        }
        self.close(Leaving::AsLeft);
        match record {
            LogRecord::Superblock { id, entry, next, instructions, exits } => {
                let mut decoded: Vec<Instruction> = instructions.iter().map(|(ip, bytes)| instruction(*ip, bytes)).collect();
                let mut end = decoded.len();
                for (i, insn) in decoded.iter_mut().enumerate().rev() {
                    if !insn.plain {
                        end = i;
                    }
                    insn.run_end = end as u16;
                }
                // The tool numbers superblocks as it translates them.
                let index = id as usize;
                if index > self.superblocks.len() {
                    return Err(format!("superblock {id} translated after only {} others", self.superblocks.len()));
                }
                if index == self.superblocks.len() {
                    self.superblocks.push(None);
                }
                self.superblocks[index] = Some(Superblock::new(decoded, next, &exits));
                if self.by_address.insert(entry, id).is_some() {
                    self.generation += 1;
                }
            }
            LogRecord::Entered { id, way } => {
                self.enter(id)?;
                if way != 0 {
                    self.leave(way as usize)?;
                }
            }
            LogRecord::LeftAt { .. } | LogRecord::EnteredNext { .. } => unreachable!("handled above"),
            LogRecord::Foreign => {
                self.predicted = None;
                self.predicted_by = None;
                if let Some(thread) = self.thread() {
                    thread.interrupted(None);
                }
            }
            LogRecord::Thread { number, tid } => {
                let (psb_period, keep) = (self.psb_period, self.keep_instruction_log);
                let threads = &mut self.threads;
                let index = *self.numbers.entry(number).or_insert_with(|| {
                    threads.push(ThreadState { tid, writer: ThreadPtWriter::new(psb_period).without_timestamps(), stored: None, kept: Vec::new(), pending: None, log: keep.then(Vec::new) });
                    threads.len() - 1
                });
                self.threads[index].tid = tid;
                self.current = Some(index);
                self.predicted = None;
                self.predicted_by = None;
            }
            LogRecord::Signal { ip, .. } => {
                self.predicted = None;
                self.predicted_by = None;
                if let Some(thread) = self.thread() {
                    thread.interrupted(Some(ip));
                }
            }
            LogRecord::ThreadEnd { number, ip } => {
                if let Some(&index) = self.numbers.get(&number) {
                    let thread = &mut self.threads[index];
                    let ends_it = thread.pending.and_then(|p| p.info).is_some_and(|i| matches!(i.kind, FlowKind::Syscall | FlowKind::FarTransfer));
                    if ends_it {
                        thread.ended();
                    } else {
                        thread.interrupted(Some(ip));
                    }
                }
            }
            LogRecord::Mapping { start, length, offset, prot, path } => {
                self.mappings.push((start, length, offset, prot, String::from_utf8_lossy(path).into_owned()));
            }
            LogRecord::Limit => self.limited = true,
            LogRecord::Process(_) => {}
            LogRecord::Final(ip) => {
                // The running thread stopped before `ip` unless its last
                // instruction ended it (an exit system call).
                if let Some(thread) = self.thread() {
                    let ends_it = thread.pending.and_then(|p| p.info).is_some_and(|i| matches!(i.kind, FlowKind::Syscall | FlowKind::FarTransfer));
                    if !ends_it {
                        thread.interrupted(Some(ip));
                    }
                }
            }
        }
        Ok(())
    }

    /// The threads' recordings (in the order they first ran) and the
    /// modules: every file mapped executable, at the address where its
    /// offset 0 is (or would be) mapped.
    pub fn finish(mut self) -> (ImageRecording, u64) {
        self.close(Leaving::AsLeft);
        let mut threads = Vec::new();
        for mut thread in std::mem::take(&mut self.threads) {
            thread.ended();
            let instructions = thread.writer.instructions();
            let mut trace = std::mem::take(&mut thread.kept);
            trace.extend(thread.writer.into_bytes());
            threads.push(ThreadRecording { tid: thread.tid, trace, trace_file: thread.stored.map(|(path, _, len)| (path, len)), instructions, instruction_log: thread.log });
        }
        let mut modules: Vec<LoadedModule> = Vec::new();
        for (start, _, offset, prot, path) in &self.mappings {
            // (Valgrind reports its tool's own text too.)
            if prot & 4 == 0 || path.ends_with("-amd64-linux") || modules.iter().any(|m| &m.path == path) {
                continue;
            }
            let base = self
                .mappings
                .iter()
                .filter(|m| &m.4 == path && m.2 == 0)
                .map(|m| m.0)
                .min()
                .unwrap_or(start.wrapping_sub(*offset));
            modules.push(LoadedModule { path: path.clone(), base, image: None });
        }
        (ImageRecording { threads, modules }, self.undecodable)
    }
}

/// What [`convert_log`] made of a log.
pub struct ConvertedLog {
    /// The image's threads and modules.
    pub image: ImageRecording,
    /// Instructions recorded as gaps (bytes the decoder does not know).
    pub undecodable: u64,
    /// Damage met (the conversion ends there).
    pub warnings: Vec<String>,
    /// The instruction limit was reached.
    pub limited: bool,
}

/// Converts a whole log (at most `limit` instructions); a damaged record
/// ends the conversion there, with a warning naming its offset.
pub fn convert_log(log: &[u8], psb_period: usize, keep_instruction_log: bool, limit: Option<u64>) -> ConvertedLog {
    let mut converter = LogConverter::new(psb_period, keep_instruction_log).with_limit(limit);
    let mut warnings = Vec::new();
    for record in log_records(log) {
        match record {
            Ok(record) => {
                if let Err(what) = converter.feed(record) {
                    warnings.push(what);
                    break;
                }
            }
            Err(error) => {
                warnings.push(error.to_string());
                break;
            }
        }
    }
    let limited = converter.limited();
    let (image, undecodable) = converter.finish();
    ConvertedLog { image, undecodable, warnings, limited }
}

/// Converts a log read from `input` as it arrives (a program image's TCP
/// connection from the tool), in bounded memory: the records a read
/// completes are converted, a record cut by the read waits for the next.
/// Returns the process id the log names and the conversion; a log whose
/// process `wanted` refuses is read to its end and not converted.
pub fn convert_stream(input: &mut impl std::io::Read, mut converter: LogConverter, wanted: impl Fn(u32) -> bool) -> std::io::Result<(Option<u32>, ConvertedLog)> {
    let mut warnings = Vec::new();
    let mut buffer = vec![0u8; 1 << 20];
    let (mut filled, mut offset) = (0usize, 0usize);
    let mut pid = None;
    let mut started = false;
    let mut broken = false;
    loop {
        if filled == buffer.len() {
            buffer.resize(buffer.len() * 2, 0);
        }
        let n = input.read(&mut buffer[filled..])?;
        filled += n;
        let mut at = 0;
        if !started && filled >= LOG_MAGIC.len() {
            started = true;
            if &buffer[..LOG_MAGIC.len()] != LOG_MAGIC {
                warnings.push(LogError { offset: 0, what: "not a retrace Valgrind log (no RTVGLOG2)".into() }.to_string());
                broken = true;
            }
            at = LOG_MAGIC.len();
        }
        while started && !broken {
            // The most frequent record, one byte, most often many in a row.
            at += converter.entered_next_run(&buffer[at..filled]);
            if at < filled && buffer[at] & ENTERED_NEXT != 0 {
                if let Err(what) = converter.entered_next(buffer[at] & !ENTERED_NEXT) {
                    warnings.push(what);
                    broken = true;
                }
                at += 1;
                continue;
            }
            match parse_record(&buffer[at..filled]) {
                Parsed::Record(record, length) => {
                    if let LogRecord::Process(number) = record {
                        pid = Some(number);
                        if !wanted(number) {
                            std::io::copy(input, &mut std::io::sink())?;
                            return Ok((pid, LogConverter::new(DEFAULT_PSB_PERIOD, false).into_converted(Vec::new())));
                        }
                    }
                    if let Err(what) = converter.feed(record) {
                        warnings.push(what);
                        broken = true;
                    }
                    at += length;
                }
                Parsed::Incomplete => break,
                Parsed::Bad(what) => {
                    warnings.push(LogError { offset: offset + at, what }.to_string());
                    broken = true;
                }
            }
        }
        if broken {
            // Drain the rest: the program must not block on a full socket.
            std::io::copy(input, &mut std::io::sink())?;
            break;
        }
        converter.publish_progress();
        buffer.copy_within(at..filled, 0);
        filled -= at;
        offset += at;
        if n == 0 {
            if filled > 0 {
                let tag = buffer[0];
                warnings.push(LogError { offset, what: format!("record '{}' cut short", tag as char) }.to_string());
            }
            break;
        }
    }
    Ok((pid, converter.into_converted(warnings)))
}

/// One connection's log: the process it names (when it is the program's)
/// and its conversion.
type ImageLog = (Option<u32>, ConvertedLog);

/// Why recording under Valgrind failed.
#[derive(Debug, thiserror::Error)]
pub enum ValgrindError {
    /// Valgrind, or the tool, is not here.
    #[error("{0}")]
    Unavailable(String),
    /// Running it failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The error.
        source: std::io::Error,
    },
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> ValgrindError {
    let what = what.into();
    move |source| ValgrindError::Io { what, source }
}

#[cfg(valgrind_tool)]
static TOOL: &[u8] = include_bytes!(env!("RETRACE_VALGRIND_TOOL"));
#[cfg(not(valgrind_tool))]
static TOOL: &[u8] = &[];

/// Where the installed Valgrind keeps its tools and preload libraries.
fn valgrind_libexec() -> Option<PathBuf> {
    ["/usr/libexec/valgrind", "/usr/lib/x86_64-linux-gnu/valgrind", "/usr/lib/valgrind", "/usr/local/libexec/valgrind"]
        .into_iter()
        .map(PathBuf::from)
        .find(|dir| dir.join("none-amd64-linux").exists())
}

fn valgrind_binary() -> Option<PathBuf> {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
        .map(|dir| dir.join("valgrind"))
        .find(|path| path.is_file())
}

/// Whether `--backend valgrind` can run here, or why not (one sentence).
pub fn availability() -> Result<(), String> {
    if TOOL.is_empty() {
        return Err("retrace was built without Valgrind's headers (apt-get install valgrind, then rebuild retrace)".into());
    }
    if valgrind_binary().is_none() || valgrind_libexec().is_none() {
        return Err("Valgrind is not installed (apt-get install valgrind)".into());
    }
    Ok(())
}

/// The options retrace runs Valgrind with (before the program): quiet (the
/// program's stderr is its own), no `freeres` at exit (the program never
/// runs it natively), exec'd programs followed. Tests run their reference
/// tools with the same.
pub const VALGRIND_OPTIONS: [&str; 4] = ["-q", "--run-libc-freeres=no", "--run-cxx-freeres=no", "--trace-children=yes"];

/// Names the `VALGRIND_LIB` folder retrace prepares (else one in the
/// temporary directory per tool build); retrace removes it from the
/// program's environment. Valgrind shows the program that folder (in
/// `VALGRIND_LIB` and `LD_PRELOAD`), so a reference run with another tool
/// from the same folder sees the same environment.
pub const VALGRIND_LIB_VARIABLE: &str = "RETRACE_VALGRIND_LIB";

/// A `VALGRIND_LIB` folder: the installed Valgrind's files and retrace's
/// tool beside them (shared by runs; written again when the tool changes).
pub fn tool_folder() -> Result<PathBuf, ValgrindError> {
    availability().map_err(ValgrindError::Unavailable)?;
    let libexec = valgrind_libexec().expect("checked");
    let stamp = TOOL.iter().fold(0xcbf29ce484222325u64, |h, b| (h ^ *b as u64).wrapping_mul(0x100000001b3));
    let folder = match std::env::var_os(VALGRIND_LIB_VARIABLE) {
        Some(folder) => PathBuf::from(folder),
        None => std::env::temp_dir().join(format!("retrace-valgrind-{}-{stamp:016x}", nix::unistd::getuid())),
    };
    let tool = folder.join("retrace-amd64-linux");
    // The same bytes, not just the same size (a rebuilt tool can keep it).
    if tool.metadata().is_ok_and(|m| m.len() == TOOL.len() as u64) && std::fs::read(&tool).is_ok_and(|bytes| bytes == TOOL) {
        return Ok(folder);
    }
    std::fs::create_dir_all(&folder).map_err(io(format!("creating {}", folder.display())))?;
    for entry in std::fs::read_dir(&libexec).map_err(io(format!("reading {}", libexec.display())))? {
        let entry = entry.map_err(io("reading Valgrind's folder"))?;
        let link = folder.join(entry.file_name());
        if !link.exists() {
            let _ = std::os::unix::fs::symlink(entry.path(), &link);
        }
    }
    // Written aside, then renamed: runs side by side never see half a tool.
    let partial = folder.join(format!(".retrace-amd64-linux.{}", std::process::id()));
    std::fs::write(&partial, TOOL).map_err(io("writing retrace's Valgrind tool"))?;
    std::fs::set_permissions(&partial, std::os::unix::fs::PermissionsExt::from_mode(0o755)).map_err(io("making the tool executable"))?;
    std::fs::rename(&partial, &tool).map_err(io("placing retrace's Valgrind tool"))?;
    Ok(folder)
}

/// A thread's trace in memory beyond which it is stored (with a spill
/// folder).
pub const SPILL_BYTES: usize = 8 << 20;

/// Options for [`record`].
#[derive(Clone)]
pub struct ValgrindOptions {
    /// Bytes between PSBs.
    pub psb_period: usize,
    /// Keep every executed instruction address per thread (for tests).
    pub keep_instruction_log: bool,
    /// End the program after this many instructions (all threads of an
    /// image together).
    pub max_instructions: Option<u64>,
    /// Where threads' traces are stored as they grow (the bundle writer
    /// moves them into the bundle); without it they stay in memory.
    pub spill_folder: Option<PathBuf>,
    /// Set from outside (Ctrl-C) to end the recording: the program is
    /// interrupted and the bundle holds what ran.
    pub stop: Arc<AtomicBool>,
    /// Called about five times a second with the instructions converted so
    /// far (all images).
    pub progress: Option<Arc<dyn Fn(u64) + Send + Sync>>,
}

impl Default for ValgrindOptions {
    fn default() -> Self {
        ValgrindOptions { psb_period: DEFAULT_PSB_PERIOD, keep_instruction_log: false, max_instructions: None, spill_folder: None, stop: Arc::new(AtomicBool::new(false)), progress: None }
    }
}

/// Runs `program` with `args` under Valgrind with retrace's tool (its
/// stdin, stdout and stderr are the caller's) and converts the log of each
/// program image it ran (one per `execve`) into a [`Recording`].
pub fn record(program: &OsStr, args: &[OsString], options: &ValgrindOptions) -> Result<Recording, ValgrindError> {
    let folder = tool_folder()?;
    let valgrind = valgrind_binary().expect("checked by tool_folder");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(io("listening for the tool"))?;
    let address = listener.local_addr().map_err(io("listening for the tool"))?;
    listener.set_nonblocking(true).map_err(io("listening for the tool"))?;
    let done = Arc::new(AtomicBool::new(false));
    let main_pid = Arc::new(std::sync::OnceLock::<u32>::new());
    let converted = options.progress.as_ref().map(|_| Arc::new(std::sync::atomic::AtomicU64::new(0)));
    // Each connection is one program image's log (or a forked child's,
    // drained): converted on a thread of its own as the program runs.
    let acceptor = {
        let (done, main_pid, options, converted) = (done.clone(), main_pid.clone(), options.clone(), converted.clone());
        std::thread::spawn(move || -> Vec<std::thread::JoinHandle<std::io::Result<ImageLog>>> {
            let mut handlers = Vec::new();
            loop {
                match listener.accept() {
                    Ok((mut stream, _)) => {
                        let _ = stream.set_nonblocking(false);
                        let (main_pid, options, converted) = (main_pid.clone(), options.clone(), converted.clone());
                        handlers.push(std::thread::spawn(move || {
                            // A forked child's log (it exec'd under Valgrind) is not kept.
                            let is_main = |pid: u32| loop {
                                if let Some(main) = main_pid.get() {
                                    break *main == pid;
                                }
                                std::thread::sleep(Duration::from_millis(1));
                            };
                            let converter = LogConverter::new(options.psb_period, options.keep_instruction_log)
                                .with_limit(options.max_instructions)
                                .with_spill(options.spill_folder.clone(), SPILL_BYTES)
                                .with_progress(converted);
                            let (pid, converted) = convert_stream(&mut stream, converter, &is_main)?;
                            Ok((pid.filter(|&pid| is_main(pid)), converted))
                        }));
                    }
                    Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => {
                        if done.load(Ordering::Relaxed) {
                            break;
                        }
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    Err(_) => break,
                }
            }
            handlers
        })
    };
    let start = Instant::now();
    let spawned = std::process::Command::new(&valgrind)
        .env_remove(VALGRIND_LIB_VARIABLE)
        .env("VALGRIND_LIB", &folder)
        .args(VALGRIND_OPTIONS)
        .arg("--tool=retrace")
        .arg(format!("--retrace-server={address}"))
        .args(options.max_instructions.map(|n| format!("--retrace-max-insns={n}")))
        .arg(program)
        .args(args)
        .spawn();
    let mut child = match spawned {
        Ok(child) => child,
        Err(error) => {
            done.store(true, Ordering::Relaxed);
            let _ = acceptor.join();
            return Err(io(format!("running {}", valgrind.display()))(error));
        }
    };
    let pid = child.id();
    let _ = main_pid.set(pid);
    let mut shown = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().map_err(io("waiting for Valgrind"))? {
            break status;
        }
        if let (Some(progress), Some(converted)) = (&options.progress, &converted) {
            if shown.elapsed() >= Duration::from_millis(200) {
                progress(converted.load(Ordering::Relaxed));
                shown = Instant::now();
            }
        }
        if options.stop.load(Ordering::Relaxed) {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::Signal::SIGINT);
            break child.wait().map_err(io("waiting for Valgrind"))?;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let elapsed = start.elapsed();
    done.store(true, Ordering::Relaxed);
    let handlers = acceptor.join().expect("the acceptor does not panic");
    // This process's images, in the order they connected (exec order).
    let mut images = Vec::new();
    let mut undecodable = 0;
    let mut warnings = Vec::new();
    let mut limited = false;
    for handler in handlers {
        let (Some(_), mut converted) = handler.join().expect("a conversion does not panic").map_err(io("reading the tool's log"))? else { continue };
        undecodable += converted.undecodable;
        warnings.append(&mut converted.warnings);
        limited |= converted.limited;
        if !converted.image.threads.is_empty() {
            images.push(converted.image);
        }
    }
    let outcome = if options.stop.load(Ordering::Relaxed) {
        Outcome::Interrupted
    } else if limited {
        Outcome::InstructionLimit
    } else if let Some(code) = status.code() {
        Outcome::Exited(code)
    } else {
        use std::os::unix::process::ExitStatusExt;
        let signal = status.signal().and_then(|s| nix::sys::signal::Signal::try_from(s).ok()).unwrap_or(nix::sys::signal::Signal::SIGKILL);
        Outcome::Signaled { signal, at: None }
    };
    if images.is_empty() {
        return Err(ValgrindError::Unavailable(format!("Valgrind ran but sent no log ({})", warnings.join("; "))));
    }
    Ok(Recording { pid, images, outcome, elapsed, undecodable, tsc_conversion: None, warnings })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn superblock(id: u32, instructions: &[(u64, &[u8])]) -> Vec<u8> {
        superblock_with_exits(id, instructions, &[])
    }

    /// A superblock with side exits `(index of the instruction, to)`.
    fn superblock_with_exits(id: u32, instructions: &[(u64, &[u8])], exits: &[(u16, u64)]) -> Vec<u8> {
        let mut out = vec![b'B'];
        out.extend(id.to_le_bytes());
        out.extend(instructions[0].0.to_le_bytes());
        out.extend(0u64.to_le_bytes());
        out.extend((instructions.len() as u16).to_le_bytes());
        for (ip, bytes) in instructions {
            out.extend(ip.to_le_bytes());
            out.push(bytes.len() as u8);
            out.extend(*bytes);
        }
        out.extend((exits.len() as u16).to_le_bytes());
        for (index, to) in exits {
            out.extend(index.to_le_bytes());
            out.extend(to.to_le_bytes());
        }
        out
    }

    fn entered(id: u32) -> Vec<u8> {
        let mut out = vec![b'E'];
        out.extend(id.to_le_bytes());
        out.push(0);
        out
    }

    fn left_at(exit: u16) -> Vec<u8> {
        let mut out = vec![b'X'];
        out.extend(exit.to_le_bytes());
        out
    }

    fn thread(number: u32, tid: u32) -> Vec<u8> {
        let mut out = vec![b'T'];
        out.extend(number.to_le_bytes());
        out.extend(tid.to_le_bytes());
        out
    }

    /// A loop: `0x1000: dec ecx; 0x1002: jnz 0x1000; 0x1004: rep movsb;
    /// 0x1006: syscall`, entered three times around, the REP twice.
    fn loop_log() -> Vec<u8> {
        let mut log = LOG_MAGIC.to_vec();
        log.extend(thread(1, 77));
        // dec ecx ; jnz -4 (0x75 0xfc) ; rep movsb ; syscall
        log.extend(superblock_with_exits(0, &[(0x1000, &[0xff, 0xc9]), (0x1002, &[0x75, 0xfc]), (0x1004, &[0xf3, 0xa4])], &[(1, 0x1000)]));
        log.extend(entered(0));
        log.extend(left_at(0)); // left at the jnz (taken)
        log.push(0x81); // superblock 0 again, as predicted, and left there again
        log.extend(entered(0)); // ran through: the jnz fell through, one REP iteration
        log.extend(superblock(1, &[(0x1004, &[0xf3, 0xa4]), (0x1006, &[0x0f, 0x05])]));
        log.extend(entered(1)); // a second REP iteration, then the system call
        log.extend([b'Q', 1, 0, 0, 0]);
        log.extend(0x1008u64.to_le_bytes());
        log
    }

    #[test]
    fn superblocks_and_exits_become_the_instruction_flow() {
        let ConvertedLog { image, undecodable, warnings, .. } = convert_log(&loop_log(), DEFAULT_PSB_PERIOD, true, None);
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(undecodable, 0);
        assert_eq!(image.threads.len(), 1);
        let thread = &image.threads[0];
        assert_eq!(thread.tid, 77);
        // The REP string instruction counts once, as Intel PT counts it.
        assert_eq!(thread.instruction_log.as_deref(), Some(&[0x1000, 0x1002, 0x1000, 0x1002, 0x1000, 0x1002, 0x1004, 0x1006][..]));
        assert_eq!(thread.instructions, 8);
        // The Intel PT decodes to the same flow.
        let mut img = retrace_decoder::image::Image::new();
        img.add_raw("code", 0x1000, vec![0xff, 0xc9, 0x75, 0xfc, 0xf3, 0xa4, 0x0f, 0x05]);
        let decoded: Vec<u64> = retrace_decoder::flow::FlowDecoder::new(&thread.trace, &img)
            .decode_all()
            .into_iter()
            .filter_map(|item| match item {
                retrace_decoder::item::Item::Instruction { ip } => Some(ip),
                _ => None,
            })
            .collect();
        assert_eq!(decoded, vec![0x1000, 0x1002, 0x1000, 0x1002, 0x1000, 0x1002, 0x1004, 0x1006]);
    }

    /// A reader handing out `step` bytes at a time.
    struct Trickle<'a> {
        bytes: &'a [u8],
        step: usize,
    }

    impl std::io::Read for Trickle<'_> {
        fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
            let n = self.step.min(out.len()).min(self.bytes.len());
            out[..n].copy_from_slice(&self.bytes[..n]);
            self.bytes = &self.bytes[n..];
            Ok(n)
        }
    }

    #[test]
    fn a_log_read_piece_by_piece_converts_as_a_whole() {
        let mut log = loop_log();
        log.splice(8..8, [b'P', 7, 0, 0, 0]);
        let whole = convert_log(&log, DEFAULT_PSB_PERIOD, true, None);
        for step in [1, 2, 3, 7, 64, 4096] {
            let (pid, streamed) = convert_stream(&mut Trickle { bytes: &log, step }, LogConverter::new(DEFAULT_PSB_PERIOD, true), |_| true).unwrap();
            assert_eq!(pid, Some(7));
            assert!(streamed.warnings.is_empty(), "{:?}", streamed.warnings);
            assert_eq!(streamed.image.threads[0].trace, whole.image.threads[0].trace, "step {step}");
            assert_eq!(streamed.image.threads[0].instruction_log, whole.image.threads[0].instruction_log);
        }
        // Cut short and damaged: the error names the offset.
        let (_, cut) = convert_stream(&mut Trickle { bytes: &log[..log.len() - 3], step: 5 }, LogConverter::new(DEFAULT_PSB_PERIOD, false), |_| true).unwrap();
        assert_eq!(cut.warnings.len(), 1);
        assert!(cut.warnings[0].contains("cut short"), "{:?}", cut.warnings);
        let mut damaged = log.clone();
        damaged[8 + 5 + 9] = 0x7e;
        let (_, bad) = convert_stream(&mut Trickle { bytes: &damaged, step: 3 }, LogConverter::new(DEFAULT_PSB_PERIOD, false), |_| true).unwrap();
        assert_eq!(bad.warnings, vec!["Valgrind log at byte 22: unknown record tag 0x7e".to_string()]);
        // Another process's log is read through and left out.
        let (pid, other) = convert_stream(&mut Trickle { bytes: &log, step: 4 }, LogConverter::new(DEFAULT_PSB_PERIOD, false), |pid| pid != 7).unwrap();
        assert_eq!(pid, Some(7));
        assert!(other.image.threads.is_empty());
    }

    /// Damaged copies of a log (bytes flipped, cut, inserted): never a
    /// panic, and whole and piecewise reading agree (the fuzz target
    /// `collector/fuzz` does the same over any input).
    #[test]
    fn damaged_logs_never_panic() {
        let mut log = loop_log();
        log.splice(8..8, [b'P', 7, 0, 0, 0]);
        let mut state = 0x9e37_79b9u64;
        let mut random = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for _ in 0..2000 {
            let mut damaged = log.clone();
            for _ in 0..1 + random() % 4 {
                let at = 8 + (random() as usize) % (damaged.len() - 8);
                match random() % 3 {
                    0 => damaged[at] = random() as u8,
                    1 => damaged.truncate(at),
                    _ => damaged.insert(at, random() as u8),
                }
                if damaged.len() <= 8 {
                    break;
                }
            }
            let whole = convert_log(&damaged, 64, true, None);
            let (_, streamed) = convert_stream(&mut Trickle { bytes: &damaged, step: 1 + (random() % 9) as usize }, LogConverter::new(64, true), |_| true).unwrap();
            assert_eq!(whole.image.threads.len(), streamed.image.threads.len());
            for (a, b) in whole.image.threads.iter().zip(&streamed.image.threads) {
                assert_eq!(a.trace, b.trace);
            }
            assert_eq!(whole.warnings.len(), streamed.warnings.len(), "{:?} / {:?}", whole.warnings, streamed.warnings);
        }
    }

    /// Random logs over superblocks of plain instructions, conditional
    /// branches, calls, returns, REP and system calls, entered as predicted
    /// and not, left by their ends and side exits, with thread switches,
    /// signals and foreign code between: the straight runs computed once per
    /// way out write exactly what converting instruction by instruction
    /// writes (one PSB, so the bytes compare).
    #[test]
    fn straight_runs_write_what_single_instructions_write() {
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut random = move |n: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % n
        };
        for round in 0..40 {
            let mut log = LOG_MAGIC.to_vec();
            log.extend(thread(1, 100));
            // (entry, ways' targets)
            let mut blocks: Vec<(u64, Vec<u64>)> = Vec::new();
            let count = 2 + random(10) as usize;
            let mut entries: Vec<u64> = (0..count as u64).map(|i| 0x10000 + i * 0x100).collect();
            // Where calls return to (superblocks of their own, as after a
            // return), found as the first superblocks are made.
            let mut landings: Vec<u64> = Vec::new();
            let mut returns_to: Vec<Vec<Option<u64>>> = Vec::new();
            let mut id = 0;
            loop {
                if id == count {
                    landings.sort();
                    landings.dedup();
                    entries.extend(&landings);
                }
                let Some(&entry) = entries.get(id) else { break };
                let mut code: Vec<(u64, Vec<u8>)> = Vec::new();
                let mut exits = Vec::new();
                let mut ip = entry;
                for i in 0..1 + random(8) {
                    let last = i > 0 && random(4) == 0;
                    let bytes: Vec<u8> = match random(if last { 9 } else { 5 }) {
                        0 | 1 => vec![0x90],
                        2 => vec![0x75, 0x10],
                        3 => vec![0xe8, 0x10, 0, 0, 0],
                        4 => vec![0xe8, 0, 0, 0, 0],
                        5 => vec![0xc3],
                        6 => vec![0x0f, 0x05],
                        7 => vec![0xf3, 0xa4],
                        _ => vec![0xff, 0xe0],
                    };
                    if bytes[0] == 0x75 {
                        exits.push((code.len() as u16, entries[random(count as u64) as usize]));
                    }
                    let len = bytes.len() as u64;
                    if bytes[0] == 0xe8 && id < count {
                        landings.push(ip + len);
                    }
                    code.push((ip, bytes));
                    ip += len;
                    if last {
                        break;
                    }
                }
                let kind = code.last().unwrap().1[0];
                let next = if matches!(kind, 0xc3 | 0x0f | 0xff) { 0 } else { entries[random(count as u64) as usize] };
                let listed: Vec<(u64, &[u8])> = code.iter().map(|(ip, b)| (*ip, &b[..])).collect();
                let mut out = superblock_with_exits(id as u32, &listed, &exits);
                out[13..21].copy_from_slice(&next.to_le_bytes());
                log.extend(out);
                blocks.push((entry, std::iter::once(next).chain(exits.iter().map(|e| e.1)).collect()));
                // The last call each way out runs, where it returns to.
                let ends = std::iter::once(code.len()).chain(exits.iter().map(|e| e.0 as usize + 1));
                returns_to.push(ends.map(|end| code[..end].iter().rev().find(|(_, b)| b[0] == 0xe8 && b[1] != 0).map(|(ip, _)| ip + 5)).collect::<Vec<_>>());
                id += 1;
            }
            let all = entries.len() as u64;
            let mut predicted: Option<u64> = None;
            // Where the latest call returns to: most returns go there.
            let mut call_returns_to: Option<u64> = None;
            for _ in 0..2000 {
                match random(40) {
                    0 => {
                        log.extend(thread(1 + random(2) as u32, 100));
                        predicted = None;
                    }
                    1 => {
                        log.push(b'S');
                        log.extend(10u32.to_le_bytes());
                        log.extend(entries[random(count as u64) as usize].to_le_bytes());
                        predicted = None;
                    }
                    2 => {
                        log.push(b'G');
                        predicted = None;
                    }
                    _ => {
                        let landing = call_returns_to.and_then(|at| blocks.iter().position(|b| b.0 == at));
                        let id = match (predicted, landing) {
                            (Some(at), _) if random(8) != 0 => blocks.iter().position(|b| b.0 == at).unwrap(),
                            (None, Some(landing)) if random(4) != 0 => landing,
                            _ => random(all) as usize,
                        };
                        let way = random(blocks[id].1.len() as u64) as usize;
                        let in_byte = random(5) != 0;
                        match predicted {
                            Some(at) if at == blocks[id].0 => log.push(ENTERED_NEXT | if in_byte { way as u8 } else { 0 }),
                            _ => {
                                log.extend(entered(id as u32));
                                *log.last_mut().unwrap() = if in_byte { way as u8 } else { 0 };
                            }
                        }
                        if !in_byte && way != 0 {
                            log.extend(left_at(way as u16 - 1));
                        }
                        predicted = Some(blocks[id].1[way]).filter(|&to| to != 0);
                        call_returns_to = returns_to[id][way].or(call_returns_to);
                    }
                }
            }
            let convert = |fast: bool| {
                let mut converter = LogConverter::new(1 << 30, true);
                converter.fast = fast;
                convert_stream(&mut &log[..], converter, |_| true).unwrap().1
            };
            let (fast, slow) = (convert(true), convert(false));
            assert!(fast.warnings.is_empty() && slow.warnings.is_empty(), "{:?} {:?}", fast.warnings, slow.warnings);
            assert_eq!(fast.image.threads.len(), slow.image.threads.len());
            for (a, b) in fast.image.threads.iter().zip(&slow.image.threads) {
                assert_eq!(a.instructions, b.instructions, "round {round}");
                assert_eq!(a.instruction_log, b.instruction_log, "round {round}");
                assert_eq!(a.trace, b.trace, "round {round}");
            }
            assert!(fast.image.threads.iter().map(|t| t.instructions).sum::<u64>() > 1000);
        }
    }

    #[test]
    fn a_fault_ends_the_superblock_before_the_faulting_instruction() {
        // nop; mov [rax], ecx (faults); nop — then the handler's nop.
        let code: [(u64, &[u8]); 3] = [(0x1000, &[0x90]), (0x1001, &[0x89, 0x08]), (0x1003, &[0x90])];
        let mut log = LOG_MAGIC.to_vec();
        log.extend(thread(1, 5));
        log.extend(superblock(0, &code));
        log.extend(superblock(1, &[(0x2000, &[0x90])]));
        log.extend(entered(0));
        log.push(b'S');
        log.extend(11u32.to_le_bytes());
        log.extend(0x1001u64.to_le_bytes());
        log.extend(entered(1));
        let converted = convert_log(&log, DEFAULT_PSB_PERIOD, true, None);
        assert_eq!(converted.image.threads[0].instruction_log.as_deref(), Some(&[0x1000, 0x2000][..]));
        // A signal sent from outside at the same place is not a fault: the
        // superblock ran to its end first.
        let mut sent = log.clone();
        let at = sent.len() - 5 - 12;
        sent[at + 1..at + 5].copy_from_slice(&10u32.to_le_bytes());
        let converted = convert_log(&sent, DEFAULT_PSB_PERIOD, true, None);
        assert_eq!(converted.image.threads[0].instruction_log.as_deref(), Some(&[0x1000, 0x1001, 0x1003, 0x2000][..]));
        // A fatal fault: the log ends at the faulting instruction.
        let mut crash = LOG_MAGIC.to_vec();
        crash.extend(thread(1, 5));
        crash.extend(superblock(0, &code));
        crash.extend(entered(0));
        crash.push(b'F');
        crash.extend(0x1001u64.to_le_bytes());
        let converted = convert_log(&crash, DEFAULT_PSB_PERIOD, true, None);
        assert_eq!(converted.image.threads[0].instruction_log.as_deref(), Some(&[0x1000][..]));
        let packets: Vec<_> = retrace_decoder::packet::PacketDecoder::new(&converted.image.threads[0].trace).collect();
        assert!(format!("{packets:?}").contains("Fup"), "{packets:?}");
    }

    #[test]
    fn a_stream_stored_as_it_grows_is_the_stream_kept_in_memory() {
        // The loop many times over, stored every 16 bytes.
        let mut log = LOG_MAGIC.to_vec();
        log.extend(thread(1, 77));
        log.extend(superblock_with_exits(0, &[(0x1000, &[0xff, 0xc9]), (0x1002, &[0x75, 0xfc])], &[(1, 0x1000)]));
        for _ in 0..3000 {
            log.extend(entered(0));
            log.extend(left_at(0));
        }
        let folder = std::env::temp_dir().join(format!("retrace-spill-test-{}", std::process::id()));
        std::fs::create_dir_all(&folder).unwrap();
        let whole = convert_log(&log, 256, false, None);
        let (_, stored) = convert_stream(&mut Trickle { bytes: &log, step: 100 }, LogConverter::new(256, false).with_spill(Some(folder.clone()), 16), |_| true).unwrap();
        let thread = &stored.image.threads[0];
        let (file, _) = thread.trace_file.as_ref().expect("stored");
        let mut bytes = std::fs::read(file).unwrap();
        assert!(bytes.len() > 400 && thread.trace.len() < 64, "{} stored, {} kept", bytes.len(), thread.trace.len());
        bytes.extend(&thread.trace);
        assert_eq!(bytes, whole.image.threads[0].trace);
        assert_eq!(thread.trace_len(), bytes.len());
        std::fs::remove_dir_all(&folder).unwrap();
    }

    #[test]
    fn the_limit_keeps_the_first_instructions() {
        let converted = convert_log(&loop_log(), DEFAULT_PSB_PERIOD, true, Some(5));
        assert!(converted.limited);
        assert_eq!(converted.image.threads[0].instruction_log.as_deref(), Some(&[0x1000, 0x1002, 0x1000, 0x1002, 0x1000][..]));
        assert_eq!(converted.image.threads[0].instructions, 5);
        // A conditional branch last is left out: where it went is not in
        // the part kept.
        let converted = convert_log(&loop_log(), DEFAULT_PSB_PERIOD, true, Some(6));
        assert_eq!(converted.image.threads[0].instruction_log.as_deref(), Some(&[0x1000, 0x1002, 0x1000, 0x1002, 0x1000][..]));
        assert_eq!(converted.image.threads[0].instructions, 5);
    }

    #[test]
    fn a_cut_or_damaged_log_is_an_error_at_its_offset() {
        let log = loop_log();
        // Cut inside the second superblock record.
        let cut = &log[..log.len() - 8];
        let errors: Vec<LogError> = log_records(cut).filter_map(Result::err).collect();
        assert_eq!(errors.len(), 1);
        assert!(errors[0].what.contains("cut short"), "{errors:?}");
        assert_eq!(convert_log(cut, DEFAULT_PSB_PERIOD, false, None).warnings.len(), 1);
        let mut damaged = log.clone();
        damaged[8 + 9] = 0x7e; // the first superblock's tag
        let errors: Vec<LogError> = log_records(&damaged).filter_map(Result::err).collect();
        assert_eq!(errors, vec![LogError { offset: 17, what: "unknown record tag 0x7e".into() }]);
        assert_eq!(log_records(b"nonsense").next(), Some(Err(LogError { offset: 0, what: "not a retrace Valgrind log (no RTVGLOG2)".into() })));
    }

    #[test]
    fn a_signal_stops_tracing_before_the_interrupted_instruction() {
        let mut log = LOG_MAGIC.to_vec();
        log.extend(thread(1, 5));
        log.extend(superblock(0, &[(0x1000, &[0x90]), (0x1001, &[0x90])]));
        log.extend(superblock(1, &[(0x2000, &[0x90])]));
        log.extend(entered(0));
        log.push(b'S');
        log.extend(10u32.to_le_bytes());
        log.extend(0x1002u64.to_le_bytes());
        log.extend(entered(1));
        let ConvertedLog { image, warnings, .. } = convert_log(&log, DEFAULT_PSB_PERIOD, true, None);
        assert!(warnings.is_empty());
        let thread = &image.threads[0];
        assert_eq!(thread.instruction_log.as_deref(), Some(&[0x1000, 0x1001, 0x2000][..]));
        let packets: Vec<_> = retrace_decoder::packet::PacketDecoder::new(&thread.trace).collect();
        let text = format!("{packets:?}");
        assert!(text.contains("Fup") && text.contains("TipPgd") && text.contains("TipPge"), "{text}");
    }
}
