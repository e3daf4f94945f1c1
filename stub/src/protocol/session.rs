//! One debugging session: one client on a TCP socket, gdbstub's state
//! machine behind a packet framer. The framer answers what gdbstub cannot
//! (`qProcessInfo`: gdbstub 0.7.10 writes the pid in decimal where LLDB
//! reads hex; `qMemoryRegionInfo`; LLDB's `k`; LLDB's trace packets,
//! [`super::lldb_trace`]), refuses what would end
//! gdbstub's session ([`super::grammar`]), and hands the rest on. The
//! program is reached only through [`Inferior`].

use std::cell::Cell;
use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::{AsFd, BorrowedFd};
use std::rc::Rc;

use gdbstub::conn::Connection;
use gdbstub::stub::state_machine::GdbStubStateMachine;
use gdbstub::stub::{DisconnectReason, GdbStub};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};

use super::connection::BufferedConnection;
use super::framing::{escape_and_frame, frame, Framed, Framer};
use super::gdb_btrace::BtraceConfig;
use super::grammar::malformed;
use super::threads::Selection;
use crate::hex::hex;
use super::replies::{memory_region_reply, stop_note_text};
use crate::inferior::{Inferior, Movement, StopNote, StopReason};

/// Acknowledges a packet the framer answers itself and sends `payload`.
fn answer(conn: &mut BufferedConnection, no_ack: bool, payload: &[u8]) -> std::io::Result<()> {
    if !no_ack {
        Connection::write(conn, b'+')?;
    }
    Connection::write_all(conn, &escape_and_frame(payload))?;
    Connection::flush(conn)
}

/// Acknowledges a packet the framer answers itself with several packets
/// (a monitor command's `O` output, then its final reply).
fn answer_all(conn: &mut BufferedConnection, no_ack: bool, payloads: &[Vec<u8>]) -> std::io::Result<()> {
    if !no_ack {
        Connection::write(conn, b'+')?;
    }
    for payload in payloads {
        Connection::write_all(conn, &escape_and_frame(payload))?;
    }
    Connection::flush(conn)
}

