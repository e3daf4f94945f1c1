//! Stepping speed: a scripted client does N single steps (`vCont;s:<tid>`),
//! each followed by a full register read (`g`), against retrace-stub and
//! against `lldb-server-22 gdbserver` on the same program, in one run.
//! `cargo bench -p retrace-stub --bench stepping` (`RETRACE_BENCH_STEPS`, default 1000).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

struct Client {
    stream: TcpStream,
}

impl Client {
    fn connect(port: u16) -> Client {
        for _ in 0..200 {
            if let Ok(stream) = TcpStream::connect(("127.0.0.1", port)) {
                stream.set_nodelay(true).unwrap();
                return Client { stream };
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("server on port {port} never listened");
    }

    fn send(&mut self, payload: &str) {
        let sum = payload.bytes().fold(0u8, |s, b| s.wrapping_add(b));
        self.stream.write_all(format!("${payload}#{sum:02x}").as_bytes()).unwrap();
    }

    fn reply(&mut self) -> String {
        let mut out = Vec::new();
        let mut byte = [0u8; 1];
        let mut left: Option<u8> = None;
        loop {
            self.stream.read_exact(&mut byte).unwrap();
            if out.is_empty() && byte[0] != b'$' {
                continue; // acks
            }
            out.push(byte[0]);
            match &mut left {
                Some(n) => {
                    *n -= 1;
                    if *n == 0 {
                        break;
                    }
                }
                None if byte[0] == b'#' => left = Some(2),
                None => {}
            }
        }
        String::from_utf8_lossy(&out).into_owned()
    }

    fn exchange(&mut self, payload: &str) -> String {
        self.send(payload);
        self.reply()
    }
}

/// The thread id as the server writes it in a `?` stop reply.
fn thread_of(stop: &str) -> String {
    let at = stop.find("thread:").expect("stop reply names a thread") + 7;
    stop[at..].split(';').next().unwrap().to_string()
}

fn session(port: u16, steps: usize) -> f64 {
    let mut client = Client::connect(port);
    client.stream.write_all(b"+").unwrap();
    assert!(client.exchange("QStartNoAckMode").contains("OK"));
    client.stream.write_all(b"+").unwrap(); // ack the OK; no acks from here on
    let tid = thread_of(&client.exchange("?"));
    let start = Instant::now();
    for _ in 0..steps {
        let stop = client.exchange(&format!("vCont;s:{tid}"));
        assert!(stop.starts_with("$T05"), "step reply {stop}");
        let regs = client.exchange("g");
        assert!(regs.starts_with('$') && !regs.starts_with("$E"), "register reply {regs}");
    }
    let seconds = start.elapsed().as_secs_f64();
    client.send("k");
    seconds
}

fn wait(mut child: Child) {
    for _ in 0..100 {
        if child.try_wait().unwrap().is_some() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
}

fn main() {
    let steps: usize = std::env::var("RETRACE_BENCH_STEPS").ok().and_then(|v| v.parse().ok()).unwrap_or(1000);
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("bench-stepping");
    std::fs::create_dir_all(&dir).unwrap();
    let exe = dir.join("bench_loop");
    let source = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/programs/bench_loop.c");
    assert!(Command::new("gcc").args(["-O1", "-static", "-o"]).arg(&exe).arg(source).status().unwrap().success());

    let port = free_port();
    let mut ours = Command::new(env!("CARGO_BIN_EXE_retrace-stub"))
        .args(["--listen", &format!("127.0.0.1:{port}"), "--"])
        .arg(&exe)
        .arg("100000")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(ours.stderr.as_mut().unwrap()).read_line(&mut line).unwrap();
    let t_ours = session(port, steps);
    wait(ours);

    let port = free_port();
    let theirs = Command::new("lldb-server-22")
        .args(["gdbserver", &format!("127.0.0.1:{port}"), "--"])
        .arg(&exe)
        .arg("100000")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("lldb-server-22");
    let t_theirs = session(port, steps);
    wait(theirs);

    println!("{steps} single steps, each followed by a full register read (g), same static program");
    println!("{:<28} {:>10} {:>14}", "server", "seconds", "µs per step");
    for (name, t) in [("retrace-stub", t_ours), ("lldb-server-22 gdbserver", t_theirs)] {
        println!("{name:<28} {t:>10.3} {:>14.1}", t / steps as f64 * 1e6);
    }
    println!("retrace-stub / lldb-server time: {:.2}x (goal <= 1.2x)", t_ours / t_theirs);
}
