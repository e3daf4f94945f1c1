//! One debugging session: one client on a TCP socket, gdbstub's state
//! machine behind a packet framer. The framer answers what gdbstub cannot
//! (`qProcessInfo`: gdbstub 0.7.10 writes the pid in decimal where LLDB
//! reads hex; `qMemoryRegionInfo`; LLDB's `k`), refuses what would end
//! gdbstub's session ([`super::grammar`]), and hands the rest on. The
//! program is reached only through [`Inferior`].

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::os::fd::AsFd;

use gdbstub::conn::Connection;
use gdbstub::stub::state_machine::GdbStubStateMachine;
use gdbstub::stub::{DisconnectReason, GdbStub};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};

use super::connection::BufferedConnection;
use super::framing::{escape_and_frame, Framed, Framer};
use super::grammar::malformed;
use crate::hex::hex;
use crate::target::{Inferior, StopReason};

/// Acknowledges a packet the framer answers itself and sends `payload`.
fn answer(conn: &mut BufferedConnection, no_ack: bool, payload: &[u8]) -> std::io::Result<()> {
    if !no_ack {
        Connection::write(conn, b'+')?;
    }
    Connection::write_all(conn, &escape_and_frame(payload))?;
    Connection::flush(conn)
}

/// A reply for packets answered here, or `None` to let gdbstub answer.
fn intercept(body: &[u8], target: &impl Inferior) -> Option<Vec<u8>> {
    match body {
        b"qProcessInfo" => {
            let parent = nix::unistd::getpid();
            let (uid, gid) = (nix::unistd::getuid().as_raw(), nix::unistd::getgid().as_raw());
            Some(
                format!(
                    "pid:{:x};parent-pid:{:x};real-uid:{uid:x};real-gid:{gid:x};effective-uid:{uid:x};effective-gid:{gid:x};triple:{};ostype:linux;endian:little;ptrsize:8;",
                    target.pid(),
                    parent.as_raw(),
                    hex("x86_64-pc-linux-gnu")
                )
                .into_bytes(),
            )
        }
        b"QEnableErrorStrings" => Some(b"OK".to_vec()),
        _ if body.starts_with(b"qMemoryRegionInfo:") => {
            let address = std::str::from_utf8(&body[b"qMemoryRegionInfo:".len()..]).ok().and_then(|a| u64::from_str_radix(a, 16).ok());
            Some(match address {
                Some(address) => target.memory_region_info(address),
                None => b"E16".to_vec(),
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
pub fn serve<T: Inferior>(listener: &TcpListener, mut target: T) -> Result<SessionEnd, ServerError> {
    let (stream, peer) = listener.accept()?;
    tracing::info!(%peer, "client connected");
    stream.set_nodelay(true)?;
    listener.set_nonblocking(true)?;
    let mut reader = stream.try_clone()?;
    let conn = BufferedConnection::new(stream);
    target.start_session()?;

    let mut framer = Framer::default();
    let mut pending: VecDeque<u8> = VecDeque::new();
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
                        target.kill();
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
                                    target.kill();
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
                } else if let Some(reason) = target.poll_stop() {
                    inner.report_stop(&mut target, reason).map_err(fatal)?
                } else {
                    let mut fds = vec![PollFd::new(reader.as_fd(), PollFlags::POLLIN)];
                    fds.extend(target.stop_events().map(|fd| PollFd::new(fd, PollFlags::POLLIN)));
                    poll(&mut fds, PollTimeout::from(100u16))?;
                    let client = fds[0].revents().is_some_and(|r| !r.is_empty());
                    drop(fds);
                    if client {
                        let n = reader.read(&mut buf)?;
                        if n == 0 {
                            target.kill();
                            return Ok(SessionEnd::ClientGone);
                        }
                        pending.extend(&buf[..n]);
                    }
                    GdbStubStateMachine::Running(inner)
                }
            }
            GdbStubStateMachine::CtrlCInterrupt(inner) => {
                target.interrupt();
                inner.interrupt_handled(&mut target, None::<StopReason>).map_err(fatal)?
            }
            GdbStubStateMachine::Disconnected(inner) => {
                let end = match inner.get_reason() {
                    DisconnectReason::TargetExited(_) | DisconnectReason::TargetTerminated(_) => SessionEnd::ProgramEnded,
                    DisconnectReason::Kill => {
                        target.kill();
                        SessionEnd::Killed
                    }
                    DisconnectReason::Disconnect => {
                        target.detach();
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
