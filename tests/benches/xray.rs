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
use retrace_tests::bench::best_of_three as best;
use retrace_tests::xray::{self, tools_available, BENCH_PROGRAM};

fn main() {
    assert!(tools_available(), "clang++-22 and llvm-xray-22 are needed (apt-get install clang-22 llvm-22 libclang-rt-22-dev)");
    let n = std::env::var("RETRACE_XRAY_BENCH_FIB").unwrap_or_else(|_| "32".into());
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("bench-xray");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let binary = xray::build(&dir, "fib", BENCH_PROGRAM);
    let log_path = xray::run_program_with(&binary, &dir, "fdr", &[&n]);
    let size = std::fs::metadata(&log_path).unwrap().len();
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
