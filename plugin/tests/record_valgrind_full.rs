//! Full-state recordings under Valgrind (`--mode full`) against an
//! independent truth: GDB 13 attached to the same run through Valgrind's
//! own gdbserver (`vgdb`), which reads the registers and memory Valgrind
//! holds. At every stop (single steps from `main`, then breakpoint hits in
//! a loop) the registers and bytes the full-state stream gives for that
//! position must be GDB's, and none may be unknown.
//!
//! The steps run with `--vgdb=full` (precise registers at each
//! instruction); the breakpoint run with `--vgdb=yes`, where Valgrind
//! translates the program as it does without a debugger, so the tool's
//! helpers meet the same code as in a plain recording.

mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use retrace_collector::valgrind::{log_records, tool_folder, LogConverter};
use retrace_collector::pt_writer::DEFAULT_PSB_PERIOD;
use retrace_decoder::full_state::{piece, state_records, StateMachine, StateRecord};
use retrace_tests::tools::{require, which};

fn tools_present() -> bool {
    require("gcc", which("gcc").is_some())
        && require("gdb (Debian package gdb)", which("gdb").is_some())
        && require("valgrind (Debian package valgrind)", which("valgrind").is_some() && which("vgdb").is_some())
        && require("retrace built with Valgrind's headers", retrace_collector::valgrind::availability().is_ok())
}

/// GDB's Python: `steps N` single-steps N times, `hits N` continues N
/// times, each stop printing one `STOP` line: the registers (GDB's names,
/// hex), `xmm0`'s low half, 16 bytes at `rsp` and `buffer`'s 24 bytes.
const GDB_SCRIPT: &str = r#"
import gdb
REGS = ['rip','rax','rbx','rcx','rdx','rsi','rdi','rbp','rsp','r8','r9','r10','r11','r12','r13','r14','r15','eflags']
MASK = (1 << 64) - 1
def dump():
    f = gdb.selected_frame()
    vals = [int(f.read_register(r)) & MASK for r in REGS]
    xmm0 = int(gdb.parse_and_eval('$xmm0.v2_int64[0]')) & MASK
    inf = gdb.selected_inferior()
    stack = inf.read_memory(vals[8], 16).tobytes().hex()
    buf = inf.read_memory(int(gdb.parse_and_eval('(long)&buffer')), 24).tobytes().hex()
    print('STOP ' + ' '.join('%x' % v for v in vals) + ' %x %s %s' % (xmm0, stack, buf))
class Steps(gdb.Command):
    def __init__(self):
        super().__init__('steps', gdb.COMMAND_USER)
    def invoke(self, arg, tty):
        for _ in range(int(arg)):
            gdb.execute('stepi', to_string=True)
            dump()
class Hits(gdb.Command):
    def __init__(self):
        super().__init__('hits', gdb.COMMAND_USER)
    def invoke(self, arg, tty):
        for _ in range(int(arg)):
            gdb.execute('continue', to_string=True)
            dump()
Steps()
Hits()
"#;

/// One stop as GDB saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stop {
    pc: u64,
    /// rax … r15 in GDB's order, then eflags.
    registers: Vec<u64>,
    xmm0_low: u64,
    stack: Vec<u8>,
    buffer: Vec<u8>,
}

fn hex_bytes(text: &str) -> Vec<u8> {
    (0..text.len()).step_by(2).map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap()).collect()
}

fn parse_stops(out: &str) -> Vec<Stop> {
    out.lines()
        .filter_map(|line| line.strip_prefix("STOP "))
        .map(|line| {
            let fields: Vec<&str> = line.split(' ').collect();
            // rip, the 16 general registers, eflags; then the rest.
            let numbers: Vec<u64> = fields[..18].iter().map(|f| u64::from_str_radix(f, 16).unwrap()).collect();
            Stop { pc: numbers[0], registers: numbers[1..].to_vec(), xmm0_low: u64::from_str_radix(fields[18], 16).unwrap(), stack: hex_bytes(fields[19]), buffer: hex_bytes(fields[20]) }
        })
        .collect()
}

