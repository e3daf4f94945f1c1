//! The full state history of a recorded process (`--record=full`): for
//! every instruction executed, in the one order all threads executed them,
//! the registers it changed and the old contents of the memory it (or the
//! kernel, in a system call) overwrote. No OS code: the live target feeds
//! it and asks it about the past.
//!
//! * **Registers** are kept forwards: a full copy of a thread's registers
//!   before every [`CHECKPOINT_EVERY`]-th of its steps (and whenever they
//!   were changed other than by an instruction: the debugger wrote them, a
//!   signal handler was entered), and after every step the registers it
//!   changed. A thread's registers at a position are its checkpoint
//!   replayed through at most that many steps.
//! * **Memory** is kept backwards, as an undo log: the bytes a step
//!   overwrote, before it did. The byte at `address` at position `p` is the
//!   old value saved by the first step at or after `p` that wrote it, or,
//!   if no later step did, what the process holds now. That first step is
//!   found through an index of the writes by 8-byte word (an instruction's)
//!   or by page (longer ones), not by walking the steps.
//! * **Mappings** are kept as they were at the start and after every step
//!   that changed them: an address not mapped at a position cannot be read
//!   there, even if it is mapped now.
//!
//! Positions: `p` in `0..len()` is the state just before step `p` runs;
//! `len()` is the present (the live process).
//!
//! **Encoding.** A step costs its instruction (4 bytes: an index into
//! the table of the instructions the history ran, each address and kind
//! once, so that searches for breakpoints scan an array) and a *record* in one byte
//! stream: a header (how many registers changed, how many writes), each
//! changed register as its number and its change (a 64-bit register as the
//! signed difference, a 32-bit one as the bits that flipped, both as
//! LEB128; wider ones whole; `rip` never: the thread's next address gives
//! it), and each write as its address (the signed difference from the
//! previous write's) and length in LEB128, then the old bytes. Where every
//! [`CHUNK`]-th step's record starts is kept, so a record is found by
//! reading at most `CHUNK - 1` others. Which thread ran is kept per run of
//! steps, the call depth per step in one byte beside a mark every
//! [`CHUNK`] steps. `docs/benchmarks.md` has what this costs per
//! instruction against GDB's `record full`.

use std::collections::{BTreeMap, HashMap};
use std::ops::Range;

use retrace_decoder::leb128;

use crate::arch::{register_size, Regs, REGISTER_COUNT};
use crate::inferior::frames::{Executed, Flow, FrameStep};

/// A thread's steps per [`FrameBlock`].
const FRAME_BLOCK: usize = 4096;

/// What [`FRAME_BLOCK`] consecutive steps of a thread ran at: their
/// lowest and highest call depth and address, so that a walk back through
/// the history can pass over a whole block of a callee, or of a run of one
/// source line, at once.
#[derive(Debug, Clone, Copy)]
struct FrameBlock {
    min_depth: i32,
    max_depth: i32,
    min_pc: u64,
    max_pc: u64,
}

/// How often (in a thread's own steps) its registers are copied whole.
pub const CHECKPOINT_EVERY: usize = 1024;

/// Steps per entry of the record index, of the address bounds searches
/// skip by, and of a thread's depth marks.
const CHUNK: usize = 64;

const PAGE: u64 = 4096;

/// Writes of at most this many bytes (what one instruction stores, but
/// for the widest vector stores) are indexed by the 8-byte words they
/// touch; longer ones (a system call's, a signal frame, the debugger's
/// big writes) by page.
const SMALL_WRITE: usize = 16;

/// The steps that overwrote bytes of one 8-byte word with a small write,
/// grouped by which of its bytes they wrote (bit `i`: the byte at offset
/// `i`), each group's steps ascending. A variable is written the same way
/// every time, so a word has one or two groups; the first step at or
/// after a position that wrote a byte is then a binary search per group,
/// however often the word's other bytes were written.
type WordWrites = Vec<(u8, Vec<u64>)>;

/// A thread's steps and register checkpoints.
#[derive(Debug, Default)]
struct ThreadSteps {
    /// Runs of its steps at consecutive positions: (index of the run's
    /// first step among the thread's, its position), ascending.
    runs: Vec<(u64, u64)>,
    /// How many steps it ran.
    count: usize,
    /// (index of a step, registers before that step).
    checkpoints: Vec<(usize, Regs)>,
    /// Registers after its last step.
    last: Option<Regs>,
    /// Indices of its steps that are a signal handler's first instruction.
    handler_entries: Vec<usize>,
    /// Its next step is a signal handler's first instruction.
    entering_handler: bool,
    /// The call depth of its steps number `CHUNK * k` (its first step's is
    /// 0): one more after a `call` and at a signal handler's first
    /// instruction, one less after a `ret`.
    depth_marks: Vec<i32>,
    /// Each step's depth less its chunk's mark (at most 2 a step).
    depth_offsets: Vec<i8>,
    /// The depth of its next step.
    depth_next: i32,
    /// Summaries of its steps, [`FRAME_BLOCK`] at a time.
    blocks: Vec<FrameBlock>,
}

impl ThreadSteps {
    /// The position of its step `index`.
    fn position(&self, index: usize) -> u64 {
        let run = self.runs.partition_point(|&(first, _)| first as usize <= index) - 1;
        let (first, at) = self.runs[run];
        at + (index as u64 - first)
    }

    /// How many of its steps come before `position`.
    fn done_before(&self, position: u64) -> usize {
        let run = self.runs.partition_point(|&(_, at)| at < position);
        let Some(&(first, at)) = run.checked_sub(1).map(|r| &self.runs[r]) else { return 0 };
        let end = self.runs.get(run).map_or(self.count as u64, |r| r.0);
        (first + (position - at)).min(end) as usize
    }

    /// The call depth of its step `index`.
    fn depth(&self, index: usize) -> i32 {
        self.depth_marks[index / CHUNK] + i32::from(self.depth_offsets[index])
    }
}

/// Bytes a step overwrote, before it did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Overwritten {
    /// First address.
    pub address: u64,
    /// The old bytes.
    pub old: Vec<u8>,
}

/// The bits of word `word`'s bytes that `from..to` covers.
fn byte_mask(word: u64, from: u64, to: u64) -> u8 {
    let lo = from.max(word * 8) - word * 8;
    let hi = to.min(word * 8 + 8) - word * 8;
    (lo..hi).fold(0, |mask, bit| mask | 1 << bit)
}

/// Notes that step `position` touched the bytes `range`, by word.
fn index_words(words: &mut HashMap<u64, WordWrites>, range: Range<u64>, position: u64) {
    for word in range.start / 8..=(range.end - 1) / 8 {
        let mask = byte_mask(word, range.start, range.end);
        let groups = words.entry(word).or_default();
        match groups.iter_mut().find(|(m, _)| *m == mask) {
            Some((_, steps)) if steps.last() == Some(&position) => {}
            Some((_, steps)) => steps.push(position),
            None => groups.push((mask, vec![position])),
        }
    }
}

/// The steps that touched a byte of `range`, per indexed word group that
/// covers one: ascending lists.
fn word_steps<'a>(words: &'a HashMap<u64, WordWrites>, range: &Range<u64>) -> impl Iterator<Item = &'a [u64]> + 'a {
    let (start, end) = (range.start, range.end);
    (start / 8..=(end.max(start + 1) - 1) / 8).flat_map(move |word| {
        let wanted = byte_mask(word, start, end);
        words.get(&word).map_or(&[][..], |groups| &groups[..]).iter().filter(move |(mask, _)| mask & wanted != 0).map(|(_, steps)| &steps[..])
    })
}

