//! The hardware backend on a machine with Intel PT: `retrace record
//! --backend intel-pt` of the recorder-test programs, decoded by LLDB 22's
//! own intel-pt plugin (libipt), must equal a single-step log of the same
//! program (`--backend software --mode step --insn-log`, same environment,
//! ASLR off), thread by thread, with no decode error — the check the
//! software backend passes in `record_lldb.rs`.
//!
//! Runs only where `/sys/bus/event_source/devices/intel_pt` exists and an
//! event opens (root, or `perf_event_paranoid` ≤ 2 with enough
//! `perf_event_mlock_kb`); elsewhere — this project's VMs, and CI on them —
//! every test prints why it is skipped and passes. To run it on an Intel
//! machine (Broadwell or newer, bare metal or a VM with PT passthrough):
//!
//! ```text
//! sudo sysctl kernel.perf_event_paranoid=1     # or run as root
//! cargo test -p retrace-plugin --test record_intel_pt -- --nocapture
//! ```

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use retrace_collector::hardware::PerfIntelPt;
use retrace_collector::intel_pt::{PtEventConfig, SYSFS_DIR};
use retrace_tests::lldb::dump_raw_instructions_of;
use retrace_tests::recordings::{read_insn_log, record_summary};
use retrace_tests::tools::which;

use common::build;

/// Why the hardware tests cannot run here, if they cannot.
fn unavailable() -> Option<String> {
    let source = match PerfIntelPt::new(Path::new(SYSFS_DIR), PtEventConfig::default()) {
        Ok(source) => source,
        Err(error) => return Some(error.to_string()),
    };
    if let Err(error) = source.probe() {
        return Some(format!("intel_pt is present but unusable: {error}"));
    }
    for tool in ["gcc", "lldb-22"] {
        if which(tool).is_none() {
            return Some(format!("{tool} is missing"));
        }
    }
    None
}

fn runs_here() -> bool {
    match unavailable() {
        None => true,
        Some(reason) => {
            eprintln!("SKIPPED: the Intel PT hardware tests need a usable intel_pt PMU: {reason}");
            false
        }
    }
}


fn record(backend: &[&str], bundle: &Path, program: &[&str]) -> serde_json::Value {
    let out: Output = Command::new(env!("CARGO_BIN_EXE_retrace"))
        .arg("record")
        .args(backend)
        .args(["--json", "-o"])
        .arg(bundle)
        .arg("--")
        .args(program)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .output()
        .unwrap();
    record_summary(&out)
}

/// Every image bundle of a recording: trace.json, then exec<N>/trace.json.
fn image_bundles(bundle: &Path) -> Vec<PathBuf> {
    let main = bundle.join("trace.json");
    let description: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&main).unwrap()).unwrap();
    let mut all = vec![main];
    for image in description["retrace"]["execImages"].as_array().into_iter().flatten() {
        all.push(bundle.join(image.as_str().unwrap()));
    }
    all
}

/// LLDB's decode of the hardware recording equals the single-step log,
/// image by image and thread by thread (in creation order).
fn assert_hardware_equals_single_step(name: &str, program: &[&str]) {
    let dir = common::work_dir("record-intel-pt", name);
    let hardware = dir.join("hardware");
    let software = dir.join("software");
    let recorded = record(&["--backend", "intel-pt"], &hardware, program);
    let truth = record(&["--backend", "software", "--mode", "step", "--insn-log"], &software, program);
    assert_eq!(recorded["outcome"], truth["outcome"], "{name}");
    assert_eq!(recorded["warnings"], serde_json::json!([]), "{name}: {}", recorded["warnings"]);
    let (hw_images, sw_images) = (image_bundles(&hardware), image_bundles(&software));
    assert_eq!(hw_images.len(), sw_images.len(), "{name}: program images");
    for (hw, sw) in hw_images.iter().zip(&sw_images) {
        let read = |p: &Path| -> serde_json::Value { serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap() };
        let (hw_threads, sw_threads) = (read(hw)["processes"][0]["threads"].clone(), read(sw)["processes"][0]["threads"].clone());
        let (hw_threads, sw_threads) = (hw_threads.as_array().unwrap(), sw_threads.as_array().unwrap());
        assert_eq!(hw_threads.len(), sw_threads.len(), "{name}: threads in {}", hw.display());
        let dumped = dump_raw_instructions_of(hw, None, hw_threads.len()).unwrap_or_else(|e| panic!("{e}"));
        for (hw_thread, sw_thread) in hw_threads.iter().zip(sw_threads) {
            let lldb = &dumped[&hw_thread["tid"].as_u64().unwrap()];
            assert!(lldb.errors.is_empty(), "{name}: LLDB errors {:?}", lldb.errors);
            let log = sw.parent().unwrap().join(sw_thread["iptTrace"].as_str().unwrap().replace(".intelpt_trace", ".insns"));
            let truth = read_insn_log(&log);
            assert_eq!(lldb.addresses.len(), truth.len(), "{name}: instruction counts");
            assert!(lldb.addresses == truth, "{name}: LLDB's decode of the hardware trace differs from the single-step log");
        }
    }
}

#[test]
fn single_threaded_programs_equal_their_single_step_logs() {
    if !runs_here() {
        return;
    }
    let dir = common::work_dir("record-intel-pt", "programs");
    for name in ["loop_fnptr", "recursion", "switch_table", "setjmp_longjmp", "signal_handler"] {
        for flags in [&["-O0", "-static"][..], &["-O2"][..]] {
            let exe = build(name, &dir, flags);
            assert_hardware_equals_single_step(&format!("{name}{}", flags.join("")), &[exe.to_str().unwrap()]);
        }
    }
}

#[test]
fn threads_and_exec_equal_their_single_step_logs() {
    if !runs_here() {
        return;
    }
    let dir = common::work_dir("record-intel-pt", "threads-exec");
    let threads = build("thread_loop", &dir, &["-O0", "-pthread"]);
    // The thread loop is deterministic per thread (each thread runs the same code).
    assert_hardware_equals_single_step("thread_loop", &[threads.to_str().unwrap()]);
    assert_hardware_equals_single_step("env-echo", &["env", "/bin/echo", "hi"]);
}

#[test]
fn the_hardware_suite_says_why_it_skips() {
    // Always runs: on a machine without a usable PMU the reason names the
    // sysfs file or the failing call, so a reader of the log knows what is missing.
    if let Some(reason) = unavailable() {
        assert!(reason.contains(SYSFS_DIR) || reason.contains("perf_event_open") || reason.contains("missing"), "{reason}");
    }
}