/// Runs `program` under Valgrind with retrace's tool in full mode and
/// GDB attached through vgdb running `commands`; returns GDB's stops and
/// the tool's log.
fn run_with_gdb(dir: &Path, program: &Path, vgdb: &str, commands: &[&str]) -> (Vec<Stop>, Vec<u8>) {
    let folder = tool_folder().expect("the tool");
    let prefix = dir.join("vgdb");
    let log = dir.join("log");
    let script = dir.join("stops.py");
    std::fs::write(&script, GDB_SCRIPT).unwrap();
    let mut valgrind = Command::new("valgrind")
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("VALGRIND_LIB", &folder)
        .args(["-q", "--run-libc-freeres=no", "--tool=retrace", "--retrace-full=yes"])
        .arg(format!("--retrace-out={}", log.display()))
        .arg(format!("--vgdb={vgdb}"))
        .arg("--vgdb-error=0")
        .arg(format!("--vgdb-prefix={}", prefix.display()))
        .arg(program)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run valgrind");
    // vgdb finds the process by its FIFOs.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while std::fs::read_dir(dir).unwrap().flatten().all(|e| !e.file_name().to_string_lossy().starts_with("vgdb-from-vgdb-to-")) {
        assert!(std::time::Instant::now() < deadline, "Valgrind's gdbserver did not start");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let mut gdb = Command::new("gdb");
    gdb.args(["-nx", "-batch"]).arg("-ex").arg(format!("source {}", script.display()));
    gdb.arg("-ex").arg(format!("target remote | vgdb --vgdb-prefix={}", prefix.display()));
    for command in commands {
        gdb.args(["-ex", command]);
    }
    let out = gdb.arg(program).stdin(Stdio::null()).output().expect("run gdb");
    let status = valgrind.wait().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(status.success(), "the program under Valgrind: {status}\n{text}");
    assert!(text.contains("exited normally"), "GDB did not see the program to its end:\n{text}");
    let logs: Vec<PathBuf> = std::fs::read_dir(dir).unwrap().flatten().map(|e| e.path()).filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("log.")).collect();
    assert_eq!(logs.len(), 1, "one log: {logs:?}");
    (parse_stops(&text), std::fs::read(&logs[0]).unwrap())
}

/// The log converted: the thread's instruction addresses, its tid and the
/// full-state stream.
fn convert(log: &[u8]) -> (Vec<u64>, u32, Vec<u8>) {
    let mut converter = LogConverter::new(DEFAULT_PSB_PERIOD, true).with_full_state(true);
    for record in log_records(log) {
        converter.feed(record.expect("an intact log")).expect("a log that converts");
    }
    let (image, undecodable) = converter.finish();
    assert_eq!(undecodable, 0);
    assert_eq!(image.threads.len(), 1);
    let thread = &image.threads[0];
    let stream = image.full_state.expect("a full-state stream");
    assert!(stream.stored.is_none());
    (thread.instruction_log.clone().unwrap(), thread.tid, stream.bytes)
}

/// Replays `stream` and checks every stop against it: the position of a
/// stop is the next step of the thread at the stop's address (a REP
/// iteration GDB stops in, at the same address as before, is skipped: the
/// trace counts the instruction once).
fn check_stops(what: &str, single_steps: bool, program: &Path, stops: &[Stop], instructions: &[u64], tid: u32, stream: &[u8], files: &HashMap<Vec<u8>, Vec<u8>>) -> usize {
    let buffer = symbol(program, "buffer");
    let mut records = state_records(stream).map(|r| r.expect("an intact stream")).peekable();
    let mut machine = StateMachine::new();
    let mut file = |path: &[u8], offset: u64, buf: &mut [u8]| {
        let Some(bytes) = files.get(path) else { return 0 };
        let from = (offset as usize).min(bytes.len());
        let n = buf.len().min(bytes.len() - from);
        buf[..n].copy_from_slice(&bytes[from..from + n]);
        n
    };
    let mut step = None;
    let mut last_pc = None;
    let mut checked = 0;
    for (i, stop) in stops.iter().enumerate() {
        if single_steps && last_pc == Some(stop.pc) {
            continue;
        }
        last_pc = Some(stop.pc);
        let from = step.map_or(0, |s| s + 1);
        let step = *step.insert(from + instructions[from..].iter().position(|&a| a == stop.pc).unwrap_or_else(|| panic!("{what}: stop {i} at {:#x} is not in the trace after step {from}", stop.pc)));
        // The state before step `step`: every record that took effect
        // by then.
        while let Some((record_tid, record)) = records.peek() {
            if *record_tid != 0 && (*record_tid != tid || record.at() > step as u64) {
                break;
            }
            machine.apply(*record_tid, record, &mut file);
            records.next();
        }
        let ours: Vec<Option<u64>> = piece::GENERAL.chain([piece::RFLAGS]).map(|p| machine.register(tid, p)).collect();
        let theirs: Vec<Option<u64>> = stop.registers.iter().map(|&v| Some(v)).collect();
        let names = ["rax", "rbx", "rcx", "rdx", "rsi", "rdi", "rbp", "rsp", "r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15", "eflags"];
        for ((name, ours), theirs) in names.iter().zip(&ours).zip(&theirs) {
            assert_eq!(ours, theirs, "{what}: stop {i} (step {step}, pc {:#x}): {name} ours {ours:x?} / GDB's {theirs:x?}", stop.pc);
        }
        assert_eq!(machine.register(tid, piece::xmm(0)), Some(stop.xmm0_low), "{what}: stop {i} (step {step}, pc {:#x}): xmm0", stop.pc);
        let rsp = stop.registers[7];
        let mut bytes = vec![0; 16];
        assert_eq!(machine.read(rsp, &mut bytes), 16, "{what}: stop {i} (step {step}): the stack at {rsp:#x} is not all known");
        assert_eq!(bytes, stop.stack, "{what}: stop {i} (step {step}, pc {:#x}): 16 bytes at rsp", stop.pc);
        let mut bytes = vec![0; 24];
        assert_eq!(machine.read(buffer, &mut bytes), 24, "{what}: stop {i} (step {step}): buffer is not all known");
        assert_eq!(bytes, stop.buffer, "{what}: stop {i} (step {step}, pc {:#x}): buffer", stop.pc);
        checked += 1;
    }
    checked
}

