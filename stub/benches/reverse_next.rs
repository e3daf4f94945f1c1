//! The LLDB shim's `retrace reverse-next` over loops of about a million
//! instructions against a forward `next`, in one run:
//! `cargo bench -p retrace-stub --bench reverse_next`
//!
//! Builds `tests/programs/reverse_loop.c` and runs
//! `stub/benches/reverse_next.py` in python3-lldb-22 against this
//! (release) retrace-stub recording it; see that script for what is timed.
//! Target: a reverse-next over a loop of 1 million instructions
//! ≤ 2× one forward `next`.

use std::process::Command;

fn main() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("bench-reverse-next");
    std::fs::create_dir_all(&dir).unwrap();
    let program = dir.join("reverse_loop");
    let source = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/programs/reverse_loop.c");
    assert!(Command::new("gcc").args(["-g", "-O0", "-o"]).arg(&program).arg(source).status().expect("gcc").success());
    let status = Command::new("/usr/bin/python3")
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/benches/reverse_next.py"))
        .arg(env!("CARGO_BIN_EXE_retrace-stub"))
        .arg(&program)
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/../lldb-scripts/retrace.py"))
        .arg(source)
        .status()
        .expect("python3 (apt-get install python3-lldb-22)");
    assert!(status.success(), "the benchmark failed");
}
