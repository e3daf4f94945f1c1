//! retrace-stub under hostile and malformed input: every byte sequence that
//! once ended the session, panicked, hung or grew without bound (found
//! against c049ea3) sent to a
//! real stub. Each gets a reply (for `-`, the last packet again); then `?`
//! is answered and the program is still there.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

mod common;

use common::{alive, framed, read_packet, start_stub_listening, wait_exit};
use retrace_tests::recordings::build;
use retrace_tests::tools::{require, which};

/// The idle loop, built once for all the tests of this file (they run at
/// once: each building it would replace the file another is starting).
fn program() -> Option<PathBuf> {
    static PROGRAM: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();
    PROGRAM
        .get_or_init(|| {
            require("gcc", which("gcc").is_some())
                .then(|| build("idle_loop", &Path::new(env!("CARGO_TARGET_TMPDIR")).join("stub-hostile"), &["-O0"]))
        })
        .clone()
}

/// A fresh stub on the idle loop, a client connected.
struct Session {
    stub: Child,
    stream: TcpStream,
    pid: i32,
    port: u16,
}

impl Session {
    fn new(program: &Path) -> Session {
        let (stub, port, pid) = start_stub_listening(program, &[], "127.0.0.1");
        let stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        Session { stub, stream, pid, port }
    }

    fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).unwrap();
    }

    /// Sends `body` as a packet and returns the reply's body.
    fn ask(&mut self, body: &[u8]) -> String {
        self.send(&framed(body));
        self.reply(body)
    }

    fn reply(&mut self, what: &[u8]) -> String {
        read_packet(&mut self.stream).unwrap_or_else(|| panic!("no reply to {:?}", String::from_utf8_lossy(what)))
    }

    /// `?` is answered with a stop reply, and the program is there.
    fn still_serving(&mut self, case: &str) {
        let reply = self.ask(b"?");
        assert!(reply.starts_with('T') || reply.starts_with('S'), "{case}: `?` answered {reply:?}");
        assert!(alive(self.pid), "{case}: the program is gone");
    }

    /// The stub's peak resident memory, in KiB.
    fn stub_peak_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.stub.id())).unwrap();
        status.lines().find_map(|l| l.strip_prefix("VmHWM:")).and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok()).unwrap()
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let _ = self.stub.kill();
        let _ = self.stub.wait();
    }
}

/// One packet that used to end the session, and what it must be answered.
fn single_packet_cases() -> Vec<(Vec<u8>, &'static str)> {
    let mut cases: Vec<(Vec<u8>, &'static str)> = vec![
        (b"qSupported".to_vec(), "PacketSize=1000"),
        (b"qSupported:".to_vec(), "PacketSize=1000"),
        (b"D;0".to_vec(), "E16"),
        (b"vKill".to_vec(), "E16"),
        (b"qThreadExtraInfo".to_vec(), "E16"),
        (b"qC1".to_vec(), "E16"),
        (b"QStartNoAckMode:x".to_vec(), "E16"),
        (b"qXfer:features:read:foo.xml:0,10".to_vec(), "E16"),
        (b"qXfer:exec-file:read:zz:0,10".to_vec(), "E16"),
        (b"vRun;zz".to_vec(), "E16"),
        (b"vAttach;zz".to_vec(), "E16"),
        (b"QSetWorkingDir:zz".to_vec(), "E16"),
        (b"Hg-1".to_vec(), "E16"),
        (b"_Mzz,rwx".to_vec(), "E16"),
        (b"_m".to_vec(), "E16"),
        (b"Hgp1".to_vec(), "E16"),
        (b"T-1".to_vec(), "E16"),
        (b"vCont;s".to_vec(), "E16"),
        (b"vCont;S05".to_vec(), "E16"),
        (b"vCont;s:p-1.-1".to_vec(), "E16"),
        (b"vCont;c:p0.0".to_vec(), "E16"),
        (b"X555555558020,1:}".to_vec(), "E16"),
        (b"X555555558020,2:\x01}".to_vec(), "E16"),
        (b"X555555558020,2:}}}".to_vec(), "E16"),
        (b"m0,10000000000000000".to_vec(), "E16"),
        (b"p10000000000000000".to_vec(), "E16"),
        (b"P10000000000000000=00".to_vec(), "E16"),
        // A body starting with a multi-byte UTF-8 character (it panicked):
        // no command gdbstub knows, answered empty.
        ("é".as_bytes().to_vec(), ""),
        // Resumes that could never stop (they hung): no `Hc` before `c`, no such thread.
        (b"c".to_vec(), "E16"),
        (b"vCont;c:99999".to_vec(), "E16"),
        (b"vCont;s:99999".to_vec(), "E16"),
        (b"vCont;s:p1.1".to_vec(), "E16"),
        // Host I/O: files are read, never written; bad arguments are errors.
        (b"vFile:open:2f6e6f2f73756368,0,0".to_vec(), "F-1,02"),
        (b"vFile:open:2f746d70,601,1a4".to_vec(), "F-1,0d"),
        (b"vFile:pread:3e7,10,0".to_vec(), "F-1,09"),
        (b"vFile:close:3e7".to_vec(), "F-1,09"),
        (b"vFile:open:zz,0,0".to_vec(), "E16"),
        (b"vFile:pread:0,ffffffffffffffffff,0".to_vec(), "E16"),
        (b"vFile:pwrite:0,0,abc".to_vec(), "E16"),
    ];
    // An address of nine bytes in every command that takes one.
    for packet in ["m112233445566778899,1", "M112233445566778899,1:00", "X112233445566778899,1:a", "Z0,112233445566778899,1", "z0,112233445566778899,1"] {
        cases.push((packet.as_bytes().to_vec(), "E16"));
    }
    cases
}

