//! The decoder's line tables read as GDB 13 reads them
//! (`symbols::gdb_lines`, what the LLDB shim's reverse stepping stops by)
//! against GDB 13 itself: for every address of the programs' own
//! functions, `find_pc_line` gives the start, end, line and file GDB's
//! `gdb.find_pc_line` gives — on optimised code with inlined calls (rows
//! that are not statements, several files at one address) and not.

use std::path::Path;
use std::process::Command;

use object::{Object, ObjectSymbol, SymbolKind};
use retrace_decoder::symbols::gdb_lines::GdbLineTable;
use retrace_tests::recordings::build;
use retrace_tests::tools::{require, which};

/// GDB's answer at `pc`: (start, end, line, file name).
type Answer = (u64, Option<u64>, u64, Option<String>);

/// GDB's `find_pc_line` at every address of `ranges`, in one GDB.
fn gdb_answers(program: &Path, ranges: &[(u64, u64)]) -> Vec<(u64, Answer)> {
    let script = format!(
        "import gdb\nfor lo, hi in {ranges:?}:\n    for pc in range(lo, hi):\n        sal = gdb.find_pc_line(pc)\n        name = sal.symtab.filename if sal.symtab is not None and sal.line else ''\n        last = sal.last if sal.last is not None else -1\n        print('LINE %d %d %d %d %s' % (pc, sal.pc, last, sal.line, name))\n"
    );
    let file = program.with_extension("lines.py");
    std::fs::write(&file, script).unwrap();
    let out = Command::new("gdb").args(["-batch", "-nx", "-ex"]).arg(format!("source {}", file.display())).arg(program).output().expect("run gdb");
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .filter_map(|line| {
            let mut words = line.strip_prefix("LINE ")?.splitn(5, ' ');
            let mut number = || words.next()?.parse::<i64>().ok();
            let (pc, start, last, line) = (number()? as u64, number()? as u64, number()?, number()? as u64);
            let name = words.next().filter(|n| !n.is_empty()).map(str::to_string);
            Some((pc, (start, (last >= 0).then(|| last as u64 + 1), line, name)))
        })
        .collect()
}

#[test]
fn line_tables_read_as_gdb_reads_them_answer_as_gdb_does() {
    if !require("gdb", which("gdb").is_some()) || !require("gcc", which("gcc").is_some()) {
        return;
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("gdb_lines");
    for (name, flags) in [("inlined_steps", &["-O2", "-no-pie"][..]), ("recursion", &["-O2", "-no-pie"][..]), ("step_back", &["-O0", "-no-pie"][..])] {
        let program = build(name, &dir, flags);
        let bytes = std::fs::read(&program).unwrap();
        let table = GdbLineTable::from_elf(&bytes);
        assert!(!table.is_empty(), "{name}: no line table read");
        // The functions compiled from the program's own source.
        let file = object::File::parse(&*bytes).unwrap();
        let mut ranges: Vec<(u64, u64)> = file
            .symbols()
            .filter(|s| s.kind() == SymbolKind::Text && s.size() > 0 && table.find_pc_line(s.address()).line != 0)
            .map(|s| (s.address(), s.address() + s.size()))
            .collect();
        ranges.sort_unstable();
        ranges.dedup();
        assert!(ranges.len() >= 2, "{name}: functions with lines: {ranges:x?}");
        let answers = gdb_answers(&program, &ranges);
        let addresses: u64 = ranges.iter().map(|(lo, hi)| hi - lo).sum();
        assert_eq!(answers.len() as u64, addresses, "{name}: GDB answered for every address");
        let mut differences = Vec::new();
        for (pc, (start, end, line, gdb_file)) in &answers {
            let ours = table.find_pc_line(*pc);
            let our_file = ours.file.as_deref().map(|f| Path::new(f).file_name().unwrap().to_string_lossy().into_owned());
            let gdb_file = gdb_file.as_deref().map(|f| Path::new(f).file_name().unwrap().to_string_lossy().into_owned());
            let theirs = if *line == 0 { (0, None, None) } else { (*line, Some(*start), gdb_file) };
            let mine = if ours.line == 0 { (0, None, None) } else { (ours.line, Some(ours.pc), our_file) };
            if theirs != mine || (*line != 0 && ours.end != *end) {
                differences.push(format!("{pc:#x}: GDB {start:#x}-{end:x?} line {line} {theirs:?}, ours {:#x}-{:x?} {mine:?}", ours.pc, ours.end));
            }
        }
        assert!(differences.is_empty(), "{name}: {} of {} addresses differ:\n{}", differences.len(), answers.len(), differences[..differences.len().min(20)].join("\n"));
        eprintln!("{name}: {} addresses in {} functions, as GDB", answers.len(), ranges.len());
    }
}
