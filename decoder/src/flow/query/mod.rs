//! The query layer (libipt's `pt_query_decoder`): what the packets say, in
//! the order a decoder asks for it — the next TNT bit, the next TIP, the
//! next event, the PSB+ state, the time — with libipt's read-ahead rules
//! and LLDB's PSB-slice rules, on which LLDB's output depends. It knows
//! nothing of code: the instruction walk ([`super::walk`]) asks it
//! questions at each branch, and it writes the events and errors it meets
//! into an [`EventLog`].
//!
//! The methods share the packet position, the peeked packet and the
//! read-ahead state (this file: fetching, TNT bits, events, read-ahead,
//! branches); [`slices`] holds LLDB's PSB slices and time, [`sync`] the
//! PSB+, overflows and resynchronisation.

use std::borrow::Cow;

use super::packet_view::{
    decoded_later, is_damaged_query, is_event_opcode, is_tnt_opcode, left_for_later, next_packet, pge_without_ip, read_psb_header,
};
use super::{Flow, FlowOptions, Next};
use crate::item::{Event, FlowError};
use crate::packet::{Ip, Packet, PacketDecoder};
use crate::x86::ExecMode;

mod slices;
mod sync;

/// Where the query decoder reports the events and errors it meets, at the
/// current position of the flow (the walker's history).
pub(super) trait EventLog {
    /// An event.
    fn event(&mut self, event: Event);
    /// An error item.
    fn error(&mut self, offset: usize, error: FlowError);
    /// An event is about to be reported before any TSC was read.
    fn event_before_any_time(&mut self);
}

/// What a branch query found.
pub(super) enum Branch {
    /// A TIP with this target.
    To(u64),
    /// A TIP without an IP (at this offset).
    NoIp(usize),
    /// A TIP.PGD that ends tracing at this branch (consumed).
    Disable,
    /// The end of the trace.
    End,
}

/// An event libipt holds until the next TIP, TIP.PGE or TIP.PGD.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum BoundToTip {
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
pub(super) enum Binding {
    Async { ip: u64, offset: usize },
    Psb { ip: u64, offset: usize },
}

/// Answers the queries of one thread's instruction walk from its Intel PT.
pub(super) struct QueryDecoder<'a> {
    pub(super) packets: PacketDecoder<'a>,
    pub(super) peeked: Option<(usize, Packet)>,
    /// Pending TNT bits, oldest in bit `tnt_len - 1`.
    pub(super) tnt_bits: u64,
    pub(super) tnt_len: u32,
    /// The last TSC value read.
    pub(super) time: Option<u64>,
    /// The last TSC value reported as a clock tick.
    pub(super) notified: Option<u64>,
    /// In LLDB's slice after a PSB+ without TSC: a time of `None` there is
    /// LLDB's unknown time (no clock tick), not time read in an earlier part
    /// of the trace.
    pub(super) slice_time_unknown: bool,
    /// Decode from this PSB offset instead of the first PSB.
    pub(super) start: Option<usize>,
    /// Stop before consuming the PSB at this offset (segment decoding).
    pub(super) stop_at: Option<usize>,
    /// The next event decodes but cannot be applied (e.g. TIP.PGE while
    /// tracing is on): what came before it stands, and this error comes
    /// where the event would (libipt fails in `pt_insn_event`, not in the
    /// query that found the event, so LLDB keeps the instruction before it
    /// and prints the error without an address).
    pub(super) rejected_event: Option<(usize, FlowError)>,
    /// Reading ahead met the end of the trace before any packet that
    /// answers a query or is an event (libipt's `pts_eos`): once the TNT
    /// bits are used up, decoding ends — without the instruction whose
    /// query got that answer, which LLDB does not list.
    pub(super) trace_ends: bool,
    /// What waits for the next TIP, TIP.PGE or TIP.PGD, oldest first
    /// (libipt's queue of events bound to TIP).
    pub(super) tip_queue: Vec<BoundToTip>,
    /// Tracing is off: MODE.TSX is an event of its own (libipt), not
    /// something bound to a FUP.
    pub(super) disabled: bool,
    /// The execution mode code is decoded in (`None`: unknown, before any
    /// MODE.Exec since the last sync point, or reserved).
    pub(super) mode: Option<ExecMode>,
    pub(super) options: FlowOptions,
    /// Decoding ended at the PSB at `stop_at`.
    pub(super) stopped: bool,
    /// The trace ends with a packet cut short, at this offset.
    pub(super) cut_packet: Option<usize>,
    /// The last TNT query met a damaged TIP (known by its opcode): libipt
    /// fails the query before decoding the packet (a conditional branch:
    /// "does not match query"; a return goes on to ask for the TIP, and
    /// decoding it fails).
    pub(super) damaged_tip_ahead: bool,
    /// With LLDB's slices: every PSB a synchronising scan finds (also one
    /// that a damaged packet overlaps).
    pub(super) slice_psbs: Cow<'a, [usize]>,
    /// A packet crossed the start of the next slice: for LLDB it was cut
    /// there, and the slice ended. Decoding goes on at that PSB.
    pub(super) slice_cut: bool,
    /// LLDB's slice ended at a PSB after which tracing is off (see
    /// [`Self::read_ahead`]): decoding goes on at that PSB.
    pub(super) slice_ended: bool,
    /// A TIP.PGD without an IP taken as libipt's disable event (the time at
    /// its packet), waiting for the far transfer it binds to.
    pub(super) held_disable: Option<Option<u64>>,
}


