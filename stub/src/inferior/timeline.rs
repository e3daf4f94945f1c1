//! The recorded past as one line: every thread's executed instructions in
//! one global order, and the searches reverse execution needs over it
//! (the latest earlier instruction at a breakpoint, a thread's previous or
//! next instruction). A position is an instruction of that order not yet
//! executed: the program stands *before* it, its thread's PC is its
//! address. No OS and no protocol here: the saved-trace target (and the
//! recorded history of a live process) navigate with it.

use retrace_decoder::history::{Cursor, History as DecodedHistory};

use super::replay::{History, Step};
use crate::arch::Regs;

/// One thread's decoded history.
#[derive(Debug, Clone)]
pub struct RecordedThread {
    /// Linux thread id.
    pub tid: u64,
    /// What it executed.
    pub history: DecodedHistory,
}

/// Consecutive instructions of one thread in the global order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Run {
    /// Index into the timeline's threads.
    thread: usize,
    /// The thread's instruction index of the run's first instruction.
    first: u64,
    /// Instructions in the run.
    len: u64,
    /// Global position of the run's first instruction.
    start: u64,
}

/// One instruction of the timeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Instruction {
    /// Index into [`Timeline::threads`].
    pub thread: usize,
    /// Its thread's id.
    pub tid: u64,
    /// Its number within its thread (instructions only, from 0).
    pub index: u64,
    /// Its address.
    pub ip: u64,
}

/// Every thread's instructions in one order.
#[derive(Debug, Clone)]
pub struct Timeline {
    threads: Vec<RecordedThread>,
    runs: Vec<Run>,
    /// For each thread, the indices of its runs in `runs` (in order).
    runs_of: Vec<Vec<usize>>,
    len: u64,
}

impl Timeline {
    /// The threads' histories one after another, in the order given: the
    /// order for histories that carry no common clock (one thread, or
    /// threads whose interleaving was not recorded).
    pub fn sequential(threads: Vec<RecordedThread>) -> Self {
        let slices = threads.iter().enumerate().map(|(thread, t)| (thread, 0, t.history.instructions())).collect();
        Self::interleaved(threads, slices)
    }

    /// The threads' histories in the order `slices` gives: each is (thread
    /// index, first instruction, count), and each thread's slices must
    /// follow one another without gap or overlap (checked: a slice that does
    /// not is dropped, so the order stays a permutation of the instructions
    /// it keeps).
    pub fn interleaved(threads: Vec<RecordedThread>, slices: Vec<(usize, u64, u64)>) -> Self {
        let mut runs: Vec<Run> = Vec::new();
        let mut runs_of = vec![Vec::new(); threads.len()];
        let mut next_of = vec![0u64; threads.len()];
        let mut len = 0;
        for (thread, first, count) in slices {
            let Some(next) = next_of.get_mut(thread) else { continue };
            if count == 0 || first != *next || first + count > threads[thread].history.instructions() {
                continue;
            }
            *next += count;
            match runs.last_mut() {
                Some(last) if last.thread == thread => last.len += count,
                _ => {
                    runs_of[thread].push(runs.len());
                    runs.push(Run { thread, first, len: count, start: len });
                }
            }
            len += count;
        }
        Timeline { threads, runs, runs_of, len }
    }

    /// The threads, in the order given at construction.
    pub fn threads(&self) -> &[RecordedThread] {
        &self.threads
    }