#[test]
fn every_single_packet_is_answered_and_the_session_goes_on() {
    let Some(program) = program() else { return };
    for (packet, expected) in single_packet_cases() {
        let case = String::from_utf8_lossy(&packet).into_owned();
        let mut session = Session::new(&program);
        let reply = session.ask(&packet);
        assert!(if expected.is_empty() { reply.is_empty() } else { reply.contains(expected) }, "{case}: answered {reply:?}, expected {expected:?}");
        session.still_serving(&case);
    }
}

#[test]
fn packet_pairs_that_used_to_end_the_session() {
    let Some(program) = program() else { return };
    // `Hc-1` then `s`: a step of every thread.
    let mut session = Session::new(&program);
    assert_eq!(session.ask(b"Hc-1"), "OK");
    assert_eq!(session.ask(b"s"), "E16");
    session.still_serving("Hc-1, s");
    // `!` then `R00`: restarting is not offered.
    let mut session = Session::new(&program);
    assert_eq!(session.ask(b"!"), "OK");
    assert_eq!(session.ask(b"R00"), "E16");
    session.still_serving("!, R00");
}

#[test]
fn a_nak_gets_the_last_packet_again_and_stray_bytes_are_skipped() {
    let Some(program) = program() else { return };
    let mut session = Session::new(&program);
    let first = session.ask(b"?");
    assert!(first.starts_with('T'), "{first}");
    session.send(b"-");
    assert_eq!(session.reply(b"-"), first, "the NAK is answered with the last packet");
    for stray in [&b"\n"[..], b" ", b"x", b"\0"] {
        let mut bytes = framed(b"?");
        bytes.extend_from_slice(stray);
        bytes.extend(framed(b"qC"));
        session.send(&bytes);
        assert!(session.reply(b"?").starts_with('T'));
        let current = session.reply(b"qC");
        assert!(current.starts_with("QC"), "{stray:?}: {current}");
    }
    // A NAK before anything was sent has nothing to repeat; the next packet is answered.
    let mut fresh = Session::new(&program);
    fresh.send(b"-");
    fresh.still_serving("a first NAK");
}

#[test]
fn packets_while_the_program_runs_are_answered_and_ctrl_c_still_stops_it() {
    let Some(program) = program() else { return };
    let mut session = Session::new(&program);
    // A Ctrl-C while the program is stopped has nothing to stop: the next
    // resume runs (no stop reply comes until the next Ctrl-C).
    session.send(&[0x03]);
    session.still_serving("a Ctrl-C while stopped");
    // A resume is acknowledged at once (acks are on), not with its stop.
    session.send(&framed(b"vCont;c"));
    let mut ack = [0u8; 1];
    session.stream.set_read_timeout(Some(Duration::from_millis(500))).unwrap();
    session.stream.read_exact(&mut ack).expect("the resume is acknowledged at once");
    assert_eq!(&ack, b"+");
    assert_eq!(read_packet(&mut session.stream), None, "the program runs: no stop reply");
    session.stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    for packet in [&b"mzz,4"[..], b"garbage", b"g", b"?"] {
        assert_eq!(session.ask(packet), "E16", "{} while running", String::from_utf8_lossy(packet));
    }
    session.send(&[0x03]);
    let stop = session.reply(b"\x03");
    assert!(stop.starts_with('T'), "{stop}");
    session.still_serving("packets while running");
}

