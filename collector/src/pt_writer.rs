//! Turning an observed instruction flow into the Intel PT packets hardware
//! would have emitted for user-only tracing (`intel_pt//u`, return
//! compression on).
//!
//! The writer is fed one executed instruction at a time (its IP, its
//! classification, and the IP execution continued at) and knows nothing about
//! ptrace, so it is tested on synthetic flows.
//!
//! Rules (SDM "Intel PT" chapter; `docs/ARCHITECTURE.md`):
//! * start: PSB, TSC, MODE.Exec, PSBEND, then MODE.Exec + TIP.PGE(first IP);
//! * conditional branches: one TNT bit each (packed 6 per short TNT);
//! * direct jumps and calls: nothing (calls push the return address, except
//!   zero-length calls);
//! * indirect jumps and calls: TIP(target);
//! * near returns: a taken TNT bit when the target is the top of the
//!   64-entry return stack (popped), else TIP(target) — the stack model is
//!   libipt's, so libipt and LLDB decode every compressed return;
//! * SYSCALL and other far transfers: TIP.PGD with the IP suppressed (user-only
//!   tracing stops in the kernel); the next user instruction gets
//!   MODE.Exec + TIP.PGE; returns are never compressed across such a gap;
//! * asynchronous stops (signals, the end of recording): FUP(IP of the
//!   instruction not executed) + TIP.PGD;
//! * a PSB+ (TSC, MODE.Exec, FUP of the current IP when tracing is on) every
//!   `psb_period` bytes, with the return stack emptied, so decoding can start
//!   at any PSB.
//!
//! Pending TNT bits are flushed before every TIP, FUP, TIP.PGD and PSB so
//! their order relative to the IP packets is unambiguous.

use retrace_decoder::packet::{IpPacketKind, Packet, PacketEncoder, Tnt};
use retrace_decoder::x86::{FlowKind, InsnInfo};

const RETURN_STACK_DEPTH: usize = 64;

/// A 64-entry return-address stack; when full, the oldest entry is dropped.
#[derive(Debug, Clone, Default)]
struct ReturnStack {
    entries: std::collections::VecDeque<u64>,
}

impl ReturnStack {
    fn push(&mut self, address: u64) {
        if self.entries.len() == RETURN_STACK_DEPTH {
            self.entries.pop_front();
        }
        self.entries.push_back(address);
    }

    fn top(&self) -> Option<u64> {
        self.entries.back().copied()
    }

    fn pop(&mut self) {
        self.entries.pop_back();
    }

    fn clear(&mut self) {
        self.entries.clear();
    }
}

/// Builds one thread's Intel PT stream.
#[derive(Debug, Clone)]
pub struct ThreadPtWriter {
    encoder: PacketEncoder,
    tnt: Tnt,
    returns: ReturnStack,
    enabled: bool,
    started: bool,
    last_psb: usize,
    /// Bytes handed out by [`Self::take_written`] (positions count them).
    taken: usize,
    /// Where each PSB kept in the stream starts, oldest first.
    psbs: Vec<usize>,
    psb_period: usize,
    instructions: u64,
    /// TSC packets are written (at every PSB+ and where tracing resumes).
    timestamps: bool,
    /// An event packet (TIP.PGE, TIP.PGD, FUP, OVF) was written and no TNT
    /// or TIP since: the periodic PSB waits (see [`Self::executed`]).
    awaiting_flow: bool,
}

/// Default distance between PSBs, in bytes.
pub const DEFAULT_PSB_PERIOD: usize = 4096;

/// Instructions that run one after another, each needing no packet but a
/// conditional branch's TNT bit or a call's return address (a superblock's
/// body, as the Valgrind backend sees it): what they write, computed once
/// and written as often as they run
/// ([`ThreadPtWriter::executed_straight`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StraightRun {
    first: InsnInfo,
    instructions: u32,
    /// Conditional branches' outcomes, oldest in the most significant of
    /// `tnt_len` bits.
    tnt: u64,
    tnt_len: u8,
    /// Return addresses the calls push, in order.
    returns: [u64; StraightRun::MAX_CALLS],
    returns_len: u8,
}

