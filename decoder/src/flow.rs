//! Instruction-flow reconstruction: Intel PT packets + the traced code →
//! the sequence of executed instructions, with events and error items, as
//! LLDB's intel-pt plugin presents them (items numbered from 0: instructions,
//! events and errors alike).
//!
//! Rules (SDM "Intel PT"; libipt's insn/block decoders): conditional branches
//! take TNT bits in order; indirect branches and uncompressed returns take TIP
//! targets; a return meeting a TNT bit is compressed and pops the 64-entry
//! return stack (pushed by every call except zero-length calls); FUP + TIP.PGD
//! is an asynchronous disable bound to the FUP's IP; TIP.PGD after a far
//! transfer (SYSCALL) disables tracing; TIP.PGE resumes it; PSB+ restates the
//! state (FUP = current IP when tracing is on) and is a synchronisation point.
//! Every problem becomes an [`Item::Error`] with the byte offset of the packet
//! involved, and decoding resumes at the next PSB.

use std::borrow::Cow;
use std::collections::VecDeque;

pub use crate::item::{Event, FlowError, Item};
use crate::history::{Extra, History};
use crate::image::Memory;
use crate::packet::{Ip, Packet, PacketDecoder};
use crate::x86::{ExecMode, FlowKind};

/// Whether libipt finds this packet error only when it decodes the packet
/// as an event or a branch, not while reading ahead past status packets: its
/// read-ahead knows flow and event packets by their opcode and stops there.
fn decoded_later(kind: &crate::packet::PacketErrorKind) -> bool {
    matches!(kind, crate::packet::PacketErrorKind::Malformed { packet: "mode" | "ip" | "tnt.8" | "tnt.64" | "ptw", .. })
}

/// A TIP.PGE must say where tracing starts: libipt rejects one without an IP
/// as a bad packet.
fn pge_without_ip() -> FlowError {
    FlowError::Packet(crate::packet::PacketErrorKind::Malformed { packet: "tip.pge", reason: "no IP" }, None)
}

/// Whether libipt leaves this malformed packet (at `at`) until it is needed:
/// TNT, TIP and event packets are known by their opcode when reading ahead,
/// FUPs are decoded then.
fn left_for_later(data: &[u8], at: usize, kind: &crate::packet::PacketErrorKind) -> bool {
    decoded_later(kind) && data.get(at).map(|b| b & 0x1f) != Some(0x1d)
}

/// Whether the packet at `at` is an event packet by its opcode (MODE,
/// TIP.PGE, TIP.PGD, and the extended PIP, CBR, VMCS, OVF, STOP, MNT,
/// EXSTOP, MWAIT, PWRE, PWRX, PTW).
fn is_event_opcode(data: &[u8], at: usize) -> bool {
    match data.get(at).copied().unwrap_or(0) {
        0x99 => true,
        0x02 => data.get(at + 1).is_some_and(|&b| matches!(b, 0x43 | 0x03 | 0xc8 | 0xf3 | 0x83 | 0xc3 | 0x62 | 0xe2 | 0xc2 | 0x22 | 0xa2) || b & 0x1f == 0x12),
        opcode => matches!(opcode & 0x1f, 0x11 | 0x01),
    }
}

/// Whether `error` is a malformed TNT or TIP (see [`is_query_packet`]):
/// libipt leaves it, known by its opcode, until a branch needs it.
fn is_damaged_query(data: &[u8], error: &(usize, FlowError)) -> bool {
    matches!(error, (at, FlowError::Packet(kind, _)) if decoded_later(kind) && is_query_packet(data, *at))
}

/// Whether the (malformed) packet at `at` answers a query — a TNT or a TIP,
/// which wait for the branch that needs them — rather than being an event
/// or a FUP, which libipt decodes as soon as it reads ahead to them.
fn is_query_packet(data: &[u8], at: usize) -> bool {
    match data.get(at).copied().unwrap_or(0) {
        0x02 => data.get(at + 1) == Some(&0xa3), // TNT.64 (PTW and PSB are not)
        opcode => opcode & 1 == 0 || opcode & 0x1f == 0x0d,
    }
}

/// Whether the packet at `at` is a TNT (short or long) by its opcode.
fn is_tnt_opcode(data: &[u8], at: usize) -> bool {
    match data.get(at).copied().unwrap_or(0) {
        0x02 => data.get(at + 1) == Some(&0xa3),
        opcode => opcode != 0 && opcode & 1 == 0,
    }
}

/// Whether the packet at `at` may appear in a PSB+ header, by its opcode:
/// PAD, FUP, MODE, TSC, MTC, CYC and the extended PIP, CBR, TMA, VMCS, MNT,
/// PSBEND, OVF.
fn is_header_opcode(data: &[u8], at: usize) -> bool {
    match data.get(at).copied().unwrap_or(0) {
        0x00 | 0x99 | 0x19 | 0x59 => true,
        0x02 => matches!(data.get(at + 1), Some(0x43 | 0x03 | 0x73 | 0xc8 | 0xc3 | 0x23 | 0xf3)),
        opcode => opcode & 0x1f == 0x1d || opcode & 0x03 == 0x03,
    }
}

/// The next packet as libipt 2.0.5 sees it: packets it does not know (those
/// of PEBS-via-PT blocks, control-flow events and triggers, newer than it)
/// are unknown opcodes.
fn next_packet(packets: &mut PacketDecoder<'_>) -> Result<Option<(usize, Packet)>, crate::packet::PacketError> {
    use crate::packet::{PacketError, PacketErrorKind};
    let next = packets.next_packet()?;
    match next {
        Some((offset, Packet::Bbp { .. } | Packet::Bip { .. } | Packet::Bep { .. } | Packet::Cfe { .. } | Packet::Evd { .. } | Packet::Trig { .. })) => {
            let data = packets.data();
            let kind = match data[offset] {
                0x02 => PacketErrorKind::UnknownExtendedOpcode(data.get(offset + 1).copied().unwrap_or(0)),
                opcode => PacketErrorKind::UnknownOpcode(opcode),
            };
            Err(PacketError { offset, kind })
        }
        other => Ok(other),
    }
}

/// Reads a PSB+ header (the PSB itself already read) as libipt does as soon
/// as it meets the PSB: only header packets may come before PSBEND (or an
/// OVF, which also ends it). `Ok(false)` when the trace ends first.
fn read_psb_header(ahead: &mut PacketDecoder<'_>, psb: usize) -> Flow<bool> {
    use crate::packet::PacketErrorKind as K;
    loop {
        match next_packet(ahead) {
            Ok(None) => return Ok(false),
            Err(e) if matches!(e.kind, K::Truncated { .. }) => return Ok(false),
            // libipt checks the opcode before decoding the packet.
            Err(e) if !matches!(e.kind, K::UnknownOpcode(_) | K::UnknownExtendedOpcode(_)) && !is_header_opcode(ahead.data(), e.offset) => {
                return Err((psb, FlowError::BadContext(None)))
            }
            Err(e) => return Err((psb, FlowError::Packet(e.kind, None))),
            Ok(Some((_, packet))) => match packet {
                Packet::Psbend | Packet::Ovf => return Ok(true),
                Packet::Pad
                | Packet::Fup(_)
                | Packet::Pip { .. }
                | Packet::ModeExec { .. }
                | Packet::ModeTsx { .. }
                | Packet::Tsc(_)
                | Packet::Cbr(_)
                | Packet::Tma { .. }
                | Packet::Mtc(_)
                | Packet::Cyc(_)
                | Packet::Vmcs(_)
                | Packet::Mnt(_) => {}
                _ => return Err((psb, FlowError::BadContext(None))),
            },
        }
    }
}

/// How a [`FlowDecoder`] presents what it finds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FlowOptions {
    /// Reproduce LLDB 22's PSB-slice artifact: an error item
    /// ([`FlowError::SliceEnd`]) before a PSB+ whose IP holds a branch, so
    /// that item ids are LLDB's. Off, the flow has no such items.
    pub lldb_psb_slices: bool,
}

const RETURN_STACK_DEPTH: usize = 64;
/// LLDB's `extremely-large-decoding-threshold`: instructions without a
/// branch that consumes trace before the decoder gives up with
/// [`FlowError::NoProgress`] (a loop of direct jumps says nothing about how
/// often it ran).
const MAX_STRAIGHT_LINE: u64 = 500_000;

/// LLDB's `infinite-decoding-loop-verification-threshold`: after this many
/// instructions without consuming a packet (and twice as many, and so on)
/// LLDB checks whether the last ones repeat a loop.
const LOOP_CHECK_AFTER: u64 = 10_000;

