//! `retrace_native`: the decoder and the `retrace` CLI's dumps, for the
//! LLDB shim (`lldb-scripts/retrace.py`).
//!
//! A [`Bundle`] is an opened LLDB trace bundle whose threads are decoded
//! once, on first use, and kept. Its dumps are written by the very code of
//! `retrace dump instructions` and `retrace dump function-calls`, to a
//! string or, for LLDB's `-F`, to a file. Errors are Python exceptions
//! carrying the CLI's message.

#![deny(missing_docs)]
#![deny(missing_debug_implementations)]

use std::path::PathBuf;

use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use retrace_plugin::bundle::DecodedBundle;
use retrace_plugin::cli::error::CliError;
use retrace_plugin::cli::output::{BulkOutput, Sink};
use retrace_plugin::cli::{calls, dump};

/// An LLDB trace bundle (`trace.json` and what it lists), decoded lazily.
#[pyclass(frozen)]
struct Bundle {
    /// Locked while a dump runs: the symbolizer's lazily parsed debug info
    /// is not shared between threads.
    decoded: std::sync::Mutex<DecodedBundle>,
}

fn error(error: CliError) -> PyErr {
    match error {
        CliError::Message(message) => PyValueError::new_err(message),
        other => PyOSError::new_err(other.to_string()),
    }
}

/// The output a dump goes to: a file (created or truncated) or memory.
fn output(file: Option<PathBuf>) -> PyResult<BulkOutput> {
    Ok(BulkOutput::new(match file {
        Some(path) => Sink::File(std::fs::File::create(&path).map_err(|e| PyOSError::new_err(format!("{}: {e}", path.display())))?),
        None => Sink::Memory(Vec::new()),
    }))
}

/// The JSON layout a dump's `json` argument names: None, "compact" (LLDB's
/// `-j`) or "pretty" (`-J`).
fn json_style(json: Option<&str>) -> PyResult<Option<dump::JsonStyle>> {
    match json {
        None => Ok(None),
        Some("compact") => Ok(Some(dump::JsonStyle::Compact)),
        Some("pretty") => Ok(Some(dump::JsonStyle::Pretty)),
        Some(other) => Err(PyValueError::new_err(format!("json must be None, 'compact' or 'pretty', not {other:?}"))),
    }
}

/// LLDB writes a JSON dump to a file without a final newline.
fn end_json_file(file: Option<&std::path::Path>, json: bool) -> PyResult<()> {
    let Some(path) = file.filter(|_| json) else { return Ok(()) };
    let text = std::fs::read(path).map_err(|e| PyOSError::new_err(format!("{}: {e}", path.display())))?;
    if text.ends_with(b"\n") {
        std::fs::write(path, &text[..text.len() - 1]).map_err(|e| PyOSError::new_err(format!("{}: {e}", path.display())))?;
    }
    Ok(())
}

