//! Unit tests of the XRay readers on hand-made bytes (the generated and real
//! logs are in the retrace-tests crate).

use super::*;

fn fdr_header(version: u16) -> Vec<u8> {
    let mut bytes = Vec::new();
    bytes.extend_from_slice(&version.to_le_bytes());
    bytes.extend_from_slice(&1u16.to_le_bytes());
    bytes.extend_from_slice(&3u32.to_le_bytes());
    bytes.extend_from_slice(&1_000_000_000u64.to_le_bytes());
    bytes.extend_from_slice(&4096u64.to_le_bytes());
    bytes.extend_from_slice(&[0; 8]);
    bytes
}

fn metadata(kind: u8, body: &[u8]) -> Vec<u8> {
    let mut record = vec![kind << 1 | 1];
    record.extend_from_slice(body);
    record.resize(16, 0xaa);
    record
}

fn function(kind: u32, id: u32, delta: u32) -> Vec<u8> {
    let mut record = (id << 4 | kind << 1).to_le_bytes().to_vec();
    record.extend_from_slice(&delta.to_le_bytes());
    record
}

/// A v5 buffer of thread 7 (pid 5) on CPU 1 from TSC 1000: its records.
fn v5_buffer(body: &[Vec<u8>]) -> Vec<u8> {
    let mut records = Vec::new();
    records.extend(metadata(0, &7u32.to_le_bytes()));
    records.extend(metadata(4, &[1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0]));
    records.extend(metadata(9, &5u32.to_le_bytes()));
    let mut cpu = 1u16.to_le_bytes().to_vec();
    cpu.extend_from_slice(&1000u64.to_le_bytes());
    records.extend(metadata(2, &cpu));
    for record in body {
        records.extend_from_slice(record);
    }
    let mut buffer = metadata(7, &(records.len() as u64).to_le_bytes());
    buffer.extend(records);
    buffer
}

fn read_all(bytes: &[u8]) -> (Vec<Record<'_>>, Vec<XrayError>) {
    let log = Log::parse(bytes).expect("header");
    let (mut records, mut errors) = (Vec::new(), Vec::new());
    for item in log.records() {
        match item {
            Ok(record) => records.push(record),
            Err(error) => errors.push(error),
        }
    }
    (records, errors)
}

#[test]
fn header_fields_and_byte_order() {
    let header = FileHeader::parse(&fdr_header(5)).unwrap();
    assert_eq!((header.version, header.mode, header.endian), (5, Mode::Fdr, Endian::Little));
    assert_eq!((header.constant_tsc, header.nonstop_tsc, header.cycle_frequency), (true, true, 1_000_000_000));
    assert_eq!(header.thread_buffer_size, Some(4096));
    let mut big = fdr_header(5);
    big[..2].copy_from_slice(&5u16.to_be_bytes());
    big[2..4].copy_from_slice(&1u16.to_be_bytes());
    big[8..16].copy_from_slice(&2_500_000_000u64.to_be_bytes());
    let header = FileHeader::parse(&big).unwrap();
    assert_eq!((header.endian, header.cycle_frequency), (Endian::Big, 2_500_000_000));
    // Basic logs: garbage bits above bit 1, no buffer size.
    let mut basic = vec![3, 0, 0, 0, 0xab, 0xaa, 0xaa, 0xaa];
    basic.extend_from_slice(&1_000_000_000u64.to_le_bytes());
    basic.extend_from_slice(&[0xaa; 16]);
    let header = FileHeader::parse(&basic).unwrap();
    assert_eq!((header.mode, header.constant_tsc, header.nonstop_tsc, header.thread_buffer_size), (Mode::Basic, true, true, None));
    assert_eq!(FileHeader::parse(&basic[..31]).unwrap_err().kind, XrayErrorKind::ShortHeader { len: 31 });
    let mut wrong = fdr_header(6);
    wrong[0] = 6;
    assert!(matches!(FileHeader::parse(&wrong).unwrap_err().kind, XrayErrorKind::UnsupportedHeader { version: 6, kind: 1 }));
}

