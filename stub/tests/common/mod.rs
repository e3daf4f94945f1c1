//! The harness the stub's tests share: a stub started on a program, raw
//! packets exchanged with it.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Starts the stub on `program` and waits until it listens.
pub fn start_stub(program: &Path) -> (Child, u16) {
    start_stub_with_args(program, &[])
}

/// Starts the stub on `program args…` and waits until it listens.
pub fn start_stub_with_args(program: &Path, args: &[&Path]) -> (Child, u16) {
    let (child, port, _) = start_stub_listening(program, args, "127.0.0.1");
    (child, port)
}

/// Starts the stub on `program args…` listening on `host` (the port the
/// system picks, read back from what the stub says, so that tests running
/// at once never race for one) and waits until it listens; returns it, the
/// port and the program's pid.
pub fn start_stub_listening(program: &Path, args: &[&Path], host: &str) -> (Child, u16, i32) {
    let listen = format!("{host}:0");
    let mut command = vec![std::ffi::OsStr::new("--listen"), listen.as_ref(), "--".as_ref(), program.as_os_str()];
    command.extend(args.iter().map(|a| a.as_os_str()));
    let (child, line) = start_stub_command(&command);
    let (pid, port) = pid_and_port(&line);
    (child, port, pid)
}

/// Starts the stub with these arguments and waits until it listens;
/// returns it and the line saying where. What the stub says later is the
/// test's output (shown when it fails).
pub fn start_stub_command(args: &[&std::ffi::OsStr]) -> (Child, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_retrace-stub"));
    command.args(args);
    spawn_stub(command)
}

/// Starts the stub as `command` says and waits until it listens (see
/// [`start_stub_command`]).
pub fn spawn_stub(mut command: Command) -> (Child, String) {
    let mut child = command.stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    while !line.contains("listening on") {
        line.clear();
        assert!(stderr.read_line(&mut line).unwrap() > 0, "the stub ended before listening: {line}");
    }
    std::thread::spawn(move || {
        for line in stderr.lines().map_while(Result::ok) {
            eprintln!("stub: {line}");
        }
    });
    (child, line)
}

/// Runs `gdb -batch` on `program` with these commands; its output.
pub fn gdb(program: &Path, commands: &[&str]) -> String {
    let mut args = vec!["-batch".to_string(), "-nx".into()];
    for command in commands {
        args.push("-ex".into());
        args.push(command.to_string());
    }
    args.push(program.display().to_string());
    let out = Command::new("timeout").arg("120").arg("gdb").args(&args).stdin(Stdio::null()).output().unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

/// Every `$N = 0x…` GDB printed, in order.
pub fn printed_values(out: &str) -> Vec<u64> {
    out.lines()
        .filter(|l| l.starts_with('$'))
        .filter_map(|l| l.split(" = 0x").nth(1).and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok()))
        .collect()
}

/// The address GDB gave breakpoint `n` ("Breakpoint n at 0x…: file …").
pub fn gdb_breakpoint_address(out: &str, n: u32) -> u64 {
    let prefix = format!("Breakpoint {n} at 0x");
    let line = out.lines().find_map(|l| l.strip_prefix(&prefix)).unwrap_or_else(|| panic!("no breakpoint {n}:\n{out}"));
    u64::from_str_radix(line.split(':').next().unwrap(), 16).unwrap()
}