impl StraightRun {
    const MAX_CALLS: usize = 4;

    /// The run of `steps` (address, instruction, the address run next), if
    /// each is a plain instruction, a direct jump or call or a conditional
    /// branch (at most 64 branches and 4 calls); `None` otherwise.
    pub fn new(steps: impl IntoIterator<Item = (u64, InsnInfo, u64)>) -> Option<StraightRun> {
        let mut run = StraightRun { first: InsnInfo { len: 1, kind: FlowKind::Other }, instructions: 0, tnt: 0, tnt_len: 0, returns: [0; Self::MAX_CALLS], returns_len: 0 };
        for (ip, insn, next_ip) in steps {
            if run.instructions == 0 {
                run.first = insn;
            }
            run.instructions += 1;
            let fallthrough = ip.wrapping_add(insn.len as u64);
            match insn.kind {
                FlowKind::Other | FlowKind::Jump { .. } => {}
                FlowKind::CondBranch { .. } => {
                    if run.tnt_len == 64 {
                        return None;
                    }
                    run.tnt = run.tnt << 1 | (next_ip != fallthrough) as u64;
                    run.tnt_len += 1;
                }
                FlowKind::Call { .. } => {
                    if !insn.is_zero_length_call(ip) {
                        if run.returns_len as usize == Self::MAX_CALLS {
                            return None;
                        }
                        run.returns[run.returns_len as usize] = fallthrough;
                        run.returns_len += 1;
                    }
                }
                _ => return None,
            }
        }
        Some(run)
    }

    /// How many instructions.
    pub fn len(&self) -> usize {
        self.instructions as usize
    }

    /// No instruction.
    pub fn is_empty(&self) -> bool {
        self.instructions == 0
    }
}

impl ThreadPtWriter {
    /// A writer emitting a PSB+ about every `psb_period` bytes.
    pub fn new(psb_period: usize) -> Self {
        ThreadPtWriter {
            encoder: PacketEncoder::new(),
            tnt: Tnt { bits: 0, len: 0 },
            returns: ReturnStack::default(),
            enabled: false,
            started: false,
            last_psb: 0,
            taken: 0,
            psbs: Vec::new(),
            psb_period,
            instructions: 0,
            awaiting_flow: false,
            timestamps: true,
        }
    }

    /// The same writer with no TSC packets (as hardware without its TSC
    /// bit, LLDB's default `process trace start`).
    pub fn without_timestamps(mut self) -> Self {
        self.timestamps = false;
        self
    }

    /// Instructions recorded so far.
    pub fn instructions(&self) -> u64 {
        self.instructions
    }

    /// Bytes of trace so far.
    pub fn len(&self) -> usize {
        self.taken + self.encoder.len()
    }

    /// True before anything was written.
    pub fn is_empty(&self) -> bool {
        self.encoder.is_empty()
    }

    /// True while packet generation is enabled.
    pub fn is_enabled(&self) -> bool {
        self.enabled
    }

    fn emit(&mut self, packet: Packet) {
        self.encoder.encode(&packet).expect("the writer only builds valid packets");
    }

    fn flush_tnt(&mut self) {
        if self.tnt.len > 0 {
            self.awaiting_flow = false;
            let tnt = std::mem::replace(&mut self.tnt, Tnt { bits: 0, len: 0 });
            self.emit(Packet::TntShort(tnt));
        }
    }

    fn push_tnt(&mut self, taken: bool) {
        self.tnt.bits = self.tnt.bits << 1 | taken as u64;
        self.tnt.len += 1;
        if self.tnt.len == 6 {
            self.flush_tnt();
        }
    }

    /// An indirect transfer to `target` (pending TNT bits go first).
    fn tip(&mut self, target: Option<u64>) {
        self.flush_tnt();
        self.encoder.encode_ip(IpPacketKind::Tip, target);
        self.awaiting_flow = false;
    }

