//! `retrace dump function-calls`: each thread's function-call trees, in the
//! layout of LLDB 22's `thread trace dump function-calls` (text, or its JSON
//! with `--json` / `--pretty-json`).

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use retrace_decoder::calls::{CallEffect, CallEvent, CallTracker, Segment, Site};
use retrace_decoder::history::{AddressHasher, BlockTable, Extra, History, Step};
use std::hash::BuildHasherDefault;
use serde_json::ser::{CompactFormatter, PrettyFormatter};
use retrace_decoder::image::Memory;
use retrace_decoder::leb128;
use retrace_decoder::symbols::{SymbolContext, Symbolizer};
use retrace_decoder::x86::{call_effect, ExecMode};

use crate::cli::error::CliError;

mod json;
mod text;

use json::write_json;
pub(super) use text::call_name;
use text::print_text;
use crate::bundle::{self, LoadedBundle, LoadedThread};

/// How to print.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// LLDB's text.
    Text,
    /// LLDB's `-j`.
    Json,
    /// LLDB's `-J` (two-space indent).
    PrettyJson,
}

/// What identifies a function for the call trees: module, symbol start,
/// innermost inlined block.
type Scope = (Option<Arc<str>>, Option<u64>, Option<u64>);

/// Prints the call trees of every thread (or of `tid`).
pub fn run(trace_json: &Path, tid: Option<u64>, format: Format, options: bundle::OpenOptions) -> Result<ExitCode, CliError> {
    let decoded = bundle::DecodedBundle::open(trace_json, options, false).map_err(|e| CliError::Message(e.to_string()))?;
    let threads = super::dump::threads_with_tid(&decoded.loaded, tid, trace_json)?;
    let mut out = crate::cli::output::bulk_stdout();
    write_function_calls(&decoded, threads.as_deref(), format, &mut out)?;
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

/// Writes the call trees of `threads` (positions in the bundle's thread
/// list; `None`: every thread) to `out`.
pub fn write_function_calls(decoded: &bundle::DecodedBundle, threads: Option<&[usize]>, format: Format, out: &mut crate::cli::output::BulkOutput) -> Result<(), CliError> {
    let loaded = &decoded.loaded;
    for (position, thread) in loaded.threads.iter().enumerate() {
        if threads.is_some_and(|threads| !threads.contains(&position)) {
            continue;
        }
        let started = std::time::Instant::now();
        let history = decoded.history(position);
        tracing::debug!(tid = thread.tid, elapsed = ?started.elapsed(), "function-calls: decoded");
        let mut sites = BlockSites::new(loaded, thread);
        // One walk over the history records the call events compactly and
        // learns how each tree's roots chain (a return above the root wraps
        // the tree printed so far, so its depth is only known at the tree's
        // end); the printing reads the record.
        let (mut log, chains) = log_calls(&history, &mut sites)?;
        drop(history);
        log.finish()?;
        tracing::debug!(elapsed = ?started.elapsed(), trees = chains.chains.len(), "function-calls: walked");
        match format {
            Format::Text => {
                if let Some(heading) = super::dump::image_heading(loaded, thread) {
                    writeln!(out, "{heading}")?;
                }
                writeln!(out, "thread #{}: tid = {}", loaded.thread_index(thread), thread.tid)?;
                let placements = loaded.symbols_of(thread).placements();
                print_text(&mut |part| out.append(part), &log, &chains.chains, &placements, &sites.contexts, crate::bundle::cores())?;
            }
            Format::Json | Format::PrettyJson => {
                // One array per thread, as LLDB prints for each thread.
                let result = match format {
                    Format::Json => write_json(&mut *out, CompactFormatter, &log, &chains.chains),
                    _ => write_json(&mut *out, PrettyFormatter::new(), &log, &chains.chains),
                };
                result?;
                writeln!(out)?;
            }
        }
    }
    Ok(())
}
/// Walks a history a block at a time through a [`CallTracker`], giving
/// each [`CallEvent`] (with the symbol contexts the segments' tags refer
/// to) to `sink`; stops at the sink's first error.
pub(super) fn track_calls(
    history: &History,
    sites: &mut BlockSites,
    sink: &mut impl FnMut(CallEvent, &ContextTable) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let mut tracker = CallTracker::new();
    let mut failure = None;
    for_each_work(history, sites, &mut |work, contexts| {
        work.give_to(&mut tracker, &mut |e| relay(sink, e, contexts, &mut failure));
        failure.is_none()
    });
    if failure.is_none() {
        tracker.finish(&mut |e| relay(sink, e, &sites.contexts, &mut failure));
    }
    failure.map_or(Ok(()), Err)
}

/// What a [`CallTracker`] is given: a straight run of one function's
/// instructions, or an error item.
enum Work {
    Run { first: u64, first_ip: u64, first_site: Site<u32>, last: u64, last_ip: u64, last_site: Site<u32> },
    Error(u64),
}

impl Work {
    fn give_to(self, tracker: &mut CallTracker<u32>, sink: &mut impl FnMut(CallEvent)) {
        match self {
            Work::Run { first, first_ip, first_site, last, last_ip, last_site } => tracker.run(first, first_ip, first_site, last, last_ip, last_site, sink),
            Work::Error(id) => tracker.error(id, sink),
        }
    }
}

/// The history's executed blocks described as [`Work`], in order, each
/// given to `f` with the symbol contexts so far, until `f` says stop. A
/// run going on in the scope of the run before it (not entering anything)
/// only moves that run's end, for the tracker: it is merged into it.
fn for_each_work(history: &History, sites: &mut BlockSites, f: &mut impl FnMut(Work, &ContextTable) -> bool) {
    let mut pending: Option<Work> = None;
    // LLDB keeps the previous instruction's symbol context while the
    // address stays in its range; errors do not reset it.
    let mut last_tag = None;
    for step in history.steps() {
        match step {
            Step::Extra { id, extra: Extra::Error { .. } } => {
                if pending.take().is_some_and(|run| !f(run, &sites.contexts)) || !f(Work::Error(id), &sites.contexts) {
                    return;
                }
            }
            Step::Extra { .. } => {}
            Step::Block { id, block } => {
                let runs = sites.runs(&history.table, block, last_tag);
                for k in runs.clone() {
                    let run = sites.arena[k];
                    let (first, last) = (id + run.offset as u64, id + run.last_offset as u64);
                    if let Some(Work::Run { last: before, last_ip, last_site, .. }) = &mut pending {
                        if !run.first.entry && run.first.scope == last_site.scope {
                            (*before, *last_ip, *last_site) = (last, run.last_ip, run.last);
                            continue;
                        }
                    }
                    let next = Work::Run { first, first_ip: run.first_ip, first_site: run.first, last, last_ip: run.last_ip, last_site: run.last };
                    if pending.replace(next).is_some_and(|run| !f(run, &sites.contexts)) {
                        return;
                    }
                }
                if !runs.is_empty() {
                    last_tag = Some(sites.arena[runs.end - 1].last.tag);
                }
            }
        }
    }
    if let Some(run) = pending {
        f(run, &sites.contexts);
    }
}

/// [`track_calls`] into a [`CallLog`], learning how each tree's roots
/// chain on the way, on two cores: this thread describes the executed
/// blocks (symbols), another follows the calls.
fn log_calls(history: &History, sites: &mut BlockSites) -> std::io::Result<(CallLog, ChainsSink)> {
    const BATCH: usize = 8192;
    let (to_tracker, work) = std::sync::mpsc::sync_channel::<Vec<Work>>(4);
    let (give_back, returned) = std::sync::mpsc::channel::<Vec<Work>>();
    std::thread::scope(|scope| {
        let tracker = scope.spawn(move || {
            let mut tracker = CallTracker::new();
            let (mut log, mut chains) = (CallLog::default(), ChainsSink::default());
            let failure = std::cell::Cell::new(None);
            let mut sink = |event: CallEvent| {
                chains.event(&event);
                if let Err(e) = log.push(&event) {
                    failure.set(Some(e));
                }
            };
            for mut batch in work.iter() {
                for item in batch.drain(..) {
                    item.give_to(&mut tracker, &mut sink);
                }
                let _ = give_back.send(batch);
                if let Some(e) = failure.take() {
                    return Err(e);
                }
            }
            tracker.finish(&mut sink);
            drop(sink);
            failure.take().map_or(Ok((log, chains)), Err)
        });
        let mut batch = Vec::with_capacity(BATCH);
        for_each_work(history, sites, &mut |work, _| {
            batch.push(work);
            if batch.len() < BATCH {
                return true;
            }
            let next = returned.try_recv().unwrap_or_else(|_| Vec::with_capacity(BATCH));
            to_tracker.send(std::mem::replace(&mut batch, next)).is_ok()
        });
        let _ = to_tracker.send(batch);
        drop(to_tracker);
        tracker.join().expect("the call tracker does not panic")
    })
}

fn relay(
    sink: &mut impl FnMut(CallEvent, &ContextTable) -> std::io::Result<()>,
    event: CallEvent,
    contexts: &ContextTable,
    failure: &mut Option<std::io::Error>,
) {
    if failure.is_none() {
        *failure = sink(event, contexts).err();
    }
}

/// A straight run of a block's instructions in one function (see
/// [`CallTracker::run`]).
#[derive(Debug, Clone, Copy)]
pub(super) struct Run {
    /// Index in the block of its first and last instructions.
    offset: u32,
    last_offset: u32,
    first_ip: u64,
    last_ip: u64,
    first: Site<u32>,
    last: Site<u32>,
}

/// Describes executed blocks as runs of [`Site`]s, each block once (twice
/// where LLDB's kept context makes its first instruction's context depend
/// on the instruction before). The runs live in one arena; a block's
/// description is a range of it.
pub(super) struct BlockSites<'a> {
    symbols: &'a Symbolizer,
    image: &'a retrace_decoder::image::Image,
    pub(super) contexts: ContextTable,
    /// Each context's address range (what LLDB keeps it for), by tag.
    ranges: Vec<(u64, u64)>,
    /// Interned scopes, and each context's (by tag; `u32::MAX`: not yet).
    scopes: HashMap<Scope, u32>,
    scope_of_tag: Vec<u32>,
    arena: Vec<Run>,
    /// Per block id: its description when its first context is looked up
    /// afresh (most blocks are only ever described so).
    fresh: Vec<Fresh>,
    /// Per (block id, kept context): its runs when the previous
    /// instruction's context holds its first address.
    kept: HashMap<(u32, u32), u64, BuildHasherDefault<AddressHasher>>,
}