/// Decodes one thread's Intel PT stream against `memory`.
pub struct FlowDecoder<'a, M: Memory> {
    packets: PacketDecoder<'a>,
    memory: &'a M,
    peeked: Option<(usize, Packet)>,
    /// Pending TNT bits, oldest in bit `tnt_len - 1`.
    tnt_bits: u64,
    tnt_len: u32,
    /// Return addresses for compressed returns, with the block of the call
    /// that pushed each (its fall-through successor slot caches the block
    /// at the return address).
    returns: VecDeque<(u64, u32)>,
    /// The last TSC value read.
    time: Option<u64>,
    /// The last TSC value reported as a clock tick.
    notified: Option<u64>,
    /// In LLDB's slice after a PSB+ without TSC: a time of `None` there is
    /// LLDB's unknown time (no clock tick), not time read in an earlier part
    /// of the trace.
    slice_time_unknown: bool,
    history: History,
    /// Decode from this PSB offset instead of the first PSB.
    start: Option<usize>,
    /// Stop before consuming the PSB at this offset (segment decoding).
    stop_at: Option<usize>,
    /// The next event decodes but cannot be applied (e.g. TIP.PGE while
    /// tracing is on): what came before it stands, and this error comes
    /// where the event would (libipt fails in `pt_insn_event`, not in the
    /// query that found the event, so LLDB keeps the instruction before it
    /// and prints the error without an address).
    rejected_event: Option<(usize, FlowError)>,
    /// Reading ahead met the end of the trace before any packet that
    /// answers a query or is an event (libipt's `pts_eos`): once the TNT
    /// bits are used up, decoding ends — without the instruction whose
    /// query got that answer, which LLDB does not list.
    trace_ends: bool,
    /// What waits for the next TIP, TIP.PGE or TIP.PGD, oldest first
    /// (libipt's queue of events bound to TIP).
    tip_queue: Vec<BoundToTip>,
    /// Tracing is off: MODE.TSX is an event of its own (libipt), not
    /// something bound to a FUP.
    disabled: bool,
    /// The execution mode code is decoded in (`None`: unknown, before any
    /// MODE.Exec since the last sync point, or reserved).
    mode: Option<ExecMode>,
    options: FlowOptions,
    /// Decoding ended at the PSB at `stop_at`.
    stopped: bool,
    /// The trace ends with a packet cut short, at this offset.
    cut_packet: Option<usize>,
    /// The last TNT query met a damaged TIP (known by its opcode): libipt
    /// fails the query before decoding the packet (a conditional branch:
    /// "does not match query"; a return goes on to ask for the TIP, and
    /// decoding it fails).
    damaged_tip_ahead: bool,
    /// Executed blocks before the current PSB+ (where LLDB's slice began).
    slice_start_blocks: usize,
    /// With LLDB's slices: every PSB a synchronising scan finds (also one
    /// that a damaged packet overlaps).
    slice_psbs: Cow<'a, [usize]>,
    /// A packet crossed the start of the next slice: for LLDB it was cut
    /// there, and the slice ended. Decoding goes on at that PSB.
    slice_cut: bool,
    /// LLDB's slice ended at a PSB after which tracing is off (see
    /// [`Self::read_ahead`]): decoding goes on at that PSB.
    slice_ended: bool,
    /// A TIP.PGD without an IP taken as libipt's disable event (the time at
    /// its packet), waiting for the far transfer it binds to.
    held_disable: Option<Option<u64>>,
}

/// Where the decoder stands after handling something.
enum Next {
    /// Keep executing at this IP.
    At(u64),
    /// Tracing is disabled; wait for TIP.PGE or a PSB.
    Disabled,
    /// Stop (end of trace).
    End,
    /// The last instruction completed, but the event after it could not be
    /// decoded (reading ahead past its packet failed).
    Failed(usize, FlowError),
}

/// Whether a TIP.PGD with an IP (tracing stopped by an IP filter) takes
/// effect after an instruction of this kind: after any branch but a direct
/// jump or call elsewhere than that IP (libipt's rule; a TIP.PGD without IP
/// waits for a far transfer).
fn disables_at(kind: FlowKind, at: u64) -> bool {
    match kind {
        FlowKind::Other => false,
        FlowKind::Jump { target } | FlowKind::Call { target } => target == at,
        _ => true,
    }
}

/// An event libipt holds until the next TIP, TIP.PGE or TIP.PGD.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BoundToTip {
    /// A MODE.Exec, with the mode it gives and the time at its packet
    /// (libipt stamps the event with it).
    ExecMode(Option<ExecMode>, Option<u64>),
    /// A FUP read while tracing is off (an asynchronous branch).
    AsyncBranch,
}

/// Where libipt's read-ahead stops.
enum Ahead {
    /// At a packet that answers a query or is an event.
    Packet(Packet),
    /// At a malformed such packet (decoded when it is needed): its offset
    /// and the error decoding it gives.
    Malformed(usize, FlowError),
    /// At the end of the trace (its length).
    End(usize),
}

/// Something bound to an IP the flow will reach: an asynchronous event (FUP)
/// or a PSB+ status update.
#[derive(Clone, Copy)]
enum Binding {
    Async { ip: u64, offset: usize },
    Psb { ip: u64, offset: usize },
}

type Flow<T> = Result<T, (usize, FlowError)>;

impl<'a, M: Memory> FlowDecoder<'a, M> {
    /// A decoder over `trace` reading code from `memory`.
    pub fn new(trace: &'a [u8], memory: &'a M) -> Self {
        FlowDecoder {
            packets: PacketDecoder::new(trace),
            memory,
            peeked: None,
            tnt_bits: 0,
            tnt_len: 0,
            returns: VecDeque::new(),
            time: None,
            notified: None,
            slice_time_unknown: false,
            history: History::default(),
            start: None,
            stop_at: None,
            rejected_event: None,
            trace_ends: false,
            tip_queue: Vec::new(),
            disabled: false,
            mode: None,
            options: FlowOptions::default(),
            stopped: false,
            cut_packet: None,
            damaged_tip_ahead: false,
            slice_start_blocks: 0,
            slice_psbs: Cow::Borrowed(&[]),
            slice_cut: false,
            slice_ended: false,
            held_disable: None,
        }
    }

    /// A decoder for the segment of `trace` from the PSB at `start` up to
    /// (not including) the PSB at `stop` (`None`: to the end). Decoding the
    /// segments of a trace one by one and appending their histories gives the
    /// history of the whole trace (see [`decode_parallel`]). When a damaged
    /// packet straddles the PSB at `stop`, one decoder would not see that
    /// PSB; neither does this one: it decodes on to the end of the trace
    /// ([`History::stopped_at_segment_end`] is then false, and the later
    /// segments' histories are not needed).
    pub fn for_segment(trace: &'a [u8], memory: &'a M, start: usize, stop: Option<usize>) -> Self {
        let mut decoder = Self::new(trace, memory);
        decoder.start = Some(start);
        decoder.stop_at = stop;
        decoder
    }

    /// The same decoder with these options.
    pub fn with_options(self, options: FlowOptions) -> Self {
        self.with_options_and_psbs(options, None)
    }

    /// [`Self::with_options`], with the trace's PSB offsets when the caller
    /// has found them already (LLDB's slices need them).
    fn with_options_and_psbs(mut self, options: FlowOptions, psbs: Option<&'a [usize]>) -> Self {
        self.options = options;
        self.slice_psbs = match (options.lldb_psb_slices, psbs) {
            (false, _) => Cow::Borrowed(&[]),
            (true, Some(psbs)) => Cow::Borrowed(psbs),
            (true, None) => Cow::Owned(crate::packet::sync::psb_offsets(self.packets.data()).collect()),
        };
        self
    }

    /// With LLDB's slices, whether a packet from `offset` to `end` crosses a
    /// PSB: LLDB's slice ends at that PSB, so for it the packet is cut short
    /// there.
    fn crosses_slice_start(&self, offset: usize, end: usize) -> bool {
        let next = self.slice_psbs.partition_point(|&psb| psb <= offset);
        self.slice_psbs.get(next).is_some_and(|&psb| psb < end)
    }

    fn at_stop(&mut self, offset: usize) -> bool {
        let at = self.stop_at == Some(offset);
        self.stopped |= at;
        at
    }

    /// Decodes the whole stream into a compact [`History`].
    pub fn decode_history(mut self) -> History {
        // An estimate of about ten executed blocks per trace byte (TNT bits
        // are dense), reserved at once instead of grown by copying.
        let bytes = self.stop_at.unwrap_or(self.packets.data().len()).saturating_sub(self.start.unwrap_or(0));
        self.history.reserve_blocks(bytes.saturating_mul(10).min(1 << 22));
        let mut synced = match self.start {
            Some(start) => self.packets.sync_set(start) && self.usable_sync_point(),
            None => self.resync(),
        };
        while synced {
            match self.run() {
                // LLDB's slice ended inside a packet: on to the next one.
                Ok(()) if self.slice_cut || self.slice_ended => synced = self.resync(),
                Ok(()) => break,
                Err((offset, error)) => {
                    self.history.push_extra(Extra::Error { offset, error });
                    synced = self.resync();
                }
            }
        }
        self.history.timing.read = self.time;
        self.history.timing.notified = self.notified;
        self.history.stopped_at_segment_end = self.stop_at.is_some() && self.stopped;
        self.history.shrink_to_fit();
        self.history
    }

    /// Decodes the whole stream into items (instructions expanded).
    pub fn decode_all(self) -> Vec<Item> {
        let history = self.decode_history();
        history.items().collect()
    }

    fn resync(&mut self) -> bool {
        self.slice_cut = false;
        self.slice_ended = false;
        self.held_disable = None;
        self.cut_packet = None;
        self.tnt_len = 0;
        self.rejected_event = None;
        self.trace_ends = false;
        self.tip_queue.clear();
        self.mode = None;
        self.returns.clear();
        let synced = match self.peeked.take() {
            // A PSB already read ahead is the next sync point.
            Some((offset, Packet::Psb)) => self.packets.sync_set(offset),
            Some((offset, _)) => {
                self.packets.seek(offset);
                self.packets.sync_forward().is_some()
            }
            None => self.packets.sync_forward().is_some(),
        };
        synced && self.usable_sync_point()
    }

    /// Whether the PSB at the current position starts a usable PSB+ (within
    /// this decoder's segment). A damaged header is an error item and the
    /// next PSB is tried: libipt fails to synchronise there and LLDB stops
    /// decoding the thread, retrace goes on.
    fn usable_sync_point(&mut self) -> bool {
        loop {
            let psb = self.packets.offset();
            if self.at_stop(psb) {
                return false;
            }
            let mut ahead = self.packets.clone();
            let header = match next_packet(&mut ahead) {
                Ok(Some((_, Packet::Psb))) => read_psb_header(&mut ahead, psb),
                _ => Ok(true),
            };
            match header {
                Ok(_) => return true,
                Err((offset, error)) => {
                    self.history.push_extra(Extra::Error { offset, error });
                    if self.packets.sync_forward().is_none() {
                        return false;
                    }
                }
            }
        }
    }

