//! `retrace jitdump`: list the functions of a perf jitdump file.

use std::io::{BufWriter, Write};
use std::path::Path;
use std::process::ExitCode;

use retrace_decoder::jitdump::{ByteOrder, CodeRegion, CodeRegions, Header, Jitdump, JitdumpError, Placement};
use serde_json::json;

use crate::cli::error::CliError;

/// One listed line, in file order.
enum Line<'r, 'a> {
    Load(&'r CodeRegion<'a>),
    /// A region's placement after its LOAD (index into `placements`, ≥ 1).
    Move(&'r CodeRegion<'a>, usize),
    Error(&'r JitdumpError),
}

impl Line<'_, '_> {
    fn offset(&self) -> usize {
        match self {
            Line::Load(region) => region.load_offset,
            Line::Move(region, placement) => region.placements.get(*placement).map_or(0, |p| p.record_offset),
            Line::Error(error) => error.offset,
        }
    }
}

pub fn run(path: &Path, json: bool) -> Result<ExitCode, CliError> {
    let data = std::fs::read(path).map_err(CliError::file(path))?;
    let dump = Jitdump::parse(&data).map_err(|error| CliError::Message(format!("{}: {error}", path.display())))?;
    let regions = CodeRegions::from_dump(&dump);
    let mut lines: Vec<Line> = Vec::new();
    for region in regions.regions() {
        lines.push(Line::Load(region));
        lines.extend((1..region.placements.len()).map(|placement| Line::Move(region, placement)));
    }
    lines.extend(regions.errors().iter().map(Line::Error));
    lines.sort_by_key(Line::offset);

    let stdout = std::io::stdout();
    let mut out = BufWriter::with_capacity(1 << 16, stdout.lock());
    write_header(&mut out, dump.header(), json)?;
    let mut moves = 0;
    for line in &lines {
        match (line, json) {
            (Line::Load(region), false) => writeln!(out, "{}", load_text(region))?,
            (Line::Load(region), true) => writeln!(out, "{}", load_json(region))?,
            (Line::Move(region, placement), _) => {
                moves += 1;
                if json {
                    writeln!(out, "{}", move_json(region, *placement))?;
                } else {
                    writeln!(out, "{}", move_text(region, *placement))?;
                }
            }
            (Line::Error(error), false) => writeln!(out, "{}", error_text(error))?,
            (Line::Error(error), true) => writeln!(out, "{}", error_json(error))?,
        }
    }
    out.flush()?;
    let (loads, errors) = (regions.regions().len(), regions.errors().len());
    tracing::info!(loads, moves, errors, bytes = data.len(), "jitdump done");
    if errors > 0 {
        eprintln!("{}: {loads} loads, {moves} moves, {errors} error(s)", path.display());
    }
    Ok(ExitCode::SUCCESS)
}

fn byte_order_name(order: ByteOrder) -> &'static str {
    match order {
        ByteOrder::Little => "little-endian",
        ByteOrder::Big => "big-endian",
    }
}

fn write_header(out: &mut impl Write, header: &Header, json: bool) -> Result<(), CliError> {
    if json {
        let record = json!({
            "offset": 0,
            "record": "header",
            "version": header.version,
            "byte_order": byte_order_name(header.byte_order),
            "pid": header.pid,
            "elf_mach": header.elf_mach,
            "flags": header.flags,
            "timestamp": header.timestamp,
        });
        writeln!(out, "{record}")?;
    } else {
        writeln!(
            out,
            "{:016x}  header  version {}  {}  pid {}  elf_mach {}  flags {:#x}  timestamp {}",
            0,
            header.version,
            byte_order_name(header.byte_order),
            header.pid,
            header.elf_mach,
            header.flags,
            header.timestamp
        )?;
    }
    Ok(())
}

fn load_address(region: &CodeRegion) -> u64 {
    region.placements.first().map_or(0, |p| p.address)
}

fn load_text(region: &CodeRegion) -> String {
    let start = load_address(region);
    format!(
        "{:016x}  load  index {}  {:016x}-{:016x}  size {:#x}  time {}  {}",
        region.load_offset,
        region.code_index,
        start,
        start.saturating_add(region.size()),
        region.size(),
        region.load_time,
        region.name_lossy()
    )
}

fn load_json(region: &CodeRegion) -> serde_json::Value {
    let start = load_address(region);
    json!({
        "offset": region.load_offset,
        "record": "load",
        "code_index": region.code_index,
        "start": start,
        "end": start.saturating_add(region.size()),
        "size": region.size(),
        "time": region.load_time,
        "name": region.name_lossy(),
        "pid": region.pid,
        "tid": region.tid,
        "debug_entries": region.debug_info.as_ref().map(|info| info.entries.len()),
        "unwinding_size": region.unwinding_info.map(|info| info.unwinding_size),
    })
}

/// Where a MOVE took the region from and to.
fn move_ends<'r>(region: &'r CodeRegion, placement: usize) -> Option<(&'r Placement, &'r Placement)> {
    Some((region.placements.get(placement.checked_sub(1)?)?, region.placements.get(placement)?))
}

fn move_text(region: &CodeRegion, placement: usize) -> String {
    let Some((from, to)) = move_ends(region, placement) else { return String::new() };
    format!(
        "{:016x}  move  index {}  {:016x} -> {:016x}  size {:#x}  time {}  {}",
        to.record_offset,
        region.code_index,
        from.address,
        to.address,
        region.size(),
        to.since,
        region.name_lossy()
    )
}

fn move_json(region: &CodeRegion, placement: usize) -> serde_json::Value {
    let Some((from, to)) = move_ends(region, placement) else { return serde_json::Value::Null };
    json!({
        "offset": to.record_offset,
        "record": "move",
        "code_index": region.code_index,
        "from": from.address,
        "to": to.address,
        "size": region.size(),
        "time": to.since,
        "name": region.name_lossy(),
    })
}

fn consequence(error: &JitdumpError) -> &'static str {
    if error.kind.ends_records() {
        "no records can be read after it"
    } else {
        "skipped"
    }
}

fn error_text(error: &JitdumpError) -> String {
    format!("[{:016x}: error: {}; {}]", error.offset, error.kind, consequence(error))
}

fn error_json(error: &JitdumpError) -> serde_json::Value {
    json!({
        "offset": error.offset,
        "error": error.kind.to_string(),
        "ends_records": error.kind.ends_records(),
    })
}
