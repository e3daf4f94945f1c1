//! The recorded past as one line: every thread's executed instructions in
//! one global order, and the searches reverse execution needs over it
//! (the latest earlier instruction at a breakpoint, a thread's previous or
//! next instruction). A position is a step of that order not yet taken:
//! the program stands *before* it, its thread's PC is its address. A step
//! is an instruction or, where the recording says so (a full-state
//! recording), a signal's delivery: the thread stood interrupted at an
//! address (the one it returns to) before its handler's first instruction,
//! as GDB's `record full` and rr show it. No OS and no protocol here: the
//! saved-trace target navigates with it.

use retrace_decoder::history::{Cursor, History as DecodedHistory};

use crate::arch::Regs;

/// One thread's decoded history.
#[derive(Debug, Clone)]
pub struct RecordedThread {
    /// Linux thread id.
    pub tid: u64,
    /// What it executed.
    pub history: DecodedHistory,
}

/// Consecutive instructions of one thread in the global order, or one
/// signal delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Run {
    /// Index into the timeline's threads.
    thread: usize,
    /// The thread's instruction index of the run's first instruction (of a
    /// delivery: of the instruction it comes before).
    first: u64,
    /// Positions in the run (a delivery: 1).
    len: u64,
    /// Global position of the run's first step.
    start: u64,
    /// A delivery: the address the thread was interrupted at.
    delivery: Option<u64>,
}

/// One step of the timeline: an instruction, or a signal's delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimelineStep {
    /// Index into [`Timeline::threads`].
    pub thread: usize,
    /// Its thread's id.
    pub tid: u64,
    /// Its number within its thread (instructions only, from 0); a
    /// delivery's is the instruction's it comes before.
    pub index: u64,
    /// Its address; a delivery's is where the thread was interrupted.
    pub ip: u64,
    /// It is a signal's delivery, not an instruction.
    pub delivery: bool,
}