    fn event(&mut self, event: Event) {
        self.history.push_extra(Extra::Event(event));
    }

    /// A TSC packet: the time of what follows. It is reported (as a clock
    /// tick) only with the next event, as LLDB does: libipt stamps each
    /// event with the time at its packet, and LLDB turns a changed stamp
    /// into a tick item just before the event.
    fn tick(&mut self, tsc: u64) {
        self.time = Some(tsc);
    }

    /// Reports the current time if it changed since the last report (before
    /// an event, an overflow, a sync point; tracing enabled, CBR and MODE
    /// are libipt events too, though not items).
    fn notify_time(&mut self) {
        self.notify_time_at(self.time);
    }

    /// Reports `time`, the time at an event's packet (read before reading
    /// ahead past it), if it changed since the last report.
    fn notify_time_at(&mut self, time: Option<u64>) {
        if time.is_none() && self.slice_time_unknown {
            // LLDB's slice decoder has not met a TSC yet: the event has none.
            return;
        }
        if time.is_none() && self.time.is_none() && self.history.timing.first_timeless_event.is_none() {
            // No TSC read yet: when this is a later part of a trace, the
            // time read before it belongs here (see `History::append`).
            self.history.timing.first_timeless_event = Some(self.history.extras_len());
        }
        if time != self.notified {
            if let Some(tsc) = time {
                self.event(Event::ClockTick(tsc));
            }
            self.notified = time;
        }
    }

    /// Reads the PSB+ header after a PSB at `offset`; returns the FUP IP
    /// (tracing on) or `None` (tracing off).
    fn psb_plus(&mut self, offset: usize) -> Flow<Option<u64>> {
        self.slice_start_blocks = self.history.executed_blocks();
        self.held_disable = None;
        // A new slice: whatever ended the last one (also on a path where
        // tracing stayed off) is behind.
        self.trace_ends = false;
        self.slice_ended = false;
        // The same header checks wherever a PSB+ is met (read ahead, synced
        // to, or reached while tracing is off).
        read_psb_header(&mut self.packets.clone(), offset)?;
        // Nothing crosses a PSB (LLDB decodes each PSB-to-PSB slice with a
        // fresh decoder): the mode is the header's, or unknown.
        self.mode = None;
        self.tip_queue.clear();
        let mut ip = None;
        let mut header_tsc = false;
        loop {
            let (at, packet) = match next_packet(&mut self.packets) {
                Ok(Some(item)) => item,
                Ok(None) => return Err((self.packets.offset(), FlowError::Mismatch { expected: "PSBEND before the end of the trace", ip: None })),
                Err(e) => return Err((e.offset, FlowError::Packet(e.kind, None))),
            };
            match packet {
                Packet::Psbend => break,
                Packet::Tsc(tsc) => {
                    self.tick(tsc);
                    header_tsc = true;
                }
                Packet::Fup(fup) => ip = fup.ip,
                Packet::ModeExec { csl, csd, .. } => self.mode = ExecMode::from_mode_exec(csl, csd),
                Packet::Ovf => return Err((at, FlowError::Overflow)),
                _ => {}
            }
        }
        if self.options.lldb_psb_slices && !header_tsc {
            // LLDB decodes the slice with a fresh decoder, which knows no
            // time until a TSC; it announces the slice's TSC (the first one
            // an event after the PSB carries) before the sync point.
            self.slice_time_unknown = false;
            if let Some(tsc) = self.slice_tsc_ahead() {
                self.notify_time_at(Some(tsc));
            }
            self.time = None;
            self.slice_time_unknown = true;
        } else {
            self.slice_time_unknown = false;
            self.notify_time();
        }
        self.event(Event::SyncPoint(offset));
        self.tnt_len = 0;
        self.returns.clear();
        Ok(ip)
    }

    /// LLDB's TSC of a slice whose PSB+ has none: the time of the first
    /// event that libipt's query decoder, synchronised afresh at the PSB
    /// (knowing no time), gives with a TSC — the TSC met before an event
    /// packet, while the packets on the way are events or status (a TNT, or
    /// a TIP no FUP waits for, ends the search).
    fn slice_tsc_ahead(&self) -> Option<u64> {
        let mut ahead = self.packets.clone();
        let (mut tsc, mut fup_waits) = (None, false);
        while let Ok(Some((_, packet))) = next_packet(&mut ahead) {
            match packet {
                Packet::Tsc(value) => tsc = Some(value),
                Packet::Mtc(_) | Packet::Cyc(_) | Packet::Tma { .. } | Packet::Pad | Packet::Psb | Packet::Psbend => {}
                Packet::Fup(_) => fup_waits = true,
                Packet::TntShort(_) | Packet::TntLong(_) => return None,
                Packet::Tip(_) if !fup_waits => return None,
                _ if tsc.is_some() => return tsc,
                _ => fup_waits = false,
            }
        }
        None
    }

    /// The FUP IP of the PSB+ that starts at the packet decoder's position
    /// (the PSB itself already read), without consuming anything.
    fn psb_fup_lookahead(&self) -> Option<u64> {
        Self::header_fup(self.packets.clone())
    }

    /// The FUP IP of the PSB+ header `ahead` is in (after its PSB).
    fn header_fup(mut ahead: PacketDecoder<'a>) -> Option<u64> {
        let mut ip = None;
        while let Ok(Some((_, packet))) = next_packet(&mut ahead) {
            match packet {
                Packet::Psbend => break,
                Packet::Fup(fup) => ip = fup.ip,
                _ => {}
            }
        }
        ip
    }

    /// The next packet that matters for the flow, handling timing and
    /// status packets on the way. `None` at the end of the trace.
    fn fetch(&mut self) -> Flow<Option<(usize, Packet)>> {
        if let Some(item) = self.peeked.take() {
            return Ok(Some(item));
        }
        if self.slice_cut {
            return Ok(None);
        }
        loop {
            let (offset, packet) = match next_packet(&mut self.packets) {
                Ok(Some(item)) if self.crosses_slice_start(item.0, self.packets.offset()) => {
                    // As a packet cut off by the end of the (slice's) buffer.
                    self.packets.seek(item.0);
                    self.cut_packet = Some(item.0);
                    self.slice_cut = true;
                    return Ok(None);
                }
                Ok(Some(item)) => item,
                Ok(None) => return Ok(None),
                // A packet cut off by the end of the buffer: the trace ends
                // before it (libipt's read-ahead treats it so, and LLDB shows
                // no error; `retrace ptdump` does).
                Err(e) if matches!(e.kind, crate::packet::PacketErrorKind::Truncated { .. }) => {
                    self.cut_packet = Some(e.offset);
                    return Ok(None);
                }
                Err(e) => return Err((e.offset, FlowError::Packet(e.kind, None))),
            };
            match packet {
                Packet::Tsc(tsc) => self.tick(tsc),
                Packet::TntShort(_)
                | Packet::TntLong(_)
                | Packet::Tip(_)
                | Packet::TipPge(_)
                | Packet::TipPgd(_)
                | Packet::Fup(_)
                | Packet::Psb
                | Packet::Ovf => return Ok(Some((offset, packet))),
                // libipt events that LLDB does not show, but stamps with time
                // (see `status_event`).
                Packet::Cbr(_) | Packet::ModeExec { .. } => return Ok(Some((offset, packet))),
                Packet::ModeTsx { .. } if self.disabled => return Ok(Some((offset, packet))),
                _ => {} // timing, paging, power and other status packets
            }
        }
    }

    fn peek(&mut self) -> Flow<Option<(usize, Packet)>> {
        if self.peeked.is_none() {
            self.peeked = self.fetch()?;
        }
        Ok(self.peeked)
    }

    /// Takes one TNT bit, reading a TNT packet if needed. `Ok(None)` when the
    /// next flow packet is not a TNT (it stays peeked).
    #[inline]
    fn tnt_bit(&mut self) -> Flow<Option<bool>> {
        self.damaged_tip_ahead = false;
        // The common case: a cached bit, not the last one.
        if self.tnt_len > 1 {
            self.tnt_len -= 1;
            return Ok(Some(self.tnt_bits >> self.tnt_len & 1 == 1));
        }
        self.tnt_bit_refill()
    }

    /// [`Self::tnt_bit`] for the last cached bit or with none cached.
    #[inline(never)]
    fn tnt_bit_refill(&mut self) -> Flow<Option<bool>> {
        if self.tnt_len == 0 {
            let ahead = match self.peek() {
                Err((at, FlowError::Packet(kind, _))) if decoded_later(&kind) && self.packets.data().get(at).map(|b| b & 0x1f) == Some(0x0d) => {
                    self.damaged_tip_ahead = true;
                    return Ok(None);
                }
                other => other?,
            };
            match ahead {
                Some((_, Packet::TntShort(tnt) | Packet::TntLong(tnt))) => {
                    self.peeked = None;
                    self.tnt_bits = tnt.bits;
                    self.tnt_len = tnt.len as u32;
                    self.read_ahead()?;
                }
                // A FUP with a TNT right after it (a damaged trace): libipt
                // read the FUP ahead as an asynchronous branch waiting for a
                // TIP, and takes the TNT bits.
                Some((_, Packet::Fup(Ip { ip: Some(_), .. }))) if self.tnt_after_peeked() => {
                    self.peeked = None;
                    self.tip_queue.push(BoundToTip::AsyncBranch);
                    return self.tnt_bit_refill();
                }
                _ => return Ok(None),
            }
        }
        self.tnt_len -= 1;
        if self.tnt_len == 0 {
            self.check_next_event(true)?;
        }
        Ok(Some(self.tnt_bits >> self.tnt_len & 1 == 1))
    }

