//! The connection loop: one client on a TCP socket, gdbstub's state machine
//! behind a small packet framer (which answers `qProcessInfo` itself: gdbstub
//! 0.7.10 writes the pid in decimal where LLDB reads hex), and ptrace stops
//! turned into stop replies (all-stop: when one thread stops, the others are
//! stopped too).

use std::collections::{BTreeSet, VecDeque};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsFd;

use gdbstub::common::Signal as GdbSignal;
use gdbstub::conn::Connection;
use gdbstub::stub::state_machine::GdbStubStateMachine;
use gdbstub::stub::{DisconnectReason, GdbStub, MultiThreadStopReason};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::ptrace;
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::SignalFd;
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

use crate::target::{tid_of, ProcessTarget};

type StopReason = MultiThreadStopReason<u64>;

/// A connection that buffers replies and sends each in one write on flush
/// (gdbstub's own TcpStream connection writes every byte separately).
pub struct BufferedConnection {
    stream: TcpStream,
    out: Vec<u8>,
}

impl Connection for BufferedConnection {
    type Error = std::io::Error;

    fn write(&mut self, byte: u8) -> Result<(), Self::Error> {
        self.out.push(byte);
        Ok(())
    }

    fn write_all(&mut self, buf: &[u8]) -> Result<(), Self::Error> {
        self.out.extend_from_slice(buf);
        Ok(())
    }

    fn flush(&mut self) -> Result<(), Self::Error> {
        tracing::debug!(reply = %String::from_utf8_lossy(&self.out), "<-");
        Write::write_all(&mut self.stream, &self.out)?;
        self.out.clear();
        Write::flush(&mut self.stream)
    }
}

/// Splits the client's byte stream into packets, so some can be answered
/// here instead of by gdbstub.
#[derive(Default)]
struct Framer {
    packet: Option<Vec<u8>>,
    checksum_left: usize,
}

enum Framed {
    /// Bytes for gdbstub, unchanged.
    Forward(Vec<u8>),
    /// A complete packet body (between `$` and `#`), still escaped.
    Packet(Vec<u8>, Vec<u8>),
}

impl Framer {
    fn feed(&mut self, byte: u8) -> Option<Framed> {
        match &mut self.packet {
            None if byte == b'$' => {
                self.packet = Some(vec![byte]);
                None
            }
            None => Some(Framed::Forward(vec![byte])),
            Some(raw) if self.checksum_left > 0 => {
                raw.push(byte);
                self.checksum_left -= 1;
                if self.checksum_left == 0 {
                    let raw = self.packet.take().expect("in a packet");
                    let end = raw.iter().rposition(|&b| b == b'#').expect("has #");
                    let body = raw[1..end].to_vec();
                    return Some(Framed::Packet(body, raw));
                }
                None
            }
            Some(raw) => {
                raw.push(byte);
                if byte == b'#' {
                    self.checksum_left = 2;
                }
                None
            }
        }
    }
}

fn escape_and_frame(payload: &[u8]) -> Vec<u8> {
    let mut body = Vec::with_capacity(payload.len() + 4);
    for &b in payload {
        if matches!(b, b'#' | b'$' | b'}' | b'*') {
            body.push(b'}');
            body.push(b ^ 0x20);
        } else {
            body.push(b);
        }
    }
    let checksum = body.iter().fold(0u8, |sum, b| sum.wrapping_add(*b));
    let mut packet = vec![b'$'];
    packet.extend_from_slice(&body);
    packet.extend_from_slice(format!("#{checksum:02x}").as_bytes());
    packet
}

pub(crate) fn hex(text: &str) -> String {
    text.bytes().map(|b| format!("{b:02x}")).collect()
}

fn is_hex(text: &str) -> bool {
    !text.is_empty() && text.bytes().all(|b| b.is_ascii_hexdigit())
}

fn is_thread_id(text: &str) -> bool {
    let part = |p: &str| p == "-1" || is_hex(p);
    match text.strip_prefix('p') {
        Some(rest) => rest.split('.').count() <= 2 && rest.split('.').all(part),
        None => part(text),
    }
}

fn is_address_length(text: &str) -> bool {
    text.split_once(',').is_some_and(|(a, l)| is_hex(a) && is_hex(l))
}

