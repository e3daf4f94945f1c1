//! The recorded state against a forward replay of the whole stream (the
//! decoder's `StateMachine` given every record up to the position), and
//! when records take effect.

use super::*;
use crate::inferior::timeline::tests::nops;
use crate::inferior::timeline::{Delivery, RecordedThread};
use retrace_decoder::full_state::{state_records, StateMachine, StateWriter};

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

const FILE: &[u8] = b"/lib/data";

/// A file's bytes as the bundle keeps them.
fn file_bytes() -> Vec<u8> {
    (0..0x1800u32).map(|i| (i * 7) as u8).collect()
}

/// One thread (7) of 40 instructions: a start with zeroed, written and
/// file-mapped memory; every instruction changes rax, every third writes
/// a word of 0x5000.., every seventh (from 6) stores rax's value at
/// 0x5040, every eleventh (from 10) writes below rsp at 0x5ef8, every
/// fifth reads 0x5100; the kernel writes after
/// step 20, a mapping goes at step 30 and one moves at step 35.
fn one_thread() -> (Timeline, Vec<u8>) {
    one_thread_signalled(false)
}

/// [`one_thread`], and with `signalled` a signal delivered after step 25
/// (before its instruction 26, interrupted at 0x1234): a frame written at
/// 0x5300 and rsp moved there.
fn one_thread_signalled(signalled: bool) -> (Timeline, Vec<u8>) {
    let threads = vec![RecordedThread { tid: 7, history: nops(0x1000, 40) }];
    let deliveries = if signalled { vec![Delivery { thread: 0, index: 26, ip: 0x1234 }] } else { Vec::new() };
    let timeline = Timeline::scheduled(threads, vec![(0, 0, 40)], deliveries);
    let mut w = StateWriter::new();
    w.push(&StateRecord::Zeroed { at: 0, start: 0x5000, length: 0x1000 });
    w.push(&StateRecord::Wrote { at: 0, by_instruction: false, address: 0x5000, bytes: Cow::Borrowed(&[1, 2, 3, 4, 5, 6, 7, 8]) });
    w.push(&StateRecord::FileMapped { at: 0, start: 0x8000, length: 0x3000, offset: 0x800, path: FILE });
    w.push(&StateRecord::Thread(7));
    w.push(&StateRecord::Registers { at: 0, by_instruction: false, changes: vec![(0, 100), (7, 0x5f00), (piece::RFLAGS, 0x44)] });
    let words: Vec<[u8; 8]> = (0..40u8).map(|s| [s; 8]).collect();
    for s in 0..40u64 {
        if s % 7 == 6 {
            // A store of rax's value (before this step sets it), as the
            // instruction's first record: the stream keeps the register's
            // number, not the bytes.
            w.push(&StateRecord::Wrote { at: s + 1, by_instruction: true, address: 0x5040, bytes: Cow::Owned((99 + s).to_le_bytes().to_vec()) });
        }
        w.push(&StateRecord::Registers { at: s + 1, by_instruction: true, changes: vec![(0, 100 + s)] });
        if s % 3 == 0 {
            w.push(&StateRecord::Wrote { at: s + 1, by_instruction: true, address: 0x5000 + (s % 4) * 8, bytes: Cow::Borrowed(&words[s as usize]) });
        }
        if s % 5 == 0 {
            w.push(&StateRecord::Read { at: s + 1, address: 0x5100, size: 8 });
        }
        if s % 11 == 10 {
            // Below rsp (0x5f00): the stream writes it from rsp.
            w.push(&StateRecord::Wrote { at: s + 1, by_instruction: true, address: 0x5ef8, bytes: Cow::Borrowed(&words[s as usize]) });
        }
        if s == 20 {
            w.push(&StateRecord::Wrote { at: s + 1, by_instruction: false, address: 0x5200, bytes: Cow::Borrowed(&[0xaa; 16]) });
            w.push(&StateRecord::Registers { at: s + 1, by_instruction: false, changes: vec![(1, 77)] });
        }
        if s == 25 && signalled {
            w.push(&StateRecord::Registers { at: s + 1, by_instruction: false, changes: vec![(2, 55)] });
            w.push(&StateRecord::SignalDelivered { at: s + 1, signal: 10, ip: 0x1234 });
            w.push(&StateRecord::Wrote { at: s + 1, by_instruction: false, address: 0x5300, bytes: Cow::Borrowed(&[0xbb; 16]) });
            w.push(&StateRecord::Registers { at: s + 1, by_instruction: false, changes: vec![(7, 0x5300), (5, 10)] });
        }
        if s == 30 {
            w.push(&StateRecord::Unmapped { at: s + 1, start: 0x5400, length: 0x100 });
        }
        if s == 35 {
            w.push(&StateRecord::Moved { at: s + 1, from: 0x5000, to: 0x6000, length: 0x10 });
        }
    }
    (timeline, w.finish())
}

