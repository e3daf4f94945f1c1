//! A full-state recording's past (`retrace record --backend valgrind
//! --mode full`): the saved trace's [`Timeline`] says which instruction ran
//! at each position, the bundle's full-state stream
//! ([`retrace_decoder::full_state`]) every register and byte the program
//! changed. [`RecordedState::load`] replays the stream forwards in the
//! timeline's order into a [`StateLog`] — the same history a live
//! `--record=full` keeps — whose present is the memory at the end; a
//! [`FullStateHistory`] is the replay engine's [`History`] over both.
//! A register or byte the recording does not know is unavailable.

use std::collections::{HashMap, VecDeque};
use std::ops::Range;

use retrace_decoder::full_state::{piece, state_records, StateMachine, StateRecord};

use crate::arch::Regs;
use crate::inferior::frames::Flow;
use crate::inferior::replay::{History, Step};
use crate::inferior::state_log::{Overwritten, StateLog};
use crate::inferior::timeline::Timeline;

/// `cs` and `ss` of a 64-bit Linux process (the others are 0).
const USER_CS: u32 = 0x33;
const USER_SS: u32 = 0x2b;

/// Bits of `rflags` the processor always shows set in user mode (the
/// reserved bit 1, IF) that Valgrind's computed flags leave out.
const RFLAGS_ALWAYS: u64 = 0x202;

/// The registers GDB numbers `n` (bit `n` of [`Regs::unavailable`]).
mod number {
    pub const FIRST_ST: usize = 24;
    pub const FCTRL: usize = 32;
    pub const FSTAT: usize = 33;
    pub const FTAG: usize = 34;
    pub const FIRST_XMM: usize = 40;
    pub const MXCSR: usize = 56;
    pub const ORIG_RAX: usize = 57;
    pub const FS_BASE: usize = 58;
    pub const GS_BASE: usize = 59;
}

/// A double as the x87's 80-bit extended format (exact: every double is
/// one).
fn extended(value: f64) -> [u8; 10] {
    let bits = value.to_bits();
    let sign = (bits >> 63) as u16;
    let exponent = ((bits >> 52) & 0x7ff) as i32;
    let fraction = bits & ((1 << 52) - 1);
    let (exponent, mantissa) = match exponent {
        0 if fraction == 0 => (0u16, 0u64),
        0 => {
            // Subnormal: normalise.
            let shift = fraction.leading_zeros() - 11;
            ((1 - 1023 + 16383 - shift as i32) as u16, (fraction << (shift + 11)))
        }
        0x7ff => (0x7fff, (1 << 63) | (fraction << 11)),
        e => ((e - 1023 + 16383) as u16, (1 << 63) | (fraction << 11)),
    };
    let mut out = [0u8; 10];
    out[..8].copy_from_slice(&mantissa.to_le_bytes());
    out[8..].copy_from_slice(&((sign << 15) | exponent).to_le_bytes());
    out
}

