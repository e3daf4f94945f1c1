use std::borrow::Cow;

use super::forms::STACK_ACCESS;
use super::*;

/// `records` written into a whole stream (its end mark last).
fn written(records: &[StateRecord<'_>]) -> Vec<u8> {
    let mut writer = StateWriter::new();
    for record in records {
        writer.push(record);
    }
    writer.finish()
}

fn sample() -> Vec<StateRecord<'static>> {
    vec![
        StateRecord::Thread(0),
        StateRecord::Zeroed { at: 0, start: 0x7000, length: 0x1000 },
        StateRecord::Wrote { at: 0, by_instruction: false, address: 0x7ff0, bytes: Cow::Borrowed(b"stack") },
        StateRecord::FileMapped { at: 0, start: 0x400000, length: 0x2000, offset: 0, path: b"/bin/true" },
        StateRecord::Thread(42),
        StateRecord::Scheduled { at: 0 },
        StateRecord::Registers { at: 0, by_instruction: false, changes: vec![(0, 5), (piece::RFLAGS, 0x202), (7, 0x7fff_0000)] },
        StateRecord::Registers { at: 1, by_instruction: true, changes: vec![(0, 3)] },
        StateRecord::Wrote { at: 2, by_instruction: true, address: 0x7fef, bytes: Cow::Borrowed(&[1, 2, 3, 4, 5, 6, 7, 8]) },
        StateRecord::Read { at: 2, address: 0x600010, size: 4 },
        StateRecord::Thread(43),
        StateRecord::Registers { at: 0, by_instruction: false, changes: vec![(0, u64::MAX)] },
        StateRecord::Thread(42),
        StateRecord::Scheduled { at: 3 },
        StateRecord::Registers { at: 9, by_instruction: true, changes: vec![(0, 0), (piece::xmm(3), 0x8000_0000_0000_0000)] },
        StateRecord::Moved { at: 9, from: 0x7000, to: 0x9000, length: 0x1000 },
        StateRecord::Unmapped { at: 9, start: 0x9000, length: 0x1000 },
        StateRecord::SignalDelivered { at: 9, signal: 10, ip: 0x417adb },
        StateRecord::Wrote { at: 9, by_instruction: false, address: 0x7fff_0000 - 0x240, bytes: Cow::Borrowed(&[0xaa; 16]) },
    ]
}