/// The latest step before `before` in `words` that touched a byte of `range`.
fn last_in_words(words: &HashMap<u64, WordWrites>, range: &Range<u64>, before: u64) -> Option<u64> {
    word_steps(words, range).filter_map(|steps| steps[..steps.partition_point(|&s| s < before)].last().copied()).max()
}

/// The first step at or after `from` in `words` that touched a byte of `range`.
fn first_in_words(words: &HashMap<u64, WordWrites>, range: &Range<u64>, from: u64) -> Option<u64> {
    word_steps(words, range).filter_map(|steps| steps.get(steps.partition_point(|&s| s < from)).copied()).min()
}

/// Whether some address of `addresses` (sorted) lies in `low..=high`.
fn any_within(addresses: &[u64], (low, high): (u64, u64)) -> bool {
    addresses[addresses.partition_point(|&a| a < low)..].first().is_some_and(|&a| a <= high)
}

/// How a changed register is kept in a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Change {
    /// A 64-bit register: the signed difference, LEB128.
    Difference,
    /// A 32-bit register: the bits that flipped, LEB128.
    Flipped,
    /// Wider ones: the new bytes.
    Whole(usize),
}

fn change_of(n: usize) -> Change {
    match n {
        0..=16 | 57..=59 => Change::Difference,
        17..=23 | 32..=39 | 56 => Change::Flipped,
        _ => Change::Whole(register_size(n).expect("a register")),
    }
}

/// Register `n` (a 64- or 32-bit one) as a number.
fn register_value(regs: &Regs, n: usize) -> u64 {
    match n {
        0..=15 => regs.gpr[n],
        16 => regs.rip,
        17 => u64::from(regs.eflags),
        18..=23 => u64::from(regs.segments[n - 18]),
        32..=39 => u64::from(regs.fpu[n - 32]),
        56 => u64::from(regs.mxcsr),
        57 => regs.orig_rax,
        58 => regs.fs_base,
        _ => regs.gs_base,
    }
}

fn set_register_value(regs: &mut Regs, n: usize, value: u64) {
    let size = register_size(n).expect("a register");
    let _ = regs.set_register(n, &value.to_le_bytes()[..size]);
}

/// Grows `vec` for `more` items by an eighth of its size at a time, not
/// double (large vectors grow in place, by remapping).
fn reserve<T>(vec: &mut Vec<T>, more: usize) {
    if vec.capacity() - vec.len() < more {
        vec.reserve_exact(more.max(vec.len() / 8).max(64));
    }
}

/// Reads records from one at a [`CHUNK`] boundary on.
#[derive(Clone)]
struct Records<'a> {
    bytes: &'a [u8],
    at: usize,
    /// The previous write's address.
    address: u64,
}

impl<'a> Records<'a> {
    fn leb128(&mut self) -> u64 {
        leb128::get(self.bytes, &mut self.at).expect("the log's own records")
    }

    /// The next record: each changed register (its number and change),
    /// then each write (address, old bytes).
    fn record(&mut self, mut register: impl FnMut(usize, RegisterChange<'a>), mut write: impl FnMut(u64, &'a [u8])) {
        let header = self.leb128();
        for _ in 0..header & 63 {
            let n = self.bytes[self.at] as usize;
            self.at += 1;
            let change = match change_of(n) {
                Change::Difference => RegisterChange::Difference(leb128::unzigzag(self.leb128())),
                Change::Flipped => RegisterChange::Flipped(self.leb128()),
                Change::Whole(size) => {
                    self.at += size;
                    RegisterChange::Whole(&self.bytes[self.at - size..self.at])
                }
            };
            register(n, change);
        }
        for _ in 0..header >> 6 {
            self.address = self.address.wrapping_add(leb128::unzigzag(self.leb128()) as u64);
            let len = self.leb128() as usize;
            self.at += len;
            write(self.address, &self.bytes[self.at - len..self.at]);
        }
    }

    fn skip(&mut self) {
        self.record(|_, _| {}, |_, _| {});
    }
}

/// A register's change as a record keeps it.
#[derive(Debug, Clone, Copy)]
enum RegisterChange<'a> {
    Difference(i64),
    Flipped(u64),
    Whole(&'a [u8]),
}

/// See the module documentation.
#[derive(Debug, Default)]
pub struct StateLog {
    /// Each step's instruction: an index into `code`.
    instructions: Vec<u32>,
    /// The instructions the history ran: address and kind.
    code: Vec<(u64, Flow)>,
    /// `code`'s index.
    code_index: HashMap<(u64, Flow), u32>,
    /// The lowest and highest address of every [`CHUNK`] steps.
    pc_bounds: Vec<(u64, u64)>,
    /// (first position, thread) of every run of one thread's steps.
    thread_runs: Vec<(u64, u64)>,
    /// Each step's record (see the module documentation).
    records: Vec<u8>,
    /// Where the record of step `CHUNK * k` starts.
    record_starts: Vec<usize>,
    /// Word (address / 8) → the steps that wrote in it, small writes only.
    words: HashMap<u64, WordWrites>,
    /// Page → the steps that wrote more than [`SMALL_WRITE`] bytes at once
    /// in it, ascending.
    bulk_pages: HashMap<u64, Vec<u64>>,
    /// Word → the steps whose instruction read in it (what read and access
    /// watchpoints stop at; a system call's reads are not seen, as the
    /// processor's watchpoints do not see them).
    read_words: HashMap<u64, WordWrites>,
    threads: BTreeMap<u64, ThreadSteps>,
    initial_mappings: Vec<Range<u64>>,
    /// (step, mappings in force after it), ascending.
    mappings: Vec<(u64, Vec<Range<u64>>)>,
    /// (step, ranges it may have written without the old bytes being
    /// kept), ascending: a system call in a process whose writable memory
    /// was too large to copy. A byte there is unknown before the step
    /// unless an earlier step saved it.
    lost: Vec<(u64, Vec<Range<u64>>)>,
    /// Overwrites not made by an instruction (the debugger's writes, a
    /// signal frame), charged to the next step.
    pending: Vec<Overwritten>,
    /// The address of the last write recorded in the current chunk.
    last_write: u64,
}

impl StateLog {
    /// An empty history of a process whose memory is mapped as `mappings`.
    pub fn new(mappings: Vec<Range<u64>>) -> Self {
        StateLog { initial_mappings: mappings, ..StateLog::default() }
    }

    /// Number of steps recorded: the present's position.
    pub fn len(&self) -> u64 {
        self.instructions.len() as u64
    }

    /// True before the first step.
    pub fn is_empty(&self) -> bool {
        self.instructions.is_empty()
    }

    /// The address and kind of step `position`'s instruction.
    fn instruction(&self, position: u64) -> (u64, Flow) {
        self.code[self.instructions[position as usize] as usize]
    }

    fn pc(&self, position: u64) -> u64 {
        self.instruction(position).0
    }

