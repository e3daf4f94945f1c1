//! The log's reading and conversion on hand-made logs: damaged ones, read
//! piece by piece, faults, limits, and runs against single instructions.

use super::log::ENTERED_NEXT;
use super::*;

fn superblock(id: u32, instructions: &[(u64, &[u8])]) -> Vec<u8> {
    superblock_with_exits(id, instructions, &[])
}

/// A superblock with side exits `(index of the instruction, to)`.
fn superblock_with_exits(id: u32, instructions: &[(u64, &[u8])], exits: &[(u16, u64)]) -> Vec<u8> {
    let mut out = vec![b'B'];
    out.extend(id.to_le_bytes());
    out.extend(instructions[0].0.to_le_bytes());
    out.extend(0u64.to_le_bytes());
    out.extend((instructions.len() as u16).to_le_bytes());
    for (ip, bytes) in instructions {
        out.extend(ip.to_le_bytes());
        out.push(bytes.len() as u8);
        out.extend(*bytes);
    }
    out.extend((exits.len() as u16).to_le_bytes());
    for (index, to) in exits {
        out.extend(index.to_le_bytes());
        out.extend(to.to_le_bytes());
    }
    out
}

fn entered(id: u32) -> Vec<u8> {
    let mut out = vec![b'E'];
    out.extend(id.to_le_bytes());
    out.push(0);
    out
}

fn left_at(exit: u16) -> Vec<u8> {
    let mut out = vec![b'X'];
    out.extend(exit.to_le_bytes());
    out
}

/// The program's end at `ip`: thread `number` ended there (`Q`), and the
/// log's last record (`F`).
fn ended_at(number: u32, ip: u64) -> Vec<u8> {
    let mut out = vec![b'Q'];
    out.extend(number.to_le_bytes());
    out.extend(ip.to_le_bytes());
    out.push(b'F');
    out.extend(ip.to_le_bytes());
    out
}

/// A whole (intact) log converted with its full-state stream.
fn converted_with_full_state(log: &[u8]) -> crate::recording::ImageRecording {
    let mut converter = LogConverter::new(DEFAULT_PSB_PERIOD, true).with_full_state(true);
    for record in log_records(log) {
        converter.feed(record.unwrap()).unwrap();
    }
    converter.finish().0
}

fn thread(number: u32, tid: u32) -> Vec<u8> {
    let mut out = vec![b'T'];
    out.extend(number.to_le_bytes());
    out.extend(tid.to_le_bytes());
    out
}

/// A loop: `0x1000: dec ecx; 0x1002: jnz 0x1000; 0x1004: rep movsb;
/// 0x1006: syscall`, entered three times around, the REP twice.
fn loop_log() -> Vec<u8> {
    let mut log = LOG_MAGIC.to_vec();
    log.extend(thread(1, 77));
    // dec ecx ; jnz -4 (0x75 0xfc) ; rep movsb ; syscall
    log.extend(superblock_with_exits(0, &[(0x1000, &[0xff, 0xc9]), (0x1002, &[0x75, 0xfc]), (0x1004, &[0xf3, 0xa4])], &[(1, 0x1000)]));
    log.extend(entered(0));
    log.extend(left_at(0)); // left at the jnz (taken)
    log.push(0x81); // superblock 0 again, as predicted, and left there again
    log.extend(entered(0)); // ran through: the jnz fell through, one REP iteration
    log.extend(superblock(1, &[(0x1004, &[0xf3, 0xa4]), (0x1006, &[0x0f, 0x05])]));
    log.extend(entered(1)); // a second REP iteration, then the system call
    log.extend([b'Q', 1, 0, 0, 0]);
    log.extend(0x1008u64.to_le_bytes());
    log
}