fn load(timeline: &Timeline, stream: &[u8], interval: u64) -> RecordedState {
    let mut file = |path: &[u8]| (path == FILE).then(file_bytes);
    RecordedState::load_with_interval(timeline, StreamBytes::Owned(stream.to_vec()), &mut file, interval).unwrap()
}

/// Every record up to `position`, applied in order: the oracle.
fn replayed(timeline: &Timeline, stream: &[u8], position: u64) -> StateMachine {
    let threads: HashMap<u32, usize> = timeline.threads().iter().enumerate().map(|(i, t)| (t.tid as u32, i)).collect();
    let mut clock = Clock::new(timeline, &threads, 0);
    let mut machine = StateMachine::new();
    let data = file_bytes();
    let mut file = |path: &[u8], offset: u64, buf: &mut [u8]| {
        if path != FILE || offset as usize >= data.len() {
            return 0;
        }
        let n = buf.len().min(data.len() - offset as usize);
        buf[..n].copy_from_slice(&data[offset as usize..offset as usize + n]);
        n
    };
    for item in state_records(stream) {
        let (tid, record) = item.unwrap();
        if clock.effect(tid, &record) > position {
            break;
        }
        machine.apply(tid, &record, &mut file);
    }
    machine
}

#[test]
fn registers_and_memory_at_every_position_are_what_a_replay_from_the_start_gives() {
    // Intervals of 1, 3 and 16 positions: checkpoints everywhere, in
    // between, and fewer than the steps.
    for (interval, signalled) in [(1, false), (3, false), (16, false), (1, true), (3, true), (16, true)] {
        let (timeline, stream) = one_thread_signalled(signalled);
        let state = load(&timeline, &stream, interval);
        for position in 0..timeline.len() {
            let oracle = replayed(&timeline, &stream, position);
            let rip = timeline.at(position).unwrap().ip;
            let expected = registers_of(oracle.registers(7).unwrap(), rip);
            assert_eq!(state.registers_at(&timeline, 7, position), Some(expected), "interval {interval}, position {position}");
            for (address, len) in [(0x4ff8u64, 0x30usize), (0x5038, 0x18), (0x5ef0, 0x18), (0x5100, 8), (0x51fc, 0x18), (0x52f8, 0x20), (0x53f0, 0x20), (0x5ff8, 0x20), (0x8000, 0x10), (0x8ff8, 0x10), (0x9ffc, 0x10), (0xa7f0, 0x20), (u64::MAX - 0x1c, 0x20), (u64::MAX - 3, 3)] {
                let mut got = vec![0u8; len];
                let n = state.memory_at(&timeline, position, address, &mut got);
                let mut want = vec![0u8; len];
                let known = oracle.read(address, &mut want);
                assert_eq!((n, &got[..n]), (known, &want[..known]), "interval {interval}, position {position}, {address:#x}");
            }
        }
    }
}

