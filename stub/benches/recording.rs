//! Recording under the debugger, in one run:
//!
//! 1. the instruction rate of a program recorded by the stub while lldb-22
//!    drives it (`process trace start`, continue from `main` to `done`)
//!    against `retrace record`'s recorder (the collector, branch mode, as
//!    `retrace record --mode branch` runs it) on the same program (the stub
//!    records a lone thread block by block too);
//! 2. the time from sending `jLLDBTraceGetBinaryData` for an 8 MiB trace to
//!    its last byte, against the time to receive 8 MiB of ordinary replies
//!    (`m` memory reads of a packet each) over the same loopback connection.
//!    The ring is filled with a real trace first (the program run recorded
//!    to `done`), so its bytes need the protocol's escapes as real ones do.
//!
//! `cargo bench -p retrace-stub --bench recording`
//! (`RETRACE_BENCH_ITERATIONS`, default 5000: the program's loop count in
//! 1; `RETRACE_BENCH_FILL_ITERATIONS`, default 2,200,000: in 2, enough to
//! fill 8 MiB).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use retrace_collector::process::{current_cpu, launch, LaunchOptions};
use retrace_collector::ptrace_recorder::{record, RecordOptions, StepMode};

fn build(dir: &Path) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let exe = dir.join("ring_filler");
    let source = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/programs/ring_filler.c");
    assert!(Command::new("gcc").args(["-g", "-O0", "-o"]).arg(&exe).arg(source).status().unwrap().success());
    exe
}

#[path = "../tests/common/mod.rs"]
mod common;

/// Starts the stub on `program args…`; returns it and its port.
fn stub(program: &Path, args: &[&str]) -> (Child, u16) {
    let args: Vec<&Path> = args.iter().map(Path::new).collect();
    common::start_stub_with_args(program, &args)
}

fn wait(child: Child) {
    let _ = common::wait_exit(child);
}

/// lldb-22 from `main` to `done`, tracing or not; returns its output and
/// the wall time of the whole session.
fn lldb_session(program: &Path, iterations: &str, traced: bool) -> (String, f64) {
    let (child, port) = stub(program, &[iterations]);
    let mut commands = vec![format!("gdb-remote {port}"), "b main".into(), "c".into()];
    if traced {
        commands.push("process trace start -s 4MiB".into());
    }
    commands.extend(["b done".into(), "c".into(), "c".into()]);
    let mut args = vec!["-b".to_string()];
    for command in commands {
        args.push("-o".into());
        args.push(command);
    }
    args.push(program.display().to_string());
    let start = Instant::now();
    let out = Command::new("lldb-22").args(&args).stdin(Stdio::null()).output().expect("lldb-22");
    let seconds = start.elapsed().as_secs_f64();
    wait(child);
    (String::from_utf8_lossy(&out.stdout).into_owned(), seconds)
}

fn breakpoint_address(out: &str, n: u32) -> u64 {
    let prefix = format!("Breakpoint {n}: ");
    let line = out.lines().find(|l| l.starts_with(&prefix)).unwrap_or_else(|| panic!("no breakpoint {n}:\n{out}"));
    u64::from_str_radix(line.rsplit("address = 0x").next().unwrap().trim(), 16).unwrap()
}

struct Client(TcpStream);

impl Client {
    fn send(&mut self, payload: &[u8]) {
        let mut body = Vec::new();
        for &b in payload {
            if matches!(b, b'#' | b'$' | b'}' | b'*') {
                body.extend([b'}', b ^ 0x20]);
            } else {
                body.push(b);
            }
        }
        let sum = body.iter().fold(0u8, |s, b| s.wrapping_add(*b));
        let mut packet = vec![b'$'];
        packet.extend(&body);
        packet.extend(format!("#{sum:02x}").as_bytes());
        self.0.write_all(&packet).unwrap();
    }

    /// The next reply's body as sent (escapes kept).
    fn reply_body(&mut self) -> Vec<u8> {
        let mut byte = [0u8; 1];
        while self.0.read(&mut byte).unwrap() == 1 && byte[0] != b'$' {}
        let mut body = Vec::new();
        let mut reader = BufReader::with_capacity(1 << 16, &mut self.0);
        reader.read_until(b'#', &mut body).unwrap();
        body.pop();
        let mut sum = [0u8; 2];
        reader.read_exact(&mut sum).unwrap();
        assert!(reader.buffer().is_empty(), "one reply at a time");
        body
    }

    /// The next reply's length on the wire, from `$` to the checksum.
    fn reply_len(&mut self) -> usize {
        let mut reader = BufReader::with_capacity(1 << 16, &mut self.0);
        let mut n = 0;
        let mut seen_dollar = false;
        loop {
            let buf = reader.fill_buf().unwrap();
            assert!(!buf.is_empty(), "connection closed");
            let mut used = 0;
            for (i, &b) in buf.iter().enumerate() {
                used = i + 1;
                if !seen_dollar {
                    seen_dollar = b == b'$';
                    continue;
                }
                n += 1;
                if b == b'#' {
                    // Two checksum digits follow.
                    reader.consume(used);
                    let mut sum = [0u8; 2];
                    reader.read_exact(&mut sum).unwrap();
                    return n + 2;
                }
            }
            reader.consume(used);
        }
    }
}