#[test]
fn superblocks_and_exits_become_the_instruction_flow() {
    let ConvertedLog { image, undecodable, warnings, .. } = convert_log(&loop_log(), DEFAULT_PSB_PERIOD, true, None);
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(undecodable, 0);
    assert_eq!(image.threads.len(), 1);
    let thread = &image.threads[0];
    assert_eq!(thread.tid, 77);
    // The REP string instruction counts once, as Intel PT counts it.
    assert_eq!(thread.instruction_log.as_deref(), Some(&[0x1000, 0x1002, 0x1000, 0x1002, 0x1000, 0x1002, 0x1004, 0x1006][..]));
    assert_eq!(thread.instructions, 8);
    // The Intel PT decodes to the same flow.
    let mut img = retrace_decoder::image::Image::new();
    img.add_raw("code", 0x1000, vec![0xff, 0xc9, 0x75, 0xfc, 0xf3, 0xa4, 0x0f, 0x05]);
    let decoded: Vec<u64> = retrace_decoder::flow::FlowDecoder::new(&thread.trace, &img)
        .decode_all()
        .into_iter()
        .filter_map(|item| match item {
            retrace_decoder::item::Item::Instruction { ip } => Some(ip),
            _ => None,
        })
        .collect();
    assert_eq!(decoded, vec![0x1000, 0x1002, 0x1000, 0x1002, 0x1000, 0x1002, 0x1004, 0x1006]);
}

/// A reader handing out `step` bytes at a time.
struct Trickle<'a> {
    bytes: &'a [u8],
    step: usize,
}

impl std::io::Read for Trickle<'_> {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        let n = self.step.min(out.len()).min(self.bytes.len());
        out[..n].copy_from_slice(&self.bytes[..n]);
        self.bytes = &self.bytes[n..];
        Ok(n)
    }
}

#[test]
fn a_log_read_piece_by_piece_converts_as_a_whole() {
    let mut log = loop_log();
    log.splice(8..8, [b'P', 7, 0, 0, 0]);
    let whole = convert_log(&log, DEFAULT_PSB_PERIOD, true, None);
    for step in [1, 2, 3, 7, 64, 4096] {
        let (pid, streamed) = convert_stream(&mut Trickle { bytes: &log, step }, LogConverter::new(DEFAULT_PSB_PERIOD, true), |_| true).unwrap();
        assert_eq!(pid, Some(7));
        assert!(streamed.warnings.is_empty(), "{:?}", streamed.warnings);
        assert_eq!(streamed.image.threads[0].trace, whole.image.threads[0].trace, "step {step}");
        assert_eq!(streamed.image.threads[0].instruction_log, whole.image.threads[0].instruction_log);
    }
    // Cut short and damaged: the error names the offset.
    let (_, cut) = convert_stream(&mut Trickle { bytes: &log[..log.len() - 3], step: 5 }, LogConverter::new(DEFAULT_PSB_PERIOD, false), |_| true).unwrap();
    assert_eq!(cut.warnings.len(), 1);
    assert!(cut.warnings[0].contains("cut short"), "{:?}", cut.warnings);
    let mut damaged = log.clone();
    damaged[8 + 5 + 9] = 0x7e;
    let (_, bad) = convert_stream(&mut Trickle { bytes: &damaged, step: 3 }, LogConverter::new(DEFAULT_PSB_PERIOD, false), |_| true).unwrap();
    assert_eq!(bad.warnings, vec!["Valgrind log at byte 22: unknown record tag 0x7e".to_string()]);
    // Another process's log is read through and left out.
    let (pid, other) = convert_stream(&mut Trickle { bytes: &log, step: 4 }, LogConverter::new(DEFAULT_PSB_PERIOD, false), |pid| pid != 7).unwrap();
    assert_eq!(pid, Some(7));
    assert!(other.image.threads.is_empty());
}