    /// Whether the packet after the peeked one (past timing packets) is a TNT.
    fn tnt_after_peeked(&self) -> bool {
        let mut ahead = self.packets.clone();
        loop {
            match next_packet(&mut ahead) {
                Ok(Some((_, Packet::Pad | Packet::Tsc(_) | Packet::Mtc(_) | Packet::Cyc(_) | Packet::Tma { .. }))) => {}
                Ok(Some((_, Packet::TntShort(_) | Packet::TntLong(_)))) => return true,
                _ => return false,
            }
        }
    }

    /// libipt decodes the next event as soon as nothing is left before it
    /// (after a query that empties the TNT cache or takes a TIP, and after
    /// each event), and a failure there is the failure of that query or
    /// event. With tracing `enabled` after what was just consumed, checks
    /// the event packet ahead the way libipt 2.0.5 rejects it.
    fn check_next_event(&mut self, enabled: bool) -> Flow<()> {
        let data = self.packets.data();
        // A malformed event packet fails its (eager) decoding; a malformed
        // TNT or TIP waits for the branch that needs it.
        let Some((offset, packet)) = self.peek().or_else(|e| if is_damaged_query(data, &e) { Ok(None) } else { Err(e) })?
        else {
            // An event packet cut short by the end of the trace: libipt
            // knows it by its opcode and fails decoding it.
            return match self.cut_packet {
                Some(at) if is_event_opcode(data, at) => {
                    Err((at, FlowError::Packet(crate::packet::PacketErrorKind::Truncated { needed: 0, available: data.len() - at }, None)))
                }
                _ => Ok(()),
            };
        };
        match packet {
            Packet::TipPge(Ip { ip: None, .. }) => return Err((offset, pge_without_ip())),
            Packet::TipPge(_) if enabled => {
                // libipt's query decoder gives the enable event (which the
                // instruction decoder then rejects) only after consuming the
                // packet and reading ahead past it: a failure there comes first.
                self.scan_ahead(&mut self.packets.clone(), None, false)?;
                self.rejected_event = Some((offset, FlowError::BadContext(None)));
                return Ok(());
            }
            Packet::TipPgd(_) if !enabled => {
                // Decoded, it waits for an instruction to bind to, and the
                // next instruction query fails: tracing is off.
                self.rejected_event = Some((offset, FlowError::NotEnabled));
                return Ok(());
            }
            Packet::Fup(fup) if fup.ip.is_none() => return Err((offset, FlowError::IpSuppressed(None))),
            Packet::TipPge(_) | Packet::TipPgd(_) | Packet::Fup(_) | Packet::ModeExec { .. } | Packet::ModeTsx { .. } | Packet::Cbr(_) => {}
            _ => return Ok(()), // TNT, TIP, PSB, OVF: not decoded ahead of time
        }
        // Decoding the event reads ahead past it, to the next flow or event packet.
        let mut ahead = self.packets.clone();
        let mut next = self.scan_ahead(&mut ahead, None, false)?;
        if let Packet::Fup(_) | Packet::ModeExec { .. } = packet {
            // MODE packets after a FUP (libipt reads it as status: an
            // asynchronous branch waiting for a TIP) or a MODE.Exec are
            // decoded too (MODE.Exec queues up; MODE.TSX waits for a FUP,
            // or is an event of its own while tracing is off), reading ahead
            // past each.
            while let Ahead::Packet(mode @ (Packet::ModeExec { .. } | Packet::ModeTsx { .. })) = next {
                if matches!(mode, Packet::ModeTsx { .. }) && !enabled {
                    // An event of its own: the query that decodes it reads
                    // ahead past it, and stops.
                    self.scan_ahead(&mut ahead, None, false)?;
                    return Ok(());
                }
                next = self.scan_ahead(&mut ahead, None, false)?;
            }
        }
        match (packet, next) {
            // The event after a FUP: a TIP.PGE cannot apply while tracing is on.
            (Packet::Fup(_), Ahead::Packet(Packet::TipPge(_))) if enabled => {
                self.rejected_event = Some((offset, FlowError::BadContext(None)));
            }
            // MODE.Exec binds to the TIP, TIP.PGE or TIP.PGD after it; a
            // TNT there does not answer the event query.
            (Packet::ModeExec { .. }, Ahead::Packet(next)) => {
                if matches!(next, Packet::TntShort(_) | Packet::TntLong(_)) {
                    return Err((offset, FlowError::Mismatch { expected: "a TIP after MODE.Exec", ip: None }));
                }
                if !matches!(next, Packet::Tip(_) | Packet::TipPge(_) | Packet::TipPgd(_)) {
                    return Ok(());
                }
                // Decoding MODE.Exec decodes the packet it binds to. A
                // TIP.PGE gives its enable event first (which cannot apply
                // while tracing is on); a TIP.PGD gives the MODE.Exec event
                // and is read past; a TIP gives it and is consumed without
                // reading ahead past it (what follows fails the next query,
                // if anything; tracing being off, that query fails first).
                if let Packet::TipPge(Ip { ip: None, .. }) = next {
                    return Err((offset, pge_without_ip()));
                }
                if matches!(next, Packet::TipPge(_)) {
                    if enabled {
                        self.rejected_event = Some((offset, FlowError::BadContext(None)));
                    }
                } else if matches!(next, Packet::TipPgd(_)) {
                    self.scan_ahead(&mut ahead, None, false)?;
                }
            }
            // MODE.Exec makes libipt decode the TIP, TIP.PGE or TIP.PGD it
            // binds to at once: a malformed one fails this event query (a
            // TNT, damaged or not, does not answer it).
            (Packet::ModeExec { .. }, Ahead::Malformed(at, error)) => {
                if is_tnt_opcode(data, at) {
                    return Err((offset, FlowError::Mismatch { expected: "a TIP after MODE.Exec", ip: None }));
                }
                return Err((at, error));
            }
            // The trace ends before the packet MODE.Exec binds to.
            (Packet::ModeExec { .. }, Ahead::End(end)) => {
                return Err((end, FlowError::Packet(crate::packet::PacketErrorKind::Truncated { needed: 1, available: 0 }, None)))
            }
            _ => {}
        }
        Ok(())
    }

    /// Reads ahead to the next flow or event packet after consuming one, as
    /// libipt's query decoder does (see [`Self::scan_ahead`]); a packet
    /// error on the way belongs to the query or event that consumed the
    /// packet before it.
    fn read_ahead(&mut self) -> Flow<()> {
        let data = self.packets.data();
        let first = match self.peek() {
            Err((at, FlowError::Packet(kind, _))) if left_for_later(data, at, &kind) => return Ok(()),
            Err(e) => return Err(e),
            Ok(None) => {
                self.trace_ends = true;
                return Ok(());
            }
            Ok(Some(first)) => first,
        };
        if matches!(first.1, Packet::Psb)
            && self.options.lldb_psb_slices
            && matches!(read_psb_header(&mut self.packets.clone(), first.0), Ok(true))
            && self.psb_fup_lookahead().is_none()
        {
            // LLDB's slice ends at this PSB, and with tracing off after it
            // LLDB does not decode on to where the next slice starts: the
            // trace ends here.
            self.trace_ends = true;
            self.slice_ended = true;
            return Ok(());
        }
        if matches!(first.1, Packet::Fup(_) | Packet::Psb) {
            self.scan_ahead(&mut self.packets.clone(), Some(first), true)?;
        }
        Ok(())
    }

    /// libipt's read-ahead over `ahead` (after `first`, when that was read
    /// already): it decodes status packets — timing, FUPs (which must have
    /// an IP), whole PSB+ headers — up to a packet that answers a query or
    /// is an event, returned. `None` at a malformed such packet (decoded
    /// when needed) or at the end of the trace, which, with `note_end`,
    /// sets [`Self::trace_ends`]. Without `note_end` (decoding an event
    /// ahead) and with LLDB's PSB slices, a PSB ends the trace too.
    fn scan_ahead(&mut self, ahead: &mut PacketDecoder<'a>, mut first: Option<(usize, Packet)>, note_end: bool) -> Flow<Ahead> {
        let data = ahead.data();
        loop {
            let (offset, packet) = match first.take().map_or_else(|| next_packet(ahead), |p| Ok(Some(p))) {
                // Cut short by the end of LLDB's slice.
                Ok(Some(next)) if self.crosses_slice_start(next.0, ahead.offset()) => break,
                Ok(Some(next)) => next,
                Ok(None) => break,
                Err(e) if matches!(e.kind, crate::packet::PacketErrorKind::Truncated { .. }) => break,
                Err(e) if left_for_later(data, e.offset, &e.kind) => return Ok(Ahead::Malformed(e.offset, FlowError::Packet(e.kind, None))),
                Err(e) => return Err((e.offset, FlowError::Packet(e.kind, None))),
            };
            match packet {
                Packet::Fup(fup) if fup.ip.is_none() => return Err((offset, FlowError::IpSuppressed(None))),
                // Decoding an event ahead, LLDB's slice ends at the PSB.
                Packet::Psb if !note_end && self.options.lldb_psb_slices => break,
                // After a query, LLDB's slice ends at an intact PSB+ too;
                // its loop then decodes on to where the next slice starts (as
                // retrace does, through the PSB+): not the end of the trace.
                // (At a damaged one LLDB made no slice: its header is read.)
                Packet::Psb if self.options.lldb_psb_slices && matches!(read_psb_header(&mut ahead.clone(), offset), Ok(true)) => {
                    return Ok(Ahead::Packet(Packet::Psb))
                }
                Packet::Psb if !read_psb_header(ahead, offset)? => break,
                Packet::Fup(_) | Packet::Psb | Packet::Psbend | Packet::Pad | Packet::Tsc(_) | Packet::Mtc(_) | Packet::Cyc(_) | Packet::Tma { .. } => {}
                _ => return Ok(Ahead::Packet(packet)),
            }
        }
        self.trace_ends |= note_end;
        Ok(Ahead::End(data.len()))
    }