#[test]
fn watched_writes_and_reads_are_found_at_their_steps_both_ways() {
    let (timeline, stream) = one_thread();
    for interval in [1, 3, 16] {
        let state = load(&timeline, &stream, interval);
        let history = Searches { timeline: &timeline, state: &state };
        // Word 1 (0x5008) is written by steps 9, 21, 33 (s % 3 == 0 and s % 4 == 1).
        let word1 = 0x5008..0x5010;
        assert_eq!(history.last_write_before(word1.clone(), 40), Some(33), "interval {interval}");
        assert_eq!(history.last_write_before(word1.clone(), 33), Some(21));
        assert_eq!(history.last_write_before(word1.clone(), 9), None, "the start's writes are no step's");
        assert_eq!(history.first_write_from(word1.clone(), 10), Some(21));
        assert_eq!(history.first_write_from(word1.clone(), 34), None);
        assert!(history.wrote(21, &word1) && !history.wrote(22, &word1));
        // The kernel's write after step 20.
        assert_eq!(history.last_write_before(0x5208..0x5209, 40), Some(20));
        assert_eq!(history.first_write_from(0x5208..0x5209, 0), Some(20));
        // Reads at steps 0, 5, …, 35.
        assert_eq!(history.last_read_before(0x5104..0x5105, 40), Some(35));
        assert_eq!(history.last_read_before(0x5104..0x5105, 35), Some(30));
        assert_eq!(history.first_read_from(0x5100..0x5101, 1), Some(5));
        assert_eq!(history.first_read_from(0x5108..0x5110, 0), None);
    }
}

#[test]
fn a_record_of_one_thread_takes_effect_where_the_stream_stands_among_the_others() {
    // 10 runs 0..10 (positions 0..10), 20 runs 0..5 (10..15), 10 runs
    // 10..20 (15..25). Thread 20's system call result (after its 5
    // steps) is written to the stream after thread 10's step 12 (position
    // 17): it takes effect at 18, not right after thread 20's step.
    let threads = vec![RecordedThread { tid: 10, history: nops(0x1000, 20) }, RecordedThread { tid: 20, history: nops(0x2000, 5) }];
    let timeline = Timeline::interleaved(threads, vec![(0, 0, 10), (1, 0, 5), (0, 10, 10)]);
    let mut w = StateWriter::new();
    w.push(&StateRecord::Zeroed { at: 0, start: 0x5000, length: 0x1000 });
    w.push(&StateRecord::Thread(10));
    for s in 0..13 {
        w.push(&StateRecord::Registers { at: s + 1, by_instruction: true, changes: vec![(0, s)] });
    }
    w.push(&StateRecord::Thread(20));
    w.push(&StateRecord::Wrote { at: 5, by_instruction: false, address: 0x5000, bytes: Cow::Borrowed(&[9]) });
    let stream = w.finish();
    let state = load(&timeline, &stream, 4);
    let byte = |position| {
        let mut b = [0u8];
        assert_eq!(state.memory_at(&timeline, position, 0x5000, &mut b), 1);
        b[0]
    };
    assert_eq!((byte(17), byte(18)), (0, 9));
    let history = Searches { timeline: &timeline, state: &state };
    assert_eq!(history.last_write_before(0x5000..0x5001, 25), Some(17));
    // Thread 10's rax after its step 11 (position 16), before its step 12.
    assert_eq!(state.registers_at(&timeline, 10, 17).unwrap().gpr[0], 11);
}

