//! A thread's steps in the state log: where they stand in the one order,
//! its register checkpoints, its call depths and frame summaries.

use crate::arch::Regs;

use super::CHUNK;

/// A thread's steps per [`FrameBlock`].
pub(super) const FRAME_BLOCK: usize = 4096;

/// What [`FRAME_BLOCK`] consecutive steps of a thread ran at: their
/// lowest and highest call depth and address, so that a walk back through
/// the history can pass over a whole block of a callee, or of a run of one
/// source line, at once.
#[derive(Debug, Clone, Copy)]
pub(super) struct FrameBlock {
    pub(super) min_depth: i32,
    pub(super) max_depth: i32,
    pub(super) min_pc: u64,
    pub(super) max_pc: u64,
}

/// How often (in a thread's own steps) its registers are copied whole.
pub const CHECKPOINT_EVERY: usize = 1024;

/// A thread's steps and register checkpoints.
#[derive(Debug, Default)]
pub(super) struct ThreadSteps {
    /// Runs of its steps at consecutive positions: (index of the run's
    /// first step among the thread's, its position), ascending.
    pub(super) runs: Vec<(u64, u64)>,
    /// How many steps it ran.
    pub(super) count: usize,
    /// (index of a step, registers before that step).
    pub(super) checkpoints: Vec<(usize, Regs)>,
    /// Registers after its last step.
    pub(super) last: Option<Regs>,
    /// Indices of its steps that are a signal handler's first instruction.
    pub(super) handler_entries: Vec<usize>,
    /// Its next step is a signal handler's first instruction.
    pub(super) entering_handler: bool,
    /// Indices of its steps that are signal deliveries, not instructions.
    pub(super) deliveries: Vec<usize>,
    /// The call depth of its steps number `CHUNK * k` (its first step's is
    /// 0): one more after a `call` and at a signal handler's first
    /// instruction, one less after a `ret`.
    pub(super) depth_marks: Vec<i32>,
    /// Each step's depth less its chunk's mark (at most 2 a step).
    pub(super) depth_offsets: Vec<i8>,
    /// The depth of its next step.
    pub(super) depth_next: i32,
    /// Summaries of its steps, [`FRAME_BLOCK`] at a time.
    pub(super) blocks: Vec<FrameBlock>,
}

impl ThreadSteps {
    /// The position of its step `index`.
    pub(super) fn position(&self, index: usize) -> u64 {
        let run = self.runs.partition_point(|&(first, _)| first as usize <= index) - 1;
        let (first, at) = self.runs[run];
        at + (index as u64 - first)
    }

    /// How many of its steps come before `position`.
    pub(super) fn done_before(&self, position: u64) -> usize {
        let run = self.runs.partition_point(|&(_, at)| at < position);
        let Some(&(first, at)) = run.checked_sub(1).map(|r| &self.runs[r]) else { return 0 };
        let end = self.runs.get(run).map_or(self.count as u64, |r| r.0);
        (first + (position - at)).min(end) as usize
    }

    /// Whether its step `index` is a signal delivery.
    pub(super) fn is_delivery(&self, index: usize) -> bool {
        self.deliveries.binary_search(&index).is_ok()
    }

    /// The instruction number (id) of its step `index`, or of the
    /// instruction after it for a delivery: deliveries are not counted.
    pub(super) fn id_of(&self, index: usize) -> u64 {
        (index - self.deliveries.partition_point(|&d| d < index)) as u64
    }

    /// The index of its step that is instruction number `id` (past its
    /// last: at least its count).
    pub(super) fn index_of(&self, id: u64) -> Option<usize> {
        let mut index = usize::try_from(id).ok()?;
        for &delivery in &self.deliveries {
            if delivery > index {
                break;
            }
            index = index.checked_add(1)?;
        }
        Some(index)
    }

    /// The call depth of its step `index`.
    pub(super) fn depth(&self, index: usize) -> i32 {
        self.depth_marks[index / CHUNK] + i32::from(self.depth_offsets[index])
    }
}