#[test]
fn records_round_trip_with_their_threads_and_small_steps_take_few_bytes() {
    let records = sample();
    let bytes = written(&records);
    let mut thread = 0;
    let expected: Vec<(u32, StateRecord)> = records
        .iter()
        .filter(|r| {
            // A thread record naming the thread already current is not written.
            if let StateRecord::Thread(tid) = r {
                let changed = *tid != thread;
                thread = *tid;
                return changed;
            }
            true
        })
        .scan(0, |tid, r| {
            if let StateRecord::Thread(t) = r {
                *tid = *t;
            }
            Some((*tid, r.clone()))
        })
        .collect();
    let mut read: Vec<(u32, StateRecord)> = state_records(&bytes).map(|r| r.unwrap()).collect();
    assert_eq!(read.pop(), Some((42, StateRecord::End)), "the end mark last");
    assert_eq!(read, expected);
    // An instruction's one register, one step on: a compact tag (the
    // step and the piece in it), one-byte difference; its 8-byte
    // store: tag, address difference, the bytes; its load: tag and
    // address difference.
    let mut small = StateWriter::new();
    small.push(&StateRecord::Registers { at: 1, by_instruction: true, changes: vec![(0, 3)] });
    assert_eq!(small.take_bytes().len(), STATE_MAGIC.len() + 2);
    small.push(&StateRecord::Wrote { at: 1, by_instruction: true, address: 8, bytes: Cow::Borrowed(&[1; 8]) });
    small.push(&StateRecord::Read { at: 2, address: 16, size: 8 });
    assert_eq!(small.take_bytes().len(), 1 + 1 + 8 + 1 + 1);
    // A register and the flags, a step on: the tag and the two
    // differences; a store of rbx's value, a step on: the tag and the
    // address difference; the same store two steps on, or of a value
    // no register holds: the bytes.
    small.push(&StateRecord::Registers { at: 3, by_instruction: true, changes: vec![(1, 0x1234), (piece::RFLAGS, 0x44)] });
    assert_eq!(small.take_bytes().len(), 1 + 2 + 2);
    let rbx = 0x1234u64.to_le_bytes();
    small.push(&StateRecord::Wrote { at: 4, by_instruction: true, address: 24, bytes: Cow::Borrowed(&rbx) });
    assert_eq!(small.take_bytes().len(), 1 + 1);
    small.push(&StateRecord::Wrote { at: 6, by_instruction: true, address: 24, bytes: Cow::Borrowed(&rbx) });
    small.push(&StateRecord::Wrote { at: 7, by_instruction: true, address: 24, bytes: Cow::Borrowed(&[7; 8]) });
    assert_eq!(small.take_bytes().len(), (1 + 1 + 1 + 1 + 8) + (1 + 1 + 8));
    // One piece two and three steps on, or of a piece past 31: as
    // compact as the step allows.
    small.push(&StateRecord::Registers { at: 10, by_instruction: true, changes: vec![(7, 1)] });
    assert_eq!(small.take_bytes().len(), 1 + 1);
    small.push(&StateRecord::Registers { at: 11, by_instruction: true, changes: vec![(piece::xmm(1), 1)] });
    assert_eq!(small.take_bytes().len(), 1 + 1 + 1);
    // On the stack: an 8-byte store and load near rsp take the
    // difference from rsp (tag, one byte, the bytes), and leave the
    // last address where it was: the next load there is one byte on.
    small.push(&StateRecord::Registers { at: 12, by_instruction: true, changes: vec![(7, 0x7fff_0000)] });
    small.take_bytes();
    small.push(&StateRecord::Wrote { at: 12, by_instruction: true, address: 0x7fff_0000 - 8, bytes: Cow::Borrowed(&[5; 8]) });
    small.push(&StateRecord::Read { at: 13, address: 0x7fff_0000 - 8, size: 8 });
    assert_eq!(small.take_bytes().len(), (1 + 1 + 8) + (1 + 1));
    small.push(&StateRecord::Read { at: 13, address: 24, size: 8 });
    assert_eq!(small.take_bytes().len(), 1 + 1);
    // And every form reads back as written.
    let records = [
        StateRecord::Registers { at: 0, by_instruction: true, changes: vec![(7, 0x7fff_0000)] },
        StateRecord::Wrote { at: 0, by_instruction: true, address: 0x7fff_0000 - 8, bytes: Cow::Borrowed(&[5; 8]) },
        StateRecord::Read { at: 1, address: 0x7fff_0000 + 16, size: 8 },
        StateRecord::Registers { at: 1, by_instruction: true, changes: vec![(0, 3)] },
        StateRecord::Registers { at: 2, by_instruction: true, changes: vec![(1, 0x1234), (piece::RFLAGS, 0x44)] },
        StateRecord::Wrote { at: 3, by_instruction: true, address: 24, bytes: Cow::Borrowed(&rbx) },
        StateRecord::Wrote { at: 5, by_instruction: true, address: 24, bytes: Cow::Borrowed(&rbx) },
        StateRecord::Registers { at: 8, by_instruction: true, changes: vec![(31, u64::MAX)] },
        StateRecord::Registers { at: 9, by_instruction: true, changes: vec![(16, 2), (1, 5)] },
        StateRecord::Wrote { at: 10, by_instruction: true, address: 0, bytes: Cow::Borrowed(&[0; 8]) },
    ];
    let bytes = written(&records);
    let read: Vec<StateRecord> = state_records(&bytes).map(|r| r.unwrap().1).filter(|r| *r != StateRecord::End).collect();
    assert_eq!(read, records);
    assert!(bytes[STATE_MAGIC.len()..].iter().any(|&tag| tag >= 0x80) && bytes.contains(&0x31) && bytes.contains(&0x61), "the compact forms were taken");
    assert!(bytes.contains(&STACK_ACCESS) && bytes.contains(&(STACK_ACCESS | 3)), "the stack forms were taken");
    // Eight pieces, or a step of more than one: the long form.
    let eight: Vec<(u8, u64)> = (0..8).map(|p| (p, 1)).collect();
    let records = [
        StateRecord::Registers { at: 3, by_instruction: true, changes: eight },
        StateRecord::Wrote { at: 5, by_instruction: true, address: 8, bytes: Cow::Borrowed(&[2; 3]) },
        StateRecord::Read { at: 5, address: 9, size: 16 },
    ];
    let bytes = written(&records);
    assert_eq!(bytes[STATE_MAGIC.len()], b'R');
    let read: Vec<StateRecord> = state_records(&bytes).map(|r| r.unwrap().1).filter(|r| *r != StateRecord::End).collect();
    assert_eq!(read, records);
    // A stream of before the end mark reads to where its bytes end.
    let mut unmarked = bytes[..bytes.len() - 1].to_vec();
    unmarked[..STATE_MAGIC.len()].copy_from_slice(STATE_MAGIC_UNMARKED);
    let read: Vec<StateRecord> = state_records(&unmarked).map(|r| r.unwrap().1).collect();
    assert_eq!(read, records);
}

#[test]
fn reading_resumed_from_any_position_reads_what_follows_it() {
    let bytes = written(&sample());
    let all: Vec<(u32, StateRecord)> = state_records(&bytes).map(|r| r.unwrap()).collect();
    let mut records = state_records(&bytes);
    for k in 0..=all.len() {
        let position = records.position();
        let rest: Vec<(u32, StateRecord)> = StateRecords::resume(&bytes, &position).map(|r| r.unwrap()).collect();
        assert_eq!(rest, all[k..], "resumed after {k} records");
        records.next();
    }
}