pub fn wait_exit(mut child: Child) -> Option<i32> {
    for _ in 0..100 {
        if let Some(status) = child.try_wait().unwrap() {
            return status.code();
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    None
}

/// Sends `payload` as a packet and returns the reply's body.
pub fn exchange(stream: &mut TcpStream, payload: &str) -> String {
    stream.write_all(&framed(payload.as_bytes())).unwrap();
    read_packet(stream).unwrap_or_else(|| panic!("no reply to {payload}"))
}

/// The program's pid and the port from the stub's first line:
/// "retrace-stub: process PID stopped at entry; listening on HOST:PORT".
pub fn pid_and_port(line: &str) -> (i32, u16) {
    let pid = line.split_whitespace().nth(2).and_then(|p| p.parse().ok());
    match pid {
        Some(pid) => (pid, port_of(line)),
        _ => panic!("stub said: {line}"),
    }
}

/// The port from the stub's first line ("… listening on HOST:PORT").
pub fn port_of(line: &str) -> u16 {
    line.trim().rsplit(':').next().and_then(|p| p.parse().ok()).unwrap_or_else(|| panic!("stub said: {line}"))
}

/// A raw gdb-remote session with a stub this harness started: packets
/// exchanged (and timed), registers read; the stub ends with it.
pub struct RawSession {
    /// The connection.
    pub stream: TcpStream,
    /// The stub.
    pub stub: Child,
}

impl RawSession {
    /// Opens a session ([`open_session`]) with `stub`, listening on `port`.
    pub fn open(stub: Child, port: u16) -> RawSession {
        RawSession { stream: open_session(port), stub }
    }

    /// Sends `packet`; the reply.
    pub fn send(&mut self, packet: &str) -> String {
        exchange(&mut self.stream, packet)
    }

    /// Sends `packet`; the reply and the seconds to it.
    pub fn timed(&mut self, packet: &str) -> (String, f64) {
        let start = std::time::Instant::now();
        let reply = self.send(packet);
        (reply, start.elapsed().as_secs_f64())
    }

    /// Register `n` (GDB's numbering) of the current thread.
    pub fn register(&mut self, n: usize) -> u64 {
        let reply = run_length_decoded(&self.send(&format!("p{n:x}")));
        u64::from_le_bytes(u64::from_str_radix(&reply, 16).unwrap_or_else(|_| panic!("p{n:x}: {reply}")).to_be_bytes())
    }

    /// The stop `reply` is at `pc`.
    pub fn stop_at(&mut self, reply: &str, pc: u64, what: &str) {
        assert!(reply.starts_with('T'), "{what}: {reply}");
        assert_eq!(self.register(16), pc, "{what}: {reply}");
    }
}

impl Drop for RawSession {
    fn drop(&mut self) {
        let _ = self.stub.kill();
        let _ = self.stub.wait();
    }
}

/// A raw session with the stub on `port`, opened as a client opens one:
/// no-ack mode, the features, the stop, its thread selected (`Hc`, `Hg`).
pub fn open_session(port: u16) -> TcpStream {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream.set_nodelay(true).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(3600))).unwrap();
    assert_eq!(exchange(&mut stream, "QStartNoAckMode"), "OK");
    exchange(&mut stream, "qSupported:swbreak+;hwbreak+;vContSupported+");
    let stop = exchange(&mut stream, "?");
    assert!(stop.starts_with('T'), "?: {stop}");
    let thread = stop.split("thread:").nth(1).and_then(|t| t.split(';').next()).unwrap_or_else(|| panic!("?: {stop}")).to_string();
    assert_eq!(exchange(&mut stream, &format!("Hc{thread}")), "OK");
    assert_eq!(exchange(&mut stream, &format!("Hg{thread}")), "OK");
    stream
}

/// `body` framed: `$body#cc`.
pub fn framed(body: &[u8]) -> Vec<u8> {
    let sum = body.iter().fold(0u8, |s, b| s.wrapping_add(*b));
    let mut packet = vec![b'$'];
    packet.extend_from_slice(body);
    packet.extend_from_slice(format!("#{sum:02x}").as_bytes());
    packet
}

/// The next packet's body from the stub (acknowledgements skipped); `None`
/// when none comes before the stream's read timeout or the stub closes.
pub fn read_packet(stream: &mut TcpStream) -> Option<String> {
    let mut reply = Vec::new();
    let mut byte = [0u8; 1];
    let mut hashes = None;
    loop {
        if stream.read_exact(&mut byte).is_err() {
            return None;
        }
        if reply.is_empty() && byte[0] != b'$' {
            continue;
        }
        reply.push(byte[0]);
        if let Some(n) = &mut hashes {
            *n -= 1;
            if *n == 0 {
                break;
            }
        } else if byte[0] == b'#' {
            hashes = Some(2);
        }
    }
    let text = String::from_utf8_lossy(&reply).into_owned();
    let body = text.trim_start_matches('$').rsplit_once('#').map(|(body, _)| body.to_string()).unwrap_or(text);
    Some(run_length_decoded(&body))
}

