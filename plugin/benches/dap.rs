//! A Step Back round trip through retrace-dap against a forward `next`
//! round trip through plain lldb-dap-22, side by side in one run:
//! `cargo bench -p retrace-plugin --bench dap`
//!
//! `tests/programs/step_back.c` built with a 1000-round loop runs twice
//! at once: natively under plain lldb-dap-22, and under retrace-dap
//! (release build, recording in full mode). Round by round, interleaved,
//! `plugin/vscode/bench/step_back.js` times a `next` in the first and a
//! `stepBack` in the second (each undone by an untimed `next`), from the
//! request to the `stopped` event and the top frame's locals, as VS Code
//! asks after a stop; it prints both medians and their ratio. Target:
//! stepBack ≤ 1.5× next.

use std::path::Path;
use std::process::Command;

use retrace_tests::recordings::{build, programs_dir};

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");

fn main() {
    let extension = Path::new(ROOT).join("plugin/vscode");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let built = Command::new(cargo).args(["build", "--release", "-p", "retrace-stub", "--bin", "retrace-stub"]).status().expect("cargo");
    assert!(built.success(), "cargo build --release -p retrace-stub failed");
    if !extension.join("node_modules/@vscode/debugadapter-testsupport").exists() {
        let installed = Command::new("npm").args(["ci", "--no-audit", "--no-fund"]).current_dir(&extension).status().expect("npm");
        assert!(installed.success(), "npm ci failed");
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("bench-dap");
    let program = build("step_back", &dir, &["-O0", "-DROUNDS=1000"]);
    let lldb_dap = retrace_tests::tools::which("lldb-dap-22").expect("lldb-dap-22 (apt-get install lldb-22)");
    let status = Command::new("node")
        .arg("bench/step_back.js")
        .current_dir(&extension)
        .env("RETRACE_DAP", env!("CARGO_BIN_EXE_retrace-dap"))
        .env("RETRACE_LLDB_DAP", lldb_dap)
        .env("RETRACE_DAP_PROGRAM", &program)
        .env("RETRACE_DAP_SOURCE", programs_dir().join("step_back.c"))
        .status()
        .expect("node");
    assert!(status.success(), "the benchmark failed");
}