/// True for a packet of a command gdbstub parses strictly that does not
/// follow that command's grammar: gdbstub 0.7.10 treats those as fatal and
/// drops the connection, so they are answered with an error here instead.
fn malformed(body: &[u8]) -> bool {
    let Ok(text) = std::str::from_utf8(body) else { return !matches!(body.first(), Some(b'X')) };
    let rest = &text[text.len().min(1)..];
    match text.as_bytes().first() {
        Some(b'm') => !is_address_length(rest),
        Some(b'M') => !rest.split_once(':').is_some_and(|(head, data)| is_address_length(head) && data.len() % 2 == 0 && (data.is_empty() || is_hex(data))),
        Some(b'X') => !rest.split_once(':').is_some_and(|(head, _)| is_address_length(head)),
        Some(b'Z' | b'z') => {
            let head = rest.split(';').next().unwrap_or("");
            let fields: Vec<&str> = head.split(',').collect();
            !(fields.len() == 3 && matches!(fields[0], "0" | "1" | "2" | "3" | "4") && is_hex(fields[1]) && is_hex(fields[2]))
        }
        Some(b'p') => !is_hex(rest),
        Some(b'P') => !rest.split_once('=').is_some_and(|(n, v)| is_hex(n) && is_hex(v)),
        Some(b'g') => text != "g",
        Some(b'G') => !(is_hex(rest) && rest.len() % 2 == 0),
        Some(b'H') => !(rest.len() >= 2 && matches!(rest.as_bytes()[0], b'g' | b'c') && is_thread_id(&rest[1..])),
        Some(b'T') => !is_thread_id(rest),
        Some(b'c' | b's') => !(rest.is_empty() || is_hex(rest)),
        Some(b'?') => text != "?",
        Some(b'k') => text != "k",
        Some(b'v') if text.starts_with("vCont;") => !text["vCont;".len()..].split(';').all(|action| {
            let (kind, thread) = match action.split_once(':') {
                Some((kind, thread)) => (kind, Some(thread)),
                None => (action, None),
            };
            let kind_ok = matches!(kind, "c" | "s") || (kind.len() == 3 && matches!(&kind[..1], "C" | "S") && is_hex(&kind[1..]));
            kind_ok && thread.is_none_or(is_thread_id)
        }),
        Some(b'q') if text.starts_with("qXfer:") => !text.rsplit(':').next().is_some_and(is_address_length),
        _ => false,
    }
}

/// Acknowledges a packet the framer answers itself and sends `payload`.
fn answer(conn: &mut BufferedConnection, no_ack: bool, payload: &[u8]) -> std::io::Result<()> {
    if !no_ack {
        Connection::write(conn, b'+')?;
    }
    Connection::write_all(conn, &escape_and_frame(payload))?;
    Connection::flush(conn)
}

/// A reply for packets answered here, or `None` to let gdbstub answer.
fn intercept(body: &[u8], target: &ProcessTarget) -> Option<Vec<u8>> {
    match body {
        b"qProcessInfo" => {
            let parent = nix::unistd::getpid();
            let (uid, gid) = (nix::unistd::getuid().as_raw(), nix::unistd::getgid().as_raw());
            Some(
                format!(
                    "pid:{:x};parent-pid:{:x};real-uid:{uid:x};real-gid:{gid:x};effective-uid:{uid:x};effective-gid:{gid:x};triple:{};ostype:linux;endian:little;ptrsize:8;",
                    target.pid.as_raw(),
                    parent.as_raw(),
                    hex("x86_64-pc-linux-gnu")
                )
                .into_bytes(),
            )
        }
        b"QEnableErrorStrings" => Some(b"OK".to_vec()),
        _ if body.starts_with(b"qMemoryRegionInfo:") => {
            let address = std::str::from_utf8(&body[b"qMemoryRegionInfo:".len()..]).ok().and_then(|a| u64::from_str_radix(a, 16).ok());
            Some(match (address, retrace_collector::process::read_maps(target.pid)) {
                (Some(address), Ok(maps)) => crate::loader::memory_region_info(&maps, address).into_bytes(),
                (None, _) => b"E16".to_vec(),
                (_, Err(_)) => b"E01".to_vec(),
            })
        }
        _ => None,
    }
}

/// How the session ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionEnd {
    /// The program exited or was killed by a signal.
    ProgramEnded,
    /// The client detached (the program keeps running).
    Detached,
    /// The client killed the program.
    Killed,
    /// The client went away; the program was killed.
    ClientGone,
}

