//! `retrace dump function-calls`: each thread's function-call trees, in the
//! layout of LLDB 22's `thread trace dump function-calls` (text, or its JSON
//! with `--json` / `--pretty-json`).

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use retrace_decoder::calls::{CallEffect, CallEvent, CallTracker, Segment, Site};
use retrace_decoder::flow::{decode_parallel_with, FlowOptions};
use retrace_decoder::history::{AddressHasher, BlockTable, Extra, History, Step};
use std::hash::BuildHasherDefault;
use serde_json::ser::{CompactFormatter, Formatter, PrettyFormatter};
use retrace_decoder::image::Memory;
use retrace_decoder::symbols::{SymbolContext, Symbolizer};
use retrace_decoder::x86::{call_effect, ExecMode};

use super::CliError;
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
pub fn run(trace_json: &Path, tid: Option<u64>, format: Format, options: FlowOptions) -> Result<ExitCode, CliError> {
    let loaded = bundle::load(trace_json).map_err(|e| CliError::Message(e.to_string()))?;
    if let Some(tid) = tid {
        if !loaded.threads.iter().any(|t| t.tid == tid) {
            return Err(CliError::Message(format!("no thread {tid} in {}", trace_json.display())));
        }
    }
    let mut out = super::bulk_stdout();
    for thread in &loaded.threads {
        if tid.is_some_and(|tid| tid != thread.tid) {
            continue;
        }
        let history = decode_parallel_with(&thread.trace, loaded.image_of(thread), super::dump::cores(), options);
        let mut sites = BlockSites::new(&loaded, thread);
        // Two walks over the history: the first learns how each tree's
        // roots chain (a return above the root wraps the tree printed so
        // far, so its depth is only known at the tree's end), the second
        // prints each segment as it closes.
        let mut chains = ChainsSink::default();
        track_calls(&history, &mut sites, &mut |event, _| {
            chains.event(&event);
            Ok(())
        })?;
        match format {
            Format::Text => {
                if let Some(heading) = super::dump::image_heading(&loaded, thread) {
                    writeln!(out, "{heading}")?;
                }
                writeln!(out, "thread #{}: tid = {}", loaded.thread_index(thread), thread.tid)?;
                let mut printer = TextPrinter { chains: &chains.chains, symbols: loaded.symbols_of(thread), tree: None, root: 0, error_tree: false };
                track_calls(&history, &mut sites, &mut |event, contexts| printer.event(&mut out, contexts, event))?;
            }
            Format::Json | Format::PrettyJson => {
                // One array per thread, as LLDB prints for each thread.
                let result = match format {
                    Format::Json => write_json(&mut out, CompactFormatter, &history, &mut sites, &chains.chains),
                    _ => write_json(&mut out, PrettyFormatter::new(), &history, &mut sites, &chains.chains),
                };
                result?;
                writeln!(out)?;
            }
        }
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
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
    // LLDB keeps the previous instruction's symbol context while the
    // address stays in its range; errors do not reset it.
    let mut last_tag = None;
    for step in history.steps() {
        match step {
            Step::Extra { id, extra: Extra::Error { .. } } => tracker.error(id, &mut |e| relay(sink, e, &sites.contexts, &mut failure)),
            Step::Extra { .. } => {}
            Step::Block { id, block } => {
                let runs = sites.runs(&history.table, block, last_tag);
                for k in runs.clone() {
                    let run = &sites.arena[k];
                    let (first, last) = (id + run.offset as u64, id + run.last_offset as u64);
                    let (first_ip, last_ip, first_site, last_site) = (run.first_ip, run.last_ip, run.first, run.last);
                    tracker.run(first, first_ip, first_site, last, last_ip, last_site, &mut |e| relay(sink, e, &sites.contexts, &mut failure));
                }
                if !runs.is_empty() {
                    last_tag = Some(sites.arena[runs.end - 1].last.tag);
                }
            }
        }
        if let Some(e) = failure.take() {
            return Err(e);
        }
    }
    tracker.finish(&mut |e| relay(sink, e, &sites.contexts, &mut failure));
    failure.map_or(Ok(()), Err)
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
    /// Interned scopes.
    scopes: HashMap<Scope, u32>,
    arena: Vec<Run>,
    /// Per block id: its runs (start in the arena << 16 | count; 0: not
    /// described yet) when its first context is looked up afresh.
    fresh: Vec<u64>,
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
        let start = table.get(block).start;
        let kept = previous.filter(|&tag| self.holds(tag, start));
        let cached = match kept {
            None => self.fresh.get(block as usize).copied().unwrap_or(0),
            Some(tag) => self.kept.get(&(block, tag)).copied().unwrap_or(0),
        };
        if cached != 0 {
            return Self::range(cached);
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
                    self.fresh.resize(block as usize + 1, 0);
                }
                self.fresh[block as usize] = packed;
            }
            Some(tag) => {
                self.kept.insert((block, tag), packed);
            }
        }
        Self::range(packed)
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
        let scope: Scope = (here.module.clone(), here.function.as_ref().map(|f| f.1), here.inlined_block.map(|b| b.id));
        let next = self.scopes.len() as u32;
        let scope = *self.scopes.entry(scope).or_insert(next);
        Site { scope, entry, inlined, effect, tag }
    }
}