/// Damaged copies of a log (bytes flipped, cut, inserted): never a
/// panic, and whole and piecewise reading agree (the fuzz target
/// `collector/fuzz` does the same over any input).
#[test]
fn damaged_logs_never_panic() {
    let mut log = loop_log();
    log.splice(8..8, [b'P', 7, 0, 0, 0]);
    let mut state = 0x9e37_79b9u64;
    let mut random = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for _ in 0..2000 {
        let mut damaged = log.clone();
        for _ in 0..1 + random() % 4 {
            let at = 8 + (random() as usize) % (damaged.len() - 8);
            match random() % 3 {
                0 => damaged[at] = random() as u8,
                1 => damaged.truncate(at),
                _ => damaged.insert(at, random() as u8),
            }
            if damaged.len() <= 8 {
                break;
            }
        }
        let whole = convert_log(&damaged, 64, true, None);
        let (_, streamed) = convert_stream(&mut Trickle { bytes: &damaged, step: 1 + (random() % 9) as usize }, LogConverter::new(64, true), |_| true).unwrap();
        assert_eq!(whole.image.threads.len(), streamed.image.threads.len());
        for (a, b) in whole.image.threads.iter().zip(&streamed.image.threads) {
            assert_eq!(a.trace, b.trace);
        }
        assert_eq!(whole.warnings.len(), streamed.warnings.len(), "{:?} / {:?}", whole.warnings, streamed.warnings);
    }
}

/// Random logs over superblocks of plain instructions, conditional
/// branches, calls, returns, REP and system calls, entered as predicted
/// and not, left by their ends and side exits, with thread switches,
/// signals and foreign code between: the straight runs computed once per
/// way out write exactly what converting instruction by instruction
/// writes (one PSB, so the bytes compare).
#[test]
fn straight_runs_write_what_single_instructions_write() {
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut random = move |n: u64| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state % n
    };
    for round in 0..40 {
        let mut log = LOG_MAGIC.to_vec();
        log.extend(thread(1, 100));
        // (entry, ways' targets)
        let mut blocks: Vec<(u64, Vec<u64>)> = Vec::new();
        let count = 2 + random(10) as usize;
        let mut entries: Vec<u64> = (0..count as u64).map(|i| 0x10000 + i * 0x100).collect();
        // Where calls return to (superblocks of their own, as after a
        // return), found as the first superblocks are made.
        let mut landings: Vec<u64> = Vec::new();
        let mut returns_to: Vec<Vec<Option<u64>>> = Vec::new();
        let mut id = 0;
        loop {
            if id == count {
                landings.sort();
                landings.dedup();
                entries.extend(&landings);
            }
            let Some(&entry) = entries.get(id) else { break };
            let mut code: Vec<(u64, Vec<u8>)> = Vec::new();
            let mut exits = Vec::new();
            let mut ip = entry;
            for i in 0..1 + random(8) {
                let last = i > 0 && random(4) == 0;
                let bytes: Vec<u8> = match random(if last { 9 } else { 5 }) {
                    0 | 1 => vec![0x90],
                    2 => vec![0x75, 0x10],
                    3 => vec![0xe8, 0x10, 0, 0, 0],
                    4 => vec![0xe8, 0, 0, 0, 0],
                    5 => vec![0xc3],
                    6 => vec![0x0f, 0x05],
                    7 => vec![0xf3, 0xa4],
                    _ => vec![0xff, 0xe0],
                };
                if bytes[0] == 0x75 {
                    exits.push((code.len() as u16, entries[random(count as u64) as usize]));
                }
                let len = bytes.len() as u64;
                if bytes[0] == 0xe8 && id < count {
                    landings.push(ip + len);
                }
                code.push((ip, bytes));
                ip += len;
                if last {
                    break;
                }
            }
            let kind = code.last().unwrap().1[0];
            let next = if matches!(kind, 0xc3 | 0x0f | 0xff) { 0 } else { entries[random(count as u64) as usize] };
            let listed: Vec<(u64, &[u8])> = code.iter().map(|(ip, b)| (*ip, &b[..])).collect();
            let mut out = superblock_with_exits(id as u32, &listed, &exits);
            out[13..21].copy_from_slice(&next.to_le_bytes());
            log.extend(out);
            blocks.push((entry, std::iter::once(next).chain(exits.iter().map(|e| e.1)).collect()));
            // The last call each way out runs, where it returns to.
            let ends = std::iter::once(code.len()).chain(exits.iter().map(|e| e.0 as usize + 1));
            returns_to.push(ends.map(|end| code[..end].iter().rev().find(|(_, b)| b[0] == 0xe8 && b[1] != 0).map(|(ip, _)| ip + 5)).collect::<Vec<_>>());
            id += 1;
        }
        let all = entries.len() as u64;
        let mut predicted: Option<u64> = None;
        // Where the latest call returns to: most returns go there.
        let mut call_returns_to: Option<u64> = None;
        for _ in 0..2000 {
            match random(40) {
                0 => {
                    log.extend(thread(1 + random(2) as u32, 100));
                    predicted = None;
                }
                1 => {
                    log.push(b'S');
                    log.extend(10u32.to_le_bytes());
                    log.extend(entries[random(count as u64) as usize].to_le_bytes());
                    predicted = None;
                }
                2 => {
                    log.push(b'G');
                    predicted = None;
                }
                _ => {
                    let landing = call_returns_to.and_then(|at| blocks.iter().position(|b| b.0 == at));
                    let id = match (predicted, landing) {
                        (Some(at), _) if random(8) != 0 => blocks.iter().position(|b| b.0 == at).unwrap(),
                        (None, Some(landing)) if random(4) != 0 => landing,
                        _ => random(all) as usize,
                    };
                    let way = random(blocks[id].1.len() as u64) as usize;
                    let in_byte = random(5) != 0;
                    match predicted {
                        Some(at) if at == blocks[id].0 => log.push(ENTERED_NEXT | if in_byte { way as u8 } else { 0 }),
                        _ => {
                            log.extend(entered(id as u32));
                            *log.last_mut().unwrap() = if in_byte { way as u8 } else { 0 };
                        }
                    }
                    if !in_byte && way != 0 {
                        log.extend(left_at(way as u16 - 1));
                    }
                    predicted = Some(blocks[id].1[way]).filter(|&to| to != 0);
                    call_returns_to = returns_to[id][way].or(call_returns_to);
                }
            }
        }
        let convert = |fast: bool| {
            let mut converter = LogConverter::new(1 << 30, true);
            converter.fast = fast;
            convert_stream(&mut &log[..], converter, |_| true).unwrap().1
        };
        let (fast, slow) = (convert(true), convert(false));
        assert!(fast.warnings.is_empty() && slow.warnings.is_empty(), "{:?} {:?}", fast.warnings, slow.warnings);
        assert_eq!(fast.image.threads.len(), slow.image.threads.len());
        for (a, b) in fast.image.threads.iter().zip(&slow.image.threads) {
            assert_eq!(a.instructions, b.instructions, "round {round}");
            assert_eq!(a.instruction_log, b.instruction_log, "round {round}");
            assert_eq!(a.trace, b.trace, "round {round}");
        }
        assert!(fast.image.threads.iter().map(|t| t.instructions).sum::<u64>() > 1000);
    }
}