/// Stops every running thread except `except`, waiting for each to stop.
/// A thread that stopped at one of our breakpoints in the meantime is backed
/// up so it hits it again later.
fn stop_others(target: &mut ProcessTarget, except: Option<Pid>) {
    let others: Vec<Pid> = target.running.iter().copied().filter(|t| Some(*t) != except).collect();
    for tid in &others {
        // SAFETY: tgkill has no memory-safety preconditions.
        unsafe { libc::syscall(libc::SYS_tgkill, target.pid.as_raw(), tid.as_raw(), libc::SIGSTOP) };
    }
    for tid in others {
        loop {
            match waitpid(tid, Some(WaitPidFlag::__WALL)) {
                Ok(WaitStatus::Stopped(_, Signal::SIGSTOP)) => break,
                Ok(WaitStatus::Stopped(_, Signal::SIGTRAP)) => {
                    if let Ok(mut regs) = ptrace::getregs(tid) {
                        if target.has_breakpoint(regs.rip.wrapping_sub(1)) {
                            regs.rip -= 1;
                            let _ = ptrace::setregs(tid, regs);
                        }
                    }
                    // The SIGSTOP is still pending: collect it.
                    let _ = ptrace::cont(tid, None);
                }
                Ok(WaitStatus::Stopped(_, _)) | Ok(WaitStatus::PtraceEvent(..)) => {
                    let _ = ptrace::cont(tid, None);
                }
                _ => {
                    target.threads.remove(&tid);
                    break;
                }
            }
        }
        target.running.remove(&tid);
    }
}

/// Collects ptrace events until one must be reported to the client.
fn next_stop(target: &mut ProcessTarget, new_threads: &mut BTreeSet<Pid>, interrupted: bool) -> Option<StopReason> {
    loop {
        let status = match waitpid(None, Some(WaitPidFlag::__WALL | WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) => return None,
            Ok(status) => status,
            Err(_) => return Some(StopReason::Exited(0)),
        };
        tracing::debug!(?status, "ptrace");
        match status {
            WaitStatus::PtraceEvent(tid, _, event) if event == libc::PTRACE_EVENT_CLONE => {
                if let Ok(new) = ptrace::getevent(tid) {
                    let new = Pid::from_raw(new as i32);
                    target.threads.insert(new);
                    new_threads.insert(new);
                }
                let _ = ptrace::cont(tid, None);
            }
            WaitStatus::PtraceEvent(tid, _, _) => {
                let _ = ptrace::cont(tid, None);
            }
            WaitStatus::Stopped(tid, Signal::SIGSTOP) if new_threads.remove(&tid) || !target.threads.contains(&tid) => {
                // A new thread's first stop: let it run with the others, unless
                // only some threads may run now (a step with the others held,
                // while the client has lifted breakpoints): then it waits for
                // the next resume.
                target.threads.insert(tid);
                target.init_thread_debug_registers();
                if !target.scheduler_locked && ptrace::cont(tid, None).is_ok() {
                    target.running.insert(tid);
                }
            }
            WaitStatus::Stopped(tid, Signal::SIGSTOP) if interrupted => {
                target.running.remove(&tid);
                stop_others(target, Some(tid));
                return Some(StopReason::SignalWithThread { tid: tid_of(tid), signal: GdbSignal::SIGINT });
            }
            WaitStatus::Stopped(tid, Signal::SIGTRAP) => {
                target.running.remove(&tid);
                let stepped = target.stepping.contains(&tid);
                stop_others(target, Some(tid));
                let mut reason = StopReason::SignalWithThread { tid: tid_of(tid), signal: GdbSignal::SIGTRAP };
                if let Some(slot) = crate::target::triggered_slot(tid).and_then(|i| target.debug_slots[i]) {
                    return Some(match slot.watch {
                        Some(kind) => StopReason::Watch { tid: tid_of(tid), kind, addr: slot.address },
                        None => StopReason::HwBreak(tid_of(tid)),
                    });
                }
                if !stepped {
                    if let Ok(mut regs) = ptrace::getregs(tid) {
                        if target.has_breakpoint(regs.rip.wrapping_sub(1)) {
                            regs.rip -= 1;
                            let _ = ptrace::setregs(tid, regs);
                            reason = StopReason::SwBreak(tid_of(tid));
                        }
                    }
                }
                return Some(reason);
            }
            WaitStatus::Stopped(tid, signal) => {
                target.running.remove(&tid);
                stop_others(target, Some(tid));
                return Some(StopReason::SignalWithThread { tid: tid_of(tid), signal: crate::signals::to_gdb(signal) });
            }
            WaitStatus::Exited(tid, code) => {
                target.threads.remove(&tid);
                target.running.remove(&tid);
                if tid == target.pid {
                    return Some(StopReason::Exited(code as u8));
                }
            }
            WaitStatus::Signaled(tid, signal, _) => {
                target.threads.remove(&tid);
                target.running.remove(&tid);
                if tid == target.pid {
                    return Some(StopReason::Terminated(crate::signals::to_gdb(signal)));
                }
            }
            _ => {}
        }
    }
}