impl<'a> BlockSites<'a> {
    pub(super) fn new(loaded: &'a LoadedBundle, thread: &LoadedThread) -> Self {
        BlockSites {
            symbols: loaded.symbols_of(thread),
            image: loaded.image_of(thread),
            contexts: ContextTable::default(),
            ranges: Vec::new(),
            scopes: HashMap::new(),
            scope_of_tag: Vec::new(),
            arena: Vec::new(),
            fresh: Vec::new(),
            kept: HashMap::default(),
        }
    }

    fn holds(&self, tag: u32, ip: u64) -> bool {
        let (start, end) = self.ranges[tag as usize];
        start <= ip && ip < end
    }

    fn range(packed: u64) -> std::ops::Range<usize> {
        let start = (packed >> 16) as usize;
        start..start + (packed & 0xffff) as usize
    }

    /// The arena range of block `block`'s runs after an instruction whose
    /// context was `previous`.
    fn runs(&mut self, table: &BlockTable, block: u32, previous: Option<u32>) -> std::ops::Range<usize> {
        // The hot path (once per executed block, twice per dump): a block
        // described afresh, entered with no context kept or with the one
        // its first address looks up anyway, which describes it the same.
        if let Some(fresh) = self.fresh.get(block as usize).filter(|f| f.start != 0) {
            match previous.filter(|&tag| self.holds(tag, fresh.start)) {
                None if fresh.runs != 0 => return Self::range(fresh.runs),
                Some(tag) if tag == fresh.first_tag && fresh.runs != 0 => return Self::range(fresh.runs),
                Some(tag) if tag == fresh.kept_tag && fresh.kept_runs != 0 => return Self::range(fresh.kept_runs),
                _ => {}
            }
        }
        let start = table.get(block).start;
        let kept = previous.filter(|&tag| self.holds(tag, start));
        if let Some(tag) = kept {
            if let Some(&runs) = self.kept.get(&(block, tag)) {
                self.remember_kept(block, start, tag, runs);
                return Self::range(runs);
            }
        }
        let count = table.get(block).count;
        let first_run = self.arena.len();
        let mut previous = kept;
        for (k, ip) in table.addresses(block).enumerate() {
            let tag = match previous.filter(|&tag| self.holds(tag, ip)) {
                Some(tag) => tag,
                None => self.intern(ip),
            };
            previous = Some(tag);
            // Only a block's last instruction transfers control.
            let effect = if k as u32 + 1 == count {
                let mut bytes = [0u8; 15];
                let n = self.image.read(ip, &mut bytes);
                call_effect(&bytes[..n], ip, ExecMode::Bits64)
            } else {
                CallEffect::Other
            };
            let site = self.site(tag, ip, effect);
            let k = k as u32;
            let in_block = self.arena.len() > first_run;
            match self.arena.last_mut().filter(|_| in_block) {
                Some(run) if !site.entry && run.last.scope == site.scope => {
                    run.last = site;
                    run.last_offset = k;
                    run.last_ip = ip;
                }
                _ => self.arena.push(Run { offset: k, last_offset: k, first_ip: ip, last_ip: ip, first: site, last: site }),
            }
        }
        let runs = self.arena.len() - first_run;
        assert!(runs < 1 << 16, "a block of {count} instructions");
        let packed = (first_run as u64) << 16 | runs as u64;
        match kept {
            None => {
                if self.fresh.len() <= block as usize {
                    self.fresh.resize(block as usize + 1, Fresh::default());
                }
                let (kept_tag, kept_runs) = (self.fresh[block as usize].kept_tag, self.fresh[block as usize].kept_runs);
                self.fresh[block as usize] = Fresh { start, runs: packed, first_tag: self.arena[first_run].first.tag, kept_tag, kept_runs };
            }
            Some(tag) => {
                self.kept.insert((block, tag), packed);
                self.remember_kept(block, start, tag, packed);
            }
        }
        Self::range(packed)
    }