/// A reply for packets answered here, or `None` to let gdbstub answer.
fn intercept(body: &[u8], target: &mut impl Inferior) -> Option<Vec<u8>> {
    if let Some(reply) = super::lldb_trace::answer(body, target) {
        return Some(reply);
    }
    // Packets only LLDB sends (GDB 13 sends none of them).
    if body == b"qHostInfo" || body == b"QThreadSuffixSupported" || body == b"QEnableErrorStrings" {
        target.client_is_lldb();
    }
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
        b"qShlibInfoAddr" => target.shared_library_info_address().map(|address| format!("{address:x}").into_bytes()),
        // LLDB's memory for its own use: `_Msize,permissions`, `_maddress`.
        _ if body.starts_with(b"_M") => {
            let size = std::str::from_utf8(&body[2..]).ok().and_then(|rest| u64::from_str_radix(rest.split(',').next()?, 16).ok());
            match size {
                Some(size) => target.allocate(size).map(|address| format!("{address:x}").into_bytes()),
                None => Some(b"E16".to_vec()),
            }
        }
        _ if body.starts_with(b"_m") => match std::str::from_utf8(&body[2..]).ok().and_then(|a| u64::from_str_radix(a, 16).ok()) {
            Some(address) => target.deallocate(address).map(|done| if done { b"OK".to_vec() } else { b"E01".to_vec() }),
            None => Some(b"E16".to_vec()),
        },
        _ if body.starts_with(b"qMemoryRegionInfo:") => {
            let address = std::str::from_utf8(&body[b"qMemoryRegionInfo:".len()..]).ok().and_then(|a| u64::from_str_radix(a, 16).ok());
            Some(match address {
                Some(address) => memory_region_reply(&target.memory_region(address)),
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

/// The most bytes a packet may have (`PacketSize`, as advertised in
/// `qSupported`): a reply never exceeds it, and a client's packet longer
/// than that is refused without being kept.
pub const PACKET_SIZE: usize = 4096;

/// The most bytes one `m` reply carries: its hex digits and framing fit in
/// [`PACKET_SIZE`] (clients ask for the rest themselves). One such read is
/// one read of the target, so a reply is data or an error, never both.
const MAX_MEMORY_READ: u64 = (PACKET_SIZE as u64 - 4) / 2;

/// The client's side of the connection: bytes read but not yet framed.
struct Client {
    reader: TcpStream,
    unread: VecDeque<u8>,
    buf: Vec<u8>,
}

/// What waiting for the client brought.
enum Wait {
    /// Bytes arrived (in `unread`), or the wait timed out, or the target's
    /// stop events became readable.
    Ready,
    /// The client closed the connection (FIN) or reset it (RST).
    Gone,
}

impl Client {
    /// Waits for the client's bytes, a second client (turned away at
    /// once), the target's stop events, or `timeout`.
    fn wait(&mut self, listener: &TcpListener, stop_events: Option<BorrowedFd<'_>>, timeout: PollTimeout) -> std::io::Result<Wait> {
        let mut fds = vec![PollFd::new(self.reader.as_fd(), PollFlags::POLLIN), PollFd::new(listener.as_fd(), PollFlags::POLLIN)];
        fds.extend(stop_events.map(|fd| PollFd::new(fd, PollFlags::POLLIN)));
        match poll(&mut fds, timeout) {
            Ok(_) | Err(nix::Error::EINTR) => {}
            Err(e) => return Err(e.into()),
        }
        let ready = |fd: &PollFd| fd.revents().is_some_and(|r| !r.is_empty());
        let (client, second) = (ready(&fds[0]), ready(&fds[1]));
        drop(fds);
        if second {
            refuse_second_client(listener);
        }
        if client {
            match self.reader.read(&mut self.buf) {
                Ok(0) => return Ok(Wait::Gone),
                Ok(n) => self.unread.extend(&self.buf[..n]),
                Err(e) if is_client_gone(&e) => return Ok(Wait::Gone),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(Wait::Ready)
    }
}

/// Whether an I/O error means the client went away.
fn is_client_gone(error: &std::io::Error) -> bool {
    use std::io::ErrorKind as K;
    matches!(error.kind(), K::ConnectionReset | K::ConnectionAborted | K::BrokenPipe | K::UnexpectedEof)
}

/// What the session does with a client's packet.
enum Screened {
    /// Hand it (perhaps rewritten) to gdbstub.
    Forward(Vec<u8>),
    /// Answer it here.
    Answer(Vec<u8>),
    /// Answer it here with these packets, in order.
    Answers(Vec<Vec<u8>>),
    /// LLDB's `k`: kill the program, answer `X09`.
    Kill,
}

/// What the session learnt about its client's dialect.
#[derive(Debug, Default)]
struct Dialect {
    /// The client is LLDB (it asked `QThreadSuffixSupported`, which GDB
    /// never sends). LLDB reads `xx` in a register reply as the bytes
    /// 0xcc; an unavailable register must be an error reply for it.
    lldb: bool,
    /// LLDB's first `p` is its probe of whether `p` exists at all: an error
    /// there makes it read every register with `g`, whose `xx` it also
    /// takes for 0xcc. That one is answered as GDB would be.
    lldb_probed_p: bool,
    /// The client and gdbstub speak multiprocess (`qSupported` with
    /// `multiprocess+`): a thread id in a reply is `p<pid>.<tid>`.
    multiprocess: bool,
    /// The client asked for extended mode (`!`: GDB's `target
    /// extended-remote`). Such a client stays connected after the program
    /// ends, as with gdbserver, until it kills, detaches or leaves.
    extended: bool,
}

impl Dialect {
    fn learn(&mut self, body: &[u8]) {
        if body == b"QThreadSuffixSupported" {
            self.lldb = true;
        }
        if body == b"!" {
            self.extended = true;
        }
        if body.starts_with(b"qSupported") {
            self.multiprocess = body.split(|&b| b == b';' || b == b':').any(|feature| feature == b"multiprocess+");
        }
    }

    /// Whether `body` is an LLDB register read after its probe (the probe
    /// itself is counted here and answered by gdbstub).
    fn is_lldb_register_read(&mut self, body: &[u8]) -> bool {
        self.lldb && body.starts_with(b"p") && std::mem::replace(&mut self.lldb_probed_p, true)
    }
}

/// A thread's id in a stop reply the protocol writes itself: with the
/// process id where the client speaks multiprocess.
fn thread_id_text(dialect: &Dialect, pid: u32, thread: u64) -> String {
    if dialect.multiprocess {
        format!("p{pid:x}.{thread:x}")
    } else {
        format!("{thread:x}")
    }
}

/// LLDB's `p` of a register the target does not know: an error, which LLDB
/// shows as unavailable (GDB takes gdbstub's `xx…`).
fn unavailable_register(body: &[u8], target: &mut impl Inferior, selection: &Selection) -> Option<Vec<u8>> {
    let number = std::str::from_utf8(body.strip_prefix(b"p")?).ok()?;
    let number = usize::from_str_radix(number, 16).ok()?;
    let thread = selection.general_thread(&*target).or_else(|| target.any_thread())?;
    (!target.register_available(thread, number)).then(|| b"E0e".to_vec())
}

/// Decides what becomes of a packet `body` (escaped, as sent).
fn screen(body: &[u8], target: &mut impl Inferior, selection: &mut Selection, btrace: &mut BtraceConfig, dialect: &mut Dialect) -> Screened {
    dialect.learn(body);
    if body == b"k" {
        // LLDB's kill waits for the exit stop reply (`X09`, as lldb-server
        // sends); gdbstub in extended mode would answer `OK`. (GDB sends vKill.)
        return Screened::Kill;
    }
    if malformed(body) {
        tracing::warn!(packet = %String::from_utf8_lossy(body), "malformed packet");
        return Screened::Answer(b"E16".to_vec());
    }
    if is_another_program(body) {
        return Screened::Answer(NOTHING_TO_RUN.as_bytes().to_vec());
    }
    let movement = match body {
        b"bc" => Some(Movement::ReverseContinue),
        b"bs" => Some(Movement::ReverseStep),
        _ if body == b"c" || (body.starts_with(b"vCont;") && body.split(|&b| b == b';').any(|action| action.starts_with(b"c"))) => Some(Movement::ForwardContinue),
        _ => None,
    };
    // The one place a move through the history is refused, in the
    // client's words.
    if let Some(reason) = movement.and_then(|movement| target.history_move_refused(movement)) {
        if dialect.lldb {
            // LLDB takes an error reply to a resume for a lost connection:
            // a stop where it stands, the reason its description (signal 0
            // keeps LLDB from taking it for a breakpoint's).
            let thread = target.any_thread().unwrap_or(u64::from(target.pid()));
            let note = stop_note_text(&StopNote::Trace(reason.to_string()));
            return Screened::Answer(format!("T00thread:{};{note}", thread_id_text(dialect, target.pid(), thread)).into_bytes());
        }
        // GDB prints the console output, then "Remote failure reply" and
        // stays where it was.
        return Screened::Answers(vec![format!("O{}", hex(&format!("retrace-stub: {reason}\n"))).into_bytes(), b"E01".to_vec()]);
    }
    if let Some(replies) = super::monitor::trace_packet(body, target) {
        return Screened::Answers(replies);
    }
    if body == b"?" {
        // (gdbstub's `?` always says SIGTRAP.)
        if let Some((thread, signal)) = target.standing_signal() {
            let note = stop_note_text(&StopNote::Undeliverable(crate::signals::stop_words(signal)));
            return Screened::Answer(format!("T{:02x}thread:{};{note}", signal.0, thread_id_text(dialect, target.pid(), thread)).into_bytes());
        }
    }
    if let Some(reply) = intercept(body, target) {
        return Screened::Answer(reply);
    }
    if let Some(reply) = super::gdb_btrace::answer(body, target, selection, btrace) {
        return Screened::Answer(reply);
    }
    if dialect.is_lldb_register_read(body) {
        if let Some(reply) = unavailable_register(body, target, selection) {
            return Screened::Answer(reply);
        }
    }
    let text = String::from_utf8_lossy(body);
    if let Err(reason) = selection.check(&text, &*target) {
        tracing::warn!(packet = %text, reason, "refused");
        return Screened::Answer(b"E16".to_vec());
    }
    Screened::Forward(rewrite(body))
}

/// Packets gdbstub would mishandle as sent, in a form it takes: a bare
/// `qSupported` (no features: gdbstub ends its session) declares no
/// multiprocess support, which is what a client that names none has; an
/// `m` longer than a reply can carry asks for what fits.
fn rewrite(body: &[u8]) -> Vec<u8> {
    if body == b"qSupported" || body == b"qSupported:" {
        return b"qSupported:multiprocess-".to_vec();
    }
    if let Some(rest) = body.strip_prefix(b"m") {
        let text = String::from_utf8_lossy(rest);
        if let Some((address, length)) = text.split_once(',') {
            if u64::from_str_radix(length, 16).is_ok_and(|n| n > MAX_MEMORY_READ) {
                return format!("m{address},{MAX_MEMORY_READ:x}").into_bytes();
            }
        }
    }
    body.to_vec()
}

type Machine<'a, T> = GdbStubStateMachine<'a, T, BufferedConnection>;

/// A fatal error of gdbstub's state machine.
fn fatal(error: gdbstub::stub::GdbStubError<crate::inferior::InferiorError, std::io::Error>) -> ServerError {
    ServerError::Protocol(error.to_string())
}

/// Hands gdbstub a whole packet (or a `0x03`), byte by byte.
fn feed<'a, T: Inferior>(mut gdb: Machine<'a, T>, target: &mut T, bytes: &[u8]) -> Result<Machine<'a, T>, ServerError> {
    for &byte in bytes {
        gdb = match gdb {
            GdbStubStateMachine::Idle(inner) => inner.incoming_data(target, byte).map_err(fatal)?,
            GdbStubStateMachine::Running(inner) => inner.incoming_data(target, byte).map_err(fatal)?,
            other => return Ok(other),
        };
    }
    Ok(gdb)
}

/// Sends what gdbstub wrote and did not flush.
fn flush<T: Inferior>(gdb: &mut Machine<'_, T>) -> std::io::Result<()> {
    let conn = match gdb {
        GdbStubStateMachine::Idle(inner) => inner.borrow_conn(),
        GdbStubStateMachine::Running(inner) => inner.borrow_conn(),
        GdbStubStateMachine::CtrlCInterrupt(inner) => inner.borrow_conn(),
        GdbStubStateMachine::Disconnected(inner) => inner.borrow_conn(),
    };
    Connection::flush(conn)
}

/// Serves one client on `listener` for `target` until the session ends:
/// the client leaves (FIN or RST; the program is killed), kills the program
/// (`k`, `vKill`), detaches (`D`; it runs on), or the program ends.
/// Further clients are refused with a message while one is connected.
pub fn serve<T: Inferior>(listener: &TcpListener, mut target: T) -> Result<SessionEnd, ServerError> {
    let (stream, peer) = listener.accept()?;
    tracing::info!(%peer, "client connected");
    stream.set_nodelay(true)?;
    listener.set_nonblocking(true)?;
    let broken = Rc::new(Cell::new(false));
    let mut client = Client { reader: stream.try_clone()?, unread: VecDeque::new(), buf: vec![0; 4096] };
    let conn = BufferedConnection::new(stream, broken.clone());
    target.start_session()?;
    match run(listener, &mut target, &mut client, conn) {
        Ok(end) => Ok(end),
        // The client went away while being answered.
        Err(ServerError::Io(e)) if is_client_gone(&e) => {
            target.kill();
            Ok(SessionEnd::ClientGone)
        }
        Err(ServerError::Protocol(_)) if broken.get() => {
            target.kill();
            Ok(SessionEnd::ClientGone)
        }
        Err(e) => Err(e),
    }
}

fn run<T: Inferior>(listener: &TcpListener, target: &mut T, client: &mut Client, conn: BufferedConnection) -> Result<SessionEnd, ServerError> {
    let mut framer = Framer::new(PACKET_SIZE - 4);
    let mut selection = Selection::default();
    let mut btrace = BtraceConfig::default();
    let mut dialect = Dialect::default();
    let mut no_ack = false;
    // The last stop the client was told of, and the words added to it.
    let mut last_stop: Option<(StopReason, Option<StopNote>)> = None;
    let stub = GdbStub::builder(conn).packet_buffer_size(PACKET_SIZE).build().map_err(|e| ServerError::Protocol(e.to_string()))?;
    let mut gdb = stub.run_state_machine(target).map_err(fatal)?;
    loop {
        gdb = match gdb {
            GdbStubStateMachine::Idle(mut inner) => {
                let Some(byte) = client.unread.pop_front() else {
                    if let Wait::Gone = client.wait(listener, None, PollTimeout::NONE)? {
                        target.kill();
                        return Ok(SessionEnd::ClientGone);
                    }
                    gdb = GdbStubStateMachine::Idle(inner);
                    continue;
                };
                match framer.feed(byte) {
                    // An interrupt with nothing running has nothing to stop
                    // (gdbstub would hold it and stop the next resume at once).
                    None | Some(Framed::Interrupt) => GdbStubStateMachine::Idle(inner),
                    Some(framed @ (Framed::Nak | Framed::BadChecksum)) => {
                        ask_again(inner.borrow_conn(), &framed, no_ack)?;
                        GdbStubStateMachine::Idle(inner)
                    }
                    Some(Framed::TooLong) => {
                        tracing::warn!(limit = PACKET_SIZE, "packet longer than PacketSize refused");
                        answer(inner.borrow_conn(), no_ack, b"E16")?;
                        GdbStubStateMachine::Idle(inner)
                    }
                    Some(Framed::Packet(body)) => {
                        tracing::debug!(packet = %String::from_utf8_lossy(&body), "->");
                        match screen(&body, target, &mut selection, &mut btrace, &mut dialect) {
                            Screened::Kill => {
                                target.kill();
                                answer(inner.borrow_conn(), no_ack, b"X09")?;
                                return Ok(SessionEnd::Killed);
                            }
                            Screened::Answer(reply) => {
                                answer(inner.borrow_conn(), no_ack, &reply)?;
                                GdbStubStateMachine::Idle(inner)
                            }
                            Screened::Answers(replies) => {
                                answer_all(inner.borrow_conn(), no_ack, &replies)?;
                                GdbStubStateMachine::Idle(inner)
                            }
                            Screened::Forward(body) => {
                                if body == b"QStartNoAckMode" {
                                    no_ack = true;
                                }
                                if body.starts_with(b"qSupported") {
                                    // gdbstub knows nothing of branch tracing
                                    // or of exec events.
                                    let mut features = super::gdb_btrace::FEATURES.to_string();
                                    if body.split(|&b| b == b';' || b == b':').any(|feature| feature == b"exec-events+") {
                                        target.client_takes_exec_events();
                                        features.push_str(";exec-events+");
                                    }
                                    inner.borrow_conn().extend_next_reply(features.as_bytes());
                                }
                                let mut next = feed(GdbStubStateMachine::Idle(inner), target, &frame(&body))?;
                                // gdbstub leaves a resume's `+` unsent until the stop.
                                flush(&mut next)?;
                                next
                            }
                        }
                    }
                }
            }
            GdbStubStateMachine::Running(mut inner) => {
                if let Some(reason) = target.poll_stop() {
                    let note = target.take_stop_note();
                    // (Only the history's boundary: LLDB counts a breakpoint's
                    // or a watchpoint's stop as one more hit, and shows a
                    // breakpoint's as a signal without its site, which the
                    // shim sets aside for such a resume.)
                    let (reason, note) = match (target.take_stood_still(), last_stop.take()) {
                        (true, Some(last)) if matches!(last.0, StopReason::ReplayLog { .. }) => last,
                        _ => (reason, note),
                    };
                    if let Some(note) = &note {
                        inner.borrow_conn().extend_next_reply(stop_note_text(note).as_bytes());
                    }
                    last_stop = Some((reason, note));
                    inner.report_stop(target, reason).map_err(fatal)?
                } else if let Some(byte) = client.unread.pop_front() {
                    // In all-stop mode a client sends only `0x03` while the
                    // program runs; anything else is answered, not run.
                    match framer.feed(byte) {
                        None => GdbStubStateMachine::Running(inner),
                        Some(Framed::Interrupt) => feed(GdbStubStateMachine::Running(inner), target, &[0x03])?,
                        Some(framed @ (Framed::Nak | Framed::BadChecksum)) => {
                            ask_again(inner.borrow_conn(), &framed, no_ack)?;
                            GdbStubStateMachine::Running(inner)
                        }
                        Some(Framed::TooLong | Framed::Packet(_)) => {
                            tracing::warn!("a packet while the program runs refused");
                            answer(inner.borrow_conn(), no_ack, b"E16")?;
                            GdbStubStateMachine::Running(inner)
                        }
                    }
                } else {
                    if let Wait::Gone = client.wait(listener, target.stop_events(), PollTimeout::from(100u16))? {
                        target.kill();
                        return Ok(SessionEnd::ClientGone);
                    }
                    GdbStubStateMachine::Running(inner)
                }
            }
            GdbStubStateMachine::CtrlCInterrupt(inner) => {
                target.interrupt();
                inner.interrupt_handled(target, None::<StopReason>).map_err(fatal)?
            }
            GdbStubStateMachine::Disconnected(mut inner) => {
                let end = match inner.get_reason() {
                    DisconnectReason::TargetExited(_) | DisconnectReason::TargetTerminated(_) if dialect.extended && !dialect.lldb => {
                        tracing::info!("the program ended; the client stays connected (extended mode)");
                        after_the_end(listener, client, &mut framer, inner.borrow_conn(), no_ack)?;
                        SessionEnd::ProgramEnded
                    }
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

/// What becomes of a packet after the program ended.
#[derive(Debug, PartialEq, Eq)]
enum AfterTheEnd {
    /// Answer it; the session goes on.
    Reply(&'static [u8]),
    /// Answer it; the session ends (a detach, `vKill`).
    ReplyAndEnd(&'static [u8]),
    /// Acknowledge it; the session ends (`k`, which has no reply).
    End,
}

/// What the stub answers after the program ended, to a client in extended
/// mode, as gdbserver answers it then: no threads, no memory, no registers,
/// no new program (`vRun` and `vAttach` are refused with the reason).
fn answer_after_the_end(body: &[u8]) -> AfterTheEnd {
    use AfterTheEnd::*;
    match body {
        b"k" => End,
        b"D" => ReplyAndEnd(b"OK"),
        _ if body.starts_with(b"D;") || body.starts_with(b"vKill;") => ReplyAndEnd(b"OK"),
        b"!" => Reply(b"OK"),
        b"qfThreadInfo" | b"qsThreadInfo" => Reply(b"l"),
        _ if body.starts_with(b"qXfer:threads:read:") => Reply(b"l<threads>\n</threads>\n"),
        _ if is_another_program(body) => Reply(NOTHING_TO_RUN.as_bytes()),
        _ if body.starts_with(b"qRcmd,") => Reply(b"E.retrace-stub: the program has ended"),
        // Queries and settings: not supported (an empty reply).
        _ if body.starts_with(b"q") || body.starts_with(b"Q") || body.starts_with(b"vMustReplyEmpty") || body.starts_with(b"vCont?") => Reply(b""),
        // Registers, memory, breakpoints, resumes, thread selection.
        _ => Reply(b"E01"),
    }
}

/// `vRun` and `vAttach`: another program through this stub.
fn is_another_program(body: &[u8]) -> bool {
    body.starts_with(b"vRun") || body.starts_with(b"vAttach")
}

/// The reply to `vRun` and `vAttach`: one program per stub.
const NOTHING_TO_RUN: &str = "E.retrace-stub serves one program; start retrace-stub again to run another";

/// Serves a client in extended mode after the program ended, until it
/// kills, detaches or leaves (gdbserver stays too; GDB calls a closed
/// connection an error, which ends a script).
fn after_the_end(listener: &TcpListener, client: &mut Client, framer: &mut Framer, conn: &mut BufferedConnection, no_ack: bool) -> Result<(), ServerError> {
    loop {
        let Some(byte) = client.unread.pop_front() else {
            match client.wait(listener, None, PollTimeout::NONE) {
                Ok(Wait::Gone) => return Ok(()),
                Ok(Wait::Ready) => continue,
                Err(e) if is_client_gone(&e) => return Ok(()),
                Err(e) => return Err(e.into()),
            }
        };
        let next = match framer.feed(byte) {
            None | Some(Framed::Interrupt) => continue,
            Some(framed @ (Framed::Nak | Framed::BadChecksum)) => {
                ask_again(conn, &framed, no_ack)?;
                continue;
            }
            Some(Framed::TooLong) => AfterTheEnd::Reply(b"E16"),
            Some(Framed::Packet(body)) => {
                tracing::debug!(packet = %String::from_utf8_lossy(&body), "-> (after the end)");
                answer_after_the_end(&body)
            }
        };
        match next {
            AfterTheEnd::Reply(payload) => answer(conn, no_ack, payload)?,
            AfterTheEnd::ReplyAndEnd(payload) => {
                answer(conn, no_ack, payload)?;
                return Ok(());
            }
            AfterTheEnd::End => {
                if !no_ack {
                    Connection::write(conn, b'+')?;
                    Connection::flush(conn)?;
                }
                return Ok(());
            }
        }
    }
}

/// A `-` from the client: the last packet again. A packet whose checksum
/// did not match: with acks on, a `-` asks the client for it again.
fn ask_again(conn: &mut BufferedConnection, framed: &Framed, no_ack: bool) -> std::io::Result<()> {
    match framed {
        Framed::Nak => conn.resend_last_packet(),
        _ => {
            tracing::warn!("bad checksum; packet dropped");
            if no_ack {
                return Ok(());
            }
            Connection::write(conn, b'-')?;
            Connection::flush(conn)
        }
    }
}

/// What a second client is told.
const ALREADY_CONNECTED: &str = "retrace-stub: another debugger is already connected (one at a time)";

/// Turns away clients that connect while one is being served, on a thread
/// of their own (the session goes on): GDB, whose first packet is
/// `qSupported`, gets an error reply with the reason, which it prints
/// ("Remote failure reply: E.…"); any other client (LLDB starts with
/// `QStartNoAckMode`, and shows no reply text while it connects) gets the
/// reason as a line of text.
fn refuse_second_client(listener: &TcpListener) {
    while let Ok((mut other, peer)) = listener.accept() {
        tracing::warn!(%peer, "refusing a second client");
        std::thread::spawn(move || {
            let _ = other.set_nonblocking(false);
            let _ = other.set_read_timeout(Some(std::time::Duration::from_secs(2)));
            let mut framer = Framer::new(PACKET_SIZE - 4);
            let mut byte = [0u8; 1];
            let first = loop {
                match other.read(&mut byte) {
                    Ok(1) => {
                        if let Some(Framed::Packet(body)) = framer.feed(byte[0]) {
                            break Some(body);
                        }
                    }
                    _ => break None,
                }
            };
            if first.is_some_and(|body| body.starts_with(b"qSupported")) {
                let mut reply = b"+".to_vec();
                reply.extend(escape_and_frame(format!("E.{ALREADY_CONNECTED}").as_bytes()));
                let _ = Write::write_all(&mut other, &reply);
            } else {
                let _ = Write::write_all(&mut other, format!("{ALREADY_CONNECTED}\n").as_bytes());
            }
            let _ = other.shutdown(std::net::Shutdown::Both);
        });
    }
}
