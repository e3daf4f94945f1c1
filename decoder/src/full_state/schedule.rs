//! What a stream says of the order things ran in: the threads' runs and
//! the signals delivered.

use std::collections::HashMap;

use super::reader::{state_records, StateError};
use super::record::StateRecord;

/// A signal's delivery, from a stream's [`StateRecord::SignalDelivered`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Delivery {
    /// The thread it was delivered to.
    pub tid: u32,
    /// Its steps completed then: the delivery comes before its step `at`
    /// (the handler's first instruction).
    pub at: u64,
    /// The signal's number.
    pub signal: u32,
    /// Where the thread was interrupted.
    pub ip: u64,
}

/// What a stream says of the order things happened in, besides state.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Schedule {
    /// The one order the threads ran in: each run of one thread as (tid,
    /// its first step, how many steps; `None`: to its end).
    pub runs: Vec<(u32, u64, Option<u64>)>,
    /// The signals delivered, in the order they were.
    pub deliveries: Vec<Delivery>,
}

/// The one order the threads ran in, from a stream's
/// [`StateRecord::Scheduled`] records, and where signals were delivered.
pub fn schedule(stream: &[u8]) -> Result<Schedule, StateError> {
    schedule_of(state_records(stream))
}

/// [`schedule`] of records read as the caller reads them (for one that
/// watches the reading's offset).
pub fn schedule_of<'a>(records: impl Iterator<Item = Result<(u32, StateRecord<'a>), StateError>>) -> Result<Schedule, StateError> {
    let mut schedule = Schedule::default();
    let runs = &mut schedule.runs;
    // Per thread, its latest run (its count is known once it runs again).
    let mut latest: HashMap<u32, usize> = HashMap::new();
    for item in records {
        match item? {
            (tid, StateRecord::Scheduled { at }) => {
                if let Some(&index) = latest.get(&tid) {
                    let run = &mut runs[index];
                    run.2 = Some(at.saturating_sub(run.1));
                }
                latest.insert(tid, runs.len());
                runs.push((tid, at, None));
            }
            (tid, StateRecord::SignalDelivered { at, signal, ip }) => schedule.deliveries.push(Delivery { tid, at, signal, ip }),
            _ => {}
        }
    }
    Ok(schedule)
}
