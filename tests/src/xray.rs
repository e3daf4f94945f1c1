//! XRay test support: a multi-threaded C++ program built with
//! `clang++-22 -fxray-instrument`, run in FDR and basic mode; LLVM's own
//! reading of a log (`llvm-xray-22 convert --output-format=yaml`, `account`,
//! `extract`); and a writer of synthetic logs (FDR v1–v5, basic v1–v3) from
//! the format description, for versions no current compiler writes.
//!
//! The writer takes a description of what happened ([`Event`]s per buffer)
//! and also computes the records a reader must return ([`Expected`]) from
//! that description, never from retrace's reader.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The C++ program: four workers (recursion, an argument-logging function,
/// a tail call, a custom event each) and main; `fdr` as first argument
/// drives FDR mode through the log interface, otherwise basic mode runs
/// from the environment.
pub const PROGRAM: &str = r#"
#include <xray/xray_log_interface.h>
#include <xray/xray_interface.h>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

__attribute__((noinline)) unsigned fib(unsigned n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }

[[clang::xray_always_instrument, clang::xray_log_args(1)]] __attribute__((noinline))
unsigned long with_arg(unsigned long x) { asm volatile(""); return x * 3 + 1; }

__attribute__((noinline)) unsigned leaf(unsigned x) { asm volatile(""); return x * 7; }
__attribute__((noinline)) unsigned tail_caller(unsigned x) { return leaf(x + 1); }

__attribute__((noinline)) void emit_event(int worker) {
  char text[64];
  int n = snprintf(text, sizeof text, "custom-event from worker %d", worker);
  __xray_customevent(text, n);
}

__attribute__((noinline)) void worker(int id) {
  unsigned long sum = 0;
  for (int i = 0; i < 3; i++) {
    sum += fib(8 + id);
    sum += with_arg(i + 10 * id);
    sum += tail_caller(i);
  }
  emit_event(id);
  if (sum == 42) puts("unlikely");
}

int main(int argc, char **argv) {
  bool fdr = argc > 1 && !strcmp(argv[1], "fdr");
  if (fdr) {
    __xray_log_select_mode("xray-fdr");
    if (__xray_log_init_mode("xray-fdr", "buffer_size=4096:buffer_max=256:func_duration_threshold_us=0") != XRAY_LOG_INITIALIZED)
      return 2;
    __xray_patch();
  }
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; i++) threads.emplace_back(worker, i);
  for (auto &t : threads) t.join();
  if (fdr) {
    __xray_log_finalize();
    __xray_log_flushLog();
  }
  return 0;
}
"#;

/// `clang++-22` and `llvm-xray-22`, if installed.
pub fn tools_available() -> bool {
    crate::tools::which("clang++-22").is_some() && crate::tools::which("llvm-xray-22").is_some()
}

/// Builds [`PROGRAM`] in `dir`; returns the binary.
pub fn build_program(dir: &Path) -> PathBuf {
    build(dir, "xray_workers", PROGRAM)
}

/// A program with typed events (`__xray_typedevent`, through a function
/// whose three arguments are already in place: the runtime's sled crashes
/// otherwise) and a custom event; FDR mode. compiler-rt 22 makes each typed
/// event's buffer extents 16 bytes short, so the last 48 bytes of records
/// are lost (for both readers). LLVM cannot read its instrumentation map
/// (typed-event sleds), only the log.
pub const TYPED_PROGRAM: &str = r#"
#include <xray/xray_log_interface.h>
#include <xray/xray_interface.h>
__attribute__((noinline)) void te(unsigned long type, const char *p, unsigned long n) { __xray_typedevent(type, p, n); }
__attribute__((noinline)) void ce(const char *p, unsigned long n) { __xray_customevent(p, n); }
__attribute__((noinline)) int leaf(int x) { asm volatile(""); return x + 1; }
int main(int argc, char **argv) {
  __xray_log_select_mode("xray-fdr");
  if (__xray_log_init_mode("xray-fdr", "buffer_size=16384:buffer_max=8:func_duration_threshold_us=0") != XRAY_LOG_INITIALIZED)
    return 2;
  __xray_patch();
  int s = 0;
  for (int i = 0; i < 3; i++) { te(42, "typed-A", 7); s += leaf(i); }
  ce("custom-B", 8);
  for (int i = 0; i < 5; i++) s += leaf(i);
  __xray_log_finalize();
  __xray_log_flushLog();
  return s == 1234;
}
"#;