/// Symbol contexts, each stored once.
#[derive(Default)]
pub(super) struct ContextTable {
    contexts: Vec<SymbolContext>,
    index: HashMap<SymbolContext, u32>,
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

/// LLDB's text, printed as segments close: a tree's header and the
/// untraced-prefix lines of all its roots first (from [`ChainsSink`]),
/// then each segment indented by its depth plus the roots still to wrap it.
struct TextPrinter<'a> {
    chains: &'a [Vec<u32>],
    symbols: &'a Symbolizer,
    /// The current tree.
    tree: Option<usize>,
    /// The current root's place in its tree's chain (0: the first).
    root: usize,
    error_tree: bool,
}

impl TextPrinter<'_> {
    fn event(&mut self, out: &mut super::BulkStdout, contexts: &ContextTable, event: CallEvent) -> std::io::Result<()> {
        match event {
            CallEvent::Tree { is_error } => {
                let tree = self.tree.map_or(0, |t| t + 1);
                self.tree = Some(tree);
                self.root = 0;
                self.error_tree = is_error;
                write!(out, "\n[call tree #{tree}]\n")?;
                let chain = &self.chains[tree];
                for (depth, &tag) in chain.iter().rev().enumerate() {
                    out.indent(depth)?;
                    writeln!(out, "{}", call_name(contexts.get(tag)))?;
                }
            }
            CallEvent::Reroot => self.root += 1,
            CallEvent::Segment { depth, segment, .. } => {
                let wrapping = self.tree.map_or(0, |t| self.chains[t].len()) - self.root;
                out.indent(wrapping + depth as usize)?;
                if self.error_tree {
                    write!(out, "<tracing errors>")?;
                } else {
                    self.segment(out, contexts, &segment)?;
                }
                writeln!(out, "  [{}, {}]", segment.first, segment.last)?;
            }
        }
        Ok(())
    }

    /// `<where it starts> to <where it ends>`, as LLDB words it: the end is
    /// `line:column` when both ends have a source line, else the offset in
    /// the function (`<+N>`) or the module address.
    fn segment(&self, out: &mut impl Write, contexts: &ContextTable, segment: &Segment) -> std::io::Result<()> {
        let (first, last) = (contexts.get(segment.tags.0), contexts.get(segment.tags.1));
        self.stop_context(out, first, segment.first_ip)?;
        match (&first.line, &last.line) {
            (Some(_), Some((_, line, column))) => write!(out, " to {line}:{column}"),
            _ => match &last.function {
                Some((_, function_start)) => write!(out, " to <+{}>{}", segment.last_ip - function_start, last.position().unwrap_or_default()),
                None => write!(out, " to {}", self.module_address(segment.last_ip)),
            },
        }
    }

    /// LLDB's stop context with module: ``module`function + off [inlined] f
    /// at file:line:col``, or ``module`module[0x…]`` without a function.
    fn stop_context(&self, out: &mut impl Write, context: &SymbolContext, ip: u64) -> std::io::Result<()> {
        match (&context.module, &context.function) {
            (Some(_), Some(_)) => write!(out, "{}", context.describe(ip)),
            (Some(module), None) => write!(out, "{module}`{}", self.module_address(ip)),
            (None, _) => write!(out, "{ip:#018x}"),
        }
    }

    fn module_address(&self, ip: u64) -> String {
        match self.symbols.file_address(ip) {
            Some((module, address)) => format!("{module}[{address:#018x}]"),
            None => format!("{ip:#018x}"),
        }
    }
}

/// A call's name as LLDB gives it: ``module`function`` (the inlined
/// function's name inside one, as LLDB's `SymbolContext::GetFunctionName`
/// gives it) — the line for a call seen only by returning to it, and a
/// timeline slice's name.
pub(super) fn call_name(context: &SymbolContext) -> String {
    match (&context.module, &context.function) {
        (None, _) => "(none)".into(),
        (Some(module), None) => format!("{module}`(none)"),
        (Some(module), Some((name, _))) => format!("{module}`{}", context.inlined.as_ref().unwrap_or(name)),
    }
}

