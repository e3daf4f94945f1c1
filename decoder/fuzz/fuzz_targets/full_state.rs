//! Fuzzes the full-state stream reader and the machine that replays it:
//! the input is read as a whole stream and as the records after the magic.
//! Must never panic; offsets must increase, nothing may follow an error,
//! and what the reader gives, re-encoded and read again, must be the same
//! records; the machine must read back the bytes a write record gave.
#![no_main]

#[path = "../../../tests/fuzz/allocation_limit.rs"]
mod allocation_limit;

use libfuzzer_sys::fuzz_target;
use retrace_decoder::full_state::{state_records, StateMachine, StateRecord, StateWriter, STATE_MAGIC};

fn check(stream: &[u8]) {
    let mut records = state_records(stream);
    let mut read = Vec::new();
    let mut last_offset = 0;
    let mut ended = false;
    while let Some(item) = records.next() {
        assert!(!ended, "a record after an error");
        match item {
            Ok(record) => {
                assert!(records.offset() > last_offset);
                last_offset = records.offset();
                read.push(record);
            }
            Err(error) => {
                assert!(error.offset <= stream.len());
                ended = true;
            }
        }
    }
    let mut writer = StateWriter::new();
    let mut machine = StateMachine::new();
    let mut file = |_: &[u8], _: u64, buf: &mut [u8]| buf.len().min(100);
    for (tid, record) in read.iter().take(2000) {
        if *record == StateRecord::End {
            // (The writer's `finish` writes it, last.)
            continue;
        }
        writer.push(&StateRecord::Thread(*tid));
        writer.push(record);
        // (Bounded: a fuzzed length may be huge.)
        let small = match record {
            StateRecord::Zeroed { length, .. } | StateRecord::Unmapped { length, .. } | StateRecord::Moved { length, .. } | StateRecord::FileMapped { length, .. } => *length <= 1 << 16,
            _ => true,
        };
        if small {
            machine.apply(*tid, record, &mut file);
        }
        if let StateRecord::Wrote { address, bytes, .. } = record {
            if !bytes.is_empty() && bytes.len() < 4096 && address.checked_add(bytes.len() as u64).is_some() {
                let mut back = vec![0; bytes.len()];
                assert_eq!(machine.read(*address, &mut back), bytes.len());
                assert_eq!(&back[..], &bytes[..]);
            }
        }
    }
    let bytes = writer.finish();
    let again: Vec<_> = state_records(&bytes).map(|r| r.expect("what was written reads back")).collect();
    let expected: Vec<_> = read.iter().take(2000).filter(|(_, r)| !matches!(r, StateRecord::Thread(_) | StateRecord::End)).cloned().collect();
    let again: Vec<_> = again.into_iter().filter(|(_, r)| !matches!(r, StateRecord::Thread(_) | StateRecord::End)).collect();
    assert_eq!(again.len(), expected.len());
    for ((tid_a, a), (tid_b, b)) in again.iter().zip(&expected) {
        assert_eq!(tid_a, tid_b);
        // (`at` can only be kept or raised: a fuzzed stream cannot go back.)
        assert!(a.at() >= b.at());
    }
}

fuzz_target!(|data: &[u8]| {
    check(data);
    let mut stream = STATE_MAGIC.to_vec();
    stream.extend_from_slice(data);
    check(&stream);
});
