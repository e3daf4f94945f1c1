//! GDB 13's branch tracing against the stub: `record btrace pt`, GDB's own
//! libipt decoding what the stub recorded, and GDB's replay of it. Judged
//! against a single-step log of the same program and against GDB's own
//! `record full` run natively on it (ASLR off in both, so addresses match).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

mod common;

use common::{exchange, gdb, gdb_breakpoint_address as breakpoint_address, printed_values, retrace, start_stub, wait_exit};
use retrace_collector::process::{launch, LaunchOptions};
use retrace_collector::ptrace_recorder::{record, RecordOptions, StepMode};
use retrace_tests::recordings::build;
use retrace_tests::tools::{require, which};

fn tools() -> bool {
    require("gcc", which("gcc").is_some()) && require("gdb", which("gdb").is_some())
}

fn program(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("gdb-btrace").join(name);
    build(name, &dir, &["-O0"])
}

/// The main thread's single-step log.
fn ground_truth(program: &Path) -> Vec<u64> {
    let tracee = launch(&LaunchOptions::new(program.as_os_str(), Vec::<&str>::new())).expect("launch");
    let options = RecordOptions { mode: StepMode::Step, keep_instruction_log: true, ..RecordOptions::default() };
    let recording = record(tracee, &options).expect("record");
    let log = recording.threads().next().unwrap().instruction_log.clone().unwrap();
    log
}

/// Reverse commands from `printf`'s line back to the start of the history,
/// each followed by the PC it reached.
const REVERSE: &[&str] = &[
    "p/x $pc",
    "reverse-next",
    "p/x $pc",
    "reverse-step",
    "p/x $pc",
    "reverse-stepi",
    "p/x $pc",
    "reverse-finish",
    "p/x $pc",
    // Forward through the history to its end.
    "continue",
    "p/x $pc",
    "break add",
    "reverse-continue",
    "p/x $pc",
    "reverse-continue",
    "p/x $pc",
];

#[test]
fn gdb_records_with_btrace_and_replays_where_record_full_does() {
    if !tools() {
        return;
    }
    let program = program("debuggee");
    // GDB's own recording, natively.
    let mut native = vec!["break main", "run", "record full", "break 9", "continue"];
    native.extend_from_slice(REVERSE);
    let native_out = gdb(&program, &native);
    let expected = printed_values(&native_out);
    assert_eq!(expected.len(), 8, "GDB's record full run:\n{native_out}");

    let (stub, port) = start_stub(&program);
    let target = format!("target remote 127.0.0.1:{port}");
    let mut remote = vec![target.as_str(), "break main", "continue", "record btrace pt", "break 9", "continue", "info record"];
    remote.extend(["record instruction-history 1,100000", "record function-call-history /ilc 1,100000"]);
    remote.extend_from_slice(REVERSE);
    remote.extend(["record stop", "continue"]);
    let out = gdb(&program, &remote);
    assert_eq!(wait_exit(stub), Some(0), "the stub ends with the program");

    // What GDB decoded is what ran.
    let (from, to) = (breakpoint_address(&out, 1), breakpoint_address(&out, 2));
    let truth = ground_truth(&program);
    let start = truth.iter().position(|&a| a == from).unwrap();
    let end = start + truth[start..].iter().position(|&a| a == to).unwrap();
    let stretch = &truth[start..end];
    assert!(out.contains(&format!("Recorded {} instructions in 3 functions (0 gaps)", stretch.len())), "{out}");
    let history: Vec<u64> = out
        .lines()
        .filter_map(|l| {
            let (index, rest) = l.split_once('\t')?;
            index.trim().parse::<u32>().ok()?;
            u64::from_str_radix(rest.trim().strip_prefix("0x")?.split_whitespace().next()?, 16).ok()
        })
        .collect();
    assert_eq!(history, stretch, "record instruction-history");
    for call in ["1\tmain\tinst 1,5\tat ", "2\t  add\tinst 6,16\tat ", "3\tmain\tinst 17,20\tat "] {
        assert!(out.contains(call), "function-call history line {call:?}:\n{out}");
    }

    // Replay lands where GDB's record full lands.
    assert_eq!(printed_values(&out), expected, "btrace replay vs record full:\n{out}");
    assert!(out.contains("Process record is stopped"), "{out}");
    assert!(out.contains("exited with code 061"), "forward debugging goes on after record stop:\n{out}");
}