#[test]
fn a_fault_ends_the_superblock_before_the_faulting_instruction() {
    // nop; mov [rax], ecx (faults); nop — then the handler's nop.
    let code: [(u64, &[u8]); 3] = [(0x1000, &[0x90]), (0x1001, &[0x89, 0x08]), (0x1003, &[0x90])];
    let mut log = LOG_MAGIC.to_vec();
    log.extend(thread(1, 5));
    log.extend(superblock(0, &code));
    log.extend(superblock(1, &[(0x2000, &[0x90])]));
    log.extend(entered(0));
    log.push(b'S');
    log.extend(11u32.to_le_bytes());
    log.extend(0x1001u64.to_le_bytes());
    log.extend(entered(1));
    let converted = convert_log(&log, DEFAULT_PSB_PERIOD, true, None);
    assert_eq!(converted.image.threads[0].instruction_log.as_deref(), Some(&[0x1000, 0x2000][..]));
    // A signal sent from outside at the same place is not a fault: the
    // superblock ran to its end first.
    let mut sent = log.clone();
    let at = sent.len() - 5 - 12;
    sent[at + 1..at + 5].copy_from_slice(&10u32.to_le_bytes());
    let converted = convert_log(&sent, DEFAULT_PSB_PERIOD, true, None);
    assert_eq!(converted.image.threads[0].instruction_log.as_deref(), Some(&[0x1000, 0x1001, 0x1003, 0x2000][..]));
    // A fatal fault: the log ends at the faulting instruction.
    let mut crash = LOG_MAGIC.to_vec();
    crash.extend(thread(1, 5));
    crash.extend(superblock(0, &code));
    crash.extend(entered(0));
    crash.push(b'F');
    crash.extend(0x1001u64.to_le_bytes());
    let converted = convert_log(&crash, DEFAULT_PSB_PERIOD, true, None);
    assert_eq!(converted.image.threads[0].instruction_log.as_deref(), Some(&[0x1000][..]));
    let packets: Vec<_> = retrace_decoder::packet::PacketDecoder::new(&converted.image.threads[0].trace).collect();
    assert!(format!("{packets:?}").contains("Fup"), "{packets:?}");
}

