//! `retrace dump instructions`: the instruction flow of a trace bundle, in
//! the layout of LLDB's `thread trace dump instructions`.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use std::collections::HashMap;

use retrace_decoder::flow::Item;
use retrace_decoder::history::History;
use retrace_decoder::symbols::SymbolContext;
use retrace_decoder::wallclock::WallClock;

use super::llvm_mc;
use crate::cli::error::CliError;

mod disassembly;
mod info;

use disassembly::{disassemble, disassemble_bytes, Disassembled};
pub use info::{info, write_lldb_info};
use crate::bundle;

/// What `dump instructions` shows: LLDB's options of `thread trace dump
/// instructions`.
#[derive(Debug)]
pub struct InstructionsArgs {
    /// Oldest first (LLDB's `-f`; default newest first).
    pub forwards: bool,
    /// No count limit (`-a`).
    pub all: bool,
    /// How many instructions per thread (`-c`).
    pub count: usize,
    /// Addresses only (`-r`).
    pub raw: bool,
    /// Include events (`-e`).
    pub events: bool,
    /// Only events, and errors, with no count limit (`-E`).
    pub only_events: bool,
    /// Each instruction's control-flow kind (`-k`).
    pub kinds: bool,
    /// Start at this item id (`-i`) instead of the first or last item.
    pub start_id: Option<u64>,
    /// Items (instructions, events and errors alike) skipped in the dump's
    /// direction before the first shown (`-s`).
    pub skip: u64,
    /// The threads dumped, as positions in the bundle's thread list; `None`:
    /// every thread.
    pub threads: Option<Vec<usize>>,
    /// LLDB's `-j` (one line) or `-J` (indented) JSON instead of text.
    pub json: Option<JsonStyle>,
    /// Each item's time (LLDB's `-t`).
    pub time: bool,
}

/// How JSON is laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JsonStyle {
    /// One line (LLDB's `-j`).
    Compact,
    /// Two-space indent (LLDB's `-J`).
    Pretty,
}

/// Where the dump of one thread stopped.
#[derive(Debug, Clone, Copy)]
pub struct DumpedThread {
    /// The thread's position in the bundle's thread list.
    pub thread: usize,
    /// The last item the dump went over, shown or not (`None`: none): LLDB's
    /// `-C` continues from the item after it.
    pub last_id: Option<u64>,
}

/// The positions of the threads with id `tid` (every thread for `None`),
/// or why there is none.
pub fn threads_with_tid(loaded: &bundle::LoadedBundle, tid: Option<u64>, trace_json: &Path) -> Result<Option<Vec<usize>>, CliError> {
    let Some(tid) = tid else { return Ok(None) };
    let positions: Vec<usize> = (0..loaded.threads.len()).filter(|&i| loaded.threads[i].tid == tid).collect();
    if positions.is_empty() {
        return Err(CliError::Message(format!("no thread {tid} in {}", trace_json.display())));
    }
    Ok(Some(positions))
}

