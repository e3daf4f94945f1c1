//! What the plugin's test files share (`mod common;` in each).

use std::path::{Path, PathBuf};
use std::process::Command;

/// The C programs the tests build (`tests/programs`).
#[allow(dead_code)] // not every test file builds programs
pub const PROGRAMS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/programs");

/// Runs gcc with `args`; its errors fail the test.
#[allow(dead_code)]
pub fn gcc(args: &[&str]) {
    let out = Command::new("gcc").args(args).output().expect("run gcc");
    assert!(out.status.success(), "gcc {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// Builds `tests/programs/<name>.c` with debug info and `flags` into `dir`.
#[allow(dead_code)]
pub fn build(name: &str, dir: &Path, flags: &[&str]) -> PathBuf {
    let exe = dir.join(name);
    let source = format!("{PROGRAMS}/{name}.c");
    let mut args = vec!["-g", "-o", exe.to_str().unwrap(), &source];
    args.extend_from_slice(flags);
    gcc(&args);
    exe
}

/// Whether what replaying a full-state recording in both debuggers needs
/// is here: gcc, GDB, LLDB 22, Valgrind and retrace built with its headers
/// (each one missing is reported; under CI=true it fails the test).
#[allow(dead_code)]
pub fn debuggers_and_valgrind_present() -> bool {
    use retrace_tests::tools::{require, which};
    require("gcc", which("gcc").is_some())
        && require("gdb", which("gdb").is_some())
        && require("lldb-22", which("lldb-22").is_some())
        && require("valgrind (Debian package valgrind)", which("valgrind").is_some())
        && require("retrace built with Valgrind's headers", retrace_collector::valgrind::availability().is_ok())
}

/// An empty directory `<target tmp>/<group>/<name>` for one test.
#[allow(dead_code)] // not every test file needs one
pub fn work_dir(group: &str, name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(group).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The `retrace` command with an environment of `PATH` only, so that two
/// recordings of one program run the same way.
#[allow(dead_code)] // not every test file runs retrace this way
pub fn retrace() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_retrace"));
    command.env_clear().env("PATH", "/usr/bin:/bin");
    command
}

/// Whether tests/run.sh's `cargo build --workspace --lib --bins --tests`
/// built every artifact before any test ran (`RETRACE_WORKSPACE_BUILT=1`):
/// then a test takes retrace-stub and the shim's module as built, where
/// `cargo build -p …` would build them again, with the features that
/// package alone asks of its dependencies (80 s and 60 s of the suite).
#[allow(dead_code)] // not every test file builds something
pub fn workspace_built() -> bool {
    std::env::var_os("RETRACE_WORKSPACE_BUILT").is_some_and(|built| built == "1")
}

/// retrace-stub, built (debug) into the target directory; its path.
#[allow(dead_code)] // not every test file runs the stub
pub fn build_stub() -> PathBuf {
    if !workspace_built() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let out = Command::new(cargo).args(["build", "-p", "retrace-stub", "--bin", "retrace-stub"]).output().expect("run cargo");
        assert!(out.status.success(), "cargo build -p retrace-stub: {}", String::from_utf8_lossy(&out.stderr));
    }
    // target/<profile>/retrace → target/debug/retrace-stub
    let target = Path::new(env!("CARGO_BIN_EXE_retrace")).parent().and_then(Path::parent).unwrap();
    let stub = target.join("debug").join("retrace-stub");
    assert!(stub.is_file(), "{} was not built", stub.display());
    stub
}
