//! The instruction walk (libipt's instruction/block decoder job): from the
//! IP where tracing starts, it executes the traced code block by block —
//! blocks found by [`super::blocks`] through the image — following direct
//! branches itself, asking the query layer ([`super::query`]) at each
//! conditional branch, return and indirect branch, keeping the return
//! stack for compressed returns, binding asynchronous events and PSB+
//! updates to the IPs they name, and writing the executed blocks, events
//! and errors into a [`History`].

use std::borrow::Cow;
use std::collections::VecDeque;

use super::blocks::BlockCache;
use super::packet_view::{is_damaged_query, pge_without_ip};
use super::query::{Binding, BoundToTip, Branch, EventLog, QueryDecoder};
use super::{Flow, FlowOptions, Next};
use crate::history::{Extra, History};
use crate::image::Memory;
use crate::item::{Event, FlowError, Item};
use crate::packet::{Ip, Packet};
use crate::x86::FlowKind;

const RETURN_STACK_DEPTH: usize = 64;

/// LLDB's `extremely-large-decoding-threshold`: instructions without a
/// branch that consumes trace before the decoder gives up with
/// [`FlowError::NoProgress`] (a loop of direct jumps says nothing about how
/// often it ran).
pub(super) const MAX_STRAIGHT_LINE: u64 = 500_000;

/// LLDB's `infinite-decoding-loop-verification-threshold`: after this many
/// instructions without consuming a packet (and twice as many, and so on)
/// LLDB checks whether the last ones repeat a loop.
pub(super) const LOOP_CHECK_AFTER: u64 = 10_000;

impl EventLog for History {
    fn event(&mut self, event: Event) {
        self.push_extra(Extra::Event(event));
    }

    fn error(&mut self, offset: usize, error: FlowError) {
        self.push_extra(Extra::Error { offset, error });
    }

    fn event_before_any_time(&mut self) {
        if self.timing.first_timeless_event.is_none() {
            self.timing.first_timeless_event = Some(self.extras_len());
        }
    }
}

/// Decodes one thread's Intel PT stream against `memory`.
pub struct FlowDecoder<'a, M: Memory> {
    query: QueryDecoder<'a>,
    memory: &'a M,
    /// Return addresses for compressed returns, with the block of the call
    /// that pushed each (its fall-through successor slot caches the block
    /// at the return address).
    returns: VecDeque<(u64, u32)>,
    history: History,
    /// The blocks found so far, by start address and as successors.
    blocks: BlockCache,
    /// Executed blocks before the current PSB+ (where LLDB's slice began).
    slice_start_blocks: usize,
}

impl<M: Memory> std::fmt::Debug for FlowDecoder<'_, M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FlowDecoder").field("returns", &self.returns.len()).field("slice_start_blocks", &self.slice_start_blocks).finish_non_exhaustive()
    }
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

/// What the packets ahead say about the instruction the walk is at.
enum Here {
    /// Nothing: execute it.
    Execute,
    /// An overflow ended, and tracing resumed at this IP.
    ResumeAt(u64),
    /// The walk stops.
    Stop(Next),
}

/// LLDB's anomaly checks: instructions since the last packet was consumed.
struct StraightLine {
    instructions: u64,
    /// The count at which the next loop check is due.
    loop_check: u64,
}

impl StraightLine {
    fn new() -> Self {
        StraightLine { instructions: 0, loop_check: LOOP_CHECK_AFTER }
    }
}

impl<'a, M: Memory> FlowDecoder<'a, M> {
    /// A decoder over `trace` reading code from `memory`.
    pub fn new(trace: &'a [u8], memory: &'a M) -> Self {
        FlowDecoder {
            query: QueryDecoder::new(trace),
            memory,
            returns: VecDeque::new(),
            history: History::default(),
            blocks: BlockCache::default(),
            slice_start_blocks: 0,
        }
    }