#[test]
fn a_fatal_signal_is_the_full_state_streams_last_delivery_and_an_exit_is_none() {
    use retrace_decoder::full_state::{state_records, StateRecord};
    // nop; mov [rax], ecx (faults, fatally); nop.
    let code: [(u64, &[u8]); 3] = [(0x1000, &[0x90]), (0x1001, &[0x89, 0x08]), (0x1003, &[0x90])];
    let mut log = LOG_MAGIC.to_vec();
    log.extend(thread(1, 5));
    log.extend(superblock(0, &code));
    log.extend(superblock(1, &[(0x2000, &[0x90])]));
    log.extend(entered(1));
    log.extend(entered(0));
    log.extend(ended_at(1, 0x1001));
    let image = converted_with_full_state(&log);
    // Two steps ran (0x2000's nop, 0x1000's), and the thread stood at
    // 0x1001 when the signal ended the program.
    assert_eq!(image.threads[0].instruction_log.as_deref(), Some(&[0x2000, 0x1000][..]));
    let stream = image.full_state.unwrap().bytes;
    let deliveries: Vec<StateRecord> = state_records(&stream).map(|r| r.unwrap().1).filter(|r| matches!(r, StateRecord::SignalDelivered { .. })).collect();
    assert_eq!(deliveries, [StateRecord::SignalDelivered { at: 2, signal: 0, ip: 0x1001 }]);
    // An exit system call ends it: no delivery.
    let mut log = LOG_MAGIC.to_vec();
    log.extend(thread(1, 5));
    log.extend(superblock(0, &[(0x1000, &[0x90]), (0x1001, &[0x0f, 0x05])]));
    log.extend(entered(0));
    log.extend(ended_at(1, 0x1003));
    let image = converted_with_full_state(&log);
    assert_eq!(image.threads[0].instruction_log.as_deref(), Some(&[0x1000, 0x1001][..]));
    assert!(!state_records(&image.full_state.unwrap().bytes).any(|r| matches!(r.unwrap().1, StateRecord::SignalDelivered { .. })));
}

#[test]
fn a_stream_stored_as_it_grows_is_the_stream_kept_in_memory() {
    // The loop many times over, stored every 16 bytes.
    let mut log = LOG_MAGIC.to_vec();
    log.extend(thread(1, 77));
    log.extend(superblock_with_exits(0, &[(0x1000, &[0xff, 0xc9]), (0x1002, &[0x75, 0xfc])], &[(1, 0x1000)]));
    for _ in 0..3000 {
        log.extend(entered(0));
        log.extend(left_at(0));
    }
    let folder = std::env::temp_dir().join(format!("retrace-spill-test-{}", std::process::id()));
    std::fs::create_dir_all(&folder).unwrap();
    let whole = convert_log(&log, 256, false, None);
    let (_, stored) = convert_stream(&mut Trickle { bytes: &log, step: 100 }, LogConverter::new(256, false).with_spill(Some(folder.clone()), 16), |_| true).unwrap();
    let thread = &stored.image.threads[0];
    let (file, _) = thread.trace_file.as_ref().expect("stored");
    let mut bytes = std::fs::read(file).unwrap();
    assert!(bytes.len() > 400 && thread.trace.len() < 64, "{} stored, {} kept", bytes.len(), thread.trace.len());
    bytes.extend(&thread.trace);
    assert_eq!(bytes, whole.image.threads[0].trace);
    assert_eq!(thread.trace_len(), bytes.len());
    std::fs::remove_dir_all(&folder).unwrap();
}