    /// Instructions in the timeline.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn run_at(&self, position: u64) -> Option<usize> {
        if position >= self.len {
            return None;
        }
        Some(self.runs.partition_point(|r| r.start <= position) - 1)
    }

    fn cursor(&self, run: usize, position: u64) -> Cursor<'_> {
        let run = self.runs[run];
        let index = run.first + (position - run.start);
        self.threads[run.thread].history.cursor_at(index).expect("runs lie inside their thread's history")
    }

    /// The instruction at `position`.
    pub fn at(&self, position: u64) -> Option<Instruction> {
        let run = self.run_at(position)?;
        let cursor = self.cursor(run, position);
        let thread = self.runs[run].thread;
        Some(Instruction { thread, tid: self.threads[thread].tid, index: cursor.index(), ip: cursor.ip() })
    }

    /// The item id of the instruction at `position` in its thread, as
    /// `retrace dump instructions` and LLDB number it (events and errors
    /// count).
    pub fn item_id(&self, position: u64) -> Option<u64> {
        let run = self.run_at(position)?;
        Some(self.cursor(run, position).item_id())
    }

    /// The global position of instruction `index` of `thread`.
    pub fn position_of(&self, thread: usize, index: u64) -> Option<u64> {
        let runs = self.runs_of.get(thread)?;
        let at = runs.partition_point(|&r| self.runs[r].first <= index).checked_sub(1)?;
        let run = self.runs[runs[at]];
        (index < run.first + run.len).then(|| run.start + (index - run.first))
    }

    /// The position of the instruction whose item id in thread `tid` is
    /// `item`; the error says why there is none.
    pub fn position_of_item(&self, tid: u64, item: u64) -> Result<u64, crate::inferior::InferiorError> {
        let thread = self.threads.iter().position(|t| t.tid == tid).ok_or_else(|| crate::inferior::InferiorError::InvalidRequest(format!("no thread {tid} in the history")))?;
        let history = &self.threads[thread].history;
        let mut extras_before = 0u64;
        for (id, _) in history.extras_with_ids() {
            match id.cmp(&item) {
                std::cmp::Ordering::Less => extras_before += 1,
                std::cmp::Ordering::Equal => return Err(crate::inferior::InferiorError::InvalidRequest(format!("item {item} of thread {tid} is an event or error, not an instruction"))),
                std::cmp::Ordering::Greater => break,
            }
        }
        let index = item - extras_before;
        self.position_of(thread, index).ok_or_else(|| crate::inferior::InferiorError::InvalidRequest(format!("no instruction {item} in thread {tid} (it has {} items)", history.items_len())))
    }

    /// The positions of `thread`'s first and last instructions.
    pub fn span_of(&self, thread: usize) -> Option<(u64, u64)> {
        let runs = self.runs_of.get(thread)?;
        let (first, last) = (self.runs[*runs.first()?], self.runs[*runs.last()?]);
        Some((first.start, last.start + last.len - 1))
    }

    /// The index of the thread with id `tid`.
    pub fn thread_of(&self, tid: u64) -> Option<usize> {
        self.threads.iter().position(|t| t.tid == tid)
    }

    /// The latest position before `position` that is `thread`'s.
    pub fn previous_of_thread(&self, position: u64, thread: usize) -> Option<u64> {
        let runs = self.runs_of.get(thread)?;
        let at = runs.partition_point(|&r| self.runs[r].start < position).checked_sub(1)?;
        let run = self.runs[runs[at]];
        Some((run.start + run.len - 1).min(position - 1))
    }

    /// The earliest position after `position` that is `thread`'s.
    pub fn next_of_thread(&self, position: u64, thread: usize) -> Option<u64> {
        let runs = self.runs_of.get(thread)?;
        let at = runs.partition_point(|&r| self.runs[r].start + self.runs[r].len <= position + 1);
        let run = self.runs[*runs.get(at)?];
        Some(run.start.max(position + 1))
    }

    /// Where `thread` stands when the program is at `position`: its first
    /// instruction at or after it, or `None` when it executes nothing more
    /// in the history.
    pub fn next_pc_of_thread(&self, position: u64, thread: usize) -> Option<u64> {
        let at = if self.at(position).is_some_and(|i| i.thread == thread) {
            position
        } else {
            self.next_of_thread(position, thread)?
        };
        self.at(at).map(|i| i.ip)
    }

    /// The latest position before `position` whose instruction `hit`
    /// accepts (given its address).
    pub fn search_back(&self, position: u64, mut hit: impl FnMut(u64) -> bool) -> Option<u64> {
        let mut at = position.min(self.len).checked_sub(1)?;
        let mut run = self.run_at(at)?;
        loop {
            let mut cursor = self.cursor(run, at);
            let start = self.runs[run].start;
            loop {
                if hit(cursor.ip()) {
                    return Some(at);
                }
                if at == start {
                    break;
                }
                cursor.prev();
                at -= 1;
            }
            run = run.checked_sub(1)?;
            at -= 1;
        }
    }

    /// The earliest position after `position` whose instruction `hit`
    /// accepts.
    pub fn search_forward(&self, position: u64, mut hit: impl FnMut(u64) -> bool) -> Option<u64> {
        let mut at = position.checked_add(1)?;
        let mut run = self.run_at(at)?;
        loop {
            let mut cursor = self.cursor(run, at);
            let end = self.runs[run].start + self.runs[run].len;
            loop {
                if hit(cursor.ip()) {
                    return Some(at);
                }
                at += 1;
                if at == end {
                    break;
                }
                cursor.next();
            }
            run += 1;
            if run == self.runs.len() {
                return None;
            }
        }
    }
}

