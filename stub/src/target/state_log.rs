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

use std::collections::{BTreeMap, HashMap};
use std::ops::Range;

use crate::arch::{register_size, Regs, REGISTER_COUNT};
use crate::target::frames::{Executed, Flow, FrameStep};

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
pub const CHECKPOINT_EVERY: usize = 64;

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

/// One executed instruction.
#[derive(Debug, Clone, Copy)]
struct Step {
    tid: u64,
    pc: u64,
    /// Where its changed registers start in `register_bytes`.
    registers: usize,
    /// Where its overwritten memory starts in `memory_bytes`.
    memory: usize,
}

/// A thread's steps and register checkpoints.
#[derive(Debug, Default)]
struct ThreadSteps {
    /// Positions of the thread's steps, ascending.
    positions: Vec<u64>,
    /// (index into `positions`, registers before that step).
    checkpoints: Vec<(usize, Regs)>,
    /// Registers after its last step.
    last: Option<Regs>,
    /// Indices of its steps that are a signal handler's first instruction.
    handler_entries: Vec<usize>,
    /// Its next step is a signal handler's first instruction.
    entering_handler: bool,
    /// The call depth each step ran at (its first step's is 0): one more
    /// after a `call` and at a signal handler's first instruction, one less
    /// after a `ret`.
    depths: Vec<i32>,
    /// How each step moved between frames.
    flows: Vec<Flow>,
    /// The depth of its next step.
    depth_next: i32,
    /// Summaries of its steps, [`FRAME_BLOCK`] at a time.
    blocks: Vec<FrameBlock>,
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

/// See the module documentation.
#[derive(Debug, Default)]
pub struct StateLog {
    steps: Vec<Step>,
    /// Per step: `[register number][value…]` for each register it changed.
    register_bytes: Vec<u8>,
    /// Per step: `[address: u64][length: u32][old bytes…]`.
    memory_bytes: Vec<u8>,
    /// Word (address / 8) → the steps that wrote in it, small writes only.
    words: HashMap<u64, WordWrites>,
    /// Page → the steps that wrote more than [`SMALL_WRITE`] bytes at once
    /// in it, ascending.
    bulk_pages: HashMap<u64, Vec<u64>>,
    threads: BTreeMap<u64, ThreadSteps>,
    initial_mappings: Vec<Range<u64>>,
    /// (step, mappings in force after it), ascending.
    mappings: Vec<(u64, Vec<Range<u64>>)>,
    /// Overwrites not made by an instruction (the debugger's writes, a
    /// signal frame), charged to the next step.
    pending: Vec<Overwritten>,
}

impl StateLog {
    /// An empty history of a process whose memory is mapped as `mappings`.
    pub fn new(mappings: Vec<Range<u64>>) -> Self {
        StateLog { initial_mappings: mappings, ..StateLog::default() }
    }

    /// Number of steps recorded: the present's position.
    pub fn len(&self) -> u64 {
        self.steps.len() as u64
    }

    /// True before the first step.
    pub fn is_empty(&self) -> bool {
        self.steps.is_empty()
    }

    /// Bytes the history takes, roughly.
    pub fn bytes(&self) -> usize {
        let checkpoints: usize = self.threads.values().map(|t| t.checkpoints.len() * std::mem::size_of::<(usize, Regs)>() + t.positions.len() * 8).sum();
        let pages: usize = self.bulk_pages.values().map(|v| v.len() * 8 + 32).sum();
        let words: usize = self.words.values().map(|groups| 40 + groups.iter().map(|(_, steps)| 32 + steps.len() * 8).sum::<usize>()).sum();
        self.steps.len() * std::mem::size_of::<Step>() + self.register_bytes.len() + self.memory_bytes.len() + checkpoints + pages + words
    }

    /// The thread and instruction address of step `position`.
    pub fn at(&self, position: u64) -> Option<(u64, u64)> {
        self.steps.get(position as usize).map(|s| (s.tid, s.pc))
    }

    /// The threads that ran in the history.
    pub fn threads(&self) -> impl Iterator<Item = u64> + '_ {
        self.threads.keys().copied()
    }

    /// How many steps thread `tid` ran before `position`: the id of the
    /// instruction it stands at (`retrace dump instructions` numbering).
    pub fn steps_of_thread_before(&self, tid: u64, position: u64) -> u64 {
        self.threads.get(&tid).map_or(0, |t| t.positions.partition_point(|&p| p < position) as u64)
    }