    /// After a query: whether it took the last answer the trace has (see
    /// [`Self::trace_ends`]). If so, the instruction that asked is taken
    /// back: libipt returns it with `pts_eos` and LLDB stops there.
    #[inline]
    fn last_answer(&mut self) -> bool {
        let last = self.tnt_len == 0 && self.trace_ends;
        if last {
            self.history.drop_last_instruction();
        }
        last
    }

    /// The branch of the last pushed instruction (at `ip`) could not be
    /// decoded: the instruction is taken back and the error names it.
    fn query_failed(&mut self, (offset, error): (usize, FlowError), ip: u64) -> (usize, FlowError) {
        self.history.drop_last_instruction();
        let at_psb = matches!(self.peeked, Some((_, Packet::Psb)));
        let error = match error {
            // In LLDB the query meets the end of its PSB slice instead.
            FlowError::Mismatch { .. } if at_psb && self.options.lldb_psb_slices => FlowError::SliceEnd(ip),
            FlowError::Packet(kind, None) => FlowError::Packet(kind, Some(ip)),
            FlowError::Mismatch { expected, ip: None } => FlowError::Mismatch { expected, ip: Some(ip) },
            FlowError::BadContext(None) => FlowError::BadContext(Some(ip)),
            FlowError::IpSuppressed(None) => FlowError::IpSuppressed(Some(ip)),
            FlowError::NoIp(None) => FlowError::NoIp(Some(ip)),
            other => other,
        };
        (offset, error)
    }

    fn push_return(&mut self, address: u64, call_block: u32) {
        if self.returns.len() == RETURN_STACK_DEPTH {
            self.returns.pop_front();
        }
        self.returns.push_back((address, call_block));
    }

    fn offset(&self) -> usize {
        self.peeked.map(|(offset, _)| offset).unwrap_or_else(|| self.packets.offset())
    }

    /// A TIP, TIP.PGE or TIP.PGD was consumed: what was queued for it
    /// applies (a MODE.Exec sets the mode the code is decoded in).
    fn take_tip_queue(&mut self) -> Vec<BoundToTip> {
        let queued = std::mem::take(&mut self.tip_queue);
        for bound in &queued {
            if let BoundToTip::ExecMode(mode, _) = *bound {
                self.mode = mode;
            }
        }
        queued
    }

    /// A CBR or MODE.Exec (already consumed): a libipt event that LLDB
    /// does not show, but stamps with the time at its packet.
    fn status_event(&mut self, packet: Packet) -> Flow<()> {
        let time = self.time;
        self.read_ahead()?;
        // After a CBR event libipt decodes the next event as soon as nothing
        // is before it.
        if let Packet::Cbr(_) = packet {
            self.check_next_event(!self.disabled)?;
        }
        match packet {
            // MODE.Exec waits for the TIP it binds to, and is stamped with it.
            Packet::ModeExec { csl, csd, .. } => self.tip_queue.push(BoundToTip::ExecMode(ExecMode::from_mode_exec(csl, csd), time)),
            _ => self.notify_time_at(time),
        }
        Ok(())
    }

    /// The next packet that is not a status event (those are handled).
    fn fetch_flow(&mut self) -> Flow<Option<(usize, Packet)>> {
        loop {
            match self.fetch()? {
                Some((_, packet @ (Packet::Cbr(_) | Packet::ModeExec { .. }))) => self.status_event(packet)?,
                other => return Ok(other),
            }
        }
    }

    /// A TIP.PGD (already consumed) disabled tracing: the `event`, stamped
    /// with the time at its packet — unless decoding past it fails, which
    /// replaces the event (as in libipt, where the failure is the event
    /// query's).
    fn tracing_disabled(&mut self, event: Event) -> Next {
        self.take_tip_queue();
        self.disabled = true;
        let time = self.time;
        if let Err((offset, error)) = self.read_ahead().and_then(|()| self.check_next_event(false)) {
            return Next::Failed(offset, error);
        }
        self.tracing_disabled_at(time, event)
    }

    /// Tracing is disabled by a TIP.PGD consumed (and read past) already,
    /// whose packet was read at `time`.
    fn tracing_disabled_at(&mut self, time: Option<u64>, event: Event) -> Next {
        self.disabled = true;
        self.held_disable = None;
        self.notify_time_at(time);
        self.event(event);
        // LLDB's slice ends here: it re-lists its last instruction and,
        // tracing being off, the next instruction query fails (libipt's
        // end of stream).
        if self.options.lldb_psb_slices {
            if let Some((psb, ip)) = self.lldb_repeat_at_slice_end() {
                return Next::Failed(psb, FlowError::SliceEnd(ip));
            }
        }
        Next::Disabled
    }

    /// A TIP.PGD without an IP ends only a `far` transfer (SYSCALL, INT,
    /// IRET…); after a near one it does not answer the query.
    fn indirect(&mut self, at: u64, far: bool) -> Flow<Next> {
        // TNT bits left over do not stop libipt at an indirect branch (they
        // stay for the next conditional branch) — but then an event packet
        // next has not been taken as an event, and does not answer.
        if self.tnt_len > 0 {
            let not_an_answer = (self.offset(), FlowError::Mismatch { expected: "a TIP, not an event", ip: Some(at) });
            match self.peek() {
                Ok(Some((_, Packet::Tip(_) | Packet::TntShort(_) | Packet::TntLong(_) | Packet::Psb | Packet::Fup(_)))) | Ok(None) => {}
                Ok(Some(_)) => return Err(not_an_answer),
                // A damaged event packet is known by its opcode (the query
                // fails); a damaged TIP fails decoding.
                Err((at_offset, _)) if is_event_opcode(self.packets.data(), at_offset) => return Err(not_an_answer),
                Err(e) => return Err(e),
            }
        }
        let mut next = self.fetch_flow()?;
        if let Some((offset, Packet::TntShort(tnt) | Packet::TntLong(tnt))) = next {
            if self.tnt_len > 0 {
                return Err((offset, FlowError::Mismatch { expected: "a TIP, not a second TNT", ip: Some(at) }));
            }
            // libipt caches one TNT packet met while looking for the TIP;
            // then only a TIP answers (an event there is no answer).
            self.tnt_bits = tnt.bits;
            self.tnt_len = tnt.len as u32;
            self.read_ahead()?;
            next = self.fetch_flow()?;
            match next {
                Some((_, Packet::Tip(_) | Packet::Psb)) | None => {}
                Some((offset, _)) => return Err((offset, FlowError::Mismatch { expected: "a TIP after a TNT", ip: Some(at) })),
            }
        }
        match next {
            Some((offset, Packet::Tip(tip))) => {
                self.take_tip_queue();
                self.read_ahead()?;
                self.check_next_event(tip.ip.is_some())?;
                if self.last_answer() {
                    return Ok(Next::End);
                }
                // The branch needs an IP to go on (libipt: "no ip").
                tip.ip.map(Next::At).ok_or((offset, FlowError::NoIp(None)))
            }
            Some((_, Packet::TipPgd(pgd))) if far || pgd.ip.is_some() => Ok(self.tracing_disabled(Event::HardwareDisabled)),
            Some((offset, Packet::Psb)) => {
                self.peeked = Some((offset, Packet::Psb));
                Err((offset, FlowError::Mismatch { expected: "a TIP, not a PSB", ip: Some(at) }))
            }
            Some((offset, _)) => Err((offset, FlowError::Mismatch { expected: "a TIP", ip: Some(at) })),
            None => Ok(Next::End),
        }
    }

    /// Handles a FUP bound to the current IP (the instruction there has not
    /// executed).
    fn async_event(&mut self, fup_offset: usize) -> Flow<Next> {
        match self.fetch_flow()? {
            Some((_, Packet::TipPgd(_))) => Ok(self.tracing_disabled(Event::SoftwareDisabled)),
            Some((_, Packet::Tip(tip))) => {
                self.take_tip_queue();
                tip.ip.map(Next::At).ok_or((fup_offset, FlowError::Mismatch { expected: "an asynchronous branch target", ip: None }))
            }
            Some((offset, _)) => Err((offset, FlowError::Mismatch { expected: "TIP or TIP.PGD after a FUP", ip: None })),
            None => Ok(Next::End),
        }
    }

    /// Recovers from an overflow (the OVF at `offset` already consumed), as
    /// libipt does: an error item; TNT bits and the return stack are gone;
    /// if a FUP follows with only timing packets between, tracing resumed
    /// at its IP, otherwise it resumed disabled (a TIP.PGE or PSB+ says
    /// where it starts again).
    fn overflow(&mut self, offset: usize) -> Flow<Next> {
        self.notify_time();
        self.history.push_extra(Extra::Error { offset, error: FlowError::Overflow });
        self.tnt_len = 0;
        self.returns.clear();
        loop {
            let Some((at, packet)) = (match next_packet(&mut self.packets) {
                Ok(item) => item,
                Err(e) => return Err((e.offset, FlowError::Packet(e.kind, None))),
            }) else {
                return Ok(Next::End);
            };
            match packet {
                Packet::Fup(fup) => return Ok(fup.ip.map_or(Next::Disabled, Next::At)),
                Packet::Tsc(tsc) => self.tick(tsc),
                Packet::Pad
                | Packet::Mnt(_)
                | Packet::Cbr(_)
                | Packet::Tma { .. }
                | Packet::Mtc(_)
                | Packet::Cyc(_) => {}
                other => {
                    self.peeked = Some((at, other));
                    return Ok(Next::Disabled);
                }
            }
        }
    }

    /// What binds to an IP ahead, once every TNT bit before it is consumed.
    fn binding(&mut self) -> Flow<Option<Binding>> {
        if self.tnt_len > 0 {
            return Ok(None);
        }
        let ahead = match self.peek() {
            // A damaged TNT or TIP binds nothing; the branch that needs it fails.
            Err(e) if is_damaged_query(self.packets.data(), &e) => None,
            other => other?,
        };
        match ahead {
            Some((offset, Packet::Fup(fup))) => Ok(fup.ip.map(|ip| Binding::Async { ip, offset })),
            Some((offset, Packet::Psb)) => match self.psb_fup_lookahead() {
                Some(ip) => Ok(Some(Binding::Psb { ip, offset })),
                None => Ok(None),
            },
            _ => Ok(None),
        }
    }