#[test]
fn a_stream_cut_short_is_served_up_to_the_cut_and_unknown_after() {
    let (timeline, stream) = one_thread();
    // Cut two thirds of the way, inside a record (a store's bytes) or
    // between two (after a store): the stream says where it is damaged
    // (a whole stream ends with its end mark).
    let mut records = state_records(&stream);
    let mut cut = stream.len();
    while let Some(Ok((_, record))) = records.next() {
        if records.offset() > stream.len() * 2 / 3 && matches!(record, StateRecord::Wrote { .. }) {
            cut = records.offset();
            break;
        }
    }
    assert!(cut < stream.len());
    for cut in [cut - 2, cut] {
        let state = load(&timeline, &stream[..cut], 4);
        let mut b = [0u8; 8];
        assert_eq!(state.memory_at(&timeline, 5, 0x5000, &mut b), 8);
        assert!(state.registers_at(&timeline, 7, 5).is_some());
        assert!(state.registers_at(&timeline, 7, 39).is_none() && state.memory_at(&timeline, 39, 0x5000, &mut b) == 0, "cut at {cut}");
    }
    // The whole stream: known to the last position.
    let state = load(&timeline, &stream, 4);
    assert!(state.registers_at(&timeline, 7, 39).is_some());
    // Not a stream at all: refused with the reason.
    let mut file = |_: &[u8]| None;
    let refused = RecordedState::load(&timeline, StreamBytes::Owned(b"PK\x03\x04".to_vec()), &mut file).unwrap_err();
    assert!(refused.contains("not a retrace full-state stream"), "{refused}");
}

#[test]
fn a_signal_delivery_is_a_step_between_the_interrupted_thread_and_its_handler() {
    let (timeline, stream) = one_thread_signalled(true);
    assert_eq!((timeline.len(), timeline.instructions()), (41, 40));
    let delivery = timeline.at(26).unwrap();
    assert_eq!((delivery.delivery, delivery.ip, delivery.index), (true, 0x1234, 26));
    assert_eq!((timeline.at(25).unwrap().ip, timeline.at(27).unwrap().ip), (0x1000 + 25, 0x1000 + 26));
    for interval in [1, 4, 16] {
        let state = load(&timeline, &stream, interval);
        // Standing at the delivery: interrupted at 0x1234, the system
        // call's result in, no frame yet.
        let before = state.registers_at(&timeline, 7, 26).unwrap();
        assert_eq!((before.rip, before.gpr[2], before.gpr[7], before.gpr[5]), (0x1234, 55, 0x5f00, 0), "interval {interval}");
        let after = state.registers_at(&timeline, 7, 27).unwrap();
        assert_eq!((after.rip, after.gpr[2], after.gpr[7], after.gpr[5]), (0x1000 + 26, 55, 0x5300, 10), "interval {interval}");
        let mut frame = [0u8; 16];
        assert_eq!(state.memory_at(&timeline, 26, 0x5300, &mut frame), 16);
        assert_eq!(frame, [0; 16]);
        assert_eq!(state.memory_at(&timeline, 27, 0x5300, &mut frame), 16);
        assert_eq!(frame, [0xbb; 16]);
        // The delivery wrote the frame: a watchpoint there stops before it.
        let history = Searches { timeline: &timeline, state: &state };
        assert_eq!(history.last_write_before(0x5308..0x5309, 41), Some(26));
        assert_eq!(history.first_write_from(0x5308..0x5309, 0), Some(26));
        assert!(history.wrote(26, &(0x5300..0x5301)) && !history.wrote(25, &(0x5300..0x5301)));
        // Instruction 26's own records come after the delivery.
        assert_eq!(state.registers_at(&timeline, 7, 28).unwrap().gpr[0], 126);
    }
}

/// The watched-access searches over one timeline, as the replay asks them.
struct Searches<'a> {
    timeline: &'a Timeline,
    state: &'a RecordedState,
}

impl Searches<'_> {
    fn last_write_before(&self, range: Range<u64>, before: u64) -> Option<u64> {
        self.state.last_write_before(self.timeline, range, before)
    }
    fn first_write_from(&self, range: Range<u64>, from: u64) -> Option<u64> {
        self.state.first_write_from(self.timeline, range, from)
    }
    fn last_read_before(&self, range: Range<u64>, before: u64) -> Option<u64> {
        self.state.last_read_before(self.timeline, range, before)
    }
    fn first_read_from(&self, range: Range<u64>, from: u64) -> Option<u64> {
        self.state.first_read_from(self.timeline, range, from)
    }
    fn wrote(&self, position: u64, range: &Range<u64>) -> bool {
        self.state.wrote(self.timeline, position, range)
    }
}