/// A saved trace's history: instruction addresses only, and the end is
/// before the last instruction (after it no thread's PC is known).
impl History for Timeline {
    fn len(&self) -> u64 {
        self.len
    }

    fn end(&self) -> u64 {
        self.len.saturating_sub(1)
    }

    fn step(&self, position: u64) -> Option<Step> {
        self.at(position).map(|i| Step { tid: i.tid, pc: i.ip })
    }

    fn thread_at(&self, position: u64) -> u64 {
        self.at(position).or_else(|| self.at(self.len.checked_sub(1)?)).map_or(0, |i| i.tid)
    }

    fn previous_of_thread(&self, tid: u64, before: u64) -> Option<u64> {
        Timeline::previous_of_thread(self, before, self.thread_of(tid)?)
    }

    fn next_of_thread(&self, tid: u64, from: u64) -> Option<u64> {
        let thread = self.thread_of(tid)?;
        match self.at(from) {
            Some(here) if here.thread == thread => Some(from),
            _ => Timeline::next_of_thread(self, from, thread),
        }
    }

    fn last_pc_before(&self, addresses: &[u64], before: u64) -> Option<u64> {
        if addresses.is_empty() {
            return None;
        }
        self.search_back(before, |ip| addresses.binary_search(&ip).is_ok())
    }

    fn first_pc_from(&self, addresses: &[u64], from: u64) -> Option<u64> {
        if addresses.is_empty() {
            return None;
        }
        let hit = |ip: u64| addresses.binary_search(&ip).is_ok();
        match self.at(from) {
            Some(here) if hit(here.ip) => Some(from),
            Some(_) => self.search_forward(from, hit),
            None => None,
        }
    }