/// Whether process `pid` exists and has not ended (a zombie has).
pub fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| !stat.rsplit(')').next().unwrap_or("").trim_start().starts_with('Z'))
}

/// A reply body with the protocol's run-length encoding undone (`x*n`:
/// `x` and then `n - 29` more of it).
pub fn run_length_decoded(body: &str) -> String {
    let mut out = String::new();
    let mut chars = body.chars();
    while let Some(c) = chars.next() {
        if c == '*' {
            let count = chars.next().map_or(0, |n| n as usize - 29);
            let last = out.chars().last().unwrap_or('0');
            out.extend(std::iter::repeat(last).take(count));
        } else {
            out.push(c);
        }
    }
    out
}

/// The `retrace` command (the plugin package's binary, beside the stub's;
/// built, in the same profile, when a lone run of the stub's tests or
/// benchmarks did not build it).
pub fn retrace() -> Command {
    let path = Path::new(env!("CARGO_BIN_EXE_retrace-stub")).with_file_name("retrace");
    if !path.exists() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let release = path.parent().is_some_and(|dir| dir.ends_with("release"));
        let profile: &[&str] = if release { &["--release"] } else { &[] };
        let built = Command::new(cargo).args(["build", "-p", "retrace-plugin", "--bin", "retrace"]).args(profile).status().unwrap();
        assert!(built.success(), "building retrace");
    }
    Command::new(path)
}

/// Starts `retrace-stub --record=mode` on `program` and waits until it
/// listens; returns it and its port.
pub fn start_recording(program: &Path, mode: &str) -> (Child, u16) {
    start_recording_with_args(program, &[], mode)
}

/// Starts `retrace-stub --record=mode` on `program args…` and waits until
/// it listens; returns it and its port.
pub fn start_recording_with_args(program: &Path, args: &[&str], mode: &str) -> (Child, u16) {
    let mut stub = Command::new(env!("CARGO_BIN_EXE_retrace-stub"));
    stub.args([&format!("--record={mode}"), "--listen", "127.0.0.1:0", "--"]).arg(program).args(args);
    let (child, line) = spawn_stub(stub);
    (child, pid_and_port(&line).1)
}

/// Ends a stub, and so its program.
pub fn end_stub(mut child: Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// The start of every python3-lldb session: `debugger` (synchronous),
/// `target` (argv[1]), `listener`, `process` connected to the stub on the
/// port argv[2], `interpreter`, and `command(text)` giving a command's
/// output and errors.
pub const LLDB_CONNECT: &str = r#"
import json, sys, lldb
program, port = sys.argv[1], sys.argv[2]
debugger = lldb.SBDebugger.Create()
debugger.SetAsync(False)
target = debugger.CreateTarget(program)
listener = debugger.GetListener()
error = lldb.SBError()
process = target.ConnectRemote(listener, "connect://127.0.0.1:" + port, "gdb-remote", error)
assert error.Success(), error.GetCString()
interpreter = debugger.GetCommandInterpreter()

def command(text):
    result = lldb.SBCommandReturnObject()
    interpreter.HandleCommand(text, result)
    return (result.GetOutput() or "") + (result.GetError() or "")
"#;

/// Runs [`LLDB_CONNECT`] then `body` in python3-lldb against the stub on
/// `port` (`extra`: sys.argv[3…]), within 300 s; its output and errors.
pub fn lldb_python(body: &str, program: &Path, port: u16, extra: &[&str]) -> String {
    let script = [LLDB_CONNECT, body].concat();
    let out = Command::new("timeout").args(["300", "/usr/bin/python3", "-c", &script]).arg(program).arg(port.to_string()).args(extra).output().unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

/// The lines of `text` that are JSON objects, parsed.
pub fn json_lines(text: &str) -> Vec<serde_json::Value> {
    text.lines().filter(|l| l.starts_with("{\"")).map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"))).collect()
}

/// gcc, lldb-22 and python3-lldb-22 are here (else the test says what is
/// missing and passes by).
pub fn lldb_python_present() -> bool {
    use retrace_tests::tools::{require, which};
    require("gcc", which("gcc").is_some())
        && require("lldb-22", which("lldb-22").is_some())
        && require("python3-lldb-22", Path::new("/usr/lib/python3/dist-packages/lldb").exists())
}
