//! Symbolization: function names from ELF symbol tables and file:line:column
//! from DWARF (`gimli` through `addr2line`), for modules placed at their load
//! addresses, and names of generated (JIT) functions, e.g. from a jitdump.
//! Everything comes from byte buffers the caller loaded (a separate debug
//! file found by build id, too): no file I/O here.

use std::sync::Arc;

use object::{Object, ObjectSection, ObjectSegment, ObjectSymbol, SymbolKind};

type Reader = gimli::EndianArcSlice<gimli::RunTimeEndian>;

/// What is known about one address.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct SymbolContext {
    /// The module's file name (basename), if the address is in a module.
    pub module: Option<Arc<str>>,
    /// The containing function: name and start address.
    pub function: Option<(Arc<str>, u64)>,
    /// The function is described by debug info (a DWARF subprogram), not
    /// only by a symbol: LLDB then shows its source position.
    pub debug_function: bool,
    /// Source position: file basename, line, column (line > 0).
    pub line: Option<(Arc<str>, u32, u32)>,
    /// The source file's full path, with [`Self::line`].
    pub source: Option<Arc<str>>,
    /// The innermost inlined function at the address, if any.
    pub inlined: Option<Arc<str>>,
    /// The innermost inlined block at the address (its DWARF entry), if any.
    pub inlined_block: Option<InlinedBlock>,
    /// Load addresses `[start, end)` of the line-table row the address is
    /// in (LLDB's line entry range), when it has one.
    pub line_range: Option<(u64, u64)>,
}

/// An inlined function's block of code (a `DW_TAG_inlined_subroutine`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct InlinedBlock {
    /// Identifies the block: its entry's offset in `.debug_info`.
    pub id: u64,
    /// Load address of its lowest range (LLDB's range 0): its entry point
    /// for call trees.
    pub entry: u64,
    /// Load address of the start of the range containing the address: the
    /// base of the offset LLDB prints after `[inlined] f`.
    pub range_start: u64,
}

impl SymbolContext {
    /// LLDB's context line: ``module`function + off at file:line:col``.
    pub fn describe(&self, address: u64) -> String {
        let Some(module) = &self.module else { return "(none)".into() };
        let Some((name, start)) = &self.function else { return format!("{module}`(none)") };
        let mut text = format!("{module}`{name}");
        if address > *start {
            text.push_str(&format!(" + {}", address - start));
        }
        if let Some(inlined) = &self.inlined {
            text.push_str(&format!(" [inlined] {inlined}"));
            if let Some(block) = self.inlined_block.filter(|b| address > b.range_start) {
                text.push_str(&format!(" + {}", address - block.range_start));
            }
        }
        if let Some(position) = self.position() {
            text.push_str(&position);
        }
        text
    }

    /// ` at file:line[:column]` when the function has debug info and the
    /// address a line.
    pub fn position(&self) -> Option<String> {
        let (file, line, column) = self.line.as_ref().filter(|_| self.debug_function)?;
        Some(if *column > 0 { format!(" at {file}:{line}:{column}") } else { format!(" at {file}:{line}") })
    }

    /// LLDB's rule for printing a new context line: a different module,
    /// function, or (when both have a function) source position.
    pub fn same_scope(&self, other: &SymbolContext) -> bool {
        if self.module != other.module || self.function != other.function {
            return false;
        }
        !self.debug_function || self.line == other.line
    }
}

struct Module {
    start: u64,
    end: u64,
    slide: u64,
    name: Arc<str>,
    /// (start, end, name) with link-time addresses, sorted.
    functions: Vec<(u64, u64, Arc<str>)>,
    /// Data symbols, likewise.
    data: Vec<(u64, u64, Arc<str>)>,
    lines: Option<addr2line::Context<Reader>>,
}

/// A generated function known only by its name and range (no ELF, no DWARF).
struct JitFunction {
    start: u64,
    end: u64,
    name: Arc<str>,
    module: Arc<str>,
}

/// Symbol lookup over all modules of a trace.
#[derive(Default)]
pub struct Symbolizer {
    modules: Vec<Module>,
    /// Sorted by start; one per start address.
    jit_functions: Vec<JitFunction>,
}