    /// Bytes the history takes: what its vectors and maps hold allocated
    /// (a map's entry counted as its key, value and a control byte).
    pub fn bytes(&self) -> usize {
        fn vec<T>(v: &Vec<T>) -> usize {
            v.capacity() * std::mem::size_of::<T>()
        }
        let threads: usize = self
            .threads
            .values()
            .map(|t| {
                vec(&t.runs) + vec(&t.checkpoints) + vec(&t.handler_entries) + vec(&t.depth_marks) + vec(&t.depth_offsets) + vec(&t.blocks)
                    + std::mem::size_of::<ThreadSteps>()
            })
            .sum();
        let entry = |value: usize| 8 + value + 1;
        let words = |map: &HashMap<u64, WordWrites>| {
            map.capacity() * entry(24) + map.values().map(|groups| vec(groups) + groups.iter().map(|(_, steps)| vec(steps)).sum::<usize>()).sum::<usize>()
        };
        let words = words(&self.words) + words(&self.read_words);
        let pages: usize = self.bulk_pages.capacity() * entry(24) + self.bulk_pages.values().map(vec).sum::<usize>();
        let mappings: usize = [&self.mappings, &self.lost].iter().map(|list| vec(list) + list.iter().map(|(_, m)| vec(m)).sum::<usize>()).sum();
        let code = vec(&self.code) + self.code_index.capacity() * entry(16);
        vec(&self.instructions) + code + vec(&self.pc_bounds) + vec(&self.thread_runs) + vec(&self.records) + vec(&self.record_starts) + threads + words + pages + mappings
    }

    /// The thread that ran step `position`.
    fn tid_at(&self, position: u64) -> u64 {
        self.thread_runs[self.thread_runs.partition_point(|&(first, _)| first <= position) - 1].1
    }

    /// The thread and instruction address of step `position`.
    pub fn at(&self, position: u64) -> Option<(u64, u64)> {
        (position < self.len()).then(|| (self.tid_at(position), self.pc(position)))
    }