#[test]
fn fdr_v5_records_expand_with_deltas_args_and_events() {
    let mut custom = metadata(5, &[3, 0, 0, 0, 9, 0, 0, 0]);
    custom.extend_from_slice(b"abc");
    let mut typed = metadata(8, &[2, 0, 0, 0, 1, 0, 0, 0, 42, 0]);
    typed.extend_from_slice(b"xy");
    let mut log = fdr_header(5);
    log.extend(v5_buffer(&[
        function(3, 2, 10),
        metadata(6, &77u64.to_le_bytes()),
        metadata(6, &78u64.to_le_bytes()),
        custom,
        typed,
        function(1, 2, 5),
    ]));
    let (records, errors) = read_all(&log);
    assert_eq!(errors, vec![]);
    let summary: Vec<_> = records.iter().map(|r| (r.kind, r.function.0, r.tsc, r.cpu, r.tid, r.pid, r.args.clone(), r.data, r.event_type)).collect();
    assert_eq!(
        summary,
        vec![
            (RecordKind::EnterArg, 2, 1010, 1, 7, Some(5), vec![77, 78], &b""[..], None),
            (RecordKind::CustomEvent, 0, 1019, 1, 7, Some(5), vec![], &b"abc"[..], None),
            (RecordKind::TypedEvent, 0, 1020, 1, 7, Some(5), vec![], &b"xy"[..], Some(42)),
            (RecordKind::Exit, 2, 1025, 1, 7, Some(5), vec![], &b""[..], None),
        ]
    );
    // Offsets: header 32, extents 16, four metadata records.
    assert_eq!(records[0].offset, 32 + 16 + 64);
}

#[test]
fn a_record_cut_by_short_extents_is_reported_and_the_next_buffer_read() {
    let mut log = fdr_header(5);
    let mut first = v5_buffer(&[function(0, 1, 1), function(1, 1, 1)]);
    // The typed-event bug: extents 16 bytes short, and only those bytes written.
    let size = u64::from_le_bytes(first[1..9].try_into().unwrap()) - 4;
    first[1..9].copy_from_slice(&size.to_le_bytes());
    first.truncate(first.len() - 4);
    log.extend(first);
    let second_at = log.len();
    log.extend(v5_buffer(&[function(0, 3, 1)]));
    let (records, errors) = read_all(&log);
    assert_eq!(records.iter().map(|r| (r.kind, r.function.0, r.tsc)).collect::<Vec<_>>(), vec![(RecordKind::Enter, 1, 1001), (RecordKind::Enter, 3, 1001)]);
    assert_eq!(errors.len(), 1);
    assert_eq!(errors[0].offset, second_at - 4);
    assert!(matches!(errors[0].kind, XrayErrorKind::BufferOverrun { needed: 8, available: 4, .. }), "{:?}", errors[0]);
}

#[test]
fn garbage_between_buffers_is_skipped_to_the_next_buffer() {
    let mut log = fdr_header(5);
    log.extend(v5_buffer(&[function(0, 1, 1)]));
    let garbage_at = log.len();
    log.extend_from_slice(&[0x0b, 0xff, 0x13, 0x00, 0x42]);
    log.extend(v5_buffer(&[function(0, 2, 1)]));
    let (records, errors) = read_all(&log);
    assert_eq!(records.iter().map(|r| r.function.0).collect::<Vec<_>>(), vec![1, 2]);
    assert_eq!(errors, vec![XrayError::at(garbage_at, XrayErrorKind::LostSync { skipped: 5 })]);
}

#[test]
fn truncated_files_keep_every_whole_record() {
    let mut log = fdr_header(5);
    log.extend(v5_buffer(&[function(0, 1, 1), function(0, 2, 1), function(1, 2, 1)]));
    for cut in 32..log.len() {
        let (records, errors) = read_all(&log[..cut]);
        // Whole function records before the cut are all there.
        let whole = (cut.saturating_sub(32 + 16 + 64)) / 8;
        assert_eq!(records.len(), whole.min(3), "cut at {cut}");
        assert!(errors.len() <= 1, "cut at {cut}: {errors:?}");
    }
}

