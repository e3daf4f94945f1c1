//! Recording under the debugger: stock LLDB 22 starts a trace at a stop
//! (`process trace start`), continues, and decodes what the stub served
//! with its own libipt. Ground truth is a single-step log of the same
//! program (ASLR off, so addresses match), recorded here with the
//! collector; each session is bounded by a timeout.

use std::collections::BTreeMap;
use std::io::Write;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

mod common;

use common::{exchange, framed, read_packet, retrace, start_stub, wait_exit};
use retrace_collector::process::{launch, LaunchOptions};
use retrace_collector::ptrace_recorder::{record, RecordOptions, StepMode};
use retrace_tests::recordings::build;
use retrace_tests::tools::{require, which};

fn tools() -> bool {
    require("gcc", which("gcc").is_some()) && require("lldb-22", which("lldb-22").is_some())
}

fn program(name: &str, flags: &[&str]) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("live-trace").join(format!("{name}{}", flags.join("")));
    build(name, &dir, flags)
}

/// Every executed address of each thread (in creation order), single-stepped.
fn ground_truth(program: &Path, args: &[&str]) -> Vec<Vec<u64>> {
    let tracee = launch(&LaunchOptions::new(program.as_os_str(), args.iter().copied())).expect("launch");
    let options = RecordOptions { mode: StepMode::Step, keep_instruction_log: true, ..RecordOptions::default() };
    let recording = record(tracee, &options).expect("record");
    recording.threads().map(|t| t.instruction_log.clone().expect("log kept")).collect()
}

/// Runs lldb-22 against the stub on `program` with these commands.
fn lldb(program: &Path, commands: &[&str]) -> String {
    lldb_with_args(program, &[], commands)
}

/// Runs lldb-22 against the stub on `program args…` with these commands.
fn lldb_with_args(program: &Path, program_args: &[&str], commands: &[&str]) -> String {
    let mut stub = Command::new(env!("CARGO_BIN_EXE_retrace-stub"));
    stub.args(["--listen", "127.0.0.1:0", "--"]).arg(program).args(program_args);
    lldb_against(stub, program, commands)
}