    /// The position of thread `tid`'s step number `index` (0-based).
    pub fn position_of_thread_step(&self, tid: u64, index: u64) -> Option<u64> {
        self.threads.get(&tid)?.positions.get(usize::try_from(index).ok()?).copied()
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
        let position = self.steps.len() as u64;
        let step = Step { tid, pc: before.rip, registers: self.register_bytes.len(), memory: self.memory_bytes.len() };
        let thread = self.threads.entry(tid).or_default();
        let index = thread.positions.len();
        let continues = thread.last.as_ref() == Some(before);
        if index % CHECKPOINT_EVERY == 0 || !continues {
            thread.checkpoints.push((index, before.clone()));
        }
        if std::mem::take(&mut thread.entering_handler) {
            thread.handler_entries.push(index);
            thread.depth_next += 1;
        }
        thread.positions.push(position);
        let depth = thread.depth_next;
        thread.depths.push(depth);
        thread.flows.push(flow);
        thread.depth_next += match flow {
            Flow::Call => 1,
            Flow::Return => -1,
            Flow::Other => 0,
        };
        let pc = before.rip;
        if index % FRAME_BLOCK == 0 {
            thread.blocks.push(FrameBlock { min_depth: depth, max_depth: depth, min_pc: pc, max_pc: pc });
        } else if let Some(block) = thread.blocks.last_mut() {
            block.min_depth = block.min_depth.min(depth);
            block.max_depth = block.max_depth.max(depth);
            block.min_pc = block.min_pc.min(pc);
            block.max_pc = block.max_pc.max(pc);
        }
        for n in 0..REGISTER_COUNT {
            let new = after.register_bytes(n).expect("every register");
            if before.register_bytes(n).expect("every register") != new {
                self.register_bytes.push(n as u8);
                self.register_bytes.extend_from_slice(&new);
            }
        }
        thread.last = Some(after.clone());
        for write in std::mem::take(&mut self.pending).into_iter().chain(overwritten) {
            if write.old.is_empty() {
                continue;
            }
            let end = write.address + write.old.len() as u64;
            if write.old.len() <= SMALL_WRITE {
                for word in write.address / 8..=(end - 1) / 8 {
                    let mask = byte_mask(word, write.address, end);
                    let groups = self.words.entry(word).or_default();
                    match groups.iter_mut().find(|(m, _)| *m == mask) {
                        Some((_, steps)) if steps.last() == Some(&position) => {}
                        Some((_, steps)) => steps.push(position),
                        None => groups.push((mask, vec![position])),
                    }
                }
            } else {
                for page in write.address / PAGE..=(end - 1) / PAGE {
                    let steps = self.bulk_pages.entry(page).or_default();
                    if steps.last() != Some(&position) {
                        steps.push(position);
                    }
                }
            }
            self.memory_bytes.extend_from_slice(&write.address.to_le_bytes());
            self.memory_bytes.extend_from_slice(&(write.old.len() as u32).to_le_bytes());
            self.memory_bytes.extend_from_slice(&write.old);
        }
        if let Some(mappings) = mappings {
            self.mappings.push((position, mappings));
        }
        self.steps.push(step);
    }

    fn register_range(&self, position: usize) -> Range<usize> {
        let end = self.steps.get(position + 1).map_or(self.register_bytes.len(), |s| s.registers);
        self.steps[position].registers..end
    }

    fn memory_range(&self, position: usize) -> Range<usize> {
        let end = self.steps.get(position + 1).map_or(self.memory_bytes.len(), |s| s.memory);
        self.steps[position].memory..end
    }

