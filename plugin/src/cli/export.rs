//! `retrace export chrome|perfetto`: a trace's function calls as Chrome
//! trace-event JSON (`{"traceEvents": [...]}`), which Perfetto UI and
//! chrome://tracing open: per thread, one complete (`X`) slice per call,
//! nested by time; instants for events.

use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use retrace_decoder::calls::CallForest;
use retrace_decoder::flow::{FlowOptions, Item};
use retrace_decoder::wallclock::WallClock;
use serde_json::{json, Value};

use super::calls::{thread_forest, ContextTable};
use super::{xray, CliError};
use crate::bundle;

/// Output flavour (both are the Chrome trace-event format).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Chrome trace-event JSON.
    Chrome,
    /// The same JSON, which Perfetto UI imports.
    Perfetto,
}

/// Writes the timeline of `input` to `output`.
pub fn run(_format: Format, input: &Path, output: &Path, binaries: &[PathBuf], options: FlowOptions) -> Result<ExitCode, CliError> {
    let events = if super::is_xray_log(input) {
        xray::chrome_events(input, binaries)?
    } else if binaries.is_empty() {
        pt_events(input, options)?
    } else {
        return Err(CliError::Message(format!("{}: not an XRay log (--binary is for XRay logs)", input.display())));
    };
    let file = std::fs::File::create(output).map_err(CliError::file(output))?;
    let mut out = BufWriter::new(file);
    let document = json!({ "traceEvents": events, "displayTimeUnit": "ns" });
    serde_json::to_writer(&mut out, &document).map_err(|e| CliError::Message(format!("{}: {e}", output.display())))?;
    out.flush().map_err(CliError::file(output))?;
    tracing::info!(events = document["traceEvents"].as_array().map_or(0, |a| a.len()), path = %output.display(), "timeline written");
    Ok(ExitCode::SUCCESS)
}

/// Slices of an Intel PT bundle: the calls of `dump function-calls`, each
/// from its first to its last item. Times are LLDB's (`dump instructions
/// -t`) in µs when the bundle has timing; otherwise the item id is the time
/// in µs.
fn pt_events(trace_json: &Path, options: FlowOptions) -> Result<Vec<Value>, CliError> {
    let loaded = bundle::load(trace_json).map_err(|e| CliError::Message(e.to_string()))?;
    let mut threads = Vec::new();
    for thread in &loaded.threads {
        let (forest, table, history) = thread_forest(&loaded, thread, options);
        let items: Vec<Item> = history.items().collect();
        threads.push((thread.tid, forest, table, items));
    }
    let conversion = loaded.description.tsc_perf_zero_conversion.clone();
    let begin = threads.iter().filter_map(|(_, _, _, items)| WallClock::first_tsc(items)).min();
    let pid = loaded.description.processes.first().map(|p| p.pid).unwrap_or(0);
    let mut events = Vec::new();
    for (tid, forest, table, items) in &threads {
        let clock = conversion.as_ref().map(|c| WallClock::new(items, c));
        let micros = |id: u64| -> f64 {
            match (&clock, begin) {
                (Some(clock), Some(begin)) => clock.time(id as usize, begin).map(|ns| ns / 1000.0).unwrap_or(id as f64),
                _ => id as f64,
            }
        };
        events.push(json!({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": format!("thread {tid}")}}));
        for (index, call) in forest.calls.iter().enumerate() {
            let (Some(first), Some(last)) = (call.segments.first(), call.segments.last()) else { continue };
            let (start, end) = (first_id(forest, index).unwrap_or(first.first), last.last);
            let name = if call.is_error { "<tracing errors>".to_string() } else { function_name(table, first.tags.0) };
            events.push(json!({
                "ph": "X",
                "name": name,
                "pid": pid,
                "tid": tid,
                "ts": micros(start),
                "dur": (micros(end) - micros(start)).max(0.0),
                "args": {"firstId": start, "lastId": end},
            }));
        }
    }
    Ok(events)
}

/// The first item of a call including its untraced prefix's calls.
fn first_id(forest: &CallForest, call: usize) -> Option<u64> {
    let c = &forest.calls[call];
    match c.untraced_prefix {
        Some(prefix) => first_id(forest, prefix),
        None => c.segments.first().map(|s| s.first),
    }
}

fn function_name(table: &ContextTable, tag: u32) -> String {
    let context = table.get(tag);
    match (&context.module, &context.function) {
        (Some(module), Some((name, _))) => format!("{module}`{}", context.inlined.as_ref().unwrap_or(name)),
        (Some(module), None) => format!("{module}`(none)"),
        _ => "(none)".to_string(),
    }
}
