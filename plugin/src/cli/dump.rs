//! `retrace dump instructions`: the instruction flow of a trace bundle, in
//! the layout of LLDB's `thread trace dump instructions`.

use std::io::{BufWriter, Write};
use std::path::Path;
use std::process::ExitCode;

use retrace_decoder::flow::{decode_parallel, Item};

use super::CliError;
use crate::bundle;

pub struct InstructionsArgs {
    pub forwards: bool,
    pub all: bool,
    pub count: usize,
    pub raw: bool,
    pub events: bool,
    pub tid: Option<u64>,
}

pub fn instructions(trace_json: &Path, args: &InstructionsArgs) -> Result<ExitCode, CliError> {
    let loaded = bundle::load(trace_json).map_err(|e| CliError::Message(e.to_string()))?;
    if let Some(tid) = args.tid {
        if !loaded.threads.iter().any(|t| t.tid == tid) {
            return Err(CliError::Message(format!("no thread {tid} in {}", trace_json.display())));
        }
    }
    let stdout = std::io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    for (index, thread) in loaded.threads.iter().enumerate() {
        if args.tid.is_some_and(|tid| tid != thread.tid) {
            continue;
        }
        let items: Vec<Item> = decode_parallel(&thread.trace, &loaded.image, cores()).items().collect();
        writeln!(out, "thread #{}: tid = {}", index + 1, thread.tid)?;
        let visible = |item: &Item| args.events || !matches!(item, Item::Event(_));
        let order: Box<dyn Iterator<Item = (usize, &Item)>> = if args.forwards {
            Box::new(items.iter().enumerate())
        } else {
            Box::new(items.iter().enumerate().rev())
        };
        let mut shown = 0usize;
        let mut exhausted = true;
        for (id, item) in order {
            if !visible(item) {
                continue;
            }
            if !args.all && shown == args.count && matches!(item, Item::Instruction { .. }) {
                exhausted = false;
                break;
            }
            match item {
                Item::Instruction { ip } => {
                    shown += 1;
                    if args.raw {
                        writeln!(out, "    {id}: {ip:#018x}")?;
                    } else {
                        let text = disassemble(&loaded.image, *ip);
                        writeln!(out, "    {id}: {ip:#018x}    {text}")?;
                    }
                }
                Item::Event(event) => writeln!(out, "    {id}: (event) {event}")?,
                Item::Error { error, .. } => writeln!(out, "    {id}: (error) {error}")?,
            }
        }
        if exhausted {
            writeln!(out, "    no more data")?;
        }
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

fn cores() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
}

fn disassemble(image: &retrace_decoder::image::Image, ip: u64) -> String {
    use iced_x86::{Decoder, DecoderOptions, Formatter, GasFormatter};
    use retrace_decoder::image::Memory;
    let mut bytes = [0u8; 15];
    let n = image.read(ip, &mut bytes);
    let mut decoder = Decoder::with_ip(64, &bytes[..n], ip, DecoderOptions::NONE);
    let insn = decoder.decode();
    if insn.is_invalid() {
        return "<unknown>".into();
    }
    let mut formatter = GasFormatter::new();
    let options = formatter.options_mut();
    options.set_gas_show_mnemonic_size_suffix(true);
    options.set_space_after_operand_separator(true);
    options.set_uppercase_hex(false);
    options.set_branch_leading_zeros(false);
    let mut mnemonic = String::new();
    let mut operands = String::new();
    formatter.format_mnemonic(&insn, &mut mnemonic);
    formatter.format_all_operands(&insn, &mut operands);
    // LLDB's layout: the mnemonic in 7 columns (at least one space after it).
    let width = if mnemonic.len() >= 7 { mnemonic.len() + 1 } else { 7 };
    format!("{mnemonic:<width$}{operands}")
}

/// `retrace dump info`: per thread, the trace size and what it decodes to.
pub fn info(trace_json: &Path, json: bool) -> Result<ExitCode, CliError> {
    let loaded = bundle::load(trace_json).map_err(|e| CliError::Message(e.to_string()))?;
    let cpu = &loaded.description.cpu_info;
    let mut threads = Vec::new();
    for (index, thread) in loaded.threads.iter().enumerate() {
        let start = std::time::Instant::now();
        let items: Vec<Item> = decode_parallel(&thread.trace, &loaded.image, cores()).items().collect();
        let seconds = start.elapsed().as_secs_f64();
        let instructions = items.iter().filter(|i| matches!(i, Item::Instruction { .. })).count();
        let events = items.iter().filter(|i| matches!(i, Item::Event(_))).count();
        let errors = items.iter().filter(|i| matches!(i, Item::Error { .. })).count();
        threads.push(serde_json::json!({
            "index": index + 1, "tid": thread.tid, "traceBytes": thread.trace.len(), "items": items.len(),
            "instructions": instructions, "events": events, "errors": errors, "decodeSeconds": seconds,
        }));
    }
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    if json {
        let cpu = serde_json::json!({"vendor": cpu.vendor, "family": cpu.family, "model": cpu.model, "stepping": cpu.stepping});
        writeln!(out, "{}", serde_json::json!({ "cpuInfo": cpu, "threads": threads }))?;
        return Ok(ExitCode::SUCCESS);
    }
    writeln!(out, "Trace technology: intel-pt (cpu {} {}/{}/{})", cpu.vendor, cpu.family, cpu.model, cpu.stepping)?;
    for t in &threads {
        writeln!(out, "\nthread #{}: tid = {}", t["index"], t["tid"])?;
        writeln!(out, "  Raw trace size: {} bytes", t["traceBytes"])?;
        writeln!(out, "  Total number of trace items: {}", t["items"])?;
        writeln!(out, "  Instructions: {}, events: {}, errors: {}", t["instructions"], t["events"], t["errors"])?;
        writeln!(out, "  Decoding: {:.3} s", t["decodeSeconds"].as_f64().unwrap_or(0.0))?;
    }
    Ok(ExitCode::SUCCESS)
}