/// Errors that end the server.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// Socket I/O failed.
    #[error("connection: {0}")]
    Io(#[from] std::io::Error),
    /// gdbstub reported a fatal error.
    #[error("protocol: {0}")]
    Protocol(String),
    /// A system call failed.
    #[error("{0}")]
    Sys(#[from] nix::Error),
}

/// Serves one client on `listener` for `target` until the session ends.
/// Further clients are refused with a message while one is connected.
pub fn serve(listener: &TcpListener, mut target: ProcessTarget) -> Result<SessionEnd, ServerError> {
    let (stream, peer) = listener.accept()?;
    tracing::info!(%peer, "client connected");
    stream.set_nodelay(true)?;
    listener.set_nonblocking(true)?;
    let mut reader = stream.try_clone()?;
    let conn = BufferedConnection { stream, out: Vec::new() };

    let mut mask = SigSet::empty();
    mask.add(Signal::SIGCHLD);
    mask.thread_block()?;
    let sigchld = SignalFd::with_flags(&mask, nix::sys::signalfd::SfdFlags::SFD_NONBLOCK)?;

    let mut framer = Framer::default();
    let mut pending: VecDeque<u8> = VecDeque::new();
    let mut new_threads = BTreeSet::new();
    let mut interrupted = false;
    let mut no_ack = false;
    let mut buf = [0u8; 4096];
    let fatal = |e: gdbstub::stub::GdbStubError<String, std::io::Error>| ServerError::Protocol(e.to_string());

    let mut gdb = GdbStub::new(conn).run_state_machine(&mut target).map_err(fatal)?;
    loop {
        gdb = match gdb {
            GdbStubStateMachine::Idle(mut inner) => {
                if let Some(byte) = pending.pop_front() {
                    inner.incoming_data(&mut target, byte).map_err(fatal)?
                } else {
                    refuse_second_client(listener);
                    let n = reader.read(&mut buf)?;
                    if n == 0 {
                        kill_program(&target);
                        return Ok(SessionEnd::ClientGone);
                    }
                    for &byte in &buf[..n] {
                        match framer.feed(byte) {
                            None => {}
                            Some(Framed::Forward(bytes)) => pending.extend(bytes),
                            Some(Framed::Packet(body, raw)) => {
                                tracing::debug!(packet = %String::from_utf8_lossy(&body), "->");
                                let checksum = body.iter().fold(0u8, |sum, b| sum.wrapping_add(*b));
                                let stated = std::str::from_utf8(&raw[raw.len() - 2..]).ok().and_then(|h| u8::from_str_radix(h, 16).ok());
                                if stated != Some(checksum) {
                                    tracing::warn!(packet = %String::from_utf8_lossy(&raw), "bad checksum; packet dropped");
                                    if !no_ack {
                                        Connection::write(inner.borrow_conn(), b'-')?;
                                        Connection::flush(inner.borrow_conn())?;
                                    }
                                    continue;
                                }
                                if body == b"k" {
                                    // LLDB's kill waits for the exit stop reply
                                    // (`X09`, as lldb-server sends); gdbstub in
                                    // extended mode would answer `OK`. (GDB sends vKill.)
                                    kill_program(&target);
                                    answer(inner.borrow_conn(), no_ack, b"X09")?;
                                    return Ok(SessionEnd::Killed);
                                }
                                let reply = if malformed(&body) {
                                    tracing::warn!(packet = %String::from_utf8_lossy(&body), "malformed packet");
                                    Some(b"E16".to_vec())
                                } else {
                                    intercept(&body, &target)
                                };
                                if let Some(reply) = reply {
                                    answer(inner.borrow_conn(), no_ack, &reply)?;
                                } else {
                                    if body == b"QStartNoAckMode" {
                                        no_ack = true;
                                    }
                                    pending.extend(raw);
                                }
                            }
                        }
                    }
                    GdbStubStateMachine::Idle(inner)
                }
            }
            GdbStubStateMachine::Running(inner) => {
                if let Some(byte) = pending.pop_front() {
                    inner.incoming_data(&mut target, byte).map_err(fatal)?
                } else if let Some(reason) = next_stop(&mut target, &mut new_threads, interrupted) {
                    interrupted = false;
                    inner.report_stop(&mut target, reason).map_err(fatal)?
                } else {
                    let mut fds = [
                        PollFd::new(reader.as_fd(), PollFlags::POLLIN),
                        PollFd::new(sigchld.as_fd(), PollFlags::POLLIN),
                    ];
                    poll(&mut fds, PollTimeout::from(100u16))?;
                    let client = fds[0].revents().is_some_and(|r| !r.is_empty());
                    let child = fds[1].revents().is_some_and(|r| !r.is_empty());
                    if child {
                        while let Ok(Some(_)) = sigchld.read_signal() {}
                    }
                    if client {
                        let n = reader.read(&mut buf)?;
                        if n == 0 {
                            kill_program(&target);
                            return Ok(SessionEnd::ClientGone);
                        }
                        pending.extend(&buf[..n]);
                    }
                    GdbStubStateMachine::Running(inner)
                }
            }
            GdbStubStateMachine::CtrlCInterrupt(inner) => {
                for tid in &target.running {
                    // SAFETY: tgkill has no memory-safety preconditions.
                    unsafe { libc::syscall(libc::SYS_tgkill, target.pid.as_raw(), tid.as_raw(), libc::SIGSTOP) };
                }
                interrupted = true;
                inner.interrupt_handled(&mut target, None::<StopReason>).map_err(fatal)?
            }
            GdbStubStateMachine::Disconnected(inner) => {
                let end = match inner.get_reason() {
                    DisconnectReason::TargetExited(_) | DisconnectReason::TargetTerminated(_) => SessionEnd::ProgramEnded,
                    DisconnectReason::Kill => {
                        kill_program(&target);
                        SessionEnd::Killed
                    }
                    DisconnectReason::Disconnect => {
                        detach(&mut target);
                        SessionEnd::Detached
                    }
                };
                return Ok(end);
            }
        };
    }
}

fn refuse_second_client(listener: &TcpListener) {
    if let Ok((mut other, peer)) = listener.accept() {
        tracing::warn!(%peer, "refusing a second client");
        let _ = Write::write_all(&mut other, b"retrace-stub: another debugger is already connected\n");
    }
}

fn kill_program(target: &ProcessTarget) {
    retrace_collector::process::kill_and_reap(target.pid);
}

fn detach(target: &mut ProcessTarget) {
    target.remove_all_breakpoints();
    for tid in &target.threads {
        let _ = ptrace::detach(*tid, None);
    }
}

#[cfg(test)]
mod tests {
    use super::malformed;

    #[test]
    fn client_packets_pass_and_malformed_ones_are_caught() {
        for ok in [
            "m7ffff7fe4b70,40", "M1000,2:abcd", "X1000,0:", "Z0,555555555151,1", "z2,7fff0000,4", "p10", "P10=0011223344556677",
            "g", "Hgp1c96.1c96", "Hc-1", "Hcp0.0", "Tp1c96.1c96", "vCont;c:p1c96.-1", "vCont;s:p1c96.1c96", "vCont;C1e:1c96;c",
            "vCont?", "qXfer:features:read:target.xml:0,fff", "qSupported:multiprocess+", "QStartNoAckMode", "?", "k", "x0,0",
            "jThreadsInfo", "vKill;1c96", "D;1c96",
        ] {
            assert!(!malformed(ok.as_bytes()), "{ok} rejected");
        }
        for bad in ["mzz,4", "m12345", "Z0,zz,1", "Z9,1000,1", "p9999z", "vCont;x", "Hgzz", "qXfer:features:read:target.xml:zz", "G123", "garbage", "?x"] {
            assert!(malformed(bad.as_bytes()), "{bad} accepted");
        }
    }
}