/// Registers from the pieces a thread's records gave, at `rip`; a piece
/// never given makes its register unavailable.
pub fn registers_of(pieces: &[Option<u64>; piece::COUNT], rip: u64) -> Regs {
    let mut regs = Regs { rip, ..Regs::default() };
    let mut unavailable = 0u64;
    let mut get = |p: u8, n: usize| match pieces[p as usize] {
        Some(value) => value,
        None => {
            unavailable |= 1 << n;
            0
        }
    };
    for (n, p) in piece::GENERAL.enumerate() {
        regs.gpr[n] = get(p, n);
    }
    regs.eflags = (get(piece::RFLAGS, 17) | RFLAGS_ALWAYS) as u32;
    regs.segments = [USER_CS, USER_SS, 0, 0, 0, 0];
    regs.fs_base = get(piece::FS_BASE, number::FS_BASE);
    regs.gs_base = get(piece::GS_BASE, number::GS_BASE);
    for n in 0..16u8 {
        let low = get(piece::xmm(n), number::FIRST_XMM + n as usize);
        let high = get(piece::xmm(n) + 1, number::FIRST_XMM + n as usize);
        regs.xmm[n as usize] = u128::from(low) | u128::from(high) << 64;
    }
    regs.mxcsr = 0x1f80 | ((get(piece::SSE_ROUNDING, number::MXCSR) as u32 & 3) << 13);
    // x87: st(i) is physical register (top + i) % 8.
    let top = get(piece::X87_TOP, number::FSTAT) as u32 & 7;
    let tags = get(piece::X87_TAGS, number::FTAG).to_le_bytes();
    for i in 0..8u8 {
        let physical = (top as u8 + i) % 8;
        let value = get(piece::x87(physical), number::FIRST_ST + i as usize);
        regs.st[i as usize] = extended(f64::from_bits(value));
    }
    let rounding = get(piece::X87_ROUNDING, number::FCTRL) as u32 & 3;
    regs.fpu[0] = 0x037f | rounding << 10;
    regs.fpu[1] = (top << 11) | (get(piece::X87_CONDITION, number::FSTAT) as u32 & 0x4700);
    // The full tag word: 11 empty, else 00 (valid; Valgrind keeps no
    // zero/special distinction).
    regs.fpu[2] = (0..8).fold(0u32, |word, k| word | if tags[k] == 0 { 3 << (2 * k) } else { 0 });
    // Last instruction and operand pointers, opcode, orig_rax: not kept.
    unavailable |= (0b1111_1000u64 << number::FCTRL) | (1 << number::ORIG_RAX);
    regs.unavailable = unavailable;
    regs
}

/// The history of a full-state recording: its state log and the state at
/// the end.
#[derive(Debug)]
pub struct RecordedState {
    log: StateLog,
    end: StateMachine,
}

/// One thread's records not applied yet.
type Queue<'a> = VecDeque<StateRecord<'a>>;

/// The stream read as the replay needs it: each thread's records queued
/// until its steps reach them. The stream is in the order things happened,
/// as the timeline is, so the queues stay short.
struct Pending<'a> {
    records: retrace_decoder::full_state::StateRecords<'a>,
    queues: HashMap<u32, Queue<'a>>,
}

impl<'a> Pending<'a> {
    /// Reads on until thread `tid` has a record later than `at` queued, or
    /// the stream ends; the start's records (thread 0's) go straight into
    /// `machine`.
    fn read_through(&mut self, tid: u32, at: u64, machine: &mut StateMachine, file: &mut dyn FnMut(&[u8], u64, &mut [u8]) -> usize) -> Result<(), String> {
        while !self.queues.get(&tid).and_then(|q| q.back()).is_some_and(|r| r.at() > at) {
            let Some(item) = self.records.next() else { return Ok(()) };
            let (record_tid, record) = item.map_err(|e| e.to_string())?;
            match (record_tid, &record) {
                (_, StateRecord::Thread(_) | StateRecord::Scheduled { .. }) => {}
                (0, _) => machine.apply(0, &record, file),
                _ => self.queues.entry(record_tid).or_default().push_back(record),
            }
        }
        Ok(())
    }
}

