//! Module files from a hostile bundle that made the decoder panic, found
//! by the `modules` fuzz target (decoder/fuzz), read as that target reads
//! them: placed in an image, read for symbols and GDB's line table, looked
//! up around their segments. Each must be read without a panic, and with
//! no allocation over 256 MiB (the fuzz targets' allocator, which aborts).

#[path = "../../tests/fuzz/allocation_limit.rs"]
mod allocation_limit;

use retrace_decoder::image::Image;
use retrace_decoder::symbols::gdb_lines::GdbLineTable;
use retrace_decoder::symbols::Symbolizer;

const LOAD: u64 = 0x5555_5555_4000;

/// The inputs, by what they hit.
const FOUND: &[(&str, &[u8])] = &[
    // A segment whose address + size passes 2^64 (symbols::add_module).
    ("segment end past 2^64", include_bytes!("data/module-segment-end-overflow-1471825c.bin")),
    // A compressed debug section claiming 64 GiB (symbols::debug_section_data).
    ("compressed section of 64 GiB", include_bytes!("data/module-compressed-section-64gib-f04b8cdc.bin")),
];

#[test]
fn hostile_module_files_are_read_without_a_panic() {
    for (what, bytes) in FOUND {
        // (Aligned, as a file read into memory is: `object` reads headers
        // in place.)
        let elf = &bytes.to_vec()[..];
        let mut image = Image::new();
        let _ = image.add_elf("hostile.so", elf.to_vec(), LOAD);
        let mut symbols = Symbolizer::new();
        symbols.add_module("hostile.so", elf, LOAD, Some(elf));
        let table = GdbLineTable::from_elf(elf);
        let mut addresses: Vec<u64> = image.sections().iter().flat_map(|s| [s.start, s.start.wrapping_add(s.len as u64 / 2)]).collect();
        addresses.extend([LOAD, LOAD + 0x1000, 0, u64::MAX]);
        for address in addresses {
            let context = symbols.lookup(address);
            let _ = (context.describe(address), context.position(), symbols.function_range(address), symbols.data_symbol(address));
            let _ = table.find_pc_line(address.wrapping_sub(LOAD));
        }
        eprintln!("{what}: read");
    }
}