fn text(out: BulkOutput) -> PyResult<String> {
    let bytes = out.into_text().map_err(|e| PyOSError::new_err(e.to_string()))?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

impl Bundle {
    fn decoded(&self) -> std::sync::MutexGuard<'_, DecodedBundle> {
        // A panic while it was held left nothing half-written that a dump reads.
        self.decoded.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[pymethods]
impl Bundle {
    /// Opens `trace_json`. `lldb_quirks=False` leaves out LLDB 22's
    /// artifacts (see `retrace dump --help`); `allow_outside=True` reads
    /// the files it names outside its directory too (a bundle one wrote
    /// oneself that names modules in place).
    #[new]
    #[pyo3(signature = (trace_json, lldb_quirks = true, allow_outside = false))]
    fn open(py: Python<'_>, trace_json: PathBuf, lldb_quirks: bool, allow_outside: bool) -> PyResult<Bundle> {
        let reach = retrace_plugin::bundle::Reach::allowing_outside(allow_outside);
        let options = retrace_plugin::bundle::OpenOptions { flow: retrace_decoder::flow::FlowOptions { lldb_psb_slices: lldb_quirks }, reach };
        let decoded = py.detach(|| DecodedBundle::open(&trace_json, options, true)).map_err(|e| PyValueError::new_err(e.to_string()))?;
        Ok(Bundle { decoded: std::sync::Mutex::new(decoded) })
    }

    /// The processes: a list of dicts with `pid`, `triple`, `modules`
    /// (`path`, `systemPath`, `loadAddress`, `uuid`) and `threads` (`tid`,
    /// `index` as LLDB numbers it, `position` in the bundle's thread list).
    fn processes<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyDict>>> {
        let decoded = self.decoded();
        let loaded = &decoded.loaded;
        let mut processes = Vec::new();
        for (number, process) in loaded.processes.iter().enumerate() {
            let entry = PyDict::new(py);
            entry.set_item("pid", process.pid)?;
            let triple = loaded.description.processes.get(number).and_then(|p| p.triple.clone());
            entry.set_item("triple", triple)?;
            let mut modules = Vec::new();
            for module in &process.modules {
                let item = PyDict::new(py);
                item.set_item("path", module.path.to_string_lossy())?;
                item.set_item("systemPath", &module.system_path)?;
                item.set_item("loadAddress", module.load_address)?;
                item.set_item("uuid", module.uuid.as_deref())?;
                modules.push(item);
            }
            entry.set_item("modules", modules)?;
            let mut threads = Vec::new();
            for (position, thread) in loaded.threads.iter().enumerate().filter(|(_, t)| t.process == number) {
                let item = PyDict::new(py);
                item.set_item("tid", thread.tid)?;
                item.set_item("index", loaded.thread_index(thread))?;
                item.set_item("position", position)?;
                threads.push(item);
            }
            entry.set_item("threads", threads)?;
            processes.push(entry);
        }
        Ok(processes)
    }

    /// Dumps instructions as `retrace dump instructions` (LLDB's `thread
    /// trace dump instructions`) does. `threads`: positions in the bundle's
    /// thread list (None: all); `json`: None, "compact" or "pretty"; `file`:
    /// write there instead of returning the text. Returns the text ("" with
    /// a file) and, per thread dumped, (position, last item id gone over or
    /// None) for `-C`.
    #[pyo3(signature = (threads = None, forwards = false, count = 20, all = false, raw = false, events = false, only_events = false,
                        kinds = false, start_id = None, skip = 0, json = None, time = false, file = None))]
    #[allow(clippy::too_many_arguments)]
    fn dump_instructions(
        &self,
        py: Python<'_>,
        threads: Option<Vec<usize>>,
        forwards: bool,
        count: usize,
        all: bool,
        raw: bool,
        events: bool,
        only_events: bool,
        kinds: bool,
        start_id: Option<u64>,
        skip: u64,
        json: Option<&str>,
        time: bool,
        file: Option<PathBuf>,
    ) -> PyResult<(String, Vec<(usize, Option<u64>)>)> {
        let json = json_style(json)?;
        let args = dump::InstructionsArgs {
            forwards,
            all,
            count,
            raw,
            events,
            only_events,
            kinds,
            start_id,
            skip,
            threads,
            json,
            time,
        };
        let mut out = output(file.clone())?;
        let dumped = py.detach(|| dump::write_instructions(&self.decoded(), &args, &mut out)).map_err(error)?;
        let stops = dumped.iter().map(|d| (d.thread, d.last_id)).collect();
        let text = text(out)?;
        end_json_file(file.as_deref(), json.is_some())?;
        Ok((text, stops))
    }

    /// LLDB's `thread trace dump info` of the threads at these positions
    /// (text, or its JSON with `json=True`): its layout and counts, the
    /// memory and time figures retrace's own.
    #[pyo3(signature = (threads, json = false))]
    fn dump_info(&self, py: Python<'_>, threads: Vec<usize>, json: bool) -> PyResult<String> {
        let mut out = output(None)?;
        py.detach(|| dump::write_lldb_info(&self.decoded(), &threads, json, &mut out)).map_err(error)?;
        text(out)
    }

    /// Dumps function-call trees as `retrace dump function-calls` (LLDB's
    /// `thread trace dump function-calls`) does; `json`: None, "compact" or
    /// "pretty"; `file` as for `dump_instructions`.
    #[pyo3(signature = (threads = None, json = None, file = None))]
    fn dump_function_calls(&self, py: Python<'_>, threads: Option<Vec<usize>>, json: Option<&str>, file: Option<PathBuf>) -> PyResult<String> {
        let format = match json_style(json)? {
            None => calls::Format::Text,
            Some(dump::JsonStyle::Compact) => calls::Format::Json,
            Some(dump::JsonStyle::Pretty) => calls::Format::PrettyJson,
        };
        let mut out = output(file.clone())?;
        py.detach(|| calls::write_function_calls(&self.decoded(), threads.as_deref(), format, &mut out)).map_err(error)?;
        let text = text(out)?;
        end_json_file(file.as_deref(), !matches!(format, calls::Format::Text))?;
        Ok(text)
    }
}

/// Writes the bundle description `description` (JSON text, as LLDB's
/// `trace.json` holds it) to `path` through the decoder's schema, the one
/// every reader of bundles reads: what does not fit it is a `ValueError`,
/// never a file LLDB would refuse.
#[pyfunction]
fn write_trace_json(path: PathBuf, description: &str) -> PyResult<()> {
    let bundle = retrace_decoder::bundle::TraceBundle::from_json(description).map_err(PyValueError::new_err)?;
    std::fs::write(&path, bundle.to_json()).map_err(|e| PyOSError::new_err(format!("writing {}: {e}", path.display())))
}

/// A module's line tables read as GDB 13 reads them (the decoder's
/// `symbols::gdb_lines`), for the shim's reverse stepping by GDB's rules.
#[pyclass(frozen)]
#[derive(Debug)]
struct LineTable {
    table: retrace_decoder::symbols::gdb_lines::GdbLineTable,
}

#[pymethods]
impl LineTable {
    /// The tables of the ELF file at `path` (its `.debug_line`); empty
    /// where it cannot be read or has none.
    #[new]
    fn open(py: Python<'_>, path: PathBuf) -> LineTable {
        let table = py.detach(|| std::fs::read(&path).map(|data| retrace_decoder::symbols::gdb_lines::GdbLineTable::from_elf(&data)).unwrap_or_default());
        LineTable { table }
    }

    /// Whether no line was read.
    fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    /// GDB's `find_pc_line` at file address `pc`: (start, end or None,
    /// file or None, line (0: none), is_stmt).
    fn find_pc_line(&self, pc: u64) -> (u64, Option<u64>, Option<String>, u64, bool) {
        let line = self.table.find_pc_line(pc);
        (line.pc, line.end, line.file, line.line, line.is_stmt)
    }
}

/// The module.
#[pymodule]
fn retrace_native(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_class::<Bundle>()?;
    module.add_class::<LineTable>()?;
    module.add_function(wrap_pyfunction!(write_trace_json, module)?)?;
    Ok(())
}