/// Changes `machine` by a memory record; returns what it overwrote
/// (known bytes, as [`Overwritten`]) and the ranges whose old bytes were
/// not known.
fn apply_memory(machine: &mut StateMachine, tid: u32, record: &StateRecord<'_>, file: &mut dyn FnMut(&[u8], u64, &mut [u8]) -> usize) -> (Vec<Overwritten>, Vec<Range<u64>>) {
    let touched: Vec<Range<u64>> = match record {
        StateRecord::Wrote { address, bytes, .. } => vec![*address..address.saturating_add(bytes.len() as u64)],
        StateRecord::Zeroed { start, length, .. } | StateRecord::Unmapped { start, length, .. } | StateRecord::FileMapped { start, length, .. } => vec![*start..start.saturating_add(*length)],
        StateRecord::Moved { from, to, length, .. } => vec![*from..from.saturating_add(*length), *to..to.saturating_add(*length)],
        _ => Vec::new(),
    };
    let mut overwritten = Vec::new();
    let mut lost = Vec::new();
    for range in touched.iter().filter(|r| !r.is_empty()) {
        let mut at = range.start;
        for (address, old) in machine.known_runs(range.start, range.end - range.start) {
            if at < address {
                lost.push(at..address);
            }
            at = address + old.len() as u64;
            overwritten.push(Overwritten { address, old });
        }
        if at < range.end {
            lost.push(at..range.end);
        }
    }
    machine.apply(tid, record, file);
    (overwritten, lost)
}

impl RecordedState {
    /// Replays `stream` in `timeline`'s order. `file(path, offset, buf)`
    /// reads a mapped file's bytes (the bundle's copy). The error is a
    /// sentence for the user.
    pub fn load(timeline: &Timeline, stream: &[u8], file: &mut dyn FnMut(&[u8], u64, &mut [u8]) -> usize) -> Result<Self, String> {
        let mut machine = StateMachine::new();
        let mut pending = Pending { records: state_records(stream), queues: HashMap::new() };
        let mut log = StateLog::new(vec![0..u64::MAX]);
        for position in 0..timeline.len() {
            let Some(step) = timeline.at(position) else { break };
            let tid = step.tid as u32;
            // Everything of this thread up to the end of this step is read.
            pending.read_through(tid, step.index + 1, &mut machine, file)?;
            let queue = pending.queues.entry(tid).or_default();
            // What changed since its last step (a system call's results, a
            // signal frame): kept before this step.
            while queue.front().is_some_and(|r| r.at() <= step.index) {
                let record = queue.pop_front().expect("checked");
                let (overwritten, lost) = apply_memory(&mut machine, tid, &record, file);
                for o in overwritten {
                    log.overwritten_outside(o);
                }
                if !lost.is_empty() {
                    log.lost_writes_of_last_step(lost);
                }
            }
            let before = machine.registers(tid).map_or_else(|| Regs::only_pc(step.ip), |p| registers_of(p, step.ip));
            // The step's own effects (and the kernel's, after a system call).
            let (mut overwritten, mut lost, mut reads) = (Vec::new(), Vec::new(), Vec::new());
            while queue.front().is_some_and(|r| r.at() == step.index + 1) {
                let record = queue.pop_front().expect("checked");
                if let StateRecord::Read { address, size, .. } = record {
                    reads.push(address..address.saturating_add(size));
                    continue;
                }
                let (o, l) = apply_memory(&mut machine, tid, &record, file);
                overwritten.extend(o);
                lost.extend(l);
            }
            let next = timeline.next_pc_of_thread(position + 1, step.thread).unwrap_or(step.ip);
            let after = machine.registers(tid).map_or_else(|| before.clone(), |p| registers_of(p, next));
            log.push(step.tid, &before, &after, overwritten, None, Flow::Other);
            if !lost.is_empty() {
                log.lost_writes_of_last_step(lost);
            }
            if !reads.is_empty() {
                log.reads_of_last_step(&reads);
            }
        }
        Ok(RecordedState { log, end: machine })
    }

    /// Thread `tid`'s registers before `position`.
    pub fn registers_at(&self, tid: u64, position: u64) -> Option<Regs> {
        self.log.registers_at(tid, position)
    }

    /// Memory before `position`: how many bytes of `buf` from `address`
    /// are known.
    pub fn memory_at(&self, position: u64, address: u64, buf: &mut [u8]) -> usize {
        let end = &self.end;
        self.log.read_at(position, address, buf, &mut |at, out| end.read(at, out))
    }

    /// The state log (its searches by written or read range).
    pub fn log(&self) -> &StateLog {
        &self.log
    }
}

