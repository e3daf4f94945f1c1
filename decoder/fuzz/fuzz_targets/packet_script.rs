//! Fuzzes the packet-script parser and encoder: no input may panic.
#![no_main]

#[path = "../../../tests/fuzz/allocation_limit.rs"]
mod allocation_limit;

use libfuzzer_sys::fuzz_target;
use retrace_decoder::packet::script;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(items) = script::parse(text) {
            let _ = script::encode(&items);
        }
    }
});