#[test]
fn the_machine_knows_what_records_gave_and_nothing_else() {
    let mut machine = StateMachine::new();
    let mut no_file = |_: &[u8], _: u64, _: &mut [u8]| 0;
    for (tid, record) in [
        (0, StateRecord::Zeroed { at: 0, start: 0x1000, length: 0x2000 }),
        (0, StateRecord::Wrote { at: 0, by_instruction: false, address: 0x1ffe, bytes: Cow::Borrowed(&[1, 2, 3, 4]) }),
        (7, StateRecord::Registers { at: 0, by_instruction: false, changes: vec![(0, 10), (piece::RFLAGS, 2)] }),
        (7, StateRecord::Registers { at: 1, by_instruction: true, changes: vec![(0, 11)] }),
    ] {
        machine.apply(tid, &record, &mut no_file);
    }
    assert_eq!((machine.register(7, 0), machine.register(7, piece::RFLAGS), machine.register(7, 1), machine.register(8, 0)), (Some(11), Some(2), None, None));
    let mut buf = [9u8; 8];
    assert_eq!(machine.read(0x1ffc, &mut buf), 8);
    assert_eq!(buf, [0, 0, 1, 2, 3, 4, 0, 0]);
    // Unmapped: unknown; moved: known where it went.
    machine.apply(0, &StateRecord::Moved { at: 1, from: 0x1000, to: 0x5000, length: 0x1000 }, &mut no_file);
    assert_eq!(machine.read(0x1000, &mut buf), 0);
    assert_eq!(machine.read(0x5ffc, &mut buf), 4);
    assert_eq!(&buf[..4], &[0, 0, 1, 2]);
    machine.apply(0, &StateRecord::Unmapped { at: 1, start: 0x2000, length: 1 }, &mut no_file);
    assert_eq!(machine.read(0x1fff, &mut buf[..2]), 0);
    // A file shorter than its mapping: zeros to its page's end, then unknown.
    let mut file = |path: &[u8], offset: u64, buf: &mut [u8]| {
        assert_eq!((path, offset), (&b"/data"[..], 0x10));
        buf[..3].copy_from_slice(b"abc");
        3
    };
    machine.apply(0, &StateRecord::FileMapped { at: 1, start: 0x9000, length: 0x2000, offset: 0x10, path: b"/data" }, &mut file);
    assert_eq!(machine.read(0x9000, &mut buf), 8);
    assert_eq!(&buf, b"abc\0\0\0\0\0");
    assert_eq!(machine.read(0x9ffe, &mut buf), 2);
    assert_eq!(machine.known_runs(0x9ffe, 0x10), vec![(0x9ffe, vec![0, 0])]);
    assert_eq!(machine.known_runs(0x5ffa, 8), vec![(0x5ffa, vec![0, 0, 0, 0, 1, 2])]);
}

#[test]
fn the_schedule_is_each_threads_runs_in_order() {
    let mut writer = StateWriter::new();
    for (tid, at) in [(5, 0), (6, 0), (5, 10), (6, 4), (5, 12)] {
        writer.push(&StateRecord::Thread(tid));
        writer.push(&StateRecord::Scheduled { at });
        if tid == 6 {
            writer.push(&StateRecord::SignalDelivered { at: at + 1, signal: 10 + at as u32, ip: 0x1000 + at });
        }
    }
    let schedule = schedule(&writer.finish()).unwrap();
    assert_eq!(schedule.runs, vec![(5, 0, Some(10)), (6, 0, Some(4)), (5, 10, Some(2)), (6, 4, None), (5, 12, None)]);
    assert_eq!(schedule.deliveries, vec![Delivery { tid: 6, at: 1, signal: 10, ip: 0x1000 }, Delivery { tid: 6, at: 5, signal: 14, ip: 0x1004 }]);
}

#[test]
fn damage_is_reported_at_its_offset_and_ends_the_records() {
    let bytes = written(&sample());
    // A cut anywhere, between two records too, is one error, the last
    // item, at or before the cut.
    for cut in STATE_MAGIC.len()..bytes.len() {
        let items: Vec<_> = state_records(&bytes[..cut]).collect();
        let errors: Vec<_> = items.iter().filter_map(|r| r.as_ref().err()).collect();
        assert!(errors.len() == 1 && items.last().is_some_and(|r| r.is_err()), "cut at {cut}");
        assert!(errors[0].offset <= cut, "cut at {cut}: {}", errors[0]);
    }
    assert!(state_records(&bytes).all(|r| r.is_ok()));
    // Anything after the end mark is an error there.
    let mut longer = bytes.clone();
    longer.extend([b'S', 0]);
    let errors: Vec<_> = state_records(&longer).filter_map(Result::err).collect();
    assert_eq!(errors.iter().map(|e| e.offset).collect::<Vec<_>>(), [bytes.len()]);
    let mut bad = bytes.clone();
    bad[STATE_MAGIC.len()] = 0x01;
    let error = state_records(&bad).next().unwrap().unwrap_err();
    assert_eq!(error.offset, STATE_MAGIC.len());
    assert!(state_records(b"RTVGLOG2").next().unwrap().is_err());
}
