//! A saved trace's history, as the replay engine asks it: the timeline's
//! steps, and with a full-state recording its registers, memory and
//! watched accesses.

use std::ops::Range;
use std::path::Path;

use super::{unchanging_bytes, ReadOnlyPages, SavedTrace};
use crate::arch::Regs;
use crate::inferior::frames::{flows_by_address, frame_history, Executed};
use crate::inferior::recorded_state::RecordedState;
use crate::inferior::replay::{History, HistoryStep, InstructionId, Position, ThreadId};
use crate::inferior::timeline::Timeline;
use crate::inferior::{HistoryListing, HistoryRequest, HistorySource, InferiorError};

/// A saved trace's history: its timeline, and its full state if it has one.
#[derive(Debug, Clone, Copy)]
pub(super) struct SavedHistory<'a> {
    /// What ran.
    pub(super) timeline: &'a Timeline,
    /// What it changed, for a recording with full state.
    pub(super) state: Option<&'a RecordedState>,
    /// The bundle's `trace.json`.
    pub(super) bundle: &'a Path,
    /// Bytes of Intel PT in the bundle.
    pub(super) trace_bytes: usize,
    /// What cannot have changed (the code a frame listing reads).
    pub(super) unchanging: &'a [ReadOnlyPages],
}

impl History for SavedHistory<'_> {
    fn len(&self) -> u64 {
        self.timeline.len()
    }

    /// Before the last step: after it no thread's PC is known.
    fn end(&self) -> Position {
        Position(self.timeline.end())
    }

    fn step(&self, at: Position) -> Option<HistoryStep> {
        self.timeline.at(at.0).map(|i| HistoryStep { thread: ThreadId(i.tid), pc: i.ip })
    }

    fn thread_at(&self, at: Position) -> ThreadId {
        ThreadId(self.timeline.thread_at(at.0))
    }

    fn previous_of_thread(&self, thread: ThreadId, before: Position) -> Option<Position> {
        self.timeline.previous_of_tid(thread.0, before.0).map(Position)
    }

    fn next_of_thread(&self, thread: ThreadId, from: Position) -> Option<Position> {
        self.timeline.next_of_tid(thread.0, from.0).map(Position)
    }

    fn last_pc_before(&self, addresses: &[u64], before: Position) -> Option<Position> {
        self.timeline.last_pc_before(addresses, before.0).map(Position)
    }

    fn first_pc_from(&self, addresses: &[u64], from: Position) -> Option<Position> {
        self.timeline.first_pc_from(addresses, from.0).map(Position)
    }

    fn last_write_before(&self, range: Range<u64>, before: Position) -> Option<Position> {
        self.state?.last_write_before(self.timeline, range, before.0).map(Position)
    }

    fn first_write_from(&self, range: Range<u64>, from: Position) -> Option<Position> {
        self.state?.first_write_from(self.timeline, range, from.0).map(Position)
    }

    fn last_read_before(&self, range: Range<u64>, before: Position) -> Option<Position> {
        self.state?.last_read_before(self.timeline, range, before.0).map(Position)
    }

    fn first_read_from(&self, range: Range<u64>, from: Position) -> Option<Position> {
        self.state?.first_read_from(self.timeline, range, from.0).map(Position)
    }

    fn wrote(&self, at: Position, range: &Range<u64>) -> bool {
        self.state.is_some_and(|state| state.wrote(self.timeline, at.0, range))
    }

    /// With full state, the recorded registers; else the PC alone.
    fn registers_at(&self, thread: ThreadId, at: Position) -> Option<Regs> {
        match self.state {
            Some(state) => state.registers_at(self.timeline, thread.0, at.0),
            None => self.timeline.pc_registers_at(thread.0, at.0),
        }
    }

    fn memory_at(&self, at: Position, address: u64, buf: &mut [u8]) -> usize {
        self.state.map_or(0, |state| state.memory_at(self.timeline, at.0, address, buf))
    }

    fn source(&self) -> HistorySource {
        HistorySource::SavedTrace { bundle: self.bundle.to_path_buf(), trace_bytes: self.trace_bytes, full_state: self.state.is_some() }
    }

    fn instructions(&self) -> u64 {
        self.timeline.instructions()
    }

    fn threads(&self) -> Vec<(ThreadId, u64)> {
        self.timeline.threads().iter().map(|t| (ThreadId(t.tid), t.history.instructions())).collect()
    }

    /// The item id of the step at `at` (the thread's standing there).
    fn instruction_id(&self, _thread: ThreadId, at: Position) -> InstructionId {
        InstructionId(self.timeline.item_id(at.0).unwrap_or(0))
    }

    fn position_of_instruction(&self, thread: ThreadId, id: InstructionId) -> Result<Position, InferiorError> {
        self.timeline.position_of_item(thread.0, id.0).map(Position)
    }

    /// A thread's instructions in a frame. (Signal handler entries are not
    /// marked: a trace shows them as plain branches; `within` only shortens
    /// the answer, and a saved trace lists every step.)
    fn frame_listing(&self, request: &HistoryRequest, at: Position) -> Result<HistoryListing, InferiorError> {
        let HistoryRequest { tid, before, max, stops, .. } = request;
        let timeline = self.timeline;
        let here = timeline.at(at.0).expect("the position is in the timeline");
        let tid = tid.unwrap_or(here.tid);
        let thread = timeline.thread_of(tid).ok_or_else(|| InferiorError::InvalidRequest(format!("no thread {tid} in the history")))?;
        let history = &timeline.threads()[thread].history;
        // The thread's instruction index to look back from.
        let index = match before {
            Some(item) => timeline.at(timeline.position_of_item(tid, *item)?).map_or(0, |i| i.index),
            None if here.thread == thread => here.index,
            None => timeline.next_of_thread(at.0, thread).and_then(|p| timeline.at(p)).map_or(history.instructions(), |i| i.index),
        };
        let id = history.cursor_at(index).map_or(history.items_len(), |c| c.item_id());
        let mut cursor = index.checked_sub(1).and_then(|last| history.cursor_at(last));
        let executed = std::iter::from_fn(|| {
            let at = cursor?;
            let step = Executed { id: at.item_id(), pc: at.ip(), interrupted: false };
            let mut previous = at;
            cursor = previous.prev().then_some(previous);
            Some(step)
        });
        Ok(HistoryListing { tid, id, steps: frame_history(executed, flows_by_address(|pc, code| unchanging_bytes(self.unchanging, pc, code).unwrap_or(0)), *max, stops) })
    }
}

impl<'a> SavedHistory<'a> {
    /// The history of a saved trace's parts (borrowed apart from its
    /// session, which moves through it).
    pub(super) fn of(timeline: &'a Timeline, state: &'a Option<RecordedState>, bundle: &'a Path, traces: &[(u64, std::sync::Arc<[u8]>)], unchanging: &'a [ReadOnlyPages]) -> Self {
        let trace_bytes = traces.iter().map(|(_, trace)| trace.len()).sum();
        SavedHistory { timeline, state: state.as_ref(), bundle, trace_bytes, unchanging }
    }
}

impl SavedTrace {
    /// The history replayed.
    pub(super) fn history(&self) -> SavedHistory<'_> {
        SavedHistory::of(&self.timeline, &self.state, &self.bundle, &self.traces, &self.unchanging)
    }
}
