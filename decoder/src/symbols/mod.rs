//! Symbolization: function names from ELF symbol tables and file:line:column
//! from DWARF (`gimli` through `addr2line`), for modules placed at their load
//! addresses, and names of generated (JIT) functions, e.g. from a jitdump.
//! Everything comes from byte buffers the caller loaded (a separate debug
//! file found by build id, too): no file I/O here.
//!
//! One module for one question — what LLDB 22 shows for an
//! address: the symbol choice, PLT stubs, unnamed `.eh_frame` functions,
//! DWARF lines and LLDB's own inlined-block tree all feed one
//! `SymbolContext`, and LLDB's rules for each depend on the others.

use std::sync::Arc;

use object::{Object, ObjectSection, ObjectSegment, ObjectSymbol, SymbolKind};

mod blocks;
pub mod gdb_lines;

use blocks::{debug_info_offset, FunctionBlocks};

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
    /// Load addresses of the debug-info function's non-empty ranges, in
    /// debug-info order (LLDB's `SymbolContext::GetAddressRange` gives them
    /// one by one), with [`Self::debug_function`].
    pub function_ranges: Option<Arc<[(u64, u64)]>>,
    /// The debug-info function's entry: the start of its first range in
    /// debug-info order (LLDB's function address), with
    /// [`Self::debug_function`]. Offsets into the function count from it,
    /// so that code gcc split off below it (`f.cold`) is `f - N`.
    pub function_entry: Option<u64>,
    /// Source position: file basename, line, column (line > 0).
    pub line: Option<(Arc<str>, u32, u32)>,
    /// The source file's full path, with [`Self::line`].
    pub source: Option<Arc<str>>,
    /// The inlined function LLDB takes the address to be in, if any (the
    /// name LLDB's call trees and JSON give it).
    pub inlined: Option<Arc<str>>,
    /// Its block (its DWARF entry): the innermost inlined ancestor of the
    /// deepest block holding the address, as LLDB builds blocks.
    pub inlined_block: Option<InlinedBlock>,
    /// Load addresses `[start, end)` LLDB's `SymbolContext::GetAddressRange`
    /// gives: the line-table row the address is in, else the symbol. LLDB
    /// keeps a context for the instructions that follow while they stay in it.
    pub address_range: Option<(u64, u64)>,
}

/// An inlined function's block of code (a `DW_TAG_inlined_subroutine`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct InlinedBlock {
    /// Identifies the block: its entry's offset in `.debug_info`.
    pub id: u64,
    /// Load address of its lowest range (LLDB's range 0): its entry point
    /// for call trees.
    pub entry: u64,
    /// Load address of the start of the block's range containing the
    /// address: the base of the offset LLDB prints after `[inlined] f`.
    /// `None` where LLDB's ranges of the block miss the address (it then
    /// prints no `[inlined]` at all).
    pub range_start: Option<u64>,
}

impl SymbolContext {
    /// LLDB's context line: ``module`function + off at file:line:col``.
    pub fn describe(&self, address: u64) -> String {
        let Some(module) = &self.module else { return "(none)".into() };
        let Some((name, _)) = &self.function else { return format!("{module}`(none)") };
        let mut text = format!("{module}`{name}");
        if let Some(base) = self.function_base() {
            text.push_str(&signed_offset(address, base));
        }
        if let (Some(inlined), Some(start)) = (&self.inlined, self.inlined_block.and_then(|b| b.range_start)) {
            text.push_str(&format!(" [inlined] {inlined}"));
            if address > start {
                text.push_str(&format!(" + {}", address - start));
            }
        }
        if let Some(position) = self.position() {
            text.push_str(&position);
        }
        text
    }

    /// Where offsets into the function count from: its debug-info entry,
    /// else its symbol's start.
    pub fn function_base(&self) -> Option<u64> {
        self.function_entry.or(self.function.as_ref().map(|f| f.1))
    }

