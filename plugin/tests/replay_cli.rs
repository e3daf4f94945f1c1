//! `retrace replay`: the command after `retrace record`. It starts
//! `retrace-stub --replay` and LLDB 22 (with the shim) or GDB 13 connected
//! to it. On a full-state recording both show the locals and globals that
//! GDB shows natively at the same breakpoint hit, reached backwards. A
//! path with no bundle is refused with the reason.

mod common;

use std::path::Path;
use std::process::Command;

/// `retrace replay` with `args`: its stdout and stderr, and whether it
/// succeeded. The stub is the one this test run built.
fn replay(args: &[&str]) -> (String, bool) {
    let stub = common::build_stub();
    let out = Command::new(env!("CARGO_BIN_EXE_retrace")).arg("replay").arg("--stub").arg(&stub).args(args).output().unwrap();
    (String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr), out.status.success())
}

#[test]
fn lldb_and_gdb_on_a_full_state_recording_see_the_native_values_of_the_last_hit() {
    if !common::debuggers_and_valgrind_present() {
        return;
    }
    let dir = common::work_dir("replay-cli", "full-state");
    let program = common::build("full_state", &dir, &["-O0", "-static", "-no-pie"]);
    let bundle = dir.join("bundle");
    let recorded = Command::new(env!("CARGO_BIN_EXE_retrace")).args(["record", "--mode", "full", "-o"]).arg(&bundle).arg("--").arg(&program).output().unwrap();
    assert!(recorded.status.success(), "{}", String::from_utf8_lossy(&recorded.stderr));
    // Natively: the last hit of line 37 is i = 39.
    let native = Command::new("gdb")
        .args(["-nx", "-batch", "-ex", "break full_state.c:37 if i == 39", "-ex", "run", "-ex", "print i", "-ex", "print counter", "-ex", "print total", "-ex", "kill"])
        .arg(&program)
        .output()
        .unwrap();
    let native = String::from_utf8_lossy(&native.stdout).into_owned();
    let values: Vec<&str> = native.lines().filter_map(|l| l.split_once(" = ").map(|(_, v)| v)).collect();
    assert_eq!(values.len(), 3, "{native}");
    assert_eq!(values[0], "39");

    let bundle = bundle.to_str().unwrap();
    let (out, ok) = replay(&["--gdb", bundle, "--", "-batch", "-ex", "break full_state.c:37", "-ex", "reverse-continue", "-ex", "print i", "-ex", "print counter", "-ex", "print total"]);
    assert!(ok, "{out}");
    let printed: Vec<&str> = out.lines().filter_map(|l| l.split_once(" = ").filter(|(k, _)| k.starts_with('$')).map(|(_, v)| v)).collect();
    assert_eq!(printed, values, "GDB on the replay:\n{out}");

    let (out, ok) = replay(&[bundle, "--", "-b", "-o", "breakpoint set -f full_state.c -l 37", "-o", "process continue -R", "-o", "frame variable i counter total", "-o", "register read rsp rbp", "-o", "breakpoint delete 1", "-o", "process continue -F"]);
    assert!(ok, "{out}");
    assert!(out.contains("command script import"), "the shim is loaded:\n{out}");
    for (name, value) in [("i", values[0]), ("counter", values[1]), ("total", values[2])] {
        assert!(out.lines().any(|l| l.contains(&format!(" {name} = {value}"))), "LLDB's {name} should be {value}:\n{out}");
    }
    assert!(!out.contains("unavailable"), "LLDB reads every register it asks for:\n{out}");
    // Past the end: the recorded exit, as natively.
    assert!(out.contains("exited with status = 0"), "LLDB sees the recorded exit:\n{out}");
}

#[test]
fn gdb_reads_the_modules_from_the_bundle_quietly() {
    if !common::debuggers_and_valgrind_present() {
        return;
    }
    let dir = common::work_dir("replay-cli", "gdb-sysroot");
    let program = common::build("full_state", &dir, &["-O0"]);
    let bundle = dir.join("bundle");
    let recorded = Command::new(env!("CARGO_BIN_EXE_retrace")).args(["record", "--full-state", "-o"]).arg(&bundle).arg("--").arg(&program).output().unwrap();
    let said = String::from_utf8_lossy(&recorded.stderr);
    assert!(recorded.status.success(), "{said}");
    // It says what it recorded, how, and the command to run next.
    assert!(said.contains("(full state, by Valgrind)"), "{said}");
    let next: Vec<&str> = said.lines().skip_while(|l| !l.starts_with("next: ")).map(str::trim).collect();
    assert!(next.len() == 3 && next[1].starts_with(&format!("retrace replay {} ", bundle.display())) && next[2].starts_with(&format!("retrace replay --gdb {} ", bundle.display())), "{said}");
    let (out, ok) = replay(&["--gdb", bundle.to_str().unwrap(), "--", "-batch", "-ex", "break main", "-ex", "reverse-continue", "-ex", "info sharedlibrary"]);
    assert!(ok, "{out}");
    // Without the settings GDB fetches each file over the connection:
    // "Reading /lib64/ld-linux-x86-64.so.2 from remote target...", and
    // warns "File transfers from remote targets can be slow. Use "set
    // sysroot" …" on every run.
    assert!(!out.contains("from remote target") && !out.contains("set sysroot"), "{out}");
    assert!(out.contains("Breakpoint 1, main ("), "{out}");
    // Every library, the interpreter too, from the bundle's copies; the
    // interpreter's symbols read (without the search path GDB finds no
    // /lib64/ld-linux-x86-64.so.2 in the copies and says "Unable to find
    // dynamic linker breakpoint function").
    assert!(!out.contains("dynamic linker breakpoint"), "{out}");
    let (modules, canonical) = (bundle.join("modules"), bundle.join("modules").canonicalize().unwrap());
    let libraries: Vec<&str> = out.lines().filter(|l| l.starts_with("0x") && l.contains(".so")).collect();
    for name in ["ld-linux-x86-64.so.2", "libc.so.6"] {
        let line = libraries.iter().find(|l| l.contains(name)).unwrap_or_else(|| panic!("no {name} in GDB's libraries:\n{out}"));
        assert!(line.contains(&format!("{}/", modules.display())) || line.contains(&format!("{}/", canonical.display())), "{line}\n{out}");
        assert!(!name.starts_with("ld-") || line.contains(" Yes "), "{line}\n{out}");
    }
}

#[test]
fn a_path_without_a_bundle_is_refused_with_the_reason() {
    let dir = common::work_dir("replay-cli", "no-bundle");
    let (out, ok) = replay(&[dir.to_str().unwrap()]);
    assert!(!ok);
    assert!(out.contains("no trace.json there"), "{out}");
    let missing = Path::new("/nonexistent/bundle");
    let (out, ok) = replay(&[missing.to_str().unwrap()]);
    assert!(!ok && out.contains("no trace.json there"), "{out}");
}
