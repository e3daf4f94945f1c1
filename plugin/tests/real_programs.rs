//! Real programs from the distribution (dynamic, over a million instructions each),
//! recorded as a user records them: each single-step recording's bundle must
//! decode, in retrace and in LLDB 22, to exactly the instructions single
//! stepping saw in that run, with no error item; a branch-mode recording of
//! the same program (same environment, ASLR off: the same execution) must
//! decode in retrace to the same instructions.

mod common;

use std::path::Path;
use std::process::Output;

use retrace_tests::lldb::dump_raw_instructions;
use retrace_tests::recordings::{read_insn_log, record_summary};
use retrace_tests::tools::{require, which};

/// Fewest instructions a program here must run.
const AT_LEAST: usize = 1_000_000;

fn record(mode: &str, bundle: &Path, program: &[&str]) -> Output {
    let out = common::retrace()
        .args(["record", "--backend", "software", "--mode", mode, "--insn-log", "--json", "-o"])
        .arg(bundle)
        .arg("--")
        .args(program)
        .output()
        .expect("run retrace record");
    assert!(out.status.success(), "retrace record {program:?}: {}", String::from_utf8_lossy(&out.stderr));
    out
}

/// The only thread's tid and single-step log of a one-image bundle.
fn thread_and_log(bundle: &Path) -> (u64, Vec<u64>) {
    let description: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(bundle.join("trace.json")).unwrap()).unwrap();
    let threads = description["processes"][0]["threads"].as_array().unwrap();
    assert_eq!(threads.len(), 1, "{}: one thread expected", bundle.display());
    let trace = threads[0]["iptTrace"].as_str().unwrap();
    (threads[0]["tid"].as_u64().unwrap(), read_insn_log(&bundle.join(trace.replace(".intelpt_trace", ".insns"))))
}

/// retrace's `dump instructions -a -f --raw`: instruction addresses, and the
/// error lines.
fn retrace_instructions(trace_json: &Path) -> (Vec<u64>, Vec<String>) {
    let out = common::retrace().args(["dump", "instructions", "-a", "-f", "--raw"]).arg(trace_json).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let mut addresses = Vec::new();
    let mut errors = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Some((_, rest)) = line.trim().split_once(": ") else { continue };
        if let Some(hex) = rest.strip_prefix("0x") {
            addresses.push(u64::from_str_radix(hex.trim(), 16).unwrap());
        } else if rest.starts_with("(error)") {
            errors.push(line.to_string());
        }
    }
    (addresses, errors)
}

fn first_difference(a: &[u64], b: &[u64]) -> String {
    let i = a.iter().zip(b).position(|(x, y)| x != y).unwrap_or(a.len().min(b.len()));
    format!("first difference at instruction {i}: {:x?} vs {:x?} ({} vs {} instructions)", a.get(i), b.get(i), a.len(), b.len())
}

fn check(name: &str, program: &[&str]) {
    if !require("lldb-22 (Debian package lldb-22)", which("lldb-22").is_some()) {
        return;
    }
    let dir = common::work_dir("real-programs", name);
    let stepped = dir.join("stepped");
    let summary = record_summary(&record("step", &stepped, program));
    assert_eq!(summary["outcome"], "program exited with status 0", "{program:?}: {summary}");
    let (tid, truth) = thread_and_log(&stepped);
    assert!(truth.len() >= AT_LEAST, "{program:?} ran only {} instructions", truth.len());
    let trace_json = stepped.join("trace.json");

    let dumped = dump_raw_instructions(&trace_json, 1).unwrap_or_else(|e| panic!("{e}"));
    let lldb = &dumped[&tid];
    assert!(lldb.errors.is_empty(), "{program:?}: LLDB decode errors {:?}", lldb.errors);
    assert!(lldb.addresses == truth, "{program:?}: LLDB's decode vs the single-step log: {}", first_difference(&lldb.addresses, &truth));

    let (ours, errors) = retrace_instructions(&trace_json);
    assert!(errors.is_empty(), "{program:?}: retrace decode errors {errors:?}");
    assert!(ours == truth, "{program:?}: retrace's decode vs the single-step log: {}", first_difference(&ours, &truth));

    let branch = dir.join("branch");
    record("branch", &branch, program);
    let (ours, errors) = retrace_instructions(&branch.join("trace.json"));
    assert!(errors.is_empty(), "{program:?} (branch mode): retrace decode errors {errors:?}");
    assert!(ours == truth, "{program:?}: the branch-mode recording vs the single-step log: {}", first_difference(&ours, &truth));
}

#[test]
fn ls_of_a_large_directory() {
    // A directory of its own (/usr/bin's size is the machine's: 6.5 M
    // instructions, 3 minutes of the suite, on one): 400 files, 1.4 M.
    let directory = common::work_dir("real-programs", "ls-directory");
    for i in 1..=400 {
        std::fs::write(directory.join(format!("file-{i}.txt")), "").unwrap();
    }
    check("ls", &["/usr/bin/ls", directory.to_str().unwrap()]);
}

#[test]
fn sha1sum_of_a_binary() {
    check("sha1sum", &["/usr/bin/sha1sum", "/usr/bin/env"]);
}

#[test]
fn file_reading_its_magic_database() {
    check("file", &["/usr/bin/file", "/usr/bin/ls"]);
}
