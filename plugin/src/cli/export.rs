//! `retrace export chrome|perfetto`: a trace's function calls as Chrome
//! trace-event JSON (`{"traceEvents": [...]}`), which Perfetto UI and
//! chrome://tracing open: per thread, one complete (`X`) slice per call,
//! nested by time; instants for events.

use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use retrace_decoder::calls::CallEvent;
use retrace_decoder::history::History;
use retrace_decoder::wallclock::WallClock;
use serde_json::{json, Value};

use super::calls::{call_name, track_calls, BlockSites, ContextTable};
use super::xray;
use crate::cli::error::CliError;
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
pub fn run(_format: Format, input: &Path, output: &Path, binaries: &[PathBuf], options: bundle::OpenOptions) -> Result<ExitCode, CliError> {
    let xray = xray::is_xray_log(input);
    if !xray && !binaries.is_empty() {
        return Err(CliError::Message(format!("{}: not an XRay log (--binary is for XRay logs)", input.display())));
    }
    let file = std::fs::File::create(output).map_err(CliError::file(output))?;
    let mut out = EventWriter { out: BufWriter::new(file), count: 0 };
    let written = (|| -> Result<(), CliError> {
        out.out.write_all(b"{\"traceEvents\":[")?;
        if xray {
            for event in xray::chrome_events(input, binaries)? {
                out.event(&event)?;
            }
        } else {
            pt_events(input, options, &mut out)?;
        }
        out.out.write_all(b"],\"displayTimeUnit\":\"ns\"}")?;
        out.out.flush()?;
        Ok(())
    })();
    written.map_err(|e| match e {
        CliError::Output(source) => CliError::File { path: output.to_path_buf(), source },
        e => e,
    })?;
    tracing::info!(events = out.count, path = %output.display(), "timeline written");
    Ok(ExitCode::SUCCESS)
}

/// Trace events written one by one into the `traceEvents` array.
struct EventWriter<W: Write> {
    out: W,
    count: usize,
}

impl<W: Write> EventWriter<W> {
    fn event(&mut self, event: &Value) -> std::io::Result<()> {
        if self.count > 0 {
            self.out.write_all(b",")?;
        }
        self.count += 1;
        serde_json::to_writer(&mut self.out, event).map_err(std::io::Error::from)
    }
}

/// Slices of an Intel PT bundle: the calls of `dump function-calls`, each
/// from its first to its last item (a root the trace started inside from
/// the first item of its untraced prefix), written as the calls end. Times
/// are LLDB's (`dump instructions -t`) in µs when the bundle has timing;
/// otherwise the item id is the time in µs.
fn pt_events(trace_json: &Path, options: bundle::OpenOptions, out: &mut EventWriter<impl Write>) -> Result<(), CliError> {
    let decoded = bundle::DecodedBundle::open(trace_json, options, false).map_err(|e| CliError::Message(e.to_string()))?;
    let loaded = &decoded.loaded;
    let histories: Vec<std::borrow::Cow<'_, History>> = (0..loaded.threads.len()).map(|position| decoded.history(position)).collect();
    let conversion = loaded.description.tsc_perf_zero_conversion.clone();
    let begin = histories.iter().filter_map(|history| WallClock::first_tsc_of(history)).min();
    let pid = loaded.description.processes.first().map(|p| p.pid).unwrap_or(0);
    for (thread, history) in loaded.threads.iter().zip(&histories) {
        let tid = thread.tid;
        let clock = conversion.as_ref().map(|c| WallClock::of_history(history, c));
        let micros = |id: u64| -> f64 {
            match (&clock, begin) {
                (Some(clock), Some(begin)) => clock.time(id as usize, begin).map(|ns| ns / 1000.0).unwrap_or(id as f64),
                _ => id as f64,
            }
        };
        out.event(&json!({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": format!("thread {tid}")}}))?;
        let slice = |contexts: &ContextTable, call: OpenCall| {
            let name = if call.is_error { "<tracing errors>".to_string() } else { call_name(contexts.get(call.name_tag)) };
            let (start, end) = (call.start, call.last);
            json!({
                "ph": "X",
                "name": name,
                "pid": pid,
                "tid": tid,
                "ts": micros(start),
                "dur": (micros(end) - micros(start)).max(0.0),
                "args": {"firstId": start, "lastId": end},
            })
        };
        let mut slices = Slices::default();
        let mut sites = BlockSites::new(&loaded, thread);
        track_calls(history, &mut sites, &mut |event, contexts| {
            for call in slices.event(event) {
                out.event(&slice(contexts, call))?;
            }
            Ok(())
        })?;
        let mut ended = Vec::new();
        slices.close_to(0, &mut ended);
        for call in ended {
            out.event(&slice(&sites.contexts, call))?;
        }
    }
    Ok(())
}

/// A call being followed for its slice.
#[derive(Debug, Clone, Copy)]
struct OpenCall {
    /// Its first item (a root's: its untraced prefix's first).
    start: u64,
    /// Its last item so far.
    last: u64,
    /// The tag of its first instruction (names it).
    name_tag: u32,
    is_error: bool,
}

/// The calls of a thread from [`CallEvent`]s, each given back when it ends.
#[derive(Default)]
struct Slices {
    open: Vec<OpenCall>,
    /// The next segment is a new call's (the last one nested).
    nesting: bool,
    /// The next root continues a tree that started at this item.
    reroot_from: Option<u64>,
    error_tree: bool,
}

impl Slices {
    fn event(&mut self, event: CallEvent) -> Vec<OpenCall> {
        let mut ended = Vec::new();
        match event {
            CallEvent::Tree { is_error } => {
                self.close_to(0, &mut ended);
                self.error_tree = is_error;
                self.reroot_from = None;
                self.nesting = false;
            }
            CallEvent::Reroot => {
                self.reroot_from = self.open.first().map(|root| root.start);
                self.close_to(0, &mut ended);
                self.nesting = false;
            }
            CallEvent::Segment { depth, segment, nests } => {
                if !self.nesting {
                    self.close_to(depth as usize + 1, &mut ended);
                }
                if self.nesting || self.open.is_empty() {
                    let start = if self.open.is_empty() { self.reroot_from.take().unwrap_or(segment.first) } else { segment.first };
                    self.open.push(OpenCall { start, last: segment.last, name_tag: segment.tags.0, is_error: self.error_tree });
                }
                self.open.last_mut().expect("a call is open").last = segment.last;
                self.nesting = nests;
            }
        }
        ended
    }

    fn close_to(&mut self, depth: usize, ended: &mut Vec<OpenCall>) {
        while self.open.len() > depth {
            ended.push(self.open.pop().expect("open"));
        }
    }
}
