//! `retrace dump info`: LLDB's `thread trace dump info` text per thread,
//! or retrace's JSON summary.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use retrace_decoder::history::Extra;

use super::image_heading;
use crate::bundle;
use crate::cli::error::CliError;

/// `retrace dump info`: per thread, LLDB's `thread trace dump info` text
/// (see [`write_lldb_info`]); `--json`: retrace's summary (trace size,
/// items, instructions, events, errors, decode time per thread).
pub fn info(trace_json: &Path, json: bool, options: bundle::OpenOptions) -> Result<ExitCode, CliError> {
    let decoded = bundle::DecodedBundle::open(trace_json, options, false).map_err(|e| CliError::Message(e.to_string()))?;
    let loaded = &decoded.loaded;
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    if !json {
        for (position, thread) in loaded.threads.iter().enumerate() {
            if let Some(heading) = image_heading(loaded, thread) {
                writeln!(out, "\n{heading}")?;
            }
            write_lldb_info(&decoded, &[position], false, &mut out)?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    let cpu = &loaded.description.cpu_info;
    let mut threads = Vec::new();
    for (position, thread) in loaded.threads.iter().enumerate() {
        let start = std::time::Instant::now();
        let history = decoded.history(position);
        let seconds = start.elapsed().as_secs_f64();
        let instructions = history.instructions();
        let events = history.extras().filter(|e| matches!(e, Extra::Event(_))).count();
        let errors = history.extras().filter(|e| matches!(e, Extra::Error { .. })).count();
        let items = history.items_len();
        threads.push(serde_json::json!({
            "index": loaded.thread_index(thread), "process": thread.process, "tid": thread.tid, "traceBytes": thread.trace.len(), "items": items,
            "instructions": instructions, "events": events, "errors": errors, "decodeSeconds": seconds,
        }));
    }
    let cpu = serde_json::json!({"vendor": cpu.vendor, "family": cpu.family, "model": cpu.model, "stepping": cpu.stepping});
    writeln!(out, "{}", serde_json::json!({ "cpuInfo": cpu, "threads": threads }))?;
    Ok(ExitCode::SUCCESS)
}

/// What LLDB's `thread trace dump info` reports of one thread's decode.
struct ThreadStats {
    index: usize,
    tid: u64,
    trace_bytes: usize,
    items: u64,
    memory: usize,
    seconds: f64,
    /// (event name, count), the kind seen last first: the order LLDB 22's
    /// `unordered_map` (libc++) gives them.
    events: Vec<(&'static str, usize)>,
    /// (libipt error text, count), likewise.
    libipt_errors: Vec<(&'static str, usize)>,
    other_errors: usize,
}

impl ThreadStats {
    fn of(decoded: &bundle::DecodedBundle, position: usize) -> ThreadStats {
        let loaded = &decoded.loaded;
        let thread = &loaded.threads[position];
        let start = std::time::Instant::now();
        let history = decoded.history(position);
        let seconds = start.elapsed().as_secs_f64();
        let count = |counts: &mut Vec<(&'static str, usize)>, name: &'static str| match counts.iter_mut().find(|(n, _)| *n == name) {
            Some((_, n)) => *n += 1,
            None => counts.insert(0, (name, 1)),
        };
        let (mut events, mut libipt_errors, mut other_errors) = (Vec::new(), Vec::new(), 0);
        for extra in history.extras() {
            match extra {
                Extra::Event(event) => count(&mut events, event.name()),
                Extra::Error { error, .. } if error.from_libipt() => count(&mut libipt_errors, error.libipt_message()),
                Extra::Error { .. } => other_errors += 1,
            }
        }
        ThreadStats {
            index: loaded.thread_index(thread),
            tid: thread.tid,
            trace_bytes: thread.trace.len(),
            items: history.items_len(),
            memory: history.memory_bytes(),
            seconds,
            events,
            libipt_errors,
            other_errors,
        }
    }

    fn events(&self) -> usize {
        self.events.iter().map(|(_, n)| n).sum()
    }

    fn errors(&self) -> usize {
        self.libipt_errors.iter().map(|(_, n)| n).sum::<usize>() + self.other_errors
    }

    /// LLDB's text (`TraceIntelPT::DumpTraceInfo`); the memory is the
    /// compact history's, the time retrace's decode.
    fn write_text(&self, out: &mut impl Write) -> std::io::Result<()> {
        let per_item = if self.items == 0 { 0.0 } else { self.memory as f64 / self.items as f64 };
        writeln!(out, "\nthread #{}: tid = {}\n", self.index, self.tid)?;
        writeln!(out, "  Trace technology: intel-pt\n")?;
        writeln!(out, "  Total number of trace items: {}\n", self.items)?;
        writeln!(out, "  Memory usage:")?;
        writeln!(out, "    Raw trace size: {} KiB", self.trace_bytes / 1024)?;
        writeln!(out, "    Total approximate memory usage (excluding raw trace): {:.2} KiB", self.memory as f64 / 1024.0)?;
        writeln!(out, "    Average memory usage per item (excluding raw trace): {per_item:.2} bytes\n")?;
        writeln!(out, "  Timing for this thread:")?;
        writeln!(out, "    Decoding instructions: {:.2}s\n", self.seconds)?;
        writeln!(out, "  Timing for global tasks:\n")?;
        writeln!(out, "  Events:")?;
        writeln!(out, "    Number of individual events: {}", self.events())?;
        for (name, n) in &self.events {
            writeln!(out, "      {name}: {n}")?;
        }
        writeln!(out, "\n  Errors:")?;
        writeln!(out, "    Number of individual errors: {}", self.errors())?;
        writeln!(out, "      Number of fatal errors: 0")?;
        for (kind, n) in &self.libipt_errors {
            writeln!(out, "     Number of libipt errors of kind [{kind}]: {n}")?;
        }
        writeln!(out, "      Number of other errors: {}", self.other_errors)
    }

    /// LLDB's `--json` object.
    fn json(&self) -> serde_json::Value {
        let per_item = if self.items == 0 { 0.0 } else { self.memory as f64 / self.items as f64 };
        let counts = |counts: &[(&str, usize)]| serde_json::Value::Object(counts.iter().map(|(k, n)| (k.to_string(), (*n).into())).collect());
        serde_json::json!({
            "traceTechnology": "intel-pt",
            "threadStats": {
                "tid": self.tid,
                "traceItemsCount": self.items,
                "memoryUsage": {"totalInBytes": self.memory.to_string(), "avgPerItemInBytes": per_item},
                "timingInSeconds": {"Decoding instructions": self.seconds},
                "events": {"totalCount": self.events(), "individualCounts": counts(&self.events)},
                "errors": {"totalCount": self.errors(), "libiptErrors": counts(&self.libipt_errors), "fatalErrors": 0, "otherErrors": self.other_errors},
            },
            "globalStats": {"timingInSeconds": {}},
        })
    }
}

/// LLDB's `thread trace dump info` (text, or its `--json`) for the threads
/// at these positions of the bundle's thread list: the layout and counts
/// LLDB prints; the memory and time figures are retrace's own.
pub fn write_lldb_info(decoded: &bundle::DecodedBundle, threads: &[usize], json: bool, out: &mut impl Write) -> Result<(), CliError> {
    for &position in threads {
        let stats = ThreadStats::of(decoded, position);
        if json {
            writeln!(out, "{}", serde_json::to_string_pretty(&stats.json()).expect("JSON"))?;
        } else {
            stats.write_text(out)?;
        }
    }
    Ok(())
}

