//! Line tables as GDB 13 reads them, for reverse stepping by GDB's rules.
//!
//! GDB's `reverse-next` and `reverse-step` stop where its line table says a
//! statement starts (`is_stmt`), and its table is not LLDB's (nor
//! addr2line's): GDB keeps the rows that are not statements, merges
//! nothing, keeps one table per source file, and drops some rows while it
//! reads the DWARF line program. So the line program is run here the way
//! GDB's DWARF reader records it (`lnp_state_machine::record_line`,
//! `buildsym_compunit::record_line`), over gimli's raw line instructions,
//! and [`GdbLineTable::find_pc_line`] answers as GDB's `find_pc_sect_line`
//! does: the row an address is in, where it starts and ends, its line and
//! whether it starts a statement. A damaged unit ends the reading; the
//! units before it are kept.

use std::collections::HashMap;
use std::path::Path;

use gimli::{AttributeValue, DebugLine, DebugLineOffset, DebugLineStr, DebugStr, EndianSlice, LineInstruction, RunTimeEndian};
use object::Object;

type Reader<'a> = EndianSlice<'a, RunTimeEndian>;

/// One row of a source file's table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Row {
    pc: u64,
    /// 0: the end of a sequence.
    line: u64,
    is_stmt: bool,
}

/// What `find_pc_line` answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GdbLine {
    /// Where the row starts (the address asked for, where there is none).
    pub pc: u64,
    /// Where it ends, if known.
    pub end: Option<u64>,
    /// Its source file.
    pub file: Option<String>,
    /// Its line (0: no line).
    pub line: u64,
    /// It starts a statement.
    pub is_stmt: bool,
}

impl GdbLine {
    fn none(pc: u64) -> GdbLine {
        GdbLine { pc, end: None, file: None, line: 0, is_stmt: false }
    }
}

/// One line program's tables: rows by source file as GDB sorts them, the
/// files in GDB's order of its symtabs (the unit's primary file first),
/// the address ranges its sequences cover.
#[derive(Debug, Default)]
struct Unit {
    tables: HashMap<String, Vec<Row>>,
    order: Vec<String>,
    sequences: Vec<(u64, u64)>,
}

/// A module's line tables, GDB's way, at file addresses.
#[derive(Debug, Default)]
pub struct GdbLineTable {
    units: Vec<Unit>,
    /// (low, high, unit) of every sequence, sorted.
    ranges: Vec<(u64, u64, usize)>,
}

/// The line program's state (`lnp_state_machine`).
struct Machine {
    address: u64,
    file: u64,
    line: u64,
    is_stmt: bool,
    discriminator: u64,
    nonzero_discriminator: bool,
    last_file: Option<u64>,
    last_line: u64,
    last_address: u64,
    stmt_at_address: bool,
}

impl Machine {
    /// A sequence's start (the last file carries over from the sequence
    /// before, as GDB's current subfile does).
    fn reset(&mut self, default_is_stmt: bool) {
        self.address = 0;
        self.file = 1;
        self.line = 1;
        self.is_stmt = default_is_stmt;
        self.discriminator = 0;
        self.nonzero_discriminator = false;
        self.last_line = 0;
        self.last_address = 0;
        self.stmt_at_address = false;
    }

    fn advance_line(&mut self, delta: i64) {
        self.line = self.line.wrapping_add_signed(delta);
        if delta != 0 {
            self.nonzero_discriminator = self.discriminator != 0;
        }
    }
}

/// `buildsym_compunit::record_line`: an end marker drops the rows at its
/// address, and one ending an empty sequence is not kept.
fn record(rows: &mut Vec<Row>, line: u64, pc: u64, is_stmt: bool) {
    if line == 0 {
        let mut last_line = None;
        while let Some(last) = rows.last() {
            last_line = Some(last.line);
            if last.pc != pc {
                break;
            }
            rows.pop();
        }
        if matches!(last_line, None | Some(0)) {
            return;
        }
    }
    rows.push(Row { pc, line, is_stmt });
}

/// The unit's rows per file path, and the order files were first used.
struct Files {
    paths: HashMap<u64, String>,
    vectors: HashMap<String, Vec<Row>>,
    first_use: Vec<String>,
}

impl Files {
    fn vector(&mut self, index: u64) -> &mut Vec<Row> {
        let path = self.paths.get(&index).cloned().unwrap_or_else(|| format!("?{index}"));
        if !self.vectors.contains_key(&path) {
            self.first_use.push(path.clone());
        }
        self.vectors.entry(path).or_default()
    }
}

/// `base` joined with `name`, as Python's `os.path.join` (an absolute name
/// stands alone).
fn joined(base: &str, name: &str) -> String {
    if name.starts_with('/') || base.is_empty() {
        name.to_string()
    } else {
        Path::new(base).join(name).to_string_lossy().into_owned()
    }
}

struct Strings<'a> {
    str: DebugStr<Reader<'a>>,
    line_str: DebugLineStr<Reader<'a>>,
}