    fn registers_at(&self, tid: u64, position: u64) -> Option<Regs> {
        let thread = self.thread_of(tid)?;
        Some(match self.next_pc_of_thread(position, thread) {
            Some(pc) => Regs::only_pc(pc),
            // It runs no more in the history: where it stands is not known.
            None => Regs { unavailable: u64::MAX, ..Regs::default() },
        })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use retrace_decoder::flow::{decode_parallel_with, FlowOptions};
    use retrace_decoder::image::Image;
    use retrace_decoder::packet::{IpPacketKind, Packet, PacketEncoder};

    /// A history of straight-line code: `count` one-byte `nop`s at `start`,
    /// decoded by the decoder from a genuine trace of them.
    pub(crate) fn nops(start: u64, count: usize) -> DecodedHistory {
        let mut image = Image::new();
        image.add_raw("code", start, vec![0x90u8; count + 1]);
        let mut trace = PacketEncoder::new();
        trace.encode(&Packet::Psb).unwrap();
        trace.encode(&Packet::ModeExec { csl: true, csd: false, iflag: false }).unwrap();
        trace.encode(&Packet::Psbend).unwrap();
        trace.encode_ip(IpPacketKind::TipPge, Some(start));
        trace.encode_ip(IpPacketKind::Fup, Some(start + count as u64));
        trace.encode_ip(IpPacketKind::TipPgd, None);
        let history = decode_parallel_with(trace.bytes(), &image, 1, FlowOptions::default());
        assert_eq!(history.instructions(), count as u64, "the test's trace decodes");
        history
    }

    fn two_threads() -> Timeline {
        let threads = vec![
            RecordedThread { tid: 10, history: nops(0x1000, 5) }, // 5 instructions: 0x1000..=0x1004
            RecordedThread { tid: 20, history: nops(0x2000, 3) }, // 3 instructions: 0x2000..=0x2002
        ];
        // 10: 0,1 | 20: 0 | 10: 2,3,4 | 20: 1,2
        Timeline::interleaved(threads, vec![(0, 0, 2), (1, 0, 1), (0, 2, 3), (1, 1, 2)])
    }

    #[test]
    fn positions_map_to_threads_and_back() {
        let t = two_threads();
        assert_eq!(t.len(), 8);
        let order: Vec<(u64, u64)> = (0..8).map(|p| t.at(p).map(|i| (i.tid, i.ip)).unwrap()).collect();
        assert_eq!(
            order,
            [(10, 0x1000), (10, 0x1001), (20, 0x2000), (10, 0x1002), (10, 0x1003), (10, 0x1004), (20, 0x2001), (20, 0x2002)]
        );
        assert_eq!(t.at(8), None);
        for p in 0..8 {
            let i = t.at(p).unwrap();
            assert_eq!(t.position_of(i.thread, i.index), Some(p));
        }
        assert_eq!(t.position_of(1, 3), None);
    }

    #[test]
    fn a_threads_neighbours_skip_the_others() {
        let t = two_threads();
        assert_eq!(t.previous_of_thread(3, 0), Some(1));
        assert_eq!(t.previous_of_thread(6, 1), Some(2));
        assert_eq!(t.previous_of_thread(2, 1), None);
        assert_eq!(t.previous_of_thread(0, 0), None);
        assert_eq!(t.next_of_thread(1, 0), Some(3));
        assert_eq!(t.next_of_thread(2, 1), Some(6));
        assert_eq!(t.next_of_thread(5, 0), None);
        assert_eq!(t.next_of_thread(7, 1), None);
        assert_eq!(t.next_pc_of_thread(3, 1), Some(0x2001));
        assert_eq!(t.next_pc_of_thread(2, 1), Some(0x2000));
        assert_eq!(t.next_pc_of_thread(6, 0), None);
    }

    #[test]
    fn searches_look_strictly_before_or_after() {
        let t = two_threads();
        assert_eq!(t.search_back(8, |ip| ip == 0x1001), Some(1));
        assert_eq!(t.search_back(1, |ip| ip == 0x1001), None);
        assert_eq!(t.search_back(7, |ip| ip >= 0x2000), Some(6));
        assert_eq!(t.search_back(6, |ip| ip >= 0x2000), Some(2));
        assert_eq!(t.search_forward(0, |ip| ip == 0x2002), Some(7));
        assert_eq!(t.search_forward(7, |_| true), None);
        assert_eq!(t.search_forward(2, |ip| ip >= 0x2000), Some(6));
        let mut seen = Vec::new();
        assert_eq!(t.search_back(8, |ip| {
            seen.push(ip);
            false
        }), None);
        assert_eq!(seen.len(), 8);
    }

    #[test]
    fn slices_that_break_a_threads_order_are_dropped() {
        let threads = vec![RecordedThread { tid: 1, history: nops(0x1000, 3) }];
        let t = Timeline::interleaved(threads, vec![(0, 1, 2), (0, 0, 1), (0, 2, 1), (3, 0, 1), (0, 1, 5)]);
        assert_eq!(t.len(), 1);
        assert_eq!(t.at(0).unwrap().ip, 0x1000);
    }
}