    fn psb_plus(&mut self, tsc: u64, current_ip: Option<u64>) {
        self.flush_tnt();
        self.last_psb = self.taken + self.encoder.len();
        self.psbs.push(self.encoder.len());
        self.emit(Packet::Psb);
        if self.timestamps {
            self.emit(Packet::Tsc(tsc & ((1 << 56) - 1)));
        }
        self.emit(Packet::ModeExec { csl: true, csd: false, iflag: false });
        if let Some(ip) = current_ip {
            self.encoder.encode_ip(IpPacketKind::Fup, Some(ip));
        }
        self.emit(Packet::Psbend);
        self.returns.clear();
    }

    /// Tracing (re)starts at `ip`, the next instruction to execute.
    pub fn enable(&mut self, ip: u64, tsc: u64) {
        if !self.started {
            self.started = true;
            self.psb_plus(tsc, None);
        } else if self.timestamps {
            self.emit(Packet::Tsc(tsc & ((1 << 56) - 1)));
        }
        self.emit(Packet::ModeExec { csl: true, csd: false, iflag: false });
        self.encoder.encode_ip(IpPacketKind::TipPge, Some(ip));
        self.enabled = true;
        self.awaiting_flow = true;
    }

    /// The instruction at `ip` (classified as `insn`) executed and control
    /// continued at `next_ip` (`None` when the thread ended inside it, e.g.
    /// `exit`). `tsc` is the time of the observation.
    pub fn executed(&mut self, ip: u64, insn: &InsnInfo, next_ip: Option<u64>, tsc: u64) {
        self.periodic_psb(ip, insn, tsc);
        if !self.enabled {
            self.enable(ip, tsc);
        }
        self.instructions += 1;
        let fallthrough = ip.wrapping_add(insn.len as u64);
        match insn.kind {
            FlowKind::Other | FlowKind::Jump { .. } => {}
            FlowKind::CondBranch { .. } => self.push_tnt(next_ip != Some(fallthrough)),
            FlowKind::Call { .. } => {
                if !insn.is_zero_length_call(ip) {
                    self.returns.push(fallthrough);
                }
            }
            FlowKind::IndirectJump | FlowKind::IndirectCall => {
                if insn.kind == FlowKind::IndirectCall {
                    self.returns.push(fallthrough);
                }
                self.tip(next_ip);
            }
            FlowKind::Return => {
                if next_ip.is_some() && self.returns.top() == next_ip {
                    self.returns.pop();
                    self.push_tnt(true);
                } else {
                    self.tip(next_ip);
                }
            }
            FlowKind::Syscall | FlowKind::FarTransfer => {
                self.flush_tnt();
                self.encoder.encode_ip(IpPacketKind::TipPgd, None);
                self.disabled();
            }
        }
    }

    /// A PSB+ when one is due, placed before the instruction at `ip`
    /// executes (its FUP names `ip`). LLDB 22 decodes each PSB-to-PSB slice
    /// on its own, and a slice's decode ends cleanly only if the instruction
    /// at the next PSB's IP needs no packet (libipt then reports the end of
    /// the slice with it); one that does (a conditional branch, an indirect
    /// transfer, a return, a system call) fails with "reached end of trace
    /// stream". So a due PSB waits for an instruction that needs no packet —
    /// for at most another period, as straight runs of branches are rare.
    /// It also never directly follows an event packet: a slice ending right
    /// after events makes LLDB append the last instruction a second time.
    /// Pending TNT bits count as a flow packet (the PSB+ flushes them).
    fn periodic_psb(&mut self, ip: u64, insn: &InsnInfo, tsc: u64) {
        let since = self.taken + self.encoder.len() - self.last_psb;
        if since < self.psb_period || (self.awaiting_flow && self.tnt.len == 0) {
            return;
        }
        if !self.enabled {
            self.psb_plus(tsc, None);
            return;
        }
        let needs_packet = !matches!(insn.kind, FlowKind::Other | FlowKind::Jump { .. } | FlowKind::Call { .. });
        if !needs_packet || since >= 2 * self.psb_period {
            self.psb_plus(tsc, Some(ip));
        }
    }