/// A signal delivered: before instruction `index` of thread `thread`
/// (an index into the threads), the thread interrupted at `ip`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Delivery {
    /// Index into the timeline's threads.
    pub thread: usize,
    /// The thread's instruction it comes before (the handler's first).
    pub index: u64,
    /// Where the thread was interrupted.
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
        Self::scheduled(threads, slices, Vec::new())
    }

    /// [`Self::interleaved`], with the signals delivered (in the order
    /// they were): each is a step of its own before its instruction. One
    /// before no instruction of the history is left out, but for one after
    /// the last instruction of the thread that ran last (the fatal signal
    /// that ended the program).
    pub fn scheduled(threads: Vec<RecordedThread>, slices: Vec<(usize, u64, u64)>, deliveries: Vec<Delivery>) -> Self {
        let mut timeline = Timeline { runs: Vec::new(), runs_of: vec![Vec::new(); threads.len()], threads, len: 0 };
        let mut waiting = vec![std::collections::VecDeque::new(); timeline.threads.len()];
        let mut deliveries = deliveries;
        deliveries.sort_by_key(|d| (d.thread, d.index));
        for d in deliveries {
            if let Some(queue) = waiting.get_mut(d.thread) {
                queue.push_back((d.index, d.ip));
            }
        }
        let mut next_of = vec![0u64; timeline.threads.len()];
        for (thread, first, count) in slices {
            let Some(next) = next_of.get_mut(thread) else { continue };
            if count == 0 || first != *next || first + count > timeline.threads[thread].history.instructions() {
                continue;
            }
            *next += count;
            let (mut at, end) = (first, first + count);
            while let Some(&(index, ip)) = waiting[thread].front().filter(|(index, _)| *index < end) {
                if index > at {
                    timeline.push(thread, at, index - at, None);
                    at = index;
                }
                timeline.push(thread, at, 1, Some(ip));
                waiting[thread].pop_front();
            }
            timeline.push(thread, at, end - at, None);
        }
        // The fatal signal that ended the program: a step after the last
        // instruction of the thread that ran last, where it stopped.
        if let Some(last) = timeline.runs.last().map(|r| r.thread) {
            let done = timeline.threads[last].history.instructions();
            if let Some(&(_, ip)) = waiting[last].iter().find(|(index, _)| *index == done).filter(|_| next_of[last] == done) {
                timeline.push(last, done, 1, Some(ip));
            }
        }
        timeline
    }

    /// Appends `len` instructions of `thread` from `first`, or a delivery
    /// before instruction `first`.
    fn push(&mut self, thread: usize, first: u64, len: u64, delivery: Option<u64>) {
        if len == 0 {
            return;
        }
        match self.runs.last_mut() {
            Some(last) if last.thread == thread && last.delivery.is_none() && delivery.is_none() && last.first + last.len == first => last.len += len,
            _ => {
                self.runs_of[thread].push(self.runs.len());
                self.runs.push(Run { thread, first, len, start: self.len, delivery });
            }
        }
        self.len += len;
    }

    /// The threads, in the order given at construction.
    pub fn threads(&self) -> &[RecordedThread] {
        &self.threads
    }

    /// Steps in the timeline (instructions and deliveries).
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Instructions in the timeline.
    pub fn instructions(&self) -> u64 {
        self.len - self.runs.iter().filter(|r| r.delivery.is_some()).count() as u64
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

    /// The cursor at `position` of run `run` (a delivery's: at the
    /// instruction it comes before, which the fatal signal's has not).
    fn cursor(&self, run: usize, position: u64) -> Cursor<'_> {
        let run = self.runs[run];
        let index = run.first + if run.delivery.is_some() { 0 } else { position - run.start };
        self.threads[run.thread].history.cursor_at(index).expect("runs lie inside their thread's history")
    }

    /// The step at `position`.
    pub fn at(&self, position: u64) -> Option<TimelineStep> {
        let run = self.run_at(position)?;
        let Run { thread, delivery, first, .. } = self.runs[run];
        let (index, ip) = match delivery {
            Some(ip) => (first, ip),
            None => {
                let cursor = self.cursor(run, position);
                (cursor.index(), cursor.ip())
            }
        };
        Some(TimelineStep { thread, tid: self.threads[thread].tid, index, ip, delivery: delivery.is_some() })
    }

    /// The item id of the instruction at `position` in its thread, as
    /// `retrace dump instructions` and LLDB number it (events and errors
    /// count); a delivery's is the instruction's it comes before.
    pub fn item_id(&self, position: u64) -> Option<u64> {
        let run = self.run_at(position)?;
        let Run { thread, first, delivery, .. } = self.runs[run];
        let history = &self.threads[thread].history;
        // (The fatal signal's, after the last instruction: past the items.)
        if delivery.is_some() && history.cursor_at(first).is_none() {
            return Some(history.items_len());
        }
        Some(self.cursor(run, position).item_id())
    }

    /// The global position of instruction `index` of `thread`.
    pub fn position_of(&self, thread: usize, index: u64) -> Option<u64> {
        let runs = self.runs_of.get(thread)?;
        // (A delivery before instruction `index` comes before the run
        // that starts with it: the last run from at or before `index` is
        // an instruction run.)
        let at = runs.partition_point(|&r| self.runs[r].first <= index).checked_sub(1)?;
        let run = self.runs[runs[at]];
        (run.delivery.is_none() && index < run.first + run.len).then(|| run.start + (index - run.first))
    }

    /// The position of the first delivery to `thread` before its
    /// instruction `index` that is at or after `from`.
    pub fn delivery_before(&self, thread: usize, index: u64, from: u64) -> Option<u64> {
        let runs = self.runs_of.get(thread)?;
        let at = runs.partition_point(|&r| self.runs[r].first < index);
        runs[at..].iter().map(|&r| self.runs[r]).take_while(|r| r.first == index && r.delivery.is_some()).map(|r| r.start).find(|&start| start >= from)
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
    /// accepts (given its address). Deliveries run no instruction: they
    /// are not searched (a breakpoint where a thread was interrupted stops
    /// when the instruction runs, after the handler, as natively).
    pub fn search_back(&self, position: u64, mut hit: impl FnMut(u64) -> bool) -> Option<u64> {
        let mut at = position.min(self.len).checked_sub(1)?;
        let mut run = self.run_at(at)?;
        loop {
            let start = self.runs[run].start;
            if self.runs[run].delivery.is_none() {
                let mut cursor = self.cursor(run, at);
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
            }
            run = run.checked_sub(1)?;
            at = start - 1;
        }
    }

    /// The earliest position after `position` whose instruction `hit`
    /// accepts (deliveries are not searched, as in [`Self::search_back`]).
    pub fn search_forward(&self, position: u64, mut hit: impl FnMut(u64) -> bool) -> Option<u64> {
        let mut at = position.checked_add(1)?;
        let mut run = self.run_at(at)?;
        loop {
            let end = self.runs[run].start + self.runs[run].len;
            if self.runs[run].delivery.is_none() {
                let mut cursor = self.cursor(run, at);
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
            }
            at = end;
            run += 1;
            if run == self.runs.len() {
                return None;
            }
        }
    }
}

