//! `retrace dump function-calls`: each thread's function-call trees, in the
//! layout of LLDB 22's `thread trace dump function-calls` (text, or its JSON
//! with `--json` / `--pretty-json`).

use std::collections::HashMap;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use retrace_decoder::calls::{Call, CallEffect, CallForest, Segment, Site};
use retrace_decoder::flow::{decode_parallel_with, FlowOptions};
use retrace_decoder::history::History;
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
    let stdout = std::io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    for thread in &loaded.threads {
        if tid.is_some_and(|tid| tid != thread.tid) {
            continue;
        }
        let (forest, table, _) = thread_forest(&loaded, thread, options);
        match format {
            Format::Text => {
                if let Some(heading) = super::dump::image_heading(&loaded, thread) {
                    writeln!(out, "{heading}")?;
                }
                writeln!(out, "thread #{}: tid = {}", loaded.thread_index(thread), thread.tid)?;
                let printer = TextPrinter { forest: &forest, symbols: loaded.symbols_of(thread), contexts: &table };
                for (k, &root) in forest.roots.iter().enumerate() {
                    write!(out, "\n[call tree #{k}]\n")?;
                    printer.call(&mut out, root, 0)?;
                }
            }
            Format::Json | Format::PrettyJson => {
                // One array per thread, as LLDB prints for each thread.
                let trees = serde_json::Value::Array(forest.roots.iter().map(|&root| call_json(&forest, root)).collect());
                match format {
                    Format::Json => writeln!(out, "{trees}")?,
                    _ => writeln!(out, "{}", serde_json::to_string_pretty(&trees).expect("JSON"))?,
                }
            }
        }
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

/// One thread's call forest (LLDB's rules), the symbol contexts its
/// segments' tags refer to, and the decoded history.
pub(super) fn thread_forest(loaded: &LoadedBundle, thread: &LoadedThread, options: FlowOptions) -> (CallForest, ContextTable, History) {
    let history = decode_parallel_with(&thread.trace, loaded.image_of(thread), super::dump::cores(), options);
    let mut lookups: HashMap<u64, SymbolContext> = HashMap::new();
    let mut effects: HashMap<u64, CallEffect> = HashMap::new();
    // The distinct contexts met; sites refer to them by index.
    let mut table = ContextTable::default();
    // LLDB keeps the previous instruction's symbol context while the
    // address stays in its range (line-table row, else symbol).
    let mut previous: Option<u32> = None;
    let forest = CallForest::build(history.items(), |ip| {
        let tag = match previous.filter(|&t| table.get(t).holds(ip)) {
            Some(tag) => tag,
            None => table.intern(lookups.entry(ip).or_insert_with(|| loaded.symbols_of(thread).lookup(ip)).clone()),
        };
        previous = Some(tag);
        let here = table.get(tag);
        let effect = *effects.entry(ip).or_insert_with(|| {
            let mut bytes = [0u8; 15];
            let n = loaded.image_of(thread).read(ip, &mut bytes);
            call_effect(&bytes[..n], ip, ExecMode::Bits64)
        });
        // The first instruction of the innermost inlined block, or of
        // the function when there is none, enters it.
        let entry = match here.inlined_block {
            Some(block) => block.entry == ip,
            None => here.function.as_ref().is_some_and(|(_, start)| *start == ip),
        };
        Site {
            entry,
            inlined: here.inlined_block.is_some(),
            effect,
            scope: (here.module.clone(), here.function.as_ref().map(|f| f.1), here.inlined_block.map(|b| b.id)) as Scope,
            tag,
        }
    });
    (forest, table, history)
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

struct TextPrinter<'a> {
    forest: &'a CallForest,
    symbols: &'a Symbolizer,
    contexts: &'a ContextTable,
}

impl TextPrinter<'_> {
    fn call(&self, out: &mut impl Write, call: usize, depth: usize) -> std::io::Result<()> {
        let indent = "  ".repeat(depth);
        let c: &Call = &self.forest.calls[call];
        if let Some(prefix) = c.untraced_prefix {
            let last = c.segments.last().map_or(0, |s| s.tags.1);
            writeln!(out, "{indent}{}", untraced_context(self.contexts.get(last)))?;
            self.call(out, prefix, depth + 1)?;
        }
        for segment in &c.segments {
            let text = if c.is_error { "<tracing errors>".to_string() } else { self.segment(segment) };
            writeln!(out, "{indent}{text}  [{}, {}]", segment.first, segment.last)?;
            if let Some(nested) = segment.nested {
                self.call(out, nested, depth + 1)?;
            }
        }
        Ok(())
    }

    /// `<where it starts> to <where it ends>`, as LLDB words it: the end is
    /// `line:column` when both ends have a source line, else the offset in
    /// the function (`<+N>`) or the module address.
    fn segment(&self, segment: &Segment) -> String {
        let (first, last) = (self.contexts.get(segment.tags.0), self.contexts.get(segment.tags.1));
        let start = self.stop_context(first, segment.first_ip);
        let end = match (&first.line, &last.line) {
            (Some(_), Some((_, line, column))) => format!("{line}:{column}"),
            _ => match &last.function {
                Some((_, function_start)) => format!("<+{}>{}", segment.last_ip - function_start, last.position().unwrap_or_default()),
                None => self.module_address(segment.last_ip),
            },
        };
        format!("{start} to {end}")
    }

    /// LLDB's stop context with module: ``module`function + off [inlined] f
    /// at file:line:col``, or ``module`module[0x…]`` without a function.
    fn stop_context(&self, context: &SymbolContext, ip: u64) -> String {
        match (&context.module, &context.function) {
            (Some(_), Some(_)) => context.describe(ip),
            (Some(module), None) => format!("{module}`{}", self.module_address(ip)),
            (None, _) => format!("{ip:#018x}"),
        }
    }

    fn module_address(&self, ip: u64) -> String {
        match self.symbols.file_address(ip) {
            Some((module, address)) => format!("{module}[{address:#018x}]"),
            None => format!("{ip:#018x}"),
        }
    }
}

/// The line for a call seen only by returning to it: ``module`function``
/// (the inlined function's name inside one, as LLDB's
/// `SymbolContext::GetFunctionName` gives it).
fn untraced_context(context: &SymbolContext) -> String {
    match (&context.module, &context.function) {
        (None, _) => "(none)".into(),
        (Some(module), None) => format!("{module}`(none)"),
        (Some(module), Some((name, _))) => format!("{module}`{}", context.inlined.as_ref().unwrap_or(name)),
    }
}

/// LLDB's JSON for a call: `untracedPrefixSegment` (when the trace starts
/// inside it), then `tracedSegments` with ids as strings.
fn call_json(forest: &CallForest, call: usize) -> serde_json::Value {
    let c = &forest.calls[call];
    let mut object = serde_json::Map::new();
    if let Some(prefix) = c.untraced_prefix {
        object.insert("untracedPrefixSegment".into(), serde_json::json!({ "nestedCall": call_json(forest, prefix) }));
    }
    let segments: Vec<serde_json::Value> = c
        .segments
        .iter()
        .map(|segment| {
            let mut s = serde_json::Map::new();
            s.insert("firstInstructionId".into(), segment.first.to_string().into());
            s.insert("lastInstructionId".into(), segment.last.to_string().into());
            if let Some(nested) = segment.nested {
                s.insert("nestedCall".into(), call_json(forest, nested));
            }
            serde_json::Value::Object(s)
        })
        .collect();
    object.insert("tracedSegments".into(), segments.into());
    serde_json::Value::Object(object)
}
