//! `retrace record` on processes that exec and fork, as a user runs it: the
//! program's stdout untouched, each exec'd program an image of its own that
//! retrace and LLDB 22 decode without an error item and equal to the
//! single-step log; `--backend auto` falling back when Intel PT is present
//! but unusable; Ctrl-C ending a recording whose program sleeps in a system
//! call.

mod common;

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use retrace_tests::lldb::dump_raw_instructions_of;
use retrace_tests::recordings::{read_insn_log as insn_log, record_summary as summary};
use retrace_tests::tools::{require, which};

fn record(bundle: &Path, program: &[&str]) -> Output {
    record_in_mode("branch", bundle, program)
}

fn record_in_mode(mode: &str, bundle: &Path, program: &[&str]) -> Output {
    common::retrace()
        .args(["record", "--backend", "software", "--mode", mode, "--insn-log", "--json", "-o"])
        .arg(bundle)
        .arg("--")
        .args(program)
        .output()
        .expect("run retrace record")
}

/// retrace's own decode of every thread of every image: no error item.
fn assert_retrace_decodes_without_errors(trace_json: &Path) {
    let out = common::retrace().args(["dump", "info", "--json"]).arg(trace_json).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let info: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for thread in info["threads"].as_array().unwrap() {
        assert_eq!(thread["errors"], 0, "retrace decode errors in {thread}");
        assert!(thread["instructions"].as_u64().unwrap() > 0, "{thread}");
    }
}

