//! The jitdump reader on a real producer: Node.js (V8) with `--perf-prof`,
//! checked against V8's other account of the same code, its perf map
//! (`--perf-basic-prof`), and against the node executable's own bytes.

use std::collections::HashMap;

use object::{Object, ObjectSegment};
use retrace_decoder::image::{Image, Memory};
use retrace_decoder::jitdump::{ByteOrder, CodeRegion, CodeRegions, Jitdump, RecordBody};
use retrace_decoder::symbols::Symbolizer;
use retrace_tests::node::{optimized_fib_names, NodePerfRun, PerfMapEntry, FIB_SCRIPT, FIB_SCRIPT_OUTPUT};
use retrace_tests::tools::{require, which};

/// `(address, size, name)` of a region at its LOAD.
fn load_triple(region: &CodeRegion) -> (u64, u64, String) {
    (region.placements[0].address, region.size(), region.name_lossy().into_owned())
}

/// A V8 name without its kind prefix: `JS:~f path:1:2` → `~f path:1:2`.
fn without_kind(name: &str) -> &str {
    name.split_once(':').map_or(name, |(_, rest)| rest)
}

/// Interpreted code (`~`): with --interpreted-frames-native-stack, a copy of
/// the interpreter entry trampoline made for one function.
fn is_interpreted(name: &str) -> bool {
    without_kind(name).starts_with('~')
}