    /// The name LLDB's JSON gives the instruction's symbol
    /// (`SymbolContext::GetFunctionName`):
    /// the inlined function's, else the function's, a PLT stub's without its
    /// `symbol stub for: ` display prefix.
    pub fn symbol_name(&self) -> Option<Arc<str>> {
        let (name, _) = self.function.as_ref()?;
        if let Some(inlined) = &self.inlined {
            return Some(inlined.clone());
        }
        Some(name.strip_prefix(PLT_STUB_PREFIX).map_or_else(|| name.clone(), Arc::from))
    }

    /// Whether LLDB keeps this context for an instruction at `address`: it
    /// lies in [`Self::address_range`].
    pub fn holds(&self, address: u64) -> bool {
        self.address_range.is_some_and(|(start, end)| start <= address && address < end)
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
        if self.module != other.module || self.function != other.function || self.inlined_block.map(|b| b.id) != other.inlined_block.map(|b| b.id) {
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
    /// `functions_reach[i]`: the highest end among `functions[..=i]`.
    functions_reach: Vec<u64>,
    /// Data symbols, likewise.
    data: Vec<(u64, u64, Arc<str>)>,
    /// Link-time `[start, end)` of each `PT_LOAD` segment, in header order.
    segments: Vec<(u64, u64)>,
    /// Link-time `[start, end)` of each section the image occupies.
    sections: Vec<(u64, u64)>,
    /// Every symbol in a section, as (address, size), sorted: what LLDB's
    /// symbol table finds for an address no section holds.
    placed_symbols: Vec<(u64, u64)>,
    /// The debug info, read at the first question about lines or inlined
    /// functions (a dump of addresses alone never decompresses libc's
    /// DWARF: 0.1 s of every `retrace dump --raw`).
    lines: std::sync::OnceLock<Option<addr2line::Context<Reader>>>,
    /// The files that hold it: the image, and its separate debug file.
    dwarf_files: (Arc<[u8]>, Option<Arc<[u8]>>),
    /// LLDB's block trees of the functions looked up so far, by the
    /// subprogram's `.debug_info` offset.
    blocks: std::sync::Mutex<std::collections::HashMap<u64, Arc<FunctionBlocks>>>,
}

/// Where a [`Symbolizer`]'s modules were placed: (start, end, slide, name).
#[derive(Debug, Clone, Default)]
pub struct Placements(Vec<(u64, u64, u64, Arc<str>)>);

impl Placements {
    /// [`Symbolizer::file_address`].
    pub fn file_address(&self, address: u64) -> Option<(Arc<str>, u64)> {
        let (_, _, slide, name) = self.0.iter().find(|(start, end, ..)| *start <= address && address < *end)?;
        Some((name.clone(), address.wrapping_sub(*slide)))
    }
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
fn symbol_ranges(symbols: Vec<SymbolEntry>) -> Vec<(u64, u64, Arc<str>)> {
    symbol_ranges_by(symbols, |a, b| b.cmp(&a))
}

/// Data aliases: LLDB names the smallest (`_r_debug`, not the larger
/// `_r_debug_extended`), then the first in the table (a sizeless label
/// last).
fn data_ranges(symbols: Vec<SymbolEntry>) -> Vec<(u64, u64, Arc<str>)> {
    let sized = |size: u64| if size == 0 { u64::MAX } else { size };
    symbol_ranges_by(symbols, |a, b| sized(a).cmp(&sized(b)))
}

/// [`symbol_ranges`] with aliases of one rank ordered by size with `by`
/// (the first kept; the sort is stable: table order after that).
fn symbol_ranges_by(mut symbols: Vec<SymbolEntry>, by: impl Fn(u64, u64) -> std::cmp::Ordering) -> Vec<(u64, u64, Arc<str>)> {
    // A label at its section's end (`_etext`) names nothing in it.
    symbols.retain(|&(start, size, _, section_end, _)| size > 0 || start < section_end);
    symbols.sort_by(|a, b| a.0.cmp(&b.0).then(b.2.cmp(&a.2)).then(by(a.1, b.1)));
    symbols.dedup_by_key(|s| s.0);
    let starts: Vec<u64> = symbols.iter().map(|s| s.0).collect();
    symbols
        .into_iter()
        .enumerate()
        .map(|(i, (start, size, _, section_end, name))| {
            let end = if size > 0 {
                start.saturating_add(size)
            } else {
                starts.get(i + 1).copied().unwrap_or(u64::MAX).min(section_end).max(start.saturating_add(1))
            };
            (start, end, name)
        })
        .collect()
}

type SymbolEntry = (u64, u64, u8, u64, Arc<str>);

/// How LLDB displays a PLT stub's symbol (its trampoline symbol's name is the
/// target's).
const PLT_STUB_PREFIX: &str = "symbol stub for: ";

/// LLDB's trampoline symbols: each `R_X86_64_JUMP_SLOT` relocation of the
/// PLT's relocation section (`DT_JMPREL`) names its `.plt` entry `symbol stub
/// for: NAME`. Entries are counted back from the end of `.plt` (one entry per
/// relocation, entry size rounded up to the section's alignment), so the
/// first entry (the resolver's) is left out; other relocation types keep
/// their index but name nothing.
fn plt_stubs(image: &[u8]) -> Vec<SymbolEntry> {
    use object::read::elf::{Dyn, ElfFile64, FileHeader, SectionHeader, Sym};
    const R_X86_64_JUMP_SLOT: u32 = 7;
    let Ok(elf) = ElfFile64::<object::Endianness>::parse(image) else { return Vec::new() };
    let endian = elf.endian();
    let header = elf.elf_header();
    if header.e_machine(endian) != object::elf::EM_X86_64 {
        return Vec::new();
    }
    let Ok(sections) = header.sections(endian, image) else { return Vec::new() };
    let jmprel = sections.iter().find_map(|section| {
        let dynamic = section.dynamic(endian, image).ok()??.0;
        dynamic.iter().find(|d| d.d_tag(endian) == u64::from(object::elf::DT_JMPREL)).map(|d| d.d_val(endian))
    });
    let Some(jmprel) = jmprel else { return Vec::new() };
    let by_name = |name: &[u8]| sections.iter().find(|s| sections.section_name(endian, s).ok() == Some(name));
    let (Some(plt), Some(rela)) = (by_name(b".plt"), sections.iter().find(|s| s.sh_type(endian) == object::elf::SHT_RELA && s.sh_addr(endian) == jmprel))
    else {
        return Vec::new();
    };
    let Ok(Some((relocations, link))) = rela.rela(endian, image) else { return Vec::new() };
    let Ok(symbols) = sections.symbol_table_by_index(endian, image, link) else { return Vec::new() };
    let (plt_address, plt_size) = (plt.sh_addr(endian), plt.sh_size(endian));
    let align = plt.sh_addralign(endian);
    let mut entry_size = if align > 0 { plt.sh_entsize(endian).div_ceil(align).saturating_mul(align) } else { plt.sh_entsize(endian) };
    let count = relocations.len() as u64;
    if entry_size <= 4 {
        entry_size = if align > 0 { plt_size / align / (count + 1) * align } else { plt_size / (count + 1) };
        if entry_size == 0 {
            return Vec::new();
        }
    }
    let Some(first) = count.checked_mul(entry_size).and_then(|all| plt_size.checked_sub(all)) else { return Vec::new() };
    relocations
        .iter()
        .enumerate()
        .filter(|(_, r)| r.r_type(endian, false) == R_X86_64_JUMP_SLOT)
        .filter_map(|(i, r)| {
            let symbol = symbols.symbol(object::SymbolIndex(r.r_sym(endian, false) as usize)).ok()?;
            let name = std::str::from_utf8(symbol.name(endian, symbols.strings()).ok()?).ok()?;
            let start = plt_address.checked_add(first)?.checked_add((i as u64).checked_mul(entry_size)?)?;
            Some((start, entry_size, 0, plt_address.checked_add(plt_size)?, Arc::<str>::from(format!("{PLT_STUB_PREFIX}{name}"))))
        })
        .collect()
}

/// LLDB's unnamed functions: an `.eh_frame` FDE whose start no symbol names
/// becomes `___lldb_unnamed_symbol_<hex file address>`, without a size (it
/// reaches to the next symbol), in the section containing it.
fn unnamed_unwind_functions(file: &object::File, named: &std::collections::HashSet<u64>) -> Vec<SymbolEntry> {
    use gimli::UnwindSection;
    let Some(section) = file.section_by_name(".eh_frame") else { return Vec::new() };
    let Ok(data) = section.data() else { return Vec::new() };
    let endian = if file.is_little_endian() { gimli::RunTimeEndian::Little } else { gimli::RunTimeEndian::Big };
    let eh_frame = gimli::EhFrame::new(data, endian);
    let mut bases = gimli::BaseAddresses::default().set_eh_frame(section.address());
    if let Some(text) = file.section_by_name(".text") {
        bases = bases.set_text(text.address());
    }
    if let Some(got) = file.section_by_name(".got") {
        bases = bases.set_got(got.address());
    }
    let code_sections: Vec<(u64, u64)> = file
        .sections()
        .filter(|s| matches!(s.flags(), object::SectionFlags::Elf { sh_flags } if sh_flags & 0x4 != 0) && s.size() > 0)
        .map(|s| (s.address(), s.address().saturating_add(s.size())))
        .collect();
    let mut unnamed = Vec::new();
    let mut entries = eh_frame.entries(&bases);
    while let Ok(Some(entry)) = entries.next() {
        let gimli::CieOrFde::Fde(partial) = entry else { continue };
        let Ok(fde) = partial.parse(|_, bases, offset| eh_frame.cie_from_offset(bases, offset)) else { continue };
        let start = fde.initial_address();
        if start == 0 || named.contains(&start) {
            continue;
        }
        let Some(&(_, section_end)) = code_sections.iter().find(|(a, b)| *a <= start && start < *b) else { continue };
        unnamed.push((start, 0, 0, section_end, Arc::<str>::from(format!("___lldb_unnamed_symbol_{start:x}"))));
    }
    unnamed
}

impl Module {
    /// The module's debug info: its debug file's, else its image's.
    fn lines(&self) -> Option<&addr2line::Context<Reader>> {
        self.lines
            .get_or_init(|| {
                let (image, debug) = &self.dwarf_files;
                let parsed = |bytes: &[u8]| object::File::parse(bytes).ok().as_ref().and_then(load_dwarf);
                debug.as_deref().and_then(parsed).or_else(|| parsed(image))
            })
            .as_ref()
    }
}

fn load_dwarf(file: &object::File) -> Option<addr2line::Context<Reader>> {
    let endian = if file.is_little_endian() { gimli::RunTimeEndian::Little } else { gimli::RunTimeEndian::Big };
    let load = |id: gimli::SectionId| -> Result<Reader, gimli::Error> {
        let data = file
            .section_by_name(id.name())
            .and_then(|section| debug_section_data(&section))
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
        let highest = file.segments().map(|s| s.address().saturating_add(s.size())).max().unwrap_or(0);
        let slide = load_address.wrapping_sub(lowest & !0xfff);
        let debug_file = debug.and_then(|bytes| object::File::parse(bytes).ok());
        let mut functions = Vec::new();
        let mut data = Vec::new();
        let mut placed_symbols = Vec::new();
        for source in [Some(&file), debug_file.as_ref()].into_iter().flatten() {
            for symbol in source.symbols().chain(source.dynamic_symbols()) {
                let Ok(name) = symbol.name() else { continue };
                if symbol.address() == 0 || name.is_empty() {
                    continue;
                }
                // (LLDB types a local symbol without a type `Invalid` and
                // does not find it by address.)
                if symbol.section_index().is_some() && (symbol.kind() != SymbolKind::Unknown || symbol.is_global()) {
                    placed_symbols.push((symbol.address(), symbol.size()));
                }
                // Rank: strong global names, then weak ones, then local ones.
                let rank = match (symbol.is_global(), symbol.is_weak()) {
                    (true, false) => 2,
                    (_, true) => 1,
                    _ => 0,
                };
                let section = symbol.section_index().and_then(|index| source.section_by_index(index).ok());
                let section_end = section.as_ref().map(|s| s.address().saturating_add(s.size())).unwrap_or(u64::MAX);
                let in_code = section
                    .as_ref()
                    .is_some_and(|section| matches!(section.flags(), object::SectionFlags::Elf { sh_flags } if sh_flags & 0x4 != 0));
                let entry = (symbol.address(), symbol.size(), rank, section_end, Arc::<str>::from(name));
                match symbol.kind() {
                    SymbolKind::Text => functions.push(entry),
                    SymbolKind::Unknown if in_code => functions.push(entry),
                    // Sized data, and labels such as `_DYNAMIC` and
                    // `_GLOBAL_OFFSET_TABLE_` (LLDB sizes them to the next symbol).
                    SymbolKind::Data => data.push(entry),
                    _ => {}
                }
            }
        }
        // LLDB's synthesized symbols: PLT stubs, then code the unwind table
        // describes that no symbol names.
        functions.extend(plt_stubs(image));
        let named: std::collections::HashSet<u64> = functions.iter().chain(&data).map(|f| f.0).collect();
        functions.extend(unnamed_unwind_functions(&file, &named));
        let functions = symbol_ranges(functions);
        let functions_reach = functions
            .iter()
            .scan(0u64, |reach, f| {
                *reach = (*reach).max(f.1);
                Some(*reach)
            })
            .collect();
        let data = data_ranges(data);
        let dwarf_files = (Arc::<[u8]>::from(image), debug.map(Arc::<[u8]>::from));
        let name = path.rsplit('/').next().unwrap_or(path).into();
        let segments = file.segments().map(|s| (s.address(), s.address().saturating_add(s.size()))).collect();
        let sections = file.sections().filter(|s| s.address() != 0 && s.size() != 0).map(|s| (s.address(), s.address().saturating_add(s.size()))).collect();
        placed_symbols.sort_unstable();
        placed_symbols.dedup();
        self.modules.push(Module {
            start: (lowest & !0xfff).wrapping_add(slide),
            end: highest.wrapping_add(slide),
            slide,
            name,
            functions,
            functions_reach,
            data,
            segments,
            sections,
            placed_symbols,
            lines: std::sync::OnceLock::new(),
            dwarf_files,
            blocks: Default::default(),
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


    /// Where each module was placed, apart from everything else (it can be
    /// shared between threads, which the lazily parsed debug info cannot).
    pub fn placements(&self) -> Placements {
        Placements(self.modules.iter().map(|m| (m.start, m.end, m.slide, m.name.clone())).collect())
    }

    /// The load addresses `[start, end)` of the function symbol containing
    /// `address` (a sizeless one reaching to the next symbol).
    pub fn function_range(&self, address: u64) -> Option<(u64, u64)> {
        let module = self.modules.iter().find(|m| m.start <= address && address < m.end)?;
        let probe = address.wrapping_sub(module.slide);
        let index = module.functions.partition_point(|f| f.0 <= probe).checked_sub(1)?;
        let (start, end, _) = &module.functions[index];
        (probe < *end).then(|| (start.wrapping_add(module.slide), end.wrapping_add(module.slide)))
    }

    /// The data symbol containing `address`: name and offset into it.
    pub fn data_symbol(&self, address: u64) -> Option<(Arc<str>, u64)> {
        let module = self.modules.iter().find(|m| m.start <= address && address < m.end)?;
        let probe = address.wrapping_sub(module.slide);
        let index = module.data.partition_point(|d| d.0 <= probe).checked_sub(1)?;
        let (start, end, name) = &module.data[index];
        (probe < *end).then(|| (name.clone(), probe - start))
    }

    /// An address of a module's segment that no section holds (between
    /// `.data` and an aligned `.bss`, say) as LLDB's disassembler comments
    /// it: LLDB resolves it to the segment, `module.PT_LOAD[i]` (`i` counts
    /// the `PT_LOAD` segments), and when its symbol table finds a symbol
    /// there (one of another section: the nearest below, sized to the next
    /// when it has no size) it names the segment and the offset into it;
    /// with no symbol (an ELF header) nothing.
    pub fn unsectioned(&self, address: u64) -> Option<(Arc<str>, u64)> {
        let module = self.modules.iter().find(|m| m.start <= address && address < m.end)?;
        let probe = address.wrapping_sub(module.slide);
        if module.sections.iter().any(|&(start, end)| start <= probe && probe < end) {
            return None;
        }
        let below = module.placed_symbols.partition_point(|s| s.0 <= probe).checked_sub(1)?;
        let (symbol, size) = module.placed_symbols[below];
        if size != 0 && symbol.saturating_add(size) <= probe {
            return None;
        }
        let (index, (start, _)) = module.segments.iter().enumerate().find(|(_, &(start, end))| start <= probe && probe < end)?;
        Some((format!("{}.PT_LOAD[{index}]", module.name).into(), probe - start))
    }

    /// The symbol context of `address`.
    pub fn lookup(&self, address: u64) -> SymbolContext {
        let Some(module) = self.modules.iter().find(|m| m.start <= address && address < m.end) else {
            return self.jit_context(address).unwrap_or_default();
        };
        let probe = address.wrapping_sub(module.slide);
        let symbol = module.function_at(probe);
        let symbol_range = symbol.map(|f| (f.0.wrapping_add(module.slide), f.1.wrapping_add(module.slide)));
        let mut function = symbol.map(|f| (f.2.clone(), f.0.wrapping_add(module.slide)));
        // The debug info's names: the (outermost) function, as LLDB shows it,
        // and the innermost inlined function.
        let mut inlined = None;
        let mut inlined_block = None;
        let mut debug_function = false;
        let mut function_ranges = None;
        let mut function_entry = None;
        if let (Some((name, _)), Some(lines)) = (&mut function, module.lines()) {
            if let Ok(mut frames) = lines.find_frames(probe).skip_all_loads() {
                let mut outermost = None;
                while let Ok(Some(frame)) = frames.next() {
                    // LLDB makes no functions of assembler units' subprograms.
                    let function = frame.function.as_ref().filter(|f| f.language != Some(gimli::DW_LANG_Mips_Assembler));
                    if let Some(Ok(raw)) = function.map(|f| f.raw_name()) {
                        outermost = Some((Arc::<str>::from(&*raw), frame.dw_die_offset));
                    }
                }
                if let Some((outer, die)) = outermost {
                    *name = outer;
                    debug_function = true;
                    if let Some(ranges) = die.and_then(|die| module.function_ranges(lines, probe, die)) {
                        let ranges: Arc<[(u64, u64)]> = ranges.into_iter().map(|(start, end)| (start.wrapping_add(module.slide), end.wrapping_add(module.slide))).collect();
                        function_entry = ranges.first().map(|r| r.0);
                        function_ranges = Some(ranges);
                    }
                    // The inlined function LLDB names: its own block tree,
                    // not the debug info's nesting as such.
                    if let Some((name, block)) = die.and_then(|die| module.inlined_at(lines, probe, die)) {
                        inlined = Some(name);
                        inlined_block = Some(InlinedBlock {
                            id: block.id,
                            entry: block.entry.wrapping_add(module.slide),
                            range_start: block.range_start.map(|start| start.wrapping_add(module.slide)),
                        });
                    }
                }
            }
        }
        let located = module.lines().and_then(|lines| {
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
        let line_range = module.lines().and_then(|lines| {
            let (start, len, _) = lines.find_location_range(probe, probe.saturating_add(1)).ok()?.next()?;
            Some((start.wrapping_add(module.slide), start.wrapping_add(len).wrapping_add(module.slide)))
        });
        let address_range = line_range.or(symbol_range);
        SymbolContext { module: Some(module.name.clone()), function, debug_function, function_ranges, function_entry, line, source, inlined, inlined_block, address_range }
    }
}

/// How many times larger than its compressed bytes a debug section may
/// claim to be. DWARF compresses 3-10x; zlib's limit is about 1000x, which
/// a hostile module's section would use to make gigabytes of a few
/// megabytes (a "zlib bomb"; the `modules` fuzz target found one claiming
/// 64 GiB).
const MAX_EXPANSION: u64 = 64;

/// A debug section's bytes, decompressed; `None` when they cannot be read,
/// or when the section claims more than [`MAX_EXPANSION`] times its
/// compressed size (plus 1 MiB).
pub(crate) fn debug_section_data<'data>(section: &object::Section<'data, '_>) -> Option<std::borrow::Cow<'data, [u8]>> {
    use object::ObjectSection;
    let compressed = section.compressed_data().ok()?;
    if compressed.format != object::CompressionFormat::None && compressed.uncompressed_size > (compressed.data.len() as u64).saturating_mul(MAX_EXPANSION).saturating_add(1 << 20) {
        return None;
    }
    compressed.decompress().ok()
}

/// LLDB's offset of `address` from `base` after a name: ` + N`, ` - N`
/// below it, nothing at it.
pub fn signed_offset(address: u64, base: u64) -> String {
    match address.cmp(&base) {
        std::cmp::Ordering::Greater => format!(" + {}", address - base),
        std::cmp::Ordering::Less => format!(" - {}", base - address),
        std::cmp::Ordering::Equal => String::new(),
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

impl Module {
    /// The symbol LLDB's symbol table gives for file address `probe`: the
    /// one starting there, else the earliest-starting one containing it
    /// (an unnamed function inside a sized one names only its first byte).
    fn function_at(&self, probe: u64) -> Option<&(u64, u64, Arc<str>)> {
        let after = self.functions.partition_point(|f| f.0 <= probe);
        let last = after.checked_sub(1)?;
        if self.functions[last].0 == probe {
            return Some(&self.functions[last]);
        }
        let mut found = None;
        for i in (0..=last).rev() {
            if self.functions_reach[i] <= probe {
                break;
            }
            if probe < self.functions[i].1 {
                found = Some(i);
            }
        }
        found.map(|i| &self.functions[i])
    }

    /// The inlined function LLDB names at file address `probe` inside the
    /// subprogram at `function` (its unit offset).
    fn inlined_at(&self, lines: &addr2line::Context<Reader>, probe: u64, function: gimli::UnitOffset<usize>) -> Option<(Arc<str>, InlinedBlock)> {
        self.function_blocks(lines, probe, function)?.inlined_at(probe)
    }

    /// The link-time addresses of the function's first range in debug-info
    /// order (what `SymbolContext::GetAddressRange(…, 0, …)` gives LLDB's
    /// disassembler: the entry's part, not a `.cold` one below it).
    /// The function's non-empty ranges in debug-info order (the first
    /// starts at its entry).
    fn function_ranges(&self, lines: &addr2line::Context<Reader>, probe: u64, function: gimli::UnitOffset<usize>) -> Option<Vec<(u64, u64)>> {
        let blocks = self.function_blocks(lines, probe, function)?;
        blocks.function_ranges()
    }

    fn function_blocks(&self, lines: &addr2line::Context<Reader>, probe: u64, function: gimli::UnitOffset<usize>) -> Option<Arc<FunctionBlocks>> {
        let unit = lines.find_dwarf_and_unit(probe).skip_all_loads()?;
        let key = debug_info_offset(unit, function);
        let cached = self.blocks.lock().ok()?.get(&key).cloned();
        Some(match cached {
            Some(blocks) => blocks,
            None => {
                let built = Arc::new(FunctionBlocks::build(unit, function)?);
                self.blocks.lock().ok()?.insert(key, built.clone());
                built
            }
        })
    }
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