    /// Applies a binding at its IP; returns where the flow continues.
    fn bind(&mut self, binding: Binding) -> Flow<Next> {
        self.peeked = None;
        match binding {
            Binding::Async { offset, .. } => self.async_event(offset),
            Binding::Psb { ip, offset } => {
                if self.options.lldb_psb_slices && self.needs_query_at(ip) {
                    self.history.push_extra(Extra::Error { offset, error: FlowError::SliceEnd(ip) });
                }
                if self.at_stop(offset) {
                    self.peeked = Some((offset, Packet::Psb));
                    return Ok(Next::End);
                }
                self.psb_plus(offset)?;
                // Synchronising there, libipt reads ahead past the PSB+: the
                // trace may end right after it.
                self.read_ahead()?;
                self.check_next_event(true)?;
                Ok(Next::At(ip))
            }
        }
    }

    /// LLDB's artifact when its slice ends right after events (those that
    /// re-enable tracing, or a disable): its slice loop stops in event
    /// processing, and the loop that decodes on to the next slice's first IP
    /// starts by listing the instruction it last decoded — a second time.
    /// Only when this slice listed one and the next PSB says where its slice
    /// starts (elsewhere). Returns that PSB's offset and the instruction.
    fn lldb_repeat_at_slice_end(&mut self) -> Option<(usize, u64)> {
        let (psb, next_slice_ip) = match self.peek() {
            Ok(Some((psb, Packet::Psb))) => (psb, self.psb_fup_lookahead()?),
            // A packet ran into the next slice's PSB: the slice ends before it.
            Ok(None) if self.slice_cut => {
                let psb = *self.slice_psbs.get(self.slice_psbs.partition_point(|&psb| psb <= self.packets.offset()))?;
                let mut ahead = self.packets.clone();
                ahead.seek(psb);
                next_packet(&mut ahead).ok()??;
                (psb, Self::header_fup(ahead)?)
            }
            _ => return None,
        };
        if self.history.executed_blocks() <= self.slice_start_blocks {
            return None;
        }
        let last = self.history.last_instruction_ip().filter(|&ip| ip != next_slice_ip)?;
        let id = self.history.table.block_at(last, self.mode, self.memory).ok()?;
        let one = self.history.table.prefix(id, 1);
        self.history.push_block(one);
        Some((psb, last))
    }

    /// Whether the instruction at `ip` takes its next IP from the trace.
    fn needs_query_at(&mut self, ip: u64) -> bool {
        match self.history.table.block_at(ip, self.mode, self.memory) {
            Ok(id) => {
                let block = self.history.table.get(id);
                block.count == 1 && !matches!(block.last.kind, FlowKind::Other | FlowKind::Jump { .. } | FlowKind::Call { .. })
            }
            Err(_) => false,
        }
    }

    /// Executes blocks from `ip` until tracing is disabled or the trace ends.
    fn execute(&mut self, mut ip: u64) -> Flow<Next> {
        let mut straight = 0u64;
        let mut loop_check = LOOP_CHECK_AFTER;
        // How `ip` was reached: (block, successor slot) when it is a static
        // successor whose block id can be cached.
        let mut via: Option<(u32, usize)> = None;
        loop {
            // With no TNT bits pending, whatever packet is next may apply
            // here (libipt reports events as soon as nothing is before them)
            // — unless a disable event is held: libipt takes no other event
            // before that one is given.
            if self.tnt_len == 0 && self.held_disable.is_none() {
                if let Some(rejected) = self.rejected_event.take() {
                    return Err(rejected);
                }
                if self.trace_ends {
                    return Ok(Next::End);
                }
                let ahead = match self.peek() {
                    // A damaged TNT or TIP waits for the branch that needs
                    // it (libipt knows it by its opcode until then).
                    Err(e) if is_damaged_query(self.packets.data(), &e) => Some((e.0, Packet::Pad)),
                    other => other?,
                };
                match ahead {
                    None => {
                        // Nothing left to say where this goes: LLDB stops here
                        // too (libipt reports the end of the stream here).
                        return Ok(Next::End);
                    }
                    Some((offset, Packet::Psb)) if self.psb_fup_lookahead().is_none() => {
                        // A PSB+ saying tracing is off while we trace: take it as is.
                        if self.at_stop(offset) {
                            return Ok(Next::End);
                        }
                        self.peeked = None;
                        self.psb_plus(offset)?;
                        return Ok(Next::Disabled);
                    }
                    Some((_, packet @ (Packet::Cbr(_) | Packet::ModeExec { .. }))) => {
                        self.peeked = None;
                        self.status_event(packet)?;
                        continue;
                    }
                    // A TIP.PGD that a MODE.Exec is queued for gives that
                    // event (stamped, applied at once: it has no IP) and
                    // does not stop tracing (libipt).
                    Some((_, Packet::TipPgd(_))) if matches!(self.tip_queue.first(), Some(BoundToTip::ExecMode(..))) => {
                        self.peeked = None;
                        let time = self.time;
                        self.take_tip_queue();
                        self.read_ahead()?;
                        self.check_next_event(true)?;
                        self.notify_time_at(time);
                        continue;
                    }
                    // A TIP.PGD without an IP, nothing queued for it: libipt
                    // takes the disable event now and binds it to the next
                    // far transfer; branches on the way read the packets
                    // after it.
                    Some((_, Packet::TipPgd(Ip { ip: None, .. }))) if self.tip_queue.is_empty() && self.held_disable.is_none() => {
                        // (Taking it reads ahead to the next event packet; a
                        // failure there is the failure of this instruction.)
                        self.peeked = None;
                        let time = self.time;
                        // libipt's query decoder is off from here (a MODE.TSX
                        // is an event of its own).
                        self.disabled = true;
                        self.read_ahead().map_err(|(offset, error)| match error {
                            FlowError::Packet(kind, None) => (offset, FlowError::Packet(kind, Some(ip))),
                            other => (offset, other),
                        })?;
                        self.held_disable = Some(time);
                        continue;
                    }
                    Some((offset, Packet::Ovf)) => {
                        self.peeked = None;
                        match self.overflow(offset)? {
                            Next::At(resume) => {
                                ip = resume;
                                via = None;
                                (straight, loop_check) = (0, LOOP_CHECK_AFTER);
                                continue;
                            }
                            other => return Ok(other),
                        }
                    }
                    _ => {}
                }
            }
            let binding = if self.held_disable.is_some() || self.tnt_len > 0 { None } else { self.binding()? };

            if let Some(bound @ Binding::Async { ip: at, .. }) = binding {
                if at == ip {
                    // libipt reports an event bound to this IP before it
                    // reads the instruction there (which may not be mapped:
                    // tracing stopped on the way into unknown code).
                    via = None;
                    match self.bind(bound)? {
                        Next::At(next) => {
                            ip = next;
                            continue;
                        }
                        other => return Ok(other),
                    }
                }
            }
            let found = match via.take() {
                Some((from, slot)) => self.history.table.successor(from, slot, ip, self.memory),
                None => self.history.table.block_at(ip, self.mode, self.memory),
            };
            let id = found.map_err(|e| (self.offset(), e))?;
            if let Some(binding) = binding {
                let bind_ip = match binding {
                    Binding::Async { ip, .. } | Binding::Psb { ip, .. } => ip,
                };
                if let Some(k) = self.history.table.index_of(id, bind_ip) {
                    if k > 0 {
                        let prefix = self.history.table.prefix(id, k);
                        self.history.push_block(prefix);
                    }
                    match self.bind(binding)? {
                        Next::At(next) => {
                            ip = next;
                            continue;
                        }
                        other => return Ok(other),
                    }
                }
            }
            let block = *self.history.table.get(id);
            // LLDB's anomaly checks, after exactly so many instructions
            // without a packet: a loop (error after the instruction that
            // completes the count), or far too many.
            let budget = loop_check.min(MAX_STRAIGHT_LINE) - straight;
            if block.count as u64 >= budget {
                let prefix = self.history.table.prefix(id, budget as u32);
                self.history.push_block(prefix);
                straight += budget;
                if straight >= MAX_STRAIGHT_LINE {
                    return Err((self.offset(), FlowError::NoProgress));
                }
                if let Some(size) = self.history.loop_at_end() {
                    return Err((self.offset(), FlowError::InfiniteLoop(size)));
                }
                loop_check *= 2;
                if (block.count as u64) > budget {
                    // The rest of the block is decoded from its next instruction.
                    let prefix_block = *self.history.table.get(prefix);
                    ip = prefix_block.last_ip.wrapping_add(prefix_block.last.len as u64);
                    via = None;
                    continue;
                }
            } else {
                self.history.push_block(id);
                straight += block.count as u64;
            }
            let last_ip = block.last_ip;
            let next = last_ip.wrapping_add(block.last.len as u64);
            if self.tnt_len == 0 && self.held_disable.is_none() {
                if let Some((_, Packet::TipPgd(Ip { ip: Some(at), .. }))) = self.peeked {
                    if disables_at(block.last.kind, at) {
                        self.peeked = None;
                        return Ok(self.tracing_disabled(Event::HardwareDisabled));
                    }
                }
            }
            ip = match block.last.kind {
                FlowKind::Other => {
                    via = Some((id, 1));
                    next
                }
                FlowKind::Jump { target } => {
                    via = Some((id, 0));
                    target
                }
                FlowKind::Call { target } => {
                    if !block.last.is_zero_length_call(last_ip) {
                        self.push_return(next, id);
                    }
                    via = Some((id, 0));
                    target
                }
                FlowKind::CondBranch { target } => {
                    (straight, loop_check) = (0, LOOP_CHECK_AFTER);
                    let bit = self.tnt_bit();
                    if matches!(bit, Ok(Some(_))) && self.last_answer() {
                        return Ok(Next::End);
                    }
                    match bit {
                        Ok(Some(true)) => {
                            via = Some((id, 0));
                            target
                        }
                        Ok(Some(false)) => {
                            via = Some((id, 1));
                            next
                        }
                        Ok(None) if self.peeked.is_none() && !self.damaged_tip_ahead => return Ok(Next::End),
                        Ok(None) => {
                            let error = (self.offset(), FlowError::Mismatch { expected: "a TNT bit", ip: None });
                            return Err(self.query_failed(error, last_ip));
                        }
                        Err(e) => return Err(self.query_failed(e, last_ip)),
                    }
                }
                FlowKind::Return => {
                    (straight, loop_check) = (0, LOOP_CHECK_AFTER);
                    let bit = self.tnt_bit();
                    if matches!(bit, Ok(Some(_))) && self.last_answer() {
                        return Ok(Next::End);
                    }
                    match bit {
                        Ok(Some(true)) => match self.returns.pop_back() {
                            Some((address, call_block)) => {
                                via = Some((call_block, 1));
                                address
                            }
                            None => {
                                let error = (self.offset(), FlowError::ReturnWithoutCall(last_ip));
                                return Err(self.query_failed(error, last_ip));
                            }
                        },
                        Ok(Some(false)) => {
                            let error = (self.offset(), FlowError::BadReturnCompression(last_ip));
                            return Err(self.query_failed(error, last_ip));
                        }
                        Ok(None) => match self.indirect(last_ip, false) {
                            Ok(Next::At(target)) => target,
                            Ok(other) => return Ok(other),
                            Err(e) => return Err(self.query_failed(e, last_ip)),
                        },
                        Err(e) => return Err(self.query_failed(e, last_ip)),
                    }
                }
                FlowKind::IndirectJump | FlowKind::IndirectCall | FlowKind::Syscall | FlowKind::FarTransfer => {
                    (straight, loop_check) = (0, LOOP_CHECK_AFTER);
                    if block.last.kind == FlowKind::IndirectCall {
                        self.push_return(next, id);
                    }
                    let far = matches!(block.last.kind, FlowKind::Syscall | FlowKind::FarTransfer);
                    if far {
                        if let Some(time) = self.held_disable.take() {
                            // Given now, the event makes libipt decode the
                            // next one: a failure there replaces it.
                            self.disabled = true;
                            if let Err((offset, error)) = self.check_next_event(false) {
                                return Ok(Next::Failed(offset, error));
                            }
                            return Ok(self.tracing_disabled_at(time, Event::HardwareDisabled));
                        }
                    }
                    match self.indirect(last_ip, far) {
                        Ok(Next::At(target)) => target,
                        Ok(other) => return Ok(other),
                        Err(e) => return Err(self.query_failed(e, last_ip)),
                    }
                }
            };
        }
    }