/// The address of `name` in `program`.
fn symbol(program: &Path, name: &str) -> u64 {
    use object::{Object, ObjectSymbol};
    let data = std::fs::read(program).unwrap();
    let file = object::File::parse(&*data).unwrap();
    file.symbols().find(|s| s.name() == Ok(name)).unwrap_or_else(|| panic!("no {name}")).address()
}

/// The files the stream maps, read now (the bundle would keep copies).
fn mapped_files(stream: &[u8]) -> HashMap<Vec<u8>, Vec<u8>> {
    state_records(stream)
        .filter_map(|r| match r.ok()? {
            (_, StateRecord::FileMapped { path, .. }) => Some((path.to_vec(), std::fs::read(Path::new(std::str::from_utf8(path).ok()?)).ok()?)),
            _ => None,
        })
        .collect()
}

#[test]
fn registers_and_memory_at_single_steps_and_breakpoints_are_gdbs_through_vgdb() {
    if !tools_present() {
        return;
    }
    let dir = common::work_dir("record-valgrind-full", "steps");
    let program = common::build("full_state", &dir, &["-O0", "-static", "-no-pie"]);
    // Single steps from main: the prologue, pipe/write/read through the
    // C library and their system calls (the kernel's bytes in `buffer`),
    // into malloc's first call.
    let (stops, log) = run_with_gdb(&dir, &program, "full", &["break main", "continue", "steps 400", "delete", "continue"]);
    assert_eq!(stops.len(), 400, "GDB's single steps");
    let (instructions, tid, stream) = convert(&log);
    let files = mapped_files(&stream);
    let checked = check_stops("single steps", true, &program, &stops, &instructions, tid, &stream, &files);
    assert!(checked > 390, "{checked} stops compared");
    // The stream knows the bytes the kernel read into `buffer` once read
    // ran: the last stops see them.
    assert_eq!(&stops.last().unwrap().buffer[..18], b"retrace full state", "GDB went past read()");

    // Breakpoint hits in the loop, Valgrind translating as it does
    // without a debugger.
    let dir = common::work_dir("record-valgrind-full", "hits");
    let program = common::build("full_state", &dir, &["-O0", "-static", "-no-pie"]);
    let (stops, log) = run_with_gdb(&dir, &program, "yes", &["break full_state.c:37", "hits 31", "delete", "continue"]);
    assert_eq!(stops.len(), 31, "GDB's breakpoint hits");
    let (instructions, tid, stream) = convert(&log);
    let files = mapped_files(&stream);
    let checked = check_stops("breakpoint hits", false, &program, &stops, &instructions, tid, &stream, &files);
    assert_eq!(checked, 31);
}

#[test]
fn record_mode_full_writes_the_stream_into_the_bundle_and_other_modes_are_refused() {
    if !tools_present() {
        return;
    }
    let dir = common::work_dir("record-valgrind-full", "cli");
    let program = common::build("full_state", &dir, &["-O0", "-static", "-no-pie"]);
    let bundle = dir.join("bundle");
    let out = Command::new(env!("CARGO_BIN_EXE_retrace"))
        .args(["record", "--backend", "valgrind", "--mode", "full", "--json", "-o"])
        .arg(&bundle)
        .arg("--")
        .arg(&program)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let summary: serde_json::Value = serde_json::from_str(stderr.lines().last().unwrap()).unwrap();
    let description: serde_json::Value = serde_json::from_slice(&std::fs::read(bundle.join("trace.json")).unwrap()).unwrap();
    assert_eq!(description["retrace"]["fullState"], "state.rtstate");
    assert_eq!(description["retrace"]["mode"], "full");
    let stream = std::fs::read(bundle.join("state.rtstate")).unwrap();
    let records: Vec<_> = state_records(&stream).collect();
    assert!(records.iter().all(Result::is_ok), "the stream reads to its end");
    // The thread's last register record is at most one past its last step.
    let instructions = summary["instructions"].as_u64().unwrap();
    let last_at = records.iter().filter_map(|r| r.as_ref().ok()).filter(|(tid, _)| *tid != 0).map(|(_, r)| r.at()).max().unwrap();
    assert!(last_at <= instructions + 1 && last_at + 10 > instructions, "last record at {last_at} of {instructions} steps");
    let per_instruction = stream.len() as f64 / instructions as f64;
    eprintln!("{} bytes for {instructions} instructions: {per_instruction:.2} per instruction", stream.len());
    assert!(per_instruction <= 20.0, "{per_instruction:.2} bytes per instruction");

    let refused = Command::new(env!("CARGO_BIN_EXE_retrace"))
        .args(["record", "--backend", "valgrind", "--ptrace-stops", "step", "-o"])
        .arg(dir.join("refused"))
        .arg("--")
        .arg(&program)
        .output()
        .unwrap();
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--ptrace-stops is for --backend ptrace"), "{}", String::from_utf8_lossy(&refused.stderr));
}
