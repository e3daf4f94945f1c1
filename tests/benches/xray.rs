//! XRay reader speed: retrace's reader vs `llvm-xray-22 convert` on the
//! same FDR log (≥ 100 MB, written by a real instrumented program), in one
//! run. `cargo bench -p retrace-tests --bench xray`
//!
//! `RETRACE_XRAY_BENCH_FIB` sets the workload (default 32: ~113 MB, ~14 M
//! records).

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use retrace_decoder::xray::timeline::Timeline;
use retrace_decoder::xray::Log;
use retrace_tests::xray::{tools_available, BENCH_PROGRAM};

fn main() {
    assert!(tools_available(), "clang++-22 and llvm-xray-22 are needed (apt-get install clang-22 llvm-22 libclang-rt-22-dev)");
    let n = std::env::var("RETRACE_XRAY_BENCH_FIB").unwrap_or_else(|_| "32".into());
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("bench-xray");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let source = dir.join("fib.cpp");
    std::fs::write(&source, BENCH_PROGRAM).unwrap();
    let binary = dir.join("fib");
    let status = Command::new("clang++-22")
        .args(["-O2", "-fxray-instrument", "-fxray-instruction-threshold=1", "-pthread", "-o"])
        .arg(&binary)
        .arg(&source)
        .status()
        .expect("clang++-22");
    assert!(status.success());
    let base = dir.join("fib-log.");
    let status = Command::new(&binary)
        .arg(&n)
        .env("XRAY_OPTIONS", format!("patch_premain=false xray_mode=xray-fdr verbosity=0 xray_logfile_base={}", base.display()))
        .status()
        .expect("run the program");
    assert!(status.success());
    let log_path = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.file_name().unwrap().to_string_lossy().starts_with("fib-log."))
        .expect("log written");
    let size = std::fs::metadata(&log_path).unwrap().len();

    let best = |f: &dyn Fn() -> u64| {
        let mut best = f64::INFINITY;
        let mut result = 0;
        for _ in 0..3 {
            let start = Instant::now();
            result = f();
            best = best.min(start.elapsed().as_secs_f64());
        }
        (best, result)
    };
    // Ours: read the file, expand every record (absolute TSC, thread, CPU).
    let (t_ours, n_ours) = best(&|| {
        let bytes = std::fs::read(&log_path).unwrap();
        let log = Log::parse(&bytes).unwrap();
        log.records().filter(|r| r.is_ok()).count() as u64
    });
    // Ours, plus per-thread call timelines (every record kept, calls matched).
    let (t_timeline, n_calls) = best(&|| {
        let bytes = std::fs::read(&log_path).unwrap();
        let log = Log::parse(&bytes).unwrap();
        Timeline::build(&log).threads.iter().map(|t| t.calls.len() as u64).sum()
    });

    // LLVM: convert to raw (32-byte records: the cheapest output) and YAML.
    let llvm = |format: &str| {
        let out = dir.join(format!("out.{format}"));
        let start = Instant::now();
        let status = Command::new("llvm-xray-22")
            .args(["convert", &format!("--output-format={format}"), "-o"])
            .arg(&out)
            .arg(&log_path)
            .status()
            .expect("llvm-xray-22");
        let elapsed = start.elapsed().as_secs_f64();
        assert!(status.success());
        let written = std::fs::metadata(&out).unwrap().len();
        let _ = std::fs::remove_file(&out);
        (elapsed, written)
    };
    let (t_raw, raw_bytes) = llvm("raw");
    let records_llvm = (raw_bytes - 32) / 32;
    assert_eq!(n_ours, records_llvm, "retrace and llvm-xray disagree on the record count");
    let (t_yaml, _) = llvm("yaml");

    let rate = |t: f64| n_ours as f64 / t / 1e6;
    println!("XRay FDR log: {:.1} MB, {} records, {} calls ({} × fib({n}))", size as f64 / 1e6, n_ours, n_calls, 2);
    println!("{:<44} {:>10} {:>14} {:>10}", "reader", "seconds", "M records/s", "vs llvm");
    println!("{:<44} {:>10.3} {:>14.1} {:>9.1}x", "retrace: read + expand records", t_ours, rate(t_ours), t_raw / t_ours);
    println!("{:<44} {:>10.3} {:>14.1} {:>9.1}x", "retrace: + per-thread call timelines", t_timeline, rate(t_timeline), t_raw / t_timeline);
    println!("{:<44} {:>10.3} {:>14.1} {:>9.1}x", "llvm-xray-22 convert --output-format=raw", t_raw, rate(t_raw), 1.0);
    println!("{:<44} {:>10.3} {:>14.1} {:>9.1}x", "llvm-xray-22 convert --output-format=yaml", t_yaml, rate(t_yaml), t_raw / t_yaml);
    println!("goal: retrace >= 5x llvm-xray convert: {}", if t_raw / t_ours >= 5.0 { "met" } else { "NOT met" });
    let _ = std::fs::remove_dir_all(&dir);
}
