//! `retrace dump instructions`: the instruction flow of a trace bundle, in
//! the layout of LLDB's `thread trace dump instructions`.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use std::collections::HashMap;

use retrace_decoder::flow::{FlowOptions, Item};
use retrace_decoder::history::{Extra, History};
use retrace_decoder::symbols::{signed_offset, SymbolContext, Symbolizer};
use retrace_decoder::wallclock::WallClock;

use super::llvm_mc;
use super::CliError;
use crate::bundle;

/// What `dump instructions` shows: LLDB's options of `thread trace dump
/// instructions`.
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
pub fn instructions(trace_json: &Path, tid: Option<u64>, options: FlowOptions, mut args: InstructionsArgs) -> Result<ExitCode, CliError> {
    let decoded = bundle::DecodedBundle::open(trace_json, options, false).map_err(|e| CliError::Message(e.to_string()))?;
    args.threads = threads_with_tid(&decoded.loaded, tid, trace_json)?;
    let mut out = super::bulk_stdout();
    write_instructions(&decoded, &args, &mut out)?;
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

/// Writes the dump of `args.threads` to `out`, as LLDB's `thread trace dump
/// instructions` prints it (the image headings of a bundle with several
/// programs aside), and says where each thread's dump stopped.
pub fn write_instructions(decoded: &bundle::DecodedBundle, args: &InstructionsArgs, out: &mut super::BulkOutput) -> Result<Vec<DumpedThread>, CliError> {
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

/// One instruction as LLDB shows it.
#[derive(Clone)]
struct Disassembled {
    /// The mnemonic (`None`: the bytes are not an instruction).
    mnemonic: Option<String>,
    /// AT&T syntax, the mnemonic in 7 columns, and a comment naming branch
    /// targets and RIP-relative data.
    text: String,
    /// LLDB's control-flow kind (`-k`).
    kind: &'static str,
}

/// One instruction as LLDB prints it: AT&T syntax, the mnemonic in 7
/// columns, and a comment naming branch targets and RIP-relative data.
fn disassemble(image: &retrace_decoder::image::Image, symbols: &Symbolizer, ip: u64) -> Disassembled {
    disassemble_bytes(image, symbols, ip, MAX_INSTRUCTION as usize)
}

/// [`disassemble`] from at most `limit` bytes at `ip`.
fn disassemble_bytes(image: &retrace_decoder::image::Image, symbols: &Symbolizer, ip: u64, limit: usize) -> Disassembled {
    use iced_x86::{Decoder, DecoderOptions, Formatter, GasFormatter};
    use retrace_decoder::image::Memory;
    let mut bytes = [0u8; 15];
    let n = image.read(ip, &mut bytes[..limit.min(15)]);
    let mut decoder = Decoder::with_ip(64, &bytes[..n], ip, DecoderOptions::NONE);
    let insn = decoder.decode();
    if llvm_mc::available() {
        return disassemble_with_llvm(symbols, ip, &bytes[..n], &insn);
    }
    if insn.is_invalid() {
        return Disassembled { mnemonic: None, text: "<unknown>".into(), kind: "unknown" };
    }
    let mut formatter = GasFormatter::new();
    let options = formatter.options_mut();
    options.set_gas_show_mnemonic_size_suffix(true);
    options.set_space_after_operand_separator(true);
    options.set_uppercase_hex(false);
    options.set_branch_leading_zeros(false);
    options.set_small_hex_numbers_in_decimal(false);
    options.set_rip_relative_addresses(true);
    let mut mnemonic = String::new();
    let mut operands = String::new();
    formatter.format_mnemonic(&insn, &mut mnemonic);
    // Operand by operand: immediates are LLVM's, not iced's (below).
    let mut immediate_comment = None;
    for op in 0..formatter.operand_count(&insn) {
        if op > 0 {
            operands.push_str(", ");
        }
        match formatter.get_instruction_operand(&insn, op).ok().flatten().and_then(|i| llvm_immediate(&insn, i)) {
            Some(value) => {
                operands.push_str(&if value < 0 { format!("$-0x{:x}", value.unsigned_abs()) } else { format!("$0x{value:x}") });
                if !(-256..=255).contains(&value) {
                    // LLVM's own comments end with a space in LLDB's text
                    // (seen: `; imm = 0x401639 `), LLDB's symbol comments not.
                    immediate_comment = Some(if value == value as i16 as i64 {
                        format!("imm = 0x{:X} ", value as u16)
                    } else if value == value as i32 as i64 {
                        format!("imm = 0x{:X} ", value as u32)
                    } else {
                        format!("imm = 0x{:X} ", value as u64)
                    });
                }
            }
            None => {
                let _ = formatter.format_operand(&insn, &mut operands, op);
            }
        }
    }
    llvm_spelling(&insn, &mut mnemonic, &mut operands);
    let comment = symbolic_comment(symbols, ip, &insn).or(immediate_comment);
    Disassembled { text: lldb_layout(&mnemonic, &operands, comment), mnemonic: Some(mnemonic), kind: control_flow_kind(&bytes[..insn.len().min(n)]) }
}

/// LLDB's layout: the mnemonic in 7 columns (at least one space after it),
/// the operands in 25, then the comment.
fn lldb_layout(mnemonic: &str, operands: &str, comment: Option<String>) -> String {
    let width = if mnemonic.len() >= 7 { mnemonic.len() + 1 } else { 7 };
    match comment {
        Some(comment) => format!("{mnemonic:<width$}{operands:<25} ; {comment}"),
        None => format!("{mnemonic:<width$}{operands}"),
    }
}

/// LLDB's own comment: the function a branch goes to, the data a
/// RIP-relative operand names (`name + off`, or the segment's for an
/// address no section holds).
fn symbolic_comment(symbols: &Symbolizer, ip: u64, insn: &iced_x86::Instruction) -> Option<String> {
    use iced_x86::{OpKind, Register};
    if insn.op0_kind() == OpKind::NearBranch64 {
        branch_comment(symbols, ip, insn.near_branch_target())
    } else if insn.is_ip_rel_memory_operand() && insn.memory_base() == Register::RIP {
        let address = insn.ip_rel_memory_address();
        if symbols.lookup(address).function.is_some() {
            return branch_comment(symbols, ip, address);
        }
        // In a segment but in no section: the segment (no symbol).
        symbols.unsectioned(address).or_else(|| symbols.data_symbol(address)).map(|(name, offset)| {
            if offset == 0 {
                name.to_string()
            } else {
                format!("{name} + {offset}")
            }
        })
    } else {
        None
    }
}

/// The instruction as LLVM 22's printer gives it (see [`llvm_mc`]), with
/// LLDB's branch targets as addresses and its symbolic comments.
fn disassemble_with_llvm(symbols: &Symbolizer, ip: u64, bytes: &[u8], insn: &iced_x86::Instruction) -> Disassembled {
    let Some(printed) = llvm_mc::print(bytes, ip) else {
        // LLDB's text for bytes LLVM does not decode; the kind is still
        // read from the bytes.
        return Disassembled { mnemonic: Some(String::new()), text: lldb_layout("<unknown>", "", None), kind: control_flow_kind(bytes) };
    };
    let mut operands = printed.operands;
    if !insn.is_invalid() && insn.op0_kind() == iced_x86::OpKind::NearBranch64 {
        // The C API prints the displacement; LLDB's printer the target.
        let target = insn.near_branch_target();
        let displacement = target.wrapping_sub(ip.wrapping_add(printed.length as u64)) as i64;
        let relative = if displacement < 0 { format!("-0x{:x}", displacement.unsigned_abs()) } else { format!("0x{displacement:x}") };
        if let Some(head) = operands.strip_suffix(&relative) {
            operands = format!("{head}0x{target:x}");
        }
    }
    // LLDB's symbol lookup sees the operands LLVM decoded (none after a
    // lone `lock`).
    let own = if insn.is_invalid() || printed.length != insn.len() { None } else { symbolic_comment(symbols, ip, insn) };
    // Both: LLDB appends the printer's after its own.
    let comment = match (own, printed.comment.is_empty()) {
        (Some(own), false) => Some(format!("{own}, {}", printed.comment)),
        (Some(own), true) => Some(own),
        (None, false) => Some(printed.comment),
        (None, true) => None,
    };
    let kind = control_flow_kind(&bytes[..if insn.is_invalid() { bytes.len() } else { insn.len().min(bytes.len()) }]);
    Disassembled { text: lldb_layout(&printed.mnemonic, &operands, comment), mnemonic: Some(printed.mnemonic), kind }
}

/// LLDB's `InstructionControlFlowKind` of a 64-bit instruction's bytes, as
/// LLDB 22 classifies them: by the primary opcode, its map (one-byte, 0F,
/// 0F38/0F3A) and the ModR/M byte, after the legacy and REX prefixes. A
/// VEX or EVEX prefix gives the map from its map-select bits, and LLDB
/// reads an EVEX map-select of 1 as the one-byte map, so that e.g. the
/// EVEX `vmovdqu64` (opcode 7F) is a `cond jump` there: reproduced.
fn control_flow_kind(bytes: &[u8]) -> &'static str {
    let byte = |i: usize| bytes.get(i).copied().unwrap_or(0);
    let mut at = 0;
    while matches!(byte(at), 0x26 | 0x2e | 0x36 | 0x3e | 0x64 | 0x65 | 0x66 | 0x67 | 0xf0 | 0xf2 | 0xf3 | 0x40..=0x4f) {
        at += 1;
    }
    if at >= bytes.len() {
        return "unknown";
    }
    let (opcode, map, modrm) = match byte(at) {
        0xc5 => (byte(at + 2), 2, byte(at + 3)),
        0xc4 => (byte(at + 3), byte(at + 1) & 0x1f, byte(at + 4)),
        0x62 => (byte(at + 4), byte(at + 1) & 0x03, byte(at + 5)),
        0x0f => match byte(at + 1) {
            0x38 | 0x3a => (byte(at + 2), 3, byte(at + 3)),
            second if second & 0xf8 == 0x38 => (byte(at + 2), 0, byte(at + 3)),
            0x0f => (0x0f, 3, byte(at + 2)),
            second => (second, 2, byte(at + 2)),
        },
        first => (first, 1, byte(at + 1)),
    };
    match (map, opcode) {
        (3.., _) => "other",
        (1, 0x70..=0x7f | 0xe0..=0xe3) | (2, 0x80..=0x8f) => "cond jump",
        (1, 0xe8) => "call",
        (1, 0xe9 | 0xeb) => "jump",
        (1, 0xc2 | 0xc3) => "return",
        (1, 0xff) => match (modrm >> 3) & 7 {
            2 => "call",
            3 => "far call",
            4 => "jump",
            5 => "far jump",
            _ => "other",
        },
        (1, 0x9a | 0xcc | 0xcd | 0xce | 0xf1) | (2, 0x05 | 0x34) => "far call",
        (2, 0x01) if modrm == 0xc1 => "far call",
        (1, 0xcf | 0xca | 0xcb) | (2, 0x07 | 0x35) => "far return",
        (2, 0x01) if matches!(modrm, 0xc2 | 0xc3) => "far return",
        (1, 0xea) => "far jump",
        _ => "other",
    }
}

/// Instruction operand `i` as LLVM's disassembler holds an immediate (LLDB
/// prints it signed, in hex): an 8-bit immediate sign-extended — except
/// where LLVM types it unsigned (shift and rotate counts, `int`, `bt*`,
/// ports, vector selectors) —, a 16- or 32-bit one as is, one sign-extended
/// to 64 bits or a 64-bit one signed. `None` when the operand is not an
/// immediate.
fn llvm_immediate(insn: &iced_x86::Instruction, i: u32) -> Option<i64> {
    use iced_x86::{Mnemonic as M, OpKind};
    let signed_imm8 = matches!(
        insn.mnemonic(),
        M::Add | M::Or | M::Adc | M::Sbb | M::And | M::Sub | M::Xor | M::Cmp | M::Mov | M::Test | M::Push | M::Imul | M::Enter
    );
    Some(match insn.op_kind(i) {
        OpKind::Immediate8 if signed_imm8 => insn.immediate8() as i8 as i64,
        OpKind::Immediate8 => insn.immediate8() as i64,
        OpKind::Immediate8_2nd => insn.immediate8_2nd() as i8 as i64,
        OpKind::Immediate8to16 | OpKind::Immediate8to32 | OpKind::Immediate8to64 => insn.immediate8() as i8 as i64,
        OpKind::Immediate16 => insn.immediate16() as i64,
        OpKind::Immediate32 => insn.immediate32() as i64,
        OpKind::Immediate32to64 => insn.immediate32() as i32 as i64,
        OpKind::Immediate64 => insn.immediate64() as i64,
        _ => return None,
    })
}

/// Where LLVM's AT&T printer (LLDB's) spells an instruction differently from
/// iced's: SETcc without a size suffix, `leave` and `enter`, three-operand `imul` with
/// its source repeated, and `66 90` as `nop`.
fn llvm_spelling(insn: &iced_x86::Instruction, mnemonic: &mut String, operands: &mut String) {
    use iced_x86::Mnemonic;
    let m = insn.mnemonic();
    if (Mnemonic::Seta as u32..=Mnemonic::Sets as u32).contains(&(m as u32)) {
        if mnemonic.ends_with('b') {
            mnemonic.pop();
        }
    } else if m == Mnemonic::Leave {
        *mnemonic = "leave".into();
    } else if m == Mnemonic::Enter {
        // LLVM: no suffix, and the frame size first.
        *mnemonic = "enter".into();
        if let Some((level, size)) = operands.split_once(", ") {
            *operands = format!("{size}, {level}");
        }
    } else if m == Mnemonic::Imul && insn.op_count() == 3 && operands.matches(", ").count() == 1 {
        // iced drops the source when it is the destination; LLVM keeps all three.
        if let Some((_, register)) = operands.rsplit_once(", ") {
            let register = register.to_string();
            operands.push_str(", ");
            operands.push_str(&register);
        }
    } else if mnemonic == "xchgw" && operands == "%ax, %ax" {
        *mnemonic = "nop".into();
        operands.clear();
    }
}

/// LLDB's comment for an address an instruction refers to (a branch
/// target, a RIP-relative operand), as its disassembler's symbol lookup
/// writes it: `<+off>` inside the same function, else the function (`+
/// off`), then the inlined function there (`[inlined] f + off`) and, when
/// the function has debug info, ` at file:line:col` — the first line of
/// LLDB's description of the address.
fn branch_comment(symbols: &Symbolizer, ip: u64, target: u64) -> Option<String> {
    let here = symbols.lookup(ip);
    let there = symbols.lookup(target);
    let (name, _) = there.function.clone()?;
    let base = there.function_base()?;
    // Inside the instruction's own function (any range of its debug-info
    // function, parts under other symbols included; else its symbol, by the
    // symbol's size): no name, and the offset from the target's function
    // entry, below it too (`<-N>`: gcc's `f.cold`).
    let own_function = match &here.function_ranges {
        Some(ranges) => ranges.iter().any(|&(low, high)| (low..high).contains(&target)),
        None => symbols.function_range(ip).is_some_and(|(low, high)| (low..high).contains(&target)),
    };
    let mut text = if own_function {
        match target.checked_sub(base) {
            Some(offset) => format!("<+{offset}>"),
            None => format!("<-{}>", base - target),
        }
    } else {
        format!("{name}{}", signed_offset(target, base))
    };
    if let (Some(inlined), Some(block_start)) = (&there.inlined, there.inlined_block.and_then(|b| b.range_start)) {
        text.push_str(&format!(" [inlined] {inlined}"));
        if target > block_start {
            text.push_str(&format!(" + {}", target - block_start));
        }
    }
    if let Some(position) = there.position() {
        text.push_str(&position);
    }
    Some(text)
}

/// `retrace dump info`: per thread, LLDB's `thread trace dump info` text
/// (see [`write_lldb_info`]); `--json`: retrace's summary (trace size,
/// items, instructions, events, errors, decode time per thread).
pub fn info(trace_json: &Path, json: bool, options: FlowOptions) -> Result<ExitCode, CliError> {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Immediates spelled as LLVM's disassembler (LLDB's) spells them, with
    /// its `imm = 0x…` comment; checked against `llvm-mc-22 --print-imm-hex`
    /// where it is installed (`immediates_agree_with_llvm_mc`).
    const IMMEDIATES: &[(&[u8], &str)] = &[
        (&[0x49, 0xc7, 0xc0, 0xb8, 0xff, 0xff, 0xff], "movq   $-0x48, %r8"),
        (&[0xb8, 0xff, 0xff, 0xff, 0xff], "movl   $0xffffffff, %eax         ; imm = 0xFFFFFFFF "),
        (&[0x83, 0xc0, 0xff], "addl   $-0x1, %eax"),
        (&[0x81, 0xc1, 0x00, 0xf0, 0xff, 0xff], "addl   $0xfffff000, %ecx         ; imm = 0xFFFFF000 "),
        (&[0x48, 0xb8, 0xb8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff], "movabsq $-0x48, %rax"),
        (&[0x66, 0xb8, 0xff, 0xff], "movw   $0xffff, %ax              ; imm = 0xFFFF "),
        (&[0x6a, 0xff], "pushq  $-0x1"),
        (&[0x48, 0x3d, 0x00, 0xf0, 0xff, 0xff], "cmpq   $-0x1000, %rax            ; imm = 0xF000 "),
        (&[0xb0, 0xff], "movb   $-0x1, %al"),
        (&[0xcd, 0x80], "int    $0x80"),
        (&[0xc1, 0xe0, 0x04], "shll   $0x4, %eax"),
        (&[0xf6, 0xc1, 0x80], "testb  $-0x80, %cl"),
        (&[0x0f, 0xba, 0xe0, 0xff], "btl    $0xff, %eax"),
        (&[0x48, 0x69, 0xc0, 0x00, 0xf0, 0xff, 0xff], "imulq  $-0x1000, %rax, %rax      ; imm = 0xF000 "),
        (&[0xc8, 0x10, 0x00, 0x80], "enter  $0x10, $-0x80"),
        (&[0x48, 0x81, 0xec, 0x18, 0x01, 0x00, 0x00], "subq   $0x118, %rsp              ; imm = 0x118 "),
    ];

    fn ours(bytes: &[u8]) -> String {
        let mut image = retrace_decoder::image::Image::new();
        image.add_raw("code", 0x1000, bytes.to_vec());
        disassemble(&image, &Symbolizer::new(), 0x1000).text
    }

    /// LLDB 22's `-k` kinds, as it printed them for these encodings.
    #[test]
    fn control_flow_kinds_are_lldbs() {
        let cases: &[(&[u8], &str)] = &[
            (&[0x0f, 0x05], "far call"),                                   // syscall
            (&[0xe8, 0, 0, 0, 0], "call"),                                 // call rel32
            (&[0xff, 0xd0], "call"),                                       // call *%rax
            (&[0xff, 0xe0], "jump"),                                       // jmp *%rax
            (&[0xf3, 0x0f, 0x1e, 0xfa], "other"),                          // endbr64
            (&[0xc3], "return"),
            (&[0x0f, 0x84, 0, 0, 0, 0], "cond jump"),                      // je rel32
            (&[0x62, 0xf1, 0xfe, 0x48, 0x7f, 0x07], "cond jump"),          // EVEX vmovdqu64: LLDB's reading
            (&[0xc5, 0xfe, 0x7f, 0x07], "other"),                          // VEX vmovdqu
            (&[0x48, 0x89, 0xe5], "other"),                                // movq %rsp, %rbp
        ];
        for (bytes, kind) in cases {
            assert_eq!(control_flow_kind(bytes), *kind, "{bytes:02x?}");
        }
    }

    #[test]
    fn immediates_are_spelled_as_llvm_spells_them() {
        for (bytes, expected) in IMMEDIATES {
            assert_eq!(&ours(bytes), expected, "{bytes:02x?}");
        }
    }

    /// The table above is LLVM's: `llvm-mc-22` disassembles each encoding
    /// to the same operands (its layout aside).
    #[test]
    fn immediates_agree_with_llvm_mc() {
        let Ok(out) = std::process::Command::new("llvm-mc-22")
            .args(["--disassemble", "-triple=x86_64", "--print-imm-hex"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .and_then(|mut child| {
                use std::io::Write;
                let text: Vec<String> = IMMEDIATES.iter().flat_map(|(b, _)| b.iter().map(|x| format!("{x:#04x}"))).collect();
                child.stdin.take().unwrap().write_all(text.join(" ").as_bytes())?;
                child.wait_with_output()
            })
        else {
            eprintln!("skipped: llvm-mc-22 not installed (Debian package llvm-22)");
            return;
        };
        let normal = |s: &str| s.replace('#', ";").split_whitespace().collect::<Vec<_>>().join(" ");
        let llvm: Vec<String> = String::from_utf8_lossy(&out.stdout).lines().map(normal).filter(|l| !l.is_empty()).collect();
        let table: Vec<String> = IMMEDIATES.iter().map(|(_, text)| normal(text)).collect();
        assert_eq!(llvm, table);
    }
}