#[test]
fn env_echo_prints_hi_and_each_program_decodes_in_lldb() {
    if !require("lldb-22 (Debian package lldb-22)", which("lldb-22").is_some()) {
        return;
    }
    let dir = common::work_dir("record-processes", "env-echo");
    // The truth: a single-step recording of the same run (same environment,
    // ASLR off); the branch-mode recording under test must decode to it.
    let stepped = dir.join("stepped");
    let out = record_in_mode("step", &stepped, &["env", "/bin/echo", "hi"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hi\n");
    assert_eq!(summary(&out)["images"], 2);
    let bundle = dir.join("bundle");
    let out = record(&bundle, &["env", "/bin/echo", "hi"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hi\n", "the program's stdout, byte for byte, and nothing else");
    let summary = summary(&out);
    assert_eq!(summary["outcome"], "program exited with status 0");
    assert_eq!(summary["images"], 2, "env, then echo: {summary}");

    // The launched program's bundle, and the exec'd program's, listed in it.
    let trace_json = bundle.join("trace.json");
    let read = |path: &Path| -> serde_json::Value { serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap() };
    let description = read(&trace_json);
    assert_eq!(description["retrace"]["execImages"], serde_json::json!(["exec1/trace.json"]));
    let image_bundles = [trace_json.clone(), bundle.join("exec1/trace.json")];
    let processes: Vec<serde_json::Value> = image_bundles
        .iter()
        .map(|path| {
            let processes = read(path)["processes"].as_array().unwrap().clone();
            assert_eq!(processes.len(), 1, "{}: one program image per trace.json", path.display());
            processes[0].clone()
        })
        .collect();
    assert_eq!(processes[0]["pid"], processes[1]["pid"]);
    let modules = |i: usize| -> Vec<String> {
        processes[i]["modules"].as_array().unwrap().iter().map(|m| m["systemPath"].as_str().unwrap().to_string()).collect()
    };
    assert!(modules(0).contains(&"/usr/bin/env".into()) && !modules(0).contains(&"/usr/bin/echo".into()), "{:?}", modules(0));
    assert!(modules(1).contains(&"/usr/bin/echo".into()) && !modules(1).contains(&"/usr/bin/env".into()), "{:?}", modules(1));

    assert_retrace_decodes_without_errors(&trace_json);
    // LLDB: `trace load` of each image's bundle equals that image's single-step log.
    let mut compared = 0;
    for (target, (process, path)) in processes.iter().zip(&image_bundles).enumerate() {
        let thread = &process["threads"][0];
        let tid = thread["tid"].as_u64().unwrap();
        let log_of = |bundle_file: &Path| -> Vec<u64> {
            let trace = read(bundle_file)["processes"][0]["threads"][0]["iptTrace"].as_str().unwrap().to_string();
            insn_log(&bundle_file.parent().unwrap().join(trace.replace(".intelpt_trace", ".insns")))
        };
        let stepped_file = if target == 0 { stepped.join("trace.json") } else { stepped.join(format!("exec{target}/trace.json")) };
        let truth = log_of(&stepped_file);
        assert_eq!(log_of(path), truth, "target {target}: branch stops saw what single-stepping saw");
        let dumped = dump_raw_instructions_of(path, None, 1).unwrap_or_else(|e| panic!("{e}"));
        let lldb = &dumped[&tid];
        assert!(lldb.errors.is_empty(), "target {target}: LLDB decode errors {:?}", lldb.errors);
        assert_eq!(lldb.addresses.len(), truth.len(), "target {target}: instruction counts");
        assert!(lldb.addresses == truth, "target {target}: LLDB's instructions differ from the single-step log");
        compared += truth.len() as u64;
    }
    assert_eq!(compared, summary["instructions"].as_u64().unwrap());

    // retrace follows the chain: both images, headed, in one dump.
    let out = common::retrace().args(["dump", "instructions", "-c", "1"]).arg(&trace_json).output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let pid = &processes[0]["pid"];
    assert!(text.starts_with(&format!("image #0: pid = {pid}\nthread #1: tid = {pid}\n")), "{text}");
    assert!(text.contains(&format!("image #1: pid = {pid}\nthread #1: tid = {pid}\n")), "{text}");
}

#[test]
fn shell_child_status_and_stdout_pass_through() {
    let dir = common::work_dir("record-processes", "sh-true");
    let out = record(&dir.join("bundle"), &["sh", "-c", "/bin/true; echo $?"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "0\n");
    assert_eq!(summary(&out)["outcome"], "program exited with status 0");

    // `retrace record -- prog | sort` sorts the program's lines only.
    let shell = format!(
        "{} record --backend software --mode branch -o {} -- sh -c 'echo b; echo a' | sort",
        env!("CARGO_BIN_EXE_retrace"),
        dir.join("sorted").display()
    );
    let out = Command::new("sh").args(["-c", &shell]).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "a\nb\n");
    assert!(String::from_utf8_lossy(&out.stderr).contains("program exited with status 0"));
}

#[test]
fn auto_falls_back_to_software_when_intel_pt_is_unusable() {
    let dir = common::work_dir("record-processes", "auto-fallback");
    // An intel_pt PMU whose type no kernel knows: perf_event_open says ENOENT.
    let sysfs = dir.join("intel_pt");
    std::fs::create_dir_all(sysfs.join("format")).unwrap();
    std::fs::write(sysfs.join("type"), "99999\n").unwrap();
    std::fs::write(sysfs.join("format/tsc"), "config:10\n").unwrap();
    let bundle = dir.join("bundle");
    let out = common::retrace()
        .env("RETRACE_INTEL_PT_SYSFS", &sysfs)
        .args(["record", "--backend", "auto", "--mode", "branch", "-o"])
        .arg(&bundle)
        .args(["--", "echo", "recorded"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "recorded\n");
    let note = stderr.lines().find(|l| l.contains("Intel PT is present but unusable")).unwrap_or_else(|| panic!("no note: {stderr}"));
    assert!(note.contains("perf_event_open") && note.ends_with("recording with ptrace"), "{note}");
    let description: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(bundle.join("trace.json")).unwrap()).unwrap();
    assert_eq!(description["retrace"]["backend"], "software");

    // Asked for explicitly, the same PMU is an error, with the reason.
    let out = common::retrace()
        .env("RETRACE_INTEL_PT_SYSFS", &sysfs)
        .args(["record", "--backend", "intel-pt", "-o"])
        .arg(dir.join("refused"))
        .args(["--", "echo", "never"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout), "", "the program must not run");
    assert!(String::from_utf8_lossy(&out.stderr).contains("--backend intel-pt: perf_event_open"), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn ctrl_c_ends_a_recording_whose_program_sleeps_in_a_system_call() {
    let dir = common::work_dir("record-processes", "ctrl-c-sleep");
    let bundle = dir.join("bundle");
    let child = common::retrace()
        .args(["record", "--backend", "software", "--mode", "branch", "--json", "-o"])
        .arg(&bundle)
        .args(["--", "sleep", "60"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Let the program reach its nanosleep (the recorder then waits in waitpid).
    std::thread::sleep(Duration::from_millis(1500));
    let sent = Instant::now();
    assert!(Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap().success());
    let out = child.wait_with_output().unwrap();
    let waited = sent.elapsed();
    let summary = summary(&out);
    assert_eq!(summary["outcome"], "recording interrupted; program killed");
    assert!(waited < Duration::from_secs(20), "Ctrl-C took {waited:?} (the program sleeps 60 s)");
    assert!(bundle.join("trace.json").is_file());
}