#[test]
fn a_reset_connection_ends_the_session_and_the_program() {
    use std::os::fd::AsRawFd;
    let Some(program) = program() else { return };
    let (stub, port, pid) = start_stub_listening(&program, &[], "127.0.0.1");
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    stream.write_all(&framed(b"?")).unwrap();
    assert!(read_packet(&mut stream).is_some_and(|r| r.starts_with('T')));
    // SO_LINGER with a zero timeout: closing sends RST instead of FIN.
    let linger = libc::linger { l_onoff: 1, l_linger: 0 };
    // SAFETY: a valid socket and an option of the size given.
    let rc = unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            &linger as *const libc::linger as *const libc::c_void,
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        )
    };
    assert_eq!(rc, 0, "setsockopt(SO_LINGER)");
    drop(stream);
    assert_eq!(wait_exit(stub), Some(0), "the stub ends normally");
    let deadline = Instant::now() + Duration::from_secs(5);
    while alive(pid) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!alive(pid), "the program is killed with the session");
}

#[test]
fn memory_stays_bounded_and_replies_fit_the_packet_size() {
    let Some(program) = program() else { return };
    let mut session = Session::new(&program);
    session.still_serving("start");
    let before = session.stub_peak_kib();
    // `$` and 64 MiB without `#`, then the end of the packet: refused, nothing kept.
    session.send(b"$");
    let chunk = vec![b'a'; 1 << 20];
    for _ in 0..64 {
        session.send(&chunk);
    }
    let sum = ((64u64 << 20) * b'a' as u64 % 256) as u8;
    session.send(format!("#{sum:02x}").as_bytes());
    assert_eq!(session.reply(b"64 MiB"), "E16");
    let after = session.stub_peak_kib();
    assert!(after < before + 8 * 1024, "peak RSS grew from {before} KiB to {after} KiB");
    session.still_serving("64 MiB packet");
    // `$` and 8 MiB without `#`: the next `$` begins the next packet, which
    // is answered (the unfinished one is dropped, as GDB's reader drops it).
    session.send(b"$");
    for _ in 0..8 {
        session.send(&chunk);
    }
    session.still_serving("8 MiB unterminated, then `$?#3f`");
    assert!(session.stub_peak_kib() < before + 8 * 1024, "nothing of the unfinished packet kept");
    // Reads far longer than a reply can carry get what fits: data, never an error after it.
    let code = session.ask(b"qXfer:exec-file:read::0,ffb");
    assert!(code.starts_with('l') || code.starts_with('m'), "{code}");
    let maps = std::fs::read_to_string(format!("/proc/{}/maps", session.pid)).unwrap();
    let start = maps.lines().next().and_then(|l| l.split('-').next()).unwrap().to_string();
    for length in ["40000000", "ffffffffffffffff"] {
        let reply = session.ask(format!("m{start},{length}").as_bytes());
        assert!(reply.len() <= 4096 - 4, "m{start},{length}: {} bytes", reply.len());
        // Replies may be run-length encoded (`x*n`: n - 29 more of x).
        let data = common::run_length_decoded(&reply);
        assert!(data.len() <= 4096 - 4, "m{start},{length}: {} hex digits", data.len());
        assert!(!data.is_empty() && data.bytes().all(|b| b.is_ascii_hexdigit()) && data.len() % 2 == 0, "m{start},{length}: {reply:.80}");
    }
    let peak = session.stub_peak_kib();
    assert!(peak < before + 8 * 1024, "peak RSS grew from {before} KiB to {peak} KiB");
    session.still_serving("long reads");
}

#[test]
fn a_second_client_is_told_at_once() {
    let Some(program) = program() else { return };
    let session = Session::new(&program);
    let mut second = TcpStream::connect(("127.0.0.1", session.port)).unwrap();
    second.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    let mut message = String::new();
    let _ = second.read_to_string(&mut message);
    assert!(message.contains("another debugger is already connected"), "{message:?}");
}

#[test]
fn listening_beyond_loopback_warns() {
    let Some(program) = program() else { return };
    let mut stub = std::process::Command::new(env!("CARGO_BIN_EXE_retrace-stub"))
        .args(["--listen", "0.0.0.0:0", "--"])
        .arg(&program)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = std::io::BufReader::new(stub.stderr.take().unwrap());
    let mut first = String::new();
    std::io::BufRead::read_line(&mut stderr, &mut first).unwrap();
    // Stop the stub only once it has launched the program (killed while
    // launching, it would leave the program running untraced).
    let mut listening = String::new();
    while !listening.contains("listening on") {
        listening.clear();
        assert!(std::io::BufRead::read_line(&mut stderr, &mut listening).unwrap() > 0, "the stub ended before listening");
    }
    let (pid, _) = common::pid_and_port(&listening);
    let _ = stub.kill();
    let _ = stub.wait();
    assert!(first.contains("warning") && first.contains("anyone who can reach it"), "{first}");
    let deadline = Instant::now() + Duration::from_secs(5);
    while alive(pid) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!alive(pid), "the program outlived its stub");
}