    /// Keeps `runs` as block `block`'s description after context `tag`
    /// in its slot, which the next visit checks before the map.
    fn remember_kept(&mut self, block: u32, start: u64, tag: u32, runs: u64) {
        if self.fresh.len() <= block as usize {
            self.fresh.resize(block as usize + 1, Fresh::default());
        }
        let slot = &mut self.fresh[block as usize];
        (slot.start, slot.kept_tag, slot.kept_runs) = (start, tag, runs);
    }

    /// The tag of the context LLDB looks up at `ip`.
    fn intern(&mut self, ip: u64) -> u32 {
        let tag = self.contexts.intern(self.symbols.lookup(ip));
        if self.ranges.len() <= tag as usize {
            self.ranges.push(self.contexts.get(tag).address_range.unwrap_or((1, 0)));
        }
        tag
    }

    fn site(&mut self, tag: u32, ip: u64, effect: CallEffect) -> Site<u32> {
        let here = self.contexts.get(tag);
        // The first instruction of the innermost inlined block, or of the
        // function when there is none, enters it.
        let entry = match here.inlined_block {
            Some(block) => block.entry == ip,
            None => here.function.as_ref().is_some_and(|(_, start)| *start == ip),
        };
        let inlined = here.inlined_block.is_some();
        let scope = match self.scope_of_tag.get(tag as usize) {
            Some(&scope) if scope != u32::MAX => scope,
            _ => {
                let scope: Scope = (here.module.clone(), here.function.as_ref().map(|f| f.1), here.inlined_block.map(|b| b.id));
                let next = self.scopes.len() as u32;
                let scope = *self.scopes.entry(scope).or_insert(next);
                if self.scope_of_tag.len() <= tag as usize {
                    self.scope_of_tag.resize(tag as usize + 1, u32::MAX);
                }
                self.scope_of_tag[tag as usize] = scope;
                scope
            }
        };
        Site { scope, entry, inlined, effect, tag }
    }
}

