//! What the writer and the reader both keep to code differences.

use super::record::piece;

/// What both ends keep to code differences: per thread, the last `at` and
/// register values; the last address.
#[derive(Debug, Default, Clone)]
pub(super) struct DeltaState {
    pub(super) tid: u32,
    /// Every thread's, in the order first met (a few: looked up only when
    /// the stream changes threads).
    pub(super) threads: Vec<(u32, ThreadDeltas)>,
    /// The index of `tid`'s in `threads`, once it has one.
    pub(super) current: usize,
    pub(super) address: u64,
}

#[derive(Debug, Clone)]
pub(super) struct ThreadDeltas {
    pub(super) at: u64,
    pub(super) pieces: Box<[u64; piece::COUNT]>,
}

impl Default for ThreadDeltas {
    fn default() -> Self {
        ThreadDeltas { at: 0, pieces: Box::new([0; piece::COUNT]) }
    }
}

impl DeltaState {
    /// The index of `tid`'s differences (made if new).
    pub(super) fn index(&mut self) -> usize {
        if self.threads.get(self.current).is_none_or(|(tid, _)| *tid != self.tid) {
            let tid = self.tid;
            self.current = self.threads.iter().position(|(t, _)| *t == tid).unwrap_or_else(|| {
                self.threads.push((tid, ThreadDeltas::default()));
                self.threads.len() - 1
            });
        }
        self.current
    }

    pub(super) fn thread(&mut self) -> &mut ThreadDeltas {
        let index = self.index();
        &mut self.threads[index].1
    }
}
