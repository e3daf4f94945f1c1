//! XRay logs in the CLI: `retrace dump function-calls LOG --binary BIN`
//! (per-thread call trees in the layout of LLDB's `thread trace dump
//! function-calls`, or JSON) and the XRay half of `retrace export chrome`.

use std::collections::HashMap;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use object::{Object, ObjectSegment};
use retrace_decoder::symbols::Symbolizer;
use retrace_decoder::xray::instr_map::InstrMap;
use retrace_decoder::xray::timeline::{CallEnd, ThreadTimeline, Timeline};
use retrace_decoder::xray::{FunctionId, Log, Mode, RecordKind};
use serde_json::{json, Value};

use super::calls::Format;
use crate::cli::error::CliError;

/// True when `bytes` start like an XRay log (not a `trace.json`).
pub fn looks_like_xray(bytes: &[u8]) -> bool {
    retrace_decoder::xray::FileHeader::parse(bytes).is_ok()
}

/// A function's name as the tools show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FunctionName {
    /// The object's file name.
    pub module: String,
    /// Demangled name, or `#<id>` when unknown.
    pub name: String,
    /// Entry address in the object's file.
    pub address: Option<u64>,
}

/// Function ids → names, from the instrumented objects (object 0 = the
/// executable, then shared libraries in registration order).
#[derive(Debug, Default)]
pub struct FunctionNames {
    objects: Vec<(String, InstrMap, Symbolizer)>,
    cache: HashMap<FunctionId, FunctionName>,
}

impl FunctionNames {
    /// Reads each binary's `xray_instr_map` and symbols.
    pub fn load(binaries: &[PathBuf]) -> Result<FunctionNames, CliError> {
        let mut names = FunctionNames::default();
        for path in binaries {
            let bytes = std::fs::read(path).map_err(CliError::file(path))?;
            let map = InstrMap::parse(&bytes).map_err(|e| CliError::Message(format!("{}: {e}", path.display())))?;
            let lowest = object::File::parse(&*bytes).ok().and_then(|file| file.segments().map(|s| s.address()).min()).unwrap_or(0);
            let mut symbols = Symbolizer::new();
            let module = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            symbols.add_module(&module, &bytes, lowest & !0xfff, None);
            names.objects.push((module, map, symbols));
        }
        Ok(names)
    }

    /// The name of `id`.
    pub fn get(&mut self, id: FunctionId) -> &FunctionName {
        let objects = &self.objects;
        self.cache.entry(id).or_insert_with(|| {
            let unknown = |module: String| FunctionName { module, name: format!("#{id}"), address: None };
            let Some((module, map, symbols)) = objects.get(id.object() as usize) else { return unknown(String::new()) };
            let Some(address) = map.function_address(id) else { return unknown(module.clone()) };
            let name = symbols.lookup(address).function.filter(|(_, start)| *start == address).map(|(name, _)| demangle(&name));
            FunctionName { module: module.clone(), name: name.unwrap_or_else(|| format!("#{id}")), address: Some(address) }
        })
    }
}

/// C++ names as LLVM's and LLDB's tools print them.
pub fn demangle(name: &str) -> String {
    let options = cpp_demangle::DemangleOptions::new();
    let Some(mut text) = cpp_demangle::Symbol::new(name).ok().and_then(|symbol| symbol.demangle(&options).ok()) else {
        return name.to_string();
    };
    // LLVM's demangler closes nested templates as `>>`.
    while text.contains("> >") {
        text = text.replace("> >", ">>");
    }
    text
}

/// The log in `bytes` (read from `path`), or why it is not one.
fn parse_log<'a>(path: &Path, bytes: &'a [u8]) -> Result<Log<'a>, CliError> {
    Log::parse(bytes).map_err(|e| CliError::Message(format!("{}: {e}", path.display())))
}