    /// What step `position` overwrote, in order.
    pub fn overwritten_by(&self, position: u64) -> impl Iterator<Item = (u64, &[u8])> + '_ {
        let range = if (position as usize) < self.steps.len() { self.memory_range(position as usize) } else { 0..0 };
        let bytes = &self.memory_bytes[range];
        let mut at = 0;
        std::iter::from_fn(move || {
            let header = bytes.get(at..at + 12)?;
            let address = u64::from_le_bytes(header[..8].try_into().expect("8 bytes"));
            let len = u32::from_le_bytes(header[8..].try_into().expect("4 bytes")) as usize;
            let old = &bytes[at + 12..at + 12 + len];
            at += 12 + len;
            Some((address, old))
        })
    }

    /// Registers of thread `tid` at `position` (before step `position`),
    /// from the history; `None` for a thread that never ran in it, or at
    /// the present (the live thread's).
    pub fn registers_at(&self, tid: u64, position: u64) -> Option<Regs> {
        let thread = self.threads.get(&tid)?;
        // Its steps before `position`, and the checkpoint to start from.
        let done = thread.positions.partition_point(|&p| p < position);
        if done == thread.positions.len() && position >= self.len() {
            return None;
        }
        // The last checkpoint at or before its step `done` (before its
        // first step, a thread stands where its first step starts).
        let checkpoint = thread.checkpoints.partition_point(|(index, _)| *index <= done);
        let (from, regs) = &thread.checkpoints[checkpoint.max(1) - 1];
        let mut regs = regs.clone();
        for &step in &thread.positions[*from..done] {
            let bytes = &self.register_bytes[self.register_range(step as usize)];
            let mut at = 0;
            while at < bytes.len() {
                let n = bytes[at] as usize;
                let size = register_size(n).expect("a register this log wrote");
                let _ = regs.set_register(n, &bytes[at + 1..at + 1 + size]);
                at += 1 + size;
            }
        }
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
        // A byte is known if read now or put back.
        (0..len).find(|&i| i >= from_present && !restored[i]).unwrap_or(len)
    }

    /// Thread `tid` was stopped at a signal handler's entry: its next step
    /// is the handler's first instruction.
    pub fn entering_handler(&mut self, tid: u64) {
        self.threads.entry(tid).or_default().entering_handler = true;
    }

    /// Thread `tid`'s steps before its step number `before`, newest first,
    /// as [`crate::target::frames::frame_history`] reads them.
    pub fn executed_before(&self, tid: u64, before: u64) -> impl Iterator<Item = Executed> + '_ {
        let thread = self.threads.get(&tid);
        let positions = thread.map_or(&[][..], |t| &t.positions[..]);
        let entries = thread.map_or(&[][..], |t| &t.handler_entries[..]);
        let before = usize::try_from(before).unwrap_or(usize::MAX).min(positions.len());
        (0..before).rev().map(move |index| Executed {
            id: index as u64,
            pc: self.steps[positions[index] as usize].pc,
            interrupted: entries.binary_search(&(index + 1)).is_ok(),
        })
    }

    /// The positions of thread `tid`'s first and last steps.
    pub fn span_of_thread(&self, tid: u64) -> Option<(u64, u64)> {
        let positions = &self.threads.get(&tid)?.positions;
        Some((*positions.first()?, *positions.last()?))
    }

    /// The step of thread `tid` before `position`, if any.
    pub fn previous_of_thread(&self, tid: u64, position: u64) -> Option<u64> {
        let thread = self.threads.get(&tid)?;
        let done = thread.positions.partition_point(|&p| p < position);
        done.checked_sub(1).map(|i| thread.positions[i])
    }

    /// The step of thread `tid` at or after `position`, if any.
    pub fn next_of_thread(&self, tid: u64, position: u64) -> Option<u64> {
        let thread = self.threads.get(&tid)?;
        thread.positions.get(thread.positions.partition_point(|&p| p < position)).copied()
    }

    /// Thread `tid`'s history seen from its step `before` (its count of
    /// steps: the present): what [`crate::target::frames::frame_history`]
    /// lists from the same steps, found through the depth index instead of
    /// walking callees step by step.
    ///
    /// With `within`, the run of steps of the starting frame at addresses
    /// inside those ranges that ends just before `before` (one source
    /// line's code, say), callees included, is listed as its earliest step
    /// only — what a reverse `next` needs to pass over a long loop on one
    /// line in one answer.
    pub fn frame_history(&self, tid: u64, before: u64, max: usize, within: &[Range<u64>]) -> Vec<FrameStep> {
        let Some(thread) = self.threads.get(&tid) else { return Vec::new() };
        let count = thread.positions.len();
        let before = usize::try_from(before).unwrap_or(usize::MAX).min(count);
        let frame = if before == count { thread.depth_next } else { thread.depths[before] };
        let pc = |i: usize| self.steps[thread.positions[i] as usize].pc;
        let inside = |pc: u64| within.iter().any(|r| r.contains(&pc));
        let step = |i: usize| FrameStep { id: i as u64, pc: pc(i), depth: thread.depths[i] - frame };
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
            if here.depth == 1 && thread.flows[i] == Flow::Return {
                // A callee's return: listed (not within a run), then the
                // callee is passed over, back to the instruction that
                // entered it.
                if !in_run {
                    listed.push(here);
                }
                i = self.after_step_at_depth(thread, i, frame);
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

    /// One past the latest of `thread`'s steps before `i` that ran at
    /// depth `frame` or shallower (0 if none).
    fn after_step_at_depth(&self, thread: &ThreadSteps, mut i: usize, frame: i32) -> usize {
        while i > 0 {
            if i % FRAME_BLOCK == 0 && thread.blocks[i / FRAME_BLOCK - 1].min_depth > frame {
                i -= FRAME_BLOCK;
                continue;
            }
            if thread.depths[i - 1] <= frame {
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
            let mut write = |memory: &mut Vec<u8>, random: &mut dyn FnMut(u64) -> u64| {
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
        use crate::target::frames::frame_history;
        for seed in [0x9e3779b97f4a7c15u64, 0x2545f4914f6cdd1d, 0x5851f42d4c957f2d] {
            let log = made_up_thread(seed, 30_000);
            let kind = |pc: u64| match pc {
                0x10 => Flow::Call,
                0x20 => Flow::Return,
                _ => Flow::Other,
            };
            let count = log.steps_of_thread_before(1, log.len());
            let within = [0x1000..0x1010];
            for before in (0..=count).step_by(997).chain([count]) {
                for max in [usize::MAX, 3] {
                    let walked = frame_history(log.executed_before(1, before), kind, max);
                    assert_eq!(log.frame_history(1, before, max, &[]), walked, "seed {seed} before {before} max {max}");
                    // The run within 0x1000..0x1010 (callees passed over) as its earliest step.
                    let mut collapsed = Vec::new();
                    let mut in_run = true;
                    let mut run_start = None;
                    for step in frame_history(log.executed_before(1, before), kind, usize::MAX) {
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
                    assert_eq!(log.frame_history(1, before, max, &within), collapsed, "within: seed {seed} before {before} max {max}");
                }
            }
        }
    }
}
