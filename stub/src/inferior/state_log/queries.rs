//! What the state log answers about the past: registers and memory at a
//! position, the steps that wrote or read a range or ran at an address, a
//! thread's neighbouring steps and its frame history.

use std::ops::Range;

use crate::arch::Regs;
use crate::inferior::frames::{Executed, Flow, FrameStep};

use super::records::{register_value, set_register_value, RegisterChange};
use super::steps::{ThreadSteps, FRAME_BLOCK};
use super::words::{any_within, first_in_words, last_in_words};
use super::id_filter::SPAN;
use super::{StateLog, CHUNK, PAGE, SMALL_WRITE};

impl StateLog {
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
    pub(super) fn mappings_at(&self, position: u64) -> &[Range<u64>] {
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

    /// The latest step before `before` whose instruction read a byte of `range`.
    pub fn last_read_before(&self, range: Range<u64>, before: u64) -> Option<u64> {
        last_in_words(&self.read_words, &range, before)
    }

    /// The first step at or after `from` whose instruction read a byte of `range`.
    pub fn first_read_from(&self, range: Range<u64>, from: u64) -> Option<u64> {
        first_in_words(&self.read_words, &range, from)
    }

    /// Whether step `step`'s long writes (bulk-indexed) cover a byte of `range`.
    pub(super) fn bulk_write_touches(&self, step: u64, range: &Range<u64>) -> bool {
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

    /// The ids of the instructions at `addresses`, sorted (a delivery is
    /// none: no breakpoint stops there, as natively it fires when the
    /// interrupted instruction runs, after the handler).
    pub(super) fn ids_at(&self, addresses: &[u64]) -> Vec<u32> {
        let kinds = [Flow::Call, Flow::Return, Flow::Other];
        let mut ids: Vec<u32> = addresses.iter().flat_map(|&a| kinds.iter().filter_map(move |&k| self.code_index.get(&(a, k)).copied())).collect();
        ids.sort_unstable();
        ids
    }

    /// The latest step before `before` whose address is one of
    /// `addresses` (sorted), passing over whole spans whose instructions
    /// surely were none of them and whole chunks that ran nowhere near
    /// them.
    pub fn last_pc_before(&self, addresses: &[u64], before: u64) -> Option<u64> {
        let ids = self.ids_at(addresses);
        let mut end = before.min(self.len()) as usize;
        while end > 0 && !ids.is_empty() {
            let span = (end - 1) / SPAN;
            if !self.span_ids[span].may_hold_any(&ids) {
                end = span * SPAN;
                continue;
            }
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
    /// `addresses` (sorted), passing over spans and chunks as
    /// [`StateLog::last_pc_before`] does.
    pub fn first_pc_from(&self, addresses: &[u64], from: u64) -> Option<u64> {
        let ids = self.ids_at(addresses);
        let mut start = from as usize;
        while start < self.instructions.len() && !ids.is_empty() {
            let span = start / SPAN;
            if !self.span_ids[span].may_hold_any(&ids) {
                start = (span + 1) * SPAN;
                continue;
            }
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

    /// Thread `tid`'s instructions before its instruction number `before`,
    /// newest first, as [`crate::inferior::frames::frame_history`] reads
    /// them (deliveries left out: the instruction a signal interrupted is
    /// the one before its handler's first).
    pub fn executed_before(&self, tid: u64, before: u64) -> impl Iterator<Item = Executed> + '_ {
        let thread = self.threads.get(&tid);
        let count = thread.map_or(0, |t| t.count);
        let before = thread.and_then(|t| t.index_of(before)).unwrap_or(usize::MAX).min(count);
        (0..before).rev().filter_map(move |index| {
            let thread = thread.expect("a thread with steps");
            if thread.is_delivery(index) {
                return None;
            }
            let mut next = index + 1;
            while thread.is_delivery(next) {
                next += 1;
            }
            Some(Executed { id: thread.id_of(index), pc: self.pc(thread.position(index)), interrupted: thread.handler_entries.binary_search(&next).is_ok() })
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
        let before = thread.index_of(before).unwrap_or(usize::MAX).min(thread.count);
        self.frame_history_from(thread, before, max, within, stops)
    }

    /// [`Self::frame_history`] seen from where thread `tid` stands at
    /// `position` (at a signal's delivery: the interrupted frame, which
    /// its instruction number, the handler's first instruction's, does
    /// not tell apart).
    pub fn frame_history_at(&self, tid: u64, position: u64, max: usize, within: &[Range<u64>], stops: &[u64]) -> Vec<FrameStep> {
        let Some(thread) = self.threads.get(&tid) else { return Vec::new() };
        self.frame_history_from(thread, thread.done_before(position), max, within, stops)
    }

    /// The frame history from before `thread`'s step `before` (an index
    /// of its steps, deliveries included; its count: the present).
    fn frame_history_from(&self, thread: &ThreadSteps, before: usize, max: usize, within: &[Range<u64>], stops: &[u64]) -> Vec<FrameStep> {
        let count = thread.count;
        let frame = if before == count { thread.depth_next } else { thread.depth(before) };
        let pc = |i: usize| self.pc(thread.position(i));
        let inside = |pc: u64| within.iter().any(|r| r.contains(&pc));
        let step = |i: usize| FrameStep { id: thread.id_of(i), pc: pc(i), depth: thread.depth(i) - frame, stop: None };
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
            if thread.is_delivery(i) {
                // Not an instruction: the one it interrupted is listed.
                continue;
            }
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
    pub(super) fn last_stop_of_thread(&self, thread: &ThreadSteps, steps: Range<usize>, stops: &[u64]) -> Option<(u64, u64)> {
        if stops.is_empty() || steps.is_empty() {
            return None;
        }
        let first = thread.position(steps.start);
        let mut before = thread.position(steps.end - 1) + 1;
        while let Some(position) = self.last_pc_before(stops, before).filter(|&p| p >= first) {
            let index = thread.done_before(position);
            if index < thread.count && thread.position(index) == position {
                return Some((thread.id_of(index), self.pc(position)));
            }
            before = position;
        }
        None
    }

    /// One past the latest of `thread`'s steps before `i` that ran at
    /// depth `frame` or shallower (0 if none).
    pub(super) fn after_step_at_depth(&self, thread: &ThreadSteps, mut i: usize, frame: i32) -> usize {
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
}