#[test]
fn the_limit_keeps_the_first_instructions() {
    let converted = convert_log(&loop_log(), DEFAULT_PSB_PERIOD, true, Some(5));
    assert!(converted.limited);
    assert_eq!(converted.image.threads[0].instruction_log.as_deref(), Some(&[0x1000, 0x1002, 0x1000, 0x1002, 0x1000][..]));
    assert_eq!(converted.image.threads[0].instructions, 5);
    // A conditional branch last is left out: where it went is not in
    // the part kept.
    let converted = convert_log(&loop_log(), DEFAULT_PSB_PERIOD, true, Some(6));
    assert_eq!(converted.image.threads[0].instruction_log.as_deref(), Some(&[0x1000, 0x1002, 0x1000, 0x1002, 0x1000][..]));
    assert_eq!(converted.image.threads[0].instructions, 5);
}

#[test]
fn a_cut_or_damaged_log_is_an_error_at_its_offset() {
    let log = loop_log();
    // Cut inside the second superblock record.
    let cut = &log[..log.len() - 8];
    let errors: Vec<LogError> = log_records(cut).filter_map(Result::err).collect();
    assert_eq!(errors.len(), 1);
    assert!(errors[0].what.contains("cut short"), "{errors:?}");
    assert_eq!(convert_log(cut, DEFAULT_PSB_PERIOD, false, None).warnings.len(), 1);
    let mut damaged = log.clone();
    damaged[8 + 9] = 0x7e; // the first superblock's tag
    let errors: Vec<LogError> = log_records(&damaged).filter_map(Result::err).collect();
    assert_eq!(errors, vec![LogError { offset: 17, what: "unknown record tag 0x7e".into() }]);
    assert_eq!(log_records(b"nonsense").next(), Some(Err(LogError { offset: 0, what: "not a retrace Valgrind log (no RTVGLOG2)".into() })));
}

#[test]
fn a_signal_stops_tracing_before_the_interrupted_instruction() {
    let mut log = LOG_MAGIC.to_vec();
    log.extend(thread(1, 5));
    log.extend(superblock(0, &[(0x1000, &[0x90]), (0x1001, &[0x90])]));
    log.extend(superblock(1, &[(0x2000, &[0x90])]));
    log.extend(entered(0));
    log.push(b'S');
    log.extend(10u32.to_le_bytes());
    log.extend(0x1002u64.to_le_bytes());
    log.extend(entered(1));
    let ConvertedLog { image, warnings, .. } = convert_log(&log, DEFAULT_PSB_PERIOD, true, None);
    assert!(warnings.is_empty());
    let thread = &image.threads[0];
    assert_eq!(thread.instruction_log.as_deref(), Some(&[0x1000, 0x1001, 0x2000][..]));
    let packets: Vec<_> = retrace_decoder::packet::PacketDecoder::new(&thread.trace).collect();
    let text = format!("{packets:?}");
    assert!(text.contains("Fup") && text.contains("TipPgd") && text.contains("TipPge"), "{text}");
}