    /// The threads that ran in the history.
    pub fn threads(&self) -> impl Iterator<Item = u64> + '_ {
        self.threads.keys().copied()
    }

    /// How many steps thread `tid` ran before `position`: the id of the
    /// instruction it stands at (`retrace dump instructions` numbering).
    pub fn steps_of_thread_before(&self, tid: u64, position: u64) -> u64 {
        self.threads.get(&tid).map_or(0, |t| t.done_before(position) as u64)
    }

    /// The position of thread `tid`'s step number `index` (0-based).
    pub fn position_of_thread_step(&self, tid: u64, index: u64) -> Option<u64> {
        let thread = self.threads.get(&tid)?;
        let index = usize::try_from(index).ok().filter(|&i| i < thread.count)?;
        Some(thread.position(index))
    }

    /// Bytes overwritten other than by an instruction, now (before the
    /// next step): kept so that the past still reads the old bytes.
    pub fn overwritten_outside(&mut self, overwritten: Overwritten) {
        if !overwritten.old.is_empty() {
            self.pending.push(overwritten);
        }
    }

    /// Records a step of `tid`: its registers `before` and `after` it ran,
    /// what it overwrote (in order), and the mappings after it if it
    /// changed them.
    pub fn push(&mut self, tid: u64, before: &Regs, after: &Regs, overwritten: Vec<Overwritten>, mappings: Option<Vec<Range<u64>>>, flow: Flow) {
        let position = self.len();
        let pc = before.rip;
        if position as usize % CHUNK == 0 {
            self.record_starts.push(self.records.len());
            self.pc_bounds.push((pc, pc));
            self.last_write = 0;
        } else if let Some(bounds) = self.pc_bounds.last_mut() {
            *bounds = (bounds.0.min(pc), bounds.1.max(pc));
        }
        if self.thread_runs.last().map(|r| r.1) != Some(tid) {
            self.thread_runs.push((position, tid));
        }
        let next_id = self.code.len() as u32;
        let id = *self.code_index.entry((pc, flow)).or_insert(next_id);
        if id == next_id {
            self.code.push((pc, flow));
        }
        reserve(&mut self.instructions, 1);
        self.instructions.push(id);
        let thread = self.threads.entry(tid).or_default();
        let index = thread.count;
        thread.count += 1;
        if thread.runs.last().map_or(true, |&(first, at)| at + (index as u64 - first) != position) {
            thread.runs.push((index as u64, position));
        }
        let continues = thread.last.as_ref() == Some(before);
        if index % CHECKPOINT_EVERY == 0 || !continues {
            thread.checkpoints.push((index, before.clone()));
        }
        if std::mem::take(&mut thread.entering_handler) {
            thread.handler_entries.push(index);
            thread.depth_next += 1;
        }
        let depth = thread.depth_next;
        if index % CHUNK == 0 {
            thread.depth_marks.push(depth);
        }
        reserve(&mut thread.depth_offsets, 1);
        thread.depth_offsets.push(i8::try_from(depth - thread.depth_marks[index / CHUNK]).expect("at most 2 a step"));
        thread.depth_next += match flow {
            Flow::Call => 1,
            Flow::Return => -1,
            Flow::Other => 0,
        };
        if index % FRAME_BLOCK == 0 {
            thread.blocks.push(FrameBlock { min_depth: depth, max_depth: depth, min_pc: pc, max_pc: pc });
        } else if let Some(block) = thread.blocks.last_mut() {
            block.min_depth = block.min_depth.min(depth);
            block.max_depth = block.max_depth.max(depth);
            block.min_pc = block.min_pc.min(pc);
            block.max_pc = block.max_pc.max(pc);
        }
        thread.last = Some(after.clone());

        // The record: changed registers, then writes.
        let mut body = Vec::with_capacity(32);
        let mut registers = 0u64;
        let groups_differ = [
            before.gpr != after.gpr || before.eflags != after.eflags || before.segments != after.segments,
            before.st != after.st || before.fpu != after.fpu,
            before.xmm != after.xmm || before.mxcsr != after.mxcsr,
            before.orig_rax != after.orig_rax || before.fs_base != after.fs_base || before.gs_base != after.gs_base,
        ];
        for n in (0..REGISTER_COUNT).filter(|&n| n != 16) {
            let group = match n {
                0..=23 => 0,
                24..=39 => 1,
                40..=56 => 2,
                _ => 3,
            };
            if !groups_differ[group] {
                continue;
            }
            match change_of(n) {
                Change::Difference | Change::Flipped => {
                    let (old, new) = (register_value(before, n), register_value(after, n));
                    if old != new {
                        body.push(n as u8);
                        let change = if change_of(n) == Change::Difference { leb128::zigzag(new.wrapping_sub(old) as i64) } else { old ^ new };
                        leb128::put(&mut body, change);
                        registers += 1;
                    }
                }
                Change::Whole(_) => {
                    let new = after.register_bytes(n).expect("every register");
                    if before.register_bytes(n).expect("every register") != new {
                        body.push(n as u8);
                        body.extend_from_slice(&new);
                        registers += 1;
                    }
                }
            }
        }
        let mut writes = 0u64;
        for write in std::mem::take(&mut self.pending).into_iter().chain(overwritten) {
            if write.old.is_empty() {
                continue;
            }
            writes += 1;
            let end = write.address + write.old.len() as u64;
            if write.old.len() <= SMALL_WRITE {
                index_words(&mut self.words, write.address..end, position);
            } else {
                for page in write.address / PAGE..=(end - 1) / PAGE {
                    let steps = self.bulk_pages.entry(page).or_default();
                    if steps.last() != Some(&position) {
                        steps.push(position);
                    }
                }
            }
            leb128::put(&mut body, leb128::zigzag(write.address.wrapping_sub(self.last_write) as i64));
            leb128::put(&mut body, write.old.len() as u64);
            body.extend_from_slice(&write.old);
            self.last_write = write.address;
        }
        reserve(&mut self.records, body.len() + 10);
        leb128::put(&mut self.records, registers | writes << 6);
        self.records.extend_from_slice(&body);
        if let Some(mappings) = mappings {
            self.mappings.push((position, mappings));
        }
    }

    /// A reader positioned at step `position`'s record.
    fn records_at(&self, position: u64) -> Records<'_> {
        let chunk = position as usize / CHUNK;
        let mut records = Records { bytes: &self.records, at: self.record_starts[chunk], address: 0 };
        for _ in chunk * CHUNK..position as usize {
            records.skip();
        }
        records
    }

    /// What step `position` overwrote, in order.
    pub fn overwritten_by(&self, position: u64) -> impl Iterator<Item = (u64, &[u8])> + '_ {
        let mut writes = Vec::new();
        if position < self.len() {
            self.records_at(position).record(|_, _| {}, |address, old| writes.push((address, old)));
        }
        writes.into_iter()
    }

    /// Registers of thread `tid` at `position` (before step `position`),
    /// from the history; `None` for a thread that never ran in it, or at
    /// the present (the live thread's).
    pub fn registers_at(&self, tid: u64, position: u64) -> Option<Regs> {
        let thread = self.threads.get(&tid)?;
        // Its steps before `position`, and the checkpoint to start from.
        let done = thread.done_before(position);
        if done == thread.count {
            // After its last step (or at the present: the live thread's).
            return if position >= self.len() { None } else { thread.last.clone() };
        }
        // The last checkpoint at or before its step `done` (before its
        // first step, a thread stands where its first step starts).
        let checkpoint = thread.checkpoints.partition_point(|(index, _)| *index <= done);
        let (from, regs) = &thread.checkpoints[checkpoint.max(1) - 1];
        let mut regs = regs.clone();
        if *from < done {
            // Its steps from..done, reading every record between them.
            let start = thread.position(*from);
            let end = thread.position(done - 1) + 1;
            let mut records = self.records_at(start);
            let mut run = thread.runs.partition_point(|&(first, _)| first as usize <= *from) - 1;
            for position in start..end {
                if position as usize % CHUNK == 0 {
                    records.address = 0;
                }
                // Whether the thread ran this step: inside one of its runs.
                while thread.runs.get(run + 1).is_some_and(|&(_, at)| at <= position) {
                    run += 1;
                }
                let (first, at) = thread.runs[run];
                let end_of_run = thread.runs.get(run + 1).map_or(thread.count as u64, |r| r.0);
                if position - at >= end_of_run - first {
                    records.skip();
                    continue;
                }
                records.record(
                    |n, change| match change {
                        RegisterChange::Difference(d) => {
                            let value = register_value(&regs, n).wrapping_add(d as u64);
                            set_register_value(&mut regs, n, value);
                        }
                        RegisterChange::Flipped(bits) => {
                            let value = register_value(&regs, n) ^ bits;
                            set_register_value(&mut regs, n, value);
                        }
                        RegisterChange::Whole(bytes) => {
                            let _ = regs.set_register(n, bytes);
                        }
                    },
                    |_, _| {},
                );
            }
        }
        regs.rip = self.pc(thread.position(done));
        Some(regs)
    }

    /// The mappings in force at `position`.
    fn mappings_at(&self, position: u64) -> &[Range<u64>] {
        let after = self.mappings.partition_point(|(step, _)| *step < position);
        match after {
            0 => &self.initial_mappings,
            n => &self.mappings[n - 1].1,
        }
    }

    /// Reads memory as it was at `position` into `buf`: what `present`
    /// reads now, with every byte overwritten since put back. Returns how
    /// many bytes from the start are known (0: not mapped then, or not
    /// readable now and never overwritten).
    pub fn read_at(&self, position: u64, address: u64, buf: &mut [u8], present: &mut dyn FnMut(u64, &mut [u8]) -> usize) -> usize {
        // Only within one mapping in force then.
        let Some(mapping) = self.mappings_at(position).iter().find(|m| m.start <= address && address < m.end) else { return 0 };
        let len = buf.len().min((mapping.end - address) as usize);
        let buf = &mut buf[..len];
        let from_present = present(address, buf);
        let mut restored = vec![false; len];
        let mut unknown_from = len;
        if len > 0 {
            let end = address + len as u64;
            // Per byte, the first step at or after `position` that
            // overwrote it: it saved the byte as it was at `position`.
            let mut first = vec![u64::MAX; len];
            let earliest = |first: &mut [u64], from: u64, to: u64, step: u64| {
                for a in from.max(address)..to.min(end) {
                    let i = (a - address) as usize;
                    first[i] = first[i].min(step);
                }
            };
            for word in address / 8..=(end - 1) / 8 {
                for (mask, steps) in self.words.get(&word).map_or(&[][..], |groups| &groups[..]) {
                    let Some(&step) = steps.get(steps.partition_point(|&s| s < position)) else { continue };
                    for bit in (0..8).filter(|bit| mask & (1 << bit) != 0) {
                        earliest(&mut first, word * 8 + bit, word * 8 + bit + 1, step);
                    }
                }
            }
            for page in address / PAGE..=(end - 1) / PAGE {
                let Some(list) = self.bulk_pages.get(&page) else { continue };
                for &step in &list[list.partition_point(|&s| s < position)..] {
                    // Later steps cannot be any byte's first once every byte has one before.
                    if first.iter().all(|&f| f <= step) {
                        break;
                    }
                    for (at, old) in self.overwritten_by(step).filter(|(_, old)| old.len() > SMALL_WRITE) {
                        earliest(&mut first, at, at + old.len() as u64, step);
                    }
                }
            }
            // Bytes whose first write from `position` on was not kept.
            let mut lost_at = Vec::new();
            for (step, ranges) in &self.lost[self.lost.partition_point(|(s, _)| *s < position)..] {
                if first.iter().all(|&f| f <= *step) {
                    break;
                }
                lost_at.push(*step);
                for range in ranges {
                    earliest(&mut first, range.start, range.end, *step);
                }
            }
            if let Some(i) = first.iter().position(|f| lost_at.binary_search(f).is_ok()) {
                unknown_from = i;
            }
            let mut steps: Vec<u64> = first.iter().copied().filter(|&s| s != u64::MAX).collect();
            steps.sort_unstable();
            steps.dedup();
            for step in steps {
                // Within a step, its first write of a byte saved the byte before it.
                for (at, old) in self.overwritten_by(step) {
                    for a in at.max(address)..(at + old.len() as u64).min(end) {
                        let i = (a - address) as usize;
                        if first[i] == step && !restored[i] {
                            restored[i] = true;
                            buf[i] = old[(a - at) as usize];
                        }
                    }
                }
            }
        }
        // A byte is known if read now or put back, and not lost.
        (0..len).find(|&i| i >= from_present && !restored[i]).unwrap_or(len).min(unknown_from)
    }


    /// The last step may have written anywhere in `ranges` without the
    /// old bytes being kept: before it, those bytes are unknown (where no
    /// earlier step kept them).
    pub fn lost_writes_of_last_step(&mut self, ranges: Vec<Range<u64>>) {
        if let Some(position) = self.len().checked_sub(1) {
            self.lost.push((position, ranges));
        }
    }

    /// The last step's instruction read the bytes of `ranges`.
    pub fn reads_of_last_step(&mut self, ranges: &[Range<u64>]) {
        let Some(position) = self.len().checked_sub(1) else { return };
        for range in ranges.iter().filter(|r| !r.is_empty()) {
            index_words(&mut self.read_words, range.clone(), position);
        }
    }

    /// The latest step before `before` whose instruction read a byte of `range`.
    pub fn last_read_before(&self, range: Range<u64>, before: u64) -> Option<u64> {
        last_in_words(&self.read_words, &range, before)
    }

    /// The first step at or after `from` whose instruction read a byte of `range`.
    pub fn first_read_from(&self, range: Range<u64>, from: u64) -> Option<u64> {
        first_in_words(&self.read_words, &range, from)
    }

    /// Whether step `step`'s long writes (bulk-indexed) cover a byte of `range`.
    fn bulk_write_touches(&self, step: u64, range: &Range<u64>) -> bool {
        self.overwritten_by(step).any(|(at, old)| old.len() > SMALL_WRITE && at < range.end && range.start < at + old.len() as u64)
    }

    /// The latest step before `before` that overwrote a byte of `range`.
    pub fn last_write_before(&self, range: Range<u64>, before: u64) -> Option<u64> {
        if range.is_empty() {
            return None;
        }
        let mut latest = last_in_words(&self.words, &range, before);
        for page in range.start / PAGE..=(range.end - 1) / PAGE {
            let Some(list) = self.bulk_pages.get(&page) else { continue };
            let below = &list[..list.partition_point(|&s| s < before)];
            if let Some(&step) = below.iter().rev().take_while(|&&s| latest.map_or(true, |l| s > l)).find(|&&s| self.bulk_write_touches(s, &range)) {
                latest = Some(step);
            }
        }
        latest
    }

    /// The first step at or after `from` that overwrote a byte of `range`.
    pub fn first_write_from(&self, range: Range<u64>, from: u64) -> Option<u64> {
        if range.is_empty() {
            return None;
        }
        let mut first = first_in_words(&self.words, &range, from);
        for page in range.start / PAGE..=(range.end - 1) / PAGE {
            let Some(list) = self.bulk_pages.get(&page) else { continue };
            let at_or_after = &list[list.partition_point(|&s| s < from)..];
            if let Some(&step) = at_or_after.iter().take_while(|&&s| first.map_or(true, |f| s < f)).find(|&&s| self.bulk_write_touches(s, &range)) {
                first = Some(step);
            }
        }
        first
    }

    /// The ids of the instructions at `addresses`, sorted.
    fn ids_at(&self, addresses: &[u64]) -> Vec<u32> {
        let kinds = [Flow::Call, Flow::Return, Flow::Other];
        let mut ids: Vec<u32> = addresses.iter().flat_map(|&a| kinds.iter().filter_map(move |&k| self.code_index.get(&(a, k)).copied())).collect();
        ids.sort_unstable();
        ids
    }

    /// The latest step before `before` whose address is one of
    /// `addresses` (sorted), passing over whole chunks that ran nowhere
    /// near them.
    pub fn last_pc_before(&self, addresses: &[u64], before: u64) -> Option<u64> {
        let ids = self.ids_at(addresses);
        let mut end = before.min(self.len()) as usize;
        while end > 0 {
            let chunk = (end - 1) / CHUNK;
            if any_within(addresses, self.pc_bounds[chunk]) {
                if let Some(i) = (chunk * CHUNK..end).rev().find(|&i| ids.binary_search(&self.instructions[i]).is_ok()) {
                    return Some(i as u64);
                }
            }
            end = chunk * CHUNK;
        }
        None
    }

    /// The first step at or after `from` whose address is one of
    /// `addresses` (sorted).
    pub fn first_pc_from(&self, addresses: &[u64], from: u64) -> Option<u64> {
        let ids = self.ids_at(addresses);
        let mut start = from as usize;
        while start < self.instructions.len() {
            let chunk = start / CHUNK;
            let end = ((chunk + 1) * CHUNK).min(self.instructions.len());
            if any_within(addresses, self.pc_bounds[chunk]) {
                if let Some(i) = (start..end).find(|&i| ids.binary_search(&self.instructions[i]).is_ok()) {
                    return Some(i as u64);
                }
            }
            start = end;
        }
        None
    }

    /// Thread `tid` was stopped at a signal handler's entry: its next step
    /// is the handler's first instruction.
    pub fn entering_handler(&mut self, tid: u64) {
        self.threads.entry(tid).or_default().entering_handler = true;
    }

    /// Thread `tid`'s steps before its step number `before`, newest first,
    /// as [`crate::inferior::frames::frame_history`] reads them.
    pub fn executed_before(&self, tid: u64, before: u64) -> impl Iterator<Item = Executed> + '_ {
        let thread = self.threads.get(&tid);
        let count = thread.map_or(0, |t| t.count);
        let entries = thread.map_or(&[][..], |t| &t.handler_entries[..]);
        let before = usize::try_from(before).unwrap_or(usize::MAX).min(count);
        (0..before).rev().map(move |index| Executed {
            id: index as u64,
            pc: self.pc(thread.expect("a thread with steps").position(index)),
            interrupted: entries.binary_search(&(index + 1)).is_ok(),
        })
    }

    /// The positions of thread `tid`'s first and last steps.
    pub fn span_of_thread(&self, tid: u64) -> Option<(u64, u64)> {
        let thread = self.threads.get(&tid).filter(|t| t.count > 0)?;
        Some((thread.position(0), thread.position(thread.count - 1)))
    }

    /// The step of thread `tid` before `position`, if any.
    pub fn previous_of_thread(&self, tid: u64, position: u64) -> Option<u64> {
        let thread = self.threads.get(&tid)?;
        thread.done_before(position).checked_sub(1).map(|i| thread.position(i))
    }

    /// The step of thread `tid` at or after `position`, if any.
    pub fn next_of_thread(&self, tid: u64, position: u64) -> Option<u64> {
        let thread = self.threads.get(&tid)?;
        let done = thread.done_before(position);
        (done < thread.count).then(|| thread.position(done))
    }
    /// Thread `tid`'s history seen from its step `before` (its count of
    /// steps: the present): what [`crate::inferior::frames::frame_history`]
    /// lists from the same steps, found through the depth index instead of
    /// walking callees step by step.
    ///
    /// With `within`, the run of steps of the starting frame at addresses
    /// inside those ranges that ends just before `before` (one source
    /// line's code, say), callees included, is listed as its earliest step
    /// only — what a reverse `next` needs to pass over a long loop on one
    /// line in one answer.
    ///
    /// Each callee listed says the latest of its steps at one of `stops`
    /// (sorted), found through the address index.
    pub fn frame_history(&self, tid: u64, before: u64, max: usize, within: &[Range<u64>], stops: &[u64]) -> Vec<FrameStep> {
        let Some(thread) = self.threads.get(&tid) else { return Vec::new() };
        let count = thread.count;
        let before = usize::try_from(before).unwrap_or(usize::MAX).min(count);
        let frame = if before == count { thread.depth_next } else { thread.depth(before) };
        let pc = |i: usize| self.pc(thread.position(i));
        let inside = |pc: u64| within.iter().any(|r| r.contains(&pc));
        let step = |i: usize| FrameStep { id: i as u64, pc: pc(i), depth: thread.depth(i) - frame, stop: None };
        let mut listed = Vec::new();
        // In the run `within` passes over, and its earliest step so far.
        let mut in_run = !within.is_empty();
        let mut run_start = None;
        let mut i = before;
        while i > 0 && listed.len() < max {
            if in_run && i % FRAME_BLOCK == 0 {
                // A whole block of the run: the frame's depth throughout, its
                // addresses inside one of the ranges.
                let block = thread.blocks[i / FRAME_BLOCK - 1];
                if block.min_depth == frame && block.max_depth == frame && within.iter().any(|r| r.contains(&block.min_pc) && r.contains(&block.max_pc)) {
                    i -= FRAME_BLOCK;
                    run_start = Some(step(i));
                    continue;
                }
            }
            i -= 1;
            let here = step(i);
            if here.depth == 1 && self.instruction(thread.position(i)).1 == Flow::Return {
                // A callee's return: listed (not within a run), then the
                // callee is passed over, back to the instruction that
                // entered it.
                let entered = self.after_step_at_depth(thread, i, frame);
                if !in_run {
                    listed.push(FrameStep { stop: self.last_stop_of_thread(thread, entered..i + 1, stops), ..here });
                }
                i = entered;
                continue;
            }
            if here.depth > 0 {
                continue;
            }
            if in_run {
                if here.depth == 0 && inside(here.pc) {
                    run_start = Some(here);
                    continue;
                }
                in_run = false;
                listed.extend(run_start.take());
                if listed.len() >= max {
                    break;
                }
            }
            listed.push(here);
            if here.depth < 0 {
                break;
            }
        }
        if listed.len() < max {
            listed.extend(run_start);
        }
        listed
    }

    /// The latest of `thread`'s steps numbered in `steps` whose address
    /// is one of `stops` (sorted): (its number, its address).
    fn last_stop_of_thread(&self, thread: &ThreadSteps, steps: Range<usize>, stops: &[u64]) -> Option<(u64, u64)> {
        if stops.is_empty() || steps.is_empty() {
            return None;
        }
        let first = thread.position(steps.start);
        let mut before = thread.position(steps.end - 1) + 1;
        while let Some(position) = self.last_pc_before(stops, before).filter(|&p| p >= first) {
            let index = thread.done_before(position);
            if index < thread.count && thread.position(index) == position {
                return Some((index as u64, self.pc(position)));
            }
            before = position;
        }
        None
    }

    /// One past the latest of `thread`'s steps before `i` that ran at
    /// depth `frame` or shallower (0 if none).
    fn after_step_at_depth(&self, thread: &ThreadSteps, mut i: usize, frame: i32) -> usize {
        while i > 0 {
            if i % FRAME_BLOCK == 0 && thread.blocks[i / FRAME_BLOCK - 1].min_depth > frame {
                i -= FRAME_BLOCK;
                continue;
            }
            if thread.depth(i - 1) <= frame {
                return i;
            }
            i -= 1;
        }
        0
    }

    /// Drops everything (the program exec'd: a new history begins).
    pub fn restart(&mut self, mappings: Vec<Range<u64>>) {
        *self = StateLog::new(mappings);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn regs(rip: u64, rax: u64) -> Regs {
        let mut regs = Regs { rip, ..Regs::default() };
        regs.gpr[0] = rax;
        regs
    }

    /// Memory of 2 pages at 0x1000, as a vector the test mutates as the
    /// "process" runs.
    fn reader(memory: &[u8]) -> impl FnMut(u64, &mut [u8]) -> usize + '_ {
        move |address, buf| {
            let Some(offset) = address.checked_sub(0x1000).map(|o| o as usize).filter(|&o| o < memory.len()) else { return 0 };
            let n = buf.len().min(memory.len() - offset);
            buf[..n].copy_from_slice(&memory[offset..offset + n]);
            n
        }
    }

    #[test]
    fn bytes_a_step_wrote_unkept_are_unknown_before_it_unless_kept_earlier() {
        // Memory 0x1000..0x1100 holds 9s now. Step 1 wrote 0x1010..0x1018
        // (kept: it held 1s); step 3, a system call, may have written all
        // of 0x1000..0x1100 unkept.
        let now = vec![9u8; 0x100];
        let mut log = StateLog::new(vec![0x1000..0x1100]);
        log.push(1, &regs(0x10, 0), &regs(0x11, 0), vec![], None, Flow::Other);
        log.push(1, &regs(0x11, 0), &regs(0x12, 0), vec![Overwritten { address: 0x1010, old: vec![1; 8] }], None, Flow::Other);
        log.push(1, &regs(0x12, 0), &regs(0x13, 0), vec![], None, Flow::Other);
        log.push(1, &regs(0x13, 0), &regs(0x14, 0), vec![], None, Flow::Other);
        log.lost_writes_of_last_step(vec![0x1000..0x1100]);
        log.push(1, &regs(0x14, 0), &regs(0x15, 0), vec![], None, Flow::Other);
        let read = |position: u64, address: u64, len: usize| {
            let mut buf = vec![0u8; len];
            let n = log.read_at(position, address, &mut buf, &mut reader(&now));
            buf.truncate(n);
            buf
        };
        assert_eq!(read(4, 0x1000, 0x20), vec![9; 0x20], "after the call: the present");
        assert_eq!(read(5, 0x1000, 0x20), vec![9; 0x20]);
        assert_eq!(read(3, 0x1000, 0x20), Vec::<u8>::new(), "before it: unknown, not the present");
        assert_eq!(read(2, 0x1020, 8), Vec::<u8>::new());
        assert_eq!(read(0, 0x1010, 8), vec![1; 8], "kept by step 1, before the call");
        assert_eq!(read(0, 0x1010, 0x10), vec![1; 8], "known as far as step 1 kept");
        assert_eq!(read(2, 0x1010, 8), Vec::<u8>::new(), "after step 1, before the call: unknown");
    }

    #[test]
    fn registers_replay_from_checkpoints_and_forced_ones() {
        let mut log = StateLog::new(vec![0x1000..0x3000]);
        // Thread 7 counts rax up, 200 steps; the debugger sets rax = 1000 before step 150.
        let mut rax = 0;
        for i in 0..200u64 {
            if i == 150 {
                rax = 1000;
            }
            log.push(7, &regs(0x100 + i, rax), &regs(0x101 + i, rax + 1), vec![], None, Flow::Other);
            rax += 1;
        }
        assert_eq!(log.registers_at(7, 0), Some(regs(0x100, 0)));
        assert_eq!(log.registers_at(7, 100), Some(regs(0x164, 100)));
        assert_eq!(log.registers_at(7, 149), Some(regs(0x100 + 149, 149)));
        assert_eq!(log.registers_at(7, 150), Some(regs(0x100 + 150, 1000)));
        assert_eq!(log.registers_at(7, 199), Some(regs(0x100 + 199, 1049)));
        assert_eq!(log.registers_at(7, 200), None, "the present is the live thread's");
        assert_eq!(log.registers_at(8, 10), None, "no such thread");
    }

    #[test]
    fn a_threads_registers_between_and_before_its_steps() {
        let mut log = StateLog::new(vec![]);
        log.push(1, &regs(0x10, 0), &regs(0x11, 0), vec![], None, Flow::Other);
        log.push(2, &regs(0x20, 5), &regs(0x21, 6), vec![], None, Flow::Other);
        log.push(1, &regs(0x11, 0), &regs(0x12, 0), vec![], None, Flow::Other);
        assert_eq!(log.registers_at(2, 0), Some(regs(0x20, 5)), "before its first step: where that step starts");
        assert_eq!(log.registers_at(2, 1), Some(regs(0x20, 5)));
        assert_eq!(log.registers_at(2, 2), Some(regs(0x21, 6)), "between its steps: after its last");
        assert_eq!(log.previous_of_thread(1, 2), Some(0));
        assert_eq!(log.next_of_thread(1, 1), Some(2));
        assert_eq!(log.steps_of_thread_before(1, 3), 2);
        assert_eq!(log.position_of_thread_step(1, 1), Some(2));
    }

    #[test]
    fn memory_reads_put_back_what_later_steps_overwrote() {
        let mut memory = vec![0u8; 0x2000];
        let mut log = StateLog::new(vec![0x1000..0x3000]);
        let r = regs(0, 0);
        // Step 0 writes 1..=4 at 0x1ffe (across the page boundary).
        log.push(1, &r, &r, vec![Overwritten { address: 0x1ffe, old: memory[0xffe..0x1002].to_vec() }], None, Flow::Other);
        memory[0xffe..0x1002].copy_from_slice(&[1, 2, 3, 4]);
        // The debugger writes 9 at 0x1fff, then step 1 writes 7 at 0x1fff.
        log.overwritten_outside(Overwritten { address: 0x1fff, old: vec![memory[0xfff]] });
        memory[0xfff] = 9;
        log.push(1, &r, &r, vec![Overwritten { address: 0x1fff, old: vec![memory[0xfff]] }], None, Flow::Other);
        memory[0xfff] = 7;
        let read = |position: u64| {
            let mut buf = [0xee; 4];
            let n = log.read_at(position, 0x1ffe, &mut buf, &mut reader(&memory));
            (n, buf)
        };
        assert_eq!(read(0), (4, [0, 0, 0, 0]));
        assert_eq!(read(1), (4, [1, 2, 3, 4]), "before step 1 and before the debugger's write");
        assert_eq!(read(2), (4, [1, 7, 3, 4]), "the present");
    }

    /// Random small, wide and bulk writes (and the debugger's) over two
    /// pages, mostly near their boundary: every read at every position
    /// equals a copy of the memory taken before that step.
    #[test]
    fn reads_at_every_position_equal_copies_of_the_memory_taken_then() {
        let mut state = 0x9e3779b97f4a7c15u64;
        let mut random = move |n: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % n
        };
        let mut memory: Vec<u8> = (0..0x2000u32).map(|i| (i * 7) as u8).collect();
        let mut log = StateLog::new(vec![0x1000..0x3000]);
        let mut copies = Vec::new();
        let r = regs(0, 0);
        for step in 0..600u64 {
            copies.push(memory.clone());
            let write = |memory: &mut Vec<u8>, random: &mut dyn FnMut(u64) -> u64| {
                let len = match random(10) {
                    0 => 17 + random(300),
                    1 => 9 + random(8),
                    _ => [1, 2, 4, 8][random(4) as usize],
                };
                let near = random(3) != 0;
                let offset = if near { 0xfc0 + random(0x80) } else { random(0x2000 - len) };
                let offset = offset.min(0x2000 - len) as usize;
                let old = Overwritten { address: 0x1000 + offset as u64, old: memory[offset..offset + len as usize].to_vec() };
                for byte in &mut memory[offset..offset + len as usize] {
                    *byte = byte.wrapping_add(1).wrapping_add(step as u8);
                }
                old
            };
            if random(8) == 0 {
                let old = write(&mut memory, &mut random);
                log.overwritten_outside(old);
            }
            let writes = (0..random(3)).map(|_| write(&mut memory, &mut random)).collect();
            log.push(1, &r, &r, writes, None, Flow::Other);
        }
        copies.push(memory.clone());
        for (position, copy) in copies.iter().enumerate() {
            for _ in 0..20 {
                let offset = if random(2) == 0 { 0xf00 + random(0x200) } else { random(0x2000) } as usize;
                let len = (1 + random(600) as usize).min(0x2000 - offset);
                let mut buf = vec![0u8; len];
                assert_eq!(log.read_at(position as u64, 0x1000 + offset as u64, &mut buf, &mut reader(&memory)), len);
                assert_eq!(buf, copy[offset..offset + len], "position {position}, 0x{:x}+{len}", 0x1000 + offset);
            }
        }
    }

    fn xorshift(seed: u64) -> impl FnMut(u64) -> u64 {
        let mut state = seed;
        move |n: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % n
        }
    }

    /// Three threads interleaved in runs, every kind of register changing
    /// at random by small and large amounts, the debugger setting some
    /// between steps: the registers of every thread at every position
    /// equal those it had then.
    #[test]
    fn registers_at_every_position_equal_what_each_thread_had_then() {
        let mut random = xorshift(0x2545f4914f6cdd1d);
        let mut log = StateLog::new(vec![]);
        let tids = [11u64, 12, 13];
        let mut current: HashMap<u64, Regs> = HashMap::new();
        for &tid in &tids {
            let mut regs = Regs { rip: 0x400000 + tid * 0x1000, eflags: 0x246, ..Regs::default() };
            regs.gpr[7] = 0x7fff_ffff_e000 - tid * 0x10000;
            current.insert(tid, regs);
        }
        // (tid, registers before) of every step, in order; registers after each thread's last.
        let mut steps: Vec<(u64, Regs)> = Vec::new();
        let mut tid = tids[0];
        for _ in 0..5000 {
            if random(10) == 0 {
                tid = tids[random(3) as usize];
            }
            let mut before = current[&tid].clone();
            if random(60) == 0 {
                // The debugger writes a register between steps.
                before.gpr[random(16) as usize] = random(u64::MAX);
            }
            let mut after = before.clone();
            after.rip = if random(8) == 0 { 0x400000 + random(0x100000) } else { before.rip + 1 + random(14) };
            for _ in 0..random(4) {
                let n = random(16) as usize;
                after.gpr[n] = match random(3) {
                    0 => after.gpr[n].wrapping_add(random(16)),
                    1 => after.gpr[n].wrapping_sub(random(1 << 20)),
                    _ => random(u64::MAX),
                };
            }
            if random(3) == 0 {
                after.eflags ^= 1 << random(12);
            }
            match random(40) {
                0 => after.xmm[random(16) as usize] = u128::from(random(u64::MAX)) << 64 | u128::from(random(u64::MAX)),
                1 => after.st[random(8) as usize][random(10) as usize] = random(256) as u8,
                2 => after.fpu[random(8) as usize] ^= random(u64::from(u32::MAX)) as u32,
                3 => after.mxcsr ^= 1 << random(16),
                4 => after.orig_rax = random(400),
                5 => after.fs_base = random(u64::MAX),
                6 => after.segments[random(6) as usize] = random(64) as u32,
                _ => {}
            }
            log.push(tid, &before, &after, vec![], None, Flow::Other);
            steps.push((tid, before));
            current.insert(tid, after);
        }
        for position in 0..=steps.len() {
            for &t in tids.iter().chain([&99]) {
                let next = steps[position..].iter().find(|(s, _)| *s == t).map(|(_, regs)| regs.clone());
                let ran = steps.iter().any(|(s, _)| *s == t);
                let expected = match next {
                    Some(regs) => Some(regs),
                    None if ran && position < steps.len() => Some(current[&t].clone()),
                    None => None,
                };
                assert_eq!(log.registers_at(t, position as u64), expected, "thread {t} at {position}");
            }
        }
    }

    /// The searches the reverse `bc` and forward replay make through the
    /// indexes (by address, by written byte) find what a walk over every
    /// step finds.
    #[test]
    fn searches_by_address_and_by_write_find_what_a_walk_finds() {
        let mut random = xorshift(0x5851f42d4c957f2d);
        let mut log = StateLog::new(vec![0x1000..0x3000]);
        let mut tid = 1;
        for _ in 0..4000u64 {
            // Stretches of steps far from the addresses searched for.
            let pc = if random(300) < 3 { 0x10 + random(4) } else { 0x1000 + random(64) };
            let writes = (0..random(3))
                .map(|_| {
                    let len = if random(12) == 0 { 17 + random(5000) } else { [1, 2, 4, 8, 16][random(5) as usize] };
                    let address = 0x1000 + random(0x2000 - len);
                    Overwritten { address, old: vec![0; len as usize] }
                })
                .collect();
            if random(50) == 0 {
                tid = 1 + random(3);
            }
            let r = regs(pc, 0);
            log.push(tid, &r, &r, writes, None, Flow::Other);
        }
        let len = log.len();
        for _ in 0..400 {
            let addresses: Vec<u64> = {
                let mut a: Vec<u64> = (0..1 + random(3)).map(|_| if random(2) == 0 { 0x10 + random(6) } else { 0x1000 + random(64) }).collect();
                a.sort_unstable();
                a.dedup();
                a
            };
            let position = random(len + 2);
            let hit = |p: u64| addresses.contains(&log.at(p).unwrap().1);
            assert_eq!(log.last_pc_before(&addresses, position), (0..position.min(len)).rev().find(|&p| hit(p)), "{addresses:x?} before {position}");
            assert_eq!(log.first_pc_from(&addresses, position), (position..len).find(|&p| hit(p)), "{addresses:x?} from {position}");
            let start = 0x1000 + random(0x2000);
            let range = start..(start + 1 + random(12)).min(0x3000);
            let wrote = |p: u64| log.overwritten_by(p).any(|(at, old)| at < range.end && range.start < at + old.len() as u64);
            assert_eq!(log.last_write_before(range.clone(), position), (0..position.min(len)).rev().find(|&p| wrote(p)), "{range:x?} before {position}");
            assert_eq!(log.first_write_from(range.clone(), position), (position..len).find(|&p| wrote(p)), "{range:x?} from {position}");
        }
    }

    #[test]
    fn a_page_mapped_later_cannot_be_read_before_and_an_unmapped_one_reads_its_old_bytes() {
        let mut memory = vec![5u8; 0x1000];
        let mut log = StateLog::new(vec![0x1000..0x2000]);
        let r = regs(0, 0);
        // Step 0 maps 0x2000..0x3000 (the "process" grows).
        log.push(1, &r, &r, vec![], Some(vec![0x1000..0x3000]), Flow::Other);
        memory.extend(vec![6u8; 0x1000]);
        let mut buf = [0u8; 2];
        assert_eq!(log.read_at(0, 0x2000, &mut buf, &mut reader(&memory)), 0, "not mapped before step 0");
        assert_eq!(log.read_at(1, 0x2000, &mut buf, &mut reader(&memory)), 2);
        assert_eq!(buf, [6, 6]);
        // Step 1 unmaps the first page: its bytes are saved.
        log.push(1, &r, &r, vec![Overwritten { address: 0x1000, old: memory[..0x1000].to_vec() }], Some(vec![0x2000..0x3000]), Flow::Other);
        let present = &memory[0x1000..];
        let mut now = |address: u64, buf: &mut [u8]| {
            let Some(offset) = address.checked_sub(0x2000).map(|o| o as usize).filter(|&o| o < present.len()) else { return 0 };
            let n = buf.len().min(present.len() - offset);
            buf[..n].copy_from_slice(&present[offset..offset + n]);
            n
        };
        assert_eq!(log.read_at(1, 0x1ffe, &mut buf, &mut now), 2, "mapped at 1, unmapped now: the saved bytes");
        assert_eq!(buf, [5, 5]);
        assert_eq!(log.read_at(2, 0x1ffe, &mut buf, &mut now), 0, "unmapped at 2");
    }

    /// A made-up thread: a loop in one frame's code (0x1000..0x1010) with
    /// long stretches of it, calls (at 0x10) into callees (0x5000..) that
    /// call deeper and return (at 0x20), and signal handlers (0x9000..)
    /// returning to a restorer at the frame's depth.
    fn made_up_thread(seed: u64, steps: usize) -> StateLog {
        let mut log = StateLog::new(vec![]);
        let mut state = seed;
        let mut random = move |n: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % n
        };
        let mut depth = 0;
        for _ in 0..steps {
            let pc = match random(100) {
                0..=2 => 0x10,
                3..=5 if depth > 0 => 0x20,
                6 if depth > 0 => {
                    log.entering_handler(1);
                    0x9000
                }
                _ if depth == 0 && random(2) == 0 => 0x1000 + random(16),
                _ if depth == 0 => 0x3000 + random(16),
                _ => 0x5000 + random(256),
            };
            let flow = match pc {
                0x10 => Flow::Call,
                0x20 => Flow::Return,
                _ => Flow::Other,
            };
            let r = regs(pc, 0);
            log.push(1, &r, &r, vec![], None, flow);
            depth = (depth + i32::from(flow == Flow::Call) - i32::from(flow == Flow::Return)).max(0);
            if random(5000) == 0 {
                // A long stretch of the loop's code.
                for k in 0..9000 {
                    let r = regs(0x1000 + k % 16, 0);
                    log.push(1, &r, &r, vec![], None, Flow::Other);
                }
            }
        }
        log
    }

    /// The indexed frame history lists what the step-by-step walk lists,
    /// and `within` collapses the run it names to its earliest step.
    #[test]
    fn the_indexed_frame_history_lists_what_the_walk_lists() {
        use crate::inferior::frames::frame_history;
        for seed in [0x9e3779b97f4a7c15u64, 0x2545f4914f6cdd1d, 0x5851f42d4c957f2d] {
            let log = made_up_thread(seed, 30_000);
            let kind = |pc: u64| match pc {
                0x10 => Flow::Call,
                0x20 => Flow::Return,
                _ => Flow::Other,
            };
            let count = log.steps_of_thread_before(1, log.len());
            let within = [0x1000..0x1010];
            // Addresses the made-up thread runs in callees and in the frame.
            let stops = [0x1003, 0x5007, 0x5080];
            let mut stopped_callees = 0;
            for before in (0..=count).step_by(997).chain([count]) {
                for max in [usize::MAX, 3] {
                    let walked = frame_history(log.executed_before(1, before), kind, max, &stops);
                    assert_eq!(log.frame_history(1, before, max, &[], &stops), walked, "seed {seed} before {before} max {max}");
                    stopped_callees += walked.iter().filter(|step| step.stop.is_some()).count();
                    // The run within 0x1000..0x1010 (callees passed over) as its earliest step.
                    let mut collapsed = Vec::new();
                    let mut in_run = true;
                    let mut run_start = None;
                    for step in frame_history(log.executed_before(1, before), kind, usize::MAX, &[]) {
                        if in_run && step.depth == 1 {
                            continue;
                        }
                        if in_run && step.depth == 0 && within[0].contains(&step.pc) {
                            run_start = Some(step);
                            continue;
                        }
                        in_run = false;
                        collapsed.extend(run_start.take());
                        collapsed.push(step);
                    }
                    collapsed.extend(run_start);
                    collapsed.truncate(max);
                    assert_eq!(log.frame_history(1, before, max, &within, &[]), collapsed, "within: seed {seed} before {before} max {max}");
                }
            }
            assert!(stopped_callees > 10, "callees ran the stop addresses: {stopped_callees}");
        }
    }
}