/// Builds `source` as `dir/name` with XRay instrumentation of every function.
pub fn build(dir: &Path, name: &str, source_text: &str) -> PathBuf {
    let source = dir.join(format!("{name}.cpp"));
    std::fs::write(&source, source_text).expect("write source");
    let binary = dir.join(name);
    let status = Command::new("clang++-22")
        .args(["-O2", "-g", "-fxray-instrument", "-fxray-instruction-threshold=1", "-pthread", "-o"])
        .arg(&binary)
        .arg(&source)
        .status()
        .expect("run clang++-22");
    assert!(status.success(), "clang++-22 failed");
    binary
}

/// Runs a program of this module in `mode` ("fdr" or "basic") with logs
/// written to `dir`; returns the log file. [`PROGRAM`] is told `fdr`.
pub fn run_program(binary: &Path, dir: &Path, mode: &str) -> PathBuf {
    run_program_with(binary, dir, mode, if mode == "fdr" { &["fdr"] } else { &[] })
}

/// [`run_program`] with these arguments for the program.
pub fn run_program_with(binary: &Path, dir: &Path, mode: &str, args: &[&str]) -> PathBuf {
    let base = dir.join(format!("{mode}-log."));
    let options = format!("patch_premain=true xray_mode=xray-{mode} verbosity=0 xray_logfile_base={}", base.display());
    let mut command = Command::new(binary);
    command.env("XRAY_OPTIONS", options).env("XRAY_BASIC_OPTIONS", "func_duration_threshold_us=0").args(args);
    let output = command.output().expect("run the XRay program");
    assert!(output.status.success(), "{mode} run failed: {}", String::from_utf8_lossy(&output.stderr));
    let prefix = format!("{mode}-log.");
    let log = std::fs::read_dir(dir)
        .expect("read dir")
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .find(|path| path.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with(&prefix)));
    log.expect("the runtime wrote no log")
}

/// One record as `llvm-xray convert --output-format=yaml` prints it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct LlvmRecord {
    /// `thread:`.
    pub thread: u32,
    /// `process:`.
    pub process: u32,
    /// `kind:` (function-enter, function-exit, function-tail-exit,
    /// function-enter-arg, custom-event, typed-event).
    pub kind: String,
    /// `func-id:` (LLVM carries the previous record's id into events).
    pub function: i64,
    /// `tsc:`.
    pub tsc: u64,
    /// `cpu:`.
    pub cpu: u16,
    /// `args:`.
    pub args: Vec<u64>,
    /// `data:` (unquoted).
    pub data: String,
    /// `type:` (the event type for typed events; LLVM leaves it on the
    /// records after one).
    pub record_type: u16,
}

/// Runs `llvm-xray-22 convert --output-format=yaml` and parses its records.
pub fn llvm_records(log: &Path) -> Result<Vec<LlvmRecord>, String> {
    let output = Command::new("llvm-xray-22").args(["convert", "--output-format=yaml"]).arg(log).output().expect("run llvm-xray-22");
    if !output.status.success() {
        return Err(String::from_utf8_lossy(&output.stderr).into_owned());
    }
    let text = String::from_utf8_lossy(&output.stdout);
    Ok(text.lines().filter_map(|line| line.trim_start().strip_prefix("- { ")).map(parse_yaml_record).collect())
}

