//! Fuzzes the replay's index of a bundle's full-state stream
//! (`recorded_state::RecordedState`) the way `retrace-stub --replay` uses
//! it: the input is the stream (after the magic, which is prepended), over
//! a timeline of two threads (tids 7 and 8, 64 and 32 instructions,
//! interleaved); mapped files read as a fixed file of 8 KiB. Every query
//! the stub answers is asked at every position: registers, memory around
//! the addresses the stream names, mappings, the last and first writes and
//! reads. Must never panic, and a stream claiming huge sizes is indexed
//! in bounded memory (no allocation over 256 MiB: allocation_limit).
#![no_main]

#[path = "../../../tests/fuzz/allocation_limit.rs"]
mod allocation_limit;

use libfuzzer_sys::fuzz_target;
use retrace_decoder::full_state::{state_records, StateRecord, STATE_MAGIC};
use retrace_stub::inferior::recorded_state::{RecordedState, StreamBytes};
use retrace_stub::inferior::timeline::{straight_line_history, RecordedThread, Timeline};

fuzz_target!(|data: &[u8]| {
    let threads = vec![RecordedThread { tid: 7, history: straight_line_history(0x1000, 64) }, RecordedThread { tid: 8, history: straight_line_history(0x2000, 32) }];
    let timeline = Timeline::scheduled(threads, vec![(0, 0, 20), (1, 0, 32), (0, 20, 44)], Vec::new());
    let mut stream = STATE_MAGIC.to_vec();
    stream.extend_from_slice(data);
    // The addresses the stream names, to read around.
    let mut addresses = vec![0x1000u64, 0];
    for item in state_records(&stream).take(64) {
        let Ok((_, record)) = item else { break };
        match record {
            StateRecord::Wrote { address, .. } | StateRecord::Read { address, .. } => addresses.push(address),
            StateRecord::Zeroed { start, length, .. } | StateRecord::FileMapped { start, length, .. } | StateRecord::Protected { start, length, .. } => {
                addresses.extend([start, start.wrapping_add(length).wrapping_sub(1)])
            }
            StateRecord::Moved { from, to, .. } => addresses.extend([from, to]),
            _ => {}
        }
    }
    addresses.truncate(12);
    let file: Vec<u8> = (0..8192u32).map(|i| i as u8).collect();
    let Ok(state) = RecordedState::load(&timeline, StreamBytes::Owned(stream), &mut |_| Some(file.clone())) else { return };
    for position in 0..=timeline.len() {
        for tid in [7, 8] {
            let _ = state.registers_at(&timeline, tid, position);
        }
        let _ = state.mappings_at(position);
        for &address in &addresses {
            let mut buf = [0u8; 64];
            let known = state.memory_at(&timeline, position, address.wrapping_sub(8), &mut buf);
            assert!(known <= buf.len());
        }
    }
    for &address in &addresses {
        let range = address..address.saturating_add(8);
        let middle = timeline.len() / 2;
        let _ = state.last_write_before(&timeline, range.clone(), middle);
        let _ = state.first_write_from(&timeline, range.clone(), middle);
        let _ = state.last_read_before(&timeline, range.clone(), middle);
        let _ = state.first_read_from(&timeline, range.clone(), middle);
        let _ = state.touched(&range);
    }
});