impl Strings<'_> {
    fn text(&self, value: AttributeValue<Reader<'_>>) -> String {
        let bytes = match value {
            AttributeValue::String(r) => Some(r),
            AttributeValue::DebugStrRef(offset) => self.str.get_str(offset).ok(),
            AttributeValue::DebugLineStrRef(offset) => self.line_str.get_str(offset).ok(),
            _ => None,
        };
        bytes.map_or_else(String::new, |b| String::from_utf8_lossy(b.slice()).into_owned())
    }
}

/// Runs the unit at `offset`: the unit and the next unit's offset.
fn decode_unit(debug_line: &DebugLine<Reader<'_>>, offset: usize, strings: &Strings<'_>) -> gimli::Result<(Unit, usize)> {
    let program = debug_line.program(DebugLineOffset(offset), 8, None, None)?;
    let header = program.header();
    let next = offset.saturating_add(header.format().initial_length_size() as usize).saturating_add(header.unit_length());
    let version = header.version();
    let mut paths = HashMap::new();
    let primary;
    if version >= 5 {
        let directories: Vec<String> = header.include_directories().iter().map(|d| strings.text(*d)).collect();
        // Directory 0 is the compilation's; the others are relative to it.
        let directory = |i: usize| -> String {
            match directories.get(i) {
                Some(d) if i == 0 || d.starts_with('/') => d.clone(),
                Some(d) => joined(&directories[0], d),
                None => String::new(),
            }
        };
        for (index, entry) in header.file_names().iter().enumerate() {
            paths.insert(index as u64, joined(&directory(entry.directory_index() as usize), &strings.text(entry.path_name())));
        }
        primary = paths.get(&0).or_else(|| paths.get(&1)).cloned();
    } else {
        let directories: Vec<String> = header.include_directories().iter().map(|d| strings.text(*d)).collect();
        for (index, entry) in header.file_names().iter().enumerate() {
            let d = entry.directory_index() as usize;
            let base = if d == 0 { String::new() } else { directories.get(d - 1).cloned().unwrap_or_default() };
            paths.insert(index as u64 + 1, joined(&base, &strings.text(entry.path_name())));
        }
        primary = paths.get(&1).cloned();
    }
    let (min_length, line_base, line_range, opcode_base) =
        (u64::from(header.minimum_instruction_length()), i64::from(header.line_base()), u64::from(header.line_range()).max(1), u64::from(header.opcode_base()));
    let default_is_stmt = header.default_is_stmt();
    let mut files = Files { paths, vectors: HashMap::new(), first_use: Vec::new() };
    let mut unit = Unit::default();
    let mut m = Machine {
        address: 0,
        file: 1,
        line: 1,
        is_stmt: default_is_stmt,
        discriminator: 0,
        nonzero_discriminator: false,
        last_file: None,
        last_line: 0,
        last_address: 0,
        stmt_at_address: false,
    };
    files.vector(1);
    let mut sequence_start = None;
    let record_line = |m: &mut Machine, files: &mut Files, end_sequence: bool| {
        let file_changed = m.last_file != Some(m.file);
        let ignore = (file_changed && !end_sequence && m.last_address == m.address && !m.is_stmt && m.stmt_at_address) || (!end_sequence && m.line == 0);
        if (file_changed && !ignore) || end_sequence {
            if let Some(last) = m.last_file {
                record(files.vector(last), 0, m.address, true);
            }
        }
        if !end_sequence && !ignore {
            if file_changed || m.line != m.last_line || !m.nonzero_discriminator {
                let (line, address, is_stmt) = (m.line, m.address, m.is_stmt);
                record(files.vector(m.file), line, address, is_stmt);
            }
            m.last_file = Some(m.file);
            m.last_line = m.line;
        }
        if m.last_address != m.address {
            m.stmt_at_address = false;
            m.last_address = m.address;
        }
        m.stmt_at_address |= m.is_stmt;
    };
    let mut instructions = header.instructions();
    while let Some(instruction) = instructions.next_instruction(header)? {
        match instruction {
            LineInstruction::Special(opcode) => {
                let adjusted = u64::from(opcode).saturating_sub(opcode_base);
                m.address = m.address.wrapping_add((adjusted / line_range) * min_length);
                m.advance_line(line_base + (adjusted % line_range) as i64);
                record_line(&mut m, &mut files, false);
                m.discriminator = 0;
            }
            LineInstruction::EndSequence => {
                record_line(&mut m, &mut files, true);
                if let Some(start) = sequence_start.filter(|&s| s < m.address) {
                    unit.sequences.push((start, m.address));
                }
                sequence_start = None;
                m.reset(default_is_stmt);
                files.vector(m.file);
            }
            LineInstruction::SetAddress(address) => {
                m.address = address;
                sequence_start.get_or_insert(address);
            }
            LineInstruction::SetDiscriminator(discriminator) => {
                m.discriminator = discriminator;
                m.nonzero_discriminator |= discriminator != 0;
            }
            LineInstruction::Copy => {
                record_line(&mut m, &mut files, false);
                m.discriminator = 0;
            }
            LineInstruction::AdvancePc(n) => m.address = m.address.wrapping_add(n.wrapping_mul(min_length)),
            LineInstruction::AdvanceLine(delta) => m.advance_line(delta),
            LineInstruction::SetFile(file) => {
                m.file = file;
                files.vector(file);
            }
            LineInstruction::NegateStatement => m.is_stmt = !m.is_stmt,
            LineInstruction::ConstAddPc => m.address = m.address.wrapping_add(((255 - opcode_base.min(255)) / line_range) * min_length),
            LineInstruction::FixedAddPc(n) => m.address = m.address.wrapping_add(u64::from(n)),
            _ => {}
        }
    }
    for (path, mut rows) in files.vectors {
        // End markers first among rows at one address; otherwise stable.
        rows.sort_by_key(|row| (row.pc, row.line != 0));
        unit.tables.insert(path, rows);
    }
    // GDB's symtabs in its order (`maint info line-table`): the unit's own
    // file first, then the others newest first. Where two files have rows
    // at one address, the first in this order names it.
    unit.order = primary.iter().filter(|p| unit.tables.contains_key(*p)).cloned().collect();
    unit.order.extend(files.first_use.iter().rev().filter(|p| Some(*p) != primary.as_ref() && unit.tables.contains_key(*p)).cloned());
    Ok((unit, next))
}