/// What the replay engine asks of a saved trace's history (its
/// [`History`](super::replay::History) is the saved trace's, over this and
/// any full state): instruction addresses only, and the end is before the
/// last instruction (after it no thread's PC is known).
impl Timeline {
    /// The last position the program can stand at: before the last step.
    pub fn end(&self) -> u64 {
        self.len.saturating_sub(1)
    }

    /// The thread a stop at `position` is reported for: the one whose step
    /// is there (the last one's at the end).
    pub fn thread_at(&self, position: u64) -> u64 {
        self.at(position).or_else(|| self.at(self.len.checked_sub(1)?)).map_or(0, |i| i.tid)
    }

    /// Thread `tid`'s latest step before `before`.
    pub fn previous_of_tid(&self, tid: u64, before: u64) -> Option<u64> {
        self.previous_of_thread(before, self.thread_of(tid)?)
    }

    /// Thread `tid`'s first step at or after `from`.
    pub fn next_of_tid(&self, tid: u64, from: u64) -> Option<u64> {
        let thread = self.thread_of(tid)?;
        match self.at(from) {
            Some(here) if here.thread == thread => Some(from),
            _ => self.next_of_thread(from, thread),
        }
    }

    /// The latest step before `before` at one of `addresses` (sorted).
    pub fn last_pc_before(&self, addresses: &[u64], before: u64) -> Option<u64> {
        if addresses.is_empty() {
            return None;
        }
        self.search_back(before, |ip| addresses.binary_search(&ip).is_ok())
    }

    /// The first step at or after `from` at one of `addresses` (sorted).
    pub fn first_pc_from(&self, addresses: &[u64], from: u64) -> Option<u64> {
        if addresses.is_empty() {
            return None;
        }
        let hit = |ip: u64| addresses.binary_search(&ip).is_ok();
        match self.at(from) {
            Some(here) if !here.delivery && hit(here.ip) => Some(from),
            Some(_) => self.search_forward(from, hit),
            None => None,
        }
    }

    /// Thread `tid`'s registers at `position` as a trace knows them: the
    /// PC of its next step, all unavailable where it runs no more.
    pub fn pc_registers_at(&self, tid: u64, position: u64) -> Option<Regs> {
        let thread = self.thread_of(tid)?;
        Some(match self.next_pc_of_thread(position, thread) {
            Some(pc) => Regs::only_pc(pc),
            // It runs no more in the history: where it stands is not known.
            None => Regs { unavailable: u128::MAX, ..Regs::default() },
        })
    }
}