#[test]
fn a_signal_delivered_is_marked_in_the_full_state_between_the_interrupted_state_and_the_frame() {
    use retrace_decoder::full_state::{state_records, StateRecord};
    let registers = |number: u32, changes: &[(u8, u64)]| {
        let mut out = vec![b'r'];
        out.extend(number.to_le_bytes());
        out.push(changes.len() as u8);
        for (piece, value) in changes {
            out.push(*piece);
            out.extend(value.to_le_bytes());
        }
        out
    };
    let mut log = LOG_MAGIC.to_vec();
    log.extend(thread(1, 77));
    // nop ; syscall (0x1001), then the handler at 0x2000.
    log.extend(superblock(0, &[(0x1000, &[0x90]), (0x1001, &[0x0f, 0x05])]));
    log.extend(superblock(1, &[(0x2000, &[0x90])]));
    log.extend(entered(0));
    // The system call's result, then the signal it raised, delivered
    // before 0x1003: its frame and the handler's registers.
    log.extend(registers(1, &[(0, 0)]));
    log.push(b'S');
    log.extend(10u32.to_le_bytes());
    log.extend(0x1003u64.to_le_bytes());
    log.push(b'K');
    log.extend(1u32.to_le_bytes());
    log.extend(0x7000u64.to_le_bytes());
    log.extend(4u64.to_le_bytes());
    log.extend([1, 2, 3, 4]);
    log.extend(registers(1, &[(5, 10), (7, 0x7000)]));
    log.extend(entered(1));
    let image = converted_with_full_state(&log);
    assert_eq!(image.threads[0].instruction_log.as_deref(), Some(&[0x1000, 0x1001, 0x2000][..]));
    let stream = image.full_state.unwrap().bytes;
    let mut records: Vec<_> = state_records(&stream).map(|r| r.unwrap()).filter(|(_, r)| !matches!(r, StateRecord::Thread(_) | StateRecord::Scheduled { .. })).collect();
    assert_eq!(records.pop().map(|(_, r)| r), Some(StateRecord::End), "the conversion ends the stream with its end mark");
    assert_eq!(
        records,
        vec![
            (77, StateRecord::Registers { at: 2, by_instruction: false, changes: vec![(0, 0)] }),
            (77, StateRecord::SignalDelivered { at: 2, signal: 10, ip: 0x1003 }),
            (77, StateRecord::Wrote { at: 2, by_instruction: false, address: 0x7000, bytes: std::borrow::Cow::Borrowed(&[1, 2, 3, 4]) }),
            (77, StateRecord::Registers { at: 2, by_instruction: false, changes: vec![(5, 10), (7, 0x7000)] }),
        ]
    );
}

#[test]
fn every_iteration_of_a_rep_unrolled_by_vex_is_the_one_step_of_the_rep() {
    use retrace_decoder::full_state::{state_records, StateRecord};
    let wrote = |index: u16, address: u64| {
        let mut out = vec![b'W'];
        out.extend(index.to_le_bytes());
        out.extend(address.to_le_bytes());
        out.extend(1u16.to_le_bytes());
        out.push(0x41);
        out
    };
    let rep_stosb: &[u8] = &[0xf3, 0xaa];
    let mut log = LOG_MAGIC.to_vec();
    log.extend(thread(1, 77));
    // nop ; rep stosb (its first iteration) ...
    log.extend(superblock_with_exits(0, &[(0x1000, &[0x90]), (0x1001, rep_stosb)], &[(1, 0x1003)]));
    // ... then VEX's unrolled superblock: four iterations of the REP in one
    // (each with its exit once rcx is 0) ...
    let unrolled = [(0x1001, rep_stosb); 4];
    log.extend(superblock_with_exits(1, &unrolled, &[(0, 0x1003), (1, 0x1003), (2, 0x1003), (3, 0x1003)]));
    // ... and what follows: nop ; syscall.
    log.extend(superblock(2, &[(0x1003, &[0x90]), (0x1004, &[0x0f, 0x05])]));
    log.extend(entered(0));
    log.extend(wrote(1, 0x5000));
    log.extend(entered(1));
    for (index, address) in [(0, 0x5001), (1, 0x5002), (2, 0x5003), (3, 0x5004)] {
        log.extend(wrote(index, address));
    }
    // Entered again: two more iterations, the third finds rcx 0.
    log.extend(entered(1));
    log.extend(wrote(0, 0x5005));
    log.extend(wrote(1, 0x5006));
    log.extend(left_at(2));
    log.extend(entered(2));
    log.extend(wrote(0, 0x6000));
    log.extend([b'Q', 1, 0, 0, 0]);
    log.extend(0x1006u64.to_le_bytes());
    let image = converted_with_full_state(&log);
    // Intel PT counts the REP once: nop, rep, nop, syscall.
    assert_eq!(image.threads[0].instruction_log.as_deref(), Some(&[0x1000, 0x1001, 0x1003, 0x1004][..]));
    let stream = image.full_state.unwrap().bytes;
    let writes: Vec<(u64, u64)> = state_records(&stream)
        .map(|r| r.unwrap().1)
        .filter_map(|r| match r {
            StateRecord::Wrote { at, address, .. } => Some((address, at)),
            _ => None,
        })
        .collect();
    // Every store of the REP is its step's (1, so at 2); the nop after it
    // is step 2.
    let rep = (0x5000..0x5007).map(|address| (address, 2));
    assert_eq!(writes, rep.chain([(0x6000, 3)]).collect::<Vec<_>>());
}

