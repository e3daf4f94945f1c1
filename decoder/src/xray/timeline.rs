//! Per-thread call timelines from XRay records: nested calls with their
//! times, arguments and the events they emitted.
//!
//! Matching, per thread, in file order (LLVM keeps it; the writer starts a
//! TSCWrap when the clock goes back):
//! * an exit of the function on top of the stack ends it;
//! * an exit of a function deeper in the stack also ends the calls above it
//!   ([`CallEnd::Unwound`]: their exits were not recorded — `llvm-xray
//!   account -d` deduces the same);
//! * an exit of a function not on the stack (it was entered before tracing
//!   started, e.g. before `__xray_patch`) makes that function a call with an
//!   unknown start, whose children are the calls traced so far at the top
//!   level (LLDB's untraced prefix);
//! * calls still open at the end of the trace are [`CallEnd::Unfinished`].
//!
//! A tail exit ends the call like an exit (the callee's records follow).

use std::collections::BTreeMap;

use super::{FunctionId, Log, Record, RecordKind, XrayError};

/// How a call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallEnd {
    /// Its exit record.
    Exit,
    /// Its tail-exit record (it jumped to another function).
    TailExit,
    /// A caller's exit ended it; its own exit is not in the trace.
    Unwound,
    /// Still running when the trace ends.
    Unfinished,
}

impl CallEnd {
    /// Short name.
    pub fn name(self) -> &'static str {
        match self {
            CallEnd::Exit => "exit",
            CallEnd::TailExit => "tail-exit",
            CallEnd::Unwound => "unwound",
            CallEnd::Unfinished => "unfinished",
        }
    }
}

/// One call of a function.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    /// The function.
    pub function: FunctionId,
    /// Index of its entry record in [`ThreadTimeline::records`]; `None` when
    /// it was entered before the trace.
    pub enter: Option<usize>,
    /// Index of the record that ended it (its exit, or the caller's exit
    /// that unwound it); `None` when unfinished.
    pub exit: Option<usize>,
    /// How it ended.
    pub end: CallEnd,
    /// TSC of its entry.
    pub start_tsc: Option<u64>,
    /// TSC of its end.
    pub end_tsc: Option<u64>,
    /// Arguments logged at its entry.
    pub args: Vec<u64>,
    /// Calls it made, as indices into [`ThreadTimeline::calls`].
    pub children: Vec<usize>,
    /// Events it emitted itself (indices into [`ThreadTimeline::records`]).
    pub events: Vec<usize>,
}

impl Call {
    /// Whether both ends are known (the calls `llvm-xray account -d`
    /// counts: with `-d` it also ends calls a caller's exit unwinds).
    pub fn is_complete(&self) -> bool {
        self.start_tsc.is_some() && self.end_tsc.is_some()
    }

    /// TSC ticks between its entry and its end.
    pub fn ticks(&self) -> Option<u64> {
        Some(self.end_tsc?.wrapping_sub(self.start_tsc?))
    }
}

/// One thread's records and calls.
#[derive(Debug, Clone)]
pub struct ThreadTimeline<'a> {
    /// Thread id.
    pub tid: u32,
    /// Process id, when the log has it.
    pub pid: Option<u32>,
    /// The thread's records in file order.
    pub records: Vec<Record<'a>>,
    /// Every call, in order of entry (untraced callers where their exit was).
    pub calls: Vec<Call>,
    /// Top-level calls in time order.
    pub roots: Vec<usize>,
    /// Events outside any call.
    pub events: Vec<usize>,
}

/// A log's timelines, thread by thread (in order of first appearance).
#[derive(Debug, Clone)]
pub struct Timeline<'a> {
    /// Per thread.
    pub threads: Vec<ThreadTimeline<'a>>,
    /// Problems the reader met, in file order.
    pub errors: Vec<XrayError>,
    /// TSC ticks per second (from the header).
    pub cycle_frequency: u64,
}