/// A history of straight-line code: `count` one-byte `nop`s at `start`,
/// decoded by the decoder from a genuine trace of them. For the tests and
/// the fuzz targets that need a timeline without a recording.
pub fn straight_line_history(start: u64, count: usize) -> DecodedHistory {
    use retrace_decoder::flow::{decode_parallel_with, FlowOptions};
    use retrace_decoder::image::Image;
    use retrace_decoder::packet::{IpPacketKind, Packet, PacketEncoder};
    let mut image = Image::new();
    image.add_raw("code", start, vec![0x90u8; count + 1]);
    let mut trace = PacketEncoder::new();
    trace.encode(&Packet::Psb).expect("a PSB encodes");
    trace.encode(&Packet::ModeExec { csl: true, csd: false, iflag: false }).expect("a MODE.Exec encodes");
    trace.encode(&Packet::Psbend).expect("a PSBEND encodes");
    trace.encode_ip(IpPacketKind::TipPge, Some(start));
    trace.encode_ip(IpPacketKind::Fup, Some(start.wrapping_add(count as u64)));
    trace.encode_ip(IpPacketKind::TipPgd, None);
    let history = decode_parallel_with(trace.bytes(), &image, 1, FlowOptions::default());
    assert_eq!(history.instructions(), count as u64, "a straight line's trace decodes");
    history
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) use super::straight_line_history as nops;

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
    fn deliveries_are_steps_of_their_own_that_searches_pass_over() {
        let threads = vec![
            RecordedThread { tid: 10, history: nops(0x1000, 5) },
            RecordedThread { tid: 20, history: nops(0x2000, 3) },
        ];
        // 10: 0,1 | 20: 0 | 10: (delivery) 2,3 (delivery, delivery) 4 | 20: 1,2
        // (delivery): thread 10's delivery after its end is left out;
        // thread 20's, which ran last, is the fatal signal's, the last step.
        let deliveries = vec![
            Delivery { thread: 0, index: 4, ip: 0xa4 },
            Delivery { thread: 0, index: 2, ip: 0xa2 },
            Delivery { thread: 0, index: 4, ip: 0xb4 },
            Delivery { thread: 0, index: 5, ip: 0xa5 },
            Delivery { thread: 1, index: 3, ip: 0xc3 },
        ];
        let t = Timeline::scheduled(threads, vec![(0, 0, 2), (1, 0, 1), (0, 2, 3), (1, 1, 2)], deliveries);
        assert_eq!((t.len(), t.instructions()), (12, 8));
        let fatal = t.at(11).unwrap();
        assert_eq!((fatal.tid, fatal.ip, fatal.delivery, fatal.index), (20, 0xc3, true, 3));
        assert_eq!(t.item_id(11), Some(t.threads()[1].history.items_len()));
        assert_eq!(t.at(12), None);
        let order: Vec<(u64, u64, bool)> = (0..11).map(|p| t.at(p).map(|i| (i.tid, i.ip, i.delivery)).unwrap()).collect();
        assert_eq!(
            order,
            [
                (10, 0x1000, false),
                (10, 0x1001, false),
                (20, 0x2000, false),
                (10, 0xa2, true),
                (10, 0x1002, false),
                (10, 0x1003, false),
                (10, 0xa4, true),
                (10, 0xb4, true),
                (10, 0x1004, false),
                (20, 0x2001, false),
                (20, 0x2002, false)
            ]
        );
        for p in 0..11 {
            let i = t.at(p).unwrap();
            if !i.delivery {
                assert_eq!(t.position_of(i.thread, i.index), Some(p));
            }
        }
        assert_eq!((t.delivery_before(0, 2, 0), t.delivery_before(0, 4, 0), t.delivery_before(0, 4, 7), t.delivery_before(0, 4, 8), t.delivery_before(0, 3, 0)), (Some(3), Some(6), Some(7), None, None));
        // A thread's neighbours include its deliveries; searches skip them.
        assert_eq!((t.previous_of_thread(4, 0), t.previous_of_thread(8, 0), t.next_of_thread(5, 0), t.next_pc_of_thread(3, 0)), (Some(3), Some(7), Some(6), Some(0xa2)));
        assert_eq!(t.search_back(11, |ip| ip == 0xa4 || ip == 0x1003), Some(5));
        assert_eq!(t.search_forward(2, |ip| ip == 0xa2 || ip == 0x1002), Some(4));
        assert_eq!(t.first_pc_from(&[0xa2], 3), None);
        let mut seen = 0;
        assert_eq!(t.search_back(11, |_| {
            seen += 1;
            false
        }), None);
        assert_eq!(seen, 8);
        assert_eq!(t.item_id(3), t.item_id(4));
    }

    #[test]
    fn slices_that_break_a_threads_order_are_dropped() {
        let threads = vec![RecordedThread { tid: 1, history: nops(0x1000, 3) }];
        let t = Timeline::interleaved(threads, vec![(0, 1, 2), (0, 0, 1), (0, 2, 1), (3, 0, 1), (0, 1, 5)]);
        assert_eq!(t.len(), 1);
        assert_eq!(t.at(0).unwrap().ip, 0x1000);
    }
}
