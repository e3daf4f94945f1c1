//! `retrace dump function-calls LOG --binary BIN` and `retrace export` on a
//! real FDR log, checked against what LLVM's tools say about the same log:
//! names from `llvm-xray-22 extract --symbolize`, the records (and so the
//! call trees, ids and durations) from `llvm-xray-22 convert`.

use std::collections::BTreeMap;
use std::process::Command;

use retrace_tests::xray::{self as support, LlvmRecord};

/// An empty directory of this test under the system temp directory.
fn fresh_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("retrace-xray-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn retrace(args: &[&str]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_retrace")).args(args).output().expect("run retrace");
    assert!(output.status.success(), "retrace {args:?}: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout).expect("UTF-8")
}

/// The text `dump function-calls --tid T` must print for one thread, built
/// from LLVM's records of it with a plain stack (threads whose every exit
/// matches the innermost open call; `None` otherwise).
fn expected_text(number: usize, tid: u32, records: &[LlvmRecord], names: &BTreeMap<u32, (String, String)>, frequency: f64) -> Option<String> {
    struct Open {
        id: usize,
        line: usize,
        tsc: u64,
    }
    let mut lines: Vec<String> = vec![format!("thread #{number}: tid = {tid}, pid = {}", records[0].process)];
    let mut stack: Vec<Open> = Vec::new();
    let mut trees = 0;
    for (id, record) in records.iter().enumerate() {
        let depth = stack.len();
        match record.kind.as_str() {
            "function-enter" | "function-enter-arg" => {
                if depth == 0 {
                    lines.push(String::new());
                    lines.push(format!("[call tree #{trees}]"));
                    trees += 1;
                }
                let (module, name) = names.get(&(record.function as u32))?;
                let args = if record.args.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", record.args.iter().map(|a| a.to_string()).collect::<Vec<_>>().join(", "))
                };
                lines.push(format!("{}{module}`{name}{args}", "  ".repeat(depth)));
                stack.push(Open { id, line: lines.len() - 1, tsc: record.tsc });
            }
            "function-exit" | "function-tail-exit" => {
                let open = stack.pop()?;
                if records[open.id].function != record.function {
                    return None;
                }
                let ns = (record.tsc - open.tsc) as f64 * 1e9 / frequency;
                let tail = if record.kind == "function-tail-exit" { " (tail call)" } else { "" };
                lines[open.line].push_str(&format!("  [{}, {id}]  {ns:.3} ns{tail}", open.id));
            }
            _ => {
                if depth == 0 {
                    return None;
                }
                lines.push(format!("{}custom-event {:?}  [{id}]", "  ".repeat(depth), record.data));
            }
        }
    }
    stack.is_empty().then(|| lines.join("\n") + "\n")
}