/// Runs lldb-22 against the stub `stub` starts (on `program`) with these
/// commands.
fn lldb_against(stub: Command, program: &Path, commands: &[&str]) -> String {
    let (stub, line) = common::spawn_stub(stub);
    let (_, port) = common::pid_and_port(&line);
    let mut args = vec!["-b".to_string(), "-o".into(), format!("gdb-remote {port}")];
    for command in commands {
        args.push("-o".into());
        args.push(command.to_string());
    }
    args.push(program.display().to_string());
    let out = Command::new("timeout").arg("120").arg("lldb-22").args(&args).stdin(Stdio::null()).output().unwrap();
    let _ = wait_exit(stub);
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

/// The address LLDB gave breakpoint `n` ("Breakpoint n: where = …, address = 0x…").
fn breakpoint_address(out: &str, n: u32) -> u64 {
    let prefix = format!("Breakpoint {n}: ");
    let line = out.lines().find(|l| l.starts_with(&prefix)).unwrap_or_else(|| panic!("no breakpoint {n} in:\n{out}"));
    let hex = line.rsplit("address = 0x").next().unwrap();
    u64::from_str_radix(hex.trim(), 16).unwrap_or_else(|_| panic!("{line}"))
}

/// Each `thread trace dump instructions --raw` block: tid → the addresses
/// listed, and any error line.
fn raw_dumps(out: &str) -> BTreeMap<u64, (Vec<u64>, Vec<String>)> {
    let mut dumps = BTreeMap::new();
    let mut current: Option<u64> = None;
    for line in out.lines() {
        if let Some(rest) = line.strip_prefix("thread #") {
            current = rest.split("tid = ").nth(1).and_then(|t| t.trim().parse().ok());
            if let Some(tid) = current {
                dumps.entry(tid).or_insert_with(|| (Vec::new(), Vec::new()));
            }
            continue;
        }
        let Some(tid) = current else { continue };
        let text = line.trim();
        let Some((id, rest)) = text.split_once(": ") else {
            if !text.is_empty() && text != "no more data" {
                current = None;
            }
            continue;
        };
        if id.parse::<u64>().is_err() {
            current = None;
            continue;
        }
        let entry = dumps.get_mut(&tid).unwrap();
        match rest.strip_prefix("0x").map(|hex| u64::from_str_radix(hex.trim(), 16)) {
            Some(Ok(address)) => entry.0.push(address),
            _ => entry.1.push(text.to_string()),
        }
    }
    dumps
}

/// `log[from..]` up to (not including) the first `to` after it.
fn stretch(log: &[u64], from: u64, to: u64) -> &[u64] {
    let start = log.iter().position(|&a| a == from).expect("the first breakpoint executes");
    let end = start + 1 + log[start + 1..].iter().position(|&a| a == to).expect("the second breakpoint executes");
    &log[start..end]
}

/// `start` is the trace command; `clock` whether it asked for timestamps.
fn single_thread_stretch(name: &str, flags: &[&str], first: &str, second: &str, start: &str, clock: bool) {
    let program = program(name, flags);
    let out = lldb(
        &program,
        &[&format!("b {first}"), "c", start, &format!("b {second}"), "c", "thread trace dump instructions -a -f --raw", "thread trace dump info", "c"],
    );
    let (from, to) = (breakpoint_address(&out, 1), breakpoint_address(&out, 2));
    let truth = ground_truth(&program, &[]);
    let expected = stretch(&truth[0], from, to);
    let dumps = raw_dumps(&out);
    assert_eq!(dumps.len(), 1, "one thread dumped:\n{out}");
    let (addresses, errors) = dumps.values().next().unwrap();
    assert!(errors.is_empty(), "error items: {errors:?}\n{out}");
    assert_eq!(addresses.len(), expected.len(), "instruction count (first {:#x?})\n{out}", &addresses[..addresses.len().min(8)]);
    assert_eq!(addresses, expected);
    assert!(out.contains("Total number of trace items: "), "{out}");
    assert!(out.contains("Number of individual errors: 0"), "{out}");
    assert_eq!(out.contains("HW clock tick"), clock, "timestamps as asked (enableTsc):\n{out}");
    assert!(out.contains("exited with status = "), "{out}");
}

#[test]
fn lldb_traces_a_dynamic_o0_stretch_exactly() {
    if !tools() {
        return;
    }
    single_thread_stretch("debuggee", &["-O0"], "main", "add", "process trace start", false);
}

#[test]
fn lldb_traces_a_static_o2_stretch_exactly() {
    if !tools() {
        return;
    }
    single_thread_stretch("recursion", &["-O2", "-static"], "main", "depth", "process trace start --tsc", true);
}

#[test]
fn lldb_traces_a_dynamic_o2_stretch_exactly() {
    if !tools() {
        return;
    }
    single_thread_stretch("recursion", &["-O2"], "main", "depth", "process trace start", false);
}

#[test]
fn lldb_traces_a_static_o0_stretch_exactly() {
    if !tools() {
        return;
    }
    single_thread_stretch("debuggee", &["-O0", "-static"], "main", "add", "process trace start --tsc", true);
}

#[test]
fn lldb_traces_every_thread_of_a_threaded_program() {
    if !tools() {
        return;
    }
    every_thread(&["-O0", "-pthread"]);
}

#[test]
fn lldb_traces_every_thread_of_a_static_o2_threaded_program() {
    if !tools() {
        return;
    }
    every_thread(&["-O2", "-static", "-pthread"]);
}

fn every_thread(flags: &[&str]) {
    let program = program("threads", flags);
    let out = lldb(
        &program,
        &[
            "b main",
            "c",
            "process trace start",
            "b work",
            "c",
            "thread list",
            // Every thread there is (how many workers exist yet is up to
            // the scheduler; a dump of an index past the last is an error,
            // which the script interpreter keeps from ending the batch).
            "script for i in range(1, 6): lldb.debugger.HandleCommand('thread trace dump instructions %d -a -f --raw' % i)",
            "breakpoint delete 2",
            // The workers end while traced; the main thread goes on to exit.
            "b exit",
            "c",
            "process plugin packet monitor trace status",
            "thread trace dump instructions -c 4",
            "c",
        ],
    );
    let (main_bp, work_bp) = (breakpoint_address(&out, 1), breakpoint_address(&out, 2));
    let truth = ground_truth(&program, &[]);
    let (at_work, after) = out.split_once("stop reason = breakpoint 3.1").unwrap_or_else(|| panic!("stopped at exit:\n{out}"));
    // `thread list`'s lines: "thread #N: tid = T, 0x…".
    let listed = at_work.lines().filter(|l| l.contains("thread #") && l.contains(": tid = ") && l.contains(", 0x")).count();
    let dumps = raw_dumps(at_work);
    assert!(dumps.len() >= 2, "the main thread and at least one worker:\n{out}");
    assert_eq!(dumps.len(), listed, "every thread listed is dumped\n{out}");
    for (tid, (addresses, errors)) in &dumps {
        assert!(errors.is_empty(), "thread {tid}: {errors:?}\n{out}");
        if addresses.is_empty() {
            // A new thread caught at its first instruction (its clone
            // returning in the child) while the other threads stopped: it
            // is one of the program's threads, with nothing run yet.
            let line = at_work.lines().find(|l| l.contains(&format!("tid = {tid}, "))).unwrap_or_else(|| panic!("thread {tid} listed:\n{out}"));
            assert!(line.contains("`__clone3 + ") || line.contains("`clone3 + "), "thread {tid} traced, or at its first instruction: {line}\n{out}");
            continue;
        }
        if addresses[0] == main_bp {
            // Stopped wherever it was when a worker hit the breakpoint: a
            // prefix of its own history from the first breakpoint.
            // Exactly up to the first return into main's loop (the first
            // `pthread_create`, its clone included): beyond it the path
            // depends on which workers have exited by then (glibc walks
            // its stack cache), which differs from run to run.
            let start = truth[0].iter().position(|&a| a == main_bp).unwrap();
            let own = &truth[0][start..];
            let in_loop = |a: u64| a + 0x20 >= main_bp && a < main_bp + 0x60;
            let first_call_done = (1..own.len()).find(|&i| in_loop(own[i]) && !in_loop(own[i - 1])).expect("main's loop resumes");
            let n = addresses.len().min(first_call_done + 1);
            assert!(n > 100, "main thread {tid} traced through pthread_create: {n}");
            assert_eq!(addresses[..n], own[..n], "main thread {tid}");
        } else {
            // A worker, traced from its first instruction: the first worker's
            // way there is every worker's.
            let worker = &truth[1];
            assert!(addresses.len() <= worker.len(), "worker {tid}");
            assert_eq!(addresses[..], worker[..addresses.len()], "worker {tid}");
        }
    }
    let stopped_worker = dumps.values().any(|(a, _)| a.first().is_some_and(|&first| first != main_bp) && truth[1].get(a.len()) == Some(&work_bp));
    assert!(stopped_worker, "a worker's trace ends at the breakpoint in work:\n{out}");
    // The workers' traces went with them; the main thread's goes on.
    let main_tid = dumps.iter().find(|(_, (a, _))| a.first() == Some(&main_bp)).map(|(tid, _)| *tid).expect("the main thread dumped");
    let traced: Vec<&str> = after.lines().filter(|l| l.starts_with("thread ") && l.contains("-byte trace")).collect();
    assert_eq!(traced.len(), 1, "only the main thread is traced after the workers exited:\n{after}");
    assert!(traced[0].starts_with(&format!("thread {main_tid}: ")), "{after}");
    let dump = after.split_once("thread trace dump instructions -c 4").and_then(|(_, rest)| rest.split_once("(lldb) c")).map(|(dump, _)| dump);
    let dump = dump.unwrap_or_else(|| panic!("the main thread's dump at exit:\n{after}"));
    assert!(dump.contains("`main + ") && !dump.contains("error"), "{dump}");
    assert!(out.contains("exited with status = "), "the program ends while traced:\n{out}");
}

#[test]
fn a_small_ring_keeps_the_newest_stretch_from_a_sync_point() {
    if !tools() {
        return;
    }
    let program = program("ring_filler", &["-O0"]);
    let out = lldb_with_args(&program, &["2000"], &["b main", "c", "process trace start -s 4096", "b done", "c", "thread trace dump instructions -a -f --raw", "c"]);
    let (from, to) = (breakpoint_address(&out, 1), breakpoint_address(&out, 2));
    let truth = ground_truth(&program, &["2000"]);
    let whole = stretch(&truth[0], from, to);
    let dumps = raw_dumps(&out);
    let (addresses, errors) = dumps.values().next().unwrap_or_else(|| panic!("no dump:\n{out}"));
    assert!(errors.is_empty(), "error items: {errors:?}");
    assert!(whole.len() > addresses.len() * 3 / 2, "the ring dropped the older part: {} of {}", addresses.len(), whole.len());
    assert!(addresses.len() > 5000, "a 4 KiB ring holds more than {} instructions", addresses.len());
    assert!(whole.ends_with(addresses), "the dump is the stretch's newest part");
}

/// A reply body with the protocol's escapes (`}` x → x ^ 0x20) undone.
fn unescaped(body: &str) -> String {
    let mut out = Vec::new();
    let mut bytes = body.bytes();
    while let Some(b) = bytes.next() {
        out.push(if b == b'}' { bytes.next().unwrap() ^ 0x20 } else { b });
    }
    String::from_utf8(out).unwrap()
}

/// Raw packets: what a bad request is answered, and that the session goes on.
#[test]
fn bad_trace_requests_get_error_replies() {
    let program = program("debuggee", &["-O0"]);
    let (stub, port) = start_stub(&program);
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    assert_eq!(exchange(&mut stream, "QStartNoAckMode"), "OK");
    let text = |reply: &str| -> String {
        let hex = reply.split_once(';').map(|(_, h)| h).unwrap_or_else(|| panic!("an error with text expected: {reply}"));
        let bytes: Vec<u8> = (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap()).collect();
        String::from_utf8(bytes).unwrap()
    };
    let trace = |stream: &mut TcpStream, packet: &str, json: &str| {
        // `}` is escaped on the wire both ways, as LLDB sends it.
        let escaped = json.replace('}', "}]");
        unescaped(&exchange(stream, &format!("{packet}:{escaped}")))
    };
    let supported = exchange(&mut stream, "jLLDBTraceSupported");
    assert!(supported.contains("\"name\":\"intel-pt\""), "{supported}");
    for (json, message) in [
        (r#"{"type":"intel-pt","iptTraceSize":5000,"enableTsc":false}"#, "The intel pt trace size must be a power of 2 greater than or equal to 4096 (2^12) bytes. It was 5000."),
        (r#"{"type":"intel-pt","iptTraceSize":2048,"enableTsc":false}"#, "The intel pt trace size must be a power of 2 greater than or equal to 4096 (2^12) bytes. It was 2048."),
        (r#"{"type":"intel-pt","iptTraceSize":2147483648,"enableTsc":false}"#, "over retrace-stub's limit of 1073741824 bytes"),
        (r#"{"type":"intel-pt","iptTraceSize":4096,"enableTsc":false,"psbPeriod":9}"#, "Invalid psb_period. Valid values are: 0, 1, 2, 3, 4, 5, 6, 7."),
        (r#"{"type":"intel-pt","iptTraceSize":4096,"enableTsc":false,"perCpuTracing":true,"tids":null}"#, "Per-cpu tracing is not supported"),
        (r#"{"type":"intel-pt","enableTsc":false}"#, "missing field `iptTraceSize`"),
        (r#"{"type":"intel-pt","iptTraceSize":4096"#, "malformed jLLDBTraceStart request"),
        (r#"{"type":"bts","iptTraceSize":4096,"enableTsc":false}"#, "Unsupported tracing type 'bts'"),
        (r#"{"type":"intel-pt","iptTraceSize":4096,"enableTsc":false,"tids":[999999999]}"#, "Thread 999999999 not found"),
    ] {
        let reply = trace(&mut stream, "jLLDBTraceStart", json);
        assert!(reply.starts_with("E"), "{json}: {reply}");
        assert!(text(&reply).contains(message), "{json}: {:?}", text(&reply));
    }
    let reply = trace(&mut stream, "jLLDBTraceGetBinaryData", r#"{"type":"intel-pt","kind":"iptTrace","tid":1,"cpuId":null}"#);
    assert_eq!(text(&reply), "Thread 1 not currently traced");
    let reply = trace(&mut stream, "jLLDBTraceGetBinaryData", r#"{"type":"intel-pt","kind":"perfContextSwitchTrace","tid":null,"cpuId":null}"#);
    assert_eq!(text(&reply), "Unsupported trace binary data kind: perfContextSwitchTrace");
    // Process tracing, then again: refused; the state lists the thread.
    let start = r#"{"type":"intel-pt","iptTraceSize":8192,"enableTsc":true,"processBufferSizeLimit":5242880,"tids":null}"#;
    assert_eq!(trace(&mut stream, "jLLDBTraceStart", start), "OK");
    assert_eq!(text(&trace(&mut stream, "jLLDBTraceStart", start)), "Process currently traced. Stop process tracing first");
    let state = trace(&mut stream, "jLLDBTraceGetState", r#"{"type":"intel-pt"}"#);
    let state: serde_json::Value = serde_json::from_str(&state).unwrap_or_else(|e| panic!("{e}: {state}"));
    assert_eq!(state["usingCgroupFiltering"], false);
    let threads = state["tracedThreads"].as_array().unwrap();
    assert_eq!(threads.len(), 1, "{state}");
    assert_eq!(threads[0]["binaryData"][0]["size"], 8192);
    let tid = threads[0]["tid"].as_u64().unwrap();
    let again = trace(&mut stream, "jLLDBTraceStart", &format!(r#"{{"type":"intel-pt","iptTraceSize":4096,"enableTsc":false,"tids":[{tid}]}}"#));
    assert_eq!(text(&again), format!("Thread with tid {tid} is currently traced. Stop tracing it first."));
    // Nothing ran yet: the ring is all padding, of the advertised size.
    stream.write_all(&framed(format!("jLLDBTraceGetBinaryData:{{\"cpuId\":null,\"kind\":\"iptTrace\",\"tid\":{tid},\"type\":\"intel-pt\"}}]").as_bytes())).unwrap();
    let data = read_packet(&mut stream).unwrap();
    assert_eq!(data.len(), 8192, "the advertised size");
    let cpuinfo = trace(&mut stream, "jLLDBTraceGetBinaryData", r#"{"type":"intel-pt","kind":"procfsCpuInfo","tid":null,"cpuId":null}"#);
    assert!(cpuinfo.contains("vendor_id\t: GenuineIntel") && cpuinfo.contains("cpu family\t: 6"), "{cpuinfo}");
    // The same through `monitor trace …` (text in `O` packets, for scripts
    // whose client prints replies as C strings): the ring in hex, the cpuinfo text.
    let monitor = |stream: &mut TcpStream, command: &str| -> String {
        let hexed: String = command.bytes().map(|b| format!("{b:02x}")).collect();
        stream.write_all(&framed(format!("qRcmd,{hexed}").as_bytes())).unwrap();
        let mut text = Vec::new();
        loop {
            let reply = read_packet(stream).unwrap();
            match reply.strip_prefix('O') {
                Some(hex) if reply != "OK" => text.extend((0..hex.len()).step_by(2).map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())),
                _ => {
                    assert_eq!(reply, "OK");
                    break;
                }
            }
        }
        String::from_utf8(text).unwrap()
    };
    assert_eq!(monitor(&mut stream, &format!("trace data {tid}")), "0".repeat(2 * 8192) + "\n");
    assert_eq!(monitor(&mut stream, "trace cpuinfo"), cpuinfo);
    assert_eq!(monitor(&mut stream, "trace data 1"), "error: Thread 1 not currently traced\n");
    let usage = "usage: trace data TID | trace cpuinfo | trace status [--json] | trace recorder auto|branch|step|intel-pt";
    assert_eq!(monitor(&mut stream, "trace data x"), format!("error: `x` is not a thread id; {usage}\n"));
    assert_eq!(monitor(&mut stream, "trace frobnicate"), format!("error: {usage}\n"));
    assert_eq!(
        monitor(&mut stream, "trace recorder fast"),
        "error: `fast` is not a trace recorder: auto, branch, step or intel-pt\n"
    );
    // The recorder of a running trace changes only between software ones.
    let status = monitor(&mut stream, "trace recorder intel-pt");
    assert!(status.starts_with("error: the traces being made use software Intel PT"), "{status}");
    let status: serde_json::Value = serde_json::from_str(&monitor(&mut stream, "trace status --json")).unwrap();
    assert_eq!(status["threads"][0]["tid"], tid);
    assert_eq!(status["threads"][0]["size"], 8192);
    assert_eq!(status["threads"][0]["instructions"], 0);
    assert_eq!(trace(&mut stream, "jLLDBTraceStop", r#"{"type":"intel-pt","tids":null}"#), "OK");
    let reply = trace(&mut stream, "jLLDBTraceStop", &format!(r#"{{"type":"intel-pt","tids":[{tid}]}}"#));
    assert_eq!(text(&reply), format!("Thread {tid} not currently traced"));
    // A thread that exists but is no longer traced has no trace data.
    let reply = trace(&mut stream, "jLLDBTraceGetBinaryData", &format!(r#"{{"type":"intel-pt","kind":"iptTrace","tid":{tid},"cpuId":null}}"#));
    assert_eq!(text(&reply), format!("Thread {tid} not currently traced"));
    assert_eq!(monitor(&mut stream, "trace status"), "recorder: none yet (auto when tracing starts)\nsince tracing started: 0 single steps, 0 block runs\nno thread is traced\n");
    // Malformed JSON in every trace packet.
    for packet in ["jLLDBTraceStop", "jLLDBTraceGetState", "jLLDBTraceGetBinaryData"] {
        let reply = trace(&mut stream, packet, r#"{"type":"intel-pt","#);
        assert!(text(&reply).starts_with(&format!("malformed {packet} request: ")), "{packet}: {reply}");
    }
    // The session goes on.
    assert!(exchange(&mut stream, "qfThreadInfo").starts_with('m'));
    drop(stream);
    let _ = wait_exit(stub);
}

/// A live trace saved with `trace save` loads in a fresh LLDB and in
/// `retrace dump` with the same instructions as the live dump.
#[test]
fn a_saved_live_trace_loads_in_lldb_and_retrace_as_it_was_dumped_live() {
    if !tools() {
        return;
    }
    let program = program("debuggee", &["-O0"]);
    let saved = Path::new(env!("CARGO_TARGET_TMPDIR")).join("live-trace").join("saved");
    let _ = std::fs::remove_dir_all(&saved);
    let save = format!("trace save {}", saved.display());
    let out = lldb(&program, &["b main", "c", "process trace start", "b add", "c", "thread trace dump instructions -a -f --raw", &save, "c"]);
    let live = raw_dumps(&out);
    let (addresses, _) = live.values().next().unwrap_or_else(|| panic!("{out}"));
    assert!(addresses.len() >= 5, "{out}");
    let bundle = saved.join("trace.json");
    assert!(bundle.exists(), "trace save wrote {}:\n{out}", bundle.display());

    let load = format!("trace load {}", bundle.display());
    let reloaded = Command::new("timeout").args(["60", "lldb-22", "-b", "-o", &load, "-o", "thread trace dump instructions -a -f --raw"]).output().unwrap();
    let reloaded = String::from_utf8_lossy(&reloaded.stdout).into_owned() + &String::from_utf8_lossy(&reloaded.stderr);
    let again = raw_dumps(&reloaded);
    assert_eq!(again.values().next().map(|(a, _)| a), Some(addresses), "trace load:\n{reloaded}");

    let ours = retrace().args(["dump", "instructions", "-a", "-f", "--raw"]).arg(&bundle).output().unwrap();
    let ours = String::from_utf8_lossy(&ours.stdout).into_owned() + &String::from_utf8_lossy(&ours.stderr);
    let ours = raw_dumps(&ours);
    assert_eq!(ours.values().next().map(|(a, _)| a), Some(addresses), "retrace dump");
}

/// Runs lldb-22 against `retrace-stub --trace-with RECORDER` on `program`;
/// `sysfs`: where the stub is to look for the `intel_pt` PMU.
fn lldb_tracing_with(recorder: &str, sysfs: Option<&Path>, program: &Path, commands: &[&str]) -> String {
    let mut stub = Command::new(env!("CARGO_BIN_EXE_retrace-stub"));
    stub.args(["--trace-with", recorder, "--listen", "127.0.0.1:0", "--"]).arg(program);
    if let Some(sysfs) = sysfs {
        stub.env("RETRACE_INTEL_PT_SYSFS", sysfs);
    }
    lldb_against(stub, program, commands)
}

/// The numbers `monitor trace status` gave, in order: single steps, block
/// runs, then the instructions of each thread.
fn trace_status_counts(out: &str) -> Vec<Vec<u64>> {
    out.lines()
        .filter(|line| line.starts_with("since tracing started: ") || (line.starts_with("thread ") && line.contains("-byte trace")))
        .map(|line| {
            let numbers: Vec<u64> = line.split(|c: char| !c.is_ascii_digit()).filter_map(|w| w.parse().ok()).collect();
            if line.starts_with("thread ") {
                vec![numbers[2]]
            } else {
                numbers
            }
        })
        .collect()
}

/// A trace started, stopped, the program run untraced, a trace started
/// again: the dumps hold exactly the two traced stretches, with either
/// software recorder, and `monitor trace status` shows how each ran
/// (`step` single-steps every instruction, `branch` runs blocks).
fn trace_stop_and_restart(recorder: &str) -> ([u64; 2], Vec<u64>, String) {
    // No output: a ground truth whose stdout differs takes the same path.
    let program = program("recursion", &["-O2", "-static"]);
    let out = lldb_tracing_with(
        recorder,
        None,
        &program,
        &[
            "b main",
            "c",
            "process trace start",
            "b fib",
            "c",
            "thread trace dump instructions -a -f --raw",
            "process trace stop",
            "breakpoint delete 2",
            "b depth",
            // Untraced: every call of fib.
            "c",
            "process trace start -s 1MiB",
            // Through depth's loop and exit's handlers.
            "b _exit",
            "c",
            "thread trace dump instructions -a -f --raw",
            "process plugin packet monitor trace status",
            "process trace stop",
            "c",
        ],
    );
    let at = |n| breakpoint_address(&out, n);
    assert!(out.contains("stop reason = breakpoint 3.1"), "{out}");
    let truth = ground_truth(&program, &[]);
    let mut expected = stretch(&truth[0], at(1), at(2)).to_vec();
    let second = stretch(&truth[0], at(3), at(4));
    expected.extend_from_slice(second);
    let dumps = raw_dumps(&out);
    assert_eq!(dumps.len(), 1, "one thread dumped:\n{out}");
    let (addresses, errors) = dumps.values().next().unwrap();
    assert!(errors.is_empty(), "error items: {errors:?}\n{out}");
    assert_eq!(addresses.len(), expected.len(), "the two traced stretches, nothing of the untraced one\n{out}");
    assert_eq!(*addresses, expected);
    assert!(out.contains("exited with status = "), "{out}");
    let counts = trace_status_counts(&out);
    assert_eq!(counts.len(), 2, "monitor trace status:\n{out}");
    assert_eq!(counts[1], [second.len() as u64], "instructions the status counts for the second trace:\n{out}");
    assert!(out.contains("thread ") && out.contains(": 1048576-byte trace"), "{out}");
    let [steps, blocks] = counts[0][..] else { panic!("steps and blocks:\n{out}") };
    ([steps, blocks], second.to_vec(), out)
}

#[test]
fn a_trace_stopped_and_started_again_holds_the_traced_stretches_only_branch_recorder() {
    if !tools() {
        return;
    }
    let ([steps, blocks], second, out) = trace_stop_and_restart("branch");
    assert!(out.contains("recorder: software Intel PT, stops at branches (branch)"), "{out}");
    assert!(blocks > 0, "branch runs blocks:\n{out}");
    assert!(steps < second.len() as u64 / 2, "branch single-steps few of the {} instructions: {steps}\n{out}", second.len());
}

#[test]
fn a_trace_stopped_and_started_again_holds_the_traced_stretches_only_step_recorder() {
    if !tools() {
        return;
    }
    let ([steps, blocks], second, out) = trace_stop_and_restart("step");
    assert!(out.contains("recorder: software Intel PT, one single step per instruction (step)"), "{out}");
    assert_eq!(blocks, 0, "step runs no block:\n{out}");
    assert!(steps >= second.len() as u64, "step single-steps each of the {} instructions: {steps}\n{out}", second.len());
}

/// `--trace-with intel-pt` where the CPU has no Intel PT (this machine
/// class; a fake sysfs description elsewhere): `process trace start` is
/// refused with the reason, and the session goes on; `auto` records in
/// software and says why.
#[test]
fn the_cpus_intel_pt_absent_is_refused_with_the_reason_and_auto_falls_back() {
    if !tools() {
        return;
    }
    let program = program("debuggee", &["-O0"]);
    let absent = Path::new(env!("CARGO_TARGET_TMPDIR")).join("no-intel-pt");
    let _ = std::fs::remove_dir_all(&absent);
    // (A failing command ends LLDB's batch; one run through the script
    // interpreter does not.)
    let out = lldb_tracing_with(
        "intel-pt",
        Some(&absent),
        &program,
        &["b main", "c", "script lldb.debugger.HandleCommand('process trace start')", "b add", "c", "process plugin packet monitor trace status"],
    );
    let missing = absent.join("type");
    assert!(
        out.contains(&format!("error: no Intel PT on this machine ({} does not exist: an AMD CPU, or a VM without Intel PT); start retrace-stub with --trace-with branch to record in software", missing.display())),
        "{out}"
    );
    assert!(out.contains("recorder: none yet (intel-pt when tracing starts)"), "{out}");
    assert!(out.contains("stop reason = breakpoint 2.1"), "the session goes on:\n{out}");
    let out = lldb_tracing_with("auto", Some(&absent), &program, &["b main", "c", "process trace start", "b add", "c", "process plugin packet monitor trace status", "thread trace dump info"]);
    assert!(out.contains(&format!("recorder: software Intel PT, stops at branches (branch); not the CPU's Intel PT: no Intel PT on this machine ({} does not exist", missing.display())), "{out}");
    assert!(out.contains("Number of individual errors: 0"), "{out}");
    // The PMU described but no event opening (a bogus type): `auto` falls
    // back at the first thread, `intel-pt` refuses with the kernel's error.
    std::fs::create_dir_all(&absent).unwrap();
    std::fs::write(&missing, "4294967\n").unwrap();
    let out = lldb_tracing_with("intel-pt", Some(&absent), &program, &["b main", "c", "script lldb.debugger.HandleCommand('process trace start')"]);
    assert!(out.contains("error: Intel PT for thread ") && out.contains("perf_event_open(intel_pt): "), "{out}");
    let out = lldb_tracing_with("auto", Some(&absent), &program, &["b main", "c", "process trace start", "b add", "c", "process plugin packet monitor trace status"]);
    assert!(out.contains("recorder: software Intel PT, stops at branches (branch); not the CPU's Intel PT: Intel PT for thread "), "{out}");
}

/// Tracing stops and starts again; one thread of several is traced alone.
#[test]
fn tracing_stops_starts_again_and_follows_one_thread_of_several() {
    if !tools() {
        return;
    }
    let program = program("threads", &["-O0", "-pthread"]);
    let out = lldb(
        &program,
        &[
            "b main",
            "c",
            "process trace start",
            "process trace stop",
            "process trace start",
            "b work",
            "c",
            "process trace stop",
            "thread trace start 1",
            "c",
            "thread trace dump instructions 1 -a -f --raw",
            // The worker that stopped now is not traced (LLDB's error ends
            // the batch: this comes last).
            "thread trace dump instructions -c 3",
        ],
    );
    assert!(!out.contains("error: Process currently traced"), "{out}");
    let truth = ground_truth(&program, &[]);
    let dumps = raw_dumps(&out);
    let (main, errors) = dumps.values().next().unwrap_or_else(|| panic!("{out}"));
    assert!(errors.is_empty(), "{errors:?}");
    // The main thread, traced alone from the first worker's stop on. Its
    // path through pthread_create depends on how many workers have already
    // exited (`__nptl_nthreads == 1` takes another branch), which differs
    // between runs: every address must be one the main thread executes in
    // the single-step run, and the trace decodes with no error. (How much
    // it ran meanwhile is the scheduler's: under load it had created the
    // second worker before the first stopped, and ran 76 instructions.)
    assert!(!main.is_empty(), "{out}");
    let known: std::collections::HashSet<u64> = truth[0].iter().copied().collect();
    let stray: Vec<&u64> = main.iter().filter(|a| !known.contains(a)).collect();
    assert!(stray.is_empty(), "addresses the main thread never executes: {stray:x?}");
    assert!(out.trim_end().ends_with("error: thread not traced"), "the stopped worker is not traced:\n{out}");
}

/// `retrace record` of `program`'s first `stop` instructions into the
/// bundle `name`, loaded in a fresh lldb-22 that runs `command` on it; its
/// output.
fn recorded_and_loaded(program: &Path, stop: usize, name: &str, command: &str) -> String {
    let bundle = Path::new(env!("CARGO_TARGET_TMPDIR")).join("live-trace").join(name);
    let _ = std::fs::remove_dir_all(&bundle);
    let recorded = retrace()
        .args(["record", "--backend", "software", "--mode", "step", "--max-insns", &stop.to_string(), "-o"])
        .arg(&bundle)
        .arg("--")
        .arg(program)
        .output()
        .unwrap();
    assert!(bundle.join("trace.json").exists(), "{}", String::from_utf8_lossy(&recorded.stderr));
    let load = format!("trace load {}", bundle.join("trace.json").display());
    let loaded = Command::new("timeout").args(["60", "lldb-22", "-b", "-o", &load, "-o", command]).output().unwrap();
    String::from_utf8_lossy(&loaded.stdout).into_owned()
}

/// The symbolized dump of a live stretch reads as LLDB prints a `retrace
/// record` bundle of the same run stopped at the same instruction (item
/// ids aside: the bundle starts at the program's first instruction).
#[test]
fn the_symbolized_live_dump_reads_as_a_recorded_bundle_of_the_same_run() {
    if !tools() {
        return;
    }
    let program = program("recursion", &["-O2", "-static"]);
    let out = lldb(&program, &["b main", "c", "process trace start", "b depth", "c", "thread trace dump instructions -c 20", "c"]);
    let (from, to) = (breakpoint_address(&out, 1), breakpoint_address(&out, 2));
    let truth = ground_truth(&program, &[]);
    let start = truth[0].iter().position(|&a| a == from).unwrap();
    let stop = start + truth[0][start..].iter().position(|&a| a == to).unwrap();
    let loaded = recorded_and_loaded(&program, stop, "recorded", "thread trace dump instructions -c 20");
    // The dump's lines after its "thread #1: tid = …" line, ids dropped.
    let listing = |text: &str| -> Vec<String> {
        let after = text.split("thread trace dump instructions -c 20").nth(1).unwrap_or("");
        after
            .lines()
            .skip_while(|l| !l.starts_with("thread #"))
            .skip(1)
            .take_while(|l| l.starts_with("  "))
            .map(|l| match l.trim_start().split_once(": 0x") {
                Some((id, rest)) if id.parse::<u64>().is_ok() => format!("0x{rest}"),
                _ => l.to_string(),
            })
            .collect()
    };
    let live = listing(&out);
    assert!(live.len() >= 21, "20 instructions and their symbol lines:\n{out}");
    assert_eq!(live, listing(&loaded), "live:\n{out}\nrecorded:\n{loaded}");
}

/// `thread trace dump function-calls` of a live trace taken from the
/// program's first instruction to a breakpoint reads as LLDB prints it for
/// a `retrace record` bundle of the same instructions (the same ids: both
/// start at the first instruction).
#[test]
fn live_function_calls_read_as_a_recorded_bundle_of_the_same_stretch() {
    if !tools() {
        return;
    }
    let program = program("recursion", &["-O2", "-static"]);
    let out = lldb(&program, &["process trace start -s 4194304 --tsc", "b depth", "c", "thread trace dump function-calls", "c"]);
    let to = breakpoint_address(&out, 1);
    let truth = ground_truth(&program, &[]);
    let stop = truth[0].iter().position(|&a| a == to).unwrap();
    let loaded = recorded_and_loaded(&program, stop, "recorded-calls", "thread trace dump function-calls");
    // The call trees after the "thread #1: tid = …" line (tids differ);
    // both traces have timestamps (`--tsc`), so item ids agree too.
    let calls = |text: &str| -> Vec<String> {
        let after = text.split("thread trace dump function-calls").nth(1).unwrap_or("");
        after.lines().skip_while(|l| !l.starts_with("thread #")).skip(1).take_while(|l| !l.starts_with('(')).map(str::to_string).collect()
    };
    let live = calls(&out);
    // The breakpoint's instruction (depth's first) has not run.
    assert!(live.iter().any(|l| l.contains("recursion`fib")) && live.iter().any(|l| l.contains("recursion`main")), "a call tree through main and fib:\n{out}");
    assert_eq!(live, calls(&loaded), "live:\n{out}\nrecorded:\n{loaded}");
}

/// A new thread that would take the process's traces over their limit is
/// not traced, and the process stops saying so, as lldb-server does.
#[test]
fn a_thread_over_the_process_limit_stops_the_process_with_the_reason() {
    if !tools() {
        return;
    }
    let program = program("threads", &["-O0", "-pthread"]);
    // (lldb -b ends the batch at a stop of this kind.)
    let out = lldb(&program, &["b main", "c", "process trace start -s 4096 -l 5000", "c"]);
    let line = out.lines().find(|l| l.contains("stop reason = Thread ")).unwrap_or_else(|| panic!("{out}"));
    assert!(
        line.ends_with("can't be traced as the process trace size limit has been reached. Consider retracing with a higher limit."),
        "{line}"
    );
}

/// The number after `label` on its first line in `out`.
fn number_after(out: &str, label: &str) -> u64 {
    let rest = out.split_once(label).unwrap_or_else(|| panic!("no {label:?} in:\n{out}")).1;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().unwrap_or_else(|_| panic!("no number after {label:?} in:\n{out}"))
}

/// Stops that race each other while the stub stops every thread for one
/// of them: a breakpoint hit over and over in one thread (LLDB continues
/// past it by an ignore count), SIGUSR1 raised over and over in another
/// (passed on without a stop), the main thread creating and joining
/// threads. A clone whose ptrace event is met there is recorded to its end
/// (run freely, it left a gap: LLDB's "trace stream does not match query"
/// in the main thread's trace, every run before the fix), and a signal met
/// there is reported at the thread's next resume (dropped, the program
/// handled fewer signals than it raised).
#[test]
fn stops_racing_each_other_lose_neither_trace_nor_signal() {
    if !tools() {
        return;
    }
    let program = program("stop_races", &["-O2"]);
    let out = lldb_with_args(
        &program,
        &["40"],
        &[
            "b main",
            "c",
            "process trace start -s 1MiB",
            "process handle SIGUSR1 -s false -n false -p true",
            "b tick",
            "breakpoint modify -i 1000000 2",
            "b done",
            "c",
            "thread trace dump info 1",
            "target variable raised handled ticks",
            "c",
        ],
    );
    let (_, at_done) = out.split_once("stop reason = breakpoint 3.1").unwrap_or_else(|| panic!("stopped at done:\n{out}"));
    assert!(number_after(at_done, "Total number of trace items: ") > 10_000, "the main thread's trace through 40 thread creations:\n{at_done}");
    assert_eq!(number_after(at_done, "Number of individual errors: "), 0, "{at_done}");
    let (raised, handled) = (number_after(at_done, "raised = "), number_after(at_done, "handled = "));
    assert!(raised > 0, "{at_done}");
    assert_eq!(handled, raised, "every signal raised reached its handler");
    // The stops did race: the worker stopped at `tick` again and again (as
    // a hit, or caught there while another thread's stop was taken: then
    // LLDB steps it over without counting a hit, so its count is the
    // program's).
    assert!(number_after(at_done, "ticks = ") >= 5, "{at_done}");
    assert!(out.contains("exited with status = 0"), "{out}");
}
