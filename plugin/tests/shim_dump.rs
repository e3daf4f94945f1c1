//! The LLDB shim's dumps (`retrace load`, `retrace dump instructions|
//! function-calls` in `lldb-scripts/retrace.py`, on the native bridge
//! `retrace_native`) against LLDB 22's built-in `trace load` and `thread
//! trace dump` of the same bundles, option by option, in python3-lldb-22;
//! the shim runs in a debugger whose built-in trace commands fail.
//! `shim_dump.py` holds the cases.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use retrace_tests::tools::{require, which};

use common::{PROGRAMS, gcc};

fn tools_present() -> bool {
    require("gcc", which("gcc").is_some())
        && require("lldb-22", which("lldb-22").is_some())
        && require("python3-lldb-22", Path::new("/usr/lib/python3/dist-packages/lldb").exists())
}


/// Builds the native bridge next to the `retrace` binary (cargo does not
/// build a cdylib for tests; tests/run.sh's workspace build did: see
/// [`common::workspace_built`]) and gives its path.
fn native_bridge() -> PathBuf {
    if !common::workspace_built() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut command = Command::new(cargo);
        command.args(["build", "--locked", "-p", "retrace-python"]).current_dir(env!("CARGO_MANIFEST_DIR"));
        if !cfg!(debug_assertions) {
            command.arg("--release");
        }
        let out = command.output().expect("run cargo");
        assert!(out.status.success(), "cargo build -p retrace-python: {}", String::from_utf8_lossy(&out.stderr));
    }
    let bridge = Path::new(env!("CARGO_BIN_EXE_retrace")).with_file_name("libretrace_native.so");
    assert!(bridge.exists(), "{}", bridge.display());
    bridge
}

/// Records `program` with the software backend in `mode` into `bundle`.
fn record(mode: &str, bundle: &Path, program: &Path) {
    let out = common::retrace()
        .args(["record", "--backend", "software", "--mode", mode, "-o"])
        .arg(bundle)
        .arg("--")
        .arg(program)
        .output()
        .unwrap();
    // (Its exit status is the program's: some of these end with a sum.)
    assert!(bundle.join("trace.json").is_file(), "{}", String::from_utf8_lossy(&out.stderr));
}

/// Runs `shim_dump.py` on `bundle` for the threads `indexes`: every case
/// must agree, and the shim must not have called a built-in trace command.
fn assert_shim_dumps_equal_lldb(bridge: &Path, bundle: &Path, indexes: &[usize]) {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/shim_dump.py");
    let shim = concat!(env!("CARGO_MANIFEST_DIR"), "/../lldb-scripts/retrace.py");
    let out = Command::new("timeout")
        .args(["600", "/usr/bin/python3", script, shim])
        .arg(bundle.join("trace.json"))
        .arg(bundle.parent().unwrap())
        .args(indexes.iter().map(|i| i.to_string()))
        .env("RETRACE_NATIVE", bridge)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    let summary: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap_or("")).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    assert_eq!(summary["mismatches"], 0, "{}: {stdout}", bundle.display());
    assert_eq!(summary["refused"], serde_json::json!([]), "{}", bundle.display());
    // 37 cases per thread (shim_dump.py).
    assert_eq!(summary["cases"], 37 * indexes.len(), "{stdout}");
    eprintln!("{}: {} cases equal to LLDB's built-in", bundle.display(), summary["cases"]);
}