fn parse_yaml_record(line: &str) -> LlvmRecord {
    let body = line.strip_suffix(" }").unwrap_or(line);
    // `data:` is last and may contain anything.
    let (fields, data) = body.rsplit_once(", data: ").unwrap_or((body, ""));
    let data = data.strip_prefix('\'').and_then(|d| d.strip_suffix('\'')).unwrap_or(data).replace("''", "'");
    let mut record = LlvmRecord { thread: 0, process: 0, kind: String::new(), function: 0, tsc: 0, cpu: 0, args: Vec::new(), data, record_type: 0 };
    let mut rest = fields;
    while !rest.is_empty() {
        let (key, after) = rest.split_once(": ").expect("key: value");
        let (value, next) = if let Some(list) = after.strip_prefix('[') {
            let (inside, next) = list.split_once(']').expect("closing ]");
            (inside.trim(), next.strip_prefix(", ").unwrap_or(next))
        } else if let Some(quoted) = after.strip_prefix('\'') {
            let close = quoted.find('\'').map(|i| i + 2).unwrap_or(after.len());
            (&after[..close], after[close..].strip_prefix(", ").unwrap_or(""))
        } else {
            after.split_once(", ").unwrap_or((after, ""))
        };
        match key {
            "type" => record.record_type = value.parse().expect("type"),
            "func-id" => record.function = value.parse().expect("func-id"),
            "cpu" => record.cpu = value.parse().expect("cpu"),
            "thread" => record.thread = value.parse().expect("thread"),
            "process" => record.process = value.parse().expect("process"),
            "kind" => record.kind = value.to_string(),
            "tsc" => record.tsc = value.parse().expect("tsc"),
            "args" => record.args = value.split(", ").filter(|v| !v.is_empty()).map(|v| v.parse().expect("arg")).collect(),
            _ => {}
        }
        rest = next;
    }
    record
}

/// `llvm-xray-22 account -d -k --format=csv`: per function id, the number
/// of calls LLVM accounted.
pub fn llvm_account_counts(log: &Path, binary: &Path) -> BTreeMap<i64, u64> {
    let output = Command::new("llvm-xray-22")
        .args(["account", "-d", "-k", "--format=csv", "--instr_map"])
        .arg(binary)
        .arg(log)
        .output()
        .expect("run llvm-xray-22 account");
    assert!(output.status.success(), "llvm-xray account: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .skip(1)
        .map(|line| {
            let mut fields = line.split(',');
            let id = fields.next().and_then(|f| f.parse().ok()).expect("funcid");
            let count = fields.next().and_then(|f| f.parse().ok()).expect("count");
            (id, count)
        })
        .collect()
}

/// `llvm-xray-22 extract --symbolize`: function id → (entry address, name).
pub fn llvm_function_names(binary: &Path) -> BTreeMap<u32, (u64, String)> {
    let output = Command::new("llvm-xray-22").args(["extract", "--symbolize"]).arg(binary).output().expect("run llvm-xray-22 extract");
    assert!(output.status.success(), "llvm-xray extract: {}", String::from_utf8_lossy(&output.stderr));
    let mut names = BTreeMap::new();
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        let Some(body) = line.trim_start().strip_prefix("- { id: ") else { continue };
        let id: u32 = body.split(',').next().and_then(|v| v.parse().ok()).expect("id");
        let function = body.split("function: 0x").nth(1).and_then(|v| v.split(',').next()).and_then(|v| u64::from_str_radix(v, 16).ok());
        let name = body.split("function-name: ").nth(1).map(|v| v.rsplit_once(", version").map(|(n, _)| n).unwrap_or(v));
        if let (Some(function), Some(name)) = (function, name) {
            let name = name.trim().trim_matches('\'').replace("''", "'");
            names.insert(id, (function, name));
        }
    }
    names
}