    /// [`Self::fetch`] while tracing is off: a malformed TNT or TIP is not
    /// decoded (libipt stops before it by its opcode) and the instruction
    /// query that follows fails, tracing being off.
    fn fetch_while_disabled(&mut self) -> Flow<Option<(usize, Packet)>> {
        let data = self.packets.data();
        self.fetch().map_err(|e| if is_damaged_query(data, &e) { (e.0, FlowError::NotEnabled) } else { e })
    }

    /// Decodes from the current sync point to the end of the trace.
    fn run(&mut self) -> Flow<()> {
        let mut state = Next::Disabled;
        loop {
            if let Some(rejected) = self.rejected_event.take() {
                return Err(rejected);
            }
            self.disabled = matches!(state, Next::Disabled);
            state = match state {
                Next::End => return Ok(()),
                Next::Failed(offset, error) => return Err((offset, error)),
                Next::At(ip) => self.execute(ip)?,
                Next::Disabled => match (self.fetch_while_disabled()?, self.tip_queue.first().copied()) {
                    (None, _) => Next::End,
                    (Some((offset, Packet::Psb)), _) if self.at_stop(offset) => Next::End,
                    (Some((offset, Packet::Psb)), _) => {
                        let ip = self.psb_plus(offset)?;
                        self.check_next_event(ip.is_some())?;
                        ip.map_or(Next::Disabled, Next::At)
                    }
                    // The return stack survives a disabled stretch (as in libipt).
                    (Some((offset, Packet::TipPge(pge))), _) => match pge.ip {
                        Some(ip) => {
                            let time = self.time;
                            let queued = self.take_tip_queue();
                            // libipt gives the enable event, then what was
                            // queued for this TIP.PGE: an asynchronous branch
                            // cannot bind to it (after a MODE.Exec, the
                            // enable event has been stamped by then).
                            if let Some(k) = queued.iter().position(|q| *q == BoundToTip::AsyncBranch) {
                                if k > 0 {
                                    self.notify_time_at(time);
                                }
                                return Err((offset, FlowError::BadContext(None)));
                            }
                            self.read_ahead()?;
                            // The MODE.Exec events queued for a TIP.PGE come
                            // after the enable event, each stamped with the
                            // time at its own packet; a failure decoding what
                            // follows is the last one's (LLDB has stamped the
                            // others by then).
                            let next_event = self.check_next_event(true);
                            self.notify_time_at(time);
                            let mut stamps: Vec<Option<u64>> =
                                queued.iter().filter_map(|q| if let BoundToTip::ExecMode(_, t) = *q { Some(t) } else { None }).collect();
                            if next_event.is_err() {
                                stamps.pop();
                            }
                            for stamp in stamps {
                                self.notify_time_at(stamp);
                            }
                            next_event?;
                            if self.options.lldb_psb_slices {
                                self.lldb_repeat_at_slice_end();
                            }
                            Next::At(ip)
                        }
                        None => return Err((offset, pge_without_ip())),
                    },
                    (Some((offset, Packet::Ovf)), _) => self.overflow(offset)?,
                    (Some((_, packet @ (Packet::Cbr(_) | Packet::ModeExec { .. } | Packet::ModeTsx { .. }))), _) => {
                        self.status_event(packet)?;
                        Next::Disabled
                    }
                    // A MODE.Exec binds to this TIP (which it does not
                    // consume). libipt gives that event (stamped) only if the
                    // TIP has no IP or the IP where tracing would resume;
                    // then the next instruction query fails: tracing is off.
                    (Some((offset, Packet::Tip(tip))), Some(BoundToTip::ExecMode(..))) => {
                        if tip.ip.is_none() || tip.ip == self.history.last_instruction_end() {
                            self.notify_time();
                        }
                        return Err((offset, FlowError::NotEnabled));
                    }
                    // A TIP.PGD while tracing is off gives what was queued
                    // for it instead: a MODE.Exec event (stamped; tracing
                    // stays off), or an asynchronous disable, which waits
                    // for its IP, so the next instruction query fails.
                    (Some((_, Packet::TipPgd(_))), Some(BoundToTip::ExecMode(..))) => {
                        let time = self.time;
                        self.take_tip_queue();
                        self.read_ahead()?;
                        self.check_next_event(false)?;
                        self.notify_time_at(time);
                        Next::Disabled
                    }
                    (Some((offset, Packet::TipPgd(_))), Some(BoundToTip::AsyncBranch)) => {
                        return Err((offset, FlowError::NotEnabled));
                    }
                    (Some((offset, Packet::TntShort(_) | Packet::TntLong(_) | Packet::Tip(_) | Packet::TipPgd(_))), _) => {
                        return Err((offset, FlowError::NotEnabled))
                    }
                    (Some((_, Packet::Fup(Ip { ip: Some(_), .. }))), _) => {
                        self.tip_queue.push(BoundToTip::AsyncBranch);
                        Next::Disabled
                    }
                    (Some(_), _) => Next::Disabled,
                },
            };
        }
    }
}

/// Decodes `trace` on up to `threads` threads: the trace is cut at PSBs into
/// contiguous ranges, each decoded independently (a PSB+ restates all the
/// state a decoder needs, and nothing — TNT bits, return compression — crosses
/// a PSB), and the histories are joined. The result equals
/// [`FlowDecoder::decode_history`]'s.
pub fn decode_parallel<M: Memory + Sync>(trace: &[u8], memory: &M, threads: usize) -> History {
    decode_parallel_with(trace, memory, threads, FlowOptions::default())
}