impl<'a> Timeline<'a> {
    /// Reads every record of `log` and builds each thread's calls.
    pub fn build(log: &Log<'a>) -> Timeline<'a> {
        let mut errors = Vec::new();
        let mut order = Vec::new();
        let mut by_thread: BTreeMap<(Option<u32>, u32), Vec<Record<'a>>> = BTreeMap::new();
        for item in log.records() {
            match item {
                Ok(record) => {
                    let key = (record.pid, record.tid);
                    let records = by_thread.entry(key).or_insert_with(|| {
                        order.push(key);
                        Vec::new()
                    });
                    records.push(record);
                }
                Err(error) => errors.push(error),
            }
        }
        let threads = order
            .into_iter()
            .map(|key| {
                // File order, as LLVM keeps it (a TSC may go back inside a
                // buffer: the writer then starts a TSCWrap; sorting records
                // would put exits before their entries).
                let records = by_thread.remove(&key).unwrap_or_default();
                ThreadTimeline::build(key.1, key.0, records)
            })
            .collect();
        Timeline { threads, errors, cycle_frequency: log.header.cycle_frequency }
    }

    /// TSC ticks in nanoseconds (`None` without a cycle frequency).
    pub fn nanos(&self, ticks: u64) -> Option<f64> {
        (self.cycle_frequency > 0).then(|| ticks as f64 * 1e9 / self.cycle_frequency as f64)
    }
}

impl<'a> ThreadTimeline<'a> {
    /// Matches one thread's records (in time order) into calls.
    pub fn build(tid: u32, pid: Option<u32>, records: Vec<Record<'a>>) -> ThreadTimeline<'a> {
        let mut thread = ThreadTimeline { tid, pid, records: Vec::new(), calls: Vec::new(), roots: Vec::new(), events: Vec::new() };
        let mut stack: Vec<usize> = Vec::new();
        for (index, record) in records.iter().enumerate() {
            match record.kind {
                RecordKind::Enter | RecordKind::EnterArg => {
                    let call = thread.calls.len();
                    thread.calls.push(Call {
                        function: record.function,
                        enter: Some(index),
                        exit: None,
                        end: CallEnd::Unfinished,
                        start_tsc: Some(record.tsc),
                        end_tsc: None,
                        args: record.args.clone(),
                        children: Vec::new(),
                        events: Vec::new(),
                    });
                    match stack.last() {
                        Some(&parent) => thread.calls[parent].children.push(call),
                        None => thread.roots.push(call),
                    }
                    stack.push(call);
                }
                RecordKind::Exit | RecordKind::TailExit => {
                    let end = if record.kind == RecordKind::Exit { CallEnd::Exit } else { CallEnd::TailExit };
                    let depth = stack.iter().rposition(|&call| thread.calls[call].function == record.function);
                    let depth = match depth {
                        Some(depth) => depth,
                        None => {
                            // Entered before the trace: it called everything
                            // traced so far at the top level.
                            let call = thread.calls.len();
                            let children = std::mem::take(&mut thread.roots);
                            thread.calls.push(Call {
                                function: record.function,
                                enter: None,
                                exit: None,
                                end: CallEnd::Unfinished,
                                start_tsc: None,
                                end_tsc: None,
                                args: Vec::new(),
                                children,
                                events: std::mem::take(&mut thread.events),
                            });
                            thread.roots.push(call);
                            stack.insert(0, call);
                            0
                        }
                    };
                    for &open in &stack[depth + 1..] {
                        let call = &mut thread.calls[open];
                        call.exit = Some(index);
                        call.end = CallEnd::Unwound;
                        call.end_tsc = Some(record.tsc);
                    }
                    let call = &mut thread.calls[stack[depth]];
                    call.exit = Some(index);
                    call.end = end;
                    call.end_tsc = Some(record.tsc);
                    stack.truncate(depth);
                }
                RecordKind::CustomEvent | RecordKind::TypedEvent => match stack.last() {
                    Some(&call) => thread.calls[call].events.push(index),
                    None => thread.events.push(index),
                },
            }
        }
        thread.records = records;
        thread
    }

    /// Per function: how many complete calls (both ends known) and their
    /// TSC ticks summed.
    pub fn complete_calls_by_function(&self) -> BTreeMap<FunctionId, (u64, u64)> {
        let mut counts = BTreeMap::new();
        for call in self.calls.iter().filter(|call| call.is_complete()) {
            let entry: &mut (u64, u64) = counts.entry(call.function).or_insert((0, 0));
            entry.0 += 1;
            entry.1 = entry.1.saturating_add(call.ticks().unwrap_or(0));
        }
        counts
    }
}