/// Packets a client sends, for the random test to mutate. Writes to memory
/// and registers and breakpoints at random addresses are left out (a client
/// may crash its program with them, and that is not the stub's failure),
/// and so are the packets that end a session (`k`, `vKill`, `D`).
const TEMPLATES: [&str; 24] = [
    "g", "m555555554000,40", "m7ffff7fe4b70,ffff", "p10", "p0", "Hg0", "Hc-1", "Hc0", "T1", "qC", "qfThreadInfo",
    "qXfer:features:read:target.xml:0,fff", "qXfer:auxv:read::0,131071", "qXfer:libraries-svr4:read::0,fff",
    "qSupported:multiprocess+;xmlRegisters=i386", "jThreadsInfo", "qMemoryRegionInfo:555555554000", "qAttached",
    "vCont?", "vCont;c", "vCont;s:p1.1", "c", "s", "qThreadExtraInfo,1",
];

/// A packet body from a template: as it is, with bytes changed, inserted,
/// dropped or cut, or random bytes.
fn random_body(rng: &mut retrace_tests::rng::Rng, pid: i32) -> Vec<u8> {
    let template = TEMPLATES[rng.below(TEMPLATES.len() as u64) as usize].replace("p1.1", &format!("p{pid:x}.{pid:x}"));
    let mut body = template.into_bytes();
    match rng.below(6) {
        0 => {}
        1 => {
            for _ in 0..rng.range(1, 4) {
                let at = rng.below(body.len() as u64) as usize;
                body[at] = rng.bits(8) as u8;
            }
        }
        2 => {
            let at = rng.below(body.len() as u64 + 1) as usize;
            body.insert(at, b"0123456789abcdef,:;-p.$#}*"[rng.below(26) as usize]);
        }
        3 => {
            let at = rng.below(body.len() as u64) as usize;
            body.remove(at);
        }
        4 => body.truncate(rng.below(body.len() as u64) as usize),
        _ => body = (0..rng.range(1, 40)).map(|_| rng.bits(8) as u8).collect(),
    }
    // Whatever would end the session on purpose is not random input.
    if matches!(body.first(), Some(b'k' | b'D')) || body.starts_with(b"vKill") {
        body[0] = b'?';
    }
    body
}

/// A fixed-seed stream of random framed packets to a real stub (bounded in
/// count and time): after each, `?` is answered — after a Ctrl-C when the
/// packet set the program running — and the program is alive.
#[test]
fn random_packets_never_end_the_session() {
    let Some(program) = program() else { return };
    // A fixed seed; RETRACE_STUB_FUZZ_SEED explores others.
    let seed = std::env::var("RETRACE_STUB_FUZZ_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0x5eed_2026);
    let mut rng = retrace_tests::rng::Rng::new(seed);
    let mut session = Session::new(&program);
    session.stream.set_read_timeout(Some(Duration::from_millis(60))).unwrap();
    let started = Instant::now();
    let mut sent = 0;
    while sent < 1500 && started.elapsed() < Duration::from_secs(45) {
        let body = random_body(&mut rng, session.pid);
        let case = String::from_utf8_lossy(&body).into_owned();
        if session.stream.write_all(&framed(&body)).is_err() {
            panic!("seed {seed}, packet {sent} ({case:?}): the stub closed the connection");
        }
        // Its reply, if any (a resume has none until the program stops).
        while read_packet(&mut session.stream).is_some() {}
        session.send(&framed(b"?"));
        let mut reply = read_packet(&mut session.stream).unwrap_or_default();
        if reply == "E16" || reply.is_empty() {
            // The program runs: stop it.
            session.send(&[0x03]);
            session.stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let stop = read_packet(&mut session.stream);
            assert!(stop.as_deref().is_some_and(|s| s.starts_with('T') || s.starts_with('S')), "after {case:?}: Ctrl-C answered {stop:?}");
            session.stream.set_read_timeout(Some(Duration::from_millis(60))).unwrap();
            while read_packet(&mut session.stream).is_some() {}
            session.send(&framed(b"?"));
            reply = read_packet(&mut session.stream).unwrap_or_default();
        }
        assert!(reply.starts_with('T') || reply.starts_with('S'), "seed {seed}, after {case:?} (packet {sent}): `?` answered {reply:?}");
        assert!(alive(session.pid), "seed {seed}, after {case:?} (packet {sent}): the program is gone");
        sent += 1;
    }
    assert!(sent >= 100, "only {sent} packets in the time allowed");
    eprintln!("{sent} random packets in {:.1} s", started.elapsed().as_secs_f64());
}