    /// A decoder for the segment of `trace` from the PSB at `start` up to
    /// (not including) the PSB at `stop` (`None`: to the end). Decoding the
    /// segments of a trace one by one and appending their histories gives the
    /// history of the whole trace (see [`super::decode_parallel`]). When a damaged
    /// packet straddles the PSB at `stop`, one decoder would not see that
    /// PSB; neither does this one: it decodes on to the end of the trace
    /// ([`History::stopped_at_segment_end`] is then false, and the later
    /// segments' histories are not needed).
    pub fn for_segment(trace: &'a [u8], memory: &'a M, start: usize, stop: Option<usize>) -> Self {
        let mut decoder = Self::new(trace, memory);
        decoder.query.start = Some(start);
        decoder.query.stop_at = stop;
        decoder
    }

    /// The same decoder with these options.
    pub fn with_options(self, options: FlowOptions) -> Self {
        self.with_options_and_psbs(options, None)
    }

    /// [`Self::with_options`], with the trace's PSB offsets when the caller
    /// has found them already (LLDB's slices need them).
    pub(super) fn with_options_and_psbs(mut self, options: FlowOptions, psbs: Option<&'a [usize]>) -> Self {
        self.query.options = options;
        self.query.slice_psbs = match (options.lldb_psb_slices, psbs) {
            (false, _) => Cow::Borrowed(&[]),
            (true, Some(psbs)) => Cow::Borrowed(psbs),
            (true, None) => Cow::Owned(crate::packet::sync::psb_offsets(self.query.packets.data()).collect()),
        };
        self
    }

    /// Decodes the whole stream into a compact [`History`].
    pub fn decode_history(mut self) -> History {
        // An estimate of about ten executed blocks per trace byte (TNT bits
        // are dense), reserved at once instead of grown by copying.
        let bytes = self.query.stop_at.unwrap_or(self.query.packets.data().len()).saturating_sub(self.query.start.unwrap_or(0));
        self.history.reserve_blocks(bytes.saturating_mul(10).min(1 << 22));
        let mut synced = match self.query.start {
            Some(start) => self.query.packets.sync_set(start) && self.query.usable_sync_point(&mut self.history),
            None => self.resync(),
        };
        while synced {
            match self.run() {
                // LLDB's slice ended inside a packet: on to the next one.
                Ok(()) if self.query.slice_cut || self.query.slice_ended => synced = self.resync(),
                Ok(()) => break,
                Err((offset, error)) => {
                    self.history.push_extra(Extra::Error { offset, error });
                    synced = self.resync();
                }
            }
        }
        self.history.timing.read = self.query.time;
        self.history.timing.notified = self.query.notified;
        self.history.stopped_at_segment_end = self.query.stop_at.is_some() && self.query.stopped;
        self.history.shrink_to_fit();
        self.history
    }

    /// Decodes the whole stream into items (instructions expanded).
    pub fn decode_all(self) -> Vec<Item> {
        let history = self.decode_history();
        history.items().collect()
    }

    fn resync(&mut self) -> bool {
        self.returns.clear();
        self.query.resync(&mut self.history)
    }

    /// Reads the PSB+ after the PSB at `offset`: a new slice for LLDB, and
    /// nothing of the return stack crosses it. Returns the FUP IP (tracing
    /// on) or `None` (tracing off).
    fn psb_plus(&mut self, offset: usize) -> Flow<Option<u64>> {
        self.slice_start_blocks = self.history.executed_blocks();
        let ip = self.query.psb_plus(&mut self.history, offset)?;
        self.returns.clear();
        Ok(ip)
    }

    /// An overflow (the OVF at `offset` already consumed): TNT bits and the
    /// return stack are gone; where tracing resumed.
    fn overflow(&mut self, offset: usize) -> Flow<Next> {
        self.returns.clear();
        self.query.overflow(&mut self.history, offset)
    }