/// A block's descriptions: when its first context is looked up afresh,
/// and the last one used after a kept context.
#[derive(Debug, Clone, Copy, Default)]
struct Fresh {
    /// Its first address (0: neither description made yet).
    start: u64,
    /// Its runs: start in the arena << 16 | count (0: not described yet).
    runs: u64,
    /// The context of its first instruction.
    first_tag: u32,
    /// The kept context its last kept description followed, and that
    /// description (0: none yet).
    kept_tag: u32,
    kept_runs: u64,
}

/// Symbol contexts, each stored once.
#[derive(Default)]
pub(super) struct ContextTable {
    contexts: Vec<SymbolContext>,
    index: foldhash::HashMap<SymbolContext, u32>,
}

impl ContextTable {
    fn intern(&mut self, context: SymbolContext) -> u32 {
        if let Some(&tag) = self.index.get(&context) {
            return tag;
        }
        let tag = self.contexts.len() as u32;
        self.contexts.push(context.clone());
        self.index.insert(context, tag);
        tag
    }

    pub(super) fn get(&self, tag: u32) -> &SymbolContext {
        &self.contexts[tag as usize]
    }
}

/// A thread's [`CallEvent`]s in order, kept compactly (a few bytes per
/// segment) and, past a few MiB, in an unnamed temporary file rather than
/// in memory (python3's startup makes 21 MB): what the printers read, once
/// the walk that makes it has also learnt how the trees' roots chain.
/// Every [`CallLog::CHUNK_EVENTS`] events it notes where reading can
/// start, so that parts can be printed at once on several cores.
struct CallLog {
    /// What is not in `file` yet, and how much of it is kept before it
    /// goes there.
    pending: Vec<u8>,
    buffer: usize,
    file: Option<std::fs::File>,
    /// Bytes in `file`.
    written: u64,
    /// Events pushed.
    events: u64,
    /// The state before each chunk of events.
    chunks: Vec<LogState>,
    /// The state after the last event pushed.
    state: LogState,
}