#[test]
fn basic_records_and_argument_payloads() {
    let mut log = vec![3, 0, 0, 0, 0xab, 0xaa, 0xaa, 0xaa];
    log.extend_from_slice(&1_000_000_000u64.to_le_bytes());
    log.extend_from_slice(&[0xaa; 16]);
    let normal = |kind: u8, cpu: u8, id: i32, tsc: u64, tid: u32| {
        let mut record = vec![0, 0, cpu, kind];
        record.extend_from_slice(&id.to_le_bytes());
        record.extend_from_slice(&tsc.to_le_bytes());
        record.extend_from_slice(&tid.to_le_bytes());
        record.extend_from_slice(&9u32.to_le_bytes());
        record.resize(32, 0);
        record
    };
    let payload = |id: i32, tid: u32, arg: u64| {
        let mut record = vec![1, 0, 0, 0];
        record.extend_from_slice(&id.to_le_bytes());
        record.extend_from_slice(&tid.to_le_bytes());
        record.extend_from_slice(&9u32.to_le_bytes());
        record.extend_from_slice(&arg.to_le_bytes());
        record.resize(32, 0);
        record
    };
    log.extend(normal(3, 1, 4, 100, 7));
    log.extend(payload(4, 7, 55));
    log.extend(normal(1, 1, 4, 150, 7));
    let bad_at = log.len();
    log.extend(payload(5, 7, 56));
    log.extend(normal(2, 0, 6, 200, 8));
    log.extend_from_slice(&[0; 5]);
    let (records, errors) = read_all(&log);
    let summary: Vec<_> = records.iter().map(|r| (r.kind, r.function.0, r.tsc, r.cpu, r.tid, r.pid, r.args.clone())).collect();
    assert_eq!(
        summary,
        vec![
            (RecordKind::EnterArg, 4, 100, 1, 7, Some(9), vec![55]),
            (RecordKind::Exit, 4, 150, 1, 7, Some(9), vec![]),
            (RecordKind::TailExit, 6, 200, 0, 8, Some(9), vec![]),
        ]
    );
    assert_eq!(
        errors,
        vec![
            XrayError::at(bad_at, XrayErrorKind::UnmatchedArgPayload { function: FunctionId(5), tid: 7 }),
            XrayError::at(bad_at + 64, XrayErrorKind::PartialRecord(5)),
        ]
    );
}

#[test]
fn timeline_matches_exits_unwinds_and_untraced_callers() {
    let record = |kind, function, tsc| Record { offset: 0, kind, function: FunctionId(function), tsc, cpu: 0, tid: 1, pid: None, args: vec![], data: &[], event_type: None };
    use RecordKind::*;
    let records = vec![
        record(Enter, 1, 10),  // 0: f
        record(Enter, 2, 20),  // 1:   g
        record(Enter, 3, 30),  // 2:     h (exit lost)
        record(Exit, 2, 40),   // 3:   g ends, h unwound
        record(Exit, 1, 50),   // 4: f
        record(Exit, 9, 60),   // 5: main, entered before the trace
        record(Enter, 4, 70),  // 6: unfinished
    ];
    let thread = timeline::ThreadTimeline::build(1, None, records);
    let calls: Vec<_> = thread.calls.iter().map(|c| (c.function.0, c.enter, c.exit, c.end, c.children.clone())).collect();
    use timeline::CallEnd;
    assert_eq!(
        calls,
        vec![
            (1, Some(0), Some(4), CallEnd::Exit, vec![1]),
            (2, Some(1), Some(3), CallEnd::Exit, vec![2]),
            (3, Some(2), Some(3), CallEnd::Unwound, vec![]),
            (9, None, Some(5), CallEnd::Exit, vec![0]),
            (4, Some(6), None, CallEnd::Unfinished, vec![]),
        ]
    );
    assert_eq!(thread.roots, vec![3, 4]);
    let counts = thread.complete_calls_by_function();
    assert_eq!(counts.get(&FunctionId(3)), Some(&(1, 10)));
    assert_eq!(counts.get(&FunctionId(9)), None);
}