/// Copies one thread's buffers (FDR) or records (basic) of `log` into a
/// log of its own, byte for byte: LLVM's accountant then sees one thread
/// (with several it rejects every record older than the first it read).
pub fn single_thread_log(log: &[u8], tid: u32) -> Vec<u8> {
    let mut out = log[..32].to_vec();
    let fdr = u16::from_le_bytes([log[2], log[3]]) == 1;
    let mut at = 32;
    if fdr {
        // v3+: BufferExtents, then `size` bytes starting with NewBuffer.
        while at + 16 <= log.len() {
            assert_eq!(log[at], 0x0f, "BufferExtents expected at {at}");
            let size = u64::from_le_bytes(log[at + 1..at + 9].try_into().unwrap()) as usize;
            let end = (at + 16 + size).min(log.len());
            let buffer_tid = u32::from_le_bytes(log[at + 17..at + 21].try_into().unwrap());
            if buffer_tid == tid {
                out.extend_from_slice(&log[at..end]);
            }
            at = end;
        }
    } else {
        let mut keep_payload = false;
        for record in log[32..].chunks_exact(32) {
            let (kind, record_tid) = (u16::from_le_bytes([record[0], record[1]]), u32::from_le_bytes(record[16..20].try_into().unwrap()));
            let keep = if kind == 1 { keep_payload } else { record_tid == tid };
            keep_payload = keep;
            if keep {
                out.extend_from_slice(record);
            }
        }
    }
    out
}

/// The threads of an FDR v3+ log in the order their first buffer appears.
pub fn thread_order(log: &[u8]) -> Vec<u32> {
    let mut order = Vec::new();
    let mut at = 32;
    while at + 32 <= log.len() {
        let size = u64::from_le_bytes(log[at + 1..at + 9].try_into().unwrap()) as usize;
        let tid = u32::from_le_bytes(log[at + 17..at + 21].try_into().unwrap());
        if !order.contains(&tid) {
            order.push(tid);
        }
        at += 16 + size;
    }
    order
}

/// What happens in a synthetic buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// Enter (kind 0), exit (1), tail exit (2) or enter with arguments (3)
    /// at an absolute TSC.
    Function {
        /// Record kind 0–3.
        kind: u8,
        /// Function id.
        id: u32,
        /// Absolute TSC.
        tsc: u64,
        /// Arguments (kind 3).
        args: Vec<u64>,
    },
    /// The thread moves to a CPU (writes NewCPUId; the running TSC restarts).
    Cpu {
        /// CPU.
        cpu: u16,
        /// TSC.
        tsc: u64,
    },
    /// TSCWrap.
    Wrap {
        /// TSC.
        tsc: u64,
    },
    /// A custom event.
    Custom {
        /// TSC.
        tsc: u64,
        /// The CPU a v4 event records (v4 events carry one of their own;
        /// other versions' events happen on the thread's current CPU).
        cpu: u16,
        /// Payload.
        data: Vec<u8>,
    },
    /// A typed event (v5 writers).
    Typed {
        /// TSC.
        tsc: u64,
        /// Type.
        event_type: u16,
        /// Payload.
        data: Vec<u8>,
    },
}

/// One thread buffer of a synthetic log.
#[derive(Debug, Clone)]
pub struct Buffer {
    /// Thread.
    pub tid: u32,
    /// Process.
    pub pid: u32,
    /// CPU and TSC of the buffer's NewCPUId.
    pub cpu: u16,
    /// TSC of the NewCPUId.
    pub tsc: u64,
    /// What happens.
    pub events: Vec<Event>,
}

