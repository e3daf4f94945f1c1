//! retrace-stub driven by the real clients: GDB 13 (`gdb -batch`) and
//! LLDB 22 (`lldb-22 -b`), on a C program built here. Each session is bounded
//! by a timeout.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

mod common;

use common::{exchange, pid_and_port, start_stub, start_stub_with_args, wait_exit};
use retrace_tests::recordings::build;
use retrace_tests::tools::{require, which};

fn tools(client: &str) -> bool {
    require("gcc", which("gcc").is_some()) && require(client, which(client).is_some())
}

fn debuggee(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("stub").join(name);
    build("debuggee", &dir, &["-O0"])
}

fn run_with_timeout(mut command: Command, seconds: u64) -> String {
    command.stdin(Stdio::null());
    let out = Command::new("timeout").arg(seconds.to_string()).arg(command.get_program()).args(command.get_args()).output().unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

#[test]
fn gdb_session_breakpoint_backtrace_print_finish_next_exit() {
    if !tools("gdb") {
        return;
    }
    let program = debuggee("gdb");
    let (stub, port) = start_stub(&program);
    let mut gdb = Command::new("gdb");
    gdb.args(["-batch", "-nx", "-ex", &format!("target remote 127.0.0.1:{port}")])
        .args(["-ex", "break add", "-ex", "continue", "-ex", "bt", "-ex", "print counter", "-ex", "finish"])
        .args(["-ex", "next", "-ex", "print local", "-ex", "stepi", "-ex", "info threads", "-ex", "continue"])
        .arg(&program);
    let out = run_with_timeout(gdb, 60);
    for expected in [
        "Breakpoint 1, add (a=41, b=1) at",
        "in main () at",
        "$1 = 41",
        "Value returned is $2 = 42",
        "$3 = 7",
        "Thread ",
        "exited with code 061]",
    ] {
        assert!(out.contains(expected), "missing {expected:?} in:\n{out}");
    }
    assert_eq!(wait_exit(stub), Some(0), "the stub shuts down when the program exits");
}

#[test]
fn lldb_session_breakpoint_variables_registers_steps_exit() {
    if !tools("lldb-22") {
        return;
    }
    let program = debuggee("lldb");
    let (stub, port) = start_stub(&program);
    let mut lldb = Command::new("lldb-22");
    lldb.arg("-b")
        .args(["-o", &format!("gdb-remote {port}"), "-o", "b add", "-o", "c", "-o", "bt", "-o", "p counter"])
        .args(["-o", "register read rip rsp", "-o", "thread step-out", "-o", "thread step-over"])
        .args(["-o", "frame variable local", "-o", "thread step-inst", "-o", "thread list", "-o", "c"])
        .arg(&program);
    let out = run_with_timeout(lldb, 90);
    for expected in [
        "stop reason = breakpoint 1.1",
        "frame #0: ",
        "debuggee`add",
        "debuggee`main",
        "(int) 41",
        "rip = 0x",
        "Return value: (int) $0 = 42",
        "stop reason = step over",
        "(int) local = 7",
        "stop reason = instruction step into",
        "exited with status = 49",
    ] {
        assert!(out.contains(expected), "missing {expected:?} in:\n{out}");
    }
    assert_eq!(wait_exit(stub), Some(0));
}

/// Sends a packet in no-ack mode and returns the reply payload.
#[test]
fn protocol_faults_malformed_packets_second_client_and_disconnect() {
    if !require("gcc", which("gcc").is_some()) {
        return;
    }
    let program = debuggee("faults");
    let (stub, port) = start_stub(&program);
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    assert_eq!(exchange(&mut stream, "QStartNoAckMode"), "OK");
    // Our own reply: the real pid, in hex.
    let info = exchange(&mut stream, "qProcessInfo");
    let pid = i32::from_str_radix(info.split(';').next().unwrap().trim_start_matches("pid:"), 16).unwrap();
    assert!(std::fs::read_link(format!("/proc/{pid}/exe")).unwrap().ends_with("debuggee"), "{info}");
    // Malformed: a memory read with a bad address gets an error reply, and the session goes on.
    assert!(exchange(&mut stream, "m0,8").starts_with('E'), "reading address 0 must fail");
    for garbage in ["mzz,4", "m12345", "Z0,zz,1", "vCont;x", "Hgzz", "garbage", "qXfer:features:read:target.xml:zz"] {
        assert_eq!(exchange(&mut stream, garbage), "E16", "{garbage}");
    }
    // A packet with a wrong checksum is dropped (no reply); the next one is answered.
    stream.write_all(b"$?#00").unwrap();
    assert!(exchange(&mut stream, "?").starts_with('T'));
    // A second client is turned away with a message.
    let mut second = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream.write_all(b"$?#3f").unwrap(); // make the stub look at its listener
    let mut message = String::new();
    second.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let _ = second.read_to_string(&mut message);
    assert!(message.contains("another debugger is already connected"), "{message:?}");
    // Continue, then vanish: the program is killed and the stub exits.
    stream.write_all(b"$vCont;c#a8").unwrap();
    std::thread::sleep(Duration::from_millis(200));
    drop(stream);
    assert_eq!(wait_exit(stub), Some(0));
    assert!(!Path::new(&format!("/proc/{pid}")).exists() || std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default().contains(" Z "));
}

const KNOWN_REGISTERS: [(&str, &str); 5] = [
    ("rbx", "0x1111222233334444"),
    ("r12", "0x5555666677778888"),
    ("r13", "0x99990000aaaabbbb"),
    ("r14", "0x0123456789abcdef"),
    ("r15", "0xfedcba9876543210"),
];

#[test]
fn registers_hold_what_the_program_loaded_in_lldb_and_gdb() {
    if !tools("lldb-22") || !tools("gdb") {
        return;
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("stub").join("registers");
    let program = build("registers", &dir, &["-O0"]);
    let (stub, port) = start_stub(&program);
    let mut lldb = Command::new("lldb-22");
    lldb.arg("-b")
        .args(["-o", &format!("gdb-remote {port}"), "-o", "b checkpoint", "-o", "c"])
        .args(["-o", "register read rbx r12 r13 r14 r15 rip fs_base orig_rax", "-o", "c"])
        .arg(&program);
    let out = run_with_timeout(lldb, 60);
    for (name, value) in KNOWN_REGISTERS {
        assert!(out.contains(&format!("{name} = {value}")), "missing {name} = {value} in:\n{out}");
    }
    assert!(out.contains("registers`checkpoint"), "rip should be in checkpoint:\n{out}");
    assert!(out.contains("fs_base = 0x00007ffff7"), "fs_base (the TLS block) missing:\n{out}");
    assert_eq!(wait_exit(stub), Some(0));

    let (stub, port) = start_stub(&program);
    let mut gdb = Command::new("gdb");
    gdb.args(["-batch", "-nx", "-ex", &format!("target remote 127.0.0.1:{port}")])
        .args(["-ex", "break checkpoint", "-ex", "continue", "-ex", "info registers rbx r12 r13 r14 r15 fs_base"])
        .args(["-ex", "continue"])
        .arg(&program);
    let out = run_with_timeout(gdb, 60);
    for (name, value) in KNOWN_REGISTERS {
        let line = out.lines().find(|l| l.starts_with(name)).unwrap_or_else(|| panic!("no {name} in:\n{out}"));
        let shown = line.split_whitespace().nth(1).and_then(|v| u64::from_str_radix(v.trim_start_matches("0x"), 16).ok());
        assert_eq!(shown, u64::from_str_radix(value.trim_start_matches("0x"), 16).ok(), "{line}");
    }
    assert_eq!(wait_exit(stub), Some(0));
}

#[test]
fn watchpoints_stop_at_the_write_in_gdb_and_lldb() {
    if !tools("lldb-22") || !tools("gdb") {
        return;
    }
    let program = debuggee("watch");
    let (stub, port) = start_stub(&program);
    let mut gdb = Command::new("gdb");
    gdb.args(["-batch", "-nx", "-ex", &format!("target remote 127.0.0.1:{port}")])
        .args(["-ex", "break main", "-ex", "continue", "-ex", "watch counter", "-ex", "continue", "-ex", "continue"])
        .arg(&program);
    let out = run_with_timeout(gdb, 60);
    for expected in ["Hardware watchpoint 2: counter", "Old value = 41", "New value = 42", "exited with code 061"] {
        assert!(out.contains(expected), "missing {expected:?} in:\n{out}");
    }
    assert_eq!(wait_exit(stub), Some(0));

    let (stub, port) = start_stub(&program);
    let mut lldb = Command::new("lldb-22");
    lldb.arg("-b")
        .args(["-o", &format!("gdb-remote {port}"), "-o", "b main", "-o", "c", "-o", "watchpoint set variable counter"])
        .args(["-o", "c", "-o", "p counter", "-o", "c"])
        .arg(&program);
    let out = run_with_timeout(lldb, 60);
    for expected in ["stop reason = watchpoint 1", "new value: 42", "(int) 42", "exited with status = 49"] {
        assert!(out.contains(expected), "missing {expected:?} in:\n{out}");
    }
    assert_eq!(wait_exit(stub), Some(0));
}

#[test]
fn threads_and_shared_library_frames() {
    if !tools("lldb-22") || !tools("gdb") {
        return;
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("stub").join("threads");
    let program = build("threads", &dir, &["-O0", "-pthread"]);
    let native = Command::new(&program).status().unwrap().code().unwrap();

    // GDB: every one of the four threads stops at the breakpoint, then the program exits.
    let (stub, port) = start_stub(&program);
    let mut gdb = Command::new("gdb");
    gdb.args(["-batch", "-nx", "-ex", &format!("target remote 127.0.0.1:{port}"), "-ex", "break work"])
        .args(["-ex", "continue", "-ex", "continue", "-ex", "continue", "-ex", "continue", "-ex", "info threads"])
        .args(["-ex", "delete", "-ex", "continue"])
        .arg(&program);
    let out = run_with_timeout(gdb, 60);
    let hits = out.lines().filter(|l| l.contains("hit Breakpoint 1") || l.starts_with("Breakpoint 1, work")).count();
    assert_eq!(hits, 4, "{out}");
    assert!(out.contains(&format!("exited with code 0{native:o}]")), "{out}");
    assert_eq!(wait_exit(stub), Some(0));

    // LLDB: the thread list shows the waiting main thread inside libc (a shared library).
    let (stub, port) = start_stub(&program);
    let mut lldb = Command::new("lldb-22");
    lldb.arg("-b")
        .args(["-o", &format!("gdb-remote {port}"), "-o", "b work", "-o", "c", "-o", "thread list", "-o", "bt all"])
        .args(["-o", "br del -f", "-o", "c"])
        .arg(&program);
    let out = run_with_timeout(lldb, 60);
    let listed = out.lines().filter(|l| l.trim_start().starts_with("thread #") || l.trim_start().starts_with("* thread #")).count();
    assert!(listed >= 2, "thread list shows fewer than 2 threads:\n{out}");
    assert!(out.contains("libc.so.6`"), "no frame in libc.so.6:\n{out}");
    assert!(out.contains("threads`work"), "{out}");
    assert!(out.contains(&format!("exited with status = {native}")), "{out}");
    assert_eq!(wait_exit(stub), Some(0));
}

#[test]
fn sigkill_of_the_program_is_seen_by_the_client() {
    if !tools("gdb") {
        return;
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("stub").join("sigkill");
    let program = build("spin_forever", &dir, &["-O0"]);
    let pid_file = dir.join("pid");
    let _ = std::fs::remove_file(&pid_file);
    let (stub, port) = start_stub_with_args(&program, &[&pid_file]);
    let gdb = Command::new("timeout")
        .args(["60", "gdb", "-batch", "-nx", "-ex", &format!("target remote 127.0.0.1:{port}"), "-ex", "continue"])
        .arg(&program)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let pid = loop {
        if let Some(pid) = std::fs::read_to_string(&pid_file).ok().and_then(|s| s.trim().parse::<i32>().ok()) {
            break pid;
        }
        assert!(std::time::Instant::now() < deadline, "the program never ran");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(Command::new("kill").args(["-KILL", &pid.to_string()]).status().unwrap().success());
    let out = gdb.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(text.contains("Program terminated with signal SIGKILL"), "{text}");
    assert_eq!(wait_exit(stub), Some(0));
}

#[test]
fn attach_to_a_running_program_and_detach() {
    if !tools("gdb") {
        return;
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("stub").join("attach");
    let program = build("spin_forever", &dir, &["-O0"]);
    let pid_file = dir.join("pid");
    let _ = std::fs::remove_file(&pid_file);
    let mut spinner = Command::new(&program).arg(&pid_file).spawn().unwrap();
    while !pid_file.exists() {
        std::thread::sleep(Duration::from_millis(10));
    }
    let pid = spinner.id();
    let mut stub = Command::new(env!("CARGO_BIN_EXE_retrace-stub"))
        .args(["--listen", "127.0.0.1:0", "--attach", &pid.to_string()])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(stub.stderr.as_mut().unwrap()).read_line(&mut line).unwrap();
    assert!(line.contains(&format!("process {pid} attached and stopped")), "{line}");
    let (_, port) = pid_and_port(&line);
    let mut gdb = Command::new("gdb");
    gdb.args(["-batch", "-nx", "-ex", &format!("target remote 127.0.0.1:{port}")])
        .args(["-ex", "bt", "-ex", "print spins > 0", "-ex", "detach"])
        .arg(&program);
    let out = run_with_timeout(gdb, 60);
    assert!(out.contains("in main (argc=2"), "{out}");
    assert!(out.contains("$1 = 1"), "{out}");
    assert!(out.contains("detached]"), "{out}");
    let _ = stub.stderr.take();
    assert_eq!(wait_exit(stub), Some(0));
    // Detached, the program runs on.
    std::thread::sleep(Duration::from_millis(100));
    let state = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    assert!(state.lines().any(|l| l.starts_with("State:") && (l.contains("R (running)") || l.contains("S ("))), "{state}");
    assert!(spinner.try_wait().unwrap().is_none(), "the program died after detach");
    spinner.kill().unwrap();
    let _ = spinner.wait();
}

#[test]
fn ctrl_c_interrupts_a_running_program_in_lldb() {
    if !tools("lldb-22") || !require("python3-lldb-22", Path::new("/usr/lib/python3/dist-packages/lldb").exists()) {
        return;
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("stub").join("interrupt");
    let program = build("spin_forever", &dir, &["-O0"]);
    let (mut stub, port) = start_stub_with_args(&program, &[&dir.join("pid")]);
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/interrupt.py");
    let mut python = Command::new("/usr/bin/python3");
    python.arg(script).arg(&program).arg(port.to_string());
    let out = run_with_timeout(python, 60);
    if !(out.contains("stopped in main") && out.contains("interrupt OK")) {
        let _ = stub.kill();
        panic!("{out}");
    }
    assert_eq!(wait_exit(stub), Some(0));
}

#[test]
fn every_general_register_as_the_program_loaded_it() {
    if !tools("lldb-22") {
        return;
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("stub").join("all-registers");
    let program = build("all_registers", &dir, &["-O0", "-static"]);
    let (stub, port) = start_stub(&program);
    let mut lldb = Command::new("lldb-22");
    lldb.arg("-b")
        // -k: lldb -b runs these only after a stop by a signal (here the program's int3).
        .args(["-o", &format!("gdb-remote {port}"), "-o", "c", "-k", "register read --all", "-k", "c"])
        .arg(&program);
    let out = run_with_timeout(lldb, 60);
    let expected = [
        ("rax", 0x1010101010101010u64),
        ("rbx", 0x2020202020202020),
        ("rcx", 0x3030303030303030),
        ("rdx", 0x4040404040404040),
        ("rsi", 0x5050505050505050),
        ("rdi", 0x6060606060606060),
        ("rbp", 0x7070707070707070),
        ("r8", 0x0808080808080808),
        ("r9", 0x0909090909090909),
        ("r10", 0x0a0a0a0a0a0a0a0a),
        ("r11", 0x0b0b0b0b0b0b0b0b),
        ("r12", 0x0c0c0c0c0c0c0c0c),
        ("r13", 0x0d0d0d0d0d0d0d0d),
        ("r14", 0x0e0e0e0e0e0e0e0e),
        ("r15", 0x0f0f0f0f0f0f0f0f),
    ];
    for (name, value) in expected {
        let shown = out
            .lines()
            .find_map(|l| l.trim().strip_prefix(&format!("{name} = ")))
            .and_then(|v| u64::from_str_radix(v.split_whitespace().next()?.trim_start_matches("0x"), 16).ok());
        assert_eq!(shown, Some(value), "{name} in:\n{out}");
    }
    assert!(out.contains("stop reason = signal SIGTRAP") || out.contains("stop reason = breakpoint"), "{out}");
    assert!(out.contains("exited with status = 0"), "{out}");
    assert_eq!(wait_exit(stub), Some(0));
}

#[test]
fn static_program_step_in_and_signals_passed_through() {
    if !tools("lldb-22") || !tools("gdb") {
        return;
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("stub").join("static");
    let program = build("debuggee", &dir, &["-O0", "-static"]);
    let (stub, port) = start_stub(&program);
    let mut lldb = Command::new("lldb-22");
    lldb.arg("-b")
        .args(["-o", &format!("gdb-remote {port}"), "-o", "b main", "-o", "c", "-o", "thread step-over"])
        .args(["-o", "thread step-in", "-o", "bt", "-o", "c"])
        .arg(&program);
    let out = run_with_timeout(lldb, 60);
    assert!(out.contains("stop reason = step in"), "{out}");
    assert!(out.contains("frame #0: ") && out.contains("debuggee`add"), "step-in did not enter add:\n{out}");
    assert!(out.contains("exited with status = 49"), "{out}");
    assert_eq!(wait_exit(stub), Some(0));

    // GDB: each handled SIGUSR1 stops the program, is passed back, and the handler runs.
    let signals = build("signal_handler", &dir, &["-O0"]);
    let (stub, port) = start_stub(&signals);
    let mut gdb = Command::new("gdb");
    gdb.args(["-batch", "-nx", "-ex", &format!("target remote 127.0.0.1:{port}"), "-ex", "break main"])
        .args(["-ex", "continue", "-ex", "next", "-ex", "step", "-ex", "continue", "-ex", "continue", "-ex", "continue"])
        .args(["-ex", "continue"])
        .arg(&signals);
    let out = run_with_timeout(gdb, 60);
    assert_eq!(out.matches("Program received signal SIGUSR1").count(), 3, "{out}");
    assert!(out.contains("exited with code 03]"), "the handler did not run three times:\n{out}");
    assert_eq!(wait_exit(stub), Some(0));
}

#[test]
fn gdb_info_threads_shows_thread_names() {
    if !tools("gdb") {
        return;
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("stub").join("names");
    let program = build("named_threads", &dir, &["-O0", "-pthread"]);
    let (stub, port) = start_stub(&program);
    let mut gdb = Command::new("gdb");
    gdb.args(["-batch", "-nx", "-ex", &format!("target remote 127.0.0.1:{port}"), "-ex", "break both_running"])
        .args(["-ex", "continue", "-ex", "info threads", "-ex", "continue"])
        .arg(&program);
    let out = run_with_timeout(gdb, 60);
    assert!(out.contains("retrace-worker"), "no thread name in:\n{out}");
    assert!(out.contains("exited normally"), "{out}");
    assert_eq!(wait_exit(stub), Some(0));
}

/// Builds `shlib_main` against its own `libretracedemo.so` (rpath = its dir).
fn shared_library_program() -> (PathBuf, PathBuf) {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("stub").join("shlib");
    std::fs::create_dir_all(&dir).unwrap();
    let lib = dir.join("libretracedemo.so");
    let source = retrace_tests::recordings::programs_dir().join("shlib_lib.c");
    let out = Command::new("gcc").args(["-g", "-O0", "-shared", "-fPIC", "-o"]).arg(&lib).arg(source).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let rpath = format!("-Wl,-rpath,{}", dir.display());
    let program = dir.join("shlib_main");
    let main_source = retrace_tests::recordings::programs_dir().join("shlib_main.c");
    let out = Command::new("gcc").args(["-g", "-O0", "-o"]).arg(&program).arg(main_source).arg("-L").arg(&dir).args(["-lretracedemo", &rpath]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    (program, lib)
}

#[test]
fn library_list_memory_regions_and_kill_for_both_clients() {
    if !tools("lldb-22") || !tools("gdb") {
        return;
    }
    let (program, lib) = shared_library_program();
    let lib = lib.to_str().unwrap();

    // LLDB: the library list (LLDB asks for it at each rendezvous stop) puts
    // the breakpoint in the library; `memory region` names the mapping; kill
    // reports signal 9 (lldb-server's `X09`).
    let (stub, port) = start_stub(&program);
    let mut lldb = Command::new("lldb-22");
    lldb.arg("-b")
        .args(["-o", "log enable gdb-remote packets", "-o", &format!("gdb-remote {port}"), "-o", "b demo_mix", "-o", "c"])
        .args(["-o", "bt", "-o", "memory region $pc", "-o", "kill"]);
    let out = run_with_timeout(lldb, 60);
    assert!(out.contains("libretracedemo.so`demo_mix(a=0, b=0) at shlib_lib.c:3"), "{out}");
    assert!(out.contains("shlib_main`main at shlib_main.c:6"), "{out}");
    let listed = out.lines().filter(|l| l.contains("read packet: $") && l.contains(&format!("<library name=\"{lib}\""))).count();
    assert!(listed >= 1, "LLDB never received a library list naming {lib}:\n{out}");
    let region = out.lines().find(|l| l.starts_with("[0x")).unwrap_or_default();
    assert!(region.contains(") r-x ") && region.contains(&format!(" {lib}")), "memory region line: {region:?}\n{out}");
    assert!(out.contains("exited with status = 9 (0x00000009) killed"), "{out}");
    assert!(!out.contains("unexpected response"), "{out}");
    assert_eq!(wait_exit(stub), Some(0));

    // GDB: the same list through qXfer, read by GDB's own parser (no warnings)
    // and shown by `info sharedlibrary`.
    let (stub, port) = start_stub(&program);
    let mut gdb = Command::new("gdb");
    gdb.args(["-batch", "-nx", "-ex", "set debug remote 1", "-ex", &format!("target remote 127.0.0.1:{port}")])
        .args(["-ex", "break demo_mix", "-ex", "continue", "-ex", "bt", "-ex", "info sharedlibrary", "-ex", "kill"])
        .arg(&program);
    let out = run_with_timeout(gdb, 60);
    assert!(out.contains("demo_mix (a=0, b=0) at"), "{out}");
    assert!(out.contains("qXfer:libraries-svr4:read"), "GDB did not ask for the list:\n{out}");
    assert!(!out.contains("while parsing target library list"), "{out}");
    let shown = out.lines().find(|l| l.ends_with(lib)).unwrap_or_default();
    assert!(shown.starts_with("0x") && shown.contains("Yes"), "info sharedlibrary line: {shown:?}\n{out}");
    assert!(out.contains("killed"), "{out}");
    assert_eq!(wait_exit(stub), Some(0));
}

#[test]
fn forked_child_runs_on_without_our_breakpoints() {
    if !tools("gdb") {
        return;
    }
    // A breakpoint on _exit, which the forked child calls at once: the child
    // must get the original byte back and be let go (GDB's default), so it
    // exits with 7 and the parent, which checks that, exits normally after
    // stopping at the same breakpoint itself.
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("stub").join("fork");
    let program = build("fork_and_wait", &dir, &["-O0", "-static"]);
    let (stub, port) = start_stub(&program);
    let mut gdb = Command::new("gdb");
    gdb.args(["-batch", "-nx", "-ex", &format!("target remote 127.0.0.1:{port}")])
        .args(["-ex", "break _exit", "-ex", "continue", "-ex", "info threads", "-ex", "continue"])
        .arg(&program);
    let out = run_with_timeout(gdb, 60);
    assert_eq!(out.matches("Breakpoint 1, ").count(), 1, "only the parent stops at _exit:\n{out}");
    assert!(out.contains("exited normally]"), "the child exited 7 (else the parent exits 1):\n{out}");
    assert!(!out.contains("SIGTRAP"), "{out}");
    assert_eq!(wait_exit(stub), Some(0));
}

/// `exec_self`, built for test `name` alone (a program rebuilt while
/// another test runs it reads as "(deleted)" in /proc).
fn exec_self(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("stub").join(name);
    build("exec_self", &dir, &["-O0"])
}

/// The lines of a client's session that say where it stopped and why,
/// every number made `#` (process ids differ between runs).
fn stop_lines(out: &str) -> Vec<String> {
    let words = ["stop reason = ", "frame #0: ", "Breakpoint ", "is executing new program: ", "exited with ", "exited normally", "signal "];
    out.lines()
        .filter(|line| words.iter().any(|w| line.contains(w)))
        // Where a breakpoint was set: before the program runs, the native
        // clients give unrelocated addresses.
        .filter(|line| !(line.starts_with("Breakpoint ") && (line.contains(" at 0x") || line.contains(": where = "))))
        .map(|line| {
            let mut normal = String::new();
            for c in line.trim().chars() {
                if !c.is_ascii_digit() {
                    normal.push(c);
                } else if !normal.ends_with('#') {
                    normal.push('#');
                }
            }
            normal
        })
        .collect()
}

#[test]
fn an_exec_is_followed_as_gdb_follows_it_natively() {
    if !tools("gdb") {
        return;
    }
    let program = exec_self("exec-gdb");
    let commands = ["break again", "break before_exec", "continue", "continue", "bt", "continue"];
    let mut native = Command::new("gdb");
    native.args(["-batch", "-nx", "-ex", "set startup-with-shell off", "-ex", "break again", "-ex", "break before_exec", "-ex", "run"]);
    for command in &commands[3..] {
        native.args(["-ex", command]);
    }
    let native = {
        native.arg(&program);
        run_with_timeout(native, 60)
    };
    let (stub, port) = start_stub(&program);
    let mut gdb = Command::new("gdb");
    gdb.args(["-batch", "-nx", "-ex", &format!("target remote 127.0.0.1:{port}")]);
    for command in commands {
        gdb.args(["-ex", command]);
    }
    let out = {
        gdb.arg(&program);
        run_with_timeout(gdb, 60)
    };
    for expected in ["Breakpoint 2, before_exec ()", "is executing new program: ", "Breakpoint 1, again (n=3) at ", "exited with code 05]"] {
        assert!(native.contains(expected), "native GDB: no {expected:?} in:\n{native}");
        assert!(out.contains(expected), "no {expected:?} in:\n{out}");
    }
    assert_eq!(stop_lines(&out), stop_lines(&native), "GDB against the stub:\n{out}\nnative GDB:\n{native}");
    assert!(!out.contains("SIGTRAP"), "{out}");
    assert_eq!(wait_exit(stub), Some(0));
}

#[test]
fn an_exec_is_followed_as_lldb_follows_it_natively() {
    if !tools("lldb-22") {
        return;
    }
    let program = exec_self("exec-lldb");
    let commands = ["b again", "b before_exec", "c", "c", "bt", "c", "c"];
    let mut native = Command::new("lldb-22");
    native.args(["-b", "-o", "b again", "-o", "b before_exec", "-o", "process launch"]);
    for command in &commands[3..] {
        native.args(["-o", command]);
    }
    let native = {
        native.arg(&program);
        run_with_timeout(native, 60)
    };
    let (stub, port) = start_stub(&program);
    let mut lldb = Command::new("lldb-22");
    lldb.args(["-b", "-o", &format!("gdb-remote 127.0.0.1:{port}")]);
    for command in commands {
        lldb.args(["-o", command]);
    }
    let out = {
        lldb.arg(&program);
        run_with_timeout(lldb, 60)
    };
    for expected in ["stop reason = breakpoint 2.1", "stop reason = exec", "stop reason = breakpoint 1.1", "exec_self`again(n=", "exited with status = 5"] {
        assert!(native.contains(expected), "native LLDB: no {expected:?} in:\n{native}");
        assert!(out.contains(expected), "no {expected:?} in:\n{out}");
    }
    let from_first_stop = |out: &str| stop_lines(out).into_iter().skip_while(|l| !l.contains("breakpoint 2.1")).collect::<Vec<_>>();
    assert_eq!(from_first_stop(&out), from_first_stop(&native), "LLDB against the stub:\n{out}\nnative LLDB:\n{native}");
    assert_eq!(wait_exit(stub), Some(0));
}

/// An exec racing another thread's stops: a thread hits a breakpoint over
/// and over (LLDB continues past it by an ignore count) while the main
/// thread execs, nine times over. An exec met while the stub stops the
/// threads for a breakpoint hit is reported instead of that hit (whose
/// thread went with the old image); LLDB follows every exec to `again`.
#[test]
fn execs_racing_another_threads_breakpoint_hits_are_all_followed() {
    if !tools("lldb-22") {
        return;
    }
    let program = exec_self("exec-race");
    let ticking = PathBuf::from("ticking");
    let nine = PathBuf::from("9");
    let (stub, port) = start_stub_with_args(&program, &[&ticking, &nine]);
    let mut lldb = Command::new("lldb-22");
    lldb.args(["-b", "-o", &format!("gdb-remote 127.0.0.1:{port}")])
        .args(["-o", "settings set target.process.stop-on-exec false", "-o", "b tick", "-o", "breakpoint modify -i 1000000 1", "-o", "b again", "-o", "c", "-o", "c"])
        .arg(&program);
    let out = run_with_timeout(lldb, 120);
    assert!(out.contains("stop reason = breakpoint 2.1") && out.contains("exec_self`again(n="), "{out}");
    assert!(out.contains("exited with status = 5"), "{out}");
    assert_eq!(wait_exit(stub), Some(0));
}

/// The main thread ends with pthread_exit and a worker goes on to a
/// breakpoint: the leader, a zombie now, is no thread to stop (waiting for
/// it to stop hung), so the breakpoint's stop is reported. (The program's
/// memory is read through the leader's /proc entry, gone with it: the
/// session is ended with `kill`.)
#[test]
fn a_breakpoint_after_the_main_thread_exited_stops() {
    if !tools("gdb") {
        return;
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("stub").join("leader_exits");
    let program = build("leader_exits", &dir, &["-O0"]);
    let (stub, port) = start_stub(&program);
    let mut gdb = Command::new("gdb");
    gdb.args(["-batch", "-nx", "-ex", &format!("target remote 127.0.0.1:{port}")])
        .args(["-ex", "break worker_done", "-ex", "continue", "-ex", "kill"])
        .arg(&program);
    let out = run_with_timeout(gdb, 60);
    assert!(out.contains("hit Breakpoint 1, worker_done ()"), "{out}");
    assert!(out.contains("[Inferior 1 (process ") && out.contains(" killed]"), "{out}");
    assert_eq!(wait_exit(stub), Some(0));
}

/// `detach_watch` run natively: its output and exit status.
fn native_run(program: &Path) -> (String, Option<i32>) {
    let out = Command::new(program).output().unwrap();
    (String::from_utf8_lossy(&out.stdout).into_owned(), out.status.code())
}

/// `detach_watch` started here and attached to by the stub; `client`
/// (GDB or LLDB, given the port) breaks in `work`, sets a watchpoint on
/// `counter` and detaches. The program's output and exit status then, and
/// the client's output.
fn attached_and_detached(client: &str, program: &Path, dir: &Path, commands: impl Fn(u16) -> Command) -> (String, Option<i32>, String) {
    let pid_file = dir.join(format!("{client}.pid"));
    let _ = std::fs::remove_file(&pid_file);
    let mut running = Command::new(program).arg(&pid_file).stdout(Stdio::piped()).spawn().unwrap();
    while std::fs::read_to_string(&pid_file).map_or(true, |text| !text.ends_with('\n')) {
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut stub = Command::new(env!("CARGO_BIN_EXE_retrace-stub"))
        .args(["--listen", "127.0.0.1:0", "--attach", &running.id().to_string()])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(stub.stderr.as_mut().unwrap()).read_line(&mut line).unwrap();
    let (_, port) = pid_and_port(&line);
    let session = run_with_timeout(commands(port), 60);
    let _ = stub.stderr.take();
    assert_eq!(wait_exit(stub), Some(0), "{session}");
    let mut output = String::new();
    running.stdout.take().unwrap().read_to_string(&mut output).unwrap();
    let status = running.wait().unwrap();
    (output, status.code(), session)
}

/// A client detaching with a watchpoint set leaves nothing of its own in
/// the program: LLDB detaches without removing its watchpoints (it sends
/// `z0` for its breakpoints, then `D`), and the debug registers left armed
/// killed the program with SIGTRAP at its next write. Its output and exit
/// status after the detach are a native run's, for LLDB and for GDB.
#[test]
fn detaching_with_a_watchpoint_set_leaves_the_program_as_a_native_run() {
    if !tools("lldb-22") || !tools("gdb") {
        return;
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("stub").join("detach-watch");
    let program = build("detach_watch", &dir, &["-O0"]);
    let native = native_run(&program);
    assert_eq!(native, ("counter=500500\n".to_string(), Some((500500 % 251) as i32)));
    let lldb = |port: u16| {
        let mut lldb = Command::new("lldb-22");
        lldb.args(["-b", "-o", &format!("gdb-remote {port}"), "-o", "b work", "-o", "c", "-o", "watchpoint set variable counter", "-o", "process detach"]).arg(&program);
        lldb
    };
    let (output, status, session) = attached_and_detached("lldb", &program, &dir, lldb);
    assert!(session.contains("Watchpoint created") && session.contains("detached"), "{session}");
    assert_eq!((output, status), native, "LLDB detached:\n{session}");
    let gdb = |port: u16| {
        let mut gdb = Command::new("gdb");
        gdb.args(["-batch", "-nx", "-ex", &format!("target remote 127.0.0.1:{port}"), "-ex", "break work", "-ex", "continue", "-ex", "watch counter", "-ex", "detach"]).arg(&program);
        gdb
    };
    let (output, status, session) = attached_and_detached("gdb", &program, &dir, gdb);
    assert!(session.contains("Hardware watchpoint 2: counter") && session.contains("detached"), "{session}");
    assert_eq!((output, status), native, "GDB detached:\n{session}");
}

/// `--listen` as gdbserver takes it: `:PORT` and `PORT` on loopback,
/// `localhost:PORT` resolved; and the program after the options without
/// `--` (it was refused: "invalid socket address syntax", and `--` was
/// required).
#[test]
fn listen_takes_gdbservers_forms_and_the_program_needs_no_double_dash() {
    if !tools("gdb") {
        return;
    }
    let program = debuggee("listen-forms");
    for form in [":0", "0", "localhost:0"] {
        let (stub, line) = common::start_stub_command(&["--listen".as_ref(), form.as_ref(), program.as_os_str()]);
        assert!(line.contains("listening on 127.0.0.1:"), "--listen {form}: {line}");
        let (_, port) = pid_and_port(&line);
        let out = run_with_timeout(
            {
                let mut gdb = Command::new("gdb");
                gdb.args(["-batch", "-nx", "-ex", &format!("target remote 127.0.0.1:{port}"), "-ex", "continue"]).arg(&program);
                gdb
            },
            60,
        );
        assert!(out.contains("exited with code 061]"), "--listen {form}:\n{out}");
        assert_eq!(wait_exit(stub), Some(0));
    }
    let refused = Command::new(env!("CARGO_BIN_EXE_retrace-stub")).args(["--listen", "no:such:thing", "/bin/true"]).output().unwrap();
    assert!(!refused.status.success() && String::from_utf8_lossy(&refused.stderr).contains("is not HOST:PORT, :PORT or PORT"), "{refused:?}");
}

/// A second GDB connecting while a session runs is answered with an error
/// reply it prints, the reason in it (it showed "Connection reset by
/// peer"); the first session goes on.
#[test]
fn a_second_gdb_is_told_why_it_is_turned_away() {
    if !tools("gdb") {
        return;
    }
    let program = debuggee("second-gdb");
    let (stub, port) = start_stub(&program);
    let mut first = TcpStream::connect(("127.0.0.1", port)).unwrap();
    first.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    assert_eq!(exchange(&mut first, "QStartNoAckMode"), "OK");
    let mut gdb = Command::new("gdb");
    gdb.args(["-batch", "-nx", "-ex", &format!("target remote 127.0.0.1:{port}")]).arg(&program);
    let second = std::thread::spawn(move || run_with_timeout(gdb, 30));
    // The stub looks at its listener while it waits for its client.
    std::thread::sleep(Duration::from_millis(500));
    first.write_all(b"$?#3f").unwrap();
    let out = second.join().unwrap();
    assert!(out.contains("Remote failure reply: E.retrace-stub: another debugger is already connected"), "{out}");
    assert!(exchange(&mut first, "?").starts_with('T'), "the first session goes on");
    drop(first);
    assert_eq!(wait_exit(stub), Some(0));
}

/// Reverse commands on a program that is not recorded say how to get
/// reverse execution (GDB said only "Target remote does not support this
/// command"); the program stays where it was, and runs on forwards.
#[test]
fn reverse_commands_without_a_recording_say_how_to_get_one() {
    if !tools("gdb") || !tools("lldb-22") {
        return;
    }
    let program = debuggee("no-history");
    let (stub, port) = start_stub(&program);
    let mut gdb = Command::new("gdb");
    gdb.args(["-batch", "-nx", "-ex", &format!("target remote 127.0.0.1:{port}"), "-ex", "break add", "-ex", "continue"])
        .args(["-ex", "reverse-next", "-ex", "reverse-stepi", "-ex", "reverse-continue", "-ex", "python print('PC=%#x' % int(gdb.parse_and_eval('$pc')))", "-ex", "continue"])
        .arg(&program);
    let out = run_with_timeout(gdb, 60);
    let reason = "retrace-stub: this program is not recorded, so it cannot run backwards: start it with retrace-stub --record";
    assert_eq!(out.matches(reason).count(), 3, "each reverse command says why:\n{out}");
    assert!(!out.contains("does not support this command"), "{out}");
    let breakpoint = common::gdb_breakpoint_address(&out, 1);
    assert!(out.contains(&format!("PC={breakpoint:#x}")), "it stays at the breakpoint:\n{out}");
    assert!(out.contains("exited with code 061]"), "and runs on forwards:\n{out}");
    assert_eq!(wait_exit(stub), Some(0));
    let (stub, port) = start_stub(&program);
    let mut lldb = Command::new("lldb-22");
    lldb.args(["-b", "-o", &format!("gdb-remote {port}"), "-o", "b add", "-o", "c", "-o", "process continue -R"]).arg(&program);
    let out = run_with_timeout(lldb, 60);
    assert!(out.contains("stop reason = this program is not recorded, so it cannot run backwards"), "{out}");
    let _ = wait_exit(stub);
}

/// GDB reads the stub's files as gdbserver serves them (Host I/O): no
/// "unable to open /proc file" warning at connection, and `info proc
/// mappings` lists the program's mappings as /proc has them.
#[test]
fn gdb_reads_proc_files_through_the_stub() {
    if !tools("gdb") {
        return;
    }
    let program = debuggee("host-io");
    let (stub, port, pid) = common::start_stub_listening(&program, &[], "127.0.0.1");
    let mut gdb = Command::new("gdb");
    gdb.args(["-batch", "-nx", "-ex", &format!("target remote 127.0.0.1:{port}"), "-ex", "break add", "-ex", "continue", "-ex", "info proc mappings", "-ex", "kill"]).arg(&program);
    let out = run_with_timeout(gdb, 60);
    assert!(!out.contains("unable to open /proc file"), "{out}");
    assert!(out.contains(&format!("process {pid}")) && out.contains("Mapped address spaces:"), "{out}");
    let program_name = program.file_name().unwrap().to_str().unwrap();
    assert!(out.lines().any(|l| l.contains("r-xp") && l.ends_with(program_name)), "the program's code mapping:\n{out}");
    assert!(out.lines().any(|l| l.trim_end().ends_with("[stack]")), "{out}");
    let _ = wait_exit(stub);
}

/// GDB's `target extended-remote` stays connected after the program ends,
/// as with gdbserver: a script that ends in the program's exit finishes
/// without an error ("Remote connection closed" ended it), `run` is
/// refused with an error, and the stub exits once GDB leaves. With `target
/// remote` GDB leaves at the exit itself; the same script finishes too.
#[test]
fn gdb_in_extended_mode_stays_connected_after_the_exit() {
    if !tools("gdb") {
        return;
    }
    let program = debuggee("extended-exit");
    let dir = program.parent().unwrap();
    for mode in ["extended-remote", "remote"] {
        let (stub, port) = start_stub(&program);
        let script = dir.join(format!("{mode}.gdb"));
        let mut lines = vec![format!("target {mode} 127.0.0.1:{port}")];
        lines.extend(["break add", "continue", "record btrace pt", "next", "record goto begin", "record stop", "continue", "echo AT-EXIT\\n", "info threads"].map(String::from));
        lines.push("echo SCRIPT-END\\n".into());
        std::fs::write(&script, lines.join("\n") + "\n").unwrap();
        let mut gdb = Command::new("gdb");
        gdb.args(["-batch", "-nx", "-x"]).arg(&script);
        if mode == "extended-remote" {
            // (An error ends a script: `run` comes after it.)
            gdb.args(["-ex", "run", "-ex", "info threads"]);
        }
        gdb.arg(&program);
        let out = run_with_timeout(gdb, 60);
        assert!(out.contains("exited with code 061]"), "{mode}: the program ends:\n{out}");
        assert!(out.contains("AT-EXIT\nNo threads.\n"), "{mode}: nothing after the exit is an error:\n{out}");
        assert!(out.contains("SCRIPT-END"), "{mode}: the script runs to its end:\n{out}");
        assert!(!out.contains("Remote connection closed") && !out.contains("Remote communication error"), "{mode}:\n{out}");
        if mode == "extended-remote" {
            assert!(out.contains("Running the default executable on the remote target failed"), "run is refused:\n{out}");
            assert!(out.contains("SCRIPT-END\nNo threads.\n"), "and GDB stays connected:\n{out}");
        }
        assert_eq!(wait_exit(stub), Some(0), "{mode}: the stub exits when GDB leaves");
    }
}

/// After the program ended, a client in extended mode is answered as
/// gdbserver answers it: no threads, no memory, `vRun` refused with the
/// reason, and a detach ends the session and the stub.
#[test]
fn after_the_exit_extended_mode_answers_as_gdbserver() {
    if !tools("gdb") {
        return;
    }
    let program = debuggee("extended-raw");
    let (stub, port) = start_stub(&program);
    let mut client = TcpStream::connect(("127.0.0.1", port)).unwrap();
    client.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    assert_eq!(exchange(&mut client, "QStartNoAckMode"), "OK");
    assert_eq!(exchange(&mut client, "!"), "OK");
    assert!(exchange(&mut client, "?").starts_with("T05"));
    assert_eq!(exchange(&mut client, "Hc-1"), "OK");
    assert!(exchange(&mut client, "vRun;").starts_with("E.retrace-stub serves one program"), "one program per stub, while it lives");
    let exit = exchange(&mut client, "c");
    assert!(exit.starts_with("W31"), "debuggee.c returns 49: {exit}");
    assert_eq!(exchange(&mut client, "qfThreadInfo"), "l");
    assert_eq!(exchange(&mut client, "Hgp0.0"), "E01");
    assert_eq!(exchange(&mut client, "m1000,4"), "E01");
    assert_eq!(exchange(&mut client, "vRun;"), "E.retrace-stub serves one program; start retrace-stub again to run another");
    assert_eq!(exchange(&mut client, "qNoSuchQuery"), "");
    assert_eq!(exchange(&mut client, "D"), "OK");
    assert_eq!(common::read_packet(&mut client), None, "the session ended");
    assert_eq!(wait_exit(stub), Some(0));
}
