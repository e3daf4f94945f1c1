//! The README's main job, as a user runs it from a fresh clone:
//! `bash docs/examples/record-and-find-the-writer.sh` records the planted
//! bug with full state, GDB on the replay runs backwards from the wrong
//! value to its writer, and LLDB dumps the recording. The truths: the
//! program run natively (the value it prints) and the source's marked
//! lines (the overrunning store in `fill`, the call in `main`).

mod common;

use std::path::Path;
use std::process::Command;

const SOURCE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/examples/planted_bug.c");

/// The line of the example marked `line:MARKER`.
fn marked_line(marker: &str) -> usize {
    let text = std::fs::read_to_string(SOURCE).unwrap();
    text.lines().position(|l| l.contains(&format!("line:{marker} "))).unwrap_or_else(|| panic!("no line:{marker} in {SOURCE}")) + 1
}

#[test]
fn the_main_job_runs_back_from_the_wrong_value_to_the_store_that_overran() {
    if !common::debuggers_and_valgrind_present() {
        return;
    }
    // The binaries this test run built (the script builds a release
    // otherwise, as a user's first run does).
    let stub = common::build_stub();
    let bin_dir = stub.parent().unwrap();
    assert_eq!(Path::new(env!("CARGO_BIN_EXE_retrace")).parent(), Some(bin_dir), "retrace and retrace-stub side by side");
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let out = Command::new("bash").arg(repo.join("docs/examples/record-and-find-the-writer.sh")).env("RETRACE_BIN_DIR", bin_dir).output().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");

    // Natively the program prints the corrupted limit; recorded, the same.
    let native = Command::new(repo.join("target/example/planted_bug")).output().unwrap();
    let printed = String::from_utf8_lossy(&native.stdout).trim().to_string();
    let value = printed.strip_prefix("limit = ").unwrap_or_else(|| panic!("native: {printed}"));
    assert_ne!(value, "100", "the planted bug overwrites the limit natively");
    assert!(stdout.contains(&printed), "{stdout}");

    // GDB, back at the printf: the same wrong value; back to its last
    // write: the store in fill's loop, called from main.
    assert!(stdout.contains(&format!("Breakpoint 1, main () at docs/examples/planted_bug.c:{}\n", marked_line("wrong"))), "{stdout}");
    assert!(stdout.contains(&format!("$1 = {value}\n")), "{stdout}");
    assert!(stdout.contains(&format!("Old value = {value}\nNew value = 100\n")), "the write replaced 100 by {value} (GDB shows reverse as old/new in its direction): {stdout}");
    let frame0 = stdout.lines().find(|l| l.starts_with("#0 ")).unwrap_or_else(|| panic!("no backtrace: {stdout}"));
    assert!(frame0.contains(" in fill (samples=") && frame0.ends_with(&format!(" at docs/examples/planted_bug.c:{}", marked_line("writer"))), "{frame0}");
    let frame1 = stdout.lines().find(|l| l.starts_with("#1 ")).unwrap_or_else(|| panic!("no caller: {stdout}"));
    assert!(frame1.contains(" in main () at docs/examples/planted_bug.c:"), "{frame1}");
    // Quiet: the modules come from the bundle, not over the connection.
    assert!(!stdout.contains("from remote target") && !stderr.contains("from remote target"), "{stdout}\n{stderr}");

    // LLDB's own decoder on the same bundle: 20 instructions, no error.
    let dump: Vec<&str> = stdout.lines().skip_while(|l| !l.contains("thread trace dump instructions -c 20")).collect();
    let instructions = dump.iter().filter(|l| l.trim_start().split_once(": 0x").is_some_and(|(id, _)| id.parse::<u64>().is_ok())).count();
    assert_eq!(instructions, 20, "{stdout}");
    assert!(!dump.iter().any(|l| l.contains("(error)")), "{stdout}");
}
