//! `retrace jitdump` as a user runs it: on a jitdump typed in field by field
//! from perf's specification, and on one Node.js (V8) writes.

use std::path::PathBuf;
use std::process::Command;

use retrace_decoder::jitdump::{CodeRegions, Jitdump};
use retrace_tests::node::{optimized_fib_names, NodePerfRun, FIB_SCRIPT, FIB_SCRIPT_OUTPUT};
use retrace_tests::tools::{require, which};

fn retrace(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_retrace")).args(args).output().expect("run retrace")
}

fn temp_file(name: &str, bytes: &[u8]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("retrace-cli-jitdump-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

/// A jitdump with every record type, an unknown one, unaligned records, two
/// damaged records the listing goes past and a cut-off record header at the
/// end. Offsets (decimal) are in the comments.
fn damaged_dump(big_endian: bool) -> Vec<u8> {
    let mut bytes = Vec::new();
    let u32 = |bytes: &mut Vec<u8>, value: u32| bytes.extend(if big_endian { value.to_be_bytes() } else { value.to_le_bytes() });
    let u64 = |bytes: &mut Vec<u8>, value: u64| bytes.extend(if big_endian { value.to_be_bytes() } else { value.to_le_bytes() });
    // 0: header: magic, version 1, size 40, EM_X86_64, pad1, pid 4660, timestamp 1000, flags 0.
    for field in [0x4A69_5444, 1, 40, 62, 0, 4660] {
        u32(&mut bytes, field);
    }
    u64(&mut bytes, 1000);
    u64(&mut bytes, 0);
    // 40: DEBUG_INFO, 53 bytes: code_addr, nr_entry 1, {addr, line 1, discrim 1, "a.js"}.
    u32(&mut bytes, 2);
    u32(&mut bytes, 53);
    u64(&mut bytes, 100);
    u64(&mut bytes, 0x10000);
    u64(&mut bytes, 1);
    u64(&mut bytes, 0x10000);
    u32(&mut bytes, 1);
    u32(&mut bytes, 1);
    bytes.extend(b"a.js\0");
    // 93: UNWINDING_INFO, 60 bytes: a 20-byte .eh_frame_hdr and no .eh_frame.
    u32(&mut bytes, 4);
    u32(&mut bytes, 60);
    u64(&mut bytes, 101);
    for size in [20, 20, 0] {
        u64(&mut bytes, size);
    }
    bytes.extend([1, 0x1b, 3, 0x3b]);
    bytes.extend([0; 16]);
    // 153: LOAD "hot", 63 bytes: pid, tid, vma, code_addr 0x10000, code_size 3, code_index 0.
    u32(&mut bytes, 0);
    u32(&mut bytes, 63);
    u64(&mut bytes, 102);
    u32(&mut bytes, 4660);
    u32(&mut bytes, 4660);
    for field in [0x10000, 0x10000, 3, 0] {
        u64(&mut bytes, field);
    }
    bytes.extend(b"hot\0\xc3\xc3\xc3");
    // 216: record id 9 (unknown), 18 bytes.
    u32(&mut bytes, 9);
    u32(&mut bytes, 18);
    u64(&mut bytes, 150);
    bytes.extend(b"hi");
    // 234: LOAD "cold", 62 bytes: code_addr 0x20000, code_size 1, code_index 1.
    u32(&mut bytes, 0);
    u32(&mut bytes, 62);
    u64(&mut bytes, 200);
    u32(&mut bytes, 4660);
    u32(&mut bytes, 4660);
    for field in [0x20000, 0x20000, 1, 1] {
        u64(&mut bytes, field);
    }
    bytes.extend(b"cold\0\x90");
    // 296: MOVE, 64 bytes: code_index 0 from 0x10000 to 0x30000.
    u32(&mut bytes, 1);
    u32(&mut bytes, 64);
    u64(&mut bytes, 300);
    u32(&mut bytes, 4660);
    u32(&mut bytes, 4660);
    for field in [0x30000, 0x10000, 0x30000, 3, 0] {
        u64(&mut bytes, field);
    }
    // 360: LOAD claiming 100 bytes of code in a 60-byte record.
    u32(&mut bytes, 0);
    u32(&mut bytes, 60);
    u64(&mut bytes, 310);
    u32(&mut bytes, 4660);
    u32(&mut bytes, 4660);
    for field in [0x40000, 0x40000, 100, 2] {
        u64(&mut bytes, field);
    }
    bytes.extend(b"bad\0");
    // 420: MOVE of code_index 5, which was never loaded.
    u32(&mut bytes, 1);
    u32(&mut bytes, 64);
    u64(&mut bytes, 320);
    u32(&mut bytes, 4660);
    u32(&mut bytes, 4660);
    for field in [0x50000, 0x40000, 0x50000, 1, 5] {
        u64(&mut bytes, field);
    }
    // 484: CLOSE.
    u32(&mut bytes, 3);
    u32(&mut bytes, 16);
    u64(&mut bytes, 400);
    // 500: 5 bytes of a record header.
    bytes.extend([0, 0, 0, 0, 0x10]);
    bytes
}

#[test]
fn jitdump_lists_loads_moves_and_errors_with_offsets() {
    for (big_endian, order) in [(false, "little-endian"), (true, "big-endian")] {
        let path = temp_file(&format!("damaged-{order}.dump"), &damaged_dump(big_endian));
        let out = retrace(&["jitdump", path.to_str().unwrap()]);
        assert!(out.status.success(), "{out:?}");
        let stdout = String::from_utf8(out.stdout).unwrap();
        let header = format!("0000000000000000  header  version 1  {order}  pid 4660  elf_mach 62  flags 0x0  timestamp 1000");
        let expected = [
            header.as_str(),
            "0000000000000099  load  index 0  0000000000010000-0000000000010003  size 0x3  time 102  hot",
            "00000000000000ea  load  index 1  0000000000020000-0000000000020001  size 0x1  time 200  cold",
            "0000000000000128  move  index 0  0000000000010000 -> 0000000000030000  size 0x3  time 300  hot",
            "[0000000000000168: error: load record needs 157 bytes but its size is 60; skipped]",
            "[00000000000001a4: error: move of code_index 5, which no earlier load defined; skipped]",
            "[00000000000001f4: error: truncated record header (5 of 16 bytes); no records can be read after it]",
        ];
        assert_eq!(stdout.lines().collect::<Vec<_>>(), expected);
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert!(stderr.contains("2 loads, 1 moves, 3 error(s)"), "{stderr}");
    }
}

#[test]
fn jitdump_json_has_one_object_per_line() {
    let path = temp_file("damaged-json.dump", &damaged_dump(false));
    let out = retrace(&["jitdump", "--json", path.to_str().unwrap()]);
    assert!(out.status.success(), "{out:?}");
    let records: Vec<serde_json::Value> =
        String::from_utf8(out.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(records.len(), 7);
    assert_eq!(records[0]["record"], "header");
    assert_eq!(records[0]["byte_order"], "little-endian");
    let hot = &records[1];
    assert_eq!((hot["offset"].as_u64(), hot["record"].as_str()), (Some(153), Some("load")));
    assert_eq!((hot["code_index"].as_u64(), hot["start"].as_u64(), hot["end"].as_u64()), (Some(0), Some(0x10000), Some(0x10003)));
    assert_eq!((hot["size"].as_u64(), hot["time"].as_u64(), hot["name"].as_str()), (Some(3), Some(102), Some("hot")));
    assert_eq!((hot["debug_entries"].as_u64(), hot["unwinding_size"].as_u64()), (Some(1), Some(20)));
    assert_eq!((records[2]["debug_entries"].is_null(), records[2]["unwinding_size"].is_null()), (true, true));
    let moved = &records[3];
    assert_eq!((moved["record"].as_str(), moved["from"].as_u64(), moved["to"].as_u64()), (Some("move"), Some(0x10000), Some(0x30000)));
    assert_eq!((records[4]["offset"].as_u64(), records[4]["ends_records"].as_bool()), (Some(360), Some(false)));
    assert_eq!(records[6]["error"], "truncated record header (5 of 16 bytes)");
    assert_eq!(records[6]["ends_records"], true);
}

#[test]
fn jitdump_rejects_files_that_are_not_jitdumps() {
    let path = temp_file("not-a-dump", b"\x7fELF and then some more bytes than a header has");
    let out = retrace(&["jitdump", path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.contains(&format!("{}: offset 0x0: not a jitdump file (magic 0x464c457f)", path.display())), "{stderr}");
}

fn monotonic_ns() -> u64 {
    let now = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).expect("CLOCK_MONOTONIC");
    now.tv_sec() as u64 * 1_000_000_000 + now.tv_nsec() as u64
}

/// Node's jitdump: one line per LOAD, each exactly as the library describes
/// the region, with load times on CLOCK_MONOTONIC during the run, and the
/// optimized `fib` line exactly as V8's perf map gives its address, size and name.
#[test]
fn jitdump_lists_what_node_wrote() {
    let node = which("node");
    if !require("node (Node.js)", node.is_some()) {
        return;
    }
    let before = monotonic_ns();
    let run = NodePerfRun::run(&node.unwrap(), "cli", FIB_SCRIPT);
    let after = monotonic_ns();
    assert_eq!(run.stdout, FIB_SCRIPT_OUTPUT);
    let out = retrace(&["jitdump", run.dump_path.to_str().unwrap()]);
    assert!(out.status.success(), "{out:?}");
    assert!(out.stderr.is_empty(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = stdout.lines().collect();

    let dump = Jitdump::parse(&run.dump).unwrap();
    let regions = CodeRegions::from_dump(&dump);
    assert_eq!(lines.len(), 1 + regions.regions().len(), "a header line and one line per LOAD (no moves, no errors)");
    assert!(lines[0].starts_with(&format!("0000000000000000  header  version 1  little-endian  pid {}  ", run.pid)), "{}", lines[0]);
    for (line, region) in lines[1..].iter().zip(regions.regions()) {
        let start = region.placements[0].address;
        let expected = format!(
            "{:016x}  load  index {}  {:016x}-{:016x}  size {:#x}  time {}  {}",
            region.load_offset,
            region.code_index,
            start,
            start + region.size(),
            region.size(),
            region.load_time,
            region.name_lossy()
        );
        assert_eq!(*line, expected);
        assert!(before <= region.load_time && region.load_time <= after, "{line}: not during the run [{before}, {after}]");
    }

    let names = optimized_fib_names(&run.script);
    let map_entry = run.perf_map.iter().find(|e| names.contains(&e.name)).expect("the perf map has the optimized fib");
    let hot = regions.regions().iter().find(|r| r.name == map_entry.name.as_bytes()).unwrap();
    let expected = format!(
        "{:016x}  load  index {}  {:016x}-{:016x}  size {:#x}  time {}  {}",
        hot.load_offset,
        hot.code_index,
        map_entry.start,
        map_entry.start + map_entry.size,
        map_entry.size,
        hot.load_time,
        map_entry.name
    );
    assert!(lines.contains(&expected.as_str()), "no line {expected:?}");
}