impl std::fmt::Debug for Symbolizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.modules.iter().map(|m| &*m.name).collect();
        f.debug_struct("Symbolizer").field("modules", &names).field("jit_functions", &self.jit_functions.len()).finish()
    }
}

/// (address, size, rank, section end, name) symbols → sorted (start, end,
/// name) ranges: one per address (highest rank first, then the larger size);
/// a symbol without a size reaches to the next symbol or the end of its
/// section, whichever comes first.
fn symbol_ranges(mut symbols: Vec<(u64, u64, u8, u64, Arc<str>)>) -> Vec<(u64, u64, Arc<str>)> {
    symbols.sort_by(|a, b| a.0.cmp(&b.0).then(b.2.cmp(&a.2)).then(b.1.cmp(&a.1)));
    symbols.dedup_by_key(|s| s.0);
    let starts: Vec<u64> = symbols.iter().map(|s| s.0).collect();
    symbols
        .into_iter()
        .enumerate()
        .map(|(i, (start, size, _, section_end, name))| {
            let end = if size > 0 {
                start + size
            } else {
                starts.get(i + 1).copied().unwrap_or(u64::MAX).min(section_end).max(start + 1)
            };
            (start, end, name)
        })
        .collect()
}

fn load_dwarf(file: &object::File) -> Option<addr2line::Context<Reader>> {
    let endian = if file.is_little_endian() { gimli::RunTimeEndian::Little } else { gimli::RunTimeEndian::Big };
    let load = |id: gimli::SectionId| -> Result<Reader, gimli::Error> {
        let data = file
            .section_by_name(id.name())
            .and_then(|section| section.uncompressed_data().ok())
            .map(|data| Arc::<[u8]>::from(&*data))
            .unwrap_or_else(|| Arc::from(&[][..]));
        Ok(gimli::EndianArcSlice::new(data, endian))
    };
    let dwarf = gimli::Dwarf::load(load).ok()?;
    addr2line::Context::from_dwarf(dwarf).ok()
}

impl Symbolizer {
    /// An empty symbolizer.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a module: its ELF image loaded at `load_address` (lowest segment),
    /// and optionally a separate debug file with its symbols and DWARF.
    pub fn add_module(&mut self, path: &str, image: &[u8], load_address: u64, debug: Option<&[u8]>) {
        let Ok(file) = object::File::parse(image) else { return };
        let lowest = file.segments().map(|s| s.address()).min().unwrap_or(0);
        let highest = file.segments().map(|s| s.address() + s.size()).max().unwrap_or(0);
        let slide = load_address.wrapping_sub(lowest & !0xfff);
        let debug_file = debug.and_then(|bytes| object::File::parse(bytes).ok());
        let mut functions = Vec::new();
        let mut data = Vec::new();
        for source in [Some(&file), debug_file.as_ref()].into_iter().flatten() {
            for symbol in source.symbols().chain(source.dynamic_symbols()) {
                let Ok(name) = symbol.name() else { continue };
                if symbol.address() == 0 || name.is_empty() {
                    continue;
                }
                // Rank: strong global names, then weak ones, then local ones.
                let rank = match (symbol.is_global(), symbol.is_weak()) {
                    (true, false) => 2,
                    (_, true) => 1,
                    _ => 0,
                };
                let section = symbol.section_index().and_then(|index| source.section_by_index(index).ok());
                let section_end = section.as_ref().map(|s| s.address() + s.size()).unwrap_or(u64::MAX);
                let in_code = section
                    .as_ref()
                    .is_some_and(|section| matches!(section.flags(), object::SectionFlags::Elf { sh_flags } if sh_flags & 0x4 != 0));
                let entry = (symbol.address(), symbol.size(), rank, section_end, Arc::<str>::from(name));
                match symbol.kind() {
                    SymbolKind::Text => functions.push(entry),
                    SymbolKind::Unknown if in_code => functions.push(entry),
                    SymbolKind::Data if symbol.size() > 0 => data.push(entry),
                    _ => {}
                }
            }
        }
        let functions = symbol_ranges(functions);
        let data = symbol_ranges(data);
        let lines = debug_file.as_ref().and_then(load_dwarf).or_else(|| load_dwarf(&file));
        let name = path.rsplit('/').next().unwrap_or(path).into();
        self.modules.push(Module {
            start: (lowest & !0xfff).wrapping_add(slide),
            end: highest.wrapping_add(slide),
            slide,
            name,
            functions,
            data,
            lines,
        });
    }