/// `retrace dump function-calls LOG --binary BIN…` for an XRay log.
pub fn function_calls(log_path: &Path, binaries: &[PathBuf], tid: Option<u64>, format: Format) -> Result<ExitCode, CliError> {
    let bytes = std::fs::read(log_path).map_err(CliError::file(log_path))?;
    let log = parse_log(log_path, &bytes)?;
    let mut names = FunctionNames::load(binaries)?;
    let timeline = Timeline::build(&log);
    if let Some(tid) = tid {
        if !timeline.threads.iter().any(|t| u64::from(t.tid) == tid) {
            return Err(CliError::Message(format!("no thread {tid} in {}", log_path.display())));
        }
    }
    // Numbered among all threads, also when one is picked.
    let threads = timeline.threads.iter().enumerate().filter(|(_, t)| tid.is_none_or(|tid| u64::from(t.tid) == tid));
    let stdout = std::io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    match format {
        Format::Text => {
            for error in &timeline.errors {
                writeln!(out, "(error) {error}")?;
            }
            for (printed, (index, thread)) in threads.enumerate() {
                if printed > 0 {
                    writeln!(out)?;
                }
                match thread.pid {
                    Some(pid) => writeln!(out, "thread #{}: tid = {}, pid = {pid}", index + 1, thread.tid)?,
                    None => writeln!(out, "thread #{}: tid = {}", index + 1, thread.tid)?,
                }
                let printer = TextTrees { timeline: &timeline, thread };
                for (k, &root) in thread.roots.iter().enumerate() {
                    write!(out, "\n[call tree #{k}]\n")?;
                    printer.call(&mut out, &mut names, root, 0)?;
                }
                if !thread.events.is_empty() {
                    writeln!(out, "\n[events outside calls]")?;
                }
                for &event in &thread.events {
                    printer.event(&mut out, event, 0)?;
                }
            }
        }
        Format::Json | Format::PrettyJson => {
            let value = json!({
                "header": header_json(&log),
                "threads": threads.map(|(_, thread)| thread_json(&timeline, thread, &mut names)).collect::<Vec<_>>(),
                "errors": timeline.errors.iter().map(|e| json!({"offset": e.offset, "message": e.kind.to_string()})).collect::<Vec<_>>(),
            });
            if format == Format::Json {
                writeln!(out, "{value}")?;
            } else {
                writeln!(out, "{}", serde_json::to_string_pretty(&value).expect("JSON"))?;
            }
        }
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

fn header_json(log: &Log) -> Value {
    let header = log.header;
    json!({
        "mode": if header.mode == Mode::Fdr { "fdr" } else { "basic" },
        "version": header.version,
        "cycleFrequency": header.cycle_frequency,
        "constantTsc": header.constant_tsc,
        "nonstopTsc": header.nonstop_tsc,
    })
}

struct TextTrees<'t, 'a> {
    timeline: &'t Timeline<'a>,
    thread: &'t ThreadTimeline<'a>,
}

impl TextTrees<'_, '_> {
    /// Prints a call tree depth first (with an explicit stack: a log can
    /// nest calls deeper than the thread's stack would allow recursion).
    fn call(&self, out: &mut impl Write, names: &mut FunctionNames, root: usize, base_depth: usize) -> std::io::Result<()> {
        enum Item {
            Call(usize),
            Event(usize),
        }
        let mut pending = vec![(Item::Call(root), base_depth)];
        while let Some((item, depth)) = pending.pop() {
            let index = match item {
                Item::Event(event) => {
                    self.event(out, event, depth)?;
                    continue;
                }
                Item::Call(index) => index,
            };
            writeln!(out, "{}", self.call_line(names, index, depth))?;
            let call = &self.thread.calls[index];
            // Children and own events in record order.
            let mut items: Vec<(usize, Item)> = call
                .children
                .iter()
                .map(|&c| (self.thread.calls[c].enter.or(self.thread.calls[c].exit).unwrap_or(0), Item::Call(c)))
                .collect();
            items.extend(call.events.iter().map(|&e| (e, Item::Event(e))));
            items.sort_by_key(|(at, _)| *at);
            pending.extend(items.into_iter().rev().map(|(_, item)| (item, depth + 1)));
        }
        Ok(())
    }

    fn call_line(&self, names: &mut FunctionNames, index: usize, depth: usize) -> String {
        let call = &self.thread.calls[index];
        let name = names.get(call.function);
        let indent = "  ".repeat(depth);
        let mut line = format!("{indent}{}`{}", name.module, name.name);
        if !call.args.is_empty() {
            let args: Vec<String> = call.args.iter().map(|a| a.to_string()).collect();
            line.push_str(&format!(" ({})", args.join(", ")));
        }
        let id = |id: Option<usize>| id.map_or("?".to_string(), |id| id.to_string());
        line.push_str(&format!("  [{}, {}]", id(call.enter), id(call.exit)));
        match (call.end, call.ticks().and_then(|ticks| self.timeline.nanos(ticks))) {
            (CallEnd::Unwound, Some(ns)) => line.push_str(&format!("  {ns:.3} ns (its exit is not in the trace)")),
            (CallEnd::TailExit, Some(ns)) => line.push_str(&format!("  {ns:.3} ns (tail call)")),
            (_, Some(ns)) => line.push_str(&format!("  {ns:.3} ns")),
            (CallEnd::Unfinished, None) if call.enter.is_some() => line.push_str("  unfinished"),
            (_, None) if call.enter.is_none() => line.push_str("  entered before the trace"),
            (_, None) => {}
        }
        line
    }

    fn event(&self, out: &mut impl Write, index: usize, depth: usize) -> std::io::Result<()> {
        let record = &self.thread.records[index];
        let indent = "  ".repeat(depth);
        let data = String::from_utf8_lossy(record.data);
        match record.event_type {
            Some(event_type) => writeln!(out, "{indent}typed-event {event_type} {data:?}  [{index}]"),
            None => writeln!(out, "{indent}custom-event {data:?}  [{index}]"),
        }
    }
}

fn event_json(thread: &ThreadTimeline, index: usize) -> Value {
    let record = &thread.records[index];
    let mut value = json!({
        "id": index,
        "kind": record.kind.llvm_name(),
        "tsc": record.tsc,
        "data": String::from_utf8_lossy(record.data),
    });
    if let Some(event_type) = record.event_type {
        value["eventType"] = json!(event_type);
    }
    value
}

/// A thread's calls, flat in depth-first order: each with its `index`,
/// `parent` (index or null) and `depth` (flat, so that no depth of nesting
/// strains a JSON reader).
fn calls_json(timeline: &Timeline, thread: &ThreadTimeline, names: &mut FunctionNames) -> Vec<Value> {
    let mut out = Vec::new();
    let mut pending: Vec<(usize, Option<usize>, usize)> = thread.roots.iter().rev().map(|&c| (c, None, 0)).collect();
    while let Some((index, parent, depth)) = pending.pop() {
        let call = &thread.calls[index];
        let name = names.get(call.function).clone();
        let mut value = json!({
            "index": index,
            "parent": parent,
            "depth": depth,
            "functionId": call.function.0 as i32,
            "function": name.name,
            "module": name.module,
            "enterId": call.enter,
            "exitId": call.exit,
            "end": call.end.name(),
            "startTsc": call.start_tsc,
            "endTsc": call.end_tsc,
            "durationNs": call.ticks().and_then(|ticks| timeline.nanos(ticks)),
        });
        if !call.args.is_empty() {
            value["args"] = json!(call.args);
        }
        if !call.events.is_empty() {
            value["events"] = call.events.iter().map(|&e| event_json(thread, e)).collect();
        }
        out.push(value);
        pending.extend(call.children.iter().rev().map(|&c| (c, Some(index), depth + 1)));
    }
    out
}

fn thread_json(timeline: &Timeline, thread: &ThreadTimeline, names: &mut FunctionNames) -> Value {
    json!({
        "tid": thread.tid,
        "pid": thread.pid,
        "records": thread.records.len(),
        "calls": calls_json(timeline, thread, names),
        "events": thread.events.iter().map(|&e| event_json(thread, e)).collect::<Vec<_>>(),
    })
}

/// Chrome trace events for an XRay log: per thread, one complete (`X`)
/// slice per call with a known start (`ts`/`dur` in µs from the log's
/// earliest record; unfinished calls end at the thread's last record), an
/// instant (`i`) per custom or typed event, thread names as metadata.
pub fn chrome_events(log_path: &Path, binaries: &[PathBuf]) -> Result<Vec<Value>, CliError> {
    let bytes = std::fs::read(log_path).map_err(CliError::file(log_path))?;
    let log = parse_log(log_path, &bytes)?;
    let mut names = FunctionNames::load(binaries)?;
    let timeline = Timeline::build(&log);
    let zero = timeline.threads.iter().flat_map(|t| t.records.first()).map(|r| r.tsc).min().unwrap_or(0);
    let micros = |tsc: u64| timeline.nanos(tsc.saturating_sub(zero)).map(|ns| ns / 1000.0).unwrap_or((tsc.saturating_sub(zero)) as f64);
    let mut events = Vec::new();
    for thread in &timeline.threads {
        let pid = thread.pid.unwrap_or(0);
        events.push(json!({"ph": "M", "name": "thread_name", "pid": pid, "tid": thread.tid, "args": {"name": format!("thread {}", thread.tid)}}));
        let last = thread.records.last().map(|r| r.tsc).unwrap_or(zero);
        for call in &thread.calls {
            let Some(start) = call.start_tsc else { continue };
            let end = call.end_tsc.unwrap_or(last);
            let name = names.get(call.function).clone();
            let mut args = json!({"functionId": call.function.0 as i32, "end": call.end.name()});
            if !call.args.is_empty() {
                args["args"] = json!(call.args);
            }
            events.push(json!({
                "ph": "X",
                "name": name.name,
                "cat": name.module,
                "pid": pid,
                "tid": thread.tid,
                "ts": micros(start),
                "dur": micros(end) - micros(start),
                "args": args,
            }));
        }
        for (index, record) in thread.records.iter().enumerate() {
            if matches!(record.kind, RecordKind::CustomEvent | RecordKind::TypedEvent) {
                events.push(json!({
                    "ph": "i",
                    "s": "t",
                    "name": record.kind.llvm_name(),
                    "pid": pid,
                    "tid": thread.tid,
                    "ts": micros(record.tsc),
                    "args": {"data": String::from_utf8_lossy(record.data), "id": index},
                }));
            }
        }
    }
    Ok(events)
}

/// True when `path` starts like an XRay log rather than a trace.json.
pub(crate) fn is_xray_log(path: &std::path::Path) -> bool {
    use std::io::Read;
    let mut head = [0u8; 32];
    std::fs::File::open(path).and_then(|mut file| file.read_exact(&mut head)).is_ok() && looks_like_xray(&head)
}
