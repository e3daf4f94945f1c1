//! What a new user types in the first hour, as perf, rr and gdbserver
//! take it: `retrace record -o DIR PROGRAM` without `--`, an existing
//! bundle never silently replaced, `retrace dump info DIR` of a bundle
//! directory, `--help` texts whose examples stand one per line, and
//! `retrace help` in LLDB.

use std::process::Command;

mod common;

fn text(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

#[test]
fn record_takes_the_program_after_its_options_and_never_replaces_a_bundle_silently() {
    let dir = common::work_dir("papercuts", "record");
    let bundle = dir.join("bundle");
    // No `--`: the program and its own options after retrace's.
    let out = common::retrace().args(["record", "--mode", "branch", "-o"]).arg(&bundle).args(["echo", "-n", "recorded"]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "recorded", "echo got its -n:\n{}", text(&out));
    assert!(bundle.join("trace.json").exists());
    let first = std::fs::read(bundle.join("trace.json")).unwrap();
    // Again into the same directory: refused, the bundle untouched.
    let again = common::retrace().args(["record", "--mode", "branch", "-o"]).arg(&bundle).args(["echo", "again"]).output().unwrap();
    assert!(!again.status.success(), "{}", text(&again));
    assert!(text(&again).contains("holds a trace already") && text(&again).contains("--force"), "{}", text(&again));
    assert_eq!(std::fs::read(bundle.join("trace.json")).unwrap(), first);
    // --force replaces it.
    let forced = common::retrace().args(["record", "--mode", "branch", "--force", "-o"]).arg(&bundle).args(["echo", "again"]).output().unwrap();
    assert!(forced.status.success(), "{}", text(&forced));
    assert_eq!(String::from_utf8_lossy(&forced.stdout), "again\n");
    // A directory that is no bundle is never removed.
    let other = dir.join("notes");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::write(other.join("keep.txt"), "mine").unwrap();
    let refused = common::retrace().args(["record", "--force", "-o"]).arg(&other).args(["echo", "x"]).output().unwrap();
    assert!(!refused.status.success() && text(&refused).contains("not empty"), "{}", text(&refused));
    assert!(other.join("keep.txt").exists());
    // `dump info` takes the bundle directory as `retrace load` does.
    let by_dir = common::retrace().args(["dump", "info"]).arg(&bundle).output().unwrap();
    let by_file = common::retrace().args(["dump", "info"]).arg(bundle.join("trace.json")).output().unwrap();
    assert!(by_dir.status.success(), "{}", text(&by_dir));
    let untimed = |out: &std::process::Output| -> Vec<String> { String::from_utf8_lossy(&out.stdout).lines().filter(|l| !l.trim_start().starts_with("Decoding")).map(str::to_string).collect() };
    assert_eq!(untimed(&by_dir), untimed(&by_file));
    assert!(String::from_utf8_lossy(&by_dir.stdout).contains("Trace technology: intel-pt"));
}

/// The examples of `--help` stand each on a line of their own (clap
/// joined them into one paragraph).
#[test]
fn help_examples_stand_one_per_line() {
    let stub = common::build_stub();
    let help = text(&Command::new(&stub).arg("--help").output().unwrap());
    for line in ["  lldb ./prog -o \"gdb-remote 1234\"", "  gdb ./prog -ex \"target remote :1234\"", "  (lldb) process continue -R"] {
        assert!(help.lines().any(|l| l == line), "no line {line:?} in:\n{help}");
    }
    let dap = std::path::Path::new(env!("CARGO_BIN_EXE_retrace")).with_file_name("retrace-dap");
    let help = text(&Command::new(dap).arg("--help").output().unwrap());
    for line in ["  stepBack           reverse-next (granularity \"instruction\": reverse-stepi)", "  \"replay\": \"path/trace.json\"    post-mortem: a saved trace instead of a live program"] {
        assert!(help.lines().any(|l| l == line), "no line {line:?} in:\n{help}");
    }
}

/// `retrace help` in LLDB is `help retrace` (it was an error).
#[test]
fn retrace_help_in_lldb() {
    if retrace_tests::tools::which("lldb-22").is_none() {
        assert!(!retrace_tests::tools::in_ci(), "lldb-22 is missing under CI=true");
        return;
    }
    let shim = concat!(env!("CARGO_MANIFEST_DIR"), "/../lldb-scripts/retrace.py");
    let out = Command::new("lldb-22")
        .args(["-b", "-o", &format!("command script import {shim}"), "-o", "retrace help", "-o", "retrace help reverse-next"])
        .output()
        .unwrap();
    let out = text(&out);
    assert!(out.contains("reverse-next      -- Step back one source line, over calls."), "{out}");
    assert!(out.contains("Syntax: retrace reverse-next [--gdb] [--tid TID]"), "{out}");
    assert!(!out.contains("error:"), "{out}");
}

/// What is recorded (control flow, or `--full-state`) and how
/// (`--backend intel-pt|valgrind|ptrace`, `--ptrace-stops`) are two
/// choices, named so in `--help` and in every message; a recording ends by
/// naming the command to run next, and `retrace record` exits with the
/// program's status whatever records it, as `rr record` does.
#[test]
fn record_names_what_and_how_apart_says_what_to_run_next_and_exits_as_the_program() {
    let help = text(&common::retrace().args(["record", "--help"]).output().unwrap());
    for words in ["What is recorded", "--full-state", "How (--backend)", "--ptrace-stops <STOPS>", "exits with its status"] {
        assert!(help.contains(words), "no {words:?} in:\n{help}");
    }
    assert!(!help.contains("--mode") && !help.contains("software"), "the earlier words are gone from the help:\n{help}");

    let dir = common::work_dir("papercuts", "what-and-how");
    // Full state is Valgrind's: other backends are refused with the way out.
    let refused = common::retrace().args(["record", "--full-state", "--backend", "ptrace", "-o"]).arg(dir.join("refused")).args(["--", "true"]).output().unwrap();
    assert_eq!(refused.status.code(), Some(1));
    let said = text(&refused);
    assert!(said.contains("--backend ptrace records the control flow only; --full-state records under Valgrind: leave out --backend"), "{said}");
    assert!(!dir.join("refused").exists());

    // The program's exit status, under ptrace: false exits 1, a shell
    // killing itself with SIGSEGV is 128 + 11, as the shell says natively.
    for (program, native) in [(vec!["false"], Command::new("false").status().unwrap().code()), (vec!["sh", "-c", "kill -SEGV $$"], Command::new("sh").args(["-c", "kill -SEGV $$"]).status().unwrap().code())] {
        let bundle = dir.join(format!("status-{}", program.len()));
        let out = common::retrace().args(["record", "--backend", "ptrace", "--ptrace-stops", "branch", "-o"]).arg(&bundle).arg("--").args(&program).output().unwrap();
        let expected = native.or_else(|| Some(128 + 11));
        assert_eq!(out.status.code(), expected, "{program:?}: {}", text(&out));
        assert!(bundle.join("trace.json").exists(), "{program:?}: {}", text(&out));
        // A control-flow recording: LLDB's dump, or retrace's, next.
        let said = text(&out);
        assert!(said.contains("(control flow, by ptrace, a stop per branch)"), "{said}");
        let next: Vec<&str> = said.lines().skip_while(|l| !l.starts_with("next: ")).collect();
        assert!(next.len() >= 3 && next[1].trim().starts_with("lldb-22 -o \"trace load ") && next[2].trim().starts_with("retrace dump instructions "), "{said}");
    }
}