    /// After a query: whether it took the last answer the trace has. If so,
    /// the instruction that asked is taken back: libipt returns it with
    /// `pts_eos` and LLDB stops there.
    #[inline]
    fn last_answer(&mut self) -> bool {
        let last = self.query.took_last_answer();
        if last {
            self.history.drop_last_instruction();
        }
        last
    }

    /// The branch of the last pushed instruction (at `ip`) could not be
    /// decoded: the instruction is taken back and the error names it.
    fn query_failed(&mut self, (offset, error): (usize, FlowError), ip: u64) -> (usize, FlowError) {
        self.history.drop_last_instruction();
        let at_psb = matches!(self.query.peeked, Some((_, Packet::Psb)));
        let error = match error {
            // In LLDB the query meets the end of its PSB slice instead.
            FlowError::Mismatch { .. } if at_psb && self.query.options.lldb_psb_slices => FlowError::SliceEnd(ip),
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

    /// A TIP.PGD (already consumed) disabled tracing: the `event`, stamped
    /// with the time at its packet — unless decoding past it fails, which
    /// replaces the event (as in libipt, where the failure is the event
    /// query's).
    fn tracing_disabled(&mut self, event: Event) -> Next {
        match self.query.take_disable() {
            Ok(time) => self.tracing_disabled_at(time, event),
            Err((offset, error)) => Next::Failed(offset, error),
        }
    }

    /// Tracing is disabled by a TIP.PGD consumed (and read past) already,
    /// whose packet was read at `time`.
    fn tracing_disabled_at(&mut self, time: Option<u64>, event: Event) -> Next {
        self.query.disabled = true;
        self.query.held_disable = None;
        self.query.notify_time_at(&mut self.history, time);
        self.history.push_extra(Extra::Event(event));
        // LLDB's slice ends here: it re-lists its last instruction and,
        // tracing being off, the next instruction query fails (libipt's
        // end of stream).
        if self.query.options.lldb_psb_slices {
            if let Some((psb, ip)) = self.lldb_repeat_at_slice_end() {
                return Next::Failed(psb, FlowError::SliceEnd(ip));
            }
        }
        Next::Disabled
    }

    /// The target of an indirect branch (or uncompressed return) at `at`.
    /// A TIP.PGD without an IP ends only a `far` transfer (SYSCALL, INT,
    /// IRET…); after a near one it does not answer the query.
    fn indirect(&mut self, at: u64, far: bool) -> Flow<Next> {
        match self.query.indirect_branch(&mut self.history, at, far)? {
            Branch::To(ip) if !self.last_answer() => Ok(Next::At(ip)),
            // The branch needs an IP to go on (libipt: "no ip").
            Branch::NoIp(offset) if !self.last_answer() => Err((offset, FlowError::NoIp(None))),
            Branch::To(_) | Branch::NoIp(_) | Branch::End => Ok(Next::End),
            Branch::Disable => Ok(self.tracing_disabled(Event::HardwareDisabled)),
        }
    }

    /// Handles a FUP bound to the current IP (the instruction there has not
    /// executed).
    fn async_event(&mut self, fup_offset: usize) -> Flow<Next> {
        match self.query.async_branch(&mut self.history)? {
            Branch::To(ip) => Ok(Next::At(ip)),
            Branch::NoIp(_) => Err((fup_offset, FlowError::Mismatch { expected: "an asynchronous branch target", ip: None })),
            Branch::Disable => Ok(self.tracing_disabled(Event::SoftwareDisabled)),
            Branch::End => Ok(Next::End),
        }
    }

    /// Applies a binding at its IP; returns where the flow continues.
    fn bind(&mut self, binding: Binding) -> Flow<Next> {
        self.query.peeked = None;
        match binding {
            Binding::Async { offset, .. } => self.async_event(offset),
            Binding::Psb { ip, offset } => {
                if self.query.options.lldb_psb_slices && self.needs_query_at(ip) {
                    self.history.push_extra(Extra::Error { offset, error: FlowError::SliceEnd(ip) });
                }
                if self.query.at_stop(offset) {
                    self.query.peeked = Some((offset, Packet::Psb));
                    return Ok(Next::End);
                }
                self.psb_plus(offset)?;
                // Synchronising there, libipt reads ahead past the PSB+: the
                // trace may end right after it.
                self.query.read_ahead()?;
                self.query.check_next_event(true)?;
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
        let (psb, next_slice_ip) = self.query.next_slice_start()?;
        if self.history.executed_blocks() <= self.slice_start_blocks {
            return None;
        }
        let last = self.history.last_instruction_ip().filter(|&ip| ip != next_slice_ip)?;
        let id = self.blocks.block_at(&mut self.history.table, last, self.query.mode, self.memory).ok()?;
        let one = self.history.table.prefix(id, 1);
        self.history.push_block(one);
        Some((psb, last))
    }

    /// Whether the instruction at `ip` takes its next IP from the trace.
    fn needs_query_at(&mut self, ip: u64) -> bool {
        match self.blocks.block_at(&mut self.history.table, ip, self.query.mode, self.memory) {
            Ok(id) => {
                let block = self.history.table.get(id);
                block.count == 1 && !matches!(block.last.kind, FlowKind::Other | FlowKind::Jump { .. } | FlowKind::Call { .. })
            }
            Err(_) => false,
        }
    }

    /// With no TNT bits pending, whatever packet is next may apply at `ip`
    /// (libipt reports events as soon as nothing is before them) — unless a
    /// disable event is held: libipt takes no other event before that one
    /// is given. Status events are taken here; the walk goes on, resumes
    /// elsewhere, or stops.
    #[inline(always)]
    fn events_at(&mut self, ip: u64) -> Flow<Here> {
        while self.query.tnt_len == 0 && self.query.held_disable.is_none() {
            if let Some(rejected) = self.query.rejected_event.take() {
                return Err(rejected);
            }
            if self.query.trace_ends {
                return Ok(Here::Stop(Next::End));
            }
            let ahead = match self.query.peek() {
                // A damaged TNT or TIP waits for the branch that needs
                // it (libipt knows it by its opcode until then).
                Err(e) if is_damaged_query(self.query.packets.data(), &e) => Some((e.0, Packet::Pad)),
                other => other?,
            };
            match ahead {
                // Nothing left to say where this goes: LLDB stops here too
                // (libipt reports the end of the stream here).
                None => return Ok(Here::Stop(Next::End)),
                Some((offset, Packet::Psb)) if self.query.psb_fup_lookahead().is_none() => {
                    // A PSB+ saying tracing is off while we trace: take it as is.
                    if self.query.at_stop(offset) {
                        return Ok(Here::Stop(Next::End));
                    }
                    self.query.peeked = None;
                    self.psb_plus(offset)?;
                    return Ok(Here::Stop(Next::Disabled));
                }
                Some((_, packet @ (Packet::Cbr(_) | Packet::ModeExec { .. }))) => {
                    self.query.peeked = None;
                    self.query.status_event(&mut self.history, packet)?;
                }
                // A TIP.PGD that a MODE.Exec is queued for gives that
                // event (stamped, applied at once: it has no IP) and
                // does not stop tracing (libipt).
                Some((_, Packet::TipPgd(_))) if matches!(self.query.tip_queue.first(), Some(BoundToTip::ExecMode(..))) => {
                    self.query.peeked = None;
                    let time = self.query.time;
                    self.query.take_tip_queue();
                    self.query.read_ahead()?;
                    self.query.check_next_event(true)?;
                    self.query.notify_time_at(&mut self.history, time);
                }
                // A TIP.PGD without an IP, nothing queued for it: libipt
                // takes the disable event now and binds it to the next
                // far transfer; branches on the way read the packets
                // after it.
                Some((_, Packet::TipPgd(Ip { ip: None, .. }))) if self.query.tip_queue.is_empty() => {
                    // (Taking it reads ahead to the next event packet; a
                    // failure there is the failure of this instruction.)
                    self.query.peeked = None;
                    let time = self.query.time;
                    // libipt's query decoder is off from here (a MODE.TSX
                    // is an event of its own).
                    self.query.disabled = true;
                    self.query.read_ahead().map_err(|(offset, error)| match error {
                        FlowError::Packet(kind, None) => (offset, FlowError::Packet(kind, Some(ip))),
                        other => (offset, other),
                    })?;
                    self.query.held_disable = Some(time);
                }
                Some((offset, Packet::Ovf)) => {
                    self.query.peeked = None;
                    return Ok(match self.overflow(offset)? {
                        Next::At(resume) => Here::ResumeAt(resume),
                        other => Here::Stop(other),
                    });
                }
                _ => return Ok(Here::Execute),
            }
        }
        Ok(Here::Execute)
    }

    /// Executes blocks from `ip` until tracing is disabled or the trace ends.
    ///
    /// One function of ~170 lines on purpose: it is the decoder's hot loop,
    /// and every iteration carries `ip`, the successor slot it came through
    /// (`via`) and LLDB's straight-line counters from the block lookup through
    /// the anomaly checks to the branch that ends the block, which updates
    /// all three. The rarer parts are functions of their own (`events_at`,
    /// `bind`, `ret`, `indirect`).
    fn execute(&mut self, mut ip: u64) -> Flow<Next> {
        let mut straight = StraightLine::new();
        // How `ip` was reached: (block, successor slot) when it is a static
        // successor whose block id can be cached.
        let mut via: Option<(u32, usize)> = None;
        loop {
            if self.query.tnt_len == 0 && self.query.held_disable.is_none() {
                match self.events_at(ip)? {
                    Here::Execute => {}
                    Here::ResumeAt(resume) => {
                        ip = resume;
                        via = None;
                        straight = StraightLine::new();
                        continue;
                    }
                    Here::Stop(next) => return Ok(next),
                }
            }
            let binding = if self.query.held_disable.is_some() || self.query.tnt_len > 0 { None } else { self.query.binding()? };

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
                Some((from, slot)) => self.blocks.successor(&mut self.history.table, from, slot, ip, self.memory),
                None => self.blocks.block_at(&mut self.history.table, ip, self.query.mode, self.memory),
            };
            let id = found.map_err(|e| (self.query.offset(), e))?;
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
            let budget = straight.loop_check.min(MAX_STRAIGHT_LINE) - straight.instructions;
            if block.count as u64 >= budget {
                let prefix = self.history.table.prefix(id, budget as u32);
                self.history.push_block(prefix);
                straight.instructions += budget;
                if straight.instructions >= MAX_STRAIGHT_LINE {
                    return Err((self.query.offset(), FlowError::NoProgress));
                }
                if let Some(size) = self.history.loop_at_end() {
                    return Err((self.query.offset(), FlowError::InfiniteLoop(size)));
                }
                straight.loop_check *= 2;
                if (block.count as u64) > budget {
                    // The rest of the block is decoded from its next instruction.
                    let prefix_block = *self.history.table.get(prefix);
                    ip = prefix_block.last_ip.wrapping_add(prefix_block.last.len as u64);
                    via = None;
                    continue;
                }
            } else {
                self.history.push_block(id);
                straight.instructions += block.count as u64;
            }
            if self.query.tnt_len == 0 && self.query.held_disable.is_none() {
                if let Some((_, Packet::TipPgd(Ip { ip: Some(at), .. }))) = self.query.peeked {
                    if disables_at(block.last.kind, at) {
                        self.query.peeked = None;
                        return Ok(self.tracing_disabled(Event::HardwareDisabled));
                    }
                }
            }
            let last_ip = block.last_ip;
            let next = last_ip.wrapping_add(block.last.len as u64);
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
                    straight = StraightLine::new();
                    let bit = self.query.tnt_bit();
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
                        Ok(None) if self.query.peeked.is_none() && !self.query.damaged_tip_ahead => return Ok(Next::End),
                        Ok(None) => {
                            let error = (self.query.offset(), FlowError::Mismatch { expected: "a TNT bit", ip: None });
                            return Err(self.query_failed(error, last_ip));
                        }
                        Err(e) => return Err(self.query_failed(e, last_ip)),
                    }
                }
                FlowKind::Return => {
                    straight = StraightLine::new();
                    match self.ret(last_ip, &mut via)? {
                        Next::At(target) => target,
                        other => return Ok(other),
                    }
                }
                FlowKind::IndirectJump | FlowKind::IndirectCall | FlowKind::Syscall | FlowKind::FarTransfer => {
                    straight = StraightLine::new();
                    if block.last.kind == FlowKind::IndirectCall {
                        self.push_return(next, id);
                    }
                    let far = matches!(block.last.kind, FlowKind::Syscall | FlowKind::FarTransfer);
                    if far {
                        if let Some(time) = self.query.held_disable.take() {
                            // Given now, the event makes libipt decode the
                            // next one: a failure there replaces it.
                            self.query.disabled = true;
                            if let Err((offset, error)) = self.query.check_next_event(false) {
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

    /// A return at `last_ip`: compressed (a taken TNT bit pops the return
    /// stack) or not (a TIP says where it went).
    #[inline(always)]
    fn ret(&mut self, last_ip: u64, via: &mut Option<(u32, usize)>) -> Flow<Next> {
        let bit = self.query.tnt_bit();
        if matches!(bit, Ok(Some(_))) && self.last_answer() {
            return Ok(Next::End);
        }
        match bit {
            Ok(Some(true)) => match self.returns.pop_back() {
                Some((address, call_block)) => {
                    *via = Some((call_block, 1));
                    Ok(Next::At(address))
                }
                None => {
                    let error = (self.query.offset(), FlowError::ReturnWithoutCall(last_ip));
                    Err(self.query_failed(error, last_ip))
                }
            },
            Ok(Some(false)) => {
                let error = (self.query.offset(), FlowError::BadReturnCompression(last_ip));
                Err(self.query_failed(error, last_ip))
            }
            Ok(None) => match self.indirect(last_ip, false) {
                Ok(next) => Ok(next),
                Err(e) => Err(self.query_failed(e, last_ip)),
            },
            Err(e) => Err(self.query_failed(e, last_ip)),
        }
    }

    /// Decodes from the current sync point to the end of the trace.
    fn run(&mut self) -> Flow<()> {
        let mut state = Next::Disabled;
        loop {
            if let Some(rejected) = self.query.rejected_event.take() {
                return Err(rejected);
            }
            self.query.disabled = matches!(state, Next::Disabled);
            state = match state {
                Next::End => return Ok(()),
                Next::Failed(offset, error) => return Err((offset, error)),
                Next::At(ip) => self.execute(ip)?,
                Next::Disabled => self.while_disabled()?,
            };
        }
    }

    /// Tracing is off: the packets up to where it starts again (a TIP.PGE,
    /// or a PSB+ whose FUP says where it is on), and the events met on the
    /// way.
    fn while_disabled(&mut self) -> Flow<Next> {
        Ok(match (self.query.fetch_while_disabled()?, self.query.tip_queue.first().copied()) {
            (None, _) => Next::End,
            (Some((offset, Packet::Psb)), _) if self.query.at_stop(offset) => Next::End,
            (Some((offset, Packet::Psb)), _) => {
                let ip = self.psb_plus(offset)?;
                self.query.check_next_event(ip.is_some())?;
                ip.map_or(Next::Disabled, Next::At)
            }
            // The return stack survives a disabled stretch (as in libipt).
            (Some((offset, Packet::TipPge(pge))), _) => match pge.ip {
                Some(ip) => self.tracing_enabled(offset, ip)?,
                None => return Err((offset, pge_without_ip())),
            },
            (Some((offset, Packet::Ovf)), _) => self.overflow(offset)?,
            (Some((_, packet @ (Packet::Cbr(_) | Packet::ModeExec { .. } | Packet::ModeTsx { .. }))), _) => {
                self.query.status_event(&mut self.history, packet)?;
                Next::Disabled
            }
            // A MODE.Exec binds to this TIP (which it does not
            // consume). libipt gives that event (stamped) only if the
            // TIP has no IP or the IP where tracing would resume;
            // then the next instruction query fails: tracing is off.
            (Some((offset, Packet::Tip(tip))), Some(BoundToTip::ExecMode(..))) => {
                if tip.ip.is_none() || tip.ip == self.history.last_instruction_end() {
                    self.query.notify_time(&mut self.history);
                }
                return Err((offset, FlowError::NotEnabled));
            }
            // A TIP.PGD while tracing is off gives what was queued
            // for it instead: a MODE.Exec event (stamped; tracing
            // stays off), or an asynchronous disable, which waits
            // for its IP, so the next instruction query fails.
            (Some((_, Packet::TipPgd(_))), Some(BoundToTip::ExecMode(..))) => {
                let time = self.query.time;
                self.query.take_tip_queue();
                self.query.read_ahead()?;
                self.query.check_next_event(false)?;
                self.query.notify_time_at(&mut self.history, time);
                Next::Disabled
            }
            (Some((offset, Packet::TipPgd(_))), Some(BoundToTip::AsyncBranch)) => {
                return Err((offset, FlowError::NotEnabled));
            }
            (Some((offset, Packet::TntShort(_) | Packet::TntLong(_) | Packet::Tip(_) | Packet::TipPgd(_))), _) => {
                return Err((offset, FlowError::NotEnabled))
            }
            (Some((_, Packet::Fup(Ip { ip: Some(_), .. }))), _) => {
                self.query.tip_queue.push(BoundToTip::AsyncBranch);
                Next::Disabled
            }
            (Some(_), _) => Next::Disabled,
        })
    }

    /// A TIP.PGE (at `offset`, consumed) enables tracing at `ip`.
    fn tracing_enabled(&mut self, offset: usize, ip: u64) -> Flow<Next> {
        let time = self.query.time;
        let queued = self.query.take_tip_queue();
        // libipt gives the enable event, then what was queued for this
        // TIP.PGE: an asynchronous branch cannot bind to it (after a
        // MODE.Exec, the enable event has been stamped by then).
        if let Some(k) = queued.iter().position(|q| *q == BoundToTip::AsyncBranch) {
            if k > 0 {
                self.query.notify_time_at(&mut self.history, time);
            }
            return Err((offset, FlowError::BadContext(None)));
        }
        self.query.read_ahead()?;
        // The MODE.Exec events queued for a TIP.PGE come after the enable
        // event, each stamped with the time at its own packet; a failure
        // decoding what follows is the last one's (LLDB has stamped the
        // others by then).
        let next_event = self.query.check_next_event(true);
        self.query.notify_time_at(&mut self.history, time);
        let mut stamps: Vec<Option<u64>> =
            queued.iter().filter_map(|q| if let BoundToTip::ExecMode(_, t) = *q { Some(t) } else { None }).collect();
        if next_event.is_err() {
            stamps.pop();
        }
        for stamp in stamps {
            self.query.notify_time_at(&mut self.history, stamp);
        }
        next_event?;
        if self.query.options.lldb_psb_slices {
            self.lldb_repeat_at_slice_end();
        }
        Ok(Next::At(ip))
    }
}
