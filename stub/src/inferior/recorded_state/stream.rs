//! The full-state stream as the replay reads it: the bundle's file mapped
//! (read from disk as queries need it, its pages given back once a pass
//! has read through them, so that a recording of any length replays in
//! bounded memory), and when each record takes effect on the timeline.

use std::collections::HashMap;
use std::ops::Range;
use std::path::Path;

use retrace_decoder::full_state::{state_records, StateError, StateRecord, StateRecords};

use crate::inferior::timeline::Timeline;

/// The stream's bytes.
#[derive(Debug)]
pub enum StreamBytes {
    /// The file, mapped.
    Mapped(memmap2::Mmap),
    /// Bytes in memory (a stream built in a test).
    Owned(Vec<u8>),
}

impl StreamBytes {
    /// Maps the file at `path`.
    pub fn open(path: &Path) -> std::io::Result<Self> {
        let file = std::fs::File::open(path)?;
        if file.metadata()?.len() == 0 {
            return Ok(StreamBytes::Owned(Vec::new()));
        }
        // SAFETY: the mapping is read-only and private; a bundle is not
        // written while it is replayed (the recorder wrote it and exited).
        let map = unsafe { memmap2::Mmap::map(&file)? };
        Ok(StreamBytes::Mapped(map))
    }

    /// The bytes.
    pub fn bytes(&self) -> &[u8] {
        match self {
            StreamBytes::Mapped(map) => map,
            StreamBytes::Owned(bytes) => bytes,
        }
    }

    /// Gives back the memory holding `range` (whole pages inside it): read
    /// again from the file if asked for again.
    pub fn release(&self, range: Range<usize>) {
        let StreamBytes::Mapped(map) = self else { return };
        let page = 4096;
        let start = range.start.div_ceil(page) * page;
        let end = range.end.min(map.len()) / page * page;
        if start < end {
            // SAFETY: the mapping is a read-only private file mapping: the
            // dropped pages hold nothing but the file's bytes, which the
            // kernel reads again on the next access. No reference into
            // them outlives this (callers release what they read through).
            let _ = unsafe { map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, start, end - start) };
        }
    }
}

/// Bytes a pass reads before it gives back what it read.
pub const RELEASE_EVERY: usize = 64 << 20;

/// A pass over the records that gives back the stream's memory behind it
/// as it goes.
pub struct Releasing<'a> {
    stream: &'a StreamBytes,
    /// The reading.
    pub records: StateRecords<'a>,
    released: usize,
}

impl std::fmt::Debug for Releasing<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Releasing").field("released", &self.released).finish_non_exhaustive()
    }
}

impl<'a> Releasing<'a> {
    /// Reads `stream` from its start.
    pub fn new(stream: &'a StreamBytes) -> Self {
        let records = state_records(stream.bytes());
        let released = records.offset();
        Releasing { stream, records, released }
    }
}

impl<'a> Iterator for Releasing<'a> {
    type Item = Result<(u32, StateRecord<'a>), StateError>;

    fn next(&mut self) -> Option<Self::Item> {
        let item = self.records.next();
        let at = self.records.offset();
        if item.is_none() || at - self.released >= RELEASE_EVERY {
            self.stream.release(self.released..at);
            self.released = at;
        }
        item
    }
}

/// When records take effect: the position of the timeline whose state
/// first holds them. An instruction's own record (registers, a store, a
/// load: its step `at - 1`) takes effect right after that step; any other
/// (what the kernel wrote, a thread's registers set, a mapping) where the
/// stream stands then: after the latest step whose records came before it.
/// A signal's delivery is a step of the timeline: the records after its
/// mark take effect after that step. So positions never go down along the
/// stream, and the state at a position is every record up to the first
/// that takes effect after it.
#[derive(Debug, Clone)]
pub struct Clock<'t> {
    timeline: &'t Timeline,
    threads: &'t HashMap<u32, usize>,
    now: u64,
    /// The thread looked up last and its index (records come in runs of
    /// one thread's).
    last: Option<(u32, Option<usize>)>,
}

impl<'t> Clock<'t> {
    /// A clock standing at `now`; `threads` maps thread ids to the
    /// timeline's thread indices.
    pub fn new(timeline: &'t Timeline, threads: &'t HashMap<u32, usize>, now: u64) -> Self {
        Clock { timeline, threads, now, last: None }
    }

    /// Thread `tid`'s index in the timeline.
    fn thread(&mut self, tid: u32) -> Option<usize> {
        match self.last {
            Some((last, index)) if last == tid => index,
            _ => {
                let index = self.threads.get(&tid).copied();
                self.last = Some((tid, index));
                index
            }
        }
    }

    /// Where the stream stands.
    pub fn now(&self) -> u64 {
        self.now
    }

    /// The position thread `tid`'s `record` takes effect at.
    pub fn effect(&mut self, tid: u32, record: &StateRecord<'_>) -> u64 {
        let step = match record {
            StateRecord::Registers { at, by_instruction: true, .. } | StateRecord::Wrote { at, by_instruction: true, .. } | StateRecord::Read { at, .. } => at.checked_sub(1),
            _ => None,
        };
        if let Some(position) = step.and_then(|s| self.timeline.position_of(self.thread(tid)?, s)) {
            self.now = self.now.max(position + 1);
        }
        // A delivery is a step of its own: what the thread's records say
        // after it (the frame, the handler's registers) is after it.
        if let StateRecord::SignalDelivered { at, .. } = *record {
            if let Some(position) = self.thread(tid).and_then(|thread| self.timeline.delivery_before(thread, at, self.now)) {
                self.now = self.now.max(position + 1);
            }
        }
        self.now
    }
}