#[test]
fn a_rep_interrupted_between_iterations_is_not_counted_and_its_iterations_are_what_the_delivery_sees() {
    use retrace_decoder::full_state::{state_records, StateRecord};
    let registers = |tag: u8, index: u16, rcx: u64| {
        let mut out = vec![tag];
        out.extend(index.to_le_bytes());
        out.push(1);
        out.push(2);
        out.extend(rcx.to_le_bytes());
        out
    };
    let rep_stosb: &[u8] = &[0xf3, 0xaa];
    let mut log = LOG_MAGIC.to_vec();
    log.extend(thread(1, 77));
    // nop ; rep stosb: two iterations, then the third faults (SIGSEGV at
    // the REP); the handler (nop at 0x2000) runs; the REP runs on.
    log.extend(superblock_with_exits(0, &[(0x1000, &[0x90]), (0x1001, rep_stosb)], &[(1, 0x1003)]));
    log.extend(superblock_with_exits(1, &[(0x1001, rep_stosb); 4], &[(0, 0x1003), (1, 0x1003), (2, 0x1003), (3, 0x1003)]));
    log.extend(superblock(2, &[(0x2000, &[0x90])]));
    log.extend(superblock(3, &[(0x1003, &[0x90]), (0x1004, &[0x0f, 0x05])]));
    log.extend(entered(0));
    log.extend(registers(b'R', 1, 9));
    log.extend(entered(1));
    log.extend(registers(b'R', 0, 8));
    // The thread's registers as the delivery finds them (as the tool logs
    // them before the signal).
    log.push(b'r');
    log.extend(1u32.to_le_bytes());
    log.extend([1, 2]);
    log.extend(77u64.to_le_bytes());
    log.push(b'S');
    log.extend(11u32.to_le_bytes());
    log.extend(0x1001u64.to_le_bytes());
    log.extend(entered(2));
    log.extend(registers(b'R', 0, 100));
    log.extend(entered(1));
    log.extend(registers(b'R', 0, 7));
    log.extend(left_at(1));
    log.extend(entered(3));
    log.extend([b'Q', 1, 0, 0, 0]);
    log.extend(0x1006u64.to_le_bytes());
    let image = converted_with_full_state(&log);
    // nop, (the REP, interrupted: not counted), the handler's nop, the REP
    // run to its end, nop, syscall.
    assert_eq!(image.threads[0].instruction_log.as_deref(), Some(&[0x1000, 0x2000, 0x1001, 0x1003, 0x1004][..]));
    let stream = image.full_state.unwrap().bytes;
    let records: Vec<StateRecord> = state_records(&stream).map(|r| r.unwrap().1).filter(|r| matches!(r, StateRecord::Registers { .. } | StateRecord::SignalDelivered { .. })).collect();
    let rcx = |at, value| StateRecord::Registers { at, by_instruction: true, changes: vec![(2, value)] };
    assert_eq!(
        records,
        vec![
            // The iterations before the fault: after the nop (step 0),
            // where the delivery stands.
            rcx(1, 9),
            rcx(1, 8),
            StateRecord::Registers { at: 1, by_instruction: false, changes: vec![(2, 77)] },
            StateRecord::SignalDelivered { at: 1, signal: 11, ip: 0x1001 },
            // The handler's nop is step 1; the REP, step 2.
            rcx(2, 100),
            rcx(3, 7),
        ]
    );
}