impl GdbLineTable {
    /// The line tables of an ELF file's `.debug_line` (compressed sections
    /// too); empty where it has none or is no ELF file.
    pub fn from_elf(data: &[u8]) -> GdbLineTable {
        let mut table = GdbLineTable::default();
        let Ok(file) = object::File::parse(data) else { return table };
        let endian = if file.is_little_endian() { RunTimeEndian::Little } else { RunTimeEndian::Big };
        let section = |name: &str| file.section_by_name(name).and_then(|s| super::debug_section_data(&s)).unwrap_or_default();
        let (line, str, line_str) = (section(".debug_line"), section(".debug_str"), section(".debug_line_str"));
        let debug_line = DebugLine::new(&line, endian);
        let strings = Strings { str: DebugStr::new(&str, endian), line_str: DebugLineStr::new(&line_str, endian) };
        let mut offset = 0;
        while offset + 4 <= line.len() {
            let Ok((unit, next)) = decode_unit(&debug_line, offset, &strings) else { break };
            for &(low, high) in &unit.sequences {
                table.ranges.push((low, high, table.units.len()));
            }
            table.units.push(unit);
            if next <= offset {
                break;
            }
            offset = next;
        }
        table.ranges.sort_unstable();
        table
    }

    /// Whether no line was read.
    pub fn is_empty(&self) -> bool {
        self.units.is_empty()
    }

    /// The unit one of whose sequences covers `pc` (sequences do not
    /// overlap but where units repeat code: a few earlier ones are looked
    /// at).
    fn unit_for(&self, pc: u64) -> Option<&Unit> {
        let i = self.ranges.partition_point(|&(low, _, _)| low <= pc);
        self.ranges[i.saturating_sub(8)..i].iter().rev().find(|&&(low, high, _)| low <= pc && pc < high).map(|&(_, _, unit)| &self.units[unit])
    }

    /// GDB's `find_pc_sect_line(pc, notcurrent=0)` within the unit covering
    /// `pc`; line 0 where there is none.
    pub fn find_pc_line(&self, pc: u64) -> GdbLine {
        let Some(unit) = self.unit_for(pc) else { return GdbLine::none(pc) };
        let mut best: Option<(Row, &str)> = None;
        let mut best_end = 0u64;
        let mut alt: Option<u64> = None;
        for path in &unit.order {
            let rows = &unit.tables[path];
            if rows.is_empty() {
                continue;
            }
            let item = rows.partition_point(|row| row.pc <= pc);
            if item == 0 {
                alt = Some(alt.map_or(rows[0].pc, |a| a.min(rows[0].pc)));
                continue;
            }
            let previous = item - 1;
            // (An end marker, line 0, is never the best: a file whose row
            // there is one leaves the address to the others.)
            if rows[previous].line != 0 && best.is_none_or(|(b, _)| rows[previous].pc > b.pc) {
                let mut chosen = previous;
                if !rows[chosen].is_stmt {
                    let mut tmp = chosen;
                    while tmp > 0 && rows[tmp - 1].pc == rows[tmp].pc && rows[tmp - 1].line != 0 && !rows[tmp].is_stmt {
                        tmp -= 1;
                    }
                    if rows[tmp].is_stmt {
                        chosen = tmp;
                    }
                }
                best = Some((rows[chosen], path));
                if best_end <= rows[chosen].pc {
                    best_end = 0;
                }
            }
            if let Some((b, _)) = best {
                if item < rows.len() && rows[item].pc > b.pc && (best_end == 0 || best_end > rows[item].pc) {
                    best_end = rows[item].pc;
                }
            }
        }
        let Some((row, path)) = best.filter(|(row, _)| row.line != 0) else { return GdbLine::none(pc) };
        let end = if best_end != 0 && alt.is_none_or(|a| best_end < a) { Some(best_end) } else { alt };
        GdbLine { pc: row.pc, end, file: Some(path.to_string()), line: row.line, is_stmt: row.is_stmt }
    }
}