impl<'a> QueryDecoder<'a> {
    /// A query decoder over `trace`, not synchronised yet.
    pub(super) fn new(trace: &'a [u8]) -> Self {
        QueryDecoder {
            packets: PacketDecoder::new(trace),
            peeked: None,
            tnt_bits: 0,
            tnt_len: 0,
            time: None,
            notified: None,
            slice_time_unknown: false,
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
            slice_psbs: Cow::Borrowed(&[]),
            slice_cut: false,
            slice_ended: false,
            held_disable: None,
        }
    }

    /// After a query: whether it took the last answer the trace has (see
    /// [`Self::trace_ends`]). The instruction that asked is then taken
    /// back: libipt returns it with `pts_eos` and LLDB stops there.
    #[inline]
    pub(super) fn took_last_answer(&self) -> bool {
        self.tnt_len == 0 && self.trace_ends
    }

    /// A TIP.PGD (already consumed) disabled tracing: reads past it as
    /// libipt does; the time at its packet. A failure reading past it
    /// replaces the disable event.
    pub(super) fn take_disable(&mut self) -> Flow<Option<u64>> {
        self.take_tip_queue();
        self.disabled = true;
        let time = self.time;
        self.read_ahead()?;
        self.check_next_event(false)?;
        Ok(time)
    }