impl Default for CallLog {
    fn default() -> Self {
        CallLog { pending: Vec::new(), buffer: Self::BUFFER, file: None, written: 0, events: 0, chunks: Vec::new(), state: LogState::default() }
    }
}

/// Where reading a [`CallLog`] can start: the byte offset, the last
/// segment before it (the next is written as differences from it), and the
/// tree and root the next event belongs to.
#[derive(Debug, Clone, Copy, Default)]
struct LogState {
    offset: u64,
    /// Depth, last id and last address of the last segment.
    last: (u32, u64, u64),
    at: TreePosition,
}

/// Where a reader of call events is among the trees: the current tree (by
/// number), its current root's place in its chain (0: the first), and
/// whether the tree is a run of errors.
#[derive(Debug, Clone, Copy, Default)]
struct TreePosition {
    tree: Option<usize>,
    root: usize,
    error_tree: bool,
}

impl TreePosition {
    fn follow(&mut self, event: &CallEvent) {
        match event {
            CallEvent::Tree { is_error } => *self = TreePosition { tree: Some(self.tree.map_or(0, |t| t + 1)), root: 0, error_tree: *is_error },
            CallEvent::Reroot => self.root += 1,
            CallEvent::Segment { .. } => {}
        }
    }
}

impl CallLog {
    const TREE: u8 = 0;
    const ERROR_TREE: u8 = 1;
    const REROOT: u8 = 2;
    const SEGMENT: u8 = 3;
    const NESTING_SEGMENT: u8 = 4;
    /// How much is kept in memory at a time.
    const BUFFER: usize = 4 << 20;
    const CHUNK_EVENTS: u64 = 16384;