/// LLDB's JSON for one thread's trees, written as segments close: each
/// tree an object with `untracedPrefixSegment` (its `nestedCall` the tree
/// the root returned above) when the trace starts inside it, then
/// `tracedSegments` with ids as strings and `nestedCall`s. `formatter` is
/// serde_json's compact or pretty layout.
fn write_json<F: Formatter>(
    out: &mut impl Write,
    formatter: F,
    history: &History,
    sites: &mut BlockSites,
    chains: &[Vec<u32>],
) -> std::io::Result<()> {
    let mut writer = JsonTrees { f: formatter, chains, tree: None, open: Vec::new() };
    writer.f.begin_array(out)?;
    track_calls(history, sites, &mut |event, _| writer.event(out, event))?;
    writer.close_tree(out)?;
    writer.f.end_array(out)
}

struct JsonTrees<'a, F> {
    f: F,
    chains: &'a [Vec<u32>],
    tree: Option<usize>,
    /// Per open call, from the root: no segment written in it yet.
    open: Vec<bool>,
}

impl<F: Formatter> JsonTrees<'_, F> {
    fn event(&mut self, out: &mut impl Write, event: CallEvent) -> std::io::Result<()> {
        match event {
            CallEvent::Tree { .. } => {
                self.close_tree(out)?;
                let tree = self.tree.map_or(0, |t| t + 1);
                self.f.begin_array_value(out, tree == 0)?;
                self.tree = Some(tree);
                // The roots that will wrap this one, outermost first.
                for _ in 0..self.chains[tree].len() {
                    self.f.begin_object(out)?;
                    self.key(out, "untracedPrefixSegment", true)?;
                    self.f.begin_object(out)?;
                    self.key(out, "nestedCall", true)?;
                }
                self.open_call(out, true)?;
            }
            CallEvent::Reroot => {
                self.close_to(out, 1)?;
                self.close_call(out)?;
                // The untraced-prefix object ends; the new root's segments follow.
                self.f.end_object_value(out)?;
                self.f.end_object(out)?;
                self.f.end_object_value(out)?;
                self.open_call(out, false)?;
            }
            CallEvent::Segment { depth, segment, nests } => {
                self.close_to(out, depth as usize + 1)?;
                let first = std::mem::replace(self.open.last_mut().expect("an open call"), false);
                self.f.begin_array_value(out, first)?;
                self.f.begin_object(out)?;
                self.key(out, "firstInstructionId", true)?;
                self.string(out, &segment.first.to_string())?;
                self.key(out, "lastInstructionId", false)?;
                self.string(out, &segment.last.to_string())?;
                if nests {
                    self.key(out, "nestedCall", false)?;
                    self.open_call(out, true)?;
                } else {
                    self.f.end_object(out)?;
                    self.f.end_array_value(out)?;
                }
            }
        }
        Ok(())
    }

    /// `"tracedSegments": [` of a call whose object is open.
    fn open_call(&mut self, out: &mut impl Write, first_key: bool) -> std::io::Result<()> {
        if first_key {
            self.f.begin_object(out)?;
        }
        self.key(out, "tracedSegments", first_key)?;
        self.f.begin_array(out)?;
        self.open.push(true);
        Ok(())
    }

    /// `]}` of the innermost call.
    fn close_call(&mut self, out: &mut impl Write) -> std::io::Result<()> {
        self.open.pop();
        self.f.end_array(out)?;
        self.f.end_object_value(out)?;
        self.f.end_object(out)
    }

    /// Closes nested calls until `depth` calls are open (each closes its
    /// parent's segment object too).
    fn close_to(&mut self, out: &mut impl Write, depth: usize) -> std::io::Result<()> {
        while self.open.len() > depth {
            self.close_call(out)?;
            self.f.end_object_value(out)?;
            self.f.end_object(out)?;
            self.f.end_array_value(out)?;
        }
        Ok(())
    }

    fn close_tree(&mut self, out: &mut impl Write) -> std::io::Result<()> {
        if self.open.is_empty() {
            return Ok(());
        }
        self.close_to(out, 1)?;
        self.close_call(out)?;
        self.f.end_array_value(out)
    }

    fn key(&mut self, out: &mut impl Write, name: &str, first: bool) -> std::io::Result<()> {
        self.f.begin_object_key(out, first)?;
        self.string_only(out, name)?;
        self.f.end_object_key(out)?;
        self.f.begin_object_value(out)
    }

    fn string(&mut self, out: &mut impl Write, value: &str) -> std::io::Result<()> {
        self.string_only(out, value)?;
        self.f.end_object_value(out)
    }

    fn string_only(&mut self, out: &mut impl Write, value: &str) -> std::io::Result<()> {
        self.f.begin_string(out)?;
        self.f.write_string_fragment(out, value)?;
        self.f.end_string(out)
    }
}