    /// The instructions of `run` ran, the first at `first_ip`: what
    /// [`executed`](Self::executed) would write for each, at once (a
    /// periodic PSB+ is only placed before the first).
    pub fn executed_straight(&mut self, first_ip: u64, run: &StraightRun, tsc: u64) {
        if run.instructions == 0 {
            return;
        }
        self.periodic_psb(first_ip, &run.first, tsc);
        if !self.enabled {
            self.enable(first_ip, tsc);
        }
        self.instructions += run.instructions as u64;
        let mut left = run.tnt_len;
        while left > 0 {
            let take = (6 - self.tnt.len).min(left);
            let chunk = (run.tnt >> (left - take)) & ((1u64 << take) - 1);
            self.tnt.bits = self.tnt.bits << take | chunk;
            self.tnt.len += take;
            left -= take;
            if self.tnt.len == 6 {
                self.flush_tnt();
            }
        }
        for &address in &run.returns[..run.returns_len as usize] {
            self.returns.push(address);
        }
    }

    /// `count` instructions that need no packet and continue at the next
    /// (`FlowKind::Other`) ran, the first at `first_ip`: what `count` calls
    /// of [`executed`](Self::executed) would write, at once: they write
    /// nothing but a periodic PSB+ before the first, after which no other
    /// is due (the period is larger than a PSB+).
    pub fn executed_plain(&mut self, first_ip: u64, count: u64, tsc: u64) {
        if count == 0 {
            return;
        }
        let plain = InsnInfo { len: 1, kind: FlowKind::Other };
        self.periodic_psb(first_ip, &plain, tsc);
        if !self.enabled {
            self.enable(first_ip, tsc);
        }
        self.instructions += count;
    }

    /// Emits a timing or status packet (TSC, MTC, CYC, CBR, …) at the current
    /// position, as hardware interleaves them with the flow packets. Pending
    /// TNT bits stay pending: timing packets do not order against them.
    pub fn timing(&mut self, packet: Packet) {
        self.emit(packet);
    }

    /// Tracing stops asynchronously before the instruction at `ip` executes
    /// (a signal is delivered, the recording ends, the thread is killed).
    pub fn disable_async(&mut self, ip: u64) {
        if !self.enabled {
            return;
        }
        self.flush_tnt();
        self.encoder.encode_ip(IpPacketKind::Fup, Some(ip));
        self.encoder.encode_ip(IpPacketKind::TipPgd, None);
        self.disabled();
    }

    /// The tracing hardware's internal buffer overflowed after the last
    /// instruction: pending TNT bits are written, then OVF. With
    /// `resume_ip`, tracing resumed while enabled at that IP (OVF + FUP);
    /// without, it resumed disabled and the next instruction re-enables it
    /// with TIP.PGE. Returns are not compressed across the overflow.
    pub fn overflow(&mut self, resume_ip: Option<u64>) {
        if !self.enabled {
            return;
        }
        self.flush_tnt();
        self.emit(Packet::Ovf);
        match resume_ip {
            Some(ip) => {
                self.encoder.encode_ip(IpPacketKind::Fup, Some(ip));
                self.returns.clear();
                self.awaiting_flow = true;
            }
            None => self.disabled(),
        }
    }

    /// Packet generation stopped. Returns are not compressed against calls
    /// made before it (decoders differ on whether their return stack survives
    /// a disabled stretch: libipt keeps it, others clear it), so start afresh.
    fn disabled(&mut self) {
        self.enabled = false;
        self.awaiting_flow = true;
        self.returns.clear();
    }

    /// Where the PSBs of the stream kept so far start, oldest first: the
    /// places a decoder can start.
    pub fn psb_offsets(&self) -> &[usize] {
        &self.psbs
    }

    /// Drops the stream's oldest bytes, keeping at least the newest `keep`
    /// from a PSB on (what a ring buffer of `keep` bytes holds that a
    /// decoder can use); offsets shift down by the bytes dropped, which are
    /// returned. Nothing is dropped while no PSB leaves `keep` bytes after it.
    pub fn discard_older_than(&mut self, keep: usize) -> usize {
        let len = self.encoder.len();
        let Some(index) = self.psbs.iter().rposition(|&at| len - at >= keep) else { return 0 };
        let cut = self.psbs[index];
        self.encoder.discard_front(cut);
        self.psbs.drain(..index);
        for at in &mut self.psbs {
            *at -= cut;
        }
        self.last_psb -= cut.min(self.last_psb);
        cut
    }