    fn push(&mut self, event: &CallEvent) -> std::io::Result<()> {
        if self.events % Self::CHUNK_EVENTS == 0 {
            self.chunks.push(LogState { offset: self.written + self.pending.len() as u64, ..self.state });
        }
        self.events += 1;
        let bytes = &mut self.pending;
        let state = &mut self.state;
        state.at.follow(event);
        match event {
            CallEvent::Tree { is_error } => bytes.push(if *is_error { Self::ERROR_TREE } else { Self::TREE }),
            CallEvent::Reroot => bytes.push(Self::REROOT),
            CallEvent::Segment { depth, segment, nests } => {
                bytes.push(if *nests { Self::NESTING_SEGMENT } else { Self::SEGMENT });
                let (last_depth, last_id, last_ip) = state.last;
                // Each value as a difference from one it is usually near.
                leb128::put_signed(bytes, *depth as i64 - last_depth as i64);
                leb128::put_signed(bytes, segment.first.wrapping_sub(last_id) as i64);
                leb128::put(bytes, segment.last.wrapping_sub(segment.first));
                leb128::put_signed(bytes, segment.first_ip.wrapping_sub(last_ip) as i64);
                leb128::put_signed(bytes, segment.last_ip.wrapping_sub(segment.first_ip) as i64);
                leb128::put(bytes, segment.tags.0 as u64);
                leb128::put(bytes, segment.tags.1 as u64);
                state.last = (*depth, segment.last, segment.last_ip);
            }
        }
        if self.pending.len() >= self.buffer {
            let file = match &mut self.file {
                Some(file) => file,
                None => self.file.insert(tempfile::tempfile()?),
            };
            file.write_all(&self.pending)?;
            self.written += self.pending.len() as u64;
            self.pending.clear();
        }
        Ok(())
    }

    /// Ends the log: what is pending goes to the file, if there is one.
    fn finish(&mut self) -> std::io::Result<()> {
        if let Some(file) = &mut self.file {
            file.write_all(&self.pending)?;
            self.written += self.pending.len() as u64;
            self.pending = Vec::new();
        }
        Ok(())
    }

    /// Chunk `k`'s bytes, and the state before it.
    fn chunk(&self, k: usize) -> std::io::Result<(std::borrow::Cow<'_, [u8]>, LogState)> {
        use std::os::unix::fs::FileExt;
        let state = self.chunks[k];
        let end = self.chunks.get(k + 1).map_or(self.written + self.pending.len() as u64, |next| next.offset);
        let bytes = match &self.file {
            None => std::borrow::Cow::Borrowed(&self.pending[state.offset as usize..end as usize]),
            Some(file) => {
                let mut bytes = vec![0; (end - state.offset) as usize];
                file.read_exact_at(&mut bytes, state.offset)?;
                std::borrow::Cow::Owned(bytes)
            }
        };
        Ok((bytes, state))
    }

    /// Gives each event in order to `sink`; stops at its first error.
    fn replay(&self, sink: &mut impl FnMut(CallEvent) -> std::io::Result<()>) -> std::io::Result<()> {
        for k in 0..self.chunks.len() {
            let (bytes, state) = self.chunk(k)?;
            Self::decode(&bytes, state, sink)?;
        }
        Ok(())
    }

    /// The events in `bytes`, read from `state` on.
    fn decode(bytes: &[u8], state: LogState, sink: &mut impl FnMut(CallEvent) -> std::io::Result<()>) -> std::io::Result<()> {
        let mut at = 0;
        let mut last = state.last;
        while let Some(&kind) = bytes.get(at) {
            at += 1;
            let event = match kind {
                Self::TREE | Self::ERROR_TREE => CallEvent::Tree { is_error: kind == Self::ERROR_TREE },
                Self::REROOT => CallEvent::Reroot,
                _ => {
                    let depth = (last.0 as i64 + leb128::get_signed(bytes, &mut at).expect("the spill's own records")) as u32;
                    let first = last.1.wrapping_add(leb128::get_signed(bytes, &mut at).expect("the spill's own records") as u64);
                    let last_id = first.wrapping_add(leb128::get(bytes, &mut at).expect("the spill's own records"));
                    let first_ip = last.2.wrapping_add(leb128::get_signed(bytes, &mut at).expect("the spill's own records") as u64);
                    let last_ip = first_ip.wrapping_add(leb128::get_signed(bytes, &mut at).expect("the spill's own records") as u64);
                    let tags = (leb128::get(bytes, &mut at).expect("the spill's own records") as u32, leb128::get(bytes, &mut at).expect("the spill's own records") as u32);
                    last = (depth, last_id, last_ip);
                    let segment = Segment { first, last: last_id, first_ip, last_ip, tags, nested: None };
                    CallEvent::Segment { depth, segment, nests: kind == Self::NESTING_SEGMENT }
                }
            };
            sink(event)?;
        }
        Ok(())
    }
}