/// A record a reader must return: (tid, pid, kind, function id, tsc, cpu,
/// args, data, event type).
pub type Expected = (u32, Option<u32>, &'static str, u32, u64, u16, Vec<u64>, Vec<u8>, Option<u16>);

const KINDS: [&str; 4] = ["function-enter", "function-exit", "function-tail-exit", "function-enter-arg"];

/// The records `buffers` describe, in order, as a reader of a log of
/// `version` must return them (v1–v2 logs carry no process id; v1–v4
/// custom events do not move the running TSC, so the writer keeps it).
pub fn expected_records(buffers: &[Buffer], version: u16) -> Vec<Expected> {
    let mut out = Vec::new();
    for buffer in buffers {
        let pid = (version >= 3).then_some(buffer.pid);
        let mut cpu = buffer.cpu;
        for event in &buffer.events {
            match event {
                Event::Function { kind, id, tsc, args } => {
                    out.push((buffer.tid, pid, KINDS[*kind as usize], *id, *tsc, cpu, args.clone(), Vec::new(), None))
                }
                Event::Cpu { cpu: new, .. } => cpu = *new,
                Event::Wrap { .. } => {}
                Event::Custom { tsc, cpu: own, data } => {
                    let cpu = if version == 4 { *own } else { cpu };
                    out.push((buffer.tid, pid, "custom-event", 0, *tsc, cpu, Vec::new(), data.clone(), None))
                }
                Event::Typed { tsc, event_type, data } => {
                    out.push((buffer.tid, pid, "typed-event", 0, *tsc, cpu, Vec::new(), data.clone(), Some(*event_type)))
                }
            }
        }
    }
    out
}

fn metadata(kind: u8, body: &[u8]) -> Vec<u8> {
    let mut record = vec![kind << 1 | 1];
    record.extend_from_slice(body);
    // Unused bytes are uninitialised in real logs.
    record.resize(16, 0xaa);
    record
}

/// An FDR log of `version` (1–5), little-endian, with thread buffers of
/// `buffer_size` bytes (v1 pads each buffer to it).
pub fn write_fdr(version: u16, buffer_size: u64, buffers: &[Buffer]) -> Vec<u8> {
    let mut log = Vec::new();
    log.extend_from_slice(&version.to_le_bytes());
    log.extend_from_slice(&1u16.to_le_bytes());
    log.extend_from_slice(&3u32.to_le_bytes());
    log.extend_from_slice(&2_000_000_000u64.to_le_bytes());
    log.extend_from_slice(&buffer_size.to_le_bytes());
    log.extend_from_slice(&[0; 8]);
    for buffer in buffers {
        let mut records = Vec::new();
        records.extend(metadata(0, &buffer.tid.to_le_bytes()));
        records.extend(metadata(4, &[7, 0, 0, 0, 0, 0, 0, 0, 0x10, 0x27, 0, 0]));
        if version >= 3 {
            records.extend(metadata(9, &buffer.pid.to_le_bytes()));
        }
        let cpu_record = |cpu: u16, tsc: u64| {
            let mut body = cpu.to_le_bytes().to_vec();
            body.extend_from_slice(&tsc.to_le_bytes());
            metadata(2, &body)
        };
        records.extend(cpu_record(buffer.cpu, buffer.tsc));
        let mut running = buffer.tsc;
        for event in &buffer.events {
            match event {
                Event::Function { kind, id, tsc, args } => {
                    let delta = u32::try_from(tsc - running).expect("delta fits; add a Wrap");
                    running = *tsc;
                    records.extend_from_slice(&(id << 4 | u32::from(*kind) << 1).to_le_bytes());
                    records.extend_from_slice(&delta.to_le_bytes());
                    for arg in args {
                        records.extend(metadata(6, &arg.to_le_bytes()));
                    }
                }
                Event::Cpu { cpu: new, tsc } => {
                    records.extend(cpu_record(*new, *tsc));
                    running = *tsc;
                }
                Event::Wrap { tsc } => {
                    records.extend(metadata(3, &tsc.to_le_bytes()));
                    running = *tsc;
                }
                Event::Custom { tsc, cpu: own, data } => {
                    let mut body = (data.len() as i32).to_le_bytes().to_vec();
                    if version >= 5 {
                        body.extend_from_slice(&((tsc - running) as i32).to_le_bytes());
                        running = *tsc;
                    } else {
                        body.extend_from_slice(&tsc.to_le_bytes());
                        // v4 carries the CPU here; earlier writers left these
                        // bytes uninitialised (0xaa), which LLVM's reader
                        // takes for a CPU.
                        if version == 4 {
                            body.extend_from_slice(&own.to_le_bytes());
                        }
                    }
                    records.extend(metadata(5, &body));
                    records.extend_from_slice(data);
                }
                Event::Typed { tsc, event_type, data } => {
                    let mut body = (data.len() as i32).to_le_bytes().to_vec();
                    body.extend_from_slice(&((tsc - running) as i32).to_le_bytes());
                    body.extend_from_slice(&event_type.to_le_bytes());
                    running = *tsc;
                    records.extend(metadata(8, &body));
                    records.extend_from_slice(data);
                }
            }
        }
        match version {
            1 => {
                records.extend(metadata(1, &[]));
                assert!(records.len() as u64 <= buffer_size, "buffer too small");
                records.resize(buffer_size as usize, 0);
                log.extend(records);
            }
            _ => {
                log.extend(metadata(7, &(records.len() as u64).to_le_bytes()));
                log.extend(records);
            }
        }
    }
    log
}

/// A basic-mode log of `version` (1–3): `(tid, pid, cpu, kind, id, tsc,
/// args)` records; v1–v2 writers leave the pid zero, v1 has no tail exits.
pub fn write_basic(version: u16, records: &[(u32, u32, u8, u8, i32, u64, Vec<u64>)]) -> Vec<u8> {
    let mut log = Vec::new();
    log.extend_from_slice(&version.to_le_bytes());
    log.extend_from_slice(&0u16.to_le_bytes());
    log.extend_from_slice(&[0xab, 0xaa, 0xaa, 0xaa]);
    log.extend_from_slice(&1_000_000_000u64.to_le_bytes());
    log.extend_from_slice(&[0xaa; 16]);
    for (tid, pid, cpu, kind, id, tsc, args) in records {
        let pid = if version >= 3 { *pid } else { 0 };
        let mut record = vec![0, 0, *cpu, *kind];
        record.extend_from_slice(&id.to_le_bytes());
        record.extend_from_slice(&tsc.to_le_bytes());
        record.extend_from_slice(&tid.to_le_bytes());
        record.extend_from_slice(&pid.to_le_bytes());
        record.resize(32, 0);
        log.extend(record);
        for arg in args {
            let mut payload = vec![1, 0, 0, 0];
            payload.extend_from_slice(&id.to_le_bytes());
            payload.extend_from_slice(&tid.to_le_bytes());
            payload.extend_from_slice(&pid.to_le_bytes());
            payload.extend_from_slice(&arg.to_le_bytes());
            payload.resize(32, 0);
            log.extend(payload);
        }
    }
    log
}

/// Random buffers for synthetic logs: nested calls (some with arguments,
/// some tail exits), CPU moves, TSC wraps, custom and (for v5) typed events.
pub fn random_buffers(rng: &mut crate::rng::Rng, version: u16, buffer_count: usize) -> Vec<Buffer> {
    let mut buffers = Vec::new();
    let mut tsc = 1_000_000u64;
    for index in 0..buffer_count {
        let tid = 100 + (index % 3) as u32;
        let cpu = rng.below(4) as u16;
        tsc += 1 + rng.below(1000);
        let mut buffer = Buffer { tid, pid: 42, cpu, tsc, events: Vec::new() };
        let mut stack: Vec<u32> = Vec::new();
        for _ in 0..(5 + rng.below(40)) {
            tsc += rng.below(5000);
            let event = match rng.below(20) {
                0..=6 => {
                    let id = 1 + rng.below(50) as u32;
                    stack.push(id);
                    let with_args = rng.below(5) == 0;
                    let args = if with_args { (0..1 + rng.below(3)).map(|_| rng.next_u64()).collect() } else { Vec::new() };
                    Event::Function { kind: if with_args { 3 } else { 0 }, id, tsc, args }
                }
                7..=13 => match stack.pop() {
                    Some(id) => Event::Function { kind: if rng.below(6) == 0 { 2 } else { 1 }, id, tsc, args: Vec::new() },
                    None => Event::Function { kind: 1, id: 1 + rng.below(50) as u32, tsc, args: Vec::new() },
                },
                14 => Event::Cpu { cpu: rng.below(4) as u16, tsc },
                15 => {
                    tsc += 1 << 33;
                    Event::Wrap { tsc }
                }
                16 | 17 => {
                    // LLVM reads a v1 buffer's zero filler as 8-byte function
                    // records (ignored), so it needs the filler to start
                    // 8-byte aligned: v1 payloads are whole words here.
                    let len = 1 + rng.below(40) as usize;
                    let len = if version == 1 { len.next_multiple_of(8) } else { len };
                    Event::Custom { tsc, cpu: 4 + rng.below(4) as u16, data: (0..len).map(|i| b'a' + ((i as u64 + tsc) % 26) as u8).collect() }
                }
                _ if version >= 5 => {
                    let len = 1 + rng.below(20) as usize;
                    Event::Typed { tsc, event_type: rng.below(100) as u16, data: (0..len).map(|i| b'A' + (i % 26) as u8).collect() }
                }
                _ => continue,
            };
            buffer.events.push(event);
        }
        buffers.push(buffer);
    }
    buffers
}

/// A program for the reader benchmark: two threads, each computing
/// `fib(N)` (N = first argument) with every call logged in FDR mode
/// (1 MiB buffers, up to 256 of them).
pub const BENCH_PROGRAM: &str = r#"
#include <xray/xray_log_interface.h>
#include <xray/xray_interface.h>
#include <cstdlib>
#include <thread>
__attribute__((noinline)) unsigned fib(unsigned n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }
__attribute__((noinline)) void worker(unsigned n) { volatile unsigned r = fib(n); (void)r; }
int main(int argc, char **argv) {
  unsigned n = argc > 1 ? atoi(argv[1]) : 30;
  __xray_log_select_mode("xray-fdr");
  if (__xray_log_init_mode("xray-fdr", "buffer_size=1048576:buffer_max=256:func_duration_threshold_us=0") != XRAY_LOG_INITIALIZED)
    return 2;
  __xray_patch();
  std::thread a(worker, n), b(worker, n);
  a.join();
  b.join();
  __xray_log_finalize();
  __xray_log_flushLog();
  return 0;
}
"#;

/// An instrumented shared library (`-fxray-shared`) and an executable that
/// calls it: function ids of the library carry object id 1 (`1 << 24 | id`).
pub const DSO_LIBRARY: &str = r#"
__attribute__((noinline)) int lib_square(int x) { asm volatile(""); return x * x; }
__attribute__((noinline)) int lib_twice(int x) { return lib_square(x) + lib_square(x + 1); }
"#;

/// The executable of [`DSO_LIBRARY`]'s test; FDR mode.
pub const DSO_MAIN: &str = r#"
#include <xray/xray_log_interface.h>
#include <xray/xray_interface.h>
int lib_twice(int x);
__attribute__((noinline)) int main_work(int x) { return lib_twice(x) + 1; }
int main(int argc, char **argv) {
  __xray_log_select_mode("xray-fdr");
  if (__xray_log_init_mode("xray-fdr", "buffer_size=16384:buffer_max=8:func_duration_threshold_us=0") != XRAY_LOG_INITIALIZED)
    return 2;
  __xray_patch();
  int s = 0;
  for (int i = 0; i < 3; i++) s += main_work(i);
  __xray_log_finalize();
  __xray_log_flushLog();
  return s == 1234;
}
"#;

/// Builds [`DSO_MAIN`] linked against [`DSO_LIBRARY`] (`libxray_square.so`,
/// found through the run path); returns (executable, library).
pub fn build_dso_program(dir: &Path) -> (PathBuf, PathBuf) {
    let flags = ["-O2", "-g", "-fxray-instrument", "-fxray-shared", "-fxray-instruction-threshold=1"];
    let library = dir.join("libxray_square.so");
    std::fs::write(dir.join("square.cpp"), DSO_LIBRARY).expect("write source");
    std::fs::write(dir.join("dso_main.cpp"), DSO_MAIN).expect("write source");
    let status = Command::new("clang++-22").args(flags).args(["-fPIC", "-shared", "-o"]).arg(&library).arg(dir.join("square.cpp")).status().expect("clang++-22");
    assert!(status.success(), "building the library failed");
    let binary = dir.join("dso_main");
    let status = Command::new("clang++-22")
        .args(flags)
        .arg("-o")
        .arg(&binary)
        .arg(dir.join("dso_main.cpp"))
        .arg(format!("-L{}", dir.display()))
        .arg("-lxray_square")
        .arg(format!("-Wl,-rpath,{}", dir.display()))
        .status()
        .expect("clang++-22");
    assert!(status.success(), "building the executable failed");
    (binary, library)
}