/// [`decode_parallel`] with [`FlowOptions`].
pub fn decode_parallel_with<M: Memory + Sync>(trace: &[u8], memory: &M, threads: usize, options: FlowOptions) -> History {
    let psbs: Vec<usize> = crate::packet::sync::psb_offsets(trace).collect();
    let threads = threads.max(1).min(psbs.len().max(1));
    if threads <= 1 || psbs.len() < 2 {
        return FlowDecoder::new(trace, memory).with_options_and_psbs(options, Some(&psbs)).decode_history();
    }
    // Contiguous ranges of PSB segments, of about equal byte size.
    let mut cuts = vec![0usize];
    for t in 1..threads {
        let target = trace.len() * t / threads;
        let index = psbs.partition_point(|&p| p < target).min(psbs.len() - 1);
        if index > *cuts.last().unwrap() {
            cuts.push(index);
        }
    }
    let ranges: Vec<(usize, Option<usize>)> = cuts
        .iter()
        .enumerate()
        .map(|(i, &first)| (psbs[first], cuts.get(i + 1).map(|&next| psbs[next])))
        .collect();
    let histories: Vec<History> = std::thread::scope(|scope| {
        let workers: Vec<_> = ranges
            .iter()
            .map(|&(start, stop)| {
                let psbs = &psbs;
                scope.spawn(move || FlowDecoder::for_segment(trace, memory, start, stop).with_options_and_psbs(options, Some(psbs)).decode_history())
            })
            .collect();
        workers.into_iter().map(|w| w.join().expect("decoder thread")).collect()
    });
    let mut histories = histories.into_iter();
    let mut joined = histories.next().unwrap_or_default();
    let mut covered = !joined.stopped_at_segment_end();
    for history in histories {
        // A segment that ran past its end covered the rest of the trace.
        if covered {
            break;
        }
        covered = !history.stopped_at_segment_end();
        joined.append(history);
    }
    joined
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::image::Image;
    use crate::packet::{IpPacketKind, PacketEncoder, Tnt};

    /// 0x1000: 75 02        jne 0x1004
    /// 0x1002: 90           nop
    /// 0x1003: 90           nop
    /// 0x1004: e8 07 00 00 00  call 0x1010
    /// 0x1009: ff e0        jmp *%rax
    /// 0x1010: c3           ret
    fn image() -> Image {
        let mut code = vec![0x90u8; 0x20];
        code[0x00..0x02].copy_from_slice(&[0x75, 0x02]);
        code[0x04..0x09].copy_from_slice(&[0xe8, 0x07, 0, 0, 0]);
        code[0x09..0x0b].copy_from_slice(&[0xff, 0xe0]);
        code[0x10] = 0xc3;
        let mut image = Image::new();
        image.add_raw("test", 0x1000, code);
        image
    }

    fn ips(items: &[Item]) -> Vec<u64> {
        items.iter().filter_map(|i| if let Item::Instruction { ip } = i { Some(*ip) } else { None }).collect()
    }

    #[test]
    fn branches_calls_compressed_returns_and_indirect_jumps() {
        let mut enc = PacketEncoder::new();
        enc.encode(&Packet::Psb).unwrap();
        enc.encode(&Packet::Tsc(100)).unwrap();
        enc.encode(&Packet::ModeExec { csl: true, csd: false, iflag: false }).unwrap();
        enc.encode(&Packet::Psbend).unwrap();
        enc.encode_ip(IpPacketKind::TipPge, Some(0x1000));
        enc.encode(&Packet::TntShort(Tnt::from_outcomes([false, true]))).unwrap(); // jne not taken, ret compressed
        enc.encode_ip(IpPacketKind::Tip, Some(0x1002)); // jmp *%rax → 0x1002
        enc.encode_ip(IpPacketKind::Fup, Some(0x1003));
        enc.encode_ip(IpPacketKind::TipPgd, None);
        let image = image();
        let items = FlowDecoder::new(enc.bytes(), &image).decode_all();
        assert_eq!(ips(&items), [0x1000, 0x1002, 0x1003, 0x1004, 0x1010, 0x1009, 0x1002]);
        assert_eq!(items[0], Item::Event(Event::ClockTick(100)));
        assert_eq!(items[1], Item::Event(Event::SyncPoint(0)));
        assert_eq!(items.last(), Some(&Item::Event(Event::SoftwareDisabled)));
    }

    /// A PSB+, tracing enabled at 0x1000, one taken TNT bit.
    fn enabled_at_0x1000() -> Vec<u8> {
        let mut enc = PacketEncoder::new();
        enc.encode(&Packet::Psb).unwrap();
        enc.encode(&Packet::ModeExec { csl: true, csd: false, iflag: false }).unwrap();
        enc.encode(&Packet::Psbend).unwrap();
        enc.encode_ip(IpPacketKind::TipPge, Some(0x1000));
        enc.encode(&Packet::TntShort(Tnt::from_outcomes([true]))).unwrap();
        enc.bytes().to_vec()
    }

    #[test]
    fn a_loop_of_direct_jumps_ends_in_an_error_not_a_hang() {
        let mut image = Image::new();
        image.add_raw("loop", 0x1000, vec![0xeb, 0xfe]); // jmp .
        let items = FlowDecoder::new(&enabled_at_0x1000(), &image).decode_all();
        // As LLDB: 10000 instructions without a packet, then the loop found.
        assert!(matches!(items.last(), Some(Item::Error { error: FlowError::InfiniteLoop(1), .. })), "{:?}", items.last());
        assert_eq!(ips(&items).len() as u64, LOOP_CHECK_AFTER);
        assert_eq!(FlowError::InfiniteLoop(2).to_string(), "anomalous trace: possible infinite loop detected of size 2");
    }

    #[test]
    fn straight_line_code_without_a_loop_ends_after_half_a_million_instructions() {
        let mut image = Image::new();
        image.add_raw("nops", 0x1000, vec![0x90; 600_000]);
        let items = FlowDecoder::new(&enabled_at_0x1000(), &image).decode_all();
        assert!(matches!(items.last(), Some(Item::Error { error: FlowError::NoProgress, .. })), "{:?}", items.last());
        assert_eq!(ips(&items).len() as u64, MAX_STRAIGHT_LINE);
        assert_eq!(ips(&items).last(), Some(&(0x1000 + MAX_STRAIGHT_LINE - 1)));
    }

    #[test]
    fn time_read_before_a_psb_carries_into_the_next_segment() {
        // PSB+ (TSC 100), tracing on and off; TSC 200 with no event after
        // it; a PSB+ without TSC: one decoder reports 200 at that sync
        // point, and so must the joined decode of the two PSB ranges.
        let mode = Packet::ModeExec { csl: true, csd: false, iflag: false };
        let mut enc = PacketEncoder::new();
        enc.encode(&Packet::Psb).unwrap();
        enc.encode(&Packet::Tsc(100)).unwrap();
        enc.encode(&mode).unwrap();
        enc.encode(&Packet::Psbend).unwrap();
        enc.encode(&mode).unwrap();
        enc.encode_ip(IpPacketKind::TipPge, Some(0x1002));
        enc.encode_ip(IpPacketKind::Fup, Some(0x1003));
        enc.encode_ip(IpPacketKind::TipPgd, None);
        enc.encode(&Packet::Tsc(200)).unwrap();
        enc.encode(&Packet::Psb).unwrap();
        enc.encode(&mode).unwrap();
        enc.encode(&Packet::Psbend).unwrap();
        enc.encode(&Packet::Tsc(300)).unwrap();
        enc.encode(&mode).unwrap();
        enc.encode_ip(IpPacketKind::TipPge, Some(0x1002));
        enc.encode_ip(IpPacketKind::Fup, Some(0x1003));
        enc.encode_ip(IpPacketKind::TipPgd, None);
        let image = image();
        let sequential = FlowDecoder::new(enc.bytes(), &image).decode_all();
        let ticks: Vec<&Item> = sequential.iter().filter(|i| matches!(i, Item::Event(Event::ClockTick(_)))).collect();
        assert_eq!(ticks, [&Item::Event(Event::ClockTick(100)), &Item::Event(Event::ClockTick(200)), &Item::Event(Event::ClockTick(300))]);
        let parallel: Vec<Item> = decode_parallel(enc.bytes(), &image, 2).items().collect();
        assert_eq!(parallel, sequential);
    }

    #[test]
    fn missing_memory_is_an_error_item_and_decoding_resumes_at_next_psb() {
        let mut enc = PacketEncoder::new();
        enc.encode(&Packet::Psb).unwrap();
        enc.encode(&Packet::ModeExec { csl: true, csd: false, iflag: false }).unwrap();
        enc.encode(&Packet::Psbend).unwrap();
        enc.encode_ip(IpPacketKind::TipPge, Some(0x9000)); // nothing mapped there
        let second_psb = enc.len();
        enc.encode(&Packet::Psb).unwrap();
        enc.encode_ip(IpPacketKind::Fup, Some(0x1002));
        enc.encode(&Packet::ModeExec { csl: true, csd: false, iflag: false }).unwrap();
        enc.encode(&Packet::Psbend).unwrap();
        enc.encode_ip(IpPacketKind::Fup, Some(0x1003));
        enc.encode_ip(IpPacketKind::TipPgd, None);
        let image = image();
        let items = FlowDecoder::new(enc.bytes(), &image).decode_all();
        assert!(matches!(items[1], Item::Error { error: FlowError::NoMemory(0x9000), .. }), "{items:?}");
        assert_eq!(items[2], Item::Event(Event::SyncPoint(second_psb)));
        assert_eq!(ips(&items), [0x1002]);
    }

    /// With LLDB's slices, a disable right before a PSB+ that says tracing
    /// is off ends that slice; the next one decodes in full.
    #[test]
    fn a_slice_ending_with_tracing_off_does_not_cut_the_next_one() {
        let mut image = Image::new();
        image.add_raw("code", 0x1000, vec![0x74, 0x00, 0x0f, 0x05]); // je .+2; syscall
        let mut enc = PacketEncoder::new();
        let mut psbs = Vec::new();
        for _ in 0..2 {
            psbs.push(enc.len());
            enc.encode(&Packet::Psb).unwrap();
            enc.encode(&Packet::ModeExec { csl: true, csd: false, iflag: false }).unwrap();
            enc.encode(&Packet::Psbend).unwrap();
            enc.encode_ip(IpPacketKind::TipPge, Some(0x1000));
            enc.encode(&Packet::TntShort(Tnt::from_outcomes([false]))).unwrap();
            enc.encode_ip(IpPacketKind::TipPgd, None);
        }
        let options = FlowOptions { lldb_psb_slices: true };
        let items = FlowDecoder::new(enc.bytes(), &image).with_options(options).decode_all();
        assert_eq!(ips(&items), [0x1000, 0x1002, 0x1000, 0x1002], "{items:?}");
        let syncs: Vec<&Item> = items.iter().filter(|i| matches!(i, Item::Event(Event::SyncPoint(_)))).collect();
        assert_eq!(syncs, [&Item::Event(Event::SyncPoint(psbs[0])), &Item::Event(Event::SyncPoint(psbs[1]))]);
        assert!(!items.iter().any(|i| matches!(i, Item::Error { .. })), "{items:?}");
    }
}