/// How each tree's roots chain, learnt in a first walk: per tree, for
/// each root after the first (a return above the root made it), the tag
/// of its last instruction, which names it on its untraced-prefix line.
#[derive(Default)]
struct ChainsSink {
    chains: Vec<Vec<u32>>,
}

impl ChainsSink {
    fn event(&mut self, event: &CallEvent) {
        match event {
            CallEvent::Tree { .. } => self.chains.push(Vec::new()),
            CallEvent::Reroot => self.chains.last_mut().expect("a tree").push(0),
            CallEvent::Segment { depth: 0, segment, .. } => {
                if let Some(tag) = self.chains.last_mut().and_then(|c| c.last_mut()) {
                    *tag = segment.tags.1;
                }
            }
            CallEvent::Segment { .. } => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use super::text::TextPrinter;
    use retrace_decoder::symbols::Placements;

    /// Events as a walk makes them: trees (some of errors), reroots,
    /// segments nesting and returning, ids and addresses moving both ways.
    fn events(count: usize) -> Vec<CallEvent> {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let (mut depth, mut id) = (0u32, 0u64);
        (0..count)
            .map(|k| match if k == 0 { 0 } else { next() % 100 } {
                0 => {
                    depth = 0;
                    CallEvent::Tree { is_error: k > 0 && next() % 2 == 0 }
                }
                1..=3 => CallEvent::Reroot,
                _ => {
                    let nests = next() % 3 == 0;
                    let first = id + 1 + next() % 3;
                    id = first + next() % 1000;
                    let first_ip = 0x40_0000 + next() % 0x10_0000;
                    let segment = Segment { first, last: id, first_ip, last_ip: first_ip + next() % 64, tags: ((next() % 5) as u32, (next() % 5) as u32), nested: None };
                    let event = CallEvent::Segment { depth, segment, nests };
                    depth = if nests { depth + 1 } else { (depth as u64).saturating_sub(next() % 2) as u32 };
                    event
                }
            })
            .collect()
    }

    fn logged(events: &[CallEvent], buffer: usize) -> CallLog {
        let mut log = CallLog { buffer, ..CallLog::default() };
        for event in events {
            log.push(event).unwrap();
        }
        log.finish().unwrap();
        log
    }

    #[test]
    fn a_log_reads_back_its_events_from_memory_and_from_its_file() {
        let events = events(3 * CallLog::CHUNK_EVENTS as usize + 123);
        for buffer in [usize::MAX, 1000] {
            let log = logged(&events, buffer);
            assert_eq!(log.file.is_some(), buffer == 1000);
            assert_eq!(log.chunks.len(), 4);
            let mut read = Vec::new();
            log.replay(&mut |event| {
                read.push(event);
                Ok(())
            })
            .unwrap();
            assert_eq!(read, events);
        }
    }

    #[test]
    fn chunks_printed_in_parallel_give_the_text_printed_in_one_go() {
        let events = events(5 * CallLog::CHUNK_EVENTS as usize + 7);
        let trees = events.iter().filter(|e| matches!(e, CallEvent::Tree { .. })).count();
        let mut chains = ChainsSink::default();
        for event in &events {
            chains.event(event);
        }
        assert_eq!(chains.chains.len(), trees);
        let mut contexts = ContextTable::default();
        for k in 0..5 {
            let function = (k > 0).then(|| (Arc::from(format!("f{k}")), 0x40_0000 - k as u64 * 0x10));
            contexts.intern(SymbolContext { module: Some(format!("m{k}").into()), function, ..SymbolContext::default() });
        }
        let placements = Placements::default();

        let text = |part: &crate::cli::output::Gathered| part.to_bytes();
        let mut whole = crate::cli::output::Gathered::default();
        let mut one = TextPrinter::new(&chains.chains, &placements);
        for event in events.iter().cloned() {
            one.event(&mut whole, &contexts, event).unwrap();
        }
        for buffer in [usize::MAX, 1000] {
            let log = logged(&events, buffer);
            for workers in [1, 2, 3] {
                let mut printed = Vec::new();
                print_text(&mut |part| Ok(printed.extend(text(&part))), &log, &chains.chains, &placements, &contexts, workers).unwrap();
                assert!(printed == text(&whole), "{workers} workers, buffer {buffer}: the text differs");
            }
        }
    }
}