    /// Names `[start, start + size)` as the generated function `name` (e.g.
    /// `JS:*fib /path/script.js:1:13` from a jitdump), shown in module
    /// `module`. Modules added by [`Symbolizer::add_module`] take precedence
    /// where they overlap. A later function at the same start replaces the
    /// earlier one; an empty function is ignored.
    pub fn add_jit_function(&mut self, module: &str, name: &str, start: u64, size: u64) {
        if size == 0 {
            return;
        }
        let function = JitFunction { start, end: start.saturating_add(size), name: name.into(), module: module.into() };
        let at = self.jit_functions.partition_point(|f| f.start < start);
        match self.jit_functions.get_mut(at) {
            Some(existing) if existing.start == start => *existing = function,
            _ => self.jit_functions.insert(at, function),
        }
    }

    /// The context of `address` in a generated function: module and function only.
    fn jit_context(&self, address: u64) -> Option<SymbolContext> {
        let index = self.jit_functions.partition_point(|f| f.start <= address).checked_sub(1)?;
        let function = self.jit_functions.get(index).filter(|f| address < f.end)?;
        Some(SymbolContext {
            module: Some(function.module.clone()),
            function: Some((function.name.clone(), function.start)),
            ..SymbolContext::default()
        })
    }

    /// The module containing `address` and the address in that module's
    /// file (before it was placed).
    pub fn file_address(&self, address: u64) -> Option<(Arc<str>, u64)> {
        let module = self.modules.iter().find(|m| m.start <= address && address < m.end)?;
        Some((module.name.clone(), address.wrapping_sub(module.slide)))
    }

    /// The data symbol containing `address`: name and offset into it.
    pub fn data_symbol(&self, address: u64) -> Option<(Arc<str>, u64)> {
        let module = self.modules.iter().find(|m| m.start <= address && address < m.end)?;
        let probe = address.wrapping_sub(module.slide);
        let index = module.data.partition_point(|d| d.0 <= probe).checked_sub(1)?;
        let (start, end, name) = &module.data[index];
        (probe < *end).then(|| (name.clone(), probe - start))
    }

    /// The symbol context of `address`.
    pub fn lookup(&self, address: u64) -> SymbolContext {
        let Some(module) = self.modules.iter().find(|m| m.start <= address && address < m.end) else {
            return self.jit_context(address).unwrap_or_default();
        };
        let probe = address.wrapping_sub(module.slide);
        let index = module.functions.partition_point(|f| f.0 <= probe);
        let mut function = index
            .checked_sub(1)
            .map(|i| &module.functions[i])
            .filter(|f| probe < f.1)
            .map(|f| (f.2.clone(), f.0.wrapping_add(module.slide)));
        // The debug info's names: the (outermost) function, as LLDB shows it,
        // and the innermost inlined function.
        let mut inlined = None;
        let mut inlined_block = None;
        let mut debug_function = false;
        if let (Some((name, _)), Some(lines)) = (&mut function, &module.lines) {
            if let Ok(mut frames) = lines.find_frames(probe).skip_all_loads() {
                let mut names = Vec::new();
                let mut innermost = None;
                while let Ok(Some(frame)) = frames.next() {
                    if innermost.is_none() {
                        innermost = Some(frame.dw_die_offset);
                    }
                    // LLDB makes no functions of assembler units' subprograms.
                    let function = frame.function.as_ref().filter(|f| f.language != Some(gimli::DW_LANG_Mips_Assembler));
                    if let Some(Ok(raw)) = function.map(|f| f.raw_name()) {
                        names.push(Arc::<str>::from(&*raw));
                    }
                }
                if let Some(outer) = names.last() {
                    *name = outer.clone();
                    debug_function = true;
                }
                if names.len() > 1 {
                    inlined = names.first().cloned();
                    inlined_block = innermost
                        .flatten()
                        .and_then(|offset| inlined_block_at(lines, probe, offset))
                        .map(|b| InlinedBlock { id: b.id, entry: b.entry.wrapping_add(module.slide), range_start: b.range_start.wrapping_add(module.slide) });
                }
            }
        }
        let located = module.lines.as_ref().and_then(|lines| {
            let location = lines.find_location(probe).ok()??;
            let line = location.line.filter(|&l| l > 0)?;
            let path = normalize_path(location.file?);
            let file = path.rsplit('/').next()?.into();
            Some(((file, line, location.column.unwrap_or(0)), Arc::<str>::from(path)))
        });
        let (line, source) = match located {
            Some((line, source)) => (Some(line), Some(source)),
            None => (None, None),
        };
        let line_range = module.lines.as_ref().and_then(|lines| {
            let (start, len, _) = lines.find_location_range(probe, probe + 1).ok()?.next()?;
            Some((start.wrapping_add(module.slide), (start + len).wrapping_add(module.slide)))
        });
        SymbolContext { module: Some(module.name.clone()), function, debug_function, line, source, inlined, inlined_block, line_range }
    }
}

