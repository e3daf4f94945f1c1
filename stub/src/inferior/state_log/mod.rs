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
//! reading at most `CHUNK - 1` others; which instructions ran is kept
//! per [`SPAN`] steps as a filter, and the lowest and highest address per
//! `CHUNK`, for searches to pass over. Which thread ran is kept per run of
//! steps, the call depth per step in one byte beside a mark every
//! [`CHUNK`] steps. `docs/benchmarks.md` has what this costs per
//! instruction against GDB's `record full`.

use std::collections::{BTreeMap, HashMap};
use std::ops::Range;

use retrace_decoder::leb128;

use crate::arch::{Regs, REGISTER_COUNT};
use crate::inferior::frames::Flow;

use records::{change_of, register_value, reserve, Change, Records};
use id_filter::{IdFilter, SPAN};
use steps::{FrameBlock, ThreadSteps, FRAME_BLOCK};
use words::{index_words, WordWrites};

pub use steps::CHECKPOINT_EVERY;

mod id_filter;
mod queries;
mod records;
mod steps;
mod words;

/// Steps per entry of the record index, of the address bounds searches
/// skip by, and of a thread's depth marks.
const CHUNK: usize = 64;

const PAGE: u64 = 4096;

/// Writes of at most this many bytes (what one instruction stores, but
/// for the widest vector stores) are indexed by the 8-byte words they
/// touch; longer ones (a system call's, a signal frame, the debugger's
/// big writes) by page.
const SMALL_WRITE: usize = 16;

/// Bytes a step overwrote, before it did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Overwritten {
    /// First address.
    pub address: u64,
    /// The old bytes.
    pub old: Vec<u8>,
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
    /// The instructions every [`SPAN`] steps ran, as a filter searches
    /// pass over spans by.
    span_ids: Vec<IdFilter>,
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
                vec(&t.runs) + vec(&t.checkpoints) + vec(&t.handler_entries) + vec(&t.deliveries) + vec(&t.depth_marks) + vec(&t.depth_offsets) + vec(&t.blocks)
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
        vec(&self.instructions) + code + vec(&self.pc_bounds) + vec(&self.span_ids) + vec(&self.thread_runs) + vec(&self.records) + vec(&self.record_starts) + threads + words + pages + mappings
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

    /// How many instructions thread `tid` ran before `position`: the id
    /// of the instruction it stands at (`retrace dump instructions`
    /// numbering; deliveries are not instructions).
    pub fn steps_of_thread_before(&self, tid: u64, position: u64) -> u64 {
        self.threads.get(&tid).map_or(0, |t| t.id_of(t.done_before(position)))
    }

    /// The position of thread `tid`'s instruction number `id` (0-based).
    pub fn position_of_thread_step(&self, tid: u64, id: u64) -> Option<u64> {
        let thread = self.threads.get(&tid)?;
        let index = thread.index_of(id).filter(|&i| i < thread.count)?;
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
        if position as usize % SPAN == 0 {
            self.span_ids.push(IdFilter::default());
        }
        if let Some(filter) = self.span_ids.last_mut() {
            filter.insert(id);
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
            Flow::Other | Flow::Delivery => 0,
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
            before.ymmh != after.ymmh,
        ];
        for n in (0..REGISTER_COUNT).filter(|&n| n != 16) {
            let group = match n {
                0..=23 => 0,
                24..=39 => 1,
                40..=56 => 2,
                57..=59 => 3,
                _ => 4,
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

    /// Thread `tid` was stopped at a signal handler's entry: its next step
    /// is the handler's first instruction.
    pub fn entering_handler(&mut self, tid: u64) {
        self.threads.entry(tid).or_default().entering_handler = true;
    }

    /// Thread `tid` was delivered a signal: a step of its own, from the
    /// thread interrupted (`before`, at the address it resumes at when the
    /// handler returns) to the handler's entry (`after`), which overwrote
    /// what [`Self::overwritten_outside`] was given since its last step
    /// (the signal frame's room). Searches for breakpoints pass over it,
    /// and the thread's instruction numbers (ids) do not count it. Its next
    /// step is the handler's first instruction.
    pub fn push_delivery(&mut self, tid: u64, before: &Regs, after: &Regs) {
        self.push(tid, before, after, Vec::new(), None, Flow::Delivery);
        let thread = self.threads.entry(tid).or_default();
        thread.deliveries.push(thread.count - 1);
        thread.entering_handler = true;
    }

    /// The signal deliveries among the steps.
    pub fn deliveries(&self) -> u64 {
        self.threads.values().map(|t| t.deliveries.len() as u64).sum()
    }

    /// The instructions among the steps (all but the deliveries).
    pub fn instructions(&self) -> u64 {
        self.len() - self.deliveries()
    }

    /// Drops everything (the program exec'd: a new history begins).
    pub fn restart(&mut self, mappings: Vec<Range<u64>>) {
        *self = StateLog::new(mappings);
    }
}

#[cfg(test)]
mod tests;