#[test]
fn node_jitdump_agrees_with_v8_perf_map() {
    let node = which("node");
    if !require("node (Node.js)", node.is_some()) {
        return;
    }
    let started = std::time::SystemTime::now();
    let run = NodePerfRun::run(&node.unwrap(), "e2e", FIB_SCRIPT);
    let finished = std::time::SystemTime::now();
    assert_eq!(run.stdout, FIB_SCRIPT_OUTPUT);

    // Header: V8 writes version 1, the host's byte order and machine, no
    // flags (CLOCK_MONOTONIC record times) and its creation time in µs since
    // the epoch.
    let dump = Jitdump::parse(&run.dump).expect("node's jitdump parses");
    let header = *dump.header();
    assert_eq!((header.pid, header.version, header.size, header.flags), (run.pid, 1, 40, 0));
    if cfg!(target_arch = "x86_64") {
        assert_eq!((header.byte_order, header.elf_mach), (ByteOrder::Little, 62));
    }
    let micros = |time: std::time::SystemTime| time.duration_since(std::time::UNIX_EPOCH).unwrap().as_micros() as u64;
    assert!(
        micros(started) <= header.timestamp && header.timestamp <= micros(finished),
        "header time {} outside the run [{}, {}]",
        header.timestamp,
        micros(started),
        micros(finished)
    );

    // Records: all intact, non-decreasing times, the last one ends the file.
    let records: Vec<_> = dump.records().map(|r| r.expect("node writes no damaged records")).collect();
    assert_eq!(records.first().map(|r| r.offset), Some(40));
    let last = records.last().unwrap();
    assert_eq!(last.offset + last.size as usize, run.dump.len());
    assert!(records.windows(2).all(|w| w[0].timestamp <= w[1].timestamp), "record times go back");
    let regions = CodeRegions::from_dump(&dump);
    assert!(regions.errors().is_empty(), "{:?}", regions.errors());
    assert!(regions.regions().len() > 1000, "{} regions", regions.regions().len());
    let loads = records.iter().filter(|r| matches!(r.body, RecordBody::CodeLoad(_))).count();
    assert_eq!(loads, regions.regions().len());

    // The perf map against the LOADs. What was found (Node 20.20 / V8 11.3
    // and Debian 12's Node 18.20 / V8 10.2 alike): V8 logs each code-creation
    // event to both files, but the jitdump writer takes machine code only,
    // while the perf map also lists every interpreted function's bytecode
    // array (not executable: it lives in V8's heap, not the code space). With
    // --interpreted-frames-native-stack each interpreted function also gets
    // its own copy of the interpreter entry trampoline, a LOAD named like its
    // bytecode array (`JS:~fib …`; V8 10.2 lists a script's bytecode as
    // `Script:~…` next to its trampoline `Function:~…`, hence the kind prefix
    // is ignored). So, exactly:
    //  1. the map's lines that are LOADs (same address, size and name) are
    //     all the LOADs, in the same order;
    //  2. the other map lines are one bytecode array per interpreted LOAD
    //     (same name without its kind prefix), none inside any LOAD's code;
    //  3. the interpreted LOADs all have the size of V8's interpreter entry
    //     trampoline builtin.
    let load_triples: Vec<(u64, u64, String)> = regions.regions().iter().map(load_triple).collect();
    let is_load: std::collections::HashSet<&(u64, u64, String)> = load_triples.iter().collect();
    let map_triples: Vec<(u64, u64, String)> =
        run.perf_map.iter().map(|PerfMapEntry { start, size, name }| (*start, *size, name.clone())).collect();
    let (map_loads, map_only): (Vec<_>, Vec<_>) = map_triples.iter().partition(|triple| is_load.contains(triple));
    assert_eq!(map_loads.len(), load_triples.len(), "LOADs missing from the perf map");
    assert!(map_loads.iter().copied().eq(load_triples.iter()), "the perf map lists the LOADs in another order");
    let mut bytecode_names: HashMap<String, i64> = HashMap::new();
    for (start, _, name) in &map_only {
        assert!(is_interpreted(name), "map-only line is not interpreted code: {start:#x} {name}");
        let inside = regions.regions().iter().find(|r| r.placements[0].address <= *start && *start - r.placements[0].address < r.size());
        assert!(inside.is_none(), "map-only line {start:#x} {name} is inside {inside:?}");
        *bytecode_names.entry(without_kind(name).to_string()).or_default() += 1;
    }
    let interpreted: Vec<&CodeRegion> = regions.regions().iter().filter(|r| is_interpreted(&r.name_lossy())).collect();
    for region in &interpreted {
        *bytecode_names.entry(without_kind(&region.name_lossy()).to_string()).or_default() -= 1;
    }
    let unpaired: Vec<_> = bytecode_names.iter().filter(|(_, count)| **count != 0).collect();
    assert!(unpaired.is_empty(), "bytecode arrays and interpreted LOADs differ: {unpaired:?}");
    assert!(!interpreted.is_empty());
    let trampoline_sizes: Vec<u64> = regions
        .regions()
        .iter()
        .filter(|r| matches!(&*r.name_lossy(), "Builtin:InterpreterEntryTrampoline" | "Builtin:InterpreterEntryTrampolineForProfiling"))
        .map(CodeRegion::size)
        .collect();
    let copy_size = interpreted[0].size();
    assert!(interpreted.iter().all(|r| r.size() == copy_size), "interpreted LOADs of several sizes");
    assert!(trampoline_sizes.contains(&copy_size), "copy size {copy_size:#x}, trampolines {trampoline_sizes:x?}");

    // The hot function was optimized, and is found by address and time, in
    // an image and by the symbolizer.
    let names = optimized_fib_names(&run.script);
    let hot = regions
        .regions()
        .iter()
        .find(|r| names.iter().any(|name| name.as_bytes() == r.name))
        .unwrap_or_else(|| panic!("no region named {names:?}"));
    let start = hot.placements[0].address;
    let middle = start + hot.size() / 2;
    assert_eq!(regions.region_at(middle, Some(hot.load_time)).map(|r| r.code_index), Some(hot.code_index));
    assert_eq!(regions.region_at(middle, None).map(|r| r.code_index), Some(hot.code_index));
    assert_ne!(regions.region_at(start + hot.size(), None).map(|r| r.code_index), Some(hot.code_index), "one past the end");
    let mut image = Image::new();
    assert!(regions.add_to_image(&mut image, None) > 1000);
    let mut code = vec![0u8; hot.code.len()];
    assert_eq!(image.read(start, &mut code), hot.code.len());
    assert_eq!(code, hot.code);
    let mut symbolizer = Symbolizer::new();
    let module = format!("jit-{}.dump", run.pid);
    regions.add_to_symbolizer(&mut symbolizer, &module, None);
    let context = symbolizer.lookup(middle);
    assert_eq!(context.function, Some((hot.name_lossy().into(), start)));
    assert_eq!(context.module.as_deref(), Some(module.as_str()));

    // DEBUG_INFO describes the LOAD that follows it (same code address).
    let described: Vec<&CodeRegion> = regions.regions().iter().filter(|r| r.debug_info.is_some()).collect();
    assert!(!described.is_empty());
    for region in described {
        assert_eq!(region.debug_info.as_ref().unwrap().code_addr, region.placements[0].address, "{}", region.name_lossy());
    }

    // UNWINDING_INFO: `.eh_frame` first, `.eh_frame_hdr` last (perf's
    // order). Every header is a DWARF .eh_frame_hdr (version 1, encodings
    // pcrel|sdata4, udata4, datarel|sdata4). Where there is a real
    // `.eh_frame`, it starts with a CIE, the header's eh_frame_ptr points
    // back to its start, and its one FDE's initial location (relative to the
    // header) is the code of the LOAD that follows, laid out as V8 maps it:
    // code, padding to 8, `.eh_frame`, `.eh_frame_hdr`.
    let mut with_eh_frame = 0;
    for region in regions.regions() {
        let Some(unwinding) = region.unwinding_info else { continue };
        let hdr = unwinding.eh_frame_hdr;
        assert_eq!(hdr.get(..4), Some(&[1, 0x1b, 3, 0x3b][..]), "{}", region.name_lossy());
        if unwinding.eh_frame.is_empty() {
            continue;
        }
        with_eh_frame += 1;
        let word = |bytes: &[u8], at: usize| i32::from_le_bytes(bytes[at..at + 4].try_into().unwrap());
        assert_eq!(word(unwinding.eh_frame, 4), 0, "CIE id");
        assert_eq!(word(hdr, 4), -(unwinding.eh_frame.len() as i32 + 4), "eh_frame_ptr");
        assert_eq!(word(hdr, 8), 1, "fde_count");
        let code_span = (region.size() as i32 + 7) & !7;
        assert_eq!(word(hdr, 12), -(code_span + unwinding.eh_frame.len() as i32), "{}: FDE initial location", region.name_lossy());
    }
    assert!(with_eh_frame >= 1, "no UNWINDING_INFO with .eh_frame");

    // Builtins: when node is a fixed-address executable (Node 20 from
    // NodeSource) V8's embedded builtins are inside it, and their LOADs'
    // code is the executable's own bytes at those addresses. (Debian's Node
    // 18 keeps them in libnode.so, loaded at a random address: nothing to
    // compare with there.)
    let executable = std::fs::read(which("node").unwrap()).expect("read the node executable");
    let elf = object::File::parse(&*executable).expect("node is an ELF file");
    if elf.kind() == object::ObjectKind::Executable {
        let mut compared = 0;
        for region in regions.regions() {
            let address = region.placements[0].address;
            for segment in elf.segments() {
                let (offset, file_size) = segment.file_range();
                let within = address.wrapping_sub(segment.address());
                if address >= segment.address() && within + region.size() <= file_size {
                    let at = (offset + within) as usize;
                    assert_eq!(&executable[at..at + region.code.len()], region.code, "{}", region.name_lossy());
                    compared += 1;
                }
            }
        }
        assert!(compared > 1000, "only {compared} builtins inside the node executable");
    }
}