    /// The stream written so far (pending TNT bits stay: they are not
    /// written yet), for the caller to store; the writer goes on as if it
    /// still had them (PSB spacing counts them), and [`Self::into_bytes`]
    /// returns what follows. Not for ring use: PSB offsets restart.
    pub fn take_written(&mut self) -> Vec<u8> {
        let bytes = self.encoder.take_bytes();
        self.taken += bytes.len();
        self.psbs.clear();
        bytes
    }

    /// Bytes written and not yet taken.
    pub fn unwritten_len(&self) -> usize {
        self.encoder.len()
    }

    /// The finished stream. Call [`disable_async`](Self::disable_async) first
    /// if the thread is still running.
    pub fn into_bytes(mut self) -> Vec<u8> {
        self.flush_tnt();
        self.encoder.into_bytes()
    }

    /// The stream so far, as a decoder would see it if recording stopped now
    /// (pending TNT bits flushed into the copy).
    pub fn snapshot(&self) -> Vec<u8> {
        self.clone().into_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use retrace_decoder::packet::PacketDecoder;

    fn insn(len: u8, kind: FlowKind) -> InsnInfo {
        InsnInfo { len, kind }
    }

    fn names(bytes: &[u8]) -> Vec<String> {
        PacketDecoder::new(bytes)
            .map(|item| {
                let (_, packet) = item.unwrap();
                match packet.ip() {
                    Some(ip) => format!("{} {:x?}", packet.name(), ip.ip),
                    None => match packet {
                        Packet::TntShort(t) => format!("tnt {}", t.outcomes().map(|b| if b { '!' } else { '.' }).collect::<String>()),
                        other => other.name().to_string(),
                    },
                }
            })
            .collect()
    }

    #[test]
    fn call_compressed_return_loop_and_syscall() {
        let mut w = ThreadPtWriter::new(DEFAULT_PSB_PERIOD);
        // 0x1000: call 0x2000 ; 0x2000: ret ; 0x1005: jne 0x1000 (not taken) ; 0x1007: syscall ; 0x1009: nop
        w.executed(0x1000, &insn(5, FlowKind::Call { target: 0x2000 }), Some(0x2000), 1);
        w.executed(0x2000, &insn(1, FlowKind::Return), Some(0x1005), 2);
        w.executed(0x1005, &insn(2, FlowKind::CondBranch { target: 0x1000 }), Some(0x1007), 3);
        w.executed(0x1007, &insn(2, FlowKind::Syscall), Some(0x1009), 4);
        w.executed(0x1009, &insn(1, FlowKind::Other), Some(0x100a), 5);
        w.disable_async(0x100a);
        assert_eq!(w.instructions(), 5);
        assert_eq!(
            names(&w.into_bytes()),
            [
                "psb", "tsc", "mode.exec", "psbend", "mode.exec", "tip.pge Some(1000)", "tnt !.", "tip.pgd None",
                "tsc", "mode.exec", "tip.pge Some(1009)", "fup Some(100a)", "tip.pgd None"
            ]
        );
    }

    #[test]
    fn mismatched_return_is_a_tip_and_zero_length_call_does_not_push() {
        let mut w = ThreadPtWriter::new(DEFAULT_PSB_PERIOD);
        w.executed(0x1000, &insn(5, FlowKind::Call { target: 0x1005 }), Some(0x1005), 0); // PIC idiom
        w.executed(0x1005, &insn(1, FlowKind::Return), Some(0x3000), 0); // longjmp-like
        w.executed(0x3000, &insn(2, FlowKind::IndirectJump), Some(0x4000), 0);
        let names = names(&w.into_bytes());
        assert_eq!(&names[5..], ["tip.pge Some(1000)", "tip Some(3000)", "tip Some(4000)"]);
    }

    #[test]
    fn periodic_psb_carries_the_current_ip_and_resets_return_stack() {
        let mut w = ThreadPtWriter::new(64);
        let mut ip = 0x1000;
        let mut needing_no_packet = Vec::new();
        for i in 0..300u64 {
            // conditional branches, indirect jumps and plain instructions
            match i % 3 {
                0 => {
                    w.executed(ip, &insn(2, FlowKind::CondBranch { target: ip + 0x10 }), Some(ip + 2), i);
                    ip += 2;
                }
                1 => {
                    w.executed(ip, &insn(2, FlowKind::IndirectJump), Some(ip + 0x100), i);
                    ip += 0x100;
                }
                _ => {
                    needing_no_packet.push(ip);
                    w.executed(ip, &insn(3, FlowKind::Other), Some(ip + 3), i);
                    ip += 3;
                }
            }
        }
        let bytes = w.into_bytes();
        let psbs = retrace_decoder::packet::sync::psb_offsets(&bytes).count();
        assert!(psbs > 5, "{psbs} PSBs");
        // every PSB+ after the first carries a FUP with an address we jumped to
        for offset in retrace_decoder::packet::sync::psb_offsets(&bytes).skip(1) {
            let fup = PacketDecoder::new(&bytes[offset..]).map(|i| i.unwrap().1).find(|p| p.name() == "fup");
            let ip = fup.unwrap().ip().unwrap().ip.unwrap();
            // LLDB's slice before it ends cleanly: the instruction there needs no packet.
            assert!(needing_no_packet.contains(&ip), "PSB at {ip:#x}, an instruction that needs a packet");
        }
    }

    #[test]
    fn a_due_psb_waits_at_most_another_period_for_a_clean_place() {
        let mut w = ThreadPtWriter::new(64);
        let mut ip = 0x1000;
        for i in 0..400u64 {
            w.executed(ip, &insn(2, FlowKind::IndirectJump), Some(ip + 0x100), i);
            ip += 0x100;
        }
        let bytes = w.into_bytes();
        let psbs: Vec<usize> = retrace_decoder::packet::sync::psb_offsets(&bytes).collect();
        assert!(psbs.len() > 5, "{} PSBs", psbs.len());
        for pair in psbs.windows(2) {
            assert!(pair[1] - pair[0] <= 2 * 64 + 32, "PSBs {} bytes apart", pair[1] - pair[0]);
        }
    }

    #[test]
    fn runs_of_plain_instructions_counted_at_once_write_the_same_stream() {
        // A loop of 5 plain instructions and a conditional branch, many
        // times over small PSB periods (each larger than a PSB+): PSBs land
        // where they land one by one.
        for period in [48, 64, 100, 256] {
            let mut one_by_one = ThreadPtWriter::new(period).without_timestamps();
            let mut batched = ThreadPtWriter::new(period).without_timestamps();
            let branch = insn(2, FlowKind::CondBranch { target: 0x1000 });
            for round in 0..500u64 {
                for k in 0..5u64 {
                    one_by_one.executed(0x1000 + k, &insn(1, FlowKind::Other), Some(0x1001 + k), 0);
                }
                batched.executed_plain(0x1000, 5, 0);
                let next = if round % 7 == 0 { 0x1007 } else { 0x1000 };
                one_by_one.executed(0x1005, &branch, Some(next), 0);
                batched.executed(0x1005, &branch, Some(next), 0);
            }
            assert_eq!(one_by_one.instructions(), batched.instructions());
            let (a, b) = (one_by_one.into_bytes(), batched.into_bytes());
            let at = a.iter().zip(&b).position(|(x, y)| x != y).unwrap_or(a.len().min(b.len()));
            assert!(a == b, "period {period}: {} vs {} bytes, first difference at {at}: {:?} vs {:?}", a.len(), b.len(), &a[at.saturating_sub(8)..(at + 8).min(a.len())], &b[at.saturating_sub(8)..(at + 8).min(b.len())]);
        }
    }
}