#[test]
fn a_bad_btrace_read_is_refused_and_the_session_goes_on() {
    if !tools() {
        return;
    }
    let program = program("debuggee");
    let (stub, port) = start_stub(&program);
    let out = gdb(
        &program,
        &[
            &format!("target remote 127.0.0.1:{port}"),
            "maint packet qXfer:btrace:read:bogus:0,100",
            "maint packet qXfer:btrace:read:all:0,100",
            "maint packet Qbtrace:bts",
            "maint packet qXfer:btrace-conf:read::0,100",
            "record btrace pt",
            "maint packet qXfer:btrace-conf:read::0,100",
            "maint packet Qbtrace:pt",
            "record stop",
            "continue",
        ],
    );
    assert_eq!(wait_exit(stub), Some(0));
    let replies: Vec<&str> = out.lines().filter_map(|l| l.strip_prefix("received: ")).collect();
    assert_eq!(replies.len(), 6, "{out}");
    assert_eq!(replies[0], "\"E16\"", "a bad annex");
    assert!(replies[1].starts_with("\"E.Thread ") && replies[1].ends_with(" not currently traced\""), "{out}");
    assert!(replies[2].starts_with("\"E.Branch Trace Store is not supported"), "{out}");
    assert_eq!(replies[3], r#""l<btrace-conf version="1.0"/>""#, "untraced: no <pt/>, or GDB would start recording by itself");
    assert_eq!(replies[4], r#""l<btrace-conf version="1.0"><pt size="16384"/></btrace-conf>""#, "{out}");
    assert!(replies[5].contains("already traced"), "{out}");
    assert!(out.contains("exited with code 061"), "{out}");
}

/// GDB's function-call history of a stretch agrees with `retrace dump
/// function-calls` on the same stretch (saved from an LLDB session on the
/// stub): the same functions in the same order, each with as many
/// instructions.
#[test]
fn gdb_function_call_history_agrees_with_retrace_dump_function_calls() {
    if !tools() || !require("lldb-22", which("lldb-22").is_some()) {
        return;
    }
    let program = program("debuggee");
    let (stub, port) = start_stub(&program);
    let target = format!("target remote 127.0.0.1:{port}");
    let out = gdb(&program, &[&target, "break main", "continue", "record btrace pt", "break 9", "continue", "record function-call-history /ilc 1,100000", "kill"]);
    let _ = wait_exit(stub);
    // "N\t<indent>function\tinst A,B\tat FILE:L[,M]": GDB's last range ends
    // at the current instruction, which has not run; its lines are the
    // first and last of the segment.
    let mut gdb_segments: Vec<(String, usize, (u32, u32))> = out
        .lines()
        .filter_map(|l| {
            let mut fields = l.split('\t');
            fields.next()?.trim().parse::<u32>().ok()?;
            let function = fields.next()?.trim().to_string();
            let (a, b) = fields.next()?.strip_prefix("inst ")?.split_once(',')?;
            let lines = fields.next()?.strip_prefix("at ")?.rsplit_once(':')?.1;
            let lines = match lines.split_once(',') {
                Some((first, last)) => (first.parse().ok()?, last.trim().parse().ok()?),
                None => (lines.trim().parse().ok()?, lines.trim().parse().ok()?),
            };
            Some((function, b.trim().parse::<usize>().ok()? - a.parse::<usize>().ok()? + 1, lines))
        })
        .collect();
    assert_eq!(gdb_segments.len(), 3, "{out}");
    gdb_segments.last_mut().unwrap().1 -= 1;

    let saved = Path::new(env!("CARGO_TARGET_TMPDIR")).join("gdb-btrace").join("calls");
    let _ = std::fs::remove_dir_all(&saved);
    let (stub, port) = start_stub(&program);
    let lldb = Command::new("timeout")
        .args(["120", "lldb-22", "-b", "-o", &format!("gdb-remote {port}"), "-o", "b main", "-o", "c", "-o", "process trace start"])
        .args(["-o", "b debuggee.c:9", "-o", "c", "-o", &format!("trace save {}", saved.display()), "-o", "process kill"])
        .arg(&program)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let _ = wait_exit(stub);
    let bundle = saved.join("trace.json");
    assert!(bundle.exists(), "{}", String::from_utf8_lossy(&lldb.stdout));
    let calls = retrace().args(["dump", "function-calls"]).arg(&bundle).output().unwrap();
    let calls = String::from_utf8_lossy(&calls.stdout).into_owned();
    let raw = retrace().args(["dump", "instructions", "-a", "-f", "--raw"]).arg(&bundle).output().unwrap();
    let raw = String::from_utf8_lossy(&raw.stdout).into_owned();
    let instruction_ids: std::collections::BTreeSet<u64> = raw
        .lines()
        .filter_map(|l| l.trim().split_once(": 0x").and_then(|(id, _)| id.parse().ok()))
        .collect();
    // "<indent>module`function + off at file:l:c to l:c  [first, last]"
    let ours: Vec<(String, usize, (u32, u32))> = calls
        .lines()
        .filter_map(|l| {
            let (head, range) = l.trim().rsplit_once("  [")?;
            let (first, last) = range.strip_suffix(']')?.split_once(", ")?;
            let (first, last): (u64, u64) = (first.parse().ok()?, last.parse().ok()?);
            let function = head.split('`').nth(1)?.split(' ').next()?.to_string();
            let (from, to) = head.split_once(" at ")?.1.split_once(" to ")?;
            let lines = (from.split(':').nth(1)?.parse().ok()?, to.split(':').next()?.parse().ok()?);
            Some((function, instruction_ids.range(first..=last).count(), lines))
        })
        .collect();
    // GDB's last segment counts the current instruction's line too (the
    // breakpoint's, 9), which has not run: the last that ran is line 8's.
    let last = gdb_segments.last_mut().unwrap();
    assert_eq!(last.2 .1, 9, "{out}");
    last.2 .1 = 8;
    assert_eq!(ours.last().map(|segment| segment.2 .1), Some(8), "{calls}");
    assert_eq!(ours, gdb_segments, "retrace dump function-calls:\n{calls}\nGDB:\n{out}");
}

/// `qXfer:btrace:read:new` is the whole trace when it changed since the
/// thread's last read, else an empty document (gdbserver's answer, after
/// which GDB keeps the trace it has); `all` is always the whole trace.
/// Raw packets, so that no client reads in between.
#[test]
fn a_new_read_is_empty_until_the_trace_changes() {
    if !tools() {
        return;
    }
    let program = program("debuggee");
    let (stub, port) = start_stub(&program);
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream.set_read_timeout(Some(std::time::Duration::from_secs(20))).unwrap();
    assert_eq!(exchange(&mut stream, "QStartNoAckMode"), "OK");
    let stop = exchange(&mut stream, "?");
    let thread = stop.split("thread:").nth(1).and_then(|t| t.split(';').next()).unwrap_or_else(|| panic!("{stop}")).to_string();
    assert_eq!(exchange(&mut stream, &format!("Hg{thread}")), "OK");
    assert_eq!(exchange(&mut stream, "Qbtrace:pt"), "OK");
    let whole = r#"<btrace version="1.0"><pt><pt-config><cpu vendor="GenuineIntel" family="6" model="134" stepping="7"/></pt-config><raw>"#;
    let empty = r#"l<btrace version="1.0"/>"#;
    // The whole document, read in windows as GDB reads it.
    let read = |stream: &mut std::net::TcpStream, annex: &str| -> String {
        let mut document = String::new();
        loop {
            let reply = exchange(stream, &format!("qXfer:btrace:read:{annex}:{:x},100", document.len()));
            let (kind, text) = reply.split_at(1);
            if document.is_empty() && reply == empty {
                return reply;
            }
            document.push_str(text);
            match kind {
                "m" => continue,
                "l" => return document,
                _ => panic!("{reply}"),
            }
        }
    };
    let first = read(&mut stream, "new");
    assert!(first.starts_with(whole) && first.ends_with("</raw></pt></btrace>"), "a first read is the whole trace: {first}");
    assert_eq!(read(&mut stream, "new"), empty, "nothing ran since");
    assert_eq!(read(&mut stream, "all"), first, "`all` is the whole trace");
    let step = exchange(&mut stream, &format!("vCont;s:{thread}"));
    assert!(step.starts_with("T05"), "{step}");
    let second = read(&mut stream, "new");
    assert!(second.starts_with(whole) && second != first, "the step changed the trace: {second}");
    assert_eq!(read(&mut stream, "new"), empty);
    assert_eq!(read(&mut stream, "all"), second);
    drop(stream);
    let _ = wait_exit(stub);
}
