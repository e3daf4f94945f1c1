//! Fuzzes what retrace reads from a bundle's module copies, which come
//! from someone else: the input as an ELF file (the seeds are real ones,
//! with DWARF) placed in an `Image` (`add_elf`), read for symbols and lines by the `Symbolizer`
//! (`object` + `gimli`), and for GDB's line table (`GdbLineTable`), then
//! looked up at addresses around its segments. Must never panic.
#![no_main]

#[path = "../../../tests/fuzz/allocation_limit.rs"]
mod allocation_limit;

use libfuzzer_sys::fuzz_target;
use retrace_decoder::image::Image;
use retrace_decoder::symbols::gdb_lines::GdbLineTable;
use retrace_decoder::symbols::Symbolizer;

const LOAD: u64 = 0x5555_5555_4000;

fn check(elf: &[u8]) {
    let mut image = Image::new();
    let placed = image.add_elf("fuzz.so", elf.to_vec(), LOAD).is_ok();
    let mut symbols = Symbolizer::new();
    symbols.add_module("fuzz.so", elf, LOAD, Some(elf));
    let table = GdbLineTable::from_elf(elf);
    let mut addresses: Vec<u64> = image.sections().iter().take(8).flat_map(|s| [s.start, s.start.wrapping_add(s.len as u64 / 2)]).collect();
    addresses.extend([LOAD, LOAD + 0x1000, 0]);
    for address in addresses {
        let context = symbols.lookup(address);
        let _ = (context.describe(address), context.position(), context.symbol_name());
        let _ = symbols.function_range(address);
        let _ = symbols.data_symbol(address);
        let _ = table.find_pc_line(address.wrapping_sub(LOAD));
        if placed {
            if let Some(section) = image.section_at(address) {
                assert!(section.offset + section.len <= section.bytes.len());
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    check(data);
});
