//! The LLDB shim's dump against the CLI's, side by side in one run:
//! `cargo bench -p retrace-plugin --bench shim`
//!
//! Records (branch mode, once; kept in `target/tmp/bench-shim`)
//! `tests/programs/bench_loop.c` for about 10 million instructions, then,
//! best of three each:
//! - the CLI: `retrace dump instructions -a -f BUNDLE > FILE`, the whole
//!   process;
//! - the shim in python3-lldb-22: `retrace load BUNDLE` and `retrace dump
//!   instructions -a -f -F FILE` (the native bridge built with `cargo build
//!   --release -p retrace-python`), timed inside LLDB's Python around the
//!   two commands (LLDB's own start-up left out).
//! The two files must be identical. Target: shim ≤ 1.2× CLI.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

const RETRACE: &str = env!("CARGO_BIN_EXE_retrace");
const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");

fn bundle(dir: &Path) -> PathBuf {
    let bundle = dir.join("bundle");
    if bundle.join("trace.json").exists() {
        return bundle;
    }
    let exe = dir.join("bench_loop");
    let status = Command::new("gcc")
        .args(["-O0", "-static", "-g", "-o"])
        .arg(&exe)
        .arg(format!("{ROOT}/tests/programs/bench_loop.c"))
        .status()
        .expect("gcc");
    assert!(status.success());
    eprintln!("recording bench_loop 140000 (branch mode, about 10 million instructions)…");
    let out = Command::new(RETRACE).args(["record", "--backend", "software", "--mode", "branch", "-o"]).arg(&bundle).arg("--").arg(&exe).arg("140000").output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    bundle
}

fn native_bridge() -> PathBuf {
    let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(["build", "--release", "-p", "retrace-python"])
        .current_dir(ROOT)
        .status()
        .expect("cargo");
    assert!(status.success());
    Path::new(ROOT).join("target/release/libretrace_native.so")
}

const SHIM_RUN: &str = r#"
import sys, time, lldb
shim, bundle, out = sys.argv[1:4]
d = lldb.SBDebugger.Create(False)
def run(c):
    r = lldb.SBCommandReturnObject(); d.GetCommandInterpreter().HandleCommand(c, r)
    if not r.Succeeded(): raise SystemExit(r.GetError())
run("command script import " + shim)
start = time.perf_counter()
run("retrace load " + bundle)
run("retrace dump instructions -a -f -F " + out)
print(time.perf_counter() - start)
"#;

fn main() {
    if !Path::new("/usr/lib/python3/dist-packages/lldb").exists() {
        eprintln!("skipped: python3-lldb-22 is not installed");
        return;
    }
    let dir = Path::new(ROOT).join("target/tmp/bench-shim");
    std::fs::create_dir_all(&dir).unwrap();
    let bundle = bundle(&dir);
    let bridge = native_bridge();
    let (cli_file, shim_file) = (dir.join("cli.txt"), dir.join("shim.txt"));
    let mut cli = f64::INFINITY;
    let mut shim = f64::INFINITY;
    for _ in 0..3 {
        let start = Instant::now();
        let status = Command::new(RETRACE)
            .args(["dump", "instructions", "-a", "-f"])
            .arg(bundle.join("trace.json"))
            .stdout(Stdio::from(std::fs::File::create(&cli_file).unwrap()))
            .status()
            .unwrap();
        cli = cli.min(start.elapsed().as_secs_f64());
        assert!(status.success());
        let out = Command::new("/usr/bin/python3")
            .args(["-c", SHIM_RUN, &format!("{ROOT}/lldb-scripts/retrace.py")])
            .arg(bundle.join("trace.json"))
            .arg(&shim_file)
            .env("RETRACE_NATIVE", &bridge)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let seconds: f64 = String::from_utf8_lossy(&out.stdout).trim().parse().expect("seconds");
        shim = shim.min(seconds);
    }
    let (a, b) = (std::fs::read(&cli_file).unwrap(), std::fs::read(&shim_file).unwrap());
    assert!(a == b, "the shim's file differs from the CLI's");
    let lines = a.iter().filter(|&&c| c == b'\n').count();
    println!("dump instructions -a -f of {lines} lines ({:.0} MB), best of 3:", a.len() as f64 / 1e6);
    println!("  CLI  (retrace dump, whole process)      {cli:8.2} s");
    println!("  shim (retrace load + retrace dump -F)   {shim:8.2} s");
    let ratio = shim / cli;
    println!("  shim / CLI = {ratio:.2} (target <= 1.2: {})", if ratio <= 1.2 { "met" } else { "NOT met" });
}