fn main() {
    let iterations = std::env::var("RETRACE_BENCH_ITERATIONS").unwrap_or_else(|_| "5000".into());
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("bench-recording");
    let program = build(&dir);

    // 1. Recording rate.
    let mut options = LaunchOptions::new(program.as_os_str(), [iterations.as_str()]);
    options.pin_cpu = Some(current_cpu());
    let tracee = launch(&options).unwrap();
    let recording = record(tracee, &RecordOptions { mode: StepMode::Branch, keep_instruction_log: true, ..RecordOptions::default() }).unwrap();
    let record_rate = recording.instructions() as f64 / recording.elapsed.as_secs_f64();
    let (plain, t_plain) = lldb_session(&program, &iterations, false);
    let (traced, t_traced) = lldb_session(&program, &iterations, true);
    let (from, to) = (breakpoint_address(&traced, 1), breakpoint_address(&traced, 2));
    let log = recording.threads().next().unwrap().instruction_log.as_ref().unwrap();
    let start = log.iter().position(|&a| a == from).unwrap();
    let stretch = log[start..].iter().position(|&a| a == to).unwrap();
    assert!(plain.contains("exited with status = 0"), "{plain}");
    let stub_rate = stretch as f64 / (t_traced - t_plain);
    println!("recording {} ({iterations} iterations), branch mode", program.display());
    println!("{:<52} {:>14} {:>12}", "", "instructions", "insns/s");
    println!("{:<52} {:>14} {:>12.0}", "retrace record (collector, pinned to one CPU)", recording.instructions(), record_rate);
    println!(
        "{:<52} {:>14} {:>12.0}",
        format!("retrace-stub under lldb-22 ({t_traced:.2} s - {t_plain:.2} s untraced)"),
        stretch,
        stub_rate
    );
    println!("under the debugger / retrace record: {:.2}x (goal >= 0.8x)", stub_rate / record_rate);

    // 2. An 8 MiB trace in one reply vs 8 MiB of ordinary replies.
    let fill = std::env::var("RETRACE_BENCH_FILL_ITERATIONS").unwrap_or_else(|_| "2200000".into());
    let (child, port) = stub(&program, &[&fill]);
    let stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream.set_nodelay(true).unwrap();
    let mut client = Client(stream);
    client.send(b"QStartNoAckMode");
    client.reply_len();
    client.send(b"?");
    client.reply_len();
    client.send(br#"jLLDBTraceStart:{"type":"intel-pt","iptTraceSize":8388608,"enableTsc":false,"tids":null}"#);
    client.reply_len();
    let state_request = br#"jLLDBTraceGetState:{"type":"intel-pt"}"#;
    client.send(state_request);
    let state = String::from_utf8(client.reply_body()).unwrap();
    let tid: u64 = state.split("\"tid\":").nth(1).and_then(|t| t.split(|c: char| !c.is_ascii_digit()).next()).and_then(|t| t.parse().ok()).expect("a traced thread");
    // Recorded to `done` (the program is position-independent, loaded at
    // 0x555555554000 with ASLR off, as the `m` reads below assume).
    let image = std::fs::read(&program).unwrap();
    let elf = object::File::parse(&*image).unwrap();
    let done = object::Object::symbols(&elf).find(|s| object::ObjectSymbol::name(s) == Ok("done")).map(|s| object::ObjectSymbol::address(&s)).expect("done");
    client.send(format!("Z0,{:x},1", 0x5555_5555_4000u64 + done).as_bytes());
    assert_eq!(client.reply_body(), b"OK");
    let start = Instant::now();
    client.send(b"vCont;c");
    let stop = client.reply_body();
    let recorded_for = start.elapsed().as_secs_f64();
    assert!(stop.starts_with(b"T05"), "stopped at done: {}", String::from_utf8_lossy(&stop));
    client.send(format!(r#"jLLDBTraceGetBinaryData:{{"cpuId":null,"kind":"iptTrace","tid":{tid},"type":"intel-pt"}}"#).as_bytes());
    let wire = client.reply_body();
    let escapes = wire.iter().filter(|&&b| b == b'}').count();
    let mut trace = Vec::with_capacity(wire.len());
    let mut bytes = wire.iter();
    while let Some(&b) = bytes.next() {
        trace.push(if b == b'}' { bytes.next().unwrap() ^ 0x20 } else { b });
    }
    let padding = trace.iter().position(|&b| b != 0).unwrap_or(trace.len());
    assert_eq!(trace.len(), 8 << 20, "the ring's size");
    let mut best_trace = f64::MAX;
    let mut best_plain = f64::MAX;
    let mut trace_bytes = 0;
    let mut plain_bytes = 0;
    for _ in 0..3 {
        let start = Instant::now();
        client.send(format!(r#"jLLDBTraceGetBinaryData:{{"cpuId":null,"kind":"iptTrace","tid":{tid},"type":"intel-pt"}}"#).as_bytes());
        trace_bytes = client.reply_len();
        best_trace = best_trace.min(start.elapsed().as_secs_f64());
        // Ordinary replies: memory reads of a packet's worth each.
        let start = Instant::now();
        plain_bytes = 0;
        while plain_bytes < trace_bytes {
            client.send(b"m555555554000,7fe");
            plain_bytes += client.reply_len();
        }
        best_plain = best_plain.min(start.elapsed().as_secs_f64());
    }
    client.send(b"k");
    wait(child);
    println!();
    println!("one 8 MiB trace reply vs ordinary replies of 4 KiB each, same connection (best of 3)");
    println!("{:<52} {:>14} {:>12}", "", "bytes", "seconds");
    println!("{:<52} {:>14} {:>12.4}", "jLLDBTraceGetBinaryData, request to last byte", trace_bytes, best_trace);
    println!("{:<52} {:>14} {:>12.4}", "m packets (request, reply) until as many bytes", plain_bytes, best_plain);
    println!("trace reply / plain replies: {:.2}x the time", best_trace / best_plain);
    println!(
        "the trace: {fill} iterations recorded in {recorded_for:.1} s; {} bytes of data after {padding} of padding; {escapes} bytes escaped ({:.2} %)",
        trace.len() - padding,
        100.0 * escapes as f64 / trace.len() as f64
    );
}