/// `retrace dump instructions`.
pub fn instructions(trace_json: &Path, tid: Option<u64>, options: bundle::OpenOptions, mut args: InstructionsArgs) -> Result<ExitCode, CliError> {
    let decoded = bundle::DecodedBundle::open(trace_json, options, false).map_err(|e| CliError::Message(e.to_string()))?;
    args.threads = threads_with_tid(&decoded.loaded, tid, trace_json)?;
    let mut out = crate::cli::output::bulk_stdout();
    write_instructions(&decoded, &args, &mut out)?;
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

/// Writes the dump of `args.threads` to `out`, as LLDB's `thread trace dump
/// instructions` prints it (the image headings of a bundle with several
/// programs aside), and says where each thread's dump stopped.
pub fn write_instructions(decoded: &bundle::DecodedBundle, args: &InstructionsArgs, out: &mut crate::cli::output::BulkOutput) -> Result<Vec<DumpedThread>, CliError> {
    let loaded = &decoded.loaded;
    let chosen = |position: usize| args.threads.as_ref().is_none_or(|threads| threads.contains(&position));
    // With times: every thread decoded first, as LLDB's time zero is the
    // earliest first TSC of all threads.
    let mut histories: Vec<Option<std::borrow::Cow<'_, History>>> = (0..loaded.threads.len()).map(|i| args.time.then(|| decoded.history(i))).collect();
    let conversion = loaded.description.tsc_perf_zero_conversion.clone().filter(|_| args.time);
    let begin = conversion.as_ref().and_then(|c| {
        let first = histories.iter().flatten().filter_map(|h| WallClock::first_tsc_of(h)).min()?;
        Some(c.to_nanos(first))
    });
    let mut dumped = Vec::new();
    for (index, thread) in loaded.threads.iter().enumerate() {
        if !chosen(index) {
            continue;
        }
        // The selection streams from the compact history: no record per
        // item is kept, only the items shown (at most `-c` of them, with the
        // events and errors between); times come from the clock ticks alone.
        let history = histories[index].take().unwrap_or_else(|| decoded.history(index));
        if args.start_id.is_some_and(|id| id >= history.items_len()) {
            return Err(CliError::Message("invalid instruction id".into()));
        }
        let selection = select_streaming(&history, args);
        dumped.push(DumpedThread { thread: index, last_id: selection.last_id });
        let clock = conversion.as_ref().map(|c| WallClock::of_history(&history, c));
        drop(history);
        let process = &loaded.processes[thread.process];
        if let (Some(heading), None) = (image_heading(loaded, thread), args.json) {
            writeln!(out, "{heading}")?;
        }
        let time = |id: usize| -> Option<Option<f64>> {
            args.time.then(|| Some(clock.as_ref()?.time(id, begin?)).flatten())
        };
        match args.json {
            Some(style) => {
                let mut contexts = Contexts::default();
                let array = serde_json::Value::Array(
                    selection.items.iter().map(|(id, item)| item_json(process, &mut contexts, *id, item, args, time(*id))).collect(),
                );
                match style {
                    JsonStyle::Compact => writeln!(out, "{array}")?,
                    JsonStyle::Pretty => writeln!(out, "{}", serde_json::to_string_pretty(&array).expect("JSON"))?,
                }
            }
            None => {
                writeln!(out, "thread #{}: tid = {}", loaded.thread_index(thread), thread.tid)?;
                write_text(out, process, &selection.items, args, &time)?;
                if selection.exhausted {
                    writeln!(out, "    no more data")?;
                }
            }
        }
    }
    Ok(dumped)
}

/// `image #N: pid = P` before the first thread of each program image, when
/// the bundle holds several (a process that exec'd: one bundle per program).
pub(super) fn image_heading(loaded: &bundle::LoadedBundle, thread: &bundle::LoadedThread) -> Option<String> {
    (loaded.processes.len() > 1 && loaded.thread_index(thread) == 1)
        .then(|| format!("image #{}: pid = {}", thread.process, loaded.processes[thread.process].pid))
}

/// The items a dump shows, in dump order, with their ids.
struct Selection {
    items: Vec<(usize, Item)>,
    /// The end (or the beginning, backwards) of the trace was reached.
    exhausted: bool,
    /// The last item gone over, shown or not.
    last_id: Option<u64>,
}

/// The items LLDB shows for these options. LLDB's dumper stops as soon as
/// it has shown `count` instructions (events and errors beyond the last one
/// are not shown) and says `no more data` when no item at all, shown or
/// not, follows in its direction. Errors are shown even with `-E`.
fn take_shown(order: impl Iterator<Item = (usize, Item)>, args: &InstructionsArgs) -> Selection {
    let mut items = Vec::new();
    let mut shown = 0usize;
    let mut last_id = None;
    for (id, item) in order {
        if !args.all && shown == args.count {
            return Selection { items, exhausted: false, last_id };
        }
        last_id = Some(id as u64);
        match item {
            Item::Event(_) if !(args.events || args.only_events) => continue,
            Item::Instruction { .. } if args.only_events => continue,
            Item::Instruction { .. } => shown += 1,
            _ => {}
        }
        items.push((id, item));
    }
    Selection { items, exhausted: true, last_id }
}

/// [`take_shown`] over a decoded history: forwards from the first item (or
/// `-i`), backwards from the last (read back a chunk at a time), after
/// `-s` items, keeping only the items shown.
fn select_streaming(history: &History, args: &InstructionsArgs) -> Selection {
    let to_usize = |(id, item): (u64, Item)| (id as usize, item);
    let skip = usize::try_from(args.skip).unwrap_or(usize::MAX);
    match (args.forwards, args.start_id) {
        (true, None) => take_shown(history.items_with_ids().skip(skip).map(to_usize), args),
        (true, Some(start)) => take_shown(history.items_with_ids().skip_while(|(id, _)| *id < start).skip(skip).map(to_usize), args),
        (false, None) => take_shown(history.items_rev().skip(skip).map(to_usize), args),
        (false, Some(start)) => take_shown(history.items_rev().skip_while(|(id, _)| *id > start).skip(skip).map(to_usize), args),
    }
}

/// LLDB's text: symbol-context lines when the context changes (not with
/// `raw`), instruction, event and error lines.
fn write_text(
    out: &mut impl Write,
    loaded: &bundle::LoadedProcess,
    selected: &[(usize, Item)],
    args: &InstructionsArgs,
    time: &dyn Fn(usize) -> Option<Option<f64>>,
) -> std::io::Result<()> {
    let mut previous_was_error = false;
    let mut contexts = Contexts::default();
    for (id, item) in selected {
        let id = *id;
        // `-t`: `[<ns> ns] ` or `[unavailable] ` after the id.
        let stamp = match time(id) {
            None => String::new(),
            Some(Some(ns)) => format!("[{ns:.3} ns] "),
            Some(None) => "[unavailable] ".into(),
        };
        match item {
            Item::Instruction { ip } => {
                if args.raw {
                    writeln!(out, "    {id}: {stamp}{ip:#018x}")?;
                } else {
                    let (context, new_scope) = contexts.at(loaded, *ip);
                    if new_scope {
                        writeln!(out, "  {}", context.describe(*ip))?;
                    }
                    let instruction = contexts.disassemble(loaded, *ip);
                    let text = &instruction.text;
                    if args.kinds {
                        writeln!(out, "    {id}: {stamp}{ip:#018x}    {:<12}{text}", instruction.kind)?;
                    } else {
                        writeln!(out, "    {id}: {stamp}{ip:#018x}    {text}")?;
                    }
                }
            }
            Item::Event(event) => writeln!(out, "    {id}: {stamp}(event) {event}")?,
            Item::Error { error, .. } => {
                if !previous_was_error {
                    writeln!(out, "    ...missing instructions")?;
                }
                writeln!(out, "    {id}: {stamp}(error) {error}")?;
            }
        }
        previous_was_error = matches!(item, Item::Error { .. });
    }
    Ok(())
}

/// The symbol contexts of a thread's instructions in order, as LLDB's dumper
/// finds them: it keeps the previous instruction's context while the address
/// stays in its range (line-table row, else symbol), and looks it up afresh
/// otherwise (looked-up contexts cached by address).
#[derive(Default)]
struct Contexts {
    previous: Option<SymbolContext>,
    looked_up: HashMap<u64, SymbolContext>,
    /// The instruction list LLDB's dumper took the previous instruction's
    /// disassembly from, and the function lists made so far.
    list: Option<std::sync::Arc<InstructionList>>,
    function_lists: HashMap<u64, std::sync::Arc<InstructionList>>,
    /// Instructions printed so far, by address and the end of the bytes
    /// they were printed from (a loop prints its instructions once).
    printed: HashMap<(u64, u64), Disassembled>,
}

/// Instructions LLDB disassembled in one go: where each starts, and where
/// the bytes it disassembled end (an instruction running past it is
/// disassembled from the bytes left: `<unknown>`, or a lone prefix such as
/// `rex64`).
struct InstructionList {
    starts: std::collections::HashSet<u64>,
    end: u64,
}

/// The most bytes an x86 instruction takes: LLDB's disassembly range for
/// one instruction outside a function with debug info.
const MAX_INSTRUCTION: u64 = 15;

/// LLVM's linear sweep of `[start, end)` as LLDB's `DisassembleRange`
/// makes it: an instruction that does not decode in the bytes left takes
/// one byte.
fn sweep(image: &retrace_decoder::image::Image, start: u64, end: u64) -> InstructionList {
    use retrace_decoder::image::Memory;
    let mut bytes = vec![0u8; end.saturating_sub(start).min(1 << 20) as usize];
    let n = image.read(start, &mut bytes);
    let mut starts = std::collections::HashSet::new();
    let mut at = 0;
    while at < n {
        starts.insert(start + at as u64);
        at += llvm_mc::print(&bytes[at..n], start + at as u64).map_or(1, |printed| printed.length.max(1));
    }
    InstructionList { starts, end: start + n as u64 }
}

impl Contexts {
    /// The context of the instruction at `ip`, and whether LLDB prints a
    /// context line before it (its scope is not the previous one's).
    fn at(&mut self, loaded: &bundle::LoadedProcess, ip: u64) -> (&SymbolContext, bool) {
        let kept = self.previous.as_ref().is_some_and(|p| p.holds(ip));
        let mut new_scope = false;
        if !kept {
            let context = self.looked_up.entry(ip).or_insert_with(|| loaded.symbols.lookup(ip)).clone();
            new_scope = !self.previous.as_ref().is_some_and(|p| p.same_scope(&context));
            self.previous = Some(context);
        }
        (self.previous.as_ref().expect("set above"), new_scope)
    }

    /// The instruction at `ip` as LLDB's trace dumper shows it. It takes the
    /// disassembly from the list it used for the previous instruction when
    /// that holds `ip`, else from the list of the whole function when `ip`
    /// is in one with debug info, else from a fresh list of the
    /// [`MAX_INSTRUCTION`] bytes at `ip` (`TraceDumper`'s
    /// `CalculateDisass`); an instruction a list cuts short is printed from
    /// the bytes the list has. Reproduced with LLVM's printer only.
    fn disassemble(&mut self, loaded: &bundle::LoadedProcess, ip: u64) -> Disassembled {
        if !llvm_mc::available() {
            return disassemble(&loaded.image, &loaded.symbols, ip);
        }
        let end = self.list_end(loaded, ip).min(ip.saturating_add(MAX_INSTRUCTION));
        self.printed
            .entry((ip, end))
            .or_insert_with(|| disassemble_bytes(&loaded.image, &loaded.symbols, ip, end.saturating_sub(ip) as usize))
            .clone()
    }

    /// The end of the bytes of the list LLDB disassembles `ip` from.
    fn list_end(&mut self, loaded: &bundle::LoadedProcess, ip: u64) -> u64 {
        if let Some(list) = self.list.as_ref().filter(|list| list.starts.contains(&ip)) {
            return list.end;
        }
        if loaded.symbols.lookup(ip).debug_function {
            if let Some((start, end)) = loaded.symbols.function_range(ip) {
                let list = self.function_lists.entry(start).or_insert_with(|| std::sync::Arc::new(sweep(&loaded.image, start, end))).clone();
                if list.starts.contains(&ip) {
                    self.list = Some(list);
                    return self.list.as_ref().map_or(ip, |list| list.end);
                }
            }
        }
        let list = std::sync::Arc::new(sweep(&loaded.image, ip, ip + MAX_INSTRUCTION));
        let end = list.end;
        self.list = Some(list);
        end
    }
}

/// One item in LLDB's JSON: `id`, then for an instruction `loadAddress`
/// and (unless `raw`) `module`, `symbol`, `mnemonic` and, with a line,
/// `source`/`line`/`column`; for an event its name and extra key; for an
/// error its message.
fn item_json(
    loaded: &bundle::LoadedProcess,
    contexts: &mut Contexts,
    id: usize,
    item: &Item,
    args: &InstructionsArgs,
    time: Option<Option<f64>>,
) -> serde_json::Value {
    use retrace_decoder::flow::Event;
    use serde_json::json;
    let mut object = serde_json::Map::new();
    object.insert("id".into(), id.into());
    if let Some(time) = time {
        // A string with six decimals, as LLDB writes it (null: unavailable).
        object.insert("timestamp_ns".into(), json!(time.map(|ns| format!("{ns:.6}"))));
    }
    match item {
        Item::Instruction { ip } => {
            object.insert("loadAddress".into(), format!("{ip:#x}").into());
            if !args.raw {
                let instruction = contexts.disassemble(loaded, *ip);
                let (context, _) = contexts.at(loaded, *ip);
                let symbol = context.symbol_name();
                object.insert("module".into(), json!(context.module.as_deref()));
                object.insert("symbol".into(), json!(symbol.as_deref()));
                object.insert("mnemonic".into(), json!(instruction.mnemonic));
                if args.kinds {
                    object.insert("controlFlowKind".into(), instruction.kind.into());
                }
                if let (Some((_, line, column)), Some(source)) = (&context.line, &context.source) {
                    object.insert("source".into(), json!(&**source));
                    object.insert("line".into(), json!(line));
                    object.insert("column".into(), json!(column));
                }
            }
        }
        Item::Event(event) => {
            let extra = match event {
                Event::ClockTick(tsc) => Some(("hwClock", json!(tsc))),
                Event::SyncPoint(offset) => Some(("syncPointMetadata", json!(format!("offset = 0x0x{offset:x}")))),
                Event::HardwareDisabled | Event::SoftwareDisabled => None,
            };
            object.insert("event".into(), event.name().into());
            if let Some((key, value)) = extra {
                object.insert(key.into(), value);
            }
        }
        Item::Error { error, .. } => {
            object.insert("error".into(), error.to_string().into());
        }
    }
    serde_json::Value::Object(object)
}