#[test]
fn shim_dumps_equal_lldb_builtin_dumps() {
    if !tools_present() {
        return;
    }
    let bridge = native_bridge();
    let dir = common::work_dir("shim", "dumps");
    // A static -O0 program, single-stepped.
    let static_exe = dir.join("loop_fnptr");
    gcc(&["-g", "-O0", "-static", "-o", static_exe.to_str().unwrap(), &format!("{PROGRAMS}/loop_fnptr.c")]);
    record("step", &dir.join("static"), &static_exe);
    assert_shim_dumps_equal_lldb(&bridge, &dir.join("static"), &[1]);
    // A dynamic -O2 program with four threads, in branch mode: the main
    // thread and the four workers.
    let threads_exe = dir.join("threads");
    gcc(&["-g", "-O2", "-pthread", "-o", threads_exe.to_str().unwrap(), &format!("{PROGRAMS}/threads.c")]);
    record("branch", &dir.join("threads-bundle"), &threads_exe);
    assert_shim_dumps_equal_lldb(&bridge, &dir.join("threads-bundle"), &[1, 2, 3, 4, 5]);
    // A dynamic -O2 program with recursion, single-stepped.
    let recursion_exe = dir.join("recursion");
    gcc(&["-g", "-O2", "-o", recursion_exe.to_str().unwrap(), &format!("{PROGRAMS}/recursion.c")]);
    record("step", &dir.join("recursion-bundle"), &recursion_exe);
    assert_shim_dumps_equal_lldb(&bridge, &dir.join("recursion-bundle"), &[1]);
    // gcc's `.cold` split below its function (`classify - N`), and an
    // address between sections named by its segment, in branch mode.
    let cold_exe = dir.join("cold_split");
    gcc(&["-g", "-O2", "-o", cold_exe.to_str().unwrap(), &format!("{PROGRAMS}/cold_split.c")]);
    record("branch", &dir.join("cold-bundle"), &cold_exe);
    assert_shim_dumps_equal_lldb(&bridge, &dir.join("cold-bundle"), &[1]);
    // A call into a shared library of our own, in branch mode.
    let lib = dir.join("libretracedemo.so");
    gcc(&["-g", "-O0", "-shared", "-fPIC", "-o", lib.to_str().unwrap(), &format!("{PROGRAMS}/shlib_lib.c")]);
    let shlib_exe = dir.join("shlib_main");
    let rpath = format!("-Wl,-rpath,{}", dir.display());
    gcc(&["-g", "-O0", "-o", shlib_exe.to_str().unwrap(), &format!("{PROGRAMS}/shlib_main.c"), "-L", dir.to_str().unwrap(), "-lretracedemo", &rpath]);
    record("branch", &dir.join("shlib"), &shlib_exe);
    assert_shim_dumps_equal_lldb(&bridge, &dir.join("shlib"), &[1]);
}

/// `retrace load` refuses a bad path with the reason, and `retrace dump`
/// before any load says what to do.
#[test]
fn shim_refuses_a_bad_bundle_with_the_reason() {
    if !tools_present() {
        return;
    }
    let bridge = native_bridge();
    let shim = concat!(env!("CARGO_MANIFEST_DIR"), "/../lldb-scripts/retrace.py");
    let script = format!(
        r#"
import lldb
d = lldb.SBDebugger.Create(False)
def run(c):
    r = lldb.SBCommandReturnObject(); d.GetCommandInterpreter().HandleCommand(c, r)
    return (r.GetOutput() or "") + (r.GetError() or "")
run("command script import {shim}")
print(run("retrace dump instructions").strip())
print(run("retrace load /nonexistent/trace.json").strip())
print(run("retrace dump instructions -c x").strip())
"#
    );
    let out = Command::new("/usr/bin/python3").args(["-c", &script]).env("RETRACE_NATIVE", &bridge).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(lines[0], "error: retrace dump instructions: no trace: `retrace load DIR/trace.json`, or `retrace start` on a process under retrace-stub");
    assert_eq!(lines[1], "error: retrace load: /nonexistent/trace.json: No such file or directory (os error 2)");
    assert_eq!(lines[2], "error: retrace dump instructions: argument -c/--count: invalid int value: 'x'");
}

/// On a live process under retrace-stub: `retrace start`, then at two
/// later stops every `retrace dump` case equals LLDB's built-in dump of the
/// same process, and `retrace save DIR` loads in stock lldb-22 with the
/// same dump (`shim_live.py` holds the cases).
#[test]
fn shim_traces_a_live_process_as_lldb_dumps_it() {
    if !tools_present() {
        return;
    }
    let bridge = native_bridge();
    let stub = common::build_stub();
    let dir = common::work_dir("shim", "live");
    let program = dir.join("step_back");
    gcc(&["-g", "-O0", "-o", program.to_str().unwrap(), &format!("{PROGRAMS}/step_back.c")]);
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/shim_live.py");
    let shim = concat!(env!("CARGO_MANIFEST_DIR"), "/../lldb-scripts/retrace.py");
    let out = Command::new("timeout")
        .args(["300", "/usr/bin/python3", script, shim])
        .arg(&stub)
        .arg(&program)
        .arg(dir.join("saved"))
        .args(["main", "square", "square"])
        .env("RETRACE_NATIVE", &bridge)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    let summary: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap_or("")).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    assert_eq!(summary["mismatches"], 0, "{stdout}");
    assert_eq!(summary["refused"], serde_json::json!([]), "{stdout}");
    // 13 dump options, 2 function-call layouts and -C at each of 2 stops, and the saved bundle.
    assert_eq!(summary["cases"], 2 * 16 + 1, "{stdout}");
    // From main's start to square's second call: more than the loop's first round.
    assert!(summary["listed"].as_u64().unwrap() > 20, "{stdout}");
}