/// `a/./b/../c` → `a/c`, lexically (as LLDB shows source paths).
fn normalize_path(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "." => {}
            ".." if parts.last().is_some_and(|p| !p.is_empty() && *p != "..") => {
                parts.pop();
            }
            _ => parts.push(part),
        }
    }
    parts.join("/")
}

/// The inlined block whose entry is at `offset` in the unit that covers
/// `probe`, with link-time addresses.
fn inlined_block_at(lines: &addr2line::Context<Reader>, probe: u64, offset: gimli::UnitOffset<usize>) -> Option<InlinedBlock> {
    let unit = lines.find_dwarf_and_unit(probe).skip_all_loads()?;
    let entry = unit.entry(offset).ok()?;
    let mut iter = unit.die_ranges(&entry).ok()?;
    let mut ranges = Vec::new();
    while let Ok(Some(range)) = iter.next() {
        if range.begin < range.end {
            ranges.push((range.begin, range.end));
        }
    }
    // LLDB joins ranges that touch or overlap.
    ranges.sort_unstable();
    let mut joined: Vec<(u64, u64)> = Vec::new();
    for (begin, end) in ranges {
        match joined.last_mut() {
            Some(last) if begin <= last.1 => last.1 = last.1.max(end),
            _ => joined.push((begin, end)),
        }
    }
    let lowest = joined.first()?.0;
    let containing = joined.iter().find(|(begin, end)| *begin <= probe && probe < *end).map(|r| r.0);
    let id = unit.header.offset().as_debug_info_offset().map_or(0, |o| o.0 as u64) + offset.0 as u64;
    Some(InlinedBlock { id, entry: lowest, range_start: containing? })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jit_functions_name_their_ranges() {
        let mut symbolizer = Symbolizer::new();
        symbolizer.add_jit_function("jit-1.dump", "JS:~f", 0x2000, 0x10);
        symbolizer.add_jit_function("jit-1.dump", "Builtin:B", 0x1000, 0x100);
        symbolizer.add_jit_function("jit-1.dump", "empty", 0x1800, 0);
        let function = |address| symbolizer.lookup(address).function.map(|(name, start)| (name.to_string(), start));
        assert_eq!(function(0x1000), Some(("Builtin:B".into(), 0x1000)));
        assert_eq!(function(0x10ff), Some(("Builtin:B".into(), 0x1000)));
        assert_eq!(function(0x1100), None);
        assert_eq!(function(0x1800), None, "empty functions cover nothing");
        assert_eq!(function(0x200f), Some(("JS:~f".into(), 0x2000)));
        assert_eq!(symbolizer.lookup(0x2004).describe(0x2004), "jit-1.dump`JS:~f + 4");
        assert_eq!(symbolizer.lookup(0x2004).position(), None);
        // New code at the same start replaces the old.
        symbolizer.add_jit_function("jit-1.dump", "JS:*f", 0x2000, 0x8);
        assert_eq!(symbolizer.lookup(0x2004).function, Some(("JS:*f".into(), 0x2000)));
        assert_eq!(symbolizer.lookup(0x2008).function, None);
        assert_eq!(symbolizer.file_address(0x2004), None);
    }
}