    /// The next packet that matters for the flow, handling timing and
    /// status packets on the way. `None` at the end of the trace.
    pub(super) fn fetch(&mut self) -> Flow<Option<(usize, Packet)>> {
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

    #[inline]
    pub(super) fn peek(&mut self) -> Flow<Option<(usize, Packet)>> {
        if self.peeked.is_none() {
            self.peeked = self.fetch()?;
        }
        Ok(self.peeked)
    }

    /// Takes one TNT bit, reading a TNT packet if needed. `Ok(None)` when the
    /// next flow packet is not a TNT (it stays peeked).
    #[inline]
    pub(super) fn tnt_bit(&mut self) -> Flow<Option<bool>> {
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
    pub(super) fn tnt_bit_refill(&mut self) -> Flow<Option<bool>> {
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
    pub(super) fn tnt_after_peeked(&self) -> bool {
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
    pub(super) fn check_next_event(&mut self, enabled: bool) -> Flow<()> {
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
    pub(super) fn read_ahead(&mut self) -> Flow<()> {
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

    #[inline]
    pub(super) fn offset(&self) -> usize {
        self.peeked.map(|(offset, _)| offset).unwrap_or_else(|| self.packets.offset())
    }

    /// A TIP, TIP.PGE or TIP.PGD was consumed: what was queued for it
    /// applies (a MODE.Exec sets the mode the code is decoded in).
    pub(super) fn take_tip_queue(&mut self) -> Vec<BoundToTip> {
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
    pub(super) fn status_event(&mut self, log: &mut impl EventLog, packet: Packet) -> Flow<()> {
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
            _ => self.notify_time_at(log, time),
        }
        Ok(())
    }

    /// The next packet that is not a status event (those are handled).
    pub(super) fn fetch_flow(&mut self, log: &mut impl EventLog) -> Flow<Option<(usize, Packet)>> {
        loop {
            match self.fetch()? {
                Some((_, packet @ (Packet::Cbr(_) | Packet::ModeExec { .. }))) => self.status_event(log, packet)?,
                other => return Ok(other),
            }
        }
    }

    /// [`Self::fetch`] while tracing is off: a malformed TNT or TIP is not
    /// decoded (libipt stops before it by its opcode) and the instruction
    /// query that follows fails, tracing being off.
    pub(super) fn fetch_while_disabled(&mut self) -> Flow<Option<(usize, Packet)>> {
        let data = self.packets.data();
        self.fetch().map_err(|e| if is_damaged_query(data, &e) { (e.0, FlowError::NotEnabled) } else { e })
    }

    /// What binds to an IP ahead, once every TNT bit before it is consumed.
    #[inline]
    pub(super) fn binding(&mut self) -> Flow<Option<Binding>> {
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

    /// A TIP.PGD without an IP ends only a `far` transfer (SYSCALL, INT,
    /// IRET…); after a near one it does not answer the query.
    pub(super) fn indirect_branch(&mut self, log: &mut impl EventLog, at: u64, far: bool) -> Flow<Branch> {
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
        let mut next = self.fetch_flow(log)?;
        if let Some((offset, Packet::TntShort(tnt) | Packet::TntLong(tnt))) = next {
            if self.tnt_len > 0 {
                return Err((offset, FlowError::Mismatch { expected: "a TIP, not a second TNT", ip: Some(at) }));
            }
            // libipt caches one TNT packet met while looking for the TIP;
            // then only a TIP answers (an event there is no answer).
            self.tnt_bits = tnt.bits;
            self.tnt_len = tnt.len as u32;
            self.read_ahead()?;
            next = self.fetch_flow(log)?;
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
                // The branch needs an IP to go on (libipt: "no ip").
                Ok(tip.ip.map_or(Branch::NoIp(offset), Branch::To))
            }
            Some((_, Packet::TipPgd(pgd))) if far || pgd.ip.is_some() => Ok(Branch::Disable),
            Some((offset, Packet::Psb)) => {
                self.peeked = Some((offset, Packet::Psb));
                Err((offset, FlowError::Mismatch { expected: "a TIP, not a PSB", ip: Some(at) }))
            }
            Some((offset, _)) => Err((offset, FlowError::Mismatch { expected: "a TIP", ip: Some(at) })),
            None => Ok(Branch::End),
        }
    }

    /// Handles a FUP bound to the current IP (the instruction there has not
    /// executed).
    pub(super) fn async_branch(&mut self, log: &mut impl EventLog) -> Flow<Branch> {
        match self.fetch_flow(log)? {
            Some((_, Packet::TipPgd(_))) => Ok(Branch::Disable),
            Some((offset, Packet::Tip(tip))) => {
                self.take_tip_queue();
                Ok(tip.ip.map_or(Branch::NoIp(offset), Branch::To))
            }
            Some((offset, _)) => Err((offset, FlowError::Mismatch { expected: "TIP or TIP.PGD after a FUP", ip: None })),
            None => Ok(Branch::End),
        }
    }

}