/// The replay engine's history over a full-state recording: positions and
/// threads from the timeline, registers, memory and watched accesses from
/// the recorded state.
pub struct FullStateHistory<'a> {
    /// What ran.
    pub timeline: &'a Timeline,
    /// What it changed.
    pub state: &'a RecordedState,
}

impl History for FullStateHistory<'_> {
    fn len(&self) -> u64 {
        self.timeline.len()
    }

    fn end(&self) -> u64 {
        History::end(self.timeline)
    }

    fn step(&self, position: u64) -> Option<Step> {
        self.timeline.step(position)
    }

    fn thread_at(&self, position: u64) -> u64 {
        self.timeline.thread_at(position)
    }

    fn previous_of_thread(&self, tid: u64, before: u64) -> Option<u64> {
        History::previous_of_thread(self.timeline, tid, before)
    }

    fn next_of_thread(&self, tid: u64, from: u64) -> Option<u64> {
        History::next_of_thread(self.timeline, tid, from)
    }

    fn last_pc_before(&self, addresses: &[u64], before: u64) -> Option<u64> {
        self.state.log.last_pc_before(addresses, before)
    }

    fn first_pc_from(&self, addresses: &[u64], from: u64) -> Option<u64> {
        self.state.log.first_pc_from(addresses, from)
    }

    fn last_write_before(&self, range: Range<u64>, before: u64) -> Option<u64> {
        self.state.log.last_write_before(range, before)
    }

    fn first_write_from(&self, range: Range<u64>, from: u64) -> Option<u64> {
        self.state.log.first_write_from(range, from)
    }

    fn last_read_before(&self, range: Range<u64>, before: u64) -> Option<u64> {
        self.state.log.last_read_before(range, before)
    }

    fn first_read_from(&self, range: Range<u64>, from: u64) -> Option<u64> {
        self.state.log.first_read_from(range, from)
    }

    fn wrote(&self, position: u64, range: &Range<u64>) -> bool {
        self.state.log.overwritten_by(position).any(|(at, old)| at < range.end && range.start < at + old.len() as u64)
    }

    fn registers_at(&self, tid: u64, position: u64) -> Option<Regs> {
        self.state.registers_at(tid, position)
    }

    fn memory_at(&self, position: u64, address: u64, buf: &mut [u8]) -> usize {
        self.state.memory_at(position, address, buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_become_the_x87_extended_values_they_are() {
        // 1.0: exponent 0x3fff, integer bit set.
        assert_eq!(extended(1.0), [0, 0, 0, 0, 0, 0, 0, 0x80, 0xff, 0x3f]);
        // -2.5 = -1.25 * 2^1.
        assert_eq!(extended(-2.5), [0, 0, 0, 0, 0, 0, 0, 0xa0, 0x00, 0xc0]);
        assert_eq!(extended(0.0), [0; 10]);
        // The smallest subnormal double, 2^-1074: exponent 16383 - 1074.
        let tiny = extended(f64::from_bits(1));
        assert_eq!(u16::from_le_bytes([tiny[8], tiny[9]]), (16383 - 1074) as u16);
        assert_eq!(u64::from_le_bytes(tiny[..8].try_into().unwrap()), 1 << 63);
    }

    #[test]
    fn registers_never_given_are_unavailable_and_flags_show_the_always_set_bits() {
        let mut pieces = [None; piece::COUNT];
        pieces[0] = Some(5);
        pieces[piece::RFLAGS as usize] = Some(0x44);
        let regs = registers_of(&pieces, 0x401000);
        assert_eq!((regs.gpr[0], regs.eflags, regs.rip), (5, 0x246, 0x401000));
        assert!(regs.is_available(0) && regs.is_available(16) && regs.is_available(17));
        assert!(!regs.is_available(1) && !regs.is_available(number::FS_BASE) && !regs.is_available(number::FIRST_XMM));
    }
}