#[test]
fn xray_function_calls_and_timeline_match_llvm_xray() {
    if !retrace_tests::tools::require("clang++-22 and llvm-xray-22", support::tools_available()) {
        return;
    }
    let dir = fresh_dir("cli");
    let binary = support::build_program(&dir);
    let log = support::run_program(&binary, &dir, "fdr");
    let (log_arg, binary_arg) = (log.to_str().unwrap(), binary.to_str().unwrap());
    let names = support::llvm_function_names(&binary);
    assert!(names.values().any(|(_, n)| n == "fib(unsigned int)"), "{names:?}");
    let module_names: BTreeMap<u32, (String, String)> = names.iter().map(|(&id, (_, name))| (id, ("xray_workers".to_string(), name.clone()))).collect();
    let records = support::llvm_records(&log).expect("llvm-xray reads the log");
    let mut by_thread: BTreeMap<u32, Vec<LlvmRecord>> = BTreeMap::new();
    for record in records {
        by_thread.entry(record.thread).or_default().push(record);
    }
    let frequency = 1e9; // The log's header (emulated TSC on machines without tsc_freq_khz).
    let header = std::fs::read(&log).unwrap();
    assert_eq!(u64::from_le_bytes(header[8..16].try_into().unwrap()) as f64, frequency);

    // Text, thread by thread, equal to the trees LLVM's records make;
    // threads are numbered in the order their first buffer is in the file.
    let order = support::thread_order(&header);
    let mut compared = 0;
    for (tid, records) in &by_thread {
        let number = order.iter().position(|t| t == tid).expect("thread in the file") + 1;
        let Some(expected) = expected_text(number, *tid, records, &module_names, frequency) else { continue };
        let text = retrace(&["dump", "function-calls", log_arg, "--binary", binary_arg, "--tid", &tid.to_string()]);
        assert_eq!(text, expected, "thread {tid}");
        compared += 1;
    }
    assert!(compared >= 4, "only {compared} threads had well-nested records");

    // JSON: every call's name is LLVM's name for its id; the logged arguments
    // are the program's (10 * worker + i for i in 0..3).
    let json: serde_json::Value = serde_json::from_str(&retrace(&["dump", "function-calls", log_arg, "--binary", binary_arg, "--json"])).unwrap();
    let mut args = Vec::new();
    let mut named = 0;
    for thread in json["threads"].as_array().unwrap() {
        let calls = thread["calls"].as_array().unwrap();
        for (position, call) in calls.iter().enumerate() {
            let id = call["functionId"].as_u64().unwrap() as u32;
            assert_eq!(call["function"].as_str(), names.get(&id).map(|n| n.1.as_str()), "function {id}");
            named += 1;
            if let Some(list) = call["args"].as_array() {
                args.extend(list.iter().map(|a| a.as_u64().unwrap()));
            }
            // Depth first: a call's parent is listed before it, one level up.
            if let Some(parent) = call["parent"].as_u64() {
                let parent_call = calls[..position].iter().find(|c| c["index"].as_u64() == Some(parent)).expect("parent listed first");
                assert_eq!(parent_call["depth"].as_u64().unwrap() + 1, call["depth"].as_u64().unwrap());
                assert!(parent_call["enterId"].as_u64() < call["enterId"].as_u64());
            } else {
                assert_eq!(call["depth"], 0);
            }
        }
    }
    args.sort();
    assert_eq!(args, vec![0, 1, 2, 10, 11, 12, 20, 21, 22, 30, 31, 32]);
    assert_eq!(json["errors"], serde_json::json!([]));

    // The timeline: one slice per entry record, per thread; durations (µs)
    // summed per thread equal LLVM's exits minus entries.
    let out = dir.join("timeline.json");
    retrace(&["export", "perfetto", log_arg, "--binary", binary_arg, "-o", out.to_str().unwrap()]);
    let timeline: serde_json::Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    let events = timeline["traceEvents"].as_array().unwrap();
    let slices: Vec<_> = events.iter().filter(|e| e["ph"] == "X").collect();
    assert_eq!(slices.len(), named);
    for (tid, records) in &by_thread {
        let entries = records.iter().filter(|r| r.kind.starts_with("function-enter")).count();
        let ours: Vec<_> = slices.iter().filter(|e| e["tid"].as_u64() == Some(u64::from(*tid))).collect();
        assert_eq!(ours.len(), entries, "thread {tid}: slices");
        if expected_text(1, *tid, records, &module_names, frequency).is_some() {
            let mut open = Vec::new();
            let mut total = 0.0;
            for record in records {
                if record.kind.starts_with("function-enter") {
                    open.push(record.tsc);
                } else if record.kind.contains("exit") {
                    total += (record.tsc - open.pop().unwrap()) as f64 / 1000.0;
                }
            }
            let sum: f64 = ours.iter().map(|e| e["dur"].as_f64().unwrap()).sum();
            assert!((sum - total).abs() < 1e-6 * total.max(1.0), "thread {tid}: {sum} µs vs {total} µs");
        }
    }
    assert_eq!(events.iter().filter(|e| e["ph"] == "i").count(), 4, "one custom event per worker");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn xray_function_ids_of_shared_libraries_are_named_from_their_object() {
    if !retrace_tests::tools::require("clang++-22 and llvm-xray-22", support::tools_available()) {
        return;
    }
    let dir = fresh_dir("dso");
    let (binary, library) = support::build_dso_program(&dir);
    let log = support::run_program(&binary, &dir, "fdr");
    // Object 0 is the executable, object 1 the library: ids `1 << 24 | local`.
    let mut names: BTreeMap<u32, (String, String)> = BTreeMap::new();
    for (object, (path, module)) in [(&binary, "dso_main"), (&library, "libxray_square.so")].into_iter().enumerate() {
        for (local, (_, name)) in support::llvm_function_names(path) {
            names.insert((object as u32) << 24 | local, (module.to_string(), name));
        }
    }
    assert!(names.contains_key(&(1 << 24 | 1)), "{names:?}");
    let records = support::llvm_records(&log).expect("llvm-xray reads the log");
    assert!(records.iter().any(|r| r.function >> 24 == 1), "no library function in the log");
    let tid = records[0].thread;
    let expected = expected_text(1, tid, &records, &names, 1e9).expect("well nested");
    assert!(expected.contains("libxray_square.so`lib_square(int)"), "{expected}");
    let text = retrace(&["dump", "function-calls", log.to_str().unwrap(), "--binary", binary.to_str().unwrap(), "--binary", library.to_str().unwrap()]);
    assert_eq!(text, expected);
    let _ = std::fs::remove_dir_all(&dir);
}
